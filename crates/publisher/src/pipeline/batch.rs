//! When the open Kafka transaction commits: at the first MySQL transaction boundary after
//! `batch_max_records` records, `batch_max_bytes` of keys and values, or `batch_max_delay` since
//! the batch began, whichever comes first (a MySQL transaction is never split). With nothing
//! pending, a checkpoint-only transaction is written every `max(batch_max_delay, 1 s)` when the
//! resume point moved, so a restart does not re-read a long stretch of uncaptured binlog, and
//! one every `LIVENESS_EVERY` (10 s) whatever happens, so `sluice position set` can tell a
//! running instance from a stopped one.

use std::time::{Duration, Instant};

use crate::config::KafkaSection;

/// The open batch's size and age, and the last commit's time.
#[derive(Debug)]
pub struct Batch {
    max_records: usize,
    max_bytes: u64,
    max_delay: Duration,
    records: usize,
    started: Instant,
    last_commit: Instant,
}

impl Batch {
    /// The commit policy of `[kafka]`.
    pub fn new(k: &KafkaSection) -> Batch {
        let now = Instant::now();
        Batch {
            max_records: k.batch_max_records,
            max_bytes: k.batch_max_bytes,
            max_delay: k.batch_max_delay,
            records: 0,
            started: now,
            last_commit: now,
        }
    }

    /// `n` records were sent into the batch.
    pub fn sent(&mut self, n: usize) {
        if self.records == 0 {
            self.started = Instant::now();
        }
        self.records += n;
    }

    /// Records in the open batch.
    pub fn records(&self) -> usize {
        self.records
    }

    /// True when the open batch (holding `bytes` of keys and values) is to commit now.
    pub fn full(&self, bytes: u64) -> bool {
        self.records >= self.max_records || bytes >= self.max_bytes || self.started.elapsed() >= self.max_delay
    }

    /// True when a checkpoint-only transaction is due (nothing pending, the position moved).
    pub fn idle_checkpoint_due(&self) -> bool {
        self.last_commit.elapsed() >= self.max_delay.max(Duration::from_secs(1))
    }

    /// True when the last commit is [`crate::position::LIVENESS_EVERY`] old: a checkpoint is
    /// due even with nothing new, as the instance's sign of life.
    pub fn liveness_due(&self) -> bool {
        self.last_commit.elapsed() >= crate::position::LIVENESS_EVERY
    }

    /// A commit started: a new batch begins.
    pub fn committed(&mut self) {
        self.records = 0;
        self.last_commit = Instant::now();
    }
}
