//! (being written)
/// Decoder placeholder.
pub struct EventDecoder;
/// Decoded event placeholder.
pub struct DecodedEvent;
