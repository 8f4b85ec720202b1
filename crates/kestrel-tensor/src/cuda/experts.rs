//! Mixture-of-experts layers routed on the device (`kernels/moe.cu`, and the indirect matvec
//! `mmvq_<type>_id` of `kernels/mmvq.cuh`): a step's router logits become each token's chosen
//! experts and weights in device memory ([`DeviceRoutes`]), each (token, slot) pair's expert
//! projection reads its expert's matrix through a table of addresses ([`ExpertTable`]), and the
//! pairs' outputs are summed weighted into their tokens' rows. Nothing is copied back, so such a
//! step can be captured in a CUDA graph. Each pair's projection has the bits of its expert's
//! one-row matvec, so a layer gives the same rows as running each chosen expert over the rows
//! that chose it, routed alike.

use cudarc::driver::{CudaSlice, DevicePtr};

use super::engine::{cfg, driver, elementwise_cfg, f32_only, grid_for, i32_of, no_scratch_err};
use super::matvec::{
    mmvq_rows_per_cta, wide_enabled, wide_name, wide_ntiles, MMVQ_WARPS, WIDE_ROWS,
};
use super::routing::{RouteGating, RouteSpec};
use super::{CudaDevice, DeviceTensor, Q8Ticket};
use crate::error::{Result, TensorError};
use crate::DType;

/// Bytes of one Q8_1 activation block (`kernels/common.cuh`).
const Q8_1_BYTES: usize = 36;
/// Weight rows a CTA of the float matvec takes (`ROWS_PER_CTA` in kernels/matvec_float.cu).
const FLOAT_ROWS_PER_CTA: usize = 4;

/// The experts of one projection of a MoE layer: each expert's matrix (same type and shape) and
/// a device table of their addresses, which the indirect matvec reads.
#[derive(Debug)]
pub struct ExpertTable {
    experts: Vec<DeviceTensor>,
    ptrs: CudaSlice<u64>,
}

impl ExpertTable {
    /// Expert `e`'s matrix.
    pub fn expert(&self, e: usize) -> Option<&DeviceTensor> {
        self.experts.get(e)
    }

    /// Experts.
    pub fn len(&self) -> usize {
        self.experts.len()
    }

    /// True when it holds none (never: [`CudaDevice::expert_table`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.experts.is_empty()
    }

    /// The experts' weight type.
    pub fn dtype(&self) -> DType {
        self.experts[0].dtype
    }
}

/// A step's routing on the device: each (token, slot) pair's expert and weight. The rows and
/// slots it last routed are kept on the host (set when the routing is enqueued), so a step
/// replayed from a CUDA graph reads the routing its capture wrote.
#[derive(Debug)]
pub struct DeviceRoutes {
    ids: CudaSlice<i32>,
    weights: CudaSlice<f32>,
    rows: usize,
    k: usize,
    /// The pairs grouped by expert into tiles (`moe_tiles`), for the grouped matvec: each
    /// tile's expert, its pairs (-1 past the last), the tile count (on the device).
    tile_expert: CudaSlice<i32>,
    tile_rows: CudaSlice<i32>,
    n_tiles: CudaSlice<i32>,
    /// The tile size and expert count the last routing's tiles were built for (`None`: not
    /// built; a step of few tokens takes the per-pair matvec).
    tiled: Option<(usize, usize)>,
}

impl DeviceRoutes {
    /// Tokens the last routing routed.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Experts each token chose.
    pub fn n_used(&self) -> usize {
        self.k
    }

    /// Most (token, slot) pairs it holds.
    pub fn capacity(&self) -> usize {
        self.ids.len()
    }

    /// Whether the last routing grouped its pairs by expert for the tensor-core matvec (a
    /// step of enough tokens; the per-pair matvec otherwise, with the same bits).
    pub fn grouped(&self) -> bool {
        self.tiled.is_some()
    }

    fn pairs(&self) -> usize {
        self.rows * self.k
    }
}

fn gating_code(g: RouteGating) -> i32 {
    match g {
        RouteGating::Softmax => 0,
        RouteGating::Sigmoid => 1,
        RouteGating::SoftmaxWeight => 2,
    }
}

/// Most pairs a routing groups into tiles (`MOE_MAX_PAIRS` in kernels/moe.cu).
const MAX_TILED_PAIRS: usize = 4096;

/// Tiles of `tn` that `pairs` pairs over `ne` experts can take: every expert's last tile may be
/// part-full.
fn tiles_bound(pairs: usize, ne: usize, tn: usize) -> usize {
    pairs.div_ceil(tn) + ne.min(pairs)
}

/// Tokens from which a routed step groups its pairs by expert for the tensor-core matvec (each
/// expert read once a tile of pairs) instead of the per-pair matvec (each read once a pair);
/// the same bits either way. 8 by default, `KESTREL_CUDA_MOE_GROUPED=N` another (0: never).
fn grouped_min_tokens() -> usize {
    static MIN: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MIN.get_or_init(|| {
        match std::env::var("KESTREL_CUDA_MOE_GROUPED")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
        {
            Some(0) => usize::MAX,
            Some(n) => n,
            None => 8,
        }
    })
}

/// The indirect matvec of a weight type.
fn id_name(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::Q4K => "mmvq_q4_K_id",
        DType::Q5K => "mmvq_q5_K_id",
        DType::Q6K => "mmvq_q6_K_id",
        DType::Q4_0 => "mmvq_q4_0_id",
        DType::Q4_1 => "mmvq_q4_1_id",
        DType::Q5_0 => "mmvq_q5_0_id",
        DType::Q5_1 => "mmvq_q5_1_id",
        DType::Q8_0 => "mmvq_q8_0_id",
        DType::F32 => "matvec_f32_id",
        DType::F16 => "matvec_f16_id",
        DType::BF16 => "matvec_bf16_id",
        _ => return None,
    })
}

/// A vector of `n` f32 (an optional kernel input), or none.
fn vector_of(
    op: &'static str,
    what: &'static str,
    t: Option<&DeviceTensor>,
    n: usize,
) -> Result<()> {
    if let Some(t) = t {
        f32_only(op, t)?;
        if t.shape.elem_count() != n {
            return Err(TensorError::LengthMismatch {
                op,
                what,
                expected: n,
                actual: t.shape.elem_count(),
            });
        }
    }
    Ok(())
}

impl CudaDevice {
    /// Whether a projection of `dtype` experts can run the indirect matvec (the quantized types
    /// of the matvec, and F32, F16, BF16).
    pub fn experts_supported(dtype: DType) -> bool {
        id_name(dtype).is_some()
    }

    /// The table of `experts` (one projection's, same type and shape each, a type
    /// [`Self::experts_supported`] takes or any other for [`ExpertTable::expert`] alone).
    ///
    /// # Errors
    /// No experts, experts of differing types or shapes, a driver error.
    pub fn expert_table(&self, experts: Vec<DeviceTensor>) -> Result<ExpertTable> {
        const OP: &str = "cuda expert_table";
        let first = experts.first().ok_or(TensorError::InvalidParam {
            op: OP,
            why: "no experts",
        })?;
        if experts.iter().any(|e| e.dtype != first.dtype) {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "experts of differing weight types",
            });
        }
        if let Some(e) = experts.iter().find(|e| e.shape != first.shape) {
            return Err(TensorError::ShapeMismatch {
                op: OP,
                what: "expert",
                expected: first.shape,
                actual: e.shape,
            });
        }
        let host: Vec<u64> = experts
            .iter()
            .map(|e| e.buf.device_ptr(&self.stream).0)
            .collect();
        let mut ptrs = self
            .stream
            .alloc_zeros::<u64>(host.len())
            .map_err(|e| self.alloc_error(host.len() * 8, e))?;
        self.stream
            .memcpy_htod(&host, &mut ptrs)
            .map_err(driver("cuMemcpyHtoD"))?;
        Ok(ExpertTable { experts, ptrs })
    }

    /// Room for the routing of up to `pairs` (token, slot) pairs.
    ///
    /// # Errors
    /// A driver error (out of memory with the sizes).
    pub fn new_routes(&self, pairs: usize) -> Result<DeviceRoutes> {
        let n = pairs.max(1);
        let ids = self
            .stream
            .alloc_zeros::<i32>(n)
            .map_err(|e| self.alloc_error(n * 4, e))?;
        let weights = self
            .stream
            .alloc_zeros::<f32>(n)
            .map_err(|e| self.alloc_error(n * 4, e))?;
        let ints = |len: usize| {
            let len = len.max(1);
            self.stream
                .alloc_zeros::<i32>(len)
                .map_err(|e| self.alloc_error(len * 4, e))
        };
        // Tiles of 16 or 32 pairs (the tensor-core matvec's 2 or 4 n-tiles), any expert count,
        // for as many pairs as a routing groups.
        let t = n.min(MAX_TILED_PAIRS);
        let tiles = tiles_bound(t, t, 16);
        let rows = (tiles * 16).max(tiles_bound(t, t, 32) * 32);
        Ok(DeviceRoutes {
            ids,
            weights,
            rows: 0,
            k: 0,
            tile_expert: ints(tiles)?,
            tile_rows: ints(rows)?,
            n_tiles: ints(1)?,
            tiled: None,
        })
    }

    /// Routes each row of `logits` (`rows × n_expert` F32) by `spec`, as kestrel-graph's
    /// `moe::route` does on the host (`router_bias` added to the logits, `selection_bias` to the
    /// probabilities for the choice alone), into `routes`: each row's `n_used` experts, best
    /// first, and their weights. Sums run in warp trees, so weights may differ from the host's
    /// in the last bits; a NaN score ranks last.
    ///
    /// # Errors
    /// A rule the kernel does not take ([`RouteSpec::unsupported`]), logits not `n_expert`
    /// wide, biases not `n_expert` long, more pairs than `routes` holds, a launch failure.
    pub fn moe_route(
        &self,
        logits: &DeviceTensor,
        spec: &RouteSpec,
        (router_bias, selection_bias): (Option<&DeviceTensor>, Option<&DeviceTensor>),
        routes: &mut DeviceRoutes,
    ) -> Result<()> {
        const OP: &str = "cuda moe_route";
        if let Some(why) = spec.unsupported() {
            return Err(TensorError::InvalidParam { op: OP, why });
        }
        f32_only(OP, logits)?;
        let (ne, k) = (spec.n_expert, spec.n_used);
        let rows = logits.shape.n_rows();
        if logits.shape.row_len() != ne {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "logits row",
                expected: ne,
                actual: logits.shape.row_len(),
            });
        }
        vector_of(OP, "router bias", router_bias, ne)?;
        vector_of(OP, "selection bias", selection_bias, ne)?;
        if rows * k > routes.capacity() {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "routes",
                expected: rows * k,
                actual: routes.capacity(),
            });
        }
        routes.rows = rows;
        routes.k = k;
        routes.tiled = None;
        if rows == 0 {
            return Ok(());
        }
        let (groups, used) = spec.groups.unwrap_or((0, 0));
        let [ne_i, k_i, g_i, u_i] = [ne, k, groups, used].map(|v| i32_of(OP, v));
        let (ne_i, k_i, g_i, u_i) = (ne_i?, k_i?, g_i?, u_i?);
        let (gating, norm) = (gating_code(spec.gating), i32::from(spec.norm_weights));
        let null = 0u64;
        let f = self.func("moe_route_f32")?;
        let mut b = self.launch(f);
        b.arg(&logits.buf);
        for bias in [router_bias, selection_bias] {
            match bias {
                Some(t) => b.arg(&t.buf),
                None => b.arg(&null),
            };
        }
        b.arg(&mut routes.ids)
            .arg(&mut routes.weights)
            .arg(&ne_i)
            .arg(&k_i)
            .arg(&gating)
            .arg(&g_i)
            .arg(&u_i)
            .arg(&norm)
            .arg(&spec.weights_scale);
        // SAFETY: logits hold rows × ne f32, each bias ne (checked), routes rows × k pairs
        // (checked); ne, k and the groups within the kernel's bounds (spec checked).
        unsafe { b.launch(cfg(grid_for(rows, 1)?, (32, 1))) }
            .map_err(driver("launch moe_route"))?;
        let tiles_fit = rows * k <= MAX_TILED_PAIRS.min(routes.capacity());
        if rows >= grouped_min_tokens() && tiles_fit && wide_enabled() {
            self.moe_tiles(routes, ne, 8 * wide_ntiles())?;
        }
        Ok(())
    }

    /// Groups the routed pairs by expert into tiles of `tn` (`moe_tiles`), for the grouped
    /// matvec.
    fn moe_tiles(&self, routes: &mut DeviceRoutes, ne: usize, tn: usize) -> Result<()> {
        const OP: &str = "cuda moe_tiles";
        let pairs = routes.pairs();
        let [p_i, ne_i, tn_i] = [pairs, ne, tn].map(|v| i32_of(OP, v));
        let (p_i, ne_i, tn_i) = (p_i?, ne_i?, tn_i?);
        let f = self.func("moe_tiles")?;
        let mut b = self.launch(f);
        b.arg(&routes.ids)
            .arg(&p_i)
            .arg(&ne_i)
            .arg(&tn_i)
            .arg(&mut routes.tile_expert)
            .arg(&mut routes.tile_rows)
            .arg(&mut routes.n_tiles);
        // SAFETY: ids hold `pairs` values (at most MAX_TILED_PAIRS, the kernel's shared
        // array), ne is at most MAX_ROUTED_EXPERTS (the spec was checked), and the tile buffers
        // hold tiles_bound(pairs, ne, tn) tiles of tn (new_routes sized them for any expert
        // count and both tile sizes).
        unsafe { b.launch(cfg(1, (256, 1))) }.map_err(driver("launch moe_tiles"))?;
        routes.tiled = Some((tn, ne));
        Ok(())
    }

    /// The last routing's expert ids and weights, copied back (tests and diagnostics).
    ///
    /// # Errors
    /// A driver error.
    pub fn routes_to_host(&self, routes: &DeviceRoutes) -> Result<(Vec<i32>, Vec<f32>)> {
        let n = routes.pairs();
        let mut ids = vec![0i32; n];
        let mut weights = vec![0f32; n];
        if n > 0 {
            self.stream
                .memcpy_dtoh(&routes.ids.slice(0..n), &mut ids)
                .map_err(driver("cuMemcpyDtoH"))?;
            self.stream
                .memcpy_dtoh(&routes.weights.slice(0..n), &mut weights)
                .map_err(driver("cuMemcpyDtoH"))?;
        }
        Ok((ids, weights))
    }

    /// Each routed pair's projection by its expert: `out[p] = x[row(p)] · table[ids[p]]ᵀ`, where
    /// `row(p)` is the pair's token (`per_token`: `x` holds a row a token, shared by its slots)
    /// or the pair itself (`x` holds a row a pair). `out` holds a row a pair, each the bits of
    /// the expert's one-row matvec. `ticket` as [`Self::matmul_reusing`] (same `x`, unchanged).
    ///
    /// # Errors
    /// An expert type without the indirect matvec, shapes that do not match, a launch failure.
    pub fn matmul_experts(
        &self,
        x: &DeviceTensor,
        (table, routes): (&ExpertTable, &DeviceRoutes),
        per_token: bool,
        out: &mut DeviceTensor,
        ticket: Option<Q8Ticket>,
    ) -> Result<Option<Q8Ticket>> {
        const OP: &str = "cuda matmul_experts";
        f32_only(OP, x)?;
        f32_only(OP, out)?;
        let w = &table.experts[0];
        let name = id_name(w.dtype).ok_or(TensorError::UnsupportedDType {
            op: OP,
            dtype: w.dtype,
        })?;
        let (k, m) = (w.shape.row_len(), w.shape.n_rows());
        let wblock = w.dtype.block_size();
        if !k.is_multiple_of(wblock) {
            return Err(TensorError::PartialBlock {
                dtype: w.dtype,
                row_len: k,
                block_size: wblock,
            });
        }
        let pairs = routes.pairs();
        let rows = if per_token { routes.rows } else { pairs };
        if x.shape.row_len() != k || x.shape.n_rows() != rows {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "x rows",
                expected: rows * k,
                actual: x.shape.elem_count(),
            });
        }
        if out.shape.elem_count() != pairs * m {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "out",
                expected: pairs * m,
                actual: out.shape.elem_count(),
            });
        }
        if pairs == 0 || m == 0 {
            return Ok(None);
        }
        if pairs > 65_535 {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "more than 65,535 (token, slot) pairs in one launch",
            });
        }
        let per = if per_token { routes.k } else { 0 };
        if let Some((tn, ne)) = routes.tiled.filter(|&(_, ne)| ne == table.len()) {
            if let Some(wide) = wide_name(w.dtype, tn / 8, true) {
                let (mut guard, issued) = self.q8_input(x, ticket, rows, k)?;
                let scratch = guard.as_mut().ok_or_else(no_scratch_err)?;
                let a = scratch.slice(0..rows * (k / 32) * Q8_1_BYTES);
                let [ne_i, nb_i, m_i, per_i] = [ne, k / wblock, m, per].map(|v| i32_of(OP, v));
                let (ne_i, nb_i, m_i, per_i) = (ne_i?, nb_i?, m_i?, per_i?);
                let rpc = mmvq_rows_per_cta();
                let rpc_i = rpc as i32;
                let f = self.func(wide)?;
                let mut b = self.launch(f);
                b.arg(&table.ptrs)
                    .arg(&routes.tile_expert)
                    .arg(&routes.tile_rows)
                    .arg(&routes.n_tiles)
                    .arg(&ne_i)
                    .arg(&a)
                    .arg(&mut out.buf)
                    .arg(&nb_i)
                    .arg(&m_i)
                    .arg(&per_i)
                    .arg(&rpc_i);
                let launch = cudarc::driver::LaunchConfig {
                    grid_dim: (
                        grid_for(m, WIDE_ROWS)?,
                        tiles_bound(pairs, ne, tn) as u32,
                        1,
                    ),
                    block_dim: (32, MMVQ_WARPS / rpc, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: the tiles (moe_tiles, for this routing and expert count) name pairs
                // below `pairs` and experts below ne, at most tiles_bound of them (CTAs past
                // the count return); the table holds ne matrices of m × nb blocks, `a` the
                // rows' Q8_1 activations, `out` pairs × m f32 (checked).
                unsafe { b.launch(launch) }.map_err(driver("launch mmvq_wide_id"))?;
                return Ok(issued);
            }
        }
        if matches!(w.dtype, DType::F32 | DType::F16 | DType::BF16) {
            self.matvec_float_experts(name, x, (table, routes), out, (k, m, per))?;
            return Ok(None);
        }
        let (mut guard, issued) = self.q8_input(x, ticket, rows, k)?;
        let scratch = guard.as_mut().ok_or_else(no_scratch_err)?;
        let q_bytes = rows * (k / 32) * Q8_1_BYTES;
        let a = scratch.slice(0..q_bytes);
        let [ne_i, nb_i, m_i, per_i] = [table.len(), k / wblock, m, per].map(|v| i32_of(OP, v));
        let (ne_i, nb_i, m_i, per_i) = (ne_i?, nb_i?, m_i?, per_i?);
        let rpc = mmvq_rows_per_cta();
        let rpc_i = rpc as i32;
        let f = self.func(name)?;
        let mut b = self.launch(f);
        b.arg(&table.ptrs)
            .arg(&routes.ids)
            .arg(&ne_i)
            .arg(&a)
            .arg(&mut out.buf)
            .arg(&nb_i)
            .arg(&m_i)
            .arg(&rpc_i)
            .arg(&per_i);
        let launch = cudarc::driver::LaunchConfig {
            grid_dim: (grid_for(m, rpc as usize)?, pairs as u32, 1),
            block_dim: (32, MMVQ_WARPS, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the table holds ne addresses of m × nb blocks of the type (expert_table
        // checked they match), ids `pairs` values clamped into the table by the kernel, `a`
        // rows of Q8_1 activations (q8_input), `out` pairs × m f32 (checked).
        unsafe { b.launch(launch) }.map_err(driver("launch mmvq_id"))?;
        Ok(issued)
    }

    /// The float form of [`Self::matmul_experts`] (`matvec_<type>_id`, f32 activations).
    fn matvec_float_experts(
        &self,
        name: &str,
        x: &DeviceTensor,
        (table, routes): (&ExpertTable, &DeviceRoutes),
        out: &mut DeviceTensor,
        (k, m, per): (usize, usize, usize),
    ) -> Result<()> {
        const OP: &str = "cuda matmul_experts";
        let [ne_i, k_i, m_i, per_i] = [table.len(), k, m, per].map(|v| i32_of(OP, v));
        let (ne_i, k_i, m_i, per_i) = (ne_i?, k_i?, m_i?, per_i?);
        let f = self.func(name)?;
        let mut b = self.launch(f);
        b.arg(&table.ptrs)
            .arg(&routes.ids)
            .arg(&ne_i)
            .arg(&x.buf)
            .arg(&mut out.buf)
            .arg(&k_i)
            .arg(&m_i)
            .arg(&per_i);
        let launch = cudarc::driver::LaunchConfig {
            grid_dim: (grid_for(m, FLOAT_ROWS_PER_CTA)?, routes.pairs() as u32, 1),
            block_dim: (32, FLOAT_ROWS_PER_CTA as u32, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the table holds ne addresses of m × k values of the type (checked alike by
        // expert_table), ids clamped by the kernel, x its rows of k f32 and out pairs × m
        // (checked by matmul_experts).
        unsafe { b.launch(launch) }.map_err(driver("launch matvec_id"))?;
        Ok(())
    }

    /// Each routed pair's row of `out` (`pairs × m`) times its expert's scale (`scales`: one
    /// value an expert), plus its expert's bias (`bias`: `n_expert × m`), each rounded alone as
    /// a scale then an add.
    ///
    /// # Errors
    /// Shapes that do not match, a launch failure.
    pub fn moe_scale_bias(
        &self,
        out: &mut DeviceTensor,
        routes: &DeviceRoutes,
        n_expert: usize,
        (scales, bias): (Option<&DeviceTensor>, Option<&DeviceTensor>),
    ) -> Result<()> {
        const OP: &str = "cuda moe_scale_bias";
        f32_only(OP, out)?;
        let (pairs, m) = (routes.pairs(), out.shape.row_len());
        if out.shape.n_rows() != pairs {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "out rows",
                expected: pairs,
                actual: out.shape.n_rows(),
            });
        }
        vector_of(OP, "scales", scales, n_expert)?;
        vector_of(OP, "bias", bias, n_expert * m)?;
        if pairs * m == 0 || (scales.is_none() && bias.is_none()) {
            return Ok(());
        }
        let ne_i = i32_of(OP, n_expert)?;
        let (pi, mi) = (pairs as i64, m as i64);
        let null = 0u64;
        let f = self.func("moe_scale_bias_f32")?;
        let mut b = self.launch(f);
        b.arg(&mut out.buf).arg(&routes.ids).arg(&ne_i);
        for t in [scales, bias] {
            match t {
                Some(t) => b.arg(&t.buf),
                None => b.arg(&null),
            };
        }
        b.arg(&pi).arg(&mi);
        // SAFETY: out holds pairs × m f32, ids pairs values (clamped by the kernel), scales
        // n_expert and bias n_expert × m f32 (checked).
        unsafe { b.launch(elementwise_cfg(pairs * m)) }.map_err(driver("launch moe_scale_bias"))?;
        Ok(())
    }

    /// `out[r] = Σ_slot down[r·k + slot] · weight[r·k + slot]`, in slot order: each token's
    /// chosen experts' outputs (`down`, a row a pair) summed by their routing weights.
    ///
    /// # Errors
    /// Shapes that do not match, a launch failure.
    pub fn moe_combine(
        &self,
        down: &DeviceTensor,
        routes: &DeviceRoutes,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        const OP: &str = "cuda moe_combine";
        f32_only(OP, down)?;
        f32_only(OP, out)?;
        let (rows, k, width) = (routes.rows, routes.k, out.shape.row_len());
        if out.shape.n_rows() != rows {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "out rows",
                expected: rows,
                actual: out.shape.n_rows(),
            });
        }
        if down.shape.elem_count() != rows * k * width {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "down",
                expected: rows * k * width,
                actual: down.shape.elem_count(),
            });
        }
        if rows * width == 0 {
            return Ok(());
        }
        let (ri, ki, wi) = (rows as i64, i32_of(OP, k)?, width as i64);
        let f = self.func("moe_combine_f32")?;
        let mut b = self.launch(f);
        b.arg(&down.buf)
            .arg(&routes.weights)
            .arg(&mut out.buf)
            .arg(&ri)
            .arg(&ki)
            .arg(&wi);
        // SAFETY: down holds rows × k rows of width f32, the weights rows × k, out rows rows
        // (checked).
        unsafe { b.launch(elementwise_cfg(rows * width)) }.map_err(driver("launch moe_combine"))?;
        Ok(())
    }
}
