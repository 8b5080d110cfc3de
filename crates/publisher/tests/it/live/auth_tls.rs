//! Live scenario: authentication (mysql_native_password, ed25519, a wrong password) and TLS
//! (`--tls verify-ca` with a CA from `integration/lib/tls.sh`; a wrong CA refused),
//! each run asserting the streamed values against `SELECT` on the server. One server (with
//! TLS) for the whole file; the scenarios run in order.

use crate::support;

use std::path::Path;

use support::{of_table, sluice, Run, Server};

/// Dumps everything as `user` with the password from a file, plus extra arguments.
fn dump_as(db: &Server, user: &str, password_file: &Path, extra: &[&str]) -> Run {
    let url = db.url(user);
    let pf = password_file.display().to_string();
    let mut a = vec!["dump", "--source", &url, "--password-file", &pf, "--from", "earliest"];
    a.extend_from_slice(extra);
    sluice(&a)
}

/// The (id, v) pairs the dump inserted into t.a, and what SELECT says.
fn check_values(run: &Run, db: &Server) {
    let rows = run.rows();
    let got: Vec<(i64, String)> = of_table(&rows, "a")
        .iter()
        .map(|r| {
            assert_eq!(r["type"], "INSERT");
            assert_eq!(r["database"], "t");
            (r["after"]["id"].as_i64().unwrap(), r["after"]["v"].as_str().unwrap().to_string())
        })
        .collect();
    let want: Vec<(i64, String)> = db
        .sql("SELECT id, v FROM t.a ORDER BY id")
        .into_iter()
        .map(|r| (r[0].parse().unwrap(), r[1].clone()))
        .collect();
    assert_eq!(got, want);
    assert_eq!(want.len(), 3);
}

#[test]
fn authentication_and_tls() {
    let dir = support::scratch("auth-tls");
    // certificates first: the server loads them at start
    let out = support::lib_sh("tls", &["certs", dir.to_str().unwrap()]);
    assert!(out.status.success(), "tls.sh: {}", String::from_utf8_lossy(&out.stderr));
    let p = |f: &str| dir.join(f).display().to_string();
    let (ca_arg, cert_arg, key_arg) = (
        format!("--ssl-ca={}", p("ca.pem")),
        format!("--ssl-cert={}", p("server.pem")),
        format!("--ssl-key={}", p("server.key")),
    );
    let Some(db) = Server::start("live-auth-tls", &[&ca_arg, &cert_arg, &key_arg]) else { return };
    assert_eq!(db.scalar("SELECT @@have_ssl"), "YES", "the server did not load the test certificate");

    let native_pw = "Native-pw-8172-secret";
    let ed_pw = "Ed25519-pw-4409-secret";
    let tls_pw = "Tls-only-pw-3391-secret";
    db.create_repl_user("repl_native", &format!("IDENTIFIED VIA mysql_native_password USING PASSWORD('{native_pw}')"));
    db.create_repl_user("repl_ed", &format!("IDENTIFIED VIA ed25519 USING PASSWORD('{ed_pw}')"));
    db.create_repl_user("repl_tls", &format!("IDENTIFIED BY '{tls_pw}' REQUIRE SSL"));
    assert_eq!(db.scalar("SELECT plugin FROM mysql.user WHERE user = 'repl_ed'"), "ed25519");
    db.sql("CREATE DATABASE t; CREATE TABLE t.a (id INT PRIMARY KEY, v VARCHAR(20) NOT NULL)");
    db.sql("INSERT INTO t.a VALUES (1, 'one'), (2, 'zwei'), (3, 'trois')");

    let write_pw = |name: &str, pw: &str| {
        let f = dir.join(name);
        std::fs::write(&f, format!("{pw}\n")).unwrap();
        f
    };
    let native_file = write_pw("native.pw", native_pw);
    let ed_file = write_pw("ed.pw", ed_pw);
    let tls_file = write_pw("tls.pw", tls_pw);

    // mysql_native_password
    let run = dump_as(&db, "repl_native", &native_file, &["--tls", "disabled"]).ok();
    check_values(&run, &db);
    assert!(!run.stderr.contains(native_pw) && !run.stdout.contains(native_pw));

    // ed25519 (the server switches the client to client_ed25519)
    let run = dump_as(&db, "repl_ed", &ed_file, &["--tls", "disabled"]).ok();
    check_values(&run, &db);
    assert!(!run.stderr.contains(ed_pw) && !run.stdout.contains(ed_pw));

    // a wrong password: non-zero exit, a clear message, and the password printed nowhere
    let wrong = "Wrong-pw-5577-secret";
    let wrong_file = write_pw("wrong.pw", wrong);
    for user in ["repl_native", "repl_ed"] {
        let run = dump_as(&db, user, &wrong_file, &["--tls", "disabled"]);
        assert_ne!(run.code, Some(0), "{user}: a wrong password must fail:\n{}", run.stderr);
        assert!(run.stdout.is_empty(), "{}", run.stdout);
        assert!(run.stderr.contains("Access denied") && run.stderr.contains(user), "{user}: {}", run.stderr);
        assert!(!run.stderr.contains(wrong), "the password leaked: {}", run.stderr);
    }
    // ... also when it comes from the environment
    let url = db.url("repl_native");
    let out = support::sluice_cmd()
        .args(["dump", "--source", &url, "--tls", "disabled"])
        .env("SLUICE_PASSWORD", wrong)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("Access denied") && !stderr.contains(wrong), "{stderr}");
    // A password in the URL is refused before connecting (it would show in `ps` and be printed
    // with the URL); the message masks it. Before, it was used and echoed in the summary line.
    let url_pw = format!("mysql://repl_native:{wrong}@127.0.0.1:{}", db.port);
    let run = sluice(&["dump", "--source", &url_pw, "--tls", "disabled"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("must not contain a password") && run.stderr.contains("--password-file"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains(wrong) && run.stdout.is_empty(), "{}", run.stderr);
    // and the summary of a good dump names the server without a password
    let run = dump_as(&db, "repl_native", &native_file, &["--tls", "disabled"]).ok();
    assert!(run.stderr.contains(&format!("sluice dump: repl_native@127.0.0.1:{}: ", db.port)), "{}", run.stderr);
    // a URL without a user is refused too (it silently meant root before)
    let run = sluice(&["dump", "--source", &format!("mysql://127.0.0.1:{}", db.port), "--tls", "disabled"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("names no user"), "{}", run.stderr);

    // TLS verified against the generated CA; repl_tls is REQUIRE SSL, so success proves TLS
    let ca = p("ca.pem");
    let run = dump_as(&db, "repl_tls", &tls_file, &["--tls", "verify-ca", "--ca", &ca]).ok();
    check_values(&run, &db);
    let run = dump_as(&db, "repl_tls", &tls_file, &["--tls", "verify-identity", "--ca", &ca]).ok();
    check_values(&run, &db);
    // without TLS the REQUIRE SSL user is refused
    let run = dump_as(&db, "repl_tls", &tls_file, &["--tls", "disabled"]);
    assert_ne!(run.code, Some(0));
    assert!(!run.stderr.contains(tls_pw));

    // a CA that did not sign the server's certificate: refused before any password is sent
    let other = p("other-ca.pem");
    let run = dump_as(&db, "repl_tls", &tls_file, &["--tls", "verify-ca", "--ca", &other]);
    assert_ne!(run.code, Some(0), "a wrong CA must be refused:\n{}", run.stderr);
    assert!(run.stdout.is_empty());
    let low = run.stderr.to_lowercase();
    assert!(low.contains("tls") && low.contains("certificate"), "unclear message: {}", run.stderr);
    assert!(!run.stderr.contains(tls_pw));
}
