//! QEMU's firmware configuration device (fw_cfg) on x86 port I/O.
//!
//! Firmware (OVMF, CloudHv, SeaBIOS) asks the VMM for boot inputs through
//! fw_cfg: the kernel, initrd and command line to boot, the memory map, and
//! named files such as zerostart's pre-zeroed hint
//! (`opt/org.zerostart/prezeroed`, `docs/hint-abi.md`). The interface follows
//! QEMU's `docs/specs/fw_cfg.rst`:
//!
//! * port `0x510`: 16-bit selector write (which item to read, offset reset
//!   to 0);
//! * port `0x511`: data, read one byte at a time (wider reads return that
//!   many consecutive bytes); past the end of an item, or for an unknown
//!   item, reads return 0;
//! * ports `0x514..0x51c`: DMA address register, big endian. Writing the
//!   low 32 bits (`0x518`) or all 64 bits (`0x514`) starts a transfer
//!   described by an [`FWCfgDmaAccess`](DMA_ACCESS_SIZE) structure in guest
//!   memory: `control` (be32), `length` (be32), `address` (be64). Reading
//!   the register returns the signature `"QEMU CFG"`.
//!
//! Items are read-only: a DMA write request fails with the error bit, as do
//! reserved control bits and any access to guest memory that is not RAM.
//! A guest can never make the device panic; DMA errors are counted.
//!
//! DMA transfers write guest memory on the guest's request, after the first
//! instruction ran; they go through vm-memory (so its dirty bitmap records
//! them) and are the guest's own writes as far as the zero hint is
//! concerned: the hint describes memory at the first instruction.

use std::collections::BTreeMap;
use std::sync::Arc;

use vm_memory::{Bytes, GuestAddress};

use crate::{ExitRequest, PioDevice};

/// Selector port (16-bit write); the data port is `FW_CFG_PORT_SEL + 1`.
pub const FW_CFG_PORT_SEL: u16 = 0x510;
/// Data port (8-bit read).
pub const FW_CFG_PORT_DATA: u16 = 0x511;
/// Ports the selector and data registers occupy, from [`FW_CFG_PORT_SEL`].
pub const FW_CFG_PORT_SEL_LEN: u16 = 2;
/// DMA address register (64 bits, big endian, high half first).
pub const FW_CFG_PORT_DMA: u16 = 0x514;
/// Ports the DMA register occupies.
pub const FW_CFG_PORT_DMA_LEN: u16 = 8;

/// What reading the DMA register returns, as big-endian bytes.
pub const DMA_SIGNATURE: [u8; 8] = *b"QEMU CFG";
/// Size of the `FWCfgDmaAccess` structure in guest memory.
pub const DMA_ACCESS_SIZE: u64 = 16;

/// `control` bit: the transfer failed (set by the device).
pub const DMA_CTL_ERROR: u32 = 0x01;
/// `control` bit: copy the selected item to guest memory.
pub const DMA_CTL_READ: u32 = 0x02;
/// `control` bit: advance the item offset without copying.
pub const DMA_CTL_SKIP: u32 = 0x04;
/// `control` bit: select the item in the upper 16 bits first.
pub const DMA_CTL_SELECT: u32 = 0x08;
/// `control` bit: copy guest memory into the item (not supported here:
/// every item is read-only, so this fails with [`DMA_CTL_ERROR`]).
pub const DMA_CTL_WRITE: u32 = 0x10;
/// Bits of the lower half of `control` that have a meaning.
const DMA_CTL_KNOWN: u32 =
    DMA_CTL_ERROR | DMA_CTL_READ | DMA_CTL_SKIP | DMA_CTL_SELECT | DMA_CTL_WRITE;

/// The well-known item keys (QEMU `include/standard-headers/linux/qemu_fw_cfg.h`).
pub mod key {
    /// `"QEMU"`.
    pub const SIGNATURE: u16 = 0x00;
    /// Feature bits (le32): [`super::ID_TRADITIONAL`] | [`super::ID_DMA`].
    pub const ID: u16 = 0x01;
    /// Guest RAM size in bytes (le64).
    pub const RAM_SIZE: u16 = 0x03;
    /// Number of boot vCPUs (le16).
    pub const NB_CPUS: u16 = 0x05;
    /// Highest possible vCPU count (le16).
    pub const MAX_CPUS: u16 = 0x0f;
    /// Where a legacy loader puts the kernel's protected-mode part (le32).
    pub const KERNEL_ADDR: u16 = 0x07;
    /// Size of [`KERNEL_DATA`] (le32).
    pub const KERNEL_SIZE: u16 = 0x08;
    /// Legacy: address of the command line (le32).
    pub const KERNEL_CMDLINE: u16 = 0x09;
    /// Where a legacy loader puts the initrd (le32).
    pub const INITRD_ADDR: u16 = 0x0a;
    /// Size of [`INITRD_DATA`] (le32).
    pub const INITRD_SIZE: u16 = 0x0b;
    /// Kernel entry point for ELF/PVH kernels (le32).
    pub const KERNEL_ENTRY: u16 = 0x10;
    /// The kernel after its setup sectors (bzImage protected-mode part).
    pub const KERNEL_DATA: u16 = 0x11;
    /// The initrd.
    pub const INITRD_DATA: u16 = 0x12;
    /// Where a legacy loader puts the command line (le32).
    pub const CMDLINE_ADDR: u16 = 0x13;
    /// Size of [`CMDLINE_DATA`] including its NUL (le32).
    pub const CMDLINE_SIZE: u16 = 0x14;
    /// The command line, NUL-terminated.
    pub const CMDLINE_DATA: u16 = 0x15;
    /// Where a legacy loader puts the real-mode setup (le32).
    pub const SETUP_ADDR: u16 = 0x16;
    /// Size of [`SETUP_DATA`] (le32).
    pub const SETUP_SIZE: u16 = 0x17;
    /// The bzImage's boot sector and setup sectors.
    pub const SETUP_DATA: u16 = 0x18;
    /// The file directory.
    pub const FILE_DIR: u16 = 0x19;
    /// First key of a named file.
    pub const FILE_FIRST: u16 = 0x20;
}

/// ID bit: the port interface.
pub const ID_TRADITIONAL: u32 = 1 << 0;
/// ID bit: the DMA interface.
pub const ID_DMA: u32 = 1 << 1;
/// Selector bit QEMU once used for writes; ignored when looking items up.
const SELECTOR_WRITE_BIT: u16 = 0x4000;
/// Longest file name, without the terminating NUL.
pub const FILE_NAME_MAX: usize = 55;
/// Bytes per directory entry: size, select, reserved, name\[56\].
pub const DIR_ENTRY_SIZE: usize = 64;
/// Most named files (keys `0x20..0x4000`; bit 14 is the old write bit).
pub const MAX_FILES: usize = (SELECTOR_WRITE_BIT - key::FILE_FIRST) as usize;
/// Largest item: fw_cfg sizes are 32-bit.
pub const ITEM_MAX: usize = u32::MAX as usize;

/// Errors building the item set (VMM side; guests cannot cause them).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A file name that is empty, too long or contains NUL.
    #[error("fw_cfg file name {0:?} must be 1..=55 bytes without NUL")]
    BadName(String),
    /// Two files with one name.
    #[error("fw_cfg file {0:?} added twice")]
    DuplicateName(String),
    /// More than [`MAX_FILES`] files.
    #[error("more than {MAX_FILES} fw_cfg files")]
    TooManyFiles,
    /// An item larger than a 32-bit size can describe.
    #[error("fw_cfg item {key:#x} is {len} bytes; the limit is 4 GiB - 1")]
    TooLarge {
        /// Item key.
        key: u16,
        /// Its size.
        len: usize,
    },
    /// A key the device owns (signature, ID, directory), a file key, or one
    /// with the old write bit.
    #[error("fw_cfg key {0:#x} is reserved (signature, ID, file directory or files); use add_file for named data")]
    ReservedKey(u16),
}

/// A QEMU-compatible fw_cfg device over guest memory `M` (for DMA).
///
/// Build it with [`FwCfg::new`], add items with [`FwCfg::set_item`] and
/// [`FwCfg::add_file`], then put it on the bus at [`FW_CFG_PORT_SEL`]
/// (length [`FW_CFG_PORT_SEL_LEN`]) and [`FW_CFG_PORT_DMA`] (length
/// [`FW_CFG_PORT_DMA_LEN`]), the same `Arc` at both.
pub struct FwCfg<M> {
    mem: M,
    items: BTreeMap<u16, Arc<[u8]>>,
    files: Vec<(String, u16)>,
    selected: u16,
    offset: usize,
    dma_high: u32,
    dma_errors: u64,
    dma_transfers: u64,
}

impl<M> std::fmt::Debug for FwCfg<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FwCfg")
            .field("files", &self.files)
            .field("items", &self.items.keys().collect::<Vec<_>>())
            .field("selected", &self.selected)
            .field("offset", &self.offset)
            .finish()
    }
}

impl<M: Bytes<GuestAddress> + Send> FwCfg<M> {
    /// A device with the signature, the ID (port and DMA interfaces) and an
    /// empty file directory; DMA transfers go to `mem`.
    pub fn new(mem: M) -> Self {
        let mut d = FwCfg {
            mem,
            items: BTreeMap::new(),
            files: Vec::new(),
            selected: 0,
            offset: 0,
            dma_high: 0,
            dma_errors: 0,
            dma_transfers: 0,
        };
        d.items.insert(key::SIGNATURE, Arc::from(&b"QEMU"[..]));
        d.items.insert(
            key::ID,
            Arc::from(&(ID_TRADITIONAL | ID_DMA).to_le_bytes()[..]),
        );
        d.rebuild_dir();
        d
    }

    /// Sets a numbered item (e.g. [`key::KERNEL_DATA`]), replacing any
    /// earlier value. Keys the device owns and file keys are refused.
    pub fn set_item(&mut self, key: u16, data: impl Into<Arc<[u8]>>) -> Result<(), Error> {
        if matches!(key, key::SIGNATURE | key::ID | key::FILE_DIR)
            || (key::FILE_FIRST..SELECTOR_WRITE_BIT).contains(&key)
            || key & SELECTOR_WRITE_BIT != 0
        {
            return Err(Error::ReservedKey(key));
        }
        let data = data.into();
        if data.len() > ITEM_MAX {
            return Err(Error::TooLarge {
                key,
                len: data.len(),
            });
        }
        self.items.insert(key, data);
        Ok(())
    }

    /// Sets a numbered item to a little-endian `u32`.
    pub fn set_u32(&mut self, key: u16, v: u32) -> Result<(), Error> {
        self.set_item(key, &v.to_le_bytes()[..])
    }

    /// Adds a named file and returns its key. Directory entries stay in
    /// insertion order, as in QEMU without a file order list.
    pub fn add_file(&mut self, name: &str, data: impl Into<Arc<[u8]>>) -> Result<u16, Error> {
        if name.is_empty() || name.len() > FILE_NAME_MAX || name.contains('\0') {
            return Err(Error::BadName(name.to_string()));
        }
        if self.files.iter().any(|(n, _)| n == name) {
            return Err(Error::DuplicateName(name.to_string()));
        }
        if self.files.len() >= MAX_FILES {
            return Err(Error::TooManyFiles);
        }
        let data = data.into();
        let key = key::FILE_FIRST + self.files.len() as u16;
        if data.len() > ITEM_MAX {
            return Err(Error::TooLarge {
                key,
                len: data.len(),
            });
        }
        self.items.insert(key, data);
        self.files.push((name.to_string(), key));
        self.rebuild_dir();
        Ok(key)
    }

    /// The bytes of item `key`, if present.
    pub fn item(&self, key: u16) -> Option<&[u8]> {
        self.items.get(&key).map(|d| &d[..])
    }

    /// DMA transfers that ended with the error bit (bad control bits,
    /// write requests, guest addresses outside RAM).
    pub fn dma_errors(&self) -> u64 {
        self.dma_errors
    }

    /// DMA transfers started.
    pub fn dma_transfers(&self) -> u64 {
        self.dma_transfers
    }

    fn rebuild_dir(&mut self) {
        let mut dir = Vec::with_capacity(4 + self.files.len() * DIR_ENTRY_SIZE);
        dir.extend_from_slice(&(self.files.len() as u32).to_be_bytes());
        for (name, key) in &self.files {
            let len = self.items.get(key).map_or(0, |d| d.len()) as u32;
            dir.extend_from_slice(&len.to_be_bytes());
            dir.extend_from_slice(&key.to_be_bytes());
            dir.extend_from_slice(&0u16.to_be_bytes());
            let mut n = [0u8; DIR_ENTRY_SIZE - 8];
            n[..name.len()].copy_from_slice(name.as_bytes());
            dir.extend_from_slice(&n);
        }
        self.items.insert(key::FILE_DIR, Arc::from(dir));
    }

    fn select(&mut self, selector: u16) {
        self.selected = selector & !SELECTOR_WRITE_BIT;
        self.offset = 0;
    }

    /// The rest of the selected item from the current offset (empty for an
    /// unknown item or at its end).
    fn remaining(&self) -> &[u8] {
        self.items
            .get(&self.selected)
            .and_then(|d| d.get(self.offset..))
            .unwrap_or(&[])
    }

    fn read_data(&mut self, out: &mut [u8]) {
        for b in out.iter_mut() {
            *b = self.remaining().first().copied().unwrap_or(0);
            if !self.remaining().is_empty() {
                self.offset += 1;
            }
        }
    }

    /// Runs the transfer described at guest address `access`. If the
    /// structure itself cannot be read, nothing can be reported back to the
    /// guest; the error is only counted.
    fn dma(&mut self, access: u64) {
        self.dma_transfers += 1;
        let mut raw = [0u8; DMA_ACCESS_SIZE as usize];
        if self.mem.read_slice(&mut raw, GuestAddress(access)).is_err() {
            self.dma_errors += 1;
            return;
        }
        let control = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
        let length = u32::from_be_bytes([raw[4], raw[5], raw[6], raw[7]]);
        let address = u64::from_be_bytes([
            raw[8], raw[9], raw[10], raw[11], raw[12], raw[13], raw[14], raw[15],
        ]);
        let ok = self.dma_transfer(control, length, address);
        let status = if ok { 0 } else { DMA_CTL_ERROR };
        if !ok {
            self.dma_errors += 1;
        }
        // The write-back of `control` is the guest's completion signal.
        if self
            .mem
            .write_slice(&status.to_be_bytes(), GuestAddress(access))
            .is_err()
        {
            self.dma_errors += 1;
        }
    }

    /// Returns false when the transfer must report [`DMA_CTL_ERROR`].
    fn dma_transfer(&mut self, control: u32, length: u32, address: u64) -> bool {
        if control & 0xffff & !DMA_CTL_KNOWN != 0 {
            return false;
        }
        if control & DMA_CTL_SELECT != 0 {
            self.select((control >> 16) as u16);
        }
        let len = u64::from(length);
        if control & DMA_CTL_READ != 0 {
            if address.checked_add(len).is_none() {
                return false;
            }
            let avail = self.remaining().len().min(length as usize);
            let ok = avail == 0 || {
                let chunk = &self.remaining()[..avail];
                self.mem.write_slice(chunk, GuestAddress(address)).is_ok()
            };
            if !ok {
                return false;
            }
            self.offset += avail;
            // Past the end of the item the guest reads zeros (as QEMU does).
            self.zero_fill(address + avail as u64, len - avail as u64)
        } else if control & DMA_CTL_WRITE != 0 {
            false
        } else if control & DMA_CTL_SKIP != 0 {
            let n = self.remaining().len().min(length as usize);
            self.offset += n;
            true
        } else {
            // Select only (or nothing): done.
            true
        }
    }

    fn zero_fill(&self, mut at: u64, mut len: u64) -> bool {
        const CHUNK: usize = 64 << 10;
        static ZEROS: [u8; CHUNK] = [0; CHUNK];
        while len > 0 {
            let n = len.min(CHUNK as u64) as usize;
            if self.mem.write_slice(&ZEROS[..n], GuestAddress(at)).is_err() {
                return false;
            }
            at += n as u64;
            len -= n as u64;
        }
        true
    }
}

impl<M: Bytes<GuestAddress> + Send> PioDevice for FwCfg<M> {
    fn read(&mut self, base: u16, offset: u16, data: &mut [u8]) {
        match base {
            FW_CFG_PORT_SEL if offset == 1 => self.read_data(data),
            FW_CFG_PORT_DMA => {
                for (i, b) in data.iter_mut().enumerate() {
                    *b = DMA_SIGNATURE
                        .get(usize::from(offset) + i)
                        .copied()
                        .unwrap_or(0);
                }
            }
            _ => data.fill(0),
        }
    }

    fn write(&mut self, base: u16, offset: u16, data: &[u8]) -> Option<ExitRequest> {
        match (base, offset, data.len()) {
            (FW_CFG_PORT_SEL, 0, 2) => self.select(u16::from_le_bytes([data[0], data[1]])),
            (FW_CFG_PORT_DMA, 0, 4) => {
                self.dma_high = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
            }
            (FW_CFG_PORT_DMA, 4, 4) => {
                let low = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
                let addr = (u64::from(self.dma_high) << 32) | u64::from(low);
                // A later 32-bit-only guest must not inherit a stale high half.
                self.dma_high = 0;
                self.dma(addr);
            }
            (FW_CFG_PORT_DMA, 0, 8) => {
                let mut b = [0u8; 8];
                b.copy_from_slice(data);
                self.dma_high = 0;
                self.dma(u64::from_be_bytes(b));
            }
            // Other widths and offsets: ignored, as on QEMU.
            _ => {}
        }
        None
    }
}

/// The x86 boot protocol split QEMU uses for fw_cfg: the boot sector and
/// setup sectors (`(setup_sects + 1) * 512` bytes, `setup_sects` 0 meaning 4)
/// as setup, the rest as the kernel. Returns `None` for an image too short
/// for its own header. OVMF concatenates the two again and boots the result
/// through the kernel's EFI stub.
pub fn split_bzimage(image: &[u8]) -> Option<(&[u8], &[u8])> {
    let sects = match *image.get(0x1f1)? {
        0 => 4,
        n => usize::from(n),
    };
    let setup = (sects + 1) * 512;
    (image.len() >= setup).then(|| image.split_at(setup))
}

/// QEMU's `etc/e820` file: packed little-endian `{address: u64, length:
/// u64, type: u32}` entries (OVMF reads RAM size and layout from it).
pub fn e820_file(entries: &[(u64, u64, u32)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * 20);
    for &(addr, len, kind) in entries {
        out.extend_from_slice(&addr.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&kind.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::GuestMemoryMmap;

    type Mem = GuestMemoryMmap<()>;

    /// 1 MiB of RAM at 0 and 1 MiB at 4 GiB, a hole between.
    fn mem() -> Mem {
        GuestMemoryMmap::from_ranges(&[
            (GuestAddress(0), 1 << 20),
            (GuestAddress(1 << 32), 1 << 20),
        ])
        .unwrap()
    }

    fn dev() -> FwCfg<Mem> {
        let mut d = FwCfg::new(mem());
        d.add_file("etc/e820", vec![1u8; 20]).unwrap();
        d.add_file(
            "opt/org.zerostart/prezeroed",
            (0..100u8).collect::<Vec<_>>(),
        )
        .unwrap();
        d
    }

    fn select(d: &mut FwCfg<Mem>, key: u16) {
        d.write(FW_CFG_PORT_SEL, 0, &key.to_le_bytes());
    }

    fn read_port(d: &mut FwCfg<Mem>, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| {
                let mut b = [0u8];
                d.read(FW_CFG_PORT_SEL, 1, &mut b);
                b[0]
            })
            .collect()
    }

    /// Writes an access structure at `at` and starts it the way OVMF does:
    /// high half, then low half, each a big-endian 32-bit write.
    fn dma(d: &mut FwCfg<Mem>, at: u64, control: u32, length: u32, address: u64) -> u32 {
        let mut s = Vec::new();
        s.extend_from_slice(&control.to_be_bytes());
        s.extend_from_slice(&length.to_be_bytes());
        s.extend_from_slice(&address.to_be_bytes());
        d.mem.write_slice(&s, GuestAddress(at)).unwrap();
        d.write(FW_CFG_PORT_DMA, 0, &((at >> 32) as u32).to_be_bytes());
        d.write(FW_CFG_PORT_DMA, 4, &(at as u32).to_be_bytes());
        let mut c = [0u8; 4];
        d.mem.read_slice(&mut c, GuestAddress(at)).unwrap();
        u32::from_be_bytes(c)
    }

    fn guest(d: &FwCfg<Mem>, at: u64, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        d.mem.read_slice(&mut v, GuestAddress(at)).unwrap();
        v
    }

    #[test]
    fn signature_id_and_selector_reads() {
        let mut d = dev();
        select(&mut d, key::SIGNATURE);
        assert_eq!(read_port(&mut d, 4), b"QEMU");
        // Past the end: zeros.
        assert_eq!(read_port(&mut d, 2), [0, 0]);
        select(&mut d, key::ID);
        assert_eq!(read_port(&mut d, 4), 3u32.to_le_bytes());
        // Re-selecting resets the offset; the write bit is ignored.
        select(&mut d, key::SIGNATURE | 0x4000);
        assert_eq!(read_port(&mut d, 1), b"Q");
        // A wide read returns consecutive bytes.
        let mut w = [0u8; 2];
        d.read(FW_CFG_PORT_SEL, 1, &mut w);
        assert_eq!(&w, b"EM");
        // Unknown item: zeros.
        select(&mut d, 0x1234);
        assert_eq!(read_port(&mut d, 3), [0, 0, 0]);
        // The DMA register reads as the signature.
        let mut s = [0u8; 8];
        d.read(FW_CFG_PORT_DMA, 0, &mut s[..4]);
        d.read(FW_CFG_PORT_DMA, 4, &mut s[4..]);
        assert_eq!(&s, b"QEMU CFG");
    }

    #[test]
    fn directory_encoding() {
        let mut d = dev();
        select(&mut d, key::FILE_DIR);
        let dir = read_port(&mut d, 4 + 2 * 64);
        assert_eq!(&dir[..4], &2u32.to_be_bytes());
        let e = &dir[4 + 64..];
        assert_eq!(&e[..4], &100u32.to_be_bytes());
        assert_eq!(&e[4..6], &0x21u16.to_be_bytes());
        assert_eq!(&e[6..8], &[0, 0]);
        assert_eq!(&e[8..8 + 27], b"opt/org.zerostart/prezeroed");
        assert!(e[8 + 27..64].iter().all(|&b| b == 0));
        assert_eq!(&dir[4..8], &20u32.to_be_bytes());
        assert_eq!(&dir[8..10], &0x20u16.to_be_bytes());
        assert_eq!(&dir[12..20], b"etc/e820");
        select(&mut d, 0x21);
        assert_eq!(read_port(&mut d, 100), (0..100u8).collect::<Vec<_>>());
    }

    #[test]
    fn builder_errors() {
        let mut d = dev();
        assert_eq!(
            d.add_file("etc/e820", vec![]),
            Err(Error::DuplicateName("etc/e820".into()))
        );
        assert!(matches!(d.add_file("", vec![]), Err(Error::BadName(_))));
        assert!(matches!(
            d.add_file(&"x".repeat(56), vec![]),
            Err(Error::BadName(_))
        ));
        assert!(d.add_file(&"x".repeat(55), vec![]).is_ok());
        assert!(matches!(d.add_file("a\0b", vec![]), Err(Error::BadName(_))));
        for k in [key::SIGNATURE, key::ID, key::FILE_DIR, 0x20, 0x3fff, 0x4008] {
            assert_eq!(d.set_item(k, vec![1]), Err(Error::ReservedKey(k)));
        }
        d.set_u32(key::KERNEL_SIZE, 7).unwrap();
        assert_eq!(d.item(key::KERNEL_SIZE), Some(&7u32.to_le_bytes()[..]));
    }

    #[test]
    fn dma_select_read_and_zero_fill() {
        let mut d = dev();
        // Pre-fill the target so zero-fill is visible.
        d.mem
            .write_slice(&[0xaa; 200], GuestAddress(0x2000))
            .unwrap();
        let c = dma(
            &mut d,
            0x1000,
            (0x21 << 16) | DMA_CTL_SELECT | DMA_CTL_READ,
            150,
            0x2000,
        );
        assert_eq!(c, 0);
        let got = guest(&d, 0x2000, 200);
        assert_eq!(&got[..100], &(0..100u8).collect::<Vec<_>>()[..]);
        assert!(
            got[100..150].iter().all(|&b| b == 0),
            "zero-filled past the end"
        );
        assert!(
            got[150..].iter().all(|&b| b == 0xaa),
            "nothing beyond length"
        );
        assert_eq!((d.dma_transfers(), d.dma_errors()), (1, 0));
    }

    #[test]
    fn dma_skip_then_read_and_port_continues() {
        let mut d = dev();
        assert_eq!(
            dma(
                &mut d,
                0x1000,
                (0x21 << 16) | DMA_CTL_SELECT | DMA_CTL_SKIP,
                10,
                0
            ),
            0
        );
        assert_eq!(dma(&mut d, 0x1000, DMA_CTL_READ, 5, 0x3000), 0);
        assert_eq!(guest(&d, 0x3000, 5), [10, 11, 12, 13, 14]);
        // The port interface shares the offset.
        assert_eq!(read_port(&mut d, 2), [15, 16]);
        // Skipping past the end stops at the end.
        assert_eq!(dma(&mut d, 0x1000, DMA_CTL_SKIP, 1000, 0), 0);
        assert_eq!(read_port(&mut d, 1), [0]);
        // Select only.
        assert_eq!(
            dma(
                &mut d,
                0x1000,
                (key::SIGNATURE as u32) << 16 | DMA_CTL_SELECT,
                0,
                0
            ),
            0
        );
        assert_eq!(read_port(&mut d, 4), b"QEMU");
        // A 64-bit write starts a transfer too (struct above 4 GiB).
        let at = (1u64 << 32) + 0x100;
        let mut s = Vec::new();
        s.extend_from_slice(&(DMA_CTL_SELECT | DMA_CTL_READ).to_be_bytes());
        s.extend_from_slice(&4u32.to_be_bytes());
        s.extend_from_slice(&((1u64 << 32) + 0x800).to_be_bytes());
        d.mem.write_slice(&s, GuestAddress(at)).unwrap();
        d.write(FW_CFG_PORT_DMA, 0, &at.to_be_bytes());
        assert_eq!(guest(&d, at, 4), [0, 0, 0, 0]);
        assert_eq!(guest(&d, (1 << 32) + 0x800, 4), b"QEMU");
    }

    #[test]
    fn dma_bad_requests_set_the_error_bit() {
        let mut d = dev();
        let sel = (0x21u32 << 16) | DMA_CTL_SELECT;
        // Target in the hole, past the end of RAM, straddling the end of
        // the first region, wrapping around 2^64.
        for (addr, len) in [
            (0x8000_0000u64, 16u32),
            (0x2_0000_0000, 16),
            ((1 << 20) - 8, 16),
            (u64::MAX - 4, 16),
        ] {
            assert_eq!(
                dma(&mut d, 0x1000, sel | DMA_CTL_READ, len, addr),
                DMA_CTL_ERROR,
                "{addr:#x}"
            );
        }
        // Zero-fill into the hole (item exhausted) also fails.
        assert_eq!(dma(&mut d, 0x1000, sel | DMA_CTL_SKIP, 100, 0), 0);
        assert_eq!(
            dma(&mut d, 0x1000, DMA_CTL_READ, 1 << 30, 0x8000),
            DMA_CTL_ERROR
        );
        // Writes: every item is read-only.
        assert_eq!(
            dma(&mut d, 0x1000, sel | DMA_CTL_WRITE, 4, 0x2000),
            DMA_CTL_ERROR
        );
        // Reserved control bits.
        for bit in 5..16 {
            assert_eq!(
                dma(&mut d, 0x1000, sel | DMA_CTL_READ | (1 << bit), 4, 0x2000),
                DMA_CTL_ERROR
            );
        }
        // An error bit set by the guest is not a request.
        assert_eq!(dma(&mut d, 0x1000, sel | DMA_CTL_ERROR, 0, 0), 0);
        let errors = d.dma_errors();
        // The access structure itself outside RAM: nothing to write back,
        // counted, no panic.
        d.write(FW_CFG_PORT_DMA, 0, &0u32.to_be_bytes());
        d.write(FW_CFG_PORT_DMA, 4, &0x9000_0000u32.to_be_bytes());
        d.write(FW_CFG_PORT_DMA, 0, &u64::MAX.to_be_bytes());
        assert_eq!(d.dma_errors(), errors + 2);
        // Odd widths and offsets are ignored.
        d.write(FW_CFG_PORT_DMA, 2, &[1, 2]);
        d.write(FW_CFG_PORT_SEL, 0, &[1]);
        d.write(FW_CFG_PORT_SEL, 1, &[1, 2]);
    }

    #[test]
    fn dma_through_the_bus() {
        let mut bus = crate::PioBus::new();
        let d = Arc::new(std::sync::Mutex::new(dev()));
        bus.insert(FW_CFG_PORT_SEL, FW_CFG_PORT_SEL_LEN, d.clone())
            .unwrap();
        bus.insert(FW_CFG_PORT_DMA, FW_CFG_PORT_DMA_LEN, d.clone())
            .unwrap();
        bus.write(FW_CFG_PORT_SEL, &key::SIGNATURE.to_le_bytes())
            .unwrap();
        let mut b = [0u8];
        assert!(bus.read(FW_CFG_PORT_DATA, &mut b));
        assert_eq!(b, *b"Q");
        let mut s = [0u8; 4];
        assert!(bus.read(FW_CFG_PORT_DMA + 4, &mut s));
        assert_eq!(&s, b" CFG");
    }

    #[test]
    fn bzimage_split_and_e820() {
        let mut img = vec![0u8; 0x1400];
        img[0x1f1] = 3;
        let (s, k) = split_bzimage(&img).unwrap();
        assert_eq!((s.len(), k.len()), (0x800, 0xc00));
        img[0x1f1] = 0;
        assert_eq!(split_bzimage(&img).unwrap().0.len(), 0xa00);
        assert!(split_bzimage(&img[..0x100]).is_none());
        img[0x1f1] = 255;
        assert!(split_bzimage(&img).is_none());
        let f = e820_file(&[(0, 0x9fc00, 1), (1 << 20, 3 << 20, 1)]);
        assert_eq!(f.len(), 40);
        assert_eq!(&f[28..36], &(3u64 << 20).to_le_bytes());
        assert_eq!(&f[36..40], &1u32.to_le_bytes());
    }

    /// DMA writes go through vm-memory, so the dirty bitmap the VMM's
    /// guest memory carries records them (they are the guest's writes).
    #[test]
    fn dma_writes_are_tracked_in_the_dirty_bitmap() {
        use vm_memory::bitmap::{AtomicBitmap, Bitmap};
        use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};
        let m: GuestMemoryMmap<AtomicBitmap> =
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        let mut d = FwCfg::new(m.clone());
        d.add_file("f", vec![7u8; 10]).unwrap();
        let mut s = Vec::new();
        s.extend_from_slice(&((0x20u32 << 16) | DMA_CTL_SELECT | DMA_CTL_READ).to_be_bytes());
        s.extend_from_slice(&10u32.to_be_bytes());
        s.extend_from_slice(&0x5_0000u64.to_be_bytes());
        // The structure goes in through a raw copy so only DMA dirties pages.
        let r = m.find_region(GuestAddress(0)).unwrap();
        // SAFETY: offset 0x1000 + 16 lies inside the 1 MiB mapping.
        unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), r.as_ptr().add(0x1000), 16) };
        assert!(!r.bitmap().dirty_at(0x5_0000));
        d.write(FW_CFG_PORT_DMA, 4, &0x1000u32.to_be_bytes());
        assert!(r.bitmap().dirty_at(0x5_0000));
        assert!(r.bitmap().dirty_at(0x1000), "the control write-back too");
        let mut got = [0u8; 10];
        m.read_slice(&mut got, GuestAddress(0x5_0000)).unwrap();
        assert_eq!(got, [7; 10]);
    }
}
