//! Column types and the per-column description a row decoder needs.
//!
//! [`ColumnType`] is MySQL's `enum_field_types` as it appears in TABLE_MAP events.
//! [`Column`] gathers what the TABLE_MAP says about one column: its wire type and metadata
//! word, and, when the server writes optional metadata (`binlog_row_metadata=FULL`, or
//! MINIMAL for signedness and charsets), its name, signedness, charset, ENUM/SET names,
//! geometry type, key membership and visibility.
//!
//! Reference: <https://dev.mysql.com/doc/dev/mysql-server/latest/classbinary__log_1_1Table__map__event.html>

use std::sync::Arc;

/// A column's wire type (`enum_field_types`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ColumnType {
    /// 0: the pre-5.0 DECIMAL (string form).
    Decimal,
    /// 1: TINYINT.
    Tiny,
    /// 2: SMALLINT.
    Short,
    /// 3: INT.
    Long,
    /// 4: FLOAT.
    Float,
    /// 5: DOUBLE.
    Double,
    /// 6: NULL type (never carries data).
    Null,
    /// 7: TIMESTAMP before 5.6.4 (seconds only).
    Timestamp,
    /// 8: BIGINT.
    LongLong,
    /// 9: MEDIUMINT.
    Int24,
    /// 10: DATE.
    Date,
    /// 11: TIME before 5.6.4.
    Time,
    /// 12: DATETIME before 5.6.4.
    DateTime,
    /// 13: YEAR.
    Year,
    /// 14: NEWDATE (internal; not written by servers).
    NewDate,
    /// 15: VARCHAR / VARBINARY.
    VarChar,
    /// 16: BIT.
    Bit,
    /// 17: TIMESTAMP with fractional seconds (5.6.4+).
    Timestamp2,
    /// 18: DATETIME with fractional seconds (5.6.4+).
    DateTime2,
    /// 19: TIME with fractional seconds (5.6.4+).
    Time2,
    /// 20: typed array (functional indexes; not in row images).
    TypedArray,
    /// 242: VECTOR (MySQL 9.0+).
    Vector,
    /// 243: invalid marker.
    Invalid,
    /// 244: BOOL (internal).
    Bool,
    /// 245: MySQL binary JSON.
    Json,
    /// 246: DECIMAL / NUMERIC (exact).
    NewDecimal,
    /// 247: ENUM (appears inside STRING metadata in binlogs).
    Enum,
    /// 248: SET (appears inside STRING metadata in binlogs).
    Set,
    /// 249: TINYBLOB / TINYTEXT.
    TinyBlob,
    /// 250: MEDIUMBLOB / MEDIUMTEXT.
    MediumBlob,
    /// 251: LONGBLOB / LONGTEXT.
    LongBlob,
    /// 252: BLOB / TEXT (the metadata says which length prefix).
    Blob,
    /// 253: VARCHAR in older formats.
    VarString,
    /// 254: CHAR / BINARY, and ENUM / SET (real type in the metadata).
    String,
    /// 255: GEOMETRY.
    Geometry,
    /// Any other code: an error names the table and column when a row needs it.
    Unknown(u8),
}

impl ColumnType {
    /// The type for a TABLE_MAP type byte.
    pub fn from_u8(b: u8) -> ColumnType {
        use ColumnType::*;
        match b {
            0 => Decimal,
            1 => Tiny,
            2 => Short,
            3 => Long,
            4 => Float,
            5 => Double,
            6 => Null,
            7 => Timestamp,
            8 => LongLong,
            9 => Int24,
            10 => Date,
            11 => Time,
            12 => DateTime,
            13 => Year,
            14 => NewDate,
            15 => VarChar,
            16 => Bit,
            17 => Timestamp2,
            18 => DateTime2,
            19 => Time2,
            20 => TypedArray,
            242 => Vector,
            243 => Invalid,
            244 => Bool,
            245 => Json,
            246 => NewDecimal,
            247 => Enum,
            248 => Set,
            249 => TinyBlob,
            250 => MediumBlob,
            251 => LongBlob,
            252 => Blob,
            253 => VarString,
            254 => String,
            255 => Geometry,
            other => Unknown(other),
        }
    }

    /// The type byte.
    pub fn code(self) -> u8 {
        use ColumnType::*;
        match self {
            Decimal => 0,
            Tiny => 1,
            Short => 2,
            Long => 3,
            Float => 4,
            Double => 5,
            Null => 6,
            Timestamp => 7,
            LongLong => 8,
            Int24 => 9,
            Date => 10,
            Time => 11,
            DateTime => 12,
            Year => 13,
            NewDate => 14,
            VarChar => 15,
            Bit => 16,
            Timestamp2 => 17,
            DateTime2 => 18,
            Time2 => 19,
            TypedArray => 20,
            Vector => 242,
            Invalid => 243,
            Bool => 244,
            Json => 245,
            NewDecimal => 246,
            Enum => 247,
            Set => 248,
            TinyBlob => 249,
            MediumBlob => 250,
            LongBlob => 251,
            Blob => 252,
            VarString => 253,
            String => 254,
            Geometry => 255,
            Unknown(b) => b,
        }
    }

    /// MySQL's name for the type, as `SHOW CREATE TABLE` would spell the family.
    pub fn name(self) -> &'static str {
        use ColumnType::*;
        match self {
            Decimal | NewDecimal => "DECIMAL",
            Tiny => "TINYINT",
            Short => "SMALLINT",
            Long => "INT",
            Float => "FLOAT",
            Double => "DOUBLE",
            Null => "NULL",
            Timestamp | Timestamp2 => "TIMESTAMP",
            LongLong => "BIGINT",
            Int24 => "MEDIUMINT",
            Date | NewDate => "DATE",
            Time | Time2 => "TIME",
            DateTime | DateTime2 => "DATETIME",
            Year => "YEAR",
            VarChar | VarString => "VARCHAR",
            Bit => "BIT",
            TypedArray => "TYPED_ARRAY",
            Vector => "VECTOR",
            Invalid => "INVALID",
            Bool => "BOOL",
            Json => "JSON",
            Enum => "ENUM",
            Set => "SET",
            TinyBlob | MediumBlob | LongBlob | Blob => "BLOB",
            String => "CHAR",
            Geometry => "GEOMETRY",
            Unknown(_) => "UNKNOWN",
        }
    }
}

/// Everything known about one column of a table, from its TABLE_MAP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Position in the table, from 0.
    pub index: usize,
    /// Name, from COLUMN_NAME optional metadata (None when the server did not write it).
    pub name: Option<Arc<str>>,
    /// The type to decode by: for STRING columns this is the *real* type from the metadata
    /// (ENUM, SET or STRING), so callers never look at the raw STRING metadata.
    pub ty: ColumnType,
    /// The type byte as written in the TABLE_MAP (STRING for ENUM/SET columns).
    pub wire_type: ColumnType,
    /// The type's metadata word (lengths, precision/scale, fsp, ...); meaning depends on `ty`.
    pub meta: u16,
    /// Whether the column may be NULL.
    pub nullable: bool,
    /// UNSIGNED, from SIGNEDNESS metadata (numeric columns only; false when unknown).
    pub unsigned: bool,
    /// Collation id from the charset metadata (None when unknown); 63 is `binary`.
    pub collation: Option<u16>,
    /// ENUM member names in definition order (index 1 is the first).
    pub enum_values: Option<Arc<[Arc<str>]>>,
    /// SET member names in definition order (bit 0 is the first).
    pub set_values: Option<Arc<[Arc<str>]>>,
    /// GEOMETRY subtype from GEOMETRY_TYPE metadata.
    pub geometry_type: Option<u32>,
    /// VECTOR dimensionality from VECTOR_DIMENSIONALITY metadata.
    pub vector_dimensions: Option<u32>,
    /// Visibility from COLUMN_VISIBILITY metadata (MySQL 8.0.23+); None when not written.
    pub visible: Option<bool>,
    /// Part of the primary key (SIMPLE_PRIMARY_KEY / PRIMARY_KEY_WITH_PREFIX metadata).
    pub primary_key: bool,
}

impl Column {
    /// A column with only what the TABLE_MAP always carries.
    pub fn new(index: usize, wire_type: ColumnType, meta: u16, nullable: bool) -> Column {
        Column {
            index,
            name: None,
            ty: wire_type,
            wire_type,
            meta,
            nullable,
            unsigned: false,
            collation: None,
            enum_values: None,
            set_values: None,
            geometry_type: None,
            vector_dimensions: None,
            visible: None,
            primary_key: false,
        }
    }

    /// The name to show: the real name, or `@N` (1-based, as mysqlbinlog prints) when unknown.
    pub fn display_name(&self) -> String {
        match &self.name {
            Some(n) => n.to_string(),
            None => format!("@{}", self.index + 1),
        }
    }
}

// TEMPORARY (replaced by the value layer's versions at merge)
use sluice_protocol::Reader;
/// Reads a column's metadata word from TABLE_MAP.
///
/// # Errors
/// Truncated input.
pub fn read_column_meta(ty: ColumnType, r: &mut Reader<'_>) -> crate::Result<u16> {
    use ColumnType::*;
    Ok(match ty {
        Float | Double | Blob | TinyBlob | MediumBlob | LongBlob | Geometry | Json | Timestamp2 | DateTime2
        | Time2 | Vector => u16::from(r.u8("column meta")?),
        VarChar | VarString | Bit | NewDecimal => r.u16("column meta")?,
        String | Enum | Set => {
            let a = r.u8("column meta")?;
            let b = r.u8("column meta")?;
            (u16::from(a) << 8) | u16::from(b)
        }
        _ => 0,
    })
}
impl Column {
    /// Resolves STRING's real type.
    pub fn resolve_string_type(&mut self) {
        if self.wire_type == ColumnType::String {
            let real = (self.meta >> 8) as u8;
            let real = if real & 0x30 != 0x30 { real | 0x30 } else { real };
            match ColumnType::from_u8(real) {
                ColumnType::Enum => self.ty = ColumnType::Enum,
                ColumnType::Set => self.ty = ColumnType::Set,
                _ => {}
            }
        }
    }
}
