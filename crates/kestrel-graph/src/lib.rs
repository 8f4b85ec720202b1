//! Graph IR and compiled execution plans for kestrel.
//!
//! An architecture builder (`kestrel-arch`) describes one step of the model as a [`Graph`]:
//! nodes are ops over named weights and earlier activations, with symbolic rows (the step's
//! tokens) bound when a plan runs. [`plan_memory`] assigns every activation an offset in one
//! arena by liveness, so a plan allocates nothing when it runs; prefill and decode plans are the
//! same graph planned for different token counts.
//!
//! Plans: [`ExecutionPlan`] runs a graph on the CPU engine (single and batched steps);
//! [`CudaPlan`] runs it on a GPU, one sequence at a time (kestrel-tensor's `cuda` feature; a
//! stub engine otherwise, so no caller needs a `cfg`).

mod cuda_plan;
mod cuda_profile;
mod error;
mod graph;
pub mod ir;
mod lora;
mod memory;
mod moe;
mod plan;

pub use cuda_plan::{CudaKvCache, CudaPlan, Picked, Picks};
pub use error::GraphError;
pub use graph::Graph;
pub use ir::{
    AdapterTerm, AttentionParams, AttnTemperature, EmbedIndex, MoeActivation, MoeGating,
    MoeLowRank, MoeParams, MoeProj, Node, NodeId, Op, RopeParams, Rows, SsmConvParams,
    SsmScanParams, WeightId, WeightRef,
};
pub use lora::{derived_weight, low_rank_names, LowRank};
pub use memory::{plan_memory, MemoryPlan, ALIGN_F32};
pub use plan::{ActivationHook, BatchSeq, ExecutionPlan};
