//! Running graphs through a cache: what executes, why, in parallel, and what is skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use fixgate_cache::{Dep, Digest, DiskStore, MemStore, Store};
use fixgate_graph::{
    Check, Graph, Mode, Node, NodeError, Output, Reason, Report, RunOptions, Status,
};

/// The files the nodes of a test read, as a repository would hold them.
#[derive(Clone, Default)]
struct World {
    files: Arc<Mutex<BTreeMap<String, Vec<u8>>>>,
}

impl World {
    fn set(&self, path: &str, content: &[u8]) {
        self.files
            .lock()
            .unwrap()
            .insert(path.to_string(), content.to_vec());
    }

    fn remove(&self, path: &str) {
        self.files.lock().unwrap().remove(path);
    }

    fn read(&self, path: &str) -> Option<Vec<u8>> {
        self.files.lock().unwrap().get(path).cloned()
    }

    fn digest(&self, path: &str) -> Option<Digest> {
        self.read(path).map(|b| Digest::of(&b))
    }

    fn probe(&self) -> impl Fn(&str) -> Option<Digest> + Send + Sync + 'static {
        let world = self.clone();
        move |p| world.digest(p)
    }
}

/// Counts executions per label.
#[derive(Clone, Default)]
struct Counter(Arc<Mutex<BTreeMap<String, usize>>>);

impl Counter {
    fn hit(&self, label: &str) {
        *self.0.lock().unwrap().entry(label.to_string()).or_default() += 1;
    }

    fn get(&self, label: &str) -> usize {
        self.0.lock().unwrap().get(label).copied().unwrap_or(0)
    }
}

fn options(jobs: usize) -> RunOptions {
    RunOptions {
        jobs,
        mode: Mode::Normal,
        scope: "test-repo".to_string(),
    }
}

fn status<'a>(report: &'a Report, label: &str) -> &'a Status {
    &report.node(label).unwrap().status
}

fn reason(report: &Report, label: &str) -> Reason {
    match status(report, label) {
        Status::Executed { reason } => reason.clone(),
        other => panic!("{label} did not execute: {other:?}"),
    }
}

/// `read(f)` reads a file declared up front and outputs its content; `len` outputs the length
/// of its input; `tag` prefixes its input. A chain read → len → tag, with an independent
/// `other`.
fn chain(world: &World, counter: &Counter) -> Graph {
    let mut g = Graph::new("0.1.0");
    let (w, c) = (world.clone(), counter.clone());
    let read = g
        .add(
            Node::new("read(f)", "read", move |_| {
                c.hit("read(f)");
                Ok(Output::new(w.read("f.json").unwrap_or_default()))
            })
            .file("f.json", world.digest("f.json").unwrap()),
            &[],
        )
        .unwrap();
    let c = counter.clone();
    let len = g
        .add(
            Node::new("len", "len", move |inputs| {
                c.hit("len");
                Ok(Output::new(inputs[0].len().to_string()))
            }),
            &[read],
        )
        .unwrap();
    let c = counter.clone();
    g.add(
        Node::new("tag", "tag", move |inputs| {
            c.hit("tag");
            Ok(Output::new([b"len=", inputs[0]].concat()))
        }),
        &[len],
    )
    .unwrap();
    let c = counter.clone();
    g.add(
        Node::new("other", "other", move |_| {
            c.hit("other");
            Ok(Output::new("independent"))
        }),
        &[],
    )
    .unwrap();
    g
}

fn stores() -> Vec<(&'static str, Box<dyn Store>, Option<tempfile::TempDir>)> {
    let tmp = tempfile::tempdir().unwrap();
    let disk = DiskStore::open(tmp.path()).unwrap();
    vec![
        ("mem", Box::new(MemStore::new()), None),
        ("disk", Box::new(disk), Some(tmp)),
    ]
}

#[test]
fn a_second_run_executes_nothing() {
    for (name, store, _tmp) in stores() {
        let (world, counter) = (World::default(), Counter::default());
        world.set("f.json", b"abc");
        let first = chain(&world, &counter).run(&*store, &options(2)).unwrap();
        assert_eq!(first.report.counts().executed, 4, "{name}");
        assert!(first.report.nodes.iter().all(|n| n.status
            == Status::Executed {
                reason: Reason::NoEntry
            }));

        let second = chain(&world, &counter).run(&*store, &options(2)).unwrap();
        let counts = second.report.counts();
        assert_eq!(
            (counts.nodes, counts.cached, counts.executed),
            (4, 4, 0),
            "{name}"
        );
        assert_eq!(counter.get("read(f)"), 1, "{name}");
        assert!(
            second.report.warnings.is_empty(),
            "{name}: {:?}",
            second.report.warnings
        );
        // The outputs are served from the cache all the same.
        let g = chain(&world, &counter);
        let tag = g.find("tag").unwrap();
        assert_eq!(
            g.run(&*store, &options(1)).unwrap().output(tag),
            Some(&b"len=3"[..])
        );
    }
}

#[test]
fn a_changed_file_reexecutes_its_node_and_dependents_with_the_reason() {
    for (name, store, _tmp) in stores() {
        let (world, counter) = (World::default(), Counter::default());
        world.set("f.json", b"abc");
        chain(&world, &counter).run(&*store, &options(2)).unwrap();
        let old = world.digest("f.json");
        world.set("f.json", b"abcd");
        let run = chain(&world, &counter).run(&*store, &options(2)).unwrap();
        let r = &run.report;
        assert_eq!(
            reason(r, "read(f)"),
            Reason::InputChanged {
                path: "f.json".into(),
                old,
                new: world.digest("f.json"),
            },
            "{name}"
        );
        assert_eq!(
            reason(r, "len"),
            Reason::InputOutputChanged {
                label: "read(f)".into()
            }
        );
        assert_eq!(
            reason(r, "tag"),
            Reason::InputOutputChanged {
                label: "len".into()
            }
        );
        assert_eq!(status(r, "other"), &Status::Cached);
        assert_eq!(
            run.output(chain(&world, &counter).find("tag").unwrap()),
            Some(&b"len=4"[..])
        );
    }
}

#[test]
fn early_cutoff_keeps_dependents_cached_when_an_output_is_unchanged() {
    let store = MemStore::new();
    let (world, counter) = (World::default(), Counter::default());
    world.set("f.json", b"abc");
    chain(&world, &counter).run(&store, &options(2)).unwrap();
    // Same length, other content: read(f) and len re-run, len's output is unchanged.
    world.set("f.json", b"xyz");
    let r = chain(&world, &counter)
        .run(&store, &options(2))
        .unwrap()
        .report;
    assert!(matches!(reason(&r, "read(f)"), Reason::InputChanged { .. }));
    assert!(matches!(
        reason(&r, "len"),
        Reason::InputOutputChanged { .. }
    ));
    assert_eq!(status(&r, "tag"), &Status::Cached);
    assert_eq!(counter.get("tag"), 1);
}

#[test]
fn a_parameter_or_version_change_is_named() {
    let store = MemStore::new();
    let build = |seed: &str, version: &str| {
        let mut g = Graph::new(version);
        g.add(
            Node::new("seed-run(1)", "seed-run", |_| Ok(Output::new("ok"))).param("seed", seed),
            &[],
        )
        .unwrap();
        g
    };
    build("1", "0.1.0").run(&store, &options(1)).unwrap();
    let r = build("2", "0.1.0").run(&store, &options(1)).unwrap().report;
    assert_eq!(
        reason(&r, "seed-run(1)"),
        Reason::ParamChanged {
            name: "seed".into()
        }
    );
    let r = build("2", "0.2.0").run(&store, &options(1)).unwrap().report;
    assert_eq!(
        reason(&r, "seed-run(1)"),
        Reason::VersionChanged {
            old: "0.1.0".into(),
            new: "0.2.0".into()
        }
    );
    // Back to a derivation the cache has seen: a hit.
    let r = build("1", "0.1.0").run(&store, &options(1)).unwrap().report;
    assert_eq!(status(&r, "seed-run(1)"), &Status::Cached);
}

/// a fails (with `error`); b depends on a, c on b; d is independent, e depends on d.
fn failing(error: NodeError, counter: &Counter) -> Graph {
    let mut g = Graph::new("0.1.0");
    let c = counter.clone();
    let a = g
        .add(
            Node::new("a", "step", move |_| {
                c.hit("a");
                Err(error.clone())
            })
            .param("name", "a"),
            &[],
        )
        .unwrap();
    let b = g
        .add(
            Node::new("b", "step", |_| Ok(Output::new("b"))).param("name", "b"),
            &[a],
        )
        .unwrap();
    g.add(
        Node::new("c", "step", |_| Ok(Output::new("c"))).param("name", "c"),
        &[b],
    )
    .unwrap();
    let d = g
        .add(
            Node::new("d", "step", |_| Ok(Output::new("d"))).param("name", "d"),
            &[],
        )
        .unwrap();
    g.add(
        Node::new("e", "step", |_| Ok(Output::new("e"))).param("name", "e"),
        &[d],
    )
    .unwrap();
    g
}

#[test]
fn a_failure_skips_its_dependents_and_other_branches_finish() {
    let store = MemStore::new();
    let counter = Counter::default();
    let infra = NodeError::Infra("sandbox could not be made".into());
    let r = failing(infra.clone(), &counter)
        .run(&store, &options(2))
        .unwrap()
        .report;
    assert_eq!(
        status(&r, "a"),
        &Status::Failed {
            error: infra.clone(),
            cached: false
        }
    );
    for label in ["b", "c"] {
        assert_eq!(
            status(&r, label),
            &Status::Skipped {
                because: "a".into()
            }
        );
    }
    assert!(matches!(status(&r, "e"), Status::Executed { .. }));
    let counts = r.counts();
    assert_eq!((counts.failed, counts.skipped, counts.executed), (1, 2, 2));

    // Infrastructure errors are never cached: a runs again.
    failing(infra, &counter).run(&store, &options(2)).unwrap();
    assert_eq!(counter.get("a"), 2);
}

#[test]
fn a_data_failure_is_cached_like_an_output() {
    let store = MemStore::new();
    let counter = Counter::default();
    let data = NodeError::Data("tests/test_x.py does not collect".into());
    failing(data.clone(), &counter)
        .run(&store, &options(1))
        .unwrap();
    let r = failing(data.clone(), &counter)
        .run(&store, &options(1))
        .unwrap()
        .report;
    assert_eq!(counter.get("a"), 1);
    assert_eq!(
        status(&r, "a"),
        &Status::Failed {
            error: data,
            cached: true
        }
    );
    assert!(matches!(status(&r, "c"), Status::Skipped { because } if because == "a"));
}

#[test]
fn a_panicking_node_fails_without_taking_the_run_down() {
    let mut g = Graph::new("0.1.0");
    let a = g
        .add(
            Node::new("a", "step", |_| panic!("bug in a")).param("name", "a"),
            &[],
        )
        .unwrap();
    g.add(
        Node::new("b", "step", |_| Ok(Output::new("b"))).param("name", "b"),
        &[a],
    )
    .unwrap();
    g.add(
        Node::new("c", "step", |_| Ok(Output::new("c"))).param("name", "c"),
        &[],
    )
    .unwrap();
    let r = g.run(&MemStore::new(), &options(2)).unwrap().report;
    assert!(matches!(
        status(&r, "a"),
        Status::Failed { error: NodeError::Infra(m), .. } if m.contains("bug in a")
    ));
    assert!(matches!(status(&r, "b"), Status::Skipped { .. }));
    assert!(matches!(status(&r, "c"), Status::Executed { .. }));
}

#[test]
fn independent_nodes_run_side_by_side() {
    // Each seed run announces itself and waits for the other: with two workers both are
    // running at once, so both rendezvous; run one at a time, the first would time out.
    let (tx1, rx1) = mpsc::channel::<()>();
    let (tx2, rx2) = mpsc::channel::<()>();
    let rendezvous = |tx: mpsc::Sender<()>, rx: mpsc::Receiver<()>| {
        let (tx, rx) = (Mutex::new(tx), Mutex::new(rx));
        move |_: &[&[u8]]| {
            tx.lock().unwrap().send(()).unwrap();
            rx.lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(20))
                .map_err(|_| NodeError::Infra("the other seed run never started".into()))?;
            Ok(Output::new("ran"))
        }
    };
    let mut g = Graph::new("0.1.0");
    let collect = g
        .add(
            Node::new("collect", "collect", |_| Ok(Output::new("t1 t2"))),
            &[],
        )
        .unwrap();
    g.add(
        Node::new("seed-run(1)", "seed-run", rendezvous(tx1, rx2)).param("seed", "1"),
        &[collect],
    )
    .unwrap();
    g.add(
        Node::new("seed-run(2)", "seed-run", rendezvous(tx2, rx1)).param("seed", "2"),
        &[collect],
    )
    .unwrap();
    let r = g.run(&MemStore::new(), &options(2)).unwrap().report;
    let one = r.node("seed-run(1)").unwrap();
    let two = r.node("seed-run(2)").unwrap();
    assert!(
        matches!(one.status, Status::Executed { .. }),
        "{:?}",
        one.status
    );
    assert!(
        matches!(two.status, Status::Executed { .. }),
        "{:?}",
        two.status
    );
    let (s1, e1) = (one.started.unwrap(), one.finished.unwrap());
    let (s2, e2) = (two.started.unwrap(), two.finished.unwrap());
    assert!(
        s1 < e2 && s2 < e1,
        "intervals overlap: {s1:?}..{e1:?} and {s2:?}..{e2:?}"
    );
    let collect = r.node("collect").unwrap();
    assert!(collect.finished.unwrap() <= s1.min(s2));
}

#[test]
fn one_job_runs_one_node_at_a_time() {
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut g = Graph::new("0.1.0");
    for i in 0..6 {
        let (running, most) = (running.clone(), most.clone());
        g.add(
            Node::new(format!("n{i}"), "step", move |_| {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(Output::new("x"))
            })
            .param("i", i.to_string()),
            &[],
        )
        .unwrap();
    }
    g.run(&MemStore::new(), &options(1)).unwrap();
    assert_eq!(most.load(Ordering::SeqCst), 1);
}

/// A seed run that reads whatever files the world has under `db.json` and `plugins/extra.py`
/// (the latter may be absent), reporting them as discovered dependencies.
fn traced(world: &World, counter: &Counter) -> Graph {
    let mut g = Graph::new("0.1.0");
    let (w, c) = (world.clone(), counter.clone());
    g.add(
        Node::new("seed-run(1)", "seed-run", move |_| {
            c.hit("seed-run(1)");
            let mut reads = vec![];
            let mut out = Vec::new();
            for path in ["db.json", "plugins/extra.py"] {
                match w.read(path) {
                    Some(bytes) => {
                        reads.push(Dep::file(path, Digest::of(&bytes)));
                        out.extend_from_slice(&bytes);
                    }
                    None => reads.push(Dep::absent(path)),
                }
            }
            Ok(Output::new(out).with_reads(reads))
        })
        .param("seed", "1")
        .traced(world.probe()),
        &[],
    )
    .unwrap();
    g
}

#[test]
fn a_traced_node_hits_on_both_sides_of_a_flip_flop() {
    for (name, store, _tmp) in stores() {
        let (world, counter) = (World::default(), Counter::default());
        let label = "seed-run(1)";
        world.set("db.json", b"v1");
        let r = traced(&world, &counter)
            .run(&*store, &options(1))
            .unwrap()
            .report;
        assert_eq!(reason(&r, label), Reason::NoEntry, "{name}");

        world.set("db.json", b"v2");
        let r = traced(&world, &counter)
            .run(&*store, &options(1))
            .unwrap()
            .report;
        assert_eq!(
            reason(&r, label),
            Reason::InputChanged {
                path: "db.json".into(),
                old: Some(Digest::of(b"v1")),
                new: Some(Digest::of(b"v2")),
            },
            "{name}"
        );

        world.set("db.json", b"v1");
        let r = traced(&world, &counter)
            .run(&*store, &options(1))
            .unwrap()
            .report;
        assert_eq!(status(&r, label), &Status::Cached, "{name}");
        world.set("db.json", b"v2");
        let r = traced(&world, &counter)
            .run(&*store, &options(1))
            .unwrap()
            .report;
        assert_eq!(status(&r, label), &Status::Cached, "{name}");
        assert_eq!(counter.get(label), 2, "{name}");

        // A file it looked for and did not find appears: the trace no longer holds.
        world.set("plugins/extra.py", b"print()");
        let r = traced(&world, &counter)
            .run(&*store, &options(1))
            .unwrap()
            .report;
        assert_eq!(
            reason(&r, label),
            Reason::InputChanged {
                path: "plugins/extra.py".into(),
                old: None,
                new: Some(Digest::of(b"print()")),
            },
            "{name}"
        );
        world.remove("plugins/extra.py");
        let r = traced(&world, &counter)
            .run(&*store, &options(1))
            .unwrap()
            .report;
        assert_eq!(status(&r, label), &Status::Cached, "{name}");
        assert!(r.warnings.is_empty(), "{name}: {:?}", r.warnings);
    }
}

#[test]
fn a_change_no_run_reads_reexecutes_no_traced_node() {
    let store = MemStore::new();
    let (world, counter) = (World::default(), Counter::default());
    world.set("db.json", b"v1");
    traced(&world, &counter).run(&store, &options(1)).unwrap();
    world.set("docs/unrelated.md", b"changed");
    let r = traced(&world, &counter)
        .run(&store, &options(1))
        .unwrap()
        .report;
    assert_eq!(r.counts().executed, 0);
}

#[test]
fn forced_runs_execute_everything() {
    let store = MemStore::new();
    let (world, counter) = (World::default(), Counter::default());
    world.set("f.json", b"abc");
    chain(&world, &counter).run(&store, &options(2)).unwrap();
    let opts = RunOptions {
        mode: Mode::Forced,
        ..options(2)
    };
    let r = chain(&world, &counter).run(&store, &opts).unwrap().report;
    assert!(r.nodes.iter().all(|n| n.status
        == Status::Executed {
            reason: Reason::Forced
        }));
}

#[test]
fn check_mode_reexecutes_chosen_kinds_and_reports_divergence() {
    let store = MemStore::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let build = |calls: &Arc<AtomicUsize>| {
        let mut g = Graph::new("0.1.0");
        let calls = calls.clone();
        let flaky = g
            .add(
                Node::new("seed-run(1)", "seed-run", move |_| {
                    // Nondeterministic: a different output every time.
                    let n = calls.fetch_add(1, Ordering::SeqCst);
                    Ok(Output::new(format!("run {n}")))
                })
                .param("seed", "1"),
                &[],
            )
            .unwrap();
        g.add(
            Node::new("seed-run(2)", "seed-run", |_| Ok(Output::new("steady"))).param("seed", "2"),
            &[],
        )
        .unwrap();
        g.add(
            Node::new("triage", "triage", |i| Ok(Output::new(i[0].to_vec()))),
            &[flaky],
        )
        .unwrap();
        g
    };
    build(&calls).run(&store, &options(2)).unwrap();
    let opts = RunOptions {
        mode: Mode::Check {
            kinds: BTreeSet::from(["seed-run".to_string()]),
        },
        ..options(2)
    };
    let g = build(&calls);
    let run = g.run(&store, &opts).unwrap();
    let r = &run.report;
    assert!(matches!(
        status(r, "seed-run(1)"),
        Status::Checked {
            check: Check::Diverged { .. }
        }
    ));
    assert_eq!(
        status(r, "seed-run(2)"),
        &Status::Checked { check: Check::Same }
    );
    // Not a checked kind, and its input kept the cached output: still cached.
    assert_eq!(status(r, "triage"), &Status::Cached);
    assert_eq!(run.output(g.find("triage").unwrap()), Some(&b"run 0"[..]));
    assert_eq!(r.counts().checked, 2);
}

#[test]
fn a_transient_node_always_runs_and_its_dependents_cut_off() {
    let store = MemStore::new();
    let counter = Counter::default();
    let build = |counter: &Counter| {
        let mut g = Graph::new("0.1.0");
        let c = counter.clone();
        let snap = g
            .add(
                Node::new("snapshot(head)", "snapshot", move |_| {
                    c.hit("snapshot");
                    Ok(Output::new("tree"))
                })
                .transient(),
                &[],
            )
            .unwrap();
        let c = counter.clone();
        g.add(
            Node::new("manifest(head)", "manifest", move |i| {
                c.hit("manifest");
                Ok(Output::new(i[0].to_vec()))
            }),
            &[snap],
        )
        .unwrap();
        g
    };
    build(&counter).run(&store, &options(1)).unwrap();
    let r = build(&counter).run(&store, &options(1)).unwrap().report;
    assert_eq!(reason(&r, "snapshot(head)"), Reason::Transient);
    assert_eq!(status(&r, "manifest(head)"), &Status::Cached);
    assert_eq!((counter.get("snapshot"), counter.get("manifest")), (2, 1));
}

#[test]
fn the_report_renders_as_dot() {
    let store = MemStore::new();
    let counter = Counter::default();
    let r = failing(NodeError::Infra("x".into()), &counter)
        .run(&store, &options(1))
        .unwrap()
        .report;
    let dot = r.to_dot();
    assert!(dot.starts_with("digraph fixgate {"));
    assert!(dot.contains("n0 -> n1;"));
    assert!(dot.contains("n1 -> n2;"));
    assert!(dot.contains("#f1948a"), "failed colour");
    assert!(dot.contains("#dddddd"), "skipped colour");
    assert!(dot.contains("skipped: a failed"));
    assert!(dot.trim_end().ends_with('}'));
}

#[test]
fn two_directories_with_the_same_inputs_give_the_same_keys() {
    let (world, counter) = (World::default(), Counter::default());
    world.set("f.json", b"abc");
    let keys = |store: &dyn Store| -> Vec<_> {
        chain(&world, &counter)
            .run(store, &options(2))
            .unwrap()
            .report
            .nodes
            .into_iter()
            .map(|n| (n.label, n.key, n.output))
            .collect()
    };
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ka = keys(&DiskStore::open(a.path()).unwrap());
    let kb = keys(&DiskStore::open(b.path()).unwrap());
    assert_eq!(ka, kb);
    assert_eq!(ka, keys(&MemStore::new()));
}

/// A store whose writes panic, standing in for a bug below the graph.
struct PanickingStore(MemStore);

impl Store for PanickingStore {
    fn get_action(&self, key: &Digest) -> Option<fixgate_cache::ActionRecord> {
        self.0.get_action(key)
    }
    fn put_action(&self, _: &Digest, _: &fixgate_cache::ActionRecord) {
        panic!("store bug")
    }
    fn get_blob(&self, digest: &Digest) -> Option<Vec<u8>> {
        self.0.get_blob(digest)
    }
    fn put_blob(&self, bytes: &[u8]) -> Digest {
        self.0.put_blob(bytes)
    }
    fn trace_candidates(&self, key: &Digest) -> Vec<fixgate_cache::TraceEntry> {
        self.0.trace_candidates(key)
    }
    fn record_trace(&self, key: &Digest, entry: fixgate_cache::TraceEntry) {
        self.0.record_trace(key, entry)
    }
    fn take_warnings(&self) -> Vec<fixgate_cache::Warning> {
        Vec::new()
    }
}

#[test]
fn a_bug_below_a_node_fails_that_node_instead_of_hanging_the_run() {
    let (world, counter) = (World::default(), Counter::default());
    world.set("f.json", b"abc");
    let r = chain(&world, &counter)
        .run(&PanickingStore(MemStore::new()), &options(2))
        .unwrap()
        .report;
    assert!(matches!(
        status(&r, "read(f)"),
        Status::Failed { error: NodeError::Infra(m), .. }
            if m.starts_with("fixgate bug") && m.contains("store bug")
    ));
    assert_eq!(r.counts().skipped, 2);
}
