//! Whole-file writes that a reader never sees half of: the bytes go to a
//! temporary file beside the target, are synced, and the temporary file is
//! renamed over the target.
//!
//! The file gets the permissions `File::create` would give it: a new file
//! `0666` less the umask, a replaced file its old mode. (tempfile's
//! `NamedTempFile` makes its files `0600`, which a renamed output would keep,
//! so that a serving account could not read a model.)
//!
//! ```
//! # let dir = tempfile::tempdir()?;
//! let path = dir.path().join("metrics.json");
//! kynml_core::atomic_file::write(&path, b"{}\n")?;
//! assert_eq!(std::fs::read(&path)?, b"{}\n");
//! # Ok::<(), std::io::Error>(())
//! ```

use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// The temporary files being written now: what [`remove_unfinished`]
/// removes for a process that a signal ends.
static UNFINISHED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes the temporary files this process is writing now, for a process
/// about to end on a signal (Ctrl-C during a multi-gigabyte export left a
/// hidden file of its size that only a later write of the same name
/// removed). Their targets are untouched. Not async-signal-safe: call it
/// from a thread that waits for the signal (`sigwait`), not a handler.
pub fn remove_unfinished() {
    let list = UNFINISHED.lock().unwrap_or_else(PoisonError::into_inner);
    for temp in list.iter() {
        let _ = fs::remove_file(temp);
    }
    // Held until the process ends: a write about to put its file in place
    // waits for the lock, and never finds its file gone (it would have
    // said that as its error, and its status, before the signal's).
    std::mem::forget(list);
}

fn unfinished(temp: &Path, writing: bool) {
    let mut list = UNFINISHED.lock().unwrap_or_else(PoisonError::into_inner);
    if writing {
        list.push(temp.to_path_buf());
    } else {
        list.retain(|t| t != temp);
    }
}

/// Writes `bytes` to `path` atomically. Errors are the operating system's,
/// and never name the temporary file (the caller names `path`); on failure
/// the temporary file is removed and `path` is untouched.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_with(path, |out| out.write_all(bytes))
}

/// [`write`], of the bytes `body` writes to its writer (buffered), so that
/// a large file need not be held whole in memory; an error from `body` is
/// the write's.
pub fn write_with(path: &Path, body: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    stage_with(path, body)?.commit()
}

/// A file written whole and synced beside its target, not yet in its
/// place: [`Staged::commit`] renames it over the target, and dropped
/// uncommitted it is removed. Two files that belong together (a model and
/// its sidecar) are both staged before either replaces its old one: a full
/// disk then leaves the old pair as it was.
#[derive(Debug)]
pub struct Staged {
    temp: PathBuf,
    path: PathBuf,
    committed: bool,
}

impl Staged {
    /// Puts the file in its place, replacing what was there.
    pub fn commit(mut self) -> io::Result<()> {
        // Not while [`remove_unfinished`] removes the files being written.
        let list = UNFINISHED.lock().unwrap_or_else(PoisonError::into_inner);
        let renamed = fs::rename(&self.temp, &self.path);
        drop(list);
        self.committed = renamed.is_ok();
        renamed
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.temp);
        }
        unfinished(&self.temp, false);
    }
}

/// Writes what `body` writes to a temporary file beside `path` and syncs
/// it, leaving `path` untouched until [`Staged::commit`]; on failure the
/// temporary file is removed.
pub fn stage_with(path: &Path, body: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<Staged> {
    let path = through_links(path);
    let Some(name) = path.file_name() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "the path does not name a file"));
    };
    remove_dead_temps(&path, name);
    let temp = folder(&path).join(temp_name(name));
    // OpenOptions' default mode is File::create's: 0666, less the umask.
    // Listed before it exists, so that a signal in between leaves none
    // behind; removed again, should the writing fail.
    unfinished(&temp, true);
    let staged = Staged { temp, path, committed: false };
    let file = OpenOptions::new().write(true).create_new(true).open(&staged.temp)?;
    if let Some(old) = fs::metadata(&staged.path).ok().filter(|m| m.is_file()) {
        file.set_permissions(old.permissions())?;
    }
    let mut out = io::BufWriter::with_capacity(1 << 20, file);
    body(&mut out)?;
    let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    file.sync_all()?;
    Ok(staged)
}

/// Where a write to `path` lands: at the end of its symbolic links, as
/// `File::create` writes through a link (a link that points a stable name
/// at a versioned file stays a link, and its file is what changes); `path`
/// itself where it is no link.
pub fn through_links(path: &Path) -> PathBuf {
    let mut path = path.to_path_buf();
    // Linux's own limit on links in a row; a loop ends at the last one.
    for _ in 0..40 {
        match fs::read_link(&path) {
            Ok(target) => path = folder(&path).join(target),
            Err(_) => break,
        }
    }
    path
}

/// Removes the temporary files of `path` that a process which no longer
/// runs left behind (killed in the middle of a write): a process that still
/// runs may be writing one. Where running processes cannot be told
/// (no `/proc`), nothing is removed. Best effort: a file that cannot be
/// removed stays.
fn remove_dead_temps(path: &Path, name: &OsStr) {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    let prefix = format!(".{}.tmp-", name.to_string_lossy());
    let Ok(entries) = fs::read_dir(folder(path)) else { return };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(rest) = file.to_str().and_then(|f| f.strip_prefix(&prefix)) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if process_gone(pid) == Some(true) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Whether process `pid` of this machine no longer runs; `None` where
/// running processes cannot be told (no `/proc`). This process runs. A
/// writer killed half-way is told by it, from the id its leftovers carry.
pub(crate) fn process_gone(pid: u32) -> Option<bool> {
    let proc = Path::new("/proc");
    proc.join("self").exists().then(|| pid != std::process::id() && !proc.join(pid.to_string()).exists())
}

/// This machine's name as the kernel gives it (empty where it cannot be
/// read): leftovers in a shared folder carry their writer's, and only this
/// machine's processes can be told gone.
pub(crate) fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

/// Whether this process may write in `dir`, found by making a new, unnamed
/// file there, at once removed: permissions, a read-only mount and another
/// user's folder are all told, as the write itself would meet them.
pub fn probe_writable(dir: &Path) -> io::Result<()> {
    tempfile::tempfile_in(dir).map(drop)
}

/// [`special_kind`]'s words for a named pipe.
pub const FIFO: &str = "a named pipe (FIFO)";

/// What stands at `path` when it is there but neither a regular file nor a
/// folder: "a named pipe (FIFO)", "a character device", "a block device",
/// "a socket". Such a path is never opened: opening a FIFO waits for a
/// writer forever, and a file written in a device's place replaces the node.
pub fn special_kind(path: &Path) -> Option<&'static str> {
    let meta = fs::metadata(path).ok()?;
    if meta.is_file() || meta.is_dir() {
        return None;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        Some(match () {
            _ if t.is_fifo() => FIFO,
            _ if t.is_char_device() => "a character device",
            _ if t.is_block_device() => "a block device",
            _ if t.is_socket() => "a socket",
            _ => "a special file",
        })
    }
    #[cfg(not(unix))]
    Some("a special file")
}

/// The folder `path` lives in; `.` for a bare file name.
pub fn folder(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// `.<name>.tmp-<pid>-<n>`, with a long name cut so that it stays within
/// the usual 255-byte limit.
fn temp_name(name: &OsStr) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut name = name.to_string_lossy().into_owned();
    let mut cut = name.len().min(200);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    name.truncate(cut);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!(".{name}.tmp-{}-{n}", std::process::id()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_and_leaves_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        write(&path, b"one").unwrap();
        write(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// A staged file is in place only once committed; dropped before, it
    /// leaves the old file and nothing else.
    #[test]
    fn a_staged_file_replaces_the_old_one_only_when_committed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        write(&path, b"old").unwrap();
        let staged = stage_with(&path, |out| out.write_all(b"new")).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2, "the staged file beside it");
        drop(staged);
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        stage_with(&path, |out| out.write_all(b"new")).unwrap().commit().unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        // A failing body leaves nothing staged.
        let err = stage_with(&path, |_| Err(io::Error::other("full"))).unwrap_err();
        assert_eq!(err.to_string(), "full");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// A write killed half-way leaves its temporary file: the next write of
    /// the same file removes it once its process is gone, never one of a
    /// process that still runs (this one).
    #[test]
    fn a_dead_writers_temporary_file_goes_with_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.onnx");
        // Above Linux's largest process id: no process has it.
        let dead = dir.path().join(".m.onnx.tmp-999999999-6");
        let alive = dir.path().join(format!(".m.onnx.tmp-{}-99", std::process::id()));
        let other = dir.path().join(".other.onnx.tmp-999999999-1");
        for f in [&dead, &alive, &other] {
            fs::write(f, b"half").unwrap();
        }
        write(&path, b"whole").unwrap();
        assert!(!dead.exists() && alive.exists() && other.exists());
        assert_eq!(fs::read(&path).unwrap(), b"whole");
    }

    #[test]
    fn a_missing_folder_is_not_found_and_names_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = write(&dir.path().join("nodir/p.csv"), b"x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(!err.to_string().contains(".tmp"), "{err}");
    }

    /// A write through a symbolic link replaces the file it points to and
    /// keeps the link (it replaced the link with a file, and the file a
    /// deployment's stable name pointed to kept the old bytes).
    #[cfg(unix)]
    #[test]
    fn a_link_is_written_through() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("store")).unwrap();
        let real = dir.path().join("store/v1.onnx");
        fs::write(&real, b"old").unwrap();
        let link = dir.path().join("model.onnx");
        std::os::unix::fs::symlink("store/v1.onnx", &link).unwrap();
        write(&link, b"new").unwrap();
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(fs::read(&real).unwrap(), b"new");
        // A link to a file not made yet makes it.
        let later = dir.path().join("later.onnx");
        std::os::unix::fs::symlink(dir.path().join("store/v2.onnx"), &later).unwrap();
        write(&later, b"v2").unwrap();
        assert_eq!(fs::read(dir.path().join("store/v2.onnx")).unwrap(), b"v2");
        assert_eq!(fs::read_dir(dir.path().join("store")).unwrap().count(), 2, "no temporary file left");
    }

    /// A new file gets 0666 less the umask, as `File::create` gives it; a
    /// replaced one keeps its mode.
    #[cfg(unix)]
    #[test]
    fn files_get_the_mode_file_create_gives() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (plain, atomic) = (dir.path().join("plain"), dir.path().join("atomic"));
        fs::File::create(&plain).unwrap();
        write(&atomic, b"x").unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&atomic), mode(&plain));
        fs::set_permissions(&atomic, fs::Permissions::from_mode(0o640)).unwrap();
        write(&atomic, b"y").unwrap();
        assert_eq!(mode(&atomic), 0o640);
    }

    /// A file being written is listed for [`remove_unfinished`] (which a
    /// signal ending the process calls: `kynml-cli`'s tests send one), and
    /// no longer once it is committed or dropped. (Removing them here would
    /// remove the other tests' files being written.)
    #[test]
    fn files_being_written_are_listed_until_committed_or_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.onnx");
        let listed = || UNFINISHED.lock().unwrap().iter().filter(|t| t.starts_with(dir.path())).count();
        let staged = stage_with(&path, |out| out.write_all(b"new")).unwrap();
        assert_eq!(listed(), 1);
        drop(staged);
        assert_eq!(listed(), 0);
        stage_with(&path, |out| out.write_all(b"new")).unwrap().commit().unwrap();
        assert_eq!((listed(), fs::read(&path).unwrap()), (0, b"new".to_vec()));
        assert!(stage_with(&path, |_| Err(io::Error::other("full"))).is_err());
        assert_eq!(listed(), 0);
    }
}
