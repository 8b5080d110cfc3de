//! An Elasticsearch-API engine (noida-db or osmem, `integration/lib/elastic.sh`: no real
//! Elasticsearch installs here) and `sluice sink elasticsearch` child processes, for the
//! scenarios that keep indices equal to tables.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value as Json};

use super::{http_request, lib_started};

/// The engine, stopped on drop.
pub struct Engine {
    name: String,
    port: u16,
}

impl Engine {
    pub fn start(name: &str, engine: &str) -> Engine {
        let url = lib_started("elastic", &["start", name, engine], "ES_URL").unwrap_or_else(|e| panic!("elastic: {e}"));
        let port = url.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap();
        Engine { name: name.to_string(), port }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn call(&self, method: &str, path: &str, body: Option<&Json>) -> (u16, Json) {
        let text = body.map(Json::to_string);
        let (status, body) = http_request(self.port, method, path, text.as_deref()).unwrap();
        (status, serde_json::from_str(&body).unwrap_or(Json::Null))
    }

    /// Every document of `index` (after a refresh): `_id` → `_source`.
    pub fn documents(&self, index: &str) -> BTreeMap<String, Json> {
        self.call("POST", &format!("/{index}/_refresh"), None);
        let (status, body) =
            self.call("POST", &format!("/{index}/_search"), Some(&json!({"size": 10000, "query": {"match_all": {}}})));
        if status == 404 {
            return BTreeMap::new();
        }
        assert_eq!(status, 200, "{body}");
        body["hits"]["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| (h["_id"].as_str().unwrap().to_string(), h["_source"].clone()))
            .collect()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = super::lib_sh("elastic", &["stop", &self.name]);
    }
}

/// `sluice sink elasticsearch --config CONFIG`, its log appended to `log`, killed on drop.
pub struct Sink(pub Child);

impl Sink {
    /// With `/metrics` on `metrics`.
    pub fn start(config: &Path, log: &Path, metrics: u16) -> Sink {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["sink", "elasticsearch", "--config"])
            .arg(config)
            .env("SLUICE_LOG", std::env::var("SLUICE_TEST_SINK_LOG").unwrap_or_else(|_| "info".into()))
            .env("SLUICE_METRICS__LISTEN", format!("127.0.0.1:{metrics}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Sink(child)
    }

    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// SIGTERM: sends and commits its batch, then exits 0.
    pub fn stop(&mut self) {
        let st = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).status().unwrap();
        assert!(st.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(st) = self.0.try_wait().unwrap() {
                assert_eq!(st.code(), Some(0), "the sink's exit on SIGTERM");
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the sink did not stop on SIGTERM");
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.kill();
    }
}
