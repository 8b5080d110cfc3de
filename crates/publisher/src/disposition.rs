//! What happens after an error, as every error type of the publisher answers it: the one
//! vocabulary the restart loop of `sluice run` decides by (no error is classified by searching
//! its text).

/// What the caller does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Try the same call again (briefly): the other side is busy or moving a leader.
    Retry,
    /// Transient: abort the open Kafka transaction and start the pipeline again from the last
    /// committed checkpoint (a broker or registry away, a reconnect that gave up).
    Restart,
    /// Not a failure: this source's own predecessor, stopped or killed moments ago, still
    /// holds its server id; the server drops it within a few heartbeat periods, then start again.
    WaitForPredecessor,
    /// Definite: stop with an operator message (exit 1): fenced, refused, undecodable, a
    /// start the server cannot serve, a record too large.
    Stop,
}
