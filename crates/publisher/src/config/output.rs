//! `[output]`: what records look like.

#[allow(clippy::wildcard_imports)]
use super::*;

/// What records look like.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueMode {
    /// `{before, after, op, ts_ms, source, transaction}`.
    #[default]
    Envelope,
    /// The after-image's columns plus `__op` and `__deleted`, for sinks that want plain rows.
    Flattened,
}

/// `[output]`
#[derive(Debug, Clone, Deserialize)]
pub struct OutputSection {
    /// `envelope` (default) or `flattened`.
    #[serde(default)]
    pub value_mode: ValueMode,
    /// Write a tombstone (null value, same key) after each delete, so compacted topics drop
    /// the row.
    #[serde(default = "yes")]
    pub tombstones: bool,
    /// Key columns for tables without a primary key, by `db.table`. A table without a
    /// primary key and without an entry here gets a null key (records are then spread over
    /// partitions without per-row ordering): Sluice never guesses a key.
    #[serde(default)]
    pub key_columns: BTreeMap<String, Vec<String>>,
    /// Publish partial row images (`binlog_row_image=MINIMAL` or `NOBLOB`, where the server
    /// leaves out columns it did not change or need). When true, every row field is nullable
    /// and each row record carries `__absent`, the names of the fields the image did not have
    /// (their null is "not logged", not SQL NULL); a key column missing from an update's after
    /// image is the unchanged key of the before image. When false (default) the schemas stay
    /// strict and a partial image stops the publisher with an error naming the table, column
    /// and binlog position: set `binlog_row_image=FULL` on the server or enable this.
    /// Switching it changes every table's value schema (BACKWARD compatible: fields become
    /// nullable, `__absent` has a default).
    #[serde(default)]
    pub partial_images: bool,
    /// ENUM columns as Avro strings (the member names listed in the field's `sluice.allowed`
    /// property) instead of Avro enums. Needed when a table holds MySQL's empty error value
    /// (index 0, written by non-strict `sql_mode`), which has no Avro enum symbol: it becomes
    /// `""`. Switching it changes the value schemas of tables with ENUM columns.
    #[serde(default)]
    pub enums_as_strings: bool,
}

impl Default for OutputSection {
    fn default() -> Self {
        OutputSection {
            value_mode: ValueMode::Envelope,
            tombstones: true,
            key_columns: BTreeMap::new(),
            partial_images: false,
            enums_as_strings: false,
        }
    }
}

impl OutputSection {
    pub(super) fn validate(&self, p: &mut Problems) {
        for (table, cols) in &self.key_columns {
            if table.split('.').count() != 2 || cols.is_empty() {
                p.push(format!("output.key_columns.{table}"), "must be \"db.table\" = [\"col\", ...]");
            }
        }
    }
}
