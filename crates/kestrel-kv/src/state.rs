//! Recurrent state: what a state-space layer (Mamba's convolution and selective scan) carries
//! from one token to the next, one fixed-size state per layer and sequence beside the KV cache.
//!
//! Unlike keys and values, a state cannot be cut back to an earlier position: it holds the
//! whole past folded into one value. A cache with states can therefore go back only to 0 (the
//! states are zeroed), stay where it is, or return to a [checkpoint](crate::KvCache::checkpoint)
//! taken before a step (speculative decoding verifies a draft after one). As llama.cpp does for
//! its recurrent memory, anything else starts the sequence over.

use crate::KvError;

/// The recurrent state a model keeps per sequence: `n_layers` layers of `conv` convolution
/// values and `ssm` scan values (f32), the same for every such layer (llama.cpp's `n_embd_r`
/// and `n_embd_s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RecurrentLayout {
    /// Layers with a state (0: a model without recurrent layers).
    pub n_layers: usize,
    /// Values of one layer's convolution state.
    pub conv: usize,
    /// Values of one layer's scan state.
    pub ssm: usize,
}

impl RecurrentLayout {
    /// No recurrent layers.
    pub const NONE: RecurrentLayout = RecurrentLayout {
        n_layers: 0,
        conv: 0,
        ssm: 0,
    };

    /// Values of one sequence's state over all layers.
    pub fn values_per_seq(&self) -> usize {
        self.n_layers * (self.conv + self.ssm)
    }

    /// Bytes of one sequence's state over all layers.
    pub fn bytes_per_seq(&self) -> usize {
        self.values_per_seq() * std::mem::size_of::<f32>()
    }

    /// Whether the model has recurrent layers.
    pub fn is_some(&self) -> bool {
        self.n_layers > 0
    }
}

/// One layer's state of one sequence, to read and update in place.
#[derive(Debug)]
pub struct RecurrentState<'a> {
    /// The convolution state.
    pub conv: &'a mut [f32],
    /// The scan state.
    pub ssm: &'a mut [f32],
}

/// States of several slots (sequences), each `layout.values_per_seq()` values, allocated when a
/// slot is first used and zeroed when it starts over.
#[derive(Debug, Default)]
pub(crate) struct States {
    layout: RecurrentLayout,
    data: Vec<f32>,
}

impl States {
    pub(crate) fn new(layout: RecurrentLayout) -> States {
        States {
            layout,
            data: Vec::new(),
        }
    }

    pub(crate) fn layout(&self) -> &RecurrentLayout {
        &self.layout
    }

    fn per_slot(&self) -> usize {
        self.layout.values_per_seq()
    }

    /// Room for slots `0..=slot` (new ones zeroed).
    pub(crate) fn ensure(&mut self, slot: usize) -> Result<(), KvError> {
        let per = self.per_slot();
        let want =
            slot.checked_add(1)
                .and_then(|n| n.checked_mul(per))
                .ok_or(KvError::TooLarge {
                    tokens: 0,
                    layers: self.layout.n_layers,
                    bytes: usize::MAX,
                })?;
        if want > self.data.len() {
            self.data
                .try_reserve_exact(want - self.data.len())
                .map_err(|_| KvError::TooLarge {
                    tokens: 0,
                    layers: self.layout.n_layers,
                    bytes: want.saturating_mul(4),
                })?;
            self.data.resize(want, 0.0);
        }
        Ok(())
    }

    /// Slot `slot`'s values over all layers.
    pub(crate) fn slot(&self, slot: usize) -> Option<&[f32]> {
        let per = self.per_slot();
        self.data.get(slot * per..(slot + 1) * per)
    }

    /// Slot `slot`'s values over all layers, mutable.
    pub(crate) fn slot_mut(&mut self, slot: usize) -> Option<&mut [f32]> {
        let per = self.per_slot();
        self.data.get_mut(slot * per..(slot + 1) * per)
    }

    /// Zero slot `slot` (a sequence starting over), if it exists.
    pub(crate) fn clear(&mut self, slot: usize) {
        if let Some(s) = self.slot_mut(slot) {
            s.fill(0.0);
        }
    }

    /// Layer `layer` of slot `slot`.
    pub(crate) fn layer(
        &mut self,
        slot: usize,
        layer: usize,
    ) -> Result<RecurrentState<'_>, KvError> {
        let l = self.layout;
        if layer >= l.n_layers {
            return Err(KvError::Layer {
                layer,
                n_layers: l.n_layers,
            });
        }
        let s = self.slot_mut(slot).ok_or(KvError::UnknownSeq(slot))?;
        let (conv, ssm) =
            s[layer * (l.conv + l.ssm)..(layer + 1) * (l.conv + l.ssm)].split_at_mut(l.conv);
        Ok(RecurrentState { conv, ssm })
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.data.len() * std::mem::size_of::<f32>()
    }
}

/// A copy of one sequence's states at a length, to return to after a speculative step.
#[derive(Debug, Default)]
pub(crate) struct Checkpoint {
    /// The sequence length the copy is of (`None`: no checkpoint).
    pub(crate) len: Option<usize>,
    pub(crate) data: Vec<f32>,
}

impl Checkpoint {
    /// Copy `src` as the state at `len` (the buffer is reused from one checkpoint to the next).
    pub(crate) fn save(&mut self, src: &[f32], len: usize) -> Result<(), KvError> {
        self.data.clear();
        self.data
            .try_reserve(src.len())
            .map_err(|_| KvError::TooLarge {
                tokens: len,
                layers: 0,
                bytes: src.len().saturating_mul(4),
            })?;
        self.data.extend_from_slice(src);
        self.len = Some(len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_separate_zeroed_and_layered() {
        let mut s = States::new(RecurrentLayout {
            n_layers: 2,
            conv: 3,
            ssm: 4,
        });
        assert!(s.layer(0, 0).is_err());
        s.ensure(1).unwrap();
        {
            let st = s.layer(1, 1).unwrap();
            assert_eq!((st.conv.len(), st.ssm.len()), (3, 4));
            st.conv.fill(1.0);
            st.ssm.fill(2.0);
        }
        assert!(s.slot(0).unwrap().iter().all(|&v| v == 0.0));
        assert_eq!(
            &s.slot(1).unwrap()[7..],
            &[1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0]
        );
        assert!(matches!(s.layer(1, 2), Err(KvError::Layer { .. })));
        s.clear(1);
        assert!(s.slot(1).unwrap().iter().all(|&v| v == 0.0));
        assert_eq!(s.bytes(), 2 * 14 * 4);
    }
}
