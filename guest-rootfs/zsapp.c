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
 *   zsapp: disk ok|FAIL wrote_mib=16 mismatched_bytes=N
 *          (a file written, fsync'ed, dropped from the page cache and
 *          read back from the virtio disk)
 *   zsapp: kernel pages_skipped=N bytes_verified=N verify_failures=N
 *          pristine_pages=N  (the patched kernel's debugfs counters; -1
 *          each on a kernel without the series)
 * zsapp.poweroff=1 powers the guest off afterwards (systemctl poweroff).
 *
 * `zsapp phase NAME` only reports a phase (the zsphase@ units use it for
 * userspace_started, multi_user_reached and network_up):
 *   zsphase: NAME uptime_ms=N
 *
 * Every zsphase line also goes to the host over vsock when the VM has a
 * vsock device (host CID 2, port ZS_PHASE_PORT; zerostart's VMM and
 * `zerostart launch` listen there and put the phases into their timeline
 * with the host's arrival time). Best effort: without a device or a
 * listener the connect fails at once and the console line stands alone.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

#define PLANTED 16
/* The phase port: vmm/zerostart's PHASE_PORT (docs/vmm.md). */
#define ZS_PHASE_PORT 5300
#define DISK_CHECK_MIB 16

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

/* One phase line to the host over vsock, if the VM has a way there. */
static void vsock_send(const char *line, size_t n)
{
	struct sockaddr_vm a = {
		.svm_family = AF_VSOCK,
		.svm_cid = VMADDR_CID_HOST,
		.svm_port = ZS_PHASE_PORT,
	};
	struct timeval tmo = { .tv_sec = 2 };
	int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return;
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tmo, sizeof(tmo));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && write(fd, line, n) != (ssize_t)n)
		perror("zsapp: vsock");
	close(fd);
}

static void phase(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n <= 0 || (size_t)n >= sizeof(line))
		return;
	kmsg("%s", line);
	vsock_send(line, n);
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

static long long debugfs_num(const char *name)
{
	char path[128];
	long long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/kernel/debug/zerostart/%s", name);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%lli", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

/*
 * The disk: write DISK_CHECK_MIB of a pattern to a file on the root file
 * system, fsync it, drop the page cache so the read comes from the device,
 * read it back and count the bytes that differ. Returns that count, or -1
 * when a step failed (said on the console).
 */
static long long disk_check(void)
{
	const char *path = "/var/tmp/zsapp-disk-check";
	const size_t len = (size_t)DISK_CHECK_MIB << 20;
	unsigned char *buf = malloc(len), *back = malloc(len);
	long long bad = 0;
	size_t i;
	int fd;

	if (!buf || !back)
		goto fail;
	for (i = 0; i < len; i++)
		buf[i] = (unsigned char)(i * 131 + (i >> 12));
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, buf, len) != (ssize_t)len || fsync(fd) != 0) {
		perror("zsapp: disk write");
		goto fail;
	}
	close(fd);
	sync();
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	if (fd < 0 || write(fd, "3", 1) != 1)
		perror("zsapp: drop_caches");
	if (fd >= 0)
		close(fd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read(fd, back, len) != (ssize_t)len) {
		perror("zsapp: disk read");
		goto fail;
	}
	close(fd);
	unlink(path);
	for (i = 0; i < len; i++)
		bad += buf[i] != back[i];
	free(buf);
	free(back);
	return bad;
fail:
	free(buf);
	free(back);
	return -1;
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
	long long disk_bad;
	const size_t fresh_len = 64 << 20;
	unsigned char *p, *q;
	double t0, t1;

	if (argc == 3 && !strcmp(argv[1], "phase")) {
		phase("zsphase: %s uptime_ms=%.0f\n", argv[2], uptime_ms());
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
	phase("zsphase: app_ready uptime_ms=%.0f touched_mib=%zu touch_ms=%.0f\n",
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
	disk_bad = disk_check();
	kmsg("zsapp: disk %s wrote_mib=%d mismatched_bytes=%lld\n", disk_bad == 0 ? "ok" : "FAIL",
	     DISK_CHECK_MIB, disk_bad);
	kmsg("zsapp: kernel pages_skipped=%lld bytes_verified=%lld verify_failures=%lld pristine_pages=%lld\n",
	     debugfs_num("pages_skipped"), debugfs_num("bytes_verified"),
	     debugfs_num("verify_failures"), debugfs_num("pristine_pages"));
	if (cmdline_num("zsapp.poweroff", 0) == 1)
		execl("/usr/bin/systemctl", "systemctl", "poweroff", (char *)NULL);
	return bad || fresh_bad || found != PLANTED || disk_bad != 0;
}
