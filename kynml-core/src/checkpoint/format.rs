//! The checkpoint file: one file holding everything a resume needs, laid out
//! so that a reader can tell a whole checkpoint from a cut or damaged one.
//!
//! ```text
//! offset   size  field
//! 0        8     magic `KYNCKPT\0`
//! 8        4     format version, u32 little-endian (1)
//! 12       n     a safetensors payload: u64 LE header length, the JSON header
//!                (tensor name -> dtype, shape, data_offsets, plus
//!                `__metadata__` with `format_version`, `model_hash` and
//!                `kynml_state`), then the raw little-endian tensor bytes
//! 12+n     32    footer: u64 LE length of everything before the footer
//!                (12+n), u32 LE CRC32C of those bytes, 12 zero bytes, and
//!                the magic again
//! ```
//!
//! The footer comes last so that a file cut anywhere loses it, and the CRC
//! covers every byte before it, so one flipped bit anywhere is caught. The
//! middle is plain safetensors ([`encode_safetensors`] writes it alone), so
//! Python's `safetensors` package reads a checkpoint's tensors once the 12-byte
//! prefix and the 32-byte footer are cut off.
//!
//! [`decode`] trusts nothing in the file: every length and offset is checked
//! against the bytes actually present before anything is sliced or allocated,
//! so a hostile file costs at most a small multiple of its own size in memory
//! and never panics.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{self, Write as _};
use std::path::PathBuf;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

/// The first (and last) eight bytes of every checkpoint.
pub const MAGIC: [u8; 8] = *b"KYNCKPT\0";
/// The format version this code writes, and the newest it reads.
///
/// A later version must keep the frame: the magic at both ends, and a
/// footer holding the body's length and its CRC-32C over every byte before
/// the footer. A file of a newer version whose frame holds together is
/// named as newer; one whose sum fails is named as damaged, whatever its
/// version reads (a flipped bit of the version is damage, not an upgrade).
pub const FORMAT_VERSION: u32 = 1;

/// Magic and version.
const PREFIX_LEN: usize = 12;
const FOOTER_LEN: usize = 32;
/// Prefix, an 8-byte header length, the shortest header (`{}`), footer.
const MIN_FILE_LEN: usize = PREFIX_LEN + 8 + 2 + FOOTER_LEN;
/// safetensors' own limit on the JSON header.
const MAX_HEADER_LEN: u64 = 100_000_000;
/// numpy's limit on dimensions; a longer shape is damage, not a tensor.
const MAX_RANK: usize = 64;
/// The resume state is for counters, seeds, small settings and the epochs'
/// records (about 300 bytes an epoch: 47 MiB holds some 160,000 epochs;
/// 16 MiB, the cap before, ran out near 55,000); arrays (a shuffle order,
/// say) belong in tensors. The state is a string inside the header, where
/// each `"` and `\` of its JSON is escaped: at worst twice its length, so
/// that a state at the cap leaves about 1.4 MB of [`MAX_HEADER_LEN`] for the
/// tensors' entries (a realistic state, escaped by a fifth or so, leaves
/// far more); a header past the limit is refused when encoding.
pub const MAX_STATE_LEN: usize = 47 << 20;

const METADATA_KEY: &str = "__metadata__";
const VERSION_KEY: &str = "format_version";
const MODEL_HASH_KEY: &str = "model_hash";
const STATE_KEY: &str = "kynml_state";

/// A resume point: named tensors (weights, optimizer moments, counters) and
/// the rest of the loop's state as JSON (epoch, step, RNG states, early
/// stopping, scheduler, loss scale, data cursor...).
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Weights, optimizer state and other arrays, each under its own name.
    pub tensors: Vec<NamedTensor>,
    /// Everything else a resume needs (counters, generator states, history)
    /// as JSON text, always valid: a long run's history is made once an
    /// epoch and copied at each save, never built again (see
    /// [`Checkpoint::state`]).
    state: String,
    /// The hash of the model this checkpoint was written for, as read back by
    /// [`decode`]; `None` for a checkpoint built in memory. [`encode`] takes
    /// the hash as an argument instead and ignores this field, so the code
    /// that saves always names the model it saves for.
    pub model_hash: Option<String>,
}

/// One tensor of a checkpoint: a name, a shape and the values.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedTensor {
    /// Unique within a checkpoint (`model.0.weight`, say); `__metadata__` is reserved.
    pub name: String,
    /// Row-major; `[]` is a scalar holding one value.
    pub shape: Vec<usize>,
    /// The values, row-major: exactly as many as the product of `shape`.
    pub data: TensorData,
}

/// A tensor the safetensors writer reads, its values borrowed (from a
/// [`NamedTensor`], or from a model being exported).
#[derive(Debug, Clone)]
pub struct TensorView<'a> {
    /// Unique within a file; `__metadata__` is reserved.
    pub name: std::borrow::Cow<'a, str>,
    /// Row-major; `[]` is a scalar holding one value.
    pub shape: &'a [usize],
    /// Exactly as many values as the product of `shape`.
    pub data: &'a TensorData,
}

impl NamedTensor {
    /// This tensor, borrowed.
    pub fn view(&self) -> TensorView<'_> {
        TensorView { name: self.name.as_str().into(), shape: &self.shape, data: &self.data }
    }
}

fn views(tensors: &[NamedTensor]) -> Vec<TensorView<'_>> {
    tensors.iter().map(NamedTensor::view).collect()
}

/// A tensor's values, in one of the element types a checkpoint stores.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    /// 32-bit floats: weights, batchnorm statistics.
    F32(Vec<f32>),
    /// 64-bit signed integers: counts and other whole numbers.
    I64(Vec<i64>),
    /// Opaque bytes: state that is not a plain array of numbers (an
    /// optimizer's per-parameter record, say).
    U8(Vec<u8>),
}

/// Why a checkpoint could not be read, written or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The bytes do not start with [`MAGIC`]: the file is something else.
    #[error(
        "not a KynML checkpoint: the file does not start with `KYNCKPT`; \
         move it away or choose another checkpoint path"
    )]
    NotACheckpoint,

    /// `expected` is the length the file's surviving bytes call for (at least
    /// the smallest possible checkpoint); `exact` when they tell all of it
    /// (the whole header survived), a lower bound otherwise.
    #[error(
        "checkpoint is truncated: expected {}{expected} bytes, found {found}; it was cut short \
         while being written or copied, so restore a complete copy or delete it to start over",
        if *exact { "" } else { "at least " }
    )]
    Truncated {
        /// The length in bytes that the file's surviving bytes call for.
        expected: u64,
        /// Whether `expected` is the file's whole length or only a lower bound.
        exact: bool,
        /// The length in bytes of the file as read.
        found: u64,
    },

    /// The file is damaged: its checksum, framing or header does not hold together.
    #[error("checkpoint is corrupt: {reason}; restore a good copy or delete it to start over")]
    Corrupt {
        /// What does not hold together, in words.
        reason: String,
    },

    /// The file was written by a newer KynML, in a format version this one cannot read.
    #[error(
        "checkpoint format version {found} is newer than this KynML reads (up to {supported}); \
         upgrade KynML to resume from it"
    )]
    NewerFormat {
        /// The format version the file declares.
        found: u32,
        /// The newest format version this build reads, [`FORMAT_VERSION`].
        supported: u32,
    },

    /// The checkpoint's model hash is not the hash of the model being trained.
    #[error(
        "checkpoint was written for a different model (hash `{found_hash}`, this model's is \
         `{expected_hash}`); choose another checkpoint path or delete the old checkpoint"
    )]
    ModelMismatch {
        /// The hash of the model being trained.
        expected_hash: String,
        /// The hash the checkpoint records; empty for a checkpoint built in memory.
        found_hash: String,
    },

    /// A checkpoint handed to the writer that cannot be encoded: a programming
    /// error in the caller, reported before anything is written.
    #[error("tensor `{name}` cannot be saved: {reason}")]
    InvalidTensor {
        /// The tensor's name.
        name: String,
        /// What is wrong: a duplicate or reserved name, or a shape that does not fit the data.
        reason: String,
    },

    /// The JSON state is longer than [`MAX_STATE_LEN`] bytes.
    #[error("checkpoint state is {len} bytes of JSON, more than the {max} allowed; keep large arrays in tensors")]
    StateTooLarge {
        /// The state's length as JSON, in bytes.
        len: usize,
        /// The limit in bytes, [`MAX_STATE_LEN`].
        max: usize,
    },

    /// The header (the state, escaped, and the tensors' entries) is longer
    /// than safetensors reads back.
    #[error(
        "checkpoint header would be {len} bytes, more than the {max} safetensors reads back; keep large arrays in \
         tensors, and fewer of them"
    )]
    HeaderTooLarge {
        /// The header's length in bytes.
        len: usize,
        /// The limit in bytes, safetensors' own.
        max: u64,
    },

    /// A file or folder could not be read, written, created or renamed.
    #[error("{}: {source}", io_what(path))]
    Io {
        /// The file or folder concerned: the checkpoint, its folder, or a temporary file beside it.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// A file that is not a KynML checkpoint is at the checkpoint path; it is never overwritten.
    #[error(
        "{} exists and is not a KynML checkpoint{}; refusing to overwrite it \
         (move it away or choose another checkpoint path)",
        path.display(),
        kind.map_or(String::new(), |k| format!(" ({k})"))
    )]
    Foreign {
        /// The file in the way.
        path: PathBuf,
        /// What the file seems to be, when its first bytes say.
        kind: Option<&'static str>,
    },

    /// Another run, still going, writes its checkpoints to this path.
    #[error(
        "another run that is still going writes its checkpoints to {} (it holds {}); wait for it to end, or give \
         this run another checkpoint path",
        path.display(),
        lock.display()
    )]
    InUse {
        /// The checkpoint path.
        path: PathBuf,
        /// The lock file the other run holds.
        lock: PathBuf,
    },

    /// The writer's thread is gone (it panicked); the checkpoint was not written.
    #[error("the checkpoint writer stopped unexpectedly; the checkpoint was not written")]
    WriterStopped,
}

impl Checkpoint {
    /// A checkpoint with no model hash; [`encode`] is given the hash instead.
    pub fn new(tensors: Vec<NamedTensor>, state: Value) -> Self {
        Checkpoint { tensors, state: state.to_string(), model_hash: None }
    }

    /// [`Checkpoint::new`] from the state's JSON text, which the caller made
    /// with serde_json (valid JSON).
    pub(crate) fn with_state_text(tensors: Vec<NamedTensor>, state: String) -> Self {
        Checkpoint { tensors, state, model_hash: None }
    }

    /// The state as JSON text, exactly as saved.
    pub fn state(&self) -> &str {
        &self.state
    }

    /// The state as a JSON value.
    pub fn state_value(&self) -> Value {
        // Valid by construction: made by serde_json, or checked when read.
        serde_json::from_str(&self.state).unwrap_or(Value::Null)
    }

    /// `Ok` when this checkpoint was written for `expected_hash`; a checkpoint
    /// built in memory (no hash) never matches.
    pub fn check_model(&self, expected_hash: &str) -> Result<(), CheckpointError> {
        match self.model_hash.as_deref() {
            Some(found) if found == expected_hash => Ok(()),
            found => Err(CheckpointError::ModelMismatch {
                expected_hash: expected_hash.to_owned(),
                found_hash: found.unwrap_or_default().to_owned(),
            }),
        }
    }

    /// Checks what [`encode`] relies on: unique names, none of them
    /// `__metadata__`, and each shape holding exactly its data.
    pub fn validate(&self) -> Result<(), CheckpointError> {
        validate_tensors(&views(&self.tensors))
    }

    /// The tensor named `name`, or `None` when there is none.
    pub fn tensor(&self, name: &str) -> Option<&NamedTensor> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

impl NamedTensor {
    /// A tensor of 32-bit floats; `data` is row-major, as many values as `shape` holds.
    pub fn f32(name: impl Into<String>, shape: Vec<usize>, data: Vec<f32>) -> Self {
        NamedTensor { name: name.into(), shape, data: TensorData::F32(data) }
    }

    /// A tensor of 64-bit integers; `data` is row-major, as many values as `shape` holds.
    pub fn i64(name: impl Into<String>, shape: Vec<usize>, data: Vec<i64>) -> Self {
        NamedTensor { name: name.into(), shape, data: TensorData::I64(data) }
    }

    /// A one-dimensional byte tensor.
    pub fn bytes(name: impl Into<String>, data: Vec<u8>) -> Self {
        NamedTensor { name: name.into(), shape: vec![data.len()], data: TensorData::U8(data) }
    }
}

impl TensorData {
    /// The number of values (not bytes).
    pub fn len(&self) -> usize {
        match self {
            TensorData::F32(v) => v.len(),
            TensorData::I64(v) => v.len(),
            TensorData::U8(v) => v.len(),
        }
    }

    /// True when there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The safetensors name of the element type.
    pub fn dtype(&self) -> &'static str {
        self.kind().name()
    }

    /// The size of the values in bytes as stored: 4 per f32, 8 per i64, 1 per byte.
    pub fn byte_len(&self) -> usize {
        self.len() * self.kind().size()
    }

    fn kind(&self) -> Dtype {
        match self {
            TensorData::F32(_) => Dtype::F32,
            TensorData::I64(_) => Dtype::I64,
            TensorData::U8(_) => Dtype::U8,
        }
    }

    /// Writes the values as little-endian bytes, a piece at a time through
    /// a small buffer (filling a zeroed region chunk by chunk compiles to
    /// plain copies, several times faster than value by value), so that a
    /// large tensor is never copied whole.
    fn write_le(&self, out: &mut impl io::Write) -> io::Result<()> {
        const PIECE: usize = 64 << 10;
        let mut buffer = vec![0u8; PIECE];
        match self {
            TensorData::F32(v) => v.chunks(PIECE / 4).try_for_each(|c| {
                let dst = &mut buffer[..c.len() * 4];
                dst.chunks_exact_mut(4).zip(c).for_each(|(d, x)| d.copy_from_slice(&x.to_le_bytes()));
                out.write_all(dst)
            }),
            TensorData::I64(v) => v.chunks(PIECE / 8).try_for_each(|c| {
                let dst = &mut buffer[..c.len() * 8];
                dst.chunks_exact_mut(8).zip(c).for_each(|(d, x)| d.copy_from_slice(&x.to_le_bytes()));
                out.write_all(dst)
            }),
            TensorData::U8(v) => out.write_all(v),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
enum Dtype {
    F32,
    I64,
    U8,
}

impl Dtype {
    fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "F32",
            Dtype::I64 => "I64",
            Dtype::U8 => "U8",
        }
    }

    fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::I64 => 8,
            Dtype::U8 => 1,
        }
    }
}

/// The whole checkpoint file for `ckpt`, recording `model_hash` as the model
/// it belongs to.
///
/// # Panics
/// If `ckpt` fails [`Checkpoint::validate`], its state is longer than
/// [`MAX_STATE_LEN`] as JSON, or its header (the state escaped, and an entry
/// for each tensor) is longer than safetensors reads back; the writer checks
/// all three and reports them as errors instead, as [`try_encode`] does.
pub fn encode(ckpt: &Checkpoint, model_hash: &str) -> Vec<u8> {
    try_encode(ckpt, model_hash).unwrap_or_else(|e| panic!("cannot encode checkpoint: {e}"))
}

/// [`encode`], with what it panics on returned as an error
/// ([`CheckpointError::InvalidTensor`], [`CheckpointError::StateTooLarge`],
/// [`CheckpointError::HeaderTooLarge`]).
pub fn try_encode(ckpt: &Checkpoint, model_hash: &str) -> Result<Vec<u8>, CheckpointError> {
    let header = checkpoint_header(ckpt, model_hash)?;
    let data_len: usize = ckpt.tensors.iter().map(|t| t.data.byte_len()).sum();
    let mut out = Vec::with_capacity(PREFIX_LEN + 8 + header.len() + data_len + FOOTER_LEN);
    write_checkpoint(&mut out, &header, &ckpt.tensors).expect("writing to memory never fails");
    Ok(out)
}

/// The safetensors header of `ckpt`'s file, after the checks that
/// [`encode`] would panic on: what [`write_checkpoint`] writes the file from.
pub(super) fn checkpoint_header(ckpt: &Checkpoint, model_hash: &str) -> Result<Vec<u8>, CheckpointError> {
    ckpt.validate()?;
    let state = ckpt.state.as_str();
    if state.len() > MAX_STATE_LEN {
        return Err(CheckpointError::StateTooLarge { len: state.len(), max: MAX_STATE_LEN });
    }
    let version = FORMAT_VERSION.to_string();
    let metadata = BTreeMap::from([(VERSION_KEY, version.as_str()), (MODEL_HASH_KEY, model_hash), (STATE_KEY, state)]);
    let header = safetensors_header(&views(&ckpt.tensors), &metadata);
    // Never written when it could not be read back.
    if header.len() as u64 > MAX_HEADER_LEN {
        return Err(CheckpointError::HeaderTooLarge { len: header.len(), max: MAX_HEADER_LEN });
    }
    Ok(header)
}

/// Writes the checkpoint file of `tensors` under `header` (from
/// [`checkpoint_header`]) to `out`, laid out as the module describes, a
/// tensor at a time: the CRC and length of the footer are kept as the bytes
/// pass, so the file is never held whole in memory.
pub(super) fn write_checkpoint(out: &mut impl io::Write, header: &[u8], tensors: &[NamedTensor]) -> io::Result<()> {
    let mut body = Summed { out, crc: 0, len: 0 };
    body.write_all(&MAGIC)?;
    body.write_all(&FORMAT_VERSION.to_le_bytes())?;
    write_safetensors(&mut body, header, &views(tensors))?;
    let (crc, len) = (body.crc, body.len);
    out.write_all(&len.to_le_bytes())?;
    out.write_all(&crc.to_le_bytes())?;
    out.write_all(&[0; 12])?;
    out.write_all(&MAGIC)
}

/// A writer that passes bytes on, keeping their CRC-32C and count.
pub(crate) struct Summed<'a, W: io::Write + ?Sized> {
    pub(crate) out: &'a mut W,
    pub(crate) crc: u32,
    pub(crate) len: u64,
}

impl<W: io::Write + ?Sized> io::Write for Summed<'_, W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let n = self.out.write(bytes)?;
        self.crc = crc32c_append(self.crc, &bytes[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// A plain safetensors file of `tensors`, in order, with `metadata` as its
/// `__metadata__` (left out when empty): what Python's
/// `safetensors.numpy.load` and `safetensors.torch.load` read.
///
/// # Panics
/// If the tensors fail the checks of [`Checkpoint::validate`], or the header
/// is longer than safetensors reads back.
pub fn encode_safetensors(tensors: &[NamedTensor], metadata: &BTreeMap<String, String>) -> Vec<u8> {
    try_encode_safetensors(tensors, metadata).unwrap_or_else(|e| panic!("cannot encode safetensors: {e}"))
}

/// [`encode_safetensors`], with tensors that fail its checks (a repeated or
/// reserved name, values that do not fill their shape) as an error.
pub fn try_encode_safetensors(
    tensors: &[NamedTensor],
    metadata: &BTreeMap<String, String>,
) -> Result<Vec<u8>, CheckpointError> {
    let tensors = views(tensors);
    let header = plan_safetensors(&tensors, metadata)?;
    let mut out = Vec::with_capacity(8 + header.len() + tensors.iter().map(|t| t.data.byte_len()).sum::<usize>());
    write_safetensors(&mut out, &header, &tensors).expect("writing to memory never fails");
    Ok(out)
}

/// The header of a plain safetensors file of `tensors`, in order, with
/// `metadata` (see [`encode_safetensors`]), after its checks: what
/// [`stream_safetensors`] writes the file from.
pub fn plan_safetensors(
    tensors: &[TensorView],
    metadata: &BTreeMap<String, String>,
) -> Result<Vec<u8>, CheckpointError> {
    validate_tensors(tensors)?;
    let header = safetensors_header(tensors, metadata);
    if header.len() as u64 > MAX_HEADER_LEN {
        return Err(CheckpointError::HeaderTooLarge { len: header.len(), max: MAX_HEADER_LEN });
    }
    Ok(header)
}

/// Writes the safetensors file of `tensors` under `header` (from
/// [`plan_safetensors`] for the same tensors) to `out`, a piece at a time,
/// so that the file is never held whole in memory. Returns its length and
/// CRC-32C.
pub fn stream_safetensors(
    out: &mut (impl io::Write + ?Sized),
    header: &[u8],
    tensors: &[TensorView],
) -> io::Result<(u64, u32)> {
    let mut summed = Summed { out, crc: 0, len: 0 };
    write_safetensors(&mut summed, header, tensors)?;
    Ok((summed.len, summed.crc))
}

/// The JSON header, padded with spaces so that the data starts 8-byte aligned
/// (as the reference implementation does).
fn safetensors_header<K: AsRef<str> + Ord + serde::Serialize, V: serde::Serialize>(
    tensors: &[TensorView],
    metadata: &BTreeMap<K, V>,
) -> Vec<u8> {
    /// An entry of the header, its fields in the order of their names, as
    /// a JSON object's keys are kept; serialised straight to bytes (the
    /// state, the most of a long run's header, is not copied on the way).
    #[derive(serde::Serialize)]
    #[serde(untagged)]
    enum Entry<'a, M> {
        Metadata(&'a M),
        Tensor { data_offsets: [usize; 2], dtype: &'static str, shape: &'a [usize] },
    }
    let mut map = BTreeMap::new();
    if !metadata.is_empty() {
        map.insert(METADATA_KEY, Entry::Metadata(metadata));
    }
    let mut offset = 0;
    for t in tensors {
        let end = offset + t.data.byte_len();
        map.insert(
            t.name.as_ref(),
            Entry::Tensor { data_offsets: [offset, end], dtype: t.data.dtype(), shape: t.shape },
        );
        offset = end;
    }
    // Serialising strings, numbers and maps of them cannot fail.
    let mut header = serde_json::to_vec(&map).unwrap_or_default();
    header.resize(header.len().next_multiple_of(8), b' ');
    header
}

fn write_safetensors(out: &mut impl io::Write, header: &[u8], tensors: &[TensorView]) -> io::Result<()> {
    out.write_all(&(header.len() as u64).to_le_bytes())?;
    out.write_all(header)?;
    tensors.iter().try_for_each(|t| t.data.write_le(out))
}

fn validate_tensors(tensors: &[TensorView]) -> Result<(), CheckpointError> {
    let mut names = BTreeSet::new();
    for t in tensors {
        let invalid = |reason: String| CheckpointError::InvalidTensor { name: t.name.clone().into_owned(), reason };
        if t.name == METADATA_KEY {
            return Err(invalid("the name `__metadata__` is reserved by safetensors".into()));
        }
        if !names.insert(t.name.as_ref()) {
            return Err(invalid("another tensor has the same name".into()));
        }
        if t.shape.len() > MAX_RANK {
            return Err(invalid(format!("{} dimensions, more than the {MAX_RANK} allowed", t.shape.len())));
        }
        let numel = t.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        if numel != Some(t.data.len()) {
            return Err(invalid(format!("shape {:?} does not hold the {} values given", t.shape, t.data.len())));
        }
    }
    Ok(())
}

/// How many format versions past this one a later release may plausibly have written.
const PLAUSIBLE_NEWER: u32 = 100;

/// Reads a checkpoint file, checking its framing, checksum, version and every
/// tensor's layout. It never panics and never trusts a length before checking
/// it against `bytes`.
pub fn decode(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
    let found = bytes.len() as u64;
    let head = &bytes[..bytes.len().min(MAGIC.len())];
    if head != &MAGIC[..head.len()] {
        // The magic closes the file too: with that end whole, a damaged
        // start is a damaged checkpoint, not another kind of file.
        if bytes.len() >= MIN_FILE_LEN && bytes[bytes.len() - MAGIC.len()..] == MAGIC {
            return Err(checked_body(bytes)
                .err()
                .unwrap_or_else(|| corrupt("its first bytes are not the checkpoint's")));
        }
        return Err(CheckpointError::NotACheckpoint);
    }
    if bytes.len() < PREFIX_LEN {
        return Err(CheckpointError::Truncated { expected: MIN_FILE_LEN as u64, exact: false, found });
    }
    let version = read_u32(bytes, 8);
    if version == 0 {
        return Err(corrupt("format version 0 does not exist"));
    }
    if version > FORMAT_VERSION {
        // A damaged byte of the prefix reads as a far newer version: a
        // number no release could have reached, in a frame whose checksum
        // fails, is damage, not an upgrade to make.
        // A frame of ours whose checksum fails is damage too, whatever the
        // version reads: a newer release still sums what it writes.
        let damaged = version > FORMAT_VERSION + PLAUSIBLE_NEWER;
        return Err(match checked_body(bytes) {
            Err(e) if damaged || is_checksum_mismatch(&e) => e,
            _ => CheckpointError::NewerFormat { found: version, supported: FORMAT_VERSION },
        });
    }
    let body = checked_body(bytes)?;
    let (tensors, mut metadata) = decode_safetensors(&body[PREFIX_LEN..])?;

    let mut take = |key: &str| metadata.remove(key).ok_or_else(|| corrupt(format!("its header has no `{key}`")));
    let inner_version = take(VERSION_KEY)?;
    if inner_version != version.to_string() {
        return Err(corrupt(format!("its header says format version {inner_version}, its prefix says {version}")));
    }
    let model_hash = take(MODEL_HASH_KEY)?;
    let state_text = take(STATE_KEY)?;
    // Bounded by the header's own limit: checkpoints written under the
    // larger cap of 2026-11-26 that fit it still read back.
    // Read as a value (a number too large for one is refused here, not
    // later), so that `state_value` holds.
    serde_json::from_str::<Value>(&state_text).map_err(|e| corrupt(format!("its state is not valid JSON: {e}")))?;
    Ok(Checkpoint { tensors, state: state_text, model_hash: Some(model_hash) })
}

/// Everything before the footer, once the footer and the checksum agree with it.
fn checked_body(bytes: &[u8]) -> Result<&[u8], CheckpointError> {
    let n = bytes.len();
    let footer_ok = n >= MIN_FILE_LEN && {
        let footer = &bytes[n - FOOTER_LEN..];
        read_u64(footer, 0) == (n - FOOTER_LEN) as u64 && footer[12..24] == [0; 12] && footer[24..] == MAGIC
    };
    if !footer_ok {
        let (expected, exact) = expected_len(bytes);
        return Err(if expected > n as u64 {
            CheckpointError::Truncated { expected, exact, found: n as u64 }
        } else {
            corrupt("the footer at the end of the file is missing or damaged")
        });
    }
    let body = &bytes[..n - FOOTER_LEN];
    let (stored, computed) = (read_u32(bytes, n - FOOTER_LEN + 8), crc32c(body));
    if stored != computed {
        return Err(corrupt(format!("{CHECKSUM_MISMATCH} (stored {stored:08x}, computed {computed:08x})")));
    }
    Ok(body)
}

const CHECKSUM_MISMATCH: &str = "checksum mismatch";

fn is_checksum_mismatch(e: &CheckpointError) -> bool {
    matches!(e, CheckpointError::Corrupt { reason } if reason.starts_with(CHECKSUM_MISMATCH))
}

/// How long the file should be, as far as its surviving bytes tell: the
/// header length, then the header's own data offsets when all of it is there
/// (then the length is exact; before, a lower bound).
fn expected_len(bytes: &[u8]) -> (u64, bool) {
    let min = MIN_FILE_LEN as u64;
    let Some(len_bytes) = bytes.get(PREFIX_LEN..PREFIX_LEN + 8) else { return (min, false) };
    let header_len = u64::from_le_bytes(len_bytes.try_into().unwrap_or_default());
    if header_len > MAX_HEADER_LEN {
        return (min, false);
    }
    let header_end = (PREFIX_LEN + 8) as u64 + header_len;
    let mut expected = header_end + FOOTER_LEN as u64;
    let header = usize::try_from(header_end).ok().and_then(|end| bytes.get(PREFIX_LEN + 8..end));
    let mut exact = false;
    if let Some(Ok(header)) = header.map(serde_json::from_slice::<Header>) {
        let data_len = header.tensors.iter().map(|(_, e)| e.data_offsets[1]).max().unwrap_or(0);
        expected = expected.saturating_add(data_len);
        exact = true;
    }
    (expected.max(min), exact)
}

/// Whether the file at `path` is a whole plain safetensors file: its
/// tensors, as its header places them, end where the file does. Reads the
/// header alone, into typed entries as [`decode_safetensors`] does.
pub(crate) fn is_whole_safetensors(path: &std::path::Path) -> bool {
    use std::io::Read;
    let Ok(mut file) = std::fs::File::open(path) else { return false };
    let Ok(len) = file.metadata().map(|m| m.len()) else { return false };
    let mut prefix = [0u8; 8];
    if file.read_exact(&mut prefix).is_err() {
        return false;
    }
    let header_len = u64::from_le_bytes(prefix);
    if header_len > MAX_HEADER_LEN || header_len > len - 8 {
        return false;
    }
    let mut header = vec![0u8; header_len as usize];
    if file.read_exact(&mut header).is_err() {
        return false;
    }
    let Ok(header) = serde_json::from_slice::<Header>(&header) else { return false };
    let data_len = header.tensors.iter().map(|(_, e)| e.data_offsets[1]).max().unwrap_or(0);
    8 + header_len + data_len == len
}

/// Reads a plain safetensors file (F32, I64 and U8 tensors only): the tensors in
/// the order of their data (ties by name) and the `__metadata__` map.
pub fn decode_safetensors(bytes: &[u8]) -> Result<(Vec<NamedTensor>, BTreeMap<String, String>), CheckpointError> {
    if bytes.len() < 8 {
        return Err(corrupt(format!(
            "the tensor payload is {} bytes, shorter than its 8-byte header length",
            bytes.len()
        )));
    }
    let header_len = read_u64(bytes, 0);
    let rest = &bytes[8..];
    if header_len > rest.len() as u64 {
        return Err(corrupt(format!("header length {header_len} exceeds the {} bytes that follow", rest.len())));
    }
    if header_len > MAX_HEADER_LEN {
        return Err(corrupt(format!("header length {header_len} exceeds safetensors' limit of {MAX_HEADER_LEN}")));
    }
    let (header, data) = rest.split_at(header_len as usize);
    let header: Header =
        serde_json::from_slice(header).map_err(|e| corrupt(format!("its header is not valid: {e}")))?;

    let mut names = BTreeSet::new();
    let mut layout = Vec::with_capacity(header.tensors.len());
    for (name, entry) in header.tensors {
        if !names.insert(name.clone()) {
            return Err(corrupt(format!("tensor `{name}` appears twice in the header")));
        }
        layout.push(check_entry(name, entry, data.len())?);
    }
    // Sorting by (start, end) keeps empty tensors before a full one at the
    // same offset, which is where an encoder puts them.
    layout.sort_by(|a, b| (a.start, a.end, &a.name).cmp(&(b.start, b.end, &b.name)));
    let mut pos = 0;
    for t in &layout {
        if t.start < pos {
            return Err(corrupt(format!("tensor `{}` overlaps the tensor before it", t.name)));
        }
        if t.start > pos {
            return Err(corrupt(format!("data bytes {pos}..{} belong to no tensor", t.start)));
        }
        pos = t.end;
    }
    if pos != data.len() {
        return Err(corrupt(format!("the last {} data bytes belong to no tensor", data.len() - pos)));
    }

    let tensors = layout
        .into_iter()
        .map(|t| {
            let bytes = &data[t.start..t.end];
            let data = match t.dtype {
                Dtype::F32 => TensorData::F32(
                    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap_or_default())).collect(),
                ),
                Dtype::I64 => TensorData::I64(
                    bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or_default())).collect(),
                ),
                Dtype::U8 => TensorData::U8(bytes.to_vec()),
            };
            NamedTensor { name: t.name, shape: t.shape, data }
        })
        .collect();
    Ok((tensors, header.metadata))
}

struct Layout {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// One header entry, checked against the data area's length: offsets in
/// order and inside it, and a shape whose size (computed without overflow)
/// is exactly the span of its offsets.
fn check_entry(name: String, entry: Entry, data_len: usize) -> Result<Layout, CheckpointError> {
    let [start, end] = entry.data_offsets;
    if start > end {
        return Err(corrupt(format!("tensor `{name}` has data offsets [{start}, {end}] that run backwards")));
    }
    if end > data_len as u64 {
        return Err(corrupt(format!("tensor `{name}` ends at data byte {end}, past the {data_len} bytes present")));
    }
    let size = entry.dtype.size() as u64;
    let bytes = entry.shape.0.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).and_then(|n| n.checked_mul(size));
    if bytes != Some(end - start) {
        return Err(corrupt(format!(
            "tensor `{name}` of shape {:?} and dtype {} does not fill its {} data bytes",
            entry.shape.0,
            entry.dtype.name(),
            end - start
        )));
    }
    let shape = entry.shape.0.iter().map(|&d| usize::try_from(d)).collect::<Result<Vec<_>, _>>();
    let shape = shape.map_err(|_| corrupt(format!("tensor `{name}` has a dimension too large for this machine")))?;
    // Both offsets are at most `data_len`, so they fit in usize.
    Ok(Layout { name, dtype: entry.dtype, shape, start: start as usize, end: end as usize })
}

/// The safetensors header, parsed straight into typed entries so that a
/// hostile header cannot make the parser build large generic JSON trees.
struct Header {
    metadata: BTreeMap<String, String>,
    tensors: Vec<(String, Entry)>,
}

#[derive(Deserialize)]
struct Entry {
    dtype: Dtype,
    shape: Shape,
    data_offsets: [u64; 2],
}

/// A shape of at most [`MAX_RANK`] dimensions, refused as soon as the
/// parser sees one more.
struct Shape(Vec<u64>);

impl<'de> Deserialize<'de> for Header {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct HeaderVisitor;
        impl<'de> Visitor<'de> for HeaderVisitor {
            type Value = Header;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object of tensor entries")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Header, A::Error> {
                let mut metadata = None;
                let mut tensors = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == METADATA_KEY {
                        if metadata.is_some() {
                            return Err(de::Error::custom("`__metadata__` appears twice"));
                        }
                        metadata = Some(map.next_value::<BTreeMap<String, String>>()?);
                    } else {
                        tensors.push((key, map.next_value::<Entry>()?));
                    }
                }
                Ok(Header { metadata: metadata.unwrap_or_default(), tensors })
            }
        }
        deserializer.deserialize_map(HeaderVisitor)
    }
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ShapeVisitor;
        impl<'de> Visitor<'de> for ShapeVisitor {
            type Value = Shape;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a list of at most {MAX_RANK} dimensions")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
                let mut dims = Vec::new();
                while let Some(d) = seq.next_element::<u64>()? {
                    if dims.len() == MAX_RANK {
                        return Err(de::Error::custom(format!("a shape has more than {MAX_RANK} dimensions")));
                    }
                    dims.push(d);
                }
                Ok(Shape(dims))
            }
        }
        deserializer.deserialize_seq(ShapeVisitor)
    }
}

fn corrupt(reason: impl Into<String>) -> CheckpointError {
    CheckpointError::Corrupt { reason: reason.into() }
}

/// Callers have checked that `at + 4 <= bytes.len()`.
fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default())
}

/// Callers have checked that `at + 8 <= bytes.len()`.
fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default())
}

/// CRC-32C (Castagnoli, as in iSCSI and ext4), eight bytes at a time.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c_append(0, bytes)
}

/// The CRC-32C of the bytes whose CRC-32C is `crc` followed by `bytes`
/// (`crc32c_append(0, b)` is `crc32c(b)`).
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    const T: [[u32; 256]; 8] = crc32c_tables();
    let mut crc = !crc;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let lo = crc ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        crc = T[7][(lo & 0xff) as usize]
            ^ T[6][(lo >> 8 & 0xff) as usize]
            ^ T[5][(lo >> 16 & 0xff) as usize]
            ^ T[4][(lo >> 24) as usize]
            ^ T[3][c[4] as usize]
            ^ T[2][c[5] as usize]
            ^ T[1][c[6] as usize]
            ^ T[0][c[7] as usize];
    }
    for &b in chunks.remainder() {
        crc = crc >> 8 ^ T[0][((crc ^ u32::from(b)) & 0xff) as usize];
    }
    !crc
}

/// `t[0]` is the classic byte table of the reflected polynomial; `t[k][b]` is
/// the CRC of byte `b` followed by `k` zero bytes.
const fn crc32c_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { c >> 1 ^ 0x82f6_3b78 } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut i = 0;
    while i < 256 {
        let mut k = 1;
        while k < 8 {
            t[k][i] = t[k - 1][i] >> 8 ^ t[0][(t[k - 1][i] & 0xff) as usize];
            k += 1;
        }
        i += 1;
    }
    t
}

/// What an I/O error of a checkpoint was at: a temporary file (the
/// checkpoint being written, renamed over the path once whole) is said as
/// such, since its odd name is not one the user chose.
fn io_what(path: &std::path::Path) -> String {
    let temporary =
        path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.') && n.contains(".tmp-"));
    if temporary {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        format!("cannot write the checkpoint in {} (its temporary file {})", dir.display(), path.display())
    } else {
        format!("cannot access checkpoint file {}", path.display())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_failed_write_of_the_temporary_file_is_said_as_the_checkpoints() {
        let full = || std::io::Error::from_raw_os_error(28);
        let tmp = CheckpointError::Io { path: "ck/.run.ckpt.tmp-12-0".into(), source: full() }.to_string();
        assert!(
            tmp.starts_with("cannot write the checkpoint in ck (its temporary file ck/.run.ckpt.tmp-12-0): "),
            "{tmp}"
        );
        let own = CheckpointError::Io { path: "ck/run.ckpt".into(), source: full() }.to_string();
        assert!(own.starts_with("cannot access checkpoint file ck/run.ckpt: "), "{own}");
    }

    use super::*;
    use serde_json::json;

    fn sample() -> Checkpoint {
        Checkpoint::new(
            vec![
                NamedTensor::f32("dense0.weight", vec![2, 3], vec![0.5, -1.25, 3.0, 1e-7, -0.0, 42.0]),
                NamedTensor::f32("dense0.bias", vec![3], vec![0.1, 0.2, 0.3]),
                NamedTensor::f32("adam.m.dense0.bias", vec![0, 3], vec![]),
                NamedTensor::i64("adam.step", vec![], vec![1234]),
                NamedTensor::i64("data.order", vec![5], vec![4, 0, 3, 1, -2]),
            ],
            json!({
                "epoch": 7,
                "step": 1234,
                "rng": {"trainer": [1, 2, 3, 4], "dropout": "0x9e3779b97f4a7c15"},
                "early_stop": {"best": 0.125, "bad_epochs": 2},
                "scheduler": {"kind": "cosine", "t_max": 100},
                "loss_scale": 65536.0,
                "text": "quotes \" and \\ and ünïcode",
            }),
        )
    }

    /// A small checkpoint, so that the exhaustive tests stay fast.
    fn small() -> Vec<u8> {
        let ckpt = Checkpoint::new(
            vec![NamedTensor::f32("w", vec![2], vec![1.0, 2.0]), NamedTensor::i64("n", vec![], vec![3])],
            json!({"epoch": 1}),
        );
        encode(&ckpt, "abc")
    }

    /// Any safetensors payload framed as a checkpoint with a valid checksum,
    /// so that the payload checks themselves are what a test exercises.
    fn framed(payload: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(payload);
        let crc = crc32c(&out);
        out.extend_from_slice(&(out.len() as u64).to_le_bytes());
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&[0; 12]);
        out.extend_from_slice(&MAGIC);
        out
    }

    fn payload(header: &str, data: &[u8]) -> Vec<u8> {
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    const META: &str = r#""__metadata__":{"format_version":"1","model_hash":"h","kynml_state":"{}"}"#;

    fn hostile(entries: &str, data: &[u8]) -> CheckpointError {
        let header = if entries.is_empty() { format!("{{{META}}}") } else { format!("{{{META},{entries}}}") };
        decode(&framed(&payload(&header, data))).expect_err("a hostile header must be refused")
    }

    fn assert_corrupt(err: CheckpointError, needle: &str) {
        match err {
            CheckpointError::Corrupt { reason } => assert!(reason.contains(needle), "`{reason}` lacks `{needle}`"),
            other => panic!("expected Corrupt containing `{needle}`, got {other:?}"),
        }
    }

    fn crc32c_bytewise(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 { crc >> 1 ^ 0x82f6_3b78 } else { crc >> 1 };
            }
        }
        !crc
    }

    #[test]
    fn crc32c_matches_known_vectors() {
        assert_eq!(crc32c(b""), 0);
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        // In pieces, split anywhere, the same sum as whole.
        for at in 0..=9 {
            assert_eq!(crc32c_append(crc32c(&b"123456789"[..at]), &b"123456789"[at..]), 0xe306_9283, "split at {at}");
        }
        // RFC 3720, appendix B.4.
        assert_eq!(crc32c(&[0; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xff; 32]), 0x62a8_ab43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&ascending), 0x46dd_794e);
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for len in 0..bytes.len() {
            assert_eq!(crc32c(&bytes[..len]), crc32c_bytewise(&bytes[..len]), "length {len}");
        }
    }

    #[test]
    fn round_trip_keeps_tensors_state_and_hash() {
        let ckpt = sample();
        let bytes = encode(&ckpt, "mlp-128-512-256-1");
        let back = decode(&bytes).unwrap();
        assert_eq!(back.tensors, ckpt.tensors);
        assert_eq!(back.state, ckpt.state);
        assert_eq!(back.model_hash.as_deref(), Some("mlp-128-512-256-1"));
        assert_eq!(&bytes[..8], b"KYNCKPT\0");
        assert_eq!(&bytes[bytes.len() - 8..], b"KYNCKPT\0");
        assert_eq!(encode(&back, "mlp-128-512-256-1"), bytes, "encoding is deterministic");
    }

    #[test]
    fn tensors_larger_than_a_write_piece_round_trip_through_a_file() {
        // Written a 64 KiB piece at a time: values across several pieces and
        // a last piece cut short, for each element width.
        let floats: Vec<f32> = (0..40_003).map(|i| i as f32 * 0.25 - 7.0).collect();
        let ints: Vec<i64> = (0..20_001).map(|i| i * 3 - 11).collect();
        let bytes: Vec<u8> = (0..70_001u32).map(|i| (i % 251) as u8).collect();
        let data = TensorData::U8(bytes.clone());
        let ckpt = Checkpoint::new(
            vec![
                NamedTensor::f32("w", vec![40_003], floats),
                NamedTensor::i64("order", vec![20_001], ints),
                NamedTensor { name: "raw".into(), shape: vec![70_001], data },
            ],
            json!({"epoch": 1}),
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.ckpt");
        let header = checkpoint_header(&ckpt, "h").unwrap();
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        write_checkpoint(&mut file, &header, &ckpt.tensors).unwrap();
        drop(file);
        let written = std::fs::read(&path).unwrap();
        assert_eq!(written, encode(&ckpt, "h"));
        let back = decode(&written).unwrap();
        assert_eq!((back.tensors, back.state), (ckpt.tensors, ckpt.state));
    }

    #[test]
    fn empty_checkpoint_round_trips() {
        let ckpt = Checkpoint::new(vec![], Value::Null);
        let back = decode(&encode(&ckpt, "")).unwrap();
        assert_eq!((back.tensors, back.state), (ckpt.tensors, ckpt.state));
    }

    #[test]
    fn every_truncation_is_reported_as_truncated() {
        let bytes = small();
        let header_end = PREFIX_LEN + 8 + read_u64(&bytes, PREFIX_LEN) as usize;
        for len in 0..bytes.len() {
            match decode(&bytes[..len]) {
                Err(e @ CheckpointError::Truncated { expected, exact, found }) => {
                    assert_eq!(found, len as u64);
                    assert!(expected > found);
                    // Exact once the whole header is there; before, a bound the message calls one.
                    assert_eq!(exact, len >= header_end, "cut at {len}");
                    if exact {
                        assert_eq!(expected, bytes.len() as u64, "cut at {len}");
                    } else {
                        assert!(expected <= bytes.len() as u64, "cut at {len}");
                        assert!(e.to_string().contains(&format!("expected at least {expected} bytes")), "{e}");
                    }
                }
                other => panic!("cut at {len}: expected Truncated, got {other:?}"),
            }
        }
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let bytes = small();
        for at in 0..bytes.len() {
            for bit in 0..8 {
                let mut damaged = bytes.clone();
                damaged[at] ^= 1 << bit;
                assert!(decode(&damaged).is_err(), "flip of bit {bit} at byte {at} went unnoticed");
            }
        }
    }

    /// The magic opens and closes a checkpoint: a flipped bit in the first
    /// eight bytes, the end whole, is a damaged checkpoint (its sum fails),
    /// not a file of another kind.
    #[test]
    fn a_damaged_opening_magic_is_damage_not_a_foreign_file() {
        let bytes = small();
        for at in 0..MAGIC.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            let e = decode(&damaged).unwrap_err();
            assert!(is_checksum_mismatch(&e), "byte {at}: {e}");
        }
        // Both ends gone: not a checkpoint.
        let mut both = bytes.clone();
        let n = both.len();
        both[0] ^= 1;
        both[n - 1] ^= 1;
        assert!(matches!(decode(&both), Err(CheckpointError::NotACheckpoint)));
    }

    #[test]
    fn appended_bytes_are_detected() {
        let mut bytes = small();
        bytes.extend_from_slice(b"junk");
        assert_corrupt(decode(&bytes).unwrap_err(), "footer");
    }

    #[test]
    fn newer_version_is_refused() {
        // A newer release's file: another version, summed as it was written.
        let mut bytes = small();
        bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
        let n = bytes.len();
        let sum = crc32c(&bytes[..n - FOOTER_LEN]);
        bytes[n - FOOTER_LEN + 8..n - FOOTER_LEN + 12].copy_from_slice(&sum.to_le_bytes());
        assert!(matches!(decode(&bytes), Err(CheckpointError::NewerFormat { found: 2, supported: 1 })));
        // Refused by version, whatever a newer layout puts after it.
        let mut newer = MAGIC.to_vec();
        newer.extend_from_slice(&7u32.to_le_bytes());
        newer.extend_from_slice(b"some future layout");
        assert!(matches!(decode(&newer), Err(CheckpointError::NewerFormat { found: 7, .. })));
        let message = decode(&newer).unwrap_err().to_string();
        assert!(message.contains("upgrade KynML"), "{message}");
        // A flipped byte of the version (65281) fails the checksum: damage, not a newer KynML.
        let mut flipped = small();
        flipped[9] ^= 0xff;
        assert_corrupt(decode(&flipped).unwrap_err(), "checksum");
        // So does a low bit of it (version 3), which a release could reach:
        // the frame is ours and its sum fails.
        let mut flipped = small();
        flipped[8] ^= 0x02;
        assert_corrupt(decode(&flipped).unwrap_err(), "checksum");
    }

    #[test]
    fn model_hash_mismatch_is_detected() {
        let back = decode(&small()).unwrap();
        back.check_model("abc").unwrap();
        match back.check_model("xyz") {
            Err(CheckpointError::ModelMismatch { expected_hash, found_hash }) => {
                assert_eq!((expected_hash.as_str(), found_hash.as_str()), ("xyz", "abc"));
            }
            other => panic!("expected ModelMismatch, got {other:?}"),
        }
        assert!(sample().check_model("abc").is_err(), "a checkpoint built in memory has no model");
    }

    #[test]
    fn other_files_are_not_checkpoints() {
        let safetensors = encode_safetensors(&sample().tensors, &BTreeMap::new());
        assert!(matches!(decode(&safetensors), Err(CheckpointError::NotACheckpoint)));
        // A PyTorch `.pt` file is a zip archive.
        assert!(matches!(decode(b"PK\x03\x04\x14\x00\x00\x00"), Err(CheckpointError::NotACheckpoint)));
        assert!(matches!(decode(b"KYNX"), Err(CheckpointError::NotACheckpoint)));
    }

    #[test]
    fn hostile_headers_are_refused_without_large_allocations() {
        // Each case claims far more memory than exists; allocating what the
        // header says before checking it would abort the test.
        let big = 1u64 << 62;
        assert_corrupt(
            hostile(&format!(r#""w":{{"dtype":"F32","shape":[{big},{big}],"data_offsets":[0,4]}}"#), &[0; 4]),
            "does not fill",
        );
        assert_corrupt(
            hostile(&format!(r#""w":{{"dtype":"I64","shape":[{big}],"data_offsets":[0,8]}}"#), &[0; 8]),
            "does not fill",
        );
        assert_corrupt(
            hostile(r#""w":{"dtype":"F32","shape":[1099511627776],"data_offsets":[0,4398046511104]}"#, &[0; 4]),
            "past the 4 bytes",
        );
        assert_corrupt(
            hostile(r#""w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}"#, &[0; 8]),
            "past the 8 bytes",
        );
        let max = u64::MAX;
        assert_corrupt(
            hostile(&format!(r#""w":{{"dtype":"F32","shape":[1],"data_offsets":[{},{max}]}}"#, max - 3), &[0; 4]),
            "past",
        );
        assert_corrupt(hostile(r#""w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}"#, &[0; 8]), "backwards");
        assert_corrupt(
            hostile(r#""w":{"dtype":"F32","shape":[1],"data_offsets":[0,99999999999999999999]}"#, &[0; 4]),
            "not valid",
        );
        assert_corrupt(hostile(r#""w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}"#, &[0; 4]), "not valid");
        // Overlapping, gapped and untiled data.
        let two = |a: [u64; 2], b: [u64; 2]| {
            format!(
                r#""a":{{"dtype":"F32","shape":[2],"data_offsets":{a:?}}},"b":{{"dtype":"F32","shape":[2],"data_offsets":{b:?}}}"#
            )
        };
        assert_corrupt(hostile(&two([0, 8], [4, 12]), &[0; 12]), "overlaps");
        assert_corrupt(hostile(&two([0, 8], [0, 8]), &[0; 8]), "overlaps");
        assert_corrupt(hostile(&two([0, 8], [12, 20]), &[0; 20]), "belong to no tensor");
        assert_corrupt(hostile(&two([0, 8], [8, 16]), &[0; 20]), "last 4 data bytes");
        assert_corrupt(hostile("", &[0; 4]), "last 4 data bytes");
        // Header shape and types.
        let rank = vec!["1"; MAX_RANK + 1].join(",");
        assert_corrupt(
            hostile(&format!(r#""w":{{"dtype":"F32","shape":[{rank}],"data_offsets":[0,4]}}"#), &[0; 4]),
            "dimensions",
        );
        assert_corrupt(hostile(r#""w":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}"#, &[0; 2]), "BF16");
        assert_corrupt(hostile(r#""w":{"dtype":"F32","shape":[1]}"#, &[0; 4]), "data_offsets");
        assert_corrupt(
            hostile(
                r#""w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}"#,
                &[0; 8],
            ),
            "twice",
        );
        assert_corrupt(hostile(r#""__metadata__":{}"#, &[]), "twice");
        let deep = "[".repeat(100_000);
        assert_corrupt(decode(&framed(&payload(&deep, &[]))).unwrap_err(), "not valid");
        assert_corrupt(decode(&framed(&payload("[]", &[]))).unwrap_err(), "not valid");
        assert_corrupt(decode(&framed(&payload("{\"__metadata__\":{\"a\":1}}", &[]))).unwrap_err(), "not valid");
        assert_corrupt(decode(&framed(&payload("\u{feff}{}", &[]))).unwrap_err(), "not valid");
        assert_corrupt(
            decode(&framed(&[0xff, 0xff, 0xc0, 0xff, 0xff, 0xff, 0xff, 0xff, b'{', b'}'])).unwrap_err(),
            "header length",
        );
        let mut overflowing = u64::MAX.to_le_bytes().to_vec();
        overflowing.extend_from_slice(b"{}");
        assert_corrupt(decode(&framed(&overflowing)).unwrap_err(), "header length");
        assert_corrupt(decode_safetensors(&[1, 0, 0]).unwrap_err(), "shorter than its 8-byte header length");
    }

    #[test]
    fn missing_or_bad_metadata_is_refused() {
        let framed_with = |meta: &str| decode(&framed(&payload(&format!(r#"{{"__metadata__":{{{meta}}}}}"#), &[])));
        assert_corrupt(framed_with(r#""model_hash":"h","kynml_state":"{}""#).unwrap_err(), "format_version");
        assert_corrupt(framed_with(r#""format_version":"1","kynml_state":"{}""#).unwrap_err(), "model_hash");
        assert_corrupt(framed_with(r#""format_version":"1","model_hash":"h""#).unwrap_err(), "kynml_state");
        assert_corrupt(
            framed_with(r#""format_version":"2","model_hash":"h","kynml_state":"{}""#).unwrap_err(),
            "says format version 2",
        );
        assert_corrupt(
            framed_with(r#""format_version":"1","model_hash":"h","kynml_state":"{oops""#).unwrap_err(),
            "not valid JSON",
        );
        let ok =
            framed_with(r#""format_version":"1","model_hash":"h","kynml_state":"[1]","extra":"kept out""#).unwrap();
        assert_eq!(ok.state_value(), json!([1]));
    }

    #[test]
    fn random_damage_never_panics() {
        let bytes = encode(&sample(), "h");
        let body = &bytes[PREFIX_LEN..bytes.len() - FOOTER_LEN];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..3000 {
            let mut damaged = body.to_vec();
            for _ in 0..1 + next() % 4 {
                let at = (next() % damaged.len() as u64) as usize;
                damaged[at] = match next() % 3 {
                    0 => next() as u8,
                    1 => b"0123456789[]{}\",:-e"[(next() % 19) as usize],
                    _ => damaged[at] ^ 1 << (next() % 8),
                };
            }
            if next() % 4 == 0 {
                damaged.truncate((next() % damaged.len() as u64) as usize);
            }
            // Framed with a valid checksum, so the payload checks are what run.
            let _ = decode(&framed(&damaged));
        }
    }

    #[test]
    fn safetensors_payload_is_aligned_and_reads_back() {
        let ckpt = sample();
        let metadata = BTreeMap::from([("producer".to_owned(), "kynml".to_owned())]);
        let bytes = encode_safetensors(&ckpt.tensors, &metadata);
        let header_len = read_u64(&bytes, 0) as usize;
        assert_eq!((8 + header_len) % 8, 0, "data starts 8-byte aligned");
        assert_eq!(bytes[8], b'{');
        let (tensors, meta) = decode_safetensors(&bytes).unwrap();
        assert_eq!((tensors, meta), (ckpt.tensors, metadata));
        let bare = encode_safetensors(&[], &BTreeMap::new());
        assert_eq!(&bare[8..], b"{}      ");
    }

    /// Written by Python's `safetensors.numpy.save` 0.8.0 (tensors ordered by
    /// alignment, then name; header padded with spaces).
    #[test]
    fn reads_a_file_written_by_python_safetensors() {
        let hex = "c0000000000000007b225f5f6d657461646174615f5f223a7b226b223a2276227d2c226e223a7b226474797065223a22493634222c227368617065223a5b5d2c22646174615f6f666673657473223a5b302c385d7d2c2265223a7b226474797065223a22463332222c227368617065223a5b302c335d2c22646174615f6f666673657473223a5b382c385d7d2c2277223a7b226474797065223a22463332222c227368617065223a5b322c325d2c22646174615f6f666673657473223a5b382c32345d7d7d20202007000000000000000000c03f000000c00000504000008040";
        let bytes: Vec<u8> =
            (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
        let (tensors, metadata) = decode_safetensors(&bytes).unwrap();
        assert_eq!(
            tensors,
            vec![
                NamedTensor::i64("n", vec![], vec![7]),
                NamedTensor::f32("e", vec![0, 3], vec![]),
                NamedTensor::f32("w", vec![2, 2], vec![1.5, -2.0, 3.25, 4.0]),
            ]
        );
        assert_eq!(metadata, BTreeMap::from([("k".to_owned(), "v".to_owned())]));
    }

    /// The sample that `scripts/read_safetensors.py` checks with Python's
    /// `safetensors`: set `KYNML_SAFETENSORS_SAMPLE=<file>` to write it.
    #[test]
    fn sample_for_python_cross_check() {
        let bytes = encode_safetensors(&sample().tensors, &BTreeMap::from([("producer".into(), "kynml".into())]));
        if let Some(path) = std::env::var_os("KYNML_SAFETENSORS_SAMPLE") {
            std::fs::write(&path, &bytes).unwrap();
            std::fs::write(PathBuf::from(&path).with_extension("ckpt"), encode(&sample(), "h")).unwrap();
        }
    }

    #[test]
    fn invalid_checkpoints_are_refused_before_encoding() {
        let invalid = |tensors| Checkpoint::new(tensors, Value::Null).validate().unwrap_err().to_string();
        let dup = invalid(vec![NamedTensor::f32("a", vec![1], vec![1.0]), NamedTensor::i64("a", vec![1], vec![1])]);
        assert!(dup.contains("tensor `a` cannot be saved: another tensor has the same name"), "{dup}");
        let shape = invalid(vec![NamedTensor::f32("a", vec![2, 2], vec![1.0; 3])]);
        assert!(shape.contains("shape [2, 2] does not hold the 3 values given"), "{shape}");
        let overflow = invalid(vec![NamedTensor::f32("a", vec![usize::MAX, 2], vec![])]);
        assert!(overflow.contains("does not hold"), "{overflow}");
        assert!(invalid(vec![NamedTensor::f32("__metadata__", vec![], vec![1.0])]).contains("reserved"));
        let too_big = Checkpoint::new(vec![], Value::String("x".repeat(MAX_STATE_LEN)));
        assert!(matches!(try_encode(&too_big, "h"), Err(CheckpointError::StateTooLarge { .. })));
        // 60,000 epochs' records (some 18 MiB of JSON, past the old 16 MiB cap) still save and read back.
        let history = Checkpoint::new(vec![], Value::String("x".repeat(18 << 20)));
        let bytes = try_encode(&history, "h").expect("a long history saves");
        assert_eq!(decode(&bytes).expect("and reads back").state, history.state);
        // The worst a state at the cap escapes to: every character of its
        // JSON a quote or backslash (`"\"\"..."`), twice as long in the header.
        let quotes = Checkpoint::new(vec![], Value::String("\"".repeat((MAX_STATE_LEN - 2) / 2)));
        assert!(quotes.state.to_string().len() <= MAX_STATE_LEN);
        let bytes = try_encode(&quotes, "h").expect("a state at the cap saves");
        assert_eq!(decode(&bytes).expect("and reads back").state, quotes.state);
        // A header past safetensors' limit is refused, never written.
        let names: Vec<NamedTensor> =
            (0..10_000).map(|i| NamedTensor::f32(format!("{i:0>120}"), vec![0], vec![])).collect();
        let big = Checkpoint::new(names, quotes.state_value());
        assert!(matches!(try_encode(&big, "h"), Err(CheckpointError::HeaderTooLarge { .. })));
    }
}
