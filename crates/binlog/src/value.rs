//! Column values: **where a byte becomes a value**.
//!
//! [`decode_value`] reads one non-NULL column value from a row image, given the column's
//! description from its TABLE_MAP. Values borrow from the event where they can (strings,
//! blobs, geometry) and own only what must be computed (decimals, JSON text, padded BINARY).
//!
//! References: MySQL `log_event.cc` (`log_event_print_value`), MariaDB `log_event_client.cc`,
//! <https://dev.mysql.com/doc/dev/mysql-server/latest/classbinary__log_1_1Rows__event.html>.

use std::borrow::Cow;

use sluice_protocol::reader::Reader;

use crate::charset::BINARY_COLLATION;
use crate::column::{Column, ColumnType};
use crate::decimal::Decimal;
use crate::error::{Error, Result};
use crate::jsonb::{self, JsonDiff, JsonValue};
use crate::temporal::{Date, DateTime, Time, Timestamp};

/// One column value from a row image.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// SQL NULL.
    Null,
    /// A signed integer (TINYINT .. BIGINT).
    Int(i64),
    /// An unsigned integer (TINYINT .. BIGINT UNSIGNED; BIGINT UNSIGNED max intact).
    UInt(u64),
    /// FLOAT.
    Float(f32),
    /// DOUBLE.
    Double(f64),
    /// DECIMAL / NUMERIC, exact.
    Decimal(Decimal),
    /// YEAR (0 is the zero year `0000`).
    Year(u16),
    /// DATE (may be a zero or partial-zero date such as `0000-00-00` or `2024-00-00`).
    Date(Date),
    /// TIME: a signed duration with microseconds.
    Time(Time),
    /// DATETIME: a local date-time (may be zero).
    DateTime(DateTime),
    /// TIMESTAMP: a UTC instant (seconds since the epoch; 0 with 0 micros is the zero timestamp).
    Timestamp(Timestamp),
    /// A text value (CHAR, VARCHAR, TEXT) in its column's character set; decode with
    /// [`crate::charset::decode_text`].
    Text {
        /// The bytes as logged.
        bytes: &'a [u8],
        /// The column's collation id, when the TABLE_MAP says.
        collation: Option<u16>,
    },
    /// A binary value (BINARY padded back to its declared length, VARBINARY, BLOB).
    Bytes(Cow<'a, [u8]>),
    /// ENUM by 1-based index (0 is the empty error value).
    Enum(u16),
    /// SET as a bit mask (bit 0 = first member).
    Set(u64),
    /// BIT(n): the bits in the low `bits` bits of the number.
    Bit {
        /// The value.
        value: u64,
        /// Declared width (1-64).
        bits: u16,
    },
    /// MySQL binary JSON, decoded.
    Json(Box<JsonValue>),
    /// A partial JSON update (PARTIAL_UPDATE_ROWS) that could not be applied because the
    /// before-image lacks the column: the diffs, in order.
    JsonDiff(Vec<JsonDiff>),
    /// GEOMETRY: SRID and the WKB bytes.
    Geometry {
        /// Spatial reference id.
        srid: u32,
        /// Well-known binary.
        wkb: &'a [u8],
    },
    /// VECTOR: little-endian IEEE-754 floats.
    Vector(&'a [u8]),
}

impl Value<'_> {
    /// True for [`Value::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

/// Reads a length prefix of `width` (1..=4) little-endian bytes, as BLOB, TEXT, JSON,
/// GEOMETRY and VECTOR values have, and returns the bytes it announces.
fn prefixed<'a>(r: &mut Reader<'a>, width: u16, what: &'static str) -> Result<&'a [u8]> {
    if !(1..=4).contains(&width) {
        return Err(Error::invalid(what, format!("length-prefix width {width} is not 1..=4")));
    }
    let n = r.uint_le(usize::from(width), what)?;
    Ok(r.take_u64(n, what)?)
}

/// Reads a string with a 1-byte length prefix when `max_len` < 256, else 2 bytes.
fn short_string<'a>(r: &mut Reader<'a>, max_len: u16, what: &'static str) -> Result<&'a [u8]> {
    let n = if max_len < 256 { u64::from(r.u8(what)?) } else { u64::from(r.u16(what)?) };
    Ok(r.take_u64(n, what)?)
}

/// Text or binary by collation: `binary` (63) gives bytes; any other collation, or none
/// known, gives text with that collation (the output layer decides what an unknown charset
/// means: usually UTF-8, else base64).
fn text_or_bytes(bytes: &[u8], collation: Option<u16>) -> Value<'_> {
    if collation == Some(BINARY_COLLATION) {
        Value::Bytes(Cow::Borrowed(bytes))
    } else {
        Value::Text { bytes, collation }
    }
}

/// Reads one non-NULL column value of `col` from a row image (the caller handles the NULL
/// bitmap). `col` must have been through [`Column::resolve_string_type`] so ENUM and SET
/// columns carry their real types.
///
/// | type                         | bytes                                                    |
/// |------------------------------|----------------------------------------------------------|
/// | TINY/SHORT/INT24/LONG/LONGLONG | 1/2/3/4/8 LE (signed unless `col.unsigned`)            |
/// | FLOAT / DOUBLE               | 4 / 8 LE IEEE-754                                        |
/// | NEWDECIMAL                   | binary decimal (see [`crate::decimal`])                  |
/// | YEAR                         | 1: 0 is year 0, else 1900 + v                            |
/// | DATE, TIME, DATETIME, TIMESTAMP and the `*2` forms | see [`crate::temporal`]             |
/// | VARCHAR / VAR_STRING         | 1-byte length if meta < 256, else 2; the bytes           |
/// | STRING (CHAR/BINARY)         | 1-byte length if max length < 256, else 2; the bytes     |
/// | ENUM / SET                   | meta bytes LE (1-2 / 1-8)                                |
/// | BIT                          | `bytes + (bits > 0)` bytes, big-endian                   |
/// | BLOB, TEXT, JSON, GEOMETRY, VECTOR | meta-byte LE length, then the bytes             |
///
/// Choices: BINARY(n) values are padded back with 0x00 to n bytes (servers strip trailing
/// zeros when logging them); strings and blobs without a known collation are
/// [`Value::Text`] with `collation: None`; the pre-5.0 DECIMAL (type 0) has no length in its
/// metadata and is refused, as are BOOL, TYPED_ARRAY and unknown codes.
///
/// # Errors
/// [`Error::Wire`] when the row image is truncated; [`Error::Invalid`] for malformed values
/// or metadata; [`Error::UnsupportedColumnType`] for types that cannot be decoded.
// Inlined into the row loop: returned out of line, each value came back through memory and
// was reloaded wider than it was stored (a store-forwarding stall, a fifth of a dump's decode).
#[inline(always)]
pub fn decode_value<'a>(r: &mut Reader<'a>, col: &Column) -> Result<Value<'a>> {
    decode_value_with(r, col, |v| v)
}

/// [`decode_value`], handing the value to `emit` in the arm that decodes it. A caller that
/// stores the value (a row's slot) then stores each type's fields as they are: returned from
/// one `match`, every value was first assembled on the stack from the union of all types'
/// fields in narrow stores and then copied with wide loads, a store-forwarding stall on every
/// value (a fifth of the row loop's time in `sluice run`).
///
/// # Errors
/// As [`decode_value`]; `emit` is not called then.
#[inline(always)]
pub fn decode_value_with<'a, T>(r: &mut Reader<'a>, col: &Column, emit: impl FnOnce(Value<'a>) -> T) -> Result<T> {
    use ColumnType as T;
    let meta = col.meta;
    let int = |v: i64, u: u64| if col.unsigned { Value::UInt(u) } else { Value::Int(v) };
    Ok(match col.ty {
        T::Tiny => {
            let b = r.u8("TINYINT")?;
            emit(int(i64::from(i8::from_le_bytes([b])), u64::from(b)))
        }
        T::Short => {
            let b = r.array::<2>("SMALLINT")?;
            emit(int(i64::from(i16::from_le_bytes(b)), u64::from(u16::from_le_bytes(b))))
        }
        T::Int24 => {
            let u = r.uint_le(3, "MEDIUMINT")?;
            let s = i64::try_from(u).unwrap_or(0);
            emit(int(if s & 0x80_0000 != 0 { s - 0x100_0000 } else { s }, u))
        }
        T::Long => {
            let b = r.array::<4>("INT")?;
            emit(int(i64::from(i32::from_le_bytes(b)), u64::from(u32::from_le_bytes(b))))
        }
        T::LongLong => {
            let b = r.array::<8>("BIGINT")?;
            emit(int(i64::from_le_bytes(b), u64::from_le_bytes(b)))
        }
        T::Float => emit(Value::Float(r.f32("FLOAT")?)),
        T::Double => emit(Value::Double(r.f64("DOUBLE")?)),
        T::NewDecimal => {
            let [precision, scale] = meta.to_be_bytes();
            emit(Value::Decimal(Decimal::read(r, precision, scale)?))
        }
        T::Year => {
            let y = r.u8("YEAR")?;
            emit(Value::Year(if y == 0 { 0 } else { 1900 + u16::from(y) }))
        }
        T::Date | T::NewDate => emit(Value::Date(crate::temporal::Date::read(r)?)),
        T::Time => emit(Value::Time(Time::read_old(r)?)),
        T::Time2 => emit(Value::Time(Time::read2(r, meta)?)),
        T::DateTime => emit(Value::DateTime(DateTime::read_old(r)?)),
        T::DateTime2 => emit(Value::DateTime(DateTime::read2(r, meta)?)),
        T::Timestamp => emit(Value::Timestamp(Timestamp::read_old(r)?)),
        T::Timestamp2 => emit(Value::Timestamp(Timestamp::read2(r, meta)?)),
        T::VarChar | T::VarString => emit(text_or_bytes(short_string(r, meta, "VARCHAR")?, col.collation)),
        T::String => {
            let bytes = short_string(r, meta, "CHAR")?;
            if col.collation == Some(BINARY_COLLATION) && bytes.len() < usize::from(meta) {
                let mut padded = bytes.to_vec();
                padded.resize(usize::from(meta), 0);
                emit(Value::Bytes(Cow::Owned(padded)))
            } else {
                emit(text_or_bytes(bytes, col.collation))
            }
        }
        T::Enum => match meta {
            1 => emit(Value::Enum(u16::from(r.u8("ENUM")?))),
            2 => emit(Value::Enum(r.u16("ENUM")?)),
            n => return Err(Error::invalid("ENUM", format!("pack length {n} is not 1 or 2"))),
        },
        T::Set => match usize::from(meta) {
            n @ 1..=8 => emit(Value::Set(r.uint_le(n, "SET")?)),
            n => return Err(Error::invalid("SET", format!("pack length {n} is not 1..=8"))),
        },
        T::Bit => {
            let [bytes, bits] = meta.to_be_bytes();
            let total = u16::from(bytes) * 8 + u16::from(bits);
            let n = usize::from(bytes) + usize::from(bits > 0);
            if !(1..=64).contains(&total) || n > 8 {
                return Err(Error::invalid("BIT", format!("width {total} bits ({bytes} bytes + {bits} bits)")));
            }
            emit(Value::Bit { value: r.uint_be(n, "BIT")?, bits: total })
        }
        T::TinyBlob | T::Blob | T::MediumBlob | T::LongBlob => {
            emit(text_or_bytes(prefixed(r, meta, "BLOB")?, col.collation))
        }
        T::Json => emit(Value::Json(Box::new(jsonb::parse(prefixed(r, meta, "JSON")?)?))),
        T::Geometry => {
            let mut g = Reader::new(prefixed(r, meta, "GEOMETRY")?);
            let srid = g.u32("GEOMETRY SRID")?;
            emit(Value::Geometry { srid, wkb: g.take_rest() })
        }
        T::Vector => {
            let v = prefixed(r, meta, "VECTOR")?;
            if v.len() % 4 != 0 {
                return Err(Error::invalid("VECTOR", format!("{} bytes is not a whole number of floats", v.len())));
            }
            emit(Value::Vector(v))
        }
        T::Null => emit(Value::Null),
        ty @ (T::Decimal | T::TypedArray | T::Invalid | T::Bool | T::Unknown(_)) => {
            return Err(Error::UnsupportedColumnType { code: ty.code(), name: ty.name() })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(ty: ColumnType, meta: u16) -> Column {
        Column::new(0, ty, meta, true)
    }

    fn one<'a>(bytes: &'a [u8], c: &Column) -> Value<'a> {
        let mut r = Reader::new(bytes);
        let v = decode_value(&mut r, c).unwrap();
        assert!(r.is_empty(), "value must consume exactly its bytes");
        v
    }

    #[test]
    fn integers() {
        let mut c = col(ColumnType::Tiny, 0);
        assert_eq!(one(&[0xff], &c), Value::Int(-1));
        c.unsigned = true;
        assert_eq!(one(&[0xff], &c), Value::UInt(255));
        let mut c = col(ColumnType::Int24, 0);
        assert_eq!(one(&[0xfe, 0xff, 0xff], &c), Value::Int(-2));
        c.unsigned = true;
        assert_eq!(one(&[0xfe, 0xff, 0xff], &c), Value::UInt(0xff_fffe));
        let mut c = col(ColumnType::LongLong, 0);
        c.unsigned = true;
        assert_eq!(one(&[0xff; 8], &c), Value::UInt(u64::MAX));
        // INT UNSIGNED 3230202323 (the minimal_row_metadata fixture's value)
        let mut c = col(ColumnType::Long, 0);
        c.unsigned = true;
        assert_eq!(one(&3230202323u32.to_le_bytes(), &c), Value::UInt(3230202323));
        assert_eq!(one(&1.5f64.to_le_bytes(), &col(ColumnType::Double, 8)), Value::Double(1.5));
        assert_eq!(one(&[0], &col(ColumnType::Year, 0)), Value::Year(0));
        assert_eq!(one(&[124], &col(ColumnType::Year, 0)), Value::Year(2024));
    }

    #[test]
    fn decimal_and_temporal() {
        let b = crate::decimal::tests::encode(true, "0", "5", 10, 2);
        let v = one(&b, &col(ColumnType::NewDecimal, 0x0a02));
        assert!(matches!(&v, Value::Decimal(d) if d.to_string() == "-0.50"));
        let dt = crate::temporal::DateTime {
            year: 2024,
            month: 1,
            day: 31,
            hour: 12,
            minute: 0,
            second: 0,
            micros: 123_456,
            fsp: 6,
        };
        let b = crate::temporal::tests::encode_datetime2(&dt, 6);
        assert_eq!(one(&b, &col(ColumnType::DateTime2, 6)), Value::DateTime(dt));
        let mut ts = 1706702400u32.to_be_bytes().to_vec();
        ts.push(12);
        assert!(
            matches!(one(&ts, &col(ColumnType::Timestamp2, 2)), Value::Timestamp(t) if t.to_string() == "2024-01-31 12:00:00.12")
        );
        assert!(decode_value(&mut Reader::new(&[0; 8]), &col(ColumnType::Time2, 9)).is_err());
    }

    #[test]
    fn strings() {
        let mut c = col(ColumnType::VarChar, 300);
        c.collation = Some(255);
        assert_eq!(one(&[2, 0, b'h', b'i'], &c), Value::Text { bytes: b"hi", collation: Some(255) });
        let c = col(ColumnType::VarChar, 20);
        assert_eq!(one(&[2, b'h', b'i'], &c), Value::Text { bytes: b"hi", collation: None });
        // BINARY(4) logged as "a" comes back padded
        let mut c = col(ColumnType::String, 0xfe04);
        c.resolve_string_type();
        c.collation = Some(63);
        assert_eq!(one(&[1, b'a'], &c), Value::Bytes(Cow::Owned(vec![b'a', 0, 0, 0])));
        // CHAR(100) utf8mb4: 2-byte length prefix
        let mut c = col(ColumnType::String, 0xee90);
        c.resolve_string_type();
        c.collation = Some(45);
        assert_eq!(one(&[1, 0, b'x'], &c), Value::Text { bytes: b"x", collation: Some(45) });
        let mut c = col(ColumnType::String, 0xf702);
        c.resolve_string_type();
        assert_eq!(one(&[2, 1], &c), Value::Enum(258));
        let mut c = col(ColumnType::String, 0xf803);
        c.resolve_string_type();
        assert_eq!(one(&[0b101, 0, 1], &c), Value::Set(0x1_0005));
        let mut c = col(ColumnType::Blob, 2);
        c.collation = Some(63);
        assert_eq!(one(&[3, 0, 1, 2, 3], &c), Value::Bytes(Cow::Borrowed(&[1, 2, 3])));
        assert!(decode_value(&mut Reader::new(&[9, 0, 1]), &c).is_err());
        assert!(decode_value(&mut Reader::new(&[1, 1]), &col(ColumnType::Blob, 5)).is_err());
    }

    #[test]
    fn bits_json_geometry_vector() {
        // BIT(3) = 0b100 (the mysql_type_bit fixture's first value)
        assert_eq!(one(&[0b100], &col(ColumnType::Bit, 0x0003)), Value::Bit { value: 4, bits: 3 });
        // BIT(10): 1 byte + 2 bits -> 2 bytes big-endian
        assert_eq!(one(&[0x02, 0x01], &col(ColumnType::Bit, 0x0102)), Value::Bit { value: 0x201, bits: 10 });
        assert!(decode_value(&mut Reader::new(&[0; 9]), &col(ColumnType::Bit, 0x0900)).is_err());
        let v = one(&[2, 0, 0, 0, 0x04, 0x01], &col(ColumnType::Json, 4));
        assert_eq!(v, Value::Json(Box::new(JsonValue::Bool(true))));
        let v = one(&[5, 0, 0, 0, 0xe6, 0x10, 0, 0, 1], &col(ColumnType::Geometry, 4));
        assert_eq!(v, Value::Geometry { srid: 4326, wkb: &[1] });
        let v = one(&[4, 0, 0, 0, 0, 0, 0x80, 0x3f], &col(ColumnType::Vector, 4));
        assert_eq!(v, Value::Vector(&[0, 0, 0x80, 0x3f]));
        assert!(decode_value(&mut Reader::new(&[3, 0, 0, 0, 1, 2, 3]), &col(ColumnType::Vector, 4)).is_err());
        let e = decode_value(&mut Reader::new(&[0]), &col(ColumnType::Unknown(100), 0)).unwrap_err();
        assert!(matches!(e, Error::UnsupportedColumnType { code: 100, .. }));
    }

    #[test]
    fn never_panics_on_any_type() {
        let mut seed: u32 = 12345;
        for code in 0..=255u8 {
            for meta in [0u16, 1, 2, 3, 4, 6, 8, 0x0a02, 0x0102, 0xf701, 0xfe0a, 0xffff, 300] {
                for len in 0..12 {
                    let bytes: Vec<u8> = (0..len)
                        .map(|_| {
                            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                            (seed >> 16) as u8
                        })
                        .collect();
                    let mut c = col(ColumnType::from_u8(code), meta);
                    c.resolve_string_type();
                    let _ = decode_value(&mut Reader::new(&bytes), &c);
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 4000, ..Default::default() })]

        /// Any type, metadata, signedness and collation over any bytes: an error or a value
        /// that consumed at most the input (and renders without panicking).
        #[test]
        fn arbitrary_columns_never_panic(
            code in proptest::prelude::any::<u8>(),
            meta in proptest::prelude::any::<u16>(),
            unsigned in proptest::prelude::any::<bool>(),
            collation in proptest::option::of(proptest::prop_oneof![proptest::strategy::Just(63u16), 0u16..400]),
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80),
        ) {
            let mut c = col(ColumnType::from_u8(code), meta);
            c.unsigned = unsigned;
            c.collation = collation;
            c.resolve_string_type();
            let mut r = Reader::new(&bytes);
            if let Ok(v) = decode_value(&mut r, &c) {
                proptest::prop_assert!(r.position() <= bytes.len());
                proptest::prop_assert_eq!(r.position() + r.remaining(), bytes.len());
                let _ = match &v {
                    Value::Decimal(d) => d.to_string(),
                    Value::Json(j) => j.to_string(),
                    Value::Date(d) => d.to_string(),
                    Value::Time(t) => t.to_string(),
                    Value::DateTime(t) => t.to_iso8601(),
                    Value::Timestamp(t) => t.to_utc().to_string(),
                    Value::Text { bytes, collation } => {
                        let _ = crate::charset::decode_text(bytes, *collation);
                        String::new()
                    }
                    other => format!("{other:?}"),
                };
            }
        }

        /// Column metadata readers over any bytes, for every type code.
        #[test]
        fn column_meta_never_panics(code in proptest::prelude::any::<u8>(), bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4)) {
            let mut r = Reader::new(&bytes);
            let _ = crate::column::read_column_meta(ColumnType::from_u8(code), &mut r);
        }
    }
}
