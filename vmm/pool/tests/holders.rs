//! Holders the daemon's `/proc` scan cannot see: a lessee that keeps a
//! reference to its region's pages or file in a form that shows up in
//! neither `/proc/*/fd` nor `/proc/*/maps` must never read the next
//! tenant's data, and the next tenant must never read (or be written by)
//! it.
//!
//! Each test is the attack of issue 20, done as an attacker would, with a
//! one-region pool so tenant B gets the region tenant A had:
//!
//! * **vmsplice**: A fills its lease, vmsplices 64 KiB of it into a pipe,
//!   unmaps, closes the fd, ends the lease; later A reads the pipe.
//! * **io_uring fixed buffer**: A registers 64 KiB of its lease as an
//!   io_uring fixed buffer (a long-term pin), unmaps, closes, ends the
//!   lease; once the region is clean again A reads a file into the buffer
//!   (does B's fresh lease get A's bytes?), and after B filled its lease A
//!   writes the buffer out to a file (does A get B's bytes?) and reads a
//!   file into it again (does it land in B's memory?).
//! * **fd in flight**: A sends the lease fd to itself over a socketpair and
//!   closes its copy before the lease ends; once the region is clean A
//!   receives it, maps it and writes (into B's fresh lease?), then reads
//!   (B's data?) and writes again (into B's memory?).
//!
//! * **another PID namespace**: the daemon runs in its own PID namespace
//!   (as a containerised daemon would), so its `/proc` shows none of A's
//!   processes; A leaves the fd to a child and ends the lease.
//!
//! Each also runs with `ZEROSTART_POOL_FAULT=scrub-in-place:1` (the pool
//! zeroes the returned region in place and reuses its pages and file, as
//! it did before the fix): there the leak must be seen, which shows the
//! test can fail.

mod common;

use std::io::{Read, Seek, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;

use common::*;
use pool::client;
use pool::proto::{read_frame, write_frame, Request, RequestBody, VERSION};

/// Bytes A keeps a reference to.
const KEPT: usize = 64 << 10;
const A: u8 = 0xa1;
const B: u8 = 0xb2;
const A_LATE: u8 = 0xc3;
/// The fault that restores in-place reuse (the negative control).
const REUSE: &str = "scrub-in-place:1";

/// A one-region pool; returns once its region is clean.
fn one_region_pool(dir: &tempfile::TempDir, fault: Option<&str>) -> Daemon {
    let d = Daemon::start_n(&sock(dir), 1, fault, &["--verify"]);
    d.all_clean();
    d
}

/// Waits until the lease A ended came back clean.
fn returned(d: &Daemon) {
    d.wait_for("A's region back and clean", |s| {
        s.leases_total == 1 && s.clean_bytes == s.size_bytes
    });
}

fn count(buf: &[u8], b: u8) -> usize {
    buf.iter().filter(|&&x| x == b).count()
}

/// Tenant B: leases the (only) region, which must read all zero, and fills
/// it with its own data. Returns the lease, B's mapping of it (kept until
/// `end_b`: the test checks it later) and how many bytes of the fresh lease
/// were not zero (each one would be data B got from A).
fn tenant_b(d: &Daemon) -> (client::Lease, hostmem::Mapping, usize) {
    let l = client::lease(&d.socket, region_bytes(), page()).unwrap();
    let mut m = hostmem::Mapping::file(l.fd(), l.offset(), l.len() as usize)
        .map()
        .unwrap();
    // SAFETY: B's lease; what A may still write is what the test counts.
    let dirty = unsafe { m.as_slice() }.iter().filter(|&&b| b != 0).count();
    // SAFETY: as above.
    unsafe { m.as_mut_slice() }.fill(B);
    (l, m, dirty)
}

fn b_memory(m: &hostmem::Mapping) -> &[u8] {
    // SAFETY: B's mapping; the attacks' writes are what is counted.
    unsafe { m.as_slice() }
}

fn end_b(l: client::Lease, m: hostmem::Mapping) {
    drop(m);
    drop(l);
}

fn vmsplice_attack(fault: Option<&str>) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let d = one_region_pool(&dir, fault);
    // Tenant A.
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh fds we own.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    {
        let l = client::lease(&d.socket, region_bytes(), page()).unwrap();
        let mut m = l.map(false).unwrap();
        m.as_mut_slice().fill(A);
        let mut done = 0;
        while done < KEPT {
            let iov = libc::iovec {
                iov_base: m.as_mut_slice()[done..].as_mut_ptr().cast(),
                iov_len: KEPT - done,
            };
            // SAFETY: the iovec points into our live mapping.
            let n = unsafe { libc::vmsplice(w.as_raw_fd(), &iov, 1, 0) };
            assert!(n > 0, "vmsplice: {}", std::io::Error::last_os_error());
            done += n as usize;
        }
        // Unmap, close the fd, end the lease: A keeps no fd and no mapping.
    }
    returned(&d);
    let (lb, b_map, dirty) = tenant_b(&d);
    let mut got = vec![0u8; KEPT];
    std::fs::File::from(r).read_exact(&mut got).unwrap();
    end_b(lb, b_map);
    let leaked = count(&got, B);
    if leaked + dirty > 0 {
        return Err(format!(
            "A read {leaked} bytes of B's data out of its pipe; B's fresh lease had {dirty} non-zero bytes"
        ));
    }
    // What A may read is its own old data (the pages it spliced), or zero.
    assert_eq!(count(&got, A) + count(&got, 0), KEPT);
    Ok(())
}

#[test]
fn a_vmspliced_pipe_never_reads_the_next_tenant() {
    vmsplice_attack(None).unwrap();
}

#[test]
fn vmsplice_leak_is_seen_when_pages_are_reused() {
    let e = vmsplice_attack(Some(REUSE)).unwrap_err();
    assert!(
        e.contains("A read 65536 bytes of B's data out of its pipe; B's fresh lease had 0"),
        "{e}"
    );
}

/// `Ok(None)`: the kernel refused io_uring (the reason is printed).
fn io_uring_attack(fault: Option<&str>) -> Result<Option<String>, String> {
    use io_uring::{opcode, types, IoUring};
    let dir = tempfile::tempdir().unwrap();
    let d = one_region_pool(&dir, fault);
    let mut ring = match IoUring::new(4) {
        Ok(r) => r,
        Err(e) => return Ok(Some(format!("io_uring_setup: {e}"))),
    };
    let buf_addr;
    {
        let l = client::lease(&d.socket, region_bytes(), page()).unwrap();
        let mut m = l.map(false).unwrap();
        m.as_mut_slice().fill(A);
        buf_addr = m.as_mut_slice().as_mut_ptr();
        let iov = [libc::iovec {
            iov_base: buf_addr.cast(),
            iov_len: KEPT,
        }];
        // SAFETY: the buffer is live now; the kernel pins its pages.
        if let Err(e) = unsafe { ring.submitter().register_buffers(&iov) } {
            return Ok(Some(format!("IORING_REGISTER_BUFFERS on pool memory: {e}")));
        }
    }
    returned(&d);
    let mut run = |entry: io_uring::squeue::Entry| -> i32 {
        // SAFETY: the entry's buffer is the registered one (pinned pages)
        // and its file is open until the completion is reaped below.
        unsafe { ring.submission().push(&entry).unwrap() };
        ring.submit_and_wait(1).unwrap();
        ring.completion().next().unwrap().result()
    };
    let mut src = tempfile::tempfile().unwrap();
    src.write_all(&[A_LATE; KEPT]).unwrap();
    let read_into_buffer =
        opcode::ReadFixed::new(types::Fd(src.as_raw_fd()), buf_addr, KEPT as u32, 0)
            .offset(0)
            .build();
    // A writes through its fixed buffer into the region, now clean, before
    // B leases it: does B's fresh lease hold A's bytes?
    assert_eq!(
        run(read_into_buffer.clone()),
        KEPT as i32,
        "IORING_OP_READ_FIXED"
    );
    let (lb, b_map, dirty) = tenant_b(&d);
    // A reads through its fixed buffer: does it hold B's data?
    let mut out = tempfile::tempfile().unwrap();
    let n = run(
        opcode::WriteFixed::new(types::Fd(out.as_raw_fd()), buf_addr, KEPT as u32, 0)
            .offset(0)
            .build(),
    );
    assert_eq!(n, KEPT as i32, "IORING_OP_WRITE_FIXED");
    let mut got = vec![0u8; KEPT];
    out.rewind().unwrap();
    out.read_exact(&mut got).unwrap();
    // A writes through its fixed buffer: does it land in B's memory?
    assert_eq!(run(read_into_buffer), KEPT as i32, "IORING_OP_READ_FIXED");
    let written = count(b_memory(&b_map), A_LATE);
    end_b(lb, b_map);
    let leaked = count(&got, B);
    if dirty + leaked + written == 0 {
        assert_eq!(count(&got, A) + count(&got, A_LATE) + count(&got, 0), KEPT);
        return Ok(None);
    }
    Err(format!(
        "through its io_uring fixed buffer A put {dirty} non-zero bytes into B's fresh lease, read {leaked} bytes of B's data and wrote {written} bytes into B's memory"
    ))
}

#[test]
fn an_io_uring_fixed_buffer_never_reaches_the_next_tenant() {
    if let Some(why) = io_uring_attack(None).unwrap() {
        testsupport::skip("IO_URING", why);
    }
}

#[test]
fn io_uring_leak_is_seen_when_pages_are_reused() {
    match io_uring_attack(Some(REUSE)) {
        Ok(Some(why)) => testsupport::skip("IO_URING", why),
        Ok(None) => panic!("with pages reused in place the io_uring holder saw nothing"),
        Err(e) => assert!(
            e.contains("put 65536 non-zero bytes into B's fresh lease, read 65536 bytes of B's data and wrote 65536 bytes"),
            "{e}"
        ),
    }
}

fn fd_in_flight_attack(fault: Option<&str>) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let d = one_region_pool(&dir, fault);
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    {
        let l = client::lease(&d.socket, region_bytes(), page()).unwrap();
        l.map(false).unwrap().as_mut_slice().fill(A);
        let msg = Request {
            v: VERSION,
            body: RequestBody::Status,
        };
        write_frame(&mut tx, &msg, Some(l.fd())).unwrap();
        // The fd now exists only inside the socket's queue.
    }
    returned(&d);
    // The region is clean now. A takes its fd back out of the socket.
    let (_, fd) = read_frame::<Request>(&mut rx, true).unwrap().unwrap();
    let fd = fd.expect("the fd in flight");
    let len = region_bytes() as usize;
    let mut a_map = hostmem::Mapping::file(fd.as_fd(), 0, len).map().unwrap();
    // SAFETY: A's view of the file it kept; B's writes are what is counted.
    let a_view = unsafe { a_map.as_mut_slice() };
    // Before B leases: does B's fresh lease get A's bytes?
    a_view[..KEPT].fill(A_LATE);
    let (lb, b_map, dirty) = tenant_b(&d);
    let leaked = count(a_view, B);
    a_view[..KEPT].fill(A_LATE);
    let written = count(b_memory(&b_map), A_LATE);
    drop(a_map);
    end_b(lb, b_map);
    if dirty + leaked + written > 0 {
        return Err(format!(
            "through the fd it kept in flight A put {dirty} non-zero bytes into B's fresh lease, read {leaked} bytes of B's data and wrote {written} bytes into B's memory"
        ));
    }
    Ok(())
}

#[test]
fn an_fd_in_flight_never_reaches_the_next_tenant() {
    fd_in_flight_attack(None).unwrap();
}

#[test]
fn fd_in_flight_leak_is_seen_when_the_file_is_reused() {
    let e = fd_in_flight_attack(Some(REUSE)).unwrap_err();
    assert!(
        e.contains("put 65536 non-zero bytes into B's fresh lease, read 8388608 bytes of B's data and wrote 65536 bytes"),
        "{e}"
    );
}

/// `Ok(None)`: no `unshare` or not root (the reason is returned).
fn pid_namespace_attack(fault: Option<&str>) -> Result<Option<String>, String> {
    if pool::hugetlbfs::euid() != 0 {
        return Ok(Some("needs root for a PID namespace".into()));
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = sock(&dir);
    let serve = serve_cmd(&socket, 1, &["--verify"]);
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(serve.get_program())
        .args(serve.get_args())
        .env_remove("ZEROSTART_POOL_FAULT")
        .env_remove("ZEROSTART_TEST_SWITCHES")
        .stdout(std::process::Stdio::null());
    if std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .status()
        .map_or(true, |s| !s.success())
    {
        return Ok(Some("unshare --pid --mount-proc does not work here".into()));
    }
    let d = Daemon::spawn(cmd, &socket, 1, fault);
    d.all_clean();
    // A: a lease holder whose child keeps the fd; then the holder dies.
    let h = hold(&d.socket, A, &["--test-leak-fd"]);
    let keeper = h.info["holder_pid"].as_u64().expect("holder pid") as u32;
    let id = h.identity();
    h.sigkill();
    returned(&d);
    let s = d.status().unwrap();
    assert_eq!(s.retired_total, 0, "the namespaced daemon saw the holder");
    // The keeper's fd, opened again through /proc (as A would use it).
    let f = (|| {
        for e in std::fs::read_dir(format!("/proc/{keeper}/fd"))
            .ok()?
            .flatten()
        {
            let md = std::fs::metadata(e.path()).ok()?;
            if (md.dev(), md.ino()) == id {
                return std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(e.path())
                    .ok();
            }
        }
        None
    })()
    .expect("the keeper holds the region's fd");
    // SAFETY: killing the child we made the holder start.
    let kill_keeper = || unsafe { libc::kill(keeper as i32, libc::SIGKILL) };
    let len = region_bytes() as usize;
    let mut a_map = hostmem::Mapping::file(f.as_fd(), 0, len).map().unwrap();
    // SAFETY: A's view of the file it kept; B's writes are what is counted.
    let a_view = unsafe { a_map.as_mut_slice() };
    a_view[..KEPT].fill(A_LATE);
    let (lb, b_map, dirty) = tenant_b(&d);
    let leaked = count(a_view, B);
    drop(a_map);
    end_b(lb, b_map);
    kill_keeper();
    if dirty + leaked > 0 {
        return Err(format!(
            "from outside the daemon's PID namespace A put {dirty} non-zero bytes into B's fresh lease and read {leaked} bytes of B's data"
        ));
    }
    Ok(None)
}

#[test]
fn a_holder_in_another_pid_namespace_never_reaches_the_next_tenant() {
    if let Some(why) = pid_namespace_attack(None).unwrap() {
        testsupport::skip("PID_NAMESPACE", why);
    }
}

#[test]
fn pid_namespace_leak_is_seen_when_the_file_is_reused() {
    match pid_namespace_attack(Some(REUSE)) {
        Ok(Some(why)) => testsupport::skip("PID_NAMESPACE", why),
        Ok(None) => panic!("with the file reused the hidden holder saw nothing"),
        Err(e) => assert!(
            e.contains("put 65536 non-zero bytes into B's fresh lease and read 8388608 bytes"),
            "{e}"
        ),
    }
}
