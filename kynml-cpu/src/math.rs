//! Elementwise activations and their gradients, in f32, fast.
//!
//! A dense layer's activation is one pass over `rows × units` values in the
//! forward pass and one in the backward pass. Through libm (`expf`, `erff`)
//! that pass is scalar, and it showed up as 13% of training time for GELU
//! networks. The element functions here use no libm, no table and no
//! data-dependent branch: each is a clamp, a polynomial or two, and selects,
//! so the slice loops in [`forward`] and [`backward`] vectorise.
//!
//! ```
//! use kynml_cpu::math::{backward, forward, Act};
//!
//! let z = [-1.0f32, 0.0, 2.0];
//! let mut out = [0.0; 3];
//! forward(Act::Gelu, &z, &mut out);
//! assert!((out[2] - 1.954_5).abs() < 1e-4);
//!
//! let mut g = [1.0f32; 3]; // d loss / d out, becomes d loss / d z
//! backward(Act::Gelu, &z, &out, &mut g);
//! assert!((g[1] - 0.5).abs() < 1e-6);
//! ```
//!
//! # Accuracy
//! Measured against f64 references over every f32 input (the ignored test
//! `exhaustive_accuracy`), "ulp" meaning units in the last place of the
//! correctly rounded f32 result; the bounds hold for both builds (see
//! Dispatch):
//!
//! | function          | error                                                             |
//! |-------------------|-------------------------------------------------------------------|
//! | [`exp`]           | 1 ulp (1.01 fused) for results of at least `f32::MIN_POSITIVE`    |
//! | [`erf`]           | at most 1.1e-7 absolute everywhere; relative 1.7e-7 for `|x| < 1` |
//! | [`tanh`]          | at most 1.1 ulp everywhere (so relative 1.3e-7 near 0 too)        |
//! | [`sigmoid`]       | at most 2.5 ulp while the result is normal                        |
//! | GELU's derivative | at most 1.8e-7 absolute                                           |
//!
//! GELU is `x/2 (1 + erf(x/√2))`, so its error is that of `erf` scaled by
//! `|x|/2`, plus rounding; like Burn's, it loses relative accuracy for
//! `x < -4`, where `1 + erf` cancels.
//!
//! # Special values
//! NaN gives NaN everywhere, relu included.
//! `exp` returns +∞ above `ln f32::MAX` (88.72283) and **0 below
//! `ln f32::MIN_POSITIVE`** (-87.33654): results that would be subnormal are
//! flushed to zero. For inputs of 0 or of magnitude above 1e-37, no step
//! of any element function computes a subnormal either (squares are taken
//! of `|x|` raised to 2^-50, say), because on x86 each operation that does
//! costs a microcode assist of about a hundred cycles. (The products with
//! `g` in `backward` can of course be subnormal when `g` is tiny.) `erf`
//! and `tanh` are exactly ±1 from the point
//! where the correctly rounded result is (3.919206 and 9.010913), `sigmoid`
//! exactly 1 above 16.64 and 0 below -87.34.
//!
//! # Matching Burn
//! These follow Burn 0.21's CPU backend (flex) and its autodiff formulas,
//! which KynML's Burn engine runs, so that the two engines can be checked
//! against each other:
//! - relu: `max(x, 0)`, but a NaN stays NaN as in PyTorch (flex's `max`
//!   makes it 0; KynML's Burn model keeps it outside training, so that an
//!   overflow is seen); gradient `g` where the *output* is `> 0`, else 0,
//!   so `x = 0` gets 0.
//! - leaky relu: `x` for `x >= 0`, `slope · x` otherwise; gradient `g` unless
//!   `x < 0`, so `x = 0` gets `g`.
//! - gelu: the exact one, gradient `Φ(x) + x φ(x)` (flex's; Burn's *default*
//!   `gelu_backward`, which its GPU backends keep, is the derivative of the
//!   tanh approximation instead).
//! - tanh: gradient `g (1 - out²)`; sigmoid: `1 / (1 + e^-x)` for `x >= 0`,
//!   `e^x / (1 + e^x)` otherwise, gradient `g · out · (1 - out)`.
//! - silu: `x · sigmoid(x)`, gradient `g s + g x s (1 - s)`, as autodiff
//!   composes it from the product and the sigmoid.
//!
//! # Dispatch
//! On x86-64 the slice functions are compiled three times: for the baseline
//! target (SSE2), for AVX2 with FMA, and for AVX-512F with FMA; the widest
//! the CPU has is picked at run time. The last two fuse the polynomials'
//! multiply-adds (GELU forward and backward runs 1.6x faster for it), so
//! their results can differ from the baseline's, and from the scalar
//! functions [`exp`], [`erf`], [`tanh`] and [`sigmoid`], in the last bit or
//! two. AVX2 and AVX-512 give the same bits as each other, so a run is
//! reproducible on any machine with FMA.

/// The activation after a dense layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Act {
    /// The identity: no activation.
    Linear,
    /// `max(x, 0)`.
    Relu,
    /// The exact Gaussian error linear unit, `x Φ(x) = x/2 (1 + erf(x/√2))`.
    Gelu,
    /// The hyperbolic tangent.
    Tanh,
    /// The logistic function `1 / (1 + e^-x)`.
    Sigmoid,
    /// `x · sigmoid(x)`, also called swish.
    Silu,
    /// `x` for `x >= 0`, the given slope times `x` below.
    LeakyRelu(f32),
}

/// `out[i] = f(z[i])`. `z` and `out` have the same length.
///
/// # Panics
/// If the lengths differ.
pub fn forward(act: Act, z: &[f32], out: &mut [f32]) {
    assert_eq!(z.len(), out.len(), "math::forward: z and out differ in length");
    match isa() {
        Isa::Baseline => forward_kernel::<false>(act, z, out),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` has just seen the CPU support the function's features.
        Isa::Avx2 => unsafe { x86::forward_avx2(act, z, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx512 => unsafe { x86::forward_avx512(act, z, out) },
    }
}

/// Chain rule through the activation: `g[i] *= f'(z[i])`, where `out` is
/// what `forward` wrote for `z` (use it where it is cheaper: tanh, sigmoid).
///
/// Relu, tanh and sigmoid read only `out`; gelu, silu and leaky relu read
/// only `z` (gelu recomputes `erf` and `exp` from it, silu `sigmoid`);
/// linear reads neither.
///
/// # Panics
/// If `z`, `out` and `g` are not all of one length.
pub fn backward(act: Act, z: &[f32], out: &[f32], g: &mut [f32]) {
    assert!(
        z.len() == g.len() && out.len() == g.len(),
        "math::backward: z ({}), out ({}) and g ({}) differ in length",
        z.len(),
        out.len(),
        g.len()
    );
    match isa() {
        Isa::Baseline => backward_kernel::<false>(act, z, out, g),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` has just seen the CPU support the function's features.
        Isa::Avx2 => unsafe { x86::backward_avx2(act, z, out, g) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx512 => unsafe { x86::backward_avx512(act, z, out, g) },
    }
}

/// e^x in f32 without libm: at most 1 ulp from the correctly rounded result
/// (its fused variant, inside `forward` and `backward` on CPUs with FMA:
/// 1.01 ulp).
///
/// +∞ for `x > 88.72283` (where e^x overflows), 0 for `x < -87.33654` (where
/// e^x is subnormal: flushed to zero rather than rounded), NaN for NaN.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    exp_with::<false>(x)
}

/// The error function, at most 1.1e-7 from the exact value everywhere
/// (relative error at most 1.7e-7 for `|x| < 1`), exactly ±1 for
/// `|x| >= 3.919206`, NaN for NaN.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    erf_with::<false>(x)
}

/// The hyperbolic tangent, at most 1.1 ulp from the correctly rounded
/// result, so accurate relative to `x` near 0; exactly ±1 for
/// `|x| >= 9.010913`, NaN for NaN.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    tanh_with::<false>(x)
}

/// The logistic function `1 / (1 + e^-x)`, at most 2.5 ulp from the
/// correctly rounded result while that is normal; 0 below `x = -87.33654`
/// (where the result would be subnormal) and 1 above 16.64, never NaN for
/// non-NaN input.
///
/// Computed as Burn's CPU backend does: `1 / (1 + e^-x)` for `x >= 0` and
/// `e^x / (1 + e^x)` below, so that no exponential overflows.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    sigmoid_with::<false>(x)
}

// The element functions take `FUSED`: whether `a * b + c` may be one fused
// multiply-add. Only code compiled with the FMA feature may say yes; anywhere
// else `mul_add` is a call into libm, 30 times slower than the two steps.

/// `a · b + c`, in one rounding when `FUSED`.
#[inline(always)]
fn madd<const FUSED: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FUSED {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// `c[0] + x c[1] + x² c[2] + ...`, by Horner's rule.
#[inline(always)]
fn poly<const FUSED: bool, const N: usize>(x: f32, c: &[f32; N]) -> f32 {
    let mut p = c[N - 1];
    for &ci in c[..N - 1].iter().rev() {
        p = madd::<FUSED>(p, x, ci);
    }
    p
}

/// `x²` for `x >= 0`, but never subnormal: `x` is raised to at least 2^-50
/// first (which changes no result here, as x² is then lost against 1, and
/// leaves x² · c normal for the smallest coefficient c it meets).
#[inline(always)]
fn square_no_subnormal(a: f32) -> f32 {
    let a = a.max(8.881_784e-16);
    a * a
}

/// The smallest input whose e^x is a normal f32 (just above ln 2^-126).
const EXP_MIN: f32 = -87.336_54;
/// The largest input whose e^x is finite (just below `ln f32::MAX`).
const EXP_MAX: f32 = 88.722_83;

#[inline(always)]
fn exp_with<const FUSED: bool>(x: f32) -> f32 {
    // e^x = 2^n e^r with n = round(x / ln 2) and |r| <= ln(2)/2. Adding
    // 1.5·2^23 rounds x/ln2 to an integer and leaves n in the low bits of
    // the sum, which then go straight into the exponent field of e^r.
    const ROUND: f32 = 12_582_912.0;
    let xc = x.clamp(EXP_MIN, EXP_MAX);
    let shifted = xc * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    // ln 2 in two parts (Cody and Waite): n · 0.6933594 is exact.
    let r = madd::<FUSED>(n, -0.693_359_4, xc);
    let r = madd::<FUSED>(n, 2.121_944_4e-4, r);
    // Cephes' expf polynomial for e^r on [-ln2/2, ln2/2]. Its coefficients
    // times a tiny r would be subnormal; raising |r| to 2^-50 changes
    // nothing, as the polynomial is then lost against 1.
    let rp = if r.abs() < 8.881_784e-16 { 8.881_784e-16 } else { r };
    let p = poly::<FUSED, 6>(rp, &[0.5, 0.166_666_66, 0.041_665_796, 0.008_333_452, 0.001_398_2, 0.000_198_756_91]);
    let er = madd::<FUSED>(p, square_no_subnormal(r.abs()), r) + 1.0;
    // The low 9 bits of ROUND's pattern are zero, so this shift is n << 23.
    let y = f32::from_bits(er.to_bits().wrapping_add(shifted.to_bits() << 23));
    let y = if x < EXP_MIN { 0.0 } else { y };
    let y = if x > EXP_MAX { f32::INFINITY } else { y };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// From here on erf(x) rounds to exactly 1 in f32.
const ERF_ONE: f32 = 3.919_206;
/// erf(x) / x as a polynomial in x², for |x| < 1, led by 2/√π; relative
/// error 5e-8.
const ERF_SMALL: [f32; 7] = [
    std::f32::consts::FRAC_2_SQRT_PI,
    -0.376_128_08,
    0.112_850_82,
    -0.026_905_823,
    0.005_275_594,
    -0.000_871_077_53,
    0.000_100_134_11,
];
/// erfc(x) as a polynomial in x - 2.45, for 1 <= x <= 3.92; absolute error 3e-8.
const ERF_TAIL: [f32; 13] = [
    0.000_530_552_24,
    -0.002_789_898_5,
    0.006_836_764_5,
    -0.010_236_046,
    0.010_249_17,
    -0.006_976_413,
    0.002_994_742_2,
    -0.000_429_784_2,
    -0.000_418_512_03,
    0.000_306_700_18,
    -4.880_963_4e-5,
    -2.651_541_4e-5,
    9.124_661e-6,
];

#[inline(always)]
fn erf_with<const FUSED: bool>(x: f32) -> f32 {
    let a = x.abs();
    // |x| < 1: x P(x²), P fitted (minimax) for relative error.
    let t = square_no_subnormal(a);
    let small = x * poly::<FUSED, 7>(t, &ERF_SMALL);
    // 1 <= |x|: 1 - erfc(|x|), erfc a polynomial in |x| - 2.45 fitted for
    // absolute error; the clamp keeps it finite for huge inputs.
    let u = a.min(ERF_ONE) - 2.45;
    let large = if a >= ERF_ONE { 1.0 } else { 1.0 - poly::<FUSED, 13>(u, &ERF_TAIL) };
    // NaN fails `a >= 1` and so takes the small branch, which keeps it.
    if a >= 1.0 {
        large.copysign(x)
    } else {
        small
    }
}

/// From here on tanh(x) rounds to exactly 1 in f32.
const TANH_ONE: f32 = 9.010_913;
/// 2^-40: below it tanh(x) rounds to x.
const TANH_TINY: f32 = 9.094_947e-13;
/// (tanh(x) - x) / x³ as a polynomial in x², for |x| < 0.7.
const TANH_SMALL: [f32; 6] =
    [-0.333_333_25, 0.133_329_84, -0.053_920_954, 0.021_571_06, -0.007_883_311, 0.001_895_667_9];

#[inline(always)]
fn tanh_with<const FUSED: bool>(x: f32) -> f32 {
    // On |x|, the sign copied at the end, so that tanh(-0) is -0.
    let a = x.abs();
    // |x| < 0.7: |x| + |x|³ P(x²), P fitted (minimax) for relative error.
    // Below 2^-40 the cube would be subnormal and tanh(x) rounds to x, so
    // the polynomial runs on |x| raised to 2^-40 and the result is |x|.
    let ac = a.max(TANH_TINY);
    let t = ac * ac;
    let small = madd::<FUSED>(ac * t, poly::<FUSED, 6>(t, &TANH_SMALL), ac);
    // NaN fails this comparison and keeps itself.
    let small = if a >= TANH_TINY { small } else { a };
    // Above: 1 - 2 / (e^2|x| + 1); the clamp keeps e^2|x| finite.
    let e = exp_with::<FUSED>(2.0 * a.min(TANH_ONE));
    let large = if a >= TANH_ONE { 1.0 } else { 1.0 - 2.0 / (e + 1.0) };
    // NaN fails the comparison and so takes the small branch, which keeps it.
    let y = if a >= 0.7 { large } else { small };
    y.copysign(x)
}

#[inline(always)]
fn sigmoid_with<const FUSED: bool>(x: f32) -> f32 {
    let e = exp_with::<FUSED>(-x.abs());
    let top = if x >= 0.0 { 1.0 } else { e };
    top / (1.0 + e)
}

/// `ln √(2π)`: φ(x) = e^(-x²/2 - ln √(2π)), which never rounds through a
/// subnormal on its way to 0 the way `e^(-x²/2) / √(2π)` does.
const LN_SQRT_2PI: f32 = 0.918_938_5;

#[inline(always)]
fn gelu<const FUSED: bool>(x: f32) -> f32 {
    0.5 * x * (1.0 + erf_with::<FUSED>(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// Φ(x) + x φ(x).
#[inline(always)]
fn gelu_grad<const FUSED: bool>(x: f32) -> f32 {
    let cdf = 0.5 * (1.0 + erf_with::<FUSED>(x * std::f32::consts::FRAC_1_SQRT_2));
    let pdf = exp_with::<FUSED>(madd::<FUSED>(-0.5, square_no_subnormal(x.abs()), -LN_SQRT_2PI));
    madd::<FUSED>(x, pdf, cdf)
}

#[inline(always)]
fn silu<const FUSED: bool>(x: f32) -> f32 {
    x * sigmoid_with::<FUSED>(x)
}

/// `g s + g x s (1 - s)`: the two paths autodiff sums for `x · sigmoid(x)`.
#[inline(always)]
fn silu_grad_times<const FUSED: bool>(x: f32, g: f32) -> f32 {
    let s = sigmoid_with::<FUSED>(x);
    g * s + g * x * s * (1.0 - s)
}

// The loops are macros, not functions taking a closure: LLVM may leave a
// closure that holds an exp or erf as a call, and a call in the loop stops
// it vectorising (GELU ran 8x slower that way).

/// `out[i] = body` with `x = z[i]`.
macro_rules! map {
    ($z:expr, $out:expr, |$x:ident| $body:expr) => {
        for (o, &$x) in $out.iter_mut().zip($z) {
            *o = $body;
        }
    };
}

/// `g[i] = body` with `v = v[i]` and `g = g[i]`.
macro_rules! scale {
    ($v:expr, $g:expr, |$vi:ident, $gi:ident| $body:expr) => {
        for (slot, &$vi) in $g.iter_mut().zip($v) {
            let $gi = *slot;
            *slot = $body;
        }
    };
}

/// `out = f(z)` for one activation: the body every instruction set shares.
#[inline(always)]
fn forward_kernel<const FUSED: bool>(act: Act, z: &[f32], out: &mut [f32]) {
    match act {
        Act::Linear => out.copy_from_slice(z),
        // A NaN stays NaN, as in PyTorch (not `max`, which drops it).
        Act::Relu => map!(z, out, |x| if x.is_nan() { x } else { x.max(0.0) }),
        Act::Gelu => map!(z, out, |x| gelu::<FUSED>(x)),
        Act::Tanh => map!(z, out, |x| tanh_with::<FUSED>(x)),
        Act::Sigmoid => map!(z, out, |x| sigmoid_with::<FUSED>(x)),
        Act::Silu => map!(z, out, |x| silu::<FUSED>(x)),
        Act::LeakyRelu(slope) => map!(z, out, |x| if x >= 0.0 { x } else { slope * x }),
    }
}

/// `g *= f'(z)` for one activation: the body every instruction set shares.
#[inline(always)]
fn backward_kernel<const FUSED: bool>(act: Act, z: &[f32], out: &[f32], g: &mut [f32]) {
    match act {
        Act::Linear => {}
        Act::Relu => scale!(out, g, |y, g| if y > 0.0 { g } else { 0.0 }),
        Act::Gelu => scale!(z, g, |x, g| g * gelu_grad::<FUSED>(x)),
        Act::Tanh => scale!(out, g, |y, g| g * (1.0 - y * y)),
        Act::Sigmoid => scale!(out, g, |s, g| g * s * (1.0 - s)),
        Act::Silu => scale!(z, g, |x, g| silu_grad_times::<FUSED>(x, g)),
        Act::LeakyRelu(slope) => scale!(z, g, |x, g| if x < 0.0 { g * slope } else { g }),
    }
}

/// Softmax of each row of `width` in `rows`, in place: `e^(x - max)` over
/// the row's sum, in sixteen lanes (attention's weights).
pub(crate) fn softmax_rows(rows: &mut [f32], width: usize) {
    match isa() {
        Isa::Baseline => softmax_kernel::<false>(rows, width),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` has just seen the CPU support the function's features.
        Isa::Avx2 => unsafe { x86::softmax_avx2(rows, width) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx512 => unsafe { x86::softmax_avx512(rows, width) },
    }
}

#[inline(always)]
fn softmax_kernel<const FUSED: bool>(rows: &mut [f32], width: usize) {
    const LANES: usize = 16;
    for row in rows.chunks_exact_mut(width.max(1)) {
        let mut top = [f32::NEG_INFINITY; LANES];
        for c in row.chunks(LANES) {
            top.iter_mut().zip(c).for_each(|(t, &v)| *t = if v > *t { v } else { *t });
        }
        let top = top.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        row.iter_mut().for_each(|v| *v = exp_with::<FUSED>(*v - top));
        let mut sum = [0.0f32; LANES];
        for c in row.chunks(LANES) {
            sum.iter_mut().zip(c).for_each(|(s, &v)| *s += v);
        }
        let inv = 1.0 / sum.iter().sum::<f32>();
        row.iter_mut().for_each(|v| *v *= inv);
    }
}

/// The widest build of the slice functions a CPU can run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Isa {
    Baseline,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

/// What this CPU runs; std caches the CPUID answer, so this is a load.
#[inline]
fn isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        if !std::is_x86_feature_detected!("fma") {
            return Isa::Baseline;
        }
        if std::is_x86_feature_detected!("avx512f") {
            return Isa::Avx512;
        }
        if std::is_x86_feature_detected!("avx2") {
            return Isa::Avx2;
        }
    }
    Isa::Baseline
}

/// The kernels compiled for wider vectors and FMA. The bodies are the
/// shared ones, inlined, so only the vector width and the fusing differ.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{backward_kernel, forward_kernel, softmax_kernel, Act};

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn softmax_avx2(rows: &mut [f32], width: usize) {
        softmax_kernel::<true>(rows, width)
    }

    #[target_feature(enable = "avx512f,fma")]
    pub(super) fn softmax_avx512(rows: &mut [f32], width: usize) {
        softmax_kernel::<true>(rows, width)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn forward_avx2(act: Act, z: &[f32], out: &mut [f32]) {
        forward_kernel::<true>(act, z, out)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn backward_avx2(act: Act, z: &[f32], out: &[f32], g: &mut [f32]) {
        backward_kernel::<true>(act, z, out, g)
    }

    #[target_feature(enable = "avx512f,fma")]
    pub(super) fn forward_avx512(act: Act, z: &[f32], out: &mut [f32]) {
        forward_kernel::<true>(act, z, out)
    }

    #[target_feature(enable = "avx512f,fma")]
    pub(super) fn backward_avx512(act: Act, z: &[f32], out: &[f32], g: &mut [f32]) {
        backward_kernel::<true>(act, z, out, g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64*: deterministic inputs without a dependency.
    struct Rng(u64);

    impl Rng {
        fn next_u32(&mut self) -> u32 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
        }

        /// Uniform in [lo, hi).
        fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
            lo + (hi - lo) * (self.next_u32() >> 8) as f32 / (1u32 << 24) as f32
        }
    }

    /// The builds of the slice functions this CPU can run, widest last.
    fn runnable_isas() -> Vec<Isa> {
        #[allow(unused_mut)]
        let mut isas = vec![Isa::Baseline];
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("fma") {
            if std::is_x86_feature_detected!("avx2") {
                isas.push(Isa::Avx2);
            }
            if std::is_x86_feature_detected!("avx512f") {
                isas.push(Isa::Avx512);
            }
        }
        isas
    }

    /// `forward` on the given build, which must be one the CPU runs.
    fn forward_on(isa: Isa, act: Act, z: &[f32], out: &mut [f32]) {
        assert!(runnable_isas().contains(&isa));
        match isa {
            Isa::Baseline => forward_kernel::<false>(act, z, out),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX2 and FMA, checked above.
            Isa::Avx2 => unsafe { x86::forward_avx2(act, z, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX-512F and FMA, checked above.
            Isa::Avx512 => unsafe { x86::forward_avx512(act, z, out) },
        }
    }

    /// `backward` on the given build, which must be one the CPU runs.
    fn backward_on(isa: Isa, act: Act, z: &[f32], out: &[f32], g: &mut [f32]) {
        assert!(runnable_isas().contains(&isa));
        match isa {
            Isa::Baseline => backward_kernel::<false>(act, z, out, g),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX2 and FMA, checked above.
            Isa::Avx2 => unsafe { x86::backward_avx2(act, z, out, g) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX-512F and FMA, checked above.
            Isa::Avx512 => unsafe { x86::backward_avx512(act, z, out, g) },
        }
    }

    /// An element function under test.
    #[derive(Clone, Copy, Debug)]
    enum Func {
        Exp,
        Erf,
        Tanh,
        Sigmoid,
        Gelu,
        GeluGrad,
    }

    #[inline(always)]
    fn apply<const FUSED: bool>(f: Func, xs: &[f32], out: &mut [f32]) {
        match f {
            Func::Exp => map!(xs, out, |x| exp_with::<FUSED>(x)),
            Func::Erf => map!(xs, out, |x| erf_with::<FUSED>(x)),
            Func::Tanh => map!(xs, out, |x| tanh_with::<FUSED>(x)),
            Func::Sigmoid => map!(xs, out, |x| sigmoid_with::<FUSED>(x)),
            Func::Gelu => map!(xs, out, |x| gelu::<FUSED>(x)),
            Func::GeluGrad => map!(xs, out, |x| gelu_grad::<FUSED>(x)),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn apply_fused(f: Func, xs: &[f32], out: &mut [f32]) {
        apply::<true>(f, xs, out)
    }

    /// Which variants of the element functions this CPU runs: plain, and
    /// fused where it has FMA.
    fn variants() -> Vec<bool> {
        #[allow(unused_mut)]
        let mut v = vec![false];
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("fma") && std::is_x86_feature_detected!("avx2") {
            v.push(true);
        }
        v
    }

    /// `f` over `xs`, fused or not.
    fn eval(fused: bool, f: Func, xs: &[f32]) -> Vec<f32> {
        let mut out = vec![0.0; xs.len()];
        if !fused {
            apply::<false>(f, xs, &mut out);
            return out;
        }
        #[cfg(target_arch = "x86_64")]
        {
            assert!(variants().contains(&true));
            // SAFETY: the CPU has AVX2 and FMA, checked above.
            unsafe { apply_fused(f, xs, &mut out) };
            out
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("no fused build off x86-64")
    }

    /// erf in f64 to about 1e-15: the all-positive series
    /// `erf x = 2x/√π e^-x² Σ (2x²)^k / (1·3·…·(2k+1))`, which does not cancel.
    fn erf_ref(x: f64) -> f64 {
        let a = x.abs();
        if a > 6.5 {
            return 1f64.copysign(x);
        }
        let (mut term, mut sum, mut k) = (1.0f64, 1.0f64, 0.0f64);
        while term > 1e-17 * sum {
            k += 1.0;
            term *= 2.0 * a * a / (2.0 * k + 1.0);
            sum += term;
        }
        (2.0 / std::f64::consts::PI.sqrt() * a * (-a * a).exp() * sum).copysign(x)
    }

    fn sigmoid_ref(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    /// The distance from `got` to `want` in units of the last place of
    /// `want` rounded to f32.
    fn ulps(got: f32, want: f64) -> f64 {
        let w = want as f32;
        let ulp = (f32::from_bits(w.abs().to_bits() + 1) - w.abs()) as f64;
        (got as f64 - want).abs() / ulp
    }

    /// Every 1e-3 on [-20, 20] and on [lo, hi], and awkward points.
    fn sweep(lo: f32, hi: f32) -> Vec<f32> {
        let mut xs: Vec<f32> = (-20_000..=20_000).map(|i| i as f32 * 1e-3).collect();
        let n = ((hi - lo) * 1000.0) as i64;
        xs.extend((0..=n).map(|i| lo + i as f32 * 1e-3));
        for x in
            [0.0f32, 1e-30, 1e-20, 1e-10, 1e-5, f32::MIN_POSITIVE, 1e-45, 0.5, 0.625, 0.7, 1.0, 2.45, 3.9192, 9.0109]
        {
            xs.extend([x, -x, f32::from_bits(x.to_bits() + 1), -f32::from_bits(x.to_bits() + 1)]);
        }
        xs
    }

    #[test]
    fn exp_is_within_one_ulp() {
        let xs = sweep(-87.3, 88.7);
        for fused in variants() {
            let ys = eval(fused, Func::Exp, &xs);
            let mut worst = 0.0f64;
            for (&x, &y) in xs.iter().zip(&ys) {
                let e = ulps(y, (x as f64).exp());
                assert!(e <= 1.0, "exp({x}) = {y} vs {}, {e} ulp (fused: {fused})", (x as f64).exp());
                worst = worst.max(e);
            }
            assert!(worst > 0.5, "the sweep should reach the polynomial's worst case");
        }
    }

    #[test]
    fn exp_ends_and_special_values() {
        let after = |x: f32| f32::from_bits(x.to_bits() + 1);
        for fused in variants() {
            let exp = |x: f32| eval(fused, Func::Exp, &[x])[0];
            assert_eq!(exp(0.0), 1.0);
            assert_eq!(exp(-0.0), 1.0);
            assert_eq!(exp(1e-30), 1.0);
            assert!(ulps(exp(1.0), 1f64.exp()) <= 1.0);
            // The last finite result, and the first infinite one.
            assert!(exp(EXP_MAX).is_finite() && ulps(exp(EXP_MAX), (EXP_MAX as f64).exp()) <= 1.0);
            assert_eq!(exp(after(EXP_MAX)), f32::INFINITY);
            assert_eq!(exp(1000.0), f32::INFINITY);
            assert_eq!(exp(f32::MAX), f32::INFINITY);
            assert_eq!(exp(f32::INFINITY), f32::INFINITY);
            // The last normal result, then zeros instead of subnormals.
            let low = exp(EXP_MIN);
            assert!(low >= f32::MIN_POSITIVE && ulps(low, (EXP_MIN as f64).exp()) <= 1.0, "{low}");
            assert!((after(EXP_MIN) as f64).exp() < f32::MIN_POSITIVE as f64);
            assert_eq!(exp(after(EXP_MIN)), 0.0);
            assert_eq!(exp(-100.0), 0.0);
            assert_eq!(exp(f32::MIN), 0.0);
            assert_eq!(exp(f32::NEG_INFINITY), 0.0);
            assert!(exp(f32::NAN).is_nan());
            assert!(exp(-f32::NAN).is_nan());
            // NaNs with payloads, whose bits the exponent trick would shift.
            assert!(exp(f32::from_bits(0x7fc0_1234)).is_nan());
            assert!(exp(f32::from_bits(0xffa0_0001)).is_nan());
        }
    }

    #[test]
    fn erf_reference_is_right() {
        // Values from Abramowitz and Stegun, table 7.1, and mpmath.
        for (x, want) in [
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
            (4.0, 0.999_999_984_582_742_1),
        ] {
            assert!((erf_ref(x) - want).abs() < 1e-15, "erf_ref({x}) = {}", erf_ref(x));
            assert_eq!(erf_ref(-x), -erf_ref(x));
        }
    }

    #[test]
    fn erf_is_within_its_bounds() {
        let xs = sweep(-5.0, 5.0);
        for fused in variants() {
            let ys = eval(fused, Func::Erf, &xs);
            let (mut worst_abs, mut worst_rel) = (0.0f64, 0.0f64);
            for (&x, &got) in xs.iter().zip(&ys) {
                let want = erf_ref(x as f64);
                let abs = (got as f64 - want).abs();
                assert!(abs <= 1.1e-7, "erf({x}) = {got} vs {want}: {abs:e} (fused: {fused})");
                assert!(got.abs() <= 1.0);
                // Relative error means little once the result is subnormal.
                if x.abs() >= f32::MIN_POSITIVE && x.abs() < 1.0 {
                    let rel = abs / want.abs();
                    assert!(rel <= 1.7e-7, "erf({x}) = {got} vs {want}: relative {rel:e} (fused: {fused})");
                    worst_rel = worst_rel.max(rel);
                }
                worst_abs = worst_abs.max(abs);
            }
            assert!(worst_abs > 5e-8 && worst_rel > 5e-8, "{worst_abs:e} {worst_rel:e}");
        }
    }

    #[test]
    fn erf_special_values() {
        for fused in variants() {
            let erf = |x: f32| eval(fused, Func::Erf, &[x])[0];
            assert_eq!(erf(0.0).to_bits(), 0.0f32.to_bits());
            assert_eq!(erf(-0.0).to_bits(), (-0.0f32).to_bits());
            assert_eq!(erf(1e-30), 1e-30 * std::f32::consts::FRAC_2_SQRT_PI);
            assert_eq!(erf(ERF_ONE), 1.0);
            assert!(erf(f32::from_bits(ERF_ONE.to_bits() - 1)) <= 1.0);
            assert_eq!(erf(-ERF_ONE), -1.0);
            assert_eq!(erf(1e30), 1.0);
            assert_eq!(erf(f32::INFINITY), 1.0);
            assert_eq!(erf(f32::NEG_INFINITY), -1.0);
            assert!(erf(f32::NAN).is_nan());
        }
    }

    #[test]
    fn tanh_is_within_its_bound() {
        let xs = sweep(-10.0, 10.0);
        for fused in variants() {
            let ys = eval(fused, Func::Tanh, &xs);
            let mut worst = 0.0f64;
            for (&x, &y) in xs.iter().zip(&ys) {
                let e = ulps(y, (x as f64).tanh());
                assert!(e <= 1.1, "tanh({x}) = {y} vs {}: {e} ulp (fused: {fused})", (x as f64).tanh());
                worst = worst.max(e);
            }
            assert!(worst > 0.5);
        }
    }

    #[test]
    fn tanh_special_values() {
        for fused in variants() {
            let tanh = |x: f32| eval(fused, Func::Tanh, &[x])[0];
            assert_eq!(tanh(-0.0).to_bits(), (-0.0f32).to_bits());
            for x in [1e-30f32, 1e-20, 1e-10, 1e-5] {
                assert_eq!(tanh(x), x);
                assert_eq!(tanh(-x), -x);
            }
            assert_eq!(tanh(TANH_ONE), 1.0);
            assert!(tanh(f32::from_bits(TANH_ONE.to_bits() - 1)) <= 1.0);
            assert_eq!(tanh(-50.0), -1.0);
            assert_eq!(tanh(f32::MAX), 1.0);
            assert_eq!(tanh(f32::INFINITY), 1.0);
            assert_eq!(tanh(f32::NEG_INFINITY), -1.0);
            assert!(tanh(f32::NAN).is_nan());
        }
    }

    #[test]
    fn sigmoid_is_within_its_bound_and_stable() {
        let xs = sweep(-87.3, 88.0);
        for fused in variants() {
            let ys = eval(fused, Func::Sigmoid, &xs);
            let mut worst = 0.0f64;
            for (&x, &y) in xs.iter().zip(&ys) {
                let e = ulps(y, sigmoid_ref(x as f64));
                assert!(e <= 2.5, "sigmoid({x}) = {y} vs {}: {e} ulp (fused: {fused})", sigmoid_ref(x as f64));
                worst = worst.max(e);
            }
            assert!(worst > 0.5);
            let sigmoid = |x: f32| eval(fused, Func::Sigmoid, &[x])[0];
            assert_eq!(sigmoid(0.0), 0.5);
            assert_eq!(sigmoid(16.7), 1.0);
            assert_eq!(sigmoid(-88.0), 0.0);
            for x in [f32::MAX, f32::INFINITY, 1e30] {
                assert_eq!(sigmoid(x), 1.0);
                assert_eq!(sigmoid(-x), 0.0);
            }
            assert!(sigmoid(f32::NAN).is_nan());
        }
    }

    #[test]
    fn scalar_functions_are_the_plain_variant() {
        let mut rng = Rng(11);
        let xs: Vec<f32> = (0..1000).map(|_| rng.uniform(-12.0, 12.0)).collect();
        let scalars: [fn(f32) -> f32; 4] = [exp, erf, tanh, sigmoid];
        for (f, scalar) in [Func::Exp, Func::Erf, Func::Tanh, Func::Sigmoid].into_iter().zip(scalars) {
            let plain = eval(false, f, &xs);
            for (&x, &y) in xs.iter().zip(&plain) {
                assert_eq!(scalar(x).to_bits(), y.to_bits(), "{f:?}({x})");
            }
        }
    }

    /// f64 forward and derivative of each activation, as Burn defines them.
    fn reference(act: Act, x: f64) -> (f64, f64) {
        let phi = (-x * x / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt();
        let cdf = 0.5 * (1.0 + erf_ref(x / std::f64::consts::SQRT_2));
        let s = sigmoid_ref(x);
        match act {
            Act::Linear => (x, 1.0),
            Act::Relu => (x.max(0.0), if x > 0.0 { 1.0 } else { 0.0 }),
            Act::Gelu => (x * cdf, cdf + x * phi),
            Act::Tanh => (x.tanh(), 1.0 - x.tanh().powi(2)),
            Act::Sigmoid => (s, s * (1.0 - s)),
            Act::Silu => (x * s, s + x * s * (1.0 - s)),
            Act::LeakyRelu(k) => {
                if x >= 0.0 {
                    (x, 1.0)
                } else {
                    (k as f64 * x, k as f64)
                }
            }
        }
    }

    const ACTS: [Act; 7] =
        [Act::Linear, Act::Relu, Act::Gelu, Act::Tanh, Act::Sigmoid, Act::Silu, Act::LeakyRelu(0.01)];

    #[test]
    fn reference_derivatives_match_finite_differences() {
        let mut rng = Rng(7);
        for act in ACTS {
            for _ in 0..2000 {
                let x = rng.uniform(-8.0, 8.0) as f64;
                if x.abs() < 1e-3 {
                    continue; // relu and leaky relu have a kink at 0
                }
                let h = 1e-5;
                let fd = (reference(act, x + h).0 - reference(act, x - h).0) / (2.0 * h);
                let d = reference(act, x).1;
                assert!((fd - d).abs() < 1e-7, "{act:?} at {x}: {d} vs finite difference {fd}");
            }
        }
    }

    #[test]
    fn softmax_rows_match_f64_with_masked_and_large_scores() {
        let width = 37;
        let mut rows: Vec<f32> = (0..3 * width).map(|i| ((i * 7919 % 211) as f32 - 105.0) / 9.0).collect();
        // Padding's keys (a score plus -1e9) and a row of large scores.
        rows[3] += -1e9;
        rows[width + 5] += -1e9;
        rows[2 * width..].iter_mut().for_each(|v| *v += 80.0);
        let want: Vec<f64> = rows
            .chunks(width)
            .flat_map(|r| {
                let top = r.iter().map(|&v| v as f64).fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = r.iter().map(|&v| (v as f64 - top).exp()).collect();
                let sum: f64 = e.iter().sum();
                e.into_iter().map(move |v| v / sum)
            })
            .collect();
        softmax_rows(&mut rows, width);
        for (i, (got, want)) in rows.iter().zip(&want).enumerate() {
            assert!((*got as f64 - want).abs() <= 2e-7 + 2e-6 * want, "{i}: {got} vs {want}");
        }
        assert_eq!((rows[3], rows[width + 5]), (0.0, 0.0), "padding gets no weight");
    }

    #[test]
    fn forward_and_backward_match_f64() {
        let mut rng = Rng(1);
        let n = 100_003; // not a multiple of any vector width
        let z: Vec<f32> =
            (0..n).map(|i| if i % 10 == 0 { rng.uniform(-30.0, 30.0) } else { rng.uniform(-6.0, 6.0) }).collect();
        let g0: Vec<f32> = (0..n).map(|_| rng.uniform(-2.0, 2.0)).collect();
        for isa in runnable_isas() {
            for act in ACTS {
                let mut out = vec![0.0; n];
                forward_on(isa, act, &z, &mut out);
                let mut g = g0.clone();
                backward_on(isa, act, &z, &out, &mut g);
                for i in 0..n {
                    let (y, d) = reference(act, z[i] as f64);
                    // Bounds measured as at most half of these. The gradient's
                    // last term: silu's `x s (1 - s)` takes `1 - s` from an f32
                    // `s` near 1, an error of up to |x| ulp(1), as in Burn.
                    let y_tol = 4e-7 * y.abs().max(1.0);
                    assert!(
                        (out[i] as f64 - y).abs() <= y_tol,
                        "{act:?} forward at {} on {isa:?}: {} vs {y}",
                        z[i],
                        out[i]
                    );
                    let gd = g0[i] as f64 * d;
                    let g_tol =
                        4e-7 * (g0[i].abs() as f64).max(gd.abs()).max(1e-3) + 6e-8 * (g0[i] * z[i]).abs() as f64;
                    assert!(
                        (g[i] as f64 - gd).abs() <= g_tol,
                        "{act:?} backward at {} on {isa:?}: {} vs {gd}",
                        z[i],
                        g[i]
                    );
                }
            }
        }
    }

    #[test]
    fn gelu_matches_its_definition_closely() {
        let xs = sweep(-10.0, 10.0);
        for fused in variants() {
            let ys = eval(fused, Func::Gelu, &xs);
            let ds = eval(fused, Func::GeluGrad, &xs);
            for ((&x, &got), &dgot) in xs.iter().zip(&ys).zip(&ds) {
                let (want, dwant) = reference(Act::Gelu, x as f64);
                // Absolute error relative to |x|, the quantity training sees.
                assert!((got as f64 - want).abs() <= 1.5e-7 * (x.abs() as f64).max(1.0), "gelu({x}) = {got} vs {want}");
                assert!((dgot as f64 - dwant).abs() <= 1.8e-7, "gelu'({x}) = {dgot} vs {dwant} (fused: {fused})");
            }
        }
    }

    #[test]
    fn edges_follow_burn() {
        let z = [0.0f32, -0.0, f32::NAN, -1.0, 2.0];
        let mut out = [9.0f32; 5];
        forward(Act::Relu, &z, &mut out);
        assert_eq!(&out[..2], &[0.0, 0.0]);
        assert!(out[2].is_nan(), "a NaN stays NaN, as in PyTorch (flex's x.max(0) drops it)");
        assert_eq!(&out[3..], &[0.0, 2.0]);
        let mut g = [5.0f32; 5];
        backward(Act::Relu, &z, &out, &mut g);
        assert_eq!(g, [0.0, 0.0, 0.0, 0.0, 5.0], "relu passes the gradient only where the output is > 0");

        forward(Act::LeakyRelu(0.1), &z, &mut out);
        assert_eq!(out[0], 0.0);
        assert!(out[2].is_nan());
        assert_eq!(&out[3..], &[-0.1, 2.0]);
        let mut g = [5.0f32; 5];
        backward(Act::LeakyRelu(0.1), &z, &out, &mut g);
        assert_eq!(g[0], 5.0, "leaky relu's gradient at 0 is 1: Burn's mask is x < 0");
        assert_eq!(g[1], 5.0);
        assert_eq!(&g[3..], &[0.5, 5.0]);

        let mut g = [5.0f32; 5];
        forward(Act::Gelu, &z, &mut out);
        assert_eq!(&out[..2], &[0.0, 0.0]);
        backward(Act::Gelu, &z, &out, &mut g);
        assert_eq!(&g[..2], &[2.5, 2.5]);

        forward(Act::Linear, &z, &mut out);
        assert_eq!(out[4], 2.0);
        let mut g = [5.0f32; 5];
        backward(Act::Linear, &z, &out, &mut g);
        assert_eq!(g, [5.0; 5]);
    }

    #[test]
    #[should_panic(expected = "differ in length")]
    fn forward_checks_lengths() {
        forward(Act::Relu, &[1.0, 2.0], &mut [0.0]);
    }

    #[test]
    #[should_panic(expected = "differ in length")]
    fn backward_checks_lengths() {
        backward(Act::Gelu, &[1.0, 2.0], &[1.0], &mut [0.0, 0.0]);
    }

    /// The builds agree: the baseline with the plain scalar functions bit for
    /// bit, the fused builds with each other bit for bit and with the
    /// baseline to within rounding, and `forward`/`backward` with the widest.
    #[test]
    fn every_build_agrees() {
        let mut rng = Rng(3);
        let mut z: Vec<f32> = (0..4099).map(|_| rng.uniform(-12.0, 12.0)).collect();
        z.extend((0..4099).map(|_| f32::from_bits(rng.next_u32()))); // any bits: huge, tiny, NaN
        z.extend([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, EXP_MIN, EXP_MAX, ERF_ONE, TANH_ONE]);
        let g0: Vec<f32> = (0..z.len()).map(|_| rng.uniform(-2.0, 2.0)).collect();
        // Bits, except that all NaNs are one: which NaN an operation returns
        // depends on operand order, which LLVM may change.
        let bits = |v: &[f32]| v.iter().map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() }).collect::<Vec<_>>();
        let run = |isa: Isa, act: Act| {
            let mut out = vec![0.0; z.len()];
            let mut g = g0.clone();
            forward_on(isa, act, &z, &mut out);
            backward_on(isa, act, &z, &out, &mut g);
            (out, g)
        };
        let isas = runnable_isas();
        assert_eq!(isas.last(), Some(&isa()), "forward and backward use the widest build");
        for act in ACTS {
            let (base, base_g) = run(Isa::Baseline, act);
            // The baseline's vector loop against scalar code.
            let mut one = [0.0f32];
            for (i, &x) in z.iter().enumerate() {
                forward_kernel::<false>(act, &[x], &mut one);
                assert_eq!(bits(&one), bits(&base[i..i + 1]), "{act:?} at {x}: scalar and vector loop differ");
            }
            let fused: Vec<_> = isas[1..].iter().map(|&isa| (isa, run(isa, act))).collect();
            for (isa, (out, g)) in &fused {
                assert!(
                    bits(out) == bits(&fused[0].1 .0) && bits(g) == bits(&fused[0].1 .1),
                    "{act:?}: {isa:?} differs from {:?}",
                    fused[0].0
                );
                for i in 0..z.len() {
                    let scale = z[i].abs().max(1.0) * g0[i].abs().max(1.0);
                    let close = |a: f32, b: f32| {
                        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 4e-7 * scale
                    };
                    assert!(
                        close(out[i], base[i]),
                        "{act:?} forward at {}: {} on {isa:?}, {} on the baseline",
                        z[i],
                        out[i],
                        base[i]
                    );
                    assert!(
                        close(g[i], base_g[i]),
                        "{act:?} backward at {}: {} on {isa:?}, {} on the baseline",
                        z[i],
                        g[i],
                        base_g[i]
                    );
                }
            }
            let (widest, widest_g) = fused.last().map_or((&base, &base_g), |(_, (o, g))| (o, g));
            let mut out = vec![0.0; z.len()];
            let mut g = g0.clone();
            forward(act, &z, &mut out);
            backward(act, &z, &out, &mut g);
            assert!(
                bits(&out) == bits(widest) && bits(&g) == bits(widest_g),
                "{act:?}: the public functions differ from the widest build"
            );
        }
    }

    /// Every f32 through each element function and variant, against f64: the
    /// numbers in the module documentation. About six minutes on two cores:
    /// `cargo test --release -- --ignored exhaustive_accuracy --nocapture`.
    #[test]
    #[ignore]
    fn exhaustive_accuracy() {
        // exp ulp, erf abs, erf rel (|x| < 1), tanh ulp, sigmoid ulp, gelu' abs
        type Worst = [f64; 6];
        let funcs = [Func::Exp, Func::Erf, Func::Tanh, Func::Sigmoid, Func::GeluGrad];
        let vs = variants();
        let threads = std::thread::available_parallelism().map_or(4, |n| n.get()) as u64;
        let block = 1u64 << 16;
        let blocks = (1u64 << 32) / block;
        let per_thread: Vec<Vec<Worst>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let vs = &vs;
                    s.spawn(move || {
                        let mut worst = vec![[0.0f64; 6]; vs.len()];
                        for b in (t..blocks).step_by(threads as usize) {
                            let xs: Vec<f32> = (b * block..(b + 1) * block).map(|i| f32::from_bits(i as u32)).collect();
                            let got: Vec<[Vec<f32>; 5]> =
                                vs.iter().map(|&fused| funcs.map(|f| eval(fused, f, &xs))).collect();
                            for (i, &x) in xs.iter().enumerate() {
                                if x.is_nan() {
                                    for [exp, erf, tanh, sigmoid, _] in &got {
                                        assert!(exp[i].is_nan() && erf[i].is_nan() && tanh[i].is_nan());
                                        assert!(sigmoid[i].is_nan());
                                    }
                                    continue;
                                }
                                let xd = x as f64;
                                let exp_want = xd.exp();
                                // erfc(3.919206) < 3e-8: no need for the reference past it.
                                let erf_want = (x.abs() < ERF_ONE).then(|| erf_ref(xd));
                                let sigmoid_want = sigmoid_ref(xd);
                                let dgelu_want = (x.abs() < 20.0).then(|| reference(Act::Gelu, xd).1);
                                for (w, [exp, erf, tanh, sigmoid, dgelu]) in worst.iter_mut().zip(&got) {
                                    if exp_want >= f32::MIN_POSITIVE as f64 && exp_want <= f32::MAX as f64 {
                                        w[0] = w[0].max(ulps(exp[i], exp_want));
                                    } else {
                                        assert!(exp[i] == 0.0 || exp[i] == f32::INFINITY, "exp({x}) = {}", exp[i]);
                                    }
                                    match erf_want {
                                        None => assert_eq!(erf[i], 1f32.copysign(x)),
                                        Some(want) => {
                                            let abs = (erf[i] as f64 - want).abs();
                                            w[1] = w[1].max(abs);
                                            if x.abs() >= f32::MIN_POSITIVE && x.abs() < 1.0 {
                                                w[2] = w[2].max(abs / want.abs());
                                            }
                                        }
                                    }
                                    w[3] = w[3].max(ulps(tanh[i], xd.tanh()));
                                    if sigmoid_want >= f32::MIN_POSITIVE as f64 {
                                        w[4] = w[4].max(ulps(sigmoid[i], sigmoid_want));
                                    } else {
                                        assert!(sigmoid[i] as f64 <= f32::MIN_POSITIVE as f64);
                                    }
                                    if let Some(want) = dgelu_want {
                                        w[5] = w[5].max((dgelu[i] as f64 - want).abs());
                                    }
                                }
                            }
                        }
                        worst
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (v, fused) in vs.iter().enumerate() {
            let w: Worst = per_thread.iter().fold([0.0; 6], |a, t| std::array::from_fn(|i| a[i].max(t[v][i])));
            println!(
                "{}: exp {:.3} ulp, erf {:.3e} abs / {:.3e} rel (|x| < 1), tanh {:.3} ulp, sigmoid {:.3} ulp, gelu' {:.3e} abs",
                if *fused { "fused" } else { "plain" },
                w[0],
                w[1],
                w[2],
                w[3],
                w[4],
                w[5]
            );
            let bounds = [1.02, 1.1e-7, 1.7e-7, 1.1, 2.5, 1.8e-7];
            assert!(w.iter().zip(bounds).all(|(w, b)| *w <= b), "fused: {fused}, {w:?}");
        }
    }

    /// ns per element of forward + backward on a 256 × 512 batch, on each
    /// build this CPU runs: `cargo test --release -- --ignored speed --nocapture`.
    #[test]
    #[ignore]
    fn speed() {
        let mut rng = Rng(5);
        let n = 256 * 512;
        let z: Vec<f32> = (0..n).map(|_| rng.uniform(-4.0, 4.0)).collect();
        let mut out = vec![0.0; n];
        let mut g = vec![1.0; n];
        let reps = 300;
        for act in [Act::Gelu, Act::Tanh, Act::Sigmoid, Act::Silu, Act::Relu, Act::LeakyRelu(0.01)] {
            let mut line = format!("{act:?}:");
            for isa in runnable_isas() {
                forward_on(isa, act, &z, &mut out);
                let start = std::time::Instant::now();
                for _ in 0..reps {
                    forward_on(isa, act, std::hint::black_box(&z), &mut out);
                    backward_on(isa, act, &z, &out, std::hint::black_box(&mut g));
                    // Else g shrinks into subnormals, which time the CPU's
                    // microcode instead.
                    g.fill(1.0);
                }
                let ns = start.elapsed().as_nanos() as f64 / (reps * n) as f64;
                line += &format!(" {isa:?} {ns:.3},");
            }
            println!("{line} ns per element, forward + backward");
        }
    }
}
