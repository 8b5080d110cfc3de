//! `sluice sink elasticsearch --config FILE`: the Elasticsearch sink's feed
//! ([`crate::elastic::feed`]) under the supervisor ([`super::supervise`]), and the metrics
//! endpoint beside it. An attempt that fails
//! for a reason that may pass (the cluster, the registry or the brokers away) restarts from the
//! committed offsets with backoff; one an operator must fix (a refused document or mapping,
//! refused credentials) stops with exit 1. SIGTERM and Ctrl-C send and commit the batch, then
//! exit 0.

use std::path::PathBuf;
use std::sync::Arc;

use super::supervise::{serve_metrics, supervise, Supervised};
use super::Exit;
use crate::config::SinkConfig;
use crate::disposition::Disposition;
use crate::elastic::feed::{consumer, Feed, SinkError};
use crate::metrics::SinkMetrics;
use crate::process::Shutdown;
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
    const NAME: &str = "sluice sink elasticsearch";
    let SinkTarget::Elasticsearch(args) = args.target;
    let cfg: SinkConfig = match super::load_config(NAME, &args.config) {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    super::on_runtime(NAME, serve(&cfg)).unwrap_or_else(|exit| exit)
}

async fn serve(cfg: &SinkConfig) -> Exit {
    let shutdown = Shutdown::on_signal("Stopping: sending and committing the batch");
    let metrics = Arc::new(SinkMetrics::new(&cfg.elasticsearch.group(&cfg.kafka.topic_prefix)));
    if let Err(exit) = serve_metrics(Sink::NAME, cfg.metrics.listen, &metrics).await {
        return exit;
    }
    let registry = match RegistryClient::new(&cfg.registry) {
        Ok(r) => r,
        Err(e) => {
            crate::eline!("{}: {e}", Sink::NAME);
            return Exit::Failure;
        }
    };
    supervise(&mut Sink { cfg, registry, metrics }, &shutdown).await
}

/// The sink under the supervisor: an attempt consumes from the committed offsets.
struct Sink<'c> {
    cfg: &'c SinkConfig,
    registry: RegistryClient,
    metrics: Arc<SinkMetrics>,
}

impl Supervised for Sink<'_> {
    type Error = SinkError;
    const NAME: &'static str = "sluice sink elasticsearch";
    const RESTARTING: &'static str = "Restarting from the committed offsets";

    fn disposition(e: &SinkError) -> Disposition {
        e.disposition()
    }

    async fn attempt(&mut self, shutdown: &Shutdown) -> Result<(), SinkError> {
        // a stop waits for the batch to be applied and committed, but not for ever: with
        // Elasticsearch away the bulk request is retried without end. Dropped then, the batch's
        // offsets stay uncommitted and its records come again (its writes are versioned)
        tokio::select! {
            r = self.apply(shutdown) => r,
            () = crate::process::after_grace(shutdown) => {
                tracing::warn!(
                    "The batch was not applied within {:?} of the stop signal (Elasticsearch not answering): \
                     stopping without committing it; its records are applied on the next start",
                    crate::process::STOP_GRACE
                );
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
}

impl Sink<'_> {
    /// One attempt: the feed connected and run until the stop or an error.
    async fn apply(&mut self, shutdown: &Shutdown) -> Result<(), SinkError> {
        let cfg = self.cfg;
        let mut feed = Feed::new(cfg, self.registry.clone(), Arc::clone(&self.metrics))?;
        let cluster = feed.hello().await?;
        let (consumer, ends) = consumer(cfg)?;
        tracing::info!(
            cluster,
            url = %crate::config::redact_url(&cfg.elasticsearch.url),
            group = %cfg.elasticsearch.group(&cfg.kafka.topic_prefix),
            "Applying the tables' topics to Elasticsearch"
        );
        self.metrics.set_ready(true);
        feed.run(&consumer, &ends, shutdown).await
    }
}
