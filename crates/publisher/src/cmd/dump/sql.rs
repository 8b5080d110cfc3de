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

use crate::render::{ident, write_value_sql};

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
    /// An image lacks columns, so the change cannot be undone.
    #[error(
        "table {table}: the {image} image lacks {missing} (the server wrote it with binlog_row_image=MINIMAL or \
         NOBLOB), so the change cannot be undone: the old values are not in the binlog, or the row cannot be found by \
         what is left without risking another. A flashback needs binlog_row_image=FULL (or FULL_NODUP) when the \
         change is written; --format json shows what each image holds"
    )]
    PartialImage { table: String, image: &'static str, missing: String },
}

/// True when `img` holds column `i` (SQL NULL included).
fn holds(img: &RowImage<'_>, i: usize) -> bool {
    matches!(img.values.get(i), Some(Some(_)))
}

/// True when the table has a primary key and `img` holds all of it.
fn holds_key(t: &TableMap, img: &RowImage<'_>) -> bool {
    t.columns.iter().any(|c| c.primary_key) && t.columns.iter().filter(|c| c.primary_key).all(|c| holds(img, c.index))
}

/// A flashback needs the old value of every column it restores and a way to find the row:
/// a MINIMAL before image holds only the key (the other old values are lost), NOBLOB leaves
/// out BLOB and TEXT columns. Undone from such images, a DELETE came back with NULLs and an
/// UPDATE was matched by its changed columns (a hostile trial), so such changes are refused;
/// what can be undone exactly still is (an INSERT by its key, an UPDATE whose before image
/// holds every column its after image changed, as FULL_NODUP writes them).
fn whole(t: &TableMap, img: &RowImage<'_>, image: &'static str) -> Result<(), SqlError> {
    lacking(t, image, t.columns.iter().filter(|c| !holds(img, c.index)))
}

/// The refusal naming the first of `absent` (none: nothing lacks).
fn lacking<'c>(
    t: &TableMap,
    image: &'static str,
    mut absent: impl Iterator<Item = &'c sluice_binlog::Column>,
) -> Result<(), SqlError> {
    let Some(first) = absent.next() else { return Ok(()) };
    let missing = match absent.count() {
        0 => format!("column {}", ident(&first.display_name())),
        n => format!("column {} and {n} more", ident(&first.display_name())),
    };
    Err(SqlError::PartialImage { table: t.qualified_name(), image, missing })
}

fn write_table(out: &mut Vec<u8>, t: &TableMap) {
    out.extend_from_slice(ident(&t.database).as_bytes());
    out.push(b'.');
    out.extend_from_slice(ident(&t.table).as_bytes());
}

fn write_col_name(out: &mut Vec<u8>, t: &TableMap, i: usize) {
    if let Some(c) = t.columns.get(i) {
        out.extend_from_slice(ident(&c.display_name()).as_bytes());
    }
}

fn write_value(out: &mut Vec<u8>, t: &TableMap, i: usize, v: &Value<'_>) {
    if let Some(c) = t.columns.get(i) {
        write_value_sql(out, v, c);
    }
}

fn present<'v, 'a>(t: &'v TableMap, img: &'v RowImage<'a>) -> impl Iterator<Item = (usize, &'v Value<'a>)> + 'v {
    img.values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.as_ref().map(|v| (i, v)))
        .filter(move |(i, _)| *i < t.columns.len())
}

/// Appends `items` with `sep` between them, each written by `each`.
fn write_list<T>(out: &mut Vec<u8>, items: impl Iterator<Item = T>, sep: &[u8], mut each: impl FnMut(&mut Vec<u8>, T)) {
    for (n, item) in items.enumerate() {
        if n > 0 {
            out.extend_from_slice(sep);
        }
        each(out, item);
    }
}

fn insert(out: &mut Vec<u8>, t: &TableMap, img: &RowImage<'_>) {
    out.extend_from_slice(b"INSERT INTO ");
    write_table(out, t);
    out.extend_from_slice(b" (");
    write_list(out, present(t, img), b", ", |out, (i, _)| write_col_name(out, t, i));
    out.extend_from_slice(b") VALUES (");
    write_list(out, present(t, img), b", ", |out, (i, v)| write_value(out, t, i, v));
    out.extend_from_slice(b");");
}

fn assignments(out: &mut Vec<u8>, t: &TableMap, img: &RowImage<'_>) {
    write_list(out, present(t, img), b", ", |out, (i, v)| {
        write_col_name(out, t, i);
        out.push(b'=');
        write_value(out, t, i, v);
    });
}

fn where_clause(out: &mut Vec<u8>, t: &TableMap, img: &RowImage<'_>) -> Result<(), SqlError> {
    let has_pk = t.columns.iter().any(|c| c.primary_key);
    let key_in_image =
        has_pk && t.columns.iter().filter(|c| c.primary_key).all(|c| matches!(img.values.get(c.index), Some(Some(_))));
    let mut parts =
        present(t, img).filter(|(i, _)| !key_in_image || t.columns.get(*i).is_some_and(|c| c.primary_key)).peekable();
    if parts.peek().is_none() {
        return Err(SqlError::NoImage(t.qualified_name()));
    }
    write_list(out, parts, b" AND ", |out, (i, v)| {
        write_col_name(out, t, i);
        match v {
            Value::Null => out.extend_from_slice(b" IS NULL"),
            v => {
                out.push(b'=');
                write_value(out, t, i, v);
            }
        }
    });
    Ok(())
}

fn check_names(t: &TableMap) -> Result<(), SqlError> {
    if t.has_column_names {
        Ok(())
    } else {
        Err(SqlError::NoColumnNames(t.qualified_name()))
    }
}

fn delete(out: &mut Vec<u8>, t: &TableMap, img: &RowImage<'_>) -> Result<(), SqlError> {
    out.extend_from_slice(b"DELETE FROM ");
    write_table(out, t);
    out.extend_from_slice(b" WHERE ");
    where_clause(out, t, img)?;
    out.extend_from_slice(b" LIMIT 1;");
    Ok(())
}

fn update(out: &mut Vec<u8>, t: &TableMap, set: &RowImage<'_>, matching: &RowImage<'_>) -> Result<(), SqlError> {
    out.extend_from_slice(b"UPDATE ");
    write_table(out, t);
    out.extend_from_slice(b" SET ");
    assignments(out, t, set);
    out.extend_from_slice(b" WHERE ");
    where_clause(out, t, matching)?;
    out.extend_from_slice(b" LIMIT 1;");
    Ok(())
}

/// Appends the statement that re-does a change to `out` (a statement is written where it is
/// held: a huge value is not copied from string to string on its way).
///
/// # Errors
/// The binlog has no column names, or an image is missing.
pub fn redo(out: &mut Vec<u8>, kind: RowsKind, t: &TableMap, row: &RowChange<'_>) -> Result<(), SqlError> {
    check_names(t)?;
    let none = || SqlError::NoImage(t.qualified_name());
    match kind {
        RowsKind::Write => insert(out, t, row.after.as_ref().ok_or_else(none)?),
        RowsKind::Delete => delete(out, t, row.before.as_ref().ok_or_else(none)?)?,
        RowsKind::Update | RowsKind::PartialUpdate => {
            update(out, t, row.after.as_ref().ok_or_else(none)?, row.before.as_ref().ok_or_else(none)?)?
        }
    }
    Ok(())
}

/// Appends the statement that undoes a change: INSERT <-> DELETE, UPDATE with images swapped.
///
/// # Errors
/// As [`redo`].
pub fn undo(out: &mut Vec<u8>, kind: RowsKind, t: &TableMap, row: &RowChange<'_>) -> Result<(), SqlError> {
    check_names(t)?;
    let none = || SqlError::NoImage(t.qualified_name());
    let image =
        |img: &Option<RowImage<'_>>, which| -> Result<(), SqlError> { whole(t, img.as_ref().ok_or_else(none)?, which) };
    match kind {
        RowsKind::Write => {
            // deleted again by its key, or by every column when the image lacks the key
            let after = row.after.as_ref().ok_or_else(none)?;
            if !holds_key(t, after) {
                image(&row.after, "after")?;
            }
            delete(out, t, after)?
        }
        RowsKind::Delete => {
            image(&row.before, "before")?;
            insert(out, t, row.before.as_ref().ok_or_else(none)?)
        }
        RowsKind::Update | RowsKind::PartialUpdate => {
            let (before, after) = (row.before.as_ref().ok_or_else(none)?, row.after.as_ref().ok_or_else(none)?);
            // every column the change set needs its old value back
            lacking(t, "before", t.columns.iter().filter(|c| holds(after, c.index) && !holds(before, c.index)))?;
            // the row as it is now: the after image over the before image (a column the after
            // image leaves out did not change), found by its key, or by every column
            let len = before.values.len().max(after.values.len());
            let now = RowImage {
                values: (0..len)
                    .map(|i| after.values.get(i).cloned().flatten().or_else(|| before.values.get(i).cloned().flatten()))
                    .collect(),
            };
            if !holds_key(t, &now) {
                whole(t, &now, "after")?;
            }
            update(out, t, before, &now)?
        }
    }
    Ok(())
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

    fn redo(kind: RowsKind, t: &TableMap, row: &RowChange<'_>) -> Result<String, SqlError> {
        let mut out = Vec::new();
        super::redo(&mut out, kind, t, row)?;
        Ok(String::from_utf8(out).unwrap())
    }

    fn undo(kind: RowsKind, t: &TableMap, row: &RowChange<'_>) -> Result<String, SqlError> {
        let mut out = Vec::new();
        super::undo(&mut out, kind, t, row)?;
        Ok(String::from_utf8(out).unwrap())
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

    /// MINIMAL and NOBLOB images leave columns out: SQL re-does such changes (the key finds
    /// the row, the after image sets what changed), but a flashback would restore NULLs and
    /// match an UPDATE's row by its changed columns, so it refuses, naming table and column.
    #[test]
    fn partial_images_are_redone_but_not_undone() {
        let t = table(true);
        let key_only = RowImage { values: vec![Some(Value::Int(1)), None] };
        let name_only = RowImage { values: vec![None, Some(Value::Text { bytes: b"bo", collation: Some(45) })] };
        let upd = RowChange { before: Some(key_only.clone()), after: Some(name_only) };
        assert_eq!(
            redo(RowsKind::Update, &t, &upd).unwrap(),
            "UPDATE `shop`.`users` SET `name`='bo' WHERE `id`=1 LIMIT 1;"
        );
        let e = undo(RowsKind::Update, &t, &upd).unwrap_err().to_string();
        assert!(
            e.contains("shop.users: the before image lacks column `name`") && e.contains("binlog_row_image=FULL"),
            "{e}"
        );
        let del = RowChange { before: Some(key_only.clone()), after: None };
        assert_eq!(redo(RowsKind::Delete, &t, &del).unwrap(), "DELETE FROM `shop`.`users` WHERE `id`=1 LIMIT 1;");
        assert!(matches!(undo(RowsKind::Delete, &t, &del), Err(SqlError::PartialImage { image: "before", .. })));
        // an INSERT whose image lacks columns is deleted again by its key; one without the key
        // is refused
        let ins = RowChange { before: None, after: Some(key_only) };
        assert_eq!(undo(RowsKind::Write, &t, &ins).unwrap(), "DELETE FROM `shop`.`users` WHERE `id`=1 LIMIT 1;");
        let no_key = RowImage { values: vec![None, Some(Value::Null)] };
        let ins = RowChange { before: None, after: Some(no_key) };
        assert!(matches!(undo(RowsKind::Write, &t, &ins), Err(SqlError::PartialImage { image: "after", .. })));
        // FULL_NODUP: a whole before image, the after image only what changed: undone exactly,
        // the row found by its unchanged key
        let changed = RowImage { values: vec![None, Some(Value::Text { bytes: b"bo", collation: Some(45) })] };
        let upd = RowChange { before: Some(img(1, None)), after: Some(changed) };
        assert_eq!(
            undo(RowsKind::Update, &t, &upd).unwrap(),
            "UPDATE `shop`.`users` SET `id`=1, `name`=NULL WHERE `id`=1 LIMIT 1;"
        );
        // whole images, NULLs included, are undone
        let upd = RowChange { before: Some(img(1, None)), after: Some(img(1, Some("bo"))) };
        assert!(undo(RowsKind::Update, &t, &upd).is_ok());
    }

    #[test]
    fn no_names_no_sql() {
        let t = table(false);
        let ins = RowChange { before: None, after: Some(img(1, Some("ann"))) };
        let e = undo(RowsKind::Write, &t, &ins).unwrap_err().to_string();
        assert!(e.contains("shop.users") && e.contains("binlog_row_metadata=FULL"), "{e}");
    }
}
