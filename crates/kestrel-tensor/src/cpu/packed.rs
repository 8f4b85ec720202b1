//! Weights repacked once, at load, into a layout a faster kernel reads: [`PackedWeight`] and
//! [`matmul_packed`]. As llama.cpp's CPU "repack" buffers do, groups of rows are interleaved so
//! that one SIMD load feeds many rows at once and a block's whole dot product lands in one lane,
//! with one float multiply-add per block for 16 outputs instead of one per output.
//!
//! The one layout so far is **Q4_0x16**, for Q4_0 matrices whose row count is a multiple of
//! 16, on CPUs with AVX-512 VNNI: per group of 16 rows, for each of the `nb` blocks of a row,
//! 256 quant bytes (`for c in 0..4, for r in 0..16: bytes 4c..4c + 4 of row r's block`), then
//! the group's `nb × 16` f16 scales (block-major). The quants are the file's bytes, moved, not
//! converted: the packed matrix is exactly as large as the original.
//!
//! Numerics: per weight row and activation row, `acc = fma(f32(Σ_block (q - 8)·a), d_w·d_x,
//! acc)` over the blocks in order, the block sum exact in integers. That is llama.cpp's
//! repacked Q4_0 GEMM (`ggml_gemm_q4_0_8x8_q8_0`), and it differs in the last bits from the
//! unpacked path (which converts 8 partial lane sums per block to float, as ggml's AVX2
//! `vec_dot` does). It does not depend on how many activation rows a call has, so a batched
//! step gives each sequence what it would get alone.

use std::sync::{Arc, Mutex, Weak};

use kestrel_gguf::quant::BlockQ8_0;
use rayon::prelude::*;

use super::matmul::MatmulScratch;
use super::out_ptr::OutPtr;
use super::q8::quantize_row_q8_0;
use crate::error::{Result, TensorError};
use crate::storage::Storage;
use crate::{DType, Tensor};

/// Rows per packed group.
pub(crate) const GROUP_ROWS: usize = 16;

/// Quant bytes of one block of a group (16 rows × 16 bytes).
pub(crate) const GROUP_BLOCK_BYTES: usize = GROUP_ROWS * 16;

/// Bytes of one block of a group: quants and 16 f16 scales.
const GROUP_BLOCK_ALL: usize = GROUP_BLOCK_BYTES + GROUP_ROWS * 2;

/// Bytes of a Q4_0 block: f16 scale, 16 bytes of nibbles.
const Q4_0_BYTES: usize = 18;

/// Activation rows the kernel takes per call.
const MAX_ACTS: usize = 8;

/// Groups per rayon task are chosen so each thread gets about this many tasks.
const TASKS_PER_THREAD: usize = 4;

/// Activation values up to which the activation rows are converted on the calling thread.
const SERIAL_QUANTIZE: usize = 1 << 15;

/// A layout of [`PackedWeight`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PackedLayout {
    /// Q4_0, 16 rows interleaved 4 bytes at a time (see the module docs).
    Q4_0x16,
}

/// A weight matrix repacked for [`matmul_packed`].
pub struct PackedWeight {
    layout: PackedLayout,
    m: usize,
    k: usize,
    buf: crate::storage::AlignedBuf,
    /// The tensor it was packed from, when [`PackedWeight::for_tensor`] shares it: keeps the
    /// bytes its cache key points at alive.
    _source: Option<Tensor>,
}

impl std::fmt::Debug for PackedWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedWeight({:?}, {}×{})", self.layout, self.m, self.k)
    }
}

/// The activation side of a call: q8_0 rows and, per block, `-8 · Σ q` and `d` as f32.
#[derive(Clone, Copy)]
pub(crate) struct ActSide<'a> {
    pub(crate) acts: &'a [BlockQ8_0],
    pub(crate) corr: &'a [i32],
    pub(crate) d: &'a [f32],
}

impl ActSide<'_> {
    /// Rows `t0..t1` of `nb` blocks each.
    fn rows(&self, t0: usize, t1: usize, nb: usize) -> ActSide<'_> {
        ActSide {
            acts: &self.acts[t0 * nb..t1 * nb],
            corr: &self.corr[t0 * nb..t1 * nb],
            d: &self.d[t0 * nb..t1 * nb],
        }
    }
}

/// Whether a packed layout runs fast here (packing is pointless otherwise) and is wanted:
/// `KESTREL_REPACK=0` turns packing off.
fn packing_enabled() -> bool {
    if std::env::var("KESTREL_REPACK").is_ok_and(|v| v.trim() == "0") {
        return false;
    }
    super::dispatch::active_isa() >= super::dispatch::Isa::Avx512
}

/// Packed matrices shared by every plan of a process, keyed by the source bytes' address and
/// length (each entry's [`PackedWeight`] keeps its source alive, so a live entry's key cannot
/// be reused by other bytes).
static SHARED: Mutex<Vec<(usize, usize, Weak<PackedWeight>)>> = Mutex::new(Vec::new());

impl PackedWeight {
    /// Packs `m` rows of `k` elements of `dtype` (raw bytes `w`), or `None` when no packed
    /// layout serves this matrix on this CPU (not Q4_0, rows not a multiple of 16, no AVX-512
    /// VNNI, or `KESTREL_REPACK=0`).
    pub fn pack(w: &[u8], dtype: DType, m: usize, k: usize) -> Option<PackedWeight> {
        if !packing_enabled() {
            return None;
        }
        PackedWeight::pack_q4_0x16(w, dtype, m, k)
    }

    /// [`PackedWeight::pack`] whatever the CPU (the layout itself; tests run the scalar twin).
    fn pack_q4_0x16(w: &[u8], dtype: DType, m: usize, k: usize) -> Option<PackedWeight> {
        if dtype != DType::Q4_0
            || m == 0
            || !m.is_multiple_of(GROUP_ROWS)
            || k == 0
            || !k.is_multiple_of(32)
        {
            return None;
        }
        let nb = k / 32;
        let row_bytes = nb * Q4_0_BYTES;
        if m.checked_mul(row_bytes) != Some(w.len()) {
            return None;
        }
        let group_bytes = nb * GROUP_BLOCK_ALL;
        let mut buf = crate::storage::AlignedBuf::zeroed(w.len());
        let dst = buf.as_bytes_mut();
        for (g, out) in dst.chunks_exact_mut(group_bytes).enumerate() {
            let (quants, scales) = out.split_at_mut(nb * GROUP_BLOCK_BYTES);
            for r in 0..GROUP_ROWS {
                let row = &w[(g * GROUP_ROWS + r) * row_bytes..][..row_bytes];
                for (b, blk) in row.chunks_exact(Q4_0_BYTES).enumerate() {
                    scales[(b * GROUP_ROWS + r) * 2..][..2].copy_from_slice(&blk[..2]);
                    for c in 0..4 {
                        let at = b * GROUP_BLOCK_BYTES + c * 64 + r * 4;
                        quants[at..at + 4].copy_from_slice(&blk[2 + 4 * c..2 + 4 * c + 4]);
                    }
                }
            }
        }
        Some(PackedWeight {
            layout: PackedLayout::Q4_0x16,
            m,
            k,
            buf,
            _source: None,
        })
    }

    /// The packed form of a weight tensor (rows × row length), shared with every other caller
    /// that asks for the same bytes while one of them holds it: the prefill and decode plans of
    /// a model pack each matrix once. `None` as for [`PackedWeight::pack`].
    pub fn for_tensor(t: &Tensor) -> Option<Arc<PackedWeight>> {
        let shape = t.shape();
        let (m, k) = (shape.n_rows(), shape.row_len());
        let bytes = t.as_bytes();
        let key = (bytes.as_ptr() as usize, bytes.len());
        let shared = matches!(t.storage(), Storage::Shared { .. });
        if !shared {
            return PackedWeight::pack(bytes, t.dtype(), m, k).map(Arc::new);
        }
        let mut cache = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        cache.retain(|(_, _, w)| w.strong_count() > 0);
        if let Some(p) = cache
            .iter()
            .find(|(a, l, _)| (*a, *l) == key)
            .and_then(|(_, _, w)| w.upgrade())
        {
            return Some(p);
        }
        let mut p = PackedWeight::pack(bytes, t.dtype(), m, k)?;
        release_pages(bytes);
        p._source = Some(t.clone());
        let p = Arc::new(p);
        cache.push((key.0, key.1, Arc::downgrade(&p)));
        Some(p)
    }

    /// The layout.
    pub fn layout(&self) -> PackedLayout {
        self.layout
    }

    /// Rows (outputs of a matmul).
    pub fn rows(&self) -> usize {
        self.m
    }

    /// Elements per row (the matmul's inner dimension).
    pub fn row_len(&self) -> usize {
        self.k
    }

    /// Bytes the packed matrix takes.
    pub fn nbytes(&self) -> usize {
        self.buf.len()
    }
}

/// `out[t·m + r] = Σ_j x[t·k + j] · W[r][j]` for a packed `W` (`m = w.rows()`, `k =
/// w.row_len()`), with the numerics of the module docs. The activation rows are converted to
/// q8_0 in `scratch`; work splits over groups of 16 rows in the current rayon pool.
///
/// # Errors
/// `LengthMismatch` if `x` is not `n` rows of `w.row_len()` or `out` not `n` rows of
/// `w.rows()`.
pub fn matmul_packed(
    x: &[f32],
    n: usize,
    w: &PackedWeight,
    out: &mut [f32],
    scratch: &mut MatmulScratch,
) -> Result<()> {
    let (m, k) = (w.m, w.k);
    for (what, expected, actual) in [
        ("x", n.checked_mul(k), x.len()),
        ("out", n.checked_mul(m), out.len()),
    ] {
        if expected != Some(actual) {
            return Err(TensorError::LengthMismatch {
                op: "matmul_packed",
                what,
                expected: expected.unwrap_or(usize::MAX),
                actual,
            });
        }
    }
    if n == 0 {
        return Ok(());
    }
    let nb = k / 32;
    let (acts, corr, d) = scratch.packed_parts(n * nb);
    let convert = |((a, c), dd): ((&mut [BlockQ8_0], &mut [i32]), &mut [f32]), t: usize| {
        quantize_row_q8_0(&x[t * k..(t + 1) * k], a);
        for ((b, c), dd) in a.iter().zip(c.iter_mut()).zip(dd.iter_mut()) {
            *c = -8 * b.qs.iter().map(|&q| i32::from(q)).sum::<i32>();
            *dd = b.d.to_f32();
        }
    };
    if n * k <= SERIAL_QUANTIZE {
        // A few rows (decode): quicker here than a parallel region.
        let rows = acts
            .chunks_mut(nb)
            .zip(corr.chunks_mut(nb))
            .zip(d.chunks_mut(nb));
        rows.enumerate().for_each(|(t, r)| convert(r, t));
    } else {
        let rows = acts
            .par_chunks_mut(nb)
            .zip(corr.par_chunks_mut(nb))
            .zip(d.par_chunks_mut(nb));
        rows.enumerate().for_each(|(t, r)| convert(r, t));
    }
    let act = ActSide {
        acts: &*acts,
        corr: &*corr,
        d: &*d,
    };
    let groups = m / GROUP_ROWS;
    let group_bytes = nb * GROUP_BLOCK_ALL;
    let threads = rayon::current_num_threads().max(1);
    let per_task = groups.div_ceil(threads * TASKS_PER_THREAD).max(1);
    let out_ptr = OutPtr::new(out);
    let bytes = w.buf.as_bytes();
    (0..groups.div_ceil(per_task))
        .into_par_iter()
        .for_each(|task| {
            let mut o = [0f32; MAX_ACTS * GROUP_ROWS];
            for g in task * per_task..((task + 1) * per_task).min(groups) {
                let group = &bytes[g * group_bytes..(g + 1) * group_bytes];
                prefetch_next(group);
                let mut t0 = 0;
                while t0 < n {
                    let tn = (n - t0).min(MAX_ACTS);
                    let o = &mut o[..tn * GROUP_ROWS];
                    group_tile(group, nb, act.rows(t0, t0 + tn, nb), o);
                    for (i, r) in o.chunks_exact(GROUP_ROWS).enumerate() {
                        // SAFETY: row t0 + i < n and columns g·16..g·16 + 16 <= m, so the
                        // range is in bounds of `out` (n·m, checked); group g is this task's.
                        unsafe { out_ptr.write_row((t0 + i) * m + g * GROUP_ROWS, r) };
                    }
                    t0 += tn;
                }
            }
        });
    Ok(())
}

/// Hands the pages wholly inside `bytes` (a packed matrix's source in the model's memory map,
/// never read again) back to the OS, so the packed copy does not add to the resident memory.
/// `MADV_PAGEOUT` only reclaims: the contents stay as they were (file pages are read again on a
/// later access, anonymous ones come back from swap), so this is sound whatever owns the bytes.
/// Advisory: an older kernel that refuses it changes nothing.
fn release_pages(bytes: &[u8]) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let start = (bytes.as_ptr() as usize).next_multiple_of(page.max(1));
        let end = (bytes.as_ptr() as usize + bytes.len()) / page.max(1) * page.max(1);
        if end > start {
            // SAFETY: the range lies inside `bytes`, which is mapped; MADV_PAGEOUT does not
            // change what the memory holds (see above). The result is advisory and ignored.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_PAGEOUT) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = bytes;
}

/// Asks for the bytes after `group` (the next group, when a task walks its groups in order) to
/// be brought into cache while this one computes.
#[inline]
fn prefetch_next(group: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let next = group.as_ptr().wrapping_add(group.len());
        for off in (0..group.len()).step_by(64) {
            // SAFETY: prefetching reads nothing and cannot fault, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(off).cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = group;
}

/// One group against 1 to [`MAX_ACTS`] activation rows: the AVX-512 kernel when the CPU runs
/// it, else the scalar twin.
fn group_tile(group: &[u8], nb: usize, act: ActSide<'_>, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::dispatch::active_isa() >= super::dispatch::Isa::Avx512 {
        // SAFETY: the active ISA is AVX-512, so the CPU has the kernel's features.
        unsafe { super::x86_64::q4_0x16::group_tile(group, nb, act, out) };
        return;
    }
    tile_scalar(group, nb, act, out)
}

/// The scalar twin of the AVX-512 kernel: `out[t · 16 + r]` for the group's 16 rows and the
/// activation rows of `act`.
pub(crate) fn tile_scalar(group: &[u8], nb: usize, act: ActSide<'_>, out: &mut [f32]) {
    let (quants, scales) = group.split_at(nb * GROUP_BLOCK_BYTES);
    let n_act = act.acts.len() / nb;
    for t in 0..n_act {
        for r in 0..GROUP_ROWS {
            let mut acc = 0f32;
            for b in 0..nb {
                let i = t * nb + b;
                let a = &act.acts[i].qs;
                let mut sum = act.corr[i];
                for c in 0..4 {
                    for j in 0..4 {
                        let q = quants[b * GROUP_BLOCK_BYTES + c * 64 + r * 4 + j];
                        sum += i32::from(q & 0x0F) * i32::from(a[4 * c + j]);
                        sum += i32::from(q >> 4) * i32::from(a[16 + 4 * c + j]);
                    }
                }
                let s = &scales[(b * GROUP_ROWS + r) * 2..][..2];
                let dw = half::f16::from_le_bytes([s[0], s[1]]).to_f32();
                acc = (sum as f32).mul_add(dw * act.d[i], acc);
            }
            out[t * GROUP_ROWS + r] = acc;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::{quantized_rows, Rng};

    /// Q4_0 rows dotted with q8_0 activations in the packed numerics, from the unpacked bytes.
    fn reference(w: &[u8], m: usize, k: usize, x: &[f32], n: usize) -> Vec<f32> {
        let nb = k / 32;
        let mut out = vec![0f32; n * m];
        for t in 0..n {
            let mut a = vec![BlockQ8_0::zeroed(); nb];
            quantize_row_q8_0(&x[t * k..(t + 1) * k], &mut a);
            for r in 0..m {
                let mut acc = 0f32;
                for (b, ab) in a.iter().enumerate() {
                    let blk = &w[(r * nb + b) * Q4_0_BYTES..][..Q4_0_BYTES];
                    let mut sum = 0i32;
                    for j in 0..16 {
                        let q = blk[2 + j];
                        sum += (i32::from(q & 0x0F) - 8) * i32::from(ab.qs[j]);
                        sum += (i32::from(q >> 4) - 8) * i32::from(ab.qs[16 + j]);
                    }
                    let dw = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
                    acc = (sum as f32).mul_add(dw * ab.d.to_f32(), acc);
                }
                out[t * m + r] = acc;
            }
        }
        out
    }

    use bytemuck::Zeroable;

    fn case(seed: u64, m: usize, k: usize, n: usize) {
        let mut rng = Rng::new(seed);
        let (w, _) = quantized_rows(&mut rng, DType::Q4_0, m, k);
        let x = rng.vec(n * k, 1.0);
        let want = reference(&w, m, k, &x, n);
        let p = PackedWeight::pack_q4_0x16(&w, DType::Q4_0, m, k).expect("packs");
        assert_eq!(p.nbytes(), w.len());
        let mut got = vec![0f32; n * m];
        matmul_packed(&x, n, &p, &mut got, &mut MatmulScratch::new()).unwrap();
        assert_eq!(got, want, "m {m} k {k} n {n}");
        // The scalar twin, group by group, gives the same bits.
        let nb = k / 32;
        let mut s = MatmulScratch::new();
        let (acts, corr, d) = s.packed_parts(n * nb);
        for t in 0..n {
            quantize_row_q8_0(&x[t * k..(t + 1) * k], &mut acts[t * nb..(t + 1) * nb]);
        }
        for (i, b) in acts.iter().enumerate() {
            corr[i] = -8 * b.qs.iter().map(|&q| i32::from(q)).sum::<i32>();
            d[i] = b.d.to_f32();
        }
        let act = ActSide {
            acts: &*acts,
            corr: &*corr,
            d: &*d,
        };
        let gb = nb * GROUP_BLOCK_ALL;
        for g in 0..m / GROUP_ROWS {
            let mut o = vec![0f32; n * GROUP_ROWS];
            tile_scalar(&p.buf.as_bytes()[g * gb..(g + 1) * gb], nb, act, &mut o);
            for t in 0..n {
                assert_eq!(
                    &o[t * GROUP_ROWS..(t + 1) * GROUP_ROWS],
                    &want[t * m + g * GROUP_ROWS..t * m + (g + 1) * GROUP_ROWS]
                );
            }
        }
    }

    #[test]
    fn packed_q4_0_equals_its_reference_for_any_row_count() {
        for (seed, (m, k, n)) in [
            (16, 32, 1),
            (32, 64, 3),
            (48, 576, 8),
            (64, 320, 9),
            (16, 2048, 17),
        ]
        .into_iter()
        .enumerate()
        {
            case(seed as u64 + 1, m, k, n);
        }
    }

    #[test]
    fn a_row_does_not_depend_on_the_other_rows_of_the_call() {
        let (m, k) = (32, 256);
        let mut rng = Rng::new(7);
        let (w, _) = quantized_rows(&mut rng, DType::Q4_0, m, k);
        let x = rng.vec(11 * k, 1.0);
        let p = PackedWeight::pack_q4_0x16(&w, DType::Q4_0, m, k).unwrap();
        let mut all = vec![0f32; 11 * m];
        matmul_packed(&x, 11, &p, &mut all, &mut MatmulScratch::new()).unwrap();
        for t in 0..11 {
            let mut one = vec![0f32; m];
            let xr = &x[t * k..(t + 1) * k];
            matmul_packed(xr, 1, &p, &mut one, &mut MatmulScratch::new()).unwrap();
            assert_eq!(one, all[t * m..(t + 1) * m]);
        }
    }

    #[test]
    fn only_q4_0_with_whole_groups_packs() {
        let mut rng = Rng::new(3);
        let (w, _) = quantized_rows(&mut rng, DType::Q4_0, 24, 64);
        assert!(PackedWeight::pack_q4_0x16(&w, DType::Q4_0, 24, 64).is_none());
        assert!(PackedWeight::pack_q4_0x16(&w[..16 * 36], DType::Q4_0, 16, 64).is_some());
        assert!(PackedWeight::pack_q4_0x16(&w[..16 * 36], DType::Q4_1, 16, 64).is_none());
        assert!(PackedWeight::pack_q4_0x16(&w[..100], DType::Q4_0, 16, 64).is_none());
    }

    #[test]
    fn bad_sizes_are_errors() {
        let mut rng = Rng::new(4);
        let (w, _) = quantized_rows(&mut rng, DType::Q4_0, 16, 64);
        let p = PackedWeight::pack_q4_0x16(&w, DType::Q4_0, 16, 64).unwrap();
        let mut out = vec![0f32; 16];
        let mut s = MatmulScratch::new();
        assert!(matmul_packed(&[0.0; 63], 1, &p, &mut out, &mut s).is_err());
        assert!(matmul_packed(&[0.0; 64], 1, &p, &mut out[..15], &mut s).is_err());
    }
}
