//! The topic side's floor for `bench/verify_bench.sh`: every committed record of a topic read
//! with a plain `read_committed` rdkafka consumer (all partitions, from the start to the end
//! offsets noted first), nothing decoded.
//!
//! ```text
//! drain_topic BROKER TOPIC
//! ```
//! Prints one JSON line: `{"records": N, "secs": S}`.

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: drain_topic BROKER TOPIC");
        std::process::exit(2);
    }
    let (broker, topic) = (&args[1], &args[2]);
    let started = Instant::now();
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", broker)
        .set("group.id", "drain-topic")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("queued.max.messages.kbytes", "8192");
    for kv in std::env::var("DRAIN_CONF").unwrap_or_default().split(',').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').expect("DRAIN_CONF: k=v,...");
        config.set(k, v);
    }
    let consumer: BaseConsumer = config.create().expect("consumer");
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
    let mut tpl = TopicPartitionList::new();
    let mut ends = Vec::new();
    for p in md.topics().iter().flat_map(|t| t.partitions()) {
        let (_, high) = consumer.fetch_watermarks(topic, p.id(), Duration::from_secs(10)).expect("watermarks");
        tpl.add_partition_offset(topic, p.id(), Offset::Beginning).expect("assign");
        ends.push((p.id(), high));
    }
    consumer.assign(&tpl).expect("assign");
    let mut records = 0u64;
    let mut left: std::collections::HashMap<i32, i64> = ends.into_iter().filter(|(_, e)| *e > 0).collect();
    while !left.is_empty() {
        match consumer.poll(Duration::from_millis(100)) {
            Some(m) => {
                let m = m.expect("a record");
                records += 1;
                if left.get(&m.partition()).is_some_and(|end| m.offset() + 1 >= *end) {
                    left.remove(&m.partition());
                }
            }
            // past the last record only transaction markers: the position says so
            None => {
                let pos = consumer.position().expect("position");
                for e in pos.elements() {
                    if let (Offset::Offset(o), Some(end)) = (e.offset(), left.get(&e.partition())) {
                        if o >= *end {
                            left.remove(&e.partition());
                        }
                    }
                }
            }
        }
    }
    println!("{{\"records\": {records}, \"secs\": {:.3}}}", started.elapsed().as_secs_f64());
}
