//! (being written)
/// DATE (placeholder until the value layer lands).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Date;
/// TIME.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Time;
/// DATETIME.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateTime;
/// TIMESTAMP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timestamp;
