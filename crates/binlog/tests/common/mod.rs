//! What the binlog test files share: where the test data is, and the list of binlog files in it.

use std::path::{Path, PathBuf};

/// `crates/binlog/tests/data`: the fixture corpus (`fixtures/`) and the recorded MariaDB
/// workload (`recorded/`).
pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// Every binlog under `dir` (the notes, SQL, expected outputs and JSON beside them left out),
/// sorted.
pub fn binlog_files_in(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if !matches!(p.extension().and_then(|e| e.to_str()), Some("md" | "txt" | "sql" | "json")) {
                out.push(p);
            }
        }
    }
    let mut v = Vec::new();
    walk(dir, &mut v);
    v.sort();
    v
}

/// Every binlog of the test data.
#[allow(dead_code)] // not every test file uses every helper
pub fn binlog_files() -> Vec<PathBuf> {
    binlog_files_in(&data_dir())
}
