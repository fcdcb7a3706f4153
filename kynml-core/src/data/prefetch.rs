//! The batch feed: batches of one epoch, in a fixed order, prepared on the
//! training thread or ahead of it by a pool of worker threads.
//!
//! With `num_workers = N > 0`, a producer thread asks a rayon pool of N
//! threads to gather the next N batches in parallel, then hands them over in
//! order through a bounded channel holding at most `prefetch` batches. The
//! order of batches is decided before any worker runs, so the number of
//! workers changes speed, never results. With `num_workers = 0` and a
//! `prefetch`, one thread gathers the batches ahead, one at a time (the
//! users' language defines `prefetch` on its own: batches prepared ahead of
//! the step); with neither, each batch is gathered on the training thread
//! when it is needed.
//!
//! Features are standardised once when the data is loaded, so preparing a
//! batch is gathering its rows into one contiguous buffer.

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::Scope;
use std::time::Instant;

use rayon::prelude::*;

use crate::data::{Batch, Dataset, Prepared, Split};

/// How batches are prepared for a whole run.
#[derive(Debug, Clone)]
pub struct Loader {
    pool: Option<Arc<rayon::ThreadPool>>,
    workers: usize,
    depth: usize,
}

impl Loader {
    /// `prefetch` is the queue depth; when not given it is two batches per
    /// worker (PyTorch's `prefetch_factor` default). Fails when the worker
    /// threads cannot be started: the run report promised them.
    pub fn new(workers: usize, prefetch: Option<usize>) -> Result<Self, rayon::ThreadPoolBuildError> {
        Self::for_epochs_of(workers, prefetch, usize::MAX)
    }

    /// [`new`](Self::new) for epochs of at most `batches` batches: neither
    /// the workers nor the queue grow past them (see [`within`]).
    pub fn for_epochs_of(
        workers: usize,
        prefetch: Option<usize>,
        batches: usize,
    ) -> Result<Self, rayon::ThreadPoolBuildError> {
        let (workers, depth) = within(workers, prefetch, batches);
        if depth == 0 {
            return Ok(Loader { pool: None, workers: 0, depth: 0 });
        }
        // `prefetch` without workers: one thread, a batch at a time.
        let workers = workers.max(1);
        let pool =
            rayon::ThreadPoolBuilder::new().num_threads(workers).thread_name(|i| format!("kynml-data-{i}")).build()?;
        Ok(Loader { pool: Some(Arc::new(pool)), workers, depth })
    }

    /// The batches of one epoch, in the order of `batches`.
    pub fn epoch<'scope, 'env>(
        &self,
        scope: &'scope Scope<'scope, 'env>,
        data: &'env Dataset,
        batches: Vec<Vec<usize>>,
    ) -> BatchFeed<'env> {
        let Some(pool) = self.pool.clone() else {
            return BatchFeed::Inline { data, batches: batches.into_iter() };
        };
        let (tx, rx) = sync_channel::<Batch>(self.depth);
        let window = self.workers;
        scope.spawn(move || {
            for chunk in batches.chunks(window) {
                let ready: Vec<Batch> = pool.install(|| {
                    chunk
                        .par_iter()
                        .map(|rows| {
                            let start = Instant::now();
                            let mut batch = Batch::default();
                            data.gather(Split::Train, rows, &mut batch);
                            let worker = rayon::current_thread_index().unwrap_or(0);
                            batch.prepared = Some(Prepared { worker, start, end: Instant::now() });
                            batch
                        })
                        .collect()
                });
                for batch in ready {
                    // The receiver is gone when training stopped early.
                    if tx.send(batch).is_err() {
                        return;
                    }
                }
            }
        });
        BatchFeed::Workers(rx)
    }
}

/// The worker threads and queue depth that serve epochs of `batches`
/// batches. The depth is `prefetch`, else two batches a worker (none
/// without workers: batches are then gathered on the training thread, unless
/// a `prefetch` asks for them ahead, which one thread does). A count
/// above both 64 and the epoch's batches is cut to the batches: a worker
/// or a queue slot beyond them never holds one, and `num_workers = 100000`
/// would start 100,000 threads (`prefetch = 1e12`, allocate its queue).
/// Ordinary values are left as written.
pub fn within(workers: usize, prefetch: Option<usize>, batches: usize) -> (usize, usize) {
    let batches = batches.max(1);
    let fit = |n: usize| if n > batches.max(64) { batches } else { n };
    if workers == 0 {
        return (0, fit(prefetch.unwrap_or(0)));
    }
    let workers = fit(workers);
    let depth = fit(prefetch.filter(|&p| p > 0).unwrap_or(workers.saturating_mul(2)));
    (workers, depth)
}

/// An epoch's batches, in order.
pub enum BatchFeed<'env> {
    /// `num_workers = 0`: each batch is gathered on the training thread when asked for.
    Inline {
        /// The dataset the batches are gathered from.
        data: &'env Dataset,
        /// The rows of each batch still to come (positions in the training part), in order.
        batches: std::vec::IntoIter<Vec<usize>>,
    },
    /// Batches gathered ahead by worker threads, received in order.
    Workers(Receiver<Batch>),
}

impl Iterator for BatchFeed<'_> {
    type Item = Batch;

    fn next(&mut self) -> Option<Batch> {
        match self {
            BatchFeed::Inline { data, batches } => {
                let rows = batches.next()?;
                let mut batch = Batch::default();
                data.gather(Split::Train, &rows, &mut batch);
                Some(batch)
            }
            BatchFeed::Workers(rx) => rx.recv().ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{Table, Targets};

    fn dataset(rows: usize, width: usize) -> Dataset {
        let features: Vec<f32> = (0..rows * width).map(|i| i as f32).collect();
        let targets = Targets::Regression((0..rows).map(|i| i as f32).collect());
        let table = Table {
            path: "t.csv".into(),
            feature_names: (0..width).map(|i| format!("f{i}")).collect(),
            target_name: "y".into(),
            features,
            targets,
            categorical: Vec::new(),
            text: None,
            sequence: None,
            collapsed: Vec::new(),
            target_collapsed: false,
            lines: Vec::new(),
        };
        Dataset::from_table(table, 0.8, false, 3).unwrap()
    }

    fn collect(loader: &Loader, data: &Dataset, batches: Vec<Vec<usize>>) -> Vec<Batch> {
        std::thread::scope(|s| loader.epoch(s, data, batches).collect())
    }

    #[test]
    fn workers_and_queue_stop_at_an_epochs_batches() {
        assert_eq!(within(100_000, Some(1_000_000_000_000), 8), (8, 8));
        assert_eq!(within(4, None, 100), (4, 8));
        assert_eq!(within(4, Some(3), 100), (4, 3));
        assert_eq!(within(0, Some(5), 100), (0, 5));
        assert_eq!(within(0, None, 100), (0, 0));
        assert_eq!(within(0, Some(0), 100), (0, 0));
        assert_eq!(within(0, Some(1_000_000), 8), (0, 8));
        // Ordinary values stay as written, even above a small epoch's batches.
        assert_eq!(within(4, Some(2), 1), (4, 2));
        assert_eq!(within(200, None, 1000), (200, 400));
        // A huge queue and thread count are not allocated or started.
        let loader = Loader::for_epochs_of(1_000_000, Some(usize::MAX), 3).unwrap();
        assert_eq!((loader.workers, loader.depth), (3, 3));
    }

    #[test]
    fn any_number_of_workers_gives_the_same_batches_in_the_same_order() {
        let data = dataset(1000, 7);
        let mut order: Vec<usize> = (0..data.train.len()).collect();
        crate::rng::SplitMix64::new(9).shuffle(&mut order);
        let batches: Vec<Vec<usize>> = order.chunks(33).map(<[usize]>::to_vec).collect();
        let reference = collect(&Loader::new(0, None).unwrap(), &data, batches.clone());
        assert_eq!(reference.len(), batches.len());
        for (workers, prefetch) in [(1, None), (4, Some(2)), (3, Some(1)), (8, None), (0, Some(2)), (0, Some(1))] {
            let got = collect(&Loader::new(workers, prefetch).unwrap(), &data, batches.clone());
            assert_eq!(got, reference, "workers {workers}, prefetch {prefetch:?}");
        }
    }

    #[test]
    fn a_prefetch_without_workers_prepares_the_batches_ahead_on_one_thread() {
        let data = dataset(200, 3);
        let batches: Vec<Vec<usize>> =
            (0..data.train.len()).collect::<Vec<_>>().chunks(10).map(<[usize]>::to_vec).collect();
        let ahead = collect(&Loader::new(0, Some(2)).unwrap(), &data, batches.clone());
        assert_eq!(ahead.len(), batches.len());
        assert!(ahead.iter().all(|b| b.prepared.is_some_and(|p| p.worker == 0)), "prepared ahead, by one thread");
        // Without a prefetch, on the training thread as it is asked for.
        let inline = collect(&Loader::new(0, None).unwrap(), &data, batches);
        assert!(inline.iter().all(|b| b.prepared.is_none()));
        assert_eq!(ahead, inline);
    }

    #[test]
    fn stopping_early_does_not_hang_the_producer() {
        let data = dataset(2000, 3);
        let batches: Vec<Vec<usize>> =
            (0..data.train.len()).collect::<Vec<_>>().chunks(10).map(<[usize]>::to_vec).collect();
        let loader = Loader::new(2, Some(1)).unwrap();
        let first: Vec<Batch> = std::thread::scope(|s| loader.epoch(s, &data, batches).take(3).collect());
        assert_eq!(first.len(), 3);
    }
}
