//! `catch_quietly` silences only its own thread's panic. A test binary of its
//! own: it installs a process-wide panic hook.

use kynml_backend::catch_quietly;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[test]
fn only_the_quiet_thread_is_silenced() {
    // A hook that counts the panics it is shown, installed before the first
    // quiet call, as a service embedding KynML would install its own.
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    std::panic::set_hook(Box::new(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
    }));
    assert!(catch_quietly(|| -> u32 { panic!("hidden") }).is_err());
    assert_eq!(catch_quietly(|| 7).unwrap(), 7);
    assert_eq!(seen.load(Ordering::SeqCst), 0, "the quiet thread's panic reached the hook");

    // While one thread is inside catch_quietly, another thread's panic still
    // reaches the hook that was there before.
    let (enter, entered) = std::sync::mpsc::channel();
    let (leave, left) = std::sync::mpsc::channel::<()>();
    let quiet = std::thread::spawn(move || {
        catch_quietly(|| {
            enter.send(()).unwrap();
            left.recv().unwrap();
        })
        .unwrap();
    });
    entered.recv().unwrap();
    assert!(std::thread::spawn(|| panic!("shown")).join().is_err());
    leave.send(()).unwrap();
    quiet.join().unwrap();
    assert_eq!(seen.load(Ordering::SeqCst), 1, "the other thread's panic was silenced");

    // After the quiet call, this thread's panics reach the hook again.
    assert!(std::panic::catch_unwind(|| panic!("after")).is_err());
    assert_eq!(seen.load(Ordering::SeqCst), 2);
}
