//! `sluice dump`: its outputs replayed into MariaDB, ranges and filters, and what it does with closed pipes and full disks.

mod output;
mod roundtrip_mariadb;
