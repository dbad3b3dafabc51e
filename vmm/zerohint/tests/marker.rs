//! The consumed-marker of docs/hint-abi.md "Lifetime", with the same
//! numbers as the kernel's KUnit case `zshint_test_marker`, so that both
//! sides agree on where the marker goes and what it looks like.

use zerohint::{consumed_marker, marker_state, Entry, MarkerState, MARKER_SIZE, PAGE_SIZE};

#[test]
fn marker_page_is_the_last_page_of_each_range() {
    assert_eq!(
        Entry::zeroed(0x100_0000, 0x20_0000, 21).marker_page(),
        0x11f_f000
    );
    assert_eq!(
        Entry::zeroed(0x4000_0000, 0x1000, 12).marker_page(),
        0x4000_0000
    );
}

#[test]
fn marker_bytes_and_states() {
    let m = consumed_marker(0xdead_beef);
    assert_eq!(&m, b"ZSUSED01\xef\xbe\xad\xde\0\0\0\0");
    let mut page = vec![0u8; PAGE_SIZE as usize];
    assert_eq!(marker_state(&page), MarkerState::Zero);
    page[..MARKER_SIZE].copy_from_slice(&m);
    assert_eq!(marker_state(&page), MarkerState::Consumed);
    // Any other byte, next to a marker or alone, is dirty.
    page[PAGE_SIZE as usize - 1] = 1;
    assert_eq!(marker_state(&page), MarkerState::Dirty);
    page.fill(0);
    page[2048] = 0x5a;
    assert_eq!(marker_state(&page), MarkerState::Dirty);
    page.fill(0);
    page[..8].copy_from_slice(b"ZSUSED02");
    assert_eq!(marker_state(&page), MarkerState::Dirty);
}
