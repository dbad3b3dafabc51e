// SPDX-License-Identifier: GPL-2.0
/*
 * ntcost: the cache cost of clearing with non-temporal stores, measured on
 * the host CPU itself (measure.sh row ntcost; docs/kernel-measurements.md).
 * QEMU TCG models no caches, so a guest cannot show it.
 *
 * It runs, in user space, the instruction sequences the guest kernel
 * uses to clear a huge folio and times the access that follows:
 *   stos: rep stosb per 4 KiB page (clear_page_erms(), what 6.12's
 *         folio_zero_user() runs per subpage)
 *   range: 7.3's folio_zero_user() for a fault at the folio's start:
 *         rep stosb over pages 3.. in units of at most 32 MiB
 *         (clear_contig_highpages() under a non-preemptible model,
 *         PROCESS_PAGES_NON_PREEMPT_BATCH), then pages 0-2, the fault's
 *         neighbourhood, last so that they stay hot
 *   nt:   movnti, 8 stores per 64 bytes, sfence at the end (the series'
 *         clear_pages_nt()) over all but the first 4 KiB page, which is
 *         then cleared with rep stosb (the fault's target subpage, as
 *         clear_huge_nt() does)
 * over every BLOCK of a BUF area, in order, so that each block is cold
 * (BUF is larger than the last-level cache). Per block: clear, then read
 * every word (first read), then read it again (second read). Each pass
 * runs every method over the whole area; PASSES passes rotate the
 * method order. Prints per method the median over passes, per block, in
 * microseconds: clear, first read, second read.
 *
 * usage: ntcost BLOCK_KIB BUF_MIB PASSES
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <emmintrin.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void stos(void *p, size_t len)
{
	asm volatile("rep stosb" : "+D"(p), "+c"(len) : "a"(0) : "memory");
}

static void clear_stos(char *p, size_t len)
{
	size_t i;

	for (i = 0; i < len; i += 4096)
		stos(p + i, 4096);
}

static void clear_range(char *p, size_t len)
{
	const size_t unit = 32UL << 20, near = 3 * 4096;
	size_t i, n;

	for (i = near; i < len; i += n) {
		n = len - i < unit ? len - i : unit;
		stos(p + i, n);
	}
	stos(p, near < len ? near : len);
}

static void clear_nt(char *p, size_t len)
{
	char *q = p + 4096, *end = p + len;

	asm volatile("1:\n\t"
		     "movnti %%rax,0x00(%0)\n\tmovnti %%rax,0x08(%0)\n\t"
		     "movnti %%rax,0x10(%0)\n\tmovnti %%rax,0x18(%0)\n\t"
		     "movnti %%rax,0x20(%0)\n\tmovnti %%rax,0x28(%0)\n\t"
		     "movnti %%rax,0x30(%0)\n\tmovnti %%rax,0x38(%0)\n\t"
		     "addq $64,%0\n\tcmpq %1,%0\n\tjne 1b\n\tsfence"
		     : "+r"(q) : "r"(end), "a"(0UL) : "memory");
	stos(p, 4096);
}

/* Loads as fast as the core issues them (4 independent 16-byte streams
 * per cache line), so that the time is set by where the data comes from,
 * not by the loop. */
static uint64_t read_all(const char *p, size_t len)
{
	__m128i a = _mm_setzero_si128(), b = a, c = a, d = a;
	size_t i;

	for (i = 0; i < len; i += 64) {
		a = _mm_or_si128(a, _mm_load_si128((const __m128i *)(p + i)));
		b = _mm_or_si128(b, _mm_load_si128((const __m128i *)(p + i + 16)));
		c = _mm_or_si128(c, _mm_load_si128((const __m128i *)(p + i + 32)));
		d = _mm_or_si128(d, _mm_load_si128((const __m128i *)(p + i + 48)));
	}
	a = _mm_or_si128(_mm_or_si128(a, b), _mm_or_si128(c, d));
	asm volatile("" : : "x"(a) : "memory");
	return (uint64_t)_mm_cvtsi128_si64(a) | (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(a, a));
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	enum { NMETH = 3 };
	static const char *const name[NMETH] = { "stos", "range", "nt" };
	size_t block, buf, nblk, b;
	double *res[NMETH][3];
	int passes, pass, m, k;
	uint64_t nz = 0;
	char *p;

	if (argc != 4) {
		fprintf(stderr, "usage: ntcost BLOCK_KIB BUF_MIB PASSES\n");
		return 2;
	}
	block = strtoul(argv[1], NULL, 0) << 10;
	buf = strtoul(argv[2], NULL, 0) << 20;
	passes = atoi(argv[3]);
	if (block < 8192 || block % 4096 || buf < block || passes < 1) {
		fprintf(stderr, "ntcost: BLOCK_KIB must be a multiple of 4 (>= 8), BUF_MIB >= the block, PASSES >= 1; fix the arguments\n");
		return 2;
	}
	nblk = buf / block;
	p = mmap(NULL, buf, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "ntcost: cannot map %zu MiB; use a smaller BUF_MIB\n", buf >> 20);
		return 1;
	}
	/* Huge pages where the host allows: the guest's folios are huge. */
	madvise(p, buf, MADV_HUGEPAGE);
	memset(p, 1, buf);
	for (m = 0; m < NMETH; m++)
		for (k = 0; k < 3; k++)
			res[m][k] = calloc(passes, sizeof(double));
	for (pass = 0; pass < passes; pass++) {
		for (int i = 0; i < NMETH; i++) {
			/* rotate the order so that no method always follows another */
			m = (i + pass) % NMETH;
			double t[3] = { 0, 0, 0 };

			for (b = 0; b < nblk; b++) {
				char *q = p + b * block;
				double t0 = now(), t1, t2, t3;

				if (m == 2)
					clear_nt(q, block);
				else if (m == 1)
					clear_range(q, block);
				else
					clear_stos(q, block);
				t1 = now();
				nz |= read_all(q, block);
				t2 = now();
				nz |= read_all(q, block);
				t3 = now();
				t[0] += t1 - t0;
				t[1] += t2 - t1;
				t[2] += t3 - t2;
				/* dirty it again for the next clear */
				memset(q, 1, 64);
			}
			for (k = 0; k < 3; k++)
				res[m][k][pass] = t[k] / nblk * 1e6;
		}
	}
	for (m = 0; m < NMETH; m++) {
		for (k = 0; k < 3; k++)
			qsort(res[m][k], passes, sizeof(double), cmp);
		printf("NTCOST method=%s block_kib=%zu buf_mib=%zu passes=%d clear_us=%.1f read1_us=%.1f read2_us=%.1f\n",
		       name[m], block >> 10, buf >> 20, passes,
		       res[m][0][passes / 2], res[m][1][passes / 2], res[m][2][passes / 2]);
	}
	if (nz) {
		fprintf(stderr, "ntcost: a cleared block read back non-zero; the clear is broken\n");
		return 1;
	}
	return 0;
}
