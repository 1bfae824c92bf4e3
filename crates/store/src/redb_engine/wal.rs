//! The write-ahead log that makes each group commit durable with one sequential append.
//!
//! A durable redb commit rewrites a dozen or more scattered pages (each touched table's path
//! to its root, the table tree, the freed-page tree, the header) and then fsyncs them; on the
//! development machine that costs 1–3 ms for a single small write, and grows with every
//! distinct leaf a batch touches. An append of the batch's changes to this file followed by
//! one `fdatasync` costs about 0.2 ms. So each batch is appended here and synced, then
//! committed to redb without fsync (visible to readers, durable through this log), and every
//! so often one redb commit is made durable (a checkpoint), after which the log is emptied.
//!
//! # Format
//!
//! A sequence of frames from the start of the file, each
//! `[payload length u32 LE][crc32 of payload u32 LE][payload]`. The payload is the engine's
//! batch encoding (see `redb_engine`), starting with its format byte. Reading stops at the
//! first frame that is incomplete, empty or fails its checksum: a torn tail from a crash
//! mid-append is never acknowledged, since acknowledgement waits for the sync.
//!
//! The file is grown in zero-filled [`GROW_BY`] steps ahead of the frames, and after a
//! checkpoint the log is rewound rather than truncated: new frames overwrite old ones in
//! blocks the file already has, so a sync flushes data only, with no file-size or
//! block-allocation metadata to journal (a journal commit is what makes an `fdatasync` slow
//! and erratic when other processes write to the same filesystem). Frames left over from before the rewind may follow
//! the new ones; they hold revisions the database already has durably, and the engine skips
//! them by revision when it redoes the log. A clean close zeroes the first header, so the next
//! open reads nothing.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::{StoreError, StoreResult};

use super::context;

/// Length and checksum, in front of every payload.
pub(super) const FRAME_HEADER: usize = 8;

/// How much zero-filled room the file gains when a frame would not fit.
pub(super) const GROW_BY: u64 = 1 << 20;

/// What [`Wal::open`] found.
pub(super) struct Opened {
    pub(super) wal: Wal,
    /// The payloads of the valid frames from the start of the file, in order.
    pub(super) payloads: Vec<Vec<u8>>,
    /// The frame after them, when it is complete but fails its checksum.
    pub(super) damage: Option<Damage>,
}

/// A frame that fails its checksum, and the valid frame right after it, if there is one. A
/// crash mid-append tears only the last frame written, so a torn tail is followed by zeroes or
/// by an older frame from before a rewind; a newer frame after it means the damaged frame was
/// once whole and acknowledged: the file was damaged in place.
pub(super) struct Damage {
    /// Where the damaged frame starts.
    pub(super) offset: u64,
    /// The valid frame that follows it: where it starts, and its payload.
    pub(super) next: Option<(u64, Vec<u8>)>,
}

fn parse_header(header: &[u8; FRAME_HEADER]) -> (usize, u32) {
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    (len, crc)
}

/// The payload of the valid frame at `at`, if there is one there.
fn read_frame_at(file: &File, at: u64, allocated: u64) -> Option<Vec<u8>> {
    let mut header = [0u8; FRAME_HEADER];
    file.read_exact_at(&mut header, at).ok()?;
    let (len, crc) = parse_header(&header);
    if len == 0 || at + (FRAME_HEADER + len) as u64 > allocated {
        return None;
    }
    let mut payload = vec![0u8; len];
    file.read_exact_at(&mut payload, at + FRAME_HEADER as u64)
        .ok()?;
    (crc32fast::hash(&payload) == crc).then_some(payload)
}

pub(super) struct Wal {
    file: File,
    path: PathBuf,
    /// Where the next frame goes: the end of the frames written since the last rewind.
    len: u64,
    /// The file's size: everything below it has blocks on disk.
    allocated: u64,
}

impl Wal {
    /// Opens (creating if needed) the log at `path` and returns it with the payloads of its
    /// valid frames, in order, and what follows them if that is a frame failing its checksum.
    /// The log is positioned after the valid frames.
    pub(super) fn open(path: &Path) -> StoreResult<Opened> {
        let existed = path.exists();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(context(format!("open write-ahead log {}", path.display())))?;
        if !existed {
            // Make the new file's directory entry durable, or a crash could lose the whole log.
            if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(context(format!("sync directory {}", dir.display())))?;
            }
        }

        let allocated = file
            .metadata()
            .map_err(context(format!("stat {}", path.display())))?
            .len();
        let mut payloads = Vec::new();
        let mut offset = 0u64;
        let mut damage = None;
        let mut reader = BufReader::with_capacity(1 << 20, &file);
        loop {
            let mut header = [0u8; FRAME_HEADER];
            if reader.read_exact(&mut header).is_err() {
                break;
            }
            let (len, crc) = parse_header(&header);
            if len == 0 {
                break;
            }
            if offset + (FRAME_HEADER + len) as u64 > allocated {
                // Longer than the file: a torn header at the end, or a damaged length.
                break;
            }
            let mut payload = vec![0u8; len];
            if reader.read_exact(&mut payload).is_err() {
                break;
            }
            if crc32fast::hash(&payload) != crc {
                // A torn tail, or damage in the middle: which one depends on what follows,
                // which only the engine can judge (by revision).
                let next_at = offset + (FRAME_HEADER + len) as u64;
                damage = Some(Damage {
                    offset,
                    next: read_frame_at(&file, next_at, allocated).map(|p| (next_at, p)),
                });
                break;
            }
            payloads.push(payload);
            offset += (FRAME_HEADER + len) as u64;
        }
        Ok(Opened {
            wal: Wal {
                file,
                path: path.to_path_buf(),
                len: offset,
                allocated,
            },
            payloads,
            damage,
        })
    }

    /// Appends one frame and, if `sync`, waits until it is on disk. `frame` must start with
    /// [`FRAME_HEADER`] bytes of room, which this fills in.
    pub(super) fn append(&mut self, frame: &mut [u8], sync: bool) -> StoreResult<()> {
        let payload_len = frame.len() - FRAME_HEADER;
        let len = u32::try_from(payload_len).map_err(|_| {
            StoreError::Backend(format!(
                "a write batch of {payload_len} bytes is too large for the write-ahead log"
            ))
        })?;
        let crc = crc32fast::hash(&frame[FRAME_HEADER..]);
        frame[0..4].copy_from_slice(&len.to_le_bytes());
        frame[4..8].copy_from_slice(&crc.to_le_bytes());
        let end = self.len + frame.len() as u64;
        if end > self.allocated {
            self.grow(end)?;
        }
        self.file
            .write_all_at(frame, self.len)
            .map_err(context(format!("append to {}", self.path.display())))?;
        if sync {
            self.file
                .sync_data()
                .map_err(context(format!("sync {}", self.path.display())))?;
        }
        self.len += frame.len() as u64;
        Ok(())
    }

    /// Zero-fills the file up to a [`GROW_BY`] multiple at or past `end`. Written, not
    /// `set_len` or `fallocate`d, so later overwrites need no allocation; made durable by the
    /// sync of the frame that needed the room.
    fn grow(&mut self, end: u64) -> StoreResult<()> {
        let target = end.div_ceil(GROW_BY) * GROW_BY;
        let zeros = vec![0u8; 64 << 10];
        let mut at = self.allocated;
        while at < target {
            let n = (target - at).min(zeros.len() as u64) as usize;
            self.file
                .write_all_at(&zeros[..n], at)
                .map_err(context(format!("grow {}", self.path.display())))?;
            at += n as u64;
        }
        self.allocated = target;
        Ok(())
    }

    /// Starts the log over, once everything in it is durable in the database.
    pub(super) fn rewind(&mut self) {
        self.len = 0;
    }

    /// Makes the log read as empty (after a final checkpoint), so the next open has nothing
    /// to read.
    pub(super) fn clear(&mut self, sync: bool) -> StoreResult<()> {
        self.file
            .write_all_at(&[0u8; FRAME_HEADER], 0)
            .and_then(|()| if sync { self.file.sync_data() } else { Ok(()) })
            .map_err(context(format!("clear {}", self.path.display())))?;
        self.len = 0;
        Ok(())
    }

    /// Forgets the frames from `offset` on (after a batch whose frame was appended failed to
    /// commit): the next frame goes there, and [`Wal::discard_tail`] invalidates them.
    pub(super) fn rewind_to(&mut self, offset: u64) {
        self.len = self.len.min(offset);
    }

    /// Makes whatever follows the acknowledged frames unreadable, durably: zeroes the header
    /// where the next frame goes, so that neither a reopen nor a crash redoes a frame whose
    /// append, sync or commit failed.
    pub(super) fn discard_tail(&mut self) -> StoreResult<()> {
        if self.len >= self.allocated {
            // Past the end of the file: there is nothing to read there.
            return Ok(());
        }
        self.file
            .write_all_at(&[0u8; FRAME_HEADER], self.len)
            .and_then(|()| self.file.sync_data())
            .map_err(context(format!(
                "discard the unacknowledged end of {} at offset {}",
                self.path.display(),
                self.len
            )))
    }

    /// Bytes written since the last rewind.
    pub(super) fn len(&self) -> u64 {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut frame = vec![0; FRAME_HEADER];
        frame.extend_from_slice(payload);
        frame
    }

    #[test]
    fn frames_round_trip_and_reading_stops_at_a_bad_frame() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("test.wal");
        {
            let Opened {
                mut wal, payloads, ..
            } = Wal::open(&path).expect("open");
            assert!(payloads.is_empty());
            wal.append(&mut frame(b"one"), true).expect("append");
            wal.append(&mut frame(b"two"), false).expect("append");
            assert_eq!(wal.len(), 2 * FRAME_HEADER as u64 + 6);
        }
        assert_eq!(std::fs::metadata(&path).expect("stat").len(), GROW_BY);
        // A torn third frame: a header promising more than was written.
        let mut raw = std::fs::read(&path).expect("read");
        let end = 2 * FRAME_HEADER + 6;
        raw[end..end + 4].copy_from_slice(&100u32.to_le_bytes());
        raw[end + 8..end + 15].copy_from_slice(b"partial");
        std::fs::write(&path, &raw).expect("write");
        {
            let Opened {
                mut wal, payloads, ..
            } = Wal::open(&path).expect("open");
            assert_eq!(payloads, [b"one".to_vec(), b"two".to_vec()]);
            // The next frame overwrites the torn one.
            wal.append(&mut frame(b"three"), true).expect("append");
        }
        let Opened {
            mut wal, payloads, ..
        } = Wal::open(&path).expect("open");
        assert_eq!(
            payloads,
            [b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
        );

        // After a rewind, new frames come first and older ones may follow.
        wal.rewind();
        wal.append(&mut frame(b"new"), true).expect("append");
        drop(wal);
        let Opened {
            mut wal, payloads, ..
        } = Wal::open(&path).expect("open");
        assert_eq!(payloads[0], b"new".to_vec());

        // A corrupted payload ends the log there.
        let mut raw = std::fs::read(&path).expect("read");
        raw[FRAME_HEADER] ^= 0xff;
        std::fs::write(&path, &raw).expect("write");
        let Opened { payloads, .. } = Wal::open(&path).expect("open");
        assert!(payloads.is_empty());

        // Cleared, it reads as empty.
        wal.append(&mut frame(b"x"), true).expect("append");
        wal.clear(true).expect("clear");
        drop(wal);
        let Opened { payloads, .. } = Wal::open(&path).expect("open");
        assert!(payloads.is_empty());
    }
}
