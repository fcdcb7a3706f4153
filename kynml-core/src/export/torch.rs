//! PyTorch-compatible export: the weights as a state dict ([`state_dict`], written as
//! safetensors by [`to_safetensors`]) and a JSON sidecar ([`sidecar_json`]) describing how to
//! rebuild the `nn.Sequential` that loads them.
//!
//! Module index i is the index of the layer in [`ExportModel::layers`]. Activations are folded
//! into their dense or convolution layer, so they are not modules of their own: the spec
//! `dense 512 gelu; batchnorm; dropout; dense 1` gives `0.weight`, `0.bias`, `1.weight` (gamma),
//! `1.bias` (beta), `1.running_mean`, `1.running_var`, `1.num_batches_tracked`, `3.weight` and
//! `3.bias`.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::checkpoint::TensorView;

use super::graph::{ExportModel, Head};

/// `format` of the sidecar JSON.
pub const SIDECAR_FORMAT: &str = "kynml-pytorch";
/// `format_version` of the sidecar JSON.
pub const SIDECAR_VERSION: u32 = 1;

/// The values of one state-dict tensor: float32 (weights, biases, norm
/// parameters, running statistics) or int64 (BatchNorm's
/// `num_batches_tracked`), stored as a checkpoint stores them.
pub use crate::checkpoint::TensorData as TorchTensor;

/// One state-dict entry: name, shape (row-major; `[]` is a scalar holding
/// one value), values, borrowed from the model.
pub type StateEntry<'a> = TensorView<'a>;

/// The model's weights named as the state dict of the `nn.Sequential` described by
/// [`sidecar_json`], in layer order: dense i gives `i.weight` `[out, in]` and `i.bias` `[out]`;
/// batchnorm i gives `i.weight` (gamma), `i.bias` (beta), `i.running_mean`, `i.running_var`
/// (all `[features]`) and `i.num_batches_tracked` (int64 scalar, shape `[]`); layernorm i gives
/// `i.weight` and `i.bias`; dropout gives nothing. The normalizer is not a module: its mean and
/// std are in the sidecar. The shapes come from the layers' declared sizes, so validate the
/// model first ([`ExportModel::validate`]) to be sure they match the data. The values are
/// the model's own, borrowed: nothing is copied.
pub fn state_dict(model: &ExportModel) -> Vec<StateEntry<'_>> {
    let mut out = Vec::new();
    for (i, layer) in model.layers.iter().enumerate() {
        out.extend(layer.tensors.iter().map(|t| TensorView {
            name: format!("{i}.{}", t.name).into(),
            shape: &t.shape,
            data: &t.data,
        }));
    }
    out
}

/// The header of the safetensors file of state-dict entries (the
/// checkpoint format's writer): an 8-byte little-endian header length, a
/// JSON header (keys sorted, `__metadata__` = `{"format": "pt"}`, each
/// tensor's `dtype`, `shape` and `data_offsets`) padded with spaces to a
/// multiple of 8 bytes; and the entries in name order, whose raw
/// little-endian bytes follow it ([`write_safetensors`]). Fails on a
/// repeated name, a name starting with `__`, or values that do not fill
/// their shape.
pub fn plan_safetensors<'a>(mut entries: Vec<StateEntry<'a>>) -> Result<(Vec<u8>, Vec<StateEntry<'a>>), String> {
    if let Some(t) = entries.iter().find(|t| t.name.starts_with("__")) {
        return Err(format!("tensor name '{}' starts with '__', which safetensors reserves", t.name));
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let metadata = BTreeMap::from([("format".to_string(), "pt".to_string())]);
    let header = crate::checkpoint::plan_safetensors(&entries, &metadata).map_err(|e| e.to_string())?;
    Ok((header, entries))
}

/// Writes the safetensors file planned by [`plan_safetensors`] to `out`, a
/// piece at a time; returns its length and CRC-32C.
pub fn write_safetensors(
    out: &mut (impl std::io::Write + ?Sized),
    header: &[u8],
    entries: &[StateEntry],
) -> std::io::Result<(u64, u32)> {
    crate::checkpoint::stream_safetensors(out, header, entries)
}

/// The safetensors file of state-dict entries, in memory (see
/// [`plan_safetensors`]).
pub fn to_safetensors(entries: Vec<StateEntry>) -> Result<Vec<u8>, String> {
    let (header, entries) = plan_safetensors(entries)?;
    let mut out = Vec::new();
    write_safetensors(&mut out, &header, &entries).map_err(|e| e.to_string())?;
    Ok(out)
}

/// The JSON sidecar next to the weights: everything a PyTorch user needs to rebuild the model
/// and load the state dict of [`state_dict`].
///
/// Fields: `format` ([`SIDECAR_FORMAT`]), `format_version`, `name`, `input` (feature count),
/// `output` (output units), `feature_names`, `target`, `normalizer` (`{"mean": [...], "std":
/// [...]}` or null: apply `x = (x - mean) / std` to raw rows first), `categories` (one
/// `{column, position, values}` per categorical feature: such a feature holds `1 + i` for
/// `values[i]` and 0 for a value not in `values`, before the normalizer, which leaves it as
/// it is), `input_layout` (`tokens` for a text model, whose input is the token ids of `tokens`:
/// `{column, length, tokens}`, where token `tokens[i]` has id `i + 2`, 0 is padding and 1 a
/// token not in `tokens`; a text is split at whitespace and cut or padded to `length`;
/// `sequence` for a sequence model, whose input is `length` positions of one value from each
/// of the `sequence` columns `{columns, length}` (position-major: `x[p * C + c]`), NaN where
/// a sequence is shorter: after the normalizer, a position whose values are NaN is padding
/// (the mask `(x[:, :, 0] == x[:, :, 0])`), and its values read as 0; else `values`),
/// `padding` (for `tokens` and `sequence`: which positions are padding, as a PyTorch
/// expression, for the layers' `padding` masks; null for `values`),
/// `layers` (one object per
/// module, in order, with `index`, `kind` and `module`, the PyTorch module(s) it stands for;
/// dense: `in_features`, `out_features`, `activation` (`linear`, `relu`, `gelu` (exact),
/// `tanh`, `sigmoid`, `silu`, `leaky_relu`) and for leaky_relu `negative_slope`; batchnorm:
/// `num_features`, `eps`; layernorm: `normalized_shape`, `eps`; dropout: `p`), `head`
/// (`kind`: `regression` (outputs are the predictions), `softmax` (probabilities =
/// softmax(outputs, dim=-1)) or `sigmoid` (one logit; `p(class_names[1]) = sigmoid(logit)`);
/// `class_names`), `tensors` (name, shape and dtype of each state-dict entry), and, added
/// by [`super::write`], `weights` (`{description, files}`: a checksum of the rest, and
/// `{bytes, crc32c}` of each weights file it was written with, so that a sidecar is never
/// read with another model's weights).
///
/// Rebuilding in PyTorch: `scripts/rebuild_in_pytorch.py` builds the
/// `nn.Sequential` from the sidecar and loads the weights (its `rebuild`
/// function is the part to copy). Each layer is the PyTorch module its
/// `module` field names, with its activation folded in (so that a dense or
/// convolution layer owns `i.weight` and `i.bias`); values travel flat
/// between modules, and a layer with an `input_shape` reshapes them first and
/// flattens its output, as KynML's layers do.
pub fn sidecar_json(model: &ExportModel) -> Value {
    let shapes = model.shapes().unwrap_or_default();
    let mut layers = Vec::with_capacity(model.layers.len());
    for (i, (layer, shape)) in model.layers.iter().zip(&shapes).enumerate() {
        let mut entry = json!({"index": i, "kind": layer.kind()});
        if shape.rank() > 1 {
            entry["input_shape"] = json!(shape.dims());
        }
        if let (Value::Object(entry), Value::Object(fields)) = (&mut entry, layer.spec.torch(shape)) {
            entry.extend(fields);
        }
        layers.push(entry);
    }
    let width = model.output();
    let normalizer = match &model.normalizer {
        Some((mean, std)) => json!({"mean": mean, "std": std}),
        None => Value::Null,
    };
    let head = match &model.head {
        Head::Regression => json!({"kind": "regression", "class_names": []}),
        Head::Softmax { class_names } => {
            json!({"kind": "softmax", "class_names": class_names, "probabilities": "softmax(output, dim=-1)"})
        }
        Head::Sigmoid { class_names } => json!({
            "kind": "sigmoid",
            "class_names": class_names,
            "probabilities": "[1 - sigmoid(output), sigmoid(output)]",
        }),
    };
    let tensors: Vec<Value> = state_dict(model)
        .iter()
        .map(|t| {
            let dtype = match t.data {
                TorchTensor::F32(_) => "float32",
                TorchTensor::I64(_) => "int64",
                TorchTensor::U8(_) => "uint8",
            };
            json!({"name": t.name, "shape": t.shape, "dtype": dtype})
        })
        .collect();
    json!({
        "format": SIDECAR_FORMAT,
        "format_version": SIDECAR_VERSION,
        "name": model.name,
        "input": model.input,
        "input_shape": model.shape.dims(),
        "output": width,
        "feature_names": model.feature_names,
        "target": model.target,
        "normalizer": normalizer,
        "categories": model.categories,
        "input_layout": match model.shape.layout() {
            crate::model::Layout::Tokens => "tokens",
            crate::model::Layout::Sequence => "sequence",
            crate::model::Layout::Values => "values",
        },
        "tokens": model.tokens,
        "sequence": model.sequence.as_ref().map(|s| json!({"columns": s.columns, "length": s.length})),
        "padding": match model.shape.layout() {
            crate::model::Layout::Tokens => Some("padding = (token_ids == 0): a text's positions past its end"),
            crate::model::Layout::Sequence => Some(
                "padding = torch.isnan(x.reshape(rows, length, len(columns))[:, :, 0]) after the normalizer: \
                 a sequence's positions past its end, whose values then read as 0",
            ),
            crate::model::Layout::Values => None,
        },
        "layers": layers,
        "head": head,
        "tensors": tensors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::graph::{Activation, ExportLayer};

    fn sample() -> ExportModel {
        // dense 4 gelu; batchnorm; dropout; dense 1 (input 3), sigmoid head
        ExportModel {
            name: "DeepNet".to_string(),
            input: 3,
            shape: crate::model::Shape::flat(3),
            feature_names: vec!["a".into(), "b".into(), "c".into()],
            target: "label".to_string(),
            normalizer: Some((vec![0.0, 1.0, 2.0], vec![1.0, 0.5, 4.0])),
            categories: Vec::new(),
            tokens: None,
            sequence: None,
            layers: vec![
                ExportLayer::dense(3, 4, (0..12).map(|i| i as f32).collect(), vec![0.1; 4], Activation::Gelu),
                ExportLayer::batchnorm(vec![1.0; 4], vec![0.0; 4], vec![0.5; 4], vec![2.0; 4], 42),
                ExportLayer::dropout(0.25),
                ExportLayer::dense(4, 1, vec![1.0, -1.0, 0.5, 2.0], vec![0.0], Activation::LeakyRelu(0.2)),
            ],
            head: Head::Sigmoid { class_names: vec!["no".into(), "yes".into()] },
        }
    }

    #[test]
    fn state_dict_names_follow_the_layer_index() {
        let model = sample();
        let entries = state_dict(&model);
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "0.weight",
                "0.bias",
                "1.weight",
                "1.bias",
                "1.running_mean",
                "1.running_var",
                "1.num_batches_tracked",
                "3.weight",
                "3.bias"
            ]
        );
        assert_eq!(entries[0].shape, [4, 3]);
        let entry = |e: &StateEntry| (e.name.to_string(), e.shape.to_vec(), e.data.clone());
        assert_eq!(entry(&entries[5]), ("1.running_var".to_string(), vec![4], TorchTensor::F32(vec![2.0; 4])));
        assert_eq!(entry(&entries[6]), ("1.num_batches_tracked".to_string(), vec![], TorchTensor::I64(vec![42])));
        assert_eq!(entries[7].shape, [1, 4]);

        let ln = ExportModel {
            layers: vec![ExportLayer::layernorm(vec![1.0; 3], vec![0.0; 3])],
            head: Head::Regression,
            ..sample()
        };
        let names: Vec<String> = state_dict(&ln).into_iter().map(|e| e.name.into_owned()).collect();
        assert_eq!(names, ["0.weight", "0.bias"]);
    }

    #[test]
    fn sidecar_describes_the_model() {
        let side = sidecar_json(&sample());
        assert_eq!(side["format"], SIDECAR_FORMAT);
        assert_eq!(side["format_version"], 1);
        assert_eq!(side["name"], "DeepNet");
        assert_eq!(side["input"], 3);
        assert_eq!(side["output"], 1);
        assert_eq!(side["feature_names"], json!(["a", "b", "c"]));
        assert_eq!(side["target"], "label");
        assert_eq!(side["normalizer"]["std"], json!([1.0, 0.5, 4.0]));
        let layers = side["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 4);
        assert_eq!(layers[0]["kind"], "dense");
        assert_eq!(layers[0]["in_features"], 3);
        assert_eq!(layers[0]["out_features"], 4);
        assert_eq!(layers[0]["activation"], "gelu");
        assert_eq!(layers[0]["module"], "nn.Linear(3, 4) then nn.GELU()");
        assert_eq!(layers[1]["kind"], "batchnorm");
        assert_eq!(layers[1]["num_features"], 4);
        assert!((layers[1]["eps"].as_f64().unwrap() - 1e-5).abs() < 1e-12);
        assert_eq!(layers[2]["kind"], "dropout");
        assert_eq!(layers[2]["p"], 0.25);
        assert_eq!(layers[3]["activation"], "leaky_relu");
        assert!((layers[3]["negative_slope"].as_f64().unwrap() - 0.2).abs() < 1e-12);
        assert_eq!(side["head"]["kind"], "sigmoid");
        assert_eq!(side["head"]["class_names"], json!(["no", "yes"]));
        assert_eq!(side["tensors"][6], json!({"name": "1.num_batches_tracked", "shape": [], "dtype": "int64"}));
        // Padding is a text's or a sequence's, each said in its own terms.
        assert!(side["padding"].is_null());
        let padding = |shape| sidecar_json(&ExportModel { shape, ..sample() })["padding"].as_str().unwrap().to_string();
        assert!(padding(crate::model::Shape::tokens(8)).starts_with("padding = (token_ids == 0)"));
        let sequence = padding(crate::model::Shape::sequence(8, 2));
        assert!(sequence.starts_with("padding = torch.isnan(") && !sequence.contains("token_ids"), "{sequence}");
    }

    #[test]
    fn safetensors_layout() {
        let bytes = to_safetensors(state_dict(&sample())).unwrap();
        let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(header_len % 8, 0);
        let header: Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
        let data = &bytes[8 + header_len..];
        assert_eq!(header["__metadata__"], json!({"format": "pt"}));
        // name order: 0.bias, 0.weight, 1.bias, 1.num_batches_tracked, ...
        assert_eq!(header["0.bias"], json!({"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}));
        assert_eq!(header["0.weight"]["data_offsets"], json!([16, 64]));
        let nbt = &header["1.num_batches_tracked"];
        assert_eq!(nbt["dtype"], "I64");
        assert_eq!(nbt["shape"], json!([]));
        let [start, end] = [0, 1].map(|i| nbt["data_offsets"][i].as_u64().unwrap() as usize);
        assert_eq!(end - start, 8);
        assert_eq!(i64::from_le_bytes(data[start..end].try_into().unwrap()), 42);
        assert_eq!(header["3.weight"]["data_offsets"][1].as_u64().unwrap() as usize, data.len());
        let w = &header["0.weight"];
        let s = w["data_offsets"][0].as_u64().unwrap() as usize;
        assert_eq!(f32::from_le_bytes(data[s + 4..s + 8].try_into().unwrap()), 1.0);
    }

    #[test]
    fn safetensors_refuses_bad_entries() {
        let (two, three, one) =
            (TorchTensor::F32(vec![0.0; 2]), TorchTensor::F32(vec![0.0; 3]), TorchTensor::F32(vec![0.0]));
        let entry = |name: &'static str, shape: &'static [usize], data| TensorView { name: name.into(), shape, data };
        let same = to_safetensors(vec![entry("a", &[2], &two), entry("a", &[2], &two)]);
        assert!(same.unwrap_err().contains("same name"));
        assert!(to_safetensors(vec![entry("a", &[2, 2], &three)]).unwrap_err().contains("shape"));
        assert!(to_safetensors(vec![entry("__x", &[1], &one)]).is_err());
        assert!(to_safetensors(vec![]).is_ok());
    }

    /// The file an export writes (a piece at a time, through a buffer) is
    /// the one the layout test reads, and its sidecar records that file's
    /// own length and CRC-32C, read back from the disk.
    #[test]
    fn an_export_writes_the_file_its_sidecar_sums() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        let model = sample();
        crate::export::write(&model, crate::export::Format::Safetensors, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes, to_safetensors(state_dict(&model)).unwrap());
        let (tensors, _) = crate::checkpoint::decode_safetensors(&bytes).unwrap();
        let weight = tensors.iter().find(|t| t.name == "0.weight").unwrap();
        assert_eq!(weight.data, TorchTensor::F32((0..12).map(|i| i as f32).collect()));
        let side: Value = serde_json::from_slice(&std::fs::read(dir.path().join("m.json")).unwrap()).unwrap();
        let crc = format!("{:08x}", crate::checkpoint::format::crc32c(&bytes));
        assert_eq!(side["weights"]["files"]["m.safetensors"], json!({"bytes": bytes.len(), "crc32c": crc}));
    }
}
