//! Opening an attempt of `sluice run`: the decisions of a start, in one place
//! ([`open_attempt`]). With a committed checkpoint, the replication stream opens there (on
//! another server only by its GTIDs); when the server purged the binlog since, the stream
//! catches up from `source.archive` if it covers the purged files, else with `snapshot.mode =
//! "when_needed"` a new snapshot starts from the present. Without one, the first start: `source.start` is resolved at the server once (for `current` and `earliest`
//! as soon as `sluice run` begins, before Kafka is contacted) and committed as the first
//! checkpoint, with the captured tables' definitions, in a Kafka transaction of its own before
//! anything is published, with the snapshot `snapshot.mode` asks for; every restart then
//! resumes there. `sluice position set` commits a new start the same way ([`commit_start`]).

use std::sync::Arc;

use super::tables::{topic_problem, Routes};
use super::Error;
use crate::config::{Config, FilterSection, KafkaSection, SnapshotMode, SnapshotSection, SourceSection};
use crate::filter::TableFilter;
use crate::kafka::{committed_checkpoint, schemas_topic, KafkaSink};
use crate::metrics::Metrics;
use crate::position::{Checkpoint, ResumePoint, SnapshotProgress, StartFrom, TableProgress};
use crate::schema::{Committed, SchemaHistory, TrackedTable};
use crate::source::{CheckedConnection, ReplicationSource, SourceConfig, SourceError};

/// The sections of the configuration a start is decided by.
#[derive(Debug, Clone, Copy)]
pub struct StartSettings<'c> {
    /// The server, the configured start and the source's name.
    pub source: &'c SourceSection,
    /// Where the checkpoint and the schema history are.
    pub kafka: &'c KafkaSection,
    /// Which tables are captured.
    pub filter: &'c FilterSection,
    /// Whether a start snapshots, and which tables.
    pub snapshot: &'c SnapshotSection,
}

impl<'c> StartSettings<'c> {
    /// The sections of `cfg`.
    pub fn of(cfg: &'c Config) -> StartSettings<'c> {
        StartSettings { source: &cfg.source, kafka: &cfg.kafka, filter: &cfg.filter, snapshot: &cfg.snapshot }
    }
}

/// What an attempt opened: the stream at the committed checkpoint, the tracked schema as of
/// it, and what the checkpoint carries beside the position.
pub struct Opened {
    /// The replication stream, positioned after the last committed transaction.
    pub source: ReplicationSource,
    /// How the stream connects (a snapshot's reads connect the same way).
    pub source_cfg: SourceConfig,
    /// The captured tables' definitions as of the checkpoint.
    pub schemas: SchemaHistory,
    /// The snapshot under way, with today's filters applied.
    pub snapshot: Option<SnapshotProgress>,
    /// The `<prefix>.__signals` offset taken in so far.
    pub signals: Option<i64>,
}

/// Opens an attempt of `sluice run` against server `server` of `source.servers()`, with the
/// sink just connected: reads the committed checkpoint (and renews it: a sign of life, also
/// while the source stays away, so that `sluice position set` refuses to move the checkpoint
/// of a running instance), then resumes there, or records the first start. `first_start`
/// holds `source.start` resolved while no checkpoint exists (see [`resolve_early`]).
///
/// # Errors
/// Kafka, the source, or a checkpoint that cannot be resumed on this server.
pub async fn open_attempt(
    s: StartSettings<'_>,
    server: usize,
    sink: &mut KafkaSink,
    metrics: &Arc<Metrics>,
    first_start: &mut Option<ResolvedStart>,
) -> Result<Opened, Error> {
    let checkpoint = committed_checkpoint(s.kafka, &s.source.name).await?;
    if let Some(c) = &checkpoint {
        sink.commit(&c.clone().renewed(false), || {}).await?;
        sink.finish().await?;
    }
    let source_cfg = SourceConfig::for_server(s.source, server)?;
    // the tracked schema: as committed with the checkpoint, else read from the server at the
    // moment the start position is taken
    let committed = crate::schema::committed(s.kafka, &s.source.name, checkpoint.as_ref()).await?;
    let Some(c) = checkpoint else {
        let start = match first_start.as_ref() {
            Some(r) => r.clone(),
            None => first_start.insert(resolve_configured_start(s, server).await?).clone(),
        };
        let snapshot = initial_snapshot(s, &start.tables, "initial");
        let signals = crate::kafka::signals::end_offset(s.kafka).await?;
        let position = start.resume.clone();
        // Record where the first start begins before anything is published: a restart of this
        // attempt (broker, registry, a fenced or failed transaction) resumes here, never at a
        // later "current".
        let opened = commit_and_open(s, source_cfg, sink, metrics, committed, start, snapshot, signals).await?;
        *first_start = None;
        if let Some(why) = &s.snapshot.mode_implied {
            tracing::info!("{why}");
        }
        tracing::info!(
            start = %s.source.start,
            position = %position,
            snapshot_tables = opened.snapshot.as_ref().map_or(0, |p| p.tables.len()),
            "No checkpoint yet: recorded the configured start as the first checkpoint"
        );
        return Ok(opened);
    };
    *first_start = None;
    let mut snapshot = c.snapshot.clone();
    if let Some(p) = snapshot.as_mut() {
        let left_out = apply_filters(s, p);
        if !left_out.is_empty() {
            tracing::warn!(
                tables = %left_out.join(", "),
                "Snapshot: tables the configuration leaves out now are not read (skipped)"
            );
        }
    }
    if let Some((file, position)) = metrics.last_checkpoint() {
        if (c.file.as_str(), c.position) != (file.as_str(), position) && !c.file.is_empty() {
            tracing::warn!(
                committed = %format!("{file}:{position}"),
                now = %c,
                "The committed checkpoint moved while this instance ran (sluice position set?): resuming where it \
                 is now"
            );
        }
    }
    let servers = s.source.servers();
    if server > 0 && c.gtid.is_none() {
        // a binlog file and position mean nothing on another server
        return Err(SourceError::Start(format!(
            "cannot fail over to {}: the checkpoint ({c}) has no GTIDs to resume by there; enable GTIDs on the \
             servers, or restart Sluice against {} once it is back",
            servers[server % servers.len()],
            s.source.url
        ))
        .into());
    }
    let start = c.start()?;
    tracing::info!(resume = %start, server = %servers[server % servers.len()], "Resuming from the committed checkpoint");
    let filter = TableFilter::from_config(s.filter);
    let load: Option<crate::schema::Captured<'_>> = committed.needs_load().then_some(&filter);
    let purged = match ReplicationSource::start_with_schema(source_cfg.clone(), start, load).await {
        Ok((source, loaded)) => {
            let schemas = committed.into_history(loaded);
            return Ok(Opened { source, source_cfg, schemas, snapshot, signals: c.signals_offset });
        }
        Err(SourceError::Purged(why)) => why,
        Err(e) => return Err(e.into()),
    };
    // the binlog since the checkpoint is gone from the server: the archive, if it has it
    let why = match &s.source.archive {
        // the archive holds source.url's files: a failover server's positions are not in it
        Some(_) if server > 0 => format!(
            "{purged}; source.archive is not read on a failover server ({}): it holds the files of {}",
            servers[server % servers.len()],
            s.source.url
        ),
        Some(root) => {
            let mut checked = CheckedConnection::open(&source_cfg).await?;
            let loaded = match load {
                Some(captured) => checked.load_schema(captured).await?,
                None => Vec::new(),
            };
            let resume = c.resume_point()?;
            let archive = crate::archive::read::Archive::open(root, s.source.archive_credentials_file.as_deref())
                .map_err(|e| SourceError::Archive(format!("source.archive: {e}")))?;
            match ReplicationSource::from_archive(source_cfg.clone(), checked, resume, &archive, Arc::clone(metrics))
                .await
            {
                Ok(source) => {
                    let schemas = committed.into_history(loaded);
                    return Ok(Opened { source, source_cfg, schemas, snapshot, signals: c.signals_offset });
                }
                Err(SourceError::Purged(why)) => why,
                Err(e) => return Err(e.into()),
            }
        }
        None => purged,
    };
    if s.snapshot.mode != SnapshotMode::WhenNeeded {
        return Err(SourceError::Purged(why).into());
    }
    // snapshot again from the present
    tracing::warn!(
        checkpoint = %c,
        "{why}; snapshot.mode = when_needed: taking a new snapshot and streaming from the server's current position"
    );
    let mut checked = CheckedConnection::open(&source_cfg).await?;
    let start = resolve_at(s.filter, &mut checked, &StartFrom::Current).await?;
    drop(checked);
    let snapshot = initial_snapshot(s, &start.tables, "when_needed");
    commit_and_open(s, source_cfg, sink, metrics, committed, start, snapshot, c.signals_offset).await
}

/// Commits `start` as the checkpoint (see [`commit_start`]), then opens the stream there.
#[allow(clippy::too_many_arguments)]
async fn commit_and_open(
    s: StartSettings<'_>,
    source_cfg: SourceConfig,
    sink: &mut KafkaSink,
    metrics: &Arc<Metrics>,
    committed: Committed,
    start: ResolvedStart,
    snapshot: Option<SnapshotProgress>,
    signals: Option<i64>,
) -> Result<Opened, Error> {
    let resume = start.resume.clone();
    let (m, file, pos) = (Arc::clone(metrics), resume.file.clone(), resume.position);
    let then = move || m.commit(&file, pos);
    let schemas = commit_start(s, sink, committed, start, snapshot.clone(), signals, true, then).await?;
    let checked = CheckedConnection::open(&source_cfg).await?;
    let source = ReplicationSource::open(source_cfg.clone(), checked, resume).await?;
    Ok(Opened { source, source_cfg, schemas, snapshot, signals })
}

/// The configured start (`source.start`), resolved at the server into a position, with the
/// captured tables' definitions as of that position.
#[derive(Debug, Clone)]
pub struct ResolvedStart {
    /// The position.
    pub resume: ResumePoint,
    /// The captured tables' definitions there.
    pub tables: Vec<TrackedTable>,
}

/// Resolves `source.start` at server `server` of `source.servers()` (see [`ResolvedStart`]):
/// `source.url` unless it stayed unreachable and Sluice failed over before its first checkpoint.
pub async fn resolve_configured_start(s: StartSettings<'_>, server: usize) -> Result<ResolvedStart, Error> {
    let mut checked = CheckedConnection::open(&SourceConfig::for_server(s.source, server)?).await?;
    let start = resolve_at(s.filter, &mut checked, &s.source.start).await?;
    // recorded (and said at INFO) once a first checkpoint is committed: unused if one exists
    tracing::debug!(start = %s.source.start, position = %start.resume, "Resolved the configured start at the server");
    Ok(start)
}

/// Resolves `start` on a checked connection, with the captured tables' definitions.
pub async fn resolve_at(
    filter: &FilterSection,
    checked: &mut CheckedConnection,
    start: &StartFrom,
) -> Result<ResolvedStart, Error> {
    let filter = TableFilter::from_config(filter);
    let (resume, tables) = checked.resolve(start, Some(&filter)).await?;
    Ok(ResolvedStart { resume, tables })
}

/// Commits `start` as the source's checkpoint, in a Kafka transaction of its own, with the
/// tables' definitions as a new schema history that supersedes what `committed` holds; returns
/// that history once the commit is through. `by_run`: committed by the `sluice run` that
/// streams from it; otherwise (`sluice position set`) it is marked as no running instance's,
/// so that a `set` moments later is not refused as if one ran.
#[allow(clippy::too_many_arguments)]
pub async fn commit_start(
    s: StartSettings<'_>,
    sink: &mut KafkaSink,
    committed: Committed,
    start: ResolvedStart,
    snapshot: Option<SnapshotProgress>,
    signals_offset: Option<i64>,
    by_run: bool,
    then: impl FnOnce() + Send + 'static,
) -> Result<SchemaHistory, Error> {
    let mut schemas = committed.into_history(start.tables);
    super::send_schema_changes(&mut schemas, sink, &schemas_topic(&s.kafka.topic_prefix), &s.source.name).await?;
    let checkpoint = Checkpoint::of(&start.resume)
        .with_schema_version(schemas.version())
        .with_snapshot(snapshot, signals_offset)
        .renewed(!by_run);
    sink.commit(&checkpoint, then).await?;
    sink.finish().await?;
    Ok(schemas)
}

/// The snapshot `snapshot.mode` asks for at a first start (`reason`: `initial` or
/// `when_needed`): every captured table there (`tables`, as loaded at the start) that
/// `snapshot.exclude` does not leave out, in name order; None with `never`.
pub fn initial_snapshot(s: StartSettings<'_>, tables: &[TrackedTable], reason: &str) -> Option<SnapshotProgress> {
    let reason = match s.snapshot.mode {
        SnapshotMode::Never => return None,
        SnapshotMode::SchemaOnly => "schema_only",
        SnapshotMode::Initial | SnapshotMode::WhenNeeded => reason,
    };
    let mut names: Vec<String> = tables
        .iter()
        .filter(|t| !s.snapshot.exclude.iter().any(|p| crate::filter::table_matches(p, &t.database, &t.table)))
        .map(|t| format!("{}.{}", t.database, t.table))
        .collect();
    names.sort();
    names.dedup();
    for pattern in unseen_includes(&s.filter.include, tables) {
        // MariaDB and MySQL list only the tables a user has a privilege on, so a table the user
        // cannot SELECT looks absent: say so, or its rows would silently miss the snapshot
        tracing::warn!(
            pattern,
            "filter.include names tables the server does not show this user: they do not exist yet, or the user \
             lacks SELECT on them (GRANT SELECT ON <db>.* TO <user>); they are not snapshotted"
        );
    }
    Some(SnapshotProgress {
        reason: reason.to_string(),
        started_ms: crate::process::now_ms(),
        tables: names.into_iter().map(TableProgress::pending).collect(),
    })
}

/// Applies today's `[filter]` and `snapshot.exclude` to a committed snapshot plan: a table not
/// finished yet that they leave out now (the configuration changed since the plan was made)
/// is not read; returns the names of those tables. `snapshot.exclude` does not apply to
/// tables a `sluice snapshot` request asked for.
pub fn apply_filters(s: StartSettings<'_>, progress: &mut SnapshotProgress) -> Vec<String> {
    let filter = TableFilter::from_config(s.filter);
    let by_request = progress.reason == "signal";
    progress.leave_out(|name| {
        let (db, table) = name.split_once('.').unwrap_or((name, ""));
        if !filter.matches(db, table) {
            return Some("no longer captured by [filter] (changed since the snapshot was planned)".into());
        }
        let excluded = s.snapshot.exclude.iter().any(|p| crate::filter::table_matches(p, db, table));
        (excluded && !by_request)
            .then(|| "left out by snapshot.exclude (changed since the snapshot was planned)".into())
    })
}

/// What keeps the captured `tables` from being published under their names, before anything
/// is registered: topics that collide or that Kafka refuses ([`Routes::collisions`],
/// [`topic_problem`]), and columns whose Avro field names collide
/// ([`crate::avro::field_name_collision`]); each message names the table and the
/// setting that fixes it. `sluice check` and each start of `sluice run` ask.
pub fn naming_problems(routes: &Routes, filter: &TableFilter, tables: &[TrackedTable]) -> Vec<String> {
    let mut out = routes.collisions(tables.iter().map(|t| (t.database.as_str(), t.table.as_str())));
    for t in tables {
        if let Some(why) = topic_problem(&routes.topic_of(&t.database, &t.table)) {
            out.push(format!("table {}.{}: {why}", t.database, t.table));
        }
        let excluded = filter.excluded_columns(&t.database, &t.table);
        let kept = t
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .filter(|n| !excluded.iter().any(|p| crate::filter::wildcard(p, n)));
        if let Some((first, second, name)) = crate::avro::field_name_collision(kept) {
            out.push(format!(
                "table {db}.{table}: columns {first:?} and {second:?} both become the Avro field name {name:?} (a \
                 field name holds only letters, digits and '_'): leave one out with filter.exclude_columns = \
                 [\"{db}.{table}.{second}\"], rename it, or leave the table out with filter.exclude",
                db = t.database,
                table = t.table
            ));
        }
    }
    out
}

/// What is wrong with `[output.key_columns]` for the captured `tables`, as two lists: what no
/// record of the table can be built with (a column the table lacks, or one
/// `filter.exclude_columns` leaves out: `sluice run` refuses the table's first row), and what
/// only a snapshot of a table without a primary key refuses, since it pages by these columns
/// (a column that may be NULL, or whose type does not compare exactly), with the table's name.
/// Values that repeat are found only when read.
pub fn key_column_problems(
    key_columns: &std::collections::BTreeMap<String, Vec<String>>,
    filter: &TableFilter,
    tables: &[TrackedTable],
) -> (Vec<String>, Vec<(String, String)>) {
    let (mut always, mut snapshot) = (Vec::new(), Vec::new());
    for (name, names) in key_columns {
        let Some(t) = tables.iter().find(|t| format!("{}.{}", t.database, t.table).eq_ignore_ascii_case(name)) else {
            continue;
        };
        let excluded = filter.excluded_columns(&t.database, &t.table);
        for n in names {
            let Some(c) = t.columns.iter().find(|c| c.name.eq_ignore_ascii_case(n)) else {
                always.push(format!("output.key_columns.\"{name}\": {n:?} is not a column of the table"));
                continue;
            };
            if excluded.iter().any(|p| crate::filter::wildcard(p, &c.name)) {
                always.push(format!(
                    "output.key_columns.\"{name}\": {n:?} is left out by filter.exclude_columns but is part of the \
                     record key: keep it, or name other key columns"
                ));
            }
            if !t.primary_key.is_empty() {
                continue;
            }
            let inexact = !crate::snapshot::plan::exact_data_type(&c.type_name);
            if c.nullable {
                snapshot.push((
                    name.clone(),
                    format!(
                    "output.key_columns.\"{name}\": {n:?} may be NULL, so a snapshot cannot page the table by it: name \
                     NOT NULL columns that identify a row, or leave the table out of snapshots (snapshot.exclude)"
                ),
                ));
            } else if inexact {
                snapshot.push((
                    name.clone(),
                    format!(
                    "output.key_columns.\"{name}\": {n:?} is {}, whose values do not compare exactly, so a snapshot \
                     cannot page the table by it: name other columns, or leave the table out of snapshots \
                     (snapshot.exclude)",
                    c.sql_type
                ),
                ));
            }
        }
    }
    (always, snapshot)
}

/// The `filter.include` patterns that match none of `tables` (the tables the server shows).
fn unseen_includes<'a>(include: &'a [String], tables: &[TrackedTable]) -> Vec<&'a str> {
    include
        .iter()
        .filter(|p| !tables.iter().any(|t| crate::filter::table_matches(p, &t.database, &t.table)))
        .map(String::as_str)
        .collect()
}

/// Resolves a relative `source.start` (`current`, `earliest`) as `sluice run` begins, before
/// Kafka is contacted: a broker that answers only later must not move the start past the
/// changes written meanwhile. Unused when a checkpoint turns out to exist; a source that does
/// not answer yet is resolved when it does.
pub async fn resolve_early(s: StartSettings<'_>) -> Option<ResolvedStart> {
    if !matches!(s.source.start, StartFrom::Current | StartFrom::Earliest) {
        return None;
    }
    match resolve_configured_start(s, 0).await {
        Ok(s) => Some(s),
        Err(Error::Source(e)) if e.is_predecessor_registered() => {
            // a restart moments after a stop: the usual case, not worth a warning
            tracing::info!("The previous run's replication connection is still registered; source.start is resolved once the server drops it");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "Cannot resolve source.start yet; it is resolved once the source answers");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::TrackedColumn;

    fn table(database: &str, table: &str) -> TrackedTable {
        TrackedTable::without_columns(database, table)
    }

    #[test]
    fn key_columns_are_checked_against_the_tables() {
        let col = |name: &str, type_name: &str, nullable: bool| TrackedColumn {
            name: name.into(),
            sql_type: type_name.to_uppercase(),
            type_name: type_name.into(),
            unsigned: false,
            charset: None,
            enum_values: None,
            set_values: None,
            nullable,
        };
        let mut log = table("shop", "log");
        log.columns = vec![col("at", "datetime", false), col("who", "varchar", true), col("score", "double", false)];
        let mut orders = table("shop", "orders");
        orders.columns = vec![col("id", "int", false), col("note", "varchar", true)];
        orders.primary_key = vec!["id".into()];
        let keys: std::collections::BTreeMap<String, Vec<String>> = [
            ("shop.log".to_string(), vec!["at".to_string(), "who".into(), "score".into(), "nope".into()]),
            ("shop.orders".to_string(), vec!["note".to_string()]),
            ("shop.gone".to_string(), vec!["x".to_string()]),
        ]
        .into();
        let filter = crate::config::FilterSection {
            exclude_columns: vec!["shop.orders.note".into()],
            ..crate::config::FilterSection::default()
        };
        let (always, paging) = key_column_problems(&keys, &TableFilter::from_config(&filter), &[log, orders]);
        assert_eq!(always.len(), 2, "{always:#?}");
        assert!(always[0].contains("\"shop.log\": \"nope\" is not a column of the table"), "{always:#?}");
        assert!(always[1].contains("\"shop.orders\": \"note\" is left out by filter.exclude_columns"), "{always:#?}");
        // only the table without a primary key is paged by them; "at" is fine
        let paging: Vec<&str> = paging.iter().map(|(t, m)| (assert_eq!(t, "shop.log"), m.as_str()).1).collect();
        assert_eq!(paging.len(), 2, "{paging:#?}");
        assert!(paging[0].contains("\"who\" may be NULL"), "{paging:#?}");
        assert!(paging[1].contains("\"score\" is DOUBLE, whose values do not compare exactly"), "{paging:#?}");
    }

    #[test]
    fn includes_the_server_does_not_show_are_named() {
        let include: Vec<String> = ["shop.orders", "shop.*", "audit.log", "hr.*"].map(String::from).into();
        let tables = [table("shop", "orders"), table("shop", "items")];
        assert_eq!(unseen_includes(&include, &tables), ["audit.log", "hr.*"]);
        assert!(unseen_includes(&[], &tables).is_empty());
    }
}
