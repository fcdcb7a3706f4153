//! The native engine's layers over a text's positions: token embedding,
//! learned positions, multi-head self-attention, the pre-norm transformer
//! block, and the mean over the positions that are not padding.
//!
//! A row of the batch is `L` positions of `D` values, position-major
//! (`[L, D]`), as the Burn model keeps it. The padding mask (`[rows, L]`:
//! 1 where a token is, 0 where the text is padded) comes from the token
//! ids, as in the Burn model: attention gives padding's keys no weight and
//! the mean leaves padding out.
//!
//! Attention's products are small (a head is `L × D/H`), so they are not
//! cut across threads: each (row, head) pair is one piece of a team job,
//! computed by gemm on one thread straight from the projections' buffer
//! through strided views, without copying heads out.

use crate::gemm::{product_at, View};
use crate::linear::{Linear, Norm};
use crate::math::{self, Act};
use crate::net::{column_sums, MaskSource, Param};
use crate::team::{Parts, Team};

/// Added to the scores of padding's keys (the Burn model's constant): their
/// softmax weight is 0.
const MASKED: f32 = -1e9;

/// A buffer that a job's pieces write at once, each its own elements. It
/// holds the buffer's mutable borrow, so the buffer cannot be resized or
/// read elsewhere while the job may write it.
#[derive(Clone, Copy)]
struct Shared<'a> {
    ptr: *mut f32,
    len: usize,
    _buffer: std::marker::PhantomData<&'a mut [f32]>,
}

// SAFETY: shared only inside one team job whose pieces write disjoint elements.
unsafe impl Sync for Shared<'_> {}
unsafe impl Send for Shared<'_> {}

impl<'a> Shared<'a> {
    fn new(v: &'a mut [f32]) -> Self {
        Shared { ptr: v.as_mut_ptr(), len: v.len(), _buffer: std::marker::PhantomData }
    }

    // Methods rather than fields inside a job's closure, which then takes
    // the whole `Shared` (Sync) rather than its raw pointer (not Sync).
    fn ptr(&self) -> *mut f32 {
        self.ptr
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// `masks` reborrowed for one call.
pub(crate) fn again<'b>(masks: &'b mut Option<&mut dyn MaskSource>) -> Option<&'b mut dyn MaskSource> {
    match masks {
        Some(m) => Some(&mut **m),
        None => None,
    }
}

/// `x · keep` elementwise in place, when a dropout mask was drawn.
fn times(team: &Team, x: &mut [f32], keep: &[f32]) {
    crate::net::par_zip_mut(team, x, keep, 1, |x, m| x.iter_mut().zip(m).for_each(|(x, m)| *x *= m));
}

/// Token ids (whole numbers as f32) to their rows of the table; padding
/// (id 0) gives zeros and its row no gradient.
#[derive(Debug, Clone)]
pub(crate) struct Tokens {
    pub length: usize,
    pub dim: usize,
    /// `[tokens, dim]`.
    pub table: Param,
    pub out: Vec<f32>,
}

impl Tokens {
    pub fn new(tokens: usize, length: usize, dim: usize) -> Self {
        Tokens { length, dim, table: Param::new(tokens * dim, 0.0), out: Vec::new() }
    }

    fn id(&self, v: f32) -> usize {
        let rows = self.table.value.len() / self.dim.max(1);
        assert!(v >= 0.0 && v < rows as f32, "token id {v} is outside the table of {rows}");
        v as usize
    }

    pub fn forward(&mut self, team: &Team, ids: &[f32]) {
        let d = self.dim;
        self.out.resize(ids.len() * d, 0.0);
        for &v in ids {
            self.id(v);
        }
        let table = &self.table.value;
        let out = Parts::new(&mut self.out[..]);
        let per = ids.len().div_ceil(team.threads()).max(1);
        team.run(ids.len().div_ceil(per), &|i| {
            let r = (i * per).min(ids.len())..((i + 1) * per).min(ids.len());
            // SAFETY: each piece writes the rows of its own ids.
            let o = unsafe { out.part(r.start * d..r.end * d) };
            for (o, &v) in o.chunks_exact_mut(d).zip(&ids[r]) {
                let id = v as usize;
                if id == 0 {
                    o.fill(0.0);
                } else {
                    o.copy_from_slice(&table[id * d..(id + 1) * d]);
                }
            }
        });
    }

    /// The table's gradient: each position's gradient added to its token's row.
    pub fn backward(&mut self, ids: &[f32], g: &[f32]) {
        let d = self.dim;
        self.table.grad.fill(0.0);
        for (g, &v) in g.chunks_exact(d).zip(ids) {
            let id = v as usize;
            if id != 0 {
                self.table.grad[id * d..(id + 1) * d].iter_mut().zip(g).for_each(|(t, g)| *t += g);
            }
        }
    }
}

/// One learned vector per position, added to the row.
#[derive(Debug, Clone)]
pub(crate) struct Positional {
    /// `[L · D]`.
    pub weight: Param,
    pub out: Vec<f32>,
}

impl Positional {
    pub fn new(size: usize) -> Self {
        Positional { weight: Param::new(size, 0.0), out: Vec::new() }
    }

    pub fn forward(&mut self, team: &Team, x: &[f32]) {
        let (w, size) = (&self.weight.value, self.weight.value.len());
        self.out.resize(x.len(), 0.0);
        crate::net::par_zip_rows(team, x, &mut self.out, size, |x, out| {
            for (xr, or) in x.chunks_exact(size).zip(out.chunks_exact_mut(size)) {
                or.iter_mut().zip(xr).zip(w).for_each(|((o, x), w)| *o = x + w);
            }
        });
    }

    /// The weight's gradient; the input's is the output's, unchanged.
    pub fn backward(&mut self, team: &Team, g: &[f32]) {
        let size = self.weight.value.len();
        column_sums(team, g, size, &mut self.weight.grad);
    }
}

/// The mean of each row's positions that are not padding (all of them
/// without a mask): `[L, D]` to `[D]`.
#[derive(Debug, Clone)]
pub(crate) struct Mean {
    pub length: usize,
    pub dim: usize,
    pub out: Vec<f32>,
}

impl Mean {
    fn count(&self, present: Option<&[f32]>, r: usize) -> f32 {
        present.map_or(self.length as f32, |p| p[r * self.length..(r + 1) * self.length].iter().sum::<f32>().max(1.0))
    }

    pub fn forward(&mut self, x: &[f32], present: Option<&[f32]>) {
        let (l, d) = (self.length, self.dim);
        let rows = x.len() / (l * d);
        self.out.resize(rows * d, 0.0);
        for r in 0..rows {
            let n = self.count(present, r);
            let o = &mut self.out[r * d..(r + 1) * d];
            o.fill(0.0);
            for (i, pos) in x[r * l * d..(r + 1) * l * d].chunks_exact(d).enumerate() {
                let m = present.map_or(1.0, |p| p[r * l + i]);
                if m != 0.0 {
                    o.iter_mut().zip(pos).for_each(|(o, x)| *o += x * m);
                }
            }
            o.iter_mut().for_each(|o| *o /= n);
        }
    }

    /// `dx` (`rows × L · D`) from `g` (`rows × D`).
    pub fn backward(&self, g: &[f32], present: Option<&[f32]>, dx: &mut [f32]) {
        let (l, d) = (self.length, self.dim);
        let rows = g.len() / d;
        for r in 0..rows {
            let n = self.count(present, r);
            let gr = &g[r * d..(r + 1) * d];
            for (i, pos) in dx[r * l * d..(r + 1) * l * d].chunks_exact_mut(d).enumerate() {
                let m = present.map_or(1.0, |p| p[r * l + i]) / n;
                pos.iter_mut().zip(gr).for_each(|(x, g)| *x = g * m);
            }
        }
    }
}

/// Multi-head self-attention, PyTorch's `nn.MultiheadAttention` with the
/// padding mask on the keys; `[L, D]` rows in and out.
#[derive(Debug, Clone)]
pub(crate) struct Attention {
    pub length: usize,
    pub dim: usize,
    pub heads: usize,
    /// The attention weights' dropout in training (0: none).
    pub prob: f64,
    /// Queries, keys and values side by side: `D → 3D`.
    pub in_proj: Linear,
    /// `D → D`.
    pub out_proj: Linear,
    /// Softmax of the scores, `[rows, heads, L, L]`.
    probs: Vec<f32>,
    /// The weights after dropout, and its mask (when drawn).
    dropped: Vec<f32>,
    mask: Vec<f32>,
    /// Whether the last forward pass drew a mask.
    drew: bool,
    /// The heads' outputs side by side, `[rows · L, D]`, and its gradient.
    mixed: Vec<f32>,
    dmixed: Vec<f32>,
    /// The projections' gradient, `[rows · L, 3D]`.
    dqkv: Vec<f32>,
    /// The weights' gradient, `[rows, heads, L, L]`.
    dprobs: Vec<f32>,
}

impl Attention {
    pub fn new(length: usize, dim: usize, heads: usize, prob: f64) -> Self {
        Attention {
            length,
            dim,
            heads,
            prob,
            in_proj: Linear::new(dim, 3 * dim, Act::Linear),
            out_proj: Linear::new(dim, dim, Act::Linear),
            probs: Vec::new(),
            dropped: Vec::new(),
            mask: Vec::new(),
            drew: false,
            mixed: Vec::new(),
            dmixed: Vec::new(),
            dqkv: Vec::new(),
            dprobs: Vec::new(),
        }
    }

    pub fn out(&self) -> &[f32] {
        self.out_proj.out()
    }

    pub fn params(&self) -> [&Param; 4] {
        [&self.in_proj.weight, &self.in_proj.bias, &self.out_proj.weight, &self.out_proj.bias]
    }

    pub fn params_mut(&mut self) -> [&mut Param; 4] {
        let (a, b) = (&mut self.in_proj, &mut self.out_proj);
        [&mut a.weight, &mut a.bias, &mut b.weight, &mut b.bias]
    }

    /// Values per row that the buffers of attention over `length`
    /// positions of `dim` in `heads` hold through a training step (`drops`:
    /// its weights are dropped out): the projections' outputs and
    /// gradients (`3D`, `D`, `3D`), the heads' outputs and their gradient,
    /// and the weights, their gradient, and when dropped, their mask and the
    /// kept weights (`H x L x L` each).
    pub fn values_per_row(length: usize, dim: usize, heads: usize, drops: bool) -> usize {
        let scores = heads.saturating_mul(length).saturating_mul(length);
        let per_position = length.saturating_mul(dim).saturating_mul(9);
        per_position.saturating_add(scores.saturating_mul(if drops { 4 } else { 2 }))
    }

    pub fn forward(&mut self, team: &Team, x: &[f32], present: Option<&[f32]>, masks: Option<&mut dyn MaskSource>) {
        let (l, d, h) = (self.length, self.dim, self.heads);
        let dh = d / h;
        let rows = x.len() / (l * d);
        let scale = 1.0 / (dh as f32).sqrt();
        self.in_proj.forward(team, x);
        let qkv = self.in_proj.out();
        self.probs.resize(rows * h * l * l, 0.0);
        let probs = Shared::new(&mut self.probs);
        team.run(rows * h, &|bh| {
            let (b, head) = (bh / h, bh % h);
            let q = b * l * 3 * d + head * dh;
            let s = bh * l * l;
            // SAFETY: this piece alone writes its (row, head)'s scores.
            unsafe {
                let kt = View::rows(q + d, 3 * d).t();
                product_at(
                    (l, l, dh),
                    qkv,
                    View::rows(q, 3 * d),
                    qkv,
                    kt,
                    probs.ptr(),
                    probs.len(),
                    View::rows(s, l),
                    false,
                    scale,
                );
                let scores = std::slice::from_raw_parts_mut(probs.ptr().add(s), l * l);
                if let Some(p) = present.map(|p| &p[b * l..(b + 1) * l]).filter(|p| p.contains(&0.0)) {
                    for row in scores.chunks_exact_mut(l) {
                        row.iter_mut().zip(p).filter(|(_, &m)| m == 0.0).for_each(|(v, _)| *v += MASKED);
                    }
                }
                math::softmax_rows(scores, l);
            }
        });
        self.drew = false;
        if let Some(source) = masks.filter(|_| self.prob > 0.0) {
            self.mask.resize(self.probs.len(), 0.0);
            self.dropped.resize(self.probs.len(), 0.0);
            source.dropout(team, self.prob, &self.probs, &mut self.mask, &mut self.dropped);
            self.drew = true;
        }
        let weights = if self.drew { &self.dropped } else { &self.probs };
        self.mixed.resize(rows * l * d, 0.0);
        let mixed = Shared::new(&mut self.mixed);
        team.run(rows * h, &|bh| {
            let (b, head) = (bh / h, bh % h);
            let v = b * l * 3 * d + 2 * d + head * dh;
            let o = View::rows(b * l * d + head * dh, d);
            // SAFETY: this piece alone writes its head's columns of its row's positions.
            unsafe {
                product_at(
                    (l, dh, l),
                    weights,
                    View::rows(bh * l * l, l),
                    qkv,
                    View::rows(v, 3 * d),
                    mixed.ptr(),
                    mixed.len(),
                    o,
                    false,
                    1.0,
                )
            };
        });
        self.out_proj.forward(team, &self.mixed);
    }

    /// The projections' gradients from the output gradient `g`, and the
    /// input gradient into `dx`.
    pub fn backward(&mut self, team: &Team, x: &[f32], g: &mut [f32], dx: Option<&mut [f32]>) {
        let (l, d, h) = (self.length, self.dim, self.heads);
        let dh = d / h;
        let rows = x.len() / (l * d);
        let scale = 1.0 / (dh as f32).sqrt();
        self.dmixed.resize(rows * l * d, 0.0);
        self.out_proj.backward(team, &self.mixed, g, Some(&mut self.dmixed));
        self.dqkv.resize(rows * l * 3 * d, 0.0);
        self.dprobs.resize(rows * h * l * l, 0.0);
        let (qkv, dmixed, probs) = (self.in_proj.out(), &self.dmixed, &self.probs);
        let (weights, mask) = if self.drew { (&self.dropped, Some(&self.mask)) } else { (&self.probs, None) };
        let (dqkv, dprobs) = (Shared::new(&mut self.dqkv), Shared::new(&mut self.dprobs));
        team.run(rows * h, &|bh| {
            let (b, head) = (bh / h, bh % h);
            let q = b * l * 3 * d + head * dh;
            let (k, v) = (q + d, q + 2 * d);
            let s = bh * l * l;
            let dout = View::rows(b * l * d + head * dh, d);
            // SAFETY: this piece alone writes its (row, head)'s weights'
            // gradient and its head's columns of the projections' gradient.
            unsafe {
                // dP = dO · Vᵀ, dV = Pᵀ · dO (P after dropout).
                let dp_view = View::rows(s, l);
                product_at(
                    (l, l, dh),
                    dmixed,
                    dout,
                    qkv,
                    View::rows(v, 3 * d).t(),
                    dprobs.ptr(),
                    dprobs.len(),
                    dp_view,
                    false,
                    1.0,
                );
                let pt = View::rows(s, l).t();
                product_at(
                    (l, dh, l),
                    weights,
                    pt,
                    dmixed,
                    dout,
                    dqkv.ptr(),
                    dqkv.len(),
                    View::rows(v, 3 * d),
                    false,
                    1.0,
                );
                let dp = std::slice::from_raw_parts_mut(dprobs.ptr().add(s), l * l);
                if let Some(mask) = mask {
                    dp.iter_mut().zip(&mask[s..s + l * l]).for_each(|(g, m)| *g *= m);
                }
                // Through the softmax: dS = P ⊙ (dP - Σ_j dP·P), per row.
                for (gr, pr) in dp.chunks_exact_mut(l).zip(probs[s..s + l * l].chunks_exact(l)) {
                    let dot: f32 = gr.iter().zip(pr).map(|(g, p)| g * p).sum();
                    gr.iter_mut().zip(pr).for_each(|(g, p)| *g = p * (*g - dot));
                }
                let dp: &[f32] = dp;
                // dQ = scale · dS · K, dK = scale · dSᵀ · Q.
                let ds = View::rows(0, l);
                product_at(
                    (l, dh, l),
                    dp,
                    ds,
                    qkv,
                    View::rows(k, 3 * d),
                    dqkv.ptr(),
                    dqkv.len(),
                    View::rows(q, 3 * d),
                    false,
                    scale,
                );
                product_at(
                    (l, dh, l),
                    dp,
                    ds.t(),
                    qkv,
                    View::rows(q, 3 * d),
                    dqkv.ptr(),
                    dqkv.len(),
                    View::rows(k, 3 * d),
                    false,
                    scale,
                );
            }
        });
        self.in_proj.backward(team, x, &mut self.dqkv, dx);
    }
}

/// The pre-norm transformer encoder block, PyTorch's
/// `nn.TransformerEncoderLayer(D, H, F, dropout=P, activation="gelu",
/// norm_first=True)`:
///
/// ```text
/// h = x + drop(attention(norm1(x)))     # attention weights dropped too
/// y = h + drop(linear2(drop(gelu(linear1(norm2(h))))))
/// ```
///
/// The four dropout masks are drawn in that order, as the Burn block draws them.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    pub prob: f64,
    pub attn: Attention,
    pub linear1: Linear,
    pub linear2: Linear,
    pub norm1: Norm,
    pub norm2: Norm,
    /// The three branch dropouts' masks and outputs (attention, hidden, feed-forward).
    masks: [Vec<f32>; 3],
    dropped: [Vec<f32>; 3],
    drew: bool,
    /// After the attention branch is added.
    h: Vec<f32>,
    pub out: Vec<f32>,
    /// Gradient scratch: `[rows · L, D]` twice, `[rows · L, F]`.
    gd: Vec<f32>,
    ga: Vec<f32>,
    gf: Vec<f32>,
}

impl Block {
    pub fn new(length: usize, dim: usize, heads: usize, ff: usize, prob: f64) -> Self {
        Block {
            prob,
            attn: Attention::new(length, dim, heads, prob),
            linear1: Linear::new(dim, ff, Act::Gelu),
            linear2: Linear::new(ff, dim, Act::Linear),
            norm1: Norm::new(dim),
            norm2: Norm::new(dim),
            masks: Default::default(),
            dropped: Default::default(),
            drew: false,
            h: Vec::new(),
            out: Vec::new(),
            gd: Vec::new(),
            ga: Vec::new(),
            gf: Vec::new(),
        }
    }

    /// In the Burn block's order: the attention, the linear layers, the norms.
    pub fn params(&self) -> Vec<&Param> {
        let mut out = self.attn.params().to_vec();
        out.extend([&self.linear1.weight, &self.linear1.bias, &self.linear2.weight, &self.linear2.bias]);
        out.extend([&self.norm1.gamma, &self.norm1.beta, &self.norm2.gamma, &self.norm2.beta]);
        out
    }

    pub fn params_mut(&mut self) -> Vec<&mut Param> {
        let mut out: Vec<&mut Param> = self.attn.params_mut().into_iter().collect();
        let (l1, l2) = (&mut self.linear1, &mut self.linear2);
        out.extend([&mut l1.weight, &mut l1.bias, &mut l2.weight, &mut l2.bias]);
        let (n1, n2) = (&mut self.norm1, &mut self.norm2);
        out.extend([&mut n1.gamma, &mut n1.beta, &mut n2.gamma, &mut n2.beta]);
        out
    }

    /// Values per row that the buffers of a block over `length` positions
    /// of `dim` (`heads`, feed-forward width `ff`) hold through a training
    /// step (`drops`: with dropout): the attention's, per position the two
    /// norms' (`2D + 1` each), the sum after attention and the output, the
    /// feed-forward's (`2F` through gelu, `D`), the gradient scratch (`2D +
    /// F`), and with dropout three masks and their outputs (`2 x (2D + F)`).
    pub fn values_per_row(length: usize, dim: usize, heads: usize, ff: usize, drops: bool) -> usize {
        let (d, f) = (dim, ff);
        let drop = if drops { 2 * (2 * d + f) } else { 0 };
        let per_position = (2 * d + 1) * 2 + 2 * d + (2 * f + d) + (2 * d + f) + drop;
        Attention::values_per_row(length, dim, heads, drops).saturating_add(length.saturating_mul(per_position))
    }

    pub fn forward(&mut self, team: &Team, x: &[f32], present: Option<&[f32]>, mut masks: Option<&mut dyn MaskSource>) {
        self.norm1.forward(team, x);
        self.attn.forward(team, &self.norm1.out, present, again(&mut masks));
        self.drew = self.prob > 0.0 && masks.is_some();
        let [m1, m2, m3] = &mut self.masks;
        let [d1, d2, d3] = &mut self.dropped;
        let mut drop = |x: &[f32], mask: &mut Vec<f32>, out: &mut Vec<f32>| {
            let source = again(&mut masks).expect("drew");
            mask.resize(x.len(), 0.0);
            out.resize(x.len(), 0.0);
            source.dropout(team, self.prob, x, mask, out);
        };
        let a = if self.drew {
            drop(self.attn.out(), m1, d1);
            &d1[..]
        } else {
            self.attn.out()
        };
        self.h.resize(x.len(), 0.0);
        add(team, x, a, &mut self.h);
        self.norm2.forward(team, &self.h);
        self.linear1.forward(team, &self.norm2.out);
        let f = if self.drew {
            drop(self.linear1.out(), m2, d2);
            &d2[..]
        } else {
            self.linear1.out()
        };
        self.linear2.forward(team, f);
        let f = if self.drew {
            drop(self.linear2.out(), m3, d3);
            &d3[..]
        } else {
            self.linear2.out()
        };
        self.out.resize(x.len(), 0.0);
        add(team, &self.h, f, &mut self.out);
    }

    /// Every parameter's gradient from the output gradient `g`, which
    /// becomes the input gradient in place.
    pub fn backward(&mut self, team: &Team, x: &[f32], g: &mut [f32]) {
        let n = x.len();
        let (gd, ga, gf) = (&mut self.gd, &mut self.ga, &mut self.gf);
        gd.resize(n, 0.0);
        ga.resize(n, 0.0);
        gf.resize(n / self.linear1.d_in * self.linear1.d_out, 0.0);
        let g = &mut g[..n];
        // The feed-forward branch.
        gd.copy_from_slice(g);
        if self.drew {
            times(team, gd, &self.masks[2]);
        }
        let f1 = if self.drew { &self.dropped[1][..] } else { self.linear1.out() };
        self.linear2.backward(team, f1, gd, Some(gf));
        if self.drew {
            times(team, gf, &self.masks[1]);
        }
        self.linear1.backward(team, &self.norm2.out, gf, Some(gd));
        self.norm2.backward(team, gd, true);
        // g is now the gradient at h, through both of its uses.
        accumulate(team, g, gd);
        // The attention branch.
        gd.copy_from_slice(g);
        if self.drew {
            times(team, gd, &self.masks[0]);
        }
        self.attn.backward(team, &self.norm1.out, gd, Some(ga));
        self.norm1.backward(team, ga, true);
        accumulate(team, g, ga);
    }
}

/// `out = a + b`.
fn add(team: &Team, a: &[f32], b: &[f32], out: &mut [f32]) {
    crate::net::par_zip3(team, a, b, out, |a, b, o| {
        o.iter_mut().zip(a.iter().zip(b)).for_each(|(o, (a, b))| *o = a + b)
    });
}

/// `g += more`.
fn accumulate(team: &Team, g: &mut [f32], more: &[f32]) {
    crate::net::par_zip_mut(team, g, more, 1, |g, m| g.iter_mut().zip(m).for_each(|(g, m)| *g += m));
}
