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

/// The varint of a zig-zagged long of two bytes or more. Two and three bytes (lengths of 64 and
/// more, ids, dates: three quarters of these in the benchmark) are one append each; four to eight
/// (a timestamp's microseconds take eight) are spread into one word, appended whole and cut to
/// length (the loop below took 1.6% more of the record path's instructions, measured); longer
/// ones are put together in a 16-byte array whose masked indices need no bounds checks. A push
/// per byte checked the capacity per byte, and a copy of the varint's own length calls `memcpy`.
#[inline(never)]
fn varint(z: u64, out: &mut Vec<u8>) {
    // (growing the buffer, and the wide ones, apart: the short ones then save no registers, and
    // a call costs 15 instructions, not 30)
    if z < 1 << 14 {
        append(&[(z as u8) | 0x80, (z >> 7) as u8], out);
    } else if z < 1 << 21 {
        append(&[(z as u8) | 0x80, ((z >> 7) as u8) | 0x80, (z >> 14) as u8], out);
    } else {
        wide_varint(z, out);
    }
}

/// Appends `b`, growing the buffer out of line (so that a caller that only appends needs no
/// registers saved for the call that grows it).
#[inline(always)]
fn append(b: &[u8], out: &mut Vec<u8>) {
    if out.capacity() - out.len() >= b.len() {
        out.extend_from_slice(b);
    } else {
        grow_and_append(b, out);
    }
}

#[cold]
#[inline(never)]
fn grow_and_append(b: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b);
}

/// [`varint`] of four bytes or more.
#[inline(never)]
fn wide_varint(mut z: u64, out: &mut Vec<u8>) {
    if z < 1 << 56 {
        // 4 to 8 bytes (a timestamp's microseconds take 8): the 7-bit groups spread into the
        // bytes of one word, a continuation bit on each but the last, appended whole and cut
        // (its length: 7 bits a byte, at least one byte)
        let n = (70 - z.leading_zeros() as usize) / 7;
        // (56 bits as two halves of 28, each as two quarters of 14, each as two bytes of 7: a
        // loop over the eight groups took twice the instructions)
        let mut word = (z & 0x0FFF_FFFF) | (z & 0x00FF_FFFF_F000_0000) << 4;
        word = (word & 0x0000_3FFF_0000_3FFF) | (word & 0x0FFF_C000_0FFF_C000) << 2;
        word = (word & 0x007F_007F_007F_007F) | (word & 0x3F80_3F80_3F80_3F80) << 1;
        // continuation bits on the n - 1 low bytes
        word |= 0x8080_8080_8080_8080 & ((1u64 << (8 * (n - 1))) - 1);
        let bytes = word.to_le_bytes();
        if out.capacity() - out.len() >= bytes.len() {
            let start = out.len();
            out.extend_from_slice(&bytes);
            out.truncate(start + n);
        } else {
            grow_and_append(bytes.get(..n).unwrap_or(&bytes), out);
        }
        return;
    }
    let mut buf = [0u8; 16];
    let mut n = 0;
    while z >= 0x80 {
        buf[n & 15] = (z as u8) | 0x80;
        z >>= 7;
        n += 1;
    }
    buf[n & 15] = z as u8;
    let start = out.len();
    out.extend_from_slice(&buf);
    out.truncate(start + n + 1);
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

/// A `decimal` on bytes whose unscaled value `v` fits an `i64`: its minimal big-endian two's
/// complement bytes (a sign bit and the value's bits, 1 to 8 bytes), appended as one 8-byte
/// word cut to length. The general way (`Decimal::unscaled_be` into a buffer, then [`bytes`])
/// cost two copies of a variable length, 120 instructions a value.
pub(crate) fn decimal_i64(v: i64, out: &mut Vec<u8>) {
    let n = sluice_binlog::decimal::twos_complement_len(v);
    count(n, out);
    let start = out.len();
    // the n low bytes moved to the top of the word, so they come first big-endian
    out.extend_from_slice(&(v << (8 * (8 - n))).to_be_bytes());
    out.truncate(start + n);
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

    /// A DECIMAL's bytes written from its `i64` are the general way's: around every byte
    /// length's edges, both signs.
    #[test]
    fn decimal_i64_writes_the_minimal_bytes() {
        let mut values = vec![0i64, 1, -1, i64::MAX, -i64::MAX];
        for shift in 0..63 {
            let p = 1i64 << shift;
            values.extend([p, p - 1, -p, -p + 1, -p - 1]);
        }
        for v in values {
            let d: sluice_binlog::decimal::Decimal = v.to_string().parse().unwrap();
            let mut buf = [0; sluice_binlog::decimal::UNSCALED_BE_MAX];
            assert_eq!(enc(|o| decimal_i64(v, o)), enc(|o| bytes(d.unscaled_be(&mut buf), o)), "{v}");
        }
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
                // appended with room to spare, and with one byte too few (the buffer grows)
                for room in [16, reference.len() - 1] {
                    let mut out = Vec::with_capacity(1 + room);
                    out.push(0xee);
                    long(n, &mut out);
                    assert_eq!((out[0], &out[1..]), (0xee, &reference[..]), "{n} with room for {room}");
                }
            }
        }
    }
}
