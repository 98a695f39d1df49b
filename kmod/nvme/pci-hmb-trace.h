/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Firmware trace slice of the NVMe PCI driver's Host Memory Buffer: the
 * hooks pci.c calls (pci-hmb-trace.c). Only a controller that declares the
 * trace contract in Identify Controller gets a slice; every other one keeps
 * the stock HMB and gets no vendor command.
 */
#ifndef _NVME_PCI_HMB_TRACE_H
#define _NVME_PCI_HMB_TRACE_H

#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/nvme.h>
#include <linux/nvme-hmb-trace.h>
#include <linux/types.h>
#include <linux/workqueue.h>

struct device;
struct nvme_ctrl;

struct nvme_hmb_trace_chunk {
	void *cpu;
	dma_addr_t dma;
	size_t size;
};

/*
 * Per controller, inside struct nvme_dev; all zero before the first HMB.
 * Locks, in this order: advert_lock (held across every advert command),
 * lock (the ring header, generation, pending; never held across an admin
 * command: a client's REINIT takes it), client_lock (around the client's
 * callbacks; pci-hmb-trace.c), the global client list lock.
 */
struct nvme_hmb_trace {
	struct nvme_hmb_trace_slice slice;
	struct nvme_ctrl *ctrl;
	struct device *dmadev;
	struct nvme_hmb_trace_mem *mem;	/* the slice's chunks (pci-hmb-trace.c) */
	u64 hsize_slice;	/* bytes of the slice chunks */
	struct nvme_host_mem_buf_desc *descs;	/* cache, then slice chunks */
	dma_addr_t descs_dma;
	u32 descs_size;
	u32 nr_descs;
	u64 hsize;		/* bytes described by descs */
	struct hmb_advert *advert;	/* the advert's data, read by the controller */
	dma_addr_t advert_dma;
	u64 want_ring;		/* ring the next HMB carves, 0: none */
	u8 fid;			/* the advert FID the controller declared */
	bool fresh;		/* ring header written, not advertised yet */
	bool dead;		/* advert refused: never written again */
	bool refused;		/* no slice again in this driver load */
	bool enabled;		/* the controller has this HMB enabled */
	bool ctrl_dead;		/* a reset failed: no more adverts */
	bool listed;		/* offered to trace clients */
	struct list_head entry;	/* in the client list while listed or pinned */
	unsigned int pins;	/* client (un)registrations walking past it */
	struct nvme_hmb_trace_client *client;	/* has the slice */
	struct mutex advert_lock;	/* across each advert command */
	struct mutex lock;	/* header, generation, pending */
	struct mutex client_lock;	/* around the client's callbacks */
	u64 pending;		/* re-initialised, not advertised yet */
	struct work_struct advert_work;	/* sends a re-init's advert */
};

u64 nvme_hmb_trace_cache_size(struct nvme_hmb_trace *t, struct nvme_ctrl *ctrl,
			      struct device *dmadev, u64 preferred, u64 min);
bool nvme_hmb_trace_alloc(struct nvme_hmb_trace *t,
			  const struct nvme_host_mem_buf_desc *cache,
			  u32 nr_cache);
void nvme_hmb_trace_host_mem(struct nvme_hmb_trace *t, u32 bits, u32 *size,
			     u64 *dma_addr, u32 *nr_descs);
void nvme_hmb_trace_start(struct nvme_hmb_trace *t);
void nvme_hmb_trace_flush(struct nvme_hmb_trace *t);
void nvme_hmb_trace_disable(struct nvme_hmb_trace *t);
void nvme_hmb_trace_ctrl_dead(struct nvme_hmb_trace *t);
void nvme_hmb_trace_release(struct nvme_hmb_trace *t);

#endif /* _NVME_PCI_HMB_TRACE_H */
