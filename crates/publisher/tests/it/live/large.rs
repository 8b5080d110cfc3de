//! Live scenarios with events and transactions beyond the 16 MiB packet limit: a 20 MB
//! LONGBLOB in one row (one event split over two packets) and one transaction of 5000 rows
//! totalling 20 MB decode to exact values (sha256 compared with the server's `SHA2()`); then
//! the same stream through a TCP proxy that cuts the connection once in the middle of the
//! large event: sluice reconnects and prints every row exactly once.

use crate::support;

use base64::Engine as _;
use sha2::{Digest, Sha256};
use support::proxy::FaultProxy;
use support::{of_table, Server};

const MANY_ROWS: usize = 5000;

fn sha256_b64(v: &serde_json::Value) -> (usize, String) {
    let bytes = base64::engine::general_purpose::STANDARD.decode(v.as_str().expect("a base64 string")).unwrap();
    let hex: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
    (bytes.len(), hex)
}

/// Checks the dump's rows against the server: the blob, then the 5000 rows.
fn check(rows: &[serde_json::Value], db: &Server) {
    let big = of_table(rows, "big");
    assert_eq!(big.len(), 1);
    let want = &db.sql("SELECT LENGTH(b), SHA2(b, 256) FROM t.big WHERE id = 1")[0];
    assert_eq!(sha256_b64(&big[0]["after"]["b"]), (want[0].parse().unwrap(), want[1].clone()));
    assert!(want[0].parse::<usize>().unwrap() > 16 << 20);

    let many = of_table(rows, "many");
    let want: Vec<(i64, usize, String)> = db
        .sql("SELECT id, LENGTH(payload), SHA2(payload, 256) FROM t.many ORDER BY id")
        .into_iter()
        .map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap(), r[2].clone()))
        .collect();
    let got: Vec<(i64, usize, String)> = many
        .iter()
        .map(|r| {
            let (len, sha) = sha256_b64(&r["after"]["payload"]);
            (r["after"]["id"].as_i64().unwrap(), len, sha)
        })
        .collect();
    assert_eq!(got.len(), MANY_ROWS);
    assert_eq!(got, want);
    // one transaction: one GTID and one xid for all of them
    let gtids: std::collections::BTreeSet<String> = many.iter().map(|r| r["gtid"].to_string()).collect();
    let xids: std::collections::BTreeSet<String> = many.iter().map(|r| r["xid"].to_string()).collect();
    assert_eq!((gtids.len(), xids.len()), (1, 1));
    assert_eq!(rows.len(), 1 + MANY_ROWS);
}

#[test]
fn transactions_beyond_16_mib_and_a_cut_connection() {
    let Some(db) = Server::start("live-large", &["--max-allowed-packet=64M"]) else { return };
    db.sql(
        "CREATE DATABASE t; CREATE TABLE t.big (id INT PRIMARY KEY, b LONGBLOB NOT NULL);
         CREATE TABLE t.many (id INT PRIMARY KEY, payload VARBINARY(4000) NOT NULL)",
    );
    let (file, pos) = db.master_status();
    // 20,000,000 bytes whose 1000-byte period does not divide 16 MiB: a lost or repeated
    // piece at a packet boundary changes the digest
    db.sql("INSERT INTO t.big VALUES (1, REPEAT(RANDOM_BYTES(1000), 20000))");
    db.sql(&format!(
        "INSERT INTO t.many SELECT seq, CONCAT(RANDOM_BYTES(1000), RANDOM_BYTES(1000), RANDOM_BYTES(1000), \
         RANDOM_BYTES(1000)) FROM t.seq_1_to_{MANY_ROWS}"
    ));
    let end = db.master_status();
    assert!(end.1 - pos > 40_000_000, "the binlog grew by {} bytes", end.1 - pos);

    let pos_s = pos.to_string();
    let run = support::dump(&db, &["--start-file", &file, "--start-position", &pos_s]).ok();
    check(&run.rows(), &db);
    assert_eq!(run.resume_file_pos(), end);
    assert!(!run.stderr.contains("Reconnected"), "{}", run.stderr);

    // through a proxy that cuts the first connection 10 MB into the stream: inside the blob's
    // 20 MB event, in the middle of its first 16 MiB packet
    let proxy = FaultProxy::cutting_first_after(db.port, 10_000_000);
    let url = format!("mysql://root@127.0.0.1:{}", proxy.port);
    let run = support::sluice(&[
        "dump",
        "--source",
        &url,
        "--tls",
        "disabled",
        "--start-file",
        &file,
        "--start-position",
        &pos_s,
    ])
    .ok();
    assert!(run.stderr.contains("The replication connection failed; reconnecting"), "{}", run.stderr);
    assert!(run.stderr.contains("Reconnected"), "{}", run.stderr);
    assert!(proxy.connections() >= 2);
    check(&run.rows(), &db);
    assert_eq!(run.resume_file_pos(), end);
}
