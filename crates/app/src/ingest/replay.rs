//! A stream input (stdin, a pipe, a FIFO) read again after a failed
//! attempt of the same run.
//!
//! When the server goes away mid-input, the engine retries the input from
//! its checkpoint: a file is opened again and its committed bytes skipped.
//! A stream can be neither opened again (a FIFO's writer sees EPIPE, stdin
//! is gone) nor seeked, and the games the failed attempt had read but no
//! batch committed would be lost without a trace. So a stream stays open
//! for the whole input, and the decompressed bytes read since the last
//! committed batch are kept: the next attempt reads them first, then the
//! stream on. What is kept is what the pipeline and the writer hold in
//! flight (their channels and batches are bounded), released batch by
//! batch as they commit, up to a cap: past it (a game larger than the
//! cap, which the splitter streams through and rejects, or batches larger
//! than usual) nothing more is kept, and a retry of the input fails,
//! saying from which byte and game the stream was not imported, instead of
//! reading on from a point where games would be missing.

use std::{
    collections::VecDeque,
    fmt,
    io::{self, Read},
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, AtomicUsize},
    },
};

use crate::{
    error::Error,
    ingest::source::{Compression, Input, SourceOptions, open_input_interruptible},
};

/// One stream input of a run, kept across the attempts of its import
/// ([module docs](self)).
pub struct StreamReplay {
    name: String,
    /// The most bytes kept at once.
    cap: usize,
    state: Mutex<State>,
}

/// What an [`Input`] says of the stream beside its reader, kept for the
/// attempts after the first (the counter goes on across attempts).
#[derive(Clone)]
struct Opened {
    name: Arc<str>,
    len: Option<u64>,
    compression: Compression,
    consumed: Arc<AtomicU64>,
}

/// What the attempts share.
#[derive(Default)]
struct State {
    /// The stream once opened.
    opened: Option<Opened>,
    /// The decompressed stream while no attempt reads it.
    idle: Option<Box<dyn Read + Send>>,
    /// The bytes read and not yet committed, from offset `kept_from`.
    kept: VecDeque<u8>,
    /// The decompressed offset of `kept`'s first byte.
    kept_from: u64,
    /// Set once more than the cap had to be kept: the offset from which
    /// the stream can no longer be read again (the last commit's end).
    /// Nothing is kept after.
    given_up_at: Option<u64>,
}

impl State {
    fn kept_end(&self) -> u64 {
        self.kept_from + self.kept.len() as u64
    }
}

impl fmt::Debug for StreamReplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamReplay")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl StreamReplay {
    /// The stream `name`, not opened yet: the first attempt opens it.
    /// At most `cap` bytes are kept at once.
    pub fn new(name: &str, cap: usize) -> StreamReplay {
        StreamReplay {
            name: name.to_owned(),
            cap,
            state: Mutex::default(),
        }
    }

    /// The state. A panic while it was held can only have come from a
    /// bug elsewhere; each step leaves the state whole, so it is used on.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The input for an attempt: on the first, the stream opened as any
    /// input is ([`open_input_interruptible`]); after, the same stream,
    /// from the first byte no batch committed ([`Input::start_offset`]).
    ///
    /// # Errors
    /// Opening the stream failed; more than the cap was read past the last
    /// commit, so the stream cannot be read again
    /// ([`Error::Input`], naming the byte from which it was not imported);
    /// or an earlier attempt still reads it (a bug: the engine ends an
    /// attempt's pipeline before the next).
    pub fn open(
        self: &Arc<Self>,
        options: SourceOptions,
        interrupts: Arc<AtomicUsize>,
    ) -> Result<Input, Error> {
        let mut state = self.state();
        if let Some(at) = state.given_up_at {
            return Err(Error::Input {
                file: self.name.clone(),
                message: format!(
                    "a stream cannot be read again after a failed attempt once more than \
                     {} MiB were read past the last committed batch: it was not imported \
                     from byte {at} of its decompressed data on (the summary counts what \
                     was); feed the rest again, or import a file, which resumes",
                    self.cap >> 20
                ),
            });
        }
        let (opened, live) = match &state.opened {
            None => {
                let input = open_input_interruptible(&self.name, options, interrupts)?;
                let opened = Opened {
                    name: input.name,
                    len: input.len,
                    compression: input.compression,
                    consumed: input.consumed,
                };
                state.opened = Some(opened.clone());
                (opened, input.reader)
            }
            Some(opened) => {
                let opened = opened.clone();
                let live = state.idle.take().ok_or_else(|| {
                    Error::bug(format!(
                        "{} is opened for an attempt while an earlier one still reads it",
                        self.name
                    ))
                })?;
                (opened, live)
            }
        };
        let Opened {
            name,
            len,
            compression,
            consumed,
        } = opened;
        let start_offset = state.kept_from;
        drop(state);
        Ok(Input {
            name,
            len,
            compression,
            consumed,
            reader: Box::new(Attempt {
                replay: Arc::clone(self),
                live: Some(live),
                cursor: start_offset,
            }),
            start_offset,
        })
    }

    /// Forgets the bytes before `through`, the end of a committed batch:
    /// no attempt reads them again.
    ///
    /// # Errors
    /// `through` is past every byte read: no batch can end there (a bug).
    pub fn release(&self, through: u64) -> Result<(), Error> {
        let mut state = self.state();
        // Given up: nothing is kept, but what is not imported starts later.
        if let Some(at) = &mut state.given_up_at {
            *at = (*at).max(through);
            return Ok(());
        }
        if through > state.kept_end() {
            return Err(Error::bug(format!(
                "{}: a batch ending at byte {through} committed, but only {} bytes were read",
                self.name,
                state.kept_end()
            )));
        }
        // At most `kept.len()` bytes, checked above: a usize.
        let released = usize::try_from(through.saturating_sub(state.kept_from))
            .map_or(state.kept.len(), |n| n.min(state.kept.len()));
        state.kept.drain(..released);
        state.kept_from = state.kept_from.max(through);
        Ok(())
    }
}

/// An attempt's reader: the kept bytes from its start, then the stream,
/// whose new bytes are kept too. Dropped, it gives the stream back.
struct Attempt {
    replay: Arc<StreamReplay>,
    /// The stream; `None` only once dropped.
    live: Option<Box<dyn Read + Send>>,
    /// The decompressed offset of the next byte this attempt reads.
    cursor: u64,
}

impl Read for Attempt {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        {
            let state = self.replay.state();
            if self.cursor < state.kept_end() {
                let Some(at) = self
                    .cursor
                    .checked_sub(state.kept_from)
                    .and_then(|at| usize::try_from(at).ok())
                else {
                    return Err(io::Error::other(format!(
                        "bytes from {} were released while an attempt still reads them",
                        self.cursor
                    )));
                };
                let (front, back) = state.kept.as_slices();
                let from = if at < front.len() {
                    &front[at..]
                } else {
                    &back[at - front.len()..]
                };
                let n = from.len().min(buf.len());
                buf[..n].copy_from_slice(&from[..n]);
                self.cursor += n as u64;
                return Ok(n);
            }
        }
        // Read without the lock held: a stream may wait for its writer,
        // and the engine releases committed bytes meanwhile.
        let live = self
            .live
            .as_mut()
            .expect("an attempt's stream is taken only when it is dropped");
        let n = live.read(buf)?;
        let mut state = self.replay.state();
        if state.given_up_at.is_none() {
            if state.kept.len() + n > self.replay.cap {
                state.given_up_at = Some(state.kept_from);
                state.kept = VecDeque::new();
            } else {
                state.kept.extend(&buf[..n]);
            }
        }
        self.cursor += n as u64;
        Ok(n)
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        self.replay.state().idle = self.live.take();
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    /// A file of `text`, read as the stream the replay opens, keeping at
    /// most `cap` bytes.
    fn replay_of(text: &[u8], cap: usize) -> (tempfile::NamedTempFile, Arc<StreamReplay>) {
        let mut file = tempfile::NamedTempFile::new().expect("temp file");
        file.write_all(text).expect("write");
        let name = file.path().to_str().expect("utf-8 temp path").to_owned();
        (file, Arc::new(StreamReplay::new(&name, cap)))
    }

    /// An attempt's input, which must open.
    #[track_caller]
    fn open(replay: &Arc<StreamReplay>) -> Input {
        replay
            .open(SourceOptions::default(), Arc::default())
            .expect("the attempt opens")
    }

    fn read_some(input: &mut Input, n: usize) -> Vec<u8> {
        let mut out = vec![0; n];
        input.reader.read_exact(&mut out).expect("read");
        out
    }

    #[test]
    fn an_attempt_after_a_failure_reads_again_what_no_batch_committed() {
        let text: Vec<u8> = (0..200u8).collect();
        let (_file, replay) = replay_of(&text, 1024);
        let mut first = open(&replay);
        assert_eq!(first.start_offset, 0);
        assert_eq!(read_some(&mut first, 120), text[..120]);
        replay
            .release(50)
            .expect("a batch through byte 50 committed");
        drop(first);

        let mut second = open(&replay);
        assert_eq!(second.start_offset, 50);
        let mut rest = Vec::new();
        second.reader.read_to_end(&mut rest).expect("read");
        assert_eq!(rest, text[50..], "the kept bytes, then the stream on");
    }

    #[test]
    fn only_committed_bytes_are_forgotten() {
        let text = b"0123456789";
        let (_file, replay) = replay_of(text, 1024);
        let mut input = open(&replay);
        assert_eq!(read_some(&mut input, 6), b"012345");
        assert!(replay.release(7).is_err(), "byte 7 was not read yet");
        replay.release(4).expect("release");
        replay
            .release(4)
            .expect("the same checkpoint again changes nothing");
        assert_eq!(replay.state().kept, b"45".to_vec());
        drop(input);
        let mut again = open(&replay);
        assert_eq!(read_some(&mut again, 6), b"456789");
    }

    #[test]
    fn past_the_cap_a_retry_fails_naming_the_byte_it_cannot_read_again() {
        let text: Vec<u8> = (0..200u8).collect();
        let (_file, replay) = replay_of(&text, 64);
        let mut first = open(&replay);
        assert_eq!(read_some(&mut first, 40), text[..40]);
        replay
            .release(30)
            .expect("a batch through byte 30 committed");
        // 10 kept + 60 more read: over the cap of 64.
        assert_eq!(read_some(&mut first, 60), text[40..100]);
        assert!(
            replay.state().kept.is_empty(),
            "nothing is kept past the cap"
        );
        replay
            .release(90)
            .expect("a later commit moves where the loss starts");
        drop(first);
        let retried = replay.open(SourceOptions::default(), Arc::default());
        let Err(Error::Input { message, .. }) = retried else {
            panic!("a retry past the cap must fail the input");
        };
        assert!(message.contains("from byte 90 "), "{message}");
    }

    #[test]
    fn two_attempts_cannot_read_the_stream_at_once() {
        let (_file, replay) = replay_of(b"abc", 1024);
        let _first = open(&replay);
        let second = replay.open(SourceOptions::default(), Arc::default());
        assert!(
            matches!(second, Err(Error::Bug { .. })),
            "a second reader was given"
        );
    }
}
