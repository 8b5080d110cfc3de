//! The protocol crate's one error type.

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while reading or speaking the protocol.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// Fewer bytes remain than a field needs: the input is truncated or corrupt.
    #[error("truncated {what}: needed {needed} bytes, {remaining} remain")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        remaining: usize,
    },
    /// A length read from the input exceeds a configured cap.
    #[error("{what} of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// What was being sized.
        what: &'static str,
        /// Requested length.
        len: u64,
        /// Configured maximum.
        max: u64,
    },
    /// A value is malformed (bad text form of a GTID set, an impossible length encoding, ...).
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What was being parsed.
        what: &'static str,
        /// Why it is invalid.
        reason: String,
    },
}
