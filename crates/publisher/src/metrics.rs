//! What `sluice run` has done, counted in one place: row changes by operation, MySQL
//! transactions, Kafka records and commits, restarts, and how far behind the binlog events
//! were when they were read. It lives across pipeline restarts (one per process); the
//! pipeline updates it, and a progress line is logged from it every [`PROGRESS_EVERY`] while
//! events flow, and once more at a stop. (A Prometheus endpoint is to expose the same counters.)
//!
//! After a restart the changes since the last committed checkpoint are read and sent again
//! (the aborted Kafka transaction never became visible): the counters count work done, so
//! they include such replays; `restarts` says when there were any.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::avro::Op;

/// How often the progress line is logged while events flow.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// The counters of one `sluice run` process.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    /// INSERT row changes sent.
    pub creates: u64,
    /// UPDATE row changes sent (a primary-key change counts once, as an update).
    pub updates: u64,
    /// DELETE row changes sent.
    pub deletes: u64,
    /// MySQL transactions whose rows were sent (those without captured rows are not counted).
    pub transactions: u64,
    /// Kafka records sent: row changes, tombstones, and the delete + create of a key change.
    pub records: u64,
    /// Kafka transactions committed (each with a checkpoint).
    pub commits: u64,
    /// Pipeline restarts from the last committed checkpoint.
    pub restarts: u64,
    /// Seconds between the last binlog event's timestamp and its reading (the replication lag
    /// as of that event; it stays put while the server is idle).
    pub lag_seconds: i64,
    /// The last checkpoint handed to Kafka, as `file:position`.
    pub checkpoint: String,
}

impl Metrics {
    /// Counts one row change.
    pub fn row(&mut self, op: Op) {
        match op {
            Op::Create | Op::Read => self.creates += 1,
            Op::Update => self.updates += 1,
            Op::Delete => self.deletes += 1,
        }
    }

    /// All row changes.
    pub fn rows(&self) -> u64 {
        self.creates + self.updates + self.deletes
    }

    /// Takes the lag from an event's timestamp (seconds since the epoch; 0 for the
    /// artificial events that have none) read at `now_s`.
    pub fn event_read(&mut self, timestamp: u32, now_s: i64) {
        if timestamp != 0 {
            self.lag_seconds = (now_s - i64::from(timestamp)).max(0);
        }
    }
}

/// Logs a progress line every [`PROGRESS_EVERY`]: totals and the rate since the last line.
#[derive(Debug)]
pub struct ProgressLog {
    last: Instant,
    rows_then: u64,
}

impl Default for ProgressLog {
    fn default() -> Self {
        ProgressLog { last: Instant::now(), rows_then: 0 }
    }
}

impl ProgressLog {
    /// Logs when the interval has passed.
    pub fn tick(&mut self, m: &Metrics) {
        if self.last.elapsed() >= PROGRESS_EVERY {
            self.report(m);
        }
    }

    /// Logs now (at a stop, the totals of the run).
    pub fn report(&mut self, m: &Metrics) {
        let elapsed = self.last.elapsed();
        let rate = per_second(m.rows() - self.rows_then, elapsed);
        tracing::info!(
            rows = m.rows(),
            creates = m.creates,
            updates = m.updates,
            deletes = m.deletes,
            transactions = m.transactions,
            records = m.records,
            commits = m.commits,
            restarts = m.restarts,
            rows_per_s = rate,
            lag_s = m.lag_seconds,
            checkpoint = %m.checkpoint,
            "{}",
            summary(m, rate)
        );
        self.last = Instant::now();
        self.rows_then = m.rows();
    }
}

fn per_second(n: u64, over: Duration) -> u64 {
    let secs = over.as_secs_f64();
    if secs > 0.0 {
        // a rate for a log line: rounding is the point
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
        let r = (n as f64 / secs).round() as u64;
        r
    } else {
        0
    }
}

/// The human part of the progress line.
fn summary(m: &Metrics, rate: u64) -> String {
    let mut s = format!(
        "Published {} row changes ({} inserts, {} updates, {} deletes) in {} transactions, {rate}/s lately; \
         {} Kafka transactions committed",
        m.rows(),
        m.creates,
        m.updates,
        m.deletes,
        m.transactions,
        m.commits
    );
    if !m.checkpoint.is_empty() {
        let _ = write!(s, ", the last at {}", m.checkpoint);
    }
    let _ = write!(s, "; events {} s behind the server when read", m.lag_seconds);
    if m.restarts > 0 {
        let _ = write!(s, "; {} restarts from a checkpoint", m.restarts);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_the_progress_text() {
        let mut m = Metrics::default();
        for op in [Op::Create, Op::Create, Op::Update, Op::Delete] {
            m.row(op);
        }
        m.transactions = 2;
        m.commits = 1;
        m.checkpoint = "mysql-bin.000001:900".into();
        m.event_read(1_000, 1_003);
        m.event_read(0, 9_999); // an artificial event says nothing about lag
        assert_eq!((m.rows(), m.lag_seconds), (4, 3));
        assert_eq!(
            summary(&m, 2),
            "Published 4 row changes (2 inserts, 1 updates, 1 deletes) in 2 transactions, 2/s lately; 1 Kafka \
             transactions committed, the last at mysql-bin.000001:900; events 3 s behind the server when read"
        );
        m.restarts = 1;
        assert!(summary(&m, 0).ends_with("; 1 restarts from a checkpoint"));
        assert_eq!(per_second(300, Duration::from_secs(30)), 10);
    }
}
