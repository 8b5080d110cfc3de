//! Decoder throughput: `sluice_binlog` side by side with `mysql_common` on the same binlog files.
//!
//! ```text
//! cargo run --release -p sluice-binlog --example bench_decode -- [--runs N] [--fraction F] FILE...
//! cargo run --release -p sluice-binlog --example bench_decode -- --only DECODER [--fraction F] FILE...
//! ```
//!
//! Every measurement runs in a child process (this program re-executed with `--only`), so each
//! decoder's peak RSS (`VmHWM`) is its own; the decoders run interleaved (A, B, C, A, B, C, ...)
//! so that a machine shared with other work slows them alike, and the median of `--runs` runs
//! (default 3) is reported. Decoders, all single-threaded, every row of every rows event:
//!
//! - `sluice`: `BinlogReader::next_event()` (CRC32 verified), rows walked with `RowsIter::next_into`
//!   (one `RowChange` per event, refilled per row), every `Value` of every row image
//!   passed through `black_box` (values borrow from the event: strings are not copied);
//! - `sluice-owned`: the same, and every value rendered to an owned form like the one
//!   `mysql_common` builds: text decoded by its charset into a `String`, bytes copied, DECIMAL
//!   and JSON to their text, integers, floats and temporals kept as they are;
//! - `mysql_common`: `BinlogFile` / `EventStreamReader`, `RowsEventData::rows(tme)`, every
//!   `BinlogValue` of every `BinlogRow` through `black_box` (it builds owned values itself; it
//!   does not verify checksums). It ignores MariaDB's own events (160+) but reads v1 rows events
//!   and TABLE_MAPs, so it decodes MariaDB row data; the run asserts that every decoder counted
//!   the same row changes and the same values.
//!
//! Memory flat in the file's size: each decoder also runs on the first tenth of the input
//! (`--fraction 0.1`) and the two peak RSS figures are printed side by side.
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use sluice_binlog::charset::decode_text;
use sluice_binlog::decoder::EventDecoder;
use sluice_binlog::event::Event;
use sluice_binlog::file::BinlogReader;
use sluice_binlog::rows::RowChange;
use sluice_binlog::Value;

const DECODERS: [&str; 3] = ["sluice", "sluice-owned", "mysql_common"];

type BoxError = Box<dyn std::error::Error>;

/// What one decoder did over the input.
#[derive(Debug, Default, Clone, Copy)]
struct Outcome {
    /// Row changes (an UPDATE's before and after images are one change).
    rows: u64,
    /// Values present in the row images (NULLs included, columns absent from the image not).
    values: u64,
    /// Input bytes covered.
    bytes: u64,
    /// Wall time of the decode loop.
    secs: f64,
    /// Peak resident set size of the process (kB).
    hwm_kb: u64,
}

impl Outcome {
    fn rows_per_s(&self) -> f64 {
        self.rows as f64 / self.secs
    }
    fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.secs
    }
}

/// Stops a decoder after this many bytes of each file.
fn limit_of(path: &Path, fraction: f64) -> Result<u64, BoxError> {
    let len = std::fs::metadata(path)?.len();
    Ok(if fraction >= 1.0 { u64::MAX } else { (len as f64 * fraction) as u64 })
}

/// Renders a value as an owned representation (what a consumer building rows would keep).
fn materialise(v: &Value<'_>) {
    match v {
        Value::Text { bytes, collation } => match decode_text(bytes, *collation) {
            Ok(s) => {
                black_box(s.into_owned());
            }
            Err(_) => {
                black_box(bytes.to_vec());
            }
        },
        Value::Bytes(b) => {
            black_box(b.to_vec());
        }
        Value::Decimal(d) => {
            black_box(d.to_string());
        }
        Value::Json(j) => {
            black_box(j.to_string());
        }
        Value::Geometry { wkb, .. } => {
            black_box(wkb.to_vec());
        }
        Value::Vector(b) => {
            black_box(b.to_vec());
        }
        other => {
            black_box(other);
        }
    }
}

fn run_sluice(files: &[PathBuf], fraction: f64, owned: bool) -> Result<Outcome, BoxError> {
    let mut out = Outcome::default();
    let mut decoder = EventDecoder::default();
    for path in files {
        let limit = limit_of(path, fraction)?;
        let mut rd = BinlogReader::open(path, decoder)?;
        while let Some(ev) = rd.next_event()? {
            if let Event::Rows(r) = &ev.event.event {
                // one RowChange per event, refilled per row (`next_into`): no allocation per row
                let mut change = RowChange { before: None, after: None };
                let mut rows = r.rows();
                while let Some(res) = rows.next_into(&mut change) {
                    res?;
                    out.rows += 1;
                    for image in [&change.before, &change.after].into_iter().flatten() {
                        for v in image.values.iter().flatten() {
                            out.values += 1;
                            if owned {
                                materialise(v);
                            } else {
                                black_box(v);
                            }
                        }
                    }
                }
            }
            if rd.position() >= limit {
                break;
            }
        }
        out.bytes += rd.position();
        decoder = rd.into_decoder();
    }
    Ok(out)
}

fn run_mysql_common(files: &[PathBuf], fraction: f64) -> Result<Outcome, BoxError> {
    use mysql_common::binlog::consts::BinlogVersion;
    use mysql_common::binlog::events::EventData;
    use mysql_common::binlog::BinlogFile;

    let mut out = Outcome::default();
    for path in files {
        let limit = limit_of(path, fraction)?;
        let input = std::io::BufReader::with_capacity(256 * 1024, std::fs::File::open(path)?);
        let mut bf = BinlogFile::new(BinlogVersion::Version4, input)?;
        let mut pos = 4u64;
        while let Some(ev) = bf.next() {
            let ev = ev?;
            pos += u64::from(ev.header().event_size());
            if let Some(EventData::RowsEvent(rd)) = ev.read_data()? {
                let tme = bf.reader().get_tme(rd.table_id()).ok_or("rows event without its TABLE_MAP")?;
                for row in rd.rows(tme) {
                    let (before, after) = row?;
                    out.rows += 1;
                    for image in [&before, &after].into_iter().flatten() {
                        for i in 0..image.len() {
                            if let Some(v) = image.as_ref(i) {
                                out.values += 1;
                                black_box(v);
                            }
                        }
                    }
                }
            }
            if pos >= limit {
                break;
            }
        }
        out.bytes += pos;
    }
    Ok(out)
}

/// Peak resident set size of this process, from `/proc/self/status` (0 where unavailable).
fn vm_hwm_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("VmHWM:").and_then(|v| v.trim().trim_end_matches(" kB").parse().ok()))
        })
        .unwrap_or(0)
}

/// Child mode: run one decoder and print one `RESULT` line.
fn child(decoder: &str, files: &[PathBuf], fraction: f64) -> Result<(), BoxError> {
    let t0 = Instant::now();
    let mut out = match decoder {
        "sluice" => run_sluice(files, fraction, false)?,
        "sluice-owned" => run_sluice(files, fraction, true)?,
        "mysql_common" => run_mysql_common(files, fraction)?,
        other => return Err(format!("unknown decoder {other} (one of {DECODERS:?})").into()),
    };
    out.secs = t0.elapsed().as_secs_f64();
    out.hwm_kb = vm_hwm_kb();
    println!(
        "RESULT decoder={decoder} rows={} values={} bytes={} secs={:.6} hwm_kb={}",
        out.rows, out.values, out.bytes, out.secs, out.hwm_kb
    );
    Ok(())
}

fn spawn(decoder: &str, files: &[PathBuf], fraction: f64) -> Result<Outcome, BoxError> {
    let exe = std::env::current_exe()?;
    let output = Command::new(exe)
        .arg("--only")
        .arg(decoder)
        .arg("--fraction")
        .arg(fraction.to_string())
        .args(files)
        .output()?;
    if !output.status.success() {
        return Err(format!("{decoder} failed: {}", String::from_utf8_lossy(&output.stderr)).into());
    }
    let text = String::from_utf8(output.stdout)?;
    let line = text.lines().find(|l| l.starts_with("RESULT ")).ok_or("child printed no RESULT line")?;
    let mut o = Outcome::default();
    for kv in line.split_whitespace().skip(1) {
        let (k, v) = kv.split_once('=').ok_or("malformed RESULT line")?;
        match k {
            "rows" => o.rows = v.parse()?,
            "values" => o.values = v.parse()?,
            "bytes" => o.bytes = v.parse()?,
            "secs" => o.secs = v.parse()?,
            "hwm_kb" => o.hwm_kb = v.parse()?,
            _ => {}
        }
    }
    Ok(o)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let (mut only, mut fraction, mut runs, mut files) = (None, 1.0f64, 3usize, Vec::new());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--only" => only = Some(args.next().ok_or("--only needs a decoder")?),
            "--fraction" => fraction = args.next().ok_or("--fraction needs a number")?.parse()?,
            "--runs" => runs = args.next().ok_or("--runs needs a number")?.parse()?,
            "-h" | "--help" => {
                println!("usage: bench_decode [--runs N] [--fraction F] [--only DECODER] FILE...");
                return Ok(());
            }
            _ => files.push(PathBuf::from(a)),
        }
    }
    if files.is_empty() {
        return Err("no binlog files given (make bench-data generates them)".into());
    }
    if let Some(d) = only {
        return child(&d, &files, fraction);
    }

    let total: u64 = files.iter().map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0)).sum();
    println!("input: {} file(s), {:.1} MB: {}", files.len(), total as f64 / 1e6, files[0].display());
    let mut results: Vec<Vec<Outcome>> = vec![Vec::new(); DECODERS.len()];
    for run in 1..=runs {
        for (i, d) in DECODERS.iter().enumerate() {
            let o = spawn(d, &files, fraction)?;
            println!(
                "run {run} {d:<13} {:>9} rows {:>10} values {:>7.3} s {:>12.0} rows/s {:>7.1} MB/s {:>7} kB peak RSS",
                o.rows,
                o.values,
                o.secs,
                o.rows_per_s(),
                o.mb_per_s(),
                o.hwm_kb
            );
            results[i].push(o);
        }
    }
    // The same rows and values from every decoder, in every run.
    let first = results[0][0];
    for (d, rs) in DECODERS.iter().zip(&results) {
        for o in rs {
            assert_eq!((o.rows, o.values), (first.rows, first.values), "{d} decoded different rows or values");
        }
    }
    println!(
        "every decoder counted {} row changes and {} values (mysql_common: {} rows, {} values)",
        first.rows, first.values, results[2][0].rows, results[2][0].values
    );

    // Peak RSS on the first tenth of the input, to compare with the whole.
    let tenth: Vec<Outcome> = if fraction >= 1.0 {
        DECODERS.iter().map(|d| spawn(d, &files, 0.1)).collect::<Result<_, _>>()?
    } else {
        vec![]
    };

    let base = median(results[2].iter().map(Outcome::rows_per_s).collect());
    println!();
    println!("| decoder | rows/s (median of {runs}) | MB/s | vs mysql_common | peak RSS, whole input | peak RSS, first 10% |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (i, d) in DECODERS.iter().enumerate() {
        let rps = median(results[i].iter().map(Outcome::rows_per_s).collect());
        let mbs = median(results[i].iter().map(Outcome::mb_per_s).collect());
        let hwm = results[i].iter().map(|o| o.hwm_kb).max().unwrap_or(0);
        let hwm10 = tenth.get(i).map_or("-".to_string(), |o| format!("{:.1} MB", o.hwm_kb as f64 / 1024.0));
        println!("| {d} | {rps:.0} | {mbs:.1} | {:.2}x | {:.1} MB | {hwm10} |", rps / base, hwm as f64 / 1024.0);
    }
    Ok(())
}
