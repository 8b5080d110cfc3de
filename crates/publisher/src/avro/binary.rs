//! Avro's binary encoding of primitive values, appended to a buffer (Avro 1.11 specification,
//! "Binary Encoding"): zig-zag varints for int and long, little-endian IEEE floats,
//! length-prefixed bytes and strings. Records are their fields in order, a union is its branch
//! index (a long) before the value, an array is one block (count, items) and a 0; the encoder
//! (`encode.rs`) writes those shapes with these primitives, following the same `FieldPlan`s
//! the schemas were made from.

/// A `long` (also an `int`, a union branch index, a block count): zig-zag varint. Inlined for
/// the one-byte case (-64..=63: most lengths and counts), the rest out of line: a call for
/// every long was 3% of the record path's instructions (`make bench-instructions`).
#[inline]
pub(crate) fn long(n: i64, out: &mut Vec<u8>) {
    let z = ((n << 1) ^ (n >> 63)) as u64;
    if z < 0x80 {
        out.push(z as u8);
    } else {
        varint(z, out);
    }
}

/// The varint of a zig-zagged long of two bytes or more.
#[inline(never)]
fn varint(mut z: u64, out: &mut Vec<u8>) {
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// A count or index (never beyond `i64::MAX` in practice: lengths of in-memory data).
pub(crate) fn count(n: usize, out: &mut Vec<u8>) {
    long(i64::try_from(n).unwrap_or(i64::MAX), out);
}

/// `bytes` (and a `decimal` on bytes).
pub(crate) fn bytes(b: &[u8], out: &mut Vec<u8>) {
    count(b.len(), out);
    out.extend_from_slice(b);
}

/// `string` (UTF-8).
pub(crate) fn string(s: &str, out: &mut Vec<u8>) {
    bytes(s.as_bytes(), out);
}

/// `boolean`.
pub(crate) fn boolean(b: bool, out: &mut Vec<u8>) {
    out.push(u8::from(b));
}

/// `float`.
pub(crate) fn float(f: f32, out: &mut Vec<u8>) {
    out.extend_from_slice(&f.to_le_bytes());
}

/// `double`.
pub(crate) fn double(d: f64, out: &mut Vec<u8>) {
    out.extend_from_slice(&d.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        f(&mut out);
        out
    }

    /// The specification's examples.
    #[test]
    fn spec_examples() {
        assert_eq!(enc(|o| long(0, o)), [0x00]);
        assert_eq!(enc(|o| long(-1, o)), [0x01]);
        assert_eq!(enc(|o| long(1, o)), [0x02]);
        assert_eq!(enc(|o| long(-64, o)), [0x7f]);
        assert_eq!(enc(|o| long(64, o)), [0x80, 0x01]);
        assert_eq!(enc(|o| string("foo", o)), [0x06, 0x66, 0x6f, 0x6f]);
        assert_eq!(enc(|o| long(i64::MIN, o)), [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert_eq!(enc(|o| double(1.5, o)), 1.5f64.to_le_bytes());
        assert_eq!(enc(|o| boolean(true, o)), [1]);
    }

    /// Agrees with apache-avro's writer over the edges of the varint lengths.
    #[test]
    fn longs_agree_with_apache_avro() {
        let schema = apache_avro::Schema::Long;
        for shift in 0..64 {
            for n in [1i64 << shift, (1i64 << shift).wrapping_sub(1), (1i64 << shift).wrapping_neg(), !(1i64 << shift)]
            {
                let reference = apache_avro::to_avro_datum(&schema, apache_avro::types::Value::Long(n)).unwrap();
                assert_eq!(enc(|o| long(n, o)), reference, "{n}");
            }
        }
    }
}
