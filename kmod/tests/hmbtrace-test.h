/* SPDX-License-Identifier: GPL-2.0 */
/*
 * hmbtrace-test.h - what the parts of the guest test program share: the
 * check reporting (ok/FAIL/skip lines) and the fuzzer's entry point.
 */
#ifndef HMBTRACE_TEST_H
#define HMBTRACE_TEST_H

#include <stdint.h>

struct hmb_trace_info;

void ok(const char *name);
void __attribute__((format(printf, 2, 3))) fail(const char *name, const char *fmt, ...);
void skip(const char *name, const char *why);

/*
 * Random open/close, mmap, mprotect, madvise, munmap, reads through the
 * mappings, ioctls, poll, read/write and lseek on @node, @calls calls or
 * @seconds seconds, whichever ends first. Every result is checked against
 * the access rules (docs/kmod.md); returns the number of violations.
 */
/*
 * Map the ring view of the open device @fd read-only as the daemon does
 * (docs/abi.md decision 11): reserve mmap_len bytes PROT_NONE, then map
 * each chunk GET_CHUNK reports over its part, MAP_FIXED, at mmap offset
 * chunk.offset. Returns the base, or MAP_FAILED with errno set (nothing
 * left mapped). munmap(base, mmap_len) unmaps it all.
 */
uint8_t *hmbtrace_map_ring(int fd, const struct hmb_trace_info *info);

long hmbtrace_fuzz(const char *node, long calls, unsigned int seed, int seconds);

/*
 * Poll wake-up latency over the NVMe device: @rounds times, drain the ring,
 * read 4 KiB O_DIRECT from @block, time the POLLIN on @node. Prints one
 * "wake_latency_us ..." line; returns 0, or 1 after a FAIL line.
 */
int hmbtrace_wake_latency(const char *node, const char *block, int rounds);

#endif
