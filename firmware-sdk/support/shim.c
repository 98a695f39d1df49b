/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Host-test shim: tells the Rust side the size and alignment of the C
 * structs it allocates, so they are never mirrored by hand. Not part of
 * the firmware library.
 */
#include "hmb_trace_fw.h"

size_t hmbt_test_sizeof_producer(void) { return sizeof(hmbt_producer); }
size_t hmbt_test_alignof_producer(void) { return _Alignof(hmbt_producer); }
size_t hmbt_test_sizeof_hooks(void) { return sizeof(hmbt_hooks); }

/*
 * The cursors for a Rust owner of the producer (hmb-nvme-trace's C
 * producer): the header's accessors are static inline, so FFI cannot call
 * them, and the state struct is not mirrored in Rust.
 */
uint64_t hmbt_ffi_head(const hmbt_producer *p) { return hmbt_head(p); }
uint64_t hmbt_ffi_next_seq(const hmbt_producer *p) { return hmbt_next_seq(p); }
uint64_t hmbt_ffi_dropped(const hmbt_producer *p) { return hmbt_dropped(p); }
uint64_t hmbt_ffi_epoch(const hmbt_producer *p) { return p->epoch; }
uint64_t hmbt_ffi_ring_size(const hmbt_producer *p) { return p->ring_size; }
int hmbt_ffi_is_frozen(const hmbt_producer *p) { return hmbt_is_frozen(p); }
