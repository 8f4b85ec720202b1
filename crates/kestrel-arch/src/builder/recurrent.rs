//! The recurrent mixers of the state-space families (see [`SsmKind`]): Mamba's and Mamba-2's
//! layers as llama.cpp's `build_mamba_layer` / `build_mamba2_layer` build them, and LFM2's short
//! convolution. Each reads and writes its layer's state through the graph's `SsmConv` and
//! `SsmScan` ops.

use kestrel_graph::{NodeId, SsmConvParams, SsmScanParams};

use super::{graph_err, Builder};
use crate::{ArchError, DecoderConfig, SsmConfig, SsmKind};

/// Recurrent layer `il`'s mixer over its normed input `h`: its output before the residual.
pub(crate) fn recurrent_mixer(
    b: &mut Builder<'_>,
    cfg: &DecoderConfig,
    ssm: &SsmConfig,
    il: usize,
    h: NodeId,
) -> Result<NodeId, ArchError> {
    match ssm.kind {
        SsmKind::ShortConv => short_conv(b, cfg, ssm, il, h),
        _ => mamba(b, cfg, ssm, il, h),
    }
}

fn conv_params(
    b: &mut Builder<'_>,
    layer: usize,
    d_conv: usize,
    weight: &str,
    bias: Option<&str>,
) -> Result<SsmConvParams, ArchError> {
    Ok(SsmConvParams {
        layer,
        d_conv,
        weight: b.weight(weight)?,
        bias: bias.and_then(|n| b.opt_weight(n)),
    })
}

/// LFM2: `in_proj` gives B, C and `x` (equal thirds); `C · conv(B · x)`; `out_proj`.
fn short_conv(
    b: &mut Builder<'_>,
    cfg: &DecoderConfig,
    ssm: &SsmConfig,
    il: usize,
    h: NodeId,
) -> Result<NodeId, ArchError> {
    let ge = graph_err(&cfg.arch);
    let p = |s: &str| format!("blk.{il}.{s}");
    let n = ssm.d_inner;
    let w = b.weight(&p("shortconv.in_proj.weight"))?;
    let bcx = b.g.matmul(&p("shortconv_in"), h, w).map_err(&ge)?;
    let bg = b.g.slice(&p("shortconv_b"), bcx, 0, n).map_err(&ge)?;
    let c = b.g.slice(&p("shortconv_c"), bcx, n, n).map_err(&ge)?;
    let x = b.g.slice(&p("shortconv_x"), bcx, 2 * n, n).map_err(&ge)?;
    let bx = b.g.mul(&p("shortconv_bx"), bg, x).map_err(&ge)?;
    let conv = conv_params(
        b,
        cfg.recurrent_index(il),
        ssm.d_conv,
        &p("shortconv.conv.weight"),
        None,
    )?;
    let conv = b.g.ssm_conv(&p("shortconv_conv"), bx, conv).map_err(&ge)?;
    let y = b.g.mul(&p("shortconv_y"), c, conv).map_err(&ge)?;
    let w = b.weight(&p("shortconv.out_proj.weight"))?;
    b.g.matmul(&p("shortconv_out"), y, w).map_err(&ge)
}

/// Mamba and Mamba-2 (see [`SsmKind`]).
fn mamba(
    b: &mut Builder<'_>,
    cfg: &DecoderConfig,
    ssm: &SsmConfig,
    il: usize,
    h: NodeId,
) -> Result<NodeId, ArchError> {
    let ge = graph_err(&cfg.arch);
    let p = |s: &str| format!("blk.{il}.{s}");
    let layer = cfg.recurrent_index(il);
    let (d_inner, d_state, n_group) = (ssm.d_inner, ssm.d_state, ssm.n_group);
    let conv_ch = ssm.conv_channels();
    let mamba2 = ssm.kind == SsmKind::Mamba2;
    let proj = b.linear(&p("ssm_in"), h)?;
    let (z, conv_in, dt_in) = if mamba2 {
        (
            b.g.slice(&p("ssm_z"), proj, 0, d_inner).map_err(&ge)?,
            b.g.slice(&p("ssm_xbc"), proj, d_inner, conv_ch)
                .map_err(&ge)?,
            Some(
                b.g.slice(&p("ssm_dt_in"), proj, d_inner + conv_ch, ssm.dt_rank)
                    .map_err(&ge)?,
            ),
        )
    } else {
        (
            b.g.slice(&p("ssm_z"), proj, d_inner, d_inner)
                .map_err(&ge)?,
            b.g.slice(&p("ssm_x_in"), proj, 0, d_inner).map_err(&ge)?,
            None,
        )
    };
    let conv = conv_params(
        b,
        layer,
        ssm.d_conv,
        &p("ssm_conv1d.weight"),
        Some(&p("ssm_conv1d.bias")),
    )?;
    let conv = b.g.ssm_conv(&p("ssm_conv"), conv_in, conv).map_err(&ge)?;
    let conv = b.g.silu(&p("ssm_conv_silu"), conv).map_err(&ge)?;
    let bc_width = 2 * n_group * d_state;
    let (x, dt, bc, n_head) = if let Some(dt_in) = dt_in {
        let x = b.g.slice(&p("ssm_x"), conv, 0, d_inner).map_err(&ge)?;
        let bc =
            b.g.slice(&p("ssm_bc"), conv, d_inner, bc_width)
                .map_err(&ge)?;
        let bias = b.weight(&p("ssm_dt.bias"))?;
        let dt = b.g.add_bias(&p("ssm_dt"), dt_in, bias).map_err(&ge)?;
        (x, dt, bc, ssm.dt_rank)
    } else {
        let w = b.weight(&p("ssm_x.weight"))?;
        let x_db = b.g.matmul(&p("ssm_x"), conv, w).map_err(&ge)?;
        let mut dt =
            b.g.slice(&p("ssm_dt_low"), x_db, 0, ssm.dt_rank)
                .map_err(&ge)?;
        let mut bc =
            b.g.slice(&p("ssm_bc"), x_db, ssm.dt_rank, bc_width)
                .map_err(&ge)?;
        // llama.cpp normalizes dt, B and C where the family says (FalconMamba) or the layer has
        // the three norm weights (jamba).
        let weighted = ["ssm_dt_norm", "ssm_b_norm", "ssm_c_norm"]
            .iter()
            .all(|n| b.has(&p(&format!("{n}.weight"))));
        if ssm.dt_b_c_rms || weighted {
            let eps = cfg.norm_eps;
            let norm_w = |b: &mut Builder<'_>, n: &str| match weighted {
                true => b.weight(&p(&format!("{n}.weight"))).map(Some),
                false => Ok(None),
            };
            let w = norm_w(b, "ssm_dt_norm")?;
            dt =
                b.g.rms_norm(&p("ssm_dt_norm"), dt, ssm.dt_rank, eps, w)
                    .map_err(&ge)?;
            let (wb, wc) = (norm_w(b, "ssm_b_norm")?, norm_w(b, "ssm_c_norm")?);
            let bn = b.g.slice(&p("ssm_b"), bc, 0, d_state).map_err(&ge)?;
            let cn = b.g.slice(&p("ssm_c"), bc, d_state, d_state).map_err(&ge)?;
            let bn =
                b.g.rms_norm(&p("ssm_b_norm"), bn, d_state, eps, wb)
                    .map_err(&ge)?;
            let cn =
                b.g.rms_norm(&p("ssm_c_norm"), cn, d_state, eps, wc)
                    .map_err(&ge)?;
            bc =
                b.g.head_concat(&p("ssm_bc_normed"), bn, cn, 1, [1, 1])
                    .map_err(&ge)?;
        }
        let w = b.weight(&p("ssm_dt.weight"))?;
        let dt = b.g.matmul(&p("ssm_dt"), dt, w).map_err(&ge)?;
        let bias = b.weight(&p("ssm_dt.bias"))?;
        let dt = b.g.add_bias(&p("ssm_dt_b"), dt, bias).map_err(&ge)?;
        (conv, dt, bc, d_inner)
    };
    let scan = SsmScanParams {
        layer,
        d_state,
        n_head,
        head_dim: d_inner / n_head,
        n_group,
        a: b.weight(&p("ssm_a"))?,
        d: b.weight(&p("ssm_d"))?,
    };
    let y = b.g.ssm_scan(&p("ssm_scan"), x, dt, bc, scan).map_err(&ge)?;
    let mut y = b.g.swiglu(&p("ssm_gated"), z, y).map_err(&ge)?;
    if let Some(w) = b.opt_weight(&p("ssm_norm.weight")) {
        y =
            b.g.rms_norm(&p("ssm_norm"), y, d_inner / n_group, cfg.norm_eps, None)
                .map_err(&ge)?;
        y = b.g.mul_weight(&p("ssm_norm_w"), y, w).map_err(&ge)?;
    }
    b.linear(&p("ssm_out"), y)
}
