//! The fault suite (issue 13, short form): `sluice run` against the real MariaDB, broker and
//! registry while the network between them fails, the servers stall, restart or crash, and
//! Sluice itself is killed at the worst moments. Each scenario runs a write workload whose every
//! change is known (`support::workload`) and ends by reading the topics back with an
//! independent read_committed consumer: every committed change exactly once, in order per key.
//!
//! The network faults go through a TCP proxy on loopback (`support::proxy`) in front of MariaDB
//! and the registry; the broker advertises its own address (a proxy would be left after
//! bootstrap), so it is stalled by SIGSTOP of its process instead, and slowed by a SIGSTOP/SIGCONT
//! duty cycle. `SLUICE_FAULT_OUTAGE_SECS` sets the registry outage (default 60 s).

use crate::support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::kafka::{log_text, start_sluice_with, wait_for, Running, Services, TopicReader};
use support::proxy::{FaultProxy, Mode};
use support::workload::{burst, caught_up, workload, Model, Rng};
use support::{free_port, try_http_get};

/// A steady workload on `table` (about 200 transactions a second) until dropped or stopped.
struct Steady {
    model: Arc<Mutex<Model>>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
    seed: u64,
}

impl Steady {
    fn start(services: &Services, table: &str, seed: u64) -> Steady {
        let model = Arc::new(Mutex::new(Model::new(table)));
        services.mariadb.sql(&model.lock().unwrap().create_sql());
        let stop = Arc::new(AtomicBool::new(false));
        let paused = Arc::new(AtomicBool::new(false));
        let handle = workload(services.mariadb.port, seed, Arc::clone(&stop), paused, Arc::clone(&model));
        Steady { model, stop, handle: Some(handle), seed }
    }

    /// Stops writing; returns once every transaction written has committed.
    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
    }

    /// Stops, then waits until the topic holds exactly the model's changes.
    fn check(&mut self, reader: &mut TopicReader, topic: &str, log: &Path) {
        self.stop();
        caught_up(reader, topic, &self.model, self.seed, log);
        let m = self.model.lock().unwrap();
        eprintln!("{topic}: {} row changes to {} keys, each exactly once and in order", m.changes, m.expected.len());
    }
}

impl Drop for Steady {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// `[metrics]` on a free port: (config extra, port).
fn metrics() -> (String, u16) {
    let port = free_port();
    (format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"), port)
}

fn ready(port: u16) -> Option<bool> {
    try_http_get(port, "/readyz").ok().map(|(status, _)| status == 200)
}

/// Polls `/readyz` for `secs`; true when it said "not ready" (503) at least once.
fn saw_not_ready(port: u16, secs: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut seen = false;
    while Instant::now() < deadline {
        seen |= ready(port) == Some(false);
        std::thread::sleep(Duration::from_millis(250));
    }
    seen
}

fn wait_ready(port: u16, log: &Path) {
    wait_for(120, || ready(port) == Some(true), "/readyz to say ready", log);
}

/// The network to MariaDB cut, then stalled past the read timeout, then MariaDB killed with
/// SIGKILL and restarted cleanly while Sluice works through a backlog.
#[test]
fn mariadb_network_cut_stalled_and_server_crashes() {
    let Some(services) = Services::start("fault-db", &[]) else { return };
    let proxy = FaultProxy::start(services.mariadb.port);
    let (extra, mport) = metrics();
    let (config, log) = services.config("fdb", "", &extra);
    let mut steady = Steady::start(&services, "fdb.t", 41);
    let url = format!("mysql://root@127.0.0.1:{}", proxy.port);
    let env = [("SLUICE_SOURCE__URL", url.as_str())];
    let mut sluice = start_sluice_with(&config, &log, &env);
    wait_ready(mport, &log);
    std::thread::sleep(Duration::from_secs(2));

    // cut: every connection closed, new ones refused, for 5 s
    proxy.set(Mode::Cut);
    assert!(saw_not_ready(mport, 5), "/readyz kept saying ready while the source was cut off");
    proxy.set(Mode::Pass);
    wait_ready(mport, &log);
    std::thread::sleep(Duration::from_secs(2));

    // stall: connections open, nothing forwarded, longer than the read timeout (heartbeat 1 s:
    // 3 heartbeats + 5 s = 8 s)
    let before = log_text(&log).len();
    proxy.set(Mode::Stall);
    std::thread::sleep(Duration::from_secs(12));
    let during = log_text(&log)[before..].to_string();
    assert!(
        during.contains("timed out after 8000 ms"),
        "a stall past the heartbeat was not detected by the read timeout:\n{during}"
    );
    proxy.set(Mode::Pass);
    wait_ready(mport, &log);
    let mut reader = TopicReader::new(&services);
    steady.check(&mut reader, "sluice.fdb.t", &log);

    // MariaDB crashes (SIGKILL), then restarts cleanly, each while Sluice publishes a backlog
    let mut rng = Rng(43);
    for kill in [true, false] {
        burst(services.mariadb.port, &steady.model, &mut rng, 3000);
        services.mariadb.restart(kill);
        caught_up(&mut reader, "sluice.fdb.t", &steady.model, 43, &log);
    }
    let text = log_text(&log);
    assert!(sluice.try_wait().unwrap().is_none(), "sluice run exited:\n{text}");
    let m = steady.model.lock().unwrap();
    eprintln!("after the server restarts: {} row changes to {} keys, exactly once", m.changes, m.expected.len());
    stop(&mut sluice);
}

/// The registry away for a minute (new schemas to register meanwhile), then answering 503, then
/// stalled past the client's 30 s timeout: retried with backoff, `/readyz` not ready, nothing
/// lost.
#[test]
fn registry_away_failing_and_stalled() {
    let Some(services) = Services::start("fault-reg", &[]) else { return };
    let proxy = FaultProxy::start(services.registry_port());
    let (extra, mport) = metrics();
    let (config, log) = services.config("freg", "", &extra);
    let outage: u64 = std::env::var("SLUICE_FAULT_OUTAGE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let mut steady = Steady::start(&services, "freg.t", 51);
    let url = format!("http://127.0.0.1:{}", proxy.port);
    // batches of the default size, so a backlog left by one fault is gone before the next
    let env = [("SLUICE_REGISTRY__URL", url.as_str()), ("SLUICE_KAFKA__BATCH_MAX_RECORDS", "100000")];
    let mut sluice = start_sluice_with(&config, &log, &env);
    wait_ready(mport, &log);
    std::thread::sleep(Duration::from_secs(2));
    let mut reader = TopicReader::new(&services);
    let mut rng = Rng(53);

    for (i, mode, secs) in [(2, Mode::Stall, 40), (3, Mode::Cut, outage), (4, Mode::Http503, 10)] {
        // a table new to the registry, written while it is away: its schemas must wait
        let table = format!("freg.t{i}");
        let fresh = Mutex::new(Model::new(&table));
        services.mariadb.sql(&fresh.lock().unwrap().create_sql());
        // the fault begins with Sluice at the binlog end, so it meets the new table at once
        services.wait_caught_up("sluice", "freg", &log);
        let before = log_text(&log).len();
        let started = Instant::now();
        proxy.set(mode);
        burst(services.mariadb.port, &fresh, &mut rng, 100);
        // not ready once the new table's registration fails (a stall: after the 30 s timeout)
        let deadline = started + Duration::from_secs(secs.max(30) + 30);
        while ready(mport) != Some(false) {
            assert!(Instant::now() < deadline, "{mode:?}: /readyz kept saying ready:\n{}", log_text(&log));
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep((started + Duration::from_secs(secs)).saturating_duration_since(Instant::now()));
        let during = log_text(&log)[before..].to_string();
        let cause = match mode {
            Mode::Http503 => "answered 503",
            Mode::Stall => "timed out",
            _ => "cannot reach the Schema Registry",
        };
        assert!(during.contains(cause), "{mode:?}: the log does not say {cause:?}:\n{during}");
        proxy.set(Mode::Pass);
        caught_up(&mut reader, &format!("sluice.{table}"), &fresh, 53, &log);
        eprintln!("{mode:?} for {secs} s: {} changes of {table} exactly once", fresh.lock().unwrap().changes);
    }
    steady.check(&mut reader, "sluice.freg.t", &log);
    stop(&mut sluice);
}

/// The broker stalled (SIGSTOP) for 15 s, then slow for 20 s (stopped 3/4 of the time) while
/// the workload goes on: back-pressure, bounded memory, lag that grows and recovers.
#[test]
fn broker_stalled_and_slow() {
    let Some(services) = Services::start("fault-kafka", &[]) else { return };
    let (extra, mport) = metrics();
    let (config, log) = services.config("fk", "", &extra);
    let mut steady = Steady::start(&services, "fk.t", 61);
    let mut sluice = start_sluice_with(&config, &log, &[]);
    wait_ready(mport, &log);
    std::thread::sleep(Duration::from_secs(2));
    let pid = sluice.id();
    let lag = || {
        let (file, pos) = services.mariadb.master_status();
        services.checkpoint("sluice", "fk").map_or(u64::MAX, |c| {
            if c["file"].as_str() == Some(file.as_str()) {
                pos.saturating_sub(c["position"].as_u64().unwrap_or(0))
            } else {
                u64::MAX
            }
        })
    };

    // the lag gauge while the broker is stopped: the pipeline blocks in its commit and reads
    // nothing, so the lag must grow with the silence, not stay at the last figure read
    let lag_seconds = || {
        let text = try_http_get(mport, "/metrics").map(|(_, body)| body).unwrap_or_default();
        text.lines().find_map(|l| l.strip_prefix("sluice_lag_seconds{source=\"fk\"} ")?.parse::<i64>().ok())
    };
    services.signal_broker("STOP");
    std::thread::sleep(Duration::from_secs(14));
    let stalled_lag = lag_seconds();
    std::thread::sleep(Duration::from_secs(1));
    services.signal_broker("CONT");
    // heartbeat 1s: silent for more than 4 s counts; the commit blocked within a second or two
    assert!(stalled_lag.is_some_and(|l| l >= 8), "sluice_lag_seconds while nothing could be read: {stalled_lag:?}");

    let (mut max_rss, mut max_lag) = (0u64, 0u64);
    let slow_until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < slow_until {
        services.signal_broker("STOP");
        std::thread::sleep(Duration::from_millis(150));
        services.signal_broker("CONT");
        std::thread::sleep(Duration::from_millis(50));
        max_rss = max_rss.max(rss_kib(pid));
        // sampled while the broker is slow: once it is not, Sluice catches up within a commit or two
        let l = lag();
        if l != u64::MAX {
            max_lag = max_lag.max(l);
        }
    }
    let mut reader = TopicReader::new(&services);
    steady.check(&mut reader, "sluice.fk.t", &log);
    let after = lag();
    eprintln!(
        "stalled broker: sluice_lag_seconds {stalled_lag:?} after 14 s; slow broker: peak RSS {} MiB, lag {max_lag} \
         bytes after it, {after} once caught up",
        max_rss / 1024
    );
    assert!(max_lag > 0 && max_lag != u64::MAX, "no lag while the broker was slow");
    assert_eq!(after, 0, "the lag did not recover");
    wait_for(30, || lag_seconds().is_some_and(|l| l <= 2), "sluice_lag_seconds to recover", &log);
    // a debug build with default queue bounds: far below what an unbounded backlog would take
    assert!(max_rss < 200 * 1024, "peak RSS {} MiB while the broker was slow", max_rss / 1024);
    stop(&mut sluice);
}

/// SIGKILL of Sluice while it registers a schema (the registry link slowed to a trickle) and
/// inside MySQL transactions of 20,000 rows, far larger than one Kafka batch (50 records here).
#[test]
fn sigkills_during_registration_and_inside_large_transactions() {
    let Some(services) = Services::start("fault-kill", &[]) else { return };
    let proxy = FaultProxy::start(services.registry_port());
    let (config, log) = services.config("fkill", "", "");
    let model = Mutex::new(Model::new("fkill.t"));
    services.mariadb.sql(&model.lock().unwrap().create_sql());
    let url = format!("http://127.0.0.1:{}", proxy.port);
    let env = [("SLUICE_REGISTRY__URL", url.as_str())];
    let mut sluice = start_sluice_with(&config, &log, &env);
    wait_for(60, || log_text(&log).contains("Streaming"), "sluice run to stream", &log);
    let topic = "sluice.fkill.t";
    let mut reader = TopicReader::new(&services);
    let mut rng = Rng(71);

    // registration: a schema request takes seconds at 100 bytes/s; killed in the middle
    proxy.set(Mode::Throttle(100));
    let connections = proxy.connections();
    burst(services.mariadb.port, &model, &mut rng, 20);
    wait_for(30, || proxy.connections() > connections, "a registry request", &log);
    std::thread::sleep(Duration::from_secs(2));
    assert!(reader.read(topic).is_empty(), "published before the schema was registered");
    sluice.kill().unwrap();
    sluice.wait().unwrap();
    proxy.set(Mode::Pass);
    sluice = start_sluice_with(&config, &log, &env);
    caught_up(&mut reader, topic, &model, 71, &log);

    // transactions of 20,000 rows, killed 0.3, 1 and 2 s after each commits
    for delay in [300, 1000, 2000] {
        let mut sql = String::from("BEGIN;");
        {
            let mut m = model.lock().unwrap();
            for _ in 0..20_000 {
                m.insert(&mut sql);
            }
        }
        sql.push_str("COMMIT;");
        support::try_sql(services.mariadb.port, &sql).unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        sluice.kill().unwrap();
        sluice.wait().unwrap();
        sluice = start_sluice_with(&config, &log, &env);
        caught_up(&mut reader, topic, &model, 71, &log);
    }
    let m = model.lock().unwrap();
    eprintln!("{} row changes exactly once across the kills", m.changes);
    stop(&mut sluice);
}

/// The resident set of `pid` in KiB (0 when unreadable).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// SIGTERM, and a clean exit.
fn stop(sluice: &mut Running) {
    std::process::Command::new("kill").arg(sluice.id().to_string()).status().unwrap();
    let status = sluice.wait().unwrap();
    assert!(status.success(), "exit status after SIGTERM: {status}");
}
