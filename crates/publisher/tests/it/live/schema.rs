//! Live scenario: `sluice dump --source` from a server that writes TABLE_MAPs without column
//! metadata (MariaDB's `binlog_row_metadata=NO_LOG`: no names, no signedness, no charsets, no
//! ENUM members). The dump reads the table's definition from the server when it starts and
//! follows the DDL after it, so its JSON has the column names, UNSIGNED values, text decoded
//! in each column's charset and ENUM labels, before and after an ALTER.

use crate::support;

use serde_json::json;
use support::{of_table, Follower, Server};

#[test]
fn dump_names_and_types_come_from_the_tracked_schema() {
    let Some(db) = Server::start("live-schema", &["--binlog-row-metadata=NO_LOG"]) else { return };
    assert_eq!(db.scalar("SELECT @@binlog_row_metadata"), "NO_LOG");
    db.sql_text(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT UNSIGNED NOT NULL PRIMARY KEY, name VARCHAR(20) CHARACTER SET latin1,
           st ENUM('new','paid')) DEFAULT CHARSET=utf8mb4;",
    );
    let (file, pos) = db.master_status();
    let mut follower = Follower::dump_from(&db, (&file, pos), &[]);
    db.sql_text("SET NAMES utf8mb4; INSERT INTO shop.t VALUES (4294967295, 'café', 'paid');");
    // sluice read the definition before it streamed: the ALTERs below are news to it
    follower.wait_lines(1, 60);
    db.sql_text(
        "SET NAMES utf8mb4;
         ALTER TABLE shop.t ADD COLUMN (n BIGINT UNSIGNED, note TEXT);
         ALTER TABLE shop.t CONVERT TO CHARACTER SET utf8mb4;
         INSERT INTO shop.t VALUES (1, 'naïve ✓', 'new', 18446744073709551615, 'ünï ✓');
         UPDATE shop.t SET st = 'paid', n = 0 WHERE id = 1;",
    );
    follower.wait_lines(3, 60);
    let run = follower.stop();
    let rows = run.rows();
    let rows = of_table(&rows, "t");
    assert_eq!(rows.len(), 3, "{}", run.stdout);
    assert_eq!(rows[0]["after"], json!({"id": 4_294_967_295u64, "name": "café", "st": "paid"}));
    // (beyond 2^53 a number is printed as a string, for JSON readers that use doubles)
    let second = json!({"id": 1, "name": "naïve ✓", "st": "new", "n": "18446744073709551615", "note": "ünï ✓"});
    assert_eq!(rows[1]["after"], second);
    assert_eq!(rows[2]["before"], second);
    assert_eq!(rows[2]["after"], json!({"id": 1, "name": "naïve ✓", "st": "paid", "n": 0, "note": "ünï ✓"}));
    assert!(!run.stderr.contains("printed as @1..@N"), "{}", run.stderr);
}

/// With `lower_case_table_names=1` the server stores `Shop.Items` as `shop.items` (so its
/// TABLE_MAPs say), while DDL keeps the spelling its author chose: the tracked schema folds
/// names the way the server compares them, so the ALTER below reaches the table.
#[test]
fn ddl_spelled_in_another_case_reaches_the_table() {
    let Some(db) = Server::start("live-schema-lctn", &["--binlog-row-metadata=MINIMAL", "--lower-case-table-names=1"])
    else {
        return;
    };
    assert_eq!(db.scalar("SELECT @@lower_case_table_names"), "1");
    db.sql_text("CREATE DATABASE Shop; CREATE TABLE Shop.Items (Id INT NOT NULL PRIMARY KEY, Label VARCHAR(10));");
    let (file, pos) = db.master_status();
    let mut follower = Follower::dump_from(&db, (&file, pos), &[]);
    db.sql_text("INSERT INTO SHOP.ITEMS VALUES (1, 'one');");
    follower.wait_lines(1, 60);
    db.sql_text(
        "ALTER TABLE SHOP.items CHANGE Label Title VARCHAR(10), ADD COLUMN Qty INT FIRST;
         INSERT INTO Shop.Items (Id, Title, Qty) VALUES (2, 'two', 7);",
    );
    follower.wait_lines(2, 60);
    let run = follower.stop();
    let rows = run.rows();
    let rows = of_table(&rows, "items");
    assert_eq!(rows.len(), 2, "{}", run.stdout);
    assert_eq!(rows[0]["database"], "shop");
    assert_eq!(rows[0]["after"], json!({"Id": 1, "Label": "one"}));
    assert_eq!(rows[1]["after"], json!({"Qty": 7, "Id": 2, "Title": "two"}));
    assert!(!run.stderr.contains("printed as @1..@N"), "{}", run.stderr);
}

/// A table emptied by a statement (issue 20, item 2): MariaDB logs TRUNCATE and DROP TABLE as
/// QUERY events even in ROW format, so no delete reaches the binlog. `sluice dump` prints a
/// `TRUNCATE` line (JSON) or statement (SQL) in order with the rows, and the flashback script
/// says it cannot undo it, in the output and on stderr. From the server's own binlog file.
#[test]
fn dump_prints_what_truncate_and_drop_removed() {
    let Some(db) = Server::start("live-truncate-dump", &[]) else { return };
    db.sql_text(
        "CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, v INT); CREATE TABLE shop.u (id INT PRIMARY KEY);
         INSERT INTO shop.t VALUES (1, 1), (2, 2); TRUNCATE TABLE shop.t; INSERT INTO shop.t VALUES (3, 3);
         INSERT INTO shop.u VALUES (9); DROP TABLE shop.u; DROP TABLE IF EXISTS shop.nothing;
         FLUSH BINARY LOGS;",
    );
    let file = db.datadir().join("mysql-bin.000001");
    let file = file.to_str().unwrap();
    let run = support::sluice(&["dump", "--table", "shop.*", file]).ok();
    let lines: Vec<(String, String, Option<i64>)> = run
        .rows()
        .iter()
        .map(|r| {
            let id = r["after"]["id"].as_i64().or(r["before"]["id"].as_i64());
            (r["type"].as_str().unwrap().to_string(), r["table"].as_str().unwrap().to_string(), id)
        })
        .collect();
    let want = [
        ("INSERT", "t", Some(1)),
        ("INSERT", "t", Some(2)),
        ("TRUNCATE", "t", None),
        ("INSERT", "t", Some(3)),
        ("INSERT", "u", Some(9)),
        ("TRUNCATE", "u", None),
        ("TRUNCATE", "nothing", None),
    ]
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c));
    assert_eq!(lines, want, "{}", run.stdout);
    let truncate = &run.rows()[2];
    assert_eq!(truncate["statement"], "TRUNCATE TABLE");
    assert_eq!(truncate["database"], "shop");
    assert!(truncate["position"]["offset"].as_u64().unwrap() > 4);
    assert_eq!(run.rows()[5]["statement"], "DROP TABLE");
    assert!(run.stderr.contains("3 tables emptied"), "{}", run.stderr);

    let sql = support::sluice(&["dump", "--format", "sql", "--table", "shop.t", file]).ok();
    let stmts: Vec<&str> = sql
        .stdout
        .lines()
        .filter(|l| !l.starts_with("--") && !l.starts_with("SET ") && *l != "BEGIN;" && *l != "COMMIT;")
        .collect();
    assert_eq!(
        stmts,
        [
            "INSERT INTO `shop`.`t` (`id`, `v`) VALUES (1, 1);",
            "INSERT INTO `shop`.`t` (`id`, `v`) VALUES (2, 2);",
            "TRUNCATE TABLE `shop`.`t`;",
            "INSERT INTO `shop`.`t` (`id`, `v`) VALUES (3, 3);",
        ],
        "{}",
        sql.stdout
    );
    let back = support::sluice(&["dump", "--format", "flashback", "--table", "shop.t", file]).ok();
    let text = &back.stdout;
    let undo3 = text.find("DELETE FROM `shop`.`t` WHERE `id`=3").unwrap_or_else(|| panic!("{text}"));
    let cannot = text.find("-- cannot undo TRUNCATE TABLE of `shop`.`t`").unwrap_or_else(|| panic!("{text}"));
    let undo1 = text.find("DELETE FROM `shop`.`t` WHERE `id`=1").unwrap_or_else(|| panic!("{text}"));
    assert!(undo3 < cannot && cannot < undo1, "the note stands where undoing crosses the TRUNCATE:\n{text}");
    assert!(back.stderr.contains("cannot bring them back"), "{}", back.stderr);
}
