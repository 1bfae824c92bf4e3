//! Facts about the host the Node object reports: its name, CPUs, memory, disk, ids and
//! versions, read from `/proc`, `/etc` and the standard library, as cAdvisor would.

use std::path::Path;

use crate::runtime::procfs::read_trimmed;

/// What the Node's `capacity` and `nodeInfo` say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Machine {
    pub hostname: String,
    pub cpus: usize,
    /// `MemTotal` of `/proc/meminfo`, in bytes.
    pub memory_bytes: Option<u64>,
    /// Size of the filesystem holding the root directory, in bytes.
    pub ephemeral_storage_bytes: Option<u64>,
    pub machine_id: String,
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
    /// Go's name for the architecture (`amd64`, `arm64`, …), as `kubernetes.io/arch` uses.
    pub architecture: String,
}

impl Machine {
    pub(crate) fn discover(root_dir: &Path) -> Machine {
        Machine {
            hostname: hostname(),
            cpus: std::thread::available_parallelism()
                .map(std::num::NonZeroUsize::get)
                .unwrap_or(1),
            memory_bytes: std::fs::read_to_string("/proc/meminfo")
                .ok()
                .and_then(|text| mem_total(&text)),
            ephemeral_storage_bytes: filesystem_size(root_dir),
            machine_id: read_trimmed(Path::new("/etc/machine-id"))
                .or_else(|| read_trimmed(Path::new("/var/lib/dbus/machine-id")))
                .unwrap_or_default(),
            boot_id: crate::runtime::procfs::boot_id().unwrap_or_default(),
            kernel_version: read_trimmed(Path::new("/proc/sys/kernel/osrelease"))
                .unwrap_or_default(),
            os_image: std::fs::read_to_string("/etc/os-release")
                .ok()
                .and_then(|text| pretty_name(&text))
                .unwrap_or_else(|| "Linux".to_string()),
            architecture: go_arch(std::env::consts::ARCH).to_string(),
        }
    }
}

/// The host name, lower-cased as the kubelet does for its default node name.
pub fn hostname() -> String {
    read_trimmed(Path::new("/proc/sys/kernel/hostname"))
        .unwrap_or_else(|| "localhost".to_string())
        .to_lowercase()
}

/// `MemTotal:  16323520 kB` → bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|line| line.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"` → the name.
fn pretty_name(os_release: &str) -> Option<String> {
    let line = os_release
        .lines()
        .find(|line| line.starts_with("PRETTY_NAME="))?;
    let value = line.trim_start_matches("PRETTY_NAME=").trim();
    let value = value.trim_matches('"').trim_matches('\'');
    (!value.is_empty()).then(|| value.to_string())
}

fn filesystem_size(path: &Path) -> Option<u64> {
    let stat = nix::sys::statvfs::statvfs(path).ok()?;
    #[allow(clippy::useless_conversion)] // the field types differ between targets
    let blocks = u64::from(stat.blocks());
    #[allow(clippy::useless_conversion)]
    let fragment = u64::from(stat.fragment_size());
    blocks.checked_mul(fragment)
}

/// Rust's architecture names → Go's (`GOARCH`).
fn go_arch(rust: &str) -> &str {
    match rust {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    }
}

/// A byte count as a Kubernetes quantity in KiB (`16323520Ki`), as the kubelet reports
/// memory.
pub(crate) fn kibibytes(bytes: u64) -> String {
    format!("{}Ki", bytes / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_facts_parse() {
        assert_eq!(
            mem_total("MemTotal:       16323520 kB\nMemFree: 1 kB\n"),
            Some(16_323_520 * 1024)
        );
        assert_eq!(mem_total("nothing"), None);
        assert_eq!(
            pretty_name("NAME=x\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n").as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(kibibytes(16_323_520 * 1024), "16323520Ki");
    }

    #[test]
    fn this_machine_is_described() {
        let dir = tempfile::tempdir().expect("tempdir");
        let machine = Machine::discover(dir.path());
        assert!(machine.cpus >= 1);
        assert!(machine.memory_bytes.is_some_and(|bytes| bytes > 0));
        assert!(!machine.hostname.is_empty());
        assert_eq!(machine.hostname, machine.hostname.to_lowercase());
        assert!(!machine.kernel_version.is_empty());
    }
}
