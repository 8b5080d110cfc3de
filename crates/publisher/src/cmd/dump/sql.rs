//! Row changes as SQL statements (`--format sql`) and as the statements that undo them
//! (`--format flashback`).
//!
//! Statements name columns, so a table must carry its column names in the binlog
//! (`binlog_row_metadata=FULL`); without them this module refuses rather than guess.
//! UPDATE and DELETE match the row by its primary key when the TABLE_MAP says which columns
//! form it, else by every column of the image (NULLs with `IS NULL`), with `LIMIT 1` so a
//! table with duplicate rows changes exactly one, as the original statement did per row.

use sluice_binlog::rows::{RowChange, RowImage, RowsKind};
use sluice_binlog::{TableMap, Value};

use crate::render::{ident, value_sql};

/// Why a change cannot become SQL.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// The binlog has no column names for this table.
    #[error(
        "table {0} has no column names in the binlog (the server wrote binlog_row_metadata=MINIMAL, or is older than \
         MySQL 8.0.1 / MariaDB 10.5), so SQL statements cannot name its columns; use --format json, which prints \
         columns as @1..@N, or set binlog_row_metadata=FULL on the server"
    )]
    NoColumnNames(String),
    /// An UPDATE/DELETE image is missing, or matches no column.
    #[error("table {0}: the row image has no columns to identify the row")]
    NoImage(String),
}

fn table_ident(t: &TableMap) -> String {
    format!("{}.{}", ident(&t.database), ident(&t.table))
}

fn col_name(t: &TableMap, i: usize) -> String {
    t.columns.get(i).map(|c| ident(&c.display_name())).unwrap_or_default()
}

fn present<'v, 'a>(t: &'v TableMap, img: &'v RowImage<'a>) -> impl Iterator<Item = (usize, &'v Value<'a>)> + 'v {
    img.values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.as_ref().map(|v| (i, v)))
        .filter(move |(i, _)| *i < t.columns.len())
}

fn insert(t: &TableMap, img: &RowImage<'_>) -> String {
    let (names, vals): (Vec<String>, Vec<String>) = present(t, img)
        .map(|(i, v)| (col_name(t, i), t.columns.get(i).map(|c| value_sql(v, c)).unwrap_or_default()))
        .unzip();
    format!("INSERT INTO {} ({}) VALUES ({});", table_ident(t), names.join(", "), vals.join(", "))
}

fn assignments(t: &TableMap, img: &RowImage<'_>) -> String {
    present(t, img)
        .map(|(i, v)| format!("{}={}", col_name(t, i), t.columns.get(i).map(|c| value_sql(v, c)).unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn where_clause(t: &TableMap, img: &RowImage<'_>) -> Result<String, SqlError> {
    let has_pk = t.columns.iter().any(|c| c.primary_key);
    let key_in_image =
        has_pk && t.columns.iter().filter(|c| c.primary_key).all(|c| matches!(img.values.get(c.index), Some(Some(_))));
    let parts: Vec<String> = present(t, img)
        .filter(|(i, _)| !key_in_image || t.columns.get(*i).is_some_and(|c| c.primary_key))
        .map(|(i, v)| match v {
            Value::Null => format!("{} IS NULL", col_name(t, i)),
            v => format!("{}={}", col_name(t, i), t.columns.get(i).map(|c| value_sql(v, c)).unwrap_or_default()),
        })
        .collect();
    if parts.is_empty() {
        return Err(SqlError::NoImage(t.qualified_name()));
    }
    Ok(parts.join(" AND "))
}

fn check_names(t: &TableMap) -> Result<(), SqlError> {
    if t.has_column_names {
        Ok(())
    } else {
        Err(SqlError::NoColumnNames(t.qualified_name()))
    }
}

/// The statement that re-does a change.
pub fn redo(kind: RowsKind, t: &TableMap, row: &RowChange<'_>) -> Result<String, SqlError> {
    check_names(t)?;
    let none = || SqlError::NoImage(t.qualified_name());
    Ok(match kind {
        RowsKind::Write => insert(t, row.after.as_ref().ok_or_else(none)?),
        RowsKind::Delete => {
            format!(
                "DELETE FROM {} WHERE {} LIMIT 1;",
                table_ident(t),
                where_clause(t, row.before.as_ref().ok_or_else(none)?)?
            )
        }
        RowsKind::Update | RowsKind::PartialUpdate => format!(
            "UPDATE {} SET {} WHERE {} LIMIT 1;",
            table_ident(t),
            assignments(t, row.after.as_ref().ok_or_else(none)?),
            where_clause(t, row.before.as_ref().ok_or_else(none)?)?
        ),
    })
}

/// The statement that undoes a change: INSERT <-> DELETE, UPDATE with images swapped.
pub fn undo(kind: RowsKind, t: &TableMap, row: &RowChange<'_>) -> Result<String, SqlError> {
    check_names(t)?;
    let none = || SqlError::NoImage(t.qualified_name());
    Ok(match kind {
        RowsKind::Write => {
            format!(
                "DELETE FROM {} WHERE {} LIMIT 1;",
                table_ident(t),
                where_clause(t, row.after.as_ref().ok_or_else(none)?)?
            )
        }
        RowsKind::Delete => insert(t, row.before.as_ref().ok_or_else(none)?),
        RowsKind::Update | RowsKind::PartialUpdate => format!(
            "UPDATE {} SET {} WHERE {} LIMIT 1;",
            table_ident(t),
            assignments(t, row.before.as_ref().ok_or_else(none)?),
            where_clause(t, row.after.as_ref().ok_or_else(none)?)?
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_binlog::{Column, ColumnType};
    use std::sync::Arc;

    fn table(names: bool) -> TableMap {
        let mut id = Column::new(0, ColumnType::Long, 0, false);
        id.primary_key = true;
        let mut name = Column::new(1, ColumnType::VarChar, 40, true);
        name.collation = Some(45);
        if names {
            id.name = Some(Arc::from("id"));
            name.name = Some(Arc::from("name"));
        }
        TableMap {
            table_id: 1,
            flags: 0,
            database: Arc::from("shop"),
            table: Arc::from("users"),
            columns: vec![id, name],
            has_column_names: names,
            primary_key: Some(vec![(0, 0)]),
        }
    }

    fn img<'a>(id: i64, name: Option<&'a str>) -> RowImage<'a> {
        RowImage {
            values: vec![
                Some(Value::Int(id)),
                Some(name.map_or(Value::Null, |n| Value::Text { bytes: n.as_bytes(), collation: Some(45) })),
            ],
        }
    }

    #[test]
    fn redo_and_undo() {
        let t = table(true);
        let ins = RowChange { before: None, after: Some(img(1, Some("ann"))) };
        assert_eq!(
            redo(RowsKind::Write, &t, &ins).unwrap(),
            "INSERT INTO `shop`.`users` (`id`, `name`) VALUES (1, 'ann');"
        );
        assert_eq!(undo(RowsKind::Write, &t, &ins).unwrap(), "DELETE FROM `shop`.`users` WHERE `id`=1 LIMIT 1;");
        let upd = RowChange { before: Some(img(1, None)), after: Some(img(1, Some("bo"))) };
        assert_eq!(
            undo(RowsKind::Update, &t, &upd).unwrap(),
            "UPDATE `shop`.`users` SET `id`=1, `name`=NULL WHERE `id`=1 LIMIT 1;"
        );
        let del = RowChange { before: Some(img(2, Some("o'k"))), after: None };
        assert_eq!(
            undo(RowsKind::Delete, &t, &del).unwrap(),
            "INSERT INTO `shop`.`users` (`id`, `name`) VALUES (2, 'o''k');"
        );
    }

    #[test]
    fn no_names_no_sql() {
        let t = table(false);
        let ins = RowChange { before: None, after: Some(img(1, Some("ann"))) };
        let e = undo(RowsKind::Write, &t, &ins).unwrap_err().to_string();
        assert!(e.contains("shop.users") && e.contains("binlog_row_metadata=FULL"), "{e}");
    }
}
