//! `sluice-test-registry`: a small Confluent-compatible Schema Registry for integration tests.
//!
//! Prints `LISTENING 127.0.0.1:PORT` on stdout once bound (useful with `--listen 127.0.0.1:0`),
//! logs requests on stderr, and stops on SIGTERM or Ctrl-C.

use std::io::{IsTerminal as _, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use sluice_test_registry::{router, Registry};

#[derive(Parser)]
#[command(version, about = "A small in-memory Confluent-compatible Schema Registry (AVRO only) for tests")]
struct Args {
    /// Address to listen on; port 0 picks a free port (printed as `LISTENING ADDR`).
    #[arg(long, default_value = "127.0.0.1:8081")]
    listen: SocketAddr,
    /// JSON file to keep the registry in across restarts (created when missing).
    #[arg(long)]
    data: Option<PathBuf>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let registry = match &args.data {
        Some(path) => Registry::with_data_file(path)?,
        None => Registry::in_memory(),
    };
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let addr = listener.local_addr()?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "LISTENING {addr}")?;
        out.flush()?;
    }
    tracing::info!(%addr, data = ?args.data, "schema registry listening");
    axum::serve(listener, router(registry)).with_graceful_shutdown(shutdown()).await?;
    tracing::info!("schema registry stopped");
    Ok(())
}

async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
