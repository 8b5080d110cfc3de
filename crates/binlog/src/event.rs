//! (being written)
/// Event placeholder.
pub enum Event {}
