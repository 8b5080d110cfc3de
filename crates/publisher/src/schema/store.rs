//! The tracked schema's store: each change is a JSON record on the compacted
//! `<prefix>.__schemas` topic, keyed `<source name>/<db>.<table>` (a tombstone for a dropped
//! table), written in the Kafka transaction whose checkpoint covers the DDL; the checkpoint
//! carries the history version. Reading the topic `read_committed` on start gives exactly the
//! schema as of the checkpoint.

use super::{SchemaHistory, TrackedTable};
use crate::config::KafkaSection;
use crate::kafka::compacted::{CompactedReader, Scope};
use crate::kafka::{schemas_topic, Error as KafkaError};
use crate::position::Checkpoint;

/// One record of `<prefix>.__schemas`: its key and its value (None: a tombstone).
pub type SchemaRecord = (String, Option<Vec<u8>>);

impl SchemaHistory {
    /// The records the changes since the last call become, to be written to
    /// `<prefix>.__schemas` in the open Kafka transaction right before it commits (the pipeline
    /// writes them: the model says what changed, it does not write itself). A transaction that
    /// then fails is aborted and the next attempt starts from the committed history, so the
    /// changes are not kept for a retry.
    ///
    /// # Errors
    /// A definition that does not serialise (not expected: plain data).
    pub fn take_changes(&mut self, source: &str) -> Result<Vec<SchemaRecord>, serde_json::Error> {
        let mut out = Vec::with_capacity(self.dirty.len());
        for k in std::mem::take(&mut self.dirty) {
            let value = self.tables.get(&k).map(serde_json::to_vec).transpose()?;
            out.push((format!("{source}/{k}"), value));
        }
        Ok(out)
    }
}

/// Where the tracked schema of a pipeline attempt comes from.
#[derive(Debug)]
pub enum Committed {
    /// The history committed with the checkpoint.
    Resume(SchemaHistory),
    /// No checkpoint yet (or one from before schema tracking): read the captured tables from
    /// the server. `previous` is what `__schemas` still holds for this source (after a reset
    /// of the checkpoint): the new history supersedes it.
    Load {
        /// Records of an earlier history.
        previous: Vec<TrackedTable>,
    },
}

impl Committed {
    /// True when the captured tables must be read from the server.
    pub fn needs_load(&self) -> bool {
        matches!(self, Committed::Load { .. })
    }

    /// The history to start with; `loaded` is what the server said (with
    /// [`Committed::needs_load`]).
    pub fn into_history(self, loaded: Vec<TrackedTable>) -> SchemaHistory {
        match self {
            Committed::Resume(h) => h,
            Committed::Load { previous } => SchemaHistory::fresh(loaded, &previous),
        }
    }
}

impl SchemaHistory {
    /// A history from a server load, replacing `previous` records of the same source: its
    /// version continues above theirs (so a later resume never sees an older history as
    /// newer), and the previous tables it does not hold are written as tombstones with the
    /// first commit.
    pub fn fresh(loaded: Vec<TrackedTable>, previous: &[TrackedTable]) -> SchemaHistory {
        let version = previous.iter().map(|t| t.version).max().unwrap_or(0) + 1;
        let mut h =
            SchemaHistory::new(loaded.into_iter().map(|t| TrackedTable { version, ..t }).collect(), version, true);
        h.dirty.extend(previous.iter().map(TrackedTable::key));
        h
    }
}

/// Reads the committed schema history for a pipeline attempt: the one committed with the
/// checkpoint, or, without a usable one, what an earlier history left in `__schemas`.
///
/// # Errors
/// As [`read_from_kafka`]; fatal when the history is newer than the checkpoint (two
/// instances sharing a source name).
pub async fn committed(
    k: &KafkaSection,
    source: &str,
    checkpoint: Option<&Checkpoint>,
) -> Result<Committed, KafkaError> {
    let (k2, source2) = (k.clone(), source.to_string());
    let tables = tokio::task::spawn_blocking(move || read_from_kafka(&k2, &source2))
        .await
        .map_err(|e| KafkaError::Fatal(format!("reading the schema history: {e}")))??;
    match checkpoint.map(|c| c.schema_version) {
        Some(Some(v)) => {
            let newest = tables.iter().map(|t| t.version).max().unwrap_or(0);
            if newest > v {
                return Err(KafkaError::Fatal(format!(
                    "the schema history on {} holds version {newest}, newer than the checkpoint's {v}: another \
                     instance with source name {source:?} wrote it; give each instance its own source.name",
                    schemas_topic(&k.topic_prefix),
                )));
            }
            tracing::info!(version = v, tables = tables.len(), "Read the schema history as of the checkpoint");
            Ok(Committed::Resume(SchemaHistory::new(tables, v, false)))
        }
        Some(None) => {
            tracing::warn!(
                "The checkpoint predates schema tracking: the captured tables' definitions are read from the server \
                 now, and apply to the events after the checkpoint (TABLE_MAP comparisons catch a difference)"
            );
            Ok(Committed::Load { previous: tables })
        }
        None => Ok(Committed::Load { previous: tables }),
    }
}

/// Reads this source's committed schema history from `<prefix>.__schemas` (the whole compacted
/// topic; the last record per key wins, a tombstone removes the table).
///
/// # Errors
/// Abortable when the broker does not answer; fatal for an unreadable record.
pub fn read_from_kafka(k: &KafkaSection, source: &str) -> Result<Vec<TrackedTable>, KafkaError> {
    let topic = schemas_topic(&k.topic_prefix);
    let prefix = format!("{source}/");
    let reader = CompactedReader::new(k, &topic, &format!("sluice-{source}-schema-reader"))?;
    let latest = reader.latest(|key| key.starts_with(prefix.as_bytes()), Scope::Whole)?;
    let mut tables = Vec::new();
    for (key, value) in latest {
        let Some(v) = value else { continue };
        let t: TrackedTable = serde_json::from_slice(&v).map_err(|e| {
            KafkaError::Fatal(format!("unreadable schema record {:?} on {topic}: {e}", String::from_utf8_lossy(&key)))
        })?;
        tables.push(t);
    }
    Ok(tables)
}
