//! The process the commands run in: the tokio runtime of the commands that stream, the stop
//! signals and the [`Shutdown`] every task is handed, the clock, and the environment.

/// The runtime of the commands that stream: two workers, so that the stream's reader task
/// (and the publisher's blocking Kafka calls) run beside the decoding on the caller's thread.
///
/// # Errors
/// When the operating system refuses the threads.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return std::future::pending().await,
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// For synchronous commands (`sluice dump` of files): a flag set by the first Ctrl-C or SIGTERM,
/// which the work checks between its steps to end cleanly (`what` is logged then); a second
/// one exits at once with 130. Without it the signal's default action cut the output in the
/// middle of a line. The signals are watched on a thread of their own.
pub fn interrupt_flag(what: &'static str) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let flag = std::sync::Arc::new(AtomicBool::new(false));
    let set = std::sync::Arc::clone(&flag);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build();
    let spawned = rt.map(|rt| {
        std::thread::Builder::new().name("sluice-signals".into()).spawn(move || {
            rt.block_on(async {
                let stop = Shutdown::on_signal_or_exit(what);
                stop.requested().await;
                set.store(true, Ordering::SeqCst);
                // the watcher goes on, for a second signal
                std::future::pending::<()>().await;
            });
        })
    });
    if !matches!(spawned, Ok(Ok(_))) {
        tracing::debug!("Cannot watch for signals; Ctrl-C stops at once");
    }
    flag
}

/// How long a stop signal waits for the work in flight to reach a point it can commit (the
/// next transaction boundary, a bulk request through) before the process stops without it:
/// what was not committed comes again on the next start.
pub const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Resolves [`STOP_GRACE`] after `shutdown` was asked for: what a stop waiting for work in
/// flight selects against.
pub async fn after_grace(shutdown: &Shutdown) {
    shutdown.requested().await;
    tokio::time::sleep(STOP_GRACE).await;
}

/// A stop asked for (SIGTERM, Ctrl-C, or a test): the one handle every task that must end at
/// a boundary of its own is given. The pipeline commits at its next transaction boundary, the
/// Elasticsearch sink sends and commits its batch, the supervisor stops waiting to restart.
/// Clones watch the same stop.
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: tokio::sync::watch::Receiver<bool>,
}

/// Asks the [`Shutdown`]s made with it to stop.
#[derive(Debug)]
pub struct ShutdownTrigger(tokio::sync::watch::Sender<bool>);

impl ShutdownTrigger {
    /// Asks for the stop.
    pub fn stop(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// A stop that comes when the process receives SIGTERM or Ctrl-C (`what` is logged then: what
    /// stopping means for the command). Needs a running tokio runtime.
    pub fn on_signal(what: &'static str) -> Shutdown {
        let (trigger, shutdown) = Shutdown::manual();
        tokio::spawn(async move {
            shutdown_signal().await;
            tracing::info!("{what}");
            trigger.stop();
            // the trigger lives on: a dropped trigger must not read as a stop
            std::future::pending::<()>().await;
        });
        shutdown
    }

    /// As [`Shutdown::on_signal`], for a command a person runs and may want to stop at once:
    /// a second signal exits with 130 (the work may be blocked, e.g. writing to a slow pipe,
    /// and not reach its next boundary soon).
    pub fn on_signal_or_exit(what: &'static str) -> Shutdown {
        let (trigger, shutdown) = Shutdown::manual();
        tokio::spawn(async move {
            shutdown_signal().await;
            tracing::info!("{what} (again to stop at once)");
            trigger.stop();
            shutdown_signal().await;
            crate::enote!("sluice: interrupted again: stopping now");
            std::process::exit(130);
        });
        shutdown
    }

    /// A stop asked for with the returned trigger (tests, and commands that stop themselves).
    pub fn manual() -> (ShutdownTrigger, Shutdown) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (ShutdownTrigger(tx), Shutdown { rx })
    }

    /// True once the stop was asked for.
    pub fn is_requested(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves when the stop is asked for (never, if its trigger is dropped unused).
    pub async fn requested(&self) {
        let mut rx = self.rx.clone();
        if rx.wait_for(|s| *s).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// The environment variables whose names start with one of `prefixes`, as text. Any other
/// variable is none of Sluice's business, whatever its bytes (`std::env::vars` panics on one
/// that is not UTF-8); one of these that is not UTF-8 is an error naming it.
///
/// # Errors
/// A variable of one of the prefixes whose name or value is not UTF-8.
pub fn env_vars(prefixes: &[&str]) -> Result<Vec<(String, String)>, String> {
    let mut vars = Vec::new();
    for (k, v) in std::env::vars_os() {
        let name = k.to_string_lossy();
        if !prefixes.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        match (k.to_str(), v.into_string()) {
            (Some(k), Ok(v)) => vars.push((k.to_string(), v)),
            _ => return Err(format!("the environment variable {name} is not UTF-8 text: set it again, or unset it")),
        }
    }
    Ok(vars)
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
