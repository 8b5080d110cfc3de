//! Exact DECIMAL / NUMERIC values: MySQL's binary decimal format, text, and the unscaled
//! two's-complement bytes the Avro `decimal` logical type wants.
//!
//! ## Binary format (`bin2decimal`)
//! A DECIMAL(P, S) has `P - S` integer digits and `S` fraction digits. Each side is cut into
//! groups of 9 digits stored as 4-byte big-endian integers; the leftover digits (the
//! *leading* integer digits and the *trailing* fraction digits) take
//! `[0, 1, 1, 2, 2, 3, 3, 4, 4, 4][n]` bytes:
//!
//! | part                    | bytes                 |
//! |-------------------------|-----------------------|
//! | leading integer digits  | `DIG2BYTES[intg % 9]` |
//! | full integer groups     | `4 * (intg / 9)`      |
//! | full fraction groups    | `4 * (frac / 9)`      |
//! | trailing fraction digits| `DIG2BYTES[frac % 9]` |
//!
//! The top bit of the first byte is the sign, flipped (set for positive values); a negative
//! value has every byte inverted. No floats anywhere: digits stay digits.
//!
//! References: MySQL `strings/decimal.cc` (`bin2decimal`, `decimal_bin_size`),
//! <https://dev.mysql.com/doc/refman/8.0/en/precision-math-decimal-characteristics.html>.

use std::fmt;
use std::str::FromStr;

use sluice_protocol::reader::Reader;

use crate::error::{Error, Result};

/// Bytes used by a leftover group of `n` (0..=8) digits.
const DIG2BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];
/// Digits per full group.
const DIG_PER_DEC: usize = 9;
/// The largest precision MySQL and MariaDB accept.
pub const MAX_PRECISION: u8 = 65;
/// The largest scale accepted (MariaDB allows 38; MySQL 30).
pub const MAX_SCALE: u8 = 38;

/// An exact decimal number: sign, the unscaled integer, and the scale.
///
/// `Decimal { magnitude: 12345, scale: 2 }` is `123.45`. Zero is never negative.
///
/// The magnitude is held inline as a 256-bit integer (MySQL's 65 digits need 216 bits), not as
/// a vector of digits: decoding a row with a DECIMAL column then allocates nothing, and the
/// digit groups of the binary format are folded in with one multiply-add each.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Decimal {
    /// The unscaled magnitude, little-endian 64-bit limbs (below 10^65).
    magnitude: [u64; 4],
    negative: bool,
    precision: u8,
    scale: u8,
}

fn dig2bytes(n: usize) -> usize {
    DIG2BYTES.get(n).copied().unwrap_or(4)
}

/// Room for [`Decimal::unscaled_be`]: a sign byte and the 256-bit magnitude.
pub const UNSCALED_BE_MAX: usize = 33;

/// The magnitude of a DECIMAL of up to 18 digits (at most 9 bytes, so its value fits a `u64`),
/// the common case: the bytes are loaded at once, the sign undone on all of them, and each digit
/// group shifted out, rather than read group by group through a `Reader` (a tenth of the
/// instructions). Up to 8 bytes (DECIMAL(12,2) is 6) they are loaded into a `u64`, whose shifts
/// are single instructions, the ninth into a `u128`. Same groups, same checks and errors as the
/// general path.
fn read_narrow(raw: &[u8], intg: usize, frac: usize, negative: bool) -> Result<u64> {
    let invert = if negative { 0xff } else { 0 };
    let mut bits = 8 * raw.len();
    if raw.len() <= 8 {
        let word = raw.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        word_magnitude(word, raw.len(), intg, frac, negative)
    } else {
        let mut x = raw.iter().fold(0u128, |acc, &b| (acc << 8) | u128::from(b ^ invert));
        x ^= 0x80 << (bits - 8);
        fold_groups(intg, frac, |n| {
            bits -= n;
            u64::try_from((x >> bits) & ((1u128 << n) - 1)).unwrap_or(u64::MAX)
        })
    }
}

/// [`read_narrow`] of `size` bytes (at most 8) loaded big-endian into the low bytes of `word`.
#[inline(always)]
fn word_magnitude(word: u64, size: usize, intg: usize, frac: usize, negative: bool) -> Result<u64> {
    let mut bits = 8 * size;
    let mut x = word;
    if bits > 0 {
        // the sign undone on every byte (inverted for a negative value), then the flipped sign bit
        if negative {
            x ^= u64::MAX >> (64 - bits);
        }
        x ^= 0x80 << (bits - 8);
    }
    // (a group takes at most 32 bits, and never more than are left)
    fold_groups(intg, frac, |n| {
        bits -= n;
        (x >> bits) & ((1u64 << n) - 1)
    })
}

/// Folds a narrow DECIMAL's digit groups, most significant first, into its magnitude; `take(n)`
/// gives the next `n` bits (a group of `ndig` digits is `8 * dig2bytes(ndig)` bits).
#[inline(always)]
fn fold_groups(intg: usize, frac: usize, mut take: impl FnMut(usize) -> u64) -> Result<u64> {
    let mut small = 0u64;
    let mut group = |ndig: usize| -> Result<()> {
        // an empty group takes no bits (and a shift by a whole word is not one)
        if ndig == 0 {
            return Ok(());
        }
        let v = take(8 * dig2bytes(ndig));
        let limit = POW10.get(ndig).copied().unwrap_or(1_000_000_000);
        if v >= limit {
            return Err(Error::invalid("DECIMAL", format!("digit group {v} has more than {ndig} digits")));
        }
        small = small * limit + v;
        Ok(())
    };
    group(intg % DIG_PER_DEC)?;
    for _ in 0..intg / DIG_PER_DEC {
        group(DIG_PER_DEC)?;
    }
    for _ in 0..frac / DIG_PER_DEC {
        group(DIG_PER_DEC)?;
    }
    group(frac % DIG_PER_DEC)?;
    Ok(small)
}

/// How many bytes the minimal big-endian two's complement of `v` takes: its bits plus a sign
/// bit, in whole bytes (1 to 8).
pub fn twos_complement_len(v: i64) -> usize {
    let bits = 65 - if v < 0 { v.leading_ones() } else { v.leading_zeros() };
    (bits as usize).div_ceil(8)
}

/// The byte size of a binary DECIMAL(precision, scale).
pub fn binary_size(precision: u8, scale: u8) -> usize {
    let intg = usize::from(precision.saturating_sub(scale));
    let frac = usize::from(scale);
    (intg / DIG_PER_DEC) * 4 + dig2bytes(intg % DIG_PER_DEC) + (frac / DIG_PER_DEC) * 4 + dig2bytes(frac % DIG_PER_DEC)
}

fn check_shape(precision: u8, scale: u8) -> Result<()> {
    if precision == 0 || precision > MAX_PRECISION || scale > MAX_SCALE || scale > precision {
        return Err(Error::invalid("DECIMAL", format!("bad precision/scale ({precision},{scale})")));
    }
    Ok(())
}

/// `10^n` for the digit counts of one group (0..=9).
const POW10: [u64; 10] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000, 1_000_000_000];

/// `m = m * mul + add` over the 256-bit magnitude. Callers keep the value below 10^65 (at most
/// 65 digits are ever folded in), so nothing carries out of the top limb.
fn mul_add(m: &mut [u64; 4], mul: u64, add: u64) {
    let mut carry = u128::from(add);
    for limb in m.iter_mut() {
        let v = u128::from(*limb) * u128::from(mul) + carry;
        *limb = v as u64; // the low 64 bits; the rest carries
        carry = v >> 64;
    }
}

/// The decimal digits of a magnitude (ASCII, most significant first, no leading zeros; empty
/// for zero), written to the end of `buf`; returns where they start.
fn magnitude_digits(m: &[u64; 4], buf: &mut [u8; 80]) -> usize {
    const CHUNK: u64 = 10_000_000_000_000_000_000; // 10^19, the largest power of ten in a u64
    let mut m = *m;
    let mut pos = buf.len();
    // Nearly every DECIMAL column (precision up to 19) fits the low limb: its digits need no
    // 128-bit division (a call into compiler-rt per limb and chunk).
    if let [mut r, 0, 0, 0] = m {
        while r != 0 {
            pos -= 1;
            if let Some(b) = buf.get_mut(pos) {
                *b = b'0' + (r % 10) as u8;
            }
            r /= 10;
        }
        return pos;
    }
    while m != [0; 4] {
        // divide by 10^19, most significant limb first
        let mut rem: u128 = 0;
        for limb in m.iter_mut().rev() {
            let cur = (rem << 64) | u128::from(*limb);
            *limb = (cur / u128::from(CHUNK)) as u64; // below 2^64: rem < 10^19
            rem = cur % u128::from(CHUNK);
        }
        let mut r = rem as u64; // below 10^19
        let last = m == [0; 4];
        for _ in 0..19 {
            if last && r == 0 {
                break;
            }
            pos -= 1;
            if let Some(b) = buf.get_mut(pos) {
                *b = b'0' + (r % 10) as u8;
            }
            r /= 10;
        }
    }
    pos
}

/// The unscaled value of a binary DECIMAL(precision, scale) of `size` bytes
/// ([`binary_size`]) and at most 18 digits, read from `raw` (exactly `size` bytes): what
/// [`Decimal::read`] then [`Decimal::unscaled_i64`] give, without the shape checks and the
/// 256-bit value between them, for a caller that checked the shape once per column (the record
/// path's fused writers, `sluice::avro::fused`).
///
/// # Errors
/// [`Error::Invalid`] for a digit group out of range, as [`Decimal::read`]'s.
#[inline]
pub fn narrow_unscaled(raw: &[u8], precision: u8, scale: u8) -> Result<i64> {
    let negative = raw.first().is_some_and(|b| b & 0x80 == 0);
    let intg = usize::from(precision.saturating_sub(scale));
    let magnitude = read_narrow(raw, intg, usize::from(scale), negative)?;
    // below 10^18: a positive i64
    let v = i64::try_from(magnitude).unwrap_or(i64::MAX);
    Ok(if negative { -v } else { v })
}

/// [`narrow_unscaled`] of a DECIMAL of `size` bytes (1 to 8) loaded big-endian into the low
/// bytes of `word`: for a caller that loads them at once (the record path's fused writers).
///
/// # Errors
/// As [`narrow_unscaled`].
#[inline]
pub fn narrow_unscaled_word(word: u64, size: usize, precision: u8, scale: u8) -> Result<i64> {
    let negative = size > 0 && word >> (8 * size - 1) & 1 == 0;
    let intg = usize::from(precision.saturating_sub(scale));
    let magnitude = word_magnitude(word, size, intg, usize::from(scale), negative)?;
    // below 10^18: a positive i64
    let v = i64::try_from(magnitude).unwrap_or(i64::MAX);
    Ok(if negative { -v } else { v })
}

impl Decimal {
    /// Reads a binary DECIMAL(precision, scale) (`bin2decimal`).
    ///
    /// # Errors
    /// [`Error::Wire`] when truncated; [`Error::Invalid`] for an impossible precision/scale
    /// or a digit group out of range.
    pub fn read(r: &mut Reader<'_>, precision: u8, scale: u8) -> Result<Decimal> {
        check_shape(precision, scale)?;
        let size = binary_size(precision, scale);
        let raw = r.take(size, "DECIMAL")?;
        let first = raw.first().copied().unwrap_or(0x80);
        let negative = first & 0x80 == 0;
        let intg = usize::from(precision - scale);
        let frac = usize::from(scale);
        if precision <= 18 && raw.len() <= 9 {
            let magnitude = read_narrow(raw, intg, frac, negative)?;
            let negative = negative && magnitude != 0;
            return Ok(Decimal { magnitude: [magnitude, 0, 0, 0], negative, precision, scale });
        }
        // Groups are read straight from the event: a negative value has every byte inverted
        // (undone with a mask as wide as the group), and the first byte's top bit is the
        // flipped sign (undone on the first group, which always holds byte 0).
        let mut g = Reader::new(raw);
        let mut magnitude = [0u64; 4];
        // Up to 18 digits the value fits a u64: fold the groups there, the common case
        // (DECIMAL(12,2) is three groups), and widen only for larger precisions.
        let narrow = precision <= 18;
        let mut small = 0u64;
        let mut first_group = true;
        let mut group = |g: &mut Reader<'_>, ndig: usize| -> Result<()> {
            if ndig == 0 {
                return Ok(());
            }
            let n = dig2bytes(ndig);
            let mut v = g.uint_be(n, "DECIMAL group")?;
            let width_mask = u64::MAX >> (64 - 8 * n);
            if negative {
                v ^= width_mask;
            }
            if first_group {
                v ^= 0x80 << (8 * (n - 1));
                first_group = false;
            }
            let limit = POW10.get(ndig).copied().unwrap_or(1_000_000_000);
            if v >= limit {
                return Err(Error::invalid("DECIMAL", format!("digit group {v} has more than {ndig} digits")));
            }
            if narrow {
                small = small * limit + v;
            } else {
                mul_add(&mut magnitude, limit, v);
            }
            Ok(())
        };
        group(&mut g, intg % DIG_PER_DEC)?;
        for _ in 0..intg / DIG_PER_DEC {
            group(&mut g, DIG_PER_DEC)?;
        }
        for _ in 0..frac / DIG_PER_DEC {
            group(&mut g, DIG_PER_DEC)?;
        }
        group(&mut g, frac % DIG_PER_DEC)?;
        if narrow {
            magnitude = [small, 0, 0, 0];
        }
        let negative = negative && magnitude != [0; 4];
        Ok(Decimal { magnitude, negative, precision, scale })
    }

    /// Digits after the decimal point.
    pub fn scale(&self) -> u8 {
        self.scale
    }

    /// Total digits declared (the column's precision, or the digits a parsed literal needs).
    pub fn precision(&self) -> u8 {
        self.precision
    }

    /// True for values below zero (zero is never negative).
    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// True for zero.
    pub fn is_zero(&self) -> bool {
        self.magnitude == [0; 4]
    }

    /// The unscaled integer as minimal big-endian two's-complement bytes (the Avro
    /// `decimal` logical type's encoding): `123.45` with scale 2 is 12345 = `[0x30, 0x39]`.
    pub fn to_unscaled_be_bytes(&self) -> Vec<u8> {
        let mut buf = [0u8; UNSCALED_BE_MAX];
        self.unscaled_be(&mut buf).to_vec()
    }

    /// The unscaled value (`-12.30` is -1230) when it fits an `i64`, as nearly every DECIMAL
    /// column's values do (all of those of up to 18 digits).
    pub fn unscaled_i64(&self) -> Option<i64> {
        match (self.magnitude, i64::try_from(self.magnitude[0])) {
            ([_, 0, 0, 0], Ok(v)) => Some(if self.negative { -v } else { v }),
            _ => None,
        }
    }

    /// [`Decimal::to_unscaled_be_bytes`] without allocating: written into `buf`, returned as the
    /// slice of it that holds them.
    pub fn unscaled_be<'b>(&self, buf: &'b mut [u8; UNSCALED_BE_MAX]) -> &'b [u8] {
        // Nearly every DECIMAL column's values fit an i64: their two's complement bytes come
        // from the bit length, without negating and stripping 33 bytes one at a time.
        if let Some(v) = self.unscaled_i64() {
            let n = twos_complement_len(v);
            let be = v.to_be_bytes();
            let (dst, src) = (buf.get_mut(..n), be.get(8 - n..));
            if let (Some(dst), Some(src)) = (dst, src) {
                dst.copy_from_slice(src);
                return buf.get(..n).unwrap_or(&[]);
            }
        }
        // Big-endian magnitude with one spare leading zero byte for the sign bit.
        buf[0] = 0;
        for (chunk, limb) in buf[1..].chunks_exact_mut(8).zip(self.magnitude.iter().rev()) {
            chunk.copy_from_slice(&limb.to_be_bytes());
        }
        if self.negative {
            // Two's complement: invert and add one.
            for b in buf.iter_mut() {
                *b = !*b;
            }
            for b in buf.iter_mut().rev() {
                let (v, overflow) = b.overflowing_add(1);
                *b = v;
                if !overflow {
                    break;
                }
            }
        }
        // Strip redundant sign bytes.
        let mut start = 0;
        while let (Some(&b), Some(&next)) = (buf.get(start), buf.get(start + 1)) {
            let redundant = (b == 0 && next & 0x80 == 0) || (b == 0xff && next & 0x80 != 0);
            if !redundant {
                break;
            }
            start += 1;
        }
        buf.get(start..).unwrap_or(&[])
    }

    /// The unscaled integer's decimal digits (0..=9), most significant first (empty for zero).
    pub fn unscaled_digits(&self) -> Vec<u8> {
        let mut buf = [0u8; 80];
        let start = magnitude_digits(&self.magnitude, &mut buf);
        buf.get(start..).unwrap_or(&[]).iter().map(|d| d - b'0').collect()
    }

    /// Appends the text form (as [`fmt::Display`] prints it) to `out`, without allocating.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        // Nearly every DECIMAL (precision up to 19, scale up to 19) fits the low limb: its text
        // is written backwards from it, fraction digits, point, integer digits, sign, into one
        // array (a third of the instructions of the digits' string padded and split below).
        if let ([r, 0, 0, 0], true) = (self.magnitude, self.scale <= 19) {
            // sign, 20 integer digits, point, 19 fraction digits
            let mut text = [0u8; 48];
            let mut pos = text.len();
            let mut put = |b: u8| {
                pos -= 1;
                if let Some(t) = text.get_mut(pos) {
                    *t = b;
                }
            };
            let mut r = r;
            for _ in 0..self.scale {
                put(b'0' + (r % 10) as u8);
                r /= 10;
            }
            if self.scale > 0 {
                put(b'.');
            }
            loop {
                put(b'0' + (r % 10) as u8);
                r /= 10;
                if r == 0 {
                    break;
                }
            }
            if self.negative {
                put(b'-');
            }
            out.extend_from_slice(text.get(pos..).unwrap_or(&[]));
            return;
        }
        let mut buf = [0u8; 80];
        let start = magnitude_digits(&self.magnitude, &mut buf);
        let digits = buf.get(start..).unwrap_or(&[]);
        let scale = usize::from(self.scale);
        // Built in an array and appended in one copy (a push per digit checks the capacity
        // per digit). Pad with leading zeros to at least one integer digit.
        let width = digits.len().max(scale + 1);
        let int_len = width - scale;
        let pad = width - digits.len();
        let mut text = [b'0'; 96];
        let mut len = 0;
        if let (true, Some(t)) = (self.negative, text.first_mut()) {
            *t = b'-';
            len = 1;
        }
        for (i, d) in std::iter::repeat_n(b'0', pad).chain(digits.iter().copied()).enumerate() {
            if i == int_len {
                if let Some(t) = text.get_mut(len) {
                    *t = b'.';
                }
                len += 1;
            }
            if let Some(t) = text.get_mut(len) {
                *t = d;
            }
            len += 1;
        }
        out.extend_from_slice(text.get(..len).unwrap_or(&text));
    }
}

impl fmt::Display for Decimal {
    /// Prints as MySQL does: every scale digit kept (`5.00`), `-0.50`, no point for scale 0.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = Vec::with_capacity(72);
        self.write_to(&mut s);
        f.write_str(std::str::from_utf8(&s).unwrap_or_default())
    }
}

impl FromStr for Decimal {
    type Err = Error;

    /// Parses `[-+]digits[.digits]`: see [`Decimal::from_ascii`].
    fn from_str(s: &str) -> Result<Decimal> {
        Decimal::from_ascii(s.as_bytes())
    }
}

impl Decimal {
    /// Parses `[-+]digits[.digits]` (as a server prints a DECIMAL: a snapshot's rows carry them
    /// as text); the scale is the number of fraction digits written, the precision the
    /// significant integer digits plus the scale (at least 1).
    ///
    /// # Errors
    /// Anything else, or more digits than a DECIMAL holds.
    pub fn from_ascii(s: &[u8]) -> Result<Decimal> {
        let bad = || Error::invalid("DECIMAL", format!("not a decimal number: {:?}", String::from_utf8_lossy(s)));
        let (negative, body) = match s.first() {
            Some(b'-') => (true, s.get(1..).unwrap_or_default()),
            Some(b'+') => (false, s.get(1..).unwrap_or_default()),
            _ => (false, s),
        };
        let (int, frac) = match body.iter().position(|&b| b == b'.') {
            // a point needs a digit after it
            Some(at) => match (body.get(..at), body.get(at + 1..)) {
                (Some(i), Some(f)) if !f.is_empty() => (i, f),
                _ => return Err(bad()),
            },
            None => (body, &[][..]),
        };
        if (int.is_empty() && frac.is_empty())
            || !int.iter().all(u8::is_ascii_digit)
            || !frac.iter().all(u8::is_ascii_digit)
        {
            return Err(bad());
        }
        let int_sig = int.len() - int.iter().take_while(|&&b| b == b'0').count();
        let scale = u8::try_from(frac.len()).map_err(|_| bad())?;
        let precision = u8::try_from((int_sig + frac.len()).max(1)).map_err(|_| bad())?;
        check_shape(precision, scale)?;
        let mut magnitude = [0u64; 4];
        let digits = int.iter().chain(frac).map(|b| u64::from(b - b'0'));
        if int.len() + frac.len() <= 19 {
            // below 10^19 < 2^64: one word (most DECIMALs; the limbs' multiply per digit was
            // a snapshot's costliest value)
            magnitude[0] = digits.fold(0, |acc, d| acc * 10 + d);
        } else {
            // at most 65 significant digits (check_shape), so the magnitude stays below 10^65
            for d in digits {
                mul_add(&mut magnitude, 10, d);
            }
        }
        let negative = negative && magnitude != [0; 4];
        Ok(Decimal { magnitude, negative, precision, scale })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// MySQL's `decimal2bin` for a digit string, for tests.
    pub(crate) fn encode(negative: bool, int: &str, frac: &str, precision: u8, scale: u8) -> Vec<u8> {
        let intg = usize::from(precision - scale);
        let fr = usize::from(scale);
        let int = format!("{:0>w$}", int, w = intg);
        let frac = format!("{:0<w$}", frac, w = fr);
        let mut out = Vec::new();
        let mut put = |digs: &str| {
            if digs.is_empty() {
                return;
            }
            let v: u32 = digs.parse().unwrap();
            let n = dig2bytes(digs.len());
            out.extend_from_slice(&v.to_be_bytes()[4 - n..]);
        };
        let lead = intg % 9;
        put(&int[..lead]);
        for c in int.as_bytes()[lead..].chunks(9) {
            put(std::str::from_utf8(c).unwrap());
        }
        for c in frac.as_bytes().chunks(9) {
            put(std::str::from_utf8(c).unwrap());
        }
        out[0] ^= 0x80;
        if negative {
            for b in out.iter_mut() {
                *b = !*b;
            }
        }
        out
    }

    fn dec(bytes: &[u8], p: u8, s: u8) -> Decimal {
        let mut r = Reader::new(bytes);
        let d = Decimal::read(&mut r, p, s).unwrap();
        assert!(r.is_empty());
        d
    }

    #[test]
    fn mysql_manual_example() {
        // 1234567890.1234 as DECIMAL(14,4): the example from decimal.cc's comment.
        let bytes = [0x81, 0x0D, 0xFB, 0x38, 0xD2, 0x04, 0xD2];
        assert_eq!(dec(&bytes, 14, 4).to_string(), "1234567890.1234");
        // -1234567890.1234
        let neg: Vec<u8> = bytes.iter().map(|b| !b).collect();
        assert_eq!(dec(&neg, 14, 4).to_string(), "-1234567890.1234");
    }

    #[test]
    fn display_like_mysql() {
        assert_eq!(dec(&encode(false, "5", "", 10, 2), 10, 2).to_string(), "5.00");
        assert_eq!(dec(&encode(true, "0", "5", 10, 2), 10, 2).to_string(), "-0.50");
        assert_eq!(dec(&encode(false, "0", "", 10, 2), 10, 2).to_string(), "0.00");
        assert_eq!(dec(&encode(false, "42", "", 5, 0), 5, 0).to_string(), "42");
        assert_eq!(dec(&encode(false, "", "05", 2, 2), 2, 2).to_string(), "0.05");
        assert_eq!(dec(&encode(true, "0", "", 5, 0), 5, 0).to_string(), "0");
        assert_eq!("0.001".parse::<Decimal>().unwrap().to_string(), "0.001");
        assert_eq!("-12.30".parse::<Decimal>().unwrap().to_string(), "-12.30");
        assert!("1.".parse::<Decimal>().is_err());
        assert!("abc".parse::<Decimal>().is_err());
        assert!("".parse::<Decimal>().is_err());
        // the one-word way (up to 19 digits) and the limbs' (20 on) at their edge
        for text in ["9999999999999999999", "-999999999999999999.9", "18446744073709551615", "-1844674407370955161.6"] {
            assert_eq!(text.parse::<Decimal>().unwrap().to_string(), text);
        }
        assert_eq!("00000000000000000000000001.50".parse::<Decimal>().unwrap().to_string(), "1.50");
        assert_eq!("-.5".parse::<Decimal>().unwrap().to_string(), "-0.5");
        for bad in ["1.2.3", "+", "-", ".", "1e5", " 1", "1 ", "--1"] {
            assert!(bad.parse::<Decimal>().is_err(), "{bad}");
        }
        assert!(Decimal::from_ascii(b"1\xff").is_err());
    }

    #[test]
    fn bad_groups_and_shapes() {
        // 999999999 + 1 does not fit a 9-digit group
        let mut b = encode(false, "0", "", 9, 0);
        b.copy_from_slice(&[0x80 | 0x3b, 0x9a, 0xca, 0x00]);
        assert!(Decimal::read(&mut Reader::new(&b), 9, 0).is_err());
        assert!(Decimal::read(&mut Reader::new(&[0x80]), 2, 3).is_err());
        assert!(Decimal::read(&mut Reader::new(&[0x80]), 10, 2).is_err());
    }

    #[test]
    fn unscaled_bytes() {
        let d: Decimal = "123.45".parse().unwrap();
        assert_eq!(d.to_unscaled_be_bytes(), vec![0x30, 0x39]);
        let d: Decimal = "-1.28".parse().unwrap();
        assert_eq!(d.to_unscaled_be_bytes(), vec![0x80]);
        let d: Decimal = "1.28".parse().unwrap();
        assert_eq!(d.to_unscaled_be_bytes(), vec![0x00, 0x80]);
        let d: Decimal = "0.00".parse().unwrap();
        assert_eq!(d.to_unscaled_be_bytes(), vec![0x00]);
    }

    /// The fast path for values that fit an i64 and the general one agree at every byte
    /// boundary of the two's complement, and past i64 where the general one takes over.
    #[test]
    fn unscaled_bytes_at_the_boundaries() {
        let mut edges: Vec<i128> = vec![0, i128::from(i64::MAX), -i128::from(i64::MAX), i128::from(u64::MAX), 1 << 70];
        for shift in [7, 8, 15, 16, 31, 32, 55, 56, 62, 63] {
            let p = 1i128 << shift;
            edges.extend([p - 1, p, p + 1, -p - 1, -p, -p + 1]);
        }
        for v in edges {
            let d: Decimal = v.to_string().parse().unwrap();
            assert_eq!(d.to_unscaled_be_bytes(), minimal_i128(v), "{v}");
        }
    }

    fn minimal_i128(v: i128) -> Vec<u8> {
        let b = v.to_be_bytes();
        let mut start = 0;
        while start < 15 {
            let (x, n) = (b[start], b[start + 1]);
            if (x == 0 && n & 0x80 == 0) || (x == 0xff && n & 0x80 != 0) {
                start += 1;
            } else {
                break;
            }
        }
        b[start..].to_vec()
    }

    proptest! {
        /// The unscaled value from the bytes loaded as one word is the one from the bytes, for
        /// any bytes of any narrow shape of up to 8 bytes (a digit group out of range: both errors).
        #[test]
        fn narrow_from_a_word_equals_narrow_from_bytes(p in 1u8..=18, s_frac in 0u8..=18, raw in proptest::collection::vec(any::<u8>(), 9)) {
            let s = s_frac.min(p);
            let size = binary_size(p, s);
            prop_assume!(size <= 8);
            let raw = &raw[..size];
            let word = raw.iter().fold(0u64, |acc, &b| acc << 8 | u64::from(b));
            let (a, b) = (narrow_unscaled(raw, p, s).map_err(|e| e.to_string()), narrow_unscaled_word(word, size, p, s).map_err(|e| e.to_string()));
            prop_assert_eq!(a, b);
        }

        #[test]
        fn binary_round_trip(p in 1u8..=65, s_frac in 0u8..=30, neg: bool, seed in proptest::collection::vec(0u8..10, 65)) {
            let s = s_frac.min(p);
            let intg = usize::from(p - s);
            let int: String = seed[..intg].iter().map(|d| char::from(b'0' + d)).collect();
            let frac: String = seed[intg..usize::from(p)].iter().map(|d| char::from(b'0' + d)).collect();
            let bytes = encode(neg, &int, &frac, p, s);
            prop_assert_eq!(bytes.len(), binary_size(p, s));
            let d = dec(&bytes, p, s);
            let int_trim = int.trim_start_matches('0');
            let zero = int_trim.is_empty() && frac.bytes().all(|b| b == b'0');
            let expect = format!("{}{}{}{}", if neg && !zero { "-" } else { "" },
                if int_trim.is_empty() { "0" } else { int_trim },
                if s > 0 { "." } else { "" }, frac);
            prop_assert_eq!(d.to_string(), expect.clone());
            let back: Decimal = expect.parse().unwrap();
            prop_assert_eq!(back.to_string(), expect);
            prop_assert_eq!(back.unscaled_digits(), d.unscaled_digits());
        }

        #[test]
        fn unscaled_matches_i128(v in any::<i64>(), scale in 0u8..10) {
            let v = i128::from(v) * 1_000_003;
            let abs = v.unsigned_abs().to_string();
            let abs = format!("{:0>w$}", abs, w = usize::from(scale) + 1);
            let (i, f) = abs.split_at(abs.len() - usize::from(scale));
            let text = format!("{}{}{}{}", if v < 0 { "-" } else { "" }, i, if scale > 0 { "." } else { "" }, f);
            let d: Decimal = text.parse().unwrap();
            prop_assert_eq!(d.to_unscaled_be_bytes(), minimal_i128(v));
        }

        /// Values whose magnitude fits a u64 take the short way to text, up to scale 19 and
        /// at any precision; at scale 20 the general way: both print every digit and the sign.
        #[test]
        fn text_of_u64_magnitudes(v in prop_oneof![any::<u64>(), 0u64..1000, Just(u64::MAX)], scale in 0u8..=20, neg: bool) {
            let abs = format!("{:0>w$}", v, w = usize::from(scale) + 1);
            let (i, f) = abs.split_at(abs.len() - usize::from(scale));
            let text = format!("{}{}{}{}", if neg && v != 0 { "-" } else { "" }, i, if scale > 0 { "." } else { "" }, f);
            let d: Decimal = text.parse().unwrap();
            prop_assert_eq!(d.to_string(), text.clone());
            let mut out = b"x".to_vec();
            d.write_to(&mut out);
            prop_assert_eq!(&out[1..], text.as_bytes());
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40), p in 0u8..80, s in 0u8..40) {
            let _ = Decimal::read(&mut Reader::new(&bytes), p, s);
        }
    }
}
