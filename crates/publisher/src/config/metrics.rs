//! `[metrics]`: the Prometheus endpoint.

#[allow(clippy::wildcard_imports)]
use super::*;

/// `[metrics]`
#[derive(Debug, Clone, Default, Deserialize)]
pub struct MetricsSection {
    /// Serve `/metrics` (Prometheus text format), `/healthz` (200 while the process runs) and
    /// `/readyz` (200 while it streams, 503 while it connects or restarts) on this address,
    /// e.g. `0.0.0.0:9187`. Off when unset.
    #[serde(default, deserialize_with = "socket_address")]
    pub listen: Option<std::net::SocketAddr>,
}
