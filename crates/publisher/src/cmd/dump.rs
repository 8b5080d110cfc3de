//! `sluice dump`: binlog files to JSON lines, SQL, or flashback SQL.
//!
//! The loop here walks events in order, tracks the transaction each row belongs to (GTID,
//! XID, BEGIN/COMMIT), applies the position/time/table filters, and hands rows to the chosen
//! output. Values are rendered by [`crate::render`]; SQL statements by `sql.rs`, JSON lines by
//! `json.rs`.

mod json;
mod spool;
mod sql;
mod workers;

use std::collections::HashSet;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use sluice_binlog::decoder::{DecoderOptions, EventDecoder};
use sluice_binlog::event::Event;
use sluice_binlog::file::BinlogReader;
use sluice_binlog::rows::{RowChange, RowsEvent};
use sluice_binlog::temporal::days_from_civil;
use sluice_binlog::transaction::{gtid_of, AnyGtid, GtidState, ResumePoint, Step, TransactionTracker};
use sluice_binlog::walk::Located;
use sluice_binlog::Error as BinlogError;

use super::Exit;
use crate::config::{Secret, SourceUrl, TlsSetting};
use crate::filter::TableFilter;
use crate::position::StartFrom;
use crate::schema::{RowEffect, SchemaHistory};
use crate::source::{Endpoint, ReplicationSource, SourceConfig, SourceError, SourceEvent};
use spool::{ReverseSpool, TxSpool};
use workers::{Counts, Done, Event as RenderEvent, Pool, Taken, WorkerGone};

/// Output format of `sluice dump`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One JSON object per row change (NDJSON).
    Json,
    /// SQL statements that re-apply the changes.
    Sql,
    /// SQL statements that undo the changes, last change first.
    Flashback,
}

/// Arguments of `sluice dump`.
#[derive(Debug, Args)]
#[command(after_long_help = "\
Examples:
  sluice dump mysql-bin.000042 mysql-bin.000043
  sluice dump --table 'shop.order*' --start-datetime '2024-05-01 10:00:00' binlog.gz
  sluice dump --format flashback --start-position 4711 --stop-position 9000 binlog.000042 >undo.sql

  # from a live server: all it still has, then stop; new changes until Ctrl-C; after a GTID set
  sluice dump --source mysql://repl@db1:3306 --password-file ~/.repl-pw
  sluice dump --source mysql://repl@db1:3306 --follow --table 'shop.*'
  sluice dump --source mysql://repl@db1:3306 --start-gtid 0-1-1000 --follow

Each JSON line: type (INSERT/UPDATE/DELETE), database, table, timestamp (UTC) and ts (seconds),
position {file, offset, row}, server_id, gtid, before, after, xid. Columns are named from the
binlog (binlog_row_metadata=FULL); without names there, a live dump takes them from the table
definitions it reads from the server and follows through DDL, and otherwise prints @1..@N (said
once on stderr). A summary line per file goes to stderr; a live dump also prints the position to
resume from.

Exit codes: 0 done (also when the reader of the output stops reading), 1 failure, 2 bad usage,
65 corrupt, cut or unsupported input (an archive whose file was cut or is gone after it was
archived too), 66 an input not found or unreadable, 74 output error, 130 interrupted.")]
pub struct DumpArgs {
    /// Binlog files, read in order (`-` reads standard input; gzip files are recognised), or
    /// the directory of a `sluice archive` or its object store URL (`s3://bucket/prefix`,
    /// credentials from AWS_*/GOOGLE_*/AZURE_* variables): its files, those its index says hold
    /// events of the --start-datetime/--stop-datetime range (from a store, downloaded first).
    #[arg(value_name = "FILE", required_unless_present = "source", conflicts_with = "source")]
    files: Vec<PathBuf>,

    #[command(flatten)]
    live: LiveArgs,

    /// What to print.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    format: Format,

    /// Start at the first event at or after this offset of the first file (with --source:
    /// the offset of an event in --start-file, as `--stop-position`, a resume hint or
    /// `mariadb-binlog` print it: the server refuses one inside an event).
    #[arg(long, value_name = "OFFSET")]
    start_position: Option<u64>,

    /// Stop before the first event at or after this offset of the last file (with --source:
    /// of --start-file, and the dump also stops where the stream moves on to the next file).
    #[arg(long, value_name = "OFFSET")]
    stop_position: Option<u64>,

    /// Skip events before this time: `YYYY-MM-DD hh:mm:ss` in UTC (or RFC 3339 with `Z`).
    #[arg(long, value_name = "TIME", value_parser = parse_datetime)]
    start_datetime: Option<u32>,

    /// Stop at the first event at or after this time (UTC).
    #[arg(long, value_name = "TIME", value_parser = parse_datetime)]
    stop_datetime: Option<u32>,

    /// Only rows of databases matching this pattern (`*` and `?` wildcards; repeatable).
    #[arg(long = "database", short = 'd', value_name = "PATTERN")]
    databases: Vec<String>,

    /// Only rows of tables matching this pattern: `table` or `db.table`, wildcards allowed
    /// (repeatable).
    #[arg(long = "table", short = 't', value_name = "PATTERN")]
    tables: Vec<String>,

    /// Print every event (not only row changes) as JSON lines, for debugging (json format).
    #[arg(long)]
    events: bool,

    /// Do not verify event checksums (to read what can be read of a damaged file).
    #[arg(long)]
    no_verify_checksum: bool,

    /// Largest decompressed transaction payload or compressed event accepted, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    max_decompressed_mib: u64,

    /// Threads writing JSON lines while the events are read (default: the machine's cores, at
    /// most 4; 1 writes them on the reading thread). The output is the same for any number.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    threads: Option<u16>,
}

/// Live-source options of `sluice dump`.
#[derive(Debug, Args)]
pub struct LiveArgs {
    /// Stream from a server instead of files: `mysql://USER@HOST[:PORT]`. The password comes
    /// from --password-file, the SLUICE_PASSWORD environment variable, or a prompt; it is never
    /// printed.
    #[arg(long, value_name = "URL")]
    source: Option<String>,

    /// Read the password from this file (trailing newline ignored).
    #[arg(long, value_name = "FILE", requires = "source")]
    password_file: Option<PathBuf>,

    /// The password (prefer --password-file: the environment of a process is readable by its
    /// user).
    #[arg(long, env = "SLUICE_PASSWORD", hide_env_values = true, requires = "source")]
    password: Option<String>,

    /// Keep streaming new changes until interrupted (Ctrl-C) instead of stopping at the
    /// server's current end.
    #[arg(long, requires = "source")]
    follow: bool,

    /// Start in this binlog file (with --start-position, default 4): on the server
    /// (--source), or in an archive given as input.
    #[arg(long, value_name = "FILE")]
    start_file: Option<String>,

    /// Start after this GTID set: MySQL `uuid:1-5,...` or MariaDB `0-1-100,...`. With --source
    /// the server starts there; with files or an archive, the transactions it holds are skipped
    /// (and an archive's index spares the files holding only those).
    #[arg(long, value_name = "GTIDS", conflicts_with = "start_file")]
    start_gtid: Option<String>,

    /// Without --start-file/--start-gtid: start at the oldest binlog the server has
    /// (default), or at its current end (default with --follow).
    #[arg(long, value_enum, requires = "source")]
    from: Option<StartAt>,

    /// This replica's server id: must differ from the server's and other replicas'.
    #[arg(long, default_value_t = 51_001, requires = "source")]
    server_id: u32,

    /// TLS to the server.
    #[arg(long, value_enum, default_value_t = TlsSetting::Preferred)]
    tls: TlsSetting,

    /// CA certificate (PEM) for --tls verify-ca / verify-identity.
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,

    /// Heartbeat period asked of the server, in seconds (1 to 3600); a silent connection is
    /// declared dead after three periods and reconnected.
    #[arg(long, value_name = "SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    heartbeat: u64,

    /// Give up after this many consecutive failed reconnection attempts (default: never).
    #[arg(long, value_name = "N")]
    max_reconnect_attempts: Option<u32>,
}

/// Where a live dump starts when no file or GTID is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StartAt {
    /// The oldest binlog on the server.
    Earliest,
    /// The server's current end: only new changes.
    Current,
}

/// `YYYY-MM-DD[ T]hh:mm:ss[Z]` (UTC) to seconds since the epoch.
fn parse_datetime(s: &str) -> Result<u32, String> {
    let bad = || format!("{s:?} is not a time like '2024-05-01 10:00:00' (UTC)");
    let t = s.trim().trim_end_matches('Z');
    let (date, time) = t.split_once([' ', 'T']).unwrap_or((t, "00:00:00"));
    let d: Vec<u32> = date.split('-').map(str::parse).collect::<Result<_, _>>().map_err(|_| bad())?;
    let tm: Vec<u32> = time.split(':').map(str::parse).collect::<Result<_, _>>().map_err(|_| bad())?;
    let (&[y, mo, da], &[h, mi, se]) = (d.as_slice(), tm.as_slice()) else { return Err(bad()) };
    if !(1..=12).contains(&mo) || !(1..=31).contains(&da) || h > 23 || mi > 59 || se > 59 {
        return Err(bad());
    }
    // a day the month does not have (2026-02-30 was taken as March 2nd)
    let month_days = match (u16::try_from(y), u8::try_from(mo)) {
        (Ok(y), Ok(m)) => u32::from(sluice_binlog::temporal::days_in_month(y, m)),
        _ => return Err(bad()),
    };
    if da > month_days {
        return Err(format!("{s:?} is no date: {y:04}-{mo:02} has {month_days} days"));
    }
    let days = days_from_civil(i64::from(y), mo, da);
    let secs = days * 86_400 + i64::from(h * 3600 + mi * 60 + se);
    u32::try_from(secs).map_err(|_| format!("{s:?} is outside the binlog's time range (1970-2106)"))
}

/// The transaction the current rows belong to.
#[derive(Default)]
struct TxContext {
    gtid: Option<String>,
}

/// Counts for the per-file summary.
#[derive(Default)]
struct Summary {
    events: u64,
    rows: Counts,
    /// Tables emptied by a statement (TRUNCATE, DROP TABLE, ...).
    truncates: u64,
}

struct Dumper<W: Write> {
    args: DumpArgs,
    out: W,
    filter: TableFilter,
    tx: TxContext,
    /// The transaction boundaries of files (a live source tracks its own).
    tracker: TransactionTracker,
    spool: TxSpool,
    flashback: ReverseSpool,
    warned_positional: HashSet<String>,
    warned_unknown: HashSet<u8>,
    /// Live only: the dumped tables' definitions, read from the server at the start and
    /// followed through DDL, for TABLE_MAPs without column metadata
    /// (`binlog_row_metadata=MINIMAL`, MariaDB's NO_LOG): names, signedness, charsets.
    schemas: Option<SchemaHistory>,
    stop: bool,
    /// Files only: set by Ctrl-C or SIGTERM (see [`crate::process::interrupt_flag`]).
    interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Where the dump was interrupted: the file and offset to resume from (the start of the
    /// transaction it cut, or the next event).
    interrupted_at: Option<(String, u64)>,
    /// The file and offset of the open transaction's first event.
    tx_begin: (String, u64),
    /// How the file read last ended: the next file its ROTATE names (`Some(Some(..))`), a
    /// STOP (`Some(None)`), or neither (`None`: cut short, or its server crashed).
    file_end: Option<Option<String>>,
    /// Files downloaded from an object store, by the name rows and messages give them (the
    /// store's URL and object, not the temporary copy's path).
    shown: std::collections::HashMap<PathBuf, String>,
    /// `--start-gtid` for files: transactions it holds are skipped.
    start_gtid: Option<GtidState>,
    /// The current transaction is one of those.
    skip_tx: bool,
    /// The counts of the file (or live stream) being dumped.
    summary: Summary,
    /// The row changes of the open transaction: counted in `summary` once it is written (an
    /// interrupted dump, or SQL of a cut transaction, leaves it out).
    tx_rows: Counts,
    /// JSON lines rendered on worker threads (None: on this one).
    pool: Option<Pool>,
    keys: json::KeysCache,
}

/// The way on after a checksum mismatch: the decoder names no flag of this command, so the
/// command says it.
fn checksum_hint(e: &BinlogError) -> &'static str {
    if matches!(e.root(), BinlogError::ChecksumMismatch { .. }) {
        "; `--no-verify-checksum` reads on at your own risk"
    } else {
        ""
    }
}

enum Failure {
    Input(BinlogError),
    Output(io::Error),
    /// A change SQL cannot be written of, and where it is (`file at offset`).
    Sql(sql::SqlError, String),
    Source(SourceError),
    Usage(String),
    Internal(WorkerGone),
}

impl From<WorkerGone> for Failure {
    fn from(e: WorkerGone) -> Self {
        Failure::Internal(e)
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Output(e)
    }
}

/// The arguments' problems that make the dump impossible before it starts: ranges that end
/// before they begin, patterns that can match no table, a position with nothing to apply to.
fn usage_problems(args: &DumpArgs) -> Vec<String> {
    let mut p = Vec::new();
    // clap's `requires = "source"` does not hold these back (a hostile trial's `dump --follow
    // FILE` dumped the file and exited 0, as if following)
    if args.live.source.is_none() {
        if args.live.follow {
            p.push("--follow streams a server's new changes: it needs --source (files are read to their end)".into());
        }
        if args.live.password_file.is_some() {
            p.push("--password-file is for --source: files need no password".into());
        }
        if args.live.from.is_some() {
            p.push(
                "--from picks where a server's stream starts: it needs --source (for files: --start-position, \
                    --start-datetime)"
                    .into(),
            );
        }
    }
    for pattern in &args.tables {
        if let Some(m) = crate::config::table_pattern_problem(pattern) {
            p.push(format!("--table {m}"));
        }
    }
    for pattern in &args.databases {
        if pattern.is_empty() || pattern.contains('.') {
            p.push(format!("--database {pattern:?} can match no database (names have no dots): give a database name"));
        }
    }
    let single_file = args.files.len() == 1 || args.live.start_file.is_some();
    if let (Some(start), Some(stop), true) = (args.start_position, args.stop_position, single_file) {
        if start >= stop {
            p.push(format!("--start-position {start} is not before --stop-position {stop}: nothing would be dumped"));
        }
    }
    if let (Some(start), Some(stop)) = (args.start_datetime, args.stop_datetime) {
        if start >= stop {
            p.push(format!(
                "--start-datetime {}Z is not before --stop-datetime {}Z: nothing would be dumped",
                json::iso_utc(start).trim_end_matches('Z'),
                json::iso_utc(stop).trim_end_matches('Z')
            ));
        }
    }
    if let Some(stop) = args.stop_position.filter(|&s| s <= 4) {
        p.push(format!("--stop-position {stop} stops before the first event (at offset 4): nothing would be dumped"));
    }
    if args.events && args.format != Format::Json {
        p.push("--events prints events as JSON lines: it goes with --format json only".into());
    }
    if args.live.source.is_some() && args.live.server_id == 0 {
        p.push("--server-id must not be 0 (the server refuses a replica without an id)".into());
    }
    if args.live.source.is_some() && args.start_position.is_some() && args.live.start_file.is_none() {
        p.push("--start-position with --source needs --start-file (the offset is in that file)".into());
    }
    p
}

/// The files of the archive at `url` (credentials from the environment) that may hold the
/// range asked, downloaded into a temporary directory (removed when it is dropped).
fn download_range(
    url: &str,
    range: &crate::archive::dir::Range,
) -> Result<(tempfile::TempDir, Vec<PathBuf>), crate::archive::dir::Refusal> {
    let remote = crate::archive::store::Remote::open(url, None)?;
    let dir = tempfile::tempdir().map_err(|e| format!("making a temporary directory for {remote}: {e}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("reading {remote}: {e}"))?;
    let paths = rt.block_on(remote.download_range(dir.path(), range))?;
    Ok((dir, paths))
}

/// `--start-gtid` for files and archives (the dump skips the transactions it holds); None with
/// `--source`, where the server starts after it.
fn file_start_gtid(args: &DumpArgs) -> Result<Option<GtidState>, String> {
    let Some(g) = args.live.start_gtid.as_deref().filter(|_| args.live.source.is_none()) else { return Ok(None) };
    match g.parse::<StartFrom>() {
        Ok(StartFrom::MysqlGtid(s)) => Ok(Some(GtidState::Mysql(s))),
        Ok(StartFrom::MariadbGtid(l)) => Ok(Some(GtidState::Mariadb(l))),
        _ => Err(format!("--start-gtid {g:?} is not a GTID set: give MySQL uuid:1-5 or MariaDB 0-1-100")),
    }
}

/// Runs `sluice dump`; returns the exit code.
pub fn run(mut args: DumpArgs) -> Exit {
    // an archive's directory: its files of the time range, in the server's order
    let mut files = Vec::with_capacity(args.files.len());
    // an archive (a directory, or an object store whose files are downloaded here first): its
    // files that may hold the range asked, by its index
    let mut _downloads: Vec<tempfile::TempDir> = Vec::new();
    let mut shown: std::collections::HashMap<PathBuf, String> = std::collections::HashMap::new();
    let start_gtid = match file_start_gtid(&args) {
        Ok(g) => g,
        Err(m) => {
            crate::eline!("sluice dump: {m}");
            return Exit::Usage;
        }
    };
    let range = crate::archive::dir::Range {
        from: args.start_datetime,
        to: args.stop_datetime,
        start_file: args.live.start_file.clone(),
        start_gtid: start_gtid.clone(),
    };
    let mut archives = 0;
    for f in std::mem::take(&mut args.files) {
        let text = f.to_string_lossy().into_owned();
        let chosen = if crate::archive::store::is_url(&text) {
            download_range(&text, &range).map(|(dir, chosen)| {
                // rows name the store's object, not the temporary copy
                for c in &chosen {
                    let object = c.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                    shown.insert(c.clone(), format!("{}/{object}", text.trim_end_matches('/')));
                }
                _downloads.push(dir);
                chosen
            })
        } else if f.is_dir() {
            let away = crate::archive::dir::uploaded_away(&f, &range);
            if let (Some(first), Some(last)) = (away.first(), away.last()) {
                crate::enote!(
                    "sluice dump: {text} is an archiver's spool: {} file(s) of the range ({first} to {last}) were \
                     uploaded to its object store and are not here, and the dump goes without them; dump the store's \
                     URL (the archiver's archive.to) for them",
                    away.len()
                );
            }
            crate::archive::dir::files_between(&f, &range)
        } else {
            files.push(f);
            continue;
        };
        archives += 1;
        match chosen {
            Ok(chosen) => {
                if chosen.is_empty() {
                    crate::enote!("sluice dump: {text}: no archived file holds events of the range asked");
                }
                files.extend(chosen);
            }
            Err(e) => {
                crate::eline!("sluice dump: {text}: {e}");
                // a cut or missing file is a fault of the input's data, as a corrupt file is
                return match e {
                    crate::archive::dir::Refusal::Damaged(_) => Exit::Data,
                    crate::archive::dir::Refusal::Unreadable(_) => Exit::NoInput,
                };
            }
        }
    }
    if args.live.source.is_none() && args.live.start_file.is_some() && archives == 0 {
        crate::eline!(
            "sluice dump: --start-file reads from a server (--source) or an archive (its directory or URL); for files, \
             name the files to read"
        );
        return Exit::Usage;
    }
    // --start-position is an offset in --start-file: the first file read only when it is that one
    if let (Some(f), Some(first)) = (&args.live.start_file, files.first()) {
        let name = first.file_name().map(|n| n.to_string_lossy().trim_end_matches(".gz").to_string());
        if args.live.source.is_none() && name.as_deref() != Some(f.as_str()) {
            args.start_position = None;
        }
    }
    // every input before any output (`-`, standard input, aside): a missing file after the
    // first was found only once the ones before it were printed
    for f in files.iter().filter(|f| f.as_os_str() != "-") {
        if let Err(e) = std::fs::File::open(f) {
            crate::eline!("sluice dump: {}: {e}", f.display());
            return Exit::NoInput;
        }
    }
    args.files = files;
    let mut problems = usage_problems(&args);
    problems.extend(order_problems(&args.files));
    if !problems.is_empty() {
        for m in problems {
            crate::eline!("sluice dump: {m}");
        }
        return Exit::Usage;
    }
    let filter = TableFilter::new(args.databases.clone(), args.tables.clone());
    // JSON rows render on workers while the reading thread reads on; SQL and `--events` on it
    let threads = args
        .threads
        .map_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get).min(4), usize::from);
    let pool = if args.format == Format::Json && !args.events && threads > 1 {
        match Pool::new(threads) {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::warn!(error = %e, "Cannot start threads to write JSON lines; writing them on one");
                None
            }
        }
    } else {
        None
    };
    let stdout = io::stdout().lock();
    let mut d = Dumper {
        args,
        out: BufWriter::with_capacity(256 * 1024, stdout),
        filter,
        tx: TxContext::default(),
        tracker: TransactionTracker::new(ResumePoint { file: String::new(), position: 4, gtid: None }),
        spool: TxSpool::default(),
        flashback: ReverseSpool::default(),
        warned_positional: HashSet::new(),
        warned_unknown: HashSet::new(),
        schemas: None,
        stop: false,
        interrupt: None,
        interrupted_at: None,
        tx_begin: (String::new(), 0),
        file_end: None,
        start_gtid,
        shown,
        skip_tx: false,
        summary: Summary::default(),
        tx_rows: Counts::default(),
        pool,
        keys: json::KeysCache::default(),
    };
    if d.args.live.source.is_none() {
        // the live dump watches the signals in its own loop
        d.interrupt = Some(crate::process::interrupt_flag("Interrupted: ending the dump at this event"));
    }
    let result = d.preamble().and_then(|()| if d.args.live.source.is_some() { d.run_live() } else { d.run_all() });
    let result = result.and_then(|()| d.finish());
    match result {
        Ok(()) if d.interrupted_at.is_some() => Exit::Interrupted,
        Ok(()) => Exit::Ok,
        // the reader stopped reading (`| head`): that ends the dump, quietly
        Err(Failure::Output(e)) if crate::console::is_closed_pipe(&e) => Exit::Ok,
        Err(Failure::Output(e)) => {
            tracing::error!(error = %e, "Writing the output failed");
            Exit::Output
        }
        // input SQL cannot be written of (no column names): unsupported input, as the exit
        // codes say
        Err(Failure::Sql(e, at)) => {
            let _ = d.out.flush();
            tracing::error!("{at}: {e}");
            Exit::Data
        }
        Err(Failure::Usage(msg)) => {
            tracing::error!("{msg}");
            Exit::Usage
        }
        Err(Failure::Internal(e)) => {
            let _ = d.out.flush();
            tracing::error!("{e}");
            Exit::Failure
        }
        Err(Failure::Source(e)) => {
            let _ = d.out.flush();
            let hint = match &e {
                SourceError::Decode(d) => checksum_hint(d),
                _ => "",
            };
            tracing::error!("{e}{hint}");
            // an event the server sent that does not decode is corrupt input, as in a file
            if matches!(e, SourceError::Decode(_)) {
                Exit::Data
            } else {
                Exit::Failure
            }
        }
        Err(Failure::Input(e)) => {
            // what was decoded before the error is real: write it out, including the JSON rows
            // of the transaction the error cuts (without an xid, as at a clean end of input).
            // SQL and flashback print nothing of it: a partial transaction must not be applied.
            if d.args.format == Format::Json && !d.spool.is_empty() {
                let _ = d.spool.flush_with(&mut d.out, "null}");
            }
            let _ = d.out.flush();
            tracing::error!("{e}{}", checksum_hint(&e));
            match e {
                BinlogError::Io { .. } => Exit::NoInput,
                _ => Exit::Data,
            }
        }
    }
}

impl<W: Write> Dumper<W> {
    /// What the output starts with, from files or from a server alike.
    fn preamble(&mut self) -> Result<(), Failure> {
        if self.args.format == Format::Sql || self.args.format == Format::Flashback {
            // text literals are UTF-8 (a client of another default character set stored them
            // mangled), TIMESTAMP literals UTC
            writeln!(self.out, "SET NAMES utf8mb4;\nSET time_zone = '+00:00';")?;
        }
        Ok(())
    }

    fn run_all(&mut self) -> Result<(), Failure> {
        let files = self.args.files.clone();
        let last = files.len().saturating_sub(1);
        for (i, path) in files.iter().enumerate() {
            if self.stop {
                break;
            }
            let opts = DecoderOptions {
                verify_checksum: !self.args.no_verify_checksum,
                max_decompressed_size: self.args.max_decompressed_mib.saturating_mul(1 << 20),
            };
            let mut reader = match self.shown.get(path) {
                Some(name) => std::fs::File::open(path)
                    .map_err(|source| BinlogError::Io { file: name.clone(), source })
                    .and_then(|f| BinlogReader::from_reader(name.clone(), f, EventDecoder::new(opts))),
                None => BinlogReader::open(path, EventDecoder::new(opts)),
            }
            .map_err(Failure::Input)?;
            let start = if i == 0 { self.args.start_position } else { None };
            let stop = if i == last { self.args.stop_position } else { None };
            self.summary = Summary::default();
            self.file_end = None;
            let mut res = self.run_file(&mut reader, start, stop);
            if res.is_ok() && i != last && !self.stop {
                if self.tracker.in_transaction() {
                    res = self.file_ends_inside_a_transaction(reader.name());
                } else {
                    self.check_next_file(reader.name(), &files[i + 1]);
                }
            }
            let mut summary = std::mem::take(&mut self.summary);
            let cut = res.is_err() || (self.tracker.in_transaction() && self.interrupted_at.is_none());
            if cut && self.args.format == Format::Json {
                // the JSON lines of a transaction the input ends inside, or an error cuts, are
                // printed after this (see `finish` and `run`)
                summary.rows.add_all(&self.tx_rows);
            }
            if let Err(Failure::Output(e)) = &res {
                if crate::console::is_closed_pipe(e) {
                    // the reader has what it wanted (`| head`): no summary of a cut-off dump
                    return res;
                }
            }
            let stats = reader.decoder().stats();
            let unknown = if stats.unknown_types.is_empty() {
                String::new()
            } else {
                let types: Vec<String> = stats.unknown_types.iter().map(|(t, n)| format!("type {t} x{n}")).collect();
                format!(" ({})", types.join(", "))
            };
            crate::enote!(
                "sluice dump: {}: {} events, {} rows ({} inserts, {} updates, {} deletes), {} tables emptied, {} \
                 unknown events skipped{}{}",
                reader.name(),
                summary.events,
                summary.rows.total(),
                summary.rows.inserts,
                summary.rows.updates,
                summary.rows.deletes,
                summary.truncates,
                stats.unknown_events,
                unknown,
                if res.is_err() { ", stopped by an error" } else { "" }
            );
            res?;
        }
        Ok(())
    }

    /// `--source`, parsed (a password in it is refused: it would show in `ps`).
    fn source_url(&self) -> Result<SourceUrl, Failure> {
        let text = self.args.live.source.as_deref().unwrap_or_default();
        SourceUrl::parse(text, "--password-file, SLUICE_PASSWORD or the prompt")
            .map_err(|e| Failure::Usage(format!("--source {e}")))
    }

    fn source_config(&self) -> Result<(SourceConfig, StartFrom), Failure> {
        let live = &self.args.live;
        let url = self.source_url()?;
        let password = match (&live.password_file, &live.password) {
            (Some(f), _) => std::fs::read_to_string(f)
                .map(|p| p.trim_end_matches(['\n', '\r']).to_string())
                .map_err(|e| Failure::Usage(format!("cannot read the password file {}: {e}", f.display())))?,
            (None, Some(p)) => p.clone(),
            (None, None) if io::IsTerminal::is_terminal(&io::stdin()) => {
                rpassword::prompt_password(format!("Password for {url}: "))
                    .map_err(|e| Failure::Usage(format!("cannot read the password: {e}")))?
            }
            (None, None) => {
                // an account without a password is allowed; said, so that a refusal
                // ("using password: NO") is not a riddle when the prompt was expected
                tracing::info!(
                    "Connecting without a password: none was given (--password-file or SLUICE_PASSWORD), and stdin \
                     is not a terminal to ask on"
                );
                String::new()
            }
        };
        let password = Secret::new(password);
        let endpoint = Endpoint {
            url: &url,
            password: &password,
            tls: live.tls,
            ca_file: live.ca.clone(),
            heartbeat: std::time::Duration::from_secs(live.heartbeat.max(1)),
        };
        let mut cfg = SourceConfig::new(&endpoint, live.server_id, "--server-id", "sluice".into());
        cfg.follow = live.follow;
        cfg.max_attempts = live.max_reconnect_attempts;
        cfg.decoder = DecoderOptions {
            verify_checksum: !self.args.no_verify_checksum,
            max_decompressed_size: self.args.max_decompressed_mib.saturating_mul(1 << 20),
        };
        let start = if let Some(file) = &live.start_file {
            StartFrom::Position { file: file.clone(), position: self.args.start_position.unwrap_or(4) }
        } else if let Some(g) = &live.start_gtid {
            match g.parse::<StartFrom>() {
                Ok(s @ (StartFrom::MysqlGtid(_) | StartFrom::MariadbGtid(_))) => s,
                Ok(_) => {
                    return Err(Failure::Usage(format!(
                        "--start-gtid {g:?} is not a GTID set: give MySQL uuid:1-5 or MariaDB 0-1-100 (a file \
                         and position go in --start-file and --start-position)"
                    )))
                }
                Err(_) => {
                    return Err(Failure::Usage(format!(
                        "--start-gtid {g:?} is not a GTID set: give MySQL uuid:1-5 or MariaDB 0-1-100"
                    )))
                }
            }
        } else {
            match live.from.unwrap_or(if live.follow { StartAt::Current } else { StartAt::Earliest }) {
                StartAt::Earliest => StartFrom::Earliest,
                StartAt::Current => StartFrom::Current,
            }
        };
        Ok((cfg, start))
    }

    fn run_live(&mut self) -> Result<(), Failure> {
        let (cfg, start) = self.source_config()?;
        // --stop-position bounds the dump to one file, as it bounds the last file named in
        // file mode: the first event at or after the offset, or in a later file, ends it.
        let stop = match (self.args.stop_position, &self.args.live.start_file) {
            (Some(p), Some(f)) => Some((f.clone(), p)),
            (Some(_), None) => {
                return Err(Failure::Usage("--stop-position with --source needs --start-file".into()));
            }
            (None, _) => None,
        };
        let rt = crate::process::runtime().map_err(Failure::Output)?;
        rt.block_on(async {
            let filter = self.filter.clone();
            // a dump that just ended (`--follow | head`) may still be registered with the server id:
            // the server drops it within a few heartbeat periods
            let patience_for = cfg.heartbeat * 3 + std::time::Duration::from_secs(5);
            let patience = std::time::Instant::now() + patience_for;
            let mut said = false;
            let (mut src, loaded) = loop {
                match ReplicationSource::start_with_schema(cfg.clone(), start.clone(), Some(&filter)).await {
                    Err(e) if e.is_predecessor_registered() && std::time::Instant::now() < patience => {
                        if !said {
                            tracing::info!(
                                "Server id {} is registered by a connection from this host: a dump that just ended \
                                 (the server drops it within a few heartbeats) or one still running (then give this \
                                 one another --server-id); waiting up to {} s",
                                cfg.server_id,
                                patience_for.as_secs()
                            );
                            said = true;
                        }
                        tokio::time::sleep(cfg.heartbeat / 2 + std::time::Duration::from_millis(200)).await;
                    }
                    Err(e) if e.is_predecessor_registered() => {
                        tracing::error!(
                            "Server id {} is still in use after {} s: another dump or replica from this host is \
                             connected with it; give this dump another --server-id",
                            cfg.server_id,
                            patience_for.as_secs()
                        );
                        return Err(Failure::Source(e));
                    }
                    r => break r.map_err(Failure::Source)?,
                }
            };
            let mut schemas = SchemaHistory::fresh(loaded, &[]);
            schemas.set_lower_case_table_names(src.lower_case_table_names());
            self.schemas = Some(schemas);
            self.summary = Summary::default();
            // One listener for the whole dump, on a task of its own: a listener made anew for each
            // event missed every signal that came while an event was being printed; this one
            // says so at once, even while this loop is blocked on a slow reader of the output,
            // and a second signal stops at once (tokio handles the signal, so nothing else would)
            let interrupted =
                crate::process::Shutdown::on_signal_or_exit("Interrupted; stopping at the last complete transaction");
            let result = loop {
                let next = tokio::select! {
                    ev = src.next_event() => ev,
                    () = interrupted.requested() => break Ok(()),
                };
                match next {
                    Ok(Some(SourceEvent::Event(ev, step))) => {
                        let ts = ev.event.header.timestamp;
                        if stop.as_ref().is_some_and(|(file, pos)| {
                            ev.file != file.as_str() || (ev.offset >= *pos && !ev.in_payload)
                        }) || self.args.stop_datetime.is_some_and(|t| ts >= t && ts != 0)
                        {
                            break Ok(());
                        }
                        self.summary.events += 1;
                        // --start-datetime: the events before it are read, not dumped (as from files)
                        let skip = self.args.start_datetime.is_some_and(|t| ts < t);
                        if let Err(e) = self.handle(&ev, step, skip) {
                            break Err(e);
                        }
                        // keep output timely when following
                        if self.spool.is_empty() {
                            self.out.flush()?;
                        }
                    }
                    Ok(Some(SourceEvent::Reconnected { at })) => {
                        tracing::info!(resume = %at, "Resuming after the last complete transaction");
                        if let Err(e) = self.discard_transaction() {
                            break Err(e);
                        }
                    }
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(Failure::Source(e)),
                }
            };
            // an incomplete transaction at the end is not printed: it is streamed again on resume
            let discarded = self.discard_transaction();
            let result = result.and(discarded);
            if let Err(Failure::Output(e)) = &result {
                if crate::console::is_closed_pipe(e) {
                    return result;
                }
            }
            let resume = src.resume_point();
            let summary = &self.summary;
            crate::enote!(
                "sluice dump: {}: {} events, {} rows ({} inserts, {} updates, {} deletes), {} tables emptied",
                self.source_url().map(|u| u.to_string()).unwrap_or_default(),
                summary.events,
                summary.rows.total(),
                summary.rows.inserts,
                summary.rows.updates,
                summary.rows.deletes,
                summary.truncates
            );
            crate::enote!("sluice dump: resume with {}", resume_flags(resume));
            result
        })
    }

    /// A file before the last ends inside a transaction: a server ends its files between
    /// transactions, so this one was cut short (the transaction's end, and what came after it
    /// in the file, are missing). Its rows are left out of SQL and flashback (part of a
    /// transaction must not be applied), or written without an xid as JSON, as at the end of
    /// the input; the next file starts afresh (its rows must not join this transaction).
    fn file_ends_inside_a_transaction(&mut self, file: &str) -> Result<(), Failure> {
        self.drain()?;
        let held = self.spool.len() + self.flashback.current_len() as u64;
        let done = if self.args.format == Format::Json {
            self.end_transaction(None)?;
            "written without an xid"
        } else {
            self.discard_transaction()?;
            "not written (part of a transaction must not be applied)"
        };
        let what = if held == 0 {
            "none of its row changes is in the dump".to_string()
        } else {
            format!("its {held} row changes so far are {done}")
        };
        tracing::warn!(
            "{file} ends inside a transaction, and a server ends its files between transactions: it was cut short, \
             and the end of that transaction and any after it in the file are missing; {what}"
        );
        self.tracker.reset();
        Ok(())
    }

    /// Says when what follows `file` may not be `next`: a server closes each file with a ROTATE
    /// naming the next one (or a STOP when it shuts down), so a file that ends with neither was
    /// cut short or its server crashed, and a ROTATE naming another file means the files
    /// between were not given.
    fn check_next_file(&self, file: &str, next: &std::path::Path) {
        let next_name = next.file_name().map(|n| n.to_string_lossy().trim_end_matches(".gz").to_string());
        match &self.file_end {
            None => tracing::warn!(
                "{file} ends without the ROTATE or STOP a server closes its files with: it was cut short, or its \
                 server crashed while writing it; changes may be missing between it and {}",
                next.display()
            ),
            Some(Some(named)) if next_name.as_deref() != Some(named.as_str()) => tracing::warn!(
                "{file} ends with a ROTATE to {named}, but the next file given is {}: the changes of the files \
                 between are not in the dump",
                next.display()
            ),
            Some(_) => {}
        }
    }

    fn finish(&mut self) -> Result<(), Failure> {
        let interrupted = self.interrupted_at.is_some();
        // a transaction the input ends inside: an interrupted dump leaves it out in every format
        // (the resumed one dumps it whole); SQL leaves it out of a range that ends inside it (a
        // --stop-position or --stop-datetime inside it, a file cut short), since applying part
        // of a transaction does what the server never did; JSON prints its rows, without an xid
        if self.tracker.in_transaction() && (interrupted || self.args.format != Format::Json) {
            self.drain()?;
            let cut = self.spool.len() + self.flashback.current_len() as u64;
            if cut > 0 && !interrupted {
                let (file, offset) = &self.tx_begin;
                tracing::warn!(
                    "The input ends inside a transaction (begun at {file}:{offset}): its {cut} row changes so far are \
                     not written as SQL (part of a transaction must not be applied); to include it, end the range \
                     after its COMMIT (a later --stop-position or --stop-datetime), or, if the file was cut short, \
                     dump the server's own"
                );
            }
            self.discard_transaction()?;
        }
        self.end_transaction(None)?;
        if self.args.format == Format::Flashback {
            self.flashback.write_reversed(&mut self.out)?;
        }
        self.out.flush()?;
        if let Some((file, offset)) = &self.interrupted_at {
            crate::enote!("sluice dump: interrupted; resume with --start-position {offset} {file}");
        }
        Ok(())
    }

    fn run_file(&mut self, reader: &mut BinlogReader, start: Option<u64>, stop: Option<u64>) -> Result<(), Failure> {
        let result = self.walk_file(reader, start, stop);
        // the rows still rendering come before whatever ended the walk; an error among them
        // is the first one
        self.drain()?;
        result
    }

    fn walk_file(&mut self, reader: &mut BinlogReader, start: Option<u64>, stop: Option<u64>) -> Result<(), Failure> {
        loop {
            let Some(ev) = reader.next_event().map_err(Failure::Input)? else {
                if let Some(s) = start.filter(|&s| s >= reader.position()) {
                    tracing::warn!(
                        file = reader.name(),
                        "--start-position {s} is at or past the end of the file (its events end at {}): nothing of it \
                         was dumped",
                        reader.position()
                    );
                }
                return Ok(());
            };
            if self.interrupt.as_ref().is_some_and(|f| f.load(std::sync::atomic::Ordering::Relaxed)) && !ev.in_payload {
                let at = if self.tracker.in_transaction() {
                    self.tx_begin.clone()
                } else {
                    (ev.file.to_string(), ev.offset)
                };
                self.interrupted_at = Some(at);
                self.stop = true;
                return Ok(());
            }
            self.summary.events += 1;
            if !ev.in_payload {
                self.file_end = match &ev.event.event {
                    Event::Rotate(r) => Some(Some(r.next_file.to_string())),
                    Event::Stop => Some(None),
                    _ => None,
                };
            }
            if stop.is_some_and(|s| ev.offset >= s && !ev.in_payload)
                || self
                    .args
                    .stop_datetime
                    .is_some_and(|t| ev.event.header.timestamp >= t && ev.event.header.timestamp != 0)
            {
                self.stop = true;
                return Ok(());
            }
            let step = self.tracker.observe(&ev);
            if matches!(step, Step::Begin | Step::StatementBegins) {
                self.tx_begin = (ev.file.to_string(), ev.offset);
            }
            // --start-gtid: a transaction the state holds is skipped whole
            if let (Some(g), Step::Begin) = (&self.start_gtid, step) {
                let gtid = gtid_of(&ev.event.event);
                // a set of the other flavour holds nothing of this file: said, not ignored
                if let Some(t) =
                    gtid.as_ref().filter(|t| matches!(t, AnyGtid::Mysql(_)) != matches!(g, GtidState::Mysql(_)))
                {
                    return Err(Failure::Usage(format!(
                        "--start-gtid is a {} GTID set, but {} holds {} GTIDs ({t} at offset {}): give a set of the \
                         file's server",
                        if matches!(g, GtidState::Mysql(_)) { "MySQL" } else { "MariaDB" },
                        ev.file,
                        if matches!(t, AnyGtid::Mysql(_)) { "MySQL" } else { "MariaDB" },
                        ev.offset
                    )));
                }
                self.skip_tx = gtid.is_some_and(|t| g.contains(&t));
            }
            let skip = start.is_some_and(|s| ev.offset < s)
                || self.args.start_datetime.is_some_and(|t| ev.event.header.timestamp < t)
                || self.skip_tx;
            self.handle(&ev, step, skip)?;
            if step.is_boundary() {
                self.skip_tx = false;
            }
        }
    }

    fn handle(&mut self, ev: &Located<'_>, step: Step, skip: bool) -> Result<(), Failure> {
        if self.args.events && !skip {
            self.print_event(ev)?;
        }
        if let Event::Unknown(code) = &ev.event.event {
            if self.warned_unknown.insert(*code) {
                tracing::warn!(
                    file = ev.file,
                    offset = ev.offset,
                    type_code = code,
                    size = ev.event.header.event_size,
                    "Skipping an event of unknown type (counted in the summary; later ones of this type are not logged)"
                );
            }
        }
        match step {
            Step::Begin => {
                self.end_transaction(None)?;
                self.tx.gtid = gtid_of(&ev.event.event).map(|g| g.to_string());
            }
            Step::Commit { xid } => {
                self.end_transaction(xid)?;
                self.tx.gtid = None;
            }
            Step::Rollback => {
                self.end_transaction(None)?;
                self.tx.gtid = None;
            }
            // a statement of its own (a DDL): it may change the tracked schema
            Step::Statement | Step::StatementBegins => {
                let mut emptied = Vec::new();
                if let Event::Query(q) = &ev.event.event {
                    if q.error_code == 0 && !skip {
                        // files have no tracked schema: a DROP DATABASE names no tables there
                        let effects = match &self.schemas {
                            Some(h) => h.row_effects(&q.schema, &q.query),
                            None => SchemaHistory::new(Vec::new(), 0, false).row_effects(&q.schema, &q.query),
                        };
                        emptied = effects
                            .into_iter()
                            .filter_map(|e| match e {
                                RowEffect::Emptied { database, table, by }
                                    if self.filter.matches(&database, &table) =>
                                {
                                    Some((database, table, by))
                                }
                                _ => None,
                            })
                            .collect();
                    }
                    // a statement before the range still changes the tables the range's rows are in
                    if let (Some(h), 0) = (&mut self.schemas, q.error_code) {
                        let at = format!("{}:{}", ev.file, ev.offset);
                        h.apply_query(&q.schema, &q.query, q.status.charset_database, &at, &self.filter);
                    }
                }
                if step == Step::Statement || !emptied.is_empty() {
                    self.end_transaction(None)?;
                }
                if let (Event::Query(q), Format::Flashback, false) = (&ev.event.event, self.args.format, skip) {
                    let changed =
                        table_changed(&q.query).map(|(db, t)| (db.unwrap_or_else(|| q.schema.to_string()), t));
                    if q.error_code == 0
                        && emptied.is_empty()
                        && changed.is_some_and(|(db, t)| self.filter.matches(&db, &t))
                    {
                        self.not_undone(ev, &q.query)?;
                    }
                }
                for (database, table, by) in emptied {
                    self.emptied(ev, &database, &table, by)?;
                }
            }
            Step::Inside | Step::Outside => {
                if let Event::Rows(rows) = &ev.event.event {
                    if !skip && self.filter.matches(&rows.table.database, &rows.table.table) {
                        if self.args.events {
                            // printed with the event above; counted here
                            for r in rows.rows() {
                                r.map_err(|e| Failure::Input(e.at(ev.file, ev.offset, ev.event.header.event_type)))?;
                                self.summary.rows.add(rows.kind, 1);
                            }
                        } else {
                            self.rows(ev, rows)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Flashback: a statement that changes tables (ALTER, RENAME, CREATE, DROP) is not undone,
    /// and the rows changed before it are undone as they were then (with columns it may have
    /// dropped or renamed): the script says where it stands, and so does the log.
    fn not_undone(&mut self, ev: &Located<'_>, query: &str) -> Result<(), Failure> {
        let at = format!("{}:{}", ev.file, ev.offset);
        let head: String = query.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(120).collect();
        tracing::warn!(
            at = %at,
            statement = %head,
            "The flashback script does not undo this statement; the statements below its line in the script \
             undo rows as they were before it: run the script up to that line, undo the statement by hand, then \
             the rest (or dump the range after it separately)"
        );
        self.flashback.begin();
        self.flashback.push(&format!(
            "-- not undone: `{head}` at {at}; the statements below undo rows as they were before it: undo it by \
             hand first"
        ))?;
        self.flashback.begin();
        Ok(())
    }

    /// A statement emptied `database.table` without row events (TRUNCATE, DROP TABLE, ...):
    /// JSON prints a `TRUNCATE` line, SQL a `TRUNCATE TABLE`, and flashback says it cannot undo
    /// it (the rows were never logged), in the output and on stderr.
    fn emptied(&mut self, ev: &Located<'_>, database: &str, table: &str, by: &str) -> Result<(), Failure> {
        self.drain()?;
        self.summary.truncates += 1;
        let name = format!("{}.{}", crate::render::ident(database), crate::render::ident(table));
        let at = format!("{}:{}", ev.file, ev.offset);
        match self.args.format {
            Format::Json => {
                let line = json::emptied_line(
                    database,
                    table,
                    by,
                    &ev.event.header,
                    ev.file,
                    ev.offset,
                    self.tx.gtid.as_deref(),
                );
                self.out.write_all(&line)?;
            }
            Format::Sql => writeln!(self.out, "-- {by} at {at} emptied {name}\nTRUNCATE TABLE {name};")?,
            Format::Flashback => {
                tracing::warn!(
                    table = %format!("{database}.{table}"),
                    at = %at,
                    "{by} removed every row of the table without logging them: the flashback script cannot bring \
                     them back (restore the table from a backup taken before it)"
                );
                self.flashback.begin();
                self.flashback.push(&format!(
                    "-- cannot undo {by} of {name} at {at}: its rows were never in the binlog; restore {name} from a \
                     backup taken before it before running the statements above this line"
                ))?;
                self.flashback.begin();
            }
        }
        Ok(())
    }

    fn end_transaction(&mut self, xid: Option<u64>) -> Result<(), Failure> {
        // Rows still rendering: the end goes in line after them, and the reading thread reads
        // on. A dump that follows the server writes each transaction as it ends instead: the
        // next event, which would take the mark back, may be a long time coming.
        if let Some(pool) = self.pool.as_mut().filter(|p| !p.is_idle() && !self.args.live.follow) {
            pool.commit(xid)?;
            return Ok(());
        }
        self.drain()?;
        self.write_transaction(xid)
    }

    /// Writes the lines held for the transaction that ended (with its `xid`, if any).
    fn write_transaction(&mut self, xid: Option<u64>) -> Result<(), Failure> {
        self.summary.rows.add_all(&std::mem::take(&mut self.tx_rows));
        if !self.spool.is_empty() {
            match self.args.format {
                Format::Json => {
                    let suffix = match xid {
                        Some(x) => format!("{x}}}"),
                        None => "null}".to_string(),
                    };
                    self.spool.flush_with(&mut self.out, &suffix)?;
                }
                _ => {
                    writeln!(self.out, "BEGIN;")?;
                    self.spool.flush_with(&mut self.out, "")?;
                    writeln!(self.out, "COMMIT;")?;
                }
            }
        }
        if self.args.format == Format::Flashback {
            self.flashback.begin();
        }
        Ok(())
    }

    /// Drops what is held of the open transaction: after a reconnect the source sends it again
    /// from its start.
    fn discard_transaction(&mut self) -> Result<(), Failure> {
        // the transactions that ended before it are written; what is rendering of it is dropped
        self.drain()?;
        self.spool.clear();
        self.flashback.discard_current();
        self.tx_rows = Counts::default();
        Ok(())
    }

    /// Takes back every rendered event (into the spool) and transaction end (written out), in
    /// order.
    fn drain(&mut self) -> Result<(), Failure> {
        self.settle(true)
    }

    /// Takes back what is rendered, in order, up to the first event still rendering (`wait`:
    /// every one, waiting for them).
    fn settle(&mut self, wait: bool) -> Result<(), Failure> {
        while let Some(pool) = &mut self.pool {
            match pool.take(wait)? {
                None => break,
                Some(Taken::Rows(done)) => self.take_done(done)?,
                Some(Taken::Commit(xid)) => self.write_transaction(xid)?,
                Some(Taken::Then(f)) => f(),
            }
        }
        Ok(())
    }

    /// A rendered event's lines into the spool and its rows into the counts; its error, if
    /// it stopped early, after the lines it did render.
    fn take_done(&mut self, done: Done) -> Result<(), Failure> {
        self.tx_rows.add_all(&done.counts);
        self.spool.append(done.block)?;
        match done.error {
            Some((e, event_no)) => {
                // The dump ends here: the events read past it while it rendered are not the
                // dump's, and what the workers rendered of them is dropped with them.
                self.summary.events = event_no;
                self.pool = None;
                Err(Failure::Input(e))
            }
            None => Ok(()),
        }
    }

    /// Logs a warning about the event at hand once the events before it are rendered and taken
    /// back (at once without workers): a dump that stops at an earlier event whose rows do not
    /// decode logs what `--threads 1` would, not what the reading thread met past it.
    fn warn_in_order(&mut self, warn: workers::Deferred) -> Result<(), Failure> {
        match self.pool.as_mut().filter(|p| !p.is_idle()) {
            Some(pool) => pool.then(warn)?,
            None => warn(),
        }
        Ok(())
    }

    fn rows(&mut self, ev: &Located<'_>, rows: &RowsEvent<'_>) -> Result<(), Failure> {
        // live, without column metadata: decode with the tracked definition (checked against
        // the TABLE_MAP); when there is none that fits, positionally, as from a file
        let mut named = rows.table.has_column_names;
        let rows = match self.schemas.as_mut().filter(|_| !named) {
            Some(h) => match h.resolve_rows(rows, ev.file, ev.offset) {
                Ok(filled) => {
                    named = true;
                    filled
                }
                Err(why) => {
                    if self.warned_positional.insert(rows.table.qualified_name()) {
                        self.warn_in_order(Box::new(move || {
                            tracing::warn!("{why}; its columns are printed as @1..@N, with the binlog's own metadata");
                        }))?;
                    }
                    std::borrow::Cow::Borrowed(rows)
                }
            },
            None => std::borrow::Cow::Borrowed(rows),
        };
        let table = &rows.table;
        if self.args.format == Format::Json && !named && self.warned_positional.insert(table.qualified_name()) {
            let name = table.qualified_name();
            self.warn_in_order(Box::new(move || {
                tracing::warn!(
                    table = %name,
                    "The binlog has no column names for this table (binlog_row_metadata=MINIMAL or an older server); columns are printed as @1..@N"
                );
            }))?;
        }
        let header = &ev.event.header;
        if self.args.format == Format::Json {
            let keys = self.keys.keys(table);
            let lines =
                json::RowLines::new(rows.kind, table, keys, header, ev.file, ev.offset, self.tx.gtid.as_deref());
            let size = rows.rows_bytes();
            let event_no = self.summary.events;
            // A huge event (a long BLOB) renders here, after those ahead of it: copying it for a
            // worker would hold it twice and gain nothing.
            if !self.pool.as_ref().is_some_and(|p| p.takes(size)) {
                self.drain()?;
                let mut block = self.spool.empty_block();
                let mut counts = Counts::default();
                let at = (ev.file, ev.offset);
                let r = workers::render(&rows, &lines, &mut block, at, &mut counts);
                return self.take_done(Done { block, counts, error: r.err().map(|e| (e, event_no)) });
            }
            self.settle(false)?;
            let event =
                RenderEvent { rows: rows.detached(), lines, file: ev.file.to_string(), offset: ev.offset, event_no };
            if let Some(pool) = &mut self.pool {
                let spool = &mut self.spool;
                pool.add(event, || spool.empty_block())?;
            }
            return Ok(());
        }
        // one RowChange for the event, refilled per row: no allocation per row
        let mut row = RowChange { before: None, after: None };
        let mut iter = rows.rows();
        loop {
            let Some(res) = iter.next_into(&mut row) else { return Ok(()) };
            res.map_err(|e| Failure::Input(e.at(ev.file, ev.offset, header.event_type)))?;
            self.tx_rows.add(rows.kind, 1);
            let at = |e| Failure::Sql(e, format!("{} at {}", ev.file, ev.offset));
            if self.args.format == Format::Sql {
                self.spool.push_with(|out| sql::redo(out, rows.kind, table, &row).map_err(at))?;
            } else {
                self.flashback.push_with(|out| sql::undo(out, rows.kind, table, &row).map_err(at))?;
            }
        }
    }

    fn print_event(&mut self, ev: &Located<'_>) -> Result<(), Failure> {
        let line = json::event_json(ev).map_err(Failure::Input)?;
        // io::Error::from keeps an I/O cause's kind (a closed pipe stays a closed pipe)
        serde_json::to_writer(&mut self.out, &line).map_err(io::Error::from)?;
        self.out.write_all(b"\n")?;
        Ok(())
    }
}

/// Files named out of the order the server wrote them, or twice: the dump reads them in the
/// order given, so a flashback of them undid the later changes first (its undo of the earlier
/// ones then matched nothing) or every change twice. Names of one server's series
/// (`base.NNNNNN`) are compared; others only for the same path twice.
fn order_problems(files: &[PathBuf]) -> Vec<String> {
    let name = |p: &PathBuf| p.file_name().map(|n| n.to_string_lossy().trim_end_matches(".gz").to_string());
    let mut out = Vec::new();
    for (i, pair) in files.windows(2).enumerate() {
        let (a, b) = (&pair[0], &pair[1]);
        if files[..=i].contains(b) {
            out.push(format!("{} is named twice: each file is read once, in the order given", b.display()));
            continue;
        }
        let (Some(na), Some(nb)) = (name(a), name(b)) else { continue };
        if crate::position::binlog_order((&na, 0), (&nb, 0)).is_some_and(|o| o.is_ge()) {
            out.push(format!(
                "{} comes before {} but was written after it: name the files in the order the server wrote them",
                a.display(),
                b.display()
            ));
        }
    }
    out
}

/// The table (database if named, table) whose definition a statement changes (flashback
/// cannot undo it): `ALTER`, `CREATE`, `DROP` or `RENAME` `TABLE`, its first table.
fn table_changed(query: &str) -> Option<(Option<String>, String)> {
    let mut words = query.split_whitespace();
    let verb = words.next()?.to_ascii_uppercase();
    if !matches!(verb.as_str(), "ALTER" | "CREATE" | "DROP" | "RENAME") {
        return None;
    }
    // ALTER [ONLINE] [IGNORE] TABLE, CREATE [OR REPLACE] [TEMPORARY] TABLE, ...
    words.by_ref().take(4).find(|w| w.eq_ignore_ascii_case("TABLE"))?;
    let mut name = words.next()?;
    if name.eq_ignore_ascii_case("IF") {
        name = words.find(|w| w.eq_ignore_ascii_case("EXISTS")).and_then(|_| words.next())?;
    }
    let name = name.split(['(', ',']).next()?.trim_end_matches(';');
    let unquote = |s: &str| s.trim_matches('`').to_string();
    match name.split_once("`.`").or_else(|| name.split_once('.')) {
        Some((db, t)) => Some((Some(unquote(db)), unquote(t))),
        None => Some((None, unquote(name))),
    }
}

/// The `dump --source` flags that resume after `resume`: by GTID when the stream has GTIDs
/// (with the file and position as the alternative once the stream has named its file).
fn resume_flags(resume: &ResumePoint) -> String {
    let file =
        (!resume.file.is_empty()).then(|| format!("--start-file {} --start-position {}", resume.file, resume.position));
    match (&resume.gtid, file) {
        (Some(g), Some(f)) => format!("--start-gtid '{g}' (or {f})"),
        (Some(g), None) => format!("--start-gtid '{g}'"),
        (None, Some(f)) => f,
        (None, None) => "the same start (nothing was streamed)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_out_of_order_or_twice_are_named() {
        let f = |names: &[&str]| order_problems(&names.iter().map(PathBuf::from).collect::<Vec<_>>());
        assert!(f(&["a/mysql-bin.000002", "b/mysql-bin.000003.gz", "mysql-bin.000010"]).is_empty());
        assert!(f(&["x.log", "y.log", "other-bin.000001"]).is_empty(), "names of no series are not compared");
        let p = f(&["mysql-bin.000003", "mysql-bin.000002"]);
        assert!(p.len() == 1 && p[0].contains("mysql-bin.000003 comes before mysql-bin.000002"), "{p:?}");
        let p = f(&["d/mysql-bin.000002", "e/mysql-bin.000002"]);
        assert_eq!(p.len(), 1, "the same file in two places: {p:?}");
        let p = f(&["x.log", "y.log", "x.log"]);
        assert!(p.len() == 1 && p[0].contains("x.log is named twice"), "{p:?}");
    }

    #[test]
    fn tables_whose_definition_a_statement_changes() {
        let t = |q: &str| table_changed(q);
        let named = |db: &str, table: &str| Some((Some(db.to_string()), table.to_string()));
        assert_eq!(t("ALTER TABLE t_alter DROP COLUMN a"), Some((None, "t_alter".into())));
        assert_eq!(t("alter online table `shop`.`orders` add x int"), named("shop", "orders"));
        assert_eq!(t("CREATE TABLE IF NOT EXISTS shop.t(id int)"), named("shop", "t"));
        assert_eq!(t("CREATE OR REPLACE TABLE a (id INT)"), Some((None, "a".into())));
        assert_eq!(t("RENAME TABLE a TO b"), Some((None, "a".into())));
        assert_eq!(t("DROP TABLE IF EXISTS `x`.`y`, z"), named("x", "y"));
        for other in ["CREATE DATABASE d", "DROP VIEW v", "INSERT INTO t VALUES (1)", "BEGIN", ""] {
            assert_eq!(t(other), None, "{other}");
        }
    }

    #[test]
    fn datetimes() {
        assert_eq!(parse_datetime("1970-01-01 00:00:00"), Ok(0));
        assert_eq!(parse_datetime("2017-09-15T09:18:23Z"), Ok(1505467103));
        assert!(parse_datetime("2017-13-15 00:00:00").is_err());
        assert!(parse_datetime("yesterday").is_err());
        // days the month lacks; the 29th of February in leap years only
        assert!(parse_datetime("2026-02-30 00:00:00").unwrap_err().contains("2026-02 has 28 days"));
        assert!(parse_datetime("2026-04-31").is_err());
        assert!(parse_datetime("2100-02-29").is_err());
        assert_eq!(parse_datetime("2024-02-29 00:00:00"), Ok(1709164800));
        assert_eq!(parse_datetime("2000-02-29 00:00:00"), Ok(951782400));
        // and back, as every JSON line's `timestamp` is written
        for (secs, text) in [
            (0, "0000-00-00T00:00:00Z"),
            (1, "1970-01-01T00:00:01Z"),
            (1505467103, "2017-09-15T09:18:23Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (u32::MAX, "2106-02-07T06:28:15Z"),
        ] {
            assert_eq!(json::iso_utc(secs), text);
        }
    }
}
