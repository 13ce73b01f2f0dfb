//! Large runs decoded once per audit.
//!
//! A scoped head audit of a large suite reads the same few runs of every test more than once:
//! the carried runs put together from the base's (read by the scope read off them, the replays
//! and the matrix), and the head's own whole orders in an audit that is not scoped (read by the
//! replays and the matrix). Decoding one run of 20,000 tests costs about 50 ms and freeing it
//! 10 to 20 ms. Here the whole orders' runs of many tests are kept, decoded, by the BLAKE3
//! digest of their bytes: the same bytes always decode to the same run, so a hit is the run its
//! bytes are, wherever they came from (a digest of bytes only to know the same bytes again in
//! this process, not a key of anything stored). A node that made such a run (a carried run)
//! leaves what it encoded here, so that no one decodes it at all; a reader of other runs (the
//! matrix's shuffled orders) finds a kept one or decodes its own, and keeps nothing.
//!
//! What is kept is bounded: the last [`KEEP`] runs of at least [`WORTH`] tests. The large
//! values this audit lets go of are freed on a thread of fixgate's own, off the audit's path.

use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};

use crate::pytest::result::RunResult;

/// How many decoded runs are kept: the two whole orders of the base and of the head.
const KEEP: usize = 4;

/// Runs of fewer tests decode in a millisecond or two: they are not kept.
const WORTH: usize = 1_000;

/// The decoded runs of one audit.
#[derive(Default)]
pub(crate) struct Decoded {
    kept: Mutex<VecDeque<(blake3::Hash, Arc<RunResult>)>>,
}

impl Decoded {
    /// The run `bytes` encode: a kept one, else decoded now and not kept.
    pub(crate) fn decode(&self, bytes: &[u8]) -> Result<Arc<RunResult>, fixgate_graph::NodeError> {
        self.read(bytes, false)
    }

    /// The run `bytes` encode, kept for whoever reads them next when it has many tests (a whole
    /// order's, which later phases read again).
    pub(crate) fn decode_kept(
        &self,
        bytes: &[u8],
    ) -> Result<Arc<RunResult>, fixgate_graph::NodeError> {
        self.read(bytes, true)
    }

    fn read(&self, bytes: &[u8], keep: bool) -> Result<Arc<RunResult>, fixgate_graph::NodeError> {
        let key = blake3::hash(bytes);
        if let Some(run) = self.find(&key) {
            return Ok(run);
        }
        let run = Arc::new(crate::engine::runs::decode_run(bytes)?);
        if keep {
            self.keep_hashed(key, &run);
        }
        Ok(run)
    }

    /// Keeps `run`, which `bytes` encode (a node's own output), for whoever decodes them next.
    pub(crate) fn keep(&self, bytes: &[u8], run: &Arc<RunResult>) {
        if run.tests.len() >= WORTH {
            self.keep_hashed(blake3::hash(bytes), run);
        }
    }

    fn find(&self, key: &blake3::Hash) -> Option<Arc<RunResult>> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.iter().find(|(k, _)| k == key).map(|(_, r)| r.clone())
    }

    fn keep_hashed(&self, key: blake3::Hash, run: &Arc<RunResult>) {
        if run.tests.len() < WORTH {
            return;
        }
        let evicted = {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            if kept.iter().any(|(k, _)| *k == key) {
                return;
            }
            kept.push_back((key, run.clone()));
            match kept.len() > KEEP {
                true => kept.pop_front(),
                false => None,
            }
        };
        if let Some(evicted) = evicted {
            free_aside(evicted);
        }
    }
}

impl Drop for Decoded {
    fn drop(&mut self) {
        let kept = std::mem::take(self.kept.get_mut().unwrap_or_else(|e| e.into_inner()));
        if !kept.is_empty() {
            free_aside(kept);
        }
    }
}

type Freed = Box<dyn Send>;

/// Frees `value` on a thread that lives as long as fixgate (one for every audit of the
/// process): a run of many tests takes tens of milliseconds to free, which the thread that let
/// go of it need not wait for. Freed at once when that thread cannot be had.
pub(crate) fn free_aside<T: Send + 'static>(value: T) {
    static FREER: OnceLock<Option<mpsc::Sender<Freed>>> = OnceLock::new();
    let freer = FREER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Freed>();
        let started = std::thread::Builder::new()
            .name("fixgate-free".to_owned())
            .spawn(move || rx.into_iter().for_each(drop));
        started.ok().map(|_| tx)
    });
    let value: Freed = Box::new(value);
    match freer {
        // A send fails only when the thread is gone: the value comes back and is freed here.
        Some(tx) => drop(tx.send(value)),
        None => drop(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pytest::events::StateChange;
    use crate::pytest::result::{Outcome, TestResult};

    fn run_of(n: usize, outcome: Outcome) -> RunResult {
        let order: Vec<String> = (0..n).map(|i| format!("t.py::test_{i}")).collect();
        let tests = order
            .iter()
            .map(|id| TestResult::missing(id, outcome, "m".to_owned(), 0.5, 1.25))
            .collect();
        RunResult::empty(Vec::new()).with_tests(order, tests)
    }

    fn bytes(run: &RunResult) -> Vec<u8> {
        postcard::to_allocvec(run).unwrap()
    }

    #[test]
    fn whole_orders_are_decoded_once_and_found_by_any_reader() {
        let decoded = Decoded::default();
        let b = bytes(&run_of(WORTH, Outcome::Passed));
        let first = decoded.decode_kept(&b).unwrap();
        assert!(Arc::ptr_eq(&first, &decoded.decode_kept(&b).unwrap()));
        assert!(Arc::ptr_eq(&first, &decoded.decode(&b).unwrap()));
        assert_eq!(first.tests.len(), WORTH);
    }

    #[test]
    fn other_runs_are_decoded_and_not_kept() {
        let decoded = Decoded::default();
        let b = bytes(&run_of(WORTH, Outcome::Failed));
        let first = decoded.decode(&b).unwrap();
        assert!(!Arc::ptr_eq(&first, &decoded.decode(&b).unwrap()));
        assert_eq!(first.tests[0].outcome, Outcome::Failed);
        assert!(decoded.kept.lock().unwrap().is_empty());
    }

    #[test]
    fn a_kept_run_is_found_by_its_bytes_and_only_by_them() {
        let decoded = Decoded::default();
        let made = Arc::new(run_of(WORTH, Outcome::Passed));
        let b = bytes(&made);
        decoded.keep(&b, &made);
        assert!(Arc::ptr_eq(&decoded.decode(&b).unwrap(), &made));
        // Another test's name where the run lists what executed, the same length: another
        // run, which decodes to itself.
        let at = b.windows(10).position(|w| w == b"t.py::test").unwrap();
        let mut other = b.clone();
        other[at] = b'u';
        let found = decoded.decode(&other).unwrap();
        assert!(!Arc::ptr_eq(&found, &made));
        assert_eq!(found.executed[0], "u.py::test_0");
    }

    #[test]
    fn what_a_node_keeps_is_what_its_bytes_decode_to() {
        let mut run = run_of(WORTH, Outcome::Passed);
        run.tests[1].occurrence = 1;
        run.tests[2].state = vec![
            StateChange::Global {
                path: "pkg/m.py".into(),
                name: "REGISTRY".into(),
            },
            StateChange::Env("HOME".into()),
        ];
        run.tests[3].message = Some("assert 0.1 + 0.2 == 0.3".into());
        run.tests[4].end = 0.1 + 0.2;
        let made = Arc::new(run);
        let b = bytes(&made);
        let decoded = Decoded::default();
        decoded.keep(&b, &made);
        let plain = crate::engine::runs::decode_run(&b).unwrap();
        let json = |r: &RunResult| serde_json::to_value(r).unwrap();
        assert_eq!(json(&decoded.decode(&b).unwrap()), json(&plain));
    }

    #[test]
    fn small_runs_are_not_kept_and_the_kept_are_bounded_first_in_first_out() {
        let decoded = Decoded::default();
        let small = Arc::new(run_of(3, Outcome::Passed));
        decoded.keep(&bytes(&small), &small);
        let a = decoded.decode_kept(&bytes(&small)).unwrap();
        assert!(!Arc::ptr_eq(
            &a,
            &decoded.decode_kept(&bytes(&small)).unwrap()
        ));
        assert!(decoded.kept.lock().unwrap().is_empty());
        let runs: Vec<Vec<u8>> = (0..KEEP + 1)
            .map(|i| {
                let mut r = run_of(WORTH, Outcome::Passed);
                r.warnings.push(i.to_string());
                bytes(&r)
            })
            .collect();
        let first = decoded.decode_kept(&runs[0]).unwrap();
        for b in &runs[1..KEEP] {
            decoded.decode_kept(b).unwrap();
            // Reading the first again does not keep it longer.
            decoded.decode(&runs[0]).unwrap();
        }
        decoded.decode_kept(&runs[KEEP]).unwrap();
        assert_eq!(decoded.kept.lock().unwrap().len(), KEEP);
        assert!(!Arc::ptr_eq(&first, &decoded.decode(&runs[0]).unwrap()));
        assert!(Arc::ptr_eq(
            &decoded.decode(&runs[1]).unwrap(),
            &decoded.decode(&runs[1]).unwrap()
        ));
    }

    #[test]
    fn damaged_bytes_are_an_error_and_nothing_is_kept() {
        let decoded = Decoded::default();
        let b = bytes(&run_of(WORTH, Outcome::Passed));
        assert!(decoded.decode_kept(&b[..b.len() / 2]).is_err());
        assert!(decoded.kept.lock().unwrap().is_empty());
    }

    #[test]
    fn what_is_freed_aside_is_freed() {
        struct Noted(Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Noted {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let freed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        free_aside(Noted(freed.clone()));
        let start = std::time::Instant::now();
        while !freed.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(30),
                "never freed"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
