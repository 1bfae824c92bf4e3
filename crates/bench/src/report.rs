//! Figures, the machine context they were measured in, and their rendering: an aligned plain
//! text table for people and a JSON dump with every run for later analysis.
//!
//! Every figure pairs Finale's per-run values with a baseline measured in the same invocation
//! on the same machine. The table shows medians over runs and the ratio finale / baseline:
//! the machines are shared and noisy, so the ratio is the number to compare across machines,
//! not the absolute values.

use std::fmt::Write as _;
use std::process::Command;

use serde::Serialize;

use crate::stats::{median, percentile};

/// What a figure measures, which decides how it is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    PerSecond,
    Millis,
    /// Microseconds, for costs per object.
    Micros,
    Megabytes,
    /// Decimal kilobytes, for memory per object.
    Kilobytes,
    /// CPU time per wall-clock time: 1.0 is one core busy.
    Cores,
    /// A count of operations (API calls).
    Count,
}

/// The target a figure is held to.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    /// finale / baseline must be at least this (throughput).
    RatioAtLeast(f64),
    /// Finale's median must be at most this, in the figure's unit (time, memory).
    AtMost(f64),
    /// finale / baseline must be at most this (a time that must be a fraction of the
    /// baseline's: 0.02 is "50× faster").
    RatioAtMost(f64),
}

/// One row of the table.
#[derive(Clone, Debug, Serialize)]
pub struct Figure {
    pub scenario: String,
    pub name: String,
    pub unit: Unit,
    /// What the baseline column holds for this row.
    pub baseline_name: String,
    /// One value per run.
    pub finale: Vec<f64>,
    pub baseline: Vec<f64>,
    pub goal: Option<Goal>,
}

impl Figure {
    pub fn new(scenario: &str, name: &str, unit: Unit, baseline_name: &str) -> Figure {
        Figure {
            scenario: scenario.into(),
            name: name.into(),
            unit,
            baseline_name: baseline_name.into(),
            finale: Vec::new(),
            baseline: Vec::new(),
            goal: None,
        }
    }

    pub fn with_goal(mut self, goal: Goal) -> Figure {
        self.goal = Some(goal);
        self
    }

    pub fn finale_median(&self) -> Option<f64> {
        median(&self.finale)
    }

    pub fn baseline_median(&self) -> Option<f64> {
        median(&self.baseline)
    }

    /// Median finale / median baseline.
    pub fn ratio(&self) -> Option<f64> {
        let (finale, baseline) = (self.finale_median()?, self.baseline_median()?);
        (baseline > 0.0).then(|| finale / baseline)
    }

    /// Whether the goal is met; `None` without a goal or without the values to judge it.
    pub fn met(&self) -> Option<bool> {
        match self.goal? {
            Goal::RatioAtLeast(min) => Some(self.ratio()? >= min),
            Goal::AtMost(max) => Some(self.finale_median()? <= max),
            Goal::RatioAtMost(max) => Some(self.ratio()? <= max),
        }
    }
}

/// Where and how the figures were measured.
#[derive(Clone, Debug, Serialize)]
pub struct Context {
    pub date: String,
    pub command: String,
    pub nproc: usize,
    /// `/proc/loadavg` when the invocation started.
    pub loadavg: String,
    pub cpu: String,
    pub kernel: String,
    pub etcd_version: String,
    pub runs: usize,
    pub seconds: f64,
}

impl Context {
    pub fn capture(runs: usize, seconds: f64) -> Context {
        let args: Vec<String> = std::env::args().skip(1).map(|a| shell_quote(&a)).collect();
        Context {
            date: chrono::Utc::now()
                .format("%Y-%m-%d %H:%M:%S UTC")
                .to_string(),
            command: format!("cargo run --release -p finale-bench -- {}", args.join(" ")),
            nproc: std::thread::available_parallelism().map_or(0, usize::from),
            loadavg: read_trimmed("/proc/loadavg"),
            cpu: std::fs::read_to_string("/proc/cpuinfo")
                .ok()
                .and_then(|info| {
                    info.lines()
                        .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
                        .map(|(_, model)| model.trim().to_string())
                })
                .unwrap_or_else(|| "unknown".into()),
            kernel: read_trimmed("/proc/sys/kernel/osrelease"),
            etcd_version: etcd_version(),
            runs,
            seconds,
        }
    }

    pub fn render(&self) -> String {
        format!(
            "machine: {} CPUs ({}), kernel {}, load average at start {}\n\
             baseline: {}\n\
             date: {}; medians of {} runs, {} s measured per load run\n\
             reproduce: {}\n",
            self.nproc,
            self.cpu,
            self.kernel,
            self.loadavg,
            self.etcd_version,
            self.date,
            self.runs,
            self.seconds,
            self.command
        )
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map_or_else(|_| "unknown".into(), |s| s.trim().to_string())
}

fn etcd_version() -> String {
    let binary = std::env::var("ETCD").unwrap_or_else(|_| "etcd".into());
    Command::new(&binary)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| format!("{binary} not found"))
}

/// Quotes an argument for a POSIX shell when it needs it.
fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// Everything one invocation measured.
#[derive(Debug, Serialize)]
pub struct Report {
    pub context: Context,
    pub figures: Vec<Figure>,
    /// Per-run details (operation counts, errors, latency tails) by scenario.
    pub raw: Vec<serde_json::Value>,
    /// Context measured along the way (e.g. the disk's raw sync rate), printed under the table.
    pub notes: Vec<String>,
    /// Things a reader of the table must know: failed operations, failed scenarios.
    pub warnings: Vec<String>,
}

#[derive(Serialize)]
struct FigureJson<'a> {
    #[serde(flatten)]
    figure: &'a Figure,
    finale_median: Option<f64>,
    baseline_median: Option<f64>,
    /// Smallest and largest run, to show how noisy the machine was.
    finale_range: Option<(f64, f64)>,
    baseline_range: Option<(f64, f64)>,
    ratio: Option<f64>,
    met: Option<bool>,
}

impl Report {
    pub fn new(context: Context) -> Report {
        Report {
            context,
            figures: Vec::new(),
            raw: Vec::new(),
            notes: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// The JSON dump: the context, each figure with its runs and medians, and the raw runs.
    pub fn to_json(&self) -> serde_json::Result<String> {
        let figures: Vec<FigureJson<'_>> = self
            .figures
            .iter()
            .map(|figure| FigureJson {
                figure,
                finale_median: figure.finale_median(),
                baseline_median: figure.baseline_median(),
                finale_range: range(&figure.finale),
                baseline_range: range(&figure.baseline),
                ratio: figure.ratio(),
                met: figure.met(),
            })
            .collect();
        serde_json::to_string_pretty(&serde_json::json!({
            "context": self.context,
            "figures": figures,
            "raw": self.raw,
            "notes": self.notes,
            "warnings": self.warnings,
        }))
    }

    /// The aligned table, one row per figure.
    pub fn table(&self) -> String {
        let header = [
            "figure".to_string(),
            "finale".into(),
            "baseline".into(),
            "ratio".into(),
            "goal".into(),
            "met".into(),
        ];
        let mut rows = vec![header];
        for figure in &self.figures {
            rows.push([
                figure.name.clone(),
                format_value(figure.finale_median(), figure.unit),
                format_value(figure.baseline_median(), figure.unit),
                figure
                    .ratio()
                    .map_or_else(|| "-".into(), |r| format!("{r:.2}x")),
                format_goal(figure.goal, figure.unit),
                match figure.met() {
                    Some(true) => "yes".into(),
                    Some(false) => "NO".into(),
                    None => String::new(),
                },
            ]);
        }
        let mut widths = [0usize; 6];
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in &rows {
            let mut line = String::new();
            for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    let _ = write!(line, "{cell:<width$}   ");
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out.push_str(
            "ratio = finale median / baseline median (higher is better for /s, lower for ms, µs, MB and counts)\n",
        );
        // Each row's baseline differs (etcd, a client-side walk, an ordered script): say which.
        for figure in &self.figures {
            let _ = writeln!(
                out,
                "baseline of \"{}\": {}",
                figure.name, figure.baseline_name
            );
        }
        for figure in &self.figures {
            if figure.finale.is_empty() && figure.baseline.is_empty() {
                let _ = writeln!(out, "no runs completed for: {}", figure.name);
            }
        }
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        for warning in &self.warnings {
            let _ = writeln!(out, "warning: {warning}");
        }
        out
    }
}

fn range(values: &[f64]) -> Option<(f64, f64)> {
    Some((percentile(values, 0.0)?, percentile(values, 1.0)?))
}

fn format_value(value: Option<f64>, unit: Unit) -> String {
    match (value, unit) {
        (None, _) => "-".into(),
        (Some(v), Unit::PerSecond) => format!("{v:.0}"),
        (Some(v), Unit::Millis) if v < 10.0 => format!("{v:.2}"),
        (Some(v), Unit::Millis) => format!("{v:.1}"),
        (Some(v), Unit::Micros) => format!("{v:.1}"),
        (Some(v), Unit::Megabytes) => format!("{v:.1}"),
        (Some(v), Unit::Kilobytes) => format!("{v:.2}"),
        (Some(v), Unit::Cores) => format!("{v:.2}"),
        (Some(v), Unit::Count) => format!("{v:.0}"),
    }
}

fn format_goal(goal: Option<Goal>, unit: Unit) -> String {
    match goal {
        None => String::new(),
        // Two decimals where the goal has them (0.95), one otherwise (1.0).
        Some(Goal::RatioAtLeast(min)) if (min * 10.0).fract().abs() > 1e-9 => {
            format!(">={min:.2}x")
        }
        Some(Goal::RatioAtLeast(min)) => format!(">={min:.1}x"),
        Some(Goal::RatioAtMost(max)) => format!("<={max}x"),
        Some(Goal::AtMost(max)) => {
            let unit = match unit {
                Unit::PerSecond => "/s",
                Unit::Millis => " ms",
                Unit::Micros => " µs",
                Unit::Megabytes => " MB",
                Unit::Kilobytes => " KB",
                Unit::Cores => " cores",
                Unit::Count => "",
            };
            format!("<={max}{unit}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_and_goal_use_medians() {
        let mut figure = Figure::new("store", "writes/s", Unit::PerSecond, "etcd")
            .with_goal(Goal::RatioAtLeast(1.2));
        figure.finale = vec![100.0, 300.0, 120.0];
        figure.baseline = vec![100.0, 90.0, 110.0];
        assert_eq!(figure.ratio(), Some(1.2));
        assert_eq!(figure.met(), Some(true));

        let mut start =
            Figure::new("cold-start", "ms", Unit::Millis, "etcd").with_goal(Goal::AtMost(250.0));
        start.finale = vec![300.0];
        assert_eq!(start.met(), Some(false));
        assert_eq!(start.ratio(), None);
    }

    #[test]
    fn shell_quote_leaves_plain_words_alone() {
        assert_eq!(shell_quote("--runs"), "--runs");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
