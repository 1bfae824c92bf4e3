//! `finale explain TYPE/NAME`: why an object is not gone, asked of the server.
//!
//! A thin client of `deletion.finale.dev/v1alpha1`: it finds the cluster as kubectl does
//! ([`finale_operator::client`]), resolves TYPE through discovery ([`resolve`]), creates one
//! `DeletionReview` and prints the answer ([`render`]), or its `status` as JSON or YAML.
//!
//! # Exit codes
//! 0 `Gone` or `NotDeleting`; 2 `Progressing`; 3 `Stuck`; 1 an error (nothing usable was
//! answered; the message says why on stderr).
//!
//! # `--stuck`
//! `finale explain --stuck [-n NS | -A]` creates one `DeletionReview` with a `scope` instead
//! of a target: the server lists every stuck object from its index of objects being deleted,
//! and each is printed on one line with its root cause. Exit 3 when any is stuck, else 0.
//!
//! # Watching
//! `--watch` asks again every 2 s and whenever the target changes (a watch on it), redrawing
//! the answer, until the verdict is `Gone`. `--timeout` bounds that; it has no default, since
//! waiting for a teardown is the point, and Ctrl-C ends it. When the timeout runs out the exit
//! code is the last verdict's.
//!
//! # Caveats
//! Only the server's answer is shown: against a server that does not serve
//! `deletion.finale.dev` the command fails (a client-side fallback is not built yet).

mod render;
mod resolve;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use finale_apiserver::insight::api::{
    self as insight, DeletionReview, DeletionReviewSpec, DeletionReviewStatus, TargetRef, Verdict,
};
use finale_operator::client::{Clients, Environment, load_config};
use futures::StreamExt;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;

use resolve::{Resolved, Served};

/// How often `--watch` asks again when nothing changed.
const WATCH_INTERVAL: Duration = Duration::from_secs(2);

#[derive(clap::Args)]
pub struct ExplainArgs {
    /// What to explain: `TYPE/NAME`, or `TYPE NAME`. TYPE is any name kubectl accepts: plural,
    /// singular, short name or kind, optionally `.group` or `.version.group`.
    #[arg(value_name = "TYPE[/NAME]", required_unless_present = "stuck")]
    target: Option<String>,
    /// The object's name, when not given as `TYPE/NAME`.
    #[arg(value_name = "NAME")]
    name: Option<String>,
    /// The kubeconfig to use (else `$KUBECONFIG`, then `~/.kube/config`).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (else the current one).
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// The object's namespace (else the context's, else `default`); ignored for cluster-scoped
    /// kinds.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// List every stuck object (in the namespace, or with `-A` in the whole cluster), one line
    /// each with its root cause, from the server's index. Exit 3 when any is stuck, else 0.
    #[arg(long, conflicts_with_all = ["target", "name", "watch"])]
    stuck: bool,
    /// With `--stuck`: every namespace, and cluster-scoped objects.
    #[arg(short = 'A', long, requires = "stuck", conflicts_with = "namespace")]
    all_namespaces: bool,
    /// Print the review's `status` as `json` or `yaml` instead of the tree.
    #[arg(short = 'o', long, value_name = "FORMAT")]
    output: Option<OutputFormat>,
    /// Colour the text output: `auto` (on a terminal, unless `NO_COLOR` is set), `always`,
    /// `never`.
    #[arg(long, value_name = "WHEN", default_value = "auto")]
    color: ColorChoice,
    /// Ask again every 2 s and whenever the object changes, until it is gone.
    #[arg(short = 'w', long)]
    watch: bool,
    /// With `--watch`: give up after this long (e.g. `30s`, `5m`); the exit code is then the
    /// last verdict's. No default: it waits until the object is gone or Ctrl-C.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, requires = "watch")]
    timeout: Option<Duration>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum OutputFormat {
    Json,
    Yaml,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ColorChoice {
    Auto,
    Always,
    Never,
}

/// The exit code of a verdict (see the module documentation).
fn exit_code(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Gone | Verdict::NotDeleting => 0,
        Verdict::Progressing => 2,
        Verdict::Stuck => 3,
        Verdict::Other => 1,
    }
}

/// Runs the command; errors are returned for `main` to print (exit 1).
pub async fn run(args: ExplainArgs) -> anyhow::Result<ExitCode> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    if args.stuck {
        return run_stuck(args).await;
    }
    let (type_, name) = split_target(
        args.target.as_deref().unwrap_or_default(),
        args.name.as_deref(),
    )?;
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
            "the server at {cluster} does not serve {} (DeletionReview), so it cannot explain deletions; \
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
            namespace: namespace.clone(),
            name: name.to_string(),
            ..TargetRef::default()
        },
        ..DeletionReviewSpec::default()
    });
    let colour = match args.color {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        }
    };
    let printer = Printer {
        format: args.output,
        colour,
        clear_screen: args.watch && std::io::stdout().is_terminal(),
    };
    let reviews = Api::<DeletionReview>::all(clients.requests.clone());
    if !args.watch {
        let status = ask(&reviews, &review).await?;
        printer.print(&status, None)?;
        if status.verdict == Verdict::Other {
            eprintln!(
                "finale explain: the server answered a verdict this version does not know; upgrade finale"
            );
        }
        return Ok(ExitCode::from(exit_code(status.verdict)));
    }
    let target_changes = watch_target(&clients, &resolved, &namespace, name);
    let deadline = args
        .timeout
        .map(|timeout| tokio::time::Instant::now() + timeout);
    watch(&reviews, &review, &printer, target_changes, deadline).await
}

/// `--stuck`: one scoped `DeletionReview`, its stuck objects printed one per line.
async fn run_stuck(args: ExplainArgs) -> anyhow::Result<ExitCode> {
    let (config, source) = load_config(
        args.kubeconfig.as_deref(),
        args.context.as_deref(),
        &Environment::of_process(),
    )
    .await?;
    let namespace = if args.all_namespaces {
        String::new()
    } else {
        args.namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone())
    };
    let cluster = config.cluster_url.to_string();
    let clients = Clients::new(config)?;
    let served = discover(&clients.requests)
        .await
        .with_context(|| format!("cannot read the API discovery of {cluster} (from {source})"))?;
    if !served.serves_group(insight::GROUP) {
        bail!(
            "the server at {cluster} does not serve {} (DeletionReview), so it cannot list stuck objects; \
             run `finale server` or a newer version of it",
            insight::API_VERSION
        );
    }
    let review = DeletionReview::new(DeletionReviewSpec {
        scope: Some(insight::ReviewScope { namespace }),
        ..DeletionReviewSpec::default()
    });
    let printer = Printer {
        format: args.output,
        colour: colour_on(args.color),
        clear_screen: false,
    };
    let reviews = Api::<DeletionReview>::all(clients.requests.clone());
    let status = ask(&reviews, &review).await?;
    printer.print(&status, None)?;
    Ok(ExitCode::from(if status.verdict == Verdict::Stuck {
        3
    } else {
        0
    }))
}

fn colour_on(choice: ColorChoice) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        }
    }
}

/// `TYPE/NAME` or `TYPE NAME`, never both or neither.
fn split_target<'a>(target: &'a str, name: Option<&'a str>) -> anyhow::Result<(&'a str, &'a str)> {
    let (type_, name) = match (target.split_once('/'), name) {
        (Some((type_, name)), None) => (type_, name),
        (None, Some(name)) => (target, name),
        (Some(_), Some(extra)) => bail!(
            "there is no need to specify a resource type as a separate argument when passing arguments in resource/name form (got \"{target}\" and \"{extra}\")"
        ),
        (None, None) => bail!(
            "name the object to explain: TYPE/NAME or TYPE NAME (e.g. `finale explain configmap/app`)"
        ),
    };
    if type_.is_empty() || name.is_empty() || name.contains('/') {
        bail!("\"{target}\" is not TYPE/NAME (e.g. `configmap/app`)");
    }
    Ok((type_, name))
}

/// The core and named groups, from aggregated discovery.
async fn discover(client: &kube::Client) -> anyhow::Result<Served> {
    let core = client
        .list_core_api_versions_aggregated()
        .await
        .context("GET /api")?;
    let named = client
        .list_api_groups_aggregated()
        .await
        .context("GET /apis")?;
    Ok(Served::new(core, named))
}

/// Creates the review and returns its answer.
async fn ask(
    reviews: &Api<DeletionReview>,
    review: &DeletionReview,
) -> anyhow::Result<DeletionReviewStatus> {
    let answer = reviews
        .create(&PostParams::default(), review)
        .await
        .map_err(|error| match error {
            kube::Error::Api(status) => anyhow::anyhow!(
                "the server refused the DeletionReview: {} ({} {})",
                status.message,
                status.code,
                status.reason
            ),
            other => anyhow::Error::new(other).context("cannot create the DeletionReview"),
        })?;
    answer
        .status
        .context("the server answered the DeletionReview without a status")
}

/// Re-asks on every change of the target and every [`WATCH_INTERVAL`] until `Gone` or the
/// deadline.
async fn watch(
    reviews: &Api<DeletionReview>,
    review: &DeletionReview,
    printer: &Printer,
    mut target_changes: futures::stream::BoxStream<'static, ()>,
    deadline: Option<tokio::time::Instant>,
) -> anyhow::Result<ExitCode> {
    let mut last_printed: Option<String> = None;
    loop {
        let status = ask(reviews, review).await?;
        last_printed = printer.print(&status, last_printed.as_deref())?;
        if status.verdict == Verdict::Gone {
            return Ok(ExitCode::SUCCESS);
        }
        let until_deadline = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(WATCH_INTERVAL) => {}
            Some(()) = target_changes.next() => {}
            _ = until_deadline => {
                eprintln!("finale explain: --timeout ran out before the object was gone");
                return Ok(ExitCode::from(exit_code(status.verdict)));
            }
        }
    }
}

/// One item per change of the target object; errors of the watch are ignored (the 2 s timer
/// still drives `--watch`).
fn watch_target(
    clients: &Clients,
    resolved: &Resolved,
    namespace: &str,
    name: &str,
) -> futures::stream::BoxStream<'static, ()> {
    let gvk = GroupVersionKind::gvk(&resolved.group, &resolved.version, &resolved.kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, &resolved.plural);
    let api: Api<DynamicObject> = if resolved.namespaced {
        Api::namespaced_with(clients.watches.clone(), namespace, &resource)
    } else {
        Api::all_with(clients.watches.clone(), &resource)
    };
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    watcher(api, config)
        .filter_map(|event| async move { event.ok().map(|_| ()) })
        .boxed()
}

/// How answers are written to stdout.
struct Printer {
    format: Option<OutputFormat>,
    colour: bool,
    clear_screen: bool,
}

impl Printer {
    /// Prints `status` unless it reads as `previous` did (so a piped `--watch` prints only
    /// changes); returns what it printed or skipped, for the next call.
    fn print(
        &self,
        status: &DeletionReviewStatus,
        previous: Option<&str>,
    ) -> anyhow::Result<Option<String>> {
        let text = match self.format {
            Some(OutputFormat::Json) => {
                let mut json = serde_json::to_string_pretty(status).context("encode JSON")?;
                json.push('\n');
                json
            }
            Some(OutputFormat::Yaml) => serde_saphyr::to_string(status).context("encode YAML")?,
            None => render::render(status, chrono::Utc::now(), self.colour),
        };
        if previous == Some(text.as_str()) {
            return Ok(Some(text));
        }
        let mut stdout = std::io::stdout().lock();
        if self.clear_screen && self.format.is_none() {
            // Home and clear, so the answer redraws in place.
            write!(stdout, "\u{1b}[H\u{1b}[2J").context("write to stdout")?;
        } else if previous.is_some() && self.format.is_none() {
            writeln!(stdout).context("write to stdout")?;
        }
        stdout
            .write_all(text.as_bytes())
            .context("write to stdout")?;
        stdout.flush().context("write to stdout")?;
        Ok(Some(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_target_forms_split() {
        assert_eq!(split_target("cm/app", None).expect("slash"), ("cm", "app"));
        assert_eq!(
            split_target("cm", Some("app")).expect("two words"),
            ("cm", "app")
        );
        assert!(split_target("cm/app", Some("other")).is_err());
        assert!(split_target("cm", None).is_err());
        assert!(split_target("cm/", None).is_err());
        assert!(split_target("cm/a/b", None).is_err());
    }
}
