//! `SessionPool`: the KV sessions a [`Model`](crate::Model) keeps, so several conversations stay
//! cached at once. A prompt that extends the active session's tokens stays on it; one that
//! leaves it moves to the spare session sharing the longest prefix with it, else to a fresh
//! session while the pool has room, else to the least recently used one — so switching between
//! conversations does not throw their caches away. A session counts only for prompts run at
//! the LoRA adapter scales its cache was computed at (conversations with different adapters
//! keep their own sessions).

use kestrel_generate::{Generator, Session};

use crate::Error;

/// The most sessions one model keeps (each holds a whole context's KV cache).
pub const MAX_SESSIONS: usize = 64;

/// Spare sessions beside the generator's active one.
#[derive(Debug)]
pub(crate) struct SessionPool {
    /// Sessions in all, the active one included (at least 1).
    size: usize,
    spare: Vec<Session>,
    /// Last use of the active session (`stamps[0]`) and of each spare (`stamps[1 + i]`).
    stamps: Vec<u64>,
    clock: u64,
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl SessionPool {
    pub(crate) fn new(size: usize) -> Result<SessionPool, Error> {
        if size == 0 || size > MAX_SESSIONS {
            return Err(Error::InvalidOption {
                name: "session_pool",
                reason: format!("{size}: expected 1..={MAX_SESSIONS}"),
            });
        }
        Ok(SessionPool {
            size,
            spare: Vec::new(),
            stamps: vec![0],
            clock: 0,
        })
    }

    /// Sessions in all.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Sessions made so far (the active one included).
    pub(crate) fn in_use(&self) -> usize {
        1 + self.spare.len()
    }

    /// Make the session that suits `prompt` at adapter scales `scales` best the generator's
    /// active one.
    pub(crate) fn select(
        &mut self,
        gen: &mut Generator,
        prompt: &[u32],
        scales: &[f32],
    ) -> Result<(), Error> {
        self.clock += 1;
        // The prefix a session can reuse: none at other scales.
        let usable = |s: &Session| {
            if s.adapter_scales() == scales {
                common_prefix(s.tokens(), prompt)
            } else {
                0
            }
        };
        if self.size > 1 {
            let held = gen.session().tokens().len();
            let active = usable(gen.session());
            if active < held {
                // The prompt leaves the active conversation: take the spare that shares more
                // of it, else keep the active one intact and use a fresh session (while the
                // pool has room) or the least recently used spare.
                let best = self
                    .spare
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (usable(s), i))
                    .max_by_key(|&(n, i)| (n, std::cmp::Reverse(i)));
                match best {
                    Some((n, i)) if n > active => self.swap_in(gen, i),
                    _ => {
                        if self.in_use() < self.size {
                            self.spare.push(gen.new_session()?);
                            self.stamps.push(0);
                        }
                        let lru = (0..self.spare.len()).min_by_key(|&i| self.stamps[1 + i]);
                        if let Some(i) = lru {
                            self.swap_in(gen, i);
                        }
                    }
                }
            }
        }
        self.stamps[0] = self.clock;
        Ok(())
    }

    fn swap_in(&mut self, gen: &mut Generator, i: usize) {
        std::mem::swap(gen.session_mut(), &mut self.spare[i]);
        self.stamps.swap(0, 1 + i);
    }

    /// Forget every session's tokens (their caches are kept for reuse).
    pub(crate) fn reset(&mut self) {
        for s in &mut self.spare {
            s.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_checked() {
        assert!(SessionPool::new(0).is_err());
        assert!(SessionPool::new(MAX_SESSIONS + 1).is_err());
        assert_eq!(SessionPool::new(3).unwrap().size(), 3);
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4]), 2);
        assert_eq!(common_prefix(&[], &[1]), 0);
    }
}
