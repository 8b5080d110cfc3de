//! Prepared statements and the binary result-set protocol: COM_STMT_PREPARE,
//! COM_STMT_EXECUTE, COM_STMT_CLOSE, and binary rows.
//!
//! Sluice uses them for one reason: the text protocol prints FLOAT with six significant digits
//! and every other value as text the client must parse back, while a binary row carries
//! integers, FLOAT and DOUBLE in their machine form and dates and times as fields. A snapshot
//! reads table rows this way so each value is exactly what the binlog would carry.
//!
//! | answer to COM_STMT_PREPARE | content                                                    |
//! |----------------------------|------------------------------------------------------------|
//! | 1                          | 0x00, statement id u32, columns u16, params u16, 0, warnings u16 |
//! | params (+ EOF)             | ColumnDefinition41 per parameter                            |
//! | columns (+ EOF)            | ColumnDefinition41 per result column                        |
//!
//! COM_STMT_EXECUTE is answered like COM_QUERY (OK, ERR, or a result set) except that each row
//! is binary: a 0x00 header, a NULL bitmap of `(columns + 7 + 2) / 8` bytes whose first two bits
//! are unused, then each non-NULL value in its type's binary form ([`BinaryValue`]).
//! [`ExecuteReader`] consumes the answer one packet at a time (sans-IO) and hands out rows as
//! they come, so a caller can stream a result set of any size.
//!
//! Only statements without parameters are supported: Sluice writes its values into the SQL as
//! literals in each column's own character set (see the publisher's snapshot module).
//!
//! References: <https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_com_stmt_prepare.html>,
//! <https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_binary_resultset.html>,
//! <https://mariadb.com/kb/en/resultset-row/>.

use crate::error::{Error, Result};
use crate::packet::{err_to_error, is_end_of_rows, is_err, EofPacket, OkPacket, OK_HEADER};
use crate::query::{ColumnDefinition, MAX_COLUMNS};
use crate::reader::Reader;

/// COM_STMT_PREPARE.
pub const COM_STMT_PREPARE: u8 = 0x16;
/// COM_STMT_EXECUTE.
pub const COM_STMT_EXECUTE: u8 = 0x17;
/// COM_STMT_CLOSE.
pub const COM_STMT_CLOSE: u8 = 0x19;

/// Column flag: UNSIGNED.
pub const UNSIGNED_FLAG: u16 = 32;

/// `MYSQL_TYPE_*` codes whose binary form is not a length-encoded string.
pub mod types {
    /// TINYINT.
    pub const TINY: u8 = 1;
    /// SMALLINT.
    pub const SHORT: u8 = 2;
    /// INT.
    pub const LONG: u8 = 3;
    /// FLOAT.
    pub const FLOAT: u8 = 4;
    /// DOUBLE.
    pub const DOUBLE: u8 = 5;
    /// NULL.
    pub const NULL: u8 = 6;
    /// TIMESTAMP.
    pub const TIMESTAMP: u8 = 7;
    /// BIGINT.
    pub const LONGLONG: u8 = 8;
    /// MEDIUMINT.
    pub const INT24: u8 = 9;
    /// DATE.
    pub const DATE: u8 = 10;
    /// TIME.
    pub const TIME: u8 = 11;
    /// DATETIME.
    pub const DATETIME: u8 = 12;
    /// YEAR.
    pub const YEAR: u8 = 13;
    /// The internal NEWDATE (not sent to clients, handled as DATE).
    pub const NEWDATE: u8 = 14;
    /// TIMESTAMP with fractional seconds (internal; handled as TIMESTAMP).
    pub const TIMESTAMP2: u8 = 17;
    /// DATETIME with fractional seconds (internal; handled as DATETIME).
    pub const DATETIME2: u8 = 18;
    /// TIME with fractional seconds (internal; handled as TIME).
    pub const TIME2: u8 = 19;
}

/// The COM_STMT_PREPARE payload.
pub fn com_stmt_prepare(sql: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(1 + sql.len());
    v.push(COM_STMT_PREPARE);
    v.extend_from_slice(sql.as_bytes());
    v
}

/// The COM_STMT_EXECUTE payload for a statement without parameters, without a cursor.
pub fn com_stmt_execute(statement_id: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(10);
    v.push(COM_STMT_EXECUTE);
    v.extend_from_slice(&statement_id.to_le_bytes());
    v.push(0); // CURSOR_TYPE_NO_CURSOR
    v.extend_from_slice(&1u32.to_le_bytes()); // iteration count
    v
}

/// The COM_STMT_CLOSE payload (the server sends no answer).
pub fn com_stmt_close(statement_id: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(5);
    v.push(COM_STMT_CLOSE);
    v.extend_from_slice(&statement_id.to_le_bytes());
    v
}

/// A prepared statement, as COM_STMT_PREPARE answered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Prepared {
    /// The server's id for it.
    pub id: u32,
    /// Its parameters (Sluice supports none: see the module docs).
    pub params: u16,
    /// Its result columns, as the prepare answer describes them.
    pub columns: Vec<ColumnDefinition>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PrepareState {
    First,
    Params { left: u16 },
    ParamsEof,
    Columns { left: u16 },
    ColumnsEof,
    Done,
}

/// Sans-IO reader of the answer to COM_STMT_PREPARE.
#[derive(Debug)]
pub struct PrepareReader {
    capabilities: u64,
    state: PrepareState,
    columns: u16,
    out: Prepared,
}

impl PrepareReader {
    /// A reader for a connection with the negotiated `capabilities`.
    pub fn new(capabilities: u64) -> PrepareReader {
        PrepareReader { capabilities, state: PrepareState::First, columns: 0, out: Prepared::default() }
    }

    fn deprecate_eof(&self) -> bool {
        self.capabilities & crate::handshake::capability::DEPRECATE_EOF != 0
    }

    /// Feeds the next packet; returns the statement once its description is complete.
    ///
    /// # Errors
    /// [`Error::Server`] for an ERR packet (a syntax error, a missing table or privilege);
    /// parse errors.
    pub fn on_packet(&mut self, payload: &[u8]) -> Result<Option<Prepared>> {
        if is_err(payload) {
            self.state = PrepareState::Done;
            return Err(err_to_error(payload));
        }
        match self.state {
            PrepareState::First => {
                let mut r = Reader::new(payload);
                if r.u8("prepare OK header")? != OK_HEADER {
                    return Err(Error::Invalid { what: "prepare answer", reason: "expected OK or ERR".into() });
                }
                self.out.id = r.u32("statement id")?;
                self.columns = r.u16("statement column count")?;
                self.out.params = r.u16("statement parameter count")?;
                if u64::from(self.columns) > MAX_COLUMNS {
                    return Err(Error::TooLarge {
                        what: "column count",
                        len: u64::from(self.columns),
                        max: MAX_COLUMNS,
                    });
                }
                self.out.columns.reserve(usize::from(self.columns));
                self.after_params_or_columns(self.out.params, true);
            }
            PrepareState::Params { left } => {
                // parameter definitions carry nothing Sluice uses
                ColumnDefinition::parse(payload)?;
                if left > 1 {
                    self.state = PrepareState::Params { left: left - 1 };
                } else if self.deprecate_eof() {
                    self.after_params_or_columns(self.columns, false);
                } else {
                    self.state = PrepareState::ParamsEof;
                }
            }
            PrepareState::ParamsEof => {
                EofPacket::parse(payload)?;
                self.after_params_or_columns(self.columns, false);
            }
            PrepareState::Columns { left } => {
                self.out.columns.push(ColumnDefinition::parse(payload)?);
                if left <= 1 {
                    if self.deprecate_eof() {
                        self.state = PrepareState::Done;
                    } else {
                        self.state = PrepareState::ColumnsEof;
                    }
                } else {
                    self.state = PrepareState::Columns { left: left - 1 };
                }
            }
            PrepareState::ColumnsEof => {
                EofPacket::parse(payload)?;
                self.state = PrepareState::Done;
            }
            PrepareState::Done => {
                return Err(Error::Invalid {
                    what: "prepare answer",
                    reason: "packet after the end of the answer".into(),
                })
            }
        }
        if self.state == PrepareState::Done {
            return Ok(Some(std::mem::take(&mut self.out)));
        }
        Ok(None)
    }

    /// After the OK (`params` definitions next) or after the parameters (`columns` next).
    fn after_params_or_columns(&mut self, n: u16, params: bool) {
        self.state = match (n, params) {
            (0, true) => {
                if self.columns == 0 {
                    PrepareState::Done
                } else {
                    PrepareState::Columns { left: self.columns }
                }
            }
            (n, true) => PrepareState::Params { left: n },
            (0, false) => PrepareState::Done,
            (n, false) => PrepareState::Columns { left: n },
        };
    }
}

/// One value of a binary row, as the wire carries it. Which one a column gives depends only on
/// its type code and UNSIGNED flag; the meaning (an ENUM's index, a TIMESTAMP's time zone, a
/// DECIMAL's digits) is the caller's to give.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BinaryValue<'a> {
    /// SQL NULL.
    Null,
    /// A signed integer (TINYINT .. BIGINT, YEAR), sign-extended.
    Int(i64),
    /// An integer of a column with the UNSIGNED flag.
    UInt(u64),
    /// FLOAT.
    Float(f32),
    /// DOUBLE.
    Double(f64),
    /// DATE, DATETIME or TIMESTAMP fields (all zero for the zero date).
    DateTime {
        /// Year.
        year: u16,
        /// Month.
        month: u8,
        /// Day.
        day: u8,
        /// Hour.
        hour: u8,
        /// Minute.
        minute: u8,
        /// Second.
        second: u8,
        /// Microseconds.
        micros: u32,
    },
    /// TIME: a signed duration.
    Time {
        /// Below zero.
        negative: bool,
        /// Whole days.
        days: u32,
        /// Hours 0..=23.
        hours: u8,
        /// Minutes.
        minutes: u8,
        /// Seconds.
        seconds: u8,
        /// Microseconds.
        micros: u32,
    },
    /// Everything sent as a length-encoded string: DECIMAL digits, strings and blobs (in the
    /// character set the column definition names), BIT, ENUM, SET, JSON, GEOMETRY.
    Bytes(&'a [u8]),
}

/// Parses a binary row of `columns` into `out` (cleared first); values borrow from `payload`.
///
/// # Errors
/// As [`parse_binary_row_with`].
pub fn parse_binary_row<'a>(
    payload: &'a [u8],
    columns: &[ColumnDefinition],
    out: &mut Vec<BinaryValue<'a>>,
) -> Result<()> {
    out.clear();
    parse_binary_row_with(payload, columns, |_, v| {
        out.push(v);
        Ok::<(), Error>(())
    })
}

/// Parses a binary row of `columns`, handing each value (borrowed from `payload`) with its
/// column's index to `visit` in column order, without a vector of them: a value stored into a
/// vector as one `match` returned it and read back at once costs a stall per value (the
/// snapshot's row parser, `bench/README.md`).
///
/// # Errors
/// [`Error::Invalid`] for a row that does not start with 0x00, a temporal value of an unknown
/// length, or bytes left after the last value; [`Error::Truncated`] for a short row; and what
/// `visit` returns.
#[inline]
pub fn parse_binary_row_with<'a, E: From<Error>>(
    payload: &'a [u8],
    columns: &[ColumnDefinition],
    mut visit: impl FnMut(usize, BinaryValue<'a>) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let mut r = Reader::new(payload);
    if r.u8("binary row header")? != 0x00 {
        return Err(Error::Invalid { what: "binary row", reason: "the header byte is not 0x00".into() }.into());
    }
    let bitmap = r.take((columns.len() + 7 + 2) / 8, "binary row NULL bitmap")?;
    for (i, c) in columns.iter().enumerate() {
        let bit = i + 2;
        let null = bitmap.get(bit / 8).is_some_and(|b| b & (1 << (bit % 8)) != 0);
        if null {
            visit(i, BinaryValue::Null)?;
            continue;
        }
        visit(i, binary_value(&mut r, c)?)?;
    }
    if !r.is_empty() {
        return Err(Error::Invalid {
            what: "binary row",
            reason: format!("{} bytes after the last value", r.remaining()),
        }
        .into());
    }
    Ok(())
}

// inlined into the row's loop: returned out of line, each value went through memory
#[inline(always)]
fn binary_value<'a>(r: &mut Reader<'a>, c: &ColumnDefinition) -> Result<BinaryValue<'a>> {
    use types as T;
    let unsigned = c.flags & UNSIGNED_FLAG != 0;
    let int = |s: i64, u: u64| if unsigned { BinaryValue::UInt(u) } else { BinaryValue::Int(s) };
    Ok(match c.column_type {
        T::TINY => {
            let b = r.u8("TINYINT")?;
            int(i64::from(b as i8), u64::from(b))
        }
        T::SHORT | T::YEAR => {
            let v = r.u16("SMALLINT")?;
            int(i64::from(v as i16), u64::from(v))
        }
        T::LONG | T::INT24 => {
            let v = r.u32("INT")?;
            int(i64::from(v as i32), u64::from(v))
        }
        T::LONGLONG => {
            let v = r.u64("BIGINT")?;
            int(v as i64, v)
        }
        T::FLOAT => BinaryValue::Float(f32::from_bits(r.u32("FLOAT")?)),
        T::DOUBLE => BinaryValue::Double(f64::from_bits(r.u64("DOUBLE")?)),
        T::NULL => BinaryValue::Null,
        T::DATE | T::NEWDATE | T::DATETIME | T::TIMESTAMP | T::DATETIME2 | T::TIMESTAMP2 => {
            let n = r.u8("date length")?;
            let (mut year, mut month, mut day, mut hour, mut minute, mut second, mut micros) = (0, 0, 0, 0, 0, 0, 0);
            if !matches!(n, 0 | 4 | 7 | 11) {
                return Err(Error::Invalid { what: "binary date", reason: format!("length {n} is not 0, 4, 7 or 11") });
            }
            if n >= 4 {
                year = r.u16("date year")?;
                month = r.u8("date month")?;
                day = r.u8("date day")?;
            }
            if n >= 7 {
                hour = r.u8("date hour")?;
                minute = r.u8("date minute")?;
                second = r.u8("date second")?;
            }
            if n >= 11 {
                micros = r.u32("date microseconds")?;
            }
            BinaryValue::DateTime { year, month, day, hour, minute, second, micros }
        }
        T::TIME | T::TIME2 => {
            let n = r.u8("time length")?;
            if !matches!(n, 0 | 8 | 12) {
                return Err(Error::Invalid { what: "binary time", reason: format!("length {n} is not 0, 8 or 12") });
            }
            let (mut negative, mut days, mut hours, mut minutes, mut seconds, mut micros) = (false, 0, 0, 0, 0, 0);
            if n >= 8 {
                negative = r.u8("time sign")? != 0;
                days = r.u32("time days")?;
                hours = r.u8("time hours")?;
                minutes = r.u8("time minutes")?;
                seconds = r.u8("time seconds")?;
            }
            if n >= 12 {
                micros = r.u32("time microseconds")?;
            }
            BinaryValue::Time { negative, days, hours, minutes, seconds, micros }
        }
        _ => BinaryValue::Bytes(r.lenenc_bytes("binary row value")?),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExecState {
    First,
    Columns { left: usize },
    ColumnsEof,
    Rows,
    Done,
}

/// What one packet of an execute answer was.
#[derive(Debug, PartialEq)]
pub enum ExecuteStep {
    /// More packets are needed.
    More,
    /// The result columns are known ([`ExecuteReader::columns`]); rows follow.
    Columns,
    /// One binary row (parse it with [`parse_binary_row`] and the columns).
    Row,
    /// The answer is complete: the terminating OK (or the OK of a statement without rows).
    Done(OkPacket),
}

/// Sans-IO reader of the answer to COM_STMT_EXECUTE: rows are reported one by one, never
/// collected.
#[derive(Debug)]
pub struct ExecuteReader {
    capabilities: u64,
    state: ExecState,
    columns: Vec<ColumnDefinition>,
}

impl ExecuteReader {
    /// A reader for a connection with the negotiated `capabilities`.
    pub fn new(capabilities: u64) -> ExecuteReader {
        ExecuteReader { capabilities, state: ExecState::First, columns: Vec::new() }
    }

    /// The result columns (complete once [`ExecuteStep::Columns`] was returned).
    pub fn columns(&self) -> &[ColumnDefinition] {
        &self.columns
    }

    /// True once the answer is complete (or failed).
    pub fn is_done(&self) -> bool {
        self.state == ExecState::Done
    }

    fn after_columns(&mut self) -> ExecuteStep {
        self.state = if self.capabilities & crate::handshake::capability::DEPRECATE_EOF != 0 {
            ExecState::Rows
        } else {
            ExecState::ColumnsEof
        };
        if self.state == ExecState::Rows {
            ExecuteStep::Columns
        } else {
            ExecuteStep::More
        }
    }

    /// Feeds the next packet.
    ///
    /// # Errors
    /// [`Error::Server`] for an ERR packet, which may also come after some rows (a query
    /// killed, a lock wait timeout); parse errors; [`Error::Unsupported`] for multiple result
    /// sets.
    pub fn on_packet(&mut self, payload: &[u8]) -> Result<ExecuteStep> {
        if is_err(payload) {
            self.state = ExecState::Done;
            return Err(err_to_error(payload));
        }
        match self.state {
            ExecState::First => {
                if payload.first() == Some(&OK_HEADER) {
                    let ok = OkPacket::parse(payload)?;
                    return self.finish(ok);
                }
                let n = Reader::new(payload).lenenc_int("column count")?;
                if n > MAX_COLUMNS {
                    return Err(Error::TooLarge { what: "column count", len: n, max: MAX_COLUMNS });
                }
                let n = usize::try_from(n).unwrap_or(0);
                self.columns.reserve(n);
                self.state = ExecState::Columns { left: n };
                if n == 0 {
                    return Ok(self.after_columns());
                }
                Ok(ExecuteStep::More)
            }
            ExecState::Columns { left } => {
                self.columns.push(ColumnDefinition::parse(payload)?);
                self.state = ExecState::Columns { left: left.saturating_sub(1) };
                if left <= 1 {
                    return Ok(self.after_columns());
                }
                Ok(ExecuteStep::More)
            }
            ExecState::ColumnsEof => {
                EofPacket::parse(payload)?;
                self.state = ExecState::Rows;
                Ok(ExecuteStep::Columns)
            }
            ExecState::Rows => {
                if is_end_of_rows(payload, self.capabilities) {
                    let ok = if self.capabilities & crate::handshake::capability::DEPRECATE_EOF == 0 {
                        let eof = EofPacket::parse(payload)?;
                        OkPacket { status: eof.status, warnings: eof.warnings, ..OkPacket::default() }
                    } else {
                        OkPacket::parse(payload)?
                    };
                    return self.finish(ok);
                }
                if payload.first() != Some(&0x00) {
                    return Err(Error::Invalid { what: "binary row", reason: "the header byte is not 0x00".into() });
                }
                Ok(ExecuteStep::Row)
            }
            ExecState::Done => {
                Err(Error::Invalid { what: "execute answer", reason: "packet after the end of the result".into() })
            }
        }
    }

    fn finish(&mut self, ok: OkPacket) -> Result<ExecuteStep> {
        self.state = ExecState::Done;
        if ok.status & crate::packet::status::MORE_RESULTS_EXISTS != 0 {
            return Err(Error::Unsupported { what: "multiple result sets", reason: "use one statement".into() });
        }
        Ok(ExecuteStep::Done(ok))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::capability::DEPRECATE_EOF;

    fn coldef(name: &str, ty: u8, flags: u16) -> ColumnDefinition {
        ColumnDefinition { name: name.into(), column_type: ty, flags, charset: 63, ..ColumnDefinition::default() }
    }

    fn coldef_bytes(name: &str, ty: u8, flags: u16) -> Vec<u8> {
        let mut p = Vec::new();
        for s in ["def", "db", "t", "t", name, name] {
            p.push(s.len() as u8);
            p.extend_from_slice(s.as_bytes());
        }
        p.push(0x0c);
        p.extend_from_slice(&63u16.to_le_bytes());
        p.extend_from_slice(&11u32.to_le_bytes());
        p.push(ty);
        p.extend_from_slice(&flags.to_le_bytes());
        p.push(0);
        p.extend_from_slice(&[0, 0]);
        p
    }

    #[test]
    fn commands() {
        assert_eq!(com_stmt_prepare("SELECT 1"), b"\x16SELECT 1");
        assert_eq!(com_stmt_execute(7), [0x17, 7, 0, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(com_stmt_close(0x0102), [0x19, 2, 1, 0, 0]);
    }

    #[test]
    fn prepare_answers_with_and_without_eof() {
        for caps in [0, DEPRECATE_EOF] {
            let mut rd = PrepareReader::new(caps);
            // id 5, 2 columns, 0 params
            assert_eq!(rd.on_packet(&[0, 5, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0]).unwrap(), None);
            assert_eq!(rd.on_packet(&coldef_bytes("a", types::LONG, 0)).unwrap(), None);
            let last = rd.on_packet(&coldef_bytes("b", types::DOUBLE, 0)).unwrap();
            let p = if caps == 0 {
                assert_eq!(last, None);
                rd.on_packet(&[0xfe, 0, 0, 2, 0]).unwrap().unwrap()
            } else {
                last.unwrap()
            };
            assert_eq!(p.id, 5);
            assert_eq!(p.params, 0);
            assert_eq!(p.columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        }
        // one parameter, no columns
        let mut rd = PrepareReader::new(0);
        assert_eq!(rd.on_packet(&[0, 9, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]).unwrap(), None);
        assert_eq!(rd.on_packet(&coldef_bytes("?", types::LONG, 0)).unwrap(), None);
        let p = rd.on_packet(&[0xfe, 0, 0, 2, 0]).unwrap().unwrap();
        assert_eq!((p.id, p.params, p.columns.len()), (9, 1, 0));
        // an error
        let mut rd = PrepareReader::new(0);
        let e = rd.on_packet(b"\xff\x7a\x04#42S02Table 'x.y' doesn't exist").unwrap_err();
        assert!(matches!(e, Error::Server(ref s) if s.code == 1146));
        // no columns and no params: done at once
        let mut rd = PrepareReader::new(0);
        assert!(rd.on_packet(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap().is_some());
    }

    #[test]
    fn binary_rows() {
        let cols = vec![
            coldef("i", types::LONG, 0),
            coldef("u", types::LONGLONG, UNSIGNED_FLAG),
            coldef("n", types::LONG, 0),
            coldef("d", types::DATETIME, 0),
            coldef("t", types::TIME, 0),
            coldef("s", 253, 0),
            coldef("f", types::FLOAT, 0),
            coldef("y", types::YEAR, UNSIGNED_FLAG),
            coldef("z", types::DATE, 0),
        ];
        let mut row = vec![0x00];
        // NULL bitmap: column 2 ("n") is NULL -> bit 4
        row.extend_from_slice(&[0b0001_0000, 0]);
        row.extend_from_slice(&(-5i32).to_le_bytes());
        row.extend_from_slice(&u64::MAX.to_le_bytes());
        row.extend_from_slice(&[11, 0xe8, 0x07, 12, 31, 23, 59, 58]);
        row.extend_from_slice(&123_456u32.to_le_bytes());
        row.extend_from_slice(&[8, 1, 2, 0, 0, 0, 3, 4, 5]);
        row.extend_from_slice(&[3, b'a', b'b', b'c']);
        row.extend_from_slice(&1.5f32.to_le_bytes());
        row.extend_from_slice(&2024u16.to_le_bytes());
        row.push(0); // the zero date
        let mut out = Vec::new();
        parse_binary_row(&row, &cols, &mut out).unwrap();
        assert_eq!(out[0], BinaryValue::Int(-5));
        assert_eq!(out[1], BinaryValue::UInt(u64::MAX));
        assert_eq!(out[2], BinaryValue::Null);
        assert_eq!(
            out[3],
            BinaryValue::DateTime { year: 2024, month: 12, day: 31, hour: 23, minute: 59, second: 58, micros: 123_456 }
        );
        assert_eq!(out[4], BinaryValue::Time { negative: true, days: 2, hours: 3, minutes: 4, seconds: 5, micros: 0 });
        assert_eq!(out[5], BinaryValue::Bytes(b"abc"));
        assert_eq!(out[6], BinaryValue::Float(1.5));
        assert_eq!(out[7], BinaryValue::UInt(2024));
        assert_eq!(
            out[8],
            BinaryValue::DateTime { year: 0, month: 0, day: 0, hour: 0, minute: 0, second: 0, micros: 0 }
        );
        // a short row, extra bytes, a bad header, a bad date length
        assert!(parse_binary_row(&row[..row.len() - 1], &cols, &mut out).is_err());
        let mut long = row.clone();
        long.push(0);
        assert!(parse_binary_row(&long, &cols, &mut out).is_err());
        let mut bad = row.clone();
        bad[0] = 1;
        assert!(parse_binary_row(&bad, &cols, &mut out).is_err());
        let dcols = [coldef("d", types::DATE, 0)];
        assert!(parse_binary_row(&[0, 0, 5, 1, 2, 3, 4, 5], &dcols, &mut out).is_err());
    }

    #[test]
    fn execute_answers() {
        for caps in [0, DEPRECATE_EOF] {
            let mut rd = ExecuteReader::new(caps);
            assert_eq!(rd.on_packet(&[1]).unwrap(), ExecuteStep::More);
            let step = rd.on_packet(&coldef_bytes("a", types::LONG, 0)).unwrap();
            if caps == 0 {
                assert_eq!(step, ExecuteStep::More);
                assert_eq!(rd.on_packet(&[0xfe, 0, 0, 2, 0]).unwrap(), ExecuteStep::Columns);
            } else {
                assert_eq!(step, ExecuteStep::Columns);
            }
            assert_eq!(rd.columns().len(), 1);
            assert_eq!(rd.on_packet(&[0, 0, 7, 0, 0, 0]).unwrap(), ExecuteStep::Row);
            let end: &[u8] = if caps == 0 { &[0xfe, 0, 0, 2, 0] } else { &[0xfe, 0, 0, 2, 0, 0, 0] };
            assert!(matches!(rd.on_packet(end).unwrap(), ExecuteStep::Done(_)));
            assert!(rd.is_done());
            assert!(rd.on_packet(&[0]).is_err());
        }
        // an error after rows
        let mut rd = ExecuteReader::new(DEPRECATE_EOF);
        rd.on_packet(&[1]).unwrap();
        rd.on_packet(&coldef_bytes("a", types::LONG, 0)).unwrap();
        rd.on_packet(&[0, 0, 7, 0, 0, 0]).unwrap();
        assert!(matches!(rd.on_packet(b"\xff\x16\x05#70100Query execution was interrupted"), Err(Error::Server(_))));
        // a statement without a result set
        let mut rd = ExecuteReader::new(0);
        assert!(
            matches!(rd.on_packet(&[0, 1, 0, 2, 0, 0, 0]).unwrap(), ExecuteStep::Done(ok) if ok.affected_rows == 1)
        );
    }

    proptest::proptest! {
        /// Any bytes into the binary row parser and the two answer readers: a value, an error,
        /// or a request for more, never a panic.
        #[test]
        fn binary_protocol_never_panics(
            deprecate_eof: bool,
            types_ in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..8),
            packets in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), 1..10),
        ) {
            let caps = if deprecate_eof { DEPRECATE_EOF } else { 0 };
            let cols: Vec<ColumnDefinition> = types_.iter().map(|&t| coldef("c", t, u16::from(t & 1) * UNSIGNED_FLAG)).collect();
            let mut out = Vec::new();
            let mut prep = PrepareReader::new(caps);
            let mut exec = ExecuteReader::new(caps);
            for p in &packets {
                let _ = parse_binary_row(p, &cols, &mut out);
                let _ = prep.on_packet(p);
                let _ = exec.on_packet(p);
            }
        }
    }
}
