//! The pool protocol: small JSON messages, each framed by a 4-byte
//! little-endian length, over a Unix stream socket. A lease reply carries
//! the region's memfd as `SCM_RIGHTS` ancillary data on its first byte.
//!
//! Every message has `"v": VERSION`; a daemon answers a request of another
//! version with an error naming both versions. One connection holds at most
//! one lease, for as long as the connection is open.
//!
//! Requests are added without a new version when an older peer can refuse
//! them cleanly: a daemon that does not know an `op` answers `error` ("bad
//! message: unknown variant ...") and closes the connection, so a newer
//! client sees a one-line refusal, never a hang or a half-read frame
//! (`report`, the launcher's outcome, was added that way).

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

/// The most regions one lease may take: one fd per region travels in the
/// reply, and the kernel passes at most 253 in one message.
pub const MAX_PIECES: usize = 64;

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
        /// The most regions the client can map as one lease (`None`: 1,
        /// the whole lease in one region). Omitted when `None`, so older
        /// daemons read the same request (and refuse a lease larger than
        /// a region, as before).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pieces: Option<usize>,
    },
    /// Pool counters.
    Status,
    /// What a launch did with the pool (`zerostart launch`, the QEMU
    /// drop-in): counted on the metrics endpoint. A `leased` report is
    /// taken only on the lease's own connection, and one report per
    /// connection, so each launch is counted once.
    Report(LaunchReport),
}

/// The VMM a launch started (a closed set: the metrics label it, and a
/// client cannot make the daemon grow label sets without bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Vmm {
    /// QEMU (`zerostart launch --vmm qemu`, the drop-in).
    Qemu,
    /// cloud-hypervisor.
    CloudHypervisor,
    /// Firecracker.
    Firecracker,
}

impl Vmm {
    /// Every VMM, in label order.
    pub const ALL: [Vmm; 3] = [Vmm::Qemu, Vmm::CloudHypervisor, Vmm::Firecracker];

    /// The label and JSON value.
    pub fn name(self) -> &'static str {
        match self {
            Vmm::Qemu => "qemu",
            Vmm::CloudHypervisor => "cloud-hypervisor",
            Vmm::Firecracker => "firecracker",
        }
    }
}

/// How a launch that asked the pool for memory ended up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The guest runs on a pool lease.
    Leased,
    /// The pool could not lease within `--pool-wait`; the guest runs on a
    /// memfd the launcher prefaulted (`--pool-fallback prefault`).
    FallbackPrefault,
    /// The same, on a memfd the guest faults in (`--pool-fallback none`).
    FallbackNone,
    /// The QEMU drop-in started QEMU unchanged (pool unavailable, or a
    /// command line it cannot serve): no pool memory, no hint.
    Passthrough,
    /// The pool could not lease and `--pool-fallback fail` started no VM.
    Failed,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 5] = [
        Outcome::Leased,
        Outcome::FallbackPrefault,
        Outcome::FallbackNone,
        Outcome::Passthrough,
        Outcome::Failed,
    ];

    /// The label and JSON value.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Leased => "leased",
            Outcome::FallbackPrefault => "fallback_prefault",
            Outcome::FallbackNone => "fallback_none",
            Outcome::Passthrough => "passthrough",
            Outcome::Failed => "failed",
        }
    }

    /// Whether the guest got memory (and so has a memory_ready time):
    /// leased or a fallback.
    pub fn has_memory(self) -> bool {
        matches!(
            self,
            Outcome::Leased | Outcome::FallbackPrefault | Outcome::FallbackNone
        )
    }

    /// Where the guest's memory came from (the `source` label of
    /// memory_ready), for outcomes that have memory.
    pub fn source(self) -> Option<&'static str> {
        match self {
            Outcome::Leased => Some("pool"),
            Outcome::FallbackPrefault => Some("prefault"),
            Outcome::FallbackNone => Some("none"),
            Outcome::Passthrough | Outcome::Failed => None,
        }
    }
}

/// One launch's outcome, reported by the launcher to the pool it asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchReport {
    /// The VMM started (or that would have been).
    pub vmm: Vmm,
    /// What happened.
    pub outcome: Outcome,
    /// Guest RAM bytes asked for.
    pub bytes: u64,
    /// Seconds from the launcher's start to guest memory ready (its
    /// timeline's `memory_ready`); present exactly when the outcome has
    /// memory ([`Outcome::has_memory`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_ready_s: Option<f64>,
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
    /// A [`RequestBody::Report`] was counted.
    Reported,
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
    /// The daemon takes a launch report on this lease's connection
    /// ([`RequestBody::Report`]). Absent (false) from older daemons, which
    /// would refuse the unknown request by closing the connection, and so
    /// end the lease under a running VM: a client asks only when this is
    /// set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reports: bool,
    /// A lease of several regions: every piece in guest order, one fd
    /// attached per piece in the same order (`region` and `len` above are
    /// then the first region and the whole lease). Empty, and omitted, for
    /// a lease of one region.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pieces: Vec<Piece>,
}

/// One region of a lease of several: map `[0, len)` of its fd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    /// Region index.
    pub region: usize,
    /// Bytes of the lease in this region (a whole region, except perhaps
    /// the last piece).
    pub len: u64,
}

impl LeaseInfo {
    /// The lease's pieces in guest order (one for a lease of one region).
    pub fn all_pieces(&self) -> Vec<Piece> {
        if self.pieces.is_empty() {
            vec![Piece {
                region: self.region,
                len: self.len,
            }]
        } else {
            self.pieces.clone()
        }
    }
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
    /// Size of each region (of a pool of several sizes: the largest).
    pub region_bytes: u64,
    /// Number of regions.
    pub regions: usize,
    /// The regions by size, smallest first, with how many are clean now:
    /// what a client needs to know whether a lease would be granted now
    /// ([`crate::fit`]). Absent (empty) from older daemons, whose regions
    /// are all of `region_bytes`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<RegionSize>,
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

/// Regions of one size in [`Status::sizes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionSize {
    /// Bytes of each.
    pub bytes: u64,
    /// How many regions the pool has of this size.
    pub regions: usize,
    /// How many of them are clean now.
    pub clean: usize,
}

impl RegionSize {
    /// Regions `(bytes, clean)` counted by size, smallest first.
    pub fn group(regions: impl IntoIterator<Item = (u64, bool)>) -> Vec<RegionSize> {
        let mut sizes: Vec<RegionSize> = Vec::new();
        for (bytes, clean) in regions {
            let clean = usize::from(clean);
            match sizes.iter_mut().find(|x| x.bytes == bytes) {
                Some(x) => {
                    x.regions += 1;
                    x.clean += clean;
                }
                None => sizes.push(RegionSize {
                    bytes,
                    regions: 1,
                    clean,
                }),
            }
        }
        sizes.sort_by_key(|x| x.bytes);
        sizes
    }
}

impl Status {
    /// Every region as [`RegionSize`]s (an older daemon's: `regions` of
    /// `region_bytes`, as many clean as `clean_bytes` says).
    pub fn region_sizes(&self) -> Vec<RegionSize> {
        if !self.sizes.is_empty() {
            return self.sizes.clone();
        }
        vec![RegionSize {
            bytes: self.region_bytes,
            regions: self.regions,
            clean: (self.clean_bytes / self.region_bytes.max(1)) as usize,
        }]
    }

    /// [`crate::fit`]'s view of the regions: every region (`clean_only`
    /// false) or only the clean ones, numbered in size order (the indices
    /// are not the daemon's).
    pub fn free_regions(&self, clean_only: bool) -> Vec<crate::fit::Free> {
        self.region_sizes()
            .iter()
            .flat_map(|c| {
                let n = if clean_only { c.clean } else { c.regions };
                std::iter::repeat_n(c.bytes, n)
            })
            .enumerate()
            .collect()
    }
}

/// Writes one frame, with `fd` attached to its first byte if given.
pub fn write_frame<T: Serialize>(
    stream: &mut UnixStream,
    msg: &T,
    fd: Option<BorrowedFd<'_>>,
) -> Result<(), Error> {
    write_frame_fds(stream, msg, fd.as_slice())
}

/// Writes one frame, with `fds` (at most [`MAX_PIECES`]) attached to its
/// first byte.
pub fn write_frame_fds<T: Serialize>(
    stream: &mut UnixStream,
    msg: &T,
    fds: &[BorrowedFd<'_>],
) -> Result<(), Error> {
    if fds.len() > MAX_PIECES {
        return Err(Error::Protocol(format!(
            "{} file descriptors in one message; at most {MAX_PIECES}",
            fds.len()
        )));
    }
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
    if !fds.is_empty() {
        let fds: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
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
    Ok(read_frame_fds(stream, usize::from(accept_fd))?.map(|(m, mut fds)| (m, fds.pop())))
}

/// Reads one frame with up to `max_fds` fds attached (close-on-exec, in
/// the order sent); more is an error (the fds are closed).
pub fn read_frame_fds<T: DeserializeOwned>(
    stream: &mut UnixStream,
    max_fds: usize,
) -> Result<Option<(T, Vec<OwnedFd>)>, Error> {
    let mut header = [0u8; 4];
    let mut got = 0;
    let mut fds: Vec<OwnedFd> = Vec::new();
    while got < header.len() {
        // Room for the most a reply carries and more, so an excess is
        // seen (and refused below) rather than truncated.
        let mut cmsg_buf = nix::cmsg_space!([RawFd; MAX_PIECES + 4]);
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
    if fds.len() > max_fds {
        return Err(Error::Protocol(format!(
            "{} file descriptors attached to a message; expected {}",
            fds.len(),
            match max_fds {
                0 => "none".to_string(),
                n => format!("at most {n}"),
            }
        )));
    }
    let msg =
        serde_json::from_slice(&body).map_err(|e| Error::Protocol(format!("bad message: {e}")))?;
    Ok(Some((msg, fds)))
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
                pieces: None,
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
                pieces: None,
            },
        };
        let ns = serde_json::to_string(&n).unwrap();
        assert_eq!(
            ns,
            r#"{"v":1,"op":"lease","bytes":4096,"page":"2M","node":1}"#
        );
        assert_eq!(serde_json::from_str::<Request>(&ns).unwrap(), n);
        // Several regions are asked for only when the client maps them.
        let p = Request {
            v: VERSION,
            body: RequestBody::Lease {
                bytes: 3 << 30,
                page: PageSize::Size2M,
                node: None,
                pieces: Some(4),
            },
        };
        let ps = serde_json::to_string(&p).unwrap();
        assert_eq!(
            ps,
            r#"{"v":1,"op":"lease","bytes":3221225472,"page":"2M","pieces":4}"#
        );
        assert_eq!(serde_json::from_str::<Request>(&ps).unwrap(), p);
        let st: Request = serde_json::from_str(r#"{"v":1,"op":"status"}"#).unwrap();
        assert_eq!(st.body, RequestBody::Status);
    }

    #[test]
    fn report_json_is_stable_and_unknown_ops_are_bad_messages() {
        let r = Request {
            v: VERSION,
            body: RequestBody::Report(LaunchReport {
                vmm: Vmm::CloudHypervisor,
                outcome: Outcome::FallbackPrefault,
                bytes: 4096,
                memory_ready_s: Some(0.5),
            }),
        };
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(
            s,
            r#"{"v":1,"op":"report","vmm":"cloud-hypervisor","outcome":"fallback_prefault","bytes":4096,"memory_ready_s":0.5}"#
        );
        assert_eq!(serde_json::from_str::<Request>(&s).unwrap(), r);
        let p = r#"{"v":1,"op":"report","vmm":"qemu","outcome":"passthrough","bytes":1}"#;
        match serde_json::from_str::<Request>(p).unwrap().body {
            RequestBody::Report(r) => assert_eq!(r.memory_ready_s, None),
            other => panic!("{other:?}"),
        }
        let ok: Response = serde_json::from_str(r#"{"v":1,"op":"reported"}"#).unwrap();
        assert_eq!(ok.body, ResponseBody::Reported);
        // What an older daemon or a newer client sends that this build does
        // not know is refused as a bad message (the daemon answers it with
        // an error and closes), as is a label outside the closed sets.
        for bad in [
            r#"{"v":1,"op":"frobnicate"}"#,
            r#"{"v":1,"op":"report","vmm":"bochs","outcome":"leased","bytes":1}"#,
            r#"{"v":1,"op":"report","vmm":"qemu","outcome":"teleported","bytes":1}"#,
        ] {
            let (mut a, mut b) = UnixStream::pair().unwrap();
            a.write_all(&(bad.len() as u32).to_le_bytes()).unwrap();
            a.write_all(bad.as_bytes()).unwrap();
            let e = read_frame::<Request>(&mut b, false).unwrap_err();
            assert!(e.to_string().contains("unknown variant"), "{bad}: {e}");
        }
        // A lease reply says whether reports are taken; older daemons'
        // replies lack the field (false), and an unset flag is not sent.
        let old = r#"{"id":1,"region":0,"offset":0,"len":4096,"page":"4K","verified":false}"#;
        let info: LeaseInfo = serde_json::from_str(old).unwrap();
        assert!(!info.reports);
        assert!(info.pieces.is_empty());
        assert_eq!(
            info.all_pieces(),
            vec![Piece {
                region: 0,
                len: 4096
            }]
        );
        assert_eq!(serde_json::to_string(&info).unwrap(), old);
        let multi = r#"{"id":2,"region":3,"offset":0,"len":12288,"page":"4K","verified":true,"reports":true,"pieces":[{"region":3,"len":8192},{"region":5,"len":4096}]}"#;
        let info: LeaseInfo = serde_json::from_str(multi).unwrap();
        assert_eq!(info.all_pieces().len(), 2);
        assert_eq!(
            info.all_pieces()[1],
            Piece {
                region: 5,
                len: 4096
            }
        );
        assert_eq!(serde_json::to_string(&info).unwrap(), multi);
    }

    #[test]
    fn several_fds_travel_in_order_and_an_excess_is_refused() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let files: Vec<std::fs::File> = (0..3).map(|_| tempfile::tempfile().unwrap()).collect();
        for (i, f) in files.iter().enumerate() {
            f.set_len(i as u64 + 1).unwrap();
        }
        let fds: Vec<BorrowedFd<'_>> = files.iter().map(|f| f.as_fd()).collect();
        let msg = Request {
            v: VERSION,
            body: RequestBody::Status,
        };
        write_frame_fds(&mut a, &msg, &fds).unwrap();
        let (_, got) = read_frame_fds::<Request>(&mut b, 3).unwrap().unwrap();
        let lens: Vec<u64> = got
            .into_iter()
            .map(|fd| std::fs::File::from(fd).metadata().unwrap().len())
            .collect();
        assert_eq!(lens, vec![1, 2, 3]);
        write_frame_fds(&mut a, &msg, &fds).unwrap();
        let e = read_frame_fds::<Request>(&mut b, 2).unwrap_err();
        assert!(e.to_string().contains("3 file descriptors"), "{e}");
        assert!(e.to_string().contains("at most 2"), "{e}");
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
