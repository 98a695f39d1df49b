// SPDX-License-Identifier: GPL-2.0
/*
 * hmbtrace-fuzz.c - in-guest syscall fuzzer for /dev/nvme-hmb-traceN.
 *
 * Random sequences of the calls a consumer (or an attacker holding the
 * node) can make, with random lengths, offsets, protections, ioctl numbers
 * and arguments. It is also an oracle: a call that succeeds where the
 * access rules say it must fail (a writable or executable mapping, a
 * mapping of the wrong size, an unknown ioctl that does not get ENOTTY, a
 * tail that goes backwards) is a violation. The kernel log is checked by
 * the harness afterwards.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <linux/nvme_hmb_trace.h>

#include "hmbtrace-test.h"

#define MAX_MAPS	8
#define MAX_FDS		4
#define MAX_CHUNKS	64	/* chunks remembered for the mapping rule */

struct fuzz {
	const char *node;
	uint64_t rng;
	int fds[MAX_FDS];
	struct { uint8_t *p; size_t len; } maps[MAX_MAPS];
	uint64_t mmap_len;	/* from GET_INFO, 0 until known */
	/* the chunk table (GET_CHUNK), nr_chunks 0 until known */
	struct hmb_trace_chunk chunks[MAX_CHUNKS];
	unsigned int nr_chunks;
	uint64_t last_tail;	/* newest tail the module accepted */
	long violations;
	long calls;
	long ok_calls;
};

static sigjmp_buf fuzz_jmp;
static volatile sig_atomic_t fuzz_armed;

static void fuzz_sigbus(int sig)
{
	(void)sig;
	if (fuzz_armed)
		siglongjmp(fuzz_jmp, 1);
	_exit(3);
}

static uint64_t rnd(struct fuzz *f)
{
	/* xorshift64*: reproducible from --seed. */
	f->rng ^= f->rng >> 12;
	f->rng ^= f->rng << 25;
	f->rng ^= f->rng >> 27;
	return f->rng * 0x2545F4914F6CDD1DULL;
}

static uint64_t pick(struct fuzz *f, uint64_t n)
{
	return n ? rnd(f) % n : 0;
}

static void violation(struct fuzz *f, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void violation(struct fuzz *f, const char *fmt, ...)
{
	va_list ap;

	if (f->violations++ < 20) {
		printf("info fuzz violation: ");
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		printf("\n");
	}
}

static int any_fd(struct fuzz *f)
{
	int i = pick(f, MAX_FDS);

	return f->fds[i];
}

static void do_open(struct fuzz *f)
{
	static const int modes[] = { O_RDONLY, O_RDWR, O_WRONLY, O_RDONLY | O_NONBLOCK };
	int held = 0, i, fd;

	/* A mapping holds its file open, so it blocks a new open too. */
	for (i = 0; i < MAX_FDS; i++)
		held += f->fds[i] >= 0;
	for (i = 0; i < MAX_MAPS; i++)
		held += f->maps[i].p != NULL;
	i = pick(f, MAX_FDS);
	if (f->fds[i] >= 0)
		return;
	fd = open(f->node, modes[pick(f, 4)] | O_CLOEXEC);
	if (fd >= 0) {
		f->ok_calls++;
		if (held)
			violation(f, "open succeeded while the device was held (%d files/mappings)",
				  held);
		f->fds[i] = fd;
	} else if (errno != EBUSY || !held) {
		violation(f, "open with %d files/mappings held: %s", held, strerror(errno));
	}
}

static void do_close(struct fuzz *f)
{
	int i = pick(f, MAX_FDS);

	if (f->fds[i] < 0)
		return;
	close(f->fds[i]);
	f->fds[i] = -1;
}

static void do_get_info(struct fuzz *f, int fd)
{
	struct hmb_trace_info info;
	unsigned int i;

	if (fd < 0 || ioctl(fd, HMB_TRACE_IOC_GET_INFO, &info))
		return;
	f->mmap_len = info.mmap_len;
	if (info.nr_chunks > MAX_CHUNKS)
		return;	/* the mapping rule is then not checked */
	for (i = 0; i < info.nr_chunks; i++) {
		f->chunks[i] = (struct hmb_trace_chunk){ .index = i };
		if (ioctl(fd, HMB_TRACE_IOC_GET_CHUNK, &f->chunks[i]))
			return;
	}
	f->nr_chunks = info.nr_chunks;
}

/* Whether [off, off + len) is exactly one chunk, the only mapping allowed. */
static int is_chunk(const struct fuzz *f, off_t off, size_t len)
{
	for (unsigned int i = 0; i < f->nr_chunks; i++)
		if ((uint64_t)off == f->chunks[i].offset && len == f->chunks[i].len)
			return 1;
	return 0;
}

static size_t fuzz_len(struct fuzz *f)
{
	uint64_t ml = f->mmap_len ? f->mmap_len : 4096;

	switch (pick(f, 7)) {
	case 0:
		return 0;
	case 1:
		return 1;
	case 2:
		return 4096;
	case 3:
		return ml - 4096;
	case 4:
		return ml + 4096;
	case 5:
		return pick(f, 1ULL << 32);
	default:
		return ml;
	}
}

static off_t fuzz_off(struct fuzz *f)
{
	switch (pick(f, 5)) {
	case 0:
		return 4096;
	case 1:
		return (off_t)(pick(f, 1ULL << 20) * 4096);
	case 2:
		return (off_t)((uint64_t)1 << 62);
	default:
		return 0;
	}
}

static void do_mmap(struct fuzz *f)
{
	int fd = any_fd(f), prot = 0, flags, slot;
	size_t len = fuzz_len(f);
	off_t off = fuzz_off(f);
	void *p;

	/* Often exactly a chunk, or a chunk's offset with another length. */
	if (f->nr_chunks && pick(f, 2)) {
		const struct hmb_trace_chunk *c = &f->chunks[pick(f, f->nr_chunks)];

		off = (off_t)c->offset;
		if (pick(f, 2))
			len = c->len;
	}

	if (pick(f, 4))
		prot |= PROT_READ;
	if (!pick(f, 4))
		prot |= PROT_WRITE;
	if (!pick(f, 4))
		prot |= PROT_EXEC;
	flags = pick(f, 3) ? MAP_SHARED : MAP_PRIVATE;
	if (!pick(f, 8))
		flags |= MAP_POPULATE;
	for (slot = 0; slot < MAX_MAPS && f->maps[slot].p; slot++)
		;
	if (slot == MAX_MAPS || fd < 0)
		return;
	p = mmap(NULL, len, prot, flags, fd, off);
	if (p == MAP_FAILED)
		return;
	f->ok_calls++;
	if ((prot & (PROT_WRITE | PROT_EXEC)) ||
	    (f->nr_chunks && !is_chunk(f, off, len)))
		violation(f, "mmap len %zu off %lld prot %#x flags %#x succeeded",
			  len, (long long)off, prot, flags);
	f->maps[slot].p = p;
	f->maps[slot].len = len;
}

static void do_munmap(struct fuzz *f)
{
	int i = pick(f, MAX_MAPS);

	if (!f->maps[i].p)
		return;
	munmap(f->maps[i].p, f->maps[i].len);
	f->maps[i].p = NULL;
}

static void do_mprotect(struct fuzz *f)
{
	int i = pick(f, MAX_MAPS), prot = (int)pick(f, 8);

	if (!f->maps[i].p)
		return;
	if (!mprotect(f->maps[i].p, f->maps[i].len, prot)) {
		f->ok_calls++;
		if (prot & (PROT_WRITE | PROT_EXEC))
			violation(f, "mprotect to %#x succeeded", prot);
	}
}

static void do_madvise(struct fuzz *f)
{
	static const int advice[] = { MADV_DONTNEED, MADV_WILLNEED, MADV_NORMAL,
				      MADV_RANDOM, MADV_DONTFORK, MADV_DOFORK };
	int i = pick(f, MAX_MAPS);

	if (f->maps[i].p && !madvise(f->maps[i].p, f->maps[i].len, advice[pick(f, 6)]))
		f->ok_calls++;
}

/* Read a random byte of a mapping (a fault on first touch). */
static void do_touch(struct fuzz *f)
{
	int i = pick(f, MAX_MAPS);
	volatile uint8_t sink;

	if (!f->maps[i].p)
		return;
	if (sigsetjmp(fuzz_jmp, 1)) {
		fuzz_armed = 0;
		return;	/* SIGBUS/SIGSEGV after mprotect(PROT_NONE) is fine */
	}
	fuzz_armed = 1;
	sink = f->maps[i].p[pick(f, f->maps[i].len)];
	(void)sink;
	fuzz_armed = 0;
}

/* Generic VFS ioctls are left alone: FIFREEZE would freeze devtmpfs. */
static int vfs_type(unsigned int type)
{
	return type == 0x00 || type == 'T' || type == 'X' || type == 'f' ||
	       type == 0x94 || type == 0x15 || type == 'v';
}

static void *fuzz_arg(struct fuzz *f, void *buf)
{
	switch (pick(f, 6)) {
	case 0:
		return NULL;
	case 1:
		return (void *)(uintptr_t)pick(f, 1ULL << 47);
	case 2:
		return (void *)0xffffffff81000000ULL;	/* kernel text */
	case 3:
		return (uint8_t *)buf + pick(f, 64);	/* misaligned, short */
	default:
		return buf;
	}
}

static void do_ioctl(struct fuzz *f)
{
	static const unsigned int ours[] = {
		HMB_TRACE_IOC_GET_INFO, HMB_TRACE_IOC_PUBLISH_TAIL,
		HMB_TRACE_IOC_REINIT, HMB_TRACE_IOC_GET_STATS,
		HMB_TRACE_IOC_GET_CHUNK,
	};
	uint64_t buf[32];
	unsigned int cmd;
	int fd = any_fd(f), ret, known = 0;
	void *arg;

	if (fd < 0)
		return;
	for (unsigned int i = 0; i < 32; i++)
		buf[i] = rnd(f);
	switch (pick(f, 4)) {
	case 0:
	case 1:
		cmd = ours[pick(f, 5)];
		break;
	case 2:	/* our type byte, anything else random */
		cmd = _IOC(pick(f, 4), HMB_TRACE_IOC_MAGIC, pick(f, 256), pick(f, 1 << 14));
		break;
	default:
		do {
			cmd = (unsigned int)rnd(f);
		} while (vfs_type(_IOC_TYPE(cmd)));
		break;
	}
	for (unsigned int i = 0; i < 5; i++)
		known |= cmd == ours[i];
	arg = fuzz_arg(f, buf);
	if (cmd == HMB_TRACE_IOC_PUBLISH_TAIL && pick(f, 2)) {
		struct hmb_trace_stats st;

		/* Sometimes a plausible tail: the current head. */
		if (!ioctl(fd, HMB_TRACE_IOC_GET_STATS, &st))
			buf[0] = st.head;
	}
	ret = ioctl(fd, cmd, arg);
	if (!ret) {
		f->ok_calls++;
		if (!known)
			violation(f, "unknown ioctl %#x succeeded", cmd);
		if (cmd == HMB_TRACE_IOC_PUBLISH_TAIL && arg == buf) {
			if (buf[0] < f->last_tail || buf[0] % 8)
				violation(f, "tail %llu accepted after %llu",
					  (unsigned long long)buf[0],
					  (unsigned long long)f->last_tail);
			f->last_tail = buf[0];
		}
		if (cmd == HMB_TRACE_IOC_REINIT) {
			f->last_tail = 0;
			printf("info fuzz: REINIT accepted (ring was FROZEN)\n");
		}
	} else if (!known && errno != ENOTTY) {
		violation(f, "unknown ioctl %#x: %s, expected ENOTTY", cmd, strerror(errno));
	}
}

static void do_poll(struct fuzz *f)
{
	struct pollfd pfd = { .fd = any_fd(f), .events = (short)pick(f, 0x10000) };

	if (pfd.fd >= 0 && poll(&pfd, 1, 0) >= 0)
		f->ok_calls++;
}

static void do_rw(struct fuzz *f)
{
	char buf[64];
	int fd = any_fd(f);

	if (fd < 0)
		return;
	switch (pick(f, 3)) {
	case 0:
		if (read(fd, buf, sizeof(buf)) >= 0)
			violation(f, "read succeeded");
		break;
	case 1:
		if (write(fd, buf, sizeof(buf)) >= 0)
			violation(f, "write succeeded");
		break;
	default:
		lseek(fd, (off_t)pick(f, 1ULL << 40), SEEK_SET);
		break;
	}
}

long hmbtrace_fuzz(const char *node, long calls, unsigned int seed, int seconds)
{
	struct fuzz f = { .node = node, .rng = seed * 0x9E3779B97F4A7C15ULL + 1 };
	struct sigaction sa, old_bus, old_segv;
	time_t end = time(NULL) + seconds;
	long i;

	for (i = 0; i < MAX_FDS; i++)
		f.fds[i] = -1;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fuzz_sigbus;
	sigaction(SIGBUS, &sa, &old_bus);
	sigaction(SIGSEGV, &sa, &old_segv);
	for (i = 0; i < calls && time(NULL) < end; i++) {
		switch (pick(&f, 12)) {
		case 0:
			do_open(&f);
			break;
		case 1:
			do_close(&f);
			break;
		case 2:
			do_mmap(&f);
			break;
		case 3:
			do_munmap(&f);
			break;
		case 4:
			do_mprotect(&f);
			break;
		case 5:
			do_madvise(&f);
			break;
		case 6:
			do_touch(&f);
			break;
		case 7:
			do_poll(&f);
			break;
		case 8:
			do_rw(&f);
			break;
		default:
			do_ioctl(&f);
			break;
		}
		if (!f.mmap_len)
			do_get_info(&f, any_fd(&f));
		f.calls++;
	}
	for (i = 0; i < MAX_MAPS; i++)
		if (f.maps[i].p)
			munmap(f.maps[i].p, f.maps[i].len);
	for (i = 0; i < MAX_FDS; i++)
		if (f.fds[i] >= 0)
			close(f.fds[i]);
	sigaction(SIGBUS, &old_bus, NULL);
	sigaction(SIGSEGV, &old_segv, NULL);
	printf("info fuzz: %ld calls (%ld succeeded), seed %u, %ld violations\n",
	       f.calls, f.ok_calls, seed, f.violations);
	if (f.calls < calls)
		printf("info fuzz: stopped by the %d s time bound\n", seconds);
	return f.violations;
}
