//! HTTP clients: the one place where Sluice's HTTP clients (the Schema Registry's, and any
//! other REST endpoint it talks to) get their TLS settings.
//!
//! rustls over ring, as on the MySQL connection (reqwest's default provider, aws-lc-rs, needs
//! cmake and minutes more to build). The server's certificate is always verified, host name
//! included: against Mozilla's roots (webpki-roots) and, when configured, the certificates of
//! a CA file (a private CA, as most registries inside a company use). Plain `http://` URLs
//! ignore all of it.

use std::path::Path;
#[cfg(test)]
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

/// The TLS settings of an HTTPS client: Mozilla's roots plus the certificates in `ca_file`.
///
/// # Errors
/// A message naming `key` (the configuration key of the CA file) when the file cannot be read
/// or holds no certificate.
pub fn tls_config(ca_file: Option<&Path>, key: &str) -> Result<rustls::ClientConfig, String> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|e| format!("{key} {}: {e}", path.display()))?;
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("{key} {}: {e}", path.display()))?;
            roots.add(cert).map_err(|e| format!("{key} {}: {e}", path.display()))?;
            added += 1;
        }
        if added == 0 {
            return Err(format!("{key} {}: no PEM certificate in the file", path.display()));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS settings: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// An HTTP client whose requests time out after `timeout`, with [`tls_config`] for `https://`.
///
/// # Errors
/// As [`tls_config`], or reqwest's own when the client cannot be built.
pub fn client(ca_file: Option<&Path>, key: &str, timeout: Duration) -> Result<reqwest::Client, String> {
    let tls = tls_config(ca_file, key)?;
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .build()
        .map_err(|e| format!("creating the HTTP client: {e}"))
}

/// reqwest's error with its causes ("error sending request ...: connection refused"), the
/// timeout named: its own text says only that sending failed.
pub fn cause_chain(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        return format!("no answer within {:.1} s (timed out)", timeout.as_secs_f64());
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    // rustls reading a plain-HTTP answer as a TLS record
    if text.contains("InvalidContentType") || text.contains("corrupt message") {
        text.push_str(
            " (the server does not speak TLS on this port: if it serves plain HTTP, the URL starts with http://)",
        );
    }
    text
}

/// True when the request failed because the server's certificate was refused (unknown issuer,
/// wrong host name, expired): retrying cannot help.
pub fn certificate_refused(e: &reqwest::Error) -> bool {
    // hyper wraps rustls' error in io::Errors, whose `source()` skips the wrapped error itself
    fn refused(e: &(dyn std::error::Error + 'static)) -> bool {
        if let Some(rustls::Error::InvalidCertificate(_)) = e.downcast_ref::<rustls::Error>() {
            return true;
        }
        if let Some(inner) = e.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            if refused(inner) {
                return true;
            }
        }
        e.source().is_some_and(refused)
    }
    std::error::Error::source(e).is_some_and(refused)
}

/// Certificates for the `https://` tests: a private CA and a certificate it signed for
/// `localhost`, as (CA PEM, certificate PEM, key PEM).
#[cfg(test)]
pub(crate) fn test_certificates() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap().signed_by(&key, &issuer).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// The test registry served over TLS with [`test_certificates`], and a file holding their CA.
#[cfg(test)]
pub(crate) async fn test_https_server() -> (sluice_test_registry::Server, tempfile::TempDir, PathBuf) {
    let (ca, cert, key) = test_certificates();
    let server = sluice_test_registry::Server::spawn_tls(
        "127.0.0.1:0".parse().unwrap(),
        sluice_test_registry::Registry::in_memory(),
        cert.as_bytes(),
        key.as_bytes(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca).unwrap();
    (server, dir, ca_file)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `https://` to a server that answers in plain HTTP: the error says so (it was rustls'
    /// "received corrupt message of type InvalidContentType" alone).
    #[tokio::test]
    async fn https_to_a_plain_http_server_says_so() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
        });
        let http = client(None, "registry.ca_file", Duration::from_secs(5)).unwrap();
        let e = http.get(format!("https://127.0.0.1:{port}/subjects")).send().await.unwrap_err();
        let text = cause_chain(&e, Duration::from_secs(5));
        assert!(text.contains("the URL starts with http://"), "{text}");
    }

    #[test]
    fn a_ca_file_without_certificates_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("ca.pem");
        std::fs::write(&f, "not a certificate\n").unwrap();
        let e = tls_config(Some(&f), "registry.ca_file").unwrap_err();
        assert!(e.starts_with("registry.ca_file ") && e.contains("no PEM certificate"), "{e}");
        let e = tls_config(Some(&dir.path().join("missing.pem")), "registry.ca_file").unwrap_err();
        assert!(e.contains("missing.pem") && e.contains("No such file"), "{e}");
    }

    #[test]
    fn plain_http_needs_no_file() {
        assert!(client(None, "registry.ca_file", Duration::from_secs(1)).is_ok());
    }
}
