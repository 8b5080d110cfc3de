//! `[snapshot]`: the rows already in the tables.

#[allow(clippy::wildcard_imports)]
use super::*;

/// `[snapshot]`: the rows already in the captured tables, read in primary-key order, chunk by
/// chunk, between the binlog events (no lock, no long transaction), and published as `op = "r"`
/// records with the same keys and schemas as the streamed ones. Each chunk's records commit in
/// the same Kafka transaction as the snapshot's progress, so a restart resumes at the next
/// chunk. Rows the binlog changes while their chunk is read are left to those change events:
/// no consumer sees a row go back to an older state.
#[derive(Debug, Clone, Deserialize)]
pub struct SnapshotSection {
    /// When to snapshot:
    /// - `initial` (default): the included tables, at the first start (no checkpoint yet);
    /// - `when_needed`: as `initial`, and again, from the server's current position, when the
    ///   checkpoint's binlog has been purged (instead of stopping);
    /// - `never`: only changes from `source.start` on;
    /// - `schema_only`: register every included table's schemas at the first start, publish no
    ///   rows.
    ///
    /// `sluice snapshot --table db.t` asks a running instance for a snapshot of more tables in
    /// any mode.
    ///
    /// **One setting decides where the first start's rows come from**: the snapshot, or the
    /// binlog's history from `source.start`. Without `source.start`, the first start streams
    /// from the server's `current` position when the mode snapshots (the snapshot covers the
    /// rows before it) and from `earliest` with `never`. An explicit `source.start` other than
    /// `current` without this key means `never` (the history covers the rows; said in the log
    /// and by `sluice check`); an explicit start together with `initial` or `when_needed` is
    /// refused at load, because every existing row would arrive twice (its history, then an
    /// `r` record), and go back to an older state in between.
    #[serde(default)]
    pub mode: SnapshotMode,
    /// Why `mode` is what it is when the file did not say (an explicit `source.start`): said
    /// in the log at the first start and by `sluice check`.
    #[serde(skip)]
    pub mode_implied: Option<String>,
    /// Rows read per chunk. The stream waits for one chunk at most; a chunk's rows are held in
    /// memory until the binlog passes the position at which they were read, and the next chunk
    /// is read while one is published: up to two chunks in memory.
    #[serde(default = "default_chunk_size")]
    pub chunk_size: usize,
    /// A chunk ends early once its rows hold this many bytes (then the next chunk asks for
    /// fewer rows), so wide rows do not multiply the memory a chunk holds (an integer, or text
    /// with a unit: `"8MiB"`).
    #[serde(default = "default_chunk_bytes", deserialize_with = "byte_size")]
    pub chunk_max_bytes: u64,
    /// How long a chunk query waits for a table lock (the server's `lock_wait_timeout` on the
    /// snapshot's connection): a chunk behind a DDL or `LOCK TABLES ... WRITE` would otherwise
    /// hold the stream for as long as the lock is held (the server's default is a year). A
    /// chunk that waits this long is tried again twice (1 and 2 s later), then Sluice stops
    /// naming the table; the next start resumes at that chunk.
    #[serde(default = "default_lock_wait", with = "humantime_serde")]
    pub lock_wait_timeout: Duration,
    /// Tables (patterns, as in `[filter]`) left out of snapshots; they are still streamed.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// A condition per table (`"shop.orders" = "created_at >= '2024-01-01'"`): only the rows it
    /// selects are snapshotted (changes to every row are still streamed).
    #[serde(default, rename = "where")]
    pub filters: BTreeMap<String, String>,
}

/// `snapshot.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotMode {
    /// At the first start.
    #[default]
    Initial,
    /// At the first start, and when the checkpoint's binlog is gone.
    WhenNeeded,
    /// Never (on demand only).
    Never,
    /// Schemas only, at the first start.
    SchemaOnly,
}

impl SnapshotMode {
    /// True when the first start reads the tables' rows.
    pub fn reads_rows(self) -> bool {
        matches!(self, SnapshotMode::Initial | SnapshotMode::WhenNeeded)
    }
}

impl Default for SnapshotSection {
    fn default() -> Self {
        SnapshotSection {
            mode: SnapshotMode::default(),
            chunk_size: default_chunk_size(),
            chunk_max_bytes: default_chunk_bytes(),
            lock_wait_timeout: default_lock_wait(),
            exclude: Vec::new(),
            filters: BTreeMap::new(),
            mode_implied: None,
        }
    }
}

impl SnapshotSection {
    /// The configured condition for `db.table`, if any.
    pub fn filter_of(&self, db: &str, table: &str) -> Option<&str> {
        self.filters.get(&format!("{db}.{table}")).map(String::as_str)
    }

    pub(super) fn validate(&self, p: &mut Problems) {
        if self.chunk_size == 0 || self.chunk_size > 1_000_000 {
            p.push("snapshot.chunk_size", "must be 1 to 1000000");
        }
        if self.chunk_max_bytes < 1024 {
            p.push("snapshot.chunk_max_bytes", "must be at least 1KiB");
        }
        if self.lock_wait_timeout < Duration::from_secs(1) {
            p.push("snapshot.lock_wait_timeout", "must be at least 1s (whole seconds)");
        }
        for pattern in &self.exclude {
            if let Some(m) = table_pattern_problem(pattern) {
                p.push("snapshot.exclude", m);
            }
        }
        for (table, condition) in &self.filters {
            if table.split('.').count() != 2 || table.contains('*') || table.contains('?') {
                p.push(format!("snapshot.where.{table}"), "the key must be \"db.table\" (no wildcards)");
            }
            if let Some(why) = condition_problem(condition) {
                p.push(format!("snapshot.where.{table:?}"), why);
            }
        }
    }
}

/// Why `condition` is not one SQL boolean expression that can stand in a `WHERE`, if it is
/// not: the snapshot pastes it into its chunk queries (`WHERE (condition) AND key > ...`), so a
/// text that closes the parenthesis, adds a statement or comments out the rest would change
/// what the query reads. Parsed with sqlparser's MySQL dialect; `sluice check` also asks the
/// server (`EXPLAIN`).
pub fn condition_problem(condition: &str) -> Option<String> {
    use sqlparser::dialect::MySqlDialect;
    use sqlparser::parser::Parser;
    use sqlparser::tokenizer::{Token, Tokenizer, Whitespace};
    if condition.trim().is_empty() {
        return Some("is empty: give one SQL condition, e.g. \"created_at >= '2024-01-01'\"".into());
    }
    let dialect = MySqlDialect {};
    let tokens = match Tokenizer::new(&dialect, condition).tokenize() {
        Ok(t) => t,
        Err(e) => return Some(format!("is not SQL: {e}")),
    };
    for t in &tokens {
        match t {
            Token::SemiColon => return Some("must be one condition: no ';'".into()),
            Token::Whitespace(Whitespace::SingleLineComment { .. } | Whitespace::MultiLineComment(_)) => {
                return Some("must not contain a comment (--, #, /* */)".into())
            }
            _ => {}
        }
    }
    let mut parser = Parser::new(&dialect).with_tokens(tokens);
    if let Err(e) = parser.parse_expr() {
        return Some(format!("is not one SQL condition: {e}"));
    }
    match parser.peek_token().token {
        Token::EOF => None,
        rest => Some(format!(
            "is not one SQL condition: it goes on after the condition at {rest:?} (unbalanced parentheses, or a \
             second clause)"
        )),
    }
}

pub(super) fn default_chunk_size() -> usize {
    10_000
}

pub(super) fn default_chunk_bytes() -> u64 {
    8 << 20
}

pub(super) fn default_lock_wait() -> Duration {
    Duration::from_secs(10)
}
