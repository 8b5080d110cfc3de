//! [`EventDecoder`]: the stateful decoder over a stream of raw events.
//!
//! It owns what decoding needs to remember between events: the FORMAT_DESCRIPTION in force
//! (post-header lengths, checksum algorithm), the TABLE_MAP cache (cleared on rotate and on a
//! new FDE), and the decompressed payload of the last TRANSACTION_PAYLOAD event. Files
//! ([`crate::file`]) and the replication stream feed it the same way: one complete event
//! (header, body, checksum) at a time.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::event::{
    mariadb_uncompress, parse_transaction_payload, ChecksumAlg, Event, FormatDescription, Query, PREALLOC_MAX,
};
use crate::event_type::EventType;
use crate::header::{EventHeader, HEADER_LEN, LOG_EVENT_BINLOG_IN_USE_F};
use crate::rows::{RowsEvent, RowsKind};
use crate::table_map::{TableMap, Writer};

/// Limits and switches for an [`EventDecoder`].
#[derive(Debug, Clone)]
pub struct DecoderOptions {
    /// Verify each event's CRC32 when the FDE announces one (turn off only for damaged files).
    pub verify_checksum: bool,
    /// Largest decompressed size accepted for a TRANSACTION_PAYLOAD or a MariaDB compressed
    /// event; larger announced sizes are refused before allocating.
    pub max_decompressed_size: u64,
}

impl Default for DecoderOptions {
    fn default() -> Self {
        DecoderOptions { verify_checksum: true, max_decompressed_size: 1 << 30 }
    }
}

/// Counters the decoder keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecoderStats {
    /// Events decoded (inner events of transaction payloads included).
    pub events: u64,
    /// Events of unknown types, skipped.
    pub unknown_events: u64,
    /// The unknown type codes seen, with counts.
    pub unknown_types: Vec<(u8, u64)>,
}

/// One decoded event with its header.
#[derive(Debug, Clone)]
pub struct DecodedEvent<'a> {
    /// The common header.
    pub header: EventHeader,
    /// The body.
    pub event: Event<'a>,
}

/// A table map the decoder holds for the rows events that follow, with the bytes it was read
/// from. Servers write a transaction's TABLE_MAP again before every transaction that touches
/// the table, byte for byte the same until the table changes: those bytes compared (a
/// `memcmp` of a few hundred bytes) give back the map already read, instead of its columns
/// parsed and allocated again, and its users find the same `Arc` (their caches compare
/// pointers first). For one-row transactions that was a tenth of the pipeline's work.
#[derive(Debug)]
struct CachedTable {
    map: Arc<TableMap>,
    body: Box<[u8]>,
}

/// Decodes raw events one at a time, keeping the state that decoding needs.
#[derive(Debug)]
pub struct EventDecoder {
    fde: FormatDescription,
    tables: HashMap<u64, CachedTable>,
    opts: DecoderOptions,
    payload: Option<Vec<u8>>,
    stats: DecoderStats,
}

impl Default for EventDecoder {
    fn default() -> Self {
        EventDecoder::new(DecoderOptions::default())
    }
}

impl EventDecoder {
    /// A decoder before any FORMAT_DESCRIPTION (v4 defaults, no checksum).
    pub fn new(opts: DecoderOptions) -> EventDecoder {
        EventDecoder {
            fde: FormatDescription::v4_default(),
            tables: HashMap::new(),
            opts,
            payload: None,
            stats: DecoderStats::default(),
        }
    }

    /// The FORMAT_DESCRIPTION in force.
    pub fn format(&self) -> &FormatDescription {
        &self.fde
    }

    /// Sets the checksum algorithm before the first FDE arrives (replication streams start
    /// with a fake ROTATE written with the checksum the source negotiated).
    pub fn set_checksum(&mut self, alg: ChecksumAlg) {
        self.fde.checksum = alg;
    }

    /// Counters so far.
    pub fn stats(&self) -> &DecoderStats {
        &self.stats
    }

    /// The cached table map for a table id.
    pub fn table(&self, table_id: u64) -> Option<&Arc<TableMap>> {
        self.tables.get(&table_id).map(|c| &c.map)
    }

    /// Takes the decompressed payload of the TRANSACTION_PAYLOAD event just decoded: a
    /// sequence of complete events without checksums, to feed to
    /// [`EventDecoder::decode_inner`] one at a time (see [`split_events`]).
    pub fn take_payload(&mut self) -> Option<Vec<u8>> {
        self.payload.take()
    }

    /// Decodes one complete event: header, body and (if the FDE says so) checksum.
    ///
    /// # Errors
    /// Truncated or malformed events, checksum mismatches, rows events for unknown tables,
    /// encrypted binlogs. The decoder stays usable after an error.
    pub fn decode<'a>(&mut self, raw: &'a [u8]) -> Result<DecodedEvent<'a>> {
        self.decode_with(raw, true)
    }

    /// Decodes an event from inside a TRANSACTION_PAYLOAD (these carry no checksum).
    ///
    /// # Errors
    /// As [`EventDecoder::decode`].
    pub fn decode_inner<'a>(&mut self, raw: &'a [u8]) -> Result<DecodedEvent<'a>> {
        self.decode_with(raw, false)
    }

    fn decode_with<'a>(&mut self, raw: &'a [u8], outer: bool) -> Result<DecodedEvent<'a>> {
        let header = EventHeader::parse(raw)?;
        if header.event_size as usize != raw.len() {
            return Err(Error::invalid(
                "event header",
                format!("event size {} but {} bytes were given", header.event_size, raw.len()),
            ));
        }
        self.stats.events += 1;
        let t = header.event_type;
        // The FDE says whether it (and everything after it) carries a checksum; its body
        // always ends with the algorithm byte and a 4-byte checksum slot, so it is parsed
        // whole, before the checksum is known.
        let fde = if t == EventType::FormatDescription {
            Some(FormatDescription::parse(raw.get(HEADER_LEN..).unwrap_or(&[]))?)
        } else {
            None
        };
        let alg = if let Some(fde) = &fde {
            fde.checksum
        } else if outer {
            self.fde.checksum
        } else {
            ChecksumAlg::None
        };
        let body_end = match alg {
            ChecksumAlg::Crc32 => raw
                .len()
                .checked_sub(4)
                .filter(|&e| e >= HEADER_LEN)
                .ok_or_else(|| Error::invalid("event", "too short to hold its checksum"))?,
            ChecksumAlg::None => raw.len(),
        };
        if alg == ChecksumAlg::Crc32 && self.opts.verify_checksum {
            verify_crc(raw, body_end, t == EventType::FormatDescription)?;
        }
        if let Some(fde) = fde {
            self.fde = fde.clone();
            self.tables.clear();
            return Ok(DecodedEvent { header, event: Event::FormatDescription(fde) });
        }
        let body = raw.get(HEADER_LEN..body_end).unwrap_or(&[]);
        let event = self.decode_body(&header, body)?;
        Ok(DecodedEvent { header, event })
    }

    fn decode_body<'a>(&mut self, header: &EventHeader, body: &'a [u8]) -> Result<Event<'a>> {
        let t = header.event_type;
        match t {
            EventType::TableMap => {
                let post_header_len = self.fde.post_header_len(t, 8);
                // the same bytes under the same id (and the same FORMAT_DESCRIPTION: it empties
                // the cache) are the same table map
                if let Some(c) = TableMap::peek_id(body, post_header_len).and_then(|id| self.tables.get(&id)) {
                    if *c.body == *body {
                        return Ok(Event::TableMap(Arc::clone(&c.map)));
                    }
                }
                let writer = if self.fde.is_mariadb() { Writer::Mariadb } else { Writer::Mysql };
                let tm = Arc::new(TableMap::parse(body, post_header_len, writer)?);
                self.tables.insert(tm.table_id, CachedTable { map: Arc::clone(&tm), body: body.into() });
                Ok(Event::TableMap(tm))
            }
            EventType::TransactionPayload => {
                let (info, payload) = parse_transaction_payload(body)?;
                let max = self.opts.max_decompressed_size;
                if info.uncompressed_size > max {
                    return Err(Error::TooLarge { what: "transaction payload", len: info.uncompressed_size, max });
                }
                let bytes = match info.compression_type {
                    0 => zstd_decompress(payload, info.uncompressed_size, max)?,
                    255 => payload.to_vec(),
                    other => {
                        return Err(Error::invalid("transaction payload", format!("unknown compression type {other}")))
                    }
                };
                self.payload = Some(bytes);
                Ok(Event::TransactionPayload(info))
            }
            EventType::MariadbQueryCompressed => {
                let q =
                    Query::parse_compressed(body, self.fde.post_header_len(t, 13), self.opts.max_decompressed_size)?;
                Ok(Event::Query(q))
            }
            EventType::PreGaWriteRows | EventType::PreGaUpdateRows | EventType::PreGaDeleteRows => Err(Error::invalid(
                "rows event",
                "pre-GA rows events (types 20-22, written by MySQL 5.1 betas) are not supported: \
                 their table definitions are not in the binlog",
            )),
            _ if RowsKind::of(t).is_some() => {
                let tables = &self.tables;
                let max = self.opts.max_decompressed_size;
                let ev = RowsEvent::parse(
                    t,
                    body,
                    self.fde.post_header_len(t, 8),
                    &|id| tables.get(&id).map(|c| Arc::clone(&c.map)),
                    |data| mariadb_uncompress(data, max, "compressed rows"),
                )?;
                Ok(Event::Rows(ev))
            }
            _ => {
                let mut ev = Event::parse_simple(t, body, &self.fde)?;
                match &mut ev {
                    Event::Rotate(_) => self.tables.clear(),
                    Event::MariadbGtid(g) => g.gtid.server_id = header.server_id,
                    Event::Unknown(code) => {
                        self.stats.unknown_events += 1;
                        match self.stats.unknown_types.iter_mut().find(|(c, _)| c == code) {
                            Some((_, n)) => *n += 1,
                            None => self.stats.unknown_types.push((*code, 1)),
                        }
                    }
                    _ => {}
                }
                Ok(ev)
            }
        }
    }
}

/// Checks the CRC32 in the last four bytes of a whole event (header, body, checksum) of a
/// file or stream whose FDE says CRC32, without decoding it.
///
/// # Errors
/// An event too short to hold a checksum, or [`Error::ChecksumMismatch`].
pub fn check_crc32(raw: &[u8]) -> Result<()> {
    let body_end = raw
        .len()
        .checked_sub(4)
        .filter(|&e| e >= HEADER_LEN)
        .ok_or_else(|| Error::invalid("event", "too short to hold its checksum"))?;
    verify_crc(raw, body_end, raw.get(4) == Some(&EventType::FormatDescription.code()))
}

/// Checks an event's CRC32. The server computes the FDE's checksum with
/// `LOG_EVENT_BINLOG_IN_USE_F` clear (it sets the flag in place while the file is open), so
/// the flag is cleared before computing.
fn verify_crc(raw: &[u8], body_end: usize, is_fde: bool) -> Result<()> {
    let data = raw.get(..body_end).unwrap_or(&[]);
    let stored =
        raw.get(body_end..body_end + 4).and_then(|b| <[u8; 4]>::try_from(b).ok()).map(u32::from_le_bytes).unwrap_or(0);
    let mut h = crc32fast::Hasher::new();
    if is_fde {
        let (head, tail) = data.split_at(17.min(data.len()));
        h.update(head);
        let flags = tail.get(..2).and_then(|f| <[u8; 2]>::try_from(f).ok()).map_or(0, u16::from_le_bytes);
        h.update(&(flags & !LOG_EVENT_BINLOG_IN_USE_F).to_le_bytes());
        h.update(tail.get(2..).unwrap_or(&[]));
    } else {
        h.update(data);
    }
    let actual = h.finalize();
    if actual != stored {
        return Err(Error::ChecksumMismatch { expected: stored, actual });
    }
    Ok(())
}

fn zstd_decompress(payload: &[u8], announced: u64, max: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let dec = zstd::stream::read::Decoder::new(payload)
        .map_err(|e| Error::Decompress { what: "transaction payload", reason: e.to_string() })?;
    // `announced` is untrusted: preallocate at most PREALLOC_MAX, grow with real output.
    let mut out = Vec::with_capacity(usize::try_from(announced.min(max).min(PREALLOC_MAX)).unwrap_or(0));
    dec.take(max + 1)
        .read_to_end(&mut out)
        .map_err(|e| Error::Decompress { what: "transaction payload", reason: e.to_string() })?;
    if out.len() as u64 > max {
        return Err(Error::TooLarge { what: "transaction payload", len: out.len() as u64, max });
    }
    Ok(out)
}

/// Splits a buffer of back-to-back complete events (a decompressed transaction payload) into
/// events, by each header's size.
pub fn split_events(buf: &[u8]) -> impl Iterator<Item = Result<&[u8]>> {
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        let rest = buf.get(pos..)?;
        if rest.is_empty() {
            return None;
        }
        let res = EventHeader::parse(rest).and_then(|h| {
            let size = h.event_size as usize;
            if size < HEADER_LEN {
                return Err(Error::invalid("payload event", format!("event size {size} < 19")));
            }
            rest.get(..size).ok_or_else(|| {
                Error::from(sluice_protocol::Error::Truncated {
                    what: "payload event",
                    needed: size,
                    remaining: rest.len(),
                })
            })
        });
        match res {
            Ok(ev) => {
                pos += ev.len();
                Some(Ok(ev))
            }
            Err(e) => {
                pos = buf.len();
                Some(Err(e))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;
    use proptest::prelude::*;

    /// The FDE and first TABLE_MAP of a MySQL 8 file (CRC32) and of a MariaDB 10.11 file.
    const MYSQL: &[u8] = include_bytes!("../tests/data/fixtures/mysql/rust_mysql_common/json.binlog.000001");
    const MARIADB: &[u8] =
        include_bytes!("../tests/data/fixtures/mariadb/local-10.11.19/log_bin_compress.mysql-bin.000003");

    /// The raw event at `offset` of a binlog file.
    fn event_at(file: &[u8], offset: usize) -> &[u8] {
        let size = u32::from_le_bytes(file[offset + 9..offset + 13].try_into().unwrap()) as usize;
        &file[offset..offset + size]
    }

    /// A decoder primed with a real FDE and TABLE_MAP; returns it with the table id.
    fn primed(mariadb: bool, verify_checksum: bool) -> (EventDecoder, u64) {
        let (file, tm_at) = if mariadb { (MARIADB, 700) } else { (MYSQL, 1000) };
        let mut d = EventDecoder::new(DecoderOptions { verify_checksum, max_decompressed_size: 1 << 20 });
        d.decode(event_at(file, 4)).unwrap();
        let Event::TableMap(tm) = d.decode(event_at(file, tm_at)).unwrap().event else { panic!("not a TABLE_MAP") };
        (d, tm.table_id)
    }

    /// A well-framed event (size field and CRC32 right) around an arbitrary body, so the
    /// body parsers see the bytes rather than the checksum check.
    fn frame(type_code: u8, body: &[u8], crc: bool) -> Vec<u8> {
        let size = HEADER_LEN + body.len() + if crc { 4 } else { 0 };
        let mut ev = Vec::with_capacity(size);
        ev.extend_from_slice(&0u32.to_le_bytes()); // timestamp
        ev.push(type_code);
        ev.extend_from_slice(&1u32.to_le_bytes()); // server id
        ev.extend_from_slice(&(size as u32).to_le_bytes()); // event size
        ev.extend_from_slice(&0u32.to_le_bytes()); // log position
        ev.extend_from_slice(&0u16.to_le_bytes()); // flags
        ev.extend_from_slice(body);
        if crc {
            let c = crc32fast::hash(&ev);
            ev.extend_from_slice(&c.to_le_bytes());
        }
        ev
    }

    /// A TABLE_MAP that comes again byte for byte gives back the map already read; one with
    /// other bytes under the same id replaces it; a FORMAT_DESCRIPTION forgets them all.
    #[test]
    fn a_repeated_table_map_is_read_once() {
        let (mut d, id) = primed(true, true);
        let first = Arc::clone(d.table(id).unwrap());
        let raw = event_at(MARIADB, 700);
        let Event::TableMap(again) = d.decode(raw).unwrap().event else { panic!("not a TABLE_MAP") };
        assert!(Arc::ptr_eq(&again, &first));

        // the same id, the table name's last letter changed
        let body = &raw[HEADER_LEN..raw.len() - 4];
        let name = first.table.as_bytes();
        let at = body.windows(name.len() + 1).position(|w| w[..name.len()] == *name && w[name.len()] == 0).unwrap();
        let mut other = body.to_vec();
        other[at + name.len() - 1] ^= 0x01;
        let Event::TableMap(changed) = d.decode(&frame(19, &other, true)).unwrap().event else { panic!() };
        assert!(!Arc::ptr_eq(&changed, &first));
        assert_eq!(changed.table_id, id);
        assert_ne!(changed.table, first.table);
        assert!(Arc::ptr_eq(d.table(id).unwrap(), &changed));

        d.decode(event_at(MARIADB, 4)).unwrap();
        assert!(d.table(id).is_none());
        let Event::TableMap(reread) = d.decode(raw).unwrap().event else { panic!("not a TABLE_MAP") };
        assert!(!Arc::ptr_eq(&reread, &first));
        assert_eq!(*reread, *first);
    }

    /// Type codes worth generating: every known event, a few unknown ones.
    fn type_code() -> impl Strategy<Value = u8> {
        prop_oneof![0u8..=42, 160u8..=172, any::<u8>()]
    }

    /// Decodes an event and, for rows events, every row (as the file reader's callers do).
    fn decode_fully(d: &mut EventDecoder, raw: &[u8]) {
        if let Ok(ev) = d.decode(raw) {
            if let Event::Rows(rows) = &ev.event {
                for row in rows.rows().take(10_000) {
                    if row.is_err() {
                        break;
                    }
                }
            }
        }
        if let Some(payload) = d.take_payload() {
            for raw in split_events(&payload).take(10_000) {
                let Ok(raw) = raw else { break };
                let _ = d.decode_inner(raw);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Arbitrary bodies behind valid headers and checksums, after a real FDE and
        /// TABLE_MAP (rows events half the time name the mapped table): never a panic.
        #[test]
        fn arbitrary_events_never_panic(
            mariadb: bool,
            events in proptest::collection::vec(
                (type_code(), proptest::collection::vec(any::<u8>(), 0..300), any::<bool>()),
                1..6,
            ),
        ) {
            let (mut d, table_id) = primed(mariadb, true);
            for (t, mut body, own_table) in events {
                if own_table && body.len() >= 6 {
                    body[..6].copy_from_slice(&table_id.to_le_bytes()[..6]);
                }
                decode_fully(&mut d, &frame(t, &body, true));
            }
        }

        /// Arbitrary bytes as raw events, checksum verification off: never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(mariadb: bool, raw in proptest::collection::vec(any::<u8>(), 0..400)) {
            let (mut d, _) = primed(mariadb, false);
            decode_fully(&mut d, &raw);
            let (mut d, _) = primed(mariadb, true);
            decode_fully(&mut d, &raw);
            let _ = split_events(&raw).take(100).count();
        }
    }
}
