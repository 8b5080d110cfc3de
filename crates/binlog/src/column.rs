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

use sluice_protocol::reader::Reader;

use crate::error::{Error, Result};

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

/// Reads one column's entry in a TABLE_MAP's metadata block and forms its metadata word.
///
/// | type                                                     | bytes | word                         |
/// |----------------------------------------------------------|-------|------------------------------|
/// | FLOAT, DOUBLE                                            | 1     | the size (4 / 8)             |
/// | TINY_BLOB..LONG_BLOB, BLOB, GEOMETRY, JSON, VECTOR       | 1     | length-prefix width (1..=4)  |
/// | TIMESTAMP2, DATETIME2, TIME2                             | 1     | fsp (0..=6)                  |
/// | VARCHAR                                                  | 2 LE  | maximum byte length          |
/// | BIT                                                      | 2     | `bytes << 8 \| bits % 8` (byte 0 = bits, byte 1 = bytes) |
/// | NEWDECIMAL                                               | 2     | `precision << 8 \| scale`    |
/// | STRING, ENUM, SET                                        | 2     | `byte0 << 8 \| byte1` (real type, length: see [`Column::resolve_string_type`]) |
/// | TYPED_ARRAY                                              | 1 + the element type's | the element type's word |
/// | everything else (integers, DATE, old temporal types, VAR_STRING, DECIMAL, ...) | 0 | 0 |
///
/// As MySQL's `table_def` (`rpl_utility.cc`) reads it; VECTOR (MySQL 9.0) is stored like a
/// BLOB with a 1-byte word (4: a 4-byte length prefix). VAR_STRING has no metadata: servers
/// write VARCHAR columns as VARCHAR.
///
/// # Errors
/// [`Error::Wire`] when the block is truncated; [`Error::Invalid`] for a nested typed array.
pub fn read_column_meta(ty: ColumnType, r: &mut Reader<'_>) -> Result<u16> {
    use ColumnType as T;
    Ok(match ty {
        T::Float
        | T::Double
        | T::TinyBlob
        | T::Blob
        | T::MediumBlob
        | T::LongBlob
        | T::Geometry
        | T::Json
        | T::Vector
        | T::Timestamp2
        | T::DateTime2
        | T::Time2 => u16::from(r.u8("column metadata")?),
        T::VarChar => r.u16("VARCHAR metadata")?,
        T::Bit => {
            let bits = r.u8("BIT metadata")?;
            let bytes = r.u8("BIT metadata")?;
            u16::from_be_bytes([bytes, bits])
        }
        T::NewDecimal | T::String | T::Enum | T::Set => {
            let [a, b] = r.array::<2>("column metadata")?;
            u16::from_be_bytes([a, b])
        }
        T::TypedArray => {
            let inner = ColumnType::from_u8(r.u8("typed array element type")?);
            match inner {
                T::TypedArray => return Err(Error::invalid("column metadata", "nested typed array")),
                // A typed VARCHAR array adds a third byte.
                T::VarChar => {
                    let len = r.u16("typed array metadata")?;
                    r.skip(1, "typed array metadata")?;
                    len
                }
                other => read_column_meta(other, r)?,
            }
        }
        _ => 0,
    })
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

    /// For wire type STRING, replaces the raw metadata word with the real type and its
    /// length, as the server packs them (`Field_string::do_save_field_metadata`):
    ///
    /// - byte 0 (high byte of `meta`) is the real type with bits 4-5 *flipped* to carry bits
    ///   8-9 of the length: when `(byte0 & 0x30) != 0x30`, the length is
    ///   `byte1 | (((byte0 & 0x30) ^ 0x30) << 4)` and the real type `byte0 | 0x30`
    ///   (CHAR columns over 255 bytes, e.g. `CHAR(100)` in utf8mb4);
    /// - otherwise the real type is byte 0 and the length byte 1.
    ///
    /// Afterwards `ty` and `meta` mean:
    /// - ENUM: `ty = Enum`, `meta` = pack length in bytes (1 for up to 255 members, else 2);
    /// - SET: `ty = Set`, `meta` = pack length in bytes (1..=8, one bit per member);
    /// - CHAR / BINARY: `ty = String`, `meta` = the maximum byte length (characters times
    ///   the charset's maximum character width).
    ///
    /// Other wire types are left alone, and calling it twice is harmless (a resolved length
    /// is at most 1023, so its high byte is below the smallest packed real type).
    pub fn resolve_string_type(&mut self) {
        if self.wire_type != ColumnType::String || self.ty != ColumnType::String {
            return;
        }
        let [byte0, byte1] = self.meta.to_be_bytes();
        if byte0 < 0x80 {
            return; // already resolved (or never packed)
        }
        let (real, len) = if byte0 & 0x30 != 0x30 {
            (byte0 | 0x30, u16::from(byte1) | (u16::from((byte0 & 0x30) ^ 0x30) << 4))
        } else {
            (byte0, u16::from(byte1))
        };
        match ColumnType::from_u8(real) {
            ColumnType::Enum => {
                self.ty = ColumnType::Enum;
                self.meta = u16::from(byte1);
            }
            ColumnType::Set => {
                self.ty = ColumnType::Set;
                self.meta = u16::from(byte1);
            }
            _ => self.meta = len,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(ty: ColumnType, bytes: &[u8]) -> (u16, usize) {
        let mut r = Reader::new(bytes);
        let m = read_column_meta(ty, &mut r).unwrap();
        (m, r.position())
    }

    #[test]
    fn metadata_widths() {
        assert_eq!(meta(ColumnType::Double, &[8, 0xaa]), (8, 1));
        assert_eq!(meta(ColumnType::Blob, &[2]), (2, 1));
        assert_eq!(meta(ColumnType::Vector, &[4]), (4, 1));
        assert_eq!(meta(ColumnType::DateTime2, &[6]), (6, 1));
        assert_eq!(meta(ColumnType::VarChar, &[0x2c, 0x01]), (300, 2));
        // BIT(10): 2 bits + 1 byte
        assert_eq!(meta(ColumnType::Bit, &[2, 1]), (0x0102, 2));
        // DECIMAL(10,2)
        assert_eq!(meta(ColumnType::NewDecimal, &[10, 2]), (0x0a02, 2));
        // ENUM as STRING: real type 247, pack length 1
        assert_eq!(meta(ColumnType::String, &[0xf7, 0x01]), (0xf701, 2));
        assert_eq!(meta(ColumnType::Long, &[0xff]), (0, 0));
        assert_eq!(meta(ColumnType::VarString, &[0xff]), (0, 0));
        assert_eq!(meta(ColumnType::TypedArray, &[15, 0x10, 0x00, 0x2d]), (16, 4));
        assert_eq!(meta(ColumnType::TypedArray, &[3]), (0, 1));
        assert!(read_column_meta(ColumnType::VarChar, &mut Reader::new(&[1])).is_err());
    }

    fn resolved(meta: u16) -> (ColumnType, u16) {
        let mut c = Column::new(0, ColumnType::String, meta, true);
        c.resolve_string_type();
        let once = (c.ty, c.meta);
        c.resolve_string_type();
        assert_eq!((c.ty, c.meta), once, "idempotent");
        once
    }

    #[test]
    fn string_real_types() {
        assert_eq!(resolved(0xf701), (ColumnType::Enum, 1));
        assert_eq!(resolved(0xf702), (ColumnType::Enum, 2));
        assert_eq!(resolved(0xf808), (ColumnType::Set, 8));
        // CHAR(10) latin1
        assert_eq!(resolved(0xfe0a), (ColumnType::String, 10));
        // CHAR(100) utf8mb4 = 400 bytes: 400 = 0x190; bits 8-9 = 1 -> byte0 = 0xfe ^ 0x10 = 0xee
        assert_eq!(resolved(0xee90), (ColumnType::String, 400));
        // CHAR(255) utf8mb4 = 1020 bytes = 0x3fc -> byte0 = 0xfe ^ 0x30 = 0xce
        assert_eq!(resolved(0xcefc), (ColumnType::String, 1020));
        // other wire types are left alone
        let mut c = Column::new(0, ColumnType::VarChar, 0xf701, true);
        c.resolve_string_type();
        assert_eq!((c.ty, c.meta), (ColumnType::VarChar, 0xf701));
    }
}
