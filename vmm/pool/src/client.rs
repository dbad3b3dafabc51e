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
    read_frame, write_frame, LaunchReport, LeaseInfo, Request, RequestBody, Response, ResponseBody,
    Status, VERSION,
};
use crate::{Error, PageSize};

/// How long a client waits for the daemon to answer.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a launch report waits for the daemon: a report is
/// bookkeeping, and a launcher about to start (or become) a VMM must not
/// hang on a wedged pool.
pub const REPORT_TIMEOUT: Duration = Duration::from_secs(2);

/// Leased pre-zeroed memory: map `[offset, offset + len)` of [`Lease::fd`]
/// shared. Every byte of it is zero when the lease is granted.
#[derive(Debug)]
pub struct Lease {
    /// The lease lasts exactly as long as this connection.
    conn: UnixStream,
    fd: OwnedFd,
    info: LeaseInfo,
}

impl Lease {
    /// The region's file.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Offset of the leased memory in the file.
    pub fn offset(&self) -> u64 {
        self.info.offset
    }

    /// Bytes leased (the request rounded up to the page size).
    pub fn len(&self) -> u64 {
        self.info.len
    }

    /// Whether the lease is empty (never: leases are at least a page).
    pub fn is_empty(&self) -> bool {
        self.info.len == 0
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
    /// already in memory).
    pub fn map(&self, populate: bool) -> Result<Mapping<'_>, Error> {
        let mut b =
            hostmem::Mapping::file(self.fd.as_fd(), self.info.offset, self.info.len as usize);
        if populate {
            b = b.populate();
        }
        let map = b.map().map_err(|e| {
            Error::io(
                format!("mapping lease {} ({} bytes)", self.info.id, self.info.len),
                e.into(),
            )
        })?;
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

    /// Whether this process still maps the lease's file (outside an
    /// in-process daemon's own mappings).
    fn mapped_here(&self) -> bool {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd, zeroed buffer.
        if unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) } != 0 {
            return true; // cannot tell: be safe and keep the lease
        }
        crate::holders::mapped_by_this_client(st.st_dev, st.st_ino)
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

fn ask(conn: &mut UnixStream, body: RequestBody) -> Result<(ResponseBody, Option<OwnedFd>), Error> {
    write_frame(conn, &Request { v: VERSION, body }, None)?;
    let (resp, fd): (Response, _) = read_frame(conn, true)?.ok_or_else(|| {
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
    let mut conn = connect(socket)?;
    match ask(&mut conn, RequestBody::Lease { bytes, page, node })? {
        (ResponseBody::Lease(info), Some(fd)) => {
            // The file must be large enough for what we will map.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: valid fd, zeroed buffer.
            if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
                return Err(Error::last_os("stat of the leased fd"));
            }
            if (st.st_size as u64) < info.offset + info.len || info.len < bytes {
                return Err(Error::Protocol(format!(
                    "lease of {} bytes at {} does not fit its {}-byte file or the {bytes} bytes asked",
                    info.len, info.offset, st.st_size
                )));
            }
            // A reply timeout must not end a long lease.
            conn.set_read_timeout(None)
                .map_err(|e| Error::io("clearing the pool reply timeout", e))?;
            Ok(Lease { conn, fd, info })
        }
        (ResponseBody::Lease(_), None) => Err(Error::Protocol(
            "lease granted without a file descriptor".into(),
        )),
        (ResponseBody::Error { message }, _) => Err(Error::Refused(message)),
        (other, _) => Err(Error::Protocol(format!("unexpected reply {other:?}"))),
    }
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

fn reported(answer: Result<(ResponseBody, Option<OwnedFd>), Error>) -> Result<(), Error> {
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
        self.fd.as_fd()
    }
}
