// SPDX-License-Identifier: GPL-2.0
/*
 * REINIT of a large NVMe trace ring while other threads read sysfs, call
 * GET_STATS and poll (issue 26, point 6): no call may wait longer than a
 * bound. The conformance scenario nvme_big_ring runs it in the guest
 * (conformance/src/scenarios/nvme_big_ring.rs), built static on the host.
 *
 * Each round: reset the controller (sysfs reset_controller: the series'
 * driver marks the adopted ring FROZEN at the MR=1 re-enable), wait for
 * FROZEN, start one thread per call type, let them run 100 ms, REINIT
 * (timed), let them run 100 ms more, stop them. Every call's duration is
 * kept; the program prints, per call type, the count, median, p99 and
 * maximum in microseconds.
 *
 * The noise floor: under TCG on a loaded host a vCPU thread can be
 * descheduled for a quarter of a second, and whichever call it was in
 * shows that as a wait, lock or no lock. So a fourth thread times the same
 * sysfs read of an attribute whose show() takes no lock (ring_size, fixed
 * for the device's life), through the same open/read/close, beside the
 * others; its longest wait is the floor. The check: no call that takes the
 * device lock (sysfs head, GET_STATS, poll) and no REINIT waited the bound
 * plus the floor or longer. A REINIT that holds the lock for the bound still
 * fails it: the readers wait behind the hold, the floor's thread does not.
 *
 * Usage: hmbtrace-reinit-waits --ctrl nvme0 [--dev nvme-hmb-trace0]
 *        [--rounds N] [--bound-us US]
 * Output: "info ...", "waits TYPE count=N median_us=M p99_us=P max_us=X"
 * (TYPE sysfs_head, get_stats, poll, sysfs_ring_size: the floor, reinit),
 * "info floor_us F limit_us L", then "ok reinit_waits" or
 * "FAIL reinit_waits: why"; exit 0, 1 (a check failed) or 2 (bad usage).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <linux/nvme_hmb_trace.h>

/* now_us(), cmp_u64(), read_file(), write_file(): static inline, no other file. */
#include "../../kmod/tests/hmbtrace-test.h"

#define MAX_SAMPLES (1024u * 1024u)

/* The threaded calls first (up to CALL_REINIT), the lock-free floor last of them. */
enum call { CALL_SYSFS, CALL_STATS, CALL_POLL, CALL_FLOOR, CALL_REINIT, NR_CALLS };

static const char *const call_names[NR_CALLS] = {
	"sysfs_head", "get_stats", "poll", "sysfs_ring_size", "reinit",
};

struct samples {
	uint64_t *us;
	size_t n;
};

static struct samples samples[NR_CALLS];
static char sysfs_head[256], sysfs_ring_size[256];
static int dev_fd = -1;
static volatile int stop_threads;

static void keep(enum call c, uint64_t us)
{
	if (samples[c].n < MAX_SAMPLES)
		samples[c].us[samples[c].n++] = us;
}

static int read_sysfs(const char *path)
{
	char buf[64];

	return read_file(path, buf, sizeof(buf)) > 0 ? 0 : -1;
}

/* One thread per call type; each keeps its own samples (one writer each). */
static void *caller(void *arg)
{
	enum call c = (enum call)(uintptr_t)arg;
	struct pollfd pfd = { .fd = dev_fd, .events = POLLIN | POLLPRI };
	struct hmb_trace_stats st;

	while (!stop_threads) {
		uint64_t t0 = now_us();
		int ret;

		switch (c) {
		case CALL_SYSFS:
			ret = read_sysfs(sysfs_head);
			break;
		case CALL_FLOOR:
			ret = read_sysfs(sysfs_ring_size);
			break;
		case CALL_STATS:
			ret = ioctl(dev_fd, HMB_TRACE_IOC_GET_STATS, &st);
			break;
		default:
			ret = poll(&pfd, 1, 0) < 0 ? -1 : 0;
			break;
		}
		keep(c, now_us() - t0);
		if (ret) {
			printf("FAIL reinit_waits: %s failed: %s\n", call_names[c], strerror(errno));
			exit(1);
		}
	}
	return NULL;
}

/* Wait (30 s at most) until the ring is FROZEN; its epoch in *epoch. */
static int wait_frozen(uint64_t *epoch)
{
	struct hmb_trace_info info;
	uint64_t deadline = now_us() + 30 * 1000000ull;

	while (now_us() < deadline) {
		if (ioctl(dev_fd, HMB_TRACE_IOC_GET_INFO, &info))
			return -1;
		if (info.flags & HMB_RING_FLAG_FROZEN) {
			*epoch = info.epoch;
			return 0;
		}
		usleep(10000);
	}
	errno = ETIMEDOUT;
	return -1;
}

static void usage(const char *argv0)
{
	fprintf(stderr, "usage: %s --ctrl nvmeN [--dev NAME] [--rounds N] [--bound-us US]\n", argv0);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "ctrl", required_argument, NULL, 'c' },
		{ "dev", required_argument, NULL, 'd' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "bound-us", required_argument, NULL, 'b' },
		{ NULL, 0, NULL, 0 },
	};
	const char *ctrl = NULL, *dev = "nvme-hmb-trace0";
	unsigned long rounds = 3, bound_us = 250000;
	char path[512], why[512] = "";
	struct hmb_trace_info info;
	uint64_t max_us[NR_CALLS], limit_us;
	int opt, failed = 0;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			ctrl = optarg;
			break;
		case 'd':
			dev = optarg;
			break;
		case 'r':
			rounds = strtoul(optarg, NULL, 10);
			break;
		case 'b':
			bound_us = strtoul(optarg, NULL, 10);
			break;
		default:
			usage(argv[0]);
			return 2;
		}
	}
	if (!ctrl || !rounds || !bound_us) {
		usage(argv[0]);
		return 2;
	}
	for (int c = 0; c < NR_CALLS; c++) {
		samples[c].us = calloc(MAX_SAMPLES, sizeof(uint64_t));
		if (!samples[c].us) {
			printf("FAIL reinit_waits: out of memory\n");
			return 1;
		}
	}
	snprintf(sysfs_head, sizeof(sysfs_head), "/sys/class/nvme-hmb-trace/%s/head", dev);
	snprintf(sysfs_ring_size, sizeof(sysfs_ring_size), "/sys/class/nvme-hmb-trace/%s/ring_size",
		 dev);
	snprintf(path, sizeof(path), "/dev/%s", dev);
	dev_fd = open(path, O_RDONLY);
	if (dev_fd < 0 || ioctl(dev_fd, HMB_TRACE_IOC_GET_INFO, &info)) {
		printf("FAIL reinit_waits: open/GET_INFO %s: %s\n", path, strerror(errno));
		return 1;
	}
	printf("info ring_size %llu rounds %lu bound_us %lu\n",
	       (unsigned long long)info.ring_size, rounds, bound_us);
	fflush(stdout);
	snprintf(path, sizeof(path), "/sys/class/nvme/%s/reset_controller", ctrl);
	for (unsigned long r = 0; r < rounds; r++) {
		pthread_t threads[CALL_REINIT];
		uint64_t epoch = 0, frozen_epoch, t0;
		int ret;

		ret = write_file(path, "1");
		if (ret || wait_frozen(&frozen_epoch)) {
			printf("FAIL reinit_waits: round %lu: reset or FROZEN: %s\n", r,
			       strerror(ret ? -ret : errno));
			return 1;
		}
		stop_threads = 0;
		for (int c = 0; c < CALL_REINIT; c++)
			pthread_create(&threads[c], NULL, caller, (void *)(uintptr_t)c);
		usleep(100000);
		t0 = now_us();
		ret = ioctl(dev_fd, HMB_TRACE_IOC_REINIT, &epoch);
		keep(CALL_REINIT, now_us() - t0);
		usleep(100000);
		stop_threads = 1;
		for (int c = 0; c < CALL_REINIT; c++)
			pthread_join(threads[c], NULL);
		if (ret || epoch != frozen_epoch + 1) {
			printf("FAIL reinit_waits: round %lu: REINIT %d (%s), epoch %llu after %llu\n", r,
			       ret, ret ? strerror(errno) : "-", (unsigned long long)epoch,
			       (unsigned long long)frozen_epoch);
			return 1;
		}
		/* Let the driver's work item send the advert before the next reset. */
		usleep(500000);
	}
	for (int c = 0; c < NR_CALLS; c++) {
		struct samples *s = &samples[c];
		uint64_t med, p99;

		if (!s->n) {
			printf("FAIL reinit_waits: no %s call was made\n", call_names[c]);
			return 1;
		}
		qsort(s->us, s->n, sizeof(uint64_t), cmp_u64);
		med = s->us[s->n / 2];
		p99 = s->us[s->n * 99 / 100];
		max_us[c] = s->us[s->n - 1];
		printf("waits %s count=%zu median_us=%llu p99_us=%llu max_us=%llu\n", call_names[c], s->n,
		       (unsigned long long)med, (unsigned long long)p99,
		       (unsigned long long)max_us[c]);
	}
	limit_us = bound_us + max_us[CALL_FLOOR];
	printf("info floor_us %llu limit_us %llu\n", (unsigned long long)max_us[CALL_FLOOR],
	       (unsigned long long)limit_us);
	for (int c = 0; c < NR_CALLS; c++) {
		if (c == CALL_FLOOR || max_us[c] < limit_us)
			continue;
		failed = 1;
		snprintf(why + strlen(why), sizeof(why) - strlen(why), " %s waited %llu us;",
			 call_names[c], (unsigned long long)max_us[c]);
	}
	if (failed)
		printf("FAIL reinit_waits:%s bound %lu us + floor %llu us\n", why, bound_us,
		       (unsigned long long)max_us[CALL_FLOOR]);
	else
		printf("ok reinit_waits\n");
	close(dev_fd);
	return failed;
}
