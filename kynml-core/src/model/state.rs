//! The model's tensors by name, read to the host and put back: what a
//! checkpoint stores.
//!
//! Names are `{layer}.{field}` with layers numbered as in the spec's `model`
//! block (`0.weight`, `1.running_mean`, ...). Dense weights keep Burn's
//! `[d_in, d_out]` layout here; exporters transpose them for PyTorch.
//!
//! Putting tensors back keeps every parameter's [`ParamId`], because Burn's
//! optimizers key their state (Adam's moments, say) by those ids.

use burn::module::ParamId;
use burn::tensor::TensorData;
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;

use super::Model;
use crate::checkpoint::{NamedTensor, TensorData as Stored};

/// A tensor that [`Model::with_tensors`] could not use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// No stored tensor has this name.
    #[error("tensor `{name}` is missing")]
    Missing {
        /// The full name looked for, prefix included (`model.0.weight`).
        name: String,
    },
    /// The stored tensor's shape is not the one the model needs.
    #[error("tensor `{name}` has shape {found:?}, the model needs {expected:?}")]
    Shape {
        /// The tensor's full name, prefix included.
        name: String,
        /// The shape the model needs.
        expected: Vec<usize>,
        /// The shape stored.
        found: Vec<usize>,
    },
    /// The stored tensor does not hold f32 values.
    #[error("tensor `{name}` holds {found} values, the model needs f32")]
    Dtype {
        /// The tensor's full name, prefix included.
        name: String,
        /// The stored element type's safetensors name (`I64` or `U8`).
        found: &'static str,
    },
}

impl Model<Kb> {
    /// Every tensor of the model (parameters and batchnorm's running
    /// statistics) copied to the host, named with `prefix` in front.
    pub fn tensors(&self, prefix: &str) -> Vec<NamedTensor> {
        let mut out = Vec::new();
        for (i, layer) in self.layers.iter().enumerate() {
            for (field, data) in layer.state() {
                let shape = data.shape.to_vec();
                let values = data.convert::<f32>().into_vec::<f32>().unwrap_or_default();
                out.push(NamedTensor::f32(format!("{prefix}{i}.{field}"), shape, values));
            }
        }
        out
    }

    /// The trainable parameters' ids with their names (as in
    /// [`tensors`](Self::tensors), without a prefix), in layer order.
    pub fn param_names(&self) -> Vec<(ParamId, String)> {
        let mut out = Vec::new();
        for (i, layer) in self.layers.iter().enumerate() {
            out.extend(layer.params().into_iter().map(|(id, field, _)| (id, format!("{i}.{field}"))));
        }
        out
    }

    /// The trainable parameters' ids with their ranks (dense weights 2,
    /// convolution weights 4, the rest 1), in layer order.
    pub fn param_ranks(&self) -> Vec<(ParamId, usize)> {
        self.layers.iter().flat_map(|l| l.params().into_iter().map(|(id, _, rank)| (id, rank))).collect()
    }

    /// This model with every tensor replaced by the one named
    /// `{prefix}{layer}.{field}` in `stored`, on `device`. Parameter ids are
    /// kept. Fails, and gives no model, unless every tensor is present with
    /// the right shape.
    pub fn with_tensors(
        self,
        stored: &[NamedTensor],
        prefix: &str,
        device: &DispatchDevice,
    ) -> Result<Self, StateError> {
        self.with_values(|name, shape| find(stored, &format!("{prefix}{name}"), shape).map(<[f32]>::to_vec), device)
    }

    /// This model with every tensor replaced by `values(name, shape)`, the
    /// values of the tensor `{layer}.{field}` (which must hold `shape`), on
    /// `device`, a tensor at a time: each old layer is freed once its new
    /// one is made. Parameter ids are kept. Fails, and gives no model, at
    /// the first error `values` gives.
    pub fn with_values(
        self,
        mut values: impl FnMut(&str, &[usize]) -> Result<Vec<f32>, StateError>,
        device: &DispatchDevice,
    ) -> Result<Self, StateError> {
        let mut layers = Vec::with_capacity(self.layers.len());
        for (i, layer) in self.layers.into_iter().enumerate() {
            let mut get = |field: &str, shape: &[usize]| -> Result<TensorData, StateError> {
                Ok(TensorData::new(values(&format!("{i}.{field}"), shape)?, shape.to_vec()))
            };
            layers.push(layer.restore(&mut get, device)?);
        }
        Ok(Model { layers, sequence: self.sequence })
    }
}

fn find<'a>(stored: &'a [NamedTensor], name: &str, shape: &[usize]) -> Result<&'a [f32], StateError> {
    let t = stored.iter().find(|t| t.name == name).ok_or_else(|| StateError::Missing { name: name.into() })?;
    if t.shape != shape {
        return Err(StateError::Shape { name: name.into(), expected: shape.to_vec(), found: t.shape.clone() });
    }
    match &t.data {
        Stored::F32(values) => Ok(values),
        other => Err(StateError::Dtype { name: name.into(), found: other.dtype() }),
    }
}
