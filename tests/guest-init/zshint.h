/*
 * zshint: a freestanding validator for the zerostart pre-zeroed hint, ABI v1
 * (docs/hint-abi.md). The L3 test guest uses it to judge the raw setup_data
 * blob a stock kernel exposes; the host unit test runs it against the golden
 * vectors in tests/vectors/ so the C and Rust readings of the ABI cannot
 * drift apart unnoticed.
 */
#ifndef ZSHINT_H
#define ZSHINT_H

#include <stddef.h>
#include <stdint.h>

#define ZSHINT_MAGIC "ZSHINT01"
#define ZSHINT_VERSION 1
#define ZSHINT_HEADER_SIZE 32
#define ZSHINT_ENTRY_SIZE 24
#define ZSHINT_MAX_ENTRIES 512
#define ZSHINT_FLAG_SCRUB_REQUEST 0x1u
#define ZSHINT_ENTRY_ZEROED 0x1u
#define ZSHINT_SETUP_DATA_TYPE 0x5a480001u
#define ZSHINT_TIMER_PORT 0x440
#define ZSHINT_TIMER_VALUE(id) (0x5a530000u | (uint32_t)(id))

/*
 * Error codes: ZSHINT_E_* from the golden vectors' generated header, so the
 * numbers and names are the ones every other consumer uses. Built with
 * -I tests/vectors.
 */
#include "zshint_errors.h"
/* Not a validation step: a well-formed scrub request on a transport that must
 * not carry one (setup_data, EFI table). */
#define ZSHINT_E_SCRUB_NOT_ALLOWED ZSHINT_E_COUNT
typedef int zshint_err_t;

/* One validated range. */
struct zshint_range {
	uint64_t start;
	uint64_t length;
	uint8_t page_shift;
};

/* What a successful validation learned. */
struct zshint_info {
	uint32_t entry_count;
	uint32_t flags;
	uint64_t total_bytes; /* sum of all range lengths */
};

/* The shared error name ("Truncated", "BadMagic", ...) of a code. */
const char *zshint_err_name(zshint_err_t e);

/* zlib-compatible CRC-32 (IEEE, reflected, init/final xor 0xFFFFFFFF). */
uint32_t zshint_crc32(const uint8_t *p, size_t n);

/*
 * Validates `n` bytes at `p`. `exact_length` non-zero means the transport
 * carries a length (setup_data, fw_cfg), so `n` must be exactly the encoded
 * size (extra bytes → BadLength). `allow_scrub` is non-zero only for the
 * fw_cfg transport; elsewhere a scrub request is ZSHINT_E_SCRUB_NOT_ALLOWED.
 * On success fills `info` (may be NULL); `ranges`, when non-NULL, receives up
 * to `max_ranges` entries. `bad_entry`, when non-NULL, receives the index of
 * the failing entry for per-entry errors.
 */
zshint_err_t zshint_validate(const uint8_t *p, size_t n, int exact_length,
				int allow_scrub, struct zshint_info *info,
				struct zshint_range *ranges, size_t max_ranges,
				uint32_t *bad_entry);

/* A usable-RAM range (start, length), e.g. an e820 type-1 entry. */
struct zshint_ram {
	uint64_t start;
	uint64_t length;
};

/*
 * Spec step 10: every range must lie wholly inside the union of `ram`
 * (given in any order, possibly adjacent). Returns ZSHINT_E_OUT_OF_RAM with
 * *bad_entry set for the first range that does not. Sorts `ram` in place.
 */
zshint_err_t zshint_check_ram(const struct zshint_range *ranges, uint32_t n,
			      struct zshint_ram *ram, size_t ram_count, uint32_t *bad_entry);

#endif
