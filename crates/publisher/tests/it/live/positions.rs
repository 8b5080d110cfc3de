//! Live scenarios about where a stream starts and how it crosses files: a dump by file and
//! position and by MariaDB GTID returns exactly the transactions after it; `--follow` across
//! `FLUSH BINARY LOGS` loses nothing; a purged binlog and an unknown GTID stop with a message.
//! One server for the file; the scenarios run in order.

use crate::support;

use support::{dump, ids, of_table, Follower, Server};

/// (id, v) of the table, by id.
fn table(db: &Server) -> Vec<(i64, String)> {
    db.sql("SELECT id, v FROM t.p ORDER BY id").into_iter().map(|r| (r[0].parse().unwrap(), r[1].clone())).collect()
}

fn values(rows: &[serde_json::Value]) -> Vec<(i64, String)> {
    of_table(rows, "p")
        .iter()
        .map(|r| (r["after"]["id"].as_i64().unwrap(), r["after"]["v"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn positions_gtids_rotation_and_purge() {
    let Some(db) = Server::start("live-positions", &[]) else { return };
    db.sql("CREATE DATABASE t; CREATE TABLE t.p (id INT PRIMARY KEY, v VARCHAR(40) NOT NULL)");
    for i in 1..=3 {
        db.sql(&format!("INSERT INTO t.p VALUES ({i}, 'before-{i}')"));
    }
    let (file, pos) = db.master_status();
    let gtid = db.gtid_pos();
    // after the mark: single-row, multi-row, and a multi-statement transaction, an update
    db.sql("INSERT INTO t.p VALUES (4, 'after-4')");
    db.sql("INSERT INTO t.p VALUES (5, 'after-5'), (6, 'after-6')");
    db.sql("BEGIN; INSERT INTO t.p VALUES (7, 'after-7'); INSERT INTO t.p VALUES (8, 'after-8'); COMMIT");
    db.sql("UPDATE t.p SET v = 'updated-2' WHERE id = 2");
    let end = db.master_status();
    let end_gtid = db.gtid_pos();
    let want: Vec<(i64, String)> = table(&db).into_iter().filter(|(id, _)| *id >= 4).collect();
    assert_eq!(want.len(), 5);

    // by file and position
    let pos_s = pos.to_string();
    let run = dump(&db, &["--start-file", &file, "--start-position", &pos_s]).ok();
    let rows = run.rows();
    let inserts: Vec<_> = rows.iter().filter(|r| r["type"] == "INSERT").cloned().collect();
    assert_eq!(values(&inserts), want, "{}", run.stdout);
    let updates: Vec<_> = rows.iter().filter(|r| r["type"] == "UPDATE").collect();
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0]["before"]["v"], "before-2");
    assert_eq!(updates[0]["after"]["v"].as_str().unwrap(), db.scalar("SELECT v FROM t.p WHERE id = 2"));
    assert_eq!(rows.len(), 6, "exactly the transactions after the mark:\n{}", run.stdout);
    // GTIDs of the rows: the four transactions after `gtid`, in order
    let seq: u64 = gtid.rsplit('-').next().unwrap().parse().unwrap();
    let gtids: Vec<String> = rows.iter().map(|r| r["gtid"].as_str().unwrap().to_string()).collect();
    let s = |n: u64| format!("0-1-{}", seq + n);
    assert_eq!(gtids, [s(1), s(2), s(2), s(3), s(3), s(4)]);
    assert_eq!(run.resume_file_pos(), end, "the resume point is the server's end");

    // by MariaDB GTID
    let run = dump(&db, &["--start-gtid", &gtid]).ok();
    let rows = run.rows();
    assert_eq!(values(&rows.iter().filter(|r| r["type"] == "INSERT").cloned().collect::<Vec<_>>()), want);
    assert_eq!(rows.len(), 6, "{}", run.stdout);
    assert!(run.stderr.contains(&format!("--start-gtid '{end_gtid}'")), "{}", run.stderr);
    // and from the end: nothing
    let run = dump(&db, &["--start-gtid", &end_gtid]).ok();
    assert_eq!(run.stdout, "", "{}", run.stderr);

    // rotation while following: FLUSH BINARY LOGS between transactions, nothing lost
    let (file, pos) = db.master_status();
    let first_file = file.clone();
    let mut f = Follower::dump_from(&db, (&file, pos), &["--server-id", "7001"]);
    let mut n = 0;
    for round in 0..4 {
        for _ in 0..5 {
            n += 1;
            db.sql(&format!("INSERT INTO t.p VALUES ({}, 'rot-{round}')", 100 + n));
        }
        // a multi-row transaction right before the rotation
        db.sql(&format!(
            "INSERT INTO t.p VALUES ({}, 'rot-{round}-a'), ({}, 'rot-{round}-b')",
            200 + 2 * round,
            201 + 2 * round
        ));
        n += 2;
        db.sql("FLUSH BINARY LOGS");
    }
    f.wait_lines(n, 30);
    let (last_file, last_pos) = db.master_status();
    assert_ne!(last_file, first_file);
    let run = f.stop();
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let rows = run.rows();
    let got: Vec<(i64, String)> = values(&rows);
    let mut want: Vec<(i64, String)> = table(&db).into_iter().filter(|(id, _)| *id > 100).collect();
    let mut sorted = got.clone();
    sorted.sort();
    want.sort();
    assert_eq!(sorted, want, "every row exactly once");
    assert_eq!(got.len(), n);
    // in commit order: ids 101..105, then 200/201, ...
    let files: std::collections::BTreeSet<&str> =
        rows.iter().map(|r| r["position"]["file"].as_str().unwrap()).collect();
    assert_eq!(files.len(), 4, "rows from four files: {files:?}");
    assert_eq!(run.resume_file_pos(), (last_file.clone(), last_pos), "{}", run.stderr);
    assert_eq!(ids(&rows).len(), n);

    // a purged binlog: a clear message naming the earliest file left
    // (the server keeps a file a dump thread still reads: the follower's thread may take a
    // moment to notice the closed connection)
    let start = std::time::Instant::now();
    let earliest = loop {
        db.sql(&format!("PURGE BINARY LOGS TO '{last_file}'"));
        let earliest = db.column("SHOW BINARY LOGS")[0].clone();
        if earliest == last_file || start.elapsed().as_secs() > 20 {
            break earliest;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(earliest, last_file);
    let run = dump(&db, &["--start-file", &first_file, "--start-position", "4"]);
    assert_ne!(run.code, Some(0), "a purged file must fail:\n{}", run.stderr);
    assert!(run.stdout.is_empty());
    assert!(
        run.stderr.contains(&first_file) && run.stderr.contains(&format!("earliest it has is {earliest}")),
        "{}",
        run.stderr
    );
    // a GTID older than the purged logs: the server's 1236, with the earliest file named
    let run = dump(&db, &["--start-gtid", &gtid]);
    assert_ne!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stderr.contains(&earliest), "{}", run.stderr);
    // a GTID the server never had (strict mode)
    let run = dump(&db, &["--start-gtid", "0-1-999999"]);
    assert_ne!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.is_empty());
}

/// `--start-datetime` and `--stop-datetime` bound a dump from a server as they bound one of
/// files (a dump from a server ignored both, silently, and printed every row): only the rows
/// written in the window, the DDL before it still followed.
#[test]
fn datetimes_bound_a_dump_from_a_server() {
    let Some(db) = Server::start("live-datetimes", &[]) else { return };
    db.sql("CREATE DATABASE t; CREATE TABLE t.p (id INT PRIMARY KEY, v VARCHAR(40) NOT NULL)");
    db.sql("INSERT INTO t.p VALUES (1, 'early')");
    // the binlog's timestamps are whole seconds: a second between the windows' edges
    let second = || std::thread::sleep(std::time::Duration::from_millis(1100));
    second();
    let from = db.scalar("SELECT DATE_FORMAT(UTC_TIMESTAMP(), '%Y-%m-%d %H:%i:%s')");
    db.sql("ALTER TABLE t.p ADD COLUMN w INT NOT NULL DEFAULT 7");
    db.sql("INSERT INTO t.p VALUES (2, 'inside', 8)");
    second();
    let to = db.scalar("SELECT DATE_FORMAT(UTC_TIMESTAMP(), '%Y-%m-%d %H:%i:%s')");
    db.sql("INSERT INTO t.p VALUES (3, 'late', 9)");
    let run = dump(&db, &["--from", "earliest", "--start-datetime", &from, "--stop-datetime", &to]).ok();
    let rows = run.rows();
    assert_eq!(ids(&rows), [2], "{}", run.stdout);
    assert_eq!(rows[0]["after"]["w"], 8, "{}", run.stdout);
    // the window's start only: everything from it on
    let run = dump(&db, &["--from", "earliest", "--start-datetime", &from]).ok();
    assert_eq!(ids(&run.rows()), [2, 3], "{}", run.stdout);
}
