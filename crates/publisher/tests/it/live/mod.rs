//! The replication stream and the decoder against a live MariaDB: starts, positions, restarts, large and damaged events, schema tracking, TLS.

mod auth_tls;
mod garbage_stream;
mod large;
mod positions;
mod preflight;
mod restart;
mod schema;
mod starts;
