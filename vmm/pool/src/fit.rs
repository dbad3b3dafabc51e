//! Which regions a lease takes: one rule, used by the daemon to grant a
//! lease and by the launcher's `--dry-run` to say what would be granted.
//!
//! Each piece of a lease is the smallest free region that holds the rest
//! of it, or, when none does, the largest free region (ties: the lowest
//! index). So a lease that fits one region takes the best-fitting one (a
//! 1 GiB guest on a pool of 1, 3 and 5 GiB regions holds 1 GiB, not 5),
//! and one larger than every region takes as few pieces as the free
//! regions allow, its last piece again the best fit. On a pool of one
//! region size this is "the first `ceil(len / region)` free regions", the
//! rule from before pools had several sizes.

/// A free region: its index and bytes.
pub type Free = (usize, u64);

/// The regions, in guest order, a lease of `len` bytes takes from `free`
/// when the client maps at most `max_pieces` files, with the lease's bytes
/// in each (a whole region, except perhaps the last piece). `None` when
/// `max_pieces` of the free regions do not hold `len` (or `len` is 0).
pub fn fit(free: &[Free], len: u64, max_pieces: usize) -> Option<Vec<Free>> {
    if len == 0 {
        return None;
    }
    let mut left = free.to_vec();
    // Smallest first, lowest index first among equals: the first that
    // holds the rest is the best fit, the last is the largest.
    left.sort_by_key(|&(i, b)| (b, i));
    let mut rest = len;
    let mut pieces = Vec::new();
    while rest > 0 && pieces.len() < max_pieces && !left.is_empty() {
        let k = match left.iter().position(|&(_, b)| b >= rest) {
            Some(k) => k,
            // None holds the rest: the largest, the lowest index of them.
            None => {
                let largest = left[left.len() - 1].1;
                left.iter()
                    .position(|&(_, b)| b == largest)
                    .expect("present")
            }
        };
        let (i, b) = left.remove(k);
        let n = b.min(rest);
        pieces.push((i, n));
        rest -= n;
    }
    (rest == 0).then_some(pieces)
}

/// The most bytes `max_pieces` of these regions hold: what no lease may
/// exceed however many are free.
pub fn capacity(sizes: &[u64], max_pieces: usize) -> u64 {
    let mut s = sizes.to_vec();
    s.sort_unstable_by(|a, b| b.cmp(a));
    s.iter().take(max_pieces).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    fn regions(sizes: &[u64]) -> Vec<Free> {
        sizes.iter().copied().enumerate().collect()
    }

    #[test]
    fn one_size_takes_the_first_regions_in_order() {
        let r = regions(&[G; 4]);
        assert_eq!(fit(&r, G, 1), Some(vec![(0, G)]));
        assert_eq!(fit(&r, 1, 1), Some(vec![(0, 1)]));
        assert_eq!(
            fit(&r, 3 * G - 4096, 4),
            Some(vec![(0, G), (1, G), (2, G - 4096)])
        );
        assert_eq!(fit(&r, G + 1, 1), None);
        assert_eq!(fit(&r, 5 * G, 8), None);
        assert_eq!(fit(&r, 0, 8), None);
        assert_eq!(fit(&[], G, 8), None);
        // Free regions need not be contiguous; order is by index.
        assert_eq!(fit(&[(3, G), (1, G)], 2 * G, 2), Some(vec![(1, G), (3, G)]));
    }

    #[test]
    fn one_piece_is_the_best_fit() {
        let r = regions(&[5 * G, G, 3 * G, G]);
        assert_eq!(fit(&r, G, 1), Some(vec![(1, G)]));
        assert_eq!(fit(&r, 2 * G, 1), Some(vec![(2, 2 * G)]));
        assert_eq!(fit(&r, 3 * G, 1), Some(vec![(2, 3 * G)]));
        assert_eq!(fit(&r, 4 * G, 1), Some(vec![(0, 4 * G)]));
        assert_eq!(fit(&r, 5 * G, 1), Some(vec![(0, 5 * G)]));
        assert_eq!(fit(&r, 5 * G + 1, 1), None);
        // With more pieces allowed, one region still wins when one holds it.
        assert_eq!(fit(&r, 3 * G, 8), Some(vec![(2, 3 * G)]));
    }

    #[test]
    fn several_pieces_take_the_largest_then_the_best_fit() {
        let r = regions(&[5 * G, G, 3 * G, G]);
        assert_eq!(fit(&r, 6 * G, 8), Some(vec![(0, 5 * G), (1, G)]));
        assert_eq!(fit(&r, 7 * G, 8), Some(vec![(0, 5 * G), (2, 2 * G)]));
        assert_eq!(
            fit(&r, 10 * G, 8),
            Some(vec![(0, 5 * G), (2, 3 * G), (1, G), (3, G)])
        );
        assert_eq!(fit(&r, 10 * G, 3), None);
        assert_eq!(fit(&r, 10 * G + 1, 8), None);
        assert_eq!(capacity(&[5 * G, G, 3 * G, G], 3), 9 * G);
        assert_eq!(capacity(&[5 * G, G, 3 * G, G], 8), 10 * G);
        assert_eq!(capacity(&[G; 4], 1), G);
    }

    /// Whatever is free, a granted lease is exact: distinct free regions,
    /// each piece within its region, every piece but the last whole, the
    /// bytes adding up to the lease, no more pieces than allowed; and a
    /// refusal only when no choice of `max_pieces` regions could hold it.
    #[test]
    fn every_grant_is_exact_and_every_refusal_is_forced() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for _ in 0..20_000 {
            let n = next(7) as usize;
            let free: Vec<Free> = (0..n).map(|i| (i * 2, (1 + next(6)) * 4096)).collect();
            let max = 1 + next(4) as usize;
            let len = next(20 * 4096);
            let sizes: Vec<u64> = free.iter().map(|f| f.1).collect();
            match fit(&free, len, max) {
                Some(p) => {
                    assert!(p.len() <= max && !p.is_empty());
                    assert_eq!(p.iter().map(|x| x.1).sum::<u64>(), len);
                    for (k, &(i, b)) in p.iter().enumerate() {
                        let whole = free.iter().find(|f| f.0 == i).expect("a free region").1;
                        assert!(b <= whole && b > 0);
                        assert!(k + 1 == p.len() || b == whole, "{p:?}");
                        assert_eq!(p.iter().filter(|x| x.0 == i).count(), 1);
                    }
                }
                None => assert!(len == 0 || capacity(&sizes, max) < len),
            }
        }
    }
}
