//! A CSV stream cut into pieces of whole rows, each with the file's header
//! before it, so that a file of millions of rows is read, predicted on and
//! written a piece at a time in bounded memory (`kynml predict`).
//!
//! A piece ends only after the line end (outside quoted cells) of a line
//! with text in it, so that blank lines go with the row after them, which
//! then finds them as a whole file's read would. Rows are located by
//! counting `\n`s, which is exact while every `\r` ends a `\r\n`; past the
//! first `\r` that does not (a classic Mac file, a `\r` inside a quoted
//! cell), the rest of the stream is one piece, located by the file's own
//! rules, as before.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::error::DataError;

/// About how many bytes of rows a piece holds.
pub const PIECE_BYTES: usize = 4 << 20;

/// How much is read before a header that has not ended is looked at (a
/// stream of zeros has no line end): the caller parses such a [`Piece`]
/// (`probe`) to refuse what is no CSV at once.
const HEADER_AT_MOST: usize = 1 << 20;

/// Whole rows of a stream, with the header before them.
#[derive(Debug)]
pub struct Piece {
    /// The header (with any blank lines before it), then the rows.
    pub bytes: Vec<u8>,
    /// Records from byte `shift.0` on are `shift.1` lines further on in the
    /// stream than in `bytes`; `(usize::MAX, 0)` for the first piece.
    pub shift: (usize, usize),
    /// The stream's first piece, which holds its header where it has one.
    pub first: bool,
    /// The first bytes of a stream whose header has not ended yet: only to
    /// be looked at (more of the same stream follows in a later piece).
    pub probe: bool,
}

/// Where the scan of the CSV text stands.
#[derive(Debug, Clone, Copy)]
struct Scan {
    in_quotes: bool,
    cell_start: bool,
    line_has_text: bool,
}

/// Cuts a stream into [`Piece`]s of about `target` bytes.
#[derive(Debug)]
pub struct RowPieces<R> {
    input: R,
    path: PathBuf,
    target: usize,
    /// Read and not yet handed out.
    pending: Vec<u8>,
    /// How much of `pending` is scanned, and the state there.
    scanned: usize,
    scan: Scan,
    /// The end of the header in `pending` (first piece), once found; then
    /// the header itself, which every later piece starts with.
    header_end: Option<usize>,
    prefix: Vec<u8>,
    /// The `\n`s of the stream before `pending`.
    lines: usize,
    /// Every `\r` scanned so far ends a `\r\n`.
    simple: bool,
    eof: bool,
    handed: usize,
    /// Whether a stream with no line end is looked at after its first MiB.
    probe: bool,
    probed: bool,
}

impl<R: Read> RowPieces<R> {
    /// `path` names the stream in errors; `probe`: a stream that may never
    /// end (standard input, a pipe) is looked at after a MiB without a
    /// line end ([`Piece::probe`]).
    pub fn new(input: R, path: &Path, target: usize, probe: bool) -> Self {
        RowPieces {
            input,
            path: path.to_path_buf(),
            target: target.max(1),
            pending: Vec::new(),
            scanned: 0,
            scan: Scan { in_quotes: false, cell_start: true, line_has_text: false },
            header_end: None,
            prefix: Vec::new(),
            lines: 0,
            simple: true,
            eof: false,
            handed: 0,
            probe,
            probed: false,
        }
    }

    /// The next piece; `None` once the stream has ended and all of it was
    /// handed out (the first piece is handed out even when empty).
    pub fn next_piece(&mut self) -> Result<Option<Piece>, DataError> {
        loop {
            if let Some(cut) = self.scan_to_cut() {
                return Ok(Some(self.hand_out(cut)));
            }
            if self.eof {
                if self.pending.is_empty() && self.handed > 0 {
                    return Ok(None);
                }
                let all = self.pending.len();
                return Ok(Some(self.hand_out(all)));
            }
            // A stream with no line end in its first MiB (`< /dev/zero`).
            let no_line = || !self.pending.iter().any(|&b| b == b'\n' || b == b'\r');
            if self.probe
                && !self.probed
                && self.header_end.is_none()
                && self.pending.len() >= HEADER_AT_MOST
                && no_line()
            {
                self.probed = true;
                return Ok(Some(Piece {
                    bytes: self.pending.clone(),
                    shift: (usize::MAX, 0),
                    first: true,
                    probe: true,
                }));
            }
            self.read_more()?;
        }
    }

    fn read_more(&mut self) -> Result<(), DataError> {
        let at = self.pending.len();
        self.pending.resize(at + (64 << 10), 0);
        let n = loop {
            match self.input.read(&mut self.pending[at..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    self.pending.truncate(at);
                    return Err(DataError::Io { path: self.path.clone(), source });
                }
            }
        };
        self.pending.truncate(at + n);
        if self.handed == 0 && at == 0 && n > 0 {
            super::csv_table::not_compressed(&self.path, &self.pending)?;
        }
        self.eof = n == 0;
        Ok(())
    }

    /// Scans on from where it stood to the first place a piece may end:
    /// after the header and at least `target` bytes, at the line end of a
    /// line with text, while the stream is simple. A byte whose meaning
    /// depends on the next is left for the next read, unless the stream
    /// has ended.
    fn scan_to_cut(&mut self) -> Option<usize> {
        let bytes = &self.pending;
        let mut i = self.scanned;
        let mut s = self.scan;
        let mut found = None;
        // A byte-order mark is no text of the first line (`csv` drops it:
        // a blank line after it still comes before the header).
        if i == 0 && self.handed == 0 && self.header_end.is_none() {
            if bytes.len() < 3 && !self.eof {
                return None;
            }
            if bytes.starts_with(b"\xef\xbb\xbf") {
                i = 3;
            }
        }
        while i < bytes.len() && self.simple {
            let next = bytes.get(i + 1).copied();
            if next.is_none() && !self.eof && matches!(bytes[i], b'"' | b'\r') {
                break;
            }
            let b = bytes[i];
            let mut used = 1;
            // Text is what makes a record no blank line to the reader: a
            // second cell, or a cell with more than spaces (`""` alone is
            // blank in a file of two columns or more).
            if s.in_quotes {
                match b {
                    b'"' if next == Some(b'"') => {
                        used = 2;
                        s.line_has_text = true;
                    }
                    b'"' => s.in_quotes = false,
                    b'\r' if next != Some(b'\n') => self.simple = false,
                    b if !b.is_ascii_whitespace() => s.line_has_text = true,
                    _ => {}
                }
            } else {
                let start = std::mem::replace(&mut s.cell_start, matches!(b, b',' | b'\n' | b'\r'));
                match b {
                    b'"' if start => s.in_quotes = true,
                    b'\r' if next != Some(b'\n') => self.simple = false,
                    b'\r' => {}
                    b'\n' => {
                        let ended_text = std::mem::replace(&mut s.line_has_text, false);
                        let end = i + 1;
                        if ended_text {
                            match self.header_end {
                                None if self.handed == 0 => self.header_end = Some(end),
                                Some(h) if self.handed == 0 && end > h && end >= self.target => found = Some(end),
                                _ if self.handed > 0 && end >= self.target => found = Some(end),
                                _ => {}
                            }
                        }
                    }
                    b if !b.is_ascii_whitespace() => s.line_has_text = true,
                    _ => {}
                }
            }
            if !self.simple {
                break;
            }
            i += used;
            if found.is_some() {
                break;
            }
        }
        self.scanned = i;
        self.scan = s;
        found
    }

    /// Hands out `pending[..end]` (the header before it, after the first).
    fn hand_out(&mut self, end: usize) -> Piece {
        let rest = self.pending.split_off(end);
        let taken = std::mem::replace(&mut self.pending, rest);
        self.scanned -= end.min(self.scanned);
        let first = self.handed == 0;
        let lines = self.lines;
        self.lines += count_newlines(&taken);
        self.handed += 1;
        if first {
            if let Some(h) = self.header_end {
                self.prefix = taken[..h].to_vec();
            }
            return Piece { bytes: taken, shift: (usize::MAX, 0), first, probe: false };
        }
        // The piece's first line is line `lines + 1` of the stream, and
        // line `prefix lines + 1` of its bytes.
        let in_prefix = count_newlines(&self.prefix);
        let mut bytes = Vec::with_capacity(self.prefix.len() + taken.len());
        bytes.extend_from_slice(&self.prefix);
        bytes.extend_from_slice(&taken);
        Piece { bytes, shift: (self.prefix.len(), lines - in_prefix), first, probe: false }
    }
}

fn count_newlines(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b == b'\n').count()
}
