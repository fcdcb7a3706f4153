//! The two row-wise layers that the stack and the transformer block share:
//! a linear map with its activation, and layer normalisation.
//!
//! Each works on whole rows of its width and infers the number of rows from
//! its input, so a row may be a sample or one position of a sequence (a
//! `dense` or `layernorm` after an embedding maps every position alike, as
//! PyTorch's `nn.Linear` and `nn.LayerNorm` do on their last dimension).

use crate::gemm::{matmul, matmul_bias};
use crate::math::{self, Act};
use crate::net::{column_sums, par_zip, par_zip3, piece_len, scale_shift_grads, Param, NORM_EPS};
use crate::team::{piece, Parts, Team};

/// `out = act(x · weight + bias)`, weight `d_in × d_out` (Burn's layout).
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    pub d_in: usize,
    pub d_out: usize,
    pub act: Act,
    pub weight: Param,
    pub bias: Param,
    /// The product plus bias, before the activation.
    pub z: Vec<f32>,
    /// After the activation; unused for `Act::Linear`, whose output is `z`.
    pub out: Vec<f32>,
}

impl Linear {
    /// Weights and biases at 0: the caller sets them.
    pub fn new(d_in: usize, d_out: usize, act: Act) -> Self {
        Linear {
            d_in,
            d_out,
            act,
            weight: Param::new(d_in * d_out, 0.0),
            bias: Param::new(d_out, 0.0),
            z: Vec::new(),
            out: Vec::new(),
        }
    }

    pub fn out(&self) -> &[f32] {
        if self.act == Act::Linear {
            &self.z
        } else {
            &self.out
        }
    }

    pub fn forward(&mut self, team: &Team, input: &[f32]) {
        let (d_in, d_out, act) = (self.d_in, self.d_out, self.act);
        let rows = input.len() / d_in;
        self.z.resize(rows * d_out, 0.0);
        matmul_bias((rows, d_out, d_in), input, false, &self.weight.value, false, &self.bias.value, &mut self.z, team);
        if act != Act::Linear {
            self.out.resize(rows * d_out, 0.0);
            par_zip(team, &self.z, &mut self.out, |z, out| math::forward(act, z, out));
        }
    }

    /// The weight and bias gradients from the output gradient `gz` (taken
    /// back through the activation in place), and the input gradient into
    /// `dx` when wanted.
    pub fn backward(&mut self, team: &Team, input: &[f32], gz: &mut [f32], dx: Option<&mut [f32]>) {
        let (d_in, d_out, act) = (self.d_in, self.d_out, self.act);
        let rows = input.len() / d_in;
        let gz = &mut gz[..rows * d_out];
        if act != Act::Linear {
            par_zip3(team, &self.z, &self.out, gz, |z, out, g| math::backward(act, z, out, g));
        }
        // dW = xᵀ · dz, db = column sums of dz, dx = dz · Wᵀ.
        matmul((d_in, d_out, rows), input, true, gz, false, &mut self.weight.grad, false, team);
        column_sums(team, gz, d_out, &mut self.bias.grad);
        if let Some(dx) = dx {
            matmul((rows, d_in, d_out), gz, false, &self.weight.value, true, &mut dx[..rows * d_in], false, team);
        }
    }
}

/// Layer normalisation over each row of `width`, then scale and shift.
#[derive(Debug, Clone)]
pub(crate) struct Norm {
    pub width: usize,
    pub gamma: Param,
    pub beta: Param,
    pub x_hat: Vec<f32>,
    /// `1 / sqrt(var + eps)` per row.
    pub inv_std: Vec<f32>,
    pub out: Vec<f32>,
}

impl Norm {
    /// As PyTorch starts it: scale 1, shift 0.
    pub fn new(width: usize) -> Self {
        Norm {
            width,
            gamma: Param::new(width, 1.0),
            beta: Param::new(width, 0.0),
            x_hat: Vec::new(),
            inv_std: Vec::new(),
            out: Vec::new(),
        }
    }

    pub fn forward(&mut self, team: &Team, input: &[f32]) {
        let w = self.width;
        let rows = input.len() / w;
        self.x_hat.resize(rows * w, 0.0);
        self.out.resize(rows * w, 0.0);
        self.inv_std.resize(rows, 0.0);
        let (gamma, beta) = (&self.gamma.value, &self.beta.value);
        let len = piece_len(team, rows * w, w);
        let (x_hat, out, inv_std) =
            (Parts::new(&mut self.x_hat[..]), Parts::new(&mut self.out[..]), Parts::new(&mut self.inv_std[..]));
        team.run((rows * w).div_ceil(len), &|i| {
            let r = piece(i, len, rows * w);
            // SAFETY: each piece gets its own whole rows.
            let (xh, o, inv) =
                unsafe { (x_hat.part(r.clone()), out.part(r.clone()), inv_std.part(r.start / w..r.end / w)) };
            for (((x, xh), o), inv) in
                input[r].chunks_exact(w).zip(xh.chunks_exact_mut(w)).zip(o.chunks_exact_mut(w)).zip(inv.iter_mut())
            {
                let mean = lane_sum(x, |v| v as f64) / w as f64;
                let var = lane_sum(x, |v| (v as f64 - mean) * (v as f64 - mean)) / w as f64;
                *inv = (1.0 / (var + NORM_EPS).sqrt()) as f32;
                let mean = mean as f32;
                for (((xh, o), &v), (&g, &b)) in xh.iter_mut().zip(o.iter_mut()).zip(x).zip(gamma.iter().zip(beta)) {
                    *xh = (v - mean) * *inv;
                    *o = *xh * g + b;
                }
            }
        });
    }

    /// The scale and shift gradients from the output gradient `gy`, which
    /// becomes the input gradient in place when `input_grad`.
    pub fn backward(&mut self, team: &Team, gy: &mut [f32], input_grad: bool) {
        let w = self.width;
        let gy = &mut gy[..self.x_hat.len()];
        scale_shift_grads(team, gy, &self.x_hat, &mut self.gamma, &mut self.beta);
        if !input_grad {
            return;
        }
        let (gamma, x_hat, inv_std) = (&self.gamma.value, &self.x_hat, &self.inv_std);
        let total = gy.len();
        let len = piece_len(team, total, w);
        let g = Parts::new(gy);
        team.run(total.div_ceil(len), &|i| {
            let r = piece(i, len, total);
            // SAFETY: each piece gets its own whole rows.
            let gy = unsafe { g.part(r.clone()) };
            let inv = &inv_std[r.start / w..r.end / w];
            // Per row, with d = dy·γ: dx = (d - mean(d) - x̂ · mean(d·x̂)) / σ.
            for ((gr, xr), &inv) in gy.chunks_exact_mut(w).zip(x_hat[r].chunks_exact(w)).zip(inv) {
                let (s, sx) = lane_sums2(gr, xr, gamma);
                let (m, mx) = ((s / w as f64) as f32, (sx / w as f64) as f32);
                for ((g, &x), &gamma) in gr.iter_mut().zip(xr).zip(gamma) {
                    *g = (*g * gamma - m - x * mx) * inv;
                }
            }
        });
    }
}

/// Lanes of the row sums below: eight running sums instead of one, so that
/// the additions do not wait on each other and the compiler can put them in
/// vectors (one running sum is a chain of dependent adds, which made the
/// norms several times slower than their arithmetic needs).
const LANES: usize = 8;

/// `Σ f(v)` over `x`, in f64.
#[inline(always)]
fn lane_sum(x: &[f32], f: impl Fn(f32) -> f64) -> f64 {
    let mut acc = [0.0f64; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(v);
        }
    }
    acc.iter().sum::<f64>() + rest.iter().map(|&v| f(v)).sum::<f64>()
}

/// With `d = g · γ` per element: `(Σ d, Σ d · x)`, in f64.
#[inline(always)]
fn lane_sums2(g: &[f32], x: &[f32], gamma: &[f32]) -> (f64, f64) {
    let (mut s, mut sx) = ([0.0f64; LANES], [0.0f64; LANES]);
    let n = g.len().min(x.len()).min(gamma.len());
    let whole = n - n % LANES;
    let lanes = |v: &[f32]| -> [f32; LANES] { v.try_into().expect("a whole chunk") };
    for ((g, x), gamma) in
        g[..whole].chunks_exact(LANES).zip(x[..whole].chunks_exact(LANES)).zip(gamma[..whole].chunks_exact(LANES))
    {
        let (g, x, gamma) = (lanes(g), lanes(x), lanes(gamma));
        for i in 0..LANES {
            let d = (g[i] * gamma[i]) as f64;
            s[i] += d;
            sx[i] += d * x[i] as f64;
        }
    }
    let (mut s1, mut sx1) = (s.iter().sum::<f64>(), sx.iter().sum::<f64>());
    for i in whole..n {
        let d = (g[i] * gamma[i]) as f64;
        s1 += d;
        sx1 += d * x[i] as f64;
    }
    (s1, sx1)
}
