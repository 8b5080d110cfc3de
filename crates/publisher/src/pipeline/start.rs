//! The first start: without a checkpoint, `source.start` is resolved at the server once (for
//! `current` and `earliest` as soon as `sluice run` begins, before Kafka is contacted) and
//! committed as the first checkpoint, with the captured tables' definitions, in a Kafka
//! transaction of its own before anything is published, with the snapshot `snapshot.mode` asks
//! for; every restart then resumes there.
//! `sluice position set` commits a new start the same way.

use super::Error;
use crate::config::{Config, SnapshotMode};
use crate::filter::TableFilter;
use crate::kafka::{schemas_topic, KafkaSink};
use crate::pipeline::tables::{topic_problem, Routes};
use crate::position::{Checkpoint, ResumePoint, SnapshotProgress, StartFrom, TableProgress};
use crate::schema::{Committed, SchemaHistory, TrackedTable};
use crate::source::{CheckedConnection, SourceConfig};

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
pub async fn resolve_configured_start(cfg: &Config, server: usize) -> Result<ResolvedStart, Error> {
    let mut checked = CheckedConnection::open(&SourceConfig::for_server(cfg, server)?).await?;
    let start = resolve_at(cfg, &mut checked, &cfg.source.start).await?;
    // recorded (and said at INFO) once a first checkpoint is committed: unused if one exists
    tracing::debug!(start = %cfg.source.start, position = %start.resume, "Resolved the configured start at the server");
    Ok(start)
}

/// Resolves `start` on a checked connection, with the captured tables' definitions.
pub async fn resolve_at(
    cfg: &Config,
    checked: &mut CheckedConnection,
    start: &StartFrom,
) -> Result<ResolvedStart, Error> {
    let filter = TableFilter::from_config(&cfg.filter);
    let captured = |db: &str, table: &str| filter.matches(db, table);
    let (resume, tables) = checked.resolve(start, Some(&captured)).await?;
    Ok(ResolvedStart { resume, tables })
}

/// Commits `start` as the source's checkpoint, in a Kafka transaction of its own, with the
/// tables' definitions as a new schema history that supersedes what `committed` holds; returns
/// that history once the commit is through.
pub async fn commit_start(
    cfg: &Config,
    sink: &mut KafkaSink,
    committed: Committed,
    start: ResolvedStart,
    snapshot: Option<SnapshotProgress>,
    signals_offset: Option<i64>,
    then: impl FnOnce() + Send + 'static,
) -> Result<SchemaHistory, Error> {
    let mut schemas = committed.into_history(start.tables);
    schemas.flush(sink, &schemas_topic(&cfg.kafka.topic_prefix), &cfg.source.name).await?;
    let checkpoint =
        Checkpoint::of(&start.resume).with_schema_version(schemas.version()).with_snapshot(snapshot, signals_offset);
    sink.commit(&checkpoint, then).await?;
    sink.finish().await?;
    Ok(schemas)
}

/// The snapshot `snapshot.mode` asks for at a first start (`reason`: `initial` or
/// `when_needed`): every captured table there (`tables`, as loaded at the start) that
/// `snapshot.exclude` does not leave out, in name order; None with `never`.
pub fn initial_snapshot(cfg: &Config, tables: &[TrackedTable], reason: &str) -> Option<SnapshotProgress> {
    let reason = match cfg.snapshot.mode {
        SnapshotMode::Never => return None,
        SnapshotMode::SchemaOnly => "schema_only",
        SnapshotMode::Initial | SnapshotMode::WhenNeeded => reason,
    };
    let mut names: Vec<String> = tables
        .iter()
        .filter(|t| !cfg.snapshot.exclude.iter().any(|p| crate::filter::table_matches(p, &t.database, &t.table)))
        .map(|t| format!("{}.{}", t.database, t.table))
        .collect();
    names.sort();
    names.dedup();
    for pattern in unseen_includes(&cfg.filter.include, tables) {
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
pub fn apply_filters(cfg: &Config, progress: &mut SnapshotProgress) -> Vec<String> {
    let filter = TableFilter::from_config(&cfg.filter);
    let by_request = progress.reason == "signal";
    progress.leave_out(|name| {
        let (db, table) = name.split_once('.').unwrap_or((name, ""));
        if !filter.matches(db, table) {
            return Some("no longer captured by [filter] (changed since the snapshot was planned)".into());
        }
        let excluded = cfg.snapshot.exclude.iter().any(|p| crate::filter::table_matches(p, db, table));
        (excluded && !by_request)
            .then(|| "left out by snapshot.exclude (changed since the snapshot was planned)".into())
    })
}

/// What keeps the captured `tables` from being published under their names, before anything
/// is registered: topics that collide or that Kafka refuses ([`Routes::collisions`],
/// [`topic_problem`]), and columns whose Avro field names collide
/// ([`crate::avro::field_name_collision`]); each message names the table and the
/// setting that fixes it. `sluice check` and each start of `sluice run` ask.
pub fn naming_problems(cfg: &Config, tables: &[TrackedTable]) -> Vec<String> {
    let routes = Routes::new(&cfg.routes, &cfg.kafka.topic_prefix);
    let filter = TableFilter::from_config(&cfg.filter);
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
pub async fn resolve_early(cfg: &Config) -> Option<ResolvedStart> {
    if !matches!(cfg.source.start, StartFrom::Current | StartFrom::Earliest) {
        return None;
    }
    match resolve_configured_start(cfg, 0).await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "Cannot resolve source.start yet; it is resolved once the source answers");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(database: &str, table: &str) -> TrackedTable {
        TrackedTable::without_columns(database, table)
    }

    #[test]
    fn includes_the_server_does_not_show_are_named() {
        let include: Vec<String> = ["shop.orders", "shop.*", "audit.log", "hr.*"].map(String::from).into();
        let tables = [table("shop", "orders"), table("shop", "items")];
        assert_eq!(unseen_includes(&include, &tables), ["audit.log", "hr.*"]);
        assert!(unseen_includes(&[], &tables).is_empty());
    }
}
