//! What Sluice asks a server outside the replication stream, in one place: variables, the
//! binary logs and the current position (`SHOW BINARY LOGS`, `SHOW BINARY LOG STATUS`), the
//! resolution of a start into a position the server can serve (GTIDs checked against what it
//! has, by flavour), and the watcher that keeps the lag in bytes up to date.
//!
//! References: <https://mariadb.com/kb/en/show-binary-logs/>,
//! <https://mariadb.com/kb/en/binlog_gtid_pos/>,
//! <https://dev.mysql.com/doc/refman/8.4/en/replication-options-gtids.html>.

use std::time::Duration;

use sluice_binlog::event_type::EventType;
use sluice_binlog::gtid::{GtidSet, MariadbGtid, MariadbGtidList};
use sluice_protocol::{ConnectOptions, Connection, Result};

use super::SourceError;
use crate::position::{GtidState, ResumePoint, StartFrom};

/// What resolving a start needs to know of the server (from the pre-flight checks).
#[derive(Debug, Clone, Default)]
pub struct ServerFacts {
    /// The server is MariaDB.
    pub mariadb: bool,
    /// Its current GTID position, when it has one.
    pub gtid_position: Option<GtidState>,
}

/// The first column of the first row of `sql`'s result (None for NULL or no row).
///
/// # Errors
/// Server errors.
pub async fn scalar(conn: &mut Connection, sql: &str) -> Result<Option<String>> {
    let rs = conn.query(sql).await?;
    Ok(rs.get_str(0, 0))
}

/// The source's base tables, (database, table), outside the system schemas.
///
/// # Errors
/// Server errors.
pub async fn base_tables(conn: &mut Connection) -> Result<Vec<(String, String)>> {
    let rs = conn
        .query(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' \
             AND TABLE_SCHEMA NOT IN ('mysql','information_schema','performance_schema','sys')",
        )
        .await?;
    Ok(rs.to_strings().into_iter().filter_map(|r| Some((r.first()?.clone()?, r.get(1)?.clone()?))).collect())
}

/// `SHOW BINARY LOGS`: (file, size) in order.
///
/// # Errors
/// Server errors (binary logging off, missing privilege).
pub async fn binary_logs(conn: &mut Connection) -> Result<Vec<(String, u64)>> {
    let rs = conn.query("SHOW BINARY LOGS").await?;
    Ok(rs
        .to_strings()
        .into_iter()
        .filter_map(|row| {
            let name = row.first()?.clone()?;
            let size = row.get(1).and_then(|s| s.as_deref()?.parse().ok()).unwrap_or(0);
            Some((name, size))
        })
        .collect())
}

/// The GTID state a binlog file of the server starts at, as its first events record it (a
/// MariaDB GTID_LIST, `0-1-100`; a MySQL PREVIOUS_GTIDS, a GTID set; empty when none were
/// written yet): what an archive's copy of the history before the file must end at. None when
/// the file starts with neither event.
///
/// # Errors
/// Server errors (a purged file, a missing privilege: `SHOW BINLOG EVENTS` needs what
/// `SHOW BINARY LOGS` needs).
pub async fn gtid_state_at_start(conn: &mut Connection, file: &str) -> Result<Option<String>> {
    let sql = format!("SHOW BINLOG EVENTS IN {} LIMIT 4", sluice_protocol::replication::sql_string_literal(file));
    let rs = conn.query(&sql).await?;
    Ok(rs.to_strings().into_iter().find_map(|row| {
        let kind = row.get(2)?.as_deref()?;
        (kind.eq_ignore_ascii_case("Gtid_list") || kind.eq_ignore_ascii_case("Previous_gtids")).then(|| {
            let info = row.get(5).and_then(Clone::clone).unwrap_or_default();
            info.trim().trim_start_matches('[').trim_end_matches(']').trim().to_string()
        })
    }))
}

/// [`gtid_state_at_start`] of the oldest of `logs` (`SHOW BINARY LOGS`), or None when it cannot
/// be read (logged): an archive is then checked against the server by names and sizes alone.
pub async fn oldest_start_state(conn: &mut Connection, logs: &[(String, u64)]) -> Option<String> {
    let (oldest, _) = logs.first()?;
    match gtid_state_at_start(conn, oldest).await {
        Ok(state) => state,
        Err(e) => {
            tracing::debug!(error = %e, file = %oldest, "SHOW BINLOG EVENTS for the GTID state the oldest binlog starts at failed");
            None
        }
    }
}

/// The server's current binlog file and position (`SHOW MASTER STATUS`).
///
/// # Errors
/// Server errors; an empty answer (binary logging off) is an error too.
pub async fn current_position(conn: &mut Connection) -> Result<(String, u64)> {
    let rs = match conn.query("SHOW BINARY LOG STATUS").await {
        Ok(rs) => rs,
        // MySQL before 8.2 and MariaDB before 10.5.2 know only the old name
        Err(_) => conn.query("SHOW MASTER STATUS").await?,
    };
    let file = rs.get_str(0, 0);
    let pos = rs.get_str(0, 1).and_then(|p| p.parse().ok());
    match (file, pos) {
        (Some(f), Some(p)) => Ok((f, p)),
        _ => Err(sluice_protocol::Error::Invalid {
            what: "SHOW MASTER STATUS",
            reason: "no current binlog position: is binary logging on?".into(),
        }),
    }
}

/// Resolves a start request into a concrete position on this server, refusing what it cannot
/// serve: a file it no longer has (or a position past its end), GTIDs of the other flavour,
/// GTIDs it has not reached, and GTIDs whose successors it has purged.
///
/// # Errors
/// [`SourceError::Start`] for those, [`SourceError::Protocol`] when a query fails.
pub async fn resolve_start(
    conn: &mut Connection,
    start: &StartFrom,
    facts: &ServerFacts,
) -> Result<ResumePoint, SourceError> {
    let logs = binary_logs(conn).await.map_err(|e| SourceError::protocol("listing binary logs", e))?;
    let earliest = logs.first().map_or("none", |(f, _)| f.as_str());
    let flavour = if facts.mariadb { "MariaDB" } else { "MySQL" };
    Ok(match start {
        StartFrom::Current => {
            let (file, position) =
                current_position(conn).await.map_err(|e| SourceError::protocol("reading the current position", e))?;
            let gtid = facts.gtid_position.clone();
            ResumePoint { file, position, gtid }
        }
        StartFrom::Earliest => {
            let Some((file, _)) = logs.first() else {
                return Err(SourceError::Start("the server lists no binary logs (SHOW BINARY LOGS is empty)".into()));
            };
            ResumePoint { file: file.clone(), position: 4, gtid: mariadb_gtid_at(conn, facts, file, 4).await }
        }
        StartFrom::Position { file, position } => {
            let Some((_, size)) = logs.iter().find(|(f, _)| f == file) else {
                return Err(SourceError::Purged(format!(
                    "binlog {file} is not on the server (purged, or never existed); the earliest it has is {earliest}"
                )));
            };
            if position > size {
                return Err(SourceError::Start(format!(
                    "{file}:{position} is past the end of {file}, which the server lists with {size} bytes"
                )));
            }
            if position < size {
                event_boundary_problem(conn, file, *position, facts.mariadb).await?;
            }
            ResumePoint {
                file: file.clone(),
                position: *position,
                gtid: mariadb_gtid_at(conn, facts, file, *position).await,
            }
        }
        StartFrom::MysqlGtid(set) => {
            if facts.mariadb {
                return Err(SourceError::Start(format!(
                    "{set} is a MySQL GTID set, but the server is MariaDB: its GTIDs read domain-server-seq (its \
                     @@gtid_binlog_pos now is {}); give a MariaDB GTID list, or a file and position",
                    facts.gtid_position.as_ref().map_or_else(|| "empty".to_string(), ToString::to_string)
                )));
            }
            // Not tested against a MySQL server (none runs here): the sets come from the
            // documented variables, and the comparison is unit-tested.
            let set_of = |v: Option<String>| v.unwrap_or_default().parse::<GtidSet>().unwrap_or_default();
            let executed = set_of(scalar(conn, "SELECT @@GLOBAL.gtid_executed").await.ok().flatten());
            let purged = set_of(scalar(conn, "SELECT @@GLOBAL.gtid_purged").await.ok().flatten());
            if let Some(e) = mysql_gtid_problem(set, &executed, &purged) {
                return Err(e);
            }
            ResumePoint { file: String::new(), position: 4, gtid: Some(GtidState::Mysql(set.clone())) }
        }
        StartFrom::MariadbGtid(list) => {
            let Some(GtidState::Mariadb(newest)) = &facts.gtid_position else {
                return Err(SourceError::Start(format!(
                    "{list} is a MariaDB GTID list, but the server is {flavour}{}",
                    if facts.mariadb { " without GTIDs in its binlog yet" } else { ": its GTIDs read uuid:1-5" }
                )));
            };
            // the GTID state at the start of the oldest binlog: what was purged before it
            let oldest = match logs.first() {
                Some((file, _)) => scalar(
                    conn,
                    &format!("SELECT BINLOG_GTID_POS({}, 4)", sluice_protocol::replication::sql_string_literal(file)),
                )
                .await
                .ok()
                .flatten()
                .and_then(|p| p.parse::<MariadbGtidList>().ok())
                .unwrap_or_default(),
                None => MariadbGtidList::new(),
            };
            // the last GTID of every (domain, server) the binlogs hold
            let state: Vec<MariadbGtid> = scalar(conn, "SELECT @@GLOBAL.gtid_binlog_state")
                .await
                .ok()
                .flatten()
                .map(|s| s.split(',').filter_map(|g| g.trim().parse().ok()).collect())
                .unwrap_or_default();
            if let Some(e) = mariadb_gtid_problem(list, newest, &state, &oldest, earliest) {
                return Err(e);
            }
            ResumePoint { file: String::new(), position: 4, gtid: Some(GtidState::Mariadb(list.clone())) }
        }
    })
}

/// Why a MySQL server cannot stream from `requested` (everything not in it), given its
/// `gtid_executed` and `gtid_purged`; None when it can. History the server purged is
/// [`SourceError::Purged`], whether a file or GTIDs find it gone (`snapshot.mode =
/// "when_needed"` answers both alike); the rest [`SourceError::Start`].
fn mysql_gtid_problem(requested: &GtidSet, executed: &GtidSet, purged: &GtidSet) -> Option<SourceError> {
    if !requested.is_subset(executed) {
        return Some(SourceError::Start(format!(
            "the server has not executed all of {requested} (its gtid_executed is {executed}): it has not reached \
             this position; is this the right server?"
        )));
    }
    if !purged.is_subset(requested) {
        return Some(SourceError::Purged(format!(
            "the server has purged transactions that follow {requested} (its gtid_purged is {purged}): changes \
             after it are lost to replication; take a new snapshot, or start from a later position knowingly"
        )));
    }
    None
}

/// Why a MariaDB server cannot stream after `requested`, given its newest GTID per domain
/// (`gtid_binlog_pos`) and the position at the start of its oldest binlog; None when it can.
fn mariadb_gtid_problem(
    requested: &MariadbGtidList,
    newest: &MariadbGtidList,
    state: &[MariadbGtid],
    oldest: &MariadbGtidList,
    earliest_file: &str,
) -> Option<SourceError> {
    gtid_problem_text(requested, newest, state, oldest, earliest_file).map(|(purged, why)| {
        if purged {
            SourceError::Purged(why)
        } else {
            SourceError::Start(why)
        }
    })
}

/// [`mariadb_gtid_problem`]'s finding: true when the history after `requested` was purged.
fn gtid_problem_text(
    requested: &MariadbGtidList,
    newest: &MariadbGtidList,
    state: &[MariadbGtid],
    oldest: &MariadbGtidList,
    earliest_file: &str,
) -> Option<(bool, String)> {
    for g in requested.iter() {
        match newest.get(g.domain_id) {
            None => {
                return Some((
                    false,
                    format!(
                    "the server has no GTID in domain {} (its gtid_binlog_pos is {newest}): it has not reached {g}; \
                     is this the right server?",
                    g.domain_id
                ),
                ))
            }
            Some(n) if n.seq_no < g.seq_no => {
                return Some((
                    false,
                    format!(
                        "the server has not reached {g}: its newest GTID in domain {} is {n} (gtid_binlog_pos \
                     {newest}), so it lacks GTIDs {}-{}-{} to {g}, which were published from another server; is \
                     this the right server, or is it a replica that is behind (let it catch up, or promote one that \
                     has them)?",
                        g.domain_id,
                        g.domain_id,
                        g.server_id,
                        n.seq_no + 1
                    ),
                ))
            }
            _ => {}
        }
        // a GTID no server of this history wrote (the binlog state keeps the last GTID of each)
        let of_server = state.iter().find(|s| s.domain_id == g.domain_id && s.server_id == g.server_id);
        if !state.is_empty() && of_server.is_none_or(|s| s.seq_no < g.seq_no) {
            let held: Vec<String> = state.iter().map(ToString::to_string).collect();
            return Some((
                false,
                format!(
                    "{g} is not in the server's binlog history, which holds GTIDs up to {} (gtid_binlog_state): a \
                 GTID of another server or topology? Give one of this server's (SELECT @@gtid_binlog_pos)",
                    held.join(",")
                ),
            ));
        }
        if oldest.get(g.domain_id).is_some_and(|o| g.seq_no < o.seq_no) {
            return Some((
                true,
                format!(
                    "the server no longer has the transactions after {g}: its oldest binlog {earliest_file} starts at \
                 {oldest}; changes between are lost to replication: take a new snapshot, or start from \
                 {earliest_file}:4 knowingly"
                ),
            ));
        }
    }
    None
}

/// Whether this user may read `db.table`: None when it may, else the server's refusal.
/// `SELECT 1 ... LIMIT 0` reads no row and takes no lock a writer would wait for.
///
/// # Errors
/// Server errors other than a refused privilege (1142 table, 1143 column, 1044 database).
pub async fn select_refused(conn: &mut Connection, db: &str, table: &str) -> Result<Option<String>> {
    let sql = format!("SELECT 1 FROM {}.{} LIMIT 0", crate::render::ident(db), crate::render::ident(table));
    match conn.query(&sql).await {
        Ok(_) => Ok(None),
        Err(e) => match e.server_error() {
            Some(s) if [1142, 1143, 1044].contains(&s.code) => Ok(Some(s.message.clone())),
            _ => Err(e),
        },
    }
}

/// The replicas connected to the server (`SHOW REPLICA HOSTS`, `SHOW SLAVE HOSTS` before
/// MySQL 8.0.22 and MariaDB 10.5.1): server id and the host name each reported.
///
/// # Errors
/// Server errors (a missing privilege).
pub async fn replica_hosts(conn: &mut Connection) -> Result<Vec<(u32, String)>> {
    let rs = match conn.query("SHOW REPLICA HOSTS").await {
        Ok(rs) => rs,
        Err(_) => conn.query("SHOW SLAVE HOSTS").await?,
    };
    // columns: Server_id, Host (what the replica reported), Port, ...
    Ok(rs
        .to_strings()
        .into_iter()
        .filter_map(|row| {
            let id = row.first()?.as_deref()?.parse().ok()?;
            Some((id, row.get(1).cloned().flatten().unwrap_or_default()))
        })
        .collect())
}

/// Why `file:position` is no place to start: not the first byte of an event, or an event inside
/// a transaction (its rows would have no TABLE_MAP, its XID no BEGIN). What the server says
/// is at the position (`SHOW BINLOG EVENTS IN file FROM position LIMIT 1`) decides; a server
/// that does not answer (a missing privilege) leaves the check to the stream.
/// MariaDB's GTID state at `file:position` (`BINLOG_GTID_POS()`), so that a start by file and
/// position checkpoints GTIDs from the first checkpoint on (MySQL has no such function: there
/// the state comes from the binlog, see `sluice_binlog::transaction`). None when the server
/// cannot say (then the stream's next file start gives it).
pub(crate) async fn mariadb_gtid_at(
    conn: &mut Connection,
    facts: &ServerFacts,
    file: &str,
    position: u64,
) -> Option<GtidState> {
    if !facts.mariadb {
        return None;
    }
    let sql = format!("SELECT BINLOG_GTID_POS({}, {position})", sluice_protocol::replication::sql_string_literal(file));
    match scalar(conn, &sql).await {
        Ok(Some(text)) => match text.parse() {
            Ok(list) => Some(GtidState::Mariadb(list)),
            Err(e) => {
                tracing::warn!(gtid = %text, error = %e, "BINLOG_GTID_POS() returned an unreadable GTID list");
                None
            }
        },
        Ok(None) => None,
        Err(e) => {
            tracing::debug!(error = %e, "BINLOG_GTID_POS() failed: the GTID state comes from the stream");
            None
        }
    }
}

/// Refuses a start at `file:position` where no event starts, or inside a transaction. On
/// MariaDB every event group starts with its GTID event, so a QUERY there (a DDL) is the second
/// event of its group: a start at it would miss the GTID.
async fn event_boundary_problem(
    conn: &mut Connection,
    file: &str,
    position: u64,
    mariadb: bool,
) -> std::result::Result<(), SourceError> {
    let sql = format!(
        "SHOW BINLOG EVENTS IN {} FROM {position} LIMIT 1",
        sluice_protocol::replication::sql_string_literal(file)
    );
    let rows = match conn.query(&sql).await {
        Ok(rs) => rs.to_strings(),
        // 1220: "Wrong offset or I/O error": no event starts there
        Err(e) if e.server_error().is_some_and(|s| s.code == 1220) => {
            return Err(SourceError::Start(format!(
                "{file}:{position} is not the start of an event; the events and their positions: SHOW BINLOG \
                 EVENTS IN '{file}'"
            )))
        }
        Err(e) => {
            tracing::debug!(error = %e, "SHOW BINLOG EVENTS failed: the start position is not checked");
            return Ok(());
        }
    };
    let Some(row) = rows.first() else { return Ok(()) };
    let kind = row.get(2).cloned().flatten().unwrap_or_default();
    let info = row.get(5).cloned().flatten().unwrap_or_default();
    let inside =
        matches!(kind.as_str(), "Table_map" | "Annotate_rows" | "Rows_query" | "Xid" | "Intvar" | "Rand" | "User var")
            || kind.contains("_rows")
            || (kind == "Query"
                && (info.eq_ignore_ascii_case("COMMIT") || info.to_ascii_uppercase().starts_with("SAVEPOINT")));
    if inside {
        return Err(SourceError::Start(format!(
            "{file}:{position} is inside a transaction (the event there is {kind}): start at the transaction's GTID \
             or BEGIN event, or after its end (SHOW BINLOG EVENTS IN '{file}' lists them)"
        )));
    }
    if mariadb && (kind == "Query" || kind == "Query_compressed") {
        return Err(SourceError::Start(format!(
            "{file}:{position} is inside an event group: the QUERY there ({}) follows its GTID event, which a start \
             there would miss; start at that GTID event, or after the statement (SHOW BINLOG EVENTS IN '{file}' \
             lists them)",
            info.chars().take(60).collect::<String>()
        )));
    }
    Ok(())
}

/// Why an event of type `ty` (a QUERY's text `query`) is no place to start: it is inside a
/// transaction, whose beginning a start there would lose (a rows event without its TABLE_MAP,
/// or rows without their GTID and BEGIN). The rule of [`event_boundary_problem`], for events
/// read from a file rather than listed by the server.
pub(crate) fn inside_a_transaction(ty: EventType, query: Option<&str>) -> bool {
    use EventType as T;
    match ty {
        T::TableMap
        | T::MariadbAnnotateRows
        | T::RowsQuery
        | T::Xid
        | T::Intvar
        | T::Rand
        | T::UserVar
        | T::PreGaWriteRows
        | T::PreGaUpdateRows
        | T::PreGaDeleteRows
        | T::WriteRowsV1
        | T::UpdateRowsV1
        | T::DeleteRowsV1
        | T::WriteRowsV2
        | T::UpdateRowsV2
        | T::DeleteRowsV2
        | T::PartialUpdateRows
        | T::MariadbWriteRowsCompressedV1
        | T::MariadbUpdateRowsCompressedV1
        | T::MariadbDeleteRowsCompressedV1
        | T::MariadbWriteRowsCompressed
        | T::MariadbUpdateRowsCompressed
        | T::MariadbDeleteRowsCompressed => true,
        T::Query | T::MariadbQueryCompressed => query.is_some_and(|q| {
            let q = q.trim_start();
            q.eq_ignore_ascii_case("COMMIT") || q.get(..9).is_some_and(|p| p.eq_ignore_ascii_case("SAVEPOINT"))
        }),
        _ => false,
    }
}

/// Calls `on_logs` with the server's binary logs (`SHOW BINARY LOGS`) every `every`, on a
/// connection of its own (the replication connection is busy streaming), reconnecting as
/// needed, until the process ends. `servers` are the source's servers and `active` the index
/// of the one streamed from: after a failover the watcher follows to the new one. Failures
/// only skip a turn (logged at debug level): the replication stream reports what matters.
pub async fn watch_binary_logs(
    servers: Vec<ConnectOptions>,
    mut active: tokio::sync::watch::Receiver<usize>,
    every: Duration,
    on_logs: impl Fn(&[(String, u64)]),
) {
    if servers.is_empty() {
        return;
    }
    loop {
        let index = *active.borrow_and_update() % servers.len();
        match Connection::connect(servers[index].clone()).await {
            Ok(mut conn) => loop {
                match binary_logs(&mut conn).await {
                    Ok(logs) => on_logs(&logs),
                    Err(e) => {
                        tracing::debug!(error = %e, "SHOW BINARY LOGS for the lag in bytes failed");
                        break;
                    }
                }
                tokio::time::sleep(every).await;
                if active.has_changed().unwrap_or(false) {
                    break;
                }
            },
            Err(e) => tracing::debug!(error = %e, "Connecting for the lag in bytes failed"),
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_inside_a_transaction_is_told_by_its_event() {
        for ty in [EventType::TableMap, EventType::WriteRowsV2, EventType::MariadbUpdateRowsCompressed, EventType::Xid]
        {
            assert!(inside_a_transaction(ty, None), "{ty:?}");
        }
        for ty in [EventType::MariadbGtid, EventType::Gtid, EventType::Rotate, EventType::FormatDescription] {
            assert!(!inside_a_transaction(ty, None), "{ty:?}");
        }
        assert!(inside_a_transaction(EventType::Query, Some("COMMIT")));
        assert!(inside_a_transaction(EventType::Query, Some("savepoint `a`")));
        assert!(!inside_a_transaction(EventType::Query, Some("BEGIN")));
        assert!(!inside_a_transaction(EventType::Query, Some("CREATE TABLE t (a INT)")));
        assert!(!inside_a_transaction(EventType::Query, Some("SAVE")), "shorter than the word");
    }

    #[test]
    fn mariadb_gtids_ahead_behind_and_purged() {
        let l = |s: &str| s.parse::<MariadbGtidList>().unwrap();
        let (newest, oldest) = (l("0-1-500,1-1-20"), l("0-1-100"));
        let state: Vec<MariadbGtid> = ["0-1-500", "1-1-20", "0-3-450"].iter().map(|g| g.parse().unwrap()).collect();
        let problem = |list: &str, state: &[MariadbGtid]| {
            mariadb_gtid_problem(&l(list), &newest, state, &oldest, "b.000002").map(|e| {
                let purged = matches!(e, SourceError::Purged(_));
                assert!(purged || matches!(e, SourceError::Start(_)), "{e:?}");
                (purged, e.to_string())
            })
        };
        assert!(problem("0-1-300", &state).is_none());
        assert!(problem("0-1-100,1-1-20", &state).is_none());
        assert!(problem("0-3-450", &state).is_none());
        let (purged, other) = problem("0-2-1", &state).unwrap();
        assert!(!purged);
        assert!(other.starts_with("0-2-1 is not in the server's binlog history"), "{other}");
        let (purged, ahead) = problem("0-1-501", &[]).unwrap();
        assert!(!purged);
        assert!(
            ahead.starts_with("the server has not reached 0-1-501: its newest GTID in domain 0 is 0-1-500"),
            "{ahead}"
        );
        assert!(ahead.contains("so it lacks GTIDs 0-1-501 to 0-1-501"), "{ahead}");
        assert!(!ahead.contains("purged") && !ahead.contains("lost"), "{ahead}");
        let (_, domain) = problem("7-1-1", &[]).unwrap();
        assert!(domain.contains("no GTID in domain 7"), "{domain}");
        let (gone, purged) = problem("0-1-99", &state).unwrap();
        assert!(gone, "a purged history is one error kind, by file or by GTID");
        assert!(
            purged.contains("no longer has the transactions after 0-1-99") && purged.contains("b.000002:4"),
            "{purged}"
        );
    }

    #[test]
    fn mysql_gtid_sets_ahead_and_purged() {
        let s = |t: &str| t.parse::<GtidSet>().unwrap();
        let u = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let executed = s(&format!("{u}:1-100"));
        let purged = s(&format!("{u}:1-10"));
        assert!(mysql_gtid_problem(&s(&format!("{u}:1-50")), &executed, &purged).is_none());
        let ahead = mysql_gtid_problem(&s(&format!("{u}:1-150")), &executed, &purged).unwrap();
        assert!(matches!(ahead, SourceError::Start(_)));
        let ahead = ahead.to_string();
        assert!(ahead.contains("has not executed all of") && ahead.contains("has not reached"), "{ahead}");
        let gone = mysql_gtid_problem(&s(&format!("{u}:1-5")), &executed, &purged).unwrap();
        assert!(matches!(gone, SourceError::Purged(_)));
        let gone = gone.to_string();
        assert!(gone.contains("has purged transactions that follow"), "{gone}");
    }
}
