//! Finds other processes that still hold a region's file (an open fd or a
//! mapping) when its lease ends, so such a region is retired instead of
//! scrubbed and handed to the next client.
//!
//! Reads `/proc/<pid>/fd/*` (stat of each target) and `/proc/<pid>/maps`
//! (device and inode columns). Processes the daemon may not inspect are
//! invisible to it: run the daemon as root for a complete check. An fd in
//! flight inside another Unix socket is not visible anywhere; the pool's
//! socket is mode 0600 so only the daemon's own user can lease.

use std::collections::BTreeSet;
use std::fs;
use std::sync::Mutex;

/// Start addresses of the daemon's own region mappings in this process,
/// so a client in the same process (tests, the memready bench) does not
/// mistake them for its own when its lease ends.
pub(crate) static DAEMON_MAPPINGS: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

/// Whether this process maps the file `(dev, ino)` anywhere other than in
/// a pool daemon's own region mappings.
pub(crate) fn mapped_by_this_client(dev: u64, ino: u64) -> bool {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let Ok(maps) = fs::read_to_string("/proc/self/maps") else {
        return true; // cannot tell: assume mapped
    };
    let own = DAEMON_MAPPINGS.lock().unwrap_or_else(|e| e.into_inner());
    maps.lines()
        .filter(|l| map_line_matches(l, major, minor, ino))
        .any(|l| {
            let start = l
                .split('-')
                .next()
                .and_then(|a| usize::from_str_radix(a, 16).ok());
            !start.is_some_and(|a| own.contains(&a))
        })
}

/// Pids other than ours holding the file `(dev, ino)`.
pub(crate) fn other_holders(dev: u64, ino: u64) -> Vec<i32> {
    let me = std::process::id() as i32;
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let Ok(procs) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        if holds_fd(pid, dev, ino) || maps_file(pid, major, minor, ino) {
            out.push(pid);
        }
    }
    out
}

fn holds_fd(pid: i32, dev: u64, ino: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|f| {
        fs::metadata(f.path())
            .map(|m| m.dev() == dev && m.ino() == ino)
            .unwrap_or(false)
    })
}

fn maps_file(pid: i32, major: u32, minor: u32, ino: u64) -> bool {
    let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return false;
    };
    maps.lines().any(|l| map_line_matches(l, major, minor, ino))
}

/// `start-end perms offset MAJ:MIN inode path`
fn map_line_matches(line: &str, major: u32, minor: u32, ino: u64) -> bool {
    let mut f = line.split_ascii_whitespace().skip(3);
    let (Some(devs), Some(inode)) = (f.next(), f.next()) else {
        return false;
    };
    let Some((ma, mi)) = devs.split_once(':') else {
        return false;
    };
    u32::from_str_radix(ma, 16).ok() == Some(major)
        && u32::from_str_radix(mi, 16).ok() == Some(minor)
        && inode.parse::<u64>().ok() == Some(ino)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn maps_lines_parse() {
        let l = "7f00-7f80 rw-s 00000000 00:0f 1234 /memfd:zerostart-pool-0 (deleted)";
        assert!(map_line_matches(l, 0, 15, 1234));
        assert!(!map_line_matches(l, 0, 15, 1235));
        assert!(!map_line_matches("garbage", 0, 15, 1234));
    }

    #[test]
    fn a_child_holding_the_file_is_found() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let m = f.as_file().metadata().unwrap();
        assert!(other_holders(m.dev(), m.ino()).is_empty());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(f.reopen().unwrap())
            .spawn()
            .unwrap();
        let found = other_holders(m.dev(), m.ino());
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(found, vec![child.id() as i32]);
    }
}
