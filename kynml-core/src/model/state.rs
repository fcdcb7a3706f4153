//! The model's tensors by name, read to the host and put back: what a
//! checkpoint stores.
//!
//! Names are `{layer}.{field}` with layers numbered as in the spec's `model`
//! block (`0.weight`, `1.running_mean`, ...). Dense weights keep Burn's
//! `[d_in, d_out]` layout here; exporters transpose them for PyTorch.
//!
//! Putting tensors back keeps every parameter's [`ParamId`], because Burn's
//! optimizers key their state (Adam's moments, say) by those ids.

use burn::module::{Param, ParamId, RunningState};
use burn::tensor::{Tensor, TensorData};
use burn::DispatchDevice;
use kynml_backend::Backend as Kb;

use super::{Layer, Model};
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
            let mut put = |field: &str, data: TensorData| {
                let shape = data.shape.to_vec();
                let values = data.convert::<f32>().into_vec::<f32>().unwrap_or_default();
                out.push(NamedTensor::f32(format!("{prefix}{i}.{field}"), shape, values));
            };
            match layer {
                Layer::Dense(d) => {
                    put("weight", d.weight.val().into_data());
                    put("bias", d.bias.val().into_data());
                }
                Layer::BatchNorm(n) => {
                    put("weight", n.gamma.val().into_data());
                    put("bias", n.beta.val().into_data());
                    put("running_mean", n.running_mean.value_sync().into_data());
                    put("running_var", n.running_var.value_sync().into_data());
                }
                Layer::LayerNorm(n) => {
                    put("weight", n.gamma.val().into_data());
                    put("bias", n.beta.val().into_data());
                }
                Layer::Dropout(_) => {}
            }
        }
        out
    }

    /// The trainable parameters' ids with their names (as in
    /// [`tensors`](Self::tensors), without a prefix), in layer order.
    pub fn param_names(&self) -> Vec<(ParamId, String)> {
        let mut out = Vec::new();
        for (i, layer) in self.layers.iter().enumerate() {
            let (a, b) = match layer {
                Layer::Dense(d) => (d.weight.id, d.bias.id),
                Layer::BatchNorm(n) => (n.gamma.id, n.beta.id),
                Layer::LayerNorm(n) => (n.gamma.id, n.beta.id),
                Layer::Dropout(_) => continue,
            };
            out.push((a, format!("{i}.weight")));
            out.push((b, format!("{i}.bias")));
        }
        out
    }

    /// The trainable parameters' ids with their ranks (dense weights 2, the
    /// rest 1), in layer order.
    pub fn param_ranks(&self) -> Vec<(ParamId, usize)> {
        let mut out = Vec::new();
        for layer in &self.layers {
            match layer {
                Layer::Dense(d) => out.extend([(d.weight.id, 2), (d.bias.id, 1)]),
                Layer::BatchNorm(n) => out.extend([(n.gamma.id, 1), (n.beta.id, 1)]),
                Layer::LayerNorm(n) => out.extend([(n.gamma.id, 1), (n.beta.id, 1)]),
                Layer::Dropout(_) => {}
            }
        }
        out
    }

    /// This model with every tensor replaced by the one named
    /// `{prefix}{layer}.{field}` in `stored`, on `device`. Parameter ids are
    /// kept. Nothing is replaced unless every tensor is present with the
    /// right shape.
    pub fn with_tensors(
        self,
        stored: &[NamedTensor],
        prefix: &str,
        device: &DispatchDevice,
    ) -> Result<Self, StateError> {
        // Check everything first, so that an error leaves no half-loaded model.
        for t in self.tensors_shapes(prefix) {
            find(stored, &t.0, &t.1)?;
        }
        let param = |name: String, old: ParamId, shape: &[usize]| -> Result<Param<Tensor<Kb, 1>>, StateError> {
            let values = find(stored, &name, shape)?;
            let mut p = Param::from_data(TensorData::new(values.to_vec(), shape.to_vec()), device);
            p.id = old;
            Ok(p)
        };
        let running = |name: String, shape: &[usize]| -> Result<RunningState<Tensor<Kb, 1>>, StateError> {
            let values = find(stored, &name, shape)?;
            Ok(RunningState::new(Tensor::from_data(TensorData::new(values.to_vec(), shape.to_vec()), device)))
        };
        let mut layers = Vec::with_capacity(self.layers.len());
        for (i, layer) in self.layers.into_iter().enumerate() {
            let name = |field: &str| format!("{prefix}{i}.{field}");
            layers.push(match layer {
                Layer::Dense(mut d) => {
                    let [d_in, d_out] = d.weight.dims();
                    let values = find(stored, &name("weight"), &[d_in, d_out])?;
                    let mut w = Param::from_data(TensorData::new(values.to_vec(), [d_in, d_out]), device);
                    w.id = d.weight.id;
                    d.weight = w;
                    d.bias = param(name("bias"), d.bias.id, &[d_out])?;
                    Layer::Dense(d)
                }
                Layer::BatchNorm(mut n) => {
                    let f = [n.gamma.dims()[0]];
                    n.gamma = param(name("weight"), n.gamma.id, &f)?;
                    n.beta = param(name("bias"), n.beta.id, &f)?;
                    n.running_mean = running(name("running_mean"), &f)?;
                    n.running_var = running(name("running_var"), &f)?;
                    Layer::BatchNorm(n)
                }
                Layer::LayerNorm(mut n) => {
                    let f = [n.gamma.dims()[0]];
                    n.gamma = param(name("weight"), n.gamma.id, &f)?;
                    n.beta = param(name("bias"), n.beta.id, &f)?;
                    Layer::LayerNorm(n)
                }
                dropout @ Layer::Dropout(_) => dropout,
            });
        }
        Ok(Model { layers })
    }

    /// The names and shapes [`tensors`](Self::tensors) would produce,
    /// without reading anything from the device.
    fn tensors_shapes(&self, prefix: &str) -> Vec<(String, Vec<usize>)> {
        let mut out = Vec::new();
        for (i, layer) in self.layers.iter().enumerate() {
            let mut put = |field: &str, shape: Vec<usize>| out.push((format!("{prefix}{i}.{field}"), shape));
            match layer {
                Layer::Dense(d) => {
                    let [d_in, d_out] = d.weight.dims();
                    put("weight", vec![d_in, d_out]);
                    put("bias", vec![d_out]);
                }
                Layer::BatchNorm(n) => {
                    let f = n.gamma.dims()[0];
                    for field in ["weight", "bias", "running_mean", "running_var"] {
                        put(field, vec![f]);
                    }
                }
                Layer::LayerNorm(n) => {
                    let f = n.gamma.dims()[0];
                    put("weight", vec![f]);
                    put("bias", vec![f]);
                }
                Layer::Dropout(_) => {}
            }
        }
        out
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
