//! The terminal on standard error, as the progress bars draw on it.

use std::io::Write;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

/// The terminal's `(columns, rows)` on standard error, each 0 where it
/// does not say.
fn size() -> (usize, usize) {
    // SAFETY: a zeroed winsize is a valid value of the plain C struct.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ fills a winsize struct.
    match unsafe { libc::ioctl(2, libc::TIOCGWINSZ, &mut size) } {
        0 => (usize::from(size.ws_col), usize::from(size.ws_row)),
        _ => (0, 0),
    }
}

/// Whether progress is drawn on standard error: a terminal that moves its
/// cursor. `TERM=dumb` (Emacs' shell, some CI runners' log panes) shows
/// the escapes drawing takes as text: it gets the plain lines a log gets.
pub fn draws() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
}

/// A wait's progress on a terminal: what is done of how many steps, and
/// the time taken, redrawn on its own while a step takes long (a GPU's
/// first, tuning and compiling kernels for minutes); nothing where
/// progress is not drawn ([`draws`]).
pub struct Ticker(Option<ProgressBar>);

impl Ticker {
    /// `what` of `len` steps, none done yet.
    pub fn new(what: &str, len: u64) -> Self {
        if !draws() {
            return Ticker(None);
        }
        let style = ProgressStyle::with_template("{msg} [{bar:24}] {pos}/{len} steps  {elapsed}")
            .expect("static template")
            .progress_chars("=> ");
        let bar = bar(len).with_style(style).with_message(what.to_string());
        // Drawn at once: the first redraw of its own comes a quarter second
        // on, and steps that finish sooner may not be told one by one.
        bar.tick();
        bar.enable_steady_tick(std::time::Duration::from_millis(250));
        Ticker(Some(bar))
    }

    /// Whether it draws: where it does not, the caller says its progress in lines.
    pub fn draws(&self) -> bool {
        self.0.is_some()
    }

    /// `done` steps are done.
    pub fn set(&self, done: u64) {
        if let Some(bar) = &self.0 {
            bar.set_position(done);
        }
    }

    /// Clears its line.
    pub fn finish(self) {
        if let Some(bar) = self.0 {
            bar.finish_and_clear();
        }
    }
}

/// The width of the terminal on standard error, 80 where it cannot be told.
pub fn columns() -> usize {
    match size() {
        (0, _) => 80,
        (columns, _) => columns,
    }
}

/// A bar of `len` steps drawn on standard error at the terminal's own
/// width. indicatif's own target reads the size through `console`, which
/// takes a terminal that gives its rows as 0 (`stty cols 50` in a fresh
/// pty) for an 80-column one: each redraw was padded to 80 columns,
/// wrapped, and left a stale line behind.
pub fn bar(len: u64) -> ProgressBar {
    let (columns, rows) = size();
    let term = Stderr { columns: if columns == 0 { 80 } else { columns }, rows: if rows == 0 { 24 } else { rows } };
    ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::term_like_with_hz(Box::new(term), 20))
}

/// Standard error as a terminal of a known size, moved about by ANSI escapes.
#[derive(Debug)]
struct Stderr {
    columns: usize,
    rows: usize,
}

impl Stderr {
    fn write(&self, text: &str) -> std::io::Result<()> {
        std::io::stderr().lock().write_all(text.as_bytes())
    }

    fn moved(&self, n: usize, code: char) -> std::io::Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.write(&format!("\x1b[{n}{code}"))
    }
}

impl TermLike for Stderr {
    // Read at each draw: a terminal narrowed during an epoch wraps each
    // frame into more lines, which indicatif clears only knowing the width
    // (a stale line was left behind at every redraw).
    fn width(&self) -> u16 {
        let columns = match size().0 {
            0 => self.columns,
            now => now,
        };
        u16::try_from(columns).unwrap_or(u16::MAX)
    }

    fn height(&self) -> u16 {
        let rows = match size().1 {
            0 => self.rows,
            now => now,
        };
        u16::try_from(rows).unwrap_or(u16::MAX)
    }

    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        self.moved(n, 'A')
    }

    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        self.moved(n, 'B')
    }

    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        self.moved(n, 'C')
    }

    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        self.moved(n, 'D')
    }

    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.write(&format!("{s}\n"))
    }

    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.write(s)
    }

    fn clear_line(&self) -> std::io::Result<()> {
        self.write("\r\x1b[2K")
    }

    fn flush(&self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
