// SPDX-License-Identifier: GPL-2.0
/*
 * zsprobe: runs as part of the guest's /init in the kernel boot tests.
 * Populates hugetlb memory and first-touches 4K anonymous memory, timing
 * both, then checks that every byte it was given reads as zero (a page the
 * kernel wrongly believed pristine would show up here as a leak).
 *
 * usage: zsprobe <hugetlb MiB> <4K anon MiB> [thp]
 *   thp: do not MADV_NOHUGEPAGE the anon area (to let mTHP sizes the
 *   guest's /init enabled map it; it is still mapped by 4 KiB PTEs)
 * prints: "ZSPROBE key=value ..." lines parsed by the scripts in tests/kernel
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

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

int main(int argc, char **argv)
{
	size_t huge_mib = argc > 1 ? strtoul(argv[1], NULL, 0) : 0;
	size_t anon_mib = argc > 2 ? strtoul(argv[2], NULL, 0) : 0;
	int thp = argc > 3 && !strcmp(argv[3], "thp");
	double t0, t1;

	if (huge_mib) {
		size_t len = huge_mib << 20;
		unsigned char *p;

		t0 = now();
		p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE,
			 -1, 0);
		t1 = now();
		if (p == MAP_FAILED) {
			printf("ZSPROBE hugetlb_error=mmap_failed mib=%zu\n", huge_mib);
		} else {
			printf("ZSPROBE hugetlb_mib=%zu hugetlb_ms=%.1f hugetlb_dirty_pages=%lu\n",
			       huge_mib, (t1 - t0) * 1e3, dirty_pages(p, len));
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
		printf("ZSPROBE anon_mib=%zu anon_ms=%.1f anon_mib_per_s=%.0f anon_dirty_pages=%lu\n",
		       anon_mib, (t1 - t0) * 1e3, anon_mib / (t1 - t0), bad);
	}
	return 0;
}
