//! A first start (`source.start = "current"`, no checkpoint yet) that is interrupted before its
//! first commit of records must lose nothing: the start is resolved once, when `sluice run`
//! first reaches the server, and recorded as the first checkpoint before anything is published.
//! Before, every pipeline restart resolved "current" again at the server's new end and skipped
//! what was written in between, with only a WARN.
//!
//! Two causes of the restart, against the real broker and registry (MariaDB, noida-db, the test
//! registry; topics read back by an independent read_committed consumer):
//! - the broker is down when `sluice run` starts, and rows are written before it comes up;
//! - the registry is down at the first row, so the attempt restarts, and more rows follow.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::kafka::{log_text, start_sluice_with, wait_for, Services, TopicReader};

fn created(ids: &[i64]) -> BTreeMap<i64, Vec<String>> {
    ids.iter().map(|&i| (i, vec![format!("c:v{i}")])).collect()
}

#[test]
fn an_interrupted_first_start_loses_nothing() {
    let Some(services) = Services::start("run-first-start", &[]) else { return };
    let sql = |text: &str| services.mariadb.sql_text(text);
    sql("CREATE DATABASE shop;
         CREATE TABLE shop.a (id INT PRIMARY KEY, v VARCHAR(20));
         CREATE TABLE shop.b (id INT PRIMARY KEY, v VARCHAR(20));
         INSERT INTO shop.a VALUES (1, 'v1');");
    let mut reader = TopicReader::new(&services);

    // 1. The broker is down at the start: "current" is taken when sluice reaches MariaDB, and the
    //    rows written while the broker is away are published once it is back.
    let (config, log) = services.config("first-a", "topic_prefix = \"pa\"", "");
    services.stop_broker();
    let mut child = start_sluice_with(&config, &log, &[("SLUICE_SOURCE__START", "current")]);
    // rows written seconds after `sluice run` started belong to a start at "current"
    std::thread::sleep(Duration::from_secs(3));
    sql("INSERT INTO shop.a VALUES (2, 'v2'); INSERT INTO shop.a VALUES (3, 'v3');");
    std::thread::sleep(Duration::from_secs(2));
    services.start_broker_again();
    sql("INSERT INTO shop.a VALUES (4, 'v4');");
    wait_for(90, || reader.per_key("pa.shop.a", "v") == created(&[2, 3, 4]), "rows 2-4 in pa.shop.a", &log);
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::rename(&log, log.with_file_name("sluice-broker-down.log"));

    // 2. The registry is down at the first row: the attempt restarts, again and again, and
    //    resumes from the recorded start each time.
    let (config, log) = services.config("first-b", "topic_prefix = \"pb\"", "");
    services.stop_registry();
    sql("INSERT INTO shop.b VALUES (10, 'v10');"); // before the start: not published
    let mut child = start_sluice_with(&config, &log, &[("SLUICE_SOURCE__START", "current")]);
    // streaming: the server lists the replica
    let streaming = || services.mariadb.column("SHOW SLAVE HOSTS").iter().any(|id| id == "51001");
    wait_for(30, streaming, "sluice to stream", &log);
    sql("INSERT INTO shop.b VALUES (11, 'v11');");
    wait_for(30, || log_text(&log).contains("Restarting from the last committed checkpoint"), "a restart", &log);
    sql("INSERT INTO shop.b VALUES (12, 'v12');");
    std::thread::sleep(Duration::from_secs(1));
    services.start_registry_again();
    sql("INSERT INTO shop.b VALUES (13, 'v13');");
    wait_for(90, || reader.per_key("pb.shop.b", "v") == created(&[11, 12, 13]), "rows 11-13 in pb.shop.b", &log);
    // and the first phase's topic still holds exactly its rows
    assert_eq!(reader.per_key("pa.shop.a", "v"), created(&[2, 3, 4]));
    child.kill().unwrap();
    child.wait().unwrap();
}
