//! What is wrong with a configuration: each problem with its key and the variable that set it.

#[allow(clippy::wildcard_imports)]
use super::*;

/// One configuration problem: the key, what is wrong with it, and where its value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The key in TOML's dotted form (`source.start`, `kafka.properties."linger.ms"`, `routes[0].topic`).
    pub key: String,
    /// The `SLUICE_*` variable that set the value, when one did.
    pub variable: Option<String>,
    /// What is wrong, and what to do where that is not obvious.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.variable {
            Some(v) => write!(f, "{v} (sets {}): {}", self.key, self.message),
            None => write!(f, "{}: {}", self.key, self.message),
        }
    }
}

/// Loading or validating the configuration failed.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not TOML.
    #[error("{path} is not valid TOML: {message}")]
    Syntax {
        /// Path.
        path: PathBuf,
        /// What and where (line and column).
        message: String,
    },
    /// Every problem found: unknown keys, wrong types and forms, failed validations.
    #[error("invalid configuration in {}{}:\n  - {}", .path.display(), if .problems.iter().any(|p| p.variable.is_some()) { " and the SLUICE_* environment" } else { "" }, .problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  - "))]
    Invalid {
        /// Path of the file.
        path: PathBuf,
        /// Each problem.
        problems: Vec<Problem>,
    },
}

/// Problems found by validation, each with its key.
#[derive(Debug, Default)]
pub struct Problems(pub(super) Vec<(String, String)>);

impl Problems {
    /// Records that `key` is wrong: `message` says how.
    pub fn push(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.0.push((key.into(), message.into()));
    }
}
