//! What every packed layout shares: rows in groups of [`GROUP_ROWS`], at most [`MAX_ACTS`]
//! activation rows per kernel call, the packing loop ([`pack_groups`], which hands the source
//! pages back as it goes), the activation side's conversion ([`prepare_acts`]) and whether the
//! SIMD kernels run ([`simd`]). The bottom of `packed`: the layouts, their drivers and the
//! per-ISA kernels import it.

use rayon::prelude::*;

use crate::cpu::scratch::MatmulScratch;
use crate::storage::AlignedBuf;

/// Rows per packed group.
pub(crate) const GROUP_ROWS: usize = 16;

/// Activation rows one kernel call takes at most.
pub(crate) const MAX_ACTS: usize = 8;

/// Source bytes packed between two hand-backs of their pages.
const RELEASE_EVERY: usize = 8 << 20;

/// Activation values up to which the activation rows are converted on the calling thread.
const SERIAL_QUANTIZE: usize = 1 << 15;

/// Packs `m` rows of `nb` blocks of `raw` bytes each (`w`) into groups of 16 rows laid out as
/// `[nb × quant bytes][nb × scale bytes]`: `put(r, raw block, quants of block b, scales of block
/// b)` fills row `r`'s part of each block of its group (over a zeroed buffer). With `release`,
/// every [`RELEASE_EVERY`] bytes of `w` packed are handed back to the OS.
pub(crate) fn pack_groups(
    w: &[u8],
    m: usize,
    nb: usize,
    (raw, quant, scale): (usize, usize, usize),
    release: bool,
    put: impl Fn(usize, &[u8], &mut [u8], &mut [u8]),
) -> Option<AlignedBuf> {
    let row_bytes = nb.checked_mul(raw)?;
    if nb == 0 || w.len() != m.checked_mul(row_bytes)? {
        return None;
    }
    let group_bytes = nb.checked_mul(quant + scale)?;
    let mut buf = AlignedBuf::zeroed((m / GROUP_ROWS).checked_mul(group_bytes)?);
    let mut released = 0;
    for (g, out) in buf.as_bytes_mut().chunks_exact_mut(group_bytes).enumerate() {
        let (quants, scales) = out.split_at_mut(nb * quant);
        for r in 0..GROUP_ROWS {
            let row = &w[(g * GROUP_ROWS + r) * row_bytes..][..row_bytes];
            for (b, blk) in row.chunks_exact(raw).enumerate() {
                let q = &mut quants[b * quant..(b + 1) * quant];
                put(r, blk, q, &mut scales[b * scale..(b + 1) * scale]);
            }
        }
        let done = (g + 1) * GROUP_ROWS * row_bytes;
        if release && done - released >= RELEASE_EVERY {
            // From a page before the last end, so the page it straddled goes too.
            release_pages(&w[released.saturating_sub(4096)..done]);
            released = done;
        }
    }
    Some(buf)
}

/// The activation side of a packed matmul: `n` rows of `nb` blocks converted by `quantize`,
/// `per` i32 terms and one f32 per block filled by `terms(block, i32s, f32)`, all in
/// `scratch`; on the calling thread for a few rows (decode), in parallel otherwise.
#[allow(clippy::too_many_arguments)]
pub(crate) fn prepare_acts<'s, A: bytemuck::Pod + Send + Sync>(
    x: &[f32],
    n: usize,
    k: usize,
    nb: usize,
    per: usize,
    scratch: &'s mut MatmulScratch,
    quantize: fn(&[f32], &mut [A]),
    terms: impl Fn(&A, &mut [i32], &mut f32) + Sync,
) -> (&'s [A], &'s [i32], &'s [f32]) {
    let (acts, ints, floats) = scratch.packed_parts::<A>(n * nb, n * nb * per);
    type Row<'r, A> = ((&'r mut [A], &'r mut [i32]), &'r mut [f32]);
    let convert = |(t, ((a, c), f)): (usize, Row<'_, A>)| {
        quantize(&x[t * k..(t + 1) * k], a);
        for ((b, c), f) in a.iter().zip(c.chunks_exact_mut(per)).zip(f.iter_mut()) {
            terms(b, c, f);
        }
    };
    if n * k <= SERIAL_QUANTIZE {
        let rows = acts
            .chunks_mut(nb)
            .zip(ints.chunks_mut(nb * per))
            .zip(floats.chunks_mut(nb));
        rows.enumerate().for_each(convert);
    } else {
        let rows = acts
            .par_chunks_mut(nb)
            .zip(ints.par_chunks_mut(nb * per))
            .zip(floats.par_chunks_mut(nb));
        rows.enumerate().for_each(convert);
    }
    (&*acts, &*ints, &*floats)
}

/// Hands the pages wholly inside `bytes` (a packed matrix's source in the model's memory map,
/// never read again) back to the OS, so the packed copy does not add to the resident memory.
/// `MADV_PAGEOUT` only reclaims: the contents stay as they were (file pages are read again on a
/// later access, anonymous ones come back from swap), so this is sound whatever owns the bytes.
/// Advisory: an older kernel that refuses it changes nothing.
pub(crate) fn release_pages(bytes: &[u8]) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let page = page.max(1);
        let start = (bytes.as_ptr() as usize).next_multiple_of(page);
        let end = (bytes.as_ptr() as usize + bytes.len()) / page * page;
        if end > start {
            // SAFETY: the range lies inside `bytes`, which is mapped; MADV_PAGEOUT does not
            // change what the memory holds (see above). The result is advisory and ignored.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_PAGEOUT) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = bytes;
}

/// Whether the AVX-512 kernels run here (else the scalar twins do).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn simd() -> bool {
    crate::cpu::isa::active_isa() >= crate::cpu::isa::Isa::Avx512
}
