//! (being written)
/// JSON (placeholder).
#[derive(Debug, Clone, PartialEq)] pub struct JsonValue;
/// JSON diff (placeholder).
#[derive(Debug, Clone, PartialEq)] pub struct JsonDiff;
