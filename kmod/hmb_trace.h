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

/* A trace slice the glue has carved and initialised. */
struct hmb_trace_slice {
	void *kva;		/* ring header page, mapped as normal memory */
	phys_addr_t phys;	/* its physical address, page aligned */
	/*
	 * NULL: the slice is physically contiguous from phys. Else its pages
	 * in order (header first), for a slice that spans several HMB chunks.
	 * The core accesses only the header at kva either way: the data area
	 * is read by user space through its mapping.
	 */
	struct page **pages;
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
 * Detach: after this returns no user access, ioctl, sysfs read or backend
 * op touches the slice, so the glue may unmap it. Open files see POLLHUP
 * and -ENODEV. The glue must have stopped calling hmb_trace_notify().
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
 * space is restored. Process context.
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
