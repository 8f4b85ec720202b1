//! One module per `kestrel` subcommand.

pub mod inspect;
