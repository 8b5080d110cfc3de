//! `sluice sink elasticsearch` end to end, on both Elasticsearch-API engines.

mod elasticsearch;
