//! The one grammar of every `key=value[,key=value...]` option list of
//! `zerostart run` (`--cpus`, `--memory`, `--serial`, `--disk`, `--net`, `--vsock`) and `zerostart
//! launch` (`--memory`), modelled on cloud-hypervisor's `option_parser`:
//! each option declares its keys, [`OptionList::parse`] splits the string
//! and refuses, the same way for every option, an item that is not
//! `key=value`, an unknown key and a key given twice; the option then reads
//! typed values by key. The `--memory` grammar of `zerostart run` lives
//! here too ([`memory`]): guestmem holds the memory configuration types,
//! not their command-line spelling.
//!
//! Its own crate (as cloud-hypervisor's `option_parser` is) so that
//! guestmem's integration tests and examples can keep writing memory
//! configurations as option strings without guestmem parsing them.
//!
//! The command lines of the VMMs this project starts (QEMU,
//! cloud-hypervisor, Firecracker, `zerostart run` and `launch`) are
//! built here too ([`vmm_cmd`]): every spelling in one crate.

use std::path::PathBuf;
use std::str::FromStr;

use guestmem::{Backing, MemoryConfig, PageSize, PrefaultMethod, Prezero};

pub mod vmm_cmd;

/// Parses this process's command line into `C`, as every zerostart binary
/// does. A bad one ends the process with exit code 2 and one line on
/// stderr, `PROG: ` and clap's problem and its tip without the usage block,
/// as every other zerostart error is one line (a value parser such as
/// `hostmem::parse_size` says the fix in its own message). `--help` and
/// `--version` print as clap prints them.
pub fn parse_command_line<C: clap::Parser>(prog: &str) -> C {
    match C::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            eprintln!("{prog}: {}", clap_one_line(&e.render().to_string()));
            std::process::exit(2)
        }
    }
}

/// clap's rendered error as one line: its lines up to the usage block,
/// trimmed and joined with "; ".
pub fn clap_one_line(rendered: &str) -> String {
    rendered
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Where `zerostart pool serve` listens and every client looks when no
/// socket is named (`prezero=pool`, `launch --memory source=pool`, the
/// drop-in's `--pool`): one path, spelled here.
pub const DEFAULT_POOL_SOCKET: &str = "/run/zerostart/pool.sock";

/// Errors in option values.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An option list item without `=`.
    #[error("--{opt}: '{item}' is not key=value; write e.g. --{opt} {example} (a value that holds a comma must be double-quoted: key=\"a,b\")")]
    NotKeyValue {
        /// Option name.
        opt: &'static str,
        /// The item.
        item: String,
        /// A valid example.
        example: &'static str,
    },
    /// An unknown key.
    #[error("--{opt}: unknown key '{key}'; valid keys: {valid} (a value that holds a comma must be double-quoted: key=\"a,b\")")]
    UnknownKey {
        /// Option name.
        opt: &'static str,
        /// The key.
        key: String,
        /// Valid keys.
        valid: &'static str,
    },
    /// A double quote that is never closed.
    #[error("--{opt}: '{value}' has an unterminated double quote; close it (key=\"a,b\")")]
    UnterminatedQuote {
        /// Option name.
        opt: &'static str,
        /// The whole option string.
        value: String,
    },
    /// A key given twice: refused rather than "last one wins", so that a
    /// value appended by a script cannot silently override an earlier one.
    #[error("--{opt}: {key}= given more than once; give each key at most once")]
    DuplicateKey {
        /// Option name.
        opt: &'static str,
        /// The key.
        key: String,
    },
    /// A `--memory` value or combination guestmem's configuration cannot
    /// take (its messages name the key and the valid values).
    #[error(transparent)]
    Memory(#[from] guestmem::Error),
    /// A size that does not parse (the grammar and its fix are
    /// `hostmem::parse_size`'s, said once there).
    #[error("--{opt}: {key}={err}")]
    Size {
        /// Option name.
        opt: &'static str,
        /// Key.
        key: &'static str,
        /// The grammar's own error: the value and how to write a size.
        err: hostmem::SizeError,
    },
    /// A value that does not parse.
    #[error("--{opt}: {key}='{value}' is invalid; {hint}")]
    BadValue {
        /// Option name.
        opt: &'static str,
        /// Key.
        key: &'static str,
        /// Value.
        value: String,
        /// What is valid.
        hint: &'static str,
    },
}

/// Splits an option string at the commas outside double quotes, as
/// cloud-hypervisor's `option_parser` does, so that a value may hold a
/// comma (`file="/tmp/a,b"`).
fn split_items<'a>(opt: &'static str, s: &'a str) -> Result<Vec<&'a str>, Error> {
    let (mut items, mut start, mut quoted) = (Vec::new(), 0, false);
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                items.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if quoted {
        return Err(Error::UnterminatedQuote {
            opt,
            value: s.to_string(),
        });
    }
    items.push(&s[start..]);
    Ok(items)
}

/// A value without the double quotes that let it hold a comma.
fn unquote(v: &str) -> &str {
    v.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(v)
}

/// A parsed option list: the items of one option string, each a known
/// key given at most once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionList {
    opt: &'static str,
    items: Vec<(String, String)>,
}

impl OptionList {
    /// Splits `s` (`a=1,b=2`; empty items and surrounding blanks are
    /// ignored) for option `--opt`, whose keys are `keys`; `example` is a
    /// valid list for the error message.
    pub fn parse(
        opt: &'static str,
        s: &str,
        keys: &'static [&'static str],
        example: &'static str,
    ) -> Result<Self, Error> {
        let mut items: Vec<(String, String)> = Vec::new();
        for item in split_items(opt, s)? {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (k, v) = item.split_once('=').ok_or_else(|| Error::NotKeyValue {
                opt,
                item: item.to_string(),
                example,
            })?;
            let (k, v) = (k.trim(), unquote(v.trim()));
            if !keys.contains(&k) {
                return Err(Error::UnknownKey {
                    opt,
                    key: k.to_string(),
                    valid: valid_keys(keys),
                });
            }
            if items.iter().any(|(seen, _)| seen == k) {
                return Err(Error::DuplicateKey {
                    opt,
                    key: k.to_string(),
                });
            }
            items.push((k.to_string(), v.to_string()));
        }
        Ok(OptionList { opt, items })
    }

    /// The value of `key`, if given.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.items
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// True if `key` was given.
    pub fn is_set(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The `(key, value)` items in the order given.
    pub fn items(&self) -> impl Iterator<Item = (&str, &str)> {
        self.items.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The error for a key this option declared but does not handle (a
    /// VMM bug, reported as an unknown key rather than a panic).
    pub fn unknown(&self, key: &str) -> Error {
        Error::UnknownKey {
            opt: self.opt,
            key: key.to_string(),
            valid: "(this key is declared but not handled: a zerostart bug)",
        }
    }
}

/// `a, b, c` for error messages; the key lists are static, so the string
/// is built once per list and leaked (a handful of bytes per process).
fn valid_keys(keys: &'static [&'static str]) -> &'static str {
    Box::leak(keys.join(", ").into_boxed_str())
}

/// `--disk` keys of `zerostart run`.
pub const DISK_KEYS: &[&str] = &["path", "readonly"];

/// One `--disk` of `zerostart run`: a raw image for a virtio-blk device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskConfig {
    /// The raw image file (or block device).
    pub path: PathBuf,
    /// Open it read-only and offer `VIRTIO_BLK_F_RO`: the guest cannot
    /// write it, and neither can a bug in the VMM.
    pub readonly: bool,
}

/// Parses `zerostart run --disk path=PATH[,readonly=on|off]`.
pub fn disk(s: &str) -> Result<DiskConfig, Error> {
    let list = OptionList::parse("disk", s, DISK_KEYS, "path=rootfs.img,readonly=on")?;
    let mut path = None;
    let mut readonly = false;
    for (k, v) in list.items() {
        match k {
            "path" if v.is_empty() => {
                return Err(Error::BadValue {
                    opt: "disk",
                    key: "path",
                    value: v.to_string(),
                    hint: "give the raw image's path, e.g. --disk path=rootfs.img",
                })
            }
            "path" => path = Some(PathBuf::from(v)),
            "readonly" => {
                readonly = on_off(k, v).map_err(|_| Error::BadValue {
                    opt: "disk",
                    key: "readonly",
                    value: v.to_string(),
                    hint: "use readonly=on or readonly=off",
                })?
            }
            _ => return Err(list.unknown(k)),
        }
    }
    let path = path.ok_or(Error::BadValue {
        opt: "disk",
        key: "path",
        value: String::new(),
        hint: "path= is required; write e.g. --disk path=rootfs.img",
    })?;
    Ok(DiskConfig { path, readonly })
}

/// `--net` keys (`zerostart run` and `zerostart launch`).
pub const NET_KEYS: &[&str] = &["tap", "mac", "vhost"];

/// One `--net`: a virtio-net device on an existing host tap interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetConfig {
    /// The host tap interface (created beforehand, e.g. `ip tuntap add`).
    pub tap: String,
    /// The guest's MAC address; `None`: derived from the device index
    /// ([`default_mac`]).
    pub mac: Option<[u8; 6]>,
    /// `vhost=on|off`; `None`: vhost-net when `/dev/vhost-net` exists.
    pub vhost: Option<bool>,
}

/// The MAC a `--net` without `mac=` gets: locally administered, unicast
/// (`52:54:00` is QEMU's and would collide with its guests; `0x0a` sets
/// the local bit), `0a:5a:53:00:00:<n>`, so the same command line always
/// gives the same address and two devices of one VM never share one.
pub fn default_mac(index: usize) -> [u8; 6] {
    let n = index as u16;
    [0x0a, 0x5a, 0x53, 0x00, (n >> 8) as u8, n as u8]
}

/// `aa:bb:cc:dd:ee:ff` for a MAC.
pub fn format_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Longest interface name Linux takes (`IFNAMSIZ` less the NUL).
pub const IFNAME_MAX: usize = 15;

fn net_bad(key: &'static str, value: &str, hint: &'static str) -> Error {
    Error::BadValue {
        opt: "net",
        key,
        value: value.to_string(),
        hint,
    }
}

/// Parses `--net tap=NAME[,mac=MAC][,vhost=on|off]`.
///
/// `tap=` must be a valid Linux interface name (1-15 bytes, no `/`, `:`
/// or blank, not `.` or `..`: what the kernel's `dev_valid_name`
/// accepts); `mac=` six hex pairs separated by `:`, unicast and not all
/// zero (the guest driver would refuse it or the bridge would flood it).
pub fn net(s: &str) -> Result<NetConfig, Error> {
    let list = OptionList::parse("net", s, NET_KEYS, "tap=tap0,mac=0a:5a:53:00:00:01")?;
    let mut cfg = NetConfig {
        tap: String::new(),
        mac: None,
        vhost: None,
    };
    for (k, v) in list.items() {
        match k {
            "tap" => {
                let ok = !v.is_empty()
                    && v.len() <= IFNAME_MAX
                    && v != "."
                    && v != ".."
                    && !v
                        .chars()
                        .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control());
                if !ok {
                    return Err(net_bad(
                        "tap",
                        v,
                        "give an interface name of 1-15 characters without '/', ':' or blanks, e.g. tap=tap0 (create it with: ip tuntap add tap0 mode tap)",
                    ));
                }
                cfg.tap = v.to_string();
            }
            "mac" => cfg.mac = Some(parse_mac(v)?),
            "vhost" => {
                cfg.vhost = Some(on_off(k, v).map_err(|_| {
                    net_bad(
                        "vhost",
                        v,
                        "use vhost=on (kernel vhost-net, needs /dev/vhost-net) or vhost=off (the VMM moves packets)",
                    )
                })?)
            }
            _ => return Err(list.unknown(k)),
        }
    }
    if cfg.tap.is_empty() {
        return Err(net_bad(
            "tap",
            "",
            "tap= is required; write e.g. --net tap=tap0",
        ));
    }
    Ok(cfg)
}

/// Parses a MAC address `aa:bb:cc:dd:ee:ff` for `--net mac=`.
pub fn parse_mac(v: &str) -> Result<[u8; 6], Error> {
    let hint = "write six hex pairs separated by ':', unicast (first byte even) and not all zero, e.g. mac=0a:5a:53:00:00:01";
    let parts: Vec<&str> = v.split(':').collect();
    let mut mac = [0u8; 6];
    if parts.len() != 6 {
        return Err(net_bad("mac", v, hint));
    }
    for (b, p) in mac.iter_mut().zip(&parts) {
        if p.len() != 2 {
            return Err(net_bad("mac", v, hint));
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| net_bad("mac", v, hint))?;
    }
    if mac[0] & 1 != 0 || mac == [0; 6] {
        return Err(net_bad("mac", v, hint));
    }
    Ok(mac)
}

/// `--vsock` keys of `zerostart run` (the kernel's vhost-vsock).
pub const VSOCK_KEYS: &[&str] = &["cid"];
/// `--vsock` keys of `zerostart launch` (cloud-hypervisor's hybrid vsock
/// also needs the unix socket it listens on).
pub const LAUNCH_VSOCK_KEYS: &[&str] = &["cid", "socket"];

/// One `--vsock`: a virtio-vsock device with the guest's context ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VsockConfig {
    /// The guest's CID (3 ..= 2^32 - 2: 0-2 are the hypervisor, local and
    /// host, 2^32 - 1 is `VMADDR_CID_ANY`).
    pub cid: u32,
    /// cloud-hypervisor's hybrid vsock socket (`zerostart launch` only).
    pub socket: Option<PathBuf>,
}

/// Parses `zerostart run --vsock cid=N`.
pub fn vsock(s: &str) -> Result<VsockConfig, Error> {
    vsock_with(s, VSOCK_KEYS)
}

/// Parses `zerostart launch --vsock cid=N[,socket=PATH]`.
pub fn launch_vsock(s: &str) -> Result<VsockConfig, Error> {
    vsock_with(s, LAUNCH_VSOCK_KEYS)
}

fn vsock_with(s: &str, keys: &'static [&'static str]) -> Result<VsockConfig, Error> {
    let list = OptionList::parse("vsock", s, keys, "cid=3")?;
    let bad_cid = |v: &str| {
        Error::BadValue {
        opt: "vsock",
        key: "cid",
        value: v.to_string(),
        hint: "give a context ID from 3 to 4294967294, unique among this host's VMs, e.g. cid=3 (0-2 are reserved, 4294967295 is VMADDR_CID_ANY)",
    }
    };
    let mut cid = None;
    let mut socket = None;
    for (k, v) in list.items() {
        match k {
            "cid" => {
                let n: u64 = v.parse().map_err(|_| bad_cid(v))?;
                if !(3..u64::from(u32::MAX)).contains(&n) {
                    return Err(bad_cid(v));
                }
                cid = Some(n as u32);
            }
            "socket" if v.is_empty() => {
                return Err(Error::BadValue {
                    opt: "vsock",
                    key: "socket",
                    value: String::new(),
                    hint: "give the unix socket path cloud-hypervisor listens on, e.g. socket=/run/vm0.vsock",
                })
            }
            "socket" => socket = Some(PathBuf::from(v)),
            _ => return Err(list.unknown(k)),
        }
    }
    let cid = cid.ok_or(Error::BadValue {
        opt: "vsock",
        key: "cid",
        value: String::new(),
        hint: "cid= is required; write e.g. --vsock cid=3",
    })?;
    Ok(VsockConfig { cid, socket })
}

/// `--memory` keys of `zerostart run`.
pub const MEMORY_KEYS: &[&str] = &[
    "size",
    "hugepages",
    "hugepage_size",
    "file",
    "thp",
    "prefault",
    "prefault_method",
    "hint",
    "zero_engine",
    "prezero",
    "threads",
];

fn bad(key: &str, value: &str, valid: impl Into<String>) -> guestmem::Error {
    guestmem::Error::BadConfig {
        key: key.to_string(),
        value: value.to_string(),
        valid: valid.into(),
    }
}

/// The one on/off word set of every option list (`zerostart run`,
/// `zerostart launch`): on, true, yes, 1 / off, false, no, 0.
pub fn on_off(key: &str, v: &str) -> Result<bool, guestmem::Error> {
    match v {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        _ => Err(bad(key, v, "on, off")),
    }
}

/// The zeroing engine named `v` (`auto` or a backend) for key `key`.
fn engine(key: &str, v: &str, also: &str) -> Result<prezero::Choice, guestmem::Error> {
    prezero::Choice::from_str(v).map_err(|e| match e {
        prezero::Error::UnknownBackend { valid, .. } => bad(key, v, format!("{also}{valid}")),
        other => bad(key, v, other.to_string()),
    })
}

/// Parses `zerostart run --memory`, e.g.
/// `size=4G,hugepages=on,hugepage_size=2M,prefault=on,hint=on`.
///
/// Defaults: `size=512M,hugepages=off,thp=on,prefault=off,hint=on,
/// zero_engine=auto,prefault_method=auto,threads=0`. `file=` implies
/// hugetlbfs backing.
///
/// `hint=on|off` says whether the guest is told which RAM is already zero;
/// `zero_engine=auto|<backend>` is the engine that zeroes memory when
/// `prefault_method=nt` prefaults it (it zeroes nothing otherwise). The
/// older `prezero=` spelling, which mixed the two, stays as an alias:
/// `prezero=off` is `hint=off`, `prezero=auto|<backend>` is `hint=on,
/// zero_engine=auto|<backend>`, and `prezero=pool[:SOCKET]` leases
/// known-zero memory from `zerostart pool` (hint on). Every bad key or
/// value is an error naming it and the valid choices.
pub fn memory(s: &str) -> Result<MemoryConfig, Error> {
    let list = OptionList::parse("memory", s, MEMORY_KEYS, "size=4G,hugepages=on")?;
    let mut cfg = MemoryConfig::default();
    let mut hugepages = false;
    let mut page: Option<PageSize> = None;
    let mut file: Option<PathBuf> = None;
    let mut thp: Option<bool> = None;
    let mut pool: Option<PathBuf> = None;
    let mut hint: Option<bool> = None;
    let mut zero_engine: Option<prezero::Choice> = None;
    for (k, v) in list.items() {
        match k {
            "size" => {
                cfg.size = hostmem::parse_size(v).map_err(|err| Error::Size {
                    opt: "memory",
                    key: "size",
                    err,
                })?
            }
            "hugepages" => hugepages = on_off(k, v)?,
            "hugepage_size" => {
                // Guest RAM on hugetlb: 4K is a page size but no hugetlb
                // one, so it is refused here like any other wrong value.
                page = Some(match v.parse::<PageSize>() {
                    Ok(p) if p.is_huge() => p,
                    _ => return Err(bad(k, v, "2M, 1G (hugepages=off for 4K pages)").into()),
                })
            }
            "file" => {
                if v.is_empty() {
                    return Err(bad(k, v, "a path on a hugetlbfs mount").into());
                }
                file = Some(PathBuf::from(v))
            }
            "thp" => thp = Some(on_off(k, v)?),
            "prefault" => cfg.prefault = on_off(k, v)?,
            "prefault_method" => {
                cfg.prefault_method = match v {
                    "auto" => PrefaultMethod::Auto,
                    "nt" => PrefaultMethod::Nt,
                    "populate" => PrefaultMethod::Populate,
                    _ => return Err(bad(k, v, "auto, nt, populate").into()),
                }
            }
            "hint" => hint = Some(on_off(k, v)?),
            "zero_engine" => zero_engine = Some(engine(k, v, "")?),
            "prezero" if v == "pool" || v.starts_with("pool:") => {
                let socket = v.strip_prefix("pool:").unwrap_or(DEFAULT_POOL_SOCKET);
                if socket.is_empty() {
                    return Err(bad(k, v, "pool or pool:SOCKET (the pool daemon's socket)").into());
                }
                pool = Some(PathBuf::from(socket));
            }
            "prezero" => {
                if v == "off" {
                    hint = Some(false);
                } else {
                    hint = Some(true);
                    zero_engine = Some(engine(k, v, "off, ")?);
                }
            }
            "threads" => {
                cfg.threads = v
                    .parse()
                    .map_err(|_| bad(k, v, "a thread count, 0 = all CPUs"))?
            }
            _ => return Err(list.unknown(k)),
        }
    }
    if list.is_set("prezero") && pool.is_none() {
        if let Some(k) = ["hint", "zero_engine"].into_iter().find(|k| list.is_set(k)) {
            let v = list.get("prezero").unwrap_or_default();
            return Err(bad(
                "prezero",
                v,
                format!("prezero= is the old spelling of hint= and zero_engine=; drop prezero= and keep {k}="),
            )
            .into());
        }
    }
    if pool.is_some() && hint == Some(false) {
        return Err(bad(
            "hint",
            "off",
            "prezero=pool leases known-zero memory to hint it; drop hint=off or prezero=pool",
        )
        .into());
    }
    cfg.prezero = match hint {
        Some(false) => Prezero::Off,
        _ => Prezero::Engine(zero_engine.unwrap_or(prezero::Choice::Auto)),
    };
    if let (Some(f), false, true) = (&file, hugepages, list.is_set("hugepages")) {
        return Err(bad(
            "file",
            &f.display().to_string(),
            "file= needs hugepages=on (it must be on hugetlbfs)",
        )
        .into());
    }
    let hugepages = hugepages || file.is_some();
    if let (Some(p), false) = (page, hugepages) {
        return Err(bad(
            "hugepage_size",
            p.name(),
            "hugepage_size= needs hugepages=on",
        )
        .into());
    }
    if hugepages && thp == Some(true) {
        return Err(bad(
            "thp",
            "on",
            "thp=on only with hugepages=off (hugetlb pages are already huge)",
        )
        .into());
    }
    if let (Some(_), Some(f)) = (&pool, &file) {
        return Err(bad(
            "file",
            &f.display().to_string(),
            "file= and prezero=pool exclude each other (the pool owns the memory)",
        )
        .into());
    }
    if let (Some(_), Some(t)) = (&pool, thp) {
        return Err(bad(
            "thp",
            if t { "on" } else { "off" },
            "thp= does not apply to prezero=pool (the pool's page size does)",
        )
        .into());
    }
    let page = page.unwrap_or(PageSize::Size2M);
    if let Some(socket) = pool {
        cfg.backing = Backing::Pool {
            socket,
            page: if hugepages { page } else { PageSize::Size4K },
        };
        if !cfg.size.is_multiple_of(cfg.backing.page_bytes()) {
            return Err(guestmem::Error::NotHugeAligned {
                what: "size".into(),
                value: cfg.size,
                page: page.name(),
            }
            .into());
        }
        return Ok(cfg);
    }
    cfg.backing = match (hugepages, file) {
        (false, _) => Backing::Anonymous {
            thp: thp.unwrap_or(true),
        },
        (true, None) => Backing::MemfdHugetlb(page),
        (true, Some(path)) => Backing::HugetlbfsFile { path, page },
    };
    if let Some(p) = cfg.backing.hugepage() {
        if !cfg.size.is_multiple_of(p.bytes()) {
            return Err(guestmem::Error::NotHugeAligned {
                what: "size".into(),
                value: cfg.size,
                page: p.name(),
            }
            .into());
        }
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use guestmem::BackingKind;

    const KEYS: &[&str] = &["a", "b"];

    /// The grammar every option shares.
    #[test]
    fn one_grammar() {
        let l = OptionList::parse("x", " a=1, ,b = 2,", KEYS, "a=1").unwrap();
        assert_eq!(l.get("a"), Some("1"));
        assert_eq!(l.get("b"), Some("2"));
        assert!(!OptionList::parse("x", "", KEYS, "a=1").unwrap().is_set("a"));
        // A quoted value may hold commas (a serial log path, say).
        let l = OptionList::parse("x", "a=\"/tmp/x[b=1,c=2].log\",b=3", KEYS, "a=1").unwrap();
        assert_eq!(l.get("a"), Some("/tmp/x[b=1,c=2].log"));
        assert_eq!(l.get("b"), Some("3"));
        for (s, want) in [
            (
                "a=1,a=2",
                "--x: a= given more than once; give each key at most once",
            ),
            (
                "c=1",
                "--x: unknown key 'c'; valid keys: a, b (a value that holds a comma must be double-quoted: key=\"a,b\")",
            ),
            (
                "a",
                "--x: 'a' is not key=value; write e.g. --x a=1 (a value that holds a comma must be double-quoted: key=\"a,b\")",
            ),
            (
                "a=\"1,b=2",
                "--x: 'a=\"1,b=2' has an unterminated double quote; close it (key=\"a,b\")",
            ),
        ] {
            let e = OptionList::parse("x", s, KEYS, "a=1")
                .unwrap_err()
                .to_string();
            assert_eq!(e, want);
        }
    }

    /// Every option refuses a duplicate key alike (`--cpus` and launch's
    /// `--memory` used to take the last one; zerostart's tests/cli.rs runs
    /// the binary on each).
    #[test]
    fn duplicate_keys_refused_by_every_option() {
        for e in [
            OptionList::parse("cpus", "boot=1,boot=2", &["boot"], "boot=2")
                .unwrap_err()
                .to_string(),
            memory("size=1G,size=2G").unwrap_err().to_string(),
            OptionList::parse("serial", "file=/a,file=/b", &["file"], "file=PATH")
                .unwrap_err()
                .to_string(),
        ] {
            assert!(
                e.contains("given more than once; give each key at most once"),
                "{e}"
            );
        }
    }

    #[test]
    fn defaults() {
        let c = memory("").unwrap();
        assert_eq!(c, MemoryConfig::default());
        assert_eq!(c.size, 512 << 20);
        assert!(!c.prefault);
        assert_eq!(c.prezero, Prezero::Engine(prezero::Choice::Auto));
    }

    #[test]
    fn full_string() {
        let c = memory(
            "size=4G,hugepages=on,hugepage_size=2M,prefault=on,hint=on,zero_engine=auto,prefault_method=nt,threads=2",
        )
        .unwrap();
        assert_eq!(c.size, 4 << 30);
        assert_eq!(c.backing, Backing::MemfdHugetlb(PageSize::Size2M));
        assert!(c.prefault);
        assert_eq!(c.prefault_method, PrefaultMethod::Nt);
        assert_eq!(c.threads, 2);
        let c = memory("size=2G,file=/dev/hugepages/vm0,hugepage_size=1G").unwrap();
        assert_eq!(
            c.backing,
            Backing::HugetlbfsFile {
                path: "/dev/hugepages/vm0".into(),
                page: PageSize::Size1G
            }
        );
        let c = memory("size=1024M,thp=off,hint=off").unwrap();
        assert_eq!(c.backing, Backing::Anonymous { thp: false });
        assert_eq!(c.prezero, Prezero::Off);
        assert_eq!(c.backing.page_shift(), 12);
    }

    /// The old `prezero=` spelling means what `hint=` + `zero_engine=` say.
    #[test]
    fn prezero_is_an_alias() {
        for (old, new) in [
            ("prezero=off", "hint=off"),
            ("prezero=auto", "hint=on"),
            ("prezero=auto", "hint=on,zero_engine=auto"),
            ("prezero=auto", ""),
        ] {
            assert_eq!(memory(old).unwrap(), memory(new).unwrap(), "{old} vs {new}");
        }
        let e = memory("prezero=off,hint=on").unwrap_err().to_string();
        assert!(
            e.contains("old spelling") && e.contains("keep hint="),
            "{e}"
        );
        let e = memory("prezero=auto,zero_engine=auto")
            .unwrap_err()
            .to_string();
        assert!(e.contains("keep zero_engine="), "{e}");
        let e = memory("prezero=pool,hint=off").unwrap_err().to_string();
        assert!(e.contains("drop hint=off"), "{e}");
    }

    #[test]
    fn pool() {
        let c = memory("size=4G,hugepages=on,prezero=pool").unwrap();
        assert_eq!(
            c.backing,
            Backing::Pool {
                socket: DEFAULT_POOL_SOCKET.into(),
                page: PageSize::Size2M
            }
        );
        assert_eq!(c.prezero, Prezero::Engine(prezero::Choice::Auto));
        assert_eq!((c.backing.page_shift(), c.backing.hugepage()), (21, None));
        assert_eq!(c.backing.page_bytes(), 2 << 20);
        let c = memory("size=64M,prezero=pool:/tmp/p.sock").unwrap();
        assert_eq!(
            c.backing,
            Backing::Pool {
                socket: "/tmp/p.sock".into(),
                page: PageSize::Size4K
            }
        );
        assert_eq!(c.backing.kind(), BackingKind::Pool);
    }

    #[test]
    fn errors_name_key_and_choices() {
        for (s, needle) in [
            ("size=4Q", "size"),
            ("size=0", "size"),
            ("size=99999999999T", "size"),
            ("hugepages=maybe", "on, off"),
            ("hugepages=on,hugepage_size=4M", "2M, 1G"),
            // A page size, but no hugetlb one: refused where hugetlb is.
            (
                "hugepages=on,hugepage_size=4K",
                "2M, 1G (hugepages=off for 4K",
            ),
            ("file=/dev/hugepages/x,hugepage_size=4096", "2M, 1G"),
            ("prezero=fast", "off, auto"),
            ("zero_engine=fast", "auto"),
            ("hint=maybe", "on, off"),
            ("prefault_method=magic", "auto, nt, populate"),
            ("colour=blue", "size, hugepages"),
            ("size", "key=value"),
            ("size=1G,size=2G", "at most once"),
            ("hugepage_size=2M", "needs hugepages=on"),
            ("hugepages=on,thp=on", "thp=on only"),
            ("hugepages=off,file=/x", "needs hugepages=on"),
            ("threads=-1", "thread count"),
            ("prezero=pool:", "pool:SOCKET"),
            (
                "prezero=pool,file=/dev/hugepages/x,hugepages=on",
                "exclude each other",
            ),
            ("prezero=pool,thp=on", "does not apply to prezero=pool"),
        ] {
            let e = memory(s).unwrap_err().to_string();
            assert!(e.contains(needle), "{s}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let e = memory("size=3M,hugepages=on").unwrap_err().to_string();
        assert!(e.contains("multiple of 2M") && e.contains("size="), "{e}");
        let e = memory("size=3G,hugepages=on,hugepage_size=1G");
        assert!(e.is_ok());
        // What used to come from guestmem's parser (tests/hugetlb.rs).
        let e = memory("size=5M,hugepages=on").unwrap_err().to_string();
        assert!(e.contains("multiple of 2M"), "{e}");
        let e = memory("size=1536M,hugepages=on,hugepage_size=1G")
            .unwrap_err()
            .to_string();
        assert!(e.contains("multiple of 1G"), "{e}");
    }

    /// The timeline's `prezero.backing` names: one word per size, as in
    /// `prefault_bench` and docs/vmm.md (one word per size, not `anon4_k`).
    #[test]
    fn backing_kind_names() {
        for (cfg, name) in [
            ("thp=off", "anon_4k"),
            ("thp=on", "anon_thp"),
            ("hugepages=on", "hugetlb_2m"),
            ("size=1G,hugepages=on,hugepage_size=1G", "hugetlb_1g"),
        ] {
            let kind = memory(cfg).unwrap().backing.kind();
            assert_eq!(kind.name(), name, "{cfg}");
        }
        assert_eq!(BackingKind::Pool.name(), "pool");
    }

    #[test]
    fn disk_options() {
        assert_eq!(
            disk("path=/img").unwrap(),
            DiskConfig {
                path: "/img".into(),
                readonly: false
            }
        );
        assert!(disk("path=/img,readonly=on").unwrap().readonly);
        assert!(!disk("readonly=off,path=/img").unwrap().readonly);
        for (bad, needle) in [
            ("readonly=on", "path= is required"),
            ("", "path= is required"),
            ("path=", "raw image's path"),
            ("path=/img,readonly=maybe", "readonly=on or readonly=off"),
            ("path=/img,cache=none", "unknown key 'cache'"),
            ("path=/a,path=/b", "more than once"),
            ("/img", "not key=value"),
        ] {
            let e = disk(bad).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("--disk"), "{bad}: {e}");
        }
    }

    #[test]
    fn net_options() {
        assert_eq!(
            net("tap=tap0").unwrap(),
            NetConfig {
                tap: "tap0".into(),
                mac: None,
                vhost: None
            }
        );
        let n = net("tap=zs-tap1,mac=0A:5a:53:00:00:07,vhost=off").unwrap();
        assert_eq!(n.mac, Some([0x0a, 0x5a, 0x53, 0, 0, 7]));
        assert_eq!(n.vhost, Some(false));
        assert_eq!(net("vhost=on,tap=t").unwrap().vhost, Some(true));
        assert_eq!(net("tap=123456789012345").unwrap().tap.len(), 15);
        for (bad, needle) in [
            ("", "tap= is required"),
            ("mac=0a:00:00:00:00:01", "tap= is required"),
            ("tap=", "interface name"),
            ("tap=1234567890123456", "interface name"),
            ("tap=a/b", "interface name"),
            ("tap=a:b", "interface name"),
            ("tap=..", "interface name"),
            ("tap=\"a b\"", "interface name"),
            ("tap=t,mac=01:00:00:00:00:01", "unicast"),
            ("tap=t,mac=00:00:00:00:00:00", "unicast"),
            ("tap=t,mac=0a:00:00:00:00", "six hex pairs"),
            ("tap=t,mac=0a:00:00:00:00:0g", "six hex pairs"),
            ("tap=t,mac=0a:00:00:00:00:001", "six hex pairs"),
            ("tap=t,mac=0a-00-00-00-00-01", "six hex pairs"),
            ("tap=t,vhost=maybe", "vhost=on"),
            ("tap=t,queues=2", "unknown key 'queues'"),
            ("tap=t,tap=u", "more than once"),
            ("tap0", "not key=value"),
        ] {
            let e = net(bad).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("--net"), "{bad}: {e}");
            assert!(!e.contains('\n'), "{bad}: one line: {e}");
        }
    }

    #[test]
    fn default_macs_are_local_unicast_and_distinct() {
        let a = default_mac(0);
        assert_eq!(a, default_mac(0), "deterministic");
        assert_eq!(format_mac(&a), "0a:5a:53:00:00:00");
        assert_eq!(a[0] & 3, 2, "locally administered, unicast");
        assert_ne!(default_mac(1), a);
        assert_eq!(
            parse_mac(&format_mac(&default_mac(300))).unwrap(),
            default_mac(300)
        );
    }

    #[test]
    fn vsock_options() {
        assert_eq!(
            vsock("cid=3").unwrap(),
            VsockConfig {
                cid: 3,
                socket: None
            }
        );
        assert_eq!(vsock("cid=4294967294").unwrap().cid, u32::MAX - 1);
        let l = launch_vsock("cid=9,socket=/run/v.sock").unwrap();
        assert_eq!(
            l.socket.as_deref(),
            Some(std::path::Path::new("/run/v.sock"))
        );
        for (bad, needle) in [
            ("", "cid= is required"),
            ("cid=2", "from 3 to"),
            ("cid=0", "from 3 to"),
            ("cid=4294967295", "from 3 to"),
            ("cid=99999999999", "from 3 to"),
            ("cid=-3", "from 3 to"),
            ("cid=three", "from 3 to"),
            ("cid=3,socket=/x", "unknown key 'socket'"),
            ("cid=3,cid=4", "more than once"),
        ] {
            let e = vsock(bad).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("--vsock"), "{bad}: {e}");
        }
        let e = launch_vsock("cid=3,socket=").unwrap_err().to_string();
        assert!(e.contains("unix socket path"), "{e}");
    }
}
