//! Operations: a real Prometheus (Debian's 2.42, `integration/lib/prometheus.sh`) scrapes
//! `sluice run`'s `/metrics` while it publishes, and its query API returns the row changes by
//! table and operation that the workload made, and runs every query of the chart's Grafana
//! dashboard; `promtool check metrics` finds nothing to say about the exposition.

use crate::support;

use std::process::Command;

use support::kafka::{start_sluice, wait_for, Services};
use support::prometheus::Prometheus;
use support::{free_port, http_get, try_http_get};

#[test]
fn prometheus_scrapes_what_sluice_counted() {
    let Some(services) = Services::start("run-metrics", &[]) else { return };
    let port = free_port();
    let (config, log) = services.config("metrics", "", &format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"));
    services.mariadb.sql_text(
        "CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(10));
         INSERT INTO shop.t VALUES (1,'a'),(2,'b'),(3,'c');
         UPDATE shop.t SET v = 'bb' WHERE id = 2;
         DELETE FROM shop.t WHERE id = 3;",
    );
    let mut child = start_sluice(&config, &log);
    let done = r#"sluice_row_changes_total{op="d",table="shop.t",source="metrics"} 1"#;
    let counted = || try_http_get(port, "/metrics").is_ok_and(|(_, text)| text.lines().any(|l| l == done));
    wait_for(60, counted, "sluice to count the delete", &log);

    // started without mimalloc's purge delay set, the process runs itself again with it at 0
    // (main.rs: freed pages given back at once), keeping its process id
    let environ = std::fs::read(format!("/proc/{}/environ", child.id())).unwrap();
    assert!(
        environ.split(|&b| b == 0).any(|v| v == b"MIMALLOC_PURGE_DELAY=0"),
        "{}",
        String::from_utf8_lossy(&environ)
    );
    // and its name, which `ps`, `top` and `pgrep sluice` show
    assert_eq!(std::fs::read_to_string(format!("/proc/{}/comm", child.id())).unwrap().trim_end(), "sluice");

    // the exposition passes Prometheus's own linter
    let text = http_get(port, "/metrics").1;
    support::prometheus::promtool_check(&text);

    // a real server scrapes it and answers queries with the same numbers
    let prom = Prometheus::start("run-metrics", &format!("127.0.0.1:{port}"));
    let q = r#"sluice_row_changes_total{table="shop.t"}"#;
    // c, u, d and t (tables emptied by TRUNCATE or DROP TABLE)
    wait_for(60, || prom.query(q).len() == 4, "Prometheus to scrape the row counters", &log);
    let mut by_op: Vec<(String, String)> = prom
        .query(q)
        .into_iter()
        .map(|(m, v)| {
            assert_eq!((m["job"].as_str(), m["source"].as_str()), (Some("sluice"), Some("metrics")), "{m}");
            (m["op"].as_str().unwrap().to_string(), v)
        })
        .collect();
    by_op.sort();
    let want = [("c", "3"), ("d", "1"), ("t", "0"), ("u", "1")].map(|(o, v)| (o.to_string(), v.to_string()));
    assert_eq!(by_op, want);
    assert_eq!(prom.query(r#"up{job="sluice"}"#).first().map(|(_, v)| v.clone()).as_deref(), Some("1"));
    let commits = prom.query("sluice_kafka_commit_seconds_count");
    assert!(commits.first().and_then(|(_, v)| v.parse::<f64>().ok()).is_some_and(|c| c >= 1.0), "{commits:?}");

    // every query of the Grafana dashboard runs on the real server; the panels of state and of
    // row changes have data already
    let want_data = ["Streaming", "Lag", "Binlog past the checkpoint", "Row changes/s by table and operation"];
    assert_eq!(prom.dashboard_queries(&want_data, &log), want_data.len());

    // a second instance cannot have the same port: a configuration error, said at once
    let out = Command::new(env!("CARGO_BIN_EXE_sluice")).args(["run", "--config"]).arg(&config).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("metrics.listen 127.0.0.1:{port}")), "{stderr}");

    child.kill().unwrap();
    child.wait().unwrap();
}
