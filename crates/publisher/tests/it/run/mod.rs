//! `sluice run` against real servers: exactly once under faults and kills, starts, positions, snapshots, failover, metrics, security.

mod chaos;
mod committed_counts;
mod e2e;
mod failover;
mod faults;
mod first_start;
mod gtid_checkpoints;
mod kafka_security;
mod large_records;
mod least_privilege;
mod metrics;
mod position;
mod replay;
mod schema_history;
mod secrets;
mod snapshot;
mod transactions;
