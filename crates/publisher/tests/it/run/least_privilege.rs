//! The least privileges Sluice needs, as the README lists them: `REPLICATION SLAVE` and
//! `BINLOG MONITOR` (MySQL: `REPLICATION CLIENT`) on `*.*`, and `SELECT` on the captured tables.
//! `sluice check` says what is missing (each table it cannot read, with the GRANT; an include
//! pattern that matches nothing the user can see; a replication privilege) and what is more than
//! needed; with exactly those privileges `sluice run` snapshots, streams, is SIGKILLed and
//! resumes. Real MariaDB, broker and registry.

use crate::support;

use std::path::Path;
use std::process::Command;

use support::kafka::{log_text, start_sluice_with, wait_for, Services, TopicReader};

const PW: &str = "least-Priv-9";

/// `sluice check` as `user`: exit code and the report (stdout and stderr).
fn check(config: &Path, services: &Services, user: &str) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["check", "--config"])
        .arg(config)
        .env("SLUICE_SOURCE__URL", services.mariadb.url(user))
        .env("SLUICE_SOURCE__PASSWORD_ENV", "SLUICE_TEST_PW")
        .env("SLUICE_TEST_PW", PW)
        .env("SLUICE_SOURCE__START", "current")
        .output()
        .unwrap();
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn line<'a>(report: &'a str, start: &str) -> &'a str {
    report.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no line {start:?} in\n{report}"))
}

#[test]
fn least_privileges_are_checked_and_suffice() {
    let Some(services) = Services::start("least-priv", &[]) else { return };
    let db = &services.mariadb;
    db.sql_text(&format!(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(10));
         CREATE TABLE shop.audit (id INT PRIMARY KEY, what VARCHAR(20));
         CREATE TABLE shop.hidden (id INT PRIMARY KEY);
         INSERT INTO shop.t VALUES (1, 'a'), (2, 'b');
         INSERT INTO shop.audit VALUES (10, 'x');
         CREATE USER sluice_min IDENTIFIED BY '{PW}';
         GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO sluice_min;
         GRANT SELECT ON shop.t TO sluice_min;
         GRANT INSERT ON shop.audit TO sluice_min;
         CREATE USER sluice_none IDENTIFIED BY '{PW}';
         GRANT SELECT ON shop.* TO sluice_none;
         CREATE USER sluice_all IDENTIFIED BY '{PW}';
         GRANT ALL PRIVILEGES ON *.* TO sluice_all;"
    ));
    let include = "[filter]\ninclude = [\"shop.t\", \"shop.audit\", \"shop.hidden2\"]\n[snapshot]\nmode = \"initial\"";
    let (config, log) = services.config("lp", "topic_prefix = \"lp\"", include);

    // shop.audit is visible (INSERT) but not readable; shop.hidden2 matches nothing visible
    let (code, report) = check(&config, &services, "sluice_min");
    eprintln!("{report}");
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(line(&report, "[ok] privileges"), "[ok] privileges: replication privileges granted");
    let tables = line(&report, "[ERROR] tables");
    assert!(tables.contains("1 of 2 captured tables cannot be read (the snapshot reads them)"), "{tables}");
    assert!(report.contains("shop.audit: SELECT command denied"), "{report}");
    assert!(report.contains("GRANT SELECT ON shop.audit TO <user>"), "{report}");
    assert!(report.contains("[warning] tables: filter.include \"shop.hidden2\" matches no table this user can see"));
    assert!(report.contains("cannot list the server's replicas"), "{report}");
    assert!(report.contains("GRANT REPLICATION MASTER ADMIN ON *.* TO <user> (optional)"), "{report}");
    assert!(!report.contains("also has"), "{report}");

    // no replication privileges at all; and more than needed
    let (code, report) = check(&config, &services, "sluice_none");
    assert_eq!(code, Some(1), "{report}");
    let p = line(&report, "[ERROR] privileges");
    assert!(p.contains("lacks REPLICATION SLAVE and BINLOG MONITOR (REPLICATION CLIENT)"), "{p}");
    let (_, report) = check(&config, &services, "sluice_all");
    let p = line(&report, "[warning] privileges");
    assert!(p.contains("also has ALL PRIVILEGES ON *.*, which Sluice never uses"), "{p}");

    // exactly the least privileges: check passes, run snapshots and streams
    db.sql_text("REVOKE INSERT ON shop.audit FROM sluice_min; GRANT SELECT ON shop.audit TO sluice_min;");
    let include = "[filter]\ninclude = [\"shop.*\"]\n[snapshot]\nmode = \"initial\"";
    let (config, log2) = services.config("lp", "topic_prefix = \"lp\"", include);
    assert_eq!(log, log2);
    let (code, report) = check(&config, &services, "sluice_min");
    eprintln!("{report}");
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(line(&report, "[ok] tables"), "[ok] tables: 2 captured tables, each readable with SELECT");
    assert!(report.lines().filter(|l| l.starts_with("[warning]")).all(|l| l.contains("cannot list")), "{report}");

    let url = services.mariadb.url("sluice_min");
    let env = [
        ("SLUICE_SOURCE__URL", url.as_str()),
        ("SLUICE_SOURCE__PASSWORD_ENV", "SLUICE_TEST_PW"),
        ("SLUICE_TEST_PW", PW),
        ("SLUICE_SOURCE__START", "current"),
    ];
    let mut reader = TopicReader::new(&services);
    let mut child = start_sluice_with(&config, &log, &env);
    wait_for(
        60,
        || reader.read("lp.shop.t").len() == 2 && reader.read("lp.shop.audit").len() == 1,
        "the snapshot",
        &log,
    );
    db.sql_text("INSERT INTO shop.t VALUES (3, 'c'); UPDATE shop.audit SET what = 'y' WHERE id = 10;");
    wait_for(60, || reader.read("lp.shop.t").len() == 3, "the streamed insert", &log);
    // a SIGKILL and a restart with the same server id: without REPLICATION MASTER ADMIN Sluice
    // cannot see its predecessor's registration; the server replaces it
    child.kill().unwrap();
    child.wait().unwrap();
    db.sql_text("DELETE FROM shop.t WHERE id = 1;");
    let mut child = start_sluice_with(&config, &log, &env);
    wait_for(60, || reader.read("lp.shop.t").iter().any(|r| r.op() == Some("d")), "the delete after the restart", &log);
    let per_key = reader.per_key("lp.shop.t", "v");
    let want: std::collections::BTreeMap<i64, Vec<String>> = [
        (1, vec!["r:a".to_string(), "d".into(), "tombstone".into()]),
        (2, vec!["r:b".into()]),
        (3, vec!["c:c".into()]),
    ]
    .into_iter()
    .collect();
    assert_eq!(per_key, want, "{}", log_text(&log));
    assert!(reader.read("lp.shop.audit").iter().any(|r| r.op() == Some("u")));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!log_text(&log).contains(PW), "the password is in the log");
}
