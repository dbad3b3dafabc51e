//! Criterion benchmarks: `auto` (all CPUs) against the C library's
//! single-threaded `memset` (what a VMM without this engine does) on 4 KiB,
//! 2 MiB and 1 GiB extents of a warm buffer. `zerostart bench zero`
//! compares per thread count and against kernel prefault.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use prezero::{Choice, Zeroer};
use std::hint::black_box;
use std::time::Duration;

fn extent(c: &mut Criterion, name: &str, len: usize, samples: usize) {
    let mut buf = vec![1u8; len];
    let z = Zeroer::new(Choice::Auto).expect("auto is always available");
    // Calibrate outside the measurement.
    let _ = prezero::auto_backend();
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Bytes(len as u64));
    g.sample_size(samples);
    if len >= 1 << 30 {
        g.warm_up_time(Duration::from_secs(1));
        g.measurement_time(Duration::from_secs(5));
    }
    g.bench_function(BenchmarkId::new("auto", len), |b| {
        b.iter(|| z.zero_slice(black_box(&mut buf)))
    });
    g.bench_function(BenchmarkId::new("memset", len), |b| {
        b.iter(|| {
            // SAFETY: our own buffer.
            unsafe { libc::memset(black_box(buf.as_mut_ptr()).cast(), 0, len) };
        })
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    extent(c, "zero_4KiB", 4 << 10, 100);
    extent(c, "zero_2MiB", 2 << 20, 50);
    extent(c, "zero_1GiB", 1 << 30, 10);
}

criterion_group!(zero, benches);
criterion_main!(zero);
