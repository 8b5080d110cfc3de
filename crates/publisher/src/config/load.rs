//! Loading the configuration: the TOML document, the `SLUICE_*` environment overlaid on it, and
//! deserialization that collects every problem at once (a wrong value is taken out and the rest
//! checked again), then each section's own validation.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The document as deserialized: every section optional, so that one broken or missing section
/// does not hide the problems of the others (a missing required section is reported by
/// [`super::Load::load`]).
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawConfig {
    pub(super) source: Option<SourceSection>,
    pub(super) kafka: Option<KafkaSection>,
    pub(super) registry: Option<RegistrySection>,
    #[serde(default)]
    pub(super) output: OutputSection,
    #[serde(default)]
    pub(super) filter: FilterSection,
    #[serde(default)]
    pub(super) routes: Vec<Route>,
    #[serde(default)]
    pub(super) metrics: MetricsSection,
    #[serde(default)]
    pub(super) snapshot: SnapshotSection,
    pub(super) elasticsearch: Option<ElasticsearchSection>,
    pub(super) archive: Option<ArchiveSection>,
}

/// Valid values for the required keys, put in place of a missing or wrong one so that the rest
/// of its section is still checked (the problem itself is reported, and no configuration with a
/// problem is ever returned).
pub(super) const STAND_INS: &[(&str, &str)] = &[
    ("source.name", "stand-in"),
    ("source.url", "mysql://stand-in@localhost"),
    ("kafka.brokers", "localhost:9092"),
    ("registry.url", "http://localhost:8081"),
];

/// The problems found so far while loading, each attributed to the variable that set its key.
pub(super) struct Found<'a> {
    overrides: &'a [Override],
    problems: Vec<Problem>,
}

impl Found<'_> {
    pub(super) fn add(&mut self, key: &str, message: String) {
        let variable = self
            .overrides
            .iter()
            .find(|o| {
                let set = dotted(&o.path);
                // the key itself, inside it, or (an unknown section such as `snapshots`) around it
                key == set
                    || key.starts_with(&format!("{set}."))
                    || key.starts_with(&format!("{set}["))
                    || set.starts_with(&format!("{key}."))
            })
            .map(|o| o.variable.clone());
        let p = Problem { key: key.to_string(), variable, message };
        if !self.problems.contains(&p) {
            self.problems.push(p);
        }
    }
}

/// A key path segment of the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Segment {
    Key(String),
    Index(usize),
}

/// The array elements taken out of the document so far (each by its array's path and its index
/// in the file): the next element moves up into the place of one taken out, so an error at it is
/// named by its index in the file, not by its place now.
#[derive(Default)]
pub(super) struct Renumbered(Vec<(Vec<Segment>, usize)>);

impl Renumbered {
    /// `at` (indexes as the document is now) with indexes as in the file.
    pub(super) fn original(&self, at: &[Segment]) -> Vec<Segment> {
        let mut out = Vec::with_capacity(at.len());
        for seg in at {
            let seg = match seg {
                Segment::Index(i) => {
                    let mut gone: Vec<usize> = self.0.iter().filter(|(p, _)| *p == out).map(|(_, j)| *j).collect();
                    gone.sort_unstable();
                    Segment::Index(gone.into_iter().fold(*i, |j, g| if g <= j { j + 1 } else { j }))
                }
                key => key.clone(),
            };
            out.push(seg);
        }
        out
    }

    /// Notes that the value at `original` (indexes as in the file) was taken out.
    pub(super) fn taken_out(&mut self, original: &[Segment]) {
        if let Some((Segment::Index(i), parent)) = original.split_last() {
            self.0.push((parent.to_vec(), *i));
        }
    }
}

pub(super) fn dotted(path: &[Segment]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Segment::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                if k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                    out.push_str(k);
                } else {
                    out.push_str(&format!("{k:?}"));
                }
            }
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

pub(super) fn segments(path: &serde_path_to_error::Path) -> Vec<Segment> {
    path.iter()
        .filter_map(|s| match s {
            serde_path_to_error::Segment::Map { key } => Some(Segment::Key(key.clone())),
            serde_path_to_error::Segment::Seq { index } => Some(Segment::Index(*index)),
            serde_path_to_error::Segment::Enum { variant } => Some(Segment::Key(variant.clone())),
            serde_path_to_error::Segment::Unknown => None,
        })
        .collect()
}

/// The value at `path` (None when there is none).
pub(super) fn value_at<'a>(doc: &'a mut toml::Value, path: &[Segment]) -> Option<&'a mut toml::Value> {
    let Some((first, rest)) = path.split_first() else { return Some(doc) };
    let next = match (doc, first) {
        (toml::Value::Table(t), Segment::Key(k)) => t.get_mut(k)?,
        (toml::Value::Array(a), Segment::Index(i)) => a.get_mut(*i)?,
        _ => return None,
    };
    value_at(next, rest)
}

/// Removes the value at `path`; false when there was none (or `path` is the root).
pub(super) fn remove_at(doc: &mut toml::Value, path: &[Segment]) -> bool {
    let Some((last, parents)) = path.split_last() else { return false };
    match (value_at(doc, parents), last) {
        (Some(toml::Value::Table(t)), Segment::Key(k)) => t.remove(k).is_some(),
        (Some(toml::Value::Array(a)), Segment::Index(i)) if *i < a.len() => {
            a.remove(*i);
            true
        }
        _ => false,
    }
}

/// The configuration file's text (its path named when it cannot be read).
///
/// # Errors
/// An unreadable file.
pub fn read_config(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })
}

/// Which command reads the configuration: what it requires and checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// `sluice run` and the others that talk to the source.
    Run,
    /// `sluice sink elasticsearch`: no `[source]` needed.
    Sink,
    /// `sluice archive`: `[source]` and `[archive]`, no Kafka.
    Archive,
}

/// Parses and validates the document for `role`: the raw sections (those `role` requires all
/// present) and the document after the environment's overrides.
pub(super) fn parse_raw(
    text: &str,
    path: &Path,
    env: impl IntoIterator<Item = (String, String)>,
    role: Role,
) -> Result<(RawConfig, toml::Value), ConfigError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Syntax { path: path.into(), message: redact_url(&e.to_string()) })?;
    let mut doc = toml::Value::Table(table);
    let Applied { overrides, problems: misnamed, .. } = apply_env(&mut doc, env);
    let mut found = Found { overrides: &overrides, problems: misnamed };
    // Deserialize; at each error, note it, take the offending value out and go again, so
    // that one wrong value does not hide the next. Unknown keys are collected on the way.
    let mut raw = None;
    let mut unknown: Vec<String> = Vec::new();
    let mut removed: Vec<Vec<Segment>> = Vec::new();
    let mut renumbered = Renumbered::default();
    for _ in 0..256 {
        unknown.clear();
        let mut note_unknown = |p: serde_ignored::Path<'_>| unknown.push(p.to_string());
        let de = serde_ignored::Deserializer::new(doc.clone(), &mut note_unknown);
        match serde_path_to_error::deserialize::<_, RawConfig>(de) {
            Ok(r) => {
                raw = Some(r);
                break;
            }
            Err(e) => {
                let mut at = segments(e.path());
                let message = e.into_inner().to_string();
                // toml's own text repeats the key on a line of its own
                let message = plain_types(message.split("\nin `").next().unwrap_or_default().trim_end());
                // an environment value read as a number or boolean where the key wants
                // text: it was meant as text
                if let Some(o) = overrides.iter().find(|o| o.path == at && o.parsed) {
                    if let Some(v) = value_at(&mut doc, &at) {
                        if !v.is_str() {
                            *v = toml::Value::String(o.raw.clone());
                            continue;
                        }
                    }
                }
                // A required key that is missing (or that was taken out below): say so once,
                // then put a stand-in there so that the rest of its section is checked too.
                if let Some(field) = message.strip_prefix("missing field `").and_then(|m| m.strip_suffix('`')) {
                    at.push(Segment::Key(field.to_string()));
                    if !removed.contains(&at) {
                        found.add(&dotted(&renumbered.original(&at)), "is missing (required)".into());
                    }
                    let stand_in = STAND_INS.iter().find(|(k, _)| *k == dotted(&at));
                    if let (Some((_, v)), Some((Segment::Key(last), parent))) = (stand_in, at.split_last()) {
                        if let Some(toml::Value::Table(t)) = value_at(&mut doc, parent) {
                            t.insert(last.clone(), toml::Value::String((*v).to_string()));
                            continue;
                        }
                    }
                    at.pop();
                } else {
                    found.add(&dotted(&renumbered.original(&at)), message);
                }
                let original = renumbered.original(&at);
                if !remove_at(&mut doc, &at) {
                    break;
                }
                renumbered.taken_out(&original);
                removed.push(at);
            }
        }
    }
    for key in unknown {
        // serde_ignored writes `?` for the inside of an Option (our optional sections)
        let key = key.split('.').filter(|k| *k != "?").collect::<Vec<_>>().join(".");
        found.add(&key, "unknown key (misspelt? every key is in sluice.example.toml)".into());
    }
    let Some(raw) = raw else {
        return Err(ConfigError::Invalid { path: path.into(), problems: found.problems });
    };
    let required: &[(bool, &str)] = match role {
        Role::Run => {
            &[(raw.source.is_some(), "source"), (raw.kafka.is_some(), "kafka"), (raw.registry.is_some(), "registry")]
        }
        Role::Sink => &[
            (raw.kafka.is_some(), "kafka"),
            (raw.registry.is_some(), "registry"),
            (raw.elasticsearch.is_some(), "elasticsearch"),
        ],
        Role::Archive => &[(raw.source.is_some(), "source"), (raw.archive.is_some(), "archive")],
    };
    for &(present, name) in required {
        let reported = found.problems.iter().any(|p| p.key == name || p.key.starts_with(&format!("{name}.")));
        if !present && !reported {
            found.add(name, format!("the [{name}] section is missing"));
        }
    }
    let mut checks = Problems::default();
    if let (Some(s), Role::Archive) = (&raw.source, role) {
        s.validate(&mut checks);
    }
    if let (Some(a), Role::Archive) = (&raw.archive, role) {
        a.validate(raw.source.as_ref(), &mut checks);
    }
    if let (Some(s), Role::Run) = (&raw.source, role) {
        s.validate(&mut checks);
        if let FirstStart::Conflict(why) = first_start_rule(&doc, &s.start, raw.snapshot.mode) {
            checks.push("source.start", why);
        }
    }
    if let Some(e) = &raw.elasticsearch {
        e.validate(&mut checks);
    }
    if let Some(k) = &raw.kafka {
        k.validate(&mut checks);
    }
    if let Some(r) = &raw.registry {
        r.validate(&mut checks);
    }
    raw.output.validate(&mut checks);
    raw.snapshot.validate(&mut checks);
    raw.filter.validate(&mut checks);
    for (i, r) in raw.routes.iter().enumerate() {
        r.validate(i, &mut checks);
    }
    for (key, message) in checks.0 {
        found.add(&key, message);
    }
    if found.problems.is_empty() {
        Ok((raw, doc))
    } else {
        Err(ConfigError::Invalid { path: path.into(), problems: found.problems })
    }
}

/// One `SLUICE_*` override applied to the document.
pub(super) struct Override {
    path: Vec<Segment>,
    variable: String,
    /// The variable's text.
    raw: String,
    /// True when the text was read as a TOML value (a number, a boolean, an array) rather than
    /// as a string.
    parsed: bool,
}

/// Sets `path = value` in `doc`, creating tables on the way; a non-table in the way wins (the
/// deserializer then reports the type error).
pub(super) fn set_path(doc: &mut toml::Value, path: &[Segment], value: toml::Value) {
    let Some((Segment::Key(first), rest)) = path.split_first() else { return };
    let toml::Value::Table(table) = doc else { return };
    if rest.is_empty() {
        table.insert(first.clone(), value);
        return;
    }
    let next = table.entry(first.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
    set_path(next, rest, value);
}

/// Tables whose keys are librdkafka's or Kafka's own dotted property names: an environment
/// variable cannot hold a dot, so `SLUICE_KAFKA__PROPERTIES__MESSAGE_MAX_BYTES` sets
/// `message.max.bytes` (no librdkafka or topic property has an underscore in its name).
pub(super) const DOTTED_TABLES: &[(&str, &str)] =
    &[("kafka", "properties"), ("kafka", "topic_config"), ("elasticsearch", "consumer")];

/// The sections and their keys, for naming a variable written with one underscore where two
/// belong (`SLUICE_ELASTICSEARCH_BULK_MAX_ACTIONS`).
pub(super) fn section_keys() -> Vec<(&'static str, &'static [&'static str])> {
    vec![
        ("source", struct_fields::<SourceSection>()),
        ("kafka", struct_fields::<KafkaSection>()),
        ("registry", struct_fields::<RegistrySection>()),
        ("output", struct_fields::<OutputSection>()),
        ("filter", struct_fields::<FilterSection>()),
        ("metrics", struct_fields::<MetricsSection>()),
        ("snapshot", struct_fields::<SnapshotSection>()),
        ("elasticsearch", struct_fields::<ElasticsearchSection>()),
        ("archive", struct_fields::<ArchiveSection>()),
    ]
}

/// The field names serde's derive gives a struct (it hands them to `deserialize_struct`).
pub(super) fn struct_fields<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{Deserializer, Visitor};
    /// Ends the probe as soon as the field names are known.
    #[derive(Debug)]
    struct Stop;
    impl fmt::Display for Stop {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("probe")
        }
    }
    impl std::error::Error for Stop {}
    impl serde::de::Error for Stop {
        fn custom<M: fmt::Display>(_: M) -> Self {
            Stop
        }
    }
    struct Probe<'a>(&'a mut &'static [&'static str]);
    impl<'de> Deserializer<'de> for Probe<'_> {
        type Error = Stop;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            *self.0 = fields;
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

/// serde's message with the Rust type it expected said in words (`expected usize` means
/// nothing to a user writing TOML).
fn plain_types(message: &str) -> String {
    const WORDS: &[(&str, &str)] = &[
        ("usize", "a whole number, 0 or more"),
        ("u64", "a whole number, 0 or more"),
        ("u32", "a whole number from 0 to 4294967295"),
        ("u16", "a whole number from 0 to 65535"),
        ("u8", "a whole number from 0 to 255"),
        ("i64", "a whole number"),
        ("i32", "a whole number"),
        ("f64", "a number"),
        ("f32", "a number"),
    ];
    let Some((head, ty)) = message.rsplit_once("expected ") else { return message.to_string() };
    WORDS
        .iter()
        .find(|(t, _)| *t == ty)
        .map_or_else(|| message.to_string(), |(_, words)| format!("{head}expected {words}"))
}

/// A `SLUICE_*` variable without `__` that names a section and one of its keys with a single
/// underscore between them: the problem (it would otherwise be ignored as a CLI variable).
pub(super) fn misnamed_variable(variable: &str) -> Option<Problem> {
    let rest = variable.strip_prefix("SLUICE_")?.to_ascii_lowercase();
    section_keys().into_iter().find_map(|(section, keys)| {
        let key = rest.strip_prefix(section)?.strip_prefix('_')?;
        keys.contains(&key).then(|| Problem {
            key: format!("{section}.{key}"),
            variable: Some(variable.to_string()),
            message: format!(
                "is not read: a variable names its section and key with two underscores between them, \
                 SLUICE_{}__{}",
                section.to_ascii_uppercase(),
                key.to_ascii_uppercase()
            ),
        })
    })
}

/// What the `SLUICE_*` variables did to the document.
pub(super) struct Applied {
    /// What each variable of the `SLUICE_<SECTION>__<KEY>` form set.
    pub(super) overrides: Vec<Override>,
    /// The problems of variables that look meant for a key but set none.
    pub(super) problems: Vec<Problem>,
    /// The other variables, which set nothing (the command line's, the tests', or strays:
    /// [`super::variables`]).
    pub(super) unread: Vec<String>,
}

/// Applies `SLUICE_<SECTION>__<KEY>` variables to the parsed document.
pub(super) fn apply_env(doc: &mut toml::Value, env: impl IntoIterator<Item = (String, String)>) -> Applied {
    let mut applied = Vec::new();
    let mut problems = Vec::new();
    let mut unread = Vec::new();
    let mut vars: Vec<(String, String)> = env.into_iter().filter(|(k, _)| k.starts_with("SLUICE_")).collect();
    vars.sort();
    for (k, v) in vars {
        let Some(path) = k.strip_prefix("SLUICE_") else { continue };
        let mut parts: Vec<String> = path.split("__").map(str::to_ascii_lowercase).collect();
        if parts.len() < 2 || parts.iter().any(String::is_empty) {
            // SLUICE_LOG and friends are CLI settings, not config keys
            match misnamed_variable(&k) {
                Some(p) => problems.push(p),
                None => unread.push(k),
            }
            continue;
        }
        if let [section, table, name] = parts.as_mut_slice() {
            if DOTTED_TABLES.contains(&(section.as_str(), table.as_str())) {
                *name = name.replace('_', ".");
            }
        }
        let parsed = format!("x = {v}").parse::<toml::Table>().ok().and_then(|mut t| t.remove("x"));
        let is_parsed = parsed.is_some();
        let value = parsed.unwrap_or_else(|| toml::Value::String(v.clone()));
        let path: Vec<Segment> = parts.into_iter().map(Segment::Key).collect();
        set_path(doc, &path, value);
        applied.push(Override { path, variable: k, raw: v, parsed: is_parsed });
    }
    Applied { overrides: applied, problems, unread }
}
