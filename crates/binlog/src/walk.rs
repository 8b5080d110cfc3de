//! The event walker: **raw events in, located events out**, with no I/O. A binlog file
//! ([`crate::file::BinlogReader`]) and a replication stream (the publisher's live source) both
//! hand it one complete raw event at a time and get back the decoded event with the file and
//! offset it came from; the events inside a compressed TRANSACTION_PAYLOAD come out one by one
//! after the payload event itself ([`EventWalker::next_inner`]), marked `in_payload`.
//!
//! A file knows each event's offset (it counts bytes); a replication stream does not send
//! offsets but each header's `log_pos` (the offset of the next event), from which the walker
//! derives the event's own. In a stream a ROTATE names the file of the events after it (the
//! first one of a dump is the server's "fake" ROTATE naming where the dump starts); in a file
//! the last event is a ROTATE naming the next file, which the file's events do not belong to.

use crate::decoder::{split_events, DecodedEvent, EventDecoder};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::event_type::EventType;
use crate::header::EventHeader;

/// An event with where it came from.
#[derive(Debug)]
pub struct Located<'a> {
    /// File name (as given for a file; as the stream's ROTATEs name it for a stream).
    pub file: &'a str,
    /// Offset of the event in the file (for events inside a compressed transaction: the
    /// offset of the TRANSACTION_PAYLOAD event that holds them).
    pub offset: u64,
    /// True for an event from inside a TRANSACTION_PAYLOAD.
    pub in_payload: bool,
    /// The decoded event.
    pub event: DecodedEvent<'a>,
}

/// Where an event's offset comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offset {
    /// Known to the caller (a file reader counts bytes).
    At(u64),
    /// From the event's header: `log_pos - event_size` (a replication stream).
    FromHeader,
}

/// Decodes a sequence of raw events (see the module docs).
#[derive(Debug)]
pub struct EventWalker {
    decoder: EventDecoder,
    payload: PendingPayload,
    file: String,
    follow_rotate: bool,
    /// Where the last event of `file` ended (its header's next position): the offset named
    /// for a streamed event whose own header cannot be trusted.
    last_end: u64,
}

impl EventWalker {
    /// A walker over the events of `file`; a ROTATE does not change the file name.
    pub fn new(file: impl Into<String>, decoder: EventDecoder) -> EventWalker {
        EventWalker {
            decoder,
            payload: PendingPayload::default(),
            file: file.into(),
            follow_rotate: false,
            last_end: 0,
        }
    }

    /// A walker over a replication stream that starts in `file`: each ROTATE names the file
    /// of the events after it.
    pub fn stream(file: impl Into<String>, decoder: EventDecoder) -> EventWalker {
        EventWalker { follow_rotate: true, ..EventWalker::new(file, decoder) }
    }

    /// The file the next event belongs to.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Where the next event of [`EventWalker::file`] starts, as the last event's header (or a
    /// ROTATE) said: the position just after everything walked so far.
    pub fn next_offset(&self) -> u64 {
        self.last_end
    }

    /// The decoder (its format, table maps and counters).
    pub fn decoder(&self) -> &EventDecoder {
        &self.decoder
    }

    /// Gives the decoder back (to continue with the next file of a sequence).
    pub fn into_decoder(self) -> EventDecoder {
        self.decoder
    }

    /// True while events of the last TRANSACTION_PAYLOAD wait to be handed out.
    pub fn has_inner(&self) -> bool {
        self.payload.has_next()
    }

    /// The next event from inside the last TRANSACTION_PAYLOAD (call while
    /// [`EventWalker::has_inner`]).
    ///
    /// # Errors
    /// A malformed inner event (the rest of the payload is dropped), naming the file and the
    /// payload's offset.
    pub fn next_inner(&mut self) -> Result<Located<'_>> {
        let offset = self.payload.offset();
        let Self { payload, decoder, file, .. } = self;
        let event = payload.next(decoder).map_err(|e| e.at(file, offset, EventType::TransactionPayload))?;
        Ok(Located { file, offset, in_payload: true, event })
    }

    /// Decodes one complete raw event (header, body, checksum).
    ///
    /// # Errors
    /// A malformed or undecodable event, naming the file, the offset and the event type.
    pub fn walk<'a>(&'a mut self, raw: &'a [u8], offset: Offset) -> Result<Located<'a>> {
        let header = EventHeader::parse(raw).map_err(|e| {
            let at = match offset {
                Offset::At(o) => o,
                Offset::FromHeader => self.last_end,
            };
            e.at(&self.file, at, EventType::Unknown(raw.get(4).copied().unwrap_or(0)))
        })?;
        let offset = match offset {
            Offset::At(o) => o,
            // a header whose size is not the event's own cannot place it: it starts where the
            // last one ended
            Offset::FromHeader if usize::try_from(header.event_size).ok() != Some(raw.len()) => self.last_end,
            Offset::FromHeader => u64::from(header.log_pos).saturating_sub(u64::from(header.event_size)),
        };
        let Self { decoder, payload, file, follow_rotate, last_end } = self;
        let event = decoder.decode(raw).map_err(|e| e.at(file, offset, header.event_type))?;
        payload.refill(decoder, offset);
        if header.log_pos != 0 {
            *last_end = u64::from(header.log_pos);
        }
        if *follow_rotate {
            if let Event::Rotate(r) = &event.event {
                *file = r.next_file.to_string();
                *last_end = r.position;
            }
        }
        Ok(Located { file, offset, in_payload: false, event })
    }

    /// Starts over in `file` with a fresh decoder (a new dump after a reconnect): the events
    /// still waiting inside a payload are dropped.
    pub fn restart(&mut self, file: impl Into<String>, decoder: EventDecoder) {
        self.decoder = decoder;
        self.payload.clear();
        self.file = file.into();
    }

    /// The decoder, to adjust it before the first event (the checksum of a stream's fake
    /// ROTATE).
    pub fn decoder_mut(&mut self) -> &mut EventDecoder {
        &mut self.decoder
    }
}

/// The events of the last TRANSACTION_PAYLOAD still to be handed out, one at a time: after
/// each outer event, [`PendingPayload::refill`] takes the decompressed payload (if any) from
/// the decoder; while [`PendingPayload::has_next`], [`PendingPayload::next`] decodes the next
/// inner event.
#[derive(Debug, Default)]
struct PendingPayload {
    buf: Vec<u8>,
    pos: usize,
    offset: u64,
}

impl PendingPayload {
    /// Takes the payload the decoder just decompressed, if the last event was a
    /// TRANSACTION_PAYLOAD found at `offset`.
    fn refill(&mut self, decoder: &mut EventDecoder, offset: u64) {
        if let Some(p) = decoder.take_payload() {
            self.buf = p;
            self.pos = 0;
            self.offset = offset;
        }
    }

    /// True while inner events remain.
    fn has_next(&self) -> bool {
        self.pos < self.buf.len()
    }

    /// Offset of the TRANSACTION_PAYLOAD event holding the inner events.
    fn offset(&self) -> u64 {
        self.offset
    }

    /// Drops what is left (after a reconnect, say).
    fn clear(&mut self) {
        self.buf.clear();
        self.pos = 0;
    }

    /// Decodes the next inner event.
    ///
    /// # Errors
    /// A malformed inner event; the rest of the payload is dropped.
    fn next<'a>(&'a mut self, decoder: &mut EventDecoder) -> Result<DecodedEvent<'a>> {
        let rest = self.buf.get(self.pos..).unwrap_or(&[]);
        let raw = match split_events(rest).next() {
            Some(Ok(raw)) => raw,
            Some(Err(e)) => {
                self.pos = self.buf.len();
                return Err(e);
            }
            None => &[],
        };
        self.pos += raw.len().max(1);
        let res = decoder.decode_inner(raw);
        if res.is_err() {
            self.pos = self.buf.len();
        }
        res
    }
}

/// An error for an event the caller could not even frame (a truncated header, an impossible
/// size), located like the walker's own.
pub fn framing_error(file: &str, offset: u64, type_byte: Option<u8>, why: impl Into<String>) -> Error {
    Error::invalid("event", why).at(file, offset, type_byte.map_or(EventType::Unknown(0), EventType::from_u8))
}
