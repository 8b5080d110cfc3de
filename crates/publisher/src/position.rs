//! Positions in a binlog, the shared vocabulary of every command: where to start
//! ([`StartFrom`], as `source.start` and `--start-gtid` spell it), the GTID state of a server
//! or a stream ([`GtidState`]), and the point just after a complete transaction that a restart
//! resumes from ([`ResumePoint`]).
//!
//! Imports nothing of the publisher: everything above uses it.
//!
//! References: MariaDB GTIDs (<https://mariadb.com/kb/en/gtid/>), MySQL GTID sets
//! (<https://dev.mysql.com/doc/refman/8.4/en/replication-gtids-concepts.html>).

use std::fmt;
use std::str::FromStr;

use sluice_binlog::gtid::{GtidSet, MariadbGtidList};

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
            if file.is_empty() || file.contains(char::is_whitespace) {
                return Err(BadStart(format!("{t:?}: {file:?} is not a binlog file name like mysql-bin.000042")));
            }
            if position < 4 {
                return Err(BadStart(format!("{t:?}: a binlog's first event is at offset 4")));
            }
            return Ok(StartFrom::Position { file: file.to_string(), position });
        }
        t.parse::<MariadbGtidList>()
            .map(StartFrom::MariadbGtid)
            .map_err(|_| BadStart(format!("{t:?} is not one of {FORMS}")))
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

/// The GTID state at a resume point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GtidState {
    /// MySQL: the executed set.
    Mysql(GtidSet),
    /// MariaDB: the last GTID per domain.
    Mariadb(MariadbGtidList),
}

impl GtidState {
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
    /// GTID state, when the stream started from GTIDs or the server uses them.
    pub gtid: Option<GtidState>,
}

impl fmt::Display for ResumePoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.gtid, self.file.is_empty()) {
            (Some(g), true) => write!(f, "GTID {g}"),
            (Some(g), false) => write!(f, "{}:{} (GTID {g})", self.file, self.position),
            (None, _) => write!(f, "{}:{}", self.file, self.position),
        }
    }
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
}
