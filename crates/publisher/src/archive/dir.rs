//! **An archive in a directory**: the binlog files under the server's names, and
//! `index.json` (one [`FileSummary`] per file, oldest first), written where [`Op`]s say.
//!
//! Crash safety: events are written in order, whole, and flushed and synced on a timer and at
//! the end of each file; the index is replaced whole (written aside, then renamed). After a
//! crash, [`DirArchive::open`] walks the newest file, cuts what follows its last whole, checked
//! event (a torn write), and the copy continues from there: the server sends those bytes again.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::copy::{walk_file, FileSummary, Op, Resume, Summarizer, FDE_FLAGS_OFFSET, MAGIC};
use super::store::{Remote, Uploader};

pub use super::layout::{in_range, next_name, order_key, size_problem, Range, Refusal, INDEX};

/// Bytes of events buffered before a write.
const BUFFER: usize = 1 << 20;

/// The archive directory.
#[derive(Debug)]
pub struct DirArchive {
    root: PathBuf,
    /// Every file's summary, oldest first (the current file's as of the last sync).
    index: Vec<FileSummary>,
    current: Option<(String, BufWriter<File>)>,
    /// `.lock`, locked while this process uses the archive.
    _lock: File,
    /// A sync of the current file running on a thread of its own ([`DirArchive::sync`]).
    syncing: Arc<AtomicBool>,
    /// Completed files are gzipped, by [`Gzipper`].
    gzip: Option<Gzipper>,
    /// Completed (and compressed) files are uploaded to an object store, by [`Uploader`]: this
    /// directory is then the archiver's spool.
    upload: Option<Uploader>,
    /// Which completed files go, and when they were last looked at.
    retention: Retention,
    retained_at: Option<std::time::Instant>,
}

/// The archive's retention (`archive.keep_for`, `archive.keep_size`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Completed files whose newest event is older go.
    pub keep_for: Option<std::time::Duration>,
    /// The oldest completed files go while all add up to more.
    pub keep_size: Option<u64>,
}

impl Retention {
    /// The files of `index` (oldest first) to remove at `now_s` (seconds since the epoch):
    /// complete ones only, never the newest complete one, and only those `removable` says
    /// may go (uploaded, compressed: not in anyone's hands), oldest first, stopping at the first
    /// that may not.
    pub fn expired(&self, index: &[FileSummary], now_s: u64, removable: impl Fn(&FileSummary) -> bool) -> Vec<String> {
        let newest_complete = index.iter().rposition(|s| s.complete);
        let mut total: u64 = index.iter().map(|s| s.size).sum();
        let mut out = Vec::new();
        for (i, s) in index.iter().enumerate() {
            if !s.complete || Some(i) == newest_complete || !removable(s) {
                break;
            }
            let old = self.keep_for.is_some_and(|d| s.last_time.is_some_and(|t| u64::from(t) + d.as_secs() < now_s));
            let over = self.keep_size.is_some_and(|max| total > max);
            if !old && !over {
                break;
            }
            total -= s.size;
            out.push(s.file.clone());
        }
        out
    }
}

/// Gzips completed files on a thread of its own, one after another: `<name>` becomes
/// `<name>.gz` (written aside, synced, renamed, then the original removed), and the stored name
/// comes back for the index.
#[derive(Debug)]
struct Gzipper {
    jobs: Option<std::sync::mpsc::Sender<String>>,
    done: std::sync::mpsc::Receiver<(String, String)>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl Gzipper {
    fn start(root: &Path) -> Gzipper {
        let (jobs, rx) = std::sync::mpsc::channel::<String>();
        let (tx, done) = std::sync::mpsc::channel();
        let root = root.to_path_buf();
        let worker = std::thread::spawn(move || {
            for name in rx {
                match gzip_file(&root, &name) {
                    Ok(stored) => {
                        let _ = tx.send((name, stored));
                    }
                    Err(e) => {
                        tracing::warn!(file = %name, error = %e, "Compressing an archived file failed; it stays as it is");
                    }
                }
            }
        });
        Gzipper { jobs: Some(jobs), done, worker: Some(worker) }
    }

    fn push(&self, name: &str) {
        if let Some(j) = &self.jobs {
            let _ = j.send(name.to_string());
        }
    }
}

impl Gzipper {
    /// Waits for the files queued (a stop waits for them; one cut short would only be
    /// compressed again at the next start); their stored names stay to be taken.
    fn finish(&mut self) {
        self.jobs.take();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl Drop for Gzipper {
    fn drop(&mut self) {
        self.finish();
    }
}

/// `root/name` gzipped into `root/name.gz`; the stored name.
fn gzip_file(root: &Path, name: &str) -> std::io::Result<String> {
    use flate2::write::GzEncoder;
    let stored = format!("{name}.gz");
    let tmp = root.join(format!(".{stored}.tmp"));
    let mut input = File::open(root.join(name))?;
    let mut enc = GzEncoder::new(BufWriter::new(File::create(&tmp)?), flate2::Compression::default());
    std::io::copy(&mut input, &mut enc)?;
    let f = enc.finish()?.into_inner().map_err(std::io::IntoInnerError::into_error)?;
    f.sync_all()?;
    std::fs::rename(&tmp, root.join(&stored))?;
    std::fs::remove_file(root.join(name))?;
    Ok(stored)
}

/// A file of the archive: the server's name, and the file holding it (`<name>.gz`: gzipped).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stored {
    name: String,
    file: String,
}

impl Stored {
    fn compressed(&self) -> bool {
        self.file != self.name
    }

    /// A reader of the server's bytes.
    fn open(&self, root: &Path) -> std::io::Result<Box<dyn std::io::Read + Send>> {
        let f = std::io::BufReader::new(File::open(root.join(&self.file))?);
        Ok(if self.compressed() { Box::new(flate2::bufread::MultiGzDecoder::new(f)) } else { Box::new(f) })
    }
}

impl DirArchive {
    /// Opens the archive in `root` (made when missing): its index, and where the copy continues
    /// (None: an empty archive). The newest file's torn tail, if any, is cut. With an object
    /// store, `stored` is the store's index: a spool that lost its files and index (a new
    /// volume) continues after the store's newest file.
    ///
    /// # Errors
    /// The directory cannot be made or read, or holds a file that is not a binlog.
    pub fn open(
        root: &Path,
        gzip: bool,
        remote: Option<(Remote, Vec<FileSummary>)>,
    ) -> Result<(DirArchive, Option<Resume>), String> {
        let (remote, stored) = match remote {
            Some((r, s)) => (Some(r), s),
            None => (None, Vec::new()),
        };
        let io = |what: &str, e: std::io::Error| format!("{what} {}: {e}", root.display());
        std::fs::create_dir_all(root).map_err(|e| io("creating the archive directory", e))?;
        // a server's own binlog directory (its data directory, or log_bin's): the archiver would
        // cut the file the server writes at a half-written event, and compress or expire the
        // server's files under it
        if let Some(why) = server_binlog_dir(root).map_err(|e| io("listing", e))? {
            return Err(why);
        }
        // two archivers writing one directory would interleave their writes
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(root.join(".lock"))
            .map_err(|e| io("locking", e))?;
        match rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                return Err(format!(
                    "{}: another sluice archive is writing this archive (its .lock is held); one archiver per archive",
                    root.display()
                ))
            }
            Err(e) => return Err(io("locking", e.into())),
        }
        let mut index: Vec<FileSummary> = match std::fs::read(root.join(INDEX)) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| format!("{}: unreadable ({e}); move it away to rebuild it", root.join(INDEX).display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io("reading the index of", e)),
        };
        let mut files = stored_files(root, true).map_err(|e| io("listing", e))?;
        // the archive's own copy cut, changed or gone since: readers would take a cut for the
        // file's end, an upload would store it so, and the copy would go on past a hole
        if let Some(why) = cut_file(root, &index, &files)? {
            return Err(format!("{why} (or remove it and its entry in {INDEX}: the archive then lacks its events)"));
        }
        let mut archive = DirArchive {
            root: root.to_path_buf(),
            index: Vec::new(),
            current: None,
            _lock: lock,
            syncing: Arc::new(AtomicBool::new(false)),
            gzip: gzip.then(|| Gzipper::start(root)),
            upload: remote.map(|r| Uploader::start(root, r)).transpose()?,
            retention: Retention::default(),
            retained_at: None,
        };
        // the store's entries the spool's index lacks (a spool on a new volume)
        for s in stored {
            if !index.iter().any(|i| i.file == s.file) {
                index.push(FileSummary { remote: true, ..s });
            }
        }
        index.sort_by_key(|s| order_key(&s.file));
        let Some(newest) = files.pop() else {
            // everything uploaded and gone from the spool: the copy goes on after the newest
            // file the index lists (complete, or it would be in the spool)
            index.retain(|s| s.remote);
            let next = index.last().map(|s| next_name(&s.file));
            archive.index = index;
            let Some(next) = next else { return Ok((archive, None)) };
            tracing::info!(file = %next, "The spool holds no file: continuing after the archive's newest uploaded one");
            archive.apply(&[], &[Op::Begin(next.clone())])?;
            return Ok((archive, Some(Resume::starting(&next))));
        };
        // the older files are complete; one the index lacks (a crash before it was written) is
        // summarized again
        index.retain(|s| s.remote || files.iter().any(|f| f.name == s.file));
        for f in &files {
            match index.iter_mut().find(|s| s.file == f.name) {
                // uploaded before a stop removed the spool's copy
                Some(s) if s.remote => {
                    std::fs::remove_file(root.join(&f.file)).map_err(|e| io("removing an uploaded file from", e))?;
                    continue;
                }
                Some(s) => s.stored = f.compressed().then(|| f.file.clone()),
                None => {
                    let r = walk_file(&f.name, f.open(root).map_err(|e| io("reading", e))?)?;
                    let mut summary = r.summarizer.summary().clone();
                    summary.complete = true;
                    summary.stored = f.compressed().then(|| f.file.clone());
                    index.push(summary);
                }
            }
            // one a stop left uncompressed, or not uploaded
            match (&archive.gzip, &archive.upload) {
                (Some(g), _) if !f.compressed() => g.push(&f.name),
                (_, Some(u)) => u.push(&f.name, &f.file),
                _ => {}
            }
        }
        index.sort_by_key(|s| order_key(&s.file));
        archive.index = index;
        let resume = walk_file(&newest.name, newest.open(root).map_err(|e| io("reading", e))?)?;
        if newest.compressed() {
            // whole when it was compressed: the copy goes on after it
            let summary = FileSummary {
                complete: true,
                stored: Some(newest.file.clone()),
                ..resume.summarizer.summary().clone()
            };
            archive.settle(summary.clone());
            let next = resume.next.clone();
            let resume = Resume { finished: true, size: summary.size, ..resume };
            if let Some(next) = next {
                archive.apply(&[], &[Op::Begin(next.clone())])?;
                return Ok((archive, Some(Resume::starting(&next))));
            }
            archive.write_index()?;
            return Ok((archive, Some(resume)));
        }
        let newest = newest.name;
        let path = root.join(&newest);
        let len = std::fs::metadata(&path).map_err(|e| io("reading", e))?.len();
        let file = OpenOptions::new().read(true).write(true).open(&path).map_err(|e| io("opening", e))?;
        // a tail cut off (or a file cut inside its magic, shorter than what it resumes at)
        if resume.size != len {
            tracing::warn!(
                file = %newest,
                kept = resume.size,
                cut = len.saturating_sub(resume.size),
                "The archive's newest file ends with an incomplete event (the archiver stopped while writing it); \
                 cutting it there: the server sends it again"
            );
            if resume.size <= 4 || len < 4 {
                file.set_len(0).map_err(|e| io("cutting", e))?;
                file.write_all_at(&MAGIC, 0).map_err(|e| io("writing", e))?;
            }
            file.set_len(resume.size.max(4)).map_err(|e| io("cutting", e))?;
            file.sync_all().map_err(|e| io("syncing", e))?;
        }
        let mut file = file;
        std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0)).map_err(|e| io("opening", e))?;
        archive.current = Some((newest.clone(), BufWriter::with_capacity(BUFFER, file)));
        if let (true, Some(next)) = (resume.finished, &resume.next) {
            // it ended with a ROTATE: the copy continues in the file it names
            let mut summary = resume.summarizer.summary().clone();
            summary.complete = true;
            archive.settle(summary);
            archive.apply(&[], &[Op::Begin(next.clone())])?;
            return Ok((archive, Some(Resume::starting(next))));
        }
        let summary = resume.summarizer.summary().clone();
        if resume.finished {
            // it ended with a STOP
            archive.settle(FileSummary { complete: true, ..summary });
        } else {
            archive.put(summary);
        }
        archive.write_index()?;
        Ok((archive, Some(resume)))
    }

    /// The newest file, found complete at open (a stop after its end, before the index said so):
    /// listed, and queued for compression and upload as a file completed now would be.
    fn settle(&mut self, mut summary: FileSummary) {
        if let Some(old) = self.index.iter().find(|s| s.file == summary.file) {
            summary.remote |= old.remote;
        }
        let (name, compressed, remote) = (summary.file.clone(), summary.stored.is_some(), summary.remote);
        let stored = summary.stored.clone().unwrap_or_else(|| name.clone());
        self.put(summary);
        match (&self.gzip, &self.upload) {
            (Some(g), _) if !compressed => g.push(&name),
            (_, Some(u)) if !remote => u.push(&name, &stored),
            _ => {}
        }
    }

    /// Carries out `ops` for the event `raw`.
    ///
    /// # Errors
    /// A write that fails; a file to begin that the archive holds already.
    pub fn apply(&mut self, raw: &[u8], ops: &[Op]) -> Result<(), String> {
        for op in ops {
            match op {
                Op::Begin(name) => {
                    self.close_current()?;
                    let path = self.root.join(name);
                    let exists = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                    let gzipped = self.root.join(format!("{name}.gz")).exists();
                    if exists > MAGIC.len() as u64 || gzipped {
                        return Err(format!(
                            "{}: the stream starts this file again, but the archive holds it already ({}; another \
                             server's files?)",
                            path.display(),
                            if gzipped { "gzipped".to_string() } else { format!("{exists} bytes") }
                        ));
                    }
                    let mut f = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create(true)
                        .truncate(true)
                        .open(&path)
                        .map_err(|e| format!("creating {}: {e}", path.display()))?;
                    f.write_all(&MAGIC).map_err(|e| format!("writing {}: {e}", path.display()))?;
                    self.current = Some((name.clone(), BufWriter::with_capacity(BUFFER, f)));
                    self.put(Summarizer::new(name).summary().clone());
                }
                Op::Append => {
                    let (name, w) = self.current.as_mut().ok_or("an event before any file was begun")?;
                    w.write_all(raw).map_err(|e| format!("writing {name}: {e}"))?;
                }
                Op::MarkInUse => {
                    let (name, w) = self.current.as_mut().ok_or("an event before any file was begun")?;
                    w.flush().map_err(|e| format!("writing {name}: {e}"))?;
                    set_in_use(w.get_ref(), true).map_err(|e| format!("writing {name}: {e}"))?;
                }
                Op::Finish { summary, clean } => {
                    if let Some((name, w)) = &mut self.current {
                        w.flush().map_err(|e| format!("writing {name}: {e}"))?;
                        let f = w.get_ref();
                        if *clean {
                            set_in_use(f, false).map_err(|e| format!("closing {name}: {e}"))?;
                        }
                        f.sync_all().map_err(|e| format!("syncing {name}: {e}"))?;
                    }
                    self.put(summary.clone());
                    self.write_index()?;
                    match (&self.gzip, &self.upload) {
                        (Some(g), _) => g.push(&summary.file),
                        (None, Some(u)) => u.push(&summary.file, &summary.file),
                        (None, None) => {}
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes out what is buffered and the index with the current file's `summary`, and makes
    /// the current file durable: at once (`wait`), or on a thread of its own while the copy
    /// goes on (the periodic sync: waiting for the disk there halved the copy's rate, and what
    /// a machine crash loses of the open file the server sends again).
    ///
    /// # Errors
    /// A write that fails.
    pub fn sync(&mut self, summary: &FileSummary, wait: bool) -> Result<(), String> {
        if let Some((name, w)) = &mut self.current {
            w.flush().map_err(|e| format!("writing {name}: {e}"))?;
            if wait {
                w.get_ref().sync_data().map_err(|e| format!("syncing {name}: {e}"))?;
            } else if !self.syncing.swap(true, Ordering::AcqRel) {
                let (file, flag, name) = (w.get_ref().try_clone(), Arc::clone(&self.syncing), name.clone());
                std::thread::spawn(move || {
                    if let Err(e) = file.and_then(|f| f.sync_data()) {
                        tracing::warn!(file = %name, error = %e, "Syncing the archive's open file failed");
                    }
                    flag.store(false, Ordering::Release);
                });
            }
            if *name == summary.file {
                self.put(summary.clone());
            }
        }
        let done: Vec<(String, String)> = self.gzip.as_ref().map(|g| g.done.try_iter().collect()).unwrap_or_default();
        for (name, stored) in done {
            if let Some(u) = &self.upload {
                u.push(&name, &stored);
            }
            if let Some(s) = self.index.iter_mut().find(|s| s.file == name) {
                s.stored = Some(stored);
            }
        }
        self.uploaded()?;
        if self.retained_at.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(60)) {
            self.retained_at = Some(std::time::Instant::now());
            self.retain()?;
        }
        self.write_index()
    }

    /// Sets the archive's retention (applied at the next sync, then every minute).
    pub fn set_retention(&mut self, retention: Retention) {
        self.retention = retention;
        self.retained_at = None;
    }

    /// Removes what the retention says, from the directory and from the object store.
    fn retain(&mut self) -> Result<(), String> {
        if self.retention == Retention::default() {
            return Ok(());
        }
        let (gzip, store) = (self.gzip.is_some(), self.upload.is_some());
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        // a file still to be compressed or uploaded is in the workers' hands
        let gone = self.retention.expired(&self.index, now, |s| (!gzip || s.stored.is_some()) && (!store || s.remote));
        if gone.is_empty() {
            return Ok(());
        }
        let mut objects = Vec::new();
        for name in &gone {
            let Some(at) = self.index.iter().position(|s| &s.file == name) else { continue };
            let s = self.index.remove(at);
            let stored = s.stored.clone().unwrap_or_else(|| s.file.clone());
            let path = self.root.join(&stored);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("removing {} (archive.keep_for/keep_size): {e}", path.display())),
            }
            if s.remote {
                objects.push(stored);
            }
            tracing::info!(file = %name, size = s.size, last_event = ?s.last_time, "Removed an archived file (retention)");
        }
        self.write_index()?;
        if let Some(u) = &self.upload {
            // the store's index first: a reader never finds a file listed that is gone
            u.index(self.index.iter().filter(|s| s.remote).cloned().collect());
            u.delete(objects);
        }
        Ok(())
    }

    /// Takes in the files the uploader finished: listed as uploaded (the local index first,
    /// then the store's), and their spool copies removed, but for the newest file (the copy
    /// continues from it after a restart).
    fn uploaded(&mut self) -> Result<(), String> {
        let Some(u) = &self.upload else { return Ok(()) };
        let done: Vec<String> = u.done.try_iter().collect();
        if done.is_empty() {
            return Ok(());
        }
        let newest = self.index.last().map(|s| s.file.clone());
        let mut gone = Vec::new();
        for name in &done {
            if let Some(s) = self.index.iter_mut().find(|s| &s.file == name) {
                s.remote = true;
                if newest.as_ref() != Some(name) {
                    gone.push(s.stored.clone().unwrap_or_else(|| s.file.clone()));
                }
            }
        }
        self.write_index()?;
        u.index(self.index.iter().filter(|s| s.remote).cloned().collect());
        for f in gone {
            let path = self.root.join(&f);
            if let Err(e) = std::fs::remove_file(&path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    return Err(format!("removing the uploaded {}: {e}", path.display()));
                }
            }
        }
        Ok(())
    }

    /// Ends the archive: the queued compressions finished and in the index, everything synced.
    ///
    /// # Errors
    /// As [`DirArchive::sync`].
    pub fn close(&mut self, summary: &FileSummary) -> Result<(), String> {
        if let Some(g) = &mut self.gzip {
            g.finish();
        }
        self.retained_at = None;
        self.sync(summary, true)?;
        if let Some(u) = &self.upload {
            // the uploads queued, then the store's index that lists them
            u.drain();
            self.sync(summary, true)?;
            if let Some(u) = &mut self.upload {
                u.finish();
            }
        }
        Ok(())
    }

    fn close_current(&mut self) -> Result<(), String> {
        if let Some((name, mut w)) = self.current.take() {
            w.flush().map_err(|e| format!("writing {name}: {e}"))?;
            w.get_ref().sync_all().map_err(|e| format!("syncing {name}: {e}"))?;
        }
        Ok(())
    }

    /// Puts a file's summary in the index (replacing its entry).
    fn put(&mut self, summary: FileSummary) {
        match self.index.iter_mut().find(|s| s.file == summary.file) {
            Some(s) => *s = summary,
            None => self.index.push(summary),
        }
    }

    fn write_index(&self) -> Result<(), String> {
        let path = self.root.join(INDEX);
        let tmp = self.root.join(format!(".{INDEX}.tmp"));
        let body = serde_json::to_vec_pretty(&self.index).map_err(|e| e.to_string())?;
        std::fs::write(&tmp, body)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| format!("writing {}: {e}", path.display()))
    }
}

/// Why `root` is a server's own binlog directory rather than an archive: it holds the server's
/// binlog index (`<base>.index`, the list of its files) beside files `<base>.<number>`.
///
/// # Errors
/// The directory cannot be listed (one that does not exist is not a server's).
pub fn server_binlog_dir(root: &Path) -> std::io::Result<Option<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(root)? {
        names.push(entry?.file_name().to_string_lossy().into_owned());
    }
    let binlog_index = names.iter().find(|n| {
        n.strip_suffix(".index").is_some_and(|base| {
            !base.is_empty()
                && names.iter().any(|f| {
                    f.strip_prefix(base).and_then(|r| r.strip_prefix('.')).is_some_and(|num| {
                        let num = num.strip_suffix(".gz").unwrap_or(num);
                        !num.is_empty() && num.bytes().all(|b| b.is_ascii_digit())
                    })
                })
        })
    });
    Ok(binlog_index.map(|i| {
        format!(
            "{} holds {i}, a server's index of its binlog files: it is a server's own binlog directory, not an \
             archive (the archiver would cut, compress or remove the server's files). Give archive.to a directory \
             of its own",
            root.display()
        )
    }))
}

/// Sets or clears the FORMAT_DESCRIPTION's `LOG_EVENT_BINLOG_IN_USE_F`, as the server does in
/// its own file while it writes it and when it closes it (the FDE's checksum is computed with
/// the flag clear, so it stays right).
fn set_in_use(f: &File, on: bool) -> std::io::Result<()> {
    let mut head = [0u8; 4 + 19];
    f.read_exact_at(&mut head, 0)?;
    if head[..4] != MAGIC || head[4 + 4] != sluice_binlog::EventType::FormatDescription.code() {
        return Ok(());
    }
    let at = usize::try_from(FDE_FLAGS_OFFSET).unwrap_or(21);
    let bit = sluice_binlog::header::LOG_EVENT_BINLOG_IN_USE_F as u8;
    let flags = if on { head[at] | bit } else { head[at] & !bit };
    if flags != head[at] {
        f.write_all_at(&[flags], FDE_FLAGS_OFFSET)?;
    }
    Ok(())
}

/// The binlog files in the archive directory (named `<base>.<number>`, or that and `.gz`; not
/// hidden), in the server's order. A file both plain and gzipped (a stop between the gzip's
/// rename and the original's removal, or a reader looking in between) is the gzipped one.
/// With `repair` (the archiver, holding the lock) the plain twin and half-written gzips
/// (hidden) are removed; readers leave them to the archiver.
fn stored_files(root: &Path, repair: bool) -> std::io::Result<Vec<Stored>> {
    let mut out: Vec<Stored> = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let entry = entry?;
        let file = entry.file_name().to_string_lossy().into_owned();
        if repair && file.starts_with('.') && file.ends_with(".gz.tmp") {
            std::fs::remove_file(entry.path())?;
            continue;
        }
        let name = file.strip_suffix(".gz").unwrap_or(&file).to_string();
        // a binlog's name ends with its number (`mysql-bin.000042`); anything else is not ours
        let numbered =
            name.rsplit_once('.').is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !entry.file_type()?.is_file() || !numbered || file.starts_with('.') {
            continue;
        }
        let s = Stored { name, file };
        match out.iter_mut().find(|o| o.name == s.name) {
            Some(o) => {
                let plain = if s.compressed() { o.file.clone() } else { s.file.clone() };
                if repair {
                    std::fs::remove_file(root.join(plain))?;
                }
                o.file = format!("{}.gz", s.name);
            }
            None => out.push(s),
        }
    }
    out.sort_by_key(|s| order_key(&s.name));
    Ok(out)
}

/// The index of the archive in `root` (empty when it has none yet).
///
/// # Errors
/// An unreadable index.
pub fn read_index(root: &Path) -> Result<Vec<FileSummary>, String> {
    match std::fs::read(root.join(INDEX)) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| format!("{}: unreadable: {e}", root.join(INDEX).display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("reading {}: {e}", root.join(INDEX).display())),
    }
}

/// The server's names of the files the archive in `root` holds, in the server's order.
///
/// # Errors
/// An unreadable directory.
pub fn file_names(root: &Path) -> Result<Vec<String>, String> {
    let files = stored_files(root, false).map_err(|e| format!("listing {}: {e}", root.display()))?;
    Ok(files.into_iter().map(|f| f.name).collect())
}

/// A reader of the server's bytes of file `name` of the archive in `root` (decompressed when
/// it is stored gzipped); None when the archive does not hold it.
///
/// # Errors
/// The file exists but cannot be opened.
pub fn open_file(root: &Path, name: &str) -> std::io::Result<Option<Box<dyn std::io::Read + Send>>> {
    // plain first: the archiver renames the gzip into place before it removes the plain file,
    // so a plain file gone between two looks is there gzipped
    for s in [Stored { name: name.into(), file: name.into() }, Stored { name: name.into(), file: format!("{name}.gz") }]
    {
        match s.open(root) {
            Ok(r) => return Ok(Some(r)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// A complete file of the archive in `root` (`files` as listed) that is not as it was
/// archived: of another size than its index gives (for a gzipped one, the size its gzip
/// trailer gives), or gone while an older file is still there (retention removes the oldest
/// first). A reader would read a cut file to the cut without a word (at an event boundary the
/// file looks whole), or go from the file before a gone one to the file after it: the events
/// between would be missing.
///
/// # Errors
/// A file that cannot be looked at.
fn cut_file(root: &Path, index: &[FileSummary], files: &[Stored]) -> Result<Option<String>, String> {
    let look = |f: &Stored, e: std::io::Error| format!("reading {}: {e}", root.join(&f.file).display());
    let by_name: std::collections::HashMap<&str, &Stored> = files.iter().map(|f| (f.name.as_str(), f)).collect();
    let oldest = files.iter().min_by_key(|f| order_key(&f.name));
    for s in index.iter().filter(|s| s.complete) {
        let Some(&f) = by_name.get(s.file.as_str()) else {
            let older = oldest.filter(|o| order_key(&o.name) < order_key(&s.file));
            if let (false, Some(older)) = (s.remote, older) {
                return Ok(Some(format!(
                    "{} is listed complete in the archive's index but gone, while the older {} is still there: the \
                     archive lacks its events. Restore it from a copy of the archive",
                    root.join(&s.file).display(),
                    older.name
                )));
            }
            continue;
        };
        let path = root.join(&f.file);
        if let Some(what) =
            size_problem(&path, f.compressed(), s.size, &path.display().to_string()).map_err(|e| look(f, e))?
        {
            return Ok(Some(format!(
                "{what} the archive's index lists it complete at: it was cut or changed after it was archived. \
                 Restore it from a copy of the archive",
            )));
        }
    }
    Ok(None)
}

/// [`cut_file`] for the archive in `root`.
///
/// # Errors
/// The archive cannot be listed or its index read.
pub fn cut_file_in(root: &Path) -> Result<Option<String>, String> {
    let files = stored_files(root, false).map_err(|e| format!("listing {}: {e}", root.display()))?;
    cut_file(root, &read_index(root)?, &files)
}

/// The files of `range` that the index of `root`, an archiver's spool, lists as uploaded to its
/// object store and that are no longer here (the spool keeps only the newest): a dump of the
/// spool would go without them.
pub fn uploaded_away(root: &Path, range: &Range) -> Vec<String> {
    let (Ok(index), Ok(files)) = (read_index(root), stored_files(root, false)) else { return Vec::new() };
    let away = index
        .iter()
        .filter(|s| s.remote && !files.iter().any(|f| f.name == s.file))
        .map(|s| (s.file.clone(), s.file.clone()))
        .collect();
    in_range(&index, away, range).unwrap_or_default()
}

/// The files of the archive in `root` that may hold events from `from` to before `to`
/// (seconds since the epoch; either open), oldest first, chosen by the index without reading
/// them (files the index does not list yet are taken).
///
/// # Errors
/// An unreadable directory or index ([`Refusal::Unreadable`]); a file of the archive cut or
/// gone ([`Refusal::Damaged`]).
pub fn files_between(root: &Path, range: &Range) -> Result<Vec<PathBuf>, Refusal> {
    // an index that does not parse is damage, and the archiver rebuilds one moved away
    let index = match std::fs::read(root.join(INDEX)) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| {
            Refusal::Damaged(format!(
                "{} does not read as an archive's index ({e}): it is damaged. Move it away and start the archiver \
                 (it lists the files again), or dump the archive's files by name",
                root.join(INDEX).display()
            ))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(format!("reading {}: {e}", root.join(INDEX).display()).into()),
    };
    let files = stored_files(root, false).map_err(|e| format!("listing {}: {e}", root.display()))?;
    if files.is_empty() {
        return Err(format!("{} holds no binlog file: not a sluice archive (or an empty one)", root.display()).into());
    }
    let listed = files.iter().map(|f| (f.name.clone(), f.file.clone())).collect();
    let chosen = in_range(&index, listed, range)?;
    // damage that matters to this range: in the files chosen, or a file the index lists
    // complete that the range would take were it there (one gone); damage elsewhere does not
    // keep a dump of this range from being whole
    let mut wanted: std::collections::HashSet<String> =
        chosen.iter().map(|f| f.trim_end_matches(".gz").to_string()).collect();
    let indexed = index.iter().filter(|s| s.complete).map(|s| (s.file.clone(), s.file.clone())).collect();
    if let Ok(would) = in_range(&index, indexed, range) {
        wanted.extend(would);
    }
    let index_in: Vec<FileSummary> = index.iter().filter(|s| wanted.contains(&s.file)).cloned().collect();
    if let Some(why) = cut_file(root, &index_in, &files)? {
        return Err(Refusal::Damaged(format!("{why} (or dump the server's own file)")));
    }
    // the file being written only grows: the index gives what it held at the archiver's last
    // sync, so one shorter was cut after it was archived, and reads to the cut without a word
    for s in index_in.iter().filter(|s| !s.complete) {
        let Some(f) = files.iter().find(|f| f.name == s.file && !f.compressed()) else { continue };
        let path = root.join(&f.file);
        let len = std::fs::metadata(&path).map_err(|e| format!("reading {}: {e}", path.display()))?.len();
        if len < s.size {
            return Err(Refusal::Damaged(format!(
                "{} is {len} bytes, shorter than the {} the archive's index says it held when the archiver last \
                 synced it: it was cut after it was archived (or lost its tail in a machine crash). Start the \
                 archiver: it copies the rest again from the server, if the server still has it; or dump the file \
                 by name for what it holds",
                path.display(),
                s.size
            )));
        }
    }
    // the server numbers its files one after another: a number missing from the archive
    // between two chosen files is a file gone (with its index entry), and its changes with it
    let held: std::collections::HashSet<u64> = files.iter().map(|f| order_key(&f.name).0).collect();
    for pair in chosen.windows(2) {
        let name = |f: &str| f.trim_end_matches(".gz").to_string();
        let (a, b) = (name(&pair[0]), name(&pair[1]));
        if (order_key(&a).0 + 1..order_key(&b).0).any(|n| !held.contains(&n)) {
            return Err(Refusal::Damaged(format!(
                "the archive lacks the file(s) between {a} and {b} (gone with their index entries?): their changes \
                 would be missing. Restore them from a copy of the archive, or dump a range on one side of the gap \
                 (--start-file {b}, or --stop-datetime before {b}'s first event)"
            )));
        }
    }
    Ok(chosen.into_iter().map(|f| root.join(f)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(file: &str, first: u32, last: u32) -> FileSummary {
        FileSummary {
            file: file.into(),
            size: 4,
            complete: true,
            first_time: Some(first),
            last_time: Some(last),
            ..FileSummary::default()
        }
    }

    #[test]
    fn a_time_range_takes_the_files_whose_events_meet_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // out of name order on purpose: the server's order is by number
        let index = vec![summary("b.000009", 100, 200), summary("b.000010", 190, 300), summary("b.000011", 301, 400)];
        std::fs::write(root.join(INDEX), serde_json::to_vec(&index).unwrap()).unwrap();
        for f in ["b.000010", "b.000009", "b.000011", "b.000012", "notes.txt"] {
            std::fs::write(root.join(f), MAGIC).unwrap();
        }
        let names = |from, to| -> Vec<String> {
            files_between(root, &Range { from, to, ..Range::default() })
                .unwrap()
                .iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        // b.000012 is not in the index yet (the file being written): always taken
        assert_eq!(names(None, None), ["b.000009", "b.000010", "b.000011", "b.000012"]);
        // a file gone from between two others, with its index entry: the dump would skip its
        // changes without a word
        std::fs::rename(root.join("b.000010"), root.join("gone")).unwrap();
        let without: Vec<_> = index.iter().filter(|s| s.file != "b.000010").cloned().collect();
        std::fs::write(root.join(INDEX), serde_json::to_vec(&without).unwrap()).unwrap();
        let Refusal::Damaged(e) = files_between(root, &Range::default()).unwrap_err() else { panic!("not damaged") };
        assert!(e.contains("lacks the file(s) between b.000009 and b.000011"), "{e}");
        std::fs::rename(root.join("gone"), root.join("b.000010")).unwrap();
        std::fs::write(root.join(INDEX), serde_json::to_vec(&index).unwrap()).unwrap();
        // a complete file of another size than the index's: cut after it was archived
        std::fs::write(root.join("b.000010"), [MAGIC.as_slice(), b"more"].concat()).unwrap();
        let Refusal::Damaged(e) = files_between(root, &Range::default()).unwrap_err() else { panic!("not damaged") };
        assert!(e.contains("b.000010 is 8 bytes, not the 4") && e.contains("lists it complete"), "{e}");
        // ... which a range after it does not need
        let after = Range { start_file: Some("b.000011".into()), ..Range::default() };
        assert_eq!(files_between(root, &after).unwrap().len(), 2, "b.000011 and b.000012");
        // a file gone that the range would take is damage; one it would not take is not
        std::fs::rename(root.join("b.000010"), root.join("gone")).unwrap();
        let Refusal::Damaged(e) = files_between(root, &Range { from: Some(250), ..Range::default() }).unwrap_err()
        else {
            panic!("not damaged")
        };
        assert!(e.contains("b.000010") && e.contains("gone"), "{e}");
        assert_eq!(files_between(root, &after).unwrap().len(), 2);
        std::fs::rename(root.join("gone"), root.join("b.000010")).unwrap();
        std::fs::write(root.join("b.000010"), MAGIC).unwrap();
        assert_eq!(names(Some(250), None), ["b.000010", "b.000011", "b.000012"]);
        assert_eq!(names(None, Some(190)), ["b.000009", "b.000012"]);
        assert_eq!(names(Some(195), Some(301)), ["b.000009", "b.000010", "b.000012"]);
        assert!(order_key("mysql-bin.1000000") > order_key("mysql-bin.999999"));
    }

    /// An index that does not parse is damage (exit 65) with what to do; before, the dump
    /// called the archive unreadable (66) and said only where the parser stopped.
    #[test]
    fn a_damaged_index_is_damage_and_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.000001"), MAGIC).unwrap();
        std::fs::write(dir.path().join(INDEX), b"[{\"file\":").unwrap();
        let Err(Refusal::Damaged(e)) = files_between(dir.path(), &Range::default()) else { panic!("not damage") };
        assert!(e.contains("index.json does not read") && e.contains("Move it away and start the archiver"), "{e}");
    }

    /// An archiver's spool, its completed files uploaded and gone: the files of the range that
    /// are in the store only are named (the dump says so; before, it read the newest file and
    /// said nothing of the others).
    #[test]
    fn a_spool_names_the_files_only_in_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut index =
            vec![summary("b.000001", 100, 200), summary("b.000002", 200, 300), summary("b.000003", 300, 400)];
        index.iter_mut().take(2).for_each(|s| s.remote = true);
        if let Some(s) = index.last_mut() {
            s.complete = false;
        }
        std::fs::write(root.join(INDEX), serde_json::to_vec(&index).unwrap()).unwrap();
        std::fs::write(root.join("b.000003"), MAGIC).unwrap();
        assert_eq!(uploaded_away(root, &Range::default()), ["b.000001", "b.000002"]);
        assert_eq!(uploaded_away(root, &Range { from: Some(250), ..Range::default() }), ["b.000002"]);
        assert!(uploaded_away(root, &Range { from: Some(350), ..Range::default() }).is_empty());
        assert_eq!(files_between(root, &Range::default()).unwrap().len(), 1);
    }

    /// A server's binlog directory (log_bin's, or its data directory) given as the archive:
    /// refused before anything is touched. Before, the archiver took the server's files for its
    /// own and would have cut the one being written at a half-written event.
    #[test]
    fn a_servers_own_binlog_directory_is_not_an_archive() {
        let dir = tempfile::tempdir().unwrap();
        let mut torn = MAGIC.to_vec();
        torn.extend_from_slice(&[0u8; 10]);
        std::fs::write(dir.path().join("mysql-bin.000007"), &torn).unwrap();
        std::fs::write(dir.path().join("mysql-bin.index"), "./mysql-bin.000007\n").unwrap();
        let e = DirArchive::open(dir.path(), false, None).unwrap_err();
        assert!(e.contains("holds mysql-bin.index") && e.contains("a directory of its own"), "{e}");
        assert_eq!(std::fs::read(dir.path().join("mysql-bin.000007")).unwrap(), torn, "untouched");
        assert!(!dir.path().join(INDEX).exists() && !dir.path().join(".lock").exists());
        // an index of something else is no server's
        std::fs::remove_file(dir.path().join("mysql-bin.index")).unwrap();
        std::fs::write(dir.path().join("notes.index"), "").unwrap();
        assert!(DirArchive::open(dir.path(), false, None).is_ok());
    }

    /// The file being written, cut below the size the index gives it: damage. Before, the dump
    /// read it to the cut (an event boundary) and exited 0 without the changes after it.
    #[test]
    fn the_file_being_written_cut_below_its_indexed_size_is_damage() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let body = [MAGIC.as_slice(), &[7u8; 96]].concat();
        let mut s = summary("b.000001", 100, 200);
        s.complete = false;
        s.size = 100;
        std::fs::write(root.join(INDEX), serde_json::to_vec(&[s]).unwrap()).unwrap();
        std::fs::write(root.join("b.000001"), &body).unwrap();
        assert_eq!(files_between(root, &Range::default()).unwrap().len(), 1);
        // grown since the last sync: as it should be
        std::fs::write(root.join("b.000001"), [body.as_slice(), &[1u8; 50]].concat()).unwrap();
        assert_eq!(files_between(root, &Range::default()).unwrap().len(), 1);
        std::fs::write(root.join("b.000001"), &body[..60]).unwrap();
        let Refusal::Damaged(e) = files_between(root, &Range::default()).unwrap_err() else { panic!("not damage") };
        assert!(e.contains("b.000001 is 60 bytes, shorter than the 100") && e.contains("Start the archiver"), "{e}");
    }

    #[test]
    fn retention_removes_the_oldest_complete_files_but_never_the_newest() {
        let mut index: Vec<FileSummary> = (1..=5)
            .map(|n| FileSummary { last_time: Some(1000 * n), ..summary(&format!("b.00000{n}"), 0, 1000 * n) })
            .collect();
        for s in &mut index {
            s.size = 100;
            s.complete = true;
        }
        index[4].complete = false;
        let all = |_: &FileSummary| true;
        let names = |v: Vec<String>| v.join(",");
        // by size: 500 bytes, at most 250 kept
        let by_size = Retention { keep_for: None, keep_size: Some(250) };
        assert_eq!(names(by_size.expired(&index, 0, all)), "b.000001,b.000002,b.000003");
        // the newest complete file stays whatever the limit
        let tiny = Retention { keep_for: None, keep_size: Some(1) };
        assert_eq!(names(tiny.expired(&index, 0, all)), "b.000001,b.000002,b.000003");
        // by age: files whose newest event is more than 1500 s before now (4000)
        let by_age = Retention { keep_for: Some(std::time::Duration::from_secs(1500)), keep_size: None };
        assert_eq!(names(by_age.expired(&index, 4000, all)), "b.000001,b.000002");
        // a file not yet uploaded (or compressed) stops the removal there
        assert_eq!(names(by_size.expired(&index, 0, |s| s.file != "b.000002")), "b.000001");
        assert!(Retention::default().expired(&index, 4000, all).is_empty());
    }

    #[test]
    fn one_archiver_per_directory_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (first, resume) = DirArchive::open(dir.path(), false, None).unwrap();
        assert!(resume.is_none(), "an empty archive");
        let e = DirArchive::open(dir.path(), false, None).unwrap_err();
        assert!(e.contains("another sluice archive"), "{e}");
        drop(first);
        // a file cut inside its magic starts over; one with half an event keeps its whole part
        std::fs::write(dir.path().join("b.000001"), &MAGIC[..2]).unwrap();
        let (a, resume) = DirArchive::open(dir.path(), false, None).unwrap();
        let r = resume.unwrap();
        assert_eq!((r.file.as_str(), r.size), ("b.000001", 4));
        assert_eq!(std::fs::read(dir.path().join("b.000001")).unwrap(), MAGIC);
        drop(a);
        let mut torn = MAGIC.to_vec();
        torn.extend_from_slice(&[0u8; 10]);
        std::fs::write(dir.path().join("b.000002"), &torn).unwrap();
        let (_a, resume) = DirArchive::open(dir.path(), false, None).unwrap();
        assert_eq!(resume.unwrap().size, 4);
        assert_eq!(std::fs::metadata(dir.path().join("b.000002")).unwrap().len(), 4);
    }

    /// A stop after a file's ROTATE was written but before the index listed it complete: the
    /// next start compresses it (and would upload it) like any completed file, and continues in
    /// the file the ROTATE names.
    #[test]
    fn a_file_found_complete_at_start_is_compressed_like_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/pipeline/mysql-bin.000001")).unwrap();
        std::fs::write(dir.path().join("mysql-bin.000001"), &file).unwrap();
        let (mut a, resume) = DirArchive::open(dir.path(), true, None).unwrap();
        let r = resume.unwrap();
        assert_eq!((r.file.as_str(), r.size), ("mysql-bin.000002", 4), "continues in the file the ROTATE names");
        a.close(&Summarizer::new("mysql-bin.000002").summary().clone()).unwrap();
        assert!(dir.path().join("mysql-bin.000001.gz").exists(), "compressed");
        assert!(!dir.path().join("mysql-bin.000001").exists());
        let index = read_index(dir.path()).unwrap();
        assert_eq!(index[0].stored.as_deref(), Some("mysql-bin.000001.gz"), "{index:?}");
        assert!(index[0].complete);
    }

    /// A gzipped complete file cut, and a complete file gone from between two others, are
    /// found; the oldest gone (retention removes it first, and a stop can come before the
    /// index says so) is not.
    #[test]
    fn cut_gzipped_and_gone_files_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let body = |n: usize| -> Vec<u8> { [MAGIC.as_slice(), &vec![7u8; n]].concat() };
        let mut index = Vec::new();
        for (name, n) in [("b.000001", 100), ("b.000002", 5000), ("b.000003", 300)] {
            index.push(FileSummary { file: name.into(), size: (n + 4) as u64, complete: true, ..Default::default() });
            std::fs::write(root.join(name), body(n)).unwrap();
        }
        std::fs::write(root.join(INDEX), serde_json::to_vec(&index).unwrap()).unwrap();
        // b.000002 gzipped whole: as archived
        let gz = root.join("b.000002.gz");
        let mut enc = flate2::write::GzEncoder::new(File::create(&gz).unwrap(), flate2::Compression::fast());
        std::io::Write::write_all(&mut enc, &body(5000)).unwrap();
        enc.finish().unwrap();
        std::fs::remove_file(root.join("b.000002")).unwrap();
        assert_eq!(cut_file_in(root).unwrap(), None);
        // cut: its trailer is gone
        let whole = std::fs::read(&gz).unwrap();
        std::fs::write(&gz, &whole[..whole.len() - 5]).unwrap();
        let why = cut_file_in(root).unwrap().expect("a cut gzip file");
        assert!(why.contains("b.000002.gz's gzip trailer does not give the 5004 bytes"), "{why}");
        std::fs::write(&gz, &whole[..3]).unwrap();
        assert!(cut_file_in(root).unwrap().is_some(), "too short for a trailer");
        // gone from between b.000001 and b.000003
        std::fs::remove_file(&gz).unwrap();
        let why = cut_file_in(root).unwrap().expect("a hole");
        assert!(why.contains("b.000002 is listed complete") && why.contains("older b.000001"), "{why}");
        // the oldest ones gone: retention's, not a hole
        std::fs::remove_file(root.join("b.000001")).unwrap();
        assert_eq!(cut_file_in(root).unwrap(), None);
    }

    /// A complete file of the spool cut after it was archived: the archiver does not start
    /// (it would upload the cut copy, and readers take its end for the file's).
    #[test]
    fn a_complete_file_cut_after_it_was_archived_stops_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/pipeline/mysql-bin.000001")).unwrap();
        std::fs::write(dir.path().join("mysql-bin.000001"), &file).unwrap();
        std::fs::write(dir.path().join("mysql-bin.000002"), MAGIC).unwrap();
        let (a, _) = DirArchive::open(dir.path(), false, None).unwrap();
        drop(a);
        assert!(read_index(dir.path()).unwrap()[0].complete);
        std::fs::write(dir.path().join("mysql-bin.000001"), &file[..file.len() - 40]).unwrap();
        let Err(e) = DirArchive::open(dir.path(), false, None) else { panic!("started on a cut file") };
        assert!(e.contains("mysql-bin.000001 is") && e.contains("lists it complete"), "{e}");
        // restored: starts again
        std::fs::write(dir.path().join("mysql-bin.000001"), &file).unwrap();
        assert!(DirArchive::open(dir.path(), false, None).is_ok());
    }
}
