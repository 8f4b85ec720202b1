//! Software prefetch of weight bytes a kernel is about to stream (a no-op off x86-64): the
//! bottom of the CPU engine, imported by the matmul, the packed layouts and the per-ISA
//! kernels.

/// Asks for the bytes after `wr` (the next tile's weight rows, when a task walks its rows in
/// order) to be brought into cache while this tile computes. A tile does several activation
/// rows' work per weight byte, so the hardware prefetchers alone leave it waiting on memory:
/// 8 activation rows against a 178 MB Q8_0 matrix (Gemma's output) took 31 ms with them alone
/// and 11-12 ms with this (AMD Zen 5, 2 threads), as fast as on cache-resident weights. A
/// prefetch never faults, so running past the weights is harmless.
#[inline]
pub(crate) fn prefetch_next(wr: &[u8]) {
    prefetch_range(wr.as_ptr().wrapping_add(wr.len()), wr.len());
}

/// Asks for the `len` bytes at `start` to be brought into cache (any address: a prefetch reads
/// nothing and never faults).
#[inline(always)]
pub(crate) fn prefetch_range(start: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        for off in (0..len).step_by(64) {
            // SAFETY: prefetching reads nothing and cannot fault, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(off).cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, len);
}

/// How far ahead of the block being computed the packed kernels prefetch (bytes). Measured on
/// Gemma 3 270M's tied 262144-row Q8_0 output matrix, 8 sequences a step: 4 KiB 6.9 ms a step,
/// 6-12 KiB 6.2 ms (one sequence: 5.9 ms, the read bandwidth), prefetching each next 16-row
/// group whole at its start 10.0 ms, no software prefetch 12.6 ms.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const PREFETCH_AHEAD: usize = 8192;

/// Prefetches the `len` bytes [`PREFETCH_AHEAD`] past `block` (a packed kernel's current block
/// of quants, `len` its size): the rest of the group and the next one (groups are back to back)
/// arrive as a steady stream, whatever the activation row count.
#[inline(always)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn prefetch_ahead(block: *const u8, len: usize) {
    prefetch_range(block.wrapping_add(PREFETCH_AHEAD), len);
}
