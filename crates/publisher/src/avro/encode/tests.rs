//! Every type mapping with real values, each value written with apache-avro's writer and read
//! back with its reader under the writer schema.

use std::borrow::Cow;
use std::str::FromStr;
use std::sync::Arc;

use apache_avro::schema_compatibility::SchemaCompatibility;
use apache_avro::types::Value as Avro;
use sluice_binlog::decimal::Decimal;
use sluice_binlog::jsonb::JsonValue;
use sluice_binlog::rows::RowImage;
use sluice_binlog::temporal::{Date, DateTime, Time, Timestamp};
use sluice_binlog::{Column, ColumnType, TableMap, Value};

use super::*;
use crate::avro::{SchemaOptions, TableSchema, ZeroDates};

const UTF8MB4: u16 = 45;
const LATIN1: u16 = 8;
const BINARY: u16 = 63;

fn col(name: &str, ty: ColumnType, meta: u16, nullable: bool) -> Column {
    let mut c = Column::new(0, ty, meta, nullable);
    c.name = Some(Arc::from(name));
    c
}

fn text(name: &str, ty: ColumnType, meta: u16, collation: u16) -> Column {
    let mut c = col(name, ty, meta, true);
    c.collation = Some(collation);
    c
}

fn unsigned(mut c: Column) -> Column {
    c.unsigned = true;
    c
}

fn names(list: &[&str]) -> Option<Arc<[Arc<str>]>> {
    Some(list.iter().map(|s| Arc::from(*s)).collect())
}

/// A table `db.t` whose first column is `id INT NOT NULL PRIMARY KEY`, then `cols`.
fn table(cols: Vec<Column>) -> TableMap {
    let mut columns = vec![col("id", ColumnType::Long, 0, false)];
    columns.extend(cols);
    for (i, c) in columns.iter_mut().enumerate() {
        c.index = i;
    }
    columns[0].primary_key = true;
    TableMap {
        table_id: 1,
        flags: 0,
        database: Arc::from("db"),
        table: Arc::from("t"),
        columns,
        has_column_names: true,
        primary_key: Some(vec![(0, 0)]),
    }
}

fn schema(tm: &TableMap) -> TableSchema {
    TableSchema::new(tm, &SchemaOptions { prefix: "sluice".into(), ..SchemaOptions::default() }).unwrap()
}

fn row<'a>(values: Vec<Value<'a>>) -> RowImage<'a> {
    let mut v = vec![Some(Value::Int(1))];
    v.extend(values.into_iter().map(Some));
    RowImage { values: v }
}

fn ctx() -> EventContext {
    EventContext {
        source: SourceInfo {
            connector: Connector::Mariadb,
            name: "sluice".into(),
            server_id: 1,
            ts_ms: 1_700_000_000_000,
            file: "mysql-bin.000001".into(),
            pos: 4711,
            row: 2,
            gtid: Some("0-1-42".into()),
            snapshot: Snapshot::No,
        },
        transaction: Some(TransactionInfo { id: "0-1-42".into(), total_order: 3, data_collection_order: 1 }),
        ts_ms: 1_700_000_000_123,
    }
}

/// The flattened record of an insert of `values`, written and read back; and the row's end,
/// found without decoding (`TableSchema::row_len`), is where the row's bytes end.
fn flat(ts: &TableSchema, values: Vec<Value<'_>>) -> Vec<(String, Avro)> {
    let img = row(values);
    let mut written = Vec::new();
    AvroEncoder::new().write_row(ts, &img, &mut written).unwrap();
    let mut framed = written.clone();
    framed.extend_from_slice(b"\x02c\x00");
    assert_eq!(ts.row_len(&framed), Some(written.len()), "the row's end in {framed:?}");
    assert_eq!(ts.row_len(&written[..written.len().saturating_sub(1)]), None, "a cut row is no row");
    let v = AvroEncoder::new().encode_flat(ts, Op::Create, None, Some(&img)).unwrap();
    match v {
        Avro::Record(f) => f,
        other => panic!("not a record: {other:?}"),
    }
}

fn field<'a>(rec: &'a [(String, Avro)], name: &str) -> &'a Avro {
    &rec.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no field {name}")).1
}

/// The value inside a nullable field's union.
fn some(v: &Avro) -> &Avro {
    match v {
        Avro::Union(1, inner) => inner,
        other => panic!("expected the value branch, got {other:?}"),
    }
}

fn decimal_bytes(v: &Avro) -> Vec<u8> {
    match v {
        Avro::Decimal(d) => Vec::<u8>::try_from(d).unwrap(),
        other => panic!("not a decimal: {other:?}"),
    }
}

/// Big-endian two's-complement bytes and a scale as decimal text (an oracle independent of
/// `Decimal::to_unscaled_be_bytes`).
fn decimal_text(bytes: &[u8], scale: usize) -> String {
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    let mut mag: Vec<u8> = bytes.to_vec();
    if negative {
        for b in mag.iter_mut() {
            *b = !*b;
        }
        for b in mag.iter_mut().rev() {
            let (v, o) = b.overflowing_add(1);
            *b = v;
            if !o {
                break;
            }
        }
    }
    let mut digits = Vec::new();
    while mag.iter().any(|&b| b != 0) {
        let mut rem = 0u32;
        for b in mag.iter_mut() {
            let cur = (rem << 8) | u32::from(*b);
            *b = (cur / 10) as u8;
            rem = cur % 10;
        }
        digits.push(char::from(b'0' + rem as u8));
    }
    while digits.len() <= scale {
        digits.push('0');
    }
    digits.reverse();
    let mut s: String = digits.iter().collect();
    if scale > 0 {
        s.insert(s.len() - scale, '.');
    }
    if negative {
        s.insert(0, '-');
    }
    s
}

#[test]
fn integers() {
    use ColumnType as T;
    let tm = table(vec![
        col("ti", T::Tiny, 0, false),
        unsigned(col("tiu", T::Tiny, 0, false)),
        unsigned(col("miu", T::Int24, 0, false)),
        col("i", T::Long, 0, false),
        unsigned(col("iu", T::Long, 0, false)),
        col("bi", T::LongLong, 0, false),
        unsigned(col("biu", T::LongLong, 0, false)),
        unsigned(col("biu0", T::LongLong, 0, false)),
        col("yr", T::Year, 0, false),
    ]);
    let ts = schema(&tm);
    let r = flat(
        &ts,
        vec![
            Value::Int(-5),
            Value::UInt(200),
            Value::UInt(16_777_215),
            Value::Int(i64::from(i32::MIN)),
            Value::UInt(4_294_967_295),
            Value::Int(i64::MIN),
            Value::UInt(u64::MAX),
            Value::UInt(0),
            Value::Year(2155),
        ],
    );
    assert_eq!(field(&r, "ti"), &Avro::Int(-5));
    assert_eq!(field(&r, "tiu"), &Avro::Int(200));
    assert_eq!(field(&r, "miu"), &Avro::Int(16_777_215));
    assert_eq!(field(&r, "i"), &Avro::Int(i32::MIN));
    assert_eq!(field(&r, "iu"), &Avro::Long(4_294_967_295));
    assert_eq!(field(&r, "bi"), &Avro::Long(i64::MIN));
    // BIGINT UNSIGNED max: decimal(20,0) bytes, positive (leading 0x00)
    let b = decimal_bytes(field(&r, "biu"));
    assert_eq!(b, [0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    assert_eq!(decimal_text(&b, 0), "18446744073709551615");
    assert_eq!(decimal_text(&decimal_bytes(field(&r, "biu0")), 0), "0");
    assert_eq!(field(&r, "yr"), &Avro::Int(2155));
    let json = ts.flat_schema_json();
    assert!(json.contains(r#""type":{"type":"bytes","logicalType":"decimal","precision":20,"scale":0}"#), "{json}");
    assert!(json.contains(r#""mysql.type":"BIGINT UNSIGNED""#), "{json}");
}

#[test]
fn floats_and_decimals() {
    use ColumnType as T;
    let tm = table(vec![
        col("f", T::Float, 4, false),
        col("d", T::Double, 8, false),
        col("dec65", T::NewDecimal, 65 << 8 | 30, false),
        col("dec10", T::NewDecimal, 10 << 8 | 2, false),
        col("zero", T::NewDecimal, 10 << 8 | 2, false),
    ]);
    let ts = schema(&tm);
    let big = "-12345678901234567890123456789012345.123456789012345678901234567890";
    let dec65 = Decimal::from_str(big).unwrap();
    assert_eq!((dec65.precision(), dec65.scale()), (65, 30));
    let r = flat(
        &ts,
        vec![
            Value::Float(-1.5e-38),
            Value::Double(f64::MAX),
            Value::Decimal(dec65),
            Value::Decimal(Decimal::from_str("-12.34").unwrap()),
            Value::Decimal(Decimal::from_str("0.00").unwrap()),
        ],
    );
    assert_eq!(field(&r, "f"), &Avro::Float(-1.5e-38));
    assert_eq!(field(&r, "d"), &Avro::Double(f64::MAX));
    assert_eq!(decimal_text(&decimal_bytes(field(&r, "dec65")), 30), big);
    assert_eq!(decimal_text(&decimal_bytes(field(&r, "dec10")), 2), "-12.34");
    assert_eq!(decimal_text(&decimal_bytes(field(&r, "zero")), 2), "0.00");
    let json = ts.flat_schema_json();
    assert!(json.contains(r#"{"type":"bytes","logicalType":"decimal","precision":65,"scale":30}"#), "{json}");
    // a value whose scale is not the column's is refused, not rescaled
    let img = row(vec![
        Value::Float(0.0),
        Value::Double(0.0),
        Value::Decimal(Decimal::from_str("1.5").unwrap()),
        Value::Decimal(Decimal::from_str("1.00").unwrap()),
        Value::Decimal(Decimal::from_str("1.00").unwrap()),
    ]);
    let e = AvroEncoder::new().encode_flat(&ts, Op::Create, None, Some(&img)).unwrap_err();
    assert!(matches!(e, AvroError::TypeMismatch { ref column, .. } if column == "dec65"), "{e}");
}

#[test]
fn temporals() {
    use ColumnType as T;
    let tm = table(vec![
        col("dt", T::Date, 0, false),
        col("zero_dt", T::Date, 0, true),
        col("tm", T::Time2, 0, false),
        col("tm_neg", T::Time2, 6, false),
        col("dtm6", T::DateTime2, 6, false),
        col("zero_dtm", T::DateTime2, 0, false),
        col("ts6", T::Timestamp2, 6, false),
        col("zero_ts", T::Timestamp2, 0, false),
    ]);
    let ts = schema(&tm);
    let values = || {
        vec![
            Value::Date(Date { year: 2024, month: 2, day: 29 }),
            Value::Date(Date::ZERO),
            Value::Time(Time { negative: true, hours: 838, minutes: 59, seconds: 59, micros: 0, fsp: 0 }),
            Value::Time(Time { negative: true, hours: 0, minutes: 0, seconds: 1, micros: 500_000, fsp: 6 }),
            Value::DateTime(DateTime {
                year: 2024,
                month: 2,
                day: 29,
                hour: 23,
                minute: 59,
                second: 59,
                micros: 999_999,
                fsp: 6,
            }),
            Value::DateTime(DateTime { year: 0, month: 0, day: 0, hour: 0, minute: 0, second: 0, micros: 0, fsp: 0 }),
            Value::Timestamp(Timestamp { seconds: 1, micros: 1, fsp: 6 }),
            Value::Timestamp(Timestamp { seconds: 0, micros: 0, fsp: 0 }),
        ]
    };
    let r = flat(&ts, values());
    // 2024-02-29 is day 19782
    assert_eq!(field(&r, "dt"), &Avro::Union(0, Box::new(Avro::Date(19782))));
    // nullable zero date: ["null", date, "string"], branch 2
    assert_eq!(field(&r, "zero_dt"), &Avro::Union(2, Box::new(Avro::String("0000-00-00".into()))));
    assert_eq!(field(&r, "tm"), &Avro::Long(-(838 * 3600 + 59 * 60 + 59) * 1_000_000));
    assert_eq!(field(&r, "tm_neg"), &Avro::Long(-1_500_000));
    let local = (19782i64 * 86_400 + 23 * 3600 + 59 * 60 + 59) * 1_000_000 + 999_999;
    assert_eq!(field(&r, "dtm6"), &Avro::Union(0, Box::new(Avro::LocalTimestampMicros(local))));
    assert_eq!(field(&r, "zero_dtm"), &Avro::Union(1, Box::new(Avro::String("0000-00-00 00:00:00".into()))));
    assert_eq!(field(&r, "ts6"), &Avro::Union(0, Box::new(Avro::TimestampMicros(1_000_001))));
    assert_eq!(field(&r, "zero_ts"), &Avro::Union(1, Box::new(Avro::String("0000-00-00 00:00:00".into()))));
    let json = ts.flat_schema_json();
    assert!(json.contains(r#"{"type":"long","logicalType":"sluice.duration-micros"}"#), "{json}");

    // ZeroDates::AsNull: the same columns are nullable and zero values are null
    let opts = SchemaOptions { zero_dates: ZeroDates::AsNull, ..SchemaOptions::default() };
    let ts = TableSchema::new(&tm, &opts).unwrap();
    let r = flat(&ts, values());
    assert_eq!(field(&r, "dt"), &Avro::Union(1, Box::new(Avro::Date(19782))));
    assert_eq!(field(&r, "zero_dt"), &Avro::Union(0, Box::new(Avro::Null)));
    assert_eq!(field(&r, "zero_ts"), &Avro::Union(0, Box::new(Avro::Null)));
    assert_eq!(field(&r, "ts6"), &Avro::Union(1, Box::new(Avro::TimestampMicros(1_000_001))));
}

#[test]
fn strings_and_binaries() {
    use ColumnType as T;
    let tm = table(vec![
        text("vc", T::VarChar, 1200, UTF8MB4),
        text("lat", T::VarChar, 20, LATIN1),
        text("txt", T::Blob, 2, UTF8MB4),
        text("bin8", T::String, 8, BINARY),
        text("blb", T::Blob, 2, BINARY),
    ]);
    let ts = schema(&tm);
    let r = flat(
        &ts,
        vec![
            Value::Text { bytes: "héllo 你好 🚀".as_bytes(), collation: Some(UTF8MB4) },
            Value::Text { bytes: b"caf\xe9", collation: Some(LATIN1) },
            Value::Text { bytes: b"", collation: Some(UTF8MB4) },
            Value::Bytes(Cow::Owned(vec![1, 2, 3, 0, 0, 0, 0, 0])),
            Value::Bytes(Cow::Borrowed(&[0xde, 0xad])),
        ],
    );
    assert_eq!(some(field(&r, "vc")), &Avro::String("héllo 你好 🚀".into()));
    assert_eq!(some(field(&r, "lat")), &Avro::String("café".into()));
    assert_eq!(some(field(&r, "txt")), &Avro::String(String::new()));
    assert_eq!(some(field(&r, "bin8")), &Avro::Bytes(vec![1, 2, 3, 0, 0, 0, 0, 0]));
    assert_eq!(some(field(&r, "blb")), &Avro::Bytes(vec![0xde, 0xad]));
    let json = ts.flat_schema_json();
    assert!(json.contains(r#""mysql.type":"BINARY""#) && json.contains(r#""mysql.type":"TEXT""#), "{json}");

    // invalid UTF-8 is an error naming the table, the column and the charset
    let img = row(vec![
        Value::Text { bytes: b"\xff\xfe", collation: Some(UTF8MB4) },
        Value::Text { bytes: b"", collation: Some(LATIN1) },
        Value::Null,
        Value::Null,
        Value::Null,
    ]);
    let e = AvroEncoder::new().encode_flat(&ts, Op::Create, None, Some(&img)).unwrap_err();
    assert_eq!(e.to_string(), "db.t: column vc: invalid utf8mb4 text at byte 0");
    // text where the schema says binary
    let img =
        row(vec![Value::Null, Value::Null, Value::Null, Value::Text { bytes: b"x", collation: None }, Value::Null]);
    let e = AvroEncoder::new().encode_flat(&ts, Op::Create, None, Some(&img)).unwrap_err();
    assert!(matches!(e, AvroError::TypeMismatch { expected: "binary data", .. }), "{e}");
    // a string column whose charset is unknown cannot be mapped without guessing
    let mut c = col("mystery", T::VarChar, 20, true);
    c.collation = None;
    let e = TableSchema::new(&table(vec![c]), &SchemaOptions::default()).unwrap_err();
    assert!(matches!(e, AvroError::MissingMetadata { ref column, .. } if column == "mystery"), "{e}");
}

/// ASCII bytes are copied as they are only where ASCII is ASCII: the same bytes in UTF-16 or
/// UTF-32 are other characters, and in any charset the result is what its decoder gives.
#[test]
fn ascii_text_is_copied_only_where_ascii_is_ascii() {
    use ColumnType as T;
    const UTF16: u16 = 54;
    const UTF32: u16 = 60;
    const SJIS: u16 = 13;
    let tm = table(vec![
        text("lat", T::VarChar, 20, LATIN1),
        text("u16", T::VarChar, 40, UTF16),
        text("u32", T::VarChar, 40, UTF32),
        text("sjis", T::VarChar, 40, SJIS),
        text("none", T::VarChar, 40, UTF8MB4),
    ]);
    let ts = schema(&tm);
    let r = flat(
        &ts,
        vec![
            Value::Text { bytes: b"plain \"ascii\"\n", collation: Some(LATIN1) },
            // "hi" in UTF-16: every byte is ASCII, the text is not the bytes
            Value::Text { bytes: b"\0h\0i", collation: Some(UTF16) },
            Value::Text { bytes: b"\0\0\0A", collation: Some(UTF32) },
            Value::Text { bytes: b"abc", collation: Some(SJIS) },
            Value::Text { bytes: b"x", collation: None },
        ],
    );
    assert_eq!(some(field(&r, "lat")), &Avro::String("plain \"ascii\"\n".into()));
    assert_eq!(some(field(&r, "u16")), &Avro::String("hi".into()));
    assert_eq!(some(field(&r, "u32")), &Avro::String("A".into()));
    assert_eq!(some(field(&r, "sjis")), &Avro::String("abc".into()));
    assert_eq!(some(field(&r, "none")), &Avro::String("x".into()));
}

#[test]
fn enums_and_sets() {
    use ColumnType as T;
    let mut e = col("e", T::Enum, 1, true);
    e.enum_values = names(&["small", "medium", "large"]);
    let mut e_str = col("e_str", T::Enum, 1, true);
    e_str.enum_values = names(&["in progress", "done"]);
    let mut st = col("st", T::Set, 1, true);
    st.set_values = names(&["red", "green", "blue"]);
    let tm = table(vec![e, e_str, st]);
    let ts = schema(&tm);
    let r = flat(&ts, vec![Value::Enum(2), Value::Enum(1), Value::Set(0b101)]);
    assert_eq!(some(field(&r, "e")), &Avro::Enum(1, "medium".into()));
    assert_eq!(some(field(&r, "e_str")), &Avro::String("in progress".into()));
    assert_eq!(some(field(&r, "st")), &Avro::Array(vec![Avro::String("red".into()), Avro::String("blue".into())]));
    let json = ts.flat_schema_json();
    assert!(
        json.contains(
            r#"{"type":"enum","name":"e_enum","namespace":"sluice.db.t","symbols":["small","medium","large"]}"#
        ),
        "{json}"
    );
    assert!(json.contains(r#""sluice.allowed":["in progress","done"]"#), "{json}");
    let r = flat(&ts, vec![Value::Null, Value::Enum(0), Value::Set(0)]);
    assert_eq!(field(&r, "e"), &Avro::Union(0, Box::new(Avro::Null)));
    assert_eq!(some(field(&r, "e_str")), &Avro::String(String::new()));
    assert_eq!(some(field(&r, "st")), &Avro::Array(vec![]));

    // MySQL's empty error value has no Avro enum symbol ...
    let img = row(vec![Value::Enum(0), Value::Null, Value::Null]);
    let err = AvroEncoder::new().encode_flat(&ts, Op::Create, None, Some(&img)).unwrap_err();
    assert!(matches!(err, AvroError::EnumIndex { index: 0, members: 3, .. }), "{err}");
    // ... unless enums are strings
    let opts = SchemaOptions { enums_as_strings: true, ..SchemaOptions::default() };
    let ts2 = TableSchema::new(&tm, &opts).unwrap();
    let r = flat(&ts2, vec![Value::Enum(0), Value::Enum(2), Value::Null]);
    assert_eq!(some(field(&r, "e")), &Avro::String(String::new()));
    assert_eq!(some(field(&r, "e_str")), &Avro::String("done".into()));
    // an index beyond the names is an error either way
    let img = row(vec![Value::Null, Value::Enum(3), Value::Null]);
    let err = AvroEncoder::new().encode_flat(&ts2, Op::Create, None, Some(&img)).unwrap_err();
    assert_eq!(err.to_string(), "db.t: column e_str: ENUM index 3 has no name among 2 members");
}

#[test]
fn enum_and_set_out_of_range() {
    use ColumnType as T;
    let mut st = col("st", T::Set, 1, true);
    st.set_values = names(&["a", "b"]);
    let ts = schema(&table(vec![st]));
    let img = row(vec![Value::Set(0b100)]);
    let e = AvroEncoder::new().encode_flat(&ts, Op::Create, None, Some(&img)).unwrap_err();
    assert!(matches!(e, AvroError::SetBits { mask: 4, members: 2, .. }), "{e}");
    // ENUM names missing from the table map
    let e = TableSchema::new(&table(vec![col("e", T::Enum, 1, true)]), &SchemaOptions::default()).unwrap_err();
    assert!(matches!(e, AvroError::MissingMetadata { what: "ENUM member names", .. }), "{e}");
}

#[test]
fn bits_json_geometry_vector() {
    use ColumnType as T;
    let tm = table(vec![
        col("b1", T::Bit, 0x0001, false),
        col("b3", T::Bit, 0x0003, false),
        col("b64", T::Bit, 0x0800, false),
        col("j", T::Json, 4, false),
        col("g", T::Geometry, 4, false),
        col("pt", T::Geometry, 4, true),
        col("v", T::Vector, 4, false),
    ]);
    let ts = schema(&tm);
    let doc = JsonValue::Object(vec![
        ("a".into(), JsonValue::Int(1)),
        ("b".into(), JsonValue::Array(vec![JsonValue::Bool(true), JsonValue::Null])),
    ]);
    let floats: Vec<u8> = [1.0f32, -0.5].iter().flat_map(|f| f.to_le_bytes()).collect();
    let r = flat(
        &ts,
        vec![
            Value::Bit { value: 1, bits: 1 },
            Value::Bit { value: 0b101, bits: 3 },
            Value::Bit { value: u64::MAX, bits: 64 },
            Value::Json(Box::new(doc)),
            Value::Geometry { srid: 4326, wkb: &[1, 1, 0, 0, 0] },
            Value::Geometry { srid: 0, wkb: &[1] },
            Value::Vector(&floats),
        ],
    );
    assert_eq!(field(&r, "b1"), &Avro::Boolean(true));
    assert_eq!(field(&r, "b3"), &Avro::Bytes(vec![5]));
    assert_eq!(field(&r, "b64"), &Avro::Bytes(vec![0xff; 8]));
    assert_eq!(field(&r, "j"), &Avro::String(r#"{"a": 1, "b": [true, null]}"#.into()));
    assert_eq!(
        field(&r, "g"),
        &Avro::Record(vec![("srid".into(), Avro::Long(4326)), ("wkb".into(), Avro::Bytes(vec![1, 1, 0, 0, 0]))])
    );
    assert_eq!(
        some(field(&r, "pt")),
        &Avro::Record(vec![("srid".into(), Avro::Long(0)), ("wkb".into(), Avro::Bytes(vec![1]))])
    );
    assert_eq!(field(&r, "v"), &Avro::Array(vec![Avro::Float(1.0), Avro::Float(-0.5)]));
    let json = ts.flat_schema_json();
    assert!(json.contains(r#""sluice.json":true"#), "{json}");
    // the second GEOMETRY column refers to the record by name
    assert!(json.contains(r#"["null","sluice.Geometry"]"#), "{json}");
}

#[test]
fn nulls_keys_and_names() {
    use ColumnType as T;
    let tm = table(vec![col("n", T::Long, 0, true), col("nn", T::Long, 0, false)]);
    let ts = schema(&tm);
    let r = flat(&ts, vec![Value::Null, Value::Int(7)]);
    assert_eq!(field(&r, "n"), &Avro::Union(0, Box::new(Avro::Null)));
    let img = row(vec![Value::Int(1), Value::Null]);
    let e = AvroEncoder::new().encode_flat(&ts, Op::Create, None, Some(&img)).unwrap_err();
    assert_eq!(e.to_string(), "db.t: column nn: NULL in a NOT NULL column");

    // key: the primary key
    let key = AvroEncoder::new().encode_key(&ts, &row(vec![Value::Null, Value::Int(7)])).unwrap().unwrap();
    assert_eq!(key, Avro::Record(vec![("id".into(), Avro::Int(1))]));
    assert_eq!(ts.key_field_names(), ["id"]);
    assert_eq!(
        ts.key_schema_json().unwrap(),
        r#"{"type":"record","name":"Key","namespace":"sluice.db.t","fields":[{"name":"id","type":"int","default":0,"mysql.column":"id","mysql.type":"INT"}]}"#
    );

    // no primary key: null key; configured key columns (nullable ones stay nullable)
    let mut nopk = tm.clone();
    nopk.primary_key = None;
    nopk.columns[0].primary_key = false;
    assert!(schema(&nopk).key_schema().is_none());
    assert_eq!(AvroEncoder::new().encode_key(&schema(&nopk), &row(vec![Value::Null, Value::Int(7)])).unwrap(), None);
    let opts = SchemaOptions { key_columns: Some(vec!["nn".into(), "n".into()]), ..SchemaOptions::default() };
    let ts2 = TableSchema::new(&nopk, &opts).unwrap();
    let key = AvroEncoder::new().encode_key(&ts2, &row(vec![Value::Null, Value::Int(7)])).unwrap().unwrap();
    assert_eq!(
        key,
        Avro::Record(vec![("nn".into(), Avro::Int(7)), ("n".into(), Avro::Union(0, Box::new(Avro::Null)))])
    );
    let opts = SchemaOptions { key_columns: Some(vec!["nope".into()]), ..SchemaOptions::default() };
    let e = TableSchema::new(&nopk, &opts).unwrap_err();
    assert_eq!(e.to_string(), r#"db.t: configured key column "nope" is not a column of the table"#);

    // names: sanitized, original kept, collisions reported
    let mut odd = table(vec![col("order-total €", T::Long, 0, true), col("1st", T::Long, 0, true)]);
    odd.database = Arc::from("shop-eu");
    let ts3 = TableSchema::new(&odd, &SchemaOptions { prefix: "cdc".into(), ..SchemaOptions::default() }).unwrap();
    assert_eq!(ts3.namespace(), "cdc.shop_eu.t");
    let json = ts3.value_schema_json();
    assert!(
        json.contains(r#""name":"order_total__","type":["null","int"],"default":null,"mysql.column":"order-total €""#)
    );
    assert!(json.contains(r#""name":"_1st""#));
    let clash = table(vec![col("a-b", T::Long, 0, true), col("a b", T::Long, 0, true)]);
    let e = TableSchema::new(&clash, &SchemaOptions::default()).unwrap_err();
    assert_eq!(e.to_string(), r#"db.t: columns "a-b" and "a b" both become the Avro field name "a_b""#);
    let reserved = table(vec![col("__op", T::Long, 0, true)]);
    assert!(matches!(TableSchema::new(&reserved, &SchemaOptions::default()), Err(AvroError::NameCollision { .. })));
    let mut unnamed = table(vec![]);
    unnamed.columns[0].name = None;
    let e = TableSchema::new(&unnamed, &SchemaOptions::default()).unwrap_err();
    assert!(matches!(e, AvroError::MissingColumnNames { .. }), "{e}");
}

#[test]
fn envelope_and_flattened() {
    use ColumnType as T;
    let tm = table(vec![text("name", T::VarChar, 40, UTF8MB4)]);
    let ts = schema(&tm);
    let before = row(vec![Value::Text { bytes: b"old", collation: Some(UTF8MB4) }]);
    let after = row(vec![Value::Text { bytes: b"new", collation: Some(UTF8MB4) }]);
    let enc = AvroEncoder::new();
    let v = enc.encode_value(&ts, Op::Update, Some(&before), Some(&after), &ctx()).unwrap();
    let Avro::Record(env) = v else { panic!("not a record") };
    let row_of = |v: &Avro| match some(v) {
        Avro::Record(f) => f.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(some(field(&row_of(field(&env, "before")), "name")), &Avro::String("old".into()));
    assert_eq!(some(field(&row_of(field(&env, "after")), "name")), &Avro::String("new".into()));
    assert_eq!(field(&env, "op"), &Avro::String("u".into()));
    assert_eq!(field(&env, "ts_ms"), &Avro::Long(1_700_000_000_123));
    let Avro::Record(src) = field(&env, "source") else { panic!() };
    assert_eq!(field(src, "connector"), &Avro::String("mariadb".into()));
    assert_eq!(field(src, "pos"), &Avro::Long(4711));
    assert_eq!(field(src, "row"), &Avro::Int(2));
    assert_eq!(field(src, "gtid"), &Avro::Union(1, Box::new(Avro::String("0-1-42".into()))));
    assert_eq!(field(src, "db"), &Avro::String("db".into()));
    assert_eq!(field(src, "table"), &Avro::String("t".into()));
    assert_eq!(field(src, "snapshot"), &Avro::String("false".into()));
    let Avro::Record(tx) = some(field(&env, "transaction")) else { panic!() };
    assert_eq!(field(tx, "total_order"), &Avro::Long(3));

    // delete: before only; flattened carries the before image with __deleted
    let v = enc.encode_value(&ts, Op::Delete, Some(&before), None, &ctx()).unwrap();
    let Avro::Record(env) = v else { panic!() };
    assert_eq!(field(&env, "after"), &Avro::Union(0, Box::new(Avro::Null)));
    let v = enc.encode_flat(&ts, Op::Delete, Some(&before), None).unwrap();
    let Avro::Record(f) = v else { panic!() };
    assert_eq!(some(field(&f, "name")), &Avro::String("old".into()));
    assert_eq!(field(&f, "__op"), &Avro::String("d".into()));
    assert_eq!(field(&f, "__deleted"), &Avro::Boolean(true));
    let e = enc.encode_value(&ts, Op::Update, None, Some(&after), &ctx()).unwrap_err();
    assert_eq!(e.to_string(), "db.t: op u needs before and after images");
}

/// A truncate record (`op = "t"`) reads back under the table's envelope schema with both
/// images null, and under its flattened schema with `__op = "t"`, `__deleted = true` and every
/// column at its zero (every kind of column a flattened schema can hold: NOT NULL ones
/// included, whose zero is not null).
#[test]
fn truncate_records() {
    use ColumnType as T;
    let tm = table(vec![
        text("name", T::VarChar, 40, UTF8MB4),
        col("price", T::NewDecimal, (10 << 8) | 2, false),
        col("big", T::LongLong, 0, false),
        unsigned(col("ubig", T::LongLong, 0, false)),
        col("born", T::Date, 0, false),
        col("at", T::Timestamp2, 3, false),
        col("d", T::Double, 8, false),
        col("g", T::Geometry, 4, false),
        col("flags", T::Bit, 0x0203, false),
        {
            let mut e = col("e", T::Enum, 1, false);
            e.enum_values = names(&["a", "b"]);
            e
        },
        {
            let mut st = col("s", T::Set, 1, false);
            st.set_values = names(&["x", "y"]);
            st
        },
    ]);
    let ts = schema(&tm);
    let enc = AvroEncoder::new();
    let mut out = Vec::new();
    enc.write_truncate("db", "t", &ctx(), &mut out);
    let v = apache_avro::from_avro_datum(ts.value_schema(), &mut out.as_slice(), None).unwrap();
    let Avro::Record(env) = v else { panic!("not a record") };
    assert_eq!(field(&env, "before"), &Avro::Union(0, Box::new(Avro::Null)));
    assert_eq!(field(&env, "after"), &Avro::Union(0, Box::new(Avro::Null)));
    assert_eq!(field(&env, "op"), &Avro::String("t".into()));
    let Avro::Record(src) = field(&env, "source") else { panic!() };
    assert_eq!(field(src, "table"), &Avro::String("t".into()));
    assert_eq!(field(src, "pos"), &Avro::Long(4711));

    let mut out = Vec::new();
    enc.write_flat_truncate("db.t", ts.flat_schema(), &mut out).unwrap();
    let mut rest = out.as_slice();
    let v = apache_avro::from_avro_datum(ts.flat_schema(), &mut rest, None).unwrap();
    assert!(rest.is_empty(), "{} bytes left", rest.len());
    let Avro::Record(f) = v else { panic!("not a record") };
    assert_eq!(field(&f, "__op"), &Avro::String("t".into()));
    assert_eq!(field(&f, "__deleted"), &Avro::Boolean(true));
    assert_eq!(field(&f, "id"), &Avro::Int(0));
    assert_eq!(field(&f, "name"), &Avro::Union(0, Box::new(Avro::Null)));
    assert_eq!(field(&f, "big"), &Avro::Long(0));
    // the envelope schema is not a flattened one
    let e = enc.write_flat_truncate("db.t", ts.value_schema(), &mut Vec::new()).unwrap_err();
    assert!(e.to_string().contains("no __op field"), "{e}");
}

#[test]
fn minimal_row_images() {
    use ColumnType as T;
    let tm = table(vec![col("a", T::Long, 0, false), col("b", T::Long, 0, true)]);
    // MINIMAL before image of an update: the key only
    let before = RowImage { values: vec![Some(Value::Int(1)), None, None] };
    let after = RowImage { values: vec![None, Some(Value::Int(5)), Some(Value::Null)] };
    let enc = AvroEncoder::new();
    let e = enc.encode_value(&schema(&tm), Op::Update, Some(&before), Some(&after), &ctx()).unwrap_err();
    assert!(matches!(e, AvroError::AbsentColumn { ref column, image: "before", .. } if column == "a"), "{e}");

    let opts = SchemaOptions { partial_images: true, ..SchemaOptions::default() };
    let ts = TableSchema::new(&tm, &opts).unwrap();
    let v = enc.encode_value(&ts, Op::Update, Some(&before), Some(&after), &ctx()).unwrap();
    let Avro::Record(env) = v else { panic!() };
    let Avro::Record(b) = some(field(&env, "before")) else { panic!() };
    assert_eq!(field(b, "id"), &Avro::Union(1, Box::new(Avro::Int(1))));
    assert_eq!(field(b, "a"), &Avro::Union(0, Box::new(Avro::Null)));
    assert_eq!(field(b, "__absent"), &Avro::Array(vec![Avro::String("a".into()), Avro::String("b".into())]));
    // MINIMAL after image of an update: the changed columns only, so even the key may be
    // absent (the key record comes from the before image)
    let Avro::Record(a) = some(field(&env, "after")) else { panic!() };
    assert_eq!(field(a, "id"), &Avro::Union(0, Box::new(Avro::Null)));
    assert_eq!(field(a, "a"), &Avro::Union(1, Box::new(Avro::Int(5))));
    assert_eq!(field(a, "b"), &Avro::Union(0, Box::new(Avro::Null)));
    assert_eq!(field(a, "__absent"), &Avro::Array(vec![Avro::String("id".into())]), "b is SQL NULL, not absent");
    let key = enc.encode_key(&ts, &before).unwrap().unwrap();
    assert_eq!(key, Avro::Record(vec![("id".into(), Avro::Int(1))]));
    let e = enc.encode_key(&ts, &after).unwrap_err();
    assert!(matches!(e, AvroError::AbsentColumn { image: "key", .. }), "{e}");
}

#[test]
fn schema_evolution_under_backward_rules() {
    use ColumnType as T;
    let v1 = table(vec![text("name", T::VarChar, 40, UTF8MB4)]);
    let mut v2 = v1.clone();
    let mut added = col("note", T::Long, 0, true);
    added.index = 2;
    v2.columns.push(added);
    let (old, new) = (schema(&v1), schema(&v2));
    // BACKWARD: the new schema reads data written with the old one
    SchemaCompatibility::can_read(old.value_schema(), new.value_schema()).unwrap();
    SchemaCompatibility::can_read(old.flat_schema(), new.flat_schema()).unwrap();
    SchemaCompatibility::can_read(old.key_schema().unwrap(), new.key_schema().unwrap()).unwrap();
    // and really does: an old datum read with the new schema gets the default
    let img = row(vec![Value::Text { bytes: b"x", collation: Some(UTF8MB4) }]);
    let enc = AvroEncoder::new();
    let mut bytes = Vec::new();
    enc.write_flat(&old, Op::Create, None, Some(&img), &mut bytes).unwrap();
    let read = apache_avro::from_avro_datum(old.flat_schema(), &mut &bytes[..], Some(new.flat_schema()));
    let Avro::Record(f) = read.unwrap() else { panic!() };
    assert_eq!(field(&f, "note"), &Avro::Union(0, Box::new(Avro::Null)));

    // a NOT NULL column is BACKWARD compatible too: its field defaults to its type's zero, which
    // is what an old record reads as
    let mut v3 = v1.clone();
    let mut added = col("required", T::Long, 0, false);
    added.index = 2;
    v3.columns.push(added);
    let new3 = schema(&v3);
    SchemaCompatibility::can_read(old.value_schema(), new3.value_schema()).unwrap();
    let read = apache_avro::from_avro_datum(old.flat_schema(), &mut &bytes[..], Some(new3.flat_schema()));
    let Avro::Record(f) = read.unwrap() else { panic!() };
    assert_eq!(field(&f, "required"), &Avro::Int(0));
    // ... except a NOT NULL DECIMAL, which gets no default (apache-avro cannot parse one)
    let mut v5 = v1.clone();
    let mut added = col("amount", T::NewDecimal, 0x0a02, false);
    added.index = 2;
    v5.columns.push(added);
    assert!(SchemaCompatibility::can_read(old.value_schema(), schema(&v5).value_schema()).is_err());

    // a type change is reported incompatible
    let mut v4 = v1.clone();
    v4.columns[1] = col("name", T::Long, 0, true);
    v4.columns[1].index = 1;
    assert!(SchemaCompatibility::can_read(old.value_schema(), schema(&v4).value_schema()).is_err());
    // widening INT to BIGINT is a legal Avro promotion (int -> long)
    let mut v5 = v4.clone();
    v5.columns[1] = col("name", T::LongLong, 0, true);
    v5.columns[1].index = 1;
    SchemaCompatibility::can_read(schema(&v4).value_schema(), schema(&v5).value_schema()).unwrap();
    // a new ENUM member is compatible; a removed one is not
    let mut e = col("e", T::Enum, 1, true);
    e.enum_values = names(&["a", "b"]);
    let mut e2 = e.clone();
    e2.enum_values = names(&["a", "b", "c"]);
    let (s1, s2) = (schema(&table(vec![e])), schema(&table(vec![e2])));
    SchemaCompatibility::can_read(s1.value_schema(), s2.value_schema()).unwrap();
    assert!(SchemaCompatibility::can_read(s2.value_schema(), s1.value_schema()).is_err());
}

/// An envelope written with the event's [`EnvelopeParts`] is byte for byte the one written field
/// by field, for every row and counter of the event, with and without GTID and transaction.
#[test]
fn envelope_parts_write_the_same_bytes() {
    let tm = table(vec![col("n", ColumnType::Long, 0, true)]);
    let ts = schema(&tm);
    let enc = AvroEncoder::new();
    let mut no_gtid = ctx();
    no_gtid.source.gtid = None;
    no_gtid.transaction = None;
    for mut c in [ctx(), no_gtid] {
        let parts = EnvelopeParts::new(&c, &ts.database, &ts.table);
        for (row, order) in [(0u32, 1i64), (1, 2), (300, 70_000)] {
            c.source.row = row;
            if let Some(t) = c.transaction.as_mut() {
                (t.total_order, t.data_collection_order) = (order, order - 1);
            }
            let img = row_of(row);
            let (mut plain, mut copied) = (Vec::new(), Vec::new());
            enc.write_value(&ts, Op::Update, Some(&img), Some(&img), &c, None, &mut plain).unwrap();
            enc.write_value(&ts, Op::Update, Some(&img), Some(&img), &c, Some(&parts), &mut copied).unwrap();
            assert_eq!(copied, plain, "row {row}, gtid {:?}", c.source.gtid);
            let Avro::Record(env) = read_verified(&ts, ts.value_schema(), &copied) else { panic!("not a record") };
            let Avro::Record(src) = field(&env, "source") else { panic!("no source") };
            assert_eq!(field(src, "row"), &Avro::Int(i32::try_from(row).unwrap()));
        }
    }
}

fn row_of(n: u32) -> RowImage<'static> {
    RowImage { values: vec![Some(Value::Int(i64::from(n))), Some(Value::Null)] }
}

/// Writes a change's value record as `op` with its before and (or) after image.
type WriteValue<'a> = &'a dyn Fn(Op, bool, bool, &mut Vec<u8>) -> Result<()>;

/// A change's key and value records the values' way (`write_key`, `write_value`, in the order
/// `Out::change` calls them: the before image's key, the after image's, then the records) and
/// [`RowWriter`]'s: the same bytes, or the same first error.
fn both_ways(
    ts: &TableSchema,
    op: Op,
    before: Option<&RowImage<'_>>,
    after: Option<&RowImage<'_>>,
) -> [Result<Vec<Vec<u8>>, String>; 2] {
    let enc = AvroEncoder::new();
    let ctx = ctx();
    let records = |kb: Vec<u8>, ka: Vec<u8>, value: WriteValue<'_>| {
        let mut out = vec![kb.clone(), ka.clone()];
        let ops = if op == Op::Update && kb != ka {
            vec![(Op::Delete, true, false), (Op::Create, false, true)]
        } else {
            vec![(op, before.is_some(), after.is_some())]
        };
        for (op, b, a) in ops {
            let mut v = Vec::new();
            value(op, b, a, &mut v).map_err(|e| e.to_string())?;
            out.push(v);
        }
        Ok::<_, String>(out)
    };
    let values = (|| {
        let (mut kb, mut ka) = (Vec::new(), Vec::new());
        for (img, buf) in [(before, &mut kb), (after, &mut ka)] {
            if let Some(img) = img {
                enc.write_key(ts, img, buf).map_err(|e| e.to_string())?;
            }
        }
        records(kb, ka, &|op, b, a, out| {
            enc.write_value(ts, op, before.filter(|_| b), after.filter(|_| a), &ctx, None, out)
        })
    })();
    let written = (|| {
        let mut w = RowWriter::new(&enc, ts, &mut RowBuffers::default()).expect("key in column order");
        for (is_before, img) in [(true, before), (false, after)] {
            if let Some(img) = img {
                w.image(is_before);
                for (i, v) in img.values.iter().enumerate() {
                    if let Some(v) = v {
                        w.value(i, v);
                    }
                }
            }
        }
        w.check().map_err(|e| e.to_string())?;
        let key = |b: bool, img: Option<&RowImage<'_>>| img.and_then(|_| w.key(b)).unwrap_or_default().to_vec();
        records(key(true, before), key(false, after), &|op, b, a, out| {
            w.write_value(op, b, a, &ctx, None, out);
            Ok(())
        })
    })();
    [values, written]
}

/// [`RowWriter`] writes what the values' way writes, key changes included, and where values do
/// not fit it reports the error the values' way meets first: a key column's before a value
/// column's, the before image's key before the after image's.
#[test]
fn the_row_writer_writes_and_fails_as_the_values_way() {
    use ColumnType as T;
    let mut st = col("st", T::Set, 1, true);
    st.set_values = names(&["x", "y"]);
    let tm = table(vec![col("a", T::Long, 0, false), st]);
    // the key is `a` (column 1): `id` (column 0) comes before it in every image
    let opts = SchemaOptions { prefix: "sluice".into(), key_columns: Some(vec!["a".into()]), ..Default::default() };
    let ts = TableSchema::new(&tm, &opts).unwrap();
    let img = |id: Value<'static>, a: Value<'static>, st: u64| RowImage {
        values: vec![Some(id), Some(a), Some(Value::Set(st))],
    };
    let (ok1, ok2) = (img(Value::Int(1), Value::Int(5), 1), img(Value::Int(1), Value::Int(5), 2));
    let keyed = img(Value::Int(1), Value::Int(6), 3);
    let null_id = img(Value::Null, Value::Int(5), 0);
    let null_both = img(Value::Null, Value::Null, 0);
    let null_a = img(Value::Int(1), Value::Null, 0);
    let bad_set = img(Value::Int(1), Value::Int(5), 0b100);
    // (op, before image, after image, the column a failure names)
    type Case<'a> = (Op, Option<&'a RowImage<'a>>, Option<&'a RowImage<'a>>, Option<&'a str>);
    let cases: [Case<'_>; 8] = [
        (Op::Create, None, Some(&ok1), None),
        (Op::Update, Some(&ok1), Some(&ok2), None),
        // the key changed: a delete and a create
        (Op::Update, Some(&ok1), Some(&keyed), None),
        (Op::Delete, Some(&ok1), None, None),
        // `id` and `a` NULL: the key's column is named, though `id` comes first
        (Op::Create, None, Some(&null_both), Some("column a")),
        // a value error in the before image, a key error in the after image: the key's
        (Op::Update, Some(&null_id), Some(&null_a), Some("column a")),
        (Op::Update, Some(&null_a), Some(&null_id), Some("column a")),
        (Op::Update, Some(&bad_set), Some(&null_id), Some("column st")),
    ];
    for (op, before, after, fails) in cases {
        let [values, written] = both_ways(&ts, op, before, after);
        assert_eq!(written, values, "{op:?} {before:?} {after:?}");
        match fails {
            Some(column) => assert!(values.as_ref().is_err_and(|e| e.contains(column)), "{values:?}"),
            None => assert!(values.is_ok_and(|r| r.len() == 2 + usize::from(after == Some(&keyed)) + 1)),
        }
    }
}

/// [`RowWriter`]s made one per rows event from the buffers the one before gave back (as
/// `Reading` does) write what a fresh writer writes for each change: an UPDATE's before image
/// moved aside does not linger into the next change or event.
#[test]
fn row_writers_on_kept_buffers_write_as_fresh_ones() {
    use ColumnType as T;
    let ts = schema(&table(vec![col("v", T::Long, 0, true)]));
    let img = |id: i64, v: i64| RowImage { values: vec![Some(Value::Int(id)), Some(Value::Int(v))] };
    let (a, b, c) = (img(1, 10), img(1, 11), img(2, 20));
    let (enc, ctx) = (AvroEncoder::new(), ctx());
    type Change<'a> = (Option<&'a RowImage<'a>>, Option<&'a RowImage<'a>>);
    let events: [(Op, Vec<Change<'_>>); 5] = [
        (Op::Update, vec![(Some(&a), Some(&b)), (Some(&b), Some(&c))]),
        (Op::Create, vec![(None, Some(&c))]),
        (Op::Delete, vec![(Some(&a), None), (Some(&c), None)]),
        (Op::Create, vec![(None, Some(&a)), (None, Some(&b))]),
        (Op::Update, vec![(Some(&c), Some(&a))]),
    ];
    let write = |w: &mut RowWriter<'_>, op: Op, (before, after): Change<'_>| {
        for (is_before, image) in [(true, before), (false, after)] {
            if let Some(image) = image {
                w.image(is_before);
                for (i, v) in image.values.iter().enumerate() {
                    w.value(i, v.as_ref().unwrap());
                }
            }
        }
        w.check().unwrap();
        let mut value = Vec::new();
        w.write_value(op, before.is_some(), after.is_some(), &ctx, None, &mut value);
        let keys = [before.and_then(|_| w.key(true)), after.and_then(|_| w.key(false))].map(|k| k.map(<[u8]>::to_vec));
        (keys, value, w.written_len())
    };
    let mut bufs = RowBuffers::default();
    for (op, changes) in events {
        let mut kept = RowWriter::new(&enc, &ts, &mut bufs).unwrap();
        for change in changes {
            let fresh = write(&mut RowWriter::new(&enc, &ts, &mut RowBuffers::default()).unwrap(), op, change);
            assert_eq!(write(&mut kept, op, change), fresh, "{op:?} {change:?}");
        }
        bufs = kept.into_buffers();
    }
}

/// The block-wise ASCII check agrees with the standard library's for every length up to three
/// blocks and a byte above 0x7F at every place (or none), at every alignment.
#[test]
fn all_ascii_agrees_with_is_ascii() {
    let text: Vec<u8> = (0..120u8).map(|i| b' ' + i % 90).collect();
    for skew in 0..8 {
        for len in 0..100 {
            let mut bytes = text[skew..skew + len].to_vec();
            assert_eq!(super::all_ascii(&bytes), bytes.is_ascii(), "len {len}, skew {skew}");
            for at in 0..len {
                let keep = bytes[at];
                for high in [0x80, 0xC3, 0xFF] {
                    bytes[at] = high;
                    assert!(!super::all_ascii(&bytes), "len {len}, 0x{high:X} at {at}");
                }
                bytes[at] = keep;
            }
        }
    }
}
