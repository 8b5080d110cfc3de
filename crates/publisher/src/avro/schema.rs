//! Per-table Avro schemas: key, value envelope and flattened value, from a table map.
//!
//! The schema JSON is built here once per table version and kept as text (what the registry
//! gets, with Sluice's field properties) and parsed (what the encoder validates against and
//! what compatibility checks use). A [`FieldPlan`] per column records how its values are
//! encoded, so the encoder never re-derives a mapping.

use std::collections::HashMap;
use std::sync::Arc;

use apache_avro::Schema;
use serde_json::{json, Map, Value as Json};
use sluice_binlog::charset::BINARY_COLLATION;
use sluice_binlog::{Column, ColumnType, TableMap};

use super::field::{FieldPlan, Kind, NO_FIELD};
use super::fused::{self, Fused};
use super::{column_label, is_valid_name, sanitize_name, table_namespace, AvroError, Result};
use super::{GEOMETRY_AVSC, SOURCE_AVSC, TRANSACTION_AVSC};

/// Field Sluice adds to a row record listing the columns a partial row image did not carry.
pub const ABSENT_FIELD: &str = "__absent";
/// Flattened mode: the op code.
pub const OP_FIELD: &str = "__op";
/// Flattened mode: true for deletes.
pub const DELETED_FIELD: &str = "__deleted";

/// How zero and invalid dates (`0000-00-00`, `2024-00-00`, the zero DATETIME and TIMESTAMP)
/// are represented; valid dates always use the Avro logical type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZeroDates {
    /// Lossless (default): DATE, DATETIME and TIMESTAMP fields are unions
    /// `[("null",) logical-type, "string"]`; a zero or invalid value takes the `string` branch
    /// with MySQL's text (`0000-00-00`, `0000-00-00 00:00:00.000000`).
    #[default]
    AsString,
    /// Zero and invalid values become `null` (the fields are made nullable). Loses the
    /// difference between NULL and a zero date in nullable columns.
    AsNull,
}

/// Choices that shape a table's schemas.
#[derive(Debug, Clone, Default)]
pub struct SchemaOptions {
    /// First part of the namespace (the topic prefix, e.g. `sluice` or `cdc.prod`).
    pub prefix: String,
    /// Key columns for this table by their MySQL names, overriding the primary key; for tables
    /// without one this is the only way to get a non-null key.
    pub key_columns: Option<Vec<String>>,
    /// Zero and invalid dates.
    pub zero_dates: ZeroDates,
    /// Row images may lack columns (`binlog_row_image=MINIMAL` or `NOBLOB`): every row field
    /// becomes nullable (the key record's fields do not) and rows carry `__absent`, the names of the fields the image did
    /// not have (their value is null, which then does *not* mean SQL NULL). When false, an
    /// absent column is an error.
    pub partial_images: bool,
    /// Columns left out of the records (row fields of the value schemas), as wildcard
    /// patterns over MySQL column names (`password*`). Key columns cannot be excluded.
    pub exclude_columns: Vec<String>,
    /// ENUM columns as strings (with the member names in the field's `sluice.allowed`
    /// property) instead of Avro enums: MySQL's empty error value (index 0) then becomes `""`.
    pub enums_as_strings: bool,
}

/// A table's Avro schemas and the plan for encoding its rows. Built once per table version
/// (a new TABLE_MAP shape or DDL gives a new one).
#[derive(Debug, Clone)]
pub struct TableSchema {
    pub(crate) database: Arc<str>,
    pub(crate) table: Arc<str>,
    pub(crate) qualified: String,
    namespace: String,
    pub(crate) fields: Vec<FieldPlan>,
    /// The key fields, in key order (nullable only where SQL NULL or a zero date can be);
    /// None: null key.
    pub(crate) key: Option<Vec<FieldPlan>>,
    pub(crate) partial_images: bool,
    /// The one-pass writer's map ([`super::RowWriter`]): for each column of the table map,
    /// the index in `fields` of its field and the index in `key` of its key field, [`NO_FIELD`]
    /// for none (a column left out of the records, or not in the key). None when the key's
    /// fields do not come in column order, as a key is written while its columns are decoded:
    /// the writer is not used for the table then.
    pub(crate) fields_of_column: Option<Vec<[u32; 2]>>,
    /// For each column, its one-step writer when its type and field have one (empty without
    /// `fields_of_column`): [`super::fused`].
    pub(crate) fused: Vec<Option<Fused>>,
    /// At most the bytes one image's Avro adds to its row data, text's growth as UTF-8 aside:
    /// per field a union index and a length (20), a zero date as text (32), an ENUM's longest
    /// name, a SET's every name (a SET is 1 to 8 bytes in the binlog).
    pub(crate) image_overhead: usize,
    key_json: Option<Json>,
    key_schema: Option<Schema>,
    value_json: Json,
    value_schema: Schema,
    flat_json: Json,
    flat_schema: Schema,
}

/// Collects named types already defined in the schema being written, so the second use of a
/// named type is a reference by full name.
#[derive(Default)]
struct Names {
    geometry_defined: bool,
}

/// True when `filter.exclude_columns` leaves column `name` out of the records.
fn excluded(opts: &SchemaOptions, name: &str) -> bool {
    opts.exclude_columns.iter().any(|p| crate::filter::wildcard(p, name))
}

/// The first two of `columns` (the names of the columns a record holds) that become one Avro
/// field name once sanitized ([`super::sanitize_name`]), or a column named like a field Sluice
/// adds (`__op`, `__deleted`, `__absent`): `(first, second, field name)`. `sluice check` asks
/// before anything is registered; building a schema refuses the same.
pub fn field_name_collision<'a>(columns: impl IntoIterator<Item = &'a str>) -> Option<(String, String, String)> {
    let mut seen: HashMap<String, String> = HashMap::new();
    for reserved in [ABSENT_FIELD, OP_FIELD, DELETED_FIELD] {
        seen.insert(reserved.to_string(), format!("(Sluice's own field {reserved})"));
    }
    for original in columns {
        let name = sanitize_name(original);
        if let Some(first) = seen.get(&name) {
            return Some((first.clone(), original.to_string(), name));
        }
        seen.insert(name, original.to_string());
    }
    None
}

impl TableSchema {
    /// Builds the schemas of `table`.
    ///
    /// The key is the configured key columns if any, else the primary key from the table map
    /// (`SIMPLE_PRIMARY_KEY` / `PRIMARY_KEY_WITH_PREFIX` metadata, or `Column::primary_key`);
    /// without either there is no key schema and records get a null key.
    ///
    /// # Errors
    /// [`AvroError::MissingColumnNames`], [`AvroError::MissingMetadata`] (ENUM/SET names,
    /// charsets), [`AvroError::NameCollision`], [`AvroError::UnknownKeyColumn`],
    /// [`AvroError::UnsupportedType`]; [`AvroError::InvalidSchema`] would be a bug.
    pub fn new(tm: &TableMap, opts: &SchemaOptions) -> Result<TableSchema> {
        let qualified = tm.qualified_name();
        let namespace = table_namespace(&opts.prefix, &tm.database, &tm.table);

        let key_columns = key_columns(tm, opts, &qualified)?;
        let mut fields = Vec::with_capacity(tm.columns.len());
        let kept = tm.columns.iter().filter_map(|c| c.name.as_deref()).filter(|n| !excluded(opts, n));
        if let Some((first, second, name)) = field_name_collision(kept) {
            return Err(AvroError::NameCollision { table: qualified, first, second, name });
        }
        for col in &tm.columns {
            let Some(original) = col.name.clone() else {
                return Err(AvroError::MissingColumnNames { table: qualified });
            };
            if excluded(opts, &original) {
                if key_columns.as_ref().is_some_and(|k| k.contains(&col.index)) {
                    return Err(AvroError::ExcludedKeyColumn { table: qualified, column: original.to_string() });
                }
                continue;
            }
            let name = sanitize_name(&original);
            let kind = kind_of(col, opts, &qualified)?;
            let zero_string = kind.has_zero_dates() && opts.zero_dates == ZeroDates::AsString;
            let zero_null = kind.has_zero_dates() && opts.zero_dates == ZeroDates::AsNull;
            // with partial images any column can be absent, the key's too (MINIMAL after images
            // of updates hold the changed columns only)
            let nullable = col.nullable || zero_null || opts.partial_images;
            fields.push(FieldPlan {
                column: col.index,
                name,
                original,
                kind,
                nullable,
                sql_nullable: col.nullable,
                zero_string,
                zero_null,
            });
        }
        let key = key_columns.map(|cols| {
            cols.iter()
                .filter_map(|c| fields.iter().find(|f| f.column == *c))
                .map(|f| FieldPlan { nullable: f.sql_nullable || f.zero_null, ..f.clone() })
                .collect::<Vec<_>>()
        });

        let row_fields = |names: &mut Names, extra: &[Json]| -> Vec<Json> {
            let mut v: Vec<Json> = fields.iter().map(|f| field_json(f, col_of(tm, f), &namespace, names)).collect();
            v.extend_from_slice(extra);
            v
        };
        let absent = json!({
            "name": ABSENT_FIELD, "type": {"type": "array", "items": "string"}, "default": [],
            "doc": "Fields whose columns the row image did not carry (binlog_row_image MINIMAL/NOBLOB): \
                    their null is not SQL NULL."
        });
        let row_extra: Vec<Json> = if opts.partial_images { vec![absent.clone()] } else { Vec::new() };

        let key_json = key.as_ref().map(|k| {
            let mut names = Names::default();
            let fs: Vec<Json> = k.iter().map(|f| field_json(f, col_of(tm, f), &namespace, &mut names)).collect();
            json!({"type": "record", "name": "Key", "namespace": namespace, "fields": fs})
        });

        let mut names = Names::default();
        let row = json!({
            "type": "record", "name": "Value", "namespace": namespace,
            "doc": format!("A row of {qualified}"),
            "fields": row_fields(&mut names, &row_extra),
        });
        let source: Json = serde_json::from_str(SOURCE_AVSC).unwrap_or(Json::Null);
        let transaction: Json = serde_json::from_str(TRANSACTION_AVSC).unwrap_or(Json::Null);
        let value_json = json!({
            "type": "record", "name": "Envelope", "namespace": namespace,
            "doc": format!("A change to a row of {qualified}"),
            "fields": [
                {"name": "before", "type": ["null", row], "default": null,
                 "doc": "The row before the change (updates, deletes)."},
                {"name": "after", "type": ["null", format!("{namespace}.Value")], "default": null,
                 "doc": "The row after the change (creates, updates, snapshot reads)."},
                {"name": "op", "type": "string", "doc": "c (create), u (update), d (delete), r (snapshot read)."},
                {"name": "ts_ms", "type": "long", "doc": "When Sluice processed the change, ms since the epoch."},
                {"name": "source", "type": source},
                {"name": "transaction", "type": ["null", transaction], "default": null},
            ],
        });

        let mut names = Names::default();
        let mut flat_extra = row_extra;
        flat_extra.push(json!({"name": OP_FIELD, "type": "string", "doc": "c, u, d or r."}));
        flat_extra.push(
            json!({"name": DELETED_FIELD, "type": "boolean", "doc": "True for deletes (the fields hold the row before)."}),
        );
        let flat_json = json!({
            "type": "record", "name": "Value", "namespace": namespace,
            "doc": format!("A row of {qualified}, flattened: the after image (before image for deletes)"),
            "fields": row_fields(&mut names, &flat_extra),
        });

        let parse = |j: &Json| {
            Schema::parse(j).map_err(|e| AvroError::InvalidSchema { table: qualified.clone(), source: Box::new(e) })
        };
        let key_schema = key_json.as_ref().map(parse).transpose()?;
        let value_schema = parse(&value_json)?;
        let flat_schema = parse(&flat_json)?;
        let in_column_order = |k: &[FieldPlan]| k.windows(2).all(|w| matches!(w, [a, b] if a.column < b.column));
        let fields_of_column = key.as_deref().is_none_or(in_column_order).then(|| {
            let mut of = vec![[NO_FIELD; 2]; tm.columns.len()];
            for (which, plans) in [fields.as_slice(), key.as_deref().unwrap_or_default()].into_iter().enumerate() {
                for (i, f) in plans.iter().enumerate() {
                    if let Some(slot) = of.get_mut(f.column).and_then(|s| s.get_mut(which)) {
                        *slot = u32::try_from(i).unwrap_or(NO_FIELD);
                    }
                }
            }
            of
        });
        let fused = fields_of_column
            .as_deref()
            .map(|of| fused::plan(tm, &fields, key.as_deref().unwrap_or_default(), of))
            .unwrap_or_default();
        let image_overhead = fields
            .iter()
            .map(|f| {
                20 + match &f.kind {
                    Kind::Set { names } => names.iter().map(|n| n.len() + 10).sum::<usize>() + 10,
                    Kind::EnumString { names } => names.iter().map(|n| n.len()).max().unwrap_or(0) + 10,
                    k if k.has_zero_dates() => 32,
                    _ => 0,
                }
            })
            .sum();
        Ok(TableSchema {
            image_overhead,
            database: tm.database.clone(),
            table: tm.table.clone(),
            partial_images: opts.partial_images,
            fields_of_column,
            fused,
            qualified,
            namespace,
            fields,
            key,
            key_json,
            key_schema,
            value_json,
            value_schema,
            flat_json,
            flat_schema,
        })
    }

    /// The Avro namespace, `<prefix>.<db>.<table>` sanitized.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The key schema; None when the table has no key (records get a null key).
    pub fn key_schema(&self) -> Option<&Schema> {
        self.key_schema.as_ref()
    }

    /// The key schema as JSON text, with Sluice's properties (what the registry gets).
    pub fn key_schema_json(&self) -> Option<String> {
        self.key_json.as_ref().map(Json::to_string)
    }

    /// The value envelope schema.
    pub fn value_schema(&self) -> &Schema {
        &self.value_schema
    }

    /// The value envelope schema as JSON text.
    pub fn value_schema_json(&self) -> String {
        self.value_json.to_string()
    }

    /// The flattened value schema.
    pub fn flat_schema(&self) -> &Schema {
        &self.flat_schema
    }

    /// The flattened value schema as JSON text.
    pub fn flat_schema_json(&self) -> String {
        self.flat_json.to_string()
    }

    /// Avro field names of the key, in key order (empty without a key).
    #[cfg(test)]
    pub fn key_field_names(&self) -> Vec<&str> {
        self.key.iter().flatten().map(|f| f.name.as_str()).collect()
    }
}

fn col_of<'t>(tm: &'t TableMap, f: &FieldPlan) -> Option<&'t Column> {
    tm.columns.get(f.column)
}

/// Column indexes of the key: configured names, else the primary key, else None.
fn key_columns(tm: &TableMap, opts: &SchemaOptions, qualified: &str) -> Result<Option<Vec<usize>>> {
    if let Some(names) = &opts.key_columns {
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            let idx = tm
                .columns
                .iter()
                .position(|c| c.name.as_deref() == Some(n.as_str()))
                .ok_or_else(|| AvroError::UnknownKeyColumn { table: qualified.to_string(), column: n.clone() })?;
            out.push(idx);
        }
        return Ok(if out.is_empty() { None } else { Some(out) });
    }
    if let Some(pk) = &tm.primary_key {
        if !pk.is_empty() {
            return Ok(Some(pk.iter().map(|&(i, _)| i).collect()));
        }
    }
    let flagged: Vec<usize> = tm.columns.iter().filter(|c| c.primary_key).map(|c| c.index).collect();
    Ok(if flagged.is_empty() { None } else { Some(flagged) })
}

/// The encoding of one column.
fn kind_of(col: &Column, opts: &SchemaOptions, qualified: &str) -> Result<Kind> {
    use ColumnType as T;
    let label = || column_label(&col.name, col.index);
    let missing = |what| AvroError::MissingMetadata { table: qualified.to_string(), column: label(), what };
    Ok(match col.ty {
        T::Tiny | T::Short | T::Int24 => Kind::Int,
        T::Long if col.unsigned => Kind::Long,
        T::Long => Kind::Int,
        T::LongLong if col.unsigned => Kind::U64Decimal,
        T::LongLong => Kind::Long,
        T::Float => Kind::Float,
        T::Double => Kind::Double,
        T::NewDecimal => {
            let [_, scale] = col.meta.to_be_bytes();
            Kind::Decimal { scale }
        }
        T::Year => Kind::Year,
        T::Date | T::NewDate => Kind::Date,
        T::Time | T::Time2 => Kind::Time,
        T::DateTime | T::DateTime2 => Kind::DateTime,
        T::Timestamp | T::Timestamp2 => Kind::Timestamp,
        T::VarChar | T::VarString | T::String | T::TinyBlob | T::Blob | T::MediumBlob | T::LongBlob => {
            match col.collation {
                Some(BINARY_COLLATION) => Kind::Bytes,
                Some(_) => Kind::Text,
                None => return Err(missing("character set (text or binary)")),
            }
        }
        T::Json => Kind::Json,
        T::Enum => {
            let names = col.enum_values.clone().ok_or_else(|| missing("ENUM member names"))?;
            let symbols_ok = names.iter().all(|n| is_valid_name(n))
                && names.iter().collect::<std::collections::HashSet<_>>().len() == names.len();
            if opts.enums_as_strings || !symbols_ok {
                Kind::EnumString { names }
            } else {
                Kind::Enum { names }
            }
        }
        T::Set => Kind::Set { names: col.set_values.clone().ok_or_else(|| missing("SET member names"))? },
        T::Bit => {
            let [bytes, bits] = col.meta.to_be_bytes();
            let total = usize::from(bytes) * 8 + usize::from(bits);
            if total == 1 {
                Kind::Bool
            } else {
                Kind::Bits { bytes: total.div_ceil(8) }
            }
        }
        T::Geometry => Kind::Geometry,
        T::Vector => Kind::Vector,
        // NULL, the pre-5.0 DECIMAL, typed arrays, BOOL, invalid and unknown codes
        ty => {
            return Err(AvroError::UnsupportedType {
                table: qualified.to_string(),
                column: label(),
                ty: ty.name(),
                code: ty.code(),
            })
        }
    })
}

/// MySQL's spelling of a column's type, for the `mysql.type` field property.
fn mysql_type(col: &Column) -> String {
    use ColumnType as T;
    let base = match col.ty {
        T::String if col.collation == Some(BINARY_COLLATION) => "BINARY",
        T::VarChar | T::VarString if col.collation == Some(BINARY_COLLATION) => "VARBINARY",
        T::TinyBlob | T::Blob | T::MediumBlob | T::LongBlob if col.collation != Some(BINARY_COLLATION) => "TEXT",
        ty => ty.name(),
    };
    let mut s = base.to_string();
    match col.ty {
        T::NewDecimal => {
            let [p, sc] = col.meta.to_be_bytes();
            s = format!("{s}({p},{sc})");
        }
        T::Time2 | T::DateTime2 | T::Timestamp2 if col.meta > 0 => s = format!("{s}({})", col.meta),
        T::Bit => {
            let [bytes, bits] = col.meta.to_be_bytes();
            s = format!("{s}({})", u16::from(bytes) * 8 + u16::from(bits));
        }
        _ => {}
    }
    if col.unsigned {
        s.push_str(" UNSIGNED");
    }
    s
}

/// The Avro type of a column's values (without null or zero-date branches).
fn base_type(f: &FieldPlan, namespace: &str, names: &mut Names) -> Json {
    match &f.kind {
        Kind::Int | Kind::Year => json!("int"),
        Kind::Long => json!("long"),
        Kind::U64Decimal => json!({"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 0}),
        Kind::Float => json!("float"),
        Kind::Double => json!("double"),
        Kind::Decimal { .. } => Json::Null, // filled by field_json, which knows the precision
        Kind::Date => json!({"type": "int", "logicalType": "date"}),
        Kind::Time => json!({"type": "long", "logicalType": "sluice.duration-micros"}),
        Kind::DateTime => json!({"type": "long", "logicalType": "local-timestamp-micros"}),
        Kind::Timestamp => json!({"type": "long", "logicalType": "timestamp-micros"}),
        Kind::Text | Kind::Json | Kind::EnumString { .. } => json!("string"),
        Kind::Bytes | Kind::Bits { .. } => json!("bytes"),
        Kind::Enum { names: symbols } => json!({
            "type": "enum",
            "name": format!("{}_enum", f.name),
            "namespace": namespace,
            "symbols": symbols.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        }),
        Kind::Set { .. } => json!({"type": "array", "items": "string"}),
        Kind::Bool => json!("boolean"),
        Kind::Geometry => {
            if names.geometry_defined {
                json!("sluice.Geometry")
            } else {
                names.geometry_defined = true;
                serde_json::from_str(GEOMETRY_AVSC).unwrap_or(Json::Null)
            }
        }
        Kind::Vector => json!({"type": "array", "items": "float"}),
    }
}

/// A record field for one column: type with its union branches, default, properties.
/// The zero value of a field's (first) Avro type, in Avro's JSON default encoding; None for
/// DECIMAL, whose byte-string default (valid Avro) apache-avro refuses to parse, so the schemas
/// Sluice checks itself would not load.
fn zero_default(kind: &Kind) -> Option<Json> {
    Some(match kind {
        Kind::Int | Kind::Long | Kind::Year | Kind::Date | Kind::Time | Kind::DateTime | Kind::Timestamp => json!(0),
        Kind::Float | Kind::Double => json!(0.0),
        Kind::U64Decimal | Kind::Decimal { .. } => return None,
        Kind::Text | Kind::Json | Kind::EnumString { .. } | Kind::Bytes | Kind::Bits { .. } => json!(""),
        Kind::Enum { names } => json!(names.first().map_or("", |n| n.as_ref())),
        Kind::Set { .. } | Kind::Vector => json!([]),
        Kind::Bool => json!(false),
        Kind::Geometry => json!({"srid": 0, "wkb": ""}),
    })
}

fn field_json(f: &FieldPlan, col: Option<&Column>, namespace: &str, names: &mut Names) -> Json {
    let mut base = base_type(f, namespace, names);
    if let (Kind::Decimal { scale }, Some(col)) = (&f.kind, col) {
        let [precision, _] = col.meta.to_be_bytes();
        base = json!({"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale});
    }
    let ty = if f.is_union() {
        let mut branches = Vec::with_capacity(3);
        if f.nullable {
            branches.push(json!("null"));
        }
        branches.push(base);
        if f.zero_string {
            branches.push(json!("string"));
        }
        Json::Array(branches)
    } else {
        base
    };
    let mut m = Map::new();
    m.insert("name".into(), json!(f.name));
    m.insert("type".into(), ty);
    // Every field has a default, so that a column added by DDL gives a schema that can still read
    // the table's earlier records (the registry's BACKWARD check): null for nullable fields, else
    // the zero of the field's type (for the first union branch), which is what a consumer with the
    // new schema reads for records written before the column existed.
    if let Some(default) = if f.nullable { Some(Json::Null) } else { zero_default(&f.kind) } {
        m.insert("default".into(), default);
    }
    m.insert("mysql.column".into(), json!(f.original.as_ref()));
    if let Some(col) = col {
        m.insert("mysql.type".into(), json!(mysql_type(col)));
    }
    match &f.kind {
        Kind::Json => {
            m.insert("sluice.json".into(), json!(true));
        }
        Kind::EnumString { names } | Kind::Set { names } => {
            m.insert("sluice.allowed".into(), json!(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()));
        }
        _ => {}
    }
    Json::Object(m)
}
