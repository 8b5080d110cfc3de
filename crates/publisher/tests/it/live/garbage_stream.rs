//! Bad bytes on the replication connection: a proxy between `sluice dump --source` and a real
//! MariaDB forwards the handshake and the queries untouched and, once the binlog dump has
//! begun, damages the first rows event the server sends: a flipped bit (the event's CRC32 no
//! longer holds), an event header claiming 4 GB, the event replaced by garbage, a packet header
//! claiming 16 MiB followed by a few bytes and a closed connection, and a packet out of sequence.
//! Each ends in a clear message that names where and why (exit 65 for corrupt events, 1 for a
//! broken protocol), never a panic and never a row printed from damaged bytes; a connection that
//! broke once resumes and prints every row exactly once.
//!
//! The damage is done by the test's own proxy because no server sends such bytes on purpose;
//! everything else on the wire is the real server's.

use crate::support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use support::{sluice, Server};

/// What the proxy does to the first rows event of a binlog dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    /// Flip one bit in the event's body.
    FlipBit,
    /// Set the event header's size field to 0xFFFF_FF00.
    HugeEventSize,
    /// Replace everything after the OK marker with pseudo-random bytes.
    Garbage,
    /// Send a packet header claiming 0xFFFFFF bytes, 100 bytes of it, and close.
    OversizedThenClose,
    /// Send the packet with a sequence id off by 7.
    BadSequence,
}

/// A MySQL-protocol proxy that damages binlog events (`once`: on the first connection only).
struct Tamper {
    port: u16,
    connections: Arc<AtomicUsize>,
}

impl Tamper {
    fn start(upstream: u16, damage: Damage, once: bool) -> Tamper {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&connections);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let n = count.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { return };
                let dumping = Arc::new(AtomicBool::new(false));
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let d = Arc::clone(&dumping);
                std::thread::spawn(move || up(c2, s2, &d));
                let damage = (!once || n == 0).then_some(damage);
                std::thread::spawn(move || down(server, client, &dumping, damage));
            }
        });
        Tamper { port, connections }
    }
}

/// Reads one packet: (sequence id, payload), None at the end.
fn packet(from: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut head = [0u8; 4];
    from.read_exact(&mut head).ok()?;
    let len = usize::from(head[0]) | usize::from(head[1]) << 8 | usize::from(head[2]) << 16;
    let mut payload = vec![0u8; len];
    from.read_exact(&mut payload).ok()?;
    Some((head[3], payload))
}

fn write_packet(to: &mut TcpStream, seq: u8, payload: &[u8]) -> bool {
    let len = payload.len();
    #[allow(clippy::cast_possible_truncation)]
    let head = [len as u8, (len >> 8) as u8, (len >> 16) as u8, seq];
    to.write_all(&head).is_ok() && to.write_all(payload).is_ok()
}

/// Client to server, untouched; notes when COM_BINLOG_DUMP (0x12) goes by.
fn up(mut client: TcpStream, mut server: TcpStream, dumping: &AtomicBool) {
    while let Some((seq, payload)) = packet(&mut client) {
        if seq == 0 && payload.first() == Some(&0x12) {
            dumping.store(true, Ordering::SeqCst);
        }
        if !write_packet(&mut server, seq, &payload) {
            break;
        }
    }
    let _ = server.shutdown(Shutdown::Both);
}

/// Server to client: the first rows event of the dump (types 23-25, MariaDB's v1) damaged.
fn down(mut server: TcpStream, mut client: TcpStream, dumping: &AtomicBool, mut damage: Option<Damage>) {
    while let Some((seq, mut payload)) = packet(&mut server) {
        // payload: 0x00, then the event header (timestamp 4, type 1, server id 4, size 4, ...)
        let rows_event = payload.len() > 30 && payload[0] == 0 && (23..=25).contains(&payload[5]);
        let mut seq_out = seq;
        if dumping.load(Ordering::SeqCst) && rows_event {
            match damage.take() {
                Some(Damage::FlipBit) => payload[25] ^= 0x10,
                Some(Damage::HugeEventSize) => payload[10..14].copy_from_slice(&0xFFFF_FF00u32.to_le_bytes()),
                Some(Damage::Garbage) => {
                    let mut x = 0x9E37_79B9u32;
                    for b in &mut payload[1..] {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        *b = x.to_le_bytes()[0];
                    }
                }
                Some(Damage::OversizedThenClose) => {
                    let _ = client.write_all(&[0xff, 0xff, 0xff, seq]);
                    let _ = client.write_all(&[0x5a; 100]);
                    break;
                }
                Some(Damage::BadSequence) => seq_out = seq.wrapping_add(7),
                None => {}
            }
        }
        if !write_packet(&mut client, seq_out, &payload) {
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = server.shutdown(Shutdown::Both);
}

#[test]
fn damaged_events_on_the_wire_stop_clearly_or_resume_whole() {
    let Some(db) = Server::start("live-garbage", &[]) else { return };
    db.sql("CREATE DATABASE g; CREATE TABLE g.t (id INT PRIMARY KEY, v VARCHAR(40))");
    for i in 1..=20 {
        db.sql(&format!("INSERT INTO g.t VALUES ({i}, REPEAT('v', {i}))"));
    }
    let dump = |port: u16| {
        let url = format!("mysql://root@127.0.0.1:{port}");
        sluice(&["dump", "--source", &url, "--tls", "disabled", "--server-id", "61234"])
    };
    let clean = dump(db.port).ok();
    let want = support::ids(&clean.rows());
    assert_eq!(want, (1..=20).collect::<Vec<i64>>());

    for (damage, code, says) in [
        (Damage::FlipBit, 65, "checksum"),
        (Damage::HugeEventSize, 65, "4294967040"),
        (Damage::Garbage, 65, ""),
        (Damage::BadSequence, 1, "streaming the binlog after mysql-bin.000001:617 (GTID 0-1-2): packet sequence id"),
    ] {
        let proxy = Tamper::start(db.port, damage, false);
        let run = dump(proxy.port);
        eprintln!("{damage:?}: exit {:?}: {}", run.code, run.stderr.trim());
        assert_eq!(run.code, Some(code), "{damage:?}: {}", run.stderr);
        assert!(!run.stderr.contains("panicked"), "{damage:?}: {}", run.stderr);
        assert!(run.stderr.contains(says), "{damage:?}: {says:?} in {}", run.stderr);
        if code == 65 {
            // the place: the binlog file and the event's offset
            assert!(run.stderr.contains("mysql-bin.000001 at offset 784 ("), "{}", run.stderr);
        }
        // nothing from the damaged event or after it: the rows printed are a clean prefix
        let got = support::ids(&run.rows());
        assert_eq!(got[..], want[..got.len()], "{damage:?}");
        assert!(got.len() < want.len(), "{damage:?}: every row printed from damaged bytes?");
    }

    // a connection that breaks in the middle of a packet, once: resumed, every row once
    let proxy = Tamper::start(db.port, Damage::OversizedThenClose, true);
    let run = dump(proxy.port);
    eprintln!("OversizedThenClose (once): exit {:?}: {}", run.code, run.stderr.trim());
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(proxy.connections.load(Ordering::SeqCst) >= 2, "it reconnected");
    assert_eq!(support::ids(&run.rows()), want);
}
