//! `sluice sink elasticsearch`: keeps one Elasticsearch (or OpenSearch) index per table equal to
//! the table, from the table's topic, in one place per step:
//!
//! - [`mapping`]: what each column is there (the index mapping, derived from the table's
//!   registered value schema, so that no type is guessed);
//! - [`document`]: where a record becomes a document (`_id` from the key, the row's columns by
//!   name) or a delete;
//! - [`feed`]: the loop, Kafka in and bulk requests out, offsets committed only after
//!   Elasticsearch applied the batch, each action versioned by its record's offset;
//! - [`client`]: the HTTP side (`_bulk`, `_mapping`), errors sorted by what happens next.
//!
//! The command itself (restart loop, metrics endpoint) is `cmd/sink.rs`.

pub mod client;
pub mod document;
pub mod feed;
pub mod mapping;
