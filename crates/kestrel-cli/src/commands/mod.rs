//! One module per `kestrel` subcommand.

pub mod detokenize;
pub mod inspect;
pub mod template;
pub mod tokenize;
