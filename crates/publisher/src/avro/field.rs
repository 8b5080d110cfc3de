//! A table's fields as the encoder follows them: each column's [`FieldPlan`] (where its value is,
//! how it is encoded: its [`Kind`], its union), made by [`super::schema`] with the schemas and
//! read by the encoder, the one-step writers (`super::fused`) and the datum skipper. Apart from
//! the schemas so that those can follow it without importing the schemas' builder.

use std::sync::Arc;

/// How the values of one column are encoded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    /// TINYINT, SMALLINT, MEDIUMINT (signed or not), INT: `int`.
    Int,
    /// INT UNSIGNED, BIGINT: `long`.
    Long,
    /// BIGINT UNSIGNED: `bytes` decimal(20, 0).
    U64Decimal,
    /// FLOAT: `float`.
    Float,
    /// DOUBLE: `double`.
    Double,
    /// DECIMAL(p, s): `bytes` decimal(p, s).
    Decimal { scale: u8 },
    /// YEAR: `int`.
    Year,
    /// DATE: `int` date (+ zero-date branch).
    Date,
    /// TIME: `long` `sluice.duration-micros`.
    Time,
    /// DATETIME: `long` local-timestamp-micros (+ zero-date branch).
    DateTime,
    /// TIMESTAMP: `long` timestamp-micros (+ zero-date branch).
    Timestamp,
    /// Text decoded by the column's charset: `string`.
    Text,
    /// MySQL JSON: `string` with canonical JSON text.
    Json,
    /// Binary strings: `bytes`.
    Bytes,
    /// ENUM as an Avro enum of its names.
    Enum { names: Arc<[Arc<str>]> },
    /// ENUM as a string (names not valid Avro symbols, or `enums_as_strings`).
    EnumString { names: Arc<[Arc<str>]> },
    /// SET: array of member names.
    Set { names: Arc<[Arc<str>]> },
    /// BIT(1): `boolean`.
    Bool,
    /// BIT(n > 1): `bytes`, big-endian, `ceil(n / 8)` bytes.
    Bits { bytes: usize },
    /// GEOMETRY: `sluice.Geometry`.
    Geometry,
    /// VECTOR: array of `float`.
    Vector,
}

impl Kind {
    /// A short description for mismatch errors.
    pub(crate) fn expects(&self) -> &'static str {
        match self {
            Kind::Int | Kind::Long => "an integer",
            Kind::U64Decimal => "an unsigned integer",
            Kind::Float => "a FLOAT",
            Kind::Double => "a DOUBLE",
            Kind::Decimal { .. } => "a DECIMAL",
            Kind::Year => "a YEAR",
            Kind::Date => "a DATE",
            Kind::Time => "a TIME",
            Kind::DateTime => "a DATETIME",
            Kind::Timestamp => "a TIMESTAMP",
            Kind::Text => "text",
            Kind::Json => "JSON",
            Kind::Bytes => "binary data",
            Kind::Enum { .. } | Kind::EnumString { .. } => "an ENUM",
            Kind::Set { .. } => "a SET",
            Kind::Bool | Kind::Bits { .. } => "a BIT",
            Kind::Geometry => "a GEOMETRY",
            Kind::Vector => "a VECTOR",
        }
    }

    pub(crate) fn has_zero_dates(&self) -> bool {
        matches!(self, Kind::Date | Kind::DateTime | Kind::Timestamp)
    }
}

/// One column's field: where its value is in a row image and how it is encoded.
#[derive(Debug, Clone)]
pub(crate) struct FieldPlan {
    /// Index in the table map and the row images.
    pub column: usize,
    /// Sanitized Avro field name.
    pub name: String,
    /// The MySQL name.
    pub original: Arc<str>,
    /// Encoding.
    pub kind: Kind,
    /// The union has `null` as branch 0.
    pub nullable: bool,
    /// SQL NULL is allowed (the table map says nullable).
    pub sql_nullable: bool,
    /// Zero dates: the union's last branch is `string`.
    pub zero_string: bool,
    /// Zero dates become null.
    pub zero_null: bool,
}

impl FieldPlan {
    /// Union index of the value's own branch (0 when the field is not a union).
    pub(crate) fn value_branch(&self) -> u32 {
        u32::from(self.nullable)
    }

    /// True when the field's type is a union.
    pub(crate) fn is_union(&self) -> bool {
        self.nullable || self.zero_string
    }
}

/// In [`super::TableSchema`]'s map of columns to fields: no field. Out of range of every field list,
/// so looking it up finds nothing, with no test of its own.
pub(crate) const NO_FIELD: u32 = u32::MAX;
