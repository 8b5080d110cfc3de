//! Pre-flight checks: is this server set up for row-based change capture, and may this user
//! replicate from it? Every check runs, and the report lists every problem at once, each with
//! what to change. `sluice check` prints the report; the source refuses to stream while it has
//! errors.

use std::fmt;

use sluice_protocol::gtid::MariadbGtidList;
use sluice_protocol::{Connection, Result};

use super::server::{binary_logs, replica_hosts, scalar};
use crate::position::GtidState;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Fine.
    Ok,
    /// Works, with a limitation the operator should know.
    Warning,
    /// Streaming cannot work until this is fixed.
    Error,
}

/// One check's outcome.
#[derive(Debug, Clone)]
pub struct Finding {
    /// Severity.
    pub level: Level,
    /// What was checked (`binlog_format`).
    pub check: &'static str,
    /// What was found and, for problems, what to do.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.level {
            Level::Ok => "ok",
            Level::Warning => "warning",
            Level::Error => "ERROR",
        };
        write!(f, "[{tag}] {}: {}", self.check, self.message)
    }
}

/// All findings for a server.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Every finding, in check order.
    pub findings: Vec<Finding>,
    /// The server's current GTID position, when it has one.
    pub gtid_position: Option<GtidState>,
    /// The server is MariaDB.
    pub mariadb: bool,
    /// The server id is held by a connection that reported this same replica's host name: a
    /// predecessor of this source (stopped or killed moments ago), which the server drops
    /// within a few heartbeat periods; not a configuration mistake.
    pub predecessor_registered: bool,
}

impl Report {
    fn push(&mut self, level: Level, check: &'static str, message: impl Into<String>) {
        self.findings.push(Finding { level, check, message: message.into() });
    }

    /// True when some check failed.
    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.level == Level::Error)
    }

    /// The warnings, as lines.
    pub fn warnings(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.level == Level::Warning)
    }

    /// True when the only failed check is a predecessor of this same replica still holding the
    /// server id (see [`Report::predecessor_registered`]): waiting a heartbeat cures it.
    pub fn only_predecessor_registered(&self) -> bool {
        self.predecessor_registered
            && self.findings.iter().filter(|f| f.level == Level::Error).all(|f| f.check == "server_id")
    }

    /// The failed checks, one per line.
    pub fn errors_text(&self) -> String {
        self.findings
            .iter()
            .filter(|f| f.level == Level::Error)
            .map(|f| format!("  {f}"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The global privileges Sluice uses, or may be given for a reason (`SELECT` on everything
/// instead of on the captured tables; `REPLICATION MASTER ADMIN` lets MariaDB list replicas).
/// MySQL's and MariaDB's names of the same privilege are both here.
const NEEDED_GLOBAL: &[&str] = &[
    "USAGE",
    "REPLICATION SLAVE",
    "REPLICATION REPLICA",
    "REPLICATION CLIENT",
    "BINLOG MONITOR",
    "SELECT",
    "REPLICATION MASTER ADMIN",
];

/// The privileges granted `ON *.*` by `SHOW GRANTS` lines (`GRANT SELECT, REPLICATION SLAVE ON
/// *.* TO ...`), upper case, one per entry; role grants (`GRANT role TO user`) carry none.
fn global_privileges(grants: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for g in grants {
        let upper = g.to_ascii_uppercase();
        let Some(rest) = upper.strip_prefix("GRANT ") else { continue };
        let Some((privs, _)) = rest.split_once(" ON *.* ") else { continue };
        for p in privs.split(',') {
            let p = p.trim();
            if !p.is_empty() && !out.iter().any(|o| o == p) {
                out.push(p.to_string());
            }
        }
    }
    out
}

/// Runs every check against the server.
///
/// # Errors
/// Only when the connection itself fails; a failed check is a finding, not an error.
/// `server_id_setting` names where the operator sets this replica's server id
/// (`source.server_id`, `--server-id`), for the message when it clashes.
pub async fn run(conn: &mut Connection, server_id: u32, server_id_setting: &str, report_host: &str) -> Result<Report> {
    let mut r = Report { mariadb: conn.is_mariadb(), ..Report::default() };
    let flavour = if r.mariadb { "MariaDB" } else { "MySQL" };
    // MariaDB prefixes its version with "5.5.5-" for old clients
    r.push(Level::Ok, "server", format!("{flavour} {}", conn.server_version().trim_start_matches("5.5.5-")));

    match scalar(conn, "SELECT @@log_bin").await?.as_deref() {
        Some("1") => r.push(Level::Ok, "log_bin", "binary logging is on"),
        other => r.push(
            Level::Error,
            "log_bin",
            format!(
                "binary logging is off (@@log_bin = {}): start the server with --log-bin (and --server-id)",
                other.unwrap_or("NULL")
            ),
        ),
    }
    match scalar(conn, "SELECT @@binlog_format").await?.as_deref() {
        Some("ROW") => r.push(Level::Ok, "binlog_format", "ROW"),
        other => r.push(
            Level::Error,
            "binlog_format",
            format!(
                "is {}, not ROW: set binlog_format=ROW in the server configuration (SET GLOBAL binlog_format='ROW' \
                 applies to new sessions only)",
                other.unwrap_or("unknown")
            ),
        ),
    }
    match scalar(conn, "SELECT @@binlog_row_image").await?.as_deref() {
        Some("FULL") => r.push(Level::Ok, "binlog_row_image", "FULL"),
        Some(img @ ("MINIMAL" | "NOBLOB")) => r.push(
            Level::Warning,
            "binlog_row_image",
            format!(
                "is {img}: {}; set binlog_row_image=FULL for complete change records (sluice run stops at such \
                 rows unless [output] partial_images = true, and sluice dump --format flashback cannot undo them)",
                if img == "MINIMAL" {
                    "before images carry only the key, after images only the changed columns"
                } else {
                    "images leave out the BLOB and TEXT columns the change does not need"
                }
            ),
        ),
        other => r.push(Level::Warning, "binlog_row_image", format!("unknown value {other:?}")),
    }
    match scalar(conn, "SELECT @@binlog_row_metadata").await {
        Ok(Some(m)) if m == "FULL" => r.push(Level::Ok, "binlog_row_metadata", "FULL: column names come from the binlog"),
        Ok(m) => r.push(
            Level::Warning,
            "binlog_row_metadata",
            format!(
                "is {}: the binlog carries no column names; sluice takes them from the schema it tracks (read from \
                 the server, followed through DDL, checked against each TABLE_MAP, see README), and shows @1..@N where \
                 it has none that fits; set binlog_row_metadata=FULL so every event names its columns",
                m.unwrap_or_default()
            ),
        ),
        Err(_) => r.push(
            Level::Warning,
            "binlog_row_metadata",
            "not supported by this server (MySQL before 8.0.1, MariaDB before 10.5): the binlog carries no column names",
        ),
    }
    if let Ok(Some(c)) = scalar(conn, "SELECT @@binlog_checksum").await {
        r.push(Level::Ok, "binlog_checksum", c);
    }

    // GTIDs
    if r.mariadb {
        if let Ok(Some(pos)) = scalar(conn, "SELECT @@gtid_binlog_pos").await {
            match pos.parse::<MariadbGtidList>() {
                Ok(l) => {
                    r.push(Level::Ok, "gtid", format!("gtid_binlog_pos = {l}"));
                    r.gtid_position = Some(GtidState::Mariadb(l));
                }
                Err(e) => r.push(Level::Warning, "gtid", format!("cannot read gtid_binlog_pos {pos:?}: {e}")),
            }
        }
    } else {
        match scalar(conn, "SELECT @@gtid_mode").await {
            Ok(Some(m)) if m == "ON" => r.push(Level::Ok, "gtid_mode", "ON"),
            Ok(m) => r.push(
                Level::Warning,
                "gtid_mode",
                format!("is {}: resuming works by file and position only", m.unwrap_or_default()),
            ),
            Err(_) => r.push(Level::Warning, "gtid_mode", "not supported by this server"),
        }
    }

    // privileges: the least Sluice needs, and what it has beyond them
    match conn.query("SHOW GRANTS FOR CURRENT_USER()").await {
        Ok(rs) => {
            let grants: Vec<String> =
                rs.to_strings().into_iter().filter_map(|row| row.into_iter().next().flatten()).collect();
            let global = global_privileges(&grants);
            let has = |p: &str| global.iter().any(|g| g == "ALL PRIVILEGES" || g == p);
            let mut missing = Vec::new();
            if !(has("REPLICATION SLAVE") || has("REPLICATION REPLICA")) {
                missing.push("REPLICATION SLAVE");
            }
            // MariaDB 10.5 renamed REPLICATION CLIENT to BINLOG MONITOR
            if !(has("REPLICATION CLIENT") || has("BINLOG MONITOR")) {
                missing.push(if r.mariadb { "BINLOG MONITOR (REPLICATION CLIENT)" } else { "REPLICATION CLIENT" });
            }
            if missing.is_empty() {
                r.push(Level::Ok, "privileges", "replication privileges granted");
            } else {
                r.push(
                    Level::Error,
                    "privileges",
                    format!("the user lacks {}: GRANT {} ON *.* TO <user>", missing.join(" and "), missing.join(", ")),
                );
            }
            let extra: Vec<&str> = global.iter().map(String::as_str).filter(|p| !NEEDED_GLOBAL.contains(p)).collect();
            if !extra.is_empty() {
                r.push(
                    Level::Warning,
                    "privileges",
                    format!(
                        "the user also has {} ON *.*, which Sluice never uses: it needs only {} ON *.* and SELECT on \
                         the captured tables (README, \"Privileges\")",
                        extra.join(", "),
                        if r.mariadb {
                            "REPLICATION SLAVE, BINLOG MONITOR"
                        } else {
                            "REPLICATION SLAVE, REPLICATION CLIENT"
                        }
                    ),
                );
            }
        }
        Err(e) => r.push(Level::Warning, "privileges", format!("cannot read grants: {e}")),
    }

    // server id
    match scalar(conn, "SELECT @@server_id").await?.and_then(|s| s.parse::<u32>().ok()) {
        Some(id) if id == server_id => r.push(
            Level::Error,
            "server_id",
            format!("Sluice's server id {server_id} equals the server's own: choose another with {server_id_setting}"),
        ),
        Some(_) => {
            let hosts = match replica_hosts(conn).await {
                Ok(h) => Some(h),
                Err(e) => {
                    r.push(
                        Level::Warning,
                        "server_id",
                        format!(
                            "cannot list the server's replicas ({e}): another replica using server id {server_id} \
                             shows only once streaming; to have it checked now, GRANT {} ON *.* TO <user> (optional)",
                            if r.mariadb { "REPLICATION MASTER ADMIN" } else { "REPLICATION SLAVE" }
                        ),
                    );
                    None
                }
            };
            if let Some((_, host)) = hosts.iter().flatten().find(|(id, _)| *id == server_id) {
                let host = host.clone();
                let message = if host == report_host {
                    r.predecessor_registered = true;
                    format!(
                        "a connection of this same replica ({host}) is still registered with server id {server_id}; \
                         it is probably a predecessor that was stopped or killed, which the server drops within a few \
                         heartbeat periods"
                    )
                } else {
                    format!(
                        "another replica ({host:?}) is connected with server id {server_id}: choose a unique one with \
                         {server_id_setting}"
                    )
                };
                r.push(Level::Error, "server_id", message);
            } else if hosts.is_some() {
                r.push(Level::Ok, "server_id", format!("{server_id} is free"));
            }
        }
        None => r.push(Level::Warning, "server_id", "cannot read @@server_id"),
    }

    match binary_logs(conn).await {
        Ok(logs) if !logs.is_empty() => {
            let first = logs.first().map(|(f, _)| f.as_str()).unwrap_or_default();
            let last = logs.last().map(|(f, _)| f.as_str()).unwrap_or_default();
            r.push(Level::Ok, "binary_logs", format!("{} files, {first} .. {last}", logs.len()));
        }
        Ok(_) => r.push(Level::Error, "binary_logs", "SHOW BINARY LOGS lists no files"),
        Err(e) => r.push(Level::Error, "binary_logs", format!("SHOW BINARY LOGS failed: {e}")),
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_privileges_of_grant_lines() {
        let grants = [
            "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `sluice`@`%` IDENTIFIED BY PASSWORD '*AB'".to_string(),
            "GRANT SELECT ON `shop`.* TO `sluice`@`%`".to_string(),
            "GRANT `reader` TO `sluice`@`%`".to_string(),
        ];
        assert_eq!(global_privileges(&grants), ["REPLICATION SLAVE", "BINLOG MONITOR"]);
        let all = ["GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION".to_string()];
        assert_eq!(global_privileges(&all), ["ALL PRIVILEGES"]);
    }
}
