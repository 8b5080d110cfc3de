//! Exactly once under faults (issue 4): a continuous write workload (inserts, updates, deletes,
//! multi-statement transactions and primary-key changes, picked by a seeded generator) runs
//! against MariaDB while `sluice run` is SIGKILLed at random moments at least 20 times and
//! restarted each time, then while the broker is restarted under it. At the end, read back by an
//! independent consumer (read_committed, apache-avro; see `support::kafka`), every key's records
//! must be exactly the changes the workload made to it, in order: nothing lost, nothing twice.
//!
//! The broker is stopped while no Kafka transaction is open (the workload pauses until Sluice has
//! published everything), stays down while the workload writes, and comes back. Stopping it in
//! the middle of a transaction is not tested: noida-db, the broker here, aborts open transactions
//! when it shuts down (`resolve_open_transactions_for_shutdown` in its kafka/engine.rs) but then
//! accepts the producer's commit of the rest of that transaction, so it would lose records that
//! a real Kafka, whose coordinator keeps transaction state across restarts, keeps.
//!
//! `SLUICE_CHAOS_SEED` replays a run (the seed is printed); `SLUICE_CHAOS_KILLS` changes the
//! number of kills (default 20).

use crate::support;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::kafka::{start_sluice, Services, TopicReader};
use support::workload::{caught_up, workload, Model, Rng};

const TOPIC: &str = "sluice.chaos.t";

#[test]
fn exactly_once_across_sigkills_and_a_broker_restart() {
    let Some(services) = Services::start("run-chaos", &[]) else { return };
    let (config, log) = services.config("chaos", "", "");

    let seed = std::env::var("SLUICE_CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    let kills: u32 = std::env::var("SLUICE_CHAOS_KILLS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    eprintln!("run_chaos: seed {seed} (SLUICE_CHAOS_SEED={seed} replays it), {kills} kills");
    let mut rng = Rng(seed ^ 0x9E37_79B9_7F4A_7C15);

    let stop = Arc::new(AtomicBool::new(false));
    let paused = Arc::new(AtomicBool::new(false));
    let model = Arc::new(Mutex::new(Model::new("chaos.t")));
    services.mariadb.sql(&model.lock().unwrap().create_sql());
    let writer = workload(services.mariadb.port, seed, Arc::clone(&stop), Arc::clone(&paused), Arc::clone(&model));

    let mut reader = TopicReader::new(&services);
    let mut child = start_sluice(&config, &log);
    let started = Instant::now();
    let mut committed_before_kill = Vec::new();
    for _ in 0..kills {
        // 0.3-2.3 s: sometimes while starting up, mostly mid-stream
        std::thread::sleep(Duration::from_millis(300 + rng.below(2000)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        committed_before_kill.push(reader.read(TOPIC).len());
        child = start_sluice(&config, &log);
    }
    eprintln!(
        "run_chaos: {kills} kills in {:.0?}; records committed at each: {committed_before_kill:?}",
        started.elapsed()
    );
    assert!(
        committed_before_kill.windows(2).filter(|w| w[1] > w[0]).count() >= kills as usize / 2,
        "the publisher made progress between too few of the kills: {committed_before_kill:?}"
    );

    // the broker stopped between transactions, down while the workload writes, back again
    let broker_restarts: u32 =
        std::env::var("SLUICE_CHAOS_BROKER_RESTARTS").ok().and_then(|s| s.parse().ok()).unwrap_or(2);
    for _ in 0..broker_restarts {
        paused.store(true, Ordering::SeqCst);
        caught_up(&mut reader, TOPIC, &model, seed, &log);
        services.stop_broker();
        paused.store(false, Ordering::SeqCst);
        std::thread::sleep(Duration::from_secs(3));
        services.start_broker_again();
        std::thread::sleep(Duration::from_secs(2));
    }
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    caught_up(&mut reader, TOPIC, &model, seed, &log);
    let model = model.lock().unwrap();
    eprintln!("run_chaos: the workload made {} row changes to {} keys", model.changes, model.expected.len());
    // the table's rows are what the topic's replay leaves
    let rows: BTreeMap<i64, String> = services
        .mariadb
        .sql("SELECT id, v FROM chaos.t")
        .into_iter()
        .map(|r| (r[0].parse().unwrap(), r[1].clone()))
        .collect();
    assert_eq!(rows, model.live, "the server's rows and the workload model disagree");

    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status after SIGTERM: {status}");
}
