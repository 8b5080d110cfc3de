//! Exactly once under faults (issue 4): a continuous write workload (inserts, updates, deletes,
//! multi-statement transactions and primary-key changes, picked by a seeded generator) runs
//! against MariaDB while `sluice run` is SIGKILLed at random moments at least 20 times and
//! restarted each time, then while the broker is restarted under it. At the end, read back by an
//! independent consumer (read_committed, apache-avro; see `support::kafka`), every key's records
//! must be exactly the changes the workload made to it, in order: nothing lost, nothing twice.
//!
//! The broker is stopped while no Kafka transaction is open (the workload pauses until Sluice has
//! published everything), stays down while the workload writes, and comes back. Stopping it in
//! the middle of a transaction is not tested: noida-db, the broker here, aborts open transactions
//! when it shuts down (`resolve_open_transactions_for_shutdown` in its kafka/engine.rs) but then
//! accepts the producer's commit of the rest of that transaction, so it would lose records that
//! a real Kafka, whose coordinator keeps transaction state across restarts, keeps.
//!
//! `SLUICE_CHAOS_SEED` replays a run (the seed is printed); `SLUICE_CHAOS_KILLS` changes the
//! number of kills (default 20).

mod support;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::kafka::{start_sluice, Services, TopicReader};

const TOPIC: &str = "sluice.chaos.t";

/// xorshift64*: a small deterministic generator, so a failing run can be replayed by its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What the workload did, per key: the records a consumer must see (`c:v`, `u:v`, `d`,
/// `tombstone`), and the rows that exist now with their `v`.
#[derive(Default)]
struct Model {
    next_id: i64,
    live: BTreeMap<i64, String>,
    expected: BTreeMap<i64, Vec<String>>,
    changes: u64,
}

impl Model {
    fn push(&mut self, id: i64, s: String) {
        self.expected.entry(id).or_default().push(s);
        self.changes += 1;
    }

    fn insert(&mut self, sql: &mut String) {
        let id = self.next_id;
        self.next_id += 1;
        let v = format!("v{id}.0");
        sql.push_str(&format!("INSERT INTO chaos.t VALUES ({id}, '{v}');"));
        self.push(id, format!("c:{v}"));
        self.live.insert(id, v);
    }

    fn pick(&self, rng: &mut Rng) -> Option<i64> {
        if self.live.is_empty() {
            return None;
        }
        let n = rng.below(self.live.len() as u64) as usize;
        self.live.keys().nth(n).copied()
    }

    fn update(&mut self, rng: &mut Rng, sql: &mut String) {
        let Some(id) = self.pick(rng) else { return self.insert(sql) };
        let v = format!("v{id}.{}", rng.below(1_000_000));
        sql.push_str(&format!("UPDATE chaos.t SET v = '{v}' WHERE id = {id};"));
        self.push(id, format!("u:{v}"));
        self.live.insert(id, v);
    }

    fn delete(&mut self, rng: &mut Rng, sql: &mut String) {
        let Some(id) = self.pick(rng) else { return self.insert(sql) };
        sql.push_str(&format!("DELETE FROM chaos.t WHERE id = {id};"));
        self.push(id, "d".into());
        self.expected.get_mut(&id).unwrap().push("tombstone".into());
        self.live.remove(&id);
    }

    /// A primary-key change: a delete (and tombstone) of the old key, a create of the new one.
    fn rekey(&mut self, rng: &mut Rng, sql: &mut String) {
        let Some(old) = self.pick(rng) else { return self.insert(sql) };
        let new = self.next_id;
        self.next_id += 1;
        sql.push_str(&format!("UPDATE chaos.t SET id = {new} WHERE id = {old};"));
        let v = self.live.remove(&old).unwrap();
        self.push(old, "d".into());
        self.expected.get_mut(&old).unwrap().push("tombstone".into());
        self.push(new, format!("c:{v}"));
        self.live.insert(new, v);
    }

    /// One MySQL transaction of the workload.
    fn step(&mut self, rng: &mut Rng) -> String {
        let mut sql = String::new();
        match rng.below(10) {
            0..=4 => self.insert(&mut sql),
            5 | 6 => self.update(rng, &mut sql),
            7 => self.delete(rng, &mut sql),
            8 => {
                sql.push_str("BEGIN;");
                for _ in 0..1 + rng.below(4) {
                    match rng.below(3) {
                        0 => self.insert(&mut sql),
                        1 => self.update(rng, &mut sql),
                        _ => self.delete(rng, &mut sql),
                    }
                }
                sql.push_str("COMMIT;");
            }
            _ => self.rekey(rng, &mut sql),
        }
        sql.push('\n');
        sql
    }
}

/// A `mariadb` client kept open, fed one transaction at a time on stdin.
struct Client {
    child: Child,
    stdin: ChildStdin,
}

impl Client {
    fn open(port: u16) -> Client {
        let mut child = Command::new("mariadb")
            .args(["--no-defaults", "--protocol=TCP", "-uroot", "-h127.0.0.1", "--batch"])
            .arg(format!("-P{port}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the mariadb client");
        let stdin = child.stdin.take().unwrap();
        Client { child, stdin }
    }

    /// Closes stdin and waits for every statement to have run.
    fn finish(mut self) {
        drop(self.stdin);
        let st = self.child.wait().unwrap();
        assert!(st.success(), "the workload client failed: {st}");
    }
}

/// Writes transactions (about 200/s) until `stop`, none while `paused`.
fn workload(
    port: u16,
    seed: u64,
    stop: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
    model: Arc<Mutex<Model>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut client = Client::open(port);
        let mut rng = Rng(seed);
        while !stop.load(Ordering::SeqCst) {
            if paused.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            let sql = model.lock().unwrap().step(&mut rng);
            client.stdin.write_all(sql.as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        client.finish();
    })
}

#[test]
fn exactly_once_across_sigkills_and_a_broker_restart() {
    let Some(services) = Services::start("run-chaos", &[]) else { return };
    let (config, log) = services.config("chaos", "", "");
    services.mariadb.sql("CREATE DATABASE chaos; CREATE TABLE chaos.t (id BIGINT PRIMARY KEY, v VARCHAR(40) NOT NULL)");

    let seed = std::env::var("SLUICE_CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    let kills: u32 = std::env::var("SLUICE_CHAOS_KILLS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    eprintln!("run_chaos: seed {seed} (SLUICE_CHAOS_SEED={seed} replays it), {kills} kills");
    let mut rng = Rng(seed ^ 0x9E37_79B9_7F4A_7C15);

    let stop = Arc::new(AtomicBool::new(false));
    let paused = Arc::new(AtomicBool::new(false));
    let model = Arc::new(Mutex::new(Model::default()));
    let writer = workload(services.mariadb.port, seed, Arc::clone(&stop), Arc::clone(&paused), Arc::clone(&model));

    let mut reader = TopicReader::new(&services);
    let mut child = start_sluice(&config, &log);
    let started = Instant::now();
    let mut committed_before_kill = Vec::new();
    for _ in 0..kills {
        // 0.3-2.3 s: sometimes while starting up, mostly mid-stream
        std::thread::sleep(Duration::from_millis(300 + rng.below(2000)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        committed_before_kill.push(reader.read(TOPIC).len());
        child = start_sluice(&config, &log);
    }
    eprintln!(
        "run_chaos: {kills} kills in {:.0?}; records committed at each: {committed_before_kill:?}",
        started.elapsed()
    );
    assert!(
        committed_before_kill.windows(2).filter(|w| w[1] > w[0]).count() >= kills as usize / 2,
        "the publisher made progress between too few of the kills: {committed_before_kill:?}"
    );

    // the broker stopped between transactions, down while the workload writes, back again
    let broker_restarts: u32 =
        std::env::var("SLUICE_CHAOS_BROKER_RESTARTS").ok().and_then(|s| s.parse().ok()).unwrap_or(2);
    for _ in 0..broker_restarts {
        paused.store(true, Ordering::SeqCst);
        caught_up(&mut reader, &model, seed, &log);
        services.stop_broker();
        paused.store(false, Ordering::SeqCst);
        std::thread::sleep(Duration::from_secs(3));
        services.start_broker_again();
        std::thread::sleep(Duration::from_secs(2));
    }
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    caught_up(&mut reader, &model, seed, &log);
    let model = model.lock().unwrap();
    eprintln!("run_chaos: the workload made {} row changes to {} keys", model.changes, model.expected.len());
    // the table's rows are what the topic's replay leaves
    let rows: BTreeMap<i64, String> = services
        .mariadb
        .sql("SELECT id, v FROM chaos.t")
        .into_iter()
        .map(|r| (r[0].parse().unwrap(), r[1].clone()))
        .collect();
    assert_eq!(rows, model.live, "the server's rows and the workload model disagree");

    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status after SIGTERM: {status}");
}

/// Waits (up to 3 minutes) until every key's records are the model's; panics with the keys
/// that differ.
fn caught_up(reader: &mut TopicReader, model: &Mutex<Model>, seed: u64, log: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let got = reader.per_key(TOPIC, "v");
        let m = model.lock().unwrap();
        let expected = &m.expected;
        if got == *expected {
            return;
        }
        if Instant::now() > deadline {
            let wrong: Vec<String> = expected
                .keys()
                .chain(got.keys())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .filter(|k| expected.get(k) != got.get(k))
                .map(|k| format!("key {k}: expected {:?}, got {:?}", expected.get(k), got.get(k)))
                .collect();
            panic!(
                "{} of {} keys differ (seed {seed}); first ones:\n{}\nsluice log: {}",
                wrong.len(),
                expected.len(),
                wrong.iter().take(20).cloned().collect::<Vec<_>>().join("\n"),
                log.display()
            );
        }
        drop(m);
        std::thread::sleep(Duration::from_secs(1));
    }
}
