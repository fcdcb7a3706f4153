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
//!
//! The network takes only additions, products, divisions and remainders
//! (its round function is the middle bits of the square of a half plus the
//! round key, and the halves are combined by addition modulo 2^15, not by
//! exclusive or):
//! Burn's fusion compiles integer arithmetic, comparisons and `mask_fill`
//! into one kernel, where each bitwise operation would be a kernel launch
//! of its own. A mask is then two kernels on a GPU (the index range, and
//! the network fused with the layer's masking) instead of about forty,
//! each launched from the host on every step.

use burn::module::{Module, ParamId};
use burn::tensor::{Bool, Int, Tensor, TensorData};
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

    /// Element-wise.
    fn multiply_adds(&self, _input: &Shape) -> u64 {
        0
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
        // The mask is made from `x`'s own device, not the plain one under
        // it, so that it carries that device's marks (activation
        // checkpointing), which Burn's dispatch refuses to see differ
        // between the two sides of an operation. Boolean tensors carry no
        // gradient tape: `mask_fill` takes the drops as a constant.
        MaskKey::draw(rng, self.prob).apply_to(x)
    }
}

/// Rounds of the Feistel network.
const ROUNDS: usize = 6;
/// 2^15: one past the largest half.
const SPAN: u32 = HALF + 1;
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
            // The middle bits of a square: a product by a constant instead
            // would leave the network nearly linear, and neighbouring values
            // would drop together far more often than p^2.
            let t = (r + k) & HALF;
            let f = ((t * t) >> 7) & HALF;
            (l, r) = (r, (l + f) & HALF);
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

    /// Which of the first `n` values the mask drops, computed on `device`
    /// from the key alone, exactly as [`MaskKey::bits`] computes them, in
    /// integer arithmetic that Burn's fusion compiles into one kernel: on
    /// values below 2^31, `>> s` is a division by 2^s and `& HALF` the
    /// remainder by 2^15.
    pub fn drops_on(&self, n: usize, device: &burn::DispatchDevice) -> Tensor<Kb, 1, Bool> {
        let span = SPAN as i32;
        let i = indices(n, device);
        let mut l = i.clone().div_scalar(span);
        let mut r = i.remainder_scalar(span);
        for k in self.rounds {
            let t = r.clone().add_scalar(k as i32).remainder_scalar(span);
            let f = t.clone().mul(t).div_scalar(1 << 7).remainder_scalar(span);
            (l, r) = (r, (l + f).remainder_scalar(span));
        }
        (l.mul_scalar(span) + r).lower_elem(self.threshold as i32)
    }

    /// `x` with the mask of this key applied, on `x`'s device: dropped
    /// values zeroed, the others times the survivors' scale (the host's
    /// `x * mask`, to the bit).
    pub fn apply_to<const D: usize>(&self, x: Tensor<Kb, D>) -> Tensor<Kb, D> {
        let shape = x.shape();
        let drops = self.drops_on(shape.num_elements(), &x.device()).reshape(shape);
        x.mask_fill(drops, 0.0).mul_scalar(f32::from_bits(self.scale))
    }

    /// The first `n` values of the mask, computed on `device` (a check of
    /// [`drops_on`](Self::drops_on) against the host's).
    pub fn mask_on(&self, n: usize, device: &burn::DispatchDevice) -> Tensor<Kb, 1> {
        self.apply_to(Tensor::<Kb, 1>::ones([n], device))
    }
}

/// How many index ranges [`indices`] keeps per thread.
const KEPT_RANGES: usize = 16;

thread_local! {
    /// The index ranges the masks of this thread's training were computed on.
    static RANGES: std::cell::RefCell<Vec<(burn::DispatchDevice, Tensor<Kb, 1, Int>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// `0..n` on `device`, made once and kept: a fresh range is uploaded from
/// the host, and Burn's fusion then runs the operations that read it
/// unfused, each its own kernel, as one block with the upload; a range
/// already on the device starts no such block. A step's masks take a few
/// sizes (one a dropout layer and batch size), the last
/// [`KEPT_RANGES`] of which are kept.
fn indices(n: usize, device: &burn::DispatchDevice) -> Tensor<Kb, 1, Int> {
    RANGES.with(|ranges| {
        let mut ranges = ranges.borrow_mut();
        if let Some(at) = ranges.iter().position(|(d, t)| d == device && t.dims()[0] == n) {
            let kept = ranges.remove(at);
            let range = kept.1.clone();
            ranges.push(kept);
            return range;
        }
        let range = Tensor::<Kb, 1, Int>::arange(0..n as i64, device);
        if ranges.len() == KEPT_RANGES {
            ranges.remove(0);
        }
        ranges.push((device.clone(), range.clone()));
        range
    })
}

/// Lets go of this thread's kept index ranges (their device memory is freed
/// once no tensor reads them): [`train`](crate::train::train) calls it as it
/// returns, so a service's long-lived thread that trained holds none.
pub(crate) fn forget_ranges() {
    RANGES.with(|ranges| ranges.borrow_mut().clear());
}

/// How many index ranges this thread keeps (a test's view).
#[cfg(test)]
pub(crate) fn kept_ranges() -> usize {
    RANGES.with(|ranges| ranges.borrow().len())
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
            for lag in [1, 2, 3, 64, 512, 1 << 15] {
                assert!((both(&a[..n - lag], &a[lag..]) - p * p).abs() < tol, "p {p}: neighbours {lag} apart");
            }
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
