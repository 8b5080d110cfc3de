//! `sluice check --config FILE`: validate the configuration, connect to the source, run the
//! pre-flight checks, read the committed checkpoint from Kafka and say how far behind the
//! server it is, and report every finding.

use std::path::PathBuf;

use clap::Args;

use super::Exit;
use crate::config::{Config, SnapshotMode};
use crate::console::Report;
use crate::kafka::positions_topic;
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
    let cfg = match Config::load(&args.config, std::env::vars()) {
        Ok(c) => c,
        Err(e) => {
            crate::eline!("sluice check: {e}");
            return Exit::Usage;
        }
    };
    let mut out = Report::default();
    crate::report!(out, "[ok] config: {} is valid", args.config.display());
    let connect = match crate::source::SourceConfig::for_run(&cfg) {
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
        let (k, source) = (cfg.kafka.clone(), cfg.source.name.clone());
        let checkpoint = tokio::task::spawn_blocking(move || crate::kafka::read_checkpoint(&k, &source)).await;
        let topic = positions_topic(&cfg.kafka.topic_prefix);
        let checkpoint_ok = match checkpoint {
            Ok(Ok(None)) => {
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
                        let snapshot = match cfg.snapshot.mode {
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
            Ok(Ok(Some(c))) => match server::binary_logs(&mut conn).await {
                Ok(logs) => {
                    let (ok, line) = describe_checkpoint(&c, &logs, now_ms());
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
                    for line in snapshot_lines(c.snapshot.as_ref()) {
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
            Ok(Err(e)) => {
                crate::report!(out, "[ERROR] kafka: reading the checkpoint from {topic} on {}: {e}", cfg.kafka.brokers);
                false
            }
            Err(e) => {
                crate::report!(out, "[ERROR] kafka: reading the checkpoint: {e}");
                false
            }
        };
        if source_ok && checkpoint_ok {
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

/// The report line for a committed checkpoint against the server's binlogs (`SHOW BINARY
/// LOGS`: name and size, oldest first): how many bytes of binlog the server has written past
/// it, or an error when its file is gone (a restart could not resume without a gap).
pub(crate) fn describe_checkpoint(c: &Checkpoint, logs: &[(String, u64)], now_ms: i64) -> (bool, String) {
    let age = (now_ms - c.ts_ms).max(0) / 1000;
    let at = format!("{c}, committed {age} s ago");
    if c.file.is_empty() {
        // a start by GTID: the file is known once the stream names it
        return (true, format!("[ok] checkpoint: {at}; the server finds its file when the stream starts"));
    }
    let Some(behind) = bytes_past(logs, &c.file, c.position) else {
        let earliest = logs.first().map_or("none", |(f, _)| f.as_str());
        return (
            false,
            format!(
                "[ERROR] checkpoint: {at}; {} is no longer on the server (earliest: {earliest}), so a restart cannot \
                 resume without losing changes: move the checkpoint with `sluice position set --to earliest` (or \
                 current) knowingly, and fill the gap",
                c.file
            ),
        );
    };
    let last = logs.last().map_or(String::new(), |(f, s)| format!("{f}:{s}"));
    (true, format!("[ok] checkpoint: {at}; the server is at {last}, {behind} bytes of binlog past it"))
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
        }
    }

    #[test]
    fn checkpoint_lines() {
        let logs = [("b.000001".to_string(), 1000), ("b.000002".to_string(), 500), ("b.000003".to_string(), 300)];
        let (ok, line) = describe_checkpoint(&cp("b.000002", 200), &logs, 1_060_000);
        assert!(ok);
        assert_eq!(
            line,
            "[ok] checkpoint: b.000002:200 (GTID 0-1-7), committed 60 s ago; the server is at b.000003:300, 600 \
             bytes of binlog past it"
        );
        let (ok, line) = describe_checkpoint(&cp("b.000003", 300), &logs, 1_000_000);
        assert!(ok && line.ends_with("0 bytes of binlog past it"), "{line}");
        let (ok, line) = describe_checkpoint(&cp("a.000009", 4), &logs, 1_000_000);
        assert!(!ok);
        assert!(line.contains("a.000009 is no longer on the server (earliest: b.000001)"), "{line}");
    }
}
