//! Guest memory configuration: what backs guest RAM and how it is
//! prepared. Its command-line spelling (`--memory size=4G,...`) is the
//! `options` crate's (`options::memory`).

use std::path::PathBuf;

use hostmem::PageSize;

use crate::Error;

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
    /// The page must be a hugetlb size: [`Backing::check`] refuses 4K.
    MemfdHugetlb(PageSize),
    /// A file on a hugetlbfs mount. A directory gets a fresh file, created
    /// `O_EXCL` and unlinked at once; a named file is locked, truncated to 0
    /// and re-grown so no earlier content survives.
    HugetlbfsFile {
        /// File or directory on hugetlbfs.
        path: PathBuf,
        /// The mount's page size (a hugetlb size; [`Backing::check`]
        /// refuses 4K).
        page: PageSize,
    },
    /// Memory leased from a `zerostart pool` daemon (`prezero=pool[:SOCKET]`):
    /// populated and known zero before the lease, so the VM needs no
    /// prefault and the hint covers it like fresh memory. Hugepages are
    /// the pool's, reserved when the pool started.
    Pool {
        /// The pool's socket.
        socket: PathBuf,
        /// The pool's page size (4K for a test-mode pool).
        page: PageSize,
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
            Backing::Pool { page, .. } => page.shift(),
        }
    }

    /// The hugetlb page size this VM must reserve itself, if hugetlb-backed
    /// (`None` for pool memory: the pool reserved it; see
    /// [`Backing::page_bytes`]).
    pub fn hugepage(&self) -> Option<PageSize> {
        match self {
            Backing::Anonymous { .. } | Backing::Pool { .. } => None,
            Backing::MemfdHugetlb(p) | Backing::HugetlbfsFile { page: p, .. } => Some(*p),
        }
    }

    /// Granularity guest RAM regions must be aligned to: the hugepage size
    /// of hugetlb and pool memory, else 4 KiB.
    pub fn page_bytes(&self) -> u64 {
        match self {
            Backing::Pool { page, .. } => page.bytes(),
            b => b.hugepage().map_or(4096, |p| p.bytes()),
        }
    }

    /// Refuses what no host can map: a hugetlb backing with 4 KiB pages
    /// (hugetlb pages are 2M or 1G). `options` never builds one, and
    /// [`crate::GuestRam::create`] calls this before anything is mapped, so
    /// a hand-built `Backing` cannot reach the kernel either.
    pub fn check(&self) -> Result<(), Error> {
        match self {
            Backing::MemfdHugetlb(p) | Backing::HugetlbfsFile { page: p, .. } => {
                check_huge(*p).map(|_| ())
            }
            Backing::Anonymous { .. } | Backing::Pool { .. } => Ok(()),
        }
    }

    /// Short name for reports and the prefault table.
    pub fn kind(&self) -> BackingKind {
        match self {
            Backing::Anonymous { thp: false } => BackingKind::Anon4K,
            Backing::Anonymous { thp: true } => BackingKind::AnonThp,
            Backing::MemfdHugetlb(PageSize::Size1G)
            | Backing::HugetlbfsFile {
                page: PageSize::Size1G,
                ..
            } => BackingKind::Hugetlb1G,
            // 2M (4K is refused by `Backing::check` before any memory
            // exists, so no report ever names it).
            Backing::MemfdHugetlb(_) | Backing::HugetlbfsFile { .. } => BackingKind::Hugetlb2M,
            Backing::Pool { .. } => BackingKind::Pool,
        }
    }
}

/// `page` if it is a hugetlb size, else the one-line error: where guest RAM
/// is hugetlb-backed, 4K is not a choice.
pub fn check_huge(page: PageSize) -> Result<PageSize, Error> {
    if page.is_huge() {
        Ok(page)
    } else {
        Err(Error::NotHugePage { page: page.name() })
    }
}

/// The backing classes the prefault measurement distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackingKind {
    /// Anonymous, 4 KiB pages.
    Anon4K,
    /// Anonymous with THP.
    AnonThp,
    /// hugetlb 2 MiB.
    Hugetlb2M,
    /// hugetlb 1 GiB.
    Hugetlb1G,
    /// Leased from a `zerostart pool`.
    Pool,
}

impl BackingKind {
    /// `anon_4k`, `anon_thp`, `hugetlb_2m`, `hugetlb_1g`, `pool`: the row
    /// names of `prefault_bench` and the timeline's `prezero.backing`.
    pub const fn name(self) -> &'static str {
        match self {
            BackingKind::Anon4K => "anon_4k",
            BackingKind::AnonThp => "anon_thp",
            BackingKind::Hugetlb2M => "hugetlb_2m",
            BackingKind::Hugetlb1G => "hugetlb_1g",
            BackingKind::Pool => "pool",
        }
    }
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
