// SPDX-License-Identifier: GPL-2.0
/*
 * zsprobe: runs as part of the guest's /init in the kernel boot tests.
 * Populates hugetlb memory and first-touches 4K anonymous memory, timing
 * both, then checks that every byte it was given reads as zero (a page the
 * kernel wrongly believed pristine would show up here as a leak).
 *
 * usage: zsprobe <hugetlb MiB> <4K anon MiB> [thp] [leak] [sparse] [1g]
 *   1g: populate the hugetlb area with 1 GiB pages (default: the default
 *   huge page size)
 *   dirty: first fill the hugetlb area with a pattern and unmap it, so
 *   that the timed populate gets dirty pool pages back and must clear them
 *   thp: do not MADV_NOHUGEPAGE the anon area (to let mTHP sizes the
 *   guest's /init enabled, or the series' fault batching, map it; it is
 *   still mapped by 4 KiB PTEs)
 *   leak: before the first touch, write a secret into as much anonymous
 *   memory in a child that exits and in an area this process unmaps, so
 *   that the first touch gets those freed pages back: not a byte of the
 *   secret may show up
 *   sparse: afterwards, touch one byte per 64 KiB of another area of the
 *   same size and report how much RSS grew (the price of batching)
 *   compact: (with leak) after the secret is written and freed, compact
 *   all memory (/proc/sys/vm/compact_memory) before the first touch, so
 *   that compaction migrates pages into pristine free memory and releases
 *   the free pages it isolated; prints the pages it isolated
 *   fill: only fill the 4K anon area with SECRET and exit (its pages go
 *   back to the allocator holding it): the first boot of the reboot case
 *   refuse: afterwards, first-touch 64 MiB with MADV_NOHUGEPAGE, 64 MiB
 *   plainly, 64 MiB with MADV_HUGEPAGE, then 64 MiB after
 *   prctl(PR_SET_THP_DISABLE), and report how many fault batches (debugfs
 *   zerostart/fault_batches) each caused: batching must respect the VMA's
 *   and the process's refusals and follow the THP policy
 *   usedup: afterwards, hold anonymous memory until the kernel says its
 *   pristine memory is used up (debugfs zerostart/active = 0) or little is
 *   left, give it back, then first-touch 64 MiB: with the skip path off,
 *   not one fault may be batched
 *   kjump: afterwards, load a kexec image with KEXEC_PRESERVE_CONTEXT (never
 *   executed), then first-touch 64 MiB: the load must have made the kernel
 *   forget every pristine mark
 * prints: "ZSPROBE key=value ..." lines parsed by the scripts in tests/kernel
 *
 * Negative controls: a count of 0 from dirty_pages() or secret_pages() only
 * means something if those counters see a byte that is there. After each
 * real count the probe plants PLANTED bytes (one per page, at a different
 * offset in each, spread over the whole area) into the very memory it just
 * checked and counts again with the same function: *_planted_found must
 * equal *_planted, or the scripts fail the case.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <errno.h>
#include <linux/kexec.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Count 4 KiB pages that contain a non-zero byte. */
static unsigned long dirty_pages(const unsigned char *p, size_t len)
{
	unsigned long bad = 0;
	size_t i, j;

	for (i = 0; i < len; i += 4096) {
		const unsigned long *w = (const unsigned long *)(p + i);

		for (j = 0; j < 4096 / sizeof(long); j++)
			if (w[j]) {
				bad++;
				break;
			}
	}
	return bad;
}

static int has_flag(int argc, char **argv, const char *flag)
{
	int i;

	for (i = 3; i < argc; i++)
		if (!strcmp(argv[i], flag))
			return 1;
	return 0;
}

/* Resident pages of this process (/proc/self/statm, second field). */
static long rss_pages(void)
{
	long size = -1, res = -1;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f) {
		if (fscanf(f, "%ld %ld", &size, &res) != 2)
			res = -1;
		fclose(f);
	}
	return res;
}

#define SECRET 0x5a
#define PLANTED 16

/* Writes `byte` into PLANTED pages spread over [p, p + len), at a different
 * offset in each page (first byte, last byte and places in between). */
static void plant(unsigned char *p, size_t len, unsigned char byte)
{
	size_t pages = len / 4096, k;

	for (k = 0; k < PLANTED; k++)
		p[(k * pages / PLANTED) * 4096 + (k * 4095) / (PLANTED - 1)] = byte;
}

/* A number from debugfs zerostart/<name>, or -1. */
static long zs_debugfs(const char *name)
{
	char path[128];
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/kernel/debug/zerostart/%s", name);
	f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

static long fault_batches(void)
{
	return zs_debugfs("fault_batches");
}

/* Fault batches caused by first-touching 64 MiB (after madvise if asked). */
static long batches_for_touch(int advice)
{
	size_t len = 64 << 20, i;
	unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	long b0;

	if (p == MAP_FAILED)
		return -1;
	if (advice)
		madvise(p, len, advice);
	b0 = fault_batches();
	for (i = 0; i < len; i += 4096)
		p[i] = 1;
	b0 = fault_batches() - b0;
	munmap(p, len);
	return b0;
}

/* Map len bytes of anonymous memory, fill with SECRET, unmap. */
static int write_secret(size_t len)
{
	unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return -1;
	memset(p, SECRET, len);
	return munmap(p, len);
}

/* Pages of [p, p + len) that contain a SECRET byte. */
static unsigned long secret_pages(const unsigned char *p, size_t len)
{
	unsigned long bad = 0;
	size_t i;

	for (i = 0; i < len; i += 4096)
		if (memchr(p + i, SECRET, 4096))
			bad++;
	return bad;
}

/*
 * The number after KEY on the last line of PATH that starts with it
 * ("KEY VALUE [unit]": /proc/vmstat, /proc/meminfo), or -1.
 */
static long proc_field(const char *path, const char *key)
{
	FILE *f = fopen(path, "r");
	char line[256], name[64];
	long v, found = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%63s %ld", name, &v) == 2 && !strcmp(name, key))
			found = v;
	fclose(f);
	return found;
}

/* A counter from /proc/vmstat, or -1. */
static long vmstat(const char *key)
{
	return proc_field("/proc/vmstat", key);
}

/* MemAvailable from /proc/meminfo in KiB, or -1. */
static long mem_available_kib(void)
{
	return proc_field("/proc/meminfo", "MemAvailable:");
}

/*
 * usedup: use up the pristine memory. Hold anonymous memory, 1 MiB at a
 * time, until the kernel switches its skip path off (debugfs
 * zerostart/active reads 0) or MemAvailable falls below USEDUP_FLOOR_KIB;
 * then give it all back and first-touch 64 MiB: no fault may be batched any
 * more. Prints what it held, the switch's state and the batches after.
 */
#define USEDUP_FLOOR_KIB (8 << 10)
static void use_up(void)
{
	size_t chunk = 1 << 20, max = 64 << 10, n = 0, i;
	unsigned char **held = calloc(max, sizeof(*held));
	long active = zs_debugfs("active"), avail = mem_available_kib(), b;
	double t0 = now();

	if (!held) {
		printf("ZSPROBE usedup_error=calloc\n");
		return;
	}
	while (n < max && active != 0 && avail > USEDUP_FLOOR_KIB) {
		unsigned char *p = mmap(NULL, chunk, PROT_READ | PROT_WRITE,
					MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED)
			break;
		for (i = 0; i < chunk; i += 4096)
			p[i] = 1;
		held[n++] = p;
		active = zs_debugfs("active");
		avail = mem_available_kib();
	}
	/* The switch runs from a workqueue: give it a moment. */
	for (i = 0; i < 40 && active == 1; i++) {
		usleep(50000);
		active = zs_debugfs("active");
	}
	printf("ZSPROBE usedup_held_mib=%zu usedup_active=%ld usedup_pristine_pages=%ld usedup_below=%ld usedup_mem_available_kib=%ld usedup_ms=%.0f\n",
	       n, active, zs_debugfs("pristine_pages"), zs_debugfs("used_up_below"), avail, (now() - t0) * 1e3);
	for (i = 0; i < n; i++)
		munmap(held[i], chunk);
	free(held);
	b = batches_for_touch(0);
	printf("ZSPROBE usedup_batches_after=%ld usedup_pages_skipped=%ld\n", b,
	       zs_debugfs("pages_skipped"));
}

/*
 * kjump: load a kexec image that may jump there and back
 * (KEXEC_PRESERVE_CONTEXT: one page holding a ret at 16 MiB; it is never
 * jumped to), then first-touch 64 MiB. The kernel must have forgotten every
 * pristine mark at the load: none left, no clear skipped after it.
 */
static void kexec_jump_load(void)
{
	static unsigned char page[4096] __attribute__((aligned(4096)));
	struct kexec_segment seg = {
		.buf = page, .bufsz = sizeof(page),
		.mem = (const void *)(16UL << 20), .memsz = sizeof(page),
	};
	long before = zs_debugfs("pristine_pages"), after, s0, b;
	long rc;
	int err;

	page[0] = 0xc3;	/* ret: back to the kernel that jumped */
	rc = syscall(SYS_kexec_load, 16UL << 20, 1UL, &seg,
		     (unsigned long)(KEXEC_PRESERVE_CONTEXT | KEXEC_ARCH_DEFAULT));
	err = rc ? errno : 0;
	after = zs_debugfs("pristine_pages");
	s0 = zs_debugfs("pages_skipped");
	b = batches_for_touch(0);
	printf("ZSPROBE kjump_rc=%ld kjump_errno=%d kjump_pristine_before=%ld kjump_pristine_after=%ld kjump_skipped_after=%ld kjump_batches_after=%ld\n",
	       rc, err, before, after, zs_debugfs("pages_skipped") - s0, b);
}

/* Compact all memory; print what compaction isolated and migrated. */
static void compact_all(void)
{
	long iso = vmstat("compact_isolated"), mig = vmstat("pgmigrate_success");
	FILE *f = fopen("/proc/sys/vm/compact_memory", "w");
	double t0 = now();

	if (!f || fputs("1\n", f) < 0 || fclose(f)) {
		printf("ZSPROBE compact_error=cannot_write_compact_memory\n");
		return;
	}
	printf("ZSPROBE compact_isolated=%ld compact_migrated=%ld compact_ms=%.1f\n",
	       vmstat("compact_isolated") - iso, vmstat("pgmigrate_success") - mig,
	       (now() - t0) * 1e3);
}

int main(int argc, char **argv)
{
	size_t huge_mib = argc > 1 ? strtoul(argv[1], NULL, 0) : 0;
	size_t anon_mib = argc > 2 ? strtoul(argv[2], NULL, 0) : 0;
	int thp = has_flag(argc, argv, "thp");
	int leak = has_flag(argc, argv, "leak");
	int sparse = has_flag(argc, argv, "sparse");
	int huge_flags = has_flag(argc, argv, "1g") ? 30 << MAP_HUGE_SHIFT : 0;
	double t0, t1;

	if (huge_mib) {
		size_t len = huge_mib << 20;
		unsigned char *p;

		if (has_flag(argc, argv, "dirty")) {
			p = mmap(NULL, len, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | huge_flags,
				 -1, 0);
			if (p != MAP_FAILED) {
				memset(p, SECRET, len);
				munmap(p, len);
			}
		}
		t0 = now();
		p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE | huge_flags,
			 -1, 0);
		t1 = now();
		if (p == MAP_FAILED) {
			printf("ZSPROBE hugetlb_error=mmap_failed mib=%zu\n", huge_mib);
		} else {
			unsigned long bad = dirty_pages(p, len);

			plant(p, len, SECRET);
			printf("ZSPROBE hugetlb_mib=%zu hugetlb_ms=%.1f hugetlb_dirty_pages=%lu hugetlb_planted=%d hugetlb_planted_found=%lu\n",
			       huge_mib, (t1 - t0) * 1e3, bad, PLANTED, dirty_pages(p, len));
			munmap(p, len);
		}
	}
	if (anon_mib) {
		size_t len = anon_mib << 20, i;
		unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
					MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		unsigned long bad = 0;

		if (p == MAP_FAILED) {
			printf("ZSPROBE anon_error=mmap_failed mib=%zu\n", anon_mib);
			return 1;
		}
		if (!thp)
			madvise(p, len, MADV_NOHUGEPAGE);
		if (has_flag(argc, argv, "fill")) {
			memset(p, SECRET, len);
			printf("ZSPROBE fill_mib=%zu\n", anon_mib);
			return 0;
		}
		if (leak) {
			pid_t pid = fork();
			int st = 0;

			if (pid == 0)
				_exit(write_secret(len) ? 1 : 0);
			if (pid < 0 || waitpid(pid, &st, 0) != pid || st ||
			    write_secret(len)) {
				printf("ZSPROBE leak_error=cannot_write_secret\n");
				return 1;
			}
			if (has_flag(argc, argv, "compact"))
				compact_all();
		}
		t0 = now();
		/* First touch by a write of the last byte of each page. */
		for (i = 0; i < len; i += 4096)
			p[i + 4095] = 1;
		t1 = now();
		for (i = 0; i < len; i += 4096) {
			p[i + 4095] = 0;
			if (dirty_pages(p + i, 4096))
				bad++;
		}
		if (leak) {
			unsigned long seen = secret_pages(p, len);

			plant(p, len, SECRET);
			printf("ZSPROBE leak_secret_pages=%lu leak_planted=%d leak_planted_found=%lu\n",
			       seen, PLANTED, secret_pages(p, len));
		} else {
			plant(p, len, SECRET);
		}
		printf("ZSPROBE anon_mib=%zu anon_ms=%.1f anon_mib_per_s=%.0f anon_dirty_pages=%lu anon_planted=%d anon_planted_found=%lu\n",
		       anon_mib, (t1 - t0) * 1e3, anon_mib / (t1 - t0), bad, PLANTED, dirty_pages(p, len));
		if (sparse) {
			unsigned char *q = mmap(NULL, len, PROT_READ | PROT_WRITE,
						MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			long r0 = rss_pages(), r1;

			if (q == MAP_FAILED) {
				printf("ZSPROBE sparse_error=mmap_failed\n");
				return 1;
			}
			if (!thp)
				madvise(q, len, MADV_NOHUGEPAGE);
			for (i = 0; i < len; i += 64 << 10)
				q[i] = 1;
			r1 = rss_pages();
			printf("ZSPROBE sparse_touched_kib=%zu sparse_rss_kib=%ld\n",
			       (len / (64 << 10)) * 4, (r1 - r0) * 4);
		}
	}
	if (has_flag(argc, argv, "usedup"))
		use_up();
	if (has_flag(argc, argv, "kjump"))
		kexec_jump_load();
	if (has_flag(argc, argv, "refuse")) {
		long madv = batches_for_touch(MADV_NOHUGEPAGE), plain, hp, pr;

		plain = batches_for_touch(0);
		hp = batches_for_touch(MADV_HUGEPAGE);
		pr = prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) ? -1 : batches_for_touch(0);
		printf("ZSPROBE refuse_plain_batches=%ld refuse_madv_batches=%ld refuse_hugepage_batches=%ld refuse_prctl_batches=%ld\n",
		       plain, madv, hp, pr);
	}
	return 0;
}
