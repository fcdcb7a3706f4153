//! Catching a dependency's panic without its message on standard error, and
//! without touching other threads' panics.
//!
//! Swapping the process's panic hook for the length of a call (as KynML once
//! did) silences every thread meanwhile: a service that embeds KynML would
//! lose the message of a panic on another thread in that window. Instead, one
//! hook is installed the first time it is needed; it stays silent only for the
//! thread inside [`catch_quietly`] and hands every other panic to the hook
//! that was there before it. A hook set after that one replaces it: the
//! caught panics then print (noise, nothing worse).

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

static INSTALL: Once = Once::new();

/// Runs `f`, turning a panic inside it into `Err` without printing it; panics
/// on other threads meanwhile print as they would have.
pub fn catch_quietly<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    INSTALL.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                before(info);
            }
        }));
    });
    let was = QUIET.with(|q| q.replace(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was));
    result
}
