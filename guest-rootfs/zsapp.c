// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
/*
 * zsapp: the workload of the zerostart test guest's root filesystem, run
 * by zsapp.service once the system is up. It does what the demo's guest
 * does: write-faults a share of RAM (zsapp.pct= on the kernel command
 * line, default 75 % of MemAvailable) as an application warming its heap
 * would, then reports "app_ready". It then reads that memory back: every
 * page it faulted must still hold exactly what it wrote (a page handed out
 * twice, or one that was not cleared, would show here as other bytes),
 * and a fresh mapping of 64 MiB must read as zero.
 *
 * Phases go to the kernel log (/dev/kmsg), so they reach the host on the
 * serial console with the kernel's own timestamp:
 *   zsphase: app_ready uptime_ms=N touched_mib=N touch_ms=N
 *   zsapp: PASS|FAIL checked_mib=N bad_pages=N nonzero_fresh_pages=N
 *          planted=16 planted_found=N   (the check's negative control)
 * zsapp.poweroff=1 powers the guest off afterwards (systemctl poweroff).
 *
 * `zsapp phase NAME` only reports a phase (the zsphase@ units use it for
 * userspace_started, multi_user_reached and network_up):
 *   zsphase: NAME uptime_ms=N
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PLANTED 16

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void kmsg(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int fd, n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fd = open("/dev/kmsg", O_WRONLY);
	if (fd >= 0) {
		if (write(fd, line, n) < 0)
			perror("zsapp: /dev/kmsg");
		close(fd);
	}
	fputs(line, stdout);
	fflush(stdout);
}

/* A key's number on the kernel command line, or def. */
static long cmdline_num(const char *key, long def)
{
	char buf[4096], *p;
	FILE *f = fopen("/proc/cmdline", "r");
	size_t n;

	if (!f)
		return def;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	for (p = buf; (p = strstr(p, key)); p++)
		if ((p == buf || p[-1] == ' ') && p[strlen(key)] == '=')
			return strtol(p + strlen(key) + 1, NULL, 0);
	return def;
}

static long meminfo_kib(const char *key)
{
	char name[64];
	long v, found = -1;
	FILE *f = fopen("/proc/meminfo", "r");

	if (!f)
		return -1;
	while (fscanf(f, "%63s %ld kB", name, &v) == 2)
		if (!strncmp(name, key, strlen(key)) && name[strlen(key)] == ':')
			found = v;
	fclose(f);
	return found;
}

static double uptime_ms(void)
{
	double up = 0;
	FILE *f = fopen("/proc/uptime", "r");

	if (f) {
		if (fscanf(f, "%lf", &up) != 1)
			up = 0;
		fclose(f);
	}
	return up * 1e3;
}

/* Does the page hold a non-zero byte? */
static int page_nonzero(const unsigned char *page)
{
	const uint64_t *w = (const uint64_t *)page;
	size_t j;

	for (j = 0; j < 4096 / sizeof(*w); j++)
		if (w[j])
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	long pct = cmdline_num("zsapp.pct", 75);
	long avail = meminfo_kib("MemAvailable");
	size_t len, i, bad = 0, fresh_bad = 0, found = 0;
	const size_t fresh_len = 64 << 20;
	unsigned char *p, *q;
	double t0, t1;

	if (argc == 3 && !strcmp(argv[1], "phase")) {
		kmsg("zsphase: %s uptime_ms=%.0f\n", argv[2], uptime_ms());
		return 0;
	}
	if (avail <= 0 || pct <= 0 || pct > 95) {
		kmsg("zsapp: FAIL bad_input MemAvailable=%ld kB zsapp.pct=%ld (want 1..95)\n", avail, pct);
		return 1;
	}
	len = (size_t)avail * 1024 / 100 * pct & ~(size_t)4095;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		kmsg("zsapp: FAIL mmap of %zu MiB failed\n", len >> 20);
		return 1;
	}
	t0 = now_ms();
	/* Write-fault each page with a pattern that names the page. */
	for (i = 0; i < len; i += 4096)
		*(uint64_t *)(p + i) = i ^ 0x5a5a5a5a5a5a5a5aULL;
	t1 = now_ms();
	kmsg("zsphase: app_ready uptime_ms=%.0f touched_mib=%zu touch_ms=%.0f\n",
	     uptime_ms(), len >> 20, t1 - t0);

	for (i = 0; i < len; i += 4096) {
		uint64_t *w = (uint64_t *)(p + i);

		if (w[0] != (i ^ 0x5a5a5a5a5a5a5a5aULL)) {
			bad++;
			continue;
		}
		w[0] = 0;
		bad += page_nonzero(p + i);
	}
	munmap(p, len);
	q = mmap(NULL, fresh_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (q == MAP_FAILED) {
		kmsg("zsapp: FAIL mmap of the fresh area failed\n");
		return 1;
	}
	for (i = 0; i < fresh_len; i += 4096) {
		q[i + 4095] = 0;	/* write-fault, as a program would */
		fresh_bad += page_nonzero(q + i);
	}
	/*
	 * Negative control: the same check must see bytes that are there.
	 * Plant one in each of PLANTED pages of the fresh area and count again.
	 */
	for (i = 0; i < PLANTED; i++)
		q[(fresh_len / PLANTED) * i + (i * 97) % 4096] = 0x5a;
	for (i = 0; i < fresh_len; i += 4096)
		found += page_nonzero(q + i);
	kmsg("zsapp: %s checked_mib=%zu bad_pages=%zu nonzero_fresh_pages=%zu planted=%d planted_found=%zu\n",
	     bad || fresh_bad || found != PLANTED ? "FAIL" : "PASS", len >> 20, bad, fresh_bad,
	     PLANTED, found);
	if (cmdline_num("zsapp.poweroff", 0) == 1)
		execl("/usr/bin/systemctl", "systemctl", "poweroff", (char *)NULL);
	return bad || fresh_bad || found != PLANTED;
}
