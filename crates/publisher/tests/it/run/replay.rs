//! End to end over the whole recorded workload (`integration/sql/workload.sql`: every MariaDB
//! column type, DDL between row events of one table, a table without a primary key, a
//! multi-statement transaction, MINIMAL and NOBLOB row images, MyISAM, compressed events, binlog
//! rotation), plus two primary-key changes (FULL and MINIMAL image): MariaDB → `sluice run`
//! (`[output] partial_images = true`) → broker, read back by the independent [`TopicReader`]
//! (rdkafka read_committed + apache-avro with the writer schemas from the registry).
//!
//! 1. **Change sequence.** Per table, the topic's records (op, key, before, after, source
//!    position, GTID, transaction order, tombstones) equal the row changes `sluice dump` decodes
//!    from the same server's binlog files (dump is checked against mysql_common and
//!    `mariadb-binlog -vv` elsewhere), value by value in a canonical form per column type. The
//!    topics have one partition, so a topic's order is the table's whole change order.
//! 2. **Replay.** Applying each topic per key (c/u/r upsert, d and tombstones remove) gives
//!    exactly the rows `SELECT` returns, every column of every row.
//! 3. **Partial images are not skipped silently.** The workload's MINIMAL/NOBLOB rows need
//!    `[output] partial_images = true`; a second instance without it must stop with an error
//!    naming the table, the position and both remedies, and must not publish that row.
//!
//! Canonical forms (one string per value, `None` for NULL), for the three sides:
//!
//! | column | Avro (topic) | dump JSON | SELECT (time_zone +00:00) | canonical |
//! |---|---|---|---|---|
//! | integers | int / long; BIGINT UNSIGNED decimal(20,0) | number or string | text | digits |
//! | DECIMAL(p,s) | decimal bytes (unscaled) | string | text | digits with `s` decimals |
//! | FLOAT / DOUBLE | float / double | number | shortest text | parsed, Rust's text, `0` for ±0 |
//! | DATE | date (days) or the zero-date string | `2024-02-29` | `2024-02-29` | that text |
//! | TIME(fsp) | long micros (`sluice.duration-micros`) | `-00:00:01.500` | same | `[-]HH:MM:SS[.fsp digits]` |
//! | DATETIME(fsp) | local-timestamp-micros or zero-date string | ISO, `T` | `2024-02-29 23:59:59.99` | space, fsp digits |
//! | TIMESTAMP(fsp) | timestamp-micros (UTC) or zero-date string | ISO with `Z` | UTC text | as DATETIME |
//! | YEAR | int (0 = 0000) | number | `2024`, `0000` | 4 digits |
//! | text, ENUM, JSON (MariaDB: LONGTEXT) | string / enum symbol | string | text | the text, exactly |
//! | SET | array of names | `red,blue` | `red,blue` | names joined by `,` |
//! | binary strings | bytes | base64 | `HEX(col)` | upper-case hex |
//! | BIT(1) / BIT(n) | boolean / big-endian bytes | number | `col+0` | decimal digits |
//! | GEOMETRY | `{srid, wkb}` | `{srid, wkb}` | `ST_SRID:HEX(col)` | `srid:HEX(srid LE + wkb)` |
//! | UUID / INET6 | 16 bytes | base64 | text | 8-4-4-4-12 hex / RFC 5952 |

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use apache_avro::types::Value as Avro;
use base64::Engine as _;
use serde_json::Value as Json;
use support::kafka::{start_sluice, unwrap_union, wait_for, Record, Services, TopicReader};
use support::{float_canon, repo, SelectAs, Server};

const DB: &str = "sluice_it";

/// A row (or key, or image): column → canonical value.
type Row = BTreeMap<String, Option<String>>;

/// How a column's values are canonicalised.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Int,
    Decimal { scale: u32 },
    Float,
    Double,
    Date,
    Time { fsp: u32 },
    DateTime { fsp: u32 },
    Year,
    Text,
    Set,
    Hex,
    Bit,
    Geometry,
    Uuid,
    Inet6,
}

/// The table's columns (as of the end of the workload) and primary key.
#[derive(Debug, Default)]
struct Table {
    cols: Vec<(String, Kind)>,
    pk: Vec<String>,
}

impl Table {
    fn kind(&self, col: &str) -> Kind {
        // a column dropped by the workload's DDL (`t_alter.a`, a VARCHAR) is no longer in
        // information_schema: its values are compared as text
        self.cols.iter().find(|(n, _)| n == col).map_or(Kind::Text, |(_, k)| *k)
    }
}

fn kind_of(data_type: &str, scale: u32, fsp: u32) -> Kind {
    match data_type {
        "tinyint" | "smallint" | "mediumint" | "int" | "bigint" => Kind::Int,
        "decimal" => Kind::Decimal { scale },
        "float" => Kind::Float,
        "double" => Kind::Double,
        "date" => Kind::Date,
        "time" => Kind::Time { fsp },
        "datetime" | "timestamp" => Kind::DateTime { fsp },
        "year" => Kind::Year,
        "set" => Kind::Set,
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => Kind::Hex,
        "bit" => Kind::Bit,
        "geometry" | "point" | "linestring" | "polygon" | "multipoint" | "multilinestring" | "multipolygon"
        | "geometrycollection" => Kind::Geometry,
        "uuid" => Kind::Uuid,
        "inet6" => Kind::Inet6,
        _ => Kind::Text,
    }
}

fn tables(server: &Server) -> BTreeMap<String, Table> {
    let mut out: BTreeMap<String, Table> = BTreeMap::new();
    let rows = server.sql(&format!(
        "SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE, IFNULL(NUMERIC_SCALE, 0), IFNULL(DATETIME_PRECISION, 0), COLUMN_KEY
         FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{DB}' ORDER BY TABLE_NAME, ORDINAL_POSITION"
    ));
    for r in rows {
        let t = out.entry(r[0].clone()).or_default();
        t.cols.push((r[1].clone(), kind_of(&r[2], r[3].parse().unwrap(), r[4].parse().unwrap())));
        if r[5] == "PRI" {
            t.pk.push(r[1].clone());
        }
    }
    out
}

// ------------------------------------------------------------------------------ canonical forms

fn hex_upper(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

/// Two's-complement big-endian bytes (Avro decimal) as decimal text with `scale` decimals.
fn decimal_text(bytes: &[u8], scale: u32) -> String {
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    let mut mag: Vec<u8> = bytes.to_vec();
    if negative {
        // magnitude = two's complement negated: invert, add one
        for b in &mut mag {
            *b = !*b;
        }
        for b in mag.iter_mut().rev() {
            let (v, carry) = b.overflowing_add(1);
            *b = v;
            if !carry {
                break;
            }
        }
    }
    let mut digits = Vec::new();
    while mag.iter().any(|&b| b != 0) {
        let mut rem = 0u32;
        for b in &mut mag {
            let cur = (rem << 8) | u32::from(*b);
            *b = u8::try_from(cur / 10).unwrap();
            rem = cur % 10;
        }
        digits.push(char::from(b'0' + u8::try_from(rem).unwrap()));
    }
    let scale = usize::try_from(scale).unwrap();
    while digits.len() <= scale {
        digits.push('0');
    }
    digits.reverse();
    let s: String = digits.into_iter().collect();
    let (int, frac) = s.split_at(s.len() - scale);
    let sign = if negative { "-" } else { "" };
    if scale == 0 {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    }
}

/// Days since 1970-01-01 as `YYYY-MM-DD` (proleptic Gregorian).
fn civil(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

fn fraction(micros: i64, fsp: u32) -> String {
    if fsp == 0 {
        String::new()
    } else {
        format!(".{:06}", micros)[..=usize::try_from(fsp).unwrap()].to_string()
    }
}

/// Microseconds since the epoch (UTC, or local wall-clock time) as MariaDB prints them.
fn datetime_text(us: i64, fsp: u32) -> String {
    let secs = us.div_euclid(1_000_000);
    let frac = us.rem_euclid(1_000_000);
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    format!("{} {:02}:{:02}:{:02}{}", civil(days), sod / 3600, sod / 60 % 60, sod % 60, fraction(frac, fsp))
}

/// Signed TIME microseconds as MariaDB prints them.
fn time_text(us: i64, fsp: u32) -> String {
    let sign = if us < 0 { "-" } else { "" };
    let a = us.unsigned_abs();
    let secs = a / 1_000_000;
    let frac = i64::try_from(a % 1_000_000).unwrap();
    format!("{sign}{:02}:{:02}:{:02}{}", secs / 3600, secs / 60 % 60, secs % 60, fraction(frac, fsp))
}

fn uuid_text(b: &[u8]) -> String {
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

fn inet6_text(b: &[u8]) -> String {
    let a: [u8; 16] = b.try_into().unwrap_or_else(|_| panic!("INET6 of {} bytes", b.len()));
    std::net::Ipv6Addr::from(a).to_string()
}

fn geometry_text(srid: u64, wkb: &[u8]) -> String {
    let mut all = u32::try_from(srid).unwrap().to_le_bytes().to_vec();
    all.extend_from_slice(wkb);
    format!("{srid}:{}", hex_upper(&all))
}

/// An Avro value of a column as the topic holds it, canonical.
fn avro_canon(kind: Kind, v: &Avro) -> Result<Option<String>, String> {
    let v = unwrap_union(v);
    let bad = || Err(format!("Avro value {v:?} for a {kind:?} column"));
    Ok(Some(match (kind, v) {
        (_, Avro::Null) => return Ok(None),
        (Kind::Year, Avro::Int(y)) => format!("{y:04}"),
        (Kind::Time { fsp }, Avro::Long(us)) => time_text(*us, fsp),
        (Kind::Int | Kind::Text | Kind::Bit, Avro::Int(i)) => i.to_string(),
        (Kind::Int | Kind::Text, Avro::Long(i)) => i.to_string(),
        // BIGINT UNSIGNED: decimal(20, 0)
        (Kind::Int, Avro::Decimal(d)) => decimal_text(&Vec::<u8>::try_from(d).map_err(|e| e.to_string())?, 0),
        (Kind::Decimal { scale }, Avro::Decimal(d)) => {
            decimal_text(&Vec::<u8>::try_from(d).map_err(|e| e.to_string())?, scale)
        }
        (Kind::Float, Avro::Float(f)) => float_canon(kind == Kind::Float, &f.to_string()),
        (Kind::Double, Avro::Double(f)) => float_canon(kind == Kind::Float, &f.to_string()),
        (Kind::Date, Avro::Date(days)) => civil(i64::from(*days)),
        (Kind::DateTime { fsp }, Avro::TimestampMicros(us) | Avro::LocalTimestampMicros(us)) => datetime_text(*us, fsp),
        // zero dates: the union's string branch holds MySQL's text (schemas/README.md)
        (Kind::Date | Kind::DateTime { .. }, Avro::String(s)) => s.clone(),
        (Kind::Text, Avro::String(s)) => s.clone(),
        (Kind::Text, Avro::Enum(_, s)) => s.clone(),
        (Kind::Set, Avro::Array(items)) => {
            let names: Result<Vec<String>, String> = items
                .iter()
                .map(|i| match i {
                    Avro::String(s) => Ok(s.clone()),
                    other => Err(format!("SET member {other:?}")),
                })
                .collect();
            names?.join(",")
        }
        (Kind::Hex, Avro::Bytes(b)) => hex_upper(b),
        (Kind::Bit, Avro::Boolean(b)) => u8::from(*b).to_string(),
        (Kind::Bit, Avro::Bytes(b)) => {
            if b.len() > 8 {
                return bad();
            }
            b.iter().fold(0u64, |acc, x| acc << 8 | u64::from(*x)).to_string()
        }
        (Kind::Uuid, Avro::Bytes(b)) => uuid_text(b),
        (Kind::Inet6, Avro::Bytes(b)) => inet6_text(b),
        (Kind::Geometry, Avro::Record(f)) => match (&f[0], &f[1]) {
            ((s, Avro::Long(srid)), (w, Avro::Bytes(wkb))) if s == "srid" && w == "wkb" => {
                geometry_text(u64::try_from(*srid).unwrap(), wkb)
            }
            _ => return bad(),
        },
        _ => return bad(),
    }))
}

fn scalar_text(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        Json::Number(n) => n.to_string(),
        other => panic!("unexpected value {other}"),
    }
}

/// A value of a `sluice dump` JSON line, canonical.
fn dump_canon(kind: Kind, v: &Json) -> Option<String> {
    if v.is_null() {
        return None;
    }
    let s = |v: &Json| v.as_str().unwrap_or_else(|| panic!("{kind:?} as {v}")).to_string();
    Some(match kind {
        Kind::Hex => hex_upper(&b64(&s(v))),
        Kind::Geometry => geometry_text(v["srid"].as_u64().unwrap(), &b64(v["wkb"].as_str().unwrap())),
        Kind::Uuid => uuid_text(&b64(&s(v))),
        Kind::Inet6 => inet6_text(&b64(&s(v))),
        Kind::Float | Kind::Double => float_canon(kind == Kind::Float, &scalar_text(v)),
        Kind::DateTime { .. } => s(v).replace('T', " ").trim_end_matches('Z').to_string(),
        Kind::Year => format!("{:04}", v.as_u64().unwrap()),
        _ => scalar_text(v),
    })
}

/// SELECT expression per column giving its canonical form (text as HEX of its utf8mb4 form, so
/// tabs, newlines and backslashes survive `mariadb -B`).
fn select_rows(server: &Server, table: &str, t: &Table) -> Vec<Row> {
    let cols: Vec<(String, SelectAs)> = t
        .cols
        .iter()
        .map(|(n, k)| {
            let how = match k {
                Kind::Hex => SelectAs::Hex,
                Kind::Bit => SelectAs::BitUint,
                Kind::Geometry => SelectAs::Geometry,
                Kind::Float => SelectAs::Float,
                Kind::Double => SelectAs::Double,
                _ => SelectAs::Text,
            };
            (n.clone(), how)
        })
        .collect();
    server.select_exact(DB, table, &cols)
}

fn clip(v: Option<&Option<String>>) -> String {
    match v {
        None => "(absent)".into(),
        Some(None) => "NULL".into(),
        Some(Some(s)) if s.chars().count() > 100 => {
            format!("{}... ({} chars)", s.chars().take(100).collect::<String>(), s.chars().count())
        }
        Some(Some(s)) => format!("{s:?}"),
    }
}

fn key_text(k: &Option<Row>) -> String {
    match k {
        None => "(null key)".into(),
        Some(r) => r.iter().map(|(c, v)| format!("{c}={}", clip(Some(v)))).collect::<Vec<_>>().join(","),
    }
}

// ------------------------------------------------------------------------------ the two sides

/// Where a change is in the binlog: (file name, offset of the rows event, row index in it,
/// event time in seconds, GTID).
type Source = (String, u64, u64, u64, String);

/// One record as the change sequence sees it.
#[derive(Debug, Clone, PartialEq)]
struct Change {
    /// `c`, `u`, `d`, `r` or `tombstone`.
    op: String,
    key: Option<Row>,
    before: Option<Row>,
    after: Option<Row>,
    /// None for tombstones.
    source: Option<Source>,
    /// (transaction id, total order, order within the table).
    transaction: Option<(String, i64, i64)>,
}

fn dump_image(t: &Table, img: &Json) -> Option<Row> {
    img.as_object().map(|o| o.iter().map(|(k, v)| (k.clone(), dump_canon(t.kind(k), v))).collect())
}

/// The key of an image (the before image fills key columns a MINIMAL after image lacks).
fn key_of(t: &Table, img: &Row, fill: Option<&Row>) -> Option<Row> {
    if t.pk.is_empty() {
        return None;
    }
    Some(
        t.pk.iter()
            .map(|k| {
                let v = img.get(k).or_else(|| fill.and_then(|f| f.get(k)));
                (k.clone(), v.unwrap_or_else(|| panic!("key column {k} in neither image")).clone())
            })
            .collect(),
    )
}

/// The records `sluice run` must have written for the dump's row changes of table `name`:
/// inserts `c`, updates `u`, deletes `d` plus a tombstone (keyed tables), a primary-key change
/// `d` + tombstone + `c`. The transaction orders count row changes (a key change is one) over
/// all tables of the transaction, and within the table.
fn expected_changes(lines: &[Json], tables: &BTreeMap<String, Table>) -> BTreeMap<String, Vec<Change>> {
    let mut out: BTreeMap<String, Vec<Change>> = BTreeMap::new();
    let mut tx = (String::new(), 0i64, BTreeMap::<String, i64>::new());
    for l in lines {
        let name = l["table"].as_str().unwrap().to_string();
        let t = &tables[&name];
        let gtid = l["gtid"].as_str().unwrap().to_string();
        if tx.0 != gtid {
            tx = (gtid.clone(), 0, BTreeMap::new());
        }
        tx.1 += 1;
        let per_table = tx.2.entry(name.clone()).or_insert(0);
        *per_table += 1;
        let file = Path::new(l["position"]["file"].as_str().unwrap()).file_name().unwrap().to_string_lossy().into();
        let source = Some((
            file,
            l["position"]["offset"].as_u64().unwrap(),
            l["position"]["row"].as_u64().unwrap(),
            l["ts"].as_u64().unwrap(),
            gtid.clone(),
        ));
        let transaction = Some((gtid.clone(), tx.1, *per_table));
        let (before, after) = (dump_image(t, &l["before"]), dump_image(t, &l["after"]));
        let change = |op: &str, key: Option<Row>, before: Option<Row>, after: Option<Row>| Change {
            op: op.into(),
            key,
            before,
            after,
            source: source.clone(),
            transaction: transaction.clone(),
        };
        let tombstone = |key: &Option<Row>| Change {
            op: "tombstone".into(),
            key: key.clone(),
            before: None,
            after: None,
            source: None,
            transaction: None,
        };
        let v = out.entry(name).or_default();
        match l["type"].as_str().unwrap() {
            "INSERT" => {
                let k = key_of(t, after.as_ref().unwrap(), None);
                v.push(change("c", k, None, after));
            }
            "DELETE" => {
                let k = key_of(t, before.as_ref().unwrap(), None);
                v.push(change("d", k.clone(), before, None));
                if k.is_some() {
                    v.push(tombstone(&k));
                }
            }
            "UPDATE" => {
                let kb = key_of(t, before.as_ref().unwrap(), None);
                let ka = key_of(t, after.as_ref().unwrap(), before.as_ref());
                if kb == ka {
                    v.push(change("u", kb, before, after));
                } else {
                    v.push(change("d", kb.clone(), before, None));
                    v.push(tombstone(&kb));
                    v.push(change("c", ka, None, after));
                }
            }
            other => panic!("dump line of type {other}"),
        }
    }
    out
}

fn field<'a>(r: &'a Avro, name: &str) -> Option<&'a Avro> {
    match unwrap_union(r) {
        Avro::Record(f) => f.iter().find(|(k, _)| k == name).map(|(_, v)| unwrap_union(v)),
        _ => None,
    }
}

fn long(v: Option<&Avro>) -> i64 {
    match v {
        Some(Avro::Long(n)) => *n,
        Some(Avro::Int(n)) => i64::from(*n),
        other => panic!("expected a long, got {other:?}"),
    }
}

fn string(v: Option<&Avro>) -> String {
    match v {
        Some(Avro::String(s)) => s.clone(),
        other => panic!("expected a string, got {other:?}"),
    }
}

/// A topic record as a [`Change`]; images without the columns `__absent` names (and without
/// `__absent`). Conversion problems go to `failures`.
fn topic_change(t: &Table, table: &str, r: &Record, failures: &mut Vec<String>) -> Change {
    let mut canon = |img: BTreeMap<String, Avro>| -> Row {
        let absent: BTreeSet<String> = match img.get("__absent") {
            Some(Avro::Array(a)) => a
                .iter()
                .map(|x| match x {
                    Avro::String(s) => s.clone(),
                    other => panic!("__absent item {other:?}"),
                })
                .collect(),
            None => BTreeSet::new(),
            other => panic!("__absent {other:?}"),
        };
        img.into_iter()
            .filter(|(k, _)| k != "__absent" && !absent.contains(k))
            .map(|(k, v)| {
                let c = avro_canon(t.kind(&k), &v).unwrap_or_else(|e| {
                    failures.push(format!("{table} offset {}: column {k}: {e}", r.offset));
                    Some(format!("{v:?}"))
                });
                (k, c)
            })
            .collect()
    };
    let key = r.key.as_ref().map(|k| match unwrap_union(k) {
        Avro::Record(f) => f.iter().map(|(c, v)| (c.clone(), v.clone())).collect(),
        other => panic!("{table}: key {other:?}"),
    });
    let key = key.map(&mut canon);
    let Some(value) = &r.value else {
        return Change { op: "tombstone".into(), key, before: None, after: None, source: None, transaction: None };
    };
    let src = field(value, "source").unwrap();
    assert_eq!(string(field(src, "db")), DB);
    assert_eq!(string(field(src, "table")), table);
    let gtid = match field(src, "gtid") {
        Some(Avro::String(g)) => g.clone(),
        other => panic!("source.gtid {other:?}"),
    };
    let ts_ms = long(field(src, "ts_ms"));
    assert_eq!(ts_ms % 1000, 0, "source.ts_ms is the event header's second");
    let source = Some((
        string(field(src, "file")),
        u64::try_from(long(field(src, "pos"))).unwrap(),
        u64::try_from(long(field(src, "row"))).unwrap(),
        u64::try_from(ts_ms / 1000).unwrap(),
        gtid,
    ));
    let transaction = field(value, "transaction")
        .map(|tx| (string(field(tx, "id")), long(field(tx, "total_order")), long(field(tx, "data_collection_order"))));
    Change {
        op: r.op().unwrap().to_string(),
        key,
        before: r.image("before").map(&mut canon),
        after: r.image("after").map(&mut canon),
        source,
        transaction,
    }
}

/// Compares two images column by column; returns the number of values compared.
fn compare_images(what: &str, want: &Option<Row>, got: &Option<Row>, failures: &mut Vec<String>) -> usize {
    match (want, got) {
        (None, None) => 0,
        (Some(w), Some(g)) => {
            let cols: BTreeSet<&String> = w.keys().chain(g.keys()).collect();
            for c in &cols {
                if w.get(*c) != g.get(*c) {
                    failures.push(format!("{what}: column {c}: dump {}, topic {}", clip(w.get(*c)), clip(g.get(*c))));
                }
            }
            cols.len()
        }
        _ => {
            failures.push(format!("{what}: dump image {want:?}, topic image {got:?}"));
            0
        }
    }
}

// ------------------------------------------------------------------------------ replay

/// Applies a topic's records to rows: keyed tables upsert by key (`c`/`u`/`r`: the after image,
/// merged into the row when the image is partial, so an absent column is "unchanged") and
/// remove on `d` and tombstones; a table without a key finds the row equal to the before image.
///
/// A primary-key change is `d` (old key), tombstone, `c` (new key), all from one row change
/// (same `source` position and row). Under MINIMAL its after image holds only the changed
/// columns, so the `c` lists the others in `__absent`: they are the old row's, unchanged
/// (schemas/README.md, "MINIMAL and NOBLOB row images").
fn replay(table: &str, t: &Table, changes: &[Change], failures: &mut Vec<String>) -> Vec<Row> {
    let mut keyed: BTreeMap<String, Row> = BTreeMap::new();
    let mut unkeyed: Vec<Row> = Vec::new();
    let mut deleted: Option<(Option<Source>, Row)> = None;
    for (i, ch) in changes.iter().enumerate() {
        let at = format!("{table} record {i} (key {})", key_text(&ch.key));
        let k = ch.key.as_ref().map(|k| format!("{k:?}"));
        match (ch.op.as_str(), k) {
            ("c" | "r", Some(k)) => {
                let mut row: Row = match deleted.take() {
                    // the second half of a key change: the columns not logged are unchanged
                    Some((source, old)) if source == ch.source => old,
                    // a MINIMAL insert logs only the columns the statement set; every other
                    // column of workload.sql's tables defaults to NULL
                    _ => t.cols.iter().map(|(c, _)| (c.clone(), None)).collect(),
                };
                row.extend(ch.after.clone().unwrap());
                keyed.insert(k, row);
            }
            ("u", Some(k)) => match keyed.get_mut(&k) {
                Some(row) => row.extend(ch.after.clone().unwrap()),
                None => failures.push(format!("{at}: update of a key the replay does not have")),
            },
            ("d", Some(k)) => match keyed.remove(&k) {
                Some(old) => deleted = Some((ch.source.clone(), old)),
                None => failures.push(format!("{at}: delete of a key the replay does not have")),
            },
            ("tombstone", Some(k)) => {
                keyed.remove(&k);
            }
            ("c" | "r", None) => {
                let mut row: Row = t.cols.iter().map(|(c, _)| (c.clone(), None)).collect();
                row.extend(ch.after.clone().unwrap());
                unkeyed.push(row);
            }
            ("u" | "d", None) => {
                let before = ch.before.as_ref().unwrap();
                match unkeyed.iter().position(|r| before.iter().all(|(c, v)| r.get(c) == Some(v))) {
                    None => failures.push(format!("{at}: {} of a row the replay does not have: {before:?}", ch.op)),
                    Some(p) if ch.op == "d" => {
                        unkeyed.remove(p);
                    }
                    Some(p) => unkeyed[p].extend(ch.after.clone().unwrap()),
                }
            }
            (op, None) => failures.push(format!("{at}: {op} without a key")),
            (op, Some(_)) => failures.push(format!("{at}: unknown op {op}")),
        }
    }
    keyed.into_values().chain(unkeyed).collect()
}

/// The latest value schema's field `column` of `topic`: its default must be null, so a
/// consumer resolving an older record (written before DDL added the column) reads NULL.
fn latest_default_is_null(registry: &str, topic: &str, column: &str) -> bool {
    let url = format!("{registry}/subjects/{topic}-value/versions/latest");
    let out = Command::new("curl").args(["-sf", &url]).output().unwrap();
    assert!(out.status.success(), "GET {url} failed");
    let v: Json = serde_json::from_slice(&out.stdout).unwrap();
    let schema: Json = serde_json::from_str(v["schema"].as_str().unwrap()).unwrap();
    let before = schema["fields"].as_array().unwrap().iter().find(|f| f["name"] == "before").unwrap();
    let row = &before["type"][1];
    row["fields"].as_array().unwrap().iter().any(|f| f["name"] == column && f.get("default") == Some(&Json::Null))
}

/// Compares the replayed rows of a table with SELECT's, row by row (by key; whole rows for a
/// table without one), every column; returns the number of values compared.
fn compare_replay(
    server: &Server,
    registry: &str,
    table: &str,
    t: &Table,
    replayed: Vec<Row>,
    failures: &mut Vec<String>,
) -> usize {
    let topic = format!("sluice.{DB}.{table}");
    let key = |r: &Row| -> String {
        if t.pk.is_empty() {
            format!("{r:?}")
        } else {
            t.pk.iter().map(|k| format!("{k}={}", clip(r.get(k)))).collect::<Vec<_>>().join(",")
        }
    };
    // Project the replayed rows onto the table's current columns, as a consumer reading with
    // the latest schema does (Avro schema resolution): a column DDL dropped is ignored, a
    // column DDL added after the row's last record gets the field's default, null (checked
    // against the registered schema).
    let mut got: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    for r in replayed {
        let mut p = Row::new();
        for (c, _) in &t.cols {
            let v = match r.get(c) {
                Some(v) => v.clone(),
                None => {
                    if !latest_default_is_null(registry, &topic, c) {
                        failures.push(format!("{table}: field {c} has no null default in the latest schema"));
                    }
                    None
                }
            };
            p.insert(c.clone(), v);
        }
        got.entry(key(&p)).or_default().push(p);
    }
    let mut want: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    for r in select_rows(server, table, t) {
        want.entry(key(&r)).or_default().push(r);
    }
    let mut n = 0;
    for k in want.keys().chain(got.keys()).collect::<BTreeSet<_>>() {
        let (w, g) = (want.get(k).map_or(&[][..], Vec::as_slice), got.get(k).map_or(&[][..], Vec::as_slice));
        if w.len() != g.len() {
            failures.push(format!("{table} key {k}: SELECT has {} rows, the replay {}", w.len(), g.len()));
            continue;
        }
        for (a, b) in w.iter().zip(g) {
            for (c, _) in &t.cols {
                n += 1;
                if a.get(c) != b.get(c) {
                    failures.push(format!(
                        "{table} key {k}: column {c}: SELECT {}, replay {}",
                        clip(a.get(c)),
                        clip(b.get(c))
                    ));
                }
            }
        }
    }
    n
}

// ------------------------------------------------------------------------------ the scenario

/// Runs workload.sql: the parts between `-- @reconnect` directives each on a new connection
/// (the file's own session settings are repeated after each directive).
fn run_workload(server: &Server) {
    let sql = std::fs::read_to_string(repo().join("integration/sql/workload.sql")).unwrap();
    let mut part = String::new();
    for line in sql.lines() {
        if line.trim() == "-- @reconnect" {
            server.sql_text(&part);
            part.clear();
        } else {
            part.push_str(line);
            part.push('\n');
        }
    }
    server.sql_text(&part);
    // what workload.sql lacks: primary-key changes, with a FULL and a MINIMAL row image (the
    // after image then holds the new key only); then a last marker row
    server.sql_text(&format!(
        "SET time_zone = '+00:00'; SET TIMESTAMP = 1700000800; USE {DB};
         UPDATE t_accounts SET id = 40 WHERE id = 4;
         SET SESSION binlog_row_image = 'MINIMAL';
         UPDATE t_alter SET id = 20 WHERE id = 2;
         SET SESSION binlog_row_image = 'FULL';
         INSERT INTO t_done VALUES (2);"
    ));
}

fn show_failures(what: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{what}: {} mismatches (first 60):\n{}",
        failures.len(),
        failures.iter().take(60).cloned().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn run_publishes_the_workload_and_the_topics_replay_to_the_tables() {
    let started = Instant::now();
    let Some(services) = Services::start("run-replay", &[]) else { return };
    let (config, log) = services.config("replay", "", "[output]\npartial_images = true\n");
    // one partition: a topic's order is the table's whole change order
    let text = std::fs::read_to_string(&config).unwrap().replace("partitions = 2", "partitions = 1");
    assert!(text.contains("partitions = 1") && text.contains("partial_images = true"), "{text}");
    std::fs::write(&config, &text).unwrap();
    // the same without partial_images: another source name, replica id and topic prefix
    let strict_config = config.with_file_name("strict.toml");
    let strict_log = config.with_file_name("strict.log");
    let _ = std::fs::remove_file(&strict_log);
    std::fs::write(
        &strict_config,
        text.replace("partial_images = true", "")
            .replace("name = \"replay\"", "name = \"strict\"\nserver_id = 51002")
            .replace("[kafka]", "[kafka]\ntopic_prefix = \"strict\""),
    )
    .unwrap();

    // publishing while the workload runs: its DDL comes between row events
    let mut child = start_sluice(&config, &log);
    let mut strict = start_sluice(&strict_config, &strict_log);
    run_workload(&services.mariadb);
    let mut reader = TopicReader::new(&services);
    eprintln!("services and workload: {:.1} s", started.elapsed().as_secs_f64());
    // t_done's second insert is the last row change
    wait_for(
        90,
        || {
            if let Ok(Some(st)) = child.0.try_wait() {
                panic!("sluice run exited ({st}):\n{}", std::fs::read_to_string(&log).unwrap_or_default());
            }
            reader.read(&format!("sluice.{DB}.t_done")).len() == 2
        },
        "the last change",
        &log,
    );
    eprintln!("published: {:.1} s", started.elapsed().as_secs_f64());

    // ---- the reference: `sluice dump` of the server's binlog files
    let datadir = services.mariadb.datadir();
    let files: Vec<String> =
        services.mariadb.column("SHOW BINARY LOGS").iter().map(|f| datadir.join(f).display().to_string()).collect();
    let mut args = vec!["dump".to_string()];
    args.extend(files);
    let dump = support::sluice(&args.iter().map(String::as_str).collect::<Vec<_>>()).ok();
    let lines: Vec<Json> = dump.rows().into_iter().filter(|l| l["database"] == DB).collect();
    let tables = tables(&services.mariadb);
    let expected = expected_changes(&lines, &tables);
    assert_eq!(
        expected.keys().collect::<Vec<_>>(),
        tables.keys().collect::<Vec<_>>(),
        "every table of the workload has row changes"
    );

    // ---- (a) the change sequence, per table
    let mut failures = Vec::new();
    let (mut records, mut values) = (0, 0);
    let mut topics: BTreeMap<String, Vec<Change>> = BTreeMap::new();
    for (name, want) in &expected {
        let t = &tables[name];
        let got: Vec<Change> = reader
            .read(&format!("sluice.{DB}.{name}"))
            .iter()
            .map(|r| topic_change(t, name, r, &mut failures))
            .collect();
        records += got.len();
        if got.len() != want.len() {
            failures.push(format!("{name}: {} records in the topic, {} expected from the dump", got.len(), want.len()));
        }
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            let at = format!("{name} record {i} (key {}, {:?})", key_text(&w.key), w.source);
            if (&w.op, &w.key, &w.source, &w.transaction) != (&g.op, &g.key, &g.source, &g.transaction) {
                failures.push(format!(
                    "{at}: dump {} {} {:?} {:?}, topic {} {} {:?} {:?}",
                    w.op,
                    key_text(&w.key),
                    w.source,
                    w.transaction,
                    g.op,
                    key_text(&g.key),
                    g.source,
                    g.transaction
                ));
            }
            values += compare_images(&format!("{at} before"), &w.before, &g.before, &mut failures);
            values += compare_images(&format!("{at} after"), &w.after, &g.after, &mut failures);
        }
        topics.insert(name.clone(), got);
    }
    eprintln!(
        "change sequence: {} tables, {} row changes in the dump, {records} records, {values} values compared",
        expected.len(),
        lines.len()
    );
    show_failures("change sequence", &failures);

    // ---- (b) the replay equals SELECT
    let mut replayed_values = 0;
    for (name, t) in &tables {
        let rows = replay(name, t, &topics[name], &mut failures);
        replayed_values += compare_replay(&services.mariadb, &services.registry, name, t, rows, &mut failures);
    }
    eprintln!("replay: {} tables, {replayed_values} values compared with SELECT", tables.len());
    show_failures("replay", &failures);
    assert!(records >= 79 && values >= 1100 && replayed_values >= 381, "too little compared");
    // every kind of column had non-NULL values in the comparison
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for (name, changes) in &expected {
        for img in changes.iter().flat_map(|c| [&c.before, &c.after]).flatten() {
            for (col, v) in img {
                if v.is_some() {
                    let k = format!("{:?}", tables[name].kind(col));
                    *by_kind.entry(k.split([' ', '{']).next().unwrap().to_string()).or_default() += 1;
                }
            }
        }
    }
    eprintln!("non-NULL values compared per kind: {by_kind:?}");
    assert_eq!(by_kind.len(), 15, "a kind of column without values: {by_kind:?}");
    assert!(
        expected.values().flatten().filter(|c| c.op == "tombstone").count() >= 8,
        "the deletes and the two key changes have tombstones"
    );

    // ---- (c) without partial_images, the first MINIMAL row stops the publisher, clearly
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = strict.0.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "sluice run without partial_images kept running over MINIMAL rows");
        std::thread::sleep(Duration::from_millis(200));
    };
    let err = std::fs::read_to_string(&strict_log).unwrap();
    assert!(!status.success(), "exit status {status}:\n{err}");
    // the first row change with a partial image (workload.sql's first MINIMAL update; no table
    // has had DDL yet, so a full image has every column SELECT shows)
    let first_partial = lines
        .iter()
        .find(|l| {
            let n = tables[l["table"].as_str().unwrap()].cols.len();
            [&l["before"], &l["after"]].iter().any(|i| i.as_object().is_some_and(|o| o.len() < n))
        })
        .expect("a partial row image in the workload");
    let partial_table = first_partial["table"].as_str().unwrap();
    let partial_at = (
        Path::new(first_partial["position"]["file"].as_str().unwrap())
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string(),
        first_partial["position"]["offset"].as_u64().unwrap(),
    );
    let at = format!("{}, offset {}", partial_at.0, partial_at.1);
    for needle in [&format!("{DB}.{partial_table}"), "binlog_row_image", "FULL", "partial_images = true", &at] {
        assert!(err.contains(needle), "the error must mention {needle:?}:\n{err}");
    }
    // nothing of that transaction or after it was published
    let t = &tables[partial_table];
    for r in &reader.read(&format!("strict.{DB}.{partial_table}")) {
        let c = topic_change(t, partial_table, r, &mut failures);
        assert!(
            c.source.as_ref().is_none_or(|s| (s.0.clone(), s.1) < partial_at),
            "without partial_images, a record at or after {at} was published: {c:?}"
        );
    }

    Command::new("kill").args(["-TERM", &child.0.id().to_string()]).status().unwrap();
    let status = child.0.wait().unwrap();
    assert!(status.success(), "exit status after SIGTERM: {status}");
    eprintln!("run_replay: {:.1} s", started.elapsed().as_secs_f64());
}

/// The canonicalisers themselves, on values whose text MariaDB prints is known.
#[test]
fn canonical_forms() {
    assert_eq!(decimal_text(&[0x04, 0xD2], 2), "12.34");
    assert_eq!(decimal_text(&[0xFB, 0x2E], 2), "-12.34");
    assert_eq!(decimal_text(&[0xFF], 30), format!("-0.{}1", "0".repeat(29)));
    assert_eq!(decimal_text(&[0x00], 2), "0.00");
    assert_eq!(decimal_text(&[0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF], 0), "18446744073709551615");
    assert_eq!(civil(0), "1970-01-01");
    assert_eq!(civil(19_782), "2024-02-29");
    assert_eq!(civil(-354_285), "1000-01-01");
    assert_eq!(civil(2_932_896), "9999-12-31");
    assert_eq!(time_text(-1_500_000, 3), "-00:00:01.500");
    assert_eq!(time_text(-3_020_399_000_000, 0), "-838:59:59");
    assert_eq!(time_text(500, 6), "00:00:00.000500");
    assert_eq!(datetime_text(1_000_001, 6), "1970-01-01 00:00:01.000001");
    assert_eq!(datetime_text(253_402_300_799_990_000, 2), "9999-12-31 23:59:59.99");
    assert_eq!(datetime_text(-1, 6), "1969-12-31 23:59:59.999999");
    assert_eq!(float_canon(true, "3.4e38"), float_canon(true, &3.4e38f32.to_string()));
    assert_eq!(float_canon(false, "-0"), "0");
    assert_eq!(inet6_text(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]), "2001:db8::1");
    assert_eq!(avro_canon(Kind::Set, &Avro::Array(vec![])).unwrap(), Some(String::new()));
    assert_eq!(avro_canon(Kind::Bit, &Avro::Bytes(vec![0xFF; 8])).unwrap(), Some(u64::MAX.to_string()));
    assert!(avro_canon(Kind::Hex, &Avro::String("x".into())).is_err(), "a value of the wrong Avro type is an error");
}
