//! `sluice position show|set --config FILE`: the committed checkpoint of a source, and the
//! safe way to move it (after a DDL Sluice cannot follow, a purged binlog, or to skip a stretch
//! of history knowingly) without hand-made records on the positions topic.
//!
//! `set` resolves the new start at the server exactly as a first start does, reads the
//! captured tables' definitions there at that moment (a new schema history, superseding the
//! old one), and commits both with the checkpoint in one Kafka transaction under the source's
//! transactional id. It refuses while `sluice run` for the source may be running: its
//! checkpoint is younger than `LIVE_WITHIN` and not marked as a clean stop (an instance
//! commits at least every `LIVENESS_EVERY`, also while it retries), or the server lists it as
//! a replica; `--force` takes over anyway (the instance is fenced and stops at its next commit).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::Exit;
use crate::archive::read::Archive;
use crate::config::Config;
use crate::console::Report;
use crate::kafka::{positions_topic, KafkaSink};
use crate::pipeline::start::{commit_start, resolve_at, ResolvedStart, StartSettings};
use crate::position::{Checkpoint, StartFrom};
use crate::process::now_ms;
use crate::source::{CheckedConnection, SourceConfig, SourceError};

/// Arguments of `sluice position`.
#[derive(Debug, Args)]
#[command(after_long_help = "\
Examples:
  sluice position show --config sluice.toml
  sluice position set --config sluice.toml --to current
  sluice position set --config sluice.toml --to mysql-bin.000042:4
  sluice position set --config sluice.toml --to 0-1-1000

`set` is for an operator who knows what the move skips or repeats: changes between the old and
the new position are not published (moving forward) or published again (moving back). Stop
`sluice run` first: `set` refuses while the checkpoint shows a running instance (committed less
than 60 s ago and not marked as a clean stop) or the server lists one, unless --force. A
FILE:POSITION the server purged is taken when source.archive holds it (and the files after it):
`sluice run` then reads them from the archive before the server's stream. Exit 0
when done, 1 when the source or Kafka cannot do it or an instance runs, 2 for a bad
configuration or position.")]
pub struct PositionArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Print the committed checkpoint (where `sluice run` resumes) and how far the server is
    /// past it.
    Show {
        /// The configuration file (`SLUICE_<SECTION>__<KEY>` environment variables override it).
        #[arg(long, short = 'c', value_name = "FILE", env = "SLUICE_CONFIG")]
        config: PathBuf,
    },
    /// Move the checkpoint: the next `sluice run` resumes at the new position, with the
    /// captured tables' definitions read from the server now.
    Set {
        /// The configuration file (`SLUICE_<SECTION>__<KEY>` environment variables override it).
        #[arg(long, short = 'c', value_name = "FILE", env = "SLUICE_CONFIG")]
        config: PathBuf,
        /// The new position, as `source.start` spells it: `current`, `earliest`,
        /// `FILE:POSITION`, or a GTID set.
        #[arg(long, value_name = "START")]
        to: StartFrom,
        /// Move it even when an instance may be running (its checkpoint is younger than 60 s
        /// and not marked stopped): that instance is fenced and stops with exit 1.
        #[arg(long)]
        force: bool,
    },
}

/// Runs `sluice position`; returns the exit code.
pub fn run(args: PositionArgs) -> Exit {
    let (Action::Show { config } | Action::Set { config, .. }) = &args.action;
    let cfg: Config = match super::load_config("sluice position", config) {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    let mut out = Report::default();
    let work = async {
        match &args.action {
            Action::Show { .. } => show(&cfg, &mut out).await.map_err(Refused::Failed),
            Action::Set { to, force, .. } => set(&cfg, to, *force, &mut out).await,
        }
    };
    let result = match super::on_runtime("sluice position", work) {
        Ok(r) => r,
        Err(exit) => return exit,
    };
    match (result, out.failure()) {
        (Err(Refused::Failed(m)), _) => {
            crate::eline!("sluice position: {m}");
            Exit::Failure
        }
        (Err(Refused::Position(m)), _) => {
            crate::eline!("sluice position: {m}");
            Exit::Usage
        }
        (Ok(_), Some(e)) => {
            crate::eline!("sluice position: writing the output failed: {e}");
            Exit::Output
        }
        (Ok(true), None) => Exit::Ok,
        (Ok(false), None) => Exit::Failure,
    }
}

/// The committed checkpoint, read without creating anything.
async fn committed_checkpoint(cfg: &Config) -> Result<Option<Checkpoint>, String> {
    crate::kafka::committed_checkpoint(&cfg.kafka, &cfg.source.name).await.map_err(|e| read_failed(cfg, &e))
}

/// The checkpoint could not be read, for `e`.
fn read_failed(cfg: &Config, e: &crate::kafka::Error) -> String {
    format!("reading the checkpoint from {} on {}: {e}", positions_topic(&cfg.kafka.topic_prefix), cfg.kafka.brokers)
}

/// Prints the checkpoint; false when it cannot be resumed from (its file was purged).
async fn show(cfg: &Config, out: &mut Report) -> Result<bool, String> {
    let Some(c) = committed_checkpoint(cfg).await? else {
        crate::report!(
            out,
            "source {:?}: no checkpoint on {}; the first `sluice run` starts at source.start = \"{}\"",
            cfg.source.name,
            positions_topic(&cfg.kafka.topic_prefix),
            cfg.source.start
        );
        return Ok(true);
    };
    let connect = SourceConfig::for_run(&cfg.source).map_err(|e| e.to_string())?.connect;
    let logs = match sluice_protocol::Connection::connect(connect).await {
        Ok(mut conn) => {
            crate::source::server::binary_logs(&mut conn).await.map(|logs| (logs, conn)).map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    };
    match logs {
        Ok((logs, mut conn)) => {
            let (ok, line) = super::check::checkpoint_state_with_archive(cfg, &c, &logs, &mut conn).await;
            crate::report!(out, "source {:?}: {line}", cfg.source.name);
            Ok(ok)
        }
        Err(e) => {
            crate::report!(
                out,
                "source {:?}: {c} (the server could not be asked how far past it is: {e})",
                cfg.source.name
            );
            Ok(true)
        }
    }
}

/// The refusal while `sluice run` of the source is connected.
fn running(cfg: &Config, report_host: &str) -> String {
    format!(
        "`sluice run` for source {:?} is connected to the server (replica {report_host}): stop it first (a stopped or \
         killed one is dropped by the server within a few heartbeat periods; then try again)",
        cfg.source.name
    )
}

/// Why `sluice position` did not do it.
enum Refused {
    /// The position given is not on the server (exit 2).
    Position(String),
    /// The source or Kafka could not do it, or an instance runs (exit 1).
    Failed(String),
}

impl From<String> for Refused {
    fn from(m: String) -> Refused {
        Refused::Failed(m)
    }
}

async fn set(cfg: &Config, to: &StartFrom, force: bool, out: &mut Report) -> Result<bool, Refused> {
    let source_cfg = SourceConfig::for_run(&cfg.source).map_err(|e| e.to_string())?;
    // whatever the grants (SHOW SLAVE HOSTS below needs an optional one), a running instance
    // shows in its checkpoint: it commits at least every 10 s, and marks its last commit
    let current = match crate::kafka::committed_checkpoint(&cfg.kafka, &cfg.source.name).await {
        // brokers that do not answer now will not take the new checkpoint either: said at once,
        // not after the server's checks and a second wait for them
        Err(e @ crate::kafka::Error::Abortable(_)) => return Err(Refused::Failed(read_failed(cfg, &e))),
        // an unreadable checkpoint is what this command repairs (below)
        other => other.ok().flatten(),
    };
    if let Some(c) = current {
        if let Some(why) = c.maybe_live(now_ms()) {
            if !force {
                return Err(Refused::Failed(format!(
                    "source {:?}: {why}. Stop it first (SIGTERM: it marks its last checkpoint), or wait until {} s \
                     after its last commit, or pass --force to take over (a running instance is then fenced and \
                     stops with exit 1)",
                    cfg.source.name,
                    crate::position::LIVE_WITHIN.as_secs()
                )));
            }
            crate::report!(out, "source {:?}: {why}; --force: moving it anyway", cfg.source.name);
        }
    }
    let opened = if force {
        CheckedConnection::open_taking_over(&source_cfg).await
    } else {
        CheckedConnection::open(&source_cfg).await
    };
    let mut checked = match opened {
        Ok(c) => c,
        Err(e) if e.is_predecessor_registered() => {
            return Err(running(cfg, &source_cfg.report_host).into());
        }
        Err(e) => return Err(e.to_string().into()),
    };
    // ... also under another server id
    if checked.replicas().await.is_ok_and(|r| r.iter().any(|(_, host)| *host == source_cfg.report_host)) {
        if !force {
            return Err(format!("{}, or pass --force to take over", running(cfg, &source_cfg.report_host)).into());
        }
        crate::report!(
            out,
            "source {:?}: the server lists its replica {}; --force: moving it anyway",
            cfg.source.name,
            source_cfg.report_host
        );
    }
    let start = match resolve_at(&cfg.filter, &mut checked, to).await {
        Ok(s) => s,
        // a file the server purged that source.archive holds: `sluice run` catches up from it
        Err(crate::pipeline::Error::Source(SourceError::Purged(purged))) if cfg.source.archive.is_some() => {
            let StartFrom::Position { file, position } = to else {
                // GTIDs are not looked up in the archive: a position in its files is taken
                return Err(Refused::Position(format!(
                    "{purged}. source.archive may hold the purged files: `--to FILE:POS` takes a position in them \
                     (`sluice dump --events` of an archived file lists its events and GTIDs)"
                )));
            };
            let root = cfg.source.archive.as_deref().unwrap_or_default();
            let archive = Archive::open(root, cfg.source.archive_credentials_file.as_deref())
                .map_err(|e| Refused::Failed(format!("{purged}; source.archive cannot be read: {e}")))?;
            let filter = crate::filter::TableFilter::from_config(&cfg.filter);
            match checked.resolve_archived(&archive, file, *position, &filter).await {
                Ok((resume, tables)) => {
                    crate::report!(
                        out,
                        "source {:?}: {file} is no longer on the server; the archive in {root} holds it from \
                         {position} on, and `sluice run` reads it before the server's stream",
                        cfg.source.name
                    );
                    ResolvedStart { resume, tables }
                }
                Err(e @ (SourceError::Start(_) | SourceError::Purged(_))) => {
                    return Err(Refused::Position(e.to_string()))
                }
                Err(e) => return Err(e.to_string().into()),
            }
        }
        // a position the server does not have (purged, not reached, the other flavour's
        // GTIDs): the position given is wrong, as the help's exit 2 says
        Err(e @ crate::pipeline::Error::Source(SourceError::Start(_) | SourceError::Purged(_))) => {
            return Err(Refused::Position(e.to_string()))
        }
        Err(e) => return Err(e.to_string().into()),
    };
    // the producer's init fences a running instance: it commits nothing after this
    let mut sink = KafkaSink::connect(&cfg.kafka, &cfg.source.name).await.map_err(|e| e.to_string())?;
    let start = if matches!(to, StartFrom::Current) {
        // the server's end again, now that nothing else commits: the end read above may be
        // behind what a running instance (taken over with --force, or one too slow to count as
        // running) committed since (a hostile trial's checkpoint went 9 transactions back, and
        // they were published twice)
        resolve_at(&cfg.filter, &mut checked, to).await.map_err(|e| e.to_string())?
    } else {
        start
    };
    drop(checked);
    // an unreadable checkpoint is what this command repairs: say what it was, and go on
    let old = committed_checkpoint(cfg).await;
    let was = match &old {
        Ok(Some(c)) => c.to_string(),
        Ok(None) => "no checkpoint".to_string(),
        Err(e) => format!("unreadable: {e}"),
    };
    // a snapshot in progress goes on from where it was (its chunks are read at their own
    // positions, whatever the stream's)
    let (snapshot, signals) = match old {
        Ok(Some(c)) => (c.snapshot, c.signals_offset),
        _ => (None, None),
    };
    let committed = crate::schema::committed(&cfg.kafka, &cfg.source.name, None).await.map_err(|e| e.to_string())?;
    let resume = start.resume.clone();
    commit_start(StartSettings::of(cfg), &mut sink, committed, start, snapshot, signals, false, || {}).await.map_err(
        |e| match e {
            // (the message of a fenced producer is written for `sluice run`)
            crate::pipeline::Error::Kafka(crate::kafka::Error::Fenced(_)) => format!(
                "source {:?}: another `sluice position set` or `sluice run` took the source over while this one \
                 wrote: this command did not move the checkpoint (`sluice position show` says where it is)",
                cfg.source.name
            ),
            other => other.to_string(),
        },
    )?;
    crate::report!(
        out,
        "source {:?}: checkpoint set to {resume} (was {was}); the next `sluice run` resumes there",
        cfg.source.name
    );
    Ok(true)
}
