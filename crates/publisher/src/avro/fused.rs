//! The record path's shortcut for the commonest column types: a value's bytes in the row image
//! written as its field's Avro in one step, past [`Value`](sluice_binlog::Value).
//!
//! Through a `Value`, each column value is dispatched twice: on its column type to decode it
//! (`sluice_binlog::value`, where a byte becomes a value) and on the pair of its field's kind and
//! the value's variant to encode it ([`super::encode`], where a value becomes Avro), with a
//! closure call and the checks of both between. A [`Fused`] is made once per table version for
//! a column whose type and field are among the common pairs (integers, floats, DECIMAL up to 18
//! digits, DATE, DATETIME, TIMESTAMP, ASCII-compatible text, binary strings, ENUM), and reads
//! and writes such a value with one dispatch. It takes only the plain case: anything else (a zero
//! date, text that is not ASCII nor UTF-8 in a UTF-8 column, an ENUM index out of range, a
//! truncated image) it leaves untouched for the two steps, which give the value, or the error,
//! they always gave. So it is an accelerator, never a second meaning: the records are the same
//! bytes either way (`record_path --compare` over the benchmark's 1.5 M records, and a test over
//! every recorded binlog file, compare both ways record by record).
//!
//! What it buys: with the walk handing over a run of columns at a time
//! (`ImageVisitor::raw_run`), the record path went from 5,377 to 3,710 instructions per row
//! change (`make bench-instructions`; figures in `bench/README.md`).

use sluice_binlog::charset::{ascii_compatible, charset_of, Charset, BINARY_COLLATION};
use sluice_binlog::decimal::{binary_size, narrow_unscaled, narrow_unscaled_word};
use sluice_binlog::temporal::{Date, DateTime};
use sluice_binlog::{Column, ColumnType, TableMap};
use sluice_protocol::Reader;

use super::binary as w;
use super::field::{FieldPlan, Kind, NO_FIELD};

/// What a [`Fused`] column reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// TINYINT .. BIGINT of `width` bytes, little-endian, to `int` or `long`.
    Int { width: u8, signed: bool },
    /// FLOAT: its 4 bytes are Avro's `float` already.
    Float,
    /// DOUBLE: its 8 bytes are Avro's `double` already.
    Double,
    /// DECIMAL(precision, scale) of at most 18 digits, `size` bytes: `bytes` decimal.
    Decimal { precision: u8, scale: u8, size: u8 },
    /// DATE: `int` days (a zero date goes the long way).
    Date,
    /// DATETIME(fsp): `long` local micros.
    DateTime2,
    /// TIMESTAMP(fsp): `long` micros.
    Timestamp2,
    /// Text of an ASCII-compatible charset with a `prefix`-byte length: `string`; `utf8` when the
    /// charset is UTF-8 itself, so that any valid UTF-8 is taken as it is (else ASCII only).
    Text { prefix: u8, utf8: bool },
    /// A binary string with a `prefix`-byte length: `bytes`.
    Bytes { prefix: u8 },
    /// ENUM of `width` bytes, as an Avro enum of `members` symbols.
    Enum { width: u8, members: u16 },
    /// BIT(1), one byte: `boolean`.
    Bool,
}

/// One column's value from its bytes to its field's Avro (and its key field's, for a key
/// column) in one step. Made by [`plan`] for the column of a table map it describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fused {
    /// The column's shape it was made for ([`fits`]).
    ty: ColumnType,
    meta: u16,
    unsigned: bool,
    collation: Option<u16>,
    op: Op,
    /// The value field's union branch byte (its value's branch), None when the field is no union.
    row_head: Option<u8>,
    /// For a key column: its key field's union branch byte as `row_head`.
    key_head: Option<Option<u8>>,
    /// SQL NULL is the value field's (and key field's) null branch: no error to report.
    null: bool,
}

/// The branch byte a field's non-null values take (see `AvroEncoder::field_inline`'s `head`).
fn head(f: &FieldPlan) -> Option<u8> {
    f.is_union().then(|| 2 * u8::from(f.nullable))
}

/// For each column of `tm`, its [`Fused`] when its field takes the shortcut (`of` is the
/// schema's map of columns to their field and key field).
pub(crate) fn plan(tm: &TableMap, fields: &[FieldPlan], key: &[FieldPlan], of: &[[u32; 2]]) -> Vec<Option<Fused>> {
    tm.columns
        .iter()
        .zip(of)
        .map(|(col, &[field, key_field])| {
            let f = fields.get(field as usize)?;
            let key_head = match key.get(key_field as usize) {
                // a key field's value is the column's too: the same kind, written again
                Some(k) if k.kind == f.kind => Some(head(k)),
                Some(_) => return None,
                None if key_field == NO_FIELD => None,
                None => return None,
            };
            let null_ok = |f: &FieldPlan| f.sql_nullable && f.nullable;
            let null = null_ok(f) && key.get(key_field as usize).is_none_or(null_ok);
            let op = op_of(col, &f.kind)?;
            let (ty, meta, unsigned, collation) = (col.ty, col.meta, col.unsigned, col.collation);
            Some(Fused { ty, meta, unsigned, collation, op, row_head: head(f), key_head, null })
        })
        .collect()
}

/// True when `plan` was made for `columns` (a rows event's table map): each of its writers for a
/// column of the shape it was made for. Asked once per rows event, so that no value is asked.
pub(crate) fn fits(plan: &[Option<Fused>], columns: &[Column]) -> bool {
    plan.len() == columns.len()
        && plan.iter().zip(columns).all(|(f, c)| {
            f.as_ref()
                .is_none_or(|f| (f.ty, f.meta, f.unsigned, f.collation) == (c.ty, c.meta, c.unsigned, c.collation))
        })
}

/// The shortcut for a column of `col`'s shape encoded as `kind`, when there is one: the pairs
/// `kind_of` makes and the encoder writes from the value in its plain way.
fn op_of(col: &Column, kind: &Kind) -> Option<Op> {
    use ColumnType as T;
    let int = |width: u8| Some(Op::Int { width, signed: !col.unsigned });
    let text_collation = col.collation.filter(|&c| c != BINARY_COLLATION && ascii_compatible(Some(c)));
    // decode_text takes an unknown collation's text as UTF-8
    let utf8 = |c: u16| matches!(charset_of(c), None | Some(Charset::Utf8mb3 | Charset::Utf8mb4));
    let short_prefix = if col.meta < 256 { 1 } else { 2 };
    let blob_prefix = u8::try_from(col.meta).ok().filter(|p| (1..=4).contains(p));
    let binary = col.collation == Some(BINARY_COLLATION);
    match (col.ty, kind) {
        (T::Tiny, Kind::Int) => int(1),
        (T::Short, Kind::Int) => int(2),
        (T::Int24, Kind::Int) => int(3),
        (T::Long, Kind::Int) if !col.unsigned => int(4),
        (T::Long, Kind::Long) => int(4),
        (T::LongLong, Kind::Long) if !col.unsigned => int(8),
        (T::Float, Kind::Float) => Some(Op::Float),
        (T::Double, Kind::Double) => Some(Op::Double),
        (T::NewDecimal, Kind::Decimal { scale: field_scale }) => {
            let [precision, scale] = col.meta.to_be_bytes();
            let size = binary_size(precision, scale);
            ((1..=18).contains(&precision) && scale <= precision && scale == *field_scale && size <= 9)
                .then_some(Op::Decimal { precision, scale, size: size as u8 })
        }
        (T::Date | T::NewDate, Kind::Date) => Some(Op::Date),
        // (a fractional precision above 6 is an error the long way reports)
        (T::DateTime2, Kind::DateTime) if col.meta <= 6 => Some(Op::DateTime2),
        (T::Timestamp2, Kind::Timestamp) if col.meta <= 6 => Some(Op::Timestamp2),
        (T::VarChar | T::VarString | T::String, Kind::Text) => {
            text_collation.map(|c| Op::Text { prefix: short_prefix, utf8: utf8(c) })
        }
        (T::TinyBlob | T::Blob | T::MediumBlob | T::LongBlob, Kind::Text) => {
            Some(Op::Text { prefix: blob_prefix?, utf8: utf8(text_collation?) })
        }
        // (not CHAR/BINARY(n): its value is padded back to its length)
        (T::VarChar | T::VarString, Kind::Bytes) if binary => Some(Op::Bytes { prefix: short_prefix }),
        (T::TinyBlob | T::Blob | T::MediumBlob | T::LongBlob, Kind::Bytes) if binary => {
            Some(Op::Bytes { prefix: blob_prefix? })
        }
        (T::Enum, Kind::Enum { names }) if matches!(col.meta, 1 | 2) => {
            Some(Op::Enum { width: col.meta as u8, members: u16::try_from(names.len()).ok()? })
        }
        (T::Bit, Kind::Bool) => {
            // (`bytes` whole bytes and `bits` more: BIT(1) is 0 and 1, one byte)
            let [bytes, bits] = col.meta.to_be_bytes();
            let width = bytes + u8::from(bits > 0);
            (u16::from(bytes) * 8 + u16::from(bits) == 1 && width == 1).then_some(Op::Bool)
        }
        _ => None,
    }
}

/// Whether every byte is ASCII, a word (8 bytes) at a time with no loop for text up to 32
/// bytes (two or four words, overlapping where the length is not a multiple of 8), 32 bytes at a
/// time beyond. Most of a row's text is short (names, codes): `<[u8]>::is_ascii`, and a loop of
/// 32-byte blocks with it for the tail, took 4% of the record path's instructions (`make
/// bench-instructions`).
#[inline]
pub(super) fn all_ascii(bytes: &[u8]) -> bool {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // the word at `at` (a high bit, so "not ASCII", where there is none: never, by the lengths)
    let word = |b: &[u8], at: usize| b.get(at..at + 8).and_then(|w| w.try_into().ok()).map_or(HIGH, u64::from_ne_bytes);
    let n = bytes.len();
    match n {
        0..8 => bytes.iter().fold(0, |acc, &b| acc | b) < 0x80,
        8..=16 => (word(bytes, 0) | word(bytes, n - 8)) & HIGH == 0,
        17..=32 => (word(bytes, 0) | word(bytes, 8) | word(bytes, n - 16) | word(bytes, n - 8)) & HIGH == 0,
        _ => {
            let four = |b: &[u8], at: usize| word(b, at) | word(b, at + 8) | word(b, at + 16) | word(b, at + 24);
            let mut blocks = bytes.chunks_exact(32);
            // the last 32 bytes, overlapping the blocks before them
            blocks.all(|block| four(block, 0) & HIGH == 0) && four(bytes, n - 32) & HIGH == 0
        }
    }
}

/// An unsigned little-endian number of `width` bytes (1 to 4, or 8): one load of a fixed size
/// for each width (a width-long loop, or a copy of a variable length, cost 30-40 instructions a
/// value). None when truncated.
#[inline(always)]
fn le(c: &mut Reader<'_>, width: u8) -> Option<u64> {
    Some(match width {
        1 => u64::from(c.u8("").ok()?),
        2 => u64::from(c.u16("").ok()?),
        3 => {
            let [a, b, d] = c.array::<3>("").ok()?;
            u64::from(u32::from_le_bytes([a, b, d, 0]))
        }
        4 => u64::from(c.u32("").ok()?),
        8 => c.u64("").ok()?,
        _ => return None,
    })
}

impl Fused {
    /// Reads the non-NULL value of its column at `r` (of the shape [`fits`] checked) and appends
    /// its field's Avro to `row` (and its key field's to `key`, for a key column); true when it
    /// did, `r` then past the value. False when the value is not the plain case, with nothing
    /// read or written.
    #[inline(always)]
    pub(crate) fn write(&self, r: &mut Reader<'_>, row: &mut Vec<u8>, key: &mut Vec<u8>) -> bool {
        let at = *r;
        let done = self.read_write(r, row, key).is_some();
        if !done {
            *r = at;
        }
        done
    }

    /// [`Fused::write`]'s work: None, having written nothing, when the value is not the plain case.
    #[inline(always)]
    fn read_write(&self, c: &mut Reader<'_>, row: &mut Vec<u8>, key: &mut Vec<u8>) -> Option<()> {
        match self.op {
            Op::Int { width, signed } => {
                let u = le(c, width)?;
                let v = if signed {
                    // sign-extended from the value's top bit
                    let shift = 64 - 8 * u32::from(width);
                    ((u << shift) as i64) >> shift
                } else {
                    u as i64 // at most 32 bits: BIGINT UNSIGNED takes no shortcut
                };
                self.put(row, key, |out| w::long(v, out));
            }
            Op::Float => {
                let b = c.array::<4>("FLOAT").ok()?;
                self.put(row, key, |out| out.extend_from_slice(&b));
            }
            Op::Double => {
                let b = c.array::<8>("DOUBLE").ok()?;
                self.put(row, key, |out| out.extend_from_slice(&b));
            }
            Op::Decimal { precision, scale, size } => {
                let size = usize::from(size);
                // up to 8 bytes with 8 left (all but a row image's last values): one big-endian
                // load of 8, shifted down to the value's bytes, not a loop over them
                let v = match c.rest().first_chunk::<8>() {
                    Some(word) if size <= 8 => {
                        let word = u64::from_be_bytes(*word) >> (64 - 8 * size);
                        let v = narrow_unscaled_word(word, size, precision, scale).ok()?;
                        c.skip(size, "DECIMAL").ok()?;
                        v
                    }
                    _ => narrow_unscaled(c.take(size, "DECIMAL").ok()?, precision, scale).ok()?,
                };
                self.put(row, key, |out| w::decimal_i64(v, out));
            }
            Op::Date => {
                // Date::read's fields, from one load
                let v = le(c, 3)?;
                let date = Date { year: (v >> 9) as u16, month: (v >> 5 & 0xf) as u8, day: (v & 0x1f) as u8 };
                let days = date.days_since_epoch()?;
                self.put(row, key, |out| w::long(i64::from(days), out));
            }
            Op::DateTime2 => {
                // DateTime::read2's packed value, from loads of the widths the fsp gives (a
                // byte-by-byte read of each part cost half of a DATETIME's instructions)
                let [a, b, d, e, f] = c.array::<5>("DATETIME2").ok()?;
                let int = i64::from_be_bytes([0, 0, 0, a, b, d, e, f]) - 0x80_0000_0000;
                let frac = match self.meta {
                    0 => 0,
                    1 | 2 => i64::from(i8::from_be_bytes(c.array::<1>("fraction").ok()?)) * 10_000,
                    3 | 4 => i64::from(i16::from_be_bytes(c.array::<2>("fraction").ok()?)) * 100,
                    _ => {
                        // 24 bits, sign-extended
                        let [x, y, z] = c.array::<3>("fraction").ok()?;
                        i64::from(i32::from_be_bytes([x, y, z, 0]) >> 8)
                    }
                };
                let packed = (int << 24).checked_add(frac)?;
                let us = DateTime::from_packed(packed, self.meta as u8).micros_since_epoch_local()?;
                self.put(row, key, |out| w::long(us, out));
            }
            Op::Timestamp2 => {
                // Timestamp::read2's fields, from loads of the widths the fsp gives: calling it
                // (out of line, the fraction read byte by byte) cost about 100 instructions more a
                // TIMESTAMP, 2.4% of the record path (`make bench-instructions`, 2026-12-08)
                let seconds = u32::from_be_bytes(c.array::<4>("TIMESTAMP2").ok()?);
                let micros = match self.meta {
                    0 => 0,
                    1 | 2 => u32::from(c.u8("fraction").ok()?) * 10_000,
                    3 | 4 => u32::from(u16::from_be_bytes(c.array::<2>("fraction").ok()?)) * 100,
                    _ => {
                        let [x, y, z] = c.array::<3>("fraction").ok()?;
                        u32::from_be_bytes([0, x, y, z])
                    }
                };
                // (a fraction out of range is an error, the zero timestamp a setting's: the long way)
                if micros >= 1_000_000 || seconds == 0 && micros == 0 {
                    return None;
                }
                let us = i64::from(seconds) * 1_000_000 + i64::from(micros);
                self.put(row, key, |out| w::long(us, out));
            }
            Op::Text { prefix, utf8 } => {
                let n = le(c, prefix)?;
                let bytes = c.take_u64(n, "text").ok()?;
                // its own UTF-8 when ASCII (any ASCII-compatible charset), or valid UTF-8 of a
                // UTF-8 charset; any other text is decoded by its charset the long way
                if !(all_ascii(bytes) || utf8 && std::str::from_utf8(bytes).is_ok()) {
                    return None;
                }
                self.put(row, key, |out| w::bytes(bytes, out));
            }
            Op::Bytes { prefix } => {
                let n = le(c, prefix)?;
                let bytes = c.take_u64(n, "binary").ok()?;
                self.put(row, key, |out| w::bytes(bytes, out));
            }
            Op::Enum { width, members } => {
                let index = le(c, width)?;
                let p = index.checked_sub(1).filter(|&p| p < u64::from(members))?;
                self.put(row, key, |out| w::long(p as i64, out));
            }
            Op::Bool => {
                let bit = c.u8("BIT").ok()?;
                self.put(row, key, |out| w::boolean(bit != 0, out));
            }
        }
        Some(())
    }

    /// Appends SQL NULL as the field's null (and the key field's, for a key column); false when
    /// NULL is no value of the field (an error the long way reports).
    #[inline(always)]
    pub(crate) fn write_null(&self, row: &mut Vec<u8>, key: &mut Vec<u8>) -> bool {
        if self.null {
            // branch 0 of a nullable field's union
            row.push(0);
            if self.key_head.is_some() {
                key.push(0);
            }
        }
        self.null
    }

    /// Appends the value's encoding `enc` after the field's branch byte, to `row` and, for a
    /// key column, to `key`.
    #[inline(always)]
    fn put(&self, row: &mut Vec<u8>, key: &mut Vec<u8>, enc: impl Fn(&mut Vec<u8>)) {
        if let Some(h) = self.row_head {
            row.push(h);
        }
        enc(row);
        if let Some(key_head) = self.key_head {
            if let Some(h) = key_head {
                key.push(h);
            }
            enc(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sluice_binlog::value::decode_value_with;
    use sluice_binlog::{Column, ColumnType, TableMap};
    use sluice_protocol::Reader;

    use super::super::schema::ZeroDates;
    use super::super::{AvroEncoder, SchemaOptions, TableSchema};
    use super::fits;

    /// `db.t` of the one column `c`.
    fn table(col: &Column) -> TableMap {
        let mut c = col.clone();
        c.name = Some(Arc::from("c"));
        TableMap {
            table_id: 1,
            flags: 0,
            database: Arc::from("db"),
            table: Arc::from("t"),
            columns: vec![c],
            has_column_names: true,
            primary_key: None,
        }
    }

    /// A few bytes from a seed (xorshift), for values of every bit pattern.
    fn noise(seed: &mut u64, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                *seed as u8
            })
            .collect()
    }

    /// A binary DECIMAL(precision, scale) of the digits `noise` gives (its first byte the sign).
    fn decimal(precision: u8, scale: u8, noise: &[u8]) -> Vec<u8> {
        let digits: String = noise.iter().skip(1).map(|b| char::from(b'0' + b % 10)).collect();
        let (int, frac) = digits.split_at(usize::from(precision - scale));
        let mut out = Vec::new();
        let mut put = |group: &str| {
            if !group.is_empty() {
                let v: u32 = group.parse().unwrap();
                let n = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4][group.len()];
                out.extend_from_slice(&v.to_be_bytes()[4 - n..]);
            }
        };
        let lead = int.len() % 9;
        put(&int[..lead]);
        for group in int.as_bytes()[lead..].chunks(9).chain(frac.as_bytes().chunks(9)) {
            put(std::str::from_utf8(group).unwrap());
        }
        out[0] ^= 0x80;
        if noise[0] % 2 == 1 {
            out.iter_mut().for_each(|b| *b = !*b);
        }
        out
    }

    /// Every shortcut against the two steps (decode, then the encoder's `field`) on the same
    /// bytes, as a value field and as a key field, nullable or not, under the schema settings
    /// that change a field's union: where it writes, it writes their bytes and reads as far;
    /// where it does not (a zero date, text its charset must decode, an ENUM index out of
    /// range, a truncated image, NULL in a NOT NULL column), it reads and writes nothing, and
    /// the two steps give the value or error they always gave. Each shortcut must write most
    /// of its plain values, so the test cannot pass by refusing everything.
    #[test]
    fn each_shortcut_writes_what_the_two_steps_write() {
        use ColumnType as T;
        let col = |ty: T, meta: u16, unsigned: bool, collation: Option<u16>| {
            let mut c = Column::new(0, ty, meta, true);
            c.unsigned = unsigned;
            c.collation = collation;
            if ty == T::Enum {
                c.enum_values = Some(["a", "b", "c"].iter().map(|&n| Arc::from(n)).collect());
            }
            c
        };
        let text = |len: &[u8], s: &[u8]| [len, s].concat();
        let texts = |prefix: usize| -> Vec<Vec<u8>> {
            let p = |n: usize| n.to_le_bytes().get(..prefix).unwrap().to_vec();
            vec![
                text(&p(3), b"abc"),
                text(&p(0), b""),
                text(&p(7), "Zürich".as_bytes()),
                text(&p(6), b"Z\xfcrich"),
                text(&p(2), b"\xff\xfe"),
                text(&p(40), b"an ASCII text of forty bytes, exactly!!!"),
                text(&p(9), b"short"), // truncated
            ]
        };
        // (column, its values' bytes; the random ones added below)
        let mut cases: Vec<(Column, Vec<Vec<u8>>, usize)> = vec![
            (col(T::Tiny, 0, false, None), vec![vec![0], vec![0x7f], vec![0x80], vec![0xff]], 1),
            (col(T::Tiny, 0, true, None), vec![vec![0], vec![0x80], vec![0xff]], 1),
            (col(T::Short, 0, false, None), vec![vec![0, 0x80], vec![0xff, 0x7f], vec![1]], 2),
            (col(T::Int24, 0, false, None), vec![vec![0, 0, 0x80], vec![0xff, 0xff, 0xff], vec![1, 2, 3]], 3),
            (col(T::Int24, 0, true, None), vec![vec![0xff, 0xff, 0xff]], 3),
            (col(T::Long, 0, false, None), vec![vec![0, 0, 0, 0x80], vec![0xff, 0xff, 0xff, 0x7f]], 4),
            (col(T::Long, 0, true, None), vec![vec![0xff, 0xff, 0xff, 0xff], vec![0, 0, 0, 0x80]], 4),
            (col(T::LongLong, 0, false, None), vec![vec![0; 8], [vec![0xff; 7], vec![0x7f]].concat()], 8),
            (col(T::LongLong, 0, true, None), vec![vec![0xff; 8]], 8),
            (col(T::Float, 4, false, None), vec![1.5f32.to_le_bytes().to_vec(), vec![0xff; 4]], 4),
            (col(T::Double, 8, false, None), vec![(-0.0f64).to_le_bytes().to_vec(), vec![0x7f; 8]], 8),
            (col(T::NewDecimal, 12 << 8 | 2, false, None), vec![vec![0x80, 0, 0, 0, 0, 0]], 6),
            (col(T::NewDecimal, 18 << 8 | 1, false, None), vec![], 9),
            (col(T::NewDecimal, 18 << 8 | 9, false, None), vec![], 8),
            (col(T::NewDecimal, 1 << 8, false, None), vec![vec![0x80], vec![0x7f]], 1),
            (col(T::NewDecimal, 30 << 8 | 4, false, None), vec![], 14),
            (col(T::Date, 0, false, None), vec![vec![0, 0, 0], vec![0x21, 0x30, 0x0f]], 3),
            (col(T::DateTime2, 0, false, None), vec![vec![0x80, 0, 0, 0, 0]], 5),
            (col(T::DateTime2, 6, false, None), vec![vec![0x80, 0, 0, 0, 0, 0, 0, 0]], 8),
            (col(T::Timestamp2, 3, false, None), vec![vec![0; 6]], 6),
            (col(T::Timestamp2, 0, false, None), vec![vec![0x65, 0x53, 0xf1, 0x00]], 4),
            (col(T::Timestamp2, 1, false, None), vec![vec![0x65, 0x53, 0xf1, 0, 99], vec![0, 0, 0, 0, 100]], 5),
            // (999,999 and 1,000,000 microseconds)
            (
                col(T::Timestamp2, 6, false, None),
                vec![vec![0, 0, 0, 1, 0x0f, 0x42, 0x3f], vec![0, 0, 0, 1, 0x0f, 0x42, 0x40]],
                7,
            ),
            (col(T::Timestamp2, 4, false, None), vec![vec![0, 0, 0, 0, 0x27, 0x0f]], 6),
            (col(T::VarChar, 255, false, Some(8)), texts(1), 0),
            (col(T::VarChar, 300, false, Some(45)), texts(2), 0),
            (col(T::String, 40, false, Some(33)), texts(1), 0),
            (col(T::VarChar, 255, false, Some(11)), texts(1), 0),
            (col(T::VarChar, 255, false, Some(2047)), texts(1), 0),
            (col(T::VarChar, 255, false, Some(35)), texts(1), 0),
            (col(T::Blob, 2, false, Some(46)), texts(2), 0),
            (col(T::Blob, 4, false, Some(8)), texts(4), 0),
            (col(T::VarChar, 16, false, Some(63)), texts(1), 0),
            (col(T::LongBlob, 4, false, Some(63)), texts(4), 0),
            (col(T::String, 16, false, Some(63)), texts(1), 0),
            (col(T::Enum, 1, false, Some(8)), vec![vec![0], vec![1], vec![3], vec![4]], 1),
            (col(T::Enum, 2, false, Some(8)), vec![vec![2, 0], vec![0, 1]], 2),
            (col(T::Bit, 1, false, None), vec![vec![0], vec![1]], 1),
            (col(T::Bit, 2 << 8, false, None), vec![vec![0, 1]], 2),
        ];
        let mut seed = 0x2545_f491_4f6c_dd1d;
        for (column, values, width) in &mut cases {
            for _ in 0..200 {
                if column.ty == T::NewDecimal {
                    // valid digit groups (of noise, a group is mostly out of range), both signs
                    let [precision, scale] = column.meta.to_be_bytes();
                    values.push(decimal(precision, scale, &noise(&mut seed, usize::from(precision) + 1)));
                }
                if column.ty == T::Enum {
                    // indexes 0 to 4 of three members (noise is mostly beyond them)
                    let mut index = vec![0; *width];
                    index[0] = noise(&mut seed, 1)[0] % 5;
                    values.push(index);
                } else if *width > 0 {
                    values.push(noise(&mut seed, *width));
                }
            }
            if *width > 1 {
                values.push(vec![0; *width - 1]); // truncated
            }
        }
        let settings = [
            SchemaOptions::default(),
            SchemaOptions { partial_images: true, ..SchemaOptions::default() },
            SchemaOptions { zero_dates: ZeroDates::AsString, ..SchemaOptions::default() },
            SchemaOptions { zero_dates: ZeroDates::AsNull, ..SchemaOptions::default() },
            SchemaOptions { enums_as_strings: true, ..SchemaOptions::default() },
        ];
        let encoder = AvroEncoder::new();
        let mut shortcuts = 0;
        for (column, values, _) in &cases {
            for nullable in [true, false] {
                for key in [false, true] {
                    for opts in &settings {
                        let mut column = column.clone();
                        column.nullable = nullable;
                        let tm = table(&column);
                        let key_columns = key.then(|| vec!["c".to_string()]);
                        let opts = SchemaOptions { key_columns, ..opts.clone() };
                        let schema = TableSchema::new(&tm, &opts).unwrap();
                        let Some(Some(fused)) = schema.fused.first() else { continue };
                        assert!(fits(&schema.fused, &tm.columns));
                        let mut other = column.clone();
                        other.unsigned = !other.unsigned;
                        assert!(!fits(&schema.fused, &[other]) && !fits(&schema.fused, &[]));
                        shortcuts += 1;
                        let (field, key_field) = (&schema.fields[0], schema.key.as_ref().map(|k| &k[0]));
                        let (mut written, mut fallbacks) = (0, 0);
                        // each value alone, and with the next values' bytes after it (loads wider
                        // than the value are taken where there is room: the image's other columns)
                        let padded: Vec<Vec<u8>> = values.iter().map(|v| [&v[..], &[0xa5; 8]].concat()).collect();
                        for bytes in values.iter().chain(&padded).map(Some).chain([None]) {
                            let (mut row, mut key) = (Vec::new(), Vec::new());
                            let mut r = Reader::new(bytes.map_or(&[][..], |b| b));
                            let done = match bytes {
                                Some(_) => fused.write(&mut r, &mut row, &mut key),
                                None => fused.write_null(&mut row, &mut key),
                            };
                            // the two steps, from the same bytes
                            let mut r2 = Reader::new(bytes.map_or(&[][..], |b| b));
                            let (mut row2, mut key2) = (Vec::new(), Vec::new());
                            let two = |v: &sluice_binlog::Value<'_>, row2: &mut Vec<u8>, key2: &mut Vec<u8>| {
                                encoder.field(&schema, field, v, row2).map_err(|e| e.to_string())?;
                                match key_field {
                                    Some(k) => encoder.field(&schema, k, v, key2).map_err(|e| e.to_string()),
                                    None => Ok(()),
                                }
                            };
                            let steps = match bytes {
                                Some(_) => decode_value_with(&mut r2, &column, |v| two(&v, &mut row2, &mut key2))
                                    .map_err(|e| e.to_string())
                                    .and_then(|res| res),
                                None => two(&sluice_binlog::Value::Null, &mut row2, &mut key2),
                            };
                            let what = format!("{column:?} {opts:?} {bytes:?}");
                            if done {
                                written += 1;
                                assert_eq!(steps, Ok(()), "{what}");
                                assert_eq!((row, key), (row2, key2), "{what}");
                                assert_eq!(r.position(), r2.position(), "{what}");
                            } else {
                                fallbacks += 1;
                                assert!(row.is_empty() && key.is_empty() && r.position() == 0, "{what}");
                            }
                        }
                        // most plain values take the shortcut (a third of the texts need decoding;
                        // noise is mostly no date)
                        let temporal = matches!(column.ty, T::Date | T::DateTime2 | T::Timestamp2);
                        assert!(
                            written > 0 && (temporal || written >= fallbacks / 2),
                            "{column:?} {opts:?}: {written} of {}",
                            written + fallbacks
                        );
                    }
                }
            }
        }
        assert!(shortcuts > 150, "{shortcuts} columns took the shortcut");
    }
}
