/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR MIT) */
/*
 * nvme_hmb_trace.h - ring ABI v1 shared by SSD firmware (producer), the
 * nvme-hmb-trace module and hmb-trace-daemon (consumer), and the module's
 * character device interface v2.
 *
 * docs/abi.md is the specification; this header and the Rust crate
 * hmb-trace-abi mirror it, and abi/tests/layout.rs checks all three agree.
 * All multi-byte fields are little-endian.
 */
#ifndef _UAPI_LINUX_NVME_HMB_TRACE_H
#define _UAPI_LINUX_NVME_HMB_TRACE_H

#include <linux/types.h>
#include <linux/ioctl.h>

/* ---- ring header: first HMB_RING_HDR_SIZE bytes of the trace slice ---- */

#define HMB_RING_MAGIC		0x54424d48u	/* "HMBT" in memory order */
#define HMB_RING_VERSION_MAJOR	1
#define HMB_RING_VERSION_MINOR	0

#define HMB_RING_HDR_SIZE	4096u	/* data area starts one page in */
#define HMB_RING_MIN_SIZE	8192u	/* smallest data area (power of two) */
#define HMB_RING_MAX_SIZE	(1ull << 30)
#define HMB_RING_ALIGN		8u	/* records start on 8-byte boundaries */

#define HMB_RING_FLAG_OVERFLOWED	(1u << 0)
#define HMB_RING_FLAG_FROZEN		(1u << 1)
#define HMB_RING_FLAGS_KNOWN		(HMB_RING_FLAG_OVERFLOWED | HMB_RING_FLAG_FROZEN)

/*
 * Three cache lines with one writer each, so producer and consumer never
 * share a line they both write:
 *   line 0 (bytes   0..63): identity, written by the module at (re)init only
 *   line 1 (bytes  64..127): written by the producer only
 *   line 2 (bytes 128..191): written by the module only (consumer tail)
 * Bytes 192..4095 are reserved and zero.
 */
struct hmb_ring_hdr {
	/* line 0: module, at init */
	__u32 magic;
	__u16 version_major;
	__u16 version_minor;
	__u32 hdr_size;		/* == HMB_RING_HDR_SIZE */
	__u32 max_record;	/* == HMB_RECORD_MAX_SIZE */
	__u64 ring_size;	/* data area bytes, power of two */
	__u64 epoch;		/* bumped by every re-initialisation */
	__u8  reserved0[32];

	/* line 1: producer */
	__u64 head;		/* bytes ever produced (release store) */
	__u32 flags;		/* HMB_RING_FLAG_* (release store) */
	__u32 reserved1;
	__u64 next_seq;		/* seq the next record will carry */
	__u64 dropped_records;	/* records dropped this epoch */
	__u64 overflow_events;	/* times OVERFLOWED went 0 -> 1 this epoch */
	__u8  reserved2[24];

	/* line 2: module on behalf of the consumer */
	__u64 tail;		/* bytes ever consumed (release store) */
	__u8  reserved3[56];
};

/* ---- records: 32-byte header, payload, zero padding to 8 bytes ---- */

#define HMB_RECORD_HDR_SIZE	32u
#define HMB_RECORD_MAX_SIZE	4096u
#define HMB_RECORD_MAX_PAYLOAD	(HMB_RECORD_MAX_SIZE - HMB_RECORD_HDR_SIZE)

#define HMB_RECORD_FLAG_PAD	(1u << 0)	/* filler up to the ring end */
#define HMB_RECORD_FLAG_MARKER	(1u << 1)	/* daemon marker, trace.bin only */

struct hmb_record_hdr {
	__u32 length;		/* payload bytes, 0..HMB_RECORD_MAX_PAYLOAD */
	__u16 opcode;		/* firmware event type (catalog) */
	__u16 flags;		/* HMB_RECORD_FLAG_* */
	__u64 seq;		/* per-epoch sequence number */
	__u64 timestamp_ns;	/* device clock */
	__u32 source;		/* queue, die or core id */
	__u32 reserved;		/* zero */
};

/* ---- emulated HMB: advertisement block at offset 0 of the HMB ---- */

#define HMB_ADVERT_MAGIC	0x41424d48u	/* "HMBA" */
#define HMB_ADVERT_OFFSET	0u
#define HMB_TRACE_SLICE_ALIGN	4096u
#define HMB_ADVERT_STATE_NONE	0u
#define HMB_ADVERT_STATE_READY	1u

struct hmb_advert {
	__u32 magic;
	__u32 state;		/* HMB_ADVERT_STATE_* (release store, last) */
	__u64 generation;	/* == ring epoch it advertises */
	__u64 slice_offset;	/* trace slice offset within the HMB */
	__u64 slice_len;	/* HMB_RING_HDR_SIZE + ring_size */
	__u8  reserved[32];
};

/*
 * NVMe controllers: no advert block in the HMB. The advert above is the data
 * of a vendor-specific Set Features command with this feature identifier;
 * slice_offset is the ring header's offset in the HMB as the controller sees
 * it (the chunks of the descriptor list laid end to end, in list order). Get
 * Features returns the advert the controller adopted (state NONE if none)
 * and the low 32 bits of its generation in completion dword 0.
 */
#define HMB_NVME_FID_TRACE	0xc0u

/*
 * The controller's declaration of the trace contract (docs/abi.md decision
 * 9): the first 32 bytes of the vendor-specific area of Identify Controller
 * (CNS 01h, bytes 3072..3103). The host carves a trace slice out of the HMB,
 * and sends the advert, only to a controller whose Identify data carries
 * this magic and the ring ABI major it speaks; every other controller gets
 * the stock driver's HMB and no vendor command. fid names the vendor
 * Set/Get Features identifier (C0h..FFh) the controller takes the advert
 * with, so the host never assumes a vendor's FID.
 */
#define HMB_NVME_ID_VS_OFFSET	3072u
#define HMB_NVME_ID_MAGIC	0x4543415254424d48ull	/* "HMBTRACE" in memory order */

struct hmb_nvme_trace_id {
	__u64 magic;		/* HMB_NVME_ID_MAGIC */
	__u16 abi_major;	/* ring ABI major the producer writes */
	__u16 abi_minor;	/* ring ABI minor the producer writes */
	__u8  fid;		/* Set/Get Features FID of the advert, C0h..FFh */
	__u8  reserved0[3];
	__u64 max_ring_size;	/* largest data area it can produce into; 0: HMB_RING_MAX_SIZE */
	__u8  reserved1[8];
};

/*
 * The device's block, right after the advert (own cache line, written by
 * the device only). Its magic is the device's opt-in: the module binds to
 * an emulated HMB only when it finds it, and writes nothing before that.
 * ack_generation is the generation of the last advert whose withdrawal the
 * device has acknowledged: it stores it (release) once it has stopped
 * writing the slice that advert described.
 */
#define HMB_DEVICE_MAGIC	0x44424d48u	/* "HMBD" */
#define HMB_DEVICE_OFFSET	64u

struct hmb_device_block {
	__u32 magic;		/* HMB_DEVICE_MAGIC, written by the device at power-on */
	__u32 reserved0;
	__u64 ack_generation;	/* last withdrawn generation it stopped for (release) */
	__u8  reserved[48];
};

/* ---- character device ioctls ---- */

/*
 * Type byte 0xBC: unassigned in Documentation/userspace-api/ioctl/
 * ioctl-number.rst (0xB7, used before, belongs to remoteproc and nsfs;
 * 0xB8 was taken by newer kernels).
 */
#define HMB_TRACE_IOC_MAGIC	0xBC

/*
 * Version of the character device interface (GET_INFO's abi_major and
 * abi_minor), apart from the ring's own HMB_RING_VERSION_*. 2.0: the ring
 * view is mapped one chunk at a time (struct hmb_trace_chunk); 1.x had one
 * mapping of mmap_len bytes at offset 0, which a slice made of several
 * DMA allocations cannot give through the DMA API.
 */
#define HMB_TRACE_DEV_ABI_MAJOR	2
#define HMB_TRACE_DEV_ABI_MINOR	0

struct hmb_trace_info {
	__u16 abi_major;	/* HMB_TRACE_DEV_ABI_MAJOR the module speaks */
	__u16 abi_minor;	/* HMB_TRACE_DEV_ABI_MINOR */
	__u32 hdr_size;
	__u64 ring_size;
	__u64 mmap_len;		/* hdr_size + ring_size: the ring view the chunks tile */
	__u64 epoch;
	__u32 flags;
	__u32 nr_chunks;	/* chunks of the ring view, at least 1 */
};

/*
 * One chunk of the ring view (header page at offset 0, data area at
 * hdr_size): GET_CHUNK fills offset and len for index. The chunks tile
 * [0, mmap_len) in index order, header first; each is mapped on its own,
 * mmap offset == offset and length == len exactly (anything else is
 * EINVAL), at base + offset of one reserved region of mmap_len bytes.
 */
struct hmb_trace_chunk {
	__u32 index;		/* in: 0 .. nr_chunks - 1 */
	__u32 reserved;		/* in: zero */
	__u64 offset;		/* out: offset in the ring view and mmap offset, page aligned */
	__u64 len;		/* out: bytes, a multiple of the page size */
};

struct hmb_trace_stats {
	__u64 head;
	__u64 tail;
	__u64 dropped_records;
	__u64 overflow_events;
	__u64 freeze_count;	/* FROZEN observed by the module, ever */
	__u64 irq_count;
	__u64 tail_publishes;
	__u64 epoch;
};

#define HMB_TRACE_IOC_GET_INFO	_IOR(HMB_TRACE_IOC_MAGIC, 0x01, struct hmb_trace_info)
#define HMB_TRACE_IOC_PUBLISH_TAIL _IOW(HMB_TRACE_IOC_MAGIC, 0x02, __u64)
/* REINIT reads its argument (checked before anything changes) and writes the new epoch. */
#define HMB_TRACE_IOC_REINIT	_IOWR(HMB_TRACE_IOC_MAGIC, 0x03, __u64)
#define HMB_TRACE_IOC_GET_STATS	_IOR(HMB_TRACE_IOC_MAGIC, 0x04, struct hmb_trace_stats)
#define HMB_TRACE_IOC_GET_CHUNK	_IOWR(HMB_TRACE_IOC_MAGIC, 0x05, struct hmb_trace_chunk)

#endif /* _UAPI_LINUX_NVME_HMB_TRACE_H */
