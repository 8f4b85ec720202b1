//! The settings every attention path shares ([`AttentionParams`]), which keys a query sees
//! ([`visible_keys`]), and where llama.cpp switches to its tiled path ([`GGML_FA_TILE_Q`]).

/// Query rows from which llama.cpp's CPU flash attention (`GGML_FA_TILE_Q`) takes its tiled f32
/// path; below it (decode, short prompts) it runs the per-row f16 path that
/// `run_f16_ggml` mirrors.
pub const GGML_FA_TILE_Q: usize = 64;

/// Attention settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionParams {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads; `n_head` must be a multiple (query head `h` reads KV head
    /// `h / (n_head / n_kv_head)`, as llama.cpp groups them).
    pub n_kv_head: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Multiplies `q·k` (usually `1 / sqrt(head_dim)`).
    pub scale: f32,
    /// Logit soft cap `c`: scores become `c * tanh(scale * q·k / c)` (0 for none; Gemma 2).
    pub softcap: f32,
    /// Sliding window `w`: a query at position `p` sees keys at positions `p - w < j <= p`
    /// (llama.cpp's `LLAMA_SWA_TYPE_STANDARD` masks `p - j >= w`); 0 for no window.
    pub window: usize,
}

/// The keys `lo..hi` a query at `pos` sees among `kv_len` cached positions.
#[inline]
pub fn visible_keys(pos: i32, kv_len: usize, window: usize) -> (usize, usize) {
    if pos < 0 {
        return (0, 0);
    }
    let p = pos as usize;
    let hi = (p + 1).min(kv_len);
    let lo = if window > 0 {
        (p + 1).saturating_sub(window)
    } else {
        0
    };
    (lo.min(hi), hi)
}
