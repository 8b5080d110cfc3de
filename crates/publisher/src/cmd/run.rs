//! `sluice run`: pipeline attempts under the supervisor ([`super::supervise`]: restart with
//! backoff, wait for a predecessor, or stop with exit 1, as each error's [`Disposition`] says),
//! and what the process serves beside them (the metrics endpoint, the lag-in-bytes watcher).
//! This file only wires: an attempt connects the Kafka sink, lets
//! [`open_attempt`] decide where to start (the committed checkpoint, a first start, a new
//! snapshot after a purge), and hands the stream to the [`Pipeline`]; what lives across attempts
//! is failing over to the next server and marking the checkpoint stopped. SIGTERM and Ctrl-C
//! commit at the next transaction boundary.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::supervise::{serve_metrics, supervise, Supervised};
use super::Exit;
use crate::avro::Connector;
use crate::config::Config;
use crate::disposition::Disposition;
use crate::filter::TableFilter;
use crate::kafka::{committed_checkpoint, KafkaSink};
use crate::metrics::{Metrics, ProgressLog};
use crate::pipeline::start::{naming_problems, open_attempt, resolve_early, Opened, ResolvedStart, StartSettings};
use crate::pipeline::tables::Routes;
use crate::pipeline::{Error, Pipeline, Settings};
use crate::process::Shutdown;
use crate::registry::RegistryClient;
use crate::snapshot::Snapshotter;
use crate::source::Endpoint;

/// `sluice run` arguments.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  sluice check --config sluice.toml && sluice run --config sluice.toml
  SLUICE_KAFKA__BROKERS=kafka-0:9092 sluice run --config sluice.toml --log-format json

Each Kafka transaction holds whole MySQL transactions and the checkpoint of the last one (topic
<prefix>.__positions); a restart resumes from the last committed checkpoint, so nothing is lost or
published twice. Without a checkpoint, source.start is resolved once and recorded as the first
checkpoint before anything is published. SIGTERM or Ctrl-C commits at the next transaction
boundary and exits 0. Exit 1: a fenced producer (another instance with the same source.name), an
incompatible schema, an undecodable event, a record larger than Kafka accepts, or a source that
keeps failing; exit 2: a bad configuration.")]
pub struct RunArgs {
    /// The configuration file (TOML; see sluice.example.toml).
    #[arg(long, short = 'c', env = "SLUICE_CONFIG")]
    pub config: PathBuf,
}

/// How long a snapshot's query may wait for the server's next packet.
const SNAPSHOT_READ_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `sluice run`.
pub fn run(args: RunArgs) -> Exit {
    let cfg: Config = match super::load_config(Run::NAME, &args.config) {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    super::on_runtime(Run::NAME, serve(&cfg)).unwrap_or_else(|exit| exit)
}

async fn serve(cfg: &Config) -> Exit {
    let shutdown = Shutdown::on_signal("Stopping at the next transaction boundary");
    let metrics = Arc::new(Metrics::new(&cfg.source.name));
    metrics.set_heartbeat(cfg.source.heartbeat);
    if let Err(exit) = serve_metrics(Run::NAME, cfg.metrics.listen, &metrics).await {
        return exit;
    }
    // the server streamed from (an index into source.servers()): the lag watcher follows it
    let (active, active_rx) = tokio::sync::watch::channel(0usize);
    if let Ok(password) = cfg.source.password() {
        let s = &cfg.source;
        let servers = s
            .servers()
            .into_iter()
            .map(|url| {
                Endpoint { url, password: &password, tls: s.tls, ca_file: s.ca_file.clone(), heartbeat: s.heartbeat }
                    .connect_options()
            })
            .collect();
        let m = Arc::clone(&metrics);
        let watch = crate::source::server::watch_binary_logs(servers, active_rx, s.heartbeat, move |logs| {
            m.server_logs(logs);
        });
        tokio::spawn(watch);
    }
    let mut registry = match RegistryClient::new(&cfg.registry) {
        Ok(r) => r,
        Err(e) => {
            crate::eline!("{}: {e}", Run::NAME);
            return Exit::Failure;
        }
    };
    registry.count_requests(metrics.registry());
    let first_start = tokio::select! {
        s = resolve_early(StartSettings::of(cfg)) => s,
        () = stop_grace(&shutdown, &metrics) => return Exit::Ok,
    };
    let mut run = Run {
        cfg,
        metrics,
        registry,
        progress: ProgressLog::default(),
        first_start,
        server: 0,
        unreachable_since: None,
        active,
    };
    supervise(&mut run, &shutdown).await
}

/// Resolves after a stop was asked for: at once while nothing streams (connecting, waiting for
/// Kafka or the source: nothing is in flight), else STOP_GRACE later, when a pipeline inside a
/// long MySQL transaction is dropped. That loses nothing: its open Kafka transaction is never
/// committed, and the next start aborts it and replays from the last committed checkpoint.
async fn stop_grace(shutdown: &Shutdown, metrics: &Metrics) {
    shutdown.requested().await;
    if metrics.is_ready() {
        crate::process::after_grace(shutdown).await;
        tracing::warn!(
            "No commit within {:?} of the stop signal (a MySQL transaction still open, or Kafka not \
             answering): stopping without committing; the next start replays from the last committed checkpoint",
            crate::process::STOP_GRACE
        );
    } else {
        tracing::info!("Stopped while connecting: nothing was in flight");
    }
}

/// `sluice run` under the supervisor: what lives across attempts.
struct Run<'c> {
    cfg: &'c Config,
    metrics: Arc<Metrics>,
    registry: RegistryClient,
    progress: ProgressLog,
    /// `source.start` resolved while no checkpoint exists (see [`open_attempt`]).
    first_start: Option<ResolvedStart>,
    /// The server streamed from (an index into `source.servers()`), and since when it has been
    /// unreachable (consecutive attempts failing to reach it).
    server: usize,
    unreachable_since: Option<Instant>,
    /// Tells the lag watcher which server is streamed from.
    active: tokio::sync::watch::Sender<usize>,
}

impl Supervised for Run<'_> {
    type Error = Error;
    const NAME: &'static str = "sluice run";
    const RESTARTING: &'static str = "Restarting from the last committed checkpoint";

    fn disposition(e: &Error) -> Disposition {
        e.disposition()
    }

    async fn attempt(&mut self, shutdown: &Shutdown) -> Result<(), Error> {
        let metrics = Arc::clone(&self.metrics);
        tokio::select! {
            r = attempt(self.cfg, self.server, shutdown, &metrics, &self.registry, &mut self.progress, &mut self.first_start) => r,
            () = stop_grace(shutdown, &metrics) => {
                mark_stopped(self.cfg).await;
                if let Some(s) = &self.first_start {
                    tracing::warn!(
                        start = %self.cfg.source.start,
                        position = %s.resume,
                        "Stopped before this run read a checkpoint (while connecting, or Kafka did not answer): if the source has none \
                         yet, the next start resolves source.start again, so changes written meanwhile are not \
                         captured unless it names a position; with a checkpoint, it resumes from it"
                    );
                }
                Ok(())
            }
        }
    }

    fn ended(&mut self, restarting: bool) {
        self.metrics.set_ready(false);
        if restarting {
            self.metrics.restart();
        }
    }

    /// Fails over when the server stayed unreachable for `source.failover_after`.
    fn restarting(&mut self, e: &Error, started: Instant) -> bool {
        let servers = self.cfg.source.servers();
        if !(e.source_unreachable() && servers.len() > 1) {
            self.unreachable_since = None;
            return false;
        }
        let since = *self.unreachable_since.get_or_insert(started);
        if since.elapsed() < self.cfg.source.failover_after {
            return false;
        }
        let next = (self.server + 1) % servers.len();
        tracing::warn!(
            from = %servers[self.server % servers.len()],
            to = %servers[next],
            unreachable_for = ?since.elapsed(),
            "The source server stays unreachable: failing over (resuming by the checkpoint's GTIDs)"
        );
        self.server = next;
        let _ = self.active.send(next);
        // without a checkpoint yet, source.start is resolved on the new server
        self.first_start = None;
        self.unreachable_since = None;
        true
    }

    /// Not a failure: the server drops the dead connection at its next heartbeat.
    fn predecessor_wait(&self) -> Duration {
        let wait = self.cfg.source.heartbeat / 2 + Duration::from_millis(200);
        tracing::info!(wait = ?wait, "Waiting for the server to drop this source's previous connection");
        wait
    }

    async fn stopping(&mut self, e: &Error) {
        // a fenced instance must not write again, not even to say it stopped
        if !e.is_fenced() {
            mark_stopped(self.cfg).await;
        }
    }
}

/// After a stop the pipeline could not commit itself (an error that stops, a stop signal while
/// connecting or inside a long transaction): the committed checkpoint is committed once more,
/// marked as a clean stop, so that `sluice position set` need not wait for it to age. Best
/// effort, bounded: a broker that does not answer leaves the checkpoint unmarked (`position
/// set` then waits for it to age, or takes `--force`). Never after a takeover.
async fn mark_stopped(cfg: &Config) {
    let mark = async {
        let mut sink = KafkaSink::connect(&cfg.kafka, &cfg.source.name).await?;
        let checkpoint = committed_checkpoint(&cfg.kafka, &cfg.source.name).await?;
        if let Some(c) = checkpoint.filter(|c| c.stopped_ms.is_none()) {
            sink.commit(&c.renewed(true), || {}).await?;
            sink.finish().await?;
        }
        Ok::<(), Error>(())
    };
    match tokio::time::timeout(Duration::from_secs(5), mark).await {
        Ok(Ok(())) => tracing::debug!("Marked the checkpoint as a clean stop"),
        Ok(Err(e)) => tracing::debug!(error = %e, "Could not mark the checkpoint as a clean stop"),
        Err(_) => tracing::debug!("Could not mark the checkpoint as a clean stop within 5 s"),
    }
}

/// One pipeline attempt: the sink connected, the start opened ([`open_attempt`]), the
/// pipeline wired from the sections it needs and run until a stop or an error.
async fn attempt(
    cfg: &Config,
    server: usize,
    shutdown: &Shutdown,
    metrics: &Arc<Metrics>,
    registry: &RegistryClient,
    progress: &mut ProgressLog,
    first_start: &mut Option<ResolvedStart>,
) -> Result<(), Error> {
    let mut sink = KafkaSink::connect(&cfg.kafka, &cfg.source.name).await?;
    sink.time_commits(metrics.commit_timer());
    let opened = open_attempt(StartSettings::of(cfg), server, &mut sink, metrics, first_start).await?;
    let Opened { source: mut src, source_cfg, mut schemas, snapshot, signals } = opened;
    schemas.set_lower_case_table_names(src.lower_case_table_names());
    let filter = TableFilter::from_config(&cfg.filter);
    let routes = Routes::new(&cfg.routes, &cfg.kafka.topic_prefix);
    // the tables the configuration captures now: the committed history may hold one that
    // filter.exclude (the advice for a collision) has left out since
    let tracked: Vec<_> = schemas.tables().filter(|t| filter.matches(&t.database, &t.table)).cloned().collect();
    let problems = naming_problems(&routes, &filter, &tracked);
    if !problems.is_empty() {
        return Err(Error::Naming(problems));
    }
    metrics.set_ready(true);
    let settings = Settings {
        source_name: &cfg.source.name,
        kafka: &cfg.kafka,
        output: &cfg.output,
        filter: &filter,
        routes: &routes,
    };
    let connector = if src.is_mariadb() { Connector::Mariadb } else { Connector::Mysql };
    let committed = src.resume_point().clone();
    if let Some(p) = &snapshot {
        metrics.snapshot_progress(p);
    }
    let mut snap_connect = source_cfg.connect.clone();
    // a chunk's query may scan before its first row (a snapshot.where without an index)
    snap_connect.read_timeout = Some(SNAPSHOT_READ_TIMEOUT);
    let mut snap = Snapshotter::new(&cfg.snapshot, snap_connect, snapshot.clone())
        .with_key_columns(cfg.output.key_columns.clone());
    sink.ensure_topic(&crate::kafka::signals::signals_topic(&cfg.kafka.topic_prefix)).await?;
    let signals_reader = crate::kafka::signals::SignalReader::new(&cfg.kafka, &cfg.source.name, signals)?;
    let mut pipeline = Pipeline::new(settings, registry.clone(), connector, committed, schemas, metrics, progress)
        .with_committed(snapshot, signals)
        .with_signals(signals_reader);
    pipeline.run(&mut src, &mut snap, &mut sink, shutdown).await?;
    if pipeline.stopped_uncommitted() {
        drop(sink);
        mark_stopped(cfg).await;
    }
    Ok(())
}
