//! Every checkpoint carries the server's GTID state, whatever the start (issue 13, failover
//! by GTID): a run started from `earliest` or from a `file:position` inside a binlog file
//! (not at a GTID) still checkpoints the GTID list at each resume point, equal to the
//! server's `@@gtid_binlog_pos` once it has caught up, and a restart resumes by it, with
//! every change exactly once. Real MariaDB, broker and registry.

use crate::support;

use std::collections::BTreeMap;

use support::kafka::{log_text, start_sluice, wait_for, Services, TopicReader};

fn created(ids: impl IntoIterator<Item = i64>) -> BTreeMap<i64, Vec<String>> {
    ids.into_iter().map(|i| (i, vec!["c".to_string()])).collect()
}

#[test]
fn checkpoints_carry_gtids_from_any_start() {
    let Some(services) = Services::start("run-gtid", &[]) else { return };
    let sql = |text: &str| services.mariadb.sql_text(text);
    sql("CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, v INT);");
    for i in 1..=20 {
        sql(&format!("INSERT INTO shop.t VALUES ({i}, {i})"));
    }
    // a second file, and a start position inside it after a few transactions
    sql("FLUSH BINARY LOGS;");
    for i in 21..=25 {
        sql(&format!("INSERT INTO shop.t VALUES ({i}, {i})"));
    }
    let (file, pos) = services.mariadb.master_status();
    let gtid_at_mid = services.mariadb.gtid_pos();
    for i in 26..=40 {
        sql(&format!("INSERT INTO shop.t VALUES ({i}, {i})"));
    }
    let mut reader = TopicReader::new(&services);
    let mut last = 40;

    for (source, start, first) in [("early", "earliest".to_string(), 1), ("mid", format!("{file}:{pos}"), 26)] {
        let (config, log) = services.config(source, "", "");
        let text =
            std::fs::read_to_string(&config).unwrap().replace("start = \"earliest\"", &format!("start = \"{start}\""));
        // each source its own server id: the server lists a stopped replica a while
        let server_id = if source == "early" { 51201 } else { 51202 };
        let text = text
            .replace("[kafka]", &format!("[kafka]\ntopic_prefix = \"{source}\""))
            .replace("[source]", &format!("[source]\nserver_id = {server_id}"));
        std::fs::write(&config, text).unwrap();
        let topic = format!("{source}.shop.t");

        let mut child = start_sluice(&config, &log);
        wait_for(60, || reader.per_key(&topic, "v") == created(first..=last), "rows of the first run", &log);
        wait_for(
            30,
            || {
                services
                    .checkpoint(source, source)
                    .is_some_and(|c| c["gtid"].as_str() == Some(&services.mariadb.gtid_pos()))
            },
            "a checkpoint at the server's GTID position",
            &log,
        );
        child.kill().unwrap();
        child.wait().unwrap();

        // every checkpoint, the first one (written before anything is published) included
        let checkpoints: Vec<serde_json::Value> = services
            .json_topic(&format!("{source}.__positions"))
            .into_iter()
            .filter(|(k, _)| k == source)
            .filter_map(|(_, v)| v)
            .collect();
        assert!(checkpoints.len() >= 2, "{checkpoints:?}");
        for (i, c) in checkpoints.iter().enumerate() {
            assert_eq!(c["gtid_flavor"], "mariadb", "{source}: {c}");
            // the start of the first binlog has nothing before it: an empty list, not null
            let empty_ok = source == "early" && i == 0;
            assert!(
                c["gtid"].as_str().is_some_and(|g| g.starts_with("0-1-") || (empty_ok && g.is_empty())),
                "{source}: {c}"
            );
        }
        if source == "mid" {
            assert_eq!(checkpoints[0]["gtid"].as_str(), Some(gtid_at_mid.as_str()), "the first checkpoint's GTID");
            assert_eq!(checkpoints[0]["position"].as_u64(), Some(pos));
        }

        // a restart resumes by GTID: the new rows once, nothing before them again
        for i in last + 1..=last + 5 {
            sql(&format!("INSERT INTO shop.t VALUES ({i}, {i})"));
        }
        last += 5;
        let mut child = start_sluice(&config, &log);
        wait_for(60, || reader.per_key(&topic, "v") == created(first..=last), "rows after the restart", &log);
        let text = log_text(&log);
        assert!(text.matches("Streaming the binlog").count() >= 2, "{text}");
        let resumed = text.lines().filter(|l| l.contains("Streaming the binlog")).nth(1).unwrap();
        assert!(resumed.contains("start=GTID 0-1-"), "the restart resumes by GTID: {resumed}");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
