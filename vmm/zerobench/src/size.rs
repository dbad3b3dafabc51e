//! Sizes on the command line and the memory the machine can give.

use crate::BenchError;

pub use hostmem::{human, mem_available};

/// Parses a size the way cloud-hypervisor does (the workspace's one
/// grammar, `hostmem::parse_size`): plain bytes, or a number with a
/// binary suffix `K`, `M`, `G` or `T` (case-insensitive, an optional
/// trailing `B`/`iB` is accepted): `4G`, `512M`, `1024K`, `4096`.
///
/// Zero, empty, fractional, negative and overflowing sizes are errors.
pub fn parse_size(s: &str) -> Result<u64, BenchError> {
    hostmem::parse_size(s).map_err(|_| BenchError::BadSize(s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4G").unwrap(), 4 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("1024K").unwrap(), 1 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2g").unwrap(), 2 << 30);
        assert_eq!(parse_size("1T").unwrap(), 1 << 40);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("64MB").unwrap(), 64 << 20);
        for bad in [
            "",
            "G",
            "0",
            "0M",
            "-1G",
            "1.5G",
            "4X",
            "abc",
            "4 G",
            "99999999999999999999",
            "16777216T",
            "12B",
        ] {
            let e = parse_size(bad).unwrap_err().to_string();
            assert!(
                e.contains("invalid size") && !e.contains('\n'),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(4 << 30), "4 GiB");
        assert_eq!(human(3 << 29), "1.5 GiB");
        assert_eq!(human(100), "100 B");
    }

    #[test]
    fn meminfo() {
        let t = "MemTotal:       24684084 kB\nMemAvailable:   24337648 kB\nHugePages_Free:  12\n";
        assert_eq!(hostmem::meminfo_kib(t, "MemAvailable"), Some(24337648));
        assert_eq!(hostmem::meminfo_kib(t, "HugePages_Free"), Some(12));
        assert_eq!(hostmem::meminfo_kib(t, "Mem"), None);
        assert!(mem_available().unwrap() > 0);
    }
}
