/* SPDX-License-Identifier: GPL-2.0 */
/*
 * hmbtrace-test.h - what the parts of the guest test program share: the
 * check reporting (ok/FAIL/skip lines) and the fuzzer's entry point; and,
 * defined here (static inline, so a program that includes this header
 * needs no other file), the small helpers every guest program uses:
 * conformance/guest/hmbtrace-reinit-waits.c includes it too.
 */
#ifndef HMBTRACE_TEST_H
#define HMBTRACE_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

static inline uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* qsort() order of uint64_t. */
static inline int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Write all of @text to @path (sysfs, tracefs): 0, or -errno (-EIO if short). */
static inline int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, text, strlen(text));
	if (n < 0) {
		n = -errno;
		close(fd);
		return n;
	}
	close(fd);
	return (size_t)n == strlen(text) ? 0 : -EIO;
}

/*
 * Read @path to its end or @len - 1 bytes into @buf, NUL-terminated: the
 * bytes read, or -errno.
 */
static inline ssize_t read_file(const char *path, char *buf, size_t len)
{
	ssize_t n = 0, got = 0;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return -errno;
	while ((size_t)got < len - 1 && (n = read(fd, buf + got, len - 1 - got)) > 0)
		got += n;
	if (n < 0)
		got = -errno;
	close(fd);
	buf[got < 0 ? 0 : got] = 0;
	return got;
}

#endif
