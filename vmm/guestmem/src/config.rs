//! The `--memory` option: what backs guest RAM and how it is prepared.

use std::path::PathBuf;
use std::str::FromStr;

use crate::Error;

/// Size of a hugetlb page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum HugePageSize {
    /// 2 MiB pages.
    Size2M,
    /// 1 GiB pages.
    Size1G,
}

impl HugePageSize {
    /// The page size in bytes.
    pub fn bytes(self) -> u64 {
        match self {
            HugePageSize::Size2M => 2 << 20,
            HugePageSize::Size1G => 1 << 30,
        }
    }

    /// log2 of [`HugePageSize::bytes`] (the hint's `page_shift`).
    pub fn shift(self) -> u8 {
        match self {
            HugePageSize::Size2M => 21,
            HugePageSize::Size1G => 30,
        }
    }

    /// The name used in config strings and sysfs (`2M`, `1G`).
    pub fn name(self) -> &'static str {
        match self {
            HugePageSize::Size2M => "2M",
            HugePageSize::Size1G => "1G",
        }
    }
}

/// What host memory backs guest RAM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// Private anonymous memory, optionally with transparent huge pages
    /// (`MADV_HUGEPAGE`; without, `MADV_NOHUGEPAGE` so 4K is really 4K).
    Anonymous {
        /// Ask for THP.
        thp: bool,
    },
    /// A fresh `memfd_create(MFD_HUGETLB)` file: hugetlb pages, reserved at
    /// map time (so a shortage is an error at start, never a SIGBUS later).
    MemfdHugetlb(HugePageSize),
    /// A file on a hugetlbfs mount. A directory gets a fresh file, created
    /// `O_EXCL` and unlinked at once; a named file is locked, truncated to 0
    /// and re-grown so no earlier content survives.
    HugetlbfsFile {
        /// File or directory on hugetlbfs.
        path: PathBuf,
        /// The mount's page size.
        page: HugePageSize,
    },
    /// Memory leased from a `zerostart pool` daemon (`prezero=pool[:SOCKET]`):
    /// populated and known zero before the lease, so the VM needs no
    /// prefault and the hint covers it like fresh memory. Hugepages are
    /// the pool's, reserved when the pool started.
    Pool {
        /// The pool's socket.
        socket: PathBuf,
        /// The pool's hugepage size; `None` for a 4K (test-mode) pool.
        page: Option<HugePageSize>,
    },
}

impl Backing {
    /// The host page size guest RAM is mapped with (hugepage, or 2 MiB for
    /// THP, which is what it asks for but cannot guarantee; 4 KiB otherwise).
    pub fn page_shift(&self) -> u8 {
        match self {
            Backing::Anonymous { thp: false } => 12,
            Backing::Anonymous { thp: true } => 21,
            Backing::MemfdHugetlb(p) | Backing::HugetlbfsFile { page: p, .. } => p.shift(),
            Backing::Pool { page, .. } => page.map_or(12, |p| p.shift()),
        }
    }

    /// The hugetlb page size this VM must reserve itself, if hugetlb-backed
    /// (`None` for pool memory: the pool reserved it; see
    /// [`Backing::page_bytes`]).
    pub fn hugepage(&self) -> Option<HugePageSize> {
        match self {
            Backing::Anonymous { .. } | Backing::Pool { .. } => None,
            Backing::MemfdHugetlb(p) | Backing::HugetlbfsFile { page: p, .. } => Some(*p),
        }
    }

    /// Granularity guest RAM regions must be aligned to: the hugepage size
    /// of hugetlb and pool memory, else 4 KiB.
    pub fn page_bytes(&self) -> u64 {
        match self {
            Backing::Pool { page, .. } => page.map_or(4096, |p| p.bytes()),
            b => b.hugepage().map_or(4096, |p| p.bytes()),
        }
    }

    /// Short name for reports and the prefault table.
    pub fn kind(&self) -> BackingKind {
        match self {
            Backing::Anonymous { thp: false } => BackingKind::Anon4K,
            Backing::Anonymous { thp: true } => BackingKind::AnonThp,
            Backing::MemfdHugetlb(HugePageSize::Size2M)
            | Backing::HugetlbfsFile {
                page: HugePageSize::Size2M,
                ..
            } => BackingKind::Hugetlb2M,
            Backing::MemfdHugetlb(HugePageSize::Size1G)
            | Backing::HugetlbfsFile {
                page: HugePageSize::Size1G,
                ..
            } => BackingKind::Hugetlb1G,
            Backing::Pool { .. } => BackingKind::Pool,
        }
    }
}

/// The backing classes the prefault measurement distinguishes. Serialized
/// (the timeline's `prezero.backing`) as `anon_4k`, `anon_thp`,
/// `hugetlb_2m`, `hugetlb_1g`, `pool`: the row names of `prefault_bench`
/// (serde's `snake_case` would split the sizes into `anon4_k`, `hugetlb2_m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum BackingKind {
    /// Anonymous, 4 KiB pages.
    #[serde(rename = "anon_4k")]
    Anon4K,
    /// Anonymous with THP.
    #[serde(rename = "anon_thp")]
    AnonThp,
    /// hugetlb 2 MiB.
    #[serde(rename = "hugetlb_2m")]
    Hugetlb2M,
    /// hugetlb 1 GiB.
    #[serde(rename = "hugetlb_1g")]
    Hugetlb1G,
    /// Leased from a `zerostart pool`.
    #[serde(rename = "pool")]
    Pool,
}

/// Whether guest RAM is pre-zeroed (and so whether a zero hint is given).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prezero {
    /// No hint; the guest clears memory as usual.
    Off,
    /// Hint the guest; when prefaulting with [`PrefaultMethod::Nt`], zero
    /// with this engine choice.
    Engine(prezero::Choice),
}

/// How `prefault=on` populates memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PrefaultMethod {
    /// The measured-fastest method for the backing (see
    /// [`crate::PREFAULT_TABLE`]).
    Auto,
    /// Write zeros with the non-temporal engine (faults each page in, the
    /// kernel clears it, then the engine clears it again).
    Nt,
    /// `madvise(MADV_POPULATE_WRITE)` on disjoint chunks in parallel.
    Populate,
}

/// Guest memory configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryConfig {
    /// Guest RAM in bytes.
    pub size: u64,
    /// Host memory behind it.
    pub backing: Backing,
    /// Populate all of guest RAM before the guest starts.
    pub prefault: bool,
    /// Pre-zeroing / hint mode.
    pub prezero: Prezero,
    /// Prefault method.
    pub prefault_method: PrefaultMethod,
    /// Threads for prefault and verify; 0 = all CPUs.
    pub threads: usize,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            size: 512 << 20,
            backing: Backing::Anonymous { thp: true },
            prefault: false,
            prezero: Prezero::Engine(prezero::Choice::Auto),
            prefault_method: PrefaultMethod::Auto,
            threads: 0,
        }
    }
}

const KEYS: &str =
    "size, hugepages, hugepage_size, file, thp, prefault, prefault_method, prezero, threads";

fn bad(key: &str, value: &str, valid: impl Into<String>) -> Error {
    Error::BadConfig {
        key: key.to_string(),
        value: value.to_string(),
        valid: valid.into(),
    }
}

fn on_off(key: &str, v: &str) -> Result<bool, Error> {
    match v {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        _ => Err(bad(key, v, "on, off")),
    }
}

/// Parses `512M`, `4G`, `1T`, `65536K` or plain bytes (binary units): the
/// workspace's one size grammar, `hostmem::parse_size`.
pub fn parse_size(key: &str, v: &str) -> Result<u64, Error> {
    let valid = "a byte count with optional K, M, G or T suffix (binary), e.g. 4G";
    hostmem::parse_size(v).map_err(|_| bad(key, v, valid))
}

impl MemoryConfig {
    /// Parses a cloud-hypervisor style option string, e.g.
    /// `size=4G,hugepages=on,hugepage_size=2M,prefault=on,prezero=auto`.
    ///
    /// Defaults: `size=512M,hugepages=off,thp=on,prefault=off,prezero=auto,
    /// prefault_method=auto,threads=0`. `file=` implies hugetlbfs backing.
    /// Every bad key or value is an error naming it and the valid choices.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let mut cfg = MemoryConfig::default();
        let mut hugepages = false;
        let mut page: Option<HugePageSize> = None;
        let mut file: Option<PathBuf> = None;
        let mut thp: Option<bool> = None;
        let mut pool: Option<PathBuf> = None;
        let mut seen: Vec<&str> = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| bad(item, "", format!("key=value with key one of: {KEYS}")))?;
            if seen.contains(&k) {
                return Err(bad(k, v, "each key at most once"));
            }
            seen.push(k);
            match k {
                "size" => cfg.size = parse_size(k, v)?,
                "hugepages" => hugepages = on_off(k, v)?,
                "hugepage_size" => {
                    page = Some(match v.to_ascii_uppercase().as_str() {
                        "2M" | "2MB" | "2048K" => HugePageSize::Size2M,
                        "1G" | "1GB" | "1024M" => HugePageSize::Size1G,
                        _ => return Err(bad(k, v, "2M, 1G")),
                    })
                }
                "file" => {
                    if v.is_empty() {
                        return Err(bad(k, v, "a path on a hugetlbfs mount"));
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
                        _ => return Err(bad(k, v, "auto, nt, populate")),
                    }
                }
                "prezero" if v == "pool" || v.starts_with("pool:") => {
                    let socket = v
                        .strip_prefix("pool:")
                        .unwrap_or(crate::DEFAULT_POOL_SOCKET);
                    if socket.is_empty() {
                        return Err(bad(k, v, "pool or pool:SOCKET (the pool daemon's socket)"));
                    }
                    pool = Some(PathBuf::from(socket));
                    cfg.prezero = Prezero::Engine(prezero::Choice::Auto);
                }
                "prezero" => {
                    cfg.prezero = if v == "off" {
                        Prezero::Off
                    } else {
                        Prezero::Engine(prezero::Choice::from_str(v).map_err(|e| match e {
                            prezero::Error::UnknownBackend { valid, .. } => {
                                bad(k, v, format!("off, {valid}"))
                            }
                            other => bad(k, v, other.to_string()),
                        })?)
                    }
                }
                "threads" => {
                    cfg.threads = v
                        .parse()
                        .map_err(|_| bad(k, v, "a thread count, 0 = all CPUs"))?
                }
                _ => return Err(bad(k, v, format!("a known key: {KEYS}"))),
            }
        }
        if let (Some(f), false, true) = (&file, hugepages, seen.contains(&"hugepages")) {
            return Err(bad(
                "file",
                &f.display().to_string(),
                "file= needs hugepages=on (it must be on hugetlbfs)",
            ));
        }
        let hugepages = hugepages || file.is_some();
        if let (Some(p), false) = (page, hugepages) {
            return Err(bad(
                "hugepage_size",
                p.name(),
                "hugepage_size= needs hugepages=on",
            ));
        }
        if hugepages && thp == Some(true) {
            return Err(bad(
                "thp",
                "on",
                "thp=on only with hugepages=off (hugetlb pages are already huge)",
            ));
        }
        if let (Some(_), Some(f)) = (&pool, &file) {
            return Err(bad(
                "file",
                &f.display().to_string(),
                "file= and prezero=pool exclude each other (the pool owns the memory)",
            ));
        }
        if let (Some(_), Some(t)) = (&pool, thp) {
            return Err(bad(
                "thp",
                if t { "on" } else { "off" },
                "thp= does not apply to prezero=pool (the pool's page size does)",
            ));
        }
        let page = page.unwrap_or(HugePageSize::Size2M);
        if let Some(socket) = pool {
            cfg.backing = Backing::Pool {
                socket,
                page: hugepages.then_some(page),
            };
            if !cfg.size.is_multiple_of(cfg.backing.page_bytes()) {
                return Err(Error::NotHugeAligned {
                    what: "size".into(),
                    value: cfg.size,
                    page: page.name(),
                });
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
            if cfg.size % p.bytes() != 0 {
                return Err(Error::NotHugeAligned {
                    what: "size".into(),
                    value: cfg.size,
                    page: p.name(),
                });
            }
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let c = MemoryConfig::parse("").unwrap();
        assert_eq!(c, MemoryConfig::default());
        assert_eq!(c.size, 512 << 20);
        assert!(!c.prefault);
        assert_eq!(c.prezero, Prezero::Engine(prezero::Choice::Auto));
    }

    #[test]
    fn full_string() {
        let c = MemoryConfig::parse(
            "size=4G,hugepages=on,hugepage_size=2M,prefault=on,prezero=auto,prefault_method=nt,threads=2",
        )
        .unwrap();
        assert_eq!(c.size, 4 << 30);
        assert_eq!(c.backing, Backing::MemfdHugetlb(HugePageSize::Size2M));
        assert!(c.prefault);
        assert_eq!(c.prefault_method, PrefaultMethod::Nt);
        assert_eq!(c.threads, 2);
        let c = MemoryConfig::parse("size=2G,file=/dev/hugepages/vm0,hugepage_size=1G").unwrap();
        assert_eq!(
            c.backing,
            Backing::HugetlbfsFile {
                path: "/dev/hugepages/vm0".into(),
                page: HugePageSize::Size1G
            }
        );
        let c = MemoryConfig::parse("size=1024M,thp=off,prezero=off").unwrap();
        assert_eq!(c.backing, Backing::Anonymous { thp: false });
        assert_eq!(c.prezero, Prezero::Off);
        assert_eq!(c.backing.page_shift(), 12);
    }

    #[test]
    fn pool() {
        let c = MemoryConfig::parse("size=4G,hugepages=on,prezero=pool").unwrap();
        assert_eq!(
            c.backing,
            Backing::Pool {
                socket: pool::cli::DEFAULT_SOCKET.into(),
                page: Some(HugePageSize::Size2M)
            }
        );
        assert_eq!(c.prezero, Prezero::Engine(prezero::Choice::Auto));
        assert_eq!((c.backing.page_shift(), c.backing.hugepage()), (21, None));
        assert_eq!(c.backing.page_bytes(), 2 << 20);
        let c = MemoryConfig::parse("size=64M,prezero=pool:/tmp/p.sock").unwrap();
        assert_eq!(
            c.backing,
            Backing::Pool {
                socket: "/tmp/p.sock".into(),
                page: None
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
            ("prezero=fast", "off, auto"),
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
            let e = MemoryConfig::parse(s).unwrap_err().to_string();
            assert!(e.contains(needle), "{s}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let e = MemoryConfig::parse("size=3M,hugepages=on")
            .unwrap_err()
            .to_string();
        assert!(e.contains("multiple of 2M") && e.contains("size="), "{e}");
        let e = MemoryConfig::parse("size=3G,hugepages=on,hugepage_size=1G");
        assert!(e.is_ok());
    }

    /// The timeline's `prezero.backing` names: one word per size, as in
    /// `prefault_bench` and docs/vmm.md (not serde's `anon4_k`).
    #[test]
    fn backing_kind_names() {
        for (cfg, name) in [
            ("thp=off", "anon_4k"),
            ("thp=on", "anon_thp"),
            ("hugepages=on", "hugetlb_2m"),
            ("size=1G,hugepages=on,hugepage_size=1G", "hugetlb_1g"),
        ] {
            let kind = MemoryConfig::parse(cfg).unwrap().backing.kind();
            assert_eq!(serde_json::to_value(kind).unwrap(), name, "{cfg}");
        }
        assert_eq!(serde_json::to_value(BackingKind::Pool).unwrap(), "pool");
    }
}
