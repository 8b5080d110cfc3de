//! A row change becomes its Kafka records: **where a value becomes an Avro record**
//! (the encoder writes the datum, this frames it with its schema id and sends it). An insert
//! is one `c` record, an update one `u`, a delete a `d` and (unless turned off) a tombstone,
//! a row a snapshot read one `r`
//! with the same key; an update that changes the primary key is the delete of the old key
//! and the create of the new one, so keyed consumers drop the old row.

use std::borrow::Cow;

use sluice_binlog::rows::{RowChange, RowImage, RowsKind};

use super::tables::CachedTable;
use super::Error;
use crate::avro::{min_encoded_len, AvroEncoder, EnvelopeParts, EventContext, Op, TableSchema};
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
        row: &RowChange<'_>,
        buffers: &mut Buffers,
    ) -> Result<usize, Error> {
        let (before, after) = (row.before.as_ref(), row.after.as_ref());
        let Buffers { key_before, key_after, value } = buffers;
        Ok(match kind {
            RowsKind::Write => {
                let key = self.key(after, key_after)?.then_some(&key_after[..]);
                self.emit(sink, Op::Create, key, None, after, value).await?
            }
            RowsKind::Delete => {
                let key = self.key(before, key_before)?.then_some(&key_before[..]);
                self.emit(sink, Op::Delete, key, before, None, value).await?
            }
            RowsKind::Update | RowsKind::PartialUpdate => {
                let kb = self.key(before, key_before)?.then_some(&key_before[..]);
                // MINIMAL after images hold only the changed columns: a key column they lack
                // is unchanged, so it comes from the before image
                let ka = match (before, after) {
                    (Some(b), Some(a)) => self.key(Some(&with_key_from(a, b, &self.table.schema)), key_after)?,
                    _ => self.key(after, key_after)?,
                }
                .then_some(&key_after[..]);
                if kb != ka {
                    // the primary key changed: keyed consumers must drop the old row
                    self.emit(sink, Op::Delete, kb, before, None, value).await?
                        + self.emit(sink, Op::Create, ka, None, after, value).await?
                } else {
                    self.emit(sink, Op::Update, kb, before, after, value).await?
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
        row: &RowImage<'_>,
        buffers: &mut Buffers,
    ) -> Result<usize, Error> {
        let Buffers { key_after, value, .. } = buffers;
        let key = self.key(Some(row), key_after)?.then_some(&key_after[..]);
        self.emit(sink, Op::Read, key, None, Some(row), value).await
    }

    /// Writes the framed key of an image into `buf`; false for a null key.
    fn key(&self, image: Option<&RowImage<'_>>, buf: &mut Vec<u8>) -> Result<bool, Error> {
        buf.clear();
        let (Some(image), Some(id)) = (image, self.table.key_id) else { return Ok(false) };
        frame_header(id, buf);
        Ok(self.encoder.write_key(&self.table.schema, image, buf)?)
    }

    /// Sends the change's record under `key` (and a tombstone after a delete); returns how
    /// many records.
    async fn emit(
        &self,
        sink: &mut impl RecordSink,
        op: Op,
        key: Option<&[u8]>,
        before: Option<&RowImage<'_>>,
        after: Option<&RowImage<'_>>,
        value: &mut Vec<u8>,
    ) -> Result<usize, Error> {
        let s = &self.table.schema;
        // a row whose values alone exceed what Kafka takes stops here, before its record is
        // built (a 1 GiB BLOB would cost another gigabyte of Avro, then be refused)
        let max = sink.max_message_bytes();
        let key_len = key.map_or(0, <[u8]>::len);
        // counting the images' bytes is a pass over every value (2% of the pipeline's CPU):
        // skipped when the event is too small for any of its rows to reach a limit below
        let small = self.value_bytes_bound.is_some_and(|b| key_len.saturating_add(b) <= max.min(LARGE_RECORD));
        let counted = || {
            key_len
                + match self.output.value_mode {
                    ValueMode::Envelope => before.map_or(0, min_encoded_len) + after.map_or(0, min_encoded_len),
                    ValueMode::Flattened => after.map_or(0, min_encoded_len),
                }
        };
        // every test checks the bound the skip relies on
        debug_assert!(!small || counted() <= max.min(LARGE_RECORD), "value_bytes_bound below the values' bytes");
        let floor = if small { 0 } else { counted() };
        if floor > max {
            let by = format!("the producer (message.max.bytes = {max})");
            return Err(self.named_too_large(floor, by, true, op, before, after));
        }
        value.clear();
        if floor > LARGE_RECORD {
            // one allocation of about the record's size, not a doubling series
            value.reserve(floor + floor / 64 + 64 * 1024);
        }
        frame_header(self.table.value_id, value);
        match self.output.value_mode {
            ValueMode::Envelope => self.encoder.write_value(s, op, before, after, self.ctx, self.envelope, value)?,
            ValueMode::Flattened => self.encoder.write_flat(s, op, before, after, value)?,
        }
        // the record's Kafka timestamp is the envelope's ts_ms, when Sluice processed the event
        // (read once per event: librdkafka would read the clock per record)
        let ts = self.ctx.ts_ms;
        sink.send(&self.table.topic, key, Some(value), ts).await.map_err(|e| self.too_large(e, op, before, after))?;
        if value.capacity() > LARGE_RECORD {
            // librdkafka has its copy: a large row's buffer is not kept for the rows after it
            *value = Vec::new();
        }
        if op == Op::Delete && self.output.tombstones && key.is_some() {
            sink.send(&self.table.topic, key, None, ts).await?;
            return Ok(2);
        }
        Ok(1)
    }

    /// A record the producer refused as too large, named by its table and key; other errors
    /// as they are (a refusal the broker reported names its own record: `key` is set).
    fn too_large(
        &self,
        e: crate::kafka::Error,
        op: Op,
        before: Option<&RowImage<'_>>,
        after: Option<&RowImage<'_>>,
    ) -> Error {
        let crate::kafka::Error::TooLarge { size, by, key: None, .. } = e else { return e.into() };
        self.named_too_large(size, by, false, op, before, after)
    }

    /// The stop for a record of `size` bytes `by` refuses, named by its table and key.
    fn named_too_large(
        &self,
        size: usize,
        by: String,
        at_least: bool,
        op: Op,
        before: Option<&RowImage<'_>>,
        after: Option<&RowImage<'_>>,
    ) -> Error {
        let image = if op == Op::Delete { before } else { after.or(before) };
        let key = match (&self.table.schema.key, image) {
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
