//! **Where a snapshot row's value becomes the binlog's [`Value`]** for the same column, so that
//! it is encoded by the same code into the same Avro bytes as a streamed change: the binary
//! protocol's integers, FLOAT and DOUBLE as they are; DATE, DATETIME and TIME fields as the
//! binlog decoder builds them; TIMESTAMP (read with `time_zone = '+00:00'`) back to seconds since
//! the epoch; DECIMAL digits parsed with the column's scale; ENUM and SET read as numbers
//! (`+0`: the index and the bit mask); BIT from its big-endian bytes; GEOMETRY split into SRID
//! and WKB; strings in the column's own character set (`character_set_results = NULL`);
//! MySQL's binary JSON from its text, which the server prints as the binlog decoder does.
//!
//! Also here: a row's identity by its chunk-key values (to find the rows of a chunk that a
//! binlog event changed) and the SQL literal of a key value (to ask for the rows after it).

use std::borrow::Cow;
use std::fmt::Write as _;

use sluice_binlog::charset::{charset_of, BINARY_COLLATION};
use sluice_binlog::decimal::Decimal;
use sluice_binlog::jsonb::JsonValue;
use sluice_binlog::temporal::{days_from_civil, Date, DateTime, Time, Timestamp};
use sluice_binlog::{Column, ColumnType, Value};
use sluice_protocol::stmt::BinaryValue;

/// Why a value read by a snapshot cannot be turned into its column's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: {why}")]
pub struct ValueError {
    /// The column.
    pub column: String,
    /// What was wrong.
    pub why: String,
}

/// [`to_value_with`]'s value itself (the tests').
#[cfg(test)]
pub fn to_value<'a>(v: BinaryValue<'a>, col: &Column) -> Result<Value<'a>, ValueError> {
    to_value_with(v, col, |value| value)
}

/// The binlog form of `v`, a value of column `col` as the snapshot's SELECT returned it, handed
/// to `emit` in the arm that makes it. As with the binlog's `decode_value_with`, and for the same
/// reason: a row parser that stored each value as one `match` returned it reloaded every value
/// wider than it was stored, a store-forwarding stall on every value (over half of the row
/// parser's time in a snapshot's profile).
///
/// # Errors
/// A value whose form does not fit the column (the table changed under the reader, or a
/// server that answers differently than expected), named by column; `emit` is not called then.
#[inline(always)]
pub fn to_value_with<'a, T>(
    v: BinaryValue<'a>,
    col: &Column,
    emit: impl FnOnce(Value<'a>) -> T,
) -> Result<T, ValueError> {
    use ColumnType as T;
    let bad = |what: &str| ValueError {
        column: col.display_name(),
        why: format!("the server sent {what} for a column of type {}", col.ty.name()),
    };
    let form = |v: &BinaryValue<'_>| match v {
        BinaryValue::Null => "NULL",
        BinaryValue::Int(_) | BinaryValue::UInt(_) => "an integer",
        BinaryValue::Float(_) => "a FLOAT",
        BinaryValue::Double(_) => "a DOUBLE",
        BinaryValue::DateTime { .. } => "a date",
        BinaryValue::Time { .. } => "a time",
        BinaryValue::Bytes(_) => "a string",
    };
    let fsp = u8::try_from(col.meta.min(6)).unwrap_or(0);
    Ok(match (col.ty, v) {
        (_, BinaryValue::Null) => emit(Value::Null),
        (T::Tiny | T::Short | T::Int24 | T::Long | T::LongLong, v) => match (v, col.unsigned) {
            (BinaryValue::Int(i), false) => emit(Value::Int(i)),
            (BinaryValue::UInt(u), true) => emit(Value::UInt(u)),
            // a server that does not flag the column UNSIGNED in the result: the bits decide
            (BinaryValue::Int(i), true) => emit(Value::UInt(u64::try_from(i).map_err(|_| bad("a negative integer"))?)),
            (BinaryValue::UInt(u), false) => {
                emit(Value::Int(i64::try_from(u).map_err(|_| bad("an integer beyond BIGINT"))?))
            }
            (other, _) => return Err(bad(form(&other))),
        },
        (T::Float, BinaryValue::Float(f)) => emit(Value::Float(f)),
        (T::Double, BinaryValue::Double(d)) => emit(Value::Double(d)),
        (T::NewDecimal, BinaryValue::Bytes(b)) => {
            let d = Decimal::from_ascii(b)
                .map_err(|_| bad(&format!("the DECIMAL text {:?}", String::from_utf8_lossy(b))))?;
            emit(Value::Decimal(d))
        }
        (T::Year, BinaryValue::Int(y)) => emit(Value::Year(u16::try_from(y).map_err(|_| bad("a YEAR out of range"))?)),
        (T::Year, BinaryValue::UInt(y)) => emit(Value::Year(u16::try_from(y).map_err(|_| bad("a YEAR out of range"))?)),
        (T::Date | T::NewDate, BinaryValue::DateTime { year, month, day, .. }) => {
            emit(Value::Date(Date { year, month, day }))
        }
        (T::DateTime | T::DateTime2, BinaryValue::DateTime { year, month, day, hour, minute, second, micros }) => {
            emit(Value::DateTime(DateTime { year, month, day, hour, minute, second, micros, fsp }))
        }
        (T::Timestamp | T::Timestamp2, BinaryValue::DateTime { year, month, day, hour, minute, second, micros }) => {
            // read in UTC (the session's time_zone is +00:00); all zero is the zero TIMESTAMP
            let seconds = if year == 0 && month == 0 && day == 0 {
                0
            } else {
                let days = days_from_civil(i64::from(year), u32::from(month), u32::from(day));
                let s = days * 86_400 + i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second);
                u32::try_from(s).map_err(|_| bad("a TIMESTAMP out of range"))?
            };
            emit(Value::Timestamp(Timestamp { seconds, micros, fsp }))
        }
        (T::Time | T::Time2, BinaryValue::Time { negative, days, hours, minutes, seconds, micros }) => {
            emit(Value::Time(Time { negative, hours: days * 24 + u32::from(hours), minutes, seconds, micros, fsp }))
        }
        (
            T::VarChar | T::VarString | T::String | T::TinyBlob | T::Blob | T::MediumBlob | T::LongBlob,
            BinaryValue::Bytes(b),
        ) => {
            if col.collation == Some(BINARY_COLLATION) {
                emit(Value::Bytes(Cow::Borrowed(b)))
            } else {
                emit(Value::Text { bytes: b, collation: col.collation })
            }
        }
        (T::Enum, v) => {
            let n = number(v).and_then(|n| u16::try_from(n).ok()).ok_or_else(|| bad("an ENUM index out of range"))?;
            emit(Value::Enum(n))
        }
        (T::Set, v) => emit(Value::Set(number(v).ok_or_else(|| bad("a SET mask that is not a number"))?)),
        (T::Bit, BinaryValue::Bytes(b)) => {
            let [bytes, bits] = col.meta.to_be_bytes();
            if b.len() > 8 {
                return Err(bad("a BIT value over 8 bytes"));
            }
            emit(Value::Bit {
                value: b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)),
                bits: u16::from(bytes) * 8 + u16::from(bits),
            })
        }
        (T::Json, BinaryValue::Bytes(b)) => {
            let doc: serde_json::Value = serde_json::from_slice(b).map_err(|_| bad("JSON text that does not parse"))?;
            emit(Value::Json(Box::new(json_value(doc))))
        }
        (T::Geometry, BinaryValue::Bytes(b)) => {
            let (srid, wkb) = b.split_at_checked(4).ok_or_else(|| bad("a GEOMETRY shorter than its SRID"))?;
            let srid = u32::from_le_bytes(srid.try_into().map_err(|_| bad("a GEOMETRY shorter than its SRID"))?);
            emit(Value::Geometry { srid, wkb })
        }
        (T::Vector, BinaryValue::Bytes(b)) => emit(Value::Vector(b)),
        (_, other) => return Err(bad(form(&other))),
    })
}

/// An integer result (ENUM and SET read with `+0`).
fn number(v: BinaryValue<'_>) -> Option<u64> {
    match v {
        BinaryValue::Int(i) => u64::try_from(i).ok(),
        BinaryValue::UInt(u) => Some(u),
        // `+0` of a SET is DOUBLE on some servers: the mask is exact below 2^53
        BinaryValue::Double(d) if d >= 0.0 && d.fract() == 0.0 && d < 9.007_199_254_740_992e15 => {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let n = d as u64;
            Some(n)
        }
        BinaryValue::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// MySQL's JSON text as the binlog decoder's document: members in the order printed (the
/// order the server stores them in), integers as integers, other numbers as doubles.
fn json_value(v: serde_json::Value) -> JsonValue {
    match v {
        serde_json::Value::Null => JsonValue::Null,
        serde_json::Value::Bool(b) => JsonValue::Bool(b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                JsonValue::Int(i)
            } else if let Some(u) = n.as_u64() {
                JsonValue::UInt(u)
            } else {
                JsonValue::Double(n.as_f64().unwrap_or(0.0))
            }
        }
        serde_json::Value::String(s) => JsonValue::String(s),
        serde_json::Value::Array(a) => JsonValue::Array(a.into_iter().map(json_value).collect()),
        serde_json::Value::Object(o) => JsonValue::Object(o.into_iter().map(|(k, v)| (k, json_value(v))).collect()),
    }
}

/// Writes the identity of a row by the values of its `key` columns into `out` (cleared); false
/// when the image lacks one of them (a partial image), so the caller cannot match it.
pub fn identity(values: &[Option<Value<'_>>], key: &[usize], out: &mut Vec<u8>) -> bool {
    out.clear();
    for &k in key {
        let Some(Some(v)) = values.get(k) else { return false };
        let bytes = |out: &mut Vec<u8>, tag: u8, b: &[u8]| {
            out.push(tag);
            out.extend_from_slice(&u64::try_from(b.len()).unwrap_or(u64::MAX).to_le_bytes());
            out.extend_from_slice(b);
        };
        match v {
            Value::Null => out.push(0),
            Value::Int(i) => bytes(out, 1, &i.to_le_bytes()),
            Value::UInt(u) => bytes(out, 2, &u.to_le_bytes()),
            Value::Float(f) => bytes(out, 3, &f.to_le_bytes()),
            Value::Double(d) => bytes(out, 4, &d.to_le_bytes()),
            Value::Decimal(d) => bytes(out, 5, d.to_string().as_bytes()),
            Value::Year(y) => bytes(out, 6, &y.to_le_bytes()),
            Value::Date(d) => bytes(out, 7, &[d.year.to_le_bytes()[0], d.year.to_le_bytes()[1], d.month, d.day]),
            Value::Time(t) => bytes(out, 8, &t.to_micros().to_le_bytes()),
            Value::DateTime(t) => bytes(out, 9, t.to_string().as_bytes()),
            Value::Timestamp(t) => bytes(out, 10, &t.micros().to_le_bytes()),
            Value::Text { bytes: b, .. } => bytes(out, 11, b),
            Value::Bytes(b) => bytes(out, 12, b),
            Value::Enum(e) => bytes(out, 13, &e.to_le_bytes()),
            Value::Set(s) => bytes(out, 14, &s.to_le_bytes()),
            Value::Bit { value, .. } => bytes(out, 15, &value.to_le_bytes()),
            // not chunk-key types (see plan::orderable)
            Value::Json(_) | Value::JsonDiff(_) | Value::Geometry { .. } | Value::Vector(_) => return false,
        }
    }
    true
}

/// The SQL literal of a chunk-key value, exact in the column's own terms: numbers as written,
/// strings as hex in their character set (`_latin1 X'E9'`, `X'00ff'` for binary), dates and
/// times quoted (TIMESTAMP in UTC, which the session's time zone is). None for a value that
/// cannot be a chunk key.
pub fn sql_literal(v: &Value<'_>) -> Option<String> {
    let hex = |b: &[u8]| {
        let mut s = String::with_capacity(b.len() * 2);
        for x in b {
            let _ = write!(s, "{x:02X}");
        }
        s
    };
    Some(match v {
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Decimal(d) => d.to_string(),
        Value::Year(y) => y.to_string(),
        Value::Enum(e) => e.to_string(),
        Value::Set(s) => s.to_string(),
        Value::Bit { value, .. } => value.to_string(),
        Value::Date(d) => format!("'{d}'"),
        Value::DateTime(t) => format!("'{t}'"),
        Value::Time(t) => format!("'{t}'"),
        Value::Timestamp(t) => {
            let DateTime { year, month, day, hour, minute, second, micros, .. } = t.to_utc();
            format!("'{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}.{micros:06}'")
        }
        Value::Bytes(b) => format!("X'{}'", hex(b)),
        Value::Text { bytes, collation } => {
            let charset = collation.and_then(charset_of)?.name();
            // `_utf8mb3` is not known to older servers; `_utf8` is the same everywhere
            let charset = if charset == "utf8mb3" { "utf8" } else { charset };
            format!("_{charset} X'{}'", hex(bytes))
        }
        Value::Null | Value::Float(_) | Value::Double(_) | Value::Json(_) | Value::JsonDiff(_) => return None,
        Value::Geometry { .. } | Value::Vector(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(ty: ColumnType, meta: u16) -> Column {
        Column::new(0, ty, meta, true)
    }

    #[test]
    fn binary_values_become_binlog_values() {
        let dt = |year, month, day, hour, minute, second, micros| BinaryValue::DateTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            micros,
        };
        let mut u = col(ColumnType::LongLong, 0);
        u.unsigned = true;
        assert_eq!(to_value(BinaryValue::UInt(u64::MAX), &u).unwrap(), Value::UInt(u64::MAX));
        assert_eq!(to_value(BinaryValue::Int(-1), &col(ColumnType::Tiny, 0)).unwrap(), Value::Int(-1));
        assert!(to_value(BinaryValue::Int(-1), &u).is_err());
        let d = to_value(BinaryValue::Bytes(b"-0.50"), &col(ColumnType::NewDecimal, 0x0a02)).unwrap();
        assert!(matches!(&d, Value::Decimal(d) if d.to_string() == "-0.50"));
        // 2024-01-31 12:00:00.12 UTC
        let ts = to_value(dt(2024, 1, 31, 12, 0, 0, 120_000), &col(ColumnType::Timestamp2, 2)).unwrap();
        assert_eq!(ts, Value::Timestamp(Timestamp { seconds: 1_706_702_400, micros: 120_000, fsp: 2 }));
        let zero = to_value(dt(0, 0, 0, 0, 0, 0, 0), &col(ColumnType::Timestamp2, 0)).unwrap();
        assert_eq!(zero, Value::Timestamp(Timestamp { seconds: 0, micros: 0, fsp: 0 }));
        let t = BinaryValue::Time { negative: true, days: 34, hours: 22, minutes: 59, seconds: 59, micros: 0 };
        let t = to_value(t, &col(ColumnType::Time2, 0)).unwrap();
        assert_eq!(t, Value::Time(Time { negative: true, hours: 838, minutes: 59, seconds: 59, micros: 0, fsp: 0 }));
        assert_eq!(to_value(BinaryValue::Int(3), &col(ColumnType::Enum, 1)).unwrap(), Value::Enum(3));
        assert_eq!(to_value(BinaryValue::Double(5.0), &col(ColumnType::Set, 1)).unwrap(), Value::Set(5));
        assert_eq!(
            to_value(BinaryValue::Bytes(&[0x01, 0x02]), &col(ColumnType::Bit, 0x0102)).unwrap(),
            Value::Bit { value: 0x0102, bits: 10 }
        );
        let g = to_value(BinaryValue::Bytes(&[1, 0, 0, 0, 9, 9]), &col(ColumnType::Geometry, 4)).unwrap();
        assert_eq!(g, Value::Geometry { srid: 1, wkb: &[9, 9] });
        let mut text = col(ColumnType::VarChar, 40);
        text.collation = Some(8);
        assert_eq!(
            to_value(BinaryValue::Bytes(b"\xe9"), &text).unwrap(),
            Value::Text { bytes: b"\xe9", collation: Some(8) }
        );
        text.collation = Some(BINARY_COLLATION);
        assert_eq!(to_value(BinaryValue::Bytes(b"\0"), &text).unwrap(), Value::Bytes(Cow::Borrowed(b"\0")));
        let e = to_value(BinaryValue::Double(1.0), &col(ColumnType::Date, 0)).unwrap_err();
        assert!(e.to_string().contains("sent a DOUBLE for a column of type DATE"), "{e}");
    }

    #[test]
    fn json_text_renders_as_the_binlog_document_does() {
        // MySQL prints a JSON column as the binlog decoder renders its binary form
        for text in [r#"{"a": 1, "bb": [1.5, -2, 3.0, null, true]}"#, r#"["x\"y", 18446744073709551615, 1e300]"#] {
            let v = to_value(BinaryValue::Bytes(text.as_bytes()), &col(ColumnType::Json, 4)).unwrap();
            let Value::Json(j) = v else { panic!() };
            let again = j.to_string();
            let v2 = to_value(BinaryValue::Bytes(again.as_bytes()), &col(ColumnType::Json, 4)).unwrap();
            assert_eq!(v2, Value::Json(j.clone()), "{text} -> {again}");
        }
        let Value::Json(j) = to_value(BinaryValue::Bytes(b"[3.0, 0.1]"), &col(ColumnType::Json, 4)).unwrap() else {
            panic!()
        };
        assert_eq!(j.to_string(), "[3.0, 0.1]");
    }

    #[test]
    fn identities_and_literals() {
        let mut buf = Vec::new();
        let row = vec![Some(Value::Int(5)), None, Some(Value::Text { bytes: b"ab", collation: Some(45) })];
        assert!(identity(&row, &[0, 2], &mut buf));
        let first = buf.clone();
        let row2 = vec![Some(Value::Int(5)), Some(Value::Int(9)), Some(Value::Text { bytes: b"ab", collation: None })];
        assert!(identity(&row2, &[0, 2], &mut buf));
        assert_eq!(buf, first, "the collation is not part of a value's identity");
        assert!(!identity(&row, &[1], &mut buf), "an absent key column");
        // ("a", "bc") and ("ab", "c") differ
        let t = |b: &'static [u8]| Some(Value::Bytes(Cow::Borrowed(b)));
        identity(&[t(b"a"), t(b"bc")], &[0, 1], &mut buf);
        let one = buf.clone();
        identity(&[t(b"ab"), t(b"c")], &[0, 1], &mut buf);
        assert_ne!(one, buf);

        assert_eq!(sql_literal(&Value::Int(-3)).unwrap(), "-3");
        assert_eq!(sql_literal(&Value::Text { bytes: b"\xe9", collation: Some(8) }).unwrap(), "_latin1 X'E9'");
        assert_eq!(sql_literal(&Value::Text { bytes: b"a", collation: Some(33) }).unwrap(), "_utf8 X'61'");
        assert_eq!(sql_literal(&Value::Bytes(Cow::Borrowed(&[0, 255]))).unwrap(), "X'00FF'");
        let ts = Value::Timestamp(Timestamp { seconds: 1_706_702_400, micros: 5, fsp: 6 });
        assert_eq!(sql_literal(&ts).unwrap(), "'2024-01-31 12:00:00.000005'");
        assert_eq!(sql_literal(&Value::Double(1.0)), None);
    }
}
