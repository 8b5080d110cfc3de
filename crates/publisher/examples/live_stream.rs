//! The live benchmark's reference points (`bench/live_bench.sh`): stream one binlog file of a
//! server from a position to the file's end (a non-blocking dump, stopped at the file's own
//! ROTATE event, so every contender of the benchmark covers the same events) and either
//!
//! - `drain`: count the raw events and bytes without decoding them (the ceiling: what the
//!   server and the protocol layer deliver), or
//! - `decode`: decode every event and every value of every row with `EventDecoder`, without
//!   rendering anything (what `sluice dump` costs before JSON).
//!
//! Both read the stream as Sluice's source does: ahead, on a task of its own (`ReadAhead`),
//! on the same two-worker runtime.
//!
//! `cargo run --release -p sluice --example live_stream -- MODE HOST PORT USER FILE [POSITION]`
//! (password from `SLUICE_PASSWORD`, default empty). Prints one JSON line with the counts
//! and the elapsed seconds.

use std::time::Instant;

use sluice_binlog::decoder::EventDecoder;
use sluice_binlog::event::{ChecksumAlg, Event};
use sluice_binlog::rows::RowChange;
use sluice_protocol::{ConnectOptions, Connection, DumpRequest, StartPosition, TlsMode};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // the runtime `sluice dump` and `sluice run` stream on
    sluice::process::runtime()?.block_on(stream())
}

async fn stream() -> Result<(), Box<dyn std::error::Error>> {
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
    let mut stream = conn.start_binlog_dump(req).await?.read_ahead(8 << 20);
    let mut decoder = EventDecoder::default();
    decoder.set_checksum(ChecksumAlg::Crc32);
    let (mut events, mut bytes, mut rows, mut values) = (0u64, 0u64, 0u64, 0u64);
    while let Some(raw) = stream.next_event().await? {
        events += 1;
        bytes += raw.len() as u64;
        // The ROTATE that the server wrote at the end of FILE (the artificial ones it sends
        // when a dump starts or moves on carry LOG_EVENT_ARTIFICIAL_F, 0x20) ends the range.
        let flags = raw.get(17..19).map_or(0, |f| u16::from_le_bytes([f[0], f[1]]));
        let end_of_file = raw.get(4) == Some(&4) && flags & 0x20 == 0;
        if !decode {
            if end_of_file {
                break;
            }
            continue;
        }
        let ev = decoder.decode(&raw)?;
        if let Event::Rows(r) = &ev.event {
            // one RowChange per event, refilled per row, as `sluice dump` walks them
            let mut row = RowChange { before: None, after: None };
            let mut iter = r.rows();
            while let Some(res) = iter.next_into(&mut row) {
                res?;
                rows += 1;
                for img in [&row.before, &row.after].into_iter().flatten() {
                    values += img.values.iter().filter(|v| v.is_some()).count() as u64;
                }
            }
        }
        if end_of_file {
            break;
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
