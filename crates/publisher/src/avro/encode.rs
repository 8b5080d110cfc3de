//! Row images to Avro datum bytes.
//!
//! Every conversion from a [`sluice_binlog::Value`] to Avro is in [`AvroEncoder::field`]; the
//! field's [`FieldPlan`] (made with the schema) says which branch of which union it takes.
//! Two ways lead there: from a decoded [`RowImage`] (`write_key`, `write_value`, ...), and
//! value by value as the decoder reads them ([`RowWriter`], the record path's usual way).

#[cfg(test)]
use apache_avro::types::Value as Avro;
#[cfg(any(test, debug_assertions))]
use apache_avro::Schema;
use sluice_binlog::charset::{ascii_compatible, decode_text};
use sluice_binlog::decimal::UNSCALED_BE_MAX;
use sluice_binlog::rows::{ImageVisitor, RowImage};
use sluice_binlog::Value;

use sluice_binlog::Column;
use sluice_protocol::Reader;

use super::binary as w;
use super::field::{FieldPlan, Kind};
use super::fused::{all_ascii, Fused};
use super::schema::TableSchema;
use super::schema::{DELETED_FIELD, OP_FIELD};
use super::{AvroError, Result};

/// What a change did: the envelope's `op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// An INSERT: `c`.
    Create,
    /// An UPDATE: `u`.
    Update,
    /// A DELETE: `d`.
    Delete,
    /// A row read by a snapshot: `r`.
    Read,
    /// Every row of the table is gone (TRUNCATE, DROP TABLE): `t`, a record without a key or
    /// row images on every partition of the table's topic.
    Truncate,
}

impl Op {
    /// The one-letter code.
    pub fn code(self) -> &'static str {
        match self {
            Op::Create => "c",
            Op::Update => "u",
            Op::Delete => "d",
            Op::Read => "r",
            Op::Truncate => "t",
        }
    }
}

/// The server flavour, for `source.connector`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connector {
    /// Oracle MySQL.
    Mysql,
    /// MariaDB.
    Mariadb,
}

impl Connector {
    /// `mysql` or `mariadb`.
    pub fn name(self) -> &'static str {
        match self {
            Connector::Mysql => "mysql",
            Connector::Mariadb => "mariadb",
        }
    }
}

/// `source.snapshot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Snapshot {
    /// A streamed change: `false`.
    #[default]
    No,
    /// A snapshot row: `true`.
    Yes,
    /// The first snapshot row: `first`.
    First,
    /// The last snapshot row: `last`.
    Last,
}

impl Snapshot {
    fn text(self) -> &'static str {
        match self {
            Snapshot::No => "false",
            Snapshot::Yes => "true",
            Snapshot::First => "first",
            Snapshot::Last => "last",
        }
    }
}

/// Where a change came from: the envelope's `source` (database and table come from the
/// [`TableSchema`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceInfo {
    /// Server flavour.
    pub connector: Connector,
    /// The configured source name.
    pub name: String,
    /// `server_id` from the event header.
    pub server_id: u32,
    /// Event time from the header, ms since the epoch.
    pub ts_ms: i64,
    /// Binlog file name.
    pub file: String,
    /// Offset of the rows event.
    pub pos: u64,
    /// Index of the row in its rows event.
    pub row: u32,
    /// GTID of the transaction, as text.
    pub gtid: Option<String>,
    /// Snapshot marker.
    pub snapshot: Snapshot,
}

/// The envelope's `transaction` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionInfo {
    /// GTID, or `file:pos` of the transaction's first event.
    pub id: String,
    /// This change's place among all changes of the transaction, from 1.
    pub total_order: i64,
    /// This change's place among the transaction's changes to this table, from 1.
    pub data_collection_order: i64,
}

/// Everything of an envelope that is not a row image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventContext {
    /// The `source` block.
    pub source: SourceInfo,
    /// The `transaction` block (None: null).
    pub transaction: Option<TransactionInfo>,
    /// Processing time, ms since the epoch.
    pub ts_ms: i64,
}

/// The bytes of an envelope that every row of one rows event shares, written once for the
/// event and copied into each of its records: `ts_ms` and `source` up to `row`, then `source`
/// from `gtid` on and `transaction` up to its counters. Writing them field by field, a dozen
/// small writes, took 4% of the pipeline's CPU per record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeParts {
    head: Vec<u8>,
    tail: Vec<u8>,
    transaction: bool,
}

impl EnvelopeParts {
    /// The parts of `ctx`'s records of `database.table`. Only `ctx.source.row` and the
    /// transaction's counters may change between records written with them.
    pub fn new(ctx: &EventContext, database: &str, table: &str) -> EnvelopeParts {
        let (mut head, mut tail) = (Vec::with_capacity(64), Vec::with_capacity(64));
        envelope_head(ctx, &mut head);
        envelope_tail(ctx, database, table, &mut tail);
        EnvelopeParts { head, tail, transaction: ctx.transaction.is_some() }
    }

    /// The bytes of the parts: with the row's counters (at most 30), all of an envelope but
    /// its images.
    pub fn encoded_len(&self) -> usize {
        self.head.len() + self.tail.len()
    }
}

/// The envelope after its images: `op`, `ts_ms`, `source`, `transaction` (with `parts`, the
/// bytes they hold for `ctx` are copied rather than written).
fn envelope_rest(
    op: Op,
    database: &str,
    table: &str,
    ctx: &EventContext,
    parts: Option<&EnvelopeParts>,
    out: &mut Vec<u8>,
) {
    w::string(op.code(), out);
    match parts {
        Some(p) => out.extend_from_slice(&p.head),
        None => envelope_head(ctx, out),
    }
    w::long(i64::from(i32::try_from(ctx.source.row).unwrap_or(i32::MAX)), out);
    match parts {
        Some(p) => {
            debug_assert_eq!(p.transaction, ctx.transaction.is_some(), "envelope parts of another context");
            out.extend_from_slice(&p.tail);
        }
        None => envelope_tail(ctx, database, table, out),
    }
    if let Some(t) = &ctx.transaction {
        w::long(t.total_order, out);
        w::long(t.data_collection_order, out);
    }
}

/// `ts_ms`, then schemas/source.avsc field by field up to `row`.
fn envelope_head(ctx: &EventContext, out: &mut Vec<u8>) {
    w::long(ctx.ts_ms, out);
    let s = &ctx.source;
    w::string(env!("CARGO_PKG_VERSION"), out);
    w::string(s.connector.name(), out);
    w::string(&s.name, out);
    w::long(i64::from(s.server_id), out);
    w::long(s.ts_ms, out);
    w::string(&s.file, out);
    w::long(i64::try_from(s.pos).unwrap_or(i64::MAX), out);
}

/// schemas/source.avsc after `row`, then schemas/transaction.avsc (in a union [null,
/// Transaction]) up to its counters.
fn envelope_tail(ctx: &EventContext, database: &str, table: &str, out: &mut Vec<u8>) {
    let s = &ctx.source;
    match s.gtid.as_deref() {
        Some(g) => {
            w::long(1, out);
            w::string(g, out);
        }
        None => w::long(0, out),
    }
    w::string(database, out);
    w::string(table, out);
    w::string(s.snapshot.text(), out);
    match &ctx.transaction {
        Some(t) => {
            w::long(1, out);
            w::string(&t.id, out);
        }
        None => w::long(0, out),
    }
}

/// A lower bound of the bytes `image`'s values take in any record: the lengths of its binary
/// values (BLOB, BINARY, GEOMETRY, VECTOR) and of its text, counted as the fewest UTF-8 bytes
/// the column's character set can become (a UTF-16 text may halve, a UTF-32 one quarter).
/// Cheap (no value is converted), so a row too large for Kafka is refused before its record is
/// built: a 1 GiB BLOB never costs another gigabyte of Avro.
pub fn min_encoded_len(image: &RowImage<'_>) -> usize {
    use sluice_binlog::charset::{charset_of, Charset};
    image
        .values
        .iter()
        .flatten()
        .map(|v| match v {
            Value::Bytes(b) => b.len(),
            Value::Geometry { wkb, .. } => wkb.len(),
            Value::Vector(b) => b.len(),
            Value::Text { bytes, collation } => {
                let shrink = match collation.and_then(charset_of) {
                    Some(Charset::Utf32) | None => 4,
                    Some(Charset::Ucs2 | Charset::Utf16 | Charset::Utf16le) => 2,
                    Some(_) => 1,
                };
                bytes.len() / shrink
            }
            _ => 0,
        })
        .sum()
}

/// Writes row images as Avro datums of a [`TableSchema`]'s schemas: the binary encoding
/// straight into the caller's buffer, with no intermediate value tree (no allocation per field).
///
/// Debug builds (and so every test, the end-to-end ones included) read each datum back with
/// apache-avro under its schema, and write that reading again with apache-avro: both must
/// consume and give exactly Sluice's bytes.
#[derive(Debug, Default, Clone)]
pub struct AvroEncoder {}

impl AvroEncoder {
    /// An encoder.
    pub fn new() -> AvroEncoder {
        AvroEncoder {}
    }

    /// Appends the key record of a row image; false (nothing written) for tables without a
    /// key (a null key).
    ///
    /// # Errors
    /// [`AvroError::AbsentColumn`] when the image lacks a key column; conversion errors as
    /// [`AvroEncoder::write_value`].
    pub fn write_key(&self, schema: &TableSchema, image: &RowImage<'_>, out: &mut Vec<u8>) -> Result<bool> {
        let (Some(key), Some(_key_schema)) = (&schema.key, schema.key_schema()) else { return Ok(false) };
        #[cfg(debug_assertions)]
        let start = out.len();
        for f in key {
            match image.values.get(f.column).and_then(Option::as_ref) {
                Some(v) => self.field(schema, f, v, out)?,
                None => return Err(absent_column(schema, f, "key")),
            }
        }
        #[cfg(debug_assertions)]
        check_datum(schema, _key_schema, out.get(start..).unwrap_or_default());
        Ok(true)
    }

    /// Appends the value envelope of a change.
    ///
    /// `before` is required for updates and deletes, `after` for creates, updates and reads.
    /// `parts`: the envelope's bytes for `ctx` written beforehand (see [`EnvelopeParts`]), or
    /// none to write them here.
    ///
    /// # Errors
    /// [`AvroError::Images`] when the images do not fit `op`; [`AvroError::Text`] for text
    /// invalid in its charset; [`AvroError::TypeMismatch`], [`AvroError::NullInNotNull`],
    /// [`AvroError::EnumIndex`], [`AvroError::SetBits`], [`AvroError::PartialJson`],
    /// [`AvroError::AbsentColumn`] for values the schema cannot hold. `out` then holds a
    /// partial datum: the caller discards it.
    #[allow(clippy::too_many_arguments)]
    pub fn write_value(
        &self,
        schema: &TableSchema,
        op: Op,
        before: Option<&RowImage<'_>>,
        after: Option<&RowImage<'_>>,
        ctx: &EventContext,
        parts: Option<&EnvelopeParts>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        check_images(schema, op, before, after)?;
        #[cfg(debug_assertions)]
        let start = out.len();
        // {before, after, op, ts_ms, source, transaction}; the images are unions [null, row]
        for (image, which) in [(before, "before"), (after, "after")] {
            match image {
                Some(img) => {
                    w::long(1, out);
                    self.row(schema, img, which, out)?;
                }
                None => w::long(0, out),
            }
        }
        envelope_rest(op, &schema.database, &schema.table, ctx, parts, out);
        #[cfg(debug_assertions)]
        check_datum(schema, schema.value_schema(), out.get(start..).unwrap_or_default());
        Ok(())
    }

    /// Appends the envelope of a truncate (`op = "t"`) of `database.table`: no row images, the
    /// `source` and `transaction` blocks of `ctx`. It fits the envelope schema of every version
    /// of the table (the images are null).
    pub fn write_truncate(&self, database: &str, table: &str, ctx: &EventContext, out: &mut Vec<u8>) {
        w::long(0, out);
        w::long(0, out);
        envelope_rest(Op::Truncate, database, table, ctx, None, out);
    }

    /// Appends the flattened value of a change: the after image (the before image for
    /// deletes) plus `__op` and `__deleted`.
    ///
    /// # Errors
    /// As [`AvroEncoder::write_value`].
    pub fn write_flat(
        &self,
        schema: &TableSchema,
        op: Op,
        before: Option<&RowImage<'_>>,
        after: Option<&RowImage<'_>>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        check_images(schema, op, before, after)?;
        let (img, which) = match (op, after, before) {
            (Op::Delete, _, Some(b)) => (b, "before"),
            (_, Some(a), _) => (a, "after"),
            _ => {
                return Err(AvroError::Images { table: schema.qualified.clone(), op: op.code(), needs: "a row image" })
            }
        };
        #[cfg(debug_assertions)]
        let start = out.len();
        self.row(schema, img, which, out)?;
        // OP_FIELD, DELETED_FIELD
        w::string(op.code(), out);
        w::boolean(op == Op::Delete, out);
        #[cfg(debug_assertions)]
        check_datum(schema, schema.flat_schema(), out.get(start..).unwrap_or_default());
        Ok(())
    }

    /// Appends a row image alone, as the envelope's `after` and the flattened value hold it
    /// (`sluice verify` digests rows by these bytes).
    ///
    /// # Errors
    /// As [`AvroEncoder::write_value`].
    pub fn write_row(&self, schema: &TableSchema, image: &RowImage<'_>, out: &mut Vec<u8>) -> Result<()> {
        self.row(schema, image, "after", out)
    }

    /// Appends the flattened value of a truncate, for the table's registered flattened
    /// schema `schema` (any version): `__op = "t"`, `__deleted = true`, and every column at its
    /// type's zero (null where nullable), which no consumer is to read as a row: the record has
    /// no key.
    ///
    /// # Errors
    /// A schema that is not a record.
    pub fn write_flat_truncate(&self, table: &str, schema: &apache_avro::Schema, out: &mut Vec<u8>) -> Result<()> {
        use apache_avro::Schema as S;
        let S::Record(record) = schema else {
            return Err(AvroError::ForeignSchema { table: table.to_string(), why: "not a record".into() });
        };
        if !record.fields.iter().any(|f| f.name == OP_FIELD) {
            return Err(AvroError::ForeignSchema { table: table.to_string(), why: format!("no {OP_FIELD} field") });
        }
        for f in &record.fields {
            match f.name.as_str() {
                OP_FIELD => w::string(Op::Truncate.code(), out),
                DELETED_FIELD => w::boolean(true, out),
                _ => zero(&f.schema, out),
            }
        }
        Ok(())
    }

    /// The fields of a row record: one per column, then `__absent` (partial images).
    fn row(&self, schema: &TableSchema, img: &RowImage<'_>, which: &'static str, out: &mut Vec<u8>) -> Result<()> {
        let mut absent: Vec<&str> = Vec::new();
        for f in &schema.fields {
            match img.values.get(f.column).and_then(Option::as_ref) {
                Some(v) => self.field(schema, f, v, out)?,
                None if schema.partial_images && f.nullable => {
                    absent.push(&f.name);
                    w::long(0, out);
                }
                None => return Err(absent_column(schema, f, which)),
            }
        }
        if schema.partial_images {
            if !absent.is_empty() {
                w::count(absent.len(), out);
                for name in absent {
                    w::string(name, out);
                }
            }
            w::long(0, out);
        }
        Ok(())
    }

    /// One column value as the field's Avro encoding, union branch included: **where a column
    /// value becomes Avro**. Each arm checks the value against the field's kind before writing
    /// anything, so the union branch it writes is the one the value takes.
    #[inline(never)] // out of line for the decoded images; `RowWriter` inlines `field_inline`
    pub(super) fn field(&self, schema: &TableSchema, f: &FieldPlan, v: &Value<'_>, out: &mut Vec<u8>) -> Result<()> {
        self.field_inline(schema, f, v, out)
    }

    /// [`AvroEncoder::field`]'s body, inlined into [`RowWriter`]'s visit of each value.
    #[inline(always)]
    fn field_inline(&self, schema: &TableSchema, f: &FieldPlan, v: &Value<'_>, out: &mut Vec<u8>) -> Result<()> {
        // the branch index of the value's own type (nothing when the field is no union): 0
        // or 1 (`FieldPlan::value_branch`), whose zig-zag varint is the byte 0 or 2, written as
        // that byte: through `long` the record path took 5% more instructions (measured)
        let head = |out: &mut Vec<u8>| {
            if f.is_union() {
                out.push(2 * u8::from(f.nullable));
            }
        };
        let zero = |text: String, out: &mut Vec<u8>| zero_date(schema, f, text, out);
        let int = |n: i64| -> Result<i64> {
            i32::try_from(n).map(i64::from).map_err(|_| mismatch(schema, f, format!("{n}, beyond int")))
        };
        match (&f.kind, v) {
            (_, Value::Null) => {
                if f.sql_nullable && f.nullable {
                    w::long(0, out);
                } else {
                    return Err(AvroError::NullInNotNull {
                        table: schema.qualified.clone(),
                        column: f.original.to_string(),
                    });
                }
            }
            (Kind::Int, Value::Int(n)) => {
                let n = int(*n)?;
                head(out);
                w::long(n, out);
            }
            (Kind::Int, Value::UInt(n)) => {
                let n = int(i64::try_from(*n).unwrap_or(i64::MAX))?;
                head(out);
                w::long(n, out);
            }
            (Kind::Long, Value::Int(n)) => {
                head(out);
                w::long(*n, out);
            }
            (Kind::Long, Value::UInt(n)) => {
                let n = i64::try_from(*n).map_err(|_| mismatch(schema, f, format!("{n}, beyond long")))?;
                head(out);
                w::long(n, out);
            }
            (Kind::U64Decimal, Value::UInt(n)) => {
                head(out);
                w::bytes(u64_unscaled(*n, &mut [0; 9]), out);
            }
            (Kind::Float, Value::Float(x)) => {
                head(out);
                w::float(*x, out);
            }
            (Kind::Double, Value::Double(x)) => {
                head(out);
                w::double(*x, out);
            }
            (Kind::Decimal { scale }, Value::Decimal(d)) => {
                if d.scale() != *scale {
                    return Err(mismatch(schema, f, format!("{d} with scale {}", d.scale())));
                }
                head(out);
                match d.unscaled_i64() {
                    Some(v) => w::decimal_i64(v, out),
                    None => w::bytes(d.unscaled_be(&mut [0; UNSCALED_BE_MAX]), out),
                }
            }
            (Kind::Year, Value::Year(y)) => {
                head(out);
                w::long(i64::from(*y), out);
            }
            (Kind::Date, Value::Date(d)) => match d.days_since_epoch() {
                Some(days) => {
                    head(out);
                    w::long(i64::from(days), out);
                }
                None => zero(d.to_string(), out)?,
            },
            (Kind::Time, Value::Time(t)) => {
                head(out);
                w::long(t.to_micros(), out);
            }
            (Kind::DateTime, Value::DateTime(dt)) => match dt.micros_since_epoch_local() {
                Some(us) => {
                    head(out);
                    w::long(us, out);
                }
                None => zero(dt.to_string(), out)?,
            },
            (Kind::Timestamp, Value::Timestamp(ts)) => {
                if ts.is_zero() {
                    zero(ts.to_utc().to_string(), out)?;
                } else {
                    head(out);
                    w::long(ts.micros(), out);
                }
            }
            // most text is ASCII, which in any charset where ASCII is ASCII is its own UTF-8:
            // one scan instead of the charset's decoder (a tenth of the pipeline's decoding)
            (Kind::Text, Value::Text { bytes, collation }) if all_ascii(bytes) && ascii_compatible(*collation) => {
                head(out);
                w::bytes(bytes, out);
            }
            (Kind::Text, Value::Text { bytes, collation }) => {
                let s = decode_text(bytes, *collation).map_err(|source| AvroError::Text {
                    table: schema.qualified.clone(),
                    column: f.original.to_string(),
                    source,
                })?;
                head(out);
                w::string(&s, out);
            }
            (Kind::Json, Value::Json(j)) => {
                head(out);
                w::string(&j.to_string(), out);
            }
            (Kind::Json, Value::JsonDiff(_)) => {
                return Err(AvroError::PartialJson { table: schema.qualified.clone(), column: f.original.to_string() })
            }
            (Kind::Bytes, Value::Bytes(b)) => {
                head(out);
                w::bytes(b, out);
            }
            (Kind::Enum { names }, Value::Enum(i)) => match usize::from(*i).checked_sub(1).filter(|&p| p < names.len())
            {
                Some(p) => {
                    head(out);
                    w::count(p, out);
                }
                None => {
                    return Err(enum_err(
                        schema,
                        f,
                        *i,
                        names.len(),
                        " (set output.enums_as_strings = true to publish it as \"\")",
                    ))
                }
            },
            (Kind::EnumString { names }, Value::Enum(i)) => {
                let name = match usize::from(*i) {
                    0 => "",
                    n => match names.get(n - 1) {
                        Some(name) => name,
                        None => return Err(enum_err(schema, f, *i, names.len(), "")),
                    },
                };
                head(out);
                w::string(name, out);
            }
            (Kind::Set { names }, Value::Set(mask)) => {
                if names.len() < 64 && mask >> names.len() != 0 {
                    return Err(AvroError::SetBits {
                        table: schema.qualified.clone(),
                        column: f.original.to_string(),
                        mask: *mask,
                        members: names.len(),
                    });
                }
                head(out);
                let members = || names.iter().enumerate().filter(|&(bit, _)| mask >> bit & 1 == 1);
                let n = members().count();
                if n > 0 {
                    w::count(n, out);
                    for (_, name) in members() {
                        w::string(name, out);
                    }
                }
                w::long(0, out);
            }
            (Kind::Bool, Value::Bit { value, .. }) => {
                head(out);
                w::boolean(*value != 0, out);
            }
            (Kind::Bits { bytes }, Value::Bit { value, .. }) => {
                let be = value.to_be_bytes();
                head(out);
                w::bytes(be.get(be.len().saturating_sub(*bytes)..).unwrap_or(&be), out);
            }
            (Kind::Geometry, Value::Geometry { srid, wkb }) => {
                head(out);
                w::long(i64::from(*srid), out);
                w::bytes(wkb, out);
            }
            (Kind::Vector, Value::Vector(b)) => {
                // MySQL stores little-endian IEEE floats, which is also Avro's float encoding
                head(out);
                let n = b.len() / 4;
                if n > 0 {
                    w::count(n, out);
                    out.extend_from_slice(b.get(..n * 4).unwrap_or_default());
                }
                w::long(0, out);
            }
            (_, other) => return Err(mismatch(schema, f, describe(other))),
        }
        Ok(())
    }
}

/// Writes a row change's images as Avro while the decoder reads them: each value goes into its
/// field's bytes as soon as it is decoded ([`RowsIter::next_with`]), the commonest straight from
/// their bytes ([`super::fused`]), and no image of values is stored and read back. The envelope
/// is then put together from the images' bytes ([`RowWriter::write_value`]): the same bytes
/// [`AvroEncoder::write_value`] writes from decoded images (a test compares both ways record by
/// record over every test file, and `record_path --compare` over the benchmark's 1.5 M
/// records). 3,710 instructions per row change against 6,271 through the values (`make
/// bench-instructions`, 2026-12-07).
///
/// For full images only (each image holds every column, [`RowsEvent::full_images`]) of a
/// table whose key fields come in column order ([`RowWriter::new`] says); the values' way
/// serves the rest.
///
/// [`RowsIter::next_with`]: sluice_binlog::rows::RowsIter::next_with
/// [`RowsEvent::full_images`]: sluice_binlog::rows::RowsEvent::full_images
#[derive(Debug)]
pub struct RowWriter<'a> {
    encoder: &'a AvroEncoder,
    schema: &'a TableSchema,
    /// Each column's value and key field ([`TableSchema`]'s map).
    columns: &'a [[u32; 2]],
    /// Each column's one-step writer, where it has one ([`TableSchema`]'s).
    fused: &'a [Option<Fused>],
    /// The key's fields (none for a table without a key).
    key_fields: &'a [FieldPlan],
    /// The image being written is the before image.
    before: bool,
    /// The change has two images: the before image's bytes were moved aside for the after
    /// image's (`RowBuffers::before_row`, `before_key`).
    split: bool,
    bufs: RowBuffers,
    /// The first value of the change that did not fit its key field, in the before and in the
    /// after image, and its value field (either image): kept apart to be reported in the order
    /// the values' way meets them (keys first, as `Out::change` writes the key records first).
    /// Allocated at the first error only (the writer stays small, and errors are rare).
    errors: Option<Box<ChangeErrors>>,
}

/// See [`RowWriter::check`].
#[derive(Debug, Default)]
struct ChangeErrors {
    key_before: Option<AvroError>,
    key_after: Option<AvroError>,
    value: Option<AvroError>,
}

impl ChangeErrors {
    #[cold]
    #[inline(never)]
    fn keep(errors: &mut Option<Box<ChangeErrors>>, key: bool, before: bool, e: AvroError) {
        let errors = errors.get_or_insert_with(Box::default);
        let slot = match (key, before) {
            (true, true) => &mut errors.key_before,
            (true, false) => &mut errors.key_after,
            (false, _) => &mut errors.value,
        };
        slot.get_or_insert(e);
    }
}

/// A [`RowWriter`]'s buffers, kept from event to event: the row record and key record of the
/// image being written, and of an UPDATE's before image once its after image begins. Each value
/// goes to `row` and `key` without asking which image it is of (asked per value, that choice
/// cost 2% of the record path's instructions).
#[derive(Debug, Default)]
pub struct RowBuffers {
    row: Vec<u8>,
    key: Vec<u8>,
    before_row: Vec<u8>,
    before_key: Vec<u8>,
}

impl RowBuffers {
    fn clear(&mut self) {
        self.row.clear();
        self.key.clear();
        self.before_row.clear();
        self.before_key.clear();
    }
}

impl<'a> RowWriter<'a> {
    /// A writer of one rows event's rows of `schema` (all changes of one kind: an image after
    /// a before image is the same change's), taking `bufs` (given back by [`RowWriter::into_buffers`]);
    /// None, leaving `bufs`, when the table's key fields are not in column order (the values'
    /// way then).
    pub fn new(encoder: &'a AvroEncoder, schema: &'a TableSchema, bufs: &mut RowBuffers) -> Option<RowWriter<'a>> {
        let columns = schema.fields_of_column.as_deref()?;
        let key_fields = schema.key.as_deref().unwrap_or_default();
        Some(RowWriter {
            encoder,
            schema,
            columns,
            fused: &schema.fused,
            key_fields,
            before: false,
            split: false,
            bufs: std::mem::take(bufs),
            errors: None,
        })
    }

    /// The writer for the rows of an event of `columns` (its table map's): the one-step
    /// writers ([`super::fused`]) only where the schema's were made for these very columns (the
    /// pipeline builds a table's schema anew for a table map that differs; should one not, its
    /// values take the long way, which checks each against its field).
    pub fn fitted(mut self, columns: &[Column]) -> RowWriter<'a> {
        if !super::fused::fits(self.fused, columns) {
            self.fused = &[];
        }
        self
    }

    /// The buffers back, for the next event.
    pub fn into_buffers(self) -> RowBuffers {
        self.bufs
    }

    /// The error the values' way gives for the change just read, if a value of it does not
    /// fit its field: a key column's of the before image, then of the after image, then the
    /// first column's in the before image and in the after image (as [`AvroEncoder::write_key`]
    /// and [`AvroEncoder::write_value`] meet them). Clears them for the next change.
    ///
    /// # Errors
    /// That value's error.
    pub fn check(&mut self) -> Result<()> {
        let Some(errors) = self.errors.take() else { return Ok(()) };
        let ChangeErrors { key_before, key_after, value } = *errors;
        key_before.or(key_after).or(value).map_or(Ok(()), Err)
    }

    /// The key record's datum of the before (or after) image; None for a table without a key.
    pub fn key(&self, before: bool) -> Option<&[u8]> {
        let _key_schema = self.schema.key_schema()?;
        let key = if before && self.split { &self.bufs.before_key } else { &self.bufs.key };
        #[cfg(debug_assertions)]
        check_datum(self.schema, _key_schema, key);
        Some(key)
    }

    /// Bytes of the images' and keys' Avro of the change just read.
    pub fn written_len(&self) -> usize {
        let b = &self.bufs;
        b.row.len() + b.key.len() + b.before_row.len() + b.before_key.len()
    }

    /// Appends the envelope of the change just read as `op`, with its before and (or) after
    /// image as `before`, `after` say: the bytes [`AvroEncoder::write_value`] writes for the
    /// same images (an UPDATE that changes the key is a delete with the before image and a
    /// create with the after image).
    pub fn write_value(
        &self,
        op: Op,
        before: bool,
        after: bool,
        ctx: &EventContext,
        parts: Option<&EnvelopeParts>,
        out: &mut Vec<u8>,
    ) {
        let schema = self.schema;
        #[cfg(debug_assertions)]
        let start = out.len();
        let before_row = if self.split { &self.bufs.before_row } else { &self.bufs.row };
        for (present, row) in [(before, before_row), (after, &self.bufs.row)] {
            if present {
                w::long(1, out);
                out.extend_from_slice(row);
                if schema.partial_images {
                    // `__absent`: a full image leaves nothing out
                    w::long(0, out);
                }
            } else {
                w::long(0, out);
            }
        }
        envelope_rest(op, &schema.database, &schema.table, ctx, parts, out);
        #[cfg(debug_assertions)]
        check_datum(schema, schema.value_schema(), out.get(start..).unwrap_or_default());
    }

    #[inline(always)]
    fn write(&mut self, column: usize, value: &Value<'_>) {
        let (schema, encoder, before) = (self.schema, self.encoder, self.before);
        let (row, key) = (&mut self.bufs.row, &mut self.bufs.key);
        // NO_FIELD is out of range of both lists
        let Some(&[field, key_field]) = self.columns.get(column) else { return };
        if let Some(f) = schema.fields.get(field as usize) {
            if let Err(e) = encoder.field_inline(schema, f, value, row) {
                ChangeErrors::keep(&mut self.errors, false, before, e);
            }
        }
        if let Some(f) = self.key_fields.get(key_field as usize) {
            if let Err(e) = encoder.field_inline(schema, f, value, key) {
                ChangeErrors::keep(&mut self.errors, true, before, e);
            }
        }
    }
}

impl<'r> ImageVisitor<'r> for RowWriter<'_> {
    fn image(&mut self, before: bool) {
        let b = &mut self.bufs;
        if !before && self.before {
            // an UPDATE's after image: its before image's bytes move aside
            std::mem::swap(&mut b.row, &mut b.before_row);
            std::mem::swap(&mut b.key, &mut b.before_key);
            b.row.clear();
            b.key.clear();
            self.split = true;
        } else {
            // a change's first image: nothing of an earlier change or event stays
            b.clear();
            self.split = false;
        }
        self.before = before;
    }

    // inlined into the decoder's walk: out of line it cost 6% more per row change
    #[inline(always)]
    fn value(&mut self, column: usize, value: &Value<'r>) {
        self.write(column, value);
    }

    // the commonest values go from their bytes to Avro in one step (`super::fused`), a run of
    // columns at a time, the image's cursor kept in registers between them
    #[inline(always)]
    fn raw_run(&mut self, from: usize, columns: &[Column], nulls: &[u8], r: &mut Reader<'r>) -> usize {
        let (row, key) = (&mut self.bufs.row, &mut self.bufs.key);
        let mut c = *r;
        let mut i = from;
        // (`fitted` checked the plan against these columns once for the event)
        let plan = self.fused.get(from..columns.len()).unwrap_or_default();
        // the NULL bitmap of a table of up to 64 columns in one word (a bounds-checked byte per
        // value cost 1.5% of the record path)
        let word = nulls.first_chunk::<8>().map(|w| u64::from_le_bytes(*w)).or_else(|| {
            let mut w = [0u8; 8];
            w.get_mut(..nulls.len())?.copy_from_slice(nulls);
            Some(u64::from_le_bytes(w))
        });
        for f in plan {
            let Some(f) = f else { break };
            let null = match word {
                Some(w) if i < 64 => w >> i & 1 != 0,
                _ => nulls.get(i / 8).is_some_and(|b| b >> (i % 8) & 1 != 0),
            };
            let done = if null { f.write_null(row, key) } else { f.write(&mut c, row, key) };
            if !done {
                break;
            }
            i += 1;
        }
        *r = c;
        i
    }
}

/// Reads a datum back with apache-avro under its schema and writes the reading again: the
/// reading must consume exactly Sluice's bytes and give them back unchanged (a bug in the encoder
/// otherwise). Debug builds run it on the first datums of the process and then on a sample (see
/// [`check_datum`]); the tests' value trees are its readings.
#[cfg(any(test, debug_assertions))]
fn read_verified(table: &TableSchema, schema: &Schema, bytes: &[u8]) -> apache_avro::types::Value {
    let mut rest = bytes;
    let read = apache_avro::from_avro_datum(schema, &mut rest, None)
        .unwrap_or_else(|e| panic!("{}: apache-avro cannot read Sluice's datum: {e}", table.qualified));
    assert!(rest.is_empty(), "{}: {} bytes after the datum", table.qualified, rest.len());
    let again = apache_avro::to_avro_datum(schema, read.clone())
        .unwrap_or_else(|e| panic!("{}: apache-avro cannot write what it read: {e}", table.qualified));
    assert_eq!(again, bytes, "{}: Sluice's Avro writer disagrees with apache-avro", table.qualified);
    read
}

/// Debug builds check the first 20,000 datums of the process with [`read_verified`], then one in
/// 50: every test scenario's rows are checked, and one of a million rows does not spend most of
/// its time in the check (it costs ten times the encoding).
#[cfg(debug_assertions)]
fn check_datum(table: &TableSchema, schema: &Schema, bytes: &[u8]) {
    static SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if n < 20_000 || n % 50 == 0 {
        read_verified(table, schema, bytes);
    }
}

/// Value trees, for tests: each datum as apache-avro reads it back ([`read_verified`]).
#[cfg(test)]
impl AvroEncoder {
    /// [`AvroEncoder::write_key`], read back.
    pub fn encode_key(&self, schema: &TableSchema, image: &RowImage<'_>) -> Result<Option<Avro>> {
        let mut out = Vec::new();
        Ok(match (self.write_key(schema, image, &mut out)?, schema.key_schema()) {
            (true, Some(s)) => Some(read_verified(schema, s, &out)),
            _ => None,
        })
    }

    /// [`AvroEncoder::write_value`], read back.
    pub fn encode_value(
        &self,
        schema: &TableSchema,
        op: Op,
        before: Option<&RowImage<'_>>,
        after: Option<&RowImage<'_>>,
        ctx: &EventContext,
    ) -> Result<Avro> {
        let mut out = Vec::new();
        self.write_value(schema, op, before, after, ctx, None, &mut out)?;
        Ok(read_verified(schema, schema.value_schema(), &out))
    }

    /// [`AvroEncoder::write_flat`], read back.
    pub fn encode_flat(
        &self,
        schema: &TableSchema,
        op: Op,
        before: Option<&RowImage<'_>>,
        after: Option<&RowImage<'_>>,
    ) -> Result<Avro> {
        let mut out = Vec::new();
        self.write_flat(schema, op, before, after, &mut out)?;
        Ok(read_verified(schema, schema.flat_schema(), &out))
    }
}

/// A zero or invalid date of field `f` (`text` as MySQL shows it): the union's string branch,
/// null, or an error, as the field's plan says. Out of line: rare, and its text is formatted.
#[cold]
#[inline(never)]
fn zero_date(schema: &TableSchema, f: &FieldPlan, text: String, out: &mut Vec<u8>) -> Result<()> {
    if f.zero_string {
        w::long(i64::from(f.value_branch() + 1), out);
        w::string(&text, out);
        Ok(())
    } else if f.zero_null {
        w::long(0, out);
        Ok(())
    } else {
        Err(mismatch(schema, f, format!("the zero or invalid value {text}")))
    }
}

/// The minimal big-endian two's-complement bytes of an unsigned 64-bit number (a leading 0x00
/// when the top bit is set, so it stays positive), in `buf`.
fn u64_unscaled(n: u64, buf: &mut [u8; 9]) -> &[u8] {
    buf[0] = 0;
    buf[1..].copy_from_slice(&n.to_be_bytes());
    let first = buf.iter().position(|&b| b != 0).unwrap_or(buf.len() - 1);
    let start = match buf.get(first) {
        Some(&b) if b & 0x80 != 0 => first - 1,
        _ => first,
    };
    buf.get(start..).unwrap_or_default()
}

/// The zero of an Avro type (null for a union with null), for the columns of a flattened
/// truncate record: `0`, `""`, empty bytes (a DECIMAL's `0`), the first symbol, empty arrays
/// and maps, a record of zeros, a union's null branch or else its first.
fn zero(schema: &apache_avro::Schema, out: &mut Vec<u8>) {
    use apache_avro::Schema as S;
    match schema {
        S::Null => {}
        S::Boolean => w::boolean(false, out),
        S::Float => w::float(0.0, out),
        S::Double => w::double(0.0, out),
        S::Bytes | S::String | S::Decimal(_) | S::Uuid | S::BigDecimal => w::count(0, out),
        S::Array(_) | S::Map(_) => w::count(0, out),
        S::Fixed(f) => out.extend(std::iter::repeat_n(0u8, f.size)),
        S::Record(r) => r.fields.iter().for_each(|f| zero(&f.schema, out)),
        S::Union(u) => {
            let variants = u.variants();
            let branch = variants.iter().position(|v| matches!(v, S::Null)).unwrap_or(0);
            w::count(branch, out);
            if let Some(v) = variants.get(branch) {
                zero(v, out);
            }
        }
        // int, long, enum (index 0) and their logical types: a zig-zag 0
        _ => w::long(0, out),
    }
}

fn check_images(
    schema: &TableSchema,
    op: Op,
    before: Option<&RowImage<'_>>,
    after: Option<&RowImage<'_>>,
) -> Result<()> {
    let needs = match op {
        Op::Create | Op::Read if after.is_none() => "an after image",
        Op::Update if before.is_none() || after.is_none() => "before and after images",
        Op::Delete if before.is_none() => "a before image",
        _ => return Ok(()),
    };
    Err(AvroError::Images { table: schema.qualified.clone(), op: op.code(), needs })
}

fn mismatch(schema: &TableSchema, f: &FieldPlan, found: String) -> AvroError {
    AvroError::TypeMismatch {
        table: schema.qualified.clone(),
        column: f.original.to_string(),
        expected: f.kind.expects(),
        found,
    }
}

fn enum_err(schema: &TableSchema, f: &FieldPlan, index: u16, members: usize, hint: &'static str) -> AvroError {
    AvroError::EnumIndex { table: schema.qualified.clone(), column: f.original.to_string(), index, members, hint }
}

fn absent_column(schema: &TableSchema, f: &FieldPlan, image: &'static str) -> AvroError {
    AvroError::AbsentColumn { table: schema.qualified.clone(), column: f.original.to_string(), image }
}

/// A value's kind, for mismatch messages (without its content: it may be large or private).
fn describe(v: &Value<'_>) -> String {
    match v {
        Value::Null => "NULL",
        Value::Int(_) | Value::UInt(_) => "an integer",
        Value::Float(_) => "a FLOAT",
        Value::Double(_) => "a DOUBLE",
        Value::Decimal(_) => "a DECIMAL",
        Value::Year(_) => "a YEAR",
        Value::Date(_) => "a DATE",
        Value::Time(_) => "a TIME",
        Value::DateTime(_) => "a DATETIME",
        Value::Timestamp(_) => "a TIMESTAMP",
        Value::Text { .. } => "text",
        Value::Bytes(_) => "binary data",
        Value::Enum(_) => "an ENUM",
        Value::Set(_) => "a SET",
        Value::Bit { .. } => "a BIT",
        Value::Json(_) | Value::JsonDiff(_) => "JSON",
        Value::Geometry { .. } => "a GEOMETRY",
        Value::Vector(_) => "a VECTOR",
    }
    .to_string()
}

#[cfg(test)]
mod tests;
