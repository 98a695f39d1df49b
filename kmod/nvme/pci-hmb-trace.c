// SPDX-License-Identifier: GPL-2.0
/*
 * Firmware trace slice in the NVMe PCI driver's Host Memory Buffer.
 *
 * A controller that declares the trace contract (struct hmb_nvme_trace_id at
 * HMB_NVME_ID_VS_OFFSET of Identify Controller) gets part of its HMB as a
 * trace ring (include/uapi/linux/nvme_hmb_trace.h) that its firmware fills
 * and a trace client maps read-only. The declaration is read before the
 * descriptor list is built; every other controller gets exactly the stock
 * HMB (same size and list), no vendor command and no host access to it.
 *
 * Without DMA CMA a physically contiguous chunk is at most
 * PAGE_SIZE * MAX_ORDER_NR_PAGES (4 MiB), so the slice spans several
 * chunks, appended to the descriptor list after the cache chunks:
 *
 *   lead chunk:  max(4 KiB, HMMINDS); the ring header is its last page
 *   data chunks: the data area in order, all of one size (at most 4 MiB)
 *
 * The controller sees the HMB as the chunks laid end to end in list order,
 * so the data area follows the header without a gap. The bytes of the lead
 * chunk before the header are unused. The kernel only accesses the header
 * (the driver writes it, the trace client reads head and flags and writes
 * tail), through the lead chunk's own coherent mapping: no vmap(), no page
 * lookup. The reader maps the ring view one chunk per mapping, each with
 * dma_mmap_coherent() (nvme_hmb_trace_mmap()). The chunks are a refcounted
 * object that outlives the HMB while a client keeps a reference for user
 * mappings (docs/kmod.md, "Issue 26, point 5").
 *
 * A slice whose advert the controller did not adopt is dead: the host never
 * writes it again, and the next HMB is built without a slice.
 *
 * The advert (Set Features with the declared FID) reaches the controller
 * only while it has this HMB enabled: t->enabled is set once Set Features
 * 0Dh enabled it, and cleared before EHM=0 (under advert_lock, which every
 * advert holds until its command completed) and when the controller is
 * disabled (nvme_dev_disable(), lockless: it runs in the timeout handler
 * that an advert in flight may be waiting for). An advert sent outside the
 * HMB enable path is marked as a passthrough command, so nvme-core holds it
 * back unless the controller is LIVE (__nvme_check_ready()) and, marked
 * failfast, fails it with a host path error instead: it is never dispatched
 * during a reset, before the reset enabled the HMB again. No admin command
 * is sent under t->lock, which a trace client's REINIT takes.
 */
#include <linux/dma-mapping.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/log2.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <uapi/linux/nvme_hmb_trace.h>

#include "nvme.h"
#include "pci-hmb-trace.h"

static unsigned int hmb_trace_kb = SZ_16K;
module_param(hmb_trace_kb, uint, 0444);
MODULE_PARM_DESC(hmb_trace_kb,
		 "HMB trace ring size in KiB for controllers that declare the trace contract (power of two, 0 = off)");

static void nvme_hmb_trace_advert_work(struct work_struct *work);

/*
 * The slice's chunks, with the ring view's extent of each. Freed at the
 * last reference: the driver's (until the HMB is freed) or a client's.
 */
struct nvme_hmb_trace_mem {
	struct kref ref;
	struct device *dev;	/* holds a reference until the chunks are freed */
	unsigned int nr_chunks;
	bool outlived;		/* the HMB went first: say when the chunks go */
	struct nvme_hmb_trace_chunk *chunks;
	struct nvme_hmb_trace_extent *extents;
};

static u64 nvme_hmb_trace_ring_size(void)
{
	u64 size = (u64)hmb_trace_kb * SZ_1K;

	if (offset_in_page(HMB_RING_HDR_SIZE) || !is_power_of_2(size) ||
	    size < HMB_RING_MIN_SIZE || size > HMB_RING_MAX_SIZE)
		return 0;
	return size;
}

static u64 nvme_hmb_trace_lead_size(struct nvme_hmb_trace *t)
{
	u64 lead = max_t(u64, HMB_RING_HDR_SIZE,
			 (u64)t->ctrl->hmminds * NVME_CTRL_PAGE_SIZE);

	return round_up(lead, PAGE_SIZE);
}

/*
 * The controller's declaration of the trace contract, read with Identify
 * Controller before the HMB is built. Returns the largest ring it takes,
 * 0 when it declares nothing (or not the ring ABI major this driver writes).
 */
static u64 nvme_hmb_trace_declared(struct nvme_hmb_trace *t)
{
	struct hmb_nvme_trace_id *id;
	struct nvme_command c = { };
	u64 max_ring = 0;
	u8 *data;

	data = kzalloc(NVME_IDENTIFY_DATA_SIZE, GFP_KERNEL);
	if (!data)
		return 0;
	c.identify.opcode = nvme_admin_identify;
	c.identify.cns = NVME_ID_CNS_CTRL;
	if (nvme_submit_sync_cmd(t->ctrl->admin_q, &c, data,
				 NVME_IDENTIFY_DATA_SIZE))
		goto out;
	id = (struct hmb_nvme_trace_id *)(data + HMB_NVME_ID_VS_OFFSET);
	if (le64_to_cpu((__force __le64)id->magic) != HMB_NVME_ID_MAGIC)
		goto out;
	if (le16_to_cpu((__force __le16)id->abi_major) !=
	    HMB_RING_VERSION_MAJOR || id->fid < 0xc0) {
		dev_info(t->ctrl->device,
			 "trace contract declared with ring ABI %u, FID %#x: not used\n",
			 le16_to_cpu((__force __le16)id->abi_major), id->fid);
		goto out;
	}
	t->fid = id->fid;
	max_ring = le64_to_cpu((__force __le64)id->max_ring_size);
	if (!max_ring)
		max_ring = HMB_RING_MAX_SIZE;
out:
	kfree(data);
	return max_ring;
}

/*
 * Called before a new HMB is allocated: the HMB size left for the
 * controller cache. A slice is carved (nvme_hmb_trace_alloc()) only for a
 * controller that declares the contract, and only when the cache keeps at
 * least HMMIN within the preferred size; otherwise the cache gets the whole
 * preferred size, as with the stock driver.
 */
u64 nvme_hmb_trace_cache_size(struct nvme_hmb_trace *t, struct nvme_ctrl *ctrl,
			      struct device *dmadev, u64 preferred, u64 min)
{
	u64 ring = nvme_hmb_trace_ring_size();
	u64 max_ring, slice;

	/* Once per controller: nothing else touches t before a first HMB. */
	if (!t->ctrl) {
		mutex_init(&t->lock);
		mutex_init(&t->advert_lock);
		mutex_init(&t->client_lock);
		INIT_LIST_HEAD(&t->entry);
		INIT_WORK(&t->advert_work, nvme_hmb_trace_advert_work);
	}
	t->ctrl = ctrl;
	t->dmadev = dmadev;
	t->want_ring = 0;
	if (!hmb_trace_kb || t->refused)
		return preferred;
	max_ring = nvme_hmb_trace_declared(t);
	if (!max_ring)
		return preferred;
	if (!ring) {
		dev_warn(ctrl->device, "hmb_trace_kb=%u is not a valid ring size\n",
			 hmb_trace_kb);
		return preferred;
	}
	if (ring > max_ring)
		ring = rounddown_pow_of_two(max_ring);
	if (ring < HMB_RING_MIN_SIZE) {
		dev_info(ctrl->device,
			 "no trace slice: the controller takes at most %llu bytes\n",
			 max_ring);
		return preferred;
	}
	slice = ring + nvme_hmb_trace_lead_size(t);
	if (preferred < slice + max_t(u64, min, NVME_CTRL_PAGE_SIZE)) {
		dev_info(ctrl->device,
			 "no trace slice: %llu KiB ring + HMMIN %llu KiB exceed the HMB size %llu KiB\n",
			 ring >> 10, min >> 10, preferred >> 10);
		return preferred;
	}
	t->want_ring = ring;
	return preferred - slice;
}

static void nvme_hmb_trace_mem_release(struct kref *ref)
{
	struct nvme_hmb_trace_mem *mem = container_of(ref, struct nvme_hmb_trace_mem, ref);
	unsigned int i;

	for (i = 0; i < mem->nr_chunks; i++)
		dma_free_coherent(mem->dev, mem->chunks[i].size,
				  mem->chunks[i].cpu, mem->chunks[i].dma);
	if (mem->outlived)
		dev_info(mem->dev, "trace slice memory freed after its last user mapping\n");
	put_device(mem->dev);
	kfree(mem->chunks);
	kfree(mem->extents);
	kfree(mem);
}

void nvme_hmb_trace_mem_get(struct nvme_hmb_trace_mem *mem)
{
	kref_get(&mem->ref);
}
EXPORT_SYMBOL_GPL(nvme_hmb_trace_mem_get);

void nvme_hmb_trace_mem_put(struct nvme_hmb_trace_mem *mem)
{
	kref_put(&mem->ref, nvme_hmb_trace_mem_release);
}
EXPORT_SYMBOL_GPL(nvme_hmb_trace_mem_put);

/*
 * dma_mmap_coherent() maps from vm_start and reads vm_pgoff as the offset
 * into the allocation, so it maps one chunk into one vma: vm_pgoff (the
 * chunk's offset in the ring view, which the caller matched) is replaced
 * around the call by the offset of the chunk's part of the view in its
 * allocation (all of a data chunk; the last page of the lead chunk).
 */
int nvme_hmb_trace_mmap(struct nvme_hmb_trace_mem *mem, unsigned int index,
			struct vm_area_struct *vma)
{
	unsigned long pgoff = vma->vm_pgoff;
	struct nvme_hmb_trace_chunk *c;
	u64 len;
	int ret;

	if (index >= mem->nr_chunks)
		return -EINVAL;
	c = &mem->chunks[index];
	len = mem->extents[index].len;
	if (vma->vm_end - vma->vm_start != len)
		return -EINVAL;
	vma->vm_pgoff = (c->size - len) >> PAGE_SHIFT;
	ret = dma_mmap_coherent(mem->dev, vma, c->cpu, c->dma, c->size);
	vma->vm_pgoff = pgoff;
	return ret;
}
EXPORT_SYMBOL_GPL(nvme_hmb_trace_mmap);

/*
 * The driver's reference goes with the HMB. A client that still holds one
 * (for a reader's mapping) keeps the chunks; the controller no longer has
 * them.
 */
static void nvme_hmb_trace_drop_mem(struct nvme_hmb_trace *t)
{
	struct nvme_hmb_trace_mem *mem = t->mem;

	if (!mem)
		return;
	t->mem = NULL;
	mem->outlived = kref_read(&mem->ref) > 1;
	if (mem->outlived)
		dev_info(mem->dev, "trace slice memory kept until its last user mapping is gone\n");
	nvme_hmb_trace_mem_put(mem);
}

static void nvme_hmb_trace_free_slice(struct nvme_hmb_trace *t)
{
	t->slice.hdr = NULL;
	t->slice.mem = NULL;
	t->slice.extents = NULL;
	t->slice.nr_chunks = 0;
	nvme_hmb_trace_drop_mem(t);
	t->hsize_slice = 0;
	if (t->descs)
		dma_free_coherent(t->dmadev, t->descs_size, t->descs,
				  t->descs_dma);
	t->descs = NULL;
	t->nr_descs = 0;
	t->hsize = 0;
	if (t->advert)
		dma_free_coherent(t->dmadev, sizeof(*t->advert), t->advert,
				  t->advert_dma);
	t->advert = NULL;
	t->dead = false;
	t->slice.dead = false;
	t->fresh = false;
	t->ctrl_dead = false;
	WRITE_ONCE(t->enabled, false);
}

static int nvme_hmb_trace_alloc_chunks(struct nvme_hmb_trace *t, u64 ring,
				       u64 chunk_size)
{
	u64 lead = nvme_hmb_trace_lead_size(t);
	unsigned int nr = 1 + div64_u64(ring, chunk_size);
	struct nvme_hmb_trace_mem *mem;
	unsigned int i;

	mem = kzalloc(sizeof(*mem), GFP_KERNEL);
	if (!mem)
		return -ENOMEM;
	kref_init(&mem->ref);
	mem->dev = get_device(t->dmadev);
	t->mem = mem;
	mem->chunks = kcalloc(nr, sizeof(*mem->chunks), GFP_KERNEL);
	mem->extents = kcalloc(nr, sizeof(*mem->extents), GFP_KERNEL);
	if (!mem->chunks || !mem->extents)
		return -ENOMEM;

	for (i = 0; i < nr; i++) {
		struct nvme_hmb_trace_chunk *c = &mem->chunks[i];

		c->size = i ? chunk_size : lead;
		c->cpu = dma_alloc_coherent(t->dmadev, c->size, &c->dma,
					    GFP_KERNEL | __GFP_NOWARN);
		if (!c->cpu)
			return -ENOMEM;
		mem->nr_chunks++;
		t->hsize_slice += c->size;
		/* Of the lead chunk only its last page (the header) is the view's. */
		mem->extents[i].offset = i ? HMB_RING_HDR_SIZE + (i - 1) * chunk_size : 0;
		mem->extents[i].len = i ? chunk_size : HMB_RING_HDR_SIZE;
	}

	/* The header: the lead chunk's last page, in the chunk's own mapping. */
	t->slice.hdr = mem->chunks[0].cpu + mem->chunks[0].size -
		       HMB_RING_HDR_SIZE;
	t->slice.mem = mem;
	t->slice.extents = mem->extents;
	t->slice.nr_chunks = nr;
	return 0;
}

/*
 * The descriptor list the controller receives: every cache chunk, then the
 * slice chunks. No cache chunk is dropped: when the combined list exceeds
 * HMMAXD there is no slice and the controller gets the cache list alone.
 */
static int nvme_hmb_trace_build_descs(struct nvme_hmb_trace *t,
				      const struct nvme_host_mem_buf_desc *cache,
				      u32 nr_cache)
{
	u32 hmmaxd = t->ctrl->hmmaxd;
	u64 cache_size = 0;
	u32 i;

	if (hmmaxd && nr_cache + t->slice.nr_chunks > hmmaxd) {
		dev_info(t->ctrl->device,
			 "no trace slice: %u cache + %u slice descriptors exceed HMMAXD %u\n",
			 nr_cache, t->slice.nr_chunks, hmmaxd);
		return -ENOSPC;
	}
	t->descs_size = (nr_cache + t->slice.nr_chunks) * sizeof(*t->descs);
	t->descs = dma_alloc_coherent(t->dmadev, t->descs_size, &t->descs_dma,
				      GFP_KERNEL);
	if (!t->descs)
		return -ENOMEM;
	for (i = 0; i < nr_cache; i++) {
		t->descs[i] = cache[i];
		cache_size += (u64)le32_to_cpu(cache[i].size) *
			      NVME_CTRL_PAGE_SIZE;
	}
	for (i = 0; i < t->slice.nr_chunks; i++) {
		const struct nvme_hmb_trace_chunk *c = &t->mem->chunks[i];

		t->descs[nr_cache + i].addr = cpu_to_le64(c->dma);
		t->descs[nr_cache + i].size =
			cpu_to_le32(c->size / NVME_CTRL_PAGE_SIZE);
	}
	t->nr_descs = nr_cache + t->slice.nr_chunks;
	t->hsize = cache_size + t->hsize_slice;
	t->slice.hmb_offset = cache_size + t->mem->chunks[0].size -
			      HMB_RING_HDR_SIZE;
	return 0;
}

/*
 * Write a fresh ring header for @generation. The controller must not be
 * producing: the slice is not advertised yet, or the controller froze the
 * ring or was reset. The data area is not zeroed: a new slice comes zeroed
 * from dma_alloc_coherent(), and after a re-init nothing at or beyond head
 * is valid, so a REINIT writes 4 KiB, not up to 1 GiB, under its locks.
 */
static void nvme_hmb_trace_init_ring(struct nvme_hmb_trace *t, u64 generation)
{
	struct hmb_ring_hdr *hdr = t->slice.hdr;

	memset(hdr, 0, HMB_RING_HDR_SIZE);
	hdr->magic = (__force __u32)cpu_to_le32(HMB_RING_MAGIC);
	hdr->version_major = (__force __u16)cpu_to_le16(HMB_RING_VERSION_MAJOR);
	hdr->version_minor = (__force __u16)cpu_to_le16(HMB_RING_VERSION_MINOR);
	hdr->hdr_size = (__force __u32)cpu_to_le32(HMB_RING_HDR_SIZE);
	hdr->max_record = (__force __u32)cpu_to_le32(HMB_RECORD_MAX_SIZE);
	hdr->ring_size = (__force __u64)cpu_to_le64(t->slice.ring_size);
	hdr->epoch = (__force __u64)cpu_to_le64(generation);
}

/*
 * The epoch is over without the controller's FROZEN (it was reset). Only on
 * a slice the controller adopted, which it declared shared with the host.
 */
static void nvme_hmb_trace_mark_frozen(struct nvme_hmb_trace *t)
{
	struct hmb_ring_hdr *hdr = t->slice.hdr;
	u32 flags = le32_to_cpu((__force __le32)READ_ONCE(hdr->flags));

	/* Release: pairs with the consumer's acquire of flags (ABI rule 6). */
	smp_store_release(&hdr->flags,
			  (__force __u32)cpu_to_le32(flags | HMB_RING_FLAG_FROZEN));
}

/* The advert for @generation, in the buffer the controller reads (PRP1). */
static void nvme_hmb_trace_fill_advert(struct nvme_hmb_trace *t,
				       u64 generation)
{
	struct hmb_advert *adv = t->advert;

	memset(adv, 0, sizeof(*adv));
	adv->magic = (__force __u32)cpu_to_le32(HMB_ADVERT_MAGIC);
	adv->state = (__force __u32)cpu_to_le32(HMB_ADVERT_STATE_READY);
	adv->generation = (__force __u64)cpu_to_le64(generation);
	adv->slice_offset = (__force __u64)cpu_to_le64(t->slice.hmb_offset);
	adv->slice_len = (__force __u64)cpu_to_le64(HMB_RING_HDR_SIZE +
						    t->slice.ring_size);
}

/*
 * Whether @ret is the controller's answer to the advert, as opposed to the
 * command not reaching it (an errno, or the status the host completes a
 * command with when the controller is not ready or was reset).
 */
static bool nvme_hmb_trace_refused_by_ctrl(int ret)
{
	u16 sc = ret & 0x7ff;

	return ret > 0 && sc != NVME_SC_HOST_PATH_ERROR &&
	       sc != NVME_SC_HOST_ABORTED_CMD;
}

/*
 * Send the advert in t->advert: Set Features with the FID the controller
 * declared, the data at PRP1 (as pci.c's Doorbell Buffer Config). Caller
 * holds advert_lock, not t->lock. With @gated the command is a passthrough
 * as far as nvme-core is concerned: dispatched only while the controller is
 * LIVE, else failed with a host path error. Returns 0, a negative errno
 * (not sent, or cancelled by a reset), or the controller's NVMe status.
 */
static int nvme_hmb_trace_submit(struct nvme_hmb_trace *t, bool gated)
{
	struct nvme_command c = { };
	struct request *req;
	blk_status_t status;
	int ret;

	lockdep_assert_held(&t->advert_lock);
	c.features.opcode = nvme_admin_set_features;
	c.features.fid = cpu_to_le32(t->fid);
	c.features.dptr.prp1 = cpu_to_le64(t->advert_dma);
	req = blk_mq_alloc_request(t->ctrl->admin_q, REQ_OP_DRV_OUT, 0);
	if (IS_ERR(req))
		return PTR_ERR(req);
	nvme_init_request(req, &c);
	if (gated) {
		nvme_req(req)->flags |= NVME_REQ_USERCMD;
		req->cmd_flags |= REQ_FAILFAST_DRIVER;
	}
	status = blk_execute_rq(req, false);
	if (nvme_req(req)->flags & NVME_REQ_CANCELLED)
		ret = -EINTR;
	else if (nvme_req(req)->status)
		ret = nvme_req(req)->status;
	else
		ret = blk_status_to_errno(status);
	blk_mq_free_request(req);
	if (gated && ret && !nvme_hmb_trace_refused_by_ctrl(ret))
		dev_info(t->ctrl->device,
			 "trace slice advert not sent (%d): sent once the HMB is enabled again\n",
			 ret);
	else if (ret)
		dev_warn(t->ctrl->device,
			 "trace slice not adopted by the controller (%d)\n", ret);
	return ret;
}

/*
 * The advert was not adopted: the slice stays in this HMB's list (only a
 * new Set Features 0Dh could take it out) but the host never writes it
 * again, and the next HMB is built without a slice.
 */
static void nvme_hmb_trace_kill(struct nvme_hmb_trace *t, int ret)
{
	lockdep_assert_held(&t->lock);
	t->dead = true;
	t->slice.dead = true;
	t->refused = true;
	t->pending = 0;
	dev_warn(t->ctrl->device,
		 "trace slice dead (%d): not written again, no slice in the next HMB\n",
		 ret);
}

/*
 * Reserve the slice once the cache chunks are known: allocate its chunks
 * (4 MiB down to HMMINDS, as the cache does), build the descriptor list
 * and write the ring header, all before the HMB is handed to the
 * controller. Without a slice the controller gets the cache list alone.
 * Returns true when the descriptor list changed.
 */
bool nvme_hmb_trace_alloc(struct nvme_hmb_trace *t,
			  const struct nvme_host_mem_buf_desc *cache,
			  u32 nr_cache)
{
	u64 ring = t->want_ring;
	u64 lead, chunk;
	int ret = -ENOMEM;

	if (t->slice.hdr || !cache || !ring)
		return false;
	t->want_ring = 0;
	lead = nvme_hmb_trace_lead_size(t);
	for (chunk = min_t(u64, ring, PAGE_SIZE * MAX_ORDER_NR_PAGES);
	     chunk >= lead; chunk /= 2) {
		ret = nvme_hmb_trace_alloc_chunks(t, ring, chunk);
		if (!ret)
			break;
		nvme_hmb_trace_free_slice(t);
	}
	if (!ret)
		ret = nvme_hmb_trace_build_descs(t, cache, nr_cache);
	if (!ret) {
		t->advert = dma_alloc_coherent(t->dmadev, sizeof(*t->advert),
					       &t->advert_dma, GFP_KERNEL);
		if (!t->advert)
			ret = -ENOMEM;
	}
	if (ret) {
		dev_warn(t->ctrl->device, "no trace slice in the HMB (%d)\n",
			 ret);
		nvme_hmb_trace_free_slice(t);
		/* Not again at every reset: I/O is quiesced there. */
		t->refused = true;
		return false;
	}
	t->slice.ring_size = ring;
	t->slice.dev = t->dmadev;
	t->slice.instance = t->ctrl->instance;
	t->pending = 0;
	nvme_hmb_trace_init_ring(t, t->slice.generation + 1);
	t->fresh = true;
	dev_info(t->ctrl->device,
		 "HMB trace slice: %llu KiB ring at HMB offset %llu in %u chunks, FID %#x\n",
		 ring >> 10, t->slice.hmb_offset, t->slice.nr_chunks, t->fid);
	return true;
}

/*
 * Set Features 0Dh with @bits follows: the list is the combined one when
 * there is a slice. Before EHM=0 (sysfs hmb, suspend) no advert may be in
 * flight or follow: wait for one that is, and stop the next.
 */
void nvme_hmb_trace_host_mem(struct nvme_hmb_trace *t, u32 bits, u32 *size,
			     u64 *dma_addr, u32 *nr_descs)
{
	if (!t->descs)
		return;
	if (!(bits & NVME_HOST_MEM_ENABLE)) {
		mutex_lock(&t->advert_lock);
		WRITE_ONCE(t->enabled, false);
		mutex_unlock(&t->advert_lock);
	}
	*size = t->hsize >> NVME_CTRL_PAGE_SHIFT;
	*dma_addr = t->descs_dma;
	*nr_descs = t->nr_descs;
}

/*
 * Trace clients (one at a time, e.g. nvme-hmb-trace.ko) get every slice
 * that was advertised, the ones that existed before they registered too.
 *
 * nvme_hmb_trace_lock guards the list, the client pointer and the pins, and
 * is never held around a callback: a client's remove() may wait (it lets an
 * open reader drain), and a reset of one controller must not wait for that
 * on another. Each slice's client_lock is held around its callbacks and
 * guards t->client. register() and unregister() walk the list with the
 * slice pinned instead of the list locked; a slice leaving the list waits
 * until nobody pins it. Lock order: t->client_lock, then the list lock.
 */
static DEFINE_MUTEX(nvme_hmb_trace_lock);
static DECLARE_WAIT_QUEUE_HEAD(nvme_hmb_trace_unpinned);
static LIST_HEAD(nvme_hmb_trace_slices);
static struct nvme_hmb_trace_client *nvme_hmb_trace_client;

/* Give the slice to @client, if there is one and the slice has none. */
static void nvme_hmb_trace_add_to(struct nvme_hmb_trace *t,
				  struct nvme_hmb_trace_client *client)
{
	lockdep_assert_held(&t->client_lock);
	if (client && !t->client && !client->add(&t->slice))
		t->client = client;
}

static void nvme_hmb_trace_attach(struct nvme_hmb_trace *t)
{
	struct nvme_hmb_trace_client *client;

	mutex_lock(&t->client_lock);
	mutex_lock(&nvme_hmb_trace_lock);
	if (list_empty(&t->entry))
		list_add_tail(&t->entry, &nvme_hmb_trace_slices);
	t->listed = true;
	client = nvme_hmb_trace_client;
	mutex_unlock(&nvme_hmb_trace_lock);
	nvme_hmb_trace_add_to(t, client);
	mutex_unlock(&t->client_lock);
}

static void nvme_hmb_trace_notify_reset(struct nvme_hmb_trace *t)
{
	mutex_lock(&t->client_lock);
	if (t->client && t->client->reset)
		t->client->reset(&t->slice);
	mutex_unlock(&t->client_lock);
}

/* The client lets go of the slice before it may be freed. */
static void nvme_hmb_trace_detach(struct nvme_hmb_trace *t)
{
	mutex_lock(&t->client_lock);
	mutex_lock(&nvme_hmb_trace_lock);
	t->listed = false;	/* register() no longer offers it */
	mutex_unlock(&nvme_hmb_trace_lock);
	if (t->client)
		t->client->remove(&t->slice);
	t->client = NULL;
	mutex_unlock(&t->client_lock);

	mutex_lock(&nvme_hmb_trace_lock);
	while (t->pins) {
		mutex_unlock(&nvme_hmb_trace_lock);
		wait_event(nvme_hmb_trace_unpinned, !READ_ONCE(t->pins));
		mutex_lock(&nvme_hmb_trace_lock);
	}
	list_del_init(&t->entry);
	mutex_unlock(&nvme_hmb_trace_lock);
}

/*
 * Call @fn for each slice in the list, under the slice's client_lock and
 * not the list lock. The slice is pinned meanwhile, so it stays in the
 * list and the walk can go on from it.
 */
static void nvme_hmb_trace_walk(struct nvme_hmb_trace_client *client,
				void (*fn)(struct nvme_hmb_trace *t,
					   struct nvme_hmb_trace_client *client))
{
	struct nvme_hmb_trace *t, *next;

	mutex_lock(&nvme_hmb_trace_lock);
	t = list_first_entry_or_null(&nvme_hmb_trace_slices,
				     struct nvme_hmb_trace, entry);
	while (t) {
		t->pins++;
		mutex_unlock(&nvme_hmb_trace_lock);
		mutex_lock(&t->client_lock);
		fn(t, client);
		mutex_unlock(&t->client_lock);
		mutex_lock(&nvme_hmb_trace_lock);
		next = list_is_last(&t->entry, &nvme_hmb_trace_slices) ? NULL :
		       list_next_entry(t, entry);
		if (!--t->pins)
			wake_up_all(&nvme_hmb_trace_unpinned);
		t = next;
	}
	mutex_unlock(&nvme_hmb_trace_lock);
}

static void nvme_hmb_trace_replay(struct nvme_hmb_trace *t,
				  struct nvme_hmb_trace_client *client)
{
	bool listed;

	mutex_lock(&nvme_hmb_trace_lock);
	listed = t->listed;
	mutex_unlock(&nvme_hmb_trace_lock);
	if (listed)
		nvme_hmb_trace_add_to(t, client);
}

static void nvme_hmb_trace_unplug(struct nvme_hmb_trace *t,
				  struct nvme_hmb_trace_client *client)
{
	if (t->client != client)
		return;
	client->remove(&t->slice);
	t->client = NULL;
}

int nvme_hmb_trace_register(struct nvme_hmb_trace_client *client)
{
	if (!client->add || !client->remove)
		return -EINVAL;
	mutex_lock(&nvme_hmb_trace_lock);
	if (nvme_hmb_trace_client) {
		mutex_unlock(&nvme_hmb_trace_lock);
		return -EBUSY;
	}
	nvme_hmb_trace_client = client;
	mutex_unlock(&nvme_hmb_trace_lock);
	nvme_hmb_trace_walk(client, nvme_hmb_trace_replay);
	return 0;
}
EXPORT_SYMBOL_GPL(nvme_hmb_trace_register);

void nvme_hmb_trace_unregister(struct nvme_hmb_trace_client *client)
{
	mutex_lock(&nvme_hmb_trace_lock);
	if (nvme_hmb_trace_client != client) {
		mutex_unlock(&nvme_hmb_trace_lock);
		return;
	}
	nvme_hmb_trace_client = NULL;
	mutex_unlock(&nvme_hmb_trace_lock);
	nvme_hmb_trace_walk(client, nvme_hmb_trace_unplug);
}
EXPORT_SYMBOL_GPL(nvme_hmb_trace_unregister);

/*
 * The advert of a re-initialised ring. Sent from a work item, so that no
 * admin command waits under the caller's locks (the trace core holds its
 * device lock around REINIT), and gated (nvme_hmb_trace_submit()): it
 * reaches the controller only while it is LIVE with this HMB enabled. A
 * refusal kills the slice and tells the client (reset callback with
 * slice.dead set); an advert that did not reach the controller stays
 * pending, and the next enable of the HMB queues it again.
 */
static void nvme_hmb_trace_advert_work(struct work_struct *work)
{
	struct nvme_hmb_trace *t = container_of(work, struct nvme_hmb_trace,
						advert_work);
	bool killed = false;
	u64 generation;
	int ret;

	mutex_lock(&t->advert_lock);
	mutex_lock(&t->lock);
	generation = t->pending;
	if (!generation || t->dead || t->ctrl_dead || !t->slice.hdr ||
	    !READ_ONCE(t->enabled)) {
		mutex_unlock(&t->lock);
		mutex_unlock(&t->advert_lock);
		return;
	}
	nvme_hmb_trace_fill_advert(t, generation);
	mutex_unlock(&t->lock);

	ret = nvme_hmb_trace_submit(t, true);

	mutex_lock(&t->lock);
	if (!ret) {
		t->slice.generation = generation;
		if (t->pending == generation)
			t->pending = 0;
	} else if (nvme_hmb_trace_refused_by_ctrl(ret) && !t->dead) {
		nvme_hmb_trace_kill(t, ret);
		killed = true;
	}
	mutex_unlock(&t->lock);
	mutex_unlock(&t->advert_lock);
	if (killed)
		nvme_hmb_trace_notify_reset(t);
}

int nvme_hmb_trace_reinit(struct nvme_hmb_trace_slice *slice, u64 generation)
{
	struct nvme_hmb_trace *t = container_of(slice, struct nvme_hmb_trace,
						slice);
	int ret = 0;

	mutex_lock(&t->lock);
	if (t->dead || t->ctrl_dead) {
		ret = -ENODEV;
	} else if (generation <= max(slice->generation, t->pending)) {
		ret = -EINVAL;
	} else {
		/* The controller stopped with this epoch (FROZEN): the slice is ours. */
		nvme_hmb_trace_init_ring(t, generation);
		t->pending = generation;
		schedule_work(&t->advert_work);
	}
	mutex_unlock(&t->lock);
	return ret;
}
EXPORT_SYMBOL_GPL(nvme_hmb_trace_reinit);

/*
 * The reset is over and the controller live: a re-init that came during
 * the reset, or whose advert the reset cancelled, is advertised now.
 */
void nvme_hmb_trace_flush(struct nvme_hmb_trace *t)
{
	if (t->slice.hdr && READ_ONCE(t->pending))
		schedule_work(&t->advert_work);
}

/*
 * Set Features 0Dh enabled the HMB. A fresh slice is advertised now, in
 * the enable path (not gated: the controller may not be LIVE yet). One
 * given back after a reset (Memory Return) served an epoch that is over:
 * the controller forgot the advert with the reset, so until a re-init the
 * slice is the host's and the driver marks the ring FROZEN for a
 * controller that died before it could. A dead slice is left alone.
 */
void nvme_hmb_trace_start(struct nvme_hmb_trace *t)
{
	u64 generation;
	int ret;

	if (!t->slice.hdr || t->dead)
		return;
	mutex_lock(&t->advert_lock);
	mutex_lock(&t->lock);
	WRITE_ONCE(t->enabled, true);
	if (t->fresh) {
		t->fresh = false;
		generation = t->slice.generation + 1;
		nvme_hmb_trace_fill_advert(t, generation);
		mutex_unlock(&t->lock);
		ret = nvme_hmb_trace_submit(t, false);
		mutex_lock(&t->lock);
		if (ret)
			nvme_hmb_trace_kill(t, ret);
		else
			t->slice.generation = generation;
		mutex_unlock(&t->lock);
		mutex_unlock(&t->advert_lock);
		if (!ret)
			nvme_hmb_trace_attach(t);
		return;
	}
	mutex_unlock(&t->advert_lock);
	/* A re-init that came during the reset: advertised once LIVE. */
	if (t->pending) {
		mutex_unlock(&t->lock);
		if (nvme_ctrl_state(t->ctrl) == NVME_CTRL_LIVE)
			schedule_work(&t->advert_work);
		return;
	}
	nvme_hmb_trace_mark_frozen(t);
	mutex_unlock(&t->lock);
	nvme_hmb_trace_notify_reset(t);
}

/*
 * The controller is being disabled (reset, removal, shutdown, suspend,
 * timeout): it loses the HMB, and no advert may reach it until the HMB is
 * enabled again. No lock: this runs in the timeout handler too, which an
 * advert in flight may wait for; the gate of nvme_hmb_trace_submit() stops
 * an advert already past the check.
 */
void nvme_hmb_trace_disable(struct nvme_hmb_trace *t)
{
	WRITE_ONCE(t->enabled, false);
}

/*
 * A reset failed and the controller stays bound but dead (disabled, its
 * HMB back with the host). The epoch is over: mark an adopted ring FROZEN
 * (the controller may have died before it could) and tell the client, as
 * after a reset; a re-init fails with -ENODEV until the HMB is freed.
 */
void nvme_hmb_trace_ctrl_dead(struct nvme_hmb_trace *t)
{
	bool tell;

	if (!t->slice.hdr)
		return;
	mutex_lock(&t->lock);
	t->ctrl_dead = true;
	t->pending = 0;
	tell = !t->dead && !t->fresh;
	if (tell)
		nvme_hmb_trace_mark_frozen(t);
	mutex_unlock(&t->lock);
	if (tell)
		nvme_hmb_trace_notify_reset(t);
}

/*
 * Every path that frees the HMB comes here first (remove, probe failure,
 * a reset that reallocates, HMB disabled through sysfs): the slice is
 * freed only after the client let go of it.
 */
void nvme_hmb_trace_release(struct nvme_hmb_trace *t)
{
	if (!t->ctrl)
		return;
	WRITE_ONCE(t->enabled, false);
	nvme_hmb_trace_detach(t);
	/*
	 * After the client let go (a reader draining in its remove() may still
	 * REINIT and queue an advert): no advert for a slice about to be freed.
	 */
	cancel_work_sync(&t->advert_work);
	nvme_hmb_trace_free_slice(t);
}
