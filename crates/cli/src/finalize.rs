//! `finale finalize TYPE/NAME --finalizer F [--reason TEXT] [--confirm DIGEST]`: remove a
//! finalizer whose owner cannot, through a `FinalizerRemoval`, only with evidence.
//!
//! Without `--confirm` it is a dry run: the server checks the evidence as for a real removal
//! (`?dryRun=All`) and the command prints it with a confirmation digest and the command that
//! confirms it; nothing changes. With `--confirm DIGEST` the digest is computed again from the
//! live object: if the object changed since the dry run the digests differ and the command
//! refuses; if they match it creates the `FinalizerRemoval` (the server checks the evidence
//! once more, and removes the finalizer at that resourceVersion) and prints the record.
//!
//! # The digest
//! The first 12 hex digits of SHA-256 over the object's uid, its resourceVersion and the
//! finalizer, NUL-separated ([`digest`]): any write to the object (a new resourceVersion), a
//! new object of the same name (a new uid) or another finalizer gives another digest.
//!
//! # Exit codes
//! 0 the dry run passed, or the finalizer was removed; 1 a refusal (a changed object, the
//! server's 409 with its evidence) or an error.

use std::process::ExitCode;

use anyhow::{Context, bail};
use finale_apiserver::insight::api::{self as insight, TargetRef};
use finale_apiserver::insight::removal::{FinalizerRemoval, FinalizerRemovalSpec, RemovalEvidence};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use sha2::{Digest, Sha256};

use crate::cluster::{ClusterArgs, Session, Target};

/// The reason recorded when none is given.
const DEFAULT_REASON: &str = "removed with `finale finalize` (no reason given)";

#[derive(clap::Args)]
pub struct FinalizeArgs {
    /// The object: `TYPE/NAME`, or `TYPE NAME` (TYPE as kubectl accepts it).
    #[arg(value_name = "TYPE[/NAME]")]
    target: String,
    /// The object's name, when not given as `TYPE/NAME`.
    #[arg(value_name = "NAME")]
    name: Option<String>,
    /// The finalizer to remove.
    #[arg(long, value_name = "FINALIZER")]
    finalizer: String,
    /// Why, for whoever reads the record later.
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    /// The digest a dry run printed: remove the finalizer if the object is unchanged since.
    #[arg(long, value_name = "DIGEST")]
    confirm: Option<String>,
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// The confirmation digest of `finalizer` on the object `uid` at `resource_version`.
pub fn digest(uid: &str, resource_version: &str, finalizer: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(uid.as_bytes());
    hasher.update([0]);
    hasher.update(resource_version.as_bytes());
    hasher.update([0]);
    hasher.update(finalizer.as_bytes());
    hasher
        .finalize()
        .iter()
        .take(6)
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Runs the command; errors are returned for `main` to print (exit 1).
pub async fn run(args: FinalizeArgs) -> anyhow::Result<ExitCode> {
    let mut session = Session::connect(&args.cluster).await?;
    let target = session.target(&args.target, args.name.as_deref()).await?;
    if !session.serves_insight().await? {
        bail!(
            "{} does not serve {} (FinalizerRemoval), so a finalizer cannot be removed with evidence there; find the controller that owns {} first, and remove the finalizer by hand only once you know what it was meant to clean up",
            session.cluster,
            insight::API_VERSION,
            args.finalizer
        );
    }
    let live = get_live(&session, &target).await?;
    let uid = live.metadata.uid.clone().unwrap_or_default();
    let resource_version = live.metadata.resource_version.clone().unwrap_or_default();
    let finalizers = live.metadata.finalizers.clone().unwrap_or_default();
    if !finalizers.contains(&args.finalizer) {
        bail!(
            "{} does not carry finalizer {} (it has [{}]); nothing to remove",
            target.display(),
            args.finalizer,
            finalizers.join(", ")
        );
    }
    let current = digest(&uid, &resource_version, &args.finalizer);
    let reason = args
        .reason
        .clone()
        .unwrap_or_else(|| DEFAULT_REASON.to_string());
    let removal = FinalizerRemoval {
        api_version: insight::API_VERSION.into(),
        kind: finale_apiserver::insight::removal::KIND.into(),
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", target.name)),
            ..ObjectMeta::default()
        },
        spec: FinalizerRemovalSpec {
            target: TargetRef {
                uid: uid.clone(),
                ..target.target_ref()
            },
            resource_version: resource_version.clone(),
            finalizer: args.finalizer.clone(),
            reason: reason.clone(),
        },
        status: None,
    };
    let removals = Api::<FinalizerRemoval>::all(session.clients.requests.clone());
    let Some(confirmed) = &args.confirm else {
        let answer = create(&removals, &removal, true, &target, &args.finalizer).await?;
        print!(
            "{}",
            dry_run_text(&args, &target, &answer, &uid, &resource_version, &current)
        );
        return Ok(ExitCode::SUCCESS);
    };
    if confirmed.trim() != current {
        bail!(
            "refusing: {} changed since the dry run that printed digest {}: its digest is now {current} (uid {uid}, resourceVersion {resource_version}). Nothing was removed. Run the command again without --confirm, read the new evidence, and confirm its digest",
            target.display(),
            confirmed.trim()
        );
    }
    let record = create(&removals, &removal, false, &target, &args.finalizer).await?;
    print!("{}", record_text(&target, &record));
    Ok(ExitCode::SUCCESS)
}

/// The object as it is now.
async fn get_live(session: &Session, target: &Target) -> anyhow::Result<DynamicObject> {
    let resolved = &target.resolved;
    let gvk = GroupVersionKind::gvk(&resolved.group, &resolved.version, &resolved.kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, &resolved.plural);
    let api: Api<DynamicObject> = if resolved.namespaced {
        Api::namespaced_with(
            session.clients.requests.clone(),
            &target.namespace,
            &resource,
        )
    } else {
        Api::all_with(session.clients.requests.clone(), &resource)
    };
    api.get_opt(&target.name)
        .await
        .with_context(|| format!("cannot read {}", target.display()))?
        .with_context(|| format!("{} not found", target.display()))
}

/// Creates the removal (as a dry run or for real); a refusal becomes a readable error.
async fn create(
    removals: &Api<FinalizerRemoval>,
    removal: &FinalizerRemoval,
    dry_run: bool,
    target: &Target,
    finalizer: &str,
) -> anyhow::Result<FinalizerRemoval> {
    let params = PostParams {
        dry_run,
        ..PostParams::default()
    };
    removals
        .create(&params, removal)
        .await
        .map_err(|error| match error {
            kube::Error::Api(status) => {
                let message = status
                    .message
                    .split_once(" refused: ")
                    .map_or(status.message.as_str(), |(_, why)| why);
                anyhow::anyhow!(
                    "the server refuses to remove finalizer {finalizer} from {} ({} {}):\n  {message}\nNothing was removed.",
                    target.display(),
                    status.code,
                    status.reason,
                )
            }
            other => anyhow::Error::new(other).context("cannot create the FinalizerRemoval"),
        })
}

/// `'text'` for a shell, when it needs quoting.
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+".contains(c));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

fn evidence_lines(evidence: &RemovalEvidence, out: &mut String) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "  {}", evidence.message);
    let mut field = |key: &str, value: &str| {
        if !value.is_empty() {
            let _ = writeln!(out, "    {key}: {value}");
        }
    };
    field(
        "ownerUnknown",
        if evidence.owner_unknown { "true" } else { "" },
    );
    field("claim", &evidence.claim);
    field("controller", &evidence.controller);
    field("lease", &evidence.lease);
    field("leaseState", &evidence.lease_state);
    field("leaseHolder", &evidence.lease_holder);
    field("renewTime", evidence.renew_time.as_deref().unwrap_or(""));
    field(
        "forcePolicy",
        evidence.force_policy.map(|p| p.as_str()).unwrap_or(""),
    );
    field(
        "claimsForOtherResources",
        &evidence.claims_for_other_resources.join(", "),
    );
}

fn dry_run_text(
    args: &FinalizeArgs,
    target: &Target,
    answer: &FinalizerRemoval,
    uid: &str,
    resource_version: &str,
    digest: &str,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Dry run: the server would remove finalizer {} from {} (uid {uid}, resourceVersion {resource_version}).",
        args.finalizer,
        target.display()
    );
    if let Some(status) = &answer.status {
        let _ = writeln!(
            out,
            "\nEvidence (at resourceVersion {}):",
            status.evidence_resource_version
        );
        evidence_lines(&status.evidence, &mut out);
        if !status.orphaned_resources.is_empty() {
            let _ = writeln!(
                out,
                "\nMay be left behind (its controller would have cleaned it up): {}",
                status.orphaned_resources.join("; ")
            );
        }
    }
    let mut confirm = vec![
        "finale".to_string(),
        "finalize".to_string(),
        format!("{}/{}", target.resolved.plural, target.name),
    ];
    if !target.namespace.is_empty() {
        confirm.extend(["-n".into(), shell_word(&target.namespace)]);
    }
    confirm.extend(["--finalizer".into(), shell_word(&args.finalizer)]);
    if let Some(reason) = &args.reason {
        confirm.extend(["--reason".into(), shell_word(reason)]);
    }
    confirm.extend(["--confirm".into(), digest.to_string()]);
    let _ = writeln!(
        out,
        "\nNothing was changed. The confirmation digest is bound to the object's uid, its resourceVersion and the finalizer: any change to the object makes it stale.\nConfirmation digest: {digest}\nTo remove the finalizer and keep a record (a FinalizerRemoval), run:\n  {}",
        confirm.join(" ")
    );
    out
}

fn record_text(target: &Target, record: &FinalizerRemoval) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let name = record.metadata.name.as_deref().unwrap_or_default();
    let _ = writeln!(
        out,
        "Removed finalizer {} from {}.",
        record.spec.finalizer,
        target.display()
    );
    if let Some(status) = &record.status {
        let _ = writeln!(
            out,
            "Record: FinalizerRemoval {name} (phase {:?}, removed by {}{})",
            status.phase,
            status.removed_by,
            status
                .removed_at
                .as_deref()
                .map(|at| format!(" at {at}"))
                .unwrap_or_default()
        );
        let _ = writeln!(out, "Reason: {}", record.spec.reason);
        let _ = writeln!(
            out,
            "Evidence (at resourceVersion {}):",
            status.evidence_resource_version
        );
        evidence_lines(&status.evidence, &mut out);
        if !status.orphaned_resources.is_empty() {
            let _ = writeln!(
                out,
                "May now be orphaned: {}",
                status.orphaned_resources.join("; ")
            );
        }
    }
    let _ = writeln!(
        out,
        "See it again with `kubectl get finalizerremoval {name} -o yaml`."
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_changes_with_each_input() {
        let base = digest("u-1", "41", "example.com/hold");
        assert_eq!(base.len(), 12);
        assert!(base.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(base, digest("u-1", "41", "example.com/hold"));
        assert_ne!(base, digest("u-2", "41", "example.com/hold"));
        assert_ne!(base, digest("u-1", "42", "example.com/hold"));
        assert_ne!(base, digest("u-1", "41", "example.com/other"));
        // The separator keeps "uid|rv" boundaries apart.
        assert_ne!(digest("u-14", "1", "f"), digest("u-1", "41", "f"));
    }

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("example.com/hold"), "example.com/hold");
        assert_eq!(shell_word("the db is gone"), "'the db is gone'");
        assert_eq!(shell_word("it's gone"), r"'it'\''s gone'");
    }
}
