/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * hmb_trace_fw.h - freestanding C11 producer of the hmb-trace ring (ABI v1)
 * for SSD firmware.
 *
 * The ring layout is the uapi header kmod/include/uapi/linux/nvme_hmb_trace.h
 * (docs/abi.md is its specification); this library includes it and never
 * restates an offset. Build with both directories on the include path:
 *
 *   -I firmware-sdk/compat -I kmod/include/uapi -I firmware-sdk/include
 *
 * (compat/ supplies <linux/types.h> for a target without kernel headers.)
 *
 * No heap, no libc beyond memcpy/memset, no 64-bit division. The producer
 * state is a plain struct the firmware allocates (statically, one per ring).
 * One producer per ring: the ring is single-producer (docs/firmware-sdk.md).
 *
 * Every access to host memory goes through the hooks below, so the same code
 * runs over a DMA engine, a PCIe outbound window, or plain memory in tests.
 * docs/firmware-sdk.md states the hook contracts; the one that matters most
 * (docs/abi.md decision 10): a read or write of exactly 8 bytes at an
 * 8-aligned host address is ONE transaction (one DMA descriptor, one TLP),
 * never split into two 4-byte halves. The library issues head through
 * exactly one such write and reads tail through exactly one such read.
 */
#ifndef HMB_TRACE_FW_H
#define HMB_TRACE_FW_H

#include <stddef.h>
#include <stdint.h>

#include <linux/nvme_hmb_trace.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Platform hooks, supplied by the firmware. `ctx` is passed back unchanged. */
typedef struct hmbt_hooks {
	/*
	 * Write `len` bytes to host address `addr`. Returns when the bytes are
	 * on their way (posted); `fence` orders them. A call with len == 8 at
	 * an 8-aligned addr must reach host memory as one transaction; a call
	 * with len == 4 at a 4-aligned addr likewise (flags).
	 */
	void (*write)(void *ctx, uint64_t addr, const void *src, uint32_t len);
	/*
	 * Read `len` bytes from host address `addr` (blocking). Used for the
	 * ring header at attach (192 bytes) and for tail: len == 8 at an
	 * 8-aligned addr must be one transaction with acquire semantics (the
	 * read completes before any later data write is issued).
	 */
	void (*read)(void *ctx, uint64_t addr, void *dst, uint32_t len);
	/*
	 * Order: every write issued before the fence is visible to the host
	 * before any write issued after it (a DMA-completion wait, `dmb`/`dsb`
	 * on a device-mapped window, a PCIe flush read...). Called before the
	 * head write and before every flags write.
	 */
	void (*fence)(void *ctx);
	/* Device clock in nanoseconds; only hmbt_emit() calls it. May be NULL. */
	uint64_t (*timestamp_ns)(void *ctx);
	void *ctx;
} hmbt_hooks;

/*
 * Producer state: private to the library (fields named here only so the
 * firmware can allocate it without a heap). Zero-initialised means detached.
 */
typedef struct hmbt_producer {
	hmbt_hooks hooks;
	uint64_t slice;		/* host address of the ring header */
	uint64_t data;		/* slice + HMB_RING_HDR_SIZE */
	uint64_t ring_size;
	uint64_t mask;
	uint64_t epoch;
	uint64_t head;
	uint64_t tail_cache;
	uint64_t next_seq;
	uint64_t dropped;
	uint64_t overflow_events;
	uint32_t flags;		/* the flags word last written */
	uint32_t attached;
} hmbt_producer;

/* hmbt_attach() results: 0 or a negative reason. */
enum hmbt_attach_err {
	HMBT_OK = 0,
	HMBT_E_ARG = -1,	/* NULL pointer, missing hook, misaligned slice */
	HMBT_E_MAGIC = -2,	/* header magic is not HMB_RING_MAGIC */
	HMBT_E_VERSION = -3,	/* version_major is not HMB_RING_VERSION_MAJOR */
	HMBT_E_GEOMETRY = -4,	/* hdr_size, max_record, ring_size or slice_len wrong */
	HMBT_E_EPOCH = -5,	/* epoch differs from the advert's generation */
	HMBT_E_WINDOW = -6,	/* head/tail in the header are not a valid window */
	HMBT_E_FROZEN = -7,	/* the header says FROZEN: wait for a new advert */
};

/* Outcome of one production attempt (docs/abi.md decision 4). */
typedef enum hmbt_result {
	HMBT_WRITTEN = 0,	/* written and published */
	HMBT_DROPPED = 1,	/* no room or too large: seq used, counted */
	HMBT_FROZEN = 2,	/* FROZEN or detached: nothing happened, no seq used */
} hmbt_result;

/*
 * Attach to the ring an adopted advert describes: `slice_addr` is the host
 * address (as the DMA engine writes it) of the ring header, `slice_len`
 * the advert's slice_len and `generation` its generation (0: not checked).
 * Reads and validates the header through hooks->read and picks up head,
 * next_seq, the counters and OVERFLOWED from it. Also the way to start a
 * new epoch after a re-initialisation: attach again with the new advert.
 */
int hmbt_attach(hmbt_producer *p, const hmbt_hooks *hooks, uint64_t slice_addr,
		uint64_t slice_len, uint64_t generation);

/*
 * Produce one record; never blocks, never overwrites unread data. `len` is
 * the payload length (HMB_RECORD_MAX_PAYLOAD at most; larger is a drop).
 * hmbt_emit() stamps it with hooks->timestamp_ns (0 if NULL).
 */
hmbt_result hmbt_emit(hmbt_producer *p, uint16_t opcode, uint32_t source,
		      const void *payload, uint32_t len);
hmbt_result hmbt_emit_ts(hmbt_producer *p, uint16_t opcode, uint32_t source,
			 uint64_t timestamp_ns, const void *payload, uint32_t len);

/*
 * Controller reset: set FROZEN as the last write of this epoch and stop.
 * Every later emit returns HMBT_FROZEN until hmbt_attach() with a new advert.
 * Call it after the last emit has returned (emit is not reentrant).
 */
void hmbt_freeze(hmbt_producer *p);

/* Withdrawn advert: stop without writing anything more to the slice. */
void hmbt_detach(hmbt_producer *p);

/* Cursors, for firmware statistics. */
static inline uint64_t hmbt_head(const hmbt_producer *p) { return p->head; }
static inline uint64_t hmbt_next_seq(const hmbt_producer *p) { return p->next_seq; }
static inline uint64_t hmbt_dropped(const hmbt_producer *p) { return p->dropped; }
static inline uint64_t hmbt_overflow_events(const hmbt_producer *p) { return p->overflow_events; }
static inline int hmbt_is_frozen(const hmbt_producer *p)
{
	return !p->attached || (p->flags & HMB_RING_FLAG_FROZEN) != 0;
}

#ifdef __cplusplus
}
#endif

#endif /* HMB_TRACE_FW_H */
