//! One column value: an arbitrary type byte, metadata word, flags and bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_binlog::column::{Column, ColumnType};
use sluice_binlog::value::decode_value;
use sluice_protocol::Reader;

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let mut col = Column::new(0, ColumnType::from_u8(data[0]), u16::from_le_bytes([data[1], data[2]]), true);
    col.unsigned = data[3] & 1 != 0;
    col.collation = match data[4] {
        0 => None,
        c => Some(u16::from(c)),
    };
    col.resolve_string_type();
    let bytes = &data[5..];
    let mut r = Reader::new(bytes);
    if let Ok(v) = decode_value(&mut r, &col) {
        assert!(r.position() <= bytes.len());
        let _ = format!("{v:?}");
    }
});
