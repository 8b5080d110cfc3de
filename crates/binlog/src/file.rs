//! Binlog files: the magic, gzip, stdin, and cutting a byte stream into events.
//!
//! [`BinlogReader`] reads one file (or stdin) in constant memory: it keeps one event's bytes
//! at a time (plus the decompressed payload of a compressed transaction) and hands each to
//! its [`EventWalker`], which decodes it; events inside a TRANSACTION_PAYLOAD come out one by
//! one after the payload event itself, marked `in_payload`.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::decoder::EventDecoder;
use crate::error::{Error, Result};
use crate::header::{EventHeader, HEADER_LEN};
use crate::walk::{framing_error, EventWalker, Located, Offset};

/// The 4 bytes every binlog file starts with.
pub const BINLOG_MAGIC: [u8; 4] = [0xfe, b'b', b'i', b'n'];

/// The largest event accepted (MySQL's `max_allowed_packet` ceiling is 1 GiB).
pub const MAX_EVENT_SIZE: u32 = 1 << 30;

/// Reads the events of one binlog file.
pub struct BinlogReader {
    name: String,
    src: Box<dyn BufRead>,
    next_offset: u64,
    buf: Vec<u8>,
    walker: EventWalker,
    failed: bool,
    /// The file is gzip-compressed: a read error is then a damaged or truncated file.
    gzip: bool,
}

impl std::fmt::Debug for BinlogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BinlogReader").field("name", &self.name).field("next_offset", &self.next_offset).finish()
    }
}

impl BinlogReader {
    /// Opens a binlog file (`-` is standard input); gzip-compressed files are recognised by
    /// their magic and decompressed on the fly.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read; [`Error::NotABinlog`] when it lacks the magic.
    pub fn open(path: &Path, decoder: EventDecoder) -> Result<BinlogReader> {
        let name = path.display().to_string();
        if name == "-" {
            return BinlogReader::from_reader(name, std::io::stdin().lock(), decoder);
        }
        let f = File::open(path).map_err(|source| Error::Io { file: name.clone(), source })?;
        BinlogReader::from_reader(name, f, decoder)
    }

    /// Reads a binlog from any byte source (gzip recognised by its magic).
    ///
    /// # Errors
    /// As [`BinlogReader::open`].
    pub fn from_reader(name: String, r: impl Read + 'static, decoder: EventDecoder) -> Result<BinlogReader> {
        let mut br = BufReader::with_capacity(256 * 1024, r);
        let head = br.fill_buf().map_err(|source| Error::Io { file: name.clone(), source })?;
        let gzip = head.starts_with(&[0x1f, 0x8b]);
        let src: Box<dyn BufRead> = if gzip {
            Box::new(BufReader::with_capacity(256 * 1024, flate2::bufread::MultiGzDecoder::new(br)))
        } else {
            Box::new(br)
        };
        let mut rd = BinlogReader {
            walker: EventWalker::new(name.clone(), decoder),
            name,
            src,
            next_offset: 0,
            buf: Vec::with_capacity(64 * 1024),
            failed: false,
            gzip,
        };
        let mut magic = [0u8; 4];
        let n = rd.read_up_to(&mut magic).map_err(|e| rd.read_error(e, 0))?;
        if n < 4 || magic != BINLOG_MAGIC {
            return Err(Error::NotABinlog { file: rd.name, found: magic.get(..n).unwrap_or(&[]).to_vec() });
        }
        rd.next_offset = 4;
        Ok(rd)
    }

    /// The file name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The decoder (its format, table maps and counters).
    pub fn decoder(&self) -> &EventDecoder {
        self.walker.decoder()
    }

    /// Gives the decoder back (to continue with the next file of a sequence).
    pub fn into_decoder(self) -> EventDecoder {
        self.walker.into_decoder()
    }

    /// Offset just past the last event read: where a reader would resume.
    pub fn position(&self) -> u64 {
        self.next_offset
    }

    fn read_up_to(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let mut n = 0;
        while n < out.len() {
            let chunk = out.get_mut(n..).unwrap_or(&mut []);
            match self.src.read(chunk) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    /// A read error while reading the event at `offset`: in a gzip file the compressed stream
    /// is damaged or cut short (a data error at that offset of the decompressed binlog);
    /// otherwise the file itself could not be read.
    fn read_error(&mut self, source: std::io::Error, offset: u64) -> Error {
        self.failed = true;
        if self.gzip {
            let reason = match source.kind() {
                std::io::ErrorKind::UnexpectedEof => "the file ends early (truncated?)".to_string(),
                _ => format!("the compressed data is damaged ({source})"),
            };
            return Error::Gzip { file: self.name.clone(), offset, reason };
        }
        Error::Io { file: self.name.clone(), source }
    }

    /// Appends up to `want` bytes to `self.buf`, copying from the source's buffer (the event
    /// buffer is never zero-filled first: that memset cost 4% of decoding); returns how many.
    fn append_up_to(&mut self, want: usize) -> std::io::Result<usize> {
        let mut got = 0;
        while got < want {
            let avail = match self.src.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                break;
            }
            let n = avail.len().min(want - got);
            self.buf.extend_from_slice(avail.get(..n).unwrap_or(&[]));
            self.src.consume(n);
            got += n;
        }
        Ok(got)
    }

    /// Reads and decodes the next event; `Ok(None)` at a clean end of file. After an error
    /// the reader is finished (the stream position is no longer trustworthy).
    ///
    /// # Errors
    /// I/O errors, a file that ends inside an event, and every decoding error, each naming
    /// the file, the event's offset and its type.
    pub fn next_event(&mut self) -> Result<Option<Located<'_>>> {
        if self.failed {
            return Ok(None);
        }
        // Events still waiting inside a decompressed transaction payload come first.
        if self.walker.has_inner() {
            let r = self.walker.next_inner();
            if r.is_err() {
                self.failed = true;
            }
            return r.map(Some);
        }

        let offset = self.next_offset;
        let mut head = [0u8; HEADER_LEN];
        let n = self.read_up_to(&mut head).map_err(|e| self.read_error(e, offset))?;
        if n == 0 && offset == 4 {
            // a server writes its format description first, at once: a file that ends after the
            // magic is a copy cut short, not an empty binlog
            self.failed = true;
            let why = "the file ends right after its 4-byte magic number, without the format description event a \
                       server writes first (a copy cut short?)";
            return Err(framing_error(&self.name, offset, None, why.to_string()));
        }
        if n == 0 {
            return Ok(None);
        }
        if n < HEADER_LEN {
            self.failed = true;
            let why = format!("the file ends {n} bytes into an event header (truncated file)");
            return Err(framing_error(&self.name, offset, head.get(4).copied(), why));
        }
        let header = EventHeader::parse(&head)?;
        let size = header.event_size;
        if (size as usize) < HEADER_LEN || size > MAX_EVENT_SIZE {
            self.failed = true;
            let why = format!("event size {size} is impossible (corrupt file?)");
            return Err(Error::invalid("event header", why).at(&self.name, offset, header.event_type));
        }
        self.buf.clear();
        self.buf.extend_from_slice(&head);
        let want = size as usize - HEADER_LEN;
        // The size field is untrusted until the bytes are there: the buffer grows with what
        // the file actually holds, so a corrupt size in a short file costs nothing.
        let got = self.append_up_to(want).map_err(|e| self.read_error(e, offset))?;
        if got < want {
            self.failed = true;
            let why = format!("the file ends after {got} of the event's {want} body bytes (truncated file)");
            return Err(Error::invalid("event", why).at(&self.name, offset, header.event_type));
        }
        self.next_offset = offset + u64::from(size);
        let Self { buf, walker, failed, .. } = self;
        let r = walker.walk(buf, Offset::At(offset));
        if r.is_err() {
            *failed = true;
        }
        r.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file that ends after its magic is cut short (issue 20: it was dumped as an empty
    /// binlog, exit 0, without a word).
    #[test]
    fn a_file_of_only_the_magic_is_an_error() {
        let mut rd = BinlogReader::from_reader(
            "m.bin".into(),
            std::io::Cursor::new(BINLOG_MAGIC.to_vec()),
            EventDecoder::default(),
        )
        .unwrap();
        let e = rd.next_event().unwrap_err().to_string();
        assert!(e.contains("m.bin at offset 4") && e.contains("ends right after its 4-byte magic"), "{e}");
        assert!(rd.next_event().unwrap().is_none(), "finished after the error");
    }

    /// Found by the mutation test: an event header claiming 1 GiB in a 36-byte file made
    /// the reader allocate (and zero) the whole claimed size before finding the end of file.
    #[test]
    fn a_corrupt_event_size_does_not_allocate_it() {
        let mut file = BINLOG_MAGIC.to_vec();
        file.extend_from_slice(&[0, 0, 0, 0, 2, 1, 0, 0, 0]); // timestamp, QUERY, server id
        file.extend_from_slice(&(1u32 << 30).to_le_bytes()); // event size: 1 GiB
        file.extend_from_slice(&[0; 6]); // log position, flags
        file.extend_from_slice(&[7; 13]); // 13 body bytes
        let mut rd =
            BinlogReader::from_reader("t.bin".into(), std::io::Cursor::new(file), EventDecoder::default()).unwrap();
        let e = rd.next_event().unwrap_err().to_string();
        assert!(e.contains("t.bin at offset 4") && e.contains("after 13 of the event's"), "{e}");
        assert!(rd.buf.capacity() < 1 << 20, "buffer grew to {} bytes", rd.buf.capacity());
    }
}
