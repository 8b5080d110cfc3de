//! The configuration's unit tests: loading, the environment, validation, every section.

use super::snapshot::condition_problem;
use super::values::parse_byte_size;
use super::*;

const MINIMAL: &str = r#"
[source]
name = "shop"
url = "mysql://repl@127.0.0.1:3306"

[kafka]
brokers = "127.0.0.1:9092"

[registry]
url = "http://127.0.0.1:8081"
"#;

fn load(text: &str, env: Vec<(&str, &str)>) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("sluice.toml"), env.into_iter().map(|(a, b)| (a.to_string(), b.to_string())))
}

fn problems(text: &str, env: Vec<(&str, &str)>) -> Vec<Problem> {
    match load(text, env) {
        Err(ConfigError::Invalid { problems, .. }) => problems,
        other => panic!("expected problems, got {other:?}"),
    }
}

fn sink(text: &str, env: Vec<(&str, &str)>) -> Result<SinkConfig, ConfigError> {
    SinkConfig::parse(text, Path::new("sluice.toml"), env.into_iter().map(|(a, b)| (a.to_string(), b.to_string())))
}

/// Every character Elasticsearch refuses in an index name is named at once, each once (one
/// per try made a user fix the setting again and again).
#[test]
fn an_index_name_s_refused_characters_all_at_once() {
    let text = "[kafka]\nbrokers = \"k\"\n[registry]\nurl = \"http://r\"\n[elasticsearch]\nurl = \"http://es:9200\"\n\
                index = \"cdc {topic}*x:y z\"\n[elasticsearch.indices]\n\"shop.orders\" = \"a|b|c\"\n";
    let p = match sink(text, vec![]) {
        Err(ConfigError::Invalid { problems, .. }) => problems,
        other => panic!("{other:?}"),
    };
    let of = |key: &str| p.iter().find(|p| p.key == key).map(|p| p.message.clone()).unwrap_or_default();
    assert_eq!(
        of("elasticsearch.index"),
        "must not contain ' ', '*' or ':' (Elasticsearch refuses them in index names)",
        "{p:#?}"
    );
    assert_eq!(
        of("elasticsearch.indices.shop.orders"),
        "must not contain '|' (Elasticsearch refuses it in index names)",
        "{p:#?}"
    );
}

/// The sink needs [kafka], [registry] and [elasticsearch], not [source] (nor its password);
/// every problem of its section is listed at once, each naming its key.
#[test]
fn the_sink_configuration() {
    let text = "[kafka]\nbrokers = \"k:9092\"\ntopic_prefix = \"cdc\"\n[registry]\nurl = \"http://r:8081\"\n\
                    [elasticsearch]\nurl = \"http://es:9200\"\n";
    let cfg = sink(text, vec![("SLUICE_ELASTICSEARCH__BULK_MAX_ACTIONS", "500")]).unwrap();
    assert_eq!(cfg.elasticsearch.index, "{topic}");
    assert_eq!(cfg.elasticsearch.bulk_max_actions, 500);
    assert_eq!(cfg.elasticsearch.bulk_max_bytes, 5 << 20);
    assert_eq!(cfg.elasticsearch.group("cdc"), "sluice-es-cdc");
    assert_eq!(cfg.elasticsearch.decimal, EsDecimal::Keyword);
    // a [source] with a password file that is not there does not matter to the sink
    let with_source = format!("[source]\nname = \"s\"\nurl = \"mysql://u@h\"\npassword_file = \"/nowhere\"\n{text}");
    assert!(sink(&with_source, vec![]).is_ok());
    let missing = match sink("[kafka]\nbrokers = \"k\"\n[registry]\nurl = \"http://r\"\n", vec![]) {
        Err(ConfigError::Invalid { problems, .. }) => problems,
        other => panic!("{other:?}"),
    };
    assert_eq!(missing[0].key, "elasticsearch");
    let bad = "[kafka]\nbrokers = \"k\"\n[registry]\nurl = \"http://r\"\n[elasticsearch]\nurl = \"es:9200\"\n\
                   index = \"Sluice Index\"\nbulk_max_actions = 0\ndecimal = \"float\"\ngeo_point = [\"shop.t\"]\n\
                   ca_file = \"/ca.pem\"\npassword_env = \"ES_PW\"\n[elasticsearch.indices]\n\"shop.*\" = \"x\"\n";
    let p = match sink(bad, vec![]) {
        Err(ConfigError::Invalid { problems, .. }) => problems,
        other => panic!("{other:?}"),
    };
    let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
    for key in [
        "elasticsearch.url",
        "elasticsearch.index",
        "elasticsearch.bulk_max_actions",
        "elasticsearch.decimal",
        "elasticsearch.geo_point",
        "elasticsearch.ca_file",
        "elasticsearch.indices.shop.*",
        // a password without a user was dropped: the sink went in unauthenticated
        "elasticsearch.password_env",
    ] {
        assert!(keys.contains(&key), "{key} in {p:#?}");
    }
}

#[test]
fn defaults_and_env_overrides() {
    let cfg = load(
        MINIMAL,
        vec![("SLUICE_KAFKA__PARTITIONS", "6"), ("SLUICE_SOURCE__HEARTBEAT", "2s"), ("SLUICE_LOG", "debug")],
    )
    .unwrap();
    assert_eq!(cfg.kafka.partitions, 6);
    assert_eq!(cfg.source.heartbeat, Duration::from_secs(2));
    assert_eq!(cfg.kafka.topic_prefix, "sluice");
    // no source.start: the default snapshot covers the past, so streaming starts now
    assert_eq!(cfg.snapshot.mode, SnapshotMode::Initial);
    assert_eq!(cfg.source.start, StartFrom::Current);
    assert_eq!((cfg.snapshot.chunk_size, cfg.snapshot.chunk_max_bytes), (10_000, 8 << 20));
    let never = load(&format!("{MINIMAL}\n[snapshot]\nmode = \"never\"\n"), vec![]).unwrap();
    assert_eq!(never.source.start, StartFrom::Earliest);
    let given = load(MINIMAL, vec![("SLUICE_SOURCE__START", "earliest")]).unwrap();
    assert_eq!(given.source.start, StartFrom::Earliest, "a start given is a start kept");
    assert_eq!(given.snapshot.mode, SnapshotMode::Never, "and its history replaces the snapshot");
    assert_eq!(cfg.source.tls, TlsSetting::Preferred);
    assert_eq!(cfg.source.url, SourceUrl { user: "repl".into(), host: "127.0.0.1".into(), port: 3306 });
    assert!(cfg.output.tombstones);
    assert!(!cfg.output.partial_images, "partial row images are opt-in");
    assert_eq!(cfg.output.value_mode, ValueMode::Envelope);
    let cfg = load(&format!("{MINIMAL}\n[output]\npartial_images = true\n"), vec![]).unwrap();
    assert!(cfg.output.partial_images);
}

/// One setting decides where the first start's rows come from (issue 20, item 1): an
/// explicit start in the past without a mode is a start without snapshot, with a mode that
/// snapshots it is refused naming both keys; `current` goes with any mode.
#[test]
fn the_first_start_rule() {
    for start in ["earliest", "mysql-bin.000003:4", "0-1-100"] {
        let cfg = load(MINIMAL, vec![("SLUICE_SOURCE__START", start)]).unwrap();
        assert_eq!(cfg.snapshot.mode, SnapshotMode::Never, "{start}");
        let why = cfg.snapshot.mode_implied.unwrap();
        assert!(why.contains("no initial snapshot") && why.contains(start), "{why}");
        for mode in ["initial", "when_needed"] {
            let text = format!("{MINIMAL}\n[snapshot]\nmode = \"{mode}\"\n");
            let p = problems(&text, vec![("SLUICE_SOURCE__START", start)]);
            assert_eq!(p.len(), 1, "{p:#?}");
            assert_eq!(p[0].key, "source.start");
            assert_eq!(p[0].variable.as_deref(), Some("SLUICE_SOURCE__START"));
            assert!(p[0].message.contains(&format!("snapshot.mode = \"{mode}\"")), "{}", p[0].message);
            assert!(p[0].message.contains("twice"), "{}", p[0].message);
        }
        for mode in ["never", "schema_only"] {
            let text = format!("{MINIMAL}\n[snapshot]\nmode = \"{mode}\"\n");
            let cfg = load(&text, vec![("SLUICE_SOURCE__START", start)]).unwrap();
            assert!(cfg.snapshot.mode_implied.is_none());
            assert_eq!(cfg.source.start.to_string(), start);
        }
    }
    for mode in ["initial", "when_needed", "never", "schema_only"] {
        let text = format!("{MINIMAL}\n[snapshot]\nmode = \"{mode}\"\n");
        let cfg = load(&text, vec![("SLUICE_SOURCE__START", "current")]).unwrap();
        assert_eq!(cfg.source.start, StartFrom::Current);
        assert!(cfg.snapshot.mode_implied.is_none());
    }
    let cfg = load(MINIMAL, vec![("SLUICE_SOURCE__START", "current")]).unwrap();
    assert_eq!(cfg.snapshot.mode, SnapshotMode::Initial, "current with the default mode snapshots");
}

/// Environment variables that look meant for a key but set none are problems naming the
/// right variable; an unknown section set by a variable is blamed on it; librdkafka's dotted
/// names can be set from the environment and are checked at load (issue 20, item 11).
#[test]
fn environment_variables_that_miss_their_key() {
    let sink_text = "[kafka]\nbrokers = \"k\"\n[registry]\nurl = \"http://r\"\n[elasticsearch]\nurl = \"http://e\"\n";
    let p = match sink(sink_text, vec![("SLUICE_ELASTICSEARCH_BULK_MAX_ACTIONS", "abc")]) {
        Err(ConfigError::Invalid { problems, .. }) => problems,
        other => panic!("{other:?}"),
    };
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0].key, "elasticsearch.bulk_max_actions");
    assert_eq!(p[0].variable.as_deref(), Some("SLUICE_ELASTICSEARCH_BULK_MAX_ACTIONS"));
    assert!(p[0].message.contains("SLUICE_ELASTICSEARCH__BULK_MAX_ACTIONS"), "{}", p[0].message);
    // the test tools' own variables share a section's prefix but name no key
    assert!(load(MINIMAL, vec![("SLUICE_REGISTRY_BIN", "/x"), ("SLUICE_SNAPSHOT_ROWS", "5")]).is_ok());
    let p = problems(MINIMAL, vec![("SLUICE_SOURCE_SERVER_ID", "7"), ("SLUICE_SNAPSHOT_WHERE", "x")]);
    let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["snapshot.where", "source.server_id"]);

    let p = problems(MINIMAL, vec![("SLUICE_SNAPSHOTS__MODE", "never")]);
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0].variable.as_deref(), Some("SLUICE_SNAPSHOTS__MODE"), "{p:#?}");
    let e = load(MINIMAL, vec![("SLUICE_SNAPSHOTS__MODE", "never")]).unwrap_err().to_string();
    assert!(e.contains("and the SLUICE_* environment"), "{e}");

    let cfg = load(
        MINIMAL,
        vec![
            ("SLUICE_KAFKA__PROPERTIES__MESSAGE_MAX_BYTES", "2000000"),
            ("SLUICE_KAFKA__TOPIC_CONFIG__RETENTION_MS", "1000"),
        ],
    )
    .unwrap();
    assert_eq!(cfg.kafka.properties.get("message.max.bytes").map(String::as_str), Some("2000000"));
    assert_eq!(cfg.kafka.topic_config.get("retention.ms").map(String::as_str), Some("1000"));
    let p = problems(MINIMAL, vec![("SLUICE_KAFKA__PROPERTIES__MESSAGE_MAX_BYTE", "2000000")]);
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0].key, "kafka.properties.\"message.max.byte\"");
    assert_eq!(p[0].variable.as_deref(), Some("SLUICE_KAFKA__PROPERTIES__MESSAGE_MAX_BYTE"));
    assert!(p[0].message.contains("librdkafka refuses it"), "{}", p[0].message);
    let p = problems(&format!("{MINIMAL}\n[kafka.properties]\n\"linger.ms\" = \"soon\"\n"), vec![]);
    assert_eq!(p[0].key, "kafka.properties.\"linger.ms\"", "{p:#?}");
    assert!(p[0].variable.is_none());
}

/// A CA file that is not there, and a failover list naming `source.url` itself or a server
/// twice, are problems at load (issue 20's messages).
#[test]
fn source_files_and_failover_lists() {
    let p = problems(MINIMAL, vec![("SLUICE_SOURCE__CA_FILE", "/no/such/ca.pem")]);
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!((p[0].key.as_str(), p[0].message.as_str()), ("source.ca_file", "/no/such/ca.pem does not exist"));
    let list = "[\"mysql://repl@127.0.0.1:3306\", \"mysql://repl@replica:3306\", \"mysql://repl@REPLICA:3306\"]";
    let p = problems(MINIMAL, vec![("SLUICE_SOURCE__FAILOVER", list)]);
    let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["source.failover[0]", "source.failover[2]"], "{p:#?}");
    assert!(p[0].message.contains("is source.url itself") && p[1].message.contains("listed twice"), "{p:#?}");
}

/// `[snapshot.where]` is one condition: nothing that closes its parenthesis, adds a
/// statement or comments out the rest of the chunk query (issue 20, item 10).
#[test]
fn snapshot_conditions_are_one_expression() {
    for ok in [
        "created_at >= '2024-01-01'",
        "id <= 10 AND (status IN ('a', 'b') OR note IS NULL)",
        "id IN (SELECT id FROM shop.keep)",
        "`odd name` <> 'a;b'",
    ] {
        assert_eq!(condition_problem(ok), None, "{ok}");
    }
    for bad in [
        "id <= 10) UNION SELECT 1,2 -- ",
        "1=1) UNION SELECT 1,2 FROM t WHERE (1=1",
        "id = 1; DROP TABLE t",
        "id = 1 /* x */",
        "id = 1 # rest",
        "id = 1)",
        "(id = 1",
        "",
        "id = 1 ORDER BY id",
    ] {
        assert!(condition_problem(bad).is_some(), "{bad:?} accepted");
    }
    let p =
        problems(&format!("{MINIMAL}\n[snapshot.where]\n\"shop.t\" = \"id <= 10) UNION SELECT 1,2 -- \"\n"), vec![]);
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0].key, "snapshot.where.\"shop.t\"");
}

/// A variable's text that reads as a number is still text where the key wants text.
#[test]
fn environment_values_take_the_keys_type() {
    let cfg = load(MINIMAL, vec![("SLUICE_SOURCE__NAME", "123"), ("SLUICE_KAFKA__BROKERS", "7")]).unwrap();
    assert_eq!(cfg.source.name, "123");
    assert_eq!(cfg.kafka.brokers, "7");
    let cfg = load(MINIMAL, vec![("SLUICE_SOURCE__START", "mysql-bin.000003:4")]).unwrap();
    assert_eq!(cfg.source.start, StartFrom::Position { file: "mysql-bin.000003".into(), position: 4 });
}

/// The documented example loads and validates as shipped, and with its commented
/// `[kafka.properties]` block switched on.
#[test]
fn the_example_configuration_is_valid() {
    // the secret file it names, here
    let secrets = tempfile::tempdir().unwrap();
    let password = secrets.path().join("mysql-password");
    std::fs::write(&password, "secret\n").unwrap();
    let example = include_str!("../../../../sluice.example.toml")
        .replace("/run/secrets/mysql-password", password.to_str().unwrap());
    let cfg = load(&example, vec![]).unwrap();
    assert_eq!(cfg.source.name, "shop");
    assert_eq!(cfg.kafka.batch_max_records, 100_000);
    let mut in_block = false;
    let uncommented: String = example
        .lines()
        .map(|l| {
            in_block = (in_block && l.starts_with("# \"")) || l.starts_with("# [kafka.properties]");
            let l = if in_block { &l[2..] } else { l };
            format!("{l}\n")
        })
        .collect();
    let cfg = load(&uncommented, vec![]).unwrap();
    assert_eq!(cfg.kafka.properties.get("queue.buffering.max.messages").map(String::as_str), Some("50000"));
    assert_eq!(cfg.kafka.properties.get("sasl.username").map(String::as_str), Some("sluice"));
    // the commented [elasticsearch] block, uncommented, is a valid sink configuration
    let es_at = example.find("# [elasticsearch]").unwrap();
    let es: String = example[es_at..]
        .lines()
        .map(|l| format!("{}\n", l.strip_prefix("# ").unwrap_or(l)))
        .collect::<String>()
        .replace("/run/secrets/es-password", password.to_str().unwrap())
        .replace("ca_file = \"/etc/sluice/es-ca.pem\"", "");
    let text = format!("{}\n{es}", &example[..es_at]);
    let sink = SinkConfig::parse(&text, Path::new("sluice.toml"), Vec::new()).unwrap();
    assert_eq!(sink.elasticsearch.indices["shop.orders"], "sluice.shop.orders-v2");
    assert_eq!(sink.elasticsearch.json, EsJson::Flattened);
    // the commented [archive] block, uncommented, is an archiver's configuration
    let at = example.find("# [archive]").unwrap();
    let block: String = example[at..]
        .lines()
        // its settings, and the comments continuing them on indented lines
        .take_while(|l| l.starts_with("# ") || (l.starts_with(' ') && l.trim_start().starts_with('#')))
        .map(|l| format!("{}\n", l.strip_prefix("# ").unwrap_or(l)))
        .collect::<String>()
        .replace("/run/secrets/s3", password.to_str().unwrap());
    // a directory: without the object store's settings
    let dir_block: String = block
        .lines()
        .filter(|l| !l.starts_with("spool") && !l.starts_with("credentials_file"))
        .map(|l| format!("{l}\n"))
        .collect();
    let text = format!("{example}\n{dir_block}");
    let archive = ArchiveConfig::parse(&text, Path::new("sluice.toml"), Vec::new()).unwrap();
    assert_eq!((archive.archive.server_id, archive.archive.start), (51_003, ArchiveStart::Earliest));
    // an object store needs a spool; a directory takes none; an unknown scheme is refused
    let store =
        format!("{example}\n{}", block.replace("to = \"/var/lib/sluice/archive\"", "to = \"s3://bucket/binlogs\""));
    let archive = ArchiveConfig::parse(&store, Path::new("sluice.toml"), Vec::new()).unwrap();
    assert_eq!(archive.archive.to, "s3://bucket/binlogs");
    let unspooled: String = store.lines().filter(|l| !l.starts_with("spool")).map(|l| format!("{l}\n")).collect();
    let e = ArchiveConfig::parse(&unspooled, Path::new("sluice.toml"), Vec::new()).unwrap_err().to_string();
    assert!(e.contains("archive.spool") && e.contains("is needed"), "{e}");
    let e = ArchiveConfig::parse(&format!("{text}spool = \"/tmp/x\"\n"), Path::new("sluice.toml"), Vec::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("archive.spool") && e.contains("object store in archive.to only"), "{e}");
    let odd = store.replace("s3://", "ftp://");
    let e = ArchiveConfig::parse(&odd, Path::new("sluice.toml"), Vec::new()).unwrap_err().to_string();
    assert!(e.contains("ftp:// is not a store"), "{e}");
    // it needs its own server id
    let same = text.replace("server_id = 51003", "server_id = 51001");
    let e = ArchiveConfig::parse(&same, Path::new("sluice.toml"), Vec::new()).unwrap_err().to_string();
    assert!(e.contains("archive.server_id"), "{e}");
    // a file where the directory goes: said at load (it failed at the first write, exit 1)
    let file = tempfile::NamedTempFile::new().unwrap();
    let on_file = text.replace("/var/lib/sluice/archive", file.path().to_str().unwrap());
    let e = ArchiveConfig::parse(&on_file, Path::new("sluice.toml"), Vec::new()).unwrap_err().to_string();
    assert!(e.contains("archive.to") && e.contains("is a file: give a directory"), "{e}");
}

#[test]
fn unknown_keys_are_errors() {
    let p = problems(&format!("{MINIMAL}\n[output]\ntombstone = false\n[sourcee]\nx = 1\n"), vec![]);
    let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["output.tombstone", "sourcee"], "{p:#?}");
    assert!(p[0].message.starts_with("unknown key"), "{p:#?}");
}

#[test]
fn every_problem_at_once() {
    let text = MINIMAL
        .replace("name = \"shop\"", "name = \"bad name\"")
        .replace("repl@", "repl:secret@")
        .replace("http://127", "ftp://127");
    let p = problems(&text, vec![("SLUICE_KAFKA__PARTITIONS", "0"), ("SLUICE_METRICS__LISTEN", "everywhere:9187")]);
    let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["metrics.listen", "source.url", "source.name", "kafka.partitions", "registry.url"], "{p:#?}");
    assert!(p[0].message.contains("is not an address like 0.0.0.0:9187"), "{p:#?}");
    assert!(p[1].message.contains("must not contain a password"), "{p:#?}");
    assert!(!format!("{p:?}").contains("secret"), "the password must not be echoed: {p:#?}");
}

/// A producer queue smaller than one record of `message.max.bytes` is refused (librdkafka
/// would wait for room forever); left out, Sluice sizes it to hold one.
#[test]
fn producer_queue_holds_the_largest_record() {
    let with = |props: &str| MINIMAL.replace("[registry]", &format!("[kafka.properties]\n{props}\n\n[registry]"));
    let p = problems(&with("\"message.max.bytes\" = \"67108864\"\n\"queue.buffering.max.kbytes\" = \"8192\""), vec![]);
    let text: Vec<String> = p.iter().map(ToString::to_string).collect();
    assert!(
        text.iter().any(|t| t.contains(
            "kafka.properties.\"queue.buffering.max.kbytes\": 8192 KiB cannot hold one \
                 record of message.max.bytes = 67108864"
        ) && t.contains("at least 65536")),
        "{text:#?}"
    );
    let cfg = load(&with("\"message.max.bytes\" = \"67108864\""), vec![]).unwrap();
    assert_eq!(crate::kafka::queue_max_kbytes(&cfg.kafka.properties), 65537);
    let cfg = load(MINIMAL, vec![]).unwrap();
    assert_eq!(crate::kafka::queue_max_kbytes(&cfg.kafka.properties), 8192);
    let cfg = load(&with("\"queue.buffering.max.kbytes\" = \"100000\""), vec![]).unwrap();
    assert_eq!(crate::kafka::queue_max_kbytes(&cfg.kafka.properties), 100_000);
}

/// `transaction_timeout` within librdkafka's range and longer than a batch stays open; the
/// passwords librdkafka takes come from files or variables, and one written in the properties
/// is refused with the setting to use instead.
#[test]
fn kafka_transaction_timeout_and_passwords() {
    let kafka = |extra: &str| MINIMAL.replace("[registry]", &format!("{extra}\n\n[registry]"));
    for (timeout, says) in [
        ("0s", "must be from 1s to 24days"),
        ("1000h", "must be from 1s to 24days"),
        ("1s", "1s must be longer than kafka.batch_max_delay (5s)"),
    ] {
        let text = MINIMAL.replace(
            "brokers = \"127.0.0.1:9092\"",
            &format!("brokers = \"127.0.0.1:9092\"\ntransaction_timeout = \"{timeout}\"\nbatch_max_delay = \"5s\""),
        );
        let p = problems(&text, vec![]);
        assert!(
            p.iter().any(|p| p.key == "kafka.transaction_timeout" && p.message.contains(says)),
            "{timeout}: {p:#?}"
        );
    }
    // librdkafka's own rule, said by `sluice check` rather than at the producer's creation
    let text =
        MINIMAL.replace("brokers = \"127.0.0.1:9092\"", "brokers = \"127.0.0.1:9092\"\ntransaction_timeout = \"30s\"");
    let p = problems(
        &text.replace("[registry]", "[kafka.properties]\n\"socket.timeout.ms\" = \"60000\"\n\n[registry]"),
        vec![],
    );
    assert!(
        p.iter().any(|p| p.key == "kafka.transaction_timeout" && p.message.contains("socket.timeout.ms")),
        "{p:#?}"
    );
    // a delay above the liveness period acts as it
    let text = MINIMAL.replace(
        "brokers = \"127.0.0.1:9092\"",
        "brokers = \"127.0.0.1:9092\"\ntransaction_timeout = \"11s\"\nbatch_max_delay = \"1h\"",
    );
    load(&text, vec![]).unwrap();

    let p = problems(&kafka("[kafka.properties]\n\"ssl.key.password\" = \"hunter2\""), vec![]);
    assert!(p[0].message.contains("kafka.ssl_key_password_file"), "{p:#?}");
    assert!(!format!("{p:?}").contains("hunter2"), "{p:#?}");
    let secrets = tempfile::tempdir().unwrap();
    let key = secrets.path().join("key-password");
    std::fs::write(&key, "hunter2\n").unwrap();
    let text = MINIMAL.replace(
        "brokers = \"127.0.0.1:9092\"",
        &format!("brokers = \"127.0.0.1:9092\"\nssl_key_password_file = {:?}", key.to_str().unwrap()),
    );
    let p = problems(&text, vec![("SLUICE_KAFKA__SSL_KEYSTORE_PASSWORD_ENV", "SLUICE_TEST_KEYSTORE")]);
    assert_eq!(p[0].key, "kafka.ssl_keystore_password_env", "{p:#?}");
    let cfg = load(&text, vec![]).unwrap();
    let passwords: Vec<(&str, String)> =
        cfg.kafka.passwords().unwrap().into_iter().map(|(k, s)| (k, s.expose().to_string())).collect();
    assert_eq!(passwords, [("ssl.key.password", "hunter2".to_string())]);
}

/// Wrong elements of one array are each named by their index in the file (taking the first
/// out must not renumber the next).
#[test]
fn wrong_array_elements_keep_their_indexes() {
    let text = r#"
[source]
name = "shop"
url = "mysql://u@127.0.0.1:3306"
failover = ["nonsense", "mysql://u@h2:3306", "mysql://u:pw@h3:3306", "also bad"]

[kafka]
brokers = "b:9092"

[registry]
url = "http://r:8081"
"#;
    let keys: Vec<String> = problems(text, vec![]).iter().map(|p| p.key.clone()).collect();
    assert_eq!(keys, ["source.failover[0]", "source.failover[2]", "source.failover[3]"]);
}

/// A wrong type, an unknown key or a missing section does not hide the other problems.
#[test]
fn type_errors_do_not_hide_the_rest() {
    let text = r#"
[source]
name = "shop"
url = "mysql://127.0.0.1:35306"
server_id = "abc"
tls = "maybe"
start = "yesterday"
heartbeat = "0s"

[kafka]
brokers = "b:9092"
batch_max_recrods = 5
batch_max_bytes = "16 parsecs"

[filter]
include = ["cdc_test.", "a.b.c", "shop.*"]

[snapshot]
chunk_size = -1
"#;
    let p = problems(text, vec![]);
    let text: Vec<String> = p.iter().map(ToString::to_string).collect();
    let has = |s: &str| assert!(text.iter().any(|t| t.contains(s)), "{s:?} in {text:#?}");
    has("source.url: \"mysql://127.0.0.1:35306\" names no user");
    has("source.server_id: invalid type: string \"abc\", expected a whole number from 0 to 4294967295");
    // the type expected in words, not Rust's name for it
    has("snapshot.chunk_size: invalid value: integer `-1`, expected a whole number, 0 or more");
    has("source.tls: unknown variant `maybe`, expected one of `disabled`, `preferred`");
    has("source.start: \"yesterday\" is not one of earliest, current, FILE:POSITION");
    has("kafka.batch_max_bytes: \"16 parsecs\": unknown unit");
    has("kafka.batch_max_recrods: unknown key");
    has("registry: the [registry] section is missing");
    has("filter.include: \"cdc_test.\" has an empty part");
    // the section with the type errors still had its other keys checked
    has("source.heartbeat: must be from 1s to 1h");
    assert!(!text.iter().any(|t| t.contains("password")), "{text:#?}");
}

/// Problems in values that came from the environment name the variable, not the file.
#[test]
fn environment_problems_name_the_variable() {
    let e = load(MINIMAL, vec![("SLUICE_SOURCE__START", "0-1-x"), ("SLUICE_SOURCE__SERVER_ID", "0")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("SLUICE_SOURCE__START (sets source.start): \"0-1-x\" is not one of"), "{e}");
    assert!(e.contains("SLUICE_SOURCE__SERVER_ID (sets source.server_id): must not be 0"), "{e}");
    assert!(e.starts_with("invalid configuration in sluice.toml and the SLUICE_* environment:"), "{e}");
}

#[test]
fn source_urls() {
    let hint = "the password file";
    assert_eq!(
        SourceUrl::parse("mysql://repl@127.0.0.1:3307", hint).unwrap(),
        SourceUrl { user: "repl".into(), host: "127.0.0.1".into(), port: 3307 }
    );
    let u = SourceUrl::parse("mariadb://us%40er@db.example", hint).unwrap();
    assert_eq!((u.user.as_str(), u.port), ("us@er", 3306));
    assert_eq!(u.to_string(), "us@er@db.example:3306");
    let v6 = SourceUrl::parse("mysql://r@[::1]:3306", hint).unwrap();
    assert_eq!((v6.host.as_str(), v6.to_string()), ("::1", "r@[::1]:3306".to_string()));
    for (bad, says) in [
        ("postgres://x@y", "must start with mysql:// or mariadb://"),
        ("not a url", "must start with mysql:// or mariadb:// (mysql://USER@HOST:PORT)"),
        ("mysql://[bad", "is not a URL like mysql://USER@HOST:PORT"),
        ("mysql://127.0.0.1:35306", "names no user"),
        (
            "mysql://repl:hunter2@h:1",
            "must not contain a password (it would be shown wherever the URL is): use the password file",
        ),
        ("mysql://repl@h:1/shop", "without a database or options"),
    ] {
        let e = SourceUrl::parse(bad, hint).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
        assert!(!e.contains("hunter2"), "{e}");
    }
    assert_eq!(redact_url("mysql://repl:hunter2@h:1"), "mysql://repl:***@h:1");
    assert_eq!(redact_url("mysql://repl@h:1"), "mysql://repl@h:1");
    assert_eq!(redact_url("root:hunter2@127.0.0.1:1"), "root:***@127.0.0.1:1");
    assert_eq!(redact_url("mysql://r@h/db?password=hunter2&x=1"), "mysql://r@h/db?password=***&x=1");
    assert_eq!(
        redact_url("3 | url = \"mysql://root:hunter2@h:1\nat http://a:b@c/ and mail x@y"),
        "3 | url = \"mysql://root:***@h:1\nat http://a:***@c/ and mail x@y"
    );
    // a URL parser ends the password at the authority's last '@', across spaces
    assert_eq!(redact_url("mysql://repl:Hun@ter2Secret@127.0.0.1:1"), "mysql://repl:***@127.0.0.1:1");
    assert_eq!(redact_url("mysql://repl:Hunter2 Secret@127.0.0.1:1"), "mysql://repl:***@127.0.0.1:1");
    assert_eq!(redact_url("\"mysql://repl:a b@c@h:1\" is not a URL"), "\"mysql://repl:***@h:1\" is not a URL");
    assert_eq!(redact_url("mysql://h:3306 is down"), "mysql://h:3306 is down");
    assert_eq!(redact_url("http://a:b@c/x and mail x@y"), "http://a:***@c/x and mail x@y");
    // more masked than the password rather than less: an '@' later in the authority
    assert_eq!(redact_url("http://a:b@c and mail x@y"), "http://a:***@y");
    assert_eq!(redact_url("\"mysql://repl:p@ss word@h:1\" bad"), "\"mysql://repl:***@h:1\" bad");
    assert_eq!(redact_url("\"mysql://repl:it's@h:1\""), "\"mysql://repl:***@h:1\"");
    assert_eq!(redact_url("mysql://repl:ab/c@d@h:1"), "mysql://repl:***@h:1");
    for bad in [
        "root:hunter2@127.0.0.1:1",
        "mysql://r@h:1/db?password=hunter2",
        "mysql://repl:Hun@hunter2@h:1",
        "mysql://repl:hunter2 x@h:1",
        "mysql://repl:hunter2@ x@h:1",
        "mysql://repl:hun'ter2@h:1",
        "mysql://repl:hunter2/x@y@h:1",
    ] {
        let e = SourceUrl::parse(bad, hint).unwrap_err();
        assert!(!e.contains("hunter2") && !e.contains("not root://"), "{e}");
    }
}

#[test]
fn table_patterns() {
    assert_eq!(table_pattern_problem("shop.*"), None);
    assert_eq!(table_pattern_problem("orders"), None);
    assert!(table_pattern_problem("shop.").unwrap().contains("empty part"));
    assert!(table_pattern_problem(".orders").unwrap().contains("empty part"));
    // a dot after the first is the table's own (MariaDB allows one in a name)
    assert_eq!(table_pattern_problem("shop.we.ird"), None);
    assert!(table_pattern_problem("").unwrap().contains("empty pattern"));
}

#[test]
fn byte_sizes() {
    assert_eq!(parse_byte_size("16MiB"), Ok(16 << 20));
    assert_eq!(parse_byte_size("512 KiB"), Ok(512 << 10));
    assert_eq!(parse_byte_size("2GB"), Ok(2_000_000_000));
    assert_eq!(parse_byte_size("100"), Ok(100));
    assert!(parse_byte_size("16 parsecs").unwrap_err().contains("unknown unit"));
    let cfg = load(MINIMAL, vec![("SLUICE_KAFKA__BATCH_MAX_BYTES", "1MiB")]).unwrap();
    assert_eq!(cfg.kafka.batch_max_bytes, 1 << 20);
    let cfg = load(&MINIMAL.replace("[registry]", "batch_max_bytes = \"64KiB\"\n\n[registry]"), vec![]).unwrap();
    assert_eq!(cfg.kafka.batch_max_bytes, 64 << 10);
    assert_eq!(load(MINIMAL, vec![]).unwrap().kafka.batch_max_bytes, 16 << 20);
}

#[test]
fn exclude_columns_need_three_parts() {
    let e = load(&format!("{MINIMAL}\n[filter]\nexclude_columns = [\"shop.password\"]\n"), vec![]).unwrap_err();
    assert!(e.to_string().contains("db.table.column"), "{e}");
}

#[test]
fn secrets_are_redacted() {
    let s = Secret::new("hunter2".into());
    assert_eq!(format!("{s:?}"), "<redacted>");
    assert_eq!(s.expose(), "hunter2");
}
