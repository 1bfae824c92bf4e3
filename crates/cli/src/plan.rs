//! `finale plan TYPE/NAME [--cascade=background|foreground|orphan]`: what deleting an object
//! would do, asked of the server (a `DeletionReview` in Plan mode), without deleting it.
//!
//! It shares `finale explain`'s client: kubeconfig as kubectl reads it, TYPE through
//! discovery, the same tree drawing and colour rules. The output is the summary first
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
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use finale_apiserver::insight::api::{
    self as insight, DeletionReview, DeletionReviewSpec, DeletionReviewStatus, ReviewMode,
    TargetRef, Verdict,
};
use finale_operator::client::{Clients, Environment, load_config};
use kube::api::Api;

use crate::explain::{ColorChoice, OutputFormat, ask, discover, render, split_target};

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
    /// The kubeconfig to use (else `$KUBECONFIG`, then `~/.kube/config`).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (else the current one).
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// The object's namespace (else the context's, else `default`).
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// Print the review's `status` as `json` or `yaml` instead of the tree.
    #[arg(short = 'o', long, value_name = "FORMAT")]
    output: Option<OutputFormat>,
    /// Colour the text output: `auto`, `always`, `never`.
    #[arg(long, value_name = "WHEN", default_value = "auto")]
    color: ColorChoice,
    /// The most tree nodes to show (counts stay exact).
    #[arg(long, value_name = "N", default_value_t = insight::DEFAULT_MAX_NODES)]
    max_nodes: u32,
}

fn exit_code(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::WillComplete | Verdict::Gone => 0,
        Verdict::WillHang => 2,
        _ => 1,
    }
}

pub async fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (type_, name) = split_target(&args.target, args.name.as_deref())?;
    let (config, source) = load_config(
        args.kubeconfig.as_deref(),
        args.context.as_deref(),
        &Environment::of_process(),
    )
    .await?;
    let default_namespace = config.default_namespace.clone();
    let cluster = config.cluster_url.to_string();
    let clients = Clients::new(config)?;
    let served = discover(&clients.requests)
        .await
        .with_context(|| format!("cannot read the API discovery of {cluster} (from {source})"))?;
    let resolved = served.resolve(type_).with_context(|| {
        format!("the server doesn't have a resource type \"{type_}\" (no resource, kind or short name of that name is served)")
    })?;
    if !served.serves_group(insight::GROUP) {
        bail!(
            "the server at {cluster} does not serve {} (DeletionReview), so it cannot plan deletions; \
             a client-side fallback is not built yet. Run `finale server` or a newer version of it",
            insight::API_VERSION
        );
    }
    let namespace = if resolved.namespaced {
        args.namespace.clone().unwrap_or(default_namespace)
    } else {
        String::new()
    };
    let review = DeletionReview::new(DeletionReviewSpec {
        target: TargetRef {
            api_version: resolved.api_version(),
            kind: resolved.kind.clone(),
            namespace,
            name: name.to_string(),
            ..TargetRef::default()
        },
        mode: ReviewMode::Plan,
        max_nodes: Some(args.max_nodes),
        propagation_policy: args.cascade.policy(),
    });
    let reviews = Api::<DeletionReview>::all(clients.requests.clone());
    let status = ask(&reviews, &review).await?;
    let text = match args.output {
        Some(OutputFormat::Json) => {
            let mut json = serde_json::to_string_pretty(&status).context("encode JSON")?;
            json.push('\n');
            json
        }
        Some(OutputFormat::Yaml) => serde_saphyr::to_string(&status).context("encode YAML")?,
        None => draw(&status, args.color.enabled()),
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
        }
    }
    out
}
