//! The restart policy of the long-running commands (`sluice run`, `sluice sink`), written once:
//! one attempt after another, each failure answered by its [`Disposition`]. `Stop` ends the
//! command with exit 1 and the error on stderr; `Restart` and `Retry` start again after a
//! backoff of 1 s doubling to 30 s (back to 1 s after an attempt that lasted a minute);
//! `WaitForPredecessor` waits as long as the command says. A stop asked for ([`Shutdown`])
//! ends the wait at once and the command with exit 0. What differs between the commands (what
//! an attempt is, failing over, marking the checkpoint stopped) is the [`Supervised`] impl's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Exit;
use crate::disposition::Disposition;
use crate::metrics::Served;
use crate::process::Shutdown;

/// The first wait after a failure, and its bound.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// An attempt that lasted this long was healthy: the next failure waits `BACKOFF_FIRST` again.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);

/// A component the supervisor restarts.
pub(crate) trait Supervised {
    /// Why an attempt failed.
    type Error: std::fmt::Display;
    /// The command's name, in front of its stop message ("sluice run").
    const NAME: &'static str;
    /// What a restart starts from, logged with the error ("Restarting from ...").
    const RESTARTING: &'static str;

    /// What happens after `e`.
    fn disposition(e: &Self::Error) -> Disposition;

    /// One attempt, until a stop asked for ends it (`Ok`) or an error does.
    async fn attempt(&mut self, shutdown: &Shutdown) -> Result<(), Self::Error>;

    /// An attempt ended, whatever way (not ready until the next one is), and when a restart
    /// follows, it is counted.
    fn ended(&mut self, restarting: bool);

    /// Before the wait that follows a failed attempt begun at `started` (failing over to
    /// another server, say); true to start the backoff over.
    fn restarting(&mut self, _e: &Self::Error, _started: Instant) -> bool {
        false
    }

    /// How long to wait for a predecessor still holding what this one needs.
    fn predecessor_wait(&self) -> Duration {
        BACKOFF_FIRST
    }

    /// The command ends after failed attempt `e` (an error that stops, or a stop asked for
    /// meanwhile): last words, such as marking the checkpoint stopped.
    async fn stopping(&mut self, _e: &Self::Error) {}
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `listen` (if set) for the rest of the
/// process; bound before anything else starts, so a taken port is a configuration error
/// (exit 2) at once.
pub(crate) async fn serve_metrics<M: Served>(
    name: &str,
    listen: Option<std::net::SocketAddr>,
    metrics: &Arc<M>,
) -> Result<(), Exit> {
    let Some(addr) = listen else { return Ok(()) };
    match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => {
            // the address bound: with port 0 the system picks the port, and this says which
            let addr = listener.local_addr().unwrap_or(addr);
            tracing::info!(%addr, "Serving /metrics, /healthz and /readyz");
            tokio::spawn(crate::metrics::serve(listener, Arc::clone(metrics)));
            Ok(())
        }
        Err(e) => {
            crate::eline!("{name}: metrics.listen {addr}: {e}");
            Err(Exit::Usage)
        }
    }
}

/// Runs attempts of `s` until one ends with a stop asked for or an error that stops.
pub(crate) async fn supervise<S: Supervised>(s: &mut S, shutdown: &Shutdown) -> Exit {
    let mut backoff = BACKOFF_FIRST;
    loop {
        let started = Instant::now();
        let outcome = s.attempt(shutdown).await;
        let Err(e) = outcome else {
            s.ended(false);
            return Exit::Ok;
        };
        let disposition = S::disposition(&e);
        let restarts = matches!(disposition, Disposition::Restart | Disposition::Retry) && !shutdown.is_requested();
        s.ended(restarts);
        let wait = match disposition {
            Disposition::Stop => {
                tracing::error!("{e}");
                s.stopping(&e).await;
                crate::eline!("{}: {e}", S::NAME);
                return Exit::Failure;
            }
            _ if shutdown.is_requested() => {
                s.stopping(&e).await;
                return Exit::Ok;
            }
            Disposition::WaitForPredecessor => s.predecessor_wait(),
            Disposition::Restart | Disposition::Retry => {
                if started.elapsed() > HEALTHY_AFTER || s.restarting(&e, started) {
                    backoff = BACKOFF_FIRST;
                }
                tracing::warn!(error = %e, wait = ?backoff, "{}", S::RESTARTING);
                let wait = backoff;
                backoff = (backoff * 2).min(BACKOFF_MAX);
                wait
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shutdown.requested() => return Exit::Ok,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component whose attempts fail as scripted; no server is involved.
    struct Scripted {
        outcomes: Vec<Result<(), Disposition>>,
        restarts: usize,
        stopped: bool,
    }

    impl Supervised for Scripted {
        type Error = String;
        const NAME: &'static str = "scripted";
        const RESTARTING: &'static str = "Restarting";

        fn disposition(e: &String) -> Disposition {
            match e.as_str() {
                "stop" => Disposition::Stop,
                "wait" => Disposition::WaitForPredecessor,
                _ => Disposition::Restart,
            }
        }

        async fn attempt(&mut self, _shutdown: &Shutdown) -> Result<(), String> {
            match self.outcomes.remove(0) {
                Ok(()) => Ok(()),
                Err(Disposition::Stop) => Err("stop".into()),
                Err(Disposition::WaitForPredecessor) => Err("wait".into()),
                Err(_) => Err("restart".into()),
            }
        }

        fn ended(&mut self, restarting: bool) {
            self.restarts += usize::from(restarting);
        }

        async fn stopping(&mut self, _e: &String) {
            self.stopped = true;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn restarts_until_an_error_stops_it() {
        let (_trigger, shutdown) = Shutdown::manual();
        let mut s = Scripted {
            outcomes: vec![Err(Disposition::Restart), Err(Disposition::WaitForPredecessor), Err(Disposition::Stop)],
            restarts: 0,
            stopped: false,
        };
        let began = tokio::time::Instant::now();
        assert_eq!(supervise(&mut s, &shutdown).await, Exit::Failure);
        assert_eq!(s.restarts, 1);
        assert!(s.stopped, "the last words are said before exit 1");
        // 1 s of backoff, then 1 s for the predecessor (the paused clock advances exactly)
        assert_eq!(began.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_clean_end_is_exit_0_and_backoff_doubles() {
        let (_trigger, shutdown) = Shutdown::manual();
        let mut s = Scripted {
            outcomes: vec![Err(Disposition::Restart), Err(Disposition::Restart), Err(Disposition::Restart), Ok(())],
            restarts: 0,
            stopped: false,
        };
        let began = tokio::time::Instant::now();
        assert_eq!(supervise(&mut s, &shutdown).await, Exit::Ok);
        assert_eq!((s.restarts, s.stopped), (3, false));
        assert_eq!(began.elapsed(), Duration::from_secs(1 + 2 + 4));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_ends_the_wait() {
        let (trigger, shutdown) = Shutdown::manual();
        let mut s = Scripted { outcomes: vec![Err(Disposition::Restart)], restarts: 0, stopped: false };
        let stop = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            trigger.stop();
            std::future::pending::<()>().await;
        };
        let exit = tokio::select! {
            e = supervise(&mut s, &shutdown) => e,
            () = stop => unreachable!(),
        };
        assert_eq!(exit, Exit::Ok);
        assert_eq!(s.restarts, 1);
    }
}
