//! A tiny seeded random number generator for weights, splits and data order.
//!
//! SplitMix64 (Steele, Lea and Flood, 2014; the seeding generator of the
//! xoshiro family) is written out here rather than taken from `rand`, so that
//! a seed names the same split and the same batch order forever, whatever
//! version of a crate the build resolves. Its whole state is one `u64`, which
//! a checkpoint can save to resume the data order exactly.
//!
//! ```
//! # use kynml_core::rng::SplitMix64;
//! let mut rows: Vec<usize> = (0..10).collect();
//! SplitMix64::new(42).shuffle(&mut rows);
//! let mut again: Vec<usize> = (0..10).collect();
//! SplitMix64::new(42).shuffle(&mut again);
//! assert_eq!(rows, again);
//! ```

/// The counter's increment: the golden ratio in 64 bits.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function of a counter value.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// SplitMix64. Not for cryptography; statistically good enough for
/// shuffling and passes BigCrush.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose state is `seed`, or a saved [`SplitMix64::state`] to continue that stream.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// A generator for one purpose (weights, data order, dropout), whose
    /// draws are independent of the other purposes' from the same seed.
    pub fn stream(seed: u64, purpose: u64) -> Self {
        let mut mixer = SplitMix64::new(seed ^ purpose.wrapping_mul(0xD1B5_4A32_D192_ED03));
        SplitMix64::new(mixer.next_u64())
    }

    /// Uniform in [0, 1) with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [low, high).
    pub fn uniform(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.next_f64()
    }

    /// A draw from the standard normal distribution N(0, 1) (Box-Muller, two
    /// uniform draws per value).
    pub fn normal(&mut self) -> f64 {
        // 1 - u is in (0, 1], so its logarithm is finite.
        let (u, v) = (1.0 - self.next_f64(), self.next_f64());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// The state to save; [`SplitMix64::new`] with it continues the stream
    /// where it was left.
    pub fn state(&self) -> u64 {
        self.state
    }

    /// The next value of the stream, uniform over all of `u64`.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        mix(self.state)
    }

    /// The value the `i`-th next call of [`next_u64`](Self::next_u64) would
    /// return (`i = 0` for the very next), without drawing anything.
    /// SplitMix64 is a counter passed through a mixer, so any draw can be
    /// computed on its own, and a long stream filled by several threads.
    #[inline]
    pub fn peek(&self, i: u64) -> u64 {
        mix(self.state.wrapping_add(GAMMA.wrapping_mul(i.wrapping_add(1))))
    }

    /// Moves the stream past `n` draws, as `n` calls of [`next_u64`](Self::next_u64) would.
    pub fn skip(&mut self, n: u64) {
        self.state = self.state.wrapping_add(GAMMA.wrapping_mul(n));
    }

    /// A uniform integer in `0..bound`, without modulo bias (Lemire's
    /// multiply-and-reject method).
    ///
    /// # Panics
    /// If `bound` is 0.
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "SplitMix64::below needs a positive bound");
        // Products whose low half falls under `threshold` would make the
        // smallest results slightly more likely; drawing again removes that.
        let threshold = bound.wrapping_neg() % bound;
        loop {
            let product = u128::from(self.next_u64()) * u128::from(bound);
            if (product as u64) >= threshold {
                return (product >> 64) as u64;
            }
        }
    }

    /// Fisher–Yates shuffle: every order is equally likely.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peek_and_skip_are_the_stream_drawn_one_by_one() {
        let mut drawn = SplitMix64::new(77);
        let start = drawn.clone();
        let values: Vec<u64> = (0..50).map(|_| drawn.next_u64()).collect();
        for (i, v) in values.iter().enumerate() {
            assert_eq!(start.peek(i as u64), *v, "draw {i}");
        }
        let mut skipped = start.clone();
        skipped.skip(50);
        assert_eq!(skipped, drawn);
        assert_eq!(skipped.next_u64(), drawn.next_u64());
    }

    #[test]
    fn streams_differ_and_uniform_stays_in_range() {
        assert_ne!(SplitMix64::stream(7, 1).next_u64(), SplitMix64::stream(7, 2).next_u64());
        let mut r = SplitMix64::new(1);
        let xs: Vec<f64> = (0..10_000).map(|_| r.uniform(-2.0, 2.0)).collect();
        assert!(xs.iter().all(|x| (-2.0..2.0).contains(x)));
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!(mean.abs() < 0.05, "mean {mean}");
    }

    #[test]
    fn matches_the_reference_splitmix64_stream() {
        // First outputs of the reference C implementation
        // (https://prng.di.unimi.it/splitmix64.c) seeded with 1234567.
        let mut rng = SplitMix64::new(1234567);
        let expected = [
            6457827717110365317u64,
            3203168211198807973,
            9817491932198370423,
            4593380528125082431,
            16408922859458223821,
        ];
        for want in expected {
            assert_eq!(rng.next_u64(), want);
        }
    }

    #[test]
    fn state_resumes_the_stream() {
        let mut a = SplitMix64::new(7);
        a.next_u64();
        let mut b = SplitMix64::new(a.state());
        assert_eq!(a.next_u64(), b.next_u64());
    }

    #[test]
    fn below_stays_in_range_and_reaches_every_value() {
        let mut rng = SplitMix64::new(3);
        let mut seen = [0usize; 7];
        for _ in 0..7000 {
            let v = rng.below(7) as usize;
            seen[v] += 1;
        }
        // 1000 expected per value; 800 is more than 6 standard deviations off.
        assert!(seen.iter().all(|&c| c > 800), "{seen:?}");
    }

    #[test]
    fn shuffle_is_a_permutation() {
        let mut items: Vec<usize> = (0..100).collect();
        SplitMix64::new(1).shuffle(&mut items);
        assert_ne!(items, (0..100).collect::<Vec<_>>());
        items.sort_unstable();
        assert_eq!(items, (0..100).collect::<Vec<_>>());
    }
}
