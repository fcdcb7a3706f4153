//! A team of threads that stays awake through a training step.
//!
//! A step is a few dozen short parallel jobs (a product, an activation, a
//! normalisation), each a fraction of a millisecond. With rayon's pool the
//! second core slept between them, and waking it (a futex, then the
//! scheduler) took about as long as a job: measured on this project's
//! 2-core machine, training used 0.95 of a core on average. The team's
//! helpers instead spin for a while after each job, as OpenMP runtimes
//! do, so the next job starts on every core at once; after
//! [`SPIN`] without work (between epochs, say) they sleep.
//!
//! A job is `pieces` calls of one function, `f(0)..f(pieces - 1)`, shared
//! out by an atomic counter; the caller works on it too, and returns when
//! every piece is done and every helper has let go of `f`. A panic in a
//! piece (on any thread) is raised again on the caller after that.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a helper spins for the next job before it sleeps. The gaps
/// between a step's jobs are microseconds, and between steps (the next
/// batch) tens of them.
const SPIN: Duration = Duration::from_micros(500);
/// After this long spinning, a helper also yields its core between checks,
/// so that on a busy machine it does not hold back the thread it waits for.
const YIELD_AFTER: Duration = Duration::from_micros(50);

/// A job's function with its lifetime erased; [`Team::run`] keeps the real
/// one alive until every helper is done with it.
#[derive(Clone, Copy)]
struct Job {
    f: *const (dyn Fn(usize) + Sync),
    pieces: usize,
}

struct Shared {
    /// Bumped to publish a job.
    generation: AtomicUsize,
    /// Written only by the caller of [`Team::run`], before it bumps
    /// `generation`, while no helper reads it (all acknowledged the last).
    job: UnsafeCell<Job>,
    /// The next piece to take.
    next: AtomicUsize,
    /// Helpers done with the current job.
    acks: AtomicUsize,
    stop: AtomicBool,
    sleep: Mutex<()>,
    wake: Condvar,
    /// The first panic of a helper's piece, re-raised on the caller.
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

// SAFETY: `job` is written only while no helper reads it (see `Team::run`),
// and the function it points to is `Sync`.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

/// The calling thread and `threads - 1` helpers.
pub struct Team {
    shared: Arc<Shared>,
    helpers: Vec<JoinHandle<()>>,
    /// Held for the length of a job, so that two threads sharing a team
    /// never interleave jobs (the second runs its job alone instead).
    busy: Mutex<()>,
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Team({} threads)", self.threads())
    }
}

impl Team {
    /// A team of `threads` (the caller included); 1 or 0 means no helpers.
    pub fn new(threads: usize) -> Self {
        let shared = Arc::new(Shared {
            generation: AtomicUsize::new(0),
            job: UnsafeCell::new(Job { f: &noop as &(dyn Fn(usize) + Sync), pieces: 0 }),
            next: AtomicUsize::new(0),
            acks: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            panic: Mutex::new(None),
        });
        quiet_helpers();
        let helpers = (1..threads.max(1))
            .filter_map(|i| {
                let shared = Arc::clone(&shared);
                // A helper that cannot start only leaves the team smaller.
                std::thread::Builder::new().name(format!("kynml-cpu-{i}")).spawn(move || helper(&shared)).ok()
            })
            .collect();
        Team { shared, helpers, busy: Mutex::new(()) }
    }

    /// The threads that work on a job, the caller included.
    pub fn threads(&self) -> usize {
        self.helpers.len() + 1
    }

    /// Calls `f(i)` for every `i` in `0..pieces`, spread over the team, and
    /// returns when all are done. A panic in a piece is raised again here,
    /// once every thread has let go of `f`.
    pub fn run(&self, pieces: usize, f: &(dyn Fn(usize) + Sync)) {
        let guard = match self.busy.try_lock() {
            Ok(g) if !self.helpers.is_empty() && pieces > 1 => g,
            // A panic in an earlier job left the lock poisoned; the team is fine.
            Err(std::sync::TryLockError::Poisoned(g)) if !self.helpers.is_empty() && pieces > 1 => g.into_inner(),
            _ => return (0..pieces).for_each(f),
        };
        let s = &*self.shared;
        // A payload left by a job whose caller panicked itself is that job's, not this one's.
        s.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
        // SAFETY: every helper acknowledged the previous job before the
        // previous `run` returned, and none reads `job` before seeing the
        // generation bumped below; `busy` keeps other callers out.
        unsafe {
            let f: *const (dyn Fn(usize) + Sync + '_) = f;
            // Lifetime erased: this call waits below until no helper holds it.
            let f =
                std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const (dyn Fn(usize) + Sync + 'static)>(f);
            *s.job.get() = Job { f, pieces };
        }
        s.next.store(0, Ordering::Relaxed);
        s.acks.store(0, Ordering::Relaxed);
        s.generation.fetch_add(1, Ordering::Release);
        {
            let _lock = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        // Waits for every helper to let go of `f`, on return and on unwinding
        // (a panic in the caller's own pieces) alike.
        let waiter = AwaitHelpers { shared: s, helpers: self.helpers.len() };
        work(s, f, pieces);
        drop(waiter);
        drop(guard);
        if let Some(payload) = s.panic.lock().unwrap_or_else(|e| e.into_inner()).take() {
            // Raised as a panic of the caller's own, with the helper's words:
            // the panic hook runs here, on the caller's thread, so a caller
            // that catches panics quietly (a predictor's pass) prints nothing,
            // and any other prints it once.
            let words = payload
                .downcast_ref::<&str>()
                .map(|w| w.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned());
            match words {
                Some(words) => panic!("{words}"),
                None => std::panic::resume_unwind(payload),
            }
        }
    }
}

thread_local! {
    /// Set on a team's helper threads.
    static HELPER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Installs, once, a panic hook that prints nothing for a panic on a
/// helper thread (the caller of [`Team::run`] raises it again, where the
/// hook before this one decides) and hands every other to that hook. A
/// helper's panic printed at once, even where the caller caught it as an
/// error and said it (a predictor's failed pass).
fn quiet_helpers() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !HELPER.with(std::cell::Cell::get) {
                before(info);
            }
        }));
    });
}

impl Team {
    /// `f(i, a, b, c)` on the `i`-th chunks of `len` elements of `a`
    /// (read), `b` and `c` (written), spread over the team. The three
    /// slices must have the same length.
    ///
    /// # Panics
    /// If the lengths differ, or `len` is 0 with anything to do.
    pub fn zip_chunks3<A: Sync, B: Send, C: Send>(
        &self,
        len: usize,
        a: &[A],
        b: &mut [B],
        c: &mut [C],
        f: impl Fn(usize, &[A], &mut [B], &mut [C]) + Sync,
    ) {
        assert!(a.len() == b.len() && a.len() == c.len(), "zip_chunks3: lengths differ");
        let total = a.len();
        if total == 0 {
            return;
        }
        assert!(len > 0, "zip_chunks3: chunks of 0");
        let (b, c) = (Parts::new(b), Parts::new(c));
        self.run(total.div_ceil(len), &|i| {
            let r = piece(i, len, total);
            // SAFETY: each piece gets its own range.
            let (pb, pc) = unsafe { (b.part(r.clone()), c.part(r.clone())) };
            f(i, &a[r], pb, pc);
        });
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _lock = self.shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for h in self.helpers.drain(..) {
            let _ = h.join();
        }
    }
}

fn noop(_: usize) {}

/// On drop, spins (yielding now and then) until every helper has
/// acknowledged the current job.
struct AwaitHelpers<'a> {
    shared: &'a Shared,
    helpers: usize,
}

impl Drop for AwaitHelpers<'_> {
    fn drop(&mut self) {
        let mut spins = 0u32;
        while self.shared.acks.load(Ordering::Acquire) < self.helpers {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) {
                // On a machine with more threads than free cores, let the helper run.
                std::thread::yield_now();
            }
            std::hint::spin_loop();
        }
    }
}

/// Takes pieces until none is left.
fn work(s: &Shared, f: &(dyn Fn(usize) + Sync), pieces: usize) {
    loop {
        let i = s.next.fetch_add(1, Ordering::Relaxed);
        if i >= pieces {
            break;
        }
        f(i);
    }
}

fn helper(s: &Shared) {
    HELPER.with(|h| h.set(true));
    let mut seen = 0usize;
    loop {
        // Spin for the next job, then sleep.
        let started = Instant::now();
        let mut spins = 0u32;
        loop {
            if s.stop.load(Ordering::Acquire) {
                return;
            }
            if s.generation.load(Ordering::Acquire) != seen {
                break;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) && started.elapsed() > YIELD_AFTER {
                std::thread::yield_now();
            }
            if spins.is_multiple_of(64) && started.elapsed() > SPIN {
                let mut lock = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
                while s.generation.load(Ordering::Acquire) == seen && !s.stop.load(Ordering::Acquire) {
                    lock = s.wake.wait(lock).unwrap_or_else(|e| e.into_inner());
                }
                break;
            }
            std::hint::spin_loop();
        }
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        seen = s.generation.load(Ordering::Acquire);
        // SAFETY: the job was written before the generation this helper has
        // just seen, and is not written again until it acknowledges.
        let job = unsafe { *s.job.get() };
        // SAFETY: `run` keeps the function alive until this helper acknowledges.
        let f = unsafe { &*job.f };
        // A panicking piece must not end the helper unacknowledged: `run` would wait forever.
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(s, f, job.pieces))) {
            let mut first = s.panic.lock().unwrap_or_else(|e| e.into_inner());
            first.get_or_insert(payload);
            // The other pieces are skipped: the job has failed.
            s.next.store(usize::MAX / 2, Ordering::Relaxed);
        }
        s.acks.fetch_add(1, Ordering::Release);
    }
}

/// A mutable slice whose disjoint parts the pieces of a job write.
pub(crate) struct Parts<'a, T> {
    ptr: *mut T,
    len: usize,
    _slice: PhantomData<&'a mut [T]>,
}

// SAFETY: pieces get disjoint parts (the caller of `part` promises it), so
// sharing the pointer across the team's threads is sharing `&mut` to
// disjoint elements.
unsafe impl<T: Send> Sync for Parts<'_, T> {}
unsafe impl<T: Send> Send for Parts<'_, T> {}

impl<'a, T> Parts<'a, T> {
    pub(crate) fn new(slice: &'a mut [T]) -> Self {
        Parts { ptr: slice.as_mut_ptr(), len: slice.len(), _slice: PhantomData }
    }

    /// Elements `range` of the slice.
    ///
    /// # Safety
    /// No two calls made while the parts are shared may give overlapping ranges.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn part(&self, range: std::ops::Range<usize>) -> &mut [T] {
        assert!(range.start <= range.end && range.end <= self.len, "part {range:?} of {}", self.len);
        std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.len())
    }
}

/// The `i`-th of the ranges of at most `len` that cover `0..total`.
pub(crate) fn piece(i: usize, len: usize, total: usize) -> std::ops::Range<usize> {
    (i * len).min(total)..((i + 1) * len).min(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_piece_runs_once_for_many_jobs_in_a_row() {
        let team = Team::new(3);
        for pieces in [0, 1, 2, 7, 100] {
            for _ in 0..50 {
                let counts: Vec<AtomicUsize> = (0..pieces).map(|_| AtomicUsize::new(0)).collect();
                team.run(pieces, &|i| {
                    counts[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 1), "{pieces} pieces");
            }
        }
    }

    #[test]
    fn jobs_after_the_helpers_slept_still_run() {
        let team = Team::new(2);
        std::thread::sleep(SPIN * 3);
        let total = AtomicUsize::new(0);
        team.run(10, &|i| {
            total.fetch_add(i, Ordering::Relaxed);
        });
        assert_eq!(total.load(Ordering::Relaxed), 45);
    }

    #[test]
    fn a_panicking_piece_is_raised_on_the_caller_and_the_team_goes_on() {
        let team = Team::new(2);
        for bad in [0, 5] {
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                team.run(8, &|i| {
                    std::thread::sleep(Duration::from_millis(1));
                    assert!(i != bad, "piece {i} fails");
                })
            }));
            assert!(caught.is_err(), "the panic of piece {bad} reached the caller");
            let total = AtomicUsize::new(0);
            team.run(10, &|i| {
                total.fetch_add(i, Ordering::Relaxed);
            });
            assert_eq!(total.load(Ordering::Relaxed), 45);
        }
    }

    #[test]
    fn parts_write_disjoint_ranges() {
        let team = Team::new(2);
        let mut data = vec![0usize; 1000];
        let parts = Parts::new(&mut data);
        team.run(7, &|i| {
            // SAFETY: piece ranges are disjoint.
            let part = unsafe { parts.part(piece(i, 150, 1000)) };
            part.iter_mut().for_each(|v| *v = i + 1);
        });
        assert!(data.iter().enumerate().all(|(j, &v)| v == j / 150 + 1));
    }
}
