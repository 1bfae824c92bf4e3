//! The log endpoint: the kubelet's `GET /containerLogs/{namespace}/{pod}/{container}` over
//! HTTPS, which the API server's `pods/log` proxies to.
//!
//! A container's output is `<root>/pods/<uid>/<container>/<restartCount>.log`, written by the
//! process itself; the previous instance's is `<restartCount - 1>.log`. Query parameters, as
//! `v1.PodLogOptions`: `follow`, `previous`, `tailLines`, `limitBytes` are honoured;
//! `sinceSeconds`, `sinceTime` and `timestamps` are validated and then ignored, because the
//! files hold the raw bytes a process wrote, without the per-line timestamps of the CRI log
//! format. `follow=true` streams what is appended until the container's process has ended
//! (or it is restarted, or the client goes away).
//!
//! Authentication and authorization as a kubelet with `--client-ca-file` and a
//! `system:masters`-only authorizer: no certificate → 401, a certificate that does not chain
//! to the cluster CA → 401, a valid one whose subject is not in `system:masters` → 403. With
//! no cluster CA every request gets 403.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::tls::{AUTHORIZED_GROUP, Caller, ClientAuth};

/// How often a follower looks for new bytes.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// The most a single read sends at once.
const CHUNK: usize = 64 * 1024;

/// What the endpoint knows of one container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ContainerLogs {
    pub name: String,
    /// The current instance's number (its log is `<restart_count>.log`).
    pub restart_count: u32,
    /// Whether the current instance was ever started (else it has no log).
    pub started: bool,
    /// Whether the current instance's process is running (a follower waits for more).
    pub running: bool,
    /// Why it is not running yet, for the "waiting to start" answer.
    pub waiting_reason: Option<String>,
}

/// What the endpoint knows of one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PodLogs {
    pub uid: String,
    pub dir: PathBuf,
    pub containers: Vec<ContainerLogs>,
}

/// The pods the endpoint serves, by (namespace, name); kept current by the pod workers.
#[derive(Clone, Default)]
pub(crate) struct LogIndex {
    pods: Arc<RwLock<HashMap<(String, String), PodLogs>>>,
}

impl LogIndex {
    pub(crate) fn publish(&self, namespace: &str, name: &str, logs: PodLogs) {
        let mut pods = self.pods.write().unwrap_or_else(|e| e.into_inner());
        pods.insert((namespace.to_string(), name.to_string()), logs);
    }

    /// Forgets a pod, unless the entry is another pod's of the same name (re-created).
    pub(crate) fn forget(&self, namespace: &str, name: &str, uid: &str) {
        let mut pods = self.pods.write().unwrap_or_else(|e| e.into_inner());
        let key = (namespace.to_string(), name.to_string());
        if pods.get(&key).is_some_and(|logs| logs.uid == uid) {
            pods.remove(&key);
        }
    }

    fn get(&self, namespace: &str, name: &str) -> Option<PodLogs> {
        let pods = self.pods.read().unwrap_or_else(|e| e.into_inner());
        pods.get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Whether `uid`'s container `name` still runs instance `restart_count`.
    fn still_running(
        &self,
        namespace: &str,
        pod: &str,
        uid: &str,
        name: &str,
        restart_count: u32,
    ) -> bool {
        self.get(namespace, pod).is_some_and(|logs| {
            logs.uid == uid
                && logs
                    .containers
                    .iter()
                    .any(|c| c.name == name && c.restart_count == restart_count && c.running)
        })
    }
}

/// The path of a container instance's log file.
pub(crate) fn log_path(pod_dir: &Path, container: &str, restart_count: u32) -> PathBuf {
    pod_dir.join(container).join(format!("{restart_count}.log"))
}

/// The offset at which the last `lines` lines of a file of `len` bytes start. A final line
/// without a newline counts as a line; the newline ending the file does not start one.
pub(crate) fn tail_offset(
    file: &mut (impl Read + Seek),
    len: u64,
    lines: u64,
) -> std::io::Result<u64> {
    if lines == 0 {
        return Ok(len);
    }
    let mut end = len;
    let mut found = 0;
    let mut skip_final_newline = true;
    let mut buffer = vec![0u8; 8192];
    while end > 0 {
        let start = end.saturating_sub(buffer.len() as u64);
        let size = usize::try_from(end - start).unwrap_or(buffer.len());
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buffer[..size])?;
        for index in (0..size).rev() {
            if buffer[index] != b'\n' {
                skip_final_newline = false;
                continue;
            }
            if skip_final_newline {
                skip_final_newline = false;
                continue;
            }
            found += 1;
            if found == lines {
                return Ok(start + index as u64 + 1);
            }
        }
        end = start;
    }
    Ok(0)
}

/// `v1.PodLogOptions` from the query, as the kubelet decodes and validates it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub tail_lines: Option<u64>,
    pub limit_bytes: Option<u64>,
}

/// Go's `strconv.ParseBool`.
fn parse_bool(name: &str, value: &str) -> Result<bool, String> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("{name}: invalid boolean {value:?}")),
    }
}

fn parse_int(name: &str, value: &str) -> Result<i64, String> {
    value
        .parse()
        .map_err(|_| format!("{name}: invalid integer {value:?}"))
}

impl LogOptions {
    pub(crate) fn parse(query: &HashMap<String, String>) -> Result<LogOptions, String> {
        let mut options = LogOptions::default();
        for (name, value) in query {
            match name.as_str() {
                "follow" => options.follow = parse_bool(name, value)?,
                "previous" => options.previous = parse_bool(name, value)?,
                "timestamps" | "insecureSkipTLSVerifyBackend" => {
                    parse_bool(name, value)?;
                }
                "tailLines" => {
                    let lines = parse_int(name, value)?;
                    options.tail_lines = Some(u64::try_from(lines).map_err(|_| {
                        "tailLines: must be greater than or equal to 0".to_string()
                    })?);
                }
                "limitBytes" => {
                    let bytes = parse_int(name, value)?;
                    if bytes < 1 {
                        return Err("limitBytes: must be greater than 0".to_string());
                    }
                    options.limit_bytes = u64::try_from(bytes).ok();
                }
                "sinceSeconds" if parse_int(name, value)? < 1 => {
                    return Err("sinceSeconds: must be greater than 0".to_string());
                }
                "sinceTime" if crate::time::parse(value).is_none() => {
                    return Err(format!("sinceTime: invalid RFC 3339 time {value:?}"));
                }
                // `container`, `stream` and unknown parameters are ignored, as upstream's
                // decoder ignores unknown ones.
                _ => {}
            }
        }
        if query.contains_key("sinceSeconds") && query.contains_key("sinceTime") {
            return Err("at most one of sinceTime or sinceSeconds may be specified".to_string());
        }
        Ok(options)
    }
}

fn plain(status: StatusCode, message: impl Into<String>) -> Response {
    let mut message = message.into();
    message.push('\n');
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message,
    )
        .into_response()
}

#[derive(Clone)]
struct AppState {
    index: LogIndex,
}

async fn container_logs(
    State(state): State<AppState>,
    caller: axum::Extension<Caller>,
    UrlPath((namespace, pod, container)): UrlPath<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    match &caller.0 {
        Caller::Verified { groups, .. } if groups.iter().any(|g| g == AUTHORIZED_GROUP) => {}
        Caller::Verified { user, .. } => {
            return plain(
                StatusCode::FORBIDDEN,
                format!("Forbidden (user={user}, verb=get, resource=nodes, subresource=proxy)"),
            );
        }
        Caller::NoClusterCa => {
            return plain(
                StatusCode::FORBIDDEN,
                "Forbidden: this node agent has no cluster CA to authenticate clients with",
            );
        }
        Caller::Anonymous => return plain(StatusCode::UNAUTHORIZED, "Unauthorized"),
        Caller::Rejected(reason) => {
            return plain(
                StatusCode::UNAUTHORIZED,
                format!("Unauthorized: the client certificate is not valid: {reason}"),
            );
        }
    }
    let options = match LogOptions::parse(&query) {
        Ok(options) => options,
        Err(message) => return plain(StatusCode::BAD_REQUEST, message),
    };
    let Some(logs) = state.index.get(&namespace, &pod) else {
        return plain(StatusCode::NOT_FOUND, format!("pod {pod:?} does not exist"));
    };
    let Some(entry) = logs.containers.iter().find(|c| c.name == container) else {
        return plain(
            StatusCode::NOT_FOUND,
            format!("container {container:?} not found in pod {pod:?}"),
        );
    };
    let (instance, current) = if options.previous {
        if entry.restart_count == 0 {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("previous terminated container {container:?} in pod {pod:?} not found"),
            );
        }
        (entry.restart_count - 1, false)
    } else {
        if !entry.started {
            let reason = entry
                .waiting_reason
                .clone()
                .unwrap_or_else(|| "ContainerCreating".to_string());
            return plain(
                StatusCode::BAD_REQUEST,
                format!("container {container:?} in pod {pod:?} is waiting to start: {reason}"),
            );
        }
        (entry.restart_count, true)
    };
    let path = log_path(&logs.dir, &container, instance);
    let mut file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(error) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("cannot read the log of container {container:?} in pod {pod:?}: {error}"),
            );
        }
    };
    let start = match file.metadata().and_then(|meta| {
        let len = meta.len();
        match options.tail_lines {
            Some(lines) => tail_offset(&mut file, len, lines),
            None => Ok(0),
        }
    }) {
        Ok(start) => start,
        Err(error) => {
            return plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot read {}: {error}", path.display()),
            );
        }
    };
    let follow = options.follow && current && entry.running;
    let reader = Follower {
        file,
        position: start,
        remaining: options.limit_bytes,
        follow: follow.then(|| FollowTarget {
            index: state.index.clone(),
            namespace,
            pod,
            uid: logs.uid.clone(),
            container,
            restart_count: instance,
        }),
        finishing: false,
    };
    let stream = futures::stream::unfold(reader, |mut reader| async move {
        let chunk = reader.next_chunk().await?;
        Some((Ok::<Bytes, std::io::Error>(chunk), reader))
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain")],
        Body::from_stream(stream),
    )
        .into_response()
}

/// Which container instance a follower waits on.
struct FollowTarget {
    index: LogIndex,
    namespace: String,
    pod: String,
    uid: String,
    container: String,
    restart_count: u32,
}

/// Reads a log from `position`, then (following) waits for more until the instance ends.
struct Follower {
    file: std::fs::File,
    position: u64,
    remaining: Option<u64>,
    follow: Option<FollowTarget>,
    /// The instance has ended: one last read, then stop.
    finishing: bool,
}

impl Follower {
    fn read_some(&mut self) -> std::io::Result<Bytes> {
        let want = match self.remaining {
            Some(0) => return Ok(Bytes::new()),
            Some(left) => usize::try_from(left).unwrap_or(CHUNK).min(CHUNK),
            None => CHUNK,
        };
        let mut buffer = vec![0u8; want];
        self.file.seek(SeekFrom::Start(self.position))?;
        let read = self.file.read(&mut buffer)?;
        buffer.truncate(read);
        self.position += read as u64;
        if let Some(left) = self.remaining.as_mut() {
            *left -= read as u64;
        }
        Ok(Bytes::from(buffer))
    }

    /// The next piece of the body, or `None` at its end.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            match self.read_some() {
                Ok(bytes) if !bytes.is_empty() => return Some(bytes),
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(%error, "log read failed");
                    return None;
                }
            }
            if self.remaining == Some(0) || self.finishing {
                return None;
            }
            let target = self.follow.as_ref()?;
            if !target.index.still_running(
                &target.namespace,
                &target.pod,
                &target.uid,
                &target.container,
                target.restart_count,
            ) {
                // Whatever the process wrote before it ended is read once more.
                self.finishing = true;
                continue;
            }
            tokio::time::sleep(FOLLOW_POLL).await;
        }
    }
}

/// Serves the endpoint on `listener` until `shutdown`.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    auth: ClientAuth,
    index: LogIndex,
    shutdown: CancellationToken,
) {
    let app = Router::new()
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(container_logs),
        )
        .with_state(AppState { index });
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30));
    let builder = Arc::new(builder);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    tracing::warn!(%error, "log endpoint: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let auth = auth.clone();
        let app = app.clone();
        let builder = Arc::clone(&builder);
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let stream =
                match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(error)) => {
                        tracing::debug!(%peer, %error, "log endpoint: TLS handshake failed");
                        return;
                    }
                    Err(_) => return,
                };
            let caller = auth.judge(stream.get_ref().1.peer_certificates());
            let service = TowerToHyperService::new(app.map_request(
                move |mut request: http::Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(caller.clone());
                    request
                },
            ));
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            if let Err(error) = watcher.watch(connection.into_owned()).await {
                tracing::debug!(%peer, %error, "log endpoint: connection ended with an error");
            }
        });
    }
    drop(listener);
    // Followers end when their container does; do not wait for them at shutdown.
    let _ = tokio::time::timeout(Duration::from_secs(1), graceful.shutdown()).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn tail(text: &str, lines: u64) -> String {
        let mut cursor = Cursor::new(text.as_bytes().to_vec());
        let offset = tail_offset(&mut cursor, text.len() as u64, lines).expect("tail");
        text[usize::try_from(offset).expect("offset")..].to_string()
    }

    #[test]
    fn tail_returns_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(tail("a\nb\nc\n", 3), "a\nb\nc\n");
        assert_eq!(tail("a\nb\nc\n", 10), "a\nb\nc\n");
        assert_eq!(tail("a\nb\nc", 1), "c");
        assert_eq!(tail("a\nb\nc", 2), "b\nc");
        assert_eq!(tail("a\nb\n", 0), "");
        assert_eq!(tail("", 5), "");
        assert_eq!(tail("\n\n\n", 2), "\n\n");
        // Across read chunks.
        let long: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        assert_eq!(tail(&long, 2), "line 4998\nline 4999\n");
    }

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn log_options_parse_and_validate_as_upstream() {
        assert_eq!(
            LogOptions::parse(&query(&[
                ("follow", "true"),
                ("previous", "0"),
                ("tailLines", "10"),
                ("limitBytes", "5"),
                ("timestamps", "true"),
            ])),
            Ok(LogOptions {
                follow: true,
                previous: false,
                tail_lines: Some(10),
                limit_bytes: Some(5),
            })
        );
        for bad in [
            ("follow", "yes"),
            ("tailLines", "-1"),
            ("tailLines", "x"),
            ("limitBytes", "0"),
            ("sinceSeconds", "0"),
            ("sinceTime", "noon"),
        ] {
            assert!(LogOptions::parse(&query(&[bad])).is_err(), "{bad:?}");
        }
        assert!(
            LogOptions::parse(&query(&[
                ("sinceSeconds", "5"),
                ("sinceTime", "2025-01-01T00:00:00Z")
            ]))
            .is_err()
        );
    }

    #[tokio::test]
    async fn a_follower_ends_when_the_instance_stops_running() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = log_path(dir.path(), "c", 0);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, "one\n").expect("write");
        let index = LogIndex::default();
        let publish = |running: bool| {
            index.publish(
                "ns",
                "p",
                PodLogs {
                    uid: "u".into(),
                    dir: dir.path().to_path_buf(),
                    containers: vec![ContainerLogs {
                        name: "c".into(),
                        restart_count: 0,
                        started: true,
                        running,
                        waiting_reason: None,
                    }],
                },
            )
        };
        publish(true);
        let mut follower = Follower {
            file: std::fs::File::open(&path).expect("open"),
            position: 0,
            remaining: None,
            follow: Some(FollowTarget {
                index: index.clone(),
                namespace: "ns".into(),
                pod: "p".into(),
                uid: "u".into(),
                container: "c".into(),
                restart_count: 0,
            }),
            finishing: false,
        };
        assert_eq!(follower.next_chunk().await.as_deref(), Some(&b"one\n"[..]));
        {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .expect("append");
            file.write_all(b"two\n").expect("write");
        }
        assert_eq!(follower.next_chunk().await.as_deref(), Some(&b"two\n"[..]));
        // The process wrote its last line and ended.
        {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .expect("append");
            file.write_all(b"three\n").expect("write");
        }
        publish(false);
        assert_eq!(
            follower.next_chunk().await.as_deref(),
            Some(&b"three\n"[..])
        );
        assert_eq!(follower.next_chunk().await, None);
        index.forget("ns", "p", "other-uid");
        assert!(index.get("ns", "p").is_some());
        index.forget("ns", "p", "u");
        assert!(index.get("ns", "p").is_none());
    }
}
