//! The read side's floor for `bench/snapshot_bench.sh`: the statements a snapshot sends for one
//! table (`SELECT * ... WHERE id > last ORDER BY id LIMIT n`, prepared and executed over the
//! binary protocol, chunk after chunk), with every row packet received and dropped undecoded.
//! Only the last row of a chunk is parsed, for its key. Prints one JSON line.
//!
//! With READERS above 1 the key range (an integer key) is cut into that many equal parts, each
//! drained on a connection of its own at the same time, as Flink CDC's and Debezium's parallel
//! snapshot readers split a table: what reading one table's chunks in parallel could gain.
//!
//! ```text
//! cargo run --release -p sluice-protocol --example drain_select -- PORT DB TABLE KEY_COLUMN CHUNK_ROWS [READERS]
//! ```
//! (user root, no password, no TLS: the benchmark's throwaway server.)

use std::time::Instant;

use sluice_protocol::stmt::{parse_binary_row, BinaryValue};
use sluice_protocol::{ConnectOptions, Connection, TlsMode};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (port, db, table, key, chunk, readers) = match &args[..] {
        [port, db, table, key, chunk] => (port, db, table, key, chunk, "1"),
        [port, db, table, key, chunk, readers] => (port, db, table, key, chunk, readers.as_str()),
        _ => {
            eprintln!("usage: drain_select PORT DB TABLE KEY_COLUMN CHUNK_ROWS [READERS]");
            std::process::exit(2);
        }
    };
    let (port, chunk, readers): (u16, u64, u64) = match (port.parse(), chunk.parse(), readers.parse()) {
        (Ok(p), Ok(c), Ok(r)) if c > 0 && r > 0 => (p, c, r),
        _ => {
            eprintln!("drain_select: PORT, CHUNK_ROWS and READERS must be numbers (CHUNK_ROWS, READERS > 0)");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    if let Err(e) = rt.block_on(drain_all(port, db, table, key, chunk, readers)) {
        eprintln!("drain_select: {e}");
        std::process::exit(1);
    }
}

async fn connect(port: u16) -> Result<Connection, sluice_protocol::Error> {
    let mut opts = ConnectOptions::new("127.0.0.1", port, "root", "");
    opts.tls = TlsMode::Disabled;
    let mut conn = Connection::connect(opts).await?;
    conn.query_drop("SET SESSION character_set_results = NULL, SESSION time_zone = '+00:00'").await?;
    Ok(conn)
}

/// Drains the table with `readers` connections at once (key ranges of equal width).
async fn drain_all(
    port: u16,
    db: &str,
    table: &str,
    key: &str,
    chunk: u64,
    readers: u64,
) -> Result<(), sluice_protocol::Error> {
    let mut conns = Vec::new();
    for _ in 0..readers {
        conns.push(connect(port).await?);
    }
    // the parts: (after, up to) keys; one reader reads the whole table with no bounds
    let mut parts = vec![(None, None)];
    if readers > 1 {
        let rs = conns[0].query(&format!("SELECT MIN(`{key}`), MAX(`{key}`) FROM `{db}`.`{table}`")).await?;
        let (Some(lo), Some(hi)) = (
            rs.get_str(0, 0).and_then(|v| v.parse::<i64>().ok()),
            rs.get_str(0, 1).and_then(|v| v.parse::<i64>().ok()),
        ) else {
            return Err(sluice_protocol::Error::Invalid { what: "key range", reason: "not an integer key".into() });
        };
        let width = (hi - lo) / readers as i64 + 1;
        parts = (0..readers as i64).map(|n| (Some(lo - 1 + n * width), Some(lo - 1 + (n + 1) * width))).collect();
    }
    let started = Instant::now();
    let mut drains = tokio::task::JoinSet::new();
    for (mut conn, (after, upto)) in conns.into_iter().zip(parts) {
        let (db, table, key) = (db.to_string(), table.to_string(), key.to_string());
        drains.spawn(async move { drain(&mut conn, &db, &table, &key, chunk, after, upto).await });
    }
    let (mut rows, mut bytes, mut chunks) = (0u64, 0u64, 0u64);
    while let Some(r) = drains.join_next().await {
        let (r, b, c) =
            r.map_err(|e| sluice_protocol::Error::Invalid { what: "a reader", reason: e.to_string() })??;
        (rows, bytes, chunks) = (rows + r, bytes + b, chunks + c);
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{{\"rows\": {rows}, \"bytes\": {bytes}, \"chunks\": {chunks}, \"readers\": {readers}, \"secs\": {secs:.3}, \"rows_per_s\": {:.0}}}",
        rows as f64 / secs
    );
    Ok(())
}

/// Drains the rows with keys above `after` up to `upto` (either open) chunk by chunk; returns
/// rows, bytes and chunks.
async fn drain(
    conn: &mut Connection,
    db: &str,
    table: &str,
    key: &str,
    chunk: u64,
    mut last: Option<i64>,
    upto: Option<i64>,
) -> Result<(u64, u64, u64), sluice_protocol::Error> {
    let (mut rows, mut bytes, mut chunks) = (0u64, 0u64, 0u64);
    let bound = upto.map(|u| format!(" AND `{key}` <= {u}")).unwrap_or_default();
    loop {
        let sql = match last {
            Some(k) => {
                format!("SELECT * FROM `{db}`.`{table}` WHERE `{key}` > {k}{bound} ORDER BY `{key}` LIMIT {chunk}")
            }
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
    Ok((rows, bytes, chunks))
}
