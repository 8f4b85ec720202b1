//! Samplers and grammar-constrained decoding for kestrel.
//!
//! Status: placeholder. It will hold the sampler pipeline (penalties, bias, temperature, top-k/top-p/min-p/typical-p, seeded RNG), GBNF parsing and JSON Schema to grammar compilation with trie-based token masks.
#![forbid(unsafe_code)]
