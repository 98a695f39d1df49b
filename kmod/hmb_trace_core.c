// SPDX-License-Identifier: GPL-2.0
/*
 * /dev/nvme-hmb-traceN: exclusive open, read-only mmap
 * of the trace slice, poll, ioctls and sysfs counters, and teardown that
 * stays safe while a consumer holds the device open and mapped.
 *
 * Locking: td->lock guards td->gone, the shadow tail and epoch, and every
 * access to the slice from process context (ioctls, sysfs, poll, page
 * faults, the sampling worker).
 *
 * User mappings (docs/abi.md decision 11): the ring view is mapped one chunk
 * per mmap. A device memory slice (a BAR) is one chunk, mapped page by page
 * at fault time, and zapped at removal: the BAR goes with the device, so a
 * later access raises SIGBUS. A DMA slice's chunk is mapped whole by the
 * glue through the DMA API at mmap time (dma_mmap_coherent()) and is not
 * zapped: the core's reference on the DMA memory is dropped only when the
 * trace device is released, after the last file and so after the last vma,
 * so a mapping keeps reading the slice's last contents after removal and
 * never freed memory. (Zapping would not close the mmap/removal window, a
 * vma is linked after ->mmap, and on 6.1-6.12 a zap of a remap_pfn_range()
 * vma races the reader's own exit in x86 PAT's untrack_pfn(): both untrack
 * the same vma, and the second finds no PTE and warns.) Removal sets gone under the lock, so once
 * hmb_trace_unregister() returns nothing but the interrupt handler (stopped
 * by the glue first) can reach the slice. User copies are done outside the
 * lock: a fault on the ring mapping itself takes the lock.
 *
 * The ring header is device-writable memory: tail and epoch are kept here
 * (td->tail, td->epoch) and never re-read from the ring to decide anything,
 * so "tail never goes backwards" and "the epoch grows" hold whatever the
 * device writes.
 */
#include <linux/module.h>
#include <linux/kernel.h>
#include <linux/fs.h>
#include <linux/cdev.h>
#include <linux/device.h>
#include <linux/idr.h>
#include <linux/mm.h>
#include <linux/mutex.h>
#include <linux/overflow.h>
#include <linux/poll.h>
#include <linux/pseudo_fs.h>
#include <linux/mount.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/atomic.h>
#include <linux/bitops.h>

#include "hmb_trace.h"
#include "hmb_trace_compat.h"

#define CREATE_TRACE_POINTS
#include "hmb_trace_events.h"

#define HMB_TRACE_NAME		"nvme-hmb-trace"
#define HMB_TRACE_MAX_DEVS	64
#define HMB_TRACE_FS_MAGIC	0x48425446	/* "FTBH": private pseudo fs */
#define HMB_TRACE_NODE_MODE	0440		/* same as the udev rule */

static unsigned int poll_ms = 10;
module_param(poll_ms, uint, 0644);
MODULE_PARM_DESC(poll_ms,
		 "Without device interrupts (ivshmem-plain): how often, in ms, the ring header is sampled to wake poll() while the device is open (default 10)");

enum hmb_trace_bits {
	HMB_TRACE_OPEN,		/* a file holds the device (exclusive open) */
};

struct hmb_trace_dev {
	struct device dev;		/* refcount: freed by hmb_trace_dev_release */
	struct cdev cdev;		/* holds dev while any file is open */
	struct mutex lock;
	bool gone;			/* removed: slice must not be touched */
	/*
	 * The device refused the advert of a re-initialised ring: the slice is
	 * dead (never touched again), the reader sees the device as removed
	 * (hmb_trace_refused()).
	 */
	bool refused;
	/*
	 * The glue paused access to the slice (PCI error recovery, where a
	 * BAR-backed slice reads as zeros or all-ones until the config space
	 * is restored): ioctls, sysfs and faults wait, poll reports nothing.
	 */
	bool paused;
	unsigned long bits;		/* enum hmb_trace_bits */
	wait_queue_head_t wq;
	wait_queue_head_t drain_wq;	/* hmb_trace_drain(): tail moved, file closed */
	struct delayed_work sample_work;	/* only when !irq_driven */
	bool irq_driven;

	struct hmb_ring_hdr *hdr;	/* slice start */
	phys_addr_t phys;	/* device memory: contiguous from here */
	const struct hmb_trace_mem_ops *mem_ops;	/* DMA memory, or NULL */
	void *mem;		/* mem_ops' memory: one reference, until release */
	struct hmb_trace_extent *extents;	/* the chunks of the ring view */
	unsigned int nr_chunks;
	u64 ring_size;
	u64 mmap_len;

	/*
	 * Shadows of the module's own header fields. tail: under lock. epoch:
	 * written under lock with release, read locklessly (hard-irq) with
	 * acquire.
	 */
	u64 tail;
	u64 epoch;

	const struct hmb_trace_backend_ops *ops;
	void *priv;

	/* Own address_space, so removal can zap every user mapping. */
	struct inode *inode;
	int minor;

	atomic64_t freeze_count;
	atomic64_t frozen_epoch;	/* newest epoch whose FROZEN was counted */
	atomic64_t irq_count;
	atomic64_t tail_publishes;
};

static dev_t hmb_trace_devt;
static DEFINE_IDA(hmb_trace_minors);
static struct vfsmount *hmb_trace_mnt;

static char *hmb_trace_devnode(HMB_DEVNODE_CONST struct device *dev,
			       umode_t *mode)
{
	if (mode)
		*mode = HMB_TRACE_NODE_MODE;
	return NULL;
}

static struct class hmb_trace_class = {
	.name = HMB_TRACE_NAME,
	.devnode = hmb_trace_devnode,
};

/*
 * Read the ring flags and count a FROZEN once per epoch: freeze_count goes
 * up when FROZEN is seen in an epoch newer than frozen_epoch. Safe in any
 * context, hard-irq included, without the lock.
 *
 * The epoch is loaded before the flags. REINIT rewrites the header (flags
 * 0) before it publishes the new epoch with release, so flags read after
 * epoch E come from E or later: an old epoch's FROZEN seen late is counted
 * against that old epoch (already counted, so not again), never against
 * the new one.
 */
static u32 hmb_trace_observe(struct hmb_trace_dev *td)
{
	/* Acquire pairs with the release store of td->epoch in REINIT. */
	s64 epoch = smp_load_acquire(&td->epoch);
	u32 flags = hmb_ring_flags(td->hdr);
	s64 seen;

	if (!(flags & HMB_RING_FLAG_FROZEN))
		return flags;
	seen = atomic64_read(&td->frozen_epoch);
	while (seen < epoch) {
		if (atomic64_try_cmpxchg(&td->frozen_epoch, &seen, epoch)) {
			atomic64_inc(&td->freeze_count);
			break;
		}
	}
	return flags;
}

/* Removed, or the glue says the device is gone (surprise removal, PCI error). */
static bool hmb_trace_dead(struct hmb_trace_dev *td)
{
	return td->gone || td->refused ||
	       (td->ops->lost && td->ops->lost(td->priv));
}

/*
 * Take td->lock once slice access is not paused, or the device is removed.
 * Returns -EINTR, without the lock, on a fatal signal.
 */
static int hmb_trace_lock_live(struct hmb_trace_dev *td)
{
	mutex_lock(&td->lock);
	while (td->paused && !td->gone) {
		mutex_unlock(&td->lock);
		if (wait_event_killable(td->wq, !READ_ONCE(td->paused) ||
					READ_ONCE(td->gone)))
			return -EINTR;
		mutex_lock(&td->lock);
	}
	return 0;
}

/* Whether a poller has something to do. Caller holds td->lock. */
static __poll_t hmb_trace_events_locked(struct hmb_trace_dev *td)
{
	__poll_t events = 0;
	u32 flags;

	if (hmb_trace_dead(td))
		return EPOLLHUP | EPOLLERR;
	if (td->paused)
		return 0;	/* hmb_trace_resume() wakes pollers */
	flags = hmb_trace_observe(td);
	if (hmb_ring_head(td->hdr) != td->tail)
		events |= EPOLLIN | EPOLLRDNORM;
	if (flags & HMB_RING_FLAG_FROZEN)
		events |= EPOLLPRI;
	return events;
}

void hmb_trace_notify(struct hmb_trace_dev *td)
{
	u64 n = atomic64_inc_return(&td->irq_count);
	__poll_t events = EPOLLIN | EPOLLRDNORM;

	trace_hmb_trace_irq(td->minor, n);
	/*
	 * A vanished device's header reads all-ones: FROZEN plus a huge head;
	 * a paused one may read anything: wake every poller to look.
	 * Otherwise an interrupt means new records, or FROZEN when the flag
	 * says so; keyed like the sampler's wake-up, so a POLLPRI-only reader
	 * sleeps through records.
	 */
	if (READ_ONCE(td->paused) || (td->ops->lost && td->ops->lost(td->priv))) {
		wake_up_interruptible(&td->wq);
		return;
	}
	if (hmb_trace_observe(td) & HMB_RING_FLAG_FROZEN)
		events |= EPOLLPRI;
	wake_up_interruptible_poll(&td->wq, events);
}

/*
 * No device interrupts: sample the header at a low rate while open, and
 * wake pollers only when there is something to report. Never a busy loop.
 */
static void hmb_trace_sample(struct work_struct *work)
{
	struct hmb_trace_dev *td = container_of(to_delayed_work(work),
						struct hmb_trace_dev,
						sample_work);
	__poll_t events = 0;

	mutex_lock(&td->lock);
	if (!td->gone) {
		events = hmb_trace_events_locked(td);
		if (test_bit(HMB_TRACE_OPEN, &td->bits) &&
		    !(events & EPOLLHUP))
			schedule_delayed_work(&td->sample_work,
					      msecs_to_jiffies(max(poll_ms, 1U)));
	}
	mutex_unlock(&td->lock);
	/*
	 * Keyed: a reader that waits only for EPOLLPRI (the daemon letting
	 * records gather, docs/daemon.md) is not woken by every sample that
	 * finds records it has chosen not to read yet.
	 */
	if (events)
		wake_up_interruptible_poll(&td->wq, events);
}

/* ---- file operations ---- */

static int hmb_trace_open(struct inode *inode, struct file *file)
{
	struct hmb_trace_dev *td = container_of(inode->i_cdev,
						struct hmb_trace_dev, cdev);
	int ret = 0;

	mutex_lock(&td->lock);
	if (td->gone || td->refused) {
		ret = -ENODEV;
	} else if (test_and_set_bit(HMB_TRACE_OPEN, &td->bits)) {
		ret = -EBUSY;
	} else {
		get_device(&td->dev);
		file->private_data = td;
		file->f_mapping = td->inode->i_mapping;
		if (!td->irq_driven)
			schedule_delayed_work(&td->sample_work, 0);
	}
	mutex_unlock(&td->lock);
	if (ret)
		return ret;
	return stream_open(inode, file);
}

static int hmb_trace_release(struct inode *inode, struct file *file)
{
	struct hmb_trace_dev *td = file->private_data;

	/* Cancel before clearing OPEN, so a new opener's sampling survives. */
	cancel_delayed_work_sync(&td->sample_work);
	clear_bit(HMB_TRACE_OPEN, &td->bits);
	wake_up(&td->drain_wq);
	put_device(&td->dev);
	return 0;
}

static __poll_t hmb_trace_poll(struct file *file, poll_table *wait)
{
	struct hmb_trace_dev *td = file->private_data;
	__poll_t events;

	poll_wait(file, &td->wq, wait);
	mutex_lock(&td->lock);
	events = hmb_trace_events_locked(td);
	mutex_unlock(&td->lock);
	return events;
}

static long hmb_trace_get_info(struct hmb_trace_dev *td, void __user *arg)
{
	struct hmb_trace_info info;

	memset(&info, 0, sizeof(info));
	if (hmb_trace_lock_live(td))
		return -EINTR;
	if (hmb_trace_dead(td)) {
		mutex_unlock(&td->lock);
		return -ENODEV;
	}
	info.abi_major = HMB_TRACE_DEV_ABI_MAJOR;
	info.abi_minor = HMB_TRACE_DEV_ABI_MINOR;
	info.hdr_size = HMB_RING_HDR_SIZE;
	info.ring_size = td->ring_size;
	info.mmap_len = td->mmap_len;
	info.epoch = td->epoch;
	info.flags = hmb_trace_observe(td);
	info.nr_chunks = td->nr_chunks;
	mutex_unlock(&td->lock);
	return copy_to_user(arg, &info, sizeof(info)) ? -EFAULT : 0;
}

/* Where chunk @index lies in the ring view: fixed at registration. */
static long hmb_trace_get_chunk(struct hmb_trace_dev *td, void __user *arg)
{
	struct hmb_trace_chunk chunk;

	if (copy_from_user(&chunk, arg, sizeof(chunk)))
		return -EFAULT;
	if (chunk.index >= td->nr_chunks || chunk.reserved)
		return -EINVAL;
	if (READ_ONCE(td->gone) || READ_ONCE(td->refused))
		return -ENODEV;
	chunk.offset = td->extents[chunk.index].offset;
	chunk.len = td->extents[chunk.index].len;
	return copy_to_user(arg, &chunk, sizeof(chunk)) ? -EFAULT : 0;
}

/*
 * A new tail must be aligned, not behind the tail the module last stored
 * (its own copy: the ring's can be rewritten by the device), not beyond
 * head, and not more than a ring ahead of the old tail.
 */
static long hmb_trace_publish_tail(struct hmb_trace_dev *td,
				   u64 __user *arg)
{
	u64 tail, head;
	long ret = 0;

	if (get_user(tail, arg))
		return -EFAULT;
	if (hmb_trace_lock_live(td))
		return -EINTR;
	if (hmb_trace_dead(td)) {
		ret = -ENODEV;
		goto out;
	}
	head = hmb_ring_head(td->hdr);
	if (tail % HMB_RING_ALIGN || tail < td->tail || tail > head ||
	    tail - td->tail > td->ring_size) {
		ret = -EINVAL;
		goto out;
	}
	hmb_ring_publish_tail(td->hdr, tail);
	WRITE_ONCE(td->tail, tail);
	atomic64_inc(&td->tail_publishes);
	/* hmb_trace_drain() may be waiting for the reader to catch up. */
	wake_up(&td->drain_wq);
	trace_hmb_trace_publish_tail(td->minor, tail, head);
out:
	mutex_unlock(&td->lock);
	return ret;
}

static long hmb_trace_reinit(struct hmb_trace_dev *td, u64 __user *arg)
{
	u64 epoch = 0;
	long ret;

	/*
	 * Fail before re-initialising, not after, if the result cannot be
	 * returned: read and write back the argument first.
	 */
	if (get_user(epoch, arg) || put_user(epoch, arg))
		return -EFAULT;
	if (hmb_trace_lock_live(td))
		return -EINTR;
	if (hmb_trace_dead(td)) {
		ret = -ENODEV;
	} else if (!(hmb_trace_observe(td) & HMB_RING_FLAG_FROZEN)) {
		ret = -EBUSY;	/* the device is live: re-initialising would race it */
	} else {
		epoch = td->epoch + 1;
		ret = td->ops->reinit(td->priv, epoch);
		if (!ret) {
			td->tail = 0;
			/*
			 * Release: the rewritten header (flags 0) is visible
			 * before the new epoch, see hmb_trace_observe().
			 */
			smp_store_release(&td->epoch, epoch);
			trace_hmb_trace_reinit(td->minor, epoch);
		}
	}
	mutex_unlock(&td->lock);
	if (ret)
		return ret;
	/*
	 * Only a concurrent munmap of the argument can fail here; the ring is
	 * re-initialised anyway and GET_INFO reports the epoch.
	 */
	return put_user(epoch, arg);
}

static long hmb_trace_get_stats(struct hmb_trace_dev *td, void __user *arg)
{
	struct hmb_trace_stats st;

	memset(&st, 0, sizeof(st));
	if (hmb_trace_lock_live(td))
		return -EINTR;
	if (hmb_trace_dead(td)) {
		mutex_unlock(&td->lock);
		return -ENODEV;
	}
	hmb_trace_observe(td);
	st.head = hmb_ring_head(td->hdr);
	st.tail = td->tail;
	st.dropped_records = hmb_ring_le64(&td->hdr->dropped_records);
	st.overflow_events = hmb_ring_le64(&td->hdr->overflow_events);
	st.freeze_count = atomic64_read(&td->freeze_count);
	st.irq_count = atomic64_read(&td->irq_count);
	st.tail_publishes = atomic64_read(&td->tail_publishes);
	st.epoch = td->epoch;
	mutex_unlock(&td->lock);
	return copy_to_user(arg, &st, sizeof(st)) ? -EFAULT : 0;
}

static long hmb_trace_ioctl(struct file *file, unsigned int cmd,
			    unsigned long arg)
{
	struct hmb_trace_dev *td = file->private_data;
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case HMB_TRACE_IOC_GET_INFO:
		return hmb_trace_get_info(td, uarg);
	case HMB_TRACE_IOC_PUBLISH_TAIL:
		return hmb_trace_publish_tail(td, uarg);
	case HMB_TRACE_IOC_REINIT:
		return hmb_trace_reinit(td, uarg);
	case HMB_TRACE_IOC_GET_STATS:
		return hmb_trace_get_stats(td, uarg);
	case HMB_TRACE_IOC_GET_CHUNK:
		return hmb_trace_get_chunk(td, uarg);
	default:
		return -ENOTTY;
	}
}

/*
 * Device memory: pages are inserted on fault rather than at mmap time: a
 * fault checks gone under the lock, so no page can be mapped after removal
 * zapped the mapping (the vma is only linked into the address_space after
 * ->mmap). A DMA chunk was mapped whole at mmap time and is never zapped:
 * a fault there (after a reader's own madvise(), say) gets SIGBUS.
 */
static vm_fault_t hmb_trace_fault(struct vm_fault *vmf)
{
	struct hmb_trace_dev *td = vmf->vma->vm_file->private_data;
	vm_fault_t ret = VM_FAULT_SIGBUS;

	if (td->mem_ops || vmf->pgoff >= td->mmap_len >> PAGE_SHIFT)
		return VM_FAULT_SIGBUS;
	/* Paused: wait for the recovery (killable; a dying task gets SIGBUS). */
	if (hmb_trace_lock_live(td))
		return VM_FAULT_SIGBUS;
	if (!hmb_trace_dead(td))
		ret = vmf_insert_pfn(vmf->vma, vmf->address,
				     PHYS_PFN(td->phys) + vmf->pgoff);
	mutex_unlock(&td->lock);
	return ret;
}

static const struct vm_operations_struct hmb_trace_vm_ops = {
	.fault = hmb_trace_fault,
};

/* The chunk a mapping of [@off, @off + @len) of the ring view is, or -1. */
static int hmb_trace_find_chunk(struct hmb_trace_dev *td, unsigned long pgoff,
				unsigned long len)
{
	unsigned int i;
	u64 off;

	if (pgoff >= td->mmap_len >> PAGE_SHIFT)
		return -1;
	off = (u64)pgoff << PAGE_SHIFT;
	for (i = 0; i < td->nr_chunks; i++)
		if (td->extents[i].offset == off && td->extents[i].len == len)
			return i;
	return -1;
}

static int hmb_trace_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct hmb_trace_dev *td = file->private_data;
	int chunk, ret = 0;

	/*
	 * Read-only and not executable: the consumer must not be able to
	 * corrupt the ring, and device-written bytes are never code.
	 */
	if (vma->vm_flags & (VM_WRITE | VM_EXEC))
		return -EACCES;
	/* Exactly one chunk: the offset and length GET_CHUNK reports. */
	chunk = hmb_trace_find_chunk(td, vma->vm_pgoff,
				     vma->vm_end - vma->vm_start);
	if (chunk < 0)
		return -EINVAL;
	mutex_lock(&td->lock);
	if (td->gone || td->refused)
		ret = -ENODEV;
	mutex_unlock(&td->lock);
	if (ret)
		return ret;
	/*
	 * Without VM_MAYWRITE and VM_MAYEXEC, mprotect(PROT_WRITE or
	 * PROT_EXEC) fails with EACCES. Clearing VM_MAYWRITE also keeps a
	 * MAP_PRIVATE mapping from being a COW mapping, which pfn mappings
	 * must never be (vmf_insert_pfn() would BUG).
	 */
	vm_flags_clear(vma, VM_MAYWRITE | VM_MAYEXEC);
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	vma->vm_ops = &hmb_trace_vm_ops;
	if (!td->mem_ops) {
		vm_flags_set(vma, VM_IO | VM_PFNMAP);
		return 0;
	}
	/*
	 * The DMA API sets what its mapping needs (VM_PFNMAP for
	 * remap_pfn_range(), VM_MIXEDMAP for the pages of an IOMMU
	 * allocation) and the protection the coherent mapping has. No lock:
	 * a removal from here on zaps before this vma is linked, and the
	 * memory outlives it (the core's reference, see the top).
	 */
	return td->mem_ops->mmap(td->mem, chunk, vma);
}

static const struct file_operations hmb_trace_fops = {
	.owner = THIS_MODULE,	/* open files pin the module: rmmod refused */
	.open = hmb_trace_open,
	.release = hmb_trace_release,
	.poll = hmb_trace_poll,
	.unlocked_ioctl = hmb_trace_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = hmb_trace_mmap,
};

/* ---- sysfs ---- */

enum hmb_trace_attr_id {
	ATTR_HEAD, ATTR_TAIL, ATTR_DROPPED, ATTR_OVERFLOWS, ATTR_FREEZES,
	ATTR_FREEZE_EPOCH, ATTR_EPOCH, ATTR_FLAGS, ATTR_IRQS, ATTR_PUBLISHES,
};

static ssize_t hmb_trace_show_u64(struct device *dev, char *buf,
				  enum hmb_trace_attr_id id)
{
	struct hmb_trace_dev *td = container_of(dev, struct hmb_trace_dev, dev);
	u64 val = 0;

	if (hmb_trace_lock_live(td))
		return -EINTR;
	if (hmb_trace_dead(td)) {
		mutex_unlock(&td->lock);
		return -ENODEV;
	}
	val = hmb_trace_observe(td);
	switch (id) {
	case ATTR_HEAD:
		val = hmb_ring_head(td->hdr);
		break;
	case ATTR_TAIL:
		val = td->tail;
		break;
	case ATTR_DROPPED:
		val = hmb_ring_le64(&td->hdr->dropped_records);
		break;
	case ATTR_OVERFLOWS:
		val = hmb_ring_le64(&td->hdr->overflow_events);
		break;
	case ATTR_FREEZES:
		val = atomic64_read(&td->freeze_count);
		break;
	case ATTR_FREEZE_EPOCH:
		val = atomic64_read(&td->frozen_epoch);
		break;
	case ATTR_EPOCH:
		val = td->epoch;
		break;
	case ATTR_FLAGS:
		break;	/* as observed above */
	case ATTR_IRQS:
		val = atomic64_read(&td->irq_count);
		break;
	case ATTR_PUBLISHES:
		val = atomic64_read(&td->tail_publishes);
		break;
	}
	mutex_unlock(&td->lock);
	return sysfs_emit(buf, "%llu\n", val);
}

#define HMB_TRACE_U64_ATTR(name, id)					\
static ssize_t name##_show(struct device *dev,				\
			   struct device_attribute *attr, char *buf)	\
{									\
	return hmb_trace_show_u64(dev, buf, id);			\
}									\
static DEVICE_ATTR_RO(name)

HMB_TRACE_U64_ATTR(head, ATTR_HEAD);
HMB_TRACE_U64_ATTR(tail, ATTR_TAIL);
HMB_TRACE_U64_ATTR(dropped_records, ATTR_DROPPED);
HMB_TRACE_U64_ATTR(overflow_events, ATTR_OVERFLOWS);
HMB_TRACE_U64_ATTR(freeze_count, ATTR_FREEZES);
HMB_TRACE_U64_ATTR(freeze_epoch, ATTR_FREEZE_EPOCH);
HMB_TRACE_U64_ATTR(epoch, ATTR_EPOCH);
HMB_TRACE_U64_ATTR(flags, ATTR_FLAGS);
HMB_TRACE_U64_ATTR(irq_count, ATTR_IRQS);
HMB_TRACE_U64_ATTR(tail_publishes, ATTR_PUBLISHES);

static ssize_t abi_version_show(struct device *dev,
				struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u.%u\n", HMB_RING_VERSION_MAJOR,
			  HMB_RING_VERSION_MINOR);
}
static DEVICE_ATTR_RO(abi_version);

static ssize_t ring_size_show(struct device *dev,
			      struct device_attribute *attr, char *buf)
{
	struct hmb_trace_dev *td = container_of(dev, struct hmb_trace_dev, dev);

	return sysfs_emit(buf, "%llu\n", td->ring_size);
}
static DEVICE_ATTR_RO(ring_size);

static struct attribute *hmb_trace_attrs[] = {
	&dev_attr_abi_version.attr,
	&dev_attr_ring_size.attr,
	&dev_attr_head.attr,
	&dev_attr_tail.attr,
	&dev_attr_dropped_records.attr,
	&dev_attr_overflow_events.attr,
	&dev_attr_freeze_count.attr,
	&dev_attr_freeze_epoch.attr,
	&dev_attr_epoch.attr,
	&dev_attr_flags.attr,
	&dev_attr_irq_count.attr,
	&dev_attr_tail_publishes.attr,
	NULL,
};
ATTRIBUTE_GROUPS(hmb_trace);

/* ---- lifetime ---- */

/*
 * The chunks tile the ring view in order, page aligned, header first.
 * Device memory is one chunk the core makes itself.
 */
static bool hmb_trace_extents_valid(const struct hmb_trace_slice *slice)
{
	u64 end = 0, view = HMB_RING_HDR_SIZE + slice->ring_size;
	unsigned int i;

	if (!slice->mem_ops)
		return PAGE_ALIGNED(slice->phys);
	if (!slice->mem_ops->mmap || !slice->mem_ops->put || !slice->mem ||
	    !slice->nr_chunks || !slice->extents)
		return false;
	for (i = 0; i < slice->nr_chunks; i++) {
		const struct hmb_trace_extent *e = &slice->extents[i];

		if (e->offset != end || !e->len || !PAGE_ALIGNED(e->len) ||
		    e->len > view - end)
			return false;
		end += e->len;
	}
	return end == view;
}

static struct hmb_trace_extent *
hmb_trace_copy_extents(const struct hmb_trace_slice *slice, unsigned int *nr)
{
	struct hmb_trace_extent *e;

	if (slice->mem_ops) {
		*nr = slice->nr_chunks;
		return kmemdup(slice->extents,
			       array_size(slice->nr_chunks, sizeof(*e)),
			       GFP_KERNEL);
	}
	e = kzalloc(sizeof(*e), GFP_KERNEL);
	if (e) {
		e->len = HMB_RING_HDR_SIZE + slice->ring_size;
		*nr = 1;
	}
	return e;
}

static void hmb_trace_dev_release(struct device *dev)
{
	struct hmb_trace_dev *td = container_of(dev, struct hmb_trace_dev, dev);

	/* No file, so no mapping, is left: the DMA memory may go. */
	if (td->mem_ops)
		td->mem_ops->put(td->mem);
	kfree(td->extents);
	iput(td->inode);
	ida_free(&hmb_trace_minors, td->minor);
	kfree(td);
}

struct hmb_trace_dev *hmb_trace_register(struct device *parent,
					 const struct hmb_trace_slice *slice,
					 const struct hmb_trace_backend_ops *ops,
					 void *priv, bool irq_driven)
{
	struct hmb_trace_dev *td;
	struct inode *inode;
	int minor, ret;

	if (!hmb_ring_size_valid(slice->ring_size) || !ops || !ops->reinit ||
	    !hmb_trace_extents_valid(slice))
		return ERR_PTR(-EINVAL);

	minor = ida_alloc_max(&hmb_trace_minors, HMB_TRACE_MAX_DEVS - 1,
			      GFP_KERNEL);
	if (minor < 0)
		return ERR_PTR(minor);
	inode = alloc_anon_inode(hmb_trace_mnt->mnt_sb);
	if (IS_ERR(inode)) {
		ida_free(&hmb_trace_minors, minor);
		return ERR_CAST(inode);
	}
	td = kzalloc(sizeof(*td), GFP_KERNEL);
	if (td)
		td->extents = hmb_trace_copy_extents(slice, &td->nr_chunks);
	if (!td || !td->extents) {
		kfree(td);
		iput(inode);
		ida_free(&hmb_trace_minors, minor);
		return ERR_PTR(-ENOMEM);
	}

	mutex_init(&td->lock);
	init_waitqueue_head(&td->wq);
	init_waitqueue_head(&td->drain_wq);
	INIT_DELAYED_WORK(&td->sample_work, hmb_trace_sample);
	td->irq_driven = irq_driven;
	td->hdr = slice->kva;
	td->phys = slice->phys;
	td->mem_ops = slice->mem_ops;
	td->mem = slice->mem;
	td->ring_size = slice->ring_size;
	td->mmap_len = HMB_RING_HDR_SIZE + slice->ring_size;
	td->tail = 0;
	td->epoch = slice->epoch ?: hmb_ring_le64(&td->hdr->epoch);
	td->ops = ops;
	td->priv = priv;
	td->inode = inode;
	td->minor = minor;
	atomic64_set(&td->freeze_count, 0);
	atomic64_set(&td->frozen_epoch, 0);
	atomic64_set(&td->irq_count, 0);
	atomic64_set(&td->tail_publishes, 0);

	/* From here on, put_device() frees everything. */
	device_initialize(&td->dev);
	td->dev.class = &hmb_trace_class;
	td->dev.parent = parent;
	td->dev.devt = MKDEV(MAJOR(hmb_trace_devt), minor);
	td->dev.groups = hmb_trace_groups;
	td->dev.release = hmb_trace_dev_release;
	ret = dev_set_name(&td->dev, HMB_TRACE_NAME "%d", minor);
	if (ret)
		goto err_put;

	cdev_init(&td->cdev, &hmb_trace_fops);
	td->cdev.owner = THIS_MODULE;
	ret = cdev_device_add(&td->cdev, &td->dev);
	if (ret)
		goto err_put;
	return td;

err_put:
	td->mem_ops = NULL;	/* on failure the caller keeps its reference */
	put_device(&td->dev);
	return ERR_PTR(ret);
}

/*
 * Whether the reader has taken everything the controller published. A
 * wait_event() condition, so no sleeping lock: a stale read only means one
 * more wake-up (publish_tail and release wake drain_wq after their update).
 */
static bool hmb_trace_caught_up(struct hmb_trace_dev *td)
{
	return !test_bit(HMB_TRACE_OPEN, &td->bits) ||
	       hmb_ring_head(td->hdr) == READ_ONCE(td->tail);
}

/*
 * The slice is about to be taken away while the controller has stopped
 * writing it (FROZEN is its last write): the HMB disabled, the controller
 * removed. Wake the reader and give it up to @ms to drain, as it would
 * after a reset, so that the records written before FROZEN are not lost
 * uncounted. Bounded: a reader that does not drain in time loses the rest.
 */
void hmb_trace_drain(struct hmb_trace_dev *td, unsigned int ms)
{
	if (!test_bit(HMB_TRACE_OPEN, &td->bits) || READ_ONCE(td->refused))
		return;
	hmb_trace_notify(td);
	if (!wait_event_timeout(td->drain_wq, hmb_trace_caught_up(td),
				msecs_to_jiffies(ms)))
		dev_warn(&td->dev, "reader did not drain within %u ms of removal\n", ms);
}

/*
 * Device memory: remove every user mapping of the slice (the fault handler
 * refills none once gone, refused or paused is set). DMA memory stays
 * mapped: it lives as long as the mappings (see the top).
 */
static void hmb_trace_zap(struct hmb_trace_dev *td)
{
	if (!td->mem_ops)
		unmap_mapping_range(td->inode->i_mapping, 0, 0, 1);
}

/*
 * The device refused the slice (its advert was not adopted): nothing of the
 * core touches it again, and the reader is told as on removal (POLLHUP,
 * -ENODEV, SIGBUS on a device memory mapping) instead of waiting for records
 * that never come. The glue keeps the device registered until the slice is freed.
 */
void hmb_trace_refused(struct hmb_trace_dev *td)
{
	mutex_lock(&td->lock);
	td->refused = true;
	mutex_unlock(&td->lock);
	dev_warn(&td->dev, "the device refused the trace slice: reader detached\n");
	hmb_trace_zap(td);
	wake_up_poll(&td->wq, EPOLLHUP | EPOLLERR);
}

void hmb_trace_unregister(struct hmb_trace_dev *td)
{
	/*
	 * gone first, and every waiter woken: a sysfs show() or a fault waiting
	 * out a pause that never ends (error recovery without .resume) returns
	 * -ENODEV / SIGBUS instead of blocking cdev_device_del() below, which
	 * waits for sysfs readers. Opens, ioctls and shows that come now see
	 * gone under the lock.
	 */
	mutex_lock(&td->lock);
	td->gone = true;
	mutex_unlock(&td->lock);
	/* All waiters: pollers and those waiting out a pause (killable). */
	wake_up_poll(&td->wq, EPOLLHUP | EPOLLERR);

	/* No new opens; sysfs readers are drained. */
	cdev_device_del(&td->cdev, &td->dev);

	/* Any page faulted in before gone was set goes now; later faults SIGBUS. */
	hmb_trace_zap(td);
	cancel_delayed_work_sync(&td->sample_work);
	dev_info(&td->dev, "removed%s\n",
		 test_bit(HMB_TRACE_OPEN, &td->bits) ? " while open" : "");
	put_device(&td->dev);
}

void hmb_trace_pause(struct hmb_trace_dev *td)
{
	if (WARN_ON_ONCE(td->mem_ops))
		return;
	mutex_lock(&td->lock);
	td->paused = true;
	mutex_unlock(&td->lock);
	/*
	 * Mapped pages go too, as on removal: the next access faults, and the
	 * fault waits for hmb_trace_resume() (it checks paused under the lock
	 * set above, so no page is inserted after this zap).
	 */
	unmap_mapping_range(td->inode->i_mapping, 0, 0, 1);
}

void hmb_trace_resume(struct hmb_trace_dev *td)
{
	mutex_lock(&td->lock);
	td->paused = false;
	mutex_unlock(&td->lock);
	/* Killable waiters too, not only pollers. */
	wake_up(&td->wq);
}

/* ---- module-wide ---- */

static int hmb_trace_fs_init_fs_context(struct fs_context *fc)
{
	return init_pseudo(fc, HMB_TRACE_FS_MAGIC) ? 0 : -ENOMEM;
}

/*
 * No .owner: the internal mount lives from module init to module exit and
 * must not pin the module itself.
 */
static struct file_system_type hmb_trace_fs_type = {
	.name = "nvme_hmb_trace",
	.init_fs_context = hmb_trace_fs_init_fs_context,
	.kill_sb = kill_anon_super,
};

int hmb_trace_core_init(void)
{
	int ret;

	hmb_trace_mnt = kern_mount(&hmb_trace_fs_type);
	if (IS_ERR(hmb_trace_mnt))
		return PTR_ERR(hmb_trace_mnt);
	ret = alloc_chrdev_region(&hmb_trace_devt, 0, HMB_TRACE_MAX_DEVS,
				  HMB_TRACE_NAME);
	if (ret)
		goto err_mnt;
	ret = class_register(&hmb_trace_class);
	if (ret)
		goto err_region;
	return 0;

err_region:
	unregister_chrdev_region(hmb_trace_devt, HMB_TRACE_MAX_DEVS);
err_mnt:
	kern_unmount(hmb_trace_mnt);
	return ret;
}

void hmb_trace_core_exit(void)
{
	class_unregister(&hmb_trace_class);
	unregister_chrdev_region(hmb_trace_devt, HMB_TRACE_MAX_DEVS);
	kern_unmount(hmb_trace_mnt);
	ida_destroy(&hmb_trace_minors);
}
