//! `sluice verify` against the real MariaDB, broker and registry:
//!
//! - live: while a workload inserts, updates (also keys), deletes and truncates a table, and
//!   `sluice run` publishes, `sluice verify` finds every table equal to its topic (exit 0);
//! - exact: after a row is changed, deleted and inserted behind Sluice's back
//!   (`SET sql_log_bin = 0`) and a topic is rewritten without one key's records, it reports
//!   exactly those keys (and the changed column, with both values) and nothing else, exit 1;
//! - bounded: a table whose keys do not fit `--memory-limit` is compared in several passes
//!   with the same verdict, its peak RSS printed;
//! - a bad option or configuration is exit 2.
//!
//! The exactly-once and ordering checks stay with the independent consumer of the other
//! scenarios: verify is not the only judge of itself.

use crate::support;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde_json::Value as Json;
use support::kafka::{start_sluice, Services};

const TABLES: &str = "
CREATE DATABASE vt;
CREATE TABLE vt.t (
  id INT PRIMARY KEY,
  name VARCHAR(40) CHARACTER SET latin1,
  amount DECIMAL(14,4),
  big BIGINT UNSIGNED,
  d DATE,
  tm TIME(3),
  b BINARY(4),
  j JSON,
  n INT
);
CREATE TABLE vt.c (a INT NOT NULL, s VARCHAR(10) CHARACTER SET utf8mb4 NOT NULL, v INT, PRIMARY KEY (a, s));
CREATE TABLE vt.w (id INT PRIMARY KEY, v INT, note VARCHAR(20));
";

fn insert_t(server: &support::Server, from: i64, to: i64) {
    let values: Vec<String> = (from..to)
        .map(|i| {
            format!(
                "({i}, 'n\u{e9}{i}', {i}.{f:04}, {big}, '2024-01-{day:02}', '-{h}:01:02.{ms:03}', 'b{m}', '{{\"k\": {i}}}', 0)",
                f = i % 10000,
                big = u64::MAX - i as u64,
                day = 1 + i % 28,
                h = i % 800,
                ms = i % 1000,
                m = i % 10
            )
        })
        .collect();
    server.sql(&format!("INSERT INTO vt.t VALUES {}", values.join(",")));
}

fn verify(config: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = support::sluice_cmd().arg("verify").arg("--config").arg(config).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn reports(stdout: &str) -> Vec<Json> {
    stdout.lines().filter_map(|l| serde_json::from_str::<Json>(l).ok()).collect()
}

fn report<'a>(all: &'a [Json], table: &str) -> &'a Json {
    all.iter().find(|r| r["table"] == table).unwrap_or_else(|| panic!("no report of {table} in {all:?}"))
}

/// Copies `from` to `to` (read_committed, a plain producer partitioning by key), leaving out the
/// records whose key is `skip`.
fn rewrite_topic(broker: &str, from: &str, to: &str, skip: &[u8]) -> usize {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("group.id", "verify-rewrite")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", broker).create().unwrap();
    let md = consumer.fetch_metadata(Some(from), Duration::from_secs(10)).unwrap();
    let partitions: Vec<i32> = md.topics()[0].partitions().iter().map(|p| p.id()).collect();
    let mut tpl = TopicPartitionList::new();
    for p in &partitions {
        tpl.add_partition_offset(from, *p, Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let (mut eof, mut skipped) = (0, 0);
    while eof < partitions.len() {
        match consumer.poll(Duration::from_secs(5)) {
            Some(Ok(m)) => {
                if m.key() == Some(skip) {
                    skipped += 1;
                    continue;
                }
                // a record of a key goes where its key hashes to: its records stay in order
                let mut r: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(to);
                if let Some(k) = m.key() {
                    r = r.key(k);
                }
                if let Some(v) = m.payload() {
                    r = r.payload(v);
                }
                producer.send(r).map_err(|(e, _)| e).unwrap();
                producer.poll(Duration::ZERO);
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => eof += 1,
            Some(Err(e)) => panic!("{e}"),
            None => panic!("reading {from} stalled"),
        }
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    skipped
}

/// The Avro key datum of `vt.c`'s key `(a, s)`, framed as the topic has it (schema id of the
/// first record of the topic).
fn c_key(broker: &str, topic: &str, a: i32, s: &str) -> Vec<u8> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("group.id", "verify-key")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    tpl.add_partition_offset(topic, 1, Offset::Beginning).unwrap();
    consumer.assign(&tpl).unwrap();
    let id = loop {
        if let Some(Ok(m)) = consumer.poll(Duration::from_secs(5)) {
            if let Some(k) = m.key() {
                break k[..5].to_vec();
            }
        }
    };
    // Avro: int a (zigzag varint), string s (length, bytes)
    let mut out = id;
    let zig = |n: i64, out: &mut Vec<u8>| {
        let mut z = ((n << 1) ^ (n >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    };
    zig(i64::from(a), &mut out);
    zig(s.len() as i64, &mut out);
    out.extend_from_slice(s.as_bytes());
    out
}

#[test]
fn verify_live_exact_and_bounded() {
    let Some(services) = Services::start("verify", &[]) else { return };
    let server = &services.mariadb;
    for sql in TABLES.split(';').filter(|s| !s.trim().is_empty()) {
        server.sql(sql);
    }
    insert_t(server, 1, 3001);
    let c: Vec<String> = (1..=300).map(|i| format!("({}, 'k{}', {i})", i % 30, i / 30)).collect();
    server.sql(&format!("INSERT INTO vt.c VALUES {}", c.join(",")));
    let (config, log) = services.config("verify", "", "[filter]\ninclude = [\"vt.*\"]");
    let run = start_sluice(&config, &log);

    // bad options and configurations: exit 2, nothing verified
    let (code, _, err) = verify(&config, &["--where", "nonsense"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = verify(&config, &["--table", "vt.nope"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = verify(&config, &["--memory-limit", "lots"]);
    assert_eq!(code, 2, "{err}");
    for (args, says) in [
        // zero bytes for the keys made a pass for every key, without end
        (&["--memory-limit", "0"][..], "--memory-limit 0: at least 1MiB"),
        (&["--where", "vt.t=id > 0; DROP TABLE vt.t"], "--where vt.t: the condition must be one condition"),
        (
            &["-t", "vt.t", "--where", "vt.c=id > 0"],
            "--where vt.c: the table is not verified (not selected by --table)",
        ),
        (&["--where", "other.t=id > 0"], "--where other.t: the table is not verified (not selected by [filter])"),
        (&["--target", "both"], "--target both needs an [elasticsearch] section"),
    ] {
        let (code, out, err) = verify(&config, args);
        assert_eq!((code, out.as_str()), (2, ""), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }

    // live: a workload runs while verify compares
    let stop = Arc::new(AtomicBool::new(false));
    let port = server.port;
    let worker = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut n = 0i64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let sql = [
                    format!("UPDATE vt.t SET n = n + 1, name = 'u{n}' WHERE id = {}", 1 + n % 3000),
                    format!("DELETE FROM vt.t WHERE id = {}", 1 + (n * 7) % 3000),
                    format!("INSERT IGNORE INTO vt.t (id, name, n) VALUES ({}, 'new', 0)", 1 + (n * 7) % 3000),
                    // a key change
                    format!("UPDATE IGNORE vt.c SET a = a + 100 WHERE a = {} AND s = 'k{}'", n % 30, n % 10),
                    format!(
                        "UPDATE IGNORE vt.c SET a = a - 100 WHERE a = {} AND s = 'k{}'",
                        100 + (n + 5) % 30,
                        (n + 5) % 10
                    ),
                    format!("INSERT INTO vt.w VALUES ({n}, {n}, 'w') ON DUPLICATE KEY UPDATE v = v + 1"),
                ];
                for s in sql {
                    let _ = support::try_sql(port, &s);
                }
                if n % 150 == 0 {
                    let _ = support::try_sql(port, "TRUNCATE TABLE vt.w");
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            n
        })
    };
    std::thread::sleep(Duration::from_secs(3));
    let pushgateway = support::prometheus::Pushgateway::start("verify");
    let (code, out, err) = verify(&config, &["--format", "json", "--pushgateway", &pushgateway.url]);
    let all = reports(&out);
    assert_eq!(code, 0, "live verify: {out}\n{err}");
    let pushed = |name: &str, table: &str| -> Vec<String> {
        let want = format!("table=\"{table}\",target=\"kafka\"");
        pushgateway.series(name).into_iter().filter(|l| l.contains(&want)).collect()
    };
    let equal = pushed("sluice_verify_equal", "vt.t");
    assert!(equal.len() == 1 && equal[0].ends_with(" 1"), "{equal:?}");
    let success = pushed("sluice_verify_last_success_timestamp_seconds", "vt.t");
    assert_eq!(success.len(), 1, "{success:?}");
    for t in ["vt.t", "vt.c", "vt.w"] {
        let r = report(&all, t);
        assert_eq!(
            (r["missing"].as_u64(), r["extra"].as_u64(), r["different"].as_u64()),
            (Some(0), Some(0), Some(0)),
            "{r}"
        );
    }
    assert!(report(&all, "vt.t")["rows"].as_u64().unwrap() >= 2900, "{all:?}");
    // since the checkpoint, live: the whole tables first, then the keys changed meanwhile
    for round in 0..2 {
        let (code, out, err) = verify(&config, &["--format", "json", "--since-checkpoint"]);
        assert_eq!(code, 0, "live verify since the checkpoint: {out}\n{err}");
        let all = reports(&out);
        for t in ["vt.t", "vt.c", "vt.w"] {
            assert_eq!(counts(report(&all, t)), (0, 0, 0), "{out}");
        }
        let scope = report(&all, "vt.t")["scope"].as_str().unwrap().to_string();
        assert!(
            if round == 0 { scope.contains("whole table") } else { scope.contains("keys changed since") },
            "{scope}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let writes = worker.join().unwrap();
    assert!(writes > 50, "the workload ran ({writes} rounds)");
    services.wait_caught_up("sluice", "verify", &log);

    // behind Sluice's back, and a topic rewritten without one key
    server.sql("SET sql_log_bin = 0; UPDATE vt.t SET amount = 12.5 WHERE id = 5; DELETE FROM vt.t WHERE id = 6; INSERT INTO vt.t (id, name) VALUES (900001, 'ghost')");
    let existing = server.scalar("SELECT COUNT(*) FROM vt.c WHERE a = 3 AND s = 'k1'");
    assert_eq!(existing, "1", "vt.c has the key (3, 'k1')");
    let key = c_key(&services.broker, "sluice.vt.c", 3, "k1");
    let skipped = rewrite_topic(&services.broker, "sluice.vt.c", "rewritten.vt.c", &key);
    assert!(skipped >= 1, "the rewritten topic leaves out the records of (3, 'k1')");
    let routed = config.with_file_name("routed.toml");
    std::fs::write(
        &routed,
        std::fs::read_to_string(&config).unwrap() + "\n[[routes]]\ntables = \"vt.c\"\ntopic = \"rewritten.vt.c\"\n",
    )
    .unwrap();
    let metrics_file = config.with_file_name("verify.prom");
    let (code, out, err) = verify(
        &routed,
        &["--format", "json", "--wait", "30s", "--pushgateway", &pushgateway.url, "--metrics-file"]
            .into_iter()
            .chain([metrics_file.to_str().unwrap()])
            .collect::<Vec<_>>(),
    );
    assert_eq!(code, 1, "{out}\n{err}");
    // the push says so, and keeps the time of the last equal run
    let equal = pushed("sluice_verify_equal", "vt.t");
    assert!(equal.len() == 1 && equal[0].ends_with(" 0"), "{equal:?}");
    assert_eq!(pushed("sluice_verify_last_success_timestamp_seconds", "vt.t"), success);
    let different: Vec<String> = pushed("sluice_verify_rows_total", "vt.t")
        .into_iter()
        .filter(|l| l.contains("outcome=\"different\""))
        .collect();
    assert!(different.len() == 1 && different[0].ends_with(" 1"), "{different:?}");
    // the file: the same in the text format promtool accepts, vt.c unequal and vt.w equal
    let text = std::fs::read_to_string(&metrics_file).unwrap();
    support::prometheus::promtool_check(&text);
    assert!(
        text.contains("sluice_verify_equal{source=\"") && text.contains("table=\"vt.c\",target=\"kafka\"} 0"),
        "{text}"
    );
    assert!(text.contains("table=\"vt.w\",target=\"kafka\"} 1"), "{text}");
    drop(pushgateway);
    let all = reports(&out);
    let t = report(&all, "vt.t");
    let found: Vec<(String, String)> = t["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["kind"].as_str().unwrap().to_string(), f["key"].as_str().unwrap().to_string()))
        .collect();
    let mut found = found;
    found.sort();
    let want: Vec<(String, String)> = [("different", "5"), ("extra", "6"), ("missing", "900001")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(found, want, "{t}");
    assert_eq!(
        (t["missing"].as_u64(), t["extra"].as_u64(), t["different"].as_u64()),
        (Some(1), Some(1), Some(1)),
        "{t}"
    );
    let diff = t["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "different").unwrap();
    assert_eq!(
        diff["columns"],
        serde_json::json!([{"column": "amount", "table": "12.5000", "target": "5.0005"}]),
        "{t}"
    );
    let c = report(&all, "vt.c");
    assert_eq!(
        (c["missing"].as_u64(), c["extra"].as_u64(), c["different"].as_u64()),
        (Some(1), Some(0), Some(0)),
        "{c}"
    );
    assert_eq!(c["findings"][0]["key"], "[3,\"k1\"]", "{c}");
    let w = report(&all, "vt.w");
    assert!(w["error"].is_null() && w["missing"] == 0 && w["extra"] == 0 && w["different"] == 0, "{w}");
    // the text form says the same to people
    let (code, text, _) = verify(&routed, &["--table", "vt.t"]);
    assert_eq!(code, 1);
    assert!(text.contains("different key 5: amount: table \"12.5000\", kafka \"5.0005\""), "{text}");

    // bounded: 23,000 keys in 1 MiB (about 9,300 keys) take three passes
    insert_t(server, 10_000, 30_000);
    services.wait_caught_up("sluice", "verify", &log);
    let out = Command::new("/usr/bin/time")
        .args(["-f", "peak_rss_kb=%M"])
        .arg(support::repo().join("target/debug/sluice"))
        .args(["verify", "--config"])
        .arg(&config)
        .args(["--table", "vt.t", "--memory-limit", "1MiB", "--format", "json"])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let all = reports(&stdout);
    let t = report(&all, "vt.t");
    let rss: u64 =
        stderr.lines().find_map(|l| l.strip_prefix("peak_rss_kb=")).and_then(|v| v.trim().parse().ok()).unwrap();
    eprintln!("bounded verify: {t} peak RSS {rss} kB");
    assert!(t["passes"].as_u64().unwrap() >= 3, "{t}");
    // the bound the README states: --memory-limit, plus at most 96 MiB of fixed costs
    // (librdkafka's fetch queue, the chunks read ahead, the runtime)
    assert!(rss < (1 + 96) * 1024, "peak RSS {rss} kB over 1 MiB + 96 MiB");
    assert!(t["rows"].as_u64().unwrap() >= 22_000, "{t}");
    // the same three keys as before, and nothing else
    assert_eq!(
        (t["missing"].as_u64(), t["extra"].as_u64(), t["different"].as_u64()),
        (Some(1), Some(1), Some(1)),
        "{t}"
    );

    // a column added since the records were written: they lack it, and the rows hold its
    // default, which was never published for them. Not a difference (it was every old row,
    // a false alarm); a row changed through the binlog since has a record carrying it, and a
    // difference in a column the record carries is still one, listed with the added column
    server.sql("ALTER TABLE vt.c ADD COLUMN extra INT NOT NULL DEFAULT 7");
    server.sql("UPDATE vt.c SET extra = 8 WHERE a = 3 AND s = 'k1'");
    services.wait_caught_up("sluice", "verify", &log);
    let rows_c: u64 = server.scalar("SELECT COUNT(*) FROM vt.c").parse().unwrap();
    let (code, out, err) = verify(&config, &["--table", "vt.c", "--format", "json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let c = report(&reports(&out), "vt.c").clone();
    assert_eq!(counts(&c), (0, 0, 0), "{c}");
    assert_eq!((c["equal"].as_u64(), c["predates"].as_u64()), (Some(rows_c), Some(rows_c - 1)), "{c}");
    assert_eq!(c["predated_columns"], serde_json::json!(["extra"]), "{c}");
    let (code, text, _) = verify(&config, &["--table", "vt.c"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains(&format!("{} of them written before column extra", rows_c - 1)), "{text}");
    let row = server.sql("SELECT a, s, v FROM vt.c WHERE NOT (a = 3 AND s = 'k1') ORDER BY a, s LIMIT 1");
    let [a, s, v] = [0, 1, 2].map(|i| row.first().and_then(|r| r.get(i)).cloned().unwrap());
    server.sql(&format!("SET sql_log_bin = 0; UPDATE vt.c SET v = -1 WHERE a = {a} AND s = '{s}'"));
    let (code, out, err) = verify(&config, &["--table", "vt.c", "--format", "json"]);
    assert_eq!(code, 1, "{out}\n{err}");
    let c = report(&reports(&out), "vt.c").clone();
    assert_eq!(counts(&c), (0, 0, 1), "{c}");
    assert_eq!(
        c["findings"][0]["columns"],
        serde_json::json!([
            {"column": "v", "table": -1, "target": v.parse::<i64>().unwrap()},
            {"column": "extra", "table": 7, "target": null}
        ]),
        "{c}"
    );
    drop(run);
}

fn counts(r: &Json) -> (u64, u64, u64) {
    (r["missing"].as_u64().unwrap(), r["extra"].as_u64().unwrap(), r["different"].as_u64().unwrap())
}

/// `--sample` and `--since-checkpoint`, on a quiet pipeline: a sample compares chosen chunks
/// (integer, composite and text keys); a run since the checkpoint compares the keys the binlog
/// changed, compares whole tables after a TRUNCATE or an ALTER, and finds a record lost from
/// the topic; after a difference the next run compares the whole table again.
#[test]
fn verify_sample_and_since_checkpoint() {
    let Some(services) = Services::start("verify-since", &[]) else { return };
    let server = &services.mariadb;
    for sql in TABLES.split(';').filter(|s| !s.trim().is_empty()) {
        server.sql(sql);
    }
    server.sql("CREATE TABLE vt.s (s VARCHAR(20) CHARACTER SET utf8mb4 PRIMARY KEY, v INT)");
    insert_t(server, 1, 3001);
    let c: Vec<String> = (1..=300).map(|i| format!("({}, 'k{}', {i})", i % 30, i / 30)).collect();
    server.sql(&format!("INSERT INTO vt.c VALUES {}", c.join(",")));
    let s: Vec<String> = (1..=500).map(|i| format!("('s\u{e9}{i}', {i})")).collect();
    server.sql(&format!("INSERT INTO vt.s VALUES {}", s.join(",")));
    server.sql("INSERT INTO vt.w VALUES (1, 1, 'a'), (2, 2, 'b')");
    server.sql("CREATE TABLE vt.g (id INT PRIMARY KEY, v INT)");
    let g: Vec<String> = (1..=200).chain([7777]).map(|i| format!("({i}, {i})")).collect();
    server.sql(&format!("INSERT INTO vt.g VALUES {}", g.join(",")));
    let (config, log) = services.config("verify-since", "", "[filter]\ninclude = [\"vt.*\"]");
    let run = start_sluice(&config, &log);
    services.wait_caught_up("sluice", "verify-since", &log);

    // bad combinations: exit 2
    let (code, _, err) = verify(&config, &["--sample", "2", "--since-checkpoint"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = verify(&config, &["--since-checkpoint", "--server-id", "51001"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("source.server_id"), "{err}");
    let (code, _, err) = verify(&config, &["--sample", "0"]);
    assert_eq!(code, 2, "{err}");

    // a sample: a few chunks of each table, each of its rows compared
    let (code, out, err) = verify(
        &config,
        &["--sample", "3", "--chunk-size", "50", "--format", "json", "-t", "vt.t", "-t", "vt.c", "-t", "vt.s"],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let all = reports(&out);
    for t in ["vt.t", "vt.c", "vt.s"] {
        let r = report(&all, t);
        let rows = r["rows"].as_u64().unwrap();
        // (windows are drawn until they hold 3 chunks' rows; the last holds at most 10 chunks)
        assert!(rows > 0 && rows < 150 + 500, "{t}: a sample of about 3 chunks of 50 rows: {r}");
        assert_eq!(r["equal"].as_u64(), Some(rows), "{r}");
        assert!(r["scope"].as_str().unwrap().contains("random chunks"), "{r}");
    }

    // keys with a gap (1..200 and 7777): the sample is not stuck on the row after the gap
    // (chunks from random key values were nearly all the row 7777 alone)
    let (code, out, err) = verify(&config, &["--sample", "10", "--chunk-size", "10", "--format", "json", "-t", "vt.g"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let g = report(&reports(&out), "vt.g").clone();
    let rows = g["rows"].as_u64().unwrap();
    // (every row of a window counts: the dense keys' windows hold up to 10 chunks, which a
    // simulation of the rule put at 49-198 rows of the 201; and 7777 as likely as any other)
    assert!(rows > 1 && rows <= 201, "{g}");
    assert_eq!(g["equal"].as_u64(), Some(rows), "{g}");
    // (windows widen only when none holds half a chunk: about once in a hundred runs here, and
    // to the whole range once in thousands: a fair sample too)
    let scope = g["scope"].as_str().unwrap();
    assert!(scope.contains("consecutive values of id") || scope.contains("whole range of id"), "{g}");
    // a selective condition (a tenth of the rows): the windows widen until they hold about a
    // chunk each, instead of a tenth of one as the table's estimate would size them
    let (code, out, err) = verify(
        &config,
        &["--sample", "5", "--chunk-size", "50", "--format", "json", "-t", "vt.t", "--where", "vt.t=id % 10 = 0"],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let t = report(&reports(&out), "vt.t").clone();
    let rows = t["rows"].as_u64().unwrap();
    // (windows sized by the estimate held about 5 rows each: at most about 30; a simulation of
    // the widening put 74-274, overlapping windows merged)
    assert!((50..=300).contains(&rows), "about 5 chunks of 50 of the 300 rows: {t}");
    assert_eq!(t["equal"].as_u64(), Some(rows), "{t}");
    assert!(t["scope"].as_str().unwrap().contains("widened"), "{t}");

    // a condition: its rows only; the target's other keys are not taken for extras
    let (code, out, err) = verify(&config, &["--format", "json", "-t", "vt.t", "--where", "vt.t=id <= 100"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let t = report(&reports(&out), "vt.t").clone();
    assert_eq!((t["rows"].as_u64(), t["equal"].as_u64(), counts(&t)), (Some(100), Some(100), (0, 0, 0)), "{t}");
    assert!(t["scope"].as_str().unwrap().contains("id <= 100"), "{t}");

    // the first run since the checkpoint compares whole tables
    let since = ["--since-checkpoint", "--format", "json"];
    let (code, out, err) = verify(&config, &since);
    assert_eq!(code, 0, "{out}\n{err}");
    let all = reports(&out);
    assert_eq!(report(&all, "vt.t")["rows"].as_u64(), Some(3000), "{out}");
    assert!(report(&all, "vt.t")["scope"].as_str().unwrap().contains("whole table"), "{out}");

    // changes through the binlog: only their keys are compared next
    server.sql(
        "UPDATE vt.t SET n = 7 WHERE id IN (10, 11); DELETE FROM vt.t WHERE id = 12; \
         INSERT INTO vt.t (id, name) VALUES (5000, 'x'); UPDATE vt.c SET v = 99 WHERE a = 3 AND s = 'k1'; \
         UPDATE vt.c SET a = 77 WHERE a = 4 AND s = 'k2'",
    );
    services.wait_caught_up("sluice", "verify-since", &log);
    let (code, out, err) = verify(&config, &since);
    assert_eq!(code, 0, "{out}\n{err}");
    let all = reports(&out);
    let t = report(&all, "vt.t");
    assert_eq!((t["rows"].as_u64(), t["equal"].as_u64()), (Some(3), Some(3)), "10, 11 and 5000 (12 is gone): {t}");
    assert!(t["scope"].as_str().unwrap().starts_with("the 4 keys changed since"), "{t}");
    let c = report(&all, "vt.c");
    // (3,k1), and the key change's old key (gone) and new key
    assert_eq!((c["rows"].as_u64(), c["equal"].as_u64()), (Some(2), Some(2)), "{c}");
    assert!(c["scope"].as_str().unwrap().starts_with("the 3 keys changed since"), "{c}");
    let s = report(&all, "vt.s");
    assert_eq!(s["rows"].as_u64(), Some(0), "nothing changed: {s}");
    // nothing since: nothing read
    let (code, out, _) = verify(&config, &["--since-checkpoint", "--format", "json", "-t", "vt.t"]);
    assert_eq!(code, 0);
    assert_eq!(report(&reports(&out), "vt.t")["rows"].as_u64(), Some(0), "{out}");

    // a TRUNCATE and an ALTER name no rows: the whole table
    let statements = [
        ("TRUNCATE TABLE vt.w; INSERT INTO vt.w VALUES (3, 3, 'c')", "TRUNCATE", 1),
        ("ALTER TABLE vt.w ADD COLUMN z INT; INSERT INTO vt.w VALUES (4, 4, 'd', 4)", "definition changed", 2),
    ];
    for (sql, why, rows) in statements {
        server.sql(sql);
        services.wait_caught_up("sluice", "verify-since", &log);
        let (code, out, err) = verify(&config, &["--since-checkpoint", "--format", "json", "-t", "vt.w"]);
        assert_eq!(code, 0, "{out}\n{err}");
        let w = report(&reports(&out), "vt.w").clone();
        assert!(w["scope"].as_str().unwrap().contains(why), "{w}");
        assert_eq!(w["rows"].as_u64(), Some(rows), "{w}");
    }

    // a record lost from the topic, of a key the binlog changed: found
    server.sql("UPDATE vt.c SET v = 100 WHERE a = 3 AND s = 'k1'");
    services.wait_caught_up("sluice", "verify-since", &log);
    let key = c_key(&services.broker, "sluice.vt.c", 3, "k1");
    assert!(rewrite_topic(&services.broker, "sluice.vt.c", "rewritten.vt.c", &key) >= 1);
    let routed = config.with_file_name("routed.toml");
    std::fs::write(
        &routed,
        std::fs::read_to_string(&config).unwrap() + "\n[[routes]]\ntables = \"vt.c\"\ntopic = \"rewritten.vt.c\"\n",
    )
    .unwrap();
    let args = ["--since-checkpoint", "--format", "json", "-t", "vt.c", "--wait", "20s"];
    let (code, out, err) = verify(&routed, &args);
    assert_eq!(code, 1, "{out}\n{err}");
    let c = report(&reports(&out), "vt.c").clone();
    assert!(c["scope"].as_str().unwrap().starts_with("the 1 keys changed since"), "{c}");
    assert_eq!(counts(&c), (1, 0, 0), "{c}");
    assert_eq!(c["findings"][0]["key"], "[3,\"k1\"]", "{c}");
    // the difference forgot the checkpoint: the next run compares the whole table, and finds it again
    let (code, out, err) = verify(&routed, &args);
    assert_eq!(code, 1, "{out}\n{err}");
    let c = report(&reports(&out), "vt.c").clone();
    assert!(c["scope"].as_str().unwrap().contains("whole table"), "{c}");
    assert_eq!(counts(&c), (1, 0, 0), "{c}");

    // behind Sluice's back every row of vt.t changes: any sample finds its rows different
    server.sql("SET sql_log_bin = 0; UPDATE vt.t SET n = COALESCE(n, 0) + 1000");
    let (code, out, err) = verify(&config, &["--sample", "2", "--chunk-size", "40", "--format", "json", "-t", "vt.t"]);
    assert_eq!(code, 1, "{out}\n{err}");
    let t = report(&reports(&out), "vt.t").clone();
    let rows = t["rows"].as_u64().unwrap();
    assert!(rows > 0 && rows < 80 + 400, "{t}");
    assert_eq!(counts(&t), (0, 0, rows), "{t}");

    // the binlog since the last run purged: the whole table, saying why
    server.sql("UPDATE vt.s SET v = 0 WHERE v = 1");
    services.wait_caught_up("sluice", "verify-since", &log);
    server.sql("FLUSH BINARY LOGS");
    let newest = server.column("SHOW BINARY LOGS").pop().unwrap();
    server.purge_to(&newest);
    let (code, out, err) = verify(&config, &["--since-checkpoint", "--format", "json", "-t", "vt.s"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let r = report(&reports(&out), "vt.s").clone();
    assert!(r["scope"].as_str().unwrap().contains("could not be read"), "{r}");
    assert_eq!(r["rows"].as_u64(), Some(500), "{r}");

    // the brokers away for a moment as verify starts: it waits them out (the readers now also
    // poll past a consumer's "all broker connections are down" event in the middle of a read,
    // which failed a CI run's comparison; that moment is not reproduced here)
    services.stop_broker();
    let reader = {
        let config = config.clone();
        std::thread::spawn(move || verify(&config, &["--format", "json", "-t", "vt.s"]))
    };
    std::thread::sleep(Duration::from_secs(2));
    services.start_broker_again();
    let (code, out, err) = reader.join().unwrap();
    assert_eq!(code, 0, "{out}\n{err}");
    let r = report(&reports(&out), "vt.s").clone();
    assert_eq!((r["rows"].as_u64(), r["equal"].as_u64()), (Some(500), Some(500)), "{r}");
    drop(run);
}
