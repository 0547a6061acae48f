//! A client connection's socket as hyper reads and writes it, following
//! the answers written on it: to know when the connection is idle (no
//! answer being computed or sent: it may be closed at no cost to its
//! client, see [`super::server`]), and to give hyper's own error answers a
//! JSON body.
//!
//! # Why hyper's answers are rewritten here
//!
//! hyper answers a request it cannot read (a malformed request line, a
//! URL or headers past its limits) itself, with 400, 414 or 431 and an
//! empty body, before any handler or middleware sees a request; no option
//! of hyper's changes that answer. Every error the server gives is JSON
//! (docs/serve.md, "Errors"), so the one place left to make these JSON is
//! the bytes hyper writes.
//!
//! Which head is hyper's own is known exactly, not guessed from its bytes
//! (a game's PGN inside an answer may hold any text): hyper writes one
//! answer per request it hands to the service, in order, and the service
//! ([`super::server`]) records the length of each answer's body as it
//! hands it back ([`Answers::expect`]). The socket follows the stream of
//! bytes written: a head (up to its blank line), then as many body bytes as
//! recorded. A head that comes when no answer is recorded is hyper's own;
//! if it has no body (`content-length: 0`) and an error status, it is
//! written with a JSON body instead. An answer whose body length is not
//! known (none is, today: every body is built whole) stops the following
//! for the rest of the connection, which is then never rewritten.

use std::{
    collections::VecDeque,
    fmt::Write as _,
    io,
    pin::Pin,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    task::{Context, Poll, ready},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    time::Sleep,
};

/// The longest answer head followed (the server's are a few hundred
/// bytes); past it the stream is no longer followed.
const MOST_ANSWER_HEAD_BYTES: usize = 16 * 1024;

/// What the service and the socket of one connection tell each other.
#[derive(Debug, Default)]
pub struct Answers {
    /// Requests handed to the service whose answer is not ready yet.
    computing: AtomicUsize,
    /// The body length of each answer handed to hyper and not yet written
    /// (its head not yet seen), in order; `None`: not known.
    bodies: Mutex<VecDeque<Option<u64>>>,
    /// Whether the socket holds or is writing part of an answer.
    writing: AtomicBool,
}

/// A request being answered, counted in [`Answers`] until dropped (its
/// answer handed back, or the request abandoned).
pub struct Computing(Arc<Answers>);

impl Drop for Computing {
    fn drop(&mut self) {
        self.0.computing.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Answers {
    /// Counts a request handed to the service until the guard is dropped.
    pub fn computing(self: &Arc<Self>) -> Computing {
        self.computing.fetch_add(1, Ordering::SeqCst);
        Computing(Arc::clone(self))
    }

    /// Records that an answer whose body is `body` bytes long (`None`: not
    /// known) was handed to hyper, which writes it next.
    pub fn expect(&self, body: Option<u64>) {
        self.bodies().push_back(body);
    }

    /// Whether the connection is idle: no request being answered, no
    /// answer waiting to be written or being written (it waits for a
    /// request, or for the rest of one's head). Exact when asked between
    /// two polls of the connection (by the task that polls it).
    pub fn idle(&self) -> bool {
        self.computing.load(Ordering::SeqCst) == 0
            && !self.writing.load(Ordering::SeqCst)
            && self.bodies().is_empty()
    }

    fn bodies(&self) -> std::sync::MutexGuard<'_, VecDeque<Option<u64>>> {
        // Each change is one call: a panic elsewhere leaves it whole.
        self.bodies.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Where the bytes written stand.
#[derive(Debug)]
enum Following {
    /// Between answers, or in a head: its bytes so far, held until it is
    /// whole (it is then written as it is, or rewritten).
    Head(Vec<u8>),
    /// In a body: the bytes left.
    Body(u64),
    /// Not followed any more: written as they come.
    Blind,
}

/// The socket of one client connection (a `TcpStream`; any stream in
/// tests).
pub struct Socket<S = TcpStream> {
    stream: S,
    answers: Arc<Answers>,
    following: Following,
    /// A whole head (as written or rewritten) not yet sent: it goes before
    /// anything else.
    out: Vec<u8>,
    /// How long a write may wait for the client to read.
    patience: Duration,
    /// Armed while a write waits: when it fires, the write fails (and
    /// hyper closes the connection).
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Socket<S> {
    /// `stream`, its answers recorded in `answers`; a write that waits for
    /// the client to read for `patience` fails. Without that, a client
    /// that asks for long answers and never reads them would hold its
    /// connections (busy, never idle) for as long as it likes, and with
    /// enough of them keep every other client out.
    pub fn new(stream: S, answers: Arc<Answers>, patience: Duration) -> Socket<S> {
        Socket {
            stream,
            answers,
            following: Following::Head(Vec::new()),
            out: Vec::new(),
            patience,
            stalled: None,
        }
    }

    /// Writes `buf` (or part of it) to the stream, within the patience.
    fn poll_send(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if let Poll::Ready(sent) = Pin::new(&mut self.stream).poll_write(cx, buf) {
            self.stalled = None;
            return Poll::Ready(sent);
        }
        let patience = self.patience;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(patience)));
        if stalled.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing of its answer for --idle-seconds",
            )));
        }
        Poll::Pending
    }

    /// Sends what `out` holds; ready once it is empty.
    fn poll_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.out.is_empty() {
            let out = std::mem::take(&mut self.out);
            let sent = self.poll_send(cx, &out);
            self.out = out;
            let sent = ready!(sent)?;
            if sent == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out.drain(..sent);
        }
        self.note_writing();
        Poll::Ready(Ok(()))
    }

    /// Tells [`Answers`] whether part of an answer is held or under way.
    fn note_writing(&self) {
        let between = matches!(&self.following, Following::Head(head) if head.is_empty());
        self.answers
            .writing
            .store(!between || !self.out.is_empty(), Ordering::SeqCst);
    }

    /// Takes the bytes of `buf` that belong to the head being followed;
    /// once the head is whole, queues it (or its rewrite) in `out` and
    /// follows its body. Returns how many bytes of `buf` it took.
    fn take_head(&mut self, buf: &[u8]) -> usize {
        let Following::Head(head) = &mut self.following else {
            return 0;
        };
        let mut taken = 0;
        let mut whole = false;
        for &byte in buf {
            head.push(byte);
            taken += 1;
            if head.ends_with(b"\r\n\r\n") {
                whole = true;
                break;
            }
        }
        if !whole {
            if head.len() > MOST_ANSWER_HEAD_BYTES {
                self.out.append(head);
                self.following = Following::Blind;
            }
            return taken;
        }
        let head = std::mem::take(head);
        let informational = status(&head).is_some_and(|code| (100..200).contains(&code));
        self.following = if informational {
            // 100 Continue and the like: no body, and the answer follows.
            Following::Head(Vec::new())
        } else {
            match self.answers.bodies().pop_front() {
                Some(Some(0)) => Following::Head(Vec::new()),
                Some(Some(length)) => Following::Body(length),
                Some(None) => Following::Blind,
                None => {
                    // hyper's own answer, the last on the connection.
                    self.out.extend(json_error(&head).unwrap_or(head));
                    return taken;
                }
            }
        };
        self.out.extend(head);
        taken
    }
}

/// The status code of an answer head (`HTTP/1.1 404 …`).
fn status(head: &[u8]) -> Option<u16> {
    std::str::from_utf8(head.get(9..12)?).ok()?.parse().ok()
}

/// `head`, an error answer without a body (`content-length: 0`), as an
/// answer with the JSON body every error has; `None` for any other head.
fn json_error(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.strip_suffix("\r\n\r\n")?.split("\r\n");
    let status_line = lines.next()?;
    let code = axum::http::StatusCode::from_u16(status(head)?).ok()?;
    if !(code.is_client_error() || code.is_server_error()) {
        return None;
    }
    let fields: Vec<&str> = lines.collect();
    let is = |field: &str, name: &str| {
        field
            .split_once(':')
            .is_some_and(|(n, _)| n.trim().eq_ignore_ascii_case(name))
    };
    let empty = fields.iter().any(|field| {
        is(field, "content-length") && field.split_once(':').is_some_and(|(_, v)| v.trim() == "0")
    });
    if !empty || fields.iter().any(|field| is(field, "content-type")) {
        return None;
    }
    let message = match code.as_u16() {
        400 => "the request is not HTTP/1.1 that the server can read".to_owned(),
        414 => "the URL is too long".to_owned(),
        431 => format!(
            "the request's head is too large (at most {} KiB and 100 header fields)",
            super::server::MOST_HEAD_BYTES / 1024
        ),
        _ => code.canonical_reason().unwrap_or("error").to_owned(),
    };
    let body = serde_json::json!({ "error": message }).to_string();
    let mut out = format!("{status_line}\r\n");
    for field in fields.iter().filter(|field| !is(field, "content-length")) {
        out.push_str(field);
        out.push_str("\r\n");
    }
    let _ = write!(
        out,
        "content-type: application/json\r\naccess-control-allow-origin: *\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    Some(out.into_bytes())
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Socket<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Socket<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let socket = self.get_mut();
        ready!(socket.poll_out(cx))?;
        let written = match socket.following {
            Following::Blind => ready!(socket.poll_send(cx, buf))?,
            Following::Body(left) => {
                let part = usize::try_from(left).map_or(buf.len(), |left| left.min(buf.len()));
                let sent = ready!(socket.poll_send(cx, &buf[..part]))?;
                let left = left - sent as u64;
                socket.following = if left == 0 {
                    Following::Head(Vec::new())
                } else {
                    Following::Body(left)
                };
                sent
            }
            Following::Head(_) => {
                let taken = socket.take_head(buf);
                // Sent now if the socket takes it; else on the next write
                // or flush, before anything else.
                if let Poll::Ready(Err(error)) = socket.poll_out(cx) {
                    return Poll::Ready(Err(error));
                }
                taken
            }
        };
        socket.note_writing();
        Poll::Ready(Ok(written))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let socket = self.get_mut();
        ready!(socket.poll_out(cx))?;
        Pin::new(&mut socket.stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let socket = self.get_mut();
        ready!(socket.poll_out(cx))?;
        Pin::new(&mut socket.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Runs `test` on a runtime of its own (with timers).
    fn on_runtime<F: Future<Output = ()>>(test: F) {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime")
            .block_on(test);
    }

    #[test]
    fn answers_are_followed_and_only_an_unrecorded_empty_error_rewritten() {
        on_runtime(async {
            let (server, mut client) = tokio::io::duplex(1 << 20);
            let answers = Arc::new(Answers::default());
            let mut socket = Socket::new(server, Arc::clone(&answers), Duration::from_secs(5));
            // A body that reads like an error head, a HEAD's answer (its
            // length says 9, no body follows), then hyper's own.
            let fake = "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n";
            let first = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{fake}",
                fake.len()
            );
            let head = "HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n";
            let own = "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";
            answers.expect(Some(fake.len() as u64));
            answers.expect(Some(0));
            assert!(!answers.idle());
            let written = format!("{first}{head}{own}");
            // In pieces that cut heads and bodies anywhere.
            for piece in written.as_bytes().chunks(7) {
                socket.write_all(piece).await.expect("write");
            }
            socket.shutdown().await.expect("shutdown");
            let mut read = String::new();
            client.read_to_string(&mut read).await.expect("read");
            let rest = read
                .strip_prefix(&format!("{first}{head}"))
                .unwrap_or_else(|| panic!("the answers changed: {read}"));
            assert!(rest.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{rest}");
            assert!(
                rest.ends_with('}') && rest.contains("application/json"),
                "{rest}"
            );
        });
    }

    #[test]
    fn a_write_the_client_never_reads_fails_after_the_patience() {
        on_runtime(async {
            let (server, _client) = tokio::io::duplex(64);
            let answers = Arc::new(Answers::default());
            let mut socket = Socket::new(server, Arc::clone(&answers), Duration::from_millis(100));
            answers.expect(Some(10_000));
            let started = std::time::Instant::now();
            let mut answer = b"HTTP/1.1 200 OK\r\ncontent-length: 10000\r\n\r\n".to_vec();
            answer.resize(answer.len() + 10_000, b'x');
            let error = socket
                .write_all(&answer)
                .await
                .expect_err("a stalled write");
            assert_eq!(error.kind(), io::ErrorKind::TimedOut);
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{:?}",
                started.elapsed()
            );
            assert!(!answers.idle(), "an answer under way is not idle");
        });
    }

    #[test]
    fn an_empty_error_head_gets_a_json_body() {
        let head = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\
                     date: Sun, 06 Dec 2026 10:00:00 GMT\r\n\r\n";
        let rewritten = String::from_utf8(json_error(head).expect("rewritten")).expect("UTF-8");
        let (new_head, body) = rewritten.split_once("\r\n\r\n").expect("a head");
        assert!(new_head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(new_head.contains("\r\ndate: Sun, 06 Dec 2026 10:00:00 GMT"));
        assert!(new_head.contains("\r\ncontent-type: application/json"));
        assert!(new_head.contains(&format!("\r\ncontent-length: {}", body.len())));
        assert!(!new_head.contains("content-length: 0"));
        let value: serde_json::Value = serde_json::from_str(body).expect("JSON");
        assert!(value["error"].as_str().expect("a message").contains("head"));
    }

    #[test]
    fn other_heads_are_left_alone() {
        for head in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 12\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ntransfer-encoding: chunked\r\n\r\n",
        ] {
            assert!(
                json_error(head).is_none(),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }
}
