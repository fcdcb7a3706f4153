//! A panic in a piece that a team's helper thread runs is raised again on
//! the caller, and the panic hook runs once, there: a caller that catches
//! panics quietly (a predictor's pass, which returns an error) leaves
//! nothing printed from the helper. (Its own process: it sets the hook.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use kynml_cpu::Team;

/// The threads the hook ran on, with the panic's words.
static SEEN: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

#[test]
fn a_helpers_panic_reaches_the_hook_once_on_the_caller() {
    // Installed before any team, so that the team's hook hands on to it.
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current().name().unwrap_or("?").to_string();
        let words = info
            .payload()
            .downcast_ref::<&str>()
            .map(|w| w.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        SEEN.lock().unwrap().push((thread, words));
    }));
    let team = Team::new(2);
    assert_eq!(team.threads(), 2, "a helper started");
    let caller = std::thread::current().name().unwrap_or("?").to_string();
    // The pieces fail on the helper only; the caller's own ones sleep, so
    // that the helper takes some of them.
    let mut raised = None;
    for _ in 0..200 {
        let failed = AtomicBool::new(false);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            team.run(8, &|i| {
                let on_helper = std::thread::current().name().is_some_and(|n| n.starts_with("kynml-cpu-"));
                if on_helper {
                    failed.store(true, Ordering::Relaxed);
                    panic!("piece {i} fails on a helper");
                }
                std::thread::sleep(Duration::from_millis(1));
            })
        }));
        if failed.load(Ordering::Relaxed) {
            raised = Some(caught.expect_err("the helper's panic reached the caller"));
            break;
        }
        assert!(caught.is_ok());
    }
    let payload = raised.expect("the helper took a piece in 200 jobs");
    let words = payload.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(words.starts_with("piece ") && words.ends_with(" fails on a helper"), "{words:?}");
    let seen = SEEN.lock().unwrap().clone();
    assert_eq!(seen, [(caller, words)], "the hook ran once, on the caller, with the helper's words");
}
