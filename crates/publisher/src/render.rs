//! Column values as JSON and as SQL literals: `sluice dump`'s lines and statements, and the
//! pipeline's messages that name a row (a record too large for Kafka names its key).
//!
//! JSON keeps values exact: integers beyond ±2^53 (what a double holds exactly, and so what
//! most JSON readers keep) and DECIMALs are strings, binary is base64, temporal values are
//! ISO 8601 strings (TIMESTAMP as a UTC instant with `Z`, DATETIME without a zone, zero dates
//! as MySQL writes them: `0000-00-00`), ENUM and SET by their names.
//!
//! SQL literals are safe under any `sql_mode`: strings containing a backslash or a control
//! character, and every binary value, are written as hex literals.

use base64::Engine as _;
use serde_json::{json, Value as Json};
use sluice_binlog::charset::{ascii_compatible, decode_text};
use sluice_binlog::column::Column;
use std::cell::Cell;

use sluice_binlog::temporal::{civil_from_days, DateTime, Timestamp};
use sluice_binlog::Value;

/// The largest integer a JSON double holds exactly.
const MAX_SAFE_INT: u64 = (1 << 53) - 1;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn int_json(neg: bool, magnitude: u64, text: String) -> Json {
    if magnitude <= MAX_SAFE_INT {
        if neg {
            // magnitude <= 2^53 fits an i64
            Json::from(-(magnitude as i64))
        } else {
            Json::from(magnitude)
        }
    } else {
        Json::String(text)
    }
}

/// ENUM value name (1-based index; 0 is the empty error value).
pub fn enum_name(col: &Column, index: u16) -> Option<String> {
    if index == 0 {
        return Some(String::new());
    }
    let names = col.enum_values.as_ref()?;
    names.get(usize::from(index) - 1).map(|n| n.to_string())
}

/// SET members joined by commas, as MySQL prints them.
pub fn set_names(col: &Column, bits: u64) -> Option<String> {
    let names = col.set_values.as_ref()?;
    let mut out = Vec::new();
    for i in 0..64usize {
        if bits & (1u64 << i) != 0 {
            out.push(names.get(i)?.to_string());
        }
    }
    Some(out.join(","))
}

/// The VECTOR elements (little-endian f32).
pub fn vector_floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// A float as JSON without widening noise: f32 1.1 stays 1.1, not 1.100000023841858.
fn f32_json(f: f32) -> Json {
    let shortest: f64 = f.to_string().parse().unwrap_or(f64::from(f));
    serde_json::Number::from_f64(shortest).map_or_else(|| Json::String(f.to_string()), Json::Number)
}

/// One value as JSON.
pub fn value_json(v: &Value<'_>, col: &Column) -> Json {
    match v {
        Value::Null => Json::Null,
        Value::Int(i) => int_json(*i < 0, i.unsigned_abs(), i.to_string()),
        Value::UInt(u) => int_json(false, *u, u.to_string()),
        Value::Float(f) => f32_json(*f),
        Value::Double(d) => serde_json::Number::from_f64(*d).map_or_else(|| Json::String(d.to_string()), Json::Number),
        Value::Decimal(d) => Json::String(d.to_string()),
        Value::Year(y) => Json::from(*y),
        Value::Date(d) => Json::String(d.to_string()),
        Value::Time(t) => Json::String(t.to_string()),
        Value::DateTime(dt) => Json::String(dt.to_iso8601()),
        Value::Timestamp(ts) => {
            let s = ts.to_utc().to_iso8601();
            Json::String(if ts.is_zero() { s } else { s + "Z" })
        }
        Value::Text { bytes, collation } => match decode_text(bytes, *collation) {
            Ok(s) => Json::String(s.into_owned()),
            // bytes that are not valid in the column's charset: keep them, exactly
            Err(_) => json!({ "base64": b64(bytes) }),
        },
        Value::Bytes(b) => Json::String(b64(b)),
        Value::Enum(i) => enum_name(col, *i).map_or_else(|| Json::from(*i), Json::String),
        Value::Set(bits) => {
            set_names(col, *bits).map_or_else(|| int_json(false, *bits, bits.to_string()), Json::String)
        }
        Value::Bit { value, .. } => int_json(false, *value, value.to_string()),
        Value::Json(doc) => Json::String(doc.to_string()),
        Value::JsonDiff(diffs) => json!({ "json_diff": diffs.iter().map(|d| d.to_string()).collect::<Vec<_>>() }),
        Value::Geometry { srid, wkb } => json!({ "srid": srid, "wkb": b64(wkb) }),
        Value::Vector(bytes) => Json::Array(vector_floats(bytes).into_iter().map(f32_json).collect()),
    }
}

/// A row image as a JSON object keyed by column name (`@N` when names are unknown);
/// columns the image does not include are left out.
pub fn image_json(values: &[Option<Value<'_>>], columns: &[Column]) -> Json {
    let mut obj = serde_json::Map::with_capacity(values.len());
    for (col, v) in columns.iter().zip(values) {
        if let Some(v) = v {
            obj.insert(col.display_name(), value_json(v, col));
        }
    }
    Json::Object(obj)
}

// --- JSON written straight into an output buffer -------------------------------------------
//
// `sluice dump` writes one JSON line per row change. Building a `serde_json::Value` tree for
// each row (a map per image, a `String` per value) cost about ten times what decoding the row
// does; the writers below append the same text to a reused buffer instead. They produce
// exactly what `value_json(..).to_string()` produces (the tests compare the two): strings are
// escaped by serde_json (text whose only escapes are quotes and backslashes by hand, the same
// way), floats formatted by serde_json's own serializer.

/// Appends `s` as a JSON string (quoted and escaped exactly as serde_json does).
pub fn write_json_str(out: &mut Vec<u8>, s: &str) {
    // serde_json escapes `"`, `\\` and the control characters below 0x20, nothing else: text
    // without them (nearly all of it) is copied as it is, the rest goes through serde_json.
    if !has_special_byte(s.as_bytes(), false) {
        reserve_value(out, s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else if s.len() <= ESCAPE_IN_PLACE && !has_control_byte(s.as_bytes()) {
        write_quotes_escaped(out, s.as_bytes());
    } else {
        // at least its own length, and more as escapes need (by doubling, rarely)
        reserve_value(out, s.len() + 2);
        // Writing into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

/// Text up to this many bytes whose only bytes to escape are `"` and `\` is escaped by
/// [`write_quotes_escaped`] (room for twice its length is taken up front).
const ESCAPE_IN_PLACE: usize = 64 * 1024;

/// `bytes` as a JSON string, when `"` and `\` are its only bytes to escape (no control
/// characters), as serde_json writes it. Text with quotes is mostly a MariaDB JSON column (a
/// document held as text, a quote every few bytes), where serde_json's escaper, which appends
/// each run between escapes on its own, took about 850 instructions a value. Here the room for
/// every byte escaped is made once, and each byte is written without a branch: a backslash,
/// then the byte over it or after it (with the ASCII path in `write_value_json`, the dump's
/// instructions -1.2%).
fn write_quotes_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    let start = out.len();
    out.resize(start + 2 * bytes.len() + 2, 0);
    let buf = &mut out[start..];
    buf[0] = b'"';
    let mut at = 1;
    // eight bytes into a 16-byte window at a time: the window's indices masked to it need no
    // bounds checks (at most 2 x 8 bytes are written; the buffer holds 2 x len + 2)
    let mut rest = bytes;
    while let (Some((chunk, tail)), Some(window)) =
        (rest.split_first_chunk::<8>(), buf.get_mut(at..).and_then(<[u8]>::first_chunk_mut::<16>))
    {
        let mut j = 0;
        for &b in chunk {
            let escaped = usize::from(QUOTE_OR_BACKSLASH[usize::from(b)]);
            window[j & 15] = b'\\';
            window[(j + escaped) & 15] = b;
            j += 1 + escaped;
        }
        at += j;
        rest = tail;
    }
    for &b in rest {
        let escaped = usize::from(QUOTE_OR_BACKSLASH[usize::from(b)]);
        buf[at] = b'\\';
        buf[at + escaped] = b;
        at += 1 + escaped;
    }
    buf[at] = b'"';
    out.truncate(start + at + 1);
}

/// 1 for `"` and `\`, 0 for every other byte (one load instead of two compares a byte).
const QUOTE_OR_BACKSLASH: [u8; 256] = {
    let mut t = [0u8; 256];
    t[b'"' as usize] = 1;
    t[b'\\' as usize] = 1;
    t
};

/// True when `bytes` holds a control character (below 0x20), which JSON escapes as `\n`,
/// `\u0001` and the like.
fn has_control_byte(bytes: &[u8]) -> bool {
    any_byte(bytes, |x| x.wrapping_sub(ONES * 0x20) & !x)
}

/// True when `bytes` holds a control character or a byte above 0x7f.
fn has_control_byte_or_non_ascii(bytes: &[u8]) -> bool {
    any_byte(bytes, |x| (x.wrapping_sub(ONES * 0x20) & !x) | x)
}

/// True when `bytes` holds a byte JSON must escape (`"`, `\` or a control character below
/// 0x20), or, with `non_ascii`, one above 0x7f.
#[inline]
fn has_special_byte(bytes: &[u8], non_ascii: bool) -> bool {
    let top = if non_ascii { HIGH } else { 0 };
    any_byte(bytes, |x| {
        let below_space = x.wrapping_sub(ONES * 0x20) & !x;
        let q = x ^ (ONES * u64::from(b'"'));
        let quote = q.wrapping_sub(ONES) & !q;
        let b = x ^ (ONES * u64::from(b'\\'));
        let backslash = b.wrapping_sub(ONES) & !b;
        below_space | quote | backslash | (x & top)
    })
}

/// `0x01` in every byte of a word.
const ONES: u64 = 0x0101_0101_0101_0101;
/// The top bit of every byte of a word.
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Whether `test` flags a byte of `bytes`: `test` takes eight bytes as a word and sets the top
/// bit of the bytes it flags (SWAR: a byte of `x - 0x01..01` borrows, setting its top bit, only
/// where `x` held a zero byte or one below the subtrahend; a borrow can flag a byte above one
/// that really matched, never without one). Whole words first, then the last bytes as one more
/// word of real bytes: the string's last eight (overlapping bytes tested already), or, for text
/// under eight bytes, its bytes repeated. A byte seen twice does not change whether any is
/// flagged, and most text is short: the bytes after the last whole word, tested one by one,
/// were 1.6% of a dump's instructions.
#[inline(always)]
fn any_byte(bytes: &[u8], test: impl Fn(u64) -> u64) -> bool {
    let n = bytes.len();
    let word = |at: usize| bytes.get(at..at + 8).and_then(|w| w.try_into().ok()).map_or(0, u64::from_le_bytes);
    let half = |at: usize| bytes.get(at..at + 4).and_then(|w| w.try_into().ok()).map_or(0, u32::from_le_bytes);
    match n {
        0 => false,
        1..4 => {
            let (a, b, c) = (bytes[0], bytes[n / 2], bytes[n - 1]);
            test(u64::from_le_bytes([a, b, c, a, b, c, a, b])) & HIGH != 0
        }
        4..8 => test(u64::from(half(0)) | (u64::from(half(n - 4)) << 32)) & HIGH != 0,
        _ => {
            let mut chunks = bytes.chunks_exact(8);
            for c in &mut chunks {
                if test(u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])) & HIGH != 0 {
                    return true;
                }
            }
            !chunks.remainder().is_empty() && test(word(n - 8)) & HIGH != 0
        }
    }
}

/// A TIMESTAMP as UTC `YYYY-MM-DDThh:mm:ss[.ffffff]Z`; the zero one as `0000-00-00T00:00:00`,
/// no zone. The date's digits are kept for the day last written on this thread: the rows of a
/// table written together mostly share a day, and the day's calendar date and digits were
/// half a TIMESTAMP's 300 instructions.
fn write_timestamp(out: &mut Vec<u8>, ts: &Timestamp) {
    if ts.is_zero() {
        write_datetime(out, &ts.to_utc(), b'T');
        return;
    }
    thread_local! {
        static LAST_DAY: Cell<(u32, [u8; 10])> = const { Cell::new((u32::MAX, [0; 10])) };
    }
    let (day, sod) = (ts.seconds / 86_400, ts.seconds % 86_400);
    let date = LAST_DAY.with(|last| {
        let (d, digits) = last.get();
        if d == day {
            return digits;
        }
        let (y, m, dd) = civil_from_days(i64::from(day));
        let mut digits = [0u8; 10];
        // a u32 of seconds ends in 2106: every field fits its width
        date_digits(&mut digits, u16::try_from(y).unwrap_or(0), m as u8, dd as u8);
        last.set((day, digits));
        digits
    });
    out.extend_from_slice(&date);
    let pair = |n: u32| digit_pair(n as usize);
    let (h, mi, se) = (pair(sod / 3600), pair(sod / 60 % 60), pair(sod % 60));
    out.extend_from_slice(&[b'T', h[0], h[1], b':', mi[0], mi[1], b':', se[0], se[1]]);
    write_frac(out, ts.micros, ts.fsp);
    out.push(b'Z');
}

/// Appends seconds since the epoch as `YYYY-MM-DDThh:mm:ssZ` (0 as `0000-00-00T00:00:00Z`).
pub fn write_iso_utc(out: &mut Vec<u8>, secs: u32) {
    let ts = sluice_binlog::temporal::Timestamp { seconds: secs, micros: 0, fsp: 0 };
    write_datetime(out, &ts.to_utc(), b'T');
    out.push(b'Z');
}

/// Appends an integer or float through serde_json (itoa / ryu, as `Json::to_string` does).
pub fn write_json_num<T: serde::Serialize>(out: &mut Vec<u8>, n: T) {
    let _ = serde_json::to_writer(&mut *out, &n);
}

/// Appends `v` with at least `width` digits, zero-padded (as `format!("{v:0width$}")`).
fn write_padded(out: &mut Vec<u8>, v: u32, width: usize) {
    // the common case of the temporal fields: a value that fills its width exactly
    if width == 2 && v < 100 {
        out.extend_from_slice(&[b'0' + (v / 10) as u8, b'0' + (v % 10) as u8]);
        return;
    }
    if width == 4 && (1000..10000).contains(&v) {
        let d = |n: u32| b'0' + (n % 10) as u8;
        out.extend_from_slice(&[d(v / 1000), d(v / 100), d(v / 10), d(v)]);
        return;
    }
    let mut buf = [0u8; 10];
    let mut pos = buf.len();
    let mut v = v;
    loop {
        pos -= 1;
        if let Some(b) = buf.get_mut(pos) {
            *b = b'0' + (v % 10) as u8;
        }
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let digits = buf.get(pos..).unwrap_or(&[]);
    out.extend(std::iter::repeat_n(b'0', width.saturating_sub(digits.len())));
    out.extend_from_slice(digits);
}

/// Fractional seconds as `Display` for the temporal types prints them (`.` and fsp digits).
fn write_frac(out: &mut Vec<u8>, micros: u32, fsp: u8) {
    if fsp == 0 {
        return;
    }
    let fsp = usize::from(fsp.min(6));
    if micros < 1_000_000 {
        // all six digits at once, then the first `fsp` of them (truncating, as the division
        // below does): a copy of a fixed size is a move, one of `fsp` bytes a call to memcpy
        let mut b = [b'.', 0, 0, 0, 0, 0, 0];
        // two digits at a time
        for (i, pair) in [micros / 10_000, micros / 100 % 100, micros % 100].into_iter().enumerate() {
            if let Some(d) = b.get_mut(1 + 2 * i..3 + 2 * i) {
                d.copy_from_slice(&digit_pair(pair as usize));
            }
        }
        out.extend_from_slice(&b);
        out.truncate(out.len() - (6 - fsp));
        return;
    }
    out.push(b'.');
    write_padded(out, micros / 10u32.pow(6 - fsp as u32), fsp);
}

/// A DATE's `YYYY-MM-DD` into `b` (10 bytes), when its fields fit their widths.
fn date_digits(b: &mut [u8], year: u16, month: u8, day: u8) -> bool {
    if year >= 10_000 || month >= 100 || day >= 100 {
        return false;
    }
    let y = u32::from(year);
    let digits = [
        y / 1000,
        y / 100 % 10,
        y / 10 % 10,
        y % 10,
        u32::from(month / 10),
        u32::from(month % 10),
        u32::from(day / 10),
        u32::from(day % 10),
    ];
    for (slot, d) in [0, 1, 2, 3, 5, 6, 8, 9].into_iter().zip(digits) {
        if let Some(c) = b.get_mut(slot) {
            *c = b'0' + d as u8;
        }
    }
    for slot in [4, 7] {
        if let Some(c) = b.get_mut(slot) {
            *c = b'-';
        }
    }
    true
}

/// A DATE as its `Display` form.
fn write_date(out: &mut Vec<u8>, year: u16, month: u8, day: u8) {
    let mut b = [0u8; 10];
    if date_digits(&mut b, year, month, day) {
        out.extend_from_slice(&b);
        return;
    }
    write_padded(out, u32::from(year), 4);
    out.push(b'-');
    write_padded(out, u32::from(month), 2);
    out.push(b'-');
    write_padded(out, u32::from(day), 2);
}

/// A DATETIME as its `Display` form with `sep` between date and time (`' '`, or `'T'` for
/// ISO 8601). The digits go into one array and out in one copy: a DATETIME column costs
/// one bounds-checked append instead of eleven.
fn write_datetime(out: &mut Vec<u8>, dt: &DateTime, sep: u8) {
    let mut b = [0u8; 19];
    if dt.hour < 100 && dt.minute < 100 && dt.second < 100 && date_digits(&mut b, dt.year, dt.month, dt.day) {
        let time = [
            sep,
            b'0' + dt.hour / 10,
            b'0' + dt.hour % 10,
            b':',
            b'0' + dt.minute / 10,
            b'0' + dt.minute % 10,
            b':',
            b'0' + dt.second / 10,
            b'0' + dt.second % 10,
        ];
        if let Some(t) = b.get_mut(10..) {
            t.copy_from_slice(&time);
        }
        out.extend_from_slice(&b);
    } else {
        write_date(out, dt.year, dt.month, dt.day);
        out.push(sep);
        write_padded(out, u32::from(dt.hour), 2);
        out.push(b':');
        write_padded(out, u32::from(dt.minute), 2);
        out.push(b':');
        write_padded(out, u32::from(dt.second), 2);
    }
    write_frac(out, dt.micros, dt.fsp);
}

/// "00" to "99": an integer's digits two at a time.
const DIGIT_PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// The two digits of `n`, below 100.
#[inline(always)]
fn digit_pair(n: usize) -> [u8; 2] {
    let p = n * 2;
    DIGIT_PAIRS.get(p..p + 2).map_or([b'0'; 2], |d| [d[0], d[1]])
}

/// 10^0 to 10^19.
const POW10: [u64; 20] = {
    let mut p = [1u64; 20];
    let mut i = 1;
    while i < 20 {
        p[i] = p[i - 1] * 10;
        i += 1;
    }
    p
};

/// Appends `v` in decimal. The digits are written into a fixed array, appended whole and cut
/// to their count, known up front: a copy of a fixed size is a few moves, where `itoa`'s
/// digits, of a length known only after, are appended through a call to `memcpy` (a dump
/// writes some 8 M integers, each row's number among them).
pub fn write_u64(out: &mut Vec<u8>, v: u64) {
    // the digit count from the bit length (log10(2) ~ 1233/4096), corrected by one compare
    // (`ilog10` cost four times as much); `v | 1` gives zero its one digit and moves no
    // power of ten past 1, which are even
    let approx = (((64 - (v | 1).leading_zeros()) * 1233) >> 12) as usize;
    let n = approx + usize::from(POW10.get(approx).is_some_and(|&p| v | 1 >= p));
    let mut digits = [b'0'; 20];
    let (mut v, mut end) = (v, n);
    while v >= 100 {
        let pair = digit_pair((v % 100) as usize);
        v /= 100;
        end -= 2;
        if let Some(d) = digits.get_mut(end..end + 2) {
            d.copy_from_slice(&pair);
        }
    }
    if v >= 10 {
        if let Some(d) = digits.get_mut(..2) {
            d.copy_from_slice(&digit_pair(v as usize));
        }
    } else if let Some(d) = digits.first_mut() {
        *d = b'0' + v as u8;
    }
    let start = out.len();
    out.extend_from_slice(&digits);
    out.truncate(start + n);
}

fn write_int_json(out: &mut Vec<u8>, neg: bool, magnitude: u64) {
    // beyond 2^53 a JSON reader's double would round it: such integers are strings
    let quoted = magnitude > MAX_SAFE_INT;
    if quoted {
        out.push(b'"');
    }
    if neg && magnitude != 0 {
        out.push(b'-');
    }
    write_u64(out, magnitude);
    if quoted {
        out.push(b'"');
    }
}

fn write_f64_json(out: &mut Vec<u8>, d: f64, text: impl FnOnce() -> String) {
    if d.is_finite() {
        write_json_num(out, d);
    } else {
        write_json_str(out, &text());
    }
}

fn write_f32_json(out: &mut Vec<u8>, f: f32) {
    let shortest: f64 = f.to_string().parse().unwrap_or(f64::from(f));
    write_f64_json(out, shortest, || f.to_string());
}

/// Makes room for a value of `len` bytes and the rest of its line. Without the rest, the
/// line's closing bytes would outgrow a buffer sized exactly for a huge value, and the
/// buffer's doubling would hold it twice over at once (a 100 MiB BLOB's 200 MiB of hex
/// peaked at 600 MiB).
fn reserve_value(out: &mut Vec<u8>, len: usize) {
    /// The rest of a line after its largest value: closing quotes, brackets and the like.
    const REST: usize = 4096;
    // small values as before: room for the rest of each would grow every buffer early
    out.reserve(if len < 16 * REST { len } else { len.saturating_add(REST) });
}

/// Standard base64's alphabet (RFC 4648, as `base64`'s `STANDARD` engine).
const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Values up to this many bytes are base64-encoded by [`write_b64_short`].
const B64_SHORT: usize = 64;

/// Standard padded base64 of a short value (a hash, a UUID, a token), four symbols per three
/// bytes appended as one fixed-size array: the `base64` engine's setup and chunked loops took
/// about 345 instructions for a 16-byte value, a tenth of a dump's value rendering.
fn write_b64_short(out: &mut Vec<u8>, bytes: &[u8]) {
    let sym = |n: u32| B64[(n & 63) as usize];
    let mut groups = bytes.chunks_exact(3);
    for g in &mut groups {
        let n = (u32::from(g[0]) << 16) | (u32::from(g[1]) << 8) | u32::from(g[2]);
        out.extend_from_slice(&[sym(n >> 18), sym(n >> 12), sym(n >> 6), sym(n)]);
    }
    match *groups.remainder() {
        [a] => {
            let n = u32::from(a) << 16;
            out.extend_from_slice(&[sym(n >> 18), sym(n >> 12), b'=', b'=']);
        }
        [a, b] => {
            let n = (u32::from(a) << 16) | (u32::from(b) << 8);
            out.extend_from_slice(&[sym(n >> 18), sym(n >> 12), sym(n >> 6), b'=']);
        }
        _ => {}
    }
}

fn write_b64_str(out: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.len() <= B64_SHORT {
        out.reserve(bytes.len().div_ceil(3) * 4 + 2);
        out.push(b'"');
        write_b64_short(out, bytes);
        out.push(b'"');
        return;
    }
    // Encoded in place: base64 needs no escaping, so the text is neither built apart nor
    // copied nor scanned (and `encode_slice` is the engine's fast path; `encode_string`
    // goes through its chunked encoder).
    out.push(b'"');
    let start = out.len();
    let len = base64::encoded_len(bytes.len(), true).unwrap_or(0);
    reserve_value(out, len);
    out.resize(start + len, 0);
    let written = out
        .get_mut(start..)
        .and_then(|dst| base64::engine::general_purpose::STANDARD.encode_slice(bytes, dst).ok())
        .unwrap_or(0);
    out.truncate(start + written);
    out.push(b'"');
}

/// Appends one value as JSON: the text [`value_json`] gives, without building it.
// Inline into the dump's image visitor: called per value from one place on the hot path,
// and merged there it took 6.8% off a dump's instructions (callgrind, `bench/README.md`).
#[inline]
pub fn write_value_json(out: &mut Vec<u8>, v: &Value<'_>, col: &Column) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Int(i) => write_int_json(out, *i < 0, i.unsigned_abs()),
        Value::UInt(u) => write_int_json(out, false, *u),
        Value::Float(f) => write_f32_json(out, *f),
        Value::Double(d) => write_f64_json(out, *d, || d.to_string()),
        Value::Decimal(d) => {
            out.push(b'"');
            d.write_to(out);
            out.push(b'"');
        }
        Value::Year(y) => write_json_num(out, *y),
        Value::Date(d) => {
            out.push(b'"');
            write_date(out, d.year, d.month, d.day);
            out.push(b'"');
        }
        Value::Time(t) => {
            out.push(b'"');
            if t.negative {
                out.push(b'-');
            }
            write_padded(out, t.hours, 2);
            out.push(b':');
            write_padded(out, u32::from(t.minutes), 2);
            out.push(b':');
            write_padded(out, u32::from(t.seconds), 2);
            write_frac(out, t.micros, t.fsp);
            out.push(b'"');
        }
        Value::DateTime(dt) => {
            out.push(b'"');
            write_datetime(out, dt, b'T');
            out.push(b'"');
        }
        Value::Timestamp(ts) => {
            out.push(b'"');
            write_timestamp(out, ts);
            out.push(b'"');
        }
        // most text is ASCII needing no escapes: one scan says so, and it is copied as it is
        Value::Text { bytes, collation } if !has_special_byte(bytes, true) && ascii_compatible(*collation) => {
            out.reserve(bytes.len() + 2);
            out.push(b'"');
            out.extend_from_slice(bytes);
            out.push(b'"');
        }
        // ASCII with quotes (a MariaDB JSON column's document): escaped without decoding
        Value::Text { bytes, collation }
            if bytes.len() <= ESCAPE_IN_PLACE
                && ascii_compatible(*collation)
                && !has_control_byte_or_non_ascii(bytes) =>
        {
            write_quotes_escaped(out, bytes);
        }
        Value::Text { bytes, collation } => match decode_text(bytes, *collation) {
            Ok(s) => write_json_str(out, &s),
            // bytes that are not valid in the column's charset: keep them, exactly
            Err(_) => {
                out.extend_from_slice(b"{\"base64\":");
                write_b64_str(out, bytes);
                out.push(b'}');
            }
        },
        Value::Bytes(b) => write_b64_str(out, b),
        Value::Enum(i) => match enum_name_str(col, *i) {
            Some(name) => write_json_str(out, name),
            None => write_json_num(out, *i),
        },
        Value::Set(bits) => match set_names(col, *bits) {
            Some(names) => write_json_str(out, &names),
            None => write_int_json(out, false, *bits),
        },
        Value::Bit { value, .. } => write_int_json(out, false, *value),
        // rare (MySQL binary JSON, partial updates, spatial, vectors): through serde_json
        Value::Json(_) | Value::JsonDiff(_) | Value::Geometry { .. } | Value::Vector(_) => {
            let _ = serde_json::to_writer(&mut *out, &value_json(v, col));
        }
    }
}

/// Each column's JSON object key with a comma before it and a colon after (`,"name":`),
/// written once per table or event rather than escaped again for every row image (the comma
/// spares a separate append per value; [`end_object`] makes the first one the `{`).
pub fn json_keys(columns: &[Column]) -> Vec<JsonKey> {
    columns
        .iter()
        .map(|c| {
            let mut k = Vec::with_capacity(c.name.as_ref().map_or(8, |n| n.len() + 4));
            k.push(b',');
            write_json_str(&mut k, &c.display_name());
            k.push(b':');
            JsonKey::new(k)
        })
        .collect()
}

/// A column's JSON key, `,"name":`. A short one (nearly all) is kept in a fixed-size array
/// and appended as one fixed-size copy and a truncation, which the compiler writes inline,
/// instead of a call to `memcpy` for a dozen bytes: a dump of 1.4 M rows appends 30 M keys.
pub struct JsonKey {
    short: [u8; JsonKey::SHORT],
    len: usize,
    long: Vec<u8>,
}

impl JsonKey {
    const SHORT: usize = 32;

    fn new(key: Vec<u8>) -> JsonKey {
        let mut short = [0u8; Self::SHORT];
        match short.get_mut(..key.len()) {
            Some(head) => {
                head.copy_from_slice(&key);
                JsonKey { short, len: key.len(), long: Vec::new() }
            }
            None => JsonKey { short, len: key.len(), long: key },
        }
    }

    /// Appends the key to `out`.
    #[inline]
    pub fn append_to(&self, out: &mut Vec<u8>) {
        if self.len <= Self::SHORT {
            let start = out.len();
            out.extend_from_slice(&self.short);
            out.truncate(start + self.len);
        } else {
            out.extend_from_slice(&self.long);
        }
    }
}

/// Appends column `i`'s member, `,"name":value`, to the object being written (`keys` from
/// [`json_keys`] over `columns`; an index past them is no column, and nothing is written).
#[inline]
pub fn write_member(out: &mut Vec<u8>, columns: &[Column], keys: &[JsonKey], i: usize, value: &Value<'_>) {
    if let (Some(col), Some(key)) = (columns.get(i), keys.get(i)) {
        key.append_to(out);
        write_value_json(out, value, col);
    }
}

/// Ends an object whose members [`write_member`] appended from `open` on: every member came
/// with a comma before it, and the first one's is where the object opens.
pub fn end_object(out: &mut Vec<u8>, open: usize) {
    match out.get_mut(open) {
        Some(first) => *first = b'{',
        None => out.push(b'{'),
    }
    out.push(b'}');
}

/// ENUM value name, borrowed (see [`enum_name`]).
fn enum_name_str(col: &Column, index: u16) -> Option<&str> {
    if index == 0 {
        return Some("");
    }
    let names = col.enum_values.as_ref()?;
    names.get(usize::from(index) - 1).map(|n| &**n)
}

/// Appends `X'..'`: the bytes as a hex literal (written straight into `out`: a 100 MiB BLOB
/// is 200 MiB of hex, and a copy of it per step of building the statement was a gigabyte).
fn write_hex_literal(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    reserve_value(out, bytes.len() * 2 + 3);
    out.extend_from_slice(b"X'");
    for &b in bytes {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 15)]);
    }
    out.push(b'\'');
}

/// Appends a string literal: `'...'` with quotes doubled, or a `_utf8mb4 X'..'` hex literal
/// when the text holds a backslash or a control character (whose meaning depends on sql_mode).
fn write_sql_string(out: &mut Vec<u8>, s: &str) {
    if s.chars().any(|c| c == '\\' || c.is_control()) {
        out.extend_from_slice(b"_utf8mb4 ");
        write_hex_literal(out, s.as_bytes());
        return;
    }
    reserve_value(out, s.len() + 2);
    out.push(b'\'');
    for part in s.split_inclusive('\'') {
        out.extend_from_slice(part.as_bytes());
        if part.ends_with('\'') {
            out.push(b'\'');
        }
    }
    out.push(b'\'');
}

/// A string literal, as [`write_sql_string`] writes it.
#[cfg(test)]
pub fn sql_string(s: &str) -> String {
    let mut out = Vec::new();
    write_sql_string(&mut out, s);
    String::from_utf8(out).unwrap_or_default()
}

/// Appends one value as an SQL literal.
pub fn write_value_sql(out: &mut Vec<u8>, v: &Value<'_>, col: &Column) {
    use std::io::Write as _;
    // writes into a Vec cannot fail
    let _ = match v {
        Value::Null => out.write_all(b"NULL"),
        Value::Int(i) => write!(out, "{i}"),
        Value::UInt(u) => write!(out, "{u}"),
        // approximate-value literals (`1.7976931348623157e308`): a plain decimal of more than
        // 65 digits is read by MySQL/MariaDB as an exact DECIMAL literal and clipped (1.79e308
        // became 1e65, -2.2e-308 became 0); FLOAT goes through its exact f64 value so the
        // server's rounding back to FLOAT gives the same bits
        Value::Float(f) => write!(out, "{:e}", f64::from(*f)),
        Value::Double(d) => write!(out, "{d:e}"),
        Value::Decimal(d) => write!(out, "{d}"),
        Value::Year(y) => write!(out, "{y}"),
        Value::Date(d) => write!(out, "'{d}'"),
        Value::Time(t) => write!(out, "'{t}'"),
        Value::DateTime(dt) => write!(out, "'{dt}'"),
        // the SQL output sets time_zone='+00:00' first, so UTC text replays the same instant
        Value::Timestamp(ts) => write!(out, "'{ts}'"),
        Value::Text { bytes, collation } => {
            match decode_text(bytes, *collation) {
                Ok(s) => write_sql_string(out, &s),
                Err(_) => write_hex_literal(out, bytes),
            }
            Ok(())
        }
        Value::Bytes(b) => {
            write_hex_literal(out, b);
            Ok(())
        }
        Value::Enum(i) => match enum_name(col, *i) {
            Some(n) => {
                write_sql_string(out, &n);
                Ok(())
            }
            None => write!(out, "{i}"),
        },
        Value::Set(bits) => match set_names(col, *bits) {
            Some(n) => {
                write_sql_string(out, &n);
                Ok(())
            }
            None => write!(out, "{bits}"),
        },
        Value::Bit { value, .. } => write!(out, "b'{value:b}'"),
        Value::Json(doc) => {
            write_sql_string(out, &doc.to_string());
            Ok(())
        }
        Value::JsonDiff(_) => out.write_all(b"NULL /* partial JSON update without a before image */"),
        Value::Geometry { srid, wkb } => {
            out.extend_from_slice(b"ST_GeomFromWKB(");
            write_hex_literal(out, wkb);
            write!(out, ", {srid})")
        }
        Value::Vector(bytes) => {
            let items: Vec<String> = vector_floats(bytes).iter().map(f32::to_string).collect();
            write!(out, "STRING_TO_VECTOR('[{}]')", items.join(","))
        }
    };
}

/// One value as an SQL literal, as [`write_value_sql`] writes it.
#[cfg(test)]
pub fn value_sql(v: &Value<'_>, col: &Column) -> String {
    let mut out = Vec::new();
    write_value_sql(&mut out, v, col);
    // every literal is UTF-8: digits, quoted text decoded from its charset, or hex
    String::from_utf8(out).unwrap_or_default()
}

/// A backquoted identifier.
pub fn ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_binlog::ColumnType;

    /// A row image as a JSON object, through the writers `sluice dump` uses.
    fn write_image_json(out: &mut Vec<u8>, values: &[Option<Value<'_>>], columns: &[Column], keys: &[JsonKey]) {
        let open = out.len();
        for (i, v) in values.iter().enumerate() {
            if let Some(v) = v {
                write_member(out, columns, keys, i, v);
            }
        }
        end_object(out, open);
    }

    fn col() -> Column {
        Column::new(0, ColumnType::Long, 0, true)
    }

    /// Short values' base64 by hand, against the `base64` engine used for longer ones, at
    /// every length up to the limit and past it.
    #[test]
    fn short_base64_as_the_engine() {
        use base64::Engine;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for len in 0..=B64_SHORT + 3 {
            for _ in 0..20 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                let mut out = b"x".to_vec();
                write_b64_str(&mut out, &bytes);
                let expect = format!("x\"{}\"", base64::engine::general_purpose::STANDARD.encode(&bytes));
                assert_eq!(String::from_utf8(out).unwrap(), expect, "{len} bytes");
            }
        }
    }

    /// Integers' digits, at every power of ten's edge and over a spread of values, against
    /// the standard library's.
    #[test]
    fn u64_digits() {
        let mut values = vec![0, u64::MAX, u64::MAX - 1];
        for k in 0..20 {
            let p = 10u64.pow(k);
            values.extend([p - 1, p, p + 1, p.saturating_mul(5)]);
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            values.push(x >> (x % 64));
        }
        for v in values {
            let mut out = b"[".to_vec();
            write_u64(&mut out, v);
            assert_eq!(out, format!("[{v}").into_bytes());
        }
    }

    #[test]
    fn integers_stay_exact() {
        assert_eq!(value_json(&Value::UInt(u64::MAX), &col()), Json::String("18446744073709551615".into()));
        assert_eq!(value_json(&Value::Int(i64::MIN), &col()), Json::String("-9223372036854775808".into()));
        assert_eq!(value_json(&Value::Int(-5), &col()), json!(-5));
        assert_eq!(value_json(&Value::UInt(MAX_SAFE_INT), &col()), json!(9007199254740991u64));
        assert_eq!(value_json(&Value::UInt(MAX_SAFE_INT + 1), &col()), json!("9007199254740992"));
        assert_eq!(value_json(&Value::Float(1.1), &col()).to_string(), "1.1");
    }

    /// The direct writers give exactly the text of the serde_json values they replace.
    #[test]
    fn written_json_matches_serde_json() {
        let strings = [
            "",
            "plain",
            "with \"quote\"",
            "back\\slash",
            "tab\there",
            "\u{1}\u{1f}",
            "\u{7f}é€😀",
            "eight by",
            "exactly sixteen!",
            "0123456789abcdef\n",
            "ünïcödé text that is longer than eight bytes",
        ];
        for s in strings {
            let mut out = Vec::new();
            write_json_str(&mut out, s);
            assert_eq!(String::from_utf8(out).unwrap(), Json::from(s).to_string(), "{s:?}");
        }
        let c = col();
        let dt = sluice_binlog::temporal::DateTime {
            year: 2024,
            month: 1,
            day: 31,
            hour: 9,
            minute: 5,
            second: 7,
            micros: 120,
            fsp: 6,
        };
        let values = [
            Value::Null,
            Value::Int(-5),
            Value::Int(0),
            Value::Int(9),
            Value::Int(10),
            Value::Int(-9_007_199_254_740_991),
            Value::Int(-9_007_199_254_740_992),
            Value::UInt(9_007_199_254_740_992),
            Value::UInt(1_000_000_000_000_000_000),
            Value::UInt(9_999_999_999_999_999_999),
            Value::Int(i64::MAX),
            Value::Int(i64::MIN),
            Value::UInt(u64::MAX),
            Value::UInt(MAX_SAFE_INT),
            Value::Float(1.1),
            Value::Float(f32::NAN),
            Value::Double(0.1),
            Value::Double(f64::INFINITY),
            Value::Double(1e300),
            Value::Year(2024),
            Value::DateTime(dt),
            Value::Date(sluice_binlog::temporal::Date { year: 0, month: 0, day: 0 }),
            Value::Timestamp(sluice_binlog::temporal::Timestamp { seconds: 0, micros: 0, fsp: 2 }),
            Value::Timestamp(sluice_binlog::temporal::Timestamp { seconds: 1706702400, micros: 5, fsp: 3 }),
            Value::Time(sluice_binlog::temporal::Time {
                negative: true,
                hours: 838,
                minutes: 59,
                seconds: 59,
                micros: 0,
                fsp: 0,
            }),
            Value::Decimal("-12.30".parse().unwrap()),
            Value::Text { bytes: b"a\"b", collation: Some(45) },
            Value::Text { bytes: b"\xff\xfe", collation: Some(45) },
            // ASCII copied as it is, in every charset where ASCII is ASCII, and not otherwise
            Value::Text { bytes: b"plain ascii, long enough for a word or two", collation: Some(8) },
            Value::Text { bytes: b"plain", collation: None },
            Value::Text { bytes: b"ascii in binary", collation: Some(63) },
            Value::Text { bytes: b"\x00a\x00b", collation: Some(35) },
            Value::Text { bytes: b"a\x00b\x00", collation: Some(56) },
            Value::Text { bytes: b"abcd", collation: Some(60) },
            Value::Text { bytes: b"tab\there and a \\ too, past eight", collation: Some(8) },
            Value::Text { bytes: b"caf\xe9 latin1 past eight bytes", collation: Some(8) },
            Value::Text { bytes: b"\x7f del", collation: Some(33) },
            Value::Text { bytes: b"", collation: Some(8) },
            Value::Bytes(b"\x00\x01bin".as_slice().into()),
            Value::Bit { value: 5, bits: 3 },
            Value::Enum(0),
            Value::Enum(9),
            Value::Set(3),
        ];
        for v in &values {
            let mut out = Vec::new();
            write_value_json(&mut out, v, &c);
            assert_eq!(String::from_utf8(out).unwrap(), value_json(v, &c).to_string(), "{v:?}");
        }
        // TIMESTAMPs over the whole range, days apart and seconds apart (the day's digits are
        // kept between values), against the value's Display
        let mut secs: Vec<u32> = vec![1, 59, 86_399, 86_400, 951_782_400, 1_700_000_000, u32::MAX - 1, u32::MAX];
        secs.extend((0..2_000u32).map(|i| i.wrapping_mul(2_654_435_761)));
        secs.extend((0..200u32).map(|i| 1_700_000_000 + i * 7_919));
        for (i, &seconds) in secs.iter().enumerate() {
            let v = Value::Timestamp(sluice_binlog::temporal::Timestamp {
                seconds,
                micros: i as u32 * 37 % 1_000_000,
                fsp: (i % 7) as u8,
            });
            let mut out = Vec::new();
            write_value_json(&mut out, &v, &c);
            assert_eq!(String::from_utf8(out).unwrap(), value_json(&v, &c).to_string(), "{v:?}");
        }
        // fractions of a second, every precision, against the value's Display
        for fsp in 0..=6 {
            for micros in [0, 5, 120, 99_999, 100_000, 987_654, 999_999] {
                let v = Value::DateTime(sluice_binlog::temporal::DateTime { micros, fsp, ..dt });
                let mut out = Vec::new();
                write_value_json(&mut out, &v, &c);
                assert_eq!(String::from_utf8(out).unwrap(), value_json(&v, &c).to_string(), "{v:?}");
            }
        }
        // whole images: every column, some absent, none
        let columns: Vec<Column> = (0..values.len()).map(|i| Column::new(i, ColumnType::Long, 0, true)).collect();
        let keys = json_keys(&columns);
        let all: Vec<Option<Value<'_>>> = values.iter().cloned().map(Some).collect();
        let some: Vec<Option<Value<'_>>> =
            values.iter().enumerate().map(|(i, v)| (i % 3 == 1).then(|| v.clone())).collect();
        let none: Vec<Option<Value<'_>>> = vec![None; values.len()];
        for image in [&all, &some, &none] {
            let mut out = b"{\"before\":".to_vec();
            write_image_json(&mut out, image, &columns, &keys);
            let want = format!("{{\"before\":{}", image_json(image, &columns));
            assert_eq!(String::from_utf8(out).unwrap(), want);
        }
    }

    /// Text with quotes and backslashes (escaped in place), with control characters and
    /// non-ASCII beside them (through serde_json or decoded first): every length around the
    /// eight-byte steps, and the in-place limit, as serde_json writes it.
    #[test]
    fn quoted_text_escaped_as_serde_json() {
        let alphabet = ['"', '\\', 'a', 'Z', ' ', '{', ':', '\n', '\u{1}', '\u{7f}', 'é', '😀'];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut texts = vec![r#"{"n": 123, "tags": ["a", 3], "ok": true}"#.to_string(), "\"".repeat(ESCAPE_IN_PLACE)];
        texts.push(texts[1].clone() + "\\");
        for len in 0..70 {
            for plain_share in [0, 6, 11] {
                texts.push(
                    (0..len)
                        .map(|_| {
                            let r = next() as usize;
                            // mostly quotes and ASCII, sometimes any of the alphabet
                            alphabet[if r % 12 < plain_share { r % 5 } else { r / 16 % alphabet.len() }]
                        })
                        .collect(),
                );
            }
        }
        let c = col();
        for s in &texts {
            let mut out = b"[1,".to_vec();
            write_json_str(&mut out, s);
            assert_eq!(out, format!("[1,{}", Json::from(s.as_str())).into_bytes(), "{s:?}");
            for collation in [Some(45), Some(8), None] {
                if collation == Some(8) && !s.is_ascii() {
                    continue;
                }
                let v = Value::Text { bytes: s.as_bytes(), collation };
                let mut out = Vec::new();
                write_value_json(&mut out, &v, &c);
                assert_eq!(String::from_utf8(out).unwrap(), value_json(&v, &c).to_string(), "{v:?}");
            }
        }
    }

    /// Keys short and long (past the fixed-size array, and one whose escaping makes it so)
    /// append exactly the bytes `write_json_str` gives, after whatever `out` already holds.
    #[test]
    fn json_keys_append_exactly() {
        for name in ["id", "", "x".repeat(29).as_str(), "y".repeat(30).as_str(), "é\"quoted\"\\".repeat(4).as_str()] {
            let mut want = b"{\"a\":1,".to_vec();
            write_json_str(&mut want, name);
            want.push(b':');
            let key = {
                let mut k = vec![b','];
                write_json_str(&mut k, name);
                k.push(b':');
                JsonKey::new(k)
            };
            let mut out = b"{\"a\":1".to_vec();
            key.append_to(&mut out);
            assert_eq!(String::from_utf8(out).unwrap(), String::from_utf8(want).unwrap(), "{name:?}");
        }
    }

    /// The digit writers give `Display`'s text for every width a field can take, including
    /// values no server writes (a year of five digits, an hour of three, micros past a
    /// second) that a damaged binlog could still hold.
    #[test]
    fn temporal_digits_match_display() {
        let c = col();
        for year in [0u16, 5, 999, 2024, 9999, 12345] {
            for (hour, micros) in [(0u8, 0u32), (9, 5), (23, 120), (99, 999_999), (100, 1_000_005)] {
                for fsp in 0..=6u8 {
                    let dt = DateTime { year, month: 1, day: 31, hour, minute: 5, second: 7, micros, fsp };
                    let date = sluice_binlog::temporal::Date { year, month: 12, day: fsp };
                    for v in [Value::DateTime(dt), Value::Date(date)] {
                        let mut out = Vec::new();
                        write_value_json(&mut out, &v, &c);
                        assert_eq!(String::from_utf8(out).unwrap(), value_json(&v, &c).to_string(), "{v:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn sql_strings_are_safe() {
        assert_eq!(sql_string("it's"), "'it''s'");
        assert_eq!(sql_string("a\\b"), "_utf8mb4 X'615C62'");
        assert_eq!(sql_string("a\nb"), "_utf8mb4 X'610A62'");
        assert_eq!(ident("we`ird"), "`we``ird`");
    }

    #[test]
    fn enum_and_set_names() {
        let mut c = Column::new(0, ColumnType::Enum, 0, true);
        c.enum_values = Some(vec!["a".into(), "b".into()].into());
        c.set_values = Some(vec!["x".into(), "y".into(), "z".into()].into());
        assert_eq!(value_json(&Value::Enum(2), &c), json!("b"));
        assert_eq!(value_json(&Value::Enum(0), &c), json!(""));
        assert_eq!(value_json(&Value::Set(0b101), &c), json!("x,z"));
        assert_eq!(value_sql(&Value::Set(0b101), &c), "'x,z'");
    }

    #[test]
    fn float_literals_keep_their_exponent() {
        assert_eq!(value_sql(&Value::Double(1.797_693_134_862_315_7e308), &col()), "1.7976931348623157e308");
        assert_eq!(value_sql(&Value::Double(-2.225_073_858_507_201_4e-308), &col()), "-2.2250738585072014e-308");
        assert_eq!(value_sql(&Value::Double(0.1), &col()), "1e-1");
        assert_eq!(value_sql(&Value::Float(1.5), &col()), "1.5e0");
    }
}
