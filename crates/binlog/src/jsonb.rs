//! MySQL binary JSON (column type 245) to a [`JsonValue`] tree, its text form, and partial
//! updates (`PARTIAL_UPDATE_ROWS_EVENT` with `binlog_row_value_options=PARTIAL_JSON`).
//!
//! ## Binary format (`json_binary.cc`)
//! A document is a type byte followed by the value. Containers (offsets relative to the
//! container's first byte, after its type byte; *small* containers use 2-byte counts, sizes and
//! offsets, *large* ones 4-byte):
//!
//! | field                         | bytes           |
//! |-------------------------------|-----------------|
//! | element count                 | 2 / 4 LE        |
//! | total size in bytes           | 2 / 4 LE        |
//! | key entries (objects only)    | (2 / 4 offset + 2 length) each |
//! | value entries                 | 1 type + 2 / 4 offset-or-inlined-value each |
//! | keys, then values             | ...             |
//!
//! Type bytes: 0x00/0x01 small/large object, 0x02/0x03 small/large array, 0x04 literal
//! (0 null, 1 true, 2 false), 0x05 int16, 0x06 uint16, 0x07 int32, 0x08 uint32, 0x09 int64,
//! 0x0a uint64, 0x0b double, 0x0c string (length in 7-bit groups, low first), 0x0f opaque
//! (a MySQL field type byte, a 7-bit-group length, then the field's bytes). Literals and 16-bit
//! integers (and 32-bit ones in large containers) are inlined in their value entry.
//!
//! Every offset and length is checked; nesting is capped at [`MAX_DEPTH`] and the decoded size
//! at a budget proportional to the input (entries may alias one another), so a hostile document
//! can neither panic nor allocate without bound.
//!
//! References: MySQL `sql-common/json_binary.cc`, `sql-common/json_dom.cc` (text output),
//! `sql/json_diff.cc` (`Json_diff_vector::read_binary`),
//! <https://dev.mysql.com/doc/dev/mysql-server/latest/json__binary_8h.html>.

use std::fmt::{self, Write as _};

use sluice_protocol::reader::Reader;

use crate::column::ColumnType;
use crate::decimal::Decimal;
use crate::error::{Error, Result};
use crate::temporal::{Date, DateTime, Time};

/// The deepest nesting accepted (MySQL's own limit is 100).
pub const MAX_DEPTH: usize = 100;

/// A JSON value decoded from MySQL's binary form.
#[derive(Debug, Clone, PartialEq)]
pub enum JsonValue {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// A double.
    Double(f64),
    /// A string.
    String(String),
    /// An object, members in stored order (MySQL sorts keys by length, then bytes).
    Object(Vec<(String, JsonValue)>),
    /// An array.
    Array(Vec<JsonValue>),
    /// An opaque DECIMAL.
    Decimal(Decimal),
    /// An opaque DATE.
    Date(Date),
    /// An opaque TIME.
    Time(Time),
    /// An opaque DATETIME or TIMESTAMP.
    DateTime(DateTime),
    /// Any other opaque value: the MySQL field type and its bytes.
    Opaque {
        /// The field type the bytes belong to.
        field_type: ColumnType,
        /// The bytes.
        data: Vec<u8>,
    },
}

const T_SMALL_OBJECT: u8 = 0x00;
const T_LARGE_OBJECT: u8 = 0x01;
const T_SMALL_ARRAY: u8 = 0x02;
const T_LARGE_ARRAY: u8 = 0x03;
const T_LITERAL: u8 = 0x04;
const T_INT16: u8 = 0x05;
const T_UINT16: u8 = 0x06;
const T_INT32: u8 = 0x07;
const T_UINT32: u8 = 0x08;
const T_INT64: u8 = 0x09;
const T_UINT64: u8 = 0x0a;
const T_DOUBLE: u8 = 0x0b;
const T_STRING: u8 = 0x0c;
const T_OPAQUE: u8 = 0x0f;

fn bad(reason: impl Into<String>) -> Error {
    Error::invalid("binary JSON", reason)
}

/// Decoding state: the remaining node/byte budget.
struct Parser {
    budget: usize,
}

impl Parser {
    fn spend(&mut self, n: usize) -> Result<()> {
        self.budget = self.budget.checked_sub(n).ok_or_else(|| bad("document expands beyond its size budget"))?;
        Ok(())
    }

    /// Decodes a value of type `ty` whose bytes start at `buf`.
    fn value(&mut self, ty: u8, buf: &[u8], depth: usize) -> Result<JsonValue> {
        self.spend(1)?;
        let mut r = Reader::new(buf);
        Ok(match ty {
            T_SMALL_OBJECT | T_LARGE_OBJECT | T_SMALL_ARRAY | T_LARGE_ARRAY => {
                if depth >= MAX_DEPTH {
                    return Err(bad(format!("nesting deeper than {MAX_DEPTH}")));
                }
                let large = ty == T_LARGE_OBJECT || ty == T_LARGE_ARRAY;
                let object = ty == T_SMALL_OBJECT || ty == T_LARGE_OBJECT;
                self.container(buf, large, object, depth + 1)?
            }
            T_LITERAL => literal(r.u8("JSON literal")?)?,
            T_INT16 => JsonValue::Int(i64::from(r.i16("JSON int16")?)),
            T_UINT16 => JsonValue::UInt(u64::from(r.u16("JSON uint16")?)),
            T_INT32 => JsonValue::Int(i64::from(r.i32("JSON int32")?)),
            T_UINT32 => JsonValue::UInt(u64::from(r.u32("JSON uint32")?)),
            T_INT64 => JsonValue::Int(r.i64("JSON int64")?),
            T_UINT64 => JsonValue::UInt(r.u64("JSON uint64")?),
            T_DOUBLE => JsonValue::Double(r.f64("JSON double")?),
            T_STRING => {
                let n = var_len(&mut r)?;
                let s = r.take_u64(n, "JSON string")?;
                self.spend(s.len())?;
                JsonValue::String(String::from_utf8(s.to_vec()).map_err(|e| bad(format!("string is not UTF-8: {e}")))?)
            }
            T_OPAQUE => {
                let field_type = ColumnType::from_u8(r.u8("JSON opaque type")?);
                let n = var_len(&mut r)?;
                let data = r.take_u64(n, "JSON opaque")?;
                self.spend(data.len())?;
                opaque(field_type, data)?
            }
            other => return Err(bad(format!("unknown value type 0x{other:02x}"))),
        })
    }

    fn container(&mut self, buf: &[u8], large: bool, object: bool, depth: usize) -> Result<JsonValue> {
        let w = if large { 4 } else { 2 };
        let mut r = Reader::new(buf);
        let count = usize::try_from(r.uint_le(w, "JSON element count")?).map_err(|_| bad("count"))?;
        let size = usize::try_from(r.uint_le(w, "JSON container size")?).map_err(|_| bad("size"))?;
        let buf = buf
            .get(..size)
            .ok_or_else(|| bad(format!("container size {size} exceeds the {} bytes left", buf.len())))?;
        let key_entry = if object { w + 2 } else { 0 };
        let value_entry = 1 + w;
        let header = 2 * w;
        let entries_end = count
            .checked_mul(key_entry + value_entry)
            .and_then(|n| n.checked_add(header))
            .filter(|&n| n <= size)
            .ok_or_else(|| bad(format!("{count} entries do not fit a container of {size} bytes")))?;
        let _ = entries_end;
        let mut keys = Vec::with_capacity(if object { count } else { 0 });
        if object {
            let mut kr = Reader::new(buf.get(header..).unwrap_or(&[]));
            for _ in 0..count {
                let off = usize::try_from(kr.uint_le(w, "JSON key offset")?).map_err(|_| bad("key offset"))?;
                let len = usize::from(kr.u16("JSON key length")?);
                let key = off
                    .checked_add(len)
                    .and_then(|end| buf.get(off..end))
                    .ok_or_else(|| bad(format!("key at {off}+{len} is outside its container")))?;
                self.spend(len)?;
                keys.push(String::from_utf8(key.to_vec()).map_err(|e| bad(format!("key is not UTF-8: {e}")))?);
            }
        }
        let mut vr = Reader::new(buf.get(header + count * key_entry..).unwrap_or(&[]));
        let mut values = Vec::with_capacity(count);
        for _ in 0..count {
            let ty = vr.u8("JSON value type")?;
            let inlined = matches!(ty, T_LITERAL | T_INT16 | T_UINT16) || (large && matches!(ty, T_INT32 | T_UINT32));
            let entry = vr.take(w, "JSON value entry")?;
            let v = if inlined {
                self.value(ty, entry, depth)?
            } else {
                let off =
                    usize::try_from(Reader::new(entry).uint_le(w, "JSON value offset")?).map_err(|_| bad("offset"))?;
                let at = buf
                    .get(off..)
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| bad(format!("value offset {off} is outside its container")))?;
                self.value(ty, at, depth)?
            };
            values.push(v);
        }
        Ok(if object { JsonValue::Object(keys.into_iter().zip(values).collect()) } else { JsonValue::Array(values) })
    }
}

fn literal(b: u8) -> Result<JsonValue> {
    match b {
        0 => Ok(JsonValue::Null),
        1 => Ok(JsonValue::Bool(true)),
        2 => Ok(JsonValue::Bool(false)),
        other => Err(bad(format!("unknown literal 0x{other:02x}"))),
    }
}

/// Reads a length stored 7 bits per byte, low group first, high bit = more (at most 5 bytes).
fn var_len(r: &mut Reader<'_>) -> Result<u64> {
    let mut v: u64 = 0;
    for i in 0..5 {
        let b = r.u8("JSON length")?;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            if v > u64::from(u32::MAX) {
                return Err(bad("length exceeds 32 bits"));
            }
            return Ok(v);
        }
    }
    Err(bad("length runs past 5 bytes"))
}

fn packed(data: &[u8]) -> Result<i64> {
    Reader::new(data).i64("JSON packed temporal").map_err(Error::from)
}

fn opaque(field_type: ColumnType, data: &[u8]) -> Result<JsonValue> {
    Ok(match field_type {
        ColumnType::NewDecimal => {
            let mut r = Reader::new(data);
            let precision = r.u8("JSON decimal precision")?;
            let scale = r.u8("JSON decimal scale")?;
            JsonValue::Decimal(Decimal::read(&mut r, precision, scale)?)
        }
        ColumnType::Date => JsonValue::Date(DateTime::from_packed(packed(data)?, 0).date()),
        ColumnType::Time => JsonValue::Time(Time::from_packed(packed(data)?, 6)),
        ColumnType::DateTime | ColumnType::Timestamp => JsonValue::DateTime(DateTime::from_packed(packed(data)?, 6)),
        _ => JsonValue::Opaque { field_type, data: data.to_vec() },
    })
}

/// Decodes a whole binary JSON document (type byte + value). An empty document is `null`, as
/// MySQL reads it.
///
/// # Errors
/// [`Error::Invalid`] / [`Error::Wire`] for malformed documents.
pub fn parse(bytes: &[u8]) -> Result<JsonValue> {
    let Some((&ty, rest)) = bytes.split_first() else {
        return Ok(JsonValue::Null);
    };
    let mut p = Parser { budget: bytes.len().saturating_mul(4).saturating_add(64) };
    p.value(ty, rest, 0)
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64(data: &[u8], out: &mut String) {
    for c in data.chunks(3) {
        let b = [c.first().copied().unwrap_or(0), c.get(1).copied().unwrap_or(0), c.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= c.len() {
                let idx = usize::try_from((n >> (18 - 6 * i)) & 0x3f).unwrap_or(0);
                out.push(char::from(B64.get(idx).copied().unwrap_or(b'A')));
            } else {
                out.push('=');
            }
        }
    }
}

/// Writes a JSON string literal, escaped as MySQL does (RFC 8259 escapes; other control
/// characters as `\u00XX`; everything else verbatim).
fn write_str(f: &mut impl fmt::Write, s: &str) -> fmt::Result {
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            '\u{8}' => f.write_str("\\b")?,
            '\u{c}' => f.write_str("\\f")?,
            c if u32::from(c) < 0x20 => write!(f, "\\u{:04x}", u32::from(c))?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}

/// Formats a double like MySQL's `my_gcvt` (shortest round-trip digits; fixed notation while
/// it fits the field width, else `1e100` style), with `.0` added to integral values so they
/// stay doubles when read back.
fn write_double(f: &mut impl fmt::Write, d: f64) -> fmt::Result {
    if !d.is_finite() {
        // Not representable in JSON; MySQL never stores these.
        return f.write_str("null");
    }
    // Shortest digits and exponent from Rust's `{:e}` (shortest round-trip, like dtoa mode 0).
    let e = format!("{:e}", d.abs());
    let (mant, exp) = e.split_once('e').unwrap_or((e.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let len = i32::try_from(digits.len()).unwrap_or(1);
    let decpt = exp + 1;
    const WIDTH: i32 = 34; // MY_GCVT_MAX_FIELD_WIDTH
    let fixed_len = if decpt <= 0 {
        len - decpt + 2
    } else if decpt < len {
        len + 1
    } else {
        decpt
    };
    if d.is_sign_negative() && d != 0.0 {
        f.write_char('-')?;
    }
    if fixed_len <= WIDTH {
        let s = if decpt <= 0 {
            format!("0.{}{}", "0".repeat(usize::try_from(-decpt).unwrap_or(0)), digits)
        } else if decpt < len {
            let (a, b) = digits.split_at(usize::try_from(decpt).unwrap_or(0));
            format!("{a}.{b}")
        } else {
            format!("{}{}.0", digits, "0".repeat(usize::try_from(decpt - len).unwrap_or(0)))
        };
        f.write_str(&s)
    } else {
        let (first, rest) = digits.split_at(1.min(digits.len()));
        if rest.is_empty() {
            write!(f, "{first}e{exp}")
        } else {
            write!(f, "{first}.{rest}e{exp}")
        }
    }
}

impl fmt::Display for JsonValue {
    /// Canonical JSON text as MySQL prints a JSON column: `{"a": 1, "b": [1, 2]}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonValue::Null => f.write_str("null"),
            JsonValue::Bool(b) => write!(f, "{b}"),
            JsonValue::Int(i) => write!(f, "{i}"),
            JsonValue::UInt(u) => write!(f, "{u}"),
            JsonValue::Double(d) => write_double(f, *d),
            JsonValue::String(s) => write_str(f, s),
            JsonValue::Object(members) => {
                f.write_char('{')?;
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write_str(f, k)?;
                    write!(f, ": {v}")?;
                }
                f.write_char('}')
            }
            JsonValue::Array(items) => {
                f.write_char('[')?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_char(']')
            }
            JsonValue::Decimal(d) => write!(f, "{d}"),
            JsonValue::Date(d) => write!(f, "\"{d}\""),
            JsonValue::Time(t) => write!(f, "\"{t}\""),
            JsonValue::DateTime(t) => write!(f, "\"{t}\""),
            JsonValue::Opaque { field_type, data } => {
                let mut s = format!("base64:type{}:", field_type.code());
                base64(data, &mut s);
                write_str(f, &s)
            }
        }
    }
}

/// What a partial JSON update does at its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JsonDiffOp {
    /// 0: replace the value at the path (`JSON_REPLACE`, `JSON_SET` of an existing path).
    Replace,
    /// 1: insert at the path (a new object member, or an array element before the index).
    Insert,
    /// 2: remove the value at the path (`JSON_REMOVE`).
    Remove,
}

impl JsonDiffOp {
    /// The operation for its byte.
    pub fn from_u8(b: u8) -> Option<JsonDiffOp> {
        match b {
            0 => Some(JsonDiffOp::Replace),
            1 => Some(JsonDiffOp::Insert),
            2 => Some(JsonDiffOp::Remove),
            _ => None,
        }
    }
}

/// One partial JSON update.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonDiff {
    /// The operation.
    pub op: JsonDiffOp,
    /// The MySQL JSON path (`$.a[1]`).
    pub path: String,
    /// The new value (None for [`JsonDiffOp::Remove`]).
    pub value: Option<JsonValue>,
}

impl fmt::Display for JsonDiff {
    /// `REPLACE $.a = 1`, `INSERT $[0] = "x"`, `REMOVE $.b`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            JsonDiffOp::Replace => "REPLACE",
            JsonDiffOp::Insert => "INSERT",
            JsonDiffOp::Remove => "REMOVE",
        };
        write!(f, "{op} {}", self.path)?;
        match &self.value {
            Some(v) => write!(f, " = {v}"),
            None => Ok(()),
        }
    }
}

/// Reads the diffs of one partially updated JSON column: the bytes after the column's
/// length prefix.
///
/// | field          | bytes                                  |
/// |----------------|----------------------------------------|
/// | operation      | 1 (0 replace, 1 insert, 2 remove)      |
/// | path length    | packed integer (`net_field_length`)    |
/// | path           | path length bytes (UTF-8 text)         |
/// | value length   | packed integer (not for remove)        |
/// | value          | binary JSON document (not for remove)  |
///
/// repeated to the end.
///
/// # Errors
/// [`Error::Invalid`] for an unknown operation, a non-UTF-8 path or a bad value;
/// [`Error::Wire`] when truncated.
pub fn read_json_diffs(bytes: &[u8]) -> Result<Vec<JsonDiff>> {
    let mut r = Reader::new(bytes);
    let mut out = Vec::new();
    while !r.is_empty() {
        let b = r.u8("JSON diff operation")?;
        let op = JsonDiffOp::from_u8(b).ok_or_else(|| bad(format!("unknown JSON diff operation {b}")))?;
        let path = r.lenenc_bytes("JSON diff path")?;
        let path = std::str::from_utf8(path).map_err(|e| bad(format!("JSON diff path is not UTF-8: {e}")))?.to_string();
        let value = if op == JsonDiffOp::Remove { None } else { Some(parse(r.lenenc_bytes("JSON diff value")?)?) };
        out.push(JsonDiff { op, path, value });
    }
    Ok(out)
}

/// One step of a JSON path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Leg {
    Key(String),
    /// `[n]`
    Index(usize),
    /// `[last - n]`
    Last(usize),
}

fn path_err(path: &str, why: &str) -> Error {
    Error::invalid("JSON path", format!("{path:?}: {why}"))
}

fn parse_path(path: &str) -> Result<Vec<Leg>> {
    let s = path.trim();
    let mut it = s.char_indices().peekable();
    if it.next().map(|(_, c)| c) != Some('$') {
        return Err(path_err(path, "does not start with $"));
    }
    let mut legs = Vec::new();
    let skip_ws = |it: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        while it.peek().is_some_and(|(_, c)| c.is_whitespace()) {
            it.next();
        }
    };
    loop {
        skip_ws(&mut it);
        match it.next().map(|(_, c)| c) {
            None => break,
            Some('.') => {
                skip_ws(&mut it);
                if it.peek().map(|(_, c)| *c) == Some('"') {
                    it.next();
                    let mut key = String::new();
                    loop {
                        match it.next().map(|(_, c)| c) {
                            None => return Err(path_err(path, "unterminated quoted key")),
                            Some('"') => break,
                            Some('\\') => match it.next().map(|(_, c)| c) {
                                Some('n') => key.push('\n'),
                                Some('t') => key.push('\t'),
                                Some('r') => key.push('\r'),
                                Some('b') => key.push('\u{8}'),
                                Some('f') => key.push('\u{c}'),
                                Some('u') => {
                                    let hex: String = (0..4).filter_map(|_| it.next().map(|(_, c)| c)).collect();
                                    let cp =
                                        u32::from_str_radix(&hex, 16).map_err(|_| path_err(path, "bad \\u escape"))?;
                                    key.push(char::from_u32(cp).ok_or_else(|| path_err(path, "bad \\u escape"))?);
                                }
                                Some(c) => key.push(c),
                                None => return Err(path_err(path, "unterminated escape")),
                            },
                            Some(c) => key.push(c),
                        }
                    }
                    legs.push(Leg::Key(key));
                } else {
                    let mut key = String::new();
                    while let Some(&(_, c)) = it.peek() {
                        if c == '.' || c == '[' || c.is_whitespace() {
                            break;
                        }
                        key.push(c);
                        it.next();
                    }
                    if key.is_empty() || key.starts_with('*') {
                        return Err(path_err(path, "empty or wildcard member name"));
                    }
                    legs.push(Leg::Key(key));
                }
            }
            Some('[') => {
                let mut inner = String::new();
                loop {
                    match it.next().map(|(_, c)| c) {
                        None => return Err(path_err(path, "unterminated [")),
                        Some(']') => break,
                        Some(c) => inner.push(c),
                    }
                }
                let inner: String = inner.chars().filter(|c| !c.is_whitespace()).collect();
                let num = |s: &str| s.parse::<usize>().map_err(|_| path_err(path, "bad array index"));
                if let Some(rest) = inner.strip_prefix("last") {
                    let back = match rest.strip_prefix('-') {
                        Some(n) => num(n)?,
                        None if rest.is_empty() => 0,
                        None => return Err(path_err(path, "bad array index")),
                    };
                    legs.push(Leg::Last(back));
                } else {
                    legs.push(Leg::Index(num(&inner)?));
                }
            }
            Some(_) => return Err(path_err(path, "unexpected character")),
        }
        if legs.len() > MAX_DEPTH {
            return Err(path_err(path, "too deep"));
        }
    }
    Ok(legs)
}

fn resolve(leg: &Leg, len: usize) -> Option<usize> {
    match *leg {
        Leg::Index(n) => Some(n),
        Leg::Last(back) => len.checked_sub(1)?.checked_sub(back),
        Leg::Key(_) => None,
    }
}

/// MySQL's key order: shorter keys first, then bytewise.
fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.as_bytes().cmp(b.as_bytes()))
}

fn step<'d>(doc: &'d mut JsonValue, leg: &Leg) -> Option<&'d mut JsonValue> {
    match (doc, leg) {
        (JsonValue::Object(m), Leg::Key(k)) => m.iter_mut().find(|(mk, _)| mk == k).map(|(_, v)| v),
        (JsonValue::Array(a), leg) => {
            let i = resolve(leg, a.len())?;
            a.get_mut(i)
        }
        _ => None,
    }
}

fn apply_one(doc: &mut JsonValue, diff: &JsonDiff) -> Result<()> {
    let legs = parse_path(&diff.path)?;
    let missing = || Error::invalid("JSON diff", format!("{diff}: the path does not exist in the document"));
    let Some((last, parents)) = legs.split_last() else {
        return match (diff.op, &diff.value) {
            (JsonDiffOp::Replace, Some(v)) => {
                *doc = v.clone();
                Ok(())
            }
            _ => Err(Error::invalid("JSON diff", format!("{diff}: cannot insert or remove the root"))),
        };
    };
    let mut parent = doc;
    for leg in parents {
        parent = step(parent, leg).ok_or_else(missing)?;
    }
    let value = || diff.value.clone().ok_or_else(|| Error::invalid("JSON diff", format!("{diff}: no value")));
    match (parent, last) {
        (JsonValue::Object(m), Leg::Key(k)) => {
            let pos = m.iter().position(|(mk, _)| mk == k);
            match (diff.op, pos) {
                (JsonDiffOp::Replace | JsonDiffOp::Insert, Some(i)) => {
                    let v = value()?;
                    if let Some(slot) = m.get_mut(i) {
                        slot.1 = v;
                    }
                }
                (JsonDiffOp::Insert, None) => {
                    let at = m.iter().position(|(mk, _)| key_order(mk, k).is_gt()).unwrap_or(m.len());
                    m.insert(at, (k.clone(), value()?));
                }
                (JsonDiffOp::Remove, Some(i)) => {
                    m.remove(i);
                }
                (_, None) => return Err(missing()),
            }
        }
        (JsonValue::Array(a), leg @ (Leg::Index(_) | Leg::Last(_))) => {
            let idx = resolve(leg, a.len());
            match (diff.op, idx) {
                (JsonDiffOp::Replace, Some(i)) if i < a.len() => {
                    let v = value()?;
                    if let Some(slot) = a.get_mut(i) {
                        *slot = v;
                    }
                }
                (JsonDiffOp::Insert, i) => {
                    let at = i.unwrap_or(0).min(a.len());
                    a.insert(at, value()?);
                }
                (JsonDiffOp::Remove, Some(i)) if i < a.len() => {
                    a.remove(i);
                }
                _ => return Err(missing()),
            }
        }
        _ => return Err(missing()),
    }
    Ok(())
}

/// Applies partial-update diffs to a document in order, with `JSON_REPLACE` /
/// `JSON_INSERT` + `JSON_ARRAY_INSERT` / `JSON_REMOVE` semantics. Paths may use `$`, `.key`,
/// `."quoted key"`, `[n]`, `[last]` and `[last-n]`.
///
/// # Errors
/// [`Error::Invalid`] when a path is malformed or does not exist in the document (the
/// before-image and the diffs disagree); the document may then be partly updated.
pub fn apply_diffs(doc: &mut JsonValue, diffs: &[JsonDiff]) -> Result<()> {
    diffs.iter().try_for_each(|d| apply_one(doc, d))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A test encoder for binary JSON (no opaques): small containers unless `large`.
    pub(crate) fn encode(v: &JsonValue, large: bool) -> Vec<u8> {
        let (ty, body) = encode_inner(v, large);
        let mut out = vec![ty];
        out.extend(body);
        out
    }

    fn var_len_bytes(mut n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    fn encode_inner(v: &JsonValue, large: bool) -> (u8, Vec<u8>) {
        match v {
            JsonValue::Null => (T_LITERAL, vec![0]),
            JsonValue::Bool(true) => (T_LITERAL, vec![1]),
            JsonValue::Bool(false) => (T_LITERAL, vec![2]),
            JsonValue::Int(i) => (T_INT64, i.to_le_bytes().to_vec()),
            JsonValue::UInt(u) => (T_UINT64, u.to_le_bytes().to_vec()),
            JsonValue::Double(d) => (T_DOUBLE, d.to_le_bytes().to_vec()),
            JsonValue::String(s) => {
                let mut b = var_len_bytes(s.len());
                b.extend_from_slice(s.as_bytes());
                (T_STRING, b)
            }
            JsonValue::Object(_) | JsonValue::Array(_) => {
                let (members, object): (Vec<(Option<&str>, &JsonValue)>, bool) = match v {
                    JsonValue::Object(m) => (m.iter().map(|(k, v)| (Some(k.as_str()), v)).collect(), true),
                    JsonValue::Array(a) => (a.iter().map(|v| (None, v)).collect(), false),
                    _ => unreachable!(),
                };
                let w = if large { 4 } else { 2 };
                let n = members.len();
                let header = 2 * w + n * (if object { w + 2 } else { 0 }) + n * (1 + w);
                let mut keys = Vec::new();
                let mut key_entries = Vec::new();
                let mut tail = Vec::new();
                for (k, _) in &members {
                    if let Some(k) = k {
                        let off = header + keys.len();
                        key_entries.extend_from_slice(&(off as u32).to_le_bytes()[..w]);
                        key_entries.extend_from_slice(&(k.len() as u16).to_le_bytes());
                        keys.extend_from_slice(k.as_bytes());
                    }
                }
                let mut value_entries = Vec::new();
                for (_, v) in &members {
                    let (ty, body) = encode_inner(v, large);
                    if ty == T_LITERAL {
                        value_entries.push(ty);
                        let mut e = body.clone();
                        e.resize(w, 0);
                        value_entries.extend(e);
                    } else {
                        let off = header + keys.len() + tail.len();
                        value_entries.push(ty);
                        value_entries.extend_from_slice(&(off as u32).to_le_bytes()[..w]);
                        tail.extend(body);
                    }
                }
                let size = header + keys.len() + tail.len();
                let mut out = Vec::new();
                out.extend_from_slice(&(n as u32).to_le_bytes()[..w]);
                out.extend_from_slice(&(size as u32).to_le_bytes()[..w]);
                out.extend(key_entries);
                out.extend(value_entries);
                out.extend(keys);
                out.extend(tail);
                let ty = match (object, large) {
                    (true, false) => T_SMALL_OBJECT,
                    (true, true) => T_LARGE_OBJECT,
                    (false, false) => T_SMALL_ARRAY,
                    (false, true) => T_LARGE_ARRAY,
                };
                (ty, out)
            }
            _ => unimplemented!("test encoder"),
        }
    }

    #[test]
    fn hand_made_small_object() {
        // {"a": 1, "bb": [true, "x"]}
        let bytes: Vec<u8> = vec![
            0x00, // small object
            0x02, 0x00, // 2 members
            0x21, 0x00, // size 33
            0x12, 0x00, 0x01, 0x00, // key "a" at 18, len 1
            0x13, 0x00, 0x02, 0x00, // key "bb" at 19, len 2
            0x05, 0x01, 0x00, // int16 1, inlined
            0x02, 0x15, 0x00, // small array at 21
            b'a', b'b', b'b', // keys
            0x02, 0x00, 0x0c, 0x00, // array: 2 elements, size 12
            0x04, 0x01, 0x00, // literal true
            0x0c, 0x0a, 0x00, // string at 10
            0x01, b'x', // "x"
        ];
        let v = parse(&bytes).unwrap();
        assert_eq!(v.to_string(), r#"{"a": 1, "bb": [true, "x"]}"#);
    }

    #[test]
    fn scalars_and_opaques() {
        assert_eq!(parse(&[]).unwrap(), JsonValue::Null);
        assert_eq!(parse(&[0x0c, 0x03, b'a', b'"', b'\n']).unwrap().to_string(), r#""a\"\n""#);
        assert_eq!(parse(&[0x07, 0xff, 0xff, 0xff, 0xff]).unwrap(), JsonValue::Int(-1));
        // opaque VARCHAR (15) with one byte 'U' as MySQL prints it
        assert_eq!(parse(&[0x0f, 15, 1, b'U']).unwrap().to_string(), r#""base64:type15:VQ==""#);
        // opaque DECIMAL(6,3) 123.456
        let mut d = vec![0x0f, 246, 0, 6, 3];
        d.extend(crate::decimal::tests::encode(false, "123", "456", 6, 3));
        d[2] = (d.len() - 3) as u8;
        assert_eq!(parse(&d).unwrap().to_string(), "123.456");
        // opaque DATE 2012-03-18 and DATETIME 2012-03-18 11:30:45 in packed form
        let ymd = ((2012i64 * 13 + 3) << 5) | 18;
        let date = (ymd << 17) << 24;
        let mut b = vec![0x0f, 10, 8];
        b.extend(date.to_le_bytes());
        assert_eq!(parse(&b).unwrap().to_string(), r#""2012-03-18""#);
        let dt = ((ymd << 17) | (11 << 12) | (30 << 6) | 45) << 24;
        let mut b = vec![0x0f, 12, 8];
        b.extend(dt.to_le_bytes());
        assert_eq!(parse(&b).unwrap().to_string(), r#""2012-03-18 11:30:45.000000""#);
        let t = (((87i64 << 12) | (31 << 6) | 46) << 24) + 654321;
        let mut b = vec![0x0f, 11, 8];
        b.extend(t.to_le_bytes());
        assert_eq!(parse(&b).unwrap().to_string(), r#""87:31:46.654321""#);
    }

    #[test]
    fn doubles() {
        let s = |d: f64| JsonValue::Double(d).to_string();
        assert_eq!(s(1.5), "1.5");
        assert_eq!(s(1.0), "1.0");
        assert_eq!(s(-0.25), "-0.25");
        assert_eq!(s(1e100), "1e100");
        assert_eq!(s(1.5e-300), "1.5e-300");
        assert_eq!(s(0.001), "0.001");
    }

    #[test]
    fn hostile_documents() {
        // offset outside the container
        assert!(parse(&[0x02, 0x01, 0x00, 0x07, 0x00, 0x0c, 0xff, 0x00]).is_err());
        // count larger than the size allows
        assert!(parse(&[0x02, 0xff, 0xff, 0x07, 0x00, 0x04, 0x00, 0x00]).is_err());
        // deep nesting: arrays each holding the next at offset 7
        let mut deep = Vec::new();
        for _ in 0..200 {
            deep.extend_from_slice(&[0x02, 0x01, 0x00]);
        }
        assert!(parse(&deep).is_err());
        // bad literal, bad type, runaway length
        assert!(parse(&[0x04, 0x09]).is_err());
        assert!(parse(&[0x0d]).is_err());
        assert!(parse(&[0x0c, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]).is_err());
    }

    fn json_strategy() -> impl Strategy<Value = JsonValue> {
        let leaf = prop_oneof![
            Just(JsonValue::Null),
            any::<bool>().prop_map(JsonValue::Bool),
            any::<i64>().prop_map(JsonValue::Int),
            any::<u64>().prop_map(JsonValue::UInt),
            (-1e10f64..1e10).prop_map(JsonValue::Double),
            "[a-z\"\\\\ é😀]{0,20}".prop_map(JsonValue::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(JsonValue::Array),
                proptest::collection::vec(("[a-z]{1,6}", inner), 0..8).prop_map(JsonValue::Object),
            ]
        })
    }

    proptest! {
        #[test]
        fn round_trip(v in json_strategy(), large: bool) {
            let b = encode(&v, large);
            prop_assert_eq!(parse(&b).unwrap(), v);
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse(&bytes);
            let _ = read_json_diffs(&bytes);
        }
    }

    fn diff_bytes(op: u8, path: &str, value: Option<&JsonValue>) -> Vec<u8> {
        let mut out = vec![op, path.len() as u8];
        out.extend_from_slice(path.as_bytes());
        if let Some(v) = value {
            let b = encode(v, false);
            out.push(b.len() as u8);
            out.extend(b);
        }
        out
    }

    #[test]
    fn diffs_read_and_apply() {
        let doc_bytes = encode(
            &JsonValue::Object(vec![
                ("a".into(), JsonValue::Int(1)),
                ("arr".into(), JsonValue::Array(vec![JsonValue::Int(1), JsonValue::Int(2), JsonValue::Int(3)])),
                ("key with space".into(), JsonValue::Bool(true)),
            ]),
            false,
        );
        let mut doc = parse(&doc_bytes).unwrap();
        let mut bytes = diff_bytes(0, "$.a", Some(&JsonValue::String("x".into())));
        bytes.extend(diff_bytes(1, "$.arr[1]", Some(&JsonValue::Int(9))));
        bytes.extend(diff_bytes(2, "$.arr[last]", None));
        bytes.extend(diff_bytes(1, "$.b", Some(&JsonValue::Null)));
        bytes.extend(diff_bytes(2, "$.\"key with space\"", None));
        let diffs = read_json_diffs(&bytes).unwrap();
        assert_eq!(diffs.len(), 5);
        assert_eq!(diffs[0].to_string(), r#"REPLACE $.a = "x""#);
        assert_eq!(diffs[2].to_string(), "REMOVE $.arr[last]");
        apply_diffs(&mut doc, &diffs).unwrap();
        assert_eq!(doc.to_string(), r#"{"a": "x", "b": null, "arr": [1, 9, 2]}"#);
        // a path that is not there is an error
        let bad = read_json_diffs(&diff_bytes(0, "$.zz[3]", Some(&JsonValue::Null))).unwrap();
        assert!(apply_diffs(&mut doc, &bad).is_err());
        // root replace
        let root = read_json_diffs(&diff_bytes(0, "$", Some(&JsonValue::Int(5)))).unwrap();
        apply_diffs(&mut doc, &root).unwrap();
        assert_eq!(doc, JsonValue::Int(5));
        // bad op, truncated
        assert!(read_json_diffs(&[3, 1, b'$']).is_err());
        assert!(read_json_diffs(&[0, 1, b'$', 5, 0x04]).is_err());
    }

    #[test]
    fn paths() {
        assert_eq!(parse_path("$").unwrap(), vec![]);
        assert_eq!(
            parse_path("$.a[ 2 ].\"b.c\"[last - 1]").unwrap(),
            vec![Leg::Key("a".into()), Leg::Index(2), Leg::Key("b.c".into()), Leg::Last(1)]
        );
        assert!(parse_path("a").is_err());
        assert!(parse_path("$.*").is_err());
        assert!(parse_path("$[x]").is_err());
    }
}
