//! Avro's binary encoding of the values the encoder builds, written straight into a buffer.
//!
//! `apache_avro::to_avro_datum` resolves the schema's names and validates the value against it
//! for every datum; for Sluice's rows that cost several times the rest of the pipeline. The
//! values here are built from the same `FieldPlan`s as the schemas, so they already match: this
//! writer only serialises them (Avro 1.11 specification, "Binary Encoding"): zig-zag varints
//! for int and long, little-endian IEEE floats, length-prefixed bytes and strings, the branch
//! index before a union's value, a record's fields in order, arrays as one block and a 0.
//! Debug builds (and so every test, the end-to-end ones included) compare each datum with
//! apache-avro's own encoding.

use apache_avro::types::Value as Avro;

/// Appends `v`'s encoding; None for a kind of value Sluice never builds (the caller falls back
/// to apache-avro, which knows the schema).
pub(crate) fn write(v: &Avro, out: &mut Vec<u8>) -> Option<()> {
    match v {
        Avro::Null => {}
        Avro::Boolean(b) => out.push(u8::from(*b)),
        Avro::Int(i) | Avro::Date(i) | Avro::TimeMillis(i) => long(i64::from(*i), out),
        Avro::Long(l)
        | Avro::TimeMicros(l)
        | Avro::TimestampMillis(l)
        | Avro::TimestampMicros(l)
        | Avro::LocalTimestampMillis(l)
        | Avro::LocalTimestampMicros(l) => long(*l, out),
        Avro::Float(f) => out.extend_from_slice(&f.to_le_bytes()),
        Avro::Double(d) => out.extend_from_slice(&d.to_le_bytes()),
        Avro::Bytes(b) => bytes(b, out),
        Avro::String(s) => bytes(s.as_bytes(), out),
        // Sluice's decimals are bytes-backed (never fixed): the two's-complement bytes
        Avro::Decimal(d) => bytes(&<Vec<u8>>::try_from(d).ok()?, out),
        Avro::Enum(index, _) => long(i64::from(*index), out),
        Avro::Union(index, inner) => {
            long(i64::from(*index), out);
            write(inner, out)?;
        }
        Avro::Array(items) => {
            if !items.is_empty() {
                long(i64::try_from(items.len()).ok()?, out);
                for item in items {
                    write(item, out)?;
                }
            }
            out.push(0);
        }
        Avro::Record(fields) => {
            for (_, field) in fields {
                write(field, out)?;
            }
        }
        _ => return None,
    }
    Some(())
}

/// Zig-zag varint.
fn long(n: i64, out: &mut Vec<u8>) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn bytes(b: &[u8], out: &mut Vec<u8>) {
    long(b.len() as i64, out);
    out.extend_from_slice(b);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: &Avro) -> Vec<u8> {
        let mut out = Vec::new();
        write(v, &mut out).unwrap();
        out
    }

    /// The specification's examples.
    #[test]
    fn spec_examples() {
        assert_eq!(enc(&Avro::Long(0)), [0x00]);
        assert_eq!(enc(&Avro::Long(-1)), [0x01]);
        assert_eq!(enc(&Avro::Long(1)), [0x02]);
        assert_eq!(enc(&Avro::Long(-64)), [0x7f]);
        assert_eq!(enc(&Avro::Long(64)), [0x80, 0x01]);
        assert_eq!(enc(&Avro::String("foo".into())), [0x06, 0x66, 0x6f, 0x6f]);
        assert_eq!(enc(&Avro::Union(1, Box::new(Avro::Long(2)))), [0x02, 0x04]);
        assert_eq!(enc(&Avro::Array(vec![Avro::Long(3), Avro::Long(27)])), [0x04, 0x06, 0x36, 0x00]);
        assert_eq!(enc(&Avro::Long(i64::MIN)), [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    }
}
