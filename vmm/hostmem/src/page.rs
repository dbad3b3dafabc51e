//! The one page-size type.

use std::str::FromStr;

/// A page size of host memory: 4 KiB base pages (shmem or anonymous) or a
/// hugetlb size. One type for the pool's `--page`, guest RAM's
/// `hugepage_size=` and the benchmarks, so a size is spelled, parsed and
/// turned into sysfs paths and `memfd_create` flags in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum PageSize {
    /// 4 KiB base pages.
    #[serde(rename = "4K")]
    Size4K,
    /// 2 MiB hugetlb pages.
    #[serde(rename = "2M")]
    Size2M,
    /// 1 GiB hugetlb pages.
    #[serde(rename = "1G")]
    Size1G,
}

/// A string that is no page size; the message names the valid ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a page size; use 4K, 2M or 1G")]
pub struct PageSizeError(pub String);

impl PageSize {
    /// Every size, smallest first.
    pub const ALL: [PageSize; 3] = [PageSize::Size4K, PageSize::Size2M, PageSize::Size1G];

    /// Bytes per page.
    pub const fn bytes(self) -> u64 {
        1 << self.shift()
    }

    /// log2 of [`PageSize::bytes`] (the hint's `page_shift`).
    pub const fn shift(self) -> u8 {
        match self {
            PageSize::Size4K => 12,
            PageSize::Size2M => 21,
            PageSize::Size1G => 30,
        }
    }

    /// `4K`, `2M` or `1G`: the spelling of options, metrics and messages.
    pub const fn name(self) -> &'static str {
        match self {
            PageSize::Size4K => "4K",
            PageSize::Size2M => "2M",
            PageSize::Size1G => "1G",
        }
    }

    /// Whether this is a hugetlb size.
    pub const fn is_huge(self) -> bool {
        !matches!(self, PageSize::Size4K)
    }

    /// The size whose shift is `shift`, if any.
    pub fn from_shift(shift: u8) -> Option<PageSize> {
        PageSize::ALL.into_iter().find(|p| p.shift() == shift)
    }

    /// `memfd_create` flags for this size (none for 4K).
    pub fn mfd_flags(self) -> libc::c_uint {
        match self {
            PageSize::Size4K => 0,
            p => libc::MFD_HUGETLB | (u32::from(p.shift()) << libc::MFD_HUGE_SHIFT),
        }
    }

    /// `mmap` flags for an anonymous hugetlb mapping of this size (none
    /// for 4K).
    pub fn map_flags(self) -> libc::c_int {
        match self {
            PageSize::Size4K => 0,
            p => libc::MAP_HUGETLB | (libc::c_int::from(p.shift()) << libc::MAP_HUGE_SHIFT),
        }
    }
}

impl std::fmt::Display for PageSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PageSize {
    type Err = PageSizeError;

    /// `4K`/`4KB`/`4096`, `2M`/`2MB`/`2048K`, `1G`/`1GB`/`1024M`, any case.
    fn from_str(s: &str) -> Result<Self, PageSizeError> {
        match s.trim().to_ascii_uppercase().as_str() {
            "4K" | "4KB" | "4096" => Ok(PageSize::Size4K),
            "2M" | "2MB" | "2048K" => Ok(PageSize::Size2M),
            "1G" | "1GB" | "1024M" => Ok(PageSize::Size1G),
            _ => Err(PageSizeError(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_names_and_flags() {
        for p in PageSize::ALL {
            assert_eq!(p.bytes(), 1 << p.shift());
            assert_eq!(p.name().parse::<PageSize>(), Ok(p));
            assert_eq!(PageSize::from_shift(p.shift()), Some(p));
            assert_eq!(p.to_string(), p.name());
            assert_eq!(
                serde_json::to_string(&p).unwrap(),
                format!("\"{}\"", p.name())
            );
        }
        assert_eq!("2mb".parse(), Ok(PageSize::Size2M));
        assert_eq!("1024M".parse(), Ok(PageSize::Size1G));
        assert_eq!(
            "3M".parse::<PageSize>().unwrap_err().to_string(),
            "'3M' is not a page size; use 4K, 2M or 1G"
        );
        assert_eq!(PageSize::Size4K.mfd_flags(), 0);
        assert_eq!(
            PageSize::Size2M.mfd_flags(),
            libc::MFD_HUGETLB | libc::MFD_HUGE_2MB
        );
        assert_eq!(
            PageSize::Size1G.map_flags(),
            libc::MAP_HUGETLB | libc::MAP_HUGE_1GB
        );
        assert!(!PageSize::Size4K.is_huge() && PageSize::Size1G.is_huge());
        assert_eq!(PageSize::from_shift(13), None);
    }
}
