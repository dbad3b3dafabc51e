//! `zerostart qemu-dropin` (also answered as `zerostart-qemu` by argv[0]):
//! the launcher in the place of QEMU, for the tools that start QEMU for an
//! operator (libvirt's `<emulator>`, so Nova and KubeVirt; Kata's QEMU
//! `path`). See docs/fleet.md.
//!
//! It reads the command line such a tool generated. A capability probe
//! (`-machine none`, `-version`, `-help`, `... help`) goes straight to the
//! real QEMU. A real start has its guest RAM backend (`-m`, one
//! `-object memory-backend-*` in key=value or JSON form and the machine's
//! `memory-backend=`) replaced by a pool lease of the same size, gets the
//! hint by the transport its boot path has ([`super::vmm::qemu`]), and
//! every other argument is left alone; then the process *becomes* QEMU
//! (exec), so the tool's pid, signals, inherited descriptors and exit
//! status are QEMU's own, and the lease ends when QEMU exits (the pool
//! connection is inherited, see [`super`]).
//!
//! What it cannot serve (several NUMA nodes or memory devices, NUMA
//! pinning, migration, a machine other than q35, an empty or stopped pool)
//! starts the real QEMU unchanged, with one warning line on stderr (which
//! libvirt keeps in the domain log): a fleet must not lose a VM because the
//! pool is empty.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;

use super::vmm::VmmKind;
use super::LaunchArgs;

/// The name the zerostart binary answers to as the drop-in (argv[0]).
pub const DROPIN_NAME: &str = "zerostart-qemu";

/// The real QEMU the drop-in starts by default.
pub const DEFAULT_QEMU: &str = "/usr/bin/qemu-system-x86_64";

/// `zerostart qemu-dropin` options: where the real QEMU and the pool are.
/// Invoked as `zerostart-qemu`, the drop-in takes them from
/// `ZEROSTART_QEMU`, `ZEROSTART_POOL_SOCKET` and `ZEROSTART_POOL_PAGE`, else
/// these defaults.
#[derive(Debug, Args)]
pub struct DropinArgs {
    /// The real QEMU binary.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_QEMU)]
    pub qemu: PathBuf,
    /// The pool's socket.
    #[arg(long, value_name = "SOCKET", default_value = options::DEFAULT_POOL_SOCKET)]
    pub pool: PathBuf,
    /// The pool's page size (2M, 1G, or 4K for a shmem pool).
    #[arg(long, value_name = "2M|1G|4K", default_value = "2M")]
    pub page: String,
    /// Test only: break the hint or plant bytes inside it, as `zerostart
    /// launch` does (the libvirt test's negative control). Refused unless
    /// ZEROSTART_TEST_SWITCHES=1.
    #[arg(long, hide = true, value_enum)]
    pub test_corrupt_hint: Option<crate::hint::CorruptHint>,
    /// QEMU's arguments, as the management tool wrote them.
    #[arg(last = true, allow_hyphen_values = true, value_name = "QEMU ARGS")]
    pub qemu_args: Vec<String>,
}

impl DropinArgs {
    /// The drop-in as `zerostart-qemu ARGS...`: every argument is QEMU's.
    pub fn from_env(qemu_args: Vec<String>) -> DropinArgs {
        let var = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
        DropinArgs {
            qemu: var("ZEROSTART_QEMU", DEFAULT_QEMU).into(),
            pool: var("ZEROSTART_POOL_SOCKET", options::DEFAULT_POOL_SOCKET).into(),
            page: var("ZEROSTART_POOL_PAGE", "2M"),
            test_corrupt_hint: None,
            qemu_args,
        }
    }
}

/// What the drop-in does with a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// A capability probe or a QEMU query: the real QEMU, silently.
    Probe,
    /// A start the drop-in cannot serve: the real QEMU, unchanged, and this
    /// reason in one warning line.
    PassThrough(String),
    /// A start on pool memory: `args` without their memory backend, and
    /// the guest RAM size it had.
    Serve {
        /// QEMU's arguments minus `-m`, the RAM backend object and the
        /// machine's `memory-backend=`.
        args: Vec<String>,
        /// Guest RAM bytes.
        size: u64,
        /// The arguments load firmware (`-bios`, a pflash drive or
        /// blockdev: libvirt's `<loader>`), so the boot is a firmware boot
        /// even with `-kernel` (OVMF loads it): the hint goes over fw_cfg.
        firmware: bool,
        /// A single guest NUMA node holding the RAM, memory hotplug slots.
        ram: super::vmm::QemuRam,
    },
}

/// Backend properties the pool's memory stands in for (libvirt writes
/// these for `<memoryBacking>` hugepages, `<allocation mode='immediate'>`,
/// `<access mode='shared'>` and dump settings), and the placement
/// `<numatune>` writes (`host-nodes`/`policy`), which
/// [`Backend::host_node`] judges first: one bound node is leased there.
/// Anything else is a choice the drop-in would silently drop, so it
/// passes the VM through instead.
const BACKEND_PROPS: &[&str] = &[
    "qom-type",
    "host-nodes",
    "policy",
    "id",
    "size",
    "prealloc",
    "prealloc-threads",
    "share",
    "mem-path",
    "x-use-canonical-path-for-ramblock-id",
    "dump",
    "merge",
    "discard-data",
    "reserve",
    "hugetlb",
    "hugetlbsize",
    "seal",
];

/// A `-m` size: a number with an optional K/M/G/T suffix, MiB without one.
fn parse_m(v: &str) -> Option<u64> {
    let v = v.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return v.parse::<u64>().ok()?.checked_mul(1 << 20);
    }
    hostmem::parse_size(v).ok()
}

/// A memory backend object: its id, size and properties.
#[derive(Default)]
struct Backend {
    id: String,
    size: Option<u64>,
    props: Vec<String>,
    /// `host-nodes` as written (JSON: its one element, or the array), if set.
    host_nodes: Option<String>,
    /// `policy`, if set.
    policy: Option<String>,
}

impl Backend {
    /// The host NUMA node the backend's RAM is bound to (libvirt's
    /// `<numatune>`: `host-nodes` with policy `bind` or `preferred`),
    /// which a lease on that node honours; `Err` for a placement one
    /// region cannot honour (several nodes, `interleave`).
    fn host_node(&self) -> Result<Option<usize>, String> {
        let policy = self.policy.as_deref().unwrap_or("default");
        match (self.host_nodes.as_deref(), policy) {
            (None, "default") => Ok(None),
            (Some(n), "bind" | "preferred") => n.trim().parse::<usize>().map(Some).map_err(|_| {
                format!(
                    "memory backend '{}' binds to host nodes {n}: one region lives on one node",
                    self.id
                )
            }),
            (n, p) => Err(format!(
                "memory backend '{}' sets host-nodes {} with policy {p}, which pool memory cannot honour",
                self.id,
                n.unwrap_or("(none)")
            )),
        }
    }
}

/// An `-object` value, if it is a memory backend (`None` otherwise;
/// `Err` for one the drop-in cannot read).
fn backend(v: &str) -> Result<Option<Backend>, String> {
    if v.trim_start().starts_with('{') {
        let j: serde_json::Value = serde_json::from_str(v)
            .map_err(|e| format!("-object {v}: not JSON QEMU reads ({e})"))?;
        let ty = j.get("qom-type").and_then(|t| t.as_str()).unwrap_or("");
        if !ty.starts_with("memory-backend") {
            return Ok(None);
        }
        let obj = j.as_object().cloned().unwrap_or_default();
        return Ok(Some(Backend {
            id: j
                .get("id")
                .and_then(|t| t.as_str())
                .unwrap_or("")
                .to_string(),
            size: j.get("size").and_then(|s| match s {
                serde_json::Value::Number(n) => n.as_u64(),
                serde_json::Value::String(s) => s.parse().ok(),
                _ => None,
            }),
            props: obj.keys().cloned().collect(),
            host_nodes: j.get("host-nodes").map(|v| match v {
                serde_json::Value::Array(a) if a.len() == 1 => a[0].to_string(),
                other => other.to_string(),
            }),
            policy: j.get("policy").and_then(|t| t.as_str()).map(str::to_string),
        }));
    }
    let mut items = v.split(',');
    let ty = items.next().unwrap_or("");
    let ty = ty.strip_prefix("qom-type=").unwrap_or(ty);
    if !ty.starts_with("memory-backend") {
        return Ok(None);
    }
    let mut b = Backend {
        id: String::new(),
        size: None,
        props: vec!["qom-type".into()],
        ..Backend::default()
    };
    for it in items {
        let (k, val) = it.split_once('=').unwrap_or((it, ""));
        match k {
            "id" => b.id = val.to_string(),
            // Object sizes are bytes unless suffixed.
            "size" => b.size = hostmem::parse_size(val).ok(),
            // A second host-nodes= adds a node: not one region's.
            "host-nodes" if b.host_nodes.is_some() => b.host_nodes = Some("several".into()),
            "host-nodes" => b.host_nodes = Some(val.to_string()),
            "policy" => b.policy = Some(val.to_string()),
            _ => {}
        }
        b.props.push(k.to_string());
    }
    Ok(Some(b))
}

/// Reads a management tool's QEMU command line (pure: unit-tested on the
/// lines libvirt and Kata generate).
pub fn decide(args: &[String]) -> Decision {
    let pass = |s: String| Decision::PassThrough(s);
    if args.is_empty() {
        return Decision::Probe;
    }
    let opt = super::vmm::qemu_opt;
    // Queries first: they never start a guest.
    for (i, a) in args.iter().enumerate() {
        let Some(o) = opt(a) else { continue };
        let val = args.get(i + 1).map(String::as_str).unwrap_or("");
        match o {
            "version" | "help" | "h" | "dump-vmstate" => return Decision::Probe,
            "machine" | "M" => {
                let ty = val.split(',').next().unwrap_or("");
                let ty = ty.strip_prefix("type=").unwrap_or(ty);
                if ty == "none" || ty == "help" || ty == "?" {
                    return Decision::Probe;
                }
            }
            _ if val == "help" || val == "?" => return Decision::Probe,
            _ => {}
        }
    }
    let mut drop = vec![false; args.len()];
    let mut m_size = None;
    let mut backends: Vec<(usize, Backend)> = Vec::new();
    let mut machine_backend: Option<String> = None;
    let mut machine_edits: Vec<(usize, String)> = Vec::new();
    let mut firmware = false;
    let mut m_extra = String::new();
    let mut numa: Vec<(usize, String)> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        let Some(o) = opt(a) else {
            i += 1;
            continue;
        };
        let (val, has_val) = match args.get(i + 1) {
            Some(v) => (v.as_str(), true),
            None => ("", false),
        };
        match o {
            "m" if has_val => {
                // Hotplug slots stay (Kata writes them): hotplugged DIMMs
                // are QEMU's own memory, outside the hint.
                for it in val.split(',') {
                    if let Some((k @ ("slots" | "maxmem"), v)) = it.split_once('=') {
                        m_extra.push_str(&format!(",{k}={v}"));
                    }
                }
                let s = val
                    .split(',')
                    .find_map(|it| match it.split_once('=') {
                        Some(("size", v)) => Some(v),
                        Some(_) => None,
                        None => Some(it),
                    })
                    .unwrap_or("");
                match parse_m(s) {
                    Some(n) => m_size = Some(n),
                    None => return pass(format!("-m {val}: a size the drop-in cannot read")),
                }
                drop[i] = true;
                drop[i + 1] = true;
            }
            "object" if has_val => match backend(val) {
                Ok(Some(b)) => {
                    backends.push((i, b));
                }
                Ok(None) => {}
                Err(e) => return pass(e),
            },
            "bios" => firmware = true,
            "drive" | "blockdev" if val.contains("pflash") => firmware = true,
            "machine" | "M" if has_val => {
                let mut kept = Vec::new();
                for it in val.split(',') {
                    match it.split_once('=') {
                        Some(("memory-backend", id)) => machine_backend = Some(id.to_string()),
                        Some(("pflash0", _)) => {
                            firmware = true;
                            kept.push(it)
                        }
                        _ => kept.push(it),
                    }
                }
                machine_edits.push((i + 1, kept.join(",")));
            }
            "numa" if has_val => numa.push((i, val.to_string())),
            "incoming" | "loadvm" => {
                return pass(format!(
                    "-{o}: guest RAM comes from a migration stream or snapshot"
                ))
            }
            "mem-path" | "mem-prealloc" => {
                return pass(format!("-{o}: the legacy RAM options are not served"))
            }
            _ => {}
        }
        i += 1;
    }
    // Guest NUMA nodes (`-numa node,...`); `-numa dist|cpu|hmat-*` stay.
    let nodes: Vec<(usize, String)> = numa
        .into_iter()
        .filter(|(_, v)| v.split(',').next() == Some("node"))
        .collect();
    let item = |v: &str, key: &str| {
        v.split(',')
            .find_map(|it| it.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
    };
    // Each served backend: where its -object is (none for plain -m), the
    // backend, and the -numa value of its node with NUMA_MEMDEV in place
    // of its id.
    let mut served: Vec<(Option<usize>, Backend, Option<String>)> = Vec::new();
    if backends.is_empty() {
        let Some(size) = m_size else {
            return pass("no -m: QEMU's default RAM size is not served".into());
        };
        if !nodes.is_empty() {
            return pass("-numa node without memory backends (legacy mem=): not served".into());
        }
        served.push((
            None,
            Backend {
                size: Some(size),
                ..Backend::default()
            },
            None,
        ));
    } else if nodes.is_empty() {
        if backends.len() > 1 {
            return pass(format!(
                "{} memory backends and no guest NUMA node (memory devices?): not served",
                backends.len()
            ));
        }
        let (at, b) = backends.pop().expect("one backend");
        if machine_backend.as_deref() != Some(b.id.as_str()) {
            return pass(format!(
                "memory backend '{}' is neither the machine's memory-backend nor a NUMA node's memdev (a memory device?)",
                b.id
            ));
        }
        served.push((Some(at), b, None));
    } else {
        if machine_backend.is_some() {
            return pass(
                "-machine memory-backend= beside guest NUMA nodes (QEMU refuses it)".into(),
            );
        }
        // Guest order: QEMU lays the nodes' RAM out by node id.
        let mut ordered = Vec::new();
        for (k, (n, v)) in nodes.iter().enumerate() {
            let id = match item(v, "nodeid") {
                Some(x) => match x.parse::<usize>() {
                    Ok(x) => x,
                    Err(_) => return pass(format!("-numa {v}: a nodeid the drop-in cannot read")),
                },
                None => k,
            };
            ordered.push((id, *n, v.clone()));
        }
        ordered.sort_by_key(|(id, _, _)| *id);
        for (_, n, v) in ordered {
            let Some(mem) = item(&v, "memdev") else {
                return pass(format!(
                    "-numa {v}: a node without a memory backend (memdev=)"
                ));
            };
            let Some(k) = backends.iter().position(|(_, b)| b.id == mem) else {
                return pass(format!(
                    "-numa {v}: memdev={mem} is no memory backend on the line"
                ));
            };
            let (at, b) = backends.remove(k);
            let shaped: Vec<String> = v
                .split(',')
                .map(|it| match it.split_once('=') {
                    Some(("memdev", _)) => format!("memdev={}", super::vmm::NUMA_MEMDEV),
                    _ => it.to_string(),
                })
                .collect();
            drop[n] = true;
            drop[n + 1] = true;
            served.push((Some(at), b, Some(shaped.join(","))));
        }
        if let Some((_, b)) = backends.first() {
            return pass(format!(
                "memory backend '{}' is no guest NUMA node's memdev (a memory device?): not served",
                b.id
            ));
        }
    }
    let mut numa_nodes = Vec::new();
    let mut host_node = None;
    let mut total = 0u64;
    for (at, b, node) in &served {
        let bound = match b.host_node() {
            Ok(n) => n,
            Err(why) => return pass(why),
        };
        if let Some(p) = b
            .props
            .iter()
            .find(|p| !BACKEND_PROPS.contains(&p.as_str()))
        {
            return pass(format!(
                "memory backend '{}' sets {p}, which pool memory cannot honour",
                b.id
            ));
        }
        let Some(size) = b.size.or(if served.len() == 1 { m_size } else { None }) else {
            return pass(format!("memory backend '{}' has no size", b.id));
        };
        total += size;
        match node {
            Some(arg) => numa_nodes.push(super::vmm::NumaNode {
                arg: arg.clone(),
                size,
                host_node: bound,
            }),
            None => host_node = bound,
        }
        if let Some(at) = *at {
            drop[at] = true;
            drop[at + 1] = true;
        }
    }
    let size = match m_size {
        Some(m) if m != total => {
            return pass(format!("-m {m} and the backends' sizes {total} differ"));
        }
        _ => total,
    };
    let mut out = Vec::with_capacity(args.len());
    for (j, a) in args.iter().enumerate() {
        if drop[j] {
            continue;
        }
        if let Some((_, v)) = machine_edits.iter().find(|(k, _)| *k == j) {
            if v.is_empty() {
                // `-machine memory-backend=X` alone: drop the option too.
                out.pop();
                continue;
            }
            out.push(v.clone());
            continue;
        }
        out.push(a.clone());
    }
    Decision::Serve {
        args: out,
        size,
        firmware,
        ram: super::vmm::QemuRam {
            numa_nodes,
            host_node,
            m_extra,
        },
    }
}

/// Runs the drop-in: becomes QEMU, on pool memory when it can. Returns
/// only when even the real QEMU could not be started (its exit code).
pub fn run(a: &DropinArgs, start: Instant) -> i32 {
    let (args, size, firmware, ram) = match decide(&a.qemu_args) {
        Decision::Probe => return exec_plain(&a.qemu, &a.qemu_args),
        Decision::PassThrough(why) => {
            warn(&format!(
                "{why}; starting QEMU unchanged (no pool memory, no hint)"
            ));
            // The size is not known on every line passed through (no -m,
            // several backends): 0 bytes.
            passed_through(a, 0);
            return exec_plain(&a.qemu, &a.qemu_args);
        }
        Decision::Serve {
            args,
            size,
            firmware,
            ram,
        } => (args, size, firmware, ram),
    };
    let huge = match a.page.as_str() {
        "4K" | "4k" => "hugepages=off".to_string(),
        p => format!("hugepages=on,hugepage_size={p}"),
    };
    let launch = LaunchArgs {
        vmm: VmmKind::Qemu,
        memory: format!("size={size},source=pool:{},{huge}", a.pool.display()),
        firmware: None,
        vmm_binary: Some(a.qemu.clone()),
        dry_run: false,
        timeline: None,
        test_corrupt_hint: a.test_corrupt_hint,
        test_poison_unhinted: false,
        test_no_pdeathsig: false,
        // A pool that cannot lease now: wait briefly, then pass the VM
        // through unchanged (run() below), keeping the tool's own backend.
        pool_wait: std::time::Duration::from_secs(2),
        pool_fallback: super::PoolFallback::Fail,
        disk: vec![],
        net: vec![],
        vsock: None,
        vmm_args: args,
        exec: true,
        firmware_in_args: firmware,
        qemu_ram: ram,
    };
    // On success this does not return: the process is QEMU now.
    if let Err(e) = super::run(&launch, start) {
        warn(&format!(
            "{e}; starting QEMU unchanged (no pool memory, no hint)"
        ));
        // QEMU itself could not be executed: the plain start fails the
        // same way, and no VM runs to count.
        if !matches!(e, super::Error::Spawn { .. }) {
            passed_through(a, size);
        }
    }
    exec_plain(&a.qemu, &a.qemu_args)
}

/// Reports a start passed through unchanged to the pool, once, before
/// this process becomes QEMU (a pool that is not there now is not counted).
fn passed_through(a: &DropinArgs, bytes: u64) {
    super::report_to_pool(
        a.pool.clone(),
        pool::proto::LaunchReport {
            vmm: pool::proto::Vmm::Qemu,
            outcome: pool::proto::Outcome::Passthrough,
            bytes,
            memory_ready_s: None,
        },
        false,
    );
}

fn warn(msg: &str) {
    eprintln!("{DROPIN_NAME}: warning: {msg}");
}

/// Becomes `qemu ARGS` (the probe and pass-through path).
fn exec_plain(qemu: &Path, args: &[String]) -> i32 {
    let err = std::process::Command::new(qemu).args(args).exec();
    eprintln!(
        "{DROPIN_NAME}: error: cannot start {}: {err}; install QEMU there or name it with --qemu (ZEROSTART_QEMU)",
        qemu.display()
    );
    127
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::vmm::{NumaNode, QemuRam};

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    /// libvirt 9.0.0 (Debian 12) for a q35 TCG domain with direct kernel
    /// boot, 512 MiB, as captured from `virsh start` (tests/libvirt/run.py
    /// boots the same domain).
    fn libvirt_direct() -> Vec<String> {
        s(&[
            "-name",
            "guest=zs1,debug-threads=on",
            "-S",
            "-object",
            r#"{"qom-type":"secret","id":"masterKey0","format":"raw","file":"/var/lib/libvirt/qemu/domain-1-zs1/master-key.aes"}"#,
            "-machine",
            "pc-q35-7.2,usb=off,dump-guest-core=off,memory-backend=pc.ram",
            "-accel",
            "tcg",
            "-cpu",
            "qemu64",
            "-m",
            "512",
            "-object",
            r#"{"qom-type":"memory-backend-ram","id":"pc.ram","size":536870912}"#,
            "-overcommit",
            "mem-lock=off",
            "-smp",
            "1,sockets=1,cores=1,threads=1",
            "-display",
            "none",
            "-no-user-config",
            "-nodefaults",
            "-chardev",
            "socket,id=charmonitor,fd=23,server=on,wait=off",
            "-mon",
            "chardev=charmonitor,id=monitor,mode=control",
            "-kernel",
            "/k/bzImage",
            "-initrd",
            "/k/initrd",
            "-append",
            "console=ttyS0 panic=-1",
            "-sandbox",
            "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
            "-msg",
            "timestamp=on",
        ])
    }

    #[test]
    fn libvirt_probes_go_to_qemu() {
        // libvirt's capability probe (virQEMUCapsInitQMPCommandRun).
        let probe = s(&[
            "-S",
            "-no-user-config",
            "-nodefaults",
            "-nographic",
            "-machine",
            "none,accel=kvm:tcg",
            "-qmp",
            "unix:/run/qmp.monitor,server=on,wait=off",
            "-pidfile",
            "/run/qmp.pid",
            "-daemonize",
        ]);
        assert_eq!(decide(&probe), Decision::Probe);
        for q in [
            &["-version"][..],
            &["--help"],
            &["-device", "help"],
            &["-M", "?"],
            &[],
        ] {
            assert_eq!(decide(&s(q)), Decision::Probe, "{q:?}");
        }
    }

    #[test]
    fn libvirt_domain_loses_only_its_memory_backend() {
        let d = decide(&libvirt_direct());
        let Decision::Serve {
            args,
            size,
            firmware,
            ram,
        } = d
        else {
            panic!("not served: {d:?}");
        };
        assert_eq!(size, 512 << 20);
        assert!(!firmware, "a direct kernel boot");
        assert_eq!(ram, QemuRam::default());
        // Everything else is untouched, in order.
        let mut want = libvirt_direct();
        let m = want.iter().position(|a| a == "-m").unwrap();
        want.drain(m..m + 4); // -m 512 -object {memory-backend-ram}
        let at = want
            .iter()
            .position(|a| a.contains("memory-backend=pc.ram"))
            .unwrap();
        want[at] = "pc-q35-7.2,usb=off,dump-guest-core=off".into();
        assert_eq!(args, want);
    }

    fn served(args: &[&str], size: u64) -> Decision {
        Decision::Serve {
            args: s(args),
            size,
            firmware: false,
            ram: QemuRam::default(),
        }
    }

    #[test]
    fn keyval_backends_and_plain_m() {
        let d = decide(&s(&[
            "-machine",
            "q35,memory-backend=ram0",
            "-m",
            "1G",
            "-object",
            "memory-backend-file,id=ram0,size=1G,mem-path=/dev/hugepages,share=on,prealloc=on",
            "-kernel",
            "k",
        ]));
        assert_eq!(d, served(&["-machine", "q35", "-kernel", "k"], 1 << 30));
        assert_eq!(
            decide(&s(&[
                "-machine",
                "q35",
                "-m",
                "size=524288k",
                "-kernel",
                "k"
            ])),
            served(&["-machine", "q35", "-kernel", "k"], 512 << 20)
        );
        // `-machine memory-backend=X` on its own disappears whole.
        assert_eq!(
            decide(&s(&[
                "-M",
                "q35",
                "-machine",
                "memory-backend=r",
                "-object",
                "memory-backend-memfd,id=r,size=64M"
            ])),
            served(&["-M", "q35"], 64 << 20)
        );
        // libvirt's <loader type='rom'> and pflash forms make it a firmware boot.
        for fw in [
            &["-bios", "/fw/OVMF.fd"][..],
            &[
                "-drive",
                "if=pflash,format=raw,unit=0,file=/fw/CODE.fd,readonly=on",
            ],
            &[
                "-blockdev",
                r#"{"driver":"file","filename":"/fw/CODE.fd","node-name":"libvirt-pflash0-storage"}"#,
            ],
            &["-machine", "q35,pflash0=libvirt-pflash0-format"],
        ] {
            let mut a = s(&["-m", "1G", "-kernel", "k"]);
            a.extend(s(fw));
            assert!(
                matches!(decide(&a), Decision::Serve { firmware: true, .. }),
                "{fw:?}"
            );
        }
    }

    /// Kata's QEMU driver: src/runtime/pkg/govmm/qemu/qemu.go of
    /// kata-containers/kata-containers at 0a4b755cd9e22b31cfdbfcb9919b4122b51c26cc,
    /// appendMemory (`-m SIZE,slots=N,maxmem=M`) and appendMemoryKnobs
    /// (`-object memory-backend-{ram,file},id=dimm1,size=SIZE[,mem-path=
    /// /dev/hugepages][,share=on][,prealloc=on]` and `-numa node,memdev=dimm1`).
    #[test]
    fn kata_memory_arguments_are_served() {
        for obj in [
            "memory-backend-ram,id=dimm1,size=2048M",
            "memory-backend-file,id=dimm1,size=2048M,mem-path=/dev/hugepages,share=on,prealloc=on",
            "memory-backend-ram,id=dimm1,size=2048M,share=on,prealloc=on",
        ] {
            let d = decide(&s(&[
                "-machine",
                "q35,accel=kvm,kernel_irqchip=on",
                "-m",
                "2048M,slots=10,maxmem=386044M",
                "-object",
                obj,
                "-numa",
                "node,memdev=dimm1",
                "-kernel",
                "/k/vmlinux.container",
                "-append",
                "console=hvc0",
                "-smp",
                "1,cores=1,threads=1,sockets=4,maxcpus=4",
            ]));
            assert_eq!(
                d,
                Decision::Serve {
                    args: s(&[
                        "-machine",
                        "q35,accel=kvm,kernel_irqchip=on",
                        "-kernel",
                        "/k/vmlinux.container",
                        "-append",
                        "console=hvc0",
                        "-smp",
                        "1,cores=1,threads=1,sockets=4,maxcpus=4"
                    ]),
                    size: 2048 << 20,
                    firmware: false,
                    ram: QemuRam {
                        numa_nodes: vec![NumaNode {
                            arg: "node,memdev={memdev}".into(),
                            size: 2048 << 20,
                            host_node: None,
                        }],
                        host_node: None,
                        m_extra: ",slots=10,maxmem=386044M".into(),
                    },
                },
                "{obj}"
            );
        }
    }

    /// libvirt's two-cell domain (`<numa><cell id='0' memory='1'
    /// unit='GiB'/>...`; qemu_command.c qemuBuildNumaCommandLine, as
    /// tests/libvirt/cases.py's numa2 domain makes it write): each node's
    /// backend becomes a region of its own, in node-id order, and the
    /// distances stay.
    #[test]
    fn several_guest_numa_nodes_get_one_region_each() {
        let d = decide(&s(&[
            "-machine",
            "q35,usb=off",
            "-m",
            "size=3145728k",
            "-object",
            r#"{"qom-type":"memory-backend-ram","id":"ram-node1","size":2147483648}"#,
            "-numa",
            "node,nodeid=1,cpus=1,memdev=ram-node1",
            "-object",
            r#"{"qom-type":"memory-backend-ram","id":"ram-node0","size":1073741824}"#,
            "-numa",
            "node,nodeid=0,cpus=0,memdev=ram-node0",
            "-numa",
            "dist,src=0,dst=1,val=20",
            "-smp",
            "2",
        ]));
        assert_eq!(
            d,
            Decision::Serve {
                args: s(&[
                    "-machine",
                    "q35,usb=off",
                    "-numa",
                    "dist,src=0,dst=1,val=20",
                    "-smp",
                    "2"
                ]),
                size: 3 << 30,
                firmware: false,
                ram: QemuRam {
                    numa_nodes: vec![
                        NumaNode {
                            arg: "node,nodeid=0,cpus=0,memdev={memdev}".into(),
                            size: 1 << 30,
                            host_node: None,
                        },
                        NumaNode {
                            arg: "node,nodeid=1,cpus=1,memdev={memdev}".into(),
                            size: 2 << 30,
                            host_node: None,
                        },
                    ],
                    host_node: None,
                    m_extra: String::new(),
                },
            }
        );
        // The launcher's QEMU line for it: one backend per node, each on
        // its own region, the nodes pointed at them.
        let Decision::Serve {
            args, size, ram, ..
        } = d
        else {
            unreachable!()
        };
        let inp = crate::launch::vmm::Inputs {
            size,
            mem: [("/proc/self/fd/7", 1 << 30), ("/proc/self/fd/9", 2 << 30)]
                .map(|(path, size)| crate::launch::vmm::MemFile {
                    path: path.into(),
                    offset: 0,
                    size,
                })
                .to_vec(),
            hugepage_bytes: Some(2 << 20),
            hint: crate::launch::vmm::Carrier::None,
            firmware: None,
            firmware_in_args: false,
            qemu_ram: ram,
            devices: Default::default(),
            vmm_config: None,
        };
        let built = crate::launch::vmm::qemu(&args, &inp).unwrap();
        let line = built.args.join(" ");
        for want in [
            "-numa node,nodeid=0,cpus=0,memdev=zerostart-ram0",
            "-numa node,nodeid=1,cpus=1,memdev=zerostart-ram1",
            "-m 3072M",
            "memory-backend-file,id=zerostart-ram0,size=1073741824,mem-path=/proc/self/fd/7,share=on",
            "memory-backend-file,id=zerostart-ram1,size=2147483648,mem-path=/proc/self/fd/9,share=on",
        ] {
            assert!(line.contains(want), "{want} not in {line}");
        }
        assert!(!line.contains("memory-backend=zerostart"), "{line}");
        // One file short of the nodes: refused, not a guest on half its RAM.
        let mut short = inp.clone();
        short.mem.pop();
        let e = crate::launch::vmm::qemu(&args, &short)
            .unwrap_err()
            .to_string();
        assert!(e.contains("one region per node"), "{e}");
    }

    /// libvirt's `<numatune>`: each `<memnode>` (or the whole guest's
    /// `<memory>`) puts `host-nodes` and `policy=bind` on the backend; the
    /// region is leased on that host node.
    #[test]
    fn a_backend_bound_to_a_host_node_is_leased_there() {
        let d = decide(&s(&[
            "-m",
            "2G",
            "-object",
            r#"{"qom-type":"memory-backend-ram","id":"ram-node0","size":1073741824,"host-nodes":[1],"policy":"bind"}"#,
            "-numa",
            "node,nodeid=0,cpus=0,memdev=ram-node0",
            "-object",
            "memory-backend-ram,id=ram-node1,size=1G,host-nodes=0,policy=preferred",
            "-numa",
            "node,nodeid=1,cpus=1,memdev=ram-node1",
        ]));
        let Decision::Serve { ram, .. } = d else {
            panic!("{d:?}")
        };
        assert_eq!(ram.host_nodes(), vec![Some(1), Some(0)]);
        let d = decide(&s(&[
            "-machine",
            "q35,memory-backend=pc.ram",
            "-m",
            "1G",
            "-object",
            r#"{"qom-type":"memory-backend-ram","id":"pc.ram","size":1073741824,"host-nodes":[0],"policy":"bind"}"#,
        ]));
        let Decision::Serve { ram, .. } = d else {
            panic!("{d:?}")
        };
        assert_eq!(ram.host_nodes(), vec![Some(0)]);
        assert_eq!(ram.part_sizes(1 << 30), vec![1 << 30]);
        // Memory of the launcher's own cannot be placed: refused, one line.
        let e = crate::launch::memory::Region::acquire(
            &crate::launch::memory::Source::None,
            2 << 20,
            hostmem::PageSize::Size4K,
            1,
            Some(0),
            1,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("needs pool memory"), "{e}");
    }

    #[test]
    fn what_is_not_served_passes_through_with_its_reason() {
        let cases: &[(&[&str], &str)] = &[
            (
                &[
                    "-m",
                    "1G",
                    "-numa",
                    "node,memdev=a",
                    "-numa",
                    "node,memdev=c",
                    "-object",
                    "memory-backend-ram,id=a,size=512M",
                    "-object",
                    "memory-backend-ram,id=b,size=512M",
                ],
                "memdev=c is no memory backend",
            ),
            (
                &[
                    "-m",
                    "1G",
                    "-object",
                    "memory-backend-ram,id=a,size=512M",
                    "-object",
                    "memory-backend-ram,id=b,size=512M",
                    "-numa",
                    "node,memdev=a",
                    "-device",
                    "pc-dimm,memdev=b",
                ],
                "no guest NUMA node's memdev",
            ),
            (
                &[
                    "-m",
                    "2G",
                    "-object",
                    "memory-backend-ram,id=a,size=512M",
                    "-object",
                    "memory-backend-ram,id=b,size=512M",
                    "-numa",
                    "node,memdev=a",
                    "-numa",
                    "node,memdev=b",
                ],
                "-m 2147483648 and the backends' sizes 1073741824 differ",
            ),
            (&["-m", "1G", "-numa", "node,mem=1G"], "legacy mem="),
            (&["-m", "1G", "-incoming", "defer"], "migration"),
            (&["-kernel", "k"], "default RAM"),
            (
                &[
                    "-machine",
                    "q35,memory-backend=a",
                    "-object",
                    r#"{"qom-type":"memory-backend-ram","id":"a","size":1073741824,"host-nodes":[0,1],"policy":"bind"}"#,
                ],
                "binds to host nodes [0,1]",
            ),
            (
                &[
                    "-machine",
                    "q35,memory-backend=a",
                    "-object",
                    "memory-backend-ram,id=a,size=1G,host-nodes=0,policy=interleave",
                ],
                "with policy interleave",
            ),
            (
                &[
                    "-machine",
                    "q35,memory-backend=a",
                    "-m",
                    "2G",
                    "-object",
                    "memory-backend-ram,id=a,size=1G",
                ],
                "differ",
            ),
            (
                &[
                    "-machine",
                    "q35",
                    "-object",
                    "memory-backend-ram,id=a,size=1G",
                ],
                "a memory device",
            ),
        ];
        for (args, why) in cases {
            match decide(&s(args)) {
                Decision::PassThrough(w) => assert!(w.contains(why), "{args:?}: {w}"),
                d => panic!("{args:?}: {d:?}"),
            }
        }
    }

    #[test]
    fn m_sizes() {
        assert_eq!(parse_m("512"), Some(512 << 20));
        assert_eq!(parse_m("2G"), Some(2 << 30));
        assert_eq!(parse_m("524288k"), Some(512 << 20));
        assert_eq!(parse_m("x"), None);
        assert_eq!(parse_m("99999999999999T"), None);
    }
}
