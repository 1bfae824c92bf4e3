//! The FUSE side: turns the kernel's requests into [`Model`] operations.
//!
//! Only `fsync` (`FUSE_FSYNC`, from both `fsync` and `fdatasync`) and `fsyncdir` make
//! anything durable; `flush` (every `close`) and `release` do not. Hard links, symlinks and
//! device nodes are refused (`EPERM`): nothing under test uses them.

use std::ffi::OsStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::model::{Ino, Inode, Model};
use crate::{FaultOp, Kind};

/// How long the kernel may cache attributes and entries. Every change goes through the
/// kernel, so its cache cannot go stale while the filesystem is mounted.
const TTL: Duration = Duration::from_secs(1);

pub(crate) struct Ops {
    pub model: Arc<Mutex<Model>>,
}

impl Ops {
    fn lock(&self) -> MutexGuard<'_, Model> {
        // A panic while holding the lock leaves a consistent enough model for a test fixture.
        self.model.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The model, unless the power is cut.
    fn powered(&self) -> Result<MutexGuard<'_, Model>, Errno> {
        let model = self.lock();
        model.check_powered().map_err(Errno::from_i32)?;
        Ok(model)
    }

    /// fsync and fsyncdir alike: fire any injected fault, else make the inode's pending changes
    /// durable. On a fault nothing becomes durable; the changes stay pending (or the power is
    /// now cut).
    fn sync_inode(&self, ino: INodeNo, reply: ReplyEmpty) {
        let mut model = match self.powered() {
            Ok(model) => model,
            Err(e) => return reply.error(e),
        };
        if let Err(e) = model.fire_faults(FaultOp::Fsync, ino.0) {
            return reply.error(Errno::from_i32(e));
        }
        match model.sync(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }
}

fn attr(ino: Ino, inode: &Inode) -> FileAttr {
    let size = inode.size();
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: inode.atime,
        mtime: inode.mtime,
        ctime: inode.ctime,
        crtime: inode.ctime,
        kind: match inode.kind {
            Kind::File => FileType::RegularFile,
            Kind::Dir => FileType::Directory,
        },
        perm: inode.perm,
        nlink: inode.nlink,
        uid: inode.uid,
        gid: inode.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn entry_reply(model: &Model, ino: Ino, reply: ReplyEntry) {
    match model.get(ino) {
        Ok(inode) => reply.entry(&TTL, &attr(ino, inode), Generation(0)),
        Err(e) => reply.error(Errno::from_i32(e)),
    }
}

fn time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl Filesystem for Ops {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let model = match self.powered() {
            Ok(model) => model,
            Err(e) => return reply.error(e),
        };
        match model.lookup(parent.0, name) {
            Ok(ino) => entry_reply(&model, ino, reply),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let model = match self.powered() {
            Ok(model) => model,
            Err(e) => return reply.error(e),
        };
        match model.get(ino.0) {
            Ok(inode) => reply.attr(&TTL, &attr(ino.0, inode)),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut model = match self.powered() {
            Ok(model) => model,
            Err(e) => return reply.error(e),
        };
        if let Some(size) = size {
            // A truncate is a change to the contents: pending until the file is fsynced.
            if let Err(e) = model.fire_faults(FaultOp::Write, ino.0) {
                return reply.error(Errno::from_i32(e));
            }
            if let Err(e) = model.set_len(ino.0, size) {
                return reply.error(Errno::from_i32(e));
            }
        }
        let result = model.inodes.get_mut(&ino.0).map(|inode| {
            // Mode, ownership and times are not modelled for durability: they are whatever
            // they were last set to.
            if let Some(mode) = mode {
                inode.perm = (mode & 0o7777) as u16;
            }
            if let Some(uid) = uid {
                inode.uid = uid;
            }
            if let Some(gid) = gid {
                inode.gid = gid;
            }
            if let Some(atime) = atime {
                inode.atime = time(atime);
            }
            if let Some(mtime) = mtime {
                inode.mtime = time(mtime);
            }
            inode.ctime = ctime.unwrap_or_else(SystemTime::now);
            attr(ino.0, inode)
        });
        match result {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::EPERM);
        }
        let mut model = match self.powered() {
            Ok(model) => model,
            Err(e) => return reply.error(e),
        };
        let perm = (mode & !umask & 0o7777) as u16;
        match model.create(parent.0, name, Kind::File, perm, req.uid(), req.gid()) {
            Ok(ino) => entry_reply(&model, ino, reply),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut model = match self.powered() {
            Ok(model) => model,
            Err(e) => return reply.error(e),
        };
        let perm = (mode & !umask & 0o7777) as u16;
        match model.create(parent.0, name, Kind::Dir, perm, req.uid(), req.gid()) {
            Ok(ino) => entry_reply(&model, ino, reply),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut model = match self.powered() {
            Ok(model) => model,
            Err(e) => return reply.error(e),
        };
        match model.remove(parent.0, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut model = match self.powered() {
            Ok(model) => model,
            Err(e) => return reply.error(e),
        };
        match model.remove(parent.0, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::EINVAL);
        }
        let mut model = match self.powered() {
            Ok(model) => model,
            Err(e) => return reply.error(e),
        };
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        match model.rename(parent.0, name, newparent.0, newname, no_replace) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let model = match self.powered() {
            Ok(model) => model,
            Err(e) => return reply.error(e),
        };
        match model.get(ino.0) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let model = match self.powered() {
            Ok(model) => model,
            Err(e) => return reply.error(e),
        };
        match model.read(ino.0, offset, size) {
            Ok(data) => reply.data(data),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut model = match self.powered() {
            Ok(model) => model,
            Err(e) => return reply.error(e),
        };
        if let Err(e) = model.fire_faults(FaultOp::Write, ino.0) {
            return reply.error(Errno::from_i32(e));
        }
        let Ok(len) = u32::try_from(data.len()) else {
            return reply.error(Errno::EINVAL);
        };
        match model.write(ino.0, offset, data) {
            Ok(()) => reply.written(len),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // `close` makes nothing durable.
        match self.powered() {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // fdatasync is treated like fsync: both make the contents and the size durable, which
        // is all this filesystem tracks (the size is what fdatasync must also write when it
        // changed, to read the data back).
        self.sync_inode(ino, reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let model = match self.powered() {
            Ok(model) => model,
            Err(e) => return reply.error(e),
        };
        match model.get(ino.0) {
            Ok(inode) if inode.kind == Kind::Dir => {
                reply.opened(FileHandle(0), FopenFlags::empty())
            }
            Ok(_) => reply.error(Errno::ENOTDIR),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let model = match self.powered() {
            Ok(model) => model,
            Err(e) => return reply.error(e),
        };
        let dir = match model.get(ino.0) {
            Ok(dir) if dir.kind == Kind::Dir => dir,
            Ok(_) => return reply.error(Errno::ENOTDIR),
            Err(e) => return reply.error(Errno::from_i32(e)),
        };
        let dots = [
            (ino.0, FileType::Directory, OsStr::new(".")),
            (dir.parent, FileType::Directory, OsStr::new("..")),
        ];
        let children = dir.entries.iter().map(|(name, child)| {
            let kind = match model.get(*child).map(|c| c.kind) {
                Ok(Kind::Dir) => FileType::Directory,
                _ => FileType::RegularFile,
            };
            (*child, kind, name.as_os_str())
        });
        // An entry's offset is its position plus one: where the next call resumes.
        for (index, (child, kind, name)) in dots
            .into_iter()
            .chain(children)
            .enumerate()
            .skip(offset as usize)
        {
            if reply.add(INodeNo(child), index as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.sync_inode(ino, reply);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // Plenty of room: 16 GiB of 4 KiB blocks, a million inodes.
        reply.statfs(1 << 22, 1 << 22, 1 << 22, 1 << 20, 1 << 20, 4096, 255, 4096);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Permissions are checked by the kernel (`default_permissions`).
        match self.powered() {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut model = match self.powered() {
            Ok(model) => model,
            Err(e) => return reply.error(e),
        };
        let perm = (mode & !umask & 0o7777) as u16;
        match model.create(parent.0, name, Kind::File, perm, req.uid(), req.gid()) {
            Ok(ino) => match model.get(ino) {
                Ok(inode) => reply.created(
                    &TTL,
                    &attr(ino, inode),
                    Generation(0),
                    FileHandle(0),
                    FopenFlags::empty(),
                ),
                Err(e) => reply.error(Errno::from_i32(e)),
            },
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }
}
