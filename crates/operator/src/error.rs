//! Telling failures a person must fix from failures that time fixes.
//!
//! A callback marks an error as permanent with [`permanent`] (or [`permanent_with_remedy`],
//! which also says what to change): bad credentials, a missing privilege, a certificate that
//! does not verify. The runtime then reports it as such (reason `PermanentError` in the
//! `Deleting` condition and in the Event) and retries slowly, at about the maximum backoff,
//! instead of hammering the external system from 0.5 s up. Everything else counts as transient
//! and backs off exponentially.
//!
//! # Guarantees
//! - [`is_permanent`] looks at the whole chain, so context added after marking
//!   (`.context("dropping database …")`) keeps the mark.
//! - Marking changes neither the error's message nor its chain of causes: `{:#}` prints the
//!   same text with or without the mark.
//!
//! # Caveats
//! - A permanent error is still retried (slowly): what a person fixes outside Kubernetes, such
//!   as a password on the server, produces no event the operator could wait for.

use std::fmt;

/// An error that waiting will not fix; see the module documentation.
pub struct Permanent {
    error: anyhow::Error,
    remedy: Option<String>,
}

impl Permanent {
    /// What a person should change, if the operator knows.
    pub fn remedy(&self) -> Option<&str> {
        self.remedy.as_deref()
    }
}

impl fmt::Display for Permanent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only the wrapped error's own message: its causes follow through `source`, so that
        // `{:#}` prints the chain once.
        fmt::Display::fmt(&*self.error, f)
    }
}

impl fmt::Debug for Permanent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permanent")
            .field("error", &self.error)
            .field("remedy", &self.remedy)
            .finish()
    }
}

impl std::error::Error for Permanent {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// Marks `error` as permanent.
pub fn permanent(error: anyhow::Error) -> anyhow::Error {
    anyhow::Error::new(Permanent {
        error,
        remedy: None,
    })
}

/// Marks `error` as permanent and says what a person should change to fix it.
pub fn permanent_with_remedy(error: anyhow::Error, remedy: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Permanent {
        error,
        remedy: Some(remedy.into()),
    })
}

fn find(error: &anyhow::Error) -> Option<&Permanent> {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<Permanent>())
}

/// Whether `error`, or anything in its chain, was marked permanent.
pub fn is_permanent(error: &anyhow::Error) -> bool {
    find(error).is_some()
}

/// The remedy attached to the permanent error in `error`'s chain, if any.
pub fn remedy(error: &anyhow::Error) -> Option<&str> {
    find(error).and_then(Permanent::remedy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;

    #[derive(Debug, thiserror::Error)]
    #[error("password authentication failed")]
    struct Refused;

    #[test]
    fn the_mark_survives_added_context_and_keeps_the_message() {
        let plain: anyhow::Result<()> = Err(anyhow::Error::new(Refused)).context("connecting");
        let plain = plain.expect_err("an error");
        assert!(!is_permanent(&plain));

        let marked: anyhow::Result<()> = Err(permanent_with_remedy(
            anyhow::Error::new(Refused).context("connecting"),
            "fix the password in the Secret",
        ))
        .context("dropping database \"orders\"");
        let marked = marked.expect_err("an error");
        assert!(is_permanent(&marked));
        assert_eq!(remedy(&marked), Some("fix the password in the Secret"));
        assert_eq!(
            format!("{marked:#}"),
            "dropping database \"orders\": connecting: password authentication failed"
        );
        // The root cause can still be found by type.
        assert!(marked.chain().any(|c| c.is::<Refused>()));
    }

    #[test]
    fn a_mark_without_remedy_is_still_permanent() {
        let error = permanent(anyhow::anyhow!("the URL is not valid"));
        assert!(is_permanent(&error));
        assert_eq!(remedy(&error), None);
        assert_eq!(format!("{error:#}"), "the URL is not valid");
    }
}
