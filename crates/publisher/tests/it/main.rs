//! The publisher's integration tests, in one binary: each file a module (a scenario against real
//! servers, or the checks of the binary's outputs and the code's architecture), the shared pieces
//! in [`support`]. One binary links the library and librdkafka once, not once per scenario.
//! `cargo test --test it run_chaos` runs one module's tests.

mod support;

mod architecture;
mod dump_output;
mod live_auth_tls;
mod live_garbage_stream;
mod live_large;
mod live_positions;
mod live_preflight;
mod live_restart;
mod live_schema;
mod live_starts;
mod roundtrip_mariadb;
mod run_chaos;
mod run_committed_counts;
mod run_e2e;
mod run_failover;
mod run_faults;
mod run_first_start;
mod run_gtid_checkpoints;
mod run_kafka_security;
mod run_large_records;
mod run_least_privilege;
mod run_metrics;
mod run_position;
mod run_replay;
mod run_schema_history;
mod run_secrets;
mod run_snapshot;
mod run_transactions;
mod seams;
mod sink_elasticsearch;
