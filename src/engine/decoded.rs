//! Large runs decoded once per audit.
//!
//! A scoped head audit of a large suite reads the same few runs of every test again and again:
//! the base's recorded file-order and reversed runs (read by the head's collection, the scope
//! and the carried runs), the carried runs put together from them (read by the scope read off
//! them, the replays and the matrix). Decoding one run of 20,000 tests costs about 50 ms and
//! freeing it 10 to 20 ms; each was decoded three times. Here a run of many tests is kept,
//! decoded, by the BLAKE3 digest of its bytes: the same bytes always decode to the same run,
//! so a hit is the run its bytes are, wherever they came from. A node that made a run (a
//! carried run) leaves what it encoded here, so that no one decodes it at all.
//!
//! What is kept is bounded: the last [`KEEP`] runs of at least [`WORTH`] tests. Runs this
//! audit let go of are freed on a thread of their own, off the audit's path.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

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
    /// The run `bytes` encode, decoded now or found decoded.
    pub(crate) fn decode(&self, bytes: &[u8]) -> Result<Arc<RunResult>, postcard::Error> {
        let key = blake3::hash(bytes);
        if let Some(run) = self.find(&key) {
            return Ok(run);
        }
        let run = Arc::new(crate::engine::runs::decode_run(bytes)?);
        self.keep_hashed(key, &run);
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
        free_aside(evicted);
    }
}

impl Drop for Decoded {
    fn drop(&mut self) {
        let kept = std::mem::take(self.kept.get_mut().unwrap_or_else(|e| e.into_inner()));
        free_aside(kept);
    }
}

/// Frees `value` on a thread of its own: a run of many tests takes tens of milliseconds to
/// free, which the thread that let go of it need not wait for. (Freed at once when no thread
/// can be started.)
pub(crate) fn free_aside<T: Send + 'static>(value: T) {
    let _ = std::thread::Builder::new()
        .name("fixgate-free".to_owned())
        .spawn(move || drop(value));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pytest::result::{Outcome, TestResult};

    fn run_of(n: usize, outcome: Outcome) -> RunResult {
        let order: Vec<String> = (0..n).map(|i| format!("t.py::test_{i}")).collect();
        let tests = order
            .iter()
            .map(|id| TestResult::missing(id, outcome, "m".to_owned(), 0.0, 0.0))
            .collect();
        RunResult::empty(Vec::new()).with_tests(order, tests)
    }

    fn bytes(run: &RunResult) -> Vec<u8> {
        postcard::to_allocvec(run).unwrap()
    }

    #[test]
    fn the_same_bytes_give_the_same_run_decoded_once() {
        let decoded = Decoded::default();
        let b = bytes(&run_of(WORTH, Outcome::Passed));
        let first = decoded.decode(&b).unwrap();
        let second = decoded.decode(&b).unwrap();
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(second.tests.len(), WORTH);
    }

    #[test]
    fn other_bytes_are_another_run() {
        let decoded = Decoded::default();
        let passed = decoded
            .decode(&bytes(&run_of(WORTH, Outcome::Passed)))
            .unwrap();
        let failed = decoded
            .decode(&bytes(&run_of(WORTH, Outcome::Failed)))
            .unwrap();
        assert_eq!(passed.tests[0].outcome, Outcome::Passed);
        assert_eq!(failed.tests[0].outcome, Outcome::Failed);
    }

    #[test]
    fn a_kept_run_is_found_by_its_bytes_and_only_by_them() {
        let decoded = Decoded::default();
        let made = Arc::new(run_of(WORTH, Outcome::Passed));
        let b = bytes(&made);
        decoded.keep(&b, &made);
        assert!(Arc::ptr_eq(&decoded.decode(&b).unwrap(), &made));
        // One byte more or less is not the run that was kept.
        let mut other = b.clone();
        *other.last_mut().unwrap() ^= 1;
        assert!(decoded
            .decode(&other)
            .map_or(true, |r| !Arc::ptr_eq(&r, &made)));
    }

    #[test]
    fn small_runs_are_not_kept_and_the_kept_are_bounded() {
        let decoded = Decoded::default();
        let small = bytes(&run_of(3, Outcome::Passed));
        let a = decoded.decode(&small).unwrap();
        assert!(!Arc::ptr_eq(&a, &decoded.decode(&small).unwrap()));
        let runs: Vec<Vec<u8>> = (0..KEEP + 1)
            .map(|i| {
                let mut r = run_of(WORTH, Outcome::Passed);
                r.warnings.push(i.to_string());
                bytes(&r)
            })
            .collect();
        let first = decoded.decode(&runs[0]).unwrap();
        for b in &runs[1..] {
            decoded.decode(b).unwrap();
        }
        assert_eq!(decoded.kept.lock().unwrap().len(), KEEP);
        assert!(!Arc::ptr_eq(&first, &decoded.decode(&runs[0]).unwrap()));
    }

    #[test]
    fn damaged_bytes_are_an_error() {
        let decoded = Decoded::default();
        let b = bytes(&run_of(WORTH, Outcome::Passed));
        assert!(decoded.decode(&b[..b.len() / 2]).is_err());
    }
}
