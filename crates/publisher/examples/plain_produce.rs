//! The broker's own produce ceiling for `bench/kafka_bench.sh`: N records of fixed key and value
//! sizes produced by a plain rdkafka producer with the same client settings as Sluice's sink
//! (partitioner, lz4, linger, idempotence), nothing decoded or encoded. With `--transactional B` the
//! records go in Kafka transactions of B records, as Sluice's batches do.
//!
//! ```text
//! plain_produce BROKER TOPIC RECORDS KEY_BYTES VALUE_BYTES [--transactional B] [--pace MS] [--rate R]
//!     [--set K=V]... [--records-from FILE]
//! ```
//! With `--records-from` the records are the file's (`bench/topic_stats.py --dump`: the records
//! Sluice published in the same run, so both contenders compress and partition the same bytes);
//! otherwise RECORDS records of KEY_BYTES and VALUE_BYTES.
//! Prints one JSON line: `{"records": N, "secs": S, "rows_per_s": R, "cpu_s": C, "threads": {..}}` (C:
//! this process's CPU seconds from the first record on; `threads`: the same by thread name), and with
//! `--transactional` the p50/p99/max of the commit calls (`commit_ms`) and of each transaction from
//! its first record to the commit's return (`txn_ms`): the broker's and the client's own floor for
//! `bench/latency_bench.sh`. `--pace MS` waits MS milliseconds between transactions (a steady load
//! rather than a flood); `--rate R` holds the producer to R records a second (as fast as Sluice
//! sends, say: does a slower producer cost librdkafka more per record?); `--set` overrides a
//! producer property (e.g. `linger.ms=5`).

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

// The sink's own producer defaults, so the comparison is like for like.
use sluice::kafka::{commit_transaction, PRODUCER_DEFAULTS, QUEUE_MAX_KBYTES};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 6 {
        eprintln!(
            "usage: plain_produce BROKER TOPIC RECORDS KEY_BYTES VALUE_BYTES [--transactional B] [--pace MS] [--rate R] [--set K=V]... [--records-from FILE]"
        );
        std::process::exit(2);
    }
    let (broker, topic) = (&args[1], &args[2]);
    let records: usize = args[3].parse().expect("RECORDS");
    let key_bytes: usize = args[4].parse().expect("KEY_BYTES");
    let value_bytes: usize = args[5].parse().expect("VALUE_BYTES");
    let batch: Option<usize> =
        args.iter().position(|a| a == "--transactional").map(|i| args[i + 1].parse().expect("--transactional B"));
    let pace: Option<Duration> =
        args.iter().position(|a| a == "--pace").map(|i| Duration::from_millis(args[i + 1].parse().expect("--pace MS")));
    let rate: Option<f64> = args.iter().position(|a| a == "--rate").map(|i| {
        match args.get(i + 1).and_then(|r| r.parse::<f64>().ok()).filter(|r| r.is_finite() && *r > 0.0) {
            Some(r) => r,
            None => {
                eprintln!("plain_produce: --rate takes a number of records a second above 0");
                std::process::exit(2);
            }
        }
    });
    let overrides: Vec<(&str, &str)> =
        args.windows(2).filter(|w| w[0] == "--set").map(|w| w[1].split_once('=').expect("--set K=V")).collect();

    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", broker).set("enable.idempotence", "true");
    // the sink's own defaults (partitioner, compression, linger, queue bounds)
    for (k, v) in PRODUCER_DEFAULTS {
        cfg.set(*k, *v);
    }
    cfg.set("queue.buffering.max.kbytes", QUEUE_MAX_KBYTES.to_string());
    for (k, v) in &overrides {
        cfg.set(*k, *v);
    }
    if batch.is_some() {
        cfg.set("transactional.id", format!("plain-produce-{}", std::process::id()));
    }
    let producer: ThreadedProducer<DefaultProducerContext> = cfg.create().expect("producer");
    let timeout = Duration::from_secs(60);
    if batch.is_some() {
        producer.init_transactions(timeout).expect("init_transactions");
    }
    // values that compress like Avro rows do not: varied bytes, not a repeated pattern
    let value: Vec<u8> = (0..value_bytes).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8).collect();
    let mut key = vec![0u8; key_bytes.max(8)];
    key.truncate(key_bytes.max(1));
    // or the very records another contender sent, read whole before the clock starts
    let replay: Option<Vec<u8>> = args
        .iter()
        .position(|a| a == "--records-from")
        .map(|i| std::fs::read(&args[i + 1]).expect("--records-from FILE"));
    let mut at = 0usize;

    let cpu_before = own_cpu_secs();
    let faults_before = own_minor_faults();
    let threads_before = cpu_by_thread();
    let started = Instant::now();
    let mut in_txn = 0usize;
    let (mut commit_ms, mut txn_ms) = (Vec::new(), Vec::new());
    let mut txn_start = started;
    for i in 0..records {
        if let Some(b) = batch {
            if in_txn == 0 {
                if let Some(p) = pace {
                    std::thread::sleep(p);
                }
                txn_start = Instant::now();
                producer.begin_transaction().expect("begin_transaction");
            }
            in_txn += 1;
            if in_txn == b {
                in_txn = 0;
            }
        }
        if let Some(r) = rate {
            // held to the rate in steps of 256 records
            if i % 256 == 0 {
                let due = started + Duration::from_secs_f64(i as f64 / r);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
        }
        let (k, v): (Option<&[u8]>, Option<&[u8]>) = if let Some(r) = &replay {
            let k = next_part(r, &mut at);
            (k, next_part(r, &mut at))
        } else {
            let id = (i as u64).to_be_bytes();
            let n = key.len().min(8);
            key[..n].copy_from_slice(&id[8 - n..]);
            (Some(&key[..]), Some(&value[..]))
        };
        loop {
            let mut rec = BaseRecord::<[u8], [u8]>::to(topic);
            if let Some(k) = k {
                rec = rec.key(k);
            }
            if let Some(v) = v {
                rec = rec.payload(v);
            }
            match producer.send(rec) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => panic!("produce: {e}"),
            }
        }
        if batch.is_some() && in_txn == 0 {
            let at = Instant::now();
            commit_transaction(&producer, timeout).expect("commit_transaction");
            commit_ms.push(at.elapsed().as_secs_f64() * 1e3);
            txn_ms.push(txn_start.elapsed().as_secs_f64() * 1e3);
        }
    }
    if batch.is_some() && in_txn != 0 {
        commit_transaction(&producer, timeout).expect("commit_transaction");
    }
    producer.flush(timeout).expect("flush");
    let secs = started.elapsed().as_secs_f64();
    let latency = if batch.is_some() {
        format!(r#", "commit_ms": {}, "txn_ms": {}"#, quantiles(&mut commit_ms), quantiles(&mut txn_ms))
    } else {
        String::new()
    };
    // one reading of the threads for both figures
    let now = cpu_by_thread();
    let by_thread = |pick: fn(&(String, f64, f64)) -> f64, digits: usize| -> String {
        let parts: Vec<String> = now
            .iter()
            .map(|t| {
                let before = threads_before.iter().find(|b| b.0 == t.0).map_or(0.0, pick);
                format!(r#""{}": {:.digits$}"#, t.0, pick(t) - before)
            })
            .collect();
        parts.join(", ")
    };
    let (threads, slices) = (by_thread(|t| t.1, 2), by_thread(|t| t.2, 0));
    println!(
        r#"{{"records": {records}, "secs": {secs:.3}, "rows_per_s": {:.0}, "cpu_s": {:.2}, "threads": {{{threads}}}, "slices": {{{slices}}}, "minor_faults": {:.0}{latency}}}"#,
        records as f64 / secs,
        own_cpu_secs() - cpu_before,
        own_minor_faults() - faults_before,
    );
}

/// CPU seconds so far of this process's threads and the times they were put on a CPU (each
/// wakeup and preemption counts one: the third field of `schedstat`), summed by thread name (the
/// producing thread against librdkafka's broker threads: where the floor's time goes, beside
/// Sluice's).
fn cpu_by_thread() -> Vec<(String, f64, f64)> {
    let mut by: Vec<(String, f64, f64)> = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let name = stat[open + 1..close].replace('"', "");
        let f: Vec<f64> = stat[close + 1..].split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect();
        let secs = (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / 100.0;
        let slices = std::fs::read_to_string(task.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().nth(2).and_then(|n| n.parse::<f64>().ok()))
            .unwrap_or(0.0);
        match by.iter_mut().find(|(n, ..)| *n == name) {
            Some((_, s, w)) => {
                *s += secs;
                *w += slices;
            }
            None => by.push((name, secs, slices)),
        }
    }
    by
}

/// The next key or value of a `--records-from` file (`bench/topic_stats.py --dump`): a u32 LE
/// length (0xFFFFFFFF: none), then the bytes.
fn next_part<'a>(file: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let len = u32::from_le_bytes(file[*at..*at + 4].try_into().expect("4 bytes"));
    *at += 4;
    if len == u32::MAX {
        return None;
    }
    let part = &file[*at..*at + len as usize];
    *at += len as usize;
    Some(part)
}

/// `[p50, p99, max]` of the samples, as a JSON array (nearest rank).
fn quantiles(v: &mut [f64]) -> String {
    if v.is_empty() {
        return "[]".into();
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
    format!("[{:.1}, {:.1}, {:.1}]", at(0.5), at(0.99), v[v.len() - 1])
}

/// This process's CPU time so far (user + system, from /proc/self/stat; 100 ticks a second,
/// Linux's USER_HZ), so the benchmark can compare what each contender costs the machine.
fn own_cpu_secs() -> f64 {
    let f = own_stat();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / 100.0
}

/// Minor page faults of this process so far (field 10 of its stat line): pages the kernel
/// handed it afresh, as an allocator that gives memory back and takes it again makes it do.
fn own_minor_faults() -> f64 {
    own_stat().get(7).copied().unwrap_or(0.0)
}

/// The fields of `/proc/self/stat` after the command name (which is in parentheses and may
/// hold spaces).
fn own_stat() -> Vec<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    rest.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect()
}
