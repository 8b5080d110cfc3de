//! **Where a row ends in a datum**, found without decoding it: the byte span of a row image as
//! [`super::AvroEncoder`] writes it, walked by the table's field plans. `sluice verify` digests
//! a record's row by these bytes when the record was written with the table's schema of now:
//! the encoding is deterministic, so equal values give equal bytes, and the comparison of a
//! million rows needs no decoding at all.

use super::field::{FieldPlan, Kind};
use super::TableSchema;

/// Reads a zigzag varint long.
fn long(d: &mut &[u8]) -> Option<i64> {
    let mut n: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = d.split_first()?;
        *d = rest;
        n |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(((n >> 1) as i64) ^ -((n & 1) as i64));
        }
    }
    None
}

fn skip(d: &mut &[u8], n: usize) -> Option<()> {
    *d = d.get(n..)?;
    Some(())
}

/// Skips `bytes` or `string`.
fn bytes(d: &mut &[u8]) -> Option<()> {
    let n = usize::try_from(long(d)?).ok()?;
    skip(d, n)
}

/// Skips an array whose items `item` skips (blocks; a negative count carries its byte size).
fn array(d: &mut &[u8], item: impl Fn(&mut &[u8]) -> Option<()>) -> Option<()> {
    loop {
        let count = long(d)?;
        if count == 0 {
            return Some(());
        }
        if count < 0 {
            let size = usize::try_from(long(d)?).ok()?;
            skip(d, size)?;
            continue;
        }
        for _ in 0..count {
            item(d)?;
        }
    }
}

fn field(f: &FieldPlan, d: &mut &[u8]) -> Option<()> {
    if f.is_union() {
        let branch = long(d)?;
        let value = i64::from(f.value_branch());
        if f.nullable && branch == 0 {
            return Some(());
        }
        if f.zero_string && branch == value + 1 {
            return bytes(d);
        }
        if branch != value {
            return None;
        }
    }
    match &f.kind {
        Kind::Int | Kind::Long | Kind::Year | Kind::Date | Kind::Time | Kind::DateTime | Kind::Timestamp => {
            long(d).map(drop)
        }
        Kind::Enum { .. } => long(d).map(drop),
        Kind::U64Decimal | Kind::Decimal { .. } | Kind::Text | Kind::Json | Kind::Bytes | Kind::Bits { .. } => bytes(d),
        Kind::EnumString { .. } => bytes(d),
        Kind::Float => skip(d, 4),
        Kind::Double => skip(d, 8),
        Kind::Bool => skip(d, 1),
        Kind::Set { .. } => array(d, bytes),
        Kind::Vector => array(d, |d| skip(d, 4)),
        Kind::Geometry => {
            long(d)?;
            bytes(d)
        }
    }
}

impl TableSchema {
    /// The length of the row image at the start of `datum` (None: it is not one of this
    /// schema's rows).
    pub(crate) fn row_len(&self, datum: &[u8]) -> Option<usize> {
        let mut d = datum;
        for f in &self.fields {
            field(f, &mut d)?;
        }
        if self.partial_images {
            array(&mut d, bytes)?;
        }
        Some(datum.len() - d.len())
    }

    /// Reads a string at the start of `d` (the envelope's `op`, the flattened `__op`).
    pub(crate) fn read_str<'d>(d: &mut &'d [u8]) -> Option<&'d str> {
        let n = usize::try_from(long(d)?).ok()?;
        let (s, rest) = (d.get(..n)?, d.get(n..)?);
        *d = rest;
        std::str::from_utf8(s).ok()
    }

    /// Reads a union branch index (or any long) at the start of `d`.
    pub(crate) fn read_long(d: &mut &[u8]) -> Option<i64> {
        long(d)
    }
}
