//! `ContiguousCache`: every layer preallocated to the context length, f32 or f16, token-major.
//! Appending writes in place; views borrow the buffers; nothing is allocated after creation.

use crate::buf::Buf;
#[cfg(test)]
use crate::kv_get;
use crate::state::{Checkpoint, States};
#[cfg(test)]
use crate::KvDType;
use crate::{KvCache, KvError, KvLayout, KvRows, LayerView, RecurrentState};

/// A KV cache preallocated to `capacity` tokens.
///
/// ```
/// use kestrel_kv::{ContiguousCache, KvCache, KvDType, KvLayout};
/// let layout = KvLayout { n_layers: 2, n_kv_head: 1, layer_kv_heads: vec![], k_head_dim: 4, v_head_dim: 4, dtype: KvDType::F16,
///     recurrent: kestrel_kv::RecurrentLayout::NONE };
/// let mut c = ContiguousCache::new(layout, 16).unwrap();
/// c.write(0, 0, &[1.0; 8], &[2.0; 8]).unwrap(); // two tokens of layer 0
/// c.write(1, 0, &[3.0; 8], &[4.0; 8]).unwrap();
/// c.commit(2).unwrap();
/// let v = c.view(1, 2).unwrap();
/// assert_eq!(kestrel_kv::kv_get(&v.k, 7), Some(3.0));
/// assert!(c.write(0, 15, &[0.0; 8], &[0.0; 8]).is_err()); // past capacity
/// ```
pub struct ContiguousCache {
    layout: KvLayout,
    capacity: usize,
    len: usize,
    k: Vec<Buf>,
    v: Vec<Buf>,
    /// The recurrent layers' state (one slot), if the model has such layers.
    states: States,
    checkpoint: Checkpoint,
    /// A step took the state and has not committed: the state may be past `len`.
    dirty: bool,
}

impl ContiguousCache {
    /// Allocate a cache for `capacity` tokens. Fails (instead of aborting) when the memory
    /// cannot be had.
    pub fn new(layout: KvLayout, capacity: usize) -> Result<Self, KvError> {
        layout.check()?;
        let too_large = || KvError::TooLarge {
            tokens: capacity,
            layers: layout.n_layers,
            bytes: layout.bytes_per_token().saturating_mul(capacity),
        };
        // Bytes bound elements (4 bytes each at most): no layer's element count overflows.
        layout
            .bytes_per_token()
            .checked_mul(capacity)
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(too_large)?;
        let (k, v) = Buf::layers(&layout, capacity).map_err(|_| too_large())?;
        let mut states = States::new(layout.recurrent);
        if layout.recurrent.is_some() {
            states.ensure(0)?;
        }
        Ok(ContiguousCache {
            layout,
            capacity,
            len: 0,
            k,
            v,
            states,
            checkpoint: Checkpoint::default(),
            dirty: false,
        })
    }
}

impl KvCache for ContiguousCache {
    fn layout(&self) -> &KvLayout {
        &self.layout
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn seq_len(&self) -> usize {
        self.len
    }

    fn write(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) -> Result<(), KvError> {
        let n = self.layout.check_write(layer, k, v)?;
        let (kt, vt) = (
            self.layout.k_per_token(layer),
            self.layout.v_per_token(layer),
        );
        let end = pos.checked_add(n).filter(|&e| e <= self.capacity);
        let Some(_) = end else {
            return Err(KvError::Full {
                start: pos,
                end: pos.saturating_add(n),
                capacity: self.capacity,
            });
        };
        self.k[layer].write(pos * kt, k)?;
        self.v[layer].write(pos * vt, v)?;
        Ok(())
    }

    fn view(&self, layer: usize, len: usize) -> Result<LayerView<'_>, KvError> {
        self.layout.check_layer(layer)?;
        if len > self.capacity {
            return Err(KvError::Full {
                start: 0,
                end: len,
                capacity: self.capacity,
            });
        }
        Ok(LayerView {
            k: self.k[layer].slice(len * self.layout.k_per_token(layer)),
            v: self.v[layer].slice(len * self.layout.v_per_token(layer)),
            len,
            n_kv_head: self.layout.kv_heads(layer),
            k_head_dim: self.layout.k_head_dim,
            v_head_dim: self.layout.v_head_dim,
            rows: KvRows::CONTIGUOUS,
        })
    }

    fn commit(&mut self, len: usize) -> Result<(), KvError> {
        if len > self.capacity {
            return Err(KvError::Full {
                start: self.len,
                end: len,
                capacity: self.capacity,
            });
        }
        self.len = len;
        self.dirty = false;
        Ok(())
    }

    fn truncate(&mut self, len: usize) {
        if !self.layout.recurrent.is_some() || (len >= self.len && !self.dirty) {
            self.len = self.len.min(len);
            return;
        }
        if self.checkpoint.len == Some(len) && len <= self.len {
            if let Some(s) = self.states.slot_mut(0) {
                if s.len() == self.checkpoint.data.len() {
                    s.copy_from_slice(&self.checkpoint.data);
                    self.len = len;
                    self.dirty = false;
                    return;
                }
            }
        }
        // The state cannot go back: the sequence starts over.
        self.states.clear(0);
        self.checkpoint.len = None;
        self.len = 0;
        self.dirty = false;
    }

    fn memory_bytes(&self) -> usize {
        self.capacity * self.layout.bytes_per_token() + self.states.bytes()
    }

    fn state(&mut self, layer: usize) -> Result<RecurrentState<'_>, KvError> {
        if !self.states.layout().is_some() {
            return Err(KvError::NoState);
        }
        self.dirty = true;
        self.states.layer(0, layer)
    }

    fn can_truncate(&self, len: usize) -> bool {
        !self.layout.recurrent.is_some()
            || len == 0
            || (len >= self.len && !self.dirty)
            || (self.checkpoint.len == Some(len) && len <= self.len)
    }

    fn checkpoint(&mut self) -> Result<(), KvError> {
        if !self.layout.recurrent.is_some() {
            return Ok(());
        }
        if self.dirty {
            self.truncate(self.len);
        }
        match self.states.slot(0) {
            Some(s) => self.checkpoint.save(s, self.len),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(dtype: KvDType) -> KvLayout {
        KvLayout {
            n_layers: 3,
            n_kv_head: 2,
            layer_kv_heads: Vec::new(),
            k_head_dim: 4,
            v_head_dim: 3,
            dtype,
            recurrent: crate::RecurrentLayout::NONE,
        }
    }

    #[test]
    fn writes_land_token_major_and_views_see_them() {
        for dtype in [KvDType::F32, KvDType::F16] {
            let mut c = ContiguousCache::new(layout(dtype), 10).unwrap();
            assert_eq!(c.memory_bytes(), 10 * 3 * dtype.bytes(8 + 6));
            let k: Vec<f32> = (0..16).map(|i| i as f32).collect(); // 2 tokens
            let v: Vec<f32> = (0..12).map(|i| -(i as f32)).collect();
            c.write(1, 3, &k, &v).unwrap();
            let view = c.view(1, 5).unwrap();
            assert_eq!(view.len, 5);
            // token 3 head 1 dim 2 = k[(0*2+1)*4+2] = 6
            assert_eq!(kv_get(&view.k, (3 * 2 + 1) * 4 + 2), Some(6.0));
            assert_eq!(kv_get(&view.v, (4 * 2) * 3), Some(-6.0));
            assert_eq!(
                kv_get(&c.view(0, 5).unwrap().k, (3 * 2 + 1) * 4 + 2),
                Some(0.0)
            );
            c.commit(5).unwrap();
            assert_eq!(c.seq_len(), 5);
            c.truncate(2);
            assert_eq!(c.seq_len(), 2);
            c.reset();
            assert_eq!(c.seq_len(), 0);
        }
    }

    /// Layers of different KV head counts (DeciLM, OpenELM) each take their own width: sizes,
    /// writes, views and the length checks follow the layer's count.
    #[test]
    fn layers_keep_their_own_kv_head_counts() {
        let mut l = layout(KvDType::F32);
        l.layer_kv_heads = vec![2, 1, 3];
        assert_eq!(l.bytes_per_token(), 4 * (2 + 1 + 3) * (4 + 3));
        let mut c = ContiguousCache::new(l.clone(), 4).unwrap();
        assert_eq!(c.memory_bytes(), 4 * 4 * 6 * 7);
        let k: Vec<f32> = (0..2 * 3 * 4).map(|i| i as f32).collect(); // 2 tokens, 3 heads
        let v: Vec<f32> = (0..2 * 3 * 3).map(|i| -(i as f32)).collect();
        c.write(2, 1, &k, &v).unwrap();
        let view = c.view(2, 3).unwrap();
        assert_eq!(view.n_kv_head, 3);
        assert_eq!(kv_get(&view.k, (2 * 3 + 2) * 4 + 1), Some(21.0));
        assert_eq!(c.view(1, 3).unwrap().n_kv_head, 1);
        // Layer 1's one head: 2 tokens of layer 2's width are 6 of layer 1's keys but 4 of its
        // values, and are refused.
        assert!(matches!(
            c.write(1, 0, &k[..24], &v[..12]),
            Err(KvError::Length { .. })
        ));
        c.write(1, 0, &k[..8], &v[..6]).unwrap();
        for bad in [vec![2, 1], vec![2, 0, 3]] {
            l.layer_kv_heads = bad;
            assert!(ContiguousCache::new(l.clone(), 4).is_err());
        }
    }

    #[test]
    fn bad_writes_are_errors() {
        let mut c = ContiguousCache::new(layout(KvDType::F32), 4).unwrap();
        assert!(matches!(
            c.write(3, 0, &[0.0; 8], &[0.0; 6]),
            Err(KvError::Layer { .. })
        ));
        assert!(matches!(
            c.write(0, 0, &[0.0; 7], &[0.0; 6]),
            Err(KvError::Length { .. })
        ));
        assert!(matches!(
            c.write(0, 0, &[0.0; 8], &[0.0; 7]),
            Err(KvError::Length { .. })
        ));
        assert!(matches!(
            c.write(0, 3, &[0.0; 16], &[0.0; 12]),
            Err(KvError::Full { .. })
        ));
        assert!(matches!(
            c.write(0, usize::MAX, &[0.0; 8], &[0.0; 6]),
            Err(KvError::Full { .. })
        ));
        assert!(c.commit(5).is_err());
        assert!(c.view(0, 5).is_err());
    }

    #[test]
    fn absurd_sizes_fail_without_aborting() {
        assert!(matches!(
            ContiguousCache::new(layout(KvDType::F32), usize::MAX / 2),
            Err(KvError::TooLarge { .. })
        ));
        let mut l = layout(KvDType::F16);
        l.n_kv_head = 0;
        assert!(matches!(
            ContiguousCache::new(l, 4),
            Err(KvError::EmptyLayout("n_kv_head"))
        ));
    }

    /// Quantized caches store whole blocks per head row, read back close to what was written,
    /// take 34 or 18 bytes per 32 values, and refuse head sizes that are not multiples of 32.
    #[test]
    fn quantized_caches_round_trip_and_size() {
        for (dtype, tol) in [(KvDType::Q8_0, 0.01), (KvDType::Q4_0, 0.15)] {
            let l = KvLayout {
                n_layers: 2,
                n_kv_head: 2,
                layer_kv_heads: Vec::new(),
                k_head_dim: 32,
                v_head_dim: 64,
                dtype,
                recurrent: crate::RecurrentLayout::NONE,
            };
            let mut c = ContiguousCache::new(l.clone(), 8).unwrap();
            let per = if dtype == KvDType::Q8_0 { 34 } else { 18 };
            assert_eq!(c.memory_bytes(), 8 * 2 * (2 + 4) * per);
            let k: Vec<f32> = (0..3 * 64)
                .map(|i| ((i * 37) % 19) as f32 / 9.5 - 1.0)
                .collect();
            let v: Vec<f32> = (0..3 * 128)
                .map(|i| ((i * 11) % 23) as f32 / 11.5 - 1.0)
                .collect();
            c.write(1, 2, &k, &v).unwrap();
            let view = c.view(1, 5).unwrap();
            for (i, &x) in k.iter().enumerate() {
                let got = kv_get(&view.k, 2 * 64 + i).unwrap();
                assert!((got - x).abs() <= tol, "{dtype:?} k[{i}] {got} vs {x}");
            }
            for (i, &x) in v.iter().enumerate() {
                let got = kv_get(&view.v, 2 * 128 + i).unwrap();
                assert!((got - x).abs() <= tol, "{dtype:?} v[{i}] {got} vs {x}");
            }
            let bad = KvLayout {
                k_head_dim: 48,
                ..l
            };
            assert!(ContiguousCache::new(bad, 8).is_err());
        }
        assert_eq!(KvDType::parse("Q8_0"), Some(KvDType::Q8_0));
        assert_eq!(KvDType::parse("q5_1"), None);
    }

    /// A recurrent state stays, returns to 0, or returns to its checkpoint; any other cut, or
    /// a step that did not commit, starts the sequence over.
    #[test]
    fn recurrent_state_truncates_to_checkpoints_only() {
        let l = KvLayout {
            n_layers: 0,
            recurrent: crate::RecurrentLayout {
                n_layers: 1,
                conv: 2,
                ssm: 2,
            },
            ..layout(KvDType::F32)
        };
        let mut c = ContiguousCache::new(l, 16).unwrap();
        assert_eq!(c.memory_bytes(), 16);
        c.state(0).unwrap().ssm.fill(1.0);
        c.commit(4).unwrap();
        c.checkpoint().unwrap();
        c.state(0).unwrap().ssm.fill(2.0);
        c.commit(7).unwrap();
        assert!(c.can_truncate(7) && c.can_truncate(4) && c.can_truncate(0));
        assert!(!c.can_truncate(5));
        c.truncate(4);
        assert_eq!(c.seq_len(), 4);
        assert_eq!(c.state(0).unwrap().ssm, &[1.0, 1.0]);
        // A step that took the state and failed before committing: back to the checkpoint.
        c.state(0).unwrap().ssm.fill(3.0);
        assert!(c.can_truncate(4));
        c.truncate(4);
        assert_eq!(c.state(0).unwrap().ssm, &[1.0, 1.0]);
        c.commit(6).unwrap();
        c.state(0).unwrap().ssm.fill(3.0);
        assert!(!c.can_truncate(6));
        c.commit(6).unwrap();
        c.truncate(5);
        assert_eq!(c.seq_len(), 0);
        assert_eq!(c.state(0).unwrap().ssm, &[0.0, 0.0]);
        assert!(c.state(1).is_err());
        let mut plain = ContiguousCache::new(layout(KvDType::F32), 4).unwrap();
        assert_eq!(plain.state(0).unwrap_err(), KvError::NoState);
    }
}
