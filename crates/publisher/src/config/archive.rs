//! `[archive]`: where `sluice archive` keeps the server's binlog files.

#[allow(clippy::wildcard_imports)]
use super::*;

/// `[archive]`
#[derive(Debug, Clone, Deserialize)]
pub struct ArchiveSection {
    /// Where the binlog files are copied, under the server's own file names: a directory
    /// (created when missing), or an object store URL (`s3://bucket/prefix`, `gs://bucket/prefix`,
    /// `az://container/prefix`), which then needs `spool`. One archive per server: two archivers
    /// must not share it.
    pub to: String,
    /// With an object store in `to`: the local directory the files are written to first (the
    /// file being written stays here; each completed one is uploaded, checked, and removed but
    /// for the newest). It keeps the archive's lock and index; a spool that lost them (a new
    /// volume) continues after the newest file the store's index lists.
    #[serde(default)]
    pub spool: Option<PathBuf>,
    /// With an object store in `to`: a file of `key = value` lines with its credentials and
    /// options, in `object_store`'s names (`aws_access_key_id`, `aws_secret_access_key`,
    /// `aws_region`, `aws_endpoint`, `google_service_account`, `azure_storage_account_key`, ...;
    /// a mounted secret). Without it, or for what it does not set, the environment's `AWS_*`,
    /// `GOOGLE_*` and `AZURE_*` variables are used. Never printed.
    #[serde(default)]
    pub credentials_file: Option<PathBuf>,
    /// The archiver's replica server id: unique among the server's replicas, and not
    /// `source.server_id` (`sluice run` replicates beside it with that one).
    #[serde(default = "default_archive_server_id")]
    pub server_id: u32,
    /// Where an empty archive starts: `earliest` (the oldest file the server still has) or
    /// `current` (the beginning of the file the server writes now). A non-empty archive always
    /// continues from its newest file.
    #[serde(default)]
    pub start: ArchiveStart,
    /// Warn (alert `SluiceArchiveNearPurge`) when the server's binlog files older than the one
    /// being archived add up to less than this (e.g. `"1GiB"`): the server's next purges would
    /// remove a file the archive has not copied whole. Exported as
    /// `sluice_archive_purge_margin_warn_bytes`.
    #[serde(default = "default_warn_margin", deserialize_with = "byte_size")]
    pub warn_margin: u64,
    /// `gzip`: a completed file is replaced by `<name>.gz` (on a thread of its own, once the file
    /// is whole and synced; `sluice dump` reads gzip files as they are, and the index names the
    /// stored file). `none` (default): files stay as the server wrote them.
    #[serde(default)]
    pub compress: ArchiveCompress,
    /// Retention by age (e.g. `"30d"`): completed files whose newest event is older are removed
    /// (from the directory, or from the object store), oldest first, checked every minute.
    /// Unset: kept for good. The newest completed file is always kept, and with an object store
    /// a file is only removed once uploaded. A pipeline whose checkpoint is older than this
    /// cannot catch up from the archive: keep it longer than any outage you want to survive.
    #[serde(default, with = "humantime_serde")]
    pub keep_for: Option<Duration>,
    /// Retention by size (e.g. `"500GiB"`): the oldest completed files are removed while the
    /// archive's files add up to more. Unset: no limit. As `keep_for`, never the newest
    /// completed file.
    #[serde(default, deserialize_with = "opt_byte_size")]
    pub keep_size: Option<u64>,
}

/// `archive.compress`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArchiveCompress {
    /// Files as the server wrote them.
    #[default]
    None,
    /// Completed files gzip-compressed.
    Gzip,
}

/// `archive.start`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArchiveStart {
    /// The oldest file the server has.
    #[default]
    Earliest,
    /// The beginning of the file the server is writing.
    Current,
}

fn default_warn_margin() -> u64 {
    1 << 30
}

fn default_archive_server_id() -> u32 {
    51_003
}

impl ArchiveSection {
    pub(super) fn validate(&self, source: Option<&SourceSection>, p: &mut Problems) {
        if self.to.trim().is_empty() {
            p.push("archive.to", "must name a directory or an object store URL");
        }
        let url = crate::archive::store::is_url(&self.to);
        if url && self.spool.is_none() {
            p.push(
                "archive.spool",
                "is needed with an object store in archive.to: a local directory for the file being written",
            );
        }
        if !url && self.spool.is_some() {
            p.push(
                "archive.spool",
                "goes with an object store in archive.to only (a directory archive is its own spool)",
            );
        }
        if let Some(f) = self.credentials_file.as_ref().filter(|f| !f.exists()) {
            p.push("archive.credentials_file", format!("{} does not exist", f.display()));
        }
        if self.keep_for.is_some_and(|d| d < Duration::from_secs(3600)) {
            p.push("archive.keep_for", "must be at least 1h (it is a retention, not a buffer)");
        }
        if self.keep_size == Some(0) {
            p.push("archive.keep_size", "must be more than 0 (unset: no limit)");
        }
        if url {
            if let Err(e) = crate::archive::store::check_url(&self.to) {
                p.push("archive.to", e);
            }
        } else if std::path::Path::new(&self.to).exists() && !std::path::Path::new(&self.to).is_dir() {
            p.push(
                "archive.to",
                format!("{} is a file: give a directory (made when missing) or an object store URL", self.to),
            );
        } else if let Ok(Some(why)) = crate::archive::dir::server_binlog_dir(std::path::Path::new(&self.to)) {
            p.push("archive.to", why);
        }
        if self.server_id == 0 {
            p.push("archive.server_id", "must not be 0");
        }
        if source.is_some_and(|s| s.server_id == self.server_id) {
            p.push(
                "archive.server_id",
                "is source.server_id: the archiver replicates beside sluice run and needs an id of its own (the \
                 server drops a replica whose id another connects with)",
            );
        }
    }
}
