//! The commands: each turns its arguments into calls of the library and answers with an
//! [`Exit`], which `main.rs` maps to the process's exit code.
//!
//! - [`run`]: `sluice run`, the restart loop around pipeline attempts;
//! - [`check`]: `sluice check`, the configuration, the server and the checkpoint;
//! - [`position`]: `sluice position show|set`, the checkpoint and moving it;
//! - [`snapshot`]: `sluice snapshot`, a request to the running instance to snapshot tables;
//! - [`sink`]: `sluice sink elasticsearch`, the tables' topics kept in Elasticsearch indices;
//! - [`verify`]: `sluice verify`, each table compared with its topic;
//! - [`archive`]: `sluice archive`, the server's binlog files copied into an archive;
//! - [`dump`]: `sluice dump`, binlog files or a live server to JSON lines, SQL, flashback SQL.

pub mod archive;
pub mod check;
pub mod dump;
pub mod position;
pub mod run;
pub mod sink;
pub mod snapshot;
mod supervise;
pub mod verify;

/// How a command ended, as scripts tell outcomes apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Everything worked.
    Ok,
    /// Something failed that is not one of the cases below.
    Failure,
    /// The command line or configuration is wrong.
    Usage,
    /// The input is not a readable binlog: corrupt, truncated, or an unsupported format.
    Data,
    /// An input file could not be opened or read.
    NoInput,
    /// Writing the output failed.
    Output,
    /// A wait the user bounded (`--timeout`) ended first; trying again later may succeed.
    Timeout,
    /// Ctrl-C or SIGTERM ended the work early, cleanly (as the shell's 128 + SIGINT).
    Interrupted,
}

/// The command's configuration (`path` with the environment's overrides); a bad one is said
/// under the command's `name`, and is exit 2. A `SLUICE_*` variable that sets nothing is
/// warned of.
pub(crate) fn load_config<C: crate::config::Load>(name: &str, path: &std::path::Path) -> Result<C, Exit> {
    let (cfg, strays) = load_config_noting(name, path)?;
    for s in strays {
        tracing::warn!(variable = %s.variable, "{s}");
    }
    Ok(cfg)
}

/// As [`load_config`], with the `SLUICE_*` variables that set nothing and that Sluice does not
/// read otherwise (a typo of a key's variable), for the caller to report.
pub(crate) fn load_config_noting<C: crate::config::Load>(
    name: &str,
    path: &std::path::Path,
) -> Result<(C, Vec<crate::config::StrayVariable>), Exit> {
    let env = crate::process::env_vars(&["SLUICE_"]).map_err(|e| {
        crate::eline!("{name}: {e}");
        Exit::Usage
    })?;
    // read once (a pipe such as `--config <(envsubst < tmpl)` gives its text once): the
    // configuration, and the secrets' variables its `*_env` keys name, which are not strays
    let parsed = crate::config::read_config(path).and_then(|text| Ok((C::parse(&text, path, env.clone())?, text)));
    let (cfg, text) = parsed.map_err(|e| {
        crate::eline!("{name}: {e}");
        Exit::Usage
    })?;
    Ok((cfg, crate::config::stray_variables(&text, env)))
}

/// Runs a command's work on the runtime every command that talks to servers shares, giving
/// blocking Kafka calls still waiting on the broker two seconds at the end; a runtime that
/// cannot start is said under the command's `name` (exit 1).
pub(crate) fn on_runtime<T>(name: &str, work: impl std::future::Future<Output = T>) -> Result<T, Exit> {
    let rt = crate::process::runtime().map_err(|e| {
        crate::eline!("{name}: cannot start the runtime: {e}");
        Exit::Failure
    })?;
    let out = rt.block_on(work);
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    Ok(out)
}
