//! The connection phase: the server's initial handshake (protocol v10), the client's
//! SSLRequest and HandshakeResponse41, and the capability flags both sides negotiate.
//!
//! Capabilities are kept as a `u64`: the low 32 bits are MySQL's `CLIENT_*` flags, the high 32
//! bits MariaDB's extended capabilities, which a MariaDB server sends in the last 4 of the 10
//! reserved bytes of its handshake when it clears bit 0 (`CLIENT_MYSQL`, MySQL's
//! `CLIENT_LONG_PASSWORD`) to say "I am MariaDB". Since MariaDB 10.2.
//!
//! References: <https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_connection_phase_packets_protocol_handshake_v10.html>,
//! <https://mariadb.com/kb/en/connection/>.

use crate::error::{Error, Result};
use crate::reader::{put_lenenc_int, Reader};

/// Capability flags (`CLIENT_*`); MariaDB's extended ones are shifted into the high 32 bits.
pub mod capability {
    /// CLIENT_LONG_PASSWORD; MariaDB calls it CLIENT_MYSQL (cleared by MariaDB servers).
    pub const LONG_PASSWORD: u64 = 1;
    /// CLIENT_FOUND_ROWS.
    pub const FOUND_ROWS: u64 = 1 << 1;
    /// CLIENT_LONG_FLAG: all column flags.
    pub const LONG_FLAG: u64 = 1 << 2;
    /// CLIENT_CONNECT_WITH_DB: a default schema in the handshake response.
    pub const CONNECT_WITH_DB: u64 = 1 << 3;
    /// CLIENT_COMPRESS.
    pub const COMPRESS: u64 = 1 << 5;
    /// CLIENT_LOCAL_FILES.
    pub const LOCAL_FILES: u64 = 1 << 7;
    /// CLIENT_PROTOCOL_41.
    pub const PROTOCOL_41: u64 = 1 << 9;
    /// CLIENT_SSL: switch to TLS after the SSLRequest.
    pub const SSL: u64 = 1 << 11;
    /// CLIENT_TRANSACTIONS.
    pub const TRANSACTIONS: u64 = 1 << 13;
    /// CLIENT_SECURE_CONNECTION (4.1 authentication).
    pub const SECURE_CONNECTION: u64 = 1 << 15;
    /// CLIENT_MULTI_STATEMENTS.
    pub const MULTI_STATEMENTS: u64 = 1 << 16;
    /// CLIENT_MULTI_RESULTS.
    pub const MULTI_RESULTS: u64 = 1 << 17;
    /// CLIENT_PS_MULTI_RESULTS.
    pub const PS_MULTI_RESULTS: u64 = 1 << 18;
    /// CLIENT_PLUGIN_AUTH.
    pub const PLUGIN_AUTH: u64 = 1 << 19;
    /// CLIENT_CONNECT_ATTRS.
    pub const CONNECT_ATTRS: u64 = 1 << 20;
    /// CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA.
    pub const PLUGIN_AUTH_LENENC_CLIENT_DATA: u64 = 1 << 21;
    /// CLIENT_SESSION_TRACK.
    pub const SESSION_TRACK: u64 = 1 << 23;
    /// CLIENT_DEPRECATE_EOF: OK packets (header 0xfe) instead of EOF packets.
    pub const DEPRECATE_EOF: u64 = 1 << 24;
    /// MariaDB MARIADB_CLIENT_PROGRESS (extended capability bit 0).
    pub const MARIADB_PROGRESS: u64 = 1 << 32;
    /// MariaDB MARIADB_CLIENT_STMT_BULK_OPERATIONS (extended capability bit 2).
    pub const MARIADB_STMT_BULK_OPERATIONS: u64 = 1 << 34;
    /// MariaDB MARIADB_CLIENT_EXTENDED_METADATA (extended capability bit 3).
    pub const MARIADB_EXTENDED_METADATA: u64 = 1 << 35;
}

/// Character set `utf8mb4_general_ci`, the collation id we announce.
pub const UTF8MB4_GENERAL_CI: u8 = 45;

/// The server's first packet, protocol version 10.
///
/// | bytes      | field                                                        |
/// |------------|--------------------------------------------------------------|
/// | 1          | protocol version (10)                                        |
/// | NUL        | server version (`5.5.5-10.11.19-MariaDB-...` for MariaDB)    |
/// | 4          | connection id                                                |
/// | 8          | auth plugin data, part 1                                     |
/// | 1          | filler 0x00                                                  |
/// | 2          | capability flags, low 16 bits                                |
/// | 1          | default character set                                        |
/// | 2          | status flags                                                 |
/// | 2          | capability flags, high 16 bits                               |
/// | 1          | auth plugin data length (0 without CLIENT_PLUGIN_AUTH)       |
/// | 6 + 4      | reserved; MariaDB: 6 zero bytes + extended capabilities      |
/// | max(13, len - 8) | auth plugin data, part 2 (with CLIENT_SECURE_CONNECTION) |
/// | NUL        | auth plugin name (with CLIENT_PLUGIN_AUTH; NUL may be absent) |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialHandshake {
    /// Protocol version, always 10.
    pub protocol_version: u8,
    /// The server's version string.
    pub server_version: String,
    /// The connection (thread) id.
    pub connection_id: u32,
    /// Auth plugin data, parts 1 and 2 joined, without the trailing NUL (20 bytes usually).
    pub auth_plugin_data: Vec<u8>,
    /// Capability flags: MySQL's in the low 32 bits, MariaDB's extended ones in the high 32.
    pub capabilities: u64,
    /// The server's default collation id.
    pub charset: u8,
    /// Server status flags.
    pub status: u16,
    /// The default auth plugin's name (`mysql_native_password` when none is sent).
    pub auth_plugin_name: String,
}

impl InitialHandshake {
    /// Parses the initial handshake packet.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a protocol version other than 10; [`Error::Truncated`].
    pub fn parse(payload: &[u8]) -> Result<InitialHandshake> {
        let mut r = Reader::new(payload);
        let protocol_version = r.u8("handshake protocol version")?;
        if protocol_version != 10 {
            return Err(Error::Unsupported {
                what: "handshake protocol version",
                reason: format!("{protocol_version} (only 10 is supported)"),
            });
        }
        let server_version = String::from_utf8_lossy(r.nul_bytes("handshake server version")?).into_owned();
        let connection_id = r.u32("handshake connection id")?;
        let mut auth_plugin_data = r.take(8, "handshake auth plugin data part 1")?.to_vec();
        r.skip(1, "handshake filler")?;
        let mut capabilities = u64::from(r.u16("handshake capabilities low")?);
        let mut charset = 0;
        let mut status = 0;
        let mut auth_plugin_name = String::from("mysql_native_password");
        if !r.is_empty() {
            charset = r.u8("handshake charset")?;
            status = r.u16("handshake status")?;
            capabilities |= u64::from(r.u16("handshake capabilities high")?) << 16;
            let data_len = r.u8("handshake auth plugin data length")?;
            r.skip(6, "handshake reserved")?;
            let ext = r.u32("handshake MariaDB extended capabilities")?;
            if capabilities & capability::LONG_PASSWORD == 0 {
                capabilities |= u64::from(ext) << 32;
            }
            if capabilities & capability::SECURE_CONNECTION != 0 {
                let n = usize::from(data_len).saturating_sub(8).max(13);
                let part2 = r.take(n.min(r.remaining()), "handshake auth plugin data part 2")?;
                auth_plugin_data.extend_from_slice(part2);
                if auth_plugin_data.last() == Some(&0) {
                    auth_plugin_data.pop();
                }
            }
            if capabilities & capability::PLUGIN_AUTH != 0 {
                // Some MySQL 5.5 servers omit the terminating NUL.
                let name = match r.nul_bytes("handshake auth plugin name") {
                    Ok(n) => n,
                    Err(_) => r.take_rest(),
                };
                auth_plugin_name = String::from_utf8_lossy(name).into_owned();
            }
        }
        Ok(InitialHandshake {
            protocol_version,
            server_version,
            connection_id,
            auth_plugin_data,
            capabilities,
            charset,
            status,
            auth_plugin_name,
        })
    }

    /// True for a MariaDB server (its version string contains `MariaDB`; MariaDB also clears
    /// `CLIENT_MYSQL`).
    pub fn is_mariadb(&self) -> bool {
        self.server_version.contains("MariaDB")
    }

    /// The version without MariaDB's `5.5.5-` replication-compatibility prefix.
    pub fn display_version(&self) -> &str {
        match self.server_version.strip_prefix("5.5.5-") {
            Some(v) if self.is_mariadb() => v,
            _ => &self.server_version,
        }
    }
}

/// The capabilities this client asks for, given what the server offers and whether TLS and a
/// default schema are wanted. CLIENT_DEPRECATE_EOF is taken when offered (every result-set
/// reader in this crate handles both endings).
pub fn client_capabilities(server: u64, tls: bool, with_db: bool) -> u64 {
    let mut wanted = capability::LONG_PASSWORD
        | capability::LONG_FLAG
        | capability::PROTOCOL_41
        | capability::TRANSACTIONS
        | capability::SECURE_CONNECTION
        | capability::PLUGIN_AUTH
        | capability::PLUGIN_AUTH_LENENC_CLIENT_DATA
        | capability::DEPRECATE_EOF;
    if tls {
        wanted |= capability::SSL;
    }
    if with_db {
        wanted |= capability::CONNECT_WITH_DB;
    }
    // Only the low 32 bits: we set CLIENT_MYSQL, so no MariaDB extended capabilities apply.
    wanted & server & 0xffff_ffff
}

/// The 32-byte prefix shared by SSLRequest and HandshakeResponse41.
fn put_prefix(out: &mut Vec<u8>, capabilities: u64, max_packet_size: u32, charset: u8) {
    out.extend_from_slice(&((capabilities & 0xffff_ffff) as u32).to_le_bytes());
    out.extend_from_slice(&max_packet_size.to_le_bytes());
    out.push(charset);
    out.extend_from_slice(&[0u8; 19]);
    // MariaDB extended client capabilities (zero when CLIENT_MYSQL is set).
    let ext = if capabilities & capability::LONG_PASSWORD == 0 { (capabilities >> 32) as u32 } else { 0 };
    out.extend_from_slice(&ext.to_le_bytes());
}

/// The SSLRequest packet: the first 32 bytes of a handshake response with CLIENT_SSL, after
/// which the client starts TLS and then sends the full [`HandshakeResponse`].
///
/// | bytes | field                     |
/// |-------|---------------------------|
/// | 4     | client capabilities       |
/// | 4     | max packet size           |
/// | 1     | character set             |
/// | 19    | zero filler               |
/// | 4     | MariaDB extended capabilities (zero here) |
pub fn ssl_request(capabilities: u64, max_packet_size: u32, charset: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    put_prefix(&mut out, capabilities | capability::SSL, max_packet_size, charset);
    out
}

/// HandshakeResponse41.
///
/// | bytes   | field                                                        |
/// |---------|--------------------------------------------------------------|
/// | 32      | as [`ssl_request`]                                           |
/// | NUL     | user name                                                    |
/// | lenenc  | auth response (1-byte length without PLUGIN_AUTH_LENENC_CLIENT_DATA) |
/// | NUL     | schema (with CLIENT_CONNECT_WITH_DB)                         |
/// | NUL     | auth plugin name (with CLIENT_PLUGIN_AUTH)                   |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeResponse {
    /// Negotiated capabilities (see [`client_capabilities`]).
    pub capabilities: u64,
    /// Largest packet the client will send.
    pub max_packet_size: u32,
    /// Collation id.
    pub charset: u8,
    /// User name.
    pub user: String,
    /// The plugin's first response (a scramble, signature, ...).
    pub auth_response: Vec<u8>,
    /// Default schema (sent only with CLIENT_CONNECT_WITH_DB).
    pub database: Option<String>,
    /// The plugin `auth_response` was computed with.
    pub auth_plugin_name: String,
}

impl HandshakeResponse {
    /// Serializes the payload.
    ///
    /// # Errors
    /// [`Error::Invalid`] when a name contains a NUL byte or the auth response does not fit
    /// its one-byte length.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let caps = self.capabilities;
        let mut out = Vec::with_capacity(64 + self.user.len() + self.auth_response.len());
        put_prefix(&mut out, caps, self.max_packet_size, self.charset);
        put_nul_str(&mut out, &self.user, "user name")?;
        if caps & capability::PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            put_lenenc_int(&mut out, self.auth_response.len() as u64);
            out.extend_from_slice(&self.auth_response);
        } else if caps & capability::SECURE_CONNECTION != 0 {
            let n = u8::try_from(self.auth_response.len()).map_err(|_| Error::Invalid {
                what: "auth response",
                reason: "longer than 255 bytes without CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA".into(),
            })?;
            out.push(n);
            out.extend_from_slice(&self.auth_response);
        } else {
            out.extend_from_slice(&self.auth_response);
            out.push(0);
        }
        if caps & capability::CONNECT_WITH_DB != 0 {
            put_nul_str(&mut out, self.database.as_deref().unwrap_or(""), "database name")?;
        }
        if caps & capability::PLUGIN_AUTH != 0 {
            put_nul_str(&mut out, &self.auth_plugin_name, "auth plugin name")?;
        }
        Ok(out)
    }
}

pub(crate) fn put_nul_str(out: &mut Vec<u8>, s: &str, what: &'static str) -> Result<()> {
    if s.as_bytes().contains(&0) {
        return Err(Error::Invalid { what, reason: "contains a NUL byte".into() });
    }
    out.extend_from_slice(s.as_bytes());
    out.push(0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A MariaDB 10.11.19 handshake as captured from the server here (scramble bytes replaced).
    fn mariadb_handshake() -> Vec<u8> {
        let mut p = vec![0x0a]; // protocol 10
        p.extend_from_slice(b"5.5.5-10.11.19-MariaDB-0+deb12u1-log\0");
        p.extend_from_slice(&[0x05, 0x00, 0x00, 0x00]); // connection id 5
        p.extend_from_slice(b"ABCDEFGH"); // scramble part 1
        p.push(0); // filler
        p.extend_from_slice(&[0xfe, 0xf7]); // capabilities low: CLIENT_MYSQL cleared, no SSL
        p.push(45); // charset
        p.extend_from_slice(&[0x02, 0x00]); // status: autocommit
        p.extend_from_slice(&[0xff, 0x81]); // capabilities high
        p.push(21); // auth data length
        p.extend_from_slice(&[0; 6]); // reserved
        p.extend_from_slice(&[0x1d, 0x00, 0x00, 0x00]); // MariaDB extended capabilities
        p.extend_from_slice(b"IJKLMNOPQRST\0"); // scramble part 2 + NUL
        p.extend_from_slice(b"mysql_native_password\0");
        p
    }

    #[test]
    fn parse_mariadb_handshake() {
        let h = InitialHandshake::parse(&mariadb_handshake()).unwrap();
        assert_eq!(h.server_version, "5.5.5-10.11.19-MariaDB-0+deb12u1-log");
        assert_eq!(h.display_version(), "10.11.19-MariaDB-0+deb12u1-log");
        assert!(h.is_mariadb());
        assert_eq!(h.connection_id, 5);
        assert_eq!(h.auth_plugin_data, b"ABCDEFGHIJKLMNOPQRST");
        assert_eq!(h.capabilities & 0xffff_ffff, 0x81ff_f7fe);
        assert_eq!(h.capabilities >> 32, 0x1d);
        // the captured server had no TLS configured
        assert_eq!(h.capabilities & capability::SSL, 0);
        assert_ne!(h.capabilities & capability::DEPRECATE_EOF, 0);
        assert_eq!(h.charset, 45);
        assert_eq!(h.status, 2);
        assert_eq!(h.auth_plugin_name, "mysql_native_password");
    }

    #[test]
    fn mysql_handshake_ignores_reserved_bytes() {
        let mut p = mariadb_handshake();
        // set CLIENT_MYSQL (MySQL servers): the last 4 reserved bytes are not capabilities
        let caps_at = 1 + b"5.5.5-10.11.19-MariaDB-0+deb12u1-log\0".len() + 4 + 8 + 1;
        p[caps_at] = 0xff;
        let h = InitialHandshake::parse(&p).unwrap();
        assert_eq!(h.capabilities >> 32, 0);
    }

    #[test]
    fn truncated_handshakes_error() {
        let p = mariadb_handshake();
        for n in 0..40 {
            assert!(InitialHandshake::parse(&p[..n]).is_err(), "prefix {n}");
        }
        assert!(InitialHandshake::parse(&[9]).is_err());
    }

    #[test]
    fn handshake_response_layout() {
        let caps = client_capabilities(u64::MAX, false, true);
        assert_eq!(caps & capability::SSL, 0);
        let r = HandshakeResponse {
            capabilities: caps,
            max_packet_size: 0x0100_0000,
            charset: UTF8MB4_GENERAL_CI,
            user: "root".into(),
            auth_response: vec![1, 2, 3],
            database: Some("db".into()),
            auth_plugin_name: "mysql_native_password".into(),
        };
        let b = r.encode().unwrap();
        let mut rd = Reader::new(&b);
        assert_eq!(u64::from(rd.u32("caps").unwrap()), caps);
        assert_eq!(rd.u32("max").unwrap(), 0x0100_0000);
        assert_eq!(rd.u8("charset").unwrap(), 45);
        assert_eq!(rd.take(23, "filler").unwrap(), &[0; 23]);
        assert_eq!(rd.nul_bytes("user").unwrap(), b"root");
        assert_eq!(rd.lenenc_bytes("auth").unwrap(), &[1, 2, 3]);
        assert_eq!(rd.nul_bytes("db").unwrap(), b"db");
        assert_eq!(rd.nul_bytes("plugin").unwrap(), b"mysql_native_password");
        assert!(rd.is_empty());
        let ssl = ssl_request(caps, 0x0100_0000, 45);
        assert_eq!(ssl.len(), 32);
        assert_ne!(u32::from_le_bytes([ssl[0], ssl[1], ssl[2], ssl[3]]) & (capability::SSL as u32), 0);
        let bad = HandshakeResponse { user: "a\0b".into(), ..r };
        assert!(bad.encode().is_err());
    }
}
