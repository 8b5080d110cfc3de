//! Text-protocol commands: COM_QUERY with its text result set, COM_PING, COM_QUIT.
//!
//! A COM_QUERY answer is an OK, an ERR, or a result set:
//!
//! | packets                 | content                                                   |
//! |-------------------------|-----------------------------------------------------------|
//! | 1                       | column count (`int<lenenc>`)                               |
//! | column count            | ColumnDefinition41                                        |
//! | 1 (without DEPRECATE_EOF) | EOF                                                     |
//! | one per row             | each value `string<lenenc>`, 0xfb for NULL                |
//! | 1                       | EOF, or with CLIENT_DEPRECATE_EOF an OK with header 0xfe  |
//!
//! [`ResultSetReader`] consumes those packets one at a time (sans-IO).
//!
//! References: <https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_com_query_response_text_resultset.html>,
//! <https://mariadb.com/kb/en/result-set-packets/>.

use crate::error::{Error, Result};
use crate::packet::{err_to_error, is_end_of_rows, is_err, EofPacket, OkPacket, EOF_HEADER, OK_HEADER};
use crate::reader::Reader;

/// COM_QUIT.
pub const COM_QUIT: u8 = 0x01;
/// COM_QUERY.
pub const COM_QUERY: u8 = 0x03;
/// COM_PING.
pub const COM_PING: u8 = 0x0e;

/// Most columns a result set may announce (MySQL's table limit is 4096).
pub const MAX_COLUMNS: u64 = 4096;

/// The COM_QUERY payload: 0x03 then the statement text.
pub fn com_query(sql: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(1 + sql.len());
    v.push(COM_QUERY);
    v.extend_from_slice(sql.as_bytes());
    v
}

/// The COM_PING payload (answered with OK).
pub fn com_ping() -> Vec<u8> {
    vec![COM_PING]
}

/// The COM_QUIT payload (the server closes the connection; no answer).
pub fn com_quit() -> Vec<u8> {
    vec![COM_QUIT]
}

/// A ColumnDefinition41 packet.
///
/// | bytes  | field                          |
/// |--------|--------------------------------|
/// | lenenc | catalog (`def`)                |
/// | lenenc | schema                         |
/// | lenenc | table alias                    |
/// | lenenc | original table                 |
/// | lenenc | column alias                   |
/// | lenenc | original column                |
/// | lenenc | length of fixed fields (0x0c)  |
/// | 2      | collation id                   |
/// | 4      | column length                  |
/// | 1      | column type (`MYSQL_TYPE_*`)   |
/// | 2      | flags                          |
/// | 1      | decimals                       |
/// | 2      | filler                         |
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ColumnDefinition {
    /// Schema name.
    pub schema: String,
    /// Table alias.
    pub table: String,
    /// Original table name.
    pub org_table: String,
    /// Column alias (what the select list calls it).
    pub name: String,
    /// Original column name.
    pub org_name: String,
    /// Collation id (63 is binary).
    pub charset: u16,
    /// Maximum display length.
    pub column_length: u32,
    /// `MYSQL_TYPE_*` code.
    pub column_type: u8,
    /// Column flags (NOT_NULL 1, PRI_KEY 2, UNSIGNED 32, BINARY 128, ...).
    pub flags: u16,
    /// Decimals.
    pub decimals: u8,
}

impl ColumnDefinition {
    /// Parses a ColumnDefinition41 packet.
    ///
    /// # Errors
    /// [`Error::Truncated`] or [`Error::Invalid`].
    pub fn parse(payload: &[u8]) -> Result<ColumnDefinition> {
        let mut r = Reader::new(payload);
        let s = |r: &mut Reader<'_>, what| -> Result<String> {
            Ok(String::from_utf8_lossy(r.lenenc_bytes(what)?).into_owned())
        };
        let _catalog = r.lenenc_bytes("column catalog")?;
        let schema = s(&mut r, "column schema")?;
        let table = s(&mut r, "column table")?;
        let org_table = s(&mut r, "column original table")?;
        let name = s(&mut r, "column name")?;
        let org_name = s(&mut r, "column original name")?;
        let _fixed = r.lenenc_int("column fixed-length fields")?;
        let charset = r.u16("column charset")?;
        let column_length = r.u32("column length")?;
        let column_type = r.u8("column type")?;
        let flags = r.u16("column flags")?;
        let decimals = r.u8("column decimals")?;
        Ok(ColumnDefinition {
            schema,
            table,
            org_table,
            name,
            org_name,
            charset,
            column_length,
            column_type,
            flags,
            decimals,
        })
    }
}

/// One row of a text result set: each value's bytes, `None` for SQL NULL.
pub type Row = Vec<Option<Vec<u8>>>;

/// A complete text result set (or the OK of a statement that returns none).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResultSet {
    /// The columns (empty for statements without a result set).
    pub columns: Vec<ColumnDefinition>,
    /// The rows.
    pub rows: Vec<Row>,
    /// The OK packet of a statement without a result set, or the terminating OK/EOF's status
    /// and warnings.
    pub ok: OkPacket,
}

impl ResultSet {
    /// The index of the column named `name` (ASCII case-insensitive).
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name.eq_ignore_ascii_case(name))
    }

    /// The value at `row`, `col` as text (lossy UTF-8); `None` for NULL or out of range.
    pub fn get_str(&self, row: usize, col: usize) -> Option<String> {
        let v = self.rows.get(row)?.get(col)?.as_ref()?;
        Some(String::from_utf8_lossy(v).into_owned())
    }

    /// Every row as text (lossy UTF-8), NULL as `None`.
    pub fn to_strings(&self) -> Vec<Vec<Option<String>>> {
        self.rows
            .iter()
            .map(|row| row.iter().map(|v| v.as_ref().map(|b| String::from_utf8_lossy(b).into_owned())).collect())
            .collect()
    }
}

/// Parses one text-protocol row of `columns` values.
///
/// # Errors
/// [`Error::Truncated`] when a value's length exceeds the packet; [`Error::Invalid`] when
/// bytes remain after the last value.
pub fn parse_text_row(payload: &[u8], columns: usize) -> Result<Row> {
    let mut r = Reader::new(payload);
    let mut row = Vec::with_capacity(columns);
    for _ in 0..columns {
        match r.lenenc_int_or_null("row value length")? {
            None => row.push(None),
            Some(n) => row.push(Some(r.take_u64(n, "row value")?.to_vec())),
        }
    }
    if !r.is_empty() {
        return Err(Error::Invalid {
            what: "text row",
            reason: format!("{} bytes after the last value", r.remaining()),
        });
    }
    Ok(row)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    First,
    Columns { left: usize },
    ColumnsEof,
    Rows,
    Done,
}

/// Sans-IO reader of the answer to COM_QUERY.
#[derive(Debug)]
pub struct ResultSetReader {
    capabilities: u64,
    state: State,
    result: ResultSet,
}

impl ResultSetReader {
    /// A reader for a connection with the negotiated `capabilities` (CLIENT_DEPRECATE_EOF
    /// decides how column definitions and rows end).
    pub fn new(capabilities: u64) -> ResultSetReader {
        ResultSetReader { capabilities, state: State::First, result: ResultSet::default() }
    }

    /// Feeds the next packet; returns the result once it is complete.
    ///
    /// # Errors
    /// [`Error::Server`] for an ERR packet; [`Error::Unsupported`] for LOCAL INFILE requests;
    /// [`Error::TooLarge`] for more than [`MAX_COLUMNS`] columns; parse errors.
    pub fn on_packet(&mut self, payload: &[u8]) -> Result<Option<ResultSet>> {
        if is_err(payload) {
            self.state = State::Done;
            return Err(err_to_error(payload));
        }
        match self.state {
            State::First => match payload.first() {
                Some(&OK_HEADER) => {
                    self.result.ok = OkPacket::parse(payload)?;
                    self.finish()
                }
                Some(&0xfb) => Err(Error::Unsupported { what: "LOCAL INFILE request", reason: "not supported".into() }),
                _ => {
                    let n = Reader::new(payload).lenenc_int("column count")?;
                    if n > MAX_COLUMNS {
                        return Err(Error::TooLarge { what: "column count", len: n, max: MAX_COLUMNS });
                    }
                    let n = usize::try_from(n).unwrap_or(0);
                    self.result.columns.reserve(n);
                    self.state = State::Columns { left: n };
                    if n == 0 {
                        self.after_columns();
                    }
                    Ok(None)
                }
            },
            State::Columns { left } => {
                self.result.columns.push(ColumnDefinition::parse(payload)?);
                self.state = State::Columns { left: left.saturating_sub(1) };
                if left <= 1 {
                    self.after_columns();
                }
                Ok(None)
            }
            State::ColumnsEof => {
                EofPacket::parse(payload)?;
                self.state = State::Rows;
                Ok(None)
            }
            State::Rows => {
                if is_end_of_rows(payload, self.capabilities) {
                    if payload.first() == Some(&EOF_HEADER)
                        && payload.len() < 9
                        && self.capabilities & crate::handshake::capability::DEPRECATE_EOF == 0
                    {
                        let eof = EofPacket::parse(payload)?;
                        self.result.ok.status = eof.status;
                        self.result.ok.warnings = eof.warnings;
                    } else {
                        self.result.ok = OkPacket::parse(payload)?;
                    }
                    return self.finish();
                }
                let row = parse_text_row(payload, self.result.columns.len())?;
                self.result.rows.push(row);
                Ok(None)
            }
            State::Done => {
                Err(Error::Invalid { what: "query response", reason: "packet after the end of the result".into() })
            }
        }
    }

    fn after_columns(&mut self) {
        self.state = if self.capabilities & crate::handshake::capability::DEPRECATE_EOF != 0 {
            State::Rows
        } else {
            State::ColumnsEof
        };
    }

    fn finish(&mut self) -> Result<Option<ResultSet>> {
        self.state = State::Done;
        if self.result.ok.status & crate::packet::status::MORE_RESULTS_EXISTS != 0 {
            return Err(Error::Unsupported {
                what: "multiple result sets",
                reason: "use one statement per query".into(),
            });
        }
        Ok(Some(std::mem::take(&mut self.result)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::capability::DEPRECATE_EOF;

    fn coldef(name: &str) -> Vec<u8> {
        let mut p = Vec::new();
        for s in ["def", "", "", "", name, ""] {
            p.push(s.len() as u8);
            p.extend_from_slice(s.as_bytes());
        }
        p.push(0x0c); // fixed fields
        p.extend_from_slice(&[0x2d, 0x00]); // utf8mb4
        p.extend_from_slice(&[0x04, 0x00, 0x00, 0x00]); // length
        p.push(0xfd); // VAR_STRING
        p.extend_from_slice(&[0x00, 0x00]); // flags
        p.push(0x27); // decimals
        p.extend_from_slice(&[0x00, 0x00]); // filler
        p
    }

    #[test]
    fn select_with_nulls_classic_eof() {
        let mut rd = ResultSetReader::new(0);
        assert_eq!(rd.on_packet(&[0x02]).unwrap(), None); // 2 columns
        assert_eq!(rd.on_packet(&coldef("a")).unwrap(), None);
        assert_eq!(rd.on_packet(&coldef("b")).unwrap(), None);
        assert_eq!(rd.on_packet(&[0xfe, 0, 0, 2, 0]).unwrap(), None); // EOF after columns
        assert_eq!(rd.on_packet(&[0x01, b'x', 0xfb]).unwrap(), None); // 'x', NULL
        assert_eq!(rd.on_packet(&[0x00, 0x01, b'y']).unwrap(), None); // '', 'y'
        let rs = rd.on_packet(&[0xfe, 0, 0, 2, 0]).unwrap().unwrap();
        assert_eq!(rs.columns.len(), 2);
        assert_eq!(rs.columns[1].name, "b");
        assert_eq!(rs.column_index("B"), Some(1));
        assert_eq!(rs.rows, vec![vec![Some(b"x".to_vec()), None], vec![Some(vec![]), Some(b"y".to_vec())]]);
        assert_eq!(rs.get_str(1, 1).as_deref(), Some("y"));
        assert_eq!(rs.to_strings()[0], vec![Some("x".to_string()), None]);
        assert!(rd.on_packet(&[0x00]).is_err());
    }

    #[test]
    fn deprecate_eof_ending() {
        let mut rd = ResultSetReader::new(DEPRECATE_EOF);
        assert_eq!(rd.on_packet(&[0x01]).unwrap(), None);
        assert_eq!(rd.on_packet(&coldef("a")).unwrap(), None);
        assert_eq!(rd.on_packet(&[0x01, b'1']).unwrap(), None); // a row directly, no EOF
        let rs = rd.on_packet(&[0xfe, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00]).unwrap().unwrap();
        assert_eq!(rs.rows.len(), 1);
        assert_eq!(rs.ok.status, 2);
    }

    #[test]
    fn ok_err_and_bad_rows() {
        let mut rd = ResultSetReader::new(0);
        let rs = rd.on_packet(&[0x00, 0x03, 0x00, 0x02, 0x00, 0x00, 0x00]).unwrap().unwrap();
        assert_eq!(rs.ok.affected_rows, 3);
        assert!(rs.columns.is_empty());
        let mut rd = ResultSetReader::new(0);
        let e = rd.on_packet(b"\xff\x28\x04#42000You have an error").unwrap_err();
        assert!(matches!(e, Error::Server(ref s) if s.code == 1064));
        let mut rd = ResultSetReader::new(0);
        assert!(matches!(rd.on_packet(&[0xfc, 0xff, 0xff]), Err(Error::TooLarge { .. })));
        assert!(parse_text_row(&[0x05, b'a'], 1).is_err());
        assert!(parse_text_row(&[0x01, b'a', 0x00], 1).is_err());
        assert_eq!(com_query("SELECT 1"), b"\x03SELECT 1");
    }

    proptest::proptest! {
        /// Any packet sequence into the result-set reader: a result, an error, or a request for
        /// more, never a panic (and never a column vector sized by a wild count).
        #[test]
        fn result_set_reader_never_panics(
            deprecate_eof: bool,
            packets in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), 1..12),
        ) {
            let mut rs = ResultSetReader::new(if deprecate_eof { DEPRECATE_EOF } else { 0 });
            for p in &packets {
                if !matches!(rs.on_packet(p), Ok(None)) {
                    break;
                }
            }
            for p in &packets {
                let _ = parse_text_row(p, usize::from(p.first().copied().unwrap_or(0)));
                let _ = ColumnDefinition::parse(p);
            }
        }
    }
}
