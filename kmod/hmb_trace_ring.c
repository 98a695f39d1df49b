// SPDX-License-Identifier: GPL-2.0
/*
 * The module's side of ring ABI v1: initialising a
 * header and reading/writing the few fields it touches, with the memory
 * ordering docs/abi.md requires. Ring memory is shared with a device that
 * runs concurrently, so every shared field goes through these helpers.
 */
#include <linux/kernel.h>
#include <linux/string.h>
#include <linux/log2.h>
#include <linux/minmax.h>
#include <linux/sizes.h>
#include <linux/sched.h>
#include <asm/barrier.h>
#include <asm/byteorder.h>

#include "hmb_trace.h"

/* Zeroing granule: about a millisecond of memset between reschedules. */
#define HMB_RING_ZERO_CHUNK	SZ_1M

bool hmb_ring_size_valid(u64 ring_size)
{
	return is_power_of_2(ring_size) && ring_size >= HMB_RING_MIN_SIZE &&
	       ring_size <= HMB_RING_MAX_SIZE;
}

/*
 * Write a fresh header page for @epoch. The device must not be writing the
 * slice (no READY advert and the withdrawal acknowledged, or FROZEN). The
 * data area is left as it is: nothing at or beyond head is ever read, so
 * records of an earlier epoch cannot look valid, and re-initialising a
 * 1 GiB ring stays a 4 KiB write.
 */
void hmb_ring_init(void *slice, u64 ring_size, u64 epoch)
{
	struct hmb_ring_hdr *hdr = slice;

	memset(slice, 0, HMB_RING_HDR_SIZE);
	hdr->magic = (__force __u32)cpu_to_le32(HMB_RING_MAGIC);
	hdr->version_major = (__force __u16)cpu_to_le16(HMB_RING_VERSION_MAJOR);
	hdr->version_minor = (__force __u16)cpu_to_le16(HMB_RING_VERSION_MINOR);
	hdr->hdr_size = (__force __u32)cpu_to_le32(HMB_RING_HDR_SIZE);
	hdr->max_record = (__force __u32)cpu_to_le32(HMB_RECORD_MAX_SIZE);
	hdr->ring_size = (__force __u64)cpu_to_le64(ring_size);
	hdr->epoch = (__force __u64)cpu_to_le64(epoch);
	/* The advert's release store (in the glue) publishes all of this. */
}

/*
 * Zero the data area once, when the slice is first carved (a previous
 * user's bytes are not handed to the consumer). Up to 1 GiB: in chunks,
 * rescheduling between them, never under a lock.
 */
void hmb_ring_zero_data(void *slice, u64 ring_size)
{
	u64 off;

	might_sleep();
	for (off = 0; off < ring_size; off += HMB_RING_ZERO_CHUNK) {
		memset(slice + HMB_RING_HDR_SIZE + off, 0,
		       min_t(u64, HMB_RING_ZERO_CHUNK, ring_size - off));
		cond_resched();
	}
}

/* Producer's head (docs/abi.md, decision 6). */
u64 hmb_ring_head(const struct hmb_ring_hdr *hdr)
{
	/*
	 * Acquire pairs with the producer's release store of head (producer
	 * step 4): the records below it are visible.
	 */
	return le64_to_cpu((__force __le64)smp_load_acquire(&hdr->head));
}

/* Producer's flags. */
u32 hmb_ring_flags(const struct hmb_ring_hdr *hdr)
{
	/*
	 * Acquire pairs with the producer's release store of flags, which
	 * follows its last head store: a FROZEN seen here orders the final
	 * head before any later head load.
	 */
	return le32_to_cpu((__force __le32)smp_load_acquire(&hdr->flags));
}

/*
 * Tail as the ring shows it. Only for reports: a device can rewrite it, so
 * the core checks new tails against its own copy, never against this.
 */
u64 hmb_ring_tail(const struct hmb_ring_hdr *hdr)
{
	return le64_to_cpu((__force __le64)READ_ONCE(hdr->tail));
}

/* Any other 64-bit header field (counters, epoch), read once. */
u64 hmb_ring_le64(const __u64 *field)
{
	return le64_to_cpu((__force __le64)READ_ONCE(*field));
}

/*
 * Mark the ring FROZEN on the device's behalf, as the NVMe driver does
 * after a controller reset: the device has acknowledged a withdrawal, so
 * it no longer writes the header and this store races nobody.
 */
void hmb_ring_mark_frozen(struct hmb_ring_hdr *hdr)
{
	u32 flags = hmb_ring_flags(hdr) | HMB_RING_FLAG_FROZEN;

	/*
	 * Release pairs with the acquire load in hmb_ring_flags(): the final
	 * head the device stored before it stopped is visible to whoever sees
	 * FROZEN, as with the producer's own FROZEN store.
	 */
	smp_store_release(&hdr->flags, (__force __u32)cpu_to_le32(flags));
}

/* Store a validated consumer tail. */
void hmb_ring_publish_tail(struct hmb_ring_hdr *hdr, u64 tail)
{
	/*
	 * Release pairs with the producer's acquire load of tail (producer
	 * step 1): the consumer's reads below @tail, done before its
	 * PUBLISH_TAIL ioctl, complete before the producer may reuse them.
	 */
	smp_store_release(&hdr->tail, (__force __u64)cpu_to_le64(tail));
}
