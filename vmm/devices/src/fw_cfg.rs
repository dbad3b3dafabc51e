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
//! **Bounded time per exit.** A guest can ask for up to 4 GiB in one
//! `outl` (a read past the end of an item is zero-filled, as on QEMU: one
//! `length = 0xffffffff` descriptor zero-fills 4 GiB, 10.9 s on fresh
//! memory). QEMU runs every transfer to the end inside the port write.
//! zerostart does not: a transfer of at most [`DMA_INLINE_MAX`] bytes runs
//! there (every transfer real firmware makes for its tables and the hint),
//! a longer one goes to a worker thread that moves [`DMA_CHUNK`] bytes at a
//! time and looks at a cancel flag between chunks, and the port write
//! returns at once with `control` still non-zero. The fw_cfg spec allows
//! exactly this ("otherwise: transfer still in progress"), and the guests
//! that use DMA poll `control` until it is 0 or has the error bit: OVMF's
//! `InternalQemuFwCfgDmaBytes`, SeaBIOS, Linux's `qemu_fw_cfg` driver. One
//! transfer runs at a time; a DMA started while one is in flight fails
//! with the error bit. "In flight" ends when the worker writes the status
//! the guest polls for, not when its thread exits: the guest starts its
//! next DMA at once, and OVMF hangs on an error bit. [`PioDevice::stop`]
//! cancels a transfer in flight (its `control` gets the error bit) and
//! joins the worker, so no thread writes guest memory after the VMM tears
//! it down.
//!
//! DMA transfers write guest memory on the guest's request, after the first
//! instruction ran; they go through vm-memory (so its dirty bitmap records
//! them) and are the guest's own writes as far as the zero hint is
//! concerned: the hint describes memory at the first instruction.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

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

/// Longest transfer (bytes moved, copied or zero-filled) that runs inside
/// the guest's port write; longer ones go to a worker thread. 256 KiB is
/// well under a millisecond of copying, and larger than the directory,
/// the hint and every table firmware reads.
pub const DMA_INLINE_MAX: u64 = 256 << 10;
/// Bytes a DMA worker moves between two looks at its cancel flag: about a
/// millisecond on warm memory, a few on memory the host has never touched.
pub const DMA_CHUNK: u64 = 1 << 20;

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
    /// Shared with the worker, which counts the failures it sees.
    dma_errors: Arc<AtomicU64>,
    dma_transfers: u64,
    /// Set to stop the worker between two chunks; never cleared.
    cancel: Arc<AtomicBool>,
    /// The worker of the last long transfer, if not yet joined.
    worker: Option<JoinHandle<()>>,
    /// Set by the worker *before* it writes the status that tells the
    /// guest its transfer ended. The worker thread outlives that write
    /// (it still has to return and exit), and firmware starts its next
    /// DMA the moment it sees `control` clear: judging "in flight" by the
    /// thread having exited failed that next DMA with the error bit, and
    /// OVMF's `InternalQemuFwCfgDmaBytes` then spins forever (seen as a
    /// CloudHv boot hung right after the kernel blob, in CI).
    reported: Arc<AtomicBool>,
    /// Tests only: how long the worker lingers after writing the status,
    /// to hold open the window the flag above closes.
    #[cfg(test)]
    linger: std::time::Duration,
}

/// One transfer, ready to run: everything it needs is its own, so it can
/// run on a worker thread while the vCPU goes back to the guest.
struct Transfer {
    /// Guest address of the `FWCfgDmaAccess` structure (for the status).
    access: u64,
    /// The selected item and where the copy starts in it.
    item: Arc<[u8]>,
    from: usize,
    /// How many of `length` bytes come from the item; the rest are zeros.
    copy: u64,
    length: u64,
    address: u64,
}

impl Transfer {
    /// Moves the data in [`DMA_CHUNK`]s, stopping early (with an error)
    /// when `cancel` is set; returns false when the guest must see
    /// [`DMA_CTL_ERROR`].
    fn run<M: Bytes<GuestAddress>>(&self, mem: &M, cancel: &AtomicBool) -> bool {
        static ZEROS: [u8; DMA_CHUNK as usize] = [0; DMA_CHUNK as usize];
        let mut done = 0u64;
        while done < self.length {
            if cancel.load(Ordering::Acquire) {
                return false;
            }
            let at = GuestAddress(self.address + done);
            let ok = if done < self.copy {
                let n = (self.copy - done).min(DMA_CHUNK);
                let start = self.from + done as usize;
                let r = mem.write_slice(&self.item[start..start + n as usize], at);
                done += n;
                r.is_ok()
            } else {
                // Past the end of the item the guest reads zeros (as on
                // QEMU).
                let n = (self.length - done).min(DMA_CHUNK);
                done += n;
                mem.write_slice(&ZEROS[..n as usize], at).is_ok()
            };
            if !ok {
                return false;
            }
        }
        true
    }

    /// Runs the transfer, sets `reported` (if given) and writes the status
    /// back to `control`, the guest's completion signal.
    fn complete<M: Bytes<GuestAddress>>(
        &self,
        mem: &M,
        cancel: &AtomicBool,
        errors: &AtomicU64,
        reported: Option<&AtomicBool>,
    ) {
        let ok = self.run(mem, cancel);
        if !ok {
            errors.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(r) = reported {
            r.store(true, Ordering::Release);
        }
        write_status(mem, self.access, ok, errors);
    }
}

/// Writes a transfer's status into the `control` field at `access`.
fn write_status<M: Bytes<GuestAddress>>(mem: &M, access: u64, ok: bool, errors: &AtomicU64) {
    let status = if ok { 0 } else { DMA_CTL_ERROR };
    if mem
        .write_slice(&status.to_be_bytes(), GuestAddress(access))
        .is_err()
    {
        errors.fetch_add(1, Ordering::Relaxed);
    }
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

impl<M> Drop for FwCfg<M> {
    /// A transfer in flight holds a clone of guest memory: stop and join it
    /// (the VMM normally has, through [`PioDevice::stop`]).
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Release);
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl<M: Bytes<GuestAddress> + Clone + Send + Sync + 'static> FwCfg<M> {
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
            dma_errors: Arc::new(AtomicU64::new(0)),
            dma_transfers: 0,
            cancel: Arc::new(AtomicBool::new(false)),
            worker: None,
            reported: Arc::new(AtomicBool::new(false)),
            #[cfg(test)]
            linger: std::time::Duration::ZERO,
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
    /// write requests, guest addresses outside RAM, a transfer already in
    /// flight, cancelled by [`PioDevice::stop`]).
    pub fn dma_errors(&self) -> u64 {
        self.dma_errors.load(Ordering::Relaxed)
    }

    /// True while a transfer runs on the worker thread and the guest has
    /// not yet been told it ended.
    pub fn dma_in_flight(&self) -> bool {
        self.worker.is_some() && !self.reported.load(Ordering::Acquire)
    }

    /// Waits for the transfer in flight, if any, to end (tests and the
    /// fuzzer; the VMM never waits for the guest's DMA).
    pub fn wait_dma(&mut self) {
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
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

    /// Starts the transfer described at guest address `access`: inline
    /// when short, else on the worker thread (see the module doc). If the
    /// structure itself cannot be read, nothing can be reported back to
    /// the guest; the error is only counted.
    fn dma(&mut self, access: u64) {
        self.dma_transfers += 1;
        let mut raw = [0u8; DMA_ACCESS_SIZE as usize];
        if self.mem.read_slice(&mut raw, GuestAddress(access)).is_err() {
            self.dma_errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let control = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
        let length = u32::from_be_bytes([raw[4], raw[5], raw[6], raw[7]]);
        let address = u64::from_be_bytes([
            raw[8], raw[9], raw[10], raw[11], raw[12], raw[13], raw[14], raw[15],
        ]);
        if self.worker.is_some() && self.reported.load(Ordering::Acquire) {
            // The guest saw the last transfer end: its worker has at most
            // its own exit left, so this join is short.
            self.wait_dma();
        }
        let transfer = if self.worker.is_some() {
            // One transfer at a time: the guest started a second one
            // without waiting for the first.
            None
        } else {
            self.plan(access, control, length, address)
        };
        let Some(t) = transfer else {
            self.dma_errors.fetch_add(1, Ordering::Relaxed);
            write_status(&self.mem, access, false, &self.dma_errors);
            return;
        };
        if t.length <= DMA_INLINE_MAX || self.cancel.load(Ordering::Acquire) {
            t.complete(&self.mem, &self.cancel, &self.dma_errors, None);
            return;
        }
        self.reported.store(false, Ordering::Release);
        let (mem, cancel, errors, reported) = (
            self.mem.clone(),
            self.cancel.clone(),
            self.dma_errors.clone(),
            self.reported.clone(),
        );
        #[cfg(test)]
        let linger = self.linger;
        let spawned = std::thread::Builder::new()
            .name("fw_cfg-dma".into())
            .spawn(move || {
                t.complete(&mem, &cancel, &errors, Some(&reported));
                #[cfg(test)]
                std::thread::sleep(linger);
            });
        match spawned {
            Ok(h) => self.worker = Some(h),
            Err(_) => {
                // No thread: fail the transfer rather than run it here.
                self.dma_errors.fetch_add(1, Ordering::Relaxed);
                write_status(&self.mem, access, false, &self.dma_errors);
            }
        }
    }

    /// Applies the request's effect on the device (select, offset) and
    /// returns the data movement it needs, or `None` when it must report
    /// [`DMA_CTL_ERROR`]. Select and skip complete here; a read becomes a
    /// [`Transfer`] (of 0 bytes for a select-only request).
    fn plan(&mut self, access: u64, control: u32, length: u32, address: u64) -> Option<Transfer> {
        if control & 0xffff & !DMA_CTL_KNOWN != 0 {
            return None;
        }
        if control & DMA_CTL_SELECT != 0 {
            self.select((control >> 16) as u16);
        }
        let len = u64::from(length);
        let mut t = Transfer {
            access,
            item: self
                .items
                .get(&self.selected)
                .cloned()
                .unwrap_or_else(|| Arc::from(&[][..])),
            from: self.offset,
            copy: 0,
            length: 0,
            address,
        };
        if control & DMA_CTL_READ != 0 {
            address.checked_add(len)?;
            let avail = self.remaining().len().min(length as usize);
            self.offset += avail;
            t.copy = avail as u64;
            t.length = len;
        } else if control & DMA_CTL_WRITE != 0 {
            return None;
        } else if control & DMA_CTL_SKIP != 0 {
            let n = self.remaining().len().min(length as usize);
            self.offset += n;
        }
        // Otherwise select only (or nothing): done.
        Some(t)
    }
}

impl<M: Bytes<GuestAddress> + Clone + Send + Sync + 'static> PioDevice for FwCfg<M> {
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

    /// Cancels the transfer in flight and joins its worker (at most one
    /// [`DMA_CHUNK`] later); any DMA started afterwards runs inline, where
    /// the cancel flag makes it fail at once.
    fn stop(&mut self) {
        self.cancel.store(true, Ordering::Release);
        self.wait_dma();
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

    /// An `FWCfgDmaAccess` structure as the guest lays it out (big endian).
    fn access(control: u32, length: u32, address: u64) -> Vec<u8> {
        let mut s = Vec::new();
        s.extend_from_slice(&control.to_be_bytes());
        s.extend_from_slice(&length.to_be_bytes());
        s.extend_from_slice(&address.to_be_bytes());
        s
    }

    /// Writes an access structure at `at` and starts it the way OVMF does:
    /// high half, then low half, each a big-endian 32-bit write.
    fn dma(d: &mut FwCfg<Mem>, at: u64, control: u32, length: u32, address: u64) -> u32 {
        let s = access(control, length, address);
        d.mem.write_slice(&s, GuestAddress(at)).unwrap();
        d.write(FW_CFG_PORT_DMA, 0, &((at >> 32) as u32).to_be_bytes());
        d.write(FW_CFG_PORT_DMA, 4, &(at as u32).to_be_bytes());
        d.wait_dma();
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
        let s = access(DMA_CTL_SELECT | DMA_CTL_READ, 4, (1u64 << 32) + 0x800);
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

    /// A transfer longer than [`DMA_INLINE_MAX`] runs on the worker: the
    /// port write returns with `control` untouched (in progress), then the
    /// worker copies the item, zero-fills the rest and clears `control`.
    #[test]
    fn long_dma_completes_on_the_worker() {
        let mut d = FwCfg::new(mem());
        let item: Vec<u8> = (0..600u32 << 10).map(|i| (i % 251) as u8 + 1).collect();
        d.add_file("big", item.clone()).unwrap();
        d.mem
            .write_slice(&vec![0xaa; 900 << 10], GuestAddress(0x1_0000))
            .unwrap();
        let ctl = (0x20u32 << 16) | DMA_CTL_SELECT | DMA_CTL_READ;
        let s = access(ctl, 800 << 10, 0x1_0000);
        d.mem.write_slice(&s, GuestAddress(0x1000)).unwrap();
        d.write(FW_CFG_PORT_DMA, 4, &0x1000u32.to_be_bytes());
        d.wait_dma();
        assert_eq!(guest(&d, 0x1000, 4), [0; 4], "control cleared when done");
        let got = guest(&d, 0x1_0000, 900 << 10);
        assert_eq!(&got[..600 << 10], &item[..]);
        assert!(got[600 << 10..800 << 10].iter().all(|&b| b == 0));
        assert!(got[800 << 10..].iter().all(|&b| b == 0xaa));
        assert_eq!((d.dma_transfers(), d.dma_errors()), (1, 0));
        // The port interface continues after the transfer.
        assert_eq!(read_port(&mut d, 1), [0]);
    }

    /// The DMA a guest starts the moment it sees a worker's transfer end
    /// must run, even while the worker thread has not exited yet. OVMF
    /// does exactly this (kernel blob on the worker, then the 4-byte
    /// initrd size): the second DMA used to fail with the error bit,
    /// since "in flight" meant "thread not exited", and CloudHv hung in
    /// `InternalQemuFwCfgDmaBytes`. `linger` holds the worker alive for
    /// 300 ms after its status write, so the window is always open.
    #[test]
    fn dma_right_after_a_worker_transfer_ends_runs() {
        use std::time::{Duration, Instant};
        let mut d = FwCfg::new(mem());
        d.linger = Duration::from_millis(300);
        d.add_file("big", vec![5u8; 600 << 10]).unwrap();
        d.add_file("size", 0x1234_5678u32.to_le_bytes().to_vec())
            .unwrap();
        let s = access(
            (0x20u32 << 16) | DMA_CTL_SELECT | DMA_CTL_READ,
            600 << 10,
            0x1_0000,
        );
        d.mem.write_slice(&s, GuestAddress(0x1000)).unwrap();
        d.write(FW_CFG_PORT_DMA, 4, &0x1000u32.to_be_bytes());
        // The guest's poll loop.
        let t0 = Instant::now();
        while guest(&d, 0x1000, 4) != [0; 4] {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "first DMA never ended"
            );
            std::hint::spin_loop();
        }
        assert!(!d.dma_in_flight(), "reported done, yet counted in flight");
        // The worker is still lingering; the next request must still run.
        let ctl = (0x21u32 << 16) | DMA_CTL_SELECT | DMA_CTL_READ;
        d.mem
            .write_slice(&access(ctl, 4, 0x3000), GuestAddress(0x2000))
            .unwrap();
        d.write(FW_CFG_PORT_DMA, 4, &0x2000u32.to_be_bytes());
        assert_eq!(guest(&d, 0x2000, 4), [0; 4], "second DMA failed");
        assert_eq!(guest(&d, 0x3000, 4), 0x1234_5678u32.to_le_bytes());
        assert_eq!((d.dma_transfers(), d.dma_errors()), (2, 0));
    }

    /// One guest `outl` of a descriptor with length 0xffffffff over 4 GiB
    /// of RAM: the port write must return within a bound (it used to
    /// zero-fill 4 GiB first, 10.9 s on fresh memory, under the device
    /// lock), a second DMA meanwhile fails, and `stop` cancels the
    /// transfer (error bit) and joins the worker within a bound.
    #[test]
    fn dma_of_4gib_returns_at_once_and_stops_within_a_bound() {
        use std::time::{Duration, Instant};
        // Lazily allocated: only what the worker touches before the stop
        // becomes resident.
        let m: Mem =
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), (4 << 30) + (4 << 20))]).unwrap();
        let mut d = FwCfg::new(m);
        let ctl = (0x7ffu32 << 16) | DMA_CTL_SELECT | DMA_CTL_READ;
        let s = access(ctl, u32::MAX, 0x10_0000);
        d.mem.write_slice(&s, GuestAddress(0x1000)).unwrap();
        let t0 = Instant::now();
        d.write(FW_CFG_PORT_DMA, 4, &0x1000u32.to_be_bytes());
        let exit = t0.elapsed();
        assert!(
            exit < Duration::from_millis(200),
            "port write took {exit:?}"
        );
        assert!(d.dma_in_flight());
        assert_eq!(
            guest(&d, 0x1000, 4),
            ctl.to_be_bytes(),
            "in progress: control untouched"
        );
        // A second transfer while the first runs: error bit, no wait.
        d.mem
            .write_slice(&access(DMA_CTL_READ, 4, 0x3000), GuestAddress(0x2000))
            .unwrap();
        d.write(FW_CFG_PORT_DMA, 4, &0x2000u32.to_be_bytes());
        assert_eq!(guest(&d, 0x2000, 4), DMA_CTL_ERROR.to_be_bytes());
        std::thread::sleep(Duration::from_millis(50));
        let t1 = Instant::now();
        d.stop();
        let stop = t1.elapsed();
        assert!(stop < Duration::from_millis(500), "stop took {stop:?}");
        assert!(!d.dma_in_flight());
        assert_eq!(
            guest(&d, 0x1000, 4),
            DMA_CTL_ERROR.to_be_bytes(),
            "cancelled"
        );
        assert_eq!(d.dma_errors(), 2);
        // After the stop, a DMA fails at once instead of starting work.
        d.mem.write_slice(&s, GuestAddress(0x1000)).unwrap();
        d.write(FW_CFG_PORT_DMA, 4, &0x1000u32.to_be_bytes());
        assert_eq!(guest(&d, 0x1000, 4), DMA_CTL_ERROR.to_be_bytes());
        assert!(!d.dma_in_flight());
    }
}
