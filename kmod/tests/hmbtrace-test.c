// SPDX-License-Identifier: GPL-2.0
/*
 * hmbtrace-test - guest-side checks of nvme-hmb-trace.ko. Static, runs as
 * root in a QEMU guest with the module loaded and a device producing.
 *
 * Output is one line per check, for a harness to parse:
 *   ok <name>
 *   FAIL <name>: <reason>
 *   skip <name>: <reason>
 *   REQUEST <what>        (asks the harness to act on the device, e.g. freeze)
 *   info <text>           (measurements, for humans)
 *   summary: <n> ok, <n> failed, <n> skipped
 * Exit status: 0 when nothing failed, 1 otherwise, 2 on bad usage.
 *
 * Modes besides the default checks: --fuzz N (hmbtrace-fuzz.c), --big-reinit
 * (lock hold time of REINIT on a large ring), --chunks (the chunk mapping
 * rules on a device of any kind, and with --remove unbind the reader's
 * mapping across removal: SIGBUS, the memory freed only after the last
 * mapping; for the NVMe slice, whose ring is several DMA allocations).
 *
 * Build: make -C kmod test   (gcc -static)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/klog.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/nvme_hmb_trace.h>

#include "hmbtrace-test.h"

#define MODULE_NAME	"nvme_hmb_trace"
#define DRIVER_DIR	"/sys/bus/pci/drivers/nvme-hmb-trace"
#define CLASS_DIR	"/sys/class/nvme-hmb-trace"

enum { REMOVE_NONE, REMOVE_UNBIND, REMOVE_DEVICE_DEL };

struct opts {
	const char *name;	/* nvme-hmb-trace0 */
	unsigned int mode;	/* expected node mode */
	long gid;		/* expected node group id, -1: not checked */
	int wait_s;		/* how long to wait for the device to act */
	int producer;		/* a device produces records */
	int freeze;		/* the harness can freeze the device on request */
	int remove;		/* REMOVE_*: how to remove the device while mapped */
	int irq;		/* expect device interrupts (irq_count moves) */
	int hostile;		/* the harness can rewind the header (REQUEST rewind_header) */
	int late_stop;		/* the harness can make the device stop late (REQUEST late_stop) */
	long fuzz;		/* --fuzz N: only run the fuzzer, N calls */
	unsigned int seed;
	int big_reinit;		/* --big-reinit: only the REINIT lock-hold check */
	int wake_rounds;	/* --wake-latency N: only the poll wake-up latency */
	const char *block;	/* --block PATH: the namespace it reads from */
	int chunks;		/* --chunks: only the chunk mapping checks */
};

static int n_ok, n_fail, n_skip;

void ok(const char *name)
{
	printf("ok %s\n", name);
	fflush(stdout);
	n_ok++;
}

void fail(const char *name, const char *fmt, ...)
{
	va_list ap;

	printf("FAIL %s: ", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	n_fail++;
}

void skip(const char *name, const char *why)
{
	printf("skip %s: %s\n", name, why);
	fflush(stdout);
	n_skip++;
}

/* Check a condition; on failure report errno-free reason. */
#define CHECK(name, cond, ...) \
	do { if (cond) ok(name); else fail(name, __VA_ARGS__); } while (0)

static char node_path[PATH_MAX], sys_path[PATH_MAX];

static int read_sysfs_str(const char *attr, char *buf, size_t len)
{
	char path[PATH_MAX + 64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", sys_path, attr);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	if (n && buf[n - 1] == '\n')
		buf[n - 1] = 0;
	return 0;
}

/* Returns 0 and the value, or -errno. */
static int read_sysfs_u64(const char *attr, uint64_t *val)
{
	char buf[64], *end;
	int ret = read_sysfs_str(attr, buf, sizeof(buf));

	if (ret)
		return ret;
	errno = 0;
	*val = strtoull(buf, &end, 10);
	if (errno || end == buf || *end)
		return -EINVAL;
	return 0;
}

/* Ring header fields the producer writes, read as the consumer must. */
static uint64_t ld_acq64(const volatile void *p)
{
	return __atomic_load_n((const uint64_t *)p, __ATOMIC_ACQUIRE);
}

static uint32_t ld_acq32(const volatile void *p)
{
	return __atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE);
}

static sigjmp_buf sigbus_jmp;
static volatile sig_atomic_t sigbus_armed;

static void on_sigbus(int sig)
{
	(void)sig;
	if (sigbus_armed)
		siglongjmp(sigbus_jmp, 1);
	_exit(3);
}

/* Read one byte of the mapping; 1 if it raised SIGBUS. */
static int read_faults(const volatile uint8_t *p)
{
	volatile uint8_t sink;

	if (sigsetjmp(sigbus_jmp, 1)) {
		sigbus_armed = 0;
		return 1;
	}
	sigbus_armed = 1;
	sink = *p;
	(void)sink;
	sigbus_armed = 0;
	return 0;
}

static int open_dev(int flags)
{
	return open(node_path, flags | O_CLOEXEC);
}

/* ---- the checks ---- */

static void check_node(const struct opts *o)
{
	struct stat st;

	if (stat(node_path, &st)) {
		fail("node_exists", "stat %s: %s", node_path, strerror(errno));
		return;
	}
	CHECK("node_exists", S_ISCHR(st.st_mode), "%s is not a character device",
	      node_path);
	CHECK("node_mode", (st.st_mode & 07777) == o->mode,
	      "mode %04o, expected %04o", st.st_mode & 07777, o->mode);
	if (o->gid >= 0)
		CHECK("node_group", (long)st.st_gid == o->gid, "group %u, expected %ld",
		      st.st_gid, o->gid);
}

static void check_sysfs(const struct hmb_trace_info *info)
{
	static const char *const attrs[] = {
		"abi_version", "ring_size", "head", "tail", "dropped_records",
		"overflow_events", "freeze_count", "freeze_epoch", "epoch", "flags",
		"irq_count", "tail_publishes",
	};
	char buf[64], want[32];
	uint64_t rs = 0;
	unsigned int i;
	int ret;

	for (i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
		ret = read_sysfs_str(attrs[i], buf, sizeof(buf));
		if (ret) {
			fail("sysfs_attrs", "%s: %s", attrs[i], strerror(-ret));
			return;
		}
	}
	ok("sysfs_attrs");
	snprintf(want, sizeof(want), "%u.%u", HMB_RING_VERSION_MAJOR,
		 HMB_RING_VERSION_MINOR);
	read_sysfs_str("abi_version", buf, sizeof(buf));
	CHECK("sysfs_abi_version", !strcmp(buf, want), "\"%s\", expected \"%s\"",
	      buf, want);
	ret = read_sysfs_u64("ring_size", &rs);
	CHECK("sysfs_ring_size", !ret && rs == info->ring_size,
	      "%llu, GET_INFO says %llu", (unsigned long long)rs,
	      (unsigned long long)info->ring_size);
	/* Decision (docs/kmod.md): counters are world-readable, like diskstats. */
	{
		char path[PATH_MAX + 32];
		struct stat st;

		snprintf(path, sizeof(path), "%s/head", sys_path);
		CHECK("sysfs_counter_mode", !stat(path, &st) && (st.st_mode & 0777) == 0444,
		      "%s mode %04o", path, st.st_mode & 0777);
	}
}

static int get_info(int fd, struct hmb_trace_info *info)
{
	memset(info, 0xa5, sizeof(*info));	/* catch fields left unwritten */
	return ioctl(fd, HMB_TRACE_IOC_GET_INFO, info);
}

static int get_chunk(int fd, uint32_t index, struct hmb_trace_chunk *c)
{
	memset(c, 0xa5, sizeof(*c));
	c->index = index;
	c->reserved = 0;
	return ioctl(fd, HMB_TRACE_IOC_GET_CHUNK, c);
}

uint8_t *hmbtrace_map_ring(int fd, const struct hmb_trace_info *info)
{
	uint8_t *base = mmap(NULL, info->mmap_len, PROT_NONE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	struct hmb_trace_chunk c;
	int err;

	if (base == MAP_FAILED)
		return MAP_FAILED;
	for (uint32_t i = 0; i < info->nr_chunks; i++) {
		if (get_chunk(fd, i, &c)) {
			err = errno;
			goto fail;
		}
		if (c.offset > info->mmap_len || c.len > info->mmap_len - c.offset) {
			err = ERANGE;
			goto fail;
		}
		if (mmap(base + c.offset, c.len, PROT_READ, MAP_SHARED | MAP_FIXED, fd,
			 (off_t)c.offset) == MAP_FAILED) {
			err = errno;
			goto fail;
		}
	}
	return base;
fail:
	munmap(base, info->mmap_len);
	errno = err;
	return MAP_FAILED;
}

/* Chunk 0's length (the header chunk), for single-chunk mappings; 0 on error. */
static size_t first_chunk_len(int fd)
{
	struct hmb_trace_chunk c;

	return get_chunk(fd, 0, &c) ? 0 : c.len;
}

static void check_info(const struct hmb_trace_info *info)
{
	uint64_t rs = info->ring_size;

	CHECK("info_abi", info->abi_major == HMB_TRACE_DEV_ABI_MAJOR,
	      "device interface %u.%u", info->abi_major, info->abi_minor);
	CHECK("info_geometry",
	      info->hdr_size == HMB_RING_HDR_SIZE && rs >= HMB_RING_MIN_SIZE &&
	      rs <= HMB_RING_MAX_SIZE && !(rs & (rs - 1)) &&
	      info->mmap_len == HMB_RING_HDR_SIZE + rs,
	      "hdr_size %u ring_size %llu mmap_len %llu", info->hdr_size,
	      (unsigned long long)rs, (unsigned long long)info->mmap_len);
	CHECK("info_chunks", info->nr_chunks >= 1 &&
	      info->nr_chunks <= info->mmap_len / 4096,
	      "nr_chunks %#x (uninitialised kernel memory?)", info->nr_chunks);
}

/* Expect mmap(@off, @len) of the device to fail with @err. */
static int refused(int fd, uint64_t off, uint64_t len, int prot, int err)
{
	void *p = mmap(NULL, len, prot, MAP_SHARED, fd, (off_t)off);

	if (p != MAP_FAILED) {
		munmap(p, len);
		printf("info mmap off %#llx len %#llx prot %#x succeeded\n",
		       (unsigned long long)off, (unsigned long long)len, prot);
		return 0;
	}
	if (errno != err) {
		printf("info mmap off %#llx len %#llx prot %#x: %s\n",
		       (unsigned long long)off, (unsigned long long)len, prot,
		       strerror(errno));
		return 0;
	}
	return 1;
}

/*
 * The chunk table tiles the ring view, header chunk first (decision 11),
 * and the module maps nothing but exactly one chunk: the whole view in one
 * mapping (when it is several chunks), a chunk with a page more or less,
 * a mapping from inside a chunk, two chunks at once, and anything past the
 * view are EINVAL. Then the chunks mapped side by side read as one ring.
 * Returns the mapped view, or MAP_FAILED.
 */
static uint8_t *check_chunk_rules(int fd, const struct hmb_trace_info *info)
{
	struct hmb_trace_chunk c, first;
	uint64_t end = 0, len = info->mmap_len;
	int bad = 0, ret, all = 1;
	const struct hmb_ring_hdr *h;
	uint8_t *map;

	for (uint32_t i = 0; i < info->nr_chunks && !bad; i++) {
		if (get_chunk(fd, i, &c) || c.index != i || c.offset != end || !c.len ||
		    c.len % 4096 || c.len > len - end || (i == 0 && c.len != HMB_RING_HDR_SIZE &&
							   info->nr_chunks > 1)) {
			bad = 1;
			printf("info chunk %u: %s offset %#llx len %#llx after %#llx\n", i,
			       strerror(errno), (unsigned long long)c.offset,
			       (unsigned long long)c.len, (unsigned long long)end);
		} else {
			end += c.len;
		}
	}
	CHECK("chunk_table", !bad && end == len, "%u chunks cover %#llx of %#llx bytes",
	      info->nr_chunks, (unsigned long long)end, (unsigned long long)len);
	printf("info ring view: %u chunks, %llu bytes\n", info->nr_chunks,
	       (unsigned long long)len);

	ret = get_chunk(fd, info->nr_chunks, &c);
	bad = !(ret == -1 && errno == EINVAL);
	c = (struct hmb_trace_chunk){ .index = 0, .reserved = 1 };
	ret = ioctl(fd, HMB_TRACE_IOC_GET_CHUNK, &c);
	bad |= !(ret == -1 && errno == EINVAL);
	CHECK("get_chunk_einval", !bad, "an index past the table or a reserved word not zero was accepted");

	if (get_chunk(fd, info->nr_chunks > 1 ? 1 : 0, &c) || get_chunk(fd, 0, &first)) {
		fail("mmap_not_one_chunk_einval", "GET_CHUNK: %s", strerror(errno));
		return MAP_FAILED;
	}
	if (info->nr_chunks > 1) {
		all &= refused(fd, 0, len, PROT_READ, EINVAL);
		all &= refused(fd, 0, first.len + c.len, PROT_READ, EINVAL);
	}
	all &= refused(fd, c.offset, c.len + 4096, PROT_READ, EINVAL);
	if (c.len > 4096) {
		all &= refused(fd, c.offset, c.len - 4096, PROT_READ, EINVAL);
		all &= refused(fd, c.offset + 4096, c.len - 4096, PROT_READ, EINVAL);
	}
	all &= refused(fd, len, 4096, PROT_READ, EINVAL);
	all &= refused(fd, (uint64_t)1 << 40, 4096, PROT_READ, EINVAL);
	/* Exactly a chunk, but writable or executable: the access rule first. */
	all &= refused(fd, c.offset, c.len, PROT_READ | PROT_WRITE, EACCES);
	all &= refused(fd, c.offset, c.len, PROT_READ | PROT_EXEC, EACCES);
	CHECK("mmap_not_one_chunk_einval", all, "see the info lines");

	map = hmbtrace_map_ring(fd, info);
	if (map == MAP_FAILED) {
		fail("mmap_chunks", "%s", strerror(errno));
		return MAP_FAILED;
	}
	h = (const void *)map;
	CHECK("mmap_chunks", h->magic == HMB_RING_MAGIC && h->ring_size == info->ring_size &&
	      h->epoch == info->epoch, "magic %#x ring_size %llu epoch %llu", h->magic,
	      (unsigned long long)h->ring_size, (unsigned long long)h->epoch);
	return map;
}

static void check_second_open(void)
{
	int fd2 = open_dev(O_RDONLY);

	if (fd2 >= 0) {
		close(fd2);
		fail("second_open_ebusy", "second open succeeded");
	} else {
		CHECK("second_open_ebusy", errno == EBUSY, "errno %s",
		      strerror(errno));
	}
}

static void check_mmap_refusals(int fd, const struct hmb_trace_info *info)
{
	size_t len = first_chunk_len(fd);
	void *p;

	p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (p != MAP_FAILED)
		munmap(p, len);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	CHECK("mmap_private_write_eacces", p == MAP_FAILED && errno == EACCES,
	      "%s", p == MAP_FAILED ? strerror(errno) : "mapping succeeded");
	if (p != MAP_FAILED)
		munmap(p, len);
	p = mmap(NULL, len - 4096, PROT_READ, MAP_SHARED, fd, 0);
	CHECK("mmap_short_einval", p == MAP_FAILED && errno == EINVAL, "%s",
	      p == MAP_FAILED ? strerror(errno) : "mapping succeeded");
	if (p != MAP_FAILED)
		munmap(p, len - 4096);
	p = mmap(NULL, info->mmap_len, PROT_READ, MAP_SHARED, fd, 4096);
	CHECK("mmap_offset_einval", p == MAP_FAILED && errno == EINVAL, "%s",
	      p == MAP_FAILED ? strerror(errno) : "mapping succeeded");
	if (p != MAP_FAILED)
		munmap(p, info->mmap_len);
	/* Device-written bytes are never code. */
	p = mmap(NULL, len, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0);
	CHECK("mmap_exec_eacces", p == MAP_FAILED && errno == EACCES, "%s",
	      p == MAP_FAILED ? strerror(errno) : "mapping succeeded");
	if (p != MAP_FAILED)
		munmap(p, len);
	/*
	 * Reading through a private mapping: VM_PFNMAP pages in a COW mapping
	 * would hit a BUG_ON in vmf_insert_pfn(); clearing VM_MAYWRITE keeps
	 * it a plain read-only mapping. A regression panics the guest here.
	 */
	p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED) {
		fail("mmap_private_read", "%s", strerror(errno));
	} else {
		const struct hmb_ring_hdr *h = p;

		CHECK("mmap_private_read", h->magic == HMB_RING_MAGIC &&
		      h->ring_size == info->ring_size, "magic %#x ring_size %llu",
		      h->magic, (unsigned long long)h->ring_size);
		munmap(p, len);
	}
	/* The type byte moved from 0xB7 (remoteproc, nsfs) to a free one. */
	{
		struct hmb_trace_info old;
		unsigned long old_get_info = _IOR(0xB7, 0x01, struct hmb_trace_info);
		int ret = ioctl(fd, old_get_info, &old);

		CHECK("old_ioctl_type_enotty", ret == -1 && errno == ENOTTY, "%s",
		      ret ? strerror(errno) : "the 0xB7 GET_INFO succeeded");
	}
}

/* Open for writing (root may): the module itself must refuse PROT_WRITE. */
static void check_rdwr_write_mapping(const struct hmb_trace_info *info)
{
	int fd = open_dev(O_RDWR);
	void *p;

	if (fd < 0) {
		fail("mmap_shared_write_eacces", "open O_RDWR: %s", strerror(errno));
		return;
	}
	uint8_t *map;

	p = mmap(NULL, first_chunk_len(fd), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK("mmap_shared_write_eacces", p == MAP_FAILED && errno == EACCES,
	      "%s", p == MAP_FAILED ? strerror(errno) : "mapping succeeded");
	if (p != MAP_FAILED)
		munmap(p, first_chunk_len(fd));
	/*
	 * A read-only shared mapping of a writable file would be VM_MAYWRITE:
	 * only the module clearing it stops the upgrade.
	 */
	map = hmbtrace_map_ring(fd, info);
	if (map == MAP_FAILED) {
		fail("mprotect_upgrade_rdwr_refused", "mmap O_RDWR PROT_READ: %s",
		     strerror(errno));
	} else {
		int ret = mprotect(map, info->mmap_len, PROT_READ | PROT_WRITE);

		CHECK("mprotect_upgrade_rdwr_refused", ret && errno == EACCES, "%s",
		      ret ? strerror(errno) : "mprotect succeeded");
		munmap(map, info->mmap_len);
	}
	close(fd);
}

static void check_header(const uint8_t *map, const struct hmb_trace_info *info)
{
	const struct hmb_ring_hdr *h = (const void *)map;

	CHECK("ring_header", h->magic == HMB_RING_MAGIC &&
	      h->version_major == HMB_RING_VERSION_MAJOR &&
	      h->hdr_size == HMB_RING_HDR_SIZE &&
	      h->max_record == HMB_RECORD_MAX_SIZE &&
	      h->ring_size == info->ring_size && h->epoch == info->epoch,
	      "magic %#x v%u hdr %u max %u ring %llu epoch %llu (info epoch %llu)",
	      h->magic, h->version_major, h->hdr_size, h->max_record,
	      (unsigned long long)h->ring_size, (unsigned long long)h->epoch,
	      (unsigned long long)info->epoch);
}

static void check_mprotect(int fd, uint8_t *map, size_t len)
{
	int ret = mprotect(map, len, PROT_READ | PROT_WRITE);
	size_t first = first_chunk_len(fd);
	void *p;

	CHECK("mprotect_upgrade_refused", ret && errno == EACCES, "%s",
	      ret ? strerror(errno) : "mprotect succeeded");
	/* Private mappings are always VM_MAYWRITE unless the module clears it. */
	p = mmap(NULL, first, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED) {
		fail("mprotect_upgrade_private_refused", "mmap MAP_PRIVATE: %s",
		     strerror(errno));
		return;
	}
	ret = mprotect(p, first, PROT_READ | PROT_WRITE);
	CHECK("mprotect_upgrade_private_refused", ret && errno == EACCES, "%s",
	      ret ? strerror(errno) : "mprotect succeeded");
	munmap(p, first);
	ret = mprotect(map, len, PROT_READ | PROT_EXEC);
	CHECK("mprotect_exec_refused", ret && errno == EACCES, "%s",
	      ret ? strerror(errno) : "mprotect succeeded");
}

static void check_bad_tails(int fd, const uint8_t *map)
{
	const struct hmb_ring_hdr *h = (const void *)map;
	uint64_t head = ld_acq64(&h->head), tail = h->tail, bad;
	int r1, e1, r2, e2;

	bad = head + HMB_RING_ALIGN * 1024;	/* beyond head */
	r1 = ioctl(fd, HMB_TRACE_IOC_PUBLISH_TAIL, &bad);
	e1 = errno;
	bad = tail + 4;				/* misaligned */
	r2 = ioctl(fd, HMB_TRACE_IOC_PUBLISH_TAIL, &bad);
	e2 = errno;
	CHECK("publish_tail_einval", r1 == -1 && e1 == EINVAL && r2 == -1 &&
	      e2 == EINVAL && h->tail == tail,
	      "beyond head: %d/%s, misaligned: %d/%s", r1, strerror(e1), r2,
	      strerror(e2));
}

static void check_stats(int fd, const uint8_t *map)
{
	const struct hmb_ring_hdr *h = (const void *)map;
	struct hmb_trace_stats st;
	uint64_t head_after;

	memset(&st, 0xa5, sizeof(st));
	if (ioctl(fd, HMB_TRACE_IOC_GET_STATS, &st)) {
		fail("get_stats", "%s", strerror(errno));
		return;
	}
	head_after = ld_acq64(&h->head);
	CHECK("get_stats", st.head <= head_after && st.tail == h->tail &&
	      st.epoch == h->epoch && st.dropped_records <= h->dropped_records,
	      "stats head %llu tail %llu epoch %llu vs ring head %llu tail %llu epoch %llu",
	      (unsigned long long)st.head, (unsigned long long)st.tail,
	      (unsigned long long)st.epoch, (unsigned long long)head_after,
	      (unsigned long long)h->tail, (unsigned long long)h->epoch);
}

static void check_reinit_refused(int fd, const uint8_t *map)
{
	const struct hmb_ring_hdr *h = (const void *)map;
	uint64_t epoch = 0;
	int ret;

	if (ld_acq32(&h->flags) & HMB_RING_FLAG_FROZEN) {
		skip("reinit_live_ebusy", "device is already FROZEN");
		return;
	}
	ret = ioctl(fd, HMB_TRACE_IOC_REINIT, &epoch);
	CHECK("reinit_live_ebusy", ret == -1 && errno == EBUSY, "%s",
	      ret ? strerror(errno) : "REINIT succeeded on a live ring");
}

/*
 * Walk [tail, head) with the ABI's rules: every record fits, lengths are
 * bounded, sequence numbers increase. Returns the number of records, or -1.
 */
static long walk_records(const uint8_t *map, uint64_t tail, uint64_t head,
			 char *why, size_t whylen)
{
	const struct hmb_ring_hdr *h = (const void *)map;
	const uint8_t *data = map + HMB_RING_HDR_SIZE;
	uint64_t rs = h->ring_size, pos = tail, last_seq = 0;
	long n = 0;

	while (pos < head) {
		uint64_t off = pos & (rs - 1), room = rs - off;
		const struct hmb_record_hdr *r = (const void *)(data + off);
		uint32_t size;

		if (room < HMB_RECORD_HDR_SIZE) {
			pos += room;
			continue;
		}
		if (r->flags & HMB_RECORD_FLAG_PAD) {
			if (r->length != room - HMB_RECORD_HDR_SIZE) {
				snprintf(why, whylen, "bad pad at %llu", (unsigned long long)pos);
				return -1;
			}
			pos += room;
			continue;
		}
		if (r->length > HMB_RECORD_MAX_PAYLOAD) {
			snprintf(why, whylen, "length %u at %llu", r->length,
				 (unsigned long long)pos);
			return -1;
		}
		size = (HMB_RECORD_HDR_SIZE + r->length + 7) & ~7u;
		if (size > room || pos + size > head) {
			snprintf(why, whylen, "record at %llu overruns", (unsigned long long)pos);
			return -1;
		}
		if (n && r->seq <= last_seq) {
			snprintf(why, whylen, "seq %llu after %llu",
				 (unsigned long long)r->seq, (unsigned long long)last_seq);
			return -1;
		}
		last_seq = r->seq;
		n++;
		pos += size;
	}
	return n;
}

/* Consume everything, then wait for the device to produce more. */
static void check_poll_wakes(int fd, const uint8_t *map, const struct opts *o)
{
	const struct hmb_ring_hdr *h = (const void *)map;
	uint64_t head, sys_head0 = 0, sys_head1 = 0, pubs0 = 0, pubs1 = 0;
	uint64_t irqs0 = 0, irqs1 = 0, tail_sys = 0;
	struct pollfd pfd = { .fd = fd, .events = POLLIN | POLLPRI };
	char why[96] = "";
	long n;
	int ret;

	if (!o->producer) {
		skip("poll_wakes", "no producer (--no-producer)");
		return;
	}
	read_sysfs_u64("tail_publishes", &pubs0);
	read_sysfs_u64("irq_count", &irqs0);
	head = ld_acq64(&h->head);
	n = walk_records(map, h->tail, head, why, sizeof(why));
	CHECK("records_valid", n >= 0, "%s", why);
	if (ioctl(fd, HMB_TRACE_IOC_PUBLISH_TAIL, &head)) {
		fail("publish_tail", "tail %llu: %s", (unsigned long long)head,
		     strerror(errno));
		return;
	}
	read_sysfs_u64("tail", &tail_sys);
	read_sysfs_u64("tail_publishes", &pubs1);
	CHECK("publish_tail", h->tail == head && tail_sys == head && pubs1 == pubs0 + 1,
	      "ring tail %llu sysfs tail %llu publishes %llu->%llu, wanted %llu",
	      (unsigned long long)h->tail, (unsigned long long)tail_sys,
	      (unsigned long long)pubs0, (unsigned long long)pubs1,
	      (unsigned long long)head);
	read_sysfs_u64("head", &sys_head0);

	/*
	 * Only a poll() entered with nothing to read proves a wake-up: if the
	 * device produced in between, consume again and retry.
	 */
	for (int attempt = 0; attempt < 20; attempt++) {
		uint64_t t0;

		head = ld_acq64(&h->head);
		if (head != h->tail && ioctl(fd, HMB_TRACE_IOC_PUBLISH_TAIL, &head)) {
			fail("poll_wakes", "publish %llu: %s", (unsigned long long)head,
			     strerror(errno));
			return;
		}
		if (ld_acq64(&h->head) != head)
			continue;
		t0 = now_us() / 1000;	/* ms */
		ret = poll(&pfd, 1, o->wait_s * 1000);
		/* poll() rescans once at its timeout: a late POLLIN is no wake-up. */
		if (ret != 1 || !(pfd.revents & POLLIN) ||
		    now_us() / 1000 - t0 >= (uint64_t)o->wait_s * 1000) {
			fail("poll_wakes", "poll returned %d revents %#x after %llu ms", ret,
			     pfd.revents, (unsigned long long)(now_us() / 1000 - t0));
			return;
		}
		if (ld_acq64(&h->head) <= head) {
			fail("poll_wakes", "POLLIN but head %llu did not pass %llu",
			     (unsigned long long)ld_acq64(&h->head), (unsigned long long)head);
			return;
		}
		printf("info poll blocked %llu ms until the device produced\n",
		       (unsigned long long)(now_us() / 1000 - t0));
		ok("poll_wakes");
		break;
	}
	if (ld_acq64(&h->head) == head) {
		fail("poll_wakes", "the device produced faster than the test could drain it");
		return;
	}
	read_sysfs_u64("head", &sys_head1);
	CHECK("sysfs_head_moves", sys_head1 > sys_head0, "head %llu -> %llu",
	      (unsigned long long)sys_head0, (unsigned long long)sys_head1);
	read_sysfs_u64("irq_count", &irqs1);
	/*
	 * The device may have produced between the last head check and poll()
	 * entry: poll() then returns at once, before the interrupt that
	 * follows the head update is counted. Give that interrupt 2 s.
	 */
	for (int i = 0; o->irq && irqs1 <= irqs0 && i < 200; i++) {
		usleep(10000);
		read_sysfs_u64("irq_count", &irqs1);
	}
	if (o->irq)
		CHECK("irq_count_moves", irqs1 > irqs0, "irq_count %llu -> %llu",
		      (unsigned long long)irqs0, (unsigned long long)irqs1);
	else
		skip("irq_count_moves", "no device interrupts expected");

	/* A tail before the one just published is refused. */
	if (head >= HMB_RING_ALIGN) {
		uint64_t back = head - HMB_RING_ALIGN;

		ret = ioctl(fd, HMB_TRACE_IOC_PUBLISH_TAIL, &back);
		CHECK("publish_tail_backwards_einval", ret == -1 && errno == EINVAL,
		      "%s", ret ? strerror(errno) : "accepted");
	}
	/* No spurious wake-ups: once drained, poll with nothing new times out or reports new data. */
	head = ld_acq64(&h->head);
	n = walk_records(map, h->tail, head, why, sizeof(why));
	CHECK("records_valid_after_poll", n >= 0, "%s", why);
}

/*
 * A reader that waits only for POLLPRI (the daemon letting records gather,
 * docs/daemon.md) sleeps through new records: the module wakes its pollers
 * keyed with the events it found (the sampler) or an interrupt means, so
 * unread records (EPOLLIN) do not end, or even interrupt, a POLLPRI-only
 * wait. Unkeyed, every 10 ms sample or interrupt woke the waiter (one
 * voluntary context switch each).
 */
static void check_pri_wait_sleeps(int fd, const uint8_t *map)
{
	const struct hmb_ring_hdr *h = (const void *)map;
	struct pollfd pfd = { .fd = fd, .events = POLLPRI };
	struct rusage r0, r1;
	long switches;
	int ret;

	if (ld_acq64(&h->head) == ld_acq64(&h->tail)) {
		skip("pri_wait_sleeps", "no unread records to ignore");
		return;
	}
	getrusage(RUSAGE_THREAD, &r0);
	ret = poll(&pfd, 1, 300);
	getrusage(RUSAGE_THREAD, &r1);
	switches = r1.ru_nvcsw - r0.ru_nvcsw;
	CHECK("pri_wait_sleeps", ret == 0 && switches <= 3,
	      "poll(POLLPRI, 300 ms) with records unread: returned %d revents %#x, %ld voluntary switches",
	      ret, pfd.revents, switches);
}

/* Ask the harness to freeze the device and wait for POLLPRI. */
static int request_freeze(int fd, const uint8_t *map, const struct opts *o, const char *name)
{
	const struct hmb_ring_hdr *h = (const void *)map;
	struct pollfd pfd = { .fd = fd, .events = POLLPRI };
	int ret;

	printf("REQUEST freeze\n");
	fflush(stdout);
	ret = poll(&pfd, 1, o->wait_s * 1000);
	CHECK(name, ret == 1 && (pfd.revents & POLLPRI) &&
	      (ld_acq32(&h->flags) & HMB_RING_FLAG_FROZEN),
	      "poll %d revents %#x flags %#x", ret, pfd.revents, ld_acq32(&h->flags));
	return ret == 1 && (pfd.revents & POLLPRI);
}

static uint64_t sysfs_or_max(const char *attr)
{
	uint64_t v;

	return read_sysfs_u64(attr, &v) ? UINT64_MAX : v;
}

/*
 * Freeze, REINIT, twice. freeze_count goes up once per frozen epoch and
 * freeze_epoch names it: a FROZEN seen again after REINIT (interrupt, poll,
 * sysfs) is never counted for the new epoch.
 */
static void check_freeze(int fd, const uint8_t *map, const struct opts *o)
{
	const struct hmb_ring_hdr *h = (const void *)map;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint64_t freezes0, freezes1, epoch0 = sysfs_or_max("epoch"), epoch = 0;
	int ret;

	if (!o->freeze) {
		skip("freeze_pollpri", "harness cannot freeze the device (no --freeze)");
		return;
	}
	freezes0 = sysfs_or_max("freeze_count");
	if (!request_freeze(fd, map, o, "freeze_pollpri"))
		return;
	freezes1 = sysfs_or_max("freeze_count");
	CHECK("sysfs_freeze_count_moves", freezes1 == freezes0 + 1,
	      "freeze_count %llu -> %llu", (unsigned long long)freezes0,
	      (unsigned long long)freezes1);
	CHECK("sysfs_freeze_epoch", sysfs_or_max("freeze_epoch") == epoch0,
	      "freeze_epoch %llu, frozen epoch %llu",
	      (unsigned long long)sysfs_or_max("freeze_epoch"), (unsigned long long)epoch0);
	/* A REINIT whose result cannot be returned must not happen at all. */
	ret = ioctl(fd, HMB_TRACE_IOC_REINIT, NULL);
	CHECK("reinit_efault_unchanged", ret == -1 && errno == EFAULT &&
	      sysfs_or_max("epoch") == epoch0 && (ld_acq32(&h->flags) & HMB_RING_FLAG_FROZEN),
	      "ret %d (%s), epoch %llu (was %llu), flags %#x", ret,
	      ret ? strerror(errno) : "-", (unsigned long long)sysfs_or_max("epoch"),
	      (unsigned long long)epoch0, ld_acq32(&h->flags));
	ret = ioctl(fd, HMB_TRACE_IOC_REINIT, &epoch);
	CHECK("reinit_after_freeze", ret == 0 && epoch == epoch0 + 1 &&
	      h->epoch == epoch && !(ld_acq32(&h->flags) & HMB_RING_FLAG_FROZEN) &&
	      h->tail == 0,
	      "ret %d (%s) epoch %llu (was %llu) ring epoch %llu flags %#x tail %llu",
	      ret, ret ? strerror(errno) : "-", (unsigned long long)epoch,
	      (unsigned long long)epoch0, (unsigned long long)h->epoch,
	      ld_acq32(&h->flags), (unsigned long long)h->tail);
	if (!o->producer)
		return;
	ret = poll(&pfd, 1, o->wait_s * 1000);
	CHECK("produces_after_reinit", ret == 1 && (pfd.revents & POLLIN) &&
	      ld_acq64(&h->head) > 0, "poll %d revents %#x head %llu", ret,
	      pfd.revents, (unsigned long long)ld_acq64(&h->head));
	/* The new epoch is live: nothing counted for it yet. */
	CHECK("freeze_count_after_reinit", sysfs_or_max("freeze_count") == freezes1 &&
	      sysfs_or_max("freeze_epoch") == epoch0,
	      "freeze_count %llu (was %llu) freeze_epoch %llu",
	      (unsigned long long)sysfs_or_max("freeze_count"), (unsigned long long)freezes1,
	      (unsigned long long)sysfs_or_max("freeze_epoch"));
	if (!request_freeze(fd, map, o, "freeze_second_epoch"))
		return;
	CHECK("freeze_count_per_epoch", sysfs_or_max("freeze_count") == freezes0 + 2 &&
	      sysfs_or_max("freeze_epoch") == epoch,
	      "freeze_count %llu (started %llu) freeze_epoch %llu (epoch %llu)",
	      (unsigned long long)sysfs_or_max("freeze_count"), (unsigned long long)freezes0,
	      (unsigned long long)sysfs_or_max("freeze_epoch"), (unsigned long long)epoch);
	ret = ioctl(fd, HMB_TRACE_IOC_REINIT, &epoch);
	CHECK("reinit_second_epoch", ret == 0 && epoch == epoch0 + 2, "ret %d epoch %llu",
	      ret, (unsigned long long)epoch);
	pfd.events = POLLIN;
	ret = poll(&pfd, 1, o->wait_s * 1000);
	CHECK("produces_after_second_reinit", ret == 1 && (pfd.revents & POLLIN),
	      "poll %d revents %#x", ret, pfd.revents);
}

/*
 * A hostile device rewrites the module's own header fields (tail to 0,
 * epoch one lower): the module goes by its copies. Needs a tail > 0.
 */
static void check_shadow_state(int fd, const uint8_t *map, const struct opts *o)
{
	const struct hmb_ring_hdr *h = (const void *)map;
	struct hmb_trace_info info;
	struct hmb_trace_stats st;
	uint64_t tail = h->tail, epoch = h->epoch, back;
	int r_back, e_back, r_same;

	if (!o->hostile) {
		skip("shadow_tail_epoch", "harness cannot rewrite the header (no --hostile)");
		return;
	}
	if (tail < HMB_RING_ALIGN) {
		skip("shadow_tail_epoch", "no tail published yet");
		return;
	}
	printf("REQUEST rewind_header\n");
	fflush(stdout);
	for (int i = 0; i < o->wait_s * 20 && h->tail != 0; i++)
		usleep(50000);
	if (h->tail != 0 || h->epoch != epoch - 1) {
		fail("shadow_tail_epoch", "the device did not rewrite the header (tail %llu epoch %llu)",
		     (unsigned long long)h->tail, (unsigned long long)h->epoch);
		return;
	}
	back = tail - HMB_RING_ALIGN;
	r_back = ioctl(fd, HMB_TRACE_IOC_PUBLISH_TAIL, &back);
	e_back = errno;
	r_same = ioctl(fd, HMB_TRACE_IOC_PUBLISH_TAIL, &tail);
	CHECK("shadow_tail", r_back == -1 && e_back == EINVAL && r_same == 0 &&
	      h->tail == tail && sysfs_or_max("tail") == tail,
	      "tail %llu-8 after the rewind: %d/%s, tail again: %d, ring tail %llu sysfs %llu",
	      (unsigned long long)tail, r_back, strerror(e_back), r_same,
	      (unsigned long long)h->tail, (unsigned long long)sysfs_or_max("tail"));
	CHECK("shadow_epoch", !get_info(fd, &info) && info.epoch == epoch &&
	      !ioctl(fd, HMB_TRACE_IOC_GET_STATS, &st) && st.epoch == epoch &&
	      sysfs_or_max("epoch") == epoch,
	      "GET_INFO epoch %llu, GET_STATS epoch %llu, sysfs %llu; module's epoch %llu",
	      (unsigned long long)info.epoch, (unsigned long long)st.epoch,
	      (unsigned long long)sysfs_or_max("epoch"), (unsigned long long)epoch);
}

static void check_rmmod_refused(void)
{
	long ret = syscall(SYS_delete_module, MODULE_NAME, O_NONBLOCK);

	CHECK("rmmod_refused_while_open", ret == -1 &&
	      (errno == EWOULDBLOCK || errno == EBUSY), "%s",
	      ret ? strerror(errno) : "module was unloaded");
}

static int pci_address(char *buf, size_t len)
{
	char link[PATH_MAX + 16], target[PATH_MAX];
	ssize_t n;
	char *base;

	snprintf(link, sizeof(link), "%s/device", sys_path);
	n = readlink(link, target, sizeof(target) - 1);
	if (n < 0)
		return -errno;
	target[n] = 0;
	base = strrchr(target, '/');
	base = base ? base + 1 : target;
	if (strlen(base) >= len)
		return -ENAMETOOLONG;
	memcpy(buf, base, strlen(base) + 1);
	return 0;
}

/* The interrupt is named after the device, so two controllers differ. */
static void check_irq_name(const struct opts *o)
{
	static char text[1 << 16];
	char addr[64], want[96];

	if (!o->irq) {
		skip("irq_name_per_device", "no device interrupts expected");
		return;
	}
	if (pci_address(addr, sizeof(addr)) || read_file("/proc/interrupts", text, sizeof(text)) < 0) {
		fail("irq_name_per_device", "no PCI address or /proc/interrupts");
		return;
	}
	snprintf(want, sizeof(want), "nvme-hmb-trace@%s", addr);
	CHECK("irq_name_per_device", strstr(text, want) != NULL, "no %s in /proc/interrupts",
	      want);
}

/* <debugfs>/nvme-hmb-trace/<pci>/state dumps the advert, device block and header. */
static void check_debugfs(const struct hmb_trace_info *info)
{
	static char text[8192];
	char addr[64], path[256], want[64];

	mkdir("/sys/kernel/debug", 0700);
	mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL);	/* EBUSY if already */
	if (pci_address(addr, sizeof(addr))) {
		fail("debugfs_state", "no PCI address");
		return;
	}
	snprintf(path, sizeof(path), "/sys/kernel/debug/nvme-hmb-trace/%s/state", addr);
	if (read_file(path, text, sizeof(text)) < 0) {
		fail("debugfs_state", "%s: %s", path, strerror(errno));
		return;
	}
	snprintf(want, sizeof(want), "ring.ring_size %llu\n", (unsigned long long)info->ring_size);
	CHECK("debugfs_state", strstr(text, "device.magic 0x44424d48\n") &&
	      strstr(text, "advert.state 1\n") && strstr(text, want),
	      "%s says:\n%s", path, text);
}

#define TRACEFS "/sys/kernel/tracing"

#define TRACE_ENABLE TRACEFS "/events/nvme_hmb_trace/enable"

/* Whether trace_enable() turned the tracepoints on (and so turns them off). */
static int trace_enabled_here;

/*
 * Turn the module's tracepoints on (tracefs mounted if need be), unless
 * they already are. Turning them on patches each tracepoint's static key;
 * a harness that runs this program with the device producing turns them on
 * before the device starts (harness/guest-scripts/ivshmem-prelude.sh,
 * module_events_on), so no patching races the interrupt handler.
 */
static int trace_enable(void)
{
	char state[8] = "";

	mkdir(TRACEFS, 0700);
	mount("tracefs", TRACEFS, "tracefs", 0, NULL);	/* EBUSY if already */
	write_file(TRACEFS "/trace", "");
	if (read_file(TRACE_ENABLE, state, sizeof(state)) > 0 && state[0] == '1')
		return 0;
	trace_enabled_here = 1;
	return write_file(TRACE_ENABLE, "1");
}

static void check_trace(int enabled, const struct opts *o)
{
	static char text[1 << 20];
	int irq_ok, pub_ok, reinit_ok;

	if (enabled) {
		fail("tracepoints", "%s: %s", TRACE_ENABLE, strerror(-enabled));
		return;
	}
	if (read_file(TRACEFS "/trace", text, sizeof(text)) < 0) {
		fail("tracepoints", "reading %s/trace: %s", TRACEFS, strerror(errno));
		return;
	}
	if (trace_enabled_here)
		write_file(TRACE_ENABLE, "0");
	irq_ok = !o->irq || strstr(text, "hmb_trace_irq:");
	pub_ok = strstr(text, "hmb_trace_publish_tail:") != NULL;
	reinit_ok = !o->freeze || strstr(text, "hmb_trace_reinit:");
	CHECK("tracepoints", irq_ok && pub_ok && reinit_ok,
	      "irq %d publish_tail %d reinit %d in the trace", irq_ok, pub_ok, reinit_ok);
}

/*
 * A forked child reads the whole mapping in a loop while the device goes
 * away: its inherited mapping must be zapped too, so it dies of SIGBUS
 * instead of reading memory that no longer belongs to the ring.
 */
static pid_t start_reader(const uint8_t *map, size_t len)
{
	pid_t pid = fork();

	if (pid == 0) {
		volatile uint64_t sum = 0;

		signal(SIGBUS, SIG_DFL);
		for (;;)
			for (size_t off = 0; off < len; off += 4096)
				sum += map[off];
	}
	return pid;
}

static void check_reader_died(pid_t pid)
{
	int status = 0;
	pid_t r = 0;

	if (pid < 0) {
		fail("reader_sigbus_after_removal", "fork: %s", strerror(errno));
		return;
	}
	for (int i = 0; i < 100 && r == 0; i++) {
		r = waitpid(pid, &status, WNOHANG);
		if (r == 0)
			usleep(50000);
	}
	if (r == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		fail("reader_sigbus_after_removal", "the reader still runs 5 s after removal");
		return;
	}
	CHECK("reader_sigbus_after_removal", WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS,
	      "reader ended with status %#x", status);
}

/*
 * After a rebind the ring is a fresh epoch: no store of the old epoch may
 * land in it. Records from 0 must be well formed with seq from 0, and
 * stay so while the device produces.
 */
static void check_rebind_ring(int fd, const struct hmb_trace_info *info, const struct opts *o)
{
	const struct hmb_ring_hdr *h;
	char why[96] = "";
	uint8_t *map;
	uint64_t head;
	long n = 0;

	map = hmbtrace_map_ring(fd, info);
	if (map == MAP_FAILED) {
		fail("rebind_ring_clean", "mmap: %s", strerror(errno));
		return;
	}
	h = (const void *)map;
	/* Give late stores of the old epoch (if any get through) time to land. */
	for (int i = 0; i < 30; i++) {
		head = ld_acq64(&h->head);
		n = walk_records(map, 0, head, why, sizeof(why));
		if (n < 0)
			break;
		usleep(100000);
	}
	head = ld_acq64(&h->head);
	if (n >= 0)
		n = walk_records(map, 0, head, why, sizeof(why));
	if (n >= 0 && head > 0 && head <= info->ring_size &&
	    ((const struct hmb_record_hdr *)(map + HMB_RING_HDR_SIZE))->seq != 0) {
		n = -1;
		snprintf(why, sizeof(why), "first record has seq %llu",
			 (unsigned long long)((const struct hmb_record_hdr *)(map + HMB_RING_HDR_SIZE))->seq);
	}
	CHECK("rebind_ring_clean", n >= 0 && h->epoch == info->epoch &&
	      (!o->producer || head > 0),
	      "%s; epoch %llu (GET_INFO %llu) head %llu next_seq %llu", n < 0 ? why : "records ok",
	      (unsigned long long)h->epoch, (unsigned long long)info->epoch,
	      (unsigned long long)head, (unsigned long long)h->next_seq);
	munmap(map, info->mmap_len);
}

/* Remove the PCI device while open and mapped; after an unbind, rebind it. */
static void check_removal(int fd, uint8_t *map, const struct hmb_trace_info *info,
			 const struct opts *o)
{
	/* No events asked for: only POLLHUP/POLLERR (always reported) end the wait. */
	struct pollfd pfd = { .fd = fd, .events = 0 };
	struct hmb_trace_info info2;
	char addr[64];
	struct stat st;
	pid_t reader;
	int ret, fd2;

	if (o->remove == REMOVE_NONE) {
		skip("remove_while_mapped", "--remove none");
		return;
	}
	ret = pci_address(addr, sizeof(addr));
	if (ret) {
		fail("remove_while_mapped", "PCI address: %s", strerror(-ret));
		return;
	}
	/*
	 * The device will go on writing the old ring for a while after the
	 * withdrawal (in-flight DMA): the rebind below must wait for it.
	 */
	if (o->late_stop && o->remove == REMOVE_UNBIND) {
		printf("REQUEST late_stop\n");
		fflush(stdout);
		usleep(500000);
	}
	/* Touch the first page so the zap has something to remove. */
	(void)read_faults(map);
	reader = start_reader(map, info->mmap_len);
	usleep(200000);		/* let it fault every page in */
	if (o->remove == REMOVE_UNBIND) {
		ret = write_file(DRIVER_DIR "/unbind", addr);
		if (ret) {
			fail("remove_while_mapped", "unbind %s: %s", addr, strerror(-ret));
			if (reader > 0) {
				kill(reader, SIGKILL);
				waitpid(reader, NULL, 0);
			}
			return;
		}
	} else {
		/* Hot-unplug by the host (QMP device_del); the guest sees it via ACPI. */
		printf("REQUEST device_del\n");
		fflush(stdout);
	}
	ret = poll(&pfd, 1, o->wait_s * 1000);
	CHECK("remove_while_mapped", ret == 1, "no poll event within %d s of the removal",
	      o->wait_s);
	CHECK("pollhup_after_removal", ret == 1 &&
	      (pfd.revents & (POLLHUP | POLLERR)) == (POLLHUP | POLLERR),
	      "poll %d revents %#x", ret, pfd.revents);
	ret = get_info(fd, &info2);
	CHECK("enodev_after_removal", ret == -1 && errno == ENODEV, "%s",
	      ret ? strerror(errno) : "GET_INFO succeeded");
	CHECK("mapping_zapped", read_faults(map) &&
	      read_faults(map + info->mmap_len - 1),
	      "the ring was still readable after removal");
	CHECK("node_removed", stat(node_path, &st) && errno == ENOENT,
	      "%s still exists", node_path);
	check_reader_died(reader);
	munmap(map, info->mmap_len);
	close(fd);
	if (o->remove != REMOVE_UNBIND)
		return;	/* the device is gone from the machine: nothing to rebind */

	ret = write_file(DRIVER_DIR "/bind", addr);
	if (ret) {
		fail("rebind", "bind %s: %s", addr, strerror(-ret));
		return;
	}
	fd2 = -1;
	for (int i = 0; i < 50 && fd2 < 0; i++) {
		fd2 = open_dev(O_RDONLY);
		if (fd2 < 0)
			usleep(100000);
	}
	if (fd2 < 0) {
		fail("rebind", "open after bind: %s", strerror(errno));
		return;
	}
	ret = get_info(fd2, &info2);
	CHECK("rebind", ret == 0 && info2.epoch > info->epoch,
	      "GET_INFO %s, epoch %llu (before unbind %llu)",
	      ret ? strerror(errno) : "ok", (unsigned long long)info2.epoch,
	      (unsigned long long)info->epoch);
	if (!ret)
		check_rebind_ring(fd2, &info2, o);
	close(fd2);
}

/*
 * What the NVMe driver logs when the slice's memory outlives the HMB (a
 * reader still maps it) and when it is freed after all (pci-hmb-trace.c).
 */
#define MEM_KEPT	"trace slice memory kept until its last user mapping is gone"
#define MEM_FREED	"trace slice memory freed after its last user mapping"

/* Occurrences of @what in the kernel log, -1 if it cannot be read. */
static int klog_count(const char *what)
{
	int size = klogctl(10, NULL, 0);	/* SYSLOG_ACTION_SIZE_BUFFER */
	int n, count = 0;
	const char *p;
	char *buf;

	if (size <= 0)
		return -1;
	buf = malloc((size_t)size + 1);
	if (!buf)
		return -1;
	n = klogctl(3, buf, size);		/* SYSLOG_ACTION_READ_ALL */
	if (n < 0) {
		free(buf);
		return -1;
	}
	buf[n] = 0;
	for (p = buf; (p = strstr(p, what)); p++)
		count++;
	free(buf);
	return count;
}

/* Every page of the view, and its last byte, read without a fault. */
static int all_pages_read(const uint8_t *map, const struct hmb_trace_info *info)
{
	for (uint64_t off = 0; off < info->mmap_len; off += 4096)
		if (read_faults(map + off))
			return 0;
	return !read_faults(map + info->mmap_len - 1);
}

/*
 * --chunks: the chunk mapping rules (check_chunk_rules()), every page of
 * the view readable, and with --remove unbind the reader's mapping of a
 * DMA slice (nvme) across the removal of the device's PCI function from
 * its driver: POLLHUP, every page still readable with the last contents (a
 * forked reader goes on reading), the DMA memory kept while the mapping and
 * the file exist and freed after the last of them (the driver's log
 * lines), then the function bound again.
 */
static int run_chunks(const struct opts *o)
{
	struct pollfd pfd = { .events = 0 };
	char addr[64], target[PATH_MAX], link[PATH_MAX + 16], path[PATH_MAX + 64];
	struct hmb_trace_info info, info2;
	int fd, fd2, ret, faulted = 0, kept0, freed0, kept1, freed1;
	const char *drv;
	uint8_t *map;
	pid_t reader;
	ssize_t n;

	fd = open_dev(O_RDONLY);
	if (fd < 0 || get_info(fd, &info)) {
		fail("get_info", "%s: %s", node_path, strerror(errno));
		return 1;
	}
	check_info(&info);
	map = check_chunk_rules(fd, &info);
	if (map == MAP_FAILED) {
		close(fd);
		return 1;
	}
	for (uint64_t off = 0; off < info.mmap_len; off += 4096)
		faulted |= read_faults(map + off);
	CHECK("chunks_readable", !faulted, "a page of the mapped view raised SIGBUS");
	if (o->remove != REMOVE_UNBIND) {
		munmap(map, info.mmap_len);
		close(fd);
		return 0;
	}

	snprintf(link, sizeof(link), "%s/device/driver", sys_path);
	n = readlink(link, target, sizeof(target) - 1);
	ret = pci_address(addr, sizeof(addr));
	if (n < 0 || ret) {
		fail("remove_while_mapped", "PCI function or its driver: %s",
		     strerror(n < 0 ? errno : -ret));
		return 1;
	}
	target[n] = 0;
	drv = strrchr(target, '/') ? strrchr(target, '/') + 1 : target;
	kept0 = klog_count(MEM_KEPT);
	freed0 = klog_count(MEM_FREED);
	reader = start_reader(map, info.mmap_len);
	usleep(200000);		/* let it fault every page in */
	snprintf(path, sizeof(path), "/sys/bus/pci/drivers/%s/unbind", drv);
	ret = write_file(path, addr);
	if (ret) {
		fail("remove_while_mapped", "unbind %s from %s: %s", addr, drv, strerror(-ret));
		kill(reader, SIGKILL);
		waitpid(reader, NULL, 0);
		return 1;
	}
	pfd.fd = fd;
	ret = poll(&pfd, 1, o->wait_s * 1000);
	CHECK("pollhup_after_removal", ret == 1 &&
	      (pfd.revents & (POLLHUP | POLLERR)) == (POLLHUP | POLLERR),
	      "poll %d revents %#x", ret, pfd.revents);
	CHECK("mapping_kept_after_removal", all_pages_read(map, &info) &&
	      ((const struct hmb_ring_hdr *)(const void *)map)->magic == HMB_RING_MAGIC,
	      "a page of the view faulted, or the header lost its magic, after removal");
	ret = waitpid(reader, NULL, WNOHANG);
	CHECK("reader_alive_after_removal", ret == 0, "the forked reader ended (%d)", ret);
	kill(reader, SIGKILL);
	waitpid(reader, NULL, 0);
	kept1 = klog_count(MEM_KEPT);
	freed1 = klog_count(MEM_FREED);
	CHECK("mem_kept_while_mapped", kept0 >= 0 && kept1 == kept0 + 1 && freed1 == freed0,
	      "kernel log: '%s' %d -> %d, '%s' %d -> %d", MEM_KEPT, kept0, kept1,
	      MEM_FREED, freed0, freed1);
	munmap(map, info.mmap_len);
	close(fd);
	freed1 = klog_count(MEM_FREED);
	CHECK("mem_freed_after_last_mapping", freed1 == freed0 + 1,
	      "kernel log: '%s' %d -> %d after munmap and close", MEM_FREED, freed0, freed1);

	snprintf(path, sizeof(path), "/sys/bus/pci/drivers/%s/bind", drv);
	ret = write_file(path, addr);
	if (ret) {
		fail("rebind", "bind %s to %s: %s", addr, drv, strerror(-ret));
		return 1;
	}
	fd2 = -1;
	for (int i = 0; i < o->wait_s * 10 && fd2 < 0; i++) {
		fd2 = open_dev(O_RDONLY);
		if (fd2 < 0)
			usleep(100000);
	}
	ret = fd2 < 0 ? -1 : get_info(fd2, &info2);
	CHECK("rebind", ret == 0 && info2.nr_chunks == info.nr_chunks,
	      "%s after bind: %s", node_path, ret ? strerror(errno) : "chunk count changed");
	if (fd2 >= 0)
		close(fd2);
	return 0;
}

struct reader {
	int fd;
	volatile int stop;
	uint64_t max_us, reads;
};

/* Another thread polls and reads sysfs while REINIT runs: neither may wait long. */
static void *latency_reader(void *arg)
{
	struct reader *r = arg;
	struct pollfd pfd = { .fd = r->fd, .events = POLLIN | POLLPRI };
	uint64_t v;

	while (!r->stop) {
		uint64_t t0 = now_us(), dt;

		read_sysfs_u64("head", &v);
		poll(&pfd, 1, 0);
		dt = now_us() - t0;
		if (dt > r->max_us)
			r->max_us = dt;
		r->reads++;
	}
	return NULL;
}

/* Largest lock hold a REINIT may cause, in microseconds. */
#define REINIT_MAX_HOLD_US 250000

/*
 * REINIT on a large ring (the scenario loads ring_size=1 GiB): the lock is
 * held for the header rewrite only, never for the size of the data area.
 */
static int run_big_reinit(const struct opts *o)
{
	struct hmb_trace_info info;
	struct reader r = { .fd = -1 };
	uint64_t epoch = 0, t0, reinit_us;
	pthread_t thread;
	uint8_t *map;
	int ret;

	r.fd = open_dev(O_RDONLY);
	if (r.fd < 0 || get_info(r.fd, &info)) {
		fail("big_reinit", "open/GET_INFO: %s", strerror(errno));
		return 1;
	}
	map = hmbtrace_map_ring(r.fd, &info);
	if (map == MAP_FAILED) {
		fail("big_reinit", "mmap: %s", strerror(errno));
		return 1;
	}
	printf("info ring_size %llu\n", (unsigned long long)info.ring_size);
	if (!request_freeze(r.fd, map, o, "big_freeze"))
		return 1;
	pthread_create(&thread, NULL, latency_reader, &r);
	usleep(200000);
	t0 = now_us();
	ret = ioctl(r.fd, HMB_TRACE_IOC_REINIT, &epoch);
	reinit_us = now_us() - t0;
	usleep(200000);
	r.stop = 1;
	pthread_join(thread, NULL);
	printf("info REINIT took %llu us; longest sysfs read + poll meanwhile %llu us (%llu reads)\n",
	       (unsigned long long)reinit_us, (unsigned long long)r.max_us,
	       (unsigned long long)r.reads);
	CHECK("big_reinit", ret == 0 && epoch == info.epoch + 1, "REINIT %d (%s) epoch %llu",
	      ret, ret ? strerror(errno) : "-", (unsigned long long)epoch);
	CHECK("reinit_lock_hold", reinit_us < REINIT_MAX_HOLD_US && r.max_us < REINIT_MAX_HOLD_US,
	      "REINIT %llu us, a reader waited %llu us (limit %u us)",
	      (unsigned long long)reinit_us, (unsigned long long)r.max_us, REINIT_MAX_HOLD_US);
	munmap(map, info.mmap_len);
	close(r.fd);
	return 0;
}

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s [--dev NAME] [--mode OCTAL] [--gid GID] [--wait SECONDS] [--no-producer]\n"
		"          [--freeze] [--irq] [--hostile] [--late-stop] [--remove unbind|device-del|none]\n"
		"       %s --fuzz CALLS [--seed N] [--wait SECONDS]\n"
		"       %s --big-reinit\n"
		"       %s --wake-latency ROUNDS --block /dev/nvme0n1\n"
		"       %s --chunks [--remove unbind|none] [--wait SECONDS]\n"
		"Checks /dev/NAME (default nvme-hmb-trace0) of nvme-hmb-trace.ko.\n", argv0, argv0,
		argv0, argv0, argv0);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "dev", required_argument, NULL, 'd' },
		{ "mode", required_argument, NULL, 'm' },
		{ "gid", required_argument, NULL, 'g' },
		{ "wait", required_argument, NULL, 'w' },
		{ "no-producer", no_argument, NULL, 'P' },
		{ "freeze", no_argument, NULL, 'f' },
		{ "irq", no_argument, NULL, 'i' },
		{ "remove", required_argument, NULL, 'r' },
		{ "hostile", no_argument, NULL, 'H' },
		{ "late-stop", no_argument, NULL, 'L' },
		{ "fuzz", required_argument, NULL, 'z' },
		{ "seed", required_argument, NULL, 's' },
		{ "big-reinit", no_argument, NULL, 'B' },
		{ "wake-latency", required_argument, NULL, 'W' },
		{ "block", required_argument, NULL, 'b' },
		{ "chunks", no_argument, NULL, 'C' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { .name = "nvme-hmb-trace0", .mode = 0440, .gid = -1, .wait_s = 20,
			  .producer = 1, .remove = REMOVE_UNBIND };
	struct hmb_trace_info info;
	struct sigaction sa;
	uint8_t *map;
	char *end;
	int c, fd, tracing;

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			o.name = optarg;
			break;
		case 'm':
			o.mode = strtoul(optarg, &end, 8);
			if (*end || end == optarg) {
				usage(argv[0]);
				return 2;
			}
			break;
		case 'g':
			o.gid = strtol(optarg, &end, 10);
			if (*end || end == optarg || o.gid < 0) {
				usage(argv[0]);
				return 2;
			}
			break;
		case 'w':
			o.wait_s = atoi(optarg);
			if (o.wait_s <= 0) {
				usage(argv[0]);
				return 2;
			}
			break;
		case 'P':
			o.producer = 0;
			break;
		case 'f':
			o.freeze = 1;
			break;
		case 'i':
			o.irq = 1;
			break;
		case 'r':
			if (!strcmp(optarg, "unbind")) {
				o.remove = REMOVE_UNBIND;
			} else if (!strcmp(optarg, "device-del")) {
				o.remove = REMOVE_DEVICE_DEL;
			} else if (!strcmp(optarg, "none")) {
				o.remove = REMOVE_NONE;
			} else {
				usage(argv[0]);
				return 2;
			}
			break;
		case 'H':
			o.hostile = 1;
			break;
		case 'L':
			o.late_stop = 1;
			break;
		case 'z':
			o.fuzz = strtol(optarg, &end, 10);
			if (*end || end == optarg || o.fuzz <= 0) {
				usage(argv[0]);
				return 2;
			}
			break;
		case 's':
			o.seed = strtoul(optarg, &end, 10);
			if (*end || end == optarg) {
				usage(argv[0]);
				return 2;
			}
			break;
		case 'B':
			o.big_reinit = 1;
			break;
		case 'W':
			o.wake_rounds = strtol(optarg, &end, 10);
			if (*end || end == optarg || o.wake_rounds <= 0) {
				usage(argv[0]);
				return 2;
			}
			break;
		case 'b':
			o.block = optarg;
			break;
		case 'C':
			o.chunks = 1;
			break;
		case 'h':
			usage(argv[0]);
			return 0;
		default:
			usage(argv[0]);
			return 2;
		}
	}
	if (optind != argc || strchr(o.name, '/')) {
		usage(argv[0]);
		return 2;
	}
	snprintf(node_path, sizeof(node_path), "/dev/%s", o.name);
	snprintf(sys_path, sizeof(sys_path), CLASS_DIR "/%s", o.name);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigbus;
	sigaction(SIGBUS, &sa, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (o.fuzz) {
		long bad = hmbtrace_fuzz(node_path, o.fuzz, o.seed, o.wait_s * 30);

		CHECK("fuzz", bad == 0, "%ld access-rule violations (see info lines)", bad);
		goto out;
	}
	if (o.big_reinit) {
		run_big_reinit(&o);
		goto out;
	}
	if (o.chunks) {
		run_chunks(&o);
		goto out;
	}
	if (o.wake_rounds) {
		if (!o.block) {
			usage(argv[0]);
			return 2;
		}
		hmbtrace_wake_latency(node_path, o.block, o.wake_rounds);
		goto out;
	}
	check_node(&o);
	fd = open_dev(O_RDONLY);
	if (fd < 0) {
		fail("open", "%s: %s", node_path, strerror(errno));
		goto out;
	}
	ok("open");
	if (get_info(fd, &info)) {
		fail("get_info", "%s", strerror(errno));
		goto out;
	}
	ok("get_info");
	check_info(&info);
	check_sysfs(&info);
	/* O_RDWR needs the only open slot: check it before the main mapping. */
	close(fd);
	check_rdwr_write_mapping(&info);
	fd = open_dev(O_RDONLY);
	if (fd < 0) {
		fail("reopen", "%s", strerror(errno));
		goto out;
	}
	check_second_open();
	check_mmap_refusals(fd, &info);
	map = check_chunk_rules(fd, &info);
	if (map == MAP_FAILED) {
		fail("mmap_readonly", "%s", strerror(errno));
		goto out;
	}
	ok("mmap_readonly");
	check_header(map, &info);
	check_mprotect(fd, map, info.mmap_len);
	check_bad_tails(fd, map);
	check_stats(fd, map);
	check_reinit_refused(fd, map);
	tracing = trace_enable();
	check_poll_wakes(fd, map, &o);
	check_pri_wait_sleeps(fd, map);
	check_shadow_state(fd, map, &o);
	check_irq_name(&o);
	check_debugfs(&info);
	check_freeze(fd, map, &o);
	check_trace(tracing, &o);
	check_rmmod_refused();
	check_removal(fd, map, &info, &o);
out:
	printf("summary: %d ok, %d failed, %d skipped\n", n_ok, n_fail, n_skip);
	return n_fail ? 1 : 0;
}
