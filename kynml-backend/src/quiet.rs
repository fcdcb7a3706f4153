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

/// A caught panic's message (its `&str` or `String` payload), or "a panic
/// without a message".
pub fn panic_words(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_caught_panic_keeps_its_words() {
        let caught = super::catch_quietly(|| panic!("out of {} memory", "device")).unwrap_err();
        assert_eq!(super::panic_words(caught.as_ref()), "out of device memory");
        let caught = super::catch_quietly(|| std::panic::panic_any(7)).unwrap_err();
        assert_eq!(super::panic_words(caught.as_ref()), "a panic without a message");
    }
}
