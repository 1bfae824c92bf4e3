//! What `/proc` says about processes: whether a recorded process is still the same one (its
//! start time, in clock ticks since boot, tells a live process from a reused pid), and which
//! processes belong to a process group.

use std::path::Path;

/// The fields of `/proc/<pid>/stat` the runtime uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub pid: i32,
    /// `R`, `S`, `D`, `Z`, …
    pub state: char,
    pub pgrp: i32,
    /// Clock ticks after boot at which the process started (field 22).
    pub start_ticks: u64,
}

impl ProcStat {
    pub(crate) fn is_zombie(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// Parses one `/proc/<pid>/stat` line. The command name (field 2) is in parentheses and may
/// itself contain spaces and parentheses, so fields are counted after the *last* `)`.
pub(crate) fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let mut fields = text.get(close + 1..)?.split_whitespace();
    // Field 3 onwards: state, ppid, pgrp, session, tty_nr, tpgid, flags, minflt, cminflt,
    // majflt, cmajflt, utime, stime, cutime, cstime, priority, nice, num_threads,
    // itrealvalue, starttime.
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    let start_ticks = fields.nth(16)?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        pgrp,
        start_ticks,
    })
}

/// `/proc/<pid>/stat`, if the process exists.
pub(crate) fn stat(pid: i32) -> Option<ProcStat> {
    if pid <= 0 {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Whether `pid` is still the process that started at `start_ticks` and has not exited
/// (a zombie has exited).
pub(crate) fn is_alive(pid: i32, start_ticks: u64) -> bool {
    stat(pid).is_some_and(|stat| stat.start_ticks == start_ticks && !stat.is_zombie())
}

/// Whether `pid` is still the process that started at `start_ticks`, zombie or not: while it
/// exists, its pid and process group id cannot be reused.
pub(crate) fn exists(pid: i32, start_ticks: u64) -> bool {
    stat(pid).is_some_and(|stat| stat.start_ticks == start_ticks)
}

/// Every live process in process group `pgid` that started no earlier than `min_ticks`
/// (members of a group are started after its leader).
pub(crate) fn group_members(pgid: i32, min_ticks: u64) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .filter(|stat| stat.pgrp == pgid && stat.start_ticks >= min_ticks && !stat.is_zombie())
        .map(|stat| stat.pid)
        .collect()
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`): recorded processes from another boot
/// are gone whatever their pids say.
pub(crate) fn boot_id() -> Option<String> {
    read_trimmed(Path::new("/proc/sys/kernel/random/boot_id"))
}

pub(crate) fn read_trimmed(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_even_with_odd_command_names() {
        let line = "4242 (sh -c (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 \
                    987654 2355200 200 18446744073709551615 1 1 0 0 0 0 0 0 65538 0 0 0 17 1 0 \
                    0 0 0 0";
        assert_eq!(
            parse_stat(line),
            Some(ProcStat {
                pid: 4242,
                state: 'S',
                pgrp: 4242,
                start_ticks: 987_654,
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_wrong_start_time_is_not() {
        let me = std::process::id() as i32;
        let stat = stat(me).expect("own stat");
        assert!(is_alive(me, stat.start_ticks));
        assert!(!is_alive(me, stat.start_ticks + 1));
        assert!(group_members(stat.pgrp, 0).contains(&me));
        assert!(boot_id().is_some());
    }
}
