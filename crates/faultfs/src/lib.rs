//! A FUSE filesystem for tests that simulates power loss and injects I/O errors.
//!
//! Durability is only testable where unsynced writes can be lost: `kill -9` leaves the page
//! cache intact, so a program that never calls `fsync` passes every crash test. This kernel
//! has no `dm-flakey` or `dm-log-writes`, so this filesystem plays the disk instead. It keeps
//! everything in memory, in two versions: what a running program reads (the page cache) and
//! what a disk would hold after a power cut. [`FaultFs::cut_power`] returns the second as a
//! [`DiskImage`] and fails every later operation with `EIO`; [`FaultFs::mount_image`] mounts
//! an image again, which is what a restarted machine sees.
//!
//! # What becomes durable, and when
//!
//! The rules are POSIX's, taken literally. That is stricter than ext4 with `data=ordered`
//! everywhere a program can tell:
//!
//! - **File contents and size** (`write`, `truncate`/`ftruncate`) become durable only when
//!   that file is fsynced: `fsync` and `fdatasync` (both arrive as `FUSE_FSYNC`) make all of
//!   the file's changes so far durable. `close` (`FUSE_FLUSH`) does not. ext4 also writes
//!   dirty pages back on its own every few seconds; here nothing reaches the "disk" unasked.
//! - **Directory entries** (create, `mkdir`, `unlink`, `rmdir`, `rename`) become durable only
//!   when their directory is fsynced (`FUSE_FSYNCDIR`), each directory on its own: a rename
//!   between two directories needs both, and a new directory's name needs its parent synced.
//!   ext4 journals these in order, so an fsync of any file also commits every earlier
//!   namespace change; programs may not rely on that, and here they cannot.
//! - A durable entry names an inode: after the cut it holds that inode's durable contents
//!   (empty if the inode was never fsynced). An unlinked file whose removal was not synced
//!   comes back.
//! - Mode, ownership and times are not modelled: they keep their last values.
//!
//! [`PowerCut::DropUnsynced`] loses every unsynced change. [`PowerCut::Torn`] is harsher on
//! programs and closer to hardware: each 4 KiB page of a file keeps its durable contents
//! with a random prefix of the unsynced writes to that page (as writeback may have flushed
//! any version of it), and the size is one of the sizes the file had since its last sync.
//!
//! # Faults
//!
//! [`FaultFs::inject`] makes `fsync` or `write` fail with `EIO`, on any file or on files with
//! a given name, after letting a number through, once, a number of times, or until cleared.
//! A failed fsync makes nothing durable (the changes stay pending, as if the disk had refused
//! them). A fault can also cut the power as its operation is issued ([`Fault::cut_power`]):
//! a cut in the middle of, say, the 50th fsync of a log, with its last writes in flight.
//! [`FaultFs::ignore_fsync`] makes every fsync succeed without making anything durable: a
//! negative control for tests, equivalent to a program that never syncs.
//!
//! # Requirements and caveats
//!
//! - Mounting needs `/dev/fuse` and root (`CAP_SYS_ADMIN`): `fuser` then calls `mount(2)`
//!   itself, with no libfuse or `fusermount` involved. [`FaultFs::mount`] fails with a message
//!   saying so otherwise.
//! - The kernel's own page cache sits in front of this filesystem, as it does in front of a
//!   disk: without `FUSE_WRITEBACK_CACHE` (not requested) every `write` reaches the
//!   filesystem before it returns, so nothing a program wrote can hide in the kernel.
//! - `mmap`ed writes reach the filesystem only when the kernel writes the pages back (at
//!   `msync`/`fsync` at the latest), as on a disk.
//! - Everything is in memory: meant for data sets of megabytes. Hard links, symlinks,
//!   device nodes, extended attributes and `fallocate` are not supported.
//! - A process killed while the filesystem is mounted (a test aborting) leaves a dead mount
//!   behind (`Transport endpoint is not connected`) until someone unmounts it.

mod fuse;
mod model;
pub mod tmpfs;

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use fuser::{Config, MountOption, Session};

use model::{Ino, Model};

/// How long an unmount keeps retrying while the filesystem is busy before it detaches it.
const UNMOUNT_PATIENCE: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
}

/// How a power cut treats what was written but not synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerCut {
    /// Every unsynced change is lost.
    DropUnsynced,
    /// Each page keeps a random prefix of its unsynced writes (see the crate docs); the same
    /// seed tears the same history the same way.
    Torn { seed: u64 },
}

/// An operation a [`Fault`] makes fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultOp {
    /// `fsync`, `fdatasync` (of files) and fsync of directories.
    Fsync,
    /// `write` and truncation.
    Write,
}

/// An injected `EIO`. Build with [`Fault::fsync`] or [`Fault::write`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    op: FaultOp,
    file_name: Option<OsString>,
    /// Matching operations to let through before firing.
    skip: u32,
    /// Firings left; `None` until cleared.
    remaining: Option<u32>,
    /// Fire by cutting the power (then failing the operation) instead of failing it alone.
    cut_power: Option<PowerCut>,
}

impl Fault {
    /// Every fsync fails (until [`FaultFs::clear_faults`]).
    pub fn fsync() -> Fault {
        Fault {
            op: FaultOp::Fsync,
            file_name: None,
            skip: 0,
            remaining: None,
            cut_power: None,
        }
    }

    /// Every write fails (until [`FaultFs::clear_faults`]).
    pub fn write() -> Fault {
        Fault {
            op: FaultOp::Write,
            file_name: None,
            skip: 0,
            remaining: None,
            cut_power: None,
        }
    }

    /// Only on files (or directories) whose last name is `name`.
    pub fn on_file(mut self, name: impl AsRef<OsStr>) -> Fault {
        self.file_name = Some(name.as_ref().to_owned());
        self
    }

    /// Only the next `times` matching operations fail.
    pub fn times(mut self, times: u32) -> Fault {
        self.remaining = Some(times);
        self
    }

    /// Lets the first `count` matching operations through.
    pub fn skip(mut self, count: u32) -> Fault {
        self.skip = count;
        self
    }

    /// Fires by cutting the power just as the operation is issued (it does not happen, and
    /// fails with `EIO` like everything after it): for a cut in the middle of an fsync, with
    /// that file's unsynced writes in flight. Fires once; the image is then available from
    /// [`FaultFs::wait_for_power_cut`].
    pub fn cut_power(mut self, cut: PowerCut) -> Fault {
        self.cut_power = Some(cut);
        self.remaining = Some(1);
        self
    }
}

/// How much a power cut threw away.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LostAtCut {
    /// Files with writes or truncations not yet fsynced.
    pub files_with_unsynced_data: usize,
    /// Bytes written to those files since their last fsync.
    pub unsynced_write_bytes: u64,
    /// Directories whose entries changed since their last fsync.
    pub dirs_with_unsynced_entries: usize,
}

#[derive(Clone, Debug)]
pub(crate) struct ImageInode {
    kind: Kind,
    perm: u16,
    uid: u32,
    gid: u32,
    mtime: SystemTime,
    nlink: u32,
    parent: Ino,
    name: OsString,
    data: Vec<u8>,
    entries: BTreeMap<OsString, Ino>,
}

/// What a disk holds after a power cut: mount it with [`FaultFs::mount_image`].
#[derive(Clone, Debug)]
pub struct DiskImage {
    inodes: BTreeMap<Ino, ImageInode>,
    /// What the cut threw away.
    pub lost: LostAtCut,
}

impl DiskImage {
    /// The contents of the file at `path` (relative to the filesystem's root), if there is
    /// one.
    pub fn read(&self, path: impl AsRef<Path>) -> Option<&[u8]> {
        let inode = self
            .inodes
            .get(&model::resolve(&self.inodes, path.as_ref())?)?;
        (inode.kind == Kind::File).then_some(inode.data.as_slice())
    }

    /// The names in the directory at `path`, if there is one.
    pub fn list(&self, path: impl AsRef<Path>) -> Option<Vec<OsString>> {
        let inode = self
            .inodes
            .get(&model::resolve(&self.inodes, path.as_ref())?)?;
        (inode.kind == Kind::Dir).then(|| inode.entries.keys().cloned().collect())
    }
}

/// A mounted fault-injecting filesystem. Unmounted on drop (or [`FaultFs::unmount`]).
pub struct FaultFs {
    model: Arc<Mutex<Model>>,
    mountpoint: PathBuf,
    session: Option<SessionThread>,
}

struct SessionThread {
    handle: JoinHandle<io::Result<()>>,
    /// Receives once the session thread has ended.
    done: mpsc::Receiver<()>,
}

impl FaultFs {
    /// Mounts an empty filesystem at `mountpoint` (an existing, empty directory).
    pub fn mount(mountpoint: impl AsRef<Path>) -> io::Result<FaultFs> {
        Self::mount_model(Model::new(), mountpoint.as_ref())
    }

    /// Mounts `image` (from [`FaultFs::cut_power`]) at `mountpoint`: the disk as a restarted
    /// machine finds it, everything on it durable.
    pub fn mount_image(image: &DiskImage, mountpoint: impl AsRef<Path>) -> io::Result<FaultFs> {
        Self::mount_model(Model::from_image(image), mountpoint.as_ref())
    }

    fn mount_model(model: Model, mountpoint: &Path) -> io::Result<FaultFs> {
        let model = Arc::new(Mutex::new(model));
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("faultfs".into()),
            MountOption::Subtype("faultfs".into()),
            MountOption::DefaultPermissions,
        ];
        let ops = fuse::Ops {
            model: model.clone(),
        };
        let session = Session::new(ops, mountpoint, &config).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot mount faultfs at {}: {e} (it needs /dev/fuse and root, or \
                     fusermount3 on the PATH)",
                    mountpoint.display()
                ),
            )
        })?;
        let (done_tx, done) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("faultfs".into())
            .spawn(move || {
                let result = session.run();
                let _ = done_tx.send(());
                result
            })?;
        let fs = FaultFs {
            model,
            mountpoint: mountpoint.to_path_buf(),
            session: Some(SessionThread { handle, done }),
        };
        // The first request waits for the kernel's handshake: the mount is usable after it.
        std::fs::metadata(mountpoint)?;
        Ok(fs)
    }

    fn lock(&self) -> MutexGuard<'_, Model> {
        self.model.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// While `ignored`, fsync and fdatasync (of files and directories) succeed and make
    /// nothing durable: a program that never syncs, for negative controls.
    pub fn ignore_fsync(&self, ignored: bool) {
        self.lock().fsync_ignored = ignored;
    }

    /// Makes matching operations fail with `EIO` (see [`Fault`]). Faults are checked in the
    /// order they were injected; the first match fires.
    pub fn inject(&self, fault: Fault) {
        self.lock().faults.push(fault);
    }

    /// Removes every injected fault.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// How many operations failed because of injected faults so far.
    pub fn injected_errors(&self) -> u64 {
        self.lock().injected
    }

    /// How many fsyncs of files succeeded so far (counting ignored ones).
    pub fn file_syncs(&self) -> u64 {
        self.lock().file_syncs
    }

    /// Cuts the power: returns what the disk holds now, and from here on every operation on
    /// the mount fails with `EIO` (processes using it should be killed; then unmount).
    pub fn cut_power(&self, cut: PowerCut) -> DiskImage {
        self.lock().cut(cut)
    }

    /// Waits (at most `timeout`) for a fault injected with [`Fault::cut_power`] to cut the
    /// power, and returns the disk image it left.
    pub fn wait_for_power_cut(&self, timeout: Duration) -> Option<DiskImage> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(image) = self.lock().take_cut_image() {
                return Some(image);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Unmounts, waiting (bounded) for users of the mount to go away, and then detaching it
    /// lazily if they have not.
    pub fn unmount(mut self) -> io::Result<()> {
        self.unmount_inner()
    }

    fn unmount_inner(&mut self) -> io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let path = CString::new(self.mountpoint.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let deadline = Instant::now() + UNMOUNT_PATIENCE;
        let mut result = loop {
            // SAFETY: `path` is a valid NUL-terminated string for the duration of the call.
            if unsafe { libc::umount2(path.as_ptr(), 0) } == 0 {
                break Ok(());
            }
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EBUSY) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Some(libc::EBUSY) => {
                    // Still in use: detach it from the tree; it goes once its users do.
                    // SAFETY: as above.
                    // The session thread ends with them; it is not waited for.
                    let detached = unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
                    return Err(if detached == 0 {
                        io::Error::new(
                            io::ErrorKind::ResourceBusy,
                            format!(
                                "{} was still in use after {UNMOUNT_PATIENCE:?}; detached it",
                                self.mountpoint.display()
                            ),
                        )
                    } else {
                        io::Error::last_os_error()
                    });
                }
                _ => break Err(error),
            }
        };
        // Unmounted, the kernel ends the session; wait for the thread, bounded.
        match session.done.recv_timeout(UNMOUNT_PATIENCE) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                if let Ok(Err(e)) = session.handle.join() {
                    result = result.and(Err(e));
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                result = result.and(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the faultfs session did not end after unmounting",
                )));
            }
        }
        result
    }
}

impl Drop for FaultFs {
    fn drop(&mut self) {
        if let Err(e) = self.unmount_inner() {
            eprintln!("faultfs: unmounting {}: {e}", self.mountpoint.display());
        }
    }
}
