//! Causal multi-head attention over a KV cache, flash-style: for each (token, head) one pass over
//! the visible keys with an online softmax (running max and sum, the output row as the
//! accumulator), so no `n × kv_len` score matrix is ever stored. Supports GQA (`n_head` a multiple
//! of `n_kv_head`), a scale, sliding-window attention with llama.cpp's boundary, Gemma-2 logit
//! soft-capping, and f32, f16, q8_0 or q4_0 keys/values. Parallel over (token, head) pairs.
//! f16 keys/values with fewer than 64 query rows (decode, short prompts) round exactly as
//! llama.cpp's default CPU flash attention does (see `run_f16_ggml`); f32/f16 keys/values with
//! 64 rows or more take its tiled f32 path's roundings (`attention_tiled`); quantized caches
//! keep kestrel's own f32 path.

use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

use super::qdot::dot_f16_ggml_x86;
use crate::error::{Result, TensorError};
use kestrel_gguf::quant::{BlockQ4_0, BlockQ8_0};

/// Keys scored per step of the online softmax (their scores live on the stack).
const KEY_BLOCK: usize = 64;

/// Query rows from which llama.cpp's CPU flash attention (`GGML_FA_TILE_Q`) takes its tiled f32
/// path; below it (decode, short prompts) it runs the per-row f16 path that
/// `run_f16_ggml` mirrors.
pub const GGML_FA_TILE_Q: usize = 64;

/// Largest head size of the f16 path (its buffers live on the stack); larger heads take the f32
/// path.
const MAX_F16_HEAD_DIM: usize = 512;

/// Attention settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionParams {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads; `n_head` must be a multiple (query head `h` reads KV head
    /// `h / (n_head / n_kv_head)`, as llama.cpp groups them).
    pub n_kv_head: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Multiplies `q·k` (usually `1 / sqrt(head_dim)`).
    pub scale: f32,
    /// Logit soft cap `c`: scores become `c * tanh(scale * q·k / c)` (0 for none; Gemma 2).
    pub softcap: f32,
    /// Sliding window `w`: a query at position `p` sees keys at positions `p - w < j <= p`
    /// (llama.cpp's `LLAMA_SWA_TYPE_STANDARD` masks `p - j >= w`); 0 for no window.
    pub window: usize,
}

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
    shift: u32,
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
    fn rows_needed(&self, kv_len: usize) -> Option<usize> {
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
struct Dot32 {
    acc: [f32; 32],
    tail: f32,
}

impl Dot32 {
    #[inline(always)]
    fn new() -> Dot32 {
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
    fn add_avx2(&mut self, q: &[f32], k: &[f32]) {
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
    fn add_scalar(&mut self, q: &[f32], k: &[f32]) {
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
    fn finish(mut self) -> f32 {
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
struct Widened(f32);

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

thread_local! {
    /// The widened K and V of a long prefill over an f16 cache (grows to the largest seen).
    static WIDE: std::cell::RefCell<Vec<Widened>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The keys `lo..hi` a query at `pos` sees among `kv_len` cached positions.
#[inline]
pub fn visible_keys(pos: i32, kv_len: usize, window: usize) -> (usize, usize) {
    if pos < 0 {
        return (0, 0);
    }
    let p = pos as usize;
    let hi = (p + 1).min(kv_len);
    let lo = if window > 0 {
        (p + 1).saturating_sub(window)
    } else {
        0
    };
    (lo.min(hi), hi)
}

/// Attention of queries `q` (`[n_tokens][n_head][head_dim]`, token `t` at `positions[t]`) over
/// the first `kv_len` positions of `k` and `v`, writing `out` (`[n_tokens][n_head][head_dim]`).
/// A query sees keys at positions `<= its own` (causal) and inside the window. A query that sees
/// no key (a negative position) gets zeros.
///
/// `k` and `v` may be longer than `kv_len` rows (a preallocated cache); the extra rows are not
/// read. Tolerance against an f64 reference: ~1e-5 absolute for unit-scale inputs; f16 `k`/`v`
/// with fewer than [`GGML_FA_TILE_Q`] query rows round as llama.cpp does (f16 query and output
/// accumulator, `run_f16_ggml`): ~1e-3.
///
/// # Errors
/// `InvalidParam` for zero or non-multiple head counts, `LengthMismatch` for short buffers.
pub fn attention(
    q: &[f32],
    positions: &[i32],
    k: KvSlice<'_>,
    v: KvSlice<'_>,
    kv_len: usize,
    p: &AttentionParams,
    out: &mut [f32],
) -> Result<()> {
    attention_paged(q, positions, k, v, kv_len, KvRows::CONTIGUOUS, p, out)
}

/// [`attention`] over a cache whose positions live at the rows `rows` maps them to (a paged
/// cache's block table); the numerics are those of [`attention`] exactly, position by position.
///
/// # Errors
/// As [`attention`]; `LengthMismatch` also when the block table does not cover `kv_len`
/// positions or names a block outside `k`/`v`.
#[allow(clippy::too_many_arguments)]
pub fn attention_paged(
    q: &[f32],
    positions: &[i32],
    k: KvSlice<'_>,
    v: KvSlice<'_>,
    kv_len: usize,
    rows: KvRows<'_>,
    p: &AttentionParams,
    out: &mut [f32],
) -> Result<()> {
    check_args(q, positions, k, v, kv_len, rows, p, out)?;
    let hd_stride = p.n_kv_head * p.head_dim;
    match (k, v) {
        (KvSlice::F32(k), KvSlice::F32(v))
            if positions.len() >= GGML_FA_TILE_Q && p.head_dim.is_multiple_of(16) =>
        {
            if rows.shift == usize::BITS - 1 {
                super::attention_tiled::run_tiled(q, positions, k, v, kv_len, p, out)
            } else {
                // A paged cache is gathered in position order first.
                let copy = |s: &[f32], d: &mut [f32]| d.copy_from_slice(s);
                with_gathered(k, v, kv_len, rows, hd_stride, copy, |wk, wv| {
                    super::attention_tiled::run_tiled(q, positions, wk, wv, kv_len, p, out)
                })
            }
        }
        (KvSlice::F32(k), KvSlice::F32(v)) => run(q, positions, k, v, kv_len, rows, p, out),
        (KvSlice::F16(k16), KvSlice::F16(v16)) if takes_f16_ggml(k, v, positions.len(), p) => {
            run_f16_ggml(q, positions, k16, v16, kv_len, rows, p, out)
        }
        (KvSlice::F16(k), KvSlice::F16(v)) => {
            // Widen the visible cache once instead of once per (query row, head, key), in
            // position order (a paged cache is gathered here).
            let widen = |s: &[f16], d: &mut [f32]| s.convert_to_f32_slice(d);
            with_gathered(k, v, kv_len, rows, hd_stride, widen, |wk, wv| {
                if p.head_dim.is_multiple_of(16) {
                    // llama.cpp's tiled f32 path, rounding as it does.
                    super::attention_tiled::run_tiled(q, positions, wk, wv, kv_len, p, out);
                    return;
                }
                let (wk, wv): (&[Widened], &[Widened]) =
                    (bytemuck::cast_slice(wk), bytemuck::cast_slice(wv));
                run2::<Widened, Widened>(
                    q,
                    positions,
                    wk,
                    wv,
                    kv_len,
                    KvRows::CONTIGUOUS,
                    p,
                    out,
                );
            })
        }
        (KvSlice::F32(k), KvSlice::F16(v)) => run2(q, positions, k, v, kv_len, rows, p, out),
        (KvSlice::F16(k), KvSlice::F32(v)) => run2(q, positions, k, v, kv_len, rows, p, out),
        (KvSlice::Q8_0(k), KvSlice::Q8_0(v)) if p.head_dim.is_multiple_of(32) => {
            run2(q, positions, k, v, kv_len, rows, p, out)
        }
        (KvSlice::Q4_0(k), KvSlice::Q4_0(v)) if p.head_dim.is_multiple_of(32) => {
            run2(q, positions, k, v, kv_len, rows, p, out)
        }
        _ => {
            return Err(TensorError::InvalidParam {
                op: "attention",
                why: "keys and values must both be f32/f16, or both q8_0 or q4_0 with head_dim a multiple of 32",
            })
        }
    }
    Ok(())
}

/// Runs `f` over the first `kv_len` positions of `k` and `v` as f32 rows in position order:
/// `conv` copies or widens each run of rows the block table `rows` keeps together, into this
/// thread's buffer (it grows to the largest seen, then allocates nothing; a call re-entered on
/// the thread gets buffers of its own).
fn with_gathered<S>(
    k: &[S],
    v: &[S],
    kv_len: usize,
    rows: KvRows<'_>,
    hd_stride: usize,
    conv: impl Fn(&[S], &mut [f32]),
    f: impl FnOnce(&[f32], &[f32]),
) {
    let n = kv_len * hd_stride;
    let run_len = if rows.shift == usize::BITS - 1 {
        kv_len.max(1)
    } else {
        1 << rows.shift
    };
    let gather = |wk: &mut [f32], wv: &mut [f32]| {
        let mut j = 0;
        while j < kv_len {
            let len = run_len.min(kv_len - j) * hd_stride;
            let (src, dst) = (rows.row(j) * hd_stride, j * hd_stride);
            conv(&k[src..src + len], &mut wk[dst..dst + len]);
            conv(&v[src..src + len], &mut wv[dst..dst + len]);
            j += run_len;
        }
    };
    WIDE.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < 2 * n {
                buf.resize(2 * n, Widened(0.0));
            }
            let (wk, wv) = buf.split_at_mut(n);
            let wk: &mut [f32] = bytemuck::cast_slice_mut(wk);
            let wv: &mut [f32] = bytemuck::cast_slice_mut(&mut wv[..n]);
            gather(wk, wv);
            f(wk, wv)
        }
        Err(_) => {
            let (mut wk, mut wv) = (vec![0f32; n], vec![0f32; n]);
            gather(&mut wk, &mut wv);
            f(&wk, &wv)
        }
    })
}

/// The argument checks of [`attention_paged`].
#[allow(clippy::too_many_arguments)]
pub(super) fn check_args(
    q: &[f32],
    positions: &[i32],
    k: KvSlice<'_>,
    v: KvSlice<'_>,
    kv_len: usize,
    rows: KvRows<'_>,
    p: &AttentionParams,
    out: &[f32],
) -> Result<()> {
    const OP: &str = "attention";
    if p.n_head == 0 || p.n_kv_head == 0 || p.head_dim == 0 || !p.n_head.is_multiple_of(p.n_kv_head)
    {
        return Err(TensorError::InvalidParam {
            op: OP,
            why: "head counts and head_dim must be non-zero, n_head a multiple of n_kv_head",
        });
    }
    let q_len = positions
        .len()
        .checked_mul(p.n_head)
        .and_then(|x| x.checked_mul(p.head_dim))
        .unwrap_or(usize::MAX);
    let kv_needed = rows
        .rows_needed(kv_len)
        .unwrap_or(usize::MAX)
        .checked_mul(p.n_kv_head)
        .and_then(|x| x.checked_mul(p.head_dim))
        .unwrap_or(usize::MAX);
    for (what, expected, actual, exact) in [
        ("q", q_len, q.len(), true),
        ("out", q_len, out.len(), true),
        ("k", kv_needed, k.len(), false),
        ("v", kv_needed, v.len(), false),
    ] {
        if (exact && actual != expected) || actual < expected {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what,
                expected,
                actual,
            });
        }
    }
    Ok(())
}

/// True when [`attention_paged`] takes the per-(row, head) f16 path (`run_f16_ggml`) for
/// `n_rows` query rows over `k`/`v`.
pub(super) fn takes_f16_ggml(
    k: KvSlice<'_>,
    v: KvSlice<'_>,
    n_rows: usize,
    p: &AttentionParams,
) -> bool {
    matches!((k, v), (KvSlice::F16(_), KvSlice::F16(_)))
        && (n_rows < GGML_FA_TILE_Q || !p.head_dim.is_multiple_of(16))
        && p.head_dim <= MAX_F16_HEAD_DIM
}

#[allow(clippy::too_many_arguments)]
fn run<T: KvElem>(
    q: &[f32],
    positions: &[i32],
    k: &[T],
    v: &[T],
    kv_len: usize,
    rows: KvRows<'_>,
    p: &AttentionParams,
    out: &mut [f32],
) {
    run2(q, positions, k, v, kv_len, rows, p, out)
}

/// Query rows scored together against each key: the heads of consecutive tokens that share one
/// KV head, so each key and value row is read once per group instead of once per query row.
const GROUP_ROWS: usize = 16;

#[allow(clippy::too_many_arguments)]
fn run2<K: KvElem, V: KvElem>(
    q: &[f32],
    positions: &[i32],
    k: &[K],
    v: &[V],
    kv_len: usize,
    rows: KvRows<'_>,
    p: &AttentionParams,
    out: &mut [f32],
) {
    let hd = p.head_dim;
    let gq = p.n_head / p.n_kv_head;
    let heads = gq.min(GROUP_ROWS);
    let tokens = (GROUP_ROWS / heads).max(1);
    #[cfg(target_arch = "x86_64")]
    let avx2 = super::dispatch::active_isa() >= super::dispatch::Isa::Avx2;
    out.par_chunks_mut(tokens * p.n_head * hd)
        .enumerate()
        .for_each(|(c, oc)| {
            let t0 = c * tokens;
            for kvh in 0..p.n_kv_head {
                for h0 in (kvh * gq..(kvh + 1) * gq).step_by(heads) {
                    let h1 = (h0 + heads).min((kvh + 1) * gq);
                    let mut outs: [&mut [f32]; GROUP_ROWS] = Default::default();
                    let mut g = Group {
                        qs: [&[]; GROUP_ROWS],
                        keys: [(0, 0); GROUP_ROWS],
                        n: 0,
                        kvh,
                        rows,
                    };
                    for (idx, o) in oc.chunks_mut(hd).enumerate() {
                        let (t, h) = (t0 + idx / p.n_head, idx % p.n_head);
                        if (h0..h1).contains(&h) {
                            let i = t * p.n_head + h;
                            g.qs[g.n] = &q[i * hd..(i + 1) * hd];
                            g.keys[g.n] = visible_keys(positions[t], kv_len, p.window);
                            outs[g.n] = o;
                            g.n += 1;
                        }
                    }
                    let outs = &mut outs[..g.n];
                    let same_lo = g.keys[..g.n].iter().all(|kr| kr.0 == g.keys[0].0);
                    #[cfg(target_arch = "x86_64")]
                    if avx2 {
                        // SAFETY: the active ISA is at least AVX2, so the CPU has AVX2 and FMA.
                        unsafe { group_avx2(&g, same_lo, k, v, p, outs) };
                        continue;
                    }
                    group_rows(&g, same_lo, k, v, p, outs);
                }
            }
        });
}

/// Query rows of one KV head: their queries and visible keys.
struct Group<'a> {
    qs: [&'a [f32]; GROUP_ROWS],
    keys: [(usize, usize); GROUP_ROWS],
    n: usize,
    kvh: usize,
    rows: KvRows<'a>,
}

/// [`group_rows`] compiled for AVX2 (the same operations in the same order: LLVM keeps the f32
/// rounding, it only widens the 8-lane loops).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn group_avx2<K: KvElem, V: KvElem>(
    g: &Group<'_>,
    same_lo: bool,
    k: &[K],
    v: &[V],
    p: &AttentionParams,
    outs: &mut [&mut [f32]],
) {
    group_rows(g, same_lo, k, v, p, outs)
}

/// The rows of a group together when their visible keys start at the same position (each key
/// and value row then serves all of them), else one by one. Either way each row sees exactly
/// the operations of a lone row, in the same order: blocks of [`KEY_BLOCK`] keys from its first
/// visible key, scores, the block maximum, the rescale, then `exp` and the value update key by
/// key.
#[inline(always)]
fn group_rows<K: KvElem, V: KvElem>(
    g: &Group<'_>,
    same_lo: bool,
    k: &[K],
    v: &[V],
    p: &AttentionParams,
    outs: &mut [&mut [f32]],
) {
    if same_lo {
        rows_together(g, 0..g.n, k, v, p, outs);
    } else {
        for (i, o) in outs.iter_mut().enumerate() {
            rows_together(g, i..i + 1, k, v, p, std::slice::from_mut(o));
        }
    }
}

/// Rows `sel` of `g` (whose visible keys all start at the same position) into `outs`.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // rows index parallel per-row state
fn rows_together<K: KvElem, V: KvElem>(
    g: &Group<'_>,
    sel: std::ops::Range<usize>,
    k: &[K],
    v: &[V],
    p: &AttentionParams,
    outs: &mut [&mut [f32]],
) {
    let hd = p.head_dim;
    let kv_stride = p.n_kv_head * hd;
    let n = sel.len();
    let qs = &g.qs[sel.clone()];
    let keys = &g.keys[sel];
    let Some(lo) = keys.first().map(|kr| kr.0) else {
        return;
    };
    let hi_max = keys.iter().map(|kr| kr.1).max().unwrap_or(lo);
    for o in outs.iter_mut() {
        o.fill(0.0);
    }
    let mut m = [f32::NEG_INFINITY; GROUP_ROWS];
    let mut l = [0f32; GROUP_ROWS];
    let mut scores = [[0f32; KEY_BLOCK]; GROUP_ROWS];
    let mut j0 = lo;
    while j0 < hi_max {
        let bn = (hi_max - j0).min(KEY_BLOCK);
        let mut bmax = [f32::NEG_INFINITY; GROUP_ROWS];
        for jj in 0..bn {
            let j = j0 + jj;
            let kr = head(k, g.rows.row(j) * kv_stride + g.kvh * hd, hd);
            for r in 0..n {
                if j < keys[r].1 {
                    let mut x = K::dot(qs[r], kr) * p.scale;
                    if p.softcap != 0.0 {
                        x = p.softcap * (x / p.softcap).tanh();
                    }
                    scores[r][jj] = x;
                    bmax[r] = bmax[r].max(x);
                }
            }
        }
        for r in 0..n {
            if j0 < keys[r].1 && bmax[r] > m[r] {
                let corr = (m[r] - bmax[r]).exp();
                if l[r] > 0.0 {
                    outs[r].iter_mut().for_each(|a| *a *= corr);
                }
                l[r] *= corr;
                m[r] = bmax[r];
            }
        }
        for jj in 0..bn {
            let j = j0 + jj;
            let vr = head(v, g.rows.row(j) * kv_stride + g.kvh * hd, hd);
            for r in 0..n {
                if j < keys[r].1 {
                    let w = (scores[r][jj] - m[r]).exp();
                    l[r] += w;
                    V::axpy(outs[r], w, vr);
                }
            }
        }
        j0 += bn;
    }
    for r in 0..n {
        if l[r] > 0.0 {
            let inv = 1.0 / l[r];
            outs[r].iter_mut().for_each(|a| *a *= inv);
        }
    }
}

/// f16 keys and values as llama.cpp's CPU flash attention treats them for fewer than
/// [`GGML_FA_TILE_Q`] query rows (`ggml_compute_forward_flash_attn_ext_f16_one_chunk`; its
/// default since FA became "auto"): the query is rounded to f16, `q·k` is `ggml_vec_dot_f16`
/// (emulated bit for bit, [`dot_f16_ggml_x86`]), keys are visited one at a time in order with
/// `M`/`S` updated per key, and the output accumulator is **f16**: `acc = f16(acc * ms)` on a
/// new maximum, `acc = f16(fma(v, vs, acc))` per key, then `acc * (1/S)` in f32. This rounds far
/// more than an f32 accumulator would (each step 2⁻¹¹ relative), and SmolLM2's logits move by up
/// to 0.5 between llama.cpp's FA on and off, so matching llama.cpp means rounding as it does.
#[allow(clippy::too_many_arguments)]
fn run_f16_ggml(
    q: &[f32],
    positions: &[i32],
    k: &[f16],
    v: &[f16],
    kv_len: usize,
    rows: KvRows<'_>,
    p: &AttentionParams,
    out: &mut [f32],
) {
    let hd = p.head_dim;
    let isa = F16Isa::detect();
    out.par_chunks_mut(hd).enumerate().for_each(|(i, o)| {
        let t = i / p.n_head;
        let h = i % p.n_head;
        let row = F16Row::new(
            &q[i * hd..(i + 1) * hd],
            h,
            k,
            v,
            positions[t],
            kv_len,
            rows,
            p,
        );
        isa.row(&row, o);
    });
}

/// The vector ops [`F16Isa::row`] runs with, chosen once per call.
#[derive(Clone, Copy)]
pub(super) struct F16Isa {
    #[cfg(target_arch = "x86_64")]
    avx512: bool,
    #[cfg(target_arch = "x86_64")]
    avx2: bool,
    #[cfg(target_arch = "x86_64")]
    fma: bool,
    #[cfg(target_arch = "aarch64")]
    neon: bool,
}

impl F16Isa {
    pub(super) fn detect() -> F16Isa {
        F16Isa {
            #[cfg(target_arch = "x86_64")]
            avx512: super::x86_64::f16_ops::available()
                && super::dispatch::active_isa() >= super::dispatch::Isa::Avx512,
            #[cfg(target_arch = "x86_64")]
            avx2: super::x86_64::f16_ops_avx2::available()
                && super::dispatch::active_isa() >= super::dispatch::Isa::Avx2,
            #[cfg(target_arch = "x86_64")]
            fma: std::arch::is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "aarch64")]
            neon: super::dispatch::active_isa() >= super::dispatch::Isa::Neon,
        }
    }

    /// One (token, head): the same roundings whichever ops run it.
    #[inline]
    pub(super) fn row(self, row: &F16Row<'_>, o: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if self.avx512 {
            // SAFETY: the CPU has the features (checked in `detect`).
            unsafe { f16_row_avx512(row, o) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: the CPU has the features (checked in `detect`).
            unsafe { f16_row_avx2(row, o) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if self.fma {
            // SAFETY: the CPU has FMA (checked in `detect`).
            unsafe { f16_row_fma(row, o) };
            return;
        }
        #[cfg(target_arch = "aarch64")]
        if self.neon {
            f16_row::<NeonF16>(row, o);
            return;
        }
        f16_row::<ScalarF16>(row, o);
    }
}

/// One (token, head) of `run_f16_ggml`.
pub(super) struct F16Row<'a> {
    q: &'a [f32],
    k: &'a [f16],
    v: &'a [f16],
    keys: (usize, usize),
    rows: KvRows<'a>,
    kv_stride: usize,
    head_off: usize,
    scale: f32,
    softcap: f32,
}

impl<'a> F16Row<'a> {
    /// Query head `h` (its `head_dim` values `q`) at position `pos` over `kv_len` keys.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(super) fn new(
        q: &'a [f32],
        h: usize,
        k: &'a [f16],
        v: &'a [f16],
        pos: i32,
        kv_len: usize,
        rows: KvRows<'a>,
        p: &AttentionParams,
    ) -> F16Row<'a> {
        let hd = p.head_dim;
        let group = p.n_head / p.n_kv_head;
        F16Row {
            q,
            k,
            v,
            keys: visible_keys(pos, kv_len, p.window),
            rows,
            kv_stride: p.n_kv_head * hd,
            head_off: (h / group) * hd,
            // ggml folds the cap into the scale: s = cap * tanh(q·k * (scale / cap)).
            scale: if p.softcap != 0.0 {
                p.scale / p.softcap
            } else {
                p.scale
            },
            softcap: p.softcap,
        }
    }
}

/// The vector ops of [`f16_row`]; the implementations round identically.
trait F16Ops {
    /// `ggml_vec_dot_f16`.
    fn dot(a: &[f16], b: &[f16]) -> f32;
    /// `acc = f16(fma(v, s, acc))`.
    fn mad(acc: &mut [f16], v: &[f16], s: f32);
    /// `acc = f16(acc · s)`.
    fn scale(acc: &mut [f16], s: f32);
    /// `dst = f16(src)`.
    fn to_f16(src: &[f32], dst: &mut [f16]);
    /// `dst = f32(src) · s`.
    fn to_f32_scaled(src: &[f16], s: f32, dst: &mut [f32]);
}

/// Portable [`F16Ops`].
struct ScalarF16;

impl F16Ops for ScalarF16 {
    #[inline(always)]
    fn dot(a: &[f16], b: &[f16]) -> f32 {
        dot_f16_ggml_x86(a, b)
    }
    #[inline(always)]
    fn mad(acc: &mut [f16], v: &[f16], s: f32) {
        // ggml_vec_mad_f16: _mm512_fmadd_ps(v, vs, acc), stored back as f16.
        for (a, x) in acc.iter_mut().zip(v) {
            *a = f16::from_f32(x.to_f32().mul_add(s, a.to_f32()));
        }
    }
    #[inline(always)]
    fn scale(acc: &mut [f16], s: f32) {
        for a in acc.iter_mut() {
            *a = f16::from_f32(a.to_f32() * s);
        }
    }
    #[inline(always)]
    fn to_f16(src: &[f32], dst: &mut [f16]) {
        for (a, &x) in dst.iter_mut().zip(src) {
            *a = f16::from_f32(x);
        }
    }
    #[inline(always)]
    fn to_f32_scaled(src: &[f16], s: f32, dst: &mut [f32]) {
        for (y, a) in dst.iter_mut().zip(src) {
            *y = a.to_f32() * s;
        }
    }
}

/// NEON [`F16Ops`] (aarch64's baseline; chosen unless `KESTREL_ISA=scalar`).
#[cfg(target_arch = "aarch64")]
struct NeonF16;

#[cfg(target_arch = "aarch64")]
impl F16Ops for NeonF16 {
    #[inline(always)]
    fn dot(a: &[f16], b: &[f16]) -> f32 {
        // SAFETY: NEON is part of the aarch64 base architecture.
        unsafe { super::aarch64::f16_ops::dot_f16(a, b) }
    }
    #[inline(always)]
    fn mad(acc: &mut [f16], v: &[f16], s: f32) {
        // SAFETY: as above.
        unsafe { super::aarch64::f16_ops::mad_f16(acc, v, s) }
    }
    #[inline(always)]
    fn scale(acc: &mut [f16], s: f32) {
        // SAFETY: as above.
        unsafe { super::aarch64::f16_ops::scale_f16(acc, s) }
    }
    #[inline(always)]
    fn to_f16(src: &[f32], dst: &mut [f16]) {
        // SAFETY: as above.
        unsafe { super::aarch64::f16_ops::to_f16(src, dst) }
    }
    #[inline(always)]
    fn to_f32_scaled(src: &[f16], s: f32, dst: &mut [f32]) {
        // SAFETY: as above.
        unsafe { super::aarch64::f16_ops::to_f32_scaled(src, s, dst) }
    }
}

/// AVX-512 [`F16Ops`] (only used once the features were detected).
#[cfg(target_arch = "x86_64")]
struct Avx512F16;

#[cfg(target_arch = "x86_64")]
impl F16Ops for Avx512F16 {
    #[inline(always)]
    fn dot(a: &[f16], b: &[f16]) -> f32 {
        // SAFETY: Avx512F16 is only used behind `f16_ops::available()`.
        unsafe { super::x86_64::f16_ops::dot_f16(a, b) }
    }
    #[inline(always)]
    fn mad(acc: &mut [f16], v: &[f16], s: f32) {
        // SAFETY: as above.
        unsafe { super::x86_64::f16_ops::mad_f16(acc, v, s) }
    }
    #[inline(always)]
    fn scale(acc: &mut [f16], s: f32) {
        // SAFETY: as above.
        unsafe { super::x86_64::f16_ops::scale_f16(acc, s) }
    }
    #[inline(always)]
    fn to_f16(src: &[f32], dst: &mut [f16]) {
        // SAFETY: as above.
        unsafe { super::x86_64::f16_ops::to_f16(src, dst) }
    }
    #[inline(always)]
    fn to_f32_scaled(src: &[f16], s: f32, dst: &mut [f32]) {
        // SAFETY: as above.
        unsafe { super::x86_64::f16_ops::to_f32_scaled(src, s, dst) }
    }
}

/// AVX2 + F16C [`F16Ops`] (only used once the features were detected).
#[cfg(target_arch = "x86_64")]
struct Avx2F16;

#[cfg(target_arch = "x86_64")]
impl F16Ops for Avx2F16 {
    #[inline(always)]
    fn dot(a: &[f16], b: &[f16]) -> f32 {
        // SAFETY: Avx2F16 is only used behind `f16_ops_avx2::available()`.
        unsafe { super::x86_64::f16_ops_avx2::dot_f16(a, b) }
    }
    #[inline(always)]
    fn mad(acc: &mut [f16], v: &[f16], s: f32) {
        // SAFETY: as above.
        unsafe { super::x86_64::f16_ops_avx2::mad_f16(acc, v, s) }
    }
    #[inline(always)]
    fn scale(acc: &mut [f16], s: f32) {
        // SAFETY: as above.
        unsafe { super::x86_64::f16_ops_avx2::scale_f16(acc, s) }
    }
    #[inline(always)]
    fn to_f16(src: &[f32], dst: &mut [f16]) {
        // SAFETY: as above.
        unsafe { super::x86_64::f16_ops_avx2::to_f16(src, dst) }
    }
    #[inline(always)]
    fn to_f32_scaled(src: &[f16], s: f32, dst: &mut [f32]) {
        // SAFETY: as above.
        unsafe { super::x86_64::f16_ops_avx2::to_f32_scaled(src, s, dst) }
    }
}

/// [`f16_row`] with the AVX2 vector ops.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_row_avx2(r: &F16Row<'_>, o: &mut [f32]) {
    f16_row::<Avx2F16>(r, o)
}

/// [`f16_row`] compiled with FMA, so `mul_add` is one instruction rather than a libm call.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn f16_row_fma(r: &F16Row<'_>, o: &mut [f32]) {
    f16_row::<ScalarF16>(r, o)
}

/// [`f16_row`] with the AVX-512 vector ops.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn f16_row_avx512(r: &F16Row<'_>, o: &mut [f32]) {
    f16_row::<Avx512F16>(r, o)
}

#[inline(always)]
fn f16_row<O: F16Ops>(r: &F16Row<'_>, o: &mut [f32]) {
    let hd = r.q.len();
    let mut qbuf = [f16::ZERO; MAX_F16_HEAD_DIM];
    let q16 = &mut qbuf[..hd];
    O::to_f16(r.q, q16);
    let mut abuf = [f16::ZERO; MAX_F16_HEAD_DIM];
    let acc = &mut abuf[..hd];
    let mut s_sum = 0f32;
    let mut m = f32::NEG_INFINITY;
    for j in r.keys.0..r.keys.1 {
        let off = r.rows.row(j) * r.kv_stride + r.head_off;
        let mut s = O::dot(&r.k[off..off + hd], q16) * r.scale;
        if r.softcap != 0.0 {
            s = r.softcap * s.tanh();
        }
        let mut ms = 1f32;
        let mut vs = 1f32;
        if s > m {
            let m_old = m;
            m = s;
            ms = (m_old - m).exp();
            // ggml_vec_scale_f16
            O::scale(acc, ms);
        } else {
            vs = (s - m).exp();
        }
        O::mad(acc, &r.v[off..off + hd], vs);
        // `S = S*ms + vs`, contracted to one FMA by the GCC build of ops.cpp (bit-identical to
        // libggml-cpu only this way; tests/ggml_ops.rs).
        s_sum = s_sum.mul_add(ms, vs);
    }
    let inv = if s_sum == 0.0 { 0.0 } else { 1.0 / s_sum };
    O::to_f32_scaled(acc, inv, o);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::{max_abs_diff, Rng};

    /// The AVX2 dot equals the portable one bit for bit (lanes, tail and all), in one call or
    /// in 64-value parts as the f16 path makes them.
    #[test]
    fn dot32_avx2_equals_scalar() {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            let mut rng = Rng::new(21);
            for n in [1usize, 8, 31, 32, 33, 64, 100, 256, 257] {
                let q = rng.vec(n, 3.0);
                let k = rng.vec(n, 3.0);
                let mut a = Dot32::new();
                a.add_scalar(&q, &k);
                let mut b = Dot32::new();
                // SAFETY: features checked above.
                unsafe { b.add_avx2(&q, &k) };
                let mut c = Dot32::new();
                for (qc, kc) in q.chunks(64).zip(k.chunks(64)) {
                    // SAFETY: as above.
                    unsafe { c.add_avx2(qc, kc) };
                }
                let (a, b, c) = (a.finish(), b.finish(), c.finish());
                assert_eq!(a.to_bits(), b.to_bits(), "n {n}");
                assert_eq!(a.to_bits(), c.to_bits(), "n {n} in parts");
            }
        }
    }

    /// Plain f64 attention: full scores over the visible keys, then softmax.
    fn reference(
        q: &[f32],
        positions: &[i32],
        k: &[f32],
        v: &[f32],
        kv_len: usize,
        p: &AttentionParams,
    ) -> Vec<f64> {
        let hd = p.head_dim;
        let mut out = vec![0f64; q.len()];
        for (t, &pos) in positions.iter().enumerate() {
            for h in 0..p.n_head {
                let kvh = h / (p.n_head / p.n_kv_head);
                let qr = &q[(t * p.n_head + h) * hd..][..hd];
                let vis: Vec<usize> = (0..kv_len)
                    .filter(|&j| {
                        (j as i64) <= pos as i64
                            && (p.window == 0 || (pos as i64 - j as i64) < p.window as i64)
                    })
                    .collect();
                let s: Vec<f64> = vis
                    .iter()
                    .map(|&j| {
                        let kr = &k[(j * p.n_kv_head + kvh) * hd..][..hd];
                        let mut x = qr
                            .iter()
                            .zip(kr)
                            .map(|(a, b)| *a as f64 * *b as f64)
                            .sum::<f64>()
                            * p.scale as f64;
                        if p.softcap != 0.0 {
                            let c = p.softcap as f64;
                            x = c * (x / c).tanh();
                        }
                        x
                    })
                    .collect();
                let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = s.iter().map(|x| (x - max).exp()).sum();
                let o = &mut out[(t * p.n_head + h) * hd..][..hd];
                for (&j, &x) in vis.iter().zip(&s) {
                    let w = (x - max).exp() / sum;
                    let vr = &v[(j * p.n_kv_head + kvh) * hd..][..hd];
                    for d in 0..hd {
                        o[d] += w * vr[d] as f64;
                    }
                }
            }
        }
        out
    }

    fn check(p: AttentionParams, positions: &[i32], kv_len: usize, cap: usize, f16_kv: bool) {
        let mut rng = Rng::new(21 + kv_len as u64);
        let q = rng.vec(positions.len() * p.n_head * p.head_dim, 1.0);
        let mut k = rng.vec(cap * p.n_kv_head * p.head_dim, 1.0);
        let mut v = rng.vec(cap * p.n_kv_head * p.head_dim, 1.0);
        let (kh, vh): (Vec<f16>, Vec<f16>);
        let (ks, vs) = if f16_kv {
            kh = k.iter().map(|&x| f16::from_f32(x)).collect();
            vh = v.iter().map(|&x| f16::from_f32(x)).collect();
            // The reference sees exactly the rounded values.
            k = kh.iter().map(|x| x.to_f32()).collect();
            v = vh.iter().map(|x| x.to_f32()).collect();
            (KvSlice::F16(&kh), KvSlice::F16(&vh))
        } else {
            (KvSlice::F32(&k), KvSlice::F32(&v))
        };
        let mut out = vec![f32::NAN; q.len()];
        attention(&q, positions, ks, vs, kv_len, &p, &mut out).unwrap();
        // Fewer than GGML_FA_TILE_Q rows over f16 KV round as llama.cpp does: the query to f16
        // (given to the reference too) and the output accumulated in f16 (the tolerance).
        let ggml_f16 = f16_kv && positions.len() < GGML_FA_TILE_Q;
        let q_ref: Vec<f32> = if ggml_f16 {
            q.iter().map(|&x| f16::from_f32(x).to_f32()).collect()
        } else {
            q.clone()
        };
        let want = reference(&q_ref, positions, &k, &v, kv_len, &p);
        let err = max_abs_diff(&out, &want);
        let tol = if ggml_f16 { 4e-3 } else { 1e-5 };
        if ggml_f16 {
            eprintln!(
                "f16 accumulator: kv_len={kv_len} window={} err {err:.2e}",
                p.window
            );
        }
        assert!(err < tol, "{p:?} f16={f16_kv} kv_len={kv_len}: err {err}");
    }

    #[test]
    fn prefill_and_decode_match_f64_with_gqa_window_and_cap() {
        let base = AttentionParams {
            n_head: 4,
            n_kv_head: 2,
            head_dim: 32,
            scale: 1.0 / (32f32).sqrt(),
            softcap: 0.0,
            window: 0,
        };
        // Prefill: 150 tokens at positions 0..150 (crosses key blocks of 64).
        let prefill: Vec<i32> = (0..150).collect();
        // Decode: one token at the end of a cache preallocated to 300 rows.
        for f16_kv in [false, true] {
            check(base, &prefill, 150, 150, f16_kv);
            check(base, &[199], 200, 300, f16_kv);
            check(
                AttentionParams { window: 17, ..base },
                &prefill,
                150,
                150,
                f16_kv,
            );
            check(
                AttentionParams { window: 70, ..base },
                &[199],
                200,
                300,
                f16_kv,
            );
            check(
                AttentionParams {
                    softcap: 0.5,
                    scale: 1.0,
                    ..base
                },
                &prefill[..40],
                40,
                64,
                f16_kv,
            );
            check(
                AttentionParams {
                    n_kv_head: 1,
                    head_dim: 80,
                    ..base
                },
                &[3, 4, 5],
                6,
                6,
                f16_kv,
            );
            check(
                AttentionParams {
                    n_kv_head: 4,
                    ..base
                },
                &[10, 11],
                12,
                12,
                f16_kv,
            );
        }
        // A chunk of a longer prompt: queries at 100..110 over 110 cached keys.
        let chunk: Vec<i32> = (100..110).collect();
        check(
            AttentionParams { window: 64, ..base },
            &chunk,
            110,
            128,
            false,
        );
    }

    #[test]
    fn window_boundary_is_llama_cpp_s() {
        // p - j >= w is masked: with w = 3 a query at 10 sees 8, 9, 10.
        assert_eq!(visible_keys(10, 100, 3), (8, 11));
        assert_eq!(visible_keys(10, 100, 0), (0, 11));
        assert_eq!(visible_keys(1, 100, 5), (0, 2));
        assert_eq!(visible_keys(10, 5, 0), (0, 5));
        assert_eq!(visible_keys(-1, 5, 0), (0, 0));
        assert_eq!(visible_keys(20, 5, 3), (5, 5));
    }

    #[test]
    fn no_visible_key_gives_zeros_and_bad_sizes_error() {
        let p = AttentionParams {
            n_head: 2,
            n_kv_head: 1,
            head_dim: 4,
            scale: 1.0,
            softcap: 0.0,
            window: 0,
        };
        let q = vec![1f32; 8];
        let kv = vec![1f32; 4 * 3];
        let mut out = vec![f32::NAN; 8];
        attention(
            &q,
            &[-1],
            KvSlice::F32(&kv),
            KvSlice::F32(&kv),
            3,
            &p,
            &mut out,
        )
        .unwrap();
        assert!(out.iter().all(|&x| x == 0.0));
        assert!(attention(
            &q,
            &[0],
            KvSlice::F32(&kv),
            KvSlice::F32(&kv),
            4,
            &p,
            &mut out
        )
        .is_err());
        assert!(attention(
            &q,
            &[0, 1],
            KvSlice::F32(&kv),
            KvSlice::F32(&kv),
            3,
            &p,
            &mut out
        )
        .is_err());
        let bad = AttentionParams { n_kv_head: 3, ..p };
        assert!(attention(
            &q,
            &[0],
            KvSlice::F32(&kv),
            KvSlice::F32(&kv),
            3,
            &bad,
            &mut out
        )
        .is_err());
    }

    /// A paged cache (blocks of 4 rows, in a shuffled order, with unused blocks between) gives
    /// bit-identical outputs to the same positions stored contiguously, on every kernel path:
    /// f32, f16 decode (llama.cpp rounding), f16 long prefill (widened), windowed.
    #[test]
    fn paged_reads_equal_contiguous_bit_for_bit() {
        let mut rng = Rng::new(11);
        let (n_head, n_kv_head, hd, bs) = (4, 2, 32, 4);
        let stride = n_kv_head * hd;
        for (n_q, kv_len, window) in [(1, 37, 0), (3, 21, 0), (70, 70, 0), (5, 29, 8)] {
            let p = AttentionParams {
                n_head,
                n_kv_head,
                head_dim: hd,
                scale: 0.2,
                softcap: 0.0,
                window,
            };
            let kc: Vec<f32> = (0..kv_len * stride).map(|_| rng.f32()).collect();
            let vc: Vec<f32> = (0..kv_len * stride).map(|_| rng.f32()).collect();
            let n_blocks = kv_len.div_ceil(bs);
            // Block b of the sequence lives in physical block 2 * (n_blocks - 1 - b) + 1.
            let table: Vec<u32> = (0..n_blocks)
                .map(|b| (2 * (n_blocks - 1 - b) + 1) as u32)
                .collect();
            let phys_rows = 2 * n_blocks * bs;
            let mut kp = vec![9.0f32; phys_rows * stride];
            let mut vp = vec![9.0f32; phys_rows * stride];
            let rows = KvRows::paged(&table, bs).unwrap();
            for j in 0..kv_len {
                let (src, dst) = (j * stride, rows.row(j) * stride);
                kp[dst..dst + stride].copy_from_slice(&kc[src..src + stride]);
                vp[dst..dst + stride].copy_from_slice(&vc[src..src + stride]);
            }
            let q: Vec<f32> = (0..n_q * n_head * hd).map(|_| rng.f32()).collect();
            let positions: Vec<i32> = (kv_len - n_q..kv_len).map(|x| x as i32).collect();
            let h = |x: &[f32]| x.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>();
            let (kch, vch, kph, vph) = (h(&kc), h(&vc), h(&kp), h(&vp));
            for f16_cache in [false, true] {
                let (a, b, c, d) = if f16_cache {
                    (
                        KvSlice::F16(&kch),
                        KvSlice::F16(&vch),
                        KvSlice::F16(&kph),
                        KvSlice::F16(&vph),
                    )
                } else {
                    (
                        KvSlice::F32(&kc),
                        KvSlice::F32(&vc),
                        KvSlice::F32(&kp),
                        KvSlice::F32(&vp),
                    )
                };
                let mut want = vec![0f32; q.len()];
                let mut got = vec![1f32; q.len()];
                attention(&q, &positions, a, b, kv_len, &p, &mut want).unwrap();
                attention_paged(&q, &positions, c, d, kv_len, rows, &p, &mut got).unwrap();
                assert_eq!(want, got, "n_q {n_q} kv_len {kv_len} f16 {f16_cache}");
            }
            // A table that does not cover kv_len, or names a block outside the cache, is refused.
            let short = KvRows::paged(&table[..n_blocks - 1], bs).unwrap();
            let mut out = vec![0f32; q.len()];
            let (k, v) = (KvSlice::F32(&kp), KvSlice::F32(&vp));
            assert!(attention_paged(&q, &positions, k, v, kv_len, short, &p, &mut out).is_err());
            let far = vec![1000u32; n_blocks];
            let far = KvRows::paged(&far, bs).unwrap();
            assert!(attention_paged(&q, &positions, k, v, kv_len, far, &p, &mut out).is_err());
        }
        assert!(KvRows::paged(&[0], 3).is_err());
    }

    /// q8_0 and q4_0 caches are read block by block, and give what attention over their
    /// dequantized values gives (to f32 rounding), through a paged table too.
    #[test]
    fn quantized_caches_match_their_dequantized_values() {
        use kestrel_gguf::quant::{q4_0, q8_0};
        let mut rng = Rng::new(5);
        let (n_head, n_kv_head, hd, kv_len, n_q) = (4, 2, 64, 19, 3);
        let stride = n_kv_head * hd;
        let p = AttentionParams {
            n_head,
            n_kv_head,
            head_dim: hd,
            scale: 0.125,
            softcap: 0.0,
            window: 0,
        };
        let kc: Vec<f32> = (0..kv_len * stride).map(|_| rng.f32()).collect();
        let vc: Vec<f32> = (0..kv_len * stride).map(|_| rng.f32()).collect();
        let q: Vec<f32> = (0..n_q * n_head * hd).map(|_| rng.f32()).collect();
        let positions: Vec<i32> = (kv_len - n_q..kv_len).map(|x| x as i32).collect();
        let table: Vec<u32> = (0..kv_len.div_ceil(4) as u32).rev().collect();
        for rows in [KvRows::CONTIGUOUS, KvRows::paged(&table, 4).unwrap()] {
            let phys = |x: &[f32]| {
                let n = table.len() * 4;
                let mut out = vec![0f32; n.max(kv_len) * stride];
                for j in 0..kv_len {
                    let r = rows.row(j);
                    out[r * stride..(r + 1) * stride]
                        .copy_from_slice(&x[j * stride..(j + 1) * stride]);
                }
                out
            };
            let (kp, vp) = (phys(&kc), phys(&vc));
            let mut k8 = vec![
                BlockQ8_0 {
                    d: f16::ZERO,
                    qs: [0; 32]
                };
                kp.len() / 32
            ];
            let mut v8 = k8.clone();
            q8_0::quantize_row(&kp, &mut k8).unwrap();
            q8_0::quantize_row(&vp, &mut v8).unwrap();
            let mut k4 = vec![
                BlockQ4_0 {
                    d: f16::ZERO,
                    qs: [0; 16]
                };
                kp.len() / 32
            ];
            let mut v4 = k4.clone();
            q4_0::quantize_row(&kp, &mut k4).unwrap();
            q4_0::quantize_row(&vp, &mut v4).unwrap();
            let deq8 = |b: &[BlockQ8_0]| {
                let mut o = vec![0f32; b.len() * 32];
                q8_0::dequantize_blocks(b, &mut o).unwrap();
                o
            };
            let deq4 = |b: &[BlockQ4_0]| {
                let mut o = vec![0f32; b.len() * 32];
                q4_0::dequantize_blocks(b, &mut o).unwrap();
                o
            };
            for (k, v, dk, dv) in [
                (KvSlice::Q8_0(&k8), KvSlice::Q8_0(&v8), deq8(&k8), deq8(&v8)),
                (KvSlice::Q4_0(&k4), KvSlice::Q4_0(&v4), deq4(&k4), deq4(&v4)),
            ] {
                let mut want = vec![0f32; q.len()];
                let mut got = vec![0f32; q.len()];
                let (dk, dv) = (KvSlice::F32(&dk), KvSlice::F32(&dv));
                let wide = |x: &[f32]| x.iter().map(|&v| v as f64).collect::<Vec<f64>>();
                attention_paged(&q, &positions, dk, dv, kv_len, rows, &p, &mut want).unwrap();
                attention_paged(&q, &positions, k, v, kv_len, rows, &p, &mut got).unwrap();
                assert!(
                    max_abs_diff(&got, &wide(&want)) < 1e-5,
                    "{}",
                    max_abs_diff(&got, &wide(&want))
                );
            }
        }
        // Mixed or misaligned quantized caches are refused.
        let k8 = vec![
            BlockQ8_0 {
                d: f16::ONE,
                qs: [1; 32]
            };
            8
        ];
        let k4 = vec![
            BlockQ4_0 {
                d: f16::ONE,
                qs: [0x88; 16]
            };
            8
        ];
        let mut out = vec![0f32; n_head * hd];
        let one = &q[..n_head * hd];
        assert!(attention(
            one,
            &[0],
            KvSlice::Q8_0(&k8),
            KvSlice::Q4_0(&k4),
            1,
            &p,
            &mut out
        )
        .is_err());
    }
}
