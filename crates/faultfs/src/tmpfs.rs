//! A real filesystem that fills up: a small tmpfs mounted for one test, for the ENOSPC a
//! FUSE model cannot stand in for (the kernel's own accounting of a full filesystem).
//!
//! # Assumptions
//! - The test runs as root (CI does): mounting needs it. [`Tmpfs::mount`] says so plainly
//!   rather than failing with `mount`'s own message.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of a given size mounted at a directory, unmounted on drop (declare it before
/// whatever uses it, such as a server, so that it is dropped after).
pub struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`mount`'s syntax: `16m`) at `dir`, creating `dir` first.
    pub fn mount(dir: &Path, size: &str) -> Tmpfs {
        use std::os::unix::fs::MetadataExt;
        // /proc/self belongs to the process's effective user.
        let euid = std::fs::metadata("/proc/self").map(|m| m.uid());
        assert!(
            matches!(euid, Ok(0)),
            "this test mounts a small tmpfs to fill the store's disk and must run as root \
             (it does in CI); it cannot produce a real ENOSPC otherwise"
        );
        std::fs::create_dir_all(dir).expect("create the mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount a tmpfs at {}", dir.display());
        Tmpfs {
            dir: dir.to_path_buf(),
        }
    }

    /// Where it is mounted.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes a file until the filesystem is full (bounded by its size); returns its path,
    /// for the test to free the space again by removing it.
    pub fn fill(&self) -> PathBuf {
        let path = self.dir.join("filler");
        let mut file = std::fs::File::create(&path).expect("create the filler");
        let chunk = vec![0u8; 64 << 10];
        // A tmpfs of a few MiB is full after at most a few hundred chunks.
        for _ in 0..10_000 {
            if file.write_all(&chunk).is_err() {
                break;
            }
        }
        // The last partial chunk may have gone in; make sure not even one byte fits.
        for _ in 0..(64 << 10) {
            if file.write_all(&[0]).is_err() {
                break;
            }
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}
