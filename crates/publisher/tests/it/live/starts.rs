//! Starts the server cannot serve are refused before anything streams, with what is wrong:
//! `sluice check` tries `source.start` (a purged file, a GTID ahead of the server, GTIDs of the
//! other flavour) instead of printing `[ok]`; `sluice run` and `check` refuse an unparsable
//! start at load with exit 2, naming the variable that set it; `sluice dump --start-gtid` with a
//! MySQL GTID set on MariaDB is refused (it dumped from the beginning and then offered to resume
//! from the same GTID), and a MariaDB GTID ahead of the server is said to be ahead, not purged.
//! Real MariaDB and broker.

use crate::support;

use support::kafka::Services;
use support::{dump, sluice_cmd};

fn check(config: &std::path::Path, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = sluice_cmd().args(["check", "--config"]).arg(config).envs(env.iter().copied()).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

#[test]
fn unusable_starts_are_refused_with_the_reason() {
    let Some(services) = Services::start("live-starts", &[]) else { return };
    let db = &services.mariadb;
    db.sql_text(
        "CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY); INSERT INTO shop.t VALUES (1);
         FLUSH BINARY LOGS; INSERT INTO shop.t VALUES (2); FLUSH BINARY LOGS; INSERT INTO shop.t VALUES (3);",
    );
    // the newest GTID: its successors are in the files the purge keeps
    let kept_gtid = db.gtid_pos();
    db.sql_text("PURGE BINARY LOGS TO 'mysql-bin.000002';");
    let (config, _log) = services.config("starts", "", "");

    // a start the server can serve
    let (code, text) = check(&config, &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("source.start = \"earliest\" (now mysql-bin.000002:4 (GTID 0-1-"), "{text}");

    // a file the server purged
    let (code, text) = check(&config, &[("SLUICE_SOURCE__START", "mysql-bin.000001:4")]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(
            "[ERROR] start: source.start = \"mysql-bin.000001:4\": binlog mysql-bin.000001 is not on the server"
        ),
        "{text}"
    );
    // a position past the end of a file
    let (code, text) = check(&config, &[("SLUICE_SOURCE__START", "mysql-bin.000002:99999999")]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("is past the end of mysql-bin.000002"), "{text}");

    // MariaDB GTIDs: ahead of the server, and history the server no longer has
    let ahead = "0-1-999999";
    let (code, text) = check(&config, &[("SLUICE_SOURCE__START", ahead)]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("the server has not reached 0-1-999999"), "{text}");
    assert!(!text.contains("lost"), "ahead is not purged: {text}");
    let (code, text) = check(&config, &[("SLUICE_SOURCE__START", "0-1-1")]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("no longer has the transactions after 0-1-1"), "{text}");
    // ... and a GTID still there is fine
    let (code, text) = check(&config, &[("SLUICE_SOURCE__START", &kept_gtid)]);
    assert_eq!(code, Some(0), "{kept_gtid}: {text}");

    // a GTID of a server the history never had (the domain exists)
    let (code, text) = check(&config, &[("SLUICE_SOURCE__START", "0-2-1")]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("0-2-1 is not in the server's binlog history"), "{text}");

    // file positions that are no place to start: not an event, or inside a transaction
    let (code, text) = check(&config, &[("SLUICE_SOURCE__START", "mysql-bin.000002:5")]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("mysql-bin.000002:5 is not the start of an event"), "{text}");
    let rows_at = db
        .sql("SHOW BINLOG EVENTS IN 'mysql-bin.000002'")
        .into_iter()
        .find(|r| r[2] == "Write_rows_v1")
        .map(|r| r[1].clone())
        .expect("a rows event in mysql-bin.000002");
    let inside = format!("mysql-bin.000002:{rows_at}");
    let (code, text) = check(&config, &[("SLUICE_SOURCE__START", &inside)]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("is inside a transaction (the event there is Write_rows_v1)"), "{text}");
    // a DDL's QUERY is the second event of its group, after its GTID: a start there would miss it
    db.sql("CREATE TABLE shop.ddl_start (id INT PRIMARY KEY)");
    let current = db.sql("SHOW BINARY LOGS").last().expect("a binlog")[0].clone();
    let events = db.sql(&format!("SHOW BINLOG EVENTS IN '{current}'"));
    let ddl = events.iter().position(|r| r[2] == "Query" && r[5].contains("shop.ddl_start")).expect("the DDL's QUERY");
    assert_eq!(events[ddl - 1][2], "Gtid", "{events:?}");
    let (code, text) = check(&config, &[("SLUICE_SOURCE__START", &format!("{current}:{}", events[ddl][1]))]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("the QUERY there (CREATE TABLE shop.ddl_start") && text.contains("follows its GTID"),
        "{text}"
    );
    let (code, text) = check(&config, &[("SLUICE_SOURCE__START", &format!("{current}:{}", events[ddl - 1][1]))]);
    assert_eq!(code, Some(0), "at the DDL's GTID: {text}");

    // the other flavour
    let mysql_set = "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5";
    let (code, text) = check(&config, &[("SLUICE_SOURCE__START", mysql_set)]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("is a MySQL GTID set, but the server is MariaDB"), "{text}");

    // unparsable: a configuration error (2) at load, naming the variable; run the same
    for bad in ["yesterday", "mysql-bin.000001:abc", "0-1-x"] {
        let (code, text) = check(&config, &[("SLUICE_SOURCE__START", bad)]);
        assert_eq!(code, Some(2), "{bad}: {text}");
        assert!(text.contains("SLUICE_SOURCE__START (sets source.start)"), "{bad}: {text}");
        let out =
            sluice_cmd().args(["run", "--config"]).arg(&config).env("SLUICE_SOURCE__START", bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "run with {bad}: {}", String::from_utf8_lossy(&out.stderr));
    }

    // dump --start-gtid
    let run = dump(db, &["--start-gtid", mysql_set]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("is a MySQL GTID set, but the server is MariaDB"), "{}", run.stderr);
    assert!(run.stdout.is_empty(), "nothing dumped");
    let run = dump(db, &["--start-gtid", ahead]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("the server has not reached 0-1-999999"), "{}", run.stderr);
    assert!(!run.stderr.contains("--start-file  --start-position"), "no empty file name: {}", run.stderr);
    let run = dump(db, &["--start-gtid", "mysql-bin.000002:4"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    let run = dump(db, &["--start-gtid", "yesterday"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("is not a GTID set") && !run.stderr.contains("earliest"), "{}", run.stderr);
    let run = dump(db, &["--server-id", "0"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("--server-id must not be 0"), "{}", run.stderr);
}
