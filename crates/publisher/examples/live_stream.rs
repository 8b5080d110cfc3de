//! The live benchmark's reference points (`bench/live_bench.sh`): stream a server's binlog
//! from a file and position to its current end (a non-blocking dump) and either
//!
//! - `drain`: count the raw events and bytes without decoding them (the ceiling: what the
//!   server and the protocol layer deliver), or
//! - `decode`: decode every event and every value of every row with `EventDecoder`, without
//!   rendering anything (what `sluice dump` costs before JSON).
//!
//! `cargo run --release -p sluice --example live_stream -- MODE HOST PORT USER FILE [POSITION]`
//! (password from `SLUICE_PASSWORD`, default empty). Prints one JSON line with the counts
//! and the elapsed seconds.

use std::time::Instant;

use sluice_binlog::decoder::EventDecoder;
use sluice_binlog::event::{ChecksumAlg, Event};
use sluice_protocol::{ConnectOptions, Connection, DumpRequest, StartPosition, TlsMode};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, host, port, user, file, rest @ ..] = args.as_slice() else {
        return Err("usage: live_stream drain|decode HOST PORT USER FILE [POSITION]".into());
    };
    let decode = match mode.as_str() {
        "drain" => false,
        "decode" => true,
        other => return Err(format!("unknown mode {other:?}").into()),
    };
    let position: u64 = rest.first().map_or(Ok(4), |p| p.parse())?;
    let mut opts = ConnectOptions::new(
        host.clone(),
        port.parse()?,
        user.clone(),
        std::env::var("SLUICE_PASSWORD").unwrap_or_default(),
    );
    opts.tls = TlsMode::Disabled;
    let conn = Connection::connect(opts).await?;
    let mut req = DumpRequest::new(51_999, StartPosition::FilePosition { file: file.clone(), position });
    req.non_blocking = true;
    let started = Instant::now();
    let mut stream = conn.start_binlog_dump(req).await?;
    let mut decoder = EventDecoder::default();
    decoder.set_checksum(ChecksumAlg::Crc32);
    let (mut events, mut bytes, mut rows, mut values) = (0u64, 0u64, 0u64, 0u64);
    while let Some(raw) = stream.next_event().await? {
        events += 1;
        bytes += raw.len() as u64;
        if !decode {
            continue;
        }
        let ev = decoder.decode(&raw)?;
        if let Event::Rows(r) = &ev.event {
            for row in r.rows() {
                let row = row?;
                rows += 1;
                for img in [&row.before, &row.after].into_iter().flatten() {
                    values += img.values.iter().filter(|v| v.is_some()).count() as u64;
                }
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{{\"mode\":\"{mode}\",\"events\":{events},\"bytes\":{bytes},\"rows\":{rows},\"values\":{values},\"secs\":{secs:.3},\
         \"events_per_s\":{:.0},\"mb_per_s\":{:.1},\"rows_per_s\":{:.0}}}",
        events as f64 / secs,
        bytes as f64 / secs / 1e6,
        rows as f64 / secs
    );
    Ok(())
}
