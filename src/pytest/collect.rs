//! Collecting a snapshot's tests: in a warm interpreter, which the runs after it fork from, or
//! in a pytest process of its own (`--collect-only`); with what collection read and imported,
//! and the files that did not collect in pytest's own words.

use crate::error::{Error, Result};
use crate::pytest::driver::{CollectIn, Runner};
use crate::pytest::events::{CollectedItem, Collection, Event, Trace};
use crate::pytest::follow::wait_interruptibly;
use crate::pytest::progress::stalled;
use crate::pytest::said::{
    collect_error, describe_exit, log_tail, pytest_said, with_location, CollectFailure,
};
use crate::pytest::zygote::Purpose;
use crate::pytest::zygote_key::Carried;
use crate::sandbox::Overlay;
use crate::snapshot::Snapshot;

impl Runner {
    /// Collects the snapshot's tests: node ids, files, lines and markers.
    pub(crate) fn collect(&self, snapshot: &Snapshot) -> Result<Vec<CollectedItem>> {
        self.collect_traced(snapshot, CollectIn::Fresh)
            .map(|(c, _)| c.items)
    }

    /// Collects, and returns what collection read and imported (its dependencies).
    pub(crate) fn collect_traced(
        &self,
        snapshot: &Snapshot,
        how: CollectIn,
    ) -> Result<(Collection, Trace)> {
        if let CollectIn::Warm {
            record_code,
            spare,
            carried,
        } = how
        {
            self.check_interrupted()?;
            let spare = spare && self.forkserver.slots() >= 2;
            if let Some(found) = self.collect_warm(snapshot, record_code, spare, &carried) {
                return Ok(found);
            }
        }
        let (collection, trace, errors) = self.collect_overlaid(snapshot, &Overlay::new())?;
        if !errors.is_empty() {
            return Err(collect_error(snapshot, &errors));
        }
        Ok((collection, trace))
    }

    /// The collection of a new warm interpreter of `snapshot`, left idle for the runs that
    /// fork from it; `None` when there is none to be had (forking is off, every slot is busy,
    /// the interpreter would not start or collection failed there): a fresh process collects.
    fn collect_warm(
        &self,
        snapshot: &Snapshot,
        record_code: bool,
        spare: bool,
        carried: &Carried,
    ) -> Option<(Collection, Trace)> {
        let (collection, trace) = std::thread::scope(|scope| {
            let spare = spare.then(|| {
                scope.spawn(|| {
                    self.with_launch(false, Purpose::Spare, carried, |launch| {
                        // Left idle, for the first run that asks.
                        drop(
                            self.forkserver
                                .checkout(launch, snapshot, &Overlay::new(), None),
                        )
                    })
                })
            });
            let found = self.with_launch(record_code, Purpose::Collect, carried, |launch| {
                let mut lease =
                    self.forkserver
                        .checkout(launch, snapshot, &Overlay::new(), None)?;
                lease.take_collection()
            });
            if let Some(spare) = spare {
                let _ = spare.join();
            }
            found
        })?;
        self.forkserver.note_collection(
            snapshot,
            carried,
            collection.items.iter().map(|i| i.nodeid.clone()).collect(),
        );
        Some((collection, trace))
    }

    /// Makes `count` warm interpreters of `snapshot` idle for the runs that will ask for them
    /// ([`Purpose::Prewarm`]): idle ones count, the others start side by side; fewer when
    /// forking is off or no slot is free. A zygote that does not start refuses the snapshot as
    /// a run's would: its runs start fresh, as they would have.
    pub(crate) fn prewarm(&self, snapshot: &Snapshot, count: usize) {
        if self.check_interrupted().is_err() {
            return;
        }
        std::thread::scope(|scope| {
            let starts: Vec<_> = (0..count)
                .map(|_| {
                    scope.spawn(|| {
                        self.with_launch(false, Purpose::Prewarm, &Carried::default(), |launch| {
                            self.forkserver
                                .checkout(launch, snapshot, &Overlay::new(), None)
                        })
                    })
                })
                .collect();
            // Each holds its zygote until all are done, so that no two count the same one.
            let leases: Vec<_> = starts
                .into_iter()
                .map(|s| s.join().ok().flatten())
                .collect();
            drop(leases);
        });
    }

    /// Collects `snapshot` with `overlay` over it: what collected, what collection read and
    /// imported, and the files that did not collect with pytest's message for each (the
    /// base's test files on the head's code may import what the head removed).
    pub(crate) fn collect_overlaid(
        &self,
        snapshot: &Snapshot,
        overlay: &Overlay,
    ) -> Result<(Collection, Trace, Vec<CollectFailure>)> {
        self.check_interrupted()?;
        let sandbox = self.sandbox(snapshot, overlay)?;
        let mut p = self.spawn(
            &sandbox,
            0,
            &["--collect-only".into(), "--fixgate-collect".into()],
        )?;
        let Some((status, events, dropped)) =
            wait_interruptibly(&mut p, &self.interrupted, self.test_timeout)?
        else {
            return Err(Error::NotCollected(format!(
                "pytest could not collect {}: {}",
                snapshot.rev_label(),
                stalled("collecting the suite", self.test_timeout)
            )));
        };
        let mut items = None;
        let mut deselected = Vec::new();
        let mut skipped_collectors = Vec::new();
        let mut trace = Trace::default();
        let mut errors = Vec::new();
        let mut problems = Vec::new();
        // A cut stream does not say everything the collection read: it depends on every file.
        if let Some(why) = dropped {
            trace.unknown.push(why.clone());
            problems.push(why);
        }
        for ev in events {
            match ev {
                // The first collection counts, as when following a run.
                Event::Collected {
                    items: i,
                    deselected: d,
                } if items.is_none() => {
                    items = Some(i);
                    deselected = d;
                }
                Event::SessionTrace { trace: t, .. } => trace.merge(*t),
                Event::CollectSkip { nodeid, reason } => {
                    skipped_collectors.push(CollectedItem::skipped_collector(nodeid, reason))
                }
                Event::CollectError {
                    nodeid,
                    message,
                    longrepr,
                } => errors.push((nodeid, with_location(message, &longrepr))),
                Event::Error { kind, message } => problems.push(format!("{kind}: {message}")),
                _ => {}
            }
        }
        // Every file failed: nothing was collected, which is data too.
        if items.is_none() && !errors.is_empty() {
            items = Some(Vec::new());
        }
        let Some(items) = items else {
            let problems = if problems.is_empty() {
                String::new()
            } else {
                format!("\n  {}", problems.join("\n  "))
            };
            let log = log_tail(&p.log);
            return Err(match status.code() {
                // pytest ran and stopped with its own error (its usage, a conftest): the
                // suite's doing, in pytest's words first.
                Some(code) => Error::NotCollected(format!(
                    "{} (pytest stopped before collecting {}, exit status {code}){problems}\n{log}",
                    pytest_said(&log, Some(&sandbox.tree()))
                        .unwrap_or_else(|| "pytest stopped before collecting".to_owned()),
                    snapshot.rev_label(),
                )),
                None => Error::Infra(format!(
                    "pytest collection failed in a sandbox of {} ({}){problems}\n{log}",
                    snapshot.rev_label(),
                    describe_exit(&status),
                )),
            });
        };
        if overlay.is_empty() && errors.is_empty() {
            self.forkserver.note_collection(
                snapshot,
                &Carried::default(),
                items.iter().map(|i| i.nodeid.clone()).collect(),
            );
        }
        let collection = Collection {
            items,
            skipped_collectors,
            deselected,
            unitemized: None,
        };
        Ok((collection, trace, errors))
    }
}
