//! The costs behind the cache's hit-path design (BENCHMARKS.md, "The hit path's parts and
//! the re-arm poll"): reading the clock three ways, hashing a scope, cloning an `Arc`; and
//! what a reload task does once a second while its directory's watch is lost (`stat`).
//!
//! `cargo bench --bench probes`

use std::hash::{BuildHasher, Hasher};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use criterion::{Criterion, criterion_group, criterion_main};

fn probes(c: &mut Criterion) {
    let mut g = c.benchmark_group("probe");
    g.measurement_time(Duration::from_secs(2));
    g.bench_function("OffsetDateTime::now_utc", |b| {
        b.iter(time::OffsetDateTime::now_utc)
    });
    g.bench_function("SystemTime::now", |b| b.iter(SystemTime::now));
    #[cfg(target_os = "linux")]
    g.bench_function("clock_gettime(REALTIME_COARSE)", |b| {
        b.iter(|| rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse))
    });
    let dir = std::env::temp_dir();
    g.bench_function("stat of a watched directory (re-arm poll)", |b| {
        b.iter(|| std::fs::metadata(black_box(&dir)))
    });
    let state = hashbrown::DefaultHashBuilder::default();
    let scope = "https://management.azure.com/.default";
    g.bench_function("foldhash (hashbrown default) 38-byte scope", |b| {
        b.iter(|| {
            let mut h = state.build_hasher();
            h.write(black_box(scope).as_bytes());
            h.write_u8(0xff);
            h.finish()
        })
    });
    let arc = Arc::new(5u64);
    g.bench_function("Arc clone+drop", |b| b.iter(|| black_box(arc.clone())));
    g.finish();
}

criterion_group!(benches, probes);
criterion_main!(benches);
