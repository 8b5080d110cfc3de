//! (being written)
/// TableMap placeholder.
pub struct TableMap;
