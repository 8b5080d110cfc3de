//! Shared pieces of the scenarios against real servers: throw-away MariaDB servers started with
//! `integration/lib/mariadb.sh` (so tests and scripts start servers the same way, and a
//! server can be restarted or crashed on its own datadir and port), SQL through the `mariadb`
//! client, and runs of the built `sluice` binary. The broker, the test registry and an
//! independent topic reader are in [`kafka`], the
//! network faults in [`proxy`], a real Prometheus in [`prometheus`].
//!
//! When `mariadbd` is missing the scenarios are skipped with a loud message, unless
//! `SLUICE_REQUIRE_MARIADB` is set (CI), where a missing server is a failure.
#![allow(dead_code)]

pub mod elastic;
pub mod kafka;
pub mod prometheus;
pub mod proxy;
pub mod workload;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value as Json;

const MARIADBD: &[&str] = &["/usr/sbin/mariadbd", "/usr/bin/mariadbd", "/usr/local/bin/mariadbd"];

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Where the servers' files go: `$SLUICE_WORK` when set (make exports it), else the target
/// directory's scratch space.
pub fn work_dir() -> PathBuf {
    std::env::var_os("SLUICE_WORK")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("live-it"), PathBuf::from)
}

/// A scratch directory for one test (emptied first).
pub fn scratch(name: &str) -> PathBuf {
    let d = work_dir().join(format!("scratch-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A running server, stopped on drop.
pub struct Server {
    pub name: String,
    pub port: u16,
}

/// True when the scenarios can run; prints the skip otherwise (panics in CI).
pub fn mariadb_available() -> bool {
    if MARIADBD.iter().any(|p| Path::new(p).exists()) {
        return true;
    }
    if std::env::var_os("SLUICE_REQUIRE_MARIADB").is_some() {
        panic!("SLUICE_REQUIRE_MARIADB is set but mariadbd is not installed");
    }
    eprintln!(
        "\n*** SKIPPING live scenarios: mariadbd not found (integration/lib/mariadb.sh install, or set \
         SLUICE_REQUIRE_MARIADB=1 to fail) ***\n"
    );
    false
}

/// Runs `integration/lib/<lib>.sh ARGS` with this test run's `SLUICE_WORK`.
pub fn lib_sh(lib: &str, args: &[&str]) -> Output {
    Command::new("bash")
        .arg(repo().join(format!("integration/lib/{lib}.sh")))
        .args(args)
        .env("SLUICE_WORK", work_dir())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run integration/lib/{lib}.sh: {e}"))
}

/// Runs `integration/lib/<lib>.sh ARGS`, failing the test when it fails.
pub fn lib_sh_ok(lib: &str, args: &[&str]) {
    let out = lib_sh(lib, args);
    assert!(out.status.success(), "{lib}.sh {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Runs `integration/lib/<lib>.sh ARGS` (a `start`) and returns the value of the `KEY=value`
/// line it prints (a port, an address).
///
/// # Errors
/// The script failed, or printed no such line.
pub fn lib_started(lib: &str, args: &[&str], key: &str) -> Result<String, String> {
    let out = lib_sh(lib, args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("{lib}.sh {args:?} failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(|v| v.trim().to_string())
        .ok_or_else(|| format!("{lib}.sh {args:?} printed no {key}="))
}

fn mariadb_sh(args: &[&str]) -> Output {
    lib_sh("mariadb", args)
}

impl Server {
    /// Starts server `name` with extra mariadbd arguments, or `None` when the test must be
    /// skipped.
    pub fn start(name: &str, args: &[&str]) -> Option<Server> {
        if !mariadb_available() {
            return None;
        }
        let mut a = vec!["start", name];
        a.extend_from_slice(args);
        let port = lib_started("mariadb", &a, "MARIADB_PORT").unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let port = port.parse().unwrap_or_else(|_| panic!("MARIADB_PORT={port}"));
        Some(Server { name: name.to_string(), port })
    }

    /// Restarts on the same datadir and port; `kill` crashes it with SIGKILL first.
    pub fn restart(&self, kill: bool) {
        let mut a = vec!["restart", self.name.as_str()];
        if kill {
            a.push("--kill");
        }
        let out = mariadb_sh(&a);
        assert!(out.status.success(), "restart failed: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Crashes the server with SIGKILL and leaves it down (a failed primary).
    #[allow(dead_code)]
    pub fn kill(&self) {
        let dir = work_dir().join(format!("mariadb-{}", self.name));
        for file in ["pid", "mariadbd.pid"] {
            let Ok(pid) = std::fs::read_to_string(dir.join(file)) else { continue };
            let pid = pid.trim().to_string();
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
            while Command::new("kill").args(["-0", &pid]).status().is_ok_and(|s| s.success()) {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            let _ = std::fs::remove_file(dir.join(file));
        }
    }

    /// The server's datadir.
    pub fn datadir(&self) -> PathBuf {
        work_dir().join(format!("mariadb-{}/data", self.name))
    }

    /// `mysql://root@127.0.0.1:PORT`.
    pub fn url(&self, user: &str) -> String {
        format!("mysql://{user}@127.0.0.1:{}", self.port)
    }

    /// Runs SQL as root; the rows, tab-separated columns (batch mode: NULL prints as `NULL`).
    pub fn try_sql(&self, sql: &str) -> Result<Vec<Vec<String>>, String> {
        try_sql(self.port, sql)
    }

    /// Runs SQL (any size: it goes through stdin) as root and returns the client's escaped
    /// batch output (`-N -B`: tab-separated, `\t`, `\n` and `\\` escaped, `NULL` for NULL).
    /// Panics with the client's message on failure.
    pub fn sql_text(&self, sql: &str) -> String {
        client(self.port, sql, false).unwrap_or_else(|e| {
            panic!("mariadb client failed on server {}: {e}\nSQL (first 2000 chars): {}", self.name, clip(sql))
        })
    }

    /// The current binlog file (as a path in the datadir) and position.
    pub fn binlog_path_position(&self) -> (PathBuf, u64) {
        let (file, pos) = self.master_status();
        (self.datadir().join(file), pos)
    }

    /// As [`Server::try_sql`], panicking on an error.
    pub fn sql(&self, sql: &str) -> Vec<Vec<String>> {
        self.try_sql(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The first column of every row.
    pub fn column(&self, sql: &str) -> Vec<String> {
        self.sql(sql).into_iter().filter_map(|r| r.into_iter().next()).collect()
    }

    /// One value.
    pub fn scalar(&self, sql: &str) -> String {
        self.column(sql).into_iter().next().unwrap_or_else(|| panic!("{sql}: no row"))
    }

    /// `PURGE BINARY LOGS TO 'file'`, repeated until the server holds no older file: a replica's
    /// dump thread that has not yet read the ROTATE of a `FLUSH BINARY LOGS` keeps its file in
    /// use, and the server then purges only up to it (with a warning, not an error).
    pub fn purge_to(&self, file: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            self.sql_text(&format!("PURGE BINARY LOGS TO '{file}';"));
            let oldest = self.scalar("SHOW BINARY LOGS");
            if oldest == file {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "PURGE BINARY LOGS TO '{file}' still leaves {oldest}");
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// `SHOW MASTER STATUS`: (file, position).
    pub fn master_status(&self) -> (String, u64) {
        let r = self.sql("SHOW MASTER STATUS");
        (r[0][0].clone(), r[0][1].parse().unwrap())
    }

    /// `@@gtid_binlog_pos`.
    pub fn gtid_pos(&self) -> String {
        self.scalar("SELECT @@gtid_binlog_pos")
    }

    /// Makes this server replicate from `primary` by GTID, and waits until it has caught up.
    pub fn replicate_from(&self, primary: &Server) {
        self.sql_text(&format!(
            "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={}, MASTER_USER='root', MASTER_USE_GTID=slave_pos; \
             START SLAVE;",
            primary.port
        ));
        self.wait_replicated(primary);
    }

    /// Waits until this replica has applied everything `primary` has written so far.
    pub fn wait_replicated(&self, primary: &Server) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let want = primary.gtid_pos();
        while self.scalar("SELECT @@gtid_slave_pos") != want {
            assert!(
                std::time::Instant::now() < deadline,
                "the replica did not catch up with {want}: {:?}",
                self.sql("SHOW SLAVE STATUS")
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Creates a replication user (GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.*);
    /// `via` is the `IDENTIFIED ...` clause.
    pub fn create_repl_user(&self, user: &str, via: &str) {
        self.sql(&format!(
            "CREATE USER '{user}'@'%' {via}; GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO '{user}'@'%'"
        ));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = mariadb_sh(&["stop", &self.name]);
        if std::env::var_os("SLUICE_KEEP_TEST_SERVERS").is_none() {
            let _ = std::fs::remove_dir_all(work_dir().join(format!("mariadb-{}", self.name)));
        }
    }
}

/// Runs SQL as root on the server at `port` (see [`Server::try_sql`]).
pub fn try_sql(port: u16, sql: &str) -> Result<Vec<Vec<String>>, String> {
    let out = client(port, sql, true)?;
    Ok(out.lines().map(|l| l.split('\t').map(str::to_string).collect()).collect())
}

/// The `mariadb` client in batch mode without column names, the SQL on stdin; `raw` turns off
/// the escaping of tabs, newlines and backslashes in values. Stdout, or the client's stderr.
fn client(port: u16, sql: &str, raw: bool) -> Result<String, String> {
    let mut child = Command::new("mariadb")
        .args(["--no-defaults", "--protocol=TCP", "-uroot", "-h127.0.0.1", "--batch", "--skip-column-names"])
        .args(raw.then_some("--raw"))
        .arg(format!("-P{port}"))
        .arg("--default-character-set=utf8mb4")
        .arg("--max-allowed-packet=256M")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("the mariadb client: {e}"))?;
    let mut stdin = child.stdin.take().unwrap();
    let input = sql.as_bytes().to_vec();
    // a writer thread: a large script and a large result would otherwise block each other
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    writer.join().unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn clip(s: &str) -> String {
    s.chars().take(2000).collect()
}

/// A finished `sluice` run.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The JSON lines of stdout.
    pub fn rows(&self) -> Vec<Json> {
        self.stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:.200}"))).collect()
    }

    /// Asserts success and returns self.
    pub fn ok(self) -> Run {
        assert_eq!(self.code, Some(0), "sluice failed:\n{}", self.stderr);
        self
    }

    /// The `--start-file X --start-position N` pair of the resume line.
    pub fn resume_file_pos(&self) -> (String, u64) {
        let line = self.stderr.lines().find(|l| l.contains("resume with")).expect("a resume line on stderr");
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = |flag: &str| {
            let i = words.iter().position(|w| *w == flag).unwrap_or_else(|| panic!("{flag} in {line}"));
            words[i + 1].trim_end_matches(')').to_string()
        };
        (at("--start-file"), at("--start-position").parse().unwrap())
    }
}

/// The `sluice` binary of this build.
pub fn sluice_cmd() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
    c.env_remove("SLUICE_PASSWORD").env("SLUICE_LOG", "info").stdin(Stdio::null());
    c
}

/// Runs `sluice ARGS` to completion.
pub fn sluice(args: &[&str]) -> Run {
    let out = sluice_cmd().args(args).output().expect("run sluice");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `sluice dump --source URL --tls disabled ARGS` (non-following) as root.
pub fn dump(server: &Server, args: &[&str]) -> Run {
    let url = server.url("root");
    let mut a = vec!["dump", "--source", url.as_str(), "--tls", "disabled"];
    a.extend_from_slice(args);
    sluice(&a)
}

/// `after.id` (or `before.id` for deletes) of every row, as integers.
pub fn ids(rows: &[Json]) -> Vec<i64> {
    rows.iter()
        .map(|r| {
            let img = if r["type"] == "DELETE" { &r["before"] } else { &r["after"] };
            img["id"].as_i64().unwrap_or_else(|| panic!("no integer id in {r}"))
        })
        .collect()
}

/// Rows of one table.
pub fn of_table<'a>(rows: &'a [Json], table: &str) -> Vec<&'a Json> {
    rows.iter().filter(|r| r["table"] == table).collect()
}

/// A `sluice dump --follow` running in the background, its output collected as it comes.
pub struct Follower {
    child: std::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Follower {
    /// Spawns `sluice ARGS`.
    pub fn spawn(args: &[&str]) -> Follower {
        use std::io::BufRead;
        let mut child =
            sluice_cmd().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn sluice");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let (l2, e2) = (lines.clone(), stderr.clone());
        let threads = vec![
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                    l2.lock().unwrap().push(line);
                }
            }),
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                    let mut s = e2.lock().unwrap();
                    s.push_str(&line);
                    s.push('\n');
                }
            }),
        ];
        Follower { child, lines, stderr, threads }
    }

    /// `sluice dump --source SERVER --tls disabled --follow --start-file FILE --start-position
    /// POS EXTRA...` as root.
    pub fn dump_from(server: &Server, (file, pos): (&str, u64), extra: &[&str]) -> Follower {
        let (url, pos) = (server.url("root"), pos.to_string());
        let mut args = vec![
            "dump",
            "--source",
            &url,
            "--tls",
            "disabled",
            "--follow",
            "--start-file",
            file,
            "--start-position",
            &pos,
        ];
        args.extend_from_slice(extra);
        Follower::spawn(&args)
    }

    /// Lines printed so far.
    pub fn count(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    /// Stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until at least `n` lines were printed; panics after `secs` seconds.
    pub fn wait_lines(&mut self, n: usize, secs: u64) {
        let start = std::time::Instant::now();
        while self.count() < n {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("sluice exited ({st}) after {} of {n} lines:\n{}", self.count(), self.stderr());
            }
            assert!(
                start.elapsed().as_secs() < secs,
                "only {} of {n} lines after {secs} s:\n{}",
                self.count(),
                self.stderr()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// SIGTERM (sluice stops at the last complete transaction), then the whole output.
    pub fn stop(mut self) -> Run {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let status = self.child.wait().expect("wait for sluice");
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let stdout = self.lines.lock().unwrap().iter().map(|l| format!("{l}\n")).collect();
        Run { code: status.code(), stdout, stderr: self.stderr() }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How [`Server::select_exact`] selects a column so that the client's text is exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectAs {
    /// Bytes as upper-case hex.
    Hex,
    /// A BIT value as its unsigned number.
    BitUint,
    /// `SRID:HEX(wkb)`.
    Geometry,
    /// FLOAT, read back through [`float_canon`].
    Float,
    /// DOUBLE, read back through [`float_canon`].
    Double,
    /// Anything else as utf8mb4 text (sent as hex, so tabs, newlines and NULs survive).
    Text,
}

impl Server {
    /// Every row of `db.table` as column name → text (`None` for NULL), each column selected as
    /// `cols` says, with `time_zone = '+00:00'`.
    pub fn select_exact(
        &self,
        db: &str,
        table: &str,
        cols: &[(String, SelectAs)],
    ) -> Vec<std::collections::BTreeMap<String, Option<String>>> {
        let exprs: Vec<String> = cols
            .iter()
            .map(|(name, how)| {
                let q = format!("`{name}`");
                match how {
                    SelectAs::Hex => format!("HEX({q})"),
                    SelectAs::BitUint => format!("CAST({q}+0 AS CHAR)"),
                    SelectAs::Geometry => format!("CONCAT(ST_SRID({q}), ':', HEX({q}))"),
                    _ => format!("HEX(CAST({q} AS CHAR CHARACTER SET utf8mb4))"),
                }
            })
            .collect();
        let out =
            self.sql_text(&format!("SET time_zone = '+00:00'; SELECT {} FROM `{db}`.`{table}`", exprs.join(", ")));
        out.lines()
            .map(|l| {
                let fields: Vec<&str> = l.split('\t').collect();
                assert_eq!(fields.len(), cols.len(), "{db}.{table}: {l}");
                cols.iter()
                    .zip(fields)
                    .map(|((name, how), f)| {
                        let v = (f != "NULL").then(|| match how {
                            SelectAs::Hex | SelectAs::BitUint | SelectAs::Geometry => f.to_string(),
                            _ => {
                                let bytes: Vec<u8> = (0..f.len())
                                    .step_by(2)
                                    .map(|i| u8::from_str_radix(&f[i..i + 2], 16).unwrap())
                                    .collect();
                                let s = String::from_utf8(bytes).unwrap();
                                match how {
                                    SelectAs::Float | SelectAs::Double => float_canon(*how == SelectAs::Float, &s),
                                    _ => s,
                                }
                            }
                        });
                        (name.clone(), v)
                    })
                    .collect()
            })
            .collect()
    }
}

/// A FLOAT (`single`) or DOUBLE in one canonical text: parsed at its precision and printed by
/// Rust's shortest round-trip form, with -0 as 0.
pub fn float_canon(single: bool, s: &str) -> String {
    let text = if single {
        let f: f32 = s.parse().unwrap_or_else(|e| panic!("FLOAT {s:?}: {e}"));
        if f == 0.0 {
            None
        } else {
            Some(f.to_string())
        }
    } else {
        let f: f64 = s.parse().unwrap_or_else(|e| panic!("DOUBLE {s:?}: {e}"));
        if f == 0.0 {
            None
        } else {
            Some(f.to_string())
        }
    };
    text.unwrap_or_else(|| "0".into())
}

/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `GET path` on 127.0.0.1:`port` with a plain HTTP/1.1 request (an independent client, not
/// Sluice's): status and body (chunked bodies joined).
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    try_http_get(port, path).unwrap_or_else(|e| panic!("GET 127.0.0.1:{port}{path}: {e}"))
}

/// As [`http_get`], an error while nothing listens yet.
pub fn try_http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    http_request(port, "GET", path, None)
}

/// `METHOD path` on 127.0.0.1:`port` with an optional JSON body: status and body.
pub fn http_request(port: u16, method: &str, path: &str, json: Option<&str>) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    let body = json.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or_else(|| panic!("{response}"));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("{head}"));
    if !head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        return Ok((status, body.to_string()));
    }
    let (mut out, mut rest) = (String::new(), body);
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or_else(|_| panic!("chunk size {size:?}"));
        if n == 0 {
            break;
        }
        out.push_str(&tail[..n]);
        rest = &tail[n + 2..];
    }
    Ok((status, out))
}
