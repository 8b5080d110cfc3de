//! Round trips of the recorded MariaDB workload (`crates/binlog/tests/data/recorded/`, see
//! `integration/README.md`) through the `sluice` binary:
//!
//! - JSON replay: `sluice dump` lines applied to an in-memory model give exactly
//!   `expected-final.json` (and each transaction's net changes in `expected-transactions.json`);
//! - SQL replay: `sluice dump --format sql`, with the binlog's own DDL in between, applied to a
//!   fresh MariaDB gives exactly `expected-final.json` when selected back;
//! - flashback: `--format flashback` undoes a workload on a live server, and refuses clearly on a
//!   binlog without column names;
//! - CLI behaviour: filters, position and time windows, gzip, stdin, exit codes.
//!
//! Representation mapping between sluice's JSON and the SELECT text of `expected-final.json`
//! (both sides are turned into one canonical string per value, `None` for NULL):
//!
//! | column | sluice JSON | expected-final.json | canonical |
//! |---|---|---|---|
//! | integers, DECIMAL | number, or string beyond 2^53 / for DECIMAL | text | the digits |
//! | FLOAT / DOUBLE | JSON number (shortest form) | MariaDB's shortest text (`3.4e38`, `0` for -0) | parsed as f32 / f64, printed by Rust (`0` for ±0) |
//! | DATETIME, TIMESTAMP | ISO `2024-02-29T23:59:59.99`, TIMESTAMP with `Z` (UTC) | `2024-02-29 23:59:59.99` (session time zone +00:00) | `T` -> space, no `Z` |
//! | YEAR | number (0 for the zero year) | `0000`, `2024` | 4 digits |
//! | BINARY, VARBINARY, BLOBs (`repr: hex`) | base64 | `HEX(col)` | upper-case hex |
//! | BIT (`repr: bit_uint`) | number or string | `col+0` | decimal digits |
//! | GEOMETRY (`repr: geometry`) | `{srid, wkb}` (base64) | `{wkt, srid, hex}`; `hex` is the stored SRID (4 bytes LE) + WKB | `SRID:HEX(srid LE + wkb)` (WKT is derived by the server from the same bytes) |
//! | UUID | base64 of the 16 stored bytes | `123e4567-e89b-...` | the 16 bytes as 8-4-4-4-12 hex |
//! | INET6 | base64 of the 16 bytes | `2001:db8::1` | RFC 5952 text (`std::net::Ipv6Addr`) |
//! | text, ENUM, SET, JSON (LONGTEXT) | string (ENUM/SET by name) | text | the text |

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use base64::Engine as _;
use serde_json::Value as Json;
use support::{float_canon, repo, SelectAs, Server};

type Row = BTreeMap<String, Option<String>>;

fn recorded() -> PathBuf {
    repo().join("crates/binlog/tests/data/recorded")
}

fn binlogs() -> Vec<PathBuf> {
    vec![recorded().join("mysql-bin.000001"), recorded().join("mysql-bin.000002")]
}

fn load(name: &str) -> Json {
    serde_json::from_slice(&std::fs::read(recorded().join(name)).unwrap()).unwrap()
}

fn sluice<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_sluice")).args(args).output().unwrap()
}

fn ok_stdout(out: &Output, what: &str) -> String {
    assert!(out.status.success(), "{what} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn json_lines(s: &str) -> Vec<Json> {
    s.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

fn hex_upper(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

/// A column as expected-final.json / expected-transactions.json describe it.
#[derive(Debug, Clone)]
struct Col {
    name: String,
    data_type: String,
    repr: String,
}

fn cols(v: &Json) -> Vec<Col> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|c| Col {
            name: c["name"].as_str().unwrap().into(),
            data_type: c["data_type"].as_str().unwrap().into(),
            repr: c["repr"].as_str().unwrap().into(),
        })
        .collect()
}

fn scalar_text(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        Json::Number(n) => n.to_string(),
        other => panic!("unexpected value {other}"),
    }
}

/// A value of expected-*.json, canonical.
fn exp_canon(col: Option<&Col>, v: &Json) -> Option<String> {
    match v {
        Json::Null => None,
        Json::Object(o) if o.contains_key("sha256") => Some(format!("sha256:{}", o["sha256"].as_str().unwrap())),
        Json::Object(o) => Some(format!("{}:{}", o["srid"].as_str().unwrap(), o["hex"].as_str().unwrap())),
        v => {
            let s = scalar_text(v);
            Some(match col.map(|c| c.data_type.as_str()) {
                Some(t @ ("float" | "double")) => float_canon(t == "float", &s),
                _ => s,
            })
        }
    }
}

/// A value of a `sluice dump` JSON line, canonical.
fn sluice_canon(col: Option<&Col>, v: &Json) -> Option<String> {
    if v.is_null() {
        return None;
    }
    let Some(col) = col else { return Some(scalar_text(v)) };
    Some(match (col.repr.as_str(), col.data_type.as_str()) {
        ("hex", _) => hex_upper(&b64(v.as_str().unwrap())),
        ("geometry", _) => {
            let srid = v["srid"].as_u64().unwrap();
            let mut all = u32::try_from(srid).unwrap().to_le_bytes().to_vec();
            all.extend(b64(v["wkb"].as_str().unwrap()));
            format!("{srid}:{}", hex_upper(&all))
        }
        (_, "uuid") => {
            let h: String = b64(v.as_str().unwrap()).iter().map(|x| format!("{x:02x}")).collect();
            format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
        }
        (_, "inet6") => {
            let b: [u8; 16] = b64(v.as_str().unwrap()).try_into().unwrap();
            std::net::Ipv6Addr::from(b).to_string()
        }
        (_, t @ ("float" | "double")) => float_canon(t == "float", &scalar_text(v)),
        (_, "datetime" | "timestamp") => v.as_str().unwrap().replace('T', " ").trim_end_matches('Z').to_string(),
        (_, "year") => format!("{:04}", v.as_u64().unwrap()),
        _ => scalar_text(v),
    })
}

/// A table while replaying.
#[derive(Debug, Default)]
struct Model {
    cols: Vec<Col>,
    pk: Vec<String>,
    rows: Vec<Row>,
}

impl Model {
    fn col(&self, name: &str) -> Option<&Col> {
        self.cols.iter().find(|c| c.name == name)
    }

    fn exp_row(&self, v: &Json) -> Row {
        v.as_object().unwrap().iter().map(|(k, v)| (k.clone(), exp_canon(self.col(k), v))).collect()
    }

    fn sluice_image(&self, v: &Json) -> Row {
        v.as_object().unwrap().iter().map(|(k, v)| (k.clone(), sluice_canon(self.col(k), v))).collect()
    }

    fn find(&self, image: &Row) -> Option<usize> {
        self.rows.iter().position(|r| image.iter().all(|(k, v)| r.get(k) == Some(v)))
    }

    fn key(&self, r: &Row) -> String {
        if self.pk.is_empty() {
            format!("{r:?}")
        } else {
            format!("{:?}", self.pk.iter().map(|k| r.get(k)).collect::<Vec<_>>())
        }
    }
}

/// Compares rows as multisets keyed by primary key (whole row without one), value by value.
/// Returns the number of values compared.
fn compare_rows(table: &str, m: &Model, want: &[Row], got: &[Row], failures: &mut Vec<String>) -> usize {
    let mut w: Vec<&Row> = want.iter().collect();
    let mut g: Vec<&Row> = got.iter().collect();
    w.sort_by_key(|r| m.key(r));
    g.sort_by_key(|r| m.key(r));
    if w.len() != g.len() {
        failures.push(format!("{table}: {} rows expected, {} rows got\nexpected: {w:?}\ngot: {g:?}", w.len(), g.len()));
        return 0;
    }
    let mut n = 0;
    for (a, b) in w.iter().zip(&g) {
        for c in &m.cols {
            n += 1;
            let (x, y) = (a.get(&c.name), b.get(&c.name));
            if x != y {
                failures.push(format!(
                    "{table} row {}: column {} ({}): expected {:?}, got {:?}",
                    m.key(a),
                    c.name,
                    c.data_type,
                    x.map(|v| clip(v.as_deref())),
                    y.map(|v| clip(v.as_deref()))
                ));
            }
        }
    }
    n
}

fn clip(v: Option<&str>) -> String {
    match v {
        None => "NULL".into(),
        Some(s) if s.len() > 120 => {
            format!("{}... ({} chars)", &s[..s.char_indices().nth(120).map_or(s.len(), |x| x.0)], s.len())
        }
        Some(s) => s.to_string(),
    }
}

fn final_models() -> BTreeMap<String, (Model, Vec<Row>)> {
    let fin = load("expected-final.json");
    let mut out = BTreeMap::new();
    for (t, v) in fin["tables"].as_object().unwrap() {
        let m = Model {
            cols: cols(&v["columns"]),
            pk: v["primary_key"].as_array().unwrap().iter().map(|k| k.as_str().unwrap().to_string()).collect(),
            rows: Vec::new(),
        };
        let rows = v["rows"].as_array().unwrap().iter().map(|r| m.exp_row(r)).collect();
        out.insert(t.clone(), (m, rows));
    }
    out
}

#[test]
fn json_replay_equals_expected_final() {
    let files = binlogs();
    let out = sluice(["dump".as_ref(), files[0].as_os_str(), files[1].as_os_str()]);
    let lines = json_lines(&ok_stdout(&out, "sluice dump"));
    let txs = load("expected-transactions.json");
    let mut models: BTreeMap<String, Model> = BTreeMap::new();
    let mut failures = Vec::new();
    let (mut li, mut tx_values, mut ddl_resets) = (0usize, 0usize, 0usize);
    for tx in txs["transactions"].as_array().unwrap() {
        let gtids: Vec<&str> = tx["gtids"].as_array().unwrap().iter().map(|g| g.as_str().unwrap()).collect();
        let changes = tx["changes"].as_object().unwrap();
        for (t, ch) in changes {
            if ch.get("created").is_some_and(|c| c == true) {
                let m = Model {
                    cols: cols(&ch["columns"]),
                    pk: ch["primary_key"].as_array().unwrap().iter().map(|k| k.as_str().unwrap().into()).collect(),
                    rows: Vec::new(),
                };
                models.insert(t.clone(), m);
            } else if ch.get("dropped").is_some_and(|c| c == true) {
                models.remove(t);
            } else if ch.get("schema_changed").is_some_and(|c| c == true) {
                // the binlog has no rows for what ADD COLUMN ... DEFAULT fills in: take the table
                // as the server had it after the DDL (integration/README.md)
                let m = models.get_mut(t).unwrap();
                m.cols = cols(&ch["columns"]);
                m.pk = ch["primary_key"].as_array().unwrap().iter().map(|k| k.as_str().unwrap().into()).collect();
                let rows: Vec<Row> = ch["rows_after"].as_array().unwrap().iter().map(|r| m.exp_row(r)).collect();
                m.rows = rows;
                ddl_resets += 1;
            }
        }
        let mut touched = BTreeSet::new();
        while let Some(line) = lines.get(li) {
            if !line["gtid"].as_str().is_some_and(|g| gtids.contains(&g)) {
                break;
            }
            li += 1;
            let t = line["table"].as_str().unwrap();
            assert_eq!(line["database"], "sluice_it");
            touched.insert(t.to_string());
            let m = models.get_mut(t).unwrap_or_else(|| panic!("rows for {t} before it was created: {line}"));
            let at = format!("{} {t} at {}", tx["gtid"], line["position"]);
            match line["type"].as_str().unwrap() {
                "INSERT" => {
                    // a MINIMAL insert leaves out the columns the statement did not set: their
                    // default, NULL for every such column of workload.sql
                    let mut row: Row = m.cols.iter().map(|c| (c.name.clone(), None)).collect();
                    row.extend(m.sluice_image(&line["after"]));
                    m.rows.push(row);
                }
                kind => {
                    let before = m.sluice_image(&line["before"]);
                    match m.find(&before) {
                        None => failures.push(format!("{at}: {kind} of a row not in the model: {before:?}")),
                        Some(i) if kind == "DELETE" => {
                            m.rows.remove(i);
                        }
                        Some(i) => {
                            let after = m.sluice_image(&line["after"]);
                            m.rows[i].extend(after);
                        }
                    }
                }
            }
        }
        // per transaction: the tables with row changes, and each net change is in the model
        let row_tables: BTreeSet<String> = changes
            .iter()
            .filter(|(_, ch)| {
                ["inserted", "deleted", "updated"]
                    .iter()
                    .any(|k| ch.get(*k).is_some_and(|v| !v.as_array().unwrap().is_empty()))
            })
            .map(|(t, _)| t.clone())
            .collect();
        if row_tables != touched {
            failures
                .push(format!("{}: sluice has rows for {touched:?}, the server changed {row_tables:?}", tx["gtid"]));
        }
        for t in &row_tables {
            let m = &models[t];
            let ch = &changes[t];
            let present = ch["inserted"]
                .as_array()
                .unwrap()
                .iter()
                .chain(ch["updated"].as_array().unwrap().iter().map(|u| &u["after"]));
            for r in present {
                let want = m.exp_row(r);
                let comparable: Row =
                    want.into_iter().filter(|(_, v)| !v.as_deref().is_some_and(|s| s.starts_with("sha256:"))).collect();
                tx_values += comparable.len();
                if m.find(&comparable).is_none() {
                    failures.push(format!("{}: {t}: the row {comparable:?} is not in the replayed table", tx["gtid"]));
                }
            }
            if !m.pk.is_empty() {
                for r in ch["deleted"].as_array().unwrap() {
                    let key: Row = m.pk.iter().map(|k| (k.clone(), exp_canon(m.col(k), &r[k.as_str()]))).collect();
                    if m.find(&key).is_some() {
                        failures.push(format!("{}: {t}: deleted row {key:?} is still there", tx["gtid"]));
                    }
                }
            }
        }
    }
    assert_eq!(li, lines.len(), "sluice printed rows of transactions the recording does not have: {}", lines[li]);
    let mut values = 0;
    let finals = final_models();
    assert_eq!(
        finals.keys().collect::<Vec<_>>(),
        models.keys().collect::<Vec<_>>(),
        "the replayed tables differ from expected-final.json"
    );
    for (t, (fm, want)) in &finals {
        let m = &models[t];
        assert_eq!(
            m.cols.iter().map(|c| &c.name).collect::<Vec<_>>(),
            fm.cols.iter().map(|c| &c.name).collect::<Vec<_>>()
        );
        values += compare_rows(t, fm, want, &m.rows, &mut failures);
    }
    eprintln!(
        "json replay: {} row changes from sluice, {} transactions, {ddl_resets} DDL resets, {tx_values} transaction values and {values} final values compared, {} mismatches",
        lines.len(),
        txs["transactions"].as_array().unwrap().len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
    assert!(values >= 381 && tx_values >= 900, "too few values compared: {values} final, {tx_values} per transaction");
}

/// SELECT expression per column, giving the canonical form (see the module docs): text as
/// HEX of its utf8mb4 form (so tabs, newlines and NULL text survive `mariadb -B`).
fn select_table(server: &Server, db: &str, table: &str, m: &Model) -> Vec<Row> {
    let cols: Vec<(String, SelectAs)> = m
        .cols
        .iter()
        .map(|c| {
            let how = match (c.repr.as_str(), c.data_type.as_str()) {
                ("hex", _) => SelectAs::Hex,
                ("bit_uint", _) => SelectAs::BitUint,
                ("geometry", _) => SelectAs::Geometry,
                (_, "float") => SelectAs::Float,
                (_, "double") => SelectAs::Double,
                _ => SelectAs::Text,
            };
            (c.name.clone(), how)
        })
        .collect();
    server.select_exact(db, table, &cols)
}

#[test]
fn sql_replay_into_mariadb_equals_expected_final() {
    let Some(server) = Server::start("rt-sqlreplay", &[]) else { return };
    // The binlog's DDL (QUERY events other than BEGIN/COMMIT), from `--events`, is applied in
    // binlog order between the `--format sql` output of the stretches around it.
    let mut script = String::from("SET NAMES utf8mb4;\n");
    let mut ddl_count = 0;
    for f in binlogs() {
        let events =
            json_lines(&ok_stdout(&sluice(["dump".as_ref(), "--events".as_ref(), f.as_os_str()]), "dump --events"));
        let ddl: Vec<&Json> = events
            .iter()
            .filter(|e| e["data"].get("query").is_some() && e["data"].get("schema").is_some())
            .filter(|e| !matches!(e["data"]["query"].as_str().unwrap(), "BEGIN" | "COMMIT" | "ROLLBACK"))
            .collect();
        let mut start: Option<u64> = None;
        for i in 0..=ddl.len() {
            let mut args: Vec<String> = vec!["dump".into(), "--format".into(), "sql".into()];
            if let Some(s) = start {
                args.extend(["--start-position".into(), s.to_string()]);
            }
            if let Some(d) = ddl.get(i) {
                args.extend(["--stop-position".into(), d["position"]["offset"].to_string()]);
            }
            args.push(f.display().to_string());
            script.push_str(&ok_stdout(&sluice(&args), "dump --format sql"));
            if let Some(d) = ddl.get(i) {
                let schema = d["data"]["schema"].as_str().unwrap();
                let query = d["data"]["query"].as_str().unwrap();
                // the session's default database may be the one this statement creates
                if !schema.is_empty() && !query.to_ascii_uppercase().starts_with("CREATE DATABASE") {
                    script.push_str(&format!("USE `{schema}`;\n"));
                }
                script.push_str(d["data"]["query"].as_str().unwrap());
                script.push_str(";\n");
                start = Some(d["next_position"].as_u64().unwrap());
                ddl_count += 1;
            }
        }
    }
    server.sql_text(&script);
    let mut failures = Vec::new();
    let mut values = 0;
    let finals = final_models();
    let tables: Vec<String> = server
        .sql_text("SELECT table_name FROM information_schema.tables WHERE table_schema = 'sluice_it' ORDER BY 1")
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(tables, finals.keys().cloned().collect::<Vec<_>>());
    for (t, (m, want)) in &finals {
        let got = select_table(&server, "sluice_it", t, m);
        values += compare_rows(t, m, want, &got, &mut failures);
    }
    eprintln!("sql replay: {ddl_count} DDL statements, {values} values compared, {} mismatches", failures.len());
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
    assert!(values >= 381);
}

const FLASHBACK_SCHEMA: &str = "
CREATE DATABASE fb CHARACTER SET utf8mb4;
CREATE TABLE fb.orders (id INT PRIMARY KEY, customer VARCHAR(40) CHARACTER SET utf8mb4 NULL, total DECIMAL(12,2) NULL,
  placed DATETIME(6) NULL, note TEXT NULL, photo BLOB NULL, f DOUBLE NULL) ENGINE=InnoDB;
CREATE TABLE fb.events (seq BIGINT UNSIGNED NULL, kind VARCHAR(10) NULL, at TIMESTAMP(3) NULL DEFAULT NULL) ENGINE=InnoDB;
INSERT INTO fb.orders VALUES (1, 'ann', 10.50, '2024-01-01 10:00:00.000001', 'first', X'00FF', 1.5),
  (2, 'bé 😀', -0.01, NULL, NULL, NULL, NULL), (3, NULL, 99999999.99, '1999-12-31 23:59:59', 'tab\there', X'', -2.5e-300);
INSERT INTO fb.events VALUES (1, 'a', '2024-01-01 00:00:00.123'), (1, 'a', '2024-01-01 00:00:00.123'), (NULL, NULL, NULL);
";

const FLASHBACK_WORKLOAD: &str = "
SET time_zone = '+00:00';
INSERT INTO fb.orders VALUES (4, 'new 漢字', 1.00, NOW(6), 'n', X'0102', 0.1);
UPDATE fb.orders SET total = total * 2, note = CONCAT(IFNULL(note, ''), ' ✓') WHERE id IN (1, 2);
DELETE FROM fb.orders WHERE id = 3;
BEGIN;
UPDATE fb.orders SET customer = NULL, photo = REPEAT(X'AB', 3000) WHERE id = 1;
INSERT INTO fb.events VALUES (2, 'b', '2030-05-05 05:05:05.555');
DELETE FROM fb.events WHERE seq = 1 LIMIT 1;
UPDATE fb.events SET kind = 'null-seq' WHERE seq IS NULL;
COMMIT;
UPDATE fb.orders SET id = 40 WHERE id = 4;
DELETE FROM fb.events WHERE kind = 'b';
";

fn snapshot(server: &Server) -> BTreeMap<String, Vec<Row>> {
    let col = |n: &str, t: &str, r: &str| Col { name: n.into(), data_type: t.into(), repr: r.into() };
    let orders = Model {
        cols: vec![
            col("id", "int", "text"),
            col("customer", "varchar", "text"),
            col("total", "decimal", "text"),
            col("placed", "datetime", "text"),
            col("note", "text", "text"),
            col("photo", "blob", "hex"),
            col("f", "double", "text"),
        ],
        ..Model::default()
    };
    let events = Model {
        cols: vec![col("seq", "bigint", "text"), col("kind", "varchar", "text"), col("at", "timestamp", "text")],
        ..Model::default()
    };
    let mut s = BTreeMap::new();
    for (t, m) in [("orders", orders), ("events", events)] {
        let mut rows = select_table(server, "fb", t, &m);
        rows.sort_by_key(|r| format!("{r:?}"));
        s.insert(t.to_string(), rows);
    }
    s
}

#[test]
fn flashback_restores_the_snapshot_and_refuses_without_column_names() {
    let Some(server) = Server::start("rt-flashback", &[]) else { return };
    server.sql_text(FLASHBACK_SCHEMA);
    let before = snapshot(&server);
    let (file, pos) = server.binlog_path_position();
    server.sql_text(FLASHBACK_WORKLOAD);
    let changed = snapshot(&server);
    assert_ne!(before, changed, "the workload changed nothing?");
    let out = sluice(["dump", "--format", "flashback", "--start-position", &pos.to_string(), file.to_str().unwrap()]);
    let undo = ok_stdout(&out, "dump --format flashback");
    assert!(undo.contains("DELETE FROM `fb`.`orders`") && undo.contains("INSERT INTO `fb`.`events`"), "{undo}");
    // the same range read from the server: the same SQL, its character set and UTC time zone
    // included (a live dump once left the time zone out, so TIMESTAMPs moved by the session's
    // offset when applied)
    assert!(undo.starts_with("SET NAMES utf8mb4;\nSET time_zone = '+00:00';\n"), "{undo}");
    let (end_file, end) = server.binlog_path_position();
    assert_eq!(end_file, file, "the workload rotated the binlog");
    let name = file.file_name().unwrap().to_str().unwrap();
    let (url, pos_text, end_text) = (server.url("root"), pos.to_string(), end.to_string());
    let live = sluice([
        "dump",
        "--source",
        &url,
        "--tls",
        "disabled",
        "--format",
        "flashback",
        "--start-file",
        name,
        "--start-position",
        &pos_text,
        "--stop-position",
        &end_text,
    ]);
    assert_eq!(ok_stdout(&live, "dump --source --format flashback"), undo, "live and offline flashback differ");
    // applied by a client whose session is latin1 and not in UTC: the script sets both itself
    // (without SET NAMES, 'bé 😀' came back mangled)
    server.sql_text(&format!("SET NAMES latin1; SET time_zone = '+05:00';\n{undo}"));
    let after = snapshot(&server);
    assert_eq!(before, after, "flashback did not restore the snapshot;\nflashback SQL:\n{undo}");
    let n: usize = after.values().map(|rows| rows.len() * rows.first().map_or(0, BTreeMap::len)).sum();
    eprintln!("flashback: {} statements, {n} values back as in the snapshot", undo.lines().count());

    // binlog_row_image MINIMAL or NOBLOB: images without every column. SQL re-does such
    // changes (by key); a flashback cannot undo them (the old values are not in the binlog), and
    // once restored NULLs and matched an UPDATE's row by its changed columns: it refuses,
    // naming table, column and position (found by a hostile trial)
    server.sql_text("CREATE TABLE fb.partial (id INT PRIMARY KEY, a INT, note TEXT); INSERT INTO fb.partial VALUES (1, 5, 'keep'), (2, 7, 'important'), (3, 30, 'three')");
    for (image, sql) in [
        ("MINIMAL", "UPDATE fb.partial SET a = 6 WHERE id = 1"),
        ("MINIMAL", "DELETE FROM fb.partial WHERE id = 2"),
        ("NOBLOB", "DELETE FROM fb.partial WHERE id = 3"),
    ] {
        let (file, pos) = server.binlog_path_position();
        server.sql_text(&format!("SET SESSION binlog_row_image = '{image}'; {sql}"));
        let f = file.to_str().unwrap();
        let out = sluice(["dump", "--format", "flashback", "--start-position", &pos.to_string(), f]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(65),
            "{image} {sql}: a flashback of a partial image is unsupported input: {err}"
        );
        assert!(
            err.contains("fb.partial: the before image lacks column") && err.contains(&format!("{f} at ")),
            "{image} {sql}: {err}"
        );
        let redo = sluice(["dump", "--format", "sql", "--start-position", &pos.to_string(), f]);
        let redo = ok_stdout(&redo, "dump --format sql of a partial image");
        assert!(redo.contains("WHERE `id`="), "{image} {sql}: {redo}");
    }

    // binlog_row_metadata=MINIMAL: no column names, so no SQL that names columns
    server.sql_text("SET GLOBAL binlog_row_metadata = 'MINIMAL'");
    let (file, pos) = server.binlog_path_position();
    server.sql_text("INSERT INTO fb.orders (id) VALUES (77)");
    let out = sluice(["dump", "--format", "flashback", "--start-position", &pos.to_string(), file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(65), "flashback on a MINIMAL-metadata binlog is unsupported input: {err}");
    assert!(err.contains("fb.orders") && err.contains("binlog_row_metadata"), "{err}");
}

fn full_dump() -> Vec<Json> {
    let files = binlogs();
    json_lines(&ok_stdout(&sluice(["dump".as_ref(), files[0].as_os_str(), files[1].as_os_str()]), "sluice dump"))
}

fn without_file(mut v: Vec<Json>) -> Vec<Json> {
    for l in &mut v {
        l["position"].as_object_mut().unwrap().remove("file");
    }
    v
}

#[test]
fn cli_filters_windows_and_inputs() {
    let files = binlogs();
    let (f1, f2) = (files[0].to_str().unwrap(), files[1].to_str().unwrap());
    let all = full_dump();
    let count = |pred: &dyn Fn(&Json) -> bool| all.iter().filter(|l| pred(l)).count();
    let run = |args: &[&str]| json_lines(&ok_stdout(&sluice(args), &args.join(" ")));

    // --table / --database with wildcards
    let got = run(&["dump", "--table", "t_al*", f1, f2]);
    assert!(got.iter().all(|l| l["table"] == "t_alter"));
    assert_eq!(got.len(), count(&|l| l["table"] == "t_alter"));
    assert!(!got.is_empty());
    let got = run(&["dump", "--table", "sluice_it.t_nopk", "--table", "t_acc?unts", f1, f2]);
    assert_eq!(got.len(), count(&|l| l["table"] == "t_nopk" || l["table"] == "t_accounts"));
    assert!(got.iter().any(|l| l["table"] == "t_nopk") && got.iter().any(|l| l["table"] == "t_accounts"));
    assert_eq!(run(&["dump", "--database", "sluice_*", f1, f2]).len(), all.len());
    assert!(run(&["dump", "--database", "other*", f1, f2]).is_empty());

    // --start-position / --stop-position (offsets of the first / last file)
    let in_f1: Vec<&Json> = all.iter().filter(|l| l["position"]["file"] == f1).collect();
    let cut = in_f1[in_f1.len() / 2]["position"]["offset"].as_u64().unwrap();
    let got = run(&["dump", "--start-position", &cut.to_string(), f1]);
    assert_eq!(got.len(), in_f1.iter().filter(|l| l["position"]["offset"].as_u64().unwrap() >= cut).count());
    assert!(got.iter().all(|l| l["position"]["offset"].as_u64().unwrap() >= cut));
    let got = run(&["dump", "--stop-position", &cut.to_string(), f1]);
    assert_eq!(got.len(), in_f1.iter().filter(|l| l["position"]["offset"].as_u64().unwrap() < cut).count());

    // --start-datetime / --stop-datetime (UTC; the workload fixed its times with SET TIMESTAMP)
    let t = 1_700_000_300; // 2023-11-14 22:18:20 UTC: the MINIMAL section
    let got = run(&["dump", "--start-datetime", "2023-11-14 22:18:20", f1, f2]);
    assert_eq!(got.len(), count(&|l| l["ts"].as_u64().unwrap() >= t));
    assert!(!got.is_empty() && got.iter().all(|l| l["ts"].as_u64().unwrap() >= t));
    // --stop-datetime stops at the first event at or after the time, as mariadb-binlog does; in
    // the recording that is the FORMAT_DESCRIPTION itself (stamped with the server's start,
    // 2026, after the workload's SET TIMESTAMP times), so nothing is printed: checked against
    // `mariadb-binlog --stop-datetime`, which prints no rows either
    assert!(run(&["dump", "--stop-datetime", "2023-11-14T22:18:20Z", f1, f2]).is_empty());
    assert_eq!(run(&["dump", "--stop-datetime", "2099-01-01 00:00:00", f1, f2]).len(), all.len());

    // gzip and stdin give the same rows
    let dir = tempfile::tempdir().unwrap();
    let gz = dir.path().join("mysql-bin.000001.gz");
    let mut enc = flate2::write::GzEncoder::new(std::fs::File::create(&gz).unwrap(), flate2::Compression::fast());
    enc.write_all(&std::fs::read(f1).unwrap()).unwrap();
    enc.finish().unwrap();
    let plain = without_file(run(&["dump", f1]));
    assert_eq!(without_file(run(&["dump", gz.to_str().unwrap()])), plain);
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["dump", "-"])
        .stdin(std::fs::File::open(f1).unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take();
    let out = child.wait_with_output().unwrap();
    assert_eq!(without_file(json_lines(&ok_stdout(&out, "dump -"))), plain);

    // not a binlog: 65 naming the file; missing: 66
    let txt = recorded().join("manifest.json");
    let out = sluice(["dump".as_ref(), txt.as_os_str()]);
    assert_eq!(out.status.code(), Some(65), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("manifest.json"));
    let out = sluice(["dump", "/nonexistent/mysql-bin.000009"]);
    assert_eq!(out.status.code(), Some(66), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("mysql-bin.000009"));

    // truncated inside a rows event of a multi-statement transaction: 65 naming the offset,
    // after printing every row before it (also those of the transaction it cuts)
    let tx = in_f1.iter().filter(|l| l["gtid"] == "0-1-24").collect::<Vec<_>>();
    assert!(tx.len() >= 3);
    let bad = tx[2]["position"]["offset"].as_u64().unwrap();
    let bytes = std::fs::read(f1).unwrap();
    let cut_file = dir.path().join("mysql-bin.cut");
    std::fs::write(&cut_file, &bytes[..usize::try_from(bad).unwrap() + 30]).unwrap();
    let out = sluice(["dump".as_ref(), cut_file.as_os_str()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(65), "{err}");
    assert!(err.contains(&bad.to_string()) && err.contains("mysql-bin.cut"), "{err}");
    let printed = without_file(json_lines(&String::from_utf8(out.stdout).unwrap()));
    let before: Vec<Json> = without_file(
        in_f1.iter().filter(|l| l["position"]["offset"].as_u64().unwrap() < bad).map(|l| (*l).clone()).collect(),
    );
    let strip_xid = |v: Vec<Json>| -> Vec<Json> {
        v.into_iter()
            .map(|mut l| {
                l.as_object_mut().unwrap().remove("xid");
                l
            })
            .collect()
    };
    assert_eq!(strip_xid(printed), strip_xid(before), "the rows before the truncation point");
}
