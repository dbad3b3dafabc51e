/* SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause */
/*
 * Proves zshint_vectors.h compiles as strict C99 and matches the .bin files
 * byte for byte, so C consumers (kernel KUnit, EDK2 host tests) test against
 * exactly the vectors the Rust decoder is checked against.
 *
 *   cc -std=c99 -Wall -Wextra -Werror -pedantic -o check check_c_header.c
 *   ./check tests/vectors
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zshint_vectors.h"

static const char *const error_names[] = {
#define ZSHINT_NAME(code, name) name,
	ZSHINT_ERRORS(ZSHINT_NAME)
#undef ZSHINT_NAME
};

static int check_one(const char *dir, const struct zshint_vector *v)
{
	char path[4096];
	unsigned char buf[65536];
	size_t n;
	FILE *f;

	if (v->expect < 0 || v->expect >= ZSHINT_E_COUNT) {
		fprintf(stderr, "%s: expect code %d out of range\n", v->name, v->expect);
		return 1;
	}
	if ((v->expect >= ZSHINT_E_BAD_ENTRY_FLAGS) != (v->index >= 0)) {
		fprintf(stderr, "%s: %s with index %d\n", v->name, error_names[v->expect], v->index);
		return 1;
	}
	if ((v->len == 0) != (v->data == NULL)) {
		fprintf(stderr, "%s: data must be NULL exactly when len is 0\n", v->name);
		return 1;
	}
	if (!v->has_ram && (v->ram != NULL || v->ram_count != 0)) {
		fprintf(stderr, "%s: RAM map without has_ram\n", v->name);
		return 1;
	}
	snprintf(path, sizeof(path), "%s/%s", dir, v->file);
	f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "%s: cannot open %s\n", v->name, path);
		return 1;
	}
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	if (n != v->len || (n && memcmp(buf, v->data, n) != 0)) {
		fprintf(stderr, "%s: %s (%lu bytes) differs from the header (%lu bytes): regenerate with "
			"`cargo run -p zerohint --example gen_vectors -- tests/vectors`\n",
			v->name, path, (unsigned long)n, v->len);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	size_t i, j;
	int bad = 0, ok = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s <tests/vectors dir>\n", argv[0]);
		return 2;
	}
	if (sizeof(error_names) / sizeof(error_names[0]) != ZSHINT_E_COUNT) {
		fprintf(stderr, "ZSHINT_ERRORS has %lu names, ZSHINT_E_COUNT is %d\n",
			(unsigned long)(sizeof(error_names) / sizeof(error_names[0])), ZSHINT_E_COUNT);
		return 1;
	}
	for (i = 0; i < ZSHINT_VECTOR_COUNT; i++) {
		for (j = 0; j < i; j++) {
			if (strcmp(zshint_vectors[i].name, zshint_vectors[j].name) == 0) {
				fprintf(stderr, "duplicate vector name %s\n", zshint_vectors[i].name);
				bad++;
			}
		}
		bad += check_one(argv[1], &zshint_vectors[i]);
		ok += zshint_vectors[i].expect == ZSHINT_E_OK;
	}
	if (bad) {
		fprintf(stderr, "check_c_header: %d of %lu vectors do not match\n", bad,
			(unsigned long)ZSHINT_VECTOR_COUNT);
		return 1;
	}
	printf("check_c_header: %lu vectors (%d ok, %lu errors) match the .bin files\n",
	       (unsigned long)ZSHINT_VECTOR_COUNT, ok, (unsigned long)ZSHINT_VECTOR_COUNT - ok);
	return 0;
}
