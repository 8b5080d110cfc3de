//! Why a snapshot cannot go on ([`SnapshotError`]), what `sluice run` does next about it, and
//! the advice a chunk query that keeps timing out ends with.

use super::values::ValueError;
use crate::disposition::Disposition;

/// Why a snapshot cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Connecting for the snapshot's reads.
    #[error("connecting to read the snapshot: {0}")]
    Connect(#[source] sluice_protocol::Error),
    /// A query failed.
    #[error("snapshot of {table}: {during}: {source}{hint}", hint = privilege_hint(source, table))]
    Query {
        /// `db.table`.
        table: String,
        /// What was being done.
        during: &'static str,
        /// The cause.
        #[source]
        source: sluice_protocol::Error,
    },
    /// A column type a snapshot cannot read exactly.
    #[error("snapshot of {table}: column {column}: {why}")]
    Unsupported {
        /// `db.table`.
        table: String,
        /// The column.
        column: String,
        /// Why, and what to do.
        why: String,
    },
    /// No key to read the table in chunks by, and no consistent snapshot to read it in one pass.
    #[error(
        "snapshot of {table}: {why}, and this server (MySQL) has no lock-free consistent snapshot tied to a \
         binlog position; add a primary key (or a unique key over NOT NULL columns), name NOT NULL columns \
         that identify a row in [output.key_columns], or leave the table out of snapshots (snapshot.exclude)"
    )]
    NoKey {
        /// `db.table`.
        table: String,
        /// What the table lacks.
        why: &'static str,
    },
    /// `[output.key_columns]` names columns a snapshot cannot page a keyless table by.
    #[error(
        "snapshot of {table}: output.key_columns names {why}; name NOT NULL columns that identify a row, or \
         leave the table out of snapshots (snapshot.exclude)"
    )]
    BadKeyColumns {
        /// `db.table`.
        table: String,
        /// Which column, and what is wrong with it.
        why: String,
    },
    /// A chunk query that timed out every time it was tried.
    #[error("{last} (tried {tries} times); {advice}; the next start resumes at this chunk")]
    GaveUp {
        /// How often it was tried.
        tries: u32,
        /// The last failure.
        last: Box<SnapshotError>,
        /// What to change, by the kind of timeout.
        advice: &'static str,
    },
    /// The rows read have other columns than the table's definition (a DDL on the server
    /// between reading the definition and the rows): the definition is read again.
    #[error("snapshot of {table}: the chunk has {read} columns, the table's definition {defined}")]
    Columns {
        /// `db.table`.
        table: String,
        /// Columns in the result.
        read: usize,
        /// Columns in the definition.
        defined: usize,
    },
    /// A value that does not fit its column.
    #[error("snapshot of {table}: {source}")]
    Value {
        /// `db.table`.
        table: String,
        /// The cause.
        #[source]
        source: ValueError,
    },
}

fn privilege_hint(e: &sluice_protocol::Error, table: &str) -> String {
    match e {
        sluice_protocol::Error::Server(s) if matches!(s.code, 1142 | 1143 | 1044) => {
            format!(" (the snapshot reads the table: GRANT SELECT ON {table} TO the replication user)")
        }
        _ => String::new(),
    }
}

impl SnapshotError {
    /// What `sluice run` does next: a connection that broke restarts from the checkpoint (the
    /// snapshot resumes at its next chunk); a refused query or an unreadable table stops.
    pub fn disposition(&self) -> Disposition {
        match self {
            SnapshotError::Connect(e) | SnapshotError::Query { source: e, .. } if e.is_transient() => {
                Disposition::Restart
            }
            _ => Disposition::Stop,
        }
    }
}

/// How often a chunk is read before its failure is final.
pub(super) const CHUNK_TRIES: u32 = 3;

/// For a server error of a chunk query that may pass on the next try, what to change when it
/// keeps failing: ER_LOCK_WAIT_TIMEOUT and ER_LOCK_DEADLOCK (a DDL or `LOCK TABLES` holds the
/// table), ER_STATEMENT_TIMEOUT (MariaDB `max_statement_time`), ER_QUERY_TIMEOUT (MySQL
/// `max_execution_time`). None: not a timeout.
pub(super) fn gave_up_advice(code: u16) -> Option<&'static str> {
    match code {
        1205 | 1213 => Some(
            "another session holds a lock on the table (a DDL, LOCK TABLES ... WRITE, FLUSH TABLES ... WITH READ \
             LOCK; SHOW PROCESSLIST names it): let it finish, or raise snapshot.lock_wait_timeout",
        ),
        1969 | 3024 => Some(
            "lower snapshot.chunk_size or chunk_max_bytes, or raise the server's max_statement_time (MariaDB) / \
             max_execution_time (MySQL) for the replication user",
        ),
        _ => None,
    }
}
