//! The checkpoint writer: a small actor that encodes and writes checkpoints on
//! its own thread, so that the training loop pays only for the snapshot it
//! hands over.
//!
//! It holds at most one snapshot at a time: a save first waits for the one
//! before it to finish, which bounds memory to one copy of the state and lets
//! every save return the previous write's result, so that a failure surfaces
//! at the next save rather than never. [`CheckpointWriter::flush`] waits for
//! the write in flight and returns its result.
//!
//! Every write is atomic: the file is written to a temporary file in the
//! target's folder (`.<name>.tmp-<pid>-<n>`), synced, renamed over the
//! target, and the folder is synced, so a reader sees the old checkpoint or
//! the new one, never part of one, even if the process dies mid-write.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Mutex, PoisonError};
use std::thread::JoinHandle;

use super::format::{checkpoint_header, decode, write_checkpoint, Checkpoint, CheckpointError};

/// The longest file name, in bytes, that Linux, macOS and Windows file systems take.
const NAME_MAX: usize = 255;

type WriteResult = Result<(), CheckpointError>;

enum Message {
    Save {
        path: PathBuf,
        checkpoint: Checkpoint,
        model_hash: String,
        done: SyncSender<WriteResult>,
        /// Replace the checkpoint at `path` and remove its older copies once
        /// this one is in place ([`CheckpointWriter::replace_at_next_save`]).
        replace: bool,
    },
    Shutdown,
}

/// Writes checkpoints in the background; dropping it finishes the write in
/// flight and joins the thread (call [`flush`](Self::flush) first to learn
/// how that write went).
pub struct CheckpointWriter {
    messages: SyncSender<Message>,
    /// When each finished write began and ended, in order (for the profile).
    writes: std::sync::Arc<Mutex<Vec<(std::time::Instant, std::time::Instant)>>>,
    /// The result of the last save, once its write finishes.
    in_flight: Mutex<Option<Receiver<WriteResult>>>,
    /// The path whose next save replaces what is there
    /// ([`Self::replace_at_next_save`]); the thread clears it once one has.
    replacing: std::sync::Arc<Mutex<Option<PathBuf>>>,
    thread: Option<JoinHandle<()>>,
}

impl CheckpointWriter {
    /// A writer that keeps only the latest checkpoint at each path.
    pub fn spawn() -> Self {
        Self::spawn_with_keep(1)
    }

    /// A writer that keeps the last `keep` checkpoints at each path: before
    /// a new one takes `path`, the current one becomes `path.1`, `path.1`
    /// becomes `path.2`, and so on up to `path.{keep-1}`; the oldest drops
    /// out. `keep` of 0 or 1 keeps only `path`. The current file is hard
    /// linked (copied where links are not supported) to `path.1`, never moved,
    /// so `path` holds a whole checkpoint at every moment.
    ///
    /// # Panics
    /// If the operating system cannot start a thread, as `std::thread::spawn`.
    pub fn spawn_with_keep(keep: usize) -> Self {
        Self::try_spawn_with_keep(keep).expect("cannot start the checkpoint writer thread")
    }

    /// [`spawn_with_keep`](Self::spawn_with_keep), with the operating
    /// system's refusal to start a thread as an error.
    pub fn try_spawn_with_keep(keep: usize) -> io::Result<Self> {
        // One message slot: a save is only sent once the previous one is done.
        let (messages, inbox) = mpsc::sync_channel(1);
        let writes = std::sync::Arc::new(Mutex::new(Vec::new()));
        let log = writes.clone();
        let replacing = std::sync::Arc::new(Mutex::new(None));
        let replaced = replacing.clone();
        let thread = std::thread::Builder::new()
            .name("kynml-checkpoint-writer".into())
            .spawn(move || run(inbox, keep.max(1), &log, &replaced))?;
        Ok(CheckpointWriter { messages, writes, in_flight: Mutex::new(None), replacing, thread: Some(thread) })
    }

    /// The next save to `path` replaces the checkpoint there and removes its
    /// older copies ([`discarded`]) instead of rotating them, once it is in
    /// place: a run that starts over gives up the run before it only when
    /// its own first checkpoint is whole. A save that fails leaves them all,
    /// and the next save to `path` tries again. One path at a time: a call
    /// for another path takes the place of this one.
    pub fn replace_at_next_save(&self, path: PathBuf) {
        *self.replacing.lock().unwrap_or_else(PoisonError::into_inner) = Some(path);
    }

    /// Hands `ckpt` to the writer thread, which encodes it and writes it to
    /// `path` atomically. Returns the previous save's result: if the previous
    /// snapshot is still being written, this waits for it. The new snapshot
    /// is queued even when the previous write failed. A checkpoint that fails
    /// [`Checkpoint::validate`] is refused at once and nothing is queued.
    pub fn save_async(&self, path: PathBuf, ckpt: Checkpoint, model_hash: String) -> Result<(), CheckpointError> {
        let HandOff { previous, this, .. } = self.hand_off(path, ckpt, model_hash, false);
        previous.and(this)
    }

    /// [`save_async`](Self::save_async), then waits for this write: its
    /// error if it failed, else the previous write's error, if any.
    pub fn save_sync(&self, path: PathBuf, ckpt: Checkpoint, model_hash: String) -> Result<(), CheckpointError> {
        let HandOff { previous, this, .. } = self.hand_off(path, ckpt, model_hash, true);
        this.and(previous)
    }

    /// Hands `ckpt` to the writer as [`save_async`](Self::save_async) does
    /// (and, with `wait`, waits for its write), keeping apart the previous
    /// write's result and this checkpoint's: a caller says which one failed.
    pub fn hand_off(&self, path: PathBuf, ckpt: Checkpoint, model_hash: String, wait_for_it: bool) -> HandOff {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        // The previous write ends first, whatever becomes of this one.
        let previous = wait(in_flight.take());
        if let Err(e) = ckpt.validate() {
            return HandOff { previous, this: Err(e), queued: false };
        }
        let (done, result) = mpsc::sync_channel(1);
        let replacing = self.replacing.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let replace = replacing.as_ref() == Some(&path);
        let message = Message::Save { path, checkpoint: ckpt, model_hash, done, replace };
        if self.messages.send(message).is_err() {
            return HandOff { previous, this: Err(CheckpointError::WriterStopped), queued: false };
        }
        let this = if wait_for_it {
            wait(Some(result))
        } else {
            *in_flight = Some(result);
            Ok(())
        };
        HandOff { previous, this, queued: true }
    }

    /// Waits for the write in flight; returns its error, or `Ok` when it
    /// succeeded or no write was pending. Each error is returned once.
    pub fn flush(&self) -> Result<(), CheckpointError> {
        wait(self.in_flight.lock().unwrap_or_else(PoisonError::into_inner).take())
    }

    /// When each finished write (encoding and writing the file) began and
    /// ended, in the order they ran.
    pub fn writes(&self) -> Vec<(std::time::Instant, std::time::Instant)> {
        self.writes.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The result of the write in flight if it has finished, without
    /// waiting: `Err` once for a failed write, `Ok` otherwise.
    pub fn poll(&self) -> Result<(), CheckpointError> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        let result = match in_flight.as_ref().map(Receiver::try_recv) {
            None | Some(Err(mpsc::TryRecvError::Empty)) => return Ok(()),
            Some(Ok(result)) => result,
            Some(Err(mpsc::TryRecvError::Disconnected)) => Err(CheckpointError::WriterStopped),
        };
        *in_flight = None;
        result
    }
}

/// What [`CheckpointWriter::hand_off`] did: the previous write's result
/// (each error returned once), and this checkpoint's (queued, or written
/// when waited for).
#[derive(Debug)]
pub struct HandOff {
    /// The write before this one, if it was still pending or had failed unseen.
    pub previous: Result<(), CheckpointError>,
    /// This checkpoint: refused, queued or written.
    pub this: Result<(), CheckpointError>,
    /// Whether this checkpoint reached the writer (which then writes it,
    /// and logs the write in [`CheckpointWriter::writes`] whatever its
    /// outcome); `false` when it was refused before.
    pub queued: bool,
}

/// Checks, before training starts, that checkpoints can be written to
/// `path` with `keep` kept: its folder exists (it is created) and takes a new
/// file, and neither `path` nor the older copies' names that rotation
/// replaces (`path.1` ... `path.{keep-1}`) hold a folder or a file of some
/// other kind.
///
/// Returns the path's [`lock`], for the run to hold until it ends (pass it
/// in [`TrainSettings::checkpoint_lock`](crate::train::TrainSettings)):
/// another run that writes here is refused now, before any work.
pub fn prepare(path: &Path, keep: usize) -> Result<PathLock, CheckpointError> {
    check_targets(path, keep)?;
    let dir = parent_dir(path);
    fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    let held = lock(path)?;
    let probe = dir.join(temp_name(path.file_name().unwrap_or_default()));
    OpenOptions::new().write(true).create_new(true).open(&probe).map_err(|e| io_error(dir, e))?;
    fs::remove_file(&probe).map_err(|e| io_error(&probe, e))?;
    Ok(held)
}

/// Held while a run writes its checkpoints to a path (see [`lock`]).
#[derive(Debug)]
pub struct PathLock {
    /// The lock file, locked while it is open.
    file: Option<File>,
    /// Its path, in this process's registry of held locks.
    key: PathBuf,
    /// Whether a run is training under it now: one lock shared by two runs
    /// (settings cloned for a second job) would let both rotate one path.
    in_run: std::sync::atomic::AtomicBool,
}

impl PathLock {
    /// Whether this is the lock of checkpoints written to `path`.
    pub fn covers(&self, path: &Path) -> bool {
        lock_names(path).1 == self.key
    }

    /// Marks the lock as a run's until the returned guard drops; `None`
    /// where another run holds it already.
    pub(crate) fn claim(self: &std::sync::Arc<Self>) -> Option<RunClaim> {
        use std::sync::atomic::Ordering;
        (!self.in_run.swap(true, Ordering::AcqRel)).then(|| RunClaim(self.clone()))
    }
}

/// A run's hold on a [`PathLock`] (see [`PathLock::claim`]).
#[derive(Debug)]
pub(crate) struct RunClaim(std::sync::Arc<PathLock>);

impl Drop for RunClaim {
    fn drop(&mut self) {
        self.0.in_run.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// The lock file of checkpoints written to `path` (see [`lock`]).
pub fn lock_path(path: &Path) -> PathBuf {
    lock_names(path).0
}

/// The lock file beside `path`, and its key in this process's registry.
fn lock_names(path: &Path) -> (PathBuf, PathBuf) {
    let dir = parent_dir(path);
    let name = format!(".{}.lock", path.file_name().unwrap_or_default().to_string_lossy());
    (dir.join(&name), fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()).join(name))
}

impl Drop for PathLock {
    fn drop(&mut self) {
        let mut registry = held().lock().unwrap_or_else(PoisonError::into_inner);
        // Closed (unlocked) before the key goes: a run of this process that
        // then finds the key gone finds the file free too.
        drop(self.file.take());
        registry.retain(|k| *k != self.key);
    }
}

/// The lock files this process holds: a lock on a file is per open file in
/// the kernel, so two runs of one process are told apart here.
fn held() -> &'static Mutex<Vec<PathBuf>> {
    static HELD: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    &HELD
}

/// Locks `path` for one run's checkpoints, through a hidden lock file beside
/// it (`.NAME.lock`, left in place: the lock, not the file, is what counts).
/// Another run on the same path, in any process, gets
/// [`CheckpointError::InUse`] until this one ends: two runs rotating one
/// path's copies would mix their checkpoints, and a resume would go on from
/// the other run's. A file system without locks passes unlocked.
pub fn lock(path: &Path) -> Result<PathLock, CheckpointError> {
    let dir = parent_dir(path);
    // Made first: the key is the folder's real path, which a folder still
    // to be made does not have (its key would differ from the one taken
    // once it exists, and the lock not be known for this path's).
    fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    let (lock_path, key) = lock_names(path);
    let in_use = || CheckpointError::InUse { path: path.to_path_buf(), lock: lock_path.clone() };
    let mut registry = held().lock().unwrap_or_else(PoisonError::into_inner);
    if registry.contains(&key) {
        return Err(in_use());
    }
    refuse_special_lock(&lock_path)?;
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| io_error(&lock_path, e))?;
    match file.try_lock() {
        Ok(()) | Err(fs::TryLockError::Error(_)) => {}
        Err(fs::TryLockError::WouldBlock) => return Err(in_use()),
    }
    registry.push(key.clone());
    Ok(PathLock { file: Some(file), key, in_run: false.into() })
}

/// The part of [`prepare`] that writes nothing (for `kynml check`): `path`
/// names a file, and neither it nor a name that rotation would replace is a
/// folder or a file that is not a KynML checkpoint.
pub fn check_targets(path: &Path, keep: usize) -> Result<(), CheckpointError> {
    let invalid = |why: String| io_error(path, io::Error::new(io::ErrorKind::InvalidInput, why));
    // `ck/` has a file name to Rust (`ck`), but names a folder.
    if path.file_name().is_none() || path.as_os_str().to_string_lossy().ends_with(['/', '\\']) {
        return Err(invalid("the checkpoint path names a folder, not a file".into()));
    }
    // Rotation writes `NAME.{keep-1}`: the longest name must fit the file system's 255 bytes.
    // Beside it: the lock `.NAME.lock`, and with `keep` the copies up to `NAME.{keep-1}`.
    let name = path.file_name().unwrap_or_default().len();
    let rotated = name + if keep > 1 { 1 + (keep - 1).to_string().len() } else { 0 };
    let longest = rotated.max(name + ".lock".len() + 1);
    if longest > NAME_MAX {
        let what = if rotated == longest {
            format!("with keep = {keep} the oldest copy's name takes {longest}")
        } else {
            format!("its lock file's name takes {longest}")
        };
        return Err(invalid(format!(
            "its file name is {name} bytes; {what}, more than the {NAME_MAX} a file name may have"
        )));
    }
    // `data.csv/net.ckpt` with `data.csv` a file: the folder cannot be made.
    let blocking = parent_dir(path).ancestors().find(|a| !a.as_os_str().is_empty() && a.exists() && !a.is_dir());
    if let Some(file) = blocking {
        let e = io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "its folder cannot be made: `{}` is a file, not a folder; choose another checkpoint path",
                file.display()
            ),
        );
        return Err(io_error(path, e));
    }
    let older = kept_numbers(path, keep).into_iter().map(|n| numbered(path, n));
    for target in std::iter::once(path.to_path_buf()).chain(older) {
        if target.is_dir() {
            let e = io::Error::new(io::ErrorKind::InvalidInput, "it is a folder, not a file");
            return Err(io_error(&target, e));
        }
        // A checkpoint replaces its path by a rename, and rotation moves the
        // path to `.1`: a link there would be moved and replaced, and the
        // file it points to left as it was, silently.
        if let Ok(to) = fs::read_link(&target) {
            let e = io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "it is a symbolic link (to {}); checkpoints replace and rotate their path, which would move \
                     the link and leave its file behind: give the file's own path, or link the folder instead",
                    to.display()
                ),
            );
            return Err(io_error(&target, e));
        }
        refuse_special(&target)?;
        refuse_foreign(&target)?;
    }
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    refuse_special_lock(&parent_dir(path).join(format!(".{name}.lock")))?;
    // The folder, or the nearest one there to make it in, must take files:
    // said of the folder (it was said of the lock file, as an OS error).
    let folder = parent_dir(path).ancestors().find(|a| a.as_os_str().is_empty() || a.is_dir()).map(Path::to_path_buf);
    if let Some(folder) = folder {
        let shown = if folder.as_os_str().is_empty() { Path::new(".") } else { &folder };
        if let Err(e) = crate::atomic_file::probe_writable(shown) {
            let made = if shown == parent_dir(path) { "" } else { ", where its folder would be made," };
            let e = io::Error::new(
                e.kind(),
                format!(
                    "the folder {}{made} cannot be written ({e}); choose a checkpoint path in a folder this user \
                     can write",
                    shown.display()
                ),
            );
            return Err(io_error(path, e));
        }
    }
    Ok(())
}

/// An error when a FIFO, a device or a socket stands at the checkpoint's
/// lock file: opening a FIFO for writing waits for a reader forever.
fn refuse_special_lock(lock: &Path) -> Result<(), CheckpointError> {
    let Some(kind) = crate::atomic_file::special_kind(lock) else { return Ok(()) };
    let e = io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("the checkpoint's lock file is {kind}, not a regular file, and is never opened as one: remove it"),
    );
    Err(io_error(lock, e))
}

/// An error when `path` is there but neither a regular file nor a folder
/// (a FIFO, a device, a socket): reading a FIFO waits for a writer forever,
/// and a checkpoint written in its place would replace a device node.
fn refuse_special(path: &Path) -> Result<(), CheckpointError> {
    let Some(kind) = crate::atomic_file::special_kind(path) else { return Ok(()) };
    let e = io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("it is {kind}, not a regular file; a checkpoint is never read from or written over one: choose another checkpoint path"),
    );
    Err(io_error(path, e))
}

/// `Foreign` when `path` is a file that neither starts nor ends as a KynML
/// checkpoint does (the magic is at both ends: one damaged is a damaged
/// checkpoint, which `--fresh` may replace): a write or a rotation must
/// never replace it.
fn refuse_foreign(path: &Path) -> Result<(), CheckpointError> {
    if !path.is_file() {
        return Ok(());
    }
    refuse_foreign_read(path, File::open(path))
}

/// [`refuse_foreign`] of the file at `path`, as opened. A file that cannot
/// be read (another user's, say) is said as such: it may well be a good
/// checkpoint, not one to move away.
fn refuse_foreign_read(path: &Path, opened: io::Result<impl io::Read + io::Seek>) -> Result<(), CheckpointError> {
    use std::io::SeekFrom;
    let (mut head, mut tail) = ([0u8; 8], [0u8; 8]);
    let mut file = opened.map_err(|e| io_error(path, e))?;
    let n = file.read(&mut head).map_err(|e| io_error(path, e))?;
    let tail_read = file.seek(SeekFrom::End(-8)).and_then(|_| file.read_exact(&mut tail)).is_ok();
    let magic = super::format::MAGIC;
    // Shorter than the magic and the start of it (empty, say): a checkpoint
    // cut short, as a crash or a copy onto a full disk leaves one.
    let cut = n < 8 && head[..n] == magic[..n];
    let ours = cut || n == 8 && head == magic || tail_read && tail == magic;
    if !ours {
        return Err(CheckpointError::Foreign { path: path.to_path_buf(), kind: foreign_kind(&head) });
    }
    Ok(())
}

/// Whether `path` is a file that PyTorch's `torch.save` wrote (a zip
/// archive or a pickle, by its first bytes): a checkpoint the Python tool
/// left at a spec's checkpoint path. Anything else, a folder or a FIFO
/// included, is not (and is not opened).
pub fn holds_pytorch(path: &Path) -> bool {
    let mut head = Vec::new();
    if !path.is_file()
        || File::open(path).and_then(|f| io::Read::read_to_end(&mut io::Read::take(f, 512), &mut head)).is_err()
    {
        return false;
    }
    match head.as_slice() {
        // A zip whose first member is `NAME/data.pkl`, as `torch.save`
        // writes it (not any zip: a `.npz` or a spreadsheet is no checkpoint).
        [b'P', b'K', 3, 4, ..] if head.len() >= 30 => {
            let name_len = usize::from(u16::from_le_bytes([head[26], head[27]]));
            head.get(30..30 + name_len).is_some_and(|name| name.ends_with(b"data.pkl"))
        }
        // The pickle older versions of `torch.save` write.
        [0x80, 2..=5, ..] => true,
        _ => false,
    }
}

/// Where KynML keeps the checkpoints of a spec whose checkpoint path holds
/// the Python tool's PyTorch checkpoint ([`holds_pytorch`]): beside it,
/// its name followed by `.kynml` (`checkpoints/deepnet.pt.kynml`).
pub fn beside_pytorch(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".kynml");
    PathBuf::from(name)
}

/// What a file that is not a KynML checkpoint seems to be, from its first
/// bytes: the checkpoints of the Python tool specs come from are PyTorch's.
fn foreign_kind(head: &[u8; 8]) -> Option<&'static str> {
    match head {
        [b'P', b'K', 3, 4, ..] => Some(
            "a zip archive, as PyTorch's `torch.save` writes: a checkpoint of the Python tool, which KynML cannot \
             resume from",
        ),
        [0x80, 2..=5, ..] => Some("a Python pickle, as older versions of PyTorch's `torch.save` write"),
        _ => None,
    }
}

impl Drop for CheckpointWriter {
    fn drop(&mut self) {
        // The thread finishes the save it holds before it reads this.
        let _ = self.messages.send(Message::Shutdown);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn wait(in_flight: Option<Receiver<WriteResult>>) -> WriteResult {
    match in_flight {
        None => Ok(()),
        // A closed channel means the thread died before it answered.
        Some(result) => result.recv().unwrap_or(Err(CheckpointError::WriterStopped)),
    }
}

type WriteLog = Mutex<Vec<(std::time::Instant, std::time::Instant)>>;

fn run(inbox: Receiver<Message>, keep: usize, log: &WriteLog, replaced: &Mutex<Option<PathBuf>>) {
    while let Ok(message) = inbox.recv() {
        match message {
            Message::Save { path, checkpoint, model_hash, done, replace } => {
                let start = std::time::Instant::now();
                let placing = if replace { Placing::Replace } else { Placing::Rotate(keep) };
                // Written a tensor at a time: the file is never a second
                // copy of the checkpoint in memory.
                let result = checkpoint_header(&checkpoint, &model_hash).and_then(|header| {
                    write_atomic(&path, placing, |file| write_checkpoint(file, &header, &checkpoint.tensors))
                });
                if replace && result.is_ok() {
                    replaced.lock().unwrap_or_else(PoisonError::into_inner).take_if(|p| *p == path);
                }
                log.lock().unwrap_or_else(PoisonError::into_inner).push((start, std::time::Instant::now()));
                // Nobody waits for it once the writer is being dropped.
                let _ = done.send(result);
            }
            Message::Shutdown => break,
        }
    }
}

/// Reads the checkpoint at `path`: `Ok(None)` when there is none, an error
/// when the file is not a whole, undamaged checkpoint. Temporary files that a
/// crashed write left next to it are ignored ([`remove_stray_temps`] cleans
/// them).
pub fn load(path: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
    refuse_special(path)?;
    match fs::read(path) {
        Ok(bytes) => decode(&bytes).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(CheckpointError::Io { path: path.to_path_buf(), source }),
    }
}

/// Removes the temporary files that writes to `path` by other processes left
/// behind when they died, and returns their paths; this process's own are
/// kept, since one may be a write in flight. Call it only when no other
/// process is writing to `path`.
pub fn remove_stray_temps(path: &Path) -> Result<Vec<PathBuf>, CheckpointError> {
    let Some(name) = path.file_name() else { return Ok(Vec::new()) };
    let dir = parent_dir(path);
    let prefix = temp_prefix(name);
    let ours = format!("{prefix}{}-", std::process::id());
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(io_error(dir, source)),
    };
    let mut removed = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error(dir, e))?;
        let file_name = entry.file_name();
        let Some(file_name) = file_name.to_str() else { continue };
        if file_name.starts_with(&prefix) && !file_name.starts_with(&ours) {
            fs::remove_file(entry.path()).map_err(|e| io_error(&entry.path(), e))?;
            removed.push(entry.path());
        }
    }
    Ok(removed)
}

/// Removes the checkpoint at `path` and its older copies (`path.1`,
/// `path.2`, ..., however many an earlier `keep` left), KynML checkpoints
/// only, at once (a run started with `--fresh` gives them up only once its
/// first save is in place instead: [`CheckpointWriter::replace_at_next_save`]),
/// so that the run discarded neither rotates into the next run's copies nor
/// is offered later as one of them.
pub fn discard(path: &Path) -> Result<(), CheckpointError> {
    for file in discarded(path) {
        fs::remove_file(&file).map_err(|e| io_error(&file, e))?;
    }
    Ok(())
}

/// The files [`discard`] removes now: the checkpoint at `path` and the
/// older copies rotation left beside it, `path.1`, `path.2`, ... up to the
/// first number missing (a lower `keep` than the discarded run's does not
/// hide its copies; a `path.20261127` kept by hand is not one), those that
/// are KynML checkpoints. One number may be missing where `path` is there:
/// a run killed inside a rotation, which moves the copies up one from the
/// oldest down with `path` in place, leaves such a gap (`path.1` missing
/// once the copies moved, or `path.2` between two moves).
pub fn discarded(path: &Path) -> Vec<PathBuf> {
    let mut gap = path.is_file();
    let mut next = 1;
    let mut copies = Vec::new();
    for n in kept_numbers(path, usize::MAX) {
        if n == next + 1 && std::mem::take(&mut gap) {
            next += 1;
        }
        if n != next {
            break;
        }
        copies.push(numbered(path, n));
        next += 1;
    }
    std::iter::once(path.to_path_buf()).chain(copies).filter(|f| f.is_file() && refuse_foreign(f).is_ok()).collect()
}

/// Write to a temporary file in the target's folder, sync it, rotate older
/// copies, rename it over `path`, sync the folder. On failure the temporary
/// file is removed and `path` is untouched.
fn write_atomic(
    path: &Path,
    placing: Placing,
    body: impl FnOnce(&mut io::BufWriter<File>) -> io::Result<()>,
) -> WriteResult {
    let name = path.file_name().ok_or_else(|| {
        io_error(path, io::Error::new(io::ErrorKind::InvalidInput, "the checkpoint path does not name a file"))
    })?;
    let dir = parent_dir(path);
    fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    let temp = dir.join(temp_name(name));
    let placed = write_and_place(&temp, path, body, placing);
    if placed.is_err() {
        let _ = fs::remove_file(&temp);
    }
    placed?;
    sync_dir(dir).map_err(|e| io_error(dir, e))
}

fn write_and_place(
    temp: &Path,
    path: &Path,
    body: impl FnOnce(&mut io::BufWriter<File>) -> io::Result<()>,
    placing: Placing,
) -> WriteResult {
    let file = OpenOptions::new().write(true).create_new(true).open(temp).map_err(|e| io_error(temp, e))?;
    let mut out = io::BufWriter::with_capacity(1 << 20, file);
    body(&mut out).map_err(|e| io_error(temp, e))?;
    let file = out.into_inner().map_err(|e| io_error(temp, e.into_error()))?;
    file.sync_all().map_err(|e| io_error(temp, e))?;
    drop(file);
    place(temp, path, placing)
}

/// How a new checkpoint takes its path.
#[derive(Debug, Clone, Copy)]
enum Placing {
    /// Its older copies move up, `keep` kept in all (the checkpoint itself
    /// one of them).
    Rotate(usize),
    /// It replaces the checkpoint there and gives up its older copies (those
    /// [`discarded`] names): a fresh start's first save.
    Replace,
}

/// Renames the whole file `temp` over `path`, placed as `placing` says:
/// each step before the rename (an older copy moved up or set aside, the
/// link of `path` as `path.1`) is undone when a later one fails, the rename
/// over `path` (immutable, or a mount point) included, so a save that
/// fails gives up no copy. What drops out is set aside under a temporary
/// name until the new checkpoint is in place.
fn place(temp: &Path, path: &Path, placing: Placing) -> WriteResult {
    let mut moves = Moves::default();
    let ready = match placing {
        Placing::Rotate(keep) => rotate(path, keep, &mut moves),
        Placing::Replace => set_aside_copies(path, &mut moves),
    };
    match ready.and_then(|()| fs::rename(temp, path).map_err(|e| io_error(path, e))) {
        Ok(()) => {
            moves.forget();
            Ok(())
        }
        Err(e) => {
            moves.undo();
            Err(e)
        }
    }
}

/// The renames and links a save made before its rename, to undo in reverse
/// when it fails, or to forget (removing what was set aside) once it
/// succeeds.
#[derive(Default)]
struct Moves {
    /// Renames made, `(from, to)`, in order.
    renamed: Vec<(PathBuf, PathBuf)>,
    /// `path.1`, once the link (or copy) of `path` as it was tried.
    linked: Option<PathBuf>,
    /// The copies that drop out, each where it was set aside and its place.
    aside: Vec<(PathBuf, PathBuf)>,
}

impl Moves {
    fn undo(self) {
        if let Some(linked) = &self.linked {
            let _ = fs::remove_file(linked);
        }
        for (from, to) in self.renamed.iter().rev() {
            let _ = fs::rename(to, from);
        }
        for (aside, place) in self.aside.iter().rev() {
            let _ = fs::rename(aside, place);
        }
    }

    fn forget(self) {
        // Temporary files' names: one left here (its removal failed, or the
        // run died first) is removed when a run next starts at this path
        // (`remove_stray_temps`), never taken for a copy.
        for (aside, _) in &self.aside {
            let _ = fs::remove_file(aside);
        }
    }
}

/// `path`'s temporary name for a file set aside beside it.
fn aside_name(path: &Path) -> PathBuf {
    parent_dir(path).join(temp_name(path.file_name().unwrap_or_default()))
}

/// Moves `path.{keep-2}` → `path.{keep-1}`, ..., `path.1` → `path.2` (the
/// one `path.{keep-1}` held, which drops out, set aside first), then links
/// `path` as `path.1`; `path` itself stays in place until the rename that
/// replaces it. Each step is logged in `moves`.
fn rotate(path: &Path, keep: usize, moves: &mut Moves) -> WriteResult {
    if keep <= 1 || !path.is_file() {
        return Ok(());
    }
    // `prepare` checked these before training; a file put there since is
    // still never replaced.
    let present = kept_numbers(path, keep);
    for &n in &present {
        refuse_foreign(&numbered(path, n))?;
    }
    // A rotation killed before its rename left `path` linked as `path.1`,
    // the copies moved up already: the rename alone finishes it (moving
    // them up again made `path.1` and `path.2` the same checkpoint).
    if same_file(path, &numbered(path, 1)) {
        return Ok(());
    }
    // Dropped only where another takes its place (`path` itself, linked as
    // `path.1` when keep is 2): a copy missing below it (a run killed inside
    // a rotation, one removed by hand) leaves it be. A folder there is
    // left, for the move onto it to fail.
    let oldest = numbered(path, keep - 1);
    let replaced = keep == 2 || present.contains(&(keep - 2));
    if replaced && fs::symlink_metadata(&oldest).is_ok_and(|m| !m.is_dir()) {
        let aside = aside_name(path);
        fs::rename(&oldest, &aside).map_err(|e| io_error(&oldest, e))?;
        moves.aside.push((aside, oldest));
    }
    // From the oldest down, each into the place the one before it left.
    for &i in present.iter().rev().filter(|&&i| i + 1 < keep) {
        let (from, to) = (numbered(path, i), numbered(path, i + 1));
        match fs::rename(&from, &to) {
            Ok(()) => moves.renamed.push((from, to)),
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_error(&from, e)),
            Err(_) => {}
        }
    }
    let first = numbered(path, 1);
    // Logged first: a copy cut short (a full disk) is removed with the rest.
    moves.linked = Some(first.clone());
    if fs::hard_link(path, &first).is_err() {
        fs::copy(path, &first).map_err(|e| io_error(&first, e))?;
    }
    Ok(())
}

/// Whether `a` and `b` are one file (hard links of it).
#[cfg(unix)]
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (fs::metadata(a), fs::symlink_metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_: &Path, _: &Path) -> bool {
    false
}

/// Sets aside the older copies of the checkpoint at `path` (those
/// [`discarded`] names), which a checkpoint replacing it gives up once it is
/// in place.
fn set_aside_copies(path: &Path, moves: &mut Moves) -> WriteResult {
    for copy in discarded(path).into_iter().filter(|p| p != path) {
        let aside = aside_name(path);
        fs::rename(&copy, &aside).map_err(|e| io_error(&copy, e))?;
        moves.aside.push((aside, copy));
    }
    Ok(())
}

/// The numbers `n` in `1..keep` for which `path.{n}` exists, ascending:
/// the folder is listed once, so a `keep` of a billion costs no more than
/// the files there are.
fn kept_numbers(path: &Path, keep: usize) -> Vec<usize> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else { return Vec::new() };
    let Ok(entries) = fs::read_dir(parent_dir(path)) else { return Vec::new() };
    let mut found: Vec<usize> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix(name)?.strip_prefix('.')?.parse().ok())
        .filter(|&n: &usize| n >= 1 && n < keep)
        .collect();
    found.sort_unstable();
    found
}

/// The older copies rotation kept beside `path` (`path.1`, `path.2`, ...),
/// newest first, whatever `keep` is now.
pub fn older_copies(path: &Path) -> Vec<PathBuf> {
    kept_numbers(path, usize::MAX).into_iter().map(|n| numbered(path, n)).collect()
}

/// `path` with `.{n}` appended to its file name.
fn numbered(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// The folder `path` lives in; `.` for a bare file name.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// `.<name>.tmp-`, with a long name cut so that the temporary file's name
/// stays within the usual 255-byte limit.
fn temp_prefix(name: &OsStr) -> String {
    let mut name = name.to_string_lossy().into_owned();
    let mut cut = name.len().min(200);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    name.truncate(cut);
    format!(".{name}.tmp-")
}

fn temp_name(name: &OsStr) -> OsString {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{}{}-{n}", temp_prefix(name), std::process::id()).into()
}

/// Makes the rename itself durable. Some file systems cannot sync a folder;
/// they say so with `InvalidInput` or `Unsupported`, which is not a failure
/// of the write.
#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    match File::open(dir)?.sync_all() {
        Err(e) if matches!(e.kind(), io::ErrorKind::InvalidInput | io::ErrorKind::Unsupported) => Ok(()),
        other => other,
    }
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

fn io_error(path: &Path, source: io::Error) -> CheckpointError {
    CheckpointError::Io { path: path.to_path_buf(), source }
}

#[cfg(test)]
mod tests {
    use super::super::format::{encode, NamedTensor, MAX_STATE_LEN};
    use super::*;
    use serde_json::json;

    fn snapshot(step: i64) -> Checkpoint {
        Checkpoint::new(
            vec![
                NamedTensor::f32("w", vec![2, 2], vec![1.0, 2.0, 3.0, step as f32]),
                NamedTensor::i64("step", vec![], vec![step]),
            ],
            json!({ "step": step }),
        )
    }

    fn step_at(path: &Path) -> i64 {
        load(path).unwrap().expect("a checkpoint").state_value()["step"].as_i64().unwrap()
    }

    #[test]
    fn one_run_at_a_time_writes_to_a_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/run.ckpt");
        let held = lock(&path).expect("the first run locks");
        // A second run (here: in this process; another process meets the
        // kernel's lock on the same file) is refused, up front too.
        assert!(matches!(lock(&path), Err(CheckpointError::InUse { .. })));
        let err = prepare(&path, 1).map(drop).unwrap_err();
        assert!(err.to_string().contains("another run that is still going writes its checkpoints"), "{err}");
        // Other paths in the folder are free.
        drop(lock(&dir.path().join("sub/other.ckpt")).expect("another path"));
        drop(held);
        drop(prepare(&path, 1).expect("free once the first run ends"));
        drop(lock(&path).expect("free once the first run ends"));
    }

    #[test]
    fn a_folder_path_or_a_name_too_long_to_rotate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("ck2/");
        let folder = PathBuf::from(format!("{}/", folder.display()));
        assert!(check_targets(&folder, 1).unwrap_err().to_string().contains("names a folder"));
        let long = dir.path().join("x".repeat(249));
        check_targets(&long, 1).expect("249 bytes fit, with the lock's 255");
        drop(prepare(&long, 1).expect("and the lock file can be made"));
        let err = check_targets(&dir.path().join("x".repeat(250)), 1).unwrap_err().to_string();
        assert!(err.contains("its lock file's name takes 256"), "{err}");
        let err = check_targets(&dir.path().join("x".repeat(249)), 1_000_001).unwrap_err().to_string();
        assert!(err.contains("with keep = 1000001 the oldest copy's name takes 257"), "{err}");
    }

    fn file_names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        names
    }

    /// The copies a run killed inside a rotation left are the run's: one
    /// number may be missing, beside its checkpoint; not two, and not
    /// without it (`path.2` alone is someone's, not the rotation's).
    #[test]
    fn discarded_copies_pass_over_the_one_gap_a_rotation_leaves() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ckpt");
        let writer = CheckpointWriter::spawn_with_keep(6);
        for step in 1..=6 {
            writer.save_sync(path.clone(), snapshot(step), "h".into()).unwrap();
        }
        let copy = |n: usize| numbered(&path, n);
        let names = |files: Vec<PathBuf>| files.iter().map(|f| f.file_name().unwrap().to_owned()).collect::<Vec<_>>();
        assert_eq!(discarded(&path).len(), 6);
        fs::remove_file(copy(2)).unwrap();
        let all_but_2: Vec<PathBuf> = [path.clone(), copy(1), copy(3), copy(4), copy(5)].into();
        assert_eq!(names(discarded(&path)), names(all_but_2));
        fs::remove_file(copy(4)).unwrap();
        assert_eq!(names(discarded(&path)), names(vec![path.clone(), copy(1), copy(3)]), "one gap, not two");
        fs::remove_file(&path).unwrap();
        fs::remove_file(copy(1)).unwrap();
        assert!(discarded(&path).is_empty(), "no checkpoint beside them: copies kept by hand");
    }

    #[test]
    fn writer_is_shareable_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<CheckpointWriter>();
    }

    #[test]
    fn async_and_sync_saves_write_identical_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("async/x.ckpt"), dir.path().join("sync/x.ckpt"));
        let writer = CheckpointWriter::spawn();
        writer.save_async(a.clone(), snapshot(3), "h".into()).unwrap();
        writer.save_sync(b.clone(), snapshot(3), "h".into()).unwrap();
        writer.flush().unwrap();
        let bytes = fs::read(&a).unwrap();
        assert_eq!(bytes, fs::read(&b).unwrap());
        assert_eq!(bytes, encode(&snapshot(3), "h"));
        let back = load(&a).unwrap().unwrap();
        assert_eq!((back.state_value(), back.tensors), (snapshot(3).state_value(), snapshot(3).tensors));
        assert_eq!(file_names(&dir.path().join("async")), ["x.ckpt"], "no temporary file is left behind");
    }

    #[test]
    fn missing_checkpoint_loads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(&dir.path().join("none.ckpt")).unwrap().is_none());
        assert!(load(&dir.path().join("no/such/folder/none.ckpt")).unwrap().is_none());
    }

    #[test]
    fn later_saves_replace_earlier_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ckpt");
        let writer = CheckpointWriter::spawn();
        for step in 1..=5 {
            writer.save_async(path.clone(), snapshot(step), "h".into()).unwrap();
        }
        writer.flush().unwrap();
        assert_eq!(step_at(&path), 5);
        assert_eq!(file_names(dir.path()), ["x.ckpt"]);
    }

    #[test]
    fn failed_write_is_reported_by_flush_and_the_next_save() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.ckpt");
        // A folder that is a regular file stops even root.
        let blocker = dir.path().join("not-a-folder");
        fs::write(&blocker, "x").unwrap();
        let bad = blocker.join("x.ckpt");
        let writer = CheckpointWriter::spawn();
        writer.save_sync(good.clone(), snapshot(1), "h".into()).unwrap();

        writer.save_async(bad.clone(), snapshot(2), "h".into()).unwrap();
        match writer.flush() {
            Err(CheckpointError::Io { path, .. }) => assert_eq!(path, blocker),
            other => panic!("expected an Io error, got {other:?}"),
        }
        assert!(writer.flush().is_ok(), "an error is returned once");

        writer.save_async(bad, snapshot(3), "h".into()).unwrap();
        let next = writer.save_async(good.clone(), snapshot(4), "h".into());
        assert!(matches!(next, Err(CheckpointError::Io { .. })), "{next:?}");
        writer.flush().unwrap();
        assert_eq!(step_at(&good), 4, "the save after a failure is still written");

        // A hand-off keeps the two apart: the earlier write failed, this one
        // was queued (the trainer announces it), and with waiting, written.
        writer.save_async(blocker.join("y.ckpt"), snapshot(5), "h".into()).unwrap();
        let done = writer.hand_off(good.clone(), snapshot(6), "h".into(), false);
        assert!(matches!(done.previous, Err(CheckpointError::Io { .. })) && done.this.is_ok(), "{done:?}");
        writer.flush().unwrap();
        writer.save_async(blocker.join("z.ckpt"), snapshot(7), "h".into()).unwrap();
        let done = writer.hand_off(good.clone(), snapshot(8), "h".into(), true);
        assert!(matches!(done.previous, Err(CheckpointError::Io { .. })) && done.this.is_ok(), "{done:?}");
        assert_eq!(step_at(&good), 8, "written before hand_off returned");
        let done = writer.hand_off(blocker.join("w.ckpt"), snapshot(9), "h".into(), true);
        assert!(done.previous.is_ok() && matches!(done.this, Err(CheckpointError::Io { .. })), "{done:?}");
    }

    #[test]
    fn failed_write_leaves_the_previous_checkpoint_loadable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ckpt");
        let writer = CheckpointWriter::spawn_with_keep(3);
        writer.save_sync(path.clone(), snapshot(1), "h".into()).unwrap();
        writer.save_sync(path.clone(), snapshot(2), "h".into()).unwrap();
        // Rotation must move `x.ckpt.1` to `x.ckpt.2`; a non-empty folder
        // there makes the rename fail, even for root, after the new file is
        // already written to its temporary name.
        fs::create_dir(numbered(&path, 2)).unwrap();
        fs::write(numbered(&path, 2).join("keep"), "x").unwrap();
        writer.save_async(path.clone(), snapshot(3), "h".into()).unwrap();
        let err = writer.save_async(dir.path().join("other.ckpt"), snapshot(9), "h".into()).unwrap_err();
        assert!(err.to_string().contains("x.ckpt.1"), "{err}");
        writer.flush().unwrap();
        assert_eq!(step_at(&path), 2);
        assert_eq!(step_at(&numbered(&path, 1)), 1);
        assert_eq!(file_names(dir.path()), ["other.ckpt", "x.ckpt", "x.ckpt.1", "x.ckpt.2"], "temporary file removed");
    }

    #[test]
    fn a_huge_keep_costs_only_the_files_there() {
        // `keep = 1e12` once stat'ed a trillion names before training.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ckpt");
        let keep = 1_000_000_000_000;
        let writer = CheckpointWriter::spawn_with_keep(keep);
        for step in 1..=3 {
            writer.save_sync(path.clone(), snapshot(step), "h".into()).unwrap();
        }
        assert_eq!(file_names(dir.path()), ["x.ckpt", "x.ckpt.1", "x.ckpt.2"]);
        assert_eq!(step_at(&numbered(&path, 2)), 1);
        check_targets(&path, keep).unwrap();
        fs::write(numbered(&path, 7), "not a checkpoint").unwrap();
        assert!(matches!(check_targets(&path, keep), Err(CheckpointError::Foreign { .. })));
        assert!(check_targets(&path, 7).is_ok(), "x.ckpt.7 is beyond what keep = 7 touches");
    }

    /// A checkpoint this process may not read is an error saying so, not
    /// "not a KynML checkpoint" (which invites moving a good one away).
    /// The refusal of a file that could not be opened is checked as such
    /// (root opens any file), and, where the test does not run as root, of
    /// a real file it may not read.
    #[test]
    fn an_unreadable_checkpoint_is_said_unreadable_not_foreign() {
        let path = Path::new("x.ckpt");
        let denied = Err::<io::Cursor<Vec<u8>>, _>(io::Error::from(io::ErrorKind::PermissionDenied));
        match refuse_foreign_read(path, denied) {
            Err(CheckpointError::Io { path: p, source }) => {
                assert_eq!((p.as_path(), source.kind()), (path, io::ErrorKind::PermissionDenied));
            }
            other => panic!("expected a permission error, got {other:?}"),
        }
        // What is read is still judged: a text file is foreign, a
        // checkpoint cut short is not.
        let text = Ok(io::Cursor::new(b"not a checkpoint at all".to_vec()));
        assert!(matches!(refuse_foreign_read(path, text), Err(CheckpointError::Foreign { .. })));
        assert!(refuse_foreign_read(path, Ok(io::Cursor::new(Vec::new()))).is_ok());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("x.ckpt");
            let writer = CheckpointWriter::spawn_with_keep(2);
            writer.save_sync(path.clone(), snapshot(1), "h".into()).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o000)).unwrap();
            if File::open(&path).is_err() {
                assert!(matches!(check_targets(&path, 2), Err(CheckpointError::Io { .. })));
            }
        }
    }

    /// A lock taken on a path whose folder was still to be made covers
    /// that path once it is (the key was the folder's path before it
    /// existed, and a run given the lock took it for another path's).
    #[cfg(unix)]
    #[test]
    fn a_lock_taken_before_its_folder_existed_covers_its_path() {
        // Through a linked folder, whose real path differs from the one given.
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        let path = dir.path().join("link/new/deeper/x.ckpt");
        let held = lock(&path).unwrap();
        assert!(held.covers(&path));
        assert!(!held.covers(&dir.path().join("new/other.ckpt")));
    }

    /// A checkpoint whose first bytes are damaged still ends in the magic:
    /// it is ours to replace (`--fresh`, a rotation), and a file that is
    /// another kind at both ends is not.
    #[test]
    fn a_checkpoint_damaged_at_its_start_is_still_ours_to_replace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ckpt");
        let writer = CheckpointWriter::spawn();
        writer.save_sync(path.clone(), snapshot(1), "h".into()).unwrap();
        let mut bytes = fs::read(&path).unwrap();
        bytes[2] ^= 0x40;
        fs::write(&path, &bytes).unwrap();
        check_targets(&path, 1).unwrap();
        writer.save_sync(path.clone(), snapshot(2), "h".into()).unwrap();
        assert_eq!(step_at(&path), 2);
        fs::write(&path, "step,loss\n1,0.5\n").unwrap();
        assert!(matches!(check_targets(&path, 1), Err(CheckpointError::Foreign { .. })));
        // Cut short before the magic ends: a damaged checkpoint, not another
        // tool's file (an empty one was refused as foreign, with no word of
        // the whole older copy beside it).
        for cut in [&b""[..], b"KYN"] {
            fs::write(&path, cut).unwrap();
            check_targets(&path, 1).unwrap();
        }
        fs::write(&path, b"abc").unwrap();
        assert!(matches!(check_targets(&path, 1), Err(CheckpointError::Foreign { .. })));
        // A link at the path, or at a copy rotation moves, is refused: it
        // was moved to `.1` and replaced, its file kept as it was.
        #[cfg(unix)]
        for (link, keep) in [(path.clone(), 1), (numbered(&path, 1), 2)] {
            let _ = fs::remove_file(&path);
            writer.save_sync(path.clone(), snapshot(3), "h".into()).unwrap();
            let stored = dir.path().join("stored.ckpt");
            fs::copy(&path, &stored).unwrap();
            let _ = fs::remove_file(&link);
            std::os::unix::fs::symlink(&stored, &link).unwrap();
            let err = check_targets(&path, keep).unwrap_err().to_string();
            assert!(err.contains("it is a symbolic link") && err.contains("link the folder instead"), "{err}");
            fs::remove_file(&link).unwrap();
        }
    }

    #[test]
    fn keep_rotates_older_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ckpt");
        let writer = CheckpointWriter::spawn_with_keep(3);
        for step in 1..=4 {
            writer.save_async(path.clone(), snapshot(step), "h".into()).unwrap();
        }
        writer.flush().unwrap();
        assert_eq!((step_at(&path), step_at(&numbered(&path, 1)), step_at(&numbered(&path, 2))), (4, 3, 2));
        assert_eq!(file_names(dir.path()), ["x.ckpt", "x.ckpt.1", "x.ckpt.2"]);

        let single = dir.path().join("y.ckpt");
        let writer = CheckpointWriter::spawn_with_keep(1);
        writer.save_sync(single.clone(), snapshot(1), "h".into()).unwrap();
        writer.save_sync(single.clone(), snapshot(2), "h".into()).unwrap();
        assert!(!numbered(&single, 1).exists());
    }

    #[test]
    fn a_rename_that_fails_gives_up_no_older_copy() {
        // An immutable checkpoint (or one bind-mounted in place) cannot be
        // renamed over: the copies had moved up all the same, and each failed
        // save lost one more of them. Here the rename fails for a temporary
        // file that is not there.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ckpt");
        let writer = CheckpointWriter::spawn_with_keep(3);
        for step in 1..=3 {
            writer.save_sync(path.clone(), snapshot(step), "h".into()).unwrap();
        }
        let steps = || (step_at(&path), step_at(&numbered(&path, 1)), step_at(&numbered(&path, 2)));
        assert_eq!(steps(), (3, 2, 1));
        let gone = dir.path().join(".x.ckpt.tmp-gone");
        let err = place(&gone, &path, Placing::Rotate(3)).unwrap_err().to_string();
        assert!(err.contains("x.ckpt"), "{err}");
        assert_eq!(steps(), (3, 2, 1));
        assert_eq!(file_names(dir.path()), ["x.ckpt", "x.ckpt.1", "x.ckpt.2"], "nothing left aside");
        // Nor when a fresh start's replacing rename fails: its copies are set
        // aside first, and put back.
        assert!(place(&gone, &path, Placing::Replace).is_err());
        assert_eq!(steps(), (3, 2, 1));
        assert_eq!(file_names(dir.path()), ["x.ckpt", "x.ckpt.1", "x.ckpt.2"]);
        // A write that succeeds still rotates.
        writer.save_sync(path.clone(), snapshot(4), "h".into()).unwrap();
        assert_eq!(steps(), (4, 3, 2));
        assert_eq!(file_names(dir.path()), ["x.ckpt", "x.ckpt.1", "x.ckpt.2"]);

        // Nor when the link of the checkpoint as its first copy fails: with
        // keep = 2, a folder at `path.1` stays there (it is not set aside),
        // and neither a link nor a copy can take its place.
        let two = dir.path().join("two.ckpt");
        fs::copy(&path, &two).unwrap();
        fs::create_dir(numbered(&two, 1)).unwrap();
        assert!(place(&gone, &two, Placing::Rotate(2)).is_err());
        assert!(numbered(&two, 1).is_dir() && step_at(&two) == 4);
        fs::remove_dir(numbered(&two, 1)).unwrap();
        fs::remove_file(&two).unwrap();

        // A rotation killed before its rename (`path` linked as `path.1`, the
        // copies moved up) is finished by the next save's rename alone.
        fs::remove_file(numbered(&path, 2)).unwrap();
        fs::rename(numbered(&path, 1), numbered(&path, 2)).unwrap();
        fs::hard_link(&path, numbered(&path, 1)).unwrap();
        assert_eq!(steps(), (4, 4, 3));
        writer.save_sync(path.clone(), snapshot(5), "h".into()).unwrap();
        assert_eq!(steps(), (5, 4, 3), "no copy twice");

        // A copy missing below the oldest (a run killed inside a rotation,
        // one removed by hand) keeps the oldest: nothing moves onto it.
        fs::remove_file(numbered(&path, 1)).unwrap();
        writer.save_sync(path.clone(), snapshot(6), "h".into()).unwrap();
        assert_eq!(steps(), (6, 5, 3));
        assert_eq!(file_names(dir.path()), ["x.ckpt", "x.ckpt.1", "x.ckpt.2"]);
    }

    #[test]
    fn a_fresh_start_gives_up_the_old_copies_only_once_its_own_is_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ckpt");
        let old = CheckpointWriter::spawn_with_keep(3);
        for step in 1..=3 {
            old.save_sync(path.clone(), snapshot(step), "h".into()).unwrap();
        }
        drop(old);
        let steps = || (step_at(&path), step_at(&numbered(&path, 1)), step_at(&numbered(&path, 2)));
        let writer = CheckpointWriter::spawn_with_keep(3);
        writer.replace_at_next_save(path.clone());
        // A save to another path leaves the replacing to this one's.
        let other = dir.path().join("y.ckpt");
        writer.save_sync(other.clone(), snapshot(7), "h".into()).unwrap();
        // A first save that fails (its state too long here; a full disk or a
        // file-size limit in a run) leaves the old run's checkpoints.
        let too_long = Checkpoint::new(vec![], json!("x".repeat(MAX_STATE_LEN)));
        assert!(writer.save_sync(path.clone(), too_long, "h".into()).is_err());
        assert_eq!(steps(), (3, 2, 1));
        // The first that succeeds replaces the checkpoint and removes its copies...
        writer.save_sync(path.clone(), snapshot(10), "h".into()).unwrap();
        assert_eq!(step_at(&path), 10);
        assert_eq!(file_names(dir.path()), ["x.ckpt", "y.ckpt"]);
        // ... once: the next saves rotate as usual.
        writer.save_sync(path.clone(), snapshot(11), "h".into()).unwrap();
        assert_eq!((step_at(&path), step_at(&numbered(&path, 1))), (11, 10));
        assert_eq!(file_names(dir.path()), ["x.ckpt", "x.ckpt.1", "y.ckpt"]);
    }

    #[cfg(unix)]
    #[test]
    fn special_files_and_files_in_the_folders_place_are_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe.ckpt");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        // Reading a FIFO would wait for a writer forever; writing would replace it.
        // Each call that could open a FIFO runs where a regression fails the
        // test instead of hanging the suite.
        fn unblocked<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
            let (send, recv) = std::sync::mpsc::channel();
            std::thread::spawn(move || send.send(f()));
            recv.recv_timeout(std::time::Duration::from_secs(20)).expect("blocked opening a special file")
        }
        for (path, kind) in [(fifo.as_path(), "named pipe"), (Path::new("/dev/null"), "character device")] {
            let owned = path.to_path_buf();
            let err =
                unblocked(move || load(&owned).map(drop)).expect_err("a special file is no checkpoint").to_string();
            assert!(err.contains(kind) && err.contains("another checkpoint path"), "{err}");
            let err = check_targets(path, 1).expect_err("nor a place to write one").to_string();
            assert!(err.contains(kind), "{err}");
        }
        use std::os::unix::fs::FileTypeExt;
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO is left as it was");
        let file = dir.path().join("data.csv");
        fs::write(&file, "a,b\n").unwrap();
        let err = prepare(&file.join("net.ckpt"), 1).expect_err("a file where the folder goes").to_string();
        assert!(err.contains("net.ckpt") && err.contains("data.csv` is a file, not a folder"), "{err}");
        assert_eq!(fs::read_to_string(&file).unwrap(), "a,b\n");
        // A FIFO at the lock file: opening it to write would wait for a reader.
        let made = std::process::Command::new("mkfifo").arg(dir.path().join(".net.ckpt.lock")).status().unwrap();
        assert!(made.success());
        let path = dir.path().join("net.ckpt");
        let err = check_targets(&path, 1).expect_err("a FIFO at the lock").to_string();
        assert!(err.contains(".net.ckpt.lock") && err.contains("named pipe"), "{err}");
        let err = unblocked(move || lock(&path).map(drop)).expect_err("a FIFO at the lock").to_string();
        assert!(err.contains("remove it"), "{err}");
    }

    #[test]
    fn rotation_never_replaces_a_file_that_is_not_a_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ckpt");
        fs::write(numbered(&path, 2), "precious").unwrap();
        prepare(&path, 2).unwrap();
        match prepare(&path, 3) {
            Err(CheckpointError::Foreign { path: found, .. }) => assert_eq!(found, numbered(&path, 2)),
            other => panic!("expected Foreign naming x.ckpt.2, got {other:?}"),
        }
        fs::create_dir(numbered(&path, 1)).unwrap();
        let err = prepare(&path, 2).unwrap_err();
        assert!(err.to_string().contains("x.ckpt.1") && err.to_string().contains("folder"), "{err}");
        fs::remove_dir(numbered(&path, 1)).unwrap();

        // A file put there after `prepare` is still not replaced.
        let writer = CheckpointWriter::spawn_with_keep(3);
        writer.save_sync(path.clone(), snapshot(1), "h".into()).unwrap();
        let err = writer.save_sync(path.clone(), snapshot(2), "h".into()).unwrap_err();
        assert!(matches!(&err, CheckpointError::Foreign { path: p, .. } if *p == numbered(&path, 2)), "{err}");
        assert_eq!(fs::read_to_string(numbered(&path, 2)).unwrap(), "precious");
        assert_eq!(step_at(&path), 1, "the checkpoint before stays in place");
    }

    #[test]
    fn drop_finishes_the_pending_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deep/er/x.ckpt");
        {
            let writer = CheckpointWriter::spawn();
            writer.save_async(path.clone(), snapshot(7), "h".into()).unwrap();
        }
        assert_eq!(step_at(&path), 7);
    }

    #[test]
    fn invalid_checkpoint_is_refused_before_it_is_queued() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ckpt");
        let writer = CheckpointWriter::spawn();
        let bad = Checkpoint::new(vec![NamedTensor::f32("w", vec![3], vec![1.0])], json!({}));
        assert!(matches!(writer.save_async(path.clone(), bad, "h".into()), Err(CheckpointError::InvalidTensor { .. })));
        writer.flush().unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn damaged_files_are_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ckpt");
        let bytes = encode(&snapshot(1), "h");
        fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        assert!(matches!(load(&path), Err(CheckpointError::Truncated { .. })));
        fs::write(&path, b"PK\x03\x04 a PyTorch zip").unwrap();
        assert!(matches!(load(&path), Err(CheckpointError::NotACheckpoint)));
        assert!(matches!(load(dir.path()), Err(CheckpointError::Io { .. })), "a folder is not a checkpoint");
    }

    #[test]
    fn stray_temporary_files_are_ignored_and_removable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ckpt");
        CheckpointWriter::spawn().save_sync(path.clone(), snapshot(1), "h".into()).unwrap();
        let stray = dir.path().join(".x.ckpt.tmp-999999999-0");
        let ours = dir.path().join(format!(".x.ckpt.tmp-{}-77", std::process::id()));
        let bytes = encode(&snapshot(2), "h");
        fs::write(&stray, &bytes[..40]).unwrap();
        fs::write(&ours, b"").unwrap();
        fs::write(dir.path().join(".y.ckpt.tmp-999999999-0"), b"").unwrap();
        assert_eq!(step_at(&path), 1);
        assert_eq!(remove_stray_temps(&path).unwrap(), std::slice::from_ref(&stray));
        assert!(!stray.exists() && ours.exists());
    }

    #[test]
    fn long_names_still_fit_a_temporary_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("{}.ckpt", "é".repeat(120)));
        CheckpointWriter::spawn().save_sync(path.clone(), snapshot(1), "h".into()).unwrap();
        assert_eq!(step_at(&path), 1);
    }

    #[test]
    fn paths_without_a_folder_or_a_name() {
        assert_eq!(parent_dir(Path::new("x.ckpt")), Path::new("."));
        assert_eq!(numbered(Path::new("a/x.ckpt"), 2), Path::new("a/x.ckpt.2"));
        let err = write_atomic(Path::new("/"), Placing::Rotate(1), |f| io::Write::write_all(f, b"")).unwrap_err();
        assert!(err.to_string().contains("does not name a file"), "{err}");
    }
}
