//! A loopback TCP proxy that can stop forwarding without closing anything: the failure a real
//! server cannot be made to show on demand (a network that hangs, a peer that stops answering
//! mid-conversation), for tests of client-side timeouts.
//!
//! While stalled, the proxy still accepts connections and keeps every socket open, but moves
//! no byte in either direction; on [`StallProxy::resume`] it carries on where it stopped,
//! losing nothing. [`StallProxy::sever`] closes every open connection at once, as a network
//! failure would, and lets clients connect again. Plain threads, so it works under any test
//! runtime.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;

/// How often an idle or stalled pump looks at the flags.
const POLL: Duration = Duration::from_millis(20);

pub struct StallProxy {
    address: SocketAddr,
    flags: Arc<Flags>,
    acceptor: Option<JoinHandle<()>>,
}

struct Flags {
    stalled: AtomicBool,
    stopping: AtomicBool,
    /// Bumped by [`StallProxy::sever`]: a connection opened in an older generation closes.
    generation: AtomicU64,
}

impl StallProxy {
    /// Listens on a free loopback port and forwards every connection to `target`.
    pub fn start(target: SocketAddr) -> anyhow::Result<StallProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").context("bind the proxy")?;
        let address = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let flags = Arc::new(Flags {
            stalled: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            generation: AtomicU64::new(0),
        });
        let acceptor = {
            let flags = Arc::clone(&flags);
            std::thread::Builder::new()
                .name("stall-proxy".into())
                .spawn(move || accept_loop(listener, target, flags))
                .context("spawn the proxy thread")?
        };
        Ok(StallProxy {
            address,
            flags,
            acceptor: Some(acceptor),
        })
    }

    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// Stops moving bytes, on open connections and new ones alike.
    pub fn stall(&self) {
        self.flags.stalled.store(true, Ordering::SeqCst);
    }

    /// Moves bytes again, starting with those held back.
    pub fn resume(&self) {
        self.flags.stalled.store(false, Ordering::SeqCst);
    }

    /// Closes every connection open now, in both directions, dropping bytes held back; later
    /// connections are forwarded as usual. Each connection closes within one poll (20 ms).
    pub fn sever(&self) {
        self.flags.generation.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        self.flags.stopping.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept_loop(listener: TcpListener, target: SocketAddr, flags: Arc<Flags>) {
    let mut pumps = Vec::new();
    while !flags.stopping.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                let Ok(server) = TcpStream::connect(target) else {
                    // Nothing to forward to: close, as a refused connection would.
                    continue;
                };
                for (from, to) in [(&client, &server), (&server, &client)] {
                    let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else {
                        continue;
                    };
                    let flags = Arc::clone(&flags);
                    let generation = flags.generation.load(Ordering::SeqCst);
                    pumps.push(std::thread::spawn(move || {
                        pump(from, to, &flags, generation)
                    }));
                }
            }
            Err(error) if error.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(_) => std::thread::sleep(POLL),
        }
        pumps.retain(|pump: &JoinHandle<()>| !pump.is_finished());
    }
    for pump in pumps {
        let _ = pump.join();
    }
}

/// Copies `from` to `to` until either side closes or the proxy stops; holds still while
/// stalled (bytes then wait in the kernel's buffers). A connection of an older `generation`
/// than the proxy's is severed: both sockets shut in both directions.
fn pump(mut from: TcpStream, mut to: TcpStream, flags: &Flags, generation: u64) {
    let _ = from.set_nonblocking(false);
    let _ = from.set_read_timeout(Some(POLL));
    let mut buffer = [0u8; 16 * 1024];
    while !flags.stopping.load(Ordering::SeqCst) {
        if flags.generation.load(Ordering::SeqCst) != generation {
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
            return;
        }
        if flags.stalled.load(Ordering::SeqCst) {
            std::thread::sleep(POLL);
            continue;
        }
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
