//! The server's client connections: accepted, served by hyper (HTTP/1.1,
//! keep-alive), and bounded so that no client can make the server answer
//! nobody (docs/serve.md, "Connections").
//!
//! * **A request's head in time**: a connection that has not sent a whole
//!   request head within [`Connections::idle`] of its opening or of its
//!   last answer is closed (hyper's header-read timeout, whose clock
//!   starts again after every answer): a client trickling its headers,
//!   and one keeping a connection idle, alike. So is one whose client
//!   reads nothing of its answer for as long ([`Socket::new`]).
//! * **A limit below the file descriptor limit**: at most
//!   [`Connections::most`] connections are open ([`most_connections`]
//!   derives it from `RLIMIT_NOFILE`). A connection over it closes the
//!   oldest idle one ([`Answers::idle`]: no request being answered, no
//!   answer being written) and is served once that one has ended, so idle
//!   connections held by one client never keep a new client out; if none
//!   is idle, the new one is closed at once. Either is said on stderr, at
//!   most once per [`SAID_EVERY`], with counts.
//! * **A stop with a deadline**: after the stop, idle connections are
//!   closed at once, the others finish the answer under way (hyper's
//!   graceful shutdown) within [`Connections::shutdown`], and whatever is
//!   left then is cut.
//!
//! Why not `axum::serve`: it takes no header-read timeout, no limit of
//! connections and no shutdown deadline (its graceful shutdown waits for
//! every connection, so one half-sent request kept the server from
//! exiting), and says nothing when accepting fails. hyper's own HTTP/1.1
//! connection, which `axum::serve` runs too, has the header-read timeout;
//! the rest is here, around it.

use std::{
    collections::BTreeMap,
    convert::Infallible,
    fmt::Write as _,
    pin::Pin,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{Router, body::HttpBody as _, http::Method, response::Response};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{Notify, OwnedSemaphorePermit, Semaphore, watch},
    task::JoinSet,
};

use super::{
    SAID_EVERY, log,
    socket::{Answers, Socket},
};
use crate::error::Error;

/// How the server treats its client connections.
#[derive(Debug, Clone, Copy)]
pub struct Connections {
    /// The most connections open at once.
    pub most: usize,
    /// How long a connection may take to send a whole request head, from
    /// its opening or its last answer.
    pub idle: Duration,
    /// How long, after the stop, the answers under way may take.
    pub shutdown: Duration,
}

/// File descriptors kept for everything but client connections, besides
/// two per database connection (a connection's replacement may open
/// before the old one is closed): stdio, the runtime's, the listening
/// socket, the database connections that watch changes and hold the
/// embedded server, the embedded server's lock files, with room to spare.
const RESERVED_FDS: u64 = 32;

/// The most client connections whatever the file descriptor limit: each
/// may hold up to [`MOST_HEAD_BYTES`] of a request head being read, so the
/// count bounds that memory (64 MiB).
const MOST_CONNECTIONS: u64 = 4096;

/// The longest request head read (hyper's buffer for it; a longer one is
/// answered 431). The explorer's longest questions (a FEN and a game's
/// moves in `play`) take a few KiB.
pub const MOST_HEAD_BYTES: usize = 16 * 1024;

/// How long a connection over the limit waits for the idle one closed
/// for it to end (its task wakes and drops it at once; longer only if it
/// took a request meanwhile, and then the new one is refused).
const SLOT_WAIT: Duration = Duration::from_secs(1);

/// The most client connections for a server with `database` database
/// connections, and the soft `RLIMIT_NOFILE` it is derived from: that
/// limit less [`RESERVED_FDS`] and two per database connection, at most
/// [`MOST_CONNECTIONS`]. A limit that leaves fewer than 8 is refused: such
/// a server would answer almost nobody.
pub fn most_connections(database: u32) -> Result<(usize, u64), Error> {
    let (soft, _) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_err(|errno| Error::System {
            what: "reading the file descriptor limit (RLIMIT_NOFILE)",
            source: errno.into(),
        })?;
    let left = soft.saturating_sub(RESERVED_FDS + 2 * u64::from(database));
    if left < 8 {
        return Err(Error::Config(format!(
            "the file descriptor limit (ulimit -n) is {soft}: with --connections {database} it \
             leaves {left} for clients; raise it, or lower --connections"
        )));
    }
    let most = usize::try_from(left.min(MOST_CONNECTIONS)).expect("at most MOST_CONNECTIONS");
    Ok((most, soft))
}

/// A connection as the accept loop knows it.
struct Open {
    answers: Arc<Answers>,
    /// Asks the connection's task to close it if it is idle.
    close: Notify,
    /// Asked to close (not asked twice).
    closing: AtomicBool,
}

/// The open connections, by the order they were accepted.
#[derive(Default)]
struct Registry(Mutex<BTreeMap<u64, Arc<Open>>>);

impl Registry {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Open>>> {
        // Each change is one call: a panic elsewhere leaves it whole.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks the oldest idle connection not asked yet to close; whether
    /// there was one. Its task checks again that it is idle (this check
    /// is made while it may be answering) before closing it.
    fn close_oldest_idle(&self) -> bool {
        let map = self.map();
        let oldest = map
            .values()
            .find(|open| !open.closing.load(Ordering::SeqCst) && open.answers.idle());
        if let Some(open) = oldest {
            open.closing.store(true, Ordering::SeqCst);
            open.close.notify_one();
        }
        oldest.is_some()
    }
}

/// Removes a connection from the registry when its task ends.
struct Registered {
    registry: Arc<Registry>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry.map().remove(&self.id);
    }
}

/// The connection limit's events since they were last said.
struct AtLimit {
    most: usize,
    nofile: u64,
    last_said: Option<Instant>,
    closed_idle: u64,
    refused: u64,
    accept_errors: u64,
    last_error: Option<String>,
}

impl AtLimit {
    /// Says the events counted, at most once per [`SAID_EVERY`] unless
    /// `now_anyway`.
    fn say(&mut self, now_anyway: bool) {
        if self.closed_idle + self.refused + self.accept_errors == 0 {
            return;
        }
        if !now_anyway && self.last_said.is_some_and(|at| at.elapsed() < SAID_EVERY) {
            return;
        }
        let mut line = format!(
            "at the connection limit ({} connections, from ulimit -n {}): {} idle ones closed \
             for new ones, {} new ones refused (none idle)",
            self.most, self.nofile, self.closed_idle, self.refused
        );
        if let Some(error) = self.last_error.take() {
            let _ = write!(line, "; {} accepts failed ({error})", self.accept_errors);
        }
        line.push_str(" since the last such line");
        log(&line);
        self.last_said = Some(Instant::now());
        self.closed_idle = 0;
        self.refused = 0;
        self.accept_errors = 0;
    }
}

/// Serves `app` on `listener` until `stop` resolves, then stops as the
/// module says.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Connections,
    nofile: u64,
    stop: impl Future<Output = ()>,
) {
    let (stopping, stopped) = watch::channel(false);
    let mut server = Server {
        app,
        limits,
        registry: Arc::default(),
        slots: Arc::new(Semaphore::new(limits.most)),
        tasks: JoinSet::new(),
        stopped,
        next_id: 0,
        at_limit: AtLimit {
            most: limits.most,
            nofile,
            last_said: None,
            closed_idle: 0,
            refused: 0,
            accept_errors: 0,
            last_error: None,
        },
    };
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = tokio::select! {
            () = &mut stop => break,
            Some(_) = server.tasks.join_next(), if !server.tasks.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => server.open(stream).await,
            Err(error) => {
                server.accept_failed(&error);
                // A moment's pause keeps the loop from spinning on a
                // connection it cannot take yet.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    drop(listener);
    server.at_limit.say(true);
    // Every connection's task sees it, also one not yet started.
    let _ = stopping.send(true);
    server.finish().await;
}

/// The accept loop's state.
struct Server {
    app: Router,
    limits: Connections,
    registry: Arc<Registry>,
    /// One per connection that may be open.
    slots: Arc<Semaphore>,
    tasks: JoinSet<()>,
    /// Whether the server stops (the connections' side).
    stopped: watch::Receiver<bool>,
    next_id: u64,
    at_limit: AtLimit,
}

impl Server {
    /// Serves `stream` on a task of its own, within the limit.
    async fn open(&mut self, stream: TcpStream) {
        let Some(slot) = self.slot().await else {
            return;
        };
        let open = Arc::new(Open {
            answers: Arc::default(),
            close: Notify::new(),
            closing: AtomicBool::new(false),
        });
        self.registry.map().insert(self.next_id, Arc::clone(&open));
        let registered = Registered {
            registry: Arc::clone(&self.registry),
            id: self.next_id,
        };
        self.next_id += 1;
        self.tasks.spawn(connection(
            stream,
            self.app.clone(),
            open,
            (registered, slot),
            self.stopped.clone(),
            self.limits.idle,
        ));
    }

    /// A connection's slot: a free one, or at the limit the slot of an
    /// idle connection closed for it, once its task ends; `None` (the new
    /// connection is refused) if none is idle.
    async fn slot(&mut self) -> Option<OwnedSemaphorePermit> {
        if let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() {
            return Some(slot);
        }
        let freed = if self.registry.close_oldest_idle() {
            tokio::time::timeout(SLOT_WAIT, Arc::clone(&self.slots).acquire_owned())
                .await
                .ok()
                .and_then(Result::ok)
        } else {
            None
        };
        if freed.is_some() {
            self.at_limit.closed_idle += 1;
        } else {
            self.at_limit.refused += 1;
        }
        self.at_limit.say(false);
        freed
    }

    /// An accept that failed: out of file descriptors (the limit was not
    /// enough, or the system's is reached), an idle connection gives one
    /// back. Said, with the limit's events.
    fn accept_failed(&mut self, error: &std::io::Error) {
        if matches!(
            error.raw_os_error(),
            Some(nix::libc::EMFILE | nix::libc::ENFILE)
        ) {
            self.registry.close_oldest_idle();
        }
        self.at_limit.accept_errors += 1;
        self.at_limit.last_error = Some(error.to_string());
        self.at_limit.say(false);
    }

    /// Waits for the connections to end, up to the shutdown deadline, and
    /// cuts those left.
    async fn finish(mut self) {
        let deadline = tokio::time::sleep(self.limits.shutdown);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                next = self.tasks.join_next() => if next.is_none() { return },
                () = &mut deadline => break,
            }
        }
        log(&format!(
            "{} connections still answering at the shutdown deadline ({} s): closed",
            self.tasks.len(),
            self.limits.shutdown.as_secs()
        ));
        self.tasks.shutdown().await;
    }
}

/// Serves one connection until it ends, is closed as idle, or the stop
/// closes it (see the module).
async fn connection(
    stream: TcpStream,
    app: Router,
    open: Arc<Open>,
    // Given back when the task ends, after the socket is closed.
    _held: (Registered, OwnedSemaphorePermit),
    mut stopped: watch::Receiver<bool>,
    idle: Duration,
) {
    // Answers are written whole: nothing is gained by waiting to fill a
    // packet.
    let _ = stream.set_nodelay(true);
    let service = Counted {
        app: TowerToHyperService::new(app),
        answers: Arc::clone(&open.answers),
    };
    let socket = TokioIo::new(Socket::new(stream, Arc::clone(&open.answers), idle));
    let mut http = std::pin::pin!(
        hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(idle)
            .max_buf_size(MOST_HEAD_BYTES)
            .serve_connection(socket, service)
    );
    let mut stopping = false;
    loop {
        tokio::select! {
            // Its end, whatever it is: a client gone, a timeout, a head
            // hyper could not read (answered by hyper) are the client's.
            _ = http.as_mut() => return,
            () = open.close.notified() => {
                if open.answers.idle() {
                    return;
                }
                open.closing.store(false, Ordering::SeqCst);
            }
            gone = stopped.wait_for(|stop| *stop), if !stopping => {
                stopping = true;
                // The sender gone is the stop too.
                if gone.is_err() || open.answers.idle() {
                    return;
                }
                http.as_mut().graceful_shutdown();
            }
        }
    }
}

/// The app as one connection's service: each request counted while it is
/// answered, and its answer's body length recorded for the socket (see
/// [`super::socket`]).
#[derive(Clone)]
struct Counted {
    app: TowerToHyperService<Router>,
    answers: Arc<Answers>,
}

impl hyper::service::Service<hyper::Request<Incoming>> for Counted {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        // The answer to HEAD has no body, whatever its length says.
        let head = request.method() == Method::HEAD;
        let computing = self.answers.computing();
        let answers = Arc::clone(&self.answers);
        let answer = hyper::service::Service::call(&self.app, request);
        Box::pin(async move {
            let response: Response = answer.await?;
            answers.expect(if head {
                Some(0)
            } else {
                response.body().size_hint().exact()
            });
            drop(computing);
            Ok(response)
        })
    }
}
