/*
 * pgscan: investigation only (tests/nested-host/investigate; crash_hunt.py
 * ships it into L2 for l2-hunt.sh). Reads a paused L3 guest's RAM straight
 * from its backing file (/proc/<qemu>/fd/N, the pool's memfd) and finds
 * every page that looks like a PGD of that guest: entries 511 and 508 equal
 * to init_top_pgt's (the kernel half every process's PGD copies). For each
 * it prints how many user entries it has and walks VA through it. If the
 * guest's current PGD (whatever CR3 was: lost at the triple fault) is among
 * them with the kernel half intact and VA mapped, the guest's page tables
 * in memory were fine when the CPU said "not present".
 *
 * usage: pgscan FILE LOW_END E511 E508 VA   (hex or decimal; file offset
 * [0, LOW_END) is GPA [0, LOW_END), the rest GPA 4 GiB on: QEMU q35's
 * split as zerostart launch maps it)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int fd;
static uint64_t low_end;

static int64_t off_of(uint64_t gpa)
{
	if (gpa < low_end)
		return (int64_t)gpa;
	if (gpa >= (4ull << 30))
		return (int64_t)(gpa - (4ull << 30) + low_end);
	return -1;
}

static uint64_t gpa_of(uint64_t off)
{
	return off < low_end ? off : off - low_end + (4ull << 30);
}

static int rd(uint64_t gpa, uint64_t *v)
{
	int64_t o = off_of(gpa);

	return o >= 0 && pread(fd, v, 8, o) == 8 ? 0 : -1;
}

static void walk(uint64_t pgd, uint64_t va)
{
	const uint64_t mask = 0x000ffffffffff000ull;
	uint64_t t = pgd, e = 0;
	int lvl;

	printf("PGSCAN walk pgd=%#" PRIx64 " va=%#" PRIx64 ":", pgd, va);
	for (lvl = 3; lvl >= 0; lvl--) {
		uint64_t idx = (va >> (12 + 9 * lvl)) & 511;

		if (rd(t + idx * 8, &e)) {
			printf(" unreadable\n");
			return;
		}
		printf(" L%d[%" PRIu64 "]=%#" PRIx64, lvl + 1, idx, e);
		if (!(e & 1) || (lvl && lvl < 3 && (e & 0x80)))
			break;
		t = e & mask;
	}
	printf(" -> %s\n", (e & 1) ? "present" : "NOT PRESENT");
}

int main(int argc, char **argv)
{
	static uint64_t buf[(2 << 20) / 8];
	uint64_t e511, e508, va, off = 0;
	ssize_t got;
	int found = 0;

	if (argc != 6) {
		fprintf(stderr, "usage: pgscan FILE LOW_END E511 E508 VA\n");
		return 2;
	}
	fd = open(argv[1], O_RDONLY);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	low_end = strtoull(argv[2], NULL, 0);
	e511 = strtoull(argv[3], NULL, 0);
	e508 = strtoull(argv[4], NULL, 0);
	va = strtoull(argv[5], NULL, 0);
	while ((got = pread(fd, buf, sizeof(buf), off)) > 0) {
		for (ssize_t p = 0; p + 4096 <= got; p += 4096) {
			uint64_t *q = buf + p / 8;
			int user = 0;

			if (q[511] != e511 || q[508] != e508)
				continue;
			for (int i = 0; i < 256; i++)
				user += q[i] != 0;
			printf("PGSCAN pgd gpa=%#" PRIx64 " user_entries=%d\n", gpa_of(off + p), user);
			walk(gpa_of(off + p), va);
			found++;
		}
		off += got;
	}
	printf("PGSCAN done bytes=%#" PRIx64 " pgds=%d\n", off, found);
	return 0;
}
