use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::AtomicI64;

use chrono::{DateTime, TimeDelta, TimeZone};

use super::rotate::backup_name;
use super::*;
use crate::event::{RequestAudit, RequestMetadata, ResponseStatus};
use crate::policy::{Level, RequestAttributes, RequestAuditConfig, Stage, StageSet};

fn event(n: usize) -> Event {
    let config = RequestAuditConfig {
        level: Level::Metadata,
        omit_stages: StageSet::EMPTY,
        omit_managed_fields: false,
    };
    let request = RequestAttributes {
        user: Some("admin"),
        verb: "get",
        path: "/healthz",
        ..RequestAttributes::default()
    };
    let metadata = RequestMetadata {
        audit_id: Some(format!("event-{n:05}")),
        request_uri: "/healthz".to_owned(),
        received_at: start_time(),
        ..RequestMetadata::default()
    };
    let mut audit = RequestAudit::new(config, &request, metadata).expect("audited");
    audit
        .stage(Stage::ResponseComplete, Some(ResponseStatus::code(200)))
        .expect("not omitted")
        .clone()
}

fn start_time() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 25, 10, 0, 0)
        .single()
        .expect("valid time")
}

/// A clock that moves one second forward each time it is read, so every rotation gets its
/// own backup name.
fn ticking_clock() -> Clock {
    let ticks = Arc::new(AtomicI64::new(0));
    Arc::new(move || start_time() + TimeDelta::seconds(ticks.fetch_add(1, Ordering::Relaxed)))
}

fn line_len() -> u64 {
    serde_json::to_vec(&event(0)).expect("encodes").len() as u64 + 1
}

fn lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .expect("read log")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Names of the backups next to `audit.log`, sorted (oldest first).
fn backups(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("list dir")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .into_string()
                .expect("utf-8")
        })
        .filter(|name| name != "audit.log")
        .collect();
    names.sort();
    names
}

/// `audit-2026-11-25T10-00-00.000.log`: lumberjack's pattern.
fn is_backup_name(name: &str) -> bool {
    let Some(stamp) = name
        .strip_prefix("audit-")
        .and_then(|n| n.strip_suffix(".log"))
    else {
        return false;
    };
    let shape = stamp
        .chars()
        .map(|c| if c.is_ascii_digit() { '9' } else { c })
        .collect::<String>();
    shape == "9999-99-99T99-99-99.999"
}

#[test]
fn events_are_json_lines_in_a_private_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("nested/deeper/audit.log");
    let log = AuditLogOptions::new(&path).open_log().expect("opens");
    // Created at open, before any event.
    let mode = fs::metadata(&path).expect("created").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let dir_mode = fs::metadata(path.parent().expect("parent"))
        .expect("dir")
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);
    for n in 0..3 {
        log.log(&event(n));
    }
    log.flush().expect("flushes");
    let written = lines(&path);
    assert_eq!(written.len(), 3);
    for (n, line) in written.iter().enumerate() {
        let value: serde_json::Value =
            serde_json::from_str(line).expect("one JSON object per line");
        assert_eq!(value["auditID"], format!("event-{n:05}"));
    }
    assert_eq!((log.events_total(), log.errors_total()), (3, 0));
}

#[test]
fn an_existing_log_is_appended_to() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    fs::write(&path, "earlier\n").expect("seed");
    let log = AuditLogOptions::new(&path).open_log().expect("opens");
    log.log(&event(0));
    log.close();
    let written = lines(&path);
    assert_eq!(written.len(), 2);
    assert_eq!(written[0], "earlier");
}

#[test]
fn rotation_names_backups_as_lumberjack_and_keeps_max_backups() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let options = AuditLogOptions {
        max_backups: 2,
        ..AuditLogOptions::new(&path)
    };
    // Room for two lines per file: 7 lines make 4 files, of which 2 backups stay.
    let log = options
        .open_log_with(2 * line_len() + 1, ticking_clock())
        .expect("opens");
    for n in 0..7 {
        log.log(&event(n));
    }
    log.flush().expect("flushes");
    let names = backups(dir.path());
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().all(|name| is_backup_name(name)), "{names:?}");
    // The newest backups stay: events 2-3 and 4-5; the current file has event 6.
    let ids = |file: &str| -> Vec<String> {
        lines(&dir.path().join(file))
            .iter()
            .map(|line| {
                serde_json::from_str::<serde_json::Value>(line).expect("JSON")["auditID"]
                    .to_string()
            })
            .collect()
    };
    assert_eq!(ids(&names[0]), ["\"event-00002\"", "\"event-00003\""]);
    assert_eq!(ids(&names[1]), ["\"event-00004\"", "\"event-00005\""]);
    assert_eq!(ids("audit.log"), ["\"event-00006\""]);
    // Backups keep the log's mode.
    let mode = fs::metadata(dir.path().join(&names[0]))
        .expect("backup")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn without_max_backups_every_line_is_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let log = AuditLogOptions::new(&path)
        .open_log_with(3 * line_len(), ticking_clock())
        .expect("opens");
    for n in 0..10 {
        log.log(&event(n));
    }
    log.close();
    let names = backups(dir.path());
    assert_eq!(names.len(), 3, "{names:?}");
    let total: usize = names
        .iter()
        .map(|name| lines(&dir.path().join(name)).len())
        .sum::<usize>()
        + lines(&path).len();
    assert_eq!(total, 10);
}

#[test]
fn backup_name_is_utc_with_milliseconds_before_the_extension() {
    let time = start_time() + TimeDelta::milliseconds(7);
    let path = Path::new("/var/log/kube/audit.log");
    assert_eq!(
        backup_name(path, time),
        Path::new("/var/log/kube/audit-2026-11-25T10-00-00.007.log")
    );
    // Go's filepath.Ext: from the last dot; none without one.
    assert_eq!(
        backup_name(Path::new("/l/audit.json.log"), time),
        Path::new("/l/audit.json-2026-11-25T10-00-00.007.log")
    );
    assert_eq!(
        backup_name(Path::new("/l/audit"), time),
        Path::new("/l/audit-2026-11-25T10-00-00.007")
    );
}

#[test]
fn max_age_removes_backups_older_by_their_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let old = "audit-2026-11-20T10-00-00.000.log"; // five days before the clock
    let recent = "audit-2026-11-24T12-00-00.000.log";
    let unrelated = "audit-notes.log";
    for name in [old, recent, unrelated] {
        fs::write(dir.path().join(name), "x\n").expect("seed");
    }
    let options = AuditLogOptions {
        max_age_days: 3,
        ..AuditLogOptions::new(&path)
    };
    let log = options
        .open_log_with(1024 * 1024, ticking_clock())
        .expect("opens");
    log.log(&event(0)); // the first write opens the file and prunes
    log.close();
    assert_eq!(backups(dir.path()), [recent, unrelated]);
}

#[test]
fn a_full_existing_file_is_rotated_before_the_first_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    fs::write(&path, "x".repeat(100)).expect("seed");
    let log = AuditLogOptions::new(&path)
        .open_log_with(100 + line_len() - 1, ticking_clock())
        .expect("opens");
    log.log(&event(0));
    log.close();
    assert_eq!(lines(&path).len(), 1);
    let names = backups(dir.path());
    assert_eq!(names, ["audit-2026-11-25T10-00-00.000.log"]);
}

#[test]
fn an_event_larger_than_the_maximum_is_counted_as_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let log = AuditLogOptions::new(&path)
        .open_log_with(line_len() - 1, ticking_clock())
        .expect("opens");
    log.log(&event(0));
    log.flush().expect("flushes");
    assert_eq!((log.events_total(), log.errors_total()), (1, 1));
    assert_eq!(fs::read_to_string(&path).expect("read"), "");
}

#[test]
fn flush_waits_for_everything_queued() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let log = AuditLogOptions::new(&path).open_log().expect("opens");
    // The writer is held for a while with 100 events queued behind it.
    let release = log.pause();
    for n in 0..100 {
        log.log(&event(n));
    }
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        drop(release);
    });
    log.flush().expect("flushes");
    assert_eq!(lines(&path).len(), 100);
    releaser.join().expect("releaser");
}

#[test]
fn queued_events_are_written_together_in_order_and_still_rotate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    // Room for 150 lines: the 400 queued below cannot go out in one write.
    let log = AuditLogOptions::new(&path)
        .open_log_with(150 * line_len(), ticking_clock())
        .expect("opens");
    let release = log.pause();
    for n in 0..400 {
        log.log(&event(n));
    }
    drop(release);
    log.flush().expect("flushes");
    let mut written: Vec<String> = backups(dir.path())
        .iter()
        .flat_map(|name| lines(&dir.path().join(name)))
        .collect();
    written.extend(lines(&path));
    let ids: Vec<String> = written
        .iter()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).expect("a JSON line")["auditID"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    let expected: Vec<String> = (0..400).map(|n| event(n).audit_id).collect();
    assert_eq!(
        ids, expected,
        "every event once, in order, across the rotations"
    );
    assert!(
        !backups(dir.path()).is_empty(),
        "the batch crossed the size limit"
    );
    assert!(
        fs::metadata(&path).expect("log").len() <= 150 * line_len(),
        "no file grew past the limit"
    );
    assert_eq!((log.events_total(), log.errors_total()), (400, 0));
}

#[test]
fn events_after_close_are_errors_and_flush_says_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let log = AuditLogOptions::new(&path).open_log().expect("opens");
    log.log(&event(0));
    log.close();
    log.close();
    log.log(&event(1));
    assert_eq!((log.events_total(), log.errors_total()), (2, 1));
    assert!(matches!(log.flush(), Err(AuditLogError::Closed(_))));
    assert_eq!(lines(&path).len(), 1);
}

#[test]
fn dash_writes_to_standard_output() {
    let log = AuditLogOptions::new("-")
        .open_log()
        .expect("stdout is accepted");
    assert_eq!(log.target(), "-");
    log.log(&event(0));
    log.flush().expect("flushes");
    assert_eq!((log.events_total(), log.errors_total()), (1, 0));
    assert!(!Path::new("-").exists(), "no file named -");
}

#[test]
fn an_unwritable_path_is_named_with_the_os_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a-file");
    fs::write(&file, "").expect("seed");
    let path = file.join("audit.log");
    let error = AuditLogOptions::new(&path)
        .open_log()
        .expect_err("parent is a file");
    let message = error.to_string();
    assert!(
        message.starts_with(&format!("--audit-log-path {}: cannot", path.display())),
        "{message}"
    );
    assert!(message.contains("choose a"), "{message}");
    assert!(
        matches!(error, AuditLogError::CreateDir { .. }),
        "{error:?}"
    );

    let directory = dir.path().to_path_buf();
    let error = AuditLogOptions::new(&directory)
        .open_log()
        .expect_err("a directory");
    assert!(matches!(error, AuditLogError::Open { .. }), "{error:?}");
    assert!(
        error.to_string().contains("cannot open it for writing"),
        "{error}"
    );
}

#[test]
fn options_are_validated() {
    assert!(matches!(
        AuditLogOptions::new("").open_log(),
        Err(AuditLogError::EmptyPath)
    ));
    let huge = AuditLogOptions {
        max_size_mb: u64::MAX,
        ..AuditLogOptions::new("-")
    };
    assert!(matches!(
        huge.open_log(),
        Err(AuditLogError::MaxSizeTooLarge(_))
    ));
    // 0 is lumberjack's default of 100 MB, not "never rotate".
    assert_eq!(
        AuditLogOptions::new("-").max_bytes().expect("fits"),
        100 * 1024 * 1024
    );
    let ten = AuditLogOptions {
        max_size_mb: 10,
        ..AuditLogOptions::new("-")
    };
    assert_eq!(ten.max_bytes().expect("fits"), 10 * 1024 * 1024);
}

#[test]
fn open_loads_the_policy_or_defaults_to_metadata() {
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = AuditLogOptions::new(dir.path().join("audit.log"))
        .open()
        .expect("opens");
    assert_eq!(audit.policy, Policy::default_metadata());

    let policy_path = dir.path().join("policy.yaml");
    fs::write(
        &policy_path,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n  - level: Everything\n",
    )
    .expect("seed");
    let options = AuditLogOptions {
        policy: Some(policy_path.clone()),
        ..AuditLogOptions::new(dir.path().join("audit.log"))
    };
    let error = options.open().expect_err("bad policy");
    assert!(matches!(error, AuditLogError::Policy(_)));
    assert!(
        error
            .to_string()
            .contains(&format!("{}: line 4", policy_path.display())),
        "{error}"
    );
}
