//! A real Prometheus (Debian's 2.42, started by `integration/lib/prometheus.sh`, scraping one
//! target every second) and the queries of the chart's Grafana dashboard run against it.

use serde_json::Value as Json;

use super::kafka::wait_for;
use super::{http_get, lib_sh, lib_started, repo};

/// `promtool check metrics` finds nothing to say about an exposition.
pub fn promtool_check(text: &str) {
    use std::process::{Command, Stdio};
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (integration/lib/prometheus.sh install)");
    std::io::Write::write_all(&mut promtool.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let out = promtool.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics: {said}\n{text}");
}

/// Stops the scenario's Prometheus on drop.
pub struct Prometheus {
    name: String,
    port: u16,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = lib_sh("prometheus", &["stop", &self.name]);
    }
}

impl Prometheus {
    /// Starts a server that scrapes `target` (`host:port`) as job `sluice`.
    pub fn start(name: &str, target: &str) -> Prometheus {
        let url =
            lib_started("prometheus", &["start", name, target], "PROMETHEUS_URL").unwrap_or_else(|e| panic!("{e}"));
        let port = url.strip_prefix("http://127.0.0.1:").and_then(|p| p.parse().ok());
        Prometheus { name: name.to_string(), port: port.unwrap_or_else(|| panic!("PROMETHEUS_URL={url}")) }
    }

    /// An instant query: each series' labels and value.
    pub fn query(&self, promql: &str) -> Vec<(Json, String)> {
        let encoded: String = promql
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"_.-".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let (status, body) = http_get(self.port, &format!("/api/v1/query?query={encoded}"));
        assert_eq!(status, 200, "{body}");
        let v: Json = serde_json::from_str(&body).unwrap();
        v["data"]["result"]
            .as_array()
            .unwrap_or_else(|| panic!("{body}"))
            .iter()
            .map(|r| (r["metric"].clone(), r["value"][1].as_str().unwrap_or_default().to_string()))
            .collect()
    }

    /// Runs every query of the Grafana dashboard (`helm/sluice/files/dashboard.json`) with its
    /// variables set as Grafana would (`$source` and `$group`: all, `$__rate_interval`: 1m), each
    /// answering 200; the panels whose title is in `want_data` must have a series within 30 s.
    /// Returns how many queries had data (a panel may have several).
    pub fn dashboard_queries(&self, want_data: &[&str], log: &std::path::Path) -> usize {
        let dashboard: Json =
            serde_json::from_str(&std::fs::read_to_string(repo().join("helm/sluice/files/dashboard.json")).unwrap())
                .unwrap();
        let panels = dashboard["panels"].as_array().unwrap();
        assert!(panels.len() >= 8, "{dashboard}");
        let mut with_data = 0;
        for p in panels {
            let title = p["title"].as_str().unwrap();
            for t in p["targets"].as_array().unwrap() {
                let expr = t["expr"]
                    .as_str()
                    .unwrap()
                    .replace("$source", ".*")
                    .replace("$group", ".*")
                    .replace("$__rate_interval", "1m");
                if want_data.contains(&title) {
                    wait_for(
                        30,
                        || !self.query(&expr).is_empty(),
                        &format!("data for the panel {title:?}: {expr}"),
                        log,
                    );
                    with_data += 1;
                } else {
                    self.query(&expr); // answers 200 with a result, empty or not
                }
            }
        }
        with_data
    }
}

/// A real Prometheus Pushgateway (Debian's 1.5, `integration/lib/prometheus.sh`), stopped on drop.
pub struct Pushgateway {
    name: String,
    /// Its base URL.
    pub url: String,
}

impl Drop for Pushgateway {
    fn drop(&mut self) {
        let _ = lib_sh("prometheus", &["pushgateway-stop", &self.name]);
    }
}

impl Pushgateway {
    /// Starts one on a free port.
    pub fn start(name: &str) -> Pushgateway {
        let url = lib_started("prometheus", &["pushgateway-start", name], "PUSHGATEWAY_URL")
            .unwrap_or_else(|e| panic!("{e}"));
        Pushgateway { name: name.to_string(), url }
    }

    /// The series it serves of the metrics named `prefix*`, as exposition lines.
    pub fn series(&self, prefix: &str) -> Vec<String> {
        let port: u16 = self.url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
        let (status, body) = http_get(port, "/metrics");
        assert_eq!(status, 200, "{body}");
        body.lines().filter(|l| l.starts_with(prefix)).map(str::to_string).collect()
    }
}
