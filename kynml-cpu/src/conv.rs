//! Windows over channels-first rows: the patches of a convolution (im2col,
//! so that the convolution is one matrix product over the whole batch) and
//! max pooling, forward and backward. A row is one sample's `[channels,
//! height, width]` values (height 1 for a 1-D input), as Burn lays them out.

use crate::team::{piece, Parts, Team};

/// A window sliding over `[channels, height, width]` rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The input's `[channels, height, width]`.
    pub input: [usize; 3],
    /// `[height, width]` of the window.
    pub kernel: [usize; 2],
    /// `[height, width]` of the step between windows.
    pub stride: [usize; 2],
    /// Zeros added on each side, `[height, width]`.
    pub padding: [usize; 2],
}

impl Window {
    /// Output `[height, width]`: `(n + 2p - k) / s + 1` on each side.
    ///
    /// # Panics
    /// If the window does not fit its padded input (the spec's shape checks
    /// rule that out).
    pub fn out_hw(&self) -> [usize; 2] {
        let [_, h, w] = self.input;
        let size = |n: usize, i: usize| {
            let span = (n + 2 * self.padding[i]).checked_sub(self.kernel[i]);
            span.expect("the window is larger than its padded input") / self.stride[i] + 1
        };
        [size(h, 0), size(w, 1)]
    }

    /// Output positions per channel.
    pub fn positions(&self) -> usize {
        let [oh, ow] = self.out_hw();
        oh * ow
    }

    /// Values per patch: `channels × kernel height × kernel width`.
    pub fn patch(&self) -> usize {
        self.input[0] * self.kernel[0] * self.kernel[1]
    }

    /// Values per input row.
    pub fn input_size(&self) -> usize {
        self.input.iter().product()
    }

    /// The input index under output position `(oy, ox)`, window offset
    /// `(ky, kx)`, channel `c`; `None` over padding.
    #[inline]
    fn at(&self, c: usize, oy: usize, ox: usize, ky: usize, kx: usize) -> Option<usize> {
        let [_, h, w] = self.input;
        let y = (oy * self.stride[0] + ky).checked_sub(self.padding[0]).filter(|&y| y < h)?;
        let x = (ox * self.stride[1] + kx).checked_sub(self.padding[1]).filter(|&x| x < w)?;
        Some((c * h + y) * w + x)
    }
}

/// `f(n, row)` for every row `n` of `out` (`rows` rows of `width`), the
/// rows spread over the team in about one piece per thread.
fn per_row<T: Send>(team: &Team, rows: usize, width: usize, out: &mut [T], f: impl Fn(usize, &mut [T]) + Sync) {
    let per = rows.div_ceil(team.threads()).max(1);
    let out = Parts::new(&mut out[..rows * width]);
    team.run(rows.div_ceil(per), &|i| {
        for n in piece(i, per, rows) {
            // SAFETY: each row is its own range.
            f(n, unsafe { out.part(n * width..(n + 1) * width) });
        }
    });
}

/// For kernel column `kx`: the output columns `lo..hi` whose window column
/// lies inside the input (the others read padding), and the input column
/// under `lo`.
fn inside(win: &Window, kx: usize) -> (usize, usize, usize) {
    let (w, ow) = (win.input[2], win.out_hw()[1]);
    let (sw, pw) = (win.stride[1], win.padding[1]);
    // ox·sw + kx - pw in 0..w.
    let lo = pw.saturating_sub(kx).div_ceil(sw);
    let hi = (w + pw).saturating_sub(kx).div_ceil(sw).min(ow);
    let lo = lo.min(hi);
    (lo, hi, (lo * sw + kx).saturating_sub(pw))
}

/// The patch value `k` as `(channel, ky, kx)`.
fn split_patch(win: &Window, k: usize) -> (usize, usize, usize) {
    let [kh, kw] = win.kernel;
    (k / (kh * kw), k / kw % kh, k % kw)
}

/// The input row (`[c, y, ..]`, as an offset of its first value) that
/// kernel row `ky` reads at output row `oy`; `None` over padding.
fn input_row(win: &Window, c: usize, ky: usize, oy: usize) -> Option<usize> {
    let [_, h, w] = win.input;
    let y = (oy * win.stride[0] + ky).checked_sub(win.padding[0]).filter(|&y| y < h)?;
    Some((c * h + y) * w)
}

/// The patches of `x` (`rows` rows) as a `[patch, rows × positions]`
/// matrix: `cols[k·M + n·P + p]`, with `k = (c·kh + ky)·kw + kx` the value
/// of the patch, `M = rows·P`, `p` the output position of sample `n`;
/// zeros over the padding. In this layout a row of output positions reads
/// a run of an input row (a plain copy at stride 1), and the product with
/// the weights, `[out, patch] × cols`, is channels first.
pub(crate) fn im2col(team: &Team, win: &Window, x: &[f32], rows: usize, cols: &mut [f32]) {
    let (size, positions, patch) = (win.input_size(), win.positions(), win.patch());
    let (ow, sw) = (win.out_hw()[1], win.stride[1]);
    per_row(team, patch, rows * positions, cols, |k, out| {
        let (c, ky, kx) = split_patch(win, k);
        let (lo, hi, first) = inside(win, kx);
        for (n, out) in out.chunks_exact_mut(positions).enumerate() {
            let x = &x[n * size..(n + 1) * size];
            for (oy, out) in out.chunks_exact_mut(ow).enumerate() {
                let Some(row) = input_row(win, c, ky, oy) else {
                    out.fill(0.0);
                    continue;
                };
                out[..lo].fill(0.0);
                out[hi..].fill(0.0);
                if lo == hi {
                    continue;
                }
                let run = &x[row + first..];
                if sw == 1 {
                    out[lo..hi].copy_from_slice(&run[..hi - lo]);
                } else {
                    out[lo..hi].iter_mut().zip(run.iter().step_by(sw)).for_each(|(o, &v)| *o = v);
                }
            }
        }
    });
}

/// The gradient of `x` from the gradients of its patches (`dcols`, laid
/// out as [`im2col`] lays out the patches): each patch value's gradient is
/// added to the input value it was taken from. Overwrites `dx`.
pub(crate) fn col2im(team: &Team, win: &Window, dcols: &[f32], rows: usize, dx: &mut [f32]) {
    let (positions, patch) = (win.positions(), win.patch());
    let (m, ow, sw) = (rows * positions, win.out_hw()[1], win.stride[1]);
    per_row(team, rows, win.input_size(), dx, |n, dx| {
        dx.fill(0.0);
        for k in 0..patch {
            let (c, ky, kx) = split_patch(win, k);
            let (lo, hi, first) = inside(win, kx);
            if lo == hi {
                continue;
            }
            let g = &dcols[k * m + n * positions..][..positions];
            for (oy, g) in g.chunks_exact(ow).enumerate() {
                let Some(row) = input_row(win, c, ky, oy) else { continue };
                let (run, g) = (&mut dx[row + first..], &g[lo..hi]);
                if sw == 1 {
                    run.iter_mut().zip(g).for_each(|(d, g)| *d += g);
                } else {
                    run.iter_mut().step_by(sw).zip(g).for_each(|(d, g)| *d += g);
                }
            }
        }
    });
}

/// The product's `[channels, rows × positions]` (one row per channel) as
/// channels-first rows `[rows, channels × positions]`, plus the bias per
/// channel: runs of `positions` values copied whole.
pub(crate) fn from_channel_rows(team: &Team, zt: &[f32], rows: usize, positions: usize, bias: &[f32], z: &mut [f32]) {
    let (channels, m) = (bias.len(), rows * positions);
    per_row(team, rows, channels * positions, z, |n, z| {
        for (c, (z, &b)) in z.chunks_exact_mut(positions).zip(bias).enumerate() {
            let src = &zt[c * m + n * positions..][..positions];
            z.iter_mut().zip(src).for_each(|(z, &v)| *z = v + b);
        }
    });
}

/// The reverse of [`from_channel_rows`] (without the bias): channels-first
/// rows `[rows, channels × positions]` as `[channels, rows × positions]`.
pub(crate) fn to_channel_rows(team: &Team, z: &[f32], rows: usize, channels: usize, zt: &mut [f32]) {
    let width = z.len() / rows.max(1);
    let positions = width / channels.max(1);
    per_row(team, channels, rows * positions, zt, |c, zt| {
        for (n, zt) in zt.chunks_exact_mut(positions).enumerate() {
            zt.copy_from_slice(&z[n * width + c * positions..][..positions]);
        }
    });
}

/// The sum of each row of `g` (`out.len()` rows), in f64 over eight
/// lanes, on the team.
pub(crate) fn row_sums(team: &Team, g: &[f32], out: &mut [f32]) {
    let width = g.len() / out.len().max(1);
    let rows = out.len();
    per_row(team, rows, 1, out, |r, o| {
        let mut lanes = [0.0f64; 8];
        let row = &g[r * width..(r + 1) * width];
        let mut chunks = row.chunks_exact(8);
        for chunk in &mut chunks {
            lanes.iter_mut().zip(chunk).for_each(|(s, &v)| *s += f64::from(v));
        }
        let tail: f64 = chunks.remainder().iter().map(|&v| f64::from(v)).sum();
        o[0] = (lanes.iter().sum::<f64>() + tail) as f32;
    });
}

impl Window {
    /// The input indices of output `k` (`channel · positions + position`)'s
    /// window, padding left out.
    fn of(&self, k: usize) -> impl Iterator<Item = usize> + '_ {
        let positions = self.positions();
        let [_, ow] = self.out_hw();
        let (c, p) = (k / positions, k % positions);
        (0..self.kernel[0])
            .flat_map(move |ky| (0..self.kernel[1]).map(move |kx| (ky, kx)))
            .filter_map(move |(ky, kx)| self.at(c, p / ow, p % ow, ky, kx))
    }

    /// Outputs per row of a pooling: every channel's positions.
    fn pooled(&self) -> usize {
        self.input[0] * self.positions()
    }
}

/// Max pooling of `x` (`rows` rows, no padding): `out` per channel and
/// output position, and in `arg` the input index each maximum came from
/// (the first, on a tie; a NaN wins, the window's last NaN, as in PyTorch).
pub(crate) fn maxpool(team: &Team, win: &Window, x: &[f32], rows: usize, out: &mut [f32], arg: &mut [u32]) {
    let (size, width) = (win.input_size(), win.pooled());
    assert_eq!(win.padding, [0, 0], "max pooling takes no padding");
    let [_, h, w] = win.input;
    let [oh, ow] = win.out_hw();
    let ([kh, kw], [sh, sw]) = (win.kernel, win.stride);
    per_row(team, rows, width, arg, |n, arg| {
        let x = &x[n * size..(n + 1) * size];
        // Pooling has no padding: every window lies inside its channel. A
        // row of outputs at a time.
        for (line, at) in arg.chunks_exact_mut(ow).enumerate() {
            let (c, oy) = (line / oh, line % oh);
            let top = (c * h + oy * sh) * w;
            let fast = kw == 2 && sw == 2 && kh <= 2 && !pool_pairs(&x[top..], w, kh, top, at);
            if !fast {
                for (ox, a) in at.iter_mut().enumerate() {
                    let first = top + ox * sw;
                    let (mut b, mut i) = (x[first], first);
                    for ky in 0..kh {
                        for kx in 0..kw {
                            let v = x[first + ky * w + kx];
                            if v > b || v.is_nan() {
                                (b, i) = (v, first + ky * w + kx);
                            }
                        }
                    }
                    *a = i as u32;
                }
            }
        }
    });
    per_row(team, rows, width, out, |n, out| {
        for (o, &j) in out.iter_mut().zip(&arg[n * width..(n + 1) * width]) {
            *o = x[n * size + j as usize];
        }
    });
}

/// The common 2-wide windows at stride 2, over one or two input rows
/// (`x` from the first, rows of `w`): each output's first largest value,
/// found by selects over the whole row (which value wins is as random as
/// the data, so jumps would be mispredicted half the time). `at` gets
/// input indices (`top` is `x`'s first). Whether a NaN was met: then
/// `at` is left for the plain loop, since a NaN must win.
#[inline(always)]
fn pool_pairs(x: &[f32], w: usize, kh: usize, top: usize, at: &mut [u32]) -> bool {
    let ow = at.len();
    let first_row = &x[..2 * ow];
    let second_row = if kh == 2 { &x[w..w + 2 * ow] } else { first_row };
    let mut nan = false;
    for (ox, ((p, q), a)) in first_row.chunks_exact(2).zip(second_row.chunks_exact(2)).zip(at.iter_mut()).enumerate() {
        nan |= p[0].is_nan() | p[1].is_nan() | q[0].is_nan() | q[1].is_nan();
        // Row-major order, the first on a tie: within each row, then the
        // second row only where strictly larger.
        let (bp, ip) = if p[1] > p[0] { (p[1], 1) } else { (p[0], 0) };
        let (bq, iq) = if q[1] > q[0] { (q[1], w + 1) } else { (q[0], w) };
        let i = if bq > bp { iq } else { ip };
        *a = (top + 2 * ox + i) as u32;
    }
    nan
}

/// The gradient of max pooling's input: each output's gradient goes to the
/// input value that was its maximum. Overwrites `dx`.
pub(crate) fn maxpool_back(team: &Team, win: &Window, g: &[f32], arg: &[u32], rows: usize, dx: &mut [f32]) {
    let width = win.pooled();
    per_row(team, rows, win.input_size(), dx, |n, dx| {
        dx.fill(0.0);
        for (&g, &j) in g[n * width..(n + 1) * width].iter().zip(&arg[n * width..(n + 1) * width]) {
            dx[j as usize] += g;
        }
    });
}

/// Average pooling of `x` (`rows` rows, no padding): the mean of each
/// window, per channel.
pub(crate) fn avgpool(team: &Team, win: &Window, x: &[f32], rows: usize, out: &mut [f32]) {
    let size = win.input_size();
    let count = (win.kernel[0] * win.kernel[1]) as f32;
    per_row(team, rows, win.pooled(), out, |n, out| {
        let x = &x[n * size..(n + 1) * size];
        for (k, o) in out.iter_mut().enumerate() {
            *o = win.of(k).map(|j| x[j]).sum::<f32>() / count;
        }
    });
}

/// The gradient of average pooling's input: each output's gradient shared
/// evenly by its window. Overwrites `dx`.
pub(crate) fn avgpool_back(team: &Team, win: &Window, g: &[f32], rows: usize, dx: &mut [f32]) {
    let width = win.pooled();
    let share = 1.0 / (win.kernel[0] * win.kernel[1]) as f32;
    per_row(team, rows, win.input_size(), dx, |n, dx| {
        dx.fill(0.0);
        for (k, &g) in g[n * width..(n + 1) * width].iter().enumerate() {
            win.of(k).for_each(|j| dx[j] += g * share);
        }
    });
}

/// `[rows × positions, channels]` (one row per output position) as
/// `[rows, channels × positions]` (channels first), plus `bias` per
/// channel when given.
pub(crate) fn to_channels_first(
    team: &Team,
    zt: &[f32],
    rows: usize,
    positions: usize,
    channels: usize,
    bias: Option<&[f32]>,
    z: &mut [f32],
) {
    let width = channels * positions;
    per_row(team, rows, width, z, |n, z| {
        for (p, v) in zt[n * width..(n + 1) * width].chunks_exact(channels).enumerate() {
            for (c, &v) in v.iter().enumerate() {
                z[c * positions + p] = v + bias.map_or(0.0, |b| b[c]);
            }
        }
    });
}

/// The reverse of [`to_channels_first`] (without the bias): `[rows,
/// channels × positions]` as `[rows × positions, channels]`.
pub(crate) fn to_positions_first(team: &Team, z: &[f32], rows: usize, channels: usize, zt: &mut [f32]) {
    let width = z.len() / rows.max(1);
    let positions = width / channels.max(1);
    per_row(team, rows, width, zt, |n, zt| {
        let z = &z[n * width..(n + 1) * width];
        for c in 0..channels {
            for p in 0..positions {
                zt[p * channels + c] = z[c * positions + p];
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A direct convolution of one row, for checking the patches' product.
    fn direct(win: &Window, x: &[f32], w: &[f32], cout: usize) -> Vec<f32> {
        let positions = win.positions();
        let [_, ow] = win.out_hw();
        let mut out = vec![0.0; cout * positions];
        for o in 0..cout {
            for p in 0..positions {
                let mut s = 0.0;
                for c in 0..win.input[0] {
                    for ky in 0..win.kernel[0] {
                        for kx in 0..win.kernel[1] {
                            if let Some(j) = win.at(c, p / ow, p % ow, ky, kx) {
                                s += x[j] * w[((o * win.input[0] + c) * win.kernel[0] + ky) * win.kernel[1] + kx];
                            }
                        }
                    }
                }
                out[o * positions + p] = s;
            }
        }
        out
    }

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| (((i + seed) * 37 % 101) as f32 - 50.0) / 25.0).collect()
    }

    #[test]
    fn patches_times_the_weights_is_the_convolution() {
        let team = Team::new(2);
        // Stride 2 and 1, padding on one side, and a kernel column that
        // reads only padding at some output columns (kx = 0, padding 2).
        for win in [
            Window { input: [2, 5, 6], kernel: [3, 2], stride: [2, 1], padding: [1, 0] },
            Window { input: [2, 4, 5], kernel: [2, 3], stride: [1, 2], padding: [0, 2] },
            Window { input: [1, 1, 7], kernel: [1, 3], stride: [1, 1], padding: [0, 1] },
        ] {
            let (rows, cout) = (3, 4);
            let (positions, patch) = (win.positions(), win.patch());
            let x = values(rows * win.input_size(), 1);
            let w = values(cout * patch, 2);
            let mut cols = vec![f32::NAN; rows * positions * patch];
            im2col(&team, &win, &x, rows, &mut cols);
            let m = rows * positions;
            for n in 0..rows {
                let want = direct(&win, &x[n * win.input_size()..(n + 1) * win.input_size()], &w, cout);
                for o in 0..cout {
                    for p in 0..positions {
                        let got: f32 = (0..patch).map(|k| cols[k * m + n * positions + p] * w[o * patch + k]).sum();
                        assert!((got - want[o * positions + p]).abs() < 1e-5, "{win:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn col2im_is_the_transpose_of_im2col() {
        // <im2col(x), g> = <x, col2im(g)> for any x and g.
        let team = Team::new(2);
        let win = Window { input: [3, 4, 7], kernel: [2, 3], stride: [1, 2], padding: [1, 1] };
        let rows = 2;
        let x = values(rows * win.input_size(), 3);
        let g = values(rows * win.positions() * win.patch(), 4);
        let mut cols = vec![0.0; g.len()];
        im2col(&team, &win, &x, rows, &mut cols);
        let mut dx = vec![1.0; x.len()];
        col2im(&team, &win, &g, rows, &mut dx);
        let a: f64 = cols.iter().zip(&g).map(|(a, b)| f64::from(a * b)).sum();
        let b: f64 = x.iter().zip(&dx).map(|(a, b)| f64::from(a * b)).sum();
        assert!((a - b).abs() < 1e-3 * a.abs().max(1.0), "{a} vs {b}");
    }

    #[test]
    fn max_pooling_takes_each_windows_largest_and_sends_its_gradient_back_there() {
        let team = Team::new(2);
        let win = Window { input: [2, 4, 5], kernel: [2, 2], stride: [2, 2], padding: [0, 0] };
        let rows = 2;
        let x = values(rows * win.input_size(), 5);
        let width = win.input[0] * win.positions();
        let (mut out, mut arg) = (vec![0.0; rows * width], vec![0u32; rows * width]);
        maxpool(&team, &win, &x, rows, &mut out, &mut arg);
        let [_, ow] = win.out_hw();
        for n in 0..rows {
            let x = &x[n * win.input_size()..][..win.input_size()];
            for c in 0..2 {
                for p in 0..win.positions() {
                    let (oy, ox) = (p / ow, p % ow);
                    let window =
                        [(0, 0), (0, 1), (1, 0), (1, 1)].map(|(dy, dx)| x[(c * 4 + oy * 2 + dy) * 5 + ox * 2 + dx]);
                    let max = window.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    assert_eq!(out[n * width + c * win.positions() + p], max);
                }
            }
        }
        let g = values(rows * width, 6);
        let mut dx = vec![9.0; x.len()];
        maxpool_back(&team, &win, &g, &arg, rows, &mut dx);
        let total: f32 = dx.iter().sum();
        assert!((total - g.iter().sum::<f32>()).abs() < 1e-4);
        for (i, &j) in arg.iter().enumerate() {
            assert_eq!(dx[(i / width) * win.input_size() + j as usize], g[i]);
        }
    }

    #[test]
    fn max_pooling_takes_the_first_of_ties_and_the_last_nan() {
        let team = Team::new(1);
        // One channel of 2x4, windows of 2x2 (stride 2): a tie in the first,
        // NaNs in the second at 6 and 7: the last wins (PyTorch's `val > max || isnan(val)`).
        let win = Window { input: [1, 2, 4], kernel: [2, 2], stride: [2, 2], padding: [0, 0] };
        let x = [1.0, 3.0, 0.0, 2.0, 3.0, -1.0, f32::NAN, f32::NAN];
        let (mut out, mut arg) = (vec![0.0; 2], vec![0u32; 2]);
        maxpool(&team, &win, &x, 1, &mut out, &mut arg);
        assert_eq!(arg, [1, 7]);
        assert_eq!(out[0], 3.0);
        assert!(out[1].is_nan());
    }

    #[test]
    fn max_pooling_picks_the_windows_first_largest_on_every_path() {
        // Many ties (zeros, as after relu) and a few NaNs; windows that take
        // the paired path (2 wide at stride 2) and the plain one.
        let team = Team::new(2);
        let mut state = 7u64;
        let mut draw = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            match state >> 58 {
                0 => f32::NAN,
                1..=30 => 0.0,
                r => r as f32 / 8.0 - 4.0,
            }
        };
        for (input, kernel, stride) in [
            ([3, 6, 9], [2, 2], [2, 2]),
            ([2, 1, 9], [1, 2], [1, 2]),
            ([2, 5, 8], [2, 2], [1, 2]),
            ([2, 5, 7], [2, 3], [1, 2]),
            ([2, 5, 7], [3, 2], [2, 1]),
        ] {
            let win = Window { input, kernel, stride, padding: [0, 0] };
            let rows = 3;
            let x: Vec<f32> = (0..rows * win.input_size()).map(|_| draw()).collect();
            let width = win.pooled();
            let (mut out, mut arg) = (vec![0.0; rows * width], vec![0u32; rows * width]);
            maxpool(&team, &win, &x, rows, &mut out, &mut arg);
            for n in 0..rows {
                let x = &x[n * win.input_size()..][..win.input_size()];
                for k in 0..width {
                    // Row-major window order: the first largest; the last NaN.
                    let mut want: Option<usize> = None;
                    for j in win.of(k) {
                        let better = match want {
                            None => true,
                            Some(i) => x[j] > x[i] || x[j].is_nan(),
                        };
                        if better {
                            want = Some(j);
                        }
                    }
                    assert_eq!(arg[n * width + k] as usize, want.unwrap(), "{win:?}, output {k}");
                    let (got, x) = (out[n * width + k], x[want.unwrap()]);
                    assert!(got == x || got.is_nan() && x.is_nan());
                }
            }
        }
    }

    #[test]
    fn average_pooling_is_the_windows_mean_and_shares_its_gradient() {
        let team = Team::new(2);
        let win = Window { input: [2, 3, 4], kernel: [2, 2], stride: [1, 2], padding: [0, 0] };
        let rows = 2;
        let x = values(rows * win.input_size(), 8);
        let width = win.input[0] * win.positions();
        let mut out = vec![0.0; rows * width];
        avgpool(&team, &win, &x, rows, &mut out);
        let [_, ow] = win.out_hw();
        let k = |n: usize, c: usize, y: usize, xx: usize| x[n * win.input_size() + (c * 3 + y) * 4 + xx];
        for n in 0..rows {
            for c in 0..2 {
                for p in 0..win.positions() {
                    let (oy, ox) = (p / ow, 2 * (p % ow));
                    let mean =
                        (k(n, c, oy, ox) + k(n, c, oy, ox + 1) + k(n, c, oy + 1, ox) + k(n, c, oy + 1, ox + 1)) / 4.0;
                    assert!((out[n * width + c * win.positions() + p] - mean).abs() < 1e-6);
                }
            }
        }
        // The adjoint: <avgpool(x), g> = <x, avgpool_back(g)>.
        let g = values(rows * width, 9);
        let mut dx = vec![3.0; x.len()];
        avgpool_back(&team, &win, &g, rows, &mut dx);
        let a: f64 = out.iter().zip(&g).map(|(a, b)| f64::from(a * b)).sum();
        let b: f64 = x.iter().zip(&dx).map(|(a, b)| f64::from(a * b)).sum();
        assert!((a - b).abs() < 1e-4 * a.abs().max(1.0), "{a} vs {b}");
    }

    #[test]
    fn channels_and_positions_swap_back_and_forth() {
        let team = Team::new(2);
        let (rows, positions, channels) = (3, 5, 4);
        let zt = values(rows * positions * channels, 7);
        let mut z = vec![0.0; zt.len()];
        to_channels_first(&team, &zt, rows, positions, channels, None, &mut z);
        let mut back = vec![0.0; zt.len()];
        to_positions_first(&team, &z, rows, channels, &mut back);
        assert_eq!(back, zt);
        assert_eq!(z[2 * positions + 1], zt[channels + 2]);
    }

    #[test]
    fn channel_rows_swap_back_and_forth_and_sum() {
        let team = Team::new(2);
        let (rows, positions, channels) = (3, 5, 4);
        let zt = values(rows * positions * channels, 7);
        let bias = [0.5, -1.0, 2.0, 0.0];
        let mut z = vec![0.0; zt.len()];
        from_channel_rows(&team, &zt, rows, positions, &bias, &mut z);
        // Sample 2, channel 1, position 3 from channel 1's row.
        assert_eq!(z[2 * channels * positions + positions + 3], zt[rows * positions + 2 * positions + 3] - 1.0);
        from_channel_rows(&team, &zt, rows, positions, &[0.0; 4], &mut z);
        let mut back = vec![0.0; zt.len()];
        to_channel_rows(&team, &z, rows, channels, &mut back);
        assert_eq!(back, zt);
        let mut sums = vec![0.0; channels];
        row_sums(&team, &zt, &mut sums);
        for (c, s) in sums.iter().enumerate() {
            let want: f32 = zt[c * rows * positions..(c + 1) * rows * positions].iter().sum();
            assert!((s - want).abs() < 1e-5);
        }
    }
}
