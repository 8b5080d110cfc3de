//! The client side of the wire: packet framing, the server greeting, replication packets,
//! result-set rows and GTID sets.
#![no_main]
use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use sluice_protocol::gtid::GtidSet;
use sluice_protocol::handshake::InitialHandshake;
use sluice_protocol::packet::PacketCodec;
use sluice_protocol::replication::DumpPacket;
use sluice_protocol::Reader;

fuzz_target!(|data: &[u8]| {
    let mut codec = PacketCodec::new(1 << 20);
    let mut buf = BytesMut::from(data);
    while let Ok(Some(p)) = codec.decode(&mut buf) {
        let _ = InitialHandshake::parse(&p);
        let _ = DumpPacket::parse(p.clone(), u64::MAX);
        let _ = sluice_protocol::query::parse_text_row(&p, 8);
    }
    let _ = GtidSet::decode(&mut Reader::new(data));
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = s.parse::<GtidSet>();
    }
    let _ = DumpPacket::parse(Bytes::copy_from_slice(data), 0);
});
