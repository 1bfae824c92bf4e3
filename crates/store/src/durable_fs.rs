//! Directory creation that survives a power cut.
//!
//! A new directory's name is data of its parent directory: until the parent is fsynced, a
//! power cut may take the directory away with everything in it, however carefully the files
//! inside were synced. ext4 happens to commit such a `mkdir` with the next fsync of any file;
//! POSIX promises nothing of the kind, and other filesystems (and `crates/faultfs`, which the
//! power-loss tests run on) do not.

use std::fs::{DirBuilder, File};
use std::io;
use std::path::Path;

/// Creates `dir` and its missing ancestors (as `create_dir_all`), then fsyncs the parent of
/// each directory it created, so the whole path is durable when this returns. Does nothing
/// to a directory that already exists.
///
/// Caveat: a directory created by someone else whose parent was never synced is taken as it
/// is; making an existing path durable is its creator's business.
pub fn create_dir_all_durably(dir: &Path) -> io::Result<()> {
    create_durably(dir, None)
}

/// As [`create_dir_all_durably`], creating the missing directories with `mode` (subject to
/// the umask).
#[cfg(unix)]
pub fn create_dir_all_durably_with_mode(dir: &Path, mode: u32) -> io::Result<()> {
    create_durably(dir, Some(mode))
}

fn create_durably(dir: &Path, mode: Option<u32>) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    // The missing part of the path, deepest first (bounded by the path's depth).
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && !p.exists())
        .collect();
    let mut builder = DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    if let Some(mode) = mode {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    builder.create(dir)?;
    for created in missing {
        if let Some(parent) = created.parent() {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            sync_dir(parent)?;
        }
    }
    Ok(())
}

/// fsyncs a directory: its entries (files created, renamed or removed in it) become durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir).and_then(|d| d.sync_all())
}
