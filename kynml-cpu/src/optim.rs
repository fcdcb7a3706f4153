//! The four optimizers (AdamW, Adam, SGD, RMSprop) as updates of host `f32`
//! slices, doing the arithmetic that Burn 0.21's optimizers do on its flex
//! CPU backend, operation for operation, so that the two engines train alike
//! and their optimizer state converts between them.
//!
//! Each [`OptimConfig`] holds the spec's values with PyTorch's meaning, read
//! the way `kynml-core`'s `train/optimizer.rs` hands them to Burn: betas,
//! eps, alpha, RMSprop's momentum and every weight decay become `f32`
//! (Burn's config types); SGD's momentum and dampening stay `f64` until
//! Burn applies them; weight decay of Adam, SGD and RMSprop counts only when
//! `> 0` (the config is `None` otherwise), AdamW always has its own; SGD has
//! momentum only when `momentum > 0`. Each of Burn's tensor operations rounds
//! to `f32`, and a scalar reaches an `f32` tensor as `scalar as f32`
//! (flex's `scalar_op`), so the learning rate is `lr as f32`. [`step`] does
//! those operations in the same order, fused into one pass over the
//! elements; Rust never contracts `a * b + c` into a fused multiply-add, so
//! the results are bit for bit Burn's. The bias corrections are `f32::powi`
//! of the step count, as in Burn.
//!
//! [`ParamState`] holds, field for field, Burn's state record of one
//! parameter (`AdamWState`/`AdamState` around `AdaptiveMomentumState`,
//! `SgdState` around `momentum::MomentumState`, `RmsPropState`), and it
//! exists once a parameter has taken a step, as Burn's record does.
//!
//! Where Burn and PyTorch differ, this module follows Burn:
//! - The formulas are PyTorch's in exact arithmetic, but the rounding is
//!   not: Adam divides `m · (√bc₂ / bc₁)` by `√v + ε·√bc₂` (PyTorch: `m / bc₁`
//!   over `√v / √bc₂ + ε`); AdamW divides `m / bc₁` by `√(v / bc₂) + ε`;
//!   the bias corrections `1 - βᵗ` are computed in `f32`; every
//!   hyperparameter, the learning rate included, is rounded to `f32` first.
//! - AdamW's decay multiplies the parameter by `(1 - lr·wd) as f32`, computed
//!   in `f64`, and is left out when `lr·wd == 0`.
//! - SGD's first momentum step stores the (decayed) gradient as the velocity
//!   without dampening, as PyTorch does; Burn also allows Nesterov with
//!   dampening (PyTorch refuses it, and so does KynML's spec).
//! - RMSprop adds ε outside the square root and keeps the momentum buffer as
//!   `buf = m·buf + g / (√avg + ε)`, both as PyTorch does; its state keeps no
//!   step count, but keeps `avg` (what the square root was taken of, a copy
//!   of `square_avg` when not centered), which nothing reads back.
//! - Adam's and AdamW's step count is Burn's `time: usize`, 1 after the first
//!   step (PyTorch's `step` tensor); SGD and RMSprop keep a state record even
//!   without momentum (with no velocity or buffer in it).
//!
//! ```
//! use kynml_cpu::optim::{step, OptimConfig, ParamState};
//!
//! let adamw = OptimConfig::AdamW { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 };
//! let mut param = [0.5f32, -1.0];
//! let mut state = None;
//! step(&adamw, 1e-3, &mut param, &[0.1, -0.2], &mut state);
//! assert!(matches!(state, Some(ParamState::Adaptive { time: 1, .. })));
//! assert!(param[0] < 0.5 && param[1] > -1.0);
//! ```

/// An optimizer's settings, PyTorch's meaning (as the spec gives them, f64).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OptimConfig {
    /// Adam with decoupled weight decay (Burn's `AdamW`).
    AdamW {
        /// Decay rate of the running mean of gradients.
        beta1: f64,
        /// Decay rate of the running mean of squared gradients.
        beta2: f64,
        /// Added to the denominator.
        eps: f64,
        /// Decoupled weight decay: the parameter shrinks by `lr · weight_decay` each step.
        weight_decay: f64,
    },
    /// Adam, with weight decay added to the gradient (L2) when `> 0` (Burn's `Adam`).
    Adam {
        /// Decay rate of the running mean of gradients.
        beta1: f64,
        /// Decay rate of the running mean of squared gradients.
        beta2: f64,
        /// Added to the denominator.
        eps: f64,
        /// L2 penalty: `weight_decay · param` is added to the gradient; none unless `> 0`.
        weight_decay: f64,
    },
    /// Stochastic gradient descent (Burn's `Sgd`).
    Sgd {
        /// Momentum factor; no momentum (and no velocity) unless `> 0`.
        momentum: f64,
        /// Dampening of the gradient's share of the velocity, from the second step on.
        dampening: f64,
        /// L2 penalty added to the gradient; none unless `> 0`.
        weight_decay: f64,
        /// Nesterov momentum.
        nesterov: bool,
    },
    /// RMSprop (Burn's `RmsProp`).
    RmsProp {
        /// Decay rate of the running mean of squared gradients.
        alpha: f64,
        /// Added to the denominator, outside the square root.
        eps: f64,
        /// L2 penalty added to the gradient; none unless `> 0`.
        weight_decay: f64,
        /// Momentum factor; no momentum buffer unless `> 0` (as `f32`).
        momentum: f64,
        /// Divide by an estimate of the gradient's variance rather than its raw second moment.
        centered: bool,
    },
}

/// One parameter tensor's optimizer state, field for field Burn's record for
/// that optimizer (so it converts to and from it); `None` before the first step.
///
/// Every vector has the parameter's length, in the parameter's (row-major)
/// order; Burn's tensors have the parameter's shape.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamState {
    /// Adam and AdamW: Burn's `AdaptiveMomentumState` (the `momentum` field of
    /// `AdamState` and of `AdamWState`), whose `max_moment_2` is `None` here
    /// (no AMSGrad).
    Adaptive {
        /// `time`: steps taken, 1 after the first.
        time: usize,
        /// `moment_1`: running mean of the gradients (not bias-corrected).
        moment_1: Vec<f32>,
        /// `moment_2`: running mean of the squared gradients (not bias-corrected).
        moment_2: Vec<f32>,
    },
    /// SGD: Burn's `SgdState { momentum: Option<MomentumState> }`.
    Sgd {
        /// `momentum.velocity`: the momentum buffer, `None` without momentum.
        velocity: Option<Vec<f32>>,
    },
    /// RMSprop: Burn's `RmsPropState { square_avg: SquareAvgState, centered: CenteredState,
    /// momentum: Option<RmsPropMomentumState> }`.
    RmsProp {
        /// `square_avg.square_avg`: running mean of the squared gradients.
        square_avg: Vec<f32>,
        /// `centered.grad_avg`: running mean of the gradients, `Some` only when centered.
        grad_avg: Option<Vec<f32>>,
        /// `centered.avg`: the last step's denominator before its square root:
        /// `square_avg - grad_avg²` when centered, else a copy of `square_avg`.
        avg: Vec<f32>,
        /// `momentum.buf`: the momentum buffer, `Some` only when momentum `> 0`.
        buf: Option<Vec<f32>>,
    },
}

impl ParamState {
    fn kind(&self) -> &'static str {
        match self {
            ParamState::Adaptive { .. } => "adam/adamw",
            ParamState::Sgd { .. } => "sgd",
            ParamState::RmsProp { .. } => "rmsprop",
        }
    }
}

/// One update of `param` by `grad` (same length) at learning rate `lr`.
///
/// `state` is `None` before the parameter's first step and is created then
/// (the only allocation); later steps update it in place.
///
/// # Panics
/// If `grad` or the state's vectors do not have `param`'s length, or the
/// state belongs to another optimizer.
pub fn step(config: &OptimConfig, lr: f64, param: &mut [f32], grad: &[f32], state: &mut Option<ParamState>) {
    assert_eq!(param.len(), grad.len(), "a gradient of {} values for a parameter of {}", grad.len(), param.len());
    match *config {
        OptimConfig::AdamW { beta1, beta2, eps, weight_decay } => {
            adamw(Adaptive::new(beta1, beta2, eps), weight_decay as f32, lr, param, grad, state)
        }
        OptimConfig::Adam { beta1, beta2, eps, weight_decay } => {
            adam(Adaptive::new(beta1, beta2, eps), l2(weight_decay), lr, param, grad, state)
        }
        OptimConfig::Sgd { momentum, dampening, weight_decay, nesterov } => {
            sgd(momentum, dampening, l2(weight_decay), nesterov, lr, param, grad, state)
        }
        OptimConfig::RmsProp { alpha, eps, weight_decay, momentum, centered } => {
            rmsprop(alpha as f32, eps as f32, l2(weight_decay), momentum as f32, centered, lr, param, grad, state)
        }
    }
}

/// Calls `kernel::<..>(args)` with each runtime flag turned into a const
/// generic `bool`, in order, so that the per-element loop has no branch on
/// the configuration (one copy of the loop per combination).
macro_rules! with_flags {
    ($kernel:ident [$($done:tt),*] [] ($($arg:expr),*)) => {
        $kernel::<$($done),*>($($arg),*)
    };
    ($kernel:ident [$($done:tt),*] [$flag:expr $(, $rest:expr)*] ($($arg:expr),*)) => {
        if $flag {
            with_flags!($kernel [$($done,)* true] [$($rest),*] ($($arg),*))
        } else {
            with_flags!($kernel [$($done,)* false] [$($rest),*] ($($arg),*))
        }
    };
}

/// Burn's `WeightDecayConfig` as the project builds it: present only when
/// the spec's value is `> 0`, and held as `f32`.
fn l2(weight_decay: f64) -> Option<f32> {
    (weight_decay > 0.0).then_some(weight_decay as f32)
}

/// The settings Adam and AdamW share, as Burn's configs hold them (`f32`).
#[derive(Clone, Copy)]
struct Adaptive {
    beta_1: f32,
    beta_2: f32,
    epsilon: f32,
}

impl Adaptive {
    fn new(beta1: f64, beta2: f64, eps: f64) -> Self {
        Adaptive { beta_1: beta1 as f32, beta_2: beta2 as f32, epsilon: eps as f32 }
    }

    /// The moments to update, whether they are new (Burn's first-step branch),
    /// and the step count after this step (Burn's `time`, advanced first).
    fn state(state: &mut Option<ParamState>, n: usize) -> (bool, usize, &mut [f32], &mut [f32]) {
        let first = state.is_none();
        let state = state.get_or_insert_with(|| ParamState::Adaptive {
            time: 0,
            moment_1: vec![0.0; n],
            moment_2: vec![0.0; n],
        });
        let ParamState::Adaptive { time, moment_1, moment_2 } = state else {
            panic!("adam/adamw was given {} state", state.kind());
        };
        assert!(moment_1.len() == n && moment_2.len() == n, "adam state of another length than its parameter ({n})");
        *time += 1;
        (first, *time, moment_1, moment_2)
    }
}

/// The per-step constants of one Adam or AdamW update.
struct AdaptiveStep {
    beta_1: f32,
    beta_2: f32,
    /// `1 - beta_1`, `1 - beta_2`, in `f32` as Burn computes them.
    factor_1: f32,
    factor_2: f32,
    /// AdamW: `1 - beta_1^t`, `1 - beta_2^t`, `epsilon`.
    /// Adam: `√(1 - beta_2^t) / (1 - beta_1^t)`, unused, `epsilon · √(1 - beta_2^t)`.
    a: f32,
    b: f32,
    epsilon: f32,
    /// AdamW: `(1 - lr · weight_decay) as f32`; Adam: the L2 penalty.
    decay: f32,
    lr: f32,
}

/// Burn's `AdamW::step` with `AdaptiveMomentumW::transform`.
fn adamw(c: Adaptive, weight_decay: f32, lr: f64, param: &mut [f32], grad: &[f32], state: &mut Option<ParamState>) {
    let (first, time, moment_1, moment_2) = Adaptive::state(state, param.len());
    let time = time as i32;
    let decay_rate = lr * weight_decay as f64;
    let k = AdaptiveStep {
        beta_1: c.beta_1,
        beta_2: c.beta_2,
        factor_1: 1.0 - c.beta_1,
        factor_2: 1.0 - c.beta_2,
        a: 1.0 - c.beta_1.powi(time),
        b: 1.0 - c.beta_2.powi(time),
        epsilon: c.epsilon,
        decay: (1.0 - decay_rate) as f32,
        lr: lr as f32,
    };
    with_flags!(adamw_kernel [] [first, decay_rate != 0.0] (&k, param, grad, moment_1, moment_2));
}

fn adamw_kernel<const FIRST: bool, const DECAY: bool>(
    k: &AdaptiveStep,
    param: &mut [f32],
    grad: &[f32],
    moment_1: &mut [f32],
    moment_2: &mut [f32],
) {
    for (((p, &g), m), v) in param.iter_mut().zip(grad).zip(moment_1.iter_mut()).zip(moment_2.iter_mut()) {
        *m = if FIRST { g * k.factor_1 } else { *m * k.beta_1 + g * k.factor_1 };
        *v = if FIRST { g * g * k.factor_2 } else { *v * k.beta_2 + g * g * k.factor_2 };
        let update = (*m / k.a) / ((*v / k.b).sqrt() + k.epsilon);
        let kept = if DECAY { *p * k.decay } else { *p };
        *p = kept - update * k.lr;
    }
}

/// Burn's `Adam::step`: `WeightDecay::transform`, then `AdaptiveMomentum::transform`.
fn adam(c: Adaptive, l2: Option<f32>, lr: f64, param: &mut [f32], grad: &[f32], state: &mut Option<ParamState>) {
    let (first, time, moment_1, moment_2) = Adaptive::state(state, param.len());
    let time = time as i32;
    let bias_correction2_sqrt = (1.0 - c.beta_2.powi(time)).sqrt();
    let k = AdaptiveStep {
        beta_1: c.beta_1,
        beta_2: c.beta_2,
        factor_1: 1.0 - c.beta_1,
        factor_2: 1.0 - c.beta_2,
        a: bias_correction2_sqrt / (1.0 - c.beta_1.powi(time)),
        b: 0.0,
        epsilon: c.epsilon * bias_correction2_sqrt,
        decay: l2.unwrap_or(0.0),
        lr: lr as f32,
    };
    with_flags!(adam_kernel [] [first, l2.is_some()] (&k, param, grad, moment_1, moment_2));
}

fn adam_kernel<const FIRST: bool, const DECAY: bool>(
    k: &AdaptiveStep,
    param: &mut [f32],
    grad: &[f32],
    moment_1: &mut [f32],
    moment_2: &mut [f32],
) {
    for (((p, &g), m), v) in param.iter_mut().zip(grad).zip(moment_1.iter_mut()).zip(moment_2.iter_mut()) {
        let g = if DECAY { *p * k.decay + g } else { g };
        *m = if FIRST { g * k.factor_1 } else { *m * k.beta_1 + g * k.factor_1 };
        *v = if FIRST { g * g * k.factor_2 } else { *v * k.beta_2 + g * g * k.factor_2 };
        let update = (*m * k.a) / (v.sqrt() + k.epsilon);
        *p -= update * k.lr;
    }
}

/// The per-step constants of one SGD update.
struct SgdStep {
    /// Burn's `Momentum::momentum`: the `f64` setting as `f32`.
    momentum: f32,
    /// `(1 - dampening) as f32`, the subtraction in `f64` as in Burn.
    keep: f32,
    l2: f32,
    lr: f32,
}

/// Burn's `Sgd::step`: `WeightDecay::transform`, then `Momentum::transform`.
#[allow(clippy::too_many_arguments)]
fn sgd(
    momentum: f64,
    dampening: f64,
    l2: Option<f32>,
    nesterov: bool,
    lr: f64,
    param: &mut [f32],
    grad: &[f32],
    state: &mut Option<ParamState>,
) {
    let n = param.len();
    let state = state.get_or_insert(ParamState::Sgd { velocity: None });
    let ParamState::Sgd { velocity } = state else {
        panic!("sgd was given {} state", state.kind());
    };
    let k = SgdStep { momentum: momentum as f32, keep: (1.0 - dampening) as f32, l2: l2.unwrap_or(0.0), lr: lr as f32 };
    if momentum > 0.0 {
        let first = velocity.is_none();
        let velocity = velocity.get_or_insert_with(|| vec![0.0; n]);
        assert_eq!(velocity.len(), n, "sgd velocity of another length than its parameter");
        with_flags!(sgd_momentum_kernel [] [first, l2.is_some(), nesterov] (&k, param, grad, velocity));
    } else {
        // Without momentum Burn carries any velocity over untouched.
        with_flags!(sgd_kernel [] [l2.is_some()] (&k, param, grad));
    }
}

fn sgd_kernel<const DECAY: bool>(k: &SgdStep, param: &mut [f32], grad: &[f32]) {
    for (p, &g) in param.iter_mut().zip(grad) {
        let g = if DECAY { *p * k.l2 + g } else { g };
        *p -= g * k.lr;
    }
}

fn sgd_momentum_kernel<const FIRST: bool, const DECAY: bool, const NESTEROV: bool>(
    k: &SgdStep,
    param: &mut [f32],
    grad: &[f32],
    velocity: &mut [f32],
) {
    for ((p, &g), v) in param.iter_mut().zip(grad).zip(velocity.iter_mut()) {
        let g = if DECAY { *p * k.l2 + g } else { g };
        *v = if FIRST { g } else { g * k.keep + *v * k.momentum };
        let update = if NESTEROV { *v * k.momentum + g } else { *v };
        *p -= update * k.lr;
    }
}

/// The per-step constants of one RMSprop update.
struct RmsStep {
    alpha: f32,
    /// `1 - alpha`, in `f32` as Burn computes it.
    factor: f32,
    epsilon: f32,
    momentum: f32,
    l2: f32,
    lr: f32,
}

/// Burn's `RmsProp::step`: `WeightDecay`, `SquareAvgState`, `CenteredState`
/// and `RmsPropMomentum` transforms in turn.
#[allow(clippy::too_many_arguments)]
fn rmsprop(
    alpha: f32,
    epsilon: f32,
    l2: Option<f32>,
    momentum: f32,
    centered: bool,
    lr: f64,
    param: &mut [f32],
    grad: &[f32],
    state: &mut Option<ParamState>,
) {
    let n = param.len();
    let use_momentum = momentum > 0.0;
    // A running mean that Burn starts from this step's value (`x`) is started
    // here from -0.0, which gives the same bits: `-0.0 · alpha + x == x` for any
    // `x` when `alpha >= 0` (and `momentum > 0`), and a buffer can be missing
    // from a state that exists when the settings changed between steps.
    let fresh = || vec![-0.0; n];
    let state = state.get_or_insert_with(|| ParamState::RmsProp {
        square_avg: fresh(),
        grad_avg: None,
        avg: vec![0.0; n],
        buf: None,
    });
    let ParamState::RmsProp { square_avg, grad_avg, avg, buf } = state else {
        panic!("rmsprop was given {} state", state.kind());
    };
    // Burn's transforms drop the running mean of gradients when not centered,
    // and the buffer without momentum.
    if !centered {
        *grad_avg = None;
    }
    if !use_momentum {
        *buf = None;
    }
    let grad_avg = if centered { grad_avg.get_or_insert_with(fresh).as_mut_slice() } else { &mut [] };
    let buf = if use_momentum { buf.get_or_insert_with(fresh).as_mut_slice() } else { &mut [] };
    assert!(
        square_avg.len() == n
            && avg.len() == n
            && (!centered || grad_avg.len() == n)
            && (!use_momentum || buf.len() == n),
        "rmsprop state of another length than its parameter ({n})"
    );
    let k = RmsStep { alpha, factor: 1.0 - alpha, epsilon, momentum, l2: l2.unwrap_or(0.0), lr: lr as f32 };
    with_flags!(
        rmsprop_kernel [] [l2.is_some(), centered, use_momentum] (&k, param, grad, square_avg, grad_avg, avg, buf)
    );
}

fn rmsprop_kernel<const DECAY: bool, const CENTERED: bool, const MOMENTUM: bool>(
    k: &RmsStep,
    param: &mut [f32],
    grad: &[f32],
    square_avg: &mut [f32],
    grad_avg: &mut [f32],
    avg: &mut [f32],
    buf: &mut [f32],
) {
    // Every slice in use cut to the same length, so that the indexing below
    // needs no bounds checks and the loop vectorizes.
    let n = param.len();
    let (grad, square_avg, avg) = (&grad[..n], &mut square_avg[..n], &mut avg[..n]);
    let grad_avg = if CENTERED { &mut grad_avg[..n] } else { grad_avg };
    let buf = if MOMENTUM { &mut buf[..n] } else { buf };
    for i in 0..n {
        let p = param[i];
        let g = if DECAY { p * k.l2 + grad[i] } else { grad[i] };
        let sq = square_avg[i] * k.alpha + g * g * k.factor;
        square_avg[i] = sq;
        let a = if CENTERED {
            let ga = grad_avg[i] * k.alpha + g * k.factor;
            grad_avg[i] = ga;
            sq - ga * ga
        } else {
            sq
        };
        avg[i] = a;
        let mut update = g / (a.sqrt() + k.epsilon);
        if MOMENTUM {
            update += buf[i] * k.momentum;
            buf[i] = update;
        }
        param[i] = p - update * k.lr;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Burn's optimizers transcribed line by line onto whole-vector
    /// operations, one rounding per tensor operation as on flex: the fused
    /// kernels must give the same bits.
    mod burn {
        pub type T = Vec<f32>;

        // A scalar reaches an f32 tensor through `Scalar::Float(f64)` and `as f32`.
        pub fn mul_scalar(a: &T, s: f64) -> T {
            a.iter().map(|x| x * s as f32).collect()
        }
        pub fn div_scalar(a: &T, s: f64) -> T {
            a.iter().map(|x| x / s as f32).collect()
        }
        pub fn add_scalar(a: &T, s: f64) -> T {
            a.iter().map(|x| x + s as f32).collect()
        }
        pub fn add(a: &T, b: &T) -> T {
            a.iter().zip(b).map(|(x, y)| x + y).collect()
        }
        pub fn sub(a: &T, b: &T) -> T {
            a.iter().zip(b).map(|(x, y)| x - y).collect()
        }
        pub fn div(a: &T, b: &T) -> T {
            a.iter().zip(b).map(|(x, y)| x / y).collect()
        }
        // `square` is `powi_scalar(2)`, which flex runs as `x * x`.
        pub fn square(a: &T) -> T {
            a.iter().map(|x| x * x).collect()
        }
        pub fn sqrt(a: &T) -> T {
            a.iter().map(|x| x.sqrt()).collect()
        }

        pub struct AdaptiveMomentumState {
            pub time: usize,
            pub moment_1: T,
            pub moment_2: T,
        }

        pub struct Adaptive {
            pub beta_1: f32,
            pub beta_2: f32,
            pub epsilon: f32,
        }

        fn moments(c: &Adaptive, grad: &T, state: Option<AdaptiveMomentumState>) -> AdaptiveMomentumState {
            let factor_1 = 1.0 - c.beta_1;
            let factor_2 = 1.0 - c.beta_2;
            match state {
                Some(mut s) => {
                    s.moment_1 = add(&mul_scalar(&s.moment_1, c.beta_1 as f64), &mul_scalar(grad, factor_1 as f64));
                    s.moment_2 =
                        add(&mul_scalar(&s.moment_2, c.beta_2 as f64), &mul_scalar(&square(grad), factor_2 as f64));
                    s.time += 1;
                    s
                }
                None => AdaptiveMomentumState {
                    time: 1,
                    moment_1: mul_scalar(grad, factor_1 as f64),
                    moment_2: mul_scalar(&square(grad), factor_2 as f64),
                },
            }
        }

        pub fn adamw(
            c: &Adaptive,
            weight_decay: f32,
            lr: f64,
            tensor: T,
            grad: T,
            state: Option<AdaptiveMomentumState>,
        ) -> (T, AdaptiveMomentumState) {
            let s = moments(c, &grad, state);
            let time = s.time as i32;
            let m1 = div_scalar(&s.moment_1, (1f32 - c.beta_1.powi(time)) as f64);
            let m2 = div_scalar(&s.moment_2, (1f32 - c.beta_2.powi(time)) as f64);
            let raw_delta = div(&m1, &add_scalar(&sqrt(&m2), c.epsilon as f64));
            let decay_rate = lr * (weight_decay as f64);
            let decayed = if decay_rate == 0.0 { tensor } else { mul_scalar(&tensor, 1.0 - decay_rate) };
            (sub(&decayed, &mul_scalar(&raw_delta, lr)), s)
        }

        pub fn adam(
            c: &Adaptive,
            l2: Option<f32>,
            lr: f64,
            tensor: T,
            mut grad: T,
            state: Option<AdaptiveMomentumState>,
        ) -> (T, AdaptiveMomentumState) {
            if let Some(penalty) = l2 {
                grad = add(&mul_scalar(&tensor, penalty as f64), &grad);
            }
            let s = moments(c, &grad, state);
            let time = s.time as i32;
            let bias_correction2_sqrt = (1.0 - c.beta_2.powi(time)).sqrt();
            let combined_factor = bias_correction2_sqrt / (1.0 - c.beta_1.powi(time));
            let grad = div(
                &mul_scalar(&s.moment_1, combined_factor as f64),
                &add_scalar(&sqrt(&s.moment_2), (c.epsilon * bias_correction2_sqrt) as f64),
            );
            (sub(&tensor, &mul_scalar(&grad, lr)), s)
        }

        pub struct Momentum {
            pub momentum: f64,
            pub dampening: f64,
            pub nesterov: bool,
        }

        pub fn sgd(
            momentum: Option<&Momentum>,
            l2: Option<f32>,
            lr: f64,
            tensor: T,
            mut grad: T,
            state: Option<Option<T>>,
        ) -> (T, Option<T>) {
            let mut velocity = state.flatten();
            if let Some(penalty) = l2 {
                grad = add(&mul_scalar(&tensor, penalty as f64), &grad);
            }
            if let Some(c) = momentum {
                let m = c.momentum as f32; // `B::FloatElem`
                let v = match velocity {
                    Some(v) => add(&mul_scalar(&grad, 1.0 - c.dampening), &mul_scalar(&v, m as f64)),
                    None => grad.clone(),
                };
                grad = if c.nesterov { add(&mul_scalar(&v, m as f64), &grad) } else { v.clone() };
                velocity = Some(v);
            }
            (sub(&tensor, &mul_scalar(&grad, lr)), velocity)
        }

        pub struct RmsProp {
            pub alpha: f32,
            pub momentum: f32,
            pub epsilon: f32,
            pub centered: bool,
            pub l2: Option<f32>,
        }

        pub struct RmsPropState {
            pub square_avg: T,
            pub grad_avg: Option<T>,
            pub avg: T,
            pub buf: Option<T>,
        }

        pub fn rmsprop(c: &RmsProp, lr: f64, tensor: T, mut grad: T, state: Option<RmsPropState>) -> (T, RmsPropState) {
            let (mut square_avg, mut centered, mut momentum) = (None, None, None);
            if let Some(s) = state {
                square_avg = Some(s.square_avg);
                centered = Some((s.grad_avg, s.avg));
                momentum = s.buf;
            }
            if let Some(penalty) = c.l2 {
                grad = add(&mul_scalar(&tensor, penalty as f64), &grad);
            }
            let square_avg = match square_avg {
                Some(sa) => add(&mul_scalar(&sa, c.alpha as f64), &mul_scalar(&square(&grad), (1. - c.alpha) as f64)),
                None => mul_scalar(&square(&grad), (1. - c.alpha) as f64),
            };
            let (grad_avg, avg) = if c.centered {
                let constant = mul_scalar(&grad, (1. - c.alpha) as f64);
                let grad_avg = match centered {
                    Some((old, _)) => {
                        old.map_or(constant.clone(), |ga| add(&mul_scalar(&ga, c.alpha as f64), &constant))
                    }
                    None => constant,
                };
                let avg = sub(&square_avg, &square(&grad_avg));
                (Some(grad_avg), avg)
            } else {
                (None, square_avg.clone())
            };
            let grad = div(&grad, &add_scalar(&sqrt(&avg), c.epsilon as f64));
            let (grad, buf) = if c.momentum > 0. {
                let buf = match momentum {
                    Some(b) => add(&mul_scalar(&b, c.momentum as f64), &grad),
                    None => grad,
                };
                (buf.clone(), Some(buf))
            } else {
                (grad, None)
            };
            (sub(&tensor, &mul_scalar(&grad, lr)), RmsPropState { square_avg, grad_avg, avg, buf })
        }
    }

    /// Deterministic values in about [-1.5, 1.5], with exact zeros of both signs among them.
    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n)
            .map(|i| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                match i % 11 {
                    3 => 0.0,
                    7 => -0.0,
                    _ => ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 3.0,
                }
            })
            .collect()
    }

    const N: usize = 37; // not a multiple of any vector width
    const LRS: [f64; 5] = [1e-2, 3e-3, 2e-2, 1e-3, 7e-3];

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    fn assert_bits(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(bits(got), bits(want), "{what}: got {got:?}, Burn {want:?}");
    }

    /// Runs `config` for the steps in `LRS` on random data, against Burn's transcription `burn_step`.
    fn same_bits_as_burn<S>(
        config: OptimConfig,
        mut burn_step: impl FnMut(f64, Vec<f32>, Vec<f32>, Option<S>) -> (Vec<f32>, S),
        check: impl Fn(&ParamState, &S, &str),
    ) {
        let mut param = values(1, N);
        let mut burn_param = param.clone();
        let mut state = None;
        let mut burn_state = None;
        for (i, &lr) in LRS.iter().enumerate() {
            let grad = values(10 + i as u64, N);
            step(&config, lr, &mut param, &grad, &mut state);
            let (p, s) = burn_step(lr, burn_param, grad, burn_state);
            burn_param = p;
            let what = format!("{config:?} step {}", i + 1);
            assert_bits(&param, &burn_param, &format!("{what} param"));
            check(state.as_ref().expect("a state after a step"), &s, &what);
            burn_state = Some(s);
        }
    }

    fn check_adaptive(state: &ParamState, burn: &burn::AdaptiveMomentumState, what: &str) {
        let ParamState::Adaptive { time, moment_1, moment_2 } = state else { panic!("{what}: {state:?}") };
        assert_eq!(*time, burn.time, "{what} time");
        assert_bits(moment_1, &burn.moment_1, &format!("{what} moment_1"));
        assert_bits(moment_2, &burn.moment_2, &format!("{what} moment_2"));
    }

    #[test]
    fn adamw_matches_burn_bit_for_bit() {
        // 0.858: at lr 0.01, `(1 - lr·wd) as f32` differs from the same in f32.
        for weight_decay in [0.0, 0.01, 0.858] {
            let config = OptimConfig::AdamW { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay };
            let c = burn::Adaptive { beta_1: 0.9, beta_2: 0.999, epsilon: 1e-8 };
            let wd = weight_decay as f32;
            same_bits_as_burn(config, |lr, t, g, s| burn::adamw(&c, wd, lr, t, g, s), check_adaptive);
        }
    }

    #[test]
    fn adam_matches_burn_bit_for_bit() {
        for weight_decay in [0.0, 0.01, -0.5] {
            let config = OptimConfig::Adam { beta1: 0.8, beta2: 0.99, eps: 1e-6, weight_decay };
            let c = burn::Adaptive { beta_1: 0.8, beta_2: 0.99, epsilon: 1e-6 };
            let l2 = (weight_decay > 0.0).then_some(weight_decay as f32);
            same_bits_as_burn(config, |lr, t, g, s| burn::adam(&c, l2, lr, t, g, s), check_adaptive);
        }
    }

    #[test]
    fn sgd_matches_burn_bit_for_bit() {
        for momentum in [0.0, 0.9] {
            // 0.109: `(1 - d) as f32` and `1 - d as f32` differ.
            for dampening in [0.0, 0.109] {
                for nesterov in [false, true] {
                    for weight_decay in [0.0, 1e-3] {
                        let config = OptimConfig::Sgd { momentum, dampening, weight_decay, nesterov };
                        let m = (momentum > 0.0).then_some(burn::Momentum { momentum, dampening, nesterov });
                        let l2 = (weight_decay > 0.0).then_some(weight_decay as f32);
                        same_bits_as_burn(
                            config,
                            |lr, t, g, s| burn::sgd(m.as_ref(), l2, lr, t, g, s),
                            |state, burn: &Option<Vec<f32>>, what| {
                                let ParamState::Sgd { velocity } = state else { panic!("{what}: {state:?}") };
                                assert_eq!(velocity.is_some(), burn.is_some(), "{what} velocity");
                                if let (Some(v), Some(b)) = (velocity, burn) {
                                    assert_bits(v, b, &format!("{what} velocity"));
                                }
                            },
                        );
                    }
                }
            }
        }
    }

    fn check_rmsprop(state: &ParamState, burn: &burn::RmsPropState, what: &str) {
        let ParamState::RmsProp { square_avg, grad_avg, avg, buf } = state else { panic!("{what}: {state:?}") };
        assert_bits(square_avg, &burn.square_avg, &format!("{what} square_avg"));
        assert_bits(avg, &burn.avg, &format!("{what} avg"));
        assert_eq!(grad_avg.is_some(), burn.grad_avg.is_some(), "{what} grad_avg");
        if let (Some(a), Some(b)) = (grad_avg, &burn.grad_avg) {
            assert_bits(a, b, &format!("{what} grad_avg"));
        }
        assert_eq!(buf.is_some(), burn.buf.is_some(), "{what} buf");
        if let (Some(a), Some(b)) = (buf, &burn.buf) {
            assert_bits(a, b, &format!("{what} buf"));
        }
    }

    fn rmsprop_pair(weight_decay: f64, momentum: f64, centered: bool) -> (OptimConfig, burn::RmsProp) {
        let config = OptimConfig::RmsProp { alpha: 0.99, eps: 1e-8, weight_decay, momentum, centered };
        let c = burn::RmsProp {
            alpha: 0.99,
            momentum: momentum as f32,
            epsilon: 1e-8,
            centered,
            l2: (weight_decay > 0.0).then_some(weight_decay as f32),
        };
        (config, c)
    }

    #[test]
    fn rmsprop_matches_burn_bit_for_bit() {
        for weight_decay in [0.0, 1e-2] {
            for momentum in [0.0, 0.9] {
                for centered in [false, true] {
                    let (config, c) = rmsprop_pair(weight_decay, momentum, centered);
                    same_bits_as_burn(config, |lr, t, g, s| burn::rmsprop(&c, lr, t, g, s), check_rmsprop);
                }
            }
        }
    }

    /// A state saved with some settings and resumed with others: Burn starts
    /// the missing running means from this step's values and drops the unused.
    #[test]
    fn rmsprop_and_sgd_follow_burn_when_the_settings_change() {
        let settings = [(0.0, false), (0.9, true), (0.0, true), (0.5, false), (0.9, true)];
        let mut param = values(1, N);
        let mut burn_param = param.clone();
        let (mut state, mut burn_state) = (None, None);
        for (i, &(momentum, centered)) in settings.iter().enumerate() {
            let (config, c) = rmsprop_pair(0.0, momentum, centered);
            let grad = values(20 + i as u64, N);
            step(&config, 0.01, &mut param, &grad, &mut state);
            let (p, s) = burn::rmsprop(&c, 0.01, burn_param, grad, burn_state);
            burn_param = p;
            assert_bits(&param, &burn_param, &format!("step {i}"));
            check_rmsprop(state.as_ref().unwrap(), &s, &format!("step {i}"));
            burn_state = Some(s);
        }

        let mut param = values(2, N);
        let mut burn_param = param.clone();
        let (mut state, mut burn_state) = (None, None);
        for (i, momentum) in [0.0, 0.9, 0.0, 0.9].into_iter().enumerate() {
            let config = OptimConfig::Sgd { momentum, dampening: 0.1, weight_decay: 0.0, nesterov: false };
            let m = (momentum > 0.0).then_some(burn::Momentum { momentum, dampening: 0.1, nesterov: false });
            let grad = values(30 + i as u64, N);
            step(&config, 0.01, &mut param, &grad, &mut state);
            let (p, v) = burn::sgd(m.as_ref(), None, 0.01, burn_param, grad, burn_state);
            burn_param = p;
            assert_bits(&param, &burn_param, &format!("sgd step {i}"));
            let Some(ParamState::Sgd { velocity }) = &state else { panic!("{state:?}") };
            assert_eq!(velocity.as_ref().map(|v| bits(v)), v.as_ref().map(|v| bits(v)), "sgd step {i} velocity");
            burn_state = Some(v);
        }
    }

    // The published algorithms in f64, with the hyperparameters and learning
    // rate rounded to f32 first, as Burn holds them (otherwise 1 - 0.999 alone
    // differs by 1e-5 relative).

    const P0: [f64; 3] = [0.5, -1.25, 2.0];
    const GRADS: [[f64; 3]; 3] = [[0.1, -0.2, 0.3], [0.15, -0.05, 0.25], [0.12, -0.3, -0.1]];
    const STEP_LRS: [f64; 3] = [0.01, 0.02, 0.005];

    fn r(x: f64) -> f64 {
        x as f32 as f64
    }

    fn assert_close(got: &[f32], want: &[f64], what: &str) {
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            let err = (g as f64 - w).abs();
            assert!(err <= 1e-6 * w.abs().max(1e-9), "{what}[{i}]: got {g}, reference {w} (rel {:e})", err / w.abs());
        }
    }

    /// Steps `config` through `GRADS` and checks the parameter and state after each step against `reference`.
    fn against_reference(
        config: OptimConfig,
        mut reference: impl FnMut(usize, f64, &mut [f64; 3], &[f64; 3]) -> Vec<Vec<f64>>,
    ) {
        let mut param = P0.map(|x| x as f32);
        let mut want = P0;
        let mut state = None;
        for (t, (grad, &lr)) in GRADS.iter().zip(&STEP_LRS).enumerate() {
            let g32 = grad.map(|x| x as f32);
            step(&config, lr, &mut param, &g32, &mut state);
            let moments = reference(t + 1, r(lr), &mut want, &grad.map(r));
            let what = format!("{config:?} step {}", t + 1);
            assert_close(&param, &want, &format!("{what} param"));
            let kept: Vec<&Vec<f32>> = match state.as_ref().unwrap() {
                ParamState::Adaptive { time, moment_1, moment_2 } => {
                    assert_eq!(*time, t + 1);
                    vec![moment_1, moment_2]
                }
                ParamState::Sgd { velocity } => velocity.iter().collect(),
                ParamState::RmsProp { square_avg, grad_avg, avg, buf } => {
                    [Some(square_avg), grad_avg.as_ref(), Some(avg), buf.as_ref()].into_iter().flatten().collect()
                }
            };
            assert_eq!(kept.len(), moments.len(), "{what}: state vectors");
            for (k, (got, want)) in kept.iter().zip(&moments).enumerate() {
                assert_close(got, want, &format!("{what} state {k}"));
            }
        }
    }

    /// Adam (`decoupled` false, L2 in the gradient) or AdamW, as in Kingma & Ba and Loshchilov & Hutter.
    fn adam_reference(
        b1: f64,
        b2: f64,
        eps: f64,
        wd: f64,
        decoupled: bool,
    ) -> impl FnMut(usize, f64, &mut [f64; 3], &[f64; 3]) -> Vec<Vec<f64>> {
        let (b1, b2, eps, wd) = (r(b1), r(b2), r(eps), r(wd));
        let (mut m, mut v) = ([0.0; 3], [0.0; 3]);
        move |t, lr, p, g| {
            for i in 0..3 {
                let g = if decoupled || wd == 0.0 { g[i] } else { g[i] + wd * p[i] };
                if decoupled {
                    p[i] *= 1.0 - lr * wd;
                }
                m[i] = b1 * m[i] + (1.0 - b1) * g;
                v[i] = b2 * v[i] + (1.0 - b2) * g * g;
                let m_hat = m[i] / (1.0 - b1.powi(t as i32));
                let v_hat = v[i] / (1.0 - b2.powi(t as i32));
                p[i] -= lr * m_hat / (v_hat.sqrt() + eps);
            }
            vec![m.to_vec(), v.to_vec()]
        }
    }

    #[test]
    fn adamw_follows_the_algorithm() {
        for wd in [0.0, 0.1] {
            let config = OptimConfig::AdamW { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: wd };
            against_reference(config, adam_reference(0.9, 0.999, 1e-8, wd, true));
        }
    }

    #[test]
    fn adam_follows_the_algorithm() {
        for wd in [0.0, 0.1] {
            let config = OptimConfig::Adam { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: wd };
            against_reference(config, adam_reference(0.9, 0.999, 1e-8, wd, false));
        }
    }

    #[test]
    fn sgd_follows_the_algorithm() {
        for (momentum, dampening, nesterov, wd) in [
            (0.0, 0.0, false, 0.0),
            (0.0, 0.0, false, 0.01),
            (0.9, 0.0, false, 0.0),
            (0.9, 0.2, false, 0.0),
            (0.9, 0.0, true, 0.0),
            (0.8, 0.0, true, 0.01),
            (0.9, 0.2, false, 0.01),
        ] {
            let config = OptimConfig::Sgd { momentum, dampening, weight_decay: wd, nesterov };
            let (mo, keep, wd) = (r(momentum), r(1.0 - dampening), r(wd));
            let mut buf: Option<[f64; 3]> = None;
            against_reference(config, move |_, lr, p, g| {
                let d: Vec<f64> = (0..3).map(|i| g[i] + wd * p[i]).collect();
                if momentum > 0.0 {
                    // PyTorch: the buffer starts as the gradient itself, undamped.
                    let b = match buf {
                        None => [d[0], d[1], d[2]],
                        Some(b) => [0, 1, 2].map(|i| mo * b[i] + keep * d[i]),
                    };
                    buf = Some(b);
                    for i in 0..3 {
                        p[i] -= lr * if nesterov { d[i] + mo * b[i] } else { b[i] };
                    }
                    vec![b.to_vec()]
                } else {
                    for i in 0..3 {
                        p[i] -= lr * d[i];
                    }
                    vec![]
                }
            });
        }
    }

    #[test]
    fn rmsprop_follows_the_algorithm() {
        for (momentum, centered, wd) in
            [(0.0, false, 0.0), (0.0, true, 0.0), (0.9, false, 0.0), (0.0, false, 0.01), (0.9, true, 0.01)]
        {
            let config = OptimConfig::RmsProp { alpha: 0.99, eps: 1e-8, weight_decay: wd, momentum, centered };
            let (alpha, eps, mo, wd) = (r(0.99), r(1e-8), r(momentum), r(wd));
            let (mut sq, mut ga, mut buf) = ([0.0; 3], [0.0; 3], [0.0; 3]);
            against_reference(config, move |_, lr, p, g| {
                let mut avg = [0.0; 3];
                for i in 0..3 {
                    let g = g[i] + wd * p[i];
                    sq[i] = alpha * sq[i] + (1.0 - alpha) * g * g;
                    avg[i] = sq[i];
                    if centered {
                        ga[i] = alpha * ga[i] + (1.0 - alpha) * g;
                        avg[i] -= ga[i] * ga[i];
                    }
                    // PyTorch: eps outside the square root, the buffer holds g / denominator.
                    let u = g / (avg[i].sqrt() + eps);
                    if momentum > 0.0 {
                        buf[i] = mo * buf[i] + u;
                        p[i] -= lr * buf[i];
                    } else {
                        p[i] -= lr * u;
                    }
                }
                let mut kept = vec![sq.to_vec()];
                if centered {
                    kept.push(ga.to_vec());
                }
                kept.push(avg.to_vec());
                if momentum > 0.0 {
                    kept.push(buf.to_vec());
                }
                kept
            });
        }
    }

    #[test]
    fn first_step_state_is_burns() {
        let grad = [0.5f32, -0.25];
        let mut p = [1.0f32, 2.0];
        let mut state = None;
        step(
            &OptimConfig::Sgd { momentum: 0.0, dampening: 0.0, weight_decay: 0.0, nesterov: false },
            0.1,
            &mut p,
            &grad,
            &mut state,
        );
        assert_eq!(state, Some(ParamState::Sgd { velocity: None }));

        let mut state = None;
        step(
            &OptimConfig::Sgd { momentum: 0.9, dampening: 0.5, weight_decay: 0.0, nesterov: false },
            0.1,
            &mut p,
            &grad,
            &mut state,
        );
        assert_eq!(state, Some(ParamState::Sgd { velocity: Some(grad.to_vec()) }));

        let mut state = None;
        let rms = OptimConfig::RmsProp { alpha: 0.99, eps: 1e-8, weight_decay: 0.0, momentum: 0.0, centered: false };
        step(&rms, 0.1, &mut p, &grad, &mut state);
        let Some(ParamState::RmsProp { square_avg, grad_avg: None, avg, buf: None }) = &state else {
            panic!("{state:?}")
        };
        assert_eq!(square_avg, avg);

        let mut state = None;
        let adam = OptimConfig::Adam { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 };
        step(&adam, 0.1, &mut p, &grad, &mut state);
        let Some(ParamState::Adaptive { time: 1, moment_1, .. }) = &state else { panic!("{state:?}") };
        assert_eq!(moment_1, &grad.map(|g| g * (1.0 - 0.9f32)).to_vec());
    }

    #[test]
    fn later_steps_reuse_the_state_buffers() {
        let configs = [
            OptimConfig::AdamW { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 },
            OptimConfig::Sgd { momentum: 0.9, dampening: 0.0, weight_decay: 0.0, nesterov: true },
            OptimConfig::RmsProp { alpha: 0.99, eps: 1e-8, weight_decay: 0.0, momentum: 0.9, centered: true },
        ];
        for config in configs {
            let mut p = values(3, N);
            let g = values(4, N);
            let mut state = None;
            step(&config, 0.01, &mut p, &g, &mut state);
            let ptrs = |s: &Option<ParamState>| -> Vec<*const f32> {
                match s.as_ref().unwrap() {
                    ParamState::Adaptive { moment_1, moment_2, .. } => vec![moment_1.as_ptr(), moment_2.as_ptr()],
                    ParamState::Sgd { velocity } => vec![velocity.as_ref().unwrap().as_ptr()],
                    ParamState::RmsProp { square_avg, grad_avg, avg, buf } => vec![
                        square_avg.as_ptr(),
                        grad_avg.as_ref().unwrap().as_ptr(),
                        avg.as_ptr(),
                        buf.as_ref().unwrap().as_ptr(),
                    ],
                }
            };
            let before = ptrs(&state);
            step(&config, 0.01, &mut p, &g, &mut state);
            assert_eq!(ptrs(&state), before, "{config:?}");
        }
    }

    #[test]
    #[should_panic(expected = "adam/adamw was given sgd state")]
    fn another_optimizers_state_is_refused() {
        let mut state = Some(ParamState::Sgd { velocity: None });
        let adam = OptimConfig::Adam { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 };
        step(&adam, 0.1, &mut [1.0], &[1.0], &mut state);
    }
}
