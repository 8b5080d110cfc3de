//! `sluice run` configuration: a TOML file, overridden by `SLUICE_*` environment variables,
//! parsed once at load into typed sections.
//!
//! The doc comments on these structs are the user documentation (`sluice.example.toml`
//! repeats them). Loading reports **every** problem at once ([`Load::load`]): unknown keys
//! (a typo is an error, not a silently ignored setting), values of the wrong type or form
//! (`source.start = "yesterday"`, `source.tls = "maybe"`, a URL with a password), and what
//! the validations find; each problem names its key, and the `SLUICE_*` variable when
//! the value came from one.
//!
//! Environment overrides: `SLUICE_<SECTION>__<KEY>=value` sets `[section] key = value`, e.g.
//! `SLUICE_KAFKA__BROKERS=kafka-0:9092` or `SLUICE_SOURCE__SERVER_ID=7`. The value is read as a
//! TOML value when it parses as one (numbers, booleans, `[...]` arrays) and the key takes that
//! type, else as a string. A `SLUICE_*` variable that sets no key and is none of Sluice's other
//! variables is warned of (`variables`).
//! Secrets are never written in the file itself: they come from a file (`*_file`) or an
//! environment variable (`*_env`), and are redacted wherever a config is printed.
//!
//! The loading engine is in `load` (and `problem`), the values sections share in `values`;
//! every section has its own file holding its struct, its defaults and its validation together:
//! `source`, `kafka`, `registry`, `output`, `filter` (with the routes), `snapshot`,
//! `elasticsearch`, `metrics`. Adding a setting touches its section's file (and the example).

mod archive;
mod elasticsearch;
mod filter;
mod kafka;
mod load;
mod metrics;
mod output;
mod problem;
mod registry;
mod snapshot;
mod source;
#[cfg(test)]
mod tests;
mod values;
mod variables;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::position::StartFrom;

pub use archive::{ArchiveCompress, ArchiveSection, ArchiveStart};
pub use elasticsearch::{ElasticsearchSection, EsDecimal, EsJson, EsTime};
pub use filter::{FilterSection, Route};
use kafka::librdkafka_problems;
pub use kafka::KafkaSection;
pub use load::read_config;
use load::{parse_raw, RawConfig, Role};
pub use metrics::MetricsSection;
pub use output::{OutputSection, ValueMode};
pub use problem::{ConfigError, Problem, Problems};
pub use registry::RegistrySection;
pub use snapshot::{condition_problem, SnapshotMode, SnapshotSection};
pub use source::{SourceSection, SourceUrl, TlsSetting};
use values::{
    byte_size, opt_byte_size, optional_secret, read_secret, socket_address, validate_http_endpoint, validate_secret,
    yes,
};
pub use values::{parse_byte_size, redact_url, table_pattern_problem, Secret};
pub use variables::{stray_variables, StrayVariable};

/// The whole configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The MySQL/MariaDB server to capture.
    pub source: SourceSection,
    /// The Kafka cluster to publish to.
    pub kafka: KafkaSection,
    /// The Confluent-compatible Schema Registry.
    pub registry: RegistrySection,
    /// What the records look like.
    pub output: OutputSection,
    /// Which tables and columns are captured.
    pub filter: FilterSection,
    /// Topic routing rules (first match wins; default `<prefix>.<db>.<table>`).
    pub routes: Vec<Route>,
    /// The Prometheus endpoint.
    pub metrics: MetricsSection,
    /// Snapshots: the rows already in the tables.
    pub snapshot: SnapshotSection,
    /// The Elasticsearch sink's section, when the file has one (`sluice verify` compares the
    /// indices too; `sluice sink` reads it through [`SinkConfig`]).
    pub elasticsearch: Option<ElasticsearchSection>,
}

/// What `sluice sink elasticsearch` reads of the configuration: the same file as `sluice run`'s,
/// without needing `[source]` (the sink never talks to MySQL, so it needs no MySQL password).
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// The Kafka cluster the topics are read from (`topic_prefix` names them).
    pub kafka: KafkaSection,
    /// The registry the records' schemas come from.
    pub registry: RegistrySection,
    /// The Elasticsearch (or OpenSearch) side.
    pub elasticsearch: ElasticsearchSection,
    /// The Prometheus endpoint.
    pub metrics: MetricsSection,
}

/// What `sluice archive` reads of the configuration: the same file as `sluice run`'s, without
/// needing `[kafka]` or `[registry]` (the archiver talks to the source only).
#[derive(Debug, Clone)]
pub struct ArchiveConfig {
    /// The server whose binlog files are archived.
    pub source: SourceSection,
    /// Where they go.
    pub archive: ArchiveSection,
    /// The Prometheus endpoint.
    pub metrics: MetricsSection,
}

impl ArchiveConfig {
    /// What `sluice archive` needs, from the file's `text` with `SLUICE_*` overrides, validated.
    ///
    /// # Errors
    /// As [`Config::parse`]; a missing `[archive]` section is one of the problems.
    pub fn parse(
        text: &str,
        path: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<ArchiveConfig, ConfigError> {
        let (raw, _) = parse_raw(text, path, env, Role::Archive)?;
        let RawConfig { source: Some(source), archive: Some(archive), metrics, .. } = raw else {
            return Err(ConfigError::Invalid { path: path.into(), problems: Vec::new() });
        };
        Ok(ArchiveConfig { source, archive, metrics })
    }
}

impl Load for ArchiveConfig {
    fn parse(text: &str, path: &Path, env: impl IntoIterator<Item = (String, String)>) -> Result<Self, ConfigError> {
        ArchiveConfig::parse(text, path, env)
    }
}

/// A configuration a command loads (the file, then the `SLUICE_*` environment overrides):
/// `sluice run`'s and the sink's, loaded the same way by every command.
pub trait Load: Sized {
    /// The file's `text` (`path` names it in messages) with the overrides in `env`, validated.
    ///
    /// # Errors
    /// Bad TOML, and every problem at once.
    fn parse(text: &str, path: &Path, env: impl IntoIterator<Item = (String, String)>) -> Result<Self, ConfigError>;

    /// Reads `path`, applies the overrides in `env`, and validates.
    ///
    /// # Errors
    /// An unreadable file, and as [`Load::parse`].
    fn load(path: &Path, env: impl IntoIterator<Item = (String, String)>) -> Result<Self, ConfigError> {
        Self::parse(&read_config(path)?, path, env)
    }
}

impl Load for Config {
    fn parse(text: &str, path: &Path, env: impl IntoIterator<Item = (String, String)>) -> Result<Self, ConfigError> {
        Config::parse(text, path, env)
    }
}

impl Load for SinkConfig {
    fn parse(text: &str, path: &Path, env: impl IntoIterator<Item = (String, String)>) -> Result<Self, ConfigError> {
        SinkConfig::parse(text, path, env)
    }
}

impl Config {
    /// The file's `text` (`path` only names it in messages) with the `SLUICE_*` overrides of
    /// `env` applied, validated ([`Load::load`] reads the file).
    ///
    /// # Errors
    /// Bad TOML, and every problem at once (unknown keys, wrong types and forms, failed
    /// validations).
    pub fn parse(
        text: &str,
        path: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let (raw, doc) = parse_raw(text, path, env, Role::Run)?;
        let RawConfig {
            source: Some(mut source),
            kafka: Some(kafka),
            registry: Some(registry),
            output,
            filter,
            routes,
            metrics,
            snapshot,
            elasticsearch,
            // sluice archive's; sluice run does not read it (yet)
            archive: _,
        } = raw
        else {
            return Err(ConfigError::Invalid { path: path.into(), problems: Vec::new() });
        };
        let mut snapshot = snapshot;
        match first_start_rule(&doc, &source.start, snapshot.mode) {
            FirstStart::Stream(start) => source.start = start,
            FirstStart::AsConfigured => {}
            FirstStart::WithoutSnapshot(why) => {
                snapshot.mode = SnapshotMode::Never;
                snapshot.mode_implied = Some(why);
            }
            // reported by parse_raw, which never returns a configuration with a problem
            FirstStart::Conflict(_) => {}
        }
        Ok(Config { source, kafka, registry, output, filter, routes, metrics, snapshot, elasticsearch })
    }
}

impl SinkConfig {
    /// The configuration `sluice sink elasticsearch` needs (the same file as `sluice run`'s;
    /// `[source]` may be left out), from the file's `text` with `SLUICE_*` overrides, validated.
    ///
    /// # Errors
    /// As [`Config::parse`]; a missing `[elasticsearch]` section is one of the problems.
    pub fn parse(
        text: &str,
        path: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<SinkConfig, ConfigError> {
        let (raw, _) = parse_raw(text, path, env, Role::Sink)?;
        let RawConfig {
            kafka: Some(kafka), registry: Some(registry), elasticsearch: Some(elasticsearch), metrics, ..
        } = raw
        else {
            return Err(ConfigError::Invalid { path: path.into(), problems: Vec::new() });
        };
        Ok(SinkConfig { kafka, registry, elasticsearch, metrics })
    }
}

/// Where the first start's rows come from, decided by `source.start` and `snapshot.mode`
/// together (see `snapshot.mode`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum FirstStart {
    /// No `source.start`: stream from here (`current` after a snapshot, `earliest` without).
    Stream(StartFrom),
    /// Both as written.
    AsConfigured,
    /// An explicit start in the past without `snapshot.mode`: no initial snapshot (why).
    WithoutSnapshot(String),
    /// An explicit start in the past and a mode that reads rows: refused (the message).
    Conflict(String),
}

/// True when the (overridden) document sets `section.key`.
fn has_key(doc: &toml::Value, section: &str, key: &str) -> bool {
    matches!(doc, toml::Value::Table(t) if t.get(section).and_then(|s| s.get(key)).is_some())
}

fn first_start_rule(doc: &toml::Value, start: &StartFrom, mode: SnapshotMode) -> FirstStart {
    if !has_key(doc, "source", "start") {
        return FirstStart::Stream(if mode == SnapshotMode::Never { StartFrom::Earliest } else { StartFrom::Current });
    }
    if *start == StartFrom::Current {
        return FirstStart::AsConfigured;
    }
    if !has_key(doc, "snapshot", "mode") {
        return FirstStart::WithoutSnapshot(format!(
            "source.start = \"{start}\" without snapshot.mode: no initial snapshot; the binlog from {start} carries \
             the rows (to snapshot instead, leave source.start out or set it to \"current\")"
        ));
    }
    if mode.reads_rows() {
        let name = if mode == SnapshotMode::Initial { "initial" } else { "when_needed" };
        return FirstStart::Conflict(format!(
            "source.start = \"{start}\" and snapshot.mode = \"{name}\" both say where the first start's rows come \
             from: the start publishes every row's history from {start}, the snapshot every existing row again as an \
             \"r\" record, so each row would arrive twice and go back to an older state in between; keep one: leave \
             source.start out (or set it to \"current\") to snapshot, or set snapshot.mode = \"never\" (or leave \
             it out) to replay the history"
        ));
    }
    FirstStart::AsConfigured
}
