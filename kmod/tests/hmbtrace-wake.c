// SPDX-License-Identifier: GPL-2.0
/*
 * hmbtrace-wake.c - how long poll(2) on the trace node takes to wake after
 * the device has produced, on the NVMe device (docs/abi.md, wake-ups).
 *
 * Each round drains the ring (PUBLISH_TAIL = head) and blocks in poll(2)
 * as the daemon does on an empty ring; a second thread then issues one
 * 4 KiB O_DIRECT read on the namespace. The controller writes its fetch and
 * completion records into the ring before it posts the completion, so when
 * pread() returns the records are there: the time from then to the POLLIN
 * wake-up is how late a sleeping consumer learns of them (the module's
 * timed sampler over NVMe). A wake-up before pread() returned counts as 0.
 * A round where the ring was not empty before the read (something else
 * produced) is retried, not counted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <linux/nvme_hmb_trace.h>

#include "hmbtrace-test.h"

struct reader {
	int bfd;
	void *buf;
	off_t off;
	uint64_t done_us;	/* when pread() returned */
	int ok;
};

/* Give the poller time to block, then cause the records. */
static void *read_one(void *arg)
{
	struct reader *r = arg;

	usleep(2000);
	r->ok = pread(r->bfd, r->buf, 4096, r->off) == 4096;
	r->done_us = now_us();
	return NULL;
}

static uint64_t head_of(const struct hmb_ring_hdr *h)
{
	return __atomic_load_n(&h->head, __ATOMIC_ACQUIRE);
}

int hmbtrace_wake_latency(const char *node, const char *block, int rounds)
{
	struct hmb_trace_info info;
	struct hmb_ring_hdr *h;
	uint64_t *lat;
	void *buf, *map;
	int fd, bfd, n = 0, tries = 0;

	fd = open(node, O_RDONLY);
	bfd = open(block, O_RDONLY | O_DIRECT);
	if (fd < 0 || bfd < 0) {
		fail("wake_latency", "open %s / %s: %s", node, block, strerror(errno));
		return 1;
	}
	if (ioctl(fd, HMB_TRACE_IOC_GET_INFO, &info)) {
		fail("wake_latency", "GET_INFO: %s", strerror(errno));
		return 1;
	}
	map = hmbtrace_map_ring(fd, &info);
	lat = calloc(rounds, sizeof(*lat));
	if (map == MAP_FAILED || !lat || posix_memalign(&buf, 4096, 4096)) {
		fail("wake_latency", "mmap/alloc: %s", strerror(errno));
		return 1;
	}
	h = map;
	while (n < rounds && tries++ < 4 * rounds) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		uint64_t head = head_of(h), t0;

		if (ioctl(fd, HMB_TRACE_IOC_PUBLISH_TAIL, &head)) {
			fail("wake_latency", "PUBLISH_TAIL %llu: %s", (unsigned long long)head,
			     strerror(errno));
			return 1;
		}
		if (head_of(h) != head || poll(&pfd, 1, 0) != 0)
			continue; /* produced meanwhile, or the sampler has not seen the tail yet */
		struct reader r = { .bfd = bfd, .buf = buf, .off = (off_t)(n % 1024) * 4096 };
		pthread_t thread;
		int ready;

		if (pthread_create(&thread, NULL, read_one, &r)) {
			fail("wake_latency", "pthread_create failed");
			return 1;
		}
		ready = poll(&pfd, 1, 5000);
		t0 = now_us();
		pthread_join(thread, NULL);
		if (!r.ok) {
			fail("wake_latency", "pread %s failed", block);
			return 1;
		}
		if (ready != 1 || !(pfd.revents & POLLIN)) {
			fail("wake_latency", "no POLLIN within 5 s of a read (revents %#x)",
			     pfd.revents);
			return 1;
		}
		lat[n++] = t0 > r.done_us ? t0 - r.done_us : 0;
	}
	if (n < rounds) {
		fail("wake_latency", "only %d of %d rounds started on an empty ring", n, rounds);
		return 1;
	}
	qsort(lat, n, sizeof(*lat), cmp_u64);
	printf("wake_latency_us rounds=%d min=%llu p50=%llu p90=%llu p99=%llu max=%llu\n", n,
	       (unsigned long long)lat[0], (unsigned long long)lat[n / 2],
	       (unsigned long long)lat[n * 9 / 10], (unsigned long long)lat[n * 99 / 100],
	       (unsigned long long)lat[n - 1]);
	ok("wake_latency");
	munmap(map, info.mmap_len);
	free(lat);
	free(buf);
	close(bfd);
	close(fd);
	return 0;
}
