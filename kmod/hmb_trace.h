/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Interface between the generic core (character device,
 * mmap, poll, ioctl, sysfs) and the glue that owns a trace slice in a
 * Host Memory Buffer. The emulated HMB (QEMU ivshmem) glue lives in
 * hmb_emu_glue.c; a real NVMe glue would implement the same contract.
 */
#ifndef HMB_TRACE_H
#define HMB_TRACE_H

#include <linux/types.h>
#include <uapi/linux/nvme_hmb_trace.h>

#include "hmb_trace_compat.h"

struct device;
struct hmb_trace_dev;
struct vm_area_struct;

/* Operations the core asks of the glue. */
struct hmb_trace_backend_ops {
	/*
	 * The device is FROZEN: rewrite the ring header for @new_epoch
	 * (hmb_ring_init()) and advertise the ring to the device again.
	 * Called under the core's device lock, never after unregister; must
	 * not sleep for long (the data area is not zeroed again).
	 */
	int (*reinit)(void *priv, u64 new_epoch);
	/*
	 * Optional: whether the device is gone without a remove yet (surprise
	 * removal, a permanent PCI error). Any context; must not sleep.
	 */
	bool (*lost)(void *priv);
};

/*
 * The memory of a slice the DMA API allocated (the NVMe HMB), which only
 * the DMA API may map for user space (dma_mmap_coherent(): the coherent
 * mapping's attributes, per-device pools). The core owns one reference,
 * dropped when the trace device is released: after its removal and after
 * the last open file, hence every user mapping (a vma holds its file), is
 * gone. So a mapping that removal's zap could not reach (an mmap racing
 * it) never outlives the memory.
 */
struct hmb_trace_mem_ops {
	/*
	 * Map chunk @index of the ring view into @vma, which covers exactly
	 * that chunk. Called from ->mmap (mmap_lock held for writing).
	 */
	int (*mmap)(void *mem, unsigned int index, struct vm_area_struct *vma);
	/* Drop the core's reference. Process context. */
	void (*put)(void *mem);
};

/* Where a chunk of the ring view lies: header page at 0, data at 4096. */
struct hmb_trace_extent {
	u64 offset;
	u64 len;
};

/* A trace slice the glue has carved and initialised. */
struct hmb_trace_slice {
	void *kva;		/* ring header page, as the glue maps it */
	/*
	 * mem_ops NULL: device memory (a BAR), physically contiguous from
	 * phys, one chunk; mapped page by page at fault time.
	 */
	phys_addr_t phys;
	/*
	 * Else DMA memory in nr_chunks chunks (extents, header first, tiling
	 * the ring view), mapped by mem_ops->mmap(). hmb_trace_register()
	 * takes over the caller's reference on @mem when it succeeds; the
	 * extents are copied.
	 */
	const struct hmb_trace_mem_ops *mem_ops;
	void *mem;
	const struct hmb_trace_extent *extents;
	unsigned int nr_chunks;
	u64 ring_size;		/* data area bytes (power of two) */
	/*
	 * The epoch hmb_ring_init() wrote; 0: read it from the header just
	 * initialised (before the ring is advertised, so no device writes it).
	 */
	u64 epoch;
};

/*
 * Create /dev/nvme-hmb-traceN for an initialised slice. @irq_driven says
 * whether the glue calls hmb_trace_notify() on device interrupts; if not,
 * the core samples the ring header on a timer while the device is open.
 */
struct hmb_trace_dev *hmb_trace_register(struct device *parent,
					 const struct hmb_trace_slice *slice,
					 const struct hmb_trace_backend_ops *ops,
					 void *priv, bool irq_driven);

/* Device interrupt (hard-irq context). Never after hmb_trace_unregister(). */
void hmb_trace_notify(struct hmb_trace_dev *td);

/*
 * Detach: after this returns no ioctl, sysfs read or backend op touches the
 * slice and every user mapping of device memory raises SIGBUS, so the glue
 * may unmap it. (DMA memory stays mapped, with its last contents, until the
 * core drops its reference: mem_ops.) Open files see POLLHUP and -ENODEV.
 * The glue must have stopped calling hmb_trace_notify().
 */
void hmb_trace_unregister(struct hmb_trace_dev *td);
/*
 * The device refused the slice (the advert of a re-initialised ring): never
 * touched again, the reader sees it as removed. Process context.
 */
void hmb_trace_refused(struct hmb_trace_dev *td);
/*
 * Before unregistering a slice the producer has frozen: let an open reader
 * drain it (at most @ms). May sleep.
 */
void hmb_trace_drain(struct hmb_trace_dev *td, unsigned int ms);

/*
 * Pause: until hmb_trace_resume(), nothing of the core reads or writes the
 * slice (ioctls, sysfs reads and faults on user mappings wait, killably;
 * poll reports no event; mapped pages are zapped). For PCI error recovery,
 * when an emulated HMB behind a BAR reads as anything until the config
 * space is restored. Device memory slices only (a DMA slice's mapping is
 * made at mmap time and cannot come back after a zap). Process context.
 */
void hmb_trace_pause(struct hmb_trace_dev *td);
void hmb_trace_resume(struct hmb_trace_dev *td);

/* Ring header helpers (hmb_trace_ring.c). */
void hmb_ring_init(void *slice, u64 ring_size, u64 epoch);
void hmb_ring_zero_data(void *slice, u64 ring_size);
u64 hmb_ring_head(const struct hmb_ring_hdr *hdr);
u32 hmb_ring_flags(const struct hmb_ring_hdr *hdr);
u64 hmb_ring_tail(const struct hmb_ring_hdr *hdr);
u64 hmb_ring_le64(const __u64 *field);
void hmb_ring_publish_tail(struct hmb_ring_hdr *hdr, u64 tail);
void hmb_ring_mark_frozen(struct hmb_ring_hdr *hdr);
bool hmb_ring_size_valid(u64 ring_size);

/* Module-wide setup of the core and the emulated glue. */
int hmb_trace_core_init(void);
void hmb_trace_core_exit(void);
int hmb_emu_glue_init(void);
void hmb_emu_glue_exit(void);
int hmb_nvme_glue_init(void);
void hmb_nvme_glue_exit(void);

#endif /* HMB_TRACE_H */
