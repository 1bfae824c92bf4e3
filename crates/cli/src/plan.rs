//! `finale plan TYPE/NAME [--cascade=background|foreground|orphan]`: what deleting an object
//! would do, asked of the server (a `DeletionReview` in Plan mode), without deleting it.
//!
//! It shares `finale explain`'s client: kubeconfig as kubectl reads it, TYPE through
//! discovery, the same tree drawing and colour rules, and its fallback: on a cluster that
//! does not serve `deletion.finale.dev` (or with `--client-side`) the server's planner runs
//! over a copy of the cluster, marked "computed by the client". The output is the summary first
//! ("deletes 143 objects of 6 kinds; orphans 2; keeps 1 (another owner); 2 will hang"), then
//! the tree of what is deleted, orphaned and kept, then each hang with its reason.
//!
//! `--cascade` takes kubectl's values with kubectl's default (`background`): kubectl always
//! sends a policy, so the preview matches `kubectl delete` with the same flag. (A DELETE that
//! names no policy, as an API client may send, gets the kind's default: ask for it with
//! `--cascade=default`.)
//!
//! # Exit codes
//! 0 `WillComplete` (or the object does not exist); 2 `WillHang`; 1 an error.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use finale_apiserver::insight::api::{
    self as insight, DeletionReview, DeletionReviewSpec, DeletionReviewStatus, ReviewMode, Verdict,
};
use finale_apiserver::insight::plan_at;
use kube::api::Api;

use crate::cluster::{ClusterArgs, ColorChoice, Session};
use crate::explain::{OutputFormat, ask, render};
use crate::fallback::{ClusterCopy, encode_answer};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Cascade {
    Background,
    Foreground,
    Orphan,
    /// No policy: the kind's default, as for an API DELETE that names none.
    Default,
}

impl Cascade {
    fn policy(self) -> Option<String> {
        match self {
            Cascade::Background => Some("Background".into()),
            Cascade::Foreground => Some("Foreground".into()),
            Cascade::Orphan => Some("Orphan".into()),
            Cascade::Default => None,
        }
    }
}

#[derive(clap::Args)]
pub struct PlanArgs {
    /// What deleting would be previewed: `TYPE/NAME`, or `TYPE NAME`.
    #[arg(value_name = "TYPE[/NAME]")]
    target: String,
    /// The object's name, when not given as `TYPE/NAME`.
    #[arg(value_name = "NAME")]
    name: Option<String>,
    /// As `kubectl delete --cascade`: `background` (the default), `foreground`, `orphan`;
    /// or `default` for the kind's own default policy.
    #[arg(long, value_name = "MODE", default_value = "background")]
    cascade: Cascade,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Print the review's `status` as `json` or `yaml` instead of the tree.
    #[arg(short = 'o', long, value_name = "FORMAT")]
    output: Option<OutputFormat>,
    /// Colour the text output: `auto`, `always`, `never`.
    #[arg(long, value_name = "WHEN", default_value = "auto")]
    color: ColorChoice,
    /// The most tree nodes to show (counts stay exact).
    #[arg(long, value_name = "N", default_value_t = insight::DEFAULT_MAX_NODES)]
    max_nodes: u32,
    /// Compute the answer in this client (list the cluster, then plan over the copy) even
    /// when the server could answer: to cross-check it, or to measure the difference.
    #[arg(long)]
    client_side: bool,
}

fn exit_code(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::WillComplete | Verdict::Gone => 0,
        Verdict::WillHang => 2,
        _ => 1,
    }
}

pub async fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let mut session = Session::connect(&args.cluster).await?;
    let target = session.target(&args.target, args.name.as_deref()).await?;
    let review = DeletionReview::new(DeletionReviewSpec {
        target: target.target_ref(),
        mode: ReviewMode::Plan,
        max_nodes: Some(args.max_nodes),
        propagation_policy: args.cascade.policy(),
        ..DeletionReviewSpec::default()
    });
    let (status, copy) = if session.serves_insight().await? && !args.client_side {
        let reviews = Api::<DeletionReview>::all(session.clients.requests.clone());
        (ask(&reviews, &review).await?, None)
    } else {
        let copy = ClusterCopy::load(&mut session, "finale plan").await?;
        let target_type = copy.resource(&target.resolved)?;
        let status = plan_at(
            &copy.catalog,
            &copy.snapshot,
            &copy.gc,
            target_type,
            &review.spec,
        )
        .await
        .map_err(|error| anyhow::anyhow!("cannot plan: {}", error.message))?
        .status;
        (status, Some(copy))
    };
    let text = match args.output {
        Some(format) => encode_answer(&status, copy.is_some(), format == OutputFormat::Yaml)?,
        None => {
            if let Some(copy) = &copy {
                copy.announce(&session, "finale plan");
            }
            draw(&status, args.color.enabled())
        }
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .context("write to stdout")?;
    if !matches!(
        status.verdict,
        Verdict::WillComplete | Verdict::WillHang | Verdict::Gone
    ) {
        eprintln!(
            "finale plan: the server answered a verdict this version does not know; upgrade finale"
        );
    }
    Ok(ExitCode::from(exit_code(status.verdict)))
}

/// The summary and tree (as `explain` draws them), then the hangs with their reasons and the
/// external resources the controllers clean up.
fn draw(status: &DeletionReviewStatus, colour: bool) -> String {
    let mut out = render::render(status, chrono::Utc::now(), colour);
    let Some(plan) = &status.plan else {
        return out;
    };
    if !plan.hang_causes.is_empty() {
        out.push_str("\nWill hang:\n");
        for cause in &plan.hang_causes {
            let about = cause
                .object
                .as_ref()
                .map(|o| o.display())
                .unwrap_or_default();
            out.push_str(&format!("  {about}: {}\n", cause.message));
        }
    }
    if !plan.external_resources.is_empty() {
        out.push_str("\nExternal resources cleaned up first:\n");
        for resource in &plan.external_resources {
            let waits = if resource.will_hang {
                " (its controller is not running: this waits)"
            } else {
                ""
            };
            out.push_str(&format!(
                "  {}: {} by {} ({}){waits}\n",
                resource.object.display(),
                resource.cleans_up.join("; "),
                resource.controller,
                resource.finalizer
            ));
            if let Some(count) = resource.inventory_count {
                out.push_str(&format!("    it lists {count}:\n"));
                for item in &resource.inventory {
                    out.push_str(&format!("      {item}\n"));
                }
                let more = (count as usize).saturating_sub(resource.inventory.len());
                if more > 0 {
                    out.push_str(&format!("      … and {more} more\n"));
                }
            }
        }
    }
    out
}
