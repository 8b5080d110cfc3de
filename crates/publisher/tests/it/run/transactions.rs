//! A MySQL transaction is never split: inside BEGIN ... COMMIT a `SAVEPOINT` (which MariaDB
//! logs as a QUERY event of its own) is part of the transaction, not its end. The old
//! transaction trackers took it for a commit, so `sluice run` could commit a Kafka transaction
//! and a checkpoint in the middle of a MySQL one (and a restart by GTID would then skip the
//! rest). With one record per Kafka transaction allowed, every checkpoint here must still be
//! at a transaction's end, and the savepoint transaction's records must share one
//! `transaction.id`. Real MariaDB, broker and registry.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::kafka::{start_sluice_with, wait_for, Services, TopicReader};

/// Every checkpoint (file, position) committed on `<prefix>.__positions`.
fn checkpoints(services: &Services, topic: &str) -> Vec<(String, u64)> {
    services
        .json_topic(topic)
        .into_iter()
        .filter_map(|(_, v)| v)
        .map(|j| (j["file"].as_str().unwrap().to_string(), j["position"].as_u64().unwrap()))
        .collect()
}

#[test]
fn a_savepoint_does_not_end_the_transaction() {
    let Some(services) = Services::start("run-savepoints", &[]) else { return };
    let sql = |text: &str| services.mariadb.sql_text(text);
    sql("CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, v INT);
         BEGIN; INSERT INTO shop.t VALUES (1, 1); SAVEPOINT a; INSERT INTO shop.t VALUES (2, 2);
         SAVEPOINT b; INSERT INTO shop.t VALUES (3, 3); ROLLBACK TO SAVEPOINT b; INSERT INTO shop.t VALUES (4, 4);
         COMMIT;
         INSERT INTO shop.t VALUES (5, 5);");
    // where transactions end (an XID, or a statement of its own), by the server's own listing
    let events = services.mariadb.sql("SHOW BINLOG EVENTS IN 'mysql-bin.000001'");
    assert!(events.iter().any(|e| e[2] == "Query" && e[5].starts_with("SAVEPOINT")), "the binlog logs savepoints");
    let ends: BTreeSet<u64> = events
        .iter()
        .filter(|e| e[2] == "Xid" || (e[2] == "Query" && !e[5].starts_with("SAVEPOINT") && e[5] != "BEGIN"))
        .map(|e| e[4].parse().unwrap())
        .collect();
    let (config, log) = services.config("savepoints", "", "");
    let mut reader = TopicReader::new(&services);
    let mut child = start_sluice_with(&config, &log, &[("SLUICE_KAFKA__BATCH_MAX_RECORDS", "1")]);
    wait_for(60, || reader.read("sluice.shop.t").len() == 4, "the four committed rows", &log);
    std::thread::sleep(Duration::from_secs(2)); // the idle checkpoint after the last row
    child.kill().unwrap();
    child.wait().unwrap();

    for (file, position) in checkpoints(&services, "sluice.__positions") {
        assert_eq!(file, "mysql-bin.000001");
        assert!(
            position == 4 || ends.contains(&position),
            "checkpoint at {position}, inside a transaction (ends: {ends:?})"
        );
    }
    let records = reader.read("sluice.shop.t");
    let tx_of = |id: i64| {
        let r = records.iter().find(|r| r.int_key() == id).unwrap();
        match r.field("transaction").map(support::kafka::unwrap_union) {
            Some(apache_avro::types::Value::Record(f)) => format!("{:?}", f.iter().find(|(k, _)| k == "id").unwrap().1),
            other => panic!("transaction block {other:?}"),
        }
    };
    assert_eq!(tx_of(1), tx_of(2));
    assert_eq!(tx_of(1), tx_of(4));
    assert_ne!(tx_of(1), tx_of(5));
    let ids: BTreeSet<i64> = records.iter().map(|r| r.int_key()).collect();
    assert_eq!(ids, [1, 2, 4, 5].into());
}
