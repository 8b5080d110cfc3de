//! Failover by GTID (issue 13): the primary dies mid-stream, its GTID replica
//! (`log_slave_updates`) is promoted and takes the writes, and `sluice run`, started with the
//! dead primary in `source.url` and the replica in `source.failover`, fails over by itself
//! after `failover_after` and resumes from the checkpoint's GTIDs there: every change of both
//! servers exactly once, in order per key. A second replica that stopped replicating before the
//! last transactions Sluice published is refused, with a message that names the GTIDs it lacks,
//! never streamed from with a gap. Real MariaDB servers (three, replicating), broker and
//! registry.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use support::kafka::{log_text, start_sluice, wait_for, Services, TopicReader};
use support::Server;

fn set_url(config: &std::path::Path, from: u16, to: u16) {
    let text = std::fs::read_to_string(config).unwrap();
    let (a, b) = (format!("127.0.0.1:{from}"), format!("127.0.0.1:{to}"));
    assert!(text.contains(&a), "{text}");
    std::fs::write(config, text.replace(&a, &b)).unwrap();
}

#[test]
fn failover_to_a_gtid_replica_loses_and_repeats_nothing() {
    let Some(services) = Services::start("run-failover", &["--log-slave-updates"]) else { return };
    let primary = &services.mariadb;
    let replica = Server::start("run-failover-r1", &["--server-id=2", "--log-slave-updates"]).unwrap();
    let lagging = Server::start("run-failover-r2", &["--server-id=3", "--log-slave-updates"]).unwrap();
    primary.sql_text("CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, v INT);");
    replica.replicate_from(primary);
    lagging.replicate_from(primary);

    let (config, log) = services.config("failover", "", "");
    let mut reader = TopicReader::new(&services);
    let mut want: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    let mut child = start_sluice(&config, &log);
    // writes on the primary: inserts, updates; the lagging replica stops half-way
    for i in 1..=60 {
        primary.sql_text(&format!("INSERT INTO shop.t VALUES ({i}, 0)"));
        want.insert(i, vec!["c".into()]);
        if i % 3 == 0 {
            primary.sql_text(&format!("UPDATE shop.t SET v = v + 1 WHERE id = {}", i - 1));
            want.get_mut(&(i - 1)).unwrap().push("u".into());
        }
        if i == 30 {
            lagging.wait_replicated(primary);
            lagging.sql_text("STOP SLAVE;");
        }
    }
    wait_for(60, || reader.per_key("sluice.shop.t", "v") == want, "the primary's changes", &log);
    let primary_gtid = primary.gtid_pos();
    wait_for(
        30,
        || services.checkpoint("sluice", "failover").is_some_and(|c| c["gtid"].as_str() == Some(&primary_gtid)),
        "the checkpoint at the primary's last GTID",
        &log,
    );
    replica.wait_replicated(primary);

    // `sluice check` tries each failover server against the committed checkpoint: the
    // caught-up replica can serve it by its GTIDs, the lagging one cannot (and says why)
    let check_config = config.with_file_name("check.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let listed = format!(
        "failover = [\"mysql://root@127.0.0.1:{}\", \"mysql://root@127.0.0.1:{}\"]\n",
        replica.port, lagging.port
    );
    std::fs::write(&check_config, text.replacen("heartbeat = ", &format!("{listed}heartbeat = "), 1)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["check", "--config"])
        .arg(&check_config)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{report}");
    let ok = report.lines().find(|l| l.starts_with("[ok] failover ") && l.contains(&format!(":{}", replica.port)));
    let ok = ok.unwrap_or_else(|| panic!("no ok line for the replica:\n{report}"));
    assert!(ok.contains("can resume the checkpoint by its GTIDs"), "{ok}");
    let refused =
        report.lines().find(|l| l.starts_with("[ERROR] failover ") && l.contains(&format!(":{}", lagging.port)));
    let refused = refused.unwrap_or_else(|| panic!("no error line for the lagging replica:\n{report}"));
    assert!(refused.contains("cannot resume the checkpoint here") && refused.contains(&primary_gtid), "{refused}");
    eprintln!("sluice check of the failover list:\n{report}");

    // the primary dies mid-stream; the replica is promoted and takes the writes
    let published = want.clone();
    primary.kill();
    replica.sql_text("STOP SLAVE; RESET SLAVE ALL;");
    for i in 61..=90 {
        replica.sql_text(&format!("INSERT INTO shop.t VALUES ({i}, 0)"));
        want.insert(i, vec!["c".into()]);
        if i % 5 == 0 {
            replica.sql_text(&format!("DELETE FROM shop.t WHERE id = {}", i - 60));
            want.get_mut(&(i - 60)).unwrap().extend(["d".to_string(), "tombstone".to_string()]);
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();

    // the lagging replica lacks what Sluice published: refused, naming the GTIDs, exit 1
    set_url(&config, primary.port, lagging.port);
    let lagging_gtid = lagging.gtid_pos();
    let mut child = start_sluice(&config, &log);
    let deadline = Instant::now() + Duration::from_secs(60);
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        assert!(Instant::now() < deadline, "sluice did not stop against the lagging replica:\n{}", log_text(&log));
        std::thread::sleep(Duration::from_millis(200));
    };
    let text = log_text(&log);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains(&primary_gtid) && text.contains(&lagging_gtid), "the stop names both positions:\n{text}");
    assert_eq!(reader.per_key("sluice.shop.t", "v"), published, "nothing from the lagging replica");

    // started against the dead primary with the promoted replica in source.failover: after
    // failover_after without reaching the primary it resumes by GTID on the replica
    set_url(&config, lagging.port, primary.port);
    let text = std::fs::read_to_string(&config).unwrap();
    let failover = format!("failover = [\"mysql://root@127.0.0.1:{}\"]\nfailover_after = \"3s\"\n", replica.port);
    std::fs::write(&config, text.replacen("heartbeat = ", &format!("{failover}heartbeat = "), 1)).unwrap();
    let before = log_text(&log).len();
    let mut child = start_sluice(&config, &log);
    wait_for(90, || reader.per_key("sluice.shop.t", "v") == want, "every change exactly once after the failover", &log);
    let text = log_text(&log)[before..].to_string();
    assert!(text.contains("The source server stays unreachable: failing over"), "{text}");
    let resumed = text.lines().rfind(|l| l.contains("Streaming the binlog")).unwrap();
    assert!(resumed.contains(&format!("start=GTID {primary_gtid}")), "{resumed}");
    assert!(child.try_wait().unwrap().is_none(), "sluice run stopped:\n{text}");
    child.kill().unwrap();
    child.wait().unwrap();

    // a very first start (no checkpoint) while source.url is down: source.start is resolved on
    // the failover server, recorded there, and everything its binlog holds is published
    let metrics_port = support::free_port();
    let (config, log) = services.config(
        "failover-first",
        "topic_prefix = \"ff\"",
        &format!("[metrics]\nlisten = \"127.0.0.1:{metrics_port}\""),
    );
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replacen("heartbeat = ", &format!("{failover}heartbeat = "), 1)).unwrap();
    let mut child = start_sluice(&config, &log);
    wait_for(90, || reader.per_key("ff.shop.t", "v") == want, "the replica's binlog from a first start", &log);
    let text = log_text(&log);
    assert!(text.contains("The source server stays unreachable: failing over"), "{text}");
    assert!(text.contains("No checkpoint yet: recorded the configured start"), "{text}");
    let checkpoint = services.checkpoint("ff", "failover-first").unwrap();
    assert_eq!(checkpoint["gtid"].as_str(), Some(replica.gtid_pos().as_str()), "{checkpoint}");
    // the lag in bytes is measured on the server streamed from (it stays -1, unknown, while the
    // watcher asks the dead source.url)
    let lag_bytes = || {
        let (_, body) = support::http_get(metrics_port, "/metrics");
        body.lines().find(|l| l.starts_with("sluice_lag_bytes")).map(|l| l.rsplit(' ').next().unwrap_or("").to_string())
    };
    wait_for(30, || lag_bytes().as_deref() == Some("0"), "sluice_lag_bytes 0 from the replica", &log);
    child.kill().unwrap();
    child.wait().unwrap();
}
