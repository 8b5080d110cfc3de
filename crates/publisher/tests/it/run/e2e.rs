//! End to end: MariaDB → `sluice run` → broker, read back by an independent consumer (rdkafka's
//! BaseConsumer with read_committed, apache-avro with the writer schema fetched from the
//! registry by id). Checks the decoded change sequence per key, then SIGKILLs the publisher
//! in the middle of a write burst, restarts it, and checks that every change is there exactly
//! once; then a second instance with the same source name fences the first. Along the way,
//! `sluice check` reports the checkpoint, and the metrics endpoint counts what was sent.
//!
//! Services come from `integration/lib/{mariadb,broker,registry}.sh` (see `support::kafka`).
//! When they cannot start the test is skipped loudly, or fails with `SLUICE_REQUIRE_MARIADB=1`.

use crate::support;

use std::collections::BTreeMap;

use apache_avro::types::Value as Avro;
use std::process::Command;
use std::time::{Duration, Instant};

use support::kafka::{start_sluice, wait_for, Services, TopicReader};
use support::{free_port, http_get};

fn seq(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn run_publishes_exactly_once_across_sigkill() {
    let Some(services) = Services::start("run-e2e", &[]) else { return };
    let metrics_port = free_port();
    let (config, log) = services.config("e2e", "", &format!("[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n"));
    let sql = |text: &str| services.mariadb.sql_text(text);

    sql("CREATE DATABASE shop;
         CREATE TABLE shop.customers (id INT PRIMARY KEY, name VARCHAR(50) NOT NULL, balance DECIMAL(10,2));
         CREATE TABLE shop.orders (id INT PRIMARY KEY, customer_id INT, note VARCHAR(50));
         INSERT INTO shop.customers VALUES (1,'ann',10.50),(2,'bob',NULL),(3,'cy',0);
         INSERT INTO shop.orders VALUES (10,1,'first'),(11,2,'second');
         UPDATE shop.customers SET name='anne' WHERE id=1;
         DELETE FROM shop.orders WHERE id=11;
         UPDATE shop.customers SET id=30 WHERE id=3;");

    // `sluice check` before the first start: the server is ready, nothing is committed yet
    let (code, report) = check(&config);
    assert_eq!(code, Some(0), "{report}");
    assert!(report.contains("[ok] config:") && report.contains("[ok] connect:"), "{report}");
    assert!(report.contains("[ok] checkpoint: none committed on sluice.__positions"), "{report}");

    let mut child = start_sluice(&config, &log);
    let mut reader = TopicReader::new(&services);
    let expected_customers: BTreeMap<i64, Vec<String>> = [
        (1, seq(&["c:ann", "u:anne"])),
        (2, seq(&["c:bob"])),
        (3, seq(&["c:cy", "d", "tombstone"])),
        (30, seq(&["c:cy"])),
    ]
    .into();
    let expected_orders: BTreeMap<i64, Vec<String>> =
        [(10, seq(&["c:first"])), (11, seq(&["c:second", "d", "tombstone"]))].into();
    wait_for(
        60,
        || reader.per_key("sluice.shop.orders", "note") == expected_orders,
        "the first changes in sluice.shop.orders",
        &log,
    );
    assert_eq!(reader.per_key("sluice.shop.customers", "name"), expected_customers);
    // a record's Kafka timestamp is its envelope's ts_ms; a tombstone's, its delete's (the
    // record before it in its partition)
    let mut last_ts = BTreeMap::new();
    reader.scan("sluice.shop.customers", |r| {
        let ts = match r.field("ts_ms") {
            Some(Avro::Long(ms)) => Some(*ms),
            _ => last_ts.get(&r.partition).copied(),
        };
        assert!(ts.is_some() && r.timestamp == ts, "{r:?}: Kafka timestamp {:?}, ts_ms {ts:?}", r.timestamp);
        last_ts.insert(r.partition, ts.unwrap_or_default());
    });

    // what the metrics endpoint counted: five single-statement transactions; the key change
    // of customer 3 is one update and three records (delete, tombstone, create)
    assert_eq!(http_get(metrics_port, "/readyz").0, 200);
    assert_eq!(http_get(metrics_port, "/healthz"), (200, "ok\n".to_string()));
    let (status, text) = http_get(metrics_port, "/metrics");
    assert_eq!(status, 200);
    for line in [
        r#"sluice_row_changes_total{op="c",table="shop.customers",source="e2e"} 3"#,
        r#"sluice_row_changes_total{op="u",table="shop.customers",source="e2e"} 2"#,
        r#"sluice_row_changes_total{op="c",table="shop.orders",source="e2e"} 2"#,
        r#"sluice_row_changes_total{op="d",table="shop.orders",source="e2e"} 1"#,
        r#"sluice_transactions_total{source="e2e"} 5"#,
        r#"sluice_kafka_records_total{source="e2e"} 11"#,
        // a key and a value schema for each of the two tables, each registered once
        r#"sluice_registry_requests_total{outcome="ok",source="e2e"} 4"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    // every one of the five transactions timed from its commit event to its Kafka commit, under
    // a second (batches close within 100 ms here), and against the server's commit time
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}{{source=\"e2e\"}} ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in\n{text}"))
    };
    assert_eq!(value("sluice_commit_latency_seconds_count"), 5.0, "{text}");
    let sum = value("sluice_commit_latency_seconds_sum");
    assert!(sum > 0.0 && sum < 5.0, "five latencies, each under a second: {sum}");
    assert_eq!(value("sluice_commit_latency_server_seconds_count"), 5.0, "{text}");
    let commits = text.lines().find_map(|l| l.strip_prefix(r#"sluice_kafka_commit_seconds_count{source="e2e"} "#));
    assert!(commits.and_then(|c| c.parse::<u64>().ok()).is_some_and(|c| c >= 1), "commits timed:\n{text}");
    // An insert dated 100 s ago: read, it makes Sluice 100 s behind; then, idle, the next
    // heartbeat (every second here) says nothing newer is waiting, and the lag is 0 again.
    let old = sql("SET TIMESTAMP = UNIX_TIMESTAMP() - 100; INSERT INTO shop.orders VALUES (12, 1, 'old'); \
                   SELECT @@timestamp;");
    let old = old.trim().lines().last().unwrap().split('.').next().unwrap().to_string();
    let metric = |name: &str| {
        let text = http_get(metrics_port, "/metrics").1;
        let prefix = format!("{name}{{source=\"e2e\"}} ");
        text.lines().find_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_string)).unwrap_or_default()
    };
    wait_for(30, || metric("sluice_last_event_timestamp_seconds") == old, "the dated insert to be read", &log);
    wait_for(10, || metric("sluice_lag_seconds") == "0", "lag 0 after a heartbeat", &log);
    // and the committed checkpoint reaches the end of the binlog
    wait_for(15, || metric("sluice_lag_bytes") == "0", "no binlog past the checkpoint", &log);
    let mut expected_orders = expected_orders;
    expected_orders.insert(12, seq(&["c:old"]));

    // A burst of single-row transactions; SIGKILL the publisher in the middle of it.
    let mut burst = String::new();
    for i in 100..400 {
        burst.push_str(&format!("INSERT INTO shop.orders VALUES ({i}, 1, 'n{i}');\n"));
    }
    burst.push_str("UPDATE shop.customers SET name='bobby' WHERE id=2; DELETE FROM shop.customers WHERE id=1;");
    let port = services.mariadb.port;
    let writer = std::thread::spawn(move || support::try_sql(port, &burst).unwrap());
    std::thread::sleep(Duration::from_millis(700));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    writer.join().unwrap();
    let mid = reader.read("sluice.shop.orders").len();
    eprintln!("orders records committed before the SIGKILL: {mid}");

    let mut child = start_sluice(&config, &log);
    for i in 100..400 {
        expected_orders.insert(i, vec![format!("c:n{i}")]);
    }
    let mut expected_customers = expected_customers;
    expected_customers.get_mut(&1).unwrap().extend(seq(&["d", "tombstone"]));
    expected_customers.get_mut(&2).unwrap().push("u:bobby".into());
    wait_for(
        60,
        || reader.per_key("sluice.shop.customers", "name") == expected_customers,
        "the changes after the restart",
        &log,
    );
    assert_eq!(reader.per_key("sluice.shop.orders", "note"), expected_orders, "exactly once across SIGKILL");
    // The burst may have been committed whole before the kill, so the wait above can pass while
    // the restarted instance is still connecting. Each connection attempt initializes its
    // transactions anew and fences whoever did so before: started now, the second instance
    // could lose that race and be the one fenced. It starts once the first streams.
    wait_for(
        60,
        || support::try_http_get(metrics_port, "/readyz").is_ok_and(|(status, _)| status == 200),
        "the restarted instance to stream",
        &log,
    );

    // A second instance with the same source name fences the first: the first stops with a
    // non-zero exit at its next Kafka call, the second publishes, nothing is doubled. (It
    // serves its metrics on a port of its own: the first still holds the first one.)
    let toml = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, toml.replace(&format!(":{metrics_port}\""), &format!(":{}\"", free_port()))).unwrap();
    let mut second = start_sluice(&config, &log);
    std::thread::sleep(Duration::from_secs(3));
    sql("INSERT INTO shop.orders VALUES (500, 2, 'fenced');");
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "the fenced instance kept running");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(!first.success(), "the fenced instance must exit non-zero, got {first}");
    expected_orders.insert(500, vec!["c:fenced".into()]);
    wait_for(60, || reader.per_key("sluice.shop.orders", "note") == expected_orders, "the insert after fencing", &log);
    assert_eq!(reader.per_key("sluice.shop.customers", "name"), expected_customers);

    // SIGTERM: commit at the next boundary and exit 0.
    Command::new("kill").args(["-TERM", &second.id().to_string()]).status().unwrap();
    let status = second.wait().unwrap();
    assert!(status.success(), "exit status after SIGTERM: {status}");
    // its totals, logged at the stop: the second instance resumed after everything the first
    // had committed, and published only the insert written after the fencing
    let text = std::fs::read_to_string(&log).unwrap();
    let totals = text.lines().rfind(|l| l.contains("Published ")).unwrap_or_else(|| panic!("{text}"));
    assert!(totals.contains("Published 1 row changes (1 inserts, 0 updates, 0 deletes) in 1 transactions"), "{totals}");

    // after a clean stop the checkpoint is where the server is
    let (file, pos) = services.mariadb.master_status();
    let (code, report) = check(&config);
    assert_eq!(code, Some(0), "{report}");
    let line = report.lines().find(|l| l.starts_with("[ok] checkpoint: ")).unwrap_or_else(|| panic!("{report}"));
    assert!(line.starts_with(&format!("[ok] checkpoint: {file}:{pos}")), "{line}");
    assert!(line.ends_with(&format!("the server is at {file}:{pos}, 0 bytes of binlog past it")), "{line}");
}

/// `sluice check --config CONFIG`: exit code and stdout.
fn check(config: &std::path::Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice")).args(["check", "--config"]).arg(config).output().unwrap();
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}
