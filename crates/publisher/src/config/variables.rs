//! The `SLUICE_*` environment variables that are not configuration keys: those Sluice, its
//! tests and its scripts read ([`NOT_CONFIG_VARIABLES`], in one place), and the strays, set
//! but read by nothing: `SLUICE_BOGUS=1`, or a typo such as `SLUICE_KAFKA_BROKER` for
//! `SLUICE_KAFKA__BROKERS`, which would otherwise be ignored without a word. Every command
//! warns of a stray ([`stray_variables`]) and `sluice check` lists it; it is not an error,
//! since a deployment may share its environment with other tools.

#[allow(clippy::wildcard_imports)]
use super::*;

use super::load::{apply_env, section_keys, Applied};

/// The `SLUICE_*` variables that are read, but not as configuration keys. Kept whole by a test
/// that looks for every variable the repository's code and scripts read.
pub const NOT_CONFIG_VARIABLES: &[&str] = &[
    // the command line (clap's `env = ...`)
    "SLUICE_CONFIG",
    "SLUICE_LOG",
    "SLUICE_LOG_FORMAT",
    "SLUICE_PASSWORD",
    "SLUICE_VERIFY_PUSHGATEWAY",
    // the test suites (crates/*/tests) and the scripts (integration/, bench/, .ci/)
    "SLUICE_WORK",
    "SLUICE_REGISTRY_BIN",
    "SLUICE_REQUIRE_MARIADB",
    "SLUICE_KEEP_TEST_SERVERS",
    "SLUICE_BIN",
    "SLUICE_BINS",
    "SLUICE_SNAPSHOT_ROWS",
    "SLUICE_CHAOS_SEED",
    "SLUICE_CHAOS_KILLS",
    "SLUICE_CHAOS_BROKER_RESTARTS",
    "SLUICE_FAULT_OUTAGE_SECS",
    "SLUICE_TEST_SINK_LOG",
    "SLUICE_SEAMS_HOLD",
    "SLUICE_MUTATION_VERBOSE",
];

/// A `SLUICE_*` variable that sets no configuration key and that Sluice does not read
/// otherwise. Its value is never kept (it may be a secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrayVariable {
    /// Its name.
    pub variable: String,
    /// The closest names Sluice reads (none when nothing is close).
    pub nearest: Vec<String>,
}

impl fmt::Display for StrayVariable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "The environment variable {} is set, but Sluice does not read it: it names no configuration key (a key's \
             variable is SLUICE_<SECTION>__<KEY>, two underscores between them, e.g. SLUICE_KAFKA__BROKERS) and is \
             none of Sluice's other variables",
            self.variable
        )?;
        match self.nearest.as_slice() {
            [] => f.write_str("; correct its name, or unset it"),
            [one] => write!(f, "; did you mean {one}?"),
            many => write!(f, "; did you mean one of {}?", many.join(", ")),
        }
    }
}

/// The stray variables of `env` for the configuration `text` (whose `*_env` keys may name
/// variables of the `SLUICE_` prefix too: those are read, as secrets).
pub fn stray_variables(text: &str, env: impl IntoIterator<Item = (String, String)>) -> Vec<StrayVariable> {
    // an unreadable document names no secret variables; its problems are the loader's to report
    let mut doc = toml::Value::Table(text.parse::<toml::Table>().unwrap_or_default());
    let Applied { unread, .. } = apply_env(&mut doc, env);
    let mut secrets = Vec::new();
    secret_variables(&doc, &mut secrets);
    unread
        .into_iter()
        .filter(|v| !NOT_CONFIG_VARIABLES.contains(&v.as_str()) && !secrets.contains(v) && !is_service_link(v))
        .map(|variable| StrayVariable { nearest: nearest(&variable), variable })
        .collect()
}

/// A variable Kubernetes sets in every pod for each Service of its namespace (unless the pod
/// says `enableServiceLinks: false`, as the chart's do): a Service named `sluice` or
/// `sluice-archive` gives `SLUICE_SERVICE_HOST`, `SLUICE_SERVICE_PORT[_<NAME>]`, `SLUICE_PORT`
/// and `SLUICE_PORT_<N>_<TCP|UDP|SCTP>[_PROTO|_PORT|_ADDR]`, which are not meant for Sluice.
fn is_service_link(variable: &str) -> bool {
    if variable.ends_with("_SERVICE_HOST") || variable.ends_with("_PORT") || variable.contains("_SERVICE_PORT") {
        return true;
    }
    // ..._PORT_<digits>_<protocol>[_<part>]
    let parts: Vec<&str> = variable.split('_').collect();
    parts.windows(3).any(|w| {
        matches!(w, ["PORT", n, proto] if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
            && matches!(*proto, "TCP" | "UDP" | "SCTP"))
    })
}

/// The variables the document's `*_env` keys name (`source.password_env`, ...), at any depth.
fn secret_variables(value: &toml::Value, out: &mut Vec<String>) {
    match value {
        toml::Value::Table(t) => {
            for (key, v) in t {
                match v {
                    toml::Value::String(name) if key.ends_with("_env") => out.push(name.clone()),
                    v => secret_variables(v, out),
                }
            }
        }
        toml::Value::Array(a) => a.iter().for_each(|v| secret_variables(v, out)),
        _ => {}
    }
}

/// The names Sluice reads that are closest to `variable` (every configuration key's variable
/// and [`NOT_CONFIG_VARIABLES`]): at most three, at the smallest edit distance, which is at
/// most a third of the name after `SLUICE_` (two for a short name: a swapped pair).
fn nearest(variable: &str) -> Vec<String> {
    let rest = variable.strip_prefix("SLUICE_").unwrap_or(variable);
    let mut names: Vec<String> = section_keys()
        .into_iter()
        .flat_map(|(section, keys)| {
            keys.iter().map(move |k| format!("SLUICE_{}__{}", section.to_ascii_uppercase(), k.to_ascii_uppercase()))
        })
        .collect();
    names.extend(NOT_CONFIG_VARIABLES.iter().map(|v| (*v).to_string()));
    let mut scored: Vec<(usize, String)> = names
        .into_iter()
        .map(|n| (distance(rest, n.strip_prefix("SLUICE_").unwrap_or(&n)), n))
        .filter(|(d, _)| d * 3 <= rest.len().max(6))
        .collect();
    scored.sort();
    let best = scored.first().map(|(d, _)| *d);
    scored.into_iter().take_while(|(d, _)| Some(*d) == best).take(3).map(|(_, n)| n).collect()
}

/// Levenshtein distance (insertions, deletions, substitutions) between two names.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = Vec::with_capacity(b.len() + 1);
        cur.push(i + 1);
        for ((cb, diagonal), up) in b.iter().zip(&prev).zip(prev.iter().skip(1)) {
            let left = cur.last().copied().unwrap_or(0);
            cur.push((diagonal + usize::from(ca != *cb)).min(up + 1).min(left + 1));
        }
        prev = cur;
    }
    prev.last().copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "[source]\nname = \"shop\"\nurl = \"mysql://repl@127.0.0.1:3306\"\npassword_env = \
                           \"SLUICE_DB_PW\"\n[kafka]\nbrokers = \"k:9092\"\n[registry]\nurl = \"http://r:8081\"\n";

    fn strays(text: &str, env: &[(&str, &str)]) -> Vec<StrayVariable> {
        stray_variables(text, env.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())))
    }

    /// A variable that sets no key and is none of Sluice's own is named, with the closest
    /// names when there are any, and never with its value.
    #[test]
    fn variables_that_set_nothing_are_named() {
        let found = strays(
            MINIMAL,
            &[
                ("SLUICE_BOGUS", "hunter2"),
                ("SLUICE_KAFKA_BROKER", "kafka-0:9092"),
                ("SLUICE_WROK", "/tmp/w"),
                ("SLUICE_KAFKA__BROKERS", "kafka-0:9092"),
            ],
        );
        let names: Vec<(&str, Vec<&str>)> =
            found.iter().map(|s| (s.variable.as_str(), s.nearest.iter().map(String::as_str).collect())).collect();
        assert_eq!(
            names,
            [
                ("SLUICE_BOGUS", vec![]),
                ("SLUICE_KAFKA_BROKER", vec!["SLUICE_KAFKA__BROKERS"]),
                ("SLUICE_WROK", vec!["SLUICE_WORK"]),
            ]
        );
        let text = found.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
        assert!(!text.contains("hunter2") && !text.contains("kafka-0"), "{text}");
        assert!(text.contains("SLUICE_KAFKA_BROKER is set, but Sluice does not read it"), "{text}");
        assert!(text.contains("did you mean SLUICE_KAFKA__BROKERS?"), "{text}");
        assert!(text.contains("SLUICE_BOGUS") && text.contains("correct its name, or unset it"), "{text}");
    }

    /// Sluice's own variables, the tests', a secret's variable named by a `*_env` key (in the
    /// file or set from the environment), and a variable that is a misnamed key (already an
    /// error of the loader's) are not strays.
    #[test]
    fn variables_sluice_reads_are_not_strays() {
        let env: Vec<(&str, &str)> = NOT_CONFIG_VARIABLES.iter().map(|v| (*v, "1")).collect();
        assert_eq!(strays(MINIMAL, &env), []);
        assert_eq!(strays(MINIMAL, &[("SLUICE_DB_PW", "secret")]), []);
        let from_env = [("SLUICE_KAFKA__SASL_PASSWORD_ENV", "SLUICE_SASL_PW"), ("SLUICE_SASL_PW", "secret")];
        assert_eq!(strays(MINIMAL, &from_env), []);
        assert_eq!(strays(MINIMAL, &[("SLUICE_SOURCE_SERVER_ID", "7")]), []);
        // what Kubernetes sets for the chart's own Services (`sluice`, `sluice-archive`)
        let links = [
            ("SLUICE_SERVICE_HOST", "10.0.0.7"),
            ("SLUICE_SERVICE_PORT", "9090"),
            ("SLUICE_SERVICE_PORT_METRICS", "9090"),
            ("SLUICE_PORT", "tcp://10.0.0.7:9090"),
            ("SLUICE_PORT_9090_TCP", "tcp://10.0.0.7:9090"),
            ("SLUICE_PORT_9090_TCP_PROTO", "tcp"),
            ("SLUICE_PORT_9090_TCP_PORT", "9090"),
            ("SLUICE_PORT_9090_TCP_ADDR", "10.0.0.7"),
            ("SLUICE_ARCHIVE_SERVICE_HOST", "10.0.0.8"),
            ("SLUICE_ARCHIVE_PORT", "tcp://10.0.0.8:9090"),
            ("SLUICE_ARCHIVE_PORT_9090_UDP_ADDR", "10.0.0.8"),
        ];
        assert_eq!(strays(MINIMAL, &links), []);
        // but a name that only looks a little like one is still a stray
        let near = strays(MINIMAL, &[("SLUICE_PORTS", "1"), ("SLUICE_PORT_X_TCP", "1")]);
        assert_eq!(near.len(), 2, "{near:?}");
    }

    #[test]
    fn edit_distance() {
        assert_eq!(distance("KAFKA_BROKER", "KAFKA__BROKERS"), 2);
        assert_eq!(distance("", "ABC"), 3);
        assert_eq!(distance("ABC", ""), 3);
        assert_eq!(distance("WROK", "WORK"), 2);
        assert_eq!(distance("SAME", "SAME"), 0);
    }

    /// Every `SLUICE_*` variable without `__` that the repository's code and scripts read
    /// (`var("...")`, `var_os("...")`, clap's `env = "..."`, `$X` / `${X}` in scripts) is in
    /// [`NOT_CONFIG_VARIABLES`], so that none of them is warned of as a stray.
    #[test]
    fn every_variable_read_is_listed() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = Vec::new();
        let mut dirs: Vec<PathBuf> =
            ["crates", "integration", "bench", ".ci", "helm", "fuzz"].iter().map(|d| root.join(d)).collect();
        files.extend([root.join("Makefile"), root.join("Dockerfile")]);
        while let Some(dir) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().into_owned();
                if path.is_dir() {
                    if name != "target" && !name.starts_with('.') {
                        dirs.push(path);
                    }
                } else {
                    files.push(path);
                }
            }
        }
        let readers = ["var(\"", "var_os(\"", "env = \"", "${", "$(", "$"];
        let mut unlisted = Vec::new();
        let mut seen = 0;
        for file in files {
            let Ok(text) = std::fs::read_to_string(&file) else { continue };
            for (at, _) in text.match_indices("SLUICE_") {
                let before = text.get(..at).unwrap_or_default();
                if !readers.iter().any(|r| before.ends_with(r)) {
                    continue;
                }
                let name: String = text
                    .get(at..)
                    .unwrap_or_default()
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if name == "SLUICE_" || name.contains("__") {
                    continue;
                }
                seen += 1;
                if !NOT_CONFIG_VARIABLES.contains(&name.as_str()) {
                    unlisted.push(format!("{name} ({})", file.display()));
                }
            }
        }
        assert!(seen > 20, "the scan found {seen} reads: is the repository where it looked?");
        assert_eq!(unlisted, Vec::<String>::new(), "read but not in NOT_CONFIG_VARIABLES");
    }
}
