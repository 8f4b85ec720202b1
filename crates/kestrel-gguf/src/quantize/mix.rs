//! Which type each tensor gets: llama.cpp's quantization mixes (`llama-quant.cpp`:
//! `tensor_allows_quantization`, `llama_tensor_get_type_impl`, `tensor_type_fallback`), ported
//! rule for rule so a file quantized here holds the same types as `llama-quantize`'s.

use super::FileType;
use crate::GgmlType;

/// A tensor's role, as llama.cpp's `tensor_category`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Category {
    Output,
    TokenEmbd,
    AttnQkv,
    AttnKvB,
    AttnV,
    AttnK,
    AttnQ,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Other,
}

impl Category {
    pub(crate) fn of(name: &str) -> Category {
        let has = |s: &str| name.contains(s);
        if name == "output.weight" {
            Category::Output
        } else if is_token_embd(name) {
            Category::TokenEmbd
        } else if has("attn_qkv.weight") {
            Category::AttnQkv
        } else if has("attn_kv_b.weight") {
            Category::AttnKvB
        } else if has("attn_v.weight") {
            Category::AttnV
        } else if has("attn_k.weight") {
            Category::AttnK
        } else if has("attn_q.weight") {
            Category::AttnQ
        } else if has("attn_output.weight") {
            Category::AttnOutput
        } else if has("ffn_up") {
            Category::FfnUp
        } else if has("ffn_gate") {
            Category::FfnGate
        } else if has("ffn_down") {
            Category::FfnDown
        } else {
            Category::Other
        }
    }

    fn is_attn_v(self) -> bool {
        matches!(
            self,
            Category::AttnV | Category::AttnQkv | Category::AttnKvB
        )
    }
}

pub(crate) fn is_token_embd(name: &str) -> bool {
    name == "token_embd.weight" || name == "per_layer_token_embd.weight"
}

/// What the mixes read of the model (llama.cpp's hparams and arch).
#[derive(Clone, Debug, Default)]
pub(crate) struct ModelFacts {
    pub(crate) arch: String,
    /// Query heads per KV head of layer 0 (0 when it has no KV heads).
    pub(crate) n_gqa: u32,
    pub(crate) n_expert: u32,
    pub(crate) n_layer: u32,
    /// llama.cpp's `LLM_TYPE_70B` (an 80-layer llama with grouped KV heads).
    pub(crate) is_70b: bool,
}

/// The counters llama.cpp's `quantize_state_impl` keeps while it walks the tensors.
#[derive(Clone, Debug, Default)]
pub(crate) struct MixState {
    pub(crate) n_attention_wv: u32,
    pub(crate) i_attention_wv: u32,
    pub(crate) i_ffn_down: u32,
    pub(crate) i_ffn_gate: u32,
    pub(crate) i_ffn_up: u32,
    pub(crate) n_fallback: u32,
    pub(crate) has_imatrix: bool,
    pub(crate) has_tied_embeddings: bool,
    /// `--output-tensor-type` (also the tied token embeddings' type).
    pub(crate) output_type: Option<GgmlType>,
    /// `--token-embedding-type`.
    pub(crate) token_embd_type: Option<GgmlType>,
}

/// llama.cpp's `tensor_allows_quantization` (the rules that can apply to the families kestrel
/// reads; `quantize_output` false is `--leave-output-tensor`).
pub(crate) fn allows_quantization(name: &str, n_dims: usize, quantize_output: bool) -> bool {
    if n_dims < 2 || !name.ends_with("weight") {
        return false;
    }
    if name.contains("_norm.weight") || (!quantize_output && name == "output.weight") {
        return false;
    }
    const KEEP: &[&str] = &[
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
        ".position_embd",
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        "a.rvq.codebook",
        "mm.a.code_embd",
    ];
    if KEEP.iter().any(|k| name.contains(k)) {
        return false;
    }
    name != "position_embd.weight" && name != "token_types.weight"
}

/// `blk.N.` of a tensor name.
fn layer_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("blk.")?;
    let end = rest.find('.')?;
    rest[..end].parse().ok()
}

fn use_more_bits(i: u32, n: u32) -> bool {
    let (i, n) = (i as i64, n as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// llama.cpp's `llama_tensor_get_type_impl`: the mix's type for one tensor of shape
/// `ne0 × ...` in `category` (updating the state's counters as llama.cpp does).
#[allow(clippy::too_many_arguments)]
pub(crate) fn mix_type(
    st: &mut MixState,
    m: &ModelFacts,
    mut t: GgmlType,
    name: &str,
    ne0: u64,
    ne2: u64,
    ft: FileType,
    cat: Category,
) -> Result<GgmlType, String> {
    use FileType as F;
    use GgmlType as G;
    let falcon = m.arch == "falcon";
    let layer_info = |i: u32, n: u32| -> Result<(u32, u32), String> {
        if m.n_expert.max(1) > 1 {
            let l = layer_of(name).ok_or_else(|| format!("cannot find the layer of {name}"))?;
            if l >= n {
                return Err(format!(
                    "bad layer {l} for tensor {name}: must be below {n}"
                ));
            }
            return Ok((l, n));
        }
        Ok((i, n))
    };
    let iq_low = matches!(
        ft,
        F::IQ2_XXS | F::IQ2_XS | F::IQ1_S | F::IQ2_S | F::IQ2_M | F::IQ1_M
    );
    if cat == Category::Output || (st.has_tied_embeddings && cat == Category::TokenEmbd) {
        let qk = t.block_size() as u64;
        if let Some(o) = st.output_type {
            t = o;
        } else if ft == F::MXFP4_MOE || falcon || !ne0.is_multiple_of(qk) {
            t = G::Q8_0;
        } else if matches!(
            ft,
            F::IQ2_XXS | F::IQ2_XS | F::IQ3_XXS | F::IQ1_S | F::IQ2_S | F::IQ2_M | F::IQ1_M
        ) {
            t = G::Q5K;
        } else if t != G::Q8_0 {
            t = G::Q6K;
        }
    } else if ft == F::MXFP4_MOE {
        t = if ne2 > 1 { G::MXFP4 } else { G::Q8_0 };
    } else if cat == Category::TokenEmbd {
        if let Some(e) = st.token_embd_type {
            t = e;
        } else if matches!(ft, F::IQ2_XXS | F::IQ2_XS | F::IQ1_S | F::IQ1_M) {
            t = G::Q2K;
        } else if matches!(ft, F::IQ2_S | F::IQ2_M | F::IQ3_XXS) {
            t = G::IQ3S;
        } else if matches!(ft, F::TQ1_0 | F::TQ2_0) {
            t = G::Q4K;
        }
    } else if iq_low {
        let s_or_m = matches!(ft, F::IQ2_S | F::IQ2_M);
        if cat.is_attn_v() {
            t = if m.n_gqa >= 4 || m.n_expert >= 4 {
                G::Q4K
            } else if s_or_m {
                G::IQ3S
            } else {
                G::Q2K
            };
            st.i_attention_wv += 1;
        } else if m.n_expert == 8 && cat == Category::AttnK {
            t = G::Q4K;
        } else if cat == Category::FfnDown {
            if st.i_ffn_down < m.n_layer / 8 {
                t = if s_or_m { G::IQ3S } else { G::Q2K };
            }
            st.i_ffn_down += 1;
        } else if cat == Category::AttnOutput {
            if m.n_expert == 8 {
                t = G::Q5K;
            } else if matches!(ft, F::IQ1_S | F::IQ1_M) {
                t = G::IQ2XXS;
            } else if s_or_m {
                t = G::IQ3S;
            }
        }
    } else if cat.is_attn_v() {
        let (i, n) = (st.i_attention_wv, st.n_attention_wv);
        match ft {
            F::Q2_K => t = if m.n_gqa >= 4 { G::Q4K } else { G::Q3K },
            F::Q2_K_S if m.n_gqa >= 4 => t = G::Q4K,
            F::IQ3_XXS => {
                t = if m.n_gqa >= 4 {
                    G::Q4K
                } else if !st.has_imatrix {
                    G::IQ3S
                } else {
                    G::IQ3XXS
                }
            }
            F::IQ3_XS | F::IQ3_S if m.n_gqa >= 4 => t = G::Q4K,
            F::IQ3_M => t = G::Q4K,
            F::Q3_K_M => t = if i < 2 { G::Q5K } else { G::Q4K },
            F::Q3_K_L => t = G::Q5K,
            F::IQ4_NL | F::IQ4_XS if m.n_gqa >= 4 => t = G::Q5K,
            F::Q4_K_M | F::Q5_K_M if use_more_bits(i, n) => t = G::Q6K,
            F::Q4_K_S if i < 4 => t = G::Q5K,
            _ => {}
        }
        if m.is_70b && matches!(t, G::Q3K | G::Q4K) {
            t = G::Q5K;
        }
        if m.n_expert == 8 {
            t = G::Q8_0;
        }
        st.i_attention_wv += 1;
    } else if cat == Category::AttnK {
        if m.n_expert == 8 {
            t = G::Q8_0;
        } else if ft == F::IQ3_XS {
            t = G::IQ3XXS;
        } else if ft == F::IQ3_XXS {
            t = G::IQ2S;
        }
    } else if cat == Category::AttnQ {
        if ft == F::IQ3_XS {
            t = G::IQ3XXS;
        } else if ft == F::IQ3_XXS {
            t = G::IQ2S;
        }
    } else if cat == Category::FfnDown {
        let (i, n) = layer_info(st.i_ffn_down, m.n_layer)?;
        match ft {
            F::Q2_K => t = G::Q3K,
            F::Q2_K_S if i < n / 8 => t = G::Q4K,
            F::IQ3_XXS if !st.has_imatrix => t = if i < n / 8 { G::Q4K } else { G::Q3K },
            F::Q3_K_M => {
                t = if i < n / 16 {
                    G::Q5K
                } else if !falcon || use_more_bits(i, n) {
                    G::Q4K
                } else {
                    G::Q3K
                }
            }
            F::IQ3_M if i < n / 8 || (m.n_expert == 8 && use_more_bits(i, n)) => t = G::Q4K,
            F::Q3_K_L => t = if falcon { G::Q4K } else { G::Q5K },
            F::Q4_K_M => {
                if falcon {
                    t = if i < n / 16 {
                        G::Q6K
                    } else if use_more_bits(i, n) {
                        G::Q5K
                    } else {
                        G::Q4K
                    };
                } else if use_more_bits(i, n) {
                    t = G::Q6K;
                }
            }
            F::IQ4_NL | F::IQ4_XS if i < n / 8 && !st.has_imatrix => t = G::Q5K,
            F::Q5_K_M if use_more_bits(i, n) => t = G::Q6K,
            F::Q4_K_S if !falcon && i < n / 8 => t = G::Q5K,
            F::Q4_0 | F::Q5_0 if st.has_imatrix && i < n / 8 => {
                t = if ft == F::Q4_0 { G::Q4_1 } else { G::Q5_1 };
            }
            _ => {}
        }
        st.i_ffn_down += 1;
    } else if cat == Category::AttnOutput {
        if !falcon {
            if m.n_expert == 8 {
                if matches!(
                    ft,
                    F::Q2_K
                        | F::IQ3_XS
                        | F::IQ3_XXS
                        | F::Q3_K_S
                        | F::Q3_K_M
                        | F::IQ4_NL
                        | F::Q4_K_S
                        | F::Q4_K_M
                        | F::IQ3_S
                        | F::IQ3_M
                        | F::IQ4_XS
                ) {
                    t = G::Q5K;
                }
            } else {
                match ft {
                    F::Q2_K => t = G::Q3K,
                    F::IQ3_XXS => t = G::IQ3S,
                    F::Q3_K_M | F::IQ3_M => t = G::Q4K,
                    F::Q3_K_L => t = G::Q5K,
                    _ => {}
                }
            }
        } else if ft == F::Q3_K_L {
            t = G::Q4K;
        }
    } else if cat == Category::AttnQkv {
        match ft {
            F::Q3_K_M | F::Q3_K_L | F::IQ3_M => t = G::Q4K,
            F::Q4_K_M => t = G::Q5K,
            F::Q5_K_M => t = G::Q6K,
            _ => {}
        }
    } else if cat == Category::FfnGate || cat == Category::FfnUp {
        let counter = if cat == Category::FfnGate {
            st.i_ffn_gate
        } else {
            st.i_ffn_up
        };
        let (i, n) = layer_info(counter, m.n_layer)?;
        if ft == F::IQ3_XS && i >= n / 8 && i < 7 * n / 8 {
            t = G::IQ3XXS;
        }
        if cat == Category::FfnGate {
            st.i_ffn_gate += 1;
        } else {
            st.i_ffn_up += 1;
        }
    }
    Ok(t)
}

/// llama.cpp's `tensor_type_fallback`: a type whose blocks fit a row of `ne0` values.
pub(crate) fn fallback(st: &mut MixState, t: GgmlType, ne0: u64) -> Result<GgmlType, String> {
    use GgmlType as G;
    let qk = t.block_size() as u64;
    if ne0.is_multiple_of(qk) {
        return Ok(t);
    }
    st.n_fallback += 1;
    let r = match t {
        G::IQ1S | G::IQ1M | G::IQ2XXS | G::IQ2XS | G::IQ2S | G::IQ3XXS | G::IQ3S | G::IQ4XS => {
            G::IQ4NL
        }
        G::Q2K | G::Q3K | G::TQ1_0 | G::TQ2_0 => G::Q4_0,
        G::Q4K => G::Q5_0,
        G::Q5K => G::Q5_1,
        G::Q6K => G::Q8_0,
        _ if qk <= 32 => t,
        _ => return Err(format!("no fallback type is defined for {t}")),
    };
    Ok(if ne0.is_multiple_of(r.block_size() as u64) {
        r
    } else {
        G::F16
    })
}

/// llama.cpp's `tensor_requires_imatrix`.
pub(crate) fn requires_imatrix(name: &str, t: GgmlType, ft: FileType) -> bool {
    if is_token_embd(name) || name == "output.weight" {
        return false;
    }
    match t {
        GgmlType::IQ3XXS
        | GgmlType::IQ2XXS
        | GgmlType::IQ2XS
        | GgmlType::IQ2S
        | GgmlType::IQ1M
        | GgmlType::IQ1S => true,
        GgmlType::Q2K => ft == FileType::Q2_K_S,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_and_quantizable_tensors_follow_llama_cpp() {
        assert_eq!(Category::of("blk.3.attn_v.weight"), Category::AttnV);
        assert_eq!(
            Category::of("blk.3.ffn_down_exps.weight"),
            Category::FfnDown
        );
        assert_eq!(Category::of("token_embd.weight"), Category::TokenEmbd);
        assert!(allows_quantization("blk.0.attn_q.weight", 2, true));
        assert!(!allows_quantization("blk.0.attn_norm.weight", 1, true));
        assert!(!allows_quantization("blk.0.ffn_gate_inp.weight", 2, true));
        assert!(!allows_quantization("blk.0.ssm_conv1d.weight", 2, true));
        assert!(!allows_quantization("output.weight", 2, false));
        assert!(use_more_bits(0, 30) && !use_more_bits(4, 30) && use_more_bits(5, 30));
    }

    #[test]
    fn q4_k_m_gives_q6_k_to_some_attn_v_and_ffn_down() {
        let m = ModelFacts {
            arch: "llama".into(),
            n_gqa: 3,
            n_expert: 0,
            n_layer: 8,
            is_70b: false,
        };
        let mut st = MixState {
            n_attention_wv: 8,
            ..MixState::default()
        };
        let types: Vec<GgmlType> = (0..8)
            .map(|l| {
                mix_type(
                    &mut st,
                    &m,
                    GgmlType::Q4K,
                    &format!("blk.{l}.attn_v.weight"),
                    576,
                    1,
                    FileType::Q4_K_M,
                    Category::AttnV,
                )
                .unwrap()
            })
            .collect();
        // n/8 = 1: layer 0, layers >= 7, and (i - 1) % 3 == 2 (3, 6).
        let six: Vec<usize> = (0..8).filter(|&i| types[i] == GgmlType::Q6K).collect();
        assert_eq!(six, vec![0, 3, 6, 7]);
        let mut st2 = MixState::default();
        assert_eq!(
            fallback(&mut st2, GgmlType::Q4K, 576).unwrap(),
            GgmlType::Q5_0
        );
        assert_eq!(
            fallback(&mut st2, GgmlType::Q6K, 40).unwrap(),
            GgmlType::F16
        );
        assert_eq!(st2.n_fallback, 2);
    }
}
