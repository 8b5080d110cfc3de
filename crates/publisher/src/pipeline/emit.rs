//! A row change becomes its Kafka records: **where a value becomes an Avro record**
//! (the encoder writes the datum, this frames it with its schema id and sends it). An insert
//! is one `c` record, an update one `u`, a delete a `d` and (unless turned off) a tombstone,
//! a row a snapshot read one `r`
//! with the same key; an update that changes the primary key is the delete of the old key
//! and the create of the new one, so keyed consumers drop the old row.

use std::borrow::Cow;

use sluice_binlog::rows::{RowChange, RowImage, RowsIter, RowsKind};
use sluice_binlog::Column;

use super::tables::CachedTable;
use super::Error;
use crate::avro::{min_encoded_len, AvroEncoder, EnvelopeParts, EventContext, Op, RowBuffers, RowWriter, TableSchema};
use crate::config::{OutputSection, ValueMode};
use crate::kafka::KafkaSink;
use crate::registry::frame_header;

/// Where [`Out`] sends a change's records: the Kafka sink, or the record path's benchmark
/// (`examples/record_path.rs`), which counts them to time Sluice's own work per row without a
/// broker.
#[allow(async_fn_in_trait)] // used by this crate and its benchmark only: no Send bound needed
pub trait RecordSink {
    /// The largest record the sink takes.
    fn max_message_bytes(&self) -> usize;
    /// Sends one record (`value` None: a tombstone) with its Kafka timestamp where that needs no
    /// waiting; false, having done nothing, where [`RecordSink::send`] must wait.
    fn try_send(
        &mut self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp_ms: i64,
    ) -> Result<bool, crate::kafka::Error>;
    /// Sends one record (`value` None: a tombstone) with its Kafka timestamp.
    async fn send(
        &mut self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp_ms: i64,
    ) -> Result<(), crate::kafka::Error>;
}

impl RecordSink for KafkaSink {
    fn max_message_bytes(&self) -> usize {
        KafkaSink::max_message_bytes(self)
    }
    fn try_send(
        &mut self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp_ms: i64,
    ) -> Result<bool, crate::kafka::Error> {
        KafkaSink::try_send(self, topic, key, value, timestamp_ms)
    }
    async fn send(
        &mut self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp_ms: i64,
    ) -> Result<(), crate::kafka::Error> {
        KafkaSink::send(self, topic, key, value, timestamp_ms).await
    }
}

/// Encodes and sends the records of one change.
pub struct Out<'a> {
    /// The encoder.
    pub encoder: &'a AvroEncoder,
    /// The table version the change belongs to.
    pub table: &'a CachedTable,
    /// What records look like.
    pub output: &'a OutputSection,
    /// The change's `source` and `transaction` blocks.
    pub ctx: &'a EventContext,
    /// At most the bytes of values a change's images hold, when known (a rows event's
    /// [`RowsEvent::value_bytes_bound`](sluice_binlog::rows::RowsEvent::value_bytes_bound)):
    /// below the limits, the images' sizes are not counted per record.
    pub value_bytes_bound: Option<usize>,
    /// `ctx`'s envelope bytes shared by the rows of its event, when written beforehand.
    pub envelope: Option<&'a EnvelopeParts>,
}

/// Records above this size get a buffer of their own size, given back after sending.
const LARGE_RECORD: usize = 4 << 20;

/// The reused buffers records are framed and encoded into (librdkafka copies them).
#[derive(Default)]
pub struct Buffers {
    key_before: Vec<u8>,
    key_after: Vec<u8>,
    value: Vec<u8>,
}

/// A row change's images as [`Out`] turns them into records.
#[derive(Clone, Copy)]
pub enum Images<'c, 'r> {
    /// Decoded into values (each image when the record holds it).
    Values { before: Option<&'c RowImage<'r>>, after: Option<&'c RowImage<'r>> },
    /// Written into Avro as they were decoded: the writer holds both images of the change;
    /// `before` and `after` say which the record holds.
    Written { writer: &'c RowWriter<'c>, before: bool, after: bool },
}

impl<'c, 'r> Images<'c, 'r> {
    /// The images of `row`.
    pub fn of(row: &'c RowChange<'r>) -> Images<'c, 'r> {
        Images::Values { before: row.before.as_ref(), after: row.after.as_ref() }
    }

    /// The images a record of this change holds: the before image (when `before`), the
    /// after image (when `after`).
    fn only(self, before: bool, after: bool) -> Images<'c, 'r> {
        match self {
            Images::Values { before: b, after: a } => {
                Images::Values { before: b.filter(|_| before), after: a.filter(|_| after) }
            }
            Images::Written { writer, before: b, after: a } => {
                Images::Written { writer, before: b && before, after: a && after }
            }
        }
    }
}

/// How a rows event's row changes are read: decoded into values, or written into their Avro
/// as they are decoded, where that makes the very same records (see [`Reading::new`]).
pub enum Reading<'t, 'r> {
    /// Into a [`RowChange`], refilled per row.
    Values(RowChange<'r>),
    /// Into Avro, by a [`RowWriter`]; the most bytes a record of the event can take.
    Written(RowWriter<'t>, usize),
}

impl<'t, 'r> Reading<'t, 'r> {
    /// The one-pass writer ([`RowWriter`]) for envelope values of full images of a table
    /// whose key fields are in column order, when no row of the event can make a record the
    /// sink refuses as too large (so none needs its images to be named), unless `values` asks
    /// for the values (a snapshot compares the keys of the rows a chunk's window changes).
    /// Otherwise the values. `columns` are the rows' table map's; `bufs` are the writer's, kept
    /// from event to event.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        encoder: &'t AvroEncoder,
        table: &'t CachedTable,
        output: &OutputSection,
        (value_bytes_bound, full_images): (usize, bool),
        columns: &[Column],
        envelope: Option<&EnvelopeParts>,
        max_message_bytes: usize,
        values: bool,
        bufs: &mut RowBuffers,
    ) -> Reading<'t, 'r> {
        // A record holds at most the key, both images and the envelope. The images' Avro is
        // their row data (`value_bytes_bound`) with text up to 3 times as long in UTF-8 (a
        // latin1 euro sign is 3 bytes) and JSON's up to 6 (a control character is `\u0001`),
        // and the key's is its columns' again (text, 3 times): 9 times the row data, plus what
        // each image adds (`image_overhead`: union indexes, lengths, ENUM and SET names); the
        // envelope is its parts plus the row's counters. (A record above the limit all the
        // same is refused by the sink and named by its key's bytes.)
        let most = envelope.map(|p| {
            value_bytes_bound
                .saturating_mul(9)
                .saturating_add(table.schema.image_overhead.saturating_mul(3))
                .saturating_add(p.encoded_len() + 64)
        });
        let writable = !values && output.value_mode == ValueMode::Envelope && full_images;
        let most = most.filter(|&m| writable && m <= max_message_bytes.min(LARGE_RECORD));
        match most.and_then(|m| Some((RowWriter::new(encoder, &table.schema, bufs)?.fitted(columns), m))) {
            Some((w, most)) => Reading::Written(w, most),
            None => Reading::Values(RowChange { before: None, after: None }),
        }
    }

    /// Reads the next row change; None after the last.
    pub fn next(&mut self, iter: &mut RowsIter<'r>) -> Option<sluice_binlog::Result<()>> {
        match self {
            Reading::Values(row) => iter.next_into(row),
            Reading::Written(w, _) => iter.next_with(w),
        }
    }

    /// The writer, when the rows are written into Avro as they are read (a snapshot's rows are
    /// parsed into it by [`crate::snapshot::parse_row_into`]).
    pub fn writer(&mut self) -> Option<&mut RowWriter<'t>> {
        match self {
            Reading::Values(_) => None,
            Reading::Written(w, _) => Some(w),
        }
    }

    /// The change just read, decoded (None when written as it was read).
    pub fn values(&self) -> Option<&RowChange<'r>> {
        match self {
            Reading::Values(row) => Some(row),
            Reading::Written(..) => None,
        }
    }

    /// The change just read, for [`Out::change`]. An error when a value of it does not fit its
    /// field (the writer keeps it until asked).
    ///
    /// # Errors
    /// That value's error, as [`AvroEncoder::write_value`] gives it.
    pub fn images(&mut self) -> Result<Images<'_, 'r>, Error> {
        Ok(match self {
            Reading::Values(row) => Images::of(row),
            Reading::Written(w, _most) => {
                w.check()?;
                // every test checks the bound the writer's choice relies on
                debug_assert!(w.written_len() <= *_most, "images' Avro above the bound: {} > {_most}", w.written_len());
                Images::Written { writer: w, before: true, after: true }
            }
        })
    }

    /// Gives the writer's buffers back to `bufs` for the next event.
    pub fn finish(self, bufs: &mut RowBuffers) {
        if let Reading::Written(w, _) = self {
            *bufs = w.into_buffers();
        }
    }
}

impl Out<'_> {
    /// Sends the records of one row change of a rows event of `kind`; returns how many.
    ///
    /// # Errors
    /// An image that does not fit the schema (named by table and column), a record Kafka
    /// refuses, or the sink's transaction failing.
    pub async fn change(
        &self,
        sink: &mut impl RecordSink,
        kind: RowsKind,
        row: Images<'_, '_>,
        buffers: &mut Buffers,
    ) -> Result<usize, Error> {
        let Buffers { key_before, key_after, value } = buffers;
        Ok(match kind {
            RowsKind::Write => {
                let key = self.key(row, false, key_after)?.then_some(&key_after[..]);
                self.emit(sink, Op::Create, key, row.only(false, true), value).await?
            }
            RowsKind::Delete => {
                let key = self.key(row, true, key_before)?.then_some(&key_before[..]);
                self.emit(sink, Op::Delete, key, row.only(true, false), value).await?
            }
            RowsKind::Update | RowsKind::PartialUpdate => {
                let kb = self.key(row, true, key_before)?.then_some(&key_before[..]);
                let ka = self.key(row, false, key_after)?.then_some(&key_after[..]);
                if kb != ka {
                    // the primary key changed: keyed consumers must drop the old row
                    self.emit(sink, Op::Delete, kb, row.only(true, false), value).await?
                        + self.emit(sink, Op::Create, ka, row.only(false, true), value).await?
                } else {
                    self.emit(sink, Op::Update, kb, row, value).await?
                }
            }
        })
    }

    /// Sends the `r` record of a row a snapshot read; returns how many records (1).
    ///
    /// # Errors
    /// As [`Out::change`].
    pub async fn read(
        &self,
        sink: &mut impl RecordSink,
        row: Images<'_, '_>,
        buffers: &mut Buffers,
    ) -> Result<usize, Error> {
        let Buffers { key_after, value, .. } = buffers;
        let images = row.only(false, true);
        let key = self.key(images, false, key_after)?.then_some(&key_after[..]);
        self.emit(sink, Op::Read, key, images, value).await
    }

    /// Writes the framed key of the before (or after) image into `buf`; false for a null key.
    fn key(&self, images: Images<'_, '_>, before: bool, buf: &mut Vec<u8>) -> Result<bool, Error> {
        buf.clear();
        let Some(id) = self.table.key_id else { return Ok(false) };
        let s = &self.table.schema;
        match images {
            Images::Values { before: b, after: a } => {
                let image = match (before, b, a) {
                    (true, Some(b), _) => Cow::Borrowed(b),
                    // MINIMAL after images hold only the changed columns: a key column they
                    // lack is unchanged, so it comes from the before image
                    (false, Some(b), Some(a)) => with_key_from(a, b, s),
                    (false, None, Some(a)) => Cow::Borrowed(a),
                    _ => return Ok(false),
                };
                frame_header(id, buf);
                Ok(self.encoder.write_key(s, &image, buf)?)
            }
            Images::Written { writer, .. } => {
                let Some(key) = writer.key(before) else { return Ok(false) };
                frame_header(id, buf);
                buf.extend_from_slice(key);
                Ok(true)
            }
        }
    }

    /// Sends the change's record under `key` (and a tombstone after a delete); returns how
    /// many records.
    async fn emit(
        &self,
        sink: &mut impl RecordSink,
        op: Op,
        key: Option<&[u8]>,
        images: Images<'_, '_>,
        value: &mut Vec<u8>,
    ) -> Result<usize, Error> {
        let s = &self.table.schema;
        // a row whose values alone exceed what Kafka takes stops here, before its record is
        // built (a 1 GiB BLOB would cost another gigabyte of Avro, then be refused)
        let max = sink.max_message_bytes();
        let key_len = key.map_or(0, <[u8]>::len);
        let floor = match images {
            // written only where no record can reach the limits (`Reading::new`)
            Images::Written { .. } => 0,
            Images::Values { before, after } => {
                // counting the images' bytes is a pass over every value (2% of the pipeline's
                // CPU): skipped when the event is too small for any of its rows to reach a
                // limit below
                let small = self.value_bytes_bound.is_some_and(|b| key_len.saturating_add(b) <= max.min(LARGE_RECORD));
                let counted = || {
                    key_len
                        + match self.output.value_mode {
                            ValueMode::Envelope => before.map_or(0, min_encoded_len) + after.map_or(0, min_encoded_len),
                            ValueMode::Flattened => after.map_or(0, min_encoded_len),
                        }
                };
                // every test checks the bound the skip relies on
                debug_assert!(
                    !small || counted() <= max.min(LARGE_RECORD),
                    "value_bytes_bound below the values' bytes"
                );
                if small {
                    0
                } else {
                    counted()
                }
            }
        };
        if floor > max {
            let by = format!("the producer (message.max.bytes = {max})");
            return Err(self.named_too_large(floor, by, true, op, images));
        }
        value.clear();
        if floor > LARGE_RECORD {
            // one allocation of about the record's size, not a doubling series
            value.reserve(floor + floor / 64 + 64 * 1024);
        }
        frame_header(self.table.value_id, value);
        match (images, self.output.value_mode) {
            (Images::Values { before, after }, ValueMode::Envelope) => {
                self.encoder.write_value(s, op, before, after, self.ctx, self.envelope, value)?;
            }
            (Images::Values { before, after }, ValueMode::Flattened) => {
                self.encoder.write_flat(s, op, before, after, value)?;
            }
            (Images::Written { writer, before, after }, _) => {
                writer.write_value(op, before, after, self.ctx, self.envelope, value);
            }
        }
        // the record's Kafka timestamp is the envelope's ts_ms, when Sluice processed the event
        // (read once per event: librdkafka would read the clock per record)
        let ts = self.ctx.ts_ms;
        // (the waiting way only where the sink must wait: a future per record cost more than
        // the send)
        let topic = &self.table.topic;
        if !sink.try_send(topic, key, Some(value), ts).map_err(|e| self.too_large(e, op, images))? {
            sink.send(topic, key, Some(value), ts).await.map_err(|e| self.too_large(e, op, images))?;
        }
        if value.capacity() > LARGE_RECORD {
            // librdkafka has its copy: a large row's buffer is not kept for the rows after it
            *value = Vec::new();
        }
        if op == Op::Delete && self.output.tombstones && key.is_some() {
            if !sink.try_send(topic, key, None, ts)? {
                sink.send(topic, key, None, ts).await?;
            }
            return Ok(2);
        }
        Ok(1)
    }

    /// A record the producer refused as too large, named by its table and key; other errors
    /// as they are (a refusal the broker reported names its own record: `key` is set).
    fn too_large(&self, e: crate::kafka::Error, op: Op, images: Images<'_, '_>) -> Error {
        let crate::kafka::Error::TooLarge { size, by, key: None, .. } = e else { return e.into() };
        self.named_too_large(size, by, false, op, images)
    }

    /// The stop for a record of `size` bytes `by` refuses, named by its table and key.
    fn named_too_large(&self, size: usize, by: String, at_least: bool, op: Op, images: Images<'_, '_>) -> Error {
        let key = match images {
            Images::Values { before, after } => {
                let image = if op == Op::Delete { before } else { after.or(before) };
                match (&self.table.schema.key, image) {
                    (Some(fields), Some(img)) => {
                        let cols = &self.table.tm.columns;
                        let parts: Vec<String> = fields
                            .iter()
                            .filter_map(|f| {
                                let col = cols.get(f.column)?;
                                let v = img.values.get(f.column)?.as_ref()?;
                                Some(format!("{}={}", col.display_name(), crate::render::value_json(v, col)))
                            })
                            .collect();
                        parts.join(", ")
                    }
                    _ => "none (the table has no key)".to_string(),
                }
            }
            Images::Written { writer, .. } => match writer.key(op == Op::Delete) {
                Some(key) => key_text(&self.table.schema, key),
                None => "none (the table has no key)".to_string(),
            },
        };
        Error::TooLarge {
            table: self.table.tm.qualified_name(),
            topic: self.table.topic.clone(),
            key,
            size,
            by,
            at_least,
        }
    }
}

/// A key record's datum (unframed) as `column=value, ...`, read with the table's key schema:
/// how a stop names a record it has only the bytes of.
pub fn key_text(schema: &TableSchema, datum: &[u8]) -> String {
    schema
        .key_schema()
        .and_then(|s| apache_avro::from_avro_datum(s, &mut &datum[..], None).ok())
        .and_then(|v| serde_json::Value::try_from(v).ok())
        .and_then(|v| match v {
            serde_json::Value::Object(fields) => {
                Some(fields.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", "))
            }
            _ => None,
        })
        .unwrap_or_else(|| "unreadable".to_string())
}

/// `image` with the key columns it lacks taken from `from` (only for computing the key: the
/// published images keep their own absent columns). Borrowed when nothing is missing.
fn with_key_from<'i, 'a>(image: &'i RowImage<'a>, from: &RowImage<'a>, schema: &TableSchema) -> Cow<'i, RowImage<'a>> {
    let missing = |c: usize| matches!(image.values.get(c), Some(None));
    let key = schema.key.iter().flatten();
    if !key.clone().any(|f| missing(f.column)) {
        return Cow::Borrowed(image);
    }
    let mut out = image.clone();
    for f in key {
        if let (Some(slot @ None), Some(Some(v))) = (out.values.get_mut(f.column), from.values.get(f.column)) {
            *slot = Some(v.clone());
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sluice_binlog::TableMap;

    use super::*;
    use crate::avro::SchemaOptions;

    #[test]
    fn minimal_after_image_keys_come_from_the_before_image() {
        use sluice_binlog::{Column, ColumnType, Value};
        // (a INT, b INT, v INT), PRIMARY KEY (a, b)
        let columns = ["a", "b", "v"]
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut c = Column::new(i, ColumnType::Long, 0, i == 2);
                c.name = Some(Arc::from(*n));
                c
            })
            .collect();
        let tm = TableMap {
            table_id: 1,
            flags: 0,
            database: Arc::from("db"),
            table: Arc::from("t"),
            columns,
            has_column_names: true,
            primary_key: Some(vec![(0, 0), (1, 0)]),
        };
        let schema =
            TableSchema::new(&tm, &SchemaOptions { partial_images: true, ..SchemaOptions::default() }).unwrap();
        let img = |v: [Option<i64>; 3]| RowImage { values: v.iter().map(|x| x.map(Value::Int)).collect() };
        let before = img([Some(1), Some(2), None]);
        // only v changed: the key is the before image's
        let after = img([None, None, Some(5)]);
        let k = with_key_from(&after, &before, &schema);
        assert_eq!(k.values, img([Some(1), Some(2), Some(5)]).values);
        assert_eq!(after.values[0], None, "the published after image keeps its absent columns");
        // b changed: a from the before image, b from the after image
        let b_changed = img([None, Some(7), None]);
        let k = with_key_from(&b_changed, &before, &schema);
        assert_eq!(k.values, img([Some(1), Some(7), None]).values);
        // a full image is used as it is
        let full = img([Some(3), Some(4), Some(5)]);
        assert!(matches!(with_key_from(&full, &before, &schema), Cow::Borrowed(_)));
    }
}
