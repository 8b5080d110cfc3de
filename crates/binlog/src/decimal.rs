//! (being written)
/// Exact decimal (placeholder). 
#[derive(Debug, Clone, PartialEq, Eq)] pub struct Decimal;
