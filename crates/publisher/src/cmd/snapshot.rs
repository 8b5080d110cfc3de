//! `sluice snapshot`: asks the running `sluice run` of a source to snapshot more tables, while
//! it keeps streaming. The tables are checked here first (they exist, `[filter]` captures them,
//! they can be read: a key, or a consistent snapshot), then the request goes to
//! `<prefix>.__signals`; the instance takes it in at a transaction boundary (within a second
//! while changes stream, at the server's next heartbeat on a quiet server: `source.heartbeat`)
//! and records it with its next checkpoint. `--wait` follows the checkpoint until those tables are done.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::Exit;
use crate::config::Config;
use crate::console::Report;
use crate::filter::{table_matches, TableFilter};
use crate::position::{SnapshotProgress, TableState};
use crate::snapshot::plan;
use crate::source::SourceConfig;

/// `sluice snapshot` arguments.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  sluice snapshot --config sluice.toml --table shop.orders
  sluice snapshot -c sluice.toml -t 'shop.*' --wait

The running `sluice run` of the source reads the tables chunk by chunk between binlog events
(no lock; the other tables keep streaming) and publishes their rows as op \"r\" records. A table
already being read is not read twice; one read before is read again. `sluice check` shows the
progress. Exit 0: requested (with --wait: done); 1: Kafka or the server failed; 2: a table that
does not exist, is not captured by [filter], or cannot be read; 75: --timeout passed first (the
request stays: the instance takes it in when it runs).")]
pub struct SnapshotArgs {
    /// The configuration file of the running instance.
    #[arg(long, short = 'c', env = "SLUICE_CONFIG")]
    pub config: PathBuf,
    /// A table to snapshot, `db.table` (wildcards `*` and `?` allowed; repeat for more).
    #[arg(long = "table", short = 't', required = true)]
    pub tables: Vec<String>,
    /// Wait until the tables are done, printing their progress.
    #[arg(long)]
    pub wait: bool,
    /// With `--wait`: give up waiting after this long (e.g. `10m`), exit 75. The request stays
    /// on the signals topic either way.
    #[arg(long, value_parser = humantime::parse_duration, requires = "wait")]
    pub timeout: Option<Duration>,
}

/// Runs `sluice snapshot`.
pub fn run(args: SnapshotArgs) -> Exit {
    let cfg: Config = match super::load_config("sluice snapshot", &args.config) {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    for t in &args.tables {
        if let Some(m) = crate::config::table_pattern_problem(t) {
            crate::eline!("sluice snapshot: --table {m}");
            return Exit::Usage;
        }
    }
    let mut out = Report::default();
    let exit = super::on_runtime("sluice snapshot", request(&cfg, &args, &mut out)).unwrap_or_else(|exit| exit);
    match out.failure() {
        Some(e) if exit == Exit::Ok => {
            crate::eline!("sluice snapshot: writing the output: {e}");
            Exit::Output
        }
        _ => exit,
    }
}

async fn request(cfg: &Config, args: &SnapshotArgs, out: &mut Report) -> Exit {
    let source_cfg = match SourceConfig::for_run(&cfg.source) {
        Ok(c) => c,
        Err(e) => {
            crate::eline!("sluice snapshot: {e}");
            return Exit::Usage;
        }
    };
    let mut conn = match sluice_protocol::Connection::connect(source_cfg.connect.clone()).await {
        Ok(c) => c,
        Err(e) => {
            crate::eline!("sluice snapshot: connecting to the source: {e}");
            return Exit::Failure;
        }
    };
    let existing = match crate::source::server::base_tables(&mut conn).await {
        Ok(t) => t,
        Err(e) => {
            crate::eline!("sluice snapshot: listing the tables: {e}");
            return Exit::Failure;
        }
    };
    let filter = TableFilter::from_config(&cfg.filter);
    let mariadb = conn.is_mariadb();
    let mut tables = Vec::new();
    let mut problems = Vec::new();
    for pattern in &args.tables {
        let matched: Vec<&(String, String)> = existing.iter().filter(|(d, t)| table_matches(pattern, d, t)).collect();
        if matched.is_empty() {
            // the system schemas are not listed (they are never captured): say that, not a grant
            let system = pattern.split_once('.').is_some_and(|(db, _)| {
                ["mysql", "sys", "information_schema", "performance_schema"].contains(&db.to_ascii_lowercase().as_str())
            });
            problems.push(if system {
                format!("{pattern}: the server's system schemas are not captured (a snapshot reads user tables)")
            } else {
                format!(
                    "{pattern}: no such table on the server, or the user has no privilege on it (the snapshot needs \
                     SELECT: GRANT SELECT ON db.table TO the replication user)"
                )
            });
            continue;
        }
        let wildcard = pattern.contains(['*', '?']);
        let mut left_out = Vec::new();
        for (db, table) in matched {
            let name = format!("{db}.{table}");
            if !filter.matches(db, table) {
                if wildcard {
                    // a pattern asks for what [filter] captures of what it matches
                    left_out.push(name);
                } else {
                    problems.push(format!(
                        "{name}: not captured by [filter] (include/exclude): add it there and restart sluice run first"
                    ));
                }
                continue;
            }
            let keys = cfg.output.key_columns.get(&format!("{db}.{table}")).map(Vec::as_slice);
            match plan::load(&mut conn, db, table, cfg.snapshot.filter_of(db, table), keys, mariadb).await {
                Ok(Some(p)) => {
                    let how = match p.method {
                        plan::Method::Chunked(_) => "in chunks by its key",
                        plan::Method::OnePass => "in one pass (no usable key)",
                    };
                    crate::report!(out, "{name}: about {} rows, read {how}", p.estimate.unwrap_or(0));
                    if !tables.contains(&name) {
                        tables.push(name);
                    }
                }
                Ok(None) => problems.push(format!("{name}: no such table")),
                Err(e) => problems.push(e.to_string()),
            }
        }
        if !left_out.is_empty() {
            crate::report!(
                out,
                "{pattern}: {} matching tables are not captured by [filter], so they are not snapshotted: {}",
                left_out.len(),
                left_out.join(", ")
            );
        }
    }
    if tables.is_empty() && problems.is_empty() {
        problems.push(format!("no table that [filter] captures matches {}", args.tables.join(", ")));
    }
    // a table whose topic another captured table has: sluice run stops on its first record
    // (a start refuses both), so the request is refused here rather than sent
    let routes = crate::pipeline::tables::Routes::new(&cfg.routes, &cfg.kafka.topic_prefix);
    for name in &tables {
        let (db, table) = name.split_once('.').unwrap_or_default();
        let topic = routes.topic_of(db, table);
        let other = existing
            .iter()
            .find(|(d, t)| (d != db || t != table) && filter.matches(d, t) && routes.topic_of(d, t) == topic);
        if let Some((d, t)) = other {
            problems.extend(routes.collisions([(d.as_str(), t.as_str()), (db, table)]));
        }
    }
    let _ = conn.quit().await;
    if !problems.is_empty() {
        for p in &problems {
            crate::eline!("sluice snapshot: {p}");
        }
        return Exit::Usage;
    }
    // a first start takes no requests (it begins at the signals' end): say so rather than send
    // one that nobody will read
    match checkpoint(cfg).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            crate::eline!(
                "sluice snapshot: source {:?} has no checkpoint yet: start `sluice run` first (with [snapshot] mode = \
                 \"initial\", its first start reads every included table anyway), then ask for more",
                cfg.source.name
            );
            return Exit::Usage;
        }
        Err(exit) => return exit,
    }
    let offset = match crate::kafka::signals::send_snapshot_request(&cfg.kafka, &cfg.source.name, &tables).await {
        Ok(o) => o,
        Err(e) => {
            crate::eline!("sluice snapshot: {e}");
            return Exit::Failure;
        }
    };
    crate::report!(
        out,
        "requested a snapshot of {} for source {:?} ({}.__signals offset {offset}); sluice run of the source takes it \
         in within seconds (at its next heartbeat on a quiet server), or at its next start if it is not running \
         (see `sluice check`)",
        tables.join(", "),
        cfg.source.name,
        cfg.kafka.topic_prefix
    );
    if !args.wait {
        return Exit::Ok;
    }
    wait(cfg, &tables, offset, args.timeout, out).await
}

/// The source's committed checkpoint; a failure to read it is said here and becomes exit 1.
async fn checkpoint(cfg: &Config) -> Result<Option<crate::position::Checkpoint>, Exit> {
    crate::kafka::committed_checkpoint(&cfg.kafka, &cfg.source.name).await.map_err(|e| {
        crate::eline!("sluice snapshot: reading the checkpoint: {e}");
        Exit::Failure
    })
}

/// How long `--wait` goes without a word while the request is not taken in, then how often
/// it says it still waits.
const QUIET_WAIT: Duration = Duration::from_secs(5);
const WAITING_EVERY: Duration = Duration::from_secs(30);

/// Follows the checkpoint until the request at `offset` is taken in and `tables` are done, or
/// `timeout` passes (exit 75).
async fn wait(cfg: &Config, tables: &[String], offset: i64, timeout: Option<Duration>, out: &mut Report) -> Exit {
    let mut last_line = String::new();
    let started = Instant::now();
    let mut said_waiting: Option<Instant> = None;
    let mut said_stale: Option<Instant> = None;
    loop {
        if let Some(t) = timeout.filter(|t| started.elapsed() >= *t) {
            crate::eline!(
                "sluice snapshot: gave up waiting after {} ({}); the request stays, and sluice run of source {:?} \
                 takes it in when it runs (see `sluice check`)",
                humantime::format_duration(t),
                if last_line.is_empty() { "no instance took the request in" } else { "the tables are not done" },
                cfg.source.name
            );
            return Exit::Timeout;
        }
        let cp = match checkpoint(cfg).await {
            Ok(cp) => cp,
            Err(exit) => return exit,
        };
        let taken = cp.as_ref().and_then(|c| c.signals_offset).is_some_and(|o| o > offset);
        if !taken && started.elapsed() >= QUIET_WAIT && said_waiting.is_none_or(|t| t.elapsed() >= WAITING_EVERY) {
            said_waiting = Some(Instant::now());
            let age = cp.as_ref().map_or(String::new(), |c| {
                format!(
                    "; its last checkpoint was committed {} s ago",
                    (crate::process::now_ms() - c.ts_ms).max(0) / 1000
                )
            });
            crate::report!(
                out,
                "waiting {} s: no running sluice run of source {:?} has taken the request in yet{age} (is it \
                 running? It takes requests in within a second while changes stream, at the server's next \
                 heartbeat when none do)",
                started.elapsed().as_secs(),
                cfg.source.name
            );
        }
        // taken in, then no checkpoint for a while: the instance stopped or cannot commit (a
        // waiter once went on for 12 minutes without a word after its instance was killed)
        let age_s = cp.as_ref().map_or(0, |c| (crate::process::now_ms() - c.ts_ms).max(0) / 1000);
        let stale = taken && age_s >= crate::position::LIVE_WITHIN.as_secs() as i64;
        if taken {
            let p = cp.and_then(|c| c.snapshot).unwrap_or_default();
            let line = progress_line(&p, tables);
            if line != last_line {
                crate::report!(out, "{line}");
                last_line = line;
            }
            let done = tables.iter().all(|t| {
                p.tables.iter().any(|e| &e.table == t && matches!(e.state, TableState::Done | TableState::Skipped))
            });
            if done {
                return Exit::Ok;
            }
            if stale && said_stale.is_none_or(|t| t.elapsed() >= WAITING_EVERY) {
                said_stale = Some(Instant::now());
                crate::report!(
                    out,
                    "waiting: source {:?} committed no checkpoint for {age_s} s: sluice run may have stopped (or is \
                     inside a long read of a table without a key, or a long transaction); the snapshot goes on at \
                     its next chunk when it runs again",
                    cfg.source.name
                );
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One line of the progress of `tables` in `p`.
pub fn progress_line(p: &SnapshotProgress, tables: &[String]) -> String {
    let parts: Vec<String> = tables
        .iter()
        .map(|t| match p.tables.iter().find(|e| &e.table == t) {
            Some(e) => match e.estimate {
                Some(est) if e.state == TableState::Running => {
                    format!("{t} {} {} of ~{est} rows", e.state.name(), e.rows)
                }
                _ => format!("{t} {} {} rows", e.state.name(), e.rows),
            },
            None => format!("{t} not requested"),
        })
        .collect();
    parts.join("; ")
}
