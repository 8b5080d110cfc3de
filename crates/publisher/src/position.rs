//! Positions in a binlog, the shared vocabulary of every command: where to start
//! ([`StartFrom`], as `source.start` and `--start-gtid` spell it), the GTID state of a server
//! or a stream ([`GtidState`]), the point just after a complete transaction that a restart
//! resumes from ([`ResumePoint`], both from the binlog crate's transaction tracker), the
//! checkpoint that records it in Kafka ([`Checkpoint`]) with a running snapshot's progress
//! ([`SnapshotProgress`]: which tables, and the last key read of each), how two positions of
//! one server compare ([`binlog_order`]), and how far a server's binlog is past a position
//! ([`bytes_past`]).
//!
//! Imports nothing of the publisher but the clock: everything above uses it.
//!
//! References: MariaDB GTIDs (<https://mariadb.com/kb/en/gtid/>), MySQL GTID sets
//! (<https://dev.mysql.com/doc/refman/8.4/en/replication-gtids-concepts.html>).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sluice_binlog::gtid::{GtidSet, MariadbGtidList};
pub use sluice_binlog::transaction::{GtidState, ResumePoint};

/// Where to start streaming when there is no checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartFrom {
    /// The server's current end (`SHOW BINARY LOG STATUS`): only new changes.
    Current,
    /// The oldest binlog the server still has.
    Earliest,
    /// A file and offset.
    Position {
        /// Binlog file name.
        file: String,
        /// Offset of an event in it (4 = the first).
        position: u64,
    },
    /// MySQL: everything not in this GTID set.
    MysqlGtid(GtidSet),
    /// MariaDB: everything after these GTIDs (one per domain).
    MariadbGtid(MariadbGtidList),
}

/// Why a start text is unusable (the message says what the accepted forms are).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadStart(String);

impl FromStr for StartFrom {
    type Err = BadStart;

    /// `earliest`, `current`, `FILE:POSITION` (`mysql-bin.000042:4`), a MySQL GTID set
    /// (`uuid[:tag]:1-5,...`) or a MariaDB GTID list (`0-1-100,1-1-7`).
    fn from_str(s: &str) -> Result<StartFrom, BadStart> {
        const FORMS: &str =
            "earliest, current, FILE:POSITION (mysql-bin.000042:4), a MySQL GTID set (uuid:1-5) or a MariaDB GTID \
             list (0-1-100)";
        let t = s.trim();
        match t {
            "earliest" => return Ok(StartFrom::Earliest),
            "current" => return Ok(StartFrom::Current),
            "" => return Err(BadStart(format!("is empty: give one of {FORMS}"))),
            _ => {}
        }
        if let Some((head, _)) = t.split_once(':') {
            // a MySQL GTID set starts with a server UUID; anything else with a colon is a file
            if head.parse::<sluice_binlog::gtid::Uuid>().is_ok() {
                return t
                    .parse::<GtidSet>()
                    .map(StartFrom::MysqlGtid)
                    .map_err(|e| BadStart(format!("{t:?} is not a MySQL GTID set: {e}")));
            }
            let (file, pos) = t.rsplit_once(':').unwrap_or((t, ""));
            let position: u64 = pos.parse().map_err(|_| {
                BadStart(format!("{t:?}: the position after the colon must be a byte offset like 4, not {pos:?}"))
            })?;
            if file.is_empty() || file.contains(char::is_whitespace) || file.contains(':') {
                return Err(BadStart(format!("{t:?}: {file:?} is not a binlog file name like mysql-bin.000042")));
            }
            if position < 4 {
                return Err(BadStart(format!("{t:?}: a binlog's first event is at offset 4")));
            }
            return Ok(StartFrom::Position { file: file.to_string(), position });
        }
        let list = t.parse::<MariadbGtidList>().map_err(|_| BadStart(format!("{t:?} is not one of {FORMS}")))?;
        // one GTID per domain: a second would silently replace the first
        let given = t.split(',').filter(|g| !g.trim().is_empty()).count();
        if given != list.iter().count() {
            return Err(BadStart(format!("{t:?} names a replication domain twice: give one GTID per domain")));
        }
        Ok(StartFrom::MariadbGtid(list))
    }
}

impl fmt::Display for StartFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartFrom::Current => f.write_str("current"),
            StartFrom::Earliest => f.write_str("earliest"),
            StartFrom::Position { file, position } => write!(f, "{file}:{position}"),
            StartFrom::MysqlGtid(s) => write!(f, "{s}"),
            StartFrom::MariadbGtid(l) => write!(f, "{l}"),
        }
    }
}

impl<'de> serde::Deserialize<'de> for StartFrom {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<StartFrom, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The checkpoint record's value (JSON on `<prefix>.__positions`, keyed by the source name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Binlog file of the resume point.
    pub file: String,
    /// Offset in it.
    pub position: u64,
    /// GTID state at the resume point, as text (None when streaming by file and position).
    pub gtid: Option<String>,
    /// `mysql` or `mariadb`: how to read `gtid`.
    #[serde(default)]
    pub gtid_flavor: Option<String>,
    /// When the checkpoint was written, ms since the epoch.
    pub ts_ms: i64,
    /// Format version (1).
    pub version: u32,
    /// The schema-history version in force at this position (see `schema`); absent in
    /// checkpoints written before Sluice tracked schemas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<u64>,
    /// The snapshot in progress (or the last one, finished), committed with the records of its
    /// chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotProgress>,
    /// The offset in `<prefix>.__signals` up to which requests have been taken in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signals_offset: Option<i64>,
    /// Set (to `ts_ms`) by the last commit of an instance that stopped cleanly: no instance
    /// runs. A running `sluice run` commits at least every [`LIVENESS_EVERY`], so a
    /// checkpoint younger than [`LIVE_WITHIN`] without this mark means one may be running
    /// (`sluice position set` refuses then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_ms: Option<i64>,
}

/// A running `sluice run` commits a checkpoint at least this often, also with nothing to
/// publish (and at each attempt while it retries): its liveness, as `sluice position set` reads it.
pub const LIVENESS_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// A checkpoint committed within this long (and not marked stopped) may belong to a running
/// instance: longer than [`LIVENESS_EVERY`] and the restart loop's longest backoff (30 s).
pub const LIVE_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// A snapshot's progress: the tables it reads, in order, each with how far it got.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SnapshotProgress {
    /// Why it runs: `initial`, `when_needed`, or `signal` (a `sluice snapshot` request).
    pub reason: String,
    /// When it began, ms since the epoch.
    pub started_ms: i64,
    /// The tables, in the order they are read.
    pub tables: Vec<TableProgress>,
}

/// Where a table's snapshot stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TableState {
    /// Not begun.
    Pending,
    /// Being read.
    Running,
    /// Every row read.
    Done,
    /// Given up, with the reason in `note` (the table was dropped).
    Skipped,
}

impl TableState {
    /// The word for it.
    pub fn name(self) -> &'static str {
        match self {
            TableState::Pending => "pending",
            TableState::Running => "running",
            TableState::Done => "done",
            TableState::Skipped => "skipped",
        }
    }
}

/// One table of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableProgress {
    /// `db.table`.
    pub table: String,
    /// Its state.
    pub state: TableState,
    /// The chunk key of the last row read, as SQL literals (the next chunk starts after it);
    /// None before the first chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_key: Option<Vec<String>>,
    /// Rows published (`r` records).
    #[serde(default)]
    pub rows: u64,
    /// Rows the server estimated when the table's snapshot began (`information_schema`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<u64>,
    /// Chunks committed.
    #[serde(default)]
    pub chunks: u64,
    /// What happened, for a skipped table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl TableProgress {
    /// A table not begun.
    pub fn pending(table: String) -> TableProgress {
        TableProgress {
            table,
            state: TableState::Pending,
            last_key: None,
            rows: 0,
            estimate: None,
            chunks: 0,
            note: None,
        }
    }
}

impl SnapshotProgress {
    /// True while a table is pending or running.
    pub fn is_active(&self) -> bool {
        self.tables.iter().any(|t| matches!(t.state, TableState::Pending | TableState::Running))
    }

    /// Ends the tables not finished yet that `left_out` names a reason for (a filter changed
    /// since the snapshot was planned): they become `skipped` with that reason. Returns their
    /// names.
    pub fn leave_out(&mut self, left_out: impl Fn(&str) -> Option<String>) -> Vec<String> {
        let mut names = Vec::new();
        for t in &mut self.tables {
            if !matches!(t.state, TableState::Pending | TableState::Running) {
                continue;
            }
            if let Some(why) = left_out(&t.table) {
                t.note = Some(if t.rows > 0 {
                    format!("{why} after {} rows were published (they stay in its topic)", t.rows)
                } else {
                    why
                });
                t.state = TableState::Skipped;
                names.push(t.table.clone());
            }
        }
        names
    }

    /// Adds `tables` (again, from the start, when already there and finished); returns the
    /// names added.
    pub fn request(&mut self, tables: &[String]) -> Vec<String> {
        let mut added = Vec::new();
        for name in tables {
            match self.tables.iter_mut().find(|t| &t.table == name) {
                Some(t) if matches!(t.state, TableState::Pending | TableState::Running) => {}
                Some(t) => {
                    *t = TableProgress::pending(name.clone());
                    added.push(name.clone());
                }
                None => {
                    self.tables.push(TableProgress::pending(name.clone()));
                    added.push(name.clone());
                }
            }
        }
        added
    }
}

/// How two positions of one server's binlog compare: by the file's sequence number (the
/// digits after the last `.`), then the offset. None when the files are not of one sequence
/// (different base names, no number), or a position has no file (a start by GTID that has
/// not seen its first ROTATE yet).
pub fn binlog_order(a: (&str, u64), b: (&str, u64)) -> Option<std::cmp::Ordering> {
    fn split(f: &str) -> Option<(&str, u64)> {
        let (base, n) = f.rsplit_once('.')?;
        Some((base, n.parse().ok()?))
    }
    if a.0.is_empty() || b.0.is_empty() {
        return None;
    }
    if a.0 == b.0 {
        return Some(a.1.cmp(&b.1));
    }
    let ((base_a, na), (base_b, nb)) = (split(a.0)?, split(b.0)?);
    (base_a == base_b).then(|| na.cmp(&nb).then(a.1.cmp(&b.1)))
}

impl fmt::Display for Checkpoint {
    /// Where it resumes: `file:position`, with the GTID state when it has one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // a server that has written no GTID yet has an empty state: nothing to show
        match (self.gtid.as_deref().filter(|g| !g.is_empty()), self.file.is_empty()) {
            (Some(g), true) => write!(f, "GTID {g}"),
            (Some(g), false) => write!(f, "{}:{} (GTID {g})", self.file, self.position),
            (None, _) => write!(f, "{}:{}", self.file, self.position),
        }
    }
}

/// A checkpoint whose GTID text does not read as its flavour's GTIDs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the checkpoint's GTID {gtid:?} ({flavor}) is unreadable: {reason}")]
pub struct BadCheckpoint {
    /// The text.
    pub gtid: String,
    /// `mysql` or `mariadb`.
    pub flavor: String,
    /// Why.
    pub reason: String,
}

impl Checkpoint {
    /// The checkpoint of a resume point, written now.
    pub fn of(resume: &ResumePoint) -> Checkpoint {
        let (gtid, gtid_flavor) = match &resume.gtid {
            Some(g) => (Some(g.to_string()), Some(g.flavor().to_string())),
            None => (None, None),
        };
        Checkpoint {
            file: resume.file.clone(),
            position: resume.position,
            gtid,
            gtid_flavor,
            ts_ms: crate::process::now_ms(),
            version: 1,
            schema_version: None,
            snapshot: None,
            signals_offset: None,
            stopped_ms: None,
        }
    }

    /// The same checkpoint, committed again now (the liveness of an instance that has nothing
    /// new to commit), or marked as the last commit of an instance that stops (`stopped`).
    #[must_use]
    pub fn renewed(mut self, stopped: bool) -> Checkpoint {
        self.ts_ms = crate::process::now_ms();
        self.stopped_ms = stopped.then_some(self.ts_ms);
        self
    }

    /// Why a running instance may hold this checkpoint's source (`now_ms`): None when it was
    /// marked stopped or is older than [`LIVE_WITHIN`].
    pub fn maybe_live(&self, now_ms: i64) -> Option<String> {
        let age = (now_ms - self.ts_ms).max(0);
        if self.stopped_ms.is_some() || u128::try_from(age).unwrap_or(0) >= LIVE_WITHIN.as_millis() {
            return None;
        }
        Some(format!(
            "its checkpoint was committed {} s ago by an instance that did not stop cleanly: a `sluice run` of the \
             source is running (it commits at least every {} s), or was killed moments ago",
            age / 1000,
            LIVENESS_EVERY.as_secs()
        ))
    }

    /// The same checkpoint, with the snapshot progress and the signals offset.
    #[must_use]
    pub fn with_snapshot(mut self, snapshot: Option<SnapshotProgress>, signals_offset: Option<i64>) -> Checkpoint {
        self.snapshot = snapshot;
        self.signals_offset = signals_offset;
        self
    }

    /// The same checkpoint, with the schema-history version in force.
    #[must_use]
    pub fn with_schema_version(mut self, version: u64) -> Checkpoint {
        self.schema_version = Some(version);
        self
    }

    /// The resume point it records: file, position and GTID state.
    ///
    /// # Errors
    /// GTID text that does not read as its flavour.
    pub fn resume_point(&self) -> Result<ResumePoint, BadCheckpoint> {
        let gtid = match self.start()? {
            StartFrom::MysqlGtid(set) => Some(GtidState::Mysql(set)),
            StartFrom::MariadbGtid(list) => Some(GtidState::Mariadb(list)),
            _ => None,
        };
        Ok(ResumePoint { file: self.file.clone(), position: self.position, gtid })
    }

    /// Where it says to resume: by GTID when it has GTIDs, else by file and position.
    ///
    /// # Errors
    /// GTID text that does not read as its flavour.
    pub fn start(&self) -> Result<StartFrom, BadCheckpoint> {
        let bad = |flavor: &str, e: String| BadCheckpoint {
            gtid: self.gtid.clone().unwrap_or_default(),
            flavor: flavor.to_string(),
            reason: e,
        };
        Ok(match (&self.gtid, self.gtid_flavor.as_deref()) {
            (Some(g), Some("mysql")) => StartFrom::MysqlGtid(g.parse().map_err(|e| bad("mysql", format!("{e}")))?),
            (Some(g), Some("mariadb")) => {
                StartFrom::MariadbGtid(g.parse().map_err(|e| bad("mariadb", format!("{e}")))?)
            }
            _ => StartFrom::Position { file: self.file.clone(), position: self.position },
        })
    }
}

/// Bytes of binlog a server has written past `file:position`, by its `SHOW BINARY LOGS` (name
/// and size, oldest first); None when `file` is no longer there.
pub fn bytes_past(logs: &[(String, u64)], file: &str, position: u64) -> Option<u64> {
    let i = logs.iter().position(|(f, _)| f == file)?;
    let rest = logs.get(i + 1..).unwrap_or_default();
    Some(logs.get(i)?.1.saturating_sub(position) + rest.iter().map(|(_, s)| s).sum::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_texts() {
        assert_eq!("earliest".parse::<StartFrom>().unwrap(), StartFrom::Earliest);
        assert_eq!(" current ".parse::<StartFrom>().unwrap(), StartFrom::Current);
        assert_eq!(
            "mysql-bin.000042:4".parse::<StartFrom>().unwrap(),
            StartFrom::Position { file: "mysql-bin.000042".into(), position: 4 }
        );
        assert!(matches!("0-1-100".parse::<StartFrom>().unwrap(), StartFrom::MariadbGtid(_)));
        assert!(matches!("0-1-100,1-2-3".parse::<StartFrom>().unwrap(), StartFrom::MariadbGtid(_)));
        assert!(matches!(
            "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5".parse::<StartFrom>().unwrap(),
            StartFrom::MysqlGtid(_)
        ));
        assert!(matches!(
            "3e11fa47-71ca-11e1-9e33-c80aa9429562:tag:1-2".parse::<StartFrom>().unwrap(),
            StartFrom::MysqlGtid(_)
        ));
        for (bad, says) in [
            ("yesterday", "is not one of earliest, current"),
            ("mysql-bin.000001:abc", "the position after the colon must be a byte offset"),
            ("0-1-x", "is not one of"),
            ("", "is empty"),
            ("mysql-bin.000001:0", "first event is at offset 4"),
            (":4", "is not a binlog file name"),
            ("mysql-bin.000001:4:4", "is not a binlog file name"),
            ("0-1-2,0-1-3", "names a replication domain twice"),
            ("3E11FA47-71CA-11E1-9E33-C80AA9429562:x", "is not a MySQL GTID set"),
        ] {
            let e = bad.parse::<StartFrom>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
        for text in ["earliest", "current", "b.000001:77", "0-1-100"] {
            assert_eq!(text.parse::<StartFrom>().unwrap().to_string(), text);
        }
    }

    #[test]
    fn resume_points_read_well() {
        let gtid = Some(GtidState::Mariadb("0-1-3365".parse().unwrap()));
        let r = ResumePoint { file: String::new(), position: 4, gtid: gtid.clone() };
        assert_eq!(r.to_string(), "GTID 0-1-3365");
        let r = ResumePoint { file: "b.000002".into(), position: 900, gtid };
        assert_eq!(r.to_string(), "b.000002:900 (GTID 0-1-3365)");
        let r = ResumePoint { file: "b.000002".into(), position: 900, gtid: None };
        assert_eq!(r.to_string(), "b.000002:900");
    }

    #[test]
    fn checkpoint_json() {
        let c = Checkpoint::of(&ResumePoint { file: "mysql-bin.000003".into(), position: 1234, gtid: None });
        let j = serde_json::to_value(&c).unwrap();
        assert_eq!(j["file"], "mysql-bin.000003");
        assert_eq!(j["position"], 1234);
        assert_eq!(j["version"], 1);
        assert!(j["gtid"].is_null());
        let back: Checkpoint = serde_json::from_value(j.clone()).unwrap();
        assert_eq!(back, c);
        assert!(j.get("schema_version").is_none());
        // with a schema version, and a checkpoint written before the field existed
        let v = serde_json::to_value(c.clone().with_schema_version(7)).unwrap();
        assert_eq!(v["schema_version"], 7);
        let old: Checkpoint = serde_json::from_str(
            r#"{"file":"b.000001","position":4,"gtid":null,"gtid_flavor":null,"ts_ms":1,"version":1}"#,
        )
        .unwrap();
        assert_eq!(old.schema_version, None);
        assert_eq!(old.start().unwrap(), StartFrom::Position { file: "b.000001".into(), position: 4 });
        let g = Checkpoint { gtid: Some("0-1-9".into()), gtid_flavor: Some("mariadb".into()), ..old.clone() };
        assert!(matches!(g.start().unwrap(), StartFrom::MariadbGtid(_)));
        let bad = Checkpoint { gtid: Some("x".into()), gtid_flavor: Some("mariadb".into()), ..old };
        assert!(bad.start().unwrap_err().to_string().contains("\"x\" (mariadb) is unreadable"));
    }

    #[test]
    fn positions_of_one_server_compare() {
        use std::cmp::Ordering::*;
        assert_eq!(binlog_order(("b.000002", 10), ("b.000002", 9)), Some(Greater));
        assert_eq!(binlog_order(("b.000002", 10), ("b.000003", 4)), Some(Less));
        // the sequence number, not the text: 999999 < 1000000
        assert_eq!(binlog_order(("b.999999", 900), ("b.1000000", 4)), Some(Less));
        assert_eq!(binlog_order(("b.000001", 4), ("b.000001", 4)), Some(Equal));
        assert_eq!(binlog_order(("a.000001", 4), ("b.000001", 4)), None);
        assert_eq!(binlog_order(("", 4), ("b.000001", 4)), None);
    }

    #[test]
    fn snapshot_progress_in_the_checkpoint() {
        let mut p = SnapshotProgress { reason: "initial".into(), started_ms: 1, tables: Vec::new() };
        assert_eq!(p.request(&["a.t".into(), "a.u".into()]), ["a.t", "a.u"]);
        assert!(p.is_active());
        // pending or running tables are not added twice; finished ones start again
        assert!(p.request(&["a.t".into()]).is_empty());
        p.tables[0].state = TableState::Done;
        p.tables[0].rows = 5;
        p.tables[1].state = TableState::Skipped;
        assert!(!p.is_active());
        assert_eq!(p.request(&["a.t".into()]), ["a.t"]);
        assert_eq!((p.tables[0].state, p.tables[0].rows), (TableState::Pending, 0));
        p.tables[0].last_key = Some(vec!["42".into(), "_utf8mb4 X'61'".into()]);
        let c = Checkpoint::of(&ResumePoint { file: "b.000001".into(), position: 4, gtid: None })
            .with_snapshot(Some(p.clone()), Some(3));
        let j = serde_json::to_value(&c).unwrap();
        assert_eq!(j["snapshot"]["tables"][0]["state"], "pending");
        assert_eq!(j["snapshot"]["tables"][0]["last_key"][1], "_utf8mb4 X'61'");
        assert_eq!(j["signals_offset"], 3);
        let back: Checkpoint = serde_json::from_value(j).unwrap();
        assert_eq!(back.snapshot, Some(p));
    }

    #[test]
    fn bytes_past_a_position() {
        let logs = [("b.000001".to_string(), 1000), ("b.000002".to_string(), 500), ("b.000003".to_string(), 300)];
        assert_eq!(bytes_past(&logs, "b.000002", 200), Some(600));
        assert_eq!(bytes_past(&logs, "b.000003", 300), Some(0));
        assert_eq!(bytes_past(&logs, "a.000009", 4), None);
    }
}
