//! Bounded mutation test: every binlog under `tests/data/` is damaged in many small,
//! deterministic ways (bit flips, byte overwrites, truncations, corrupted event sizes) and
//! each mutant is decoded to the end, every row value included, with checksum verification
//! on and off. No mutant may panic, loop, or allocate without bound, and every error must
//! say which file and offset it is about.
//!
//! The mutants come from a seeded PRNG, so a failure names a recipe that reproduces it
//! (`file`, `mutation`, `verify`). The number of mutants per file is bounded by a budget of
//! decoded bytes so the whole test stays under ~20 s in a debug build on two cores.
//!
//! Allocation: the workspace forbids `unsafe_code`, which rules out a counting
//! `#[global_allocator]` here (the fuzz targets in `fuzz/` have one). Instead, on Linux, the
//! test checks the process's peak virtual memory (`VmPeak`) after the run: any single
//! allocation sized by a corrupt length field (a 1 GiB event, a 1 GiB decompression buffer)
//! shows up there even when its pages are never touched.

mod common;
use common::{binlog_files, data_dir};

use std::io::{Cursor, Read};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use sluice_binlog::charset::decode_text;
use sluice_binlog::decoder::{DecoderOptions, EventDecoder};
use sluice_binlog::event::Event;
use sluice_binlog::file::BinlogReader;
use sluice_binlog::{Error, Value};

/// Decoded-byte budget per file and checksum mode (bounds the mutant count of large files).
const BYTES_PER_FILE: usize = 384 << 10;
/// Mutants per file at least, however large the file.
const MIN_MUTANTS: usize = 16;
/// More events than any mutant can hold: hitting it means the walk does not terminate.
const MAX_EVENTS: usize = 200_000;
/// Likewise for row changes (every row image holds at least one byte).
const MAX_ROWS: usize = 2_000_000;

/// SplitMix64: small, deterministic, good enough to spread mutation positions.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One way of damaging a file.
#[derive(Debug, Clone, Copy)]
enum Mutation {
    /// Flip bit `bit` of byte `pos`.
    Flip { pos: usize, bit: u8 },
    /// Overwrite byte `pos` with `byte`.
    Set { pos: usize, byte: u8 },
    /// Keep the first `len` bytes.
    Truncate { len: usize },
    /// Set the size field of the event at `event` (its offset) to `size`.
    EventSize { event: usize, size: u32 },
}

impl Mutation {
    fn apply(self, orig: &[u8]) -> Vec<u8> {
        let mut m = orig.to_vec();
        match self {
            Mutation::Flip { pos, bit } => m[pos] ^= 1 << bit,
            Mutation::Set { pos, byte } => m[pos] = byte,
            Mutation::Truncate { len } => m.truncate(len),
            Mutation::EventSize { event, size } => m[event + 9..event + 13].copy_from_slice(&size.to_le_bytes()),
        }
        m
    }
}

/// Offsets of the events of an undamaged binlog (by walking the size fields).
fn event_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut pos = 4;
    while let Some(h) = bytes.get(pos..pos + 19) {
        out.push(pos);
        let size = u32::from_le_bytes(h[9..13].try_into().unwrap()) as usize;
        if size < 19 {
            break;
        }
        pos += size;
    }
    out
}

/// The mutants of one file, deterministic for its name.
fn mutations(name: &str, bytes: &[u8]) -> Vec<Mutation> {
    let len = bytes.len();
    let mut rng =
        Rng(name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)));
    let budget = (BYTES_PER_FILE / len.max(1)).max(MIN_MUTANTS);
    let mut out = Vec::new();
    if len == 0 {
        return out;
    }
    // Size-field corruptions and truncations at event boundaries, over a sample of the
    // events (a quarter of the budget): cheap to state, and the most likely to provoke huge
    // allocations or endless loops.
    let events = event_offsets(bytes);
    let structural = (budget / 4 / 12).max(1);
    let step = events.len().div_ceil(structural).max(1);
    for &e in events.iter().step_by(step) {
        for size in [0, 18, 19, 0xffff_ffff, 1 << 30, (len + 1) as u32, (len - e + 1) as u32] {
            out.push(Mutation::EventSize { event: e, size });
        }
        for d in [0, 1, 13, 19, 20] {
            if e + d < len {
                out.push(Mutation::Truncate { len: e + d });
            }
        }
    }
    let rest = budget.saturating_sub(out.len()).max(MIN_MUTANTS / 2);
    // The rest of the budget: 70% bit flips, 20% overwrites with 0x00/0xff, 10% truncations,
    // each exhaustive when the file is small enough (a flip at every bit, both overwrites at
    // every byte, a cut at every offset), else at random positions.
    let flips = rest * 7 / 10;
    if len * 8 <= flips {
        out.extend((0..len).flat_map(|pos| (0..8).map(move |bit| Mutation::Flip { pos, bit })));
    } else if len <= flips {
        out.extend((0..len).map(|pos| Mutation::Flip { pos, bit: rng.below(8) as u8 }));
    } else {
        out.extend((0..flips).map(|_| Mutation::Flip { pos: rng.below(len), bit: rng.below(8) as u8 }));
    }
    if len * 2 <= rest / 5 {
        out.extend((0..len).flat_map(|pos| [0, 0xff].map(|byte| Mutation::Set { pos, byte })));
    } else {
        out.extend(
            (0..rest / 5).map(|i| Mutation::Set { pos: rng.below(len), byte: if i % 2 == 0 { 0 } else { 0xff } }),
        );
    }
    if len <= rest / 10 {
        out.extend((0..len).map(|len| Mutation::Truncate { len }));
    } else {
        out.extend((0..rest / 10).map(|_| Mutation::Truncate { len: rng.below(len) }));
    }
    out
}

/// What one decode of one mutant saw.
#[derive(Debug, Default)]
struct Outcome {
    events: usize,
    rows: usize,
    error: Option<Error>,
}

/// Renders a value the way output layers do (text decoding, decimals, JSON, temporals), so
/// their code paths see the damaged values too.
fn render(v: &Value<'_>, out: &mut String) {
    use std::fmt::Write;
    match v {
        Value::Text { bytes, collation } => {
            let _ = decode_text(bytes, *collation);
        }
        Value::Decimal(d) => write!(out, "{d}").unwrap(),
        Value::Json(j) => write!(out, "{j}").unwrap(),
        Value::JsonDiff(ds) => {
            for d in ds {
                write!(out, "{d}").unwrap();
            }
        }
        Value::Date(d) => write!(out, "{d}").unwrap(),
        Value::Time(t) => write!(out, "{t}").unwrap(),
        Value::DateTime(t) => write!(out, "{t} {}", t.to_iso8601()).unwrap(),
        Value::Timestamp(t) => write!(out, "{t} {}", t.to_utc()).unwrap(),
        other => write!(out, "{other:?}").unwrap(),
    }
    out.clear();
}

/// Decodes a whole (possibly damaged) binlog, every value of every row.
fn decode_all(name: &str, bytes: Vec<u8>, opts: DecoderOptions) -> Outcome {
    let mut o = Outcome::default();
    let mut rd = match BinlogReader::from_reader(name.to_string(), Cursor::new(bytes), EventDecoder::new(opts)) {
        Ok(r) => r,
        Err(e) => {
            o.error = Some(e);
            return o;
        }
    };
    let mut text = String::new();
    loop {
        assert!(o.events < MAX_EVENTS, "{name}: more than {MAX_EVENTS} events: the walk does not terminate");
        match rd.next_event() {
            Ok(Some(ev)) => {
                o.events += 1;
                if let Event::Rows(rows) = &ev.event.event {
                    for row in rows.rows() {
                        match row {
                            Ok(change) => {
                                o.rows += 1;
                                assert!(
                                    o.rows < MAX_ROWS,
                                    "{name}: more than {MAX_ROWS} rows: the row walk does not terminate"
                                );
                                for image in change.before.iter().chain(change.after.iter()) {
                                    for v in image.values.iter().flatten() {
                                        render(v, &mut text);
                                    }
                                }
                            }
                            Err(e) => {
                                o.error = Some(e.at(ev.file, ev.offset, ev.event.header.event_type));
                                return o;
                            }
                        }
                    }
                }
            }
            Ok(None) => return o,
            Err(e) => {
                o.error = Some(e);
                return o;
            }
        }
    }
}

/// Checks that an error says where it happened: the file, and an offset inside the mutant.
fn check_error(name: &str, len: usize, e: &Error) -> Result<(), String> {
    let msg = e.to_string();
    if !msg.contains(name) {
        return Err(format!("the error does not name the file: {msg}"));
    }
    match e {
        Error::At { offset, .. } | Error::Gzip { offset, .. } if *offset <= len as u64 => Ok(()),
        Error::At { offset, .. } => Err(format!("offset {offset} is past the end ({len} bytes): {msg}")),
        Error::Io { .. } | Error::NotABinlog { .. } => Ok(()),
        _ => Err(format!("the error does not name an offset: {msg}")),
    }
}

/// Decodes one mutant under `catch_unwind`; returns a failure description, if any.
fn run_one(name: &str, len: usize, bytes: Vec<u8>, opts: DecoderOptions) -> Result<Outcome, String> {
    let out = catch_unwind(AssertUnwindSafe(|| decode_all(name, bytes, opts))).map_err(|p| {
        let why = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("panicked: {why}")
    })?;
    if let Some(e) = &out.error {
        check_error(name, len, e)?;
    }
    Ok(out)
}

fn opts(verify: bool) -> DecoderOptions {
    DecoderOptions { verify_checksum: verify, ..DecoderOptions::default() }
}

/// The plain bytes of a fixture (gzip files decompressed: damaging the deflate stream
/// mostly tests flate2; a few truncations of the compressed bytes are run separately).
fn plain_bytes(path: &Path) -> (Vec<u8>, bool) {
    let raw = std::fs::read(path).unwrap();
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut out).unwrap();
        (out, true)
    } else {
        (raw, false)
    }
}

/// Peak virtual memory of this process, in bytes (Linux only).
fn vm_peak() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmPeak:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Runs every mutant of every file in `files` (verify on and off); returns failures.
fn mutate_files(files: &[PathBuf], counts: &mut (usize, usize)) -> Vec<String> {
    let mut failures = Vec::new();
    for path in files {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let (bytes, gz) = plain_bytes(path);
        let muts = mutations(&name, &bytes);
        for (i, m) in muts.iter().enumerate() {
            let mutant = m.apply(&bytes);
            // Checksums catch most damage at once; verifying on every 4th mutant keeps that
            // path covered while spending the budget where the decoder sees the damage.
            let modes: &[bool] = if i % 4 == 0 { &[false, true] } else { &[false] };
            for &verify in modes {
                counts.0 += 1;
                if let Err(why) = run_one(&name, mutant.len(), mutant.clone(), opts(verify)) {
                    failures.push(format!("{name} {m:?} verify={verify}: {why}"));
                }
            }
        }
        if gz {
            // the gzip path itself: truncated and damaged compressed streams
            let raw = std::fs::read(path).unwrap();
            let mut rng = Rng(raw.len() as u64);
            for k in 0..16 {
                let m = if k % 2 == 0 {
                    Mutation::Truncate { len: rng.below(raw.len()) }
                } else {
                    Mutation::Flip { pos: rng.below(raw.len()), bit: rng.below(8) as u8 }
                };
                counts.0 += 1;
                if let Err(why) = run_one(&name, usize::MAX, m.apply(&raw), opts(false)) {
                    failures.push(format!("{name} (gzip bytes) {m:?}: {why}"));
                }
            }
        }
        counts.1 += 1;
        if std::env::var_os("SLUICE_MUTATION_VERBOSE").is_some() {
            eprintln!("{name}: {} bytes, {} mutants", bytes.len(), muts.len());
        }
    }
    failures
}

#[test]
fn mutants_of_every_fixture_fail_cleanly() {
    let files = binlog_files();
    assert!(files.len() >= 50, "expected the fixture corpus under {:?}", data_dir());
    let peak_before = vm_peak();
    let started = std::time::Instant::now();
    let mut counts = (0, 0);
    // Quiet the default hook: expected panics would flood the output (they are reported below).
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let failures = mutate_files(&files, &mut counts);
    std::panic::set_hook(hook);
    eprintln!("{} mutant decodes over {} files in {:?}", counts.0, counts.1, started.elapsed());
    if let (Some(before), Some(after)) = (peak_before, vm_peak()) {
        let grown = after.saturating_sub(before);
        assert!(
            grown < 512 << 20,
            "peak virtual memory grew by {} MiB while decoding mutants: some length field is trusted for an allocation",
            grown >> 20
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {} mutant decodes failed:\n{}",
        failures.len(),
        counts.0,
        failures.iter().take(40).cloned().collect::<Vec<_>>().join("\n")
    );
}

/// A corrupted event size must end the walk with an error at that event's offset (the
/// events before it are intact), whether or not checksums are verified.
#[test]
fn corrupt_event_sizes_are_reported_at_their_event() {
    let mut failures = Vec::new();
    for path in binlog_files() {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let (bytes, _) = plain_bytes(&path);
        let Ok(clean) = run_one(&name, bytes.len(), bytes.clone(), opts(true)) else { continue };
        if clean.error.is_some() {
            continue; // broken by design; covered by the fixture test
        }
        let events = event_offsets(&bytes);
        for &e in events.iter().take(8) {
            for size in [0u32, 18, 0xffff_ffff, (bytes.len() + 1) as u32] {
                let m = Mutation::EventSize { event: e, size };
                for verify in [false, true] {
                    match run_one(&name, bytes.len(), m.apply(&bytes), opts(verify)) {
                        Err(why) => failures.push(format!("{name} {m:?} verify={verify}: {why}")),
                        Ok(Outcome { error: Some(Error::At { offset, .. }), .. }) if offset == e as u64 => {}
                        Ok(o) => failures.push(format!(
                            "{name} {m:?} verify={verify}: expected an error at offset {e}, got {:?}",
                            o.error.map(|e| e.to_string())
                        )),
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Compressed fixtures decoded with a tiny decompression cap: refused with `TooLarge`
/// (before allocating), also when the announced sizes are damaged.
#[test]
fn compressed_events_respect_the_decompression_cap() {
    let compressed = [
        "rust_mysql_common/transaction_compression.000001",
        "mysql-binlog-connector-java/mysql-bin.compressed",
        "local-10.11.19/log_bin_compress.mysql-bin.000003",
    ];
    let small = |verify| DecoderOptions { verify_checksum: verify, max_decompressed_size: 16 };
    let mut failures = Vec::new();
    for path in binlog_files() {
        let p = path.to_string_lossy();
        if !compressed.iter().any(|c| p.ends_with(c)) {
            continue;
        }
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let (bytes, _) = plain_bytes(&path);
        match run_one(&name, bytes.len(), bytes.clone(), small(true)) {
            Ok(Outcome { error: Some(e), .. }) if matches!(e.root(), Error::TooLarge { max: 16, .. }) => {}
            other => failures.push(format!("{name}: expected TooLarge with a 16-byte cap, got {other:?}")),
        }
        let mut rng = Rng(7);
        for _ in 0..(50_000 / bytes.len()).max(200) {
            let m = Mutation::Flip { pos: rng.below(bytes.len()), bit: rng.below(8) as u8 };
            if let Err(why) = run_one(&name, bytes.len(), m.apply(&bytes), small(false)) {
                failures.push(format!("{name} {m:?} (16-byte cap): {why}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
