//! One module per `kestrel` subcommand.

pub mod bench;
pub mod chat;
pub mod convert;
pub mod detokenize;
pub mod embed;
pub mod export_lora;
pub mod imatrix;
pub mod inspect;
pub mod logits;
pub mod lora_args;
pub mod model_args;
pub mod perplexity;
pub mod quantize;
pub mod run;
pub mod sampling;
pub mod serve;
pub mod synth;
pub mod template;
pub mod tokenize;
