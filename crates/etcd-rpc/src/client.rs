//! The connection to etcd: an HTTP/2 channel and the generated service stubs on top of it, with
//! the message size limits raised; plus the key-range and error conventions of etcd's API.

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

use crate::etcdserverpb::kv_client::KvClient;
use crate::etcdserverpb::lease_client::LeaseClient;
use crate::etcdserverpb::maintenance_client::MaintenanceClient;
use crate::etcdserverpb::watch_client::WatchClient;

/// What etcd answers (with `OutOfRange`) when a read, watch or compaction asks for a revision
/// older than the last compaction.
const COMPACTED_MESSAGE: &str = "etcdserver: mvcc: required revision has been compacted";

/// How to connect, and the limits every call made through the [`Client`] gets.
///
/// The defaults follow what kube-apiserver's etcd client uses: a 20 s dial timeout, HTTP/2
/// pings every 30 s that must be answered within 10 s (so a dead member is noticed on an idle
/// connection), no overall request timeout (callers bound their own calls), responses up to
/// `i32::MAX` bytes and requests up to 2 MiB (etcd's Go client defaults; etcd itself refuses
/// requests over 1.5 MiB unless started with a larger `--max-request-bytes`).
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    connect_timeout: Duration,
    request_timeout: Option<Duration>,
    keep_alive_interval: Duration,
    keep_alive_timeout: Duration,
    max_response_bytes: usize,
    max_request_bytes: usize,
}

impl Default for ConnectOptions {
    fn default() -> ConnectOptions {
        ConnectOptions {
            connect_timeout: Duration::from_secs(20),
            request_timeout: None,
            keep_alive_interval: Duration::from_secs(30),
            keep_alive_timeout: Duration::from_secs(10),
            max_response_bytes: i32::MAX as usize,
            max_request_bytes: 2 * 1024 * 1024,
        }
    }
}

impl ConnectOptions {
    pub fn new() -> ConnectOptions {
        ConnectOptions::default()
    }

    /// How long establishing the TCP connection may take.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> ConnectOptions {
        self.connect_timeout = timeout;
        self
    }

    /// Bounds every call until the server's response headers arrive: a whole unary call, or
    /// the opening of a stream (etcd sends a watch stream's headers with its first response).
    /// It does not end a stream that is already flowing.
    pub fn with_request_timeout(mut self, timeout: Duration) -> ConnectOptions {
        self.request_timeout = Some(timeout);
        self
    }

    /// HTTP/2 keepalive: a ping every `interval` while calls are open, and the connection is
    /// dropped if one is not answered within `timeout`.
    pub fn with_keep_alive(mut self, interval: Duration, timeout: Duration) -> ConnectOptions {
        self.keep_alive_interval = interval;
        self.keep_alive_timeout = timeout;
        self
    }

    /// The largest response (or watch message) the client decodes; a larger one fails the call
    /// with `OutOfRange`.
    pub fn with_max_response_bytes(mut self, bytes: usize) -> ConnectOptions {
        self.max_response_bytes = bytes;
        self
    }

    /// The largest request the client sends; a larger one fails the call with
    /// `OutOfRange` before anything is sent.
    pub fn with_max_request_bytes(mut self, bytes: usize) -> ConnectOptions {
        self.max_request_bytes = bytes;
        self
    }
}

/// Why [`Client::connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("invalid etcd endpoint {endpoint:?} (expected a URL such as http://127.0.0.1:2379)")]
    InvalidEndpoint {
        endpoint: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("connect to etcd at {endpoint}")]
    Connect {
        endpoint: String,
        #[source]
        source: tonic::transport::Error,
    },
}

/// A connection to one etcd endpoint. Cloning is cheap and shares the connection: every clone,
/// and every stub it hands out, multiplexes its calls over the same HTTP/2 connection, as
/// kube-apiserver does with its etcd client.
#[derive(Clone, Debug)]
pub struct Client {
    channel: Channel,
    max_response_bytes: usize,
    max_request_bytes: usize,
}

impl Client {
    /// Connects to `endpoint` (`http://host:port`) and fails if that does not succeed within
    /// the connect timeout. A connection lost later is re-established on the next call.
    pub async fn connect(
        endpoint: impl Into<String>,
        options: &ConnectOptions,
    ) -> Result<Client, ConnectError> {
        let endpoint = endpoint.into();
        let mut target = Endpoint::from_shared(endpoint.clone())
            .map_err(|source| ConnectError::InvalidEndpoint {
                endpoint: endpoint.clone(),
                source,
            })?
            .connect_timeout(options.connect_timeout)
            .http2_keep_alive_interval(options.keep_alive_interval)
            .keep_alive_timeout(options.keep_alive_timeout);
        if let Some(timeout) = options.request_timeout {
            target = target.timeout(timeout);
        }
        let channel = target
            .connect()
            .await
            .map_err(|source| ConnectError::Connect { endpoint, source })?;
        Ok(Client::from_channel(channel, options))
    }

    /// Wraps a channel built elsewhere (TLS, several endpoints), applying the message size
    /// limits of `options` to every stub; its connect and timeout settings are the channel's.
    pub fn from_channel(channel: Channel, options: &ConnectOptions) -> Client {
        Client {
            channel,
            max_response_bytes: options.max_response_bytes,
            max_request_bytes: options.max_request_bytes,
        }
    }

    /// The underlying channel.
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// The KV service: `Range`, `Put`, `DeleteRange`, `Txn`, `Compact`.
    pub fn kv(&self) -> KvClient<Channel> {
        KvClient::new(self.channel.clone())
            .max_decoding_message_size(self.max_response_bytes)
            .max_encoding_message_size(self.max_request_bytes)
    }

    /// The Watch service: one bidirectional stream carrying any number of watches.
    pub fn watch(&self) -> WatchClient<Channel> {
        WatchClient::new(self.channel.clone())
            .max_decoding_message_size(self.max_response_bytes)
            .max_encoding_message_size(self.max_request_bytes)
    }

    /// The Lease service: grant, revoke, keep alive.
    pub fn lease(&self) -> LeaseClient<Channel> {
        LeaseClient::new(self.channel.clone())
            .max_decoding_message_size(self.max_response_bytes)
            .max_encoding_message_size(self.max_request_bytes)
    }

    /// The Maintenance service (only `Status` is described).
    pub fn maintenance(&self) -> MaintenanceClient<Channel> {
        MaintenanceClient::new(self.channel.clone())
            .max_decoding_message_size(self.max_response_bytes)
            .max_encoding_message_size(self.max_request_bytes)
    }
}

/// The `range_end` that makes a range, delete or watch cover every key starting with
/// `prefix`: the prefix with its last byte below 0xff incremented and what follows dropped.
/// A prefix of only 0xff bytes (or an empty one) has no such successor; the result is then a
/// single zero byte, which etcd reads as "every key from `key` on" (for the empty prefix, send
/// the key as a single zero byte too: etcd refuses an empty key).
pub fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    match prefix.iter().rposition(|&byte| byte < 0xff) {
        Some(last) => {
            let mut end = prefix[..=last].to_vec();
            end[last] += 1;
            end
        }
        None => vec![0],
    }
}

/// Whether etcd refused a call because the revision it asked for is compacted. The status code
/// alone (`OutOfRange`) would also match a future revision or a response over the size limit,
/// so the message is checked too. A watch reports compaction differently: in a
/// `WatchResponse` with `compact_revision` set.
pub fn is_compacted(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::OutOfRange && status.message() == COMPACTED_MESSAGE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_range_end_increments_the_last_byte_that_can_be() {
        assert_eq!(prefix_range_end(b"/registry/pods/"), b"/registry/pods0");
        assert_eq!(prefix_range_end(b"a"), b"b");
        assert_eq!(prefix_range_end(b"a\xff"), b"b");
        assert_eq!(prefix_range_end(b"a\xfe\xff\xff"), b"a\xff");
    }

    #[test]
    fn prefix_range_end_of_nothing_to_increment_means_every_key_from_there() {
        assert_eq!(prefix_range_end(b""), [0]);
        assert_eq!(prefix_range_end(b"\xff\xff"), [0]);
    }

    #[test]
    fn only_the_compacted_message_counts_as_compacted() {
        assert!(is_compacted(&tonic::Status::out_of_range(
            COMPACTED_MESSAGE
        )));
        assert!(!is_compacted(&tonic::Status::out_of_range(
            "etcdserver: mvcc: required revision is a future revision"
        )));
        assert!(!is_compacted(&tonic::Status::unavailable(
            COMPACTED_MESSAGE
        )));
    }
}
