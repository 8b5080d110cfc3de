//! `sluice dump`'s JSON lines rendered on worker threads, handed back in the order of the
//! events.
//!
//! Writing JSON is most of a dump's work (its output is about three times the bytes of the
//! binlog it reads), and the rows of one event render without anything of the others. So the
//! reading thread walks the events, tracks transactions and filters, and sends each rows event
//! to be rendered; it takes the results back in the order it sent them and
//! spools them for their transaction's `xid` as before. With one thread the same [`render`] runs on
//! the reading thread.
//!
//! Events go out in batches of about [`BATCH_BYTES`] (one event is about 40 us of work; a
//! hand-over per event cost more in thread wake-ups than it saved). Order without sorting:
//! batches go to the workers in turn and each worker answers its own in order, so taking the
//! answers in the same turn gives them back in the order sent. A transaction's end is marked in
//! that order too, so the reading thread never waits for a transaction's rows to render before
//! reading on. A worker never has more than [`DEPTH`] batches sent and not taken back, and its
//! two queues each hold [`DEPTH`], so neither side ever waits on a full queue the other is
//! waiting to empty.

use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::thread::JoinHandle;

use sluice_binlog::rows::{RowsEvent, RowsKind};
use sluice_binlog::Error as BinlogError;

use super::json::RowLines;
use super::spool::Block;

/// Batches a worker holds at most (queued, in hand, answered and not yet taken back). Answers
/// are taken in order, so a worker that runs ahead of the others waits once it holds this many.
const DEPTH: usize = 8;

/// Bytes of row images a batch gathers before it goes to a worker.
const BATCH_BYTES: usize = 64 << 10;

/// Bytes of row images in flight at most: a burst of large events waits for the ones ahead.
const IN_FLIGHT_BYTES: usize = 32 << 20;

/// Room reserved in a block up front at most.
const RESERVE_MAX: usize = 1 << 20;

/// Row changes by kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub inserts: u64,
    pub updates: u64,
    pub deletes: u64,
}

impl Counts {
    pub fn add(&mut self, kind: RowsKind, rows: u64) {
        match kind {
            RowsKind::Write => self.inserts += rows,
            RowsKind::Update | RowsKind::PartialUpdate => self.updates += rows,
            RowsKind::Delete => self.deletes += rows,
        }
    }

    pub fn add_all(&mut self, other: &Counts) {
        self.inserts += other.inserts;
        self.updates += other.updates;
        self.deletes += other.deletes;
    }

    pub fn total(&self) -> u64 {
        self.inserts + self.updates + self.deletes
    }
}

/// A rows event to render on a worker: the event (owning its bytes), its lines' shared parts,
/// the file and offset its errors name, and its number among the events read (the count a dump
/// stopped by its error reports).
pub struct Event {
    pub rows: RowsEvent<'static>,
    pub lines: RowLines,
    pub file: String,
    pub offset: u64,
    pub event_no: u64,
}

/// Rendered events: their lines, their rows by kind, and the error that stopped them early
/// with the number of its event (the lines before it are real and kept).
pub struct Done {
    pub block: Block,
    pub counts: Counts,
    pub error: Option<(BinlogError, u64)>,
}

/// Renders the rows of `rows` (the event at `file:offset`) as JSON lines into `block`, up to
/// the first row that does not decode. **The one place a dump's rows become JSON lines**, on
/// whichever thread.
///
/// # Errors
/// The first row that does not decode, naming the event.
pub fn render(
    rows: &RowsEvent<'_>,
    lines: &RowLines,
    block: &mut Block,
    (file, offset): (&str, u64),
    counts: &mut Counts,
) -> Result<(), BinlogError> {
    // The lines are three to six times the bytes of the row images (an INSERT's line, with
    // its keys and position, over five): one allocation, not a series of doublings each
    // copying what was written (with four times, most events' blocks grew once, 1.7% of a
    // dump's instructions). Capped: a long BLOB's lines grow as they are written rather than
    // reserving six times the row up front. Room reserved and not written costs no memory.
    block.line().reserve(rows.rows_bytes().saturating_mul(6).min(RESERVE_MAX));
    let mut iter = rows.rows();
    let mut n = 0u64;
    let result = loop {
        match lines.write_next(block.line(), n as usize, &mut iter, &rows.table.columns) {
            None => break Ok(()),
            Some(Err(e)) => break Err(e.at(file, offset, rows.event_type)),
            Some(Ok(())) => {}
        }
        block.end_line();
        n += 1;
    };
    counts.add(rows.kind, n);
    result
}

/// Events gathered to go to a worker together, and the block their lines go into.
struct Batch {
    events: Vec<Event>,
    block: Block,
    bytes: usize,
}

fn render_batch(batch: Batch) -> Done {
    let Batch { events, mut block, .. } = batch;
    let mut counts = Counts::default();
    for ev in &events {
        if let Err(e) = render(&ev.rows, &ev.lines, &mut block, (&ev.file, ev.offset), &mut counts) {
            return Done { block, counts, error: Some((e, ev.event_no)) };
        }
    }
    Done { block, counts, error: None }
}

/// What the reading thread gets back, in the order it sent them: rendered events, the end
/// of a transaction it marked after the events of that transaction, or something to do (a
/// warning to log) once the events before it are taken back.
pub enum Taken {
    Rows(Done),
    Commit(Option<u64>),
    Then(Deferred),
}

/// Work the reading thread put in line after the events added before it.
pub type Deferred = Box<dyn FnOnce() + Send>;

/// A place in the order of answers.
enum Slot {
    /// A batch, with its bytes of row images.
    Batch(usize),
    Commit(Option<u64>),
    Then(Deferred),
}

struct Worker {
    batches: SyncSender<Batch>,
    done: Receiver<Done>,
    thread: JoinHandle<()>,
}

/// Worker threads rendering rows events, answering in the order the events were sent.
pub struct Pool {
    workers: Vec<Worker>,
    /// The worker the next batch goes to, and the one the oldest answer comes from.
    next_sent: usize,
    next_taken: usize,
    /// Batches sent and transaction ends marked, not taken back, oldest first.
    in_flight: VecDeque<Slot>,
    batches: usize,
    in_flight_bytes: usize,
    /// Answers taken back early to make room for a batch, oldest first (before `in_flight`).
    ready: VecDeque<Taken>,
    /// The batch being gathered (after everything in `in_flight`).
    open: Option<Batch>,
}

impl Pool {
    /// Starts `threads` workers (at least one).
    ///
    /// # Errors
    /// The system refused a thread.
    pub fn new(threads: usize) -> std::io::Result<Pool> {
        let mut workers = Vec::with_capacity(threads);
        for i in 0..threads.max(1) {
            let (batches, batch_rx) = sync_channel::<Batch>(DEPTH);
            let (done_tx, done) = sync_channel::<Done>(DEPTH);
            let thread = std::thread::Builder::new().name(format!("sluice-render-{i}")).spawn(move || {
                while let Ok(batch) = batch_rx.recv() {
                    if done_tx.send(render_batch(batch)).is_err() {
                        break;
                    }
                }
            })?;
            workers.push(Worker { batches, done, thread });
        }
        Ok(Pool {
            workers,
            next_sent: 0,
            next_taken: 0,
            in_flight: VecDeque::new(),
            batches: 0,
            in_flight_bytes: 0,
            ready: VecDeque::new(),
            open: None,
        })
    }

    /// True for an event small enough to hand to a worker (the rest render on the reading
    /// thread, with nothing in flight).
    pub fn takes(&self, size: usize) -> bool {
        size <= IN_FLIGHT_BYTES / 4
    }

    /// True when nothing is rendering or waiting to be taken back.
    pub fn is_idle(&self) -> bool {
        self.in_flight.is_empty() && self.ready.is_empty() && self.open.is_none()
    }

    /// Adds an event to render, its lines going into `block()` if it starts a batch. A full
    /// batch goes to the next worker.
    ///
    /// # Errors
    /// A worker is gone (it panicked).
    pub fn add(&mut self, event: Event, block: impl FnOnce() -> Block) -> Result<(), WorkerGone> {
        let batch = self.open.get_or_insert_with(|| Batch { events: Vec::new(), block: block(), bytes: 0 });
        batch.bytes += event.rows.rows_bytes();
        batch.events.push(event);
        if batch.bytes >= BATCH_BYTES {
            self.dispatch()?;
        }
        Ok(())
    }

    /// Marks the end of a transaction after the events added so far: it is taken back after
    /// them, so the reading thread reads on instead of waiting for its rows to render.
    ///
    /// # Errors
    /// A worker is gone (it panicked).
    pub fn commit(&mut self, xid: Option<u64>) -> Result<(), WorkerGone> {
        self.dispatch()?;
        self.in_flight.push_back(Slot::Commit(xid));
        Ok(())
    }

    /// Puts `then` in line after the events added so far: the reading thread runs it when it
    /// takes it back. A warning about an event is logged this way, so that a dump that stops at
    /// an earlier bad event does not log what the reading thread met past it.
    ///
    /// # Errors
    /// A worker is gone (it panicked).
    pub fn then(&mut self, then: Deferred) -> Result<(), WorkerGone> {
        self.dispatch()?;
        self.in_flight.push_back(Slot::Then(then));
        Ok(())
    }

    /// Sends the open batch to the next worker, once it has room.
    fn dispatch(&mut self) -> Result<(), WorkerGone> {
        let Some(bytes) = self.open.as_ref().map(|b| b.bytes) else { return Ok(()) };
        while self.batches >= DEPTH * self.workers.len()
            || (self.batches > 0 && self.in_flight_bytes + bytes > IN_FLIGHT_BYTES)
        {
            match self.receive(true)? {
                Some(t) => self.ready.push_back(t),
                None => break,
            }
        }
        let (Some(batch), Some(w)) = (self.open.take(), self.workers.get(self.next_sent)) else {
            return Err(WorkerGone);
        };
        w.batches.send(batch).map_err(|_| WorkerGone)?;
        self.next_sent = (self.next_sent + 1) % self.workers.len();
        self.in_flight.push_back(Slot::Batch(bytes));
        self.batches += 1;
        self.in_flight_bytes += bytes;
        Ok(())
    }

    /// The oldest answer, waiting for it if `wait`; None when there is none (yet).
    ///
    /// # Errors
    /// A worker is gone (it panicked).
    pub fn take(&mut self, wait: bool) -> Result<Option<Taken>, WorkerGone> {
        if let Some(t) = self.ready.pop_front() {
            return Ok(Some(t));
        }
        if self.in_flight.is_empty() && wait {
            self.dispatch()?;
        }
        self.receive(wait)
    }

    /// The oldest answer still in flight.
    fn receive(&mut self, wait: bool) -> Result<Option<Taken>, WorkerGone> {
        let bytes = match self.in_flight.front() {
            None => return Ok(None),
            Some(&Slot::Batch(bytes)) => bytes,
            Some(Slot::Commit(_) | Slot::Then(_)) => {
                return Ok(match self.in_flight.pop_front() {
                    Some(Slot::Commit(xid)) => Some(Taken::Commit(xid)),
                    Some(Slot::Then(f)) => Some(Taken::Then(f)),
                    _ => None,
                });
            }
        };
        let w = self.workers.get(self.next_taken).ok_or(WorkerGone)?;
        let done = if wait {
            w.done.recv().map_err(|_| WorkerGone)?
        } else {
            match w.done.try_recv() {
                Ok(d) => d,
                Err(TryRecvError::Empty) => return Ok(None),
                Err(TryRecvError::Disconnected) => return Err(WorkerGone),
            }
        };
        self.in_flight.pop_front();
        self.next_taken = (self.next_taken + 1) % self.workers.len();
        self.batches -= 1;
        self.in_flight_bytes -= bytes;
        Ok(Some(Taken::Rows(done)))
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Closing both queues ends each worker after the batch in its hands.
        let threads: Vec<JoinHandle<()>> = self
            .workers
            .drain(..)
            .map(|Worker { batches, done, thread }| {
                drop((batches, done));
                thread
            })
            .collect();
        for t in threads {
            let _ = t.join();
        }
    }
}

/// A rendering thread ended while it had work: only a panic does that.
#[derive(Debug)]
pub struct WorkerGone;

impl std::fmt::Display for WorkerGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "a JSON rendering thread of `sluice dump` stopped unexpectedly (a bug: please report it with the log)",
        )
    }
}
