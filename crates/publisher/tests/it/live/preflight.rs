//! Live scenario: a server logging in `binlog_format=STATEMENT` is refused by the pre-flight
//! check, before any event is read, with a message saying to set ROW; after
//! `SET GLOBAL binlog_format = 'ROW'` the same command streams the ROW changes.

use crate::support;

use support::{dump, Server};

#[test]
fn statement_format_is_rejected() {
    let Some(db) = Server::start("live-preflight", &["--binlog-format=STATEMENT"]) else { return };
    assert_eq!(db.scalar("SELECT @@global.binlog_format"), "STATEMENT");
    db.sql("CREATE DATABASE t; CREATE TABLE t.s (id INT PRIMARY KEY); INSERT INTO t.s VALUES (1)");

    let run = dump(&db, &["--from", "earliest"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(run.stderr.contains("binlog_format") && run.stderr.contains("is STATEMENT"), "{}", run.stderr);
    assert!(run.stderr.contains("set binlog_format=ROW"), "{}", run.stderr);

    // the same server switched to ROW (new sessions) streams the changes made since
    db.sql("SET GLOBAL binlog_format = 'ROW'");
    let (file, pos) = db.master_status();
    db.sql("INSERT INTO t.s VALUES (2), (3)");
    let pos_s = pos.to_string();
    let run = dump(&db, &["--start-file", &file, "--start-position", &pos_s]).ok();
    let ids = support::ids(&run.rows());
    let want: Vec<i64> =
        db.column("SELECT id FROM t.s WHERE id > 1 ORDER BY id").iter().map(|s| s.parse().unwrap()).collect();
    assert_eq!(ids, want);
}
