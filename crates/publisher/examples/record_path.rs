//! Sluice's own cost per row change, without servers: the record path `sluice run` runs per
//! row (decode, key and value Avro, framing: `sluice::bench::record_path`, the pipeline's own
//! `Out::change`) over a binlog file, into a sink that counts the records.
//!
//! ```text
//! cargo run --release -p sluice --example record_path -- [--runs N] FILE
//! ```
//!
//! Three stages, run alternately (decode, records, records from values, decode, ...) so that a
//! machine busy with other work slows all alike; the median of `--runs` runs (default 5) is
//! printed:
//!
//! - `decode`: events read (CRC32 checked) and walked, every row image decoded into values;
//! - `records`: every row change encoded and framed into its records as `sluice run` does
//!   (written into Avro as decoded where it can);
//! - `records from values`: the same records, every row image decoded into values first (the
//!   way `sluice run` takes for partial images, flattened values, a snapshot's window).
//!
//! The difference between the last and the first is the encoding's own cost. Single-threaded: wall time here is CPU time on
//! an otherwise idle machine. `bench/kafka_bench.sh` measures the same path with librdkafka and
//! the broker.
use std::path::PathBuf;
use std::time::Instant;

use sluice::bench::{record_path, record_path_with, Counts, Settings, Stage};

const USAGE: &str =
    "usage: record_path [--runs N] [--only decode|records|values] [--compare] FILE   (a binlog file with row events)";

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("record_path: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut runs, mut file, mut only, mut compare) = (5usize, None, None::<String>, false);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => {
                runs = args.next().and_then(|n| n.parse().ok()).ok_or(format!("--runs needs a number\n{USAGE}"))?
            }
            // both ways of making records, hashed and compared (no timing)
            "--compare" => compare = true,
            // one stage alone, for a profiler
            "--only" => match args.next() {
                Some(stage) if ["decode", "records", "values"].contains(&stage.as_str()) => only = Some(stage),
                _ => return Err(format!("--only needs a stage: decode, records or values\n{USAGE}").into()),
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other if other.starts_with('-') => return Err(format!("unknown option {other}\n{USAGE}").into()),
            _ => file = Some(PathBuf::from(a)),
        }
    }
    let file = file.ok_or(USAGE)?;
    if compare {
        let settings = Settings { hash: true, ..Settings::default() };
        let direct = record_path_with(&file, Stage::Records, &settings)?;
        let values = record_path_with(&file, Stage::RecordsFromValues, &settings)?;
        println!("written as decoded: {direct:?}\nfrom values:        {values:?}");
        if (Counts { written: 0, ..direct }) != (Counts { written: 0, ..values }) {
            return Err("the two ways made different records".into());
        }
        return Ok(());
    }
    const STAGES: [(Stage, &str); 3] =
        [(Stage::Decode, "decode"), (Stage::Records, "records"), (Stage::RecordsFromValues, "records from values")];
    let mut times: [Vec<f64>; 3] = Default::default();
    let mut seen: [Option<Counts>; 3] = [None; 3];
    for _ in 0..runs.max(1) {
        for (i, (stage, name)) in STAGES.into_iter().enumerate() {
            if only.as_deref().is_some_and(|o| name.split(' ').next_back() != Some(o)) {
                continue;
            }
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
    if only.is_some() {
        // the one stage timed (under callgrind, `bench/instructions.sh`, its count is what counts)
        for (i, (_, name)) in STAGES.into_iter().enumerate() {
            if !times[i].is_empty() {
                let changes = seen[i].map_or(1, |c| c.row_changes.max(1)) as f64;
                let secs = median(&mut times[i]);
                println!("{name}: {secs:.3} s (median of {runs}), {:.0} ns per row change", secs * 1e9 / changes);
            }
        }
        return Ok(());
    }
    let [dec, rec, via] = seen.map(Option::unwrap_or_default);
    let changes = rec.row_changes.max(1) as f64;
    println!(
        "{}: {} row changes, {} records, {:.1} MB of keys and values",
        file.display(),
        rec.row_changes,
        rec.records,
        rec.bytes as f64 / 1e6
    );
    if dec.row_changes != rec.row_changes || (Counts { written: 0, ..via }) != (Counts { written: 0, ..rec }) {
        return Err("the stages counted different row changes or records".into());
    }
    println!("| stage | seconds (median of {runs}) | range | ns per row change | row changes/s |");
    println!("|---|---:|---|---:|---:|");
    let mut medians = [0.0; 3];
    for (i, (_, name)) in STAGES.into_iter().enumerate() {
        let secs = median(&mut times[i]);
        medians[i] = secs;
        let v = &times[i];
        let range = format!("{:.3}-{:.3}", v[0], v[v.len() - 1]);
        println!("| {name} | {secs:.3} | {range} | {:.0} | {:.0} |", secs * 1e9 / changes, changes / secs);
    }
    let (d, v) = (medians[0], medians[2]);
    println!(
        "| encoding alone (records from values - decode) | {:.3} | - | {:.0} | - |",
        v - d,
        (v - d) * 1e9 / changes
    );
    Ok(())
}
