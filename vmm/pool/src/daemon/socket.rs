//! The socket: binding it safely, accepting connections, and one
//! request/response loop per connection.

use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::lease::{end_lease, grant};
use super::status::status;
use super::Shared;
use crate::proto::{
    read_frame, write_frame, write_frame_fds, Request, RequestBody, Response, ResponseBody, VERSION,
};
use crate::Error;

/// Binds `path`, replacing a stale socket file left by a killed daemon but
/// never one a live daemon answers on; with `group`, the socket is 0660
/// and that group's.
pub(super) fn bind(path: &Path, group: Option<u32>) -> Result<UnixListener, Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(Error::AlreadyServing(path.to_path_buf()));
        }
        std::fs::remove_file(path)
            .map_err(|e| Error::io(format!("removing stale socket {}", path.display()), e))?;
    }
    // The socket file is created 0600 by `bind` itself (Linux takes its
    // mode from the socket inode, set here first), so there is no moment
    // in which a permissive umask lets another user connect and lease.
    use nix::sys::socket::{
        bind as nix_bind, listen, socket, AddressFamily, Backlog, SockFlag, SockType, UnixAddr,
    };
    let sock = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| Error::io("creating the pool socket", e.into()))?;
    nix::sys::stat::fchmod(&sock, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(|e| Error::io("fchmod 0600 of the pool socket", e.into()))?;
    let addr = UnixAddr::new(path)
        .map_err(|e| Error::io(format!("socket path {}", path.display()), e.into()))?;
    nix_bind(sock.as_raw_fd(), &addr)
        .map_err(|e| Error::io(format!("binding {}", path.display()), e.into()))?;
    // The group is given the socket before its mode opens to the group,
    // so no other group ever may connect; nobody can connect before
    // listen() anyway.
    if let Some(gid) = group {
        nix::unistd::chown(path, None, Some(nix::unistd::Gid::from_raw(gid))).map_err(|e| {
            Error::io(
                format!("giving {} to group {gid} (--socket-group)", path.display()),
                e.into(),
            )
        })?;
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o660))
            .map_err(|e| Error::io(format!("chmod 0660 {}", path.display()), e))?;
    }
    listen(&sock, Backlog::MAXCONN)
        .map_err(|e| Error::io(format!("listening on {}", path.display()), e.into()))?;
    Ok(UnixListener::from(sock))
}

pub(super) fn accept_loop(shared: &Arc<Shared>, listener: UnixListener) {
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(conn) = conn else { continue };
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("pool-conn".into())
            .spawn(move || serve_connection(&s, conn));
        if let Err(e) = spawned {
            eprintln!("zerostart pool: cannot start a connection thread: {e}");
        }
    }
}

fn reply(conn: &mut UnixStream, body: ResponseBody) -> Result<(), Error> {
    write_frame(conn, &Response { v: VERSION, body }, None)
}

fn refuse(conn: &mut UnixStream, message: String) {
    let _ = reply(conn, ResponseBody::Error { message });
}

fn serve_connection(shared: &Shared, mut conn: UnixStream) {
    // The regions of this connection's lease, and its id.
    let mut held: Option<(Vec<usize>, u64)> = None;
    let mut reported = false;
    loop {
        let req = match read_frame::<Request>(&mut conn, false) {
            Ok(Some((req, _))) => req,
            Ok(None) => break,
            Err(e) => {
                refuse(&mut conn, e.to_string());
                break;
            }
        };
        if req.v != VERSION {
            refuse(
                &mut conn,
                format!(
                    "protocol version {} is not supported; this daemon speaks {VERSION} (use a zerostart of the same release)",
                    req.v
                ),
            );
            break;
        }
        match req.body {
            RequestBody::Status => {
                if reply(&mut conn, ResponseBody::Status(status(shared))).is_err() {
                    break;
                }
            }
            RequestBody::Report(r) => {
                let counted = shared.metrics.launch(&r, held.is_some(), !reported);
                reported = true;
                let sent = match counted {
                    Ok(()) => reply(&mut conn, ResponseBody::Reported),
                    Err(message) => reply(&mut conn, ResponseBody::Error { message }),
                };
                if sent.is_err() {
                    break;
                }
            }
            RequestBody::Lease {
                bytes,
                page,
                node,
                pieces,
            } => {
                let asked = Instant::now();
                if held.is_some() {
                    refuse(
                        &mut conn,
                        "this connection already holds a lease; open one connection per lease"
                            .into(),
                    );
                    continue;
                }
                match grant(shared, bytes, page, node, pieces) {
                    Err(message) => refuse(&mut conn, message),
                    Ok((info, mems)) => {
                        held = Some((
                            info.all_pieces().iter().map(|p| p.region).collect(),
                            info.id,
                        ));
                        let fds: Vec<_> = mems.iter().map(|m| m.fd()).collect();
                        let sent = write_frame_fds(
                            &mut conn,
                            &Response {
                                v: VERSION,
                                body: ResponseBody::Lease(info),
                            },
                            &fds,
                        );
                        if sent.is_err() {
                            // The client may or may not have the fd: dirty.
                            break;
                        }
                        shared
                            .metrics
                            .lease_latency
                            .observe(asked.elapsed().as_secs_f64());
                    }
                }
            }
        }
    }
    if let Some((regions, lease)) = held {
        end_lease(shared, &regions, lease);
    }
}
