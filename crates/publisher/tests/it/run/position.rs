//! `sluice position show|set`: the safe way to move a source's checkpoint. The case it exists
//! for: under `binlog_row_metadata=MINIMAL` a DDL Sluice cannot follow (here MariaDB's
//! `ADD SYSTEM VERSIONING`, which adds hidden columns) stops `sluice run` at the table's next
//! row, and the message says to move the checkpoint past the change; `position set --to
//! current` does that (reading the tables' definitions from the server again), without any
//! hand-made record on the positions topic. It refuses while `sluice run` is running, whatever
//! the user's grants; a run that stopped (even with an error) marks its checkpoint so.
//! Real MariaDB, broker and registry.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use support::kafka::{log_text, start_sluice, wait_for, Services, TopicReader};

fn position(args: &[&str], config: &Path) -> support::Run {
    let mut a = vec!["position"];
    a.extend_from_slice(args);
    let config = config.to_str().unwrap();
    a.extend_from_slice(&["--config", config]);
    support::sluice(&a)
}

fn exit_code(child: &mut Child, secs: u64, log: &Path) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = child.kill();
    panic!("sluice run did not stop within {secs} s:\n{}", log_text(log));
}

fn created(ids: &[i64]) -> BTreeMap<i64, Vec<String>> {
    ids.iter().map(|&i| (i, vec!["c".to_string()])).collect()
}

#[test]
fn position_set_moves_past_a_ddl_sluice_cannot_follow() {
    let Some(services) = Services::start("run-position", &["--binlog-row-metadata=MINIMAL"]) else { return };
    let sql = |text: &str| services.mariadb.sql_text(text);
    sql("CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, v INT); INSERT INTO shop.t VALUES (1, 1);");
    let (config, log) = services.config("pos", "", "");
    let mut reader = TopicReader::new(&services);

    // nothing committed yet
    let run = position(&["show"], &config).ok();
    assert!(run.stdout.contains("source \"pos\": no checkpoint on sluice.__positions"), "{}", run.stdout);

    let mut child = start_sluice(&config, &log);
    wait_for(60, || reader.per_key("sluice.shop.t", "v") == created(&[1]), "row 1", &log);
    // refused while sluice run is running: its checkpoint is young and not marked stopped
    let running = "a `sluice run` of the source is running";
    let run = position(&["set", "--to", "current"], &config);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains(running) && run.stderr.contains("Stop it first"), "{}", run.stderr);
    // ... also under another server id, and (issue 20, item 9) as a user without the optional
    // REPLICATION MASTER ADMIN grant, who cannot list the server's replicas: the liveness is
    // in the checkpoint, which the instance renews at least every 10 s even with nothing new
    services
        .mariadb
        .sql("CREATE USER 'plain'@'%'; GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'plain'@'%'");
    std::thread::sleep(Duration::from_secs(25));
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let cp = services.checkpoint("sluice", "pos").expect("a checkpoint");
    let age = now_ms - cp["ts_ms"].as_i64().unwrap();
    assert!(age < 15_000, "an idle instance renews its checkpoint every 10 s: {age} ms old: {cp}");
    assert!(cp.get("stopped_ms").is_none(), "{cp}");
    for (key, value) in
        [("SLUICE_SOURCE__SERVER_ID", "51099".to_string()), ("SLUICE_SOURCE__URL", services.mariadb.url("plain"))]
    {
        let out = support::sluice_cmd()
            .args(["position", "set", "--to", "current", "--config"])
            .arg(&config)
            .env(key, &value)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{key}: {stderr}");
        assert!(stderr.contains(running) && stderr.contains("--force"), "{key}: {stderr}");
    }
    let run = position(&["show"], &config).ok();
    assert!(run.stdout.starts_with("source \"pos\": mysql-bin.000001:"), "{}", run.stdout);
    assert!(run.stdout.contains("bytes of binlog past it"), "{}", run.stdout);
    // a report that cannot be written is an output error, not a success
    if let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") {
        let out =
            support::sluice_cmd().args(["position", "show", "--config"]).arg(&config).stdout(full).output().unwrap();
        assert_eq!(out.status.code(), Some(74), "{}", String::from_utf8_lossy(&out.stderr));
    }

    // the DDL it cannot follow, then a row of the table: a clear stop
    sql("ALTER TABLE shop.t ADD SYSTEM VERSIONING; INSERT INTO shop.t VALUES (2, 2);");
    assert_eq!(exit_code(&mut child, 60, &log), Some(1));
    let text = log_text(&log);
    assert!(text.contains("sluice position set --config FILE --to current"), "the stop says what to do:\n{text}");

    // the operator takes the table back and moves the checkpoint past the change
    sql("ALTER TABLE shop.t DROP SYSTEM VERSIONING;");
    std::thread::sleep(Duration::from_secs(3)); // the server drops the stopped replica within a heartbeat
    let run = position(&["set", "--to", "current"], &config);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("source \"pos\": checkpoint set to mysql-bin.000001:"), "{}", run.stdout);
    assert!(run.stdout.contains("(was mysql-bin.000001:"), "{}", run.stdout);
    // set's own checkpoint is no running instance's: a second set at once is not refused
    let again = position(&["set", "--to", "current"], &config);
    assert_eq!(again.code, Some(0), "{}\n{}", again.stdout, again.stderr);
    // a position that cannot be is refused as usage, naming the forms
    let run = position(&["set", "--to", "yesterday"], &config);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    // ... and so is one the server does not have, naming it
    let run = position(&["set", "--to", "mysql-bin.000099:4"], &config);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("mysql-bin.000099"), "{}", run.stderr);

    sql("INSERT INTO shop.t VALUES (3, 3);");
    let mut child = start_sluice(&config, &log);
    wait_for(60, || reader.per_key("sluice.shop.t", "v") == created(&[1, 3]), "row 3 after the move", &log);
    // --force takes over from the running instance, whose connection holds the server id: the
    // checkpoint moves, and the instance is fenced and stops with exit 1
    let run = position(&["set", "--to", "current", "--force"], &config);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("--force: moving it anyway"), "{}", run.stdout);
    assert_eq!(exit_code(&mut child, 60, &log), Some(1));
    let text = log_text(&log);
    assert!(text.contains("another instance with the same source name"), "fenced:\n{text}");
}
