//! What the commands print for people: report lines on stdout, summaries and messages on
//! stderr, written so that a closed or failing stream never panics (`println!` and
//! `eprintln!` do: `sluice dump F 2>&1 | head -2` would exit 101).
//!
//! A closed stdout is the reader's choice (`| head`): `sluice dump` notices it through its
//! writer's error and ends quietly; report lines ([`Report`]) stop there, other output errors
//! end a command with the output error's code. A closed stderr only loses the messages: the
//! exit code still tells what happened.

use std::fmt;
use std::io::{self, Write};

/// With `--log-format json`, message lines are JSON too (see [`messages_as_json`]).
static JSON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Message lines on stderr ([`stderr_line`], [`stderr_note`]) become JSON objects shaped as
/// the JSON log's events (`timestamp`, `level`, `fields.message`, `target`): a log collector
/// that parses every line as JSON then gets a command's stop message and summary too.
pub fn messages_as_json(on: bool) {
    JSON.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Writes one message line to stderr, a command's error or stop (level `ERROR` as JSON); a
/// write error is ignored (there is nowhere left to report it). Control characters in it (from
/// a file or table name) are written escaped: a name holding `ESC [31m` must not recolour or
/// move the terminal's cursor. Tabs stay, and a newline starts an indented line (see
/// [`log_line`]).
pub fn stderr_line(args: fmt::Arguments<'_>) {
    message("ERROR", args);
}

/// As [`stderr_line`], for a summary or a notice (level `INFO` as JSON).
pub fn stderr_note(args: fmt::Arguments<'_>) {
    message("INFO", args);
}

fn message(level: &str, args: fmt::Arguments<'_>) {
    let line = args.to_string();
    let line = if JSON.load(std::sync::atomic::Ordering::Relaxed) {
        let event = serde_json::json!({
            "timestamp": humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string(),
            "level": level,
            "fields": {"message": line},
            "target": "sluice",
        });
        std::borrow::Cow::Owned(event.to_string())
    } else {
        log_line(&line, false)
    };
    let mut e = io::stderr().lock();
    let _ = e.write_all(line.as_bytes()).and_then(|()| e.write_all(b"\n"));
}

/// `text` with its control characters but tab and newline escaped (`\u{1b}`); with
/// `colours`, the ANSI colour sequences (`ESC [ digits ; m`) kept as they are.
fn escaped(text: &str, colours: bool) -> std::borrow::Cow<'_, str> {
    let hidden = |c: char| c.is_control() && c != '\t' && c != '\n';
    if !text.chars().any(hidden) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let colour = if colours && c == '\u{1b}' { colour_len(rest) } else { 0 };
        let n = if colour > 0 {
            out.push_str(&rest[..colour]);
            colour
        } else {
            if hidden(c) {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
            c.len_utf8()
        };
        rest = &rest[n..];
    }
    std::borrow::Cow::Owned(out)
}

/// The length of the ANSI colour sequence `text` starts with (0: none).
fn colour_len(text: &str) -> usize {
    let Some(params) = text.strip_prefix("\u{1b}[") else { return 0 };
    let digits = params.bytes().take_while(|b| b.is_ascii_digit() || *b == b';').count();
    if params.as_bytes().get(digits) == Some(&b'm') {
        2 + digits + 1
    } else {
        0
    }
}

/// One event's text as a log line shows it (see [`LogLines`]).
fn log_line(line: &str, colours: bool) -> std::borrow::Cow<'_, str> {
    let line = escaped(line, colours);
    if line.contains('\n') {
        std::borrow::Cow::Owned(line.replace('\n', "\n    "))
    } else {
        line
    }
}

/// Where text-format log lines go: stderr, each event's control characters escaped (a name
/// holding `ESC [2J` must not clear the operator's terminal), the colours tracing adds on a
/// terminal kept, and a newline inside an event followed by an indent: a multi-line message
/// (the server checks' list) stays readable, and a table name holding `\n` cannot forge a log
/// line of its own (every real one starts with its time at the margin). JSON logs escape them
/// by JSON's rules already.
#[derive(Debug, Clone, Copy)]
pub struct LogLines {
    /// Colours are on (stderr is a terminal).
    pub colours: bool,
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogLines {
    type Writer = LogLines;

    fn make_writer(&'a self) -> LogLines {
        *self
    }
}

impl Write for LogLines {
    /// One call per event: tracing formats the whole line first.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let (line, end) = match text.strip_suffix('\n') {
            Some(line) => (line, "\n"),
            None => (&text[..], ""),
        };
        let line = log_line(line, self.colours);
        let mut e = io::stderr().lock();
        e.write_all(line.as_bytes())?;
        e.write_all(end.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

/// The report lines a command prints on stdout (`sluice check`, `sluice position`), each
/// flushed at once (they are few and should show as they come). A reader that stops reading
/// (`sluice check | head -1`) ends the output, not the command: its exit code still says how
/// the checks went. Any other output error (a full disk) is kept, and the command exits with
/// the output error's code.
#[derive(Debug, Default)]
pub struct Report {
    closed: bool,
    failed: Option<io::Error>,
}

impl Report {
    /// Writes one line.
    pub fn line(&mut self, args: fmt::Arguments<'_>) {
        if self.closed || self.failed.is_some() {
            return;
        }
        // a name's control characters escaped, its newlines indented, as on stderr
        let line = args.to_string();
        let line = log_line(&line, false);
        let mut o = io::stdout().lock();
        if let Err(e) = o.write_all(line.as_bytes()).and_then(|()| o.write_all(b"\n")).and_then(|()| o.flush()) {
            if is_closed_pipe(&e) {
                self.closed = true;
            } else {
                self.failed = Some(e);
            }
        }
    }

    /// The output error that is not a closed pipe, if there was one.
    pub fn failure(&self) -> Option<&io::Error> {
        self.failed.as_ref()
    }
}

/// `eprintln!` that never panics: see [`stderr_line`].
#[macro_export]
macro_rules! eline {
    ($($arg:tt)*) => { $crate::console::stderr_line(format_args!($($arg)*)) };
}

/// A summary or notice line on stderr: [`stderr_note`] with `format!` arguments.
#[macro_export]
macro_rules! enote {
    ($($arg:tt)*) => { $crate::console::stderr_note(format_args!($($arg)*)) };
}

/// A line of a [`Report`]: `report!(out, "[ok] {x}")`.
#[macro_export]
macro_rules! report {
    ($out:expr, $($arg:tt)*) => { $out.line(format_args!($($arg)*)) };
}

/// `text` cut to its first `max` characters, `...` saying so: a server's answer in a message
/// (a registry's refusal quotes whole schemas, an object store its XML) stays readable.
pub fn shortened(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(max) {
        Some((cut, _)) => std::borrow::Cow::Owned(format!("{}...", text.get(..cut).unwrap_or_default())),
        None => std::borrow::Cow::Borrowed(text),
    }
}

/// `text` on one line, unambiguously: control characters (newline and tab too) and the
/// backslash escaped, so that a value (a key in a report) cannot print what looks like a line
/// of its own, and `a\nb` and `a<newline>b` differ.
pub fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().any(|c| c.is_control() || c == '\\') {
        let mut out = String::with_capacity(text.len() + 8);
        for c in text.chars() {
            if c.is_control() || c == '\\' {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
        std::borrow::Cow::Owned(out)
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// True when `e` says the reader of the output has gone away.
pub fn is_closed_pipe(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key holding a newline cannot print a line of its own into a report.
    #[test]
    fn one_line_escapes_controls_and_backslashes() {
        assert_eq!(one_line("line1\nFAKE: 0 different"), "line1\\nFAKE: 0 different");
        assert_eq!(one_line("a\\nb"), "a\\\\nb");
        assert_eq!(one_line("[3,\"k1\"]"), "[3,\"k1\"]");
        assert_eq!(one_line("a\u{1b}[2J"), "a\\u{1b}[2J");
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        let shown = |text| log_line(text, false).into_owned();
        assert_eq!(shown("plain: a\tb\nc"), "plain: a\tb\n    c");
        assert_eq!(shown("x\u{1b}[31m.000001"), "x\\u{1b}[31m.000001");
        assert_eq!(shown("bell\u{7}"), "bell\\u{7}");
    }

    #[test]
    fn log_lines_keep_tracings_colours_only() {
        let log = |line: &str, colours| log_line(line, colours).into_owned();
        // tracing's own colours stay on a terminal; a name's escape sequences do not, and a
        // newline in it starts an indented line, not one that looks like a log line of its own
        let line = "\u{1b}[33m WARN\u{1b}[0m table=\"a\n2026-12-06T00:00:00Z INFO b\u{1b}[2J\u{1b}[31mred\" done";
        assert_eq!(
            log(line, true),
            "\u{1b}[33m WARN\u{1b}[0m table=\"a\n    2026-12-06T00:00:00Z INFO b\\u{1b}[2J\u{1b}[31mred\" done",
            "colours kept, the cursor's move escaped, the newline indented"
        );
        assert_eq!(
            log(line, false),
            "\\u{1b}[33m WARN\\u{1b}[0m table=\"a\n    2026-12-06T00:00:00Z INFO b\\u{1b}[2J\\u{1b}[31mred\" done"
        );
        assert_eq!(log("not ready:\n- binlog_format", false), "not ready:\n    - binlog_format");
        assert_eq!(log("\u{1b}[", true), "\\u{1b}[", "a cut sequence");
        assert_eq!(log("caf\u{e9} \u{85}", false), "caf\u{e9} \\u{85}");
    }
}
