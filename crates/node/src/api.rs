//! Calls to the API server, each bounded in time.
//!
//! The agent shares one `kube::Client` between its watch (which must not time out while the
//! cluster is quiet) and its ordinary calls, so the client may have a long read timeout or
//! none; every ordinary call goes through [`bounded`] instead.

use std::future::Future;
use std::time::Duration;

/// How long one ordinary API call may take.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why an API call failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("the API server did not answer within {0:?}")]
    Timeout(Duration),
}

impl ApiError {
    /// The HTTP status of a `Status` answer.
    pub(crate) fn code(&self) -> Option<u16> {
        match self {
            ApiError::Kube(kube::Error::Api(status)) => Some(status.code),
            _ => None,
        }
    }

    pub(crate) fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    pub(crate) fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }
}

/// Runs one API call, failing it after [`CALL_TIMEOUT`].
pub(crate) async fn bounded<T>(
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, ApiError> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(result) => result.map_err(ApiError::Kube),
        Err(_) => Err(ApiError::Timeout(CALL_TIMEOUT)),
    }
}
