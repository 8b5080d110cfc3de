//! A write workload whose every change is known: a seeded generator of MySQL transactions
//! (inserts, updates, deletes, multi-statement transactions, primary-key changes) on a table
//! `id BIGINT PRIMARY KEY, v VARCHAR(40)`, and the model of what a consumer of its topic must
//! see per key, in order (`c:v`, `u:v`, `d`, `tombstone`). A scenario compares the topic with the
//! model: nothing lost, nothing twice, nothing out of order.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::kafka::TopicReader;

/// xorshift64*: a small deterministic generator, so a failing run can be replayed by its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What the workload did, per key: the records a consumer must see (`c:v`, `u:v`, `d`,
/// `tombstone`), and the rows that exist now with their `v`.
pub struct Model {
    /// `db.table`, with `id BIGINT PRIMARY KEY, v VARCHAR(40) NOT NULL`.
    pub table: String,
    pub next_id: i64,
    pub live: BTreeMap<i64, String>,
    pub expected: BTreeMap<i64, Vec<String>>,
    pub changes: u64,
}

impl Model {
    /// An empty model of `table` (`db.table`).
    pub fn new(table: &str) -> Model {
        Model { table: table.into(), next_id: 0, live: BTreeMap::new(), expected: BTreeMap::new(), changes: 0 }
    }

    /// The SQL that creates the model's table.
    pub fn create_sql(&self) -> String {
        let db = self.table.split('.').next().unwrap_or_default();
        format!(
            "CREATE DATABASE IF NOT EXISTS {db}; CREATE TABLE {} (id BIGINT PRIMARY KEY, v VARCHAR(40) NOT NULL)",
            self.table
        )
    }

    fn push(&mut self, id: i64, s: String) {
        self.expected.entry(id).or_default().push(s);
        self.changes += 1;
    }

    pub fn insert(&mut self, sql: &mut String) {
        let id = self.next_id;
        self.next_id += 1;
        let v = format!("v{id}.0");
        sql.push_str(&format!("INSERT INTO {} VALUES ({id}, '{v}');", self.table));
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
        sql.push_str(&format!("UPDATE {} SET v = '{v}' WHERE id = {id};", self.table));
        self.push(id, format!("u:{v}"));
        self.live.insert(id, v);
    }

    fn delete(&mut self, rng: &mut Rng, sql: &mut String) {
        let Some(id) = self.pick(rng) else { return self.insert(sql) };
        sql.push_str(&format!("DELETE FROM {} WHERE id = {id};", self.table));
        self.push(id, "d".into());
        self.expected.get_mut(&id).unwrap().push("tombstone".into());
        self.live.remove(&id);
    }

    /// A primary-key change: a delete (and tombstone) of the old key, a create of the new one.
    fn rekey(&mut self, rng: &mut Rng, sql: &mut String) {
        let Some(old) = self.pick(rng) else { return self.insert(sql) };
        let new = self.next_id;
        self.next_id += 1;
        sql.push_str(&format!("UPDATE {} SET id = {new} WHERE id = {old};", self.table));
        let v = self.live.remove(&old).unwrap();
        self.push(old, "d".into());
        self.expected.get_mut(&old).unwrap().push("tombstone".into());
        self.push(new, format!("c:{v}"));
        self.live.insert(new, v);
    }

    /// One MySQL transaction of the workload.
    pub fn step(&mut self, rng: &mut Rng) -> String {
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
pub struct Client {
    child: Child,
    pub stdin: ChildStdin,
}

impl Client {
    pub fn open(port: u16) -> Client {
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
    pub fn finish(mut self) {
        drop(self.stdin);
        let st = self.child.wait().unwrap();
        assert!(st.success(), "the workload client failed: {st}");
    }
}

/// Writes transactions (about 200/s) until `stop`, none while `paused`.
pub fn workload(
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

/// Writes `n` transactions of `model` as fast as the server takes them; returns once every one
/// has committed.
pub fn burst(port: u16, model: &Mutex<Model>, rng: &mut Rng, n: usize) {
    let mut client = Client::open(port);
    for _ in 0..n {
        let sql = model.lock().unwrap().step(rng);
        client.stdin.write_all(sql.as_bytes()).unwrap();
    }
    client.finish();
}

/// Waits (up to 3 minutes) until every key's records are the model's; panics with the keys
/// that differ.
pub fn caught_up(reader: &mut TopicReader, topic: &str, model: &Mutex<Model>, seed: u64, log: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let got = reader.per_key(topic, "v");
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
