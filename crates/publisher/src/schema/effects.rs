//! What a statement in the binlog does to **rows** without row events: MySQL and MariaDB log
//! `TRUNCATE TABLE`, `DROP TABLE`, `DROP DATABASE` and MariaDB's `CREATE OR REPLACE TABLE` as
//! statements (QUERY events) even under `binlog_format=ROW`, so the rows they remove never
//! appear as deletes. The pipeline turns an emptied table into a truncate record (`op = "t"`),
//! `sluice dump` prints it; a rename or a partition maintenance that removes some rows is named
//! in the log with what to do (a snapshot of the table rebuilds its topic).
//!
//! Read before the statement is applied to the tracked schema (a `DROP DATABASE` empties the
//! tables tracked in it).
//!
//! References: <https://dev.mysql.com/doc/refman/8.4/en/replication-features-truncate.html>,
//! <https://mariadb.com/kb/en/truncate-table/>, <https://mariadb.com/kb/en/create-table/#create-or-replace>.

use sqlparser::ast::{AlterTableOperation, ObjectName, ObjectType, RenameTableNameKind, Statement};
use sqlparser::tokenizer::Token;

use super::ddl::{parse, tokens};
use super::{fold_name, SchemaHistory};

/// What a statement does to the rows of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowEffect {
    /// Every row is gone (`by`: `TRUNCATE TABLE`, `DROP TABLE`, `DROP DATABASE`, `CREATE OR
    /// REPLACE TABLE`).
    Emptied {
        /// Database.
        database: String,
        /// Table.
        table: String,
        /// The statement's kind.
        by: &'static str,
    },
    /// The table's rows now live under another name (`RENAME TABLE`, `ALTER TABLE ... RENAME`):
    /// the old name's topic keeps them, the new name's has none of them.
    Renamed {
        /// Old database and table.
        from: (String, String),
        /// New database and table.
        to: (String, String),
    },
    /// Some rows are gone or moved by partition maintenance (`TRUNCATE`, `DROP` or `EXCHANGE
    /// PARTITION`), which names no rows.
    PartlyRemoved {
        /// Database.
        database: String,
        /// Table.
        table: String,
        /// The maintenance.
        by: &'static str,
    },
}

/// The first word of a statement that may have a row effect.
fn may_affect_rows(sql: &str) -> bool {
    let first: String =
        sql.trim_start().chars().take_while(char::is_ascii_alphabetic).collect::<String>().to_ascii_uppercase();
    // a statement opening with a comment goes to the parser, which skips it
    first.is_empty() || matches!(first.as_str(), "TRUNCATE" | "DROP" | "CREATE" | "RENAME" | "ALTER")
}

impl SchemaHistory {
    /// The row effects of the statement `sql` of a QUERY event whose default database is
    /// `default_db`, on any table (the caller keeps those it captures). A statement that does
    /// not parse has none here (the schema tracking reports it).
    pub fn row_effects(&self, default_db: &str, sql: &str) -> Vec<RowEffect> {
        if !may_affect_rows(sql) {
            return Vec::new();
        }
        let fold = |n: &str| fold_name(self.fold_names, n);
        let resolve = |name: &ObjectName| -> Option<(String, String)> {
            let parts: Vec<&str> = name.0.iter().filter_map(|p| p.as_ident()).map(|i| i.value.as_str()).collect();
            match parts.as_slice() {
                [t] if !default_db.is_empty() => Some((fold(default_db), fold(t))),
                [d, t] => Some((fold(d), fold(t))),
                _ => None,
            }
        };
        let emptied = |(database, table): (String, String), by| RowEffect::Emptied { database, table, by };
        let mut out = Vec::new();
        let Ok(statements) = parse(sql) else {
            out.extend(partition_maintenance(sql, default_db).map(|(d, t, by)| RowEffect::PartlyRemoved {
                database: fold(&d),
                table: fold(&t),
                by,
            }));
            return out;
        };
        for st in &statements {
            match st {
                Statement::Truncate(t) if t.partitions.is_none() => {
                    out.extend(
                        t.table_names.iter().filter_map(|n| resolve(&n.name)).map(|n| emptied(n, "TRUNCATE TABLE")),
                    );
                }
                Statement::Drop { object_type: ObjectType::Table, names, temporary: false, .. } => {
                    out.extend(names.iter().filter_map(resolve).map(|n| emptied(n, "DROP TABLE")));
                }
                Statement::Drop { object_type: ObjectType::Database | ObjectType::Schema, names, .. } => {
                    for n in names {
                        let Some(db) = n.0.last().and_then(|p| p.as_ident()).map(|i| fold(&i.value)) else { continue };
                        let mut tables: Vec<&str> =
                            self.tables.values().filter(|t| t.database == db).map(|t| t.table.as_str()).collect();
                        tables.sort_unstable();
                        out.extend(tables.into_iter().map(|t| emptied((db.clone(), t.to_string()), "DROP DATABASE")));
                    }
                }
                Statement::CreateTable(ct) if ct.or_replace && !ct.temporary => {
                    out.extend(resolve(&ct.name).map(|n| emptied(n, "CREATE OR REPLACE TABLE")));
                }
                Statement::RenameTable(renames) => {
                    for r in renames {
                        if let (Some(from), Some(to)) = (resolve(&r.old_name), resolve(&r.new_name)) {
                            out.push(RowEffect::Renamed { from, to });
                        }
                    }
                }
                Statement::AlterTable(at) => {
                    let Some(from) = resolve(&at.name) else { continue };
                    for op in &at.operations {
                        if let AlterTableOperation::RenameTable {
                            table_name: RenameTableNameKind::As(n) | RenameTableNameKind::To(n),
                        } = op
                        {
                            if let Some(to) = resolve(n) {
                                out.push(RowEffect::Renamed { from: from.clone(), to });
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        out.extend(partition_maintenance(sql, default_db).map(|(d, t, by)| RowEffect::PartlyRemoved {
            database: fold(&d),
            table: fold(&t),
            by,
        }));
        // a rename inside a statement whose other half brings rows back under the old name
        // (`RENAME TABLE t TO t_old, t_new TO t`, as online schema change tools cut over) leaves
        // the name with rows: only the statement's net moves are said
        let targets: Vec<(String, String)> = out
            .iter()
            .filter_map(|e| match e {
                RowEffect::Renamed { to, .. } => Some(to.clone()),
                _ => None,
            })
            .collect();
        out.retain(|e| !matches!(e, RowEffect::Renamed { from, .. } if targets.contains(from)));
        out
    }
}

/// `ALTER TABLE name ... {TRUNCATE | DROP | EXCHANGE} PARTITION ...`: the table and the kind.
fn partition_maintenance(sql: &str, default_db: &str) -> Option<(String, String, &'static str)> {
    let tokens = tokens(sql)?;
    let word = |i: usize| match tokens.get(i) {
        Some(Token::Word(w)) => Some(w.value.to_ascii_uppercase()),
        _ => None,
    };
    if word(0).as_deref() != Some("ALTER") {
        return None;
    }
    let at = (1..4).find(|&i| word(i).as_deref() == Some("TABLE"))?;
    let name = |i: usize| match tokens.get(i) {
        Some(Token::Word(w)) => Some(w.value.clone()),
        _ => None,
    };
    let (db, table, after) = match (name(at + 1), tokens.get(at + 2), name(at + 3)) {
        (Some(d), Some(Token::Period), Some(t)) => (d, t, at + 4),
        (Some(t), _, _) if !default_db.is_empty() => (default_db.to_string(), t, at + 2),
        _ => return None,
    };
    let by = (after..tokens.len()).find_map(|i| match (word(i).as_deref(), word(i + 1).as_deref()) {
        (Some("TRUNCATE"), Some("PARTITION")) => Some("TRUNCATE PARTITION"),
        (Some("DROP"), Some("PARTITION")) => Some("DROP PARTITION"),
        (Some("EXCHANGE"), Some("PARTITION")) => Some("EXCHANGE PARTITION"),
        _ => None,
    })?;
    Some((db, table, by))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::TrackedTable;

    fn history(tables: &[(&str, &str)]) -> SchemaHistory {
        SchemaHistory::new(tables.iter().map(|(d, t)| TrackedTable::without_columns(d, t)).collect(), 1, false)
    }

    fn emptied(d: &str, t: &str, by: &'static str) -> RowEffect {
        RowEffect::Emptied { database: d.into(), table: t.into(), by }
    }

    #[test]
    fn statements_that_empty_tables() {
        let h = history(&[("shop", "a"), ("shop", "b"), ("hr", "c")]);
        assert_eq!(h.row_effects("shop", "TRUNCATE TABLE a"), [emptied("shop", "a", "TRUNCATE TABLE")]);
        assert_eq!(h.row_effects("x", "truncate shop.b"), [emptied("shop", "b", "TRUNCATE TABLE")]);
        assert_eq!(
            h.row_effects("shop", "DROP TABLE `a`,`hr`.`c` /* generated by server */"),
            [emptied("shop", "a", "DROP TABLE"), emptied("hr", "c", "DROP TABLE")]
        );
        assert_eq!(h.row_effects("shop", "DROP TABLE IF EXISTS `gone`"), [emptied("shop", "gone", "DROP TABLE")]);
        assert!(h.row_effects("shop", "DROP TEMPORARY TABLE IF EXISTS `a`").is_empty());
        assert_eq!(
            h.row_effects("", "DROP DATABASE shop"),
            [emptied("shop", "a", "DROP DATABASE"), emptied("shop", "b", "DROP DATABASE")]
        );
        assert_eq!(
            h.row_effects("shop", "CREATE OR REPLACE TABLE a (id INT PRIMARY KEY)"),
            [emptied("shop", "a", "CREATE OR REPLACE TABLE")]
        );
        for none in [
            "CREATE TABLE a (id INT)",
            "INSERT INTO a VALUES (1)",
            "ALTER TABLE a ADD COLUMN x INT",
            "BEGIN",
            "DELETE FROM a",
            "CREATE USER u IDENTIFIED BY 'x'",
        ] {
            assert!(h.row_effects("shop", none).is_empty(), "{none}");
        }
    }

    #[test]
    fn renames_and_partitions() {
        let h = history(&[("shop", "a")]);
        let renamed = |f: (&str, &str), t: (&str, &str)| RowEffect::Renamed {
            from: (f.0.into(), f.1.into()),
            to: (t.0.into(), t.1.into()),
        };
        assert_eq!(h.row_effects("shop", "RENAME TABLE a TO a_old"), [renamed(("shop", "a"), ("shop", "a_old"))]);
        assert_eq!(h.row_effects("shop", "ALTER TABLE a RENAME TO b"), [renamed(("shop", "a"), ("shop", "b"))]);
        // an online schema change's cut-over: `a` keeps a table with rows under its name
        assert_eq!(
            h.row_effects("shop", "RENAME TABLE a TO _a_del, _a_gho TO a"),
            [renamed(("shop", "_a_gho"), ("shop", "a"))]
        );
        let part = |by| RowEffect::PartlyRemoved { database: "shop".into(), table: "p".into(), by };
        assert_eq!(h.row_effects("shop", "ALTER TABLE p TRUNCATE PARTITION p0"), [part("TRUNCATE PARTITION")]);
        assert_eq!(h.row_effects("x", "ALTER TABLE shop.p DROP PARTITION p1, p2"), [part("DROP PARTITION")]);
        assert_eq!(
            h.row_effects("shop", "ALTER TABLE p EXCHANGE PARTITION p0 WITH TABLE q"),
            [part("EXCHANGE PARTITION")]
        );
        assert!(h.row_effects("shop", "ALTER TABLE p ADD PARTITION (PARTITION p9 VALUES LESS THAN (9))").is_empty());
    }
}
