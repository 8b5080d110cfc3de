//! The tracked schema: **which column names and types a TABLE_MAP without metadata means**.
//! The model and its use are here; the DDL that changes it in [`ddl`], its store on Kafka in
//! [`store`], its initial load from `information_schema` in [`load`].
//!
//! A TABLE_MAP always carries each column's wire type, type metadata and nullability, but its
//! names, signedness, charsets, ENUM/SET members and primary key only when the server writes
//! optional metadata (`binlog_row_metadata=FULL`; MINIMAL, the default, gives signedness and
//! charsets but no names; MariaDB's NO_LOG gives none). For those tables Sluice keeps its own
//! copy of the schema, as of the binlog position being read:
//!
//! - **initial state**: with no checkpoint yet, the captured tables' definitions are read from
//!   `information_schema` on the replication source's own connection, at the moment the start
//!   position is taken ([`load::load_from_server`]);
//! - **DDL**: each QUERY event's statement is parsed (sqlparser's `MySqlDialect`) and CREATE
//!   TABLE (also `LIKE`, partitioned), ALTER TABLE (column and primary-key changes, also
//!   `ADD COLUMN (a INT, b INT)`, `ONLINE`/`IGNORE`/`WAIT n`; RENAME TO; `CONVERT TO
//!   CHARACTER SET`; table options, indexes and partition maintenance leave the columns),
//!   RENAME TABLE, DROP TABLE and DROP DATABASE are applied ([`SchemaHistory::apply_query`] (in [`ddl`]));
//!   what sqlparser lacks is rewritten into what it parses first (`rewrite_for_parser`);
//!   database and table names compare as the server compares them (in lower case under
//!   `lower_case_table_names` 1 or 2, read from the server at each start); names
//!   resolve against the event's default database; statements on uncaptured tables are
//!   ignored. A statement on a captured table that cannot be parsed or applied marks the table
//!   *unknown*: later rows of it without names in their TABLE_MAP stop with an error naming
//!   the statement, never a guess;
//! - **persistence**: every change is a record on the compacted `<prefix>.__schemas` topic,
//!   keyed `<source name>/<db>.<table>` (a tombstone for a dropped table), written in the Kafka
//!   transaction whose checkpoint covers the DDL; the checkpoint carries the history version.
//!   On start, reading the whole topic `read_committed` gives exactly the schema as of the
//!   checkpoint ([`store::read_from_kafka`]), so a restart never applies today's schema to
//!   yesterday's events;
//! - **use**: [`SchemaHistory::resolve`] fills a TABLE_MAP's missing metadata from the
//!   tracked definition after checking the column count and every column's type family; a
//!   mismatch is an error naming table, column, both types and the binlog position.
//!
//! Limitation: starting with no checkpoint at a position in the past (`earliest`, a file
//! position, a GTID set) uses the *current* schema for older events. If a DDL happened since,
//! the TABLE_MAP comparison catches the difference in column count or type family and stops
//! instead of misaligning columns; a change that keeps every type family (a rename, two
//! swapped INT columns) cannot be seen, which is why `binlog_row_metadata=FULL` remains the
//! recommendation.
//!
//! References: <https://dev.mysql.com/doc/refman/8.4/en/replication-options-binary-log.html#sysvar_binlog_row_metadata>,
//! <https://mariadb.com/kb/en/replication-and-binary-log-system-variables/#binlog_row_metadata>,
//! `Table_map_event` optional metadata
//! (<https://dev.mysql.com/doc/dev/mysql-server/latest/classbinary__log_1_1Table__map__event.html>),
//! ALTER TABLE syntax (<https://dev.mysql.com/doc/refman/8.4/en/alter-table.html>,
//! <https://mariadb.com/kb/en/alter-table/>), sqlparser's AST (<https://docs.rs/sqlparser>).

pub mod ddl;
pub mod effects;
pub mod load;
pub mod store;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sluice_binlog::charset::{charset_of, BINARY_COLLATION};
use sluice_binlog::column::ColumnType;
use sluice_binlog::rows::RowsEvent;
use sluice_binlog::TableMap;

pub use effects::RowEffect;
pub use store::{committed, Committed};

/// One column as tracked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackedColumn {
    /// Name as declared.
    pub name: String,
    /// The SQL type as declared (for messages), e.g. `DECIMAL(10,2) UNSIGNED`.
    pub sql_type: String,
    /// The base type name, lower case: `int`, `varchar`, `decimal`, `enum`, ...
    pub type_name: String,
    /// UNSIGNED (numeric types).
    #[serde(default)]
    pub unsigned: bool,
    /// Character set name (`utf8mb4`, `latin1`, `binary` for binary strings); None for
    /// non-character types, or when not known.
    #[serde(default)]
    pub charset: Option<String>,
    /// ENUM members in order.
    #[serde(default)]
    pub enum_values: Option<Vec<String>>,
    /// SET members in order.
    #[serde(default)]
    pub set_values: Option<Vec<String>>,
    /// Whether the column may be NULL.
    #[serde(default = "yes")]
    pub nullable: bool,
}

fn yes() -> bool {
    true
}

/// One table as tracked: the value of its `__schemas` record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackedTable {
    /// Database.
    pub database: String,
    /// Table.
    pub table: String,
    /// Columns in table order.
    pub columns: Vec<TrackedColumn>,
    /// Primary-key column names, in key order.
    #[serde(default)]
    pub primary_key: Vec<String>,
    /// The table's default character set (for columns added without one).
    #[serde(default)]
    pub default_charset: Option<String>,
    /// The history version of this definition.
    pub version: u64,
    /// Where it comes from: `file:position` of the DDL, or `server` for the initial load.
    pub since: String,
    /// Set when a statement on the table could not be applied: the statement and why. The
    /// columns are then not to be used.
    #[serde(default)]
    pub unknown: Option<String>,
}

impl TrackedTable {
    /// `ALTER TABLE ... CONVERT TO CHARACTER SET cs`: every character column (not the binary
    /// strings) takes the charset; to `binary`, text types become their binary ones as MySQL
    /// makes them. (MySQL may also widen a TEXT type to keep its length in characters; the
    /// TABLE_MAP's own length metadata decodes it either way.)
    fn convert_to(&mut self, cs: &str) {
        for c in &mut self.columns {
            let character = matches!(
                c.type_name.as_str(),
                "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "enum" | "set"
            );
            if !character || c.charset.as_deref() == Some("binary") {
                continue;
            }
            c.charset = Some(cs.to_string());
            if cs == "binary" {
                let binary = match c.type_name.as_str() {
                    "char" => "binary",
                    "varchar" => "varbinary",
                    "tinytext" => "tinyblob",
                    "text" => "blob",
                    "mediumtext" => "mediumblob",
                    "longtext" => "longblob",
                    other => other,
                };
                c.type_name = binary.to_string();
            }
        }
    }

    fn key(&self) -> String {
        format!("{}.{}", self.database, self.table)
    }

    /// A table known by name only (tests of what needs no columns).
    #[cfg(test)]
    pub fn without_columns(database: &str, table: &str) -> TrackedTable {
        TrackedTable {
            database: database.into(),
            table: table.into(),
            columns: Vec::new(),
            primary_key: Vec::new(),
            default_charset: None,
            version: 1,
            since: "server".into(),
            unknown: None,
        }
    }

    fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name.eq_ignore_ascii_case(name))
    }
}

/// The tracked schema of the captured tables, with its history version.
#[derive(Debug, Default)]
pub struct SchemaHistory {
    tables: BTreeMap<String, TrackedTable>,
    version: u64,
    /// Tables changed since the last [`SchemaHistory::flush`] (absent from `tables`: dropped).
    dirty: BTreeSet<String>,
    /// Filled TABLE_MAPs: (the TABLE_MAP as read, history version) → the filled copy.
    resolved: HashMap<String, (Arc<TableMap>, u64, Arc<TableMap>)>,
    /// The last of them, found by the TABLE_MAP's identity: the decoder hands back the same
    /// `Arc` for a table's repeated TABLE_MAP, so a run of one table's transactions resolves
    /// without building and hashing its name each time (a rows event each).
    last_resolved: Option<(Arc<TableMap>, u64, Arc<TableMap>)>,
    /// The server compares database and table names case-insensitively
    /// (`lower_case_table_names` 1 or 2): they are tracked in lower case, so `ALTER TABLE
    /// Shop.Orders` finds the table a TABLE_MAP calls `shop.orders`.
    fold_names: bool,
}

/// Which tables are captured: the configured [`crate::filter::TableFilter`], or any
/// `Fn(db, table) -> bool` (tests).
pub trait Captures {
    /// True when table `db`.`table` is captured.
    fn captures(&self, db: &str, table: &str) -> bool;
}

impl<F: Fn(&str, &str) -> bool> Captures for F {
    fn captures(&self, db: &str, table: &str) -> bool {
        self(db, table)
    }
}

impl Captures for crate::filter::TableFilter {
    fn captures(&self, db: &str, table: &str) -> bool {
        self.matches(db, table)
    }
}

/// How the schema functions are told which tables are captured.
pub type Captured<'a> = &'a dyn Captures;

impl SchemaHistory {
    /// A history holding `tables` at `version`; `dirty` marks them all to be written with the
    /// next commit (an initial load) or none (read back from Kafka).
    pub fn new(tables: Vec<TrackedTable>, version: u64, dirty: bool) -> SchemaHistory {
        let mut h = SchemaHistory { version, ..SchemaHistory::default() };
        for t in tables {
            h.version = h.version.max(t.version);
            if dirty {
                h.dirty.insert(t.key());
            }
            h.tables.insert(t.key(), t);
        }
        h
    }

    /// The tables tracked now.
    pub fn tables(&self) -> impl Iterator<Item = &TrackedTable> {
        self.tables.values()
    }

    /// The history version: it grows with every applied change.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The tracked definition of `db.table`.
    #[cfg(test)]
    pub fn get(&self, qualified: &str) -> Option<&TrackedTable> {
        self.tables.get(&self.fold(qualified))
    }

    /// True when changes wait for the next commit.
    pub fn has_pending(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Takes the server's `lower_case_table_names`: with 1 or 2, database and table names
    /// are tracked in lower case (what is tracked already is renamed so).
    pub fn set_lower_case_table_names(&mut self, value: u32) {
        self.fold_names = value != 0;
        if self.fold_names {
            let tables = std::mem::take(&mut self.tables);
            for (_, mut t) in tables {
                t.database = t.database.to_lowercase();
                t.table = t.table.to_lowercase();
                self.tables.insert(t.key(), t);
            }
            self.dirty = std::mem::take(&mut self.dirty).into_iter().map(|k| k.to_lowercase()).collect();
            self.resolved.clear();
            self.last_resolved = None;
        }
    }

    /// A database or table name as tracked.
    fn fold(&self, name: &str) -> String {
        fold_name(self.fold_names, name)
    }

    fn put(&mut self, mut t: TrackedTable, since: &str, version: u64) {
        t.database = self.fold(&t.database);
        t.table = self.fold(&t.table);
        t.version = version;
        t.since = since.to_string();
        self.dirty.insert(t.key());
        self.tables.insert(t.key(), t);
    }

    fn remove(&mut self, key: &str) {
        if self.tables.remove(key).is_some() {
            self.dirty.insert(key.to_string());
        }
    }

    fn mark_unknown(&mut self, db: &str, table: &str, why: String, since: &str, version: u64) {
        tracing::warn!(table = %format!("{db}.{table}"), at = since, "{why}");
        let t = TrackedTable {
            database: db.to_string(),
            table: table.to_string(),
            columns: Vec::new(),
            primary_key: Vec::new(),
            default_charset: None,
            version,
            since: since.to_string(),
            unknown: Some(why),
        };
        self.put(t, since, version);
    }

    /// The TABLE_MAP to decode and publish rows of `tm` with: `tm` itself when it carries
    /// column names (the tracked definition follows it), else a copy filled from the tracked
    /// definition. `file` and `offset` locate the rows event, for messages.
    ///
    /// # Errors
    /// The operator message when the table is not tracked, unknown, or does not match.
    pub fn resolve(&mut self, tm: &Arc<TableMap>, file: &str, offset: u64) -> Result<Arc<TableMap>, SchemaError> {
        if let Some((orig, v, filled)) = &self.last_resolved {
            if *v == self.version && Arc::ptr_eq(orig, tm) {
                return Ok(Arc::clone(filled));
            }
        }
        let name = self.fold(&tm.qualified_name());
        let found = self
            .resolved
            .get(&name)
            .filter(|(orig, v, _)| *v == self.version && (Arc::ptr_eq(orig, tm) || **orig == **tm));
        let filled = match found {
            Some((_, _, filled)) => Arc::clone(filled),
            None => {
                let at = format!("{file}:{offset}");
                if tm.has_column_names {
                    self.learn(&name, tm, &at);
                    Arc::clone(tm)
                } else {
                    let filled = Arc::new(fill(tm, self.tables.get(&name), &at).map_err(SchemaError)?);
                    self.resolved.insert(name, (Arc::clone(tm), self.version, Arc::clone(&filled)));
                    filled
                }
            }
        };
        self.last_resolved = Some((Arc::clone(tm), self.version, Arc::clone(&filled)));
        Ok(filled)
    }
}

impl SchemaHistory {
    /// A TABLE_MAP with names is the truth: when the tracked definition is missing, unknown,
    /// or disagrees with it (names, count, type families), it replaces it, so a later switch to
    /// MINIMAL metadata, or a DDL Sluice could not parse, is healed by the next FULL TABLE_MAP.
    fn learn(&mut self, name: &str, tm: &Arc<TableMap>, at: &str) {
        let consistent = self.tables.get(name).is_some_and(|t| {
            t.unknown.is_none()
                && t.columns.len() == tm.columns.len()
                && t.columns.iter().zip(&tm.columns).all(|(tc, c)| {
                    c.name.as_deref().is_some_and(|n| n.eq_ignore_ascii_case(&tc.name))
                        && family_matches(c.ty, &tc.type_name)
                })
        });
        if !consistent {
            if let Some(mut t) = tracked_from_table_map(tm, at) {
                let version = self.version + 1;
                t.default_charset = self.tables.get(name).and_then(|old| old.default_charset.clone());
                tracing::info!(table = name, version, at, "The tracked schema follows the TABLE_MAP's column names");
                self.put(t, at, version);
                self.version = version;
            }
        }
        self.resolved.insert(name.to_string(), (Arc::clone(tm), self.version, Arc::clone(tm)));
    }
}

impl SchemaHistory {
    /// The rows event to decode and publish: `rows` itself when its TABLE_MAP carries column
    /// names, else the same event on the TABLE_MAP filled from the tracked definition (see
    /// [`SchemaHistory::resolve`]). The one place `sluice run` and `sluice dump` name columns.
    ///
    /// # Errors
    /// As [`SchemaHistory::resolve`].
    pub fn resolve_rows<'r, 'a>(
        &mut self,
        rows: &'r RowsEvent<'a>,
        file: &str,
        offset: u64,
    ) -> Result<Cow<'r, RowsEvent<'a>>, SchemaError> {
        let table = self.resolve(&rows.table, file, offset)?;
        if Arc::ptr_eq(&table, &rows.table) {
            return Ok(Cow::Borrowed(rows));
        }
        let mut filled = rows.clone();
        filled.table = table;
        Ok(Cow::Owned(filled))
    }
}

/// A TABLE_MAP the tracked schema cannot name columns for: the operator message (the table, the
/// column and both types where they disagree, the position, and what to do).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SchemaError(String);

/// A tracked definition from a TABLE_MAP with full metadata (None for a type Sluice does not
/// track).
fn tracked_from_table_map(tm: &TableMap, at: &str) -> Option<TrackedTable> {
    use ColumnType as T;
    let mut columns = Vec::with_capacity(tm.columns.len());
    for c in &tm.columns {
        let binary = c.collation == Some(BINARY_COLLATION);
        let type_name = match c.ty {
            T::Tiny => "tinyint",
            T::Short => "smallint",
            T::Int24 => "mediumint",
            T::Long => "int",
            T::LongLong => "bigint",
            T::Float => "float",
            T::Double => "double",
            T::NewDecimal | T::Decimal => "decimal",
            T::Date | T::NewDate => "date",
            T::Time | T::Time2 => "time",
            T::DateTime | T::DateTime2 => "datetime",
            T::Timestamp | T::Timestamp2 => "timestamp",
            T::Year => "year",
            T::String if binary => "binary",
            T::String => "char",
            T::VarChar | T::VarString if binary => "varbinary",
            T::VarChar | T::VarString => "varchar",
            T::TinyBlob | T::Blob | T::MediumBlob | T::LongBlob if binary => "blob",
            T::TinyBlob | T::Blob | T::MediumBlob | T::LongBlob => "text",
            T::Enum => "enum",
            T::Set => "set",
            T::Bit => "bit",
            T::Json => "json",
            T::Geometry => "geometry",
            T::Vector => "vector",
            _ => return None,
        };
        columns.push(TrackedColumn {
            name: c.name.as_deref()?.to_string(),
            sql_type: format!("{} (from the TABLE_MAP at {at})", type_name.to_ascii_uppercase()),
            type_name: type_name.to_string(),
            unsigned: c.unsigned,
            charset: c.collation.and_then(charset_of).map(|cs| cs.name().to_string()),
            enum_values: c.enum_values.as_ref().map(|v| v.iter().map(|s| s.to_string()).collect()),
            set_values: c.set_values.as_ref().map(|v| v.iter().map(|s| s.to_string()).collect()),
            nullable: c.nullable,
        });
    }
    let primary_key = match &tm.primary_key {
        Some(pk) => pk.iter().filter_map(|&(i, _)| columns.get(i).map(|c| c.name.clone())).collect(),
        None => columns.iter().zip(&tm.columns).filter(|(_, c)| c.primary_key).map(|(t, _)| t.name.clone()).collect(),
    };
    Some(TrackedTable {
        database: tm.database.to_string(),
        table: tm.table.to_string(),
        columns,
        primary_key,
        default_charset: None,
        version: 0,
        since: at.to_string(),
        unknown: None,
    })
}

/// `name` as tracked: in lower case when the server compares names case-insensitively.
fn fold_name(fold: bool, name: &str) -> String {
    if fold {
        name.to_lowercase()
    } else {
        name.to_string()
    }
}

/// Type families: which TABLE_MAP types a declared type may appear as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Tiny,
    Short,
    Int24,
    Long,
    LongLong,
    Float,
    Double,
    Decimal,
    Date,
    Time,
    DateTime,
    Timestamp,
    Year,
    Char,
    VarChar,
    Blob,
    Enum,
    Set,
    Bit,
    Json,
    Geometry,
    Vector,
}

fn family(type_name: &str) -> Option<Family> {
    use Family as F;
    Some(match type_name {
        "tinyint" => F::Tiny,
        "smallint" => F::Short,
        "mediumint" => F::Int24,
        "int" => F::Long,
        "bigint" => F::LongLong,
        "float" => F::Float,
        "double" => F::Double,
        "decimal" => F::Decimal,
        "date" => F::Date,
        "time" => F::Time,
        "datetime" => F::DateTime,
        "timestamp" => F::Timestamp,
        "year" => F::Year,
        // MariaDB's UUID and INET6 are fixed-length binary strings in row events
        "char" | "binary" | "uuid" | "inet6" => F::Char,
        "varchar" | "varbinary" => F::VarChar,
        "tinytext" | "text" | "mediumtext" | "longtext" | "tinyblob" | "blob" | "mediumblob" | "longblob" => F::Blob,
        "enum" => F::Enum,
        "set" => F::Set,
        "bit" => F::Bit,
        "json" => F::Json,
        "geometry" | "point" | "linestring" | "polygon" | "multipoint" | "multilinestring" | "multipolygon"
        | "geometrycollection" | "geomcollection" => F::Geometry,
        "vector" => F::Vector,
        _ => return None,
    })
}

/// True when a TABLE_MAP column type can be a column declared as `type_name`.
fn family_matches(ty: ColumnType, type_name: &str) -> bool {
    use ColumnType as T;
    use Family as F;
    let Some(f) = family(type_name) else { return false };
    match f {
        F::Tiny => ty == T::Tiny,
        F::Short => ty == T::Short,
        F::Int24 => ty == T::Int24,
        F::Long => ty == T::Long,
        F::LongLong => ty == T::LongLong,
        F::Float => ty == T::Float,
        F::Double => ty == T::Double,
        F::Decimal => matches!(ty, T::NewDecimal | T::Decimal),
        F::Date => matches!(ty, T::Date | T::NewDate),
        F::Time => matches!(ty, T::Time | T::Time2),
        F::DateTime => matches!(ty, T::DateTime | T::DateTime2),
        F::Timestamp => matches!(ty, T::Timestamp | T::Timestamp2),
        F::Year => ty == T::Year,
        F::Char => ty == T::String,
        F::VarChar => matches!(ty, T::VarChar | T::VarString),
        F::Blob => matches!(ty, T::Blob | T::TinyBlob | T::MediumBlob | T::LongBlob),
        F::Enum => ty == T::Enum,
        F::Set => ty == T::Set,
        F::Bit => ty == T::Bit,
        // MariaDB's JSON is a LONGTEXT
        F::Json => matches!(ty, T::Json | T::Blob | T::LongBlob),
        F::Geometry => ty == T::Geometry,
        F::Vector => matches!(ty, T::Vector | T::VarChar),
    }
}

/// A collation id of `charset` (the first id the charset table maps to it): decoding needs
/// the character set, not the collation.
fn collation_of(charset: &str) -> Option<u16> {
    let want = match charset {
        "utf8" => "utf8mb3",
        c => c,
    };
    if want == "binary" {
        return Some(BINARY_COLLATION);
    }
    (1..=2303u16).find(|&id| charset_of(id).is_some_and(|c| c.name() == want))
}

const WHAT_TO_DO: &str = "set binlog_row_metadata=FULL on the server so TABLE_MAP events carry column names \
     (it applies to binlogs written from then on), or move the checkpoint past this change: stop sluice run, then \
     `sluice position set --config FILE --to current` (it reads the tables' definitions from the server again; the \
     changes in between are not published)";

/// The TABLE_MAP with names and the other missing metadata taken from `tracked`.
fn fill(tm: &TableMap, tracked: Option<&TrackedTable>, at: &str) -> Result<TableMap, String> {
    let name = tm.qualified_name();
    let Some(t) = tracked else {
        return Err(format!(
            "{name} at {at}: the TABLE_MAP carries no column names (binlog_row_metadata is not FULL) and Sluice \
             tracks no schema for the table (it was not captured when the schema was loaded, the replication user \
             cannot see it in information_schema, or it was created by a statement Sluice did not see); {WHAT_TO_DO}"
        ));
    };
    if let Some(why) = &t.unknown {
        return Err(format!(
            "{name} at {at}: the TABLE_MAP carries no column names (binlog_row_metadata is not FULL) and the tracked \
             schema of the table is unknown since {}: {why}; {WHAT_TO_DO}",
            t.since
        ));
    }
    let mismatch = |detail: String| {
        format!(
            "{name} at {at}: the TABLE_MAP does not match the tracked schema (version {}, since {}): {detail}; the \
             column names cannot be trusted, so Sluice stops rather than misalign them; {WHAT_TO_DO}",
            t.version, t.since
        )
    };
    if tm.columns.len() != t.columns.len() {
        return Err(mismatch(format!(
            "the TABLE_MAP has {} columns, the tracked schema {} ({})",
            tm.columns.len(),
            t.columns.len(),
            t.columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
        )));
    }
    let mut out = tm.clone();
    for (i, (c, tc)) in out.columns.iter_mut().zip(&t.columns).enumerate() {
        let col_mismatch = |why: &str| {
            mismatch(format!(
                "column {} (index {i}): the TABLE_MAP type is {} ({}), the tracked column is {} {}{why}",
                i + 1,
                c.ty.name(),
                c.ty.code(),
                tc.name,
                tc.sql_type
            ))
        };
        if !family_matches(c.ty, &tc.type_name) {
            return Err(col_mismatch(""));
        }
        if c.unsigned && !tc.unsigned {
            return Err(col_mismatch(" (the TABLE_MAP says UNSIGNED)"));
        }
        let tracked_binary = tc.charset.as_deref() == Some("binary");
        if let Some(coll) = c.collation {
            if tc.charset.is_some() && (coll == BINARY_COLLATION) != tracked_binary {
                return Err(col_mismatch(" (binary and character string differ)"));
            }
        }
        if c.ty == ColumnType::Set {
            if let Some(v) = &tc.set_values {
                // the server's pack length: one bit per member, 5..=7 bytes round up to 8
                let bytes = v.len().div_ceil(8).max(1);
                if usize::from(c.meta) != if bytes > 4 { 8 } else { bytes } {
                    return Err(col_mismatch(" (the SET member count differs)"));
                }
            }
        }
        if c.ty == ColumnType::Enum {
            if let Some(v) = &tc.enum_values {
                if usize::from(c.meta) != if v.len() > 255 { 2 } else { 1 } {
                    return Err(col_mismatch(" (the ENUM member count differs)"));
                }
            }
        }
        c.name = Some(Arc::from(tc.name.as_str()));
        c.unsigned = c.unsigned || tc.unsigned;
        if c.collation.is_none() {
            c.collation = tc.charset.as_deref().and_then(collation_of);
        }
        if c.enum_values.is_none() {
            c.enum_values = tc.enum_values.as_ref().map(|v| v.iter().map(|s| Arc::from(s.as_str())).collect());
        }
        if c.set_values.is_none() {
            c.set_values = tc.set_values.as_ref().map(|v| v.iter().map(|s| Arc::from(s.as_str())).collect());
        }
    }
    if out.primary_key.is_none() && !t.primary_key.is_empty() {
        let mut pk = Vec::with_capacity(t.primary_key.len());
        for k in &t.primary_key {
            let i = t.column_index(k).ok_or_else(|| mismatch(format!("primary-key column {k} is not a column")))?;
            out.columns[i].primary_key = true;
            pk.push((i, 0));
        }
        out.primary_key = Some(pk);
    }
    Ok(out)
}
