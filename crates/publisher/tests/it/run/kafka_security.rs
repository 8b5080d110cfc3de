//! `sluice run` against Kafka over TLS and SASL: SASL_SSL with SCRAM-SHA-512, SASL_PLAINTEXT
//! with PLAIN, and SSL alone, each publishing a table's rows and committing checkpoints in
//! transactions; a wrong password and an untrusted broker certificate stop it (exit 1) within
//! seconds, with a message that says which settings to check, instead of retrying forever.
//!
//! No broker with TLS or SASL can be installed here (noida-db speaks plaintext and accepts any
//! PLAIN password). So the broker side of TLS and SASL is `integration/lib/kafka_secure_proxy.py`
//! in front of the real broker: a real TLS listener (Python's ssl module) and a real SASL server
//! (PLAIN, SCRAM per RFC 5802/7677) that answers SaslHandshake/SaslAuthenticate itself, forwards
//! every other request and points the broker addresses in Metadata and FindCoordinator answers
//! back at itself, so every connection librdkafka makes goes through it. Its own self-test
//! (`kafka_secure_proxy_selftest.py`) checks it against confluent-kafka's librdkafka. Sluice's
//! librdkafka is built with OpenSSL (the `ssl` feature), which SSL, SASL_SSL and SCRAM need.

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::kafka::{log_text, start_sluice_with, wait_for, Services, TopicReader};

const PASSWORD: &str = "Kafka-Secret-7f3a";

/// The proxy as a child process, killed on drop.
struct Proxy {
    child: Child,
    port: u16,
}

impl Proxy {
    fn start(upstream: &str, tls: Option<(&Path, &Path)>, users: Option<&Path>) -> Proxy {
        let script = support::repo().join("integration/lib/kafka_secure_proxy.py");
        let mut cmd = Command::new("python3");
        cmd.arg(script).args(["--listen-port", "0", "--upstream", upstream]);
        if let Some((cert, key)) = tls {
            cmd.arg("--tls-cert").arg(cert).arg("--tls-key").arg(key);
        }
        if let Some(u) = users {
            cmd.arg("--sasl-users").arg(u);
        }
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().strip_prefix("PORT=").and_then(|p| p.parse().ok()).unwrap_or_else(|| {
            let _ = child.kill();
            panic!("the proxy did not start: {line:?}")
        });
        Proxy { child, port }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A CA and a certificate it signed for `localhost` and `127.0.0.1`: (ca.pem, cert.pem, key.pem).
fn certificates(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, format!("{name} test CA"));
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let paths = (dir.join(format!("{name}-ca.pem")), dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

/// Waits for the child to exit (at most `secs`); its exit code and how long it took.
fn exit_within(child: &mut Child, secs: u64, log: &Path) -> (Option<i32>, Duration) {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(secs) {
        if let Some(st) = child.try_wait().unwrap() {
            return (st.code(), started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    panic!("sluice run did not stop within {secs} s:\n{}", log_text(log));
}

#[test]
fn tls_and_sasl_to_kafka() {
    let Some(services) = Services::start("kafka-sec", &[]) else { return };
    let dir = support::scratch("kafka-sec");
    let (ca, cert, key) = certificates(&dir, "broker");
    let (other_ca, _, _) = certificates(&dir, "other");
    let users = dir.join("users");
    std::fs::write(&users, format!("SCRAM-SHA-512 sluice {PASSWORD}\nPLAIN sluice {PASSWORD}\n")).unwrap();
    let password_file = dir.join("kafka-password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
    let wrong_password_file = dir.join("wrong-password");
    std::fs::write(&wrong_password_file, "not-the-password\n").unwrap();

    let sasl_ssl = Proxy::start(&services.broker, Some((&cert, &key)), Some(&users));
    let sasl_plain = Proxy::start(&services.broker, None, Some(&users));
    let ssl = Proxy::start(&services.broker, Some((&cert, &key)), None);

    services.mariadb.sql_text(
        "CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(20));
         INSERT INTO shop.t VALUES (1, 'one'), (2, 'two'), (3, 'three');",
    );
    let mut reader = TopicReader::new(&services);
    let pw = password_file.display();
    let cases = [
        (
            "SASL_SSL, SCRAM-SHA-512",
            "ks1",
            &sasl_ssl,
            format!(
                "sasl_password_file = \"{pw}\"\n[kafka.properties]\n\"security.protocol\" = \"SASL_SSL\"\n\
                 \"sasl.mechanisms\" = \"SCRAM-SHA-512\"\n\"sasl.username\" = \"sluice\"\n\
                 \"ssl.ca.location\" = \"{}\"",
                ca.display()
            ),
        ),
        (
            "SASL_PLAINTEXT, PLAIN",
            "ks2",
            &sasl_plain,
            format!(
                "sasl_password_file = \"{pw}\"\n[kafka.properties]\n\"security.protocol\" = \"SASL_PLAINTEXT\"\n\
                 \"sasl.mechanisms\" = \"PLAIN\"\n\"sasl.username\" = \"sluice\""
            ),
        ),
        (
            "SSL",
            "ks3",
            &ssl,
            format!("[kafka.properties]\n\"security.protocol\" = \"SSL\"\n\"ssl.ca.location\" = \"{}\"", ca.display()),
        ),
    ];
    for (i, (what, prefix, proxy, props)) in cases.iter().enumerate() {
        let (config, log) = services.config(prefix, &format!("topic_prefix = \"{prefix}\"\n{props}"), "");
        let server_id = (52_000 + i).to_string();
        let brokers = proxy.addr();
        let env = [("SLUICE_KAFKA__BROKERS", brokers.as_str()), ("SLUICE_SOURCE__SERVER_ID", server_id.as_str())];
        let mut child = start_sluice_with(&config, &log, &env);
        let topic = format!("{prefix}.shop.t");
        wait_for(90, || reader.read(&topic).len() == 3, &format!("three rows over {what}"), &log);
        let checkpoint = services.checkpoint(prefix, prefix).unwrap_or_else(|| panic!("{what}: no checkpoint"));
        assert!(checkpoint["position"].as_u64().unwrap_or(0) > 4, "{what}: {checkpoint}");
        let mut ids: Vec<i64> = reader.read(&topic).iter().map(|r| r.int_key()).collect();
        ids.sort_unstable();
        assert_eq!(ids, [1, 2, 3], "{what}");
        child.kill().unwrap();
        child.wait().unwrap();
        let text = log_text(&log);
        assert!(!text.contains(PASSWORD), "{what}: the password is in the log");
        eprintln!("{what}: 3 rows and a checkpoint committed through the proxy on port {}", proxy.port);
    }

    // refused credentials and an untrusted certificate: a stop that names the settings
    let wrong_pw = format!(
        "sasl_password_file = \"{}\"\n[kafka.properties]\n\"security.protocol\" = \"SASL_SSL\"\n\
         \"sasl.mechanisms\" = \"SCRAM-SHA-512\"\n\"sasl.username\" = \"sluice\"\n\"ssl.ca.location\" = \"{}\"",
        wrong_password_file.display(),
        ca.display()
    );
    let wrong_ca = format!(
        "[kafka.properties]\n\"security.protocol\" = \"SSL\"\n\"ssl.ca.location\" = \"{}\"",
        other_ca.display()
    );
    for (what, prefix, proxy, props, expect) in [
        ("a wrong password", "kw1", &sasl_ssl, wrong_pw, "the Kafka brokers refused Sluice's credentials"),
        ("an untrusted certificate", "kw2", &ssl, wrong_ca, "the TLS handshake with the Kafka brokers failed"),
    ] {
        let (config, log) = services.config(prefix, &format!("topic_prefix = \"{prefix}\"\n{props}"), "");
        let brokers = proxy.addr();
        let mut child = start_sluice_with(&config, &log, &[("SLUICE_KAFKA__BROKERS", brokers.as_str())]);
        let (code, took) = exit_within(&mut child, 60, &log);
        let text = log_text(&log);
        assert_eq!(code, Some(1), "{what}: exit code\n{text}");
        assert!(text.contains(expect), "{what}: {expect:?} in\n{text}");
        assert!(!text.contains("Restarting from the last committed checkpoint"), "{what}: no restart loop\n{text}");
        assert!(!text.contains(PASSWORD) && !text.contains("not-the-password"), "{what}: a password in the log");
        eprintln!("{what}: exit 1 after {took:.1?}");
    }
}
