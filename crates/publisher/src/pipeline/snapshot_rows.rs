//! The snapshot's side of the pipeline: at a transaction boundary, the chunks the
//! [`Snapshotter`] has ready (or a keyless table's one pass) become `r` records, encoded by the
//! same code as streamed changes and committed in the Kafka transaction whose checkpoint
//! records the snapshot's progress past them. A table redone after a purge begins with a
//! truncate record.

use std::sync::Arc;

use bytes::Bytes;

use sluice_binlog::rows::RowImage;
use sluice_binlog::TableMap;

use super::emit::{Images, Out, Reading};
use super::{Error, Pipeline, TruncateAt};
use crate::avro::{EnvelopeParts, EventContext, Snapshot};
use crate::config::ValueMode;
use crate::kafka::KafkaSink;
use crate::position::ResumePoint;
use crate::process::{now_ms, Shutdown};
use crate::snapshot::{image, parse_row, parse_row_into, Next, ReadyChunk, SnapshotError, Snapshotter};

/// `ctx` for snapshot row `n` of its chunk (or one-pass read), marked `mark`. Its times are
/// the chunk's (when it was taken to publish: a clock read per row was 1% of the snapshot's
/// CPU); a one-pass read, which may last minutes, sets them per row.
fn row_context(ctx: &mut EventContext, n: u64, mark: Snapshot) {
    ctx.source.row = u32::try_from(n).unwrap_or(u32::MAX);
    ctx.source.snapshot = mark;
}

/// The emptied buffer of a row image's values, to parse the next row into.
fn recycle(img: RowImage<'_>) -> Vec<Option<sluice_binlog::Value<'static>>> {
    let mut v = img.values;
    v.clear();
    v.into_iter().map(|_| None).collect()
}

/// A snapshot row's `source.snapshot`: the first and the last row of a table say so (a
/// table of one row is its last).
fn mark(first: bool, last: bool) -> Snapshot {
    match (first, last) {
        (_, true) => Snapshot::Last,
        (true, false) => Snapshot::First,
        (false, false) => Snapshot::Yes,
    }
}

/// How a pass of [`Pipeline::snapshot_work`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SnapshotWork {
    /// The chunks due are published (the stream goes on, or commits and stops at the stop).
    Done,
    /// The stop came during a keyless table's one pass: its rows cannot be committed in part
    /// (the pass is not resumable), so the open Kafka transaction was aborted, and nothing since
    /// the last commit is committed.
    Abandoned,
}

impl Pipeline<'_> {
    /// At a transaction boundary with the stream at `resume`: publishes the snapshot chunks
    /// that are due, reading the next ones, until one has to wait for the stream or `stop` is
    /// asked for. On a quiet server every chunk is due at once, so without the stop's check a
    /// stop waited for the whole table (or for the stop's grace, without committing).
    ///
    /// [`SnapshotWork::Abandoned`] when the stop came during a keyless table's one pass.
    pub(super) async fn snapshot_work(
        &mut self,
        resume: &ResumePoint,
        snap: &mut Snapshotter,
        sink: &mut KafkaSink,
        stop: &Shutdown,
    ) -> Result<SnapshotWork, Error> {
        loop {
            if stop.is_requested() {
                return Ok(SnapshotWork::Done);
            }
            match snap.next(resume).await? {
                Next::Stream => return Ok(SnapshotWork::Done),
                Next::Publish(chunk) => {
                    let n = self.publish_chunk(&chunk, snap.server_id(), snap.redoes(), sink).await?;
                    snap.published(&chunk, n);
                }
                Next::OnePass(plan) => {
                    let server_id = snap.server_id();
                    self.snapshot_table(&plan.table_map, sink).await?;
                    let at = (resume.file.clone(), resume.position);
                    if snap.redoes() {
                        self.clear_before_snapshot(&plan.table_map, &at, server_id, sink).await?;
                    }
                    let mut rows = match snap.one_pass(&plan).await {
                        Err(SnapshotError::Query { source: sluice_protocol::Error::Server(s), .. })
                            if s.code == 1146 =>
                        {
                            snap.one_pass_gone().await;
                            continue;
                        }
                        r => r?,
                    };
                    let columns = Arc::clone(&rows.columns);
                    let now = now_ms();
                    let mut ctx = self.context(server_id, now, &at.0, at.1, now, None, Snapshot::Yes);
                    let mut n = 0u64;
                    // one row behind the reader, so the table's last row can say so
                    let mut held: Option<bytes::Bytes> = None;
                    loop {
                        // the flag is read under a lock: every 1,024 rows is soon enough
                        if n % 1024 == 1023 && stop.is_requested() {
                            drop(rows);
                            // a failed abort leaves the transaction to time out; the next
                            // start's init_transactions fences it
                            let _ = sink.abort().await;
                            tracing::info!(
                                table = %plan.name,
                                rows = n,
                                "Stopped during the one-pass read of a table without a key: nothing since the last \
                                 commit was committed; the next start reads the table again from its beginning"
                            );
                            return Ok(SnapshotWork::Abandoned);
                        }
                        let next = rows.next().await?;
                        let Some(packet) = std::mem::replace(&mut held, next) else {
                            if held.is_none() {
                                break;
                            }
                            continue;
                        };
                        row_context(&mut ctx, n, mark(n == 0, held.is_none()));
                        ctx.ts_ms = now_ms();
                        ctx.source.ts_ms = ctx.ts_ms;
                        // the values borrow the packet: buffers of their own per row
                        let mut values = Vec::new();
                        parse_row(&plan, &columns, &packet, &mut values)?;
                        let img = image(&mut values);
                        self.publish_row(&plan.table_map, &ctx, &img, sink).await?;
                        n += 1;
                        if held.is_none() {
                            break;
                        }
                    }
                    drop(rows);
                    self.tally.snapshot_rows(&plan.name, n);
                    snap.one_pass_done(n).await;
                }
                Next::Register(plan) => {
                    self.snapshot_table(&plan.table_map, sink).await?;
                    snap.registered();
                }
            }
            // chunks count towards the batch like any records
            self.maybe_commit(resume, snap, sink, false).await?;
        }
    }

    /// The table version of a snapshot's rows (registered when new) and its topic.
    async fn snapshot_table(&mut self, tm: &Arc<TableMap>, sink: &mut KafkaSink) -> Result<(), Error> {
        let t =
            self.tables.get_or_register(tm, &self.settings, &mut self.registry, self.metrics, &self.schemas).await?;
        let topic = t.topic.clone();
        sink.ensure_topic(&topic).await?;
        Ok(())
    }

    /// Before the first rows of a snapshot that redoes a table whose topic already has records
    /// (`snapshot.mode = "when_needed"` after the binlog since the checkpoint was purged): a
    /// truncate record, so that a row deleted during the gap does not stay in the topic. Until
    /// the table's snapshot is read, its topic holds fewer rows than the table.
    async fn clear_before_snapshot(
        &mut self,
        tm: &TableMap,
        at: &(String, u64),
        server_id: u32,
        sink: &mut KafkaSink,
    ) -> Result<(), Error> {
        let at = TruncateAt { file: &at.0, pos: at.1, server_id, ts_ms: now_ms(), snapshot: Snapshot::Yes };
        let (db, table) = (tm.database.to_string(), tm.table.to_string());
        self.truncate(&at, &db, &table, "A new snapshot (snapshot.mode = when_needed)", sink).await
    }

    /// Publishes a chunk's rows as `r` records; returns how many rows.
    async fn publish_chunk(
        &mut self,
        chunk: &ReadyChunk,
        server_id: u32,
        redoes: bool,
        sink: &mut KafkaSink,
    ) -> Result<u64, Error> {
        let plan = &chunk.plan;
        self.snapshot_table(&plan.table_map, sink).await?;
        if chunk.first && redoes {
            self.clear_before_snapshot(&plan.table_map, &chunk.at, server_id, sink).await?;
        }
        let mut values = Vec::new();
        let total = chunk.rows.len();
        // one context for the chunk; only the row's place in it changes per row
        let now = now_ms();
        let mut ctx = self.context(server_id, now, &chunk.at.0, chunk.at.1, now, None, Snapshot::Yes);
        // the table's schemas once per chunk, not per row (a name built and hashed per row
        // was 2% of the snapshot's CPU); the loop below is `publish_row` with them at hand
        let t = self
            .tables
            .get_or_register(&plan.table_map, &self.settings, &mut self.registry, self.metrics, &self.schemas)
            .await?;
        // the envelope's bytes of the chunk's rows but its first and last (marked apart)
        let parts = (self.settings.output.value_mode == ValueMode::Envelope)
            .then(|| EnvelopeParts::new(&ctx, &t.schema.database, &t.schema.table));
        // each row written into Avro as it is parsed, as a rows event's are (`Reading::new`
        // says when), else parsed into values: the row's values are slices of its packet (the
        // binary protocol's), so the longest packet bounds every row's (the first and the last
        // row's envelope differs from `parts` by a few bytes of its mark, inside the bound's slack)
        let longest = chunk.rows.iter().map(Bytes::len).max().unwrap_or(0);
        let mut reading = Reading::new(
            &self.encoder,
            t,
            self.settings.output,
            (longest, true),
            &t.tm.columns,
            parts.as_ref(),
            sink.max_message_bytes(),
            false,
            &mut self.row_buffers,
        );
        for (i, packet) in chunk.rows.iter().enumerate() {
            row_context(&mut ctx, i as u64, mark(chunk.first && i == 0, chunk.last && i + 1 == total));
            let out = Out {
                encoder: &self.encoder,
                table: t,
                output: self.settings.output,
                ctx: &ctx,
                value_bytes_bound: Some(packet.len()),
                envelope: parts.as_ref().filter(|_| ctx.source.snapshot == Snapshot::Yes),
            };
            let sent = if let Some(writer) = reading.writer() {
                parse_row_into(plan, &chunk.columns, packet, writer)?;
                out.read(sink, reading.images()?, &mut self.buffers).await?
            } else {
                parse_row(plan, &chunk.columns, packet, &mut values)?;
                let img = image(&mut values);
                let sent =
                    out.read(sink, Images::Values { before: None, after: Some(&img) }, &mut self.buffers).await?;
                // the image's values go back to be reused (their borrow of the packet ends here)
                values = recycle(img);
                sent
            };
            self.batch.sent(sent);
            self.tally.records(sent as u64);
        }
        reading.finish(&mut self.row_buffers);
        self.tally.snapshot_rows(&plan.name, total as u64);
        Ok(total as u64)
    }

    /// Publishes one snapshot row of table version `tm` as an `r` record (`ctx` says where its
    /// state is from: the binlog position of the chunk's high watermark).
    async fn publish_row(
        &mut self,
        tm: &Arc<TableMap>,
        ctx: &EventContext,
        img: &RowImage<'_>,
        sink: &mut KafkaSink,
    ) -> Result<(), Error> {
        let t =
            self.tables.get_or_register(tm, &self.settings, &mut self.registry, self.metrics, &self.schemas).await?;
        let out = Out {
            encoder: &self.encoder,
            table: t,
            output: self.settings.output,
            ctx,
            value_bytes_bound: None,
            envelope: None,
        };
        let sent = out.read(sink, Images::Values { before: None, after: Some(img) }, &mut self.buffers).await?;
        self.batch.sent(sent);
        self.tally.records(sent as u64);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_and_last_rows_are_marked() {
        assert_eq!(mark(true, false), Snapshot::First);
        assert_eq!(mark(false, false), Snapshot::Yes);
        assert_eq!(mark(false, true), Snapshot::Last);
        assert_eq!(mark(true, true), Snapshot::Last, "a table of one row");
    }
}
