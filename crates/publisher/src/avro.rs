//! Avro: **where a column value becomes an Avro value**, in one place.
//!
//! [`TableSchema`] turns a table's description (a [`sluice_binlog::TableMap`], with names filled
//! in) into three Avro schemas: the key (a record of the primary-key columns, or none), the
//! value envelope `{before, after, op, ts_ms, source, transaction}`, and the flattened value
//! (the row's columns plus `__op` and `__deleted`). [`AvroEncoder`] turns row images into Avro
//! datum bytes that match those schemas, written directly (no Confluent header: framing
//! and the registry live elsewhere). The one shortcut: `fused`, which writes the commonest
//! column values of the record path from their row-image bytes in one step, and leaves every
//! other value (and every value it is not sure of) to the encoder, whose bytes it must equal.
//!
//! The mapping of every MySQL type, and each choice where Avro has no exact counterpart (zero
//! dates, signed TIME, ENUM symbols, MINIMAL row images), is in `schemas/README.md`; the
//! static parts of the envelope (`Source`, `Transaction`, `Geometry`) are the `.avsc` files in
//! `schemas/`, embedded here.
//!
//! References: Avro 1.11 specification (names, unions, logical types, schema resolution)
//! <https://avro.apache.org/docs/1.11.1/specification/>; Debezium's MySQL connector event
//! format, which the envelope resembles
//! <https://debezium.io/documentation/reference/stable/connectors/mysql.html#mysql-events>.

mod binary;
mod encode;
mod field;
mod fused;
mod schema;
mod skip;

#[cfg(test)]
mod recorded_tests;

use std::sync::Arc;

pub use encode::{
    min_encoded_len, AvroEncoder, Connector, EnvelopeParts, EventContext, Op, RowBuffers, RowWriter, Snapshot,
    SourceInfo, TransactionInfo,
};
#[cfg(test)]
pub use schema::ZeroDates;
pub use schema::{field_name_collision, SchemaOptions, TableSchema};

/// The envelope's `source` block (`schemas/source.avsc`).
pub const SOURCE_AVSC: &str = include_str!("../../../schemas/source.avsc");
/// The envelope's `transaction` block (`schemas/transaction.avsc`).
pub const TRANSACTION_AVSC: &str = include_str!("../../../schemas/transaction.avsc");
/// The record GEOMETRY columns map to (`schemas/geometry.avsc`).
pub const GEOMETRY_AVSC: &str = include_str!("../../../schemas/geometry.avsc");

/// What went wrong building a schema or encoding a row. Every variant names the table
/// (`db.table`) and, where one is to blame, the column.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AvroError {
    /// The table's columns have no names (the server did not write `binlog_row_metadata=FULL`
    /// and no tracked schema filled them in): values cannot be named without guessing.
    #[error("{table}: the table map has no column names (binlog_row_metadata=FULL or a tracked schema is needed)")]
    MissingColumnNames {
        /// `db.table`.
        table: String,
    },
    /// The table map lacks something the mapping needs (ENUM/SET names, a character set).
    #[error("{table}: column {column}: {what} unknown (binlog_row_metadata=FULL or a tracked schema is needed)")]
    MissingMetadata {
        /// `db.table`.
        table: String,
        /// The column.
        column: String,
        /// What is missing.
        what: &'static str,
    },
    /// Two columns (or a column and a field Sluice adds) have the same Avro name once
    /// sanitized.
    #[error("{table}: columns {first:?} and {second:?} both become the Avro field name {name:?}")]
    NameCollision {
        /// `db.table`.
        table: String,
        /// The first name.
        first: String,
        /// The second name.
        second: String,
        /// The sanitized name they share.
        name: String,
    },
    /// A configured key column does not exist in the table.
    #[error("{table}: configured key column {column:?} is not a column of the table")]
    UnknownKeyColumn {
        /// `db.table`.
        table: String,
        /// The configured name.
        column: String,
    },
    /// A column the configuration excludes is part of the record key.
    #[error(
        "{table}: column {column:?} is excluded by filter.exclude_columns but is part of the record key; \
         keep it, or name other key columns in [output.key_columns]"
    )]
    ExcludedKeyColumn {
        /// `db.table`.
        table: String,
        /// The column.
        column: String,
    },
    /// A column type with no mapping (pre-5.0 DECIMAL, typed arrays, unknown codes).
    #[error("{table}: column {column}: type {ty} (code {code}) has no Avro mapping")]
    UnsupportedType {
        /// `db.table`.
        table: String,
        /// The column.
        column: String,
        /// MySQL's type name.
        ty: &'static str,
        /// The type code.
        code: u8,
    },
    /// A schema registered for the table that is not the shape Sluice writes (a truncate
    /// record is encoded with the table's latest registered value schema).
    #[error("{table}: the registered value schema is not one Sluice writes: {why}")]
    ForeignSchema {
        /// `db.table`.
        table: String,
        /// What is wrong with it.
        why: String,
    },
    /// The generated schema was refused by the Avro library (a bug in Sluice).
    #[error("{table}: generated Avro schema is invalid: {source}")]
    InvalidSchema {
        /// `db.table`.
        table: String,
        /// The library's reason.
        source: Box<apache_avro::Error>,
    },
    /// Text that is not valid in its column's character set. Never replaced silently.
    #[error("{table}: column {column}: {source}")]
    Text {
        /// `db.table`.
        table: String,
        /// The column.
        column: String,
        /// Which charset and where.
        source: sluice_binlog::charset::TextError,
    },
    /// A value whose kind does not match the column's schema (e.g. text in a binary column).
    #[error("{table}: column {column}: expected {expected}, found {found}")]
    TypeMismatch {
        /// `db.table`.
        table: String,
        /// The column.
        column: String,
        /// What the schema holds.
        expected: &'static str,
        /// What the row had.
        found: String,
    },
    /// SQL NULL in a column the table map declares NOT NULL.
    #[error("{table}: column {column}: NULL in a NOT NULL column")]
    NullInNotNull {
        /// `db.table`.
        table: String,
        /// The column.
        column: String,
    },
    /// A column missing from a row image (`binlog_row_image=MINIMAL/NOBLOB`) where the schema
    /// cannot say so: a key column, or any column when partial images are not enabled.
    #[error(
        "{table}: column {column} is not in the {image} image (binlog_row_image is not FULL; \
         set it to FULL, or enable partial images: [output] partial_images = true)"
    )]
    AbsentColumn {
        /// `db.table`.
        table: String,
        /// The column.
        column: String,
        /// `before` or `after`.
        image: &'static str,
    },
    /// An ENUM index with no member name (0 is MySQL's empty error value, written in
    /// non-strict sql_mode); with Avro enums it has no symbol.
    #[error("{table}: column {column}: ENUM index {index} has no name among {members} members{hint}")]
    EnumIndex {
        /// `db.table`.
        table: String,
        /// The column.
        column: String,
        /// The index as logged.
        index: u16,
        /// How many names the column has.
        members: usize,
        /// What to do.
        hint: &'static str,
    },
    /// SET bits beyond the known members.
    #[error("{table}: column {column}: SET bits {mask:#x} exceed the {members} known members")]
    SetBits {
        /// `db.table`.
        table: String,
        /// The column.
        column: String,
        /// The mask as logged.
        mask: u64,
        /// How many names the column has.
        members: usize,
    },
    /// A partial JSON update whose before image lacks the document, so the new document cannot
    /// be computed.
    #[error(
        "{table}: column {column}: partial JSON update without the document in the before image \
         (set binlog_row_value_options='' or binlog_row_image=FULL)"
    )]
    PartialJson {
        /// `db.table`.
        table: String,
        /// The column.
        column: String,
    },
    /// The row images do not fit the operation (e.g. a delete without a before image).
    #[error("{table}: op {op} needs {needs}")]
    Images {
        /// `db.table`.
        table: String,
        /// The op code.
        op: &'static str,
        /// What is missing.
        needs: &'static str,
    },
}

/// Result with [`AvroError`].
pub type Result<T, E = AvroError> = std::result::Result<T, E>;

/// Makes `s` a valid Avro name (`[A-Za-z_][A-Za-z0-9_]*`): every other character becomes `_`,
/// a leading digit gets a `_` in front, and the empty string becomes `_`.
///
/// Different inputs can give the same name (`a-b`, `a b`, `a_b`); callers detect collisions.
pub fn sanitize_name(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 1);
    for c in s.chars() {
        if out.is_empty() && c.is_ascii_digit() {
            out.push('_');
        }
        out.push(if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' });
    }
    if out.is_empty() {
        out.push('_');
    }
    out
}

/// True when `s` is a valid Avro name as it stands.
pub fn is_valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The Avro namespace of a table: `<prefix>.<db>.<table>`, each dot-separated part sanitized.
pub fn table_namespace(prefix: &str, database: &str, table: &str) -> String {
    prefix
        .split('.')
        .filter(|p| !p.is_empty())
        .chain([database, table])
        .map(sanitize_name)
        .collect::<Vec<_>>()
        .join(".")
}

/// A column's name for messages: the real name, or `@N` when unknown.
fn column_label(name: &Option<Arc<str>>, index: usize) -> String {
    match name {
        Some(n) => n.to_string(),
        None => format!("@{}", index + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitizing_names() {
        assert_eq!(sanitize_name("plain_name1"), "plain_name1");
        assert_eq!(sanitize_name("1st"), "_1st");
        assert_eq!(sanitize_name("a-b c"), "a_b_c");
        assert_eq!(sanitize_name("größe"), "gr__e");
        assert_eq!(sanitize_name(""), "_");
        assert!(is_valid_name("_x9") && !is_valid_name("9x") && !is_valid_name("a-b") && !is_valid_name(""));
        assert_eq!(table_namespace("cdc.prod", "shop-eu", "order items"), "cdc.prod.shop_eu.order_items");
        assert_eq!(table_namespace("", "db", "2024"), "db._2024");
    }

    /// `shop.customers (id INT PK, email VARCHAR, password_hash VARBINARY)`, names logged.
    fn customers() -> sluice_binlog::TableMap {
        use sluice_binlog::{Column, ColumnType};
        let col = |i: usize, ty: ColumnType, name: &str, collation: u16| {
            let mut c = Column::new(i, ty, 255, i != 0);
            c.name = Some(Arc::from(name));
            c.collation = Some(collation);
            c
        };
        sluice_binlog::TableMap {
            table_id: 1,
            flags: 0,
            database: Arc::from("shop"),
            table: Arc::from("customers"),
            columns: vec![
                col(0, ColumnType::Long, "id", 63),
                col(1, ColumnType::VarChar, "email", 45),
                col(2, ColumnType::VarChar, "password_hash", 63),
            ],
            has_column_names: true,
            primary_key: Some(vec![(0, 0)]),
        }
    }

    #[test]
    fn excluded_columns_leave_the_records() {
        let tm = customers();
        let opts = SchemaOptions { exclude_columns: vec!["pass*".into()], ..SchemaOptions::default() };
        let ts = TableSchema::new(&tm, &opts).unwrap();
        let value = ts.value_schema_json();
        assert!(value.contains("\"email\"") && !value.contains("password_hash"), "{value}");
        assert!(!ts.flat_schema_json().contains("password_hash"));
        assert_eq!(ts.key_field_names(), ["id"]);

        let opts = SchemaOptions { exclude_columns: vec!["id".into()], ..SchemaOptions::default() };
        let e = TableSchema::new(&tm, &opts).unwrap_err().to_string();
        assert!(e.contains("\"id\" is excluded") && e.contains("key"), "{e}");
    }

    #[test]
    fn static_schemas_parse() {
        for s in [SOURCE_AVSC, TRANSACTION_AVSC, GEOMETRY_AVSC] {
            apache_avro::Schema::parse_str(s).unwrap();
        }
    }
}
