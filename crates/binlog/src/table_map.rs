//! TABLE_MAP_EVENT: which table the following rows events change, and its columns.
//!
//! | bytes | field |
//! |---|---|
//! | 6 (4 before 5.1.x GA) | table id |
//! | 2 | flags |
//! | 1 + n + 1 | database name, length-prefixed and NUL-terminated |
//! | 1 + n + 1 | table name, likewise |
//! | lenenc | column count |
//! | n | column types |
//! | lenenc + m | metadata block: per-type metadata words |
//! | (n+7)/8 | nullable bitmap |
//! | rest | optional metadata (MySQL 8.0.1+, MariaDB 10.5+): type, lenenc length, value |
//!
//! Optional metadata fields decoded here: SIGNEDNESS (1), DEFAULT_CHARSET (2),
//! COLUMN_CHARSET (3), COLUMN_NAME (4), SET_STR_VALUE (5), ENUM_STR_VALUE (6),
//! GEOMETRY_TYPE (7), SIMPLE_PRIMARY_KEY (8), PRIMARY_KEY_WITH_PREFIX (9),
//! ENUM_AND_SET_DEFAULT_CHARSET (10), ENUM_AND_SET_COLUMN_CHARSET (11),
//! COLUMN_VISIBILITY (12), VECTOR_DIMENSIONALITY (13). Unknown fields are skipped by length.
//!
//! Reference: <https://dev.mysql.com/doc/dev/mysql-server/latest/classbinary__log_1_1Table__map__event.html>

use std::sync::Arc;

use sluice_protocol::Reader;

use crate::column::{read_column_meta, Column, ColumnType};
use crate::error::{Error, Result};

/// A table's description from a TABLE_MAP event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableMap {
    /// The id rows events refer to (valid until the next TABLE_MAP of the same id or a rotate).
    pub table_id: u64,
    /// Flags.
    pub flags: u16,
    /// Database name.
    pub database: Arc<str>,
    /// Table name.
    pub table: Arc<str>,
    /// The columns, in table order.
    pub columns: Vec<Column>,
    /// True when the TABLE_MAP carried column names (binlog_row_metadata=FULL).
    pub has_column_names: bool,
    /// Primary-key column indexes with prefix lengths (0 = whole column), when logged.
    pub primary_key: Option<Vec<(usize, u32)>>,
}

/// Which server wrote a TABLE_MAP: MySQL and MariaDB disagree on the columns two optional
/// metadata fields cover (see [`TableMap::parse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Writer {
    /// MySQL (and Percona).
    #[default]
    Mysql,
    /// MariaDB.
    Mariadb,
}

/// The most columns a MySQL table can have (4096); anything larger is corrupt input.
const MAX_COLUMNS: u64 = 4096;

impl TableMap {
    /// The table id a TABLE_MAP body starts with (4 bytes when the post-header is 6 long, as
    /// MySQL 5.1 wrote it; 6 bytes since).
    fn read_id(r: &mut Reader<'_>, post_header_len: u8) -> Result<u64> {
        if post_header_len == 6 {
            Ok(u64::from(r.u32("table id")?))
        } else {
            Ok(r.uint_le(6, "table id")?)
        }
    }

    /// The table id of a TABLE_MAP body, without reading the rest; None when it is too short.
    pub fn peek_id(body: &[u8], post_header_len: u8) -> Option<u64> {
        Self::read_id(&mut Reader::new(body), post_header_len).ok()
    }

    /// `db.table`.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.database, self.table)
    }

    /// Number of MySQL binary JSON columns (PARTIAL_UPDATE_ROWS counts its partial bits over
    /// them).
    pub fn json_column_count(&self) -> usize {
        self.columns.iter().filter(|c| c.ty == ColumnType::Json).count()
    }

    /// Parses a TABLE_MAP body. `post_header_len` comes from the FDE (6 means 4-byte ids);
    /// `writer` from its server version, because the servers count columns differently in two
    /// optional metadata fields: MariaDB's SIGNEDNESS has a bit for YEAR columns too (its YEAR
    /// is a TINYINT underneath) and its charset fields cover GEOMETRY (a BLOB underneath);
    /// MySQL's cover neither, and MySQL 9's charset fields cover VECTOR. Reading by the wrong
    /// rules shifts every later column's sign or charset (a signed INT after a YEAR read as
    /// UNSIGNED, a VARCHAR after a GEOMETRY read as binary), as `mariadb-binlog` itself does.
    ///
    /// # Errors
    /// Truncated or malformed bodies.
    pub fn parse(body: &[u8], post_header_len: u8, writer: Writer) -> Result<TableMap> {
        let mut r = Reader::new(body);
        let table_id = Self::read_id(&mut r, post_header_len)?;
        let flags = r.u16("table map flags")?;
        r.skip(usize::from(post_header_len).saturating_sub(r.position()), "table map post-header")?;
        let database = r.u8_prefixed("database name")?;
        r.skip(1, "database name terminator")?;
        let table = r.u8_prefixed("table name")?;
        r.skip(1, "table name terminator")?;
        let n = r.lenenc_int("column count")?;
        if n > MAX_COLUMNS {
            return Err(Error::TooLarge { what: "table map column count", len: n, max: MAX_COLUMNS });
        }
        let n = n as usize;
        let types = r.take(n, "column types")?;
        let meta_len = r.lenenc_int("metadata length")?;
        let meta_block = r.take_u64(meta_len, "column metadata")?;
        let nullable = r.take(n.div_ceil(8), "nullable bitmap")?;

        let mut mr = Reader::new(meta_block);
        let mut columns = Vec::with_capacity(n);
        for (i, &t) in types.iter().enumerate() {
            let ty = ColumnType::from_u8(t);
            let meta = read_column_meta(ty, &mut mr)?;
            let mut c = Column::new(i, ty, meta, bit_lsb(nullable, i));
            c.resolve_string_type();
            columns.push(c);
        }
        let mut tm = TableMap {
            table_id,
            flags,
            database: Arc::from(String::from_utf8_lossy(database).as_ref()),
            table: Arc::from(String::from_utf8_lossy(table).as_ref()),
            columns,
            has_column_names: false,
            primary_key: None,
        };
        tm.apply_optional_metadata(r.rest(), writer)?;
        Ok(tm)
    }

    fn apply_optional_metadata(&mut self, bytes: &[u8], writer: Writer) -> Result<()> {
        let mut r = Reader::new(bytes);
        while !r.is_empty() {
            let ty = r.u8("optional metadata type")?;
            let len = r.lenenc_int("optional metadata length")?;
            let v = r.take_u64(len, "optional metadata")?;
            self.apply_field(ty, v, writer).map_err(|e| match e {
                Error::Wire(w) => Error::invalid("table map optional metadata", format!("field {ty}: {w}")),
                e => e,
            })?;
        }
        Ok(())
    }

    fn apply_field(&mut self, ty: u8, v: &[u8], writer: Writer) -> Result<()> {
        let mut r = Reader::new(v);
        let is_character = |c: &Column| is_character(c, writer);
        match ty {
            // SIGNEDNESS: one bit per numeric column, most significant bit first
            1 => {
                for (k, c) in self.columns.iter_mut().filter(|c| is_numeric(c.ty, writer)).enumerate() {
                    // YEAR's bit (MariaDB) says UNSIGNED, which YEAR always is; it is not a number here
                    c.unsigned = bit_msb(v, k) && c.ty != ColumnType::Year;
                }
            }
            // DEFAULT_CHARSET / ENUM_AND_SET_DEFAULT_CHARSET: a default collation, then
            // (index among the columns concerned, collation) pairs for the exceptions
            2 | 10 => {
                let default = collation(&mut r)?;
                let mut exceptions = Vec::new();
                while !r.is_empty() {
                    let idx = r.lenenc_int("charset column index")?;
                    exceptions.push((idx, collation(&mut r)?));
                }
                let pick = |c: &Column| if ty == 2 { is_character(c) } else { is_enum_or_set(c) };
                for (k, c) in self.columns.iter_mut().filter(|c| pick(c)).enumerate() {
                    let exc = exceptions.iter().find(|(i, _)| *i == k as u64).map(|(_, col)| *col);
                    c.collation = Some(exc.unwrap_or(default));
                }
            }
            // COLUMN_CHARSET / ENUM_AND_SET_COLUMN_CHARSET: one collation per column concerned
            3 | 11 => {
                let pick = |c: &Column| if ty == 3 { is_character(c) } else { is_enum_or_set(c) };
                for c in self.columns.iter_mut().filter(|c| pick(c)) {
                    c.collation = Some(collation(&mut r)?);
                }
            }
            // COLUMN_NAME: one length-prefixed name per column
            4 => {
                for c in self.columns.iter_mut() {
                    let name = r.u8_prefixed("column name")?;
                    c.name = Some(Arc::from(String::from_utf8_lossy(name).as_ref()));
                }
                self.has_column_names = true;
            }
            // SET_STR_VALUE / ENUM_STR_VALUE: per column, a count then length-prefixed names
            5 | 6 => {
                let want = if ty == 5 { ColumnType::Set } else { ColumnType::Enum };
                for c in self.columns.iter_mut().filter(|c| c.ty == want) {
                    let count = r.lenenc_int("enum/set value count")?;
                    if count > r.remaining() as u64 {
                        return Err(Error::invalid(
                            "enum/set values",
                            format!("{count} values in {} bytes", r.remaining()),
                        ));
                    }
                    let mut names: Vec<Arc<str>> = Vec::with_capacity(count as usize);
                    for _ in 0..count {
                        names.push(Arc::from(String::from_utf8_lossy(r.lenenc_bytes("enum/set value")?).as_ref()));
                    }
                    if ty == 5 {
                        c.set_values = Some(names.into());
                    } else {
                        c.enum_values = Some(names.into());
                    }
                }
            }
            // GEOMETRY_TYPE: one per geometry column
            7 => {
                for c in self.columns.iter_mut().filter(|c| c.ty == ColumnType::Geometry) {
                    c.geometry_type = Some(u32::try_from(r.lenenc_int("geometry type")?).unwrap_or(0));
                }
            }
            // SIMPLE_PRIMARY_KEY: column indexes
            8 => {
                let mut pk = Vec::new();
                while !r.is_empty() {
                    pk.push((self.column_index(r.lenenc_int("primary key column")?)?, 0));
                }
                self.set_primary_key(pk);
            }
            // PRIMARY_KEY_WITH_PREFIX: (index, prefix length) pairs
            9 => {
                let mut pk = Vec::new();
                while !r.is_empty() {
                    let i = self.column_index(r.lenenc_int("primary key column")?)?;
                    let prefix = u32::try_from(r.lenenc_int("primary key prefix")?).unwrap_or(0);
                    pk.push((i, prefix));
                }
                self.set_primary_key(pk);
            }
            // COLUMN_VISIBILITY: one bit per column, most significant bit first
            12 => {
                for (i, c) in self.columns.iter_mut().enumerate() {
                    c.visible = Some(bit_msb(v, i));
                }
            }
            // VECTOR_DIMENSIONALITY: one per vector column
            13 => {
                for c in self.columns.iter_mut().filter(|c| c.ty == ColumnType::Vector) {
                    c.vector_dimensions = Some(u32::try_from(r.lenenc_int("vector dimensions")?).unwrap_or(0));
                }
            }
            _ => {} // a field from a newer server: its length let us skip it
        }
        Ok(())
    }

    fn column_index(&self, i: u64) -> Result<usize> {
        usize::try_from(i)
            .ok()
            .filter(|&i| i < self.columns.len())
            .ok_or_else(|| Error::invalid("primary key metadata", format!("column {i} of {}", self.columns.len())))
    }

    fn set_primary_key(&mut self, pk: Vec<(usize, u32)>) {
        for &(i, _) in &pk {
            if let Some(c) = self.columns.get_mut(i) {
                c.primary_key = true;
            }
        }
        self.primary_key = Some(pk);
    }
}

fn collation(r: &mut Reader<'_>) -> Result<u16> {
    let v = r.lenenc_int("collation id")?;
    u16::try_from(v).map_err(|_| Error::invalid("collation id", format!("{v} is out of range")))
}

/// Bit `i` of a little-endian-ordered bitmap (rows events, nullable bitmap).
pub(crate) fn bit_lsb(bitmap: &[u8], i: usize) -> bool {
    bitmap.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0)
}

/// Bit `i` of a most-significant-bit-first bitmap (optional metadata).
fn bit_msb(bitmap: &[u8], i: usize) -> bool {
    bitmap.get(i / 8).is_some_and(|b| b & (0x80 >> (i % 8)) != 0)
}

/// The columns SIGNEDNESS covers: the numeric types, and for MariaDB YEAR too (the server
/// writes a bit for it: `Field_year` is a `Field_tiny`).
fn is_numeric(t: ColumnType, writer: Writer) -> bool {
    use ColumnType::*;
    matches!(t, Tiny | Short | Int24 | Long | LongLong | NewDecimal | Float | Double)
        || (writer == Writer::Mariadb && t == Year)
}

/// The columns DEFAULT_CHARSET / COLUMN_CHARSET cover: strings and blobs (not ENUM/SET,
/// which have their own fields, and not JSON); MariaDB's also GEOMETRY (a BLOB underneath,
/// with the binary charset), MySQL 9's VECTOR.
fn is_character(c: &Column, writer: Writer) -> bool {
    use ColumnType::*;
    matches!(c.ty, String | VarChar | VarString | Blob | TinyBlob | MediumBlob | LongBlob)
        || (writer == Writer::Mariadb && c.ty == Geometry)
        || (writer == Writer::Mysql && c.ty == Vector)
}

fn is_enum_or_set(c: &Column) -> bool {
    matches!(c.ty, ColumnType::Enum | ColumnType::Set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        /// Any bytes as a TABLE_MAP body: an error or a table, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), phl in prop_oneof![Just(6u8), Just(8u8), any::<u8>()]) {
            let _ = TableMap::parse(&bytes, phl, Writer::Mysql);
            let _ = TableMap::parse(&bytes, phl, Writer::Mariadb);
        }

        /// A well-formed head (ids, names, column types and metadata) followed by arbitrary
        /// optional-metadata bytes: the TLV walk never panics and never keeps more columns
        /// than the head declared.
        #[test]
        fn arbitrary_optional_metadata_never_panics(
            types in proptest::collection::vec(any::<u8>(), 0..12),
            meta in proptest::collection::vec(any::<u8>(), 0..30),
            optional in proptest::collection::vec(any::<u8>(), 0..120),
        ) {
            let mut b = vec![1, 0, 0, 0, 0, 0, 1, 0]; // table id 1, flags 1
            b.extend_from_slice(&[2, b'd', b'b', 0, 1, b't', 0]); // "db", "t", NUL-terminated
            b.push(types.len() as u8); // column count (lenenc, < 251)
            b.extend_from_slice(&types);
            b.push(meta.len() as u8); // metadata length (lenenc, < 251)
            b.extend_from_slice(&meta);
            b.extend(std::iter::repeat_n(0xff, types.len().div_ceil(8))); // nullable bitmap
            b.extend_from_slice(&optional);
            if let Ok(tm) = TableMap::parse(&b, 8, Writer::Mariadb) {
                prop_assert_eq!(tm.columns.len(), types.len());
            }
        }
    }
}
