//! Transaction boundaries and the resume point, over located events: **which transaction an
//! event belongs to, and where a reader may resume**, decided in one place for every reader
//! (the publisher's pipeline, `sluice dump`, the live source's reconnects).
//!
//! A transaction (an "event group") is one of:
//! - `BEGIN` ... `XID` / `COMMIT` / `ROLLBACK`, with a GTID event before the `BEGIN` when the
//!   server has GTIDs (MySQL's GTID_LOG_EVENT); MariaDB's GTID_EVENT takes the place of the
//!   `BEGIN` (its "standalone" flag marks the groups of a single statement instead);
//! - a statement of its own: a DDL (which commits implicitly), or any other statement outside
//!   `BEGIN` (a non-transactional one, or a MariaDB "standalone" group), with or without a
//!   GTID event before it. It is complete by itself: the boundary comes after it.
//! - MySQL 8.0.21+'s atomic `CREATE TABLE ... SELECT`, logged as `CREATE TABLE t (...) START
//!   TRANSACTION` followed by the rows and an `XID`: the statement opens the transaction.
//!
//! Inside a `BEGIN` ... `COMMIT` transaction other statements (`SAVEPOINT`, `ROLLBACK TO
//! SAVEPOINT`, statement-based DML) are part of it, not boundaries.
//!
//! The **resume point** is the position just after the last complete transaction: a reader
//! that starts there (after a reconnect, or after a restart from a checkpoint) gets whole
//! transactions only. It moves forward only within a file (the FDE a server re-sends at the
//! start of a dump carries its original, earlier end position) and only at a boundary.
//!
//! Its **GTID state** comes with the start (a start by GTID), or else from the binlog itself:
//! every file begins with the server's whole GTID state at that point (MySQL's
//! PREVIOUS_GTIDS, MariaDB's GTID_LIST), so a reader that has read a file from its start
//! takes that state and adds each transaction's GTID to it; from then on every resume point
//! carries it, and a restart can resume by GTID on any server of the topology. A set built
//! only from the GTIDs seen since a position inside a file would be partial (resuming from it
//! would replay the server's history), so a reader that starts inside a file has no GTID
//! state until it is given one ([`TransactionTracker::set_gtid_state`], e.g. from MariaDB's
//! `BINLOG_GTID_POS()`) or reaches the next file. A MySQL server without GTIDs writes empty
//! PREVIOUS_GTIDS and anonymous GTID events: an empty set is not taken.
//!
//! References: <https://dev.mysql.com/doc/refman/8.4/en/replication-gtids-concepts.html>,
//! <https://mariadb.com/kb/en/gtid/> (event groups, `FL_STANDALONE`).

use std::fmt;

use sluice_protocol::gtid::{GtidSet, MariadbGtid, MariadbGtidList, MysqlGtid};

use crate::event::{Event, Query};
use crate::walk::Located;

/// The GTID state at a resume point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GtidState {
    /// MySQL: the executed set.
    Mysql(GtidSet),
    /// MariaDB: the last GTID per domain.
    Mariadb(MariadbGtidList),
}

impl GtidState {
    /// True when transaction `g` is in this state (a MariaDB position holds every transaction
    /// of a domain up to its sequence number).
    pub fn contains(&self, g: &AnyGtid) -> bool {
        match (self, g) {
            (GtidState::Mysql(s), AnyGtid::Mysql(g)) => s.contains(g),
            (GtidState::Mariadb(l), AnyGtid::Mariadb(g)) => l.get(g.domain_id).is_some_and(|h| g.seq_no <= h.seq_no),
            _ => false,
        }
    }

    /// True when every transaction of `other` (of the same flavour) is in this state.
    pub fn covers(&self, other: &GtidState) -> bool {
        match (self, other) {
            (GtidState::Mysql(a), GtidState::Mysql(b)) => b.is_subset(a),
            (GtidState::Mariadb(a), GtidState::Mariadb(b)) => {
                b.iter().all(|g| a.get(g.domain_id).is_some_and(|h| g.seq_no <= h.seq_no))
            }
            _ => false,
        }
    }

    /// `text` read as a state of the same flavour as this one.
    pub fn parse_like(&self, text: &str) -> Option<GtidState> {
        match self {
            GtidState::Mysql(_) => text.parse().ok().map(GtidState::Mysql),
            GtidState::Mariadb(_) => text.parse().ok().map(GtidState::Mariadb),
        }
    }

    /// `mysql` or `mariadb`, as checkpoints name the flavour.
    pub fn flavor(&self) -> &'static str {
        match self {
            GtidState::Mysql(_) => "mysql",
            GtidState::Mariadb(_) => "mariadb",
        }
    }
}

impl fmt::Display for GtidState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GtidState::Mysql(s) => write!(f, "{s}"),
            GtidState::Mariadb(l) => write!(f, "{l}"),
        }
    }
}

/// A position to resume from: just after a complete transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumePoint {
    /// Binlog file; empty for a start by GTID before the stream has named its file.
    pub file: String,
    /// Offset of the next event in it.
    pub position: u64,
    /// GTID state, when the stream started from GTIDs.
    pub gtid: Option<GtidState>,
}

impl fmt::Display for ResumePoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // a server that has written no GTID yet has an empty state: nothing to show
        let gtid = self.gtid.as_ref().map(ToString::to_string).filter(|g| !g.is_empty());
        match (gtid, self.file.is_empty()) {
            (Some(g), true) => write!(f, "GTID {g}"),
            (Some(g), false) => write!(f, "{}:{} (GTID {g})", self.file, self.position),
            (None, _) => write!(f, "{}:{}", self.file, self.position),
        }
    }
}

/// A transaction's GTID, of either flavour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnyGtid {
    /// `uuid[:tag]:n`.
    Mysql(MysqlGtid),
    /// `domain-server-seq`.
    Mariadb(MariadbGtid),
}

impl fmt::Display for AnyGtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnyGtid::Mysql(g) => write!(f, "{g}"),
            AnyGtid::Mariadb(g) => write!(f, "{g}"),
        }
    }
}

/// The GTID an event gives its transaction, if it is a (non-anonymous) GTID event.
pub fn gtid_of(event: &Event<'_>) -> Option<AnyGtid> {
    match event {
        Event::Gtid(g) => (!g.anonymous).then(|| AnyGtid::Mysql(g.gtid.clone())),
        Event::MariadbGtid(g) => Some(AnyGtid::Mariadb(g.gtid)),
        _ => None,
    }
}

/// What an event means for the transaction it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A transaction begins (its GTID, if any: [`TransactionTracker::gtid`]).
    Begin,
    /// An event of the open transaction (a table map, rows, a savepoint).
    Inside,
    /// A statement that is a transaction by itself (a DDL, a statement outside `BEGIN`):
    /// complete, a boundary after it.
    Statement,
    /// A statement that opens a transaction (MySQL's atomic `CREATE TABLE ... START
    /// TRANSACTION`): the rows and the `XID` that end it follow.
    StatementBegins,
    /// The transaction committed (`XID` carries its id; `COMMIT` none).
    Commit {
        /// The XID, when the server logged one.
        xid: Option<u64>,
    },
    /// The transaction was rolled back (its events have no effect).
    Rollback,
    /// Outside any transaction: the format description, rotations, heartbeats, GTID lists.
    Outside,
}

impl Step {
    /// True at the end of a transaction: the resume point may have moved.
    pub fn is_boundary(self) -> bool {
        matches!(self, Step::Statement | Step::Commit { .. } | Step::Rollback)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between transactions.
    Idle,
    /// A GTID event came: `BEGIN`, or the group's single statement, follows.
    Gtid,
    /// Inside `BEGIN` ... `COMMIT`.
    Open,
}

/// Follows transaction boundaries to keep the resume point (see the module docs).
#[derive(Debug, Clone)]
pub struct TransactionTracker {
    state: State,
    gtid: Option<AnyGtid>,
    /// End position of the last TRANSACTION_PAYLOAD: its inner events have no positions of
    /// their own, so the XID inside commits at the payload's end.
    payload_end: u64,
    resume: ResumePoint,
}

/// `CREATE TABLE t (...) START TRANSACTION`: MySQL 8.0.21+'s atomic CREATE ... SELECT.
fn starts_transaction(q: &Query<'_>) -> bool {
    let t = q.query.trim_end_matches(|c: char| c.is_whitespace() || c == ';');
    t.len() > 17 && t.get(t.len() - 17..).is_some_and(|end| end.eq_ignore_ascii_case("START TRANSACTION"))
}

impl TransactionTracker {
    /// A tracker whose resume point starts at `resume`.
    pub fn new(resume: ResumePoint) -> TransactionTracker {
        TransactionTracker { state: State::Idle, gtid: None, payload_end: 0, resume }
    }

    /// The position after the last complete transaction.
    pub fn resume_point(&self) -> &ResumePoint {
        &self.resume
    }

    /// True while a transaction is open (its end has not come yet).
    pub fn in_transaction(&self) -> bool {
        self.state != State::Idle
    }

    /// The GTID of the open transaction (of the last one, after its end), if it has one.
    pub fn gtid(&self) -> Option<&AnyGtid> {
        self.gtid.as_ref()
    }

    /// Forgets the open transaction (after a reconnect it is streamed again, whole).
    pub fn reset(&mut self) {
        self.state = State::Idle;
        self.gtid = None;
    }

    /// The reader moved on to `file` without a ROTATE (the file before ended with the server's
    /// STOP): between transactions, the resume point is its start.
    pub fn moved_to(&mut self, file: &str) {
        if self.state == State::Idle {
            self.resume.file = file.to_string();
            self.resume.position = 4;
        }
    }

    /// Gives the resume point the GTID state the server had there (when the reader started
    /// inside a file without one: see the module docs).
    pub fn set_gtid_state(&mut self, state: GtidState) {
        self.resume.gtid = Some(state);
    }

    /// A file's opening GTID state becomes the resume point's when it has none yet and every
    /// transaction after the event will be seen: the reader is between transactions in that
    /// file, at or before the event. (A start by GTID keeps the state it came with.)
    fn adopt(&mut self, ev: &Located<'_>, state: GtidState) {
        if self.resume.gtid.is_none()
            && self.state == State::Idle
            && ev.file == self.resume.file
            && ev.offset >= self.resume.position
        {
            self.resume.gtid = Some(state);
        }
    }

    /// Takes in the next event: what it means, and the resume point moved past it when it
    /// ends a transaction.
    pub fn observe(&mut self, ev: &Located<'_>) -> Step {
        let h = &ev.event.header;
        let step = match &ev.event.event {
            // MariaDB writes no BEGIN: its GTID event opens the transaction, unless it is
            // "standalone" (a statement of its own follows: a DDL)
            e @ Event::MariadbGtid(g) => {
                self.state = if g.is_standalone() { State::Gtid } else { State::Open };
                self.gtid = gtid_of(e);
                Step::Begin
            }
            e @ Event::Gtid(_) => {
                self.state = State::Gtid;
                self.gtid = gtid_of(e);
                Step::Begin
            }
            Event::Query(q) if q.is_begin() => {
                let step = if self.state == State::Gtid { Step::Inside } else { Step::Begin };
                if self.state == State::Idle {
                    self.gtid = None;
                }
                self.state = State::Open;
                step
            }
            Event::Query(q) if q.is_commit() && self.state != State::Idle => Step::Commit { xid: None },
            Event::Query(q) if q.is_rollback() && self.state != State::Idle => Step::Rollback,
            // inside BEGIN ... COMMIT: a savepoint, or a statement of a statement-based transaction
            Event::Query(_) if self.state == State::Open => Step::Inside,
            Event::Query(q) => {
                if self.state == State::Idle {
                    self.gtid = None;
                }
                if starts_transaction(q) {
                    self.state = State::Open;
                    Step::StatementBegins
                } else {
                    Step::Statement
                }
            }
            Event::Xid(x) => Step::Commit { xid: Some(*x) },
            Event::XaPrepare { .. } => Step::Commit { xid: None },
            Event::Rotate(r) => {
                if self.state == State::Idle && r.next_file != self.resume.file {
                    self.resume.file = r.next_file.to_string();
                    self.resume.position = r.position;
                }
                return Step::Outside;
            }
            Event::TransactionPayload(_) => {
                self.payload_end = u64::from(h.log_pos);
                Step::Inside
            }
            Event::Heartbeat { .. } => return Step::Outside,
            Event::PreviousGtids(set) => {
                if !set.is_empty() {
                    self.adopt(ev, GtidState::Mysql(set.clone()));
                }
                Step::Outside
            }
            Event::MariadbGtidList(list) => {
                self.adopt(ev, GtidState::Mariadb(list.clone()));
                Step::Outside
            }
            Event::FormatDescription(_) | Event::MariadbBinlogCheckpoint(_) => Step::Outside,
            _ if self.state == State::Idle => Step::Outside,
            _ => Step::Inside,
        };
        if step.is_boundary() {
            self.state = State::Idle;
            match (&self.gtid, &mut self.resume.gtid) {
                (Some(AnyGtid::Mysql(g)), Some(GtidState::Mysql(set))) => set.add(g),
                (Some(AnyGtid::Mariadb(g)), Some(GtidState::Mariadb(list))) => list.advance(*g),
                _ => {}
            }
        }
        let end = if ev.in_payload { self.payload_end } else { u64::from(h.log_pos) };
        if (step.is_boundary() || self.state == State::Idle) && end > self.resume.position {
            self.resume.position = end;
        }
        step
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;
    use crate::decoder::DecodedEvent;
    use crate::event::{MariadbGtidEvent, QueryStatus, Rotate};
    use crate::event_type::EventType;
    use crate::header::EventHeader;

    fn query(sql: &str) -> Event<'_> {
        Event::Query(Query {
            thread_id: 1,
            exec_time: 0,
            error_code: 0,
            schema: Cow::Borrowed("shop"),
            query: Cow::Borrowed(sql),
            status: QueryStatus::default(),
        })
    }

    /// A MariaDB GTID event opening a transaction (MariaDB writes no BEGIN after it).
    fn gtid(seq: u64) -> Event<'static> {
        let g = MariadbGtid { domain_id: 0, server_id: 1, seq_no: seq };
        Event::MariadbGtid(MariadbGtidEvent { gtid: g, flags: 0, commit_id: None })
    }

    /// A MariaDB GTID event of a statement of its own (a DDL follows).
    fn standalone(seq: u64) -> Event<'static> {
        let g = MariadbGtid { domain_id: 0, server_id: 1, seq_no: seq };
        Event::MariadbGtid(MariadbGtidEvent { gtid: g, flags: MariadbGtidEvent::FL_STANDALONE, commit_id: None })
    }

    /// Feeds events ending at 100, 200, ... of `b.000001`; the steps and the resume offsets.
    fn walk(start: Option<&str>, events: Vec<Event<'_>>) -> (Vec<Step>, Vec<u64>, TransactionTracker) {
        walk_from(4, start.map(|g| GtidState::Mariadb(g.parse().unwrap())), events)
    }

    /// As [`walk`], from `position` with GTID state `gtid`.
    fn walk_from(
        position: u64,
        gtid: Option<GtidState>,
        events: Vec<Event<'_>>,
    ) -> (Vec<Step>, Vec<u64>, TransactionTracker) {
        let mut t = TransactionTracker::new(ResumePoint { file: "b.000001".into(), position, gtid });
        let (mut steps, mut resumes) = (Vec::new(), Vec::new());
        for (i, event) in events.into_iter().enumerate() {
            let end = 100 * (i as u32 + 1);
            let header = EventHeader {
                timestamp: 0,
                event_type: EventType::Query,
                server_id: 1,
                event_size: 100,
                log_pos: end,
                flags: 0,
            };
            let ev = Located {
                file: "b.000001",
                offset: u64::from(end - 100),
                in_payload: false,
                event: DecodedEvent { header, event },
            };
            steps.push(t.observe(&ev));
            resumes.push(t.resume_point().position);
        }
        (steps, resumes, t)
    }

    #[test]
    fn begin_commit_and_a_ddl_of_its_own() {
        let (steps, resumes, t) = walk(
            Some("0-1-5"),
            vec![
                gtid(6),
                query("SAVEPOINT `a`"),
                Event::Xid(9),
                standalone(7),
                query("ALTER TABLE t ADD c INT"),
                gtid(8),
                query("SAVEPOINT `b`"),
            ],
        );
        assert_eq!(
            steps,
            [
                Step::Begin,
                Step::Inside,
                Step::Commit { xid: Some(9) },
                Step::Begin,
                Step::Statement,
                Step::Begin,
                Step::Inside
            ]
        );
        // the resume point moves only at the end of a transaction, and the GTID state with it
        assert_eq!(resumes, [4, 4, 300, 300, 500, 500, 500]);
        assert_eq!(t.resume_point().gtid.as_ref().unwrap().to_string(), "0-1-7");
        assert_eq!(t.gtid().map(ToString::to_string).as_deref(), Some("0-1-8"));
        assert!(t.in_transaction());
    }

    /// Read from a file's start, the file's GTID_LIST is the state the GTIDs after it add to;
    /// read from inside the file (after the list), there is no state to take; a state the
    /// start came with is kept.
    #[test]
    fn gtid_state_comes_from_the_file_start() {
        let list = |l: &str| Event::MariadbGtidList(l.parse().unwrap());
        let fde = || Event::MariadbBinlogCheckpoint(Cow::Borrowed("b.000001"));
        let events = || vec![fde(), list("0-1-5,1-2-40"), gtid(6), Event::Xid(1), gtid(7), Event::Xid(2)];
        let (_, _, t) = walk_from(4, None, events());
        assert_eq!(t.resume_point().gtid.as_ref().map(ToString::to_string).as_deref(), Some("0-1-7,1-2-40"));
        assert_eq!(t.resume_point().position, 600);
        let (_, _, t) = walk_from(300, None, events());
        assert_eq!(t.resume_point().gtid, None, "started after the list: no partial state");
        let (_, _, t) = walk_from(4, Some(GtidState::Mariadb("0-1-3".parse().unwrap())), events());
        assert_eq!(t.resume_point().gtid.as_ref().map(ToString::to_string).as_deref(), Some("0-1-7"));
        // given a state (BINLOG_GTID_POS of a position inside the file), the GTIDs add to it
        let mut t = TransactionTracker::new(ResumePoint { file: "b.000001".into(), position: 300, gtid: None });
        t.set_gtid_state(GtidState::Mariadb("0-1-5,1-2-40".parse().unwrap()));
        assert_eq!(t.resume_point().gtid.as_ref().map(ToString::to_string).as_deref(), Some("0-1-5,1-2-40"));

        // MySQL: PREVIOUS_GTIDS is the executed set; an empty one (GTIDs off) is not a state
        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let prev = |s: &str| Event::PreviousGtids(s.parse().unwrap());
        let (_, _, t) = walk_from(4, None, vec![fde(), prev(&format!("{uuid}:1-77"))]);
        assert_eq!(t.resume_point().gtid, Some(GtidState::Mysql(format!("{uuid}:1-77").parse().unwrap())));
        let (_, _, t) = walk_from(4, None, vec![fde(), prev("")]);
        assert_eq!(t.resume_point().gtid, None);
    }

    /// The DDL case, decided once: a statement outside BEGIN..COMMIT is a transaction of its own
    /// (also without GTIDs, where MySQL 5.5 logs just the DDL); statements inside BEGIN..COMMIT
    /// (savepoints) are part of the transaction, not boundaries.
    #[test]
    fn statements_inside_and_outside_transactions() {
        let (steps, resumes, _) = walk(
            None,
            vec![
                query("BEGIN"),
                query("SAVEPOINT a"),
                query("ROLLBACK TO SAVEPOINT a"),
                Event::Xid(1),
                query("CREATE TABLE t (id INT)"),
                query("BEGIN"),
                query("ROLLBACK"),
                query("CREATE TABLE u (id INT) START TRANSACTION"),
                Event::Xid(2),
            ],
        );
        assert_eq!(
            steps,
            [
                Step::Begin,
                Step::Inside,
                Step::Inside,
                Step::Commit { xid: Some(1) },
                Step::Statement,
                Step::Begin,
                Step::Rollback,
                Step::StatementBegins,
                Step::Commit { xid: Some(2) },
            ]
        );
        assert_eq!(resumes, [4, 4, 4, 400, 500, 500, 700, 700, 900]);
    }

    #[test]
    fn rotations_move_the_resume_point_between_transactions_only() {
        let rotate = |f: &'static str| Event::Rotate(Rotate { position: 4, next_file: Cow::Borrowed(f) });
        let (_, _, t) = walk(None, vec![query("BEGIN"), rotate("b.000002"), Event::Xid(1)]);
        assert_eq!(t.resume_point().file, "b.000001", "no rotation inside a transaction");
        let (_, _, t) = walk(None, vec![query("BEGIN"), Event::Xid(1), rotate("b.000002")]);
        assert_eq!((t.resume_point().file.as_str(), t.resume_point().position), ("b.000002", 4));
    }

    #[test]
    fn xa_transactions_end_at_prepare_and_commit_as_a_statement() {
        let (steps, ..) = walk(
            None,
            vec![
                query("XA START X'31',X'',1"),
                query("XA END X'31',X'',1"),
                Event::XaPrepare { one_phase: false },
                query("XA COMMIT X'31',X'',1"),
            ],
        );
        assert_eq!(steps, [Step::Begin, Step::Inside, Step::Commit { xid: None }, Step::Statement]);
    }
}
