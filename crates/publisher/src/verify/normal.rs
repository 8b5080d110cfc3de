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
use crate::elastic::document::{document_id, id_of, record_json, row_of, Forms, Row};
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
    pub values: Vec<Json>,
    /// The columns (indexes into `values`) a record or a document does not carry: what the
    /// table holds there now was never published for this key, so a difference there alone
    /// says the record predates the column (`ALTER TABLE ... ADD COLUMN` since), not that a
    /// change was lost.
    pub lacks: Vec<usize>,
}

impl Doc {
    /// The digest of the values (equal values, equal digests), hashed as they are, without
    /// writing them out.
    pub(crate) fn digest(&self) -> Digest {
        self.digest_lacking(&[])
    }

    /// The digest these values would have without the columns `lacking` (NULL there, as a
    /// record written before they were added reads).
    pub(crate) fn digest_lacking(&self, lacking: &[usize]) -> Digest {
        let mut h = Xxh3::new();
        for (i, v) in self.values.iter().enumerate() {
            hash_json(&mut h, if lacking.contains(&i) { &Json::Null } else { v });
        }
        h.digest128()
    }
}

/// Feeds a JSON value to the hasher, each kind tagged and each variable part length-prefixed.
fn hash_json(h: &mut Xxh3, v: &Json) {
    struct Text<'h>(&'h mut Xxh3);
    impl std::fmt::Write for Text<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.update(s.as_bytes());
            Ok(())
        }
    }
    match v {
        Json::Null => h.update(&[0]),
        Json::Bool(b) => h.update(&[1, u8::from(*b)]),
        Json::Number(n) => {
            // a number's text ends where the next tag starts: no tag is a digit, '-', '.' or 'e'
            h.update(&[2]);
            let _ = write!(Text(h), "{n}");
        }
        Json::String(s) => {
            h.update(&[3]);
            h.update(&(s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
        Json::Array(a) => {
            h.update(&[4]);
            h.update(&(a.len() as u64).to_le_bytes());
            for x in a {
                hash_json(h, x);
            }
        }
        Json::Object(o) => {
            h.update(&[5]);
            h.update(&(o.len() as u64).to_le_bytes());
            for (k, x) in o {
                h.update(&(k.len() as u64).to_le_bytes());
                h.update(k.as_bytes());
                hash_json(h, x);
            }
        }
    }
}

/// What a record does to its key's state.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Change {
    /// The row is now this (`c`, `u`, `r`).
    Upsert(Doc),
    /// The row is now the one whose bytes have this digest (a record written with the table's
    /// schema of now, not decoded).
    UpsertBytes(Digest),
    /// The row is gone (`d`, a tombstone).
    Delete,
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

/// A value schema of the table as a record was written with: its layout, and where each of
/// the compared columns is in it.
pub(crate) struct Writer {
    layout: Layout,
    /// By compared column: its index in the layout's fields (None: not in this version).
    place: Vec<Option<usize>>,
}

impl Writer {
    /// The schema is a flattened value's (else the envelope's).
    pub(crate) fn flattened(&self) -> bool {
        self.layout.flattened
    }
}

/// Hashes digests for a hash map by their low 64 bits: they are hashes already.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BuildDigest;

/// The hasher of [`BuildDigest`].
#[derive(Debug, Default)]
pub(crate) struct DigestHasher(u64);

impl std::hash::BuildHasher for BuildDigest {
    type Hasher = DigestHasher;
    fn build_hasher(&self) -> DigestHasher {
        DigestHasher(0)
    }
}

impl std::hash::Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // not a digest: mix whatever it is
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}

/// What a value record asks of its key.
pub(crate) enum Need {
    /// Its change (a row carries its key's values).
    Change(Change),
    /// A delete: of the key the record's key says.
    Delete,
}

/// Turns a table's rows and its records into [`Doc`]s.
pub(crate) struct Normalizer {
    /// `db.table`.
    pub table: String,
    schema: TableSchema,
    flat: Layout,
    /// The key's columns' indexes in the compared columns.
    key_place: Vec<usize>,
    forms: Forms,
    encoder: AvroEncoder,
    buf: Vec<u8>,
    columns: Vec<String>,
    /// The sets of columns the target's records lack (one per older schema version seen),
    /// numbered from 1 in [`Entry::lacks`](super::topic::Entry::lacks): a kept key then costs
    /// two bytes more, not a list.
    lack_sets: std::sync::Mutex<Vec<Vec<usize>>>,
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
        let columns: Vec<String> = flat.fields.iter().map(|f| f.column.clone()).collect();
        let key_place = key_fields
            .iter()
            .map(|k| columns.iter().position(|c| *c == k.column))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| Keyless::Other(format!("{table}: a key column is not among the row's columns")))?;
        Ok(Normalizer {
            table,
            schema,
            flat,
            key_place,
            forms,
            encoder: AvroEncoder::new(),
            buf: Vec::new(),
            columns,
            lack_sets: std::sync::Mutex::default(),
        })
    }

    /// The columns a target's record or document lacks that may count as added after it:
    /// none when it lacks a key column or every other one (a document written by something else,
    /// an empty `_source`: its missing fields are a difference, not an older schema).
    fn lackable(&self, lacks: impl Iterator<Item = usize>) -> Vec<usize> {
        let lacks: Vec<usize> = lacks.collect();
        let others = self.columns.len().saturating_sub(self.key_place.len());
        if lacks.iter().any(|i| self.key_place.contains(i)) || lacks.len() >= others {
            return Vec::new();
        }
        lacks
    }

    /// The number of the set of columns a target's record lacks (0: none, or more sets than
    /// a number holds: then such a key is re-checked as a suspect).
    pub(crate) fn lack_id(&self, lacks: &[usize]) -> u16 {
        if lacks.is_empty() {
            return 0;
        }
        let mut sets = self.lack_sets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = sets.iter().position(|s| s == lacks).unwrap_or_else(|| {
            sets.push(lacks.to_vec());
            sets.len() - 1
        });
        u16::try_from(at + 1).unwrap_or(0)
    }

    /// The columns a target's record lacks (set `lack_id`) when `row` equals its `digest` in
    /// every other column; None otherwise (or when it lacks none).
    pub(crate) fn predates(&self, row: &Doc, lack_id: u16, digest: Digest) -> Option<Vec<usize>> {
        let set = {
            let sets = self.lack_sets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            sets.get(usize::from(lack_id).checked_sub(1)?)?.clone()
        };
        (row.digest_lacking(&set) == digest).then_some(set)
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
        self.encoder.write_flat(&self.schema, Op::Read, None, Some(image), &mut self.buf).map_err(|e| e.to_string())?;
        let value = read(self.schema.flat_schema(), &self.buf)?;
        let values = record_json(&value, &self.flat.fields, self.forms).map_err(|e| e.to_string())?;
        Ok(Doc { id: self.id(&values), values, lacks: Vec::new() })
    }

    /// The document id of a row's values (its key columns').
    fn id(&self, values: &[Json]) -> String {
        let key: Vec<&Json> = self.key_place.iter().filter_map(|&i| values.get(i)).collect();
        id_of(&key)
    }

    /// The table's value schema `layout` as a record was written with it.
    pub(crate) fn writer(&self, layout: Layout) -> Writer {
        let place = self.columns.iter().map(|c| layout.fields.iter().position(|f| f.column == *c)).collect();
        Writer { layout, place }
    }

    /// What a value record (decoded with `writer`'s schema) does.
    ///
    /// # Errors
    /// A record of another shape than its schema says, or a value that cannot be written.
    pub(crate) fn value(&self, value: &Avro, writer: &Writer) -> Result<Need, String> {
        Ok(match row_of(Some(value), &writer.layout).map_err(|e| e.to_string())? {
            Row::Truncate => Need::Change(Change::Truncate),
            Row::Delete => Need::Delete,
            Row::Written(row) => {
                let mut json = record_json(row, &writer.layout.fields, self.forms).map_err(|e| e.to_string())?;
                let values: Vec<Json> = writer
                    .place
                    .iter()
                    .map(|p| p.and_then(|i| json.get_mut(i)).map(Json::take).unwrap_or(Json::Null))
                    .collect();
                let lacks = self.lackable(writer.place.iter().enumerate().filter(|(_, p)| p.is_none()).map(|(i, _)| i));
                Need::Change(Change::Upsert(Doc { id: self.id(&values), values, lacks }))
            }
        })
    }

    /// The digests of a table row's key bytes (its identity in a topic) and row bytes, as
    /// the pipeline's encoder writes them: no decoding.
    ///
    /// # Errors
    /// A value the table's schema cannot hold (named by column).
    pub(crate) fn row_bytes<'v>(&mut self, values: &mut Vec<Option<Value<'v>>>) -> Result<(Digest, Digest), String> {
        let key = self.key_digest(values)?;
        let image = RowImage { values: std::mem::take(values) };
        self.buf.clear();
        let row = self.encoder.write_row(&self.schema, &image, &mut self.buf).map(|()| (key, xxh3_128(&self.buf)));
        *values = image.values;
        row.map_err(|e| e.to_string())
    }

    /// The digest of a row's key bytes (its identity in a topic); only the key columns'
    /// values are needed.
    ///
    /// # Errors
    /// A key value the table's schema cannot hold.
    pub(crate) fn key_digest<'v>(&mut self, values: &mut Vec<Option<Value<'v>>>) -> Result<Digest, String> {
        let image = RowImage { values: std::mem::take(values) };
        self.buf.clear();
        let key = self.encoder.write_key(&self.schema, &image, &mut self.buf).map(|_| xxh3_128(&self.buf));
        *values = image.values;
        key.map_err(|e| e.to_string())
    }

    /// True when a record's value schema is the table's schema of now (its rows' bytes then
    /// compare as they are).
    pub(crate) fn is_current(&self, writer: &Schema) -> bool {
        let w = writer.canonical_form();
        w == self.schema.value_schema().canonical_form() || w == self.schema.flat_schema().canonical_form()
    }

    /// What a value datum (unframed) written with the table's schema of now does, read by its
    /// bytes: None when it is not such a datum (then it is decoded).
    pub(crate) fn value_bytes(&self, datum: &[u8], flattened: bool) -> Option<Change> {
        let s = &self.schema;
        if flattened {
            let n = s.row_len(datum)?;
            let mut rest = datum.get(n..)?;
            let op = TableSchema::read_str(&mut rest)?;
            let deleted = *rest.first()? != 0;
            return Some(match (op, deleted) {
                ("t", _) => Change::Truncate,
                (_, true) => Change::Delete,
                _ => Change::UpsertBytes(xxh3_128(datum.get(..n)?)),
            });
        }
        let mut d = datum;
        let image = |d: &mut &[u8]| -> Option<Option<Digest>> {
            match TableSchema::read_long(d)? {
                0 => Some(None),
                1 => {
                    let n = s.row_len(d)?;
                    let digest = xxh3_128(d.get(..n)?);
                    *d = d.get(n..)?;
                    Some(Some(digest))
                }
                _ => None,
            }
        };
        let _before = image(&mut d)?;
        let after = image(&mut d)?;
        Some(match TableSchema::read_str(&mut d)? {
            "d" => Change::Delete,
            "t" => Change::Truncate,
            _ => Change::UpsertBytes(after?),
        })
    }

    /// The document id of a key record (decoded with a key schema of `fields`).
    ///
    /// # Errors
    /// A key value that cannot be written.
    pub(crate) fn key_id(&self, key: &Avro, fields: &[Field]) -> Result<String, String> {
        document_id(key, fields, self.forms).map_err(|e| e.to_string())
    }

    /// The normal form of a document as Elasticsearch returns it (`_id`, `_source`).
    pub(crate) fn source(&self, id: &str, source: Option<&Json>) -> Doc {
        let values =
            self.columns.iter().map(|c| source.and_then(|s| s.get(c)).cloned().unwrap_or(Json::Null)).collect();
        let lacks = match source {
            Some(s) => self
                .lackable(self.columns.iter().enumerate().filter(|(_, c)| s.get(c.as_str()).is_none()).map(|(i, _)| i)),
            None => Vec::new(),
        };
        Doc { id: id.to_string(), values, lacks }
    }

    /// The SQL literals that select the row of a key record's document (`values` in the key's
    /// column order, as [`record_json`] gives them); None when a key column's type has no
    /// literal here (a FLOAT or a TIME in text).
    pub(crate) fn key_literals(&self, key: &Avro, fields: &[Field]) -> Option<Vec<String>> {
        let values = record_json(key, fields, self.forms).ok()?;
        fields.iter().zip(values).map(|(f, v)| literal(&f.kind, &v)).collect()
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
