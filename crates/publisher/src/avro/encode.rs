//! Row images to Avro values, and values to datum bytes.
//!
//! Every conversion from a [`sluice_binlog::Value`] to an Avro value is in [`AvroEncoder::field`];
//! the field's [`FieldPlan`] (made with the schema) says which branch of which union it takes.

use apache_avro::types::Value as Avro;
use apache_avro::Schema;
use sluice_binlog::charset::decode_text;
use sluice_binlog::rows::RowImage;
use sluice_binlog::Value;

use super::schema::{FieldPlan, Kind, TableSchema, ABSENT_FIELD, DELETED_FIELD, OP_FIELD};
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
}

impl Op {
    /// The one-letter code.
    pub fn code(self) -> &'static str {
        match self {
            Op::Create => "c",
            Op::Update => "u",
            Op::Delete => "d",
            Op::Read => "r",
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

/// Encodes row images as Avro values of a [`TableSchema`]'s schemas, and values as datum bytes.
#[derive(Debug, Default, Clone)]
pub struct AvroEncoder {}

impl AvroEncoder {
    /// An encoder.
    pub fn new() -> AvroEncoder {
        AvroEncoder {}
    }

    /// The key record of a row image, or None for tables without a key (null key).
    ///
    /// # Errors
    /// [`AvroError::AbsentColumn`] when the image lacks a key column; conversion errors as
    /// [`AvroEncoder::encode_value`].
    pub fn encode_key(&self, schema: &TableSchema, image: &RowImage<'_>) -> Result<Option<Avro>> {
        let Some(key) = &schema.key else { return Ok(None) };
        let mut fields = Vec::with_capacity(key.len());
        for f in key {
            match image.values.get(f.column).and_then(Option::as_ref) {
                Some(v) => fields.push((f.name.clone(), self.field(schema, f, v)?)),
                None => return Err(absent_column(schema, f, "key")),
            }
        }
        Ok(Some(Avro::Record(fields)))
    }

    /// The value envelope of a change.
    ///
    /// `before` is required for updates and deletes, `after` for creates, updates and reads.
    ///
    /// # Errors
    /// [`AvroError::Images`] when the images do not fit `op`; [`AvroError::Text`] for text
    /// invalid in its charset; [`AvroError::TypeMismatch`], [`AvroError::NullInNotNull`],
    /// [`AvroError::EnumIndex`], [`AvroError::SetBits`], [`AvroError::PartialJson`],
    /// [`AvroError::AbsentColumn`] for values the schema cannot hold.
    pub fn encode_value(
        &self,
        schema: &TableSchema,
        op: Op,
        before: Option<&RowImage<'_>>,
        after: Option<&RowImage<'_>>,
        ctx: &EventContext,
    ) -> Result<Avro> {
        check_images(schema, op, before, after)?;
        let image = |img: Option<&RowImage<'_>>, which| -> Result<Avro> {
            Ok(match img {
                Some(img) => Avro::Union(1, Box::new(Avro::Record(self.row(schema, img, which, Vec::new())?))),
                None => Avro::Union(0, Box::new(Avro::Null)),
            })
        };
        let s = &ctx.source;
        let source = Avro::Record(vec![
            ("version".into(), Avro::String(env!("CARGO_PKG_VERSION").into())),
            ("connector".into(), Avro::String(s.connector.name().into())),
            ("name".into(), Avro::String(s.name.clone())),
            ("server_id".into(), Avro::Long(i64::from(s.server_id))),
            ("ts_ms".into(), Avro::Long(s.ts_ms)),
            ("file".into(), Avro::String(s.file.clone())),
            ("pos".into(), Avro::Long(i64::try_from(s.pos).unwrap_or(i64::MAX))),
            ("row".into(), Avro::Int(i32::try_from(s.row).unwrap_or(i32::MAX))),
            ("gtid".into(), nullable_string(s.gtid.as_deref())),
            ("db".into(), Avro::String(schema.database.to_string())),
            ("table".into(), Avro::String(schema.table.to_string())),
            ("snapshot".into(), Avro::String(s.snapshot.text().into())),
        ]);
        let transaction = match &ctx.transaction {
            Some(t) => Avro::Union(
                1,
                Box::new(Avro::Record(vec![
                    ("id".into(), Avro::String(t.id.clone())),
                    ("total_order".into(), Avro::Long(t.total_order)),
                    ("data_collection_order".into(), Avro::Long(t.data_collection_order)),
                ])),
            ),
            None => Avro::Union(0, Box::new(Avro::Null)),
        };
        Ok(Avro::Record(vec![
            ("before".into(), image(before, "before")?),
            ("after".into(), image(after, "after")?),
            ("op".into(), Avro::String(op.code().into())),
            ("ts_ms".into(), Avro::Long(ctx.ts_ms)),
            ("source".into(), source),
            ("transaction".into(), transaction),
        ]))
    }

    /// The flattened value of a change: the after image (the before image for deletes) plus
    /// `__op` and `__deleted`.
    ///
    /// # Errors
    /// As [`AvroEncoder::encode_value`].
    pub fn encode_flat(
        &self,
        schema: &TableSchema,
        op: Op,
        before: Option<&RowImage<'_>>,
        after: Option<&RowImage<'_>>,
    ) -> Result<Avro> {
        check_images(schema, op, before, after)?;
        let (img, which) = match (op, after, before) {
            (Op::Delete, _, Some(b)) => (b, "before"),
            (_, Some(a), _) => (a, "after"),
            _ => {
                return Err(AvroError::Images { table: schema.qualified.clone(), op: op.code(), needs: "a row image" })
            }
        };
        let extra = vec![
            (OP_FIELD.to_string(), Avro::String(op.code().into())),
            (DELETED_FIELD.to_string(), Avro::Boolean(op == Op::Delete)),
        ];
        Ok(Avro::Record(self.row(schema, img, which, extra)?))
    }

    /// Avro binary encoding of `value` under `schema` (no container, no Confluent header), by
    /// Sluice's own writer (`binary.rs`); debug builds also encode with apache-avro, which
    /// validates against `schema`, and assert both agree.
    ///
    /// # Errors
    /// [`AvroError::Encode`] when the value does not match the schema (a bug: values come from
    /// the same [`TableSchema`]; checked in debug builds only).
    pub fn to_datum(&self, table: &TableSchema, schema: &Schema, value: Avro) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(256);
        if super::binary::write(&value, &mut out).is_some() {
            #[cfg(debug_assertions)]
            {
                let reference = apache_avro::to_avro_datum(schema, value)
                    .map_err(|e| AvroError::Encode { table: table.qualified.clone(), source: Box::new(e) })?;
                assert_eq!(out, reference, "{}: Sluice's Avro writer disagrees with apache-avro", table.qualified);
            }
            return Ok(out);
        }
        apache_avro::to_avro_datum(schema, value)
            .map_err(|e| AvroError::Encode { table: table.qualified.clone(), source: Box::new(e) })
    }

    /// The fields of a row record: one per column, then `__absent` (partial images), then
    /// `extra`.
    fn row(
        &self,
        schema: &TableSchema,
        img: &RowImage<'_>,
        which: &'static str,
        extra: Vec<(String, Avro)>,
    ) -> Result<Vec<(String, Avro)>> {
        let mut out = Vec::with_capacity(schema.fields.len() + 1 + extra.len());
        let mut absent = Vec::new();
        for f in &schema.fields {
            let v = match img.values.get(f.column).and_then(Option::as_ref) {
                Some(v) => self.field(schema, f, v)?,
                None if schema.partial_images && f.nullable => {
                    absent.push(Avro::String(f.name.clone()));
                    Avro::Union(0, Box::new(Avro::Null))
                }
                None => return Err(absent_column(schema, f, which)),
            };
            out.push((f.name.clone(), v));
        }
        if schema.partial_images {
            out.push((ABSENT_FIELD.to_string(), Avro::Array(absent)));
        }
        out.extend(extra);
        Ok(out)
    }

    /// One column value as the field's Avro value, union branch included.
    fn field(&self, schema: &TableSchema, f: &FieldPlan, v: &Value<'_>) -> Result<Avro> {
        let wrap = |branch: u32, inner: Avro| if f.is_union() { Avro::Union(branch, Box::new(inner)) } else { inner };
        let value_branch = f.value_branch();
        let zero = |text: String| -> Result<Avro> {
            if f.zero_string {
                Ok(Avro::Union(value_branch + 1, Box::new(Avro::String(text))))
            } else if f.zero_null {
                Ok(Avro::Union(0, Box::new(Avro::Null)))
            } else {
                Err(mismatch(schema, f, format!("the zero or invalid value {text}")))
            }
        };
        let int = |n: i64| -> Result<Avro> {
            i32::try_from(n).map(Avro::Int).map_err(|_| mismatch(schema, f, format!("{n}, beyond int")))
        };
        let inner = match (&f.kind, v) {
            (_, Value::Null) => {
                return if f.sql_nullable && f.nullable {
                    Ok(Avro::Union(0, Box::new(Avro::Null)))
                } else {
                    Err(AvroError::NullInNotNull { table: schema.qualified.clone(), column: f.original.to_string() })
                };
            }
            (Kind::Int, Value::Int(n)) => int(*n)?,
            (Kind::Int, Value::UInt(n)) => int(i64::try_from(*n).unwrap_or(i64::MAX))?,
            (Kind::Long, Value::Int(n)) => Avro::Long(*n),
            (Kind::Long, Value::UInt(n)) => {
                Avro::Long(i64::try_from(*n).map_err(|_| mismatch(schema, f, format!("{n}, beyond long")))?)
            }
            (Kind::U64Decimal, Value::UInt(n)) => Avro::Decimal(apache_avro::Decimal::from(u64_unscaled(*n))),
            (Kind::Float, Value::Float(x)) => Avro::Float(*x),
            (Kind::Double, Value::Double(x)) => Avro::Double(*x),
            (Kind::Decimal { scale }, Value::Decimal(d)) => {
                if d.scale() != *scale {
                    return Err(mismatch(schema, f, format!("{d} with scale {}", d.scale())));
                }
                Avro::Decimal(apache_avro::Decimal::from(d.to_unscaled_be_bytes()))
            }
            (Kind::Year, Value::Year(y)) => Avro::Int(i32::from(*y)),
            (Kind::Date, Value::Date(d)) => match d.days_since_epoch() {
                Some(days) => Avro::Date(days),
                None => return zero(d.to_string()),
            },
            (Kind::Time, Value::Time(t)) => Avro::Long(t.to_micros()),
            (Kind::DateTime, Value::DateTime(dt)) => match dt.micros_since_epoch_local() {
                Some(us) => Avro::LocalTimestampMicros(us),
                None => return zero(dt.to_string()),
            },
            (Kind::Timestamp, Value::Timestamp(ts)) => {
                if ts.is_zero() {
                    return zero(ts.to_utc().to_string());
                }
                Avro::TimestampMicros(ts.micros())
            }
            (Kind::Text, Value::Text { bytes, collation }) => {
                let s = decode_text(bytes, *collation).map_err(|source| AvroError::Text {
                    table: schema.qualified.clone(),
                    column: f.original.to_string(),
                    source,
                })?;
                Avro::String(s.into_owned())
            }
            (Kind::Json, Value::Json(j)) => Avro::String(j.to_string()),
            (Kind::Json, Value::JsonDiff(_)) => {
                return Err(AvroError::PartialJson { table: schema.qualified.clone(), column: f.original.to_string() })
            }
            (Kind::Bytes, Value::Bytes(b)) => Avro::Bytes(b.to_vec()),
            (Kind::Enum { names }, Value::Enum(i)) => {
                let pos = usize::from(*i).checked_sub(1).filter(|&p| p < names.len());
                match pos.and_then(|p| Some((p, names.get(p)?))) {
                    Some((p, name)) => Avro::Enum(u32::try_from(p).unwrap_or(u32::MAX), name.to_string()),
                    None => {
                        return Err(enum_err(
                            schema,
                            f,
                            *i,
                            names.len(),
                            " (enable enums as strings to keep it as \"\")",
                        ))
                    }
                }
            }
            (Kind::EnumString { names }, Value::Enum(i)) => match usize::from(*i) {
                0 => Avro::String(String::new()),
                n => match names.get(n - 1) {
                    Some(name) => Avro::String(name.to_string()),
                    None => return Err(enum_err(schema, f, *i, names.len(), "")),
                },
            },
            (Kind::Set { names }, Value::Set(mask)) => {
                if names.len() < 64 && mask >> names.len() != 0 {
                    return Err(AvroError::SetBits {
                        table: schema.qualified.clone(),
                        column: f.original.to_string(),
                        mask: *mask,
                        members: names.len(),
                    });
                }
                Avro::Array(
                    names
                        .iter()
                        .enumerate()
                        .filter(|&(bit, _)| mask >> bit & 1 == 1)
                        .map(|(_, n)| Avro::String(n.to_string()))
                        .collect(),
                )
            }
            (Kind::Bool, Value::Bit { value, .. }) => Avro::Boolean(*value != 0),
            (Kind::Bits { bytes }, Value::Bit { value, .. }) => {
                let be = value.to_be_bytes();
                Avro::Bytes(be.get(be.len().saturating_sub(*bytes)..).unwrap_or(&be).to_vec())
            }
            (Kind::Geometry, Value::Geometry { srid, wkb }) => Avro::Record(vec![
                ("srid".into(), Avro::Long(i64::from(*srid))),
                ("wkb".into(), Avro::Bytes(wkb.to_vec())),
            ]),
            (Kind::Vector, Value::Vector(b)) => Avro::Array(
                b.chunks_exact(4)
                    .map(|c| {
                        let mut a = [0u8; 4];
                        a.copy_from_slice(c);
                        Avro::Float(f32::from_le_bytes(a))
                    })
                    .collect(),
            ),
            (_, other) => return Err(mismatch(schema, f, describe(other))),
        };
        Ok(wrap(value_branch, inner))
    }
}

/// The minimal big-endian two's-complement bytes of an unsigned 64-bit number (a leading 0x00
/// when the top bit is set, so it stays positive).
fn u64_unscaled(n: u64) -> Vec<u8> {
    let be = (u128::from(n)).to_be_bytes();
    let first = be.iter().position(|&b| b != 0).unwrap_or(be.len() - 1);
    let start = match be.get(first) {
        Some(&b) if b & 0x80 != 0 => first - 1,
        _ => first,
    };
    be.get(start..).unwrap_or(&be).to_vec()
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

fn nullable_string(s: Option<&str>) -> Avro {
    match s {
        Some(s) => Avro::Union(1, Box::new(Avro::String(s.to_string()))),
        None => Avro::Union(0, Box::new(Avro::Null)),
    }
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
