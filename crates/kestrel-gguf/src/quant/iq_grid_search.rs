//! The grids the IQ2 and IQ3 quantizers snap to, with ggml's neighbour tables
//! (`iq2xs_init_impl`, `iq3xs_init_impl`): a grid point is `N` odd values `2l + 1` (`l` of
//! `BITS` bits); every code off the grid lists the grid points at its `nwant` smallest squared
//! distances, searched by [`Grid::best_neighbour`] as ggml searches them.

use super::common::nearest_int;

/// The odd levels `2l + 1` of `xval` at inverse scale `id`, `l` clamped to `0..kmax_q`
/// (`nearest_int(0.5·(id·x − 1))`, as every IQ2/IQ3 search rounds).
pub(crate) fn odd_levels(id: f32, xval: &[f32], l: &mut [i8], kmax_q: i32) {
    for (li, &x) in l.iter_mut().zip(xval) {
        *li = nearest_int(0.5 * (id * x - 1.0)).clamp(0, kmax_q - 1) as i8;
    }
}

/// A group's weighted fit to odd levels: `(Σ w·x·q, Σ w·q²)` with `q = 2l + 1`, summed in order.
pub(crate) fn odd_fit(weight: &[f32], xval: &[f32], l: &[i8]) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for ((&w, &x), &li) in weight.iter().zip(xval).zip(l) {
        let q = (2 * li as i32 + 1) as f32;
        sumqx += w * x * q;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// A grid of `N`-value points.
pub(crate) struct Grid<const N: usize> {
    /// The points.
    pub(crate) points: Vec<[i8; N]>,
    /// A code's grid index, or `-(offset + 1)` into `neighbours` for a code off the grid.
    pub(crate) map: Vec<i32>,
    /// Per off-grid code: a count, then that many grid indices.
    neighbours: Vec<u16>,
    bits: usize,
}

impl<const N: usize> Grid<N> {
    /// Builds the grid of `kgrid`'s packed points, with `map_size` codes and `nwant` distance
    /// shells of neighbours.
    pub(crate) fn build(kgrid: &[u16], bits: usize, map_size: usize, nwant: usize) -> Grid<N> {
        let mask = (1u16 << bits) - 1;
        let points: Vec<[i8; N]> = kgrid
            .iter()
            .map(|&g| std::array::from_fn(|i| (2 * ((g >> (bits * i)) & mask) + 1) as i8))
            .collect();
        let mut map = vec![-1i32; map_size];
        for (i, p) in points.iter().enumerate() {
            let index = p.iter().enumerate().fold(0usize, |acc, (k, &v)| {
                acc | (((v as usize - 1) / 2) << (bits * k))
            });
            map[index] = i as i32;
        }
        let mut neighbours = Vec::new();
        let mut dist2: Vec<(i32, usize)> = Vec::with_capacity(points.len());
        for (i, slot) in map.iter_mut().enumerate() {
            if *slot >= 0 {
                continue;
            }
            let pos: [i32; N] =
                std::array::from_fn(|k| 2 * ((i as i32 >> (bits * k)) & mask as i32) + 1);
            dist2.clear();
            for (j, pg) in points.iter().enumerate() {
                let d2: i32 = (0..N).map(|k| (pg[k] as i32 - pos[k]).pow(2)).sum();
                dist2.push((d2, j));
            }
            dist2.sort_unstable();
            let offset = neighbours.len();
            *slot = -(offset as i32 + 1);
            neighbours.push(0u16);
            let (mut d2, mut nhave, mut n) = (dist2[0].0, 1, 0u16);
            for &(d, j) in &dist2 {
                if d > d2 {
                    if nhave == nwant {
                        break;
                    }
                    d2 = d;
                    nhave += 1;
                }
                neighbours.push(j as u16);
                n += 1;
            }
            neighbours[offset] = n;
        }
        Grid {
            points,
            map,
            neighbours,
            bits,
        }
    }

    /// The code of `N` levels.
    pub(crate) fn code(&self, l: &[i8]) -> usize {
        (0..N).fold(0usize, |u, i| u | ((l[i] as usize) << (self.bits * i)))
    }

    /// ggml's `iq*_find_best_neighbour` for the off-grid code whose map entry is `m`: the
    /// neighbour nearest to `xval` at `scale` under `weight`; its levels go to `l`.
    pub(crate) fn best_neighbour(
        &self,
        m: i32,
        xval: &[f32],
        weight: &[f32],
        scale: f32,
        l: &mut [i8],
    ) -> usize {
        let list = self.neighbours_of(m);
        let mut best_d2 = f32::MAX;
        let mut index = list[0] as usize;
        for &g in list {
            let pg = &self.points[g as usize];
            let mut d2 = 0.0f32;
            for i in 0..N {
                let q = pg[i] as f32;
                let diff = scale * q - xval[i];
                d2 += weight[i] * diff * diff;
            }
            if d2 < best_d2 {
                best_d2 = d2;
                index = g as usize;
            }
        }
        let pg = &self.points[index];
        for i in 0..N {
            l[i] = (pg[i] - 1) / 2;
        }
        index
    }

    /// The neighbour list of the off-grid code whose map entry is `m`.
    pub(crate) fn neighbours_of(&self, m: i32) -> &[u16] {
        let offset = (-m - 1) as usize;
        let n = self.neighbours[offset] as usize;
        &self.neighbours[offset + 1..=offset + n]
    }

    /// A point's levels into `l`.
    pub(crate) fn levels_of(&self, index: usize, l: &mut [i8]) {
        for (li, &p) in l.iter_mut().zip(&self.points[index]) {
            *li = (p - 1) / 2;
        }
    }

    /// Neighbour lists, for tests: (codes off the grid, the most neighbours one has).
    #[cfg(test)]
    pub(crate) fn neighbour_stats(&self) -> (usize, usize) {
        let mut off = 0;
        let mut most = 0;
        for &m in &self.map {
            if m < 0 {
                off += 1;
                let n = self.neighbours[(-m - 1) as usize] as usize;
                assert!(n >= 1);
                assert!(self.neighbours[(-m) as usize..(-m) as usize + n]
                    .iter()
                    .all(|&g| (g as usize) < self.points.len()));
                most = most.max(n);
            }
        }
        (off, most)
    }
}
