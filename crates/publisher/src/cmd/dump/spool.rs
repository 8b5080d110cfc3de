//! Bounded-memory holding areas for `sluice dump` output that cannot be written yet.
//!
//! - [`TxSpool`] keeps a transaction's output until it commits: JSON lines wait for their
//!   `xid` (which the binlog writes at the end), and nothing of a transaction that a lost
//!   connection cut off is printed before it arrives again, whole.
//! - [`ReverseSpool`] keeps every flashback statement until the input ends, then gives
//!   them back last-first.
//!
//! Both keep up to [`MEMORY_LIMIT`] bytes in memory and move the rest to an anonymous
//! temporary file, so a million-row transaction does not become a million-row vector.

use std::fs::File;
use std::io::{self, BufRead, BufReader, IoSlice, Read, Seek, SeekFrom, Write};

/// Bytes kept in memory before spilling to a temporary file.
pub const MEMORY_LIMIT: usize = 16 << 20;

/// Lines per vectored write: two slices each, within the 1,024 a `writev` takes.
const VECTORED_LINES: usize = 512;

/// `Write::write_all` for slices (std's own is not stable yet): a short write advances the
/// slices and writes again.
fn write_all_vectored(out: &mut impl Write, mut slices: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        match out.write_vectored(slices) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "the output took no more bytes")),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The anonymous temporary file output spills into, in `TMPDIR` (else /tmp); an error that
/// says so (a read-only root filesystem has no writable /tmp).
fn spill_file() -> io::Result<File> {
    tempfile::tempfile().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot create a temporary file in {} for output held over {} MiB ({e}): set TMPDIR to a writable \
                 directory",
                std::env::temp_dir().display(),
                MEMORY_LIMIT >> 20
            ),
        )
    })
}

/// Lines written one after another into one buffer, each followed by a newline, with where
/// each ends: the unit `sluice dump` renders a rows event into (on a worker thread or its own)
/// and hands to the [`TxSpool`] whole, so no line is copied on its way.
#[derive(Default)]
pub struct Block {
    buf: Vec<u8>,
    /// Where each line ends (its newline's offset in `buf`): flushing copies the lines out by
    /// these instead of searching the bytes for newlines again.
    ends: Vec<usize>,
}

impl Block {
    /// The buffer to write the next line into (appending only; no newline): [`Block::end_line`]
    /// then closes it.
    pub fn line(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Closes the line written through [`Block::line`].
    pub fn end_line(&mut self) {
        self.ends.push(self.buf.len());
        self.buf.push(b'\n');
    }

    /// Lines held.
    pub fn lines(&self) -> usize {
        self.ends.len()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    fn clear(&mut self) {
        self.buf.clear();
        self.ends.clear();
    }
}

/// Emptied blocks kept for reuse: enough for the rendering threads' queues, so a dump
/// allocates its buffers once rather than once per event.
const SPARE_BLOCKS: usize = 64;

/// A block holding more room than this is freed rather than kept (one that held a long BLOB).
const SPARE_MAX_BYTES: usize = 1 << 20;

/// JSON lines of the open transaction, each missing its final `"xid": N}` part.
#[derive(Default)]
pub struct TxSpool {
    /// The lines held in memory, in order.
    blocks: Vec<Block>,
    /// Bytes in `blocks`.
    held: usize,
    file: Option<File>,
    lines: u64,
    spare: Vec<Block>,
}

impl TxSpool {
    /// Adds a line (without newline; it must not contain one, as serialized JSON never does).
    #[cfg(test)]
    pub fn push(&mut self, line: &str) -> io::Result<()> {
        self.push_with(|buf| {
            buf.extend_from_slice(line.as_bytes());
            Ok(())
        })
    }

    /// Holds the line `write` appends to the buffer it is given (no newline), written where it
    /// is held; an error from `write` holds nothing.
    pub fn push_with<E: From<io::Error>>(
        &mut self,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut b = match self.blocks.pop() {
            Some(b) => {
                self.held -= b.bytes();
                self.lines -= b.lines() as u64;
                b
            }
            None => self.empty_block(),
        };
        let before = b.buf.len();
        if let Err(e) = write(b.line()) {
            b.buf.truncate(before);
            self.append(b)?;
            return Err(e);
        }
        b.end_line();
        Ok(self.append(b)?)
    }

    /// An empty block to render lines into, reusing the buffers of lines flushed earlier.
    pub fn empty_block(&mut self) -> Block {
        self.spare.pop().unwrap_or_default()
    }

    /// Takes `block`'s lines after those held, moving what is held to the spill file once it
    /// passes [`MEMORY_LIMIT`].
    pub fn append(&mut self, block: Block) -> io::Result<()> {
        if block.lines() == 0 {
            self.recycle(block);
            return Ok(());
        }
        self.held += block.bytes();
        self.lines += block.lines() as u64;
        self.blocks.push(block);
        if self.held > MEMORY_LIMIT {
            let f = match &mut self.file {
                Some(f) => f,
                None => self.file.insert(spill_file()?),
            };
            for b in &self.blocks {
                f.write_all(&b.buf)?;
            }
            self.release_blocks();
        }
        Ok(())
    }

    fn recycle(&mut self, mut block: Block) {
        if self.spare.len() < SPARE_BLOCKS && block.buf.capacity() <= SPARE_MAX_BYTES {
            block.clear();
            self.spare.push(block);
        }
    }

    fn release_blocks(&mut self) {
        for b in std::mem::take(&mut self.blocks) {
            self.recycle(b);
        }
        self.held = 0;
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.lines == 0
    }

    /// The lines held.
    pub fn len(&self) -> u64 {
        self.lines
    }

    /// Drops everything held.
    pub fn clear(&mut self) {
        self.release_blocks();
        self.file = None;
        self.lines = 0;
    }

    /// Writes every held line followed by `suffix` and a newline, in order, and empties the
    /// spool.
    pub fn flush_with(&mut self, out: &mut impl Write, suffix: &str) -> io::Result<()> {
        if let Some(mut f) = self.file.take() {
            f.seek(SeekFrom::Start(0))?;
            // copied a buffer at a time, the suffix put before each newline: a line is not
            // read whole first (a 100 MiB row's statement would be held again)
            let mut input = BufReader::with_capacity(1 << 20, f);
            loop {
                let buf = input.fill_buf()?;
                if buf.is_empty() {
                    break;
                }
                let mut start = 0;
                while let Some(nl) = buf[start..].iter().position(|&b| b == b'\n') {
                    out.write_all(&buf[start..start + nl])?;
                    out.write_all(suffix.as_bytes())?;
                    out.write_all(b"\n")?;
                    start += nl + 1;
                }
                out.write_all(&buf[start..])?;
                let n = buf.len();
                input.consume(n);
            }
        }
        // The lines in memory go out as a vectored write of (line, suffix) pairs, so that
        // the bytes are not first copied into `out`'s buffer (`BufWriter` hands a write at
        // least its capacity straight to the file or pipe, and buffers a smaller one).
        let mut suffix_nl = Vec::with_capacity(suffix.len() + 1);
        suffix_nl.extend_from_slice(suffix.as_bytes());
        suffix_nl.push(b'\n');
        // The slices run across blocks: a block (one rows event) is often smaller than the
        // buffer, and a write per block would be copied into it.
        let mut slices = Vec::with_capacity(VECTORED_LINES * 2);
        for b in &self.blocks {
            let mut start = 0;
            for &end in &b.ends {
                slices.push(IoSlice::new(b.buf.get(start..end).unwrap_or(&[])));
                slices.push(IoSlice::new(&suffix_nl));
                start = end + 1;
                if slices.len() == VECTORED_LINES * 2 {
                    write_all_vectored(out, &mut slices)?;
                    slices.clear();
                }
            }
        }
        write_all_vectored(out, &mut slices)?;
        self.release_blocks();
        self.lines = 0;
        Ok(())
    }
}

/// Statements grouped by transaction, replayed last transaction first and, within each,
/// last statement first.
#[derive(Default)]
pub struct ReverseSpool {
    file: Option<File>,
    written: u64,
    mem: Vec<u8>,
    /// (offset, length) of each statement in the combined stream (file then memory).
    statements: Vec<(u64, u32)>,
    /// Index into `statements` where each transaction starts.
    transactions: Vec<usize>,
}

impl ReverseSpool {
    /// Starts a new transaction group.
    pub fn begin(&mut self) {
        if self.transactions.last() != Some(&self.statements.len()) {
            self.transactions.push(self.statements.len());
        }
    }

    /// The statements of the current transaction so far.
    pub fn current_len(&self) -> usize {
        self.statements.len() - self.transactions.last().copied().unwrap_or(0)
    }

    /// Drops the statements of the current transaction (its bytes stay in the spool, unused).
    pub fn discard_current(&mut self) {
        let start = self.transactions.last().copied().unwrap_or(0);
        self.statements.truncate(start);
    }

    /// Adds a statement to the current transaction.
    pub fn push(&mut self, stmt: &str) -> io::Result<()> {
        self.push_with(|buf| {
            buf.extend_from_slice(stmt.as_bytes());
            Ok(())
        })
    }

    /// Adds the statement `write` appends to the buffer it is given, written where it is held;
    /// an error from `write` adds nothing.
    pub fn push_with<E: From<io::Error>>(
        &mut self,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.transactions.is_empty() {
            self.transactions.push(0);
        }
        let start = self.mem.len();
        let off = self.written + start as u64;
        if let Err(e) = write(&mut self.mem) {
            self.mem.truncate(start);
            return Err(e);
        }
        let Ok(len) = u32::try_from(self.mem.len() - start) else {
            self.mem.truncate(start);
            return Err(io::Error::other("statement over 4 GiB").into());
        };
        self.statements.push((off, len));
        if self.mem.len() > MEMORY_LIMIT {
            let f = match &mut self.file {
                Some(f) => f,
                None => self.file.insert(spill_file()?),
            };
            f.write_all(&self.mem)?;
            self.written += self.mem.len() as u64;
            self.mem.clear();
            if self.mem.capacity() > 2 * MEMORY_LIMIT {
                // a huge statement's room is not kept for the small ones after it
                self.mem = Vec::new();
            }
        }
        Ok(())
    }

    /// Writes the transactions in reverse, each wrapped in `BEGIN;` / `COMMIT;`.
    pub fn write_reversed(&mut self, out: &mut impl Write) -> io::Result<()> {
        let mut buf = Vec::new();
        let mut end = self.statements.len();
        for &start in self.transactions.iter().rev() {
            if start >= end {
                continue;
            }
            out.write_all(b"BEGIN;\n")?;
            for &(off, len) in self.statements.get(start..end).unwrap_or(&[]).iter().rev() {
                buf.resize(len as usize, 0);
                if off >= self.written {
                    let s = (off - self.written) as usize;
                    buf.copy_from_slice(self.mem.get(s..s + len as usize).unwrap_or(&[]));
                } else if let Some(f) = &mut self.file {
                    f.seek(SeekFrom::Start(off))?;
                    f.read_exact(&mut buf)?;
                }
                out.write_all(&buf)?;
                out.write_all(b"\n")?;
            }
            out.write_all(b"COMMIT;\n")?;
            end = start;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tx_spool_appends_suffix_in_order_across_the_spill() {
        let mut s = TxSpool::default();
        let big = "x".repeat(1 << 20);
        for i in 0..20 {
            s.push(&format!("{{\"i\":{i},\"pad\":\"{big}\",\"xid\":")).unwrap();
        }
        assert!(s.file.is_some(), "20 MiB must have spilled to a file");
        let mut out = Vec::new();
        s.flush_with(&mut out, "7}").unwrap();
        let text = String::from_utf8(out).unwrap();
        let ids: Vec<u64> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|v| {
                assert_eq!(v["xid"], 7);
                v["i"].as_u64().unwrap()
            })
            .collect();
        assert_eq!(ids, (0..20).collect::<Vec<_>>());
        assert!(s.is_empty());
    }

    /// A writer that takes at most `step` bytes per call, across slices: every short
    /// vectored write must be picked up where it stopped.
    struct Trickle {
        got: Vec<u8>,
        step: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.write_vectored(&[IoSlice::new(buf)])
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            let mut left = self.step;
            for b in bufs {
                let n = b.len().min(left);
                self.got.extend_from_slice(&b[..n]);
                left -= n;
                if left == 0 {
                    break;
                }
            }
            Ok(self.step - left)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn short_vectored_writes_lose_nothing() {
        for step in [1, 3, 7, 64, 100_000] {
            let mut s = TxSpool::default();
            let mut want = String::new();
            // more lines than one vectored write takes, one of them empty
            for i in 0..(VECTORED_LINES * 2 + 5) {
                let line = if i == 9 { String::new() } else { format!("{{\"i\":{i},\"xid\":") };
                s.push(&line).unwrap();
                want.push_str(&line);
                want.push_str("42}\n");
            }
            let mut out = Trickle { got: Vec::new(), step };
            s.flush_with(&mut out, "42}").unwrap();
            assert_eq!(String::from_utf8(out.got).unwrap(), want, "step {step}");
            assert!(s.is_empty());
        }
    }

    #[test]
    fn reverse_spool_reverses_transactions_and_statements() {
        let mut s = ReverseSpool::default();
        s.begin();
        s.push("a1").unwrap();
        s.push("a2").unwrap();
        s.begin();
        s.push("b1").unwrap();
        let mut out = Vec::new();
        s.write_reversed(&mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "BEGIN;\nb1\nCOMMIT;\nBEGIN;\na2\na1\nCOMMIT;\n");
    }
}
