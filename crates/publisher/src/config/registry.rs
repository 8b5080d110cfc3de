//! `[registry]`: the Confluent-compatible Schema Registry.

#[allow(clippy::wildcard_imports)]
use super::*;

/// `[registry]`
#[derive(Debug, Clone, Deserialize)]
pub struct RegistrySection {
    /// Base URL, e.g. `http://schema-registry:8081`.
    pub url: String,
    /// Basic-auth user, when the registry wants one.
    #[serde(default)]
    pub username: Option<String>,
    /// File holding the basic-auth password.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Environment variable holding the basic-auth password.
    #[serde(default)]
    pub password_env: Option<String>,
    /// For an `https://` URL: a PEM file of the CA certificates that signed the registry's
    /// certificate, besides the public roots (Mozilla's). The certificate and its host name are
    /// always verified.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

impl RegistrySection {
    /// The basic-auth password from its file or environment variable, if configured.
    ///
    /// # Errors
    /// An unreadable password file.
    pub fn password(&self) -> Result<Option<Secret>, ConfigError> {
        optional_secret(&self.password_file, &self.password_env)
    }

    pub(super) fn validate(&self, p: &mut Problems) {
        validate_secret(p, "registry.password", &self.password_file, &self.password_env);
        validate_http_endpoint(p, "registry", &self.url, self.ca_file.as_deref());
    }
}
