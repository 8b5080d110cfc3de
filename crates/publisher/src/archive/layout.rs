//! **How an archive is laid out**, whatever holds it: the files' names and order, the
//! index's name, which files a reader needs, whether an archived copy has the size its index
//! gives, and why an archive cannot be read out (shared by [`super::dir`], [`super::store`]
//! and [`super::read`]).

use std::fs::File;
use std::path::Path;

use sluice_binlog::transaction::GtidState;

use super::copy::FileSummary;

/// The index's file name in the archive.
pub const INDEX: &str = "index.json";

/// What part of an archive a reader wants: a time range, and where to start (a file, or after
/// a GTID state).
#[derive(Debug, Clone, Default)]
pub struct Range {
    /// Events from this time on (seconds since the epoch).
    pub from: Option<u32>,
    /// Events before this time.
    pub to: Option<u32>,
    /// From this file on (the server's name).
    pub start_file: Option<String>,
    /// After this GTID state: files whose transactions it all holds are not needed.
    pub start_gtid: Option<GtidState>,
}

/// Of an archive's `files` (the server's name and the stored file), the stored files that may
/// hold what `range` asks, by the `index` (files it does not list yet are taken).
///
/// # Errors
/// `range.start_file` is not in the archive.
pub fn in_range(index: &[FileSummary], files: Vec<(String, String)>, range: &Range) -> Result<Vec<String>, String> {
    if let Some(f) = &range.start_file {
        if !files.iter().any(|(n, _)| n == f) {
            let held = match (files.first(), files.last()) {
                (Some(a), Some(b)) => format!("it holds {} to {}", a.0, b.0),
                _ => "it is empty".into(),
            };
            return Err(format!("--start-file {f} is not in the archive ({held})"));
        }
    }
    let first = range.start_file.as_deref().map(order_key);
    Ok(files
        .into_iter()
        .filter(|(name, _)| first.as_ref().is_none_or(|f| order_key(name) >= *f))
        .filter(|(name, _)| match index.iter().find(|s| &s.file == name) {
            Some(s) => {
                let (from, to) = (range.from, range.to);
                let ends_before = matches!((s.last_time, from), (Some(last), Some(from)) if last < from);
                let begins_after = matches!((s.first_time, to), (Some(first), Some(to)) if first >= to);
                // every transaction of the file is in the state to start after
                let before_gtid = match (&range.start_gtid, &s.last_gtid) {
                    (Some(g), Some(last)) => g.parse_like(last).is_some_and(|l| g.covers(&l)),
                    _ => false,
                };
                !ends_before && !begins_after && !before_gtid
            }
            None => true,
        })
        .map(|(_, file)| file)
        .collect())
}

/// What a reader of the `chosen` stored files of an archive holding `files` (the server's name
/// and the stored file, in the server's order) would miss of `range`, by its `index`: a file
/// the index lists complete that the range would take, gone while an older file is still there
/// (retention removes the oldest first), or a number missing between two chosen files (a file
/// gone with its index entry). Read on, the dump would go from the file before to the file
/// after without a word that changes are missing.
pub fn lacking(index: &[FileSummary], files: &[(String, String)], chosen: &[String], range: &Range) -> Option<String> {
    let held: std::collections::HashSet<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    let oldest = files.iter().map(|(n, _)| n).min_by_key(|n| order_key(n));
    let indexed = index.iter().filter(|s| s.complete).map(|s| (s.file.clone(), s.file.clone())).collect();
    for gone in in_range(index, indexed, range).unwrap_or_default().iter().filter(|f| !held.contains(f.as_str())) {
        if let Some(older) = oldest.filter(|o| order_key(o) < order_key(gone)) {
            return Some(format!(
                "{gone} is listed complete in the archive's index but gone, while the older {older} is still there: \
                 the archive lacks its events. Restore it from a copy of the archive (or dump the server's own file)"
            ));
        }
    }
    let numbers: std::collections::HashSet<u64> = files.iter().map(|(n, _)| order_key(n).0).collect();
    let name = |f: &String| f.strip_suffix(".gz").unwrap_or(f).to_string();
    for pair in chosen.windows(2) {
        let (Some(a), Some(b)) = (pair.first().map(name), pair.get(1).map(name)) else { continue };
        if (order_key(&a).0 + 1..order_key(&b).0).any(|n| !numbers.contains(&n)) {
            return Some(format!(
                "the archive lacks the file(s) between {a} and {b} (gone with their index entries?): their changes \
                 would be missing. Restore them from a copy of the archive, or dump a range on one side of the gap \
                 (--start-file {b}, or --stop-datetime before {b}'s first event)"
            ));
        }
    }
    None
}

/// The name of the binlog file after `name` (`mysql-bin.000009` -> `mysql-bin.000010`).
pub fn next_name(name: &str) -> String {
    match name.rsplit_once('.') {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            let next = n.parse::<u64>().map_or(0, |v| v + 1);
            format!("{base}.{next:0width$}", width = n.len())
        }
        _ => format!("{name}.1"),
    }
}

/// Files in the server's order: by the number after the last dot (`mysql-bin.000010` after
/// `mysql-bin.000009`, and after `mysql-bin.999999` comes `mysql-bin.1000000`).
pub fn order_key(name: &str) -> (u64, String) {
    let n = name.rsplit_once('.').and_then(|(_, n)| n.parse().ok()).unwrap_or(0);
    (n, name.to_string())
}

/// Why the files of an archive cannot be read out: the two call for different acts, so
/// `sluice dump` exits with a different code for each (66 and 65).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The archive cannot be read: not there, not an archive, an unreadable index or file.
    Unreadable(String),
    /// The archive can be read but lacks events: a file cut or gone after it was archived.
    Damaged(String),
}

impl From<String> for Refusal {
    fn from(why: String) -> Self {
        Refusal::Unreadable(why)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Unreadable(why) | Refusal::Damaged(why) => f.write_str(why),
        }
    }
}

/// What is wrong with `path`, the archived copy (gzipped when `compressed`) of a file the index
/// lists complete at `size` bytes, called `shown`: None when it has that size (a gzipped one,
/// the size its gzip trailer gives, modulo 2^32), else what it has instead.
///
/// # Errors
/// The file cannot be looked at.
pub fn size_problem(path: &Path, compressed: bool, size: u64, shown: &str) -> std::io::Result<Option<String>> {
    if compressed {
        // a gzip member ends with the size of what it holds, modulo 2^32: a cut file ends
        // with other bytes there (or is too short to have them)
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        let mut trailer = [0u8; 4];
        let read = len >= 18
            && std::io::Seek::seek(&mut file, std::io::SeekFrom::End(-4)).is_ok()
            && std::io::Read::read_exact(&mut file, &mut trailer).is_ok();
        let isize = if read { u64::from(u32::from_le_bytes(trailer)) } else { u64::MAX };
        Ok((isize != size & u64::from(u32::MAX))
            .then(|| format!("{shown}'s gzip trailer does not give the {size} bytes")))
    } else {
        let len = std::fs::metadata(path)?.len();
        Ok((len != size).then(|| format!("{shown} is {len} bytes, not the {size}")))
    }
}
