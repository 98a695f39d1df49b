// SPDX-License-Identifier: GPL-2.0
/*
 * hmb_nvme_glue.c - the real-device path: the trace slice that the patched
 * NVMe PCI driver (kmod/patches/, a replacement nvme.ko) carves out of a
 * controller's Host Memory Buffer, reached through the driver's client API
 * (include/linux/nvme-hmb-trace.h).
 *
 * The driver owns the slice: it allocates it as part of the HMB, writes the
 * ring header before the HMB is handed to the controller, advertises it
 * with a vendor Set Features and frees it only after our remove callback
 * returned. This glue turns each slice into a /dev/nvme-hmb-traceN of the
 * core and forwards REINIT to the driver.
 *
 * The client API is looked up with symbol_get() rather than linked, so the
 * module also loads over the stock nvme driver (the ivshmem glue alone then
 * works). Either load order works: at load the glue attaches to a patched
 * nvme.ko already there, and a module notifier attaches it when nvme.ko
 * comes up later (at MODULE_STATE_LIVE, after nvme's init registered its
 * PCI driver; slices advertised before the client registers are replayed
 * to it). Once attached it holds a reference on nvme.ko, so `rmmod nvme`
 * is refused (EBUSY) until this module is removed.
 *
 * Wake-ups: the controller raises no interrupt for new records, so the
 * core samples the ring header every poll_ms while the device is open.
 */
#include <linux/module.h>
#include <linux/kernel.h>
#include <linux/device.h>
#include <linux/err.h>
#include <linux/io.h>
#include <linux/mm.h>
#include <linux/mutex.h>
#include <linux/notifier.h>
#include <linux/string.h>
#include <linux/slab.h>
#include <linux/nvme-hmb-trace.h>
#include <asm/byteorder.h>

#include "hmb_trace.h"

struct hmb_nvme {
	struct nvme_hmb_trace_slice *slice;
	struct hmb_trace_dev *td;
};

/* The driver's entry points, from symbol_get(); NULL without the patched driver. */
static int (*hmb_nvme_register_fn)(struct nvme_hmb_trace_client *client);
static void (*hmb_nvme_unregister_fn)(struct nvme_hmb_trace_client *client);
static int (*hmb_nvme_reinit_fn)(struct nvme_hmb_trace_slice *slice, u64 generation);
static void (*hmb_nvme_mem_get_fn)(struct nvme_hmb_trace_mem *mem);
static void (*hmb_nvme_mem_put_fn)(struct nvme_hmb_trace_mem *mem);
static int (*hmb_nvme_mmap_fn)(struct nvme_hmb_trace_mem *mem, unsigned int index,
			       struct vm_area_struct *vma);

static int hmb_nvme_reinit(void *priv, u64 new_epoch)
{
	struct hmb_nvme *hn = priv;
	int ret;

	ret = hmb_nvme_reinit_fn(hn->slice, new_epoch);
	if (ret)
		dev_warn(hn->slice->dev, "trace ring re-initialisation failed (%d)\n", ret);
	else
		dev_info(hn->slice->dev, "trace ring re-initialised, epoch %llu\n", new_epoch);
	return ret;
}

static const struct hmb_trace_backend_ops hmb_nvme_ops = {
	.reinit = hmb_nvme_reinit,
};

/*
 * The slice's DMA memory, mapped by the driver (dma_mmap_coherent()). The
 * core holds a reference until its trace device is released, so a user
 * mapping never outlives the chunks, even after the driver freed the HMB.
 */
static int hmb_nvme_mmap(void *mem, unsigned int index, struct vm_area_struct *vma)
{
	return hmb_nvme_mmap_fn(mem, index, vma);
}

static void hmb_nvme_put(void *mem)
{
	hmb_nvme_mem_put_fn(mem);
}

static const struct hmb_trace_mem_ops hmb_nvme_mem_ops = {
	.mmap = hmb_nvme_mmap,
	.put = hmb_nvme_put,
};

static int hmb_nvme_add(struct nvme_hmb_trace_slice *s)
{
	struct hmb_trace_slice slice = {
		.kva = s->hdr,
		.mem_ops = &hmb_nvme_mem_ops,
		.mem = s->mem,
		.nr_chunks = s->nr_chunks,
		.ring_size = s->ring_size,
		.epoch = s->generation,	/* the driver initialised the ring for it */
	};
	struct hmb_trace_extent *extents;
	struct hmb_nvme *hn;
	unsigned int i;
	int ret;

	if (!s->nr_chunks)
		return -EINVAL;
	hn = kzalloc(sizeof(*hn), GFP_KERNEL);
	extents = kcalloc(s->nr_chunks, sizeof(*extents), GFP_KERNEL);
	if (!hn || !extents) {
		kfree(extents);
		kfree(hn);
		return -ENOMEM;
	}
	for (i = 0; i < s->nr_chunks; i++) {
		extents[i].offset = s->extents[i].offset;
		extents[i].len = s->extents[i].len;
	}
	slice.extents = extents;
	hn->slice = s;
	/* The core's reference on the memory, if it registers. */
	hmb_nvme_mem_get_fn(s->mem);
	hn->td = hmb_trace_register(s->dev, &slice, &hmb_nvme_ops, hn, false);
	kfree(extents);	/* copied */
	if (IS_ERR(hn->td)) {
		ret = PTR_ERR(hn->td);
		hmb_nvme_mem_put_fn(s->mem);
		dev_warn(s->dev, "nvme%d: no trace device (%d)\n", s->instance, ret);
		kfree(hn);
		return ret;
	}
	s->client_priv = hn;
	dev_info(s->dev, "nvme%d: HMB trace ring of %llu bytes in %u chunks at HMB offset %llu, generation %llu (ring sampled while open)\n",
		 s->instance, s->ring_size, s->nr_chunks, s->hmb_offset, s->generation);
	return 0;
}

/*
 * The controller was reset; the driver marked the ring FROZEN (the
 * controller may have died before it could). Wake pollers now rather than
 * at the next sample: they see POLLPRI and may REINIT.
 */
static void hmb_nvme_reset(struct nvme_hmb_trace_slice *s)
{
	struct hmb_nvme *hn = s->client_priv;

	if (s->dead) {
		/* A re-init's advert was refused after the reset: no more records. */
		hmb_trace_refused(hn->td);
		return;
	}
	dev_info(s->dev, "nvme%d: controller reset, trace epoch frozen\n", s->instance);
	hmb_trace_notify(hn->td);
}

/*
 * How long the driver's HMB disable or removal waits for an open reader to
 * drain the frozen ring: the daemon wakes within its poll and drains in
 * milliseconds; this bounds a reader that never does.
 */
#define HMB_NVME_DRAIN_MS 1000

/*
 * Before the driver frees the slice: after this nothing of ours touches it.
 * The controller has let the HMB go (EHM=0, shutdown or reset: FROZEN was
 * its last write), so what it wrote is drained first, not lost.
 */
static void hmb_nvme_remove(struct nvme_hmb_trace_slice *s)
{
	struct hmb_nvme *hn = s->client_priv;

	hmb_trace_drain(hn->td, HMB_NVME_DRAIN_MS);
	hmb_trace_unregister(hn->td);
	s->client_priv = NULL;
	kfree(hn);
}

static struct nvme_hmb_trace_client hmb_nvme_client = {
	.owner = THIS_MODULE,
	.add = hmb_nvme_add,
	.reset = hmb_nvme_reset,
	.remove = hmb_nvme_remove,
};

static void hmb_nvme_put_symbols(void)
{
	if (hmb_nvme_register_fn)
		symbol_put(nvme_hmb_trace_register);
	if (hmb_nvme_unregister_fn)
		symbol_put(nvme_hmb_trace_unregister);
	if (hmb_nvme_reinit_fn)
		symbol_put(nvme_hmb_trace_reinit);
	if (hmb_nvme_mem_get_fn)
		symbol_put(nvme_hmb_trace_mem_get);
	if (hmb_nvme_mem_put_fn)
		symbol_put(nvme_hmb_trace_mem_put);
	if (hmb_nvme_mmap_fn)
		symbol_put(nvme_hmb_trace_mmap);
	hmb_nvme_register_fn = NULL;
	hmb_nvme_unregister_fn = NULL;
	hmb_nvme_reinit_fn = NULL;
	hmb_nvme_mem_get_fn = NULL;
	hmb_nvme_mem_put_fn = NULL;
	hmb_nvme_mmap_fn = NULL;
}

/* Serialises attaching (at load, or from the notifier) and detaching. */
static DEFINE_MUTEX(hmb_nvme_attach_lock);

/*
 * Attach to the patched driver if it is loaded: take its entry points and
 * register our client. Quietly does nothing without it (the stock driver,
 * or no nvme.ko yet).
 */
static int hmb_nvme_attach(void)
{
	int ret = 0;

	mutex_lock(&hmb_nvme_attach_lock);
	if (hmb_nvme_register_fn)
		goto out;
	hmb_nvme_register_fn = symbol_get(nvme_hmb_trace_register);
	hmb_nvme_unregister_fn = symbol_get(nvme_hmb_trace_unregister);
	hmb_nvme_reinit_fn = symbol_get(nvme_hmb_trace_reinit);
	hmb_nvme_mem_get_fn = symbol_get(nvme_hmb_trace_mem_get);
	hmb_nvme_mem_put_fn = symbol_get(nvme_hmb_trace_mem_put);
	hmb_nvme_mmap_fn = symbol_get(nvme_hmb_trace_mmap);
	if (!hmb_nvme_register_fn || !hmb_nvme_unregister_fn || !hmb_nvme_reinit_fn ||
	    !hmb_nvme_mem_get_fn || !hmb_nvme_mem_put_fn || !hmb_nvme_mmap_fn) {
		hmb_nvme_put_symbols();
		goto out;
	}
	ret = hmb_nvme_register_fn(&hmb_nvme_client);
	if (ret) {
		pr_warn("nvme-hmb-trace: cannot register with the nvme driver (%d)\n", ret);
		hmb_nvme_put_symbols();
		goto out;
	}
	pr_info("nvme-hmb-trace: attached to the patched nvme driver\n");
out:
	mutex_unlock(&hmb_nvme_attach_lock);
	return ret;
}

/*
 * nvme.ko loaded after us: attach once it is live. Its probes may still
 * run (asynchronously); every slice they advertise reaches our add, from
 * the replay or from the driver directly.
 */
static int hmb_nvme_module_event(struct notifier_block *nb, unsigned long state, void *data)
{
	struct module *mod = data;

	if (state == MODULE_STATE_LIVE && !strcmp(mod->name, "nvme"))
		hmb_nvme_attach();
	return NOTIFY_DONE;
}

static struct notifier_block hmb_nvme_module_nb = {
	.notifier_call = hmb_nvme_module_event,
};

int hmb_nvme_glue_init(void)
{
	int ret;

	/* First the notifier, so a nvme.ko coming up meanwhile is not missed. */
	ret = register_module_notifier(&hmb_nvme_module_nb);
	if (ret)
		return ret;
	ret = hmb_nvme_attach();
	if (ret) {
		unregister_module_notifier(&hmb_nvme_module_nb);
		return ret;
	}
	if (!hmb_nvme_register_fn)
		pr_info("nvme-hmb-trace: no patched nvme driver loaded yet; attaching when one is\n");
	return 0;
}

void hmb_nvme_glue_exit(void)
{
	unregister_module_notifier(&hmb_nvme_module_nb);
	mutex_lock(&hmb_nvme_attach_lock);
	if (hmb_nvme_unregister_fn) {
		hmb_nvme_unregister_fn(&hmb_nvme_client);
		hmb_nvme_put_symbols();
	}
	mutex_unlock(&hmb_nvme_attach_lock);
}
