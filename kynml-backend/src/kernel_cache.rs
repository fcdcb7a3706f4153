//! KynML's kernel cache: CubeCL's autotune results and compiled kernels (PTX
//! on CUDA, SPIR-V on Vulkan) kept on disk between runs, in a folder KynML
//! owns and names.
//!
//! Without it every run of a GPU spec tunes each matrix product anew (minutes
//! on an H100) and compiles every kernel again; with it a second run of the
//! same spec starts at once. The folder is, in order: `--cache DIR` (passed
//! to [`choose`]), the `KYNML_CACHE` environment variable, then
//! `$XDG_CACHE_HOME/kynml` or `~/.cache/kynml`. Inside it,
//! `cubecl-<version>/<device model>/` holds CubeCL's own files: a KynML
//! built on another CubeCL never reads them, and neither does another GPU
//! model (CubeCL keys neither its kernels nor its tuning by the model, so a
//! folder copied from an H100 to an A100 would otherwise hand the A100
//! kernels built and tuned for the H100). [`crate::select`] installs the
//! folder of the device it picks, before CubeCL first runs.
//!
//! CubeCL panics on some damaged files (a table of contents that names a
//! missing chunk, an unreadable file), so KynML checks the folder before
//! CubeCL sees it: [`seal`] records each file's length and CRC-32 in
//! `manifest.json` after a run, and [`install`] checks that every recorded
//! prefix is still there, byte for byte (CubeCL only ever appends). A folder
//! that fails the check, or whose manifest was written for another format or
//! CubeCL version, is cleared and started afresh, with a note; a folder that
//! cannot be written turns the cache off, with a note. Neither is an error.
//!
//! ```no_run
//! kynml_backend::kernel_cache::choose(Some("/scratch/kynml-cache".as_ref()));
//! let device = kynml_backend::select(kynml_backend::DeviceChoice::Auto)?;
//! if let Some(cache) = kynml_backend::kernel_cache::installed() {
//!     println!("{}", cache.describe());
//! }
//! // ... train on the device ...
//! kynml_backend::kernel_cache::seal()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use burn::cubecl::config::autotune::AutotuneLevel;
use burn::cubecl::config::cache::CacheConfig;
use burn::cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};

/// The environment variable that moves the cache (`--cache` wins over it).
pub const CACHE_ENV: &str = "KYNML_CACHE";

/// The CubeCL version this binary is built on (Burn 0.21 pins it); a test
/// checks it against `Cargo.lock`. It names the cache's subfolder.
pub const CUBECL_VERSION: &str = "0.10.0";

/// The manifest's format; another number is a foreign cache.
const FORMAT: u32 = 1;
const MANIFEST: &str = "manifest.json";

/// Where the cache folder came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOrigin {
    /// `--cache DIR`, passed to [`choose`].
    Flag,
    /// The `KYNML_CACHE` environment variable.
    Env,
    /// The user's cache directory.
    Default,
}

/// The state of the cache once [`install`] has run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheState {
    /// CubeCL reads and writes its autotune results and kernels under `root`.
    On {
        /// The folder holding CubeCL's files and the manifest.
        root: PathBuf,
        /// Files found there (0 on a first run).
        files: usize,
        /// Their total size in bytes.
        bytes: u64,
    },
    /// No cache: every run tunes and compiles anew.
    Off {
        /// Why, in words.
        reason: String,
    },
    /// CubeCL was configured before KynML could (a library user called
    /// CubeCL first); its own settings apply.
    External,
}

/// The kernel cache of this process: the folder chosen, and its state for
/// the device model installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelCache {
    /// The folder chosen (`root` is its `cubecl-<version>/<device model>` subfolder).
    pub dir: Option<PathBuf>,
    /// Where `dir` came from.
    pub origin: CacheOrigin,
    /// What is in force.
    pub state: CacheState,
    /// Things a person should know: a cleared or foreign cache, a cache
    /// that could not be used. Each is one line.
    pub notes: Vec<String>,
}

impl KernelCache {
    /// One line for "what runs".
    pub fn describe(&self) -> String {
        let moved = match self.origin {
            CacheOrigin::Flag => "from --cache",
            CacheOrigin::Env => "from KYNML_CACHE",
            CacheOrigin::Default => "--cache DIR or KYNML_CACHE moves it",
        };
        match &self.state {
            CacheState::On { root, files: 0, .. } => format!(
                "{} (empty: this run tunes and compiles its kernels and keeps them there; {moved})",
                root.display()
            ),
            CacheState::On { root, files, bytes } => format!(
                "{} ({files} files, {}: autotune results and compiled kernels are reused; {moved})",
                root.display(),
                human_bytes(*bytes)
            ),
            CacheState::Off { reason } => format!(
                "off ({reason}; kernels are compiled anew each run, and CubeCL keeps its tuning results where it \
                 does by default: a `target/` folder above this one, else ~/.cache/cubecl)"
            ),
            CacheState::External => "CubeCL's own settings (CubeCL was configured before KynML could)".into(),
        }
    }

    /// Files in the cache now and their total size in bytes, when it is on.
    pub fn contents(&self) -> Option<(usize, u64)> {
        let files = inventory(self.root()?).ok()?;
        Some((files.len(), files.iter().map(|(_, len)| len).sum()))
    }

    /// The folder CubeCL writes to, when the cache is on.
    pub fn root(&self) -> Option<&Path> {
        match &self.state {
            CacheState::On { root, .. } => Some(root),
            _ => None,
        }
    }
}

static CHOSEN: OnceLock<(Option<PathBuf>, CacheOrigin)> = OnceLock::new();
static INSTALLED: OnceLock<KernelCache> = OnceLock::new();
static PREVIEW: OnceLock<KernelCache> = OnceLock::new();

/// Chooses the cache folder: `flag` is `--cache DIR`; without it,
/// `KYNML_CACHE`, then the user's cache directory. The first call wins (a
/// later one returns false); [`crate::select`] makes the default choice when
/// nobody has.
pub fn choose(flag: Option<&Path>) -> bool {
    let mut fresh = false;
    CHOSEN.get_or_init(|| {
        fresh = true;
        match (flag, std::env::var_os(CACHE_ENV).filter(|v| !v.is_empty())) {
            (Some(dir), _) => (Some(absolute(dir)), CacheOrigin::Flag),
            (None, Some(env)) => (Some(absolute(Path::new(&env))), CacheOrigin::Env),
            (None, None) => (default_dir(), CacheOrigin::Default),
        }
    });
    fresh
}

/// The folder chosen (or that would be by default) and where it came from.
pub fn chosen() -> (Option<&'static Path>, CacheOrigin) {
    choose(None);
    let (dir, origin) = CHOSEN.get().expect("chosen just above");
    (dir.as_deref(), *origin)
}

/// Sets up the cache for the device model `model` (a folder name, see
/// [`crate::Device::model_folder`]) and hands it to CubeCL, once per
/// process and before CubeCL first runs; later calls return the first
/// result, whatever their model (CubeCL reads its settings once).
pub fn install(model: &str) -> &'static KernelCache {
    INSTALLED.get_or_init(|| {
        let (dir, origin) = chosen();
        let mut notes = Vec::new();
        let state = match dir {
            None => CacheState::Off { reason: "no home or cache directory is known".into() },
            Some(dir) => prepare(&dir.join(format!("cubecl-{CUBECL_VERSION}")).join(model), &mut notes),
        };
        let state = hand_to_cubecl(state, &mut notes);
        KernelCache { dir: dir.map(Path::to_path_buf), origin, state, notes }
    })
}

/// The cache [`install`] set up, if it has run.
pub fn installed() -> Option<&'static KernelCache> {
    INSTALLED.get()
}

/// What [`install`] would find for the device model `model`, without making,
/// clearing or configuring anything (a folder not made yet is an empty
/// cache): for saying what a run would meet, as `kynml check` does. The
/// installed cache where there is one; see [`seen`].
pub fn preview(model: &str) -> &'static KernelCache {
    if let Some(installed) = INSTALLED.get() {
        return installed;
    }
    PREVIEW.get_or_init(|| {
        let mut notes = Vec::new();
        let (dir, origin) = chosen();
        let state = match dir {
            None => CacheState::Off { reason: "no home or cache directory is known".into() },
            Some(dir) => {
                let root = dir.join(format!("cubecl-{CUBECL_VERSION}")).join(model);
                match inventory(&root) {
                    // Checked as a run checks it, nothing cleared: a cache
                    // a run would clear is said so, and counted as empty.
                    Ok(files) if !files.is_empty() => match check(&root) {
                        Err(problem) => {
                            notes.push(format!(
                                "the kernel cache {} {problem}; a run clears it and starts afresh",
                                root.display()
                            ));
                            CacheState::On { root, files: 0, bytes: 0 }
                        }
                        Ok(trust) => {
                            // Never sealed: its compiled kernels go, its tuning results stay.
                            let kept: Vec<&(String, u64)> = match &trust {
                                Trust::Unsealed { compiled } => {
                                    files.iter().filter(|(name, _)| !compiled.contains(name)).collect()
                                }
                                Trust::Sealed => files.iter().collect(),
                            };
                            if kept.len() < files.len() {
                                notes.push(format!(
                                    "the kernel cache {} was never sealed (a run that did not finish): a run keeps \
                                     its tuning results and compiles its kernels again",
                                    root.display()
                                ));
                            }
                            CacheState::On { files: kept.len(), bytes: kept.iter().map(|(_, len)| len).sum(), root }
                        }
                    },
                    Ok(_) => CacheState::On { root, files: 0, bytes: 0 },
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => CacheState::On { root, files: 0, bytes: 0 },
                    Err(e) => CacheState::Off { reason: format!("cannot read {}: {e}", root.display()) },
                }
            }
        };
        KernelCache { dir: dir.map(Path::to_path_buf), origin, state, notes }
    })
}

/// The cache [`install`] set up, else the one [`preview`] saw.
pub fn seen() -> Option<&'static KernelCache> {
    INSTALLED.get().or_else(|| PREVIEW.get())
}

/// A name for a folder: letters, digits, `.`, `-` and `_`, the rest as `_`.
pub fn folder_name(text: &str) -> String {
    let name: String =
        text.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' }).collect();
    name.chars().take(96).collect()
}

/// Records the files now in the cache (length and CRC-32 of each) so that
/// the next [`install`] can tell them intact. Call it after a run; a failure
/// only means the next run checks less, so it is returned for a note.
pub fn seal() -> std::io::Result<()> {
    let Some(root) = installed().and_then(KernelCache::root) else { return Ok(()) };
    seal_dir(root)
}

/// The folder as given, made absolute against the working directory, so
/// that the path named in "what runs" is the one written to.
fn absolute(dir: &Path) -> PathBuf {
    std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())
}

fn default_dir() -> Option<PathBuf> {
    dirs::cache_dir().map(|d| d.join("kynml"))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Manifest {
    format: u32,
    cubecl: String,
    /// Relative path (with `/`) to (length, CRC-32 of those bytes).
    files: BTreeMap<String, (u64, u32)>,
}

/// Checks `root` and makes it ready, clearing it when it fails the check.
fn prepare(root: &Path, notes: &mut Vec<String>) -> CacheState {
    if let Err(e) = std::fs::create_dir_all(root) {
        return CacheState::Off { reason: format!("cannot create {}: {e}", root.display()) };
    }
    if let Err(e) = tempfile::tempfile_in(root) {
        return CacheState::Off { reason: format!("cannot write in {}: {e}", root.display()) };
    }
    match check(root) {
        Ok(Trust::Sealed) => {}
        // Its compiled kernels cannot be told whole (a damaged one makes the
        // device fail at every later run); its tuning results, the costly
        // part, CubeCL checks line by line.
        Ok(Trust::Unsealed { compiled }) if !compiled.is_empty() => {
            for name in &compiled {
                if let Err(e) = std::fs::remove_file(root.join(name)) {
                    return CacheState::Off { reason: format!("cannot clear {}: {e}", root.join(name).display()) };
                }
            }
            notes.push(format!(
                "the kernel cache {} was never sealed (a run that did not finish): its tuning results are kept, \
                 its compiled kernels cleared and compiled again",
                root.display()
            ));
        }
        Ok(Trust::Unsealed { .. }) => {}
        Err(problem) => {
            notes.push(format!("the kernel cache {} {problem}; it was cleared and starts afresh", root.display()));
            if let Err(e) = clear(root) {
                return CacheState::Off { reason: format!("cannot clear {}: {e}", root.display()) };
            }
        }
    }
    match inventory(root) {
        Ok(files) => CacheState::On {
            root: root.to_path_buf(),
            files: files.len(),
            bytes: files.iter().map(|(_, len)| len).sum(),
        },
        Err(e) => CacheState::Off { reason: format!("cannot read {}: {e}", root.display()) },
    }
}

/// How far a folder that passes [`check`] is trusted.
#[derive(Debug, PartialEq)]
enum Trust {
    /// Every file recorded in the manifest is there, byte for byte.
    Sealed,
    /// No manifest: a run that did not finish wrote it. `compiled` names its
    /// compiled-kernel files, which only a seal could vouch for.
    Unsealed { compiled: Vec<String> },
}

/// Why the folder cannot be trusted, in words that follow its path.
fn check(root: &Path) -> Result<Trust, String> {
    let files = inventory(root).map_err(|e| format!("cannot be read ({e})"))?;
    let manifest_path = root.join(MANIFEST);
    let manifest = match std::fs::read(&manifest_path) {
        Ok(bytes) => bytes,
        // Never sealed: a first run that did not finish. CubeCL skips
        // damaged lines and entries at the end of its files, but not a file
        // it has lost, so with no manifest only whole files are trusted.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let compiled = files.iter().map(|(name, _)| name.clone()).filter(|n| !n.starts_with("autotune/")).collect();
            return Ok(Trust::Unsealed { compiled });
        }
        Err(e) => return Err(format!("has an unreadable {MANIFEST} ({e})")),
    };
    let manifest: Manifest =
        serde_json::from_slice(&manifest).map_err(|e| format!("has a damaged {MANIFEST} ({e})"))?;
    if manifest.format != FORMAT || manifest.cubecl != CUBECL_VERSION {
        return Err(format!(
            "was written for another version (cache format {}, CubeCL {}; this KynML uses format {FORMAT}, CubeCL {CUBECL_VERSION})",
            manifest.format, manifest.cubecl
        ));
    }
    for (name, (len, crc)) in &manifest.files {
        let path = root.join(name);
        match prefix_crc(&path, *len) {
            Ok(Some(found)) if found == *crc => {}
            Ok(Some(_)) => return Err(format!("failed its check: `{name}` changed since it was written")),
            Ok(None) => return Err(format!("failed its check: `{name}` is shorter than when it was written")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!("failed its check: `{name}` is missing"))
            }
            Err(e) => return Err(format!("failed its check: `{name}` cannot be read ({e})")),
        }
    }
    Ok(Trust::Sealed)
}

/// The CRC-32 of the first `len` bytes, `None` when the file is shorter.
fn prefix_crc(path: &Path, len: u64) -> std::io::Result<Option<u32>> {
    let file = std::fs::File::open(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut reader = file.take(len);
    let mut buf = vec![0u8; 1 << 16];
    let mut read = 0u64;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        read += n as u64;
    }
    Ok((read == len).then(|| hasher.finalize()))
}

/// Every file under `root` but the manifest and CubeCL's lock files, as
/// (relative path with `/`, length), sorted.
fn inventory(root: &Path) -> std::io::Result<Vec<(String, u64)>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            let path = entry.path();
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let rel = path.strip_prefix(root).unwrap_or(&path);
                let name = rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/");
                if name != MANIFEST && !name.ends_with(".lock") {
                    out.push((name, entry.metadata()?.len()));
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

fn clear(root: &Path) -> std::io::Result<()> {
    std::fs::remove_dir_all(root)?;
    std::fs::create_dir_all(root)
}

fn seal_dir(root: &Path) -> std::io::Result<()> {
    let mut files = BTreeMap::new();
    for (name, len) in inventory(root)? {
        // A file another process is appending to may have grown since it was
        // listed: the recorded prefix is what was read.
        if let Some(crc) = prefix_crc(&root.join(&name), len)? {
            files.insert(name, (len, crc));
        }
    }
    let manifest = Manifest { format: FORMAT, cubecl: CUBECL_VERSION.into(), files };
    let mut tmp = readable_temp_file(root)?;
    serde_json::to_writer_pretty(&mut tmp, &manifest).map_err(std::io::Error::other)?;
    tmp.persist(root.join(MANIFEST)).map_err(|e| e.error)?;
    Ok(())
}

/// A temporary file in `root` with the mode `File::create` gives (0666 less
/// the umask), not tempfile's 0600: a cache shared between accounts must be
/// readable by all of them, as CubeCL's own files are.
fn readable_temp_file(root: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    let mut builder = tempfile::Builder::new();
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    builder.tempfile_in(root)
}

/// How hard CubeCL searches for the fastest version of each kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TuneLevel {
    /// CubeCL's minimal search (it has none smaller): the quickest start.
    Minimal,
    /// CubeCL's default.
    Balanced,
    /// CubeCL's full search.
    Full,
}

impl TuneLevel {
    /// CubeCL's name for it.
    pub fn name(self) -> &'static str {
        match self {
            TuneLevel::Minimal => "minimal",
            TuneLevel::Balanced => "balanced",
            TuneLevel::Full => "full",
        }
    }
}

static TUNE: OnceLock<TuneLevel> = OnceLock::new();

/// Sets the autotune level that [`install`] hands to CubeCL, over a
/// `cubecl.toml` and `CUBECL_AUTOTUNE_LEVEL`; call it before the first
/// device is selected. The first call counts (CubeCL reads its settings
/// once per process); returns the level that applies.
pub fn set_autotune(level: TuneLevel) -> TuneLevel {
    *TUNE.get_or_init(|| level)
}

/// The level [`set_autotune`] set, if any.
pub fn autotune() -> Option<TuneLevel> {
    TUNE.get().copied()
}

/// Points CubeCL's autotune and compilation caches at the folder, keeping
/// every other setting of a `cubecl.toml` and of the `CUBECL_*` variables.
fn hand_to_cubecl(state: CacheState, notes: &mut Vec<String>) -> CacheState {
    if CubeClRuntimeConfig::storage().lock().is_some() {
        return CacheState::External;
    }
    // A malformed cubecl.toml makes CubeCL panic while reading it; the
    // defaults apply instead, and the person is told.
    let read = crate::catch_quietly(|| CubeClRuntimeConfig::from_current_dir().override_from_env());
    let mut config = read.unwrap_or_else(|_| {
        notes.push("a cubecl.toml or burn.toml above this folder could not be read; CubeCL's defaults apply".into());
        CubeClRuntimeConfig::default()
    });
    if let Some(level) = autotune() {
        config.autotune.level = match level {
            TuneLevel::Minimal => AutotuneLevel::Minimal,
            TuneLevel::Balanced => AutotuneLevel::Balanced,
            TuneLevel::Full => AutotuneLevel::Full,
        };
    }
    match &state {
        CacheState::On { root, .. } => {
            config.autotune.cache = CacheConfig::File(root.clone());
            config.compilation.cache = Some(CacheConfig::File(root.clone()));
        }
        // Off: no compiled kernels on disk. CubeCL has no setting that keeps
        // autotune results in memory only; they go where it puts them by
        // default (a `target/` above the working directory, else its own
        // user cache folder), and a folder it cannot write only logs.
        _ => {
            config.compilation.cache = None;
        }
    }
    let mut storage = CubeClRuntimeConfig::storage().lock();
    if storage.is_some() {
        return CacheState::External;
    }
    *storage = Some(std::sync::Arc::new(config));
    state
}

fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / (1u64 << 10) as f64),
        b => format!("{b} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, name: &str, bytes: &[u8]) {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    fn sealed_cache() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "autotune/0.10.0/device-0-0-cuda/matmul.json.log", b"{\"key\":1}\n{\"key\":2}\n");
        write(dir.path(), "cuda/0.10.0/ptx/chunk0.cbor", &[1, 2, 3, 4, 5]);
        write(dir.path(), "cuda/0.10.0/ptx/toc.json.log", b"{}\n");
        seal_dir(dir.path()).unwrap();
        dir
    }

    #[test]
    fn a_sealed_cache_passes_and_may_grow() {
        let dir = sealed_cache();
        assert_eq!(check(dir.path()), Ok(Trust::Sealed));
        // CubeCL appends; what was recorded is still there.
        let log = dir.path().join("autotune/0.10.0/device-0-0-cuda/matmul.json.log");
        std::fs::write(&log, b"{\"key\":1}\n{\"key\":2}\n{\"key\":3}\n").unwrap();
        assert_eq!(check(dir.path()), Ok(Trust::Sealed));
        let mut notes = Vec::new();
        let state = prepare(dir.path(), &mut notes);
        assert!(notes.is_empty(), "{notes:?}");
        assert!(matches!(state, CacheState::On { files: 3, .. }), "{state:?}");
    }

    #[test]
    fn a_changed_byte_a_shorter_or_missing_file_fails_and_is_cleared() {
        let dir = sealed_cache();
        write(dir.path(), "cuda/0.10.0/ptx/chunk0.cbor", &[1, 2, 9, 4, 5]);
        assert!(check(dir.path()).unwrap_err().contains("`cuda/0.10.0/ptx/chunk0.cbor` changed"));

        let dir = sealed_cache();
        write(dir.path(), "cuda/0.10.0/ptx/chunk0.cbor", &[1, 2]);
        assert!(check(dir.path()).unwrap_err().contains("shorter"));

        let dir = sealed_cache();
        std::fs::remove_file(dir.path().join("cuda/0.10.0/ptx/chunk0.cbor")).unwrap();
        assert!(check(dir.path()).unwrap_err().contains("missing"));

        let mut notes = Vec::new();
        let state = prepare(dir.path(), &mut notes);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("cleared and starts afresh"), "{notes:?}");
        assert!(matches!(state, CacheState::On { files: 0, .. }), "{state:?}");
    }

    #[test]
    fn a_foreign_or_damaged_manifest_is_refused() {
        let dir = sealed_cache();
        let path = dir.path().join(MANIFEST);
        let text = std::fs::read_to_string(&path).unwrap().replace(CUBECL_VERSION, "0.9.0");
        std::fs::write(&path, text).unwrap();
        assert!(check(dir.path()).unwrap_err().contains("another version"));
        std::fs::write(&path, b"\x00\x01garbage").unwrap();
        assert!(check(dir.path()).unwrap_err().contains("damaged manifest.json"));
    }

    #[test]
    fn an_unsealed_cache_keeps_its_tuning_and_loses_its_kernels() {
        let dir = sealed_cache();
        std::fs::remove_file(dir.path().join(MANIFEST)).unwrap();
        let mut notes = Vec::new();
        let state = prepare(dir.path(), &mut notes);
        assert!(notes.len() == 1 && notes[0].contains("was never sealed"), "{notes:?}");
        assert!(matches!(state, CacheState::On { files: 1, .. }), "{state:?}");
        assert!(dir.path().join("autotune/0.10.0/device-0-0-cuda/matmul.json.log").is_file());
        assert!(!dir.path().join("cuda/0.10.0/ptx/chunk0.cbor").exists());
        // Tuning results alone: nothing to clear, nothing said.
        let mut notes = Vec::new();
        prepare(dir.path(), &mut notes);
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn an_unwritable_folder_turns_the_cache_off() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"").unwrap();
        let state = prepare(&file.join("cubecl"), &mut Vec::new());
        assert!(matches!(state, CacheState::Off { .. }), "{state:?}");
    }

    #[test]
    fn folder_names_keep_only_safe_characters() {
        assert_eq!(folder_name("cuda-NVIDIA H100 80GB HBM3-sm90"), "cuda-NVIDIA_H100_80GB_HBM3-sm90");
        assert_eq!(folder_name("../x/y"), ".._x_y");
        assert_eq!(folder_name(&"a".repeat(300)).len(), 96);
    }

    #[test]
    fn the_version_constant_is_the_locked_cubecl() {
        let lock = include_str!("../../Cargo.lock");
        let locked = lock
            .split("[[package]]")
            .find(|p| p.contains("\nname = \"cubecl-runtime\"\n"))
            .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
            .map(|v| v.trim_end_matches('"'))
            .expect("cubecl-runtime in Cargo.lock");
        assert_eq!(locked, CUBECL_VERSION);
    }
}
