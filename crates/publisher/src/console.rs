//! What the commands print for people: report lines on stdout, summaries and messages on
//! stderr, written so that a closed or failing stream never panics (`println!` and
//! `eprintln!` do: `sluice dump F 2>&1 | head -2` would exit 101).
//!
//! A closed stdout is the reader's choice (`| head`): `sluice dump` notices it through its
//! writer's error and ends quietly; report lines are dropped. A closed stderr only loses the
//! messages: the exit code still tells what happened.

use std::fmt;
use std::io::{self, Write};

/// Writes one line to stderr; a write error is ignored (there is nowhere left to report it).
pub fn stderr_line(args: fmt::Arguments<'_>) {
    let mut e = io::stderr().lock();
    let _ = e.write_fmt(args).and_then(|()| e.write_all(b"\n"));
}

/// Writes one report line to stdout and flushes it (report lines are few and should show at
/// once). A write error is ignored: a report's outcome is its exit code, which a reader that
/// stopped reading (`sluice check | head -1`) still gets.
pub fn stdout_line(args: fmt::Arguments<'_>) {
    let mut o = io::stdout().lock();
    let _ = o.write_fmt(args).and_then(|()| o.write_all(b"\n")).and_then(|()| o.flush());
}

/// `eprintln!` that never panics: see [`stderr_line`].
#[macro_export]
macro_rules! eline {
    ($($arg:tt)*) => { $crate::console::stderr_line(format_args!($($arg)*)) };
}

/// `println!` that never panics: see [`stdout_line`].
#[macro_export]
macro_rules! oline {
    ($($arg:tt)*) => { $crate::console::stdout_line(format_args!($($arg)*)) };
}

/// True when `e` says the reader of the output has gone away.
pub fn is_closed_pipe(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}
