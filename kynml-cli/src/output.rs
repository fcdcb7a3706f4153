//! Files the commands write at a person's request (`predict --output`,
//! `eval --json`, `bench --json`): checked before any work, written whole,
//! and a stream (`-`, `/dev/stdout`, a named pipe) written as it is.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::failure::Failure;

/// `--output` (and `--json`) must name a file in a folder that exists:
/// said before any work, as bad input (exit 2).
pub(crate) fn check_output(output: &Path) -> Result<(), Failure> {
    let refuse = |why: String| Failure::input(format!("error: cannot write {}: {why}", output.display()));
    if is_stream(output) {
        return Ok(());
    }
    if output.is_dir() {
        return Err(refuse("it is a folder, not a file".into()));
    }
    // `out.csv/` names a folder, which the write would meet only at the end.
    if output.as_os_str().to_string_lossy().ends_with(std::path::is_separator) {
        return Err(refuse("a path ending in a separator names a folder; name a file".into()));
    }
    let folder = kynml_core::atomic_file::folder(output);
    match std::fs::metadata(folder) {
        // A folder this process cannot write in (read-only, another
        // user's) is said now, as for an export: a new, unnamed file at once removed.
        Ok(meta) if meta.is_dir() => kynml_core::atomic_file::probe_writable(folder)
            .map_err(|e| refuse(format!("its folder {} cannot be written: {e}", folder.display()))),
        Ok(_) => Err(refuse(format!("its folder {} is a file", folder.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(refuse(format!("its folder {} does not exist", folder.display())))
        }
        Err(e) => Err(refuse(format!("cannot reach its folder {}: {e}", folder.display()))),
    }
}

/// Writes `bytes` to `path`: a stream (`/dev/null`, `/dev/stdout`, a named
/// pipe) as it is, never replaced by a file; a file replaced whole.
pub(crate) fn write_output(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if is_stream(path) {
        std::fs::OpenOptions::new().write(true).open(path).and_then(|mut f| f.write_all(bytes))
    } else {
        kynml_core::atomic_file::write(path, bytes)
    }
}

/// Whether `path` names this process's standard output: `-`, or a path to
/// the file it is (`/dev/stdout`, `/dev/fd/1`, the file it is redirected
/// to). Output meant for standard output then holds that output alone: the
/// lines said around it go to standard error, as for `-`.
pub(crate) fn is_stdout(path: &Path) -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    if path.as_os_str() == "-" {
        return true;
    }
    let Ok(target) = std::fs::metadata(path) else { return false };
    let stdout = std::io::stdout().as_fd().try_clone_to_owned().ok().map(std::fs::File::from);
    stdout.and_then(|f| f.metadata().ok()).is_some_and(|out| (out.dev(), out.ino()) == (target.dev(), target.ino()))
}

/// Whether `path` is (or links to) a character device or a named pipe:
/// `/dev/null`, `/dev/stdout`, a FIFO a reader waits on.
pub(crate) fn is_stream(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device() || m.file_type().is_fifo())
}

/// `--json FILE` must be writable, and replaces only an earlier file of the
/// same command (`earlier` tells one from its JSON; `command` names it):
/// a spec, a data file or anything else there is refused before any work
/// (a cold GPU bench takes minutes), as bad input. A stream (`/dev/stdout`,
/// a named pipe) is written as it is, and never read. Returns the file to
/// write: a symbolic link's target, so that the link stays a link.
pub(crate) fn check_json_target(
    path: &Path,
    command: &str,
    earlier: impl Fn(&serde_json::Value) -> bool,
) -> Result<PathBuf, Failure> {
    use std::io::Read;
    let refuse = |why: &str| Failure::input(format!("error: --json {}: {why}", path.display()));
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(_) => {
            // A link to a file not yet there: the file is made, the link kept.
            let target = match std::fs::read_link(path) {
                Ok(to) => kynml_core::atomic_file::folder(path).join(to),
                Err(_) => path.to_path_buf(),
            };
            check_output(&target)?;
            return Ok(target);
        }
    };
    if meta.is_dir() {
        return Err(refuse("it is a folder, not a file"));
    }
    if is_stream(path) {
        return Ok(path.to_path_buf());
    }
    if !meta.is_file() {
        return Err(refuse("it is not a regular file, a device or a named pipe (a socket?); --json writes a file"));
    }
    let target = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    check_output(&target)?;
    // The figures are a few KiB: a bounded read tells them.
    let mut head = Vec::new();
    let read = std::fs::File::open(&target).and_then(|f| f.take(1 << 20).read_to_end(&mut head));
    if let Err(e) = read {
        return Err(refuse(&format!("it cannot be read: {e}")));
    }
    let is_earlier = serde_json::from_slice::<serde_json::Value>(&head).is_ok_and(|v| earlier(&v));
    if is_earlier || head.iter().all(u8::is_ascii_whitespace) {
        return Ok(target);
    }
    Err(refuse(&format!(
        "the file is there and is not an earlier `{command}` file; it is left as it is: name another file, or move \
         it away"
    )))
}

/// A model is read from a run folder or an export's files (weights and
/// their .json sidecar), never from standard input: `-` is said so, as
/// bad input, before anything else ("its sidecar -.json is missing" was
/// said of it).
pub(crate) fn check_model_path(model: &Path) -> Result<(), Failure> {
    if model.as_os_str() == "-" {
        return Err(Failure::input(
            "error: a model is read from a run folder or an export's files (a .safetensors or .mpk file with its \
             .json sidecar), not from standard input; give its path",
        ));
    }
    Ok(())
}
