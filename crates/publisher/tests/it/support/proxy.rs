//! A TCP proxy on loopback that the fault scenarios put between Sluice and a real server
//! (MariaDB, the registry) to make the network fail the ways networks fail: cut (every
//! connection closed, new ones closed at once), stalled (connections kept open, no byte
//! forwarded, as when a path drops packets), throttled (a slow link), or, in front of an HTTP
//! server, answering every request with 503. It forwards real traffic to the real server; only
//! the network in between is simulated.
//!
//! The broker cannot be proxied this way: it advertises its own address in its metadata, so a
//! client leaves the proxy after bootstrap. The broker scenarios stall the broker process itself
//! (SIGSTOP) instead.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// What the network does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward everything.
    Pass,
    /// Keep connections open and forward nothing (new connections are accepted and stall too).
    Stall,
    /// Close every connection; close new ones at once.
    Cut,
    /// Forward at most this many bytes a second in each direction of each connection.
    Throttle(u64),
    /// Answer each HTTP request with `503 Service Unavailable` (the server is not contacted).
    Http503,
}

struct Shared {
    upstream: u16,
    mode: Mutex<Mode>,
    changed: Condvar,
    /// Open connections (client side, server side), to cut.
    open: Mutex<Vec<(TcpStream, TcpStream)>>,
    accepted: AtomicUsize,
    /// On the first connection only: close both sides after this many bytes from the server.
    first_cut_after: Option<usize>,
}

/// The proxy; it stops accepting when the test ends (its threads are not joined).
pub struct FaultProxy {
    /// The port Sluice is pointed at.
    pub port: u16,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// A proxy to `127.0.0.1:upstream`, forwarding.
    pub fn start(upstream: u16) -> FaultProxy {
        FaultProxy::with(upstream, None)
    }

    /// A proxy that closes its first connection after `n` bytes from the server (in the middle
    /// of whatever the server sends then), and forwards later connections untouched.
    pub fn cutting_first_after(upstream: u16, n: usize) -> FaultProxy {
        FaultProxy::with(upstream, Some(n))
    }

    fn with(upstream: u16, first_cut_after: Option<usize>) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            upstream,
            mode: Mutex::new(Mode::Pass),
            changed: Condvar::new(),
            open: Mutex::new(Vec::new()),
            accepted: AtomicUsize::new(0),
            first_cut_after,
        });
        let s = Arc::clone(&shared);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                accept(&s, client);
            }
        });
        FaultProxy { port, shared }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Changes what the network does; `Cut` and `Http503` close the open connections.
    pub fn set(&self, mode: Mode) {
        *self.shared.mode.lock().unwrap() = mode;
        self.shared.changed.notify_all();
        if matches!(mode, Mode::Cut | Mode::Http503) {
            for (c, s) in self.shared.open.lock().unwrap().drain(..) {
                let _ = c.shutdown(Shutdown::Both);
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.set(Mode::Cut);
    }
}

fn accept(s: &Arc<Shared>, client: TcpStream) {
    let n = s.accepted.fetch_add(1, Ordering::SeqCst);
    let mode = *s.mode.lock().unwrap();
    match mode {
        Mode::Cut => {
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
        Mode::Http503 => {
            std::thread::spawn(move || answer_503(client));
            return;
        }
        _ => {}
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", s.upstream)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else { return };
    if let (Ok(c3), Ok(s3)) = (client.try_clone(), server.try_clone()) {
        let mut open = s.open.lock().unwrap();
        open.retain(|(c, _)| c.peer_addr().is_ok());
        open.push((c3, s3));
    }
    let limit = if n == 0 { s.first_cut_after } else { None };
    let (up, down) = (Arc::clone(s), Arc::clone(s));
    std::thread::spawn(move || pump(&up, c2, s2, None));
    std::thread::spawn(move || pump(&down, server, client, limit));
}

/// Copies `from` to `to` as the mode allows; with a limit, stops after that many bytes. Closes
/// both when either side closes or the network is cut.
fn pump(s: &Shared, mut from: TcpStream, mut to: TcpStream, limit: Option<usize>) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut sent = 0usize;
    'outer: loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let n = limit.map_or(n, |l| n.min(l - sent));
        let mut mode = s.mode.lock().unwrap();
        while *mode == Mode::Stall {
            mode = s.changed.wait_timeout(mode, Duration::from_millis(200)).unwrap().0;
        }
        let now = *mode;
        drop(mode);
        match now {
            Mode::Cut | Mode::Http503 => break,
            Mode::Throttle(rate) => {
                // in slices, so a slow link delivers a steady trickle rather than bursts
                for part in buf[..n].chunks(1024) {
                    if to.write_all(part).is_err() {
                        break 'outer;
                    }
                    std::thread::sleep(Duration::from_secs_f64(part.len() as f64 / rate.max(1) as f64));
                }
            }
            _ => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
        sent += n;
        if limit.is_some_and(|l| sent >= l) {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

/// Reads an HTTP request (headers, then a `Content-Length` body), answers 503 and closes.
fn answer_503(mut c: TcpStream) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            match c.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let body: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < end + 4 + body {
            match c.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let json = r#"{"error_code":50301,"message":"unavailable (injected by the test's proxy)"}"#;
        // one answer per connection: a kept-alive one would go on answering 503 after the mode changed
        let reply = format!(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{json}",
            json.len()
        );
        let _ = c.write_all(reply.as_bytes());
        let _ = c.shutdown(Shutdown::Both);
        return;
    }
}
