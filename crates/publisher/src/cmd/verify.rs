//! `sluice verify --config FILE`: compares each captured table with its topic and its
//! Elasticsearch index (the algorithm is in [`crate::verify`]) and says, per table and target,
//! which keys are missing, extra or different.
//! Exit 0 when every table compared is equal, 1 when one is not (or could not be verified, or
//! no table was compared at all: every one skipped), 2 for a bad configuration or option.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use super::Exit;
use crate::config::{parse_byte_size, Config};
use crate::console::Report;
use crate::filter::table_matches;
use crate::verify::{Kind, Options, TableReport, TargetKind, Verifier};

/// `sluice verify` arguments.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  sluice verify --config sluice.toml
  sluice verify -c sluice.toml -t shop.orders --format json
  sluice verify -c sluice.toml -t 'shop.*' --where 'shop.orders=created_at >= NOW() - INTERVAL 1 DAY'
  sluice verify -c sluice.toml --memory-limit 64MiB
  sluice verify -c sluice.toml --target kafka --pushgateway http://pushgateway:9091
  sluice verify -c sluice.toml -t shop.events --sample 20
  sluice verify -c sluice.toml --since-checkpoint --server-id 51002

Reads each table in key order and compares every row with the state its topic replays to
(read_committed; per key the last record wins; deletes, tombstones and truncate records
applied) and, with an [elasticsearch] section, with the documents of its index; values compared
as the records carry them (DECIMAL digits, BIGINT UNSIGNED, zero dates, every character set).
It works while sluice run keeps publishing: a key that differs is read again once the
publisher's checkpoint has passed the re-read, and only a difference that persists is
reported; a key that changed in every round is listed as unsettled, not as a difference. The
configuration is sluice run's (the source's name finds its checkpoint).

Reading a failure: missing keys are rows the topic never got (re-publish them with sluice
snapshot --table db.t), extra keys are rows deleted at the source without a delete record,
different keys name each column with both values. An index that lags or misses documents the
topic has: reset the sink's consumer group (its offsets) to replay the topic. An index that does
not exist while its table has rows is said as such (the table not verified): check
[elasticsearch.indices] and elasticsearch.index, or run sluice sink elasticsearch. A table the
sink does not sync (elasticsearch.exclude or include, a [[routes]] topic) is skipped against
Elasticsearch, with the reason.

A table that cannot be compared (no key) is skipped with the reason and named in the
summary; a run that compared no table at all (every one skipped) has verified nothing and
exits 1, saying so on stderr.

Exit 0: every table compared is equal; 1: a table differs or could not be verified, or no
table was compared; 2: a bad configuration or option.")]
pub struct VerifyArgs {
    /// The configuration file (sluice run's).
    #[arg(long, short = 'c', value_name = "FILE", env = "SLUICE_CONFIG")]
    pub config: PathBuf,
    /// A table to verify, `db.table` (wildcards `*` and `?`; repeat for more). Default: every
    /// table `[filter]` captures.
    #[arg(long = "table", short = 't', value_name = "DB.TABLE")]
    pub tables: Vec<String>,
    /// Compare only the rows of a table that match a condition: `db.table=SQL` (repeat for
    /// more tables). Replaces `snapshot.where` for that table.
    #[arg(long = "where", value_name = "DB.TABLE=SQL")]
    pub wheres: Vec<String>,
    /// What to compare the tables with: their topics, their Elasticsearch indices (the
    /// documents `sluice sink elasticsearch` writes), or both. Default: both when the
    /// configuration has an `[elasticsearch]` section, else the topics.
    #[arg(long, value_enum)]
    pub target: Option<Target>,
    /// Output: `text` for people, `json` for scripts (one object per table, then a summary).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Memory for the kept keys (about 112 bytes each): a topic with more keys is compared in
    /// several passes over the topic and the table. The process needs up to about 96 MiB more
    /// (the topic's fetch queue, three chunks of rows, the runtime).
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_byte_size)]
    pub memory_limit: u64,
    /// How long to wait for sluice run's checkpoint to pass a re-read row.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    pub wait: Duration,
    /// Re-check rounds before a key that keeps changing is called unsettled.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Keys of each outcome listed per table.
    #[arg(long, default_value_t = 10)]
    pub show: usize,
    /// More keys differing than this after the first comparison ends the table's verify as
    /// too far apart (a never snapshotted table, a publisher far behind).
    #[arg(long, default_value_t = 100_000)]
    pub max_suspects: usize,
    /// Push the run's metrics to this Prometheus Pushgateway (`http://pushgateway:9091`), one
    /// group per table and target (job `sluice_verify`): `sluice_verify_equal`,
    /// `sluice_verify_rows_total{outcome}`, `sluice_verify_last_success_timestamp_seconds`.
    #[arg(long, value_name = "URL", env = "SLUICE_VERIFY_PUSHGATEWAY")]
    pub pushgateway: Option<String>,
    /// Write the run's metrics to this file in Prometheus's text format (replaced whole; for
    /// node_exporter's textfile collector).
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,
    /// Rows per chunk of the table read.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub chunk_size: u64,
    /// A quick check of a huge table: compare N chunks (of --chunk-size rows) from random
    /// places of each table, with their keys in the target. Finds rows missing or different
    /// in the target; records without a row are only found by a whole run.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub sample: Option<u32>,
    /// A cheap periodic run: compare only the keys the binlog changed since the last verify
    /// that found the table equal (its start is kept in `<prefix>.__verify`). The first run,
    /// a run after a difference, and one after a TRUNCATE, DROP, RENAME or ALTER of the table
    /// (or a purged binlog) compare the whole table. Reads the binlog as a replica with
    /// --server-id.
    #[arg(long, conflicts_with = "sample")]
    pub since_checkpoint: bool,
    /// The replica server id --since-checkpoint reads the binlog with: unique among the
    /// server's replicas, other than source.server_id (sluice run's).
    #[arg(long, default_value_t = 51_002, value_parser = clap::value_parser!(u32).range(1..))]
    pub server_id: u32,
}

/// `--target`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// The topics.
    Kafka,
    /// The Elasticsearch indices.
    Elasticsearch,
    /// Both.
    Both,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Lines for people.
    Text,
    /// JSON lines.
    Json,
}

/// Runs `sluice verify`.
pub fn run(args: VerifyArgs) -> Exit {
    const NAME: &str = "sluice verify";
    let cfg: Config = match super::load_config(NAME, &args.config) {
        Ok(c) => c,
        Err(exit) => return exit,
    };
    for t in &args.tables {
        if let Some(m) = crate::config::table_pattern_problem(t) {
            crate::eline!("{NAME}: --table {m}");
            return Exit::Usage;
        }
    }
    // the rows are kept in memory by key, a pass over the topic and the table for each share
    if args.memory_limit < 1 << 20 {
        crate::eline!("{NAME}: --memory-limit {}: at least 1MiB (256MiB by default)", args.memory_limit);
        return Exit::Usage;
    }
    let captured = crate::filter::TableFilter::from_config(&cfg.filter);
    let mut filters = HashMap::new();
    for w in &args.wheres {
        let Some((t, cond)) = w.split_once('=').filter(|(t, _)| t.trim().split('.').count() == 2) else {
            crate::eline!("{NAME}: --where {w:?}: write it as db.table=CONDITION (e.g. shop.orders=id > 1000)");
            return Exit::Usage;
        };
        let t = t.trim();
        // pasted into the chunk queries: one condition, as snapshot.where
        if let Some(why) = crate::config::condition_problem(cond) {
            crate::eline!("{NAME}: --where {t}: the condition {why}");
            return Exit::Usage;
        }
        let (db, table) = t.split_once('.').unwrap_or_default();
        let selected = if args.tables.is_empty() {
            captured.matches(db, table)
        } else {
            args.tables.iter().any(|p| crate::filter::table_matches(p, db, table))
        };
        if !selected {
            crate::eline!(
                "{NAME}: --where {t}: the table is not verified (not selected by {}): a condition for it would do \
                 nothing",
                if args.tables.is_empty() { "[filter]" } else { "--table" }
            );
            return Exit::Usage;
        }
        filters.insert(t.to_string(), cond.to_string());
    }
    let opts = Options {
        chunk: usize::try_from(args.chunk_size).unwrap_or(10_000),
        memory_limit: args.memory_limit,
        wait: args.wait,
        rounds: args.rounds,
        max_suspects: args.max_suspects,
        show: args.show,
        filters,
        sample: args.sample,
        since: args.since_checkpoint.then_some(args.server_id),
    };
    if args.since_checkpoint && args.server_id == cfg.source.server_id {
        crate::eline!(
            "{NAME}: --server-id {} is source.server_id, sluice run's: give --since-checkpoint another one (the \
             server drops a replica whose id another connects with)",
            args.server_id
        );
        return Exit::Usage;
    }
    let has_es = cfg.elasticsearch.is_some();
    let targets = match (args.target, has_es) {
        (Some(Target::Kafka), _) | (None, false) => vec![TargetKind::Kafka],
        (Some(Target::Elasticsearch), true) => vec![TargetKind::Elasticsearch],
        (Some(Target::Both) | None, true) => vec![TargetKind::Kafka, TargetKind::Elasticsearch],
        (Some(t), false) => {
            let t = if t == Target::Both { "both" } else { "elasticsearch" };
            crate::eline!("{NAME}: --target {t} needs an [elasticsearch] section in the configuration");
            return Exit::Usage;
        }
    };
    let verifier = match Verifier::new(cfg, opts) {
        Ok(v) => v,
        Err(e) => {
            crate::eline!("{NAME}: {e}");
            return Exit::Usage;
        }
    };
    let mut out = Report::default();
    let exit = super::on_runtime(NAME, verify_all(&verifier, &args, &targets, &mut out)).unwrap_or_else(|e| e);
    match out.failure() {
        Some(e) if exit != Exit::Usage => {
            crate::eline!("{NAME}: writing the output: {e}");
            Exit::Output
        }
        _ => exit,
    }
}

async fn verify_all(v: &Verifier, args: &VerifyArgs, targets: &[TargetKind], out: &mut Report) -> Exit {
    const NAME: &str = "sluice verify";
    let tables = match tables(v, &args.tables).await {
        Ok(t) => t,
        Err((exit, m)) => {
            crate::eline!("{NAME}: {m}");
            return exit;
        }
    };
    if let Some(url) = &args.pushgateway {
        let parsed = url::Url::parse(url);
        if !parsed.as_ref().is_ok_and(|u| matches!(u.scheme(), "http" | "https")) {
            crate::eline!(
                "{NAME}: --pushgateway {:?} is not an http:// or https:// URL",
                crate::config::redact_url(url)
            );
            return Exit::Usage;
        }
    }
    let mut tally = Tally::default();
    let mut reports = Vec::new();
    for (db, table) in &tables {
        for &target in targets {
            // a table the sink does not sync is a skipped comparison, named with the reason
            let r = v.table(db, table, target).await;
            tally.add(&r);
            print(out, args.format, &r);
            reports.push(r);
        }
    }
    // the comparisons' outcomes stand; a failed push or metrics file fails the run on its own
    let published = publish_metrics(v.source_name(), &reports, args).await;
    if let Err(e) = &published {
        crate::eline!("{NAME}: {e}");
    }
    match args.format {
        Format::Text => crate::report!(out, "{}", tally.text()),
        Format::Json => crate::report!(out, "{}", tally.json()),
    }
    if tally.compared() == 0 {
        // a script reads exit 0 as "verified": say why it is not, where its logs keep it
        crate::eline!("{NAME}: {}", tally.nothing_compared());
    }
    tally.exit(published.is_ok())
}

/// How many skipped tables the summary names (each has its own line).
const SKIPPED_NAMED: usize = 10;

/// The run's outcomes counted: the summary and the exit code.
#[derive(Debug, Default)]
struct Tally {
    total: usize,
    equal: usize,
    unequal: usize,
    failed: usize,
    /// The comparisons skipped: the table and the target.
    skipped: Vec<(String, String)>,
}

impl Tally {
    fn add(&mut self, r: &TableReport) {
        self.total += 1;
        match (&r.error, r.is_equal()) {
            (Some(_), _) => self.failed += 1,
            (None, _) if r.skipped.is_some() => self.skipped.push((r.table.clone(), r.target.clone())),
            (None, true) => self.equal += 1,
            (None, false) => self.unequal += 1,
        }
    }

    /// The comparisons that came to a verdict (equal or not).
    fn compared(&self) -> usize {
        self.equal + self.unequal
    }

    /// Exit 0 only when something was compared and all of it was equal: a run that compared
    /// nothing (every table skipped, or none to verify) has verified nothing.
    fn exit(&self, published: bool) -> Exit {
        if self.unequal + self.failed == 0 && self.compared() > 0 && published {
            Exit::Ok
        } else {
            Exit::Failure
        }
    }

    /// The skipped comparisons, each table once with its targets: `shop.logs (kafka,
    /// elasticsearch), shop.raw (kafka)`.
    fn skipped_names(&self) -> String {
        // in the order met; a table's targets follow one another (verify takes a table's
        // targets together), so one look back finds the table's entry
        let mut tables: Vec<(&str, Vec<&str>)> = Vec::new();
        for (table, target) in &self.skipped {
            match tables.last_mut() {
                Some((t, targets)) if t == table => targets.push(target),
                _ => tables.push((table, vec![target])),
            }
        }
        // each skipped table has its own line above: the summary names the first few (a sink
        // that syncs a few tables of hundreds skips the others against Elasticsearch)
        let mut names: Vec<String> =
            tables.iter().take(SKIPPED_NAMED).map(|(t, targets)| format!("{t} ({})", targets.join(", "))).collect();
        if tables.len() > SKIPPED_NAMED {
            names.push(format!("and {} more", tables.len() - SKIPPED_NAMED));
        }
        names.join(", ")
    }

    /// Why a run that compared nothing verified nothing.
    fn nothing_compared(&self) -> String {
        let what = match (self.total, self.skipped.len()) {
            (0, _) => "no table to verify ([filter] captures none on the source)".to_string(),
            (_, 0) => "every comparison failed".to_string(),
            (_, n) if n == self.total => {
                format!("every table was skipped (see each one's reason above): {}", self.skipped_names())
            }
            (_, n) => format!("{n} skipped ({}), the others failed", self.skipped_names()),
        };
        format!("nothing was verified: no table was compared with its target, {what}; exit 1")
    }

    fn text(&self) -> String {
        let mut line = format!(
            "{} comparison{}: {} equal, {} not equal, {} not verified, {} skipped",
            self.total,
            if self.total == 1 { "" } else { "s" },
            self.equal,
            self.unequal,
            self.failed,
            self.skipped.len()
        );
        if !self.skipped.is_empty() {
            line.push_str(&format!(" ({})", self.skipped_names()));
        }
        if self.compared() == 0 {
            line.push_str("; NOTHING VERIFIED: no table was compared");
        }
        line
    }

    fn json(&self) -> serde_json::Value {
        let skipped: Vec<serde_json::Value> =
            self.skipped.iter().map(|(t, target)| serde_json::json!({"table": t, "target": target})).collect();
        serde_json::json!({"summary": {
            "comparisons": self.total,
            "equal": self.equal,
            "not_equal": self.unequal,
            "not_verified": self.failed,
            "skipped": self.skipped.len(),
            "skipped_tables": skipped,
            "nothing_compared": self.compared() == 0,
        }})
    }
}

/// Pushes the run's metrics and writes them to the metrics file, as asked.
async fn publish_metrics(source: &str, reports: &[TableReport], args: &VerifyArgs) -> Result<(), String> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    if let Some(path) = &args.metrics_file {
        let all: Vec<&TableReport> = reports.iter().collect();
        let text = crate::verify::push::exposition(source, &all, now, true);
        // replaced whole, never read half-written
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| format!("writing --metrics-file {}: {e}", path.display()))?;
    }
    let Some(url) = &args.pushgateway else { return Ok(()) };
    let http = crate::http::client(None, "--pushgateway", Duration::from_secs(10))?;
    for r in reports.iter().filter(|r| r.skipped.is_none()) {
        let body = crate::verify::push::exposition(source, &[r], now, false);
        let target = format!("{}{}", url.trim_end_matches('/'), crate::verify::push::group_path(source, r));
        let shown = crate::config::redact_url(url);
        // POST: replaces the metrics it sends, keeps the group's last success time
        let resp =
            http.post(&target).header("Content-Type", "text/plain; version=0.0.4").body(body).send().await.map_err(
                |e| {
                    format!("pushing the metrics to {shown}: {}", crate::http::cause_chain(&e, Duration::from_secs(10)))
                },
            )?;
        if !resp.status().is_success() {
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            return Err(format!("the Pushgateway at {shown} refused the metrics: {status} {}", text.trim()));
        }
    }
    Ok(())
}

/// The tables to verify: those the patterns (default: all) match that `[filter]` captures.
async fn tables(v: &Verifier, patterns: &[String]) -> Result<Vec<(String, String)>, (Exit, String)> {
    let mut conn = sluice_protocol::Connection::connect(v.connect_options().clone())
        .await
        .map_err(|e| (Exit::Failure, format!("connecting to the source: {e}")))?;
    let existing = crate::source::server::base_tables(&mut conn)
        .await
        .map_err(|e| (Exit::Failure, format!("listing the source's tables: {e}")))?;
    let captured: Vec<(String, String)> = existing.into_iter().filter(|(d, t)| v.captures(d, t)).collect();
    if patterns.is_empty() {
        return Ok(captured);
    }
    let mut chosen = Vec::new();
    for p in patterns {
        let matched: Vec<&(String, String)> = captured.iter().filter(|(d, t)| table_matches(p, d, t)).collect();
        if matched.is_empty() {
            return Err((
                Exit::Usage,
                format!("--table {p}: no table [filter] captures matches it on the source (or no SELECT privilege)"),
            ));
        }
        for m in matched {
            if !chosen.contains(m) {
                chosen.push(m.clone());
            }
        }
    }
    Ok(chosen)
}

fn print(out: &mut Report, format: Format, r: &TableReport) {
    if format == Format::Json {
        crate::report!(out, "{}", serde_json::to_string(r).unwrap_or_default());
        return;
    }
    // the target named too: a topic and an index may share a name
    let against = format!("{} {}", r.target, r.against);
    let (t, against, secs) = (&r.table, &against, r.seconds);
    let rows = match r.rows {
        1 => "1 row".to_string(),
        n => format!("{n} rows"),
    };
    if let Some(e) = &r.error {
        crate::report!(out, "{t} ? {against}: not verified: {e}");
        return;
    }
    if let Some(why) = &r.skipped {
        crate::report!(out, "{t} - {against}: skipped: {why}");
        return;
    }
    let unsettled =
        if r.unsettled > 0 { format!(", {} unsettled (kept changing)", r.unsettled) } else { String::new() };
    // said of the equal keys, right after their count
    let predates = if r.predates > 0 {
        let one = r.predated_columns.len() == 1;
        format!(
            " ({} of them written before column{} {}: compared without {})",
            r.predates,
            if one { "" } else { "s" },
            r.predated_columns.join(", "),
            if one { "it" } else { "them" }
        )
    } else {
        String::new()
    };
    let passes = if r.passes > 1 { format!(", {} passes", r.passes) } else { String::new() };
    let scope = r.scope.as_ref().map(|s| format!("; compared {s}")).unwrap_or_default();
    if r.is_equal() {
        crate::report!(out, "{t} = {against}: {rows} equal{predates}{unsettled} ({secs:.1} s{passes}{scope})");
        return;
    }
    crate::report!(
        out,
        "{t} ≠ {against}: {rows}: {} equal{predates}, {} missing, {} extra, {} different{unsettled} ({secs:.1} s{passes}{scope})",
        r.equal,
        r.missing,
        r.extra,
        r.different
    );
    for f in &r.findings {
        let kind = match f.kind {
            Kind::Missing => "missing  ",
            Kind::Extra => "extra    ",
            Kind::Different => "different",
        };
        let cols: Vec<String> =
            f.columns.iter().map(|c| format!("{}: table {}, {} {}", c.column, c.table, r.target, c.target)).collect();
        let key = crate::console::one_line(&f.key);
        if cols.is_empty() {
            crate::report!(out, "  {kind} key {key}");
        } else {
            crate::report!(out, "  {kind} key {key}: {}", cols.join("; "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(table: &str, target: &str) -> TableReport {
        TableReport {
            table: table.into(),
            target: target.into(),
            against: format!("sluice.{table}"),
            ..TableReport::default()
        }
    }

    fn keyless(table: &str, target: &str) -> TableReport {
        TableReport { skipped: Some("no primary key".into()), ..report(table, target) }
    }

    /// Every table skipped (all keyless): nothing was compared, so the run is not a success,
    /// and the summary and stderr say so, naming the tables.
    #[test]
    fn a_run_that_compared_nothing_is_not_verified() {
        let mut t = Tally::default();
        t.add(&keyless("shop.logs", "kafka"));
        t.add(&keyless("shop.logs", "elasticsearch"));
        t.add(&keyless("shop.raw", "kafka"));
        assert_eq!(t.exit(true), Exit::Failure);
        let text = t.text();
        assert!(text.starts_with("3 comparisons: 0 equal, 0 not equal, 0 not verified, 3 skipped"), "{text}");
        assert!(text.contains("(shop.logs (kafka, elasticsearch), shop.raw (kafka))"), "{text}");
        assert!(text.contains("NOTHING VERIFIED"), "{text}");
        let why = t.nothing_compared();
        assert!(why.contains("every table was skipped") && why.contains("shop.raw (kafka)"), "{why}");
        let json = t.json();
        assert_eq!(json["summary"]["nothing_compared"], true);
        assert_eq!(json["summary"]["skipped_tables"][2], serde_json::json!({"table": "shop.raw", "target": "kafka"}));
        // no table at all is no verification either
        let none = Tally::default();
        assert_eq!(none.exit(true), Exit::Failure);
        assert!(none.nothing_compared().contains("no table to verify"), "{}", none.nothing_compared());
    }

    /// Some compared (equal), some skipped: exit 0 as before, the skipped ones named.
    #[test]
    fn skipped_tables_are_named_beside_compared_ones() {
        let mut t = Tally::default();
        t.add(&TableReport { rows: 3, equal: 3, ..report("shop.orders", "kafka") });
        t.add(&keyless("shop.logs", "kafka"));
        assert_eq!(t.exit(true), Exit::Ok);
        assert_eq!(t.exit(false), Exit::Failure, "a failed push fails the run");
        let text = t.text();
        assert_eq!(text, "2 comparisons: 1 equal, 0 not equal, 0 not verified, 1 skipped (shop.logs (kafka))");
        assert_eq!(t.json()["summary"]["nothing_compared"], false);
        t.add(&TableReport { missing: 1, ..report("shop.items", "kafka") });
        assert_eq!(t.exit(true), Exit::Failure);
        // many skipped: the first ten named, the rest counted
        let mut many = Tally::default();
        for i in 0..25 {
            many.add(&keyless(&format!("shop.t{i:02}"), "kafka"));
            many.add(&keyless(&format!("shop.t{i:02}"), "elasticsearch"));
        }
        let names = many.skipped_names();
        assert!(names.starts_with("shop.t00 (kafka, elasticsearch), shop.t01 (kafka, elasticsearch)"), "{names}");
        assert!(names.ends_with("shop.t09 (kafka, elasticsearch), and 15 more"), "{names}");
    }
}
