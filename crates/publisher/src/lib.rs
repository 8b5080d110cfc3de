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

pub mod avro;
pub mod cmd;
pub mod config;
pub mod console;
pub mod disposition;
pub mod elastic;
pub mod filter;
pub mod http;
pub mod kafka;
pub mod metrics;
pub mod pipeline;
pub mod position;
pub mod process;
pub mod registry;
pub mod render;
pub mod schema;
pub mod snapshot;
pub mod source;
