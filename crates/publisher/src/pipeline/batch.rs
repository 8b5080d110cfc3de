//! When the open Kafka transaction commits: at the first MySQL transaction boundary after
//! `batch_max_records` records, `batch_max_bytes` of keys and values, or `batch_max_delay` since
//! the batch began, whichever comes first (a MySQL transaction is never split). With nothing
//! pending, a checkpoint-only transaction is written every `max(batch_max_delay, 1 s)` when the
//! resume point moved, so a restart does not re-read a long stretch of uncaptured binlog, and
//! one every `LIVENESS_EVERY` (10 s) whatever happens, so `sluice position set` can tell a
//! running instance from a stopped one (an open batch commits then too: a `batch_max_delay`
//! above it acts as 10 s). [`Batch::due`] says when a commit is due, [`Batch::deadline`] when
//! the pipeline, waiting for a quiet stream, must look again; they agree.

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
            // a longer delay acts as the liveness period (`due`): capped here, a delay of
            // years cannot overflow the deadlines below
            max_delay: k.batch_max_delay.min(crate::position::LIVENESS_EVERY),
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

    /// True when the open batch (holding `bytes` of keys and values) is to commit `now`.
    fn full(&self, bytes: u64, now: Instant) -> bool {
        self.records >= self.max_records || bytes >= self.max_bytes || now >= self.started + self.max_delay
    }

    /// True when a checkpoint-only transaction is due (nothing pending, the position moved).
    fn idle_checkpoint_due(&self, now: Instant) -> bool {
        now >= self.last_commit + self.max_delay.max(Duration::from_secs(1))
    }

    /// True when the last commit is [`crate::position::LIVENESS_EVERY`] old: a checkpoint is
    /// due even with nothing new, as the instance's sign of life.
    fn liveness_due(&self, now: Instant) -> bool {
        now >= self.last_commit + crate::position::LIVENESS_EVERY
    }

    /// True when a commit is due at a transaction boundary: an open batch (`open`, holding
    /// `bytes`) once [`Batch::full`], or at [`Batch::liveness_due`] (a batch that began just
    /// before it, or a `batch_max_delay` above it, commits then too: a running instance commits
    /// at least that often); with nothing open, a checkpoint once the resume point `moved` and
    /// [`Batch::idle_checkpoint_due`] or `schemas` (schema changes wait for a commit), or at
    /// liveness.
    pub fn due(&self, open: bool, bytes: u64, moved: bool, schemas: bool) -> bool {
        // one clock read per transaction boundary
        let now = Instant::now();
        let by_state = if open { self.full(bytes, now) } else { moved && (self.idle_checkpoint_due(now) || schemas) };
        by_state || self.liveness_due(now)
    }

    /// When a commit falls due by time alone, as [`Batch::due`] judges it (`open`: records are
    /// pending; `moved`: the resume point moved since the last commit). The pipeline waits for
    /// the stream no longer than this: a quiet source must not keep a batch's records from its
    /// readers until the next heartbeat. (It must not come before [`Batch::due`] turns true
    /// either: the wait would end at once, again and again, spinning a core.)
    pub fn deadline(&self, open: bool, moved: bool) -> Instant {
        let liveness = self.last_commit + crate::position::LIVENESS_EVERY;
        if open {
            (self.started + self.max_delay).min(liveness)
        } else if moved {
            (self.last_commit + self.max_delay.max(Duration::from_secs(1))).min(liveness)
        } else {
            liveness
        }
    }

    /// A commit started: a new batch begins.
    pub fn committed(&mut self) {
        self.records = 0;
        self.last_commit = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(delay_ms: u64) -> Batch {
        let k: KafkaSection =
            toml::from_str(&format!("brokers = \"b:9092\"\nbatch_max_delay = \"{delay_ms}ms\"")).unwrap();
        Batch::new(&k)
    }

    /// The deadline is when `full`, `idle_checkpoint_due` and `liveness_due` turn true, so the
    /// pipeline's wait ends when a commit is due, and never before.
    #[test]
    fn the_deadline_is_when_a_commit_falls_due_by_time() {
        let mut b = batch(200);
        b.sent(1);
        assert_eq!(b.deadline(true, true), b.started + Duration::from_millis(200));
        assert_eq!(b.deadline(false, true), b.last_commit + Duration::from_secs(1), "at least 1 s between checkpoints");
        assert_eq!(b.deadline(false, false), b.last_commit + crate::position::LIVENESS_EVERY);
        let long = batch(60_000);
        assert_eq!(long.deadline(true, true), long.last_commit + crate::position::LIVENESS_EVERY, "liveness first");

        // the predicates agree at the deadline
        let mut b = batch(30);
        b.sent(1);
        assert!(!b.full(0, Instant::now()));
        std::thread::sleep(b.deadline(true, false).saturating_duration_since(Instant::now()));
        assert!(b.full(0, Instant::now()));
    }

    /// A `batch_max_delay` of years acts as the liveness period, as the documentation says.
    #[test]
    fn a_delay_of_years_acts_as_the_liveness_period() {
        let k: KafkaSection = toml::from_str("brokers = \"b:9092\"\nbatch_max_delay = \"100000years\"").unwrap();
        let mut b = Batch::new(&k);
        b.sent(1);
        assert_eq!(b.deadline(true, true), b.last_commit + crate::position::LIVENESS_EVERY);
        assert!(!b.due(true, 0, true, false));
        b.last_commit -= crate::position::LIVENESS_EVERY;
        assert!(b.due(true, 0, true, false));
    }

    /// At its deadline a commit is due, in every state: a deadline that passes with nothing
    /// due has the pipeline's wait end at once, over and over (with `batch_max_delay = "30s"`
    /// a quiet stream spun a core from the liveness point, 10 s after the last commit, until
    /// the batch's own deadline).
    #[test]
    fn a_commit_is_due_at_the_deadline() {
        let past = |b: &mut Batch, by: Duration| {
            b.last_commit -= by;
            b.started -= by;
        };
        // an open batch with a delay above the liveness period: due at liveness
        let mut long = batch(30_000);
        long.sent(1);
        past(&mut long, crate::position::LIVENESS_EVERY);
        assert!(long.deadline(true, false) <= Instant::now());
        assert!(long.due(true, 0, false, false), "due at liveness, though not full");
        // an open batch begun just before liveness: due at liveness, before its own delay
        let mut late = batch(200);
        late.last_commit -= crate::position::LIVENESS_EVERY;
        late.sent(1);
        assert!(late.deadline(true, true) <= Instant::now() && !late.full(0, Instant::now()));
        assert!(late.due(true, 0, true, false));
        // nothing open, the position moved: due after the idle checkpoint's second
        let mut idle = batch(200);
        past(&mut idle, Duration::from_secs(1));
        assert!(idle.deadline(false, true) <= Instant::now());
        assert!(idle.due(false, 0, true, false));
        assert!(!idle.due(false, 0, false, false), "nothing moved: only liveness");
        // and nothing is due before the deadline
        let fresh = batch(200);
        assert!(fresh.deadline(false, true) > Instant::now());
        assert!(!fresh.due(false, 0, true, false) && !fresh.due(true, 0, true, false));
    }
}
