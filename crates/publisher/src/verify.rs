//! `sluice verify`: **is each topic (and each index) really equal to its table?** Proven on
//! a live pipeline, without false alarms and without hiding a loss.
//!
//! For one table and its topic:
//! 1. Note the topic's end offsets (E). Replay the topic up to E ([`topic`]): per key, the last
//!    record wins, a delete or tombstone removes the key, a truncate record removes what its
//!    partition held. Kept in memory: a 128-bit digest of each key and of its row's values.
//! 2. Read the table in key-ordered chunks ([`table`]); each row goes through the same
//!    normal form as the records ([`normal`]) and is compared with its key's digest. A key
//!    whose digests differ, a row without a record (missing) and a record without a row
//!    (extra) become *suspects*: they may only be lagging behind.
//! 3. Re-check the suspects, in rounds: read their rows again, note the server's binlog
//!    position P, wait until the publisher's committed checkpoint has passed P, then read the
//!    topic's records after E (and move E). A suspect with a record there changed meanwhile:
//!    it is read again in the next round, never judged from a stale read. One without is
//!    judged: the topic holds every change up to P, and none of this key since its state was
//!    read, so a difference now is real.
//!
//! What "equal" means for a live table: every key's state in the topic equals its row at some
//! moment between the two reads of it; a key that changed in every round is reported as
//! *unsettled* (not a difference). Memory: the digests of one pass's keys (about
//! [`ENTRY_BYTES`] each); a topic with more keys than `--memory-limit` holds is compared in
//! several passes, each replaying the topic and reading the table for the keys whose digest
//! falls in it.
//!
//! A keyed run compares chosen rows instead of the whole table ([`Selection`]): random chunks
//! (`--sample`), or the keys the binlog changed since the last equal run ([`since`],
//! `--since-checkpoint`); the target's state is then kept (or asked for) for those keys only,
//! and step 3 is the same.

pub(crate) mod normal;
pub(crate) mod push;
mod since;
mod table;
mod topic;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value as Json;
use sluice_protocol::ConnectOptions;

use crate::avro::TableSchema;
use crate::config::Config;
use crate::elastic::client::{version_parts, Elastic};
use crate::elastic::document::Forms;
use crate::filter::TableFilter;
use crate::pipeline::tables::{schema_options, Routes};
use crate::pipeline::Settings;
use crate::registry::{RegistryClient, RegistryError};
use crate::snapshot::values::sql_literal;
use crate::snapshot::{parse_row, SnapshotError};
use normal::{id_digest, BuildDigest, Change, Digest, Doc, Keyless, Normalizer};
use since::Since;
use table::{Mark, TableReader};
use topic::{Ends, Entry, Read, TopicReader};

/// What a kept key costs in memory, at most (a hash map entry of two digests and a record's
/// place, with the map's spare room): the unit of `--memory-limit`.
pub const ENTRY_BYTES: u64 = 112;

/// Chunks of the table read ahead of the comparison (besides the one compared): the server's
/// time and the comparison's overlap, for this many chunks' memory.
const PREFETCH: usize = 2;

/// Why a table could not be verified.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// Talking to the source failed.
    #[error("the source: {0}")]
    Source(#[source] sluice_protocol::Error),
    /// Reading the table failed, or it cannot be read exactly.
    #[error("{0}")]
    Table(#[from] SnapshotError),
    /// The brokers.
    #[error("{0}")]
    Kafka(#[source] crate::kafka::Error),
    /// The registry (a record's schema).
    #[error("the schema registry: {0}")]
    Registry(#[source] RegistryError),
    /// A record that does not decode.
    #[error("{topic} partition {partition} offset {offset}: {what}")]
    Record {
        /// The topic.
        topic: String,
        /// Its partition (-1: a schema, not a record).
        partition: i32,
        /// Its offset.
        offset: i64,
        /// What is wrong.
        what: String,
    },
    /// The table's index is not in Elasticsearch, while the table has rows to compare with it.
    #[error(
        "{table}: index {index} does not exist in Elasticsearch, so none of the table's rows can be in it: check the \
         index name ([elasticsearch.indices] \"{table}\", else elasticsearch.index) against the cluster's indices, \
         or run sluice sink elasticsearch, which creates the index with the table's first record"
    )]
    NoIndex {
        /// `db.table`.
        table: String,
        /// The index it is synced to.
        index: String,
    },
    /// Anything else, said whole.
    #[error("{0}")]
    Other(String),
}

/// How a verify runs (`sluice verify`'s options).
#[derive(Debug, Clone)]
pub struct Options {
    /// Rows per chunk of the table read.
    pub chunk: usize,
    /// Bytes the kept keys may take (see [`ENTRY_BYTES`]).
    pub memory_limit: u64,
    /// How long to wait for the publisher's checkpoint to pass a re-read.
    pub wait: Duration,
    /// Re-check rounds before a key that keeps changing is called unsettled.
    pub rounds: u32,
    /// More suspects than this after the first comparison: the table is reported as too far
    /// apart (a topic never snapshotted, a publisher far behind) without re-checking.
    pub max_suspects: usize,
    /// Keys of each outcome listed in the report.
    pub show: usize,
    /// A condition on the rows compared (SQL, per table), besides `snapshot.where`.
    pub filters: HashMap<String, String>,
    /// Compare this many random chunks of each table only (`--sample`).
    pub sample: Option<u32>,
    /// Compare only the keys the binlog changed since the last verify that found the table
    /// equal, read as a replica with this server id (`--since-checkpoint`).
    pub since: Option<u32>,
}

/// How a key differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A row without its record.
    Missing,
    /// A record without its row.
    Extra,
    /// Both, with other values.
    Different,
}

/// A column that differs: its value in the table and in the target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ColumnDiff {
    /// The column.
    pub column: String,
    /// The table's value.
    pub table: Json,
    /// The target's value (NULL also when the record does not carry the column: written
    /// before the column was added).
    pub target: Json,
}

/// One key that differs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// How.
    pub kind: Kind,
    /// The key, as the document id (`7`, `[7,"k1"]`).
    pub key: String,
    /// The columns that differ (a difference only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<ColumnDiff>,
}

/// One table's outcome against one target.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TableReport {
    /// `db.table`.
    pub table: String,
    /// `kafka` or `elasticsearch`.
    pub target: String,
    /// The topic (or index) compared with.
    pub against: String,
    /// Rows read from the table. A row deleted from both the table and the target while it
    /// was being re-checked counts in none of the outcomes below (both agree it is gone).
    pub rows: u64,
    /// Keys equal.
    pub equal: u64,
    /// Rows without a record.
    pub missing: u64,
    /// Records without a row.
    pub extra: u64,
    /// Keys with other values.
    pub different: u64,
    /// Keys that changed in every re-check round (not judged).
    pub unsettled: u64,
    /// Of the equal keys, those whose only differences are in columns their record (or
    /// document) lacks, written before the table had them (`ALTER TABLE ... ADD COLUMN`
    /// since): the added columns' values were never published for them, so they are not
    /// compared (an UPDATE since of only those columns would not be seen either).
    pub predates: u64,
    /// The columns those records lack.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub predated_columns: Vec<String>,
    /// Passes over the topic and the table (more than one: more keys than the memory limit).
    pub passes: u64,
    /// What was compared when not every row (`--sample`, `--since-checkpoint`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The first keys of each outcome.
    pub findings: Vec<Finding>,
    /// Why the table is not compared (a table without a key): reported, not a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Why the table could not be verified (then the counts are not a verdict).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Seconds it took.
    pub seconds: f64,
}

impl TableReport {
    /// True when every key is equal (unsettled keys do not count against it).
    pub fn is_equal(&self) -> bool {
        self.error.is_none() && self.missing == 0 && self.extra == 0 && self.different == 0
    }

    /// Counts a key equal in every column its record carries, which lacks `columns` (see
    /// [`TableReport::predates`]); the caller counts it equal.
    fn predated<'a>(&mut self, columns: impl Iterator<Item = &'a String>) {
        self.predates += 1;
        for column in columns {
            if !self.predated_columns.contains(column) {
                self.predated_columns.push(column.clone());
            }
        }
    }

    fn note(&mut self, kind: Kind, key: String, columns: Vec<ColumnDiff>, show: usize) {
        let n = match kind {
            Kind::Missing => &mut self.missing,
            Kind::Extra => &mut self.extra,
            Kind::Different => &mut self.different,
        };
        *n += 1;
        if self.findings.iter().filter(|f| f.kind == kind).count() < show {
            self.findings.push(Finding { kind, key, columns });
        }
    }
}

/// A key that may differ.
#[derive(Debug)]
struct Suspect {
    /// Its id (empty until its record was read, for an extra key).
    id: String,
    /// Its chunk key's SQL literals (to read it again); None when not known.
    key: Option<Vec<String>>,
    /// The row as last read (None: no row).
    row: Option<Doc>,
    /// Its state in the target (None: none).
    target: Option<Doc>,
    /// The partition and offset of its last record, until the record is read.
    locator: Option<(i32, i64)>,
    /// The partition its records go to.
    partition: Option<i32>,
    /// A record of it came during the last round.
    touched: bool,
}

/// The suspects by identity.
type Suspects = HashMap<Digest, Suspect, BuildDigest>;

/// What the comparisons of one command share.
pub struct Verifier {
    cfg: Config,
    opts: Options,
    connect: ConnectOptions,
    registry: Arc<RegistryClient>,
    routes: Routes,
    filter: TableFilter,
    forms: Forms,
    geo_point: Arc<dyn Fn(&str) -> bool + Send + Sync>,
}

impl Verifier {
    /// A verifier of `cfg`'s tables.
    ///
    /// # Errors
    /// The registry's client or the source's settings cannot be made.
    pub fn new(cfg: Config, opts: Options) -> Result<Verifier, String> {
        let es = cfg.elasticsearch.clone();
        let es = es.as_ref();
        let connect = crate::source::SourceConfig::for_run(&cfg.source).map_err(|e| e.to_string())?.connect;
        let registry = Arc::new(RegistryClient::new(&cfg.registry).map_err(|e| e.to_string())?);
        let routes = Routes::new(&cfg.routes, &cfg.kafka.topic_prefix);
        let filter = TableFilter::from_config(&cfg.filter);
        let forms = es.map_or(Forms { time: Default::default(), json: Default::default() }, |e| Forms {
            time: e.time,
            json: e.json,
        });
        let patterns: Vec<String> = es.map(|e| e.geo_point.clone()).unwrap_or_default();
        let geo_point: Arc<dyn Fn(&str) -> bool + Send + Sync> = Arc::new(move |column: &str| {
            let Some((table, col)) = column.rsplit_once('.') else { return false };
            let Some((db, t)) = table.split_once('.') else { return false };
            patterns.iter().any(|p| {
                let mut parts = p.splitn(3, '.');
                let (pd, pt, pc) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                crate::filter::wildcard(pd, db) && crate::filter::wildcard(pt, t) && crate::filter::wildcard(pc, col)
            })
        });
        Ok(Verifier { cfg, opts, connect, registry, routes, filter, forms, geo_point })
    }

    /// The condition on `db.table`'s rows compared: `--where`, else `snapshot.where`.
    fn condition(&self, db: &str, table: &str) -> Option<&str> {
        self.opts.filters.get(&format!("{db}.{table}")).map(String::as_str).or(self.cfg.snapshot.filter_of(db, table))
    }

    /// The source's name (`source.name`).
    pub fn source_name(&self) -> &str {
        &self.cfg.source.name
    }

    /// The source's connection settings (to list its tables).
    pub fn connect_options(&self) -> &ConnectOptions {
        &self.connect
    }

    /// True when `[filter]` captures `db.table`.
    pub fn captures(&self, db: &str, table: &str) -> bool {
        self.filter.matches(db, table)
    }

    /// The index `db.table`'s documents are in, when `[elasticsearch]` syncs it (None: no
    /// `[elasticsearch]`, or its include/exclude leave the table out).
    ///
    /// # Errors
    /// An index name Elasticsearch refuses.
    pub fn index_of(&self, db: &str, table: &str) -> Result<Option<String>, String> {
        let Some(es) = &self.cfg.elasticsearch else { return Ok(None) };
        let topic = self.routes.topic_of(db, table);
        // the sink syncs the topics named <prefix>.<db>.<table> only
        if topic != format!("{}.{db}.{table}", self.cfg.kafka.topic_prefix) {
            return Ok(None);
        }
        crate::elastic::feed::index_of(es, &topic, db, table).transpose()
    }

    /// Compares `db.table` with its topic (`target` Kafka) or its index (Elasticsearch).
    pub async fn table(&self, db: &str, table: &str, target: TargetKind) -> TableReport {
        let started = Instant::now();
        let topic = self.routes.topic_of(db, table);
        let mut report = TableReport {
            table: format!("{db}.{table}"),
            target: target.name().into(),
            against: topic.clone(),
            ..TableReport::default()
        };
        if target == TargetKind::Elasticsearch && matches!(self.index_of(db, table), Ok(None)) {
            // named in the report, so that a table left out of the index is not mistaken for one
            // checked
            report.against = "(no index)".into();
            report.skipped = Some(self.not_synced(db, table));
            report.seconds = started.elapsed().as_secs_f64();
            return report;
        }
        let target = match target {
            TargetKind::Kafka => Ok(Target::Kafka),
            TargetKind::Elasticsearch => self.elastic_target(db, table),
        };
        let result = match target {
            Ok(t) => {
                if let Target::Elastic(e) = &t {
                    report.against.clone_from(&e.index);
                }
                self.compare(db, table, &topic, &t, &mut report).await
            }
            Err(e) => Err(e),
        };
        match result {
            Err(e) => report.error = Some(e.to_string()),
            Ok(mark) if self.opts.since.is_some() && report.skipped.is_none() => {
                // equal: the next run starts from here; else it compares the whole table again
                let keep = mark.filter(|_| report.is_equal());
                let (k, source) = (&self.cfg.kafka, &self.cfg.source.name);
                let state = since::StateKey {
                    source,
                    table: &report.table,
                    target: &report.target,
                    condition: self.condition(db, table),
                };
                if let Err(e) = since::store(k, &state, keep.as_ref()).await {
                    report.error = Some(format!("storing where this verify started (--since-checkpoint): {e}"));
                }
            }
            Ok(_) => {}
        }
        report.seconds = started.elapsed().as_secs_f64();
        report
    }

    /// Why `db.table` has no index to compare with (its [`Verifier::index_of`] is None).
    fn not_synced(&self, db: &str, table: &str) -> String {
        let Some(es) = &self.cfg.elasticsearch else { return "no [elasticsearch] section".into() };
        let topic = self.routes.topic_of(db, table);
        if topic != format!("{}.{db}.{table}", self.cfg.kafka.topic_prefix) {
            return format!(
                "not checked against Elasticsearch: its topic {topic} is a [[routes]] topic, which sluice sink \
                 elasticsearch does not sync"
            );
        }
        match es.exclude.iter().find(|p| crate::filter::table_matches(p, db, table)) {
            Some(p) => format!("not checked against Elasticsearch: excluded by config (elasticsearch.exclude {p:?})"),
            None => "not checked against Elasticsearch: excluded by config (no elasticsearch.include pattern matches \
                     it)"
            .into(),
        }
    }

    fn elastic_target(&self, db: &str, table: &str) -> Result<Target, VerifyError> {
        let es_cfg =
            self.cfg.elasticsearch.as_ref().ok_or_else(|| VerifyError::Other("no [elasticsearch] section".into()))?;
        let index = self.index_of(db, table).map_err(VerifyError::Other)?.ok_or_else(|| {
            VerifyError::Other(format!(
                "{db}.{table}: the sink does not sync it ([elasticsearch] include/exclude, or a [[routes]] topic)"
            ))
        })?;
        let es = Elastic::new(es_cfg).map_err(|e| VerifyError::Other(e.to_string()))?;
        Ok(Target::Elastic(ElasticTarget { es, index, group: es_cfg.group(&self.cfg.kafka.topic_prefix) }))
    }

    #[allow(clippy::too_many_lines)] // the three steps of the module's header, in order
    async fn compare(
        &self,
        db: &str,
        table: &str,
        topic: &str,
        target: &Target,
        report: &mut TableReport,
    ) -> Result<Option<Mark>, VerifyError> {
        let name = format!("{db}.{table}");
        if self.cfg.output.partial_images {
            return Err(VerifyError::Other(
                "output.partial_images is set: records of MINIMAL or NOBLOB row images carry only some columns, which \
                 a consumer merges; verify compares whole rows and does not merge them yet"
                    .into(),
            ));
        }
        let filter = self.condition(db, table);
        let keys = self.cfg.output.key_columns.get(&name).map(Vec::as_slice);
        let Some(mut reader) = TableReader::open(&self.connect, (db, table), filter, keys, self.opts.chunk).await?
        else {
            return Err(VerifyError::Other(format!(
                "{name}: no such table on the source (or no SELECT privilege on it)"
            )));
        };
        let settings = Settings {
            source_name: &self.cfg.source.name,
            kafka: &self.cfg.kafka,
            output: &self.cfg.output,
            filter: &self.filter,
            routes: &self.routes,
        };
        let tm = Arc::clone(&reader.plan.table_map);
        let schema = TableSchema::new(&tm, &schema_options(&tm, &name, &settings))
            .map_err(|e| VerifyError::Other(e.to_string()))?;
        let norm = match Normalizer::new(&tm, schema, self.forms, &*self.geo_point) {
            Ok(n) => n,
            Err(Keyless::NoKey) => {
                report.skipped = Some(
                    "no primary key (nor a NOT NULL unique key, nor output.key_columns): its records have null keys, \
                     so no record says which row it is; name a key in [output.key_columns] to verify it"
                        .into(),
                );
                return Ok(None);
            }
            Err(Keyless::Other(e)) => return Err(VerifyError::Other(e)),
        };
        // a missing index reads as an empty one: every row would be "missing". It is said as
        // what it is once the table has a row to compare (an empty table's index is never made)
        let mut no_index = match target {
            Target::Elastic(e) => {
                let exists =
                    e.es.index_exists(&e.index).await.map_err(|x| VerifyError::Other(format!("{}: {x}", e.index)))?;
                (exists == Some(false)).then(|| VerifyError::NoIndex { table: name.clone(), index: e.index.clone() })
            }
            Target::Kafka => None,
        };
        let (k, t, registry, geo) =
            (self.cfg.kafka.clone(), topic.to_string(), Arc::clone(&self.registry), Arc::clone(&self.geo_point));
        let rt = tokio::runtime::Handle::current();
        let mut side =
            blocking(move || TopicReader::new(&k, &t, registry, rt, geo).map(|t| Side { topic: t, norm })).await??;

        // 1. the topic's end offsets (what the Kafka passes replay to, where the re-checks'
        // reads start), and the passes the memory limit asks for: the topic's records bound
        // the number of keys, in the index as in the topic
        let (s, marks) = blocking(move || {
            let m = side.topic.watermarks();
            (side, m)
        })
        .await?;
        side = s;
        let marks = marks?;
        let base: Ends = marks.iter().map(|&(p, _, high)| (p, high)).collect();
        let records: u64 = marks.iter().map(|&(_, low, high)| u64::try_from(high - low).unwrap_or(0)).sum();
        // a topic's keys are known by their key datum's bytes, an index's by document id
        let by_id = !matches!(target, Target::Kafka);
        // --sample, --since-checkpoint: chosen rows, the target's state of their keys only
        let (mut selection, mark) = self.select(&mut reader, &mut side.norm, by_id, report).await?;
        if let Some(f) = filter {
            report.scope = Some(match report.scope.take() {
                // the sample's scope says already that records without a row are not looked for
                Some(s) => format!("{s}; of the rows where {f}"),
                None => format!("the rows where {f} (records without such a row are not looked for)"),
            });
        }
        let picked = match &selection {
            Some(sel) => Some(Arc::new(sel.keys(&reader.plan, &mut side.norm, by_id)?)),
            None => None,
        };
        let passes = if picked.is_some() {
            1
        } else {
            (records.saturating_mul(ENTRY_BYTES)).div_ceil(self.opts.memory_limit.max(1)).max(1)
        };
        report.passes = passes;
        let mut suspects: Suspects = HashMap::with_hasher(BuildDigest);
        for pass in 0..passes {
            let pick = picked.clone();
            let in_pass = move |h: Digest| match &pick {
                Some(keys) => keys.contains_key(&h),
                None => (h % u128::from(passes)) as u64 == pass,
            };
            let capacity = usize::try_from(records / passes).unwrap_or(0).min(1 << 26);
            let started = Instant::now();
            // the table's first chunks are read while the target is
            let plan = reader.plan.clone();
            let mut chunks = match selection.take() {
                Some(sel) => Rows::Given(sel.chunks.into_iter(), Box::new(reader)),
                None => Rows::Ahead(reader.prefetch(PREFETCH)),
            };
            let mut state = match (target, &picked) {
                (Target::Kafka, _) => {
                    let (to, in_pass) = (base.clone(), in_pass.clone());
                    let (s, state) = blocking(move || {
                        let st = side.topic.replay(&side.norm, &to, capacity, in_pass);
                        (side, st)
                    })
                    .await?;
                    side = s;
                    state?
                }
                (Target::Elastic(e), Some(keys)) => {
                    let ids: Vec<String> = keys.values().map(|c| c.id.clone()).collect();
                    index_entries(e, &side.norm, &ids).await?
                }
                (Target::Elastic(e), None) => index_state(e, &side.norm, capacity, in_pass.clone()).await?,
            };
            // a keyed run's chunks may overlap: each key is compared once
            let mut seen: Option<std::collections::HashSet<Digest, BuildDigest>> =
                picked.as_ref().map(|_| std::collections::HashSet::with_hasher(BuildDigest));
            tracing::debug!(table = %name, pass, keys = state.len(), secs = started.elapsed().as_secs_f64(), "target read");
            let started = Instant::now();
            // 2. the table, chunk by chunk
            loop {
                let Some(chunk) = chunks.next().await? else { break };
                let mut values = Vec::new();
                for packet in &chunk.rows {
                    parse_row(&plan, &chunk.columns, packet, &mut values)?;
                    let failed = |e: String| VerifyError::Other(format!("{name}: {e}"));
                    // the topic: the row by its bytes as the pipeline encodes it (its normal
                    // form only when needed); an index: by its normal form
                    let (h, bytes, mut doc) = if by_id {
                        let d = side.norm.row(&mut values).map_err(failed)?;
                        (id_digest(&d.id), None, Some(d))
                    } else {
                        let (k, r) = side.norm.row_bytes(&mut values).map_err(failed)?;
                        (k, Some(r), None)
                    };
                    // every chosen row is compared (its identity is in the pick by construction)
                    let new = match &mut seen {
                        Some(seen) => seen.insert(h),
                        None => in_pass(h),
                    };
                    if !new {
                        continue;
                    }
                    report.rows += 1;
                    if let Some(e) = no_index.take() {
                        return Err(e);
                    }
                    let entry = state.remove(&h);
                    if entry.as_ref().is_some_and(|e| !e.json && bytes == Some(e.digest)) {
                        report.equal += 1;
                        continue;
                    }
                    let locator = match entry {
                        Some(e) => {
                            let equal = if e.json {
                                let d = match doc.take() {
                                    Some(d) => d,
                                    None => side.norm.row(&mut values).map_err(failed)?,
                                };
                                let mut equal = d.digest() == e.digest;
                                // a record written before columns were added: equal in
                                // the columns it carries is all it can be
                                if let Some(lacking) =
                                    (!equal).then(|| side.norm.predates(&d, e.lacks, e.digest)).flatten()
                                {
                                    report.predated(lacking.iter().filter_map(|&i| side.norm.columns().get(i)));
                                    equal = true;
                                }
                                doc = Some(d);
                                equal
                            } else {
                                bytes == Some(e.digest)
                            };
                            if equal {
                                report.equal += 1;
                                continue;
                            }
                            Some((e.partition, e.offset))
                        }
                        None => None,
                    };
                    let doc = match doc {
                        Some(d) => d,
                        None => side.norm.row(&mut values).map_err(failed)?,
                    };
                    let key = plan
                        .key()
                        .iter()
                        .map(|&i| values.get(i).and_then(Option::as_ref).and_then(sql_literal))
                        .collect();
                    suspects.insert(
                        h,
                        Suspect {
                            id: doc.id.clone(),
                            key,
                            row: Some(doc),
                            target: None,
                            partition: locator.map(|l| l.0),
                            locator,
                            touched: false,
                        },
                    );
                }
                self.too_many(&suspects, report)?;
            }
            reader = chunks.finish().await?;
            tracing::debug!(table = %name, pass, rows = report.rows, secs = started.elapsed().as_secs_f64(), "table read");
            // what is left in the target has no row; under a condition it may have one that
            // does not match it (no record says whether its row does): not looked for
            for (h, e) in state.into_iter().filter(|_| filter.is_none()) {
                let known = picked.as_ref().and_then(|k| k.get(&h)).filter(|c| !c.literals.is_empty());
                suspects.insert(
                    h,
                    Suspect {
                        id: known.map(|c| c.id.clone()).unwrap_or_default(),
                        key: known.map(|c| c.literals.clone()),
                        row: None,
                        target: None,
                        locator: Some((e.partition, e.offset)),
                        partition: Some(e.partition),
                        touched: false,
                    },
                );
            }
            self.too_many(&suspects, report)?;
        }
        // the records the suspects' states came from: their values (Kafka), and an extra
        // key's id and key (both: a document's version is its record's place)
        if suspects.values().any(|s| s.locator.is_some()) {
            let values = matches!(target, Target::Kafka);
            let (s, sus) = blocking(move || {
                let r = fill_targets(&mut side, &mut suspects, values);
                (side, r.map(|()| suspects))
            })
            .await?;
            side = s;
            suspects = sus?;
        }
        if let Target::Elastic(e) = target {
            name_unnamed(e, &mut suspects).await?;
        }
        // 3. the re-check rounds
        let mut from = base;
        for _ in 0..self.opts.rounds {
            if suspects.is_empty() {
                break;
            }
            self.reread(&mut reader, &mut side.norm, &mut suspects, by_id).await?;
            let at = reader.position().await?;
            self.wait_for_checkpoint(&at).await?;
            if let Target::Elastic(e) = target {
                let (s, marks) = blocking(move || {
                    let m = side.topic.watermarks();
                    (side, m)
                })
                .await?;
                side = s;
                let ends: Ends = marks?.iter().map(|&(p, _, high)| (p, high)).collect();
                side = self.wait_for_sink(e, side, &ends).await?;
                documents(e, &side.norm, &mut suspects).await?;
            }
            let (s, scanned) = blocking(move || {
                let r = side.topic.watermarks().and_then(|m| {
                    let to: Ends = m.iter().map(|&(p, _, high)| (p, high)).collect();
                    let mut tail = Vec::new();
                    let how = Read { by_id, bytes: false, want_key: false };
                    side.topic.scan(&side.norm, (&from, &to), how, |rec| tail.push(rec)).map(|()| (to, tail))
                });
                (side, r)
            })
            .await?;
            side = s;
            let (to, tail) = scanned?;
            from = to;
            // a record of a suspect since its state was read: it changed meanwhile (the topic's
            // record is its state in Kafka; the index's was read above)
            let kafka = matches!(target, Target::Kafka);
            for rec in tail {
                match rec.change {
                    Change::Upsert(_) | Change::UpsertBytes(_) | Change::Delete => {
                        if let Some(s) = suspects.get_mut(&rec.identity) {
                            s.partition = Some(rec.partition);
                            s.touched = true;
                            if kafka {
                                s.target = match rec.change {
                                    Change::Upsert(doc) => Some(doc),
                                    _ => None,
                                };
                            }
                        }
                    }
                    // every suspect may have been read before it: none is judged this round
                    Change::Truncate => {
                        for s in suspects.values_mut() {
                            s.touched = true;
                            if kafka && s.partition.is_none_or(|p| p == rec.partition) {
                                s.target = None;
                            }
                        }
                    }
                }
            }
            // judge the keys no record touched
            let settled: Vec<Digest> = suspects.iter().filter(|(_, s)| !s.touched).map(|(h, _)| *h).collect();
            for h in settled {
                let Some(s) = suspects.remove(&h) else { continue };
                self.judge(s, side.norm.columns(), filter.is_none(), report);
            }
            for s in suspects.values_mut() {
                s.touched = false;
            }
        }
        report.unsettled = suspects.len() as u64;
        Ok(mark)
    }

    /// The rows a keyed run compares (None: every row), and (`--since-checkpoint`) where the
    /// next such run starts if this one finds the table equal.
    async fn select(
        &self,
        reader: &mut TableReader,
        norm: &mut Normalizer,
        by_id: bool,
        report: &mut TableReport,
    ) -> Result<(Option<Selection>, Option<Mark>), VerifyError> {
        if let Some(n) = self.opts.sample {
            let (chunks, what) = reader.sample(n).await?;
            report.scope = Some(format!("a sample of {what} (records without a row are not looked for)"));
            return Ok((Some(Selection { chunks, changed: HashMap::with_hasher(BuildDigest) }), None));
        }
        let Some(server_id) = self.opts.since else { return Ok((None, None)) };
        // a key no event touches after this was read in its state of now
        let start = reader.position().await?;
        let (db, table) = (&reader.plan.table_map.database, &reader.plan.table_map.table);
        let state = since::StateKey {
            source: &self.cfg.source.name,
            table: &report.table,
            target: &report.target,
            condition: self.condition(db, table),
        };
        let Some(last) = since::load(&self.cfg.kafka, &state).await? else {
            report.scope = Some("the whole table: no earlier verify found it equal".into());
            return Ok((None, Some(start)));
        };
        let reading = since::Reading { cfg: &self.cfg, server_id, max_keys: self.opts.max_suspects, by_id };
        match since::changed_keys(&reading, &last, &reader.plan, norm).await {
            Since::Whole(why) => {
                report.scope = Some(format!("the whole table: {why}"));
                Ok((None, Some(start)))
            }
            Since::Keys(changed, end) => {
                let literals: Vec<Vec<String>> = changed.values().map(|c| c.literals.clone()).collect();
                let mut chunks = Vec::new();
                for batch in literals.chunks(200) {
                    chunks.push(reader.rows_of(batch).await?);
                }
                report.scope = Some(format!("the {} keys changed since {last}", changed.len()));
                Ok((Some(Selection { chunks, changed }), Some(end)))
            }
        }
    }

    /// Waits until the sink's consumer group has committed `ends` on every partition: the
    /// index then holds every record before them.
    async fn wait_for_sink(&self, e: &ElasticTarget, mut side: Side, ends: &Ends) -> Result<Side, VerifyError> {
        let started = Instant::now();
        loop {
            let (k, group) = (self.cfg.kafka.clone(), e.group.clone());
            let (s, committed) = blocking(move || {
                let c = side.topic.committed(&k, &group);
                (side, c)
            })
            .await?;
            side = s;
            let committed = committed?;
            let behind: Vec<String> = ends
                .iter()
                .filter(|(_, end)| *end > 0)
                .filter_map(|(p, end)| {
                    let at = committed.iter().find(|(q, _)| q == p).map_or(-1, |(_, o)| *o);
                    (at < *end).then(|| format!("partition {p} at {at} of {end}"))
                })
                .collect();
            if behind.is_empty() {
                return Ok(side);
            }
            if started.elapsed() > self.opts.wait {
                return Err(VerifyError::Other(format!(
                    "the Elasticsearch sink (consumer group {}) did not apply {} within {:?} ({}): is sluice sink \
                     elasticsearch running and keeping up? (--wait waits longer)",
                    e.group,
                    side.topic.topic,
                    self.opts.wait,
                    behind.join(", ")
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn too_many(&self, suspects: &Suspects, report: &TableReport) -> Result<(), VerifyError> {
        if suspects.len() > self.opts.max_suspects {
            return Err(VerifyError::Other(format!(
                "{}: more than {} keys differ from {} ({} rows read so far): too many to re-check one by one. Is \
                 sluice run far behind (sluice position show), or was the table never snapshotted (sluice snapshot)? \
                 --max-suspects raises the limit",
                report.table, self.opts.max_suspects, report.against, report.rows
            )));
        }
        Ok(())
    }

    /// Judges a suspect no record touched in the last round.
    ///
    /// `extras`: a target state without a row is extra (false under a condition: the row may
    /// have stopped matching it).
    fn judge(&self, s: Suspect, names: &[String], extras: bool, report: &mut TableReport) {
        let show = self.opts.show;
        match (s.row, s.target) {
            (None, None) => {}
            (None, Some(_)) if !extras => {}
            (Some(r), Some(t)) if r.values == t.values => report.equal += 1,
            (Some(r), None) => report.note(Kind::Missing, r.id, Vec::new(), show),
            (None, Some(t)) => report.note(Kind::Extra, t.id, Vec::new(), show),
            (Some(r), Some(t)) => {
                let differ: Vec<usize> =
                    r.values.iter().zip(&t.values).enumerate().filter(|(_, (a, b))| a != b).map(|(i, _)| i).collect();
                if !differ.is_empty() && differ.iter().all(|i| t.lacks.contains(i)) {
                    report.equal += 1;
                    report.predated(t.lacks.iter().filter_map(|&i| names.get(i)));
                    return;
                }
                let columns = differ
                    .iter()
                    .filter_map(|&i| {
                        Some(ColumnDiff {
                            column: names.get(i)?.clone(),
                            table: r.values.get(i)?.clone(),
                            target: t.values.get(i)?.clone(),
                        })
                    })
                    .collect();
                report.note(Kind::Different, r.id, columns, show);
            }
        }
    }

    /// Reads the suspects' rows again (those whose key is known).
    async fn reread(
        &self,
        reader: &mut TableReader,
        norm: &mut Normalizer,
        suspects: &mut Suspects,
        by_id: bool,
    ) -> Result<(), VerifyError> {
        let keys: Vec<(Digest, Vec<String>)> =
            suspects.iter().filter_map(|(h, s)| s.key.clone().map(|k| (*h, k))).collect();
        let table = norm.table.clone();
        let failed = |e: String| VerifyError::Other(format!("{table}: {e}"));
        for batch in keys.chunks(200) {
            for (h, _) in batch {
                if let Some(s) = suspects.get_mut(h) {
                    s.row = None;
                }
            }
            let literals: Vec<Vec<String>> = batch.iter().map(|(_, k)| k.clone()).collect();
            let chunk = reader.rows_of(&literals).await?;
            let mut values = Vec::new();
            for packet in &chunk.rows {
                parse_row(&reader.plan, &chunk.columns, packet, &mut values)?;
                let h = if by_id { None } else { Some(norm.row_bytes(&mut values).map_err(&failed)?.0) };
                let doc = norm.row(&mut values).map_err(&failed)?;
                if let Some(s) = suspects.get_mut(&h.unwrap_or_else(|| id_digest(&doc.id))) {
                    s.row = Some(doc);
                }
            }
        }
        Ok(())
    }

    /// Waits until the publisher's committed checkpoint is at or past `at`.
    async fn wait_for_checkpoint(&self, at: &table::Mark) -> Result<(), VerifyError> {
        let started = Instant::now();
        loop {
            let cp = crate::kafka::committed_checkpoint(&self.cfg.kafka, &self.cfg.source.name)
                .await
                .map_err(VerifyError::Kafka)?;
            let passed = cp.as_ref().is_some_and(|c| at.passed_by(c));
            if passed {
                return Ok(());
            }
            if started.elapsed() > self.opts.wait {
                let now = cp.map_or_else(|| "none".to_string(), |c| c.to_string());
                return Err(VerifyError::Other(format!(
                    "the publisher's checkpoint of source {:?} did not reach the source's position {at} within {:?} \
                     (it is at {now}): is sluice run running and keeping up? (sluice position show; --wait waits longer)",
                    self.cfg.source.name, self.opts.wait
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// The rows of a keyed run (`--sample`, `--since-checkpoint`).
struct Selection {
    /// The rows (chunks may overlap).
    chunks: Vec<table::Chunk>,
    /// The keys the binlog changed, the rows of those that still exist in `chunks`.
    changed: HashMap<Digest, since::Changed, BuildDigest>,
}

impl Selection {
    /// Every key compared, by identity: the rows' and the changed keys' (whose rows may be
    /// gone), with their document ids (an index looks them up by id).
    fn keys(
        &self,
        plan: &crate::snapshot::plan::TablePlan,
        norm: &mut Normalizer,
        by_id: bool,
    ) -> Result<HashMap<Digest, since::Changed, BuildDigest>, VerifyError> {
        let mut keys = self.changed.clone();
        let failed = |e: String| VerifyError::Other(format!("{}: {e}", plan.name));
        let mut values = Vec::new();
        for chunk in &self.chunks {
            for packet in &chunk.rows {
                parse_row(plan, &chunk.columns, packet, &mut values)?;
                let (h, id) = if by_id {
                    let id = norm.row(&mut values).map_err(failed)?.id;
                    (id_digest(&id), id)
                } else {
                    (norm.key_digest(&mut values).map_err(failed)?, String::new())
                };
                keys.entry(h).or_insert(since::Changed { id, literals: Vec::new() });
            }
        }
        Ok(keys)
    }
}

/// Where a comparison's rows come from: the whole table, read ahead, or chosen rows.
enum Rows {
    Ahead(table::Prefetch),
    Given(std::vec::IntoIter<table::Chunk>, Box<TableReader>),
}

impl Rows {
    async fn next(&mut self) -> Result<Option<table::Chunk>, VerifyError> {
        match self {
            Rows::Ahead(p) => p.next().await,
            Rows::Given(chunks, _) => Ok(chunks.next()),
        }
    }

    async fn finish(self) -> Result<TableReader, VerifyError> {
        match self {
            Rows::Ahead(p) => p.finish().await,
            Rows::Given(_, reader) => Ok(*reader),
        }
    }
}

/// A topic reader and the table's normalizer, moved to the blocking pool and back together.
struct Side {
    topic: TopicReader,
    norm: Normalizer,
}

/// Runs blocking work (the Kafka reads) on the blocking pool.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, VerifyError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| VerifyError::Other(format!("a topic read failed: {e}")))
}

/// Reads the record each suspect's state came from: its id and key, and (`values`: the target
/// is the topic) its values.
fn fill_targets(side: &mut Side, suspects: &mut Suspects, values: bool) -> Result<(), VerifyError> {
    // the topic's places are its own records'; an index's are its documents' versions, which
    // are places only for what the sink wrote: a document updated in Elasticsearch, or written
    // there behind the sink's back, has a version Elasticsearch counted itself, the place of
    // no record (a read that waited for it stalled) or of another key's. Such a document is
    // compared as it is.
    let sinks_own = !values;
    let mut places: Vec<(i32, i64)> = suspects.values().filter_map(|s| s.locator).collect();
    if sinks_own {
        let marks = side.topic.watermarks()?;
        places.retain(|&(p, o)| marks.iter().any(|&(q, low, high)| q == p && (low..high).contains(&o)));
    }
    let mut records = side.topic.fetch(&side.norm, &places, !sinks_own)?;
    for (h, s) in suspects.iter_mut() {
        let Some(place) = s.locator.take() else { continue };
        let Some(rec) =
            records.remove(&place).filter(|r| !sinks_own || r.id.as_deref().is_some_and(|id| id_digest(id) == *h))
        else {
            continue;
        };
        if s.key.is_none() {
            s.key = rec.key_literals;
        }
        if s.id.is_empty() {
            s.id = rec.id.unwrap_or_default();
        }
        if let (Change::Upsert(doc), true) = (rec.change, values) {
            s.target = Some(doc);
        }
    }
    Ok(())
}

/// Which target a table is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// Its topic.
    Kafka,
    /// Its Elasticsearch index.
    Elasticsearch,
}

impl TargetKind {
    /// As the reports name it.
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Kafka => "kafka",
            TargetKind::Elasticsearch => "elasticsearch",
        }
    }
}

/// The Elasticsearch side of a table.
struct ElasticTarget {
    es: Elastic,
    index: String,
    group: String,
}

enum Target {
    Kafka,
    Elastic(ElasticTarget),
}

/// How many documents a scroll page or an `_mget` asks for.
const ES_PAGE: usize = 1000;

/// The index's documents, of the keys whose digest `wanted` accepts, with the place of the
/// record that wrote each (its version).
async fn index_state(
    e: &ElasticTarget,
    norm: &Normalizer,
    capacity: usize,
    wanted: impl Fn(Digest) -> bool,
) -> Result<HashMap<Digest, Entry, BuildDigest>, VerifyError> {
    let es_err = |x: crate::elastic::client::ElasticError| VerifyError::Other(format!("{}: {x}", e.index));
    let mut state = HashMap::with_capacity_and_hasher(capacity, BuildDigest);
    let mut scroll = e.es.scan(&e.index, ES_PAGE, true).await.map_err(es_err)?;
    loop {
        let page = e.es.next_page(&mut scroll).await.map_err(es_err)?;
        if page.is_empty() {
            return Ok(state);
        }
        for hit in page {
            let h = id_digest(&hit.id);
            if wanted(h) {
                let (partition, offset) = version_parts(hit.version);
                state.insert(h, Entry::of_doc(&norm.source(&hit.id, hit.source.as_ref()), norm, partition, offset));
            }
        }
    }
}

/// Names the suspects no record named: documents left without a row whose version is not the
/// place of a record of theirs (Elasticsearch versioned them: written behind the sink's back,
/// see [`fill_targets`]). One more read of the index, ids and versions only, and only when
/// there are such documents: the passes keep no id per key for this rare case.
async fn name_unnamed(e: &ElasticTarget, suspects: &mut Suspects) -> Result<(), VerifyError> {
    if !suspects.values().any(|s| s.id.is_empty()) {
        return Ok(());
    }
    let es_err = |x: crate::elastic::client::ElasticError| VerifyError::Other(format!("{}: {x}", e.index));
    let mut scroll = e.es.scan(&e.index, ES_PAGE, false).await.map_err(es_err)?;
    loop {
        let page = e.es.next_page(&mut scroll).await.map_err(es_err)?;
        if page.is_empty() {
            return Ok(());
        }
        for hit in page {
            if let Some(s) = suspects.get_mut(&id_digest(&hit.id)).filter(|s| s.id.is_empty()) {
                s.id = hit.id;
            }
        }
    }
}

/// The index's documents of these ids, with the place of the record that wrote each.
async fn index_entries(
    e: &ElasticTarget,
    norm: &Normalizer,
    ids: &[String],
) -> Result<HashMap<Digest, Entry, BuildDigest>, VerifyError> {
    let mut state = HashMap::with_capacity_and_hasher(ids.len(), BuildDigest);
    for batch in ids.chunks(ES_PAGE) {
        let hits = e.es.mget(&e.index, batch).await.map_err(|x| VerifyError::Other(format!("{}: {x}", e.index)))?;
        for hit in hits {
            let (partition, offset) = version_parts(hit.version);
            let doc = norm.source(&hit.id, hit.source.as_ref());
            state.insert(id_digest(&hit.id), Entry::of_doc(&doc, norm, partition, offset));
        }
    }
    Ok(state)
}

/// The suspects' documents as the index has them now.
async fn documents(e: &ElasticTarget, norm: &Normalizer, suspects: &mut Suspects) -> Result<(), VerifyError> {
    let ids: Vec<String> = suspects.values().filter(|s| !s.id.is_empty()).map(|s| s.id.clone()).collect();
    for batch in ids.chunks(ES_PAGE) {
        for id in batch {
            if let Some(s) = suspects.get_mut(&id_digest(id)) {
                s.target = None;
            }
        }
        let hits = e.es.mget(&e.index, batch).await.map_err(|x| VerifyError::Other(format!("{}: {x}", e.index)))?;
        for hit in hits {
            if let Some(s) = suspects.get_mut(&id_digest(&hit.id)) {
                s.partition = Some(version_parts(hit.version).0);
                s.target = Some(norm.source(&hit.id, hit.source.as_ref()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verifier(extra: &str) -> Verifier {
        // nothing listens on port 9 of loopback: a table that is compared fails fast
        let text = format!(
            "[source]\nname = \"shop\"\nurl = \"mysql://repl@127.0.0.1:9\"\n[kafka]\nbrokers = \"127.0.0.1:9\"\n\
             [registry]\nurl = \"http://127.0.0.1:9\"\n{extra}"
        );
        let cfg = Config::parse(&text, std::path::Path::new("sluice.toml"), Vec::new()).unwrap();
        let opts = Options {
            chunk: 100,
            memory_limit: 1 << 20,
            wait: Duration::from_secs(1),
            rounds: 1,
            max_suspects: 10,
            show: 10,
            filters: HashMap::new(),
            sample: None,
            since: None,
        };
        Verifier::new(cfg, opts).unwrap()
    }

    /// A table `[elasticsearch]` leaves out (exclude, include, a routed topic) is reported
    /// against Elasticsearch as skipped with the reason, not left out of the report silently.
    #[tokio::test]
    async fn tables_the_sink_does_not_sync_are_named() {
        let v = verifier(
            "[[routes]]\ntables = \"shop.audit\"\ntopic = \"audit-all\"\n[elasticsearch]\nurl = \"http://127.0.0.1:9\"\n\
             include = [\"shop.*\"]\nexclude = [\"shop.tmp_*\", \"shop.secret\"]\n",
        );
        let skipped = |db: &'static str, table: &'static str| {
            let v = &v;
            async move {
                let r = v.table(db, table, TargetKind::Elasticsearch).await;
                assert!(r.error.is_none(), "{r:?}");
                assert_eq!((r.table.as_str(), r.target.as_str()), (format!("{db}.{table}").as_str(), "elasticsearch"));
                let shown = format!("{r:?}");
                r.skipped.unwrap_or_else(|| panic!("{db}.{table} not skipped: {shown}"))
            }
        };
        let why = skipped("shop", "tmp_1").await;
        assert_eq!(why, "not checked against Elasticsearch: excluded by config (elasticsearch.exclude \"shop.tmp_*\")");
        let why = skipped("shop", "secret").await;
        assert!(why.contains("elasticsearch.exclude \"shop.secret\""), "{why}");
        let why = skipped("crm", "people").await;
        assert!(why.contains("excluded by config (no elasticsearch.include pattern matches it)"), "{why}");
        let why = skipped("shop", "audit").await;
        assert!(why.contains("topic audit-all is a [[routes]] topic"), "{why}");
        // a synced table is compared (here: the source cannot be reached, so not verified)
        let r = v.table("shop", "orders", TargetKind::Elasticsearch).await;
        assert!(r.skipped.is_none() && r.error.is_some(), "{r:?}");
        assert_eq!(r.against, "sluice.shop.orders");
    }

    /// A missing index is said as such, naming the table, the index and what to do.
    #[test]
    fn a_missing_index_is_named() {
        let e = VerifyError::NoIndex { table: "shop.orders".into(), index: "orders-v2".into() }.to_string();
        assert!(e.starts_with("shop.orders: index orders-v2 does not exist in Elasticsearch"), "{e}");
        assert!(
            e.contains("[elasticsearch.indices] \"shop.orders\"") && e.contains("sluice sink elasticsearch"),
            "{e}"
        );
    }
}
