//! **Reading an archive back as a replication stream**: [`ArchiveFeed`] hands out the raw
//! events of the archived files from a position on, file after file in the server's order, as
//! the server's dump would have sent them (the caller decodes them); [`coverage`] says whether
//! an archive bridges a position the server purged to the binlog the server still has.
//! `sluice run` catches up from here when the server has purged its checkpoint's binlog (see
//! `crate::source`), and `sluice check` asks [`coverage`].
//!
//! Files are read with blocking reads: they come from a local disk or the page cache in
//! buffered blocks, a few microseconds each, and the reader has nothing else to do meanwhile.

use std::io::Read;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use sluice_binlog::event_type::EventType;
use sluice_binlog::header::{EventHeader, HEADER_LEN};

use super::copy::{FileSummary, MAGIC};
use super::dir::{file_names, open_file, order_key, read_index};
use super::store::{is_url, Remote};

/// An archive to read: a directory, or an object store (only its completed files: the one
/// being written is in the archiver's spool).
#[derive(Debug, Clone)]
pub enum Archive {
    /// A directory (`sluice archive`'s `archive.to`, or a copy of it).
    Dir(PathBuf),
    /// An object store.
    Remote(Remote),
}

impl std::fmt::Display for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Archive::Dir(d) => write!(f, "{}", d.display()),
            Archive::Remote(r) => write!(f, "{r}"),
        }
    }
}

impl Archive {
    /// The archive at `text`: an object store URL (credentials from the environment and
    /// `credentials_file`), else a directory.
    ///
    /// # Errors
    /// A URL of no supported store, an unreadable credentials file.
    pub fn open(text: &str, credentials_file: Option<&Path>) -> Result<Archive, String> {
        if is_url(text) {
            Remote::open(text, credentials_file).map(Archive::Remote)
        } else {
            Ok(Archive::Dir(PathBuf::from(text)))
        }
    }

    /// The server's names of the files it holds, in the server's order.
    ///
    /// # Errors
    /// The directory or the store cannot be listed.
    pub async fn names(&self) -> Result<Vec<String>, String> {
        match self {
            Archive::Dir(d) => file_names(d),
            Archive::Remote(r) => Ok(r.files().await?.into_iter().map(|(n, _)| n).collect()),
        }
    }

    /// Its index.
    ///
    /// # Errors
    /// The index cannot be read.
    pub async fn index(&self) -> Result<Vec<FileSummary>, String> {
        match self {
            Archive::Dir(d) => read_index(d),
            Archive::Remote(r) => r.index().await,
        }
    }

    /// A reader of the server's bytes of file `name` (decompressed when stored gzipped; from an
    /// object store, downloaded to a temporary file first); None when the archive lacks it.
    ///
    /// # Errors
    /// The file exists but cannot be read.
    async fn open_file(&self, name: &str) -> Result<Option<Box<dyn Read + Send>>, String> {
        match self {
            Archive::Dir(d) => open_file(d, name).map_err(|e| format!("opening {name} in {}: {e}", d.display())),
            Archive::Remote(r) => {
                for (object, gz) in [(name.to_string(), false), (format!("{name}.gz"), true)] {
                    if let Some(f) = r.download(&object).await? {
                        let f = std::io::BufReader::new(f);
                        return Ok(Some(if gz {
                            Box::new(flate2::bufread::MultiGzDecoder::new(f))
                        } else {
                            Box::new(f)
                        }));
                    }
                }
                Ok(None)
            }
        }
    }
}

/// The largest event the reader takes (MySQL's largest `max_allowed_packet`); a larger size
/// in a header is a damaged file.
const MAX_EVENT: u32 = 1 << 30;

/// How the file being read ended (after [`ArchiveFeed::next_raw`] returned None).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileEnd {
    /// A ROTATE names the next file.
    Rotated,
    /// The server stopped (STOP): its next file has the next number.
    Stopped,
    /// Neither: the archive's newest file, still being copied (or an archive that stopped).
    Open,
}

/// The archived files' events, one at a time (see the module docs).
pub struct ArchiveFeed {
    root: Archive,
    name: String,
    input: Box<dyn Read + Send>,
    /// Offset of the next event in `name`.
    at: u64,
    last_type: Option<EventType>,
    /// The file's size when the index says it is complete: it must end there.
    complete_at: Option<u64>,
    /// The archive's index as last read (read again for a file it does not list complete:
    /// one completed since), so that a catch-up through many files reads it once.
    index: std::sync::Arc<Vec<FileSummary>>,
}

impl std::fmt::Debug for ArchiveFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveFeed")
            .field("root", &self.root.to_string())
            .field("file", &self.name)
            .field("at", &self.at)
            .finish()
    }
}

/// One raw event read whole, or where the file ends.
enum Read1 {
    Event(Bytes),
    /// End of the file: at an event boundary, or inside a torn last event (being written).
    End,
}

impl ArchiveFeed {
    /// Opens file `name` of the archive in `root` at `position` (an event boundary, as a
    /// checkpoint is): the feed, and the file's FORMAT_DESCRIPTION event (the decoder needs it
    /// before any event from the middle of the file).
    ///
    /// # Errors
    /// The archive does not hold the file, it is not a binlog, or `position` is not where an
    /// event starts in it.
    pub async fn open(root: &Archive, name: &str, position: u64) -> Result<(ArchiveFeed, Bytes), String> {
        let mut feed = ArchiveFeed::at_start(root, name, std::sync::Arc::default())
            .await?
            .ok_or_else(|| format!("the archive in {root} does not hold {name}"))?;
        let fde = match feed.read_event()? {
            Read1::Event(e) if EventHeader::parse(&e).is_ok_and(|h| h.event_type == EventType::FormatDescription) => e,
            _ => return Err(format!("{}: the archived {name} does not begin with a FORMAT_DESCRIPTION event", root)),
        };
        // 4 is where the events start: the FDE, given apart
        let position = if position == 4 { feed.at } else { position };
        // skip to the position event by event, so that it is known to be a boundary (the last
        // event start before it: the FDE's at 4, until another)
        let mut before = 4;
        while feed.at < position {
            before = feed.at;
            match feed.read_event()? {
                Read1::Event(_) => {}
                Read1::End => {
                    return Err(format!(
                        "{root}: the archived {name} ends at {}, before the position {position} to resume at (is \
                         the archive behind, or of another server?)",
                        feed.at
                    ))
                }
            }
        }
        if feed.at != position {
            return Err(format!(
                "{root}: {position} is not where an event starts in the archived {name}: events start at {} and {} \
                 (`sluice dump --events` of the file lists them; if the position is right, the archive is not a copy \
                 of this server's file)",
                before, feed.at
            ));
        }
        Ok((feed, fde))
    }

    /// `name` of the archive in `root`, after its magic; None when the archive lacks it.
    async fn at_start(
        root: &Archive,
        name: &str,
        mut index: std::sync::Arc<Vec<FileSummary>>,
    ) -> Result<Option<ArchiveFeed>, String> {
        let Some(mut input) = root.open_file(name).await? else {
            return Ok(None);
        };
        let mut magic = [0u8; 4];
        input.read_exact(&mut magic).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => format!(
                "{root}: the archived {name} is shorter than a binlog's 4-byte magic number (cut, or emptied, after it \
                 was archived?): restore it from a copy of the archive"
            ),
            _ => format!("reading {name} in {root}: {e}"),
        })?;
        if magic != MAGIC {
            return Err(format!("{name} in {root} is not a binlog file (no magic number)"));
        }
        let complete = |index: &[FileSummary]| index.iter().find(|s| s.file == name && s.complete).map(|s| s.size);
        if complete(&index).is_none() {
            // an index that cannot be read says nothing of the file: its events still can be
            if let Ok(i) = root.index().await {
                index = std::sync::Arc::new(i);
            }
        }
        Ok(Some(ArchiveFeed {
            root: root.clone(),
            name: name.to_string(),
            input,
            at: 4,
            last_type: None,
            complete_at: complete(&index),
            index,
        }))
    }

    /// The file being read.
    pub fn file(&self) -> &str {
        &self.name
    }

    /// The type of the last event read: after [`ArchiveFeed::open`], the event just before the
    /// position asked for.
    pub fn last_type(&self) -> Option<EventType> {
        self.last_type
    }

    /// The offset of the next event in [`ArchiveFeed::file`].
    pub fn offset(&self) -> u64 {
        self.at
    }

    /// The next event of the current file with its offset, or None at its end (see
    /// [`ArchiveFeed::file_end`] for how it ended).
    ///
    /// # Errors
    /// Reading fails, or a header is impossible (a damaged file).
    pub fn next_raw(&mut self) -> Result<Option<(u64, Bytes)>, String> {
        let at = self.at;
        Ok(match self.read_event()? {
            Read1::Event(e) => Some((at, e)),
            Read1::End => None,
        })
    }

    /// How the file just read to its end ended.
    pub fn file_end(&self) -> FileEnd {
        match self.last_type {
            Some(EventType::Rotate) => FileEnd::Rotated,
            Some(EventType::Stop) => FileEnd::Stopped,
            _ => FileEnd::Open,
        }
    }

    /// Moves on to file `name` (the next one), after its magic. False when the archive does
    /// not hold it (yet): the archive ends here.
    ///
    /// # Errors
    /// The file exists but cannot be read, or is not a binlog.
    pub async fn open_next(&mut self, name: &str) -> Result<bool, String> {
        match ArchiveFeed::at_start(&self.root, name, std::sync::Arc::clone(&self.index)).await? {
            Some(f) => {
                *self = f;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn read_event(&mut self) -> Result<Read1, String> {
        let what = |e: std::io::Error| format!("reading {} in {} at {}: {e}", self.name, self.root, self.at);
        let mut header = [0u8; HEADER_LEN];
        if !read_full(&mut self.input, &mut header).map_err(what)? {
            return self.end();
        }
        let h = EventHeader::parse(&header).map_err(|e| format!("{} at {}: {e}", self.name, self.at))?;
        if h.event_size < HEADER_LEN as u32 || h.event_size > MAX_EVENT {
            return Err(format!(
                "{} in {} at {}: an event header gives a size of {} bytes: the file is damaged",
                self.name, self.root, self.at, h.event_size
            ));
        }
        let mut event = vec![0u8; h.event_size as usize];
        event[..HEADER_LEN].copy_from_slice(&header);
        if !read_full(&mut self.input, &mut event[HEADER_LEN..]).map_err(what)? {
            return self.end();
        }
        self.at += u64::from(h.event_size);
        self.last_type = Some(h.event_type);
        Ok(Read1::Event(Bytes::from(event)))
    }

    /// The file's end at `self.at`: where a file being written may end, but a complete one
    /// only at the size its index gives (a file cut after it was archived would otherwise end
    /// the archive there, and the events after the cut be taken for never written).
    fn end(&self) -> Result<Read1, String> {
        match self.complete_at {
            Some(size) if size != self.at => Err(format!(
                "{root}: the archived {name} ends at {at}, but the archive's index lists it complete at {size} \
                 bytes: it was cut or changed after it was archived, and the events from {at} on are not in it. \
                 Restore the file from a copy of the archive (or from the server, if it still has it)",
                root = self.root,
                name = self.name,
                at = self.at
            )),
            _ => Ok(Read1::End),
        }
    }
}

/// Fills `buf`; false at the end of input (also part way: a torn last event is not there yet).
fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => return Ok(false),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Whether an archive bridges `file` (a position the server purged) to the server's binlog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coverage {
    /// The archive holds `file` and every file after it up to one the server still has (or
    /// the one just before the server's oldest, complete).
    Covered {
        /// The archived files to read before the server takes over.
        files: usize,
        /// Their bytes (by the index).
        bytes: u64,
    },
    /// It does not; why, for the operator.
    Gap(String),
}

/// Says whether the archive in `root` covers the gap between `file` (purged on the server) and
/// the server's binary logs `server` (`SHOW BINARY LOGS`: name and size, oldest first). The
/// archive must be a copy of this server's history, else a gap is reported rather than another
/// history replayed: a complete archived file the server also lists must have the server's
/// size, and where the archive meets the server's oldest file its GTID state must be the one
/// that file starts at on the server (`server_start`, [`gtid_state_at_start`]; None: not
/// known, not compared). Names and sizes alone match another server's archive written alike.
///
/// [`gtid_state_at_start`]: crate::source::server::gtid_state_at_start
///
/// # Errors
/// The archive cannot be listed or its index read.
pub async fn coverage(
    root: &Archive,
    server: &[(String, u64)],
    server_start: Option<&str>,
    file: &str,
) -> Result<Coverage, String> {
    if let Archive::Dir(d) = root {
        if !d.is_dir() {
            return Err(format!(
                "the archive directory {} does not exist (is the archiver's volume mounted here, at this path?)",
                d.display()
            ));
        }
        if let Some(why) = super::dir::cut_file_in(d)? {
            return Ok(Coverage::Gap(why));
        }
    }
    let names = root.names().await?;
    let index = root.index().await?;
    let held = || match (names.first(), names.last()) {
        (Some(a), Some(b)) => format!("it holds {a} to {b}"),
        _ => "it is empty".to_string(),
    };
    let Some(from) = names.iter().position(|n| n == file) else {
        return Ok(Coverage::Gap(format!("the archive in {} does not hold {file} ({})", root, held())));
    };
    let Some((oldest, _)) = server.first() else {
        return Ok(Coverage::Gap("the server lists no binary logs".into()));
    };
    // an archive of another server (or history) can have the same file names
    for s in index.iter().filter(|s| s.complete) {
        if let Some((_, size)) = server.iter().find(|(f, _)| *f == s.file).filter(|(_, size)| *size != s.size) {
            return Ok(Coverage::Gap(format!(
                "the archived {} has {} bytes, the server's {size}: the archive in {} is not a copy of this server's \
                 binlog",
                s.file, s.size, root
            )));
        }
    }
    let (oldest_n, _) = order_key(oldest);
    let mut bytes = 0;
    for (i, name) in names.iter().enumerate().skip(from) {
        let (n, _) = order_key(name);
        if i > from && n != order_key(&names[i - 1]).0 + 1 {
            return Ok(Coverage::Gap(format!(
                "the archive in {} lacks the file(s) between {} and {name}",
                root,
                names[i - 1]
            )));
        }
        let summary = index.iter().find(|s| &s.file == name);
        if n < oldest_n {
            bytes += summary.map_or(0, |s| s.size);
        }
        // the server has this one (from here it streams), or it is the complete one before
        let files = if n >= oldest_n {
            i - from
        } else if n + 1 == oldest_n && summary.is_some_and(|s| s.complete) {
            i - from + 1
        } else {
            continue;
        };
        // the archive's state where the server's oldest file starts: its copy of that file's
        // first, or the last of the file before it
        let archived = match summary {
            Some(s) if n >= oldest_n => s.first_gtid.as_deref(),
            Some(s) => s.last_gtid.as_deref().or(s.first_gtid.as_deref()),
            None => None,
        };
        if let (Some(archived), Some(on_server)) = (archived, server_start) {
            if same_gtid_state(archived, on_server) == Some(false) {
                return Ok(Coverage::Gap(format!(
                    "the archive in {root} is not a copy of this server's binlog: where it meets the server's oldest \
                     binlog {oldest} its GTID state is {}, and the server's {oldest} starts at {} (is source.archive \
                     another server's archive?)",
                    shown(archived),
                    shown(on_server)
                )));
            }
        }
        return Ok(Coverage::Covered { files, bytes });
    }
    Ok(Coverage::Gap(format!(
        "the archive in {} ends with {} and the server's oldest binlog is {oldest}: the changes between are in \
         neither (is the archiver running?)",
        root,
        names.last().map_or("", String::as_str)
    )))
}

/// A GTID state as text for a message (`(none)` for the empty state).
fn shown(state: &str) -> &str {
    if state.trim().is_empty() {
        "(none)"
    } else {
        state
    }
}

/// Whether two GTID states as text are the same point in one history: MySQL GTID sets equal,
/// or MariaDB positions with the same GTID per domain (`b` may list a domain's GTIDs of
/// several servers, as a GTID_LIST does: `a`'s must be one of them); one of each flavour is
/// not the same. None when one cannot be read at all.
fn same_gtid_state(a: &str, b: &str) -> Option<bool> {
    use sluice_protocol::gtid::{GtidSet, MariadbGtid};
    if let (Ok(x), Ok(y)) = (a.parse::<GtidSet>(), b.parse::<GtidSet>()) {
        return Some(x == y);
    }
    let list = |t: &str| -> Option<Vec<MariadbGtid>> {
        t.split(',').map(str::trim).filter(|p| !p.is_empty()).map(|p| p.parse().ok()).collect()
    };
    match (list(a), list(b)) {
        (Some(x), Some(y)) => {
            let domains = |l: &[MariadbGtid]| l.iter().map(|g| g.domain_id).collect::<std::collections::BTreeSet<_>>();
            Some(domains(&x) == domains(&y) && x.iter().all(|g| y.contains(g)))
        }
        // one MySQL's, the other MariaDB's: not one history
        (Some(_), None) if b.parse::<GtidSet>().is_ok() => Some(false),
        (None, Some(_)) if a.parse::<GtidSet>().is_ok() => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::copy::FileSummary;

    fn recorded() -> Vec<u8> {
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/pipeline/mysql-bin.000001")).unwrap()
    }

    /// The offsets where the recorded file's events start, and its last event's type.
    fn boundaries(file: &[u8]) -> Vec<u64> {
        let mut at = 4usize;
        let mut out = Vec::new();
        while at + HEADER_LEN <= file.len() {
            out.push(at as u64);
            at += EventHeader::parse(&file[at..]).unwrap().event_size as usize;
        }
        out
    }

    #[tokio::test]
    async fn a_feed_starts_at_an_event_boundary_and_hands_out_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let file = recorded();
        std::fs::write(dir.path().join("mysql-bin.000001"), &file).unwrap();
        let starts = boundaries(&file);
        let mid = starts[starts.len() / 2];
        let (mut feed, fde) =
            ArchiveFeed::open(&Archive::Dir(dir.path().into()), "mysql-bin.000001", mid).await.unwrap();
        assert_eq!(EventHeader::parse(&fde).unwrap().event_type, EventType::FormatDescription);
        let mut got = Vec::new();
        while let Some((at, raw)) = feed.next_raw().unwrap() {
            assert_eq!(&file[at as usize..at as usize + raw.len()], &raw[..]);
            got.push(at);
        }
        assert_eq!(got, starts[starts.len() / 2..]);
        // the recorded file ends with a ROTATE or a STOP, else it is one being written
        let last = EventHeader::parse(&file[*starts.last().unwrap() as usize..]).unwrap().event_type;
        let expected = match last {
            EventType::Rotate => FileEnd::Rotated,
            EventType::Stop => FileEnd::Stopped,
            _ => FileEnd::Open,
        };
        assert_eq!(feed.file_end(), expected);
        // position 4 is the start of the events: the FDE is given separately
        let (mut feed, _) = ArchiveFeed::open(&Archive::Dir(dir.path().into()), "mysql-bin.000001", 4).await.unwrap();
        assert_eq!(feed.next_raw().unwrap().map(|(at, _)| at), Some(starts[1]));
        // not a boundary, past the end, a file the archive lacks: clear errors
        let e = ArchiveFeed::open(&Archive::Dir(dir.path().into()), "mysql-bin.000001", mid + 1).await.unwrap_err();
        assert!(e.contains("is not where an event starts"), "{e}");
        let e = ArchiveFeed::open(&Archive::Dir(dir.path().into()), "mysql-bin.000001", file.len() as u64 + 100)
            .await
            .unwrap_err();
        assert!(e.contains("before the position"), "{e}");
        let e = ArchiveFeed::open(&Archive::Dir(dir.path().into()), "mysql-bin.000002", 4).await.unwrap_err();
        assert!(e.contains("does not hold mysql-bin.000002"), "{e}");
        // a torn last event (being written) ends the file without an error
        std::fs::write(dir.path().join("mysql-bin.000001"), &file[..file.len() - 3]).unwrap();
        let (mut feed, _) = ArchiveFeed::open(&Archive::Dir(dir.path().into()), "mysql-bin.000001", mid).await.unwrap();
        let mut n = 0;
        while feed.next_raw().unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, got.len() - 1);
        assert_eq!(feed.file_end(), FileEnd::Open, "the torn event is not taken");
        // the same file listed complete in the index: cut after it was archived, an error
        // (else the archive would seem to end there, the events after the cut never written)
        let index = [FileSummary {
            file: "mysql-bin.000001".into(),
            size: file.len() as u64,
            complete: true,
            ..Default::default()
        }];
        std::fs::write(dir.path().join(crate::archive::dir::INDEX), serde_json::to_vec(&index).unwrap()).unwrap();
        let (mut feed, _) = ArchiveFeed::open(&Archive::Dir(dir.path().into()), "mysql-bin.000001", mid).await.unwrap();
        let e = loop {
            match feed.next_raw() {
                Ok(Some(_)) => {}
                Ok(None) => panic!("a cut complete file ended without an error"),
                Err(e) => break e,
            }
        };
        assert!(e.contains("lists it complete") && e.contains("mysql-bin.000001 ends at"), "{e}");
        // whole again: read to its end as before
        std::fs::write(dir.path().join("mysql-bin.000001"), &file).unwrap();
        let (mut feed, _) = ArchiveFeed::open(&Archive::Dir(dir.path().into()), "mysql-bin.000001", mid).await.unwrap();
        while feed.next_raw().unwrap().is_some() {}
        std::fs::remove_file(dir.path().join(crate::archive::dir::INDEX)).unwrap();
        // gzipped, the same events
        let gz = dir.path().join("mysql-bin.000001.gz");
        let mut enc = flate2::write::GzEncoder::new(std::fs::File::create(&gz).unwrap(), flate2::Compression::fast());
        std::io::Write::write_all(&mut enc, &file).unwrap();
        enc.finish().unwrap();
        std::fs::remove_file(dir.path().join("mysql-bin.000001")).unwrap();
        let (mut feed, _) = ArchiveFeed::open(&Archive::Dir(dir.path().into()), "mysql-bin.000001", mid).await.unwrap();
        let mut n = 0;
        while feed.next_raw().unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, got.len());
    }

    fn archive(names: &[(&str, u64, bool)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut index = Vec::new();
        for (name, size, complete) in names {
            // as long as the index says (a complete file of another size is a cut one)
            let mut bytes = MAGIC.to_vec();
            bytes.resize((*size as usize).max(MAGIC.len()), 0);
            std::fs::write(dir.path().join(name), bytes).unwrap();
            index.push(FileSummary { file: name.to_string(), size: *size, complete: *complete, ..Default::default() });
        }
        std::fs::write(dir.path().join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
        dir
    }

    fn logs(names: &[(&str, u64)]) -> Vec<(String, u64)> {
        names.iter().map(|(n, s)| (n.to_string(), *s)).collect()
    }

    #[tokio::test]
    async fn coverage_needs_every_file_from_the_checkpoint_to_the_servers_oldest() {
        let a = archive(&[
            ("b.000003", 100, true),
            ("b.000004", 200, true),
            ("b.000005", 300, true),
            ("b.000006", 50, false),
        ]);
        let gap = |c: Coverage| match c {
            Coverage::Gap(why) => why,
            Coverage::Covered { .. } => panic!("covered"),
        };
        // overlapping the server's files
        let server = logs(&[("b.000005", 300), ("b.000006", 80)]);
        assert_eq!(
            coverage(&Archive::Dir(a.path().into()), &server, None, "b.000003").await.unwrap(),
            Coverage::Covered { files: 2, bytes: 300 }
        );
        // a complete file cut after it was archived: a gap, naming it
        std::fs::write(a.path().join("b.000004"), MAGIC).unwrap();
        let why = gap(coverage(&Archive::Dir(a.path().into()), &server, None, "b.000003").await.unwrap());
        assert!(why.contains("b.000004 is 4 bytes, not the 200") && why.contains("lists it complete"), "{why}");
        let mut whole = MAGIC.to_vec();
        whole.resize(200, 0);
        std::fs::write(a.path().join("b.000004"), whole).unwrap();
        // ending just before the server's oldest, complete
        let server = logs(&[("b.000006", 80)]);
        assert_eq!(
            coverage(&Archive::Dir(a.path().into()), &server, None, "b.000004").await.unwrap(),
            Coverage::Covered { files: 2, bytes: 500 }
        );
        // the archive's newest is incomplete and the server has moved past it
        let server = logs(&[("b.000007", 80)]);
        assert!(gap(coverage(&Archive::Dir(a.path().into()), &server, None, "b.000004").await.unwrap())
            .contains("the server's oldest binlog is b.000007"));
        // the checkpoint's file is not archived
        let server = logs(&[("b.000006", 80)]);
        assert!(gap(coverage(&Archive::Dir(a.path().into()), &server, None, "b.000002").await.unwrap())
            .contains("does not hold b.000002"));
        // a complete file of another size than the server's: another server's archive
        let server = logs(&[("b.000005", 999), ("b.000006", 80)]);
        assert!(gap(coverage(&Archive::Dir(a.path().into()), &server, None, "b.000003").await.unwrap())
            .contains("not a copy of this server's binlog"));
        // a hole in the numbering
        let h = archive(&[("b.000003", 100, true), ("b.000005", 300, true)]);
        let server = logs(&[("b.000006", 80)]);
        assert!(gap(coverage(&Archive::Dir(h.path().into()), &server, None, "b.000003").await.unwrap())
            .contains("between b.000003 and b.000005"));
    }

    /// Another server's archive with this server's file names and sizes: the GTID state where
    /// it meets the server's oldest binlog tells it apart (the start of the archive's copy of
    /// that file, or the end of the file before it).
    #[tokio::test]
    async fn coverage_compares_the_gtid_state_where_the_archive_meets_the_server() {
        let a = archive(&[("b.000003", 100, true), ("b.000004", 200, true), ("b.000005", 300, true)]);
        let mut index: Vec<FileSummary> =
            serde_json::from_slice(&std::fs::read(a.path().join("index.json")).unwrap()).unwrap();
        index[1].first_gtid = Some("0-1-10".into());
        index[1].last_gtid = Some("0-1-20".into());
        index[2].first_gtid = Some("0-1-20".into());
        index[2].last_gtid = Some("0-1-30".into());
        std::fs::write(a.path().join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
        let root = Archive::Dir(a.path().into());
        let covered = |c: &Coverage| matches!(c, Coverage::Covered { .. });
        // ending just before the server's oldest: the end of b.000005 against its start
        let server = logs(&[("b.000006", 80)]);
        for (start, same) in [
            (Some("0-1-30"), true),
            // a GTID_LIST also naming another server of the domain and another domain's
            (Some("0-2-7,0-1-30"), true),
            (None, true),
            (Some("0-1-29"), false),
            (Some("0-1-30,1-1-5"), false),
            (Some(""), false),
            (Some("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-30"), false),
        ] {
            let c = coverage(&root, &server, start, "b.000004").await.unwrap();
            assert_eq!(covered(&c), same, "{start:?}: {c:?}");
            if let Coverage::Gap(why) = c {
                assert!(why.contains("not a copy of this server's binlog") && why.contains("0-1-30"), "{why}");
            }
        }
        // overlapping: the archive's copy of the server's oldest starts where the server's does
        let server = logs(&[("b.000005", 300), ("b.000006", 80)]);
        assert!(covered(&coverage(&root, &server, Some("0-1-20"), "b.000003").await.unwrap()));
        assert!(!covered(&coverage(&root, &server, Some("0-1-21"), "b.000003").await.unwrap()));
        // MySQL: GTID sets, however the server prints them
        assert_eq!(
            same_gtid_state(
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5,55778904-0299-11f1-b1b8-4ef0c4956feb:3",
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5,\n55778904-0299-11f1-b1b8-4ef0c4956feb:3"
            ),
            Some(true)
        );
        assert_eq!(
            same_gtid_state("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-6"),
            Some(false)
        );
        assert_eq!(same_gtid_state("", ""), Some(true));
        assert_eq!(same_gtid_state("0-1-x", "0-1-1"), None);
    }
}
