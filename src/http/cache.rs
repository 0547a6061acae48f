//! The explorer's finished answers, kept in memory so that a question
//! asked again is answered without the database (docs/serve.md,
//! "Cache"): by the question as its answer depends on it ([`Question`]:
//! two spellings of one question share an entry), bounded by bytes, and
//! forgotten whenever the database announces a change
//! (`sql/0022_serve_cache_notify.sql`).
//!
//! # Never after a change
//!
//! [`keep_in_step`] holds a connection that LISTENs on
//! [`db::CHANGES_CHANNEL`]; each notification (sent when a transaction that
//! changed a table an answer reads commits) forgets every answer. The
//! cache serves only while that connection listens: while it is down (the
//! server restarted, the network failed) answers are neither looked up nor
//! kept, and when it is back it starts empty.
//!
//! Forgetting is a new *generation*: every key holds the generation it
//! was computed in, and a lookup reads only the current one's. An answer
//! whose computation began before a notification was handled is of the
//! old generation, so never served after it, even if it is stored after
//! the entries were cleared (it then only takes room until evicted). An
//! answer begun after the notification was handled reads the database
//! after that commit. So a request that comes after a notification was
//! handled is never answered from before it (one that came before and
//! waited for the same question's answer under way gets that answer): the
//! one window left is between a commit and the listener's handling of its
//! notification (see docs/serve.md).
//!
//! # Why `quick_cache`
//!
//! `quick_cache` bounds its entries by a weight (here their bytes) rather
//! than their count, is concurrent (sharded locks: 16 clients do not
//! queue on one mutex, as with the `lru` crate behind a lock), and its
//! S3-FIFO policy keeps popular questions when a stream of one-off
//! questions passes through, with two small dependencies against `moka`'s
//! many (a background scheduler and its channels, not needed here).

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use axum::body::Bytes;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_postgres::Client;

use crate::{
    chess::{
        category::{Month, RatingGroup, Speed},
        model::GameVariant,
    },
    explorer::{answers::Request, openings::Opening},
    store::{
        db::{self, Target},
        shards,
    },
};

/// An explorer question as its answer depends on it: the variant, the
/// position reached in normalized form and the opening named on the way
/// (`explorer::answers::reached`), the filter as a set (order and
/// repetitions of `speeds` and `ratings` change nothing; ratings by the
/// band they name), and the limits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Question {
    variant: GameVariant,
    fen: String,
    opening: Option<Opening>,
    speeds: Vec<Speed>,
    ratings: Vec<RatingGroup>,
    since: Option<Month>,
    until: Option<Month>,
    moves: usize,
    top_games: u32,
    recent_games: u32,
}

impl Question {
    /// `request`, which reaches the position of normalized FEN `fen`,
    /// naming `opening` on the way.
    pub fn new(request: &Request, fen: String, opening: Option<Opening>) -> Question {
        Question {
            variant: request.variant,
            fen,
            opening,
            speeds: as_set(request.filter.speeds.clone()),
            ratings: as_set(request.filter.ratings.clone()),
            since: request.filter.since,
            until: request.filter.until,
            moves: request.moves,
            top_games: request.top_games,
            recent_games: request.recent_games,
        }
    }

    /// The bytes the question holds beyond its fixed size.
    fn heap_bytes(&self) -> usize {
        self.fen.len()
            + self
                .opening
                .as_ref()
                .map_or(0, |o| o.eco.len() + o.name.len())
            + self.speeds.len() * size_of::<Speed>()
            + self.ratings.len() * size_of::<RatingGroup>()
    }
}

/// `items` as a set: sorted, each once.
fn as_set<T: Ord>(mut items: Vec<T>) -> Vec<T> {
    items.sort_unstable();
    items.dedup();
    items
}

/// An entry's key: the question and the generation it was answered in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    generation: u64,
    question: Question,
}

/// An entry's weight: its bytes, the answer's, the question's and the
/// entry's own.
#[derive(Debug, Clone, Copy)]
struct ByBytes;

impl quick_cache::Weighter<Key, Bytes> for ByBytes {
    fn weight(&self, key: &Key, body: &Bytes) -> u64 {
        let bytes = size_of::<(Key, Bytes)>() + key.question.heap_bytes() + body.len();
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }
}

/// The low bit of [`Cache::state`]: set while the cache serves.
const SERVING: u64 = 1;
/// One generation more, in [`Cache::state`].
const NEXT: u64 = 2;

/// What a request found.
pub enum Lookup<'a> {
    /// The answer, as it was sent before (or as another request of the
    /// same question, under way when this one came, found it).
    Hit(Bytes),
    /// Not kept: answer it, then [`Cache::keep`] it with this ticket.
    Miss(Ticket<'a>),
    /// The cache is off (`--cache-size 0`), or not serving (see the
    /// module's doc), or the same question's answer under way took longer
    /// than the wait given: answer it and keep nothing.
    Bypass,
}

/// A missed question's place in the cache.
pub struct Ticket<'a>(Place<'a>);

/// Where a missed answer goes.
enum Place<'a> {
    /// The placeholder of its key: the requests of the same question that
    /// come meanwhile wait for this answer rather than ask the database
    /// too (16 clients asking a popular question at once ask it once).
    Placeholder(Placeholder<'a>),
    /// Its key, replacing what is kept (an answer asked fresh).
    Key(Key),
}

/// The cache's placeholder of a key whose answer is under way.
type Placeholder<'a> = quick_cache::sync::PlaceholderGuard<
    'a,
    Key,
    Bytes,
    ByBytes,
    quick_cache::DefaultHashBuilder,
    quick_cache::sync::DefaultLifecycle<Key, Bytes>,
>;

/// Counts of what requests found, for the log at shutdown.
#[derive(Debug, Default)]
struct Counts {
    hits: AtomicU64,
    misses: AtomicU64,
    bypassed: AtomicU64,
    /// Notifications of changes handled.
    changes: AtomicU64,
}

/// The answers kept.
pub struct Cache {
    /// `None`: off (`--cache-size 0`).
    answers: Option<quick_cache::sync::Cache<Key, Bytes, ByBytes>>,
    /// The generation times [`NEXT`], plus [`SERVING`] while serving.
    state: AtomicU64,
    counts: Counts,
}

impl Cache {
    /// A cache of at most `bytes` bytes of entries (0: off), not serving
    /// until [`keep_in_step`] listens.
    pub fn new(bytes: u64) -> Cache {
        // A few kilobytes an answer: what the entries are sized for (the
        // count only tunes the number of shards and their tables).
        let estimated = usize::try_from(bytes / 4096).unwrap_or(usize::MAX).max(1);
        Cache {
            answers: (bytes > 0)
                .then(|| quick_cache::sync::Cache::with_weighter(estimated, bytes, ByBytes)),
            state: AtomicU64::new(0),
            counts: Counts::default(),
        }
    }

    /// Looks `question` up in the current generation, waiting up to
    /// `wait` for its answer if another request is getting it; `fresh`: a
    /// miss whatever is kept (the answer is asked of the database, and
    /// kept).
    pub async fn lookup(&self, question: Question, fresh: bool, wait: Duration) -> Lookup<'_> {
        let state = self.state.load(Ordering::SeqCst);
        let Some(answers) = self.answers.as_ref().filter(|_| state & SERVING != 0) else {
            return self.bypass();
        };
        let key = Key {
            generation: state,
            question,
        };
        if fresh {
            self.counts.misses.fetch_add(1, Ordering::Relaxed);
            return Lookup::Miss(Ticket(Place::Key(key)));
        }
        match tokio::time::timeout(wait, answers.get_value_or_guard_async(&key)).await {
            Ok(Ok(body)) => {
                self.counts.hits.fetch_add(1, Ordering::Relaxed);
                Lookup::Hit(body)
            }
            Ok(Err(placeholder)) => {
                self.counts.misses.fetch_add(1, Ordering::Relaxed);
                Lookup::Miss(Ticket(Place::Placeholder(placeholder)))
            }
            Err(_) => self.bypass(),
        }
    }

    /// [`Lookup::Bypass`], counted.
    fn bypass(&self) -> Lookup<'_> {
        self.counts.bypassed.fetch_add(1, Ordering::Relaxed);
        Lookup::Bypass
    }

    /// Keeps `body`, the answer of `ticket`'s question. If a change was
    /// announced since the lookup, the answer may predate it: it is kept
    /// under the old generation, which no lookup reads any more (it only
    /// reaches the requests that waited for it, which came before the
    /// change was handled), and takes room until evicted.
    pub fn keep(&self, ticket: Ticket<'_>, body: Bytes) {
        match ticket.0 {
            Place::Placeholder(placeholder) => {
                // Err: the placeholder was cleared by a change meanwhile;
                // those waiting got the answer all the same.
                let _ = placeholder.insert(body);
            }
            Place::Key(key) => {
                if let Some(answers) = &self.answers
                    && self.state.load(Ordering::SeqCst) == key.generation
                {
                    answers.insert(key, body);
                }
            }
        }
    }

    /// Forgets every answer: a new generation, `serving` or not.
    fn forget(&self, serving: bool) {
        let flag = if serving { SERVING } else { 0 };
        // The new generation first: an answer computed before is of the
        // old one whenever it is stored.
        let _ = self
            .state
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |state| {
                Some(((state & !SERVING) + NEXT) | flag)
            });
        if let Some(answers) = &self.answers {
            answers.clear();
        }
    }

    /// Whether the cache serves now.
    fn serving(&self) -> bool {
        self.state.load(Ordering::SeqCst) & SERVING != 0
    }

    /// What requests found so far, for the log: `None` when off.
    pub fn summary(&self) -> Option<String> {
        let answers = self.answers.as_ref()?;
        let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Some(format!(
            "{} hits, {} misses, {} answered without it, {} changes announced; \
             {} answers in {} of {} bytes",
            count(&self.counts.hits),
            count(&self.counts.misses),
            count(&self.counts.bypassed),
            count(&self.counts.changes),
            answers.len(),
            answers.weight(),
            answers.capacity(),
        ))
    }
}

/// How often the listening connection is checked: a connection that died
/// without closing (a network that drops packets) is noticed within this
/// and [`PING_WAIT`].
const PING_EVERY: Duration = Duration::from_secs(5);
/// How long a check may take before the connection counts as lost.
const PING_WAIT: Duration = Duration::from_secs(5);
/// How long to wait before listening again after the connection was lost.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A connection listening for changes, the cache serving (on a single
/// node), or why there is none.
type Listening = Result<(db::Database, UnboundedReceiver<String>), String>;

/// Keeps `cache` in step with the database of `target` for as long as the
/// runtime runs: listens for changes, forgets every answer on each, and
/// lets the cache serve only while listening on a single node (see the
/// module's doc). Listens once before it returns, so that the cache
/// serves from the first request; follows in the task returned (none when
/// the cache is off), which the caller aborts at the end. Says on stderr
/// when it stops or starts serving.
pub async fn keep_in_step(
    cache: Arc<Cache>,
    target: Target,
) -> Option<tokio::task::JoinHandle<()>> {
    cache.answers.as_ref()?;
    let listening = listen(&cache, &target).await;
    Some(tokio::spawn(follow_forever(cache, target, listening)))
}

/// Listens for changes on a new connection, then lets the cache serve
/// if the database is a single node.
async fn listen(cache: &Cache, target: &Target) -> Listening {
    let (database, changes) = db::listen_for_changes(target)
        .await
        .map_err(|error| crate::error::report(&error))?;
    // Listening from here: every commit from now on is announced, and an
    // answer computed from now on reads after every earlier one.
    serve_if_single_node(cache, &database.client, true).await?;
    Ok((database, changes))
}

/// Follows the changes while `listening`, then, with the cache not
/// serving, listens again every [`RETRY_AFTER`] until it can; says so
/// once per outage (a database down for long is retried quietly).
async fn follow_forever(cache: Arc<Cache>, target: Target, mut listening: Listening) {
    let mut said_down = false;
    loop {
        let why = match listening {
            Ok((database, changes)) => {
                said_down = false;
                let why = follow(&cache, &database.client, changes).await;
                cache.forget(false);
                // Dropped, not closed: closing an embedded session waits
                // on the server, and the keeper's session holds it anyway.
                drop(database);
                why
            }
            Err(why) => why,
        };
        if !said_down {
            super::log(&format!(
                "answering without the cache until changes can be followed again: {why}"
            ));
            said_down = true;
        }
        tokio::time::sleep(RETRY_AFTER).await;
        listening = listen(&cache, &target).await;
    }
}

/// Follows the changes announced on `changes` (`client` listens for
/// them), forgetting every answer on each, and whether the cache may
/// serve when `pgnload_shards` changes. Returns why it stopped.
async fn follow(cache: &Cache, client: &Client, mut changes: UnboundedReceiver<String>) -> String {
    loop {
        tokio::select! {
            change = changes.recv() => match change {
                Some(table) => {
                    cache.counts.changes.fetch_add(1, Ordering::Relaxed);
                    cache.forget(cache.serving());
                    if table == "pgnload_shards"
                        && let Err(why) = serve_if_single_node(cache, client, false).await
                    {
                        return why;
                    }
                }
                None => return "the listening connection was closed".to_owned(),
            },
            () = tokio::time::sleep(PING_EVERY) => {
                match tokio::time::timeout(PING_WAIT, client.simple_query("")).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return format!("the listening connection failed: {e}"),
                    Err(_) => return format!(
                        "the listening connection did not answer in {} s",
                        PING_WAIT.as_secs()
                    ),
                }
            }
        }
    }
}

/// Lets the cache serve (from an empty generation) unless the database is
/// the coordinator of a sharded layout, where a write straight to a shard
/// is announced to no one here; says so when it stops serving, or on the
/// `first` check of a connection.
async fn serve_if_single_node(cache: &Cache, client: &Client, first: bool) -> Result<(), String> {
    match shards::layout(client).await {
        Ok(None) => {
            let was = cache.serving();
            cache.forget(true);
            if !was {
                stderr_line!("pgnload serve: cache on: following the database's changes");
            }
            Ok(())
        }
        Ok(Some(layout)) => {
            if first || cache.serving() {
                stderr_line!(
                    "pgnload serve: cache off: the database is sharded ({} shards), and a write \
                     to a shard is not announced here",
                    layout.count()
                );
            }
            cache.forget(false);
            Ok(())
        }
        Err(error) => Err(crate::error::report(&error)),
    }
}

/// Reads a `--cache-size`: a number of bytes, with an optional unit `k`,
/// `M` or `G` (also `kB`, `KiB`, `MB`, `MiB`, `GB`, `GiB`, any case), each
/// 1024 times the one before, as PostgreSQL reads its memory settings.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a size such as 64MiB, 512k or 0"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        other => return Err(format!("{text:?}: unknown unit {other:?} (k, M or G)")),
    };
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?}: too large"))
}

#[cfg(test)]
mod tests {
    use quick_cache::Weighter as _;

    use super::*;
    use crate::explorer::answers::{Filter, reached};

    fn question(play: &[&str], filter: Filter) -> Question {
        let request = Request {
            variant: GameVariant::Standard,
            fen: None,
            play: play.iter().map(|m| (*m).to_owned()).collect(),
            filter,
            moves: 12,
            top_games: 4,
            recent_games: 8,
        };
        let at = reached(request.variant, None, &request.play).expect("legal moves");
        Question::new(&request, at.fen, at.opening)
    }

    fn serving(bytes: u64) -> Cache {
        let cache = Cache::new(bytes);
        cache.forget(true);
        cache
    }

    /// Long enough never to end a test's wait.
    const WAIT: Duration = Duration::from_mins(1);

    async fn look<'a>(cache: &'a Cache, question: &Question, fresh: bool) -> Lookup<'a> {
        cache.lookup(question.clone(), fresh, WAIT).await
    }

    async fn kept(cache: &Cache, question: &Question, body: &'static str) {
        let Lookup::Miss(ticket) = look(cache, question, false).await else {
            panic!("a miss expected");
        };
        cache.keep(ticket, Bytes::from_static(body.as_bytes()));
    }

    async fn is_hit(cache: &Cache, question: &Question) -> bool {
        matches!(look(cache, question, false).await, Lookup::Hit(_))
    }

    #[test]
    fn spellings_of_one_question_are_one_key() {
        let filter = |speeds: &[Speed], ratings: &[u16]| Filter {
            speeds: speeds.to_vec(),
            ratings: ratings
                .iter()
                .map(|r| RatingGroup::from_average(i64::from(*r)))
                .collect(),
            ..Filter::default()
        };
        assert_eq!(
            question(
                &["e4", "e5"],
                filter(&[Speed::Blitz, Speed::Bullet], &[1600, 2000])
            ),
            question(
                &["e2e4", "e7e5"],
                filter(&[Speed::Bullet, Speed::Blitz, Speed::Bullet], &[2100, 1799])
            )
        );
        assert_ne!(
            question(&["e4"], Filter::default()),
            question(&["d4"], Filter::default())
        );
        assert_ne!(
            question(&["e4"], Filter::default()),
            question(&["e4"], filter(&[Speed::Blitz], &[]))
        );
    }

    #[tokio::test]
    async fn an_answer_is_served_until_a_change_and_never_when_not_listening() {
        let cache = serving(1 << 20);
        let start = question(&[], Filter::default());
        kept(&cache, &start, "{}").await;
        let Lookup::Hit(body) = look(&cache, &start, false).await else {
            panic!("kept");
        };
        assert_eq!(&body[..], b"{}");
        // Asked fresh: a miss, kept again.
        let Lookup::Miss(ticket) = look(&cache, &start, true).await else {
            panic!("a fresh lookup misses");
        };
        cache.keep(ticket, Bytes::from_static(b"{ }"));
        let Lookup::Hit(body) = look(&cache, &start, false).await else {
            panic!("kept");
        };
        assert_eq!(&body[..], b"{ }");
        // A change: forgotten.
        cache.forget(true);
        assert!(!is_hit(&cache, &start).await);
        // An answer looked up before a change and kept after it is of the
        // old generation: never served.
        let Lookup::Miss(ticket) = look(&cache, &start, true).await else {
            panic!("a miss expected");
        };
        cache.forget(true);
        cache.keep(ticket, Bytes::from_static(b"old"));
        assert!(!is_hit(&cache, &start).await);
        // Not listening: neither looked up nor kept.
        cache.forget(false);
        assert!(matches!(look(&cache, &start, false).await, Lookup::Bypass));
        cache.forget(true);
        assert!(!is_hit(&cache, &start).await);
        // Off.
        let off = serving(0);
        assert!(matches!(look(&off, &start, false).await, Lookup::Bypass));
        assert!(off.summary().is_none());
    }

    #[tokio::test]
    async fn a_question_under_way_is_waited_for_not_asked_again() {
        let cache = serving(1 << 20);
        let start = question(&[], Filter::default());
        let Lookup::Miss(ticket) = look(&cache, &start, false).await else {
            panic!("a miss expected");
        };
        // While it is under way, the same question waits; given too
        // short a wait, it is answered without the cache.
        let short = cache.lookup(start.clone(), false, Duration::from_millis(10));
        assert!(matches!(short.await, Lookup::Bypass));
        let (waited, ()) = tokio::join!(look(&cache, &start, false), async {
            tokio::task::yield_now().await;
            cache.keep(ticket, Bytes::from_static(b"{}"));
        });
        let Lookup::Hit(body) = waited else {
            panic!("the answer under way");
        };
        assert_eq!(&body[..], b"{}");
        // A request that fails gives its place to the next one.
        let other = question(&["e4"], Filter::default());
        let Lookup::Miss(failed) = look(&cache, &other, false).await else {
            panic!("a miss expected");
        };
        drop(failed);
        assert!(matches!(look(&cache, &other, false).await, Lookup::Miss(_)));
    }

    #[tokio::test]
    async fn the_bytes_bound_evicts() {
        const BODY: &str = concat!(
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        );
        let questions: Vec<Question> = ["e4", "d4", "c4", "Nf3", "g3", "b3", "f4", "Nc3"]
            .iter()
            .map(|m| question(&[m], Filter::default()))
            .collect();
        let one = ByBytes.weight(
            &Key {
                generation: 0,
                question: questions[0].clone(),
            },
            &Bytes::from_static(BODY.as_bytes()),
        );
        // Room for about three answers.
        let cache = serving(one * 3 + one / 2);
        for q in &questions {
            kept(&cache, q, BODY).await;
        }
        let answers = cache.answers.as_ref().expect("on");
        assert!(
            answers.weight() <= answers.capacity(),
            "{}",
            answers.weight()
        );
        let mut hits = 0;
        for q in &questions {
            if is_hit(&cache, q).await {
                hits += 1;
            }
        }
        assert!((1..=3).contains(&hits), "{hits} of 8 kept");
    }

    #[test]
    fn sizes_are_read_with_binary_units() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("512kB"), Ok(512 << 10));
        assert_eq!(parse_size("1 GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("64 MiBs").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }
}
