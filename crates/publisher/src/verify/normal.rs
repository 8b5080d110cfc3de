//! **The normal form rows are compared in**: a row becomes its document id and its columns'
//! values exactly as the Elasticsearch sink writes them ([`crate::elastic::document`]), whether
//! it comes from the table or from a record.
//!
//! A table's row is encoded by the pipeline's own Avro encoder with the schema the pipeline
//! would build for the table now (the same options: key columns, excluded columns, ENUMs as
//! strings), read back, and turned into a document; a record is decoded with the schema it
//! was written with (the registry's, by the id in its framing) and turned into a document the
//! same way. So a DECIMAL compares by its digits, a BIGINT UNSIGNED by its value, a negative
//! TIME, a zero date, BINARY padding and every character set exactly as the records carry
//! them, and a difference in any of them is a difference in the normal form.

use std::fmt::Write as _;

use apache_avro::types::Value as Avro;
use apache_avro::Schema;
use base64::Engine as _;
use serde_json::Value as Json;
use sluice_binlog::rows::RowImage;
use sluice_binlog::{TableMap, Value};
use xxhash_rust::xxh3::{xxh3_128, Xxh3};

use crate::avro::{AvroEncoder, Op, TableSchema};
use crate::elastic::document::{action, document_id, record_values, Action, Forms};
use crate::elastic::mapping::{key_fields, layout, Field, Kind, Layout};

/// A 128-bit digest (of a document id, or of a row's values).
pub(crate) type Digest = u128;

/// The digest of a document id (what the in-memory side of a comparison is keyed by).
pub(crate) fn id_digest(id: &str) -> Digest {
    xxh3_128(id.as_bytes())
}

/// One row in the normal form.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Doc {
    /// The document id: a one-column key's value as text, a composite key as a JSON array.
    pub id: String,
    /// The compared columns' values, in [`Normalizer::columns`]' order. A column a record or a
    /// document does not carry (written before the column was added) is NULL, as Avro's schema
    /// resolution reads it with the table's schema now.
    pub values: Vec<Option<Json>>,
}

impl Doc {
    /// The digest of the values (equal values, equal digests).
    pub(crate) fn digest(&self) -> Digest {
        let mut h = Xxh3::new();
        let mut text = String::new();
        for v in &self.values {
            text.clear();
            match v {
                // a tag no JSON text starts with
                None => text.push('\u{1}'),
                Some(j) => {
                    let _ = write!(text, "{j}");
                }
            }
            h.update(&(text.len() as u64).to_le_bytes());
            h.update(text.as_bytes());
        }
        h.digest128()
    }
}

/// What a record does to its key's state.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Change {
    /// The row is now this (`c`, `u`, `r`).
    Upsert(Doc),
    /// The row with this id is gone (`d`, a tombstone).
    Delete(String),
    /// Every row of the table the record's partition held is gone (`t`).
    Truncate,
}

/// Why a table has no normalizer.
#[derive(Debug)]
pub(crate) enum Keyless {
    /// No key: no record says which row it is.
    NoKey,
    /// Its schema cannot be read as a document.
    Other(String),
}

/// Turns a table's rows and its records into [`Doc`]s.
pub(crate) struct Normalizer {
    /// `db.table`.
    pub table: String,
    schema: TableSchema,
    flat: Layout,
    key_fields: Vec<Field>,
    forms: Forms,
    encoder: AvroEncoder,
    buf: Vec<u8>,
    columns: Vec<String>,
}

impl Normalizer {
    /// A normalizer for the table `tm` describes, encoded as `schema` (what the pipeline builds
    /// for it), its values written in `forms`, POINT columns `geo_point` names as `{lat, lon}`.
    ///
    /// # Errors
    /// A table without a key (its records have null keys: nothing says which row a record is),
    /// as [`Keyless`].
    pub(crate) fn new(
        tm: &TableMap,
        schema: TableSchema,
        forms: Forms,
        geo_point: &dyn Fn(&str) -> bool,
    ) -> Result<Normalizer, Keyless> {
        let table = format!("{}.{}", tm.database, tm.table);
        let Some(key_schema) = schema.key_schema() else {
            return Err(Keyless::NoKey);
        };
        let key_fields = key_fields(key_schema).map_err(|e| Keyless::Other(e.to_string()))?;
        let flat = layout(schema.flat_schema(), &|c| geo_point(&format!("{table}.{c}")))
            .map_err(|e| Keyless::Other(e.to_string()))?;
        let columns = flat.fields.iter().map(|f| f.column.clone()).collect();
        Ok(Normalizer { table, schema, flat, key_fields, forms, encoder: AvroEncoder::new(), buf: Vec::new(), columns })
    }

    /// The compared columns, in order.
    pub(crate) fn columns(&self) -> &[String] {
        &self.columns
    }

    /// The Avro namespace of the table's schemas (records of other tables in a routed topic
    /// have another).
    pub(crate) fn namespace(&self) -> &str {
        self.schema.namespace()
    }

    /// The normal form of a table row (its values by column index, as a snapshot reads them).
    ///
    /// # Errors
    /// A value the table's schema cannot hold (named by column).
    pub(crate) fn row<'v>(&mut self, values: &mut Vec<Option<Value<'v>>>) -> Result<Doc, String> {
        let image = RowImage { values: std::mem::take(values) };
        let doc = self.image(&image);
        *values = image.values;
        doc
    }

    fn image(&mut self, image: &RowImage<'_>) -> Result<Doc, String> {
        self.buf.clear();
        self.encoder.write_key(&self.schema, image, &mut self.buf).map_err(|e| e.to_string())?;
        let key_schema = self.schema.key_schema().ok_or("no key schema")?;
        let key = read(key_schema, &self.buf)?;
        let id = document_id(&key, &self.key_fields, self.forms).map_err(|e| e.to_string())?;
        self.buf.clear();
        self.encoder.write_flat(&self.schema, Op::Read, None, Some(image), &mut self.buf).map_err(|e| e.to_string())?;
        let value = read(self.schema.flat_schema(), &self.buf)?;
        let values = record_values(&value, &self.flat.fields, self.forms)
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|(_, v)| Some(v));
        Ok(Doc { id, values: values.collect() })
    }

    /// What a decoded record does: `key` (None: a record without a key) decoded with a key
    /// schema of `key_fields`, `value` (None: a tombstone) with a value schema of `layout`.
    ///
    /// # Errors
    /// A record of another shape than its schema says, or without a key where one is needed.
    pub(crate) fn record(
        &self,
        key: Option<(&Avro, &[Field])>,
        value: Option<(&Avro, &Layout)>,
    ) -> Result<Change, String> {
        let id = || -> Result<String, String> {
            let (k, fields) = key.ok_or("a row change without a key")?;
            document_id(k, fields, self.forms).map_err(|e| e.to_string())
        };
        let act = match value {
            None => Action::Delete,
            Some((v, l)) => action(Some(v), l, self.forms).map_err(|e| e.to_string())?,
        };
        Ok(match act {
            Action::Truncate => Change::Truncate,
            Action::Delete => Change::Delete(id()?),
            Action::Index(mut doc) => Change::Upsert(Doc {
                id: id()?,
                values: self.columns.iter().map(|c| Some(doc.remove(c).unwrap_or(Json::Null))).collect(),
            }),
        })
    }

    /// The normal form of a document as Elasticsearch returns it (`_id`, `_source`).
    pub(crate) fn source(&self, id: &str, source: Option<&Json>) -> Doc {
        let values =
            self.columns.iter().map(|c| Some(source.and_then(|s| s.get(c)).cloned().unwrap_or(Json::Null))).collect();
        Doc { id: id.to_string(), values }
    }

    /// The SQL literals that select the row of a key record's document (`values` in the key's
    /// column order, as [`record_values`] gives them); None when a key column's type has no
    /// literal here (a FLOAT or a TIME in text).
    pub(crate) fn key_literals(&self, key: &Avro, fields: &[Field]) -> Option<Vec<String>> {
        let values = record_values(key, fields, self.forms).ok()?;
        fields.iter().zip(values).map(|(f, (_, v))| literal(&f.kind, &v)).collect()
    }
}

/// Reads a datum the encoder just wrote.
fn read(schema: &Schema, mut datum: &[u8]) -> Result<Avro, String> {
    apache_avro::from_avro_datum(schema, &mut datum, None).map_err(|e| e.to_string())
}

fn hex(b: &[u8]) -> String {
    b.iter().fold(String::with_capacity(b.len() * 2), |mut s, x| {
        let _ = write!(s, "{x:02X}");
        s
    })
}

/// The SQL literal of a key value in the normal form.
fn literal(kind: &Kind, v: &Json) -> Option<String> {
    Some(match (kind, v) {
        (_, Json::Number(n)) if !matches!(kind, Kind::Time { .. }) => n.to_string(),
        (_, Json::Bool(b)) => u8::from(*b).to_string(),
        (Kind::Binary, Json::String(s)) => {
            format!("X'{}'", hex(&base64::engine::general_purpose::STANDARD.decode(s).ok()?))
        }
        // the text of a date with a zone mark the server does not read
        (Kind::Timestamp { .. }, Json::String(s)) => {
            format!("_utf8mb4 X'{}'", hex(s.trim_end_matches('Z').replace('T', " ").as_bytes()))
        }
        (Kind::DateTime { .. }, Json::String(s)) => format!("_utf8mb4 X'{}'", hex(s.replace('T', " ").as_bytes())),
        (
            Kind::Integer
            | Kind::Long
            | Kind::UnsignedLong
            | Kind::Decimal { .. }
            | Kind::Date
            | Kind::Text
            | Kind::Enum,
            Json::String(s),
        ) => format!("_utf8mb4 X'{}'", hex(s.as_bytes())),
        _ => return None,
    })
}
