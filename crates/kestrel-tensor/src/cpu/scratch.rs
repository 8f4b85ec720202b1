//! The converted activation rows a matmul works on ([`MatmulScratch`]), reused from call to
//! call: at the bottom of the CPU engine, so the matmul and the packed layouts share it without
//! importing each other.

/// Scratch for the converted activation rows of
/// [`matmul_with_scratch`](super::matmul_with_scratch). It grows to the largest
/// `n × k` seen and is reused; 8-byte aligned so every activation block type can sit in it.
#[derive(Debug, Default)]
pub struct MatmulScratch {
    buf: Vec<u64>,
    perm: Vec<u32>,
    /// Per activation block, for packed weights: `-8 · Σ q` and the scale as f32.
    corr: Vec<i32>,
    dact: Vec<f32>,
}

impl MatmulScratch {
    /// An empty scratch (allocates on first use).
    pub const fn new() -> MatmulScratch {
        MatmulScratch {
            buf: Vec::new(),
            perm: Vec::new(),
            corr: Vec::new(),
            dact: Vec::new(),
        }
    }

    /// `len` activation blocks, `corr` i32 and `len` f32 beside them (for the packed kernels'
    /// per-block terms; contents are whatever the last call left).
    pub(crate) fn packed_parts<A: bytemuck::Pod>(
        &mut self,
        len: usize,
        corr: usize,
    ) -> (&mut [A], &mut [i32], &mut [f32]) {
        if self.corr.len() < corr {
            self.corr.resize(corr, 0);
        }
        if self.dact.len() < len {
            self.dact.resize(len, 0.0);
        }
        let acts = typed(&mut self.buf, len);
        (acts, &mut self.corr[..corr], &mut self.dact[..len])
    }

    /// [`MatmulScratch::slice`] and `n` row indices beside it (contents are whatever the last
    /// call left).
    pub(crate) fn slice_and_perm<A: bytemuck::Pod>(
        &mut self,
        len: usize,
        n: usize,
    ) -> (&mut [A], &mut [u32]) {
        if self.perm.len() < n {
            self.perm.resize(n, 0);
        }
        (typed(&mut self.buf, len), &mut self.perm[..n])
    }

    /// `len` zero-initialised-once elements of `A` (contents are whatever the last call left).
    pub(crate) fn slice<A: bytemuck::Pod>(&mut self, len: usize) -> &mut [A] {
        self.slice_and_perm(len, 0).0
    }
}

/// The first `len` elements of `A` in `buf`, grown as needed (contents are whatever was there).
fn typed<A: bytemuck::Pod>(buf: &mut Vec<u64>, len: usize) -> &mut [A] {
    const { assert!(std::mem::align_of::<A>() <= 8) };
    let bytes = len * std::mem::size_of::<A>();
    let words = bytes.div_ceil(8);
    if buf.len() < words {
        buf.resize(words, 0);
    }
    let raw: &mut [u8] = bytemuck::cast_slice_mut(&mut buf[..words]);
    bytemuck::cast_slice_mut(&mut raw[..bytes])
}
