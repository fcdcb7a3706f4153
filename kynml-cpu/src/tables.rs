//! Embedding tables for categorical columns: each such column's index is
//! swapped for its row of the column's table, the other columns copied in
//! place, as the Burn model's `embedding` does on plain features.

use crate::net::Param;

/// One table per categorical column, `[categories, dim]`.
#[derive(Debug, Clone)]
pub(crate) struct Tables {
    /// Values per category.
    pub dim: usize,
    /// The input's width.
    pub input: usize,
    /// Each categorical column's position among the input's features, ascending.
    pub positions: Vec<usize>,
    pub tables: Vec<Param>,
    pub out: Vec<f32>,
}

impl Tables {
    pub fn new(input: usize, dim: usize, columns: &[(usize, usize)]) -> Self {
        Tables {
            dim,
            input,
            positions: columns.iter().map(|c| c.0).collect(),
            tables: columns.iter().map(|&(_, categories)| Param::new(categories * dim, 0.0)).collect(),
            out: Vec::new(),
        }
    }

    /// Values per output row.
    pub fn width(&self) -> usize {
        self.input + self.positions.len() * (self.dim - 1)
    }

    /// The row of table `k` that `v` picks: an index outside the table (a
    /// category never seen in training) reads row 0, as the export does.
    fn row(&self, k: usize, v: f32) -> usize {
        let rows = self.tables[k].value.len() / self.dim;
        if v >= 0.0 && (v as usize) < rows {
            v as usize
        } else {
            0
        }
    }

    /// Calls `f(k, input value, output start)` for each categorical column
    /// of a row, and `copy(input range, output start)` for each run of
    /// other columns.
    fn walk(&self, mut copy: impl FnMut(std::ops::Range<usize>, usize), mut f: impl FnMut(usize, usize, usize)) {
        let (mut start, mut at) = (0, 0);
        for (k, &p) in self.positions.iter().enumerate() {
            if p > start {
                copy(start..p, at);
                at += p - start;
            }
            f(k, p, at);
            at += self.dim;
            start = p + 1;
        }
        if self.input > start {
            copy(start..self.input, at);
        }
    }

    pub fn forward(&mut self, x: &[f32]) {
        let (w, d) = (self.width(), self.dim);
        let rows = x.len() / self.input;
        let mut out = std::mem::take(&mut self.out);
        out.resize(rows * w, 0.0);
        for (xr, or) in x.chunks_exact(self.input).zip(out.chunks_exact_mut(w)) {
            let mut picks = Vec::with_capacity(self.positions.len());
            self.walk(|r, at| or[at..at + r.len()].copy_from_slice(&xr[r]), |k, p, at| picks.push((k, p, at)));
            for (k, p, at) in picks {
                let row = self.row(k, xr[p]);
                or[at..at + d].copy_from_slice(&self.tables[k].value[row * d..(row + 1) * d]);
            }
        }
        self.out = out;
    }

    /// The tables' gradients: each row's gradient added to the row it picked.
    pub fn backward(&mut self, x: &[f32], g: &[f32]) {
        let (w, d) = (self.width(), self.dim);
        for t in &mut self.tables {
            t.grad.fill(0.0);
        }
        for (xr, gr) in x.chunks_exact(self.input).zip(g.chunks_exact(w)) {
            let mut picks = Vec::with_capacity(self.positions.len());
            self.walk(|_, _| {}, |k, p, at| picks.push((k, p, at)));
            for (k, p, at) in picks {
                let row = self.row(k, xr[p]);
                let grad = &mut self.tables[k].grad[row * d..(row + 1) * d];
                grad.iter_mut().zip(&gr[at..at + d]).for_each(|(t, g)| *t += g);
            }
        }
    }
}
