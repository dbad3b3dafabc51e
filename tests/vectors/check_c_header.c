/* SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause */
/*
 * Proves zshint_vectors.h compiles as strict C99 and matches the .bin files
 * byte for byte, so C consumers (kernel KUnit, EDK2 host tests) test against
 * exactly the vectors the Rust decoder is checked against.
 *
 * Also proves zshint_text_vectors.h compiles, holds every vector of
 * text.json, and agrees with a third implementation of the text form
 * written here in plain C, the way a kernel consumer would: the kernel's
 * next_arg() tokenizer (lib/cmdline.c; isspace() as in lib/ctype.c), the
 * SMBIOS prefix match and a strict base64url decoder.
 *
 *   cc -std=c99 -Wall -Wextra -Werror -pedantic -o check check_c_header.c
 *   ./check tests/vectors
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

/* The kernel's isspace() (Latin-1 ctype): ASCII white space and 0xa0. */
static int text_isspace(unsigned char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r') || c == 0xa0;
}

static int text_sextet(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '-')
		return 62;
	if (c == '_')
		return 63;
	return -1;
}

/*
 * The value of the one "prezero.hint=" parameter before a "--" token, the
 * line split as the kernel's next_arg() splits it (without writing into
 * it): a '"' toggles quoting anywhere; a token that starts with '"' loses
 * it and, if it ends with '"', that one too; a value that starts with '"'
 * loses it and, if the token ends with '"', that one too.
 */
static int text_find_cmdline(const char *s, const char **text, size_t *len)
{
	size_t n = strlen(s), pos = 0, found = 0;

	while (pos < n && text_isspace((unsigned char)s[pos]))
		pos++;
	while (pos < n) {
		size_t args = pos, i, equals = 0, end, pend, vs = 0, ve = 0;
		int quoted = 0, in_quote = 0;

		if (s[args] == '"') {
			args++;
			quoted = in_quote = 1;
		}
		for (i = 0; args + i < n; i++) {
			unsigned char c = (unsigned char)s[args + i];

			if (text_isspace(c) && !in_quote)
				break;
			if (equals == 0 && c == '=')
				equals = i;
			if (c == '"')
				in_quote = !in_quote;
		}
		end = args + i;
		if (!equals) {
			pend = (quoted && i > 0 && s[end - 1] == '"') ? end - 1 : end;
		} else {
			pend = args + equals;
			vs = pend + 1;
			ve = end;
			if (vs < end && s[vs] == '"') {
				vs++;
				if (s[end - 1] == '"')
					ve = end - 1;
			}
			if (quoted && s[end - 1] == '"')
				ve = end - 1;
			if (ve < vs)
				ve = vs;
		}
		pos = end < n ? end + 1 : end;
		while (pos < n && text_isspace((unsigned char)s[pos]))
			pos++;
		if (!equals && pend - args == 2 && memcmp(s + args, "--", 2) == 0)
			break;
		/* A bare name (no '=') is the parameter with an empty text. */
		if (pend - args == 12 && memcmp(s + args, "prezero.hint", 12) == 0) {
			if (found++)
				return ZSHINT_TEXT_E_DUPLICATE;
			*text = s + vs;
			*len = ve - vs;
		}
	}
	return found ? ZSHINT_TEXT_E_OK : ZSHINT_TEXT_E_ABSENT;
}

static int text_find_smbios(const char *const *strings, unsigned int count, const char **text,
			    size_t *len)
{
	unsigned int i, found = 0;
	size_t plen = strlen(ZSHINT_TEXT_PREFIX);

	for (i = 0; i < count; i++) {
		if (strncmp(strings[i], ZSHINT_TEXT_PREFIX, plen) != 0)
			continue;
		if (found++)
			return ZSHINT_TEXT_E_DUPLICATE;
		*text = strings[i] + plen;
		*len = strlen(*text);
	}
	return found ? ZSHINT_TEXT_E_OK : ZSHINT_TEXT_E_ABSENT;
}

/* Strict base64url, no padding, canonical; the spec's order of checks. */
static int text_decode(const char *t, size_t len, unsigned char *out, size_t *out_len,
		       unsigned int *bad)
{
	size_t i, o = 0;
	unsigned long acc = 0;
	int bits = 0;

	if (len > ZSHINT_TEXT_MAX_CHARS)
		return ZSHINT_TEXT_E_TOO_LONG;
	for (i = 0; i < len; i++) {
		if (text_sextet((unsigned char)t[i]) < 0) {
			*bad = (unsigned int)i;
			return ZSHINT_TEXT_E_BAD_CHAR;
		}
	}
	if (len % 4 == 1)
		return ZSHINT_TEXT_E_BAD_LENGTH;
	for (i = 0; i < len; i++) {
		acc = (acc << 6) | (unsigned long)text_sextet((unsigned char)t[i]);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (unsigned char)(acc >> bits);
			acc &= (1UL << bits) - 1;
		}
	}
	if (acc != 0)
		return ZSHINT_TEXT_E_NON_CANONICAL;
	*out_len = o;
	return ZSHINT_TEXT_E_OK;
}

static int check_text(const struct zshint_text_vector *v, const char *json)
{
	char key[256];
	unsigned char buf[ZSHINT_TEXT_MAX_BYTES];
	const char *text = NULL;
	size_t len = 0, n = 0;
	unsigned int bad = 0;
	int rc;

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
	    (v->transport == ZSHINT_TEXT_CMDLINE && v->input_count != 1)) {
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
	if (v->transport == ZSHINT_TEXT_CMDLINE)
		rc = text_find_cmdline(v->input[0], &text, &len);
	else if (v->transport == ZSHINT_TEXT_SMBIOS)
		rc = text_find_smbios(v->input, v->input_count, &text, &len);
	else {
		fprintf(stderr, "%s: transport %d\n", v->name, v->transport);
		return 1;
	}
	if (rc == ZSHINT_TEXT_E_OK)
		rc = text_decode(text, len, buf, &n, &bad);
	if (rc != v->text_expect || (rc == ZSHINT_TEXT_E_BAD_CHAR && bad != v->text_index)) {
		fprintf(stderr, "%s: C found %s (index %u), the header says %s (index %u)\n", v->name,
			text_names[rc], bad, text_names[v->text_expect], v->text_index);
		return 1;
	}
	if (rc == ZSHINT_TEXT_E_OK && (n != v->len || (n && memcmp(buf, v->data, n) != 0))) {
		fprintf(stderr, "%s: C decoded %lu bytes that differ from the header's %u\n", v->name,
			(unsigned long)n, v->len);
		return 1;
	}
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

static int check_texts(const char *dir)
{
	size_t i, j, in_json = 0;
	int bad = 0;
	const char *p;
	char *json = read_json(dir);

	if (!json) {
		fprintf(stderr, "cannot read %s/text.json\n", dir);
		return 1;
	}
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
		bad += check_text(&zshint_text_vectors[i], json);
	}
	free(json);
	if (bad) {
		fprintf(stderr, "check_c_header: %d text vector problems\n", bad);
		return 1;
	}
	printf("check_c_header: %d text vectors agree with text.json and the C text decoder\n",
	       ZSHINT_TEXT_VECTOR_COUNT);
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
	return check_texts(argv[1]);
}
