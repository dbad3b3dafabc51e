//! Sizes on the command line and the memory the machine can give.

pub use hostmem::{human, mem_available};

#[cfg(test)]
mod tests {
    use super::*;

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
