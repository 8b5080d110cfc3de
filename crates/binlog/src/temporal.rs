//! DATE, TIME, DATETIME and TIMESTAMP values: their binlog encodings (old and fractional-second
//! `*2` forms), the packed `longlong` forms used inside binary JSON, MySQL's text output, and
//! civil-date arithmetic (no chrono).
//!
//! | type       | bytes                      | layout                                               |
//! |------------|----------------------------|------------------------------------------------------|
//! | DATE       | 3 LE                       | day 5 bits, month 4 bits, year 15 bits               |
//! | TIME       | 3 LE signed                | `HHMMSS` as an integer                               |
//! | DATETIME   | 8 LE                       | `YYYYMMDDhhmmss` as an integer                       |
//! | TIMESTAMP  | 4 LE                       | seconds since the epoch                              |
//! | TIME2      | 3 BE + (fsp+1)/2 BE        | `0x800000` offset; sign, 1 unused, hour 10, min 6, sec 6 |
//! | DATETIME2  | 5 BE + (fsp+1)/2 BE        | sign 1, year*13+month 17, day 5, hour 5, min 6, sec 6 |
//! | TIMESTAMP2 | 4 BE + (fsp+1)/2 BE        | seconds since the epoch, then the fraction           |
//!
//! The fraction is stored in `(fsp + 1) / 2` bytes: 1 byte of 1/100 s, 2 bytes of 1/10000 s or
//! 3 bytes of microseconds.
//!
//! References: MySQL `mysys/my_time.cc` (`my_datetime_packed_from_binary`,
//! `my_time_packed_from_binary`, `TIME_from_longlong_*_packed`),
//! <https://dev.mysql.com/doc/dev/mysql-server/latest/classbinary__log_1_1Rows__event.html>;
//! civil-date algorithms from H. Hinnant, "chrono-Compatible Low-Level Date Algorithms".

use std::fmt;

use sluice_protocol::reader::Reader;

use crate::error::{Error, Result};

/// A DATE. Zero (`0000-00-00`) and partial-zero dates (`2024-00-00`) are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Date {
    /// Year 0..=9999.
    pub year: u16,
    /// Month 0..=12 (0 in zero dates).
    pub month: u8,
    /// Day 0..=31 (0 in zero dates).
    pub day: u8,
}

/// A TIME: a signed duration up to `838:59:59.999999`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Time {
    /// Below zero.
    pub negative: bool,
    /// Hours (may exceed 24).
    pub hours: u32,
    /// Minutes 0..=59.
    pub minutes: u8,
    /// Seconds 0..=59.
    pub seconds: u8,
    /// Microseconds 0..=999999.
    pub micros: u32,
    /// Fractional digits to print (0..=6).
    pub fsp: u8,
}

/// A DATETIME: a local date and time (may be zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DateTime {
    /// Year 0..=9999.
    pub year: u16,
    /// Month 0..=12.
    pub month: u8,
    /// Day 0..=31.
    pub day: u8,
    /// Hour 0..=23.
    pub hour: u8,
    /// Minute 0..=59.
    pub minute: u8,
    /// Second 0..=59.
    pub second: u8,
    /// Microseconds 0..=999999.
    pub micros: u32,
    /// Fractional digits to print (0..=6).
    pub fsp: u8,
}

/// A TIMESTAMP: a UTC instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Timestamp {
    /// Seconds since 1970-01-01 00:00:00 UTC.
    pub seconds: u32,
    /// Microseconds 0..=999999.
    pub micros: u32,
    /// Fractional digits to print (0..=6).
    pub fsp: u8,
}

/// Days from 1970-01-01 to the given proleptic Gregorian date (Hinnant's `days_from_civil`).
#[inline]
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = i64::from(month);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date for a day count from 1970-01-01 (Hinnant's `civil_from_days`).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    (y, u32::try_from(m).unwrap_or(1), u32::try_from(d).unwrap_or(1))
}

#[inline]
fn is_leap(y: u16) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

/// The days of month `m` (1-12) of year `y` (0 for no month).
#[inline]
pub fn days_in_month(y: u16, m: u8) -> u8 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(y) => 29,
        2 => 28,
        _ => 0,
    }
}

/// Writes `.ffffff` truncated to `fsp` digits (nothing for fsp 0).
fn write_frac(f: &mut fmt::Formatter<'_>, micros: u32, fsp: u8) -> fmt::Result {
    if fsp == 0 {
        return Ok(());
    }
    let fsp = u32::from(fsp.min(6));
    let v = micros / 10u32.pow(6 - fsp);
    write!(f, ".{:0w$}", v, w = usize::try_from(fsp).unwrap_or(6))
}

fn check_fsp(fsp: u16) -> Result<u8> {
    match u8::try_from(fsp) {
        Ok(f) if f <= 6 => Ok(f),
        _ => Err(Error::invalid("fractional seconds precision", format!("{fsp} > 6"))),
    }
}

/// Reads the `(fsp + 1) / 2` fraction bytes of the `*2` types as a signed big-endian number,
/// scaled to microseconds (`mi_sint1korr` / `mi_sint2korr` / `mi_sint3korr`).
fn read_frac_signed(r: &mut Reader<'_>, fsp: u8) -> Result<i64> {
    Ok(match fsp {
        0 => 0,
        1 | 2 => i64::from(i8::from_be_bytes(r.array::<1>("fraction")?)) * 10_000,
        3 | 4 => i64::from(i16::from_be_bytes(r.array::<2>("fraction")?)) * 100,
        _ => {
            let v = r.uint_be(3, "fraction")?;
            // sign-extend 24 bits
            let v = i64::try_from(v).unwrap_or(0);
            if v & 0x80_0000 != 0 {
                v - 0x100_0000
            } else {
                v
            }
        }
    })
}

impl Date {
    /// The zero date `0000-00-00`.
    pub const ZERO: Date = Date { year: 0, month: 0, day: 0 };

    /// Reads a 3-byte DATE.
    ///
    /// # Errors
    /// [`Error::Wire`] when truncated.
    pub fn read(r: &mut Reader<'_>) -> Result<Date> {
        let v = r.uint_le(3, "DATE")?;
        Ok(Date {
            year: u16::try_from(v >> 9).unwrap_or(0),
            month: u8::try_from((v >> 5) & 0xf).unwrap_or(0),
            day: u8::try_from(v & 0x1f).unwrap_or(0),
        })
    }

    /// True when year, month and day are all zero.
    pub fn is_zero(&self) -> bool {
        *self == Date::ZERO
    }

    /// True when the date exists on the proleptic Gregorian calendar.
    #[inline]
    pub fn is_valid(&self) -> bool {
        self.month >= 1 && self.month <= 12 && self.day >= 1 && self.day <= days_in_month(self.year, self.month)
    }

    /// Days since 1970-01-01 (negative before), or None for zero, partial-zero and invalid dates.
    #[inline]
    pub fn days_since_epoch(&self) -> Option<i32> {
        if !self.is_valid() {
            return None;
        }
        i32::try_from(days_from_civil(i64::from(self.year), u32::from(self.month), u32::from(self.day))).ok()
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

impl Time {
    /// Reads an old 3-byte TIME (`HHMMSS` as a signed integer).
    ///
    /// # Errors
    /// [`Error::Wire`] when truncated.
    pub fn read_old(r: &mut Reader<'_>) -> Result<Time> {
        let v = i64::try_from(r.uint_le(3, "TIME")?).unwrap_or(0);
        let v = if v & 0x80_0000 != 0 { v - 0x100_0000 } else { v };
        let a = v.unsigned_abs();
        Ok(Time {
            negative: v < 0,
            hours: u32::try_from(a / 10_000).unwrap_or(0),
            minutes: u8::try_from(a / 100 % 100).unwrap_or(0),
            seconds: u8::try_from(a % 100).unwrap_or(0),
            micros: 0,
            fsp: 0,
        })
    }

    /// Reads a TIME2 with `fsp` fractional digits (`my_time_packed_from_binary`).
    ///
    /// # Errors
    /// [`Error::Wire`] when truncated; [`Error::Invalid`] for fsp > 6.
    pub fn read2(r: &mut Reader<'_>, fsp: u16) -> Result<Time> {
        let fsp = check_fsp(fsp)?;
        const TIMEF_INT_OFS: i64 = 0x80_0000;
        const TIMEF_OFS: i64 = 0x8000_0000_0000;
        let packed = match fsp {
            0 => (i64::try_from(r.uint_be(3, "TIME2")?).unwrap_or(0) - TIMEF_INT_OFS) << 24,
            1..=4 => {
                let mut int = i64::try_from(r.uint_be(3, "TIME2")?).unwrap_or(0) - TIMEF_INT_OFS;
                let (mut frac, unit, wrap) = if fsp <= 2 {
                    (i64::try_from(r.uint_be(1, "TIME2 fraction")?).unwrap_or(0), 10_000, 0x100)
                } else {
                    (i64::try_from(r.uint_be(2, "TIME2 fraction")?).unwrap_or(0), 100, 0x1_0000)
                };
                if int < 0 && frac != 0 {
                    // Negative values with a fraction store the integer part rounded towards
                    // minus infinity and a positive complement fraction: undo that.
                    int += 1;
                    frac -= wrap;
                }
                (int << 24) + frac * unit
            }
            _ => i64::try_from(r.uint_be(6, "TIME2")?).unwrap_or(0) - TIMEF_OFS,
        };
        Ok(Time::from_packed(packed, fsp))
    }

    /// A TIME from MySQL's packed `longlong` form (`TIME_from_longlong_time_packed`).
    pub fn from_packed(packed: i64, fsp: u8) -> Time {
        let negative = packed < 0;
        let a = packed.unsigned_abs();
        let hms = a >> 24;
        Time {
            negative,
            hours: u32::try_from((hms >> 12) % (1 << 10)).unwrap_or(0),
            minutes: u8::try_from((hms >> 6) % (1 << 6)).unwrap_or(0),
            seconds: u8::try_from(hms % (1 << 6)).unwrap_or(0),
            micros: u32::try_from(a % (1 << 24)).unwrap_or(0),
            fsp,
        }
    }

    /// The signed duration in microseconds.
    pub fn to_micros(&self) -> i64 {
        let v = ((i64::from(self.hours) * 60 + i64::from(self.minutes)) * 60 + i64::from(self.seconds)) * 1_000_000
            + i64::from(self.micros);
        if self.negative {
            -v
        } else {
            v
        }
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.negative {
            f.write_str("-")?;
        }
        write!(f, "{:02}:{:02}:{:02}", self.hours, self.minutes, self.seconds)?;
        write_frac(f, self.micros, self.fsp)
    }
}

impl DateTime {
    /// Reads an old 8-byte DATETIME (`YYYYMMDDhhmmss` as an integer).
    ///
    /// # Errors
    /// [`Error::Wire`] when truncated.
    pub fn read_old(r: &mut Reader<'_>) -> Result<DateTime> {
        let v = r.u64("DATETIME")?;
        let d = v / 1_000_000;
        let t = v % 1_000_000;
        let u8_of = |x: u64| u8::try_from(x % 100).unwrap_or(0);
        Ok(DateTime {
            year: u16::try_from(d / 10_000 % 10_000).unwrap_or(0),
            month: u8_of(d / 100),
            day: u8_of(d),
            hour: u8_of(t / 10_000),
            minute: u8_of(t / 100),
            second: u8_of(t),
            micros: 0,
            fsp: 0,
        })
    }

    /// Reads a DATETIME2 with `fsp` fractional digits (`my_datetime_packed_from_binary`).
    ///
    /// # Errors
    /// [`Error::Wire`] when truncated; [`Error::Invalid`] for fsp > 6.
    pub fn read2(r: &mut Reader<'_>, fsp: u16) -> Result<DateTime> {
        let fsp = check_fsp(fsp)?;
        const DATETIMEF_INT_OFS: i64 = 0x80_0000_0000;
        let int = i64::try_from(r.uint_be(5, "DATETIME2")?).unwrap_or(0) - DATETIMEF_INT_OFS;
        let frac = read_frac_signed(r, fsp)?;
        // a server never writes the bottom of the range with a negative fraction (DATETIME is
        // never negative), but damaged bytes can, and the sum must not overflow
        let packed = (int << 24).checked_add(frac).ok_or_else(|| {
            Error::invalid("DATETIME2", format!("packed value {int} with fraction {frac} is out of range"))
        })?;
        Ok(DateTime::from_packed(packed, fsp))
    }

    /// A DATETIME from MySQL's packed `longlong` form (`TIME_from_longlong_datetime_packed`).
    #[inline]
    pub fn from_packed(packed: i64, fsp: u8) -> DateTime {
        let a = packed.unsigned_abs();
        let micros = u32::try_from(a % (1 << 24)).unwrap_or(0);
        let ymdhms = a >> 24;
        let ymd = ymdhms >> 17;
        let ym = ymd >> 5;
        let hms = ymdhms % (1 << 17);
        DateTime {
            year: u16::try_from(ym / 13).unwrap_or(0),
            month: u8::try_from(ym % 13).unwrap_or(0),
            day: u8::try_from(ymd % (1 << 5)).unwrap_or(0),
            hour: u8::try_from(hms >> 12).unwrap_or(0),
            minute: u8::try_from((hms >> 6) % (1 << 6)).unwrap_or(0),
            second: u8::try_from(hms % (1 << 6)).unwrap_or(0),
            micros,
            fsp,
        }
    }

    /// The date part.
    pub fn date(&self) -> Date {
        Date { year: self.year, month: self.month, day: self.day }
    }

    /// ISO 8601 without a zone: `2024-01-31T12:00:00[.ffffff]` (fsp digits).
    pub fn to_iso8601(&self) -> String {
        let s = self.to_string();
        s.replacen(' ', "T", 1)
    }

    /// Microseconds since 1970-01-01 00:00:00 read as local wall-clock time (no zone), or
    /// None for zero and invalid dates.
    #[inline]
    pub fn micros_since_epoch_local(&self) -> Option<i64> {
        let days = i64::from(self.date().days_since_epoch()?);
        let secs = days * 86_400 + i64::from(self.hour) * 3600 + i64::from(self.minute) * 60 + i64::from(self.second);
        Some(secs * 1_000_000 + i64::from(self.micros))
    }
}

impl fmt::Display for DateTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )?;
        write_frac(f, self.micros, self.fsp)
    }
}

impl Timestamp {
    /// Reads an old 4-byte little-endian TIMESTAMP.
    ///
    /// # Errors
    /// [`Error::Wire`] when truncated.
    pub fn read_old(r: &mut Reader<'_>) -> Result<Timestamp> {
        Ok(Timestamp { seconds: r.u32("TIMESTAMP")?, micros: 0, fsp: 0 })
    }

    /// Reads a TIMESTAMP2 with `fsp` fractional digits.
    ///
    /// # Errors
    /// [`Error::Wire`] when truncated; [`Error::Invalid`] for fsp > 6 or a fraction over 999999.
    pub fn read2(r: &mut Reader<'_>, fsp: u16) -> Result<Timestamp> {
        let fsp = check_fsp(fsp)?;
        let seconds = u32::from_be_bytes(r.array::<4>("TIMESTAMP2")?);
        let micros = match fsp {
            0 => 0,
            1 | 2 => r.uint_be(1, "TIMESTAMP2 fraction")? * 10_000,
            3 | 4 => r.uint_be(2, "TIMESTAMP2 fraction")? * 100,
            _ => r.uint_be(3, "TIMESTAMP2 fraction")?,
        };
        let micros = u32::try_from(micros)
            .ok()
            .filter(|&m| m < 1_000_000)
            .ok_or_else(|| Error::invalid("TIMESTAMP2", format!("fraction {micros} exceeds 999999 microseconds")))?;
        Ok(Timestamp { seconds, micros, fsp })
    }

    /// True for the zero timestamp `0000-00-00 00:00:00`.
    pub fn is_zero(&self) -> bool {
        self.seconds == 0 && self.micros == 0
    }

    /// Microseconds since the epoch.
    pub fn micros(&self) -> i64 {
        i64::from(self.seconds) * 1_000_000 + i64::from(self.micros)
    }

    /// The UTC date and time (the zero timestamp gives the zero DATETIME).
    pub fn to_utc(&self) -> DateTime {
        if self.is_zero() {
            return DateTime { year: 0, month: 0, day: 0, hour: 0, minute: 0, second: 0, micros: 0, fsp: self.fsp };
        }
        let secs = i64::from(self.seconds);
        let (y, m, d) = civil_from_days(secs / 86_400);
        let sod = secs % 86_400;
        DateTime {
            year: u16::try_from(y).unwrap_or(0),
            month: u8::try_from(m).unwrap_or(0),
            day: u8::try_from(d).unwrap_or(0),
            hour: u8::try_from(sod / 3600).unwrap_or(0),
            minute: u8::try_from(sod / 60 % 60).unwrap_or(0),
            second: u8::try_from(sod % 60).unwrap_or(0),
            micros: self.micros,
            fsp: self.fsp,
        }
    }
}

impl fmt::Display for Timestamp {
    /// UTC `YYYY-MM-DD hh:mm:ss[.ffffff]`; zero as `0000-00-00 00:00:00`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.to_utc().fmt(f)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// MySQL's `my_datetime_packed_to_binary` for tests.
    pub(crate) fn encode_datetime2(dt: &DateTime, fsp: u8) -> Vec<u8> {
        let ym = u64::from(dt.year) * 13 + u64::from(dt.month);
        let ymd = (ym << 5) | u64::from(dt.day);
        let hms = (u64::from(dt.hour) << 12) | (u64::from(dt.minute) << 6) | u64::from(dt.second);
        let int = (ymd << 17) | hms;
        let mut out = (int + 0x80_0000_0000).to_be_bytes()[3..].to_vec();
        push_frac(&mut out, i64::from(dt.micros), fsp);
        out
    }

    fn push_frac(out: &mut Vec<u8>, micros: i64, fsp: u8) {
        match fsp {
            0 => {}
            1 | 2 => out.push((micros / 10_000) as u8),
            3 | 4 => out.extend_from_slice(&((micros / 100) as u16).to_be_bytes()),
            _ => out.extend_from_slice(&(micros as u32).to_be_bytes()[1..]),
        }
    }

    /// MySQL's `my_time_packed_to_binary` for tests (`t.micros` must fit `fsp`).
    pub(crate) fn encode_time2(t: &Time, fsp: u8) -> Vec<u8> {
        let hms = (i64::from(t.hours) << 12) | (i64::from(t.minutes) << 6) | i64::from(t.seconds);
        let mut packed = (hms << 24) + i64::from(t.micros);
        if t.negative {
            packed = -packed;
        }
        let int = packed >> 24; // floor for negatives, as MY_PACKED_TIME_GET_INT_PART
        let frac = packed % (1 << 24);
        match fsp {
            0 => ((int + 0x80_0000) as u32).to_be_bytes()[1..].to_vec(),
            1..=4 => {
                let mut out = ((int + 0x80_0000) as u32).to_be_bytes()[1..].to_vec();
                if fsp <= 2 {
                    out.push((frac / 10_000) as i8 as u8);
                } else {
                    out.extend_from_slice(&((frac / 100) as i16 as u16).to_be_bytes());
                }
                out
            }
            _ => (packed + 0x8000_0000_0000).to_be_bytes()[2..].to_vec(),
        }
    }

    #[test]
    fn date_and_display() {
        // 2024-01-31: (2024 << 9) | (1 << 5) | 31
        let v: u32 = (2024 << 9) | (1 << 5) | 31;
        let d = Date::read(&mut Reader::new(&v.to_le_bytes()[..3])).unwrap();
        assert_eq!(d.to_string(), "2024-01-31");
        assert_eq!(Date::ZERO.to_string(), "0000-00-00");
        assert_eq!(Date::ZERO.days_since_epoch(), None);
        assert_eq!(Date { year: 2024, month: 2, day: 30 }.days_since_epoch(), None);
        assert_eq!(Date { year: 1970, month: 1, day: 2 }.days_since_epoch(), Some(1));
        assert_eq!(Date { year: 1969, month: 12, day: 31 }.days_since_epoch(), Some(-1));
        assert_eq!(Date { year: 2000, month: 3, day: 1 }.days_since_epoch(), Some(11017));
    }

    #[test]
    fn time_display() {
        let t = Time { negative: true, hours: 838, minutes: 59, seconds: 59, micros: 0, fsp: 6 };
        assert_eq!(t.to_string(), "-838:59:59.000000");
        let t = Time { negative: true, hours: 0, minutes: 0, seconds: 1, micros: 500_000, fsp: 1 };
        assert_eq!(t.to_string(), "-00:00:01.5");
        assert_eq!(t.to_micros(), -1_500_000);
    }

    #[test]
    fn time2_known_bytes() {
        // -00:00:01.5 with fsp 1: int part -2 -> 0x7ffffe, fraction 0x100 - 50 = 0xce
        let t = Time::read2(&mut Reader::new(&[0x7f, 0xff, 0xfe, 0xce]), 1).unwrap();
        assert_eq!(t.to_string(), "-00:00:01.5");
        // -21 days 03:48:27 = -507:48:27 with fsp 0
        let hms: i64 = (507 << 12) | (48 << 6) | 27;
        let b = ((0x80_0000 - hms) as u32).to_be_bytes();
        let t = Time::read2(&mut Reader::new(&b[1..]), 0).unwrap();
        assert_eq!((t.negative, t.hours, t.minutes, t.seconds), (true, 507, 48, 27));
        assert!(Time::read2(&mut Reader::new(&[0x80, 0, 0]), 7).is_err());
    }

    /// Found by the `value` fuzz target: the bottom of the 40-bit range with a negative
    /// fraction overflowed the packed sum (a panic with overflow checks, a wrong value without).
    #[test]
    fn datetime2_out_of_range_is_an_error() {
        let e = DateTime::read2(&mut Reader::new(&[0, 0, 0, 0, 0, 0xb4]), 2).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        // the same integer part with a zero fraction is representable (a nonsense date, no error)
        assert!(DateTime::read2(&mut Reader::new(&[0, 0, 0, 0, 0, 0]), 2).is_ok());
    }

    #[test]
    fn old_forms() {
        let t = Time::read_old(&mut Reader::new(&(-123456i32).to_le_bytes()[..3])).unwrap();
        assert_eq!(t.to_string(), "-12:34:56");
        let dt = DateTime::read_old(&mut Reader::new(&20240131120005u64.to_le_bytes())).unwrap();
        assert_eq!(dt.to_string(), "2024-01-31 12:00:05");
        assert_eq!(dt.to_iso8601(), "2024-01-31T12:00:05");
        let ts = Timestamp::read_old(&mut Reader::new(&1706702400u32.to_le_bytes())).unwrap();
        assert_eq!(ts.to_string(), "2024-01-31 12:00:00");
        assert_eq!(Timestamp { seconds: 0, micros: 0, fsp: 0 }.to_string(), "0000-00-00 00:00:00");
    }

    fn time_strategy() -> impl Strategy<Value = (Time, u8)> {
        (any::<bool>(), 0u32..=838, 0u8..60, 0u8..60, 0u32..1_000_000, 0u8..=6).prop_map(|(n, h, m, s, us, fsp)| {
            let unit = 10u32.pow(6 - u32::from(fsp));
            let us = us / unit * unit;
            let negative = n && (h, m, s, us) != (0, 0, 0, 0);
            (Time { negative, hours: h, minutes: m, seconds: s, micros: us, fsp }, fsp)
        })
    }

    proptest! {
        #[test]
        fn datetime2_round_trip(y in 0u16..=9999, mo in 0u8..=12, d in 0u8..=31, h in 0u8..24, mi in 0u8..60, s in 0u8..60, us in 0u32..1_000_000, fsp in 0u8..=6) {
            let unit = 10u32.pow(6 - u32::from(fsp));
            let dt = DateTime { year: y, month: mo, day: d, hour: h, minute: mi, second: s, micros: us / unit * unit, fsp };
            let b = encode_datetime2(&dt, fsp);
            let mut r = Reader::new(&b);
            prop_assert_eq!(DateTime::read2(&mut r, u16::from(fsp)).unwrap(), dt);
            prop_assert!(r.is_empty());
        }

        #[test]
        fn time2_round_trip((t, fsp) in time_strategy()) {
            let b = encode_time2(&t, fsp);
            prop_assert_eq!(b.len(), 3 + usize::from(fsp).div_ceil(2));
            let mut r = Reader::new(&b);
            prop_assert_eq!(Time::read2(&mut r, u16::from(fsp)).unwrap(), t);
            prop_assert!(r.is_empty());
        }

        #[test]
        fn timestamp2_round_trip(secs in any::<u32>(), us in 0u32..1_000_000, fsp in 0u8..=6) {
            let unit = 10u32.pow(6 - u32::from(fsp));
            let us = us / unit * unit;
            let mut b = secs.to_be_bytes().to_vec();
            push_frac(&mut b, i64::from(us), fsp);
            let ts = Timestamp::read2(&mut Reader::new(&b), u16::from(fsp)).unwrap();
            prop_assert_eq!(ts, Timestamp { seconds: secs, micros: us, fsp });
            prop_assert_eq!(ts.micros(), i64::from(secs) * 1_000_000 + i64::from(us));
        }

        #[test]
        fn civil_round_trip(days in -800_000i64..3_000_000) {
            let (y, m, d) = civil_from_days(days);
            prop_assert_eq!(days_from_civil(y, m, d), days);
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..10), fsp in 0u16..8) {
            let _ = Time::read2(&mut Reader::new(&bytes), fsp);
            let _ = DateTime::read2(&mut Reader::new(&bytes), fsp);
            let _ = Timestamp::read2(&mut Reader::new(&bytes), fsp);
        }
    }
}
