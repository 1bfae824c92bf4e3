//! The filesystem's state and its durability rules, apart from FUSE: every inode's current
//! contents (what a running program reads) beside its durable contents (what a disk would
//! hold after a power cut), and the operations that move one to the other.
//!
//! Errors are `errno` values; the FUSE layer passes them on to the kernel.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::ops::Range;
use std::path::{Component, Path};
use std::time::SystemTime;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{DiskImage, Fault, FaultOp, ImageInode, Kind, LostAtCut, PowerCut};

pub(crate) type Errno = i32;
pub(crate) type Ino = u64;

pub(crate) const ROOT: Ino = 1;

/// Writes tear at this granularity in [`PowerCut::Torn`]: a page cache page.
const PAGE: u64 = 4096;

/// A change to a file's contents since its last fsync, kept in order so a torn power cut can
/// decide which of them reached the disk.
#[derive(Clone, Debug)]
pub(crate) enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

pub(crate) struct Inode {
    pub kind: Kind,
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    /// Current links (directory entries naming it).
    pub nlink: u32,
    /// For directories: the directory holding it (itself for the root).
    pub parent: Ino,
    /// The name it was last linked under, which fault filters match.
    pub name: OsString,
    /// Files: what a reader sees now.
    pub data: Vec<u8>,
    /// Files: what survives a power cut.
    pub durable_data: Vec<u8>,
    /// Files: the changes from `durable_data` to `data`, oldest first.
    pub pending: Vec<Pending>,
    /// Directories: the current entries.
    pub entries: BTreeMap<OsString, Ino>,
    /// Directories: the entries that survive a power cut.
    pub durable_entries: BTreeMap<OsString, Ino>,
}

impl Inode {
    fn new(kind: Kind, perm: u16, uid: u32, gid: u32, parent: Ino, name: &OsStr) -> Inode {
        let now = SystemTime::now();
        Inode {
            kind,
            perm,
            uid,
            gid,
            atime: now,
            mtime: now,
            ctime: now,
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            parent,
            name: name.to_owned(),
            data: Vec::new(),
            durable_data: Vec::new(),
            pending: Vec::new(),
            entries: BTreeMap::new(),
            durable_entries: BTreeMap::new(),
        }
    }

    pub fn size(&self) -> u64 {
        match self.kind {
            Kind::File => self.data.len() as u64,
            Kind::Dir => 4096,
        }
    }
}

/// The whole filesystem: inodes, plus the switches tests flip.
pub(crate) struct Model {
    pub inodes: HashMap<Ino, Inode>,
    next_ino: Ino,
    /// False after a power cut: every operation then fails with `EIO`.
    pub powered: bool,
    /// Negative-control switch: fsync and fdatasync succeed but make nothing durable.
    pub fsync_ignored: bool,
    pub faults: Vec<Fault>,
    /// Errors injected so far.
    pub injected: u64,
    /// Successful fsyncs of files (whether or not ignored), for tests' preconditions.
    pub file_syncs: u64,
    /// The disk as a fault's power cut left it, until taken.
    cut_image: Option<DiskImage>,
}

impl Model {
    pub fn new() -> Model {
        let mut root = Inode::new(Kind::Dir, 0o755, 0, 0, ROOT, OsStr::new(""));
        root.uid = current_uid();
        root.gid = current_gid();
        Model::with_inodes(HashMap::from([(ROOT, root)]))
    }

    fn with_inodes(inodes: HashMap<Ino, Inode>) -> Model {
        let next_ino = inodes.keys().max().copied().unwrap_or(ROOT) + 1;
        Model {
            inodes,
            next_ino,
            powered: true,
            fsync_ignored: false,
            faults: Vec::new(),
            injected: 0,
            file_syncs: 0,
            cut_image: None,
        }
    }

    /// A filesystem whose current and durable contents are both `image`: what a machine sees
    /// when it boots after the cut.
    pub fn from_image(image: &DiskImage) -> Model {
        let now = SystemTime::now();
        let inodes = image
            .inodes
            .iter()
            .map(|(&ino, i)| {
                let inode = Inode {
                    kind: i.kind,
                    perm: i.perm,
                    uid: i.uid,
                    gid: i.gid,
                    atime: now,
                    mtime: i.mtime,
                    ctime: i.mtime,
                    nlink: i.nlink,
                    parent: i.parent,
                    name: i.name.clone(),
                    data: i.data.clone(),
                    durable_data: i.data.clone(),
                    pending: Vec::new(),
                    entries: i.entries.clone(),
                    durable_entries: i.entries.clone(),
                };
                (ino, inode)
            })
            .collect();
        Model::with_inodes(inodes)
    }

    pub fn get(&self, ino: Ino) -> Result<&Inode, Errno> {
        self.inodes.get(&ino).ok_or(libc::ENOENT)
    }

    fn get_mut(&mut self, ino: Ino) -> Result<&mut Inode, Errno> {
        self.inodes.get_mut(&ino).ok_or(libc::ENOENT)
    }

    fn dir(&self, ino: Ino) -> Result<&Inode, Errno> {
        let inode = self.get(ino)?;
        if inode.kind == Kind::Dir {
            Ok(inode)
        } else {
            Err(libc::ENOTDIR)
        }
    }

    /// Fails with `EIO` once the power is cut.
    pub fn check_powered(&self) -> Result<(), Errno> {
        if self.powered { Ok(()) } else { Err(libc::EIO) }
    }

    /// Fires the first injected fault matching `op` on `ino`, if any: `EIO`, or a power cut
    /// (whose image is kept for [`Model::take_cut_image`]) followed by `EIO`. Either way the
    /// operation then does nothing.
    pub fn fire_faults(&mut self, op: FaultOp, ino: Ino) -> Result<(), Errno> {
        let Some(name) = self.inodes.get(&ino).map(|inode| inode.name.clone()) else {
            return Ok(());
        };
        let Some(fault) = self.faults.iter_mut().find(|f| {
            f.op == op && f.file_name.as_ref().is_none_or(|n| *n == name) && f.remaining != Some(0)
        }) else {
            return Ok(());
        };
        if fault.skip > 0 {
            fault.skip -= 1;
            return Ok(());
        }
        if let Some(remaining) = fault.remaining.as_mut() {
            *remaining -= 1;
        }
        self.injected += 1;
        if let Some(cut) = fault.cut_power {
            let image = self.cut(cut);
            self.cut_image = Some(image);
        }
        Err(libc::EIO)
    }

    /// The image of a power cut a fault made, once.
    pub fn take_cut_image(&mut self) -> Option<DiskImage> {
        self.cut_image.take()
    }

    pub fn lookup(&self, parent: Ino, name: &OsStr) -> Result<Ino, Errno> {
        self.dir(parent)?
            .entries
            .get(name)
            .copied()
            .ok_or(libc::ENOENT)
    }

    /// A new file or directory under `parent`. The entry is not durable until `parent` is
    /// fsynced.
    pub fn create(
        &mut self,
        parent: Ino,
        name: &OsStr,
        kind: Kind,
        perm: u16,
        uid: u32,
        gid: u32,
    ) -> Result<Ino, Errno> {
        if self.dir(parent)?.entries.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inodes
            .insert(ino, Inode::new(kind, perm, uid, gid, parent, name));
        let dir = self.get_mut(parent)?;
        dir.entries.insert(name.to_owned(), ino);
        dir.mtime = SystemTime::now();
        if kind == Kind::Dir {
            dir.nlink += 1;
        }
        Ok(ino)
    }

    /// Removes the entry `name` (a directory only if `dir`, and only when empty). The inode
    /// itself stays: a durable entry may still name it, and open handles may still use it.
    pub fn remove(&mut self, parent: Ino, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let ino = self.lookup(parent, name)?;
        let inode = self.get(ino)?;
        match (inode.kind, dir) {
            (Kind::Dir, false) => return Err(libc::EISDIR),
            (Kind::File, true) => return Err(libc::ENOTDIR),
            (Kind::Dir, true) if !inode.entries.is_empty() => return Err(libc::ENOTEMPTY),
            _ => {}
        }
        self.get_mut(ino)?.nlink = 0;
        let parent_dir = self.get_mut(parent)?;
        parent_dir.entries.remove(name);
        parent_dir.mtime = SystemTime::now();
        if dir {
            parent_dir.nlink -= 1;
        }
        Ok(())
    }

    /// Moves an entry, replacing what `new_name` named unless `no_replace`. Durable only once
    /// both directories are fsynced (each keeps its own durable entries).
    pub fn rename(
        &mut self,
        parent: Ino,
        name: &OsStr,
        new_parent: Ino,
        new_name: &OsStr,
        no_replace: bool,
    ) -> Result<(), Errno> {
        let ino = self.lookup(parent, name)?;
        self.dir(new_parent)?;
        let kind = self.get(ino)?.kind;
        if kind == Kind::Dir && self.is_ancestor(ino, new_parent) {
            return Err(libc::EINVAL);
        }
        if let Some(&target) = self.dir(new_parent)?.entries.get(new_name) {
            if no_replace {
                return Err(libc::EEXIST);
            }
            if target == ino {
                return Ok(());
            }
            let target_inode = self.get(target)?;
            match (kind, target_inode.kind) {
                (Kind::File, Kind::Dir) => return Err(libc::EISDIR),
                (Kind::Dir, Kind::File) => return Err(libc::ENOTDIR),
                (Kind::Dir, Kind::Dir) if !target_inode.entries.is_empty() => {
                    return Err(libc::ENOTEMPTY);
                }
                _ => {}
            }
            self.remove(new_parent, new_name, kind == Kind::Dir)?;
        }
        let now = SystemTime::now();
        let old_dir = self.get_mut(parent)?;
        old_dir.entries.remove(name);
        old_dir.mtime = now;
        if kind == Kind::Dir {
            old_dir.nlink -= 1;
        }
        let new_dir = self.get_mut(new_parent)?;
        new_dir.entries.insert(new_name.to_owned(), ino);
        new_dir.mtime = now;
        if kind == Kind::Dir {
            new_dir.nlink += 1;
        }
        let inode = self.get_mut(ino)?;
        inode.name = new_name.to_owned();
        inode.ctime = now;
        if kind == Kind::Dir {
            inode.parent = new_parent;
        }
        Ok(())
    }

    /// Whether `ancestor` is `ino` or one of the directories above it.
    fn is_ancestor(&self, ancestor: Ino, mut ino: Ino) -> bool {
        // Bounded by the tree's depth; the root is its own parent.
        for _ in 0..self.inodes.len() {
            if ino == ancestor {
                return true;
            }
            let Some(inode) = self.inodes.get(&ino) else {
                return false;
            };
            if inode.parent == ino {
                return false;
            }
            ino = inode.parent;
        }
        false
    }

    fn file_mut(&mut self, ino: Ino) -> Result<&mut Inode, Errno> {
        let inode = self.get_mut(ino)?;
        if inode.kind == Kind::File {
            Ok(inode)
        } else {
            Err(libc::EISDIR)
        }
    }

    pub fn read(&self, ino: Ino, offset: u64, size: u32) -> Result<&[u8], Errno> {
        let inode = self.get(ino)?;
        if inode.kind != Kind::File {
            return Err(libc::EISDIR);
        }
        let len = inode.data.len() as u64;
        let start = offset.min(len) as usize;
        let end = offset.saturating_add(u64::from(size)).min(len) as usize;
        Ok(&inode.data[start..end])
    }

    pub fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<(), Errno> {
        let inode = self.file_mut(ino)?;
        write_at(&mut inode.data, offset, data);
        inode.pending.push(Pending::Write {
            offset,
            data: data.to_vec(),
        });
        inode.mtime = SystemTime::now();
        Ok(())
    }

    pub fn set_len(&mut self, ino: Ino, len: u64) -> Result<(), Errno> {
        let inode = self.file_mut(ino)?;
        inode.data.resize(len as usize, 0);
        inode.pending.push(Pending::SetLen(len));
        inode.mtime = SystemTime::now();
        Ok(())
    }

    /// fsync or fdatasync: a file's contents and size, or a directory's entries, become
    /// durable. A no-op while `fsync_ignored`.
    pub fn sync(&mut self, ino: Ino) -> Result<(), Errno> {
        let ignored = self.fsync_ignored;
        let inode = self.get_mut(ino)?;
        match inode.kind {
            Kind::File => {
                self.file_syncs += 1;
                let inode = self.get_mut(ino)?;
                if !ignored {
                    // Replaying the pending changes costs what was written since the last
                    // sync, not the file's size.
                    for change in inode.pending.drain(..) {
                        match change {
                            Pending::Write { offset, data } => {
                                write_at(&mut inode.durable_data, offset, &data)
                            }
                            Pending::SetLen(len) => inode.durable_data.resize(len as usize, 0),
                        }
                    }
                    debug_assert_eq!(inode.durable_data, inode.data);
                }
            }
            Kind::Dir => {
                if !ignored {
                    inode.durable_entries = inode.entries.clone();
                }
            }
        }
        Ok(())
    }

    /// Cuts the power: returns the disk as a reboot would find it, and fails every later
    /// operation with `EIO`.
    pub fn cut(&mut self, cut: PowerCut) -> DiskImage {
        self.powered = false;
        let mut rng = match cut {
            PowerCut::DropUnsynced => None,
            PowerCut::Torn { seed } => Some(StdRng::seed_from_u64(seed)),
        };
        let mut lost = LostAtCut::default();
        // Iterate in inode order so a seed always tears the same way.
        let mut order: Vec<Ino> = self.inodes.keys().copied().collect();
        order.sort_unstable();
        for ino in &order {
            let inode = &self.inodes[ino];
            if !inode.pending.is_empty() {
                lost.files_with_unsynced_data += 1;
                lost.unsynced_write_bytes += inode
                    .pending
                    .iter()
                    .map(|p| match p {
                        Pending::Write { data, .. } => data.len() as u64,
                        Pending::SetLen(_) => 0,
                    })
                    .sum::<u64>();
            }
            if inode.kind == Kind::Dir && inode.entries != inode.durable_entries {
                lost.dirs_with_unsynced_entries += 1;
            }
        }

        // What the disk holds: durable entries from the root down, durable file contents
        // (or, torn, the durable contents with some of the pending changes).
        let mut image = BTreeMap::new();
        let mut links: HashMap<Ino, u32> = HashMap::new();
        let mut queue = vec![(ROOT, ROOT)];
        while let Some((ino, parent)) = queue.pop() {
            let Some(inode) = self.inodes.get(&ino) else {
                continue;
            };
            *links.entry(ino).or_default() += 1;
            if image.contains_key(&ino) {
                // A second name for a file (directories cannot be reached twice: a rename
                // whose old directory was not synced may leave one in both places, and the
                // first path found wins).
                continue;
            }
            let data = match (&mut rng, inode.kind) {
                (Some(rng), Kind::File) if !inode.pending.is_empty() => {
                    torn(&inode.durable_data, &inode.pending, rng)
                }
                _ => inode.durable_data.clone(),
            };
            let entries = if inode.kind == Kind::Dir {
                let entries: BTreeMap<OsString, Ino> = inode
                    .durable_entries
                    .iter()
                    .filter(|(_, child)| {
                        // A durable entry naming a directory reached already would make a
                        // loop or a second parent: drop it, as fsck would.
                        self.inodes
                            .get(child)
                            .is_some_and(|c| c.kind == Kind::File || !image.contains_key(*child))
                    })
                    .map(|(n, c)| (n.clone(), *c))
                    .collect();
                for child in entries.values() {
                    queue.push((*child, ino));
                }
                entries
            } else {
                BTreeMap::new()
            };
            image.insert(
                ino,
                ImageInode {
                    kind: inode.kind,
                    perm: inode.perm,
                    uid: inode.uid,
                    gid: inode.gid,
                    mtime: inode.mtime,
                    nlink: 0,
                    parent: if inode.kind == Kind::Dir {
                        parent
                    } else {
                        ROOT
                    },
                    name: inode.name.clone(),
                    data,
                    entries,
                },
            );
        }
        for (ino, inode) in image.iter_mut() {
            inode.nlink = match inode.kind {
                Kind::File => links.get(ino).copied().unwrap_or(1),
                Kind::Dir => {
                    2 + inode
                        .entries
                        .values()
                        .filter(|c| self.inodes.get(c).is_some_and(|c| c.kind == Kind::Dir))
                        .count() as u32
                }
            };
        }
        DiskImage {
            inodes: image,
            lost,
        }
    }
}

/// Root's owner: the user running the tests, so a non-root run can use the mount too.
fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

fn current_gid() -> u32 {
    // SAFETY: getgid has no preconditions and cannot fail.
    unsafe { libc::getgid() }
}

fn write_at(buf: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let start = offset as usize;
    let end = start + data.len();
    if buf.len() < end {
        buf.resize(end, 0);
    }
    buf[start..end].copy_from_slice(data);
}

fn pages(range: &Range<u64>) -> Range<u64> {
    range.start / PAGE..range.end.div_ceil(PAGE)
}

/// A torn power cut of one file: each page holds its durable contents with a random prefix
/// (possibly none, possibly all) of the pending changes that touched it applied, as page
/// writeback may have flushed any version of a page; the size is the one after a random
/// prefix of the changes. Regions that no kept change covers read as zeros, never stale data
/// (as ext4's `data=ordered` promises).
fn torn(durable: &[u8], pending: &[Pending], rng: &mut StdRng) -> Vec<u8> {
    // Each change as the byte range it touches and what it puts there (`None`: zeros).
    let mut size = durable.len() as u64;
    let mut sizes = vec![size];
    let mut changes: Vec<(Range<u64>, Option<&[u8]>)> = Vec::with_capacity(pending.len());
    for change in pending {
        match change {
            Pending::Write { offset, data } => {
                let range = *offset..offset + data.len() as u64;
                size = size.max(range.end);
                changes.push((range, Some(data)));
            }
            Pending::SetLen(len) => {
                changes.push((size.min(*len)..size.max(*len), None));
                size = *len;
            }
        }
        sizes.push(size);
    }
    let mut touches: HashMap<u64, u32> = HashMap::new();
    for (range, _) in &changes {
        for page in pages(range) {
            *touches.entry(page).or_default() += 1;
        }
    }
    let mut order: Vec<u64> = touches.keys().copied().collect();
    order.sort_unstable();
    let keep: HashMap<u64, u32> = order
        .into_iter()
        .map(|page| (page, rng.random_range(0..=touches[&page])))
        .collect();
    let mut seen: HashMap<u64, u32> = HashMap::new();
    let mut out = durable.to_vec();
    for (range, content) in &changes {
        for page in pages(range) {
            let count = seen.entry(page).or_default();
            *count += 1;
            if *count > keep[&page] {
                continue;
            }
            let start = range.start.max(page * PAGE);
            let end = range.end.min((page + 1) * PAGE);
            if out.len() < end as usize {
                out.resize(end as usize, 0);
            }
            let target = &mut out[start as usize..end as usize];
            match content {
                Some(data) => target.copy_from_slice(
                    &data[(start - range.start) as usize..(end - range.start) as usize],
                ),
                None => target.fill(0),
            }
        }
    }
    let size = sizes[rng.random_range(0..sizes.len())];
    out.resize(size as usize, 0);
    out
}

/// Looks `path` (relative to the root; `.` components ignored) up in `inodes`.
pub(crate) fn resolve(inodes: &BTreeMap<Ino, ImageInode>, path: &Path) -> Option<Ino> {
    let mut ino = ROOT;
    for component in path.components() {
        match component {
            Component::Normal(name) => ino = *inodes.get(&ino)?.entries.get(name)?,
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir => ino = inodes.get(&ino)?.parent,
            Component::Prefix(_) => return None,
        }
    }
    Some(ino)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(model: &mut Model, parent: Ino, name: &str) -> Ino {
        model
            .create(parent, OsStr::new(name), Kind::File, 0o644, 0, 0)
            .expect("create")
    }

    #[test]
    fn only_synced_contents_and_entries_survive_a_cut() {
        let mut model = Model::new();
        let a = file(&mut model, ROOT, "a");
        model.write(a, 0, b"synced").unwrap();
        model.sync(a).unwrap();
        model.write(a, 6, b"+unsynced").unwrap();
        let b = file(&mut model, ROOT, "b");
        model.write(b, 0, b"never synced").unwrap();
        model.sync(b).unwrap();
        // Only `a`'s entry is made durable: `b` was created after the root's sync.
        model.remove(ROOT, OsStr::new("b"), false).unwrap();
        model.sync(ROOT).unwrap();
        let c = file(&mut model, ROOT, "c");
        model.sync(c).unwrap();

        let image = model.cut(PowerCut::DropUnsynced);
        assert_eq!(image.read("a"), Some(&b"synced"[..]));
        assert_eq!(image.read("b"), None);
        assert_eq!(image.read("c"), None, "c's entry was never synced");
        assert_eq!(image.lost.files_with_unsynced_data, 1);
        assert_eq!(image.lost.unsynced_write_bytes, 9);
        assert_eq!(image.lost.dirs_with_unsynced_entries, 1);
        assert_eq!(model.check_powered(), Err(libc::EIO));
    }

    #[test]
    fn a_rename_is_durable_once_its_directory_is_synced() {
        let mut model = Model::new();
        let tmp = file(&mut model, ROOT, "tmp");
        model.write(tmp, 0, b"new").unwrap();
        model.sync(tmp).unwrap();
        model
            .rename(ROOT, OsStr::new("tmp"), ROOT, OsStr::new("final"), false)
            .unwrap();
        let before_sync = Model::from_image(&model.cut(PowerCut::DropUnsynced));
        assert!(before_sync.lookup(ROOT, OsStr::new("final")).is_err());

        let mut model = Model::new();
        let tmp = file(&mut model, ROOT, "tmp");
        model.write(tmp, 0, b"new").unwrap();
        model.sync(tmp).unwrap();
        model
            .rename(ROOT, OsStr::new("tmp"), ROOT, OsStr::new("final"), false)
            .unwrap();
        model.sync(ROOT).unwrap();
        let image = model.cut(PowerCut::DropUnsynced);
        assert_eq!(image.read("final"), Some(&b"new"[..]));
        assert_eq!(image.read("tmp"), None);
    }

    #[test]
    fn ignored_fsyncs_make_nothing_durable() {
        let mut model = Model::new();
        let a = file(&mut model, ROOT, "a");
        model.sync(ROOT).unwrap();
        model.fsync_ignored = true;
        model.write(a, 0, b"data").unwrap();
        model.sync(a).unwrap();
        let image = model.cut(PowerCut::DropUnsynced);
        assert_eq!(image.read("a"), Some(&b""[..]));
    }

    #[test]
    fn a_torn_cut_keeps_a_prefix_of_each_pages_changes() {
        let durable = vec![b'd'; 3 * PAGE as usize];
        let pending = vec![
            Pending::Write {
                offset: 0,
                data: vec![b'1'; 3 * PAGE as usize],
            },
            Pending::Write {
                offset: PAGE,
                data: vec![b'2'; PAGE as usize],
            },
            Pending::SetLen(4 * PAGE),
        ];
        let mut outcomes = std::collections::BTreeSet::new();
        for seed in 0..64 {
            let out = torn(&durable, &pending, &mut StdRng::seed_from_u64(seed));
            assert!(out.len() == 3 * PAGE as usize || out.len() == 4 * PAGE as usize);
            for (page, chunk) in out.chunks(PAGE as usize).enumerate() {
                // Whole pages: never a mix within one page.
                assert!(chunk.iter().all(|b| *b == chunk[0]), "page {page} torn");
                let allowed: &[u8] = match page {
                    0 | 2 => b"d1",
                    1 => b"d12",
                    _ => b"\0",
                };
                assert!(allowed.contains(&chunk[0]), "page {page}: {}", chunk[0]);
            }
            outcomes.insert(out);
        }
        assert!(outcomes.len() > 8, "the seeds should tear differently");
    }
}
