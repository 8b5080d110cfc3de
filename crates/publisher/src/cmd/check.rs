//! `sluice check --config FILE`: validate the configuration, connect to the source, run the
//! pre-flight checks, read the committed checkpoint from Kafka and say how far behind the
//! server it is, and report every finding.

use std::path::PathBuf;

use clap::Args;

use super::Exit;
use crate::archive::read::{Archive, Coverage};
use crate::config::{Config, SnapshotMode};
use crate::console::Report;
use crate::kafka::positions_topic;
use crate::pipeline::start::{apply_filters, StartSettings};
use crate::position::{bytes_past, Checkpoint, SnapshotProgress, TableState};
use crate::process::now_ms;
use crate::source::{preflight, server, ServerFacts};

/// Arguments of `sluice check`.
#[derive(Debug, Args)]
#[command(after_long_help = "\
Examples:
  sluice check --config sluice.toml
  SLUICE_SOURCE__URL=mysql://repl@db2:3306 sluice check -c sluice.toml

Every problem is listed at once, each with what to change; the last line is the committed
checkpoint (where a restart resumes) and how far the server has moved past it. Exit 0 when the
source is ready (warnings allowed), 1 when a check failed, 2 when the configuration itself is
invalid.")]
pub struct CheckArgs {
    /// The configuration file (`SLUICE_<SECTION>__<KEY>` environment variables override it).
    #[arg(long, short = 'c', value_name = "FILE", env = "SLUICE_CONFIG")]
    config: PathBuf,
}

/// Runs `sluice check`; returns the exit code (0 when every check passes, 1 when a check
/// fails, 2 when the configuration itself is invalid).
pub fn run(args: CheckArgs) -> Exit {
    let (cfg, strays): (Config, _) = match super::load_config_noting("sluice check", &args.config) {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    let mut out = Report::default();
    crate::report!(out, "[ok] config: {} is valid", args.config.display());
    // a typo of a key's variable leaves the key as the file has it: said, not an error
    for s in strays {
        crate::report!(out, "[warning] environment: {s}");
    }
    // the [archive] section is sluice archive's: checked as that command loads it
    let archive_ok = match archive_problems(&args.config) {
        None => true,
        Some(Ok(())) => {
            crate::report!(out, "[ok] archive: the [archive] section is valid for sluice archive");
            true
        }
        Some(Err(e)) => {
            crate::report!(out, "[ERROR] archive: {e}");
            false
        }
    };
    let connect = match crate::source::SourceConfig::for_run(&cfg.source) {
        Ok(c) => c.connect,
        Err(e) => {
            crate::eline!("sluice check: {e}");
            return Exit::Usage;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            crate::eline!("sluice check: {e}");
            return Exit::Failure;
        }
    };
    let exit = rt.block_on(async {
        let mut conn = match sluice_protocol::Connection::connect(connect.clone()).await {
            Ok(c) => c,
            Err(e) => {
                crate::report!(out, "[ERROR] connect: {}:{} as {}: {e}", connect.host, connect.port, connect.user);
                return Exit::Failure;
            }
        };
        crate::report!(
            out,
            "[ok] connect: {}:{} as {}{}",
            connect.host,
            connect.port,
            connect.user,
            if conn.is_tls() { " (TLS)" } else { "" }
        );
        let report =
            preflight::run(&mut conn, cfg.source.server_id, "source.server_id", &cfg.source.report_host()).await;
        let source_ok = match &report {
            Ok(report) => {
                let mut report = report.clone();
                // `sluice run` waits for a predecessor still holding the server id; for `sluice
                // check` the id held by this same source means Sluice is running (or just stopped)
                let predecessor = report.predecessor_registered;
                for f in &mut report.findings {
                    if f.check == "server_id" && predecessor && f.level == preflight::Level::Error {
                        f.level = preflight::Level::Ok;
                        f.message = format!(
                            "{} is in use by this source's own replica ({}): Sluice is running, or stopped moments ago",
                            cfg.source.server_id,
                            cfg.source.report_host()
                        );
                    }
                    crate::report!(out, "{f}");
                }
                !report.has_errors()
            }
            Err(e) => {
                crate::report!(out, "[ERROR] checks: {e}");
                false
            }
        };
        let tables_ok = match table_lines(&mut conn, &cfg).await {
            Ok((ok, lines)) => {
                for line in lines {
                    crate::report!(out, "{line}");
                }
                ok
            }
            Err(e) => {
                crate::report!(out, "[ERROR] tables: listing the captured tables: {e}");
                false
            }
        };
        let source_ok = source_ok && tables_ok;
        let registry_ok = match crate::registry::RegistryClient::new(&cfg.registry) {
            Ok(r) => match r.subjects().await {
                Ok(n) => {
                    crate::report!(
                        out,
                        "[ok] registry: {} answers ({n} subjects)",
                        crate::config::redact_url(&cfg.registry.url)
                    );
                    true
                }
                Err(e) => {
                    crate::report!(out, "[ERROR] registry: {e}");
                    false
                }
            },
            Err(e) => {
                crate::report!(out, "[ERROR] registry: {e}");
                false
            }
        };
        let checkpoint = crate::kafka::committed_checkpoint(&cfg.kafka, &cfg.source.name).await;
        let topic = positions_topic(&cfg.kafka.topic_prefix);
        let committed = match &checkpoint {
            Ok(Some(c)) => Some(c.clone()),
            _ => None,
        };
        let checkpoint_ok = match checkpoint {
            Ok(None) => {
                // the first start: can the server serve source.start?
                let resolved = match &report {
                    Ok(report) => {
                        let facts =
                            ServerFacts { mariadb: report.mariadb, gtid_position: report.gtid_position.clone() };
                        server::resolve_start(&mut conn, &cfg.source.start, &facts)
                            .await
                            .map(|r| format!(" (now {r})"))
                            .map_err(|e| e.to_string())
                    }
                    Err(_) => Ok(String::new()),
                };
                match resolved {
                    Ok(now) => {
                        crate::report!(
                            out,
                            "[ok] checkpoint: none committed on {topic} for source {:?}: the first start begins at \
                             source.start = \"{}\"{now}",
                            cfg.source.name,
                            cfg.source.start
                        );
                        let implied = cfg.snapshot.mode_implied.clone();
                        let snapshot = match cfg.snapshot.mode {
                            SnapshotMode::Never if implied.is_some() => implied.as_deref().unwrap_or_default(),
                            SnapshotMode::Never => "none (snapshot.mode = never)",
                            SnapshotMode::SchemaOnly => "the captured tables' schemas are registered, no rows read",
                            SnapshotMode::Initial | SnapshotMode::WhenNeeded => {
                                "the first start reads the rows of every captured table not in snapshot.exclude"
                            }
                        };
                        crate::report!(out, "[ok] snapshot: {snapshot}");
                        true
                    }
                    Err(e) => {
                        crate::report!(out, "[ERROR] start: source.start = \"{}\": {e}", cfg.source.start);
                        false
                    }
                }
            }
            Ok(Some(c)) => match server::binary_logs(&mut conn).await {
                Ok(logs) => {
                    let (ok, text) = checkpoint_state_with_archive(&cfg, &c, &logs, &mut conn).await;
                    let line = format!("[{}] checkpoint: {text}", if ok { "ok" } else { "ERROR" });
                    let purged_but_needed = !ok && cfg.snapshot.mode == SnapshotMode::WhenNeeded;
                    if purged_but_needed {
                        crate::report!(
                            out,
                            "{}; snapshot.mode = when_needed: the next start takes a new snapshot and streams from the \
                             server's current position",
                            line.replacen("[ERROR]", "[warn]", 1)
                        );
                    } else {
                        crate::report!(out, "{line}");
                    }
                    let mut progress = c.snapshot.clone();
                    let left_out =
                        progress.as_mut().map(|p| apply_filters(StartSettings::of(&cfg), p)).unwrap_or_default();
                    if !left_out.is_empty() {
                        crate::report!(
                            out,
                            "[warning] snapshot: the configuration leaves out tables the committed snapshot has not \
                             finished, so the next start does not read them: {}",
                            left_out.join(", ")
                        );
                    }
                    for line in snapshot_lines(progress.as_ref()) {
                        crate::report!(out, "{line}");
                    }
                    ok || purged_but_needed
                }
                // without the list, a missing file would look purged: say what failed instead
                Err(e) => {
                    crate::report!(out, "[ERROR] checkpoint: {}:{}; SHOW BINARY LOGS failed: {e}", c.file, c.position);
                    false
                }
            },
            Err(e) => {
                crate::report!(out, "[ERROR] kafka: reading the checkpoint from {topic} on {}: {e}", cfg.kafka.brokers);
                false
            }
        };
        let mut failover_ok = true;
        for index in 1..cfg.source.servers().len() {
            let (ok, lines) = failover_lines(&cfg, index, committed.as_ref()).await;
            for line in lines {
                crate::report!(out, "{line}");
            }
            failover_ok &= ok;
        }
        if source_ok && checkpoint_ok && registry_ok && failover_ok && archive_ok {
            Exit::Ok
        } else {
            Exit::Failure
        }
    });
    match out.failure() {
        Some(e) => {
            crate::eline!("sluice check: writing the report failed: {e}");
            Exit::Output
        }
        None => exit,
    }
}

/// The checks of failover server `index` (of `source.servers()`): reachable with the same
/// credentials, set up for capture, and able to serve the committed checkpoint by its GTIDs
/// (a replica behind it, or one that purged what follows it, is an error naming the GTIDs).
async fn failover_lines(cfg: &Config, index: usize, checkpoint: Option<&Checkpoint>) -> (bool, Vec<String>) {
    let servers = cfg.source.servers();
    let name = servers[index % servers.len()].to_string();
    let mut lines = Vec::new();
    let connect = match crate::source::SourceConfig::for_server(&cfg.source, index) {
        Ok(c) => c.connect,
        Err(e) => return (false, vec![format!("[ERROR] failover {name}: {e}")]),
    };
    let mut conn = match sluice_protocol::Connection::connect(connect).await {
        Ok(c) => c,
        Err(e) => {
            return (
                false,
                vec![format!("[ERROR] failover {name}: cannot connect: {e} (Sluice could not fail over to it now)")],
            )
        }
    };
    let report =
        match preflight::run(&mut conn, cfg.source.server_id, "source.server_id", &cfg.source.report_host()).await {
            Ok(r) => r,
            Err(e) => return (false, vec![format!("[ERROR] failover {name}: checks: {e}")]),
        };
    let mut ok = true;
    for f in report.findings.iter().filter(|f| f.level != preflight::Level::Ok) {
        // a server id held by this source's own replica is Sluice itself (streaming from here)
        if f.check == "server_id" && report.predecessor_registered {
            continue;
        }
        ok &= f.level != preflight::Level::Error;
        lines.push(format!("{} (failover {name})", f));
    }
    let gtids = match checkpoint {
        None => "no checkpoint yet: a first start uses it only for source.start".to_string(),
        Some(c) if c.gtid.is_none() => {
            ok = false;
            lines.push(format!(
                "[ERROR] failover {name}: the checkpoint ({c}) has no GTIDs, so Sluice cannot resume on another server"
            ));
            String::new()
        }
        Some(c) => match c.start() {
            Ok(start) => {
                let facts = ServerFacts { mariadb: report.mariadb, gtid_position: report.gtid_position.clone() };
                match server::resolve_start(&mut conn, &start, &facts).await {
                    Ok(_) => format!("can resume the checkpoint by its GTIDs ({start})"),
                    Err(e) => {
                        ok = false;
                        lines.push(format!("[ERROR] failover {name}: cannot resume the checkpoint here: {e}"));
                        String::new()
                    }
                }
            }
            Err(e) => {
                ok = false;
                lines.push(format!("[ERROR] failover {name}: {e}"));
                String::new()
            }
        },
    };
    if ok {
        lines.insert(0, format!("[ok] failover {name}: reachable, set up for capture; {gtids}"));
    }
    (ok, lines)
}

/// When the configuration has an `[archive]` section (in the file or from `SLUICE_ARCHIVE__*`):
/// whether `sluice archive` would take it.
fn archive_problems(path: &std::path::Path) -> Option<Result<(), String>> {
    let env = crate::process::env_vars(&["SLUICE_"]).ok()?;
    let in_file = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .is_some_and(|t| t.contains_key("archive"));
    if !in_file && !env.iter().any(|(k, _)| k.starts_with("SLUICE_ARCHIVE__")) {
        return None;
    }
    Some(<crate::config::ArchiveConfig as crate::config::Load>::load(path, env).map(|_| ()).map_err(|e| e.to_string()))
}

/// How many captured tables this user can read, each table it cannot named with the GRANT to
/// run (an error when a snapshot reads rows: they would be refused mid-snapshot), and each
/// `filter.include` pattern that matches no table the server shows (a table without any
/// privilege is invisible). True when nothing is an error.
async fn table_lines(
    conn: &mut sluice_protocol::Connection,
    cfg: &Config,
) -> sluice_protocol::Result<(bool, Vec<String>)> {
    /// Beyond this many tables, the rest are not probed one by one.
    const PROBED: usize = 2000;
    let filter = crate::filter::TableFilter::from_config(&cfg.filter);
    let tables = crate::schema::load::load_from_server(conn, &filter).await?;
    let reads_rows = matches!(cfg.snapshot.mode, SnapshotMode::Initial | SnapshotMode::WhenNeeded);
    let mut lines = Vec::new();
    let mut ok = true;
    let mut refused = Vec::new();
    for t in tables.iter().take(PROBED) {
        if let Some(why) = server::select_refused(conn, &t.database, &t.table).await? {
            refused.push((format!("{}.{}", t.database, t.table), why));
        }
    }
    let probed = tables.len().min(PROBED);
    let unprobed = if tables.len() > PROBED { format!(" (the first {PROBED} probed)") } else { String::new() };
    if refused.is_empty() {
        lines.push(format!("[ok] tables: {} captured tables, each readable with SELECT{unprobed}", tables.len()));
    } else {
        let level = if reads_rows { "[ERROR]" } else { "[warning]" };
        ok = !reads_rows;
        let why = if reads_rows {
            "the snapshot reads them"
        } else {
            "snapshots (`sluice snapshot`) and schema lookups need it"
        };
        lines.push(format!(
            "{level} tables: {} of {probed} captured tables cannot be read ({why}){unprobed}:",
            refused.len()
        ));
        for (name, message) in refused.iter().take(20) {
            lines.push(format!("       {name}: {message}: GRANT SELECT ON {name} TO <user>"));
        }
        if refused.len() > 20 {
            lines.push(format!("       ... and {} more", refused.len() - 20));
        }
    }
    let routes = crate::pipeline::tables::Routes::new(&cfg.routes, &cfg.kafka.topic_prefix);
    for problem in crate::pipeline::start::naming_problems(&routes, &filter, &tables) {
        ok = false;
        lines.push(format!("[ERROR] naming: {problem}"));
    }
    let (keys, paging) = crate::pipeline::start::key_column_problems(&cfg.output.key_columns, &filter, &tables);
    for problem in keys {
        ok = false;
        lines.push(format!("[ERROR] key columns: {problem}"));
    }
    let reads_rows = matches!(cfg.snapshot.mode, SnapshotMode::Initial | SnapshotMode::WhenNeeded);
    for (table, problem) in paging {
        let (db, t) = table.split_once('.').unwrap_or_default();
        let snapshotted = reads_rows && !cfg.snapshot.exclude.iter().any(|p| crate::filter::table_matches(p, db, t));
        ok &= !snapshotted;
        // otherwise only a snapshot asked for later (`sluice snapshot`) would be refused
        lines.push(format!("{} key columns: {problem}", if snapshotted { "[ERROR]" } else { "[warning]" }));
    }
    for (name, condition) in &cfg.snapshot.filters {
        // the server's own parser: a condition must compile where the snapshot puts it
        let (db, table) = name.split_once('.').unwrap_or((name.as_str(), ""));
        let sql = format!(
            "EXPLAIN SELECT 1 FROM {}.{} WHERE ({condition})",
            crate::render::ident(db),
            crate::render::ident(table)
        );
        if let Err(e) = conn.query(&sql).await {
            ok = false;
            lines.push(format!("[ERROR] snapshot.where.{name:?}: the server refuses the condition: {e}"));
        }
    }
    for pattern in &cfg.filter.include {
        if !tables.iter().any(|t| crate::filter::table_matches(pattern, &t.database, &t.table)) {
            lines.push(format!(
                "[warning] tables: filter.include {pattern:?} matches no table this user can see: none exists yet, or \
                 the user has no privilege on them (GRANT SELECT ON <db>.<table> TO <user>)"
            ));
        }
    }
    Ok((ok, lines))
}

/// The report lines of a checkpoint's snapshot progress: one for the snapshot, one per table.
pub(crate) fn snapshot_lines(p: Option<&SnapshotProgress>) -> Vec<String> {
    let Some(p) = p else { return Vec::new() };
    let done = p.tables.iter().filter(|t| t.state == TableState::Done).count();
    let rows: u64 = p.tables.iter().map(|t| t.rows).sum();
    let mut lines = vec![format!(
        "[ok] snapshot ({}): {} of {} tables done, {rows} rows published{}",
        p.reason,
        done,
        p.tables.len(),
        if p.is_active() { "; in progress" } else { "" }
    )];
    for t in &p.tables {
        let estimate = match (t.state, t.estimate) {
            (TableState::Running | TableState::Pending, Some(e)) => format!(" of ~{e}"),
            _ => String::new(),
        };
        let note = t.note.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
        lines.push(format!(
            "       {} {}: {}{estimate} rows, {} chunks{note}",
            t.table,
            t.state.name(),
            t.rows,
            t.chunks
        ));
    }
    lines
}

/// Where a committed checkpoint stands against the server's binlogs (`SHOW BINARY LOGS`: name
/// and size, oldest first): how many bytes of binlog the server has written past it, or, false,
/// that its file is gone (a restart could not resume without a gap). The text without a report
/// prefix: `sluice check` puts `[ok] checkpoint:` before it, `sluice position show` the source.
pub(crate) fn checkpoint_state(c: &Checkpoint, logs: &[(String, u64)], now_ms: i64) -> (bool, String) {
    let age = (now_ms - c.ts_ms).max(0) / 1000;
    let at = format!("{c}, committed {age} s ago");
    if c.file.is_empty() {
        // a start by GTID: the file is known once the stream names it
        return (true, format!("{at}; the server finds its file when the stream starts"));
    }
    let Some(behind) = bytes_past(logs, &c.file, c.position) else {
        let earliest = logs.first().map_or("none", |(f, _)| f.as_str());
        return (
            false,
            format!(
                "{at}; {} is no longer on the server (earliest: {earliest}), so a restart cannot resume without \
                 losing changes: move the checkpoint with `sluice position set --to earliest` (or current) \
                 knowingly, and fill the gap",
                c.file
            ),
        );
    };
    let last = logs.last().map_or(String::new(), |(f, s)| format!("{f}:{s}"));
    (true, format!("{at}; the server is at {last}, {behind} bytes of binlog past it"))
}

/// [`checkpoint_state`], and for a purged checkpoint whether `source.archive` bridges it (then
/// the next start reads the archive first, and the checkpoint is fine).
pub(crate) async fn checkpoint_state_with_archive(
    cfg: &Config,
    c: &Checkpoint,
    logs: &[(String, u64)],
    conn: &mut sluice_protocol::Connection,
) -> (bool, String) {
    let (ok, line) = checkpoint_state(c, logs, now_ms());
    let Some(root) = cfg.source.archive.as_deref().filter(|_| !ok) else { return (ok, line) };
    let coverage = match Archive::open(root, cfg.source.archive_credentials_file.as_deref()) {
        Ok(a) => {
            let start = server::oldest_start_state(conn, logs).await;
            crate::archive::read::coverage(&a, logs, start.as_deref(), &c.file).await
        }
        Err(e) => Err(e),
    };
    match coverage {
        Ok(Coverage::Covered { files, bytes }) => (
            true,
            format!(
                "{c}; {} is no longer on the server, but the archive in {root} covers the gap: the next start reads \
                 {files} archived file(s) ({bytes} bytes), then the server's stream",
                c.file
            ),
        ),
        Ok(Coverage::Gap(why)) => (false, format!("{line}; source.archive does not help: {why}")),
        Err(e) => (false, format!("{line}; source.archive cannot be read: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(file: &str, position: u64) -> Checkpoint {
        Checkpoint {
            file: file.into(),
            position,
            gtid: Some("0-1-7".into()),
            gtid_flavor: Some("mariadb".into()),
            ts_ms: 1_000_000,
            version: 1,
            schema_version: None,
            snapshot: None,
            signals_offset: None,
            stopped_ms: None,
        }
    }

    #[test]
    fn checkpoint_lines() {
        let logs = [("b.000001".to_string(), 1000), ("b.000002".to_string(), 500), ("b.000003".to_string(), 300)];
        let (ok, line) = checkpoint_state(&cp("b.000002", 200), &logs, 1_060_000);
        assert!(ok);
        assert_eq!(
            line,
            "b.000002:200 (GTID 0-1-7), committed 60 s ago; the server is at b.000003:300, 600 \
             bytes of binlog past it"
        );
        let (ok, line) = checkpoint_state(&cp("b.000003", 300), &logs, 1_000_000);
        assert!(ok && line.ends_with("0 bytes of binlog past it"), "{line}");
        let (ok, line) = checkpoint_state(&cp("a.000009", 4), &logs, 1_000_000);
        assert!(!ok);
        assert!(line.contains("a.000009 is no longer on the server (earliest: b.000001)"), "{line}");
    }
}
