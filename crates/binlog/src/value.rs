//! Column values: **where a byte becomes a value**.
//!
//! [`decode_value`] reads one non-NULL column value from a row image, given the column's
//! description from its TABLE_MAP. Values borrow from the event where they can (strings,
//! blobs, geometry) and own only what must be computed (decimals, JSON text, padded BINARY).
//!
//! References: MySQL `log_event.cc` (`log_event_print_value`), MariaDB `log_event_client.cc`,
//! <https://dev.mysql.com/doc/dev/mysql-server/latest/classbinary__log_1_1Rows__event.html>.

use std::borrow::Cow;

use crate::decimal::Decimal;
use crate::jsonb::{JsonDiff, JsonValue};
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

// TEMPORARY until the value layer lands: refuses every column.
/// Decodes one value.
///
/// # Errors
/// Always, for now.
pub fn decode_value<'a>(_r: &mut sluice_protocol::Reader<'a>, col: &crate::column::Column) -> crate::Result<Value<'a>> {
    Err(crate::Error::UnsupportedColumnType { code: col.ty.code(), name: col.ty.name() })
}
