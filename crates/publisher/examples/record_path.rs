//! Sluice's own cost per row change, without servers: the record path `sluice run` runs per
//! row (decode, key and value Avro, framing: `sluice::bench::record_path`, the pipeline's own
//! `Out::change`) over a binlog file, into a sink that counts the records.
//!
//! ```text
//! cargo run --release -p sluice --example record_path -- [--runs N] FILE
//! ```
//!
//! Two stages, run alternately (decode, records, decode, records, ...) so that a machine busy
//! with other work slows both alike; the median of `--runs` runs (default 5) is printed:
//!
//! - `decode`: events read (CRC32 checked) and walked, every row image decoded into values;
//! - `records`: and every row change encoded and framed into its records.
//!
//! Their difference is the encoding's own cost. Single-threaded: wall time here is CPU time on
//! an otherwise idle machine. `bench/kafka_bench.sh` measures the same path with librdkafka and
//! the broker.
use std::path::PathBuf;
use std::time::Instant;

use sluice::bench::{record_path, Counts, Stage};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut runs, mut file) = (5usize, None);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().ok_or("--runs needs a number")?.parse()?,
            "-h" | "--help" => {
                println!("usage: record_path [--runs N] FILE   (a binlog file with row events)");
                return Ok(());
            }
            _ => file = Some(PathBuf::from(a)),
        }
    }
    let file = file.ok_or("usage: record_path [--runs N] FILE")?;
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut seen: [Option<Counts>; 2] = [None, None];
    for _ in 0..runs.max(1) {
        for (i, stage) in [Stage::Decode, Stage::Records].into_iter().enumerate() {
            let t = Instant::now();
            let c = record_path(&file, stage)?;
            times[i].push(t.elapsed().as_secs_f64());
            if seen[i].is_some_and(|s| s != c) {
                return Err(format!("{stage:?}: runs counted differently: {:?} then {c:?}", seen[i]).into());
            }
            seen[i] = Some(c);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (rec, dec) = (seen[1].unwrap_or_default(), seen[0].unwrap_or_default());
    let changes = rec.row_changes.max(1) as f64;
    println!(
        "{}: {} row changes, {} records, {:.1} MB of keys and values",
        file.display(),
        rec.row_changes,
        rec.records,
        rec.bytes as f64 / 1e6
    );
    if dec.row_changes != rec.row_changes {
        return Err("the stages counted different row changes".into());
    }
    let (d, r) = (median(&mut times[0]), median(&mut times[1]));
    let range = |v: &[f64]| format!("{:.3}-{:.3}", v[0], v[v.len() - 1]);
    println!("| stage | seconds (median of {runs}) | range | ns per row change | row changes/s |");
    println!("|---|---:|---|---:|---:|");
    for (name, secs, v) in [("decode", d, &times[0]), ("records", r, &times[1])] {
        println!("| {name} | {secs:.3} | {} | {:.0} | {:.0} |", range(v), secs * 1e9 / changes, changes / secs);
    }
    println!("| encoding alone (records - decode) | {:.3} | - | {:.0} | - |", r - d, (r - d) * 1e9 / changes);
    Ok(())
}
