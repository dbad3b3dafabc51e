//! What the VMM boots: a kernel (none for `nested`, whose host picks
//! it), or for cloud-hypervisor through `launch` the disk its firmware
//! boots.

use std::path::PathBuf;

use super::context::Ctx;
use super::raw::RawScenario;
use super::{ConfigError, Vmm};

/// The kernel and the boot disk of scenario `n`.
pub(super) fn kernel_and_disk(
    cx: &Ctx<'_>,
    n: &str,
    vmm: Vmm,
    s: &RawScenario,
) -> Result<(PathBuf, Option<PathBuf>), ConfigError> {
    // cloud-hypervisor through the launcher boots firmware, which
    // cannot get a kernel from it (it refuses --kernel beside
    // --firmware): the kernel comes from `disk`.
    let disk_boot = vmm == Vmm::CloudHypervisor && s.launch.is_some();
    let disk = match (&s.disk, disk_boot) {
        (Some(d), true) => Some(cx.path(n, "disk", d, true)?),
        (None, true) => {
            return Err(cx.err(
                n,
                "disk",
                "is missing (cloud-hypervisor's firmware boots the kernel from a disk: it refuses --kernel beside --firmware)".into(),
                "set disk = \"<raw image with the kernel as a UKI on an EFI system partition>\" (tests/lib/mkesp.sh makes one)",
            ))
        }
        (Some(_), false) => {
            return Err(cx.err(
                n,
                "disk",
                "only applies to vmm = \"cloud-hypervisor\" with `launch`".into(),
                "drop it, or pass a disk in extra_args",
            ))
        }
        (None, false) => None,
    };
    if disk_boot {
        for (key, set) in [
            ("kernel", s.kernel.is_some()),
            ("initramfs", s.initramfs.is_some()),
            ("cmdline", s.cmdline.is_some()),
        ] {
            if set {
                return Err(cx.err(
                    n,
                    key,
                    "cannot be passed to cloud-hypervisor through `launch` (it refuses --kernel beside --firmware, and ignores initramfs and cmdline without it)".into(),
                    "drop it and put it in the UKI on `disk` (tests/lib/mkesp.sh KERNEL INITRD CMDLINE OUT)",
                ));
            }
        }
    }
    let kernel = match (&s.kernel, vmm) {
        _ if disk_boot => PathBuf::new(),
        (Some(k), Vmm::Nested) => {
            return Err(cx.err(
                n,
                "kernel",
                format!("'{k}' cannot be chosen for vmm = \"nested\""),
                "drop it (the nested host boots its own L3 kernel; see docs/e2e.md)",
            ))
        }
        (Some(k), _) => cx.path(n, "kernel", k, true)?,
        (None, Vmm::Nested) => PathBuf::new(),
        (None, _) => {
            return Err(cx.err(
                n,
                "kernel",
                "is missing".into(),
                "name the guest kernel image",
            ))
        }
    };
    Ok((kernel, disk))
}

#[cfg(test)]
mod tests {
    use super::super::*;

    /// cloud-hypervisor through the launcher boots a disk: its firmware
    /// cannot get a kernel from it (v53.0 refuses --kernel beside
    /// --firmware), so `kernel`, `initramfs` and `cmdline` are refused
    /// there, `disk` is required, and `disk` means nothing elsewhere.
    #[test]
    fn cloud_hypervisor_launch_boots_a_disk() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["CLOUDHV.fd", "esp.img", "k"] {
            std::fs::write(dir.path().join(f), b"x").unwrap();
        }
        let base = "[[scenario]]\nname = \"c\"\nvmm = \"cloud-hypervisor\"\nlaunch = \"pool\"\n\
                    firmware = \"CLOUDHV.fd\"\nmemory = \"256M\"\n";
        let slo = "[[scenario.slo]]\nphase = \"exit\"\nstat = \"max\"\nmax_ms = 1\n";
        let parse_in = |t: &str| {
            let t = format!("{t}{slo}");
            let t = t.as_str();
            let p = dir.path().join("slo.toml");
            std::fs::write(&p, t).unwrap();
            Config::parse(t, &p).map_err(|e| e.to_string())
        };
        let c = parse_in(&format!("{base}disk = \"esp.img\"\n")).unwrap();
        assert_eq!(c.scenarios[0].disk, Some(dir.path().join("esp.img")));
        for (extra, want) in [
            ("", "`disk`: is missing"),
            (
                "disk = \"esp.img\"\nkernel = \"k\"\n",
                "`kernel`: cannot be passed",
            ),
            (
                "disk = \"esp.img\"\ninitramfs = \"k\"\n",
                "`initramfs`: cannot be passed",
            ),
            (
                "disk = \"esp.img\"\ncmdline = \"quiet\"\n",
                "`cmdline`: cannot be passed",
            ),
        ] {
            let e = parse_in(&format!("{base}{extra}")).unwrap_err();
            assert!(e.contains(want) && !e.contains('\n'), "{extra:?}: {e}");
        }
        let q = "[[scenario]]\nname = \"q\"\nvmm = \"qemu\"\nkernel = \"k\"\ndisk = \"esp.img\"\n";
        let e = parse_in(q).unwrap_err();
        assert!(e.contains("`disk`: only applies"), "{e}");
    }
}
