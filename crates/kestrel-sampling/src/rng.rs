//! The sampler's random number generator: a 32-bit Mersenne Twister (`std::mt19937`) with
//! libstdc++'s `uniform_real_distribution<double>(0, 1)`, as llama.cpp's `dist` sampler uses,
//! so the same seed draws the same numbers here and there.

const N: usize = 624;
const M: usize = 397;

/// `std::mt19937`, bit for bit.
#[derive(Clone)]
pub struct Mt19937 {
    state: [u32; N],
    index: usize,
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mt19937")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl Mt19937 {
    /// Seeds the generator as `std::mt19937(seed)` does.
    pub fn new(seed: u32) -> Self {
        let mut state = [0u32; N];
        state[0] = seed;
        for i in 1..N {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Self { state, index: N }
    }

    fn twist(&mut self) {
        for i in 0..N {
            let y = (self.state[i] & 0x8000_0000) | (self.state[(i + 1) % N] & 0x7fff_ffff);
            let mut next = self.state[(i + M) % N] ^ (y >> 1);
            if y & 1 != 0 {
                next ^= 0x9908_b0df;
            }
            self.state[i] = next;
        }
        self.index = 0;
    }

    /// Next 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^= y >> 18;
        y
    }

    /// A double in `[0, 1)`: libstdc++'s `generate_canonical<double, 53>` (two draws).
    pub fn next_f64(&mut self) -> f64 {
        let lo = f64::from(self.next_u32());
        let hi = f64::from(self.next_u32());
        let r = (lo + hi * 4_294_967_296.0) / 18_446_744_073_709_551_616.0;
        if r >= 1.0 {
            1.0 - f64::EPSILON / 2.0
        } else {
            r
        }
    }
}

/// Folds a 64-bit seed to the 32 bits the Mersenne Twister takes; seeds that fit are unchanged.
pub fn fold_seed(seed: u64) -> u32 {
    if let Ok(s) = u32::try_from(seed) {
        s
    } else {
        (seed ^ (seed >> 32)) as u32
    }
}

/// A seed from the OS (through std's randomly keyed hasher) and the clock, for `seed: None`.
pub fn entropy_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_cpp_standard_reference_value() {
        // The C++ standard requires the 10000th output of a default-constructed mt19937
        // (seed 5489) to be 4123659995.
        let mut rng = Mt19937::new(5489);
        let mut last = 0;
        for _ in 0..10_000 {
            last = rng.next_u32();
        }
        assert_eq!(last, 4_123_659_995);
    }

    #[test]
    fn canonical_doubles_are_in_unit_interval() {
        let mut rng = Mt19937::new(1);
        for _ in 0..10_000 {
            let x = rng.next_f64();
            assert!((0.0..1.0).contains(&x));
        }
    }

    #[test]
    fn seed_folding() {
        assert_eq!(fold_seed(42), 42);
        assert_eq!(fold_seed(u64::from(u32::MAX)), u32::MAX);
        assert_ne!(fold_seed(1 << 40), 0);
    }
}
