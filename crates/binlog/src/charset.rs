//! Collation ids and character sets: which charset a column's bytes are in, and turning
//! them into text.
//!
//! TABLE_MAP optional metadata gives a *collation* id per string column (`binlog_row_metadata`
//! FULL, or MINIMAL since MySQL 8.0.1 / MariaDB 10.5). [`charset_of`] maps it to a
//! [`Charset`]; [`decode_text`] decodes bytes with it: UTF-8 flavours are validated, legacy
//! single- and multi-byte charsets go through `encoding_rs`, UCS-2/UTF-16/UTF-32 are decoded
//! by hand. MySQL's `latin1` is really Windows-1252 and is decoded as such.
//!
//! Id ranges: 1..=250 are shared by MySQL and MariaDB (MySQL 8.0 adds `gb18030` at 248..=250
//! and `utf8mb4_0900_*` and friends at 255..=323); MariaDB adds the UCA 5.2.0 extras at
//! 576..=767, `_nopad_` variants at 1024 + the base id, and UCA 14.0.0 collations from 2048
//! (MariaDB 10.10+: 256 ids per charset, utf8mb3, utf8mb4, ucs2, utf16, utf32 in that order).
//!
//! References: `SHOW COLLATION` on MySQL 8.0/8.4 and MariaDB 11.4;
//! <https://dev.mysql.com/doc/refman/8.0/en/charset-mysql.html>,
//! <https://mariadb.com/kb/en/supported-character-sets-and-collations/>.

use std::borrow::Cow;
use std::fmt;

/// The `binary` pseudo-collation.
pub const BINARY_COLLATION: u16 = 63;

/// A character set, by MySQL's name for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Charset {
    /// `armscii8`.
    Armscii8,
    /// `ascii`.
    Ascii,
    /// `big5`.
    Big5,
    /// `binary`.
    Binary,
    /// `cp1250`.
    Cp1250,
    /// `cp1251`.
    Cp1251,
    /// `cp1256`.
    Cp1256,
    /// `cp1257`.
    Cp1257,
    /// `cp850`.
    Cp850,
    /// `cp852`.
    Cp852,
    /// `cp866`.
    Cp866,
    /// `cp932`.
    Cp932,
    /// `dec8`.
    Dec8,
    /// `eucjpms`.
    Eucjpms,
    /// `euckr`.
    Euckr,
    /// `gb18030`.
    Gb18030,
    /// `gb2312`.
    Gb2312,
    /// `gbk`.
    Gbk,
    /// `geostd8`.
    Geostd8,
    /// `greek`.
    Greek,
    /// `hebrew`.
    Hebrew,
    /// `hp8`.
    Hp8,
    /// `keybcs2`.
    Keybcs2,
    /// `koi8r`.
    Koi8r,
    /// `koi8u`.
    Koi8u,
    /// `latin1`.
    Latin1,
    /// `latin2`.
    Latin2,
    /// `latin5`.
    Latin5,
    /// `latin7`.
    Latin7,
    /// `macce`.
    Macce,
    /// `macroman`.
    Macroman,
    /// `sjis`.
    Sjis,
    /// `swe7`.
    Swe7,
    /// `tis620`.
    Tis620,
    /// `ucs2`.
    Ucs2,
    /// `ujis`.
    Ujis,
    /// `utf16`.
    Utf16,
    /// `utf16le`.
    Utf16le,
    /// `utf32`.
    Utf32,
    /// `utf8mb3`.
    Utf8mb3,
    /// `utf8mb4`.
    Utf8mb4,
}

impl Charset {
    /// MySQL's name (`utf8mb4`, `latin1`, ...).
    pub fn name(self) -> &'static str {
        use Charset::*;
        match self {
            Armscii8 => "armscii8",
            Ascii => "ascii",
            Big5 => "big5",
            Binary => "binary",
            Cp1250 => "cp1250",
            Cp1251 => "cp1251",
            Cp1256 => "cp1256",
            Cp1257 => "cp1257",
            Cp850 => "cp850",
            Cp852 => "cp852",
            Cp866 => "cp866",
            Cp932 => "cp932",
            Dec8 => "dec8",
            Eucjpms => "eucjpms",
            Euckr => "euckr",
            Gb18030 => "gb18030",
            Gb2312 => "gb2312",
            Gbk => "gbk",
            Geostd8 => "geostd8",
            Greek => "greek",
            Hebrew => "hebrew",
            Hp8 => "hp8",
            Keybcs2 => "keybcs2",
            Koi8r => "koi8r",
            Koi8u => "koi8u",
            Latin1 => "latin1",
            Latin2 => "latin2",
            Latin5 => "latin5",
            Latin7 => "latin7",
            Macce => "macce",
            Macroman => "macroman",
            Sjis => "sjis",
            Swe7 => "swe7",
            Tis620 => "tis620",
            Ucs2 => "ucs2",
            Ujis => "ujis",
            Utf16 => "utf16",
            Utf16le => "utf16le",
            Utf32 => "utf32",
            Utf8mb3 => "utf8mb3",
            Utf8mb4 => "utf8mb4",
        }
    }

    /// The `encoding_rs` encoding for charsets it covers (None for the UTF flavours decoded
    /// by hand, `binary`, `ascii`, and charsets it does not know).
    fn encoding(self) -> Option<&'static encoding_rs::Encoding> {
        use encoding_rs as e;
        use Charset::*;
        Some(match self {
            Big5 => e::BIG5,
            Latin1 => e::WINDOWS_1252,
            Latin2 => e::ISO_8859_2,
            Koi8r => e::KOI8_R,
            Koi8u => e::KOI8_U,
            Ujis | Eucjpms => e::EUC_JP,
            Sjis | Cp932 => e::SHIFT_JIS,
            Cp1250 => e::WINDOWS_1250,
            Cp1251 => e::WINDOWS_1251,
            Cp1256 => e::WINDOWS_1256,
            Cp1257 => e::WINDOWS_1257,
            Hebrew => e::ISO_8859_8,
            Tis620 => e::WINDOWS_874,
            Euckr => e::EUC_KR,
            Latin7 => e::ISO_8859_13,
            Gb2312 | Gbk => e::GBK,
            Gb18030 => e::GB18030,
            Greek => e::ISO_8859_7,
            Latin5 => e::WINDOWS_1254,
            Cp866 => e::IBM866,
            Macroman => e::MACINTOSH,
            _ => return None,
        })
    }
}

impl fmt::Display for Charset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The character set of a collation id, or None for ids this table does not know.
pub const fn charset_of(collation: u16) -> Option<Charset> {
    use Charset::*;
    Some(match collation {
        1 => Big5,
        2 => Latin2,
        3 => Dec8,
        4 => Cp850,
        5 => Latin1,
        6 => Hp8,
        7 => Koi8r,
        8 => Latin1,
        9 => Latin2,
        10 => Swe7,
        11 => Ascii,
        12 => Ujis,
        13 => Sjis,
        14 => Cp1251,
        15 => Latin1,
        16 => Hebrew,
        18 => Tis620,
        19 => Euckr,
        20 => Latin7,
        21 => Latin2,
        22 => Koi8u,
        23 => Cp1251,
        24 => Gb2312,
        25 => Greek,
        26 => Cp1250,
        27 => Latin2,
        28 => Gbk,
        29 => Cp1257,
        30 => Latin5,
        31 => Latin1,
        32 => Armscii8,
        33 => Utf8mb3,
        34 => Cp1250,
        35 => Ucs2,
        36 => Cp866,
        37 => Keybcs2,
        38 => Macce,
        39 => Macroman,
        40 => Cp852,
        41..=42 => Latin7,
        43 => Macce,
        44 => Cp1250,
        45..=46 => Utf8mb4,
        47..=49 => Latin1,
        50..=52 => Cp1251,
        53 => Macroman,
        54..=55 => Utf16,
        56 => Utf16le,
        57 => Cp1256,
        58..=59 => Cp1257,
        60..=61 => Utf32,
        62 => Utf16le,
        63 => Binary,
        64 => Armscii8,
        65 => Ascii,
        66 => Cp1250,
        67 => Cp1256,
        68 => Cp866,
        69 => Dec8,
        70 => Greek,
        71 => Hebrew,
        72 => Hp8,
        73 => Keybcs2,
        74 => Koi8r,
        75 => Koi8u,
        76 => Utf8mb3,
        77 => Latin2,
        78 => Latin5,
        79 => Latin7,
        80 => Cp850,
        81 => Cp852,
        82 => Swe7,
        83 => Utf8mb3,
        84 => Big5,
        85 => Euckr,
        86 => Gb2312,
        87 => Gbk,
        88 => Sjis,
        89 => Tis620,
        90 => Ucs2,
        91 => Ujis,
        92..=93 => Geostd8,
        94 => Latin1,
        95..=96 => Cp932,
        97..=98 => Eucjpms,
        99 => Cp1250,
        101..=124 => Utf16,
        128..=151 => Ucs2,
        159 => Ucs2,
        160..=183 => Utf32,
        192..=215 => Utf8mb3,
        223 => Utf8mb3,
        224..=247 => Utf8mb4,
        248..=250 => Gb18030,

        // MySQL 8.0: utf8mb4_0900_* and the other UCA 9.0.0 collations.
        255..=323 => Utf8mb4,
        // MariaDB: UCA 5.2.0 extras (croatian, myanmar, thai_520_w2, ...).
        576..=607 => Utf8mb3,
        608..=639 => Utf8mb4,
        640..=671 => Ucs2,
        672..=703 => Utf16,
        736..=767 => Utf32,
        // MariaDB: NO PAD variants are 1024 + the PAD SPACE collation's id.
        1025..=2047 => return charset_of(collation - 1024),
        // MariaDB 10.10+: UCA 14.0.0 collations, 256 ids per charset.
        2048..=2303 => Utf8mb3,
        2304..=2559 => Utf8mb4,
        2560..=2815 => Ucs2,
        2816..=3071 => Utf16,
        3072..=3327 => Utf32,
        _ => return None,
    })
}

/// Why bytes could not be turned into text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TextError {
    /// The collation is `binary`: the bytes are not text.
    #[error("binary data")]
    Binary,
    /// The bytes are not valid in the charset.
    #[error("invalid {charset} text at byte {offset}")]
    Invalid {
        /// The charset's name.
        charset: &'static str,
        /// The first bad byte's offset (0 when the decoder does not say).
        offset: usize,
    },
    /// A charset this decoder cannot convert (and the bytes are not plain ASCII).
    #[error("no decoder for charset {charset}")]
    Unsupported {
        /// The charset's name.
        charset: &'static str,
    },
}

fn utf8<'a>(bytes: &'a [u8], charset: &'static str) -> Result<Cow<'a, str>, TextError> {
    std::str::from_utf8(bytes).map(Cow::Borrowed).map_err(|e| TextError::Invalid { charset, offset: e.valid_up_to() })
}

/// Decodes UTF-16 (big- or little-endian) or UCS-2 (no surrogates allowed).
fn utf16(bytes: &[u8], big_endian: bool, ucs2: bool, charset: &'static str) -> Result<String, TextError> {
    let bad = |offset| TextError::Invalid { charset, offset };
    if bytes.len() % 2 != 0 {
        return Err(bad(bytes.len().saturating_sub(1)));
    }
    let units = bytes.chunks_exact(2).map(|c| match (c.first(), c.get(1)) {
        (Some(&a), Some(&b)) if big_endian => u16::from_be_bytes([a, b]),
        (Some(&a), Some(&b)) => u16::from_le_bytes([a, b]),
        _ => 0,
    });
    let mut out = String::with_capacity(bytes.len());
    for (i, c) in char::decode_utf16(units).enumerate() {
        match c {
            Ok(c) if !(ucs2 && u32::from(c) > 0xffff) => out.push(c),
            _ => return Err(bad(i * 2)),
        }
    }
    Ok(out)
}

fn utf32(bytes: &[u8], charset: &'static str) -> Result<String, TextError> {
    let mut out = String::with_capacity(bytes.len() / 4);
    if bytes.len() % 4 != 0 {
        return Err(TextError::Invalid { charset, offset: bytes.len() - bytes.len() % 4 });
    }
    for (i, c) in bytes.chunks_exact(4).enumerate() {
        let mut b = [0u8; 4];
        b.copy_from_slice(c);
        match char::from_u32(u32::from_be_bytes(b)) {
            Some(ch) => out.push(ch),
            None => return Err(TextError::Invalid { charset, offset: i * 4 }),
        }
    }
    Ok(out)
}

/// Whether bytes below 0x80 in `collation`'s charset are the ASCII characters they are in
/// UTF-8: true for every charset but `binary` and the UCS-2/UTF-16/UTF-32 family. For such a
/// charset, [`decode_text`] returns ASCII bytes as they are, so a caller that has seen they are
/// ASCII may use them without it.
pub fn ascii_compatible(collation: Option<u16>) -> bool {
    match collation {
        None => true,
        // asked for every text value written: one bit of a table made from `charset_of` at
        // compile time, not its search through the ranges of ids
        Some(c) => match ASCII_INCOMPATIBLE.get(usize::from(c) / 64) {
            Some(bits) => bits >> (c % 64) & 1 == 0,
            None => !ascii_incompatible(charset_of(c)),
        },
    }
}

/// A set bit for each collation id below 4096 whose charset is not ASCII-compatible.
// (indexed in a constant: an index out of range would fail the build, not panic at run time)
#[allow(clippy::indexing_slicing)]
const ASCII_INCOMPATIBLE: [u64; 64] = {
    let mut table = [0u64; 64];
    let mut id = 0;
    while id < 64 * table.len() {
        if ascii_incompatible(charset_of(id as u16)) {
            table[id / 64] |= 1 << (id % 64);
        }
        id += 1;
    }
    table
};

/// `binary` and the UCS-2/UTF-16/UTF-32 family: ASCII bytes are not their own text there.
const fn ascii_incompatible(cs: Option<Charset>) -> bool {
    matches!(cs, Some(Charset::Binary | Charset::Ucs2 | Charset::Utf16 | Charset::Utf16le | Charset::Utf32))
}

/// Decodes a column's bytes as text in the charset of `collation`.
///
/// Unknown collations and `None` (the server did not log charsets) are read as UTF-8.
///
/// # Errors
/// [`TextError::Binary`] for the `binary` collation; [`TextError::Invalid`] naming the charset
/// when the bytes are not valid in it; [`TextError::Unsupported`] for charsets without a decoder
/// (dec8, hp8, swe7, armscii8, geostd8, keybcs2, cp850, cp852, macce) unless the bytes are
/// ASCII. Callers fall back to base64 with a note.
pub fn decode_text(bytes: &[u8], collation: Option<u16>) -> Result<Cow<'_, str>, TextError> {
    let Some(cs) = collation.and_then(charset_of) else {
        return utf8(bytes, "utf8mb4");
    };
    let name = cs.name();
    match cs {
        Charset::Binary => Err(TextError::Binary),
        Charset::Utf8mb3 | Charset::Utf8mb4 => utf8(bytes, name),
        Charset::Ascii => {
            if bytes.is_ascii() {
                utf8(bytes, name)
            } else {
                Err(TextError::Invalid { charset: name, offset: bytes.iter().position(|b| !b.is_ascii()).unwrap_or(0) })
            }
        }
        Charset::Ucs2 => utf16(bytes, true, true, name).map(Cow::Owned),
        Charset::Utf16 => utf16(bytes, true, false, name).map(Cow::Owned),
        Charset::Utf16le => utf16(bytes, false, false, name).map(Cow::Owned),
        Charset::Utf32 => utf32(bytes, name).map(Cow::Owned),
        other => match other.encoding() {
            Some(enc) => enc
                .decode_without_bom_handling_and_without_replacement(bytes)
                .ok_or(TextError::Invalid { charset: name, offset: 0 }),
            None if bytes.is_ascii() => utf8(bytes, name),
            None => Err(TextError::Unsupported { charset: name }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ascii_compatible` says exactly when `decode_text` gives ASCII bytes back as they are.
    #[test]
    fn ascii_compatible_agrees_with_decode_text() {
        let ascii: Vec<u8> = (0u8..0x80).collect();
        let text = std::str::from_utf8(&ascii).unwrap();
        for c in (0..=4096u16).map(Some).chain([None]) {
            let same = matches!(decode_text(&ascii, c), Ok(ref t) if t == text);
            assert_eq!(ascii_compatible(c), same, "collation {c:?}");
        }
    }

    #[test]
    fn ids() {
        assert_eq!(charset_of(8), Some(Charset::Latin1));
        assert_eq!(charset_of(33), Some(Charset::Utf8mb3));
        assert_eq!(charset_of(45), Some(Charset::Utf8mb4));
        assert_eq!(charset_of(63), Some(Charset::Binary));
        assert_eq!(charset_of(255), Some(Charset::Utf8mb4));
        assert_eq!(charset_of(28), Some(Charset::Gbk));
        assert_eq!(charset_of(248), Some(Charset::Gb18030));
        assert_eq!(charset_of(1057), Some(Charset::Utf8mb3)); // utf8mb3_general_nopad_ci
        assert_eq!(charset_of(1032), Some(Charset::Latin1)); // latin1_swedish_nopad_ci
        assert_eq!(charset_of(2304), Some(Charset::Utf8mb4)); // utf8mb4_uca1400_ai_ci
        assert_eq!(charset_of(17), None);
        assert_eq!(charset_of(0), None);
        assert_eq!(charset_of(60000), None);
        assert_eq!(Charset::Utf8mb4.to_string(), "utf8mb4");
    }

    #[test]
    fn decodes() {
        assert_eq!(decode_text("😀 ok".as_bytes(), Some(255)).unwrap(), "😀 ok");
        assert_eq!(decode_text(&[0xE9], Some(8)).unwrap(), "é");
        assert_eq!(decode_text(&[0x80], Some(8)).unwrap(), "€"); // latin1 is cp1252
        assert_eq!(decode_text(&[0xD6, 0xD0, 0xCE, 0xC4], Some(28)).unwrap(), "中文"); // gbk
        assert_eq!(decode_text(&[0xCF, 0xF0, 0xE8, 0xE2, 0xE5, 0xF2], Some(51)).unwrap(), "Привет"); // cp1251
        assert_eq!(decode_text(&[0x00, 0x41, 0x04, 0x1F], Some(35)).unwrap(), "AП"); // ucs2
        assert_eq!(decode_text(&[0xD8, 0x3D, 0xDE, 0x00], Some(54)).unwrap(), "😀"); // utf16 surrogates
        assert_eq!(decode_text(&[0x3D, 0xD8, 0x00, 0xDE], Some(56)).unwrap(), "😀"); // utf16le
        assert_eq!(decode_text(&[0, 1, 0xF6, 0x00], Some(60)).unwrap(), "😀"); // utf32
        assert_eq!(decode_text(b"plain", Some(3)).unwrap(), "plain"); // dec8, ASCII only
        assert_eq!(decode_text(b"x", None).unwrap(), "x");
    }

    #[test]
    fn refuses() {
        assert_eq!(decode_text(b"\x00\x01", Some(63)), Err(TextError::Binary));
        assert_eq!(decode_text(&[0xff, 0xfe], Some(45)), Err(TextError::Invalid { charset: "utf8mb4", offset: 0 }));
        assert!(decode_text(&[0xD8, 0x3D, 0xDE, 0x00], Some(35)).is_err()); // no surrogates in ucs2
        assert!(decode_text(&[0x41], Some(54)).is_err()); // odd length utf16
        assert!(decode_text(&[0, 0x11, 0, 0], Some(60)).is_err()); // beyond U+10FFFF
        assert_eq!(decode_text(&[0x81], None), Err(TextError::Invalid { charset: "utf8mb4", offset: 0 }));
        assert_eq!(decode_text(&[0xA0], Some(3)), Err(TextError::Unsupported { charset: "dec8" }));
        let e = decode_text(&[0x81, 0x20], Some(28)).unwrap_err();
        assert_eq!(e.to_string(), "invalid gbk text at byte 0");
    }
}
