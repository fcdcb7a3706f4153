//! Inverted dropout: zero each activation with probability `p` in training
//! and scale the survivors by `1/(1-p)`, so evaluation is the identity.
//!
//! The masks come from a counter-based generator keyed by the run's own
//! stream, not from the backend's generator: Burn's CPU backend keeps one
//! process-wide generator, so two trainings in one process would take each
//! other's draws, and no two backends draw alike. Each mask takes one 64-bit
//! draw of the run's stream ([`MaskKey::draw`]); value `i` of the mask is
//! then a pure function of that key and `i` ([`MaskKey::bits`]): a 6-round
//! Feistel network on the 30-bit index, whose arithmetic stays below 2^31,
//! so 32-bit integer tensors compute it exactly. A GPU computes the mask on
//! the device from the key alone ([`Dropout::forward`]), with nothing
//! uploaded; the native CPU engine computes the same bits on the host
//! ([`dropout_piece`]). A seed gives the same masks on every backend and
//! engine, and a checkpoint's stream state resumes them exactly.

use burn::module::{Module, ParamId};
use burn::tensor::{Int, Tensor, TensorData};
use burn::DispatchDevice;
use serde_json::{json, Value as Json};

use rayon::prelude::*;

use super::kind::{extra_args, missing, probability_arg, Getter, Kind, LayerModule, Pass, Shape, Tensors};
use super::StateError;
use crate::export::onnx::Graph;
use crate::rng::SplitMix64;
use crate::spec::ast::LayerLine;
use crate::spec::diagnostic::Diagnostic;
use kynml_backend::Backend as Kb;

/// The argument of a `dropout P` line.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(transparent)]
pub struct DropoutSpec {
    /// Drop probability in [0, 1).
    pub p: f64,
}

/// Inverted dropout: in training, zeroes each value with probability `prob` and scales the rest by
/// `1/(1-prob)`; in evaluation, the identity.
#[derive(Module, Debug, Clone)]
pub struct Dropout {
    /// The probability of zeroing each value, in `[0, 1)`.
    pub prob: f64,
}

impl Kind for DropoutSpec {
    const NAMES: &'static [&'static str] = &["dropout"];
    const FORMS: &'static [&'static str] = &["dropout P"];
    type Module = Dropout;

    fn parse(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Self> {
        super::kind::options(line, &[], d)?;
        let Some(p) = line.args.first() else {
            missing(line, "probability", "a probability", "dropout P`, as in `dropout 0.2", d);
            return None;
        };
        let p = probability_arg(p, "the probability of `dropout`", d);
        extra_args(line, 1, "dropout P", d)?;
        Some(DropoutSpec { p: p? })
    }

    fn describe(&self) -> String {
        format!("dropout {}", self.p)
    }

    fn output(&self, input: &Shape) -> Result<Shape, String> {
        Ok(input.clone())
    }

    fn native(&self, _input: &Shape) -> Option<kynml_cpu::LayerConfig> {
        Some(kynml_cpu::LayerConfig::Dropout(self.p))
    }

    fn init(&self, _input: &Shape, _rng: &mut SplitMix64, _device: &DispatchDevice) -> Dropout {
        Dropout { prob: self.p }
    }

    fn check(&self, _t: Tensors) -> Result<(), String> {
        if !(self.p.is_finite() && (0.0..1.0).contains(&self.p)) {
            return Err(format!("dropout p {} is outside [0, 1)", self.p));
        }
        Ok(())
    }

    /// The identity at inference.
    fn reference(&self, _input: &Shape, _t: Tensors, x: &[f32]) -> Vec<f32> {
        x.to_vec()
    }

    /// Nothing: the identity at inference.
    fn onnx(&self, _g: &mut Graph, _p: &str, _input: &Shape, _t: Tensors, x: String) -> String {
        x
    }

    fn torch(&self, _input: &Shape) -> Json {
        json!({"p": self.p, "module": format!("nn.Dropout(p={})", self.p)})
    }

    fn from_json(_kind: &str, v: &Json) -> Result<Self, String> {
        Ok(DropoutSpec { p: v.get("p").and_then(Json::as_f64).unwrap_or(0.0) })
    }
}

impl LayerModule for Dropout {
    /// The mask is computed on `x`'s device from one draw of the pass's generator.
    fn forward(&self, x: Tensor<Kb, 2>, pass: &mut Pass) -> Tensor<Kb, 2> {
        self.apply(x, pass.rng())
    }

    fn state(&self) -> Vec<(String, TensorData)> {
        Vec::new()
    }

    fn restore(self, _get: &mut Getter, _device: &DispatchDevice) -> Result<Self, StateError> {
        Ok(self)
    }

    fn params(&self) -> Vec<(ParamId, String, usize)> {
        Vec::new()
    }
}

impl Dropout {
    /// The mask is computed on `x`'s device from one draw of `rng`; `None`
    /// (evaluation) is the identity.
    ///
    /// # Shapes
    /// `x: [batch, features]` → same
    pub fn apply(&self, x: Tensor<Kb, 2>, rng: Option<&mut SplitMix64>) -> Tensor<Kb, 2> {
        let Some(rng) = rng else { return x };
        if self.prob == 0.0 {
            return x;
        }
        let [rows, cols] = x.dims();
        let key = MaskKey::draw(rng, self.prob);
        let device = x.device();
        // Integer and boolean tensors carry no gradient tape: the mask comes
        // off the tape and is handed to it as a constant. It is made from
        // `x`'s own device, not the plain one under it, so that it carries
        // that device's marks (activation checkpointing), which Burn's
        // dispatch refuses to see differ between the two sides of a product.
        let mask = key.mask_on(rows * cols, &device).reshape([rows, cols]);
        let mask = match device {
            burn::DispatchDevice::Autodiff(_) => Tensor::from_inner(mask),
            _ => mask,
        };
        x * mask
    }
}

/// Rounds of the Feistel network.
const ROUNDS: usize = 6;
/// The round function's multiplier: odd, below 2^16, so that a 15-bit value
/// times it stays below 2^31 (exact in `i32`).
const MUL: u32 = 0xB5AD;
/// A 15-bit half of the 30-bit index.
const HALF: u32 = 0x7fff;

/// One mask's key: the round keys drawn from the run's stream, and the
/// drop threshold and survivor scale of its probability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaskKey {
    rounds: [u32; ROUNDS],
    threshold: u32,
    scale: u32,
}

impl MaskKey {
    /// Takes one draw of `rng` for a mask with drop probability `p`.
    pub fn draw(rng: &mut SplitMix64, p: f64) -> Self {
        let key = rng.next_u64();
        MaskKey {
            rounds: std::array::from_fn(|r| ((key >> (9 * r)) as u32) & HALF),
            threshold: (p * (1u64 << 30) as f64) as u32,
            scale: ((1.0 / (1.0 - p)) as f32).to_bits(),
        }
    }

    /// The 30 pseudo-random bits of value `i` of the mask: a permutation of
    /// the index's low 30 bits, so a mask's values are distinct draws (a
    /// layer output of more than 2^30 values, 4 GiB, would repeat its mask).
    #[inline(always)]
    pub fn bits(&self, i: u32) -> u32 {
        let (mut l, mut r) = ((i >> 15) & HALF, i & HALF);
        for k in self.rounds {
            let f = (((r ^ k) * MUL) >> 8) & HALF;
            (l, r) = (r, l ^ f);
        }
        (l << 15) | r
    }

    /// Value `i` of the mask: 0 (dropped) or the survivors' scale.
    #[inline(always)]
    pub fn value(&self, i: u32) -> f32 {
        if self.bits(i) < self.threshold {
            0.0
        } else {
            f32::from_bits(self.scale)
        }
    }

    /// The first `n` values of the mask, computed on `device` from the key
    /// alone, exactly as [`MaskKey::bits`] computes them.
    pub fn mask_on(&self, n: usize, device: &burn::DispatchDevice) -> Tensor<Kb, 1> {
        let half = HALF as i32;
        let i = Tensor::<Kb, 1, Int>::arange(0..n as i64, device);
        let mut l = i.clone().bitwise_right_shift_scalar(15).bitwise_and_scalar(half);
        let mut r = i.bitwise_and_scalar(half);
        for k in self.rounds {
            let f = r
                .clone()
                .bitwise_xor_scalar(k as i32)
                .mul_scalar(MUL as i32)
                .bitwise_right_shift_scalar(8)
                .bitwise_and_scalar(half);
            (l, r) = (r, l.bitwise_xor(f));
        }
        let bits = l.bitwise_left_shift_scalar(15).bitwise_or(r);
        bits.greater_equal_elem(self.threshold as i32).float().mul_scalar(f32::from_bits(self.scale))
    }
}

/// `n` values of a mask with drop probability `p`, from one draw of `rng`,
/// on the host: what [`Dropout::forward`] computes on a device.
pub fn bernoulli_mask(n: usize, p: f64, rng: &mut SplitMix64) -> Vec<f32> {
    let key = MaskKey::draw(rng, p);
    let mut mask = vec![0.0; n];
    mask.par_chunks_mut(PIECE).enumerate().for_each(|(piece, values)| fill(&key, piece * PIECE, values));
    mask
}

/// Dropout on piece `piece` (of [`PIECE`] values) of a layer's output:
/// fills `mask` with that piece of the mask of `key` and writes `x * mask`
/// to `out`, while the mask is in cache. For engines that share the pieces
/// out over their own threads.
pub fn dropout_piece(key: &MaskKey, piece: usize, x: &[f32], mask: &mut [f32], out: &mut [f32]) {
    fill(key, piece * PIECE, mask);
    for ((o, &x), &m) in out.iter_mut().zip(x).zip(mask.iter()) {
        *o = x * m;
    }
}

/// Values per parallel piece of a mask.
pub const PIECE: usize = 16 * 1024;

/// Values `first..first + mask.len()` of the mask.
fn fill(key: &MaskKey, first: usize, mask: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has just been seen to have the feature the function is compiled for.
        return unsafe { fill_avx512(key, first, mask) };
    }
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: as above.
        return unsafe { fill_avx2(key, first, mask) };
    }
    fill_values(key, first, mask)
}

/// [`fill_values`] compiled for AVX-512: sixteen indices at a time through
/// the network.
///
/// # Safety
/// The CPU must have AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fill_avx512(key: &MaskKey, first: usize, mask: &mut [f32]) {
    fill_values(key, first, mask)
}

/// [`fill_values`] compiled for AVX2.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn fill_avx2(key: &MaskKey, first: usize, mask: &mut [f32]) {
    fill_values(key, first, mask)
}

#[inline(always)]
fn fill_values(key: &MaskKey, first: usize, mask: &mut [f32]) {
    for (j, m) in mask.iter_mut().enumerate() {
        *m = key.value((first + j) as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropout_by_pieces_is_the_mask_times_x() {
        let n = 3 * PIECE + 5;
        let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
        let (mut mask, mut out) = (vec![0.0; n], vec![0.0; n]);
        let key = MaskKey::draw(&mut SplitMix64::new(4), 0.25);
        // In reverse: each piece stands on its own.
        let pieces: Vec<_> = mask.chunks_mut(PIECE).zip(x.chunks(PIECE)).zip(out.chunks_mut(PIECE)).collect();
        for (i, ((m, x), o)) in pieces.into_iter().enumerate().rev() {
            dropout_piece(&key, i, x, m, o);
        }
        let one_by_one: Vec<f32> = (0..n as u32).map(|i| key.value(i)).collect();
        assert_eq!(mask, one_by_one);
        assert_eq!(mask, bernoulli_mask(n, 0.25, &mut SplitMix64::new(4)));
        for ((o, x), m) in out.iter().zip(&x).zip(&mask) {
            assert_eq!(*o, x * m);
        }
    }

    #[test]
    fn a_mask_takes_one_draw_and_the_network_permutes_the_index() {
        let (mut a, mut b) = (SplitMix64::new(9), SplitMix64::new(9));
        bernoulli_mask(100_001, 0.3, &mut a);
        b.next_u64();
        assert_eq!(a, b, "one draw of the stream per mask, whatever its length");
        // A bijection on 30 bits: no two indices of a range share their bits.
        let key = MaskKey::draw(&mut SplitMix64::new(1), 0.5);
        let mut seen: Vec<u32> = (0..1u32 << 18).map(|i| key.bits(i)).collect();
        assert!(seen.iter().all(|&b| b < 1 << 30));
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 1 << 18);
    }

    #[test]
    fn masks_drop_about_p_evenly_and_independently() {
        let n = 200_000;
        for (seed, p) in [(5, 0.1), (6, 0.3), (7, 0.5)] {
            let mut rng = SplitMix64::new(seed);
            let (a, b) = (bernoulli_mask(n, p, &mut rng), bernoulli_mask(n, p, &mut rng));
            let dropped = |m: &[f32]| m.iter().filter(|&&v| v == 0.0).count() as f64 / m.len() as f64;
            // Five standard deviations of a binomial fraction.
            let tol = 5.0 * (p * (1.0 - p) / n as f64).sqrt();
            assert!((dropped(&a) - p).abs() < tol, "p {p}: dropped {}", dropped(&a));
            let mean = a.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
            assert!((mean - 1.0).abs() < 5.0 * tol / (1.0 - p), "mean {mean}");
            // Neighbours, and the same value in consecutive masks, drop
            // together as often as independent draws would: p^2.
            let both = |x: &[f32], y: &[f32]| {
                x.iter().zip(y).filter(|(u, v)| **u == 0.0 && **v == 0.0).count() as f64 / x.len() as f64
            };
            assert!((both(&a[..n - 1], &a[1..]) - p * p).abs() < tol, "p {p}: neighbours");
            assert!((both(&a, &b) - p * p).abs() < tol, "p {p}: consecutive masks");
            // Dropped values spread over the whole mask: each sixteenth holds a sixteenth.
            for part in a.chunks(n / 16) {
                assert!((dropped(part) - p).abs() < 4.0 * tol, "p {p}: uneven");
            }
        }
    }

    #[test]
    fn the_device_computes_the_hosts_mask_exactly() {
        // Burn's CPU backend here; tests/it.rs checks the Vulkan backend.
        let device = kynml_backend::Device::cpu().inner();
        for (n, p, seed) in [(1, 0.5, 1), (1000, 0.2, 2), (3 * PIECE + 7, 0.3, 3), (70_000, 0.9, 4)] {
            let host = bernoulli_mask(n, p, &mut SplitMix64::new(seed));
            let key = MaskKey::draw(&mut SplitMix64::new(seed), p);
            let on_device: Vec<f32> = key.mask_on(n, &device).into_data().to_vec().unwrap();
            assert_eq!(host, on_device, "n {n}, p {p}");
        }
    }
}
