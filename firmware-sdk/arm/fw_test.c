/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Test firmware for an emulated Cortex-M3 (QEMU mps2-an385): the C producer
 * writes a known workload into a ring in the machine's RAM, then the ring
 * image goes to the host by semihosting (a file), where
 * firmware-sdk/tests/arm_qemu.rs checks it record by record against the
 * Rust reference producer running the same workload (workload.rs there).
 *
 * Also measures the producer: SysTick ticks for BENCH_EVENTS 64-byte events
 * (32-byte payload) into a ring whose consumer always keeps up. Under
 * `-icount shift=0` one instruction is 1 ns of virtual time and SysTick
 * counts the 25 MHz CPU clock, so instructions = ticks * 40.
 */
#include <stdint.h>
#include "hmb_trace_fw.h"

#define RING_SIZE 8192u
#define EVENTS 600u
#define CATCH_UP_EVERY 16u
#define LAST_UNREAD 48u
#define BENCH_EVENTS 2000u

static uint64_t slice_words[(HMB_RING_HDR_SIZE + RING_SIZE) / 8];
#define SLICE ((uint8_t *)slice_words)

/* ---- libc the library needs ---- */
/* Word copies when both sides are 4-aligned, as a firmware's memcpy does:
 * the library's stage buffer and the ring are. */
void *memcpy(void *restrict d, const void *restrict s, size_t n)
{
	uint8_t *dd = d;
	const uint8_t *ss = s;
	if ((((uintptr_t)dd | (uintptr_t)ss) & 3) == 0) {
		for (; n >= 4; n -= 4, dd += 4, ss += 4)
			*(uint32_t *)(void *)dd = *(const uint32_t *)(const void *)ss;
	}
	while (n--)
		*dd++ = *ss++;
	return d;
}

void *memset(void *d, int c, size_t n)
{
	uint8_t *dd = d;
	if (((uintptr_t)dd & 3) == 0) {
		uint32_t w = (uint8_t)c * 0x01010101u;
		for (; n >= 4; n -= 4, dd += 4)
			*(uint32_t *)(void *)dd = w;
	}
	while (n--)
		*dd++ = (uint8_t)c;
	return d;
}

#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M'
#define PROFILE_M 1
#else
#define PROFILE_M 0
#endif

/* ---- semihosting: BKPT 0xAB on M-profile, SVC 0x123456 in A32 state ---- */
static int semihost(int op, void *arg)
{
	register int r0 __asm__("r0") = op;
	register void *r1 __asm__("r1") = arg;
#if PROFILE_M
	__asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
#else
	__asm__ volatile("svc 0x123456" : "+r"(r0) : "r"(r1) : "memory");
#endif
	return r0;
}

static void put_str(const char *s)
{
	semihost(0x04, (void *)s); /* SYS_WRITE0 */
}

static void put_u32(uint32_t v)
{
	char buf[12];
	int i = 11;
	buf[i] = 0;
	do {
		buf[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	put_str(&buf[i]);
}

static int write_file(const char *name, const void *data, uint32_t len)
{
	uint32_t open_args[3] = { (uint32_t)name, 5 /* "wb" */, 0 };
	uint32_t n = 0;
	while (name[n])
		n++;
	open_args[2] = n;
	int fd = semihost(0x01, open_args); /* SYS_OPEN */
	if (fd < 0)
		return -1;
	uint32_t write_args[3] = { (uint32_t)fd, (uint32_t)data, len };
	int left = semihost(0x05, write_args); /* SYS_WRITE: bytes not written */
	semihost(0x02, &fd);		      /* SYS_CLOSE */
	return left == 0 ? 0 : -1;
}

static void exit_qemu(int ok)
{
	/* SYS_EXIT, ADP_Stopped_ApplicationExit (0x20026) or RunTimeErrorUnknown */
	semihost(0x18, (void *)(ok ? 0x20026 : 0x20023));
	for (;;)
		;
}

/* ---- platform hooks: the ring is in this core's own RAM ---- */
static void hook_write(void *ctx, uint64_t addr, const void *src, uint32_t len)
{
	(void)ctx;
	memcpy((void *)(uintptr_t)addr, src, len);
}

static void hook_read(void *ctx, uint64_t addr, void *dst, uint32_t len)
{
	(void)ctx;
	memcpy(dst, (const void *)(uintptr_t)addr, len);
}

static void hook_fence(void *ctx)
{
	(void)ctx;
	__asm__ volatile("dmb" ::: "memory");
}

/* ---- the module's part, done locally: header init and tail ---- */
static void put_le(uint8_t *p, uint64_t v, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static void module_init(uint64_t epoch)
{
	memset(SLICE, 0, sizeof(slice_words));
	put_le(SLICE + offsetof(struct hmb_ring_hdr, magic), HMB_RING_MAGIC, 4);
	put_le(SLICE + offsetof(struct hmb_ring_hdr, version_major), HMB_RING_VERSION_MAJOR, 2);
	put_le(SLICE + offsetof(struct hmb_ring_hdr, version_minor), HMB_RING_VERSION_MINOR, 2);
	put_le(SLICE + offsetof(struct hmb_ring_hdr, hdr_size), HMB_RING_HDR_SIZE, 4);
	put_le(SLICE + offsetof(struct hmb_ring_hdr, max_record), HMB_RECORD_MAX_SIZE, 4);
	put_le(SLICE + offsetof(struct hmb_ring_hdr, ring_size), RING_SIZE, 8);
	put_le(SLICE + offsetof(struct hmb_ring_hdr, epoch), epoch, 8);
}

static void module_catch_up(void)
{
	uint64_t head = get_le64(SLICE + offsetof(struct hmb_ring_hdr, head));
	put_le(SLICE + offsetof(struct hmb_ring_hdr, tail), head, 8);
}

static const hmbt_hooks hooks = {
	.write = hook_write,
	.read = hook_read,
	.fence = hook_fence,
	.timestamp_ns = 0,
	.ctx = 0,
};

static hmbt_producer producer;
static uint8_t payload[HMB_RECORD_MAX_PAYLOAD];

/* The workload; tests/arm_qemu.rs runs the same one on the Rust reference. */
static uint32_t workload_len(uint32_t i)
{
	if (i % 50 == 49)
		return HMB_RECORD_MAX_PAYLOAD;
	return (i * 37u) % 300u;
}

#if PROFILE_M
/* SysTick on the 25 MHz CPU clock: one tick is 40 instructions under -icount shift=0. */
#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
#define COUNTER_NAME " systick="
static void counter_start(void)
{
	SYST_RVR = 0x00ffffffu;
	SYST_CVR = 0;
	SYST_CSR = 5; /* enable, CPU clock */
}
static uint32_t counter_read(void)
{
	return (0x00ffffffu - SYST_CVR) & 0x00ffffffu;
}
#else
/* Generic timer (CNTPCT at CNTFRQ): under -icount shift=0 one instruction
 * is 1 ns of virtual time, so instructions = ticks * 1e9 / CNTFRQ (QEMU
 * models no PMU cycle counter for the R52). */
#define COUNTER_NAME " cntpct="
static void counter_start(void)
{
}
static uint32_t counter_read(void)
{
	uint32_t lo, hi;
	__asm__ volatile("isb\n\tmrrc p15, 0, %0, %1, c14" : "=r"(lo), "=r"(hi));
	return lo;
}
static uint32_t counter_freq(void)
{
	uint32_t f;
	__asm__ volatile("mrc p15, 0, %0, c14, c0, 0" : "=r"(f));
	return f;
}
#endif

int main(void)
{
	int ok = 1;

	/* 1. The known workload: wraps, PADs, skips, drops, a freeze. */
	module_init(1);
	if (hmbt_attach(&producer, &hooks, (uintptr_t)SLICE, sizeof(slice_words), 1) != HMBT_OK)
		ok = 0;
	for (uint32_t i = 0; ok && i < EVENTS; i++) {
		uint32_t len = workload_len(i);
		for (uint32_t j = 0; j < len; j++)
			payload[j] = (uint8_t)(i * 31u + j);
		hmbt_emit_ts(&producer, (uint16_t)(0x0200 + i % 5), i % 4, 1000u + (uint64_t)i * 10u, payload, len);
		/* The host stops reading for the last LAST_UNREAD events: the
		 * ring fills, the final window holds drops before the freeze. */
		if (i % CATCH_UP_EVERY == CATCH_UP_EVERY - 1 && i < EVENTS - LAST_UNREAD)
			module_catch_up();
	}
	hmbt_freeze(&producer);
	if (ok && write_file("fw-ring.bin", SLICE, sizeof(slice_words)) != 0)
		ok = 0;

	/* 2. Cost of one 64-byte event (32-byte payload), consumer keeping up. */
	module_init(2);
	if (hmbt_attach(&producer, &hooks, (uintptr_t)SLICE, sizeof(slice_words), 2) != HMBT_OK)
		ok = 0;
	counter_start();
	uint32_t start = counter_read(), dropped_before = (uint32_t)hmbt_dropped(&producer);
	for (uint32_t i = 0; i < BENCH_EVENTS; i++) {
		hmbt_emit_ts(&producer, 0x0300, 0, i, payload, 32);
		if ((i & 63) == 63)
			module_catch_up();
	}
	uint32_t ticks = counter_read() - start;
#if PROFILE_M
	ticks &= 0x00ffffffu;
#endif
	put_str("hmbt-bench events=");
	put_u32(BENCH_EVENTS);
	put_str(COUNTER_NAME);
	put_u32(ticks);
#if !PROFILE_M
	put_str(" cntfrq=");
	put_u32(counter_freq());
#endif
	put_str(" dropped=");
	put_u32((uint32_t)hmbt_dropped(&producer) - dropped_before);
	put_str("\n");
	exit_qemu(ok);
	return 0;
}

/* ---- startup ---- */
extern uint32_t __bss_start, __bss_end, __stack_top;

#if PROFILE_M
void reset_handler(void)
#else
/* A/R-profile: QEMU enters the ELF entry with no stack. */
__attribute__((naked)) void reset_handler(void)
{
	__asm__ volatile("ldr sp, =__stack_top\n\tb c_start");
}

void c_start(void)
#endif
{
	for (uint32_t *p = &__bss_start; p < &__bss_end; p++)
		*p = 0;
	main();
	exit_qemu(0);
}

#if PROFILE_M
static void fault_handler(void)
{
	put_str("hmbt-fw: fault\n");
	exit_qemu(0);
}

__attribute__((section(".vectors"), used)) static void (*const vectors[16])(void) = {
	(void (*)(void))&__stack_top, reset_handler, fault_handler, fault_handler, fault_handler,
	fault_handler, fault_handler, 0, 0, 0, 0, fault_handler, fault_handler, 0, fault_handler,
	fault_handler,
};
#endif
