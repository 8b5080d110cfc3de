//! `sluice dump` and its output streams, without a server: a reader that stops reading
//! (`| head`), a closed stderr, both on one pipe (`2>&1 | head -2`), and a full disk. Each must end
//! with the documented exit code and never a panic (exit 101), which `eprintln!` on a closed
//! stderr gave before.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The recorded MariaDB binlog: about 180 KB, and more JSON than a pipe buffers.
fn binlog() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../binlog/tests/data/recorded/mysql-bin.000001")
}

fn sluice() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
    c.env_remove("SLUICE_LOG").stdin(Stdio::null());
    c
}

/// `sluice ARGS` run to its end: the exit code, stdout, and stderr with each log line's time
/// cut off (so that two runs' logs compare).
fn run_to_end<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (Option<i32>, Vec<u8>, String) {
    let out = sluice().args(args).output().unwrap();
    // log lines start with their time
    let err = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(|l| if l.starts_with("20") { l.split_once(' ').map_or(l, |(_, rest)| rest) } else { l })
        .collect::<Vec<_>>()
        .join("\n");
    (out.status.code(), out.stdout, err)
}

/// `sluice ARGS | head -N` with stderr kept: the exit code, the lines read, and stderr.
fn head(args: &[&str], n: usize) -> (Option<i32>, Vec<String>, String) {
    let mut child = sluice().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    for _ in 0..n {
        let mut l = String::new();
        if out.read_line(&mut l).unwrap() == 0 {
            break;
        }
        lines.push(l);
    }
    drop(out); // the reader goes away, as head does
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (child.wait().unwrap().code(), lines, err)
}

#[test]
fn a_reader_that_stops_ends_the_dump_quietly() {
    let file = binlog();
    let file = file.to_str().unwrap();
    for args in [vec!["dump", file], vec!["dump", "--events", file], vec!["dump", "--format", "sql", file]] {
        let (code, lines, err) = head(&args, 1);
        assert_eq!(lines.len(), 1, "{args:?}");
        assert_eq!(code, Some(0), "{args:?} must end quietly with 0; stderr:\n{err}");
        assert!(!err.contains("stopped by an error") && !err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.contains("ERROR"), "a closed stdout is not an error: {err}");
    }
}

#[test]
fn a_closed_stderr_loses_only_the_messages() {
    let file = binlog();
    let mut child =
        sluice().args(["dump", file.to_str().unwrap()]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    drop(child.stderr.take()); // closed before sluice writes its summary
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "a closed stderr must not make the dump fail (101 was a panic)");
    let all = sluice().args(["dump", file.to_str().unwrap()]).output().unwrap();
    assert_eq!(out, String::from_utf8(all.stdout).unwrap(), "every row is still printed");
}

/// `sluice dump FILE 2>&1 | head -2`: the summary goes to the same closed pipe.
#[test]
fn both_streams_on_one_closed_pipe() {
    let file = binlog();
    for extra in [&[][..], &["--events"][..]] {
        let (reader, writer) = std::io::pipe().unwrap();
        let mut child = sluice()
            .arg("dump")
            .args(extra)
            .arg(&file)
            .stdout(writer.try_clone().unwrap())
            .stderr(writer)
            .spawn()
            .unwrap();
        let mut r = BufReader::new(reader);
        for _ in 0..2 {
            let mut l = String::new();
            r.read_line(&mut l).unwrap();
        }
        drop(r);
        let code = child.wait().unwrap().code();
        assert_eq!(code, Some(0), "dump {extra:?} 2>&1 | head -2 ended with {code:?}");
    }
}

/// An output error that is not a closed pipe is one: exit 74, named.
#[test]
fn a_full_disk_is_an_output_error() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("no /dev/full here; skipped");
        return;
    };
    let file = binlog();
    for extra in [&[][..], &["--events"][..]] {
        let out = sluice().arg("dump").args(extra).arg(&file).stdout(full.try_clone().unwrap()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(74), "{extra:?}: {err}");
        assert!(err.contains("No space left on device"), "{extra:?}: the cause is named: {err}");
    }
}

/// What used to print nothing and exit 0, or exit 66 ("input not found") without an offset:
/// a cut-off `.gz`, a start past the end, ranges that end before they begin, patterns that can
/// match no table.
#[test]
fn impossible_ranges_and_damaged_input_are_said() {
    let file = binlog();
    let dir = tempfile::tempdir().unwrap();
    // a .gz cut in the middle: a data error (65) naming where reading stopped
    let gz = {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(&std::fs::read(&file).unwrap()).unwrap();
        e.finish().unwrap()
    };
    let cut = dir.path().join("cut.gz");
    std::fs::write(&cut, &gz[..gz.len() / 2]).unwrap();
    let out = sluice().arg("dump").arg(&cut).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(65), "{err}");
    assert!(err.contains("breaks off at offset") && err.contains("the file ends early"), "{err}");
    assert!(!out.stdout.is_empty(), "the events before the cut are printed");

    let f = file.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = sluice().args(args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned(), out.stdout.len())
    };
    let (code, err, printed) = run(&["dump", "--start-position", "99999999", f]);
    assert_eq!((code, printed), (Some(0), 0), "{err}");
    assert!(err.contains("--start-position 99999999 is at or past the end of the file"), "{err}");
    for (args, says) in [
        (vec!["dump", "--start-position", "900", "--stop-position", "500", f], "is not before --stop-position 500"),
        (
            vec!["dump", "--start-datetime", "2024-05-02 00:00:00", "--stop-datetime", "2024-05-01 00:00:00", f],
            "is not before --stop-datetime",
        ),
        (vec!["dump", "-t", "cdc_test.", f], "--table \"cdc_test.\" has an empty part"),
        (vec!["dump", "-t", ".b.c", f], "--table \".b.c\" has an empty part"),
        (vec!["dump", "-d", "shop.x", f], "--database \"shop.x\" can match no database"),
        (vec!["dump", "--stop-position", "0", f], "stops before the first event"),
        (vec!["dump", "--events", "--format", "sql", f], "--events prints events as JSON lines"),
        // a set of the other flavour holds none of the file's transactions: it skipped nothing, silently
        (
            vec!["dump", "--start-gtid", "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5", f],
            "--start-gtid is a MySQL GTID set, but",
        ),
    ] {
        let (code, err, printed) = run(&args);
        assert_eq!((code, printed), (Some(2), 0), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// Ctrl-C (SIGINT) ends a dump of files after its last complete transaction, whole lines only,
/// with exit 130 and where to resume; the resumed dump gives exactly the rest. The dump (of 20
/// copies of the recorded file, 4.5 MB of JSON) is held on a full pipe when the signal comes
/// (nobody reads its output yet), so the signal lands in the middle of the input, as a user's
/// would. Before, the signal's default action cut the output in the middle of a line, with no
/// summary.
#[test]
fn an_interrupted_dump_of_files_ends_on_a_whole_transaction_and_says_where_to_resume() {
    // the recorded file 20 times, as a series of files in the server's order
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<String> = (1..=20)
        .map(|n| {
            let path = dir.path().join(format!("mysql-bin.{n:06}"));
            std::fs::copy(binlog(), &path).unwrap();
            path.to_str().unwrap().to_string()
        })
        .collect();
    let args = |start: Option<&str>, from: usize| -> Vec<String> {
        let mut a: Vec<String> = ["dump", "--threads", "1"].map(String::from).into();
        if let Some(s) = start {
            a.extend(["--start-position".to_string(), s.to_string()]);
        }
        a.extend(files[from..].iter().cloned());
        a
    };
    let (code, full, _) = run_to_end(&args(None, 0));
    assert_eq!(code, Some(0));
    let mut child = sluice().args(args(None, 0)).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let st = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(st.success());
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut first = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut first).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(first.len() < full.len() && first.ends_with(b"\n"), "{} of {} bytes", first.len(), full.len());
    for line in String::from_utf8(first.clone()).unwrap().lines() {
        let _: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    let resume =
        err.lines().find_map(|l| l.split("resume with --start-position ").nth(1)).unwrap_or_else(|| panic!("{err}"));
    let (offset, file) = resume.split_once(' ').unwrap();
    let from = files.iter().position(|f| f == file).unwrap_or_else(|| panic!("{resume}"));
    let (code, rest, err2) = run_to_end(&args(Some(offset), from));
    assert_eq!(code, Some(0), "{err2}");
    // the two parts are the whole dump, each row once
    assert!([first, rest].concat() == full, "interrupted in {file} at {offset}: the parts differ from the whole");
}

/// Flashback SQL does not undo a table's DDL: the script marks where each ALTER or CREATE of a
/// dumped table stands (the statements below it undo rows as they were before it) and the log
/// says so; DDL of tables not dumped is not mentioned. Before, a script crossing a DROP COLUMN
/// failed half-applied with "Unknown column", without a word at dump time.
#[test]
fn flashback_marks_the_ddl_it_cannot_undo() {
    let file = binlog();
    let f = file.to_str().unwrap();
    let (code, out, err) = run_to_end(&["dump", "--format", "flashback", "-t", "sluice_it.t_alter", f]);
    assert_eq!(code, Some(0), "{err}");
    let out = String::from_utf8(out).unwrap();
    let marks: Vec<&str> = out.lines().filter(|l| l.starts_with("-- not undone: `")).collect();
    // the recorded workload: CREATE TABLE t_alter, then four ALTERs of it
    assert_eq!(marks.len(), 5, "{out}");
    assert!(marks[2].starts_with("-- not undone: `ALTER TABLE t_alter DROP COLUMN a` at "), "{marks:#?}");
    assert_eq!(err.matches("The flashback script does not undo this statement").count(), 5, "{err}");
    // the DROP COLUMN's line comes after the undo of the rows written after it
    let drop = out.find("DROP COLUMN a").unwrap();
    assert!(out[..drop].contains("`t_alter`"), "{out}");
}

/// A range that ends inside a transaction (here after three of its six row changes): the SQL
/// and flashback SQL leave the cut transaction out and say so, since applying part of it does
/// what the server never did (they wrapped it in BEGIN ... COMMIT before); JSON lines keep its
/// rows, without an xid. Ended after its XID, the whole transaction is written.
#[test]
fn a_range_ending_inside_a_transaction_writes_none_of_it_as_sql() {
    let file = binlog();
    let f = file.to_str().unwrap();
    // the recorded file's transaction of six row changes: GTID at 165893, XID at 167255
    let (start, inside, after) = ("165893", "166578", "167256");
    for format in ["sql", "flashback"] {
        let (code, out, err) =
            run_to_end(&["dump", "--format", format, "--start-position", start, "--stop-position", inside, f]);
        let out = String::from_utf8(out).unwrap();
        assert_eq!(
            (code, out.as_str()),
            (Some(0), "SET NAMES utf8mb4;\nSET time_zone = '+00:00';\n"),
            "{format}: {err}"
        );
        assert!(
            err.contains("The input ends inside a transaction (begun at ")
                && err.contains("mysql-bin.000001:165893): its 3 row changes so far are not written"),
            "{err}"
        );
        let (code, out, err) =
            run_to_end(&["dump", "--format", format, "--start-position", start, "--stop-position", after, f]);
        let out = String::from_utf8(out).unwrap();
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(out.matches("`sluice_it`.").count(), 6, "{format}: {out}");
        assert!(!err.contains("ends inside a transaction"), "{err}");
    }
    let (code, out, err) = run_to_end(&["dump", "--start-position", start, "--stop-position", inside, f]);
    let lines: Vec<serde_json::Value> =
        String::from_utf8(out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!((code, lines.len()), (Some(0), 3), "{err}");
    assert!(lines.iter().all(|l| l["xid"].is_null()), "{lines:?}");
}

/// A file before the last that ends inside a transaction was cut short (a server ends its
/// files between transactions): its part of the transaction is left out of SQL and flashback
/// and written without an xid as JSON, and the next file's rows do not join it. The dump of
/// both is the dump of each alone, one after the other.
#[test]
fn a_file_cut_inside_a_transaction_does_not_run_into_the_next() {
    let file = binlog();
    let bytes = std::fs::read(&file).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // the recorded file's transaction of six row changes: GTID at 165893, XID at 167255; an
    // event starts at 166577, after three of them
    let cut = dir.path().join("cut.000001");
    std::fs::write(&cut, &bytes[..166_577]).unwrap();
    let next = dir.path().join("cut.000002");
    std::fs::copy(&file, &next).unwrap();
    // a flashback stops at the recorded file's first MINIMAL image (offset 167815: it cannot be
    // undone), so its next file is the recorded one up to the cut transaction's start
    std::fs::create_dir(dir.path().join("fb")).unwrap();
    let next_fb = dir.path().join("fb/cut.000002");
    std::fs::write(&next_fb, &bytes[..165_893]).unwrap();
    let c = cut.to_str().unwrap();
    for format in ["sql", "flashback", "json"] {
        let n = if format == "flashback" { next_fb.to_str().unwrap() } else { next.to_str().unwrap() };
        let (code, both, err) = run_to_end(&["dump", "--format", format, c, n]);
        assert_eq!(code, Some(0), "{format}: {err}");
        assert!(err.contains("cut.000001 ends inside a transaction"), "{format}: {err}");
        let (_, first, _) = run_to_end(&["dump", "--format", format, c]);
        let (_, second, _) = run_to_end(&["dump", "--format", format, n]);
        let (both, first, second) =
            (String::from_utf8(both).unwrap(), String::from_utf8(first).unwrap(), String::from_utf8(second).unwrap());
        let expected = match format {
            "json" => first + &second,
            // one preamble; a flashback undoes the later file first
            "sql" => first + second.trim_start_matches("SET NAMES utf8mb4;\nSET time_zone = '+00:00';\n"),
            _ => second + first.trim_start_matches("SET NAMES utf8mb4;\nSET time_zone = '+00:00';\n"),
        };
        assert!(both == expected, "{format}: the dump of both differs from each alone's\n{err}");
    }
    // cut between transactions: no ROTATE at its end; a ROTATE naming another file than the
    // next one given: both said (the dump goes on: a crashed server's file ends so too)
    let between = dir.path().join("between.000001");
    std::fs::write(&between, &bytes[..165_893]).unwrap();
    let n = next.to_str().unwrap();
    let (code, _, err) = run_to_end(&["dump", "--format", "sql", between.to_str().unwrap(), n]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("between.000001 ends without the ROTATE or STOP"), "{err}");
    let (code, _, err) = run_to_end(&["dump", "--format", "sql", file.to_str().unwrap(), n]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("ends with a ROTATE to mysql-bin.000002, but the next file given is"), "{err}");
}

/// JSON lines are rendered on worker threads (`--threads`) and handed back in order: the output,
/// the summaries and the exit code are the same for any number of threads, on good input and
/// on input whose rows stop decoding in the middle of an event (where the lines before the bad
/// row are printed and the dump stops with a data error naming the event).
#[test]
fn the_output_is_the_same_on_any_number_of_threads() {
    let file = binlog();
    let bytes = std::fs::read(&file).unwrap();
    // An UPDATE_ROWS event of 8,214 bytes at 16,916 holds two rows: its second half set to
    // 0xFF makes lengths run past the event's end.
    let (at, size) = (16_916usize, 8_214usize);
    assert_eq!(bytes[at + 4], 24, "the UPDATE_ROWS event moved: the recorded binlog changed");
    let mut bad = bytes.clone();
    bad[at + size / 2..at + size - 4].fill(0xFF);
    let dir = tempfile::tempdir().unwrap();
    let damaged = dir.path().join("damaged.000002");
    std::fs::write(&damaged, &bad).unwrap();
    // 47,273 rows of 16 tables in 1,462 events: many events in flight at once
    let sakila = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../binlog/tests/data/fixtures/mysql/mysql-binlog-connector-java/mysql-bin.sakila.gz");
    // the recorded file once more, under a name of its own (a file named twice is refused)
    let again = dir.path().join("again.000003");
    std::fs::copy(&file, &again).unwrap();
    let (f, d, s, a) =
        (file.to_str().unwrap(), damaged.to_str().unwrap(), sakila.to_str().unwrap(), again.to_str().unwrap());
    for (inputs, code) in [(vec![f, s, a], 0), (vec![s, "--no-verify-checksum", d, f], 65)] {
        let run = |threads: &str| run_to_end(&[&["dump", "--threads", threads][..], &inputs].concat());
        let (one_code, one_out, one_err) = run("1");
        assert_eq!(one_code, Some(code), "{inputs:?}: {one_err}");
        let lines = one_out.iter().filter(|&&b| b == b'\n').count();
        assert!(lines > 47_273, "{inputs:?}: {lines} lines");
        if code == 65 {
            assert!(one_err.contains("damaged.000002") && one_err.contains("16916"), "{one_err}");
        }
        for threads in ["2", "3", "7"] {
            let (c, out, err) = run(threads);
            assert_eq!(c, one_code, "{threads} threads, {inputs:?}: {err}");
            assert!(out == one_out, "{threads} threads, {inputs:?}: the output differs from one thread's");
            assert_eq!(err, one_err, "{threads} threads, {inputs:?}");
        }
    }
    // a value out of range is refused by clap, naming the flag
    let out = sluice().args(["dump", "--threads", "0", f]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--threads"));
    // options of --source given without it (--follow once dumped the file and exited 0)
    for flags in [&["--follow"][..], &["--password-file", "/dev/null"][..]] {
        let out = sluice().arg("dump").args(flags).arg(f).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(flags[0]) && err.contains("--source"), "{flags:?}: {err}");
    }
}

/// A dump of a binlog without column names (a MySQL 5.7 server's) that stops at a bad event
/// logs the warnings `--threads 1` logs: one per table up to the bad event, none for the tables
/// the reading thread met past it while the workers rendered (before the fix, 4-8 runs of 20
/// logged one more). Each thread count runs several times: the reading thread's lead is a race.
#[test]
fn a_dump_stopped_by_a_bad_event_warns_as_one_thread_does() {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../binlog/tests/data/fixtures/mysql/mysql-binlog-connector-java/mysql-bin.checksum-crc32");
    let mut bytes = std::fs::read(&fixture).unwrap();
    // the WRITE_ROWS event of 102 bytes at 4,555 (table simu_file_dev.folder): the length of
    // its first row's VARCHAR (byte 38) set to 255, past the event's end; the rows fail to
    // decode on a worker, while the reading thread reads on
    let at = 4_555usize;
    assert_eq!((bytes[at + 4], u32::from_le_bytes(bytes[at + 9..at + 13].try_into().unwrap())), (30, 102));
    bytes[at + 38] = 0xFF;
    let dir = tempfile::tempdir().unwrap();
    let damaged = dir.path().join("mysql-bin.000001");
    std::fs::write(&damaged, &bytes).unwrap();
    let damaged = damaged.to_str().unwrap();
    let run = |threads: &str| run_to_end(&["dump", "--no-verify-checksum", "--threads", threads, damaged]);
    let (code, out, err) = run("1");
    assert_eq!(code, Some(65), "{err}");
    assert!(err.contains("offset 4555") && err.contains("truncated VARCHAR: needed 255 bytes"), "{err}");
    let warned = |t: &str| err.contains(&format!("table={t}"));
    assert!(warned("simu_file_dev.folder"), "the bad event's own table is warned about: {err}");
    assert!(!warned("simu_affair_dev.affair_user"), "a table met only past the bad event: {err}");
    for threads in ["2", "3", "7"] {
        for round in 0..8 {
            let (c, o, e) = run(threads);
            assert_eq!(c, code, "{threads} threads, round {round}: {e}");
            assert!(o == out, "{threads} threads, round {round}: the output differs from one thread's");
            assert_eq!(e, err, "{threads} threads, round {round}");
        }
    }
}
