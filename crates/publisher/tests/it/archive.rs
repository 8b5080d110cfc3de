//! `sluice archive` against a real MariaDB: the archived files are byte for byte the server's
//! own (compared with its data directory), after the archiver is SIGKILLed in the middle of a
//! file (its last write torn) and restarted, after the server restarts cleanly and after it
//! crashes, with rotations between; `index.json` lists every file with its size.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

fn archiver(config: &Path, log: &Path) -> Child {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    support::sluice_cmd().args(["archive", "--config"]).arg(config).stdout(Stdio::null()).stderr(log).spawn().unwrap()
}

/// The server's binlog files, oldest first.
fn server_files(server: &support::Server) -> Vec<String> {
    server.column("SHOW BINARY LOGS")
}

/// Waits until the archive holds as many bytes of each of the server's files as the server.
fn wait_caught_up(server: &support::Server, files: &Path, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let behind: Vec<String> = server_files(server)
            .into_iter()
            .filter(|f| {
                let have = std::fs::metadata(files.join(f)).map_or(0, |m| m.len());
                let want = std::fs::metadata(server.datadir().join(f)).map_or(0, |m| m.len());
                have != want
            })
            .collect();
        if behind.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the archive did not catch up with {behind:?}:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn assert_identical(server: &support::Server, files: &Path) {
    let names = server_files(server);
    assert!(names.len() >= 4, "rotations happened: {names:?}");
    for f in &names {
        let ours = std::fs::read(files.join(f)).unwrap_or_else(|e| panic!("{f} is not in the archive: {e}"));
        let theirs = std::fs::read(server.datadir().join(f)).unwrap();
        let first_diff = ours.iter().zip(&theirs).position(|(a, b)| a != b);
        assert!(
            ours == theirs,
            "{f}: the archive's copy ({} bytes) differs from the server's ({} bytes), first at byte {first_diff:?}",
            ours.len(),
            theirs.len()
        );
    }
    let index: Vec<Json> = serde_json::from_slice(&std::fs::read(files.join("index.json")).unwrap()).unwrap();
    let listed: Vec<&str> = index.iter().map(|e| e["file"].as_str().unwrap()).collect();
    assert_eq!(listed, names.iter().map(String::as_str).collect::<Vec<_>>(), "{index:?}");
    for (e, f) in index.iter().zip(&names) {
        let size = std::fs::metadata(server.datadir().join(f)).unwrap().len();
        assert_eq!(e["size"].as_u64(), Some(size), "{e}");
        assert!(e["last_time"].as_u64().is_some(), "{e}");
    }
    // every file but the one the server writes now is complete
    let complete: Vec<bool> = index.iter().map(|e| e["complete"] == true).collect();
    assert!(complete[..complete.len() - 1].iter().all(|c| *c) && !complete[complete.len() - 1], "{index:?}");
}

/// A directory archive of `server` in scratch directory `name`, with heartbeats each second and
/// its metrics served on a free port, `archive` added to its `[archive]` section: the archive's
/// files, the configuration, the archiver's log and the metrics port.
fn metered_archive(server: &support::Server, name: &str, archive: &str) -> (PathBuf, PathBuf, PathBuf, u16) {
    let dir = support::scratch(name);
    let (files, config, log) = (dir.join("files"), dir.join("sluice.toml"), dir.join("archive.log"));
    let metrics_port = support::free_port();
    let toml = format!(
        "[source]\nname = \"{name}\"\nurl = \"{}\"\ntls = \"disabled\"\nheartbeat = \"1s\"\n\n[metrics]\nlisten = \
         \"127.0.0.1:{metrics_port}\"\n\n[archive]\nto = \"{}\"\n{archive}",
        server.url("root"),
        files.display()
    );
    std::fs::write(&config, toml).unwrap();
    (files, config, log, metrics_port)
}

#[test]
fn archived_files_are_the_servers_own() {
    let Some(server) = support::Server::start("archive", &[]) else { return };
    let (files, config, log, metrics_port) = metered_archive(&server, "archive", "");
    server.sql("CREATE DATABASE ar; CREATE TABLE ar.t (id INT AUTO_INCREMENT PRIMARY KEY, v TEXT, n INT)");
    let stop = Arc::new(AtomicBool::new(false));
    let port = server.port;
    let workload = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                // rows of a few hundred bytes to a few KB; the server may be restarting
                let _ = support::try_sql(
                    port,
                    &format!("INSERT INTO ar.t (v, n) VALUES (REPEAT('x{n}', {}), {n})", 50 + n % 700),
                );
                let _ = support::try_sql(port, &format!("UPDATE ar.t SET n = n + 1 WHERE id = {}", 1 + n % 50));
                std::thread::sleep(Duration::from_millis(2));
            }
            n
        })
    };

    // bad configurations: exit 2
    let bad = config.with_file_name("bad.toml");
    std::fs::write(&bad, std::fs::read_to_string(&config).unwrap() + "server_id = 51001\n").unwrap();
    let out = support::sluice_cmd().args(["archive", "--config"]).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("archive.server_id"));

    let mut a = support::kafka::Running(archiver(&config, &log));
    std::thread::sleep(Duration::from_secs(2));
    server.sql("FLUSH BINARY LOGS");
    std::thread::sleep(Duration::from_millis(1500));
    // killed in the middle of a file, its last write torn
    a.kill().unwrap();
    a.wait().unwrap();
    let newest = server_files(&server).pop().unwrap();
    let torn = files.join(&newest);
    let len = std::fs::metadata(&torn).unwrap().len();
    assert!(len > 4, "the archiver wrote {newest}");
    tear(&torn);
    let mut a = support::kafka::Running(archiver(&config, &log));
    std::thread::sleep(Duration::from_secs(1));
    server.sql("FLUSH BINARY LOGS");
    std::thread::sleep(Duration::from_secs(1));
    // the server restarts (a STOP ends its file, a new one begins), then crashes
    server.restart(false);
    std::thread::sleep(Duration::from_secs(2));
    server.restart(true);
    std::thread::sleep(Duration::from_secs(2));
    server.sql("FLUSH BINARY LOGS");
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let writes = workload.join().unwrap();
    assert!(writes > 100, "the workload ran ({writes} rounds)");
    wait_caught_up(&server, &files, &log);
    // its metrics: what it wrote, where it stands against the server
    let (status, _) = support::http_get(metrics_port, "/readyz");
    assert_eq!(status, 200);
    let (_, text) = support::http_get(metrics_port, "/metrics");
    let value = |name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {text}"))
    };
    assert!(value("sluice_archive_bytes_total") > 100_000.0, "{text}");
    assert!(value("sluice_archive_files_total") >= 3.0, "{text}");
    assert!(value("sluice_archive_restarts_total") >= 2.0, "the server's restarts: {text}");
    for gauge in ["sluice_archive_lag_bytes", "sluice_archive_purge_margin_bytes", "sluice_archive_lag_seconds"] {
        value(gauge);
    }
    // a signal stops it cleanly
    Command::new("kill").args(["-TERM", &a.id().to_string()]).status().unwrap();
    let status = a.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("cutting it there"), "the torn tail was cut: {text}");
    assert_identical(&server, &files);

    // --until-end on a stopped-then-continued archive: nothing to add, the same bytes
    server.sql("INSERT INTO ar.t (v, n) VALUES ('last', 0)");
    let out = support::sluice_cmd().args(["archive", "--until-end", "--config"]).arg(&config).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_identical(&server, &files);

    // a time range dumped from the archive (its index picks the files) equals the same range
    // dumped from the server's own files
    let index: Vec<Json> = serde_json::from_slice(&std::fs::read(files.join("index.json")).unwrap()).unwrap();
    let (from, to) = (index[1]["first_time"].as_u64().unwrap() + 1, index[3]["last_time"].as_u64().unwrap());
    let utc = |t: u64| server.scalar(&format!("SET time_zone = '+00:00'; SELECT FROM_UNIXTIME({t})"));
    let range = ["--start-datetime".to_string(), utc(from), "--stop-datetime".to_string(), utc(to)];
    let archived = support::sluice_cmd().arg("dump").args(&range).arg(&files).output().unwrap();
    let originals: Vec<PathBuf> = server_files(&server).iter().map(|f| server.datadir().join(f)).collect();
    let original = support::sluice_cmd().arg("dump").args(&range).args(&originals).output().unwrap();
    assert!(archived.status.success() && original.status.success(), "{}", String::from_utf8_lossy(&archived.stderr));
    // the same lines, but for the directory a row's file was read from
    let lines = |o: &std::process::Output| rows_of(&String::from_utf8_lossy(&o.stdout));
    let (a, o) = (lines(&archived), lines(&original));
    let rows = a.len();
    assert!(rows > 10, "the range holds rows: {range:?}");
    assert!(a == o, "the same {rows} rows from the archive as from the server's files ({} there)", o.len());
    let read = |o: &std::process::Output| {
        String::from_utf8_lossy(&o.stderr).lines().filter(|l| l.contains(" events, ")).count()
    };
    assert!(read(&archived) < read(&original), "the index spared files: {} of {}", read(&archived), read(&original));

    // the usual starts on the archive, against the server's own dump from the same start: after a
    // GTID state (the index spares the files it holds whole), and from a file
    let parse = rows_of;
    let names = server_files(&server);
    let gtid = index[2]["last_gtid"].as_str().unwrap().to_string();
    let from_archive = support::sluice_cmd().args(["dump", "--start-gtid", &gtid]).arg(&files).output().unwrap();
    let from_server = support::dump(&server, &["--start-gtid", &gtid]).ok();
    assert!(from_archive.status.success(), "{}", String::from_utf8_lossy(&from_archive.stderr));
    let (ours, theirs) = (parse(&String::from_utf8_lossy(&from_archive.stdout)), parse(&from_server.stdout));
    assert!(
        ours.len() > 10 && ours == theirs,
        "after {gtid}: {} rows from the archive, {} from the server",
        ours.len(),
        theirs.len()
    );
    assert!(read(&from_archive) <= names.len() - 3, "the index spared the files {gtid} holds");
    let second = names[3].as_str();
    let from_archive = support::sluice_cmd().args(["dump", "--start-file", second]).arg(&files).output().unwrap();
    let from_server = support::dump(&server, &["--start-file", second]).ok();
    let (ours, theirs) = (parse(&String::from_utf8_lossy(&from_archive.stdout)), parse(&from_server.stdout));
    assert!(
        ours.len() > 10 && ours == theirs,
        "from {second}: {} rows from the archive, {} from the server",
        ours.len(),
        theirs.len()
    );
    let missing =
        support::sluice_cmd().args(["dump", "--start-file", "mysql-bin.999999"]).arg(&files).output().unwrap();
    assert_eq!(missing.status.code(), Some(66), "{}", String::from_utf8_lossy(&missing.stderr));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("is not in the archive"));

    // archive.compress = "gzip": the completed files gzipped (each the server's bytes once
    // decompressed), the one being written plain; a dump reads them as they are
    let gz = config.with_file_name("gz");
    let out = support::sluice_cmd()
        .args(["archive", "--until-end", "--config"])
        .arg(&config)
        .env("SLUICE_ARCHIVE__TO", &gz)
        .env("SLUICE_ARCHIVE__COMPRESS", "gzip")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let names = server_files(&server);
    let (newest, complete) = names.split_last().unwrap();
    for f in complete {
        assert!(!gz.join(f).exists(), "{f} is replaced by its gzip");
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::MultiGzDecoder::new(std::fs::File::open(gz.join(format!("{f}.gz"))).unwrap()),
            &mut bytes,
        )
        .unwrap();
        assert!(bytes == std::fs::read(server.datadir().join(f)).unwrap(), "{f}.gz decompresses to the server's file");
    }
    assert!(std::fs::read(gz.join(newest)).unwrap() == std::fs::read(server.datadir().join(newest)).unwrap());
    let index: Vec<Json> = serde_json::from_slice(&std::fs::read(gz.join("index.json")).unwrap()).unwrap();
    assert_eq!(index[0]["stored"], format!("{}.gz", names[0]), "{index:?}");
    let zipped = support::sluice_cmd().arg("dump").args(&range).arg(&gz).output().unwrap();
    let mut z = lines(&zipped);
    for j in &mut z {
        let f = j["position"]["file"].as_str().unwrap().trim_end_matches(".gz").to_string();
        j["position"]["file"] = Json::String(f);
    }
    assert!(z == o, "the range from the gzipped archive: {} rows", z.len());
    // a complete file cut after it was archived: refused as damaged input (65), naming it
    let first_gz = gz.join(format!("{}.gz", names[0]));
    let len = std::fs::metadata(&first_gz).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&first_gz).unwrap().set_len(len - 10).unwrap();
    let cut = support::sluice_cmd().arg("dump").arg(&gz).output().unwrap();
    let err = String::from_utf8_lossy(&cut.stderr);
    assert_eq!(cut.status.code(), Some(65), "{err}");
    assert!(err.contains(&names[0]) && err.contains("cut or changed"), "{err}");
    assert!(cut.stdout.is_empty(), "nothing dumped from a damaged archive");

    // archive.keep_size: the oldest complete files go while the archive holds more, never the
    // newest complete one; what stays is the server's, and the index lists only it
    let sizes: Vec<u64> = names.iter().map(|f| std::fs::metadata(server.datadir().join(f)).unwrap().len()).collect();
    let limit = sizes.iter().sum::<u64>() / 2;
    let mut total: u64 = sizes.iter().sum();
    let mut expected_gone = 0;
    while expected_gone + 2 < names.len() && total > limit {
        total -= sizes[expected_gone];
        expected_gone += 1;
    }
    assert!(expected_gone >= 1, "the limit removes something: {sizes:?}");
    let kept = config.with_file_name("kept");
    let out = support::sluice_cmd()
        .args(["archive", "--until-end", "--config"])
        .arg(&config)
        .env("SLUICE_ARCHIVE__TO", &kept)
        .env("SLUICE_ARCHIVE__KEEP_SIZE", limit.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let index: Vec<Json> = serde_json::from_slice(&std::fs::read(kept.join("index.json")).unwrap()).unwrap();
    let listed: Vec<&str> = index.iter().map(|e| e["file"].as_str().unwrap()).collect();
    assert_eq!(listed, names[expected_gone..].iter().map(String::as_str).collect::<Vec<_>>(), "{index:?}");
    for (i, f) in names.iter().enumerate() {
        let held = std::fs::read(kept.join(f));
        if i < expected_gone {
            assert!(held.is_err(), "{f} removed by the retention");
        } else {
            assert!(held.unwrap() == std::fs::read(server.datadir().join(f)).unwrap(), "{f} kept whole");
        }
    }
    eprintln!("archive: {} files identical to the server's; {rows} rows of a range dumped alike", names.len());
}

/// The archiver's second connection, which asks the server where it stands for the lag and
/// purge-margin metrics, killed on the server: before, it was never made again, and
/// `sluice_archive_purge_margin_bytes` kept its last value while the server purged everything
/// before the file being copied (the alert meant to warn of that could not fire).
#[test]
fn the_purge_margin_follows_the_server_after_its_connection_is_lost() {
    let Some(server) = support::Server::start("archive-side", &[]) else { return };
    let (_files, config, log, metrics_port) = metered_archive(&server, "archive-side", "start = \"earliest\"\n");
    server.sql_text(
        "CREATE DATABASE side; CREATE TABLE side.t (id INT PRIMARY KEY, v TEXT); INSERT INTO side.t VALUES \
         (1, REPEAT('x', 5000)); FLUSH BINARY LOGS; INSERT INTO side.t VALUES (2, 'y'); FLUSH BINARY LOGS;",
    );
    // killed when an assertion fails, not left running
    struct Stop(Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut a = Stop(archiver(&config, &log));
    let margin = || -> Option<f64> {
        // the endpoint opens when the archiver has started
        std::net::TcpStream::connect(("127.0.0.1", metrics_port)).ok()?;
        let (_, text) = support::http_get(metrics_port, "/metrics");
        text.lines()
            .find(|l| l.starts_with("sluice_archive_purge_margin_bytes"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    };
    let wait_margin = |ok: &dyn Fn(f64) -> bool, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !margin().is_some_and(ok) {
            assert!(
                Instant::now() < deadline,
                "the purge margin {:?} is not {what}:\n{}",
                margin(),
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait_margin(&|m| m > 0.0, "above 0 (older files to purge)");
    // the archiver's idle side connection (its dump is `Binlog Dump`, the client's is busy)
    let side = server.column(
        "SELECT id FROM information_schema.processlist WHERE user = 'root' AND command = 'Sleep' AND id <> \
         CONNECTION_ID()",
    );
    assert_eq!(side.len(), 1, "one side connection: {side:?}");
    server.sql_text(&format!("KILL {}", side.first().unwrap()));
    let newest = server_files(&server).pop().unwrap();
    server.purge_to(&newest);
    wait_margin(&|m| m == 0.0, "0 after the purge");
    Command::new("kill").args(["-TERM", &a.0.id().to_string()]).status().unwrap();
    assert_eq!(a.0.wait().unwrap().code(), Some(0));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("asking again on a new connection"), "{text}");
}

/// A directory archive of `server` from its earliest file (scratch directory `name`): the
/// archive's files and its configuration.
fn earliest_archive(server: &support::Server, name: &str) -> (PathBuf, PathBuf) {
    let dir = support::scratch(name);
    let (files, config) = (dir.join("files"), dir.join("sluice.toml"));
    let toml = format!(
        "[source]\nname = \"{name}\"\nurl = \"{}\"\ntls = \"disabled\"\n\n[archive]\nto = \"{}\"\nstart = \"earliest\"\n",
        server.url("root"),
        files.display()
    );
    std::fs::write(&config, toml).unwrap();
    (files, config)
}

/// Files written with `binlog_checksum=NONE` between CRC32 ones, then the server's setting
/// NONE itself: the server writes the dump's artificial ROTATE with the checksum of the file it
/// last read, so read with the setting's it lost four characters of the next file's name (an
/// archive held `mysql-bin.000003` as 4 bytes and the rest as `mysql-bin.00`; `dump --source`
/// called the stream damaged). Archived byte for byte, dumped whole from the archive and from
/// the server.
#[test]
fn files_without_checksums_are_archived_as_they_are() {
    let Some(server) = support::Server::start("archive-none", &[]) else { return };
    let (files, config) = earliest_archive(&server, "archive-none");
    server.sql("CREATE DATABASE nc; CREATE TABLE nc.t (id INT PRIMARY KEY, v VARCHAR(40))");
    server.sql("SET GLOBAL binlog_checksum = 'NONE'; INSERT INTO nc.t VALUES (1, 'no checksum')");
    server.sql("SET GLOBAL binlog_checksum = 'CRC32'; INSERT INTO nc.t VALUES (2, 'checksum')");
    server.sql("FLUSH BINARY LOGS; INSERT INTO nc.t VALUES (3, 'after a flush')");
    let until_end = || {
        let out = support::sluice_cmd().args(["archive", "--until-end", "--config"]).arg(&config).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    };
    until_end();
    assert_identical(&server, &files);
    // the server's setting NONE now: the dump's first ROTATE has no checksum either
    server.sql("SET GLOBAL binlog_checksum = 'NONE'; INSERT INTO nc.t VALUES (4, 'none again')");
    until_end();
    assert_identical(&server, &files);
    let ids = |o: &std::process::Output| -> Vec<i64> {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let rows = rows_of(&String::from_utf8_lossy(&o.stdout));
        rows.iter().filter(|r| r["table"] == "t").map(|r| r["after"]["id"].as_i64().unwrap()).collect()
    };
    let archived = support::sluice_cmd().arg("dump").arg(&files).output().unwrap();
    assert_eq!(ids(&archived), [1, 2, 3, 4], "the archive's rows");
    let url = server.url("root");
    let live = support::sluice_cmd().args(["dump", "--tls", "disabled", "--source", &url]).output().unwrap();
    assert_eq!(ids(&live), [1, 2, 3, 4], "the server's rows, read live with its setting NONE");
}

/// RESET MASTER under an archive: the server's new `mysql-bin.000001` has the same name as the
/// archived one and, holding only its first events, the same size, so the dump's events line
/// up with the archive's end. Its bytes were appended to the old file's (exit 0, GTIDs gone
/// from the archive, found by a hostile trial); the FDE the dump sends again must be the
/// archived file's, and is not: the archiver stops, naming the cause.
#[test]
fn a_reset_binlog_is_not_joined_to_the_archived_file() {
    let Some(server) = support::Server::start("archive-reset", &[]) else { return };
    let (files, config) = earliest_archive(&server, "archive-reset");
    let until_end =
        || support::sluice_cmd().args(["archive", "--until-end", "--config"]).arg(&config).output().unwrap();
    server.sql("RESET MASTER");
    let (first, size) = server.master_status();
    let out = until_end();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let archived = std::fs::read(files.join(&first)).unwrap();
    assert_eq!(archived.len() as u64, size);
    // a second later (the FDE's timestamp has seconds), the same name and size again
    std::thread::sleep(Duration::from_millis(1100));
    server.sql("RESET MASTER");
    assert_eq!(server.master_status(), (first.clone(), size), "the new file is as long as the archived one");
    server.sql("CREATE DATABASE rs; CREATE TABLE rs.t (id INT PRIMARY KEY); INSERT INTO rs.t VALUES (1)");
    let out = until_end();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("{first}: the server's file of this name is not the one the archive holds")),
        "{err}"
    );
    assert!(err.contains("RESET MASTER"), "{err}");
    assert_eq!(std::fs::read(files.join(&first)).unwrap(), archived, "the archived file is left as it was");
}

/// `sluice dump` JSON lines, each row's `position.file` cut to the file's name (the same
/// binlog read from the data directory, an archive or a store differs only there).
fn rows_of(text: &str) -> Vec<Json> {
    text.lines()
        .map(|l| {
            let mut j: Json = serde_json::from_str(l).unwrap();
            let file = j["position"]["file"].as_str().unwrap().rsplit('/').next().unwrap().to_string();
            j["position"]["file"] = Json::String(file);
            j
        })
        .collect()
}

/// Appends a torn event to `path`, as a kill in the middle of a write leaves: a header that
/// promises 5000 bytes, and 30 of them.
fn tear(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    let mut half = vec![0u8; 19 + 30];
    half[9..13].copy_from_slice(&5000u32.to_le_bytes());
    f.write_all(&half).unwrap();
}

/// Whether the archive's `index.json` (its text, when there is one) lists each of `names`
/// complete: the archiver writes the index after the file (in a store, after the upload), and
/// `sluice check` and `sluice run` trust the index, not the file's size.
fn index_lists_complete(index: Option<&[u8]>, names: &[String]) -> bool {
    let Some(index) = index else { return false };
    let Ok(Json::Array(entries)) = serde_json::from_slice::<Json>(index) else { return false };
    names.iter().all(|f| entries.iter().any(|e| e["file"] == f.as_str() && e["complete"] == true))
}

/// Waits until the archive in `files` holds each of `names` whole (as many bytes as the
/// server's) and its index says so.
fn wait_archived(server: &support::Server, files: &Path, names: &[String], log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !names.iter().all(|f| {
        std::fs::metadata(files.join(f)).map_or(0, |m| m.len())
            == std::fs::metadata(server.datadir().join(f)).map_or(1, |m| m.len())
    }) || !index_lists_complete(std::fs::read(files.join("index.json")).ok().as_deref(), names)
    {
        assert!(Instant::now() < deadline, "the archive did not take {names:?}:\n{}", support::kafka::log_text(log));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Occurrences of `needle` in the log.
fn count_in(log: &Path, needle: &str) -> usize {
    support::kafka::log_text(log).matches(needle).count()
}

/// Waits (polling every few milliseconds) until `needle` occurs more than `before` times.
fn wait_log(log: &Path, needle: &str, before: usize, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while count_in(log, needle) <= before {
        assert!(Instant::now() < deadline, "no new {needle:?} in the log:\n{}", support::kafka::log_text(log));
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `sluice run` with `source.archive`, against MariaDB, the broker and the registry: the
/// pipeline is stopped, the server purges the binlog of its checkpoint while the changes go on
/// (the archiver keeps them), and the restarted pipeline catches up from the archive and
/// switches to the server's stream; it is SIGKILLed once during a catch-up and once at the
/// switch. Every change must be in Kafka exactly once and in order per key (the records read
/// back by an independent read_committed consumer), and the last record of each key must equal
/// `SELECT`.
#[test]
fn run_catches_up_from_the_archive_after_a_purge() {
    catch_up("archive-catchup", false);
}

/// As [`run_catches_up_from_the_archive_after_a_purge`], with the archive in an S3-compatible
/// store (moto on loopback): the archiver uploads from its spool, `sluice run` downloads.
#[test]
fn run_catches_up_from_an_archive_in_an_object_store() {
    catch_up("archive-catchup-s3", true);
}

fn catch_up(name: &str, in_store: bool) {
    use support::kafka::{start_sluice, wait_for, Services, TopicReader};
    let Some(services) = Services::start(name, &[]) else { return };
    let server = &services.mariadb;
    let dir = support::scratch(name);
    let files: PathBuf = dir.join("files");
    let archive_config = dir.join("archive.toml");
    let archive_log = dir.join("archive.log");
    // where the archive is, as the archiver and sluice run name it
    let (target, archive_extra, run_extra, bucket, _s3) = if in_store {
        let endpoint = support::lib_started("s3", &["start", name], "S3_ENDPOINT").expect("the S3 server");
        let creds = dir.join("s3.credentials");
        std::fs::write(
            &creds,
            format!(
                "aws_access_key_id = test\naws_secret_access_key = test\naws_region = us-east-1\naws_endpoint = \
                 {endpoint}\naws_allow_http = true\n"
            ),
        )
        .unwrap();
        let url = format!("s3://sluice/{name}");
        (
            url.clone(),
            format!("spool = \"{}\"\ncredentials_file = \"{}\"\n", files.display(), creds.display()),
            format!("archive_credentials_file = \"{}\"\n", creds.display()),
            Some((Bucket::new(&endpoint), name.to_string())),
            Some(S3Stop(name.to_string())),
        )
    } else {
        (files.display().to_string(), String::new(), String::new(), None, None)
    };
    std::fs::write(
        &archive_config,
        format!(
            "[source]\nname = \"archive\"\nurl = \"{}\"\ntls = \"disabled\"\nheartbeat = \"1s\"\n\n[archive]\nto = \
             \"{target}\"\n{archive_extra}",
            server.url("root"),
        ),
    )
    .unwrap();
    let metrics_port = support::free_port();
    let (config, log) = services.config("catchup", "", &format!("[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n"));
    let toml = std::fs::read_to_string(&config).unwrap();
    let toml =
        toml.replace("start = \"earliest\"\n", &format!("start = \"earliest\"\narchive = \"{target}\"\n{run_extra}"));
    // small Kafka transactions: a catch-up of many commits, long enough to be killed in the middle
    // (a commit takes a few milliseconds)
    assert!(toml.contains("batch_max_records = 50\n"));
    let toml = toml.replace("batch_max_records = 50\n", "batch_max_records = 10\n");
    std::fs::write(&config, toml).unwrap();
    // whether the archive holds `names` whole
    let wait_archived = |names: &[String]| match &bucket {
        None => wait_archived(server, &files, names, &archive_log),
        Some((b, prefix)) => {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !names.iter().all(|f| {
                b.get(&format!("{prefix}/{f}")).map(|v| v.len() as u64)
                    == std::fs::metadata(server.datadir().join(f)).ok().map(|m| m.len())
            }) || !index_lists_complete(b.get(&format!("{prefix}/index.json")).as_deref(), names)
            {
                assert!(
                    Instant::now() < deadline,
                    "not uploaded: {names:?}\n{}",
                    support::kafka::log_text(&archive_log)
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };

    const KEYS: i64 = 300;
    let mut expected: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    let values: String = (1..=KEYS).map(|k| format!("({k}, 0, 'v0')")).collect::<Vec<_>>().join(",");
    server.sql_text(&format!(
        "CREATE DATABASE ar; CREATE TABLE ar.k (id INT PRIMARY KEY, n INT NOT NULL, note VARCHAR(20)); INSERT INTO \
         ar.k VALUES {values};"
    ));
    for k in 1..=KEYS {
        expected.insert(k, vec!["c:v0".into()]);
    }
    let first_file = server_files(server).remove(0);
    // where the INSERT's TABLE_MAP is in it (the file is purged later)
    let events = support::sluice_cmd().args(["dump", "--events"]).arg(server.datadir().join(&first_file)).output();
    let first_table_map = String::from_utf8_lossy(&events.unwrap().stdout)
        .lines()
        .map(|l| serde_json::from_str::<Json>(l).unwrap())
        .find(|e| e["event"] == "TABLE_MAP_EVENT")
        .map(|e| e["position"]["offset"].as_u64().unwrap())
        .expect("the INSERT's TABLE_MAP");
    // every round changes every key once, in one transaction; a rotation every tenth
    let round = |r: i64| {
        let mut sql = format!("UPDATE ar.k SET n = {r}, note = 'v{r}';");
        if r % 10 == 0 {
            sql.push_str("FLUSH BINARY LOGS;");
        }
        sql
    };
    let mut archiver_proc = support::kafka::Running(archiver(&archive_config, &archive_log));
    let mut run = start_sluice(&config, &log);
    let mut reader = TopicReader::new(&services);
    let topic = "sluice.ar.k";
    wait_for(60, || reader.per_key(topic, "note") == expected, "the first rows", &log);
    run.kill().unwrap();
    run.wait().unwrap();

    // stopped: 60 rounds (18,000 changes over 7 files, a server restart among them), archived, then
    // purged on the server
    let mut r = 0;
    let purge_all = |r: &mut i64, rounds: i64, expected: &mut BTreeMap<i64, Vec<String>>, restart: bool| {
        for i in 0..rounds {
            if restart && i == rounds / 2 {
                // a file the server ends with a STOP: the next one follows without a ROTATE
                server.restart(false);
            }
            *r += 1;
            server.sql_text(&round(*r));
            for k in 1..=KEYS {
                expected.get_mut(&k).unwrap().push(format!("u:v{r}"));
            }
        }
        server.sql("FLUSH BINARY LOGS");
        let mut names = server_files(server);
        let newest = names.pop().unwrap();
        wait_archived(&names);
        server.purge_to(&newest);
    };
    purge_all(&mut r, 60, &mut expected, true);

    // the changes go on while the pipeline restarts, is killed and restarts again
    let stop = Arc::new(AtomicBool::new(false));
    let port = server.port;
    let writer = {
        let stop = Arc::clone(&stop);
        let start = r;
        std::thread::spawn(move || {
            let mut r = start;
            while !stop.load(Ordering::Relaxed) {
                r += 1;
                let mut sql = format!("UPDATE ar.k SET n = {r}, note = 'v{r}' WHERE id % 7 = {};", r % 7);
                if r % 25 == 0 {
                    sql.push_str("FLUSH BINARY LOGS;");
                }
                support::try_sql(port, &sql).unwrap();
                std::thread::sleep(Duration::from_millis(100));
            }
            r
        })
    };
    let catching_up = "catching up from the archive";
    let switching = "Handing over from the archive";
    // killed during the catch-up ...
    let before = count_in(&log, catching_up);
    let mut run = start_sluice(&config, &log);
    wait_log(&log, catching_up, before, 60);
    std::thread::sleep(Duration::from_millis(500));
    run.kill().unwrap();
    run.wait().unwrap();
    assert_eq!(count_in(&log, switching), 0, "killed before the switch:\n{}", support::kafka::log_text(&log));
    // ... and at the switch to the server's stream (the checkpoint is still in the purged files)
    let before = count_in(&log, catching_up);
    let mut run = start_sluice(&config, &log);
    wait_log(&log, catching_up, before, 60);
    wait_log(&log, switching, 0, 120);
    run.kill().unwrap();
    run.wait().unwrap();
    // stopped once more, its checkpoint's files purged again, and this time left to finish
    stop.store(true, Ordering::Relaxed);
    let last = writer.join().unwrap();
    // the writer's rounds touched every seventh key
    for w in r + 1..=last {
        for k in (1..=KEYS).filter(|k| k % 7 == w % 7) {
            expected.get_mut(&k).unwrap().push(format!("u:v{w}"));
        }
    }
    r = last;
    purge_all(&mut r, 20, &mut expected, false);
    // `sluice check` sees the purged checkpoint, and that the archive covers it
    let out = support::sluice_cmd().args(["check", "--config"]).arg(&config).output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        report.contains("is no longer on the server, but the archive in") && report.contains("covers the gap"),
        "{report}"
    );
    // ... and so does `sluice position show`, which must not advise moving the checkpoint
    let out = support::sluice_cmd().args(["position", "show", "--config"]).arg(&config).output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{shown}{}", String::from_utf8_lossy(&out.stderr));
    assert!(shown.contains("covers the gap") && !shown.contains("position set"), "{shown}");
    let before = count_in(&log, catching_up);
    let _run = start_sluice(&config, &log);
    wait_log(&log, catching_up, before, 60);
    wait_for(180, || reader.per_key(topic, "note") == expected, "every change exactly once, in order", &log);
    let got = reader.per_key(topic, "note");
    for row in server.sql("SELECT id, note FROM ar.k") {
        let id: i64 = row[0].parse().unwrap();
        assert_eq!(got[&id].last(), Some(&format!("u:{}", row[1])), "key {id}: the last record is the row");
    }
    let text = support::kafka::log_text(&log);
    assert!(text.contains("Caught up from the archive: streaming from the server"), "{text}");
    let (_, metrics) = support::http_get(metrics_port, "/metrics");
    assert!(metrics.contains("sluice_source_archive_switches_total{source=\"catchup\"} 1"), "{metrics}");
    assert!(metrics.contains("sluice_source_archive_reading{source=\"catchup\"} 0"), "{metrics}");

    // `position set` to a file the server purged: taken when the archive holds it, the position
    // checked against the archived copy
    drop(_run);
    let set = |to: &str| {
        // the killed instance's connection lingers on the server for a few heartbeats
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = support::sluice_cmd()
                .args(["position", "set", "--force", "--to", to, "--config"])
                .arg(&config)
                .output()
                .unwrap();
            if !String::from_utf8_lossy(&out.stderr).contains("is connected to the server") || Instant::now() > deadline
            {
                return out;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    let out = set(&format!("{first_file}:5"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not where an event starts") && err.contains(&first_file), "{err}");
    // ... and one inside a transaction (the INSERT's TABLE_MAP): its start would be lost
    let out = set(&format!("{first_file}:{first_table_map}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is inside a transaction") && err.contains("TABLE_MAP"), "{err}");
    let out = set(&format!("{first_file}:4"));
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("is no longer on the server") && said.contains(&format!("checkpoint set to {first_file}:4")));
    let out = support::sluice_cmd().args(["position", "show", "--config"]).arg(&config).output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains(&first_file) && shown.contains("covers the gap"), "{shown}");
    // ... and `sluice run` publishes again from there: the archive first, then the server
    let before = count_in(&log, switching);
    let again = start_sluice(&config, &log);
    wait_log(&log, switching, before, 120);
    drop(again);

    // the archive does not reach back to the checkpoint any more: the start says why and stops
    let _ = archiver_proc.kill();
    let _ = archiver_proc.wait();
    server.sql("UPDATE ar.k SET n = 0 WHERE id = 1; FLUSH BINARY LOGS");
    let newest = server_files(server).pop().unwrap();
    server.purge_to(&newest);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    // (a directory holds the file the archiver was writing; a store only completed files)
    let gap = |t: &str| t.contains("server's oldest binlog") || t.contains("does not hold");
    assert!(err.contains("the archive in") && gap(&err), "{err}");
    let out = support::sluice_cmd().args(["check", "--config"]).arg(&config).output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(report.contains("[ERROR] checkpoint:") && report.contains("source.archive does not help"), "{report}");
    // with snapshot.mode = "when_needed" that gap means a new snapshot, the reason said
    let before = count_in(&log, "taking a new snapshot");
    let _run = support::kafka::start_sluice_with(
        &config,
        &log,
        &[("SLUICE_SNAPSHOT__MODE", "when_needed"), ("SLUICE_SOURCE__START", "current")],
    );
    wait_log(&log, "taking a new snapshot", before, 60);
    let text = support::kafka::log_text(&log);
    let line = text.lines().rfind(|l| l.contains("taking a new snapshot")).unwrap();
    assert!(gap(line), "the archive's gap is the reason: {line}");
}

/// Stops the S3 server of a scenario.
struct S3Stop(String);

impl Drop for S3Stop {
    fn drop(&mut self) {
        let _ = support::lib_sh("s3", &["stop", &self.0]);
    }
}

/// The test's own reader of the local S3-compatible server (object_store, the same crate Sluice
/// uses, but none of Sluice's code): object `key` of bucket `sluice`, or None.
struct Bucket {
    store: object_store::aws::AmazonS3,
    rt: tokio::runtime::Runtime,
}

impl Bucket {
    fn new(endpoint: &str) -> Bucket {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let store = object_store::aws::AmazonS3Builder::new()
            .with_bucket_name("sluice")
            .with_region("us-east-1")
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_access_key_id("test")
            .with_secret_access_key("test")
            .build()
            .unwrap();
        Bucket { store, rt: tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap() }
    }

    fn get(&self, key: &str) -> Option<Vec<u8>> {
        use object_store::ObjectStoreExt;
        self.rt.block_on(async {
            match self.store.get(&object_store::path::Path::from(key)).await {
                Ok(r) => Some(r.bytes().await.unwrap().to_vec()),
                Err(object_store::Error::NotFound { .. }) => None,
                Err(e) => panic!("reading {key}: {e}"),
            }
        })
    }
}

/// `sluice archive` into an S3-compatible store (moto on loopback): completed files uploaded
/// from the spool, byte for byte the server's own, after a SIGKILL with a torn write in the spool
/// and a server restart; the store's index lists them; the spool keeps only the file being
/// written (and the newest complete one); `sluice dump` of a time range read from the store
/// equals the same range dumped from the server's files.
#[test]
fn archive_in_an_object_store() {
    let Some(server) = support::Server::start("archive-s3", &[]) else { return };
    let endpoint = match support::lib_started("s3", &["start", "archive-s3"], "S3_ENDPOINT") {
        Ok(e) => e,
        Err(e) if std::env::var_os("SLUICE_REQUIRE_MARIADB").is_some() => panic!("s3: {e}"),
        Err(e) => {
            eprintln!("\n*** SKIPPING archive_in_an_object_store: cannot start the S3 server: {e} ***\n");
            return;
        }
    };
    let _stop = S3Stop("archive-s3".into());
    let dir = support::scratch("archive-s3");
    let spool = dir.join("spool");
    let creds = dir.join("s3.credentials");
    // the secret must never be printed
    let secret = "s3cr3t-never-printed";
    std::fs::write(
        &creds,
        format!(
            "# a mounted secret\naws_access_key_id = test\naws_secret_access_key = \"{secret}\"\naws_region = \
             us-east-1\naws_endpoint = {endpoint}\naws_allow_http = true\n"
        ),
    )
    .unwrap();
    let config = dir.join("sluice.toml");
    let log = dir.join("archive.log");
    std::fs::write(
        &config,
        format!(
            "[source]\nname = \"archive\"\nurl = \"{}\"\ntls = \"disabled\"\nheartbeat = \"1s\"\n\n[archive]\nto = \
             \"s3://sluice/archives/one\"\nspool = \"{}\"\ncredentials_file = \"{}\"\n",
            server.url("root"),
            spool.display(),
            creds.display()
        ),
    )
    .unwrap();
    server.sql("CREATE DATABASE ar; CREATE TABLE ar.t (id INT AUTO_INCREMENT PRIMARY KEY, v TEXT, n INT)");
    let stop = Arc::new(AtomicBool::new(false));
    let port = server.port;
    let workload = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let _ = support::try_sql(
                    port,
                    &format!("INSERT INTO ar.t (v, n) VALUES (REPEAT('x{n}', {}), {n})", 50 + n % 700),
                );
                std::thread::sleep(Duration::from_millis(3));
            }
        })
    };
    let mut a = support::kafka::Running(archiver(&config, &log));
    std::thread::sleep(Duration::from_secs(2));
    server.sql("FLUSH BINARY LOGS");
    std::thread::sleep(Duration::from_millis(1500));
    a.kill().unwrap();
    a.wait().unwrap();
    let newest = server_files(&server).pop().unwrap();
    tear(&spool.join(&newest));
    let mut a = support::kafka::Running(archiver(&config, &log));
    std::thread::sleep(Duration::from_secs(1));
    server.sql("FLUSH BINARY LOGS");
    server.restart(false);
    std::thread::sleep(Duration::from_secs(2));
    server.sql("FLUSH BINARY LOGS");
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    workload.join().unwrap();
    server.sql("FLUSH BINARY LOGS");
    let bucket = Bucket::new(&endpoint);
    let names = server_files(&server);
    let (open, complete) = names.split_last().unwrap();
    assert!(complete.len() >= 4, "rotations happened: {names:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !complete.iter().all(|f| bucket.get(&format!("archives/one/{f}")).is_some()) {
        assert!(
            Instant::now() < deadline,
            "not every complete file uploaded:\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Command::new("kill").args(["-TERM", &a.id().to_string()]).status().unwrap();
    let status = a.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("cutting it there"), "the torn tail was cut: {text}");
    assert!(!text.contains(secret), "the secret is never printed: {text}");
    for f in complete {
        let theirs = std::fs::read(server.datadir().join(f)).unwrap();
        let ours = bucket.get(&format!("archives/one/{f}")).unwrap();
        assert!(
            ours == theirs,
            "{f}: the store's copy ({} bytes) differs from the server's ({})",
            ours.len(),
            theirs.len()
        );
    }
    assert!(std::fs::read(spool.join(open)).unwrap() == std::fs::read(server.datadir().join(open)).unwrap());
    let kept: Vec<String> = std::fs::read_dir(&spool)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("mysql-bin."))
        .collect();
    assert!(
        kept.len() <= 2 && kept.contains(open),
        "the spool keeps the open file (and the newest complete one): {kept:?}"
    );
    let index: Vec<Json> = serde_json::from_slice(&bucket.get("archives/one/index.json").unwrap()).unwrap();
    let listed: Vec<&str> = index.iter().map(|e| e["file"].as_str().unwrap()).collect();
    assert_eq!(listed, complete.iter().map(String::as_str).collect::<Vec<_>>(), "{index:?}");
    for (e, f) in index.iter().zip(complete) {
        assert_eq!(e["size"].as_u64(), Some(std::fs::metadata(server.datadir().join(f)).unwrap().len()), "{e}");
        assert_eq!(e["complete"], true, "{e}");
    }

    // a time range dumped from the store equals the same range dumped from the server's files
    let (from, to) = (index[1]["first_time"].as_u64().unwrap() + 1, index[3]["last_time"].as_u64().unwrap());
    let utc = |t: u64| server.scalar(&format!("SET time_zone = '+00:00'; SELECT FROM_UNIXTIME({t})"));
    let range = ["--start-datetime".to_string(), utc(from), "--stop-datetime".to_string(), utc(to)];
    let env = [
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", secret),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT", endpoint.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
    ];
    let archived =
        support::sluice_cmd().arg("dump").args(&range).arg("s3://sluice/archives/one").envs(env).output().unwrap();
    let originals: Vec<PathBuf> = complete.iter().map(|f| server.datadir().join(f)).collect();
    let original = support::sluice_cmd().arg("dump").args(&range).args(&originals).output().unwrap();
    assert!(archived.status.success() && original.status.success(), "{}", String::from_utf8_lossy(&archived.stderr));
    let lines = |o: &std::process::Output| rows_of(&String::from_utf8_lossy(&o.stdout));
    let (a, o) = (lines(&archived), lines(&original));
    assert!(a.len() > 10, "the range holds rows: {range:?}");
    assert!(a == o, "the same {} rows from the store as from the server's files ({} there)", a.len(), o.len());
    assert!(!String::from_utf8_lossy(&archived.stderr).contains(secret));
    // rows name the store's objects, not the temporary copies
    let first: Json = serde_json::from_str(String::from_utf8_lossy(&archived.stdout).lines().next().unwrap()).unwrap();
    assert!(first["position"]["file"].as_str().unwrap().starts_with("s3://sluice/archives/one/mysql-bin."), "{first}");

    // archive.keep_size on the store: the two oldest files go from the bucket and its index
    // (with half a file of slack: the open file may have grown since the spool was looked at)
    let limit = index.iter().skip(2).map(|e| e["size"].as_u64().unwrap()).sum::<u64>()
        + std::fs::metadata(spool.join(open)).unwrap().len()
        + index[1]["size"].as_u64().unwrap() / 2;
    let out = support::sluice_cmd()
        .args(["archive", "--until-end", "--config"])
        .arg(&config)
        .env("SLUICE_ARCHIVE__KEEP_SIZE", limit.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    for f in &complete[..2] {
        assert!(bucket.get(&format!("archives/one/{f}")).is_none(), "{f} removed from the store");
    }
    assert!(bucket.get(&format!("archives/one/{}", complete[2])).is_some());
    let index: Vec<Json> = serde_json::from_slice(&bucket.get("archives/one/index.json").unwrap()).unwrap();
    let listed: Vec<&str> = index.iter().map(|e| e["file"].as_str().unwrap()).collect();
    assert_eq!(listed, complete[2..].iter().map(String::as_str).collect::<Vec<_>>(), "{index:?}");

    // the spool lost (a new volume): the copy goes on after the store's newest file, the store's
    // index keeps what it listed, and the file that was open is copied whole again
    std::fs::remove_dir_all(&spool).unwrap();
    server.sql("INSERT INTO ar.t (v, n) VALUES ('after the spool', 1); FLUSH BINARY LOGS");
    let out = support::sluice_cmd().args(["archive", "--until-end", "--config"]).arg(&config).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let names = server_files(&server);
    let (_, complete) = names.split_last().unwrap();
    for f in &complete[2..] {
        let ours = bucket.get(&format!("archives/one/{f}")).unwrap_or_else(|| panic!("{f} in the store"));
        assert!(ours == std::fs::read(server.datadir().join(f)).unwrap(), "{f} is the server's");
    }
    let index: Vec<Json> = serde_json::from_slice(&bucket.get("archives/one/index.json").unwrap()).unwrap();
    let listed: Vec<&str> = index.iter().map(|e| e["file"].as_str().unwrap()).collect();
    assert_eq!(listed, complete[2..].iter().map(String::as_str).collect::<Vec<_>>(), "{index:?}");
}
