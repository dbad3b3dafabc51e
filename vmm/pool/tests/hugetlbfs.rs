//! `--hugetlbfs DIR`: region files are created exclusively by the daemon,
//! anything planted where they go is a one-line refusal, the directory must
//! be hugetlbfs and closed to other users, and a restart while a VM still
//! holds a region file starts cleanly without touching that VM's memory.
//!
//! Needs `ZEROSTART_POOL_TEST_HUGETLBFS` (a 2M hugetlbfs mount) and
//! `ZEROSTART_POOL_TEST_PAGE=2M`; `make test-pool` sets both. Each test
//! works in its own directory on the mount.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use common::*;
use pool::PageSize;

/// A fresh directory (mode 0700) on the test's hugetlbfs mount, or `None`
/// (a skip, or a failure under ZEROSTART_REQUIRE_POOL_HUGETLBFS=1, which
/// tests/pool/with-hugetlbfs.sh sets with the mount) when the run has none.
fn dir() -> Option<tempfile::TempDir> {
    let Ok(mnt) = std::env::var("ZEROSTART_POOL_TEST_HUGETLBFS") else {
        testsupport::skip(
            "POOL_HUGETLBFS",
            "set ZEROSTART_POOL_TEST_HUGETLBFS to a 2M hugetlbfs mount (make test-pool does)",
        );
        return None;
    };
    if page() != PageSize::Size2M {
        testsupport::skip("POOL_HUGETLBFS", "needs ZEROSTART_POOL_TEST_PAGE=2M");
        return None;
    }
    Some(tempfile::tempdir_in(mnt).unwrap())
}

fn region(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("zerostart-pool-{i}"))
}

fn args(dir: &Path) -> Vec<String> {
    vec!["--hugetlbfs".into(), dir.display().to_string()]
}

fn start(socket: &Path, dir: &Path) -> Daemon {
    let a = args(dir);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    Daemon::start(socket, None, &a)
}

fn refused_in(dir: &Path, socket: &Path) -> String {
    let a = args(dir);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let err = refused(serve_cmd(socket, REGIONS, &a));
    assert!(!socket.exists(), "a refused daemon left its socket");
    err
}

#[test]
fn files_left_by_a_killed_daemon_are_replaced() {
    let Some(hd) = dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let d = start(&sock(&tmp), hd.path());
    d.all_clean();
    let h = hold(&d.socket, 0xee, &[]);
    let old = h.identity();
    // Both die: the pattern stays in the file on hugetlbfs.
    d.sigkill();
    h.sigkill();
    let d = start(&sock(&tmp), hd.path());
    let ids = every_region_is_zero(&d);
    assert!(!ids.contains(&old), "the old file was reused");
}

/// Opens the file `(dev, ino)` that `pid` holds, through /proc/PID/fd.
fn open_held(pid: u32, id: (u64, u64)) -> std::fs::File {
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        if let Ok(md) = std::fs::metadata(e.path()) {
            if (md.dev(), md.ino()) == id {
                return std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(e.path())
                    .unwrap();
            }
        }
    }
    panic!("pid {pid} does not hold {id:?}");
}

/// The daemon dies while a VM holds a region file; the new daemon must
/// start (it used to refuse: "another pool daemon uses it?", because the
/// VM's fd shared the dead daemon's flock), must not reuse or scrub that
/// file, and the VM must keep its memory intact.
#[test]
fn restart_while_a_vm_holds_a_region_file() {
    let Some(hd) = dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let d = start(&sock(&tmp), hd.path());
    d.all_clean();
    let h = hold(&d.socket, 0x6b, &[]);
    let held = h.identity();
    let pid = h.child.id();
    d.sigkill();
    let d = start(&sock(&tmp), hd.path());
    let ids = every_region_is_zero(&d);
    assert!(!ids.contains(&held), "the new daemon leased the VM's file");
    // The VM's memory: still its own pattern, every byte.
    let f = open_held(pid, held);
    let len = region_bytes() as usize;
    let view = hostmem::Mapping::file(std::os::fd::AsFd::as_fd(&f), 0, len)
        .prot(hostmem::Prot::Read)
        .map()
        .unwrap();
    // SAFETY: the VM's file; its holder wrote the pattern before saying so
    // and only waits now.
    let kept = unsafe { view.as_slice() }
        .iter()
        .filter(|&&b| b == 0x6b)
        .count();
    drop(view);
    assert_eq!(kept, len, "the restarted daemon changed the VM's memory");
    h.sigkill();
}

/// Puts something where a region file goes.
type Plant<'a> = Box<dyn Fn(&Path) + 'a>;

#[test]
fn planted_files_and_symlinks_are_refused() {
    let Some(hd) = dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let d = hd.path();
    let victim = d.join("victim");
    std::fs::File::create(&victim).unwrap();
    // Some kernels' hugetlbfs refuses symlinks (EINVAL); the unit tests
    // `memory::tests::*symlink*` cover the refusal on any filesystem.
    let probe = d.join("probe");
    let symlinks = match std::os::unix::fs::symlink(&victim, &probe) {
        Ok(()) => {
            std::fs::remove_file(&probe).unwrap();
            true
        }
        Err(e) => {
            testsupport::skip(
                "HUGETLBFS_SYMLINKS",
                format!(
                    "the planted symlink case: this kernel refuses symlinks on hugetlbfs ({e})"
                ),
            );
            false
        }
    };
    let mut cases: Vec<(&str, Plant, &str)> = vec![
        (
            "file open to others",
            Box::new(|p| {
                std::fs::File::create(p).unwrap();
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
            }),
            "has mode 644",
        ),
        (
            "directory",
            Box::new(|p| std::fs::create_dir(p).unwrap()),
            "is not a regular file",
        ),
    ];
    if symlinks {
        cases.push((
            "symlink",
            Box::new(|p| std::os::unix::fs::symlink(&victim, p).unwrap()),
            "is a symlink, which the pool did not create",
        ));
    }
    for (what, plant, expect) in cases {
        let p = region(d, 1);
        plant(&p);
        let err = refused_in(d, &sock(&tmp));
        assert!(
            err.contains(&format!("{}", p.display()))
                && err.contains(expect)
                && err.contains("rm "),
            "{what}: {err}"
        );
        assert!(std::fs::symlink_metadata(&p).is_ok(), "{what} was removed");
        if std::fs::symlink_metadata(&p).unwrap().is_dir() {
            std::fs::remove_dir(&p).unwrap();
        } else {
            std::fs::remove_file(&p).unwrap();
        }
        // Nothing was created for region 0 either.
        assert!(!region(d, 0).exists(), "{what}: region 0 was created");
    }
    assert!(victim.exists());
    // Another user's file (root can make one).
    if pool::hugetlbfs::euid() == 0 {
        let p = region(d, 2);
        std::fs::File::create(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(&p, Some(65534), None).unwrap();
        let err = refused_in(d, &sock(&tmp));
        assert!(err.contains("owned by uid 65534"), "{err}");
        std::fs::remove_file(&p).unwrap();
    } else {
        testsupport::skip("ROOT", "another user's planted file: not root");
    }
    // The pool's own kind of leftover (ours, 0600) is replaced, not used.
    let p = region(d, 0);
    std::fs::File::create(&p).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    let before = std::fs::metadata(&p).unwrap().ino();
    let daemon = start(&sock(&tmp), d);
    daemon.all_clean();
    assert_ne!(std::fs::metadata(&p).unwrap().ino(), before);
}

#[test]
fn unsafe_directories_are_refused() {
    let Some(hd) = dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let d = hd.path();
    for mode in [0o777, 0o1777, 0o720] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode)).unwrap();
        let err = refused_in(d, &sock(&tmp));
        assert!(
            err.contains("group/other may create files") && err.contains("chmod go-w"),
            "{mode:o}: {err}"
        );
    }
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    // Not hugetlbfs at all.
    let err = refused_in(tmp.path(), &sock(&tmp));
    assert!(
        err.contains("is not a hugetlbfs mount with 2M pages")
            && err.contains("mount -t hugetlbfs"),
        "{err}"
    );
    // A second daemon on a directory in use.
    let first = start(&sock(&tmp), d);
    let other = tempfile::tempdir().unwrap();
    let err = refused_in(d, &sock(&other));
    assert!(
        err.contains("another pool daemon serves this directory"),
        "{err}"
    );
    drop(first);
}
