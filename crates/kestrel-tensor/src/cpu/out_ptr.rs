//! `OutPtr`: an output buffer shared by parallel tasks that each write their own disjoint part
//! of it (a matmul task's weight-row columns, an attention task's (head, rows)).

/// A raw pointer into an output buffer, for tasks that write disjoint elements.
#[derive(Clone, Copy)]
pub(crate) struct OutPtr(*mut f32);

// SAFETY: tasks write through it only at indices no other task touches, and the borrow of the
// buffer it came from outlives the parallel region (both are the caller's to uphold: every
// write is `unsafe`).
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// Points at `out`; the borrow must outlive every write.
    pub(crate) fn new(out: &mut [f32]) -> OutPtr {
        OutPtr(out.as_mut_ptr())
    }

    /// Writes element `i`.
    ///
    /// # Safety
    /// `i` is in bounds of the buffer and no other thread accesses element `i` meanwhile.
    #[inline]
    pub(crate) unsafe fn write(self, i: usize, v: f32) {
        // SAFETY: guaranteed by the caller.
        unsafe { *self.0.add(i) = v }
    }

    /// Copies `r` to elements `at..at + r.len()`.
    ///
    /// # Safety
    /// The range is in bounds of the buffer and no other thread accesses it meanwhile.
    #[inline]
    pub(crate) unsafe fn write_row(self, at: usize, r: &[f32]) {
        // SAFETY: guaranteed by the caller; `r` is another buffer.
        unsafe { std::ptr::copy_nonoverlapping(r.as_ptr(), self.0.add(at), r.len()) }
    }
}
