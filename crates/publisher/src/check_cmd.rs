//! `sluice check --config FILE`: validate the configuration, connect to the source, run the
//! pre-flight checks, and report every finding.

use std::path::PathBuf;

use clap::Args;

use crate::config::Config;
use crate::exit;

/// Arguments of `sluice check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The configuration file (`SLUICE_<SECTION>__<KEY>` environment variables override it).
    #[arg(long, short = 'c', value_name = "FILE", env = "SLUICE_CONFIG")]
    config: PathBuf,
}

/// Runs `sluice check`; returns the exit code (0 when every check passes, 1 when a check
/// fails, 2 when the configuration itself is invalid).
pub fn run(args: CheckArgs) -> u8 {
    let cfg = match Config::load(&args.config, std::env::vars()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice check: {e}");
            return exit::USAGE;
        }
    };
    println!("[ok] config: {} is valid", args.config.display());
    let connect = match crate::source::connect_options(&cfg) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice check: {e}");
            return exit::USAGE;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice check: {e}");
            return exit::FAILURE;
        }
    };
    rt.block_on(async {
        let mut conn = match sluice_protocol::Connection::connect(connect.clone()).await {
            Ok(c) => c,
            Err(e) => {
                println!("[ERROR] connect: {}:{} as {}: {e}", connect.host, connect.port, connect.user);
                return exit::FAILURE;
            }
        };
        println!(
            "[ok] connect: {}:{} as {}{}",
            connect.host,
            connect.port,
            connect.user,
            if conn.is_tls() { " (TLS)" } else { "" }
        );
        match crate::check::run(&mut conn, cfg.source.server_id, &crate::run::report_host(&cfg)).await {
            Ok(report) => {
                for f in &report.findings {
                    println!("{f}");
                }
                if report.has_errors() {
                    exit::FAILURE
                } else {
                    exit::OK
                }
            }
            Err(e) => {
                println!("[ERROR] checks: {e}");
                exit::FAILURE
            }
        }
    })
}
