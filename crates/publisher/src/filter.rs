//! Include filters by database and table, with `*` and `?` wildcards.
//!
//! Used by `sluice dump` (`--database`, `--table`) and, later, by the publisher's routing.
//! A table pattern with a dot matches `db.table`; without one it matches the table name in
//! any database. Matching is case-sensitive, like table names on Linux servers.

/// Databases and tables to keep; empty lists keep everything.
#[derive(Debug, Clone, Default)]
pub struct TableFilter {
    databases: Vec<String>,
    tables: Vec<String>,
}

impl TableFilter {
    /// A filter from `--database` and `--table` patterns.
    pub fn new(databases: Vec<String>, tables: Vec<String>) -> TableFilter {
        TableFilter { databases, tables }
    }

    /// True when `db.table` passes.
    pub fn matches(&self, db: &str, table: &str) -> bool {
        let db_ok = self.databases.is_empty() || self.databases.iter().any(|p| wildcard(p, db));
        let table_ok = self.tables.is_empty()
            || self.tables.iter().any(|p| match p.split_once('.') {
                Some((pd, pt)) => wildcard(pd, db) && wildcard(pt, table),
                None => wildcard(p, table),
            });
        db_ok && table_ok
    }
}

/// Glob match with `*` (any run) and `?` (one character), iterative with backtracking to the
/// last `*` (linear in practice, no recursion).
pub fn wildcard(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
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
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p.get(pi..).is_some_and(|rest| rest.iter().all(|&c| c == '*'))
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
    }
}
