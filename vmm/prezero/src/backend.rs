//! The zeroing backends: which store instruction family fills memory with
//! zeros, and whether this CPU has it.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use crate::Error;

/// A store-instruction family used to zero memory.
///
/// Each backend other than [`Backend::Portable`] runs CPU-specific
/// instructions; [`Backend::is_available`] checks CPUID first, and the crate
/// never executes a backend the CPU lacks (it returns
/// [`Error::Unavailable`] instead of dying with SIGILL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// `rep stosb`: microcoded string store, fast with ERMS/FSRM. Regular
    /// (cache-allocating) stores: best for buffers that are read soon.
    RepStosb,
    /// SSE2 `movnti` 8-byte non-temporal stores.
    Movnti,
    /// AVX2 `vmovntdq` with 32-byte ymm registers, non-temporal.
    Avx2Nt,
    /// AVX-512 `vmovntdq` with 64-byte zmm registers, non-temporal.
    Avx512Nt,
    /// `movdir64b`: 64-byte direct store of a zero line (Intel, CPUID 7 ECX
    /// bit 28), bypasses the cache.
    Movdir64b,
    /// AMD `clzero`: zeroes a whole cache line without reading it (CPUID
    /// 0x8000_0008 EBX bit 0).
    Clzero,
    /// `core::ptr::write_bytes` (the C library's `memset`): works on every
    /// architecture.
    Portable,
}

impl Backend {
    /// Every backend, in the order benchmarks list them.
    pub const ALL: [Backend; 7] = [
        Backend::RepStosb,
        Backend::Movnti,
        Backend::Avx2Nt,
        Backend::Avx512Nt,
        Backend::Movdir64b,
        Backend::Clzero,
        Backend::Portable,
    ];

    /// The stable name used on command lines and in benchmark JSON.
    pub fn name(self) -> &'static str {
        match self {
            Backend::RepStosb => "rep_stosb",
            Backend::Movnti => "movnti",
            Backend::Avx2Nt => "avx2_nt",
            Backend::Avx512Nt => "avx512_nt",
            Backend::Movdir64b => "movdir64b",
            Backend::Clzero => "clzero",
            Backend::Portable => "portable",
        }
    }

    /// Whether this CPU (and OS, for the vector state) can run the backend.
    ///
    /// Detected once per process: CPUID traps to the hypervisor in a VM
    /// (tens of µs each on the development machine), far more than
    /// zeroing a page.
    pub fn is_available(self) -> bool {
        static HAS: OnceLock<[bool; 7]> = OnceLock::new();
        HAS.get_or_init(|| Backend::ALL.map(cpu::has))[self as usize]
    }

    /// Whether the backend's stores bypass (or do not allocate in) the
    /// cache. Such stores do not evict the working set while zeroing GiBs
    /// and skip the read-for-ownership of each line, so they roughly double
    /// store bandwidth on large ranges; they are the wrong choice for small
    /// buffers that are read again soon (the data is not in cache then).
    pub fn is_non_temporal(self) -> bool {
        matches!(
            self,
            Backend::Movnti
                | Backend::Avx2Nt
                | Backend::Avx512Nt
                | Backend::Movdir64b
                | Backend::Clzero
        )
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// All backend names, comma separated, for error messages.
pub(crate) fn all_names() -> String {
    Backend::ALL
        .iter()
        .map(|b| b.name())
        .collect::<Vec<_>>()
        .join(", ")
}

impl FromStr for Backend {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Backend::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| Error::UnknownBackend {
                name: s.to_string(),
                valid: all_names(),
            })
    }
}

/// The backends this CPU can run, in [`Backend::ALL`] order.
pub fn available_backends() -> Vec<Backend> {
    Backend::ALL
        .into_iter()
        .filter(|b| b.is_available())
        .collect()
}

/// What the caller asks for: automatic selection or one fixed backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Pick per job: [`crate::auto_backend`] for large ranges, cache-friendly
    /// `rep stosb` below [`crate::small_threshold`].
    Auto,
    /// Always use this backend.
    Backend(Backend),
}

impl FromStr for Choice {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        if s == "auto" {
            return Ok(Choice::Auto);
        }
        s.parse::<Backend>()
            .map(Choice::Backend)
            .map_err(|_| Error::UnknownBackend {
                name: s.to_string(),
                valid: format!("auto, {}", all_names()),
            })
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Choice::Auto => f.write_str("auto"),
            Choice::Backend(b) => b.fmt(f),
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod cpu {
    use super::Backend;
    use core::arch::x86_64::{__cpuid, __cpuid_count};

    /// CPUID leaf 7 subleaf 0 ECX bit 28: MOVDIR64B.
    fn has_movdir64b() -> bool {
        // CPUID exists on every x86_64 CPU (safe since Rust 1.87); leaf 7
        // is only read when the maximum basic leaf covers it.
        __cpuid(0).eax >= 7 && (__cpuid_count(7, 0).ecx >> 28) & 1 == 1
    }

    /// CPUID leaf 7 subleaf 0 EBX bit 9: enhanced `rep movsb/stosb`.
    /// `rep stosb` runs on any x86 CPU, but without ERMS it is slow, so it
    /// only counts as a backend with it.
    fn has_erms() -> bool {
        __cpuid(0).eax >= 7 && (__cpuid_count(7, 0).ebx >> 9) & 1 == 1
    }

    /// CPUID 0x8000_0008 EBX bit 0: CLZERO. The instruction clears the
    /// cache line holding an address, so it is only exact when that line
    /// is the 64 bytes the body loop assumes: CPUID 1 EBX[15:8] (CLFLUSH
    /// line size in 8-byte units) must say 64.
    fn has_clzero() -> bool {
        // The extended leaf is range-checked first.
        let line = ((__cpuid(1).ebx >> 8) & 0xff) * 8;
        __cpuid(0x8000_0000).eax >= 0x8000_0008 && __cpuid(0x8000_0008).ebx & 1 == 1 && line == 64
    }

    pub(super) fn has(b: Backend) -> bool {
        match b {
            Backend::RepStosb => has_erms(),
            Backend::Movnti => std::arch::is_x86_feature_detected!("sse2"),
            Backend::Avx2Nt => std::arch::is_x86_feature_detected!("avx2"),
            Backend::Avx512Nt => std::arch::is_x86_feature_detected!("avx512f"),
            Backend::Movdir64b => has_movdir64b(),
            Backend::Clzero => has_clzero(),
            Backend::Portable => true,
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod cpu {
    use super::Backend;
    pub(super) fn has(b: Backend) -> bool {
        b == Backend::Portable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for b in Backend::ALL {
            assert_eq!(b.name().parse::<Backend>().unwrap(), b);
            assert_eq!(b.name().parse::<Choice>().unwrap(), Choice::Backend(b));
        }
        assert_eq!("auto".parse::<Choice>().unwrap(), Choice::Auto);
    }

    #[test]
    fn bad_name_lists_valid_names() {
        let e = "avx9000".parse::<Choice>().unwrap_err().to_string();
        assert!(
            e.contains("avx9000") && e.contains("auto") && e.contains("clzero"),
            "{e}"
        );
        let e = "auto".parse::<Backend>().unwrap_err().to_string();
        assert!(e.contains("rep_stosb") && !e.contains("auto,"), "{e}");
    }

    #[test]
    fn all_lists_every_variant_at_its_index() {
        for (i, b) in Backend::ALL.into_iter().enumerate() {
            assert_eq!(b as usize, i);
        }
    }

    #[test]
    fn portable_always_available() {
        assert!(Backend::Portable.is_available());
        assert!(available_backends().contains(&Backend::Portable));
        assert!(!Backend::Portable.is_non_temporal());
        assert!(!Backend::RepStosb.is_non_temporal());
    }
}
