//! The cache a query reads: [`KvSlice`] (keys or values in f32, f16, q8_0 or q4_0), [`KvRows`]
//! (contiguous or paged), and [`KvElem`], the per-type dot product and value update of the
//! online-softmax paths (one rounding for every f32/f16 path, `Dot32`).

use half::f16;
use half::slice::HalfFloatSliceExt;
use kestrel_gguf::quant::{BlockQ4_0, BlockQ8_0};

use crate::error::{Result, TensorError};

/// Keys or values of a KV cache: `[kv_capacity][n_kv_head][head_dim]`, position `j` in row `j`.
/// Quantized caches hold each head's values in blocks of 32 (`head_dim` a multiple of 32),
/// read by the attention kernel block by block, never expanded.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum KvSlice<'a> {
    /// f32 entries.
    F32(&'a [f32]),
    /// f16 entries.
    F16(&'a [f16]),
    /// q8_0 blocks (32 values each).
    Q8_0(&'a [BlockQ8_0]),
    /// q4_0 blocks (32 values each).
    Q4_0(&'a [BlockQ4_0]),
}

impl KvSlice<'_> {
    /// Values held.
    pub fn len(&self) -> usize {
        match self {
            KvSlice::F32(s) => s.len(),
            KvSlice::F16(s) => s.len(),
            KvSlice::Q8_0(s) => s.len() * 32,
            KvSlice::Q4_0(s) => s.len() * 32,
        }
    }

    /// True when it holds no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where key position `j` lives in a cache slice: row `j` of a contiguous cache, or, in a paged
/// cache of blocks of `B` rows (a power of two), slot `j % B` of block `blocks[j / B]`, row
/// `blocks[j / B] * B + j % B`. Attention reads a paged cache in place through it.
#[derive(Clone, Copy, Debug)]
pub struct KvRows<'a> {
    blocks: &'a [u32],
    pub(super) shift: u32,
}

impl KvRows<'static> {
    /// Position `j` in row `j`.
    pub const CONTIGUOUS: KvRows<'static> = KvRows {
        blocks: &[0],
        shift: usize::BITS - 1,
    };
}

impl<'a> KvRows<'a> {
    /// Positions mapped through a block table of `block_size`-row blocks.
    ///
    /// # Errors
    /// `InvalidParam` unless `block_size` is a power of two below 2³¹.
    pub fn paged(blocks: &'a [u32], block_size: usize) -> Result<KvRows<'a>> {
        if !block_size.is_power_of_two() || block_size >= 1 << 31 {
            return Err(TensorError::InvalidParam {
                op: "attention",
                why: "the block size of a paged cache must be a power of two",
            });
        }
        Ok(KvRows {
            blocks,
            shift: block_size.trailing_zeros(),
        })
    }

    /// The cache row of position `j`.
    #[inline(always)]
    pub fn row(&self, j: usize) -> usize {
        let b = self.blocks[j >> self.shift] as usize;
        (b << self.shift) | (j & ((1usize << self.shift) - 1))
    }

    /// Rows a cache slice needs so that positions `0..kv_len` are inside it (`None` when the
    /// table is shorter than `kv_len` needs).
    pub(super) fn rows_needed(&self, kv_len: usize) -> Option<usize> {
        if self.shift == usize::BITS - 1 {
            return Some(kv_len);
        }
        let used = kv_len.div_ceil(1 << self.shift);
        let top = self
            .blocks
            .get(..used)?
            .iter()
            .max()
            .map_or(0, |&b| b as usize + 1);
        top.checked_mul(1 << self.shift)
    }
}

/// Element types a KV cache can hold.
pub(super) trait KvElem: Copy + Send + Sync {
    /// Values per element (32 for a quant block).
    const VALS: usize = 1;
    /// `q · k`.
    fn dot(q: &[f32], k: &[Self]) -> f32;
    /// `acc += w * v`.
    fn axpy(acc: &mut [f32], w: f32, v: &[Self]);
}

/// The dot of a query with a key row: position `p` goes to accumulator `p mod 32` by FMA (32
/// independent chains, where one 8-lane chain made every dot wait on its adds), the last
/// `len mod 32` positions to a sequential tail; then a fixed tree. Every f32/f16 path uses it,
/// so they round alike.
pub(super) struct Dot32 {
    acc: [f32; 32],
    tail: f32,
}

impl Dot32 {
    #[inline(always)]
    pub(super) fn new() -> Dot32 {
        Dot32 {
            acc: [0.0; 32],
            tail: 0.0,
        }
    }

    /// Adds `q · k` for the next `q.len()` positions (a multiple of 32 unless it is the last
    /// part of the row).
    #[inline(always)]
    fn add(&mut self, q: &[f32], k: &[f32]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            unsafe { self.add_avx2(q, k) };
            return;
        }
        self.add_scalar(q, k)
    }

    /// [`Dot32::add`] with the 32 accumulators in four ymm registers: the same FMAs per lane in
    /// the same order (LLVM split the array into 2-lane pieces and spilled them).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn add_avx2(&mut self, q: &[f32], k: &[f32]) {
        use std::arch::x86_64::*;
        let n = q.len().min(k.len());
        let full = n - n % 32;
        // SAFETY: `acc` holds 32 f32; `q` and `k` hold at least `full` values, read 8 at a
        // time below `full`; all loads and stores are unaligned.
        unsafe {
            let a = self.acc.as_mut_ptr();
            let mut v = [
                _mm256_loadu_ps(a),
                _mm256_loadu_ps(a.add(8)),
                _mm256_loadu_ps(a.add(16)),
                _mm256_loadu_ps(a.add(24)),
            ];
            let (qp, kp) = (q.as_ptr(), k.as_ptr());
            let mut p = 0;
            while p < full {
                for (j, vj) in v.iter_mut().enumerate() {
                    let o = p + 8 * j;
                    *vj = _mm256_fmadd_ps(
                        _mm256_loadu_ps(qp.add(o)),
                        _mm256_loadu_ps(kp.add(o)),
                        *vj,
                    );
                }
                p += 32;
            }
            for (j, vj) in v.iter().enumerate() {
                _mm256_storeu_ps(a.add(8 * j), *vj);
            }
        }
        for (x, y) in q[full..n].iter().zip(&k[full..n]) {
            self.tail = x.mul_add(*y, self.tail);
        }
    }

    #[inline(always)]
    pub(super) fn add_scalar(&mut self, q: &[f32], k: &[f32]) {
        let mut qc = q.chunks_exact(32);
        let mut kc = k.chunks_exact(32);
        for (a, b) in (&mut qc).zip(&mut kc) {
            for i in 0..32 {
                self.acc[i] = a[i].mul_add(b[i], self.acc[i]);
            }
        }
        for (x, y) in qc.remainder().iter().zip(kc.remainder()) {
            self.tail = x.mul_add(*y, self.tail);
        }
    }

    #[inline(always)]
    pub(super) fn finish(mut self) -> f32 {
        for w in [16, 8, 4, 2, 1] {
            for i in 0..w {
                self.acc[i] += self.acc[i + w];
            }
        }
        self.acc[0] + self.tail
    }
}

/// `acc += w · v` by FMA.
#[inline(always)]
fn axpy_f32(acc: &mut [f32], w: f32, v: &[f32]) {
    for (a, &x) in acc.iter_mut().zip(v) {
        *a = w.mul_add(x, *a);
    }
}

impl KvElem for f32 {
    #[inline(always)]
    fn dot(q: &[f32], k: &[f32]) -> f32 {
        let mut d = Dot32::new();
        d.add(q, k);
        d.finish()
    }
    #[inline(always)]
    fn axpy(acc: &mut [f32], w: f32, v: &[f32]) {
        axpy_f32(acc, w, v)
    }
}

impl KvElem for f16 {
    #[inline(always)]
    fn dot(q: &[f32], k: &[f16]) -> f32 {
        let mut buf = [0f32; 64];
        let mut d = Dot32::new();
        for (qc, kc) in q.chunks(64).zip(k.chunks(64)) {
            let b = &mut buf[..kc.len()];
            kc.convert_to_f32_slice(b);
            d.add(qc, b);
        }
        d.finish()
    }
    #[inline(always)]
    fn axpy(acc: &mut [f32], w: f32, v: &[f16]) {
        let mut buf = [0f32; 64];
        for (ac, vc) in acc.chunks_mut(64).zip(v.chunks(64)) {
            let b = &mut buf[..vc.len()];
            vc.convert_to_f32_slice(b);
            axpy_f32(ac, w, b);
        }
    }
}

/// f16 keys/values already widened to f32 (exactly): the same operations as `KvElem for f16`,
/// so the widened path rounds identically to reading the f16 cache.
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub(super) struct Widened(pub(super) f32);

impl KvElem for Widened {
    #[inline(always)]
    fn dot(q: &[f32], k: &[Self]) -> f32 {
        f32::dot(q, bytemuck::cast_slice(k))
    }
    #[inline(always)]
    fn axpy(acc: &mut [f32], w: f32, v: &[Self]) {
        axpy_f32(acc, w, bytemuck::cast_slice(v))
    }
}

/// A q8_0 head row: `Σ_blocks d · Σ q[i]·qs[i]`.
impl KvElem for BlockQ8_0 {
    const VALS: usize = 32;
    #[inline]
    fn dot(q: &[f32], k: &[Self]) -> f32 {
        let mut sum = 0.0;
        for (qc, b) in q.chunks_exact(32).zip(k) {
            let mut s = 0.0f32;
            for (x, &y) in qc.iter().zip(&b.qs) {
                s += x * f32::from(y);
            }
            sum += s * b.d.to_f32();
        }
        sum
    }
    #[inline]
    fn axpy(acc: &mut [f32], w: f32, v: &[Self]) {
        for (ac, b) in acc.chunks_exact_mut(32).zip(v) {
            let wd = w * b.d.to_f32();
            for (a, &y) in ac.iter_mut().zip(&b.qs) {
                *a += wd * f32::from(y);
            }
        }
    }
}

/// A q4_0 head row: values `d · (nibble - 8)`, low nibbles first.
impl KvElem for BlockQ4_0 {
    const VALS: usize = 32;
    #[inline]
    fn dot(q: &[f32], k: &[Self]) -> f32 {
        let mut sum = 0.0;
        for (qc, b) in q.chunks_exact(32).zip(k) {
            let mut s = 0.0f32;
            for (j, &byte) in b.qs.iter().enumerate() {
                s += qc[j] * f32::from((byte & 0x0f) as i8 - 8)
                    + qc[j + 16] * f32::from((byte >> 4) as i8 - 8);
            }
            sum += s * b.d.to_f32();
        }
        sum
    }
    #[inline]
    fn axpy(acc: &mut [f32], w: f32, v: &[Self]) {
        for (ac, b) in acc.chunks_exact_mut(32).zip(v) {
            let wd = w * b.d.to_f32();
            for (j, &byte) in b.qs.iter().enumerate() {
                ac[j] += wd * f32::from((byte & 0x0f) as i8 - 8);
                ac[j + 16] += wd * f32::from((byte >> 4) as i8 - 8);
            }
        }
    }
}

/// The `hd` values of a head row starting at value `off`, in elements of `T`.
#[inline(always)]
pub(super) fn head<T: KvElem>(s: &[T], off: usize, hd: usize) -> &[T] {
    &s[off / T::VALS..(off + hd) / T::VALS]
}
