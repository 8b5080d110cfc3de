//! Secrets stay secret (issue 13): with a distinctive MySQL password, registry basic-auth
//! password and Kafka SASL password, every output of a run at trace level (both log formats),
//! of a wrong password, of `sluice check`, `snapshot`, `position show`, `dump --source`, every
//! `--help`, the `/metrics` page and every record of every topic Sluice wrote are searched for
//! each password (also as the base64 of the basic-auth header). None may appear.
//!
//! The broker here has no SASL listener, so the SASL password is configured (read and handed
//! to librdkafka) but not used to authenticate; the MySQL and registry passwords are used.

use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use support::kafka::{log_text, wait_for, Services, TopicReader};
use support::{free_port, http_get};

const MYSQL_PW: &str = "Qm7-mysql-Zx41kP";
const WRONG_PW: &str = "Qw3-wrong-Hb88tN";
const REGISTRY_PW: &str = "Qr2-registry-Lc59vD";
const SASL_PW: &str = "Qs9-sasl-Ye03fM";

/// Runs `sluice ARGS` at trace level with the secrets' environment; stdout and stderr.
fn sluice(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env("SLUICE_LOG", "trace")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Every record (key and value bytes) of every topic whose name starts with `prefix`.
fn all_records(broker: &str, prefix: &str) -> Vec<u8> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("group.id", "sluice-secrets-reader")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_uncommitted")
        .create()
        .unwrap();
    let md = consumer.fetch_metadata(None, Duration::from_secs(10)).unwrap();
    let mut tpl = TopicPartitionList::new();
    let mut parts = 0;
    for t in md.topics().iter().filter(|t| t.name().starts_with(prefix)) {
        for p in t.partitions() {
            tpl.add_partition_offset(t.name(), p.id(), Offset::Beginning).unwrap();
            parts += 1;
        }
    }
    assert!(parts > 3, "too few partitions found: {parts}");
    consumer.assign(&tpl).unwrap();
    let (mut bytes, mut eof) = (Vec::new(), 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while eof < parts && std::time::Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Err(KafkaError::PartitionEOF(_))) => eof += 1,
            Some(Ok(m)) => {
                bytes.extend_from_slice(m.key().unwrap_or_default());
                bytes.extend_from_slice(m.payload().unwrap_or_default());
            }
            _ => {}
        }
    }
    assert_eq!(eof, parts, "did not read every partition to its end");
    bytes
}

fn assert_clean(what: &str, text: &[u8]) {
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("reg:{REGISTRY_PW}"));
    let hay = String::from_utf8_lossy(text);
    for secret in [MYSQL_PW, WRONG_PW, REGISTRY_PW, SASL_PW, basic.as_str()] {
        assert!(!hay.contains(secret), "{what} shows the secret {secret:?}");
    }
}

#[test]
fn no_password_in_any_output() {
    let Some(services) = Services::start("secrets", &[]) else { return };
    let db = &services.mariadb;
    db.create_repl_user("sec", &format!("IDENTIFIED BY '{MYSQL_PW}'"));
    db.sql("CREATE DATABASE sec; CREATE TABLE sec.t (id INT PRIMARY KEY, v TEXT); INSERT INTO sec.t VALUES (1, 'a'), (2, 'b')");
    let port = free_port();
    let (config, log) = services.config(
        "sec",
        "sasl_password_env = \"SEC_SASL\"",
        &format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n[snapshot]\nmode = \"initial\"\n"),
    );
    let url = format!("mysql://sec@127.0.0.1:{}", db.port);
    let mut env = vec![
        // a snapshot goes with a start at the current position
        ("SLUICE_SOURCE__START", "current"),
        ("SLUICE_SOURCE__URL", url.as_str()),
        ("SLUICE_SOURCE__PASSWORD_ENV", "SEC_MYSQL"),
        ("SEC_MYSQL", MYSQL_PW),
        ("SLUICE_REGISTRY__USERNAME", "reg"),
        ("SLUICE_REGISTRY__PASSWORD_ENV", "SEC_REG"),
        ("SEC_REG", REGISTRY_PW),
        ("SEC_SASL", SASL_PW),
    ];
    let config_arg = config.to_str().unwrap();
    let mut outputs: Vec<(String, Vec<u8>)> = Vec::new();

    // a run at trace level in each log format: snapshot, changes, a new table, /metrics
    for format in ["text", "json"] {
        let logfile = log.with_extension(format!("{format}.log"));
        let file = std::fs::File::create(&logfile).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["run", "--config", config_arg, "--log-format", format])
            .env("SLUICE_LOG", "trace")
            .envs(env.iter().copied())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        let n = if format == "text" { 3 } else { 5 };
        db.sql(&format!("INSERT INTO sec.t VALUES ({n}, 'x'); CREATE TABLE sec.t{n} (id INT PRIMARY KEY); INSERT INTO sec.t{n} VALUES (1)"));
        let mut reader = TopicReader::new(&services);
        wait_for(120, || !reader.read(&format!("sluice.sec.t{n}")).is_empty(), "the records", &logfile);
        outputs.push((format!("/metrics ({format} run)"), http_get(port, "/metrics").1.into_bytes()));
        Command::new("kill").arg(child.id().to_string()).status().unwrap();
        assert!(child.wait().unwrap().success());
        let text = std::fs::read(&logfile).unwrap();
        assert!(String::from_utf8_lossy(&text).to_lowercase().contains("trace"), "no trace-level lines in {format}");
        outputs.push((format!("sluice run --log-format {format} at trace level"), text));
    }

    // the same commands with the wrong password: refused, and the attempt is not shown either
    let wrong: Vec<(&str, &str)> =
        env.iter().map(|&(k, v)| if k == "SEC_MYSQL" { (k, WRONG_PW) } else { (k, v) }).collect();
    let refused = sluice(&["check", "--config", config_arg], &wrong);
    assert!(refused.contains("Access denied") || refused.contains("access denied"), "{refused}");
    outputs.push(("sluice check with a wrong password".into(), refused.into_bytes()));
    let pw_file = log.with_extension("pw");
    std::fs::write(&pw_file, format!("{WRONG_PW}\n")).unwrap();
    let dump_wrong = sluice(&["dump", "--source", &url, "--password-file", pw_file.to_str().unwrap()], &[]);
    outputs.push(("sluice dump --source with a wrong password".into(), dump_wrong.into_bytes()));

    std::fs::write(&pw_file, format!("{MYSQL_PW}\n")).unwrap();
    let dump = sluice(&["dump", "--source", &url, "--password-file", pw_file.to_str().unwrap()], &[]);
    assert!(dump.contains("\"sec\""), "the dump decoded nothing:\n{}", &dump[..dump.len().min(2000)]);
    outputs.push(("sluice dump --source".into(), dump.into_bytes()));
    for args in [
        vec!["check", "--config", config_arg],
        vec!["position", "show", "--config", config_arg],
        vec!["snapshot", "--config", config_arg, "--table", "sec.t"],
    ] {
        let out = sluice(&args, &env);
        outputs.push((format!("sluice {}", args.join(" ")), out.into_bytes()));
    }
    for cmd in ["", "run", "check", "dump", "position", "snapshot"] {
        let mut args: Vec<&str> = cmd.split_whitespace().collect();
        args.push("--help");
        outputs.push((format!("sluice {cmd} --help"), sluice(&args, &env).into_bytes()));
    }
    env.push(("SLUICE_LOG_FORMAT", "json"));
    outputs.push(("sluice check (json)".into(), sluice(&["check", "--config", config_arg], &env).into_bytes()));
    outputs.push(("every topic's records".into(), all_records(&services.broker, "sluice")));
    outputs.push(("the test log".into(), log_text(Path::new(&log)).into_bytes()));

    let total: usize = outputs.iter().map(|(_, b)| b.len()).sum();
    for (what, bytes) in &outputs {
        assert_clean(what, bytes);
    }
    eprintln!("{} outputs, {total} bytes: no password in any", outputs.len());
}
