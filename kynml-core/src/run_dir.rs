//! The folder a run leaves behind: `runs/<spec>-<time>/` with the spec as
//! written, the spec as resolved, per-epoch metrics, final metrics, the data
//! statistics needed for inference, and the trained weights.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::atomic_file::hostname;
use crate::data::DataInfo;
use crate::train::EpochRecord;

/// A run's output folder, e.g. `runs/iris-20261121-101500/`.
#[derive(Debug)]
pub struct RunDir {
    /// The run folder.
    pub path: PathBuf,
    /// Whether this run made the folder (not an empty one it was given).
    created: bool,
    /// Whether the folder still holds this run's claim on it
    /// ([`RunDir::create_exact`]), taken back once a file of the run is in it.
    claimed: AtomicBool,
}

/// The file by which a run claims a folder it was given, before its own
/// files are in it: two runs started at once with one `--out` both found
/// it empty, and mixed their files. Holds `<pid>@<host>`.
const CLAIM: &str = ".kynml-run-claim";

impl RunDir {
    /// A fresh folder under `base` named `<stem>-<YYYYmmdd-HHMMSS>` (UTC),
    /// with `-2`, `-3`... appended if that name is taken. The errors do not
    /// name `base`; the caller does.
    pub fn create_unique(base: &Path, stem: &str) -> io::Result<Self> {
        refuse_file(base)?;
        fs::create_dir_all(base)?;
        let name = format!("{stem}-{}", utc_stamp(std::time::SystemTime::now()));
        for n in 1.. {
            let path = if n == 1 { base.join(&name) } else { base.join(format!("{name}-{n}")) };
            match fs::create_dir(&path) {
                Ok(()) => return Ok(RunDir { path, created: true, claimed: AtomicBool::new(false) }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        unreachable!()
    }

    /// Use `path` as the run folder, creating it; it must be empty or new,
    /// so that no earlier run's files are mixed in, and no other run may be
    /// taking it at the same moment (a claim file, made only where none is,
    /// stays until the run's first file is written). The errors do not name
    /// `path`; the caller does.
    pub fn create_exact(path: &Path) -> io::Result<Self> {
        refuse_file(path)?;
        let created = !path.exists();
        fs::create_dir_all(path)?;
        let claim = path.join(CLAIM);
        let mine = format!("{}@{}", std::process::id(), hostname());
        let make = || OpenOptions::new().write(true).create_new(true).open(&claim);
        let made = match make() {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && claim_is_dead(&claim) => {
                let _ = fs::remove_file(&claim);
                make()
            }
            made => made,
        };
        match made {
            Ok(mut file) => {
                if let Err(e) = file.write_all(mine.as_bytes()) {
                    let _ = fs::remove_file(&claim);
                    return Err(e);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "another run is being set up in it (a run folder is one run's: give this one another --out)",
                ));
            }
            Err(e) => return Err(e),
        }
        let run = RunDir { path: path.to_path_buf(), created, claimed: AtomicBool::new(true) };
        if fs::read_dir(path)?.flatten().any(|entry| entry.file_name() != CLAIM) {
            // Dropped: its claim goes, the files in the folder stay.
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "it is not empty (a run folder must be new or empty, so that no earlier run's files are mixed in)",
            ));
        }
        Ok(run)
    }

    /// Removes this run's claim on its folder, once the folder holds a file
    /// of the run (which keeps any other run out) or the run is over.
    fn unclaim(&self) {
        if self.claimed.swap(false, Ordering::SeqCst) {
            let _ = fs::remove_file(self.path.join(CLAIM));
        }
    }

    /// Takes back a run folder that could not be set up (a full disk while
    /// its first files were written): what was written in it goes, and the
    /// folder too where this run made it, so that nothing is left and the
    /// same command can be run again. Best effort: the caller is already
    /// reporting an error.
    pub fn discard(self) {
        self.unclaim();
        if self.created {
            let _ = fs::remove_dir_all(&self.path);
        } else if let Ok(entries) = fs::read_dir(&self.path) {
            for entry in entries.flatten() {
                let path = entry.path();
                let _ = if path.is_dir() { fs::remove_dir_all(&path) } else { fs::remove_file(&path) };
            }
        }
    }

    /// Written to a temporary file in the run folder, synced, then renamed
    /// into place: a reader never sees half a file.
    pub fn write_text(&self, name: &str, text: &str) -> io::Result<()> {
        crate::atomic_file::write(&self.path.join(name), text.as_bytes())?;
        self.unclaim();
        Ok(())
    }

    /// Writes `value` as pretty-printed JSON to `name` in the run folder, as [`RunDir::write_text`] does.
    pub fn write_json<T: serde::Serialize>(&self, name: &str, value: &T) -> io::Result<()> {
        let mut text = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
        text.push('\n');
        self.write_text(name, &text)
    }

    /// Append one epoch to `metrics.jsonl`, so that a run that dies keeps
    /// every epoch it finished.
    pub fn append_epoch(&self, record: &EpochRecord) -> io::Result<()> {
        let mut file = OpenOptions::new().create(true).append(true).open(self.path.join("metrics.jsonl"))?;
        let mut line = serde_json::to_value(record).map_err(io::Error::other)?;
        // The measurements a record read back from a checkpoint lacks (they
        // are not kept, so that a checkpoint's bytes depend on the training
        // alone) are null, not absent: every line has the same keys.
        if let Some(fields) = line.as_object_mut() {
            let keys =
                ["data_wait", "peak_rss", "device_reserved", "device_in_use", "gpu_busy", "gpu_memory_peak", "ran"];
            for key in keys {
                fields.entry(key).or_insert(serde_json::Value::Null);
            }
        }
        writeln!(file, "{line}")?;
        file.flush()
    }

    /// Writes `data.json`: feature and class names and normalisation statistics, what inference needs.
    pub fn write_data_info(&self, info: &DataInfo) -> io::Result<()> {
        self.write_json("data.json", info)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        self.unclaim();
    }
}

/// Whether the claim file `claim` is of a process that no longer runs on
/// this machine (killed while its run was being set up). One of another
/// machine's (a shared folder), or one that cannot be read or told, is
/// taken as alive.
fn claim_is_dead(claim: &Path) -> bool {
    let Ok(text) = fs::read_to_string(claim) else { return false };
    let Some((pid, host)) = text.split_once('@') else { return false };
    host == hostname() && pid.parse().ok().and_then(crate::atomic_file::process_gone) == Some(true)
}

/// An error when `path` is something other than a folder (the operating
/// system would only say "File exists").
fn refuse_file(path: &Path) -> io::Result<()> {
    match fs::metadata(path) {
        Ok(meta) if !meta.is_dir() => Err(io::Error::new(io::ErrorKind::AlreadyExists, "it is a file, not a folder")),
        _ => Ok(()),
    }
}

/// `YYYYmmdd-HHMMSS` in UTC, from the civil-from-days algorithm (no time
/// zone database needed).
pub fn utc_stamp(time: std::time::SystemTime) -> String {
    let secs = time.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}{month:02}{day:02}-{:02}{:02}{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    /// A run folder whose first files could not be written leaves nothing:
    /// a folder it made goes, one it was given empty is emptied again.
    #[test]
    fn a_discarded_run_folder_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let made = RunDir::create_exact(&tmp.path().join("new")).unwrap();
        made.write_text("spec.kyn", "x").unwrap();
        made.discard();
        assert!(!tmp.path().join("new").exists());
        let given = tmp.path().join("given");
        fs::create_dir(&given).unwrap();
        let run = RunDir::create_exact(&given).unwrap();
        run.write_text("spec.kyn", "x").unwrap();
        fs::create_dir(given.join("sub")).unwrap();
        run.discard();
        assert!(given.is_dir() && fs::read_dir(&given).unwrap().next().is_none());
        let unique = RunDir::create_unique(&tmp.path().join("runs"), "s").unwrap();
        let path = unique.path.clone();
        unique.discard();
        assert!(!path.exists() && tmp.path().join("runs").is_dir());
        // And the same command can make it again.
        assert!(RunDir::create_exact(&tmp.path().join("new")).is_ok());
    }

    #[test]
    fn utc_stamp_matches_known_dates() {
        assert_eq!(utc_stamp(UNIX_EPOCH), "19700101-000000");
        // 2026-11-21 19:38:58 UTC
        assert_eq!(utc_stamp(UNIX_EPOCH + Duration::from_secs(1_795_289_938)), "20261121-193858");
        // 2000-02-29 12:00:00 UTC, a leap day
        assert_eq!(utc_stamp(UNIX_EPOCH + Duration::from_secs(951_825_600)), "20000229-120000");
    }

    #[test]
    fn unique_folders_never_collide() {
        let tmp = tempfile::tempdir().unwrap();
        let a = RunDir::create_unique(tmp.path(), "x").unwrap();
        let b = RunDir::create_unique(tmp.path(), "x").unwrap();
        assert_ne!(a.path, b.path);
    }

    #[test]
    fn exact_folder_must_be_empty() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("old"), "x").unwrap();
        let err = RunDir::create_exact(tmp.path()).unwrap_err();
        assert!(err.to_string().contains("it is not empty"), "{err}");
    }

    /// A folder one run is taking is refused to a second one started at
    /// the same moment, which found it as empty (both trained into it);
    /// the claim goes with the first run's first file, and one left by a
    /// process that was killed is no obstacle.
    #[test]
    fn a_folder_another_run_is_taking_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("run");
        let first = RunDir::create_exact(&path).unwrap();
        let err = RunDir::create_exact(&path).unwrap_err();
        assert!(err.to_string().contains("another run is being set up in it"), "{err}");
        first.write_text("spec.kyn", "x").unwrap();
        assert!(!path.join(CLAIM).exists());
        let err = RunDir::create_exact(&path).unwrap_err();
        assert!(err.to_string().contains("it is not empty"), "{err}");
        assert!(!path.join(CLAIM).exists(), "the refused run's claim went with it");
        assert_eq!(fs::read_dir(&path).unwrap().count(), 1);
        // A claim whose process is gone (above Linux's largest pid).
        let other = tmp.path().join("other");
        fs::create_dir(&other).unwrap();
        fs::write(other.join(CLAIM), format!("999999999@{}", hostname())).unwrap();
        let run = RunDir::create_exact(&other).unwrap();
        drop(run);
        assert_eq!(fs::read_dir(&other).unwrap().count(), 0, "a run dropped unwritten takes its claim back");
    }

    #[test]
    fn a_file_is_not_a_run_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("existing.txt");
        fs::write(&file, "x").unwrap();
        let err = RunDir::create_exact(&file).unwrap_err();
        assert_eq!(err.to_string(), "it is a file, not a folder");
        let err = RunDir::create_unique(&file, "x").unwrap_err();
        assert_eq!(err.to_string(), "it is a file, not a folder");
        assert_eq!(fs::read_to_string(&file).unwrap(), "x");
    }
}
