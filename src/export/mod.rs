//! Writers of other formats, reading games through `query` so that a
//! filter means the same thing in every export. Pure formatting: no
//! database access and no files of their own (the caller owns the output).

pub mod pgn;
