//! Would a cgroup limit stop memory from being faulted in? cgroup v1 and
//! v2, this process's own cgroup and its ancestors.
//!
//! A hugetlb limit is charged at fault time, so memory over it SIGBUSes
//! the faulting thread even with an mmap-time reservation; a memory limit
//! OOM-kills the process. Both are host facts a VMM checks before it
//! creates guest RAM (zerostart does, in `ram::create`).

use std::path::{Path, PathBuf};

use crate::PageSize;

/// A cgroup limit leaves less than the memory needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("guest RAM needs {needed_mib} MiB of {what} but a cgroup limit leaves {headroom_mib} MiB (exceeding it means SIGBUS or OOM kill mid-boot); fix: {fix}, or use a smaller size=")]
pub struct LimitError {
    /// `memory` or `2M hugetlb` / `1G hugetlb`.
    pub what: String,
    /// MiB needed.
    pub needed_mib: u64,
    /// MiB the limit leaves.
    pub headroom_mib: u64,
    /// The command that raises the limit.
    pub fix: String,
}

fn read_u64(path: &Path) -> Result<u64, std::io::Error> {
    let s = std::fs::read_to_string(path)?;
    s.trim()
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// What a cgroup limits.
#[derive(Debug, Clone, Copy)]
enum Limited {
    /// Ordinary memory (anonymous guest RAM): exceeding it OOM-kills the VMM.
    Memory,
    /// hugetlb pages of one size: exceeding it SIGBUSes the faulting task.
    Hugetlb(PageSize),
}

impl Limited {
    fn controller(self) -> &'static str {
        match self {
            Limited::Memory => "memory",
            Limited::Hugetlb(_) => "hugetlb",
        }
    }

    /// (limit file, usage file) for cgroup v1 and v2.
    fn files(self, v2: bool) -> (String, String) {
        let hp = |p: PageSize| match p {
            PageSize::Size4K => "4KB",
            PageSize::Size2M => "2MB",
            PageSize::Size1G => "1GB",
        };
        match (self, v2) {
            (Limited::Memory, false) => (
                "memory.limit_in_bytes".into(),
                "memory.usage_in_bytes".into(),
            ),
            (Limited::Memory, true) => ("memory.max".into(), "memory.current".into()),
            (Limited::Hugetlb(p), false) => (
                format!("hugetlb.{}.limit_in_bytes", hp(p)),
                format!("hugetlb.{}.usage_in_bytes", hp(p)),
            ),
            (Limited::Hugetlb(p), true) => (
                format!("hugetlb.{}.max", hp(p)),
                format!("hugetlb.{}.current", hp(p)),
            ),
        }
    }
}

/// The cgroup directories (own first, then ancestors) that can limit
/// `what` for this process, from `/proc/self/cgroup` and `/proc/mounts`
/// contents, under `root` ("/" outside tests).
fn cgroup_dirs(
    proc_cgroup: &str,
    mounts: &str,
    what: Limited,
    root: &Path,
) -> Vec<(PathBuf, bool)> {
    let mut out = Vec::new();
    for line in proc_cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(ctrls), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let v2 = ctrls.is_empty();
        if !v2 && !ctrls.split(',').any(|c| c == what.controller()) {
            continue;
        }
        for m in mounts.lines() {
            let mf: Vec<&str> = m.split_whitespace().collect();
            let [_, mnt, fstype, opts, ..] = mf[..] else {
                continue;
            };
            let ok = if v2 {
                fstype == "cgroup2"
            } else {
                fstype == "cgroup" && opts.split(',').any(|o| o == what.controller())
            };
            if !ok {
                continue;
            }
            let base = root.join(mnt.trim_start_matches('/'));
            let mut dir = base.join(path.trim_start_matches('/'));
            loop {
                out.push((dir.clone(), v2));
                if dir == base || !dir.pop() {
                    break;
                }
            }
        }
    }
    out
}

fn check_cgroups_in(
    proc_cgroup: &str,
    mounts: &str,
    root: &Path,
    what: Limited,
    bytes: u64,
) -> Result<(), LimitError> {
    for (dir, v2) in cgroup_dirs(proc_cgroup, mounts, what, root) {
        let (lim_f, use_f) = what.files(v2);
        let Ok(lim) = std::fs::read_to_string(dir.join(&lim_f)) else {
            continue;
        };
        // "max" (v2) or a huge page-rounded i64 (v1) mean unlimited.
        let Ok(limit) = lim.trim().parse::<u64>() else {
            continue;
        };
        if limit >= (1u64 << 62) {
            continue;
        }
        // Memory usage includes reclaimable page cache, so only a guest that
        // alone exceeds the limit is refused; hugetlb usage is all real.
        let usage = match what {
            Limited::Memory => 0,
            Limited::Hugetlb(_) => read_u64(&dir.join(&use_f)).unwrap_or(0),
        };
        if bytes > limit.saturating_sub(usage) {
            let file = dir.join(&lim_f);
            return Err(LimitError {
                what: match what {
                    Limited::Memory => "memory".into(),
                    Limited::Hugetlb(p) => format!("{} hugetlb", p.name()),
                },
                needed_mib: bytes >> 20,
                headroom_mib: limit.saturating_sub(usage) >> 20,
                fix: format!("echo {} | sudo tee {}", usage + bytes, file.display()),
            });
        }
    }
    Ok(())
}

/// Errors if a cgroup (v1 or v2, own or ancestor) of this process would
/// stop `bytes` of memory (guest RAM) from being faulted in: for hugetlb the kernel
/// would SIGBUS the faulting thread (reservations at mmap time do not
/// consult the fault-time limit), for ordinary memory it would OOM-kill the
/// VMM mid-boot. Unreadable cgroup files are skipped: this is a best-effort
/// early error, not a guarantee.
pub fn check_limits(hugepage: Option<PageSize>, bytes: u64) -> Result<(), LimitError> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let what = hugepage.map_or(Limited::Memory, Limited::Hugetlb);
    check_cgroups_in(&cg, &mounts, Path::new("/"), what, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_limits_v1_and_v2_with_ancestors() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let mounts = "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n";
        let cg = "4:memory:/jobs/vm1\n1:cpu:/\n0::/svc/vm1\n";
        let w = |p: &str, v: &str| {
            let p = root.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, v).unwrap();
        };
        // v1 memory: own cgroup unlimited, parent limited to 1 GiB (usage,
        // mostly page cache, is not held against the guest).
        w(
            "sys/fs/cgroup/memory/jobs/vm1/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        w(
            "sys/fs/cgroup/memory/jobs/memory.limit_in_bytes",
            "1073741824\n",
        );
        w(
            "sys/fs/cgroup/memory/jobs/memory.usage_in_bytes",
            "268435456\n",
        );
        let m = Limited::Memory;
        // Usage (mostly page cache) is not held against the guest.
        check_cgroups_in(cg, mounts, root, m, 1 << 30).unwrap();
        let e = check_cgroups_in(cg, mounts, root, m, 2 << 30)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2048 MiB") && e.contains("leaves 1024 MiB"),
            "{e}"
        );
        assert!(
            e.contains("echo 2147483648 | sudo tee") && e.contains("jobs/memory.limit_in_bytes"),
            "{e}"
        );
        // v2 hugetlb: "max" is unlimited, a number is enforced.
        let h = Limited::Hugetlb(PageSize::Size2M);
        w("sys/fs/cgroup/unified/svc/vm1/hugetlb.2MB.max", "max\n");
        check_cgroups_in(cg, mounts, root, h, 1 << 40).unwrap();
        w("sys/fs/cgroup/unified/svc/hugetlb.2MB.max", "134217728\n");
        w("sys/fs/cgroup/unified/svc/hugetlb.2MB.current", "0\n");
        let e = check_cgroups_in(cg, mounts, root, h, 256 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("2M hugetlb") && e.contains("SIGBUS"), "{e}");
        check_cgroups_in(cg, mounts, root, h, 128 << 20).unwrap();
        // No cgroup info at all: nothing to check.
        check_cgroups_in("", "", root, h, 1 << 40).unwrap();
    }

    #[test]
    fn own_cgroups_are_readable_without_error() {
        check_limits(None, 1 << 20).unwrap();
        check_limits(Some(PageSize::Size2M), 2 << 20).unwrap();
    }
}
