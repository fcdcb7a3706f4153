//! Row-major matrix products through the `gemm` crate.

use gemm::Parallelism;

use crate::team::Team;

/// Products smaller than this many multiply-adds run on one thread: below
/// it, waking the pool costs more than the split saves.
const PARALLEL_MIN: usize = 32 * 32 * 32;

/// `c = a · b`, or `c += a · b` when `accumulate`, for row-major `c` of
/// `m × n`. `a` is `m × k`, stored row-major, or stored as its transpose
/// (`k × m`) when `a_t`; likewise `b` is `k × n`, or stored `n × k` when `b_t`.
///
/// Large products are cut into one block of `c` per thread, along its
/// longer side, each computed by gemm on one thread: for the sizes of a
/// training step (a few hundred on each side) gemm's own threading keeps
/// to one core, which this measured at no speedup on two. The blocks run
/// on `team`, whose threads stay awake between a step's products.
///
/// # Panics
/// If a slice is shorter than its shape says.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul(
    (m, n, k): (usize, usize, usize),
    a: &[f32],
    a_t: bool,
    b: &[f32],
    b_t: bool,
    c: &mut [f32],
    accumulate: bool,
    team: &Team,
) {
    let start = if accumulate { Start::Keep } else { Start::Zero };
    product((m, n, k), a, a_t, b, b_t, c, start, team)
}

/// `c = bias + a · b`, with `bias` (of `n`) added to every row of `c`: a
/// linear layer's forward pass. Shapes and layouts as in [`matmul`].
///
/// Each thread computes its own block of `c` a slab of rows at a time, each
/// slab small enough to stay in the core's cache, and adds the bias to the
/// slab before the next. Filling all of `c` with the bias first, on one
/// thread, then adding the product, cost 4% of a transformer's step: the
/// fill waited on memory, where the product's own stores overlap its arithmetic.
///
/// # Panics
/// If a slice is shorter than its shape says, or `bias` is not `n` long.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_bias(
    (m, n, k): (usize, usize, usize),
    a: &[f32],
    a_t: bool,
    b: &[f32],
    b_t: bool,
    bias: &[f32],
    c: &mut [f32],
    team: &Team,
) {
    assert_eq!(bias.len(), n, "matmul_bias: the bias is not a row of c");
    product((m, n, k), a, a_t, b, b_t, c, Start::Bias(bias), team)
}

/// What `c` holds before the product is added to it.
#[derive(Clone, Copy)]
enum Start<'a> {
    Zero,
    /// Its own values (`c += a · b`).
    Keep,
    /// This row in every row.
    Bias(&'a [f32]),
}

/// The most elements of `c` that a slab of rows may hold under
/// [`Start::Bias`]: 256 KiB of f32, well inside a core's L2.
const SLAB: usize = 64 * 1024;

#[allow(clippy::too_many_arguments)]
fn product(
    (m, n, k): (usize, usize, usize),
    a: &[f32],
    a_t: bool,
    b: &[f32],
    b_t: bool,
    c: &mut [f32],
    start: Start,
    team: &Team,
) {
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n, "matmul: a slice is shorter than its shape");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        match start {
            Start::Zero => c[..m * n].fill(0.0),
            Start::Keep => {}
            Start::Bias(bias) => c[..m * n].chunks_exact_mut(n).for_each(|row| row.copy_from_slice(bias)),
        }
        return;
    }
    let op = Product {
        k,
        n,
        a: a.as_ptr(),
        a_strides: if a_t { (m as isize, 1) } else { (1, k as isize) },
        b: b.as_ptr(),
        b_strides: if b_t { (k as isize, 1) } else { (1, n as isize) },
        c: c.as_mut_ptr(),
        start,
    };
    let threads = team.threads();
    if m * n * k < PARALLEL_MIN || threads < 2 {
        // SAFETY: the whole product, within the bounds asserted above.
        unsafe { op.block(0..m, 0..n) };
        return;
    }
    // Blocks of whole 16-row (or column) panels, the microkernel's height.
    let split_rows = m >= n;
    let side = if split_rows { m } else { n };
    let per = side.div_ceil(threads).div_ceil(16) * 16;
    team.run(side.div_ceil(per), &|i| {
        let r = i * per..((i + 1) * per).min(side);
        // SAFETY: the blocks are disjoint row (or column) ranges of c, so no
        // two threads write the same element; each is within the bounds
        // asserted above; a and b are only read.
        unsafe {
            if split_rows {
                op.block(r, 0..n)
            } else {
                op.block(0..m, r)
            }
        }
    });
}

/// Where a matrix lies inside a slice: element `(i, j)` at
/// `offset + i * row + j * col`. A head's queries inside the
/// attention's `[positions, 3 · width]` projections, or a transpose, are
/// views of this kind, taken without a copy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View {
    pub offset: usize,
    pub row: usize,
    pub col: usize,
}

impl View {
    /// Row-major rows of `width`, from `offset`.
    pub fn rows(offset: usize, width: usize) -> Self {
        View { offset, row: width, col: 1 }
    }

    /// This view transposed.
    pub fn t(self) -> Self {
        View { offset: self.offset, row: self.col, col: self.row }
    }

    /// One past the last index of an `m × n` matrix in this view.
    fn end(&self, m: usize, n: usize) -> usize {
        if m == 0 || n == 0 {
            return self.offset;
        }
        self.offset + (m - 1) * self.row + (n - 1) * self.col + 1
    }
}

/// `c = scale · a · b`, or `c += scale · a · b` when `accumulate`, on this
/// thread: `a` is `m × k`, `b` is `k × n` and `c` is `m × n`, each a
/// [`View`] into its slice. For the many small products of attention, which
/// run one per piece of a team's job.
///
/// # Safety
/// `c` must be valid for writes of `c_len` elements, and no other thread
/// may read or write the elements of `c` that the view covers while this
/// runs.
///
/// # Panics
/// If a view reaches past its slice.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn product_at(
    (m, n, k): (usize, usize, usize),
    a: &[f32],
    av: View,
    b: &[f32],
    bv: View,
    c: *mut f32,
    c_len: usize,
    cv: View,
    accumulate: bool,
    scale: f32,
) {
    assert!(
        av.end(m, k) <= a.len() && bv.end(k, n) <= b.len() && cv.end(m, n) <= c_len,
        "product_at: a view reaches past its slice"
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                for j in 0..n {
                    *c.add(cv.offset + i * cv.row + j * cv.col) = 0.0;
                }
            }
        }
        return;
    }
    gemm::gemm(
        m,
        n,
        k,
        c.add(cv.offset),
        cv.col as isize,
        cv.row as isize,
        accumulate,
        a.as_ptr().add(av.offset),
        av.col as isize,
        av.row as isize,
        b.as_ptr().add(bv.offset),
        bv.col as isize,
        bv.row as isize,
        1.0,
        scale,
        false,
        false,
        false,
        Parallelism::None,
    );
}

/// One product's operands as raw parts, so that threads can each compute a block of `c`.
#[derive(Clone, Copy)]
struct Product<'a> {
    k: usize,
    n: usize,
    a: *const f32,
    /// (column stride, row stride) of `a` as an `m × k` matrix.
    a_strides: (isize, isize),
    b: *const f32,
    /// (column stride, row stride) of `b` as a `k × n` matrix.
    b_strides: (isize, isize),
    c: *mut f32,
    start: Start<'a>,
}

// SAFETY: a Product is only used inside `product`, while the slices it points
// into are borrowed there; threads write disjoint blocks of `c`.
unsafe impl Send for Product<'_> {}
unsafe impl Sync for Product<'_> {}

impl Product<'_> {
    /// Rows `rows` and columns `cols` of `c`, on this thread.
    ///
    /// # Safety
    /// The ranges must lie within `m × n`, the pointers must be valid for
    /// the shapes `matmul` asserted, and no other thread may write this block.
    unsafe fn block(&self, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>) {
        let Start::Bias(bias) = self.start else {
            return self.gemm(rows, cols, matches!(self.start, Start::Keep));
        };
        // Slabs of whole 16-row panels: the product written into each,
        // then the bias added while the slab is still in cache.
        let slab = (SLAB / cols.len().max(1)).max(16) / 16 * 16;
        let bias = &bias[cols.clone()];
        let mut i = rows.start;
        while i < rows.end {
            let slab_rows = i..(i + slab).min(rows.end);
            i = slab_rows.end;
            self.gemm(slab_rows.clone(), cols.clone(), false);
            for row in slab_rows {
                let at = self.c.add(row * self.n + cols.start);
                let row = std::slice::from_raw_parts_mut(at, cols.len());
                row.iter_mut().zip(bias).for_each(|(c, b)| *c += b);
            }
        }
    }

    /// Rows `rows` and columns `cols` of `c`: `c = a · b`, or `c += a · b`
    /// when `keep`.
    ///
    /// # Safety
    /// As [`Product::block`].
    unsafe fn gemm(&self, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>, keep: bool) {
        let (a_cs, a_rs) = self.a_strides;
        let (b_cs, b_rs) = self.b_strides;
        let (i0, j0) = (rows.start as isize, cols.start as isize);
        gemm::gemm(
            rows.len(),
            cols.len(),
            self.k,
            self.c.offset(i0 * self.n as isize + j0),
            1,
            self.n as isize,
            keep,
            self.a.offset(i0 * a_rs),
            a_cs,
            a_rs,
            self.b.offset(j0 * b_cs),
            b_cs,
            b_rs,
            1.0,
            1.0,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(m: usize, n: usize, k: usize, a: &[f32], a_t: bool, b: &[f32], b_t: bool) -> Vec<f32> {
        let mut c = vec![0.0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                for p in 0..k {
                    let av = if a_t { a[p * m + i] } else { a[i * k + p] };
                    let bv = if b_t { b[j * k + p] } else { b[p * n + j] };
                    c[i * n + j] += av as f64 * bv as f64;
                }
            }
        }
        c.into_iter().map(|v| v as f32).collect()
    }

    #[test]
    fn every_layout_matches_a_naive_product() {
        for (m, n, k) in [(67, 45, 129), (45, 67, 129), (300, 20, 64), (20, 300, 64)] {
            check(m, n, k);
        }
    }

    #[test]
    fn strided_views_match_a_naive_product() {
        // a: 5 × 3 inside rows of 7 from offset 2; b: 3 × 4 read transposed
        // from a 4 × 3 block; c: 5 × 4 inside rows of 9 from offset 1.
        let (m, n, k) = (5, 4, 3);
        let a: Vec<f32> = (0..40).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
        let b: Vec<f32> = (0..12).map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0).collect();
        let (av, bv, cv) = (View::rows(2, 7), View::rows(0, 3).t(), View::rows(1, 9));
        let mut c = vec![7.0f32; 50];
        let len = c.len();
        // SAFETY: c is this thread's own.
        unsafe { product_at((m, n, k), &a, av, &b, bv, c.as_mut_ptr(), len, cv, false, 0.5) };
        for i in 0..m {
            for j in 0..n {
                let want: f32 = (0..k).map(|p| a[2 + i * 7 + p] * b[j * 3 + p]).sum::<f32>() * 0.5;
                assert!((c[1 + i * 9 + j] - want).abs() < 1e-5, "({i}, {j}): {} vs {want}", c[1 + i * 9 + j]);
            }
        }
        // What lies outside the view is untouched.
        assert_eq!(c[0], 7.0);
        assert_eq!(c[1 + 4], 7.0);
    }

    #[test]
    fn a_bias_start_matches_a_naive_product_plus_bias() {
        // Shapes that cut each thread's block into several slabs, split by
        // rows and by columns, one below the threading threshold, and k = 0.
        for (m, n, k) in [(2000, 130, 40), (40, 3000, 24), (67, 45, 129), (9, 7, 5), (33, 17, 0)] {
            let a: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
            let b: Vec<f32> = (0..k * n).map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0).collect();
            let bias: Vec<f32> = (0..n).map(|j| (j % 11) as f32 - 5.0).collect();
            for (a_t, b_t) in [(false, false), (true, false), (false, true)] {
                let want = naive(m, n, k, &a, a_t, &b, b_t);
                for threads in [1, 2, 3] {
                    let team = Team::new(threads);
                    let mut c = vec![f32::NAN; m * n];
                    matmul_bias((m, n, k), &a, a_t, &b, b_t, &bias, &mut c, &team);
                    for (i, (x, y)) in c.iter().zip(&want).enumerate() {
                        let y = y + bias[i % n];
                        assert!(
                            (x - y).abs() < 1e-4,
                            "{m}x{n}x{k} a_t {a_t} b_t {b_t} on {threads}: {x} vs {y} at {i}"
                        );
                    }
                }
            }
        }
    }

    fn check(m: usize, n: usize, k: usize) {
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0).collect();
        for (a_t, b_t) in [(false, false), (true, false), (false, true), (true, true)] {
            let want = naive(m, n, k, &a, a_t, &b, b_t);
            let mut c = vec![1.0f32; m * n];
            let team = Team::new(2);
            matmul((m, n, k), &a, a_t, &b, b_t, &mut c, false, &team);
            for (x, y) in c.iter().zip(&want) {
                assert!((x - y).abs() < 1e-4, "a_t {a_t} b_t {b_t}: {x} vs {y}");
            }
            matmul((m, n, k), &a, a_t, &b, b_t, &mut c, true, &team);
            for (x, y) in c.iter().zip(&want) {
                assert!((x - 2.0 * y).abs() < 2e-4, "accumulate, a_t {a_t} b_t {b_t}: {x} vs {}", 2.0 * y);
            }
        }
    }
}
