//! The read side's floor for `bench/snapshot_bench.sh`: the statements a snapshot sends for one
//! table (`SELECT * ... WHERE id > last ORDER BY id LIMIT n`, prepared and executed over the
//! binary protocol, chunk after chunk), with every row packet received and dropped undecoded.
//! Only the last row of a chunk is parsed, for its key. Prints one JSON line.
//!
//! ```text
//! cargo run --release -p sluice-protocol --example drain_select -- PORT DB TABLE KEY_COLUMN CHUNK_ROWS
//! ```
//! (user root, no password, no TLS: the benchmark's throwaway server.)

use std::time::Instant;

use sluice_protocol::stmt::{parse_binary_row, BinaryValue};
use sluice_protocol::{ConnectOptions, Connection, TlsMode};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [port, db, table, key, chunk] = &args[..] else {
        eprintln!("usage: drain_select PORT DB TABLE KEY_COLUMN CHUNK_ROWS");
        std::process::exit(2);
    };
    let (port, chunk): (u16, u64) = match (port.parse(), chunk.parse()) {
        (Ok(p), Ok(c)) if c > 0 => (p, c),
        _ => {
            eprintln!("drain_select: PORT and CHUNK_ROWS must be numbers (CHUNK_ROWS > 0)");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    if let Err(e) = rt.block_on(drain(port, db, table, key, chunk)) {
        eprintln!("drain_select: {e}");
        std::process::exit(1);
    }
}

async fn drain(port: u16, db: &str, table: &str, key: &str, chunk: u64) -> Result<(), sluice_protocol::Error> {
    let mut opts = ConnectOptions::new("127.0.0.1", port, "root", "");
    opts.tls = TlsMode::Disabled;
    let mut conn = Connection::connect(opts).await?;
    conn.query_drop("SET SESSION character_set_results = NULL, SESSION time_zone = '+00:00'").await?;
    let started = Instant::now();
    let (mut rows, mut bytes, mut chunks) = (0u64, 0u64, 0u64);
    let mut last: Option<i64> = None;
    loop {
        let sql = match last {
            Some(k) => format!("SELECT * FROM `{db}`.`{table}` WHERE `{key}` > {k} ORDER BY `{key}` LIMIT {chunk}"),
            None => format!("SELECT * FROM `{db}`.`{table}` ORDER BY `{key}` LIMIT {chunk}"),
        };
        let st = conn.prepare(&sql).await?;
        let mut result = conn.execute(&st).await?;
        let columns = result.columns().to_vec();
        let key_index = columns.iter().position(|c| c.name == key).unwrap_or(0);
        let (mut n, mut tail) = (0u64, None);
        while let Some(packet) = result.next_row().await? {
            n += 1;
            bytes += packet.len() as u64;
            tail = Some(packet);
        }
        drop(result);
        conn.close_statement(&st).await?;
        rows += n;
        chunks += 1;
        let Some(packet) = tail else { break };
        let mut values = Vec::new();
        parse_binary_row(&packet, &columns, &mut values)?;
        last = match values.get(key_index) {
            Some(BinaryValue::Int(k)) => Some(*k),
            Some(BinaryValue::UInt(k)) => i64::try_from(*k).ok(),
            _ => None,
        };
        if n < chunk || last.is_none() {
            break;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{{\"rows\": {rows}, \"bytes\": {bytes}, \"chunks\": {chunks}, \"secs\": {secs:.3}, \"rows_per_s\": {:.0}}}",
        rows as f64 / secs
    );
    Ok(())
}
