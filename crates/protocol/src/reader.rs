//! `Reader<'a>`: a checked, zero-copy cursor over little-endian wire bytes.
//!
//! Every read returns `Result` and borrows from the input; there are no unchecked variants.
//! A length read from the input is only ever used after [`Reader::take`] has checked it against
//! what remains, so a corrupt length can neither panic nor make us allocate.
//! MySQL integers are little-endian except where a format says otherwise (DECIMAL, DATETIME2,
//! TIME2 and TIMESTAMP2 in the binlog are big-endian: see the `_be` readers).

use crate::error::{Error, Result};

/// A checked cursor over a byte slice.
///
/// It keeps the unread rest and the input's length (the position is their difference), so a
/// read checks one length against what remains and splits there: a position into the whole
/// input cost an overflow check and a range check of both ends per read, on the record path's
/// 30-odd reads per row change.
#[derive(Debug, Clone, Copy)]
pub struct Reader<'a> {
    rest: &'a [u8],
    len: usize,
}

macro_rules! read_le {
    ($name:ident, $ty:ty, $n:expr) => {
        #[doc = concat!("Reads a little-endian `", stringify!($ty), "`.")]
        #[inline]
        pub fn $name(&mut self, what: &'static str) -> Result<$ty> {
            let b = self.array::<$n>(what)?;
            Ok(<$ty>::from_le_bytes(b))
        }
    };
}

impl<'a> Reader<'a> {
    /// A cursor at the start of `buf`.
    #[inline]
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { rest: buf, len: buf.len() }
    }

    /// Bytes consumed so far.
    #[inline]
    pub fn position(&self) -> usize {
        self.len - self.rest.len()
    }

    /// Bytes left to read.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    /// True when nothing is left.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The unread rest, without consuming it.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }

    /// Takes exactly `n` bytes.
    ///
    /// # Errors
    /// [`Error::Truncated`] when fewer than `n` bytes remain.
    #[inline]
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        match self.rest.split_at_checked(n) {
            Some((s, rest)) => {
                self.rest = rest;
                Ok(s)
            }
            None => Err(Error::Truncated { what, needed: n, remaining: self.remaining() }),
        }
    }

    /// Takes `n` bytes where `n` came from the input as a `u64`.
    ///
    /// # Errors
    /// [`Error::Truncated`] when fewer than `n` bytes remain.
    #[inline]
    pub fn take_u64(&mut self, n: u64, what: &'static str) -> Result<&'a [u8]> {
        match usize::try_from(n) {
            Ok(n) => self.take(n, what),
            Err(_) => Err(Error::Truncated { what, needed: usize::MAX, remaining: self.remaining() }),
        }
    }

    /// Takes everything that is left.
    #[inline]
    pub fn take_rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.rest)
    }

    /// Skips `n` bytes.
    ///
    /// # Errors
    /// [`Error::Truncated`] when fewer than `n` bytes remain.
    #[inline]
    pub fn skip(&mut self, n: usize, what: &'static str) -> Result<()> {
        self.take(n, what).map(|_| ())
    }

    /// Reads a fixed-size array.
    ///
    /// # Errors
    /// [`Error::Truncated`] when fewer than `N` bytes remain.
    #[inline]
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    /// Reads one byte.
    ///
    /// # Errors
    /// [`Error::Truncated`] at the end of input.
    #[inline]
    pub fn u8(&mut self, what: &'static str) -> Result<u8> {
        match self.rest.split_first() {
            Some((&b, rest)) => {
                self.rest = rest;
                Ok(b)
            }
            None => Err(Error::Truncated { what, needed: 1, remaining: 0 }),
        }
    }

    read_le!(u16, u16, 2);
    read_le!(u32, u32, 4);
    read_le!(u64, u64, 8);
    read_le!(i8, i8, 1);
    read_le!(i16, i16, 2);
    read_le!(i32, i32, 4);
    read_le!(i64, i64, 8);
    read_le!(f32, f32, 4);
    read_le!(f64, f64, 8);

    /// Reads an unsigned little-endian integer of `n` bytes (`n` <= 8): 3-, 5-, 6- and 7-byte
    /// fields are common in the binlog.
    ///
    /// # Errors
    /// [`Error::Truncated`] when fewer than `n` bytes remain; [`Error::Invalid`] when `n` > 8.
    #[inline]
    pub fn uint_le(&mut self, n: usize, what: &'static str) -> Result<u64> {
        if n > 8 {
            return Err(Error::Invalid { what, reason: format!("integer width {n} > 8") });
        }
        let s = self.take(n, what)?;
        Ok(s.iter().rev().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    /// Reads an unsigned big-endian integer of `n` bytes (`n` <= 8).
    ///
    /// # Errors
    /// [`Error::Truncated`] when fewer than `n` bytes remain; [`Error::Invalid`] when `n` > 8.
    #[inline]
    pub fn uint_be(&mut self, n: usize, what: &'static str) -> Result<u64> {
        if n > 8 {
            return Err(Error::Invalid { what, reason: format!("integer width {n} > 8") });
        }
        let s = self.take(n, what)?;
        Ok(s.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    /// Reads a length-encoded integer (`int<lenenc>`): 1 byte below 0xfb, 0xfc + 2 bytes,
    /// 0xfd + 3 bytes, 0xfe + 8 bytes. 0xfb (NULL in result rows) and 0xff are not integers.
    ///
    /// # Errors
    /// [`Error::Truncated`], or [`Error::Invalid`] for the 0xfb/0xff markers.
    #[inline]
    pub fn lenenc_int(&mut self, what: &'static str) -> Result<u64> {
        match self.u8(what)? {
            b @ 0..=0xfa => Ok(u64::from(b)),
            0xfc => self.uint_le(2, what),
            0xfd => self.uint_le(3, what),
            0xfe => self.u64(what),
            b => Err(Error::Invalid { what, reason: format!("0x{b:02x} is not a length-encoded integer") }),
        }
    }

    /// Reads a length-encoded integer where 0xfb means NULL (text result rows).
    ///
    /// # Errors
    /// As [`Reader::lenenc_int`].
    #[inline]
    pub fn lenenc_int_or_null(&mut self, what: &'static str) -> Result<Option<u64>> {
        if let Some((0xfb, rest)) = self.rest.split_first() {
            self.rest = rest;
            return Ok(None);
        }
        self.lenenc_int(what).map(Some)
    }

    /// Reads a length-encoded byte string (`string<lenenc>`).
    ///
    /// # Errors
    /// [`Error::Truncated`] when the length exceeds what remains.
    #[inline]
    pub fn lenenc_bytes(&mut self, what: &'static str) -> Result<&'a [u8]> {
        let n = self.lenenc_int(what)?;
        self.take_u64(n, what)
    }

    /// Reads a NUL-terminated string (`string<NUL>`), without the NUL.
    ///
    /// # Errors
    /// [`Error::Truncated`] when no NUL follows.
    #[inline]
    pub fn nul_bytes(&mut self, what: &'static str) -> Result<&'a [u8]> {
        let rest = self.rest;
        match rest.iter().position(|&b| b == 0) {
            Some(n) => {
                let s = rest.get(..n).unwrap_or(&[]);
                self.rest = rest.get(n + 1..).unwrap_or(&[]);
                Ok(s)
            }
            None => Err(Error::Truncated { what, needed: rest.len() + 1, remaining: rest.len() }),
        }
    }

    /// Reads a string prefixed by a one-byte length.
    ///
    /// # Errors
    /// [`Error::Truncated`].
    #[inline]
    pub fn u8_prefixed(&mut self, what: &'static str) -> Result<&'a [u8]> {
        let n = self.u8(what)?;
        self.take(usize::from(n), what)
    }
}

/// Appends a length-encoded integer to `out` (the inverse of [`Reader::lenenc_int`]).
pub fn put_lenenc_int(out: &mut Vec<u8>, v: u64) {
    match v {
        0..=0xfa => out.push(v as u8),
        0xfb..=0xffff => {
            out.push(0xfc);
            out.extend_from_slice(&(v as u16).to_le_bytes());
        }
        0x1_0000..=0xff_ffff => {
            out.push(0xfd);
            out.extend_from_slice(&(v as u32).to_le_bytes()[..3]);
        }
        _ => {
            out.push(0xfe);
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn truncation_is_an_error_not_a_panic() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u16("a").unwrap(), 0x0201);
        let e = r.u32("b").unwrap_err();
        assert_eq!(e, Error::Truncated { what: "b", needed: 4, remaining: 1 });
        // a failed read consumes nothing
        assert_eq!(r.u8("c").unwrap(), 3);
        assert!(r.take(usize::MAX, "huge").is_err());
    }

    #[test]
    fn odd_width_integers() {
        let mut r = Reader::new(&[0x01, 0x02, 0x03, 0x01, 0x02, 0x03]);
        assert_eq!(r.uint_le(3, "le").unwrap(), 0x030201);
        assert_eq!(r.uint_be(3, "be").unwrap(), 0x010203);
    }

    #[test]
    fn lenenc_markers() {
        assert_eq!(Reader::new(&[0xfa]).lenenc_int("x").unwrap(), 250);
        assert_eq!(Reader::new(&[0xfc, 0x34, 0x12]).lenenc_int("x").unwrap(), 0x1234);
        assert_eq!(Reader::new(&[0xfd, 1, 2, 3]).lenenc_int("x").unwrap(), 0x030201);
        assert!(Reader::new(&[0xff]).lenenc_int("x").is_err());
        assert_eq!(Reader::new(&[0xfb]).lenenc_int_or_null("x").unwrap(), None);
        // a length pointing past the end is refused before any allocation
        assert!(Reader::new(&[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]).lenenc_bytes("x").is_err());
    }

    #[test]
    fn nul_terminated() {
        let mut r = Reader::new(b"abc\0de");
        assert_eq!(r.nul_bytes("s").unwrap(), b"abc");
        assert!(r.nul_bytes("s").is_err());
    }

    proptest! {
        #[test]
        fn lenenc_round_trip(v in any::<u64>()) {
            let mut out = Vec::new();
            put_lenenc_int(&mut out, v);
            let mut r = Reader::new(&out);
            prop_assert_eq!(r.lenenc_int("v").unwrap(), v);
            prop_assert!(r.is_empty());
        }

        #[test]
        fn reads_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64), n in 0usize..100) {
            let mut r = Reader::new(&bytes);
            let _ = r.lenenc_bytes("x");
            let _ = r.uint_be(n % 9, "y");
            let _ = r.take(n, "z");
            let _ = r.nul_bytes("w");
        }
    }
}
