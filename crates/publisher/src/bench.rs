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
    AvroEncoder, Connector, EnvelopeParts, EventContext, RowBuffers, SchemaOptions, Snapshot, SourceInfo, TableSchema,
    TransactionInfo,
};
use crate::config::{OutputSection, ValueMode};
use crate::metrics::Metrics;
use crate::pipeline::emit::{Buffers, Out, Reading, RecordSink};
use crate::pipeline::tables::CachedTable;

/// How far along the record path a run goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Events read and walked, every row image decoded into values (nothing encoded).
    Decode,
    /// And every row change encoded and framed into its records, as `sluice run` sends them
    /// (written into Avro as decoded where it can, [`crate::avro::RowWriter`]).
    Records,
    /// The same records, every row change decoded into values first (the way `sluice run`
    /// takes for partial images, a snapshot's window, flattened values, ...).
    RecordsFromValues,
}

/// What a run writes records for.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The schemas' options.
    pub schema: SchemaOptions,
    /// The records' shape.
    pub output: OutputSection,
    /// Hash every record's bytes into [`Counts::hash`], with the envelope's `ts_ms` at 0 so that
    /// runs can be compared.
    pub hash: bool,
    /// The largest record the sink takes, as librdkafka's `message.max.bytes` (larger ones are
    /// refused as the producer refuses them).
    pub max_message_bytes: usize,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            schema: SchemaOptions { prefix: "sluice".to_string(), ..SchemaOptions::default() },
            output: OutputSection::default(),
            hash: false,
            // librdkafka's default, as `sluice run`'s
            max_message_bytes: 1_000_000,
        }
    }
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
    /// A hash of every record's topic, key and value in order ([`Settings::hash`]; else 0).
    pub hash: u64,
    /// Row changes written into Avro as they were decoded (the rest went through values).
    pub written: u64,
    /// Row changes that failed, when hashing (each ends its event's walk).
    pub errors: u64,
}

/// Counts records as the Kafka sink would take them.
#[derive(Default)]
struct Counter {
    records: u64,
    tombstones: u64,
    bytes: u64,
    hash: Option<std::collections::hash_map::DefaultHasher>,
    errors: u64,
    max: usize,
}

impl Counter {
    /// A row change that failed: hashed when comparing runs (which then go on with the next
    /// event), the run's error otherwise.
    fn failed(&mut self, hashing: bool, e: Box<dyn std::error::Error>) -> Result<(), Box<dyn std::error::Error>> {
        match &mut self.hash {
            Some(h) if hashing => {
                std::hash::Hash::hash(&e.to_string(), h);
                self.errors += 1;
                Ok(())
            }
            _ => Err(e),
        }
    }
}

impl RecordSink for Counter {
    fn max_message_bytes(&self) -> usize {
        self.max
    }
    fn try_send(
        &mut self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp_ms: i64,
    ) -> Result<bool, crate::kafka::Error> {
        self.count(topic, key, value, timestamp_ms).map(|()| true)
    }
    async fn send(
        &mut self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp_ms: i64,
    ) -> Result<(), crate::kafka::Error> {
        self.count(topic, key, value, timestamp_ms)
    }
}

impl Counter {
    /// Counts (and hashes) one record, refusing one above the limit as the producer would.
    fn count(
        &mut self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        _timestamp_ms: i64,
    ) -> Result<(), crate::kafka::Error> {
        let size = key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len);
        if size > self.max {
            let by = format!("the producer (message.max.bytes = {})", self.max);
            return Err(crate::kafka::Error::TooLarge { topic: topic.to_string(), size, by, key: None });
        }
        self.records += 1;
        self.tombstones += u64::from(value.is_none());
        self.bytes += size as u64;
        if let Some(h) = &mut self.hash {
            use std::hash::Hash;
            (topic, key, value).hash(h);
        }
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
    record_path_with(path, stage, &Settings::default())
}

/// [`record_path`] with other settings. Tables whose schemas cannot be built (a file without
/// column names) are skipped when hashing, and stop the run otherwise.
///
/// # Errors
/// As [`record_path`]; a row change whose values do not fit its schema.
pub fn record_path_with(path: &Path, stage: Stage, settings: &Settings) -> Result<Counts, Box<dyn std::error::Error>> {
    // the sink never waits: every future completes on its first poll, as the pipeline's
    // sends do while librdkafka's queue has room
    tokio::runtime::Builder::new_current_thread().build()?.block_on(walk(path, stage, settings))
}

async fn walk(path: &Path, stage: Stage, settings: &Settings) -> Result<Counts, Box<dyn std::error::Error>> {
    let output = &settings.output;
    let encoder = AvroEncoder::new();
    let metrics = Metrics::new("bench");
    let mut tables: HashMap<u64, CachedTable> = HashMap::new();
    let mut buffers = Buffers::default();
    let mut row_buffers = RowBuffers::default();
    let mut sink =
        Counter { hash: settings.hash.then(Default::default), max: settings.max_message_bytes, ..Counter::default() };
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
        let mut iter = rows.rows();
        if stage == Stage::Decode {
            let mut row = RowChange { before: None, after: None };
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
                let t = match cached(&rows.table, &settings.schema, &metrics) {
                    Ok(t) => t,
                    Err(_) if settings.hash => continue,
                    Err(e) => return Err(e),
                };
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
            ts_ms: if settings.hash { 0 } else { crate::process::now_ms() },
        };
        let envelope = (output.value_mode == ValueMode::Envelope)
            .then(|| EnvelopeParts::new(&ctx, &t.schema.database, &t.schema.table));
        let value_bytes_bound = Some(rows.value_bytes_bound());
        let mut reading = Reading::new(
            &encoder,
            t,
            output,
            (rows.value_bytes_bound(), rows.full_images()),
            &rows.table.columns,
            envelope.as_ref(),
            sink.max_message_bytes(),
            stage == Stage::RecordsFromValues,
            &mut row_buffers,
        );
        let mut idx = 0u32;
        while let Some(res) = reading.next(&mut iter) {
            if let Err(e) = res {
                // comparing runs: the error is part of what is compared, and the file goes on
                sink.failed(settings.hash, e.into())?;
                break;
            }
            total += 1;
            ctx.source.row = idx;
            if let Some(tr) = ctx.transaction.as_mut() {
                tr.total_order = total;
                tr.data_collection_order = total;
            }
            let out =
                Out { encoder: &encoder, table: t, output, ctx: &ctx, value_bytes_bound, envelope: envelope.as_ref() };
            let sent = match reading.images() {
                Ok(images) => out.change(&mut sink, rows.kind, images, &mut buffers).await,
                Err(e) => Err(e),
            };
            if let Err(e) = sent {
                sink.failed(settings.hash, e.into())?;
                break;
            }
            counts.row_changes += 1;
            counts.written += u64::from(reading.values().is_none());
            idx += 1;
        }
        reading.finish(&mut row_buffers);
    }
    counts.records = sink.records;
    counts.tombstones = sink.tombstones;
    counts.bytes = sink.bytes;
    counts.hash = sink.hash.map_or(0, |h| std::hash::Hasher::finish(&h));
    counts.errors = sink.errors;
    Ok(counts)
}

/// A table version's schemas as the pipeline builds them, with made-up registry ids.
fn cached(
    tm: &Arc<TableMap>,
    opts: &SchemaOptions,
    metrics: &Metrics,
) -> Result<CachedTable, Box<dyn std::error::Error>> {
    let schema = TableSchema::new(tm, opts)?;
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
        assert_eq!(framed.written, 509, "every change of the file written as decoded");
    }

    /// Every binlog file the tests hold: the pipeline's, the recorded MariaDB workload (every
    /// column type, MINIMAL and NOBLOB images, zero dates), the MySQL and MariaDB fixtures.
    fn every_test_file() -> Vec<std::path::PathBuf> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = vec![root.join("testdata/pipeline/mysql-bin.000001")];
        let mut dirs = vec![root.join("../binlog/tests/data")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if path.is_dir() {
                    dirs.push(path);
                } else if !name.ends_with(".txt") && !name.ends_with(".md") && !name.ends_with(".sql") {
                    files.push(path);
                }
            }
        }
        files.sort();
        files
    }

    /// The record path's two ways, values written into Avro as the decoder reads them and
    /// images decoded into values first, make the same records byte for byte (hashed) under
    /// every setting that changes what a record holds, over every test file; where a row's
    /// values do not fit its schema, both stop with the same error.
    #[test]
    fn records_written_as_decoded_equal_those_from_values() {
        use crate::avro::ZeroDates;
        let mut base = Settings { hash: true, ..Settings::default() };
        let defaults = base.clone();
        // the recorded workload's MINIMAL and NOBLOB images need it (without, each such change
        // is an error, compared too)
        base.schema.partial_images = true;
        let with = |f: &dyn Fn(&mut Settings)| {
            let mut s = base.clone();
            f(&mut s);
            s
        };
        let settings = [
            ("defaults", defaults),
            ("partial images", base.clone()),
            ("zero dates as strings", with(&|s| s.schema.zero_dates = ZeroDates::AsString)),
            ("zero dates as null", with(&|s| s.schema.zero_dates = ZeroDates::AsNull)),
            ("enums as strings", with(&|s| s.schema.enums_as_strings = true)),
            ("no tombstones", with(&|s| s.output.tombstones = false)),
            ("a column left out", with(&|s| s.schema.exclude_columns = vec!["*a*".to_string()])),
            // keys in column order are written as decoded, keys out of it from values
            ("key (id, status)", with(&|s| s.schema.key_columns = Some(vec!["id".into(), "status".into()]))),
            ("key (status, id)", with(&|s| s.schema.key_columns = Some(vec!["status".into(), "id".into()]))),
            // too small for the writer's bound (`Reading::new`): every event through the values,
            // and the records above it refused
            ("records of at most 400 bytes", with(&|s| s.max_message_bytes = 400)),
        ];
        let (mut compared, mut changes, mut written) = (0u64, 0u64, 0u64);
        for file in every_test_file() {
            for (name, settings) in &settings {
                let way = |stage| record_path_with(&file, stage, settings).map_err(|e| e.to_string());
                let (direct, values) = (way(Stage::Records), way(Stage::RecordsFromValues));
                let strip = |c: &Result<Counts, String>| c.clone().map(|c| Counts { written: 0, ..c });
                assert_eq!(strip(&direct), strip(&values), "{} with {name}", file.display());
                if let Ok(c) = direct {
                    compared += c.records;
                    changes += c.row_changes;
                    written += c.written;
                    if file.ends_with("testdata/pipeline/mysql-bin.000001") && name.starts_with("key") {
                        // only shop.orders has both columns: written where its key is in column
                        // order, from values where it is not
                        let want = if *name == "key (id, status)" { c.row_changes } else { 0 };
                        assert!(c.row_changes == 7 && c.written == want, "{name}: {c:?}");
                    }
                    if name.starts_with("records of at most") && file.ends_with("recorded/mysql-bin.000001") {
                        // every change from values; the recorded workload's large rows refused
                        assert!(c.written == 0 && c.errors > 0, "{c:?}");
                    }
                }
            }
        }
        // the comparison covers both ways, over thousands of records
        assert!(
            compared > 4_000 && written > 3_000 && written < changes,
            "{compared} records of {changes} row changes, {written} written as decoded"
        );
    }
}
