//! Read-only view of the Linux x86 `boot_params` ("zero page") fields the
//! probe checks, at the offsets of Documentation/arch/x86/zero-page.rst and
//! boot.rst.

use crate::verdict::Failure;

/// Size of `struct boot_params`.
pub const SIZE: usize = 4096;
/// `ext_cmd_line_ptr`: high 32 bits of the command line address.
pub const OFF_EXT_CMD_LINE_PTR: usize = 0x0c8;
/// `e820_entries` (u8).
pub const OFF_E820_ENTRIES: usize = 0x1e8;
/// `hdr.header`, the "HdrS" signature.
pub const OFF_HEADER: usize = 0x202;
/// `hdr.version`, the boot protocol version.
pub const OFF_VERSION: usize = 0x206;
/// `hdr.cmd_line_ptr`: low 32 bits of the command line address.
pub const OFF_CMD_LINE_PTR: usize = 0x228;
/// `hdr.setup_data`: physical address of the first `setup_data` node.
pub const OFF_SETUP_DATA: usize = 0x250;
/// `e820_table[128]`, 20 bytes per entry.
pub const OFF_E820_TABLE: usize = 0x2d0;
/// "HdrS" read as a little-endian u32.
pub const HDRS: u32 = 0x5372_6448;
/// Lowest protocol version with `setup_data` (2.09): without it no VMM can
/// hand over a hint this way.
pub const MIN_VERSION: u16 = 0x0209;

pub(crate) fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

pub(crate) fn le32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

pub(crate) fn le64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// A `boot_params` page whose setup header passed [`BootParams::new`].
#[derive(Debug, Clone, Copy)]
pub struct BootParams<'a> {
    bytes: &'a [u8],
}

impl<'a> BootParams<'a> {
    /// Checks the setup header copy: "HdrS" signature and a 2.x protocol
    /// version of at least 2.09. `bytes` must be the whole 4096-byte page.
    pub fn new(bytes: &'a [u8]) -> Result<Self, Failure> {
        if bytes.len() < SIZE {
            return Err(Failure::BootParamsUnreadable);
        }
        let header = le32(bytes, OFF_HEADER);
        if header != HDRS {
            return Err(Failure::BadHeaderMagic { found: header });
        }
        let version = le16(bytes, OFF_VERSION);
        if !(MIN_VERSION..0x0300).contains(&version) {
            return Err(Failure::BadProtocolVersion { version });
        }
        Ok(BootParams { bytes })
    }

    /// The whole page.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Boot protocol version from the header copy.
    pub fn version(&self) -> u16 {
        le16(self.bytes, OFF_VERSION)
    }

    /// Command line address, `ext_cmd_line_ptr << 32 | cmd_line_ptr`.
    pub fn cmd_line_ptr(&self) -> u64 {
        u64::from(le32(self.bytes, OFF_EXT_CMD_LINE_PTR)) << 32
            | u64::from(le32(self.bytes, OFF_CMD_LINE_PTR))
    }

    /// Address of the first `setup_data` node, 0 for none.
    pub fn setup_data(&self) -> u64 {
        le64(self.bytes, OFF_SETUP_DATA)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(version: u16) -> Vec<u8> {
        let mut p = vec![0u8; SIZE];
        p[OFF_HEADER..OFF_HEADER + 4].copy_from_slice(b"HdrS");
        p[OFF_VERSION..OFF_VERSION + 2].copy_from_slice(&version.to_le_bytes());
        p
    }

    #[test]
    fn accepts_2_09_to_2_ff() {
        assert!(BootParams::new(&page(0x0209)).is_ok());
        assert!(BootParams::new(&page(0x020f)).is_ok());
        assert!(BootParams::new(&page(0x02ff)).is_ok());
    }

    #[test]
    fn rejects_old_or_future_versions_and_bad_magic() {
        assert_eq!(
            BootParams::new(&page(0x0208)).unwrap_err(),
            Failure::BadProtocolVersion { version: 0x0208 }
        );
        assert_eq!(
            BootParams::new(&page(0x0300)).unwrap_err(),
            Failure::BadProtocolVersion { version: 0x0300 }
        );
        let mut p = page(0x020c);
        p[OFF_HEADER] = b'X';
        assert!(matches!(
            BootParams::new(&p).unwrap_err(),
            Failure::BadHeaderMagic { .. }
        ));
        assert_eq!(
            BootParams::new(&p[..100]).unwrap_err(),
            Failure::BootParamsUnreadable
        );
    }

    #[test]
    fn cmdline_pointer_combines_ext_high_half() {
        let mut p = page(0x020c);
        p[OFF_CMD_LINE_PTR..OFF_CMD_LINE_PTR + 4].copy_from_slice(&0x2_0000u32.to_le_bytes());
        p[OFF_EXT_CMD_LINE_PTR..OFF_EXT_CMD_LINE_PTR + 4].copy_from_slice(&1u32.to_le_bytes());
        p[OFF_SETUP_DATA..OFF_SETUP_DATA + 8].copy_from_slice(&0x9000u64.to_le_bytes());
        let bp = BootParams::new(&p).unwrap();
        assert_eq!(bp.cmd_line_ptr(), 0x1_0002_0000);
        assert_eq!(bp.setup_data(), 0x9000);
        assert_eq!(bp.version(), 0x020c);
    }
}
