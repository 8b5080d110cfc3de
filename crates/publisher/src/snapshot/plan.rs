//! A table as a snapshot reads it: its definition from `information_schema`, described as the
//! binlog's TABLE_MAP would describe it (so that its rows get the same Avro schemas as its
//! streamed changes), the key it is read in order of, and the SQL of one chunk.
//!
//! The chunk key is the primary key, else the first unique key over NOT NULL columns. A chunk
//! reads the rows after the last key read, in key order:
//!
//! ```sql
//! SELECT `a`, `b`, `e`+0, ... FROM `db`.`t`
//! WHERE (<snapshot.where>) AND (`a` > 5 OR (`a` = 5 AND `b` > _utf8mb4 X'6162'))
//! ORDER BY `a`, `b` LIMIT 10001
//! ```
//!
//! ENUM and SET columns are read as numbers (`+0`: the member index and bit mask, what the
//! binlog carries); key values are written as literals in their own column's character set
//! (`_latin1 X'E9'`), so no conversion can change them, and the expanded `OR` form (not a row
//! comparison) is what both servers turn into a range scan.

use std::sync::Arc;

use sluice_binlog::charset::{charset_of, BINARY_COLLATION};
use sluice_binlog::{Column, ColumnType, TableMap};
use sluice_protocol::Connection;

use super::SnapshotError;
use crate::schema::load::column_from_type_text as ddl_column_from_type_text;

/// How a table is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    /// Chunk by chunk, in order of these columns (indexes into the table's columns).
    Chunked(Vec<usize>),
    /// In one pass, under a consistent snapshot tied to a binlog position (MariaDB's
    /// `START TRANSACTION WITH CONSISTENT SNAPSHOT`): a table without a usable key.
    OnePass,
}

/// One table's reading plan.
#[derive(Debug, Clone)]
pub struct TablePlan {
    /// `db.table`.
    pub name: String,
    /// The definition, as a TABLE_MAP with names would give it.
    pub table_map: Arc<TableMap>,
    /// How it is read.
    pub method: Method,
    /// `SELECT <list> FROM <table>`.
    select: String,
    /// `snapshot.where` for it, if any.
    filter: Option<String>,
    /// The rows the server estimates (`information_schema.TABLES.TABLE_ROWS`).
    pub estimate: Option<u64>,
}

/// `name` quoted as an identifier.
pub fn quote(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// A string literal (for `information_schema` lookups).
fn string_literal(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

impl TablePlan {
    /// A plan for `table_map` read by `method` (tests: a plan is otherwise made from what
    /// the server says of the table).
    #[cfg(test)]
    pub(crate) fn for_test(table_map: Arc<TableMap>, method: Method) -> TablePlan {
        let name = format!("{}.{}", table_map.database, table_map.table);
        TablePlan { name, table_map, method, select: String::new(), filter: None, estimate: None }
    }

    /// The SQL of the chunk after `after` (None: the first), at most `limit` rows.
    pub fn chunk_sql(&self, after: Option<&[String]>, limit: usize) -> String {
        let Method::Chunked(key) = &self.method else { return self.all_sql() };
        let mut conditions = Vec::new();
        if let Some(f) = &self.filter {
            conditions.push(format!("({f})"));
        }
        let names = self.key_names(key);
        if let Some(after) = after {
            // k1 > v1 OR (k1 = v1 AND k2 > v2) OR ...
            let mut ors = Vec::new();
            for n in 0..names.len().min(after.len()) {
                let mut ands: Vec<String> = (0..n).map(|j| format!("{} = {}", names[j], after[j])).collect();
                ands.push(format!("{} > {}", names[n], after[n]));
                ors.push(format!("({})", ands.join(" AND ")));
            }
            conditions.push(format!("({})", ors.join(" OR ")));
        }
        let mut sql = self.select.clone();
        if !conditions.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conditions.join(" AND "));
        }
        sql.push_str(" ORDER BY ");
        sql.push_str(&names.join(", "));
        sql.push_str(&format!(" LIMIT {limit}"));
        sql
    }

    /// The SQL reading the rows of these keys (each the chunk key's values as SQL literals, as
    /// [`super::values::sql_literal`] writes them), in no particular order.
    pub fn keys_sql(&self, keys: &[Vec<String>]) -> String {
        let names = self.key_names(self.key());
        let ors: Vec<String> = keys
            .iter()
            .map(|k| {
                let ands: Vec<String> = names.iter().zip(k).map(|(n, v)| format!("{n} = {v}")).collect();
                format!("({})", ands.join(" AND "))
            })
            .collect();
        let mut sql =
            format!("{} WHERE ({})", self.select, if ors.is_empty() { "FALSE".into() } else { ors.join(" OR ") });
        if let Some(f) = &self.filter {
            sql.push_str(&format!(" AND ({f})"));
        }
        sql
    }

    /// The SQL reading every row (with the configured condition).
    pub fn all_sql(&self) -> String {
        match &self.filter {
            Some(f) => format!("{} WHERE ({f})", self.select),
            None => self.select.clone(),
        }
    }

    /// For a chunk key that starts with an integer column: the SQL of its smallest and
    /// largest value among the rows read, as one text `min max` (None for other keys). A
    /// random value between them starts a random chunk in one index lookup (`verify
    /// --sample`), where an `OFFSET` would walk the index up to it.
    pub fn first_key_bounds_sql(&self) -> Option<String> {
        use sluice_binlog::ColumnType as T;
        let first = self.table_map.columns.get(*self.key().first()?)?;
        if !matches!(first.ty, T::Tiny | T::Short | T::Int24 | T::Long | T::LongLong) {
            return None;
        }
        let name = quote(first.name.as_deref()?);
        let from = self.from();
        let filter = self.filter.as_ref().map(|f| format!(" WHERE ({f})")).unwrap_or_default();
        Some(format!("SELECT CONCAT(MIN({name}), ' ', MAX({name})){from}{filter}"))
    }

    /// The columns `key` names, quoted.
    fn key_names(&self, key: &[usize]) -> Vec<String> {
        key.iter()
            .map(|&i| self.table_map.columns.get(i).and_then(|c| c.name.as_deref()).map(quote).unwrap_or_default())
            .collect()
    }

    /// ` FROM db.table`, as the plan's SELECT reads it.
    fn from(&self) -> String {
        format!(" FROM {}.{}", quote(&self.table_map.database), quote(&self.table_map.table))
    }

    /// The condition of a window of the first key column's values, `from..to`, with the
    /// configured one; and the key's columns quoted. None for a table read in one pass.
    fn window(&self, from: i128, to: i128) -> Option<(String, Vec<String>)> {
        let Method::Chunked(key) = &self.method else { return None };
        let names = self.key_names(key);
        let first = names.first().filter(|n| !n.is_empty())?;
        let mut condition = format!("{first} >= {from} AND {first} < {to}");
        if let Some(f) = &self.filter {
            condition.push_str(&format!(" AND ({f})"));
        }
        Some((condition, names))
    }

    /// The SQL counting the rows of a window of the first key column's values (see
    /// [`TablePlan::window_sql`]).
    pub fn window_count_sql(&self, from: i128, to: i128) -> Option<String> {
        let (condition, _) = self.window(from, to)?;
        Some(format!("SELECT COUNT(*){} WHERE {condition}", self.from()))
    }

    /// For a chunk key that starts with an integer column: the SQL of the rows whose first
    /// key column is in `from..to`, in key order, at most `limit` from the `skip`th on (`verify
    /// --sample`: a window of key values, where the next `limit` rows from a random value would
    /// favour the rows after a gap in the keys).
    pub fn window_sql(&self, from: i128, to: i128, limit: usize, skip: u64) -> Option<String> {
        let (condition, names) = self.window(from, to)?;
        let mut sql = format!("{} WHERE {condition} ORDER BY {} LIMIT {limit}", self.select, names.join(", "));
        if skip > 0 {
            sql.push_str(&format!(" OFFSET {skip}"));
        }
        Some(sql)
    }

    /// The chunk key's column indexes (empty for a one-pass table).
    pub fn key(&self) -> &[usize] {
        match &self.method {
            Method::Chunked(k) => k,
            Method::OnePass => &[],
        }
    }
}

/// Reads `db.table`'s plan from the server; None when the table does not exist (or the user
/// cannot see it).
///
/// # Errors
/// A column type a snapshot cannot read exactly, a table without a usable key on a server
/// without consistent snapshots, or a failing query.
pub async fn load(
    conn: &mut Connection,
    db: &str,
    table: &str,
    filter: Option<&str>,
    key_columns: Option<&[String]>,
    mariadb: bool,
) -> Result<Option<TablePlan>, SnapshotError> {
    let name = format!("{db}.{table}");
    let query_err = |source| SnapshotError::Query { table: name.clone(), during: "reading its definition", source };
    let (d, t) = (string_literal(db), string_literal(table));
    let cols = conn
        .query(&format!(
            "SELECT c.COLUMN_NAME, c.DATA_TYPE, c.COLUMN_TYPE, c.IS_NULLABLE, c.CHARACTER_SET_NAME, co.ID, \
             c.NUMERIC_PRECISION, c.NUMERIC_SCALE, c.DATETIME_PRECISION, c.CHARACTER_OCTET_LENGTH \
             FROM information_schema.COLUMNS c LEFT JOIN information_schema.COLLATIONS co \
             ON co.COLLATION_NAME = c.COLLATION_NAME \
             WHERE c.TABLE_SCHEMA = {d} AND c.TABLE_NAME = {t} ORDER BY c.ORDINAL_POSITION"
        ))
        .await
        .map_err(query_err)?
        .to_strings();
    if cols.is_empty() {
        return Ok(None);
    }
    let mut columns = Vec::with_capacity(cols.len());
    let mut data_types = Vec::with_capacity(cols.len());
    for (i, row) in cols.iter().enumerate() {
        let get = |j: usize| row.get(j).cloned().flatten();
        let num = |j: usize| get(j).and_then(|v| v.parse::<u64>().ok());
        let col_name = get(0).unwrap_or_default();
        let data_type = get(1).unwrap_or_default().to_ascii_lowercase();
        let column_type = get(2).unwrap_or_default();
        let unsupported =
            |why: String| SnapshotError::Unsupported { table: name.clone(), column: col_name.clone(), why };
        let spec = ColumnSpec {
            data_type: &data_type,
            column_type: &column_type,
            charset: get(4),
            collation: num(5).and_then(|c| u16::try_from(c).ok()),
            precision: num(6),
            scale: num(7),
            fsp: num(8),
            octets: num(9),
        };
        let mut c = spec.column(i).map_err(unsupported)?;
        c.name = Some(Arc::from(col_name.as_str()));
        c.nullable = get(3).as_deref() == Some("YES");
        columns.push(c);
        data_types.push(data_type);
    }
    let keys = conn
        .query(&format!(
            "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS \
             WHERE TABLE_SCHEMA = {d} AND TABLE_NAME = {t} ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX"
        ))
        .await
        .map_err(query_err)?
        .to_strings();
    // indexes in order: PRIMARY first, then by name; each a list of column indexes
    let mut indexes: Vec<(String, bool, Vec<usize>)> = Vec::new();
    for row in keys {
        let get = |j: usize| row.get(j).cloned().flatten().unwrap_or_default();
        let (index, unique, column) = (get(0), get(1) == "0", get(2));
        let Some(ci) = columns.iter().position(|c| c.name.as_deref().is_some_and(|n| n.eq_ignore_ascii_case(&column)))
        else {
            continue; // an index over an expression (MySQL 8 functional index)
        };
        match indexes.last_mut() {
            Some((n, _, cols)) if *n == index => cols.push(ci),
            _ => indexes.push((index, unique, vec![ci])),
        }
    }
    let primary: Option<Vec<usize>> = indexes.iter().find(|(n, _, _)| n == "PRIMARY").map(|(_, _, c)| c.clone());
    if let Some(pk) = &primary {
        for &i in pk {
            if let Some(c) = columns.get_mut(i) {
                c.primary_key = true;
            }
        }
    }
    let orderable =
        |i: usize| columns.get(i).is_some_and(orderable) && data_types.get(i).is_some_and(|t| exact_data_type(t));
    let chunk_key = primary.clone().or_else(|| {
        indexes
            .iter()
            .find(|(_, unique, cols)| *unique && cols.iter().all(|&i| columns.get(i).is_some_and(|c| !c.nullable)))
            .map(|(_, _, c)| c.clone())
    });
    // a table without such a key: the key columns the records use ([output.key_columns]), once
    // they are seen to identify a row
    let chunk_key = match (chunk_key, key_columns) {
        (None, Some(names)) => {
            let cols = configured_key(&name, names, &columns, &orderable)?;
            let list: Vec<String> =
                cols.iter().map(|&i| quote(columns[i].name.as_deref().unwrap_or_default())).collect();
            let repeated = conn
                .query(&format!(
                    "SELECT 1 FROM {}.{} GROUP BY {} HAVING COUNT(*) > 1 LIMIT 1",
                    quote(db),
                    quote(table),
                    list.join(", ")
                ))
                .await
                .map_err(query_err)?;
            if repeated.get_str(0, 0).is_some() {
                return Err(SnapshotError::BadKeyColumns {
                    table: name,
                    why: format!("({}), whose values repeat: they do not identify a row", names.join(", ")),
                });
            }
            Some(cols)
        }
        (k, _) => k,
    };
    let method = match chunk_key {
        Some(k) if k.iter().all(|&i| orderable(i)) => Method::Chunked(k),
        _ if mariadb => Method::OnePass,
        Some(_) => {
            return Err(SnapshotError::NoKey {
                table: name,
                why: "its key includes a FLOAT or DOUBLE column, whose values cannot be compared exactly",
            })
        }
        None => {
            return Err(SnapshotError::NoKey {
                table: name,
                why: "it has no primary key and no unique key over NOT NULL columns",
            })
        }
    };
    let estimate = conn
        .query(&format!(
            "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = {d} AND TABLE_NAME = {t}"
        ))
        .await
        .map_err(query_err)?
        .get_str(0, 0)
        .and_then(|v| v.parse().ok());
    let list: Vec<String> =
        columns.iter().zip(&data_types).map(|(c, t)| selected(c.name.as_deref().unwrap_or_default(), c, t)).collect();
    let select = format!("SELECT {} FROM {}.{}", list.join(", "), quote(db), quote(table));
    let table_map = TableMap {
        table_id: 0,
        flags: 0,
        database: Arc::from(db),
        table: Arc::from(table),
        columns,
        has_column_names: true,
        primary_key: primary.map(|pk| pk.into_iter().map(|i| (i, 0)).collect()),
    };
    Ok(Some(TablePlan {
        name,
        table_map: Arc::new(table_map),
        method,
        select,
        filter: filter.map(str::to_string),
        estimate,
    }))
}

/// The columns `[output.key_columns]` names for the table, as column indexes: each must exist,
/// be NOT NULL and compare exactly (chunks page by them).
fn configured_key(
    table: &str,
    names: &[String],
    columns: &[Column],
    orderable: &impl Fn(usize) -> bool,
) -> Result<Vec<usize>, SnapshotError> {
    let bad = |why: String| SnapshotError::BadKeyColumns { table: table.to_string(), why };
    names
        .iter()
        .map(|n| {
            let i = columns
                .iter()
                .position(|c| c.name.as_deref().is_some_and(|c| c.eq_ignore_ascii_case(n)))
                .ok_or_else(|| bad(format!("{n}, a column the table does not have")))?;
            if columns[i].nullable {
                return Err(bad(format!("{n}, which may be NULL")));
            }
            if !orderable(i) {
                return Err(bad(format!("{n}, whose type cannot be compared exactly (FLOAT, DOUBLE, UUID, INET)")));
            }
            Ok(i)
        })
        .collect()
}

/// The select-list expression of column `name` (`c`, of `information_schema` type
/// `data_type`): what the binlog carries for it. ENUM and SET as their index and bit mask
/// (`+0`); MariaDB's UUID, INET6 and INET4 as their binary form (`CAST(.. AS BINARY(n))`, the
/// bytes the binlog holds, where selecting them would give their text).
fn selected(name: &str, c: &Column, data_type: &str) -> String {
    let q = quote(name);
    match data_type {
        "uuid" | "inet6" => format!("CAST({q} AS BINARY(16))"),
        "inet4" => format!("CAST({q} AS BINARY(4))"),
        _ if matches!(c.ty, ColumnType::Enum | ColumnType::Set) => format!("{q}+0"),
        _ => q,
    }
}

/// True when values of an `information_schema` DATA_TYPE compare exactly in SQL, as a chunk
/// key column's must: not FLOAT, DOUBLE, JSON, VECTOR or a geometry, nor MariaDB's UUID and
/// INET types, which it orders by its own rule, not by their bytes. (`sluice check` asks it of
/// `[output.key_columns]`.)
pub fn exact_data_type(data_type: &str) -> bool {
    !matches!(
        data_type,
        "float"
            | "double"
            | "json"
            | "vector"
            | "uuid"
            | "inet4"
            | "inet6"
            | "geometry"
            | "point"
            | "linestring"
            | "polygon"
            | "multipoint"
            | "multilinestring"
            | "multipolygon"
            | "geometrycollection"
    )
}

/// True when values of `c` compare exactly in SQL (a chunk key column).
fn orderable(c: &Column) -> bool {
    !matches!(
        c.ty,
        ColumnType::Float | ColumnType::Double | ColumnType::Json | ColumnType::Geometry | ColumnType::Vector
    )
}

/// One row of `information_schema.COLUMNS`, as needed to describe the column.
struct ColumnSpec<'a> {
    data_type: &'a str,
    column_type: &'a str,
    charset: Option<String>,
    collation: Option<u16>,
    precision: Option<u64>,
    scale: Option<u64>,
    fsp: Option<u64>,
    octets: Option<u64>,
}

impl ColumnSpec<'_> {
    /// The column as a TABLE_MAP describes it: the binlog type, its metadata word, the
    /// collation, UNSIGNED, ENUM and SET members.
    fn column(&self, index: usize) -> Result<Column, String> {
        use ColumnType as T;
        let small = |v: Option<u64>| v.and_then(|v| u16::try_from(v).ok()).unwrap_or(0);
        let octets = small(self.octets);
        let (ty, meta, binary) = match self.data_type {
            "tinyint" => (T::Tiny, 0, false),
            "smallint" => (T::Short, 0, false),
            "mediumint" => (T::Int24, 0, false),
            "int" | "integer" => (T::Long, 0, false),
            "bigint" => (T::LongLong, 0, false),
            "float" => (T::Float, 4, false),
            "double" | "real" | "double precision" => (T::Double, 8, false),
            "decimal" | "numeric" => (T::NewDecimal, (small(self.precision) << 8) | small(self.scale), false),
            "date" => (T::Date, 0, false),
            "time" => (T::Time2, small(self.fsp), false),
            "datetime" => (T::DateTime2, small(self.fsp), false),
            "timestamp" => (T::Timestamp2, small(self.fsp), false),
            "year" => (T::Year, 0, false),
            "char" => (T::String, octets, false),
            "binary" => (T::String, octets, true),
            "varchar" => (T::VarChar, octets, false),
            "varbinary" => (T::VarChar, octets, true),
            "tinytext" => (T::Blob, 1, false),
            "text" => (T::Blob, 2, false),
            "mediumtext" => (T::Blob, 3, false),
            "longtext" => (T::Blob, 4, false),
            "tinyblob" => (T::Blob, 1, true),
            "blob" => (T::Blob, 2, true),
            "mediumblob" => (T::Blob, 3, true),
            "longblob" => (T::Blob, 4, true),
            "json" => (T::Json, 4, false),
            "enum" => (T::Enum, 0, false),
            "set" => (T::Set, 0, false),
            "bit" => {
                let bits = small(self.precision);
                (T::Bit, ((bits / 8) << 8) | (bits % 8), false)
            }
            "geometry" | "point" | "linestring" | "polygon" | "multipoint" | "multilinestring" | "multipolygon"
            | "geometrycollection" | "geomcollection" => (T::Geometry, 4, true),
            // MariaDB's UUID, INET6 and INET4 are fixed binary strings in the binlog; the select
            // list reads them as such (see `selected`)
            "uuid" | "inet6" => (T::String, 16, true),
            "inet4" => (T::String, 4, true),
            "vector" => (T::Vector, 4, true),
            other => {
                return Err(format!(
                    "type {other} ({}) cannot be read exactly by a snapshot yet; leave the column out \
                     (filter.exclude_columns) or the table (snapshot.exclude)",
                    self.column_type
                ))
            }
        };
        let mut c = Column::new(index, if matches!(ty, T::Enum | T::Set) { T::String } else { ty }, meta, true);
        c.ty = ty;
        c.unsigned = self.column_type.to_ascii_lowercase().contains("unsigned");
        let character = matches!(ty, T::String | T::VarChar | T::Blob | T::Enum | T::Set);
        c.collation = if binary {
            Some(BINARY_COLLATION)
        } else if character {
            // the collation's id; without one (not reported), the charset's default
            self.collation.or_else(|| self.charset.as_deref().and_then(collation_of_charset))
        } else {
            None
        };
        if matches!(ty, T::Enum | T::Set) {
            let parsed = ddl_column_from_type_text("c", self.column_type, self.charset.as_deref())?;
            let members = |v: Option<Vec<String>>| v.map(|v| v.iter().map(|s| Arc::from(s.as_str())).collect());
            if ty == T::Enum {
                c.enum_values = members(parsed.enum_values);
                let n = c.enum_values.as_ref().map_or(0, |v: &Arc<[Arc<str>]>| v.len());
                c.meta = if n > 255 { 2 } else { 1 };
            } else {
                c.set_values = members(parsed.set_values);
                let n = c.set_values.as_ref().map_or(0, |v: &Arc<[Arc<str>]>| v.len());
                let bytes = n.div_ceil(8).max(1);
                c.meta = u16::try_from(if bytes > 4 { 8 } else { bytes }).unwrap_or(8);
            }
        }
        Ok(c)
    }
}

/// The first collation id of `charset` (for a server that did not name the collation).
fn collation_of_charset(charset: &str) -> Option<u16> {
    let want = if charset == "utf8" { "utf8mb3" } else { charset };
    (1..=2303u16).find(|&id| charset_of(id).is_some_and(|c| c.name() == want))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(key: Vec<usize>, filter: Option<&str>) -> TablePlan {
        let col = |i: usize, n: &str| {
            let mut c = Column::new(i, ColumnType::Long, 0, false);
            c.name = Some(Arc::from(n));
            c
        };
        TablePlan {
            name: "db.t".into(),
            table_map: Arc::new(TableMap {
                table_id: 0,
                flags: 0,
                database: Arc::from("db"),
                table: Arc::from("t"),
                columns: vec![col(0, "a"), col(1, "b`x"), col(2, "v")],
                has_column_names: true,
                primary_key: None,
            }),
            method: Method::Chunked(key),
            select: "SELECT `a`, `b``x`, `v` FROM `db`.`t`".into(),
            filter: filter.map(str::to_string),
            estimate: None,
        }
    }

    #[test]
    fn chunk_sql_reads_after_the_last_key() {
        let p = plan(vec![0, 1], None);
        assert_eq!(p.chunk_sql(None, 101), "SELECT `a`, `b``x`, `v` FROM `db`.`t` ORDER BY `a`, `b``x` LIMIT 101");
        assert_eq!(
            p.chunk_sql(Some(&["5".into(), "_utf8mb4 X'6162'".into()]), 11),
            "SELECT `a`, `b``x`, `v` FROM `db`.`t` WHERE ((`a` > 5) OR (`a` = 5 AND `b``x` > _utf8mb4 X'6162')) \
             ORDER BY `a`, `b``x` LIMIT 11"
        );
        let p = plan(vec![0], Some("v > 3"));
        assert_eq!(
            p.chunk_sql(Some(&["7".into()]), 2),
            "SELECT `a`, `b``x`, `v` FROM `db`.`t` WHERE (v > 3) AND ((`a` > 7)) ORDER BY `a` LIMIT 2"
        );
        assert_eq!(p.all_sql(), "SELECT `a`, `b``x`, `v` FROM `db`.`t` WHERE (v > 3)");
    }

    #[test]
    fn information_schema_types_become_table_map_columns() {
        let spec = |data_type: &'static str, column_type: &'static str| ColumnSpec {
            data_type,
            column_type,
            charset: Some("utf8mb4".into()),
            collation: Some(45),
            precision: None,
            scale: None,
            fsp: None,
            octets: Some(40),
        };
        let c = ColumnSpec { precision: Some(10), scale: Some(2), ..spec("decimal", "decimal(10,2) unsigned") }
            .column(0)
            .unwrap();
        assert_eq!((c.ty, c.meta, c.unsigned, c.collation), (ColumnType::NewDecimal, 0x0a02, true, None));
        let c = ColumnSpec { precision: Some(10), ..spec("bit", "bit(10)") }.column(0).unwrap();
        assert_eq!((c.ty, c.meta), (ColumnType::Bit, 0x0102));
        let c = ColumnSpec { fsp: Some(6), ..spec("datetime", "datetime(6)") }.column(0).unwrap();
        assert_eq!((c.ty, c.meta), (ColumnType::DateTime2, 6));
        let c = spec("varchar", "varchar(10)").column(0).unwrap();
        assert_eq!((c.ty, c.meta, c.collation), (ColumnType::VarChar, 40, Some(45)));
        let c = spec("varbinary", "varbinary(40)").column(0).unwrap();
        assert_eq!(c.collation, Some(BINARY_COLLATION));
        let c = spec("longtext", "longtext").column(0).unwrap();
        assert_eq!((c.ty, c.meta), (ColumnType::Blob, 4));
        let c = spec("enum", "enum('a','b''c')").column(0).unwrap();
        assert_eq!((c.ty, c.wire_type, c.meta), (ColumnType::Enum, ColumnType::String, 1));
        assert_eq!(c.enum_values.as_deref().unwrap().iter().map(|s| s.as_ref()).collect::<Vec<_>>(), ["a", "b'c"]);
        let c = spec("set", "set('a','b','c','d','e','f','g','h','i')").column(0).unwrap();
        assert_eq!((c.ty, c.meta), (ColumnType::Set, 2));
        let c = spec("uuid", "uuid").column(0).unwrap();
        assert_eq!((c.ty, c.meta, c.collation), (ColumnType::String, 16, Some(BINARY_COLLATION)));
        assert_eq!(selected("u", &c, "uuid"), "CAST(`u` AS BINARY(16))");
        let e = spec("xml", "xml").column(0).unwrap_err();
        assert!(e.contains("type xml (xml) cannot be read exactly"), "{e}");
    }
}
