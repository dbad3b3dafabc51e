/*
 * Host unit tests of ZeroHintLib (firmware/ZeroStartPkg/Library/ZeroHintLib),
 * built with plain gcc and -DZSHINT_HOST, no EDK2:
 *   - validation against every golden vector in tests/vectors (result code,
 *     spec name and entry index; the RAM check for vectors with a RAM map);
 *   - the text form against every text vector (zshint_text_vectors.h): the
 *     SMBIOS vectors' OEM strings packed into SMBIOS structure tables (one
 *     type 11 structure, one per string, behind 3.0 and 2.x entry points)
 *     and the command-line vectors' text (cut out as the kernel's
 *     next_arg() does) as an OEM string: find, decode, validate, compared
 *     with text_expect, text_index, the bytes, expect and index;
 *   - malformed SMBIOS entry points and structure tables (refused, never
 *     read past: every table is an exact-size heap block under ASan),
 *     including every truncation of a valid table and random bytes;
 *   - CRC-32 and encode/decode round trips of the ok vectors;
 *   - range arithmetic (intersection, subtraction, merging, alignment,
 *     trimming, overflow at the top of the address space), by hand-picked
 *     cases and by a randomized comparison with a page bitmap model placed
 *     both at address 0 and at the very top of the 64-bit space.
 * Prints one line per failure and a summary; exits non-zero on failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <Library/ZeroHintLib.h>

#include "zshint_vectors.h"
#include "zshint_text_vectors.h"

static unsigned failures;
static unsigned checks;

#define CHECK(cond, ...)                                                  \
  do {                                                                    \
    checks++;                                                             \
    if (!(cond)) {                                                        \
      failures++;                                                         \
      printf ("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);             \
      printf (__VA_ARGS__);                                               \
      printf ("\n");                                                      \
    }                                                                     \
  } while (0)

#define X_NAME(code, name)  { ZSHINT_E_##code, name },
static const struct {
  int           code;
  const char    *name;
} spec_names[] = { ZSHINT_ERRORS (X_NAME) };

static void
test_names (void)
{
  size_t  i;

  CHECK (ZSHINT_E_COUNT == ZeroHintStatusCount, "%d codes vs %d", ZSHINT_E_COUNT, (int)ZeroHintStatusCount);
  for (i = 0; i < sizeof (spec_names) / sizeof (spec_names[0]); i++) {
    CHECK (
      strcmp (ZeroHintStatusName ((ZERO_HINT_STATUS)spec_names[i].code), spec_names[i].name) == 0,
      "code %d: ours %s, spec %s",
      spec_names[i].code,
      ZeroHintStatusName ((ZERO_HINT_STATUS)spec_names[i].code),
      spec_names[i].name
      );
  }
}

static void
test_vectors (void)
{
  size_t  i;

  for (i = 0; i < ZSHINT_VECTOR_COUNT; i++) {
    const struct zshint_vector  *v = &zshint_vectors[i];
    UINT32                      count = 0, flags = 0, bad = 0;
    ZERO_HINT_STATUS            st;

    st = ZeroHintValidate (v->data, v->len, (BOOLEAN)(v->exact != 0), &count, &flags, &bad);
    if ((st == ZeroHintOk) && v->has_ram) {
      ZERO_RANGE  ram[64];
      UINTN       n = 0;
      unsigned    r;

      for (r = 0; r < v->ram_count && n < 64; r++) {
        if (ZeroRangeMake (v->ram[r][0], v->ram[r][1], FALSE, &ram[n])) {
          n++;
        }
      }

      n  = ZeroRangesNormalize (ram, n);
      st = ZeroHintCheckRam (v->data, count, ram, n, &bad);
    }

    CHECK (
      (int)st == v->expect,
      "vector %s: got %s, expected %s",
      v->name,
      ZeroHintStatusName (st),
      ZeroHintStatusName ((ZERO_HINT_STATUS)v->expect)
      );
    if ((v->index >= 0) && ((int)st == v->expect)) {
      CHECK ((int)bad == v->index, "vector %s: entry %u, expected %d", v->name, bad, v->index);
    }
  }
}

static void
test_crc_and_roundtrip (void)
{
  size_t  i;

  CHECK (ZeroHintCrc32Update (0, "123456789", 9) == 0xCBF43926u, "crc32 check value");
  CHECK (ZeroHintCrc32Update (ZeroHintCrc32Update (0, "1234", 4), "56789", 5) == 0xCBF43926u, "crc32 continued");

  for (i = 0; i < ZSHINT_VECTOR_COUNT; i++) {
    const struct zshint_vector  *v = &zshint_vectors[i];
    UINT32                      count, flags, bad, e;
    ZERO_RANGE                  ranges[ZSHINT_MAX_ENTRIES];
    static UINT8                out[ZSHINT_MAX_SIZE];
    UINTN                       size;
    ZERO_HINT_ENTRY             entry;

    if ((v->expect != ZSHINT_E_OK) || !v->exact ||
        (ZeroHintValidate (v->data, v->len, TRUE, &count, &flags, &bad) != ZeroHintOk) || (flags != 0))
    {
      continue;
    }

    for (e = 0; e < count; e++) {
      ZeroHintGetEntry (v->data, e, &entry);
      CHECK (ZeroRangeMake (entry.Start, entry.Length, FALSE, &ranges[e]), "%s entry %u", v->name, e);
    }

    // Adjacent entries with different page shifts would take the smaller
    // shift; skip those vectors for the byte-exact comparison.
    {
      int  adjacent = 0;

      for (e = 1; e < count; e++) {
        adjacent |= (ranges[e].Start == ranges[e - 1].Last + 1);
      }

      if (adjacent) {
        continue;
      }
    }

    size = ZeroHintEncode (ranges, count, v->data, count, out, sizeof (out));
    CHECK (size == v->len, "%s: encoded %zu bytes, expected %lu", v->name, (size_t)size, v->len);
    CHECK (size == v->len && memcmp (out, v->data, size) == 0, "%s: encoding differs", v->name);
  }

  {
    ZERO_RANGE  r[2] = {
      { 0x1000, 0x2fff }, { 0x10000, 0x1ffff }
    };
    UINT8       buf[ZSHINT_HEADER_SIZE + 2 * ZSHINT_ENTRY_SIZE];
    UINT32      count, flags, bad;

    CHECK (ZeroHintEncode (r, 2, NULL, 0, buf, sizeof (buf) - 1) == 0, "too small buffer");
    CHECK (ZeroHintEncode (r, 2, NULL, 0, buf, sizeof (buf)) == sizeof (buf), "encode");
    CHECK (ZeroHintValidate (buf, sizeof (buf), TRUE, &count, &flags, &bad) == ZeroHintOk && count == 2 && flags == 0, "encoded validates");
    r[1].Last = 0x1f000;  // not whole pages
    CHECK (ZeroHintEncode (r, 2, NULL, 0, buf, sizeof (buf)) == 0, "unaligned range refused");
    r[1].Start = 0xfffffffffffff000ull;
    r[1].Last  = ~0ull;   // end 2^64
    CHECK (ZeroHintEncode (r, 2, NULL, 0, buf, sizeof (buf)) == 0, "end 2^64 refused");
  }
}

static int
same (const ZERO_RANGE *a, UINTN na, const ZERO_RANGE *b, UINTN nb)
{
  UINTN  i;

  if (na != nb) {
    return 0;
  }

  for (i = 0; i < na; i++) {
    if ((a[i].Start != b[i].Start) || (a[i].Last != b[i].Last)) {
      return 0;
    }
  }

  return 1;
}

#define MAXU  0xffffffffffffffffull

static void
test_ranges_fixed (void)
{
  ZERO_RANGE  r[8], out[8];
  UINTN       n;
  UINT64      removed;
  BOOLEAN     ok;

  // Make
  CHECK (!ZeroRangeMake (5, 0, TRUE, &r[0]), "empty");
  CHECK (ZeroRangeMake (MAXU - 4095, 4096, FALSE, &r[0]) && r[0].Last == MAXU, "ends exactly at 2^64-1");
  CHECK (!ZeroRangeMake (MAXU - 4095, 8192, FALSE, &r[0]), "overflow refused");
  CHECK (ZeroRangeMake (MAXU - 4095, 8192, TRUE, &r[0]) && r[0].Last == MAXU, "overflow clamped");
  CHECK (ZeroRangeMake (0, MAXU, FALSE, &r[0]) && r[0].Last == MAXU - 1, "almost everything");

  // Normalize: unsorted, overlapping, adjacent, contained, ending at MAX
  r[0] = (ZERO_RANGE){ 100, 199 };
  r[1] = (ZERO_RANGE){ 0, 49 };
  r[2] = (ZERO_RANGE){ 200, 299 };    // adjacent to r0
  r[3] = (ZERO_RANGE){ 120, 130 };    // contained
  r[4] = (ZERO_RANGE){ MAXU - 10, MAXU };
  r[5] = (ZERO_RANGE){ MAXU - 20, MAXU - 5 };
  n    = ZeroRangesNormalize (r, 6);
  {
    ZERO_RANGE  want[] = {
      { 0, 49 }, { 100, 299 }, { MAXU - 20, MAXU }
    };
    CHECK (same (r, n, want, 3), "normalize got %zu ranges", (size_t)n);
  }

  // Intersect with a range touching one byte, and capacity truncation
  {
    ZERO_RANGE  a[] = {
      { 0, 99 }, { 200, 299 }, { MAXU - 99, MAXU }
    };
    ZERO_RANGE  b[] = {
      { 99, 200 }, { MAXU, MAXU }
    };
    ZERO_RANGE  want[] = {
      { 99, 99 }, { 200, 200 }, { MAXU, MAXU }
    };
    ok = ZeroRangesIntersect (a, 3, b, 2, out, 8, &n);
    CHECK (ok && same (out, n, want, 3), "intersect got %zu", (size_t)n);
    ok = ZeroRangesIntersect (a, 3, b, 2, out, 2, &n);
    CHECK (!ok && same (out, n, want, 2), "intersect truncated is a prefix");
  }

  // Subtract: split, remove all, multiple B inside one A, edges 0 and MAX
  {
    ZERO_RANGE  a[] = {
      { 0, 999 }, { 2000, 2999 }, { MAXU - 999, MAXU }
    };
    ZERO_RANGE  b[] = {
      { 0, 9 }, { 100, 199 }, { 300, 399 }, { 1500, 3500 }, { MAXU, MAXU }
    };
    ZERO_RANGE  want[] = {
      { 10, 99 }, { 200, 299 }, { 400, 999 }, { MAXU - 999, MAXU - 1 }
    };
    ok = ZeroRangesSubtract (a, 3, b, 5, out, 8, &n);
    CHECK (ok && same (out, n, want, 4), "subtract got %zu", (size_t)n);
    ok = ZeroRangesSubtract (a, 3, b, 5, out, 3, &n);
    CHECK (!ok && same (out, n, want, 3), "subtract truncated is a prefix");
  }

  // Align inward
  r[0] = (ZERO_RANGE){ 0x1001, 0x3fff };       // -> 0x2000..0x3fff
  r[1] = (ZERO_RANGE){ 0x5000, 0x5ffe };       // less than a page -> gone
  r[2] = (ZERO_RANGE){ 0x7fff, 0x9000 };       // -> 0x8000..0x8fff
  r[3] = (ZERO_RANGE){ MAXU - 4094, MAXU };    // start rounds past 2^64 -> gone
  r[4] = (ZERO_RANGE){ MAXU - 8191, MAXU };    // whole top two pages stay
  r[5] = (ZERO_RANGE){ 0, 0xffe };             // Last < page -> gone
  n    = ZeroRangesAlignInward (r, 6);
  {
    ZERO_RANGE  want[] = {
      { 0x2000, 0x3fff }, { 0x8000, 0x8fff }, { MAXU - 8191, MAXU }
    };
    CHECK (same (r, n, want, 3), "align inward got %zu", (size_t)n);
  }

  // Align outward merges neighbours that now touch
  r[0] = (ZERO_RANGE){ 0x1800, 0x1900 };
  r[1] = (ZERO_RANGE){ 0x2100, 0x2200 };
  r[2] = (ZERO_RANGE){ MAXU - 5, MAXU - 5 };
  n    = ZeroRangesAlignOutward (r, 3);
  {
    ZERO_RANGE  want[] = {
      { 0x1000, 0x2fff }, { MAXU - 4095, MAXU }
    };
    CHECK (same (r, n, want, 2), "align outward got %zu", (size_t)n);
  }

  // Total saturates
  r[0] = (ZERO_RANGE){ 0, MAXU };
  CHECK (ZeroRangesTotal (r, 1) == MAXU, "total of everything saturates");
  r[0] = (ZERO_RANGE){ 0, 4095 };
  r[1] = (ZERO_RANGE){ 8192, 16383 };
  CHECK (ZeroRangesTotal (r, 2) == 12288, "total");

  // TrimTop: from the highest range at or below the limit, downward
  r[0] = (ZERO_RANGE){ 0x100000, 0x1fffff };
  r[1] = (ZERO_RANGE){ 0x300000, 0x3fffff };
  r[2] = (ZERO_RANGE){ 0x500000, 0x5fffff };   // above the limit: untouched
  n    = ZeroRangesTrimTop (r, 3, 8, 0x4fffff, 0x180000, &removed);
  {
    ZERO_RANGE  want[] = {
      { 0x100000, 0x17ffff }, { 0x500000, 0x5fffff }
    };
    CHECK (removed == 0x180000 && same (r, n, want, 2), "trim got %zu removed %llx", (size_t)n, (unsigned long long)removed);
  }

  // TrimTop of a range straddling the limit: split when there is room...
  r[0] = (ZERO_RANGE){ 0x100000, 0x4fffff };
  n    = ZeroRangesTrimTop (r, 1, 2, 0x2fffff, 0x100000, &removed);
  {
    ZERO_RANGE  want[] = {
      { 0x100000, 0x1fffff }, { 0x300000, 0x4fffff }
    };
    CHECK (removed == 0x100000 && same (r, n, want, 2), "trim straddling split got %zu", (size_t)n);
  }

  // ...and drop the upper part when there is not (more removed: safe)
  r[0] = (ZERO_RANGE){ 0x100000, 0x4fffff };
  n    = ZeroRangesTrimTop (r, 1, 1, 0x2fffff, 0x100000, &removed);
  {
    ZERO_RANGE  want[] = {
      { 0x100000, 0x1fffff }
    };
    CHECK (same (r, n, want, 1), "trim straddling without room got %zu", (size_t)n);
  }

  // Asking for more than there is removes everything at or below the limit
  r[0] = (ZERO_RANGE){ 0x100000, 0x1fffff };
  n    = ZeroRangesTrimTop (r, 1, 1, MAXU, 0x10000000, &removed);
  CHECK (n == 0 && removed == 0x100000, "trim all");
}

/*
 * Randomized model check: ranges over a window of W pages placed at Base
 * (0 or the top of the address space). The model is a bitmap per page
 * (ranges are page granular here so the bitmap stays small; sub-page
 * alignment is covered by the fixed cases above).
 */
#define W   256
#define PG  4096ull

static unsigned long long  rng_state = 0x2545F4914F6CDD1Dull;

static unsigned
rnd (unsigned n)
{
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (unsigned)(rng_state % n);
}

static UINTN
random_set (ZERO_RANGE *r, unsigned char *bits, UINT64 base)
{
  unsigned  k, count = rnd (6);
  UINTN     n        = 0;

  memset (bits, 0, W);
  for (k = 0; k < count; k++) {
    unsigned  s   = rnd (W);
    unsigned  len = 1 + rnd (W - s);
    unsigned  p;

    r[n].Start = base + s * PG;
    r[n].Last  = base + (UINT64)(s + len) * PG - 1;
    n++;
    for (p = s; p < s + len; p++) {
      bits[p] = 1;
    }
  }

  return ZeroRangesNormalize (r, n);
}

static int
matches (const ZERO_RANGE *r, UINTN n, const unsigned char *bits, UINT64 base)
{
  unsigned char  got[W];
  UINTN          i;
  unsigned       p;

  memset (got, 0, sizeof (got));
  for (i = 0; i < n; i++) {
    if ((r[i].Start < base) || ((r[i].Start - base) % PG != 0) || ((r[i].Last - base + 1) % PG != 0)) {
      return 0;
    }

    if ((i > 0) && (r[i].Start <= r[i - 1].Last)) {
      return 0;        // not sorted / overlapping
    }

    for (p = (unsigned)((r[i].Start - base) / PG); p <= (r[i].Last - base) / PG; p++) {
      got[p] = 1;
    }
  }

  return memcmp (got, bits, W) == 0;
}

static void
test_ranges_model (void)
{
  int     iter;
  UINT64  bases[2] = { 0, 0ull - W * PG };   // window ending exactly at 2^64

  for (iter = 0; iter < 20000; iter++) {
    UINT64         base = bases[iter & 1];
    ZERO_RANGE     a[8], b[8], out[32];
    unsigned char  ab[W], bb[W], want[W];
    UINTN          na, nb, n;
    unsigned       p;

    na = random_set (a, ab, base);
    nb = random_set (b, bb, base);

    CHECK (matches (a, na, ab, base), "normalize model, iter %d", iter);

    CHECK (ZeroRangesIntersect (a, na, b, nb, out, 32, &n), "intersect complete");
    for (p = 0; p < W; p++) {
      want[p] = ab[p] & bb[p];
    }

    CHECK (matches (out, n, want, base), "intersect model, iter %d base %llx", iter, (unsigned long long)base);

    CHECK (ZeroRangesSubtract (a, na, b, nb, out, 32, &n), "subtract complete");
    for (p = 0; p < W; p++) {
      want[p] = ab[p] & !bb[p];
    }

    CHECK (matches (out, n, want, base), "subtract model, iter %d base %llx", iter, (unsigned long long)base);

    // Union via normalize of the concatenation
    memcpy (out, a, na * sizeof (ZERO_RANGE));
    memcpy (out + na, b, nb * sizeof (ZERO_RANGE));
    n = ZeroRangesNormalize (out, na + nb);
    for (p = 0; p < W; p++) {
      want[p] = ab[p] | bb[p];
    }

    CHECK (matches (out, n, want, base), "union model, iter %d", iter);

    // TrimTop below a random limit removes exactly the highest pages
    {
      unsigned  lim  = rnd (W);
      unsigned  take = rnd (W);
      UINT64    removed;
      unsigned  left = take;

      memcpy (out, a, na * sizeof (ZERO_RANGE));
      n = ZeroRangesTrimTop (out, na, 32, base + (UINT64)(lim + 1) * PG - 1, (UINT64)take * PG, &removed);
      memcpy (want, ab, W);
      for (p = lim + 1; p-- > 0 && left > 0;) {
        if (want[p]) {
          want[p] = 0;
          left--;
        }
      }

      CHECK (removed == (UINT64)(take - left) * PG, "trim removed, iter %d", iter);
      CHECK (matches (out, n, want, base), "trim model, iter %d", iter);
    }
  }
}

/*
 * The text form and SMBIOS.
 */
#define X_TEXT_NAME(code, name)  { ZSHINT_TEXT_E_##code, name },
static const struct {
  int           code;
  const char    *name;
} text_spec_names[] = { ZSHINT_TEXT_ERRORS (X_TEXT_NAME) };

static unsigned  text_vectors_smbios;
static unsigned  text_vectors_cmdline;

static void
test_text_names (void)
{
  size_t  i;
  int     s;

  CHECK (ZSHINT_TEXT_E_COUNT == ZeroHintTextStatusCount, "%d text codes vs %d", ZSHINT_TEXT_E_COUNT, (int)ZeroHintTextStatusCount);
  CHECK (ZSHINT_TEXT_MAX_CHARS == 1024 && ZSHINT_TEXT_MAX_BYTES == 768, "text limits");
  CHECK (strcmp (ZSHINT_TEXT_PREFIX, "prezero.hint=") == 0 && strlen (ZSHINT_TEXT_PREFIX) == ZSHINT_TEXT_PREFIX_LENGTH, "prefix");
  for (i = 0; i < sizeof (text_spec_names) / sizeof (text_spec_names[0]); i++) {
    CHECK (
      strcmp (ZeroHintTextStatusName ((ZERO_HINT_TEXT_STATUS)text_spec_names[i].code), text_spec_names[i].name) == 0,
      "text code %d: ours %s, spec %s",
      text_spec_names[i].code,
      ZeroHintTextStatusName ((ZERO_HINT_TEXT_STATUS)text_spec_names[i].code),
      text_spec_names[i].name
      );
  }

  for (s = 0; s < ZeroSmbiosStatusCount; s++) {
    CHECK (strcmp (ZeroSmbiosStatusName ((ZERO_SMBIOS_STATUS)s), "Unknown") != 0, "smbios status %d has a name", s);
  }

  CHECK (strcmp (ZeroSmbiosStatusName (ZeroSmbiosStatusCount), "Unknown") == 0, "smbios status out of range");
  CHECK (strcmp (ZeroHintTextStatusName (ZeroHintTextStatusCount), "Unknown") == 0, "text status out of range");
}

/* A growable byte buffer for building SMBIOS tables. */
struct buf {
  unsigned char    *p;
  size_t           len, cap;
};

static void
put (struct buf *b, const void *data, size_t n)
{
  if (n == 0) {
    return;
  }

  if (b->len + n > b->cap) {
    b->cap = (b->len + n) * 2 + 64;
    b->p   = realloc (b->p, b->cap);
    if (b->p == NULL) {
      abort ();
    }
  }

  memcpy (b->p + b->len, data, n);
  b->len += n;
}

static void
put_byte (struct buf *b, unsigned char c)
{
  put (b, &c, 1);
}

/* A structure: formatted area (type, length, handle, extra), then strings. */
static void
put_structure (struct buf *b, unsigned char type, const unsigned char *extra, unsigned char extra_len,
               const char *const *strings, unsigned count)
{
  static unsigned short  handle;
  unsigned               i;

  put_byte (b, type);
  put_byte (b, (unsigned char)(4 + extra_len));
  handle++;
  put (b, &handle, 2);
  put (b, extra, extra_len);
  for (i = 0; i < count; i++) {
    put (b, strings[i], strlen (strings[i]) + 1);
  }

  if (count == 0) {
    put_byte (b, 0);
  }

  put_byte (b, 0);
}

static void
put_oem (struct buf *b, const char *const *strings, unsigned count)
{
  unsigned char  n = (unsigned char)count;

  put_structure (b, 11, &n, 1, strings, count);
}

/* A table as a VMM writes it: BIOS information, system information, the
 * OEM strings (one type 11 structure, or one per string when split), end. */
static struct buf
oem_table (const char *const *strings, unsigned count, int split)
{
  static const char *const  bios[]   = { "zerostart-test", "1.0" };
  static const char *const  sys[]    = { "acme", "prezero.hint=not-an-oem-string" };
  unsigned char             bios_f[] = { 1, 2, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
  unsigned char             sys_f[]  = { 1, 2, 0, 0 };
  struct buf                b        = { 0 };
  unsigned                  i;

  put_structure (&b, 0, bios_f, sizeof (bios_f), bios, 2);
  put_structure (&b, 1, sys_f, sizeof (sys_f), sys, 2);
  if (split) {
    for (i = 0; i < count; i++) {
      put_oem (&b, strings + i, 1);
    }
  } else if (count > 0) {
    put_oem (&b, strings, count);
  }

  put_structure (&b, 127, NULL, 0, NULL, 0);
  return b;
}

/* An exact-size heap copy, so that ASan sees any read past the end. */
static unsigned char *
exact (const unsigned char *p, size_t n)
{
  unsigned char  *q = malloc (n ? n : 1);

  if (q == NULL) {
    abort ();
  }

  memcpy (q, p, n);
  return q;
}

/* Sets *bytes (malloc'd), *len and *bad; returns the text status. Fails a
 * check when the table itself is refused. */
static ZERO_HINT_TEXT_STATUS
find_and_decode (const char *what, const unsigned char *table, size_t len, unsigned char *out, UINTN *out_len, UINT32 *bad)
{
  unsigned char          *t = exact (table, len);
  ZERO_HINT_TEXT_STATUS  ts;
  ZERO_SMBIOS_STATUS     ss;
  const CHAR8            *text;
  UINTN                  text_len;

  *out_len = 0;
  *bad     = 0;
  ss       = ZeroSmbiosFindHintText (t, len, &ts, &text, &text_len);
  CHECK (ss == ZeroSmbiosOk, "%s: table refused: %s", what, ZeroSmbiosStatusName (ss));
  if (ts == ZeroHintTextOk) {
    CHECK (text != NULL && text >= (const CHAR8 *)t && text + text_len <= (const CHAR8 *)t + len, "%s: text outside the table", what);
    ts = ZeroHintTextDecode (text, text_len, out, ZSHINT_TEXT_MAX_BYTES, out_len, bad);
  } else {
    CHECK (text == NULL && text_len == 0, "%s: text given with %s", what, ZeroHintTextStatusName (ts));
  }

  free (t);
  return ts;
}

/* Compare one text result with a vector's expectations. */
static void
check_text_result (const char *what, const struct zshint_text_vector *v, ZERO_HINT_TEXT_STATUS ts, const unsigned char *out,
                   UINTN out_len, UINT32 bad)
{
  ZERO_HINT_STATUS  st;
  UINT32            count, flags, entry = 0;

  CHECK (
    (int)ts == v->text_expect,
    "%s %s: text %s, expected %s",
    v->name,
    what,
    ZeroHintTextStatusName (ts),
    ZeroHintTextStatusName ((ZERO_HINT_TEXT_STATUS)v->text_expect)
    );
  if ((int)ts != v->text_expect) {
    return;
  }

  if (ts == ZeroHintTextBadChar) {
    CHECK (bad == v->text_index, "%s %s: bad character at %u, expected %u", v->name, what, bad, v->text_index);
  }

  if (ts != ZeroHintTextOk) {
    return;
  }

  CHECK (out_len == v->len && (out_len == 0 || memcmp (out, v->data, out_len) == 0), "%s %s: decoded %zu bytes, expected %u", v->name, what, (size_t)out_len, v->len);
  // The text gives the exact length: validate with a transport length.
  st = ZeroHintValidate (out, out_len, TRUE, &count, &flags, &entry);
  CHECK (
    (int)st == v->expect,
    "%s %s: hint %s, expected %s",
    v->name,
    what,
    ZeroHintStatusName (st),
    ZeroHintStatusName ((ZERO_HINT_STATUS)v->expect)
    );
  if (((int)st == v->expect) && (v->expect >= ZSHINT_E_BAD_ENTRY_FLAGS)) {
    CHECK (entry == v->index, "%s %s: entry %u, expected %u", v->name, what, entry, v->index);
  }
}

/* Put TABLE behind an entry point in a fake BIOS area at 0xF0000 and find
 * it again through the entry point: the table must come back unchanged. */
static void
area_with_table (unsigned char *area, const unsigned char *table, size_t len, int v3, size_t ep_offset)
{
  unsigned char  *ep   = area + ep_offset;
  UINT64         taddr = 0xF0000 + 0x1000;
  unsigned       i;
  unsigned char  sum;

  memset (area, 0, ZSHINT_SMBIOS_AREA_SIZE);
  memcpy (area + 0x1000, table, len);
  if (v3) {
    memcpy (ep, "_SM3_", 5);
    ep[6]  = 0x18;
    ep[7]  = 3;
    ep[8]  = 2;
    ep[10] = 1;
    memcpy (ep + 0x0C, &(UINT32){ (UINT32)len }, 4);
    memcpy (ep + 0x10, &taddr, 8);
    for (sum = 0, i = 0; i < 0x18; i++) {
      sum += ep[i];
    }

    ep[5] = (unsigned char)-sum;
  } else {
    memcpy (ep, "_SM_", 4);
    ep[5] = 0x1F;
    ep[6] = 2;
    ep[7] = 8;
    memcpy (ep + 0x10, "_DMI_", 5);
    memcpy (ep + 0x16, &(unsigned short){ (unsigned short)len }, 2);
    memcpy (ep + 0x18, &(UINT32){ (UINT32)taddr }, 4);
    ep[0x1C] = 4;
    for (sum = 0, i = 0x10; i < 0x1F; i++) {
      sum += ep[i];
    }

    ep[0x15] = (unsigned char)-sum;
    for (sum = 0, i = 0; i < 0x1F; i++) {
      sum += ep[i];
    }

    ep[4] = (unsigned char)-sum;
  }
}

static ZERO_SMBIOS_STATUS
find_ep (const unsigned char *area, size_t area_len, UINT64 *addr, UINTN *len)
{
  unsigned char       *a = exact (area, area_len);
  ZERO_SMBIOS_STATUS  st;

  *addr = 0;
  *len  = 0;
  st    = ZeroSmbiosFindEntryPoint (a, area_len, addr, len);
  free (a);
  return st;
}

static void
test_text_smbios_vectors (void)
{
  static unsigned char  area[ZSHINT_SMBIOS_AREA_SIZE];
  size_t                i;
  int                   layout;

  for (i = 0; i < ZSHINT_TEXT_VECTOR_COUNT; i++) {
    const struct zshint_text_vector  *v = &zshint_text_vectors[i];
    unsigned char                    out[ZSHINT_TEXT_MAX_BYTES];
    UINTN                            out_len;
    UINT32                           bad;
    ZERO_HINT_TEXT_STATUS            ts;

    if (v->transport != ZSHINT_TEXT_SMBIOS) {
      continue;
    }

    text_vectors_smbios++;
    for (layout = 0; layout < 2; layout++) {
      struct buf  b = oem_table (v->input, v->input_count, layout);
      char        what[64];

      snprintf (what, sizeof (what), "(%s)", layout ? "one type 11 per string" : "one type 11");
      ts = find_and_decode (what, b.p, b.len, out, &out_len, &bad);
      check_text_result (what, v, ts, out, out_len, bad);

      // The same table behind each kind of entry point, found by the scan.
      {
        int  v3;

        for (v3 = 0; v3 < 2; v3++) {
          UINT64              addr;
          UINTN               len;
          ZERO_SMBIOS_STATUS  st;

          area_with_table (area, b.p, b.len, v3, v3 ? 0x20 : 0x7F0);
          st = find_ep (area, sizeof (area), &addr, &len);
          CHECK (st == ZeroSmbiosOk && addr == 0xF1000 && len == b.len, "%s %s: %s entry point: %s", v->name, what, v3 ? "3.0" : "2.x", ZeroSmbiosStatusName (st));
          if (st == ZeroSmbiosOk && addr == 0xF1000 && len == b.len) {
            snprintf (what, sizeof (what), "(%s, %s entry point)", layout ? "split" : "one type 11", v3 ? "3.0" : "2.x");
            ts = find_and_decode (what, area + (addr - 0xF0000), len, out, &out_len, &bad);
            check_text_result (what, v, ts, out, out_len, bad);
          }
        }
      }

      free (b.p);
    }
  }
}

/*
 * The text of the one "prezero.hint" parameter of a command line before a
 * "--" token, as the kernel's next_arg() (lib/cmdline.c) splits the line, so
 * that the command-line vectors' decoding part can run through the
 * firmware's SMBIOS path too. Returns the text status of finding it.
 */
static int
k_isspace (unsigned char c)
{
  return c == ' ' || (c >= '\t' && c <= '\r') || c == 0xa0;
}

static ZERO_HINT_TEXT_STATUS
cmdline_text (const char *line, const char **text, size_t *text_len)
{
  size_t    n = strlen (line), pos = 0;
  unsigned  found = 0;

  while (pos < n && k_isspace ((unsigned char)line[pos])) {
    pos++;
  }

  while (pos < n) {
    const char  *a     = line + pos;
    size_t      i      = 0, eq = 0, name_end, vs = 0, ve = 0;
    int         quoted = 0, in_quote = 0;

    if (*a == '"') {
      a++;
      pos++;
      quoted = in_quote = 1;
    }

    for (i = 0; pos + i < n; i++) {
      if (k_isspace ((unsigned char)a[i]) && !in_quote) {
        break;
      }

      if ((eq == 0) && (a[i] == '=')) {
        eq = i;     // an '=' at index 0 does not count, as in the kernel
      }

      if (a[i] == '"') {
        in_quote = !in_quote;
      }
    }

    name_end = eq ? eq : i;
    if (!eq && quoted && (i > 0) && (a[i - 1] == '"')) {
      name_end = i - 1;
    }

    if (eq) {
      vs = eq + 1;
      ve = i;
      if ((vs < i) && (a[vs] == '"')) {
        vs++;
        if (a[i - 1] == '"') {
          ve = i - 1;
        }
      }

      if (quoted && (a[i - 1] == '"')) {
        ve = i - 1;
      }

      if (ve < vs) {
        ve = vs;
      }
    }

    pos += i + (pos + i < n ? 1 : 0);
    while (pos < n && k_isspace ((unsigned char)line[pos])) {
      pos++;
    }

    if (!eq && (name_end == 2) && (memcmp (a, "--", 2) == 0)) {
      break;
    }

    if ((name_end == 12) && (memcmp (a, "prezero.hint", 12) == 0)) {
      if (found++) {
        return ZeroHintTextDuplicate;
      }

      *text     = a + vs;       // a bare name is the empty text
      *text_len = eq ? ve - vs : 0;
    }
  }

  return found ? ZeroHintTextOk : ZeroHintTextAbsent;
}

static void
test_text_cmdline_vectors (void)
{
  size_t  i;

  for (i = 0; i < ZSHINT_TEXT_VECTOR_COUNT; i++) {
    const struct zshint_text_vector  *v = &zshint_text_vectors[i];
    const char                       *text = NULL;
    size_t                           text_len = 0;
    unsigned char                    out[ZSHINT_TEXT_MAX_BYTES];
    UINTN                            out_len = 0;
    UINT32                           bad     = 0;
    ZERO_HINT_TEXT_STATUS            ts;

    if (v->transport != ZSHINT_TEXT_CMDLINE) {
      continue;
    }

    text_vectors_cmdline++;
    ts = cmdline_text (v->input[0], &text, &text_len);
    if (ts == ZeroHintTextOk) {
      // The same text as the firmware's transport carries it.
      char                *s = malloc (ZSHINT_TEXT_PREFIX_LENGTH + text_len + 1);
      const char *const   strings[1] = { s };
      struct buf          b;

      memcpy (s, ZSHINT_TEXT_PREFIX, ZSHINT_TEXT_PREFIX_LENGTH);
      memcpy (s + ZSHINT_TEXT_PREFIX_LENGTH, text, text_len);
      s[ZSHINT_TEXT_PREFIX_LENGTH + text_len] = 0;
      b                                       = oem_table (strings, 1, 0);
      ts                                      = find_and_decode ("(command-line text as OEM string)", b.p, b.len, out, &out_len, &bad);
      free (b.p);
      free (s);
    }

    check_text_result ("(command-line text as OEM string)", v, ts, out, out_len, bad);
  }
}

/* The decoder alone: the ABI's order when several rules break at once. */
static void
test_text_decode (void)
{
  unsigned char  out[ZSHINT_TEXT_MAX_BYTES];
  char           t[ZSHINT_TEXT_MAX_CHARS + 2];
  UINTN          n;
  UINT32         bad;

  CHECK (ZeroHintTextDecode (NULL, 0, out, sizeof (out), &n, &bad) == ZeroHintTextOk && n == 0, "empty text: 0 bytes");
  CHECK (ZeroHintTextDecode ("AA", 2, out, sizeof (out), &n, &bad) == ZeroHintTextOk && n == 1 && out[0] == 0, "AA");
  CHECK (ZeroHintTextDecode ("_-8", 3, out, sizeof (out), &n, &bad) == ZeroHintTextOk && n == 2 && out[0] == 0xff && out[1] == 0xef, "_-8: %zu", (size_t)n);
  CHECK (ZeroHintTextDecode ("AB", 2, out, sizeof (out), &n, &bad) == ZeroHintTextNonCanonical, "AB: low bits set");
  CHECK (ZeroHintTextDecode ("AAB", 3, out, sizeof (out), &n, &bad) == ZeroHintTextNonCanonical, "AAB: low bits set");
  CHECK (ZeroHintTextDecode ("AAAAB", 5, out, sizeof (out), &n, &bad) == ZeroHintTextBadLength, "length before canonical");
  CHECK (ZeroHintTextDecode ("A=A", 3, out, sizeof (out), &n, &bad) == ZeroHintTextBadChar && bad == 1, "padding is a bad char");
  CHECK (ZeroHintTextDecode ("AAAA+", 5, out, sizeof (out), &n, &bad) == ZeroHintTextBadChar && bad == 4, "bad char before length");
  CHECK (ZeroHintTextDecode ("AA\xc3\xa9", 4, out, sizeof (out), &n, &bad) == ZeroHintTextBadChar && bad == 2, "non-ASCII byte");
  memset (t, 'A', sizeof (t));
  t[0] = '=';
  CHECK (ZeroHintTextDecode (t, ZSHINT_TEXT_MAX_CHARS + 1, out, sizeof (out), &n, &bad) == ZeroHintTextTooLong, "too long before bad char");
  t[0] = 'A';
  CHECK (ZeroHintTextDecode (t, ZSHINT_TEXT_MAX_CHARS, out, sizeof (out), &n, &bad) == ZeroHintTextOk && n == ZSHINT_TEXT_MAX_BYTES, "1024 chars: 768 bytes");
  // A caller's short buffer is refused, never overrun (ASan: exact block).
  {
    unsigned char  *small = malloc (2);

    CHECK (ZeroHintTextDecode ("AAAA", 4, small, 2, &n, &bad) == ZeroHintTextTooLong, "short buffer refused");
    CHECK (ZeroHintTextDecode ("AAA", 3, small, 2, &n, &bad) == ZeroHintTextOk && n == 2, "exact buffer");
    free (small);
  }
}

/* Malformed entry points and tables: refused, with the right name. */
static void
test_smbios_malformed (void)
{
  static unsigned char   area[ZSHINT_SMBIOS_AREA_SIZE];
  static const char      hint[] = "prezero.hint=WlNISU5UMDEBACAAGAAAAAEAAAAAAAAA-ZNknwAAAAAAABAAAAAAAAAAIAAAAAAAAQAAAAwAAAA";
  const char *const      one[1] = { hint };
  struct buf             good   = oem_table (one, 1, 0);
  UINT64                 addr;
  UINTN                  len, cut;
  ZERO_SMBIOS_STATUS     st;
  ZERO_HINT_TEXT_STATUS  ts;
  const CHAR8            *text;
  UINTN                  text_len;
  unsigned char          *t;

#define WALK(bytes, n)                                              \
  (t = exact ((const unsigned char *)(bytes), (n)),                 \
   st = ZeroSmbiosFindHintText (t, (n), &ts, &text, &text_len),     \
   free (t), st)

  // The good table finds the hint; each cut of it is refused or, cut right
  // after a whole structure, is a shorter well-formed table.
  CHECK (WALK (good.p, good.len) == ZeroSmbiosOk && ts == ZeroHintTextOk && text_len == strlen (hint) - 13, "good table");
  for (cut = 0; cut < good.len; cut++) {
    st = WALK (good.p, cut);
    CHECK (st == ZeroSmbiosOk || st == ZeroSmbiosStructureTruncated || st == ZeroSmbiosStringsUnterminated, "cut at %zu: %s", (size_t)cut, ZeroSmbiosStatusName (st));
  }

  // Named cases.
  CHECK (WALK ("\x00\x04\x01", 3) == ZeroSmbiosStructureTruncated, "truncated structure header");
  CHECK (WALK ("\x01\x20\x01\x00\x00\x00\x00\x00", 8) == ZeroSmbiosStructureTruncated, "formatted length past the end");
  CHECK (WALK ("\x01\x03\x01\x00\x00\x00", 6) == ZeroSmbiosStructureLength, "formatted length < 4");
  CHECK (WALK ("\x0b\x04\x01\x00\x00\x00", 6) == ZeroSmbiosStructureLength, "type 11 without its count");
  CHECK (WALK ("\x0b\x05\x01\x00\x01prezero.hint=AAAA", 22) == ZeroSmbiosStringsUnterminated, "no NUL at all");
  CHECK (WALK ("\x0b\x05\x01\x00\x01prezero.hint=AAAA\x00", 23) == ZeroSmbiosStringsUnterminated, "single NUL: no double NUL");
  CHECK (WALK ("\x0b\x05\x01\x00\x01prezero.hint=AAAA\x00\x00", 24) == ZeroSmbiosOk && ts == ZeroHintTextOk && text_len == 4, "minimal table, no type 127");
  CHECK (WALK ("\x0b\x05\x01\x00\x01\x00", 6) == ZeroSmbiosStringsUnterminated, "empty string set with one NUL");
  CHECK (WALK ("", 0) == ZeroSmbiosOk && ts == ZeroHintTextAbsent, "empty table");
  CHECK (ZeroSmbiosFindHintText (NULL, 5, &ts, &text, &text_len) == ZeroSmbiosOk && ts == ZeroHintTextAbsent, "NULL table");
  // A hint before the malformation is not given out.
  {
    struct buf  b = oem_table (one, 1, 0);

    b.len -= 3;                        // the end structure: 3 bytes of its header left
    st     = WALK (b.p, b.len);
    CHECK (st != ZeroSmbiosOk && ts == ZeroHintTextAbsent && text == NULL && text_len == 0, "hint in a malformed table: %s", ZeroSmbiosStatusName (st));
    free (b.p);
  }

  // After type 127 nothing counts: not garbage, not a second hint.
  {
    struct buf  b = oem_table (one, 1, 0);

    put_oem (&b, one, 1);
    put (&b, "\xff\x01", 2);
    CHECK (WALK (b.p, b.len) == ZeroSmbiosOk && ts == ZeroHintTextOk, "stops at type 127");
    free (b.p);
  }

  // Strings 1..Count only (as Linux reads them); a shorter set is fine.
  {
    const char *const  three[3] = { "a", "b", hint };
    struct buf         b        = { 0 };
    unsigned char      n        = 2;

    put_structure (&b, 11, &n, 1, three, 3);
    CHECK (WALK (b.p, b.len) == ZeroSmbiosOk && ts == ZeroHintTextAbsent, "string past Count ignored");
    b.len = 0;
    n     = 9;
    put_structure (&b, 11, &n, 1, three, 3);
    CHECK (WALK (b.p, b.len) == ZeroSmbiosOk && ts == ZeroHintTextOk, "Count past the set");
    free (b.p);
  }

  // Duplicate across two type 11 structures, even when equal.
  {
    struct buf  b = { 0 };

    put_oem (&b, one, 1);
    put_oem (&b, one, 1);
    CHECK (WALK (b.p, b.len) == ZeroSmbiosOk && ts == ZeroHintTextDuplicate && text == NULL, "duplicate across structures");
    free (b.p);
  }

  // Entry points.
  area_with_table (area, good.p, good.len, 1, 0);
  CHECK (find_ep (area, sizeof (area), &addr, &len) == ZeroSmbiosOk && addr == 0xF1000 && len == good.len, "3.0 entry point");
  area[0x0C] ^= 1;     // table length changed, checksum not updated
  CHECK (find_ep (area, sizeof (area), &addr, &len) == ZeroSmbiosEntryPointChecksum, "3.0 entry point checksum wrong");
  area_with_table (area, good.p, good.len, 1, 0);
  area[6]  = 0x10;
  area[5] += 8;        // checksum fixed for the new length
  CHECK (find_ep (area, sizeof (area), &addr, &len) == ZeroSmbiosEntryPointLength, "3.0 entry point too short");
  area_with_table (area, good.p, good.len, 0, 0x100);
  CHECK (find_ep (area, sizeof (area), &addr, &len) == ZeroSmbiosOk && addr == 0xF1000 && len == good.len, "2.x entry point");
  area[0x100 + 0x17] ^= 1;     // table length: both checksums wrong
  CHECK (find_ep (area, sizeof (area), &addr, &len) == ZeroSmbiosEntryPointChecksum, "2.x entry point checksum wrong");
  area_with_table (area, good.p, good.len, 0, 0x100);
  area[0x100 + 0x11] = 'X';    // "_XMI_"; outer checksum fixed, intermediate not
  area[0x100 + 4]   -= 'X' - 'D';
  CHECK (find_ep (area, sizeof (area), &addr, &len) == ZeroSmbiosEntryPointChecksum, "2.x without _DMI_");
  area_with_table (area, good.p, good.len, 0, 0x100);
  area[0x100 + 0x1C] += 1;     // structure count: intermediate checksum wrong,
  area[0x100 + 0x0B] -= 1;     // the outer one still right
  CHECK (find_ep (area, sizeof (area), &addr, &len) == ZeroSmbiosEntryPointChecksum, "2.x intermediate checksum wrong");
  // A bad 3.0 anchor does not hide a good 2.x one.
  area_with_table (area, good.p, good.len, 0, 0x100);
  memcpy (area + 0x200, "_SM3_", 5);
  CHECK (find_ep (area, sizeof (area), &addr, &len) == ZeroSmbiosOk && addr == 0xF1000, "bad 3.0 anchor, good 2.x");
  // Only 16-byte boundaries count.
  area_with_table (area, good.p, good.len, 1, 0);
  memmove (area + 8, area, 0x18);
  memset (area, 0, 8);
  CHECK (find_ep (area, sizeof (area), &addr, &len) == ZeroSmbiosNoEntryPoint, "unaligned anchor");
  memset (area, 0, sizeof (area));
  CHECK (find_ep (area, sizeof (area), &addr, &len) == ZeroSmbiosNoEntryPoint, "no anchor");
  // An anchor at the very end of the area: its entry point would run past.
  memcpy (area + sizeof (area) - 16, "_SM3_", 5);
  CHECK (find_ep (area, sizeof (area), &addr, &len) == ZeroSmbiosEntryPointLength, "entry point past the area");
  memset (area, 0, sizeof (area));
  memcpy (area + sizeof (area) - 16, "_SM_", 4);
  CHECK (find_ep (area, sizeof (area), &addr, &len) == ZeroSmbiosEntryPointLength, "2.x entry point past the area");
  // Room for the fields, but the entry point's own length runs past the area.
  memset (area, 0, sizeof (area));
  memcpy (area + sizeof (area) - 32, "_SM3_", 5);
  area[sizeof (area) - 32 + 6] = 0x40;
  CHECK (find_ep (area, sizeof (area), &addr, &len) == ZeroSmbiosEntryPointLength, "3.0 entry point length past the area");
  memset (area, 0, sizeof (area));
  memcpy (area + sizeof (area) - 32, "_SM_", 4);
  area[sizeof (area) - 32 + 5] = 0x30;
  CHECK (find_ep (area, sizeof (area), &addr, &len) == ZeroSmbiosEntryPointLength, "2.x entry point length past the area");
  // An area that ends inside a 2.x entry point whose length byte says 0x1E:
  // its 0x1F bytes are not all there (ASan: exact block).
  area_with_table (area, good.p, good.len, 0, 0);
  area[5]  = 0x1E;
  area[4] += 1;
  CHECK (find_ep (area, 0x1E, &addr, &len) == ZeroSmbiosEntryPointLength, "2.x entry point cut by the area");
  CHECK (find_ep (area, 0x1F, &addr, &len) == ZeroSmbiosOk && addr == 0xF1000, "2.x entry point with length 0x1E");
  // Table location: empty, too large, above 4 GiB, ending past 4 GiB.
  {
    static const struct {
      UINT64        addr;
      UINT32        len;
      const char    *what;
    } bad_loc[] = {
      { 0xF1000,              0,                           "empty table"                   },
      { 0xF1000,              ZSHINT_SMBIOS_MAX_TABLE + 1, "table over the limit"          },
      { 0x100000000ull,       64,                          "table above 4 GiB"             },
      { 0xFFFFFFF0ull,        64,                          "table across 4 GiB"            },
      { 0xFFFFFFFFFFFFFFF0ull, 64,                         "table address wraps"           },
    };
    size_t         k;
    unsigned char  sum;
    unsigned       b;

    for (k = 0; k < sizeof (bad_loc) / sizeof (bad_loc[0]); k++) {
      area_with_table (area, good.p, good.len, 1, 0);
      memcpy (area + 0x0C, &bad_loc[k].len, 4);
      memcpy (area + 0x10, &bad_loc[k].addr, 8);
      area[5] = 0;
      for (sum = 0, b = 0; b < 0x18; b++) {
        sum += area[b];
      }

      area[5] = (unsigned char)-sum;
      CHECK (find_ep (area, sizeof (area), &addr, &len) == ZeroSmbiosTableLocation, "%s", bad_loc[k].what);
    }
  }

  // Random tables and random areas: any answer, no crash, no overread.
  {
    unsigned  iter;

    for (iter = 0; iter < 20000; iter++) {
      unsigned char  r[96];
      size_t         n = rnd (sizeof (r) + 1), k;

      for (k = 0; k < n; k++) {
        // Mostly small bytes, so that lengths, NULs and type 11 are common.
        r[k] = (unsigned char)(rnd (4) ? rnd (16) : rnd (256));
      }

      st = WALK (r, n);
      CHECK (st < ZeroSmbiosStatusCount && st != ZeroSmbiosNoEntryPoint, "random table %u: %d", iter, (int)st);
      st = find_ep (r, n, &addr, &len);
      CHECK (st < ZeroSmbiosStatusCount, "random area %u: %d", iter, (int)st);
    }
  }

#undef WALK
  free (good.p);
}

int
main (void)
{
  test_names ();
  test_vectors ();
  test_crc_and_roundtrip ();
  test_ranges_fixed ();
  test_ranges_model ();
  test_text_names ();
  test_text_decode ();
  test_text_smbios_vectors ();
  test_text_cmdline_vectors ();
  test_smbios_malformed ();
  CHECK (text_vectors_smbios + text_vectors_cmdline == ZSHINT_TEXT_VECTOR_COUNT, "every text vector ran");
  printf (
    "zerohint host tests: %u checks, %u failures (%zu golden vectors, %zu text vectors: %u SMBIOS, %u command line)\n",
    checks,
    failures,
    (size_t)ZSHINT_VECTOR_COUNT,
    (size_t)ZSHINT_TEXT_VECTOR_COUNT,
    text_vectors_smbios,
    text_vectors_cmdline
    );
  return failures == 0 ? 0 : 1;
}
