//! `launch`: qemu or cloud-hypervisor started through `zerostart launch`,
//! and the keys (`firmware`, `pool_socket`, `backing`, `prefault`) whose
//! meaning it changes.

use super::context::Ctx;
use super::raw::RawScenario;
use super::{Backing, Config, ConfigError, Launch, LaunchSource, Vmm};

impl Config {
    /// Validates `launch` (and `firmware`, `pool_socket`, `backing`,
    /// `prefault`, which it changes the meaning of).
    pub(super) fn launch(
        cx: &Ctx<'_>,
        n: &str,
        vmm: Vmm,
        s: &RawScenario,
        l: &str,
        backing: Backing,
    ) -> Result<Launch, ConfigError> {
        if !matches!(vmm, Vmm::Qemu | Vmm::CloudHypervisor) {
            return Err(cx.err(
                n,
                "launch",
                format!(
                    "`zerostart launch` starts qemu or cloud-hypervisor, not {}",
                    vmm.name()
                ),
                match vmm {
                    Vmm::Zerostart => {
                        "drop launch: zerostart takes pool memory itself with backing = \"pool\""
                    }
                    _ => "drop launch, or set vmm = \"qemu\" or \"cloud-hypervisor\"",
                },
            ));
        }
        let source = match l {
            "prefault" => LaunchSource::Prefault,
            "none" => LaunchSource::None,
            "pool" => LaunchSource::Pool(
                s.pool_socket
                    .as_deref()
                    .map(|p| cx.path(n, "pool_socket", p, false))
                    .transpose()?,
            ),
            p if p.starts_with("pool:") && p.len() > 5 => {
                if s.pool_socket.is_some() {
                    return Err(cx.err(
                        n,
                        "pool_socket",
                        "names a second socket next to launch = \"pool:SOCKET\"".into(),
                        "keep one: launch = \"pool\" with pool_socket, or launch = \"pool:SOCKET\" alone",
                    ));
                }
                LaunchSource::Pool(Some(cx.path(n, "launch", &p[5..], false)?))
            }
            _ => {
                return Err(cx.err(
                    n,
                    "launch",
                    format!("'{l}' is not a memory source of `zerostart launch`"),
                    "use pool, pool:SOCKET, prefault or none",
                ))
            }
        };
        let Some(fw) = s.firmware.as_deref() else {
            let (which, why) = match vmm {
                Vmm::Qemu => ("OVMF.fd", "QEMU's hint goes over fw_cfg, which only ZeroStartPkg turns into the guest's table"),
                _ => ("CLOUDHV.fd", "cloud-hypervisor's direct kernel boot cannot carry the hint"),
            };
            return Err(cx.err(
                n,
                "firmware",
                format!("is missing (launch needs it: {why})"),
                format!("set firmware = \"<dir of `firmware/build.sh --print-dir`>/{which}\" (make firmware)"),
            ));
        };
        let firmware = cx.path(n, "firmware", fw, true)?;
        if s.prefault.is_some() {
            return Err(cx.err(
                n,
                "prefault",
                "does not apply with `launch`".into(),
                "drop it: launch = \"prefault\" populates the memory, \"pool\" and \"none\" do not",
            ));
        }
        let small_pages = match backing {
            Backing::Hugetlb => false,
            Backing::Anon if !matches!(source, LaunchSource::Pool(_)) => true,
            Backing::Anon => {
                return Err(cx.err(
                    n,
                    "backing",
                    "does not apply with launch = \"pool\"".into(),
                    "drop it: the pool's page size decides",
                ))
            }
            Backing::Thp | Backing::Pool => return Err(cx.err(
                n,
                "backing",
                format!(
                    "'{}' is not a memory of `zerostart launch`",
                    if backing == Backing::Thp {
                        "thp"
                    } else {
                        "pool"
                    }
                ),
                "use hugetlb (the default with launch) or anon (4 KiB shmem), or launch = \"pool\"",
            )),
        };
        Ok(Launch {
            source,
            firmware,
            small_pages,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::OK;
    use super::super::*;

    /// `launch`: only for qemu and cloud-hypervisor, with firmware, and
    /// none of the keys whose job the launcher takes over.
    #[test]
    fn launch_scenarios() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["k", "OVMF.fd"] {
            std::fs::write(dir.path().join(f), b"x").unwrap();
        }
        let parse =
            |t: &str| Config::parse(t, &dir.path().join("slo.toml")).map_err(|e| e.to_string());
        let base = OK
            .replace(
                "vmm = \"qemu\"",
                "vmm = \"qemu\"\nlaunch = \"pool\"\nfirmware = \"OVMF.fd\"",
            )
            .replace("phase = \"init_started\"", "phase = \"memory_ready\"");
        let c = parse(&base).unwrap();
        let l = c.scenarios[0].launch.clone().unwrap();
        assert_eq!(l.source, LaunchSource::Pool(None));
        assert!(l.firmware.ends_with("OVMF.fd"));
        assert!(!l.small_pages);
        let sock =
            parse(&base.replace("launch = \"pool\"", "launch = \"pool:${HOME}/p.sock\"")).unwrap();
        assert_eq!(
            sock.scenarios[0].launch.as_ref().unwrap().source.arg(),
            format!("pool:{}/p.sock", std::env::var("HOME").unwrap())
        );
        let with_key = parse(&base.replace(
            "memory = \"256M\"",
            "memory = \"256M\"\npool_socket = \"/s\"",
        ))
        .unwrap();
        assert_eq!(
            with_key.scenarios[0].launch.as_ref().unwrap().source,
            LaunchSource::Pool(Some("/s".into()))
        );
        for (from, to, want) in [
            (
                "vmm = \"qemu\"",
                "vmm = \"zerostart\"",
                "`launch`: `zerostart launch` starts qemu or cloud-hypervisor, not zerostart; drop launch: zerostart takes pool memory itself with backing = \"pool\"",
            ),
            (
                "vmm = \"qemu\"",
                "vmm = \"firecracker\"",
                "`launch`: `zerostart launch` starts qemu or cloud-hypervisor, not firecracker; drop launch, or set vmm = \"qemu\"",
            ),
            (
                "firmware = \"OVMF.fd\"",
                "",
                "`firmware`: is missing (launch needs it: QEMU's hint goes over fw_cfg, which only ZeroStartPkg turns into the guest's table); set firmware = ",
            ),
            (
                "vmm = \"qemu\"",
                "vmm = \"cloud-hypervisor\"",
                "",
            ),
            (
                "launch = \"pool\"",
                "launch = \"pmem\"",
                "`launch`: 'pmem' is not a memory source of `zerostart launch`; use pool, pool:SOCKET, prefault or none",
            ),
            (
                "launch = \"pool\"",
                "launch = \"pool:/a\"\npool_socket = \"/b\"",
                "`pool_socket`: names a second socket",
            ),
            (
                "launch = \"pool\"",
                "launch = \"prefault\"\nprefault = true",
                "`prefault`: does not apply with `launch`",
            ),
            (
                "launch = \"pool\"",
                "launch = \"pool\"\nbacking = \"thp\"",
                "`backing`: 'thp' is not a memory of `zerostart launch`",
            ),
            (
                "launch = \"pool\"",
                "launch = \"pool\"\nbacking = \"anon\"",
                "`backing`: does not apply with launch = \"pool\"",
            ),
            (
                "launch = \"pool\"",
                "launch = \"pool\"\nbacking = \"pool\"",
                "drop it: launch = \"pool\" already leases",
            ),
            (
                "launch = \"pool\"\n",
                "",
                "`firmware`: only applies with `launch`",
            ),
            (
                "firmware = \"OVMF.fd\"",
                "firmware = \"nope.fd\"",
                "`firmware`: ",
            ),
        ] {
            let text = base.replace(from, to);
            assert_ne!(text, base, "{from}");
            if want.is_empty() {
                // cloud-hypervisor: the same fix, naming its firmware.
                let t = text.replace("firmware = \"OVMF.fd\"\n", "");
                let e = parse(&t).unwrap_err();
                assert!(e.contains("cloud-hypervisor's direct kernel boot cannot carry the hint); set firmware = \"<dir of `firmware/build.sh --print-dir`>/CLOUDHV.fd\""), "{e}");
                assert!(!e.contains('\n'), "{e}");
                continue;
            }
            let e = parse(&text).unwrap_err();
            assert!(e.contains(want), "{to}: got {e}");
            assert!(!e.contains('\n'), "multi-line: {e}");
        }
        // Without launch, memory_ready stays unobservable for qemu.
        let e =
            parse(&OK.replace("phase = \"init_started\"", "phase = \"memory_ready\"")).unwrap_err();
        assert!(e.contains("or with launch = "), "{e}");
    }
}
