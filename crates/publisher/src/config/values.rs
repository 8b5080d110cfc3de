//! Values several sections share: byte sizes, addresses, table patterns, and secrets read from
//! a file or the environment (never printed).

#[allow(clippy::wildcard_imports)]
use super::*;

/// `text` with every password it may carry masked, for messages: the password of each
/// `[scheme://]user:password@host` and each `password=value` (as URL queries write them).
/// A URL parser ends the user information at the authority's last `@`, so a password may hold
/// `@`, `/`, quotes or spaces: each is read to the last `@` it can reach, and a message may
/// mask more than the password (a host, a word after it), never less.
pub fn redact_url(text: &str) -> String {
    let urls = redact_authorities(text);
    let mut rest = urls.as_str();
    let mut out = String::with_capacity(text.len());
    // then each word with an '@' (after white space or a quote), `[scheme://]user:password@...`
    // to its last '@': a password with '/' in it ends a URL's authority early, not the word
    while let Some(first_at) = rest.find('@') {
        let word_start =
            rest[..first_at].rfind(|c: char| c.is_whitespace() || "\"'`(<,=".contains(c)).map_or(0, |i| i + 1);
        let word_end = rest[first_at..]
            .find(|c: char| c.is_whitespace() || "\"'`)>,".contains(c))
            .map_or(rest.len(), |i| first_at + i);
        let at = rest[..word_end].rfind('@').unwrap_or(first_at);
        let word = &rest[word_start..at];
        let userinfo_start = word.find("://").map_or(0, |i| i + 3);
        out.push_str(&rest[..word_start + userinfo_start]);
        let userinfo = &word[userinfo_start..];
        match userinfo.split_once(':') {
            Some((user, _)) => {
                out.push_str(user);
                out.push_str(":***");
            }
            None => out.push_str(userinfo),
        }
        out.push('@');
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    let mut masked = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(i) = rest.to_ascii_lowercase().find("password=") {
        let end = i + "password=".len();
        masked.push_str(&rest[..end]);
        masked.push_str("***");
        let after = &rest[end..];
        let stop = after.find(|c: char| c == '&' || c.is_whitespace() || "\"'".contains(c)).unwrap_or(after.len());
        rest = &after[stop..];
    }
    masked.push_str(rest);
    masked
}

/// The password of each `scheme://user:password@host` masked, across spaces and quotes: the
/// user information runs to the last `@` before the authority ends (at `/`, `?` or `#`, as a
/// URL parser reads it, and here also at a line end, a double quote or backtick, `<`, `>`, or
/// the next `://`).
fn redact_authorities(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, after) = rest.split_at(i + 3);
        out.push_str(head);
        let next_url = after.find("://").unwrap_or(after.len());
        let end = after[..next_url].find(|c: char| "/?#\n\"`<>".contains(c)).unwrap_or(next_url);
        let authority = &after[..end];
        match authority.rfind('@').and_then(|at| authority[..at].split_once(':').map(|(user, _)| (user, at))) {
            Some((user, at)) => {
                out.push_str(user);
                out.push_str(":***");
                rest = &after[at..];
            }
            None => rest = after,
        }
    }
    out.push_str(rest);
    out
}

pub(super) fn yes() -> bool {
    true
}

/// Reads a byte size: an integer, or a number with a unit (`B`, `KB`/`MB`/`GB` = powers of 1000,
/// `KiB`/`MiB`/`GiB` = powers of 1024).
pub(super) fn byte_size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Size::deserialize(d)? {
        Size::Bytes(n) => Ok(n),
        Size::Text(t) => parse_byte_size(&t).map_err(serde::de::Error::custom),
    }
}

/// As [`byte_size`], for a setting that may be absent (with `#[serde(default)]`).
pub(super) fn opt_byte_size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    byte_size(d).map(Some)
}

/// Reads `host:port` into a socket address.
pub(super) fn socket_address<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<std::net::SocketAddr>, D::Error> {
    let text = String::deserialize(d)?;
    text.parse()
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("{text:?} is not an address like 0.0.0.0:9187: {e}")))
}

/// A byte size with an optional unit: `B`, `KB`/`MB`/`GB` (powers of 1000), `KiB`/`MiB`/`GiB`.
///
/// # Errors
/// Not a number with a known unit, or too large.
pub fn parse_byte_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("{text:?} is not a byte size like 16MiB"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" | "kB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => return Err(format!("{text:?}: unknown unit {other:?} (B, KB, MB, GB, KiB, MiB, GiB)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("{text:?} is too large"))
}

/// A secret value: printed as `<redacted>`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret read from somewhere safe (a file, the environment, a prompt).
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// The value, for handing to a client library.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A `db.table` pattern's problem, if it has one: a pattern is `table` or `db.table`, split at
/// its first dot (MariaDB allows a dot inside a table name: `shop.we.ird` is table `we.ird`),
/// each part non-empty (a pattern such as `shop.` could match nothing).
pub fn table_pattern_problem(pattern: &str) -> Option<String> {
    if pattern.trim().is_empty() {
        return Some("an empty pattern matches no table".into());
    }
    let parts: Vec<&str> = match pattern.split_once('.') {
        Some((db, table)) => vec![db, table],
        None => vec![pattern],
    };
    if parts.iter().any(|p| p.is_empty()) {
        return Some(format!(
            "{pattern:?} has an empty part: a pattern is TABLE or DB.TABLE (e.g. shop.* or shop.orders)"
        ));
    }
    None
}

/// The problems of a secret's `<key>_file` and `<key>_env` (`key` is `section.name`): both set, a
/// file that is not there, a variable that is not set.
/// `<section>.url` and `<section>.ca_file` of an HTTP service (the registry, Elasticsearch):
/// an `http://` or `https://` URL without a password in it (it would be shown wherever the URL
/// is), and a CA file only for `https://`, existing.
pub(super) fn validate_http_endpoint(p: &mut Problems, section: &str, url: &str, ca_file: Option<&Path>) {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        p.push(format!("{section}.url"), format!("{:?} must start with http:// or https://", redact_url(url)));
    } else if url::Url::parse(url).is_ok_and(|u| u.password().is_some()) {
        p.push(
            format!("{section}.url"),
            format!(
                "{:?} must not contain a password (it would be shown wherever the URL is): use {section}.username and \
                 {section}.password_file or password_env",
                redact_url(url)
            ),
        );
    }
    if let Some(f) = ca_file {
        if !url.starts_with("https://") {
            p.push(format!("{section}.ca_file"), format!("is set, but {section}.url is not https://"));
        } else if !f.exists() {
            p.push(format!("{section}.ca_file"), format!("{} does not exist", f.display()));
        }
    }
}

pub(super) fn validate_secret(p: &mut Problems, key: &str, file: &Option<PathBuf>, env: &Option<String>) {
    if file.is_some() && env.is_some() {
        p.push(format!("{key}_file"), format!("set only one of {key}_file and {key}_env"));
    }
    if let Some(f) = file {
        if !f.exists() {
            p.push(format!("{key}_file"), format!("{} does not exist", f.display()));
        } else if let Err(e) = std::fs::read(f) {
            // a directory, or no permission: said here, naming the key, not at the connection
            p.push(format!("{key}_file"), format!("cannot read {}: {e}", f.display()));
        }
    }
    if let Some(v) = env {
        match std::env::var_os(v) {
            None => p.push(format!("{key}_env"), format!("names {v}, which is not set")),
            // an empty secret is no secret: it connected without a password, without a word
            Some(value) if value.is_empty() => p.push(format!("{key}_env"), format!("names {v}, which is empty")),
            Some(_) => {}
        }
    }
}

/// A secret that may be configured (None when neither its file nor its variable is set).
pub(super) fn optional_secret(file: &Option<PathBuf>, env: &Option<String>) -> Result<Option<Secret>, ConfigError> {
    if file.is_none() && env.is_none() {
        return Ok(None);
    }
    read_secret(file, env).map(Some)
}

pub(super) fn read_secret(file: &Option<PathBuf>, env: &Option<String>) -> Result<Secret, ConfigError> {
    if let Some(f) = file {
        let v = std::fs::read_to_string(f).map_err(|source| ConfigError::Read { path: f.clone(), source })?;
        return Ok(Secret(v.trim_end_matches(['\n', '\r']).to_string()));
    }
    if let Some(name) = env {
        return Ok(Secret(std::env::var(name).unwrap_or_default()));
    }
    Ok(Secret::default())
}
