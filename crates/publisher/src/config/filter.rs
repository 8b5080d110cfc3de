//! `[filter]` and `[[routes]]`: which tables and columns are captured, and their topics.

#[allow(clippy::wildcard_imports)]
use super::*;

/// `[filter]`: patterns are `db.table` (or a table name in any database) with `*` and `?`
/// wildcards.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct FilterSection {
    /// Capture only tables matching one of these (default: all).
    #[serde(default)]
    pub include: Vec<String>,
    /// Never capture tables matching one of these (wins over `include`).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Leave these columns out of records: `db.table.column` patterns.
    #[serde(default)]
    pub exclude_columns: Vec<String>,
}

/// A routing rule: tables matching `tables` go to `topic`.
#[derive(Debug, Clone, Deserialize)]
pub struct Route {
    /// `db.table` pattern with wildcards.
    pub tables: String,
    /// Topic name; `{db}` and `{table}` are replaced.
    pub topic: String,
}

impl FilterSection {
    pub(super) fn validate(&self, p: &mut Problems) {
        for (key, patterns) in [("filter.include", &self.include), ("filter.exclude", &self.exclude)] {
            for pattern in patterns {
                if let Some(m) = table_pattern_problem(pattern) {
                    p.push(key, m);
                }
            }
        }
        for c in &self.exclude_columns {
            if c.split('.').count() != 3 || c.split('.').any(str::is_empty) {
                p.push("filter.exclude_columns", format!("{c:?} must be \"db.table.column\" (wildcards allowed)"));
            }
        }
    }
}

impl Route {
    pub(super) fn validate(&self, index: usize, p: &mut Problems) {
        if self.topic.is_empty() {
            p.push(format!("routes[{index}].topic"), format!("the route for {:?} has an empty topic", self.tables));
        }
        let literal = self.topic.replace("{db}", "").replace("{table}", "");
        if let Some(c) = literal.chars().find(|c| !(c.is_ascii_alphanumeric() || "._-".contains(*c))) {
            p.push(
                format!("routes[{index}].topic"),
                format!(
                    "{:?} has {c:?}, which Kafka does not allow in a topic name (letters, digits, '.', '_', '-'; \
                     {{db}} and {{table}} are made valid)",
                    self.topic
                ),
            );
        }
        if let Some(m) = table_pattern_problem(&self.tables) {
            p.push(format!("routes[{index}].tables"), m);
        }
    }
}
