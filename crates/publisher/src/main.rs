//! `sluice`: MySQL/MariaDB change data capture, and an offline binlog decoder.
//!
//! This file owns the command line: parsing (clap), logging set-up (tracing), and the exit
//! codes each command's outcome maps to. The commands are in the library (`sluice::cmd`).

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sluice::cmd::{self, Exit};

/// Sluice: MySQL/MariaDB change data capture into Kafka, and an offline binlog decoder.
///
/// `sluice run` streams every row change of a server into Kafka as Avro records keyed by
/// primary key, exactly once; `sluice dump` decodes binlog files, or a live server, into JSON
/// lines, SQL, or flashback SQL that undoes the changes; `sluice check` says whether a
/// configuration and its server are ready. `sluice help COMMAND` has the details and examples.
#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about,
    long_about,
    propagate_version = true,
    after_long_help = "\
Examples:
  sluice check --config sluice.toml
  sluice run --config sluice.toml
  sluice dump mysql-bin.000042
  sluice dump --source mysql://repl@db1:3306 --follow
  sluice sink elasticsearch --config sluice.toml
  sluice verify --config sluice.toml
  sluice archive --config sluice.toml
  sluice dump --format flashback -t shop.orders --start-datetime '2024-05-01 10:00:00' binlog.000042
  sluice dump --start-datetime '2024-05-01 10:00:00' --stop-datetime '2024-05-01 11:00:00' /var/lib/sluice/archive

Exit codes: 0 success, 1 failure, 2 bad usage or configuration, 65 corrupt or unsupported input
(a damaged archive too), 66 input not found, 74 output error, 75 a --timeout passed first, 130 interrupted (dump of files)."
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "SLUICE_LOG_FORMAT")]
    log_format: LogFormat,

    /// Log filter, in `tracing` syntax (e.g. `info`, `sluice=debug`).
    #[arg(long, global = true, default_value = "info", env = "SLUICE_LOG")]
    log: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode binlog files (or a live server) into JSON lines, SQL or flashback SQL.
    Dump(Box<cmd::dump::DumpArgs>),
    /// Validate a configuration file, connect to the source, and check that it is set up for
    /// change capture (binlog format, row image, metadata, GTIDs, privileges, server id).
    Check(cmd::check::CheckArgs),
    /// Stream row changes into Kafka as Avro records, exactly once (see sluice.example.toml).
    Run(cmd::run::RunArgs),
    /// Show the committed checkpoint of a source, or move it (`sluice position set --to ...`).
    Position(cmd::position::PositionArgs),
    /// Ask the running `sluice run` to snapshot tables (their rows as op "r" records) while it
    /// keeps streaming.
    Snapshot(cmd::snapshot::SnapshotArgs),
    /// Apply the tables' topics to another system: `sluice sink elasticsearch` keeps an index
    /// per table equal to the table.
    Sink(cmd::sink::SinkArgs),
    /// Compare each table with its topic, on a live pipeline: the keys missing, extra or
    /// different, by column.
    Verify(cmd::verify::VerifyArgs),
    /// Copy the server's binlog files, byte for byte, into an archive that outlives the
    /// server's retention.
    Archive(cmd::archive::ArchiveArgs),
}

fn init_logging(format: LogFormat, filter: &str) {
    // sqlparser logs every statement it parses at debug level: DDL from the binlog may carry a
    // password (a FEDERATED table's CONNECTION), so it speaks only when asked by name
    let given = filter;
    let filter = if filter.contains("sqlparser") { filter.to_string() } else { format!("{filter},sqlparser=warn") };
    let (filter, refused) = match tracing_subscriber::EnvFilter::try_new(filter) {
        Ok(f) => (f, None),
        Err(e) => (tracing_subscriber::EnvFilter::new("info,sqlparser=warn"), Some(e)),
    };
    let colours = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours)
        .with_target(false)
        // its own report of a failed write is an eprintln!, which panics on a closed stderr
        .log_internal_errors(false);
    match format {
        LogFormat::Text => builder.with_writer(sluice::LogLines { colours }).init(),
        LogFormat::Json => {
            sluice::messages_as_json(true);
            builder.with_writer(std::io::stderr).json().init();
        }
    }
    if let Some(e) = refused {
        tracing::warn!("The log filter {given:?} (--log or SLUICE_LOG) is not one ({e}); logging at info");
    }
}

/// The exit code of an outcome (the help's list, for scripts).
fn code(exit: Exit) -> u8 {
    match exit {
        Exit::Ok => 0,
        Exit::Failure => 1,
        Exit::Usage => 2,
        Exit::Data => 65,
        Exit::NoInput => 66,
        Exit::Output => 74,
        Exit::Timeout => 75,
        Exit::Interrupted => 130,
    }
}

/// mimalloc keeps the pages a thread frees for a second (its `purge_delay`) before giving them
/// back. A snapshot's rows are read on one thread and freed on another, so the default kept
/// 10-25 MiB more at the peak: 65-82 MiB for the 1 M-row snapshot and up to 67 MiB for the
/// streaming benchmark, against 53-57 MiB with the pages given back at once, at no cost in time
/// the benchmarks could show (`bench/README.md`, "The snapshot's memory"). So the commands that
/// run as services give pages back at once (`0`). `sluice dump` is not one: its buffers go from
/// the reading thread to the workers and back many times a second, and giving each back at
/// once cost it 10-13% of its time in page faults and TLB shootdowns for 3-5 MiB less at the
/// peak; it keeps them 10 ms (`bench/README.md`, "The dump's freed pages").
///
/// mimalloc reads its options from the environment only while the process loads, so a process
/// started without the setting runs itself again, once, with it (`exec`: the same process id,
/// name, arguments and standard streams). A value the user set, any value, is kept; when the
/// `exec` fails (no `/proc`, or the binary's file was removed since it started), Sluice runs
/// as it is.
fn set_purge_delay(command: &Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        const PURGE_DELAY: &str = "MIMALLOC_PURGE_DELAY";
        if std::env::var_os(PURGE_DELAY).is_some() {
            return;
        }
        let delay = match command {
            Command::Dump(_) => "10",
            _ => "0",
        };
        // the binary's own path (/proc/self/exe resolved), not /proc/self/exe itself: the
        // kernel names the process after the file run, and `ps`, `top` and `pgrep sluice`
        // would see "exe"
        let Ok(exe) = std::env::current_exe() else { return };
        // started through the dynamic loader (`ld-linux-x86-64.so.2 ./sluice ...`), the binary
        // is the loader's: running that again with these arguments would not be Sluice
        if exe.file_name().is_some_and(|n| n.to_string_lossy().starts_with("ld-")) {
            return;
        }
        let mut args = std::env::args_os();
        let mut again = std::process::Command::new(exe);
        if let Some(arg0) = args.next() {
            again.arg0(arg0);
        }
        // returns only when it failed
        let _ = again.args(args).env(PURGE_DELAY, delay).exec();
    }
}

fn main() -> ExitCode {
    // parsed first to know the command (a --help or a usage error ends here, as before)
    let cli = Cli::parse();
    set_purge_delay(&cli.command);
    init_logging(cli.log_format, &cli.log);
    let exit = match cli.command {
        Command::Dump(args) => cmd::dump::run(*args),
        Command::Check(args) => cmd::check::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Position(args) => cmd::position::run(args),
        Command::Snapshot(args) => cmd::snapshot::run(args),
        Command::Sink(args) => cmd::sink::run(args),
        Command::Verify(args) => cmd::verify::run(args),
        Command::Archive(args) => cmd::archive::run(args),
    };
    ExitCode::from(code(exit))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The examples in `--help` are commands to copy: one per line, not re-wrapped into prose.
    #[test]
    fn help_examples_stay_one_per_line() {
        let mut cli = Cli::command().term_width(100);
        let cases = [
            (None, "  sluice run --config sluice.toml"),
            (
                None,
                "  sluice dump --format flashback -t shop.orders --start-datetime '2024-05-01 10:00:00' binlog.000042",
            ),
            (Some("dump"), "  sluice dump --source mysql://repl@db1:3306 --start-gtid 0-1-1000 --follow"),
            (Some("run"), "  sluice check --config sluice.toml && sluice run --config sluice.toml"),
            (Some("check"), "  SLUICE_SOURCE__URL=mysql://repl@db2:3306 sluice check -c sluice.toml"),
        ];
        for (sub, line) in cases {
            let help = match sub {
                Some(s) => cli.find_subcommand_mut(s).unwrap().render_long_help().to_string(),
                None => cli.render_long_help().to_string(),
            };
            assert!(help.lines().any(|l| l == line), "{line:?} in the help of {sub:?}:\n{help}");
        }
    }
}
