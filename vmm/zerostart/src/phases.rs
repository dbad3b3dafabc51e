//! Boot phases the guest reports over vsock (docs/vmm.md, "Guest phases"):
//! the guest's app connects to the host (CID 2) on port [`PHASE_PORT`] and
//! writes one line per phase, exactly as on its console,
//! `zsphase: <name> uptime_ms=<n>\n`. The VMM listens, stamps each line
//! on arrival against its own timeline origin, and the timeline JSON gets
//! them as `guest_phases: [{name, host_ms, guest_uptime_ms}]`.
//!
//! One listener for both users: `zerostart run --vsock` and `zerostart
//! launch` with QEMU (`vhost-vsock-pci` is the same kernel vhost-vsock, so
//! the same `AF_VSOCK` socket hears the guest) listen on `AF_VSOCK`,
//! accepting only peers whose CID is the VM's own; `zerostart launch` with
//! cloud-hypervisor listens on the unix socket its hybrid vsock connects
//! to for guest connections to port P (`<socket>_<P>`), which only that
//! VM's cloud-hypervisor can reach.
//!
//! What a guest can send is bounded: only the four known names
//! ([`GuestPhaseName`], with the JSON type in the `timeline` crate) are
//! recorded (anything else is ignored), a line longer than
//! [`MAX_LINE`] closes the connection, at most [`MAX_PHASES`] are kept
//! and at most [`MAX_CONNECTIONS`] connections are open at once.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use devices::virtio::Worker;
use timeline::{GuestPhase, GuestPhaseName};

/// The vsock port the guest reports phases to (on the host, CID 2).
pub const PHASE_PORT: u32 = 5300;
/// Longest line accepted.
pub const MAX_LINE: usize = 128;
/// Most phases recorded per run.
pub const MAX_PHASES: usize = 64;
/// Most guest connections open at once.
pub const MAX_CONNECTIONS: usize = 8;

/// Setting up the listener; each message names the problem and the fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No `AF_VSOCK` socket or port taken.
    #[error("cannot listen on vsock port {PHASE_PORT} for guest phases: {0}; load vhost_vsock (modprobe vhost_vsock), and run one VM with --vsock per host at a time (the port is host-wide)")]
    Vsock(io::Error),
    /// The unix socket for cloud-hypervisor's hybrid vsock.
    #[error("cannot listen on {path} for guest phases: {err}; check that the --vsock socket= directory exists and no other listener uses it")]
    Unix {
        /// Path.
        path: PathBuf,
        /// Cause.
        err: io::Error,
    },
    /// The thread.
    #[error("starting the guest phase listener: {0}")]
    Thread(io::Error),
}

/// Parses one line `zsphase: <name> uptime_ms=<n>[ key=value...]` (without
/// its newline). The guest may add fields after the uptime (zsapp's
/// `app_ready` carries `touched_mib=` and `touch_ms=`); they are not read.
pub fn parse_line(line: &str) -> Option<(GuestPhaseName, u64)> {
    let rest = line.strip_prefix("zsphase: ")?;
    let (name, up) = rest.split_once(' ')?;
    let up = up.strip_prefix("uptime_ms=")?;
    let up = up.split_once(' ').map_or(up, |(n, _)| n);
    if up.is_empty() || !up.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((GuestPhaseName::parse(name)?, up.parse().ok()?))
}

/// The phases heard so far.
#[derive(Debug, Default)]
struct Sink {
    phases: Vec<GuestPhase>,
}

impl Sink {
    fn record(&mut self, line: &[u8], origin: Instant, at: Instant) {
        let Ok(s) = std::str::from_utf8(line) else {
            return;
        };
        let s = s.strip_suffix('\r').unwrap_or(s);
        if let Some((name, up)) = parse_line(s) {
            if self.phases.len() < MAX_PHASES {
                self.phases.push(GuestPhase {
                    guest_uptime_ms: up,
                    host_ms: timeline::ms_since(origin, at),
                    name,
                });
            }
        }
    }
}

/// One guest connection and its partial line.
struct Conn {
    stream: UnixOrVsock,
    buf: Vec<u8>,
}

/// A connected stream of either family (both are plain byte streams).
struct UnixOrVsock(OwnedFd);

impl Read for UnixOrVsock {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        // SAFETY: reads at most b.len() bytes into b.
        let n = unsafe { libc::read(self.0.as_raw_fd(), b.as_mut_ptr().cast(), b.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

/// How a listener accepts: the connection, or `None` for a peer that is
/// refused (another VM's CID) or nothing pending.
type Accept = Box<dyn FnMut(RawFd) -> Option<OwnedFd> + Send>;

/// A running phase listener.
pub struct PhaseListener {
    phases: Arc<Mutex<Sink>>,
    worker: Worker,
    unix_path: Option<PathBuf>,
}

impl PhaseListener {
    /// Listens on `AF_VSOCK` port [`PHASE_PORT`] for the guest with CID
    /// `cid`; times are relative to `origin`.
    pub fn vsock(cid: u32, origin: Instant) -> Result<Self, Error> {
        // SAFETY: plain socket call; the descriptor is owned at once.
        let fd = unsafe {
            libc::socket(
                libc::AF_VSOCK,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                0,
            )
        };
        if fd < 0 {
            return Err(Error::Vsock(io::Error::last_os_error()));
        }
        // SAFETY: fd is a fresh descriptor we own.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: zeroed sockaddr_vm is valid; fields set below.
        let mut addr: libc::sockaddr_vm = unsafe { std::mem::zeroed() };
        addr.svm_family = libc::AF_VSOCK as libc::sa_family_t;
        addr.svm_cid = libc::VMADDR_CID_ANY;
        addr.svm_port = PHASE_PORT;
        let len = std::mem::size_of::<libc::sockaddr_vm>() as libc::socklen_t;
        // SAFETY: addr is a valid sockaddr_vm of `len` bytes.
        if unsafe { libc::bind(sock.as_raw_fd(), (&raw const addr).cast(), len) } < 0
            // SAFETY: listen on our socket.
            || unsafe { libc::listen(sock.as_raw_fd(), MAX_CONNECTIONS as libc::c_int) } < 0
        {
            return Err(Error::Vsock(io::Error::last_os_error()));
        }
        let accept: Accept = Box::new(move |lfd| {
            // SAFETY: zeroed sockaddr_vm; accept4 fills at most `len` bytes.
            let mut peer: libc::sockaddr_vm = unsafe { std::mem::zeroed() };
            let mut plen = len;
            let c = unsafe {
                libc::accept4(
                    lfd,
                    (&raw mut peer).cast(),
                    &mut plen,
                    libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                )
            };
            if c < 0 {
                return None;
            }
            // SAFETY: a fresh descriptor from accept4.
            let c = unsafe { OwnedFd::from_raw_fd(c) };
            // Only this VM's guest: another guest on the host could
            // otherwise write phases into this VM's timeline.
            (peer.svm_cid == cid).then_some(c)
        });
        Self::serve(sock, accept, origin, None)
    }

    /// Listens on the unix socket `path` (cloud-hypervisor's hybrid vsock
    /// connects there for guest connections to [`PHASE_PORT`]: pass
    /// [`chv_listen_path`]); times are relative to `origin`.
    pub fn unix(path: &Path, origin: Instant) -> Result<Self, Error> {
        let err = |err| Error::Unix {
            path: path.to_path_buf(),
            err,
        };
        // A socket file left by an earlier run of the same VM.
        if std::fs::symlink_metadata(path).is_ok_and(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_socket()
        }) {
            let _ = std::fs::remove_file(path);
        }
        let l = UnixListener::bind(path).map_err(err)?;
        l.set_nonblocking(true).map_err(err)?;
        let accept: Accept = Box::new(move |lfd| {
            // SAFETY: accept4 without an address.
            let c = unsafe {
                libc::accept4(
                    lfd,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                )
            };
            // SAFETY: a fresh descriptor from accept4.
            (c >= 0).then(|| unsafe { OwnedFd::from_raw_fd(c) })
        });
        Self::serve(l.into(), accept, origin, Some(path.to_path_buf()))
    }

    fn serve(
        listener: OwnedFd,
        mut accept: Accept,
        origin: Instant,
        unix_path: Option<PathBuf>,
    ) -> Result<Self, Error> {
        let phases = Arc::new(Mutex::new(Sink::default()));
        let sink = phases.clone();
        let worker = Worker::spawn("zs-phases".into(), move |stop| {
            let mut conns: Vec<Conn> = Vec::new();
            loop {
                let mut fds = vec![
                    libc::pollfd {
                        fd: stop,
                        events: libc::POLLIN,
                        revents: 0,
                    },
                    libc::pollfd {
                        fd: if conns.len() < MAX_CONNECTIONS {
                            listener.as_raw_fd()
                        } else {
                            -1
                        },
                        events: libc::POLLIN,
                        revents: 0,
                    },
                ];
                fds.extend(conns.iter().map(|c| libc::pollfd {
                    fd: c.stream.0.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }));
                // SAFETY: a valid pollfd array.
                let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
                if r < 0 {
                    if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    return;
                }
                if fds[0].revents != 0 {
                    return;
                }
                let at = Instant::now();
                let mut closed = vec![false; conns.len()];
                for (i, c) in conns.iter_mut().enumerate() {
                    if fds[2 + i].revents == 0 {
                        continue;
                    }
                    let mut b = [0u8; 512];
                    match c.stream.read(&mut b) {
                        Ok(0) => closed[i] = true,
                        Ok(n) => {
                            c.buf.extend_from_slice(&b[..n]);
                            let mut s = sink.lock().unwrap_or_else(|e| e.into_inner());
                            while let Some(p) = c.buf.iter().position(|&x| x == b'\n') {
                                s.record(&c.buf[..p], origin, at);
                                c.buf.drain(..=p);
                            }
                            if c.buf.len() > MAX_LINE {
                                closed[i] = true;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(_) => closed[i] = true,
                    }
                }
                let mut i = 0;
                conns.retain(|_| {
                    i += 1;
                    !closed[i - 1]
                });
                if fds[1].revents != 0 {
                    while conns.len() < MAX_CONNECTIONS {
                        match accept(listener.as_raw_fd()) {
                            Some(fd) => conns.push(Conn {
                                stream: UnixOrVsock(fd),
                                buf: Vec::new(),
                            }),
                            None => break,
                        }
                    }
                }
            }
        })
        .map_err(Error::Thread)?;
        Ok(PhaseListener {
            phases,
            worker,
            unix_path,
        })
    }

    /// The phases heard so far.
    pub fn phases(&self) -> Vec<GuestPhase> {
        self.phases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .phases
            .clone()
    }

    /// Stops listening and returns every phase heard.
    pub fn finish(mut self) -> Vec<GuestPhase> {
        self.worker.stop(Duration::from_millis(500));
        if let Some(p) = &self.unix_path {
            let _ = std::fs::remove_file(p);
        }
        self.phases()
    }
}

/// Where the launcher listens for a cloud-hypervisor guest's phases:
/// cloud-hypervisor's hybrid vsock connects a guest's connection to host
/// port P to the unix socket `<socket>_<P>`.
pub fn chv_listen_path(socket: &Path) -> PathBuf {
    let mut s = socket.as_os_str().to_os_string();
    s.push(format!("_{PHASE_PORT}"));
    PathBuf::from(s)
}

/// Writes `lines` to a unix socket, pausing between them (tests: a
/// guest's report arriving in pieces).
#[cfg(test)]
fn send(path: &Path, lines: &[&[u8]]) {
    use std::io::Write;
    let mut s = std::os::unix::net::UnixStream::connect(path).unwrap();
    for l in lines {
        // The listener may have dropped the connection (a line too long).
        let _ = s.write_all(l);
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_exactly() {
        assert_eq!(
            parse_line("zsphase: app_ready uptime_ms=8123"),
            Some((GuestPhaseName::AppReady, 8123))
        );
        assert_eq!(
            parse_line("zsphase: userspace_started uptime_ms=0"),
            Some((GuestPhaseName::UserspaceStarted, 0))
        );
        // zsapp's real app_ready line (seen in the nested host) has more
        // fields after the uptime.
        assert_eq!(
            parse_line("zsphase: app_ready uptime_ms=51450 touched_mib=1395 touch_ms=2478"),
            Some((GuestPhaseName::AppReady, 51450))
        );
        for bad in [
            "zsphase: app_ready",
            "zsphase: app_ready uptime_ms=",
            "zsphase: app_ready uptime_ms=-1",
            "zsphase: app_ready uptime_ms=1.5",
            "zsphase: app_ready uptime_ms=1x touched_mib=2",
            "zsphase: app_ready uptime_ms= touched_mib=2",
            "zsphase: app_ready uptime_ms=99999999999999999999999",
            "zsphase: evil_phase uptime_ms=1",
            "zsphase:  app_ready uptime_ms=1",
            "ZSPHASE: app_ready uptime_ms=1",
            "zsphase: app_ready uptime=1",
            "",
        ] {
            assert_eq!(parse_line(bad), None, "{bad:?}");
        }
    }

    /// The real listener thread on a unix socket (the cloud-hypervisor
    /// path; the vsock path differs only in its socket and the CID
    /// check): lines split across writes, several connections, junk and
    /// unknown names ignored, an over-long line drops its connection.
    #[test]
    fn listener_records_phases_on_arrival() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("vm.vsock");
        let path = chv_listen_path(&base);
        assert!(path.to_str().unwrap().ends_with("vm.vsock_5300"));
        let origin = Instant::now();
        let l = PhaseListener::unix(&path, origin).unwrap();
        send(
            &path,
            &[
                b"zsphase: userspace_sta",
                b"rted uptime_ms=1200\nnoise\r\n",
                b"zsphase: bogus uptime_ms=5\n",
            ],
        );
        let before_second = origin.elapsed().as_secs_f64() * 1e3;
        send(
            &path,
            &[b"zsphase: network_up uptime_ms=1500\r\nzsphase: app_ready uptime_ms=2000\n"],
        );
        let long = vec![b'x'; MAX_LINE + 10];
        send(
            &path,
            &[&long, b"\nzsphase: multi_user_reached uptime_ms=1\n"],
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while l.phases().len() < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
        let p = l.finish();
        let names: Vec<_> = p.iter().map(|p| p.name.name()).collect();
        assert_eq!(names, ["userspace_started", "network_up", "app_ready"]);
        assert_eq!(p[0].guest_uptime_ms, 1200);
        assert_eq!(p[2].guest_uptime_ms, 2000);
        assert!(
            p[0].host_ms >= 0.0 && p[1].host_ms >= before_second - 1.0,
            "{p:?}"
        );
        assert!(!path.exists(), "socket removed");
    }

    /// What this host can say about the vsock path: without a vsock
    /// transport the error is one line naming the fix.
    #[test]
    fn vsock_listener_errors_are_one_line() {
        match PhaseListener::vsock(3, Instant::now()) {
            Ok(l) => {
                testsupport::skip(
                    "NO_VSOCK_TRANSPORT",
                    "this host has a vsock transport, so the error without one cannot be seen",
                );
                l.finish();
            }
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains("vsock port 5300") && !e.contains('\n'), "{e}");
            }
        }
    }
}
