// SPDX-License-Identifier: GPL-2.0
/*
 * zsbench: the guest side of the issue-17 measurements (tests/kernel/
 * measure.sh rows pf, hugeread, work; docs/kernel-measurements.md). Built
 * static into the bench initramfs; bench-init.sh runs it with the words of
 * the kernel argument zsbench=MODE,ARG,... and prints what it prints.
 *
 *   zsbench pf NPROC SECS MIB
 *     will-it-scale page_fault1: NPROC processes each loop { mmap MIB
 *     anonymous, write one byte per 4 KiB page, munmap } for SECS seconds.
 *     Prints faults (4 KiB pages written) per second, all processes, over
 *     the whole run and over the iterations after each process's first
 *     (the first one gets the memory the boot never touched: with the
 *     series, pristine pages; later ones get pages freed by munmap).
 *   zsbench hugeread MIB hugetlb|thp
 *     For each 2 MiB page of a MIB area: fault it in (one write at its
 *     start: the kernel clears the whole 2 MiB), then read all of it at
 *     once (first read), then read it again (second read, a baseline of
 *     the same loads with the page as warm as it gets). The difference
 *     between the first and second read is what the clear left behind in
 *     the caches. Checks every word read is zero.
 *   zsbench work NPROC ROUNDS KEYS
 *     A hash-table workload: per round, a bucket array and node slab are
 *     malloc()ed (mmap()ed by glibc: 1 MiB mmap threshold, so they are
 *     returned on free() and faulted in again next round), KEYS keys
 *     inserted, 2*KEYS looked up (half hit), everything freed. Prints
 *     rounds per second and operations per second, all processes.
 *
 * Prints "ZSBENCH mode=... key=value ..." lines. Times are CLOCK_MONOTONIC:
 * under -icount shift=0 that clock counts guest instructions (1 ns each).
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MIB (1UL << 20)
#define HPAGE (2UL << 20)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *msg)
{
	fprintf(stderr, "zsbench: %s\n", msg);
	printf("ZSBENCH error=\"%s\"\n", msg);
	exit(1);
}

/* Results of the child processes, one slot each, shared with the parent. */
struct slot {
	double secs;
	unsigned long count;
	unsigned long iters;
	double first_s;
	unsigned long first_count;
};

static struct slot *shared_slots(int n)
{
	void *p = mmap(NULL, n * sizeof(struct slot), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("cannot map the result slots");
	return p;
}

static void wait_all(int n)
{
	int st, i;

	for (i = 0; i < n; i++)
		if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			die("a worker process failed");
}

static void pf_child(struct slot *s, double secs, size_t len)
{
	double t0 = now(), t;

	do {
		char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		size_t i;

		if (p == MAP_FAILED)
			die("mmap failed");
		for (i = 0; i < len; i += 4096)
			p[i] = 1;
		munmap(p, len);
		s->count += len / 4096;
		s->iters++;
		t = now();
		if (s->iters == 1) {
			s->first_s = t - t0;
			s->first_count = s->count;
		}
	} while (t - t0 < secs);
	s->secs = t - t0;
}

static int do_pf(int nproc, double secs, unsigned long mib)
{
	struct slot *s = shared_slots(nproc);
	unsigned long faults = 0, iters = 0;
	double rate = 0, rest = 0, first = 0;
	int i;

	for (i = 0; i < nproc; i++) {
		pid_t pid = fork();

		if (pid < 0)
			die("fork failed");
		if (!pid) {
			pf_child(&s[i], secs, mib * MIB);
			_exit(0);
		}
	}
	wait_all(nproc);
	for (i = 0; i < nproc; i++) {
		faults += s[i].count;
		iters += s[i].iters;
		rate += s[i].count / s[i].secs;
		if (s[i].iters > 1)
			rest += (s[i].count - s[i].first_count) / (s[i].secs - s[i].first_s);
		if (s[i].first_s > first)
			first = s[i].first_s;
	}
	printf("ZSBENCH mode=pf nproc=%d secs=%.0f mib=%lu faults=%lu iters=%lu faults_per_s=%.0f after_first_per_s=%.0f first_iter_ms=%.1f\n",
	       nproc, secs, mib, faults, iters, rate, rest, first * 1e3);
	return 0;
}

static uint64_t sum_words(const uint64_t *w, size_t len)
{
	uint64_t s = 0;
	size_t i;

	for (i = 0; i < len / 8; i++)
		s |= w[i];
	return s;
}

static int do_hugeread(unsigned long mib, const char *how)
{
	size_t len = mib * MIB, off;
	double fault = 0, read1 = 0, read2 = 0, t0, t1, t2, t3;
	uint64_t nonzero = 0;
	char *p;

	if (!strcmp(how, "hugetlb")) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
		if (p == MAP_FAILED)
			die("MAP_HUGETLB failed (too few hugepages= at boot?)");
	} else if (!strcmp(how, "thp")) {
		char *q = mmap(NULL, len + HPAGE, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (q == MAP_FAILED)
			die("mmap failed");
		p = (char *)(((uintptr_t)q + HPAGE - 1) & ~(HPAGE - 1));
		if (madvise(p, len, MADV_HUGEPAGE))
			die("MADV_HUGEPAGE failed (THP off in this kernel?)");
	} else {
		die("hugeread: the page kind is hugetlb or thp");
	}
	for (off = 0; off < len; off += HPAGE) {
		t0 = now();
		*(volatile char *)(p + off) = 0;
		t1 = now();
		nonzero |= sum_words((uint64_t *)(p + off), HPAGE);
		t2 = now();
		nonzero |= sum_words((uint64_t *)(p + off), HPAGE);
		t3 = now();
		fault += t1 - t0;
		read1 += t2 - t1;
		read2 += t3 - t2;
	}
	printf("ZSBENCH mode=hugeread kind=%s mib=%lu fault_ms=%.2f read1_ms=%.2f read2_ms=%.2f read1_minus_read2_ms=%.2f nonzero=%d\n",
	       how, mib, fault * 1e3, read1 * 1e3, read2 * 1e3, (read1 - read2) * 1e3, nonzero != 0);
	return nonzero != 0;
}

struct node {
	uint64_t key;
	uint64_t val;
	struct node *next;
};

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	return x ^ (x >> 33);
}

static void work_child(struct slot *s, int id, unsigned long rounds, unsigned long keys)
{
	unsigned long nb = 1, r, i;
	double t0 = now();

	while (nb < keys)
		nb <<= 1;
	for (r = 0; r < rounds; r++) {
		struct node **b = calloc(nb, sizeof(*b));
		struct node *n = malloc(keys * sizeof(*n));
		uint64_t seed = (uint64_t)id << 40 | r << 20, hits = 0;

		if (!b || !n)
			die("out of memory");
		for (i = 0; i < keys; i++) {
			uint64_t k = mix(seed + i), h = mix(k) & (nb - 1);

			n[i].key = k;
			n[i].val = i;
			n[i].next = b[h];
			b[h] = &n[i];
		}
		for (i = 0; i < 2 * keys; i++) {
			uint64_t k = mix(seed + (i & 1 ? i / 2 : keys + i)), h = mix(k) & (nb - 1);
			struct node *e;

			for (e = b[h]; e; e = e->next)
				if (e->key == k) {
					hits++;
					break;
				}
		}
		if (hits != keys)
			die("hash table lost keys");
		free(n);
		free(b);
		s->count += 3 * keys;
		s->iters++;
	}
	s->secs = now() - t0;
}

static int do_work(int nproc, unsigned long rounds, unsigned long keys)
{
	struct slot *s = shared_slots(nproc);
	double t0 = now(), wall, ops = 0;
	unsigned long done = 0;
	int i;

	/* Large blocks from mmap, returned by free(): every round faults its
	 * tables in again, as a process that allocates big tables would. The
	 * fixed threshold stops glibc from raising it after the first free. */
	mallopt(M_MMAP_THRESHOLD, MIB);
	for (i = 0; i < nproc; i++) {
		pid_t pid = fork();

		if (pid < 0)
			die("fork failed");
		if (!pid) {
			work_child(&s[i], i, rounds, keys);
			_exit(0);
		}
	}
	wait_all(nproc);
	wall = now() - t0;
	for (i = 0; i < nproc; i++) {
		ops += s[i].count;
		done += s[i].iters;
	}
	printf("ZSBENCH mode=work nproc=%d rounds=%lu keys=%lu secs=%.3f rounds_per_s=%.3f mops_per_s=%.3f\n",
	       nproc, done, keys, wall, done / wall, ops / wall / 1e6);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc == 5 && !strcmp(argv[1], "pf"))
		return do_pf(atoi(argv[2]), atof(argv[3]), strtoul(argv[4], NULL, 0));
	if (argc == 4 && !strcmp(argv[1], "hugeread"))
		return do_hugeread(strtoul(argv[2], NULL, 0), argv[3]);
	if (argc == 5 && !strcmp(argv[1], "work"))
		return do_work(atoi(argv[2]), strtoul(argv[3], NULL, 0), strtoul(argv[4], NULL, 0));
	die("usage: zsbench pf NPROC SECS MIB | hugeread MIB hugetlb|thp | work NPROC ROUNDS KEYS");
	return 1;
}
