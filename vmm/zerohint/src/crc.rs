//! CRC-32 (IEEE 802.3, reflected), table computed at compile time so the
//! bare-metal probe guest needs neither alloc nor a runtime init step.

const fn make_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

static TABLE: [u32; 256] = make_table();

/// Feeds `bytes` into a running (pre-inverted) CRC state.
pub(crate) fn update(mut state: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        state = TABLE[((state ^ u32::from(b)) & 0xff) as usize] ^ (state >> 8);
    }
    state
}

/// CRC-32 as zlib's `crc32(0, bytes, len)`, EDK2's `CalculateCrc32` and
/// Linux's `crc32_le(~0, p, n) ^ ~0` compute it (poly 0xEDB88320, init and
/// final xor 0xFFFFFFFF).
pub fn crc32(bytes: &[u8]) -> u32 {
    !update(!0, bytes)
}

#[cfg(test)]
mod tests {
    use super::crc32;

    #[test]
    fn known_values() {
        // The standard check value for CRC-32/ISO-HDLC.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(&[0u8; 32]), 0x190A_55AD);
    }
}
