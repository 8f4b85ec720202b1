//! Graph IR (nodes, ops, symbolic dims, weights by name) and compiled execution plans for kestrel.
//!
//! Status: placeholder. It will hold the IR, `compile(graph, engine) -> ExecutionPlan` (topological order, fusion passes, liveness-based buffer reuse in one arena) and per-step binding of symbolic dims; prefill and decode plans come from one graph.
#![forbid(unsafe_code)]
