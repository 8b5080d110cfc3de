//! Every row change of the recorded MariaDB workload (`crates/binlog/tests/data/recorded/`,
//! made by `integration/record_workload.sh` from `integration/sql/workload.sql`) decoded with
//! sluice_binlog, encoded as key, envelope and flattened value, written with apache-avro's
//! writer and read back with its reader under the writer schema.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use apache_avro::types::Value as Avro;
use sluice_binlog::decoder::EventDecoder;
use sluice_binlog::event::Event;
use sluice_binlog::file::BinlogReader;
use sluice_binlog::rows::RowsKind;
use sluice_binlog::TableMap;

use super::*;

fn recorded() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../binlog/tests/data/recorded")
}

fn field<'a>(rec: &'a Avro, name: &str) -> &'a Avro {
    match rec {
        Avro::Record(f) => &f.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no field {name}")).1,
        other => panic!("not a record: {other:?}"),
    }
}

/// The value of a field of a partial-images schema (every field nullable): None for null.
fn val<'a>(rec: &'a Avro, name: &str) -> Option<&'a Avro> {
    match field(rec, name) {
        Avro::Union(0, _) => None,
        Avro::Union(_, v) => Some(v),
        other => panic!("{name}: not a union: {other:?}"),
    }
}

fn s(v: &str) -> Avro {
    Avro::String(v.into())
}

#[test]
fn every_recorded_row_change_encodes_and_reads_back() {
    // the workload has MINIMAL and NOBLOB parts
    let opts = SchemaOptions { prefix: "sluice".into(), partial_images: true, ..SchemaOptions::default() };
    let enc = AvroEncoder::new();
    let mut schemas: HashMap<String, (TableMap, TableSchema)> = HashMap::new();
    let mut rows = 0usize;
    let mut t_types_inserts = Vec::new();
    let mut per_table: HashMap<String, usize> = HashMap::new();
    for name in ["mysql-bin.000001", "mysql-bin.000002"] {
        let path = recorded().join(name);
        let mut reader = BinlogReader::open(&path, EventDecoder::default()).unwrap();
        let mut gtid = None;
        while let Some(located) = reader.next_event().unwrap() {
            let header = located.event.header;
            let pos = located.offset;
            let ev = match located.event.event {
                Event::MariadbGtid(g) => {
                    gtid = Some(g.gtid.to_string());
                    continue;
                }
                Event::Rows(ev) => ev,
                _ => continue,
            };
            let tm = &ev.table;
            let qualified = tm.qualified_name();
            let fresh = schemas.get(&qualified).is_none_or(|(old, _)| **tm != *old);
            if fresh {
                let ts = TableSchema::new(tm, &opts).unwrap_or_else(|e| panic!("{name}@{pos}: {e}"));
                schemas.insert(qualified.clone(), ((**tm).clone(), ts));
            }
            let ts = &schemas[&qualified].1;
            for (i, change) in ev.rows().enumerate() {
                let change = change.unwrap();
                let op = match ev.kind {
                    RowsKind::Write => Op::Create,
                    RowsKind::Delete => Op::Delete,
                    _ => Op::Update,
                };
                let ctx = EventContext {
                    source: SourceInfo {
                        connector: Connector::Mariadb,
                        name: "sluice".into(),
                        server_id: header.server_id,
                        ts_ms: i64::from(header.timestamp) * 1000,
                        file: name.into(),
                        pos,
                        row: u32::try_from(i).unwrap(),
                        gtid: gtid.clone(),
                        snapshot: Snapshot::No,
                    },
                    transaction: None,
                    ts_ms: 0,
                };
                let at = |e: AvroError| format!("{name}@{pos} row {i}: {e}");
                let (before, after) = (change.before.as_ref(), change.after.as_ref());
                // each datum is read back by apache-avro and must re-encode to Sluice's bytes
                if let Some(key_image) = before.or(after) {
                    enc.encode_key(ts, key_image).map_err(at).unwrap();
                }
                enc.encode_value(ts, op, before, after, &ctx).map_err(at).unwrap();
                let flat = enc.encode_flat(ts, op, before, after).map_err(at).unwrap();
                if qualified == "sluice_it.t_types" && op == Op::Create {
                    t_types_inserts.push(flat);
                }
                *per_table.entry(qualified.clone()).or_default() += 1;
                rows += 1;
            }
        }
    }
    // every row change of the workload (`sluice dump` of the two files counts 66 rows)
    assert_eq!(rows, 66, "{per_table:?}");
    assert!(per_table.contains_key("sluice_it.t_nopk") && per_table.contains_key("sluice_it.t_blobs"), "{per_table:?}");

    // row 1 of t_types: typical values
    let r1 = &t_types_inserts[0];
    assert_eq!(val(r1, "id"), Some(&Avro::Int(1)));
    assert_eq!(val(r1, "tiu"), Some(&Avro::Int(200)));
    assert_eq!(val(r1, "iu"), Some(&Avro::Long(4_000_000_000)));
    let Some(Avro::Decimal(biu)) = val(r1, "biu") else { panic!("biu") };
    assert_eq!(Vec::<u8>::try_from(biu).unwrap(), [0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    let Some(Avro::Decimal(dec10)) = val(r1, "dec10") else { panic!("dec10") };
    assert_eq!(Vec::<u8>::try_from(dec10).unwrap(), (-1234i16).to_be_bytes());
    assert_eq!(val(r1, "dt"), Some(&Avro::Date(19782)), "2024-02-29");
    assert_eq!(val(r1, "tm0"), Some(&Avro::Long(-(838 * 3600 + 59 * 60 + 59) * 1_000_000)));
    assert_eq!(val(r1, "tm3"), Some(&Avro::Long(-1_500_000)));
    let dtm6 = (19782i64 * 86_400 + 23 * 3600 + 59 * 60 + 59) * 1_000_000 + 999_999;
    assert_eq!(val(r1, "dtm6"), Some(&Avro::LocalTimestampMicros(dtm6)));
    assert_eq!(val(r1, "ts0"), Some(&Avro::TimestampMicros(2_147_483_647_000_000)));
    assert_eq!(val(r1, "ts6"), Some(&Avro::TimestampMicros(1_000_001)));
    assert_eq!(val(r1, "c"), Some(&s("漢字😀")));
    assert_eq!(val(r1, "vlat"), Some(&s("café é")));
    assert_eq!(val(r1, "bin8"), Some(&Avro::Bytes(vec![1, 2, 3, 0, 0, 0, 0, 0])));
    assert_eq!(val(r1, "e"), Some(&Avro::Enum(1, "medium".into())));
    assert_eq!(val(r1, "st"), Some(&Avro::Array(vec![s("red"), s("blue")])));
    assert_eq!(val(r1, "b1"), Some(&Avro::Boolean(true)));
    assert_eq!(val(r1, "b3"), Some(&Avro::Bytes(vec![0b101])));
    assert_eq!(val(r1, "b64"), Some(&Avro::Bytes(vec![0xff; 8])));
    let Some(g) = val(r1, "g") else { panic!("g") };
    assert_eq!(field(g, "srid"), &Avro::Long(4326));
    assert_eq!(field(r1, "__op"), &s("c"));
    assert_eq!(field(r1, "__absent"), &Avro::Array(vec![]));

    // row 6: zero dates take the string branch
    let r6 = &t_types_inserts[5];
    assert_eq!(val(r6, "dt"), Some(&s("0000-00-00")));
    assert_eq!(val(r6, "dtm6"), Some(&s("0000-00-00 00:00:00.000000")));
    assert_eq!(val(r6, "ts0"), Some(&s("0000-00-00 00:00:00")));
    assert_eq!(val(r6, "yr"), Some(&Avro::Int(0)));
}
