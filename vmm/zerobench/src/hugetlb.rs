//! Temporarily reserving 2 MiB hugetlb pages for the hugetlb populate
//! measurement, and always giving them back: `hostmem`'s reservation
//! guard (drop: normal end, errors, panics) plus a Ctrl-C / SIGTERM
//! handler here, since the benchmark is a program of its own.

use hostmem::PageSize;

/// Installs (once) a Ctrl-C / SIGTERM handler that gives reserved pages
/// back and exits 130. If the host program already owns those signals, the
/// drop guard still covers every other path.
fn install_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            let added = hostmem::hugepages::give_back_all();
            if added > 0 {
                eprintln!("zerobench: interrupted; gave back {added} reserved hugepages");
            }
            std::process::exit(130);
        });
    });
}

/// Enough free 2 MiB hugepages for one mapping, reserved for as long as
/// it lives (growing the pool only when `may_grow`).
pub(crate) fn reserve(
    pages: u64,
    may_grow: bool,
) -> Result<hostmem::hugepages::Reservation, String> {
    if may_grow {
        install_handler();
    }
    hostmem::hugepages::Reservation::acquire(PageSize::Size2M, pages, may_grow)
}
