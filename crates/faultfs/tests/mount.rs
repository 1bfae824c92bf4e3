//! The filesystem mounted for real, driven through ordinary `std::fs` calls: what survives a
//! power cut is exactly what was fsynced, and injected faults reach the caller as `EIO`.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use finale_faultfs::{Fault, FaultFs, PowerCut};

fn mounted() -> (tempfile::TempDir, FaultFs) {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = FaultFs::mount(dir.path()).expect("mount faultfs");
    (dir, fs)
}

fn sync_dir(path: &Path) {
    File::open(path)
        .and_then(|d| d.sync_all())
        .expect("fsync directory");
}

fn read(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut out))
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    out
}

#[test]
fn a_power_cut_keeps_what_was_synced_and_drops_the_rest() {
    let (dir, fs) = mounted();
    let root = dir.path();
    std::fs::create_dir(root.join("data")).unwrap();
    sync_dir(root);

    // Synced contents, then more that is only written (and closed: close syncs nothing).
    let mut log = File::create(root.join("data/log")).unwrap();
    log.write_all(b"first;").unwrap();
    log.sync_data().unwrap();
    log.write_all(b"second;").unwrap();
    drop(log);
    // Atomic replace, done right: write, fsync, rename, fsync the directory.
    std::fs::write(root.join("data/.config.tmp"), b"v1").unwrap();
    File::open(root.join("data/.config.tmp"))
        .unwrap()
        .sync_all()
        .unwrap();
    std::fs::rename(root.join("data/.config.tmp"), root.join("data/config")).unwrap();
    sync_dir(&root.join("data"));
    // Done wrong: no fsync of the file, nor of its new directory's parent.
    std::fs::create_dir(root.join("data/sub")).unwrap();
    std::fs::write(root.join("data/unsynced"), b"gone").unwrap();
    std::fs::write(root.join("data/sub/file"), b"gone too").unwrap();
    File::open(root.join("data/sub/file"))
        .unwrap()
        .sync_all()
        .unwrap();
    sync_dir(&root.join("data/sub"));
    // Everything reads back while the power is on.
    assert_eq!(read(&root.join("data/log")), b"first;second;");
    assert_eq!(read(&root.join("data/sub/file")), b"gone too");

    let image = fs.cut_power(PowerCut::DropUnsynced);
    // After the cut the mount fails every operation, as a dead disk would.
    let after = std::fs::read(root.join("data/log")).unwrap_err();
    assert_eq!(after.raw_os_error(), Some(libc::EIO), "{after}");
    fs.unmount().expect("unmount");

    assert_eq!(image.read("data/log"), Some(&b"first;"[..]));
    assert_eq!(image.read("data/config"), Some(&b"v1"[..]));
    assert_eq!(image.read("data/unsynced"), None);
    assert_eq!(
        image.read("data/sub/file"),
        None,
        "data/sub was never synced"
    );
    assert!(image.lost.unsynced_write_bytes >= "second;".len() as u64);

    // Mounted again, the image is what a restarted machine sees.
    let fs = FaultFs::mount_image(&image, root).expect("remount");
    assert_eq!(read(&root.join("data/log")), b"first;");
    assert_eq!(read(&root.join("data/config")), b"v1");
    let mut names: Vec<_> = std::fs::read_dir(root.join("data"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["config", "log"]);
    // And it is writable again.
    std::fs::write(root.join("data/log"), b"rewritten").unwrap();
    assert_eq!(read(&root.join("data/log")), b"rewritten");
    fs.unmount().expect("unmount");
}

#[test]
fn ignoring_fsync_loses_everything_written_since() {
    let (dir, fs) = mounted();
    let path = dir.path().join("file");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    file.write_all_at(b"kept", 0).unwrap();
    file.sync_all().unwrap();
    sync_dir(dir.path());
    fs.ignore_fsync(true);
    file.write_all_at(b"lost", 4).unwrap();
    file.sync_data().expect("an ignored fsync still succeeds");
    drop(file);
    let image = fs.cut_power(PowerCut::DropUnsynced);
    fs.unmount().unwrap();
    assert_eq!(image.read("file"), Some(&b"kept"[..]));
}

#[test]
fn injected_faults_fail_fsync_and_write_with_eio() {
    let (dir, fs) = mounted();
    let wal = dir.path().join("store.wal");
    let other = dir.path().join("other");
    let file = File::create(&wal).unwrap();
    let other_file = File::create(&other).unwrap();
    sync_dir(dir.path());

    fs.inject(Fault::fsync().on_file("store.wal").times(1));
    file.write_all_at(b"frame", 0).unwrap();
    other_file
        .sync_data()
        .expect("other files are not affected");
    let error = file.sync_data().unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::EIO), "{error}");
    assert_eq!(fs.injected_errors(), 1);
    // A failed fsync made nothing durable; the next one (the fault fired once) does.
    let image = fs.cut_power(PowerCut::DropUnsynced);
    assert_eq!(image.read("store.wal"), Some(&b""[..]));
    drop((file, other_file));
    fs.unmount().unwrap();

    let fs = FaultFs::mount_image(&image, dir.path()).unwrap();
    let file = OpenOptions::new().write(true).open(&wal).unwrap();
    fs.inject(Fault::write());
    let error = file.write_all_at(b"frame", 0).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::EIO), "{error}");
    fs.clear_faults();
    file.write_all_at(b"frame", 0).unwrap();
    file.sync_data().unwrap();
    assert_eq!(fs.injected_errors(), 1);
    drop(file);
    let image = fs.cut_power(PowerCut::DropUnsynced);
    fs.unmount().unwrap();
    assert_eq!(image.read("store.wal"), Some(&b"frame"[..]));
}

#[test]
fn a_fault_can_cut_the_power_as_an_fsync_is_issued() {
    let (dir, fs) = mounted();
    let path = dir.path().join("log");
    let file = File::create(&path).unwrap();
    sync_dir(dir.path());
    fs.inject(
        Fault::fsync()
            .on_file("log")
            .skip(1)
            .cut_power(PowerCut::DropUnsynced),
    );
    file.write_all_at(b"one;", 0).unwrap();
    file.sync_data().expect("the first fsync is let through");
    assert!(fs.wait_for_power_cut(Duration::ZERO).is_none());
    file.write_all_at(b"two;", 4).unwrap();
    let error = file.sync_data().unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::EIO), "{error}");
    let image = fs
        .wait_for_power_cut(Duration::from_secs(1))
        .expect("the fault cut the power");
    assert_eq!(image.read("log"), Some(&b"one;"[..]));
    assert_eq!(image.lost.unsynced_write_bytes, 4);
    // The power stays off.
    let error = file.write_all_at(b"three", 8).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::EIO), "{error}");
    drop(file);
    fs.unmount().unwrap();
}
