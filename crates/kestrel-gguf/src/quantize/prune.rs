//! `--prune-layers`: dropping whole blocks while quantizing and renumbering the rest, as
//! llama-quantize's `remap_layer` does. Tensors are visited in llama.cpp's loader order (by
//! layer, then name); the first time a layer is seen it is dropped (listed), kept as it is (below
//! the first listed layer), or given the next free number; the output's `block_count` is the
//! number after the last one given.

use std::collections::HashMap;

/// The renaming of one quantization run.
#[derive(Debug, Default)]
pub(crate) struct LayerMap {
    /// The layers to drop, ascending, no repeats.
    prune: Vec<u32>,
    /// Each layer seen: its new number, or `None` when dropped.
    mapped: HashMap<u32, Option<u32>>,
    next: u32,
}

/// The layer in a name and the byte range of its number: the leftmost `blk.N.` anywhere in it
/// (llama.cpp's `regex_search` of `blk\.(\d+)\.`).
fn layer_of(name: &str) -> Option<(u32, std::ops::Range<usize>)> {
    name.match_indices("blk.").find_map(|(at, _)| {
        let start = at + 4;
        let rest = &name[start..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || rest.as_bytes().get(digits) != Some(&b'.') {
            return None;
        }
        let n = rest[..digits].parse().ok()?;
        Some((n, start..start + digits))
    })
}

impl LayerMap {
    /// A map dropping `prune` (any order, repeats allowed).
    pub(crate) fn new(prune: &[u32]) -> LayerMap {
        let mut prune = prune.to_vec();
        prune.sort_unstable();
        prune.dedup();
        LayerMap {
            prune,
            ..LayerMap::default()
        }
    }

    /// Whether any layer is dropped (then `block_count` is rewritten).
    pub(crate) fn active(&self) -> bool {
        !self.prune.is_empty()
    }

    /// `name` in the output, or `None` when its layer is dropped. Call in loader order.
    pub(crate) fn rename(&mut self, name: &str) -> Option<String> {
        let Some(first) = self.prune.first().copied() else {
            return Some(name.to_string());
        };
        let Some((blk, digits)) = layer_of(name) else {
            return Some(name.to_string());
        };
        let new = *self.mapped.entry(blk).or_insert_with(|| {
            if self.prune.binary_search(&blk).is_ok() {
                None
            } else if blk < first {
                self.next = blk + 1;
                Some(blk)
            } else {
                self.next += 1;
                Some(self.next - 1)
            }
        });
        let new = new?;
        let mut out = name.to_string();
        out.replace_range(digits, &new.to_string());
        Some(out)
    }

    /// The output's `block_count`: the number after the last layer given one.
    pub(crate) fn block_count(&self) -> u32 {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::LayerMap;

    fn run(prune: &[u32], layers: u32) -> (Vec<Option<String>>, u32) {
        let mut m = LayerMap::new(prune);
        let mut out = vec![m.rename("token_embd.weight")];
        for l in 0..layers {
            for t in ["attn_q.weight", "ffn_down.weight"] {
                out.push(m.rename(&format!("blk.{l}.{t}")));
            }
        }
        out.push(m.rename("output.weight"));
        (out, m.block_count())
    }

    #[test]
    fn dropped_layers_go_and_later_ones_close_up() {
        let (out, n) = run(&[3, 1, 3], 5);
        let names: Vec<&str> = out.iter().flatten().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "token_embd.weight",
                "blk.0.attn_q.weight",
                "blk.0.ffn_down.weight",
                "blk.1.attn_q.weight",
                "blk.1.ffn_down.weight",
                "blk.2.attn_q.weight",
                "blk.2.ffn_down.weight",
                "output.weight",
            ]
        );
        // Layers 0, 2, 4 kept: 0 -> 0, 2 -> 1, 4 -> 2.
        assert_eq!(out[5].as_deref(), Some("blk.1.attn_q.weight"));
        assert_eq!(n, 3);
    }

    #[test]
    fn nothing_listed_renames_nothing() {
        let (out, _) = run(&[], 3);
        assert!(out.iter().all(Option::is_some));
        assert_eq!(out[3].as_deref(), Some("blk.1.attn_q.weight"));
        assert!(!LayerMap::new(&[]).active());
    }

    #[test]
    fn layers_past_the_model_change_nothing_but_the_count() {
        let (out, n) = run(&[9], 4);
        assert!(out.iter().all(Option::is_some));
        assert_eq!(n, 4);
    }

    #[test]
    fn only_blk_names_with_a_number_are_layers() {
        let mut m = LayerMap::new(&[0]);
        assert_eq!(m.rename("blk.x.weight").as_deref(), Some("blk.x.weight"));
        assert_eq!(m.rename("blk.0x.weight").as_deref(), Some("blk.0x.weight"));
        assert_eq!(m.rename("blk.0.w"), None);
        // As llama.cpp's search: the pattern anywhere, the leftmost match.
        assert_eq!(m.rename("v.blk.0.w"), None);
        assert_eq!(m.rename("blk.x.blk.2.w").as_deref(), Some("blk.x.blk.0.w"));
    }
}
