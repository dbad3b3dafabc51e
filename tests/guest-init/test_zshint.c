/*
 * Host unit test of the L3 guest's hint validator (zshint.c) against the
 * golden vectors (tests/vectors/zshint_vectors.h): same first error, same
 * entry index, same decoded entries for the ok vectors as every other
 * consumer. Plus the transport rules the vectors do not cover (a scrub
 * request outside fw_cfg) and a mutation sweep that flips every bit of a
 * valid hint and demands rejection.
 *
 *   cc -I tests/vectors -o t tests/guest-init/test_zshint.c tests/guest-init/zshint.c && ./t
 */
#include <stdio.h>
#include <string.h>

#include "zshint.h"
#include "zshint_vectors.h"

static int failures;

#define CHECK(cond, ...)                                   \
	do {                                               \
		if (!(cond)) {                             \
			fprintf(stderr, "FAIL: " __VA_ARGS__); \
			fputc('\n', stderr);               \
			failures++;                        \
		}                                          \
	} while (0)

static struct zshint_range ranges[ZSHINT_MAX_ENTRIES];

static void vectors(void)
{
	for (size_t i = 0; i < ZSHINT_VECTOR_COUNT; i++) {
		const struct zshint_vector *v = &zshint_vectors[i];
		static const uint8_t empty[1];
		struct zshint_info info;
		uint32_t bad = 0xffffffff;
		zshint_err_t e = zshint_validate(v->data ? v->data : empty, v->len, v->exact, 1, &info,
						 ranges, ZSHINT_MAX_ENTRIES, &bad);
		if (e == ZSHINT_E_OK && v->has_ram) {
			struct zshint_ram ram[16];
			for (unsigned k = 0; k < v->ram_count && k < 16; k++) {
				ram[k].start = v->ram[k][0];
				ram[k].length = v->ram[k][1];
			}
			e = zshint_check_ram(ranges, info.entry_count, ram, v->ram_count, &bad);
		}
		CHECK(e == v->expect, "%s: got %s, want %s", v->name, zshint_err_name(e),
		      zshint_err_name(v->expect));
		if (e == v->expect && v->index >= 0)
			CHECK((int)bad == v->index, "%s: bad entry %u, want %d", v->name, bad, v->index);
	}
	printf("zshint: %zu golden vectors checked\n", (size_t)ZSHINT_VECTOR_COUNT);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* A valid two-range hint built by hand, independent of the generator. */
static size_t make_hint(uint8_t *b, uint32_t flags, uint32_t entry_flags)
{
	memset(b, 0, 80);
	memcpy(b, "ZSHINT01", 8);
	b[8] = 1;
	b[10] = 32;
	b[12] = 24;
	put32(b + 0x10, 2);
	put32(b + 0x14, flags);
	/* entry 0: 1 MiB .. +2 MiB; entry 1: 16 MiB .. +4 MiB */
	b[32 + 2] = 0x10;
	b[32 + 10] = 0x20;
	put32(b + 32 + 16, entry_flags);
	b[32 + 20] = 21;
	b[56 + 3] = 0x01;
	b[56 + 10] = 0x40;
	put32(b + 56 + 16, entry_flags);
	b[56 + 20] = 12;
	put32(b + 0x18, zshint_crc32(b, 80));
	return 80;
}

static void transports_and_mutations(void)
{
	uint8_t b[80], m[80];
	struct zshint_info info;
	size_t n = make_hint(b, 0, 1);

	CHECK(zshint_validate(b, n, 1, 0, &info, NULL, 0, NULL) == ZSHINT_E_OK, "hand-built hint");
	CHECK(info.total_bytes == 6u << 20, "total bytes %llu", (unsigned long long)info.total_bytes);
	n = make_hint(b, ZSHINT_FLAG_SCRUB_REQUEST, 0);
	CHECK(zshint_validate(b, n, 1, 1, NULL, NULL, 0, NULL) == ZSHINT_E_OK, "scrub on fw_cfg");
	CHECK(zshint_validate(b, n, 1, 0, NULL, NULL, 0, NULL) == ZSHINT_E_SCRUB_NOT_ALLOWED,
	      "scrub request in setup_data must be rejected");

	/* Any single bit flip of a valid zero hint must not validate: no false "zero". */
	n = make_hint(b, 0, 1);
	for (size_t bit = 0; bit < n * 8; bit++) {
		memcpy(m, b, n);
		m[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		CHECK(zshint_validate(m, n, 1, 0, NULL, NULL, 0, NULL) != ZSHINT_E_OK,
		      "bit %zu flipped still validates", bit);
	}
	printf("zshint: %zu single-bit mutations rejected\n", n * 8);
}

int main(void)
{
	vectors();
	transports_and_mutations();
	if (failures) {
		fprintf(stderr, "zshint: %d failure(s)\n", failures);
		return 1;
	}
	printf("zshint: all checks passed\n");
	return 0;
}
