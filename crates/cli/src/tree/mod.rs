//! `finale tree TYPE/NAME [--up]`: the ownership tree of an object with a deletion column.
//!
//! Asks the server for an `OwnershipReview` (the garbage collector's owner → dependents index
//! answers it without listing the cluster), or, on a cluster that does not serve
//! `deletion.finale.dev`, computes the same review in the client over a copy of the cluster
//! ([`crate::fallback`]), marked "computed by the client".
//!
//! Output: a table (`NAMESPACE NAME DELETION`) with the tree drawn in the NAME column and
//! identical leaf siblings grouped on one line ([`render`]); `-o json|yaml` prints the
//! review's status (every node, ungrouped); `-o dot` a Graphviz digraph (owner → dependent,
//! grouped as the table is).
//!
//! # Exit codes
//! 0 the tree was printed; 1 an error (the object does not exist, an unknown TYPE, no
//! cluster).

pub mod render;

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, bail};
use finale_apiserver::insight::tree::{
    Direction, OwnershipReview, OwnershipReviewSpec, OwnershipReviewStatus, tree_at,
};
use kube::api::{Api, PostParams};

use crate::cluster::{ClusterArgs, ColorChoice, Session};
use crate::fallback::{ClusterCopy, encode_answer};

#[derive(clap::Args)]
pub struct TreeArgs {
    /// Whose tree: `TYPE/NAME`, or `TYPE NAME` (TYPE as kubectl accepts it).
    #[arg(value_name = "TYPE[/NAME]")]
    target: String,
    /// The object's name, when not given as `TYPE/NAME`.
    #[arg(value_name = "NAME")]
    name: Option<String>,
    /// Show the owners (following ownerReferences up) instead of the dependents.
    #[arg(long)]
    up: bool,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Print the review's status as `json` or `yaml`, or the tree as a Graphviz `dot` digraph.
    #[arg(short = 'o', long, value_name = "FORMAT")]
    output: Option<TreeFormat>,
    /// Colour the text output: `auto` (on a terminal, unless `NO_COLOR` is set), `always`,
    /// `never`.
    #[arg(long, value_name = "WHEN", default_value = "auto")]
    color: ColorChoice,
    /// Compute the tree in this client (list the cluster, then walk the copy) even when the
    /// server could answer: to cross-check it, or to measure the difference.
    #[arg(long)]
    client_side: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum TreeFormat {
    Json,
    Yaml,
    Dot,
}

/// Runs the command; errors are returned for `main` to print (exit 1).
pub async fn run(args: TreeArgs) -> anyhow::Result<ExitCode> {
    let mut session = Session::connect(&args.cluster).await?;
    let target = session.target(&args.target, args.name.as_deref()).await?;
    let spec = OwnershipReviewSpec {
        target: target.target_ref(),
        direction: if args.up {
            Direction::Owners
        } else {
            Direction::Dependents
        },
        max_nodes: None,
    };
    let (status, copy) = if session.serves_insight().await? && !args.client_side {
        let reviews = Api::<OwnershipReview>::all(session.clients.requests.clone());
        let answer = reviews
            .create(&PostParams::default(), &OwnershipReview::new(spec))
            .await
            .map_err(|error| match error {
                kube::Error::Api(status) => anyhow::anyhow!(
                    "the server refused the OwnershipReview: {} ({} {})",
                    status.message,
                    status.code,
                    status.reason
                ),
                other => anyhow::Error::new(other).context("cannot create the OwnershipReview"),
            })?;
        let status = answer
            .status
            .context("the server answered the OwnershipReview without a status")?;
        (status, None)
    } else {
        let copy = ClusterCopy::load(&mut session, "finale tree").await?;
        let target_type = copy.resource(&target.resolved)?;
        let status = tree_at(&copy.catalog, &copy.snapshot, &copy.gc, &target_type, &spec)
            .await
            .map_err(|error| anyhow::anyhow!("cannot draw the tree: {}", error.message))?;
        (status, Some(copy))
    };
    print(&args, &session, &target, &status, copy.as_ref())
}

fn print(
    args: &TreeArgs,
    session: &Session,
    target: &crate::cluster::Target,
    status: &OwnershipReviewStatus,
    copy: Option<&ClusterCopy>,
) -> anyhow::Result<ExitCode> {
    let Some(root) = &status.root else {
        bail!(
            "{} \"{}\" not found{}",
            target.resolved.plural,
            target.name,
            if target.namespace.is_empty() {
                String::new()
            } else {
                format!(" in namespace {}", target.namespace)
            }
        );
    };
    let text = match args.output {
        Some(format @ (TreeFormat::Json | TreeFormat::Yaml)) => {
            encode_answer(status, copy.is_some(), format == TreeFormat::Yaml)?
        }
        Some(TreeFormat::Dot) => {
            let mut dot = render::dot(root, args.up);
            if copy.is_some() {
                dot = dot.replacen(
                    "digraph ownership {\n",
                    "digraph ownership {\n  comment=\"computed by the client\";\n",
                    1,
                );
            }
            dot
        }
        None => {
            if let Some(copy) = copy {
                copy.announce(session, "finale tree");
            }
            render::table(root, chrono::Utc::now(), args.color.enabled())
        }
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .context("write to stdout")?;
    stdout.flush().context("write to stdout")?;
    Ok(ExitCode::SUCCESS)
}
