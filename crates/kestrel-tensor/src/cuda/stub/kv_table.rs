//! The batched-decode cache table's API without the `cuda` feature (see the real
//! `cuda/kv_table.rs`): no table can exist, every entry point is unreachable.

use std::convert::Infallible;

use super::{CudaDevice, DeviceIds, DeviceTensor, Q8Ticket};
use crate::cpu::{AttentionParams, RopeParams};
use crate::error::Result;

/// Each token's key and value caches per layer on the device (none can exist in this build).
#[derive(Debug)]
pub struct KvTable {
    never: Infallible,
}

impl KvTable {
    /// Most tokens a step may hold.
    pub fn max_tokens(&self) -> usize {
        match self.never {}
    }

    /// Tokens of the step last begun.
    pub fn tokens(&self) -> usize {
        match self.never {}
    }

    /// Whether the step's tokens are one sequence's.
    pub fn is_one_sequence(&self) -> bool {
        match self.never {}
    }

    /// Starts a batched step.
    ///
    /// # Errors
    /// Unreachable.
    pub fn begin(&mut self, _tokens: usize) -> Result<()> {
        match self.never {}
    }

    /// Gives every token token 0's caches in a layer.
    ///
    /// # Errors
    /// Unreachable.
    pub fn repeat_first(&mut self, _layer: usize) -> Result<()> {
        match self.never {}
    }

    /// Starts a step of one sequence.
    ///
    /// # Errors
    /// Unreachable.
    pub fn begin_sequence(&mut self, _tokens: usize) -> Result<()> {
        match self.never {}
    }
}

/// One sequence's page table on the device (none can exist in this build).
#[derive(Debug)]
pub struct KvPages {
    never: Infallible,
}

impl KvPages {
    /// Pages mapped.
    pub fn len(&self) -> usize {
        match self.never {}
    }

    /// True when no page is mapped.
    pub fn is_empty(&self) -> bool {
        match self.never {}
    }

    /// Positions a page holds.
    pub fn page_rows(&self) -> usize {
        match self.never {}
    }

    /// Positions the mapped pages hold.
    pub fn positions(&self) -> usize {
        match self.never {}
    }

    /// Most pages it maps.
    pub fn max_pages(&self) -> usize {
        match self.never {}
    }

    /// The pool pages mapped.
    pub fn ids(&self) -> &[u32] {
        match self.never {}
    }
}

impl CudaDevice {
    /// A table for batched decode steps.
    ///
    /// # Errors
    /// Unreachable.
    pub fn new_kv_table(&self, _layers: usize, _max_tokens: usize) -> Result<KvTable> {
        match self.never {}
    }

    /// Sets a token's caches for a layer.
    ///
    /// # Errors
    /// Unreachable.
    pub fn set_kv_entry(
        &self,
        _table: &mut KvTable,
        _layer: usize,
        _token: usize,
        _k: &mut DeviceTensor,
        _v: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// A page table.
    ///
    /// # Errors
    /// Unreachable.
    pub fn new_kv_pages(&self, _max_pages: usize, _page_rows: usize) -> Result<KvPages> {
        match self.never {}
    }

    /// Sets a page table's ids.
    ///
    /// # Errors
    /// Unreachable.
    pub fn set_kv_pages(&self, _pages: &mut KvPages, _ids: &[u32]) -> Result<()> {
        match self.never {}
    }

    /// Sets a token's paged caches for a layer.
    ///
    /// # Errors
    /// Unreachable.
    pub fn set_kv_paged_entry(
        &self,
        _table: &mut KvTable,
        _layer: usize,
        _token: usize,
        _pools: (&mut DeviceTensor, &mut DeviceTensor),
        _pages: &KvPages,
    ) -> Result<()> {
        match self.never {}
    }

    /// Copies the table to the device.
    ///
    /// # Errors
    /// Unreachable.
    pub fn upload_kv_table(&self, _table: &mut KvTable) -> Result<()> {
        match self.never {}
    }

    /// A batched step's KV append through a table.
    ///
    /// # Errors
    /// Unreachable.
    ///
    /// # Safety
    /// As the CUDA build's: the table's caches alive until the launch has run.
    pub unsafe fn kv_append2_table(
        &self,
        _src: (&DeviceTensor, &DeviceTensor),
        _positions: &DeviceIds,
        _table: &KvTable,
        _layer: usize,
    ) -> Result<()> {
        match self.never {}
    }

    /// A batched step's fused RoPE and KV append through a table.
    ///
    /// # Errors
    /// Unreachable.
    ///
    /// # Safety
    /// As the CUDA build's: the table's caches alive until the launch has run.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn rope_qk_append_table(
        &self,
        _q: (&DeviceTensor, &mut DeviceTensor),
        _kv: (&DeviceTensor, &DeviceTensor),
        _positions: &DeviceIds,
        _table: (&KvTable, usize),
        _heads: (usize, usize, usize),
        _p: &RopeParams,
        _freq_factors: Option<&DeviceTensor>,
        _q_scale: f32,
        _head_norms: [Option<crate::cuda::HeadNorm<'_>>; 2],
    ) -> Result<()> {
        match self.never {}
    }

    /// A step's attention through a table.
    ///
    /// # Errors
    /// Unreachable.
    ///
    /// # Safety
    /// As the CUDA build's: the table's caches alive until the launch has run.
    pub unsafe fn attention_table(
        &self,
        _q: &DeviceTensor,
        _positions: &DeviceIds,
        _table: (&KvTable, usize),
        _p: &AttentionParams,
        _sinks: Option<&DeviceTensor>,
        _out: &mut DeviceTensor,
    ) -> Result<()> {
        match self.never {}
    }

    /// Attention over a table that also leaves its output as Q8_1 when asked.
    ///
    /// # Errors
    /// Unreachable.
    ///
    /// # Safety
    /// As the CUDA build's: the table's caches alive until the launch has run.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn attention_table_q8(
        &self,
        _q: &DeviceTensor,
        _positions: &DeviceIds,
        _table: (&KvTable, usize),
        _p: &AttentionParams,
        _sinks: Option<&DeviceTensor>,
        _out: &mut DeviceTensor,
        _quantize: bool,
    ) -> Result<Option<Q8Ticket>> {
        match self.never {}
    }
}
