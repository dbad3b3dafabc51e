/* zshint: hint ABI v1 validator; see zshint.h and docs/hint-abi.md. */
#include "zshint.h"

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
	       ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const uint8_t *p) { return rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

const char *zshint_err_name(zshint_err_t e)
{
	static const char *const names[] = {
#define ZSHINT_NAME(code, name) name,
		ZSHINT_ERRORS(ZSHINT_NAME)
#undef ZSHINT_NAME
	};
	if (e == ZSHINT_E_SCRUB_NOT_ALLOWED)
		return "ScrubRequest"; /* the kernel series logs the same name */
	if (e < 0 || e >= ZSHINT_E_COUNT)
		return "Unknown";
	return names[e];
}

static uint32_t crc_update(uint32_t crc, const uint8_t *p, size_t n)
{
	/* Bitwise on purpose: 32 + 24 * 512 bytes at most, and no table to get wrong. */
	for (size_t i = 0; i < n; i++) {
		crc ^= p[i];
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
	}
	return crc;
}

uint32_t zshint_crc32(const uint8_t *p, size_t n)
{
	return crc_update(0xFFFFFFFFu, p, n) ^ 0xFFFFFFFFu;
}

zshint_err_t zshint_validate(const uint8_t *p, size_t n, int exact_length,
				int allow_scrub, struct zshint_info *info,
				struct zshint_range *ranges, size_t max_ranges,
				uint32_t *bad_entry)
{
	static const uint8_t zero4[4];
	uint32_t count, flags, sum;
	size_t need;
	uint64_t total = 0, prev_start = 0, prev_end = 0;
	int scrub;

	if (n < ZSHINT_HEADER_SIZE)
		return ZSHINT_E_TRUNCATED;
	for (int i = 0; i < 8; i++)
		if (p[i] != (uint8_t)ZSHINT_MAGIC[i])
			return ZSHINT_E_BAD_MAGIC;
	if (rd16(p + 0x08) != ZSHINT_VERSION)
		return ZSHINT_E_BAD_VERSION;
	if (rd16(p + 0x0a) != ZSHINT_HEADER_SIZE || rd16(p + 0x0c) != ZSHINT_ENTRY_SIZE)
		return ZSHINT_E_BAD_HEADER_SIZE;
	count = rd32(p + 0x10);
	if (count > ZSHINT_MAX_ENTRIES)
		return ZSHINT_E_TOO_MANY_ENTRIES;
	flags = rd32(p + 0x14);
	if (rd16(p + 0x0e) != 0 || rd32(p + 0x1c) != 0 || (flags & ~ZSHINT_FLAG_SCRUB_REQUEST))
		return ZSHINT_E_RESERVED_NON_ZERO;
	need = ZSHINT_HEADER_SIZE + (size_t)count * ZSHINT_ENTRY_SIZE;
	if (n < need)
		return ZSHINT_E_TRUNCATED;
	if (exact_length && n > need)
		return ZSHINT_E_BAD_LENGTH;
	sum = crc_update(0xFFFFFFFFu, p, 0x18);
	sum = crc_update(sum, zero4, 4);
	sum = crc_update(sum, p + 0x1c, need - 0x1c) ^ 0xFFFFFFFFu;
	if (sum != rd32(p + 0x18))
		return ZSHINT_E_BAD_CHECKSUM;

	scrub = (flags & ZSHINT_FLAG_SCRUB_REQUEST) != 0;
	for (uint32_t i = 0; i < count; i++) {
		const uint8_t *e = p + ZSHINT_HEADER_SIZE + (size_t)i * ZSHINT_ENTRY_SIZE;
		uint64_t start = rd64(e), len = rd64(e + 8);
		uint32_t ef = rd32(e + 0x10);
		uint8_t shift = e[0x14];
		zshint_err_t err = ZSHINT_E_OK;

		if ((ef & ~ZSHINT_ENTRY_ZEROED) || e[0x15] || e[0x16] || e[0x17] ||
		    (!scrub && !(ef & ZSHINT_ENTRY_ZEROED)) || (scrub && (ef & ZSHINT_ENTRY_ZEROED)))
			err = ZSHINT_E_BAD_ENTRY_FLAGS;
		else if (shift != 12 && shift != 21 && shift != 30)
			err = ZSHINT_E_BAD_PAGE_SHIFT;
		else if ((start & 0xfff) || (len & 0xfff))
			err = ZSHINT_E_MISALIGNED;
		else if (len == 0)
			err = ZSHINT_E_EMPTY_RANGE;
		/* End is exclusive: an end of exactly 2^64 does not fit either. */
		else if (start + len <= start)
			err = ZSHINT_E_OVERFLOW;
		else if (i > 0 && start < prev_start)
			err = ZSHINT_E_UNSORTED;
		else if (i > 0 && start < prev_end)
			err = ZSHINT_E_OVERLAPPING;
		if (err != ZSHINT_E_OK) {
			if (bad_entry)
				*bad_entry = i;
			return err;
		}
		if (ranges && i < max_ranges) {
			ranges[i].start = start;
			ranges[i].length = len;
			ranges[i].page_shift = shift;
		}
		prev_start = start;
		prev_end = start + len;
		total += len;
	}
	if (scrub && !allow_scrub)
		return ZSHINT_E_SCRUB_NOT_ALLOWED;
	if (info) {
		info->entry_count = count;
		info->flags = flags;
		info->total_bytes = total;
	}
	return ZSHINT_E_OK;
}

zshint_err_t zshint_check_ram(const struct zshint_range *ranges, uint32_t n,
			      struct zshint_ram *ram, size_t ram_count, uint32_t *bad_entry)
{
	/* Insertion sort: a RAM map has a handful of entries. */
	for (size_t i = 1; i < ram_count; i++) {
		struct zshint_ram t = ram[i];
		size_t j = i;
		for (; j > 0 && ram[j - 1].start > t.start; j--)
			ram[j] = ram[j - 1];
		ram[j] = t;
	}
	for (uint32_t i = 0; i < n; i++) {
		/* Walk RAM from the range's start, allowing adjacent RAM ranges to chain. */
		uint64_t pos = ranges[i].start, end = ranges[i].start + ranges[i].length;
		for (size_t k = 0; k < ram_count && pos < end; k++) {
			uint64_t rs = ram[k].start, re = ram[k].start + ram[k].length;
			if (re < rs) /* wraps: RAM to the top of the address space */
				re = UINT64_MAX;
			if (rs <= pos && pos < re)
				pos = re;
		}
		if (pos < end) {
			if (bad_entry)
				*bad_entry = i;
			return ZSHINT_E_OUT_OF_RAM;
		}
	}
	return ZSHINT_E_OK;
}
