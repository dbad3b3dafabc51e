/* SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause */
/*
 * Proves zshint_vectors.h compiles as strict C99 and matches the .bin files
 * byte for byte, so C consumers (kernel KUnit, EDK2 host tests) test against
 * exactly the vectors the Rust decoder is checked against.
 *
 * Also proves zshint_text_vectors.h compiles and holds every vector of
 * text.json, and writes its text vectors out as JSON so that
 * check_vectors.py --c-text holds each one (input, verdict, decoded bytes)
 * to text.json and to the one Python reference of the text form.
 *
 *   cc -std=c99 -Wall -Wextra -Werror -pedantic -o check check_c_header.c
 *   ./check tests/vectors text-header.json
 *   python3 check_vectors.py tests/vectors --c-text text-header.json
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zshint_vectors.h"
#include "zshint_text_vectors.h"

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

static const char *const text_names[] = {
#define ZSHINT_NAME(code, name) name,
	ZSHINT_TEXT_ERRORS(ZSHINT_NAME)
#undef ZSHINT_NAME
};

static void put_hex(FILE *out, const unsigned char *p, size_t n)
{
	size_t i;

	fputc('"', out);
	for (i = 0; i < n; i++)
		fprintf(out, "%02x", p[i]);
	fputc('"', out);
}

/*
 * Checks the fields of V that need no text decoder, and writes V to OUT as
 * one JSON object (strings and bytes in hex, results by name) for
 * check_vectors.py, which holds it to text.json and to the project's one
 * Python reference of the text form (tests/zstest/hint.py). A C
 * tokenizer and decoder here would be one more test-side copy of the ABI.
 */
static int dump_text(const struct zshint_text_vector *v, const char *json, FILE *out, int first)
{
	char key[256];
	unsigned int i;

	snprintf(key, sizeof(key), "\"name\": \"%s\", ", v->name);
	if (!strstr(json, key)) {
		fprintf(stderr, "%s: not in text.json\n", v->name);
		return 1;
	}
	if (v->text_expect < 0 || v->text_expect >= ZSHINT_TEXT_E_COUNT || v->expect < 0 ||
	    v->expect >= ZSHINT_E_COUNT) {
		fprintf(stderr, "%s: result code out of range\n", v->name);
		return 1;
	}
	if ((v->input == NULL) != (v->input_count == 0) ||
	    (v->transport == ZSHINT_TEXT_CMDLINE && v->input_count != 1) ||
	    (v->transport != ZSHINT_TEXT_CMDLINE && v->transport != ZSHINT_TEXT_SMBIOS)) {
		fprintf(stderr, "%s: bad input\n", v->name);
		return 1;
	}
	if ((v->text_expect != ZSHINT_TEXT_E_OK || v->len == 0) != (v->data == NULL) ||
	    (v->text_expect != ZSHINT_TEXT_E_OK &&
	     (v->len || v->expect != ZSHINT_E_OK || v->index)) ||
	    (v->text_expect != ZSHINT_TEXT_E_BAD_CHAR && v->text_index) ||
	    (v->expect < ZSHINT_E_BAD_ENTRY_FLAGS && v->index)) {
		fprintf(stderr, "%s: fields set that the results do not use\n", v->name);
		return 1;
	}
	fprintf(out, "%s{\"name\": \"%s\", \"transport\": \"%s\", \"input\": [", first ? "" : ",\n",
		v->name, v->transport == ZSHINT_TEXT_CMDLINE ? "cmdline" : "smbios");
	for (i = 0; i < v->input_count; i++) {
		if (i)
			fputs(", ", out);
		put_hex(out, (const unsigned char *)v->input[i], strlen(v->input[i]));
	}
	fprintf(out, "], \"text_expect\": \"%s\", \"text_index\": %u, \"data\": ",
		text_names[v->text_expect], v->text_index);
	put_hex(out, v->data, v->len);
	fprintf(out, ", \"expect\": \"%s\", \"index\": %u}", error_names[v->expect], v->index);
	return 0;
}

/* Reads text.json whole; NULL on failure. */
static char *read_json(const char *dir)
{
	char path[4096];
	char *buf;
	long size;
	FILE *f;

	snprintf(path, sizeof(path), "%s/text.json", dir);
	f = fopen(path, "rb");
	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
		fclose(f);
		return NULL;
	}
	buf = malloc((size_t)size + 1);
	if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	if (buf)
		buf[size] = '\0';
	return buf;
}

static int check_texts(const char *dir, const char *dump)
{
	size_t i, j, in_json = 0;
	int bad = 0;
	const char *p;
	char *json = read_json(dir);
	FILE *out;

	if (!json) {
		fprintf(stderr, "cannot read %s/text.json\n", dir);
		return 1;
	}
	out = fopen(dump, "w");
	if (!out) {
		fprintf(stderr, "cannot write %s\n", dump);
		free(json);
		return 1;
	}
	fputs("[\n", out);
	if (sizeof(text_names) / sizeof(text_names[0]) != ZSHINT_TEXT_E_COUNT) {
		fprintf(stderr, "ZSHINT_TEXT_ERRORS has %lu names, ZSHINT_TEXT_E_COUNT is %d\n",
			(unsigned long)(sizeof(text_names) / sizeof(text_names[0])), ZSHINT_TEXT_E_COUNT);
		bad++;
	}
	for (p = strstr(json, "\"transport\": "); p; p = strstr(p + 1, "\"transport\": "))
		in_json++;
	if (in_json != ZSHINT_TEXT_VECTOR_COUNT) {
		fprintf(stderr, "text.json has %lu vectors, zshint_text_vectors.h %d\n",
			(unsigned long)in_json, ZSHINT_TEXT_VECTOR_COUNT);
		bad++;
	}
	for (i = 0; i < ZSHINT_TEXT_VECTOR_COUNT; i++) {
		for (j = 0; j < i; j++) {
			if (strcmp(zshint_text_vectors[i].name, zshint_text_vectors[j].name) == 0) {
				fprintf(stderr, "duplicate text vector name %s\n", zshint_text_vectors[i].name);
				bad++;
			}
		}
		bad += dump_text(&zshint_text_vectors[i], json, out, i == 0);
	}
	fputs("\n]\n", out);
	if (fclose(out) != 0) {
		fprintf(stderr, "cannot write %s\n", dump);
		bad++;
	}
	free(json);
	if (bad) {
		fprintf(stderr, "check_c_header: %d text vector problems\n", bad);
		return 1;
	}
	printf("check_c_header: %d text vectors written to %s (check_vectors.py --c-text %s "
	       "checks them)\n", ZSHINT_TEXT_VECTOR_COUNT, dump, dump);
	return 0;
}

int main(int argc, char **argv)
{
	size_t i, j;
	int bad = 0, ok = 0;

	if (argc != 3) {
		fprintf(stderr, "usage: %s <tests/vectors dir> <text vectors out.json>\n", argv[0]);
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
	return check_texts(argv[1], argv[2]);
}
