//! Record encoding of the kv, history and log tables (all integers big-endian; every record
//! starts with `RECORD_V1`).

use super::*;

pub(super) const HIST_PUT: u8 = 0;
pub(super) const HIST_TOMBSTONE: u8 = 1;
pub(super) const LOG_PUT: u8 = 0;
pub(super) const LOG_DELETE: u8 = 1;

/// `kv`: `[RECORD_V1][create_rev u64][mod_rev u64][version u64][value...]`
pub(super) fn encode_kv(
    buf: &mut Vec<u8>,
    create: Revision,
    modified: Revision,
    version: i64,
    value: &[u8],
) {
    buf.clear();
    buf.reserve(25 + value.len());
    buf.push(RECORD_V1);
    buf.extend_from_slice(&(create as u64).to_be_bytes());
    buf.extend_from_slice(&(modified as u64).to_be_bytes());
    buf.extend_from_slice(&(version as u64).to_be_bytes());
    buf.extend_from_slice(value);
}

pub(super) fn decode_kv(key: &[u8], record: &[u8]) -> StoreResult<KeyValue> {
    let corrupt = || {
        StoreError::Backend(format!(
            "corrupt kv record for key {:?}",
            String::from_utf8_lossy(key)
        ))
    };
    if record.len() < 25 || record[0] != RECORD_V1 {
        return Err(corrupt());
    }
    Ok(KeyValue {
        key: key.to_vec(),
        value: record[25..].to_vec(),
        create_revision: be_u64(&record[1..9]) as Revision,
        mod_revision: be_u64(&record[9..17]) as Revision,
        version: be_u64(&record[17..25]) as i64,
    })
}

/// `hist` put: `[RECORD_V1][HIST_PUT][create_rev u64][version u64][value...]`
pub(super) fn encode_hist_put(buf: &mut Vec<u8>, create: Revision, version: i64, value: &[u8]) {
    buf.clear();
    buf.reserve(18 + value.len());
    buf.push(RECORD_V1);
    buf.push(HIST_PUT);
    buf.extend_from_slice(&(create as u64).to_be_bytes());
    buf.extend_from_slice(&(version as u64).to_be_bytes());
    buf.extend_from_slice(value);
}

/// `hist` tombstone: `[RECORD_V1][HIST_TOMBSTONE]`
pub(super) fn encode_hist_tombstone(buf: &mut Vec<u8>) {
    buf.clear();
    buf.push(RECORD_V1);
    buf.push(HIST_TOMBSTONE);
}

pub(super) enum HistRecord<'a> {
    Put {
        create_revision: Revision,
        version: i64,
        value: &'a [u8],
    },
    Tombstone,
}

pub(super) fn decode_hist<'a>(
    key: &[u8],
    rev: u64,
    record: &'a [u8],
) -> StoreResult<HistRecord<'a>> {
    match record {
        [RECORD_V1, HIST_TOMBSTONE] => Ok(HistRecord::Tombstone),
        [RECORD_V1, HIST_PUT, rest @ ..] if rest.len() >= 16 => Ok(HistRecord::Put {
            create_revision: be_u64(&rest[0..8]) as Revision,
            version: be_u64(&rest[8..16]) as i64,
            value: &rest[16..],
        }),
        _ => Err(StoreError::Backend(format!(
            "corrupt history record for key {:?} at revision {rev}",
            String::from_utf8_lossy(key)
        ))),
    }
}

/// `log`: `[RECORD_V1][LOG_PUT|LOG_DELETE][prev_mod_rev u64, 0 if none][key...]`
pub(super) fn encode_log(buf: &mut Vec<u8>, kind: EventKind, prev_mod: u64, key: &[u8]) {
    buf.clear();
    buf.reserve(10 + key.len());
    buf.push(RECORD_V1);
    buf.push(match kind {
        EventKind::Put => LOG_PUT,
        EventKind::Delete => LOG_DELETE,
    });
    buf.extend_from_slice(&prev_mod.to_be_bytes());
    buf.extend_from_slice(key);
}

pub(super) struct LogRecord<'a> {
    pub(super) kind: EventKind,
    pub(super) prev_mod_revision: u64,
    pub(super) key: &'a [u8],
}

pub(super) fn decode_log(rev: u64, record: &[u8]) -> StoreResult<LogRecord<'_>> {
    let kind = match record {
        [RECORD_V1, LOG_PUT, ..] => EventKind::Put,
        [RECORD_V1, LOG_DELETE, ..] => EventKind::Delete,
        _ => {
            return Err(StoreError::Backend(format!(
                "corrupt log record at revision {rev}"
            )));
        }
    };
    if record.len() < 10 {
        return Err(StoreError::Backend(format!(
            "corrupt log record at revision {rev}"
        )));
    }
    Ok(LogRecord {
        kind,
        prev_mod_revision: be_u64(&record[2..10]),
        key: &record[10..],
    })
}

pub(super) fn be_u64(bytes: &[u8]) -> u64 {
    let mut array = [0u8; 8];
    array.copy_from_slice(bytes);
    u64::from_be_bytes(array)
}

/// Wraps a backend error with what was being done.
pub(super) fn context<E: Display>(what: impl Display) -> impl FnOnce(E) -> StoreError {
    move |e| StoreError::Backend(format!("{what}: {e}"))
}

/// Creates a new database file under a temporary name and renames it into place, so a crash
/// during the very first start never leaves a half-initialised file that later opens reject
/// ("not a redb database"). An existing file is left alone.
pub(super) fn create_atomically(file: &Path, options: &RedbStoreOptions) -> StoreResult<()> {
    if file.exists() {
        return Ok(());
    }
    let mut staging = file.as_os_str().to_owned();
    staging.push(".init");
    let staging = std::path::PathBuf::from(staging);
    // A leftover from an interrupted first start is incomplete by definition.
    let _ = std::fs::remove_file(&staging);
    let db = Database::builder()
        .set_cache_size(options.cache_size)
        .create(&staging)
        .map_err(context(format!("create {}", staging.display())))?;
    drop(db);
    std::fs::File::open(&staging)
        .and_then(|f| f.sync_all())
        .map_err(context(format!("sync {}", staging.display())))?;
    std::fs::rename(&staging, file)
        .map_err(context(format!("rename {} into place", staging.display())))?;
    if let Some(dir) = file.parent() {
        sync_dir(dir).map_err(context(format!("sync directory {}", dir.display())))?;
    }
    Ok(())
}
