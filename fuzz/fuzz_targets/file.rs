//! Arbitrary bytes as a whole binlog file (plain or gzip), read to the end.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_binlog::decoder::{DecoderOptions, EventDecoder};
use sluice_binlog::event::Event;
use sluice_binlog::file::BinlogReader;

fuzz_target!(|data: &[u8]| {
    let opts = DecoderOptions { verify_checksum: false, max_decompressed_size: 1 << 20 };
    let Ok(mut rd) = BinlogReader::from_reader("fuzz".into(), std::io::Cursor::new(data.to_vec()), EventDecoder::new(opts)) else {
        return;
    };
    for _ in 0..100_000 {
        match rd.next_event() {
            Ok(Some(ev)) => {
                if let Event::Rows(r) = &ev.event.event {
                    for row in r.rows() {
                        if row.is_err() {
                            break;
                        }
                    }
                }
            }
            _ => break,
        }
    }
});
