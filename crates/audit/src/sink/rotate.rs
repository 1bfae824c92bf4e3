//! A log file with size-based rotation, as `gopkg.in/natefinch/lumberjack.v2` v2.2.1 (what
//! kube-apiserver 1.33 writes its audit log through), with `LocalTime: false`.
//!
//! Written by hand: `file-rotate`, the maintained Rust crate closest to it, names backups by
//! appending a suffix to the whole file name (`audit.log.20250101T000000`) and forbids `.` in
//! its timestamp format, so it cannot produce lumberjack's `audit-2025-01-01T00-00-00.000.log`
//! — the names log shippers and `--audit-log-maxbackup` cleanup scripts written for
//! kube-apiserver expect. Nor does it clean backups lumberjack's way.
//!
//! Lumberjack, step by step (kept in the same order here):
//! - a write longer than the maximum size fails, and nothing is written;
//! - on the first write the existing file is appended to, or rotated first if the write
//!   would bring it to the maximum size or beyond;
//! - a write that would take the file beyond the maximum size rotates first: the file is
//!   renamed `NAME-<UTC time as 2006-01-02T15-04-05.000>.EXT` in its directory and a new one is
//!   created with the old one's mode (and owner, on Linux);
//! - after a rotation, and on the first open, backups are removed: beyond the newest
//!   `max_backups` (0: no limit) and older than `max_age_days` (0: no limit), both judged by
//!   the time in the name.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};

/// Lumberjack's `backupTimeFormat` (`2006-01-02T15-04-05.000`) in chrono's notation.
const BACKUP_TIME_FORMAT: &str = "%Y-%m-%dT%H-%M-%S%.3f";
/// Length of a formatted backup time; lumberjack's parser wants exactly that many digits.
const BACKUP_TIME_LEN: usize = "2006-01-02T15-04-05.000".len();
/// Lumberjack counts a compressed backup (`--audit-log-compress`) as a backup too.
const COMPRESS_SUFFIX: &str = ".gz";

/// The time source: the wall clock, or a test's.
pub(crate) type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The rotation settings of one log file.
#[derive(Clone)]
pub(crate) struct Rotation {
    /// Rotate before a write would take the file beyond this many bytes.
    pub max_bytes: u64,
    /// Keep at most this many backups; 0 keeps all.
    pub max_backups: u32,
    /// Remove backups older than this many days; 0 keeps all.
    pub max_age_days: u32,
    pub clock: Clock,
}

/// The open log file and its size so far.
pub(crate) struct RotatingFile {
    path: PathBuf,
    rotation: Rotation,
    file: Option<File>,
    size: u64,
}

impl RotatingFile {
    pub(crate) fn new(path: PathBuf, rotation: Rotation) -> RotatingFile {
        RotatingFile {
            path,
            rotation,
            file: None,
            size: 0,
        }
    }

    /// Whether `len` more bytes go into the open file without a rotation.
    pub(crate) fn fits(&self, len: u64) -> bool {
        self.file.is_some() && self.size + len <= self.rotation.max_bytes
    }

    /// Writes one event's line, rotating first if needed (lumberjack's `Write`).
    pub(crate) fn write(&mut self, line: &[u8]) -> io::Result<()> {
        let len = line.len() as u64;
        let max = self.rotation.max_bytes;
        if len > max {
            return Err(io::Error::other(format!(
                "write length {len} exceeds maximum file size {max}"
            )));
        }
        if self.file.is_none() {
            self.open_existing_or_new(len)?;
        }
        if self.size + len > max {
            self.rotate()?;
        }
        let Some(file) = self.file.as_mut() else {
            return Err(io::Error::other("log file is not open"));
        };
        match file.write_all(line) {
            Ok(()) => {
                self.size += len;
                Ok(())
            }
            Err(error) => {
                // Part of the line may have gone out: the file's length says how much.
                if let Ok(info) = file.metadata() {
                    self.size = info.len();
                }
                Err(error)
            }
        }
    }

    fn open_existing_or_new(&mut self, write_len: u64) -> io::Result<()> {
        self.remove_old_backups();
        let info = match fs::metadata(&self.path) {
            Ok(info) => info,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return self.open_new(),
            Err(error) => return Err(context(error, "error getting log file info")),
        };
        if info.len() + write_len >= self.rotation.max_bytes {
            return self.rotate();
        }
        match OpenOptions::new().append(true).open(&self.path) {
            Ok(file) => {
                self.file = Some(file);
                self.size = info.len();
                Ok(())
            }
            // As lumberjack: a file that cannot be appended to is moved aside.
            Err(_) => self.open_new(),
        }
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        self.open_new()?;
        self.remove_old_backups();
        Ok(())
    }

    /// Moves the current file (if any) to its backup name and creates an empty one.
    fn open_new(&mut self) -> io::Result<()> {
        if let Some(dir) = self.path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            // 0700 as kube-apiserver creates the directory at start (lumberjack would use
            // 0755 for one deleted since): audit logs are for the cluster's administrators.
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|error| context(error, "can't make directories for new logfile"))?;
        }
        let mut mode = 0o600;
        if let Ok(info) = fs::metadata(&self.path) {
            mode = info.permissions().mode() & 0o7777;
            let backup = backup_name(&self.path, (self.rotation.clock)());
            fs::rename(&self.path, &backup)
                .map_err(|error| context(error, "can't rename log file"))?;
            keep_owner(&self.path, &info)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(mode)
            .open(&self.path)
            .map_err(|error| context(error, "can't open new logfile"))?;
        self.file = Some(file);
        self.size = 0;
        Ok(())
    }

    /// Lumberjack's `millRunOnce` without compression. Failures are logged, not returned:
    /// lumberjack runs this in the background and ignores them too.
    fn remove_old_backups(&self) {
        let (max_backups, max_age_days) = (self.rotation.max_backups, self.rotation.max_age_days);
        if max_backups == 0 && max_age_days == 0 {
            return;
        }
        let mut backups = match self.backups() {
            Ok(backups) => backups,
            Err(error) => {
                tracing::warn!(path = %self.path.display(), %error, "audit log: cannot list backups");
                return;
            }
        };
        let mut remove = Vec::new();
        if max_backups > 0 {
            // A backup and its compressed copy count once, as in lumberjack.
            let mut kept = std::collections::HashSet::new();
            let (keep, drop): (Vec<_>, Vec<_>) = backups.into_iter().partition(|backup| {
                let name = backup
                    .name
                    .strip_suffix(COMPRESS_SUFFIX)
                    .unwrap_or(&backup.name);
                kept.insert(name.to_owned());
                kept.len() <= max_backups as usize
            });
            backups = keep;
            remove.extend(drop);
        }
        if max_age_days > 0 {
            let cutoff = (self.rotation.clock)() - TimeDelta::days(i64::from(max_age_days));
            remove.extend(backups.into_iter().filter(|backup| backup.time < cutoff));
        }
        for backup in remove {
            let path = self.dir().join(&backup.name);
            if let Err(error) = fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), %error, "audit log: cannot remove old backup");
            }
        }
    }

    /// The backups in the log's directory, newest first.
    fn backups(&self) -> io::Result<Vec<Backup>> {
        let (prefix, ext) = prefix_and_ext(&self.path);
        let compressed_ext = format!("{ext}{COMPRESS_SUFFIX}");
        let mut backups = Vec::new();
        for entry in fs::read_dir(self.dir())? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                continue;
            }
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let time = time_from_name(&name, &prefix, &ext)
                .or_else(|| time_from_name(&name, &prefix, &compressed_ext));
            if let Some(time) = time {
                backups.push(Backup { name, time });
            }
        }
        backups.sort_by_key(|backup| std::cmp::Reverse(backup.time));
        Ok(backups)
    }

    fn dir(&self) -> &Path {
        match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        }
    }
}

struct Backup {
    name: String,
    time: DateTime<Utc>,
}

/// `dir/NAME-<time>.EXT` for `dir/NAME.EXT`.
pub(crate) fn backup_name(path: &Path, now: DateTime<Utc>) -> PathBuf {
    let (prefix, ext) = prefix_and_ext(path);
    let name = format!("{prefix}{}{ext}", now.format(BACKUP_TIME_FORMAT));
    path.with_file_name(name)
}

/// `("NAME-", ".EXT")`, with the extension as Go's `filepath.Ext` finds it: from the last
/// dot of the file name (`""` without one).
fn prefix_and_ext(path: &Path) -> (String, String) {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (stem, ext) = match name.rfind('.') {
        Some(dot) => name.split_at(dot),
        None => (name.as_str(), ""),
    };
    (format!("{stem}-"), ext.to_owned())
}

/// The time in a backup's name, if `name` is one.
fn time_from_name(name: &str, prefix: &str, ext: &str) -> Option<DateTime<Utc>> {
    let stamp = name.strip_prefix(prefix)?.strip_suffix(ext)?;
    if stamp.len() != BACKUP_TIME_LEN {
        return None;
    }
    NaiveDateTime::parse_from_str(stamp, BACKUP_TIME_FORMAT)
        .ok()
        .map(|time| time.and_utc())
}

/// Lumberjack on Linux gives the new file the old one's owner (a log an administrator
/// chowned stays theirs after rotation). It creates the file to do so.
#[cfg(target_os = "linux")]
fn keep_owner(path: &Path, old: &fs::Metadata) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(old.mode() & 0o7777)
        .open(path)?;
    std::os::unix::fs::chown(path, Some(old.uid()), Some(old.gid()))
}

#[cfg(not(target_os = "linux"))]
fn keep_owner(_: &Path, _: &fs::Metadata) -> io::Result<()> {
    Ok(())
}

fn context(error: io::Error, what: &str) -> io::Error {
    io::Error::new(error.kind(), format!("{what}: {error}"))
}
