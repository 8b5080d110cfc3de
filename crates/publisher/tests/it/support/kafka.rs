//! The Kafka side of the `sluice run` scenarios: the broker (noida-db, `integration/lib/broker.sh`)
//! and the test Schema Registry (`integration/lib/registry.sh`, `SLUICE_REGISTRY_BIN` may name a
//! prebuilt `sluice-test-registry`) next to a MariaDB [`Server`], a `sluice run` child process,
//! and an independent reader of the topics: rdkafka's `BaseConsumer` with `read_committed` and
//! apache-avro with the writer schema fetched from the registry by id, so nothing of Sluice's
//! own Kafka or Avro code judges Sluice's output.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use apache_avro::types::Value as Avro;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use super::{lib_sh, lib_sh_ok, work_dir, Server};

/// MariaDB, broker and registry for one scenario, all stopped on drop.
pub struct Services {
    pub name: String,
    pub mariadb: Server,
    /// `host:port`.
    pub broker: String,
    /// `http://host:port`.
    pub registry: String,
}

impl Drop for Services {
    fn drop(&mut self) {
        let _ = lib_sh("broker", &["stop", &self.name]);
        let _ = lib_sh("registry", &["stop", &self.name]);
    }
}

fn started(lib: &str, name: &str, key: &str) -> Result<String, String> {
    super::lib_started(lib, &["start", name], key)
}

impl Services {
    /// Starts the three services under `name` (MariaDB with extra `mariadbd` arguments), or
    /// `None` when MariaDB is not installed and not required. A broker or registry that cannot
    /// start skips loudly, or fails under `SLUICE_REQUIRE_MARIADB` (CI).
    pub fn start(name: &str, mariadb_args: &[&str]) -> Option<Services> {
        let mariadb = Server::start(name, mariadb_args)?;
        let rest = started("broker", name, "BROKER")
            .and_then(|broker| Ok((broker, started("registry", name, "REGISTRY_URL")?)));
        match rest {
            Ok((broker, registry)) => Some(Services { name: name.to_string(), mariadb, broker, registry }),
            Err(e) if std::env::var_os("SLUICE_REQUIRE_MARIADB").is_some() => panic!("services: {e}"),
            Err(e) => {
                eprintln!("\n*** SKIPPING {name}: cannot start the broker or the registry: {e} ***\n");
                None
            }
        }
    }

    /// Stops the broker (SIGTERM, waits for the exit).
    pub fn stop_broker(&self) {
        lib_sh_ok("broker", &["stop", &self.name]);
    }

    /// Starts the stopped broker again on its port with its data.
    pub fn start_broker_again(&self) {
        lib_sh_ok("broker", &["up", &self.name]);
    }

    /// Waits until the committed checkpoint of `source` is at the server's binlog end as of
    /// now (everything written so far is published).
    pub fn wait_caught_up(&self, prefix: &str, source: &str, log: &Path) {
        let (file, pos) = self.mariadb.master_status();
        wait_for(
            180,
            || {
                self.checkpoint(prefix, source).is_some_and(|c| {
                    c["file"].as_str() > Some(file.as_str())
                        || (c["file"].as_str() == Some(file.as_str()) && c["position"].as_u64().unwrap_or(0) >= pos)
                })
            },
            "the checkpoint to reach the binlog end",
            log,
        );
    }

    /// Sends `signal` (`STOP`, `CONT`) to the broker process: SIGSTOP stalls it with every
    /// connection kept open (no byte answered), as a hung broker or a path that drops packets.
    pub fn signal_broker(&self, signal: &str) {
        let pid = std::fs::read_to_string(work_dir().join(format!("broker-{}/pid", self.name))).unwrap();
        let st = Command::new("kill").arg(format!("-{signal}")).arg(pid.trim()).status().unwrap();
        assert!(st.success(), "kill -{signal} of the broker");
    }

    /// The registry's port.
    pub fn registry_port(&self) -> u16 {
        self.registry.rsplit(':').next().and_then(|p| p.trim_end_matches('/').parse().ok()).unwrap()
    }

    /// Stops the registry (its data stays).
    pub fn stop_registry(&self) {
        lib_sh_ok("registry", &["stop", &self.name]);
    }

    /// Starts the stopped registry again on its port with its data (ids and versions kept).
    pub fn start_registry_again(&self) {
        lib_sh_ok("registry", &["up", &self.name]);
    }

    /// The committed records of a JSON topic (`<prefix>.__positions`, `<prefix>.__signals`) of
    /// partition 0: key as text, value as JSON (None: a tombstone), read_committed.
    pub fn json_topic(&self, topic: &str) -> Vec<(String, Option<serde_json::Value>)> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.broker)
            .set("group.id", "sluice-test-raw")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "true")
            .set("fetch.wait.max.ms", "10")
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
        consumer.assign(&tpl).unwrap();
        // the end as of now: a topic committed to all the time (checkpoints) may never give an
        // end-of-partition event to a consumer that a broker answers by long-polling
        let end = match consumer.fetch_watermarks(topic, 0, Duration::from_secs(10)) {
            Ok((_, high)) => high,
            Err(_) => return Vec::new(), // not created yet
        };
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if consumer
                .position()
                .ok()
                .and_then(|p| p.elements().first().map(|e| e.offset()))
                .is_some_and(|o| matches!(o, Offset::Offset(o) if o >= end))
                || end == 0
            {
                return out;
            }
            match consumer.poll(Duration::from_millis(200)) {
                None => {}
                Some(Err(KafkaError::PartitionEOF(_))) => return out,
                // not created yet
                Some(Err(KafkaError::MessageConsumption(_))) => return out,
                Some(Err(e)) => panic!("{topic}: {e}"),
                Some(Ok(m)) => out.push((
                    String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(),
                    m.payload().map(|v| serde_json::from_slice(v).unwrap()),
                )),
            }
        }
        panic!("{topic}: did not reach the end");
    }

    /// The last committed checkpoint of source `source` under topic prefix `prefix`, as JSON.
    pub fn checkpoint(&self, prefix: &str, source: &str) -> Option<serde_json::Value> {
        self.json_topic(&format!("{prefix}.__positions")).into_iter().rev().find(|(k, _)| k == source)?.1
    }

    /// A scenario directory with a `sluice.toml` for these services: source `source_name`,
    /// starting at the earliest binlog, small batches, and `extra` TOML appended (later keys
    /// of a section must come in their own `[section]` table, so `extra` holds whole tables).
    pub fn config(&self, source_name: &str, kafka_extra: &str, extra: &str) -> (PathBuf, PathBuf) {
        let dir = work_dir().join(format!("run-{}", self.name));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("sluice.toml");
        let log = dir.join("sluice.log");
        let _ = std::fs::remove_file(&log);
        std::fs::write(
            &config,
            format!(
                r#"
[source]
name = "{source_name}"
url = "mysql://root@127.0.0.1:{port}"
tls = "disabled"
heartbeat = "1s"
start = "earliest"

[kafka]
brokers = "{broker}"
partitions = 2
batch_max_delay = "100ms"
batch_max_records = 50
{kafka_extra}

[registry]
url = "{registry}"
{extra}
{snapshot}
"#,
                // the scenarios that do not test snapshots stream only what they write
                snapshot = if extra.contains("[snapshot]") { "" } else { "[snapshot]\nmode = \"never\"" },
                port = self.mariadb.port,
                broker = self.broker,
                registry = self.registry,
            ),
        )
        .unwrap();
        (config, log)
    }
}

/// Starts `sluice run --config CONFIG`, its log appended to `log`.
pub fn start_sluice(config: &Path, log: &Path) -> Running {
    start_sluice_with(config, log, &[])
}

/// As [`start_sluice`], with extra environment variables (`SLUICE_*` overrides).
pub fn start_sluice_with(config: &Path, log: &Path, env: &[(&str, &str)]) -> Running {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--config"])
        .arg(config)
        .env("SLUICE_LOG", "info")
        // as a user's shell would start it (main.rs sets the allocator's purge delay itself)
        .env_remove("MIMALLOC_PURGE_DELAY")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    Running(child)
}

/// A `sluice run` child process, killed when dropped: a test that fails half-way leaves no
/// publisher running behind it.
pub struct Running(pub Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The log so far.
pub fn log_text(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// Polls `f` every half second for up to `secs`; panics with the sluice log when it never holds.
pub fn wait_for(secs: u64, mut f: impl FnMut() -> bool, what: &str, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!("timed out waiting for {what}; sluice log:\n{}", std::fs::read_to_string(log).unwrap_or_default());
}

/// One committed record, decoded with its writer schemas.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    /// None: a null key.
    pub key: Option<Avro>,
    /// None: a tombstone.
    pub value: Option<Avro>,
    /// The record's Kafka timestamp, ms since the epoch.
    pub timestamp: Option<i64>,
}

impl Record {
    /// The value's field `name` (envelope: `op`, `before`, `after`, ...; flattened: columns).
    pub fn field(&self, name: &str) -> Option<&Avro> {
        match self.value.as_ref()? {
            Avro::Record(f) => f.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The envelope's `op` (None for a tombstone).
    pub fn op(&self) -> Option<&str> {
        match self.field("op")? {
            Avro::String(s) => Some(s),
            _ => None,
        }
    }

    /// An image (`before` or `after`) of the envelope as column name → value, nulls of the
    /// union unwrapped.
    pub fn image(&self, which: &str) -> Option<BTreeMap<String, Avro>> {
        match unwrap_union(self.field(which)?) {
            Avro::Record(cols) => Some(cols.iter().map(|(k, v)| (k.clone(), unwrap_union(v).clone())).collect()),
            _ => None,
        }
    }

    /// The key's first field as an integer (the tests' tables key by an INT `id`).
    pub fn int_key(&self) -> i64 {
        match self.key.as_ref().map(unwrap_union) {
            Some(Avro::Record(f)) => match unwrap_union(&f[0].1) {
                Avro::Int(i) => i64::from(*i),
                Avro::Long(i) => *i,
                other => panic!("key field {other:?}"),
            },
            other => panic!("key {other:?}"),
        }
    }
}

/// The value inside a union branch (anything else as is).
pub fn unwrap_union(v: &Avro) -> &Avro {
    match v {
        Avro::Union(_, b) => b,
        other => other,
    }
}

/// Reads topics as an independent consumer would.
pub struct TopicReader {
    broker: String,
    registry: String,
    schemas: HashMap<u32, apache_avro::Schema>,
}

impl TopicReader {
    pub fn new(services: &Services) -> TopicReader {
        TopicReader { broker: services.broker.clone(), registry: services.registry.clone(), schemas: HashMap::new() }
    }

    fn schema(&mut self, id: u32) -> &apache_avro::Schema {
        let registry = self.registry.clone();
        self.schemas.entry(id).or_insert_with(|| {
            let out = Command::new("curl").args(["-sf", &format!("{registry}/schemas/ids/{id}")]).output().unwrap();
            assert!(out.status.success(), "GET /schemas/ids/{id} failed");
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            apache_avro::Schema::parse_str(v["schema"].as_str().unwrap()).unwrap()
        })
    }

    /// Decodes a Confluent-framed Avro datum (magic byte, schema id, body).
    pub fn decode(&mut self, bytes: &[u8]) -> Avro {
        assert_eq!(bytes[0], 0, "Confluent magic byte");
        let id = u32::from_be_bytes(bytes[1..5].try_into().unwrap());
        let schema = self.schema(id).clone();
        let mut body = &bytes[5..];
        let v = apache_avro::from_avro_datum(&schema, &mut body, None).unwrap();
        assert!(body.is_empty(), "{} bytes left after the datum", body.len());
        v
    }

    /// Everything committed in `topic` (read_committed), per partition in offset order,
    /// partitions one after another. Empty when the topic does not exist.
    pub fn read(&mut self, topic: &str) -> Vec<Record> {
        let mut out = Vec::new();
        self.scan(topic, |r| out.push(r));
        out.sort_by_key(|r| (r.partition, r.offset));
        out
    }

    /// Hands every committed record of `topic` to `f` as it is read (offset order within a
    /// partition; partitions interleaved), for topics too large to hold decoded.
    pub fn scan(&mut self, topic: &str, mut f: impl FnMut(Record)) {
        self.scan_raw(topic, |r, _, _| f(r));
    }

    /// As [`TopicReader::scan`], with each record's key and value bytes as written.
    pub fn scan_raw(&mut self, topic: &str, mut f: impl FnMut(Record, Option<&[u8]>, Option<&[u8]>)) {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.broker)
            .set("group.id", "sluice-test-reader")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "true")
            .set("fetch.wait.max.ms", "10")
            .create()
            .unwrap();
        let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
        let parts: Vec<i32> = md.topics().iter().flat_map(|t| t.partitions().iter().map(|p| p.id())).collect();
        if parts.is_empty() {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        for p in &parts {
            tpl.add_partition_offset(topic, *p, Offset::Beginning).unwrap();
        }
        consumer.assign(&tpl).unwrap();
        // each partition's end as of now: reached when the position passes it or an
        // end-of-partition event says so (a topic written all the time may never give one)
        let ends: HashMap<i32, i64> = parts
            .iter()
            .map(|p| (*p, consumer.fetch_watermarks(topic, *p, Duration::from_secs(10)).map_or(0, |w| w.1)))
            .collect();
        let mut eof = HashSet::new();
        let mut last = Instant::now();
        // no deadline while records flow; a minute of silence without every partition's end fails
        while eof.len() < parts.len() && last.elapsed() < Duration::from_secs(60) {
            if let Ok(pos) = consumer.position() {
                for e in pos.elements() {
                    if matches!(e.offset(), Offset::Offset(o) if o >= ends[&e.partition()]) || ends[&e.partition()] == 0
                    {
                        eof.insert(e.partition());
                    }
                }
                if eof.len() >= parts.len() {
                    break;
                }
            }
            match consumer.poll(Duration::from_millis(200)) {
                None => {}
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    eof.insert(p);
                }
                Some(Err(e)) => panic!("{topic}: {e}"),
                Some(Ok(m)) => {
                    last = Instant::now();
                    let key = m.key().map(|k| self.decode(k));
                    let value = m.payload().map(|v| self.decode(v));
                    let timestamp = m.timestamp().to_millis();
                    f(
                        Record { partition: m.partition(), offset: m.offset(), key, value, timestamp },
                        m.key(),
                        m.payload(),
                    );
                }
            }
        }
        assert!(eof.len() >= parts.len(), "{topic}: did not reach the end of every partition");
    }

    /// Per integer key, in order: `op:name` (the after-image's column `label`, when present),
    /// the bare op, or `tombstone`.
    pub fn per_key(&mut self, topic: &str, label: &str) -> BTreeMap<i64, Vec<String>> {
        let mut m: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        for r in self.read(topic) {
            let s = match r.op() {
                None => "tombstone".to_string(),
                Some(op) => match r.image("after").and_then(|a| a.get(label).cloned()) {
                    Some(Avro::String(s)) => format!("{op}:{s}"),
                    _ => op.to_string(),
                },
            };
            m.entry(r.int_key()).or_default().push(s);
        }
        m
    }
}
