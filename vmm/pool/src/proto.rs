//! The pool protocol: small JSON messages, each framed by a 4-byte
//! little-endian length, over a Unix stream socket. A lease reply carries
//! the region's memfd as `SCM_RIGHTS` ancillary data on its first byte.
//!
//! Every message has `"v": VERSION`; a daemon answers a request of another
//! version with an error naming both versions. One connection holds at most
//! one lease, for as long as the connection is open.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::{Error, PageSize};

/// Protocol version spoken by this build.
pub const VERSION: u32 = 1;

/// Largest frame accepted (messages are a few hundred bytes).
pub const MAX_FRAME: usize = 64 << 10;

/// A client request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Protocol version ([`VERSION`]).
    pub v: u32,
    /// What is asked.
    #[serde(flatten)]
    pub body: RequestBody,
}

/// What a client asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum RequestBody {
    /// Lease a clean region of at least `bytes`, of pages of `page`.
    Lease {
        /// Bytes needed (rounded up to `page`).
        bytes: u64,
        /// Page size the client will map with.
        page: PageSize,
        /// NUMA node the memory must be on (`None`: any). Omitted from the
        /// JSON when `None`, so older daemons read the same request.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<usize>,
    },
    /// Pool counters.
    Status,
}

/// A daemon reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Protocol version ([`VERSION`]).
    pub v: u32,
    /// The answer.
    #[serde(flatten)]
    pub body: ResponseBody,
}

/// What the daemon answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ResponseBody {
    /// A lease; the region's fd is attached.
    Lease(LeaseInfo),
    /// Counters.
    Status(Status),
    /// The request was refused; `message` says why and what to do.
    Error {
        /// One line.
        message: String,
    },
}

/// A granted lease. The attached fd is the region's file: map
/// `[offset, offset + len)` of it, shared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseInfo {
    /// Lease id (unique for the daemon's lifetime).
    pub id: u64,
    /// Region index.
    pub region: usize,
    /// Offset in the file.
    pub offset: u64,
    /// Bytes leased (the request rounded up to `page`).
    pub len: u64,
    /// Page size of the file.
    pub page: PageSize,
    /// Whether the scrub was verified by reading every byte back.
    pub verified: bool,
    /// NUMA node of the region (absent from older daemons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<usize>,
}

/// Pool counters (`zerostart pool status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// Protocol version of the daemon.
    pub version: u32,
    /// Daemon pid.
    pub pid: u32,
    /// Page size.
    pub page: PageSize,
    /// Backing: `memfd` or the hugetlbfs directory.
    pub backing: String,
    /// Pool size in bytes.
    pub size_bytes: u64,
    /// Size of each region.
    pub region_bytes: u64,
    /// Number of regions.
    pub regions: usize,
    /// Bytes known zero and ready.
    pub clean_bytes: u64,
    /// Bytes waiting for a scrub.
    pub dirty_bytes: u64,
    /// Bytes being scrubbed now.
    pub scrubbing_bytes: u64,
    /// Bytes held by clients.
    pub leased_bytes: u64,
    /// Scrubs are verified by reading every byte back.
    pub verify: bool,
    /// Zeroing backend in use.
    pub backend: String,
    /// Bytes scrubbed since start.
    pub scrubbed_bytes: u64,
    /// Throughput of the last scrub (populate + zero + verify), GiB/s.
    pub scrub_gib_s_last: f64,
    /// Throughput over all scrubs since start, GiB/s.
    pub scrub_gib_s_avg: f64,
    /// Leases handed out since start.
    pub leases_total: u64,
    /// Regions replaced because another process still held them when
    /// their lease ended.
    pub retired_total: u64,
    /// Scrubs that failed (region replaced and scrubbed again).
    pub scrub_failures: u64,
}

/// Writes one frame, with `fd` attached to its first byte if given.
pub fn write_frame<T: Serialize>(
    stream: &mut UnixStream,
    msg: &T,
    fd: Option<BorrowedFd<'_>>,
) -> Result<(), Error> {
    let body = serde_json::to_vec(msg).map_err(|e| Error::Protocol(e.to_string()))?;
    if body.len() > MAX_FRAME {
        return Err(Error::Protocol(format!(
            "message of {} bytes exceeds the {MAX_FRAME}-byte frame limit",
            body.len()
        )));
    }
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    let mut sent = 0;
    if let Some(fd) = fd {
        let fds = [fd.as_raw_fd()];
        let cmsg = [ControlMessage::ScmRights(&fds)];
        sent = sendmsg::<()>(
            stream.as_raw_fd(),
            &[IoSlice::new(&frame)],
            &cmsg,
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .map_err(|e| Error::io("sending a pool message", e.into()))?;
    }
    stream
        .write_all(&frame[sent..])
        .map_err(|e| Error::io("sending a pool message", e))
}

/// Reads one frame. `Ok(None)` at a clean end of stream before a frame.
/// Received fds are returned (close-on-exec); more than one is an error.
/// With `accept_fd == false` any fd sent is closed and the frame refused.
pub fn read_frame<T: DeserializeOwned>(
    stream: &mut UnixStream,
    accept_fd: bool,
) -> Result<Option<(T, Option<OwnedFd>)>, Error> {
    let mut header = [0u8; 4];
    let mut got = 0;
    let mut fds: Vec<OwnedFd> = Vec::new();
    while got < header.len() {
        let mut cmsg_buf = nix::cmsg_space!([RawFd; 4]);
        let (n, truncated) = {
            let mut iov = [IoSliceMut::new(&mut header[got..])];
            let msg = recvmsg::<()>(
                stream.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg_buf),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )
            .map_err(|e| Error::io("reading a pool message", e.into()))?;
            for c in msg
                .cmsgs()
                .map_err(|e| Error::io("reading a pool message", e.into()))?
            {
                if let ControlMessageOwned::ScmRights(raw) = c {
                    // SAFETY: the kernel just installed these fds for us.
                    fds.extend(raw.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }));
                }
            }
            (msg.bytes, msg.flags.contains(MsgFlags::MSG_CTRUNC))
        };
        if truncated {
            return Err(Error::Protocol("ancillary data truncated".into()));
        }
        if n == 0 {
            if got == 0 && fds.is_empty() {
                return Ok(None);
            }
            return Err(Error::Protocol("connection closed inside a frame".into()));
        }
        got += n;
    }
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(Error::Protocol(format!(
            "frame of {len} bytes exceeds the {MAX_FRAME}-byte limit"
        )));
    }
    let mut body = vec![0u8; len];
    stream
        .read_exact(&mut body)
        .map_err(|e| Error::io("reading a pool message", e))?;
    if fds.len() > 1 || (!accept_fd && !fds.is_empty()) {
        return Err(Error::Protocol(format!(
            "{} file descriptors attached to a message; expected {}",
            fds.len(),
            if accept_fd { "at most 1" } else { "none" }
        )));
    }
    let msg =
        serde_json::from_slice(&body).map_err(|e| Error::Protocol(format!("bad message: {e}")))?;
    Ok(Some((msg, fds.pop())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn request_json_is_stable() {
        let r = Request {
            v: VERSION,
            body: RequestBody::Lease {
                bytes: 4096,
                page: PageSize::Size2M,
                node: None,
            },
        };
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(s, r#"{"v":1,"op":"lease","bytes":4096,"page":"2M"}"#);
        assert_eq!(serde_json::from_str::<Request>(&s).unwrap(), r);
        // A node is sent only when asked for.
        let n = Request {
            v: VERSION,
            body: RequestBody::Lease {
                bytes: 4096,
                page: PageSize::Size2M,
                node: Some(1),
            },
        };
        let ns = serde_json::to_string(&n).unwrap();
        assert_eq!(
            ns,
            r#"{"v":1,"op":"lease","bytes":4096,"page":"2M","node":1}"#
        );
        assert_eq!(serde_json::from_str::<Request>(&ns).unwrap(), n);
        let st: Request = serde_json::from_str(r#"{"v":1,"op":"status"}"#).unwrap();
        assert_eq!(st.body, RequestBody::Status);
    }

    #[test]
    fn frames_round_trip_with_an_fd() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let file = tempfile::tempfile().unwrap();
        let msg = Request {
            v: VERSION,
            body: RequestBody::Status,
        };
        write_frame(&mut a, &msg, Some(file.as_fd())).unwrap();
        write_frame(&mut a, &msg, None).unwrap();
        let (got, fd) = read_frame::<Request>(&mut b, true).unwrap().unwrap();
        assert_eq!(got, msg);
        assert!(fd.is_some());
        let (_, fd) = read_frame::<Request>(&mut b, true).unwrap().unwrap();
        assert!(fd.is_none());
        drop(a);
        assert!(read_frame::<Request>(&mut b, true).unwrap().is_none());
    }

    #[test]
    fn unwanted_fds_and_oversized_frames_are_refused() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let file = tempfile::tempfile().unwrap();
        write_frame(
            &mut a,
            &Request {
                v: VERSION,
                body: RequestBody::Status,
            },
            Some(file.as_fd()),
        )
        .unwrap();
        let e = read_frame::<Request>(&mut b, false).unwrap_err();
        assert!(e.to_string().contains("expected none"), "{e}");

        let (mut a, mut b) = UnixStream::pair().unwrap();
        a.write_all(&(u32::MAX).to_le_bytes()).unwrap();
        let e = read_frame::<Request>(&mut b, false).unwrap_err();
        assert!(e.to_string().contains("exceeds"), "{e}");

        let (mut a, mut b) = UnixStream::pair().unwrap();
        a.write_all(&3u32.to_le_bytes()).unwrap();
        a.write_all(b"{x}").unwrap();
        let e = read_frame::<Request>(&mut b, false).unwrap_err();
        assert!(e.to_string().contains("bad message"), "{e}");
    }
}
