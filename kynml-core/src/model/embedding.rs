//! `embedding D`: each categorical column of the input (declared with
//! `categorical = [...]` in the dataset block) becomes D learned values, one
//! row of a table per category (PyTorch's `nn.Embedding(categories, D)`,
//! one per column); the numeric columns pass through, in their place.
//!
//! The input holds a categorical column as its index into the column's
//! vocabulary ([`crate::data::Vocabulary`], learned from the training rows;
//! index 0 is the value training never saw). How many categories each
//! column has is known only once the data is read: [`ModelSpec::bind`]
//! fills [`EmbeddingSpec::columns`] in, and until then the layer's output is
//! taken to be its input.
//!
//! On a text (`input seq L`), `embedding D` turns each token id into D
//! learned values (one `nn.Embedding(tokens, D, padding_idx=0)`): the L ids
//! become `[L, D]`, with padding's positions at zeros, and the layers after
//! it are told which positions are padding.
//!
//! [`ModelSpec::bind`]: crate::spec::types::ModelSpec::bind

use burn::module::{Module, Param, ParamId};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;
use serde_json::{json, Value as Json};

use super::kind::{
    count_arg, extra_args, json_size, missing, options, restore_param, Decl, Getter, Kind, LayerModule, Pass, Shape,
    Tensors,
};
use super::StateError;
use crate::export::onnx::{Attr, Graph};
use crate::rng::SplitMix64;
use crate::spec::ast::LayerLine;
use crate::spec::diagnostic::Diagnostic;

/// The arguments of an `embedding` line, and the columns it embeds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EmbeddingSpec {
    /// Values per category; at least 1.
    pub dim: usize,
    /// The categorical columns, in feature order; empty until bound to the data.
    pub columns: Vec<Column>,
    /// On a text (`input seq L`): the tokens' indices (padding, unseen, then
    /// the vocabulary); 0 until bound to the data.
    pub tokens: usize,
    /// A hash of the vocabularies' values, bound with them (0 until then):
    /// a checkpoint taken on other values of the same sizes is refused.
    #[serde(skip)]
    pub vocabulary: u64,
}

/// One embedded column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Column {
    /// Its position among the input's features (0-based).
    pub position: usize,
    /// The number of categories: the rows of its table (index 0 included).
    pub categories: usize,
}

/// One table per categorical column; the other columns are copied. On a
/// text, one table for every token position.
#[derive(Module, Debug)]
pub struct Embedding<B: Backend> {
    /// `[categories, dim]` per column, in [`positions`](Self::positions)'
    /// order; on a text, the one `[tokens, dim]` table.
    pub tables: Vec<Param<Tensor<B, 2>>>,
    /// Where each table's column is among the input's features.
    #[module(skip)]
    pub positions: Vec<usize>,
    /// Whether the input is a text's token ids.
    #[module(skip)]
    pub text: bool,
}

const FORM: &str = "embedding D";

impl EmbeddingSpec {
    /// The input's features split into runs: `Ok(range)` of numeric columns
    /// copied as they are, `Err(k)` for the `k`-th embedded column.
    fn pieces(&self, width: usize) -> Vec<Result<std::ops::Range<usize>, usize>> {
        pieces(&self.columns.iter().map(|c| c.position).collect::<Vec<_>>(), width)
    }
}

/// See [`EmbeddingSpec::pieces`].
fn pieces(positions: &[usize], width: usize) -> Vec<Result<std::ops::Range<usize>, usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (k, &p) in positions.iter().enumerate() {
        if p > start {
            out.push(Ok(start..p));
        }
        out.push(Err(k));
        start = p + 1;
    }
    if width > start {
        out.push(Ok(start..width));
    }
    out
}

impl Kind for EmbeddingSpec {
    const NAMES: &'static [&'static str] = &["embedding"];
    const FORMS: &'static [&'static str] = &[FORM];
    const FIRST: bool = true;
    type Module = Embedding<Kb>;

    fn parse(line: &LayerLine, d: &mut Vec<Diagnostic>) -> Option<Self> {
        options(line, &[], d)?;
        let Some(dim) = line.args.first() else {
            missing(line, "size", "the values per category", "embedding D`, as in `embedding 8", d);
            return None;
        };
        let dim = count_arg(dim, "the size of `embedding`", 1, d);
        extra_args(line, 1, FORM, d)?;
        Some(EmbeddingSpec { dim: dim?, columns: Vec::new(), tokens: 0, vocabulary: 0 })
    }

    fn describe(&self) -> String {
        format!("embedding {}", self.dim)
    }

    /// With the sizes bound from the data, so that a checkpoint taken on
    /// other vocabularies is refused before training, not half loaded.
    fn fingerprint(&self) -> String {
        let columns: Vec<String> = self.columns.iter().map(|c| format!("{}:{}", c.position, c.categories)).collect();
        format!(
            "embedding {} [{}] tokens {} vocabulary {:016x}",
            self.dim,
            columns.join(","),
            self.tokens,
            self.vocabulary
        )
    }

    /// Lookups, not products.
    fn multiply_adds(&self, _input: &Shape) -> u64 {
        0
    }

    fn output(&self, input: &Shape) -> Result<Shape, String> {
        if input.is_tokens() {
            return Ok(Shape::sequence(input.size(), self.dim));
        }
        let [width] = *input.dims() else {
            return Err(format!(
                "`embedding` reads the categorical columns of plain features, not {} values",
                input.written()
            ));
        };
        if let Some(c) = self.columns.iter().find(|c| c.position >= width) {
            return Err(format!("column {} is past the input's {width} features", c.position + 1));
        }
        Ok(Shape::flat(width + self.columns.len() * (self.dim - 1)))
    }

    fn tensors(&self, input: &Shape) -> Vec<Decl> {
        if input.is_tokens() {
            return vec![Decl::param("weight", vec![self.tokens, self.dim])];
        }
        (self.columns.iter().enumerate())
            .map(|(k, c)| Decl::param(format!("tables.{k}.weight"), vec![c.categories, self.dim]))
            .collect()
    }

    /// PyTorch's `nn.Embedding` initialisation, every value drawn from N(0,
    /// 1), but for the row of the unseen category, which starts at zeros (as
    /// PyTorch's `padding_idx` row does): no training row holds that index,
    /// so the row stays zeros, and a category unseen in training adds
    /// nothing rather than a random vector.
    ///
    /// On a text, the rows of padding and of an unseen token start at
    /// zeros; padding's gets no gradient (its positions are multiplied by
    /// the mask), so it stays there, as with PyTorch's `padding_idx`.
    fn native(&self, input: &Shape) -> Option<kynml_cpu::LayerConfig> {
        if input.is_tokens() {
            return Some(kynml_cpu::LayerConfig::Tokens { tokens: self.tokens, dim: self.dim });
        }
        let columns = self.columns.iter().map(|c| (c.position, c.categories)).collect();
        Some(kynml_cpu::LayerConfig::Categorical { dim: self.dim, columns })
    }

    fn init(&self, input: &Shape, rng: &mut SplitMix64, device: &DispatchDevice) -> Embedding<Kb> {
        if input.is_tokens() {
            let values: Vec<f32> =
                (0..self.tokens * self.dim).map(|i| if i < 2 * self.dim { 0.0 } else { rng.normal() as f32 }).collect();
            let table = Param::from_data(TensorData::new(values, [self.tokens, self.dim]), device);
            return Embedding { tables: vec![table], positions: Vec::new(), text: true };
        }
        let tables = (self.columns.iter())
            .map(|c| {
                let values: Vec<f32> = (0..c.categories * self.dim)
                    .map(|i| if i < self.dim { 0.0 } else { rng.normal() as f32 })
                    .collect();
                Param::from_data(TensorData::new(values, [c.categories, self.dim]), device)
            })
            .collect();
        Embedding { tables, positions: self.columns.iter().map(|c| c.position).collect(), text: false }
    }

    fn reference(&self, input: &Shape, t: Tensors, x: &[f32]) -> Vec<f32> {
        let width = input.size();
        if input.is_tokens() {
            let table = t.f32("weight");
            let rows = x.iter().flat_map(|&id| {
                let i = category(id, self.tokens);
                &table[i * self.dim..(i + 1) * self.dim]
            });
            return rows.copied().collect();
        }
        let tables: Vec<&[f32]> = (0..self.columns.len()).map(|k| t.f32(&format!("tables.{k}.weight"))).collect();
        let pieces = self.pieces(width);
        let mut y = Vec::with_capacity(x.len() / width.max(1) * self.output(input).map_or(0, |s| s.size()));
        for row in x.chunks_exact(width) {
            for piece in &pieces {
                match piece {
                    Ok(range) => y.extend_from_slice(&row[range.clone()]),
                    Err(k) => {
                        let index = category(row[self.columns[*k].position], self.columns[*k].categories);
                        y.extend_from_slice(&tables[*k][index * self.dim..(index + 1) * self.dim]);
                    }
                }
            }
        }
        y
    }

    /// Per run of columns: `Gather` on axis 1 for numeric ones; for a
    /// categorical one, its index (see [`Graph::index`]) and a `Gather` of
    /// its table's rows. Then one `Concat`.
    fn onnx(&self, g: &mut Graph, p: &str, input: &Shape, t: Tensors, x: String) -> String {
        if input.is_tokens() {
            let ids = g.index(&format!("{p}.ids"), &x, self.tokens);
            let table = g.constant(format!("{p}.weight"), vec![self.tokens, self.dim], t.f32("weight").to_vec());
            let rows = g.node(format!("{p}.rows"), "Gather", &[&table, &ids], vec![Attr::Int("axis", 0)]);
            return g.flatten(p, rows);
        }
        let mut parts = Vec::new();
        for (i, piece) in self.pieces(input.size()).into_iter().enumerate() {
            parts.push(match piece {
                Ok(range) => {
                    let columns: Vec<i64> = range.clone().map(|c| c as i64).collect();
                    let at = g.ints(format!("{p}.part{i}.columns"), vec![columns.len()], columns);
                    g.node(format!("{p}.part{i}"), "Gather", &[&x, &at], vec![Attr::Int("axis", 1)])
                }
                Err(k) => {
                    let c = self.columns[k];
                    let at = g.ints(format!("{p}.part{i}.column"), Vec::new(), vec![c.position as i64]);
                    let index = g.node(format!("{p}.part{i}.value"), "Gather", &[&x, &at], vec![Attr::Int("axis", 1)]);
                    let index = g.index(&format!("{p}.part{i}"), &index, c.categories);
                    let name = format!("tables.{k}.weight");
                    let table = g.constant(format!("{p}.{name}"), vec![c.categories, self.dim], t.f32(&name).to_vec());
                    g.node(format!("{p}.part{i}"), "Gather", &[&table, &index], vec![Attr::Int("axis", 0)])
                }
            });
        }
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        g.node(p.to_string(), "Concat", &parts, vec![Attr::Int("axis", 1)])
    }

    fn torch(&self, input: &Shape) -> Json {
        if input.is_tokens() {
            return json!({
                "embedding_dim": self.dim,
                "num_embeddings": self.tokens,
                "padding_idx": 0,
                "module": format!(
                    "nn.Embedding({}, {}, padding_idx=0) on the token ids (0 padding, 1 unseen, then the \
                     vocabulary of the sidecar's `tokens`)",
                    self.tokens, self.dim
                ),
            });
        }
        let columns: Vec<Json> =
            (self.columns.iter()).map(|c| json!({"position": c.position, "num_embeddings": c.categories})).collect();
        let listed: Vec<String> = self.columns.iter().map(|c| format!("({}, {})", c.position, c.categories)).collect();
        json!({
            "embedding_dim": self.dim,
            "columns": columns,
            "in_features": input.size(),
            "out_features": self.output(input).map_or(0, |s| s.size()),
            "module": format!(
                "kynml.CategoricalEmbedding(columns=[{}], embedding_dim={}): `tables`, an nn.ModuleList of one \
                 nn.Embedding(num_embeddings, embedding_dim) per (position, num_embeddings) column; each of those \
                 columns (a category index, 0 for a category unseen in training) is replaced, in its place, by its row \
                 of the table",
                listed.join(", "),
                self.dim
            ),
        })
    }

    fn from_json(_kind: &str, v: &Json) -> Result<Self, String> {
        let dim = json_size(v, "embedding", "embedding_dim")?;
        if let Some(tokens) = v.get("num_embeddings").and_then(Json::as_u64) {
            return Ok(EmbeddingSpec { dim, columns: Vec::new(), tokens: tokens as usize, vocabulary: 0 });
        }
        let columns = (v.get("columns").and_then(Json::as_array).ok_or("embedding without `columns`")?.iter())
            .map(|c| {
                let field = |name: &str| c.get(name).and_then(Json::as_u64).map(|n| n as usize);
                match (field("position"), field("num_embeddings")) {
                    (Some(position), Some(categories)) if categories > 0 => Ok(Column { position, categories }),
                    _ => Err("an embedding column without `position` and `num_embeddings`".to_string()),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        if dim == 0 || columns.windows(2).any(|w| w[0].position >= w[1].position) {
            return Err("embedding columns must be in increasing positions, with a size of at least 1".into());
        }
        Ok(EmbeddingSpec { dim, columns, tokens: 0, vocabulary: 0 })
    }
}

/// A category index as stored in a feature: a whole number below
/// `categories`; anything else is the unseen category, 0.
fn category(value: f32, categories: usize) -> usize {
    if value >= 0.0 && value.fract() == 0.0 && (value as usize) < categories {
        value as usize
    } else {
        0
    }
}

impl LayerModule for Embedding<Kb> {
    fn forward(&self, x: Tensor<Kb, 2>, pass: &mut Pass) -> Tensor<Kb, 2> {
        let [batch, width] = x.dims();
        if self.text {
            // Ids are whole numbers >= 0: 1 for a token, 0 for padding. (A
            // comparison would give a tensor off the autodiff graph.)
            let mask = x.clone().clamp_max(1.0);
            let dim = self.tables[0].dims()[1];
            let ids = x.int().reshape([batch * width]);
            let rows = self.tables[0].val().select(0, ids).reshape([batch, width, dim]);
            // Padding's positions give zeros, and its row no gradient.
            let y = rows * mask.clone().unsqueeze_dim::<3>(2);
            pass.mask = Some(mask);
            return y.reshape([batch, width * dim]);
        }
        let mut parts = Vec::new();
        for piece in pieces(&self.positions, width) {
            parts.push(match piece {
                Ok(range) => x.clone().slice([0..batch, range]),
                Err(k) => {
                    let p = self.positions[k];
                    let index = x.clone().slice([0..batch, p..p + 1]).int().reshape([batch]);
                    self.tables[k].val().select(0, index)
                }
            });
        }
        Tensor::cat(parts, 1)
    }

    fn state(&self) -> Vec<(String, TensorData)> {
        (self.tables.iter().enumerate()).map(|(k, t)| (self.name(k), t.val().into_data())).collect()
    }

    fn restore(mut self, get: &mut Getter, device: &DispatchDevice) -> Result<Self, StateError> {
        let names: Vec<String> = (0..self.tables.len()).map(|k| self.name(k)).collect();
        self.tables = (self.tables.into_iter().zip(&names))
            .map(|(t, name)| restore_param(t, name, get, device))
            .collect::<Result<_, _>>()?;
        Ok(self)
    }

    fn params(&self) -> Vec<(ParamId, String, usize)> {
        (self.tables.iter().enumerate()).map(|(k, t)| (t.id, self.name(k), 2)).collect()
    }
}

impl Embedding<Kb> {
    /// The field name of table `k`: `weight` on a text, else `tables.{k}.weight`.
    fn name(&self, k: usize) -> String {
        if self.text {
            "weight".into()
        } else {
            format!("tables.{k}.weight")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_keep_numeric_runs_in_place() {
        assert_eq!(pieces(&[1, 2], 5), vec![Ok(0..1), Err(0), Err(1), Ok(3..5)]);
        assert_eq!(pieces(&[0], 1), vec![Err(0)]);
        assert_eq!(pieces(&[], 3), vec![Ok(0..3)]);
    }

    #[test]
    fn the_reference_swaps_each_index_for_its_row() {
        let spec =
            EmbeddingSpec { dim: 2, columns: vec![Column { position: 1, categories: 3 }], tokens: 0, vocabulary: 0 };
        let input = Shape::flat(3);
        assert_eq!(spec.output(&input), Ok(Shape::flat(4)));
        let table = crate::model::HostTensor {
            name: "tables.0.weight".into(),
            shape: vec![3, 2],
            data: crate::export::torch::TorchTensor::F32(vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5]),
        };
        let t = Tensors::new(std::slice::from_ref(&table));
        // Index 2, then an index out of range: the unseen row.
        let y = spec.reference(&input, t, &[7.0, 2.0, 9.0, -1.0, 5.0, 3.0]);
        assert_eq!(y, [7.0, 2.0, 2.5, 9.0, -1.0, 0.0, 0.5, 3.0]);
    }
}
