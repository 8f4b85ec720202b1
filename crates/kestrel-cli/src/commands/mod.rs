//! One module per `kestrel` subcommand.

pub mod bench;
pub mod detokenize;
pub mod inspect;
pub mod perplexity;
pub mod run;
pub mod template;
pub mod tokenize;
