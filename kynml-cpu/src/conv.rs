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
        let size = |n: usize, i: usize| (n + 2 * self.padding[i] - self.kernel[i]) / self.stride[i] + 1;
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

/// Where the window at output position `p` reads, per kernel row: for each
/// `(c, ky)`, `f(dst range in the patch, Some(input start) or None over
/// padding rows, first x)` with `first x` the input column of `kx = 0`
/// (negative over left padding). Shared by [`im2col`] and [`col2im`], so
/// that both walk a window alike.
#[inline(always)]
fn window_rows(win: &Window, p: usize, mut f: impl FnMut(std::ops::Range<usize>, Option<usize>, isize)) {
    let [c_in, h, w] = win.input;
    let [kh, kw] = win.kernel;
    let [_, ow] = win.out_hw();
    let (oy, ox) = (p / ow, p % ow);
    let x0 = (ox * win.stride[1]) as isize - win.padding[1] as isize;
    for c in 0..c_in {
        for ky in 0..kh {
            let y = (oy * win.stride[0] + ky) as isize - win.padding[0] as isize;
            let dst = (c * kh + ky) * kw..(c * kh + ky + 1) * kw;
            let row = (y >= 0 && (y as usize) < h).then(|| (c * h + y as usize) * w);
            f(dst, row, x0);
        }
    }
}

/// `dst = src` for the few values of a kernel row: the common widths as
/// fixed-size moves, which a call to `memmove` per kernel row would cost
/// more than.
#[inline(always)]
fn copy_short(dst: &mut [f32], src: &[f32]) {
    match dst.len() {
        1 => dst[0] = src[0],
        2 => dst.copy_from_slice(&src[..2]),
        3 => {
            let (d, s): (&mut [f32; 3], &[f32; 3]) = (dst.try_into().unwrap(), src.try_into().unwrap());
            *d = *s;
        }
        5 => {
            let (d, s): (&mut [f32; 5], &[f32; 5]) = (dst.try_into().unwrap(), src.try_into().unwrap());
            *d = *s;
        }
        _ => dst.copy_from_slice(src),
    }
}

/// The patches of `x` (`rows` rows): one patch per output position, row by
/// row, `cols[(n·P + p)·K + (c·kh + ky)·kw + kx]`, zeros over the padding.
pub(crate) fn im2col(team: &Team, win: &Window, x: &[f32], rows: usize, cols: &mut [f32]) {
    let (size, patch) = (win.input_size(), win.patch());
    let (w, kw) = (win.input[2] as isize, win.kernel[1]);
    per_row(team, rows, win.positions() * patch, cols, |n, out| {
        let x = &x[n * size..(n + 1) * size];
        for (p, patch_out) in out.chunks_exact_mut(patch).enumerate() {
            window_rows(win, p, |dst, row, x0| {
                let dst = &mut patch_out[dst];
                match row {
                    None => dst.fill(0.0),
                    // The whole kernel row inside the input: a plain copy.
                    Some(r) if x0 >= 0 && x0 + kw as isize <= w => {
                        let at = r + x0 as usize;
                        copy_short(dst, &x[at..at + kw]);
                    }
                    Some(r) => {
                        for (kx, d) in dst.iter_mut().enumerate() {
                            let xx = x0 + kx as isize;
                            *d = if xx >= 0 && xx < w { x[r + xx as usize] } else { 0.0 };
                        }
                    }
                }
            });
        }
    });
}

/// The gradient of `x` from the gradients of its patches (`dcols`, laid
/// out as [`im2col`] lays out the patches): each patch value's gradient is
/// added to the input value it was taken from. Overwrites `dx`.
pub(crate) fn col2im(team: &Team, win: &Window, dcols: &[f32], rows: usize, dx: &mut [f32]) {
    let (positions, patch) = (win.positions(), win.patch());
    let (w, kw) = (win.input[2] as isize, win.kernel[1]);
    per_row(team, rows, win.input_size(), dx, |n, dx| {
        dx.fill(0.0);
        let dcols = &dcols[n * positions * patch..(n + 1) * positions * patch];
        for (p, g) in dcols.chunks_exact(patch).enumerate() {
            window_rows(win, p, |src, row, x0| {
                let Some(r) = row else { return };
                let g = &g[src];
                if x0 >= 0 && x0 + kw as isize <= w {
                    let at = r + x0 as usize;
                    dx[at..at + kw].iter_mut().zip(g).for_each(|(d, g)| *d += g);
                } else {
                    for (kx, g) in g.iter().enumerate() {
                        let xx = x0 + kx as isize;
                        if xx >= 0 && xx < w {
                            dx[r + xx as usize] += g;
                        }
                    }
                }
            });
        }
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
/// (the first, on a tie; a NaN wins, as in PyTorch).
pub(crate) fn maxpool(team: &Team, win: &Window, x: &[f32], rows: usize, out: &mut [f32], arg: &mut [u32]) {
    let (size, width) = (win.input_size(), win.pooled());
    assert_eq!(win.padding, [0, 0], "max pooling takes no padding");
    let [_, h, w] = win.input;
    let [oh, ow] = win.out_hw();
    let ([kh, kw], [sh, sw]) = (win.kernel, win.stride);
    per_row(team, rows, width, arg, |n, arg| {
        let x = &x[n * size..(n + 1) * size];
        // Pooling has no padding: every window lies inside its channel, so
        // its indices are computed directly (rows of kw from `first`).
        for (k, a) in arg.iter_mut().enumerate() {
            let (c, oy, ox) = (k / (oh * ow), k / ow % oh, k % ow);
            let first = (c * h + oy * sh) * w + ox * sw;
            let (mut best, mut at) = (f32::NEG_INFINITY, u32::MAX);
            for ky in 0..kh {
                let start = first + ky * w;
                for (j, &v) in x[start..start + kw].iter().enumerate() {
                    if v > best || at == u32::MAX || v.is_nan() && !best.is_nan() {
                        (best, at) = (v, (start + j) as u32);
                    }
                }
            }
            *a = at;
        }
    });
    per_row(team, rows, width, out, |n, out| {
        for (o, &j) in out.iter_mut().zip(&arg[n * width..(n + 1) * width]) {
            *o = x[n * size + j as usize];
        }
    });
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
        let win = Window { input: [2, 5, 6], kernel: [3, 2], stride: [2, 1], padding: [1, 0] };
        let (rows, cout) = (3, 4);
        let x = values(rows * win.input_size(), 1);
        let w = values(cout * win.patch(), 2);
        let mut cols = vec![0.0; rows * win.positions() * win.patch()];
        im2col(&team, &win, &x, rows, &mut cols);
        for n in 0..rows {
            let want = direct(&win, &x[n * win.input_size()..(n + 1) * win.input_size()], &w, cout);
            for o in 0..cout {
                for p in 0..win.positions() {
                    let patch = &cols[(n * win.positions() + p) * win.patch()..][..win.patch()];
                    let got: f32 = patch.iter().zip(&w[o * win.patch()..]).map(|(a, b)| a * b).sum();
                    assert!((got - want[o * win.positions() + p]).abs() < 1e-5);
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
}
