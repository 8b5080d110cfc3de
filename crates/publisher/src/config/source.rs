//! `[source]`: the MySQL/MariaDB server captured, how to reach it, and where the first start begins.

#[allow(clippy::wildcard_imports)]
use super::*;

/// `[source]`
#[derive(Debug, Clone, Deserialize)]
pub struct SourceSection {
    /// A stable name for this capture (letters, digits, `-`, `_`). It names the Kafka
    /// transactional id (`sluice-<name>`) and the checkpoint key: two instances with the same
    /// name fence each other, so exactly one publishes.
    pub name: String,
    /// `mysql://USER@HOST:PORT` (no password here).
    pub url: SourceUrl,
    /// Other servers of the same replication topology (GTID replicas with
    /// `log_slave_updates`), tried in order when the current one stays unreachable for
    /// `failover_after`: Sluice resumes there by the checkpoint's GTIDs, after checking that
    /// the server's GTID history contains them (else it stops naming the missing GTIDs, never
    /// streaming with a gap). Same user, password and TLS as `url`. A checkpoint without GTIDs
    /// cannot move between servers: failover then stops with a message.
    #[serde(default)]
    pub failover: Vec<SourceUrl>,
    /// How long the current server may stay unreachable before the next of `failover` is
    /// tried (e.g. `30s`).
    #[serde(default = "default_failover_after", with = "humantime_serde")]
    pub failover_after: Duration,
    /// File holding the password (trailing newline ignored).
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Environment variable holding the password.
    #[serde(default)]
    pub password_env: Option<String>,
    /// Replica server id, unique among the server's replicas.
    #[serde(default = "default_server_id")]
    pub server_id: u32,
    /// TLS: `disabled`, `preferred`, `required`, `verify-ca`, `verify-identity`.
    #[serde(default)]
    pub tls: TlsSetting,
    /// CA certificate (PEM) for `verify-ca` / `verify-identity`.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Heartbeat period asked of the server (e.g. `5s`; 1s to 1h). A connection silent for three
    /// periods (and 5 s) is taken as dead and opened again.
    #[serde(default = "default_heartbeat", with = "humantime_serde")]
    pub heartbeat: Duration,
    /// The largest binlog event Sluice takes (e.g. `"256MiB"`; default `"1GiB"`, MySQL's
    /// largest `max_allowed_packet`). An event is held whole while it is decoded, so this bounds
    /// the memory one huge row can take; a larger event stops `sluice run` with its position and
    /// size. The server's `max_allowed_packet` bounds what it writes.
    #[serde(default = "default_max_event_size", deserialize_with = "byte_size")]
    pub max_event_size: u64,
    /// Where to start when there is no checkpoint yet: `earliest`, `current`,
    /// `file:position` (`mysql-bin.000042:4`), or a GTID set (either flavour). Default:
    /// `current` when `snapshot.mode` reads the tables (the snapshot covers what came before),
    /// else `earliest`. A start other than `current` replays the rows' history, so it goes
    /// without a snapshot: with no `snapshot.mode` it means `never`, and together with
    /// `snapshot.mode = "initial"` or `"when_needed"` it is refused (see `snapshot.mode`).
    ///
    /// `earliest` and `current` are resolved once, when `sluice run` first reaches the server
    /// without a checkpoint (also while Kafka is still unreachable), and the position is
    /// committed to `<prefix>.__positions` as the first checkpoint before any record is
    /// published: every restart after that resumes from it, so nothing written after the
    /// start is skipped. Only a process that stops before Kafka was ever reachable resolves
    /// the start again at its next start.
    ///
    /// With `binlog_row_metadata` other than FULL, column names come from the captured tables'
    /// definitions read from the server at this start, then tracked across the binlog's DDL: a
    /// start in the past applies today's definitions to older events until a DDL in the binlog
    /// replaces them (a TABLE_MAP that disagrees in column count or types stops the run).
    #[serde(default = "default_start")]
    pub start: StartFrom,
    /// The directory of a `sluice archive` of this server (its `archive.to`), read when the
    /// server has purged the binlog at the checkpoint: Sluice reads the archived files from
    /// the checkpoint on, then switches to the server's stream at the same position, without
    /// a gap or a repeat (logged, and `sluice_source_archive_reading` is 1 meanwhile). When
    /// the archive does not reach back to the checkpoint or forward to the server's oldest
    /// binlog, the start stops saying so, or with `snapshot.mode = "when_needed"` takes a new
    /// snapshot. A directory (a volume shared with the archiver), or the archiver's object store
    /// URL (`s3://bucket/prefix`: its completed files; credentials as for `archive.to`, from the
    /// environment and `archive_credentials_file`); files from a store are downloaded to a
    /// temporary file one at a time.
    #[serde(default)]
    pub archive: Option<String>,
    /// With an object store in `archive`: a file of `key = value` credentials and options, as
    /// `archive.credentials_file` (never printed).
    #[serde(default)]
    pub archive_credentials_file: Option<PathBuf>,
}

/// `source.tls`, as MySQL's clients name the modes. It mirrors [`sluice_protocol::TlsMode`] on
/// purpose: the protocol crate knows no configuration file or command line (no serde, no
/// clap), so the user-facing spelling and its documentation live here, and [`TlsSetting::mode`]
/// is the one place the two meet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TlsSetting {
    /// Plain TCP.
    Disabled,
    /// TLS when the server offers it (certificate not checked).
    #[default]
    Preferred,
    /// TLS or fail (certificate not checked).
    Required,
    /// TLS with the certificate checked against the CA (`ca_file`, `--ca`).
    VerifyCa,
    /// As `verify-ca`, and the host name must match the certificate.
    VerifyIdentity,
}

impl TlsSetting {
    /// The protocol crate's mode.
    pub fn mode(self) -> sluice_protocol::TlsMode {
        match self {
            TlsSetting::Disabled => sluice_protocol::TlsMode::Disabled,
            TlsSetting::Preferred => sluice_protocol::TlsMode::Preferred,
            TlsSetting::Required => sluice_protocol::TlsMode::Required,
            TlsSetting::VerifyCa => sluice_protocol::TlsMode::VerifyCa,
            TlsSetting::VerifyIdentity => sluice_protocol::TlsMode::VerifyIdentity,
        }
    }

    /// True for the modes that check the server's certificate (and need a CA).
    pub fn verifies(self) -> bool {
        matches!(self, TlsSetting::VerifyCa | TlsSetting::VerifyIdentity)
    }
}

/// Where the source server is, and as whom: `mysql://USER@HOST[:PORT]` (or `mariadb://`).
///
/// A password in the URL is refused wherever a URL is read (`source.url`, `dump --source`):
/// it would sit in the configuration or in the process list and shell history, and URLs get
/// printed. Messages about a URL print it with any password masked.
#[derive(Clone, PartialEq, Eq)]
pub struct SourceUrl {
    /// The user to log in as.
    pub user: String,
    /// Host name or address.
    pub host: String,
    /// TCP port (3306 when the URL names none).
    pub port: u16,
}

impl SourceUrl {
    /// Parses `text`; `password_hint` says where the password goes instead (for the message
    /// when the URL carries one).
    ///
    /// # Errors
    /// Not a `mysql://` or `mariadb://` URL, no user or host, a password, or a path or query.
    pub fn parse(text: &str, password_hint: &str) -> Result<SourceUrl, String> {
        let shown = redact_url(text);
        const FORM: &str = "mysql://USER@HOST:PORT";
        if !text.contains("://") {
            return Err(format!("{shown:?} must start with mysql:// or mariadb:// ({FORM})"));
        }
        let url = url::Url::parse(text.trim()).map_err(|e| format!("{shown:?} is not a URL like {FORM} ({e})"))?;
        if !matches!(url.scheme(), "mysql" | "mariadb") {
            return Err(format!("{shown:?} must start with mysql:// or mariadb://, not {}://", url.scheme()));
        }
        if url.password().is_some() {
            return Err(format!(
                "{shown:?} must not contain a password (it would be shown wherever the URL is): use {password_hint}"
            ));
        }
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| format!("{shown:?} names no host"))?;
        let decode =
            |v: &str| url::form_urlencoded::parse(format!("x={v}").as_bytes()).next().map(|(_, v)| v.into_owned());
        let user = decode(url.username())
            .filter(|u| !u.is_empty())
            .ok_or_else(|| format!("{shown:?} names no user: write it as {FORM}"))?;
        if !(url.path().is_empty() || url.path() == "/") || url.query().is_some() {
            return Err(format!("{shown:?} must be {FORM}, without a database or options"));
        }
        // an IPv6 literal keeps its brackets in host_str; the socket address wants it bare
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        Ok(SourceUrl { user, host, port: url.port().unwrap_or(3306) })
    }
}

impl fmt::Display for SourceUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "{}@[{}]:{}", self.user, self.host, self.port)
        } else {
            write!(f, "{}@{}:{}", self.user, self.host, self.port)
        }
    }
}

impl fmt::Debug for SourceUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mysql://{self}")
    }
}

impl<'de> Deserialize<'de> for SourceUrl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SourceUrl, D::Error> {
        let text = String::deserialize(d)?;
        SourceUrl::parse(&text, "source.password_file or source.password_env").map_err(serde::de::Error::custom)
    }
}

pub(super) fn default_server_id() -> u32 {
    51_001
}

pub(super) fn default_max_event_size() -> u64 {
    1 << 30
}

pub(super) fn default_failover_after() -> Duration {
    Duration::from_secs(30)
}

pub(super) fn default_heartbeat() -> Duration {
    Duration::from_secs(5)
}

pub(super) fn default_start() -> StartFrom {
    StartFrom::Earliest
}

impl SourceSection {
    /// `url`, then the `failover` servers, in the order they are tried.
    pub fn servers(&self) -> Vec<&SourceUrl> {
        std::iter::once(&self.url).chain(&self.failover).collect()
    }

    /// The password from its file or environment variable (empty when neither is set).
    ///
    /// # Errors
    /// An unreadable password file.
    pub fn password(&self) -> Result<Secret, ConfigError> {
        read_secret(&self.password_file, &self.password_env)
    }

    /// The host name `sluice run` reports to the server: `sluice-<name>`, so that a
    /// predecessor of the same source is told from a different replica with the same server id.
    pub fn report_host(&self) -> String {
        format!("sluice-{}", self.name)
    }
}

impl SourceSection {
    pub(super) fn validate(&self, p: &mut Problems) {
        if self.name.is_empty() || !self.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            p.push("source.name", format!("{:?} must be letters, digits, '-' or '_'", self.name));
        }
        validate_secret(p, "source.password", &self.password_file, &self.password_env);
        if self.tls.verifies() && self.ca_file.is_none() {
            p.push("source.ca_file", "source.tls = verify-ca or verify-identity needs the CA certificate here");
        }
        if let Some(f) = self.ca_file.as_ref().filter(|f| !f.exists()) {
            p.push("source.ca_file", format!("{} does not exist", f.display()));
        }
        for (i, f) in self.failover.iter().enumerate() {
            let same = |a: &SourceUrl| a.host.eq_ignore_ascii_case(&f.host) && a.port == f.port;
            if same(&self.url) {
                p.push(
                    format!("source.failover[{i}]"),
                    format!("{}:{} is source.url itself: list the other servers of the topology", f.host, f.port),
                );
            } else if self.failover[..i].iter().any(same) {
                p.push(format!("source.failover[{i}]"), format!("{}:{} is listed twice", f.host, f.port));
            }
        }
        if self.server_id == 0 {
            p.push("source.server_id", "must not be 0");
        }
        if self.failover_after < Duration::from_secs(1) {
            p.push("source.failover_after", "must be at least 1s");
        }
        // a dead connection is noticed after three silent periods: more than an hour would
        // leave a stream hung for hours (and MariaDB takes at most about 1,193 h)
        if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&self.heartbeat) {
            p.push("source.heartbeat", "must be from 1s to 1h");
        }
        if !(64 * 1024..=1 << 30).contains(&self.max_event_size) {
            p.push("source.max_event_size", "must be 64KiB to 1GiB");
        }
        if let Some(a) = &self.archive {
            if crate::archive::store::is_url(a) {
                if let Err(e) = crate::archive::store::check_url(a) {
                    p.push("source.archive", e);
                }
            } else if Path::new(a).exists() && !Path::new(a).is_dir() {
                p.push("source.archive", format!("{a} is not a directory"));
            }
        }
        if let Some(f) = self.archive_credentials_file.as_ref().filter(|f| !f.exists()) {
            p.push("source.archive_credentials_file", format!("{} does not exist", f.display()));
        }
    }
}
