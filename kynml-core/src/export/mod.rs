//! A trained model outside KynML: written as ONNX, as PyTorch-named
//! safetensors with a JSON sidecar, or as Burn's record with the same
//! sidecar; and read back from the latter two (and from a run folder) for
//! prediction.
//!
//! [`ExportModel`] is the model as plain host data; every format is written
//! from it and read into it. [`graph`] is that type with a reference forward
//! pass, [`onnx`] and [`torch`] the writers.
//!
//! ```no_run
//! use kynml_core::export::{self, Format};
//!
//! // A run folder (or a .safetensors or .mpk export with its .json sidecar).
//! let model = export::load("runs/iris-20261121-101500".as_ref())?;
//! let written = export::write(&model, Format::Onnx, "iris.onnx".as_ref())?;
//! println!("wrote {}", written[0].display());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod graph;
pub mod onnx;
pub mod torch;

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use burn::DispatchDevice;
use serde_json::Value;

pub use self::graph::{Activation, ExportLayer, ExportModel, Head, RowsInPieces};
use self::torch::TorchTensor;
use crate::checkpoint::{decode_safetensors, TensorData as Stored};
use crate::data::DataInfo;
use crate::model::{HostTensor, LayerSpec, Model, Role, Shape, StateError};
use crate::spec::types::{ExportFormat, Loss, ModelSpec};
use kynml_backend::Backend as Kb;

/// The weights file of a run folder (the sidecar is `model.json`).
pub const RUN_WEIGHTS: &str = "model.safetensors";

/// The formats [`write`] produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One ONNX file (opset 17) with the normalisation and, for classes, a `probabilities` output.
    Onnx,
    /// PyTorch state-dict names in a `.safetensors` file, with a `.json` sidecar beside it.
    Safetensors,
    /// Burn's named MessagePack record (`.mpk`), with a `.json` sidecar beside it.
    Burn,
}

impl Format {
    /// The spec's export format; `torchscript` has no writer here.
    pub fn from_spec(format: ExportFormat) -> Result<Self, ExportError> {
        match format {
            ExportFormat::Onnx => Ok(Format::Onnx),
            ExportFormat::Safetensors => Ok(Format::Safetensors),
            ExportFormat::Burn => Ok(Format::Burn),
            ExportFormat::Torchscript => Err(ExportError::Torchscript),
        }
    }

    /// A format by name (`onnx`, `safetensors`, `burn`); `torchscript` and unknown names are errors.
    pub fn parse(name: &str) -> Result<Self, ExportError> {
        match name {
            "onnx" => Ok(Format::Onnx),
            "safetensors" => Ok(Format::Safetensors),
            "burn" => Ok(Format::Burn),
            "torchscript" => Err(ExportError::Torchscript),
            other => Err(ExportError::UnknownFormat(other.to_string())),
        }
    }
}

/// `: did you mean `onnx`?` after an unknown format's name, where one is close.
fn format_meant(name: &str) -> String {
    crate::spec::suggestion(name, &["onnx", "safetensors", "burn"]).map_or(String::new(), |s| format!(": {s}"))
}

/// Why [`load`] found no model it can read, for a program to act on (a
/// service tells a path it was not given from a deployment to redo).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadProblem {
    /// Nothing at the path, a folder without a finished run's model, or
    /// weights without the sidecar that describes them.
    Missing,
    /// Something other than a model: a spec, rows, a sidecar alone, an ONNX
    /// file, a training checkpoint, a pipe.
    NotAModel,
    /// Written by a newer KynML than this one.
    NewerVersion,
    /// Damaged or cut short, changed since it was written, or weights and
    /// sidecar that do not belong together.
    Damaged,
}

/// Why a model cannot be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// `torchscript` was asked for, which only PyTorch can write.
    #[error(
        "torchscript is PyTorch's own program format, which only PyTorch can write; \
         KynML writes safetensors (PyTorch state-dict names, with a sidecar from which \
         scripts/rebuild_in_pytorch.py rebuilds the module in PyTorch), onnx (onnxruntime and most \
         runtimes; PyTorch itself does not load ONNX) or burn"
    )]
    Torchscript,
    /// A format name KynML does not know; holds the name as given.
    #[error("unknown export format `{0}`; expected onnx, safetensors or burn{meant}", meant = format_meant(.0))]
    UnknownFormat(String),
    /// A file or folder could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// A file that is not a model KynML can load.
    #[error("{} is not a model KynML can load: {reason}", path.display())]
    Invalid {
        /// The file in question.
        path: PathBuf,
        /// What is wrong, in words for a person.
        reason: String,
        /// What is wrong, for a program to act on.
        problem: LoadProblem,
    },
    /// A path an export cannot be written to, found before anything is
    /// trained or written.
    #[error("cannot export to {}: {reason}", path.display())]
    Unwritable {
        /// The export's path.
        path: PathBuf,
        /// Why not, in words for a person.
        reason: String,
    },
    /// The export's `.json` sidecar is another export's.
    #[error(
        "cannot export to {}: its sidecar {} describes `{owner}`, the export beside it; writing this one would \
         replace that sidecar and `{owner}` could no longer be read: give this export another name",
        path.display(),
        sidecar.display()
    )]
    SharedSidecar {
        /// The export's path.
        path: PathBuf,
        /// Its sidecar.
        sidecar: PathBuf,
        /// The file the sidecar describes.
        owner: String,
    },
    /// The model itself cannot be written (inconsistent shapes or names); holds the reason.
    #[error("the model cannot be exported: {0}")]
    Model(String),
    /// Something other than an earlier export of this format is at the path.
    #[error(
        "{} exists and is not {what}; refusing to overwrite it (move it away or choose another export path)",
        path.display()
    )]
    Foreign {
        /// The file that would be replaced.
        path: PathBuf,
        /// What KynML would have written there.
        what: &'static str,
    },
}

/// The trained `model` of `spec` with what inference needs from the data:
/// feature names, normalisation, and the meaning of the outputs (from the
/// loss).
pub fn from_model(model: &Model<Kb>, spec: &ModelSpec, info: &DataInfo, loss: Loss) -> ExportModel {
    with_weights(model, skeleton(spec, info, loss))
}

/// What [`from_model`] gives for a model of `spec` trained on data read as
/// `info`, before there are weights: each layer's tensors named and shaped,
/// holding no values. Its sidecar's description is the trained model's
/// (see [`check_sidecar`]).
pub fn skeleton(spec: &ModelSpec, info: &DataInfo, loss: Loss) -> ExportModel {
    let class_names = info.class_names.clone().unwrap_or_default();
    let head = match loss {
        Loss::CrossEntropy => Head::Softmax { class_names },
        Loss::Bce => Head::Sigmoid { class_names },
        _ => Head::Regression,
    };
    let mut meta = ExportModel {
        name: spec.name.value.clone(),
        input: info.feature_names.len(),
        shape: spec.shape.clone(),
        feature_names: info.feature_names.clone(),
        target: info.target.clone(),
        normalizer: info.normalizer.as_ref().map(|n| (n.mean.clone(), n.std.clone())),
        categories: info.categories.clone(),
        tokens: info.tokens.clone(),
        sequence: info.sequence.clone(),
        layers: spec.layers.iter().map(|l| ExportLayer { spec: l.value.clone(), tensors: Vec::new() }).collect(),
        head,
    };
    let shapes = meta.shapes().unwrap_or_default();
    for (layer, shape) in meta.layers.iter_mut().zip(&shapes) {
        layer.tensors = (layer.spec.tensors(shape).into_iter())
            .map(|d| {
                let data = match d.role {
                    Role::Count => TorchTensor::I64(Vec::new()),
                    _ => TorchTensor::F32(Vec::new()),
                };
                HostTensor { name: d.name.to_string(), shape: d.shape, data }
            })
            .collect();
    }
    meta
}

/// Whether `model` (its [`skeleton`] will do) can be exported as `format`
/// to `path` as far as the sidecar beside it goes: a burn and a safetensors
/// export of one name share it, and one that describes another model is
/// refused ([`ExportError::SharedSidecar`]). Checked before a run trains,
/// so that it is not refused at the end.
pub fn check_sidecar(model: &ExportModel, format: Format, path: &Path) -> Result<(), ExportError> {
    match format {
        Format::Onnx => Ok(()),
        Format::Safetensors | Format::Burn => sidecar_for(model, path, (0, 0)).map(drop),
    }
}

/// `meta` with its layers' tensors replaced by `model`'s, copied to the host
/// in PyTorch's layout.
fn with_weights(model: &Model<Kb>, mut meta: ExportModel) -> ExportModel {
    let shapes = meta.shapes().unwrap_or_default();
    for ((layer, module), shape) in meta.layers.iter_mut().zip(&model.layers).zip(&shapes) {
        let mut state = module.state();
        layer.tensors = layer
            .spec
            .tensors(shape)
            .into_iter()
            .map(|d| {
                let data = match d.role {
                    Role::Count => TorchTensor::I64(vec![0]),
                    _ => {
                        let at = state.iter().position(|(name, _)| *name == d.name);
                        let values = at.map(|at| state.swap_remove(at).1);
                        TorchTensor::F32(
                            values.map(|v| layer.spec.burn_to_torch(&d.name, v, &d.shape)).unwrap_or_default(),
                        )
                    }
                };
                HostTensor { name: d.name.to_string(), shape: d.shape, data }
            })
            .collect();
    }
    meta
}

/// The exported model as a Burn module on `device`, for fast batched
/// inference. A model that does not [`validate`](ExportModel::validate), or
/// whose tensors do not fit its layers, is an error.
pub fn to_model(e: &ExportModel, device: &DispatchDevice) -> Result<Model<Kb>, ExportError> {
    e.validate().map_err(ExportError::Model)?;
    build(e, device, true)
}

/// The model's layers on `device`, each from its tensors; a layer whose
/// tensors are absent or do not fit is an error when `strict`, else keeps
/// its initial weights (a skeleton for a Burn record to load into).
fn build(e: &ExportModel, device: &DispatchDevice, strict: bool) -> Result<Model<Kb>, ExportError> {
    let shapes = e.shapes().map_err(ExportError::Model)?;
    let mut rng = crate::rng::SplitMix64::new(0);
    let mut ids = NumberedIds(0);
    let layers = e
        .layers
        .iter()
        .zip(&shapes)
        .enumerate()
        .map(|(i, (layer, shape))| {
            let view = layer.view();
            let mut get = |name: &str, burn_shape: &[usize]| {
                let values = view.f32(name);
                if values.len() != burn_shape.iter().product::<usize>() {
                    return Err(StateError::Shape {
                        name: name.into(),
                        expected: burn_shape.to_vec(),
                        found: vec![values.len()],
                    });
                }
                Ok(layer.spec.torch_to_burn(name, values, burn_shape))
            };
            // Numbered before the weights go in: a layer's restore keeps its
            // parameters' ids (batchnorm derives its running statistics' from them).
            let module = layer.spec.init(shape, &mut rng, device).map(&mut ids);
            match module.restore(&mut get, device) {
                Ok(module) => Ok(module),
                Err(err) if strict => Err(ExportError::Model(format!("layer {i} ({}): {err}", layer.kind()))),
                Err(_) => Ok(layer.spec.init(shape, &mut rng, device)),
            }
        })
        .collect::<Result<_, _>>()?;
    Ok(Model { layers, sequence: crate::model::sequence_channels(&e.shape) })
}

/// Checks, before anything is trained or written, that exporting as
/// `format` to `path` replaces nothing but an earlier export of that format:
/// a file of another kind (or a folder) at `path` or at its `.json` sidecar
/// is refused.
pub fn check_target(format: Format, path: &Path) -> Result<(), ExportError> {
    names_a_folder(path, Some(format))?;
    let sidecar = path.with_extension("json");
    if sidecar == path && format != Format::Onnx {
        let reason = "a .json path would be overwritten by the sidecar; name the weights file .safetensors or .mpk";
        return Err(ExportError::Unwritable { path: path.into(), reason: reason.into() });
    }
    // A model file named as another format's would be refused when read back.
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    let (name, expected) = match format {
        Format::Onnx => ("an ONNX", "onnx"),
        Format::Safetensors => ("a safetensors", "safetensors"),
        Format::Burn => ("a Burn", "mpk"),
    };
    if let Some(ext) = ext.as_ref().filter(|e| ["onnx", "safetensors", "mpk"].contains(&e.as_str()) && *e != expected) {
        return Err(ExportError::Unwritable {
            path: path.into(),
            reason: format!("{name} export named .{ext} would be taken for another format; name it .{expected}"),
        });
    }
    // PyTorch's own names: `torch.load` would be handed a file it cannot read
    // (a spec switched from `torchscript` to `onnx` that kept its `.pt` path).
    if let Some(ext) = ext.as_ref().filter(|e| ["pt", "pth"].contains(&e.as_str())) {
        return Err(ExportError::Unwritable {
            path: path.into(),
            reason: format!(
                "{name} export named .{ext} would be taken for a PyTorch file (what `torch.save` writes); name it \
                 .{expected}"
            ),
        });
    }
    // Names that `load` takes for a spec or for rows, whatever the file
    // holds: an export under one could not be read back.
    // (`.kyn` exactly, as `load` goes by it; `.csv` and `.tsv` in any case.)
    let exact_kyn = path.extension().is_some_and(|e| e == "kyn");
    if let Some(ext) = ext.as_deref().filter(|e| ["csv", "tsv"].contains(e) || (*e == "kyn" && exact_kyn)) {
        let what = if ext == "kyn" { "a spec" } else { "a CSV file of rows" };
        return Err(ExportError::Unwritable {
            path: path.into(),
            reason: format!(
                "a .{ext} file is read as {what} (predict and eval refuse it as a model); name it .{expected}"
            ),
        });
    }
    // Predict and eval tell a Burn record by its name (Burn's loader adds `.mpk`).
    let exact = path.extension().and_then(|e| e.to_str());
    if format == Format::Burn && exact != Some("mpk") {
        return Err(ExportError::Unwritable {
            path: path.into(),
            reason: format!(
                "a Burn export is read back by its .mpk name, which predict and eval go by; name it {}",
                path.with_extension(match (exact, ext.as_deref()) {
                    (_, Some("mpk")) | (None, _) => "mpk".into(),
                    (Some(e), _) => format!("{e}.mpk"),
                })
                .display()
            ),
        });
    }
    let (what, looks_right): (&'static str, fn(&[u8]) -> bool) = match format {
        // A ModelProto starts with field 1 (ir_version), a varint: tag byte
        // 0x08; KynML's then names its producer (field 2): `kynml`. Another
        // tool's ONNX model (PyTorch's, say) is not replaced.
        Format::Onnx => ("an ONNX model KynML exported", |head| {
            let Some(rest) = head.strip_prefix(&[0x08]) else { return false };
            let varint = rest.iter().position(|b| b & 0x80 == 0).map_or(rest.len(), |i| i + 1);
            rest[varint..].starts_with(b"\x12\x05kynml")
        }),
        // An 8-byte header length, then the JSON header.
        Format::Safetensors => ("a safetensors file", |head| head.get(8) == Some(&b'{')),
        // Burn's named MessagePack record: a map (0x80-0x8f, 0xde or 0xdf).
        Format::Burn => ("a Burn record", |head| head.first().is_some_and(|b| matches!(b, 0x80..=0x8f | 0xde | 0xdf))),
    };
    // Reads at most `limit` bytes: a model file is told by its first few.
    let foreign = |p: &Path, what: &'static str, limit: u64, ok: &dyn Fn(&[u8]) -> bool| -> Result<(), ExportError> {
        // Never opened: a FIFO would wait for a writer forever.
        if let Some(kind) = crate::atomic_file::special_kind(p) {
            let reason = format!("{} is {kind}, not a regular file; an export never replaces one", p.display());
            return Err(ExportError::Unwritable { path: path.into(), reason });
        }
        if p.is_dir() {
            return Err(ExportError::Foreign { path: p.into(), what });
        }
        let mut head = Vec::new();
        match std::fs::File::open(p)
            .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, limit), &mut head))
        {
            Ok(_) if !ok(&head) => Err(ExportError::Foreign { path: p.into(), what }),
            _ => Ok(()),
        }
    };
    foreign(path, what, 16, &looks_right)?;
    if format != Format::Onnx {
        let is_sidecar = |bytes: &[u8]| {
            serde_json::from_slice::<Value>(bytes)
                .is_ok_and(|v| v.get("format").and_then(Value::as_str) == Some(torch::SIDECAR_FORMAT))
        };
        foreign(&sidecar, "a KynML model sidecar", u64::MAX, &is_sidecar)?;
        // The weights file is KynML's when its sidecar names it (one written
        // before sidecars named their files is KynML's by its format): a
        // safetensors file another tool wrote has none.
        if path.is_file() {
            let side = std::fs::read(&sidecar).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok());
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let named = match side.as_ref().map(|v| (v, v.pointer("/weights/files"))) {
                Some((_, Some(Value::Object(files)))) => files.contains_key(&name),
                Some((v, None)) => v.get("format").and_then(Value::as_str) == Some(torch::SIDECAR_FORMAT),
                _ => false,
            };
            if !named {
                let what = match format {
                    Format::Burn => "a Burn export of KynML's (no KynML sidecar beside it names it)",
                    _ => "a safetensors export of KynML's (no KynML sidecar beside it names it)",
                };
                return Err(ExportError::Foreign { path: path.into(), what });
            }
        }
    }
    Ok(())
}

/// Checks, before anything is trained or written, that `path`'s folder is,
/// or can be made, a folder this process may write in: its nearest existing
/// folder takes a new (unnamed, at once removed) file.
pub fn check_writable(path: &Path) -> Result<(), ExportError> {
    names_a_folder(path, None)?;
    let mut dir = parent(path).to_path_buf();
    while !dir.exists() {
        match dir.parent() {
            Some(up) if !up.as_os_str().is_empty() => dir = up.to_path_buf(),
            _ => {
                dir = PathBuf::from(".");
                break;
            }
        }
    }
    if !dir.is_dir() {
        let reason = format!("{} is a file, so no folder can be made there", dir.display());
        return Err(ExportError::Unwritable { path: path.into(), reason });
    }
    let folder = parent(path);
    crate::atomic_file::probe_writable(&dir).map_err(|e| ExportError::Unwritable {
        path: path.into(),
        // A folder still to be made is named, with the one it would be made in.
        reason: if dir == folder {
            format!("its folder {} cannot be written: {e}", dir.display())
        } else {
            format!("its folder {} cannot be made in {}: {e}", folder.display(), dir.display())
        },
    })
}

/// A path written with a separator at its end (`models/`) names a folder,
/// where an export is a file: refused before anything is trained.
fn names_a_folder(path: &Path, format: Option<Format>) -> Result<(), ExportError> {
    let written = path.as_os_str().to_string_lossy();
    let separator = written.ends_with(std::path::is_separator);
    // A folder that is there (`.`, `exports`) is one too: it was said to be
    // "not an ONNX model KynML exported".
    if separator || (format.is_some() && path.is_dir()) {
        let folder = if separator { written.to_string() } else { format!("{written}{}", std::path::MAIN_SEPARATOR) };
        let name = match format {
            Some(Format::Onnx) => format!(", as in {folder}model.onnx"),
            Some(Format::Safetensors) => format!(", as in {folder}model.safetensors"),
            Some(Format::Burn) => format!(", as in {folder}model.mpk"),
            None => " in it".to_string(),
        };
        let what = if separator { "a path ending in a separator names a folder" } else { "it is a folder" };
        let reason = format!("{what}; an export is a file: name it{name}");
        return Err(ExportError::Unwritable { path: path.into(), reason });
    }
    Ok(())
}

/// The crc32c of `bytes`, as the sidecar writes it.
fn crc_text(bytes: &[u8]) -> String {
    format!("{:08x}", crate::checkpoint::format::crc32c(bytes))
}

/// The length and CRC-32C of the file at `path`, read a piece at a time.
fn sum_file(path: &Path) -> std::io::Result<(u64, u32)> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let (mut piece, mut len, mut crc) = (vec![0u8; 1 << 20], 0u64, 0u32);
    loop {
        match file.read(&mut piece) {
            Ok(0) => return Ok((len, crc)),
            Ok(n) => {
                crc = crate::checkpoint::format::crc32c_append(crc, &piece[..n]);
                len += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The sidecar for `model`, written beside the weights `path`, a file of
/// `len` bytes summing to `crc`, with its `weights` entry: `{description, files}`, the checksum
/// of the model's description and, per weights file it describes, its
/// `{bytes, crc32c}`. A burn and a safetensors export of one name share the
/// sidecar: the other file keeps its entry when the description is the
/// same, and the export is refused when it is not (the other file could no
/// longer be read).
fn sidecar_for(model: &ExportModel, path: &Path, (len, crc): (u64, u32)) -> Result<Vec<u8>, ExportError> {
    let sidecar = path.with_extension("json");
    let mut json = torch::sidecar_json(model);
    // The model's description, as sidecars have summed it since they named
    // their weights: `padding`, added later, follows from `input_layout`, and
    // left out, a sidecar written before it still describes the same model.
    // The layers' `module` texts (words for a PyTorch user, which a later
    // version may word better) are left out too; a sidecar summed with
    // them, as earlier ones were, is still this model's.
    let (description, with_texts) = description_sums(&json);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut files = serde_json::Map::new();
    let existing = std::fs::read(&sidecar).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    if let Some(Value::Object(old)) = existing.as_ref().and_then(|v| v.pointer("/weights/files")) {
        // The other files the sidecar describes: those beside it by name,
        // and the other format's file of this name when it is one of them
        // by size and checksum (a pair copied under another name, which
        // loads as such), entered under the name it has now.
        let mut others: Vec<(String, Value)> = old
            .iter()
            .filter(|(k, _)| **k != name && parent(path).join(k).is_file())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let sibling = path.with_extension(match path.extension().and_then(|e| e.to_str()) {
            Some("mpk") => "safetensors",
            _ => "mpk",
        });
        let sibling_name = sibling.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if sibling_name != name && !others.iter().any(|(k, _)| *k == sibling_name) && sibling.is_file() {
            if let Ok((len, crc)) = sum_file(&sibling) {
                if let Some(entry) = old.values().find(|e| describes(e, len, &format!("{crc:08x}"))) {
                    others.push((sibling_name, entry.clone()));
                }
            }
        }
        let summed = existing.as_ref().and_then(|v| v.pointer("/weights/description")).and_then(Value::as_str);
        let same = summed.is_some_and(|d| d == description || d == with_texts);
        if same {
            files.extend(others);
        } else if let Some((owner, _)) = others.first() {
            return Err(ExportError::SharedSidecar { path: path.into(), sidecar, owner: owner.clone() });
        }
    }
    files.insert(name, serde_json::json!({"bytes": len, "crc32c": format!("{crc:08x}")}));
    json["weights"] = serde_json::json!({"description": description, "files": files});
    Ok(serde_json::to_vec_pretty(&json).unwrap_or_default())
}

/// The checksums of a sidecar's model description, as [`sidecar_for`] sums
/// it: without `padding`, and without then with the layers' `module` texts.
fn description_sums(described: &Value) -> (String, String) {
    let mut described = described.clone();
    if let Some(fields) = described.as_object_mut() {
        fields.remove("padding");
        fields.remove("weights");
    }
    let with_texts = crc_text(&serde_json::to_vec(&described).unwrap_or_default());
    if let Some(layers) = described.get_mut("layers") {
        without_module_texts(layers);
    }
    (crc_text(&serde_json::to_vec(&described).unwrap_or_default()), with_texts)
}

/// A sidecar whose model description is not the one its weights were
/// written with (a hand-edited normaliser, activation or class name) is
/// refused: it loaded, and predicted with weights trained for another
/// model. The description is summed as the export summed it, from the
/// model read from it (`meta`): its JSON text read back need not print
/// alike (a float's last digit). Older sidecars record no checksum.
fn check_description(sidecar: &Value, meta: &ExportModel) -> Result<(), String> {
    let Some(recorded) = sidecar.pointer("/weights/description").and_then(Value::as_str) else { return Ok(()) };
    let (description, with_texts) = description_sums(&torch::sidecar_json(meta));
    if recorded == description || recorded == with_texts {
        return Ok(());
    }
    Err(format!(
        "it was changed after the model was written: its description (normaliser, layers, names) no longer \
         matches the checksum recorded with the weights (`weights.description` {recorded}), so the weights would \
         run as another model than they were trained as; restore the file, or export the model again from its \
         run folder"
    ))
}

/// Whether a sidecar's `weights.files` entry is of a file of `len` bytes
/// whose CRC-32C reads `crc` (as [`crc_text`] writes it).
fn describes(entry: &Value, len: u64, crc: &str) -> bool {
    entry.get("bytes").and_then(Value::as_u64) == Some(len) && entry.get("crc32c").and_then(Value::as_str) == Some(crc)
}

/// `value` without its objects' `module` entries, at any depth (a
/// residual block's layers have theirs).
fn without_module_texts(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            fields.remove("module");
            fields.values_mut().for_each(without_module_texts);
        }
        Value::Array(items) => items.iter_mut().for_each(without_module_texts),
        _ => {}
    }
}

/// Whether `bytes`, read from the Burn record `weights`, are a file the
/// sidecar was written with, by its `weights` entry: by name, or by size and
/// checksum (a pair copied under another name). A Burn record that does not
/// fit its model cannot be read safely; a safetensors file is checked tensor
/// by tensor as it loads, but another run's weights of the same shapes (or a
/// flipped byte) load as well, so it is checked too, once it decodes. Older
/// sidecars have no entry.
fn check_owner(sidecar: &Value, sidecar_path: &Path, weights: &Path, bytes: &[u8]) -> Result<(), ExportError> {
    let Some(Value::Object(files)) = sidecar.pointer("/weights/files") else { return Ok(()) };
    let name = weights.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let crc = crc_text(bytes);
    if files.values().any(|entry| describes(entry, bytes.len() as u64, &crc)) {
        return Ok(());
    }
    let written: Vec<String> = files.keys().map(|k| format!("`{k}`")).collect();
    let reason = if files.contains_key(&name) {
        format!(
            "this is not the file its sidecar `{}` was written with (its size or checksum differs): it was changed \
             or replaced since the export; export the model again",
            sidecar_path.display()
        )
    } else {
        format!(
            "its sidecar `{}` was written for {}, and this file is none of them (its size or checksum differs): \
             a burn and a safetensors export of one name share their sidecar; export this model again",
            sidecar_path.display(),
            written.join(" and ")
        )
    };
    Err(ExportError::Invalid { path: weights.into(), reason, problem: LoadProblem::Damaged })
}

/// The folder of `path`, locked for this process until dropped (an
/// advisory lock, which other KynML exports take too); `None` where the
/// folder is not there yet or takes no lock (the export then goes on
/// unlocked, as before).
fn lock_folder(path: &Path) -> Option<std::fs::File> {
    let folder = std::fs::File::open(parent(path)).ok()?;
    folder.lock().ok()?;
    Some(folder)
}

/// Writes `model` as `format` to `path`, each file atomically, after
/// [`check_target`]. Returns the files written: the model, then its JSON
/// sidecar (safetensors and burn).
pub fn write(model: &ExportModel, format: Format, path: &Path) -> Result<Vec<PathBuf>, ExportError> {
    model.validate().map_err(ExportError::Model)?;
    // A burn and a safetensors export of one name share their sidecar, which
    // each reads and writes again: two at once (two processes) each dropped
    // the other's entry, and both said they had written a model one of them
    // could no longer load. One export at a time in a folder, from the look
    // at what is there to the last rename.
    let _folder = match format {
        Format::Safetensors | Format::Burn => lock_folder(path),
        Format::Onnx => None,
    };
    check_target(format, path)?;
    let sidecar = path.with_extension("json");

    match format {
        Format::Onnx => {
            write_atomic(path, &onnx::to_onnx(model).map_err(ExportError::Model)?)?;
            Ok(vec![path.into()])
        }
        Format::Safetensors => {
            // Written from the model's tensors a piece at a time: a first
            // pass sums the file for its sidecar (checked before anything
            // is written), the second writes it.
            let (header, entries) = torch::plan_safetensors(torch::state_dict(model)).map_err(ExportError::Model)?;
            let sums = torch::write_safetensors(&mut std::io::sink(), &header, &entries)
                .map_err(|source| ExportError::Write { path: path.into(), source })?;
            let side = sidecar_for(model, path, sums)?;
            // The weights staged whole first (a full disk stops the export
            // there, with the old pair as it was), then the sidecar put in
            // place, then the weights: a weights file is ever in place only
            // beside a sidecar that names it (so that an export cut short
            // between the two is KynML's to replace, not taken for another
            // tool's).
            let dir = parent(path);
            std::fs::create_dir_all(dir).map_err(|source| ExportError::Write { path: dir.into(), source })?;
            let staged =
                crate::atomic_file::stage_with(path, |out| torch::write_safetensors(out, &header, &entries).map(drop))
                    .map_err(|source| ExportError::Write { path: path.into(), source })?;
            write_atomic(&sidecar, &side)?;
            staged.commit().map_err(|source| ExportError::Write { path: path.into(), source })?;
            Ok(vec![path.into(), sidecar])
        }
        Format::Burn => {
            let module = to_model(model, &host())?;
            let dir = parent(path);
            std::fs::create_dir_all(dir).map_err(|source| ExportError::Write { path: dir.into(), source })?;
            // Staging folders of earlier versions' Burn exports, killed mid-write.
            remove_dead_staging(dir);
            // The record as Burn's `NamedMpkFileRecorder` writes it (and
            // reads it back), through a file staged as the safetensors one
            // is: flushed and synced, with the disk's own error.
            use burn::record::Record;
            let item = module.into_record().into_item::<FullPrecisionSettings>();
            let record = burn::record::BurnRecord::<_, Kb>::new::<NamedMpkFileRecorder<FullPrecisionSettings>>(item);
            let mut sums = (0, 0);
            let staged = crate::atomic_file::stage_with(path, |out| {
                sums = write_mpk(out, &record)?;
                Ok(())
            })
            .map_err(|source| ExportError::Write { path: path.into(), source })?;
            let side = sidecar_for(model, path, sums)?;
            // The sidecar first, as for safetensors.
            write_atomic(&sidecar, &side)?;
            staged.commit().map_err(|source| ExportError::Write { path: path.into(), source })?;
            Ok(vec![path.into(), sidecar])
        }
    }
}

/// Writes `record` as MessagePack with named fields (Burn's
/// `NamedMpkFileRecorder`'s format) to `out`; its length and CRC-32C, or the
/// first I/O error as the disk gave it.
fn write_mpk(out: &mut dyn std::io::Write, record: &impl serde::Serialize) -> std::io::Result<(u64, u32)> {
    let mut kept = FirstError { inner: out, error: None };
    let mut summed = crate::checkpoint::format::Summed { out: &mut kept, crc: 0, len: 0 };
    let written = rmp_serde::encode::write_named(&mut summed, record);
    let sums = (summed.len, summed.crc);
    if let Some(e) = kept.error.take() {
        return Err(e);
    }
    written.map_err(std::io::Error::other)?;
    Ok(sums)
}

/// A writer that passes bytes on and keeps the first I/O error:
/// rmp_serde's own error says "error while writing" without the disk's cause.
struct FirstError<'w> {
    inner: &'w mut dyn std::io::Write,
    error: Option<std::io::Error>,
}

impl std::io::Write for FirstError<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf).map_err(|e| {
            if e.kind() == std::io::ErrorKind::Interrupted {
                return e;
            }
            let again = std::io::Error::new(e.kind(), e.to_string());
            self.error.get_or_insert(e);
            again
        })
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The start of a Burn export's staging folder's name, before the writing
/// process's id.
const STAGING: &str = ".kynml-export-";

/// Removes the staging folders in `dir` of Burn exports whose process no
/// longer runs on this machine (killed while writing: a part-written
/// record as large as the model stayed); one of another machine's (a
/// shared folder) is left alone, as its process cannot be seen from here.
/// Where running processes cannot be told (no `/proc`), nothing is removed.
/// Best effort.
fn remove_dead_staging(dir: &Path) {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    let here = crate::atomic_file::hostname();
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        // `.kynml-export-PID@HOST-RANDOM`
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(STAGING)) else { continue };
        let Some((pid, rest)) = rest.split_once('@') else { continue };
        let (Ok(pid), Some((host, _))) = (pid.parse::<u32>(), rest.rsplit_once('-')) else { continue };
        let dead = crate::atomic_file::process_gone(pid) == Some(true);
        if dead && host == here && entry.path().is_dir() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The host CPU through Burn's flex backend, where a Burn record is made
/// and read: not [`kynml_backend::Device::cpu`], which starts rayon's global
/// pool before a service that loads a model has sized it.
fn host() -> DispatchDevice {
    DispatchDevice::Flex(burn::backend::flex::FlexDevice)
}

/// Numbers a module's parameters 1, 2, ... in its own order. Burn draws a
/// random id for each new parameter and writes it in the record, so without
/// this the same weights gave other `.mpk` bytes (and another checksum in the
/// sidecar) on every export. (Burn's `RunningState` keeps its own id through
/// a mapper: batchnorm's restore derives it from the layer's weight.)
struct NumberedIds(u64);

impl NumberedIds {
    fn next(&mut self) -> burn::module::ParamId {
        self.0 += 1;
        burn::module::ParamId::from(self.0)
    }
}

impl<B: burn::tensor::backend::Backend> burn::module::ModuleMapper<B> for NumberedIds {
    fn map_float<const D: usize>(
        &mut self,
        param: burn::module::Param<burn::tensor::Tensor<B, D>>,
    ) -> burn::module::Param<burn::tensor::Tensor<B, D>> {
        let (_, value, mapper) = param.consume();
        burn::module::Param::from_mapped_value(self.next(), value, mapper)
    }

    fn map_int<const D: usize>(
        &mut self,
        param: burn::module::Param<burn::tensor::Tensor<B, D, burn::tensor::Int>>,
    ) -> burn::module::Param<burn::tensor::Tensor<B, D, burn::tensor::Int>> {
        let (_, value, mapper) = param.consume();
        burn::module::Param::from_mapped_value(self.next(), value, mapper)
    }

    fn map_bool<const D: usize>(
        &mut self,
        param: burn::module::Param<burn::tensor::Tensor<B, D, burn::tensor::Bool>>,
    ) -> burn::module::Param<burn::tensor::Tensor<B, D, burn::tensor::Bool>> {
        let (_, value, mapper) = param.consume();
        burn::module::Param::from_mapped_value(self.next(), value, mapper)
    }
}

/// Reads a model for prediction: a run folder (its `model.safetensors` and
/// `model.json`), a `.safetensors` export or a `.mpk` (burn) export, each
/// with its `.json` sidecar beside it.
pub fn load(path: &Path) -> Result<ExportModel, ExportError> {
    let given = |reason: &str, problem| ExportError::Invalid { path: path.into(), reason: reason.into(), problem };
    if !path.exists() {
        return Err(given(
            "there is no such file or folder; give a run folder that `kynml train` wrote, or an export",
            LoadProblem::Missing,
        ));
    }
    // A folder is judged by what it holds, whatever its name (`--out r.kyn`).
    if path.extension().is_some_and(|e| e == "kyn") && !path.is_dir() {
        return Err(given(
            "it is a spec; give the run folder that `kynml train` wrote for it (`runs/<spec>-<time>`, or its \
             --out), or an export",
            LoadProblem::NotAModel,
        ));
    }
    if path.is_dir() && !path.join(RUN_WEIGHTS).is_file() {
        return Err(given(
            &format!(
                "the folder has no {RUN_WEIGHTS}: it is not a run folder, or its run did not finish (it was \
                 stopped, or ended with an error; a spec that checkpoints goes on from its checkpoint with \
                 `kynml train`)"
            ),
            LoadProblem::Missing,
        ));
    }
    let weights = if path.is_dir() { path.join(RUN_WEIGHTS) } else { path.to_path_buf() };
    let invalid =
        |reason: String| ExportError::Invalid { path: weights.clone(), reason, problem: LoadProblem::NotAModel };
    let damaged =
        |reason: String| ExportError::Invalid { path: weights.clone(), reason, problem: LoadProblem::Damaged };
    if weights.extension().is_some_and(|e| e.eq_ignore_ascii_case("json")) {
        return Err(invalid(
            "a .json file is an export's sidecar or a run's record, not a model; give the run folder, or the \
             .safetensors or .mpk file beside the sidecar"
                .into(),
        ));
    }
    if weights.extension().is_some_and(|e| e.eq_ignore_ascii_case("onnx")) {
        return Err(invalid(
            "ONNX files are for other runtimes; give KynML the run folder or a safetensors or burn export".into(),
        ));
    }
    // `kynml predict rows.csv RUN`: the two arguments swapped.
    if weights.extension().is_some_and(|e| ["csv", "tsv"].iter().any(|c| e.eq_ignore_ascii_case(c))) {
        return Err(invalid(
            "it is a CSV file, which holds rows, not a model; the model comes first: `kynml predict RUN ROWS.csv` \
             (RUN a run folder or an export)"
                .into(),
        ));
    }
    let sidecar_path = weights.with_extension("json");
    // Never opened: reading a named pipe would wait for a writer forever.
    for p in [&weights, &sidecar_path] {
        if let Some(kind) = crate::atomic_file::special_kind(p) {
            return Err(ExportError::Invalid {
                path: p.clone(),
                reason: format!("it is {kind}, not a regular file; give the model's own files"),
                problem: LoadProblem::NotAModel,
            });
        }
    }
    // A training checkpoint holds the model too, but it is not an export.
    let mut head = [0u8; 8];
    let head_read = std::fs::File::open(&weights).and_then(|mut f| std::io::Read::read(&mut f, &mut head));
    if matches!(head_read, Ok(8)) && head == crate::checkpoint::format::MAGIC {
        return Err(invalid(
            "it is a training checkpoint, which resumes a run, not a model to predict with or export; give the \
             run folder of the run that wrote it (runs/<spec>-<time>), or train the spec to its end and use that folder"
                .into(),
        ));
    }
    // Burn's loader goes by the name with `.mpk` put back on: `m.MPK` would be looked for as `m.mpk`.
    if let Some(e) = weights.extension().filter(|e| e.eq_ignore_ascii_case("mpk") && *e != "mpk") {
        return Err(invalid(format!(
            "a Burn record is read by its .mpk name, and this one ends .{}: rename it (and nothing else) to {}",
            e.to_string_lossy(),
            weights.with_extension("mpk").display()
        )));
    }
    let read = |p: &Path| std::fs::read(p).map_err(|source| ExportError::Read { path: p.into(), source });
    // The weights alone do not say what model they are.
    if weights.is_file() && !sidecar_path.exists() {
        return Err(ExportError::Invalid {
            path: weights.clone(),
            problem: LoadProblem::Missing,
            reason: format!(
                "its sidecar {} is missing: an export is read with the .json written beside it, which says what \
             model the weights are; copy it along with them (or export again from the run folder)",
                sidecar_path.display()
            ),
        });
    }
    let sidecar: Value = serde_json::from_slice(&read(&sidecar_path)?).map_err(|e| ExportError::Invalid {
        path: sidecar_path.clone(),
        reason: format!("the sidecar is not valid JSON: {e}"),
        problem: LoadProblem::Damaged,
    })?;
    // The sidecar's sizes are checked against the weights before a skeleton
    // of them is made: a damaged one could ask for terabytes.
    let weights_bytes = std::fs::metadata(&weights).map_or(u64::MAX, |m| m.len());
    // A weights file cut short (a copy that did not finish) is said of that
    // file, where its sidecar records its size: it was said of the sidecar,
    // as "damaged or belongs to another model".
    let name = weights.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let recorded = sidecar.pointer("/weights/files").and_then(|f| f.get(&name)).and_then(|e| e.get("bytes"));
    if let Some(recorded) = recorded.and_then(Value::as_u64).filter(|&b| b != weights_bytes) {
        let what = if crate::checkpoint::format::is_whole_safetensors(&weights) {
            "another model's weights, whole (copied over this one's?)"
        } else if weights_bytes < recorded {
            "cut short (a copy that did not finish?)"
        } else {
            "changed"
        };
        return Err(ExportError::Invalid {
            path: weights.clone(),
            reason: format!(
                "it is {weights_bytes} bytes where its sidecar `{}` records {recorded}: {what} since the export; \
                 export the model again, or copy it whole",
                sidecar_path.display()
            ),
            problem: LoadProblem::Damaged,
        });
    }
    let meta = from_sidecar(&sidecar, weights_bytes).map_err(|(reason, problem)| ExportError::Invalid {
        path: sidecar_path.clone(),
        reason,
        problem,
    })?;
    check_description(&sidecar, &meta).map_err(|reason| ExportError::Invalid {
        path: sidecar_path.clone(),
        reason,
        problem: LoadProblem::Damaged,
    })?;
    let bytes = read(&weights)?;
    let mpk = weights.extension().is_some_and(|e| e == "mpk");
    let model = if mpk {
        check_owner(&sidecar, &sidecar_path, &weights, &bytes)?;
        let cpu = host();
        let skeleton = build(&meta, &cpu, false)?;
        let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
        // Burn's loader panics on a record that does not fit the module
        // (an older sidecar, without `weights`, beside another model's
        // weights): that panic becomes this error, without its message
        // (other threads' panics still print).
        // Burn's loader appends `.mpk` to the name it is given.
        let stem = weights.with_extension("");
        let loaded = kynml_backend::catch_quietly(|| skeleton.load_file(&stem, &recorder, &cpu));
        let loaded = match loaded {
            Ok(Ok(model)) => model,
            // Burn's own words suggest a feature flag of its; a model file
            // that does not decode is damaged or cut short.
            Ok(Err(_)) => {
                return Err(damaged(
                    "it cannot be read as a Burn record: the file is damaged or cut short (a copy that did not \
                     finish?); export the model again"
                        .into(),
                ))
            }
            Err(_) => {
                return Err(damaged(format!(
                    "its weights do not fit the model that its sidecar `{}` describes: were they exported from \
                     another run? Export the model again",
                    sidecar_path.display()
                )))
            }
        };
        with_weights(&loaded, meta)
    } else {
        let (tensors, _) = decode_safetensors(&bytes).map_err(|e| {
            let why = match e {
                crate::checkpoint::CheckpointError::Corrupt { reason } => reason,
                _ => "its bytes do not hold together".into(),
            };
            damaged(format!(
                "it cannot be read as safetensors ({why}): the file is damaged or cut short; export the model \
                 again, or for a run folder train it again"
            ))
        })?;
        check_owner(&sidecar, &sidecar_path, &weights, &bytes)?;
        drop(bytes);
        fill(meta, tensors).map_err(damaged)?
    };
    model.validate().map_err(damaged)?;
    Ok(model)
}

/// A model from [`torch::sidecar_json`]'s description, with zero weights;
/// refused when its weights could not fit in `weights_bytes` (two bytes a
/// value at the least).
fn from_sidecar(v: &Value, weights_bytes: u64) -> Result<ExportModel, (String, LoadProblem)> {
    if let Some(version) = v.get("format_version").and_then(Value::as_u64) {
        if version > u64::from(torch::SIDECAR_VERSION) {
            let why = format!(
                "its `format_version` is {version}, newer than this KynML reads (up to {}): upgrade KynML",
                torch::SIDECAR_VERSION
            );
            return Err((why, LoadProblem::NewerVersion));
        }
    }
    describe(v, weights_bytes).map_err(|why| (why, LoadProblem::Damaged))
}

/// [`from_sidecar`] of a sidecar of a version this KynML reads.
fn describe(v: &Value, weights_bytes: u64) -> Result<ExportModel, String> {
    let field = |v: &Value, key: &str| v.get(key).cloned().ok_or_else(|| format!("no `{key}`"));
    let size =
        |v: &Value, key: &str| field(v, key)?.as_u64().map(|n| n as usize).ok_or(format!("`{key}` is not a size"));
    let strings = |v: Value, key: &str| -> Result<Vec<String>, String> {
        serde_json::from_value(v).map_err(|_| format!("`{key}` is not a list of names"))
    };
    if v.get("format").and_then(Value::as_str) != Some(torch::SIDECAR_FORMAT) {
        return Err(format!("its `format` is not `{}`", torch::SIDECAR_FORMAT));
    }
    let input = size(v, "input")?;
    // Older sidecars have no `input_shape`: plain features.
    let sequence: Option<crate::data::SequenceColumns> = match v.get("sequence") {
        None | Some(Value::Null) => None,
        Some(s) => Some(serde_json::from_value(s.clone()).map_err(|_| "`sequence` is not {columns, length}")?),
    };
    let shape = match (v.get("input_shape"), v.get("input_layout").and_then(Value::as_str)) {
        (_, Some("tokens")) => Shape::tokens(input),
        (_, Some("sequence")) => {
            let s = sequence.as_ref().ok_or("a sequence input without its `sequence` columns")?;
            Shape::sequence(s.length, s.channels())
        }
        (None | Some(Value::Null), _) => Shape::flat(input),
        (Some(s), _) => {
            Shape::new(serde_json::from_value(s.clone()).map_err(|_| "`input_shape` is not a list of sizes")?)
        }
    };
    let mut layers = Vec::new();
    let mut current = shape.clone();
    let mut values = 0u64;
    for l in field(v, "layers")?.as_array().ok_or("`layers` is not a list")? {
        let kind = l.get("kind").and_then(Value::as_str).unwrap_or_default();
        let spec = LayerSpec::from_json(kind, l)?;
        // Sizes no device holds are refused before anything is allocated.
        if let Some((_, problem)) = crate::model::too_large(&current, std::slice::from_ref(&spec)) {
            return Err(format!("layer {} ({kind}): {problem}", layers.len()));
        }
        values += spec.tensors(&current).iter().map(|d| d.len() as u64).sum::<u64>();
        if values.saturating_mul(2) > weights_bytes {
            return Err(format!(
                "its layers up to layer {} ({kind}) hold {values} values, more than its weights file of \
                 {weights_bytes} bytes can: the sidecar is damaged or belongs to another model",
                layers.len()
            ));
        }
        let layer = ExportLayer::zeros(spec, &current);
        current = layer.spec.output(&current).map_err(|e| format!("layer {} ({kind}): {e}", layers.len()))?;
        layers.push(layer);
    }
    let head_v = field(v, "head")?;
    let class_names = strings(field(&head_v, "class_names")?, "class_names")?;
    let head = match head_v.get("kind").and_then(Value::as_str).unwrap_or_default() {
        "regression" => Head::Regression,
        "softmax" => Head::Softmax { class_names },
        "sigmoid" => Head::Sigmoid { class_names },
        other => return Err(format!("unknown head `{other}`")),
    };
    let normalizer = match v.get("normalizer") {
        None | Some(Value::Null) => None,
        Some(n) => Some((
            serde_json::from_value(field(n, "mean")?).map_err(|_| "normalizer `mean` is not a list of numbers")?,
            serde_json::from_value(field(n, "std")?).map_err(|_| "normalizer `std` is not a list of numbers")?,
        )),
    };
    // Older sidecars have no `categories`: every feature is a number.
    let categories = match v.get("categories") {
        None | Some(Value::Null) => Vec::new(),
        Some(c) => {
            serde_json::from_value(c.clone()).map_err(|_| "`categories` is not a list of {column, position, values}")?
        }
    };
    let tokens = match v.get("tokens") {
        None | Some(Value::Null) => None,
        Some(t) => Some(serde_json::from_value(t.clone()).map_err(|_| "`tokens` is not {column, length, tokens}")?),
    };
    Ok(ExportModel {
        name: v.get("name").and_then(Value::as_str).unwrap_or("model").to_string(),
        input,
        shape,
        feature_names: strings(field(v, "feature_names")?, "feature_names")?,
        target: v.get("target").and_then(Value::as_str).unwrap_or_default().to_string(),
        normalizer,
        categories,
        tokens,
        sequence,
        layers,
        head,
    })
}

/// `meta`'s layers with the weights of a PyTorch-named state dict, moved
/// into them (not copied).
fn fill(mut meta: ExportModel, mut tensors: Vec<crate::checkpoint::NamedTensor>) -> Result<ExportModel, String> {
    for (i, layer) in meta.layers.iter_mut().enumerate() {
        for t in &mut layer.tensors {
            let name = format!("{i}.{}", t.name);
            let stored = tensors.iter_mut().find(|s| s.name == name).map(|s| &mut s.data);
            match (&mut t.data, stored) {
                (TorchTensor::F32(values), Some(Stored::F32(v))) if v.len() == values.len() => {
                    *values = std::mem::take(v)
                }
                (TorchTensor::F32(values), Some(Stored::F32(v))) => {
                    return Err(format!(
                        "tensor `{name}` holds {} values, the sidecar's layer needs {}",
                        v.len(),
                        values.len()
                    ))
                }
                (TorchTensor::F32(_), Some(other)) => {
                    return Err(format!("tensor `{name}` is {}, expected F32", other.dtype()))
                }
                (TorchTensor::F32(_), None) => return Err(format!("the weights have no tensor `{name}`")),
                // `num_batches_tracked` is not used at inference; keep it when present.
                (TorchTensor::I64(n), Some(Stored::I64(v))) => *n = std::mem::take(v),
                (TorchTensor::I64(_) | TorchTensor::U8(_), _) => {}
            }
        }
    }
    Ok(meta)
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// A temporary file in the target's folder, synced, renamed over `path`.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ExportError> {
    write_atomic_with(path, |out| out.write_all(bytes))
}

/// [`write_atomic`], of what `body` writes.
fn write_atomic_with(
    path: &Path,
    body: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<(), ExportError> {
    let err = |source| ExportError::Write { path: path.into(), source };
    let dir = parent(path);
    std::fs::create_dir_all(dir).map_err(err)?;
    crate::atomic_file::write_with(path, body).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::atomic_file::hostname;

    /// A folder named like a spec (`--out r.kyn`) is judged as a folder.
    #[test]
    fn a_folder_named_like_a_spec_is_a_folder() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("r.kyn");
        std::fs::create_dir(&folder).unwrap();
        let e = load(&folder).map(drop).unwrap_err().to_string();
        assert!(e.contains("the folder has no model.safetensors") && !e.contains("it is a spec"), "{e}");
        std::fs::write(dir.path().join("s.kyn"), "train:\n").unwrap();
        let e = load(&dir.path().join("s.kyn")).map(drop).unwrap_err().to_string();
        assert!(e.contains("it is a spec"), "{e}");
    }

    /// A disk that fills after `room` bytes.
    struct Filling {
        room: usize,
    }

    impl std::io::Write for Filling {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(std::io::Error::from_raw_os_error(28));
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            Ok(n)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A Burn export is the file Burn's own `NamedMpkFileRecorder` writes of
    /// the same module, byte for byte (a Burn upgrade that changed its
    /// format would show here), and loads back with it.
    #[test]
    fn a_burn_export_is_burns_own_record_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let model = graph::tiny(
            Head::Regression,
            vec![
                ExportLayer::dense(2, 3, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], vec![0.5, -0.5, 0.25], Activation::Relu),
                ExportLayer::dense(3, 1, vec![1.0, -2.0, 0.5], vec![0.1], Activation::Linear),
            ],
        );
        let ours = dir.path().join("ours.mpk");
        write(&model, Format::Burn, &ours).unwrap();
        to_model(&model, &host())
            .unwrap()
            .save_file(dir.path().join("burns"), &NamedMpkFileRecorder::<FullPrecisionSettings>::new())
            .unwrap();
        assert_eq!(std::fs::read(&ours).unwrap(), std::fs::read(dir.path().join("burns.mpk")).unwrap());
        let back = load(&ours).unwrap();
        assert_eq!(back.layers, model.layers);
    }

    /// A Burn record that meets a full disk says so (rmp_serde's own error
    /// said "error while writing multi-byte MessagePack value" only); one
    /// that fits is summed as the file will be.
    #[test]
    fn a_burn_record_on_a_full_disk_says_the_disks_error() {
        let record: Vec<f32> = (0..10_000).map(|i| i as f32).collect();
        for room in [0, 1, 3, 1000] {
            let e = write_mpk(&mut Filling { room }, &record).expect_err("full");
            assert_eq!(e.raw_os_error(), Some(28), "{e}");
        }
        let mut bytes = Vec::new();
        let (len, crc) = write_mpk(&mut bytes, &record).unwrap();
        assert_eq!((len, crc), (bytes.len() as u64, crate::checkpoint::format::crc32c_append(0, &bytes)));
    }

    /// An ONNX model or a safetensors file another tool wrote is never
    /// replaced by an export; KynML's own earlier export is.
    #[test]
    fn another_tools_model_file_is_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let at = |name: &str| dir.path().join(name);
        let onnx = |producer: &str| {
            let mut b = vec![0x08, 0x08, 0x12, producer.len() as u8];
            b.extend(producer.as_bytes());
            b
        };
        std::fs::write(at("torch.onnx"), onnx("pytorch")).unwrap();
        std::fs::write(at("ours.onnx"), onnx("kynml")).unwrap();
        let refused = check_target(Format::Onnx, &at("torch.onnx")).unwrap_err().to_string();
        assert!(refused.contains("is not an ONNX model KynML exported"), "{refused}");
        check_target(Format::Onnx, &at("ours.onnx")).unwrap();

        // A safetensors file with no sidecar, or one whose sidecar names
        // other files, is another tool's; one its sidecar names is ours.
        let weights = crate::checkpoint::encode_safetensors(&[], &Default::default());
        for name in ["torch.safetensors", "w.safetensors"] {
            std::fs::write(at(name), &weights).unwrap();
        }
        let refused = check_target(Format::Safetensors, &at("torch.safetensors")).unwrap_err().to_string();
        assert!(refused.contains("refusing to overwrite it"), "{refused}");
        let sidecar = |files: Value| serde_json::json!({"format": torch::SIDECAR_FORMAT, "weights": {"files": files}});
        std::fs::write(at("w.json"), sidecar(serde_json::json!({"w.mpk": {}})).to_string()).unwrap();
        assert!(check_target(Format::Safetensors, &at("w.safetensors")).is_err());
        std::fs::write(at("w.json"), sidecar(serde_json::json!({"w.safetensors": {}})).to_string()).unwrap();
        check_target(Format::Safetensors, &at("w.safetensors")).unwrap();
        // A sidecar from before sidecars named their files.
        std::fs::write(at("w.json"), serde_json::json!({"format": torch::SIDECAR_FORMAT}).to_string()).unwrap();
        check_target(Format::Safetensors, &at("w.safetensors")).unwrap();
        // Named as a spec or as rows, an export could not be read back:
        // refused before it is written (predict then said "it is a CSV file").
        for (format, name, said) in [
            (Format::Safetensors, "w.csv", "a .csv file is read as a CSV file of rows"),
            (Format::Onnx, "m.TSV", "a .tsv file is read as a CSV file of rows"),
            (Format::Safetensors, "x.kyn", "a .kyn file is read as a spec"),
            // The users' spec's `models/deepnet.pt`, kept when `torchscript` became `onnx`.
            (Format::Onnx, "deepnet.pt", "an ONNX export named .pt would be taken for a PyTorch file"),
            (Format::Safetensors, "w.PTH", "a safetensors export named .pth would be taken for a PyTorch file"),
        ] {
            let refused = check_target(format, &at(name)).unwrap_err().to_string();
            assert!(refused.contains(said) && !at(name).exists(), "{refused}");
        }
        // `.KYN` is no spec's name to `load`: an export may take it.
        check_target(Format::Safetensors, &at("w.KYN")).unwrap();
    }

    /// A FIFO at the export's path or at its sidecar's is refused without
    /// being opened (opening one waits for a writer: `check` used to hang).
    #[cfg(unix)]
    #[test]
    fn a_named_pipe_at_the_export_or_its_sidecar_is_refused_unopened() {
        let dir = tempfile::tempdir().unwrap();
        for (format, name, pipe) in [
            (Format::Onnx, "m.onnx", "m.onnx"),
            (Format::Safetensors, "w.safetensors", "w.safetensors"),
            (Format::Safetensors, "s.safetensors", "s.json"),
            (Format::Burn, "b.mpk", "b.json"),
        ] {
            let made = std::process::Command::new("mkfifo").arg(dir.path().join(pipe)).status().unwrap();
            assert!(made.success());
            let path = dir.path().join(name);
            let (send, recv) = std::sync::mpsc::channel();
            std::thread::spawn(move || send.send(check_target(format, &path).map_err(|e| e.to_string())));
            let result = recv.recv_timeout(std::time::Duration::from_secs(20)).expect("check_target opened the FIFO");
            let message = result.expect_err(name);
            assert!(message.contains(pipe) && message.contains("named pipe (FIFO)"), "{message}");
        }
    }

    /// Reading an export never opens a named pipe at the weights or the
    /// sidecar (predict and eval hung on one); weights without their sidecar
    /// say what is missing.
    #[cfg(unix)]
    #[test]
    fn a_named_pipe_or_a_missing_sidecar_is_said_when_loading() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().join("w.safetensors");
        std::fs::write(&w, b"weights").unwrap();
        let error = load(&w).map(drop).expect_err("no sidecar");
        assert!(matches!(error, ExportError::Invalid { problem: LoadProblem::Missing, .. }), "{error:?}");
        let message = error.to_string();
        assert!(message.contains("its sidecar") && message.contains("w.json is missing"), "{message}");
        let nothing = load(&dir.path().join("gone")).map(drop).expect_err("nothing there");
        assert!(matches!(nothing, ExportError::Invalid { problem: LoadProblem::Missing, .. }), "{nothing:?}");
        let damaged = dir.path().join("d.safetensors");
        std::fs::write(&damaged, b"weights").unwrap();
        std::fs::write(dir.path().join("d.json"), b"{ not json").unwrap();
        let error = load(&damaged).map(drop).expect_err("damaged");
        assert!(matches!(error, ExportError::Invalid { problem: LoadProblem::Damaged, .. }), "{error:?}");
        assert!(message.contains("which says what model the weights are;"), "{message}");
        for (weights, pipe) in [("p.safetensors", "p.safetensors"), ("w.safetensors", "w.json"), ("b.mpk", "b.mpk")] {
            assert!(std::process::Command::new("mkfifo").arg(dir.path().join(pipe)).status().unwrap().success());
            let path = dir.path().join(weights);
            let (send, recv) = std::sync::mpsc::channel();
            std::thread::spawn(move || send.send(load(&path).map(drop).map_err(|e| e.to_string())));
            let result = recv.recv_timeout(std::time::Duration::from_secs(20)).expect("load opened the FIFO");
            let message = result.expect_err(weights);
            assert!(message.contains(pipe) && message.contains("named pipe (FIFO)"), "{message}");
        }
    }

    /// A Burn export killed while writing left its staging folder, a
    /// part-written record as large as the model: the next export in that
    /// folder removes it, never one of a process that still runs.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_dead_burn_exports_staging_folder_goes_with_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dir.path().join(format!("{STAGING}999999999@{}-x1", hostname()));
        let alive = dir.path().join(format!("{STAGING}{}@{}-x2", std::process::id(), hostname()));
        // Another machine's, in a shared folder: its process is not ours to see.
        let elsewhere = dir.path().join(format!("{STAGING}999999999@{}.other-x3", hostname()));
        for d in [&dead, &alive, &elsewhere] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("model.mpk"), b"half").unwrap();
        }
        let model = graph::tiny(
            Head::Regression,
            vec![ExportLayer::dense(2, 1, vec![1.0, 2.0], vec![0.5], Activation::Linear)],
        );
        write(&model, Format::Burn, &dir.path().join("m.mpk")).unwrap();
        assert!(!dead.exists() && alive.exists() && elsewhere.exists());
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left.len(), 4, "m.mpk, m.json, the live one and the other machine's: {left:?}");
    }

    /// An export whose folder is still to be made, in a folder that cannot
    /// be written, names both (it named only the one above).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_folder_that_cannot_be_made_is_named() {
        let message = check_writable(Path::new("/proc/kynml-nope/m.onnx")).expect_err("procfs").to_string();
        assert!(message.contains("its folder /proc/kynml-nope cannot be made in /proc:"), "{message}");
        let message = check_writable(Path::new("/proc/m.onnx")).expect_err("procfs").to_string();
        assert!(message.contains("its folder /proc cannot be written:"), "{message}");
    }

    /// A sidecar whose sizes its weights file cannot hold is refused before
    /// its skeleton is made (a 2^40-wide input asked for 4 TiB and aborted
    /// the process); one that fits is read.
    #[test]
    fn a_sidecar_larger_than_its_weights_is_refused_before_allocating() {
        let sidecar = |input: u64| {
            serde_json::json!({
                "format": torch::SIDECAR_FORMAT, "format_version": 1, "name": "M", "target": "y",
                "input": input, "input_layout": "values", "input_shape": [input], "feature_names": [],
                "categories": [], "normalizer": null, "sequence": null, "tokens": null,
                "head": {"kind": "regression", "class_names": []},
                "layers": [{"kind": "dense", "in_features": input, "out_features": 1, "activation": "linear"}],
            })
        };
        let (message, problem) = from_sidecar(&sidecar(1 << 39), 460).map(drop).expect_err("too large");
        assert_eq!(problem, LoadProblem::Damaged);
        assert!(
            message.contains(&format!("hold {} values, more than its weights file of 460 bytes", (1u64 << 39) + 1)),
            "{message}"
        );
        // Three weights and a bias: 16 bytes of f32 fit in 16.
        assert!(from_sidecar(&sidecar(3), 16).is_ok());
        assert!(from_sidecar(&sidecar(3), 7).is_err());
        // A newer KynML's sidecar is told apart from a damaged one.
        let mut newer = sidecar(3);
        newer["format_version"] = (torch::SIDECAR_VERSION + 1).into();
        let (message, problem) = from_sidecar(&newer, 16).map(drop).expect_err("newer");
        assert_eq!(problem, LoadProblem::NewerVersion, "{message}");
    }

    /// Tied logits give the first class, and a sigmoid's logit of 0 the
    /// first, as training and `evaluate` decide (`predict` took the last of
    /// tied probabilities): a model of zero weights ties every row.
    #[test]
    fn predictions_break_ties_as_training_does() {
        let cpu = kynml_backend::select(kynml_backend::DeviceChoice::Cpu).unwrap();
        for (kind, units, names, first) in [
            ("softmax", 3, vec!["setosa", "versicolor", "virginica"], "setosa"),
            ("sigmoid", 1, vec!["no", "yes"], "no"),
        ] {
            let sidecar = serde_json::json!({
                "format": torch::SIDECAR_FORMAT, "format_version": 1, "name": "M", "target": "y",
                "input": 2, "input_layout": "values", "input_shape": [2], "feature_names": ["a", "b"],
                "categories": [], "normalizer": null, "sequence": null, "tokens": null,
                "head": {"kind": kind, "class_names": names},
                "layers": [{"kind": "dense", "in_features": 2, "out_features": units, "activation": "linear"}],
            });
            let model = from_sidecar(&sidecar, u64::MAX).unwrap();
            let p = crate::predict::Predictor::new(model, &cpu).unwrap().predict(&[0.5, -1.0, 3.0, 2.0]).unwrap();
            assert_eq!(p.labels.unwrap(), [first, first], "{kind}");
        }
    }

    /// Extensions are told apart whatever their case, as the export's check does.
    #[test]
    fn upper_case_onnx_and_mpk_names_are_told() {
        let dir = tempfile::tempdir().unwrap();
        for (name, says) in [
            ("m.ONNX", "ONNX files are for other runtimes"),
            ("m.MPK", "rename it (and nothing else)"),
            // `kynml predict rows.csv RUN`: the arguments swapped.
            ("rows.CSV", "the model comes first: `kynml predict RUN ROWS.csv`"),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, b"\x80").unwrap();
            let message = load(&path).map(drop).expect_err(name).to_string();
            assert!(message.contains(says), "{message}");
        }
    }
}
