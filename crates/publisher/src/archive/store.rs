//! **An archive in object storage** (`s3://bucket/prefix`, `gs://…`, `az://…`, `file:///…`),
//! through the `object_store` crate: the same layout as a directory (each completed file
//! under the server's name, or `<name>.gz`, and `index.json`), written by [`Uploader`] from the
//! archiver's local spool directory, read back by [`Remote`].
//!
//! Credentials come from the environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`, as the providers'
//! own tools read them) and from an optional file of `key = value` lines (a mounted secret),
//! whose keys are `object_store`'s (`aws_access_key_id`, `aws_secret_access_key`,
//! `aws_endpoint`, `aws_region`, ...). They are never printed: [`Remote`] shows its URL with any
//! user information masked.
//!
//! An object appears whole or not at all (a put, or a multipart upload completed), so a reader
//! never sees a torn file; the index is replaced whole after the files it lists are up.

use std::io::{Read, Seek, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::copy::FileSummary;
use super::layout::Refusal;
use super::layout::{in_range, lacking, order_key, Range, INDEX};

/// Bytes per request when uploading or downloading a file (S3 wants multipart parts of at least
/// 5 MiB but the last).
const PART: usize = 8 << 20;

/// An archive in object storage.
#[derive(Clone)]
pub struct Remote {
    /// The URL, user information masked (for messages).
    shown: String,
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl std::fmt::Display for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

/// True when `text` names an object store (a URL) rather than a directory.
pub fn is_url(text: &str) -> bool {
    text.contains("://")
}

/// The URL schemes of the stores Sluice is built with.
const SCHEMES: &[&str] = &["s3", "s3a", "gs", "az", "adl", "azure", "abfs", "abfss", "file", "memory"];

/// Whether `url` names a store Sluice can use (by its form; credentials are checked at use).
///
/// # Errors
/// Not a URL, or a scheme of no supported store.
pub fn check_url(url: &str) -> Result<(), String> {
    let u = url::Url::parse(url.trim()).map_err(|e| format!("{:?} is not a URL ({e})", mask(url)))?;
    if !u.username().is_empty() || u.password().is_some() || u.query().is_some() {
        return Err(format!(
            "{}: an archive URL carries no user, password or query (credentials go in credentials_file or the \
             environment)",
            mask(url)
        ));
    }
    if SCHEMES.contains(&u.scheme()) {
        Ok(())
    } else {
        Err(format!(
            "{}: {}:// is not a store Sluice knows (s3://bucket/prefix, gs://bucket/prefix, az://container/prefix, \
             file:///path)",
            mask(url),
            u.scheme()
        ))
    }
}

/// Whether `key` is one of the options the store of URL scheme `scheme` takes.
fn known_key(scheme: &str, key: &str) -> bool {
    match scheme {
        "s3" | "s3a" => key.parse::<object_store::aws::AmazonS3ConfigKey>().is_ok(),
        "gs" => key.parse::<object_store::gcp::GoogleConfigKey>().is_ok(),
        "az" | "adl" | "azure" | "abfs" | "abfss" => key.parse::<object_store::azure::AzureConfigKey>().is_ok(),
        _ => false,
    }
}

impl Remote {
    /// The archive at `url`, with credentials from the environment and `credentials_file`.
    ///
    /// # Errors
    /// Not a URL of a supported store, an unreadable credentials file, a store the URL and
    /// options do not configure (no bucket, no region...).
    pub fn open(url: &str, credentials_file: Option<&Path>) -> Result<Remote, String> {
        check_url(url)?;
        // object_store makes its own HTTPS client: it takes rustls's process-wide provider, the
        // same ring the MySQL and Elasticsearch connections use (an error: one is installed)
        let _ = rustls::crypto::ring::default_provider().install_default();
        let parsed = url::Url::parse(url.trim()).map_err(|e| format!("{:?} is not a URL ({e})", mask(url)))?;
        let shown = mask(url);
        let mut options: Vec<(String, String)> = crate::process::env_vars(&["AWS_", "GOOGLE_", "AZURE_"])?
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect();
        if let Some(f) = credentials_file {
            let text = std::fs::read_to_string(f)
                .map_err(|e| format!("cannot read the credentials file {}: {e}", f.display()))?;
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let Some((k, v)) = line.split_once('=') else {
                    return Err(format!(
                        "{} line {}: not `key = value` (keys as object_store names them: aws_access_key_id, ...)",
                        f.display(),
                        n + 1
                    ));
                };
                let v = v.trim().trim_matches('"');
                let k = k.trim().to_ascii_lowercase();
                // the store's client passes over a key it does not know: a misspelt one would
                // only show as credentials missing, or as an endpoint or option not taken
                if !known_key(parsed.scheme(), &k) {
                    return Err(format!(
                        "{} line {}: {k:?} is not an option of {}:// stores (misspelt? keys as object_store names \
                         them: aws_access_key_id, aws_secret_access_key, aws_region, aws_endpoint, ...)",
                        f.display(),
                        n + 1,
                        parsed.scheme()
                    ));
                }
                options.push((k, v.to_string()));
            }
        }
        // an endpoint the store's client cannot parse makes it panic, and one with a password in
        // it would be printed in every error message
        for (k, v) in &options {
            if k.ends_with("endpoint") || k.ends_with("endpoint_url") {
                let ok = url::Url::parse(v).ok().filter(|u| {
                    matches!(u.scheme(), "http" | "https")
                        && u.host().is_some()
                        && u.username().is_empty()
                        && u.password().is_none()
                });
                if ok.is_none() {
                    return Err(format!(
                        "{shown}: {k} must be an http:// or https:// URL with a host and no user or password (as \
                         https://s3.example.com:9000)"
                    ));
                }
            }
        }
        let (store, prefix) = object_store::parse_url_opts(&parsed, options)
            .map_err(|e| format!("{shown}: cannot use this object store: {e}"))?;
        Ok(Remote { shown, store: Arc::from(store), prefix })
    }

    fn path(&self, name: &str) -> ObjectPath {
        self.prefix.clone().join(name)
    }

    fn fail(&self, what: &str, name: &str, e: impl std::fmt::Display) -> String {
        store_error(format!("{what} {name} in {self}"), e)
    }

    /// The archive's index (empty when it has none yet).
    ///
    /// # Errors
    /// The store fails, or the index does not read.
    pub async fn index(&self) -> Result<Vec<FileSummary>, String> {
        match self.store.get(&self.path(INDEX)).await {
            Ok(r) => {
                let body = r.bytes().await.map_err(|e| self.fail("reading", INDEX, e))?;
                serde_json::from_slice(&body).map_err(|e| {
                    format!("{INDEX} in {self} is not an archive's index (damaged, or another program's file?): {e}")
                })
            }
            Err(object_store::Error::NotFound { .. }) => Ok(Vec::new()),
            Err(e) => Err(self.fail("reading", INDEX, e)),
        }
    }

    /// The binlog files the archive holds: the server's name and the object holding it
    /// (`<name>.gz` when compressed), in the server's order.
    ///
    /// # Errors
    /// The store fails.
    pub async fn files(&self) -> Result<Vec<(String, String)>, String> {
        let listed = self
            .store
            .list_with_delimiter(Some(&self.prefix))
            .await
            .map_err(|e| store_error(format!("listing {self}"), e))?;
        let mut out: Vec<(String, String)> = Vec::new();
        for meta in listed.objects {
            let Some(object) = meta.location.filename().map(str::to_string) else { continue };
            let name = object.strip_suffix(".gz").unwrap_or(&object).to_string();
            let numbered =
                name.rsplit_once('.').is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            if !numbered || object.starts_with('.') {
                continue;
            }
            match out.iter_mut().find(|(n, _)| *n == name) {
                Some(o) if object.ends_with(".gz") => o.1 = object,
                Some(_) => {}
                None => out.push((name, object)),
            }
        }
        out.sort_by_key(|(n, _)| order_key(n));
        Ok(out)
    }

    /// Object `object` downloaded into an anonymous temporary file (rewound); None when the
    /// store does not have it.
    ///
    /// # Errors
    /// The store or the local disk fails.
    pub async fn download(&self, object: &str) -> Result<Option<std::fs::File>, String> {
        let mut file = tempfile::tempfile().map_err(|e| format!("making a temporary file for {object}: {e}"))?;
        if !self.download_into(object, &mut file).await? {
            return Ok(None);
        }
        file.rewind().map_err(|e| format!("reading a temporary copy of {object}: {e}"))?;
        Ok(Some(file))
    }

    /// Writes object `object` into `out`, in ranged reads of [`PART`] bytes; false when the
    /// store does not have it.
    ///
    /// # Errors
    /// The store or `out` fails.
    pub async fn download_into(&self, object: &str, out: &mut std::fs::File) -> Result<bool, String> {
        let path = self.path(object);
        let size = match self.store.head(&path).await {
            Ok(m) => m.size,
            Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(self.fail("reading", object, e)),
        };
        let mut at = 0u64;
        while at < size {
            let end = (at + PART as u64).min(size);
            let part = self.store.get_range(&path, at..end).await.map_err(|e| self.fail("reading", object, e))?;
            out.write_all(&part).map_err(|e| format!("writing a local copy of {object}: {e}"))?;
            at = end;
        }
        Ok(true)
    }

    /// Downloads the files of the archive that may hold what `range` asks (by the index) into
    /// `dir`, under their stored names; their paths, oldest first.
    ///
    /// # Errors
    /// The store or the local disk fails ([`Refusal::Unreadable`]); a file of the range gone
    /// from the store, or of another size than the index lists it complete at
    /// ([`Refusal::Damaged`]): read on, the dump would skip its changes without a word.
    pub async fn download_range(&self, dir: &Path, range: &Range) -> Result<Vec<std::path::PathBuf>, Refusal> {
        let index = self.index().await?;
        let files = self.files().await?;
        if files.is_empty() {
            return Err(
                format!("there is no archive at {self}: no binlog file, no index.json (a wrong prefix?)").into()
            );
        }
        let chosen = in_range(&index, files.clone(), range)?;
        if let Some(why) = lacking(&index, &files, &chosen, range) {
            return Err(Refusal::Damaged(why));
        }
        let mut paths = Vec::new();
        for object in chosen {
            let path = dir.join(&object);
            let mut f = std::fs::File::create(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
            if !self.download_into(&object, &mut f).await? {
                let _ = std::fs::remove_file(&path);
                // the oldest removed since the listing is the archiver's retention
                if paths.is_empty() {
                    continue;
                }
                return Err(Refusal::Damaged(format!(
                    "{object} in {self} was removed while the dump read the archive: its changes would be missing. \
                     Dump again, or restore it from a copy of the archive"
                )));
            }
            let name = object.strip_suffix(".gz").unwrap_or(&object);
            if let Some(s) = index.iter().find(|s| s.complete && s.file == name) {
                let shown = format!("{object} in {self}");
                let problem = super::layout::size_problem(&path, name != object, s.size, &shown)
                    .map_err(|e| format!("reading the copy of {shown} in {}: {e}", path.display()))?;
                if let Some(what) = problem {
                    return Err(Refusal::Damaged(format!(
                        "{what} the archive's index lists it complete at: it was cut or changed after it was \
                         archived. Restore it from a copy of the archive (or dump the server's own file)"
                    )));
                }
            }
            paths.push(path);
        }
        Ok(paths)
    }

    /// Uploads the local file `local` as `object` (whole, or in parts for a large one) and
    /// checks the size the store then reports.
    ///
    /// # Errors
    /// The store or the local disk fails, or the stored size differs.
    pub async fn upload(&self, local: &Path, object: &str) -> Result<u64, String> {
        let path = self.path(object);
        let mut f = std::fs::File::open(local).map_err(|e| format!("reading {}: {e}", local.display()))?;
        let size = f.metadata().map_err(|e| format!("reading {}: {e}", local.display()))?.len();
        let read = |f: &mut std::fs::File| -> Result<Vec<u8>, String> {
            let mut buf = Vec::with_capacity(PART);
            Read::by_ref(f)
                .take(PART as u64)
                .read_to_end(&mut buf)
                .map_err(|e| format!("reading {}: {e}", local.display()))?;
            Ok(buf)
        };
        if size <= PART as u64 {
            let body = read(&mut f)?;
            self.store.put(&path, PutPayload::from(body)).await.map_err(|e| self.fail("writing", object, e))?;
        } else {
            let mut upload = self.store.put_multipart(&path).await.map_err(|e| self.fail("writing", object, e))?;
            let parts = async {
                loop {
                    let part = read(&mut f)?;
                    if part.is_empty() {
                        return Ok::<(), String>(());
                    }
                    upload.put_part(PutPayload::from(part)).await.map_err(|e| self.fail("writing", object, e))?;
                }
            }
            .await;
            if let Err(e) = parts {
                let _ = upload.abort().await;
                return Err(e);
            }
            upload.complete().await.map_err(|e| self.fail("writing", object, e))?;
        }
        let stored = self.store.head(&path).await.map_err(|e| self.fail("checking", object, e))?.size;
        if stored != size {
            return Err(format!("{object} in {self}: the store holds {stored} bytes of {size}"));
        }
        Ok(size)
    }

    /// Removes `objects` (gone already counts as removed).
    ///
    /// # Errors
    /// The store fails.
    pub async fn delete(&self, objects: &[String]) -> Result<(), String> {
        for o in objects {
            match self.store.delete(&self.path(o)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.fail("removing", o, e)),
            }
        }
        Ok(())
    }

    /// Replaces the archive's index.
    ///
    /// # Errors
    /// The store fails.
    pub async fn put_index(&self, index: &[FileSummary]) -> Result<(), String> {
        let body = serde_json::to_vec_pretty(index).map_err(|e| e.to_string())?;
        self.store.put(&self.path(INDEX), PutPayload::from(body)).await.map_err(|e| self.fail("writing", INDEX, e))?;
        Ok(())
    }
}

/// `url` with any user information (`user:secret@`) masked.
fn mask(url: &str) -> String {
    match url::Url::parse(url.trim()) {
        Ok(mut u) => {
            if !u.username().is_empty() || u.password().is_some() {
                let _ = u.set_username("***");
                let _ = u.set_password(None);
            }
            if u.query().is_some() {
                u.set_query(Some("***"));
            }
            u.to_string()
        }
        Err(_) => "(an unreadable URL)".to_string(),
    }
}

/// What the archiver asks of [`Uploader`].
enum Job {
    /// Upload the spool's file `stored` (the server's file `name`).
    File { name: String, stored: String },
    /// Replace the store's index (the files already uploaded).
    Index(Vec<FileSummary>),
    /// Remove these objects (the archive's retention).
    Delete(Vec<String>),
    /// Say when the jobs before are done.
    Barrier(std::sync::mpsc::Sender<()>),
}

/// Uploads completed files from the archiver's spool directory on a thread of its own (its own
/// small runtime), one after another, retrying failures with backoff until they succeed or the
/// archiver stops (a file left then is uploaded at the next start); the names of the files
/// uploaded come back to the archiver, which then lists them as uploaded and removes its
/// local copies.
pub struct Uploader {
    jobs: Option<std::sync::mpsc::Sender<Job>>,
    /// Set when the archiver stops: a failing upload is then left for the next start.
    stopping: Arc<std::sync::atomic::AtomicBool>,
    /// The server's names of the files uploaded.
    pub(super) done: std::sync::mpsc::Receiver<String>,
    worker: Option<std::thread::JoinHandle<()>>,
    remote: Remote,
    /// How long a stop waits for the store.
    stop_wait: Duration,
    /// Set when a stop began: [`Uploader::drain`] and [`Uploader::finish`] wait until then.
    give_up_at: std::sync::OnceLock<Instant>,
    said_gave_up: std::sync::atomic::AtomicBool,
}

/// How long a stop waits for the uploads queued: under the chart's 30 s grace period.
const STOP_WAIT: Duration = Duration::from_secs(20);

impl std::fmt::Debug for Uploader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uploader").field("to", &self.remote).finish()
    }
}

impl Uploader {
    /// Starts the uploads to `remote` of files from the spool `root`.
    ///
    /// # Errors
    /// The runtime cannot be made.
    pub fn start(root: &Path, remote: Remote) -> Result<Uploader, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("starting the uploads: {e}"))?;
        let (jobs, rx) = std::sync::mpsc::channel::<Job>();
        let (tx, done) = std::sync::mpsc::channel();
        let (root, to) = (root.to_path_buf(), remote.clone());
        let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop = Arc::clone(&stopping);
        let worker = std::thread::spawn(move || {
            for job in rx {
                let mut wait = Duration::from_millis(250);
                let uploaded = loop {
                    let r = match &job {
                        Job::File { stored, .. } => rt.block_on(to.upload(&root.join(stored), stored)).map(|_| ()),
                        Job::Index(index) => rt.block_on(to.put_index(index)),
                        Job::Delete(objects) => rt.block_on(to.delete(objects)),
                        Job::Barrier(reply) => {
                            let _ = reply.send(());
                            Ok(())
                        }
                    };
                    match r {
                        Ok(()) => break true,
                        Err(e) if stop.load(std::sync::atomic::Ordering::Acquire) => {
                            tracing::warn!(error = %e, "Uploading to the archive's store failed; left for the next start");
                            break false;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, retry_in = ?wait, "Uploading to the archive's store failed");
                            std::thread::sleep(wait);
                            wait = (wait * 2).min(Duration::from_secs(30));
                        }
                    }
                };
                if let (Job::File { name, stored }, true) = (job, uploaded) {
                    tracing::info!(file = %name, object = %stored, to = %to, "Uploaded an archived file");
                    let _ = tx.send(name);
                }
            }
        });
        Ok(Uploader {
            jobs: Some(jobs),
            stopping,
            done,
            worker: Some(worker),
            remote,
            stop_wait: STOP_WAIT,
            give_up_at: std::sync::OnceLock::new(),
            said_gave_up: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Queues the spool's file `stored` (server's name `name`).
    pub fn push(&self, name: &str, stored: &str) {
        if let Some(j) = &self.jobs {
            let _ = j.send(Job::File { name: name.to_string(), stored: stored.to_string() });
        }
    }

    /// Queues a new index: the files already uploaded.
    pub fn index(&self, index: Vec<FileSummary>) {
        if let Some(j) = &self.jobs {
            let _ = j.send(Job::Index(index));
        }
    }

    /// Queues the removal of `objects` (the archive's retention).
    pub fn delete(&self, objects: Vec<String>) {
        if let (Some(j), false) = (&self.jobs, objects.is_empty()) {
            let _ = j.send(Job::Delete(objects));
        }
    }

    /// When a stop stops waiting for the store ([`STOP_WAIT`] after it began).
    fn give_up_at(&self) -> Instant {
        *self.give_up_at.get_or_init(|| Instant::now() + self.stop_wait)
    }

    /// Waits for the jobs queued so far; from now on a failing upload is not retried (the
    /// archiver is stopping). A store that does not answer is waited for [`STOP_WAIT`] at
    /// most, with [`Uploader::finish`]: its client tries a request for minutes, and a stop must
    /// come before the pod's grace period ends; what is left is done at the next start.
    pub fn drain(&self) {
        self.stopping.store(true, std::sync::atomic::Ordering::Release);
        if let Some(j) = &self.jobs {
            let (tx, rx) = std::sync::mpsc::channel();
            if j.send(Job::Barrier(tx)).is_ok() {
                let left = self.give_up_at().saturating_duration_since(Instant::now());
                if rx.recv_timeout(left) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                    self.gave_up();
                }
            }
        }
    }

    /// Waits for the uploads queued (each tried once more at most, until [`STOP_WAIT`] after
    /// the stop began) and ends the worker.
    pub fn finish(&mut self) {
        self.stopping.store(true, std::sync::atomic::Ordering::Release);
        self.jobs.take();
        let give_up_at = self.give_up_at();
        if let Some(w) = self.worker.take() {
            while !w.is_finished() && Instant::now() < give_up_at {
                std::thread::sleep(Duration::from_millis(20));
            }
            if w.is_finished() {
                let _ = w.join();
            } else {
                // left running: the process ends without it
                self.gave_up();
            }
        }
    }

    fn gave_up(&self) {
        if !self.said_gave_up.swap(true, std::sync::atomic::Ordering::AcqRel) {
            tracing::warn!(
                to = %self.remote,
                waited = ?self.stop_wait,
                "The archive's store did not finish the uploads in time; stopping without them: the files stay in \
                 the spool and are uploaded at the next start"
            );
        }
    }
}

impl Drop for Uploader {
    fn drop(&mut self) {
        self.finish();
    }
}

/// An object store's error, as a user can act on it: the attempt to fetch credentials from the
/// instance metadata address (what the AWS client tries when it finds none) says that none were
/// found, and an answer's body (a whole XML document) is cut short.
fn store_error(what: String, e: impl std::fmt::Display) -> String {
    let text = e.to_string();
    let hint = if text.contains("169.254.169.254") {
        " (no credentials were found, so the client asked the cloud's instance metadata: for S3 set \
         AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (AWS_ENDPOINT for an S3-compatible store), for GCS \
         GOOGLE_APPLICATION_CREDENTIALS, for Azure AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY; or give \
         a credentials file)"
    } else {
        ""
    };
    format!("{what}: {}{hint}", crate::console::shortened(&text, 600))
}

#[cfg(test)]
mod tests {
    use super::{store_error, Remote};

    /// A store's file of the range gone, or cut at an event boundary, after it was archived:
    /// the dump's download says so (damage, exit 65), as it does of a directory; before, it
    /// took the files left and the dump warned at most, exit 0.
    #[tokio::test]
    async fn a_file_gone_or_cut_from_the_store_is_damage() {
        use super::super::copy::{FileSummary, MAGIC};
        use super::super::layout::Refusal;
        use super::super::layout::{Range, INDEX};
        let store = tempfile::tempdir().unwrap();
        let root = store.path();
        let body = |n: usize| -> Vec<u8> { [MAGIC.as_slice(), &vec![7u8; n]].concat() };
        let mut index = Vec::new();
        for (i, name) in ["b.000001", "b.000002", "b.000003"].into_iter().enumerate() {
            let t = 100 * (u32::try_from(i).unwrap() + 1);
            index.push(FileSummary {
                file: name.into(),
                size: 104,
                complete: true,
                first_time: Some(t),
                last_time: Some(t + 10),
                remote: true,
                ..Default::default()
            });
            std::fs::write(root.join(name), body(100)).unwrap();
        }
        std::fs::write(root.join(INDEX), serde_json::to_vec(&index).unwrap()).unwrap();
        let remote = Remote::open(&format!("file://{}", root.display()), None).unwrap();
        let read = |range: Range| {
            let remote = remote.clone();
            async move {
                let into = tempfile::tempdir().unwrap();
                remote.download_range(into.path(), &range).await.map(|p| p.len())
            }
        };
        assert_eq!(read(Range::default()).await, Ok(3));
        // cut at what could be an event's end
        std::fs::write(root.join("b.000002"), body(60)).unwrap();
        let Err(Refusal::Damaged(e)) = read(Range::default()).await else { panic!("a cut file taken") };
        assert!(e.contains("b.000002 in file://") && e.contains("is 64 bytes, not the 104"), "{e}");
        // a range that does not need it is whole
        assert_eq!(read(Range { from: Some(300), ..Range::default() }).await, Ok(1));
        // gone, with its index entry or without
        std::fs::remove_file(root.join("b.000002")).unwrap();
        let Err(Refusal::Damaged(e)) = read(Range::default()).await else { panic!("a gone file skipped") };
        assert!(e.contains("b.000002 is listed complete") && e.contains("older b.000001"), "{e}");
        let Err(Refusal::Damaged(e)) = read(Range { from: Some(200), to: Some(250), ..Range::default() }).await else {
            panic!("the range's only file gone")
        };
        assert!(e.contains("b.000002 is listed complete"), "{e}");
        let without: Vec<_> = index.iter().filter(|s| s.file != "b.000002").cloned().collect();
        std::fs::write(root.join(INDEX), serde_json::to_vec(&without).unwrap()).unwrap();
        let Err(Refusal::Damaged(e)) = read(Range::default()).await else { panic!("a hole skipped") };
        assert!(e.contains("lacks the file(s) between b.000001 and b.000003"), "{e}");
        // the oldest gone (retention's) is no damage
        std::fs::write(root.join(INDEX), serde_json::to_vec(&index).unwrap()).unwrap();
        std::fs::write(root.join("b.000002"), body(100)).unwrap();
        std::fs::remove_file(root.join("b.000001")).unwrap();
        assert_eq!(read(Range::default()).await, Ok(2));
    }

    /// A misspelt key in the credentials file is named; before, the store's client passed over
    /// it and the archiver said only "Missing AccessKeyId" (or, for an endpoint, went to AWS).
    #[test]
    fn a_misspelt_credentials_key_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let creds = dir.path().join("s3");
        std::fs::write(&creds, "aws_acess_key_id = AKIA\naws_secret_access_key = hush-hush\naws_region = us-east-1\n")
            .unwrap();
        let e = Remote::open("s3://bucket/prefix", Some(&creds)).unwrap_err();
        assert!(e.contains("line 1") && e.contains("\"aws_acess_key_id\" is not an option of s3://"), "{e}");
        assert!(!e.contains("AKIA") && !e.contains("hush"), "{e}");
        std::fs::write(&creds, "aws_access_key_id = AKIA\nAWS_SECRET_ACCESS_KEY = hush-hush\naws_region = us-east-1\n")
            .unwrap();
        assert!(Remote::open("s3://bucket/prefix", Some(&creds)).is_ok());
        // an S3 key for a GCS store
        let e = Remote::open("gs://bucket/prefix", Some(&creds)).unwrap_err();
        assert!(e.contains("is not an option of gs://"), "{e}");
    }

    /// A store that takes the connection and never answers: a stop waits for it for the stop's
    /// budget, then goes (the file stays in the spool for the next start). Before, a SIGTERM
    /// waited for the store's client to give up, 180 s for each file queued.
    #[test]
    fn a_stop_does_not_wait_for_a_store_that_does_not_answer() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for c in listener.incoming() {
                held.push(c);
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let creds = dir.path().join("s3");
        std::fs::write(
            &creds,
            format!(
                "aws_access_key_id = a\naws_secret_access_key = b\naws_region = us-east-1\naws_endpoint = \
                 http://127.0.0.1:{port}\naws_allow_http = true\n"
            ),
        )
        .unwrap();
        let remote = Remote::open("s3://bucket/prefix", Some(&creds)).unwrap();
        let spool = dir.path().join("spool");
        std::fs::create_dir(&spool).unwrap();
        std::fs::write(spool.join("b.000001"), b"\xfebin").unwrap();
        let mut u = super::Uploader::start(&spool, remote).unwrap();
        u.stop_wait = std::time::Duration::from_secs(1);
        u.push("b.000001", "b.000001");
        std::thread::sleep(std::time::Duration::from_millis(200));
        let t = std::time::Instant::now();
        u.drain();
        u.finish();
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "the stop took {:?}", t.elapsed());
        assert!(u.done.try_recv().is_err(), "nothing uploaded");
    }

    /// No credentials: said, with what to set; a long answer cut short.
    #[test]
    fn store_errors_say_what_to_do() {
        let e = store_error(
            "reading index.json in s3://b/p".into(),
            "Error performing PUT http://169.254.169.254/latest/api/token: 403",
        );
        assert!(e.starts_with("reading index.json in s3://b/p: Error performing PUT"), "{e}");
        assert!(e.contains("set AWS_ACCESS_KEY_ID"), "{e}");
        let e = store_error("listing s3://b/p".into(), "x".repeat(5000));
        assert!(e.len() < 700 && e.ends_with("..."), "{}", e.len());
        assert_eq!(store_error("w".into(), "short"), "w: short");
    }
}
