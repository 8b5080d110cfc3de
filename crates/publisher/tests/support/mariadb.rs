//! Throw-away MariaDB servers started by `integration/lib/mariadb.sh`, and the `mariadb` client.
//!
//! When `mariadbd` is missing the tests skip with a loud message, unless `SLUICE_REQUIRE_MARIADB`
//! is set (CI installs MariaDB first), where a missing server is a failure. Servers listen on
//! 127.0.0.1 only and are stopped when their [`Server`] is dropped.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn script() -> PathBuf {
    repo().join("integration/lib/mariadb.sh")
}

/// A running server; stopped on drop.
pub struct Server {
    pub name: String,
    pub port: u16,
    pub datadir: PathBuf,
}

impl Server {
    /// Starts server `name` (unique per test) with extra `mariadbd` arguments, or returns
    /// `None` when MariaDB is not installed and not required.
    pub fn start(name: &str, extra: &[&str]) -> Option<Server> {
        let installed = ["/usr/sbin/mariadbd", "/usr/bin/mariadbd", "/usr/local/sbin/mariadbd"]
            .iter()
            .any(|p| Path::new(p).exists());
        if !installed {
            assert!(
                std::env::var_os("SLUICE_REQUIRE_MARIADB").is_none(),
                "SLUICE_REQUIRE_MARIADB is set but mariadbd is not installed (run integration/lib/mariadb.sh install)"
            );
            eprintln!("\n========================================================================");
            eprintln!("SKIPPED: mariadbd is not installed; `{name}` needs a MariaDB server.");
            eprintln!("Run `integration/lib/mariadb.sh install` (or `make test`) to run it.");
            eprintln!("========================================================================\n");
            return None;
        }
        let out = Command::new(script()).arg("start").arg(name).args(extra).output().expect("run mariadb.sh start");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "mariadb.sh start {name} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let get = |k: &str| {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .unwrap_or_else(|| panic!("mariadb.sh start printed no {k}=: {stdout}"))
                .trim()
                .to_string()
        };
        // the guard exists before anything else can fail, so the server is always stopped
        let mut server = Server { name: name.to_string(), port: 0, datadir: PathBuf::new() };
        server.port = get("MARIADB_PORT").parse().unwrap();
        server.datadir = PathBuf::from(get("MARIADB_DATADIR"));
        Some(server)
    }

    /// Runs `sql` with the `mariadb` client (utf8mb4, no database) and returns its batch output
    /// (`-N -B`: tab-separated, `NULL` for NULL). Panics with the client's message on failure.
    pub fn sql(&self, sql: &str) -> String {
        let (ok, out, err) = self.try_sql(sql);
        assert!(ok, "mariadb client failed on server {}: {err}\nSQL (first 2000 chars): {}", self.name, clip(sql));
        out
    }

    /// As [`Server::sql`], returning (success, stdout, stderr).
    pub fn try_sql(&self, sql: &str) -> (bool, String, String) {
        let mut child = Command::new("mariadb")
            .args([
                "--no-defaults",
                "--protocol=TCP",
                "-h127.0.0.1",
                &format!("-P{}", self.port),
                "-uroot",
                "--default-character-set=utf8mb4",
                "-N",
                "-B",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run the mariadb client");
        let mut stdin = child.stdin.take().unwrap();
        let input = sql.as_bytes().to_vec();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The current binlog file (full path) and position.
    pub fn binlog_position(&self) -> (PathBuf, u64) {
        let out = self.sql("SHOW MASTER STATUS");
        let mut f = out.split('\t');
        let file = f.next().unwrap().to_string();
        let pos = f.next().unwrap().trim().parse().unwrap();
        (self.datadir.join(file), pos)
    }
}

fn clip(s: &str) -> String {
    s.chars().take(2000).collect()
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(&self.name).stdout(Stdio::null()).status();
    }
}
