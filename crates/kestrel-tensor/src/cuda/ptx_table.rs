// Written by `cargo xtask kernels` from kernels/*.cu: do not edit.

use super::PtxModule;

/// Every kernel module: its name and its PTX for compute_80 and compute_90.
pub(crate) const MODULES: &[PtxModule] = &[
    PtxModule {
        name: "argmax",
        sm80: include_str!("ptx/argmax.sm_80.ptx"),
        sm90: include_str!("ptx/argmax.sm_90.ptx"),
    },
    PtxModule {
        name: "attention",
        sm80: include_str!("ptx/attention.sm_80.ptx"),
        sm90: include_str!("ptx/attention.sm_90.ptx"),
    },
    PtxModule {
        name: "attention_tiled",
        sm80: include_str!("ptx/attention_tiled.sm_80.ptx"),
        sm90: include_str!("ptx/attention_tiled.sm_90.ptx"),
    },
    PtxModule {
        name: "dequant",
        sm80: include_str!("ptx/dequant.sm_80.ptx"),
        sm90: include_str!("ptx/dequant.sm_90.ptx"),
    },
    PtxModule {
        name: "elementwise",
        sm80: include_str!("ptx/elementwise.sm_80.ptx"),
        sm90: include_str!("ptx/elementwise.sm_90.ptx"),
    },
    PtxModule {
        name: "get_rows",
        sm80: include_str!("ptx/get_rows.sm_80.ptx"),
        sm90: include_str!("ptx/get_rows.sm_90.ptx"),
    },
    PtxModule {
        name: "kv_append",
        sm80: include_str!("ptx/kv_append.sm_80.ptx"),
        sm90: include_str!("ptx/kv_append.sm_90.ptx"),
    },
    PtxModule {
        name: "matvec_float",
        sm80: include_str!("ptx/matvec_float.sm_80.ptx"),
        sm90: include_str!("ptx/matvec_float.sm_90.ptx"),
    },
    PtxModule {
        name: "mmvq",
        sm80: include_str!("ptx/mmvq.sm_80.ptx"),
        sm90: include_str!("ptx/mmvq.sm_90.ptx"),
    },
    PtxModule {
        name: "mmvq_k",
        sm80: include_str!("ptx/mmvq_k.sm_80.ptx"),
        sm90: include_str!("ptx/mmvq_k.sm_90.ptx"),
    },
    PtxModule {
        name: "mmvq_tail",
        sm80: include_str!("ptx/mmvq_tail.sm_80.ptx"),
        sm90: include_str!("ptx/mmvq_tail.sm_90.ptx"),
    },
    PtxModule {
        name: "mmvq_wide",
        sm80: include_str!("ptx/mmvq_wide.sm_80.ptx"),
        sm90: include_str!("ptx/mmvq_wide.sm_90.ptx"),
    },
    PtxModule {
        name: "moe",
        sm80: include_str!("ptx/moe.sm_80.ptx"),
        sm90: include_str!("ptx/moe.sm_90.ptx"),
    },
    PtxModule {
        name: "norm",
        sm80: include_str!("ptx/norm.sm_80.ptx"),
        sm90: include_str!("ptx/norm.sm_90.ptx"),
    },
    PtxModule {
        name: "quantize",
        sm80: include_str!("ptx/quantize.sm_80.ptx"),
        sm90: include_str!("ptx/quantize.sm_90.ptx"),
    },
    PtxModule {
        name: "rope",
        sm80: include_str!("ptx/rope.sm_80.ptx"),
        sm90: include_str!("ptx/rope.sm_90.ptx"),
    },
    PtxModule {
        name: "ssm",
        sm80: include_str!("ptx/ssm.sm_80.ptx"),
        sm90: include_str!("ptx/ssm.sm_90.ptx"),
    },
    PtxModule {
        name: "topk",
        sm80: include_str!("ptx/topk.sm_80.ptx"),
        sm90: include_str!("ptx/topk.sm_90.ptx"),
    },
];
