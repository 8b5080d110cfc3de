//! Where the capabilities meet (issue 20): the combinations users run, as one tested surface,
//! and the seams found between two features, each with its regression.
//!
//! [`combinations`] runs one workload (inserts, updates, primary-key changes, deletes, a
//! TRUNCATE, an ALTER, a keyless table, multi-statement transactions) on two real MariaDB
//! servers at once, one writing `binlog_row_metadata=FULL`, the other `MINIMAL`, while six
//! `sluice run` pipelines, each with its own source name and topic prefix, publish them under
//! different settings, each with a `sluice sink elasticsearch` behind it; every pipeline and
//! every sink is SIGKILLed once mid-workload. The covering subset (the full product is 4 starts x
//! 3 snapshot modes x 2 value modes x 2 metadata x 2 failover = 96 runs; a start other than
//! `current` never goes with a snapshot that reads rows, which is refused, and that refusal is
//! checked too):
//!
//! | pipeline | server   | start          | snapshot           | values    | failover list | index on |
//! |----------|----------|----------------|--------------------|-----------|---------------|----------|
//! | p1       | FULL     | (unset)        | initial            | envelope  | yes           | noida    |
//! | p2       | FULL     | earliest       | (unset: none)      | flattened | no            | osmem    |
//! | p3       | MINIMAL  | current        | when_needed, purge | envelope  | no            | osmem    |
//! | p4       | MINIMAL  | file:position  | never              | flattened | no            | noida    |
//! | p5       | FULL     | GTID set       | never              | envelope  | yes           | osmem    |
//! | p6       | MINIMAL  | current        | initial            | flattened | no            | noida    |
//!
//! Every pair of value mode and metadata, every start with a value mode, and every snapshot
//! mode with both metadata kinds occur. The failover list names a live GTID replica of the
//! FULL server (the failover itself is tested in `run_failover.rs`; here the lists go with the
//! other settings, GTID checkpoints included). For p3 the MINIMAL server's binlogs are purged
//! while it is stopped: `when_needed` must take a new snapshot (its checkpoint has GTIDs).
//!
//! Each pipeline is checked by an independent read_committed consumer against a model of every
//! change, per table: per key, each change once and in order (a snapshot's `r` record may only
//! jump forward to a later state, never back), no `r` record without a snapshot, the final
//! state equal to `SELECT` (the keyless table as a multiset), and each index equal to its table.

use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use apache_avro::types::Value as Avro;
use support::elastic::{Engine, Sink};
use support::kafka::{log_text, start_sluice, wait_for, Running, Services, TopicReader};
use support::Server;

/// A row of `shop.orders` or `shop.trunc` as the model and the records see it: column -> text.
type Row = BTreeMap<String, Option<String>>;

/// The state of a key after a change: the row, or gone.
#[derive(Debug, Clone, PartialEq)]
enum State {
    Row(Row),
    Gone,
}

/// Every change of the workload, per table and key, in binlog order; and the keyless table's
/// rows.
#[derive(Default)]
struct Model {
    /// `table` -> key -> states in order (the first one is the insert).
    keyed: BTreeMap<&'static str, BTreeMap<i64, Vec<State>>>,
    /// `shop.nokey` rows: (a, v) -> count.
    nokey: BTreeMap<(i64, String), i64>,
    next: i64,
    rng: u64,
}

impl Model {
    fn rand(&mut self, n: u64) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % n
    }

    fn live(&self, table: &str) -> Vec<i64> {
        self.keyed
            .get(table)
            .map(|m| m.iter().filter(|(_, s)| matches!(s.last(), Some(State::Row(_)))).map(|(k, _)| *k).collect())
            .unwrap_or_default()
    }

    fn row(&self, table: &str, key: i64) -> Row {
        match self.keyed.get(table).and_then(|m| m.get(&key)).and_then(|s| s.last()) {
            Some(State::Row(r)) => r.clone(),
            _ => panic!("{table} {key} is not live"),
        }
    }

    fn push(&mut self, table: &'static str, key: i64, state: State) {
        self.keyed.entry(table).or_default().entry(key).or_default().push(state);
    }

    /// An insert into `orders` (with `note` once `altered`).
    fn insert_order(&mut self, sql: &mut String, altered: bool) {
        self.next += 1;
        let id = self.next;
        sql.push_str(&format!("INSERT INTO shop.orders (id, v, qty) VALUES ({id}, 'n{id}', {id});\n"));
        let mut row = Row::new();
        row.insert("v".into(), Some(format!("n{id}")));
        row.insert("qty".into(), Some(id.to_string()));
        if altered {
            row.insert("note".into(), None);
        }
        self.push("orders", id, State::Row(row));
    }

    /// One random statement on the tables.
    fn step(&mut self, sql: &mut String, altered: bool) {
        let live = self.live("orders");
        let pick = |m: &mut Model| live[m.rand(live.len() as u64) as usize];
        match self.rand(10) {
            0..=2 => self.insert_order(sql, altered),
            3 | 4 if !live.is_empty() => {
                let id = pick(self);
                self.next += 1;
                let n = self.next;
                let mut row = self.row("orders", id);
                let qty: i64 = row["qty"].as_deref().unwrap().parse().unwrap();
                sql.push_str(&format!("UPDATE shop.orders SET v = 'u{n}', qty = qty + 1 WHERE id = {id};\n"));
                row.insert("v".into(), Some(format!("u{n}")));
                row.insert("qty".into(), Some((qty + 1).to_string()));
                self.push("orders", id, State::Row(row));
            }
            5 if altered && !live.is_empty() => {
                let id = pick(self);
                self.next += 1;
                let n = self.next;
                let mut row = self.row("orders", id);
                sql.push_str(&format!("UPDATE shop.orders SET note = 'x{n}' WHERE id = {id};\n"));
                row.insert("note".into(), Some(format!("x{n}")));
                self.push("orders", id, State::Row(row));
            }
            6 if !live.is_empty() => {
                let id = pick(self);
                sql.push_str(&format!("DELETE FROM shop.orders WHERE id = {id};\n"));
                self.push("orders", id, State::Gone);
            }
            7 if !live.is_empty() => {
                // a primary-key change: the old key goes, the new one comes
                let id = pick(self);
                self.next += 1;
                let new = self.next;
                let row = self.row("orders", id);
                sql.push_str(&format!("UPDATE shop.orders SET id = {new} WHERE id = {id};\n"));
                self.push("orders", id, State::Gone);
                self.push("orders", new, State::Row(row));
            }
            8 => {
                let a = self.rand(5) as i64;
                let v = format!("k{}", self.rand(3));
                sql.push_str(&format!("INSERT INTO shop.nokey VALUES ({a}, '{v}');\n"));
                *self.nokey.entry((a, v)).or_default() += 1;
            }
            _ => {
                let present: Vec<(i64, String)> =
                    self.nokey.iter().filter(|(_, n)| **n > 0).map(|(k, _)| k.clone()).collect();
                if present.is_empty() {
                    return self.insert_order(sql, altered);
                }
                let (a, v) = present[self.rand(present.len() as u64) as usize].clone();
                sql.push_str(&format!("DELETE FROM shop.nokey WHERE a = {a} AND v = '{v}' LIMIT 1;\n"));
                *self.nokey.get_mut(&(a, v)).unwrap() -= 1;
            }
        }
    }

    /// `n` statements, a third of them grouped into transactions of three.
    fn segment(&mut self, n: usize, altered: bool) -> String {
        let mut sql = String::new();
        let mut i = 0;
        while i < n {
            if self.rand(3) == 0 {
                sql.push_str("BEGIN;\n");
                for _ in 0..3 {
                    self.step(&mut sql, altered);
                }
                sql.push_str("COMMIT;\n");
                i += 3;
            } else {
                self.step(&mut sql, altered);
                i += 1;
            }
        }
        sql
    }

    /// `shop.trunc` rows `ids` inserted.
    fn trunc_rows(&mut self, ids: std::ops::RangeInclusive<i64>, sql: &mut String) {
        let values: Vec<String> = ids.clone().map(|i| format!("({i}, {i})")).collect();
        sql.push_str(&format!("INSERT INTO shop.trunc VALUES {};\n", values.join(", ")));
        for i in ids {
            let mut row = Row::new();
            row.insert("v".into(), Some(i.to_string()));
            self.push("trunc", i, State::Row(row));
        }
    }

    /// TRUNCATE TABLE shop.trunc.
    fn truncate(&mut self, sql: &mut String) {
        sql.push_str("TRUNCATE TABLE shop.trunc;\n");
        for id in self.live("trunc") {
            self.push("trunc", id, State::Gone);
        }
    }
}

/// One pipeline of the suite.
struct Pipeline {
    name: &'static str,
    /// 0: the FULL server, 1: the MINIMAL one.
    server: usize,
    start: Option<String>,
    mode: Option<&'static str>,
    flattened: bool,
    failover: bool,
    /// 0: noida, 1: osmem.
    engine: usize,
}

impl Pipeline {
    fn snapshots(&self) -> bool {
        matches!(self.mode, Some("initial" | "when_needed"))
    }
}

/// The running processes of a pipeline.
struct Procs {
    config: PathBuf,
    log: PathBuf,
    sink_log: PathBuf,
    metrics: u16,
    run: Running,
    sink: Sink,
}

fn write_config(
    dir: &Path,
    p: &Pipeline,
    servers: &[&Server],
    replica: &Server,
    services: &Services,
    es: &str,
) -> PathBuf {
    let mut source = format!(
        "name = \"{}\"\nurl = \"mysql://root@127.0.0.1:{}\"\ntls = \"disabled\"\nheartbeat = \"1s\"\nserver_id = {}\n",
        p.name,
        servers[p.server].port,
        52000 + p.name.as_bytes()[1] as u32
    );
    if let Some(s) = &p.start {
        source.push_str(&format!("start = \"{s}\"\n"));
    }
    if p.failover {
        source.push_str(&format!("failover = [\"mysql://root@127.0.0.1:{}\"]\n", replica.port));
    }
    let mut snapshot = "chunk_size = 25\n".to_string();
    if let Some(m) = p.mode {
        snapshot.push_str(&format!("mode = \"{m}\"\n"));
    }
    let text = format!(
        "[source]\n{source}\n[kafka]\nbrokers = \"{}\"\ntopic_prefix = \"{}\"\npartitions = 2\nbatch_max_delay = \
         \"100ms\"\nbatch_max_records = 50\n\n[registry]\nurl = \"{}\"\n\n[output]\nvalue_mode = \"{}\"\n\n\
         [filter]\ninclude = [\"shop.*\"]\n\n[snapshot]\n{snapshot}\n[elasticsearch]\nurl = \"{es}\"\nbulk_interval = \
         \"300ms\"\nbulk_max_actions = 50\n",
        services.broker,
        p.name,
        services.registry,
        if p.flattened { "flattened" } else { "envelope" },
    );
    let path = dir.join(format!("{}.toml", p.name));
    std::fs::write(&path, text).unwrap();
    path
}

fn text_of(v: &Avro) -> Option<String> {
    match support::kafka::unwrap_union(v) {
        Avro::Null => None,
        Avro::String(s) => Some(s.clone()),
        Avro::Int(i) => Some(i.to_string()),
        Avro::Long(i) => Some(i.to_string()),
        other => Some(format!("{other:?}")),
    }
}

/// What one record says of its key: its op and its row (the columns but the key).
struct Seen {
    partition: i32,
    offset: i64,
    /// `file:pos` of the envelope's source block (empty for flattened values).
    at: String,
    key: Option<i64>,
    op: String,
    row: Option<Row>,
}

/// The records of `topic`, decoded for the checks (tombstones left out).
fn seen(reader: &mut TopicReader, topic: &str, flattened: bool, key_column: &str) -> Vec<Seen> {
    let mut out = Vec::new();
    for r in reader.read(topic) {
        let Some(Avro::Record(fields)) = &r.value else { continue };
        let get = |n: &str| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v);
        let columns = |cols: &[(String, Avro)]| -> Row {
            cols.iter()
                .filter(|(k, _)| !k.starts_with("__") && k != key_column)
                .map(|(k, v)| (k.clone(), text_of(v)))
                .collect()
        };
        let (op, row) = if flattened {
            let op = get("__op").and_then(text_of).unwrap();
            (op, Some(columns(fields)))
        } else {
            let op = get("op").and_then(text_of).unwrap();
            let image = if op == "d" { r.image("before") } else { r.image("after") };
            let row = image.map(|m| {
                m.into_iter()
                    .filter(|(k, _)| k != key_column && !k.starts_with("__"))
                    .map(|(k, v)| (k, text_of(&v)))
                    .collect()
            });
            (op, row)
        };
        let key = r.key.as_ref().map(|_| r.int_key());
        let at = match get("source").map(support::kafka::unwrap_union) {
            Some(Avro::Record(src)) => {
                let f = |n: &str| src.iter().find(|(k, _)| k == n).and_then(|(_, v)| text_of(v)).unwrap_or_default();
                format!("{}:{} {}", f("file"), f("pos"), f("snapshot"))
            }
            _ => String::new(),
        };
        out.push(Seen { partition: r.partition, offset: r.offset, at, key, op, row });
    }
    out
}

/// A row's columns compared with a model row: a column the record lacks (written before the
/// ALTER that added it) is NULL.
fn same_row(model: &Row, seen: &Row) -> bool {
    model.iter().all(|(k, v)| seen.get(k).cloned().flatten() == *v)
        && seen.iter().all(|(k, v)| model.contains_key(k) || v.is_none())
}

/// The per-key checks of a keyed table's records against the model (see the module's doc).
fn check_keyed(
    p: &Pipeline,
    table: &str,
    records: &[Seen],
    model: &BTreeMap<i64, Vec<State>>,
    rows: &BTreeMap<i64, Row>,
) -> Vec<String> {
    let mut diffs = Vec::new();
    if !p.snapshots() && records.iter().any(|r| r.op == "r") {
        diffs.push(format!(
            "{} {table}: snapshot records without a snapshot (the start's history covers the rows)",
            p.name
        ));
    }
    // per key: where in the model's sequence the records are (None: before the first)
    let mut at: HashMap<i64, Option<usize>> = HashMap::new();
    let mut partition_of: HashMap<i64, i32> = HashMap::new();
    let mut seen_state: HashMap<i64, State> = HashMap::new();
    // records are in partition order, and each key stays in one partition
    for r in records {
        if r.op == "t" && r.at.ends_with(" true") {
            // the clear a new snapshot begins with (`when_needed` after a purge): the rows come
            // again as `r` records
            for (k, part) in &partition_of {
                if *part == r.partition {
                    seen_state.insert(*k, State::Gone);
                }
            }
            continue;
        }
        if r.op == "t" {
            // every key of this partition is gone
            for (k, part) in &partition_of {
                if *part == r.partition && matches!(seen_state.get(k), Some(State::Row(_))) {
                    seen_state.insert(*k, State::Gone);
                    let states = &model[k];
                    let pos = at.get(k).copied().flatten();
                    let next = pos.map_or(0, |i| i + 1);
                    if states.get(next) == Some(&State::Gone) {
                        at.insert(*k, Some(next));
                    } else {
                        diffs.push(format!(
                            "{} {table} key {k}: a truncate where the model has {:?}",
                            p.name,
                            states.get(next)
                        ));
                    }
                }
            }
            continue;
        }
        let Some(k) = r.key else {
            diffs.push(format!("{} {table}: a record without a key ({})", p.name, r.op));
            continue;
        };
        partition_of.insert(k, r.partition);
        let state = match (r.op.as_str(), &r.row) {
            ("d", _) => State::Gone,
            (_, Some(row)) => State::Row(row.clone()),
            (op, None) => {
                diffs.push(format!("{} {table} key {k}: op {op} without a row", p.name));
                continue;
            }
        };
        seen_state.insert(k, state.clone());
        let Some(states) = model.get(&k) else {
            diffs.push(format!("{} {table} key {k}: no such key in the workload", p.name));
            continue;
        };
        let matches = |i: usize| match (&states[i], &state) {
            (State::Gone, State::Gone) => true,
            (State::Row(m), State::Row(s)) => same_row(m, s),
            _ => false,
        };
        let pos = at.get(&k).copied().flatten();
        let first = !at.contains_key(&k);
        let found = if r.op == "r" || (first && p.snapshots()) {
            // a snapshot's row (or the first change of a key a snapshot pipeline sees) may be any
            // state at or after the last one: never an older one
            (pos.unwrap_or(0)..states.len()).find(|&i| matches(i))
        } else if first && !p.snapshots() {
            // the history from the start: from `earliest` a key's insert; from a position after
            // the set-up, the change after the set-up's insert for its keys
            let after_setup = p.start.as_deref() != Some("earliest") && setup_keys(table).contains(&k);
            let want = usize::from(after_setup);
            (want < states.len() && matches(want)).then_some(want)
        } else {
            let next = pos.map_or(0, |i| i + 1);
            (next < states.len() && matches(next)).then_some(next)
        };
        match found {
            Some(i) => {
                at.insert(k, Some(i));
            }
            None => {
                let history: Vec<String> = records
                    .iter()
                    .filter(|x| x.key == Some(k) || (x.op == "t" && x.partition == r.partition))
                    .map(|x| format!("{}@{}/{} [{}] {:?}", x.op, x.partition, x.offset, x.at, x.row))
                    .collect();
                diffs.push(format!(
                    "{} {table} key {k}: {} at offset {} {:?} is not the change after {:?} (model: {:?}); records: {}",
                    p.name,
                    r.op,
                    r.offset,
                    r.row,
                    pos.map(|i| &states[i]),
                    states,
                    history.join("; ")
                ))
            }
        }
    }
    // the final state: the records replayed equal the table
    let replayed: BTreeMap<i64, Row> = seen_state
        .into_iter()
        .filter_map(|(k, s)| match s {
            State::Row(r) => Some((k, r)),
            State::Gone => None,
        })
        .collect();
    if replayed.len() != rows.len() || rows.iter().any(|(k, r)| replayed.get(k).is_none_or(|s| !same_row(r, s))) {
        let missing: Vec<&i64> = rows.keys().filter(|k| !replayed.contains_key(k)).collect();
        let extra: Vec<&i64> = replayed.keys().filter(|k| !rows.contains_key(k)).collect();
        let differ: Vec<&i64> =
            rows.iter().filter(|(k, r)| replayed.get(k).is_some_and(|s| !same_row(r, s))).map(|(k, _)| k).collect();
        diffs.push(format!(
            "{} {table}: the topic replays to another state than SELECT: missing {missing:?}, extra {extra:?}, \
             different {differ:?}",
            p.name
        ));
    }
    diffs
}

/// The keys the set-up inserted before any pipeline started.
fn setup_keys(table: &str) -> std::ops::RangeInclusive<i64> {
    match table {
        "orders" => 1..=60,
        _ => 1..=30,
    }
}

/// `SELECT` of a keyed table: key -> columns.
fn select(server: &Server, table: &str, columns: &[&str]) -> BTreeMap<i64, Row> {
    let sql = format!("SELECT id, {} FROM shop.{table}", columns.join(", "));
    server
        .sql(&sql)
        .into_iter()
        .map(|r| {
            let row =
                columns.iter().zip(&r[1..]).map(|(c, v)| (c.to_string(), (v != "NULL").then(|| v.clone()))).collect();
            (r[0].parse().unwrap(), row)
        })
        .collect()
}

/// Differences between `index` and a keyed table's `rows`.
fn index_diff(engine: &Engine, index: &str, rows: &BTreeMap<i64, Row>) -> Vec<String> {
    let docs = engine.documents(index);
    let mut diffs = Vec::new();
    for (id, row) in rows {
        let Some(doc) = docs.get(&id.to_string()) else {
            diffs.push(format!("{index}: no document for row {id}"));
            continue;
        };
        for (c, v) in row {
            let d = match doc.get(c) {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(other) => Some(other.to_string()),
            };
            if d != *v {
                diffs.push(format!("{index}: row {id} column {c}: SELECT {v:?}, document {d:?}"));
            }
        }
    }
    for id in docs.keys().filter(|id| !id.parse::<i64>().is_ok_and(|i| rows.contains_key(&i))) {
        diffs.push(format!("{index}: document {id} of no row"));
    }
    diffs
}

/// Every check of one pipeline; empty when it is right.
fn check_pipeline(
    p: &Pipeline,
    reader: &mut TopicReader,
    server: &Server,
    engine: &Engine,
    model: &Model,
) -> Vec<String> {
    let mut diffs = Vec::new();
    // a start after the set-up without a snapshot publishes the history from there: a set-up
    // row that no change touched since is not in the topic (nor in the index)
    let after_setup = !p.snapshots() && p.start.as_deref() != Some("earliest");
    let touched = |table: &str, rows: BTreeMap<i64, Row>| -> BTreeMap<i64, Row> {
        rows.into_iter()
            .filter(|(k, _)| !after_setup || !setup_keys(table).contains(k) || model.keyed[table][k].len() > 1)
            .collect()
    };
    let orders = touched("orders", select(server, "orders", &["v", "qty", "note"]));
    let trunc = touched("trunc", select(server, "trunc", &["v"]));
    let records = seen(reader, &format!("{}.shop.orders", p.name), p.flattened, "id");
    diffs.extend(check_keyed(p, "orders", &records, &model.keyed["orders"], &orders));
    let records = seen(reader, &format!("{}.shop.trunc", p.name), p.flattened, "id");
    diffs.extend(check_keyed(p, "trunc", &records, &model.keyed["trunc"], &trunc));
    // the keyless table, as a multiset: every record counts once, wherever it landed
    let mut counts: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut by_partition: BTreeMap<i32, BTreeMap<(String, String), i64>> = BTreeMap::new();
    for r in seen(reader, &format!("{}.shop.nokey", p.name), p.flattened, "") {
        let part = by_partition.entry(r.partition).or_default();
        if r.op == "t" {
            part.clear();
            continue;
        }
        let row = r.row.unwrap_or_default();
        let k =
            (row.get("a").cloned().flatten().unwrap_or_default(), row.get("v").cloned().flatten().unwrap_or_default());
        *part.entry(k).or_default() += if r.op == "d" { -1 } else { 1 };
    }
    if after_setup {
        // the set-up's keyless rows were never published
        let setup = by_partition.entry(-1).or_default();
        for k in [("1", "k0"), ("1", "k0"), ("2", "k1")] {
            *setup.entry((k.0.to_string(), k.1.to_string())).or_default() += 1;
        }
    }
    for part in by_partition.into_values() {
        for (k, n) in part {
            *counts.entry(k).or_default() += n;
        }
    }
    counts.retain(|_, n| *n != 0);
    let mut want: BTreeMap<(String, String), i64> = BTreeMap::new();
    for r in server.sql("SELECT a, v FROM shop.nokey") {
        *want.entry((r[0].clone(), r[1].clone())).or_default() += 1;
    }
    if counts != want {
        diffs.push(format!("{} nokey: the topic holds {counts:?}, the table {want:?}", p.name));
    }
    let model_rows: i64 = model.nokey.values().sum();
    if want.values().sum::<i64>() != model_rows {
        diffs.push(format!("{} nokey: the model has {model_rows} rows, the table {want:?}", p.name));
    }
    diffs.extend(index_diff(engine, &format!("{}.shop.orders", p.name), &orders));
    diffs.extend(index_diff(engine, &format!("{}.shop.trunc", p.name), &trunc));
    diffs
}

fn wait_checkpoint_at_end(services: &Services, server: &Server, p: &Pipeline, log: &Path) {
    let (file, pos) = server.master_status();
    wait_for(
        180,
        || {
            services.checkpoint(p.name, p.name).is_some_and(|c| {
                c["file"].as_str() > Some(file.as_str())
                    || (c["file"].as_str() == Some(file.as_str()) && c["position"].as_u64().unwrap_or(0) >= pos)
            })
        },
        &format!("{} to reach the binlog end", p.name),
        log,
    );
}

#[test]
fn combinations() {
    let Some(services) = Services::start("seams", &["--log-slave-updates"]) else { return };
    let full = &services.mariadb;
    let minimal = Server::start("seams-min", &["--binlog-row-metadata=MINIMAL", "--server-id=7"]).unwrap();
    let replica = Server::start("seams-r", &["--server-id=2", "--log-slave-updates"]).unwrap();
    let engines = [Engine::start("seams-noida", "noida"), Engine::start("seams-os", "osmem")];
    let servers = [full, &minimal];
    assert_eq!(minimal.scalar("SELECT @@binlog_row_metadata"), "MINIMAL");

    // the tables and the rows before any pipeline starts
    let mut model = Model { rng: 0x5eed_1234, ..Model::default() };
    let mut setup = String::from(
        "CREATE DATABASE shop;
         CREATE TABLE shop.orders (id INT PRIMARY KEY, v VARCHAR(20), qty INT);
         CREATE TABLE shop.trunc (id INT PRIMARY KEY, v INT);
         CREATE TABLE shop.nokey (a INT, v VARCHAR(10));\n",
    );
    for _ in 0..60 {
        model.insert_order(&mut setup, false);
    }
    model.trunc_rows(1..=30, &mut setup);
    setup.push_str("INSERT INTO shop.nokey VALUES (1, 'k0'), (1, 'k0'), (2, 'k1');\n");
    for k in [(1, "k0"), (1, "k0"), (2, "k1")] {
        *model.nokey.entry((k.0, k.1.to_string())).or_default() += 1;
    }
    for s in servers {
        s.sql_text(&setup);
    }
    replica.replicate_from(full);
    let (file_b, pos_b) = minimal.master_status();
    let gtid_a = full.gtid_pos();

    let pipelines = [
        Pipeline {
            name: "p1",
            server: 0,
            start: None,
            mode: Some("initial"),
            flattened: false,
            failover: true,
            engine: 0,
        },
        Pipeline {
            name: "p2",
            server: 0,
            start: Some("earliest".into()),
            mode: None,
            flattened: true,
            failover: false,
            engine: 1,
        },
        Pipeline {
            name: "p3",
            server: 1,
            start: Some("current".into()),
            mode: Some("when_needed"),
            flattened: false,
            failover: false,
            engine: 1,
        },
        Pipeline {
            name: "p4",
            server: 1,
            start: Some(format!("{file_b}:{pos_b}")),
            mode: Some("never"),
            flattened: true,
            failover: false,
            engine: 0,
        },
        Pipeline {
            name: "p5",
            server: 0,
            start: Some(gtid_a.clone()),
            mode: Some("never"),
            flattened: false,
            failover: true,
            engine: 1,
        },
        Pipeline {
            name: "p6",
            server: 1,
            start: Some("current".into()),
            mode: Some("initial"),
            flattened: true,
            failover: false,
            engine: 0,
        },
    ];
    let dir = support::work_dir().join("run-seams");
    std::fs::create_dir_all(&dir).unwrap();

    // an explicit start in the past together with a snapshot that reads rows is refused at load
    let refused = Pipeline {
        name: "px",
        server: 0,
        start: Some("earliest".into()),
        mode: Some("initial"),
        flattened: false,
        failover: false,
        engine: 0,
    };
    let config = write_config(&dir, &refused, &servers, &replica, &services, &engines[0].url());
    let out = support::sluice(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("source.start = \"earliest\" and snapshot.mode = \"initial\""), "{}", out.stderr);

    // p2's first start goes without a snapshot, as its explicit start says, and check says so
    let p2 = write_config(&dir, &pipelines[1], &servers, &replica, &services, &engines[1].url());
    let check = support::sluice(&["check", "--config", p2.to_str().unwrap()]);
    assert!(
        check.stdout.contains("[ok] snapshot: source.start = \"earliest\" without snapshot.mode: no initial snapshot"),
        "{}\n{}",
        check.stdout,
        check.stderr
    );

    let mut procs: Vec<Procs> = pipelines
        .iter()
        .map(|p| {
            let config = write_config(&dir, p, &servers, &replica, &services, &engines[p.engine].url());
            let log = dir.join(format!("{}.log", p.name));
            let sink_log = dir.join(format!("{}-sink.log", p.name));
            let _ = std::fs::remove_file(&log);
            let _ = std::fs::remove_file(&sink_log);
            let metrics = support::free_port();
            let run = start_sluice(&config, &log);
            let sink = Sink::start(&config, &sink_log, metrics);
            Procs { config, log, sink_log, metrics, run, sink }
        })
        .collect();
    // every first start has resolved its start (and read the tables' definitions) before the
    // workload's ALTER
    for (p, pr) in pipelines.iter().zip(&procs) {
        wait_for(
            90,
            || services.checkpoint(p.name, p.name).is_some(),
            &format!("{}'s first checkpoint", p.name),
            &pr.log,
        );
    }
    assert!(
        log_text(&procs[1].log).contains("without snapshot.mode: no initial snapshot"),
        "{}",
        log_text(&procs[1].log)
    );

    // the workload, on both servers alike, with each pipeline and each sink SIGKILLed once
    let mut rng = 7u64;
    for (i, (p, pr)) in pipelines.iter().zip(procs.iter_mut()).enumerate() {
        let sql = model.segment(30, i >= 3);
        if i == 3 {
            let alter = "ALTER TABLE shop.orders ADD COLUMN note VARCHAR(10);\n";
            for s in servers {
                s.sql_text(alter);
            }
        }
        if i == 4 {
            let mut t = String::new();
            model.truncate(&mut t);
            model.trunc_rows(100..=110, &mut t);
            for s in servers {
                s.sql_text(&t);
            }
        }
        for s in servers {
            s.sql_text(&sql);
        }
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        std::thread::sleep(Duration::from_millis(300 + (rng >> 33) % 1200));
        pr.run.kill().unwrap();
        pr.run.wait().unwrap();
        pr.run = start_sluice(&pr.config, &pr.log);
        pr.sink.kill();
        pr.sink = Sink::start(&pr.config, &pr.sink_log, pr.metrics);
        eprintln!("{}: SIGKILLed and restarted (run and sink)", p.name);
    }
    let sql = model.segment(30, true);
    for s in servers {
        s.sql_text(&sql);
    }

    // p3 (when_needed): stopped, its checkpoint's binlog purged while writes go on, started again
    for p in [&pipelines[3], &pipelines[5]] {
        wait_checkpoint_at_end(&services, &minimal, p, &procs[p.name[1..].parse::<usize>().unwrap() - 1].log);
    }
    let p3 = &mut procs[2];
    let st = std::process::Command::new("kill").args(["-TERM", &p3.run.id().to_string()]).status().unwrap();
    assert!(st.success());
    let code = p3.run.wait().unwrap().code();
    assert_eq!(code, Some(0), "{}", log_text(&p3.log));
    let sql = model.segment(20, true);
    for s in servers {
        s.sql_text(&sql);
    }
    for p in [&pipelines[3], &pipelines[5]] {
        let log = procs[p.name[1..].parse::<usize>().unwrap() - 1].log.clone();
        wait_checkpoint_at_end(&services, &minimal, p, &log);
    }
    minimal.sql_text("FLUSH BINARY LOGS; FLUSH BINARY LOGS;");
    let (newest, _) = minimal.master_status();
    minimal.purge_to(&newest);
    let p3 = &mut procs[2];
    p3.run = start_sluice(&p3.config, &p3.log);
    wait_for(
        60,
        || log_text(&p3.log).contains("snapshot.mode = when_needed: taking a new snapshot"),
        "p3 to take a new snapshot after the purge",
        &p3.log,
    );
    let sql = model.segment(20, true);
    for s in servers {
        s.sql_text(&sql);
    }

    // every pipeline caught up; every topic and index equal to its table, every change once
    let mut reader = TopicReader::new(&services);
    for (p, pr) in pipelines.iter().zip(&procs) {
        wait_checkpoint_at_end(&services, servers[p.server], p, &pr.log);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut diffs;
    loop {
        diffs = Vec::new();
        for p in &pipelines {
            diffs.extend(check_pipeline(p, &mut reader, servers[p.server], &engines[p.engine], &model));
        }
        if diffs.is_empty() || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    if !diffs.is_empty() {
        for (p, pr) in pipelines.iter().zip(&procs) {
            eprintln!(
                "--- {} log:\n{}\n--- {} sink log:\n{}",
                p.name,
                log_text(&pr.log),
                p.name,
                log_text(&pr.sink_log)
            );
        }
        if let Some(secs) = std::env::var("SLUICE_SEAMS_HOLD").ok().and_then(|s| s.parse().ok()) {
            // a person looks at the services before they go
            eprintln!("holding the services for {secs} s: broker {}, registry {}", services.broker, services.registry);
            std::thread::sleep(Duration::from_secs(secs));
        }
        panic!("the combinations differ:\n{}", diffs.join("\n"));
    }
    // sluice verify says the same of each pipeline, both targets (the checks above stay the
    // judges of once and in order): every table equal, or, for a start after the set-up without
    // a snapshot, exactly the set-up rows no change touched missing (they were never published);
    // the keyless table skipped with its reason
    for (p, pr) in pipelines.iter().zip(&procs) {
        let out = support::sluice_cmd()
            .arg("verify")
            .arg("--config")
            .arg(&pr.config)
            .args(["--format", "json", "--table", "shop.orders", "--table", "shop.trunc", "--table", "shop.nokey"])
            .output()
            .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let after_setup = !p.snapshots() && p.start.as_deref() != Some("earliest");
        let mut any_missing = false;
        let reports: Vec<serde_json::Value> = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        for table in ["orders", "trunc"] {
            let rows = select(servers[p.server], table, &["v"]);
            let never_published = rows
                .keys()
                .filter(|k| after_setup && setup_keys(table).contains(k) && model.keyed[table][k].len() <= 1)
                .count() as u64;
            any_missing |= never_published > 0;
            for target in ["kafka", "elasticsearch"] {
                let r = reports
                    .iter()
                    .find(|r| r["table"] == format!("shop.{table}") && r["target"] == target)
                    .unwrap_or_else(|| panic!("{}: no report of shop.{table} on {target}: {stdout}\n{stderr}", p.name));
                let got = (r["rows"].as_u64(), r["missing"].as_u64(), r["extra"].as_u64(), r["different"].as_u64());
                let want = (Some(rows.len() as u64), Some(never_published), Some(0), Some(0));
                assert_eq!(got, want, "{}: verify of shop.{table} on {target}: {r}\n{stderr}", p.name);
            }
        }
        let nokey = reports.iter().find(|r| r["table"] == "shop.nokey").unwrap_or_else(|| panic!("{stdout}"));
        assert!(nokey["skipped"].as_str().is_some_and(|s| s.contains("no primary key")), "{}: {nokey}", p.name);
        assert_eq!(out.status.code(), Some(i32::from(any_missing)), "{}: {stdout}\n{stderr}", p.name);
    }
    let orders = full.scalar("SELECT COUNT(*) FROM shop.orders");
    eprintln!(
        "6 pipelines, 6 sinks: every topic and index equal to its table ({orders} orders), every change once; \
         sluice verify agrees"
    );
}

/// The snapshot progress entry of `table` in the last checkpoint of source `name`.
fn table_progress(services: &Services, name: &str, table: &str) -> Option<serde_json::Value> {
    let c = services.checkpoint(name, name)?;
    c["snapshot"]["tables"].as_array()?.iter().find(|t| t["table"] == table).cloned()
}

/// The seams one at a time (issue 20, items 4, 6, 7, 8, 10), on one set of services:
/// - names Kafka or Avro cannot use: `sluice check` names the tables and columns that collide
///   and what fixes them; with the fixes, odd names publish to sanitized topics;
/// - a table the configuration leaves out after the first start is not read from the
///   committed plan (`check` says which);
/// - a table dropped, and one renamed, while its snapshot reads: the run goes on, each ends
///   `skipped` with what happened (the renamed one naming the table to snapshot);
/// - `sluice snapshot --wait` with no instance running says it waits, and `--timeout` ends it
///   with exit 75;
/// - a `[snapshot.where]` that is not one condition is refused at load, one the server refuses
///   by `check`.
#[test]
fn seams_one_by_one() {
    let Some(services) = Services::start("seams-items", &[]) else { return };
    let db = &services.mariadb;
    let mut sql = String::from(
        "CREATE DATABASE shop;
         CREATE TABLE shop.`back``tick` (id INT PRIMARY KEY); INSERT INTO shop.`back``tick` VALUES (1);
         CREATE TABLE shop.big (id INT PRIMARY KEY, v INT); INSERT INTO shop.big VALUES (1, 1), (2, 2);
         CREATE TABLE shop.gone (id INT PRIMARY KEY, v INT);
         CREATE TABLE shop.moved (id INT PRIMARY KEY, v INT);
         CREATE TABLE shop.`sp ace` (id INT PRIMARY KEY); INSERT INTO shop.`sp ace` VALUES (1), (2);
         CREATE TABLE shop.`tablé_ü` (id INT PRIMARY KEY, `é` INT, `ü` INT); INSERT INTO shop.`tablé_ü` VALUES (1, 1, 1);
         CREATE TABLE shop.`é` (id INT PRIMARY KEY); CREATE TABLE shop.`ü` (id INT PRIMARY KEY);\n",
    );
    for t in ["gone", "moved"] {
        let values: Vec<String> = (1..=20_000).map(|i| format!("({i}, {i})")).collect();
        sql.push_str(&format!("INSERT INTO shop.{t} VALUES {};\n", values.join(",")));
    }
    db.sql_text(&format!("SET NAMES utf8mb4; {sql}"));
    let name = "items";
    let base = "[snapshot]\nmode = \"initial\"\nchunk_size = 50\n";
    let (config, log) = services.config(name, "topic_prefix = \"items\"", base);
    // a snapshot goes with a start at the current position (or none): the rule of issue 20
    let text = std::fs::read_to_string(&config).unwrap().replace("start = \"earliest\"", "start = \"current\"");
    std::fs::write(&config, text).unwrap();
    let write = |extra: &str| {
        let text = std::fs::read_to_string(&config).unwrap();
        let text = text.split("\n#--\n").next().unwrap().to_string();
        std::fs::write(&config, format!("{text}\n#--\n{extra}")).unwrap();
    };
    let check = || support::sluice(&["check", "--config", config.to_str().unwrap()]);

    // names: the collisions are named with their fixes, before anything is registered
    let out = check();
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        out.stdout.contains("[ERROR] naming: tables shop.é, shop.ü would all publish to topic items.shop._")
            && out.stdout.contains("filter.exclude"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(
            "[ERROR] naming: table shop.tablé_ü: columns \"é\" and \"ü\" both become the Avro field name \"_\""
        ) && out.stdout.contains("filter.exclude_columns = [\"shop.tablé_ü.ü\"]"),
        "{}",
        out.stdout
    );
    let fixes = "[filter]\nexclude = [\"shop.ü\"]\nexclude_columns = [\"shop.tablé_ü.ü\"]\n";
    write(fixes);
    let out = check();
    assert!(!out.stdout.contains("naming:"), "{}", out.stdout);
    // a condition that is not one expression is refused at load; one the server refuses by check
    write(&format!("{fixes}[snapshot.where]\n\"shop.big\" = \"id <= 10) UNION SELECT 1,2 -- \"\n"));
    let out = check();
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("snapshot.where.\"shop.big\""), "{}", out.stderr);
    write(&format!("{fixes}[snapshot.where]\n\"shop.big\" = \"no_such_column > 1\"\n"));
    let out = check();
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        out.stdout.contains("[ERROR] snapshot.where.\"shop.big\": the server refuses the condition"),
        "{}",
        out.stdout
    );
    write(fixes);

    // the first start's plan: every captured table; killed while it reads shop.gone
    let mut run = start_sluice(&config, &log);
    wait_for(
        120,
        || table_progress(&services, name, "shop.gone").is_some_and(|t| t["rows"].as_u64() > Some(0)),
        "shop.gone to be read",
        &log,
    );
    run.kill().unwrap();
    run.wait().unwrap();
    // the configuration changes: shop.sp ace is no longer captured, tablé_ü not snapshotted
    let later = "[filter]\nexclude = [\"shop.ü\", \"shop.sp ace\"]\nexclude_columns = [\"shop.tablé_ü.ü\"]\n";
    write(later);
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("chunk_size = 50\n", "chunk_size = 50\nexclude = [\"shop.tablé_ü\"]\n"))
        .unwrap();
    let out = check();
    assert!(
        out.stdout.contains(
            "[warning] snapshot: the configuration leaves out tables the committed snapshot has not finished"
        ) && out.stdout.contains("shop.sp ace")
            && out.stdout.contains("shop.tablé_ü"),
        "{}",
        out.stdout
    );

    // started again: shop.gone dropped while it is read, shop.moved renamed while it is read
    let mut run = start_sluice(&config, &log);
    let rows_before = table_progress(&services, name, "shop.gone").unwrap()["rows"].as_u64().unwrap();
    wait_for(
        120,
        || table_progress(&services, name, "shop.gone").is_some_and(|t| t["rows"].as_u64() > Some(rows_before)),
        "shop.gone to be read on",
        &log,
    );
    db.sql_text("DROP TABLE shop.gone;");
    wait_for(
        120,
        || table_progress(&services, name, "shop.moved").is_some_and(|t| t["rows"].as_u64() > Some(0)),
        "shop.moved to be read",
        &log,
    );
    db.sql_text("RENAME TABLE shop.moved TO shop.moved2;");
    let done = || {
        services.checkpoint(name, name).is_some_and(|c| {
            c["snapshot"]["tables"]
                .as_array()
                .is_some_and(|t| t.iter().all(|t| t["state"] == "done" || t["state"] == "skipped"))
        })
    };
    wait_for(120, done, "the snapshot to end", &log);
    assert!(run.try_wait().unwrap().is_none(), "sluice run stopped:\n{}", log_text(&log));
    let note = |t: &str| table_progress(&services, name, t).unwrap()["note"].as_str().unwrap_or("").to_string();
    let state = |t: &str| table_progress(&services, name, t).unwrap()["state"].as_str().unwrap().to_string();
    wait_for(30, || note("shop.moved").contains("renamed to shop.moved2"), "the rename in shop.moved's note", &log);
    assert!(note("shop.moved").contains("sluice snapshot --table shop.moved2"), "{}", note("shop.moved"));
    assert_eq!(state("shop.gone"), "skipped");
    assert!(note("shop.gone").contains("dropped"), "{}", note("shop.gone"));
    assert_eq!((state("shop.sp ace"), state("shop.tablé_ü")), ("skipped".into(), "skipped".into()));
    assert!(note("shop.sp ace").contains("no longer captured by [filter]"), "{}", note("shop.sp ace"));
    assert!(note("shop.tablé_ü").contains("snapshot.exclude"), "{}", note("shop.tablé_ü"));
    let mut reader = TopicReader::new(&services);
    // the dropped table's topic ends with its truncate records
    let gone = reader.read("items.shop.gone");
    assert!(gone.iter().filter(|r| r.op() == Some("t")).count() == 2, "a truncate record on each partition");
    // odd names went to topics made valid; the excluded column is not in the records
    db.sql_text("SET NAMES utf8mb4; INSERT INTO shop.`tablé_ü` VALUES (2, 2, 2);");
    services.wait_caught_up("items", name, &log);
    assert_eq!(reader.read("items.shop.back_tick").iter().filter(|r| r.op() == Some("r")).count(), 1);
    let odd = reader.read("items.shop.tabl___");
    assert_eq!(odd.len(), 1, "only the streamed insert (its snapshot was left out): {odd:?}");
    let after = odd[0].image("after").unwrap();
    assert!(after.contains_key("_") && after.len() == 2, "{after:?}");
    assert!(reader.read("items.shop.sp_ace").is_empty(), "shop.sp ace is not captured any more");

    // a request with no instance running: it waits, says so, and --timeout ends it (exit 75)
    run.kill().unwrap();
    run.wait().unwrap();
    let started = Instant::now();
    let out = support::sluice(&[
        "snapshot",
        "--config",
        config.to_str().unwrap(),
        "--table",
        "shop.big",
        "--wait",
        "--timeout",
        "8s",
    ]);
    assert_eq!(out.code, Some(75), "{}\n{}", out.stdout, out.stderr);
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        out.stdout.contains("no running sluice run of source \"items\" has taken the request in"),
        "{}",
        out.stdout
    );
    assert!(out.stderr.contains("gave up waiting after 8s"), "{}", out.stderr);
    // the request stays: the next start takes it in
    let mut run = start_sluice(&config, &log);
    let taken = || {
        services.checkpoint(name, name).is_some_and(|c| {
            c["snapshot"]["reason"] == "signal"
                && table_progress(&services, name, "shop.big").is_some_and(|t| t["state"] == "done" && t["rows"] == 2)
        })
    };
    wait_for(60, taken, "the request to be taken in at the next start", &log);
    // a new round counts its own tables: one (it said 7 of 7 before)
    let tables = services.checkpoint(name, name).unwrap()["snapshot"]["tables"].as_array().unwrap().len();
    assert_eq!(tables, 1);

    // a table created while it runs whose topic a captured table has, one with no record in
    // this run (shop.é: items.shop._): the run stops naming both, before any record of the new
    // one (it once checked only the tables published since its start, and mixed two tables in
    // one topic)
    db.sql_text("SET NAMES utf8mb4; CREATE TABLE shop.`ë` (id INT PRIMARY KEY); INSERT INTO shop.`ë` VALUES (7);");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = run.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "sluice run went on:\n{}", log_text(&log));
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(status.code(), Some(1), "{}", log_text(&log));
    let text = log_text(&log);
    assert!(text.contains("tables shop.é, shop.ë would all publish to topic items.shop._"), "{text}");
    assert!(reader.read("items.shop._").is_empty(), "a record of shop.ë reached shop.é's topic");
    // a snapshot of either is refused before it is asked for
    let out = support::sluice(&["snapshot", "--config", config.to_str().unwrap(), "--table", "shop.é"]);
    assert_eq!(out.code, Some(2), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("would all publish to topic items.shop._"), "{}", out.stderr);
    // its own advice, filter.exclude, lets it start again (the committed history still holds
    // shop.ë; the start checks the tables the configuration captures now)
    write("[filter]\nexclude = [\"shop.ü\", \"shop.sp ace\", \"shop.ë\"]\nexclude_columns = [\"shop.tablé_ü.ü\"]\n");
    let mut run = start_sluice(&config, &log);
    db.sql_text("SET NAMES utf8mb4; INSERT INTO shop.`é` VALUES (5);");
    services.wait_caught_up("items", name, &log);
    assert!(run.try_wait().unwrap().is_none(), "sluice run stopped:\n{}", log_text(&log));
    let topic = reader.read("items.shop._");
    assert_eq!(topic.iter().map(|r| r.int_key()).collect::<Vec<_>>(), [5], "only shop.é's row");
    run.kill().unwrap();
    run.wait().unwrap();
}
