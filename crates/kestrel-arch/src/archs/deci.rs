//! deci (Llama-3.1-Nemotron "NAS" models): llama with FFN biases and no FFN scales. Its layers
//! may drop attention (no heads), replace it by a linear layer (no KV heads) or drop the FFN;
//! kestrel runs files whose every layer has attention and an FFN, and refuses the others.

use kestrel_gguf::GgufModel;

use crate::{ArchError, DecoderConfig};

pub(crate) fn adjust(cfg: &mut DecoderConfig, _m: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = false;
    if cfg.n_ff.contains(&0) {
        return Err(super::unsupported_feature(cfg, "layers without an FFN"));
    }
    Ok(())
}
