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
//! # Client-side fallback
//! Against a cluster that does not serve `deletion.finale.dev`, the answer is computed by the
//! client with the server's own code over a copy of the cluster ([`crate::fallback`]), and
//! marked so: a line on stderr, `computedBy: client` in JSON and YAML. `--watch` needs the
//! server (the copy is too costly to repeat every 2 s).

pub(crate) mod render;
pub(crate) mod resolve;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use finale_apiserver::insight::api::{
    self as insight, DeletionReview, DeletionReviewSpec, DeletionReviewStatus, Verdict,
};
use finale_operator::client::Clients;
use futures::StreamExt;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;

use crate::cluster::{ClusterArgs, ColorChoice, Session};
use crate::fallback::ClusterCopy;
use resolve::Resolved;

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
    #[command(flatten)]
    cluster: ClusterArgs,
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
    /// Compute the answer in this client (list the cluster, then explain over the copy) even
    /// when the server could answer: to cross-check it, or to measure the difference.
    #[arg(long, conflicts_with = "watch")]
    client_side: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OutputFormat {
    Json,
    Yaml,
}

/// The exit code of a verdict (see the module documentation).
fn exit_code(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Gone | Verdict::NotDeleting => 0,
        Verdict::Progressing => 2,
        Verdict::Stuck => 3,
        // Plan verdicts never answer an Explain review.
        Verdict::WillComplete | Verdict::WillHang | Verdict::Other => 1,
    }
}

/// Who answers: the server, or the client over its own copy of the cluster.
enum Answerer {
    Server(Api<DeletionReview>),
    Client(ClusterCopy),
}

impl Answerer {
    async fn ask(
        &self,
        resolved: &Resolved,
        review: &DeletionReview,
    ) -> anyhow::Result<DeletionReviewStatus> {
        match self {
            Answerer::Server(reviews) => ask(reviews, review).await,
            Answerer::Client(copy) => {
                let target_type = copy.resource(resolved)?;
                finale_apiserver::insight::explain_at(
                    &copy.catalog,
                    &copy.snapshot,
                    &copy.gc,
                    &target_type,
                    &review.spec,
                )
                .await
                .map_err(|error| anyhow::anyhow!("cannot explain: {}", error.message))
            }
        }
    }
}

/// Runs the command; errors are returned for `main` to print (exit 1).
pub async fn run(args: ExplainArgs) -> anyhow::Result<ExitCode> {
    if args.stuck {
        return run_stuck(args).await;
    }
    let mut session = Session::connect(&args.cluster).await?;
    let target = session
        .target(
            args.target.as_deref().unwrap_or_default(),
            args.name.as_deref(),
        )
        .await?;
    let review = DeletionReview::new(DeletionReviewSpec {
        target: target.target_ref(),
        ..DeletionReviewSpec::default()
    });
    let answerer = if session.serves_insight().await? && !args.client_side {
        Answerer::Server(Api::<DeletionReview>::all(session.clients.requests.clone()))
    } else {
        Answerer::Client(ClusterCopy::load(&mut session, "finale explain").await?)
    };
    let printer = Printer {
        format: args.output,
        colour: args.color.enabled(),
        clear_screen: args.watch && std::io::stdout().is_terminal(),
        computed_by_client: matches!(answerer, Answerer::Client(_)),
    };
    if !args.watch {
        let status = answerer.ask(&target.resolved, &review).await?;
        if let Answerer::Client(copy) = &answerer
            && printer.format.is_none()
        {
            copy.announce(&session, "finale explain");
        }
        printer.print(&status, None)?;
        if status.verdict == Verdict::Other {
            eprintln!(
                "finale explain: the server answered a verdict this version does not know; upgrade finale"
            );
        }
        return Ok(ExitCode::from(exit_code(status.verdict)));
    }
    if !session.serves_insight().await? {
        bail!(
            "--watch needs a server that serves {} ({} does not): the client-side answer lists the whole cluster, too much to repeat every 2 s",
            insight::API_VERSION,
            session.cluster
        );
    }
    let target_changes = watch_target(
        &session.clients,
        &target.resolved,
        &target.namespace,
        &target.name,
    );
    let deadline = args
        .timeout
        .map(|timeout| tokio::time::Instant::now() + timeout);
    let Answerer::Server(reviews) = &answerer else {
        unreachable!("checked above");
    };
    watch(reviews, &review, &printer, target_changes, deadline).await
}

/// `--stuck`: one scoped `DeletionReview`, its stuck objects printed one per line.
async fn run_stuck(args: ExplainArgs) -> anyhow::Result<ExitCode> {
    let mut session = Session::connect(&args.cluster).await?;
    if !session.serves_insight().await? {
        bail!(
            "the server at {} does not serve {} (DeletionReview), so it cannot list stuck objects from its index; \
             `finale explain TYPE/NAME` still explains one object at a time on any cluster",
            session.cluster,
            insight::API_VERSION
        );
    }
    let namespace = if args.all_namespaces {
        String::new()
    } else {
        args.cluster
            .namespace
            .clone()
            .unwrap_or_else(|| session.default_namespace.clone())
    };
    let review = DeletionReview::new(DeletionReviewSpec {
        scope: Some(insight::ReviewScope { namespace }),
        ..DeletionReviewSpec::default()
    });
    let printer = Printer {
        format: args.output,
        colour: args.color.enabled(),
        clear_screen: false,
        computed_by_client: false,
    };
    let reviews = Api::<DeletionReview>::all(session.clients.requests.clone());
    let status = ask(&reviews, &review).await?;
    printer.print(&status, None)?;
    Ok(ExitCode::from(if status.verdict == Verdict::Stuck {
        3
    } else {
        0
    }))
}

/// Creates the review and returns its answer.
pub(crate) async fn ask(
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
    /// Mark JSON and YAML with `computedBy: client`.
    computed_by_client: bool,
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
            Some(format) => crate::fallback::encode_answer(
                status,
                self.computed_by_client,
                format == OutputFormat::Yaml,
            )?,
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
