//! `[archive]`: where `sluice archive` keeps the server's binlog files.

#[allow(clippy::wildcard_imports)]
use super::*;

/// `[archive]`
#[derive(Debug, Clone, Deserialize)]
pub struct ArchiveSection {
    /// The directory the binlog files are copied into, under the server's own file names
    /// (created when missing). One archive per server: two archivers must not share it.
    pub to: PathBuf,
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
        if self.to.as_os_str().is_empty() {
            p.push("archive.to", "must name a directory");
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
