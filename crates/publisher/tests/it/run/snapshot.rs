//! Snapshots against the real MariaDB, broker and registry, read back by an independent
//! read_committed consumer (rdkafka + apache-avro with the registered writer schemas):
//!
//! - a table of `SLUICE_SNAPSHOT_ROWS` rows (default 2,000,000) and small tables (a composite
//!   latin1 key, no key at all) snapshotted while a workload inserts, updates (also the primary
//!   key) and deletes, with `sluice run` killed with SIGKILL ten times during the snapshot: each
//!   topic replayed per key gives exactly the rows `SELECT` returns, no key has two `r` records,
//!   no binlog change is published twice, no key goes back to an older state, and every restart
//!   resumed after the last committed chunk;
//! - fidelity: for every column type, a row's `r` record equals, field by field and byte for
//!   byte, the after image its binlog insert carried;
//! - on demand: a table added to the filter later is snapshotted with `sluice snapshot` while
//!   another keeps streaming; bad requests are refused; a table dropped and one altered while
//!   being read end well.

use crate::support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apache_avro::types::Value as Avro;
use support::kafka::{log_text, start_sluice_with, unwrap_union, wait_for, Record, Running, Services, TopicReader};

/// `sluice run` as a snapshot is meant to start: streaming from the server's current position
/// (the scenarios' configurations say `earliest`), with Kafka batches of the default size (the
/// scenarios' 50 records hold the stream to a few hundred changes a second, and a chunk is
/// published only once the stream has passed its high watermark).
fn start_sluice(config: &Path, log: &Path) -> Running {
    start_sluice_with(
        config,
        log,
        &[("SLUICE_SOURCE__START", "current"), ("SLUICE_KAFKA__BATCH_MAX_RECORDS", "100000")],
    )
}

fn long(v: &Avro) -> i64 {
    match unwrap_union(v) {
        Avro::Long(v) => *v,
        Avro::Int(v) => i64::from(*v),
        other => panic!("not an integer: {other:?}"),
    }
}

fn field<'a>(img: &'a BTreeMap<String, Avro>, name: &str) -> &'a Avro {
    img.get(name).unwrap_or_else(|| panic!("no field {name} in {img:?}"))
}

/// The record's `source` block field `name`.
fn source_field(r: &Record, name: &str) -> Avro {
    match r.field("source").map(unwrap_union) {
        Some(Avro::Record(f)) => f.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()).unwrap(),
        other => panic!("source {other:?}"),
    }
}

/// The snapshot progress in the last checkpoint.
fn progress(services: &Services, prefix: &str, source: &str) -> Option<serde_json::Value> {
    services.checkpoint(prefix, source).and_then(|c| c.get("snapshot").cloned())
}

fn snapshot_done(services: &Services, prefix: &str, source: &str) -> bool {
    progress(services, prefix, source).is_some_and(|p| {
        p["tables"].as_array().is_some_and(|t| t.iter().all(|t| t["state"] == "done" || t["state"] == "skipped"))
    })
}

/// What a topic says per key: the records in order (op, after image).
type History = BTreeMap<i64, Vec<(String, Option<BTreeMap<String, Avro>>)>>;

/// Reads `topic` and checks what every topic of a snapshot must satisfy; returns each key's
/// history. `version` names the after image's column that only grows (None: no such column).
fn check_topic(reader: &mut TopicReader, topic: &str, version: Option<&str>) -> History {
    let mut history: History = BTreeMap::new();
    let mut changes: HashSet<(String, i64, i64, String, i64)> = HashSet::new();
    let mut n = 0usize;
    reader.scan(topic, |r| {
        n += 1;
        let key = r.int_key();
        let Some(op) = r.op().map(str::to_string) else {
            history.entry(key).or_default().push(("tombstone".into(), None));
            return;
        };
        if op != "r" {
            let file = match source_field(&r, "file") {
                Avro::String(s) => s,
                other => panic!("{other:?}"),
            };
            let id = (file, long(&source_field(&r, "pos")), long(&source_field(&r, "row")), op.clone(), key);
            assert!(changes.insert(id.clone()), "{topic}: the binlog change {id:?} was published twice");
        }
        history.entry(key).or_default().push((op, r.image("after")));
    });
    eprintln!("{topic}: {n} records, {} keys", history.len());
    for (key, h) in &history {
        let reads = h.iter().filter(|(op, _)| op == "r").count();
        assert!(reads <= 1, "{topic}: key {key} has {reads} r records: {h:?}");
        let mut last_version = i64::MIN;
        let mut deleted = false;
        for (op, after) in h {
            match op.as_str() {
                "d" => deleted = true,
                "tombstone" => assert!(deleted, "{topic}: key {key}: a tombstone without a delete: {h:?}"),
                _ => {
                    assert!(!deleted, "{topic}: key {key} comes back after its delete: {h:?}");
                    if let (Some(col), Some(a)) = (version, after) {
                        let v = long(field(a, col));
                        assert!(v >= last_version, "{topic}: key {key} goes back from {last_version} to {v}: {h:?}");
                        last_version = v;
                    }
                }
            }
        }
    }
    history
}

/// The final state per key of a history (None: deleted).
fn final_rows(history: &History) -> BTreeMap<i64, BTreeMap<String, Avro>> {
    history
        .iter()
        .filter_map(|(k, h)| {
            let (op, after) = h.iter().rfind(|(op, _)| op != "tombstone")?;
            (op != "d").then(|| (*k, after.clone().unwrap()))
        })
        .collect()
}

#[test]
fn snapshot_under_writes_and_sigkills_is_exact_and_resumes() {
    let Some(services) = Services::start("snap-kill", &[]) else { return };
    let db = &services.mariadb;
    let rows: u64 = std::env::var("SLUICE_SNAPSHOT_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000_000);
    let started = Instant::now();
    db.sql_text(&format!(
        "CREATE DATABASE sk; USE sk;
         CREATE TABLE big (id BIGINT PRIMARY KEY, v INT NOT NULL, k INT, pad VARCHAR(40));
         INSERT INTO big SELECT seq, 0, seq % 1000, CONCAT('row-', seq) FROM seq_1_to_{rows};
         CREATE TABLE ck (a VARCHAR(10), b INT, v INT NOT NULL, PRIMARY KEY (a, b)) DEFAULT CHARSET latin1;
         INSERT INTO ck SELECT CONCAT(CHAR(97 + seq % 26), 'é'), seq, 0 FROM seq_1_to_2000;
         CREATE TABLE nokey (x INT, y VARCHAR(10));
         INSERT INTO nokey SELECT seq % 7, 'n' FROM seq_1_to_300;"
    ));
    eprintln!("{rows} rows loaded in {:.1} s", started.elapsed().as_secs_f64());
    let metrics_port = support::free_port();
    let (config, log) = services.config(
        "kill",
        "topic_prefix = \"sk\"",
        &format!("[filter]\ninclude = [\"sk.*\"]\n[snapshot]\nchunk_size = 10000\n[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n"),
    );
    let mut sluice = start_sluice(&config, &log);
    wait_for(60, || log_text(&log).contains("Snapshot: reading the table in chunks"), "the snapshot to begin", &log);

    // the workload: fresh ids only, so a deleted key never comes back; `v` only grows
    let stop = Arc::new(AtomicBool::new(false));
    let workload = {
        let (stop, port) = (Arc::clone(&stop), db.port);
        std::thread::spawn(move || {
            let mut next_id = 10_000_000i64;
            let mut ops = 0u64;
            let mut rng = fastrand::Rng::with_seed(7);
            while !stop.load(Ordering::Relaxed) {
                let mut sql = String::from("USE sk;\n");
                for _ in 0..40 {
                    let id = rng.i64(1..=i64::try_from(rows).unwrap());
                    match rng.u8(0..10) {
                        0..=3 => sql.push_str(&format!("UPDATE big SET v = v + 1, pad = 'u{ops}' WHERE id = {id};\n")),
                        4 | 5 => {
                            next_id += 1;
                            sql.push_str(&format!("INSERT INTO big VALUES ({next_id}, 0, 1, 'new');\n"));
                        }
                        6 => sql.push_str(&format!("DELETE FROM big WHERE id = {id};\n")),
                        7 => {
                            next_id += 1;
                            sql.push_str(&format!("UPDATE big SET id = {next_id}, v = v + 1 WHERE id = {id};\n"));
                        }
                        8 => sql.push_str(&format!(
                            "BEGIN; UPDATE big SET v = v + 1 WHERE id = {id}; UPDATE ck SET v = v + 1 WHERE b = {}; COMMIT;\n",
                            id % 2000 + 1
                        )),
                        _ => sql.push_str(&format!("UPDATE nokey SET y = 'w' WHERE x = {};\n", id % 7)),
                    }
                    ops += 1;
                }
                if let Err(e) = support::try_sql(port, &sql) {
                    panic!("workload: {e}");
                }
                // a steady load (about a thousand changes a second at most), not a flood
                std::thread::sleep(Duration::from_millis(40));
            }
            ops
        })
    };

    // ten SIGKILLs while the big table is read, each followed by a restart. Each comes once
    // the running instance has committed a random share of the table of its own (a chunk to
    // a fifteenth) and up to 50 ms more: every instance makes progress, and the kills land
    // over the first half or so of the table (the last at 54% in a run on 2026-12-07) whatever
    // the machine's speed; kills 0.7-2 s apart let a machine 1.5x faster finish the table
    // after six. The progress: the instance's metrics (rows committed since it started) and
    // its log (the rows it resumed after), read in a millisecond; the checkpoint topic takes
    // half a second to read, in which the snapshot moves a tenth of the table.
    let mut rng = fastrand::Rng::with_seed(11);
    let (mut kills, mut last_kill_at) = (0, 0);
    let committed_since_start = || -> Option<u64> {
        let (_, text) = support::try_http_get(metrics_port, "/metrics").ok()?;
        let series = "sluice_snapshot_rows_total{table=\"sk.big\"";
        text.lines().find(|l| l.starts_with(series))?.rsplit(' ').next()?.parse().ok()
    };
    let resumed_after = || -> u64 {
        log_text(&log)
            .lines()
            .rfind(|l| l.contains("Snapshot: resuming the table") && l.contains("table=sk.big"))
            .and_then(|l| l.split(" rows=").nth(1)?.split(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    // (a chunk at least: a small SLUICE_SNAPSHOT_ROWS must not make the range empty)
    let largest_share = (rows / 15).max(10_000);
    let near_end = |since: u64| resumed_after() + since > rows * 5 / 6;
    while kills < 10 {
        let deadline = Instant::now() + Duration::from_secs(300);
        let share = rng.u64(10_000..=largest_share);
        // until the share is committed, or the table is near its end (then the assert below
        // says so, rather than this wait timing out)
        loop {
            let since = committed_since_start().unwrap_or(0);
            if since >= share || near_end(since) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{share} rows not committed ({since} so far); sluice log:\n{}",
                log_text(&log)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(rng.u64(0..50)));
        let big_rows = resumed_after() + committed_since_start().unwrap_or(0);
        if big_rows > rows * 5 / 6 {
            break;
        }
        last_kill_at = big_rows;
        sluice.0.kill().unwrap();
        sluice.0.wait().unwrap();
        kills += 1;
        sluice = start_sluice(&config, &log);
    }
    assert_eq!(
        kills, 10,
        "the snapshot was near its end after {kills} kills: give it more rows (SLUICE_SNAPSHOT_ROWS)"
    );
    eprintln!("{kills} kills at {:.1} s, the last at {last_kill_at} rows", started.elapsed().as_secs_f64());
    wait_for(600, || snapshot_done(&services, "sk", "kill"), "the snapshot to finish", &log);
    stop.store(true, Ordering::Relaxed);
    let ops = workload.join().unwrap();
    services.wait_caught_up("sk", "kill", &log);
    let _ = Command::new("kill").arg(sluice.0.id().to_string()).status();
    let _ = sluice.0.wait();
    eprintln!("snapshot and {ops} workload operations done at {:.1} s", started.elapsed().as_secs_f64());

    // every restart during the big table's snapshot resumed after its last committed chunk
    let text = log_text(&log);
    let resumed: Vec<u64> = text
        .lines()
        .filter(|l| l.contains("Snapshot: resuming the table after its last committed chunk") && l.contains("sk.big"))
        .filter_map(|l| l.split("rows=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect();
    // a kill before the first chunk's commit leaves nothing to resume from
    assert!(resumed.len() + 1 >= kills, "{kills} kills, but resumptions of sk.big logged: {resumed:?}\n{text}");
    assert!(resumed.windows(2).all(|w| w[0] <= w[1]), "resumed from fewer rows than before: {resumed:?}");
    assert!(resumed.iter().all(|&r| r > 0), "a restart read sk.big from the start: {resumed:?}");

    let mut reader = TopicReader::new(&services);
    let history = check_topic(&mut reader, "sk.sk.big", Some("v"));
    let got = final_rows(&history);
    let want: BTreeMap<i64, (i64, String, String)> = db
        .sql("SELECT id, v, IFNULL(k, 'NULL'), pad FROM sk.big")
        .into_iter()
        .map(|r| (r[0].parse().unwrap(), (r[1].parse().unwrap(), r[2].clone(), r[3].clone())))
        .collect();
    assert_eq!(got.len(), want.len(), "sk.big: the topic's final rows and SELECT differ in number");
    for (id, (v, k, pad)) in &want {
        let a = got.get(id).unwrap_or_else(|| panic!("sk.big: row {id} is not in the topic"));
        assert_eq!(long(field(a, "v")), *v, "sk.big row {id}: v");
        assert_eq!(long(field(a, "k")).to_string(), *k, "sk.big row {id}: k");
        assert_eq!(field(a, "pad"), &Avro::String(pad.clone()), "sk.big row {id}: pad");
    }
    let reads = history.values().flatten().filter(|(op, _)| op == "r").count() as u64;
    let p = progress(&services, "sk", "kill").unwrap();
    let table = |name: &str| p["tables"].as_array().unwrap().iter().find(|t| t["table"] == name).unwrap().clone();
    assert_eq!(table("sk.big")["rows"].as_u64().unwrap(), reads, "r records and the committed progress differ");
    assert!(reads > rows / 2, "only {reads} rows of {rows} were read by the snapshot");

    // the composite latin1 key
    let ck = reader.read("sk.sk.ck");
    let mut last: HashMap<(String, i64), (String, i64)> = HashMap::new();
    let mut ck_reads: HashMap<(String, i64), usize> = HashMap::new();
    for r in &ck {
        let Some(Avro::Record(k)) = r.key.as_ref().map(unwrap_union) else { panic!("ck key {:?}", r.key) };
        let a = match unwrap_union(&k[0].1) {
            Avro::String(s) => s.clone(),
            other => panic!("{other:?}"),
        };
        let key = (a, long(&k[1].1));
        let op = r.op().unwrap_or("tombstone").to_string();
        if op == "r" {
            *ck_reads.entry(key.clone()).or_default() += 1;
        }
        let v = r.image("after").map_or(-1, |a| long(field(&a, "v")));
        if let Some((_, before)) = last.get(&key) {
            assert!(v >= *before, "sk.ck {key:?} went back from {before} to {v}");
        }
        last.insert(key, (op, v));
    }
    assert!(ck_reads.values().all(|&n| n == 1), "sk.ck: a key read twice or not at all");
    let want_ck: HashMap<(String, i64), i64> = db
        .sql("SELECT a, b, v FROM sk.ck")
        .into_iter()
        .map(|r| ((r[0].clone(), r[1].parse().unwrap()), r[2].parse().unwrap()))
        .collect();
    assert_eq!(want_ck.len(), 2000);
    for (k, v) in &want_ck {
        assert_eq!(last.get(k).map(|(_, v)| *v), Some(*v), "sk.ck {k:?}");
    }
    // the keyless table: read in one pass, then its updates
    let nokey = reader.read("sk.sk.nokey");
    assert_eq!(nokey.iter().filter(|r| r.op() == Some("r")).count(), 300, "sk.nokey: one r record per row");
    assert_eq!(table("sk.nokey")["state"], "done");
    eprintln!("checked at {:.1} s", started.elapsed().as_secs_f64());
}

/// SIGTERM sent to `sluice run` and how long it took to exit 0; panics if it does not.
fn terminate(sluice: &mut Running, log: &Path) -> Duration {
    let asked = Instant::now();
    let _ = Command::new("kill").args(["-TERM", &sluice.0.id().to_string()]).status();
    let status = sluice.0.wait().unwrap();
    assert_eq!(status.code(), Some(0), "sluice's exit on SIGTERM; log:\n{}", log_text(log));
    asked.elapsed()
}

/// A stop during a snapshot on a quiet server: every chunk is due at once there, so the stop
/// used to wait for the whole table (or gave up after its 10 s grace without committing).
/// SIGTERM during a chunked table now commits at the next chunk and exits at once, the next
/// start resumes after that chunk; during a keyless table's one pass (not resumable) it
/// aborts the open Kafka transaction and exits at once, the next start reads the table again.
/// Each table's topic then holds exactly one `r` record per row.
#[test]
fn a_stop_during_a_snapshot_is_prompt_and_loses_nothing() {
    let Some(services) = Services::start("snap-stop", &[]) else { return };
    let db = &services.mariadb;
    let (big, nokey) = (100_000u64, 200_000u64);
    db.sql_text(&format!(
        "CREATE DATABASE ss; USE ss;
         CREATE TABLE big (id BIGINT PRIMARY KEY, pad VARCHAR(40));
         INSERT INTO big SELECT seq, CONCAT('row-', seq) FROM seq_1_to_{big};
         CREATE TABLE nokey (x INT, y VARCHAR(20));
         INSERT INTO nokey SELECT seq, CONCAT('n-', seq) FROM seq_1_to_{nokey};"
    ));
    let metrics_port = support::free_port();
    let (config, log) = services.config(
        "stop",
        "topic_prefix = \"ss\"",
        &format!(
            "[filter]\ninclude = [\"ss.*\"]\n[snapshot]\nchunk_size = 500\n[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n"
        ),
    );
    let env = [("SLUICE_SOURCE__START", "current"), ("SLUICE_KAFKA__BATCH_MAX_RECORDS", "5000")];
    let table = |name: &str| -> Option<serde_json::Value> {
        progress(&services, "ss", "stop")?["tables"].as_array()?.iter().find(|t| t["table"] == name).cloned()
    };

    // polled every 20 ms (the checkpoint topic takes half a second to read, in which the
    // snapshot moves tens of thousands of rows)
    let soon = |what: &str, f: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !f() {
            assert!(Instant::now() < deadline, "no {what}; log:\n{}", log_text(&log));
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let committed = || -> bool {
        support::try_http_get(metrics_port, "/metrics").is_ok_and(|(_, text)| {
            text.lines().any(|l| l.starts_with("sluice_snapshot_rows_total{table=\"ss.big\"") && !l.ends_with(" 0"))
        })
    };

    // the chunked table: stopped once some of it is committed
    let mut sluice = start_sluice_with(&config, &log, &env);
    soon("committed chunk", &committed);
    let took = terminate(&mut sluice, &log);
    let text = log_text(&log);
    assert!(took < Duration::from_secs(5), "the stop took {took:?}; log:\n{text}");
    assert!(text.contains("Stopped after committing"), "{text}");
    assert!(!text.contains("without committing"), "{text}");
    let t = table("ss.big").unwrap();
    let at_stop = t["rows"].as_u64().unwrap();
    assert!(t["state"] == "running" && at_stop < big, "the stop waited for the table: {t}");
    eprintln!("stopped after {at_stop} of {big} rows in {took:?}");

    // the keyless table: stopped during its one pass (this start resumes the chunked one)
    let second = log_text(&log).len();
    let mut sluice = start_sluice_with(&config, &log, &env);
    soon("one pass", &|| log_text(&log).lines().any(|l| l.contains("in one pass") && l.contains("table=ss.nokey")));
    std::thread::sleep(Duration::from_millis(200));
    let took = terminate(&mut sluice, &log);
    let text = log_text(&log);
    assert!(took < Duration::from_secs(5), "the stop took {took:?}; log:\n{text}");
    assert!(text.contains("Stopped during the one-pass read"), "{text}");
    let run2 = text.get(second..).unwrap_or_default();
    assert!(run2.contains("resuming the table after its last committed chunk table=ss.big"), "{run2}");
    assert_ne!(table("ss.nokey").unwrap()["state"], "done");

    // the third start resumes (what it logs, not the runs' before it)
    let before = log_text(&log).len();
    let mut sluice = start_sluice_with(&config, &log, &env);
    wait_for(300, || snapshot_done(&services, "ss", "stop"), "the snapshot to finish", &log);
    terminate(&mut sluice, &log);
    let text = log_text(&log);
    let third = text.get(before..).unwrap_or_default();
    // the keyless table read again, whole, from its beginning
    assert!(
        third.lines().any(|l| l.contains("Snapshot: table done (one pass)") && l.contains(&format!("rows={nokey}"))),
        "{third}"
    );

    let mut reader = TopicReader::new(&services);
    let history = check_topic(&mut reader, "ss.ss.big", None);
    assert_eq!(history.len() as u64, big, "ss.big: keys in the topic");
    assert!(
        history.values().all(|h| h.len() == 1 && h.first().is_some_and(|(op, _)| op == "r")),
        "ss.big: a key with other than one r record"
    );
    let rows = reader.read("ss.ss.nokey");
    assert_eq!(rows.len() as u64, nokey, "ss.nokey: records in the topic (read_committed)");
    let xs: HashSet<i64> = rows.iter().map(|r| long(field(&r.image("after").unwrap(), "x"))).collect();
    assert_eq!(xs.len() as u64, nokey, "ss.nokey: each row once");
}

/// `sluice snapshot` with the scenario's configuration; (exit code, stdout, stderr).
fn request(config: &Path, tables: &[&str], wait: bool) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(["snapshot", "--config"]).arg(config);
    for t in tables {
        cmd.args(["--table", t]);
    }
    if wait {
        cmd.arg("--wait");
    }
    let out = cmd.output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// The Confluent schema id of a framed datum.
fn schema_id(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes[1..5].try_into().unwrap())
}

/// The table of every type, its columns ordered so that MariaDB's optional metadata counts
/// differ from MySQL's (a YEAR before signed numbers, a GEOMETRY before a VARCHAR).
const TYPES: &str = "
CREATE TABLE types (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  yr YEAR, ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  dec65 DECIMAL(65,30), dec10 DECIMAL(10,2), dec0 DECIMAL(20,0), f FLOAT, d DOUBLE,
  dt DATE, tm TIME(6), tm0 TIME, tm3 TIME(3), dtm DATETIME(6), dtm0 DATETIME, dtm2 DATETIME(2),
  ts TIMESTAMP(6) NULL DEFAULT NULL, ts0 TIMESTAMP NULL DEFAULT NULL,
  g GEOMETRY, c CHAR(10) CHARACTER SET utf8mb4, vc VARCHAR(300) CHARACTER SET utf8mb4,
  vlat VARCHAR(20) CHARACTER SET latin1, bin BINARY(4), vbin VARBINARY(20),
  txt TEXT CHARACTER SET utf8mb4, blb BLOB, lblb LONGBLOB, e ENUM('a','b','c'), st SET('x','y','z'),
  b64 BIT(64), b3 BIT(3), j JSON, uid UUID, ip6 INET6, ip4 INET4
);
INSERT INTO types VALUES (NULL, 2155,
  -5, 200, -300, 60000, -70000, 16000000, -2000000000, 4000000000, -9000000000000000000, 18446744073709551615,
  '-12345678901234567890123456789012345.123456789012345678901234567890', '-12.34', '12345678901234567890',
  3.14159, -2.718281828459045, '2024-02-29', '-838:59:59.000000', '12:34:56', '00:00:01.5',
  '2024-02-29 23:59:59.999999', '1000-01-01 00:00:00', '9999-12-31 23:59:59.99',
  '2038-01-19 03:14:07.999999', '1970-01-01 00:00:01', ST_GeomFromText('POINT(1.5 -2.25)', 4326),
  '漢字😀', 'héllo wörld 你好 🚀🎉 ñ', 'café-latin1', X'00FF', X'DEADBEEF00',
  REPEAT('texte ', 50), X'0001020304FF', REPEAT('B', 70000), 'b', 'x,z',
  b'1111111111111111111111111111111111111111111111111111111111111111', b'101',
  '{\"a\": 1, \"b\": [true, false, null], \"c\": {\"d\": \"é😀\"}, \"n\": 1.5e300, \"m\": 1.50}',
  '123e4567-e89b-12d3-a456-426614174000', '2001:db8::1', '192.168.0.255');
INSERT INTO types (yr, ti, si, mi, i, bi, dec65, tm, tm3, j, e, st, g, vc, bin)
  VALUES (1901, -128, -32768, -8388608, -2147483648, -9223372036854775808,
  '-0.000000000000000000000000000001', '-00:00:00.000001', '-00:00:00.001', '\"just a string\"', 'c', 'x,y,z',
  ST_GeomFromText('POLYGON((0 0,10 0,10 10,0 10,0 0))'), 'after geometry', '');
INSERT INTO types (id) VALUES (NULL);
SET SESSION sql_mode = '';
INSERT INTO types (dt, dtm, dtm0, ts0, yr) VALUES ('0000-00-00', '0000-00-00 00:00:00', '2024-00-00 00:00:00',
  '0000-00-00 00:00:00', 0);
SET SESSION sql_mode = DEFAULT;
UPDATE types SET vc = 'updated ✓', biu = 0, b64 = b'1' WHERE id = 1;
CREATE TABLE uuidk (u UUID PRIMARY KEY, n INT);
INSERT INTO uuidk VALUES ('123e4567-e89b-12d3-a456-426614174000', 1), ('ffffffff-0000-0000-0000-000000000001', 2),
  ('00000000-0000-0000-0000-000000000000', 3);
";

#[test]
fn on_demand_snapshots_equal_the_binlog_and_survive_ddl() {
    let Some(services) = Services::start("snap-ondemand", &[]) else { return };
    let db = &services.mariadb;
    db.sql_text(&format!(
        "CREATE DATABASE fid; USE fid; {TYPES}
         CREATE TABLE grow (id INT PRIMARY KEY, pad VARCHAR(40));
         INSERT INTO grow SELECT seq, CONCAT('g-', seq) FROM seq_1_to_200000;
         CREATE TABLE victim (id INT PRIMARY KEY);
         INSERT INTO victim SELECT seq FROM seq_1_to_10;
         CREATE TABLE late (id INT PRIMARY KEY, v VARCHAR(10));
         INSERT INTO late SELECT seq, 'l' FROM seq_1_to_1000;"
    ));
    // streaming only, from the first binlog: every row arrives as the binlog's insert first.
    // fid.grow's snapshot condition selects every row, but its second chunk (ids 1001-2000)
    // takes 5 s on the server (SLEEP at id 1500): the ALTER and the DROP below land while that
    // chunk is read, whatever the machine's load. Racing a fast snapshot instead once saw the
    // whole of fid.grow, and fid.victim, read before the DROP arrived.
    let filter = |exclude: &str| {
        format!(
            "[filter]\ninclude = [\"fid.*\"]\nexclude = [{exclude}]\n[snapshot]\nmode = \"never\"\nchunk_size = 1000\n\
             [snapshot.where]\n\"fid.grow\" = \"id <> 1500 OR SLEEP(5) = 0\"\n"
        )
    };
    let (config, log) = services.config("od", "topic_prefix = \"od\"", &filter("\"fid.late\""));
    let env = [("SLUICE_KAFKA__BATCH_MAX_RECORDS", "100000")];
    // before any sluice run: nobody would read the request (a first start begins at the end)
    let (code, _, err) = request(&config, &["fid.types"], false);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("has no checkpoint yet: start `sluice run` first"), "{err}");
    let mut sluice = start_sluice_with(&config, &log, &env);
    services.wait_caught_up("od", "od", &log);

    // requests that cannot be served are refused before anything is sent
    let (code, _, err) = request(&config, &["fid.late"], false);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("fid.late: not captured by [filter]"), "{err}");
    let (code, _, err) = request(&config, &["fid.nosuch", "fid.types"], false);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("fid.nosuch: no such table"), "{err}");
    let (code, _, err) = request(&config, &["fid"], false);
    assert_eq!(code, 2, "{err}");
    assert!(services.json_topic("od.__signals").is_empty(), "a refused request was sent");

    // fidelity: each row's r record carries the after image its last binlog change carried,
    // under the same schemas, with the same key bytes
    let (code, out, err) = request(&config, &["fid.types", "fid.uuidk"], true);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("fid.uuidk: about"), "{out}");
    let mut reader = TopicReader::new(&services);
    for topic in ["od.fid.types", "od.fid.uuidk"] {
        let mut last_change: HashMap<Vec<u8>, (u32, BTreeMap<String, Avro>)> = HashMap::new();
        let mut reads = 0;
        let mut marks = Vec::new();
        reader.scan_raw(topic, |r, key, value| {
            let (Some(key), Some(value)) = (key, value) else { return };
            let after = r.image("after").unwrap();
            if r.op() == Some("r") {
                reads += 1;
                marks.push(source_field(&r, "snapshot"));
                let (id, want) =
                    last_change.get(key).unwrap_or_else(|| panic!("{topic}: an r record of a key never streamed"));
                assert_eq!(schema_id(value), *id, "{topic}: the r record's value schema differs from the binlog's");
                for (col, v) in want {
                    assert_eq!(after.get(col), Some(v), "{topic} key {key:?}: column {col}");
                }
                assert_eq!(after.len(), want.len(), "{topic}: the r record has other columns");
            } else {
                last_change.insert(key.to_vec(), (schema_id(value), after));
            }
        });
        assert_eq!(reads, last_change.len(), "{topic}: not one r record per row");
        // partitions interleave in the reading, so only the counts are in order to check
        let count = |m: &str| marks.iter().filter(|v| **v == Avro::String(m.into())).count();
        assert_eq!((count("first"), count("last"), count("true")), (1, 1, reads - 2), "{topic}: {marks:?}");
    }

    // a snapshot of two tables: the first altered while it is read, the second dropped before
    let mut waiter = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["snapshot", "--wait", "--table", "fid.grow", "--table", "fid.victim", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // the server says when the slow chunk is being read (its SLEEP's state)
    let sleeping = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User sleep' \
                    AND INFO LIKE '%`grow`%'";
    wait_for(120, || db.sql(sleeping)[0][0] == "1", "fid.grow's second chunk to be read", &log);
    // a column added and one dropped: the chunk read ahead with the old definition names the
    // dropped one, which the server refuses (ER_BAD_FIELD_ERROR stopped `sluice run` once)
    db.sql_text(
        "ALTER TABLE fid.grow ADD COLUMN extra INT NOT NULL DEFAULT 5, DROP COLUMN pad; DROP TABLE fid.victim;",
    );
    let status = waiter.wait().unwrap();
    assert!(status.success(), "sluice snapshot --wait: {status}");
    let p = progress(&services, "od", "od").unwrap();
    let table = |name: &str| p["tables"].as_array().unwrap().iter().find(|t| t["table"] == name).unwrap().clone();
    assert_eq!(table("fid.grow")["state"], "done");
    assert_eq!(table("fid.grow")["rows"], 200_000);
    assert_eq!(table("fid.victim")["state"], "skipped", "{p}");
    assert!(table("fid.victim")["note"].as_str().unwrap().contains("dropped (DROP TABLE) before it was read"), "{p}");
    let grow = reader.read("od.fid.grow");
    let reads: Vec<&Record> = grow.iter().filter(|r| r.op() == Some("r")).collect();
    let keys: HashSet<i64> = reads.iter().map(|r| r.int_key()).collect();
    assert_eq!((reads.len(), keys.len()), (200_000, 200_000), "fid.grow: every row read once");
    let with_extra = reads.iter().filter(|r| r.image("after").unwrap().get("extra") == Some(&Avro::Int(5))).count();
    // the ALTER waits for the second chunk's query (its metadata lock): that chunk stands
    // without the column when its high watermark was noted before the ALTER was written, and
    // is read again with it otherwise; every later chunk carries it
    assert!([198_000, 199_000].contains(&with_extra), "rows read after the ALTER carry its column: {with_extra}");
    let without_pad = reads.iter().filter(|r| !r.image("after").unwrap().contains_key("pad")).count();
    assert_eq!(without_pad, with_extra, "rows read after the ALTER lack the dropped column");

    // a table added to the filter later: snapshotted on request while another table streams
    let _ = Command::new("kill").arg(sluice.0.id().to_string()).status();
    let _ = sluice.0.wait();
    let (config, log) = services.config("od", "topic_prefix = \"od\"", &filter(""));
    sluice = start_sluice_with(&config, &log, &env);
    wait_for(60, || log_text(&log).contains("Streaming the binlog"), "the restart", &log);
    let (code, out, err) = request(&config, &["fid.late"], true);
    db.sql_text("INSERT INTO fid.uuidk VALUES ('11111111-2222-3333-4444-555555555555', 4);");
    assert_eq!(code, 0, "{out}{err}");
    services.wait_caught_up("od", "od", &log);
    let late = reader.read("od.fid.late");
    assert_eq!(late.len(), 1000);
    assert!(late.iter().all(|r| r.op() == Some("r")));
    let uuidk = reader.read("od.fid.uuidk");
    let streamed = uuidk
        .iter()
        .any(|r| r.op() == Some("c") && r.image("after").is_some_and(|a| a.get("n") == Some(&Avro::Int(4))));
    assert!(streamed, "the stream went on during the snapshot");
    let check = support::sluice(&["check", "--config", config.to_str().unwrap()]);
    assert!(check.stdout.contains("fid.late done: 1000 rows"), "{}", check.stdout);
    // a new request is a round of its own: the tables of the finished one are not counted in it
    assert!(check.stdout.contains("[ok] snapshot (signal): 1 of 1 tables done, 1000 rows"), "{}", check.stdout);
    let _ = Command::new("kill").arg(sluice.0.id().to_string()).status();
    let _ = sluice.0.wait();
}

/// Holds `LOCK TABLES table WRITE` on a connection of its own until dropped (the test kills
/// the connection), so that a snapshot's chunk query waits for the table's metadata lock.
struct TableLock {
    port: u16,
    marker: u32,
    holder: Option<std::thread::JoinHandle<()>>,
}

impl TableLock {
    fn hold(port: u16, table: &str, marker: u32) -> TableLock {
        let sql = format!("LOCK TABLES {table} WRITE; SELECT SLEEP({marker}); UNLOCK TABLES;");
        let holder = std::thread::spawn(move || {
            let _ = support::try_sql(port, &sql);
        });
        let lock = TableLock { port, marker, holder: Some(holder) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while lock.connection().is_none() {
            assert!(Instant::now() < deadline, "the lock holder did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        lock
    }

    /// The holder's connection id, once it holds the lock (it sleeps then).
    fn connection(&self) -> Option<String> {
        support::try_sql(
            self.port,
            &format!("SELECT ID FROM information_schema.PROCESSLIST WHERE INFO = 'SELECT SLEEP({})'", self.marker),
        )
        .ok()?
        .into_iter()
        .next()?
        .into_iter()
        .next()
    }
}

impl Drop for TableLock {
    fn drop(&mut self) {
        if let Some(id) = self.connection() {
            let _ = support::try_sql(self.port, &format!("KILL {id}"));
        }
        if let Some(h) = self.holder.take() {
            let _ = h.join();
        }
    }
}

/// A chunk query behind another session's table lock: with `snapshot.lock_wait_timeout`, it
/// gives up on the lock instead of holding the stream, is tried again in place and goes on when
/// the lock is released in time; a lock held past three tries stops `sluice run` (exit 1) with
/// a message naming the table, the lock and the setting, and the next start resumes the
/// snapshot. Both snapshots end with every row exactly once. Also: a keyless table paged by
/// its `[output.key_columns]`, and an include pattern the server shows no table for, warned.
#[test]
fn a_chunk_behind_a_table_lock_is_retried_then_stops_clearly() {
    let Some(services) = Services::start("snap-lock", &[]) else { return };
    let db = &services.mariadb;
    let rows = 5000;
    db.sql_text(&format!(
        "CREATE DATABASE sl; USE sl; CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20));
         INSERT INTO t SELECT seq, CONCAT('v', seq) FROM seq_1_to_{rows};
         CREATE TABLE k (a INT NOT NULL, b VARCHAR(10) NOT NULL, v INT);
         INSERT INTO k SELECT seq % 100, CONCAT('b', seq DIV 100), seq FROM seq_1_to_2500;"
    ));
    let (config, log) = services.config(
        "lock",
        "topic_prefix = \"sl\"",
        "[filter]\ninclude = [\"sl.*\", \"sl_hidden.t\"]\n[snapshot]\nchunk_size = 1000\nlock_wait_timeout = \"1s\"\n\
         [output.key_columns]\n\"sl.k\" = [\"a\", \"b\"]\n",
    );
    let reads = |services: &Services| {
        let mut per_key: BTreeMap<i64, usize> = BTreeMap::new();
        TopicReader::new(services).scan("sl.sl.t", |r| {
            if r.op() == Some("r") {
                *per_key.entry(r.int_key()).or_default() += 1;
            }
        });
        per_key
    };

    // 1: the lock is released between the tries
    let lock = TableLock::hold(db.port, "sl.t", 3601);
    let mut sluice = start_sluice(&config, &log);
    wait_for(60, || log_text(&log).contains("reading a chunk failed; trying again"), "a retried chunk", &log);
    drop(lock);
    wait_for(120, || snapshot_done(&services, "sl", "lock"), "the snapshot to finish", &log);
    let text = log_text(&log);
    assert!(text.contains("Lock wait timeout exceeded"), "the retry names the cause:\n{text}");
    assert!(
        text.contains("filter.include names tables the server does not show this user") && text.contains("sl_hidden.t"),
        "an included table the server does not show is warned about:\n{text}"
    );
    let first = reads(&services);
    assert_eq!(first.len(), rows, "every row read once");
    // the keyless table is paged by its configured key columns, not read in one pass
    assert!(text.contains("Snapshot: reading the table in chunks by its key table=sl.k"), "{text}");
    let mut keyless: BTreeMap<String, usize> = BTreeMap::new();
    TopicReader::new(&services).scan("sl.sl.k", |r| {
        if r.op() == Some("r") {
            *keyless.entry(format!("{:?}", r.key)).or_default() += 1;
        }
    });
    assert_eq!(keyless.len(), 2500, "each keyless row read");
    assert!(keyless.values().all(|&n| n == 1), "a keyless row read twice");
    assert!(first.values().all(|&n| n == 1), "a row read twice");

    // 2: a lock held past every try stops with what to do; the next start resumes
    let lock = TableLock::hold(db.port, "sl.t", 3602);
    let (code, _, err) = request(&config, &["sl.t"], false);
    assert_eq!(code, 0, "{err}");
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(s) = sluice.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "sluice run did not stop behind the lock:\n{}", log_text(&log));
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(status.code(), Some(1), "{}", log_text(&log));
    let text = log_text(&log);
    for part in ["sl.t", "tried 3 times", "holds a lock on the table", "snapshot.lock_wait_timeout"] {
        assert!(text.contains(part), "the stop message lacks {part:?}:\n{text}");
    }
    drop(lock);
    let mut sluice = start_sluice(&config, &log);
    // the request was not committed before the stop, so the new instance reads it again
    wait_for(
        120,
        || reads(&services).values().all(|&n| n >= 2) && snapshot_done(&services, "sl", "lock"),
        "the second snapshot to finish",
        &log,
    );
    let both = reads(&services);
    assert_eq!(both.len(), rows);
    assert!(both.values().all(|&n| n == 2), "each row once per snapshot: {:?}", both.iter().find(|(_, &n)| n != 2));
    let _ = Command::new("kill").arg(sluice.0.id().to_string()).status();
    let _ = sluice.0.wait();
}
