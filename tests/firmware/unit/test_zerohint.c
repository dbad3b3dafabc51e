/*
 * Host unit tests of ZeroHintLib (firmware/ZeroStartPkg/Library/ZeroHintLib),
 * built with plain gcc and -DZSHINT_HOST, no EDK2:
 *   - validation against every golden vector in tests/vectors (result code,
 *     spec name and entry index; the RAM check for vectors with a RAM map);
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

int
main (void)
{
  test_names ();
  test_vectors ();
  test_crc_and_roundtrip ();
  test_ranges_fixed ();
  test_ranges_model ();
  printf ("zerohint host tests: %u checks, %u failures (%zu golden vectors)\n", checks, failures, (size_t)ZSHINT_VECTOR_COUNT);
  return failures == 0 ? 0 : 1;
}
