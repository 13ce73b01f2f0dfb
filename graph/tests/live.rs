//! The live graph: nodes added from earlier results, started as soon as their inputs exist.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fixgate_cache::MemStore;
use fixgate_graph::{Live, Mode, Node, NodeError, Output, RunOptions, Status};

fn options(jobs: usize) -> RunOptions {
    RunOptions {
        jobs,
        mode: Mode::Normal,
        scope: "live-test".to_string(),
    }
}

fn constant(label: &str, value: &'static str) -> Node {
    Node::new(label, "constant", move |_| Ok(Output::new(value)))
}

#[test]
fn a_node_added_from_a_result_computes_from_it() {
    let store = MemStore::new();
    let opts = options(2);
    let (total, run, graph) = Live::scope(&store, &opts, "0", |live| {
        let a = live.add(constant("a", "3"), &[]).unwrap();
        let n: usize = std::str::from_utf8(live.wait(a).output().unwrap())
            .unwrap()
            .parse()
            .unwrap();
        // As many steps as the first result says, each after the one before it.
        let mut last = a;
        for k in 0..n {
            let step = Node::new(format!("step({k})"), "step", |inputs| {
                Ok(Output::new(format!(
                    "{}+",
                    String::from_utf8_lossy(inputs[0])
                )))
            });
            last = live.add(step, &[last]).unwrap();
        }
        String::from_utf8(live.wait(last).output().unwrap().to_vec()).unwrap()
    })
    .unwrap();
    assert_eq!(total, "3+++");
    assert_eq!(graph.len(), 4);
    assert_eq!(run.report.nodes.len(), 4);
    assert_eq!(run.report.node("step(2)").unwrap().inputs, vec!["step(1)"]);
    assert!(run.report.to_dot().contains("n2 -> n3;"));
}

#[test]
fn a_node_starts_while_an_unrelated_one_still_runs() {
    let store = MemStore::new();
    let opts = options(2);
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let gate = Arc::new(Mutex::new(gate_rx));
    let ((), run, _) = Live::scope(&store, &opts, "0", |live| {
        // `slow` holds one worker until `fast`'s dependent has finished: with phases run
        // batch after batch, this would never end.
        let g = gate.clone();
        live.add(
            Node::new("slow", "slow", move |_| {
                g.lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(20))
                    .map_err(|_| NodeError::Infra("slow was never released".into()))?;
                Ok(Output::new("slow"))
            }),
            &[],
        )
        .unwrap();
        let fast = live.add(constant("fast", "f"), &[]).unwrap();
        let next = live
            .add(
                Node::new("after-fast", "next", |i| Ok(Output::new(i[0].to_vec()))),
                &[fast],
            )
            .unwrap();
        assert_eq!(live.wait(next).output(), Some(&b"f"[..]));
        gate_tx.send(()).unwrap();
    })
    .unwrap();
    assert!(matches!(
        run.report.node("slow").unwrap().status,
        Status::Executed { .. }
    ));
}

#[test]
fn an_after_edge_orders_without_entering_the_key() {
    let store = MemStore::new();
    let opts = options(1);
    let count = Arc::new(Mutex::new(0));
    let run_with = |before: &'static str| {
        let c = count.clone();
        Live::scope(&store, &opts, "0", move |live| {
            let b = live.add(constant("before", before), &[]).unwrap();
            let node = Node::new("check", "check", move |_| {
                *c.lock().unwrap() += 1;
                Ok(Output::new("checked"))
            });
            let id = live.add_after(node, &[], &[b]).unwrap();
            live.wait(id).output().map(<[u8]>::to_vec)
        })
        .unwrap()
    };
    let (out, first, _) = run_with("x");
    assert_eq!(out.as_deref(), Some(&b"checked"[..]));
    assert_eq!(first.report.node("check").unwrap().after, vec!["before"]);
    assert!(first.report.to_dot().contains("[style=dashed]"));
    // Another predecessor output: the node is still found in the cache.
    let (_, second, _) = run_with("y");
    assert_eq!(*count.lock().unwrap(), 1);
    assert_eq!(second.report.node("check").unwrap().status, Status::Cached);
}

#[test]
fn a_failed_input_skips_its_dependents_but_not_nodes_merely_after_it() {
    let store = MemStore::new();
    let opts = options(2);
    let ((), run, _) = Live::scope(&store, &opts, "0", |live| {
        let bad = live
            .add(
                Node::new("bad", "bad", |_| Err(NodeError::Infra("no sandbox".into()))),
                &[],
            )
            .unwrap();
        let dep = live.add(constant("dependent", "d"), &[bad]).unwrap();
        let after = live.add_after(constant("after", "a"), &[], &[bad]).unwrap();
        assert!(live.wait(dep).into_result().unwrap_err().contains("bad"));
        assert_eq!(live.wait(after).output(), Some(&b"a"[..]));
    })
    .unwrap();
    assert_eq!(
        run.report.node("dependent").unwrap().status,
        Status::Skipped {
            because: "bad".into()
        }
    );
}

#[test]
fn many_threads_add_and_wait_at_once() {
    let store = MemStore::new();
    let opts = options(2);
    let (sums, run, _) = Live::scope(&store, &opts, "0", |live| {
        let root = live.add(constant("root", "1"), &[]).unwrap();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|t| {
                    s.spawn(move || {
                        let mut last = root;
                        for k in 0..5 {
                            let n = Node::new(format!("t{t}-{k}"), "inc", |i| {
                                let v: u64 = std::str::from_utf8(i[0]).unwrap().parse().unwrap();
                                Ok(Output::new((v + 1).to_string()))
                            });
                            last = live.add(n, &[last]).unwrap();
                            live.wait(last);
                        }
                        String::from_utf8(live.wait(last).output().unwrap().to_vec()).unwrap()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        })
    })
    .unwrap();
    assert_eq!(sums, vec!["6"; 8]);
    assert_eq!(run.report.nodes.len(), 41);
}

#[test]
fn a_duplicate_label_is_refused_while_running() {
    let store = MemStore::new();
    let opts = options(1);
    let (err, _, _) = Live::scope(&store, &opts, "0", |live| {
        live.add(constant("a", "1"), &[]).unwrap();
        live.add(constant("a", "2"), &[]).unwrap_err()
    })
    .unwrap();
    assert_eq!(err.to_string(), "node label \"a\" is used twice");
}

#[test]
fn lookup_finds_a_static_result_without_computing_it() {
    let store = MemStore::new();
    let opts = options(1);
    let answer = |value: &'static str| {
        Node::new("answer", "answer", move |i| {
            Ok(Output::new([i[0], value.as_bytes()].concat()))
        })
        .param("value", value)
    };
    let ((), _, _) = Live::scope(&store, &opts, "0", |live| {
        let q = live.add(constant("question", "q"), &[]).unwrap();
        live.wait(q);
        assert!(
            live.lookup(&answer("1"), &[q]).is_none(),
            "nothing cached yet"
        );
        let a = live.add(answer("1"), &[q]).unwrap();
        live.wait(a);
    })
    .unwrap();
    let ((), run, _) = Live::scope(&store, &opts, "0", |live| {
        let q = live.add(constant("question", "q"), &[]).unwrap();
        // An unfinished input: no answer.
        let (tx, rx) = mpsc::channel::<()>();
        let rx = Mutex::new(rx);
        let slow = live
            .add(
                Node::new("slow", "slow", move |_| {
                    let _ = rx.lock().unwrap().recv_timeout(Duration::from_secs(20));
                    Ok(Output::new("s"))
                }),
                &[],
            )
            .unwrap();
        assert!(live.lookup(&answer("1"), &[slow]).is_none());
        tx.send(()).unwrap();
        live.wait(q);
        // Another parameter is another key.
        assert_eq!(live.lookup(&answer("2"), &[q]).as_deref(), None);
        assert_eq!(live.lookup(&answer("1"), &[q]).as_deref(), Some(&b"q1"[..]));
        let a = live.add(answer("1"), &[q]).unwrap();
        assert_eq!(live.wait(a).output(), Some(&b"q1"[..]));
    })
    .unwrap();
    assert_eq!(run.report.node("answer").unwrap().status, Status::Cached);
}

#[test]
fn a_released_output_is_read_back_from_the_store_when_asked_for_again() {
    let store = MemStore::new();
    let opts = options(2);
    let ((again, derived, kept, a), run, _) = Live::scope(&store, &opts, "0", |live| {
        let a = live.add(constant("a", "payload"), &[]).unwrap();
        assert_eq!(live.wait(a).output(), Some(&b"payload"[..]));
        live.release(a);
        // A node added after the release takes the released output as input.
        let b = live
            .add(
                Node::new("b", "copy", |i| {
                    Ok(Output::new(format!("{}!", String::from_utf8_lossy(i[0]))))
                }),
                &[a],
            )
            .unwrap();
        // A transient output is not in the store: releasing it keeps the bytes.
        let t = live
            .add(constant("t", "volatile").transient(), &[])
            .unwrap();
        live.wait(t);
        live.release(t);
        (
            live.wait(a).output().map(<[u8]>::to_vec),
            live.wait(b).output().map(<[u8]>::to_vec),
            live.wait(t).output().map(<[u8]>::to_vec),
            a,
        )
    })
    .unwrap();
    assert_eq!(again.as_deref(), Some(&b"payload"[..]));
    assert_eq!(derived.as_deref(), Some(&b"payload!"[..]));
    assert_eq!(kept.as_deref(), Some(&b"volatile"[..]));
    // Every node was computed; a released output is not kept in the run.
    assert!(run
        .report
        .nodes
        .iter()
        .all(|n| matches!(n.status, Status::Executed { .. })));
    assert!(run.output(a).is_none());
}

#[test]
fn a_store_that_keeps_nothing_keeps_released_outputs_in_memory() {
    let store = fixgate_cache::NoStore;
    let opts = options(1);
    let (bytes, _, _) = Live::scope(&store, &opts, "0", |live| {
        let a = live.add(constant("a", "only here"), &[]).unwrap();
        live.wait(a);
        live.release(a);
        let b = live
            .add(
                Node::new("b", "copy", |i| Ok(Output::new(i[0].to_vec()))),
                &[a],
            )
            .unwrap();
        (
            live.wait(a).output().map(<[u8]>::to_vec),
            live.wait(b).output().map(<[u8]>::to_vec),
        )
    })
    .unwrap();
    assert_eq!(bytes.0.as_deref(), Some(&b"only here"[..]));
    assert_eq!(bytes.1.as_deref(), Some(&b"only here"[..]));
}
