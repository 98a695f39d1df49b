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
