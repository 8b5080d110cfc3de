//! (being written)
/// JSON (placeholder).
#[derive(Debug, Clone, PartialEq)] pub struct JsonValue;
/// JSON diff (placeholder).
#[derive(Debug, Clone, PartialEq)] pub struct JsonDiff;
/// TEMPORARY.
///
/// # Errors
/// Always.
pub fn read_json_diffs(_b: &[u8]) -> crate::Result<Vec<JsonDiff>> { Err(crate::Error::invalid("json diff", "not yet")) }
/// TEMPORARY.
///
/// # Errors
/// Always.
pub fn apply_diffs(_d: &mut JsonValue, _x: &[JsonDiff]) -> crate::Result<()> { Err(crate::Error::invalid("json diff", "not yet")) }
