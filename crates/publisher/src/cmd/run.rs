//! `sluice run`: the restart loop around pipeline attempts, and what the process serves beside
//! them (the metrics endpoint, the lag-in-bytes watcher). An attempt connects the Kafka sink,
//! reads the committed checkpoint and the schema history, opens the replication stream there
//! (or records the first start), and hands both to the [`Pipeline`]. An attempt that ends with
//! an error is followed by what its [`Disposition`] says: restart with backoff, wait for a
//! predecessor, or stop with exit 1. SIGTERM and Ctrl-C commit at the next transaction boundary.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Exit;
use crate::avro::Connector;
use crate::config::{Config, SnapshotMode};
use crate::disposition::Disposition;
use crate::filter::TableFilter;
use crate::kafka::{read_checkpoint, KafkaSink};
use crate::metrics::{Metrics, ProgressLog};
use crate::pipeline::start::{
    apply_filters, commit_start, initial_snapshot, naming_problems, resolve_at, resolve_configured_start,
    resolve_early, ResolvedStart,
};
use crate::pipeline::tables::Routes;
use crate::pipeline::{Error, Pipeline, Settings};
use crate::position::StartFrom;
use crate::registry::RegistryClient;
use crate::snapshot::Snapshotter;
use crate::source::{CheckedConnection, Endpoint, ReplicationSource, SourceConfig, SourceError};

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

/// How long a stop signal waits for the next transaction boundary.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// How long a snapshot's query may wait for the server's next packet.
const SNAPSHOT_READ_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `sluice run`.
pub fn run(args: RunArgs) -> Exit {
    let cfg = match Config::load(&args.config, std::env::vars()) {
        Ok(c) => c,
        Err(e) => {
            crate::eline!("sluice run: {e}");
            return Exit::Usage;
        }
    };
    super::on_runtime("sluice run", serve(&cfg))
}

async fn serve(cfg: &Config) -> Exit {
    let stop = Arc::new(AtomicBool::new(false));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let flag = Arc::clone(&stop);
    tokio::spawn(async move {
        crate::process::shutdown_signal().await;
        tracing::info!("Stopping at the next transaction boundary");
        flag.store(true, Ordering::SeqCst);
        let _ = stop_tx.send(true);
    });
    let metrics = Arc::new(Metrics::new(&cfg.source.name));
    // Resolves after a stop was asked for: at once while nothing streams (connecting, waiting
    // for Kafka or the source: nothing is in flight), else STOP_GRACE later, when a pipeline
    // inside a long MySQL transaction is dropped. That loses nothing: its open Kafka
    // transaction is never committed, and the next start aborts it and replays from the last
    // committed checkpoint.
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>, m: Arc<Metrics>| async move {
        let _ = rx.wait_for(|s| *s).await;
        if m.is_ready() {
            tokio::time::sleep(STOP_GRACE).await;
            tracing::warn!(
                "No transaction boundary within {STOP_GRACE:?} of the stop signal: stopping without committing; \
                 the next start replays from the last committed checkpoint"
            );
        } else {
            tracing::info!("Stopped while connecting: nothing was in flight");
        }
    };
    // bound before anything else starts, so a taken port is a configuration error at once
    if let Some(addr) = cfg.metrics.listen {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                tracing::info!(%addr, "Serving /metrics, /healthz and /readyz");
                tokio::spawn(crate::metrics::serve(listener, Arc::clone(&metrics)));
            }
            Err(e) => {
                crate::eline!("sluice run: metrics.listen {addr}: {e}");
                return Exit::Usage;
            }
        }
    }
    // the server streamed from (an index into source.servers()): the lag watcher follows it
    let (active_tx, active_rx) = tokio::sync::watch::channel(0usize);
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
            crate::eline!("sluice run: {e}");
            return Exit::Failure;
        }
    };
    registry.count_requests(metrics.registry());
    let mut backoff = Duration::from_secs(1);
    let mut progress = ProgressLog::default();
    let mut first_start = tokio::select! {
        s = resolve_early(cfg) => s,
        () = stopped(stop_rx.clone(), Arc::clone(&metrics)) => return Exit::Ok,
    };
    // the server streamed from (an index into source.servers()), and since when it has been
    // unreachable (consecutive attempts failing to reach it)
    let (mut server, mut unreachable_since) = (0usize, None::<Instant>);
    loop {
        let started = Instant::now();
        let outcome = tokio::select! {
            r = attempt(cfg, server, &stop, &metrics, &registry, &mut progress, &mut first_start) => r,
            () = stopped(stop_rx.clone(), Arc::clone(&metrics)) => {
                mark_stopped(cfg).await;
                if let Some(s) = &first_start {
                    tracing::warn!(
                        start = %cfg.source.start,
                        position = %s.resume,
                        "Stopped before the first checkpoint was recorded (Kafka never answered): the next start \
                         resolves source.start again, so changes written meanwhile are not captured unless it names \
                         a position"
                    );
                }
                return Exit::Ok;
            }
        };
        metrics.set_ready(false);
        let Err(e) = outcome else { return Exit::Ok };
        let wait = match e.disposition() {
            Disposition::Stop => {
                tracing::error!("{e}");
                if !e.is_fenced() {
                    mark_stopped(cfg).await;
                }
                crate::eline!("sluice run: {e}");
                return Exit::Failure;
            }
            _ if stop.load(Ordering::SeqCst) => {
                mark_stopped(cfg).await;
                return Exit::Ok;
            }
            Disposition::WaitForPredecessor => {
                // not a failure: the server drops the dead connection at its next heartbeat
                let wait = cfg.source.heartbeat / 2 + Duration::from_millis(200);
                tracing::info!(wait = ?wait, "Waiting for the server to drop this source's previous connection");
                wait
            }
            Disposition::Restart | Disposition::Retry => {
                if started.elapsed() > Duration::from_secs(60) {
                    backoff = Duration::from_secs(1);
                }
                let servers = cfg.source.servers();
                if e.source_unreachable() && servers.len() > 1 {
                    let since = *unreachable_since.get_or_insert(started);
                    if since.elapsed() >= cfg.source.failover_after {
                        let next = (server + 1) % servers.len();
                        tracing::warn!(
                            from = %servers[server % servers.len()],
                            to = %servers[next],
                            unreachable_for = ?since.elapsed(),
                            "The source server stays unreachable: failing over (resuming by the checkpoint's GTIDs)"
                        );
                        server = next;
                        let _ = active_tx.send(server);
                        // without a checkpoint yet, source.start is resolved on the new server
                        first_start = None;
                        unreachable_since = None;
                        backoff = Duration::from_secs(1);
                    }
                } else {
                    unreachable_since = None;
                }
                tracing::warn!(error = %e, wait = ?backoff, "Restarting from the last committed checkpoint");
                metrics.restart();
                let wait = backoff;
                backoff = (backoff * 2).min(Duration::from_secs(30));
                wait
            }
        };
        let mut rx = stop_rx.clone();
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = rx.wait_for(|s| *s) => return Exit::Ok,
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
        let (k, source) = (cfg.kafka.clone(), cfg.source.name.clone());
        let checkpoint = tokio::task::spawn_blocking(move || read_checkpoint(&k, &source))
            .await
            .map_err(|e| crate::kafka::Error::Fatal(format!("reading the checkpoint: {e}")))??;
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

/// One pipeline attempt. `first_start` holds the configured start resolved at the server while
/// no checkpoint exists: it is recorded as the first checkpoint, in a Kafka transaction of its
/// own, before anything is published, so every later attempt resumes from it.
async fn attempt(
    cfg: &Config,
    server: usize,
    stop: &AtomicBool,
    metrics: &Arc<Metrics>,
    registry: &RegistryClient,
    progress: &mut ProgressLog,
    first_start: &mut Option<ResolvedStart>,
) -> Result<(), Error> {
    let mut sink = KafkaSink::connect(&cfg.kafka, &cfg.source.name).await?;
    sink.time_commits(metrics.commit_timer());
    let k = cfg.kafka.clone();
    let source = cfg.source.name.clone();
    let checkpoint = tokio::task::spawn_blocking(move || read_checkpoint(&k, &source))
        .await
        .map_err(|e| crate::kafka::Error::Fatal(format!("reading the checkpoint: {e}")))??;
    if let Some(c) = &checkpoint {
        // a sign of life at every attempt, also while the source stays away: `sluice position
        // set` refuses to move the checkpoint of a running instance
        sink.commit(&c.clone().renewed(false), || {}).await?;
        sink.finish().await?;
    }
    let source_cfg = SourceConfig::for_server(cfg, server)?;
    // the tracked schema: as committed with the checkpoint, else read from the server at the
    // moment the start position is taken
    let committed = crate::schema::committed(&cfg.kafka, &cfg.source.name, checkpoint.as_ref()).await?;
    let filter = TableFilter::from_config(&cfg.filter);
    let captured = |db: &str, table: &str| filter.matches(db, table);
    let (mut snapshot, signals) = match &checkpoint {
        Some(c) => (c.snapshot.clone(), c.signals_offset),
        None => (None, None),
    };
    if let Some(p) = snapshot.as_mut() {
        let left_out = apply_filters(cfg, p);
        if !left_out.is_empty() {
            tracing::warn!(
                tables = %left_out.join(", "),
                "Snapshot: tables the configuration leaves out now are not read (skipped)"
            );
        }
    }
    let (mut src, mut schemas, snapshot, signals) = match &checkpoint {
        Some(c) => {
            *first_start = None;
            if let Some((file, position)) = metrics.last_checkpoint() {
                if (c.file.as_str(), c.position) != (file.as_str(), position) && !c.file.is_empty() {
                    tracing::warn!(
                        committed = %format!("{file}:{position}"),
                        now = %c,
                        "The committed checkpoint moved while this instance ran (sluice position set?): resuming \
                         where it is now"
                    );
                }
            }
            let servers = cfg.source.servers();
            if server > 0 && c.gtid.is_none() {
                // a binlog file and position mean nothing on another server
                return Err(SourceError::Start(format!(
                    "cannot fail over to {}: the checkpoint ({c}) has no GTIDs to resume by there; enable GTIDs on \
                     the servers, or restart Sluice against {} once it is back",
                    servers[server % servers.len()],
                    cfg.source.url
                ))
                .into());
            }
            let start = c.start()?;
            tracing::info!(resume = %start, server = %servers[server % servers.len()], "Resuming from the committed checkpoint");
            let load: Option<crate::schema::Captured<'_>> = committed.needs_load().then_some(&captured);
            match ReplicationSource::start_with_schema(source_cfg.clone(), start, load).await {
                Ok((src, loaded)) => (src, committed.into_history(loaded), snapshot, signals),
                Err(SourceError::Purged(why)) if cfg.snapshot.mode == SnapshotMode::WhenNeeded => {
                    // the binlog since the checkpoint is gone: snapshot again from the present
                    tracing::warn!(
                        checkpoint = %c,
                        "{why}; snapshot.mode = when_needed: taking a new snapshot and streaming from the server's \
                         current position"
                    );
                    let mut checked = CheckedConnection::open(&source_cfg).await?;
                    let start = resolve_at(cfg, &mut checked, &StartFrom::Current).await?;
                    drop(checked);
                    let snapshot = initial_snapshot(cfg, &start.tables, "when_needed");
                    let resume = start.resume.clone();
                    let (m, file, pos) = (Arc::clone(metrics), resume.file.clone(), resume.position);
                    let schemas =
                        commit_start(cfg, &mut sink, committed, start, snapshot.clone(), signals, move || {
                            m.commit(&file, pos);
                        })
                        .await?;
                    let checked = CheckedConnection::open(&source_cfg).await?;
                    (ReplicationSource::open(source_cfg.clone(), checked, resume).await?, schemas, snapshot, signals)
                }
                Err(e) => return Err(e.into()),
            }
        }
        None => {
            let start = match first_start.as_ref() {
                Some(s) => s.clone(),
                None => first_start.insert(resolve_configured_start(cfg, server).await?).clone(),
            };
            // Record where the first start begins before anything is published: a restart of
            // this attempt (broker, registry, a fenced or failed transaction) resumes here,
            // never at a later "current".
            let resume = start.resume.clone();
            let (m, file, pos) = (Arc::clone(metrics), resume.file.clone(), resume.position);
            let snapshot = initial_snapshot(cfg, &start.tables, "initial");
            let signals = crate::kafka::signals::end_offset(&cfg.kafka).await?;
            let schemas =
                commit_start(cfg, &mut sink, committed, start, snapshot.clone(), signals, move || m.commit(&file, pos))
                    .await?;
            *first_start = None;
            if let Some(why) = &cfg.snapshot.mode_implied {
                tracing::info!("{why}");
            }
            tracing::info!(
                start = %cfg.source.start,
                position = %resume,
                snapshot_tables = snapshot.as_ref().map_or(0, |s| s.tables.len()),
                "No checkpoint yet: recorded the configured start as the first checkpoint"
            );
            let checked = CheckedConnection::open(&source_cfg).await?;
            // the offset just committed: a request made from now on is read even if this
            // instance stops before it commits again
            (ReplicationSource::open(source_cfg.clone(), checked, resume).await?, schemas, snapshot, signals)
        }
    };
    schemas.set_lower_case_table_names(src.lower_case_table_names());
    let tracked: Vec<_> = schemas.tables().cloned().collect();
    let problems = naming_problems(cfg, &tracked);
    if !problems.is_empty() {
        return Err(Error::Naming(problems));
    }
    metrics.set_ready(true);
    let registry = registry.clone();
    let routes = Routes::new(&cfg.routes, &cfg.kafka.topic_prefix);
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
    let mut pipeline = Pipeline::new(settings, registry, connector, committed, schemas, metrics, progress)
        .with_committed(snapshot, signals)
        .with_signals(signals_reader);
    pipeline.run(&mut src, &mut snap, &mut sink, stop).await
}
