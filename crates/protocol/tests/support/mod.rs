//! Throw-away MariaDB servers for the integration tests, started the one way every crate's
//! tests start them: `integration/lib/mariadb.sh` (a datadir of its own, a free 127.0.0.1 port,
//! installs serialised), with TLS material from `integration/lib/tls.sh`. Each [`MariaDb`] is
//! stopped (and its files removed) on drop. Users are created by an `--init-file`:
//! `native` / `native-pw` (mysql_native_password), `ed` / `ed-pw` (ed25519),
//! `tlsonly` / `tls-pw` (REQUIRE SSL), all with every privilege.
//!
//! When `mariadbd` is missing the tests are skipped with a loud message, unless
//! `SLUICE_REQUIRE_MARIADB` is set (CI), where a missing server is a failure.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

const MARIADBD: &[&str] = &["/usr/sbin/mariadbd", "/usr/bin/mariadbd", "/usr/local/bin/mariadbd"];

/// TLS material generated for one server.
#[derive(Debug)]
pub struct TlsFiles {
    /// The CA that signed the server certificate.
    pub ca: PathBuf,
    /// An unrelated CA, for "wrong CA" tests.
    pub other_ca: PathBuf,
}

/// A running throw-away server.
pub struct MariaDb {
    pub port: u16,
    pub name: String,
    pub tls: Option<TlsFiles>,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Where the servers' files go: `$SLUICE_WORK` when set (make exports it), else the target
/// directory's scratch space.
fn work_dir() -> PathBuf {
    std::env::var_os("SLUICE_WORK")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("protocol-it"), PathBuf::from)
}

/// Runs `integration/lib/<lib>.sh ARGS`; panics with its output when it fails.
fn lib_sh(lib: &str, args: &[&str]) -> Output {
    let out = Command::new("bash")
        .arg(repo().join(format!("integration/lib/{lib}.sh")))
        .args(args)
        .env("SLUICE_WORK", work_dir())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run integration/lib/{lib}.sh: {e}"));
    assert!(
        out.status.success(),
        "{lib}.sh {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

const INIT_SQL: &str = "
CREATE USER 'native'@'%' IDENTIFIED BY 'native-pw';
GRANT ALL PRIVILEGES ON *.* TO 'native'@'%';
CREATE USER 'ed'@'%' IDENTIFIED VIA ed25519 USING PASSWORD('ed-pw');
GRANT ALL PRIVILEGES ON *.* TO 'ed'@'%';
CREATE USER 'tlsonly'@'%' IDENTIFIED BY 'tls-pw' REQUIRE SSL;
GRANT ALL PRIVILEGES ON *.* TO 'tlsonly'@'%';
";

impl MariaDb {
    /// Starts a server (with TLS when `tls`), or returns `None` when the tests must be skipped.
    pub fn start(tls: bool) -> Option<MariaDb> {
        if !MARIADBD.iter().any(|p| Path::new(p).exists()) {
            if std::env::var_os("SLUICE_REQUIRE_MARIADB").is_some() {
                panic!("SLUICE_REQUIRE_MARIADB is set but mariadbd is not installed");
            }
            eprintln!("\n*** SKIPPING: mariadbd not found (install mariadb-server, or set SLUICE_REQUIRE_MARIADB=1 to fail) ***\n");
            return None;
        }
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("proto-{}-{n}", std::process::id());
        let files = work_dir().join(format!("files-{name}"));
        let _ = std::fs::remove_dir_all(&files);
        std::fs::create_dir_all(&files).unwrap();
        std::fs::write(files.join("init.sql"), INIT_SQL).unwrap();
        let f = |x: &str| files.join(x).display().to_string();
        let mut args = vec![
            "start".to_string(),
            name.clone(),
            "--max-allowed-packet=64M".into(),
            "--skip-name-resolve".into(),
            format!("--init-file={}", f("init.sql")),
        ];
        let tls_files = tls.then(|| {
            lib_sh("tls", &["certs", &f("tls")]);
            args.push(format!("--ssl-ca={}", f("tls/ca.pem")));
            args.push(format!("--ssl-cert={}", f("tls/server.pem")));
            args.push(format!("--ssl-key={}", f("tls/server.key")));
            TlsFiles { ca: files.join("tls/ca.pem"), other_ca: files.join("tls/other-ca.pem") }
        });
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = lib_sh("mariadb", &a);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let port = stdout
            .lines()
            .find_map(|l| l.strip_prefix("MARIADB_PORT="))
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("mariadb.sh printed no MARIADB_PORT:\n{stdout}"));
        Some(MariaDb { port, name, tls: tls_files })
    }

    /// The server's error log.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(work_dir().join(format!("mariadb-{}/error.log", self.name))).unwrap_or_default()
    }

    /// Connect options for `user`/`password` on this server, TLS disabled, short timeouts.
    pub fn opts(&self, user: &str, password: &str) -> sluice_protocol::ConnectOptions {
        let mut o = sluice_protocol::ConnectOptions::new("127.0.0.1", self.port, user, password);
        o.tls = sluice_protocol::TlsMode::Disabled;
        o.connect_timeout = Duration::from_secs(10);
        o.read_timeout = Some(Duration::from_secs(30));
        o
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo().join("integration/lib/mariadb.sh"))
            .args(["stop", &self.name])
            .env("SLUICE_WORK", work_dir())
            .output();
        if std::env::var_os("SLUICE_KEEP_TEST_SERVERS").is_none() {
            let _ = std::fs::remove_dir_all(work_dir().join(format!("mariadb-{}", self.name)));
            let _ = std::fs::remove_dir_all(work_dir().join(format!("files-{}", self.name)));
        }
    }
}
