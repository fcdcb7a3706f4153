//! Checkpoints: everything a resume needs (weights, optimizer state, and the
//! loop's state as JSON) in one file that is written atomically in the
//! background and checked whole when read back.
//!
//! [`format`](mod@format) is the file layout (a safetensors payload between a versioned
//! prefix and a checksummed footer); [`writer`] is the background writer and
//! [`load`].
//!
//! ```
//! use kynml_core::checkpoint::{load, Checkpoint, CheckpointWriter, NamedTensor};
//! use serde_json::json;
//!
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("checkpoints/deepnet.pt");
//! let writer = CheckpointWriter::spawn();
//! let snapshot = Checkpoint::new(
//!     vec![
//!         NamedTensor::f32("dense0.weight", vec![2, 2], vec![0.1, -0.2, 0.3, 0.4]),
//!         NamedTensor::i64("adam.step", vec![], vec![120]),
//!     ],
//!     json!({ "epoch": 3, "step": 120, "rng": [1, 2, 3, 4] }),
//! );
//! // Returns the previous write's error, if any; this one runs in the background.
//! writer.save_async(path.clone(), snapshot, "model-hash".into())?;
//! writer.flush()?;
//!
//! if let Some(resume) = load(&path)? {
//!     resume.check_model("model-hash")?;
//!     assert_eq!(resume.state_value()["epoch"], 3);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod format;
pub mod writer;

pub use self::format::{
    decode, decode_safetensors, encode, encode_safetensors, plan_safetensors, stream_safetensors, try_encode,
    Checkpoint, CheckpointError, NamedTensor, TensorData, TensorView, FORMAT_VERSION,
};
pub use self::writer::{
    beside_pytorch, check_targets, discard, discarded, holds_pytorch, load, lock, lock_path, older_copies, prepare,
    remove_stray_temps, CheckpointWriter, HandOff, PathLock,
};
