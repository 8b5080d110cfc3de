//! Every real binlog under `tests/data/` decodes, value by value; the ones that are broken by
//! design end in a clear error at the right offset; facts the fixtures' source projects
//! assert hold here too.
//!
//! The fixtures are copies of `../shared/fixtures/` (see `data/fixtures/mysql/MANIFEST.md`
//! for where each comes from) and the MariaDB workload recorded by
//! `integration/record_workload.sh`.

mod common;
use common::{binlog_files, data_dir};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sluice_binlog::decoder::{DecoderOptions, EventDecoder};
use sluice_binlog::event::Event;
use sluice_binlog::file::BinlogReader;
use sluice_binlog::rows::{ImageVisitor, RowChange};
use sluice_binlog::{Error, Value};

/// What walking a file saw.
#[derive(Debug, Default)]
struct Walk {
    events: usize,
    by_type: BTreeMap<String, usize>,
    rows: usize,
    unknown: u64,
}

/// Decodes every event and every value of every row.
fn walk(path: &Path) -> (Walk, Option<Error>) {
    let mut w = Walk::default();
    let mut rd = match BinlogReader::open(path, EventDecoder::new(DecoderOptions::default())) {
        Ok(r) => r,
        Err(e) => return (w, Some(e)),
    };
    loop {
        match rd.next_event() {
            Ok(Some(ev)) => {
                w.events += 1;
                let name = ev.event.event.type_name();
                *w.by_type.entry(if ev.in_payload { format!("  {name}") } else { name.to_string() }).or_default() += 1;
                if let Event::Rows(rows) = &ev.event.event {
                    // the visitor sees what the iterator collects, and fails where it does
                    let mut visits = rows.rows();
                    for row in rows.rows() {
                        let mut seen = Images::default();
                        let visited = visits.next_with(&mut seen);
                        match row {
                            Ok(change) => {
                                assert!(matches!(visited, Some(Ok(()))), "{}:{}: {visited:?}", ev.file, ev.offset);
                                assert_eq!(seen.0, images_of(&change), "{}:{}", ev.file, ev.offset);
                                w.rows += 1;
                            }
                            Err(e) => {
                                let visited = visited.and_then(Result::err).map(|e| e.to_string());
                                assert_eq!(visited, Some(e.to_string()), "{}:{}", ev.file, ev.offset);
                                return (w, Some(e.at(ev.file, ev.offset, ev.event.header.event_type)));
                            }
                        }
                    }
                    assert!(visits.next_with(&mut Images::default()).is_none());
                }
            }
            Ok(None) => break,
            Err(e) => {
                w.unknown = rd.decoder().stats().unknown_events;
                return (w, Some(e));
            }
        }
    }
    w.unknown = rd.decoder().stats().unknown_events;
    (w, None)
}

/// A row change's images as [`RowsIter::next_with`] hands them over: before or after, and the
/// present columns' indexes and values.
#[derive(Default)]
struct Images<'r>(Vec<(bool, Vec<(usize, Value<'r>)>)>);

impl<'r> ImageVisitor<'r> for Images<'r> {
    fn image(&mut self, before: bool) {
        self.0.push((before, Vec::new()));
    }
    fn value(&mut self, column: usize, value: &Value<'r>) {
        self.0.last_mut().expect("a value before any image").1.push((column, value.clone()));
    }
}

/// A collected row change in the form [`Images`] holds.
fn images_of<'r>(change: &RowChange<'r>) -> Vec<(bool, Vec<(usize, Value<'r>)>)> {
    [(true, &change.before), (false, &change.after)]
        .into_iter()
        .filter_map(|(before, image)| {
            let values = image.as_ref()?.values.iter().enumerate();
            Some((before, values.filter_map(|(i, v)| Some((i, v.clone()?))).collect()))
        })
        .collect()
}

/// Files broken by design, with the offset their error must name and a piece of its text.
const BROKEN: &[(&str, u64, &str)] = &[
    // 14-byte file: the first event header is cut short
    ("binlog_truncated_event.000001", 4, "truncated file"),
    // the PREVIOUS_GTIDS after the FDE is cut short
    ("binlog_truncated_prev_gtid_event.000001", 120, "truncated file"),
    // a relay log whose last QUERY event is damaged
    ("corrupt-relay-bin.000624", 91204, "QUERY_EVENT"),
    // MySQL 5.2 pre-GA: an XID event with 11 stray bytes
    ("ver_5_1-wl2325_r.001", 428, "unexpected bytes"),
    // MySQL 5.2 pre-GA rows events, whose table definitions are not in the binlog
    ("ver_5_1-wl2325_s.001", 411, "pre-GA rows events"),
];

#[test]
fn every_fixture_decodes_or_fails_clearly() {
    let files = binlog_files();
    assert!(files.len() >= 50, "expected the fixture corpus under {:?}, found {} files", data_dir(), files.len());
    let mut failures = Vec::new();
    for f in &files {
        let name = f.file_name().unwrap().to_str().unwrap();
        let (w, err) = walk(f);
        match (BROKEN.iter().find(|(n, ..)| *n == name), err) {
            (None, None) => {}
            (None, Some(e)) => failures.push(format!("{name}: {e}")),
            (Some(_), None) => failures.push(format!("{name}: decoded without the expected error ({w:?})")),
            (Some((_, offset, text)), Some(e)) => {
                let msg = e.to_string();
                let at_offset = matches!(&e, Error::At { offset: o, .. } if o == offset);
                if !at_offset || !msg.contains(text) {
                    failures
                        .push(format!("{name}: expected an error at offset {offset} mentioning {text:?}, got: {msg}"));
                }
                assert!(msg.contains(name), "the error must name the file: {msg}");
            }
        }
    }
    assert!(failures.is_empty(), "{} files failed:\n{}", failures.len(), failures.join("\n"));
}

fn fixture(rel: &str) -> PathBuf {
    data_dir().join("fixtures").join(rel)
}

fn walk_ok(rel: &str) -> Walk {
    let (w, e) = walk(&fixture(rel));
    if let Some(e) = e {
        panic!("{rel}: {e}");
    }
    w
}

/// Event counts asserted by mysql-binlog-connector-java and -rust for their files.
#[test]
fn event_counts_match_the_source_projects() {
    assert_eq!(walk_ok("mysql/mysql-binlog-connector-java/mysql-bin.checksum-crc32").events, 303);
    assert_eq!(walk_ok("mysql/mysql-binlog-connector-java/mysql-bin.checksum-none").events, 191);
    assert_eq!(walk_ok("mysql/mysql-binlog-connector-java/mysql-bin.sakila.gz").events, 1462);
    assert_eq!(walk_ok("mysql/mysql-binlog-connector-rust/mysql-bin.000080").events, 37);
}

/// Aurora's padding event (type 100) is unknown: skipped by its size and counted, and the
/// QUERY after it still decodes.
#[test]
fn unknown_event_is_skipped_and_counted() {
    let w = walk_ok("mysql/mysql-binlog-connector-java/mysql-bin.aurora-padding");
    assert_eq!(w.unknown, 1);
    assert_eq!(w.by_type.get("UNKNOWN"), Some(&1));
    assert_eq!(w.by_type.get("QUERY_EVENT"), Some(&1));
}

/// rust_mysql_common asserts the inner event sequence of a compressed transaction.
#[test]
fn transaction_payload_inner_events() {
    let mut rd =
        BinlogReader::open(&fixture("mysql/rust_mysql_common/transaction_compression.000001"), EventDecoder::default())
            .unwrap();
    let mut inner = Vec::new();
    while let Some(ev) = rd.next_event().unwrap() {
        if ev.in_payload {
            inner.push(ev.event.event.type_name());
        }
    }
    assert_eq!(inner, ["QUERY_EVENT", "TABLE_MAP_EVENT", "WRITE_ROWS_EVENT", "XID_EVENT"]);
}

/// GTID facts asserted by rust_mysql_common: tagged PREVIOUS_GTIDS and GTID_TAGGED (MySQL 9.6),
/// untagged PREVIOUS_GTIDS (8.0.40).
#[test]
fn gtids() {
    let mut rd = BinlogReader::open(
        &fixture("mysql/rust_mysql_common/binlog_transaction_with_GTID_TAG.000001"),
        EventDecoder::default(),
    )
    .unwrap();
    let (mut prev, mut gtid) = (None, None);
    while let Some(ev) = rd.next_event().unwrap() {
        match &ev.event.event {
            Event::PreviousGtids(s) => prev = Some(s.to_string()),
            Event::Gtid(g) => gtid = Some(g.gtid.to_string()),
            _ => {}
        }
    }
    assert_eq!(prev.as_deref(), Some("55778904-0299-11f1-b1b8-4ef0c4956feb:1-13:mytag:1-2"));
    assert_eq!(gtid.as_deref(), Some("55778904-0299-11f1-b1b8-4ef0c4956feb:mytag:3"));

    let mut rd = BinlogReader::open(
        &fixture("mysql/rust_mysql_common/binlog_transaction_previous_GTID_no_tag.000001"),
        EventDecoder::default(),
    )
    .unwrap();
    let mut prev = None;
    while let Some(ev) = rd.next_event().unwrap() {
        if let Event::PreviousGtids(s) = &ev.event.event {
            prev = Some(s.to_string());
        }
    }
    assert_eq!(prev.as_deref(), Some("b9b88c66-0755-11f1-9899-4a9da94c4d71:1-2"));
}

/// MariaDB 10.5 TABLE_MAP with full metadata: names, primary key, charsets (rust_mysql_common).
#[test]
fn mariadb_table_map_metadata() {
    let mut rd =
        BinlogReader::open(&fixture("mysql/rust_mysql_common/mariadb-bin.000001"), EventDecoder::default()).unwrap();
    let mut tm = None;
    let mut gtids = Vec::new();
    while let Some(ev) = rd.next_event().unwrap() {
        match &ev.event.event {
            Event::TableMap(t) => tm = Some(t.clone()),
            Event::MariadbGtid(g) => gtids.push(g.gtid.to_string()),
            _ => {}
        }
    }
    let tm = tm.unwrap();
    let names: Vec<String> = tm.columns.iter().map(|c| c.display_name()).collect();
    assert_eq!(names, ["id", "topic", "event_type", "event", "created"]);
    assert!(tm.columns[0].primary_key);
    assert!(!tm.columns[1].primary_key);
    assert_eq!(gtids.len(), 2);
}

/// A checksum mismatch names the file, the offset and the event type; without verification
/// the same file reads on.
#[test]
fn checksum_mismatch_is_reported() {
    let src = fixture("mysql/mysql-binlog-connector-java/mysql-bin.checksum-crc32");
    let mut bytes = std::fs::read(&src).unwrap();
    // flip a bit of the second event's stored CRC (the PREVIOUS_GTIDS after the FDE), so
    // the body stays decodable when verification is off
    let fde_size = u32::from_le_bytes(bytes[4 + 9..4 + 13].try_into().unwrap()) as usize;
    let second = 4 + fde_size;
    let second_size = u32::from_le_bytes(bytes[second + 9..second + 13].try_into().unwrap()) as usize;
    bytes[second + second_size - 1] ^= 0x01;
    let tmp = std::env::temp_dir().join(format!("sluice-crc-{}.bin", std::process::id()));
    std::fs::write(&tmp, &bytes).unwrap();
    let (_, err) = walk(&tmp);
    let err = err.expect("a flipped bit must fail the CRC");
    assert!(matches!(err.root(), Error::ChecksumMismatch { .. }), "{err}");
    assert!(matches!(err, Error::At { offset, .. } if offset == second as u64), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("PREVIOUS_GTIDS_LOG_EVENT") && msg.contains("checksum mismatch"), "{msg}");

    let mut rd =
        BinlogReader::open(&tmp, EventDecoder::new(DecoderOptions { verify_checksum: false, ..Default::default() }))
            .unwrap();
    let mut n = 0;
    while let Ok(Some(_)) = rd.next_event() {
        n += 1;
    }
    assert!(n > 2, "without verification the file reads past the damaged event");
    std::fs::remove_file(tmp).ok();
}

#[test]
fn not_a_binlog() {
    let tmp = std::env::temp_dir().join(format!("sluice-notbinlog-{}.txt", std::process::id()));
    std::fs::write(&tmp, b"hello world").unwrap();
    let err = BinlogReader::open(&tmp, EventDecoder::default()).unwrap_err();
    assert!(matches!(err, Error::NotABinlog { .. }));
    assert!(err.to_string().contains("is not a binlog file"), "{err}");
    std::fs::remove_file(tmp).ok();
}
