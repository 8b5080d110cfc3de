//! **Where a record becomes a document**: a decoded Avro record (key and value) becomes a bulk
//! action: the `_id` from the key, the row's columns by name from the after image (an envelope
//! or a flattened value), each value in the form `sluice dump` prints it (exact DECIMAL text, integers
//! beyond ±2^53 as text, ISO dates with the column's fractional digits, base64 bytes, ENUM and SET by name,
//! JSON as JSON) except where the mapping wants another (TIME as microseconds, BIT(n) as a number, a
//! POINT as `{lat, lon}`). A delete, a tombstone or a flattened `__deleted` is a delete; a
//! truncate record (`op` or `__op` = `t`) empties the table's documents of its partition.
//!
//! `_id`: a one-column key's value as text (an integer in decimal, a string as it is); a
//! composite key as a JSON array of the values in key order, without spaces (`[7,"k1"]`).

use apache_avro::types::Value as Avro;
use base64::Engine as _;
use serde_json::{Map, Number, Value as Json};

use super::mapping::{Field, Kind, Layout};
use crate::config::{EsJson, EsTime};

/// What a record asks of the index.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Index (create or replace) the document.
    Index(Map<String, Json>),
    /// Delete the document.
    Delete,
    /// Delete every document of the table this record's partition wrote before it (a truncate
    /// record: `op = "t"`, no key).
    Truncate,
}

/// A value Sluice cannot put into a document (named by column).
#[derive(Debug, thiserror::Error)]
#[error("column {column}: {what}")]
pub struct DocError {
    /// The column.
    pub column: String,
    /// What is wrong.
    pub what: String,
}

fn doc_err(column: &str, what: impl Into<String>) -> DocError {
    DocError { column: column.to_string(), what: what.into() }
}

/// How values are written (the parts of `[elasticsearch]` that decide it).
#[derive(Debug, Clone, Copy)]
pub struct Forms {
    /// TIME as microseconds or text.
    pub time: EsTime,
    /// JSON as JSON or as its text.
    pub json: EsJson,
}

/// The `_id` of a key record.
///
/// # Errors
/// A key value that cannot be written (named by column).
pub fn document_id(key: &Avro, fields: &[Field], forms: Forms) -> Result<String, DocError> {
    let values = record_json(key, fields, forms)?;
    Ok(id_of(&values.iter().collect::<Vec<_>>()))
}

/// What a value record asks for; `None` for a tombstone (also a delete).
///
/// # Errors
/// A record that is not of the layout's shape, or a value that cannot be written.
pub fn action(value: Option<&Avro>, layout: &Layout, forms: Forms) -> Result<Action, DocError> {
    Ok(match row_of(value, layout)? {
        Row::Truncate => Action::Truncate,
        Row::Delete => Action::Delete,
        Row::Written(row) => Action::Index(record_values(row, &layout.fields, forms)?.into_iter().collect()),
    })
}

/// What a value record holds: a truncate, a delete, or the row it writes.
pub(crate) enum Row<'a> {
    /// A truncate record.
    Truncate,
    /// A delete, a tombstone (None), or a flattened `__deleted`.
    Delete,
    /// The row a create, update or read writes (the after image, or the flattened record).
    Written(&'a Avro),
}

/// The row of a value record (None: a tombstone).
///
/// # Errors
/// A record that is not of the layout's shape.
pub(crate) fn row_of<'a>(value: Option<&'a Avro>, layout: &Layout) -> Result<Row<'a>, DocError> {
    let Some(value) = value else { return Ok(Row::Delete) };
    let Avro::Record(top) = value else { return Err(doc_err("(record)", "the value is not a record")) };
    let get = |name: &str| top.iter().find(|(k, _)| k == name).map(|(_, v)| unwrap(v));
    if layout.flattened {
        if matches!(get("__op"), Some(Avro::String(op)) if op == "t") {
            return Ok(Row::Truncate);
        }
        if matches!(get("__deleted"), Some(Avro::Boolean(true))) {
            return Ok(Row::Delete);
        }
        return Ok(Row::Written(value));
    }
    match get("op") {
        Some(Avro::String(op)) if op == "d" => return Ok(Row::Delete),
        Some(Avro::String(op)) if op == "t" => return Ok(Row::Truncate),
        Some(Avro::String(_)) => {}
        other => return Err(doc_err("(op)", format!("the envelope's op is {other:?}"))),
    }
    match get("after") {
        Some(after @ Avro::Record(_)) => Ok(Row::Written(after)),
        other => Err(doc_err("(after)", format!("a create or update without an after image: {other:?}"))),
    }
}

/// The layout's columns of a record, as (column name, JSON value).
fn record_values(record: &Avro, fields: &[Field], forms: Forms) -> Result<Vec<(String, Json)>, DocError> {
    let values = record_json(record, fields, forms)?;
    Ok(fields.iter().map(|f| f.column.clone()).zip(values).collect())
}

/// The layout's columns of a record, as JSON values in the fields' order: the normal form
/// `sluice verify` compares rows in.
///
/// # Errors
/// A field missing from the record, or a value that cannot be written (named by column).
pub(crate) fn record_json(record: &Avro, fields: &[Field], forms: Forms) -> Result<Vec<Json>, DocError> {
    let Avro::Record(values) = unwrap(record) else { return Err(doc_err("(record)", "not a record")) };
    fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            // the fields come in the record's order; a search only when they do not
            let v = match values.get(i) {
                Some((k, v)) if *k == f.avro => v,
                _ => values
                    .iter()
                    .find(|(k, _)| *k == f.avro)
                    .map(|(_, v)| v)
                    .ok_or_else(|| doc_err(&f.column, "missing from the record"))?,
            };
            value(&f.kind, unwrap(v), forms).map_err(|what| doc_err(&f.column, what))
        })
        .collect()
}

/// Elasticsearch's (and OpenSearch's) limit on an `_id`: bytes of UTF-8.
pub(crate) const MAX_ID_BYTES: usize = 512;

/// The document id of key values (in key order): a one-column key's value as text, a
/// composite key as a JSON array.
///
/// An empty string is a valid MySQL key but not an `_id` (Elasticsearch refuses it, and a
/// refused item stopped the sink for every table): it becomes `"\0"`, and a value that
/// begins with NUL gets one more in front, so that every key keeps an id of its own. An id
/// longer than [`MAX_ID_BYTES`] (a URL or a path as the key; InnoDB takes keys of up to 3,072
/// bytes) is refused the same way, so it is shortened: [`long_id`].
pub(crate) fn id_of(values: &[&Json]) -> String {
    let id = match values {
        [Json::String(s)] if s.is_empty() || s.starts_with('\0') => format!("\0{s}"),
        [Json::String(s)] => s.clone(),
        [v] => v.to_string(),
        many => Json::Array(many.iter().map(|v| (*v).clone()).collect()).to_string(),
    };
    if id.len() > MAX_ID_BYTES {
        long_id(&id)
    } else {
        id
    }
}

/// The `_id` of an id over [`MAX_ID_BYTES`]: `"\0#"`, the SHA-256 of the whole id in hex, `:`,
/// and as much of the id's beginning as fits (cut at a character), 512 bytes at most. Distinct
/// keys keep distinct ids (a collision would need one of SHA-256), a person reading the id sees
/// which key it is, and no id of a shorter key has this form: ids written as they are never
/// begin with NUL then `#` (a NUL-leading key gets a second NUL).
fn long_id(id: &str) -> String {
    use sha2::Digest as _;
    use std::fmt::Write as _;
    let mut out = String::with_capacity(MAX_ID_BYTES);
    out.push_str("\0#");
    for b in sha2::Sha256::digest(id.as_bytes()) {
        let _ = write!(out, "{b:02x}");
    }
    out.push(':');
    let mut end = MAX_ID_BYTES.saturating_sub(out.len()).min(id.len());
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    out.push_str(id.get(..end).unwrap_or_default());
    out
}

fn unwrap(v: &Avro) -> &Avro {
    match v {
        Avro::Union(_, inner) => unwrap(inner),
        other => other,
    }
}

/// One column's value in the document.
fn value(kind: &Kind, v: &Avro, forms: Forms) -> Result<Json, String> {
    if matches!(v, Avro::Null) {
        return Ok(Json::Null);
    }
    let unexpected = || format!("{kind:?} column with an Avro value {v:?}");
    Ok(match (kind, v) {
        // a zero or invalid date, as MySQL prints it (the `string` branch of the union)
        (Kind::Date | Kind::DateTime { .. } | Kind::Timestamp { .. }, Avro::String(s)) => Json::String(s.clone()),
        (_, Avro::Int(i)) if !matches!(kind, Kind::Date) => Json::from(*i),
        (Kind::Time { fsp }, Avro::Long(us)) => match forms.time {
            EsTime::Long => Json::from(*us),
            EsTime::Keyword => Json::String(time_text(*us, *fsp)),
        },
        (_, Avro::Long(l)) => integer(i128::from(*l)),
        (Kind::UnsignedLong, Avro::Decimal(d)) => {
            let text = decimal_text(&Vec::<u8>::try_from(d).map_err(|e| e.to_string())?, 0);
            integer(i128::from(text.parse::<u64>().map_err(|e| format!("{text}: {e}"))?))
        }
        (Kind::Decimal { scale }, Avro::Decimal(d)) => {
            Json::String(decimal_text(&Vec::<u8>::try_from(d).map_err(|e| e.to_string())?, *scale))
        }
        // the shortest text that reads back as the same f32 (1.1, not 1.100000023841858)
        (_, Avro::Float(f)) => float(format!("{f}").parse::<f64>().unwrap_or(f64::from(*f)))?,
        (_, Avro::Double(d)) => float(*d)?,
        (Kind::Date, Avro::Date(days)) => Json::String(date_text(i64::from(*days))),
        (Kind::DateTime { fsp }, Avro::LocalTimestampMicros(us)) => Json::String(datetime_text(*us, *fsp, "")),
        (Kind::Timestamp { fsp }, Avro::TimestampMicros(us)) => Json::String(datetime_text(*us, *fsp, "Z")),
        (Kind::Json, Avro::String(s)) => match forms.json {
            EsJson::Keyword => Json::String(s.clone()),
            EsJson::Flattened | EsJson::Object => {
                serde_json::from_str(s).map_err(|e| format!("the JSON text does not parse: {e}"))?
            }
        },
        (_, Avro::String(s)) | (_, Avro::Enum(_, s)) => Json::String(s.clone()),
        (Kind::Bits { .. }, Avro::Bytes(b)) => {
            let n = b.iter().try_fold(0u64, |acc, x| acc.checked_mul(256).map(|a| a + u64::from(*x)));
            integer(i128::from(n.ok_or("a BIT value of more than 64 bits")?))
        }
        (_, Avro::Bytes(b)) | (_, Avro::Fixed(_, b)) => {
            Json::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        (_, Avro::Boolean(b)) => Json::Bool(*b),
        (Kind::Set, Avro::Array(items)) => Json::Array(
            items
                .iter()
                .map(|i| match unwrap(i) {
                    Avro::String(s) => Ok(Json::String(s.clone())),
                    other => Err(format!("a SET member {other:?}")),
                })
                .collect::<Result<_, _>>()?,
        ),
        (Kind::Vector, Avro::Array(items)) => Json::Array(
            items
                .iter()
                .map(|i| match unwrap(i) {
                    Avro::Float(f) => float(format!("{f}").parse::<f64>().unwrap_or(f64::from(*f))),
                    Avro::Double(d) => float(*d),
                    other => Err(format!("a VECTOR member {other:?}")),
                })
                .collect::<Result<_, _>>()?,
        ),
        (Kind::Geometry | Kind::GeoPoint, Avro::Record(parts)) => {
            let part = |n: &str| parts.iter().find(|(k, _)| k == n).map(|(_, v)| unwrap(v));
            let (Some(Avro::Long(srid)), Some(Avro::Bytes(wkb))) = (part("srid"), part("wkb")) else {
                return Err(unexpected());
            };
            if *kind == Kind::GeoPoint {
                let (lon, lat) = wkb_point(wkb)
                    .ok_or("not a POINT (elasticsearch.geo_point names it; map it as {srid, wkb} by leaving it out)")?;
                let mut m = Map::new();
                m.insert("lat".into(), float(lat)?);
                m.insert("lon".into(), float(lon)?);
                Json::Object(m)
            } else {
                let mut m = Map::new();
                m.insert("srid".into(), Json::from(*srid));
                m.insert("wkb".into(), Json::String(base64::engine::general_purpose::STANDARD.encode(wkb)));
                Json::Object(m)
            }
        }
        _ => return Err(unexpected()),
    })
}

/// An integer as `sluice dump` writes it: a number within ±2^53, else its decimal text, which
/// Elasticsearch takes for `long` and `unsigned_long` fields as well, and which no reader that
/// goes through doubles (JavaScript, some engines' `_source`) can round.
fn integer(n: i128) -> Json {
    const EXACT: i128 = 1 << 53;
    if (-EXACT..=EXACT).contains(&n) {
        // within ±2^53 both fit
        i64::try_from(n).map_or_else(|_| Json::String(n.to_string()), Json::from)
    } else {
        Json::String(n.to_string())
    }
}

fn float(f: f64) -> Result<Json, String> {
    Number::from_f64(f).map(Json::Number).ok_or_else(|| format!("{f} is not a number JSON can hold"))
}

/// A WKB POINT's x and y (little- or big-endian; an SRID-prefixed EWKB is not WKB).
fn wkb_point(wkb: &[u8]) -> Option<(f64, f64)> {
    let (&order, rest) = wkb.split_first()?;
    let word = |b: &[u8]| -> Option<[u8; 4]> { b.get(..4)?.try_into().ok() };
    let num = |b: &[u8]| -> Option<[u8; 8]> { b.get(..8)?.try_into().ok() };
    let (ty, x, y) = (word(rest)?, num(rest.get(4..)?)?, num(rest.get(12..)?)?);
    let (ty, x, y) = match order {
        1 => (u32::from_le_bytes(ty), f64::from_le_bytes(x), f64::from_le_bytes(y)),
        0 => (u32::from_be_bytes(ty), f64::from_be_bytes(x), f64::from_be_bytes(y)),
        _ => return None,
    };
    (ty == 1 && rest.len() == 20).then_some((x, y))
}

/// `YYYY-MM-DD` of a day count from 1970-01-01.
fn date_text(days: i64) -> String {
    let (y, m, d) = sluice_binlog::temporal::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

/// `YYYY-MM-DDTHH:MM:SS[.f]` (with `fsp` digits) of microseconds from the epoch, then `zone`.
fn datetime_text(us: i64, fsp: u32, zone: &str) -> String {
    let (days, rem) = (us.div_euclid(86_400_000_000), us.rem_euclid(86_400_000_000));
    let secs = rem / 1_000_000;
    let (h, mi, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    format!("{}T{h:02}:{mi:02}:{s:02}{}{zone}", date_text(days), fraction(rem % 1_000_000, fsp))
}

/// MySQL's TIME text (`-838:59:59.000000`) of signed microseconds.
fn time_text(us: i64, fsp: u32) -> String {
    let sign = if us < 0 { "-" } else { "" };
    let a = us.unsigned_abs();
    let secs = a / 1_000_000;
    let frac = i64::try_from(a % 1_000_000).unwrap_or(0);
    format!("{sign}{:02}:{:02}:{:02}{}", secs / 3600, secs / 60 % 60, secs % 60, fraction(frac, fsp))
}

/// `.` and the first `fsp` digits of six-digit microseconds (empty for `fsp` 0).
fn fraction(micros: i64, fsp: u32) -> String {
    if fsp == 0 {
        return String::new();
    }
    let digits = format!("{micros:06}");
    format!(".{}", &digits[..usize::try_from(fsp.min(6)).unwrap_or(6)])
}

/// Exact decimal text of a big-endian two's-complement unscaled integer and a scale.
pub fn decimal_text(be: &[u8], scale: u32) -> String {
    let negative = be.first().is_some_and(|b| b & 0x80 != 0);
    // the magnitude: two's complement undone on the negative ones
    let mut mag: Vec<u8> = be.to_vec();
    if negative {
        mag.iter_mut().for_each(|b| *b = !*b);
        for b in mag.iter_mut().rev() {
            let (v, carry) = b.overflowing_add(1);
            *b = v;
            if !carry {
                break;
            }
        }
    }
    // base 256 to base 10, by repeated division
    let mut digits = Vec::new();
    while mag.iter().any(|&b| b != 0) {
        let mut rem = 0u32;
        for b in &mut mag {
            let cur = (rem << 8) | u32::from(*b);
            *b = u8::try_from(cur / 10).unwrap_or(0);
            rem = cur % 10;
        }
        digits.push(char::from(b'0' + u8::try_from(rem).unwrap_or(0)));
    }
    let scale = usize::try_from(scale).unwrap_or(0);
    while digits.len() <= scale {
        digits.push('0');
    }
    digits.reverse();
    let (int, frac) = digits.split_at(digits.len() - scale);
    let mut s = String::with_capacity(digits.len() + 2);
    if negative {
        s.push('-');
    }
    s.extend(int);
    if scale > 0 {
        s.push('.');
        s.extend(frac);
    }
    s
}

#[cfg(test)]
mod tests {
    /// Every one-column string key has an `_id` of its own, and none is empty.
    #[test]
    fn empty_and_nul_keys_have_ids_of_their_own() {
        let id = |s: &str| id_of(&[&Json::String(s.into())]);
        let keys = ["", "\0", "\0\0", "a", "\0a", "[\"\"]"];
        let ids: std::collections::HashSet<String> = keys.iter().map(|k| id(k)).collect();
        assert_eq!(ids.len(), keys.len(), "{ids:?}");
        assert!(ids.iter().all(|i| !i.is_empty()));
        assert_eq!(id("a"), "a");
        assert_eq!(id(""), "\0");
        // a composite key's empty part is inside its array
        assert_eq!(id_of(&[&Json::from(7), &Json::String(String::new())]), "[7,\"\"]");
    }

    /// Keys whose id would pass Elasticsearch's 512 bytes (which it refuses, stopping the sink)
    /// get ids within it, each of its own, beginning with the key, cut at a character; ids up
    /// to the limit are as they were.
    #[test]
    fn long_keys_have_ids_within_the_limit() {
        let id = |s: &str| id_of(&[&Json::String(s.into())]);
        let at_limit = "u".repeat(MAX_ID_BYTES);
        assert_eq!(id(&at_limit), at_limit);
        let base = format!("https://shop.example/{}", "p".repeat(600));
        let keys = [
            format!("{base}/a"),
            format!("{base}/b"),
            "é".repeat(300),
            format!("\0{}", "x".repeat(600)),
            "u".repeat(MAX_ID_BYTES + 1),
        ];
        let mut ids = std::collections::HashSet::new();
        for k in &keys {
            let i = id(k);
            assert!(i.len() <= MAX_ID_BYTES, "{} bytes", i.len());
            assert!(i.starts_with("\0#") && i.get(66..67) == Some(":"), "{i:?}");
            let kept = i.get(67..).unwrap();
            assert!(kept.len() > 400 && id_escaped(k).starts_with(kept), "{kept:?}");
            assert!(ids.insert(i));
        }
        // cut at a character: 'é' is two bytes, 445 bytes of room keep 222 of them
        assert_eq!(id(&keys[2]).get(67..).map(str::len), Some(444));
        // a composite key's long JSON text too
        let composite = id_of(&[&Json::from(1), &Json::String("z".repeat(600))]);
        assert!(composite.len() <= MAX_ID_BYTES && composite.starts_with("\0#"), "{composite:?}");
        assert!(composite.contains(":[1,\"z"), "{composite:?}");
    }

    /// A one-column string key's id before shortening.
    fn id_escaped(k: &str) -> String {
        if k.is_empty() || k.starts_with('\0') {
            format!("\0{k}")
        } else {
            k.to_string()
        }
    }

    use super::*;

    const FORMS: Forms = Forms { time: EsTime::Long, json: EsJson::Flattened };

    #[test]
    fn decimals_exactly() {
        assert_eq!(decimal_text(&[0x30, 0x39], 2), "123.45");
        assert_eq!(decimal_text(&[0xcf, 0xc7], 2), "-123.45");
        assert_eq!(decimal_text(&[0x00], 3), "0.000");
        assert_eq!(decimal_text(&[0xff], 0), "-1");
        assert_eq!(decimal_text(&[0x05], 3), "0.005");
        // 2^64 - 1 as decimal(20,0), with the sign byte
        assert_eq!(decimal_text(&[0, 255, 255, 255, 255, 255, 255, 255, 255], 0), "18446744073709551615");
    }

    #[test]
    fn temporal_texts() {
        assert_eq!(date_text(0), "1970-01-01");
        assert_eq!(date_text(-719_162), "0001-01-01");
        assert_eq!(datetime_text(1_714_557_601_123_456, 6, "Z"), "2024-05-01T10:00:01.123456Z");
        assert_eq!(datetime_text(1_714_557_601_123_456, 3, ""), "2024-05-01T10:00:01.123");
        assert_eq!(datetime_text(-1, 6, ""), "1969-12-31T23:59:59.999999");
        assert_eq!(time_text(-3_020_399_000_000, 0), "-838:59:59");
        assert_eq!(time_text(-1_500_000, 6), "-00:00:01.500000");
        assert_eq!(time_text(3_723_000_001, 6), "01:02:03.000001");
    }

    #[test]
    fn values_in_their_forms() {
        let v = |k: Kind, a: Avro| value(&k, &a, FORMS).unwrap();
        assert_eq!(v(Kind::Float, Avro::Float(1.1)), serde_json::json!(1.1));
        assert_eq!(v(Kind::Time { fsp: 6 }, Avro::Long(-1_500_000)), serde_json::json!(-1_500_000));
        let keyword = Forms { time: EsTime::Keyword, json: EsJson::Keyword };
        assert_eq!(value(&Kind::Time { fsp: 6 }, &Avro::Long(-1_500_000), keyword).unwrap(), "-00:00:01.500000");
        assert_eq!(value(&Kind::Json, &Avro::String("{\"a\": 1}".into()), keyword).unwrap(), "{\"a\": 1}");
        assert_eq!(v(Kind::Json, Avro::String("{\"a\": [1, \"x\"]}".into())), serde_json::json!({"a": [1, "x"]}));
        assert_eq!(v(Kind::Date, Avro::String("0000-00-00".into())), "0000-00-00");
        assert_eq!(v(Kind::Bits { n: 64 }, Avro::Bytes(vec![0xff; 8])), "18446744073709551615");
        assert_eq!(v(Kind::Long, Avro::Long(1 << 53)), serde_json::json!(1u64 << 53));
        assert_eq!(v(Kind::Long, Avro::Long(-(1 << 53) - 1)), "-9007199254740993");
        assert_eq!(v(Kind::Binary, Avro::Bytes(vec![0, 0xff])), "AP8=");
        assert_eq!(
            v(Kind::UnsignedLong, Avro::Decimal(vec![0, 255, 255, 255, 255, 255, 255, 255, 255].into())),
            "18446744073709551615"
        );
        let point = {
            let mut wkb = vec![1u8, 1, 0, 0, 0];
            wkb.extend(13.5f64.to_le_bytes());
            wkb.extend(52.25f64.to_le_bytes());
            Avro::Record(vec![("srid".into(), Avro::Long(4326)), ("wkb".into(), Avro::Bytes(wkb))])
        };
        assert_eq!(v(Kind::GeoPoint, point.clone()), serde_json::json!({"lat": 52.25, "lon": 13.5}));
        assert_eq!(v(Kind::Geometry, point)["srid"], 4326);
        let polygon =
            Avro::Record(vec![("srid".into(), Avro::Long(0)), ("wkb".into(), Avro::Bytes(vec![1, 3, 0, 0, 0]))]);
        assert!(value(&Kind::GeoPoint, &polygon, FORMS).unwrap_err().contains("not a POINT"));
        assert_eq!(v(Kind::Text, Avro::Null), Json::Null);
    }

    #[test]
    fn ids_and_actions() {
        let f = |c: &str, kind: Kind| Field { column: c.into(), avro: c.into(), kind };
        let one = [f("id", Kind::Long)];
        let key = Avro::Record(vec![("id".into(), Avro::Long(7))]);
        assert_eq!(document_id(&key, &one, FORMS).unwrap(), "7");
        let two = [f("id", Kind::Integer), f("k", Kind::Text)];
        let key = Avro::Record(vec![("id".into(), Avro::Int(7)), ("k".into(), Avro::String("k1".into()))]);
        assert_eq!(document_id(&key, &two, FORMS).unwrap(), "[7,\"k1\"]");
        let text = [f("k", Kind::Text)];
        let key = Avro::Record(vec![("k".into(), Avro::String("ü x".into()))]);
        assert_eq!(document_id(&key, &text, FORMS).unwrap(), "ü x");

        let layout = Layout { fields: vec![f("id", Kind::Long), f("v", Kind::Text)], flattened: false };
        let row = Avro::Record(vec![
            ("id".into(), Avro::Long(1)),
            ("v".into(), Avro::Union(1, Box::new(Avro::String("a".into())))),
        ]);
        let env = |op: &str, after: Avro| {
            Avro::Record(vec![
                ("before".into(), Avro::Union(0, Box::new(Avro::Null))),
                ("after".into(), Avro::Union(1, Box::new(after))),
                ("op".into(), Avro::String(op.into())),
            ])
        };
        let Action::Index(doc) = action(Some(&env("u", row.clone())), &layout, FORMS).unwrap() else { panic!() };
        assert_eq!(Json::Object(doc), serde_json::json!({"id": 1, "v": "a"}));
        assert_eq!(action(Some(&env("d", Avro::Null)), &layout, FORMS).unwrap(), Action::Delete);
        assert_eq!(action(None, &layout, FORMS).unwrap(), Action::Delete);
        let flat = Layout { flattened: true, ..layout };
        let deleted = Avro::Record(vec![
            ("id".into(), Avro::Long(1)),
            ("v".into(), Avro::Null),
            ("__op".into(), Avro::String("d".into())),
            ("__deleted".into(), Avro::Boolean(true)),
        ]);
        assert_eq!(action(Some(&deleted), &flat, FORMS).unwrap(), Action::Delete);
    }
}
