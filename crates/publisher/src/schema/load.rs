//! The tracked schema's initial state: the captured tables' definitions as the server's
//! `information_schema` gives them (TABLES, COLUMNS, STATISTICS for the primary key), read on the
//! source's connection at the moment the start position is taken, each column's type text
//! parsed by the same code as DDL.

use std::collections::BTreeMap;

use sqlparser::ast::Statement;

use super::ddl::{charset_of_collation_name, column_from_def, parse};
use super::{Captured, TrackedColumn, TrackedTable};

/// Reads the definitions of the captured tables from the server's `information_schema`.
///
/// # Errors
/// Server errors (a missing privilege on the tables shows as missing tables, not an error).
pub async fn load_from_server(
    conn: &mut sluice_protocol::Connection,
    captured: Captured<'_>,
) -> sluice_protocol::Result<Vec<TrackedTable>> {
    const SYSTEM: &str = "('mysql','information_schema','performance_schema','sys')";
    let tables = conn
        .query(&format!(
            "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_COLLATION FROM information_schema.TABLES \
             WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN {SYSTEM}"
        ))
        .await?
        .to_strings();
    let mut out: BTreeMap<(String, String), TrackedTable> = BTreeMap::new();
    for row in tables {
        let (Some(Some(db)), Some(Some(table))) = (row.first(), row.get(1)) else { continue };
        if !captured.captures(db, table) {
            continue;
        }
        let default_charset = row.get(2).cloned().flatten().map(|c| charset_of_collation_name(&c));
        out.insert(
            (db.clone(), table.clone()),
            TrackedTable {
                database: db.clone(),
                table: table.clone(),
                columns: Vec::new(),
                primary_key: Vec::new(),
                default_charset,
                version: 1,
                since: "server".into(),
                unknown: None,
            },
        );
    }
    let cols = conn
        .query(&format!(
            "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME \
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA NOT IN {SYSTEM} \
             ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION"
        ))
        .await?
        .to_strings();
    for row in cols {
        let get = |i: usize| row.get(i).cloned().flatten();
        let (Some(db), Some(table), Some(name), Some(ty)) = (get(0), get(1), get(2), get(3)) else { continue };
        let Some(t) = out.get_mut(&(db, table)) else { continue };
        if t.unknown.is_some() {
            continue;
        }
        let charset = get(5);
        match column_from_type_text(&name, &ty, charset.as_deref()) {
            Ok(mut c) => {
                c.nullable = get(4).as_deref() == Some("YES");
                t.columns.push(c);
            }
            Err(e) => {
                t.unknown = Some(format!("the server's definition of column {name} ({ty}) is not understood: {e}"));
                t.columns.clear();
            }
        }
    }
    let pks = conn
        .query(&format!(
            "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.STATISTICS \
             WHERE INDEX_NAME = 'PRIMARY' AND TABLE_SCHEMA NOT IN {SYSTEM} \
             ORDER BY TABLE_SCHEMA, TABLE_NAME, SEQ_IN_INDEX"
        ))
        .await?
        .to_strings();
    for row in pks {
        let get = |i: usize| row.get(i).cloned().flatten();
        let (Some(db), Some(table), Some(name)) = (get(0), get(1), get(2)) else { continue };
        if let Some(t) = out.get_mut(&(db, table)) {
            t.primary_key.push(name);
        }
    }
    Ok(out.into_values().collect())
}

/// A tracked column from `information_schema.COLUMNS.COLUMN_TYPE` (`int(10) unsigned`,
/// `enum('a','b')`, ...), parsed by the same code as DDL.
pub fn column_from_type_text(name: &str, column_type: &str, charset: Option<&str>) -> Result<TrackedColumn, String> {
    // ZEROFILL implies UNSIGNED, which COLUMN_TYPE also says
    let ty = column_type.replace(" zerofill", "");
    let sql = format!("CREATE TABLE t (c {ty})");
    let st = parse(&sql).map_err(|e| e.to_string())?;
    let Some(Statement::CreateTable(ct)) = st.first() else { return Err("not a column type".into()) };
    let def = ct.columns.first().ok_or("no column")?;
    let (mut c, _) = column_from_def(def, charset)?;
    c.name = name.to_string();
    if c.charset.is_none() && charset.is_some() {
        c.charset = charset.map(str::to_ascii_lowercase);
    }
    Ok(c)
}
