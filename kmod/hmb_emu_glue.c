// SPDX-License-Identifier: GPL-2.0
/*
 * hmb_emu_glue.c - the emulated controller: QEMU's ivshmem PCI device
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
 * hmb_trace_notify()), BAR2 shared memory. ivshmem-plain: BAR0 and BAR2
 * only, no interrupts; the core then samples the ring on a timer.
 */
#include <linux/module.h>
#include <linux/kernel.h>
#include <linux/pci.h>
#include <linux/interrupt.h>
#include <linux/io.h>
#include <linux/slab.h>
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
#define HMB_EMU_DOORBELL_VECTOR	0

static ulong ring_size = 16UL << 20;
module_param(ring_size, ulong, 0444);
MODULE_PARM_DESC(ring_size, "Trace ring data area in bytes: power of two, 8192..1 GiB (default 16 MiB)");

static ulong slice_offset = HMB_TRACE_SLICE_ALIGN;
module_param(slice_offset, ulong, 0444);
MODULE_PARM_DESC(slice_offset, "Offset of the trace slice in the emulated HMB (BAR2), a multiple of 4096, at least 4096 (default 4096)");

static uint device_peer;
module_param(device_peer, uint, 0444);
MODULE_PARM_DESC(device_peer, "ivshmem peer id of the emulated device (emu-device), whose doorbell is rung after advertising (default 0)");

struct hmb_emu {
	struct pci_dev *pdev;
	void __iomem *regs;		/* BAR0 */
	void *hmb;			/* BAR2 [0, slice end), normal memory */
	struct hmb_advert *advert;	/* at HMB_ADVERT_OFFSET */
	void *slice;
	u64 ring_size;
	int irq;			/* -1: no device interrupts */
	struct hmb_trace_dev *td;
};

static void hmb_emu_ring_doorbell(struct hmb_emu *emu)
{
	/* writel orders the advert's stores before the MMIO doorbell. */
	writel((device_peer << 16) | HMB_EMU_DOORBELL_VECTOR,
	       emu->regs + IVSHMEM_REG_DOORBELL);
}

/* Tell the device to stop: it must not produce without a READY advert. */
static void hmb_emu_withdraw(struct hmb_emu *emu)
{
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

	hmb_emu_withdraw(emu);
	hmb_ring_init(emu->slice, emu->ring_size, new_epoch);
	hmb_emu_advertise(emu, new_epoch);
	dev_info(&emu->pdev->dev, "trace ring re-initialised, epoch %llu\n",
		 new_epoch);
	return 0;
}

static const struct hmb_trace_backend_ops hmb_emu_ops = {
	.reinit = hmb_emu_reinit,
};

static irqreturn_t hmb_emu_irq(int irq, void *data)
{
	struct hmb_emu *emu = data;

	hmb_trace_notify(emu->td);
	return IRQ_HANDLED;
}

static int hmb_emu_check_params(struct pci_dev *pdev)
{
	resource_size_t bar_len = pci_resource_len(pdev, IVSHMEM_SHM_BAR);

	if (!(pci_resource_flags(pdev, IVSHMEM_SHM_BAR) & IORESOURCE_MEM)) {
		dev_err(&pdev->dev, "BAR%d is not a memory BAR\n",
			IVSHMEM_SHM_BAR);
		return -ENODEV;
	}
	if (!hmb_ring_size_valid(ring_size)) {
		dev_err(&pdev->dev,
			"ring_size=%lu is not a power of two in [%u, %llu]\n",
			ring_size, HMB_RING_MIN_SIZE, HMB_RING_MAX_SIZE);
		return -EINVAL;
	}
	if (slice_offset < HMB_TRACE_SLICE_ALIGN ||
	    slice_offset % HMB_TRACE_SLICE_ALIGN ||
	    slice_offset % PAGE_SIZE) {
		dev_err(&pdev->dev,
			"slice_offset=%lu must be a multiple of %u and of the page size, and leave room for the advert\n",
			slice_offset, HMB_TRACE_SLICE_ALIGN);
		return -EINVAL;
	}
	if ((u64)slice_offset + HMB_RING_HDR_SIZE + ring_size > bar_len) {
		dev_err(&pdev->dev,
			"trace slice (offset %lu, %llu bytes) does not fit the %llu-byte HMB\n",
			slice_offset, (u64)HMB_RING_HDR_SIZE + ring_size,
			(u64)bar_len);
		return -EINVAL;
	}
	return 0;
}

/* Whether the device can interrupt us: ivshmem-doorbell has MSI-X, plain has not. */
static bool hmb_emu_has_irq(struct pci_dev *pdev)
{
	return pci_msix_vec_count(pdev) > 0;
}

/* Called once emu->td exists: the handler may run at once. */
static int hmb_emu_setup_irq(struct hmb_emu *emu)
{
	struct pci_dev *pdev = emu->pdev;
	int ret;

	/* An MSI-X message is a DMA write: without bus mastering it is dropped. */
	pci_set_master(pdev);
	ret = pci_alloc_irq_vectors(pdev, 1, 1, PCI_IRQ_MSIX);
	if (ret < 0)
		goto err_master;
	ret = request_irq(pci_irq_vector(pdev, 0), hmb_emu_irq, 0,
			  HMB_EMU_NAME, emu);
	if (ret) {
		pci_free_irq_vectors(pdev);
		goto err_master;
	}
	emu->irq = pci_irq_vector(pdev, 0);
	return 0;

err_master:
	pci_clear_master(pdev);
	return ret;
}

static void hmb_emu_teardown_irq(struct hmb_emu *emu)
{
	if (emu->irq < 0)
		return;
	free_irq(emu->irq, emu);
	pci_free_irq_vectors(emu->pdev);
	pci_clear_master(emu->pdev);
	emu->irq = -1;
}

static int hmb_emu_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct hmb_trace_slice slice;
	resource_size_t hmb_phys;
	struct hmb_emu *emu;
	bool irq_driven;
	u64 epoch;
	int ret;

	ret = hmb_emu_check_params(pdev);
	if (ret)
		return ret;
	emu = kzalloc(sizeof(*emu), GFP_KERNEL);
	if (!emu)
		return -ENOMEM;
	emu->pdev = pdev;
	emu->ring_size = ring_size;
	emu->irq = -1;
	pci_set_drvdata(pdev, emu);

	ret = pci_enable_device_mem(pdev);
	if (ret)
		goto err_free;
	ret = pci_request_regions(pdev, HMB_EMU_NAME);
	if (ret)
		goto err_disable;
	emu->regs = pci_iomap(pdev, IVSHMEM_REGS_BAR, IVSHMEM_REGS_LEN);
	if (!emu->regs) {
		ret = -ENOMEM;
		goto err_regions;
	}
	/*
	 * QEMU backs BAR2 with host RAM shared with emu-device, so map it as
	 * memory, not registers: the ring protocol's acquire/release accesses
	 * then work as on the real HMB. The WB request may end up uncached
	 * where the MTRRs say so (docs/kmod.md); that only adds ordering.
	 */
	hmb_phys = pci_resource_start(pdev, IVSHMEM_SHM_BAR);
	emu->hmb = memremap(hmb_phys, slice_offset + HMB_RING_HDR_SIZE + ring_size,
			    MEMREMAP_WB);
	if (!emu->hmb) {
		ret = -ENOMEM;
		goto err_iounmap;
	}
	emu->advert = emu->hmb + HMB_ADVERT_OFFSET;
	emu->slice = emu->hmb + slice_offset;

	/* A previous load may have left a READY advert: retract it first. */
	epoch = hmb_emu_first_epoch(emu);
	hmb_emu_withdraw(emu);
	hmb_ring_init(emu->slice, emu->ring_size, epoch);

	slice.kva = emu->slice;
	slice.phys = hmb_phys + slice_offset;
	slice.ring_size = emu->ring_size;

	irq_driven = hmb_emu_has_irq(pdev);
	emu->td = hmb_trace_register(&pdev->dev, &slice, &hmb_emu_ops, emu,
				     irq_driven);
	if (IS_ERR(emu->td)) {
		ret = PTR_ERR(emu->td);
		goto err_memunmap;
	}
	if (irq_driven) {
		ret = hmb_emu_setup_irq(emu);
		if (ret)
			goto err_unregister;
	}
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
err_memunmap:
	memunmap(emu->hmb);
err_iounmap:
	pci_iounmap(pdev, emu->regs);
err_regions:
	pci_release_regions(pdev);
err_disable:
	pci_disable_device(pdev);
err_free:
	kfree(emu);
	return ret;
}

static void hmb_emu_remove(struct pci_dev *pdev)
{
	struct hmb_emu *emu = pci_get_drvdata(pdev);

	/* Interrupts first: the handler reaches the ring through the core. */
	hmb_emu_teardown_irq(emu);
	hmb_trace_unregister(emu->td);
	/* Stop the device, then let the HMB go. */
	hmb_emu_withdraw(emu);
	hmb_emu_ring_doorbell(emu);
	memunmap(emu->hmb);
	pci_iounmap(pdev, emu->regs);
	pci_release_regions(pdev);
	pci_disable_device(pdev);
	kfree(emu);
}

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
};

int hmb_emu_glue_init(void)
{
	return pci_register_driver(&hmb_emu_driver);
}

void hmb_emu_glue_exit(void)
{
	pci_unregister_driver(&hmb_emu_driver);
}
