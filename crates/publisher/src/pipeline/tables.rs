//! Each captured table's topic and schemas: the first matching route names the topic (else
//! `<prefix>.<db>.<table>`), and every table version (a TABLE_MAP that differs from the one
//! before: a DDL happened) gets its key and value schemas built and registered under
//! `<topic>-key` / `<topic>-value` once.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;

use sluice_binlog::TableMap;

use super::{Error, Settings};
use crate::avro::{SchemaOptions, TableSchema};
use crate::config::{Route, ValueMode};
use crate::filter::table_matches;
use crate::metrics::{Metrics, TableCounters};
use crate::registry::RegistryClient;

/// Topic routing rules, first match wins.
#[derive(Debug, Clone, Default)]
pub struct Routes {
    routes: Vec<Route>,
    prefix: String,
}

impl Routes {
    /// `[[routes]]` over the topic prefix.
    pub fn new(routes: &[Route], prefix: &str) -> Routes {
        Routes { routes: routes.to_vec(), prefix: prefix.to_string() }
    }

    /// The topic of `db.table`: the first matching route (`{db}` and `{table}` replaced), else
    /// `<prefix>.<db>.<table>`; the names put in are made valid in a topic name
    /// ([`topic_part`]).
    pub fn topic_of(&self, db: &str, table: &str) -> String {
        self.topic_and_template(db, table).0
    }

    /// The topic of `db.table` and the template it comes from (a route's, or the default's).
    fn topic_and_template(&self, db: &str, table: &str) -> (String, String) {
        let (part_db, part_table) = (topic_part(db), topic_part(table));
        for r in &self.routes {
            // the pattern names the table as the server does
            if table_matches(&r.tables, db, table) {
                return (r.topic.replace("{db}", &part_db).replace("{table}", &part_table), r.topic.clone());
            }
        }
        (format!("{}.{part_db}.{part_table}", self.prefix), format!("{}.{{db}}.{{table}}", self.prefix))
    }

    /// The captured tables' topic names that cannot be: two tables whose names differ only in
    /// characters a topic name cannot hold (they become `_`) land in one topic through a
    /// template meant to keep them apart (`{db}`/`{table}` where they differ). One message per
    /// topic, naming the tables and the settings that fix it. Routes that name one topic for
    /// several tables on purpose (no `{table}` in it) are not collisions.
    pub fn collisions<'a>(&self, tables: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<String> {
        let mut by_topic: std::collections::BTreeMap<String, Vec<(&str, &str, String)>> = Default::default();
        for (db, table) in tables {
            let (topic, template) = self.topic_and_template(db, table);
            by_topic.entry(topic).or_default().push((db, table, template));
        }
        let mut out = Vec::new();
        for (topic, list) in by_topic {
            let clash = list.iter().enumerate().any(|(i, a)| {
                list.iter().skip(i + 1).any(|b| {
                    a.2 == b.2 && ((a.0 != b.0 && a.2.contains("{db}")) || (a.1 != b.1 && a.2.contains("{table}")))
                })
            });
            if clash {
                let names: Vec<String> = list.iter().map(|(d, t, _)| format!("{d}.{t}")).collect();
                out.push(format!(
                    "tables {} would all publish to topic {topic} (a topic name holds only letters, digits, '.', '_' \
                     and '-'; the others become '_'): give each its own topic with a [[routes]] entry (tables = \
                     {:?}, topic = \"...\"), or leave one out with filter.exclude",
                    names.join(", "),
                    names.first().cloned().unwrap_or_default()
                ));
            }
        }
        out
    }
}

/// A database or table name as part of a topic name: Kafka allows `[A-Za-z0-9._-]` only, and a
/// dot separates the parts, so every other character (and a dot inside a name) becomes `_`, as
/// Debezium does (`shop.sp ace` -> `sluice.shop.sp_ace`, `tablé` -> `tabl_`). Borrowed when the
/// name is valid as it is.
pub fn topic_part(name: &str) -> std::borrow::Cow<'_, str> {
    if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return std::borrow::Cow::Borrowed(name);
    }
    std::borrow::Cow::Owned(
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect(),
    )
}

/// Why `topic` is not a name Kafka accepts: longer than 249 characters, `.` or `..`, or a
/// character outside `[A-Za-z0-9._-]`.
pub fn topic_problem(topic: &str) -> Option<String> {
    if topic.is_empty() || topic == "." || topic == ".." {
        return Some(format!("{topic:?} is not a topic name"));
    }
    if topic.len() > 249 {
        return Some(format!("topic {topic:?} is longer than Kafka's 249 characters: name it with a [[routes]] entry"));
    }
    topic.chars().find(|c| !(c.is_ascii_alphanumeric() || "._-".contains(*c))).map(|c| {
        format!("topic {topic:?} has {c:?}, which Kafka does not allow (only letters, digits, '.', '_' and '-')")
    })
}

/// One table version: its schemas, topic and registered ids.
pub struct CachedTable {
    /// The TABLE_MAP (with names) this version was built from.
    pub tm: Arc<TableMap>,
    /// Its Avro schemas and field plans.
    pub schema: TableSchema,
    /// Where its records go.
    pub topic: String,
    /// The key schema's id (None: a table without a key gets null keys).
    pub key_id: Option<u32>,
    /// The value schema's id.
    pub value_id: u32,
    /// Its row-change counters (`sluice_row_changes_total{table}`).
    pub counters: TableCounters,
}

/// The schema choices for table `name` (`db.table`): the pipeline's, and `sluice verify`'s to
/// encode a table's rows as the pipeline would.
pub(crate) fn schema_options(tm: &TableMap, name: &str, settings: &Settings<'_>) -> SchemaOptions {
    SchemaOptions {
        prefix: settings.kafka.topic_prefix.clone(),
        key_columns: settings.output.key_columns.get(name).cloned(),
        exclude_columns: settings.filter.excluded_columns(&tm.database, &tm.table),
        partial_images: settings.output.partial_images,
        enums_as_strings: settings.output.enums_as_strings,
        ..SchemaOptions::default()
    }
}

/// The value schema registered for the configured value mode.
fn value_json(schema: &TableSchema, settings: &Settings<'_>) -> String {
    match settings.output.value_mode {
        ValueMode::Envelope => schema.value_schema_json(),
        ValueMode::Flattened => schema.flat_schema_json(),
    }
}

/// Builds and registers the schemas of a table version.
async fn build(
    tm: &Arc<TableMap>,
    name: &str,
    settings: &Settings<'_>,
    registry: &mut RegistryClient,
    metrics: &Metrics,
) -> Result<CachedTable, Error> {
    let schema = TableSchema::new(tm, &schema_options(tm, name, settings))?;
    let topic = settings.routes.topic_of(&tm.database, &tm.table);
    let key_id = match schema.key_schema_json() {
        Some(k) => Some(registry.register(&format!("{topic}-key"), &k).await?),
        None => None,
    };
    let value_id = registry.register(&format!("{topic}-value"), &value_json(&schema, settings)).await?;
    let key = key_id.map_or_else(|| "none (no key)".to_string(), |id| id.to_string());
    tracing::info!(table = %name, topic = %topic, key_id = %key, value_id, "Registered the table's schemas");
    Ok(CachedTable { tm: Arc::clone(tm), schema, topic, key_id, value_id, counters: metrics.table(name) })
}

/// The current version of every table seen, by `db.table`.
#[derive(Default)]
pub struct Tables {
    by_name: HashMap<String, CachedTable>,
}

impl Tables {
    /// The cached schemas of `tm`'s table version, building and registering them when new.
    /// `tracked`: every table the stream knows, for a new table whose topic one of them has.
    ///
    /// # Errors
    /// A schema that cannot be built (the message names table and column), the registry's
    /// refusal or absence, or a new table whose topic a captured table already has.
    pub async fn get_or_register(
        &mut self,
        tm: &Arc<TableMap>,
        settings: &Settings<'_>,
        registry: &mut RegistryClient,
        metrics: &Metrics,
        tracked: &crate::schema::SchemaHistory,
    ) -> Result<&CachedTable, Error> {
        let name = tm.qualified_name();
        let current = self.by_name.get(&name).is_some_and(|c| Arc::ptr_eq(&c.tm, tm) || *c.tm == **tm);
        if !current {
            // another description of the same version (a snapshot's, from information_schema, beside
            // the binlog's TABLE_MAP): when its schemas come out the same, nothing is registered
            if let Some(c) = self.by_name.get_mut(&name) {
                if let Ok(schema) = TableSchema::new(tm, &schema_options(tm, &name, settings)) {
                    if schema.key_schema_json() == c.schema.key_schema_json()
                        && value_json(&schema, settings) == value_json(&c.schema, settings)
                    {
                        c.tm = Arc::clone(tm);
                        c.schema = schema;
                        return Ok(self.by_name.get(&name).unwrap_or_else(|| unreachable!("just updated")));
                    }
                }
            }
        }
        if !current {
            // a table created since the start, whose topic another captured table has (one
            // published in this run, or one only known to the tracked schema so far): refused
            // before anything of it is registered, as a start would refuse both
            let topic = settings.routes.topic_of(&tm.database, &tm.table);
            let published = self.by_name.values().map(|c| (&*c.tm.database, &*c.tm.table));
            let known = tracked
                .tables()
                .filter(|t| settings.filter.matches(&t.database, &t.table))
                .map(|t| (t.database.as_str(), t.table.as_str()));
            let other = published.chain(known).find(|(db, t)| {
                !format!("{db}.{t}").eq_ignore_ascii_case(&name) && settings.routes.topic_of(db, t) == topic
            });
            if let Some((db, t)) = other {
                let problems = settings.routes.collisions([(db, t), (&*tm.database, &*tm.table)]);
                if !problems.is_empty() {
                    return Err(Error::Naming(problems));
                }
            }
        }
        let next = if current { None } else { Some(build(tm, &name, settings, registry, metrics).await?) };
        Ok(match (self.by_name.entry(name), next) {
            (Entry::Occupied(o), None) => o.into_mut(),
            (Entry::Occupied(mut o), Some(next)) => {
                o.insert(next);
                o.into_mut()
            }
            (Entry::Vacant(v), Some(next)) => v.insert(next),
            // not reached: `current` found it
            (Entry::Vacant(v), None) => {
                let next = build(tm, v.key(), settings, registry, metrics).await?;
                v.insert(next)
            }
        })
    }

    /// The current version of table `name` (`db.table`), when one was seen.
    pub fn get(&self, name: &str) -> Option<&CachedTable> {
        self.by_name.get(name)
    }

    /// The table whose records go to `topic` (for messages about a record of it).
    pub fn by_topic(&self, topic: &str) -> Option<&CachedTable> {
        self.by_name.values().find(|t| t.topic == topic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_kafka_cannot_use() {
        let routes = Routes::new(&[Route { tables: "shop.orders_*".into(), topic: "{db}.orders".into() }], "sluice");
        assert_eq!(routes.topic_of("shop", "sp ace"), "sluice.shop.sp_ace");
        assert_eq!(routes.topic_of("shop", "back`tick"), "sluice.shop.back_tick");
        assert_eq!(routes.topic_of("shop", "tablé_ü"), "sluice.shop.tabl___");
        assert_eq!(routes.topic_of("shop", "we.ird"), "sluice.shop.we_ird");
        assert_eq!(routes.topic_of("my db", "t"), "sluice.my_db.t");
        assert!(topic_problem(&routes.topic_of("shop", "tablé")).is_none());
        assert!(topic_problem("a b").is_some() && topic_problem("..").is_some());
        assert!(topic_problem(&"x".repeat(250)).is_some());
        // é and ü both become _; a route sending two shards to one topic is meant
        let c = routes.collisions([
            ("shop", "é"),
            ("shop", "ü"),
            ("shop", "orders_1"),
            ("shop", "orders_2"),
            ("shop", "x"),
        ]);
        assert_eq!(c.len(), 1, "{c:?}");
        assert!(c[0].contains("tables shop.é, shop.ü would all publish to topic sluice.shop._"), "{}", c[0]);
        assert!(c[0].contains("[[routes]]") && c[0].contains("filter.exclude"), "{}", c[0]);
        assert!(routes.collisions([("shop", "sp ace"), ("shop", "sp_ace")]).len() == 1);
        assert!(routes.collisions([("a", "t"), ("b", "t")]).is_empty());
    }

    #[test]
    fn routes_then_the_prefix() {
        let routes = Routes::new(&[Route { tables: "shop.orders_*".into(), topic: "{db}.orders".into() }], "sluice");
        assert_eq!(routes.topic_of("shop", "orders_2024"), "shop.orders");
        assert_eq!(routes.topic_of("shop", "items"), "sluice.shop.items");
    }
}
