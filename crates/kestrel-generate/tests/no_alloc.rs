//! A decode step allocates nothing: a counting global allocator watches 16 steps of SmolLM2 and
//! of Gemma 3 after a warm-up. (One test per binary, so nothing else allocates meanwhile.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use kestrel_generate::{Generator, GeneratorOptions};
use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};
use kestrel_gguf::GgufModel;

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);
static BYTES: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(l.size(), Relaxed);
        // SAFETY: forwarding to the system allocator with the caller's layout.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: p came from System.alloc with layout l.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(new, Relaxed);
        // SAFETY: forwarding a realloc of a System allocation.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn steps_allocate_nothing(file: &str, prompt: &[u32]) {
    let Some(path) = test_model(file) else { return };
    let model = Arc::new(GgufModel::open(path).unwrap());
    let opts = GeneratorOptions {
        threads: 2,
        ctx: 64,
        ..GeneratorOptions::default()
    };
    let mut g = Generator::new(model, opts).unwrap();
    g.prefill(prompt).unwrap();
    let mut next = 0u32;
    for _ in 0..2 {
        let logits = g.step(next).unwrap();
        next = kestrel_tensor::cpu::argmax(logits).unwrap() as u32;
    }
    let (a0, b0) = (ALLOCS.load(Relaxed), BYTES.load(Relaxed));
    for _ in 0..16 {
        let logits = g.step(next).unwrap();
        next = kestrel_tensor::cpu::argmax(logits).unwrap() as u32;
    }
    let (allocs, bytes) = (ALLOCS.load(Relaxed) - a0, BYTES.load(Relaxed) - b0);
    eprintln!("{file}: 16 decode steps made {allocs} allocations ({bytes} bytes)");
    assert_eq!(
        allocs, 0,
        "decode steps allocated {allocs} times ({bytes} bytes)"
    );
}

fn decode_steps_allocate_nothing() {
    steps_allocate_nothing(SMOLLM2_135M_Q4_1, &[504, 3575, 282, 4649, 314]);
    steps_allocate_nothing(GEMMA3_270M_Q4_K_M, &[2, 818, 5279, 529, 7001, 563]);
}

/// Runs without libtest (`harness = false`): the harness's own threads allocate while a test
/// runs (bookkeeping after spawning it, result collection), and a loaded machine can schedule
/// those allocations inside the measured window, so the global count would not be ours alone.
fn main() {
    decode_steps_allocate_nothing();
    eprintln!("decode_steps_allocate_nothing ... ok");
}
