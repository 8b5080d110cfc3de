//! Throw-away MariaDB servers for the integration tests.
//!
//! Each [`MariaDb`] gets its own data directory under the system temp dir, is initialised with
//! `mariadb-install-db`, listens on a free 127.0.0.1 port and is killed (and its directory
//! removed) on drop. Users are created by an `--init-file`:
//! `native` / `native-pw` (mysql_native_password), `ed` / `ed-pw` (ed25519),
//! `tlsonly` / `tls-pw` (REQUIRE SSL), all with every privilege.
//!
//! When `mariadbd` is missing the tests are skipped with a loud message, unless
//! `SLUICE_REQUIRE_MARIADB` is set (CI), where a missing server is a failure.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MARIADBD: &[&str] = &["/usr/sbin/mariadbd", "/usr/bin/mariadbd", "/usr/local/bin/mariadbd"];

fn find_mariadbd() -> Option<PathBuf> {
    MARIADBD.iter().map(PathBuf::from).find(|p| p.exists())
}

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
    pub dir: PathBuf,
    pub tls: Option<TlsFiles>,
    child: Child,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn gen_certs(dir: &Path) -> TlsFiles {
    let ossl = |args: &[&str]| run(Command::new("openssl").args(args).current_dir(dir), "openssl");
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    for ca in ["ca", "other-ca"] {
        let mut a = vec!["req", "-x509"];
        a.extend_from_slice(&ec);
        let key = format!("{ca}.key");
        let pem = format!("{ca}.pem");
        let subj = format!("/CN=sluice test {ca}");
        a.extend_from_slice(&["-keyout", &key, "-out", &pem, "-days", "2", "-subj", &subj]);
        a.extend_from_slice(&[
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        ossl(&a);
    }
    let mut a = vec!["req"];
    a.extend_from_slice(&ec);
    a.extend_from_slice(&["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"]);
    ossl(&a);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    ossl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    TlsFiles { ca: dir.join("ca.pem"), other_ca: dir.join("other-ca.pem") }
}

/// Bootstrap servers run one at a time: concurrent `mariadb-install-db` runs were seen to
/// crash the bootstrap server (signal 11) on this 2-core machine, so installs are serialised
/// and retried.
static INSTALL_LOCK: Mutex<()> = Mutex::new(());

fn install(data: &Path, dir: &Path) {
    let _guard = INSTALL_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut last = String::new();
    for _ in 0..3 {
        let _ = std::fs::remove_dir_all(data);
        let out = Command::new("mariadb-install-db")
            .args([
                "--no-defaults",
                &format!("--datadir={}", data.display()),
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ])
            .output()
            .expect("run mariadb-install-db");
        if out.status.success() {
            return;
        }
        last = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }
    let _ = std::fs::remove_dir_all(dir);
    panic!("mariadb-install-db failed 3 times:\n{last}");
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
        let Some(mariadbd) = find_mariadbd() else {
            if std::env::var_os("SLUICE_REQUIRE_MARIADB").is_some() {
                panic!("SLUICE_REQUIRE_MARIADB is set but mariadbd is not installed");
            }
            eprintln!("\n*** SKIPPING: mariadbd not found (install mariadb-server, or set SLUICE_REQUIRE_MARIADB=1 to fail) ***\n");
            return None;
        };
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("sluice-protocol-it-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let data = dir.join("data");
        install(&data, &dir);
        std::fs::write(dir.join("init.sql"), INIT_SQL).unwrap();
        let tls_files = tls.then(|| gen_certs(&dir));
        let port = free_port();
        let d = |f: &str| dir.join(f).display().to_string();
        let mut args = vec![
            "--no-defaults".to_string(),
            "--user=root".into(),
            format!("--datadir={}", data.display()),
            format!("--socket={}", d("sock")),
            format!("--pid-file={}", d("pid")),
            format!("--port={port}"),
            "--bind-address=127.0.0.1".into(),
            "--server-id=1".into(),
            "--log-bin=mysql-bin".into(),
            "--binlog-format=ROW".into(),
            "--binlog-row-image=FULL".into(),
            "--binlog-row-metadata=FULL".into(),
            "--binlog-checksum=CRC32".into(),
            "--gtid-strict-mode=ON".into(),
            "--plugin-load-add=auth_ed25519".into(),
            "--max-allowed-packet=64M".into(),
            "--skip-name-resolve".into(),
            format!("--init-file={}", d("init.sql")),
            format!("--log-error={}", d("error.log")),
        ];
        if tls {
            args.push(format!("--ssl-ca={}", d("ca.pem")));
            args.push(format!("--ssl-cert={}", d("server.pem")));
            args.push(format!("--ssl-key={}", d("server.key")));
        }
        let child = Command::new(mariadbd)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn mariadbd");
        let mut server = MariaDb { port, dir, tls: tls_files, child };
        server.wait_ready();
        Some(server)
    }

    fn wait_ready(&mut self) {
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("mariadbd exited with {status}:\n{}", self.error_log());
            }
            // Ready once the init file has run: the `native` user can be looked up through
            // the socket file appearing and the port accepting.
            if self.dir.join("sock").exists() && std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            if start.elapsed() > Duration::from_secs(20) {
                panic!("mariadbd did not start within 20 s:\n{}", self.error_log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's error log.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
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
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::env::var_os("SLUICE_KEEP_TEST_SERVERS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
