//! `sluice sink elasticsearch --config FILE`: the restart loop around the Elasticsearch sink's
//! feed ([`crate::elastic::feed`]) and the metrics endpoint beside it. An attempt that fails
//! for a reason that may pass (the cluster, the registry or the brokers away) restarts from the
//! committed offsets with backoff; one an operator must fix (a refused document or mapping,
//! refused credentials) stops with exit 1. SIGTERM and Ctrl-C send and commit the batch, then
//! exit 0.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Exit;
use crate::config::SinkConfig;
use crate::disposition::Disposition;
use crate::elastic::feed::{consumer, Feed};
use crate::metrics::SinkMetrics;
use crate::registry::RegistryClient;

/// `sluice sink` arguments.
#[derive(Debug, clap::Args)]
pub struct SinkArgs {
    #[command(subcommand)]
    target: SinkTarget,
}

#[derive(Debug, clap::Subcommand)]
enum SinkTarget {
    /// Keep one Elasticsearch (or OpenSearch) index per table equal to the table, from the
    /// tables' topics.
    Elasticsearch(ElasticArgs),
}

/// `sluice sink elasticsearch` arguments.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  sluice sink elasticsearch --config sluice.toml
  SLUICE_ELASTICSEARCH__URL=https://es:9200 sluice sink elasticsearch -c sluice.toml

Reads the topics `sluice run` writes (read_committed, consumer group elasticsearch.group_id) and
applies them with _bulk: a row is indexed under its key (a composite key as a JSON array, [7,\"k1\"]),
a delete or tombstone deletes it, each action versioned by its record's offset, so a record delivered
twice or late never undoes a newer one. Each index gets a mapping from the table's schema before its
first document; a new column is added to it. Offsets are committed after Elasticsearch applied the
batch. The same configuration file as sluice run's; [source] is not needed. Exit 1: a document or a
mapping Elasticsearch refuses, or refused credentials; exit 2: a bad configuration.")]
pub struct ElasticArgs {
    /// The configuration file (TOML; `[kafka]`, `[registry]`, `[elasticsearch]`).
    #[arg(long, short = 'c', env = "SLUICE_CONFIG")]
    pub config: PathBuf,
}

/// Runs `sluice sink ...`.
pub fn run(args: SinkArgs) -> Exit {
    let SinkTarget::Elasticsearch(args) = args.target;
    let cfg = match SinkConfig::load(&args.config, std::env::vars()) {
        Ok(c) => c,
        Err(e) => {
            crate::eline!("sluice sink elasticsearch: {e}");
            return Exit::Usage;
        }
    };
    super::on_runtime("sluice sink elasticsearch", serve(&cfg))
}

async fn serve(cfg: &SinkConfig) -> Exit {
    let group = cfg.elasticsearch.group(&cfg.kafka.topic_prefix);
    let metrics = Arc::new(SinkMetrics::new(&group));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        crate::process::shutdown_signal().await;
        tracing::info!("Stopping: sending and committing the batch");
        let _ = stop_tx.send(true);
    });
    if let Some(addr) = cfg.metrics.listen {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                tracing::info!(%addr, "Serving /metrics, /healthz and /readyz");
                tokio::spawn(crate::metrics::serve(listener, Arc::clone(&metrics)));
            }
            Err(e) => {
                crate::eline!("sluice sink elasticsearch: metrics.listen {addr}: {e}");
                return Exit::Usage;
            }
        }
    }
    let registry = match RegistryClient::new(&cfg.registry) {
        Ok(r) => r,
        Err(e) => {
            crate::eline!("sluice sink elasticsearch: {e}");
            return Exit::Failure;
        }
    };
    let mut backoff = Duration::from_secs(1);
    loop {
        let started = Instant::now();
        let outcome = attempt(cfg, &registry, &metrics, stop_rx.clone()).await;
        metrics.set_ready(false);
        let Err(e) = outcome else { return Exit::Ok };
        if e.disposition() == Disposition::Stop {
            tracing::error!("{e}");
            crate::eline!("sluice sink elasticsearch: {e}");
            return Exit::Failure;
        }
        if *stop_rx.borrow() {
            return Exit::Ok;
        }
        if started.elapsed() > Duration::from_secs(60) {
            backoff = Duration::from_secs(1);
        }
        tracing::warn!(error = %e, wait = ?backoff, "Restarting from the committed offsets");
        metrics.restart();
        let mut rx = stop_rx.clone();
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = rx.wait_for(|s| *s) => return Exit::Ok,
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

async fn attempt(
    cfg: &SinkConfig,
    registry: &RegistryClient,
    metrics: &Arc<SinkMetrics>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), crate::elastic::feed::SinkError> {
    let mut feed = Feed::new(cfg, registry.clone(), Arc::clone(metrics))?;
    let cluster = feed.hello().await?;
    let (consumer, ends) = consumer(cfg)?;
    tracing::info!(
        cluster,
        url = %crate::config::redact_url(&cfg.elasticsearch.url),
        group = %cfg.elasticsearch.group(&cfg.kafka.topic_prefix),
        "Applying the tables' topics to Elasticsearch"
    );
    metrics.set_ready(true);
    feed.run(&consumer, &ends, stop).await
}
