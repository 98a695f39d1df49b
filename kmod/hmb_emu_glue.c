// SPDX-License-Identifier: GPL-2.0
/*
 * The emulated controller: QEMU's ivshmem PCI device
 * (1af4:1110) whose BAR2 stands in for the NVMe Host Memory Buffer.
 *
 * This file plays the part the NVMe core patch plays on real hardware:
 * it carves the trace slice out of the HMB, initialises the ring header,
 * advertises the slice to the device (struct hmb_advert at offset 0 of the
 * HMB, state READY stored last) and rings the device's doorbell; after a
 * controller reset (FROZEN) it does it all again for the next epoch. Real
 * NVMe glue replaces this file and keeps hmb_trace.h's contract.
 *
 * ivshmem-doorbell: BAR0 registers, BAR1 MSI-X (device interrupts reach
 * hmb_trace_notify()), BAR2 shared memory. ivshmem-plain, or no MSI-X
 * (pci=nomsi, no vectors): the core samples the ring on a timer instead.
 *
 * 1af4:1110 is every ivshmem device, most of them used for something else
 * (VM-to-VM shared memory, Looking Glass). Probe binds only when the
 * device's opt-in signature (struct hmb_device_block) is in BAR2, and
 * writes nothing to BAR2 before it has found it.
 */
#include <linux/module.h>
#include <linux/kernel.h>
#include <linux/pci.h>
#include <linux/interrupt.h>
#include <linux/io.h>
#include <linux/iopoll.h>
#include <linux/overflow.h>
#include <linux/slab.h>
#include <linux/mutex.h>
#include <linux/pm.h>
#include <linux/debugfs.h>
#include <linux/seq_file.h>
#include <asm/barrier.h>
#include <asm/byteorder.h>

#include "hmb_trace.h"

#define HMB_EMU_NAME		"nvme-hmb-trace"

#define IVSHMEM_VENDOR_ID	0x1af4
#define IVSHMEM_DEVICE_ID	0x1110
#define IVSHMEM_REGS_BAR	0
#define IVSHMEM_SHM_BAR		2
#define IVSHMEM_REGS_LEN	0x100
#define IVSHMEM_REG_IVPOSITION	0x08	/* our own peer id, -1 without a server */
#define IVSHMEM_REG_DOORBELL	0x0c	/* (peer << 16) | vector */
#define IVSHMEM_MAX_PEER	0xffff	/* the doorbell's peer field is 16 bits */
#define HMB_EMU_DOORBELL_VECTOR	0

static ulong ring_size = 16UL << 20;
module_param(ring_size, ulong, 0444);
MODULE_PARM_DESC(ring_size, "Trace ring data area in bytes: power of two, 8192..1 GiB (default 16 MiB)");

static ulong slice_offset = HMB_TRACE_SLICE_ALIGN;
module_param(slice_offset, ulong, 0444);
MODULE_PARM_DESC(slice_offset, "Offset of the trace slice in the emulated HMB (BAR2), a multiple of 4096, at least 4096 (default 4096)");

static uint device_peer;
module_param(device_peer, uint, 0444);
MODULE_PARM_DESC(device_peer, "ivshmem peer id (0..65535) of the emulated device (emu-device), whose doorbell is rung after advertising (default 0)");

static uint ack_timeout_ms = 5000;
module_param(ack_timeout_ms, uint, 0444);
MODULE_PARM_DESC(ack_timeout_ms, "How long to wait for the device to acknowledge a withdrawn advert before giving up (default 5000)");

static struct dentry *hmb_emu_debugfs_root;

struct hmb_emu {
	struct pci_dev *pdev;
	void __iomem *regs;		/* BAR0 */
	void *hmb;			/* BAR2 [0, slice end), normal memory */
	struct hmb_advert *advert;	/* at HMB_ADVERT_OFFSET, written by us */
	const struct hmb_device_block *devblk;	/* written by the device only */
	void *slice;
	u64 ring_size;
	int irq;			/* -1: no device interrupts */
	char irq_name[48];		/* "nvme-hmb-trace@<pci address>" */
	struct hmb_trace_dev *td;	/* NULL once unregistered */
	struct dentry *debugfs;
	/*
	 * Serialises the advert's transitions: REINIT (under the core's lock,
	 * taken before this one: never call into the core holding it) against
	 * suspend/resume and PCI error recovery.
	 */
	struct mutex lock;
	u64 epoch;			/* generation advertised last */
	/*
	 * Advert withdrawn for a suspend or a PCI error (under lock): REINIT
	 * must not advertise until resume does.
	 */
	bool stopped;
	/* Error recovery failed: the device is gone for the core (lost). */
	bool dead;
};

static void hmb_emu_ring_doorbell(struct hmb_emu *emu)
{
	/* writel orders the advert's stores before the MMIO doorbell. */
	writel((device_peer << 16) | HMB_EMU_DOORBELL_VECTOR,
	       emu->regs + IVSHMEM_REG_DOORBELL);
}

/* The device's opt-in: its signature at HMB_DEVICE_OFFSET. */
static bool hmb_emu_device_opted_in(const struct hmb_emu *emu)
{
	return le32_to_cpu((__force __le32)READ_ONCE(emu->devblk->magic)) ==
	       HMB_DEVICE_MAGIC;
}

/* The generation whose withdrawal the device last acknowledged. */
static u64 hmb_emu_acked(const struct hmb_emu *emu)
{
	/*
	 * Acquire pairs with the device's release store of ack_generation,
	 * made after its last store to the withdrawn slice.
	 */
	return le64_to_cpu((__force __le64)smp_load_acquire(&emu->devblk->ack_generation));
}

static bool hmb_emu_lost(void *priv);

/*
 * Withdraw the advert and wait until the device says it stopped writing
 * the slice: only then may the slice be rewritten or handed back. Returns
 * 0, or -ETIMEDOUT after ack_timeout_ms. No advert magic: nothing was ever
 * advertised here, nothing to wait for. A vanished device cannot answer:
 * then there is no one to wait for either (and its memory reads all-ones).
 */
static int hmb_emu_quiesce(struct hmb_emu *emu)
{
	struct hmb_advert *ad = emu->advert;
	u64 gen, acked;
	int ret;

	if (hmb_emu_lost(emu)) {
		dev_info(&emu->pdev->dev,
			 "device gone: not waiting for it to acknowledge the withdrawal\n");
		return 0;
	}
	if (le32_to_cpu((__force __le32)READ_ONCE(ad->magic)) != HMB_ADVERT_MAGIC)
		return 0;
	gen = le64_to_cpu((__force __le64)READ_ONCE(ad->generation));
	/*
	 * Release: pairs with the device's acquire load of state; the device
	 * must not find READY again for the ring that is going away.
	 */
	smp_store_release(&ad->state,
			  (__force __u32)cpu_to_le32(HMB_ADVERT_STATE_NONE));
	hmb_emu_ring_doorbell(emu);
	ret = read_poll_timeout(hmb_emu_acked, acked, acked == gen, 1000,
				(u64)ack_timeout_ms * USEC_PER_MSEC, false, emu);
	if (ret)
		dev_err(&emu->pdev->dev,
			"the device did not acknowledge the withdrawal of generation %llu within %u ms (it says %llu)\n",
			gen, ack_timeout_ms, acked);
	return ret;
}

/* Withdraw without waiting: REINIT, where FROZEN says the device stopped. */
static void hmb_emu_withdraw(struct hmb_emu *emu)
{
	/* Release: pairs with the device's acquire load of state. */
	smp_store_release(&emu->advert->state,
			  (__force __u32)cpu_to_le32(HMB_ADVERT_STATE_NONE));
}

/* Fill in the advert for @epoch; the release store of READY publishes it. */
static void hmb_emu_advertise(struct hmb_emu *emu, u64 epoch)
{
	struct hmb_advert *ad = emu->advert;

	memset(ad->reserved, 0, sizeof(ad->reserved));
	ad->magic = (__force __u32)cpu_to_le32(HMB_ADVERT_MAGIC);
	ad->generation = (__force __u64)cpu_to_le64(epoch);
	ad->slice_offset = (__force __u64)cpu_to_le64(slice_offset);
	ad->slice_len = (__force __u64)cpu_to_le64(HMB_RING_HDR_SIZE +
						    emu->ring_size);
	/*
	 * Release: pairs with the device's acquire load of state. The ring
	 * header and the advert fields above are visible before READY is.
	 */
	smp_store_release(&ad->state,
			  (__force __u32)cpu_to_le32(HMB_ADVERT_STATE_READY));
	hmb_emu_ring_doorbell(emu);
}

/*
 * The generation must grow across module reloads and rebinds too, so a
 * device that saw generation N never mistakes a new ring for the old one.
 */
static u64 hmb_emu_first_epoch(struct hmb_emu *emu)
{
	if (le32_to_cpu((__force __le32)READ_ONCE(emu->advert->magic)) !=
	    HMB_ADVERT_MAGIC)
		return 1;
	return le64_to_cpu((__force __le64)READ_ONCE(emu->advert->generation)) + 1;
}

static int hmb_emu_reinit(void *priv, u64 new_epoch)
{
	struct hmb_emu *emu = priv;

	mutex_lock(&emu->lock);
	if (emu->stopped) {
		/* Suspended or in error recovery: resume decides what comes next. */
		mutex_unlock(&emu->lock);
		return -EBUSY;
	}
	hmb_emu_withdraw(emu);
	hmb_ring_init(emu->slice, emu->ring_size, new_epoch);
	hmb_emu_advertise(emu, new_epoch);
	emu->epoch = new_epoch;
	mutex_unlock(&emu->lock);
	dev_dbg(&emu->pdev->dev, "trace ring re-initialised, epoch %llu\n",
		new_epoch);
	return 0;
}

/*
 * The device is gone for good: surprise removal or a permanent PCI error
 * (pci_dev_is_disconnected()), or BAR2 reading as all-ones, as a vanished
 * device's memory does (the ring header would look FROZEN with a huge
 * head). A frozen channel that error recovery may bring back is not lost:
 * the consumer keeps its file through the recovery.
 */
static bool hmb_emu_lost(void *priv)
{
	struct hmb_emu *emu = priv;

	return READ_ONCE(emu->dead) || pci_dev_is_disconnected(emu->pdev) ||
	       READ_ONCE(emu->devblk->magic) == (__force __u32)~0U;
}

static const struct hmb_trace_backend_ops hmb_emu_ops = {
	.reinit = hmb_emu_reinit,
	.lost = hmb_emu_lost,
};

static irqreturn_t hmb_emu_irq(int irq, void *data)
{
	struct hmb_emu *emu = data;

	hmb_trace_notify(emu->td);
	return IRQ_HANDLED;
}

/* Parameters that do not depend on the device: checked at module load. */
static int hmb_emu_check_params(void)
{
	if (!hmb_ring_size_valid(ring_size)) {
		pr_err(HMB_EMU_NAME ": ring_size=%lu is not a power of two in [%u, %llu]\n",
		       ring_size, HMB_RING_MIN_SIZE, HMB_RING_MAX_SIZE);
		return -EINVAL;
	}
	if (slice_offset < HMB_TRACE_SLICE_ALIGN ||
	    slice_offset % HMB_TRACE_SLICE_ALIGN ||
	    slice_offset % PAGE_SIZE) {
		pr_err(HMB_EMU_NAME ": slice_offset=%lu must be a multiple of %u and of the page size, and leave room for the advert\n",
		       slice_offset, HMB_TRACE_SLICE_ALIGN);
		return -EINVAL;
	}
	if (device_peer > IVSHMEM_MAX_PEER) {
		pr_err(HMB_EMU_NAME ": device_peer=%u does not fit the doorbell's 16-bit peer field\n",
		       device_peer);
		return -EINVAL;
	}
	return 0;
}

/* The trace slice must lie inside BAR2; no sum may wrap. */
static int hmb_emu_check_fit(struct pci_dev *pdev, u64 *map_len)
{
	u64 bar_len = pci_resource_len(pdev, IVSHMEM_SHM_BAR);
	u64 end;

	if (!(pci_resource_flags(pdev, IVSHMEM_SHM_BAR) & IORESOURCE_MEM)) {
		dev_err(&pdev->dev, "BAR%d is not a memory BAR\n",
			IVSHMEM_SHM_BAR);
		return -ENODEV;
	}
	if (check_add_overflow((u64)slice_offset, (u64)HMB_RING_HDR_SIZE, &end) ||
	    check_add_overflow(end, (u64)ring_size, &end) || end > bar_len) {
		dev_err(&pdev->dev,
			"trace slice (offset %lu, %llu bytes) does not fit the %llu-byte HMB\n",
			slice_offset, (u64)HMB_RING_HDR_SIZE + ring_size, bar_len);
		return -EINVAL;
	}
	*map_len = end;
	return 0;
}

/*
 * One MSI-X vector if the device has one and the platform grants it;
 * otherwise (ivshmem-plain, pci=nomsi, no vectors left) none, and the core
 * samples the ring instead. Returns whether interrupts will be used.
 */
static bool hmb_emu_alloc_vector(struct hmb_emu *emu)
{
	struct pci_dev *pdev = emu->pdev;
	int ret;

	if (pci_msix_vec_count(pdev) <= 0)
		return false;
	/* An MSI-X message is a DMA write: without bus mastering it is dropped. */
	pci_set_master(pdev);
	ret = pci_alloc_irq_vectors(pdev, 1, 1, PCI_IRQ_MSIX);
	if (ret < 0) {
		pci_clear_master(pdev);
		dev_info(&pdev->dev,
			 "no MSI-X vector (%d): sampling the ring while open instead\n",
			 ret);
		return false;
	}
	return true;
}

/* Called once emu->td exists: the handler may run at once. */
static int hmb_emu_request_irq(struct hmb_emu *emu)
{
	struct pci_dev *pdev = emu->pdev;
	int ret;

	/* Per device, so /proc/interrupts tells two controllers apart. */
	snprintf(emu->irq_name, sizeof(emu->irq_name), HMB_EMU_NAME "@%s",
		 pci_name(pdev));
	ret = request_irq(pci_irq_vector(pdev, 0), hmb_emu_irq, 0,
			  emu->irq_name, emu);
	if (ret)
		return ret;
	emu->irq = pci_irq_vector(pdev, 0);
	return 0;
}

static void hmb_emu_free_vector(struct hmb_emu *emu)
{
	if (emu->irq >= 0)
		free_irq(emu->irq, emu);
	emu->irq = -1;
	if (emu->pdev->msix_enabled) {
		pci_free_irq_vectors(emu->pdev);
		pci_clear_master(emu->pdev);
	}
}

/* ---- debugfs: <debugfs>/nvme-hmb-trace/<pci address>/state ---- */

static int hmb_emu_state_show(struct seq_file *m, void *unused)
{
	struct hmb_emu *emu = m->private;
	const struct hmb_advert *ad = emu->advert;
	const struct hmb_ring_hdr *hdr = emu->slice;

	seq_printf(m, "advert.magic %#x\nadvert.state %u\nadvert.generation %llu\n",
		   le32_to_cpu((__force __le32)READ_ONCE(ad->magic)),
		   le32_to_cpu((__force __le32)READ_ONCE(ad->state)),
		   le64_to_cpu((__force __le64)READ_ONCE(ad->generation)));
	seq_printf(m, "advert.slice_offset %llu\nadvert.slice_len %llu\n",
		   le64_to_cpu((__force __le64)READ_ONCE(ad->slice_offset)),
		   le64_to_cpu((__force __le64)READ_ONCE(ad->slice_len)));
	seq_printf(m, "device.magic %#x\ndevice.ack_generation %llu\n",
		   le32_to_cpu((__force __le32)READ_ONCE(emu->devblk->magic)),
		   hmb_emu_acked(emu));
	seq_printf(m, "ring.magic %#x\nring.version %u.%u\nring.ring_size %llu\nring.epoch %llu\n",
		   le32_to_cpu((__force __le32)READ_ONCE(hdr->magic)),
		   le16_to_cpu((__force __le16)READ_ONCE(hdr->version_major)),
		   le16_to_cpu((__force __le16)READ_ONCE(hdr->version_minor)),
		   hmb_ring_le64(&hdr->ring_size), hmb_ring_le64(&hdr->epoch));
	seq_printf(m, "ring.head %llu\nring.flags %#x\nring.next_seq %llu\nring.tail %llu\n",
		   hmb_ring_head(hdr), hmb_ring_flags(hdr),
		   hmb_ring_le64(&hdr->next_seq), hmb_ring_tail(hdr));
	seq_printf(m, "ring.dropped_records %llu\nring.overflow_events %llu\n",
		   hmb_ring_le64(&hdr->dropped_records),
		   hmb_ring_le64(&hdr->overflow_events));
	seq_printf(m, "irq %s\n", emu->irq >= 0 ? emu->irq_name : "none (sampled)");
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(hmb_emu_state);

static void hmb_emu_debugfs_add(struct hmb_emu *emu)
{
	/* debugfs failures are not errors: the directory is for humans. */
	emu->debugfs = debugfs_create_dir(pci_name(emu->pdev),
					  hmb_emu_debugfs_root);
	debugfs_create_file("state", 0400, emu->debugfs, emu,
			    &hmb_emu_state_fops);
}

/* ---- probe and removal ---- */

/*
 * BAR0 and BAR2 mapped, nothing written. Returns -ENODEV (quietly) for an
 * ivshmem device that is not ours.
 */
static int hmb_emu_map(struct hmb_emu *emu, u64 map_len)
{
	struct pci_dev *pdev = emu->pdev;

	/*
	 * QEMU backs BAR2 with host RAM shared with emu-device, so map it as
	 * memory, not registers: the ring protocol's acquire/release accesses
	 * then work as on the real HMB. The WB request may end up uncached
	 * where the MTRRs say so (docs/kmod.md); that only adds ordering.
	 */
	emu->hmb = memremap(pci_resource_start(pdev, IVSHMEM_SHM_BAR), map_len,
			    MEMREMAP_WB);
	if (!emu->hmb)
		return -ENOMEM;
	emu->advert = emu->hmb + HMB_ADVERT_OFFSET;
	emu->devblk = emu->hmb + HMB_DEVICE_OFFSET;
	emu->slice = emu->hmb + slice_offset;
	if (!hmb_emu_device_opted_in(emu)) {
		dev_info(&pdev->dev,
			 "no hmb-trace device signature in BAR%d: not an emulated HMB, not binding\n",
			 IVSHMEM_SHM_BAR);
		memunmap(emu->hmb);
		return -ENODEV;
	}
	emu->regs = pci_iomap(pdev, IVSHMEM_REGS_BAR, IVSHMEM_REGS_LEN);
	if (!emu->regs) {
		memunmap(emu->hmb);
		return -ENOMEM;
	}
	return 0;
}

static void hmb_emu_unmap(struct hmb_emu *emu)
{
	memunmap(emu->hmb);
	pci_iounmap(emu->pdev, emu->regs);
}

static int hmb_emu_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct hmb_trace_slice slice = { };
	struct hmb_emu *emu;
	bool irq_driven;
	u64 epoch, map_len;
	int ret;

	ret = hmb_emu_check_fit(pdev, &map_len);
	if (ret)
		return ret;
	emu = kzalloc(sizeof(*emu), GFP_KERNEL);
	if (!emu)
		return -ENOMEM;
	emu->pdev = pdev;
	emu->ring_size = ring_size;
	emu->irq = -1;
	mutex_init(&emu->lock);
	pci_set_drvdata(pdev, emu);

	ret = pci_enable_device_mem(pdev);
	if (ret)
		goto err_free;
	ret = pci_request_regions(pdev, HMB_EMU_NAME);
	if (ret)
		goto err_disable;
	ret = hmb_emu_map(emu, map_len);
	if (ret)
		goto err_regions;

	/*
	 * A previous owner (an earlier load, a kexec'd kernel) may have left
	 * a READY advert with the device still writing: withdraw it, ring,
	 * and wait for the device to stop before touching the slice.
	 */
	epoch = hmb_emu_first_epoch(emu);
	ret = hmb_emu_quiesce(emu);
	if (ret)
		goto err_unmap;
	hmb_ring_zero_data(emu->slice, emu->ring_size);
	hmb_ring_init(emu->slice, emu->ring_size, epoch);
	emu->epoch = epoch;

	slice.kva = emu->slice;
	slice.phys = pci_resource_start(pdev, IVSHMEM_SHM_BAR) + slice_offset;
	slice.ring_size = emu->ring_size;
	slice.epoch = epoch;

	irq_driven = hmb_emu_alloc_vector(emu);
	emu->td = hmb_trace_register(&pdev->dev, &slice, &hmb_emu_ops, emu,
				     irq_driven);
	if (IS_ERR(emu->td)) {
		ret = PTR_ERR(emu->td);
		emu->td = NULL;
		goto err_vector;
	}
	if (irq_driven) {
		ret = hmb_emu_request_irq(emu);
		if (ret)
			goto err_unregister;
	}
	hmb_emu_debugfs_add(emu);
	/*
	 * For slot_reset: the AER core resets the link without saving the
	 * config space, so BARs, memory decode and MSI-X come back from here.
	 */
	pci_save_state(pdev);
	/* Only now may the device start producing. */
	hmb_emu_advertise(emu, epoch);
	if (irq_driven)
		dev_info(&pdev->dev,
			 "emulated HMB: %llu-byte ring at offset %lu, epoch %llu, MSI-X, own peer %d, device peer %u\n",
			 emu->ring_size, slice_offset, epoch,
			 (int)readl(emu->regs + IVSHMEM_REG_IVPOSITION), device_peer);
	else
		dev_info(&pdev->dev,
			 "emulated HMB: %llu-byte ring at offset %lu, epoch %llu, no interrupts (ring sampled while open)\n",
			 emu->ring_size, slice_offset, epoch);
	return 0;

err_unregister:
	hmb_trace_unregister(emu->td);
	emu->td = NULL;
err_vector:
	hmb_emu_free_vector(emu);
	/* The header was rewritten but never advertised: nothing to withdraw. */
err_unmap:
	hmb_emu_unmap(emu);
err_regions:
	pci_release_regions(pdev);
err_disable:
	pci_disable_device(pdev);
err_free:
	kfree(emu);
	return ret;
}

/*
 * Stop everything that reaches the ring (interrupt, then the character
 * device), then stop the device and wait for it. Shared by remove and
 * shutdown; runs once.
 */
static void hmb_emu_stop(struct hmb_emu *emu)
{
	if (!emu->td)
		return;
	debugfs_remove_recursive(emu->debugfs);
	emu->debugfs = NULL;
	/* Interrupts first: the handler reaches the ring through the core. */
	hmb_emu_free_vector(emu);
	hmb_trace_unregister(emu->td);
	emu->td = NULL;
	/* Bounded; on timeout it has said so, and there is nothing else to do. */
	hmb_emu_quiesce(emu);
}

static void hmb_emu_remove(struct pci_dev *pdev)
{
	struct hmb_emu *emu = pci_get_drvdata(pdev);

	hmb_emu_stop(emu);
	hmb_emu_unmap(emu);
	pci_release_regions(pdev);
	pci_disable_device(pdev);
	kfree(emu);
}

/* Reboot, poweroff, kexec: leave no live advert behind. */
static void hmb_emu_shutdown(struct pci_dev *pdev)
{
	hmb_emu_stop(pci_get_drvdata(pdev));
}

/*
 * Stop the device and hand the ring to the consumer as after a controller
 * reset: withdraw the advert, wait for the acknowledgment, mark the ring
 * FROZEN. The consumer drains it and REINIT advertises the next generation.
 * Caller holds emu->lock.
 */
static int hmb_emu_freeze_ring(struct hmb_emu *emu)
{
	int ret = hmb_emu_quiesce(emu);

	if (!ret)
		hmb_ring_mark_frozen(emu->slice);
	return ret;
}

/*
 * System sleep (suspend, and hibernation's freeze/poweroff): the device
 * must not write host memory while the system sleeps, so the advert is
 * withdrawn and the device's acknowledgment awaited, as on removal, and
 * the ring is marked FROZEN. Resume does not advertise the same generation
 * again: the acknowledgment names a generation, so a second withdrawal of
 * the same one would find it acknowledged already and not wait. The next
 * generation comes from the consumer's REINIT, as after a controller reset
 * (a real NVMe controller loses its HMB over a suspend too; docs/abi.md).
 * If the device does not acknowledge, the advert is restored and the
 * suspend refused: sleeping with a device still writing is worse.
 */
static int hmb_emu_suspend(struct device *dev)
{
	struct hmb_emu *emu = dev_get_drvdata(dev);
	int ret = 0;

	mutex_lock(&emu->lock);
	if (!emu->td || emu->stopped)
		goto out;
	ret = hmb_emu_freeze_ring(emu);
	if (ret)
		hmb_emu_advertise(emu, emu->epoch);
	else
		emu->stopped = true;
out:
	mutex_unlock(&emu->lock);
	return ret;
}

/* Allow REINIT again and wake the consumer for the FROZEN ring (POLLPRI). */
static int hmb_emu_resume(struct device *dev)
{
	struct hmb_emu *emu = dev_get_drvdata(dev);

	mutex_lock(&emu->lock);
	if (emu->td && emu->stopped) {
		emu->stopped = false;
		hmb_trace_notify(emu->td);
	}
	mutex_unlock(&emu->lock);
	return 0;
}

static DEFINE_SIMPLE_DEV_PM_OPS(hmb_emu_pm_ops, hmb_emu_suspend, hmb_emu_resume);

/*
 * PCI error recovery, treated like an NVMe controller reset: the device is
 * stopped (withdrawal acknowledged) once it can be reached again, the ring
 * is marked FROZEN, and the consumer drains it and starts the next epoch
 * with REINIT. It keeps its file; until resume the core does not touch the
 * slice (hmb_trace_pause()). Only a permanent failure ends the device.
 */
static pci_ers_result_t hmb_emu_error_detected(struct pci_dev *pdev,
					       pci_channel_state_t state)
{
	struct hmb_emu *emu = pci_get_drvdata(pdev);

	if (state == pci_channel_io_perm_failure) {
		dev_warn(&pdev->dev, "permanent PCI error: trace ring abandoned\n");
		WRITE_ONCE(emu->dead, true);
		/* Whoever waits out an earlier pause wakes to ENODEV. */
		if (emu->td)
			hmb_trace_resume(emu->td);
		return PCI_ERS_RESULT_DISCONNECT;
	}
	dev_warn(&pdev->dev, "PCI error (channel state %d): trace ring stopped until reset\n",
		 (__force int)state);
	/*
	 * No doorbell now: BAR0 may not be reachable until the reset. BAR2
	 * neither: after the link reset it reads as zeros (QEMU) or all-ones
	 * until slot_reset restores the config space, so the core stops
	 * reading it, for user mappings too, until resume.
	 */
	mutex_lock(&emu->lock);
	emu->stopped = true;
	mutex_unlock(&emu->lock);
	/* Outside emu->lock: REINIT takes the core's lock, then emu->lock. */
	if (emu->td)
		hmb_trace_pause(emu->td);
	return PCI_ERS_RESULT_NEED_RESET;
}

static pci_ers_result_t hmb_emu_slot_reset(struct pci_dev *pdev)
{
	struct hmb_emu *emu = pci_get_drvdata(pdev);
	int ret = 0;

	/* The reset cleared BARs, memory decode and MSI-X: as saved at probe. */
	pci_restore_state(pdev);
	pci_save_state(pdev);
	mutex_lock(&emu->lock);
	/* BAR2 must show the device again before anything is written to it. */
	if (!hmb_emu_device_opted_in(emu)) {
		dev_err(&pdev->dev, "no device signature in BAR%d after the reset: giving up\n",
			IVSHMEM_SHM_BAR);
		ret = -ENODEV;
	} else if (emu->td) {
		ret = hmb_emu_freeze_ring(emu);
	}
	if (ret)
		WRITE_ONCE(emu->dead, true);
	mutex_unlock(&emu->lock);
	/* Gone for the core: waiters wake to ENODEV, not to a dead ring. */
	if (ret && emu->td)
		hmb_trace_resume(emu->td);
	return ret ? PCI_ERS_RESULT_DISCONNECT : PCI_ERS_RESULT_RECOVERED;
}

static void hmb_emu_error_resume(struct pci_dev *pdev)
{
	struct hmb_emu *emu = pci_get_drvdata(pdev);
	bool wake = false;

	mutex_lock(&emu->lock);
	/*
	 * slot_reset has normally stopped the device already (then this
	 * returns at once); a recovery that skipped it must not hand over a
	 * ring the device still writes.
	 */
	if (emu->td && emu->stopped && !emu->dead) {
		wake = true;
		if (hmb_emu_freeze_ring(emu)) {
			WRITE_ONCE(emu->dead, true);
		} else {
			emu->stopped = false;
			dev_info(&pdev->dev, "recovered from a PCI error: epoch %llu FROZEN\n",
				 emu->epoch);
		}
	}
	mutex_unlock(&emu->lock);
	if (wake) {
		/* Outside emu->lock: the core's lock comes first (REINIT). */
		hmb_trace_resume(emu->td);
		/* POLLPRI (or POLLHUP) for the consumer, as after an interrupt. */
		hmb_trace_notify(emu->td);
	}
}

static const struct pci_error_handlers hmb_emu_err_handlers = {
	.error_detected = hmb_emu_error_detected,
	.slot_reset = hmb_emu_slot_reset,
	.resume = hmb_emu_error_resume,
};

static const struct pci_device_id hmb_emu_ids[] = {
	{ PCI_DEVICE(IVSHMEM_VENDOR_ID, IVSHMEM_DEVICE_ID) },
	{ }
};
MODULE_DEVICE_TABLE(pci, hmb_emu_ids);

static struct pci_driver hmb_emu_driver = {
	.name = HMB_EMU_NAME,
	.id_table = hmb_emu_ids,
	.probe = hmb_emu_probe,
	.remove = hmb_emu_remove,
	.shutdown = hmb_emu_shutdown,
	.err_handler = &hmb_emu_err_handlers,
	.driver.pm = pm_sleep_ptr(&hmb_emu_pm_ops),
};

int hmb_emu_glue_init(void)
{
	int ret;

	ret = hmb_emu_check_params();
	if (ret)
		return ret;
	hmb_emu_debugfs_root = debugfs_create_dir(HMB_EMU_NAME, NULL);
	ret = pci_register_driver(&hmb_emu_driver);
	if (ret)
		debugfs_remove_recursive(hmb_emu_debugfs_root);
	return ret;
}

void hmb_emu_glue_exit(void)
{
	pci_unregister_driver(&hmb_emu_driver);
	debugfs_remove_recursive(hmb_emu_debugfs_root);
}
