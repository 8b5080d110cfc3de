//! The record path without servers, for `examples/record_path.rs`: a binlog file's row changes
//! go through the pipeline's own decoding, key and value encoding and framing
//! ([`Out::change`], the code `sluice run` runs per row) into a sink that only counts what it is
//! given. What it times is Sluice's own work per row change, which `bench/kafka_bench.sh` sees
//! only beside librdkafka, the broker and MariaDB sharing the machine's cores (a spread of
//! ±20% between rounds there; a few percent here). Not part of Sluice's interface.

use std::collections::HashMap;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;

use sluice_binlog::event::Event;
use sluice_binlog::file::BinlogReader;
use sluice_binlog::rows::RowChange;
use sluice_binlog::table_map::TableMap;
use sluice_binlog::transaction::gtid_of;
use sluice_binlog::EventDecoder;

use crate::avro::{
    AvroEncoder, Connector, EnvelopeParts, EventContext, SchemaOptions, Snapshot, SourceInfo, TableSchema,
    TransactionInfo,
};
use crate::config::{OutputSection, ValueMode};
use crate::metrics::Metrics;
use crate::pipeline::emit::{Buffers, Out, RecordSink};
use crate::pipeline::tables::CachedTable;

/// How far along the record path a run goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Events read and walked, every row image decoded into values (nothing encoded).
    Decode,
    /// And every row change encoded and framed into its records, as `sluice run` sends them.
    Records,
}

/// What a run went through.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Row changes (an UPDATE's two images are one).
    pub row_changes: u64,
    /// Records framed (a DELETE's tombstone counts; none at [`Stage::Decode`]).
    pub records: u64,
    /// Of them, tombstones (a null value after a delete).
    pub tombstones: u64,
    /// Bytes of their keys and values.
    pub bytes: u64,
}

/// Counts records as the Kafka sink would take them.
#[derive(Default)]
struct Counter {
    records: u64,
    tombstones: u64,
    bytes: u64,
}

impl RecordSink for Counter {
    fn max_message_bytes(&self) -> usize {
        // librdkafka's default, as `sluice run`'s
        1_000_000
    }
    async fn send(
        &mut self,
        _topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        _timestamp_ms: i64,
    ) -> Result<(), crate::kafka::Error> {
        self.records += 1;
        self.tombstones += u64::from(value.is_none());
        self.bytes += (key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len)) as u64;
        black_box((key, value));
        Ok(())
    }
}

/// Runs `stage` over every rows event of the binlog file at `path` with the default output
/// settings (envelope values, tombstones).
///
/// # Errors
/// The file cannot be read or decoded, or a table's schema cannot be built.
pub fn record_path(path: &Path, stage: Stage) -> Result<Counts, Box<dyn std::error::Error>> {
    // the sink never waits: every future completes on its first poll, as the pipeline's
    // sends do while librdkafka's queue has room
    tokio::runtime::Builder::new_current_thread().build()?.block_on(walk(path, stage))
}

async fn walk(path: &Path, stage: Stage) -> Result<Counts, Box<dyn std::error::Error>> {
    let output = OutputSection::default();
    let encoder = AvroEncoder::new();
    let metrics = Metrics::new("bench");
    let mut tables: HashMap<u64, CachedTable> = HashMap::new();
    let mut buffers = Buffers::default();
    let mut sink = Counter::default();
    let mut counts = Counts::default();
    // records name the file as the server does, without the directory it was copied to
    let file = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let mut rd = BinlogReader::open(path, EventDecoder::default())?;
    let (mut gtid, mut tx_id, mut total) = (None::<String>, String::new(), 0i64);
    while let Some(ev) = rd.next_event()? {
        if let Some(g) = gtid_of(&ev.event.event) {
            gtid = Some(g.to_string());
            tx_id = g.to_string();
            total = 0;
        }
        let Event::Rows(rows) = &ev.event.event else { continue };
        let mut row = RowChange { before: None, after: None };
        let mut iter = rows.rows();
        if stage == Stage::Decode {
            while let Some(res) = iter.next_into(&mut row) {
                res?;
                counts.row_changes += 1;
                black_box(&row);
            }
            continue;
        }
        let t = match tables.get(&rows.table.table_id) {
            Some(t) if Arc::ptr_eq(&t.tm, &rows.table) => t,
            _ => {
                let t = cached(&rows.table, &metrics)?;
                tables.insert(rows.table.table_id, t);
                &tables[&rows.table.table_id]
            }
        };
        let header = &ev.event.header;
        // as the pipeline's: one context per event, its row and counters changed per row
        let mut ctx = EventContext {
            source: SourceInfo {
                connector: Connector::Mariadb,
                name: "bench".to_string(),
                server_id: header.server_id,
                ts_ms: i64::from(header.timestamp) * 1000,
                file: file.clone(),
                pos: ev.offset,
                row: 0,
                gtid: gtid.clone(),
                snapshot: Snapshot::No,
            },
            transaction: Some(TransactionInfo { id: tx_id.clone(), total_order: 0, data_collection_order: 0 }),
            ts_ms: crate::process::now_ms(),
        };
        let envelope = (output.value_mode == ValueMode::Envelope)
            .then(|| EnvelopeParts::new(&ctx, &t.schema.database, &t.schema.table));
        let value_bytes_bound = Some(rows.value_bytes_bound());
        let mut idx = 0u32;
        while let Some(res) = iter.next_into(&mut row) {
            res?;
            total += 1;
            ctx.source.row = idx;
            if let Some(tr) = ctx.transaction.as_mut() {
                tr.total_order = total;
                tr.data_collection_order = total;
            }
            let out = Out {
                encoder: &encoder,
                table: t,
                output: &output,
                ctx: &ctx,
                value_bytes_bound,
                envelope: envelope.as_ref(),
            };
            out.change(&mut sink, rows.kind, &row, &mut buffers).await?;
            counts.row_changes += 1;
            idx += 1;
        }
    }
    counts.records = sink.records;
    counts.tombstones = sink.tombstones;
    counts.bytes = sink.bytes;
    Ok(counts)
}

/// A table version's schemas as the pipeline builds them, with made-up registry ids.
fn cached(tm: &Arc<TableMap>, metrics: &Metrics) -> Result<CachedTable, Box<dyn std::error::Error>> {
    let schema = TableSchema::new(tm, &SchemaOptions { prefix: "sluice".to_string(), ..SchemaOptions::default() })?;
    let key_id = schema.key_schema().map(|_| 1);
    Ok(CachedTable {
        tm: Arc::clone(tm),
        schema,
        topic: format!("sluice.{}.{}", tm.database, tm.table),
        key_id,
        value_id: 2,
        counters: metrics.table(&tm.qualified_name()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pipeline's recorded file (`integration/sql/pipeline.sql`): shop.orders 3 inserts,
    /// 3 updates (one a key change) and a delete; shop.notes 501 inserts; shop.audit 1 insert.
    /// The key change is a delete, its tombstone and a create; the delete adds its tombstone.
    #[test]
    fn the_record_path_frames_every_change_as_the_pipeline_does() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/pipeline/mysql-bin.000001"));
        let decoded = record_path(path, Stage::Decode).unwrap();
        assert_eq!(decoded, Counts { row_changes: 509, ..Counts::default() });
        let framed = record_path(path, Stage::Records).unwrap();
        // the two tombstones: the delete's and the key change's (of the old key)
        assert_eq!((framed.row_changes, framed.records, framed.tombstones), (509, 512, 2));
        // each record at least its 5-byte frame header and the envelope's op and source
        assert!(framed.bytes > 512 * 40, "{framed:?}");
    }
}
