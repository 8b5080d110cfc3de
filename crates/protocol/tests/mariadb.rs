//! Scenarios against a real MariaDB (10.11 here), one throw-away server per test.
//! Skipped (loudly) when mariadbd is absent, unless SLUICE_REQUIRE_MARIADB is set.

mod support;

use std::time::Duration;

use sluice_protocol::gtid::MariadbGtidList;
use sluice_protocol::{Connection, DumpRequest, Error, StartPosition, TlsMode};
use support::MariaDb;

/// Binlog event type codes (offset 4 of the event header).
const ROTATE: u8 = 4;
const FORMAT_DESCRIPTION: u8 = 15;
const XID: u8 = 16;
const WRITE_ROWS_V1: u8 = 23;
const HEARTBEAT: u8 = 27;
const MARIADB_GTID: u8 = 162;

fn event_type(ev: &[u8]) -> u8 {
    ev[4]
}

async fn native(db: &MariaDb) -> Connection {
    Connection::connect(db.opts("native", "native-pw")).await.expect("connect as native")
}

#[tokio::test]
async fn native_password_queries_and_errors() {
    let Some(db) = MariaDb::start(false) else {
        return;
    };
    let mut c = native(&db).await;
    assert!(c.is_mariadb(), "{}", c.server_version());
    assert!(c.server_version().contains("MariaDB"));
    assert!(!c.is_tls());
    c.ping().await.unwrap();

    let rs = c.query("SELECT 1 AS one, NULL AS nothing, 'x' AS ex, '' AS empty").await.unwrap();
    assert_eq!(rs.columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["one", "nothing", "ex", "empty"]);
    assert_eq!(rs.rows, vec![vec![Some(b"1".to_vec()), None, Some(b"x".to_vec()), Some(vec![])]]);

    c.query_drop("CREATE DATABASE t").await.unwrap();
    c.query_drop("CREATE TABLE t.a (id INT PRIMARY KEY, v VARCHAR(10) NULL)").await.unwrap();
    c.query_drop("INSERT INTO t.a VALUES (1, 'one'), (2, NULL), (3, 'three')").await.unwrap();
    let rs = c.query("SELECT id, v FROM t.a ORDER BY id").await.unwrap();
    assert_eq!(
        rs.to_strings(),
        vec![
            vec![Some("1".into()), Some("one".into())],
            vec![Some("2".into()), None],
            vec![Some("3".into()), Some("three".into())],
        ]
    );
    let rs = c.query("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(rs.get_str(0, 0).as_deref(), Some("native@%"));

    // an SQL error is a server error and the connection stays usable
    let e = c.query("SELEC 1").await.unwrap_err();
    assert_eq!(e.server_error().map(|s| s.code), Some(1064), "{e}");
    assert!(!e.is_transient());
    c.ping().await.unwrap();
    c.quit().await.unwrap();

    // wrong password: an Auth error with the server's message
    let e = Connection::connect(db.opts("native", "wrong")).await.unwrap_err();
    match &e {
        Error::Auth { user, server: Some(s), message, .. } => {
            assert_eq!(user, "native");
            assert_eq!(s.code, 1045);
            assert_eq!(s.sql_state, "28000");
            assert!(message.contains("Access denied for user 'native'"), "{message}");
        }
        other => panic!("expected an Auth error, got {other:?}"),
    }
    assert!(!e.is_transient());
}

#[tokio::test]
async fn ed25519_authentication() {
    let Some(db) = MariaDb::start(false) else {
        return;
    };
    let mut c = Connection::connect(db.opts("ed", "ed-pw")).await.expect("connect as ed");
    let rs = c.query("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(rs.get_str(0, 0).as_deref(), Some("ed@%"));
    let e = Connection::connect(db.opts("ed", "not-it")).await.unwrap_err();
    match &e {
        Error::Auth { plugin, server: Some(s), .. } => {
            assert_eq!(plugin, "client_ed25519");
            assert_eq!(s.code, 1045);
        }
        other => panic!("expected an Auth error, got {other:?}"),
    }
}

#[tokio::test]
async fn tls_modes() {
    let Some(db) = MariaDb::start(true) else {
        return;
    };
    let tls = db.tls.as_ref().unwrap();

    // verify-ca with the generated CA
    let mut o = db.opts("tlsonly", "tls-pw");
    o.tls = TlsMode::VerifyCa;
    o.ca_file = Some(tls.ca.clone());
    let mut c = Connection::connect(o.clone()).await.expect("verify-ca");
    assert!(c.is_tls());
    let rs = c.query("SHOW SESSION STATUS LIKE 'Ssl_version'").await.unwrap();
    let version = rs.get_str(0, 1).unwrap_or_default();
    assert!(version.starts_with("TLS"), "Ssl_version = {version:?}");

    // verify-identity: the certificate names IP 127.0.0.1
    let mut vi = o.clone();
    vi.tls = TlsMode::VerifyIdentity;
    Connection::connect(vi).await.expect("verify-identity").ping().await.unwrap();

    // a wrong CA is rejected
    let mut bad = o.clone();
    bad.ca_file = Some(tls.other_ca.clone());
    let e = Connection::connect(bad).await.unwrap_err();
    assert!(matches!(e, Error::Tls(_)), "{e:?}");
    assert!(!e.is_transient());

    // preferred: encrypted without verification
    let mut p = db.opts("native", "native-pw");
    p.tls = TlsMode::Preferred;
    assert!(Connection::connect(p).await.unwrap().is_tls());

    // ed25519 over TLS
    let mut ed = db.opts("ed", "ed-pw");
    ed.tls = TlsMode::Required;
    assert!(Connection::connect(ed).await.unwrap().is_tls());

    // a REQUIRE SSL user without TLS is refused by the server
    let e = Connection::connect(db.opts("tlsonly", "tls-pw")).await.unwrap_err();
    assert_eq!(e.server_error().map(|s| s.code), Some(1045), "{e:?}");
}

#[tokio::test]
async fn tls_required_without_server_tls_fails() {
    let Some(db) = MariaDb::start(false) else {
        return;
    };
    let mut o = db.opts("native", "native-pw");
    o.tls = TlsMode::Required;
    let e = Connection::connect(o).await.unwrap_err();
    assert!(matches!(e, Error::Tls(ref m) if m.contains("does not offer TLS")), "{e:?}");
}

#[tokio::test]
async fn large_row_over_16_mib() {
    let Some(db) = MariaDb::start(false) else {
        return;
    };
    let mut c = native(&db).await;
    let rs = c.query("SELECT REPEAT('x', 17000000) AS big, 42").await.unwrap();
    let v = rs.rows[0][0].as_ref().unwrap();
    assert_eq!(v.len(), 17_000_000);
    assert!(v.iter().all(|&b| b == b'x'));
    assert_eq!(rs.get_str(0, 1).as_deref(), Some("42"));
    // the connection's packet cap is enforced on reassembly
    let mut o = db.opts("native", "native-pw");
    o.max_packet_size = 1 << 20;
    let mut small = Connection::connect(o).await.unwrap();
    let e = small.query("SELECT REPEAT('x', 2000000)").await.unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e:?}");
}

async fn master_status(c: &mut Connection) -> (String, u64) {
    let rs = c.query("SHOW MASTER STATUS").await.unwrap();
    (rs.get_str(0, 0).unwrap(), rs.get_str(0, 1).unwrap().parse().unwrap())
}

#[tokio::test]
async fn binlog_dump_by_file_and_position() {
    let Some(db) = MariaDb::start(false) else {
        return;
    };
    let mut c = native(&db).await;
    c.query_drop("CREATE DATABASE t").await.unwrap();
    c.query_drop("CREATE TABLE t.a (id INT PRIMARY KEY, v TEXT)").await.unwrap();
    c.query_drop("INSERT INTO t.a VALUES (1, 'one'), (2, 'two')").await.unwrap();
    let (file, end) = master_status(&mut c).await;

    let mut req = DumpRequest::new(101, StartPosition::FilePosition { file: file.clone(), position: 4 });
    req.non_blocking = true;
    let mut stream = c.start_binlog_dump(req).await.unwrap();
    let mut types = Vec::new();
    let mut last_end = 0u64;
    while let Some(ev) = stream.next_event().await.unwrap() {
        let t = event_type(&ev);
        let size = u32::from_le_bytes(ev[9..13].try_into().unwrap()) as usize;
        assert_eq!(size, ev.len(), "event size field matches the packet");
        let next = u64::from(u32::from_le_bytes(ev[13..17].try_into().unwrap()));
        if next != 0 {
            last_end = next;
        }
        types.push(t);
    }
    assert!(matches!(types[0], ROTATE | FORMAT_DESCRIPTION), "first event {types:?}");
    assert!(types.contains(&FORMAT_DESCRIPTION));
    assert!(types.contains(&WRITE_ROWS_V1), "{types:?}");
    assert!(types.contains(&XID), "{types:?}");
    assert_eq!(last_end, end, "the dump ends at SHOW MASTER STATUS's position");
    // the server closes the connection once the dump has ended (MariaDB's COM_BINLOG_DUMP
    // handler always ends the session)
    drop(stream);
    let c = native(&db).await;

    // a file that does not exist: 1236 from the stream, definite
    let mut req = DumpRequest::new(102, StartPosition::FilePosition { file: "mysql-bin.999999".into(), position: 4 });
    req.non_blocking = true;
    let mut stream = c.start_binlog_dump(req).await.unwrap();
    let e = stream.next_event().await.unwrap_err();
    assert_eq!(e.server_error().map(|s| s.code), Some(1236), "{e:?}");
    assert!(!e.is_transient());
}

/// Read ahead, the stream gives the very events a direct read gives, in order, across runs of
/// small transactions, an event larger than the read-ahead bound (1 MiB, one credit chunk) and
/// a `ready` dropped before it resolved now and then; an error from the server arrives through
/// it as directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_ahead_gives_what_a_direct_read_gives() {
    let Some(db) = MariaDb::start(false) else {
        return;
    };
    let mut c = native(&db).await;
    c.query_drop("CREATE DATABASE t").await.unwrap();
    c.query_drop("CREATE TABLE t.a (id INT PRIMARY KEY, v LONGTEXT)").await.unwrap();
    for i in 0..1500 {
        c.query_drop(&format!("INSERT INTO t.a VALUES ({i}, 'row {i}')")).await.unwrap();
    }
    // 3 MiB in one event: more than the read-ahead's bound of 1 MiB below
    c.query_drop("INSERT INTO t.a VALUES (100000, REPEAT('x', 3145728))").await.unwrap();
    for i in 1500..1600 {
        c.query_drop(&format!("INSERT INTO t.a VALUES ({i}, 'row {i}')")).await.unwrap();
    }
    let (file, _) = master_status(&mut c).await;
    let dump = |id: u32, file: &str| {
        let mut req = DumpRequest::new(id, StartPosition::FilePosition { file: file.to_string(), position: 4 });
        req.non_blocking = true;
        req
    };

    let mut direct = Vec::new();
    let mut stream = native(&db).await.start_binlog_dump(dump(201, &file)).await.unwrap();
    while let Some(ev) = stream.next_event().await.unwrap() {
        direct.push(ev);
    }
    assert!(direct.len() > 6000, "{} events", direct.len());
    assert!(direct.iter().any(|ev| ev.len() > 3 << 20), "the large event");

    let mut ahead = native(&db).await.start_binlog_dump(dump(202, &file)).await.unwrap().read_ahead(1);
    let mut got = Vec::new();
    let read = async {
        loop {
            if got.len() % 7 == 3 {
                // dropped before it resolves, or resolved: either way nothing is lost
                let _ = tokio::time::timeout(Duration::ZERO, ahead.ready()).await;
            }
            match ahead.next_event().await.unwrap() {
                Some(ev) => got.push(ev),
                None => break,
            }
        }
    };
    // (a bound below two credit chunks once left the reader waiting for room forever)
    tokio::time::timeout(Duration::from_secs(60), read).await.expect("the read-ahead stalled");
    assert_eq!(got.len(), direct.len());
    assert!(got == direct, "the events differ");
    assert!(ahead.next_event().await.unwrap().is_none(), "the end stays the end");

    let mut ahead =
        native(&db).await.start_binlog_dump(dump(203, "mysql-bin.999999")).await.unwrap().read_ahead(1 << 20);
    ahead.ready().await;
    let e = ahead.next_event().await.unwrap_err();
    assert_eq!(e.server_error().map(|s| s.code), Some(1236), "{e:?}");
}

#[tokio::test]
async fn mariadb_gtid_dump() {
    let Some(db) = MariaDb::start(false) else {
        return;
    };
    let mut c = native(&db).await;
    c.query_drop("CREATE DATABASE t").await.unwrap();
    c.query_drop("CREATE TABLE t.a (id INT PRIMARY KEY)").await.unwrap();
    c.query_drop("INSERT INTO t.a VALUES (1)").await.unwrap();
    let pos = c.query("SELECT @@gtid_binlog_pos").await.unwrap().get_str(0, 0).unwrap();
    let start: MariadbGtidList = pos.parse().unwrap();
    c.query_drop("INSERT INTO t.a VALUES (2)").await.unwrap();
    let after = c.query("SELECT @@gtid_binlog_pos").await.unwrap().get_str(0, 0).unwrap();

    let mut req = DumpRequest::new(103, StartPosition::MariadbGtid(start));
    req.non_blocking = true;
    let mut stream = c.start_binlog_dump(req).await.unwrap();
    let mut gtid_events = 0;
    let mut rows_events = 0;
    while let Some(ev) = stream.next_event().await.unwrap() {
        match event_type(&ev) {
            MARIADB_GTID => {
                gtid_events += 1;
                // GTID event body: seq_no u64, domain id u32 (after the 19-byte header)
                let seq = u64::from_le_bytes(ev[19..27].try_into().unwrap());
                let domain = u32::from_le_bytes(ev[27..31].try_into().unwrap());
                assert_eq!(format!("{domain}-1-{seq}"), after, "only the transaction after the start GTID");
            }
            WRITE_ROWS_V1 => rows_events += 1,
            _ => {}
        }
    }
    assert_eq!((gtid_events, rows_events), (1, 1));

    // a GTID the server never wrote (strict mode): 1236
    drop(stream);
    let c = native(&db).await;
    let mut req = DumpRequest::new(104, StartPosition::MariadbGtid("0-1-999999".parse().unwrap()));
    req.non_blocking = true;
    let mut stream = c.start_binlog_dump(req).await.unwrap();
    let e = stream.next_event().await.unwrap_err();
    assert_eq!(e.server_error().map(|s| s.code), Some(1236), "{e:?}");
}

#[tokio::test]
async fn blocking_dump_heartbeats_and_read_timeout() {
    let Some(db) = MariaDb::start(false) else {
        return;
    };
    let c = native(&db).await;
    let mut req = DumpRequest::new(105, StartPosition::MariadbGtid(MariadbGtidList::new()));
    req.heartbeat_period = Some(Duration::from_millis(200));
    let mut stream = c.start_binlog_dump(req).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let ev = stream.next_event().await.unwrap().expect("blocking dumps do not end");
        if event_type(&ev) == HEARTBEAT {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no heartbeat within 10 s");
    }

    // without heartbeats an idle blocking dump hits the read timeout
    let mut o = db.opts("native", "native-pw");
    o.read_timeout = Some(Duration::from_millis(500));
    let c = Connection::connect(o).await.unwrap();
    let mut stream =
        c.start_binlog_dump(DumpRequest::new(106, StartPosition::MariadbGtid(MariadbGtidList::new()))).await.unwrap();
    let e = loop {
        match stream.next_event().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("a blocking dump ended"),
            Err(e) => break e,
        }
    };
    assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
    assert!(e.is_transient());
}
