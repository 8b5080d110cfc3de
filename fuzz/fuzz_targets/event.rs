//! Arbitrary bytes as a stream of events into one `EventDecoder` (after a real MySQL 8 FDE,
//! so checksums and post-header lengths are in force), decoding every row and value.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_binlog::decoder::{DecoderOptions, EventDecoder};
use sluice_binlog::event::Event;

/// The FORMAT_DESCRIPTION of the MySQL 8.0.32 fixture transaction_compression.000001.
const FDE: &[u8] = include_bytes!("../seeds/fde-8.0.32.bin");

fuzz_target!(|data: &[u8]| {
    let mut dec = EventDecoder::new(DecoderOptions { verify_checksum: data.first() == Some(&1), max_decompressed_size: 1 << 20 });
    let _ = dec.decode(FDE);
    let mut rest = data.get(1..).unwrap_or(&[]);
    while rest.len() >= 19 {
        let size = u32::from_le_bytes([rest[9], rest[10], rest[11], rest[12]]) as usize;
        let size = size.clamp(19, rest.len());
        let (raw, tail) = rest.split_at(size);
        // the header's size must match what is handed over
        let mut ev = raw.to_vec();
        ev[9..13].copy_from_slice(&(size as u32).to_le_bytes());
        if let Ok(d) = dec.decode(&ev) {
            if let Event::Rows(r) = &d.event {
                for row in r.rows() {
                    if row.is_err() {
                        break;
                    }
                }
            }
        }
        rest = tail;
    }
});
