//! `sluice archive --config FILE`: copies the server's binlog files into `[archive] to`, as a
//! replica, verbatim ([`crate::archive`]), following the server until stopped (or, with
//! `--until-end`, up to its current end). A dropped connection or a restarted server is
//! retried with backoff from the archive's own end; a gap, a bad checksum or a purged file is
//! an error (exit 1).

use std::path::PathBuf;
use std::time::Duration;

use sluice_protocol::{Connection, DumpRequest, StartPosition};

use super::Exit;
use crate::archive::{Copier, DirArchive};
use crate::config::{ArchiveConfig, ArchiveStart};

/// `sluice archive` arguments.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  sluice archive --config sluice.toml
  sluice archive -c sluice.toml --until-end

The configuration needs [source] (the server) and [archive]:

  [archive]
  to = \"/var/lib/sluice/archive\"   # a directory; made when missing
  server_id = 51003                # unique among the server's replicas
  start = \"earliest\"               # an empty archive starts at the oldest file the server has

Each of the server's binlog files is copied under its own name, byte for byte (the format
description, every event and its checksum, the ROTATE at its end), and index.json says of each
file its size, its first and last event time and GTID state, and whether it is complete. The
checksums are verified as the events arrive; after a crash or a disconnect the copy goes on
from the last whole event it holds, so a file is never torn or doubled.

Exit 0: stopped by a signal, or at the server's end with --until-end; 1: the copy cannot go on
(a gap, a bad checksum, the next file purged from the server); 2: a bad configuration.")]
pub struct ArchiveArgs {
    /// The configuration file (`[source]` and `[archive]`).
    #[arg(long, short = 'c', value_name = "FILE", env = "SLUICE_CONFIG")]
    pub config: PathBuf,
    /// Copy up to the server's current end, then stop (default: follow it).
    #[arg(long)]
    pub until_end: bool,
}

const NAME: &str = "sluice archive";

/// Runs `sluice archive`.
pub fn run(args: ArchiveArgs) -> Exit {
    let cfg: ArchiveConfig = match super::load_config(NAME, &args.config) {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    super::on_runtime(NAME, archive(&cfg, args.until_end)).unwrap_or_else(|e| e)
}

/// How one dump ended.
enum Ended {
    /// At the server's end (`--until-end`).
    AtEnd,
    /// By a signal.
    Stopped,
}

async fn archive(cfg: &ArchiveConfig, until_end: bool) -> Exit {
    let (mut store, resume) = match DirArchive::open(&cfg.archive.to) {
        Ok(x) => x,
        Err(e) => {
            crate::eline!("{NAME}: {e}");
            return Exit::Failure;
        }
    };
    if let Some(r) = &resume {
        tracing::info!(file = %r.file, size = r.size, "Continuing the archive");
    }
    let mut copier = Copier::new(resume);
    let connect = match crate::source::SourceConfig::for_run(&cfg.source) {
        Ok(s) => s.connect,
        Err(e) => {
            crate::eline!("{NAME}: {e}");
            return Exit::Usage;
        }
    };
    let mut backoff = Duration::from_millis(250);
    loop {
        let before = copier.position().map(|(f, s)| (f.to_string(), s));
        let result = dump(cfg, &connect, &mut copier, &mut store, until_end).await;
        if copier.position().map(|(f, s)| (f.to_string(), s)) != before {
            // it got somewhere: the next failure is a new one
            backoff = Duration::from_millis(250);
        }
        match result {
            Ok(Ended::AtEnd | Ended::Stopped) => {
                if let Err(e) = store.sync(copier.summary()) {
                    crate::eline!("{NAME}: {e}");
                    return Exit::Failure;
                }
                let (file, size) = copier.position().unwrap_or(("", 0));
                tracing::info!(file, size, "Stopped; the archive is synced");
                return Exit::Ok;
            }
            Err(Failure::Retry(e)) => {
                if let Err(e) = store.sync(copier.summary()) {
                    crate::eline!("{NAME}: {e}");
                    return Exit::Failure;
                }
                tracing::warn!(error = %e, retry_in = ?backoff, "The replication stream broke; continuing from the archive's end");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = crate::process::shutdown_signal() => return Exit::Ok,
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
            Err(Failure::Stop(e)) => {
                let _ = store.sync(copier.summary());
                crate::eline!("{NAME}: {e}");
                return Exit::Failure;
            }
        }
    }
}

/// Why a dump ended early.
enum Failure {
    /// Try again (the connection).
    Retry(String),
    /// Do not (the archive, the stream's bytes, a purged file, access).
    Stop(String),
}

fn protocol(during: &str, e: &sluice_protocol::Error) -> Failure {
    let m = format!("{during}: {e}");
    if e.is_transient() {
        Failure::Retry(m)
    } else {
        Failure::Stop(m)
    }
}

/// One dump, from the archive's end (or `archive.start` for an empty archive).
async fn dump(
    cfg: &ArchiveConfig,
    connect: &sluice_protocol::ConnectOptions,
    copier: &mut Copier,
    store: &mut DirArchive,
    until_end: bool,
) -> Result<Ended, Failure> {
    let mut conn = Connection::connect(connect.clone()).await.map_err(|e| protocol("connecting to the source", &e))?;
    let (file, position) = match copier.position() {
        Some((f, p)) => (f.to_string(), p),
        None => (first_file(&mut conn, cfg.archive.start).await?, 4),
    };
    // the dump's fake ROTATE carries a checksum when the server writes them
    let checksum = crate::source::server::scalar(&mut conn, "SELECT @@GLOBAL.binlog_checksum")
        .await
        .map_err(|e| protocol("reading binlog_checksum", &e))?;
    let fake_crc = checksum.is_some_and(|c| !c.eq_ignore_ascii_case("NONE"));
    let req = DumpRequest {
        heartbeat_period: Some(cfg.source.heartbeat),
        non_blocking: until_end,
        report_host: cfg.source.report_host(),
        mariadb_gtid_strict: false,
        send_annotate_rows: true,
        ..DumpRequest::new(cfg.archive.server_id, StartPosition::FilePosition { file: file.clone(), position })
    };
    tracing::info!(%file, position, "Copying the binlog");
    let mut stream = conn.start_binlog_dump(req).await.map_err(|e| protocol("starting the binlog dump", &e))?;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            ev = stream.next_event() => {
                let raw = match ev {
                    Ok(Some(raw)) => raw,
                    Ok(None) if until_end => return Ok(Ended::AtEnd),
                    // a following dump ends only when the server goes away (MariaDB ends it
                    // when it shuts down)
                    Ok(None) => return Err(Failure::Retry("the server ended the stream (shutting down?)".into())),
                    Err(e) => return Err(protocol("reading the binlog", &e)),
                };
                let ops = copier.feed(&raw, fake_crc).map_err(|e| Failure::Stop(e.to_string()))?;
                store.apply(&raw, &ops).map_err(Failure::Stop)?;
            }
            _ = tick.tick() => store.sync(copier.summary()).map_err(Failure::Stop)?,
            () = crate::process::shutdown_signal() => return Ok(Ended::Stopped),
        }
    }
}

/// The file an empty archive starts with.
async fn first_file(conn: &mut Connection, start: ArchiveStart) -> Result<String, Failure> {
    match start {
        ArchiveStart::Earliest => {
            let logs = crate::source::server::binary_logs(conn).await.map_err(|e| protocol("SHOW BINARY LOGS", &e))?;
            logs.into_iter()
                .next()
                .map(|(f, _)| f)
                .ok_or_else(|| Failure::Stop("the server lists no binlog files: is binary logging on?".into()))
        }
        ArchiveStart::Current => crate::source::server::current_position(conn)
            .await
            .map(|(f, _)| f)
            .map_err(|e| protocol("reading the current binlog file", &e)),
    }
}
