//! What opening a real model costs: heap bytes allocated (counting global allocator) besides the
//! mapping, and wall time. One test per binary, so the counters see nothing else.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M};
use kestrel_gguf::GgufModel;

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static TOTAL: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let now = LIVE.fetch_add(l.size(), Relaxed) + l.size();
        PEAK.fetch_max(now, Relaxed);
        TOTAL.fetch_add(l.size(), Relaxed);
        // SAFETY: forwarding to the system allocator with the caller's layout.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Relaxed);
        // SAFETY: p was allocated by System with layout l.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn opening_gemma_is_cheap() {
    let Some(path) = test_model(GEMMA3_270M_Q4_K_M) else {
        return;
    };
    let mut times = Vec::new();
    let mut peak = 0;
    let mut total = 0;
    for _ in 0..5 {
        let base = LIVE.load(Relaxed);
        PEAK.store(base, Relaxed);
        let t0 = TOTAL.load(Relaxed);
        let start = Instant::now();
        let m = GgufModel::open(&path).unwrap();
        times.push(start.elapsed());
        peak = PEAK.load(Relaxed) - base;
        total = TOTAL.load(Relaxed) - t0;
        assert_eq!(m.n_tensors(), 236);
        drop(m);
    }
    times.sort();
    let median = times[times.len() / 2];
    eprintln!(
        "open gemma-3-270m: median {:.2} ms over 5 (min {:.2}), heap peak {} KiB, total allocated {} KiB",
        median.as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        peak / 1024,
        total / 1024
    );
    assert!(peak < 10 << 20, "opening allocated a peak of {peak} bytes");
    // The target is 50 ms on an idle machine; CI machines are shared, so only catch gross regressions here.
    assert!(median.as_millis() < 500, "opening took {median:?}");
}
