//! **A table read for comparison**: in key-ordered chunks by the snapshot's plan and its
//! binary-protocol values (so a row's values are what a snapshot would publish), each chunk
//! followed by the server's binlog position; and the rows of given keys, read again.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sluice_protocol::query::ColumnDefinition;
use sluice_protocol::{ConnectOptions, Connection};

use super::VerifyError;
use crate::snapshot::plan::{self, TablePlan};
use crate::snapshot::values::sql_literal;
use crate::snapshot::{parse_row, reading_session, SnapshotError};

/// A chunk of rows.
pub(crate) struct Chunk {
    /// The rows' packets (parse with [`TableReader::values`]).
    pub rows: Vec<Bytes>,
    /// The result columns.
    pub columns: Arc<[ColumnDefinition]>,
    /// The chunk key of the last row (where the next chunk starts); None: the table's end.
    pub next: Option<Vec<String>>,
}

/// Where the source's binlog was when a row was read.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Mark {
    pub file: String,
    pub position: u64,
    /// The server's GTID position then, as text.
    pub gtid: Option<String>,
    pub mariadb: bool,
}

impl Mark {
    /// True when a checkpoint is at or past this mark: by GTIDs when both have them (the same
    /// on every server of a replication topology), else by file and position.
    pub(crate) fn passed_by(&self, cp: &crate::position::Checkpoint) -> bool {
        use crate::position::StartFrom;
        use sluice_protocol::gtid::{GtidSet, MariadbGtidList};
        match (&self.gtid, cp.start()) {
            (Some(g), Ok(StartFrom::MariadbGtid(have))) if self.mariadb => {
                g.parse::<MariadbGtidList>().is_ok_and(|want| want.is_at_or_before(&have))
            }
            (Some(g), Ok(StartFrom::MysqlGtid(have))) if !self.mariadb => {
                g.parse::<GtidSet>().is_ok_and(|want| want.is_subset(&have))
            }
            _ => matches!(
                crate::position::binlog_order((&cp.file, cp.position), (&self.file, self.position)),
                Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)
            ),
        }
    }
}

impl std::fmt::Display for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.position)?;
        if let Some(g) = &self.gtid {
            write!(f, " (GTID {g})")?;
        }
        Ok(())
    }
}

/// A table's chunks read ahead ([`TableReader::prefetch`]).
pub(crate) struct Prefetch {
    rx: tokio::sync::mpsc::Receiver<Result<Chunk, VerifyError>>,
    task: tokio::task::JoinHandle<TableReader>,
}

impl Prefetch {
    /// The next chunk; None after the last.
    ///
    /// # Errors
    /// A failing query.
    pub(crate) async fn next(&mut self) -> Result<Option<Chunk>, VerifyError> {
        self.rx.recv().await.transpose()
    }

    /// The reader, once its read ended.
    ///
    /// # Errors
    /// Its task panicked.
    pub(crate) async fn finish(self) -> Result<TableReader, VerifyError> {
        drop(self.rx);
        self.task.await.map_err(|e| VerifyError::Other(format!("the table read failed: {e}")))
    }
}

/// A connection reading one table.
pub(crate) struct TableReader {
    conn: Connection,
    /// What it reads and how.
    pub plan: TablePlan,
    chunk: usize,
}

impl TableReader {
    /// A reader of `db.table` (None: no such table), rows restricted by `filter` (SQL).
    ///
    /// # Errors
    /// The server cannot be reached, or the table cannot be read exactly.
    pub(crate) async fn open(
        connect: &ConnectOptions,
        name: (&str, &str),
        filter: Option<&str>,
        key_columns: Option<&[String]>,
        chunk: usize,
    ) -> Result<Option<TableReader>, VerifyError> {
        let mut conn = Connection::connect(connect.clone()).await.map_err(VerifyError::Source)?;
        reading_session(&mut conn, Duration::from_secs(10)).await.map_err(VerifyError::Source)?;
        let mariadb = conn.is_mariadb();
        let Some(plan) = plan::load(&mut conn, name.0, name.1, filter, key_columns, mariadb).await? else {
            return Ok(None);
        };
        Ok(Some(TableReader { conn, plan, chunk }))
    }

    /// The server's binlog position now, and its GTID position (MariaDB's
    /// `gtid_binlog_pos`, MySQL's `gtid_executed`; None without GTIDs): a checkpoint written
    /// on another server after a failover compares by the latter.
    ///
    /// # Errors
    /// The server failing the query.
    pub(crate) async fn position(&mut self) -> Result<Mark, VerifyError> {
        let err = |e| VerifyError::Other(format!("reading the source's binlog position: {e}"));
        let (file, position) = crate::source::server::current_position(&mut self.conn).await.map_err(err)?;
        let sql =
            if self.conn.is_mariadb() { "SELECT @@GLOBAL.gtid_binlog_pos" } else { "SELECT @@GLOBAL.gtid_executed" };
        // a server without GTIDs (or too old to have the variable): the file and position only
        let gtid = crate::source::server::scalar(&mut self.conn, sql)
            .await
            .ok()
            .flatten()
            .map(|g| g.split_whitespace().collect::<String>())
            .filter(|g| !g.is_empty());
        Ok(Mark { file, position, gtid, mariadb: self.conn.is_mariadb() })
    }

    /// The chunk after `after` (None: the first).
    ///
    /// # Errors
    /// A failing query.
    pub(crate) async fn chunk(&mut self, after: Option<&[String]>) -> Result<Chunk, VerifyError> {
        let sql = self.plan.chunk_sql(after, self.chunk);
        let (rows, columns) = self.rows(&sql, "reading a chunk").await?;
        let next = if rows.len() < self.chunk {
            None
        } else {
            let last = rows.last().cloned().unwrap_or_default();
            let mut values = Vec::new();
            parse_row(&self.plan, &columns, &last, &mut values)?;
            self.plan
                .key()
                .iter()
                .map(|&k| values.get(k).and_then(|v| v.as_ref()).and_then(sql_literal))
                .collect::<Option<Vec<String>>>()
        };
        Ok(Chunk { rows, columns, next })
    }

    /// Reads the whole table ahead of its consumer on a task of its own, at most `ahead`
    /// chunks in hand: the server's time for the next chunks overlaps the caller's work on
    /// this one (and on the target, read meanwhile). [`Prefetch::finish`] gives the reader
    /// back. (Digesting the rows on that task too was measured: no faster on two cores, where
    /// the server's work competes for the same CPU.)
    pub(crate) fn prefetch(mut self, ahead: usize) -> Prefetch {
        let (tx, rx) = tokio::sync::mpsc::channel(ahead.max(1));
        let task = tokio::spawn(async move {
            let mut after: Option<Vec<String>> = None;
            loop {
                let chunk = self.chunk(after.as_deref()).await;
                let next = chunk.as_ref().ok().and_then(|c| c.next.clone());
                let last = next.is_none();
                // the consumer gone: it failed, and says why itself
                if tx.send(chunk).await.is_err() || last {
                    break;
                }
                after = next;
            }
            self
        });
        Prefetch { rx, task }
    }

    /// About `count` chunks' rows from random places of the table (`verify --sample`), in key
    /// order, overlapping ones merged by the caller (a row may come twice), and what they are.
    ///
    /// A chunk key starting with an integer column is sampled by windows of key values: a
    /// random start between the smallest and largest, the rows whose first key column is within
    /// `width` of it (one index lookup each). The width is the chunk size spread over the key
    /// range by the table's estimated row count, so a window holds about a chunk where the keys
    /// are even. Windows are drawn until their rows make `count` chunks; every row of a window
    /// is taken, up to [`WINDOW_CAP_CHUNKS`] chunks (beyond, a run of that many from a random
    /// place in it, its rows counted first). A window in a gap of the keys is drawn again; as
    /// each row is in as many windows as any other, every row is as likely to be compared as
    /// any other, but for rows in windows above the cap. Windows that all hold under half a
    /// chunk widen (the rows to compare are sparser than the estimate: a selective `--where`).
    /// (The next chunk from a random value would pick the rows after each gap far more often
    /// than the others: with keys 1..200 and 7777, nearly every chunk would be the row 7777;
    /// windows cut to one chunk still favoured it, 40% against 3% per row.) When every window
    /// drawn falls in a gap, and for any other key, chunks start at random row numbers
    /// (`OFFSET`: the server walks the index up to it, so such a sample costs up to a read of
    /// the table's keys).
    ///
    /// # Errors
    /// A failing query.
    pub(crate) async fn sample(&mut self, count: u32) -> Result<(Vec<Chunk>, String), VerifyError> {
        let Some(sql) = self.plan.first_key_bounds_sql() else {
            let chunks = self.sample_by_row_number(count).await?;
            let what = format!("{} random chunks of up to {} rows", chunks.len(), self.chunk);
            return Ok((chunks, what));
        };
        let err = |e| VerifyError::Other(format!("{}: reading its key range: {e}", self.plan.name));
        let bounds = crate::source::server::scalar(&mut self.conn, &sql).await.map_err(err)?;
        // NULL: no rows (or none matching --where)
        let Some((lo, hi)) = bounds.as_deref().and_then(|b| {
            let (a, b) = b.split_once(' ')?;
            Some((a.parse::<i128>().ok()?, b.parse::<i128>().ok()?))
        }) else {
            return Ok((Vec::new(), "no rows".into()));
        };
        // the server's estimate, or (none yet, say for a table just filled) a count
        let rows = match self.plan.estimate.filter(|&e| e > 0) {
            Some(e) => e,
            None => self.count_rows().await?,
        };
        let first_width = window_width(hi - lo + 1, rows, self.chunk);
        let mut width = first_width;
        // a start before `lo` too: the first rows are in as many windows as the others; a
        // window as wide as the whole range is the whole range (every row, when a chunk holds
        // them all), not a random part of it
        let span_of = |width: i128| {
            let whole = width > hi - lo;
            (whole, if whole { 1 } else { u128::try_from(hi - lo + width).unwrap_or(u128::MAX) })
        };
        let (mut whole, mut span) = span_of(width);
        let (mut windows, mut cut, mut tried) = (Vec::new(), 0, std::collections::HashSet::new());
        // every row of a window is compared, up to `cap`: a window cut to a chunk would keep a
        // row of a dense window less often than a lone key's (keys 1..200 and 7777: the 7777
        // was in 40% of one-chunk samples, each other row in 3%). So a sample is the rows of
        // the windows drawn until they hold `count` chunks' worth, every row as likely as any
        // other unless its window holds more than `cap`.
        let chunk = self.chunk as u64;
        let cap = self.chunk.saturating_mul(WINDOW_CAP_CHUNKS);
        let budget = u64::from(count).saturating_mul(chunk);
        let mut taken = 0u64;
        // the windows of the current width that held rows, their rows, and whether one held
        // half a chunk: five such windows none of which did mean the estimate was of more rows
        // than there are to compare (a selective --where, a stale estimate), so the windows
        // widen. (Empty windows are gaps in the keys, drawn again, and a few far keys hold a row
        // each while the dense ones fill their windows: neither is a sign of sparse rows.)
        // Every key value stays in as many windows of a width as any other, so the sample stays
        // fair.
        let (mut drawn, mut held, mut half_full) = (0u64, 0u64, false);
        // the rows of the whole range, once counted
        let mut whole_count = None;
        // a bound on the queries for a table whose keys are mostly gaps
        for _ in 0..count.saturating_mul(50) {
            // (the whole range is drawn again while it holds more than `cap`: another run of it)
            if taken >= budget || (!whole && tried.len() as u128 >= span) {
                break;
            }
            let s = if whole { lo } else { lo - width + 1 + i128::try_from(fastrand::u128(..span)).unwrap_or(0) };
            if !whole && !tried.insert(s) {
                continue;
            }
            let (from, to) = (s, s.saturating_add(width));
            // one row more than `cap`: whether the window holds more
            let Some(sql) = self.plan.window_sql(from, to, cap + 1, 0) else { break };
            let (mut rows, mut columns) = self.rows(&sql, "reading a sampled chunk").await?;
            if !rows.is_empty() {
                (drawn, held) = (drawn + 1, held + rows.len() as u64);
                half_full |= (rows.len() as u64).saturating_mul(2) >= chunk;
            }
            if drawn >= 5 && !whole && !half_full {
                // at most 16 times wider a step: a few windows say little of the whole range
                let factor = (drawn.saturating_mul(chunk) / held.max(1)).clamp(2, 16);
                width = width.saturating_mul(i128::from(factor)).min(hi - lo + 1);
                (whole, span) = span_of(width);
                (drawn, held, half_full) = (0, 0, false);
                tried.clear();
                // the windows so far held too few rows to count as chunks: drawn again, wider
                (windows, cut, taken) = (Vec::new(), 0, 0);
                continue;
            }
            if rows.len() > cap {
                // a run of `cap` from a random place of the window: no row of it is left out
                let in_window = match whole_count {
                    Some(n) => n,
                    None => {
                        let sql = self.plan.window_count_sql(from, to).unwrap_or_default();
                        let err = |e| {
                            VerifyError::Other(format!(
                                "{}: counting the rows of a sampled window: {e}",
                                self.plan.name
                            ))
                        };
                        let n: u64 = crate::source::server::scalar(&mut self.conn, &sql)
                            .await
                            .map_err(err)?
                            .and_then(|c| c.parse().ok())
                            .unwrap_or(0);
                        whole_count = whole.then_some(n);
                        n
                    }
                };
                let skip = fastrand::u64(..=in_window.saturating_sub(cap as u64));
                let sql = self.plan.window_sql(from, to, cap, skip).unwrap_or_default();
                (rows, columns) = self.rows(&sql, "reading a sampled chunk").await?;
                cut += 1;
            } else if whole {
                // every row of the range in one window: nothing else to draw
                if !rows.is_empty() {
                    windows.push((s, Chunk { rows, columns, next: None }));
                }
                break;
            }
            if !rows.is_empty() {
                taken += rows.len() as u64;
                windows.push((s, Chunk { rows, columns, next: None }));
            }
        }
        let key = self.plan.key().first().and_then(|&k| self.plan.table_map.columns.get(k)).map(|c| c.display_name());
        let key = key.unwrap_or_default();
        if windows.is_empty() {
            // every window fell in a gap of the keys (a few rows far from the others): rows
            // are there (the bounds said so), so chunks at random row numbers instead
            let chunks = self.sample_by_row_number(count).await?;
            let what = format!(
                "{} random chunks of up to {} rows at random row numbers ({} windows of {width} values of {key} drawn \
                 fell in gaps of the keys)",
                chunks.len(),
                self.chunk,
                tried.len()
            );
            return Ok((chunks, what));
        }
        windows.sort_unstable_by_key(|(s, _)| *s);
        let chunks: Vec<Chunk> = windows.into_iter().map(|(_, c)| c).collect();
        let each = match (whole, width == first_width) {
            (true, _) => format!("each from the whole range of {key}"),
            (false, true) => format!("each from a window of {width} consecutive values of {key}"),
            (false, false) => format!(
                "each from a window of {first_width} to {width} consecutive values of {key} (widened: the rows to \
                 compare are sparser than the table's estimate, as with a selective --where)"
            ),
        };
        let rows: usize = chunks.iter().map(|c| c.rows.len()).sum();
        let mut what = format!(
            "{} random chunks ({rows} rows, every row of each window up to {cap}; {} chunks of {} asked), {each}",
            chunks.len(),
            count,
            self.chunk
        );
        if cut > 0 {
            what.push_str(&format!(" ({cut} held more than {cap} rows: a run of {cap} from a random place in each)"));
        }
        Ok((chunks, what))
    }

    /// `count` chunks starting at random row numbers (`OFFSET`).
    async fn sample_by_row_number(&mut self, count: u32) -> Result<Vec<Chunk>, VerifyError> {
        let rows = i64::try_from(self.count_rows().await?).unwrap_or(i64::MAX);
        let chunk = i64::try_from(self.chunk.max(1)).unwrap_or(i64::MAX);
        // a start before the first row too (the chunk then begins with it, shorter): the first
        // rows are in as many chunks as the others
        let mut starts: Vec<i64> = (0..count).map(|_| fastrand::i64(1 - chunk..rows.max(1))).collect();
        starts.sort_unstable();
        starts.dedup();
        let mut chunks = Vec::new();
        for s in starts {
            let (offset, limit) = (s.max(0), chunk + s.min(0));
            let limit = usize::try_from(limit).unwrap_or(1);
            let sql = format!("{} OFFSET {offset}", self.plan.chunk_sql(None, limit));
            let (rows, columns) = self.rows(&sql, "reading a sampled chunk").await?;
            if !rows.is_empty() {
                chunks.push(Chunk { rows, columns, next: None });
            }
        }
        Ok(chunks)
    }

    /// The rows the table's plan reads (a full count: an index scan).
    async fn count_rows(&mut self) -> Result<u64, VerifyError> {
        let err = |e| VerifyError::Other(format!("{}: counting its rows: {e}", self.plan.name));
        let sql = format!("SELECT COUNT(*) FROM ({}) AS t", self.plan.all_sql());
        let count = crate::source::server::scalar(&mut self.conn, &sql).await.map_err(err)?;
        Ok(count.and_then(|c| c.parse().ok()).unwrap_or(0))
    }

    /// The rows of these keys (chunk-key SQL literals), those that exist.
    ///
    /// # Errors
    /// A failing query.
    pub(crate) async fn rows_of(&mut self, keys: &[Vec<String>]) -> Result<Chunk, VerifyError> {
        let sql = self.plan.keys_sql(keys);
        let (rows, columns) = self.rows(&sql, "reading rows again by key").await?;
        Ok(Chunk { rows, columns, next: None })
    }

    async fn rows(
        &mut self,
        sql: &str,
        during: &'static str,
    ) -> Result<(Vec<Bytes>, Arc<[ColumnDefinition]>), VerifyError> {
        let name = self.plan.name.clone();
        let q = |source| VerifyError::Table(SnapshotError::Query { table: name.clone(), during, source });
        let prepared = self.conn.prepare(sql).await.map_err(q)?;
        let mut rs = self.conn.execute(&prepared).await.map_err(q)?;
        let columns: Arc<[ColumnDefinition]> = rs.columns().into();
        if columns.len() != self.plan.table_map.columns.len() {
            return Err(VerifyError::Other(format!(
                "{}: the table's columns changed while it was read (ALTER TABLE?): verify it again",
                self.plan.name
            )));
        }
        let mut rows = Vec::new();
        while let Some(packet) = rs.next_row().await.map_err(q)? {
            rows.push(packet);
        }
        self.conn.close_statement(&prepared).await.map_err(q)?;
        Ok((rows, columns))
    }
}

/// A sampled window's rows are compared up to this many chunks' worth; beyond, a run of that
/// many from a random place of it (its rows then drawn less often than others).
const WINDOW_CAP_CHUNKS: usize = 10;

/// How many consecutive key values a sampled window spans so that it holds about `chunk` of
/// `rows` rows spread over `span` values (at least 1).
fn window_width(span: i128, rows: u64, chunk: usize) -> i128 {
    let (rows, chunk) = (i128::from(rows.max(1)), i128::try_from(chunk.max(1)).unwrap_or(i128::MAX));
    // rounded up; a window never wider than the whole range
    (span.saturating_mul(chunk).saturating_add(rows - 1) / rows).clamp(1, span.max(1))
}

#[cfg(test)]
mod tests {
    use super::{window_width, Mark};
    use crate::position::Checkpoint;

    #[test]
    fn a_window_holds_about_a_chunk_of_rows() {
        // dense keys: a window is a chunk's worth of values
        assert_eq!(window_width(1000, 1000, 50), 50);
        // keys 1..200 and 7777: 201 rows over 7777 values
        assert_eq!(window_width(7777, 201, 50), 1935);
        // more rows than the range holds (a stale estimate): at least one value
        assert_eq!(window_width(10, 1_000_000, 50), 1);
        // a chunk larger than the table: the whole range
        assert_eq!(window_width(100, 10, 1000), 100);
        // the whole i64 range does not overflow
        let span = i128::from(i64::MAX) - i128::from(i64::MIN) + 1;
        assert_eq!(window_width(span, 1 << 40, 1 << 20), span >> 20);
        assert_eq!(window_width(1, 0, 0), 1);
    }

    fn checkpoint(file: &str, position: u64, gtid: Option<&str>, flavor: &str) -> Checkpoint {
        serde_json::from_value(serde_json::json!({
            "file": file, "position": position, "gtid": gtid, "gtid_flavor": gtid.map(|_| flavor),
            "ts_ms": 1, "version": 1
        }))
        .unwrap()
    }

    fn mark(file: &str, position: u64, gtid: Option<&str>, mariadb: bool) -> Mark {
        Mark { file: file.into(), position, gtid: gtid.map(str::to_string), mariadb }
    }

    #[test]
    fn a_checkpoint_passes_a_mark_by_gtid_when_both_have_them() {
        // after a failover the checkpoint's file is the replica's: its GTIDs still compare
        let at = mark("mysql-bin.000007", 900, Some("0-1-120"), true);
        assert!(at.passed_by(&checkpoint("replica-bin.000002", 4, Some("0-1-120"), "mariadb")));
        assert!(at.passed_by(&checkpoint("replica-bin.000001", 4, Some("0-1-121,1-5-3"), "mariadb")));
        assert!(!at.passed_by(&checkpoint("zzz.000009", 4, Some("0-1-119"), "mariadb")));
        // a domain the checkpoint has not seen yet: not passed
        let two = mark("mysql-bin.000007", 900, Some("0-1-120,1-1-2"), true);
        assert!(!two.passed_by(&checkpoint("mysql-bin.000008", 4, Some("0-1-125"), "mariadb")));
        // MySQL: the server's executed set within the checkpoint's
        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let my = mark("binlog.000003", 500, Some(&format!("{uuid}:1-10")), false);
        assert!(my.passed_by(&checkpoint("binlog.000001", 4, Some(&format!("{uuid}:1-12")), "mysql")));
        assert!(!my.passed_by(&checkpoint("binlog.000009", 4, Some(&format!("{uuid}:1-9")), "mysql")));
    }

    #[test]
    fn without_gtids_by_file_and_position() {
        let at = mark("mysql-bin.000007", 900, None, true);
        assert!(at.passed_by(&checkpoint("mysql-bin.000007", 900, None, "")));
        assert!(at.passed_by(&checkpoint("mysql-bin.000008", 4, None, "")));
        assert!(!at.passed_by(&checkpoint("mysql-bin.000007", 899, None, "")));
        // the server has GTIDs, the checkpoint (streaming by file) none
        let g = mark("mysql-bin.000007", 900, Some("0-1-120"), true);
        assert!(!g.passed_by(&checkpoint("mysql-bin.000006", 4, None, "")));
    }
}
