//! **Which bytes of the replication stream belong in which file**: the sans-IO core of
//! `sluice archive`.
//!
//! A dump sends the server's events as they are in its files (header, body and checksum, once
//! the replica has negotiated checksums), plus events that are in no file: heartbeats, and
//! *artificial* events (flag `LOG_EVENT_ARTIFICIAL_F`): the fake ROTATE that names the file a
//! dump starts in (or moves to, after a file that ended without a ROTATE), and, when a dump
//! starts in the middle of a file, that file's FORMAT_DESCRIPTION again (with log position 0,
//! or at a place the copy already holds). An event belongs to the current file at
//! `log_pos - event_size`; it is appended only there, so a copy can never get a gap or a
//! repeated event: a stream that skips is an error, a stream that repeats is skipped.
//!
//! The server sets the FORMAT_DESCRIPTION's `LOG_EVENT_BINLOG_IN_USE_F` in a file it writes and
//! clears it in place when it closes the file; a dump always sends the flag clear. So the copy
//! sets it when a file begins ([`Op::MarkInUse`]) and clears it where the file ends with a
//! ROTATE (the next file is named in it) or a STOP (the server shut down): [`Op::Finish`]
//! `clean`. A file that just stops (the server crashed) keeps the flag, in the server's file as
//! in the copy. (The flag is outside the FDE's checksum.)

use serde::{Deserialize, Serialize};
use sluice_binlog::decoder::check_crc32;
use sluice_binlog::event::{ChecksumAlg, Event, FormatDescription};
use sluice_binlog::header::{HEADER_LEN, LOG_EVENT_ARTIFICIAL_F as ARTIFICIAL};
use sluice_binlog::transaction::GtidState;
use sluice_binlog::{EventDecoder, EventHeader, EventType};

/// The four bytes every binlog file starts with.
pub const MAGIC: [u8; 4] = [0xfe, b'b', b'i', b'n'];

/// Where the FORMAT_DESCRIPTION's flags are in a file: after the magic, at the header's
/// offset 17.
pub const FDE_FLAGS_OFFSET: u64 = 4 + 17;

/// What an archive holds of one file: the index's entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSummary {
    /// The server's file name.
    pub file: String,
    /// Its size in the archive.
    pub size: u64,
    /// The server closed it (a ROTATE or STOP ends it): it will not grow.
    pub complete: bool,
    /// The earliest event time in it (seconds since the epoch; an event's time is when its
    /// statement began, so times are not quite in file order).
    pub first_time: Option<u32>,
    /// The latest event time in it.
    pub last_time: Option<u32>,
    /// The GTID state the file starts at (its GTID_LIST or PREVIOUS_GTIDS event).
    pub first_gtid: Option<String>,
    /// The GTID state after its last transaction.
    pub last_gtid: Option<String>,
    /// The archive's file holding it when not the server's name (`<name>.gz`: compressed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<String>,
    /// Uploaded to the archive's object store (the spool's copy may be gone).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remote: bool,
}

/// Follows a file's events for its [`FileSummary`] (decoding only the format and GTID events).
#[derive(Debug)]
pub struct Summarizer {
    summary: FileSummary,
    decoder: EventDecoder,
    state: Option<GtidState>,
}

impl Summarizer {
    /// The summary of `file`, empty.
    pub fn new(file: &str) -> Summarizer {
        Summarizer {
            summary: FileSummary { file: file.to_string(), size: MAGIC.len() as u64, ..FileSummary::default() },
            decoder: EventDecoder::new(sluice_binlog::decoder::DecoderOptions::default()),
            state: None,
        }
    }

    /// Takes the next whole event of the file (checked already).
    ///
    /// # Errors
    /// A format or GTID event that does not decode.
    pub fn observe(&mut self, raw: &[u8], h: &EventHeader) -> Result<(), sluice_binlog::Error> {
        let s = &mut self.summary;
        s.size += raw.len() as u64;
        if h.timestamp != 0 {
            s.first_time = Some(s.first_time.map_or(h.timestamp, |t| t.min(h.timestamp)));
            s.last_time = Some(s.last_time.map_or(h.timestamp, |t| t.max(h.timestamp)));
        }
        let wanted = matches!(
            h.event_type,
            EventType::FormatDescription
                | EventType::Gtid
                | EventType::MariadbGtid
                | EventType::MariadbGtidList
                | EventType::PreviousGtids
        );
        if !wanted {
            return Ok(());
        }
        match self.decoder.decode(raw)?.event {
            Event::PreviousGtids(set) => {
                s.first_gtid.get_or_insert_with(|| set.to_string());
                self.state = Some(GtidState::Mysql(set));
            }
            Event::MariadbGtidList(list) => {
                s.first_gtid.get_or_insert_with(|| list.to_string());
                self.state = Some(GtidState::Mariadb(list));
            }
            Event::Gtid(g) if !g.anonymous => {
                if let GtidState::Mysql(set) = self.state.get_or_insert_with(|| GtidState::Mysql(Default::default())) {
                    set.add(&g.gtid);
                }
            }
            Event::MariadbGtid(g) => {
                if let GtidState::Mariadb(list) =
                    self.state.get_or_insert_with(|| GtidState::Mariadb(Default::default()))
                {
                    list.advance(g.gtid);
                }
            }
            _ => {}
        }
        s.last_gtid = self.state.as_ref().map(ToString::to_string).filter(|g| !g.is_empty());
        Ok(())
    }

    /// The summary so far.
    pub fn summary(&self) -> &FileSummary {
        &self.summary
    }
}

/// What to do with the archive for an event of the stream, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum Op {
    /// Start file `0`: its magic, nothing else yet.
    Begin(String),
    /// Append the event to the current file.
    Append,
    /// Set the FORMAT_DESCRIPTION's `LOG_EVENT_BINLOG_IN_USE_F` in the current file, as the
    /// server's file has it while the server writes it (a dump sends the FDE with the flag
    /// clear; the flag is outside its checksum).
    MarkInUse,
    /// The current file is done: the server closed it (`clean`, its FDE flag then cleared), or
    /// the stream moved on without a ROTATE or STOP (a crashed server's file keeps the flag).
    Finish {
        /// Its summary, `complete` set.
        summary: FileSummary,
        /// Closed by the server.
        clean: bool,
    },
}

/// Why the stream cannot be copied.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// An event that does not parse or check.
    #[error("{file} at {offset}: {what}")]
    Event {
        /// The file it belongs to.
        file: String,
        /// Its offset.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// The server's file of this name is not the archived one.
    #[error(
        "{file}: the server's file of this name is not the one the archive holds {have} bytes of (its first event \
         was written at {theirs} by server {their_server}, the archive's at {ours} by server {our_server}): the \
         server's binlog was reset (RESET MASTER) or another server answers at this address. Copying on would join \
         two servers' files into one: give the archive a new `archive.to`, or move this one's files aside"
    )]
    NotTheArchived {
        /// The file.
        file: String,
        /// What the archive holds of it.
        have: u64,
        /// The timestamp and server id of the server's FDE, and of the archive's.
        theirs: u32,
        their_server: u32,
        ours: u32,
        our_server: u32,
    },
    /// The stream skipped bytes of a file.
    #[error(
        "{file}: the stream went on at offset {got}, but the archive holds {have} bytes of it (a gap): the copy \
         would not be the server's file"
    )]
    Gap {
        /// The file.
        file: String,
        /// What the archive holds.
        have: u64,
        /// Where the stream's event starts.
        got: u64,
    },
}

/// Where a copy continues: the archive's newest file, as the archive holds it.
#[derive(Debug)]
pub struct Resume {
    /// Its name.
    pub file: String,
    /// Its size (whole events only).
    pub size: u64,
    /// Its events carry CRC32 checksums (its FDE says so).
    pub crc: bool,
    /// It ends with a ROTATE or STOP.
    pub finished: bool,
    /// The file its ROTATE names (the copy continues there).
    pub next: Option<String>,
    /// What the index says of it, recomputed from its events.
    pub summarizer: Summarizer,
    /// Its FDE's timestamp and server id (None before the FDE is archived).
    pub fde_stamp: Option<[u32; 2]>,
}

impl Resume {
    /// A copy about to begin file `name`: its magic written, nothing else yet.
    pub fn starting(name: &str) -> Resume {
        Resume {
            file: name.to_string(),
            size: MAGIC.len() as u64,
            crc: false,
            finished: false,
            next: None,
            summarizer: Summarizer::new(name),
            fde_stamp: None,
        }
    }
}

/// The copy's place in the stream.
#[derive(Debug)]
pub struct Copier {
    file: Option<String>,
    size: u64,
    crc: bool,
    /// Whether the last FDE this dump sent said CRC32 (None before the first): the server
    /// writes an artificial ROTATE with the checksum of the file it last read, so after a
    /// file written with `binlog_checksum=NONE` the ROTATE to the next has none, whatever
    /// the server's setting now (read with the setting's, it lost the name's last four
    /// characters: a hostile trial's archive held `mysql-bin.00`).
    stream_crc: Option<bool>,
    /// The current file's FDE's timestamp and server id, once archived: a dump that goes on in
    /// the file sends its FDE again, which must be the same one. Found by a hostile trial:
    /// after RESET MASTER, a new file of the same name whose events happened to have a
    /// boundary at the archive's size was appended to the old file's bytes, exit 0.
    fde_stamp: Option<[u32; 2]>,
    finished: bool,
    summarizer: Summarizer,
}

impl Copier {
    /// A copy that has no file yet (the stream's first fake ROTATE names it), or continues
    /// `resume`.
    pub fn new(resume: Option<Resume>) -> Copier {
        match resume {
            Some(r) => Copier {
                file: Some(r.file),
                size: r.size,
                crc: r.crc,
                stream_crc: None,
                fde_stamp: r.fde_stamp,
                finished: r.finished,
                summarizer: r.summarizer,
            },
            None => Copier {
                file: None,
                size: 0,
                crc: false,
                stream_crc: None,
                fde_stamp: None,
                finished: false,
                summarizer: Summarizer::new(""),
            },
        }
    }

    /// A new dump begins: its first artificial ROTATE carries the checksum the server's
    /// setting says, until an FDE says otherwise.
    pub fn new_dump(&mut self) {
        self.stream_crc = None;
    }

    /// The file being copied and its size (where a new dump continues).
    pub fn position(&self) -> Option<(&str, u64)> {
        self.file.as_deref().map(|f| (f, self.size))
    }

    /// The current file's summary.
    pub fn summary(&self) -> &FileSummary {
        self.summarizer.summary()
    }

    /// What to do with `raw`, a whole event of the stream; `fake_crc`: the dump's artificial
    /// events carry a checksum until its first FDE (the server's `binlog_checksum` is CRC32).
    ///
    /// # Errors
    /// An event that does not parse, a checksum that does not match, a gap.
    pub fn feed(&mut self, raw: &[u8], fake_crc: bool) -> Result<Vec<Op>, CopyError> {
        let here = self.file.clone().unwrap_or_default();
        let bad = |what: String| CopyError::Event { file: here.clone(), offset: self.size, what };
        let h = EventHeader::parse(raw).map_err(|e| bad(e.to_string()))?;
        if h.event_size as usize != raw.len() {
            return Err(bad(format!("event size {} but {} bytes came", h.event_size, raw.len())));
        }
        if matches!(h.event_type, EventType::Heartbeat | EventType::HeartbeatV2) {
            return Ok(Vec::new());
        }
        if h.event_type == EventType::FormatDescription {
            // every FDE the dump sends, the ones it sends again too (they are skipped below)
            if let Ok(fde) = FormatDescription::parse(raw.get(HEADER_LEN..).unwrap_or_default()) {
                self.stream_crc = Some(fde.checksum == ChecksumAlg::Crc32);
            }
        }
        if h.flags & ARTIFICIAL != 0 {
            if h.event_type == EventType::Rotate {
                let name = rotate_target(raw, self.stream_crc.unwrap_or(fake_crc)).map_err(bad)?;
                return Ok(self.switch_to(name, false));
            }
            return Ok(Vec::new());
        }
        if h.log_pos == 0 {
            // MariaDB sends a dump's FDE again with log position 0
            if let Some(file) = &self.file {
                self.same_file(&h, file)?;
            }
            return Ok(Vec::new());
        }
        let Some(file) = self.file.clone() else {
            return Err(bad(format!("a {} before the stream named its file", h.event_type.name())));
        };
        let start = u64::from(h.log_pos)
            .checked_sub(u64::from(h.event_size))
            .ok_or_else(|| bad(format!("log position {} before its own size {}", h.log_pos, h.event_size)))?;
        if start < self.size {
            // sent again: the FDE after a dump that starts mid-file, or after a reconnect
            self.same_file(&h, &file)?;
            return Ok(Vec::new());
        }
        if start > self.size || self.finished {
            return Err(CopyError::Gap { file, have: self.size, got: start });
        }
        if h.event_type == EventType::FormatDescription {
            let fde = FormatDescription::parse(raw.get(HEADER_LEN..).unwrap_or_default())
                .map_err(|e| CopyError::Event { file: file.clone(), offset: start, what: e.to_string() })?;
            self.crc = fde.checksum == ChecksumAlg::Crc32;
        }
        let at = |what: String| CopyError::Event { file: file.clone(), offset: start, what };
        if self.crc {
            check_crc32(raw).map_err(|e| at(e.to_string()))?;
        }
        self.summarizer.observe(raw, &h).map_err(|e| at(e.to_string()))?;
        self.size += raw.len() as u64;
        let mut ops = vec![Op::Append];
        if h.event_type == EventType::FormatDescription && start == MAGIC.len() as u64 {
            ops.push(Op::MarkInUse);
            self.fde_stamp = Some([h.timestamp, h.server_id]);
        }
        match h.event_type {
            EventType::Rotate => {
                let next = rotate_target(raw, self.crc).map_err(at)?;
                ops.extend(self.finish(true));
                ops.extend(self.switch_to(next, true));
            }
            EventType::Stop => ops.extend(self.finish(true)),
            _ => {}
        }
        Ok(ops)
    }

    /// Checks an FDE the dump sent again against the archived file's (nothing for other events).
    fn same_file(&self, h: &EventHeader, file: &str) -> Result<(), CopyError> {
        match self.fde_stamp {
            Some([ours, our_server])
                if h.event_type == EventType::FormatDescription && [h.timestamp, h.server_id] != [ours, our_server] =>
            {
                Err(CopyError::NotTheArchived {
                    file: file.to_string(),
                    have: self.size,
                    theirs: h.timestamp,
                    their_server: h.server_id,
                    ours,
                    our_server,
                })
            }
            _ => Ok(()),
        }
    }

    /// The current file is done.
    fn finish(&mut self, clean: bool) -> Option<Op> {
        if self.finished || self.file.is_none() {
            return None;
        }
        self.finished = true;
        self.summarizer.summary.complete = true;
        Some(Op::Finish { summary: self.summarizer.summary().clone(), clean })
    }

    /// The stream goes on in `name` (`after_rotate`: the current file was just finished).
    fn switch_to(&mut self, name: String, after_rotate: bool) -> Vec<Op> {
        if self.file.as_deref() == Some(name.as_str()) && !after_rotate {
            return Vec::new();
        }
        let mut ops: Vec<Op> = self.finish(false).into_iter().collect();
        ops.push(Op::Begin(name.clone()));
        self.summarizer = Summarizer::new(&name);
        self.file = Some(name);
        self.size = MAGIC.len() as u64;
        self.crc = false;
        self.fde_stamp = None;
        self.finished = false;
        ops
    }
}

/// The file a ROTATE names (its body: the position, 8 bytes, then the name; then the
/// checksum when `crc`).
fn rotate_target(raw: &[u8], crc: bool) -> Result<String, String> {
    let end = raw.len().saturating_sub(if crc { 4 } else { 0 });
    let name = raw.get(HEADER_LEN + 8..end).ok_or("a ROTATE too short to name a file")?;
    let name = std::str::from_utf8(name).map_err(|_| "a ROTATE whose file name is not UTF-8".to_string())?;
    if name.is_empty() || name.contains(['/', '\\', '\0']) || name == "." || name == ".." {
        return Err(format!("a ROTATE to {name:?}, which is no file name"));
    }
    Ok(name.to_string())
}

/// Walks an archived file's bytes (the magic first): how many are whole, checked events, and
/// where a copy continues. A torn tail (an event cut off, or one whose checksum fails: a write
/// the crash interrupted) ends the walk; what follows is not kept.
///
/// # Errors
/// A file that is not a binlog (another magic).
pub fn walk_file(name: &str, mut read: impl std::io::Read) -> Result<Resume, String> {
    let mut magic = [0u8; 4];
    let got = read_full(&mut read, &mut magic).map_err(|e| e.to_string())?;
    if magic[..got] != MAGIC[..got] {
        return Err(format!("{name} is not a binlog file (it does not start with the binlog magic)"));
    }
    let mut copier = Copier::new(None);
    copier.switch_to(name.to_string(), false);
    if got < 4 {
        // cut before its magic was whole: it starts over
        return Ok(copier.into_resume(name));
    }
    let mut buf = Vec::new();
    loop {
        let mut header = [0u8; HEADER_LEN];
        if read_full(&mut read, &mut header).map_err(|e| e.to_string())? < HEADER_LEN {
            break;
        }
        let Ok(h) = EventHeader::parse(&header) else { break };
        let size = h.event_size as usize;
        if size < HEADER_LEN {
            break;
        }
        buf.clear();
        buf.extend_from_slice(&header);
        buf.resize(size, 0);
        if read_full(&mut read, &mut buf[HEADER_LEN..]).map_err(|e| e.to_string())? < size - HEADER_LEN {
            break;
        }
        // an event the copy would not have written is where the file's good part ends
        let ops = match copier.feed(&buf, false) {
            Ok(ops) if ops.first() == Some(&Op::Append) => ops,
            _ => break,
        };
        // a ROTATE or STOP ends the file (a ROTATE names the next)
        let finished = ops.iter().find_map(|o| match o {
            Op::Finish { summary, .. } => Some(summary.clone()),
            _ => None,
        });
        if let Some(summary) = finished {
            let next = ops.iter().find_map(|o| match o {
                Op::Begin(n) => Some(n.clone()),
                _ => None,
            });
            return Ok(Resume {
                file: name.to_string(),
                size: summary.size,
                crc: copier.crc,
                finished: true,
                next,
                summarizer: Summarizer { summary, ..Summarizer::new(name) },
                fde_stamp: copier.fde_stamp,
            });
        }
    }
    Ok(copier.into_resume(name))
}

impl Copier {
    fn into_resume(self, name: &str) -> Resume {
        Resume {
            file: name.to_string(),
            size: self.size,
            crc: self.crc,
            finished: self.finished,
            next: None,
            summarizer: self.summarizer,
            fde_stamp: self.fde_stamp,
        }
    }
}

/// Reads until `buf` is full or the input ends; how many bytes came.
fn read_full(read: &mut impl std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match read.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A closed MariaDB binlog file (recorded by `integration/record_pipeline_binlog.sh`): it
    /// ends with a ROTATE to `mysql-bin.000002`, and has CRC32 checksums.
    fn recorded() -> Vec<u8> {
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/pipeline/mysql-bin.000001")).unwrap()
    }

    fn events(file: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut pos = 4;
        while pos < file.len() {
            let size = u32::from_le_bytes(file[pos + 9..pos + 13].try_into().unwrap()) as usize;
            out.push(file[pos..pos + size].to_vec());
            pos += size;
        }
        out
    }

    /// An event of `code` with `body`, a CRC32, at `log_pos`, with `flags`.
    fn event(code: u8, body: &[u8], log_pos: u32, flags: u16) -> Vec<u8> {
        let size = (HEADER_LEN + body.len() + 4) as u32;
        let mut e = Vec::new();
        e.extend_from_slice(&0u32.to_le_bytes());
        e.push(code);
        e.extend_from_slice(&1u32.to_le_bytes());
        e.extend_from_slice(&size.to_le_bytes());
        e.extend_from_slice(&log_pos.to_le_bytes());
        e.extend_from_slice(&flags.to_le_bytes());
        e.extend_from_slice(body);
        let crc = crc32fast::hash(&e);
        e.extend_from_slice(&crc.to_le_bytes());
        e
    }

    fn fake_rotate(name: &str) -> Vec<u8> {
        let mut body = 4u64.to_le_bytes().to_vec();
        body.extend_from_slice(name.as_bytes());
        event(EventType::Rotate.code(), &body, 0, ARTIFICIAL)
    }

    /// The files ops make, as [`super::super::dir`] would write them.
    #[derive(Default)]
    struct Files {
        files: Vec<(String, Vec<u8>)>,
    }

    impl Files {
        fn apply(&mut self, raw: &[u8], ops: &[Op]) {
            for op in ops {
                match op {
                    Op::Begin(n) => self.files.push((n.clone(), MAGIC.to_vec())),
                    Op::Append => self.files.last_mut().unwrap().1.extend_from_slice(raw),
                    Op::MarkInUse => self.files.last_mut().unwrap().1[FDE_FLAGS_OFFSET as usize] |= 1,
                    Op::Finish { summary, clean } => {
                        let f = self.files.iter_mut().find(|(n, _)| *n == summary.file).unwrap();
                        assert_eq!(summary.size, f.1.len() as u64);
                        if *clean {
                            f.1[FDE_FLAGS_OFFSET as usize] &= !1;
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_stream_becomes_the_servers_file() {
        let file = recorded();
        let mut copier = Copier::new(None);
        let mut files = Files::default();
        let heartbeat = event(EventType::Heartbeat.code(), b"mysql-bin.000001", 300, 0);
        let mut stream = vec![fake_rotate("mysql-bin.000001")];
        for (i, e) in events(&file).into_iter().enumerate() {
            stream.push(e);
            if i == 3 {
                stream.push(heartbeat.clone());
            }
        }
        for raw in &stream {
            let ops = copier.feed(raw, true).unwrap();
            files.apply(raw, &ops);
        }
        assert_eq!(files.files.len(), 2, "the ROTATE begins the next file");
        assert_eq!(files.files[0].0, "mysql-bin.000001");
        assert!(files.files[0].1 == file, "the copy is the file, byte for byte");
        assert_eq!(files.files[1], ("mysql-bin.000002".to_string(), MAGIC.to_vec()));
        assert_eq!(copier.position(), Some(("mysql-bin.000002", 4)));
    }

    #[test]
    fn a_torn_copy_continues_where_its_last_whole_event_ends() {
        let file = recorded();
        let all = events(&file);
        // cut in the middle of the tenth event
        let whole: usize = 4 + all[..9].iter().map(Vec::len).sum::<usize>();
        let cut = &file[..whole + 7];
        let resume = walk_file("mysql-bin.000001", cut).unwrap();
        assert_eq!((resume.size, resume.finished), (whole as u64, false));
        let mut files = Files { files: vec![("mysql-bin.000001".into(), file[..whole].to_vec())] };
        let mut copier = Copier::new(Some(resume));
        // the dump from there: its fake ROTATE, the FDE again (log position 0), then the rest
        let mut fde_again = all[0].clone();
        fde_again[13..17].copy_from_slice(&0u32.to_le_bytes());
        let mut stream = vec![fake_rotate("mysql-bin.000001"), fde_again, all[0].clone()];
        stream.extend(all[9..].iter().cloned());
        for raw in &stream {
            let ops = copier.feed(raw, true).unwrap();
            files.apply(raw, &ops);
        }
        assert!(files.files[0].1 == file);
        // the whole file walks to its end, finished by its ROTATE
        let r = walk_file("mysql-bin.000001", &file[..]).unwrap();
        assert_eq!((r.size, r.finished, r.next.as_deref()), (file.len() as u64, true, Some("mysql-bin.000002")));
        assert!(r.summarizer.summary().last_gtid.is_some());
    }

    #[test]
    fn a_gap_or_a_bad_checksum_stops_the_copy() {
        let file = recorded();
        let all = events(&file);
        let mut copier = Copier::new(None);
        for raw in [fake_rotate("mysql-bin.000001"), all[0].clone(), all[1].clone()] {
            copier.feed(&raw, true).unwrap();
        }
        // the third event skipped
        let e = copier.feed(&all[3], true).unwrap_err();
        assert!(matches!(e, CopyError::Gap { .. }), "{e}");
        let mut bad = all[2].clone();
        let n = bad.len();
        bad[n - 6] ^= 0xff;
        let e = copier.feed(&bad, true).unwrap_err();
        assert!(e.to_string().contains("mysql-bin.000001 at"), "{e}");
        // an event before any file was named
        let e = Copier::new(None).feed(&all[1], true).unwrap_err();
        assert!(e.to_string().contains("before the stream named its file"), "{e}");
        // not a binlog
        assert!(walk_file("x", &b"hello world"[..]).is_err());
    }
}
