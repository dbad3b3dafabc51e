//! virtio-blk (virtio 1.2, section 5.2) on a raw image file.
//!
//! One request queue. A request is a descriptor chain: the device-readable
//! part starts with the 16-byte header (`type`, reserved, `sector`) and,
//! for a write, carries the data; the device-writable part carries the
//! data of a read (or the ID of `GET_ID`) and ends with the one status
//! byte. The split between descriptors is not assumed (virtio 1.x drivers
//! may frame a request any way they like): the header and data are
//! addressed as byte offsets into the readable and writable parts.
//!
//! What the guest can get wrong, and what it gets:
//!
//! | guest error | result |
//! |---|---|
//! | a data or header descriptor outside guest RAM, header shorter than 16 bytes, readable after writable, data of a read/write not a multiple of 512, more data segments than `seg_max`, a request past the end of the disk, data on a request that takes none | status `VIRTIO_BLK_S_IOERR`, nothing transferred |
//! | a write to a `readonly` disk | `VIRTIO_BLK_S_IOERR`, the file is never opened for writing |
//! | an unknown request type | `VIRTIO_BLK_S_UNSUPP` |
//! | no place for the status byte (chain without a final device-writable descriptor of length >= 1 inside RAM), a chain that loops, points past the table or cannot be read | [`QueueFault`]: the transport marks the device `NEEDS_RESET` |
//!
//! Every guest address is checked with vm-memory before any byte moves,
//! and moved only through vm-memory's accessors, so a request can neither
//! reach host memory outside guest RAM nor transfer part of its data
//! before failing on a bad segment.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_F_FLUSH, VIRTIO_BLK_F_RO, VIRTIO_BLK_F_SEG_MAX, VIRTIO_BLK_ID_BYTES,
    VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK, VIRTIO_BLK_S_UNSUPP, VIRTIO_BLK_T_FLUSH,
    VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT,
};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ids::VIRTIO_ID_BLOCK;
use virtio_queue::desc::split::Descriptor;
use virtio_queue::{Queue, QueueOwnedT, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemory, Permissions};

use super::{QueueFault, VirtioDevice};

/// Sector size of the virtio-blk protocol (fixed by the spec).
pub const SECTOR_SIZE: u64 = 512;
/// Size of the request header (`struct virtio_blk_outhdr`).
pub const HEADER_LEN: u64 = 16;
/// Descriptors per queue (Firecracker's and cloud-hypervisor's default).
pub const QUEUE_SIZE: u16 = 256;
/// Most data segments in one request, offered as `seg_max`: the queue
/// size less the header and status descriptors, as Linux expects.
pub const SEG_MAX: u32 = QUEUE_SIZE as u32 - 2;

/// Opening a disk image; each message names the problem and the fix.
#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    /// Cannot open the image.
    #[error("cannot open disk image {path}: {err}; check --disk path= (and use readonly=on for an image this user may only read)")]
    Open {
        /// Path.
        path: PathBuf,
        /// Cause.
        err: std::io::Error,
    },
    /// Not a regular file or block device.
    #[error(
        "disk image {0} is not a regular file or block device; point --disk path= at a raw image"
    )]
    NotAFile(PathBuf),
    /// Cannot find the size.
    #[error("cannot read the size of disk image {path}: {err}; check the file")]
    Size {
        /// Path.
        path: PathBuf,
        /// Cause.
        err: std::io::Error,
    },
    /// Another process (a VM) holds a conflicting lock on the image.
    #[error("disk image {path} is in use: another process holds a {held} lock on it (a VM using it{how}); stop that VM, or give every user of a shared image readonly=on")]
    Locked {
        /// Path.
        path: PathBuf,
        /// "write" or "read".
        held: &'static str,
        /// Extra words for the message.
        how: &'static str,
    },
    /// The lock call itself failed (not a conflict).
    #[error(
        "cannot lock disk image {path}: {err}; put the image on a file system with POSIX locks"
    )]
    Lock {
        /// Path.
        path: PathBuf,
        /// Cause.
        err: std::io::Error,
    },
}

/// Locks the whole image for this open file description, as
/// cloud-hypervisor does: a write lock for a writable disk, a read lock for
/// `readonly=on`. Why: two VMs writing one ext4 image corrupt it within
/// seconds, and a reader of an image another VM writes sees torn data. Open
/// file description (OFD) locks belong to the descriptor, not the process,
/// so they also conflict inside one process (two `--disk` of one image) and
/// go away with the descriptor; QEMU's byte-range image locks overlap a
/// whole-file lock, so QEMU and zerostart refuse each other's writable
/// images too.
fn lock_image(file: &File, path: &Path, readonly: bool) -> Result<(), BlockError> {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed flock is valid; the fields are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = if readonly {
        libc::F_RDLCK
    } else {
        libc::F_WRLCK
    } as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // l_start = l_len = 0: the whole file, however it grows.
    // SAFETY: F_OFD_SETLK reads the flock we own; the descriptor is open.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => {
            // Which lock is in the way, for the message.
            // SAFETY: as above; F_OFD_GETLK writes into fl.
            let mut probe: libc::flock = unsafe { std::mem::zeroed() };
            probe.l_type = libc::F_WRLCK as libc::c_short;
            probe.l_whence = libc::SEEK_SET as libc::c_short;
            // SAFETY: as above.
            let got = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut probe) };
            let held = if got == 0 && probe.l_type == libc::F_RDLCK as libc::c_short {
                "read"
            } else {
                "write"
            };
            Err(BlockError::Locked {
                path: path.to_path_buf(),
                held,
                how: if held == "read" {
                    " read-only, while this one would write it"
                } else {
                    " writable"
                },
            })
        }
        _ => Err(BlockError::Lock {
            path: path.to_path_buf(),
            err,
        }),
    }
}

/// A virtio-blk device on a raw image file.
pub struct Block {
    file: File,
    readonly: bool,
    /// Capacity in 512-byte sectors (a partial last sector is not exposed).
    sectors: u64,
    id: [u8; VIRTIO_BLK_ID_BYTES as usize],
    config: [u8; 24],
    queue_sizes: [u16; 1],
}

impl Block {
    /// Opens `path` (read-only with `readonly`, so even a VMM bug cannot
    /// write it) as a raw disk image.
    pub fn open(path: &Path, readonly: bool) -> Result<Self, BlockError> {
        // Checked before opening: opening a directory for writing fails
        // with EISDIR, which names the wrong fix.
        if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            return Err(BlockError::NotAFile(path.to_path_buf()));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(!readonly)
            .open(path)
            .map_err(|err| BlockError::Open {
                path: path.to_path_buf(),
                err,
            })?;
        let meta = file.metadata().map_err(|err| BlockError::Size {
            path: path.to_path_buf(),
            err,
        })?;
        use std::os::unix::fs::FileTypeExt;
        let ft = meta.file_type();
        if !ft.is_file() && !ft.is_block_device() {
            return Err(BlockError::NotAFile(path.to_path_buf()));
        }
        lock_image(&file, path, readonly)?;
        let mut file = file;
        // st_size is 0 for a block device; seeking to the end works for both.
        let bytes = file
            .seek(SeekFrom::End(0))
            .map_err(|err| BlockError::Size {
                path: path.to_path_buf(),
                err,
            })?;
        // The ID the guest sees under /sys/block/vdX/serial: device and
        // inode, so two disks never share one (Firecracker's choice).
        let mut id = [0u8; VIRTIO_BLK_ID_BYTES as usize];
        let s = format!("{:x}{:x}", meta.dev(), meta.ino());
        let n = s.len().min(id.len());
        id[..n].copy_from_slice(&s.as_bytes()[..n]);
        Ok(Self::with_file(file, bytes, readonly, id))
    }

    fn with_file(file: File, bytes: u64, readonly: bool, id: [u8; 20]) -> Self {
        let sectors = bytes / SECTOR_SIZE;
        // struct virtio_blk_config: capacity, size_max (0: not offered),
        // seg_max, geometry (not offered), blk_size (not offered).
        let mut config = [0u8; 24];
        config[0..8].copy_from_slice(&sectors.to_le_bytes());
        config[12..16].copy_from_slice(&SEG_MAX.to_le_bytes());
        Block {
            file,
            readonly,
            sectors,
            id,
            config,
            queue_sizes: [QUEUE_SIZE],
        }
    }

    /// Capacity in sectors.
    pub fn sectors(&self) -> u64 {
        self.sectors
    }

    /// Whether the disk refuses writes.
    pub fn readonly(&self) -> bool {
        self.readonly
    }

    /// Runs one request chain; returns the bytes written into the chain's
    /// device-writable part (for the used ring).
    pub fn handle_chain<M: GuestMemory>(
        &mut self,
        mem: &M,
        chain: impl Iterator<Item = Descriptor>,
    ) -> Result<u32, QueueFault> {
        let req = parse(mem, chain, self.sectors)?;
        let (status, written) = match req.op {
            Ok(op) => match self.execute(mem, &req, op) {
                Ok(n) => (VIRTIO_BLK_S_OK, n),
                Err(s) => (s, 0),
            },
            Err(s) => (s, 0),
        };
        mem.write_obj(status as u8, req.status)
            .map_err(|e| QueueFault(format!("writing the status byte: {e}")))?;
        Ok(written + 1)
    }

    /// Does the I/O of a well-formed request; returns the data bytes
    /// written into guest memory, or the error status.
    fn execute<M: GuestMemory>(&mut self, mem: &M, req: &Request, op: Op) -> Result<u32, u32> {
        let io = |_| VIRTIO_BLK_S_IOERR;
        match op {
            Op::Read { sector } => {
                self.file
                    .seek(SeekFrom::Start(sector * SECTOR_SIZE))
                    .map_err(io)?;
                for &(addr, len) in &req.data {
                    mem.read_exact_volatile_from(addr, &mut self.file, len as usize)
                        .map_err(|_| VIRTIO_BLK_S_IOERR)?;
                }
                Ok(req.data_len)
            }
            Op::Write { sector } => {
                if self.readonly {
                    return Err(VIRTIO_BLK_S_IOERR);
                }
                self.file
                    .seek(SeekFrom::Start(sector * SECTOR_SIZE))
                    .map_err(io)?;
                for &(addr, len) in &req.data {
                    mem.write_all_volatile_to(addr, &mut self.file, len as usize)
                        .map_err(|_| VIRTIO_BLK_S_IOERR)?;
                }
                Ok(0)
            }
            Op::Flush => {
                if !self.readonly {
                    self.file.sync_data().map_err(io)?;
                }
                Ok(0)
            }
            Op::GetId => {
                let mut done = 0usize;
                for &(addr, len) in &req.data {
                    let n = (len as usize).min(self.id.len() - done);
                    mem.write_slice(&self.id[done..done + n], addr)
                        .map_err(|_| VIRTIO_BLK_S_IOERR)?;
                    done += n;
                }
                Ok(done as u32)
            }
        }
    }
}

impl<M: GuestMemory> VirtioDevice<M> for Block {
    fn device_type(&self) -> u32 {
        VIRTIO_ID_BLOCK
    }

    fn features(&self) -> u64 {
        let mut f =
            1u64 << VIRTIO_F_VERSION_1 | 1 << VIRTIO_BLK_F_FLUSH | 1 << VIRTIO_BLK_F_SEG_MAX;
        if self.readonly {
            f |= 1 << VIRTIO_BLK_F_RO;
        }
        f
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &self.queue_sizes
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        super::read_config_bytes(&self.config, offset, data);
    }

    fn process_queue(
        &mut self,
        _index: usize,
        queue: &mut Queue,
        mem: &M,
    ) -> Result<bool, QueueFault> {
        // Take every available chain first (bounded by the queue size: an
        // avail index further ahead than that is an error), then complete
        // them in order.
        let chains: Vec<_> = queue
            .iter(mem)
            .map_err(|e| QueueFault(format!("avail ring: {e}")))?
            .collect();
        let mut used = false;
        for chain in chains {
            let head = chain.head_index();
            let len = self.handle_chain(mem, chain)?;
            queue
                .add_used(mem, head, len)
                .map_err(|e| QueueFault(format!("used ring: {e}")))?;
            used = true;
        }
        Ok(used)
    }
}

/// The request types handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `VIRTIO_BLK_T_IN`.
    Read {
        /// First sector.
        sector: u64,
    },
    /// `VIRTIO_BLK_T_OUT`.
    Write {
        /// First sector.
        sector: u64,
    },
    /// `VIRTIO_BLK_T_FLUSH`.
    Flush,
    /// `VIRTIO_BLK_T_GET_ID`.
    GetId,
}

/// A parsed request: where its status byte goes, and either a checked
/// operation with its data segments or the status it fails with.
#[derive(Debug)]
pub struct Request {
    /// The operation, or the error status the request completes with.
    pub op: Result<Op, u32>,
    /// Data segments (guest address, length), every byte inside RAM.
    pub data: Vec<(GuestAddress, u32)>,
    /// Total length of `data`.
    pub data_len: u32,
    /// The status byte.
    pub status: GuestAddress,
}

/// Byte range `[off, off + len)` of the concatenated `segs`, as segments.
fn sub_range(segs: &[(GuestAddress, u32)], mut off: u64, mut len: u64) -> Vec<(GuestAddress, u32)> {
    let mut out = Vec::new();
    for &(a, l) in segs {
        if len == 0 {
            break;
        }
        let l = u64::from(l);
        if off >= l {
            off -= l;
            continue;
        }
        let n = (l - off).min(len);
        // Inside a checked segment, so no overflow.
        out.push((GuestAddress(a.0 + off), n as u32));
        len -= n;
        off = 0;
    }
    out
}

/// Parses one descriptor chain against a disk of `sectors` sectors.
///
/// `Err` only when the request cannot even be completed (no usable status
/// byte, a broken chain); every other guest error is a [`Request`] whose
/// `op` is the status to report.
pub fn parse<M: GuestMemory>(
    mem: &M,
    chain: impl Iterator<Item = Descriptor>,
    sectors: u64,
) -> Result<Request, QueueFault> {
    let descs: Vec<Descriptor> = chain.collect();
    // virtio-queue ends a chain silently where it cannot follow it (next
    // index past the table, a loop longer than the queue, an unreadable
    // descriptor): a last descriptor that still says "next" is such a
    // chain.
    let Some(last) = descs.last() else {
        return Err(QueueFault(
            "descriptor chain: head index past the table or unreadable".into(),
        ));
    };
    if last.has_next() {
        return Err(QueueFault(
            "descriptor chain: loops, is longer than the queue, or points past the table".into(),
        ));
    }
    // The status byte is the last byte of the last descriptor, which must
    // be device-writable and inside RAM.
    let status = (last.len() > 0 && last.is_write_only())
        .then(|| last.addr().0.checked_add(u64::from(last.len()) - 1))
        .flatten()
        .map(GuestAddress)
        .filter(|&a| mem.check_range(a, 1, Permissions::Write))
        .ok_or_else(|| {
            QueueFault(format!(
                "descriptor chain: no device-writable status byte inside guest RAM (last descriptor {:#x}+{:#x}, flags {:#x})",
                last.addr().0,
                last.len(),
                last.flags()
            ))
        })?;
    let fail = |s: u32| Request {
        op: Err(s),
        data: Vec::new(),
        data_len: 0,
        status,
    };
    let mut readable = Vec::new();
    let mut writable = Vec::new();
    for (i, d) in descs.iter().enumerate() {
        let len = if i + 1 == descs.len() {
            d.len() - 1
        } else {
            d.len()
        };
        let access = if d.is_write_only() {
            Permissions::Write
        } else {
            Permissions::Read
        };
        if !mem.check_range(d.addr(), len as usize, access) {
            return Ok(fail(VIRTIO_BLK_S_IOERR));
        }
        if d.is_write_only() {
            if len > 0 {
                writable.push((d.addr(), len));
            }
        } else if !writable.is_empty() {
            // virtio 1.2, 2.7.4.2: readable descriptors come first.
            return Ok(fail(VIRTIO_BLK_S_IOERR));
        } else if len > 0 {
            readable.push((d.addr(), len));
        }
    }
    let total = |s: &[(GuestAddress, u32)]| s.iter().map(|&(_, l)| u64::from(l)).sum::<u64>();
    let (readable_len, writable_len) = (total(&readable), total(&writable));
    if readable_len < HEADER_LEN {
        return Ok(fail(VIRTIO_BLK_S_IOERR));
    }
    let mut header = [0u8; HEADER_LEN as usize];
    let mut at = 0;
    for (a, l) in sub_range(&readable, 0, HEADER_LEN) {
        mem.read_slice(&mut header[at..at + l as usize], a)
            .map_err(|e| QueueFault(format!("reading a checked header: {e}")))?;
        at += l as usize;
    }
    let kind = u32::from_le_bytes(header[0..4].try_into().unwrap_or_default());
    let sector = u64::from_le_bytes(header[8..16].try_into().unwrap_or_default());
    let out_len = readable_len - HEADER_LEN;
    let (op, data, data_len) = match kind {
        VIRTIO_BLK_T_IN if out_len == 0 => (Op::Read { sector }, writable, writable_len),
        VIRTIO_BLK_T_OUT if writable_len == 0 => (
            Op::Write { sector },
            sub_range(&readable, HEADER_LEN, out_len),
            out_len,
        ),
        VIRTIO_BLK_T_FLUSH if out_len == 0 && writable_len == 0 => (Op::Flush, vec![], 0),
        VIRTIO_BLK_T_GET_ID if out_len == 0 => (Op::GetId, writable, writable_len),
        VIRTIO_BLK_T_IN | VIRTIO_BLK_T_OUT | VIRTIO_BLK_T_FLUSH | VIRTIO_BLK_T_GET_ID => {
            return Ok(fail(VIRTIO_BLK_S_IOERR))
        }
        _ => return Ok(fail(VIRTIO_BLK_S_UNSUPP)),
    };
    if let Op::Read { sector } | Op::Write { sector } = op {
        let fits = sector
            .checked_add(data_len / SECTOR_SIZE)
            .is_some_and(|end| end <= sectors);
        if !data_len.is_multiple_of(SECTOR_SIZE) || !fits || data.len() > SEG_MAX as usize {
            return Ok(fail(VIRTIO_BLK_S_IOERR));
        }
    }
    // A chain's total length fits in u32 (virtio-queue stops a chain whose
    // lengths overflow it), so data_len does too.
    let Ok(data_len) = u32::try_from(data_len) else {
        return Ok(fail(VIRTIO_BLK_S_IOERR));
    };
    Ok(Request {
        op: Ok(op),
        data,
        data_len,
        status,
    })
}

#[cfg(test)]
mod tests;
