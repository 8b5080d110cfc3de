//! Column names without TABLE_MAP metadata: MariaDB with `--binlog-row-metadata=MINIMAL`, so
//! TABLE_MAPs carry no column names and `sluice run` must take them from its tracked schema.
//!
//! The first scenario changes the table under the publisher (ADD COLUMN ... AFTER, CHANGE to
//! rename, DROP COLUMN), SIGKILLs it after it has read the DROP COLUMN but before anything
//! after it is committed (batches held open for 30 s), and changes the table again while it is
//! down, so the server's schema at restart ("today's") differs from
//! the one at the checkpoint; every record must carry the field names and values of the schema
//! in force when its row was written (read back by the independent `TopicReader`), and the
//! `__schemas` topic must hold the table's last definition. The second scenario starts at a
//! position before a DDL with no checkpoint, so the schema read from the server is newer than
//! the first events: the run must stop with the mismatch named, publishing nothing. The third
//! runs MariaDB with NO_LOG (no signedness or charsets either) and starts at `current` on an
//! existing table, so the initial schema comes from `information_schema` and the values'
//! decoding (UNSIGNED, latin1, ENUM/SET members, binary) depends on it.
//!
//! Services as in `run/e2e.rs`; skipped loudly when they cannot start, unless
//! `SLUICE_REQUIRE_MARIADB=1`.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use apache_avro::types::Value as Avro;
use support::kafka::{log_text, start_sluice, wait_for, Record, Services, TopicReader};

const MINIMAL: &[&str] = &["--binlog-row-metadata=MINIMAL"];

/// One scenario at a time: two MariaDB installs at once can collide on the shared machine, and
/// the scenarios are timing-sensitive.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
const TOPIC: &str = "sluice.shop.items";

/// The after-images of the table's create records, by id.
fn rows(reader: &mut TopicReader) -> BTreeMap<i64, BTreeMap<String, Avro>> {
    reader
        .read(TOPIC)
        .iter()
        .filter(|r| r.op() == Some("c"))
        .map(|r: &Record| (r.int_key(), r.image("after").unwrap()))
        .collect()
}

fn field_names(row: &BTreeMap<String, Avro>) -> Vec<&str> {
    row.keys().map(String::as_str).collect()
}

fn text(row: &BTreeMap<String, Avro>, f: &str) -> String {
    match row.get(f) {
        Some(Avro::String(s)) => s.clone(),
        other => panic!("field {f}: {other:?} in {row:?}"),
    }
}

fn long(row: &BTreeMap<String, Avro>, f: &str) -> i64 {
    match row.get(f) {
        Some(Avro::Long(v)) => *v,
        Some(Avro::Int(v)) => i64::from(*v),
        other => panic!("field {f}: {other:?} in {row:?}"),
    }
}

#[test]
fn minimal_metadata_names_follow_ddl_across_sigkill_and_restart() {
    let _serial = serial();
    let Some(services) = Services::start("schema-history", MINIMAL) else { return };
    let (config, log) = services.config("sh", "", "[filter]\ninclude = [\"shop.*\"]\n");
    let sql = |text: &str| services.mariadb.sql_text(text);
    assert_eq!(services.mariadb.scalar("SELECT @@binlog_row_metadata"), "MINIMAL");

    // Sluice starts before the table exists: its tracked schema comes from the DDL it reads.
    let mut child = start_sluice(&config, &log);
    wait_for(60, || log_text(&log).contains("Streaming the binlog"), "sluice to start streaming", &log);
    sql("CREATE DATABASE shop;
         CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(20), qty INT UNSIGNED);
         INSERT INTO shop.items VALUES (1, 'apple', 5);
         ALTER TABLE shop.items ADD COLUMN price DECIMAL(8,2) AFTER name;
         INSERT INTO shop.items VALUES (2, 'pear', 1.50, 6);
         ALTER TABLE shop.items CHANGE name title VARCHAR(20);
         INSERT INTO shop.items VALUES (3, 'plum', 2.25, 4294967295);");
    let mut reader = TopicReader::new(&services);
    wait_for(60, || rows(&mut reader).len() == 3, "the first three rows", &log);
    let r = rows(&mut reader);
    assert_eq!(field_names(&r[&1]), ["id", "name", "qty"]);
    assert_eq!((text(&r[&1], "name"), long(&r[&1], "qty")), ("apple".into(), 5));
    assert_eq!(field_names(&r[&2]), ["id", "name", "price", "qty"]);
    assert_eq!((text(&r[&2], "name"), long(&r[&2], "qty")), ("pear".into(), 6));
    assert!(matches!(r[&2].get("price"), Some(Avro::Decimal(_))), "{:?}", r[&2]);
    assert_eq!(field_names(&r[&3]), ["id", "price", "qty", "title"]);
    // INT UNSIGNED from the tracked schema: the maximum, not -1
    assert_eq!((text(&r[&3], "title"), long(&r[&3], "qty")), ("plum".into(), 4_294_967_295));

    // Stop at a boundary (SIGTERM), then run with batches that stay open for half a minute, so
    // the DROP COLUMN below is read but nothing after the first three rows is committed when the
    // publisher is SIGKILLed: the restart must replay the DROP onto the history from __schemas.
    std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(child.wait().unwrap().success());
    let slow = config.with_file_name("slow.toml");
    let text_cfg = std::fs::read_to_string(&config).unwrap();
    let slow_text = text_cfg
        .replace("batch_max_delay = \"100ms\"", "batch_max_delay = \"30s\"")
        .replace("batch_max_records = 50", "batch_max_records = 100000");
    assert_ne!(slow_text, text_cfg);
    std::fs::write(&slow, slow_text).unwrap();
    let mut child = start_sluice(&slow, &log);
    wait_for(60, || log_text(&log).matches("Streaming the binlog").count() == 2, "the second start", &log);
    let mut burst = String::new();
    for i in 100..200 {
        burst.push_str(&format!("INSERT INTO shop.items VALUES ({i}, 't{i}', 1.00, {i});\n"));
    }
    burst.push_str("ALTER TABLE shop.items DROP COLUMN qty;\n");
    for i in 200..300 {
        burst.push_str(&format!("INSERT INTO shop.items VALUES ({i}, 't{i}', 2.00);\n"));
    }
    sql(&burst);
    wait_for(60, || log_text(&log).contains("version=5 at="), "the DROP COLUMN to be read", &log);
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(rows(&mut reader).len(), 3, "nothing of the burst was committed");
    let positions = services.json_topic("sluice.__positions");
    let at_kill = positions.iter().rev().find(|(k, _)| k == "sh").and_then(|(_, v)| v.clone()).unwrap();
    assert_eq!(at_kill["schema_version"], 4, "the checkpoint is before the DROP: {at_kill}");

    // While it is down the table changes again: today's schema is not the checkpoint's.
    sql("ALTER TABLE shop.items ADD COLUMN color VARCHAR(10) FIRST;
         INSERT INTO shop.items VALUES ('red', 300, 'cherry', 3.00);");
    let mut child = start_sluice(&config, &log);
    wait_for(90, || rows(&mut reader).len() == 204, "every row after the restart", &log);
    let r = rows(&mut reader);
    for i in 100..200 {
        assert_eq!(field_names(&r[&i]), ["id", "price", "qty", "title"], "row {i}");
        assert_eq!((text(&r[&i], "title"), long(&r[&i], "qty")), (format!("t{i}"), i), "row {i}");
    }
    for i in 200..300 {
        assert_eq!(field_names(&r[&i]), ["id", "price", "title"], "row {i}");
        assert_eq!(text(&r[&i], "title"), format!("t{i}"), "row {i}");
    }
    assert_eq!(field_names(&r[&300]), ["color", "id", "price", "title"]);
    assert_eq!((text(&r[&300], "color"), text(&r[&300], "title")), ("red".into(), "cherry".into()));
    // exactly once across the SIGKILL
    assert_eq!(reader.read(TOPIC).len(), 204);

    // The schema history holds the table's last definition, with the DDL's position.
    let schemas = services.json_topic("sluice.__schemas");
    let last = schemas.iter().rev().find(|(k, _)| k == "sh/shop.items").expect("a record for shop.items");
    let def = last.1.as_ref().expect("not a tombstone");
    let cols: Vec<&str> = def["columns"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(cols, ["color", "id", "title", "price"]);
    assert_eq!(def["primary_key"], serde_json::json!(["id"]));
    assert!(def["since"].as_str().unwrap().starts_with("mysql-bin."), "{def}");
    // and the checkpoint carries the history version
    let positions = services.json_topic("sluice.__positions");
    let cp = positions.iter().rev().find(|(k, _)| k == "sh").and_then(|(_, v)| v.clone()).unwrap();
    assert_eq!(cp["schema_version"], def["version"], "{cp}");

    // DROP TABLE: a tombstone in the history.
    sql("DROP TABLE shop.items;");
    wait_for(
        30,
        || services.json_topic("sluice.__schemas").last().is_some_and(|(k, v)| k == "sh/shop.items" && v.is_none()),
        "the tombstone of the dropped table",
        &log,
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn minimal_metadata_mismatch_stops_with_a_clear_error() {
    let _serial = serial();
    let Some(services) = Services::start("schema-mismatch", MINIMAL) else { return };
    let sql = |text: &str| services.mariadb.sql_text(text);
    sql("CREATE DATABASE shop;
         CREATE TABLE shop.items (id INT PRIMARY KEY, a INT);");
    let (file, pos) = services.mariadb.master_status();
    sql("INSERT INTO shop.items VALUES (1, 10);
         ALTER TABLE shop.items ADD COLUMN b VARCHAR(5);
         INSERT INTO shop.items VALUES (2, 20, 'x');");
    // No checkpoint, a start before the ALTER: the schema read from the server has three
    // columns, the first row's TABLE_MAP two.
    let (config, log) = services.config("mm", "", "[filter]\ninclude = [\"shop.*\"]\n");
    let toml =
        std::fs::read_to_string(&config).unwrap().replace("start = \"earliest\"", &format!("start = \"{file}:{pos}\""));
    std::fs::write(&config, toml).unwrap();
    let mut child = start_sluice(&config, &log);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("sluice kept running on a mismatched TABLE_MAP; log:\n{}", log_text(&log));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(!status.success(), "exit status {status}");
    let text = log_text(&log);
    assert!(text.contains("shop.items at mysql-bin."), "{text}");
    assert!(text.contains("the TABLE_MAP has 2 columns, the tracked schema 3 (id, a, b)"), "{text}");
    assert!(text.contains("binlog_row_metadata=FULL"), "{text}");
    // nothing published with misaligned names
    let mut reader = TopicReader::new(&services);
    assert!(reader.read(TOPIC).is_empty());
}

/// MariaDB's NO_LOG: the TABLE_MAP has neither names nor signedness nor charsets, so decoding
/// itself depends on the tracked schema, here loaded from `information_schema` at the start
/// (the table exists before Sluice starts at `current`), then changed by an ALTER.
#[test]
fn no_log_metadata_takes_signedness_charsets_and_members_from_the_tracked_schema() {
    let _serial = serial();
    let Some(services) = Services::start("schema-nolog", &["--binlog-row-metadata=NO_LOG"]) else { return };
    let sql = |text: &str| services.mariadb.sql_text(text);
    sql("CREATE DATABASE shop;
         CREATE TABLE shop.items (id INT UNSIGNED NOT NULL, big BIGINT UNSIGNED, name VARCHAR(20) CHARACTER SET latin1,
           st ENUM('new','paid'), tags SET('a','b','c'), raw VARBINARY(4), PRIMARY KEY (id)) DEFAULT CHARSET=utf8mb4;
         INSERT INTO shop.items VALUES (1, 1, 'before', 'new', '', NULL);");
    let (config, log) = services.config("nl", "", "[filter]\ninclude = [\"shop.*\"]\n");
    let toml = std::fs::read_to_string(&config).unwrap().replace("start = \"earliest\"", "start = \"current\"");
    std::fs::write(&config, toml).unwrap();
    let mut child = start_sluice(&config, &log);
    wait_for(60, || log_text(&log).contains("Streaming the binlog"), "sluice to start streaming", &log);
    sql("SET NAMES utf8mb4;
         INSERT INTO shop.items VALUES (4294967295, 18446744073709551615, 'café', 'paid', 'a,c', 0x00ff);
         ALTER TABLE shop.items ADD COLUMN note TEXT AFTER name;
         INSERT INTO shop.items (id, note) VALUES (5, 'ünïcode ✓');
         ALTER ONLINE TABLE shop.items ADD COLUMN (qty INT UNSIGNED, price DECIMAL(8,2));
         ALTER TABLE shop.items CONVERT TO CHARACTER SET utf8mb4;
         ALTER TABLE shop.items PARTITION BY HASH(id) PARTITIONS 2;
         INSERT INTO shop.items (id, name, qty, price) VALUES (6, 'naïve ✓', 4000000000, 12.5);");
    let mut reader = TopicReader::new(&services);
    wait_for(60, || rows(&mut reader).len() == 3, "the three rows written after the start", &log);
    let r = rows(&mut reader);
    assert!(!r.contains_key(&1), "the row before the start is not published");
    let a = &r[&4_294_967_295];
    assert_eq!(field_names(a), ["big", "id", "name", "raw", "st", "tags"]);
    assert_eq!(long(a, "id"), 4_294_967_295);
    let max = apache_avro::Decimal::from(vec![0u8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    assert_eq!(a.get("big"), Some(&Avro::Decimal(max)));
    assert_eq!(text(a, "name"), "café");
    assert_eq!(a.get("st"), Some(&Avro::Enum(1, "paid".into())));
    assert_eq!(a.get("tags"), Some(&Avro::Array(vec![Avro::String("a".into()), Avro::String("c".into())])));
    assert_eq!(a.get("raw"), Some(&Avro::Bytes(vec![0x00, 0xff])));
    let b = &r[&5];
    assert_eq!(field_names(b), ["big", "id", "name", "note", "raw", "st", "tags"]);
    assert_eq!(text(b, "note"), "ünïcode ✓");
    assert_eq!(b.get("name"), Some(&Avro::Null));
    // after ADD COLUMN (list), CONVERT TO CHARACTER SET (name was latin1: read as latin1, these
    // utf8mb4 bytes would come out garbled) and repartitioning, all known to the tracked schema
    let c = &r[&6];
    assert_eq!(field_names(c), ["big", "id", "name", "note", "price", "qty", "raw", "st", "tags"]);
    assert_eq!(text(c, "name"), "naïve ✓");
    assert_eq!(long(c, "qty"), 4_000_000_000);
    assert_eq!(c.get("price"), Some(&Avro::Decimal(apache_avro::Decimal::from(vec![0x04u8, 0xe2]))));
    child.kill().unwrap();
    child.wait().unwrap();
}
