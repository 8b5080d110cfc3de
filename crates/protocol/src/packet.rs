//! Packet framing and the generic response packets (OK, ERR, EOF).
//!
//! Every MySQL packet is a 4-byte header and a payload:
//!
//! | bytes | field                                                    |
//! |-------|----------------------------------------------------------|
//! | 3     | payload length, little-endian (at most 0xffffff)         |
//! | 1     | sequence id: 0 for a command, +1 for each packet after it |
//! | n     | payload                                                  |
//!
//! A payload of 0xffffff bytes or more is split into 0xffffff-byte chunks, each with its own
//! header, ending with a chunk shorter than 0xffffff (empty when the length is an exact multiple).
//! [`PacketCodec`] does the splitting and reassembly as pure functions over byte buffers, checks
//! sequence ids, and caps the reassembled size so a peer cannot make us buffer without bound.
//!
//! References: <https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_basic_packets.html>,
//! <https://mariadb.com/kb/en/0-packet/>, <https://mariadb.com/kb/en/ok_packet/>,
//! <https://mariadb.com/kb/en/err_packet/>, <https://mariadb.com/kb/en/eof_packet/>.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::{Error, Result, ServerError};
use crate::handshake::capability;
use crate::reader::Reader;

/// The largest payload one wire packet carries; longer payloads continue in the next packet.
pub const MAX_CHUNK: usize = 0xff_ffff;

/// Default cap on a reassembled payload: 1 GiB, MySQL's largest `max_allowed_packet`.
pub const DEFAULT_MAX_PAYLOAD: usize = 1 << 30;

/// Header byte of an OK packet.
pub const OK_HEADER: u8 = 0x00;
/// Header byte of an EOF packet (and of the OK packet that ends a result set with
/// CLIENT_DEPRECATE_EOF, and of an auth switch request).
pub const EOF_HEADER: u8 = 0xfe;
/// Header byte of an ERR packet.
pub const ERR_HEADER: u8 = 0xff;

/// Server status flags (`SERVER_STATUS_*`) carried in OK and EOF packets.
pub mod status {
    /// A transaction is open.
    pub const IN_TRANS: u16 = 0x0001;
    /// Autocommit is on.
    pub const AUTOCOMMIT: u16 = 0x0002;
    /// More result sets follow (multi-statement or CALL).
    pub const MORE_RESULTS_EXISTS: u16 = 0x0008;
}

/// Tells a multi-chunk payload's full size from its first chunk, where the protocol carries it
/// (a binlog event's header holds the event's size): the reassembly buffer is then allocated
/// once at that size, not grown by doubling (a 64 MiB event would touch 128 MiB and copy
/// 112 MiB on the way).
pub type SizeHint = fn(&[u8]) -> Option<usize>;

/// Framing state of one connection: the next sequence id, the reassembly buffer and the cap.
#[derive(Debug)]
pub struct PacketCodec {
    seq: u8,
    max_payload: usize,
    partial: BytesMut,
    in_progress: bool,
    size_hint: Option<SizeHint>,
}

impl Default for PacketCodec {
    fn default() -> Self {
        PacketCodec::new(DEFAULT_MAX_PAYLOAD)
    }
}

impl PacketCodec {
    /// A codec that refuses reassembled payloads longer than `max_payload` bytes.
    pub fn new(max_payload: usize) -> Self {
        PacketCodec { seq: 0, max_payload, partial: BytesMut::new(), in_progress: false, size_hint: None }
    }

    /// The sequence id the next packet (read or written) must carry.
    pub fn sequence(&self) -> u8 {
        self.seq
    }

    /// Sets the next sequence id (after a TLS upgrade the exchange continues where it was).
    pub fn set_sequence(&mut self, seq: u8) {
        self.seq = seq;
    }

    /// Starts a new command: the next packet written carries sequence id 0.
    pub fn reset_sequence(&mut self) {
        self.seq = 0;
        self.partial.clear();
        self.in_progress = false;
    }

    /// Sizes multi-chunk payloads by `hint` from now on (see [`SizeHint`]); the cap still
    /// applies, and a hint smaller than the payload only costs a regrowth.
    pub fn set_size_hint(&mut self, hint: Option<SizeHint>) {
        self.size_hint = hint;
    }

    /// The cap on a reassembled payload.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Takes one complete logical packet's payload from the front of `buf`, reassembling
    /// continuation chunks. Returns `Ok(None)` when `buf` does not yet hold a whole chunk; the
    /// chunks already taken are kept inside the codec, so call again once more bytes arrived.
    ///
    /// A single-chunk payload is split off `buf` without copying.
    ///
    /// # Errors
    /// [`Error::Sequence`] when a chunk's sequence id is not the expected one;
    /// [`Error::TooLarge`] when the reassembled payload would exceed the cap.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>> {
        loop {
            let Some(header) = buf.get(..4) else {
                return Ok(None);
            };
            let mut r = Reader::new(header);
            let len = r.uint_le(3, "packet length")?;
            let seq = r.u8("packet sequence id")?;
            let len = usize::try_from(len).unwrap_or(MAX_CHUNK);
            let total = self.partial.len().saturating_add(len);
            if total > self.max_payload {
                return Err(Error::TooLarge { what: "packet", len: total as u64, max: self.max_payload as u64 });
            }
            if seq != self.seq {
                return Err(Error::Sequence { expected: self.seq, got: seq });
            }
            if buf.len() < 4 + len {
                // Reserve room for the rest of the chunk so the caller's reads fill it in one go.
                buf.reserve(4 + len - buf.len());
                return Ok(None);
            }
            self.seq = self.seq.wrapping_add(1);
            buf.advance(4);
            let chunk = buf.split_to(len);
            if len == MAX_CHUNK {
                // More chunks follow (possibly an empty one).
                if !self.in_progress {
                    let total = self.size_hint.and_then(|h| h(&chunk)).filter(|&t| t > len);
                    if let Some(t) = total.filter(|&t| t > self.max_payload) {
                        // refused before any more of it is buffered
                        return Err(Error::TooLarge { what: "packet", len: t as u64, max: self.max_payload as u64 });
                    }
                    self.partial = match total {
                        Some(t) => {
                            let mut p = BytesMut::with_capacity(t.min(self.max_payload));
                            p.extend_from_slice(&chunk);
                            p
                        }
                        None => chunk,
                    };
                    self.in_progress = true;
                } else {
                    self.partial.extend_from_slice(&chunk);
                }
                continue;
            }
            if self.in_progress {
                self.partial.extend_from_slice(&chunk);
                self.in_progress = false;
                return Ok(Some(std::mem::take(&mut self.partial).freeze()));
            }
            return Ok(Some(chunk.freeze()));
        }
    }

    /// Appends `payload` to `out` as one or more wire packets with consecutive sequence ids.
    ///
    /// # Errors
    /// [`Error::TooLarge`] when the payload exceeds the cap.
    pub fn encode(&mut self, payload: &[u8], out: &mut BytesMut) -> Result<()> {
        if payload.len() > self.max_payload {
            return Err(Error::TooLarge { what: "packet", len: payload.len() as u64, max: self.max_payload as u64 });
        }
        out.reserve(payload.len() + 4 * (payload.len() / MAX_CHUNK + 1));
        let mut rest = payload;
        loop {
            let n = rest.len().min(MAX_CHUNK);
            let (chunk, tail) = rest.split_at(n);
            out.put_uint_le(n as u64, 3);
            out.put_u8(self.seq);
            out.put_slice(chunk);
            self.seq = self.seq.wrapping_add(1);
            rest = tail;
            if n < MAX_CHUNK {
                return Ok(());
            }
        }
    }
}

/// A parsed OK packet.
///
/// | bytes        | field                                         |
/// |--------------|-----------------------------------------------|
/// | 1            | 0x00 (or 0xfe when it ends a result set)      |
/// | lenenc       | affected rows                                 |
/// | lenenc       | last insert id                                |
/// | 2            | status flags (CLIENT_PROTOCOL_41)             |
/// | 2            | warnings (CLIENT_PROTOCOL_41)                 |
/// | rest         | info (session state tracking is not parsed)   |
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OkPacket {
    /// Rows changed by the statement.
    pub affected_rows: u64,
    /// The last AUTO_INCREMENT value.
    pub last_insert_id: u64,
    /// `SERVER_STATUS_*` flags.
    pub status: u16,
    /// Warning count.
    pub warnings: u16,
    /// Human-readable info (empty when absent).
    pub info: Vec<u8>,
}

impl OkPacket {
    /// Parses an OK packet (header 0x00 or 0xfe).
    ///
    /// # Errors
    /// [`Error::Truncated`] or [`Error::Invalid`] for a malformed packet.
    pub fn parse(payload: &[u8]) -> Result<OkPacket> {
        let mut r = Reader::new(payload);
        let h = r.u8("OK header")?;
        if h != OK_HEADER && h != EOF_HEADER {
            return Err(Error::Invalid { what: "OK packet", reason: format!("header 0x{h:02x}") });
        }
        let affected_rows = r.lenenc_int("OK affected rows")?;
        let last_insert_id = r.lenenc_int("OK last insert id")?;
        let (status, warnings) = if r.remaining() >= 4 { (r.u16("OK status")?, r.u16("OK warnings")?) } else { (0, 0) };
        // With CLIENT_SESSION_TRACK the info is length-encoded; we do not ask for that
        // capability, so the rest is the plain info string.
        let info = r.take_rest().to_vec();
        Ok(OkPacket { affected_rows, last_insert_id, status, warnings, info })
    }
}

/// A parsed (pre-CLIENT_DEPRECATE_EOF) EOF packet: 0xfe, warnings u16, status u16.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EofPacket {
    /// Warning count.
    pub warnings: u16,
    /// `SERVER_STATUS_*` flags.
    pub status: u16,
}

impl EofPacket {
    /// Parses an EOF packet; the 4 bytes after the header are optional (pre-4.1 servers).
    ///
    /// # Errors
    /// [`Error::Invalid`] when the header is not 0xfe.
    pub fn parse(payload: &[u8]) -> Result<EofPacket> {
        let mut r = Reader::new(payload);
        let h = r.u8("EOF header")?;
        if h != EOF_HEADER {
            return Err(Error::Invalid { what: "EOF packet", reason: format!("header 0x{h:02x}") });
        }
        if r.remaining() >= 4 {
            Ok(EofPacket { warnings: r.u16("EOF warnings")?, status: r.u16("EOF status")? })
        } else {
            Ok(EofPacket::default())
        }
    }
}

/// True when `payload` is the packet that ends a result set (or a non-blocking binlog dump):
/// an EOF packet, or, with CLIENT_DEPRECATE_EOF, an OK packet with the 0xfe header. A row whose
/// first value has an 8-byte length also starts with 0xfe, but is then at least 9 bytes (EOF) or
/// 0xffffff bytes (OK) long, which is how the two are told apart.
pub fn is_end_of_rows(payload: &[u8], capabilities: u64) -> bool {
    match payload.first() {
        Some(&EOF_HEADER) => {
            if capabilities & capability::DEPRECATE_EOF != 0 {
                payload.len() < MAX_CHUNK
            } else {
                payload.len() < 9
            }
        }
        _ => false,
    }
}

/// True when `payload` is an ERR packet.
pub fn is_err(payload: &[u8]) -> bool {
    payload.first() == Some(&ERR_HEADER)
}

impl ServerError {
    /// Parses an ERR packet. The SQL state is present when the message starts with `#`
    /// (always with CLIENT_PROTOCOL_41, except for errors sent before the handshake).
    ///
    /// # Errors
    /// [`Error::Invalid`] when the header is not 0xff; [`Error::Truncated`].
    pub fn parse(payload: &[u8]) -> Result<ServerError> {
        let mut r = Reader::new(payload);
        let h = r.u8("ERR header")?;
        if h != ERR_HEADER {
            return Err(Error::Invalid { what: "ERR packet", reason: format!("header 0x{h:02x}") });
        }
        let code = r.u16("ERR code")?;
        let sql_state = if r.rest().first() == Some(&b'#') && r.remaining() >= 6 {
            r.skip(1, "ERR state marker")?;
            String::from_utf8_lossy(r.take(5, "ERR SQL state")?).into_owned()
        } else {
            String::new()
        };
        let message = String::from_utf8_lossy(r.take_rest()).into_owned();
        Ok(ServerError { code, sql_state, message })
    }
}

/// Turns an ERR payload into [`Error::Server`] (or the parse error if it is malformed).
pub fn err_to_error(payload: &[u8]) -> Error {
    match ServerError::parse(payload) {
        Ok(e) => Error::Server(e),
        Err(e) => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(codec: &mut PacketCodec, bytes: &[u8]) -> Vec<Bytes> {
        let mut buf = BytesMut::from(bytes);
        let mut out = Vec::new();
        while let Some(p) = codec.decode(&mut buf).unwrap() {
            out.push(p);
        }
        assert!(buf.is_empty());
        out
    }

    #[test]
    fn small_packets_and_sequence() {
        let mut c = PacketCodec::new(1024);
        let bytes = [
            0x01, 0x00, 0x00, // length 1
            0x00, // seq 0
            0x0e, // COM_PING
            0x00, 0x00, 0x00, // length 0
            0x01, // seq 1
        ];
        let got = decode_all(&mut c, &bytes);
        assert_eq!(got, vec![Bytes::from_static(&[0x0e]), Bytes::new()]);
        assert_eq!(c.sequence(), 2);
    }

    #[test]
    fn partial_input_waits() {
        let mut c = PacketCodec::new(1024);
        let mut buf = BytesMut::from(&[0x03, 0x00, 0x00, 0x00, b'a'][..]);
        assert_eq!(c.decode(&mut buf).unwrap(), None);
        buf.extend_from_slice(b"bc");
        assert_eq!(c.decode(&mut buf).unwrap().unwrap(), &b"abc"[..]);
        // header alone not complete
        let mut buf = BytesMut::from(&[0x03, 0x00][..]);
        assert_eq!(c.decode(&mut buf).unwrap(), None);
    }

    #[test]
    fn sequence_mismatch() {
        let mut c = PacketCodec::new(1024);
        let mut buf = BytesMut::from(&[0x00, 0x00, 0x00, 0x05][..]);
        assert_eq!(c.decode(&mut buf).unwrap_err(), Error::Sequence { expected: 0, got: 5 });
    }

    #[test]
    fn cap_is_checked_before_buffering() {
        let mut c = PacketCodec::new(10);
        // header says 0xffffff bytes; only the header has arrived
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0x00][..]);
        assert!(matches!(c.decode(&mut buf), Err(Error::TooLarge { len: 0xff_ffff, max: 10, .. })));
        let mut out = BytesMut::new();
        assert!(matches!(c.encode(&[0; 11], &mut out), Err(Error::TooLarge { .. })));
    }

    /// A binlog event over 16 MiB is reassembled into one buffer of the size its header gives
    /// (not one grown by doubling), byte for byte; a header that lies only costs a regrowth.
    #[test]
    fn a_size_hint_allocates_the_reassembly_once() {
        let event_size = MAX_CHUNK * 2 + 100;
        let mut payload = vec![0u8; 1 + event_size];
        // OK marker, then an event header whose bytes 9..13 hold the event's size
        payload[1 + 9..1 + 13].copy_from_slice(&u32::try_from(event_size).unwrap().to_le_bytes());
        for (i, b) in payload.iter_mut().enumerate().skip(20) {
            *b = (i % 251) as u8;
        }
        let mut wire = BytesMut::new();
        PacketCodec::default().encode(&payload, &mut wire).unwrap();
        let mut c = PacketCodec::default();
        c.set_size_hint(Some(crate::replication::binlog_packet_size));
        let mut buf = wire.clone();
        let mut got = None;
        while got.is_none() {
            got = c.decode(&mut buf).unwrap();
            if got.is_none() {
                assert!(
                    c.partial.capacity() == payload.len(),
                    "allocated {} for {}",
                    c.partial.capacity(),
                    payload.len()
                );
            }
        }
        assert_eq!(got.unwrap(), payload);
        // a header claiming less than the payload: still whole
        payload[1 + 9..1 + 13].copy_from_slice(&100u32.to_le_bytes());
        let mut wire = BytesMut::new();
        PacketCodec::default().encode(&payload, &mut wire).unwrap();
        c.reset_sequence();
        assert_eq!(decode_all(&mut c, &wire), vec![Bytes::from(payload.clone())]);
        assert_eq!(crate::replication::binlog_packet_size(&[0xff, 0, 0]), None);
        // an event the header says is over the cap is refused at its first chunk
        payload[1 + 9..1 + 13].copy_from_slice(&u32::try_from(event_size).unwrap().to_le_bytes());
        let mut wire = BytesMut::new();
        PacketCodec::default().encode(&payload, &mut wire).unwrap();
        let mut small = PacketCodec::new(MAX_CHUNK + 10);
        small.set_size_hint(Some(crate::replication::binlog_packet_size));
        let mut buf = wire.split_to(4 + MAX_CHUNK);
        let e = small.decode(&mut buf).unwrap_err();
        assert_eq!(e, Error::TooLarge { what: "packet", len: payload.len() as u64, max: (MAX_CHUNK + 10) as u64 });
    }

    #[test]
    fn exact_max_chunk_needs_empty_trailer() {
        let payload = vec![7u8; MAX_CHUNK];
        let mut enc = PacketCodec::default();
        let mut out = BytesMut::new();
        enc.encode(&payload, &mut out).unwrap();
        assert_eq!(out.len(), 4 + MAX_CHUNK + 4);
        assert_eq!(&out[..4], &[0xff, 0xff, 0xff, 0x00]);
        assert_eq!(&out[4 + MAX_CHUNK..], &[0x00, 0x00, 0x00, 0x01]); // empty packet, seq 1
        let mut dec = PacketCodec::default();
        let got = decode_all(&mut dec, &out);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].len(), MAX_CHUNK);
        // without the trailer the payload is incomplete
        let mut dec = PacketCodec::default();
        let mut cut = BytesMut::from(&out[..4 + MAX_CHUNK]);
        assert_eq!(dec.decode(&mut cut).unwrap(), None);
    }

    #[test]
    fn sixteen_mib_plus_one_round_trip() {
        let payload: Vec<u8> = (0..MAX_CHUNK + 1).map(|i| (i % 251) as u8).collect();
        let mut enc = PacketCodec::default();
        enc.set_sequence(3);
        let mut out = BytesMut::new();
        enc.encode(&payload, &mut out).unwrap();
        assert_eq!(out.len(), 4 + MAX_CHUNK + 4 + 1);
        assert_eq!(&out[4 + MAX_CHUNK..4 + MAX_CHUNK + 4], &[0x01, 0x00, 0x00, 0x04]);
        assert_eq!(enc.sequence(), 5);
        let mut dec = PacketCodec::default();
        dec.set_sequence(3);
        // feed in two halves to exercise reassembly across calls
        let mut buf = BytesMut::from(&out[..1000]);
        assert_eq!(dec.decode(&mut buf).unwrap(), None);
        buf.extend_from_slice(&out[1000..]);
        let got = dec.decode(&mut buf).unwrap().unwrap();
        assert_eq!(got.len(), payload.len());
        assert!(got == payload);
        assert_eq!(dec.sequence(), 5);
        // the cap applies to the reassembled size
        let mut dec = PacketCodec::new(MAX_CHUNK);
        dec.set_sequence(3);
        let mut buf = BytesMut::from(&out[..]);
        assert!(matches!(dec.decode(&mut buf), Err(Error::TooLarge { .. })));
    }

    proptest::proptest! {
        /// Any payload fed to the decoder in arbitrary pieces comes back whole, with both
        /// sides' sequence ids in step (the 16 MiB split is covered by the tests above).
        #[test]
        fn round_trip_in_pieces(len in 0usize..3000, piece in 1usize..700, seq in proptest::prelude::any::<u8>()) {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 % 256) as u8).collect();
            let mut enc = PacketCodec::new(4096);
            enc.set_sequence(seq);
            let mut out = BytesMut::new();
            enc.encode(&payload, &mut out).unwrap();
            let mut dec = PacketCodec::new(4096);
            dec.set_sequence(seq);
            let mut buf = BytesMut::new();
            let mut got = None;
            for chunk in out.chunks(piece) {
                buf.extend_from_slice(chunk);
                if let Some(p) = dec.decode(&mut buf).unwrap() {
                    got = Some(p);
                }
            }
            proptest::prop_assert_eq!(got.unwrap(), payload);
            proptest::prop_assert_eq!(dec.sequence(), enc.sequence());
        }

        /// Garbage never panics the decoder.
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let mut dec = PacketCodec::new(32);
            let mut buf = BytesMut::from(&bytes[..]);
            while let Ok(Some(_)) = dec.decode(&mut buf) {}
            let _ = ServerError::parse(&bytes);
            let _ = OkPacket::parse(&bytes);
            let _ = EofPacket::parse(&bytes);
            let _ = crate::handshake::InitialHandshake::parse(&bytes);
            let _ = crate::query::ColumnDefinition::parse(&bytes);
            let _ = crate::query::parse_text_row(&bytes, 3);
        }
    }

    #[test]
    fn empty_payload_is_one_empty_packet() {
        let mut enc = PacketCodec::default();
        let mut out = BytesMut::new();
        enc.encode(&[], &mut out).unwrap();
        assert_eq!(&out[..], &[0, 0, 0, 0]);
    }

    #[test]
    fn err_packet() {
        let p = b"\xff\x15\x04#28000Access denied for user 'x'@'localhost' (using password: YES)";
        let e = ServerError::parse(p).unwrap();
        assert_eq!(e.code, 1045);
        assert_eq!(e.sql_state, "28000");
        assert!(e.message.starts_with("Access denied"));
        // pre-handshake errors have no SQL state
        let e = ServerError::parse(b"\xff\x10\x04Too many connections").unwrap();
        assert_eq!((e.code, e.sql_state.as_str()), (1040, ""));
        assert!(ServerError::parse(b"\xff\x10\x04").unwrap().message.is_empty());
        assert!(ServerError::parse(b"\xff").is_err());
    }

    #[test]
    fn ok_and_eof() {
        let ok = OkPacket::parse(&[
            0x00, // header
            0x01, // affected rows
            0xfc, 0x00, 0x01, // last insert id 256
            0x02, 0x00, // status: autocommit
            0x00, 0x00, // warnings
        ])
        .unwrap();
        assert_eq!((ok.affected_rows, ok.last_insert_id, ok.status, ok.warnings), (1, 256, status::AUTOCOMMIT, 0));
        let eof = EofPacket::parse(&[0xfe, 0x01, 0x00, 0x02, 0x00]).unwrap();
        assert_eq!(eof, EofPacket { warnings: 1, status: 2 });
        assert!(is_end_of_rows(&[0xfe, 0, 0, 2, 0], 0));
        assert!(is_end_of_rows(&[0xfe, 0, 0, 2, 0, 0, 0], capability::DEPRECATE_EOF));
        // a row starting with an 8-byte lenenc is not an EOF
        assert!(!is_end_of_rows(&[0xfe, 1, 0, 0, 0, 0, 0, 0, 0, b'x'], 0));
        assert!(!is_end_of_rows(&[0x00], 0));
    }
}
