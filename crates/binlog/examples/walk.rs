//! Walks binlog files and prints each event's offset and type (a debugging aid:
//! `cargo run -p sluice-binlog --example walk -- FILE...`).
use sluice_binlog::decoder::EventDecoder;
use sluice_binlog::event::Event;
use sluice_binlog::file::BinlogReader;

fn main() {
    for path in std::env::args().skip(1) {
        let mut rd = match BinlogReader::open(path.as_ref(), EventDecoder::default()) {
            Ok(r) => r,
            Err(e) => {
                println!("{path}: ERROR {e}");
                continue;
            }
        };
        let mut counts = std::collections::BTreeMap::<String, usize>::new();
        let mut rows = 0usize;
        loop {
            match rd.next_event() {
                Ok(Some(ev)) => {
                    let name = ev.event.event.type_name().to_string();
                    if let Event::Rows(r) = &ev.event.event {
                        match r.count_rows() {
                            Ok(n) => rows += n,
                            Err(e) => {
                                println!("{path}: ROW ERROR at {}: {e}", ev.offset);
                            }
                        }
                    }
                    *counts.entry(if ev.in_payload { format!("  {name}") } else { name }).or_default() += 1;
                }
                Ok(None) => break,
                Err(e) => {
                    println!("{path}: ERROR {e}");
                    break;
                }
            }
        }
        println!("{path}: rows={rows} {counts:?}");
    }
}
