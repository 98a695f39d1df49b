/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * hmb_trace_fw.c - the ring producer of docs/abi.md in freestanding C11.
 *
 * It mirrors abi::reference::RefRing::produce and firmware-model's Producer
 * step for step (the host tests compare them byte for byte). Every field
 * offset comes from the uapi structs through offsetof; the assertions below
 * pin what this code relies on, so a change of the uapi header that breaks
 * an assumption fails the build instead of corrupting rings.
 *
 * Values are encoded little-endian byte by byte, so the library is also
 * correct on a big-endian core, and never type-puns host memory.
 */
#include "hmb_trace_fw.h"

/*
 * <string.h> is not a freestanding header: declare the two functions the
 * firmware provides (the standard prototypes, so a firmware that includes
 * <string.h> too sees no conflict).
 */
void *memcpy(void *restrict dst, const void *restrict src, size_t n);
void *memset(void *dst, int c, size_t n);

#define FOFF(s, f) offsetof(struct s, f)
#define FSZ(s, f) sizeof(((struct s *)0)->f)

/* Ring header fields the library reads or writes: 8-byte fields must be
 * 8-aligned (one transaction each, decision 10), flags 4-aligned. */
#define HDR_U64(f) \
	_Static_assert(FSZ(hmb_ring_hdr, f) == 8 && FOFF(hmb_ring_hdr, f) % 8 == 0, \
		       "hmb_ring_hdr." #f " is an aligned 64-bit field")
HDR_U64(ring_size);
HDR_U64(epoch);
HDR_U64(head);
HDR_U64(next_seq);
HDR_U64(dropped_records);
HDR_U64(overflow_events);
HDR_U64(tail);
_Static_assert(FSZ(hmb_ring_hdr, magic) == 4, "magic is 32-bit");
_Static_assert(FSZ(hmb_ring_hdr, version_major) == 2, "version_major is 16-bit");
_Static_assert(FSZ(hmb_ring_hdr, hdr_size) == 4, "hdr_size is 32-bit");
_Static_assert(FSZ(hmb_ring_hdr, max_record) == 4, "max_record is 32-bit");
_Static_assert(FSZ(hmb_ring_hdr, flags) == 4 && FOFF(hmb_ring_hdr, flags) % 4 == 0,
	       "flags is an aligned 32-bit field");
_Static_assert(sizeof(struct hmb_ring_hdr) <= HMB_RING_HDR_SIZE, "header fits its page");

/* One writer per cache line (decision 6): everything the producer writes
 * lies in the line of head, and tail lies in another line. */
#define PLINE(off) ((off) / 64)
#define IN_PRODUCER_LINE(f) \
	_Static_assert(PLINE(FOFF(hmb_ring_hdr, f)) == PLINE(FOFF(hmb_ring_hdr, head)), \
		       "hmb_ring_hdr." #f " is on the producer's line")
IN_PRODUCER_LINE(flags);
IN_PRODUCER_LINE(next_seq);
IN_PRODUCER_LINE(dropped_records);
IN_PRODUCER_LINE(overflow_events);
_Static_assert(PLINE(FOFF(hmb_ring_hdr, tail)) != PLINE(FOFF(hmb_ring_hdr, head)),
	       "tail is not on the producer's line");

/* Record header: the fields the library encodes, and their widths. */
_Static_assert(sizeof(struct hmb_record_hdr) == HMB_RECORD_HDR_SIZE, "record header size");
_Static_assert(FSZ(hmb_record_hdr, length) == 4, "record length is 32-bit");
_Static_assert(FSZ(hmb_record_hdr, opcode) == 2, "record opcode is 16-bit");
_Static_assert(FSZ(hmb_record_hdr, flags) == 2, "record flags is 16-bit");
_Static_assert(FSZ(hmb_record_hdr, seq) == 8, "record seq is 64-bit");
_Static_assert(FSZ(hmb_record_hdr, timestamp_ns) == 8, "record timestamp is 64-bit");
_Static_assert(FSZ(hmb_record_hdr, source) == 4, "record source is 32-bit");
_Static_assert(FSZ(hmb_record_hdr, reserved) == 4, "record reserved is 32-bit");

/* Geometry the wrap rule (decision 3) relies on. */
_Static_assert(HMB_RING_ALIGN == 8, "align8 below assumes 8-byte records");
_Static_assert(HMB_RECORD_HDR_SIZE % HMB_RING_ALIGN == 0, "header keeps alignment");
_Static_assert(HMB_RECORD_MAX_SIZE == HMB_RECORD_HDR_SIZE + HMB_RECORD_MAX_PAYLOAD,
	       "max record = header + max payload");
_Static_assert(HMB_RING_MIN_SIZE >= 2 * HMB_RECORD_MAX_SIZE,
	       "an empty ring holds the largest filler plus the largest record");
_Static_assert((HMB_RING_MIN_SIZE & (HMB_RING_MIN_SIZE - 1)) == 0, "min ring size is a power of two");

/* Records up to this size go to the host in one write (a 64-byte event:
 * one DMA descriptor). Larger ones take header, payload and padding. */
#define STAGE_BYTES 64u
_Static_assert(STAGE_BYTES >= HMB_RECORD_HDR_SIZE + HMB_RING_ALIGN, "stage holds a header");

static void put16(uint8_t *b, uint16_t v)
{
	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *b, uint32_t v)
{
	for (unsigned i = 0; i < 4; i++)
		b[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *b, uint64_t v)
{
	put32(b, (uint32_t)v);
	put32(b + 4, (uint32_t)(v >> 32));
}

static uint16_t get16(const uint8_t *b)
{
	return (uint16_t)(b[0] | (b[1] << 8));
}

static uint32_t get32(const uint8_t *b)
{
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static uint64_t get64(const uint8_t *b)
{
	return (uint64_t)get32(b) | (uint64_t)get32(b + 4) << 32;
}

static uint32_t align_record(uint32_t payload_len)
{
	return (HMB_RECORD_HDR_SIZE + payload_len + (HMB_RING_ALIGN - 1)) & ~(uint32_t)(HMB_RING_ALIGN - 1);
}

/* One 8-byte write: the only way head (and the counters) reach the host. */
static void store64(const hmbt_producer *p, size_t field, uint64_t v)
{
	uint8_t b[8];

	put64(b, v);
	p->hooks.write(p->hooks.ctx, p->slice + field, b, 8);
}

static void store_flags(hmbt_producer *p, uint32_t flags)
{
	uint8_t b[4];

	p->flags = flags;
	put32(b, flags);
	/* Release: every earlier write (head included) before the flags. */
	p->hooks.fence(p->hooks.ctx);
	p->hooks.write(p->hooks.ctx, p->slice + FOFF(hmb_ring_hdr, flags), b, 4);
}

int hmbt_attach(hmbt_producer *p, const hmbt_hooks *hooks, uint64_t slice_addr,
		uint64_t slice_len, uint64_t generation)
{
	uint8_t h[sizeof(struct hmb_ring_hdr)];
	uint64_t ring_size, head, tail;

	if (!p)
		return HMBT_E_ARG;
	p->attached = 0;
	if (!hooks || !hooks->write || !hooks->read || !hooks->fence)
		return HMBT_E_ARG;
	if (slice_addr % HMB_RING_ALIGN != 0)
		return HMBT_E_ARG;
	p->hooks = *hooks;
	p->hooks.read(p->hooks.ctx, slice_addr, h, sizeof(h));

	if (get32(h + FOFF(hmb_ring_hdr, magic)) != HMB_RING_MAGIC)
		return HMBT_E_MAGIC;
	if (get16(h + FOFF(hmb_ring_hdr, version_major)) != HMB_RING_VERSION_MAJOR)
		return HMBT_E_VERSION;
	ring_size = get64(h + FOFF(hmb_ring_hdr, ring_size));
	if (get32(h + FOFF(hmb_ring_hdr, hdr_size)) != HMB_RING_HDR_SIZE ||
	    get32(h + FOFF(hmb_ring_hdr, max_record)) != HMB_RECORD_MAX_SIZE ||
	    ring_size < HMB_RING_MIN_SIZE || ring_size > HMB_RING_MAX_SIZE ||
	    (ring_size & (ring_size - 1)) != 0 || slice_len != HMB_RING_HDR_SIZE + ring_size)
		return HMBT_E_GEOMETRY;
	p->epoch = get64(h + FOFF(hmb_ring_hdr, epoch));
	if (generation != 0 && p->epoch != generation)
		return HMBT_E_EPOCH;
	head = get64(h + FOFF(hmb_ring_hdr, head));
	tail = get64(h + FOFF(hmb_ring_hdr, tail));
	if (head % HMB_RING_ALIGN != 0 || tail % HMB_RING_ALIGN != 0 || tail > head ||
	    head - tail > ring_size)
		return HMBT_E_WINDOW;
	p->flags = get32(h + FOFF(hmb_ring_hdr, flags));
	if (p->flags & HMB_RING_FLAG_FROZEN)
		return HMBT_E_FROZEN;

	p->slice = slice_addr;
	p->data = slice_addr + HMB_RING_HDR_SIZE;
	p->ring_size = ring_size;
	p->mask = ring_size - 1;
	p->head = head;
	p->tail_cache = tail;
	p->next_seq = get64(h + FOFF(hmb_ring_hdr, next_seq));
	p->dropped = get64(h + FOFF(hmb_ring_hdr, dropped_records));
	p->overflow_events = get64(h + FOFF(hmb_ring_hdr, overflow_events));
	p->attached = 1;
	return HMBT_OK;
}

/*
 * Free bytes, re-reading tail (one 8-byte read) only when the cached value
 * says fewer than `need` are free: tail only grows, so the decision is the
 * one a read every time would give. A tail that is no possible consumer
 * position (misaligned, beyond head, more than a ring behind) comes from a
 * broken host, or a torn read on a platform that breaks the hook contract:
 * the ring counts as full, so unread data is never overwritten.
 */
static uint64_t free_for(hmbt_producer *p, uint64_t need)
{
	uint8_t b[8];
	uint64_t tail, used;

	if (p->ring_size - (p->head - p->tail_cache) >= need)
		return p->ring_size - (p->head - p->tail_cache);
	p->hooks.read(p->hooks.ctx, p->slice + FOFF(hmb_ring_hdr, tail), b, 8);
	tail = get64(b);
	used = p->head - tail;
	if (used > p->ring_size || tail % HMB_RING_ALIGN != 0)
		return 0;
	p->tail_cache = tail;
	return p->ring_size - used;
}

/* Decision 4: seq already consumed; count it and raise OVERFLOWED. */
static hmbt_result drop(hmbt_producer *p)
{
	p->dropped++;
	store64(p, FOFF(hmb_ring_hdr, next_seq), p->next_seq);
	store64(p, FOFF(hmb_ring_hdr, dropped_records), p->dropped);
	if (!(p->flags & HMB_RING_FLAG_OVERFLOWED)) {
		p->overflow_events++;
		store64(p, FOFF(hmb_ring_hdr, overflow_events), p->overflow_events);
		store_flags(p, p->flags | HMB_RING_FLAG_OVERFLOWED);
	}
	return HMBT_DROPPED;
}

hmbt_result hmbt_emit_ts(hmbt_producer *p, uint16_t opcode, uint32_t source,
			 uint64_t timestamp_ns, const void *payload, uint32_t len)
{
	uint8_t stage[STAGE_BYTES];
	uint64_t seq, room, filler, cursor, off;
	uint32_t size;

	if (!p->attached || (p->flags & HMB_RING_FLAG_FROZEN))
		return HMBT_FROZEN;
	seq = p->next_seq++;
	if (len > HMB_RECORD_MAX_PAYLOAD || (len && !payload))
		return drop(p);
	size = align_record(len);
	/* Decision 3: a record never straddles the ring end. */
	room = p->ring_size - (p->head & p->mask);
	filler = room >= size ? 0 : room;
	if (free_for(p, filler + size) < filler + size)
		return drop(p);

	if (filler >= HMB_RECORD_HDR_SIZE) {
		/* PAD: length = room - 32, flags = PAD, every other field 0. */
		memset(stage, 0, HMB_RECORD_HDR_SIZE);
		put32(stage + FOFF(hmb_record_hdr, length), (uint32_t)(filler - HMB_RECORD_HDR_SIZE));
		put16(stage + FOFF(hmb_record_hdr, flags), HMB_RECORD_FLAG_PAD);
		p->hooks.write(p->hooks.ctx, p->data + (p->head & p->mask), stage, HMB_RECORD_HDR_SIZE);
	}
	/* 8, 16 or 24 bytes of room are skipped: nothing is written there. */
	cursor = p->head + filler;
	off = cursor & p->mask;

	memset(stage, 0, sizeof(stage));
	put32(stage + FOFF(hmb_record_hdr, length), len);
	put16(stage + FOFF(hmb_record_hdr, opcode), opcode);
	put64(stage + FOFF(hmb_record_hdr, seq), seq);
	put64(stage + FOFF(hmb_record_hdr, timestamp_ns), timestamp_ns);
	put32(stage + FOFF(hmb_record_hdr, source), source);
	if (size <= STAGE_BYTES) {
		if (len)
			memcpy(stage + HMB_RECORD_HDR_SIZE, payload, len);
		p->hooks.write(p->hooks.ctx, p->data + off, stage, size);
	} else {
		uint32_t tail_pad = size - HMB_RECORD_HDR_SIZE - len;

		p->hooks.write(p->hooks.ctx, p->data + off, stage, HMB_RECORD_HDR_SIZE);
		p->hooks.write(p->hooks.ctx, p->data + off + HMB_RECORD_HDR_SIZE, payload, len);
		if (tail_pad) {
			static const uint8_t zero[HMB_RING_ALIGN];

			p->hooks.write(p->hooks.ctx, p->data + off + HMB_RECORD_HDR_SIZE + len, zero,
				       tail_pad);
		}
	}

	/* Decision 6: record bytes, next_seq, fence, head (one 8-byte write),
	 * then flags with release if this write ends an overflow. */
	p->head = cursor + size;
	store64(p, FOFF(hmb_ring_hdr, next_seq), p->next_seq);
	p->hooks.fence(p->hooks.ctx);
	store64(p, FOFF(hmb_ring_hdr, head), p->head);
	if (p->flags & HMB_RING_FLAG_OVERFLOWED)
		store_flags(p, p->flags & ~(uint32_t)HMB_RING_FLAG_OVERFLOWED);
	return HMBT_WRITTEN;
}

hmbt_result hmbt_emit(hmbt_producer *p, uint16_t opcode, uint32_t source, const void *payload,
		      uint32_t len)
{
	uint64_t ts = 0;

	if (!p->attached || (p->flags & HMB_RING_FLAG_FROZEN))
		return HMBT_FROZEN;
	if (p->hooks.timestamp_ns)
		ts = p->hooks.timestamp_ns(p->hooks.ctx);
	return hmbt_emit_ts(p, opcode, source, ts, payload, len);
}

void hmbt_freeze(hmbt_producer *p)
{
	if (!p->attached || (p->flags & HMB_RING_FLAG_FROZEN))
		return;
	/* Decision 5: FROZEN after the last head write (store_flags fences). */
	store_flags(p, p->flags | HMB_RING_FLAG_FROZEN);
}

void hmbt_detach(hmbt_producer *p)
{
	p->attached = 0;
}
