/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * hmb_trace_events.h - opcodes and payload layouts of the hmb-trace opcode
* catalog, for firmware that links the C producer (hmb_trace_fw.h).
 *
* GENERATED from the catalog the analyzer decodes (hmb_firmware_model::
* catalog_json) by `cargo xtask firmware-sdk --regen`; do not edit.
* firmware-sdk/tests/events.rs fails when this file and the catalog differ.
 *
* Payload fields are little-endian on the wire: the structs are exact on a
* little-endian core (every Cortex-R/M SSD controller); a big-endian core
* stores each field byte-swapped.
 */
#ifndef HMB_TRACE_EVENTS_H
#define HMB_TRACE_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "hmb_trace_fw.h"

/* an NVMe command fetched from a submission queue */
#define HMBT_OP_CMD_FETCH 0x0101u

/* a completion posted */
#define HMBT_OP_CMD_COMPLETE 0x0102u

/* logical-to-physical lookup hit the map cache */
#define HMBT_OP_FTL_MAP_HIT 0x0201u

/* map cache miss: the map page was fetched from NAND */
#define HMBT_OP_FTL_MAP_MISS 0x0202u

/* NAND page read on one die */
#define HMBT_OP_NAND_READ 0x0301u

/* NAND page program on one die */
#define HMBT_OP_NAND_PROGRAM 0x0302u

/* NAND block erase on one die */
#define HMBT_OP_NAND_ERASE 0x0303u

/* garbage collection of a victim block starts */
#define HMBT_OP_GC_START 0x0401u

/* garbage collection of a victim block ends */
#define HMBT_OP_GC_END 0x0402u

/* static wear levelling moved a cold block (in ssd:causal: the migration starts) */
#define HMBT_OP_WEAR_LEVEL 0x0501u

/* a wear-levelling migration finished (ssd:causal only) */
#define HMBT_OP_WEAR_LEVEL_END 0x0502u

/* MAC array computation (pccx event type 1) */
#define HMBT_OP_MAC_COMPUTE 0x0601u

/* AXI DMA read (pccx event type 2) */
#define HMBT_OP_DMA_READ 0x0602u

/* AXI DMA write (pccx event type 3) */
#define HMBT_OP_DMA_WRITE 0x0603u

/* systolic pipeline drain stall (pccx event type 4) */
#define HMBT_OP_SYSTOLIC_STALL 0x0604u

/* inter-core barrier (pccx event type 5) */
#define HMBT_OP_BARRIER_SYNC 0x0605u

/* NVMe controller: an L2P lookup or update found its map page in the cache */
#define HMBT_OP_L2P_HIT 0x0701u

/* NVMe controller: map page not cached; `slot` is the one it will take */
#define HMBT_OP_L2P_MISS 0x0702u

/* NVMe controller: a map page loaded into a cache slot */
#define HMBT_OP_L2P_FILL 0x0703u

/* NVMe controller: a dirty cached map page programmed to NAND */
#define HMBT_OP_L2P_WRITE_BACK 0x0704u

/* NVMe controller: a cached map page changed by the host, dropped and reloaded */
#define HMBT_OP_L2P_CORRUPT 0x0705u

/* NVMe controller: NAND page read */
#define HMBT_OP_FLASH_READ 0x0711u

/* NVMe controller: NAND page program */
#define HMBT_OP_FLASH_PROGRAM 0x0712u

/* NVMe controller: NAND block erase (page 0) */
#define HMBT_OP_FLASH_ERASE 0x0713u

/* NVMe controller: GC of a victim line starts; `pages` = its valid pages */
#define HMBT_OP_FTL_GC_START 0x0721u

/* NVMe controller: GC of a victim line ends; `pages` = pages moved */
#define HMBT_OP_FTL_GC_END 0x0722u

/* NVMe controller: static wear levelling moved a cold line */
#define HMBT_OP_FTL_WEAR_LEVEL 0x0723u

/* stress record: 0..=4064 pseudo-random bytes from (seed, seq) */
#define HMBT_OP_SIZES_FILL 0x0f01u

/* HMBT_OP_CMD_FETCH: an NVMe command fetched from a submission queue; source = submission queue id. */
struct __attribute__((packed)) hmbt_ev_cmd_fetch {
	uint16_t qid;
	uint16_t cid;
	uint8_t nvme_opcode;
	uint8_t _rsvd5[3];
	uint32_t nsid;
	uint32_t nlb;
	uint64_t slba;
};
_Static_assert(sizeof(struct hmbt_ev_cmd_fetch) == 24, "hmbt_ev_cmd_fetch: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_cmd_fetch, qid) == 0, "hmbt_ev_cmd_fetch.qid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_cmd_fetch, cid) == 2, "hmbt_ev_cmd_fetch.cid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_cmd_fetch, nvme_opcode) == 4, "hmbt_ev_cmd_fetch.nvme_opcode: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_cmd_fetch, nsid) == 8, "hmbt_ev_cmd_fetch.nsid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_cmd_fetch, nlb) == 12, "hmbt_ev_cmd_fetch.nlb: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_cmd_fetch, slba) == 16, "hmbt_ev_cmd_fetch.slba: catalog offset");
static inline hmbt_result hmbt_emit_cmd_fetch(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_cmd_fetch *ev)
{
	return hmbt_emit(p, HMBT_OP_CMD_FETCH, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_CMD_COMPLETE: a completion posted; source = completion queue id. */
struct __attribute__((packed)) hmbt_ev_cmd_complete {
	uint16_t qid;
	uint16_t cid;
	uint16_t status;
	uint8_t _rsvd6[2];
	uint32_t latency_ns;
	uint8_t _rsvd12[4];
};
_Static_assert(sizeof(struct hmbt_ev_cmd_complete) == 16, "hmbt_ev_cmd_complete: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_cmd_complete, qid) == 0, "hmbt_ev_cmd_complete.qid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_cmd_complete, cid) == 2, "hmbt_ev_cmd_complete.cid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_cmd_complete, status) == 4, "hmbt_ev_cmd_complete.status: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_cmd_complete, latency_ns) == 8, "hmbt_ev_cmd_complete.latency_ns: catalog offset");
static inline hmbt_result hmbt_emit_cmd_complete(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_cmd_complete *ev)
{
	return hmbt_emit(p, HMBT_OP_CMD_COMPLETE, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_FTL_MAP_HIT: logical-to-physical lookup hit the map cache; source = FTL core id. */
struct __attribute__((packed)) hmbt_ev_ftl_map_hit {
	uint64_t lba;
	uint64_t ppa;
};
_Static_assert(sizeof(struct hmbt_ev_ftl_map_hit) == 16, "hmbt_ev_ftl_map_hit: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_ftl_map_hit, lba) == 0, "hmbt_ev_ftl_map_hit.lba: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_ftl_map_hit, ppa) == 8, "hmbt_ev_ftl_map_hit.ppa: catalog offset");
static inline hmbt_result hmbt_emit_ftl_map_hit(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_ftl_map_hit *ev)
{
	return hmbt_emit(p, HMBT_OP_FTL_MAP_HIT, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_FTL_MAP_MISS: map cache miss: the map page was fetched from NAND; source = FTL core id. */
struct __attribute__((packed)) hmbt_ev_ftl_map_miss {
	uint64_t lba;
	uint64_t ppa;
	uint32_t fetch_ns;
	uint8_t _rsvd20[4];
};
_Static_assert(sizeof(struct hmbt_ev_ftl_map_miss) == 24, "hmbt_ev_ftl_map_miss: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_ftl_map_miss, lba) == 0, "hmbt_ev_ftl_map_miss.lba: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_ftl_map_miss, ppa) == 8, "hmbt_ev_ftl_map_miss.ppa: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_ftl_map_miss, fetch_ns) == 16, "hmbt_ev_ftl_map_miss.fetch_ns: catalog offset");
static inline hmbt_result hmbt_emit_ftl_map_miss(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_ftl_map_miss *ev)
{
	return hmbt_emit(p, HMBT_OP_FTL_MAP_MISS, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_NAND_READ: NAND page read on one die; source = channel << 8 | die. */
struct __attribute__((packed)) hmbt_ev_nand_read {
	uint8_t channel;
	uint8_t die;
	uint8_t plane;
	uint8_t _rsvd3[1];
	uint32_t block;
	uint32_t page;
	uint32_t latency_ns;
};
_Static_assert(sizeof(struct hmbt_ev_nand_read) == 16, "hmbt_ev_nand_read: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_nand_read, channel) == 0, "hmbt_ev_nand_read.channel: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_nand_read, die) == 1, "hmbt_ev_nand_read.die: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_nand_read, plane) == 2, "hmbt_ev_nand_read.plane: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_nand_read, block) == 4, "hmbt_ev_nand_read.block: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_nand_read, page) == 8, "hmbt_ev_nand_read.page: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_nand_read, latency_ns) == 12, "hmbt_ev_nand_read.latency_ns: catalog offset");
static inline hmbt_result hmbt_emit_nand_read(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_nand_read *ev)
{
	return hmbt_emit(p, HMBT_OP_NAND_READ, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_NAND_PROGRAM: NAND page program on one die; source = channel << 8 | die. */
struct __attribute__((packed)) hmbt_ev_nand_program {
	uint8_t channel;
	uint8_t die;
	uint8_t plane;
	uint8_t _rsvd3[1];
	uint32_t block;
	uint32_t page;
	uint32_t latency_ns;
};
_Static_assert(sizeof(struct hmbt_ev_nand_program) == 16, "hmbt_ev_nand_program: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_nand_program, channel) == 0, "hmbt_ev_nand_program.channel: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_nand_program, die) == 1, "hmbt_ev_nand_program.die: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_nand_program, plane) == 2, "hmbt_ev_nand_program.plane: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_nand_program, block) == 4, "hmbt_ev_nand_program.block: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_nand_program, page) == 8, "hmbt_ev_nand_program.page: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_nand_program, latency_ns) == 12, "hmbt_ev_nand_program.latency_ns: catalog offset");
static inline hmbt_result hmbt_emit_nand_program(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_nand_program *ev)
{
	return hmbt_emit(p, HMBT_OP_NAND_PROGRAM, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_NAND_ERASE: NAND block erase on one die; source = channel << 8 | die. */
struct __attribute__((packed)) hmbt_ev_nand_erase {
	uint8_t channel;
	uint8_t die;
	uint8_t plane;
	uint8_t _rsvd3[1];
	uint32_t block;
	uint32_t erase_count;
	uint32_t latency_ns;
};
_Static_assert(sizeof(struct hmbt_ev_nand_erase) == 16, "hmbt_ev_nand_erase: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_nand_erase, channel) == 0, "hmbt_ev_nand_erase.channel: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_nand_erase, die) == 1, "hmbt_ev_nand_erase.die: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_nand_erase, plane) == 2, "hmbt_ev_nand_erase.plane: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_nand_erase, block) == 4, "hmbt_ev_nand_erase.block: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_nand_erase, erase_count) == 8, "hmbt_ev_nand_erase.erase_count: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_nand_erase, latency_ns) == 12, "hmbt_ev_nand_erase.latency_ns: catalog offset");
static inline hmbt_result hmbt_emit_nand_erase(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_nand_erase *ev)
{
	return hmbt_emit(p, HMBT_OP_NAND_ERASE, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_GC_START: garbage collection of a victim block starts; source = FTL core id. */
struct __attribute__((packed)) hmbt_ev_gc_start {
	uint32_t victim_block;
	uint32_t valid_pages;
	uint32_t free_blocks;
	uint8_t _rsvd12[4];
};
_Static_assert(sizeof(struct hmbt_ev_gc_start) == 16, "hmbt_ev_gc_start: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_gc_start, victim_block) == 0, "hmbt_ev_gc_start.victim_block: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_gc_start, valid_pages) == 4, "hmbt_ev_gc_start.valid_pages: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_gc_start, free_blocks) == 8, "hmbt_ev_gc_start.free_blocks: catalog offset");
static inline hmbt_result hmbt_emit_gc_start(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_gc_start *ev)
{
	return hmbt_emit(p, HMBT_OP_GC_START, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_GC_END: garbage collection of a victim block ends; source = FTL core id. */
struct __attribute__((packed)) hmbt_ev_gc_end {
	uint32_t victim_block;
	uint32_t moved_pages;
	uint32_t duration_ns;
	uint32_t free_blocks;
};
_Static_assert(sizeof(struct hmbt_ev_gc_end) == 16, "hmbt_ev_gc_end: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_gc_end, victim_block) == 0, "hmbt_ev_gc_end.victim_block: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_gc_end, moved_pages) == 4, "hmbt_ev_gc_end.moved_pages: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_gc_end, duration_ns) == 8, "hmbt_ev_gc_end.duration_ns: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_gc_end, free_blocks) == 12, "hmbt_ev_gc_end.free_blocks: catalog offset");
static inline hmbt_result hmbt_emit_gc_end(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_gc_end *ev)
{
	return hmbt_emit(p, HMBT_OP_GC_END, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_WEAR_LEVEL: static wear levelling moved a cold block (in ssd:causal: the migration starts); source = FTL core id. */
struct __attribute__((packed)) hmbt_ev_wear_level {
	uint32_t src_block;
	uint32_t dst_block;
	uint32_t src_erase_count;
	uint32_t dst_erase_count;
};
_Static_assert(sizeof(struct hmbt_ev_wear_level) == 16, "hmbt_ev_wear_level: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_wear_level, src_block) == 0, "hmbt_ev_wear_level.src_block: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_wear_level, dst_block) == 4, "hmbt_ev_wear_level.dst_block: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_wear_level, src_erase_count) == 8, "hmbt_ev_wear_level.src_erase_count: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_wear_level, dst_erase_count) == 12, "hmbt_ev_wear_level.dst_erase_count: catalog offset");
static inline hmbt_result hmbt_emit_wear_level(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_wear_level *ev)
{
	return hmbt_emit(p, HMBT_OP_WEAR_LEVEL, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_WEAR_LEVEL_END: a wear-levelling migration finished (ssd:causal only); source = FTL core id. */
struct __attribute__((packed)) hmbt_ev_wear_level_end {
	uint32_t src_block;
	uint32_t dst_block;
	uint32_t moved_pages;
	uint32_t duration_ns;
};
_Static_assert(sizeof(struct hmbt_ev_wear_level_end) == 16, "hmbt_ev_wear_level_end: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_wear_level_end, src_block) == 0, "hmbt_ev_wear_level_end.src_block: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_wear_level_end, dst_block) == 4, "hmbt_ev_wear_level_end.dst_block: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_wear_level_end, moved_pages) == 8, "hmbt_ev_wear_level_end.moved_pages: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_wear_level_end, duration_ns) == 12, "hmbt_ev_wear_level_end.duration_ns: catalog offset");
static inline hmbt_result hmbt_emit_wear_level_end(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_wear_level_end *ev)
{
	return hmbt_emit(p, HMBT_OP_WEAR_LEVEL_END, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_MAC_COMPUTE: MAC array computation (pccx event type 1); source = core_id. */
struct __attribute__((packed)) hmbt_ev_mac_compute {
	uint32_t core_id;
	uint64_t start_cycle;
	uint64_t duration;
	uint32_t event_type_id;
};
_Static_assert(sizeof(struct hmbt_ev_mac_compute) == 24, "hmbt_ev_mac_compute: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_mac_compute, core_id) == 0, "hmbt_ev_mac_compute.core_id: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_mac_compute, start_cycle) == 4, "hmbt_ev_mac_compute.start_cycle: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_mac_compute, duration) == 12, "hmbt_ev_mac_compute.duration: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_mac_compute, event_type_id) == 20, "hmbt_ev_mac_compute.event_type_id: catalog offset");
static inline hmbt_result hmbt_emit_mac_compute(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_mac_compute *ev)
{
	return hmbt_emit(p, HMBT_OP_MAC_COMPUTE, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_DMA_READ: AXI DMA read (pccx event type 2); source = core_id. */
struct __attribute__((packed)) hmbt_ev_dma_read {
	uint32_t core_id;
	uint64_t start_cycle;
	uint64_t duration;
	uint32_t event_type_id;
};
_Static_assert(sizeof(struct hmbt_ev_dma_read) == 24, "hmbt_ev_dma_read: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_dma_read, core_id) == 0, "hmbt_ev_dma_read.core_id: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_dma_read, start_cycle) == 4, "hmbt_ev_dma_read.start_cycle: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_dma_read, duration) == 12, "hmbt_ev_dma_read.duration: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_dma_read, event_type_id) == 20, "hmbt_ev_dma_read.event_type_id: catalog offset");
static inline hmbt_result hmbt_emit_dma_read(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_dma_read *ev)
{
	return hmbt_emit(p, HMBT_OP_DMA_READ, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_DMA_WRITE: AXI DMA write (pccx event type 3); source = core_id. */
struct __attribute__((packed)) hmbt_ev_dma_write {
	uint32_t core_id;
	uint64_t start_cycle;
	uint64_t duration;
	uint32_t event_type_id;
};
_Static_assert(sizeof(struct hmbt_ev_dma_write) == 24, "hmbt_ev_dma_write: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_dma_write, core_id) == 0, "hmbt_ev_dma_write.core_id: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_dma_write, start_cycle) == 4, "hmbt_ev_dma_write.start_cycle: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_dma_write, duration) == 12, "hmbt_ev_dma_write.duration: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_dma_write, event_type_id) == 20, "hmbt_ev_dma_write.event_type_id: catalog offset");
static inline hmbt_result hmbt_emit_dma_write(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_dma_write *ev)
{
	return hmbt_emit(p, HMBT_OP_DMA_WRITE, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_SYSTOLIC_STALL: systolic pipeline drain stall (pccx event type 4); source = core_id. */
struct __attribute__((packed)) hmbt_ev_systolic_stall {
	uint32_t core_id;
	uint64_t start_cycle;
	uint64_t duration;
	uint32_t event_type_id;
};
_Static_assert(sizeof(struct hmbt_ev_systolic_stall) == 24, "hmbt_ev_systolic_stall: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_systolic_stall, core_id) == 0, "hmbt_ev_systolic_stall.core_id: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_systolic_stall, start_cycle) == 4, "hmbt_ev_systolic_stall.start_cycle: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_systolic_stall, duration) == 12, "hmbt_ev_systolic_stall.duration: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_systolic_stall, event_type_id) == 20, "hmbt_ev_systolic_stall.event_type_id: catalog offset");
static inline hmbt_result hmbt_emit_systolic_stall(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_systolic_stall *ev)
{
	return hmbt_emit(p, HMBT_OP_SYSTOLIC_STALL, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_BARRIER_SYNC: inter-core barrier (pccx event type 5); source = core_id. */
struct __attribute__((packed)) hmbt_ev_barrier_sync {
	uint32_t core_id;
	uint64_t start_cycle;
	uint64_t duration;
	uint32_t event_type_id;
};
_Static_assert(sizeof(struct hmbt_ev_barrier_sync) == 24, "hmbt_ev_barrier_sync: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_barrier_sync, core_id) == 0, "hmbt_ev_barrier_sync.core_id: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_barrier_sync, start_cycle) == 4, "hmbt_ev_barrier_sync.start_cycle: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_barrier_sync, duration) == 12, "hmbt_ev_barrier_sync.duration: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_barrier_sync, event_type_id) == 20, "hmbt_ev_barrier_sync.event_type_id: catalog offset");
static inline hmbt_result hmbt_emit_barrier_sync(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_barrier_sync *ev)
{
	return hmbt_emit(p, HMBT_OP_BARRIER_SYNC, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_L2P_HIT: NVMe controller: an L2P lookup or update found its map page in the cache; source = submission queue id of the command (0xFFFF: background). */
struct __attribute__((packed)) hmbt_ev_l2p_hit {
	uint16_t qid;
	uint16_t cid;
	uint8_t flags;
	uint8_t _rsvd5[3];
	uint32_t map_page;
	uint32_t slot;
	uint64_t hmb_offset;
};
_Static_assert(sizeof(struct hmbt_ev_l2p_hit) == 24, "hmbt_ev_l2p_hit: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_l2p_hit, qid) == 0, "hmbt_ev_l2p_hit.qid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_hit, cid) == 2, "hmbt_ev_l2p_hit.cid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_hit, flags) == 4, "hmbt_ev_l2p_hit.flags: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_hit, map_page) == 8, "hmbt_ev_l2p_hit.map_page: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_hit, slot) == 12, "hmbt_ev_l2p_hit.slot: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_hit, hmb_offset) == 16, "hmbt_ev_l2p_hit.hmb_offset: catalog offset");
static inline hmbt_result hmbt_emit_l2p_hit(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_l2p_hit *ev)
{
	return hmbt_emit(p, HMBT_OP_L2P_HIT, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_L2P_MISS: NVMe controller: map page not cached; `slot` is the one it will take; source = submission queue id of the command (0xFFFF: background). */
struct __attribute__((packed)) hmbt_ev_l2p_miss {
	uint16_t qid;
	uint16_t cid;
	uint8_t flags;
	uint8_t _rsvd5[3];
	uint32_t map_page;
	uint32_t slot;
	uint64_t hmb_offset;
};
_Static_assert(sizeof(struct hmbt_ev_l2p_miss) == 24, "hmbt_ev_l2p_miss: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_l2p_miss, qid) == 0, "hmbt_ev_l2p_miss.qid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_miss, cid) == 2, "hmbt_ev_l2p_miss.cid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_miss, flags) == 4, "hmbt_ev_l2p_miss.flags: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_miss, map_page) == 8, "hmbt_ev_l2p_miss.map_page: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_miss, slot) == 12, "hmbt_ev_l2p_miss.slot: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_miss, hmb_offset) == 16, "hmbt_ev_l2p_miss.hmb_offset: catalog offset");
static inline hmbt_result hmbt_emit_l2p_miss(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_l2p_miss *ev)
{
	return hmbt_emit(p, HMBT_OP_L2P_MISS, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_L2P_FILL: NVMe controller: a map page loaded into a cache slot; source = submission queue id of the command (0xFFFF: background). */
struct __attribute__((packed)) hmbt_ev_l2p_fill {
	uint16_t qid;
	uint16_t cid;
	uint8_t flags;
	uint8_t _rsvd5[3];
	uint32_t map_page;
	uint32_t slot;
	uint64_t hmb_offset;
};
_Static_assert(sizeof(struct hmbt_ev_l2p_fill) == 24, "hmbt_ev_l2p_fill: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_l2p_fill, qid) == 0, "hmbt_ev_l2p_fill.qid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_fill, cid) == 2, "hmbt_ev_l2p_fill.cid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_fill, flags) == 4, "hmbt_ev_l2p_fill.flags: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_fill, map_page) == 8, "hmbt_ev_l2p_fill.map_page: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_fill, slot) == 12, "hmbt_ev_l2p_fill.slot: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_fill, hmb_offset) == 16, "hmbt_ev_l2p_fill.hmb_offset: catalog offset");
static inline hmbt_result hmbt_emit_l2p_fill(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_l2p_fill *ev)
{
	return hmbt_emit(p, HMBT_OP_L2P_FILL, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_L2P_WRITE_BACK: NVMe controller: a dirty cached map page programmed to NAND; source = submission queue id of the command (0xFFFF: background). */
struct __attribute__((packed)) hmbt_ev_l2p_write_back {
	uint16_t qid;
	uint16_t cid;
	uint8_t flags;
	uint8_t _rsvd5[3];
	uint32_t map_page;
	uint32_t slot;
	uint64_t hmb_offset;
};
_Static_assert(sizeof(struct hmbt_ev_l2p_write_back) == 24, "hmbt_ev_l2p_write_back: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_l2p_write_back, qid) == 0, "hmbt_ev_l2p_write_back.qid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_write_back, cid) == 2, "hmbt_ev_l2p_write_back.cid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_write_back, flags) == 4, "hmbt_ev_l2p_write_back.flags: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_write_back, map_page) == 8, "hmbt_ev_l2p_write_back.map_page: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_write_back, slot) == 12, "hmbt_ev_l2p_write_back.slot: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_write_back, hmb_offset) == 16, "hmbt_ev_l2p_write_back.hmb_offset: catalog offset");
static inline hmbt_result hmbt_emit_l2p_write_back(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_l2p_write_back *ev)
{
	return hmbt_emit(p, HMBT_OP_L2P_WRITE_BACK, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_L2P_CORRUPT: NVMe controller: a cached map page changed by the host, dropped and reloaded; source = submission queue id of the command (0xFFFF: background). */
struct __attribute__((packed)) hmbt_ev_l2p_corrupt {
	uint16_t qid;
	uint16_t cid;
	uint8_t flags;
	uint8_t _rsvd5[3];
	uint32_t map_page;
	uint32_t slot;
	uint64_t hmb_offset;
};
_Static_assert(sizeof(struct hmbt_ev_l2p_corrupt) == 24, "hmbt_ev_l2p_corrupt: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_l2p_corrupt, qid) == 0, "hmbt_ev_l2p_corrupt.qid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_corrupt, cid) == 2, "hmbt_ev_l2p_corrupt.cid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_corrupt, flags) == 4, "hmbt_ev_l2p_corrupt.flags: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_corrupt, map_page) == 8, "hmbt_ev_l2p_corrupt.map_page: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_corrupt, slot) == 12, "hmbt_ev_l2p_corrupt.slot: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_l2p_corrupt, hmb_offset) == 16, "hmbt_ev_l2p_corrupt.hmb_offset: catalog offset");
static inline hmbt_result hmbt_emit_l2p_corrupt(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_l2p_corrupt *ev)
{
	return hmbt_emit(p, HMBT_OP_L2P_CORRUPT, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_FLASH_READ: NVMe controller: NAND page read; source = submission queue id of the command (0xFFFF: background). */
struct __attribute__((packed)) hmbt_ev_flash_read {
	uint16_t qid;
	uint16_t cid;
	uint8_t flags;
	uint8_t purpose;
	uint8_t channel;
	uint8_t die;
	uint32_t block;
	uint32_t page;
	uint32_t start_ns;
	uint32_t latency_ns;
	uint32_t wait_ns;
	uint32_t erase_count;
};
_Static_assert(sizeof(struct hmbt_ev_flash_read) == 32, "hmbt_ev_flash_read: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_flash_read, qid) == 0, "hmbt_ev_flash_read.qid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_read, cid) == 2, "hmbt_ev_flash_read.cid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_read, flags) == 4, "hmbt_ev_flash_read.flags: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_read, purpose) == 5, "hmbt_ev_flash_read.purpose: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_read, channel) == 6, "hmbt_ev_flash_read.channel: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_read, die) == 7, "hmbt_ev_flash_read.die: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_read, block) == 8, "hmbt_ev_flash_read.block: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_read, page) == 12, "hmbt_ev_flash_read.page: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_read, start_ns) == 16, "hmbt_ev_flash_read.start_ns: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_read, latency_ns) == 20, "hmbt_ev_flash_read.latency_ns: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_read, wait_ns) == 24, "hmbt_ev_flash_read.wait_ns: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_read, erase_count) == 28, "hmbt_ev_flash_read.erase_count: catalog offset");
static inline hmbt_result hmbt_emit_flash_read(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_flash_read *ev)
{
	return hmbt_emit(p, HMBT_OP_FLASH_READ, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_FLASH_PROGRAM: NVMe controller: NAND page program; source = submission queue id of the command (0xFFFF: background). */
struct __attribute__((packed)) hmbt_ev_flash_program {
	uint16_t qid;
	uint16_t cid;
	uint8_t flags;
	uint8_t purpose;
	uint8_t channel;
	uint8_t die;
	uint32_t block;
	uint32_t page;
	uint32_t start_ns;
	uint32_t latency_ns;
	uint32_t wait_ns;
	uint32_t erase_count;
};
_Static_assert(sizeof(struct hmbt_ev_flash_program) == 32, "hmbt_ev_flash_program: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_flash_program, qid) == 0, "hmbt_ev_flash_program.qid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_program, cid) == 2, "hmbt_ev_flash_program.cid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_program, flags) == 4, "hmbt_ev_flash_program.flags: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_program, purpose) == 5, "hmbt_ev_flash_program.purpose: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_program, channel) == 6, "hmbt_ev_flash_program.channel: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_program, die) == 7, "hmbt_ev_flash_program.die: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_program, block) == 8, "hmbt_ev_flash_program.block: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_program, page) == 12, "hmbt_ev_flash_program.page: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_program, start_ns) == 16, "hmbt_ev_flash_program.start_ns: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_program, latency_ns) == 20, "hmbt_ev_flash_program.latency_ns: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_program, wait_ns) == 24, "hmbt_ev_flash_program.wait_ns: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_program, erase_count) == 28, "hmbt_ev_flash_program.erase_count: catalog offset");
static inline hmbt_result hmbt_emit_flash_program(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_flash_program *ev)
{
	return hmbt_emit(p, HMBT_OP_FLASH_PROGRAM, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_FLASH_ERASE: NVMe controller: NAND block erase (page 0); source = submission queue id of the command (0xFFFF: background). */
struct __attribute__((packed)) hmbt_ev_flash_erase {
	uint16_t qid;
	uint16_t cid;
	uint8_t flags;
	uint8_t purpose;
	uint8_t channel;
	uint8_t die;
	uint32_t block;
	uint32_t page;
	uint32_t start_ns;
	uint32_t latency_ns;
	uint32_t wait_ns;
	uint32_t erase_count;
};
_Static_assert(sizeof(struct hmbt_ev_flash_erase) == 32, "hmbt_ev_flash_erase: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_flash_erase, qid) == 0, "hmbt_ev_flash_erase.qid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_erase, cid) == 2, "hmbt_ev_flash_erase.cid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_erase, flags) == 4, "hmbt_ev_flash_erase.flags: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_erase, purpose) == 5, "hmbt_ev_flash_erase.purpose: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_erase, channel) == 6, "hmbt_ev_flash_erase.channel: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_erase, die) == 7, "hmbt_ev_flash_erase.die: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_erase, block) == 8, "hmbt_ev_flash_erase.block: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_erase, page) == 12, "hmbt_ev_flash_erase.page: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_erase, start_ns) == 16, "hmbt_ev_flash_erase.start_ns: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_erase, latency_ns) == 20, "hmbt_ev_flash_erase.latency_ns: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_erase, wait_ns) == 24, "hmbt_ev_flash_erase.wait_ns: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_flash_erase, erase_count) == 28, "hmbt_ev_flash_erase.erase_count: catalog offset");
static inline hmbt_result hmbt_emit_flash_erase(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_flash_erase *ev)
{
	return hmbt_emit(p, HMBT_OP_FLASH_ERASE, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_FTL_GC_START: NVMe controller: GC of a victim line starts; `pages` = its valid pages; source = submission queue id of the command (0xFFFF: background). */
struct __attribute__((packed)) hmbt_ev_ftl_gc_start {
	uint16_t qid;
	uint16_t cid;
	uint8_t flags;
	uint8_t _rsvd5[3];
	uint32_t victim_line;
	uint32_t pages;
};
_Static_assert(sizeof(struct hmbt_ev_ftl_gc_start) == 16, "hmbt_ev_ftl_gc_start: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_ftl_gc_start, qid) == 0, "hmbt_ev_ftl_gc_start.qid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_ftl_gc_start, cid) == 2, "hmbt_ev_ftl_gc_start.cid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_ftl_gc_start, flags) == 4, "hmbt_ev_ftl_gc_start.flags: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_ftl_gc_start, victim_line) == 8, "hmbt_ev_ftl_gc_start.victim_line: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_ftl_gc_start, pages) == 12, "hmbt_ev_ftl_gc_start.pages: catalog offset");
static inline hmbt_result hmbt_emit_ftl_gc_start(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_ftl_gc_start *ev)
{
	return hmbt_emit(p, HMBT_OP_FTL_GC_START, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_FTL_GC_END: NVMe controller: GC of a victim line ends; `pages` = pages moved; source = submission queue id of the command (0xFFFF: background). */
struct __attribute__((packed)) hmbt_ev_ftl_gc_end {
	uint16_t qid;
	uint16_t cid;
	uint8_t flags;
	uint8_t _rsvd5[3];
	uint32_t victim_line;
	uint32_t pages;
};
_Static_assert(sizeof(struct hmbt_ev_ftl_gc_end) == 16, "hmbt_ev_ftl_gc_end: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_ftl_gc_end, qid) == 0, "hmbt_ev_ftl_gc_end.qid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_ftl_gc_end, cid) == 2, "hmbt_ev_ftl_gc_end.cid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_ftl_gc_end, flags) == 4, "hmbt_ev_ftl_gc_end.flags: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_ftl_gc_end, victim_line) == 8, "hmbt_ev_ftl_gc_end.victim_line: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_ftl_gc_end, pages) == 12, "hmbt_ev_ftl_gc_end.pages: catalog offset");
static inline hmbt_result hmbt_emit_ftl_gc_end(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_ftl_gc_end *ev)
{
	return hmbt_emit(p, HMBT_OP_FTL_GC_END, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_FTL_WEAR_LEVEL: NVMe controller: static wear levelling moved a cold line; source = submission queue id of the command (0xFFFF: background). */
struct __attribute__((packed)) hmbt_ev_ftl_wear_level {
	uint16_t qid;
	uint16_t cid;
	uint8_t flags;
	uint8_t _rsvd5[3];
	uint32_t line;
	uint32_t moved_pages;
	uint32_t erase_count;
	uint8_t _rsvd20[4];
};
_Static_assert(sizeof(struct hmbt_ev_ftl_wear_level) == 24, "hmbt_ev_ftl_wear_level: catalog payload_len");
_Static_assert(offsetof(struct hmbt_ev_ftl_wear_level, qid) == 0, "hmbt_ev_ftl_wear_level.qid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_ftl_wear_level, cid) == 2, "hmbt_ev_ftl_wear_level.cid: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_ftl_wear_level, flags) == 4, "hmbt_ev_ftl_wear_level.flags: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_ftl_wear_level, line) == 8, "hmbt_ev_ftl_wear_level.line: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_ftl_wear_level, moved_pages) == 12, "hmbt_ev_ftl_wear_level.moved_pages: catalog offset");
_Static_assert(offsetof(struct hmbt_ev_ftl_wear_level, erase_count) == 16, "hmbt_ev_ftl_wear_level.erase_count: catalog offset");
static inline hmbt_result hmbt_emit_ftl_wear_level(hmbt_producer *p, uint32_t source,
						const struct hmbt_ev_ftl_wear_level *ev)
{
	return hmbt_emit(p, HMBT_OP_FTL_WEAR_LEVEL, source, ev, (uint32_t)sizeof(*ev));
}

/* HMBT_OP_SIZES_FILL: variable-length payload, no struct: use hmbt_emit(). */

#endif /* HMB_TRACE_EVENTS_H */
