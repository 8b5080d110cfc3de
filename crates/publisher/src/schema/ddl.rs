//! DDL in the binlog, applied to the tracked schema: each QUERY event's statement parsed with
//! sqlparser's MySQL dialect (what it lacks rewritten into what it parses first), then CREATE
//! TABLE, ALTER TABLE, RENAME TABLE, DROP TABLE and DROP DATABASE applied. A statement on a
//! captured table that cannot be parsed or applied marks the table unknown, never a guess.
//!
//! References: ALTER TABLE syntax (<https://dev.mysql.com/doc/refman/8.4/en/alter-table.html>,
//! <https://mariadb.com/kb/en/alter-table/>), sqlparser's AST (<https://docs.rs/sqlparser>).

use std::collections::BTreeSet;

use sluice_binlog::charset::charset_of;
use sqlparser::ast::{
    AlterColumnOperation, AlterTableOperation, ColumnDef, ColumnOption, CreateTableLikeKind, CreateTableOptions,
    DataType, EnumMember, Expr, MySQLColumnPosition, ObjectName, ObjectType, RenameTableNameKind, SqlOption, Statement,
    TableConstraint,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer};

use super::{family, fold_name, Captured, SchemaHistory, TrackedColumn, TrackedTable};

mod text;
pub(super) use text::*;

impl SchemaHistory {
    /// Applies the statement of a QUERY event. `default_db` is the event's default database,
    /// `database_charset` the `collation_database` it logged (the charset of tables created
    /// without one), `at` the event's `file:position`. Returns the tables whose definition
    /// changed.
    pub fn apply_query(
        &mut self,
        default_db: &str,
        sql: &str,
        database_collation: Option<u16>,
        at: &str,
        captured: Captured<'_>,
    ) -> Vec<String> {
        if !looks_like_ddl(sql) {
            return Vec::new();
        }
        // MySQL 8.0.21+ logs an atomic CREATE TABLE ... SELECT as `CREATE TABLE t (...) START
        // TRANSACTION`, followed by the rows and a COMMIT
        let sql = strip_start_transaction(sql);
        let db_charset = database_collation.and_then(charset_of).map(|c| c.name().to_string());
        let default_db = self.fold(default_db);
        let default_db = default_db.as_str();
        let ctx = Ctx { default_db, db_charset: db_charset.as_deref(), at, sql, captured, fold: self.fold_names };
        let before: BTreeSet<String> = self.dirty.clone();
        self.dirty.clear();
        let version = self.version + 1;
        // what sqlparser lacks but can be said in what it has (`ALTER ONLINE TABLE`,
        // `ADD COLUMN (a INT, b INT)`, `PARTITION BY`, ...) gets a second try, rewritten
        let parsed = parse(sql).or_else(|e| rewrite_for_parser(sql).and_then(|s| parse(&s).ok()).ok_or(e));
        match parsed {
            Ok(statements) => {
                for st in &statements {
                    if let Err(why) = self.apply_statement(st, &ctx, version) {
                        self.mark_mentioned_unknown(&ctx, &format!("{why}; statement: {}", shown(sql)), version);
                    }
                }
            }
            Err(e) => match options_only_alter(sql, default_db, ctx.db_charset) {
                // ENGINE=, COMMENT=, FORCE, RENAME INDEX, partition maintenance, ...: the parser
                // lacks them, the columns stay; CONVERT TO CHARACTER SET changes their charsets
                Some(OptionsAlter { db, table, charset, convert_to }) => {
                    let key = format!("{}.{}", self.fold(&db), self.fold(&table));
                    if let Some(t) = self.tables.get(&key).filter(|t| t.unknown.is_none()) {
                        let mut t = t.clone();
                        if let Some(cs) = &convert_to {
                            t.convert_to(cs);
                        }
                        if let Some(cs) = charset.or(convert_to) {
                            t.default_charset = Some(cs);
                            self.put(t, at, version);
                        }
                    }
                }
                None => {
                    let why = format!("Sluice cannot parse this DDL statement ({e}): {}", shown(sql));
                    self.mark_mentioned_unknown(&ctx, &why, version);
                }
            },
        }
        let changed: Vec<String> = self.dirty.iter().cloned().collect();
        if !changed.is_empty() {
            self.version = version;
            tracing::info!(tables = %changed.join(", "), version, at, "The tracked schema changed");
        }
        self.dirty.extend(before);
        changed
    }

    /// After a statement that could not be applied: marks unknown every tracked table it
    /// names, and a captured table named right after `TABLE` (a new one).
    fn mark_mentioned_unknown(&mut self, ctx: &Ctx<'_>, why: &str, version: u64) {
        for (db, table, after_table) in mentioned_tables(ctx.sql, ctx.default_db) {
            let (db, table) = (self.fold(&db), self.fold(&table));
            let key = format!("{db}.{table}");
            if self.tables.contains_key(&key) || (after_table && ctx.captured.captures(&db, &table)) {
                self.mark_unknown(&db, &table, why.to_string(), ctx.at, version);
            }
        }
    }

    fn apply_statement(&mut self, st: &Statement, ctx: &Ctx<'_>, version: u64) -> Result<(), String> {
        match st {
            Statement::CreateTable(ct) => {
                if ct.temporary {
                    return Ok(()); // temporary tables are never in row events
                }
                let (db, table) = ctx.resolve(&ct.name)?;
                if !ctx.captured.captures(&db, &table) {
                    return Ok(());
                }
                if self.tables.get(&format!("{db}.{table}")).is_some_and(|t| t.unknown.is_none()) && ct.if_not_exists {
                    return Ok(());
                }
                if let Some(like) = &ct.like {
                    let name = match like {
                        CreateTableLikeKind::Parenthesized(l) | CreateTableLikeKind::Plain(l) => &l.name,
                    };
                    let (sdb, stable) = ctx.resolve(name)?;
                    let Some(src) = self.tables.get(&format!("{sdb}.{stable}")).filter(|t| t.unknown.is_none()) else {
                        return Err(format!(
                            "CREATE TABLE {db}.{table} LIKE {sdb}.{stable}: the definition of {sdb}.{stable} is not \
                             tracked (it is not captured, or unknown)"
                        ));
                    };
                    let t = TrackedTable { database: db, table, ..src.clone() };
                    self.put(t, ctx.at, version);
                    return Ok(());
                }
                if ct.query.is_some() && ct.columns.is_empty() {
                    return Err("CREATE TABLE ... SELECT without column definitions".into());
                }
                let default_charset = table_charset(&ct.table_options).or_else(|| ctx.db_charset.map(str::to_string));
                let mut t = TrackedTable {
                    database: db,
                    table,
                    columns: Vec::new(),
                    primary_key: Vec::new(),
                    default_charset,
                    version,
                    since: ctx.at.to_string(),
                    unknown: None,
                };
                for c in &ct.columns {
                    let (col, pk) = column_from_def(c, t.default_charset.as_deref())?;
                    if pk {
                        t.primary_key = vec![col.name.clone()];
                    }
                    t.columns.push(col);
                }
                for con in &ct.constraints {
                    if let Some(pk) = primary_key_of(con) {
                        t.primary_key = pk;
                    }
                }
                for pk in &t.primary_key {
                    if let Some(i) = t.column_index(pk) {
                        t.columns[i].nullable = false;
                    }
                }
                self.put(t, ctx.at, version);
                Ok(())
            }
            Statement::AlterTable(at) => {
                let (db, table) = ctx.resolve(&at.name)?;
                let key = format!("{db}.{table}");
                if !ctx.captured.captures(&db, &table) && !self.tables.contains_key(&key) {
                    return Ok(());
                }
                let Some(mut t) = self.tables.get(&key).cloned() else {
                    return Err(format!("ALTER TABLE of {key}, whose definition is not tracked"));
                };
                if let Some(why) = &t.unknown {
                    // still unknown: keep the first reason
                    let why = why.clone();
                    self.mark_unknown(&db, &table, why, ctx.at, version);
                    return Ok(());
                }
                let mut rename_to = None;
                for op in &at.operations {
                    if let Some(new) = alter(&mut t, op, ctx)? {
                        rename_to = Some(new);
                    }
                }
                match rename_to {
                    Some((ndb, ntable)) => self.rename(&key, &ndb, &ntable, t, ctx, version),
                    None => self.put(t, ctx.at, version),
                }
                Ok(())
            }
            Statement::RenameTable(renames) => {
                for r in renames {
                    let (db, table) = ctx.resolve(&r.old_name)?;
                    let (ndb, ntable) = ctx.resolve(&r.new_name)?;
                    let key = format!("{db}.{table}");
                    match self.tables.get(&key).cloned() {
                        Some(t) => self.rename(&key, &ndb, &ntable, t, ctx, version),
                        None if ctx.captured.captures(&ndb, &ntable) => self.mark_unknown(
                            &ndb,
                            &ntable,
                            format!("renamed from {key}, whose definition is not tracked; statement: {}", ctx.sql),
                            ctx.at,
                            version,
                        ),
                        None => {}
                    }
                }
                Ok(())
            }
            Statement::Drop { object_type: ObjectType::Table, names, temporary, .. } => {
                if *temporary {
                    return Ok(());
                }
                for n in names {
                    let (db, table) = ctx.resolve(n)?;
                    self.remove(&format!("{db}.{table}"));
                }
                Ok(())
            }
            Statement::Drop { object_type: ObjectType::Database | ObjectType::Schema, names, .. } => {
                for n in names {
                    let db = ctx.fold(&last_ident(n)?);
                    let gone: Vec<String> =
                        self.tables.values().filter(|t| t.database == db).map(TrackedTable::key).collect();
                    for k in gone {
                        self.remove(&k);
                    }
                }
                Ok(())
            }
            // TRUNCATE, CREATE INDEX, views, routines, grants, ...: no column changes
            _ => Ok(()),
        }
    }

    /// Moves `t` (the definition of `old_key`, already altered) to `ndb.ntable`.
    fn rename(&mut self, old_key: &str, ndb: &str, ntable: &str, mut t: TrackedTable, ctx: &Ctx<'_>, version: u64) {
        self.remove(old_key);
        if ctx.captured.captures(ndb, ntable) {
            t.database = ndb.to_string();
            t.table = ntable.to_string();
            self.put(t, ctx.at, version);
        }
    }
}

/// What the statement's names resolve against.
struct Ctx<'a> {
    default_db: &'a str,
    db_charset: Option<&'a str>,
    at: &'a str,
    sql: &'a str,
    captured: Captured<'a>,
    /// Names compare case-insensitively ([`SchemaHistory::set_lower_case_table_names`]).
    fold: bool,
}

impl Ctx<'_> {
    /// A database or table name as tracked.
    fn fold(&self, name: &str) -> String {
        fold_name(self.fold, name)
    }

    /// `(db, table)` of a table name, qualified or not.
    fn resolve(&self, name: &ObjectName) -> Result<(String, String), String> {
        let parts: Vec<&str> = name.0.iter().filter_map(|p| p.as_ident()).map(|i| i.value.as_str()).collect();
        match parts.as_slice() {
            [t] if !self.default_db.is_empty() => Ok((self.default_db.to_string(), self.fold(t))),
            [t] => Err(format!("table {t} is not qualified and the statement has no default database")),
            [d, t] => Ok((self.fold(d), self.fold(t))),
            _ => Err(format!("unexpected table name {name}")),
        }
    }
}

fn last_ident(name: &ObjectName) -> Result<String, String> {
    name.0.last().and_then(|p| p.as_ident()).map(|i| i.value.clone()).ok_or_else(|| format!("unexpected name {name}"))
}

/// A statement as messages and the schema history quote it: a FEDERATED or CONNECT table's
/// `CONNECTION='mysql://user:password@host/...'` with the password masked.
fn shown(sql: &str) -> String {
    crate::config::redact_url(sql)
}

/// Every `db.table` a statement may name (for statements that did not parse): each word,
/// qualified by the default database, and each `a.b`; true when it follows `TABLE` (or
/// `TABLE IF NOT EXISTS`).
fn mentioned_tables(sql: &str, default_db: &str) -> Vec<(String, String, bool)> {
    let words: Vec<(String, bool)> = match Tokenizer::new(&MySqlDialect {}, sql).tokenize() {
        Ok(tokens) => {
            let mut out = Vec::new();
            for t in tokens.into_iter().filter(|t| !matches!(t, Token::Whitespace(_))) {
                match t {
                    Token::Word(w) => {
                        let keyword = w.quote_style.is_none();
                        out.push((w.value, keyword));
                    }
                    Token::Period => out.push((".".into(), false)),
                    _ => out.push((String::new(), false)),
                }
            }
            out
        }
        // the tokenizer failed too: plain words
        Err(_) => sql
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$' || c == '.'))
            .flat_map(|w| {
                let parts: Vec<(String, bool)> = w.split('.').map(|p| (p.to_string(), true)).collect();
                let mut v = Vec::new();
                for (i, p) in parts.into_iter().enumerate() {
                    if i > 0 {
                        v.push((".".to_string(), false));
                    }
                    v.push(p);
                }
                v
            })
            .collect(),
    };
    let mut out = Vec::new();
    let kw = |i: usize, k: &str| words.get(i).is_some_and(|(w, bare)| *bare && w.eq_ignore_ascii_case(k));
    for (i, (w, _)) in words.iter().enumerate() {
        if w.is_empty() || w == "." {
            continue;
        }
        let after_table =
            i >= 1 && (kw(i - 1, "TABLE") || (i >= 4 && kw(i - 1, "EXISTS") && kw(i - 3, "IF") && kw(i - 4, "TABLE")));
        if words.get(i + 1).is_some_and(|(p, _)| p == ".") {
            if let Some((t, _)) = words.get(i + 2).filter(|(t, _)| !t.is_empty() && t != ".") {
                out.push((w.clone(), t.clone(), after_table));
            }
            continue;
        }
        if i >= 1 && words.get(i - 1).is_some_and(|(p, _)| p == ".") {
            continue; // the table part of a qualified name
        }
        if !default_db.is_empty() {
            out.push((default_db.to_string(), w.clone(), after_table));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The table default charset from CREATE TABLE options (`DEFAULT CHARSET=x`, `COLLATE=y`).
fn table_charset(opts: &CreateTableOptions) -> Option<String> {
    let list = match opts {
        CreateTableOptions::Plain(v)
        | CreateTableOptions::With(v)
        | CreateTableOptions::Options(v)
        | CreateTableOptions::TableProperties(v) => v,
        CreateTableOptions::None => return None,
    };
    let mut charset = None;
    let mut collation = None;
    for o in list {
        if let SqlOption::KeyValue { key, value } = o {
            let k = key.to_string().to_ascii_uppercase();
            let v = unquote(&value.to_string());
            if k.contains("CHARSET") || k.contains("CHARACTER SET") {
                charset = Some(v.to_ascii_lowercase());
            } else if k.contains("COLLATE") {
                collation = Some(charset_of_collation_name(&v));
            }
        }
    }
    charset.or(collation)
}

fn unquote(s: &str) -> String {
    s.trim_matches(|c| c == '\'' || c == '"' || c == '`').to_string()
}

/// `utf8mb4_general_ci` → `utf8mb4`.
pub(super) fn charset_of_collation_name(c: &str) -> String {
    let c = c.to_ascii_lowercase();
    if c == "binary" {
        return c;
    }
    c.split('_').next().unwrap_or(&c).to_string()
}

/// Applies one ALTER TABLE operation; returns the new name for RENAME TO.
fn alter(t: &mut TrackedTable, op: &AlterTableOperation, ctx: &Ctx<'_>) -> Result<Option<(String, String)>, String> {
    use AlterTableOperation as A;
    let missing = |c: &str| format!("column {c} is not in the tracked definition of {}.{}", t.database, t.table);
    match op {
        A::AddColumn { column_def, column_position, if_not_exists, .. } => {
            if *if_not_exists && t.column_index(&column_def.name.value).is_some() {
                return Ok(None);
            }
            let (col, pk) = column_from_def(column_def, t.default_charset.as_deref())?;
            let name = col.name.clone();
            insert_at(t, col, column_position.as_ref())?;
            if pk {
                t.primary_key = vec![name];
            }
        }
        A::DropColumn { column_names, if_exists, .. } => {
            for c in column_names {
                match t.column_index(&c.value) {
                    Some(i) => {
                        t.columns.remove(i);
                        t.primary_key.retain(|k| !k.eq_ignore_ascii_case(&c.value));
                    }
                    None if *if_exists => {}
                    None => return Err(missing(&c.value)),
                }
            }
        }
        A::ModifyColumn { col_name, data_type, options, column_position } => {
            let i = t.column_index(&col_name.value).ok_or_else(|| missing(&col_name.value))?;
            let def = ColumnDef { name: col_name.clone(), data_type: data_type.clone(), options: wrap(options) };
            let (col, pk) = column_from_def(&def, t.default_charset.as_deref())?;
            t.columns.remove(i);
            let name = col.name.clone();
            reinsert(t, col, i, column_position.as_ref())?;
            if pk {
                t.primary_key = vec![name];
            }
        }
        A::ChangeColumn { old_name, new_name, data_type, options, column_position } => {
            let i = t.column_index(&old_name.value).ok_or_else(|| missing(&old_name.value))?;
            let def = ColumnDef { name: new_name.clone(), data_type: data_type.clone(), options: wrap(options) };
            let (col, pk) = column_from_def(&def, t.default_charset.as_deref())?;
            t.columns.remove(i);
            for k in &mut t.primary_key {
                if k.eq_ignore_ascii_case(&old_name.value) {
                    k.clone_from(&new_name.value);
                }
            }
            let name = col.name.clone();
            reinsert(t, col, i, column_position.as_ref())?;
            if pk {
                t.primary_key = vec![name];
            }
        }
        A::RenameColumn { old_column_name, new_column_name } => {
            let i = t.column_index(&old_column_name.value).ok_or_else(|| missing(&old_column_name.value))?;
            t.columns[i].name.clone_from(&new_column_name.value);
            for k in &mut t.primary_key {
                if k.eq_ignore_ascii_case(&old_column_name.value) {
                    k.clone_from(&new_column_name.value);
                }
            }
        }
        A::AddConstraint { constraint, .. } => {
            if let Some(pk) = primary_key_of(constraint) {
                for c in &pk {
                    let i = t.column_index(c).ok_or_else(|| missing(c))?;
                    t.columns[i].nullable = false;
                }
                t.primary_key = pk;
            }
        }
        A::DropPrimaryKey { .. } => t.primary_key.clear(),
        A::DropConstraint { name, .. } if name.value.eq_ignore_ascii_case("PRIMARY") => t.primary_key.clear(),
        A::RenameTable { table_name } => {
            let n = match table_name {
                RenameTableNameKind::As(n) | RenameTableNameKind::To(n) => n,
            };
            return ctx.resolve(n).map(Some);
        }
        A::AlterColumn { column_name, op } => {
            let i = t.column_index(&column_name.value).ok_or_else(|| missing(&column_name.value))?;
            match op {
                AlterColumnOperation::SetDefault { .. } | AlterColumnOperation::DropDefault => {}
                AlterColumnOperation::SetNotNull => t.columns[i].nullable = false,
                AlterColumnOperation::DropNotNull => t.columns[i].nullable = true,
                other => return Err(format!("unsupported ALTER COLUMN operation {other}")),
            }
        }
        // indexes, foreign keys, checks and table options that leave the columns alone
        A::DropConstraint { .. }
        | A::DropForeignKey { .. }
        | A::DropIndex { .. }
        | A::RenameConstraint { .. }
        | A::Algorithm { .. }
        | A::Lock { .. }
        | A::AutoIncrement { .. }
        | A::AddPartitions { .. }
        | A::DropPartitions { .. }
        | A::RenamePartitions { .. } => {}
        other => {
            let text = other.to_string();
            return Err(format!("unsupported ALTER TABLE operation {text}"));
        }
    }
    Ok(None)
}

fn wrap(options: &[ColumnOption]) -> Vec<sqlparser::ast::ColumnOptionDef> {
    options.iter().map(|o| sqlparser::ast::ColumnOptionDef { name: None, option: o.clone() }).collect()
}

fn insert_at(t: &mut TrackedTable, col: TrackedColumn, pos: Option<&MySQLColumnPosition>) -> Result<(), String> {
    if t.column_index(&col.name).is_some() {
        return Err(format!("column {} already exists in {}.{}", col.name, t.database, t.table));
    }
    match pos {
        None => t.columns.push(col),
        Some(MySQLColumnPosition::First) => t.columns.insert(0, col),
        Some(MySQLColumnPosition::After(a)) => {
            let i = t
                .column_index(&a.value)
                .ok_or_else(|| format!("AFTER {}: no such column in {}.{}", a.value, t.database, t.table))?;
            t.columns.insert(i + 1, col);
        }
    }
    Ok(())
}

/// Puts a modified column back at `i`, or where its position clause says.
fn reinsert(
    t: &mut TrackedTable,
    col: TrackedColumn,
    i: usize,
    pos: Option<&MySQLColumnPosition>,
) -> Result<(), String> {
    if pos.is_none() {
        if t.column_index(&col.name).is_some() {
            return Err(format!("column {} already exists in {}.{}", col.name, t.database, t.table));
        }
        t.columns.insert(i, col);
        return Ok(());
    }
    insert_at(t, col, pos)
}

/// The primary-key column names of a table constraint.
fn primary_key_of(c: &TableConstraint) -> Option<Vec<String>> {
    match c {
        TableConstraint::PrimaryKey(pk) => Some(
            pk.columns
                .iter()
                .map(|ic| match &ic.column.expr {
                    Expr::Identifier(i) => i.value.clone(),
                    // a prefix key `name(10)` parses as a function call
                    Expr::Function(f) => f.name.to_string().trim_matches('`').to_string(),
                    other => other.to_string().trim_matches('`').to_string(),
                })
                .collect(),
        ),
        _ => None,
    }
}

/// A tracked column from a column definition; true when it is declared PRIMARY KEY.
pub(super) fn column_from_def(def: &ColumnDef, table_charset: Option<&str>) -> Result<(TrackedColumn, bool), String> {
    let sql_type = def.data_type.to_string();
    let lower = sql_type.to_ascii_lowercase();
    let words: Vec<&str> = lower.split(|c: char| c == '(' || c.is_whitespace()).filter(|w| !w.is_empty()).collect();
    let mut type_name = match words.as_slice() {
        ["double", "precision", ..] => "double".to_string(),
        ["character", "varying", ..] | ["char", "varying", ..] => "varchar".to_string(),
        ["national", "char", ..] | ["nchar", ..] | ["character", ..] => "char".to_string(),
        ["national", "varchar", ..] | ["nvarchar", ..] => "varchar".to_string(),
        ["long", "varchar", ..] => "mediumtext".to_string(),
        [w, ..] => (*w).to_string(),
        [] => return Err(format!("column {}: empty type", def.name.value)),
    };
    let mut unsigned = words.contains(&"unsigned") || words.contains(&"zerofill");
    // synonyms, as the server stores them
    type_name = match type_name.as_str() {
        "integer" | "int4" => "int".into(),
        "bool" | "boolean" | "int1" => "tinyint".into(),
        "int2" => "smallint".into(),
        "int3" | "middleint" => "mediumint".into(),
        "int8" => "bigint".into(),
        "real" | "float8" => "double".into(),
        "float4" => "float".into(),
        "dec" | "numeric" | "fixed" => "decimal".into(),
        "serial" => {
            unsigned = true;
            "bigint".into()
        }
        "float" => {
            // FLOAT(p) with p > 24 is a DOUBLE
            let p = first_number(&lower);
            if p.is_some_and(|p| p > 24) && !lower.contains(',') {
                "double".into()
            } else {
                "float".into()
            }
        }
        other => other.to_string(),
    };
    let (enum_values, set_values) = match &def.data_type {
        DataType::Enum(members, _) => (
            Some(
                members
                    .iter()
                    .map(|m| match m {
                        EnumMember::Name(n) | EnumMember::NamedValue(n, _) => n.clone(),
                    })
                    .collect(),
            ),
            None,
        ),
        DataType::Set(v) => (None, Some(v.clone())),
        _ => (None, None),
    };
    if family(&type_name).is_none() {
        return Err(format!("column {}: unsupported type {sql_type}", def.name.value));
    }
    let mut nullable = true;
    let mut pk = false;
    let mut charset = None;
    for o in &def.options {
        match &o.option {
            ColumnOption::NotNull => nullable = false,
            ColumnOption::Null => nullable = true,
            ColumnOption::PrimaryKey(_) => {
                pk = true;
                nullable = false;
            }
            ColumnOption::CharacterSet(n) => charset = Some(unquote(&n.to_string()).to_ascii_lowercase()),
            ColumnOption::Collation(n) if charset.is_none() => {
                charset = Some(charset_of_collation_name(&unquote(&n.to_string())));
            }
            _ => {}
        }
    }
    let binary_type =
        matches!(type_name.as_str(), "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob");
    let character_type = matches!(
        type_name.as_str(),
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "enum" | "set"
    );
    // NATIONAL CHAR, NCHAR, NVARCHAR: the national character set, utf8mb3 on MySQL and MariaDB
    let national = matches!(words.first(), Some(&("national" | "nchar" | "nvarchar")));
    let charset = if binary_type {
        Some("binary".to_string())
    } else if character_type && national {
        charset.or_else(|| Some("utf8mb3".to_string()))
    } else if character_type {
        charset.or_else(|| table_charset.map(str::to_string))
    } else {
        None
    };
    let col = TrackedColumn {
        name: def.name.value.clone(),
        sql_type,
        type_name,
        unsigned,
        charset,
        enum_values,
        set_values,
        nullable,
    };
    Ok((col, pk))
}

fn first_number(s: &str) -> Option<u32> {
    let start = s.find('(')? + 1;
    let digits: String = s[start..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}
