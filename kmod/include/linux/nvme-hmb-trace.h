/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Client API of the NVMe PCI driver's firmware trace slice: a part of a
 * controller's Host Memory Buffer that holds a trace ring
 * (include/uapi/linux/nvme_hmb_trace.h) which the controller fills.
 */
#ifndef _LINUX_NVME_HMB_TRACE_H
#define _LINUX_NVME_HMB_TRACE_H

#include <linux/types.h>

struct device;
struct module;
struct nvme_hmb_trace_mem;
struct vm_area_struct;

/* Where a chunk of the ring view lies: the header page at 0, the data at 4096. */
struct nvme_hmb_trace_extent {
	u64 offset;
	u64 len;
};

/*
 * One controller's trace slice: the ring header page followed by the data
 * area, in several coherent DMA allocations (HMB chunks). The kernel only
 * ever accesses the header page (the ring's payloads are for the reader),
 * so @hdr is that page in its chunk's own coherent mapping; there is no
 * kernel mapping of the data area. The reader maps the ring view chunk by
 * chunk (@extents, header first) with nvme_hmb_trace_mmap(). Valid from the
 * client's add() until its remove() returns; @mem may be kept longer
 * (nvme_hmb_trace_mem_get()).
 */
struct nvme_hmb_trace_slice {
	struct device *dev;	/* the controller's PCI function */
	int instance;		/* N of nvmeN */
	void *hdr;		/* the ring header page (coherent DMA memory) */
	struct nvme_hmb_trace_mem *mem;	/* the chunks' memory */
	const struct nvme_hmb_trace_extent *extents;	/* nr_chunks, tiling the view */
	unsigned int nr_chunks;
	u64 ring_size;		/* data area bytes, a power of two */
	u64 hmb_offset;		/* header page offset in the controller's HMB view */
	u64 generation;		/* generation the controller was last given */
	bool dead;		/* advert refused: never touch the slice again */
	void *client_priv;	/* the client's own pointer */
};

/*
 * Callbacks run in process context under the slice's own client lock (one
 * callback at a time per slice; no lock shared with other controllers is
 * held, so remove() may wait for a reader), so they must not call
 * nvme_hmb_trace_register() or _unregister().
 */
struct nvme_hmb_trace_client {
	struct module *owner;
	/* A controller with a trace slice: at registration (replay) or later. */
	int (*add)(struct nvme_hmb_trace_slice *slice);
	/*
	 * The controller was reset and got its HMB back (Memory Return): the
	 * epoch it served is over and the driver marked the ring FROZEN. The
	 * controller produces again only after nvme_hmb_trace_reinit().
	 * Also when a reset failed and the controller stays bound but dead
	 * (the ring FROZEN by the driver; re-inits then fail with -ENODEV).
	 * With @slice->dead set the controller refused the slice (a re-init's
	 * advert): stop touching it; remove() follows when the HMB goes.
	 */
	void (*reset)(struct nvme_hmb_trace_slice *slice);
	/* The slice is about to be freed: stop touching it before returning. */
	void (*remove)(struct nvme_hmb_trace_slice *slice);
};

int nvme_hmb_trace_register(struct nvme_hmb_trace_client *client);
void nvme_hmb_trace_unregister(struct nvme_hmb_trace_client *client);

/*
 * Rewrite the ring header for @generation (greater than the slice's) and
 * advertise it to the controller, asynchronously: no admin command waits
 * under the caller's locks. Only while the controller does not produce
 * (FROZEN, or reset). Not from the callbacks. If the controller refuses
 * the advert the slice is dead (never written again): the client's reset()
 * is called with @slice->dead set, and later calls return -ENODEV.
 */
int nvme_hmb_trace_reinit(struct nvme_hmb_trace_slice *slice, u64 generation);

/*
 * The slice's memory is freed when its last reference goes: the driver's,
 * dropped when it frees the HMB (after the client's remove()), and those a
 * client takes for user mappings that may outlive remove() (a mapping made
 * by an mmap racing the removal is linked after any zap). The controller
 * has let the memory go by then; the driver holds a reference on the PCI
 * device until it is freed.
 */
void nvme_hmb_trace_mem_get(struct nvme_hmb_trace_mem *mem);
void nvme_hmb_trace_mem_put(struct nvme_hmb_trace_mem *mem);

/*
 * Map chunk @index of the ring view into @vma, which must be exactly its
 * length, with dma_mmap_coherent(): the protection of the coherent mapping
 * (uncached on non-coherent DMA, decrypted on SEV/TDX), per-device pools.
 * From a driver's ->mmap; the caller keeps the memory alive meanwhile.
 */
int nvme_hmb_trace_mmap(struct nvme_hmb_trace_mem *mem, unsigned int index,
			struct vm_area_struct *vma);

#endif /* _LINUX_NVME_HMB_TRACE_H */
