//! kestrel's own online-softmax attention for f32 caches under 64 rows and for quantized (or
//! mixed) caches: the query rows of one KV head scored together against each key, blocks of
//! [`KEY_BLOCK`] keys, f32 accumulation; each row sees the operations of a lone row, in order.

use rayon::prelude::*;

use super::kv::{head, KvElem, KvRows};
use super::params::{visible_keys, AttentionParams};

/// Keys scored per step of the online softmax (their scores live on the stack).
const KEY_BLOCK: usize = 64;

#[allow(clippy::too_many_arguments)]
pub(super) fn run<T: KvElem>(
    q: &[f32],
    positions: &[i32],
    k: &[T],
    v: &[T],
    kv_len: usize,
    rows: KvRows<'_>,
    p: &AttentionParams,
    out: &mut [f32],
) {
    run2(q, positions, k, v, kv_len, rows, p, out)
}

/// Query rows scored together against each key: the heads of consecutive tokens that share one
/// KV head, so each key and value row is read once per group instead of once per query row.
const GROUP_ROWS: usize = 16;

#[allow(clippy::too_many_arguments)]
pub(super) fn run2<K: KvElem, V: KvElem>(
    q: &[f32],
    positions: &[i32],
    k: &[K],
    v: &[V],
    kv_len: usize,
    rows: KvRows<'_>,
    p: &AttentionParams,
    out: &mut [f32],
) {
    let hd = p.head_dim;
    let gq = p.n_head / p.n_kv_head;
    let heads = gq.min(GROUP_ROWS);
    let tokens = (GROUP_ROWS / heads).max(1);
    #[cfg(target_arch = "x86_64")]
    let avx2 = crate::cpu::isa::active_isa() >= crate::cpu::isa::Isa::Avx2;
    out.par_chunks_mut(tokens * p.n_head * hd)
        .enumerate()
        .for_each(|(c, oc)| {
            let t0 = c * tokens;
            for kvh in 0..p.n_kv_head {
                for h0 in (kvh * gq..(kvh + 1) * gq).step_by(heads) {
                    let h1 = (h0 + heads).min((kvh + 1) * gq);
                    let mut outs: [&mut [f32]; GROUP_ROWS] = Default::default();
                    let mut g = Group {
                        qs: [&[]; GROUP_ROWS],
                        keys: [(0, 0); GROUP_ROWS],
                        n: 0,
                        kvh,
                        rows,
                    };
                    for (idx, o) in oc.chunks_mut(hd).enumerate() {
                        let (t, h) = (t0 + idx / p.n_head, idx % p.n_head);
                        if (h0..h1).contains(&h) {
                            let i = t * p.n_head + h;
                            g.qs[g.n] = &q[i * hd..(i + 1) * hd];
                            g.keys[g.n] = visible_keys(positions[t], kv_len, p.window);
                            outs[g.n] = o;
                            g.n += 1;
                        }
                    }
                    let outs = &mut outs[..g.n];
                    let same_lo = g.keys[..g.n].iter().all(|kr| kr.0 == g.keys[0].0);
                    #[cfg(target_arch = "x86_64")]
                    if avx2 {
                        // SAFETY: the active ISA is at least AVX2, so the CPU has AVX2 and FMA.
                        unsafe { group_avx2(&g, same_lo, k, v, p, outs) };
                        continue;
                    }
                    group_rows(&g, same_lo, k, v, p, outs);
                }
            }
        });
}

/// Query rows of one KV head: their queries and visible keys.
struct Group<'a> {
    qs: [&'a [f32]; GROUP_ROWS],
    keys: [(usize, usize); GROUP_ROWS],
    n: usize,
    kvh: usize,
    rows: KvRows<'a>,
}

/// [`group_rows`] compiled for AVX2 (the same operations in the same order: LLVM keeps the f32
/// rounding, it only widens the 8-lane loops).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn group_avx2<K: KvElem, V: KvElem>(
    g: &Group<'_>,
    same_lo: bool,
    k: &[K],
    v: &[V],
    p: &AttentionParams,
    outs: &mut [&mut [f32]],
) {
    group_rows(g, same_lo, k, v, p, outs)
}

/// The rows of a group together when their visible keys start at the same position (each key
/// and value row then serves all of them), else one by one. Either way each row sees exactly
/// the operations of a lone row, in the same order: blocks of [`KEY_BLOCK`] keys from its first
/// visible key, scores, the block maximum, the rescale, then `exp` and the value update key by
/// key.
#[inline(always)]
fn group_rows<K: KvElem, V: KvElem>(
    g: &Group<'_>,
    same_lo: bool,
    k: &[K],
    v: &[V],
    p: &AttentionParams,
    outs: &mut [&mut [f32]],
) {
    if same_lo {
        rows_together(g, 0..g.n, k, v, p, outs);
    } else {
        for (i, o) in outs.iter_mut().enumerate() {
            rows_together(g, i..i + 1, k, v, p, std::slice::from_mut(o));
        }
    }
}

/// Rows `sel` of `g` (whose visible keys all start at the same position) into `outs`.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // rows index parallel per-row state
fn rows_together<K: KvElem, V: KvElem>(
    g: &Group<'_>,
    sel: std::ops::Range<usize>,
    k: &[K],
    v: &[V],
    p: &AttentionParams,
    outs: &mut [&mut [f32]],
) {
    let hd = p.head_dim;
    let kv_stride = p.n_kv_head * hd;
    let n = sel.len();
    let qs = &g.qs[sel.clone()];
    let keys = &g.keys[sel];
    let Some(lo) = keys.first().map(|kr| kr.0) else {
        return;
    };
    let hi_max = keys.iter().map(|kr| kr.1).max().unwrap_or(lo);
    for o in outs.iter_mut() {
        o.fill(0.0);
    }
    let mut m = [f32::NEG_INFINITY; GROUP_ROWS];
    let mut l = [0f32; GROUP_ROWS];
    let mut scores = [[0f32; KEY_BLOCK]; GROUP_ROWS];
    let mut j0 = lo;
    while j0 < hi_max {
        let bn = (hi_max - j0).min(KEY_BLOCK);
        let mut bmax = [f32::NEG_INFINITY; GROUP_ROWS];
        for jj in 0..bn {
            let j = j0 + jj;
            let kr = head(k, g.rows.row(j) * kv_stride + g.kvh * hd, hd);
            for r in 0..n {
                if j < keys[r].1 {
                    let mut x = K::dot(qs[r], kr) * p.scale;
                    if p.softcap != 0.0 {
                        x = p.softcap * (x / p.softcap).tanh();
                    }
                    scores[r][jj] = x;
                    bmax[r] = bmax[r].max(x);
                }
            }
        }
        for r in 0..n {
            if j0 < keys[r].1 && bmax[r] > m[r] {
                let corr = (m[r] - bmax[r]).exp();
                if l[r] > 0.0 {
                    outs[r].iter_mut().for_each(|a| *a *= corr);
                }
                l[r] *= corr;
                m[r] = bmax[r];
            }
        }
        for jj in 0..bn {
            let j = j0 + jj;
            let vr = head(v, g.rows.row(j) * kv_stride + g.kvh * hd, hd);
            for r in 0..n {
                if j < keys[r].1 {
                    let w = (scores[r][jj] - m[r]).exp();
                    l[r] += w;
                    V::axpy(outs[r], w, vr);
                }
            }
        }
        j0 += bn;
    }
    for r in 0..n {
        if l[r] > 0.0 {
            let inv = 1.0 / l[r];
            outs[r].iter_mut().for_each(|a| *a *= inv);
        }
    }
}
