//! `pgnload serve`: the HTTP front end ([`crate::http`]) started, its
//! address printed, stopped gracefully on Ctrl-C or SIGTERM.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use crate::{
    config::Settings,
    error::{Error, ExitStatus},
    explorer,
    http::{self, Limits, Shared, cache::Cache},
    store::db,
};

/// Options of `pgnload serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// The address to listen on (port 0: any free port, printed at start).
    /// Loopback only unless told otherwise: the answers are public reads,
    /// but a database is not put on a network by default.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9002")]
    pub listen: SocketAddr,
    /// Database connections: the requests answered at once (opened at
    /// start, in the background).
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub connections: u32,
    /// Requests admitted at once (answered or waiting for a connection);
    /// one more is refused with 503 and Retry-After.
    #[arg(long, value_name = "N", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_requests: u32,
    /// Seconds an admitted request waits for a connection before 503
    /// (and a statement for a lock).
    #[arg(long, value_name = "SECONDS", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub wait_seconds: u64,
    /// Seconds a statement may run before it is cancelled and its request
    /// answered 503 (so that no reader holds up a bulk load's finish, nor
    /// the requests behind it, for longer).
    #[arg(long, value_name = "SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub query_seconds: u64,
    /// Seconds a connection may take to send a whole request head, from
    /// its opening or its last answer (an idle keep-alive connection
    /// too), and a client to read some of its answer; then it is closed.
    #[arg(long, value_name = "SECONDS", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub idle_seconds: u64,
    /// Seconds the answers under way may take after Ctrl-C or SIGTERM;
    /// then their connections are closed and the server exits.
    #[arg(long, value_name = "SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub shutdown_seconds: u64,
    /// Memory for the explorer's answers kept, in bytes (`k`, `M`, `G`:
    /// binary units; 0: keep none). A question asked again is answered
    /// without the database until a write changes what it reads
    /// (docs/serve.md, "Cache").
    #[arg(long, value_name = "SIZE", default_value = "64MiB",
          value_parser = http::cache::parse_size)]
    pub cache_size: u64,
}

/// Runs `pgnload serve` until Ctrl-C or SIGTERM, then lets the requests in
/// flight finish (within `--shutdown-seconds`) and exits 0.
pub fn run(args: &ServeArgs, settings: &Settings) -> Result<ExitStatus, Error> {
    // One worker per core: the server's work is answering, in parallel.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name("pgnload-serve")
        .enable_all()
        .build()
        .map_err(|source| Error::System {
            what: "starting the async runtime",
            source,
        })?;
    let status = runtime.block_on(serve(args, settings));
    // A request cut at the deadline may still hold a worker (the games of
    // a player are read in `block_in_place`): its statement ends within
    // `--query-seconds`, but the exit does not wait for it.
    runtime.shutdown_timeout(Duration::ZERO);
    status
}

async fn serve(args: &ServeArgs, settings: &Settings) -> Result<ExitStatus, Error> {
    let target = settings.target();
    // Held while serving: the database is checked (reachable, migrated)
    // before anyone is told the address, and the embedded server stays up
    // between requests (its session) until the end.
    let mut keeper = db::connect(&target).await?;
    db::migrate(&mut keeper.client).await?;
    if let Err(why) = explorer::require_usable(&keeper.client).await {
        http::log(&format!("/lichess answers 503 for now: {why}"));
    }
    let (most, nofile) = http::server::most_connections(args.connections)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|source| Error::System {
            what: "listening on --listen's address",
            source,
        })?;
    let address = listener.local_addr().map_err(|source| Error::System {
        what: "reading the address listened on",
        source,
    })?;
    let limits = Limits {
        connections: args.connections,
        requests: usize::try_from(args.max_requests).unwrap_or(usize::MAX),
        wait: Duration::from_secs(args.wait_seconds),
        query: Duration::from_secs(args.query_seconds),
    };
    let connections = http::server::Connections {
        most,
        idle: Duration::from_secs(args.idle_seconds),
        shutdown: Duration::from_secs(args.shutdown_seconds),
    };
    let cache = Arc::new(Cache::new(args.cache_size));
    // Listening before the address is printed: the cache serves from the
    // first request, and follows the database's changes until the end.
    let follower = http::cache::keep_in_step(Arc::clone(&cache), target.clone()).await;
    let shared = Shared::new(target, limits, Arc::clone(&cache));
    let stop = stop_signal()?;
    super::print(&format!(
        "pgnload serve: http://{address}/ (explorer: http://{address}/lichess) on {}; \
         Ctrl-C or SIGTERM stops it\n",
        keeper.description
    ))?;
    http::server::serve(listener, http::router(shared), connections, nofile, stop).await;
    if let Some(follower) = follower {
        // Its connection ends before the keeper's, whose session is then
        // the embedded server's last.
        follower.abort();
        let _ = follower.await;
    }
    keeper.close()?;
    if let Some(summary) = cache.summary() {
        stderr_line!("pgnload serve: cache: {summary}");
    }
    stderr_line!("pgnload serve: stopped");
    Ok(ExitStatus::Clean)
}

/// Resolves on the first Ctrl-C or SIGTERM: the server then stops taking
/// connections and lets its requests in flight finish. A second signal
/// ends the process at once (exit 3). The handlers are installed before
/// this returns, so that no signal after the address is printed is lost
/// to the default action.
fn stop_signal() -> Result<impl Future<Output = ()>, Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let installed = |kind: SignalKind| {
        signal(kind).map_err(|source| Error::System {
            what: "installing a signal handler",
            source,
        })
    };
    let (mut int, mut term) = (
        installed(SignalKind::interrupt())?,
        installed(SignalKind::terminate())?,
    );
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        stderr_line!("pgnload serve: stopping: finishing the requests in flight (again: stop now)");
        tokio::spawn(async move {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            stderr_line!("pgnload serve: stopped at once");
            std::process::exit(i32::from(ExitStatus::Interrupted.code()));
        });
    })
}
