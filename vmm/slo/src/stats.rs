//! Percentiles and per-phase summaries.
//!
//! Percentiles use linear interpolation between closest ranks (the
//! "R-7"/NumPy default): for sorted samples `x[0..n]`, `p` in 0..=100,
//! `h = (n - 1) * p / 100`, result `x[floor h] + (h - floor h) *
//! (x[floor h + 1] - x[floor h])`. With few repetitions a high percentile
//! therefore lies between the two largest samples rather than being the
//! maximum itself; `max` is reported separately.

use serde::Serialize;

/// The `p`th percentile (0..=100) of `samples`; `None` if empty or `p` is
/// out of range or any sample is not finite.
pub fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    if samples.is_empty() || !(0.0..=100.0).contains(&p) || samples.iter().any(|s| !s.is_finite()) {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let h = (v.len() - 1) as f64 * p / 100.0;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(v.len() - 1);
    Some(v[lo] + (h - lo as f64) * (v[hi] - v[lo]))
}

/// Summary of one phase over the repetitions that reached it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Samples.
    pub n: usize,
    /// Smallest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
}

impl Summary {
    /// Summarizes `samples` (ms); `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        let p = |q| percentile(samples, q);
        Some(Summary {
            n: samples.len(),
            min: p(0.0)?,
            p50: p(50.0)?,
            p90: p(90.0)?,
            p95: p(95.0)?,
            p99: p(99.0)?,
            max: p(100.0)?,
            mean: samples.iter().sum::<f64>() / samples.len() as f64,
        })
    }

    /// The named statistic (as written in SLOs).
    pub fn get(&self, stat: crate::config::Stat) -> f64 {
        use crate::config::Stat;
        match stat {
            Stat::Min => self.min,
            Stat::P50 => self.p50,
            Stat::P90 => self.p90,
            Stat::P95 => self.p95,
            Stat::P99 => self.p99,
            Stat::Max => self.max,
            Stat::Mean => self.mean,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_between_ranks() {
        let v = [15.0, 20.0, 35.0, 40.0, 50.0];
        assert_eq!(percentile(&v, 0.0), Some(15.0));
        assert_eq!(percentile(&v, 50.0), Some(35.0));
        assert_eq!(percentile(&v, 100.0), Some(50.0));
        // h = 4 * 0.4 = 1.6 -> 20 + 0.6 * 15 = 29
        assert!((percentile(&v, 40.0).unwrap() - 29.0).abs() < 1e-9);
        // h = 4 * 0.95 = 3.8 -> 40 + 0.8 * 10 = 48
        assert!((percentile(&v, 95.0).unwrap() - 48.0).abs() < 1e-9);
    }

    #[test]
    fn order_does_not_matter_and_edges_are_none() {
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[1.0], 101.0), None);
        assert_eq!(percentile(&[1.0, f64::NAN], 50.0), None);
    }

    #[test]
    fn matches_numpy_linear() {
        // numpy.percentile(range(1, 101), [90, 99]) == [90.1, 99.01]
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert!((percentile(&v, 90.0).unwrap() - 90.1).abs() < 1e-9);
        assert!((percentile(&v, 99.0).unwrap() - 99.01).abs() < 1e-9);
    }

    #[test]
    fn summary() {
        let s = Summary::of(&[10.0, 30.0, 20.0]).unwrap();
        assert_eq!(
            (s.n, s.min, s.p50, s.max, s.mean),
            (3, 10.0, 20.0, 30.0, 20.0)
        );
        assert!(Summary::of(&[]).is_none());
    }
}
