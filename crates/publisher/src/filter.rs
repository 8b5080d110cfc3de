//! Which tables and columns are captured: **one matcher** for `sluice dump`'s `--database` and
//! `--table`, `sluice run`'s `[filter]` (include, exclude, exclude_columns) and the topic
//! routes, so a pattern means the same everywhere.
//!
//! A table pattern is `db.table` or `table` (any database), each part with `*` (any run) and
//! `?` (one character) wildcards, split at its first dot: MariaDB allows a dot inside a table
//! name (`shop.we.ird` is table `we.ird` of `shop`), not in a database name Sluice can name.
//! Matching is case-sensitive, like table names on Linux servers.

use crate::config::FilterSection;

/// Databases and tables to keep; empty lists keep everything.
#[derive(Debug, Clone, Default)]
pub struct TableFilter {
    databases: Vec<String>,
    include: Vec<String>,
    exclude: Vec<String>,
    exclude_columns: Vec<String>,
}

impl TableFilter {
    /// `sluice dump`'s `--database` and `--table` patterns (a table passes when its database
    /// matches one of the first, if any, and it matches one of the second, if any).
    pub fn new(databases: Vec<String>, tables: Vec<String>) -> TableFilter {
        TableFilter { databases, include: tables, ..TableFilter::default() }
    }

    /// `[filter]`: include (default all), exclude (wins), and the columns left out.
    pub fn from_config(f: &FilterSection) -> TableFilter {
        TableFilter {
            databases: Vec::new(),
            include: f.include.clone(),
            exclude: f.exclude.clone(),
            exclude_columns: f.exclude_columns.clone(),
        }
    }

    /// True when `db.table` passes.
    pub fn matches(&self, db: &str, table: &str) -> bool {
        (self.databases.is_empty() || self.databases.iter().any(|p| wildcard(p, db)))
            && (self.include.is_empty() || self.include.iter().any(|p| table_matches(p, db, table)))
            && !self.exclude.iter().any(|p| table_matches(p, db, table))
    }

    /// The column-name patterns `exclude_columns` names for `db.table` (its entries are
    /// `db.table.column`, each part a wildcard pattern).
    pub fn excluded_columns(&self, db: &str, table: &str) -> Vec<String> {
        self.exclude_columns
            .iter()
            .filter_map(|p| {
                let mut parts = p.splitn(3, '.');
                let (d, t, c) = (parts.next()?, parts.next()?, parts.next()?);
                (wildcard(d, db) && wildcard(t, table)).then(|| c.to_string())
            })
            .collect()
    }
}

/// True when `db.table` matches a table pattern (`db.table`, or a table name in any database).
pub fn table_matches(pattern: &str, db: &str, table: &str) -> bool {
    match pattern.split_once('.') {
        Some((pd, pt)) => wildcard(pd, db) && wildcard(pt, table),
        None => wildcard(pattern, table),
    }
}

/// Glob match with `*` (any run) and `?` (one character), iterative with backtracking to the
/// last `*` (linear in practice, no recursion). Walks both strings in place, by byte offset a
/// character at a time: the pipeline asks once per rows event, and collecting the characters
/// first cost two allocations each time (about a thousand instructions a rows event).
pub fn wildcard(pattern: &str, text: &str) -> bool {
    let at = |s: &str, i: usize| s.get(i..).and_then(|rest| rest.chars().next());
    let (mut pi, mut ti) = (0usize, 0usize);
    // the last `*`'s offset, and the text's offset it is taken to reach so far
    let mut star: Option<(usize, usize)> = None;
    while let Some(tc) = at(text, ti) {
        match at(pattern, pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(pc) if pc == '?' || pc == tc => {
                pi += pc.len_utf8();
                ti += tc.len_utf8();
            }
            _ => match star {
                Some((sp, st)) => {
                    // the `*` takes one more character of the text
                    let next = st + at(text, st).map_or(1, char::len_utf8);
                    pi = sp + 1;
                    ti = next;
                    star = Some((sp, next));
                }
                None => return false,
            },
        }
    }
    pattern.get(pi..).is_some_and(|rest| rest.chars().all(|c| c == '*'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(wildcard("shop*", "shop_eu"));
        assert!(wildcard("*", ""));
        assert!(wildcard("a?c", "abc"));
        assert!(!wildcard("a?c", "ac"));
        assert!(wildcard("*orders*", "old_orders_2024"));
        assert!(!wildcard("orders", "orders2"));
        assert!(wildcard("a*b*c", "axxbyyc"));
        assert!(!wildcard("a*b*c", "axxbyy"));
        // characters of more than one byte: `?` is one character, `*` backtracks by characters
        assert!(wildcard("caf?", "café"));
        assert!(!wildcard("caf??", "café"));
        assert!(wildcard("*é*", "ééxé"));
        assert!(wildcard("ü*ü", "üxyü"));
        assert!(!wildcard("ü*ü", "üxyu"));
        assert!(wildcard("*?", "€"));
        assert!(!wildcard("?", ""));
        assert!(wildcard("**", ""));
    }

    /// The in-place walk answers as matching over collected characters does (the way it was
    /// written before), for every pattern and text up to four characters of small alphabets
    /// with a two-byte character.
    #[test]
    fn wildcard_agrees_with_matching_over_characters() {
        fn by_chars(pattern: &str, text: &str) -> bool {
            let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
            let (mut pi, mut ti, mut star) = (0usize, 0usize, None::<(usize, usize)>);
            while ti < t.len() {
                match p.get(pi) {
                    Some('*') => {
                        star = Some((pi, ti));
                        pi += 1;
                    }
                    Some(&c) if c == '?' || Some(&c) == t.get(ti) => {
                        pi += 1;
                        ti += 1;
                    }
                    _ => match star {
                        Some((sp, st)) => {
                            (pi, ti, star) = (sp + 1, st + 1, Some((sp, st + 1)));
                        }
                        None => return false,
                    },
                }
            }
            p.get(pi..).is_some_and(|rest| rest.iter().all(|&c| c == '*'))
        }
        fn all(alphabet: &[char], max: usize) -> Vec<String> {
            let mut out = vec![String::new()];
            let mut last = vec![String::new()];
            for _ in 0..max {
                last = last.iter().flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}"))).collect();
                out.extend(last.iter().cloned());
            }
            out
        }
        let (patterns, texts) = (all(&['a', 'é', '*', '?'], 4), all(&['a', 'b', 'é'], 4));
        let mut matched = 0;
        for p in &patterns {
            for t in &texts {
                assert_eq!(wildcard(p, t), by_chars(p, t), "pattern {p:?}, text {t:?}");
                matched += usize::from(wildcard(p, t));
            }
        }
        assert!(matched > 1000, "{matched}");
    }

    #[test]
    fn table_patterns() {
        let f = TableFilter::new(vec![], vec!["shop.ord*".into(), "users".into()]);
        assert!(f.matches("shop", "orders"));
        assert!(!f.matches("crm", "orders"));
        assert!(f.matches("crm", "users"));
        let f = TableFilter::new(vec!["crm".into()], vec![]);
        assert!(f.matches("crm", "x"));
        assert!(!f.matches("shop", "x"));
        assert!(TableFilter::default().matches("a", "b"));
        assert!(table_matches("shop.*", "shop", "orders"));
        assert!(!table_matches("shop.*", "crm", "orders"));
        assert!(table_matches("orders", "any", "orders"));
    }

    #[test]
    fn config_filters_and_excluded_columns() {
        let f = TableFilter::from_config(&FilterSection {
            include: vec!["shop.*".into()],
            exclude: vec!["shop.tmp_*".into()],
            exclude_columns: vec!["shop.customers.password*".into(), "*.*.ssn".into(), "crm.x.y".into()],
        });
        assert!(f.matches("shop", "orders"));
        assert!(!f.matches("shop", "tmp_1"), "exclude wins");
        assert!(!f.matches("crm", "orders"));
        assert_eq!(f.excluded_columns("shop", "customers"), ["password*", "ssn"]);
        assert_eq!(f.excluded_columns("shop", "orders"), ["ssn"]);
    }
}
