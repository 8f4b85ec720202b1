//! [`KvTable`]: where each token of a batched decode step keeps its keys and values, so one
//! step runs several sequences whose caches are separate allocations (`kernels/kv_rows.cuh`).
//! The table holds, per attention layer, the device addresses of token `t`'s key and value
//! caches; the RoPE + KV-append, KV-append and attention kernels read them instead of the
//! caches they are given. The host writes it before each step ([`CudaDevice::set_kv_entry`],
//! then [`CudaDevice::upload_kv_table`]: one small copy), so a captured graph that reads it
//! replays with whichever sequences the next step holds.
//!
//! The launches that read a table are `unsafe`: the table keeps addresses, not borrows, so the
//! caller promises the caches it was written from are still alive when the launch runs.

use cudarc::driver::{CudaSlice, DevicePtr};

use super::engine::driver;
use super::{CudaDevice, DeviceTensor};
use crate::error::{Result, TensorError};
use crate::DType;

const OP: &str = "cuda kv table";

/// The element type of a device KV cache: f16 values, or q8_0 blocks (32 values, an f16 scale
/// and 32 int8 quants; rows and heads whole blocks), as the CPU engine's caches of those types.
/// Each kernel that reads or writes a cache has a form per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KvKind {
    F16,
    Q8_0,
}

impl KvKind {
    /// The kind of a key cache and a value cache, which must match.
    ///
    /// # Errors
    /// A dtype other than F16 or Q8_0, or keys and values of different dtypes.
    pub(super) fn of(op: &'static str, k: DType, v: DType) -> Result<KvKind> {
        let kind = match k {
            DType::F16 => KvKind::F16,
            DType::Q8_0 => KvKind::Q8_0,
            dtype => return Err(TensorError::UnsupportedDType { op, dtype }),
        };
        if v != k {
            return Err(TensorError::InvalidParam {
                op,
                why: "the key and value caches must have the same dtype",
            });
        }
        Ok(kind)
    }

    /// Checks that heads of `head_dim` values (and value rows cut into pieces of `piece`) are
    /// whole q8_0 blocks; anything goes for f16.
    ///
    /// # Errors
    /// A q8_0 cache with a head or piece that is not a multiple of 32.
    pub(super) fn check_heads(self, op: &'static str, head_dim: usize, piece: usize) -> Result<()> {
        if self == KvKind::Q8_0 && !(head_dim.is_multiple_of(32) && piece.is_multiple_of(32)) {
            return Err(TensorError::InvalidParam {
                op,
                why: "a q8_0 KV cache needs heads of a multiple of 32 values",
            });
        }
        Ok(())
    }

    /// `f16` or `q8_0` of a kernel name.
    pub(super) fn pick(self, f16: &'static str, q8_0: &'static str) -> &'static str {
        match self {
            KvKind::F16 => f16,
            KvKind::Q8_0 => q8_0,
        }
    }
}

/// Per attention layer and token of a step, the addresses of the token's key and value caches
/// (f16 or q8_0) on the device, with what the launches check against on the host (row lengths,
/// element type, each cache's capacity).
pub struct KvTable {
    pub(super) buf: CudaSlice<u64>,
    host: Vec<u64>,
    layers: usize,
    max_tokens: usize,
    /// Tokens of the step being written.
    tokens: usize,
    /// Each layer's (key row, value row, element type), once a token's caches were set for it.
    rows: Vec<Option<(usize, usize, KvKind)>>,
    /// Rows of token `t`'s caches in layer `l` (`l * max_tokens + t`; 0: not set).
    caps: Vec<usize>,
}

impl std::fmt::Debug for KvTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvTable")
            .field("layers", &self.layers)
            .field("max_tokens", &self.max_tokens)
            .field("tokens", &self.tokens)
            .finish()
    }
}

impl KvTable {
    /// Most tokens a step may hold.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Tokens of the step last begun.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// Starts a step of `tokens` tokens: forgets every entry.
    ///
    /// # Errors
    /// More tokens than the table holds.
    pub fn begin(&mut self, tokens: usize) -> Result<()> {
        if tokens > self.max_tokens {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "tokens",
                expected: self.max_tokens,
                actual: tokens,
            });
        }
        self.tokens = tokens;
        self.rows.fill(None);
        self.caps.fill(0);
        self.host.fill(0);
        Ok(())
    }

    /// The first table word of `layer` (its `2 * max_tokens` addresses follow).
    fn base(&self, layer: usize) -> usize {
        layer * self.max_tokens * 2
    }

    /// Checks a launch over `layer` for a step at `positions`: one per token of the step, each
    /// inside its token's caches, whose rows are `k_row` and `v_row` (`None`: not checked).
    /// Returns the caches' element type.
    pub(super) fn check(
        &self,
        layer: usize,
        positions: &[i32],
        k_row: Option<usize>,
        v_row: Option<usize>,
    ) -> Result<KvKind> {
        if positions.len() != self.tokens {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "positions",
                expected: self.tokens,
                actual: positions.len(),
            });
        }
        let Some(&Some((kr, vr, kind))) = self.rows.get(layer) else {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "no caches were set for this layer",
            });
        };
        for (want, have, what) in [(k_row, kr, "key row"), (v_row, vr, "value row")] {
            if let Some(w) = want.filter(|&w| w != have) {
                return Err(TensorError::LengthMismatch {
                    op: OP,
                    what,
                    expected: have,
                    actual: w,
                });
            }
        }
        let caps = &self.caps[layer * self.max_tokens..][..self.tokens];
        for (index, (&p, &cap)) in positions.iter().zip(caps).enumerate() {
            if p < 0 || p as usize >= cap {
                return Err(TensorError::IdOutOfRange {
                    op: OP,
                    index,
                    id: i64::from(p),
                    rows: cap,
                });
            }
        }
        Ok(kind)
    }
}

impl CudaDevice {
    /// A table for steps of up to `max_tokens` tokens over `layers` layers (a layer index is a
    /// graph's attention layer; layers without attention are never set).
    ///
    /// # Errors
    /// Out of device memory.
    pub fn new_kv_table(&self, layers: usize, max_tokens: usize) -> Result<KvTable> {
        let words = layers.max(1) * max_tokens.max(1) * 2;
        let buf = self
            .stream
            .alloc_zeros::<u64>(words)
            .map_err(|e| self.alloc_error(words * 8, e))?;
        Ok(KvTable {
            buf,
            host: vec![0; words],
            layers,
            max_tokens: max_tokens.max(1),
            tokens: 0,
            rows: vec![None; layers],
            caps: vec![0; layers * max_tokens.max(1)],
        })
    }

    /// Token `token` of the step keeps `layer`'s keys in `k` and values in `v` (F16 or Q8_0
    /// matrices of a row per position, both alike; every token of a layer has the same row
    /// lengths and type).
    ///
    /// # Errors
    /// A layer or token outside the table, a cache that is not F16 or Q8_0, keys and values of
    /// different types, rows or types unlike the layer's other tokens'.
    pub fn set_kv_entry(
        &self,
        table: &mut KvTable,
        layer: usize,
        token: usize,
        k: &mut DeviceTensor,
        v: &mut DeviceTensor,
    ) -> Result<()> {
        if layer >= table.layers || token >= table.tokens {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "layer or token outside the table",
            });
        }
        let kind = KvKind::of(OP, k.dtype, v.dtype)?;
        let rows = (k.shape.row_len(), v.shape.row_len(), kind);
        match table.rows[layer] {
            Some(have) if have != rows => {
                return Err(TensorError::InvalidParam {
                    op: OP,
                    why: "a token's caches differ in row length or type from the layer's others",
                })
            }
            _ => table.rows[layer] = Some(rows),
        }
        let at = table.base(layer) + 2 * token;
        {
            let (kp, _k) = k.buf.device_ptr(&self.stream);
            let (vp, _v) = v.buf.device_ptr(&self.stream);
            table.host[at] = kp;
            table.host[at + 1] = vp;
        }
        table.caps[layer * table.max_tokens + token] = k.shape.n_rows().min(v.shape.n_rows());
        Ok(())
    }

    /// Copies the table's entries to the device (in stream order: kernels enqueued before read
    /// the old ones).
    ///
    /// # Errors
    /// A driver error.
    pub fn upload_kv_table(&self, table: &mut KvTable) -> Result<()> {
        self.stream
            .memcpy_htod(&table.host, &mut table.buf)
            .map_err(driver("cuMemcpyHtoD"))
    }

    /// The device address of `layer`'s part of `table`, for a kernel's `kv_table` argument.
    pub(super) fn kv_table_arg(&self, table: &KvTable, layer: usize) -> u64 {
        let (p, _rec) = table.buf.device_ptr(&self.stream);
        p + (table.base(layer) * 8) as u64
    }
}
