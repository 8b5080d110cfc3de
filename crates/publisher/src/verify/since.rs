//! **`verify --since-checkpoint`**: where the last verify of a table left off, and the keys
//! the binlog changed since.
//!
//! A verify that found a table equal stores the binlog position it started from in
//! `<prefix>.__verify` (compacted, one record per source, table and target; a verify that
//! found a difference deletes it, so the next run compares the whole table again). A key no
//! binlog event touched since that position still has the row that was found equal, so the
//! next run compares only the keys the binlog names after it: the rows of inserts, updates
//! (both keys of a key change) and deletes, read from the source as a replica. A statement
//! that changed the table without naming rows (TRUNCATE, DROP, RENAME, partition maintenance)
//! or its definition (ALTER) makes the run compare the whole table, as does a position the
//! server has purged.
//!
//! What it cannot see: a record that reached the target without a change of its row (a
//! duplicate of an old version written out of order); the whole run, on a slower schedule,
//! does.

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};
use sluice_binlog::event::Event;
use sluice_binlog::rows::RowChange;
use sluice_binlog::transaction::Step;
use sluice_binlog::Value;

use super::normal::{id_digest, BuildDigest, Digest, Normalizer};
use super::table::Mark;
use super::VerifyError;
use crate::config::{Config, KafkaSection};
use crate::kafka::compacted::Scope;
use crate::kafka::{client_config, CompactedReader, KafkaContext};
use crate::position::StartFrom;
use crate::schema::{RowEffect, SchemaHistory};
use crate::snapshot::plan::TablePlan;
use crate::snapshot::values::sql_literal;
use crate::source::{ReplicationSource, SourceConfig, SourceEvent};

/// The topic holding where each table's last equal verify started.
pub(crate) fn state_topic(prefix: &str) -> String {
    format!("{prefix}.__verify")
}

/// Whose record in [`state_topic`]: a source's table against a target, its rows restricted by
/// a condition (a run with another condition compared other rows).
pub(crate) struct StateKey<'a> {
    pub source: &'a str,
    pub table: &'a str,
    pub target: &'a str,
    pub condition: Option<&'a str>,
}

impl StateKey<'_> {
    fn key(&self) -> String {
        let StateKey { source, table, target, condition } = self;
        match condition {
            Some(c) => format!("{source}/{table}/{target}/where {c}"),
            None => format!("{source}/{table}/{target}"),
        }
    }
}

/// Where the last verify of a table against a target that found it equal started (None: no
/// such verify, or one found a difference after it).
///
/// # Errors
/// The brokers do not answer, or the record does not read.
pub(crate) async fn load(k: &KafkaSection, state: &StateKey<'_>) -> Result<Option<Mark>, VerifyError> {
    let topic = state_topic(&k.topic_prefix);
    let mut topics = crate::kafka::sink::Topics::new(k).map_err(VerifyError::Kafka)?;
    let compact = [("cleanup.policy".to_string(), "compact".to_string())];
    topics.ensure_with(&topic, 1, &compact).await.map_err(VerifyError::Kafka)?;
    let (k, key, name) = (k.clone(), state.key(), topic.clone());
    let value = tokio::task::spawn_blocking(move || {
        let reader = CompactedReader::new(&k, &topic, "sluice-verify-state-reader")?;
        reader.latest(|x| x == key.as_bytes(), Scope::Whole).map(|l| l.into_values().next().flatten())
    })
    .await
    .map_err(|e| VerifyError::Other(format!("reading the verify state: {e}")))?
    .map_err(VerifyError::Kafka)?;
    value
        .map(|v| {
            serde_json::from_slice::<Mark>(&v)
                .map_err(|e| VerifyError::Other(format!("an unreadable record in {name}: {e}")))
        })
        .transpose()
}

/// Stores where a verify that found `table` equal started (`mark`), or (None) forgets it.
///
/// # Errors
/// The brokers do not take the record.
pub(crate) async fn store(k: &KafkaSection, state: &StateKey<'_>, mark: Option<&Mark>) -> Result<(), VerifyError> {
    let topic = state_topic(&k.topic_prefix);
    let producer: FutureProducer<KafkaContext> = client_config(k)
        .map_err(VerifyError::Kafka)?
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "30000")
        .create_with_context(KafkaContext::new(&k.brokers))
        .map_err(|e| VerifyError::Other(format!("creating a producer: {e}")))?;
    let key = state.key();
    let value = mark.map(|m| serde_json::to_vec(m).unwrap_or_default());
    let mut record = FutureRecord::<String, Vec<u8>>::to(&topic).partition(0).key(&key);
    if let Some(v) = &value {
        record = record.payload(v);
    }
    producer
        .send(record, Duration::from_secs(30))
        .await
        .map(|_| ())
        .map_err(|(e, _)| VerifyError::Other(format!("writing the verify state to {topic}: {e}")))
}

/// A key the binlog changed: its document id (an index's identity) and its chunk key's SQL
/// literals (to read its row).
#[derive(Debug, Clone)]
pub(crate) struct Changed {
    pub id: String,
    pub literals: Vec<String>,
}

/// What the binlog says of a table since a position.
pub(crate) enum Since {
    /// These keys changed (by identity, as the comparison knows keys); the read ended at the
    /// mark (where the next run starts).
    Keys(HashMap<Digest, Changed, BuildDigest>, Mark),
    /// Compare the whole table, for this reason.
    Whole(String),
}

/// How the binlog is read.
pub(crate) struct Reading<'a> {
    pub cfg: &'a Config,
    /// The replica server id to read with.
    pub server_id: u32,
    /// More changed keys than this: the whole table instead.
    pub max_keys: usize,
    /// Keys by document id (an index), else by their key's bytes (a topic).
    pub by_id: bool,
}

/// The keys of `plan`'s table the binlog changed from `from` to its current end.
///
/// # Errors
/// None of its own: a binlog that cannot be read (purged, no privilege) gives
/// [`Since::Whole`] with the reason, which is always a correct (if slower) answer.
pub(crate) async fn changed_keys(r: &Reading<'_>, from: &Mark, plan: &TablePlan, norm: &mut Normalizer) -> Since {
    match read(r, from, plan, norm).await {
        Ok(s) => s,
        Err(e) => Since::Whole(format!("the binlog since the last verify ({from}) could not be read: {e}")),
    }
}

async fn read(r: &Reading<'_>, from: &Mark, plan: &TablePlan, norm: &mut Normalizer) -> Result<Since, String> {
    let (db, table) = (plan.table_map.database.to_string(), plan.table_map.table.to_string());
    let mut cfg = SourceConfig::for_run(&r.cfg.source).map_err(|e| e.to_string())?;
    cfg.server_id = r.server_id;
    cfg.server_id_setting = "--server-id";
    cfg.follow = false;
    cfg.max_attempts = Some(1);
    let captured = |d: &str, t: &str| d == db && t == table;
    let start = StartFrom::Position { file: from.file.clone(), position: from.position };
    let (mut src, loaded) =
        ReplicationSource::start_with_schema(cfg, start, Some(&captured)).await.map_err(|e| e.to_string())?;
    let mut schemas = SchemaHistory::fresh(loaded, &[]);
    schemas.set_lower_case_table_names(src.lower_case_table_names());
    let mut keys: HashMap<Digest, Changed, BuildDigest> = HashMap::with_hasher(BuildDigest);
    loop {
        let (ev, step) = match src.next_event().await.map_err(|e| e.to_string())? {
            None => break,
            Some(SourceEvent::Reconnected { .. }) => continue,
            Some(SourceEvent::Event(ev, step)) => (ev, step),
        };
        let at = format!("{}:{}", ev.file, ev.offset);
        match (&ev.event.event, step) {
            (Event::Query(q), Step::Statement | Step::StatementBegins) if q.error_code == 0 => {
                for effect in schemas.row_effects(&q.schema, &q.query) {
                    let (named, by) = match &effect {
                        RowEffect::Emptied { database, table: t, by } => (database == &db && t == &table, *by),
                        RowEffect::Renamed { from, to } => {
                            ((from.0 == db && from.1 == table) || (to.0 == db && to.1 == table), "RENAME")
                        }
                        RowEffect::PartlyRemoved { database, table: t, .. } => {
                            (database == &db && t == &table, "partition maintenance")
                        }
                    };
                    if named {
                        return Ok(Since::Whole(format!("{by} at {at} changed the table without naming its rows")));
                    }
                }
                let version = schemas.version();
                schemas.apply_query(&q.schema, &q.query, q.status.charset_database, &at, &captured);
                if schemas.version() != version {
                    return Ok(Since::Whole(format!("its definition changed at {at}")));
                }
            }
            (Event::Rows(rows), _) if *rows.table.database == *db && *rows.table.table == *table => {
                let rows = schemas.resolve_rows(rows, ev.file, ev.offset).map_err(|e| e.to_string())?;
                let mut iter = rows.rows();
                let mut row = RowChange { before: None, after: None };
                while let Some(res) = iter.next_into(&mut row) {
                    res.map_err(|e| e.at(ev.file, ev.offset, ev.event.header.event_type).to_string())?;
                    for image in [row.before.take(), row.after.take()].into_iter().flatten() {
                        let mut values = image.values;
                        let (h, changed) =
                            identify(r.by_id, plan, norm, &mut values).map_err(|e| format!("a row at {at}: {e}"))?;
                        keys.insert(h, changed);
                    }
                    if keys.len() > r.max_keys {
                        return Ok(Since::Whole(format!("more than {} keys changed (--max-suspects)", r.max_keys)));
                    }
                }
            }
            _ => {}
        }
    }
    let end = src.resume_point();
    let mark = Mark { file: end.file.clone(), position: end.position, gtid: None, mariadb: src.is_mariadb() };
    Ok(Since::Keys(keys, mark))
}

/// A row image's identity, document id and key literals.
fn identify(
    by_id: bool,
    plan: &TablePlan,
    norm: &mut Normalizer,
    values: &mut Vec<Option<Value<'_>>>,
) -> Result<(Digest, Changed), String> {
    let literals = plan
        .key()
        .iter()
        .map(|&i| values.get(i).and_then(Option::as_ref).and_then(sql_literal))
        .collect::<Option<Vec<String>>>()
        .ok_or("the image lacks a key column's value (binlog_row_image = MINIMAL with other key columns?)")?;
    if by_id {
        let id = norm.row(values)?.id;
        Ok((id_digest(&id), Changed { id, literals }))
    } else {
        Ok((norm.key_digest(values)?, Changed { id: String::new(), literals }))
    }
}
