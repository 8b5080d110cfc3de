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
    /// `<prefix>.<db>.<table>`.
    pub fn topic_of(&self, db: &str, table: &str) -> String {
        for r in &self.routes {
            if table_matches(&r.tables, db, table) {
                return r.topic.replace("{db}", db).replace("{table}", table);
            }
        }
        format!("{}.{db}.{table}", self.prefix)
    }
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

/// The schema choices for table `name` (`db.table`).
fn schema_options(tm: &TableMap, name: &str, settings: &Settings<'_>) -> SchemaOptions {
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
    ///
    /// # Errors
    /// A schema that cannot be built (the message names table and column), or the registry's
    /// refusal or absence.
    pub async fn get_or_register(
        &mut self,
        tm: &Arc<TableMap>,
        settings: &Settings<'_>,
        registry: &mut RegistryClient,
        metrics: &Metrics,
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
    fn routes_then_the_prefix() {
        let routes = Routes::new(&[Route { tables: "shop.orders_*".into(), topic: "{db}.orders".into() }], "sluice");
        assert_eq!(routes.topic_of("shop", "orders_2024"), "shop.orders");
        assert_eq!(routes.topic_of("shop", "items"), "sluice.shop.items");
    }
}
