//! Attention nodes of a CPU step: each segment's keys and values written to its sequence's
//! cache, then the queries of up to [`ATTN_GROUP`] segments per engine call over their caches'
//! views (standard attention, with sinks or a non-causal mask; DeepSeek's latent form).

use kestrel_kv::BatchKv;
use kestrel_tensor::cpu;

use super::BatchSeq;
use crate::ir::AttentionParams;
use crate::GraphError;

/// Segments attended per call of `attention_paged_batch` (their views live on the stack).
pub(super) const ATTN_GROUP: usize = 32;

/// The cache views of a group of segments for one attention call (each sees its positions up
/// to the end of its part of the step); returns the rows the group has in the step.
fn group_views<'a>(
    kv: &'a dyn BatchKv,
    layer: usize,
    group: &[BatchSeq],
    seqs: &mut [cpu::PagedSeq<'a>; ATTN_GROUP],
) -> Result<usize, GraphError> {
    let mut rows = 0;
    for (slot, s) in seqs.iter_mut().zip(group) {
        let kv_len = s.pos0 + s.len;
        let view = kv.view_seq(layer, s.seq, kv_len)?;
        *slot = cpu::PagedSeq {
            n_rows: s.len,
            k: view.k,
            v: view.v,
            kv_len,
            rows: view.rows,
        };
        rows += s.len;
    }
    Ok(rows)
}

/// Attention whose keys and values differ in size: DeepSeek's latent cache (values are the
/// front of the keys) or its decompressed heads. `[a, b, c]`: queries, keys, values.
pub(super) fn latent(
    p: &AttentionParams,
    segs: &[BatchSeq],
    kv: &mut dyn BatchKv,
    [a, b, c]: [&[f32]; 3],
    positions: &[i32],
    out: &mut [f32],
) -> Result<(), GraphError> {
    // Keys and values of different sizes: DeepSeek's latent cache (values = the
    // front of the keys), or its decompressed heads.
    if p.sinks.is_some() || !p.causal {
        return Err(GraphError::Internal(
            "attention sinks or non-causal attention with different K and V sizes".into(),
        ));
    }
    let params = cpu::LatentAttentionParams {
        n_head: p.n_head,
        n_kv_head: p.n_kv_head,
        head_dim_k: p.head_dim_k,
        head_dim_v: p.head_dim_v,
        scale: p.scale,
        softcap: p.softcap.unwrap_or(0.0),
        window: p.window.unwrap_or(0),
        values_in_keys: p.latent,
    };
    let (qw, kw, ow) = (
        p.n_head * p.head_dim_k,
        p.n_kv_head * p.head_dim_k,
        p.n_head * p.head_dim_v,
    );
    let vw = if p.latent {
        0
    } else {
        p.n_kv_head * p.head_dim_v
    };
    let mut r0 = 0;
    for s in segs {
        let r1 = r0 + s.len;
        let (k, v) = (&b[r0 * kw..r1 * kw], &c[r0 * vw..r1 * vw]);
        kv.write_seq(p.layer, s.seq, s.pos0, k, v)?;
        r0 = r1;
    }
    let kv: &dyn BatchKv = kv;
    let mut r0 = 0;
    for group in segs.chunks(ATTN_GROUP) {
        let mut seqs = [cpu::PagedSeq::EMPTY; ATTN_GROUP];
        let r1 = r0 + group_views(kv, p.layer, group, &mut seqs)?;
        cpu::attention_latent(
            &a[r0 * qw..r1 * qw],
            &positions[r0..r1],
            &seqs[..group.len()],
            &params,
            &mut out[r0 * ow..r1 * ow],
        )?;
        r0 = r1;
    }
    Ok(())
}

/// Standard attention (`mask_positions`: the step's scratch for a non-causal mask; `sinks`:
/// the sink logits when the node has them). `[a, b, c]`: queries, keys, values.
#[allow(clippy::too_many_arguments)]
pub(super) fn standard(
    p: &AttentionParams,
    segs: &[BatchSeq],
    kv: &mut dyn BatchKv,
    [a, b, c]: [&[f32]; 3],
    positions: &[i32],
    mask_positions: &mut [i32],
    sinks: Option<&[f32]>,
    out: &mut [f32],
) -> Result<(), GraphError> {
    let params = p.engine_params();
    let (qw, kw) = (p.n_head * p.head_dim_k, p.n_kv_head * p.head_dim_k);
    // Every segment's keys and values first; then the queries of up to
    // `ATTN_GROUP` segments per call, so a decode step's sequences share one
    // parallel region (numerics per sequence unchanged).
    let mut r0 = 0;
    for s in segs {
        let r1 = r0 + s.len;
        let (k, v) = (&b[r0 * kw..r1 * kw], &c[r0 * kw..r1 * kw]);
        kv.write_seq(p.layer, s.seq, s.pos0, k, v)?;
        if !p.causal {
            // Every query sees every key of its sequence: mask as if each sat at
            // the last position.
            mask_positions[r0..r1].fill((s.pos0 + s.len - 1) as i32);
        }
        r0 = r1;
    }
    let mask = if p.causal {
        positions
    } else {
        &*mask_positions
    };
    let kv: &dyn BatchKv = kv;
    let mut r0 = 0;
    for group in segs.chunks(ATTN_GROUP) {
        let mut seqs = [cpu::PagedSeq::EMPTY; ATTN_GROUP];
        let r1 = r0 + group_views(kv, p.layer, group, &mut seqs)?;
        cpu::attention_paged_batch(
            &a[r0 * qw..r1 * qw],
            &mask[r0..r1],
            &seqs[..group.len()],
            &params,
            &mut out[r0 * qw..r1 * qw],
        )?;
        if let Some(sinks) = sinks {
            cpu::apply_attention_sinks(
                &a[r0 * qw..r1 * qw],
                &mask[r0..r1],
                &seqs[..group.len()],
                &params,
                sinks,
                &mut out[r0 * qw..r1 * qw],
            )?;
        }
        r0 = r1;
    }
    Ok(())
}
