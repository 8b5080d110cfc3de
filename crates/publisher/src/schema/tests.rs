//! The DDL applier over MySQL and MariaDB statements, and the TABLE_MAP fill and mismatch
//! checks.

use super::ddl::*;
use super::load::*;
use super::*;
use sluice_binlog::column::Column;

fn all(_: &str, _: &str) -> bool {
    true
}

fn shop_only(db: &str, _: &str) -> bool {
    db == "shop"
}

/// Applies statements in order (default database `shop`, utf8mb4 database charset).
fn history(statements: &[&str]) -> SchemaHistory {
    let mut h = SchemaHistory::default();
    for (i, s) in statements.iter().enumerate() {
        h.apply_query("shop", s, Some(45), &format!("bin.000001:{}", 100 + i), &shop_only);
    }
    h
}

fn names(h: &SchemaHistory, t: &str) -> Vec<String> {
    h.get(t).unwrap_or_else(|| panic!("{t} not tracked")).columns.iter().map(|c| c.name.clone()).collect()
}

fn col<'a>(h: &'a SchemaHistory, t: &str, c: &str) -> &'a TrackedColumn {
    h.get(t).unwrap().columns.iter().find(|x| x.name == c).unwrap()
}

#[test]
fn create_table_columns_types_and_key() {
    let h = history(&["CREATE TABLE `orders` (
        `id` int(11) NOT NULL AUTO_INCREMENT,
        `amount` DECIMAL(10,2) UNSIGNED NOT NULL DEFAULT '0.00' COMMENT 'money',
        `status` ENUM('new','paid','sent') CHARACTER SET latin1 DEFAULT 'new',
        `flags` SET('a','b') NULL,
        `note` varchar(50) COLLATE utf8mb4_bin,
        `raw` VARBINARY(16),
        `big` BIGINT UNSIGNED,
        `ts` TIMESTAMP(3) NULL,
        PRIMARY KEY (`id`),
        KEY `st` (`status`)
    ) ENGINE=InnoDB DEFAULT CHARSET=latin1"]);
    assert_eq!(names(&h, "shop.orders"), ["id", "amount", "status", "flags", "note", "raw", "big", "ts"]);
    let t = h.get("shop.orders").unwrap();
    assert_eq!(t.primary_key, ["id"]);
    assert_eq!(t.default_charset.as_deref(), Some("latin1"));
    assert_eq!(t.since, "bin.000001:100");
    assert_eq!(h.version(), 1);
    let amount = col(&h, "shop.orders", "amount");
    assert_eq!((amount.type_name.as_str(), amount.unsigned, amount.nullable), ("decimal", true, false));
    let status = col(&h, "shop.orders", "status");
    assert_eq!(status.enum_values.as_deref().unwrap(), ["new", "paid", "sent"]);
    assert_eq!(status.charset.as_deref(), Some("latin1"));
    assert_eq!(col(&h, "shop.orders", "flags").set_values.as_deref().unwrap(), ["a", "b"]);
    assert_eq!(col(&h, "shop.orders", "note").charset.as_deref(), Some("utf8mb4"));
    assert_eq!(col(&h, "shop.orders", "raw").charset.as_deref(), Some("binary"));
    assert!(col(&h, "shop.orders", "big").unsigned);
    assert_eq!(col(&h, "shop.orders", "ts").type_name, "timestamp");
    assert!(!col(&h, "shop.orders", "id").nullable);
}

#[test]
fn create_table_inline_key_qualified_names_and_database_charset() {
    let h = history(&[
        "CREATE TABLE shop.a (id BIGINT PRIMARY KEY, t TEXT, d DOUBLE PRECISION, f FLOAT(30), b BOOL, n NUMERIC(5))",
        "CREATE TABLE IF NOT EXISTS `crm`.`x` (id INT)", // not captured
        "CREATE TEMPORARY TABLE shop.tmp (id INT)",
    ]);
    assert_eq!(h.get("shop.a").unwrap().primary_key, ["id"]);
    let types: Vec<&str> = h.get("shop.a").unwrap().columns.iter().map(|c| c.type_name.as_str()).collect();
    assert_eq!(types, ["bigint", "text", "double", "double", "tinyint", "decimal"]);
    // no table charset: the database's (collation 45 = utf8mb4_general_ci)
    assert_eq!(col(&h, "shop.a", "t").charset.as_deref(), Some("utf8mb4"));
    assert!(h.get("crm.x").is_none());
    assert!(h.get("shop.tmp").is_none());
}

#[test]
fn alter_add_after_first_multiple_specs() {
    let h = history(&[
        "CREATE TABLE t (id INT PRIMARY KEY, b INT)",
        "ALTER TABLE t ADD COLUMN a VARCHAR(10) AFTER id",
        "ALTER TABLE `shop`.`t` ADD z INT FIRST, ADD COLUMN c DATETIME(6) NOT NULL, DROP COLUMN b",
    ]);
    assert_eq!(names(&h, "shop.t"), ["z", "id", "a", "c"]);
    assert_eq!(h.version(), 3);
    assert_eq!(h.get("shop.t").unwrap().version, 3);
    assert_eq!(h.get("shop.t").unwrap().since, "bin.000001:102");
}

#[test]
fn alter_modify_change_rename_column() {
    let h = history(&[
        "CREATE TABLE t (id INT NOT NULL, name VARCHAR(10), qty SMALLINT, PRIMARY KEY (id))",
        "ALTER TABLE t MODIFY COLUMN qty INT UNSIGNED NOT NULL",
        "ALTER TABLE t CHANGE name full_name VARCHAR(100) CHARACTER SET utf8mb3 AFTER qty",
        "ALTER TABLE t RENAME COLUMN qty TO quantity",
        "ALTER TABLE t CHANGE COLUMN id ident BIGINT NOT NULL",
    ]);
    assert_eq!(names(&h, "shop.t"), ["ident", "quantity", "full_name"]);
    let q = col(&h, "shop.t", "quantity");
    assert_eq!((q.type_name.as_str(), q.unsigned, q.nullable), ("int", true, false));
    assert_eq!(col(&h, "shop.t", "full_name").charset.as_deref(), Some("utf8mb3"));
    assert_eq!(h.get("shop.t").unwrap().primary_key, ["ident"]);
}

#[test]
fn alter_primary_keys_and_harmless_operations() {
    let h = history(&[
        "CREATE TABLE t (a INT, b INT, c INT)",
        "ALTER TABLE t ADD PRIMARY KEY (b, a)",
        "ALTER TABLE t ADD INDEX ic (c), ALGORITHM=INPLACE, LOCK=NONE",
        "ALTER TABLE t ALTER COLUMN c SET DEFAULT 5",
    ]);
    assert_eq!(h.get("shop.t").unwrap().primary_key, ["b", "a"]);
    assert_eq!(names(&h, "shop.t"), ["a", "b", "c"]);
    let h2 = history(&[
        "CREATE TABLE t (a INT, b INT, c INT)",
        "ALTER TABLE t ADD PRIMARY KEY (b, a)",
        "ALTER TABLE t DROP PRIMARY KEY",
    ]);
    assert!(h2.get("shop.t").unwrap().primary_key.is_empty());
    assert!(h2.get("shop.t").unwrap().unknown.is_none());
}

#[test]
fn renames_drops_and_truncate() {
    let h = history(&[
        "CREATE TABLE a (id INT)",
        "CREATE TABLE c (id INT, x INT)",
        "RENAME TABLE a TO b, c TO d",
        "ALTER TABLE d RENAME TO shop.e",
        "TRUNCATE TABLE b",
    ]);
    assert!(h.get("shop.a").is_none() && h.get("shop.c").is_none() && h.get("shop.d").is_none());
    assert_eq!(names(&h, "shop.b"), ["id"]);
    assert_eq!(names(&h, "shop.e"), ["id", "x"]);
    let mut h = h;
    h.apply_query("other", "DROP TABLE IF EXISTS shop.b /* generated by server */", None, "f:1", &shop_only);
    assert!(h.get("shop.b").is_none());
    assert!(h.get("shop.e").is_some());
    h.apply_query("", "DROP DATABASE `shop`", None, "f:2", &shop_only);
    assert!(h.get("shop.e").is_none());
    // the drops wait to be written as tombstones
    assert!(h.has_pending());
}

#[test]
fn rename_out_of_and_into_the_captured_set() {
    let mut h = history(&["CREATE TABLE a (id INT)"]);
    h.apply_query("shop", "RENAME TABLE a TO crm.a", None, "f:1", &shop_only);
    assert!(h.get("shop.a").is_none() && h.get("crm.a").is_none());
    // an uncaptured table moved into the captured set: its columns are not known
    h.apply_query("crm", "RENAME TABLE a TO shop.back", None, "f:2", &shop_only);
    let t = h.get("shop.back").unwrap();
    assert!(t.unknown.as_deref().unwrap().contains("not tracked"), "{:?}", t.unknown);
}

#[test]
fn create_like() {
    let h = history(&["CREATE TABLE a (id INT PRIMARY KEY, v ENUM('x','y'))", "CREATE TABLE b LIKE a"]);
    assert_eq!(names(&h, "shop.b"), ["id", "v"]);
    assert_eq!(h.get("shop.b").unwrap().primary_key, ["id"]);
    assert_eq!(h.get("shop.b").unwrap().table, "b");
    // LIKE an uncaptured table: unknown
    let h = history(&["CREATE TABLE shop.c LIKE crm.src"]);
    assert!(h.get("shop.c").unwrap().unknown.is_some());
}

#[test]
fn uncaptured_and_non_ddl_statements_are_ignored() {
    let mut h = history(&["CREATE TABLE t (id INT)"]);
    let v = h.version();
    for s in [
        "BEGIN",
        "COMMIT",
        "INSERT INTO t VALUES (1)",
        "ALTER TABLE crm.t ADD COLUMN x INT",
        "CREATE DATABASE crm",
        "CREATE INDEX i ON t (id)",
        "GRANT SELECT ON *.* TO 'u'@'%'",
        "ALTER TABLE crm.t ADD COLUMN x GEOMETRY SRID 4326 INVISIBLE WITH SOMETHING",
    ] {
        assert!(h.apply_query("shop", s, None, "f:1", &shop_only).is_empty(), "{s}");
    }
    assert_eq!(h.version(), v);
    assert_eq!(names(&h, "shop.t"), ["id"]);
}

#[test]
fn unparseable_ddl_marks_the_table_unknown() {
    let mut h = history(&["CREATE TABLE t (id INT)", "CREATE TABLE u (id INT)"]);
    let changed = h.apply_query("shop", "ALTER TABLE t ADD COLUMN x INT, FROBNICATE EVERYTHING", None, "f:9", &all);
    assert_eq!(changed, ["shop.t"]);
    let t = h.get("shop.t").unwrap();
    let why = t.unknown.as_deref().unwrap();
    assert!(why.contains("FROBNICATE EVERYTHING"), "{why}");
    assert_eq!(t.since, "f:9");
    assert!(h.get("shop.u").unwrap().unknown.is_none());
    // a later ALTER keeps it unknown
    h.apply_query("shop", "ALTER TABLE t ADD COLUMN y INT", None, "f:10", &all);
    assert!(h.get("shop.t").unwrap().unknown.as_deref().unwrap().contains("FROBNICATE"));
    // a statement that parses but cannot be applied: dropping a column that is not there
    h.apply_query("shop", "ALTER TABLE u DROP COLUMN nope", None, "f:11", &all);
    assert!(h.get("shop.u").unwrap().unknown.as_deref().unwrap().contains("nope"));
    // a CREATE TABLE that cannot be parsed names the new table
    let mut h = SchemaHistory::default();
    h.apply_query("shop", "CREATE TABLE IF NOT EXISTS n (id INT) FROBNICATE", None, "f:1", &shop_only);
    assert!(h.get("shop.n").unwrap().unknown.is_some());
    // an unknown type is not guessed
    let h = history(&["CREATE TABLE w (id INT, g MYSTERYTYPE)"]);
    assert!(h.get("shop.w").unwrap().unknown.is_some());
    // CREATE TABLE ... LIKE, then re-created: known again
    let mut h = history(&["CREATE TABLE t (id INT) FROBNICATE"]);
    assert!(h.get("shop.t").unwrap().unknown.is_some());
    h.apply_query("shop", "DROP TABLE t", None, "f:2", &all);
    h.apply_query("shop", "CREATE TABLE t (id INT, v INT)", None, "f:3", &all);
    assert_eq!(names(&h, "shop.t"), ["id", "v"]);
}

#[test]
fn mariadb_syntax() {
    let h = history(&[
        "CREATE TABLE IF NOT EXISTS `m` (`id` int(10) unsigned NOT NULL, `u` uuid DEFAULT NULL, `j` longtext \
         CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL CHECK (json_valid(`j`)), PRIMARY KEY (`id`)) \
         ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci",
        "ALTER TABLE m ADD COLUMN IF NOT EXISTS extra TINYTEXT",
        "ALTER TABLE m ADD COLUMN IF NOT EXISTS extra TINYTEXT",
        "ALTER TABLE m DROP COLUMN IF EXISTS nothing",
    ]);
    assert!(h.get("shop.m").unwrap().unknown.is_none(), "{:?}", h.get("shop.m").unwrap().unknown);
    assert_eq!(names(&h, "shop.m"), ["id", "u", "j", "extra"]);
    assert!(col(&h, "shop.m", "id").unsigned);
    assert!(h.get("shop.m").unwrap().unknown.is_none());
}

#[test]
fn history_json_round_trip() {
    let h = history(&["CREATE TABLE t (id INT PRIMARY KEY, e ENUM('a','b'))"]);
    let t = h.get("shop.t").unwrap();
    let j = serde_json::to_string(t).unwrap();
    let back: TrackedTable = serde_json::from_str(&j).unwrap();
    assert_eq!(&back, t);
    let again = SchemaHistory::new(vec![back], 1, false);
    assert!(!again.has_pending());
    assert_eq!(again.version(), 1);
}

#[test]
fn column_types_from_information_schema() {
    let c = column_from_type_text("n", "int(10) unsigned zerofill", None).unwrap();
    assert_eq!((c.type_name.as_str(), c.unsigned), ("int", true));
    let c = column_from_type_text("e", "enum('a','b''c')", Some("latin1")).unwrap();
    assert_eq!(c.enum_values.unwrap(), ["a", "b'c"]);
    assert_eq!(c.charset.as_deref(), Some("latin1"));
    let c = column_from_type_text("d", "decimal(10,2)", None).unwrap();
    assert_eq!(c.type_name, "decimal");
    let c = column_from_type_text("b", "blob", None).unwrap();
    assert_eq!(c.charset.as_deref(), Some("binary"));
}

// ---- TABLE_MAP fill and mismatch ----

fn table_map(cols: Vec<Column>) -> Arc<TableMap> {
    Arc::new(TableMap {
        table_id: 1,
        flags: 0,
        database: Arc::from("shop"),
        table: Arc::from("t"),
        columns: cols,
        has_column_names: false,
        primary_key: None,
    })
}

fn c(i: usize, ty: ColumnType, meta: u16) -> Column {
    Column::new(i, ty, meta, true)
}

#[test]
fn fill_names_and_metadata() {
    let mut h = history(&[
        "CREATE TABLE t (id INT UNSIGNED NOT NULL PRIMARY KEY, name VARCHAR(20), st ENUM('a','b'), amount DECIMAL(10,2))",
    ]);
    let tm = table_map(vec![
        c(0, ColumnType::Long, 0),
        c(1, ColumnType::VarChar, 80),
        c(2, ColumnType::Enum, 1),
        c(3, ColumnType::NewDecimal, 0x0a02),
    ]);
    let f = h.resolve(&tm, "bin.000001", 500).unwrap();
    let names: Vec<&str> = f.columns.iter().map(|c| c.name.as_deref().unwrap()).collect();
    assert_eq!(names, ["id", "name", "st", "amount"]);
    assert!(f.columns[0].unsigned && f.columns[0].primary_key);
    assert_eq!(f.primary_key, Some(vec![(0, 0)]));
    // utf8mb4 from the database collation: some utf8mb4 collation id
    assert_eq!(f.columns[1].collation.and_then(charset_of).map(|c| c.name()), Some("utf8mb4"));
    assert_eq!(f.columns[2].enum_values.as_deref().map(|v| v.len()), Some(2));
    // cached until the history changes
    assert!(Arc::ptr_eq(&f, &h.resolve(&tm, "bin.000001", 600).unwrap()));
    // a TABLE_MAP with names is used as it is
    let mut named = (*tm).clone();
    named.has_column_names = true;
    let named = Arc::new(named);
    assert!(Arc::ptr_eq(&named, &h.resolve(&named, "x", 1).unwrap()));
}

#[test]
fn fill_keeps_the_table_maps_own_metadata() {
    let mut h = history(&["CREATE TABLE t (v VARCHAR(10) CHARACTER SET latin1)"]);
    let mut col = c(0, ColumnType::VarChar, 40);
    col.collation = Some(45);
    let f = h.resolve(&table_map(vec![col]), "f", 1).unwrap();
    assert_eq!(f.columns[0].collation, Some(45));
}

#[test]
fn mismatches_stop_with_the_details() {
    let mut h = history(&["CREATE TABLE t (id INT, name VARCHAR(20))"]);
    // a column added since the tracked schema
    let e = h
        .resolve(
            &table_map(vec![c(0, ColumnType::Long, 0), c(1, ColumnType::VarChar, 80), c(2, ColumnType::Long, 0)]),
            "bin.000003",
            1234,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("shop.t at bin.000003:1234"), "{e}");
    assert!(e.contains("3 columns, the tracked schema 2 (id, name)"), "{e}");
    assert!(e.contains("binlog_row_metadata=FULL"), "{e}");
    // a type family that differs
    let e = h
        .resolve(&table_map(vec![c(0, ColumnType::Long, 0), c(1, ColumnType::Blob, 2)]), "bin.000003", 99)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("column 2 (index 1): the TABLE_MAP type is BLOB (252), the tracked column is name VARCHAR(20)"),
        "{e}"
    );
    // signedness that contradicts it
    let mut u = c(0, ColumnType::Long, 0);
    u.unsigned = true;
    let e = h.resolve(&table_map(vec![u, c(1, ColumnType::VarChar, 80)]), "f", 1).unwrap_err().to_string();
    assert!(e.contains("UNSIGNED"), "{e}");
    // binary where text was tracked
    let mut b = c(1, ColumnType::VarChar, 20);
    b.collation = Some(BINARY_COLLATION);
    let e = h.resolve(&table_map(vec![c(0, ColumnType::Long, 0), b]), "f", 1).unwrap_err().to_string();
    assert!(e.contains("binary and character"), "{e}");
}

#[test]
fn untracked_and_unknown_tables_stop_with_what_to_do() {
    let mut h = SchemaHistory::default();
    let tm = table_map(vec![c(0, ColumnType::Long, 0)]);
    let e = h.resolve(&tm, "f", 7).unwrap_err().to_string();
    assert!(e.contains("shop.t at f:7") && e.contains("tracks no schema"), "{e}");
    h.apply_query("shop", "CREATE TABLE t (id INT)", None, "f:1", &all);
    h.apply_query("shop", "ALTER TABLE t FROBNICATE WEIRDLY", None, "f:2", &all);
    let e = h.resolve(&tm, "f", 7).unwrap_err().to_string();
    assert!(e.contains("unknown since f:2") && e.contains("FROBNICATE WEIRDLY"), "{e}");
    assert!(
        e.contains("binlog_row_metadata=FULL") && e.contains("sluice position set --config FILE --to current"),
        "{e}"
    );
}

#[test]
fn ddl_invalidates_the_filled_cache() {
    let mut h = history(&["CREATE TABLE t (id INT, a INT)"]);
    let tm = table_map(vec![c(0, ColumnType::Long, 0), c(1, ColumnType::Long, 0)]);
    assert_eq!(h.resolve(&tm, "f", 1).unwrap().columns[1].name.as_deref(), Some("a"));
    h.apply_query("shop", "ALTER TABLE t RENAME COLUMN a TO b", None, "f:2", &all);
    assert_eq!(h.resolve(&tm, "f", 3).unwrap().columns[1].name.as_deref(), Some("b"));
}

#[test]
fn collation_ids_for_charsets() {
    for cs in ["utf8mb4", "utf8mb3", "latin1", "ascii", "ucs2", "utf16", "cp1251", "gbk"] {
        let id = collation_of(cs).unwrap_or_else(|| panic!("{cs}"));
        assert_eq!(charset_of(id).unwrap().name(), cs);
    }
    assert_eq!(collation_of("utf8").and_then(charset_of).map(|c| c.name()), Some("utf8mb3"));
    assert_eq!(collation_of("binary"), Some(63));
}

#[test]
fn alter_table_options_the_parser_lacks_leave_the_columns() {
    for s in [
        "ALTER TABLE t ENGINE=InnoDB",
        "ALTER TABLE `shop`.`t` COMMENT='x', ROW_FORMAT=DYNAMIC",
        "ALTER TABLE t FORCE",
        "ALTER ONLINE TABLE t RENAME INDEX u TO v",
        "ALTER TABLE t ADD UNIQUE KEY u (a)",
        "ALTER TABLE t DROP INDEX u",
        "ALTER TABLE t AUTO_INCREMENT=5",
        "ALTER TABLE t ADD CONSTRAINT fk FOREIGN KEY (a) REFERENCES o (id)",
        "ALTER TABLE t DEFAULT CHARSET=latin1",
    ] {
        let mut h = history(&["CREATE TABLE t (a INT, b INT)"]);
        h.apply_query("shop", s, None, "f:1", &all);
        let t = h.get("shop.t").unwrap();
        assert!(t.unknown.is_none(), "{s}: {:?}", t.unknown);
        assert_eq!(names(&h, "shop.t"), ["a", "b"], "{s}");
    }
    // the new default charset applies to columns added later
    let h = history(&["CREATE TABLE t (a INT)", "ALTER TABLE t DEFAULT CHARSET=latin1", "ALTER TABLE t ADD v TEXT"]);
    assert_eq!(col(&h, "shop.t", "v").charset.as_deref(), Some("latin1"));
    // what changes columns, or cannot be told, is not waved through (the database's charset
    // is unknown here: no collation in the event)
    for s in [
        "ALTER TABLE t CONVERT TO CHARACTER SET DEFAULT",
        "ALTER TABLE t ENGINE=InnoDB, ADD PRIMARY KEY (a) WITH PARSER x",
    ] {
        let mut h = history(&["CREATE TABLE t (a INT, b INT)"]);
        h.apply_query("shop", s, None, "f:1", &all);
        assert!(h.get("shop.t").unwrap().unknown.is_some(), "{s}");
    }
}

#[test]
fn set_and_enum_sizes_are_checked() {
    let members: Vec<String> = (0..40).map(|i| format!("'m{i}'")).collect();
    let mut h = history(&[&format!("CREATE TABLE t (s SET({}), e ENUM('a','b'))", members.join(","))]);
    // 40 members: 5 bytes, which the server packs in 8
    let ok = table_map(vec![c(0, ColumnType::Set, 8), c(1, ColumnType::Enum, 1)]);
    let f = h.resolve(&ok, "f", 1).unwrap();
    assert_eq!(f.columns[0].set_values.as_ref().unwrap().len(), 40);
    assert_eq!(f.columns[1].enum_values.as_ref().unwrap()[1].as_ref(), "b");
    let bad = table_map(vec![c(0, ColumnType::Set, 1), c(1, ColumnType::Enum, 1)]);
    assert!(h.resolve(&bad, "f", 2).unwrap_err().to_string().contains("SET member count"));
}

#[test]
fn a_fresh_history_supersedes_an_earlier_one() {
    // what __schemas still holds after the checkpoint was reset: two tables up to version 7
    let old = history(&["CREATE TABLE a (id INT)", "CREATE TABLE gone (id INT)"]);
    let mut previous: Vec<TrackedTable> = ["shop.a", "shop.gone"].iter().map(|k| old.get(k).unwrap().clone()).collect();
    previous[1].version = 7;
    let loaded = history(&["CREATE TABLE a (id INT, v INT)"]).get("shop.a").unwrap().clone();
    let committed = Committed::Load { previous };
    assert!(committed.needs_load());
    let h = committed.into_history(vec![loaded]);
    assert_eq!(h.version(), 8);
    assert_eq!(h.get("shop.a").unwrap().version, 8);
    assert_eq!(names(&h, "shop.a"), ["id", "v"]);
    assert!(h.get("shop.gone").is_none());
    // both keys are written with the first commit: shop.a's new definition, shop.gone's tombstone
    assert_eq!(h.dirty.iter().map(String::as_str).collect::<Vec<_>>(), ["shop.a", "shop.gone"]);
}

#[test]
fn atomic_create_table_select() {
    let h = history(&["CREATE TABLE `t` (\n  `id` int NOT NULL,\n  `v` varchar(5) DEFAULT NULL\n) START TRANSACTION"]);
    assert_eq!(names(&h, "shop.t"), ["id", "v"]);
    assert!(h.get("shop.t").unwrap().unknown.is_none());
    assert_eq!(strip_start_transaction("CREATE TABLE x (a INT)"), "CREATE TABLE x (a INT)");
    assert_eq!(strip_start_transaction("é"), "é");
}

#[test]
fn a_table_map_with_names_heals_the_tracked_schema() {
    let mut h = history(&["CREATE TABLE t (id INT, a INT)", "ALTER TABLE t FROBNICATE"]);
    assert!(h.get("shop.t").unwrap().unknown.is_some());
    let v = h.version();
    let mut named = (*table_map(vec![c(0, ColumnType::Long, 0), c(1, ColumnType::VarChar, 80)])).clone();
    named.columns[0].name = Some(Arc::from("id"));
    named.columns[0].unsigned = true;
    named.columns[1].name = Some(Arc::from("label"));
    named.columns[1].collation = Some(45);
    named.has_column_names = true;
    named.primary_key = Some(vec![(0, 0)]);
    let named = Arc::new(named);
    assert!(Arc::ptr_eq(&h.resolve(&named, "f", 50).unwrap(), &named));
    let t = h.get("shop.t").unwrap();
    assert!(t.unknown.is_none());
    assert_eq!(names(&h, "shop.t"), ["id", "label"]);
    assert_eq!(t.primary_key, ["id"]);
    assert_eq!((t.version, t.since.as_str()), (v + 1, "f:50"));
    assert!(col(&h, "shop.t", "id").unsigned);
    assert_eq!(col(&h, "shop.t", "label").charset.as_deref(), Some("utf8mb4"));
    // consistent again: no new version for the same TABLE_MAP
    h.resolve(&named, "f", 60).unwrap();
    assert_eq!(h.version(), v + 1);
    // and a TABLE_MAP without names is now filled from it
    let bare = table_map(vec![c(0, ColumnType::Long, 0), c(1, ColumnType::VarChar, 80)]);
    assert_eq!(h.resolve(&bare, "f", 70).unwrap().columns[1].name.as_deref(), Some("label"));
}

#[test]
fn add_column_lists_online_and_wait() {
    let h = history(&[
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
        "ALTER TABLE t\n  ADD COLUMN (x INT UNSIGNED COMMENT 'it''s, (really)', y VARCHAR(5) CHARACTER SET latin1),\n  \
         ADD z INT FIRST",
        "ALTER ONLINE TABLE t WAIT 5 ADD (d DECIMAL(10,2) NOT NULL, `e e` DATE)",
        "ALTER IGNORE TABLE t NOWAIT ADD COLUMN IF NOT EXISTS (x INT, f DOUBLE)",
    ]);
    assert_eq!(names(&h, "shop.t"), ["z", "id", "v", "x", "y", "d", "e e", "f"]);
    assert!(col(&h, "shop.t", "x").unsigned);
    assert_eq!(col(&h, "shop.t", "y").charset.as_deref(), Some("latin1"));
    let d = col(&h, "shop.t", "d");
    assert_eq!((d.type_name.as_str(), d.nullable), ("decimal", false));
    assert_eq!(col(&h, "shop.t", "e e").type_name, "date");
    assert_eq!(col(&h, "shop.t", "f").type_name, "double");
    assert!(h.get("shop.t").unwrap().unknown.is_none());
    assert_eq!(h.version(), 4);
}

#[test]
fn convert_to_character_set() {
    let create = "CREATE TABLE t (id INT, a VARCHAR(5), b TEXT CHARACTER SET utf8mb3, c VARBINARY(4), \
                  e ENUM('x','y'), n INT, PRIMARY KEY (id)) DEFAULT CHARSET=latin1";
    let h = history(&[
        create,
        "ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci",
        "ALTER TABLE t ADD w TEXT",
    ]);
    let cs = |c: &str| col(&h, "shop.t", c).charset.clone();
    assert_eq!(
        [cs("a"), cs("b"), cs("c"), cs("e"), cs("n"), cs("w")],
        [
            Some("utf8mb4".into()),
            Some("utf8mb4".into()),
            Some("binary".into()),
            Some("utf8mb4".into()),
            None,
            Some("utf8mb4".into())
        ]
    );
    assert_eq!(h.get("shop.t").unwrap().default_charset.as_deref(), Some("utf8mb4"));
    assert_eq!(h.version(), 3);
    // with other harmless specifications, and by collation only
    let h = history(&[create, "ALTER TABLE t CONVERT TO CHARSET latin2, ALGORITHM=COPY"]);
    assert_eq!(col(&h, "shop.t", "a").charset.as_deref(), Some("latin2"));
    // to binary: the text types become binary strings
    let h = history(&[create, "ALTER TABLE t CONVERT TO CHARACTER SET binary"]);
    let a = col(&h, "shop.t", "a");
    assert_eq!((a.type_name.as_str(), a.charset.as_deref()), ("varbinary", Some("binary")));
    assert_eq!(col(&h, "shop.t", "b").type_name, "blob");
    assert_eq!(names(&h, "shop.t"), ["id", "a", "b", "c", "e", "n"]);
}

#[test]
fn partitioned_tables_and_partition_maintenance() {
    let mut h =
        history(&["CREATE TABLE p (id BIGINT NOT NULL, d DATE NOT NULL, v CHAR(3) BINARY, PRIMARY KEY (id, d)) \
         ENGINE=InnoDB PARTITION BY RANGE (YEAR(d)) (PARTITION p0 VALUES LESS THAN (2020), \
         PARTITION p1 VALUES LESS THAN MAXVALUE)"]);
    assert_eq!(names(&h, "shop.p"), ["id", "d", "v"]);
    assert_eq!(h.get("shop.p").unwrap().primary_key, ["id", "d"]);
    let v = col(&h, "shop.p", "v");
    assert_eq!((v.type_name.as_str(), v.charset.as_deref()), ("char", Some("utf8mb4")));
    let version = h.version();
    for s in [
        "ALTER TABLE p ADD PARTITION (PARTITION p2 VALUES LESS THAN (2030))",
        "ALTER TABLE p DROP PARTITION p0, p1",
        "ALTER TABLE p REORGANIZE PARTITION p1 INTO (PARTITION p1a VALUES LESS THAN (2025), PARTITION p1b VALUES LESS THAN MAXVALUE)",
        "ALTER TABLE p TRUNCATE PARTITION ALL",
        "ALTER TABLE p EXCHANGE PARTITION p0 WITH TABLE q",
        "ALTER TABLE p COALESCE PARTITION 2",
        "ALTER TABLE p ANALYZE PARTITION p0",
        "ALTER TABLE p PARTITION BY HASH(id) PARTITIONS 4",
        "ALTER TABLE p REMOVE PARTITIONING",
    ] {
        h.apply_query("shop", s, None, "f:9", &all);
        let t = h.get("shop.p").unwrap();
        assert!(t.unknown.is_none(), "{s}: {:?}", t.unknown);
        assert_eq!(names(&h, "shop.p"), ["id", "d", "v"], "{s}");
    }
    assert_eq!(h.version(), version, "partition maintenance is not a schema change");
}

#[test]
fn rewrite_keeps_the_text_it_does_not_touch() {
    assert_eq!(rewrite_for_parser("ALTER TABLE t ADD COLUMN x INT"), None);
    assert_eq!(
        rewrite_for_parser("ALTER ONLINE TABLE `a b`.t ADD (x INT DEFAULT 'é,''(', y TEXT)").as_deref(),
        Some("ALTER TABLE `a b`.t ADD COLUMN x INT DEFAULT 'é,''(', ADD COLUMN y TEXT ")
    );
}

#[test]
fn lower_case_table_names_folds_database_and_table_names() {
    // loaded as the server lists it, before the setting is known
    let mut h = SchemaHistory::new(history(&["CREATE TABLE Keep (Id INT)"]).tables.into_values().collect(), 1, false);
    h.set_lower_case_table_names(1);
    assert!(h.get("shop.keep").is_some() && h.get("SHOP.KEEP").is_some());
    h.apply_query("Shop", "CREATE TABLE T (Id INT PRIMARY KEY, Name VARCHAR(20))", None, "f:1", &all);
    h.apply_query("other", "ALTER TABLE SHOP.t ADD COLUMN (Qty INT)", None, "f:2", &all);
    h.apply_query("", "ALTER TABLE `Shop`.`T` ENGINE=InnoDB, DEFAULT CHARSET=latin1", None, "f:3", &all);
    // column names keep their case (they always compare case-insensitively)
    assert_eq!(names(&h, "shop.t"), ["Id", "Name", "Qty"]);
    assert_eq!(h.get("shop.t").unwrap().default_charset.as_deref(), Some("latin1"));
    let tm = table_map(vec![c(0, ColumnType::Long, 0), c(1, ColumnType::VarChar, 80), c(2, ColumnType::Long, 0)]);
    let f = h.resolve(&tm, "f", 9).unwrap();
    let got: Vec<_> = f.columns.iter().map(|c| c.name.as_deref().unwrap()).collect();
    assert_eq!(got, ["Id", "Name", "Qty"]);
    h.apply_query("", "RENAME TABLE SHOP.T TO Shop.T2", None, "f:4", &all);
    h.apply_query("", "DROP DATABASE SHOP", None, "f:5", &all);
    assert!(h.get("shop.t").is_none() && h.get("shop.t2").is_none() && h.get("shop.keep").is_none());
    // without the setting, names compare as written
    let h = history(&["CREATE TABLE T (Id INT)", "ALTER TABLE t ADD COLUMN x INT"]);
    assert_eq!(names(&h, "shop.T"), ["Id"]);
}

/// Any statement the binlog may carry, however malformed, is applied or marks tables
/// unknown: never a panic (the rewrite works on token positions, the splitters on
/// parentheses and commas). Statements are drawn from the words and punctuation the DDL
/// paths look at, so the odd shapes are reached far more often than by random text.
mod no_panic {
    use super::*;
    use proptest::prelude::*;

    const PIECES: &[&str] = &[
        "ALTER",
        "ONLINE",
        "IGNORE",
        "TABLE",
        "IF",
        "NOT",
        "EXISTS",
        "t",
        "shop",
        ".",
        "`T`",
        "WAIT",
        "5",
        "NOWAIT",
        "ADD",
        "COLUMN",
        "(",
        ")",
        ",",
        "x",
        "INT",
        "VARCHAR(5)",
        "BINARY",
        "CHAR",
        "TEXT",
        "CONVERT",
        "TO",
        "CHARACTER",
        "SET",
        "CHARSET",
        "COLLATE",
        "utf8mb4",
        "latin1_bin",
        "DEFAULT",
        "=",
        "PARTITION",
        "BY",
        "HASH",
        "PARTITIONS",
        "DROP",
        "p0",
        "CREATE",
        "SELECT",
        "AS",
        "PRIMARY",
        "KEY",
        "FIRST",
        "AFTER",
        "RENAME",
        "ENGINE",
        "'a,(b'",
        ";",
        "\n",
        "é",
        "--",
        "/*",
        "*/",
        "DATABASE",
        "MODIFY",
        "CHANGE",
    ];

    proptest! {
        #[test]
        fn statements_never_panic(words in proptest::collection::vec(proptest::sample::select(PIECES), 0..24)) {
            let sql = words.join(" ");
            let _ = rewrite_for_parser(&sql);
            let _ = options_only_alter(&sql, "shop", Some("utf8mb4"));
            let mut h = history(&["CREATE TABLE t (x INT, v VARCHAR(5), PRIMARY KEY (x))"]);
            h.set_lower_case_table_names(u32::from(words.len() % 2 == 0));
            h.apply_query("shop", &sql, Some(45), "f:1", &all);
            // the table is either still tracked with columns, unknown, or gone: never half-applied
            if let Some(t) = h.get("shop.t") {
                prop_assert!(t.unknown.is_some() || !t.columns.is_empty() || sql.contains("CREATE"));
            }
        }
    }
}

/// The national and LONG spellings of character and binary types that MySQL and MariaDB accept
/// (sqlparser does not parse all of them: they are rewritten first), and `CONVERT TO
/// CHARACTER SET DEFAULT` (the database's charset). Each stopped Sluice before, under
/// binlog_row_metadata=MINIMAL, with "delete its checkpoint" as the only way on.
#[test]
fn national_and_long_type_spellings() {
    let h = history(&[
        "CREATE TABLE shop.n (id INT PRIMARY KEY, a NATIONAL VARCHAR(10), b NCHAR(3), c NATIONAL CHAR(2), \
         d NVARCHAR(5), e NCHAR VARCHAR(6), f NATIONAL CHARACTER VARYING(7), g CHARACTER VARYING(8), \
         h LONG VARBINARY, i LONG VARCHAR, j LONG, k LONG CHARACTER SET latin1, l NATIONAL CHARACTER(4)) \
         DEFAULT CHARSET=latin1",
        "ALTER TABLE shop.n ADD COLUMN m NATIONAL VARCHAR(10), ADD COLUMN o LONG VARBINARY",
    ]);
    let t = h.get("shop.n").unwrap();
    assert_eq!(t.unknown, None, "{:?}", t.unknown);
    let got: Vec<(&str, &str, Option<&str>)> =
        t.columns.iter().map(|c| (c.name.as_str(), c.type_name.as_str(), c.charset.as_deref())).collect();
    assert_eq!(
        got,
        [
            ("id", "int", None),
            ("a", "varchar", Some("utf8mb3")),
            ("b", "char", Some("utf8mb3")),
            ("c", "char", Some("utf8mb3")),
            ("d", "varchar", Some("utf8mb3")),
            ("e", "varchar", Some("utf8mb3")),
            ("f", "varchar", Some("utf8mb3")),
            ("g", "varchar", Some("latin1")),
            ("h", "mediumblob", Some("binary")),
            ("i", "mediumtext", Some("latin1")),
            ("j", "mediumtext", Some("latin1")),
            ("k", "mediumtext", Some("latin1")),
            ("l", "char", Some("utf8mb3")),
            ("m", "varchar", Some("utf8mb3")),
            ("o", "mediumblob", Some("binary")),
        ]
    );
    // a statement sqlparser takes as it is gets the national charset too
    let h = history(&["CREATE TABLE shop.m (b NCHAR(3), c NATIONAL CHAR(2), d NVARCHAR(4)) DEFAULT CHARSET=latin1"]);
    let charsets: Vec<Option<&str>> = h.get("shop.m").unwrap().columns.iter().map(|c| c.charset.as_deref()).collect();
    assert_eq!(charsets, [Some("utf8mb3"); 3]);
    // CONVERT TO CHARACTER SET DEFAULT: the database's charset (utf8mb4 here)
    let mut h = history(&["CREATE TABLE shop.c (id INT PRIMARY KEY, v VARCHAR(5)) DEFAULT CHARSET=latin1"]);
    h.apply_query(
        "shop",
        "ALTER TABLE shop.c CONVERT TO CHARACTER SET DEFAULT",
        Some(45),
        "bin.000001:900",
        &shop_only,
    );
    let t = h.get("shop.c").unwrap();
    assert_eq!(t.unknown, None, "{:?}", t.unknown);
    assert_eq!(t.columns[1].charset.as_deref(), Some("utf8mb4"));
}

/// Column attributes MySQL and MariaDB accept that leave the values as they are, and MariaDB's
/// `IF NOT EXISTS` on indexes: each stopped Sluice before (unparsable); what does change the
/// row (a table-level `WITH SYSTEM VERSIONING` adds hidden columns) still marks the table unknown.
#[test]
fn harmless_column_attributes() {
    for (s, column, type_name, charset) in [
        ("ALTER TABLE shop.p ADD COLUMN c INT, ADD INDEX IF NOT EXISTS i (c)", "c", "int", None),
        ("ALTER TABLE shop.p ADD COLUMN c VARCHAR(10) COLUMN_FORMAT DYNAMIC", "c", "varchar", Some("utf8mb4")),
        ("ALTER TABLE shop.p ADD COLUMN c INT SERIAL DEFAULT VALUE", "c", "int", None),
        ("ALTER TABLE shop.p ADD COLUMN c INT STORAGE DISK", "c", "int", None),
        ("ALTER TABLE shop.p ADD COLUMN c INT WITH SYSTEM VERSIONING", "c", "int", None),
        ("ALTER TABLE shop.p ADD COLUMN c CHAR(3) ASCII", "c", "char", Some("latin1")),
        ("ALTER TABLE shop.p ADD COLUMN c CHAR(3) UNICODE", "c", "char", Some("ucs2")),
        ("ALTER TABLE shop.p ADD COLUMN c POINT REF_SYSTEM_ID=4326", "c", "point", None),
    ] {
        let mut h = history(&["CREATE TABLE shop.p (id INT PRIMARY KEY)"]);
        h.apply_query("shop", s, Some(45), "bin.000001:900", &shop_only);
        let t = h.get("shop.p").unwrap();
        assert_eq!(t.unknown, None, "{s}");
        assert_eq!(names(&h, "shop.p"), ["id", column], "{s}");
        let c = col(&h, "shop.p", column);
        assert_eq!((c.type_name.as_str(), c.charset.as_deref()), (type_name, charset), "{s}");
    }
    // SERIAL DEFAULT VALUE means NOT NULL
    let mut h = history(&["CREATE TABLE shop.p (id INT PRIMARY KEY)"]);
    h.apply_query("shop", "ALTER TABLE shop.p ADD COLUMN c INT SERIAL DEFAULT VALUE", Some(45), "b:1", &shop_only);
    assert!(!col(&h, "shop.p", "c").nullable);
    // a period names existing columns
    let mut h = history(&["CREATE TABLE shop.p (id INT PRIMARY KEY, s DATE, e DATE)"]);
    h.apply_query("shop", "ALTER TABLE shop.p ADD PERIOD FOR p(s, e)", Some(45), "b:1", &shop_only);
    assert_eq!(
        (h.get("shop.p").unwrap().unknown.as_deref(), names(&h, "shop.p")),
        (None, vec!["id".to_string(), "s".into(), "e".into()])
    );
    let h = history(&["CREATE TABLE shop.q (id INT PRIMARY KEY, c INT WITHOUT SYSTEM VERSIONING, d CHAR(2) ASCII)"]);
    assert_eq!(names(&h, "shop.q"), ["id", "c", "d"]);
    assert_eq!(col(&h, "shop.q", "d").charset.as_deref(), Some("latin1"));
    let h = history(&["CREATE TABLE shop.v (id INT PRIMARY KEY, c INT) WITH SYSTEM VERSIONING"]);
    assert!(h.get("shop.v").is_none_or(|t| t.unknown.is_some()), "hidden row_start/row_end: never a guess");
}

/// MariaDB's conditional column changes and sequence defaults (each stopped Sluice before).
#[test]
fn mariadb_conditional_changes_and_sequence_defaults() {
    for (s, names_after) in [
        ("ALTER TABLE shop.p CHANGE COLUMN IF EXISTS v w INT", vec!["id", "w"]),
        ("ALTER TABLE shop.p MODIFY COLUMN IF EXISTS v BIGINT", vec!["id", "v"]),
        ("ALTER TABLE shop.p MODIFY IF EXISTS v BIGINT", vec!["id", "v"]),
        ("ALTER TABLE shop.p ADD COLUMN c INT DEFAULT NEXT VALUE FOR shop.s", vec!["id", "v", "c"]),
        (
            "ALTER TABLE shop.p ADD COLUMN c INT NOT NULL DEFAULT NEXT VALUE FOR s, ADD COLUMN d INT",
            vec!["id", "v", "c", "d"],
        ),
    ] {
        let mut h = history(&["CREATE TABLE shop.p (id INT PRIMARY KEY, v INT)"]);
        h.apply_query("shop", s, Some(45), "bin.000001:900", &shop_only);
        assert_eq!(h.get("shop.p").unwrap().unknown, None, "{s}");
        assert_eq!(names(&h, "shop.p"), names_after, "{s}");
    }
    let mut h = history(&["CREATE TABLE shop.p (id INT PRIMARY KEY, v INT)"]);
    h.apply_query("shop", "ALTER TABLE shop.p MODIFY COLUMN IF EXISTS v BIGINT UNSIGNED", Some(45), "b:1", &shop_only);
    assert_eq!((col(&h, "shop.p", "v").type_name.as_str(), col(&h, "shop.p", "v").unsigned), ("bigint", true));
    // a column that is not there: the server skipped it, Sluice cannot tell, so it does not guess
    let mut h = history(&["CREATE TABLE shop.p (id INT PRIMARY KEY, v INT)"]);
    h.apply_query("shop", "ALTER TABLE shop.p MODIFY COLUMN IF EXISTS nope BIGINT", Some(45), "b:1", &shop_only);
    assert!(h.get("shop.p").unwrap().unknown.is_some());
}

#[test]
fn account_statements_are_never_parsed() {
    use super::ddl::looks_like_ddl;
    // their passwords would reach the parser's debug log and any error that quotes the statement
    for sql in [
        "CREATE USER 'u'@'%' IDENTIFIED BY 'secret'",
        "create or replace user u identified by 'secret'",
        "ALTER USER u IDENTIFIED BY 'secret'",
        "DROP USER IF EXISTS u",
        "RENAME USER a TO b",
        "CREATE ROLE r",
        "CREATE SERVER s FOREIGN DATA WRAPPER mysql OPTIONS (PASSWORD 'secret')",
        "/* c */ CREATE USER u IDENTIFIED BY 'secret'",
        "GRANT ALL ON *.* TO u IDENTIFIED BY 'secret'",
    ] {
        assert!(!looks_like_ddl(sql), "{sql}");
    }
    for sql in [
        "CREATE TABLE user (id INT)",
        "CREATE OR REPLACE TABLE t (id INT)",
        "ALTER TABLE user ADD c INT",
        "DROP TABLE role",
        "/* c */ CREATE TABLE t (id INT)",
    ] {
        assert!(looks_like_ddl(sql), "{sql}");
    }
}
