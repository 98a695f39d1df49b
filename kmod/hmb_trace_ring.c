// SPDX-License-Identifier: GPL-2.0
/*
 * hmb_trace_ring.c - the module's side of ring ABI v1: initialising a
 * header and reading/writing the few fields it touches, with the memory
 * ordering docs/abi.md requires. Ring memory is shared with a device that
 * runs concurrently, so every shared field goes through these helpers.
 */
#include <linux/kernel.h>
#include <linux/string.h>
#include <linux/log2.h>
#include <asm/barrier.h>
#include <asm/byteorder.h>

#include "hmb_trace.h"

bool hmb_ring_size_valid(u64 ring_size)
{
	return is_power_of_2(ring_size) && ring_size >= HMB_RING_MIN_SIZE &&
	       ring_size <= HMB_RING_MAX_SIZE;
}

/*
 * Write a fresh header for @epoch and zero the data area, so records of an
 * earlier epoch or an earlier module load can never look valid. The device
 * must not be producing (no READY advert, or FROZEN).
 */
void hmb_ring_init(void *slice, u64 ring_size, u64 epoch)
{
	struct hmb_ring_hdr *hdr = slice;

	memset(slice + HMB_RING_HDR_SIZE, 0, ring_size);
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

/* Producer's head: acquire, so records below it are visible. */
u64 hmb_ring_head(const struct hmb_ring_hdr *hdr)
{
	return le64_to_cpu((__force __le64)smp_load_acquire(&hdr->head));
}

/* Producer's flags: acquire, so a FROZEN seen here orders the final head. */
u32 hmb_ring_flags(const struct hmb_ring_hdr *hdr)
{
	return le32_to_cpu((__force __le32)smp_load_acquire(&hdr->flags));
}

/* Only the module writes tail, so a plain load suffices. */
u64 hmb_ring_tail(const struct hmb_ring_hdr *hdr)
{
	return le64_to_cpu((__force __le64)READ_ONCE(hdr->tail));
}

/* Any other 64-bit header field (counters, epoch), read once. */
u64 hmb_ring_le64(const __u64 *field)
{
	return le64_to_cpu((__force __le64)READ_ONCE(*field));
}

/* Release: the consumer finished reading below @tail before the producer reuses it. */
void hmb_ring_publish_tail(struct hmb_ring_hdr *hdr, u64 tail)
{
	smp_store_release(&hdr->tail, (__force __u64)cpu_to_le64(tail));
}
