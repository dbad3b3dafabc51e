//! The client side: lease pre-zeroed memory from a running pool, and ask
//! for its status.
//!
//! A [`Lease`] owns the region's fd and the connection; dropping it (or the
//! process dying) ends the lease and the region goes back to the pool as
//! dirty, and the daemon replaces its memory (a returned region's pages and
//! file are never leased again, whatever the former lessee kept). Memory
//! this process still maps when the lease ends would go on being used after
//! the pool counted it free (safe, but the host would then hold that
//! region's memory twice, and the daemon reports the holder), so dropping a
//! `Lease` while this process still maps its file (a VMM whose guest memory
//! is shared with device threads, say) keeps the connection open until the
//! process exits; the kernel tears the mappings down before it closes the
//! connection.

use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::proto::{
    read_frame_fds, write_frame, LaunchReport, LeaseInfo, Piece, Request, RequestBody, Response,
    ResponseBody, Status, MAX_PIECES, VERSION,
};
use crate::{Error, PageSize};

/// How long a client waits for the daemon to answer.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a launch report waits for the daemon: a report is
/// bookkeeping, and a launcher about to start (or become) a VMM must not
/// hang on a wedged pool.
pub const REPORT_TIMEOUT: Duration = Duration::from_secs(2);

/// Leased pre-zeroed memory: map `[offset, offset + len)` of [`Lease::fd`]
/// shared, or, for a lease of several regions ([`lease_pieces`]), each of
/// [`Lease::pieces`] one after another ([`Lease::map`] does either). Every
/// byte of it is zero when the lease is granted.
#[derive(Debug)]
pub struct Lease {
    /// The lease lasts exactly as long as this connection.
    conn: UnixStream,
    /// One file per piece, in guest order.
    fds: Vec<OwnedFd>,
    info: LeaseInfo,
}

impl Lease {
    /// The region's file (of a lease of several regions: the first
    /// piece's; see [`Lease::pieces`]).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fds[0].as_fd()
    }

    /// Every piece in guest order with its file: map `[0, piece.len)` of
    /// each, one after another (one piece for a lease of one region).
    pub fn pieces(&self) -> Vec<(BorrowedFd<'_>, Piece)> {
        self.fds
            .iter()
            .map(|f| f.as_fd())
            .zip(self.info.all_pieces())
            .collect()
    }

    /// Offset of the leased memory in the file.
    pub fn offset(&self) -> u64 {
        self.info.offset
    }

    /// Where each of [`Lease::pieces`] starts in its file: a lease of one
    /// region may start inside it ([`Lease::offset`]); every piece of a
    /// lease of several regions starts at 0.
    pub fn piece_offset(&self) -> u64 {
        match self.info.pieces.is_empty() {
            true => self.info.offset,
            false => 0,
        }
    }

    /// Bytes leased (the request rounded up to the page size).
    pub fn len(&self) -> u64 {
        self.info.len
    }

    /// Whether the lease is empty (never: leases are at least a page).
    pub fn is_empty(&self) -> bool {
        self.info.len == 0
    }

    /// Bytes of pool memory the lease holds: its regions whole (a lease
    /// that does not fill its last region, or a small guest on a large
    /// region, still holds all of it). What a fleet operator counts.
    pub fn held_bytes(&self) -> u64 {
        self.fds
            .iter()
            .map(|f| file_size(f.as_fd()).unwrap_or(0))
            .sum()
    }

    /// Lease id.
    pub fn id(&self) -> u64 {
        self.info.id
    }

    /// Page size of the file.
    pub fn page(&self) -> PageSize {
        self.info.page
    }

    /// Everything the daemon said about the lease.
    pub fn info(&self) -> &LeaseInfo {
        &self.info
    }

    /// Maps the leased memory shared, read-write, optionally populating
    /// the page tables now (`MAP_POPULATE`; the pages themselves are
    /// already in memory). A lease of several regions is mapped as one
    /// range: an address range reserved first, each piece mapped over its
    /// part of it (`MAP_FIXED`), so the caller sees one slice.
    pub fn map(&self, populate: bool) -> Result<Mapping<'_>, Error> {
        let what = || format!("mapping lease {} ({} bytes)", self.info.id, self.info.len);
        if self.fds.len() == 1 {
            let mut b = hostmem::Mapping::file(self.fd(), self.info.offset, self.info.len as usize);
            if populate {
                b = b.populate();
            }
            let map = b.map().map_err(|e| Error::io(what(), e.into()))?;
            return Ok(Mapping {
                map,
                _lease: PhantomData,
            });
        }
        // Reserved, never accessible on its own: every byte of it is
        // covered by a piece below before the mapping is returned.
        let mut map = hostmem::Mapping::anonymous(self.info.len as usize)
            .prot(hostmem::Prot::None)
            .noreserve()
            .align(self.info.page.bytes() as usize)
            .map()
            .map_err(|e| Error::io(what(), e.into()))?;
        let mut at = 0usize;
        for (fd, piece) in self.pieces() {
            map.map_file_over(at, fd, self.piece_offset(), piece.len as usize, populate)
                .map_err(|e| {
                    Error::io(
                        format!("{}: piece of region {}", what(), piece.region),
                        e.into(),
                    )
                })?;
            at += piece.len as usize;
        }
        Ok(Mapping {
            map,
            _lease: PhantomData,
        })
    }

    /// The connection the lease lives on: the lease ends when the last
    /// process holding it closes it. A launcher hands it to its VMM so the
    /// lease outlives a killed launcher until the VMM, which maps the
    /// memory, exits too (the kernel unmaps a dying process's memory
    /// before it closes its files).
    pub fn connection(&self) -> BorrowedFd<'_> {
        self.conn.as_fd()
    }

    /// Ends the lease now (same as dropping it).
    pub fn close(self) {}

    /// Reports the launch this lease serves (outcome `leased`) on the
    /// lease's own connection, the one place the daemon takes it from.
    /// Safe while a VMM holds the inherited connection: VMMs never use
    /// it. A daemon that did not say it takes reports
    /// ([`LeaseInfo::reports`]: an older release, which would close the
    /// connection on the unknown request and so end the lease) is not
    /// asked: [`Error::NoReports`].
    pub fn report(&self, r: &LaunchReport) -> Result<(), Error> {
        if !self.info.reports {
            return Err(Error::NoReports);
        }
        // A duplicate of the connection: same socket, so the timeout set
        // here is the lease's too, and is cleared again below.
        let mut conn = self
            .conn
            .try_clone()
            .map_err(|e| Error::io("duplicating the lease connection", e))?;
        conn.set_read_timeout(Some(REPORT_TIMEOUT))
            .map_err(|e| Error::io("setting the pool reply timeout", e))?;
        let answer = ask(&mut conn, RequestBody::Report(r.clone()));
        conn.set_read_timeout(None)
            .map_err(|e| Error::io("clearing the pool reply timeout", e))?;
        reported(answer)
    }

    /// Whether this process still maps one of the lease's files (outside
    /// an in-process daemon's own mappings).
    fn mapped_here(&self) -> bool {
        self.fds.iter().any(|fd| match identity(fd.as_fd()) {
            Some((dev, ino)) => crate::holders::mapped_by_this_client(dev, ino),
            None => true, // cannot tell: be safe and keep the lease
        })
    }
}

impl Drop for Lease {
    /// If this process still maps the memory, the lease must outlive the
    /// mapping: a duplicate of the connection is left open, so the lease
    /// ends when the process exits (after the kernel unmapped everything).
    fn drop(&mut self) {
        if self.mapped_here() {
            if let Ok(c) = self.conn.try_clone() {
                std::mem::forget(c);
            }
        }
    }
}

/// A mapping of a lease; it cannot outlive the lease.
#[derive(Debug)]
pub struct Mapping<'a> {
    map: hostmem::Mapping,
    _lease: PhantomData<&'a Lease>,
}

impl Mapping<'_> {
    /// The memory.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the lease's memory is this process's alone while leased
        // (the daemon does not touch a leased region).
        unsafe { self.map.as_slice() }
    }

    /// The memory, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, uniquely borrowed.
        unsafe { self.map.as_mut_slice() }
    }
}

fn connect(socket: &Path) -> Result<UnixStream, Error> {
    let conn = UnixStream::connect(socket).map_err(|e| Error::Connect {
        socket: socket.to_path_buf(),
        source: e,
    })?;
    conn.set_read_timeout(Some(REPLY_TIMEOUT))
        .map_err(|e| Error::io("setting the pool reply timeout", e))?;
    Ok(conn)
}

fn ask(conn: &mut UnixStream, body: RequestBody) -> Result<(ResponseBody, Vec<OwnedFd>), Error> {
    write_frame(conn, &Request { v: VERSION, body }, None)?;
    let (resp, fd): (Response, _) = read_frame_fds(conn, MAX_PIECES)?.ok_or_else(|| {
        Error::Protocol("the daemon closed the connection without answering".into())
    })?;
    if resp.v != VERSION {
        return Err(Error::Protocol(format!(
            "daemon speaks protocol version {}, this client {VERSION}; use a zerostart of the same release",
            resp.v
        )));
    }
    Ok((resp.body, fd))
}

/// Leases at least `bytes` of known-zero memory with pages of `page` from
/// the pool serving `socket`.
pub fn lease(socket: &Path, bytes: u64, page: PageSize) -> Result<Lease, Error> {
    lease_on_node(socket, bytes, page, None)
}

/// [`lease`], of a region on NUMA `node` (`None`: any). A pool with no
/// clean region on that node refuses (one line naming the node and what
/// it has), it does not hand out far memory.
pub fn lease_on_node(
    socket: &Path,
    bytes: u64,
    page: PageSize,
    node: Option<usize>,
) -> Result<Lease, Error> {
    lease_with(socket, bytes, page, node, None)
}

/// Leases `bytes` of known-zero memory as up to `max_pieces` whole
/// regions (at most [`MAX_PIECES`]), for a client that maps several
/// files as one range ([`Lease::map`], or [`Lease::pieces`] by hand):
/// a guest larger than a region, or one that should hold only as many
/// regions as it needs. All or nothing; docs/pool.md "Leases of any size".
pub fn lease_pieces(
    socket: &Path,
    bytes: u64,
    page: PageSize,
    node: Option<usize>,
    max_pieces: usize,
) -> Result<Lease, Error> {
    lease_with(socket, bytes, page, node, Some(max_pieces))
}

fn lease_with(
    socket: &Path,
    bytes: u64,
    page: PageSize,
    node: Option<usize>,
    pieces: Option<usize>,
) -> Result<Lease, Error> {
    let mut conn = connect(socket)?;
    match ask(
        &mut conn,
        RequestBody::Lease {
            bytes,
            page,
            node,
            pieces,
        },
    )? {
        (ResponseBody::Lease(info), fds) => {
            check_granted(&info, &fds, bytes, pieces.unwrap_or(1))?;
            // A reply timeout must not end a long lease.
            conn.set_read_timeout(None)
                .map_err(|e| Error::io("clearing the pool reply timeout", e))?;
            Ok(Lease { conn, fds, info })
        }
        (ResponseBody::Error { message }, _) => Err(Error::Refused(message)),
        (other, _) => Err(Error::Protocol(format!("unexpected reply {other:?}"))),
    }
}

/// What a granted lease must be before anything maps it: one file per
/// piece, no file twice, each large enough for its piece, the pieces
/// adding up to the lease and the lease to what was asked.
fn check_granted(
    info: &LeaseInfo,
    fds: &[OwnedFd],
    bytes: u64,
    max_pieces: usize,
) -> Result<(), Error> {
    let pieces = info.all_pieces();
    if fds.is_empty() {
        return Err(Error::Protocol(
            "lease granted without a file descriptor".into(),
        ));
    }
    if fds.len() != pieces.len() || pieces.len() > max_pieces {
        return Err(Error::Protocol(format!(
            "lease of {} pieces came with {} file descriptors (asked for at most {max_pieces} pieces)",
            pieces.len(),
            fds.len()
        )));
    }
    let total: u64 = pieces.iter().map(|p| p.len).sum();
    if total != info.len || info.len < bytes || (pieces.len() > 1 && info.offset != 0) {
        return Err(Error::Protocol(format!(
            "lease of {} bytes at {} in pieces of {total} bytes does not cover the {bytes} bytes asked",
            info.len, info.offset
        )));
    }
    let mut seen = Vec::new();
    for (fd, p) in fds.iter().zip(&pieces) {
        let (Some(id), Some(size)) = (identity(fd.as_fd()), file_size(fd.as_fd())) else {
            return Err(Error::last_os("stat of the leased fd"));
        };
        let off = if pieces.len() == 1 { info.offset } else { 0 };
        if size < off + p.len {
            return Err(Error::Protocol(format!(
                "lease of {} bytes at {off} does not fit its {size}-byte file",
                p.len
            )));
        }
        if seen.contains(&id) {
            return Err(Error::Protocol(format!(
                "lease {} names one file for two pieces (region {})",
                info.id, p.region
            )));
        }
        seen.push(id);
    }
    Ok(())
}

/// Reports a launch that did not run on a lease (a fallback, the drop-in's
/// pass-through, a failure) on a new connection. [`Error::Connect`] means
/// the pool is not there now (worth another try later); an older daemon
/// refuses the request ([`Error::Refused`]).
pub fn report(socket: &Path, r: &LaunchReport) -> Result<(), Error> {
    let mut conn = connect(socket)?;
    conn.set_read_timeout(Some(REPORT_TIMEOUT))
        .map_err(|e| Error::io("setting the pool reply timeout", e))?;
    reported(ask(&mut conn, RequestBody::Report(r.clone())))
}

fn reported(answer: Result<(ResponseBody, Vec<OwnedFd>), Error>) -> Result<(), Error> {
    match answer? {
        (ResponseBody::Reported, _) => Ok(()),
        (ResponseBody::Error { message }, _) => Err(Error::Refused(message)),
        (other, _) => Err(Error::Protocol(format!("unexpected reply {other:?}"))),
    }
}

/// The pool's counters.
pub fn status(socket: &Path) -> Result<Status, Error> {
    let mut conn = connect(socket)?;
    match ask(&mut conn, RequestBody::Status)? {
        (ResponseBody::Status(s), _) => Ok(s),
        (ResponseBody::Error { message }, _) => Err(Error::Refused(message)),
        (other, _) => Err(Error::Protocol(format!("unexpected reply {other:?}"))),
    }
}

impl AsFd for Lease {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}

/// Device and inode of an open file (`None`: fstat failed).
fn identity(fd: BorrowedFd<'_>) -> Option<(u64, u64)> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, zeroed buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    Some((st.st_dev, st.st_ino))
}

/// Size of an open file (`None`: fstat failed).
fn file_size(fd: BorrowedFd<'_>) -> Option<u64> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, zeroed buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    Some(st.st_size as u64)
}
