//! The shared half of the per-architecture q8_0-family kernel bodies (`x86_64::q8_family`,
//! `aarch64::q8_family`): `q8_family_drivers!` emits, after the body's `tile` kernel and its
//! `Blk` / `Act` traits, the row and tile entry points (`rows`, `acts`: shapes checked, then
//! `tile` at the right const sizes) and the five weight types' `rows_*` / `tile_*` functions
//! that `safe_table!` wraps.

macro_rules! q8_family_drivers {
    ($features:literal, $vec:ty) => {
        /// `out[r] = dot(weight row r, y)` for `out.len()` consecutive weight rows in `w`.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn rows<B: Blk, A: Act>(w: &[u8], y: &[A], out: &mut [f32]) {
            let nb = y.len();
            let rb = nb * B::BS;
            assert!(
                out.len().checked_mul(rb) == Some(w.len()),
                "dot: {} weight bytes for {} rows of {} blocks of {}",
                w.len(),
                out.len(),
                nb,
                B::BS
            );
            let base = w.as_ptr();
            for (r, o) in out.iter_mut().enumerate() {
                // SAFETY: row r lies in w (checked above); features as the caller's.
                unsafe { tile::<B, A, 1, 1>(base.add(r * rb), rb, y, nb, std::slice::from_mut(o)) };
            }
        }

        /// `out[r · T + t] = dot(weight row r, activation row t)` for the 1 to [`TILE_ROWS`]
        /// weight rows in `w` and the `T = n_act` (1 to 4) activation rows in `y`.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn acts<B: Blk, A: Act>(w: &[u8], y: &[A], n_act: usize, out: &mut [f32]) {
            let t = n_act;
            let ok_t = (1..=4).contains(&t) && y.len() % t == 0;
            let nb = if ok_t { y.len() / t } else { 0 };
            let rb = nb * B::BS;
            let n_w = if rb > 0 { w.len() / rb } else { 0 };
            assert!(
                ok_t && rb > 0 && (1..=TILE_ROWS).contains(&n_w) && n_w * rb == w.len() && out.len() == n_w * t,
                "dot tile: {} weight bytes, {} activation blocks in {t} rows, {} outputs",
                w.len(),
                y.len(),
                out.len()
            );
            let p = w.as_ptr();
            // SAFETY: sizes checked above; features as the caller's.
            unsafe {
                match (n_w, t) {
                    (1, 1) => tile::<B, A, 1, 1>(p, rb, y, nb, out),
                    (1, 2) => tile::<B, A, 1, 2>(p, rb, y, nb, out),
                    (1, 3) => tile::<B, A, 1, 3>(p, rb, y, nb, out),
                    (1, _) => tile::<B, A, 1, 4>(p, rb, y, nb, out),
                    (2, 1) => tile::<B, A, 2, 1>(p, rb, y, nb, out),
                    (2, 2) => tile::<B, A, 2, 2>(p, rb, y, nb, out),
                    (2, 3) => tile::<B, A, 2, 3>(p, rb, y, nb, out),
                    (2, _) => tile::<B, A, 2, 4>(p, rb, y, nb, out),
                    (3, 1) => tile::<B, A, 3, 1>(p, rb, y, nb, out),
                    (3, 2) => tile::<B, A, 3, 2>(p, rb, y, nb, out),
                    (3, 3) => tile::<B, A, 3, 3>(p, rb, y, nb, out),
                    (3, _) => tile::<B, A, 3, 4>(p, rb, y, nb, out),
                    (_, 1) => tile::<B, A, 4, 1>(p, rb, y, nb, out),
                    (_, 2) => tile::<B, A, 4, 2>(p, rb, y, nb, out),
                    (_, 3) => tile::<B, A, 4, 3>(p, rb, y, nb, out),
                    _ => tile::<B, A, 4, 4>(p, rb, y, nb, out),
                }
            }
        }

        macro_rules! kernel {
            ($rows:ident, $tile:ident, $ty:ident, $blk:ident, $act:ty, $bs:expr, $min:expr, $doc:literal) => {
                struct $ty;
                impl Blk for $ty {
                    const BS: usize = $bs;
                    const MIN: bool = $min;
                    #[inline(always)]
                    unsafe fn unpack(b: *const u8) -> (f32, f32, $vec) {
                        // SAFETY: the caller keeps the block in bounds and has the features.
                        unsafe { $blk(b) }
                    }
                }

                #[doc = $doc]
                #[doc = ""]
                #[doc = "Many consecutive weight rows, `out[r]` for row `r`."]
                #[target_feature(enable = $features)]
                pub(crate) unsafe fn $rows(w: &[u8], y: &[$act], out: &mut [f32]) {
                    // SAFETY: the caller has the CPU features.
                    unsafe { rows::<$ty, $act>(w, y, out) }
                }

                #[doc = $doc]
                #[doc = ""]
                #[doc = "1 to `TILE_ROWS` weight rows against 1 to 4 activation rows, `out[r·T + t]`."]
                #[target_feature(enable = $features)]
                pub(crate) unsafe fn $tile(w: &[u8], y: &[$act], n_act: usize, out: &mut [f32]) {
                    // SAFETY: the caller has the CPU features.
                    unsafe { acts::<$ty, $act>(w, y, n_act, out) }
                }
            };
        }

        kernel!(
            rows_q4_0,
            tile_q4_0,
            WQ4_0,
            blk_q4_0,
            BlockQ8_0,
            18,
            false,
            "Q4_0 · q8_0."
        );
        kernel!(
            rows_q4_1,
            tile_q4_1,
            WQ4_1,
            blk_q4_1,
            BlockQ8_1,
            20,
            true,
            "Q4_1 · q8_1 (`Σ m·s` in a scalar FMA beside the lanes)."
        );
        kernel!(
            rows_q5_0,
            tile_q5_0,
            WQ5_0,
            blk_q5_0,
            BlockQ8_0,
            22,
            false,
            "Q5_0 · q8_0."
        );
        kernel!(
            rows_q5_1,
            tile_q5_1,
            WQ5_1,
            blk_q5_1,
            BlockQ8_1,
            24,
            true,
            "Q5_1 · q8_1."
        );
        kernel!(
            rows_q8_0,
            tile_q8_0,
            WQ8_0,
            blk_q8_0,
            BlockQ8_0,
            34,
            false,
            "Q8_0 · q8_0."
        );
    };
}
