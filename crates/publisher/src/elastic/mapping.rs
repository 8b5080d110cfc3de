//! What each column of a table is in Elasticsearch: the [`Layout`] read off the table's
//! registered value schema (each field's `mysql.type` and `mysql.column` properties, which
//! Sluice writes, and its Avro type), and the index mapping derived from it, so that no type is
//! ever guessed by dynamic mapping (which would turn exact DECIMAL text into `text`,
//! microsecond timestamps into plain numbers and JSON into strings).
//!
//! | MySQL | Elasticsearch |
//! |---|---|
//! | TINYINT .. INT, YEAR | `integer` (INT UNSIGNED: `long`) |
//! | BIGINT / BIGINT UNSIGNED | `long` / `unsigned_long` |
//! | FLOAT, DOUBLE | `float`, `double` |
//! | DECIMAL(p,s) | `keyword` (exact text; default) or `scaled_float` (`scaling_factor` 10^s) |
//! | DATE / DATETIME, TIMESTAMP | `date` (`strict_date` / `strict_date_optional_time`), `ignore_malformed` so that a zero date stays in `_source` only |
//! | TIME | `long` microseconds (default) or `keyword` |
//! | CHAR, VARCHAR, TEXT | `text` with a `keyword` sub-field (`ignore_above` 256) |
//! | JSON (MySQL) | `flattened` (default), `object` or `keyword` |
//! | ENUM, SET | `keyword` (a SET is an array of names) |
//! | BINARY, VARBINARY, BLOB | `binary` (base64) |
//! | BIT(1) / BIT(n) | `boolean` / `long` (BIT(64): `unsigned_long`) |
//! | GEOMETRY | `{srid: long, wkb: binary}`, or `geo_point` for the POINT columns named in `geo_point` |
//! | VECTOR | `float` (an array) |
//!
//! References: <https://www.elastic.co/guide/en/elasticsearch/reference/current/mapping-types.html>,
//! `schemas/README.md` for the Avro side.

use std::collections::HashMap;

use apache_avro::schema::{Name, RecordField};
use apache_avro::Schema;
use serde_json::{json, Value as Json};

use crate::config::{ElasticsearchSection, EsDecimal, EsJson, EsTime};

/// What a column is, for its mapping and its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A 32-bit integer (TINYINT .. INT, YEAR).
    Integer,
    /// A 64-bit integer (INT UNSIGNED, BIGINT).
    Long,
    /// BIGINT UNSIGNED (Avro `decimal(20,0)`).
    UnsignedLong,
    /// FLOAT.
    Float,
    /// DOUBLE.
    Double,
    /// DECIMAL with its scale.
    Decimal {
        /// Digits after the point.
        scale: u32,
    },
    /// DATE.
    Date,
    /// DATETIME: a local date-time (no zone).
    DateTime {
        /// Fractional digits.
        fsp: u32,
    },
    /// TIMESTAMP: a UTC instant.
    Timestamp {
        /// Fractional digits.
        fsp: u32,
    },
    /// TIME: a signed duration.
    Time {
        /// Fractional digits.
        fsp: u32,
    },
    /// Text.
    Text,
    /// MySQL's JSON (canonical JSON text in the record).
    Json,
    /// ENUM (an Avro enum or a string).
    Enum,
    /// SET (an array of names).
    Set,
    /// Binary bytes.
    Binary,
    /// BIT(1).
    Bool,
    /// BIT(n), n > 1: big-endian bytes.
    Bits {
        /// Width.
        n: u32,
    },
    /// GEOMETRY as `{srid, wkb}`.
    Geometry,
    /// A POINT column mapped as `geo_point`.
    GeoPoint,
    /// VECTOR (floats).
    Vector,
}

/// One column of a table: its name in the documents, its Avro field and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The column's name (`mysql.column`), the document's field name.
    pub column: String,
    /// The Avro field's name (the column's, sanitised where it had to be).
    pub avro: String,
    /// What it is.
    pub kind: Kind,
}

/// The columns of a table's records, as one of its value schemas has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The columns, in order.
    pub fields: Vec<Field>,
    /// Flattened values (the row plus `__op`, `__deleted`) rather than the envelope.
    pub flattened: bool,
}

/// A schema Sluice cannot turn into a mapping.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct MappingError {
    what: String,
}

fn err(what: impl Into<String>) -> MappingError {
    MappingError { what: what.into() }
}

/// Named types of a schema, to follow `Schema::Ref`s (a record used twice is named once).
fn names(schema: &Schema) -> HashMap<Name, Schema> {
    fn walk(s: &Schema, out: &mut HashMap<Name, Schema>) {
        match s {
            Schema::Record(r) => {
                out.insert(r.name.clone(), s.clone());
                for f in &r.fields {
                    walk(&f.schema, out);
                }
            }
            Schema::Enum(e) => {
                out.insert(e.name.clone(), s.clone());
            }
            Schema::Fixed(f) => {
                out.insert(f.name.clone(), s.clone());
            }
            Schema::Union(u) => u.variants().iter().for_each(|v| walk(v, out)),
            Schema::Array(a) => walk(&a.items, out),
            Schema::Map(m) => walk(&m.types, out),
            _ => {}
        }
    }
    let mut out = HashMap::new();
    walk(schema, &mut out);
    out
}

/// `s` without its `null` branch, references followed.
fn non_null<'s>(s: &'s Schema, names: &'s HashMap<Name, Schema>) -> &'s Schema {
    let s = match s {
        Schema::Ref { name } => names.get(name).unwrap_or(s),
        other => other,
    };
    match s {
        Schema::Union(u) => match u.variants().iter().find(|v| !matches!(v, Schema::Null)) {
            Some(v) => non_null(v, names),
            None => s,
        },
        other => other,
    }
}

/// The columns of a value schema Sluice registered (an envelope, or a flattened value), with
/// the GEOMETRY columns `geo_point` says yes to (by column name) as `geo_point`.
///
/// # Errors
/// A schema that is neither Sluice's envelope nor a flattened value record.
pub fn layout(value_schema: &Schema, geo_point: &dyn Fn(&str) -> bool) -> Result<Layout, MappingError> {
    let names = names(value_schema);
    let Schema::Record(top) = value_schema else {
        return Err(err("the value schema is not a record"));
    };
    let has = |n: &str| top.fields.iter().any(|f| f.name == n);
    let (row, flattened) = if has("after") && has("op") {
        let after = top.fields.iter().find(|f| f.name == "after").map(|f| non_null(&f.schema, &names));
        match after {
            Some(Schema::Record(r)) => (r, false),
            _ => return Err(err("the envelope's `after` is not a record")),
        }
    } else if has("__op") {
        (top, true)
    } else {
        return Err(err(format!(
            "schema {} is neither Sluice's envelope (before, after, op) nor a flattened value (__op)",
            top.name
        )));
    };
    let fields = fields_of(&row.fields, &names, geo_point)?;
    Ok(Layout { fields, flattened })
}

/// The key columns of a key schema Sluice registered (a record of the key columns), in order.
///
/// # Errors
/// A key schema that is not a record, or a column Sluice cannot map.
pub fn key_fields(key_schema: &Schema) -> Result<Vec<Field>, MappingError> {
    let names = names(key_schema);
    match key_schema {
        Schema::Record(r) => fields_of(&r.fields, &names, &|_| false),
        _ => Err(err("the key schema is not a record")),
    }
}

fn fields_of(
    fields: &[RecordField],
    names: &HashMap<Name, Schema>,
    geo_point: &dyn Fn(&str) -> bool,
) -> Result<Vec<Field>, MappingError> {
    fields
        .iter()
        .filter(|f| !matches!(f.name.as_str(), "__op" | "__deleted" | "__absent"))
        .map(|f| {
            let column = f.custom_attributes.get("mysql.column").and_then(Json::as_str).unwrap_or(&f.name).to_string();
            let mut kind = kind_of(f, names)?;
            if kind == Kind::Geometry && geo_point(&column) {
                kind = Kind::GeoPoint;
            }
            Ok(Field { column, avro: f.name.clone(), kind })
        })
        .collect()
}

/// A column's kind: from `mysql.type` when Sluice wrote it, else from the Avro type.
fn kind_of(f: &RecordField, names: &HashMap<Name, Schema>) -> Result<Kind, MappingError> {
    let avro = non_null(&f.schema, names);
    // the zero-date union [logical type, string]: the logical branch says what it is
    let avro = match avro {
        Schema::Union(u) => u.variants().iter().find(|v| !matches!(v, Schema::Null | Schema::String)).unwrap_or(avro),
        other => other,
    };
    let json_prop = f.custom_attributes.get("sluice.json").and_then(Json::as_bool) == Some(true);
    let mysql = f.custom_attributes.get("mysql.type").and_then(Json::as_str).unwrap_or("").to_ascii_uppercase();
    let (base, rest) = mysql.split_once('(').map_or((mysql.as_str(), ""), |(b, r)| (b, r));
    let unsigned = mysql.ends_with("UNSIGNED");
    let arg = |i: usize| -> u32 { rest.split([',', ')']).nth(i).and_then(|n| n.trim().parse().ok()).unwrap_or(0) };
    let base = base.trim_end_matches(" UNSIGNED").trim();
    Ok(match base {
        "TINYINT" | "SMALLINT" | "MEDIUMINT" | "YEAR" | "BOOL" => Kind::Integer,
        "INT" if unsigned => Kind::Long,
        "INT" => Kind::Integer,
        "BIGINT" if unsigned => Kind::UnsignedLong,
        "BIGINT" => Kind::Long,
        "FLOAT" => Kind::Float,
        "DOUBLE" => Kind::Double,
        "DECIMAL" => Kind::Decimal { scale: arg(1) },
        "DATE" => Kind::Date,
        "DATETIME" => Kind::DateTime { fsp: arg(0) },
        "TIMESTAMP" => Kind::Timestamp { fsp: arg(0) },
        "TIME" => Kind::Time { fsp: arg(0) },
        "JSON" => Kind::Json,
        _ if json_prop => Kind::Json,
        "ENUM" => Kind::Enum,
        "SET" => Kind::Set,
        "BIT" if arg(0) <= 1 => Kind::Bool,
        "BIT" => Kind::Bits { n: arg(0) },
        "GEOMETRY" => Kind::Geometry,
        "VECTOR" => Kind::Vector,
        "CHAR" | "VARCHAR" | "TEXT" => match avro {
            Schema::Enum(_) => Kind::Enum,
            Schema::Array(_) => Kind::Set,
            _ => Kind::Text,
        },
        "BINARY" | "VARBINARY" | "BLOB" => Kind::Binary,
        // no (or an unknown) mysql.type: the Avro type decides
        _ => match avro {
            Schema::Int => Kind::Integer,
            Schema::Long => Kind::Long,
            Schema::Float => Kind::Float,
            Schema::Double => Kind::Double,
            Schema::Boolean => Kind::Bool,
            Schema::String => Kind::Text,
            Schema::Bytes | Schema::Fixed(_) => Kind::Binary,
            Schema::Enum(_) => Kind::Enum,
            Schema::Decimal(d) => Kind::Decimal { scale: u32::try_from(d.scale).unwrap_or(0) },
            Schema::Date => Kind::Date,
            Schema::TimestampMicros | Schema::TimestampMillis => Kind::Timestamp { fsp: 6 },
            Schema::LocalTimestampMicros | Schema::LocalTimestampMillis => Kind::DateTime { fsp: 6 },
            Schema::Array(a) if matches!(*a.items, Schema::String) => Kind::Set,
            Schema::Array(a) if matches!(*a.items, Schema::Float | Schema::Double) => Kind::Vector,
            Schema::Record(r) if r.fields.iter().any(|f| f.name == "wkb") => Kind::Geometry,
            other => {
                return Err(err(format!(
                    "column {} has a type Sluice cannot map ({}, Avro {other:?})",
                    f.name,
                    if mysql.is_empty() { "no mysql.type" } else { &mysql }
                )))
            }
        },
    })
}

/// The mapping of one column.
pub fn field_mapping(kind: &Kind, es: &ElasticsearchSection) -> Json {
    let date = |format: &str| json!({"type": "date", "format": format, "ignore_malformed": true});
    match kind {
        Kind::Integer => json!({"type": "integer"}),
        Kind::Long => json!({"type": "long"}),
        Kind::UnsignedLong => json!({"type": "unsigned_long"}),
        Kind::Float => json!({"type": "float"}),
        Kind::Double => json!({"type": "double"}),
        Kind::Decimal { scale } => match es.decimal {
            EsDecimal::Keyword => json!({"type": "keyword"}),
            EsDecimal::ScaledFloat => {
                json!({"type": "scaled_float", "scaling_factor": 10f64.powi(i32::try_from(*scale).unwrap_or(0))})
            }
        },
        Kind::Date => date("strict_date"),
        Kind::DateTime { .. } | Kind::Timestamp { .. } => date("strict_date_optional_time"),
        Kind::Time { .. } => match es.time {
            EsTime::Long => json!({"type": "long"}),
            EsTime::Keyword => json!({"type": "keyword"}),
        },
        Kind::Text => json!({"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}),
        Kind::Json => match es.json {
            EsJson::Flattened => json!({"type": "flattened"}),
            EsJson::Object => json!({"type": "object", "dynamic": true}),
            EsJson::Keyword => json!({"type": "keyword", "ignore_above": 8191}),
        },
        Kind::Enum | Kind::Set => json!({"type": "keyword"}),
        Kind::Binary => json!({"type": "binary"}),
        Kind::Bool => json!({"type": "boolean"}),
        Kind::Bits { n } if *n >= 64 => json!({"type": "unsigned_long"}),
        Kind::Bits { .. } => json!({"type": "long"}),
        Kind::Geometry => json!({"properties": {"srid": {"type": "long"}, "wkb": {"type": "binary"}}}),
        Kind::GeoPoint => json!({"type": "geo_point"}),
        Kind::Vector => json!({"type": "float"}),
    }
}

/// The index mapping of a layout: every column typed, and `dynamic: strict`, so that a field
/// the mapping does not have is refused rather than guessed.
pub fn mapping(layout: &Layout, es: &ElasticsearchSection) -> Json {
    let properties: serde_json::Map<String, Json> =
        layout.fields.iter().map(|f| (f.column.clone(), field_mapping(&f.kind, es))).collect();
    json!({"dynamic": "strict", "properties": properties})
}

/// The type a field mapping gives (`object` for a mapping with properties only).
pub fn type_of(field: &Json) -> &str {
    field.get("type").and_then(Json::as_str).unwrap_or("object")
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn section() -> ElasticsearchSection {
        let toml = "url = \"http://localhost:9200\"";
        toml::from_str(toml).unwrap()
    }

    /// A value schema as Sluice registers it (envelope), with the properties Sluice writes.
    fn envelope(fields: &str) -> Schema {
        let text = format!(
            r#"{{"type":"record","name":"Envelope","namespace":"p.shop.t","fields":[
              {{"name":"before","type":["null",{{"type":"record","name":"Value","fields":[{fields}]}}],"default":null}},
              {{"name":"after","type":["null","Value"],"default":null}},
              {{"name":"op","type":"string"}},
              {{"name":"ts_ms","type":"long"}}]}}"#
        );
        Schema::parse_str(&text).unwrap()
    }

    fn field(name: &str, mysql: &str, avro: &str) -> String {
        format!(r#"{{"name":"{name}","type":{avro},"mysql.column":"{name}","mysql.type":"{mysql}"}}"#)
    }

    #[test]
    fn every_kind_from_an_envelope() {
        let fields = [
            field("i", "INT", r#""int""#),
            field("iu", "INT UNSIGNED", r#""long""#),
            field("b", "BIGINT", r#""long""#),
            field("bu", "BIGINT UNSIGNED", r#"{"type":"bytes","logicalType":"decimal","precision":20,"scale":0}"#),
            field("d", "DECIMAL(65,30)", r#"{"type":"bytes","logicalType":"decimal","precision":65,"scale":30}"#),
            field("dt", "DATETIME(6)", r#"["null",{"type":"long","logicalType":"local-timestamp-micros"},"string"]"#),
            field("ts", "TIMESTAMP(3)", r#"[{"type":"long","logicalType":"timestamp-micros"},"string"]"#),
            field("da", "DATE", r#"[{"type":"int","logicalType":"date"},"string"]"#),
            field("tm", "TIME(6)", r#"{"type":"long","logicalType":"sluice.duration-micros"}"#),
            field("s", "VARCHAR", r#""string""#),
            field("e", "ENUM", r#"{"type":"enum","name":"e_enum","symbols":["a","b"]}"#),
            field("st", "SET", r#"{"type":"array","items":"string"}"#),
            field("bl", "BLOB", r#""bytes""#),
            field("b1", "BIT(1)", r#""boolean""#),
            field("b64", "BIT(64)", r#""bytes""#),
            field("g", "GEOMETRY", r#"{"type":"record","name":"Geometry","namespace":"sluice","fields":[{"name":"srid","type":"long"},{"name":"wkb","type":"bytes"}]}"#),
            field("p", "GEOMETRY", r#""sluice.Geometry""#),
            field("j", "JSON", r#""string""#),
            r#"{"name":"odd_name","type":"int","mysql.column":"odd name","mysql.type":"SMALLINT UNSIGNED"}"#.to_string(),
        ]
        .join(",");
        let l = layout(&envelope(&fields), &|c| c == "p").unwrap();
        assert!(!l.flattened);
        let kinds: Vec<(&str, &Kind)> = l.fields.iter().map(|f| (f.column.as_str(), &f.kind)).collect();
        assert_eq!(
            kinds,
            [
                ("i", &Kind::Integer),
                ("iu", &Kind::Long),
                ("b", &Kind::Long),
                ("bu", &Kind::UnsignedLong),
                ("d", &Kind::Decimal { scale: 30 }),
                ("dt", &Kind::DateTime { fsp: 6 }),
                ("ts", &Kind::Timestamp { fsp: 3 }),
                ("da", &Kind::Date),
                ("tm", &Kind::Time { fsp: 6 }),
                ("s", &Kind::Text),
                ("e", &Kind::Enum),
                ("st", &Kind::Set),
                ("bl", &Kind::Binary),
                ("b1", &Kind::Bool),
                ("b64", &Kind::Bits { n: 64 }),
                ("g", &Kind::Geometry),
                ("p", &Kind::GeoPoint),
                ("j", &Kind::Json),
                ("odd name", &Kind::Integer),
            ]
        );
        let es = section();
        let m = mapping(&l, &es);
        assert_eq!(m["dynamic"], "strict");
        let p = &m["properties"];
        assert_eq!(p["bu"], json!({"type": "unsigned_long"}));
        assert_eq!(p["d"], json!({"type": "keyword"}));
        assert_eq!(p["dt"], json!({"type": "date", "format": "strict_date_optional_time", "ignore_malformed": true}));
        assert_eq!(p["da"], json!({"type": "date", "format": "strict_date", "ignore_malformed": true}));
        assert_eq!(p["tm"], json!({"type": "long"}));
        assert_eq!(p["s"]["fields"]["keyword"]["type"], "keyword");
        assert_eq!(p["j"], json!({"type": "flattened"}));
        assert_eq!(p["st"], json!({"type": "keyword"}));
        assert_eq!(p["b1"], json!({"type": "boolean"}));
        assert_eq!(p["b64"], json!({"type": "unsigned_long"}));
        assert_eq!(p["g"]["properties"]["wkb"], json!({"type": "binary"}));
        assert_eq!(p["p"], json!({"type": "geo_point"}));
        assert_eq!(p["odd name"], json!({"type": "integer"}));
        let mut es = section();
        es.decimal = EsDecimal::ScaledFloat;
        es.time = EsTime::Keyword;
        es.json = EsJson::Object;
        let p = &mapping(&l, &es)["properties"];
        assert_eq!(p["d"]["type"], "scaled_float");
        assert_eq!(p["tm"], json!({"type": "keyword"}));
        assert_eq!(type_of(&p["j"]), "object");
    }

    #[test]
    fn flattened_values_and_foreign_schemas() {
        let text = r#"{"type":"record","name":"Value","fields":[
            {"name":"id","type":"int","mysql.column":"id","mysql.type":"INT"},
            {"name":"__op","type":"string"},{"name":"__deleted","type":"boolean"}]}"#;
        let l = layout(&Schema::parse_str(text).unwrap(), &|_| false).unwrap();
        assert!(l.flattened);
        assert_eq!(l.fields, [Field { column: "id".into(), avro: "id".into(), kind: Kind::Integer }]);
        let e = layout(&Schema::parse_str(r#""string""#).unwrap(), &|_| false).unwrap_err();
        assert!(e.to_string().contains("not a record"), "{e}");
        let other = r#"{"type":"record","name":"X","fields":[{"name":"a","type":"int"}]}"#;
        let e = layout(&Schema::parse_str(other).unwrap(), &|_| false).unwrap_err();
        assert!(e.to_string().contains("neither Sluice's envelope"), "{e}");
    }
}
