//! Live scenario: the server crashes (SIGKILL) and later restarts cleanly while a writer keeps
//! inserting and `sluice dump --follow` streams; in the end every row the server has appears
//! exactly once, in commit order, and sluice says it reconnected.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{ids, Follower, Server};

/// Transactions the writer commits; each inserts three rows.
const TXS: u64 = 240;

#[test]
fn server_restart_mid_stream() {
    let Some(db) = Server::start("live-restart", &[]) else { return };
    db.sql("CREATE DATABASE t; CREATE TABLE t.r (id BIGINT PRIMARY KEY, tx INT NOT NULL, v VARCHAR(40) NOT NULL)");
    let (file, pos) = db.master_status();
    let mut follower = Follower::dump_from(&db, (&file, pos), &["--heartbeat", "1"]);

    // The writer: one transaction of three rows per step; a failed commit (server down) is
    // retried, and "duplicate entry" on a retry means the first attempt did commit.
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // the writer holds after two thirds until the second restart is under way, so that restart
    // falls mid-stream (a fast writer once finished everything before it, and sluice had no
    // stream left to reconnect to)
    let gate = Arc::new(AtomicBool::new(false));
    let port = db.port;
    let (d2, s2, g2) = (done.clone(), stop.clone(), gate.clone());
    let writer = std::thread::spawn(move || {
        for tx in 1..=TXS {
            if tx == 2 * TXS / 3 + 1 {
                while !g2.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            let sql = format!(
                "INSERT INTO t.r VALUES ({a}, {tx}, 'tx {tx} row 1'), ({b}, {tx}, 'tx {tx} row 2'), ({c}, {tx}, 'tx {tx} row 3')",
                a = tx * 10,
                b = tx * 10 + 1,
                c = tx * 10 + 2
            );
            let started = Instant::now();
            loop {
                match support::try_sql(port, &sql) {
                    Ok(_) => break,
                    Err(e) if e.contains("Duplicate entry") => break,
                    Err(_) if !s2.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(60) => {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) => panic!("tx {tx}: {e}"),
                }
            }
            d2.store(tx, Ordering::SeqCst);
        }
    });

    let wait_for = |n: u64| {
        while done.load(Ordering::SeqCst) < n {
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    wait_for(TXS / 3);
    db.restart(true); // crash
    wait_for(2 * TXS / 3);
    // sluice must be back before the second restart, or one (slow, backed-off) reconnection can
    // span both restarts: a busy CI machine showed exactly that
    follower.wait_lines(3 * (2 * TXS / 3) as usize, 60);
    db.restart(false); // clean shutdown and start
    gate.store(true, Ordering::SeqCst);
    wait_for(TXS);
    stop.store(true, Ordering::SeqCst);
    writer.join().expect("writer");

    let want: Vec<i64> = db.column("SELECT id FROM t.r ORDER BY id").iter().map(|s| s.parse().unwrap()).collect();
    assert_eq!(want.len() as u64, 3 * TXS);
    follower.wait_lines(want.len(), 60);
    // a moment for anything extra (a duplicate) to arrive
    std::thread::sleep(Duration::from_millis(500));
    // the rows after the second restart can only have come through the second reconnection,
    // but wait for its log line rather than race it
    let deadline = Instant::now() + Duration::from_secs(30);
    while follower.stderr().matches("Reconnected").count() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let run = follower.stop();
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let rows = run.rows();
    assert_eq!(ids(&rows), want, "every row exactly once, in commit order");
    // values too
    let values: Vec<Vec<String>> = db.sql("SELECT id, tx, v FROM t.r ORDER BY id");
    for (r, v) in rows.iter().zip(&values) {
        assert_eq!(r["type"], "INSERT");
        assert_eq!(r["after"]["tx"].to_string(), v[1]);
        assert_eq!(r["after"]["v"], v[2].as_str());
    }
    let reconnects = run.stderr.matches("Reconnected").count();
    assert!(reconnects >= 2, "expected two reconnections (crash, restart):\n{}", run.stderr);
    // the resume point is the server's end
    assert_eq!(run.resume_file_pos(), db.master_status(), "{}", run.stderr);
}

/// SIGTERM (or Ctrl-C) stops a busy `sluice dump --source` at the end of the transaction it
/// is printing, with the resume flags. The listener used to be made anew for every event, so a
/// signal that came while an event was being printed (nearly all the time) was lost and the
/// dump went on to the end.
#[test]
fn a_signal_stops_a_busy_dump_at_a_transaction_boundary() {
    let Some(db) = Server::start("live-dump-signal", &[]) else { return };
    let mut sql = String::from(
        "SET SESSION max_recursive_iterations = 10000; CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(40));",
    );
    for k in 0..40 {
        sql.push_str(&format!(
            "INSERT INTO shop.t SELECT {k} * 5000 + n, CONCAT('value number ', n) FROM \
             (WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 5000) SELECT n FROM s) AS s;"
        ));
    }
    db.sql_text(&sql);
    let out_path = db.datadir().join("dump-signal.out");
    let url = db.url("root");
    let mut child = support::sluice_cmd()
        .args(["dump", "--source", &url, "--tls", "disabled", "--from", "earliest"])
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // busy: some rows out, far from all
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(&out_path).map_or(0, |m| m.len()) < 200_000 {
        assert!(Instant::now() < deadline, "the dump printed nothing");
        assert!(child.try_wait().unwrap().is_none(), "the dump ended before the signal");
        std::thread::sleep(Duration::from_millis(5));
    }
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("Interrupted; stopping at the last complete transaction"), "{stderr}");
    assert!(stderr.contains("resume with --start-gtid"), "{stderr}");
    let first = support::Run {
        code: out.status.code(),
        stdout: std::fs::read_to_string(&out_path).unwrap(),
        stderr: stderr.into_owned(),
    };
    let rows: Vec<_> = first.rows().into_iter().filter(|r| r["type"] == "INSERT").collect();
    assert!(rows.len() < 200_000, "stopped early: {} of 200,000 rows", rows.len());
    // whole transactions only, in order: the first N of the 40, every line with its xid
    assert!(rows.iter().all(|r| r["xid"].is_u64()), "a line without its xid");
    assert_eq!(rows.len() % 5000, 0, "{} rows: a transaction cut short", rows.len());
    let printed = ids(&rows);
    assert_eq!(printed, (1..=printed.len() as i64).collect::<Vec<_>>());
    // the resume flags it printed give exactly the rest
    let (file, pos) = first.resume_file_pos();
    let rest = support::dump(&db, &["--start-file", &file, "--start-position", &pos.to_string()]).ok();
    let rest: Vec<_> = rest.rows().into_iter().filter(|r| r["type"] == "INSERT").collect();
    assert_eq!(ids(&rest), ((printed.len() as i64 + 1)..=200_000).collect::<Vec<_>>());
}
