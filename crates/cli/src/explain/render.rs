//! Drawing a `DeletionReview` answer for a person: the verdict on the first line, then the
//! cause tree (`├─ └─ │`), each node as `Kind/name  message  (since 3m ago)` with its evidence
//! indented beneath it (a finalizer's provenance as "added by USER 3h ago (USER-AGENT)"), then
//! what to do next.
//!
//! # Guarantees
//! - Without colour the text is plain: no escape codes at all (safe to pipe and to compare).
//! - Siblings are drawn stuck first (the order the server sends, kept stable), so the branch
//!   holding the root cause comes first.

use std::fmt::Write as _;

use anstyle::{AnsiColor, Style};
use chrono::{DateTime, Utc};
use finale_apiserver::insight::api::{
    CauseNode, CauseState, DeletionReviewStatus, StuckObject, Verdict,
};

/// The verdict's name, as the API spells it.
pub fn verdict_name(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Gone => "Gone",
        Verdict::NotDeleting => "NotDeleting",
        Verdict::Progressing => "Progressing",
        Verdict::Stuck => "Stuck",
        Verdict::WillComplete => "WillComplete",
        Verdict::WillHang => "WillHang",
        Verdict::Other => "Unknown",
    }
}

fn verdict_style(verdict: Verdict) -> Style {
    let colour = match verdict {
        Verdict::Gone | Verdict::NotDeleting | Verdict::WillComplete => AnsiColor::Green,
        Verdict::Progressing => AnsiColor::Yellow,
        Verdict::Stuck | Verdict::WillHang | Verdict::Other => AnsiColor::Red,
    };
    colour.on_default().bold()
}

fn state_style(state: CauseState) -> Style {
    match state {
        CauseState::Progressing => AnsiColor::Yellow.on_default(),
        CauseState::Stuck | CauseState::Other => AnsiColor::Red.on_default(),
    }
}

/// `text` in `style` when colour is on.
fn paint(text: &str, style: Style, colour: bool) -> String {
    if colour {
        format!("{style}{text}{style:#}")
    } else {
        text.to_string()
    }
}

/// The whole answer as text, `now` being the time ages are counted to.
pub fn render(status: &DeletionReviewStatus, now: DateTime<Utc>, colour: bool) -> String {
    let mut out = String::new();
    let verdict = paint(
        verdict_name(status.verdict),
        verdict_style(status.verdict),
        colour,
    );
    let _ = writeln!(out, "{verdict}: {}", status.summary);
    if !status.stuck.is_empty() {
        out.push('\n');
        out.push_str(&stuck_table(&status.stuck, now, colour));
    }
    if status.causes.is_empty() {
        return out;
    }
    out.push('\n');
    let mut roots: Vec<&CauseNode> = status.causes.iter().collect();
    roots.sort_by_key(|node| std::cmp::Reverse(node.state));
    for root in roots {
        draw(&mut out, root, "", "", now, colour);
    }
    if let Some(action) = next_step(status) {
        let _ = write!(out, "\nNext: {action}\n");
    }
    out
}

/// A scoped review's stuck objects, one line each, in aligned columns as `kubectl get`
/// prints them: NAMESPACE, OBJECT (`Kind/name`), VERDICT, DELETING (since when), ROOT CAUSE.
fn stuck_table(stuck: &[StuckObject], now: DateTime<Utc>, colour: bool) -> String {
    let header = ["NAMESPACE", "OBJECT", "VERDICT", "DELETING", "ROOT CAUSE"];
    let rows: Vec<[String; 5]> = stuck
        .iter()
        .map(|item| {
            let deleting = item
                .since
                .as_deref()
                .map(|since| age(since, now).trim_end_matches(" ago").to_string())
                .unwrap_or_default();
            [
                item.object.namespace.to_string(),
                format!("{}/{}", item.object.kind, item.object.name),
                verdict_name(item.verdict).to_string(),
                deleting,
                item.root_cause.clone(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; 5], style: Option<Style>| {
        let mut text = String::new();
        for (index, cell) in cells.iter().enumerate() {
            if index + 1 == cells.len() {
                text.push_str(cell);
            } else if index == 2
                && let Some(style) = style
            {
                let padding = " ".repeat(widths[index] - cell.chars().count() + 3);
                text.push_str(&paint(cell, style, colour));
                text.push_str(&padding);
            } else {
                text.push_str(&format!("{cell:<width$}   ", width = widths[index]));
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(header, None);
    for (row, item) in rows.iter().zip(stuck) {
        line(
            [&row[0], &row[1], &row[2], &row[3], &row[4]],
            Some(verdict_style(item.verdict)),
        );
    }
    out
}

/// The evidence of a finalizer's provenance, drawn as one "added by USER 3h ago" line.
const PROVENANCE_KEYS: [&str; 3] = ["addedBy", "addedAt", "addedByUserAgent"];

/// Draws `node` after `first` (its own branch) and its evidence and children after `rest`
/// (the continuation of its parent's branches).
fn draw(
    out: &mut String,
    node: &CauseNode,
    first: &str,
    rest: &str,
    now: DateTime<Utc>,
    colour: bool,
) {
    let label = match &node.object {
        Some(object) => format!("{}/{}", object.kind, object.name),
        None => format!("{:?}", node.type_),
    };
    let label = paint(&label, state_style(node.state), colour);
    let since = node
        .since
        .as_deref()
        .map(|since| format!("  (since {})", age(since, now)))
        .unwrap_or_default();
    let _ = writeln!(out, "{first}{label}  {}{since}", node.message);
    let mut children: Vec<&CauseNode> = node.children.iter().collect();
    children.sort_by_key(|child| std::cmp::Reverse(child.state));
    let evidence_indent = if children.is_empty() { "   " } else { "│  " };
    if let Some(user) = node.evidence.get("addedBy") {
        let when = node
            .evidence
            .get("addedAt")
            .map(|at| format!(" {}", age(at, now)))
            .unwrap_or_default();
        let agent = node
            .evidence
            .get("addedByUserAgent")
            .map(|agent| format!(" ({agent})"))
            .unwrap_or_default();
        let _ = writeln!(out, "{rest}{evidence_indent}  added by {user}{when}{agent}");
    }
    for (key, value) in &node.evidence {
        if PROVENANCE_KEYS.contains(&key.as_str()) {
            continue;
        }
        let _ = writeln!(out, "{rest}{evidence_indent}  {key}: {value}");
    }
    for (index, child) in children.iter().enumerate() {
        let last = index + 1 == children.len();
        let (branch, below) = if last {
            ("└─ ", "   ")
        } else {
            ("├─ ", "│  ")
        };
        draw(
            out,
            child,
            &format!("{rest}{branch}"),
            &format!("{rest}{below}"),
            now,
            colour,
        );
    }
}

/// `3m ago`, kubectl's short age form; the raw value when it is not RFC 3339.
pub(crate) fn age(since: &str, now: DateTime<Utc>) -> String {
    let Ok(since) = DateTime::parse_from_rfc3339(since) else {
        return since.to_string();
    };
    let seconds = (now - since.with_timezone(&Utc)).num_seconds();
    if seconds < 0 {
        return "just now".to_string();
    }
    let text = match seconds {
        0..120 => format!("{seconds}s"),
        120..7_200 => format!("{}m", seconds / 60),
        7_200..172_800 => format!("{}h", seconds / 3_600),
        _ => format!("{}d", seconds / 86_400),
    };
    format!("{text} ago")
}

/// What to do, from the root cause (the deepest node on the first, most stuck branch): the
/// server's messages state the cause in their first sentence and what to do in the rest, so
/// the rest when there is one, else the whole message. Only for Stuck and Progressing answers.
fn next_step(status: &DeletionReviewStatus) -> Option<String> {
    if !matches!(status.verdict, Verdict::Stuck | Verdict::Progressing) {
        return None;
    }
    let mut node = status.causes.iter().max_by_key(|node| node.state)?;
    while let Some(child) = node.children.iter().max_by_key(|child| child.state) {
        node = child;
    }
    let who = node
        .object
        .as_ref()
        .map(|object| format!("{}: ", object.display()))
        .unwrap_or_default();
    let advice = node
        .message
        .split_once(". ")
        .map_or(node.message.as_str(), |(_, rest)| rest);
    Some(match status.verdict {
        Verdict::Progressing => {
            format!("nothing to do; {who}{advice} (`--watch` follows it until it is gone)")
        }
        _ => format!("{who}{advice}"),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use finale_apiserver::insight::api::{CauseType, ObjectRef};

    use super::*;

    fn node(kind: &str, name: &str, state: CauseState, message: &str) -> CauseNode {
        CauseNode {
            object: Some(ObjectRef {
                api_version: "v1".into(),
                kind: kind.into(),
                namespace: "default".into(),
                name: name.into(),
                uid: String::new(),
            }),
            type_: CauseType::Finalizer,
            state,
            message: message.into(),
            since: Some("2026-11-24T08:00:00Z".into()),
            evidence: BTreeMap::new(),
            children: Vec::new(),
        }
    }

    #[test]
    fn tree_is_drawn_stuck_branch_first_with_evidence_and_ages() {
        let mut stuck = node("ConfigMap", "b", CauseState::Stuck, "held by x");
        stuck
            .evidence
            .insert("finalizer".into(), "example.com/x".into());
        let progressing = node("ConfigMap", "a", CauseState::Progressing, "being cleaned");
        let mut root = node("Namespace", "shop", CauseState::Stuck, "2 objects remain");
        root.object.as_mut().expect("object").namespace.clear();
        root.evidence.insert("remaining".into(), "2".into());
        root.children = vec![progressing, stuck];
        let status = DeletionReviewStatus {
            verdict: Verdict::Stuck,
            resource_version: "7".into(),
            summary: "Namespace shop is stuck".into(),
            causes: vec![root],
            ..DeletionReviewStatus::default()
        };
        let now = DateTime::parse_from_rfc3339("2026-11-24T08:03:10Z")
            .expect("time")
            .with_timezone(&Utc);
        let text = render(&status, now, false);
        assert_eq!(
            text,
            "Stuck: Namespace shop is stuck\n\
             \n\
             Namespace/shop  2 objects remain  (since 3m ago)\n\
             │    remaining: 2\n\
             ├─ ConfigMap/b  held by x  (since 3m ago)\n\
             │       finalizer: example.com/x\n\
             └─ ConfigMap/a  being cleaned  (since 3m ago)\n\
             \n\
             Next: ConfigMap default/b: held by x\n"
        );
        assert!(!text.contains('\u{1b}'), "no escape codes without colour");
        let coloured = render(&status, now, true);
        assert!(coloured.starts_with("\u{1b}["), "{coloured:?}");
    }

    #[test]
    fn a_finalizers_provenance_is_one_line() {
        let mut held = node("ConfigMap", "held", CauseState::Stuck, "held by x");
        for (key, value) in [
            ("finalizer", "example.com/x"),
            ("addedBy", "system:serviceaccount:db:database-operator"),
            ("addedAt", "2026-11-24T05:00:00Z"),
            ("addedByUserAgent", "kubectl/v1.33.0"),
        ] {
            held.evidence.insert(key.into(), value.into());
        }
        let status = DeletionReviewStatus {
            verdict: Verdict::Stuck,
            resource_version: "7".into(),
            summary: "ConfigMap default/held is stuck".into(),
            causes: vec![held],
            ..DeletionReviewStatus::default()
        };
        let now = DateTime::parse_from_rfc3339("2026-11-24T08:03:10Z")
            .expect("time")
            .with_timezone(&Utc);
        assert_eq!(
            render(&status, now, false),
            "Stuck: ConfigMap default/held is stuck\n\
             \n\
             ConfigMap/held  held by x  (since 3m ago)\n     \
             added by system:serviceaccount:db:database-operator 3h ago (kubectl/v1.33.0)\n     \
             finalizer: example.com/x\n\
             \n\
             Next: ConfigMap default/held: held by x\n"
        );
    }

    #[test]
    fn ages_use_kubectls_short_units() {
        let now = DateTime::parse_from_rfc3339("2026-11-24T10:00:00Z")
            .expect("time")
            .with_timezone(&Utc);
        assert_eq!(age("2026-11-24T09:59:15Z", now), "45s ago");
        assert_eq!(age("2026-11-24T09:57:00Z", now), "3m ago");
        assert_eq!(age("2026-11-24T06:00:00Z", now), "4h ago");
        assert_eq!(age("2026-11-20T10:00:00Z", now), "4d ago");
        assert_eq!(age("not a time", now), "not a time");
    }
}
