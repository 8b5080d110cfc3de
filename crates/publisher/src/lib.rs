//! Sluice: MySQL/MariaDB change data capture into Kafka, and an offline binlog decoder.
//!
//! The library behind the `sluice` binary. Dependencies point one way, from the commands down:
//!
//! ```text
//! cmd (run, check, position, snapshot, sink, dump)
//!  ├─ pipeline (tables, emit, batch, start)          changes in, Kafka transactions out
//!  │   ├─ source (preflight, server)                  the replication stream, server queries
//!  │   ├─ snapshot (plan, values)                     the rows already in the tables, in chunks
//!  │   ├─ schema (ddl, effects, store, load)          the tracked table definitions; TRUNCATE/DROP
//!  │   ├─ avro, registry                              records and their schemas
//!  │   ├─ kafka (sink, compacted, signals)            transactions, the compacted-topic reader,
//!  │   │                                              `sluice snapshot`'s requests
//!  │   └─ metrics
//!  └─ elastic (feed, document, mapping, client)      the Elasticsearch sink: Kafka in, bulk out
//!      └─ position, config, filter, http, render, disposition, process, console
//! ```
//!
//! Where things happen, each in one place:
//! - a byte becomes an event: `sluice_binlog::walk`; a value: `sluice_binlog::value`; a
//!   snapshot row's value: [`snapshot::values`];
//! - an event's transaction and the resume point: `sluice_binlog::transaction`;
//! - a value becomes Avro: [`avro`] (`avro/encode.rs`, its bytes in `avro/binary.rs`);
//! - a row change becomes Kafka records: [`pipeline::emit`];
//! - a MySQL transaction becomes a Kafka commit: [`pipeline`] with [`kafka::sink`];
//! - a row change becomes a JSON line: `cmd/dump/json.rs`.

// The public surface is what the binary and the examples use (`cmd`, `kafka`'s producer
// defaults, `process`'s runtime); the rest is crate-private, so an unused item is a warning.
pub(crate) mod archive;
pub(crate) mod avro;
#[doc(hidden)]
pub mod bench;
pub mod cmd;
pub(crate) mod config;
pub(crate) mod console;
pub(crate) mod disposition;
pub(crate) mod elastic;
pub(crate) mod filter;
pub(crate) mod http;
pub mod kafka;
pub(crate) mod metrics;
pub(crate) mod pipeline;
pub(crate) mod position;
pub mod process;
pub(crate) mod registry;
pub(crate) mod render;
pub(crate) mod schema;
pub(crate) mod snapshot;
pub(crate) mod source;
pub(crate) mod verify;

/// The writer of text-format log lines, and JSON message lines (the binary sets up logging).
pub use console::{messages_as_json, LogLines};
