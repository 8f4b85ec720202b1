//! Matmul throughput per weight type at 2048×2048 (k = 2048):
//! - `matvec_*`: decode, `out[m] = W[m×k] · x[k]`, as GB/s of weight bytes read;
//! - `prefill_*`: 64 activation rows at once (the tile kernels), as multiply-adds per second
//!   (criterion's "elements");
//! - `*_packed`: the same on weights repacked at load (`cpu::PackedWeight`: Q4_0, IQ4_NL and
//!   MXFP4 on AVX2 and AVX-512 VNNI CPUs, Q4_K and Q6_K on AVX-512 VNNI ones; Q4_1, Q5_0, Q8_0
//!   too there with `KESTREL_REPACK=all`);
//! - `small_batch`: SmolLM2's shapes, 1 and 8 rows, packed Q4_1 (needs `KESTREL_REPACK=all`);
//! - `read_bandwidth`: the machine's read bandwidth (a 256 MiB buffer summed by the pool's
//!   threads, and by one), the ceiling of `matvec_*`'s GB/s.
//!
//! Threads: the `KESTREL_THREADS` environment variable (default: all logical CPUs);
//! `KESTREL_ISA=scalar|avx2|avx512` caps the kernels for A/B runs.
//!
//! `cargo bench -p kestrel-tensor --bench matmul`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kestrel_tensor::cpu::{MatmulScratch, PackedWeight};
use kestrel_tensor::{cpu, quant, CpuEngine, DType};
use rayon::prelude::*;

/// SplitMix64 random numbers in [-1, 1).
fn random_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

/// `m` rows of `k` values as `dtype`: quantized from random values, or for the IQ types and
/// MXFP4 (which kestrel does not quantize) random codes under a fixed scale (speed does not
/// depend on the values).
fn weights(dtype: DType, m: usize, k: usize) -> Vec<u8> {
    let mut w = vec![0u8; dtype.row_bytes(k).expect("whole blocks") * m];
    match dtype {
        DType::IQ4NL
        | DType::IQ4XS
        | DType::MXFP4
        | DType::IQ2XXS
        | DType::IQ2XS
        | DType::IQ2S
        | DType::IQ3XXS
        | DType::IQ3S => {
            for (i, b) in w.iter_mut().enumerate() {
                *b = (i.wrapping_mul(2654435761) >> 7) as u8;
            }
            let bb = dtype.block_bytes();
            let d = half::f16::from_f32(0.01).to_bits().to_le_bytes();
            for blk in w.chunks_exact_mut(bb) {
                if dtype == DType::MXFP4 {
                    blk[0] = 120;
                } else {
                    blk[..2].copy_from_slice(&d);
                }
            }
        }
        _ => {
            let src = random_vec(m * k, 2);
            quant::quantize(dtype.ggml_type(), &src, &mut w).expect("quantize");
        }
    }
    w
}

fn matvec(c: &mut Criterion) {
    let threads = std::env::var("KESTREL_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let engine = CpuEngine::new(threads).expect("thread pool");
    let (m, k) = (2048usize, 2048usize);
    let x = random_vec(k, 1);
    let mut out = vec![0f32; m];
    let mut group = c.benchmark_group(format!(
        "matvec_{m}x{k}_t{}",
        engine.pool().current_num_threads()
    ));
    for dtype in [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q8_0,
        DType::Q4K,
        DType::Q6K,
        DType::IQ4NL,
        DType::IQ4XS,
        DType::MXFP4,
        DType::IQ2XXS,
        DType::IQ2XS,
        DType::IQ2S,
        DType::IQ3XXS,
        DType::IQ3S,
    ] {
        let w = weights(dtype, m, k);
        group.throughput(Throughput::Bytes(w.len() as u64));
        group.bench_function(dtype.name(), |b| {
            engine.install(|| b.iter(|| cpu::matvec(&x, &w, dtype, m, &mut out).expect("matvec")))
        });
        if let Some(p) = PackedWeight::pack(&w, dtype, m, k) {
            let mut scratch = MatmulScratch::new();
            group.bench_function(format!("{}_packed", dtype.name()), |b| {
                engine.install(|| {
                    b.iter(|| {
                        cpu::matmul_packed(&x, 1, &p, &mut out, &[1], &mut scratch).expect("packed")
                    })
                })
            });
        }
    }
    group.finish();
}

fn prefill(c: &mut Criterion) {
    let threads = std::env::var("KESTREL_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let engine = CpuEngine::new(threads).expect("thread pool");
    let (n, m, k) = (64usize, 2048usize, 2048usize);
    let x = random_vec(n * k, 1);
    let mut out = vec![0f32; n * m];
    let mut group = c.benchmark_group(format!(
        "prefill_{n}x{m}x{k}_t{}",
        engine.pool().current_num_threads()
    ));
    group.sample_size(20);
    for dtype in [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q8_0,
        DType::Q4K,
        DType::Q6K,
        DType::IQ4NL,
        DType::IQ4XS,
        DType::MXFP4,
        DType::IQ2XXS,
        DType::IQ2XS,
        DType::IQ2S,
        DType::IQ3XXS,
        DType::IQ3S,
    ] {
        let w = weights(dtype, m, k);
        group.throughput(Throughput::Elements((n * m * k) as u64));
        group.bench_function(dtype.name(), |b| {
            engine.install(|| {
                b.iter(|| cpu::matmul(&x, n, k, &w, dtype, m, &mut out).expect("matmul"))
            })
        });
        if let Some(p) = PackedWeight::pack(&w, dtype, m, k) {
            let mut scratch = MatmulScratch::new();
            group.bench_function(format!("{}_packed", dtype.name()), |b| {
                engine.install(|| {
                    b.iter(|| {
                        cpu::matmul_packed(&x, n, &p, &mut out, &[n], &mut scratch).expect("packed")
                    })
                })
            });
        }
    }
    group.finish();
}

/// Batched decode at a small model's shapes (SmolLM2 135M: 576 wide, 1536 feed-forward): one
/// and eight activation rows through the packed Q4_1 kernel (packed only with
/// `KESTREL_REPACK=all`; otherwise the group is empty), weights in cache.
fn small_batch(c: &mut Criterion) {
    let threads = std::env::var("KESTREL_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let engine = CpuEngine::new(threads).expect("thread pool");
    let mut group = c.benchmark_group(format!(
        "small_batch_t{}",
        engine.pool().current_num_threads()
    ));
    let dtype = DType::Q4_1;
    for (m, k) in [(576usize, 576usize), (1536, 576), (576, 1536)] {
        let src = random_vec(m * k, 2);
        let mut w = vec![0u8; dtype.row_bytes(k).expect("whole blocks") * m];
        quant::quantize(dtype.ggml_type(), &src, &mut w).expect("quantize");
        let Some(p) = PackedWeight::pack(&w, dtype, m, k) else {
            return;
        };
        for n in [1usize, 8] {
            let x = random_vec(n * k, 1);
            let mut out = vec![0f32; n * m];
            let mut scratch = MatmulScratch::new();
            let segments = vec![1; n];
            group.throughput(Throughput::Elements((n * m * k) as u64));
            group.bench_function(format!("{}_{m}x{k}_n{n}", dtype.name()), |b| {
                engine.install(|| {
                    b.iter(|| {
                        cpu::matmul_packed(&x, n, &p, &mut out, &segments, &mut scratch)
                            .expect("packed")
                    })
                })
            });
        }
    }
    group.finish();
}

/// Read bandwidth: a 256 MiB buffer (far larger than any cache) summed in 1 MiB chunks by the
/// pool's threads, and by one thread.
fn read_bandwidth(c: &mut Criterion) {
    let threads = std::env::var("KESTREL_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let buf: Vec<u64> = (0..(256usize << 20) / 8).map(|i| i as u64).collect();
    let mut group = c.benchmark_group("read_bandwidth_256MiB");
    group.sample_size(10);
    group.throughput(Throughput::Bytes((buf.len() * 8) as u64));
    for n in [1, threads] {
        let engine = CpuEngine::new(n).expect("thread pool");
        let t = engine.pool().current_num_threads();
        group.bench_function(format!("t{t}"), |b| {
            engine.install(|| {
                b.iter(|| {
                    buf.par_chunks(1 << 17)
                        .map(|c| {
                            // 32 independent lanes, so the adds keep up with memory.
                            let mut acc = [0u64; 32];
                            for v in c.chunks_exact(32) {
                                for (a, &x) in acc.iter_mut().zip(v) {
                                    *a = a.wrapping_add(x);
                                }
                            }
                            acc.iter().fold(0u64, |a, &x| a.wrapping_add(x))
                        })
                        .reduce(|| 0, u64::wrapping_add)
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, matvec, prefill, small_batch, read_bandwidth);
criterion_main!(benches);
