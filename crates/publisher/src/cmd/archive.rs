//! `sluice archive --config FILE`: copies the server's binlog files into `[archive] to`, as a
//! replica, verbatim ([`crate::archive`]), following the server until stopped (or, with
//! `--until-end`, up to its current end). A dropped connection or a restarted server is
//! retried with backoff from the archive's own end; a gap, a bad checksum or a purged file is
//! an error (exit 1).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_protocol::{Connection, DumpRequest, StartPosition};

use super::supervise::{serve_metrics, supervise, Supervised};
use super::Exit;
use crate::archive::store::Remote;
use crate::archive::{Copier, DirArchive, Op};
use crate::config::{ArchiveCompress, ArchiveConfig, ArchiveStart};
use crate::disposition::Disposition;
use crate::metrics::ArchiveMetrics;
use crate::process::Shutdown;

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

or, in an object store (completed files uploaded; credentials from AWS_* or the file):

  to = \"s3://bucket/binlogs/shop\"
  spool = \"/var/lib/sluice/spool\"  # the file being written, the lock and the index
  credentials_file = \"/run/secrets/s3\"  # aws_access_key_id = ..., aws_secret_access_key = ...

Each of the server's binlog files is copied under its own name, byte for byte (the format
description, every event and its checksum, the ROTATE at its end), and index.json says of each
file its size, its first and last event time and GTID state, and whether it is complete. The
checksums are verified as the events arrive; after a crash or a disconnect the copy goes on
from the last whole event it holds, so a file is never torn or doubled.

Exit 0: stopped by a signal, or at the server's end with --until-end; 1: the copy cannot go on
(a gap, a bad checksum, the next file purged from the server, or with --until-end a server that
stayed unreachable for 6 attempts in a row, about a minute); 2: a bad configuration.")]
pub struct ArchiveArgs {
    /// The configuration file (`[source]` and `[archive]`).
    #[arg(long, short = 'c', value_name = "FILE", env = "SLUICE_CONFIG")]
    pub config: PathBuf,
    /// Copy up to the server's current end, then stop (default: follow it). Gives up, exit 1,
    /// when the server stays unreachable for 6 attempts in a row.
    #[arg(long)]
    pub until_end: bool,
}

/// Bytes of events read from the socket ahead of the copy.
const READ_AHEAD_BYTES: usize = 8 << 20;

/// Runs `sluice archive`.
pub fn run(args: ArchiveArgs) -> Exit {
    let cfg: ArchiveConfig = match super::load_config(Archiver::NAME, &args.config) {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    super::on_runtime(Archiver::NAME, archive(&cfg, args.until_end)).unwrap_or_else(|e| e)
}

async fn archive(cfg: &ArchiveConfig, until_end: bool) -> Exit {
    const NAME: &str = Archiver::NAME;
    let shutdown = Shutdown::on_signal("Stopping: syncing the archive");
    let metrics = Arc::new(ArchiveMetrics::new(&cfg.source.name));
    metrics.set_warn_margin(cfg.archive.warn_margin);
    if let Err(exit) = serve_metrics(NAME, cfg.metrics.listen, &metrics).await {
        return exit;
    }
    let connect = match crate::source::SourceConfig::for_run(&cfg.source) {
        Ok(s) => s.connect,
        Err(e) => {
            crate::eline!("{NAME}: {e}");
            return Exit::Usage;
        }
    };
    let gzip = cfg.archive.compress == ArchiveCompress::Gzip;
    let remote = if crate::archive::store::is_url(&cfg.archive.to) {
        let r = match Remote::open(&cfg.archive.to, cfg.archive.credentials_file.as_deref()) {
            Ok(r) => r,
            Err(e) => {
                crate::eline!("{NAME}: archive.to: {e}");
                return Exit::Usage;
            }
        };
        // what the store holds already (a spool on a new volume continues after it)
        // and that it can be listed (a bucket that does not exist reads as an empty index)
        let listed = match r.index().await {
            Ok(index) => r.files().await.map(|_| index),
            Err(e) => Err(e),
        };
        match listed {
            Ok(index) => Some((r, index)),
            Err(e) => {
                crate::eline!("{NAME}: archive.to: {e}");
                return Exit::Failure;
            }
        }
    } else {
        None
    };
    // a directory archive, or the spool of one in an object store
    let root = cfg.archive.spool.clone().unwrap_or_else(|| PathBuf::from(&cfg.archive.to));
    let (store, resume) = match DirArchive::open(&root, gzip, remote) {
        Ok(x) => x,
        Err(e) => {
            crate::eline!("{NAME}: {e}");
            return Exit::Failure;
        }
    };
    let mut store = store;
    store.set_retention(crate::archive::dir::Retention {
        keep_for: cfg.archive.keep_for,
        keep_size: cfg.archive.keep_size,
    });
    if let Some(r) = &resume {
        tracing::info!(file = %r.file, size = r.size, "Continuing the archive");
    }
    let mut a = Archiver {
        cfg,
        connect,
        copier: Copier::new(resume),
        store,
        until_end,
        metrics,
        progressed: false,
        failures: 0,
    };
    let exit = supervise(&mut a, &shutdown).await;
    if exit == Exit::Ok {
        if let Err(e) = a.store.close(a.copier.summary()) {
            crate::eline!("{NAME}: {e}");
            return Exit::Failure;
        }
        let (file, size) = a.copier.position().unwrap_or(("", 0));
        tracing::info!(file, size, "Stopped; the archive is synced");
    }
    exit
}

/// Why a dump ended early.
#[derive(Debug, thiserror::Error)]
enum ArchiveError {
    /// The connection: try again from the archive's end.
    #[error("{0}")]
    Transient(String),
    /// The archive, the stream's bytes, a purged file, access: stop.
    #[error("{0}")]
    Definite(String),
}

fn protocol(during: &str, e: &sluice_protocol::Error) -> ArchiveError {
    let m = format!("{during}: {e}");
    if e.is_transient() {
        ArchiveError::Transient(m)
    } else {
        ArchiveError::Definite(m)
    }
}

/// The archiver: one dump per attempt, from the archive's end.
struct Archiver<'a> {
    cfg: &'a ArchiveConfig,
    connect: sluice_protocol::ConnectOptions,
    copier: Copier,
    store: DirArchive,
    until_end: bool,
    metrics: Arc<ArchiveMetrics>,
    /// The last attempt copied something (the backoff starts over).
    progressed: bool,
    /// Attempts in a row that failed without copying anything.
    failures: u32,
}

/// `--until-end` gives up after this many attempts in a row that copy nothing (about a minute
/// of backoff): a one-off or scheduled copy must end, where a running archiver waits for the
/// server for as long as it takes.
const UNTIL_END_ATTEMPTS: u32 = 6;

impl Supervised for Archiver<'_> {
    type Error = ArchiveError;
    const NAME: &'static str = "sluice archive";
    const RESTARTING: &'static str = "The replication stream broke; continuing from the archive's end";

    fn disposition(e: &ArchiveError) -> Disposition {
        match e {
            ArchiveError::Transient(_) => Disposition::Restart,
            ArchiveError::Definite(_) => Disposition::Stop,
        }
    }

    async fn attempt(&mut self, shutdown: &Shutdown) -> Result<(), ArchiveError> {
        let before = self.copier.position().map(|(f, s)| (f.to_string(), s));
        let r = self.dump(shutdown).await;
        self.progressed = self.copier.position().map(|(f, s)| (f.to_string(), s)) != before;
        // what was written is kept whatever ended the dump
        self.store.sync(self.copier.summary(), true).map_err(ArchiveError::Definite)?;
        self.failures = if r.is_err() && !self.progressed { self.failures + 1 } else { 0 };
        match r {
            Err(ArchiveError::Transient(e)) if self.until_end && self.failures >= UNTIL_END_ATTEMPTS => Err(
                ArchiveError::Definite(format!("{e} ({UNTIL_END_ATTEMPTS} attempts in a row; --until-end gives up)")),
            ),
            r => r,
        }
    }

    fn ended(&mut self, restarting: bool) {
        self.metrics.set_ready(false);
        if restarting {
            self.metrics.restart();
        }
    }

    fn restarting(&mut self, _e: &ArchiveError, _started: Instant) -> bool {
        std::mem::take(&mut self.progressed)
    }
}

impl Archiver<'_> {
    /// One dump, from the archive's end (or `archive.start` for an empty archive), until the
    /// server's end (`--until-end`) or a stop asked for.
    async fn dump(&mut self, shutdown: &Shutdown) -> Result<(), ArchiveError> {
        let mut conn =
            Connection::connect(self.connect.clone()).await.map_err(|e| protocol("connecting to the source", &e))?;
        let (file, position) = match self.copier.position() {
            Some((f, p)) => (f.to_string(), p),
            None => (first_file(&mut conn, self.cfg.archive.start).await?, 4),
        };
        // the dump's fake ROTATE carries a checksum when the server writes them
        let checksum = crate::source::server::scalar(&mut conn, "SELECT @@GLOBAL.binlog_checksum")
            .await
            .map_err(|e| protocol("reading binlog_checksum", &e))?;
        let fake_crc = checksum.is_some_and(|c| !c.eq_ignore_ascii_case("NONE"));
        self.copier.new_dump();
        let req = DumpRequest {
            heartbeat_period: Some(self.cfg.source.heartbeat),
            non_blocking: self.until_end,
            report_host: self.cfg.source.report_host(),
            mariadb_gtid_strict: false,
            send_annotate_rows: true,
            ..DumpRequest::new(self.cfg.archive.server_id, StartPosition::FilePosition { file: file.clone(), position })
        };
        // a second connection asks the server where it is, for the lag and purge metrics
        let mut side = Connection::connect(self.connect.clone()).await.ok();
        // said once per failing spell (a privilege missing would fail every 10 s)
        let mut side_failing = false;
        tracing::info!(%file, position, "Copying the binlog");
        // read ahead on a task of its own, as sluice run's source does: the socket is read while
        // the last events are checked and written
        let mut stream = conn
            .start_binlog_dump(req)
            .await
            .map_err(|e| protocol("starting the binlog dump", &e))?
            .read_ahead(READ_AHEAD_BYTES);
        self.metrics.set_ready(true);
        let mut sync = tokio::time::interval(Duration::from_millis(500));
        let mut measure = tokio::time::interval(Duration::from_secs(10));
        let mut last_event: Option<u32> = None;
        loop {
            tokio::select! {
                ev = stream.next_event() => {
                    let raw = match ev {
                        Ok(Some(raw)) => raw,
                        Ok(None) if self.until_end => return Ok(()),
                        // a following dump ends only when the server goes away (MariaDB ends
                        // it when it shuts down)
                        Ok(None) => {
                            return Err(ArchiveError::Transient("the server ended the stream (shutting down?)".into()))
                        }
                        Err(sluice_protocol::Error::Server(e)) if e.code == 1236 => {
                            return Err(self.unservable(&e, side.as_mut()).await)
                        }
                        Err(e) => return Err(protocol("reading the binlog", &e)),
                    };
                    let ops = self.copier.feed(&raw, fake_crc).map_err(|e| ArchiveError::Definite(e.to_string()))?;
                    self.store.apply(&raw, &ops).map_err(ArchiveError::Definite)?;
                    for op in &ops {
                        match op {
                            Op::Append => {
                                self.metrics.wrote(raw.len() as u64);
                                last_event = raw.get(..4).map(|t| u32::from_le_bytes([t[0], t[1], t[2], t[3]]));
                            }
                            Op::Finish { summary, .. } => {
                                self.metrics.file_done();
                                tracing::info!(file = %summary.file, size = summary.size, "Archived a whole file");
                            }
                            Op::Begin(_) | Op::MarkInUse => {}
                        }
                    }
                }
                _ = sync.tick() => self.store.sync(self.copier.summary(), false).map_err(ArchiveError::Definite)?,
                _ = measure.tick() => {
                    // a side connection lost (killed, timed out) is made again: without it the
                    // lag and the purge margin would keep their last values while the server
                    // writes and purges, and the alerts built on them would never fire
                    if side.is_none() {
                        side = Connection::connect(self.connect.clone()).await.ok();
                    }
                    if let (Some(c), Some((file, size))) = (side.as_mut(), self.copier.position()) {
                        match crate::source::server::binary_logs(c).await {
                            Ok(logs) => {
                                if std::mem::take(&mut side_failing) {
                                    tracing::info!("The server lists its binlog files again: the lag and purge margin metrics follow it");
                                }
                                self.metrics.position(&logs, file, size, last_event, crate::process::now_ms() / 1000)
                            }
                            Err(e) => {
                                if std::mem::replace(&mut side_failing, true) {
                                    tracing::debug!(error = %e, "Asking the server for its binlog files failed again");
                                } else {
                                    tracing::warn!(
                                        error = %e,
                                        "Asking the server for its binlog files failed (for the lag and purge margin \
                                         metrics, which keep their last values meanwhile); asking again on a new \
                                         connection every 10 s"
                                    );
                                }
                                side = None;
                            }
                        }
                    }
                }
                () = shutdown.requested() => return Ok(()),
            }
        }
    }
}

impl Archiver<'_> {
    /// The server cannot send what the archive needs next (error 1236): said with what the
    /// server still has when that is why.
    async fn unservable(&self, e: &sluice_protocol::ServerError, side: Option<&mut Connection>) -> ArchiveError {
        let (file, size) = self.copier.position().unwrap_or(("", 0));
        let logs = match side {
            Some(c) => crate::source::server::binary_logs(c).await.unwrap_or_default(),
            None => Vec::new(),
        };
        if !file.is_empty() && !logs.iter().any(|(f, _)| f == file) {
            let oldest = logs.first().map_or("none", |(f, _)| f.as_str());
            return ArchiveError::Definite(format!(
                "the server purged {file} (its oldest file is now {oldest}) before the archive copied it whole (it \
                 holds {size} bytes of it), or the archive is another server's: it cannot continue without a gap. Keep this archive as it is and \
                 start a new one in another directory (archive.to, archive.start = \"earliest\"); watch \
                 sluice_archive_purge_margin_bytes to see a purge coming (server said: {})",
                e.message
            ));
        }
        ArchiveError::Definite(format!("the server cannot send {file} from {size}: error {}: {}", e.code, e.message))
    }
}

/// The file an empty archive starts with.
async fn first_file(conn: &mut Connection, start: ArchiveStart) -> Result<String, ArchiveError> {
    match start {
        ArchiveStart::Earliest => {
            let logs = crate::source::server::binary_logs(conn).await.map_err(|e| protocol("SHOW BINARY LOGS", &e))?;
            logs.into_iter()
                .next()
                .map(|(f, _)| f)
                .ok_or_else(|| ArchiveError::Definite("the server lists no binlog files: is binary logging on?".into()))
        }
        ArchiveStart::Current => crate::source::server::current_position(conn)
            .await
            .map(|(f, _)| f)
            .map_err(|e| protocol("reading the current binlog file", &e)),
    }
}
