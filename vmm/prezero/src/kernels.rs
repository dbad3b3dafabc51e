//! The single-threaded store loops, one per backend.
//!
//! Every loop is exact: it writes zeros to `[ptr, ptr + len)` and nothing
//! else. Vector and line-granular backends align the start with plain
//! stores (the head), run their instruction over the 64-byte aligned body,
//! and finish the tail with plain stores. Weakly ordered stores
//! (non-temporal, `clzero`, `movdir64b`) are fenced with `sfence` before
//! returning, so a caller that publishes "this range is zero" afterwards
//! (for example the pre-zeroed hint) never races the write-combining
//! buffers.

use crate::Backend;

/// Cache line and body alignment for the line-granular loops.
pub(crate) const LINE: usize = 64;

/// Plain zeroing with ordinary stores (`memset`).
///
/// # Safety
/// `[ptr, ptr + len)` must be valid for writes.
#[inline]
unsafe fn plain(ptr: *mut u8, len: usize) {
    core::ptr::write_bytes(ptr, 0, len);
}

/// Splits `[ptr, ptr+len)` into head, 64-byte aligned body (a multiple of
/// 64 bytes) and tail lengths.
#[inline]
pub(crate) fn split(ptr: usize, len: usize) -> (usize, usize, usize) {
    let head = ((LINE - ptr % LINE) % LINE).min(len);
    let body = (len - head) / LINE * LINE;
    (head, body, len - head - body)
}

/// Runs `body` over the aligned middle and plain stores around it.
///
/// # Safety
/// `[ptr, ptr + len)` must be valid for writes; `body` must zero exactly
/// the 64-byte aligned range it is given.
#[inline]
unsafe fn with_head_tail(ptr: *mut u8, len: usize, body: unsafe fn(*mut u8, usize)) {
    let (head, mid, tail) = split(ptr as usize, len);
    plain(ptr, head);
    if mid > 0 {
        body(ptr.add(head), mid);
    }
    plain(ptr.add(head + mid), tail);
}

/// Zeroes `[ptr, ptr + len)` with `backend`.
///
/// # Safety
/// `[ptr, ptr + len)` must be valid for writes and `backend` must be
/// available on this CPU ([`Backend::is_available`]).
pub(crate) unsafe fn zero(backend: Backend, ptr: *mut u8, len: usize) {
    if len == 0 {
        return;
    }
    match backend {
        Backend::Portable => plain(ptr, len),
        #[cfg(target_arch = "x86_64")]
        Backend::RepStosb => x86::rep_stosb(ptr, len),
        #[cfg(target_arch = "x86_64")]
        Backend::Movnti => with_head_tail(ptr, len, x86::movnti),
        #[cfg(target_arch = "x86_64")]
        Backend::Avx2Nt => with_head_tail(ptr, len, x86::avx2_nt),
        #[cfg(target_arch = "x86_64")]
        Backend::Avx512Nt => with_head_tail(ptr, len, x86::avx512_nt),
        #[cfg(target_arch = "x86_64")]
        Backend::Movdir64b => with_head_tail(ptr, len, x86::movdir64b),
        #[cfg(target_arch = "x86_64")]
        Backend::Clzero => with_head_tail(ptr, len, x86::clzero),
        #[cfg(not(target_arch = "x86_64"))]
        _ => unreachable!("only Portable is available off x86_64"),
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::asm;
    use core::arch::x86_64::*;

    use super::LINE;

    /// Store fence: orders the weakly ordered stores before every later
    /// store (AMD APM: CLZERO and MOVNT* need SFENCE or stronger).
    #[inline]
    fn sfence() {
        // SAFETY: sfence is part of SSE, baseline on x86_64.
        unsafe { _mm_sfence() }
    }

    /// `rep stosb` over the whole range (it handles any alignment itself).
    ///
    /// # Safety
    /// Range valid for writes; CPU has ERMS (for speed; correct anyway).
    pub(super) unsafe fn rep_stosb(ptr: *mut u8, len: usize) {
        // The direction flag is clear on entry to asm! (Rust guarantees it),
        // so this stores forward.
        asm!(
            "rep stosb",
            inout("rcx") len => _,
            inout("rdi") ptr => _,
            in("al") 0u8,
            options(nostack, preserves_flags)
        );
    }

    /// # Safety
    /// `ptr` 64-byte aligned, `len` a multiple of 64, range valid.
    #[target_feature(enable = "sse2")]
    pub(super) unsafe fn movnti(ptr: *mut u8, len: usize) {
        let mut p = ptr as *mut i64;
        let end = ptr.add(len) as *mut i64;
        while p < end {
            _mm_stream_si64(p, 0);
            _mm_stream_si64(p.add(1), 0);
            _mm_stream_si64(p.add(2), 0);
            _mm_stream_si64(p.add(3), 0);
            _mm_stream_si64(p.add(4), 0);
            _mm_stream_si64(p.add(5), 0);
            _mm_stream_si64(p.add(6), 0);
            _mm_stream_si64(p.add(7), 0);
            p = p.add(LINE / 8);
        }
        sfence();
    }

    /// # Safety
    /// `ptr` 64-byte aligned, `len` a multiple of 64, range valid, AVX2.
    #[target_feature(enable = "avx,avx2")]
    pub(super) unsafe fn avx2_nt(ptr: *mut u8, len: usize) {
        let z = _mm256_setzero_si256();
        let mut p = ptr as *mut __m256i;
        let end = ptr.add(len) as *mut __m256i;
        // Four lines per iteration while they fit, then single lines.
        while p.add(8) <= end {
            _mm256_stream_si256(p, z);
            _mm256_stream_si256(p.add(1), z);
            _mm256_stream_si256(p.add(2), z);
            _mm256_stream_si256(p.add(3), z);
            _mm256_stream_si256(p.add(4), z);
            _mm256_stream_si256(p.add(5), z);
            _mm256_stream_si256(p.add(6), z);
            _mm256_stream_si256(p.add(7), z);
            p = p.add(8);
        }
        while p < end {
            _mm256_stream_si256(p, z);
            _mm256_stream_si256(p.add(1), z);
            p = p.add(2);
        }
        sfence();
    }

    /// # Safety
    /// `ptr` 64-byte aligned, `len` a multiple of 64, range valid, AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn avx512_nt(ptr: *mut u8, len: usize) {
        let z = _mm512_setzero_si512();
        let mut p = ptr as *mut __m512i;
        let end = ptr.add(len) as *mut __m512i;
        while p.add(4) <= end {
            _mm512_stream_si512(p, z);
            _mm512_stream_si512(p.add(1), z);
            _mm512_stream_si512(p.add(2), z);
            _mm512_stream_si512(p.add(3), z);
            p = p.add(4);
        }
        while p < end {
            _mm512_stream_si512(p, z);
            p = p.add(1);
        }
        sfence();
    }

    /// A 64-byte aligned line of zeros: the source operand of `movdir64b`.
    #[repr(C, align(64))]
    struct ZeroLine([u8; LINE]);
    static ZERO_LINE: ZeroLine = ZeroLine([0; LINE]);

    /// # Safety
    /// `ptr` 64-byte aligned (movdir64b faults otherwise), `len` a multiple
    /// of 64, range valid, CPU has MOVDIR64B.
    pub(super) unsafe fn movdir64b(ptr: *mut u8, len: usize) {
        let src = ZERO_LINE.0.as_ptr();
        let mut p = ptr;
        let end = ptr.add(len);
        while p < end {
            asm!(
                "movdir64b {dst}, zmmword ptr [{src}]",
                dst = in(reg) p,
                src = in(reg) src,
                options(nostack, preserves_flags)
            );
            p = p.add(LINE);
        }
        sfence();
    }

    /// # Safety
    /// `ptr` 64-byte aligned (clzero clears the whole line holding the
    /// address), `len` a multiple of 64, range valid, CPU has CLZERO with
    /// 64-byte lines.
    pub(super) unsafe fn clzero(ptr: *mut u8, len: usize) {
        let mut p = ptr;
        let end = ptr.add(len);
        while p < end {
            asm!("clzero", in("rax") p, options(nostack, preserves_flags));
            p = p.add(LINE);
        }
        sfence();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_exactly() {
        for ptr in 0..130usize {
            for len in 0..300usize {
                let (h, b, t) = split(ptr, len);
                assert_eq!(h + b + t, len);
                assert_eq!(b % LINE, 0);
                if b > 0 {
                    assert_eq!((ptr + h) % LINE, 0);
                }
                assert!(t < LINE || b == 0);
            }
        }
    }
}
