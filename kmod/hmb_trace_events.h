/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Tracepoints of nvme-hmb-trace (tracefs group
 * nvme_hmb_trace): the device interrupt, accepted tail publishes and ring
 * re-initialisations, so a slow consumer or a lost wake-up can be seen
 * without a debugger.
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM nvme_hmb_trace

#if !defined(_HMB_TRACE_EVENTS_H) || defined(TRACE_HEADER_MULTI_READ)
#define _HMB_TRACE_EVENTS_H

#include <linux/tracepoint.h>

TRACE_EVENT(hmb_trace_irq,
	TP_PROTO(int minor, u64 irq_count),
	TP_ARGS(minor, irq_count),
	TP_STRUCT__entry(
		__field(int, minor)
		__field(u64, irq_count)
	),
	TP_fast_assign(
		__entry->minor = minor;
		__entry->irq_count = irq_count;
	),
	TP_printk("dev=%d irq_count=%llu", __entry->minor, __entry->irq_count)
);

TRACE_EVENT(hmb_trace_publish_tail,
	TP_PROTO(int minor, u64 tail, u64 ring_head),
	TP_ARGS(minor, tail, ring_head),
	TP_STRUCT__entry(
		__field(int, minor)
		__field(u64, tail)
		__field(u64, head)
	),
	TP_fast_assign(
		__entry->minor = minor;
		__entry->tail = tail;
		__entry->head = ring_head;
	),
	TP_printk("dev=%d tail=%llu head=%llu", __entry->minor, __entry->tail,
		  __entry->head)
);

TRACE_EVENT(hmb_trace_reinit,
	TP_PROTO(int minor, u64 epoch),
	TP_ARGS(minor, epoch),
	TP_STRUCT__entry(
		__field(int, minor)
		__field(u64, epoch)
	),
	TP_fast_assign(
		__entry->minor = minor;
		__entry->epoch = epoch;
	),
	TP_printk("dev=%d epoch=%llu", __entry->minor, __entry->epoch)
);

#endif /* _HMB_TRACE_EVENTS_H */

/* Out-of-tree: define_trace.h finds this file through -I$(src) (Kbuild). */
#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE hmb_trace_events
#include <trace/define_trace.h>
