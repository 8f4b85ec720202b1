//! State-space nodes of a CPU step (Mamba 2's causal convolution and selective scan), run
//! segment by segment over each sequence's recurrent state.

use kestrel_kv::BatchKv;
use kestrel_tensor::cpu;

use super::BatchSeq;
use crate::ir::{SsmConvParams, SsmScanParams};
use crate::GraphError;

/// The causal convolution of every segment (`w`, `bias`: its taps and bias).
pub(super) fn conv(
    p: &SsmConvParams,
    segs: &[BatchSeq],
    kv: &mut dyn BatchKv,
    a: &[f32],
    (w, bias): (&[f32], Option<&[f32]>),
    width: usize,
    out: &mut [f32],
) -> Result<(), GraphError> {
    let mut r0 = 0;
    for s in segs {
        let r1 = r0 + s.len;
        let st = kv.state_seq(p.layer, s.seq)?;
        if s.pos0 == 0 {
            // Position 0 starts the sequence: no earlier inputs.
            st.conv.fill(0.0);
        }
        cpu::ssm_conv(
            &a[r0 * width..r1 * width],
            s.len,
            width,
            p.d_conv,
            w,
            bias,
            st.conv,
            &mut out[r0 * width..r1 * width],
        )?;
        r0 = r1;
    }
    Ok(())
}

/// The selective scan of every segment (`[a, b, c]`: its inputs; `av`, `dv`: A and D).
pub(super) fn scan(
    p: &SsmScanParams,
    segs: &[BatchSeq],
    kv: &mut dyn BatchKv,
    [a, b, c]: [&[f32]; 3],
    (av, dv): (&[f32], &[f32]),
    width: usize,
    out: &mut [f32],
) -> Result<(), GraphError> {
    let sp = cpu::SsmScanParams {
        d_state: p.d_state,
        n_head: p.n_head,
        head_dim: p.head_dim,
        n_group: p.n_group,
        a_per_state: av.len() == p.n_head * p.d_state && p.d_state > 1,
    };
    let (nh, bw) = (p.n_head, 2 * p.n_group * p.d_state);
    let mut r0 = 0;
    for s in segs {
        let r1 = r0 + s.len;
        let st = kv.state_seq(p.layer, s.seq)?;
        if s.pos0 == 0 {
            st.ssm.fill(0.0);
        }
        cpu::ssm_scan(
            &sp,
            st.ssm,
            &a[r0 * width..r1 * width],
            &b[r0 * nh..r1 * nh],
            av,
            &c[r0 * bw..r1 * bw],
            dv,
            s.len,
            &mut out[r0 * width..r1 * width],
        )?;
        r0 = r1;
    }
    Ok(())
}
