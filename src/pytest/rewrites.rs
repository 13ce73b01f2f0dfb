//! pytest's rewritten test modules, made by fixgate before the runs that import them.
//!
//! Runs write no bytecode, so without help every pytest process would parse, rewrite and compile
//! every test module again. A run's code is the patch's, though: if runs kept the rewrites,
//! one patch's test could leave a "rewritten module" for another patch's test file (the key is a
//! plain hash of its bytes) and make it pass. So fixgate makes the rewrites itself, from the
//! snapshot's own bytes, in an interpreter that runs nothing of the snapshot (`python -I` and
//! pytest's rewriter, no test code), into a folder per interpreter that runs see read-only
//! (src/pytest/plugin/rewrite.py reads it). The modules are those pytest rewrites by default:
//! `test_*.py`, `*_test.py` and `conftest.py`; any other module pytest rewrites (a custom
//! `python_files`, `register_assert_rewrite`) is rewritten by pytest in the run, as in a
//! plain one.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use sha2::Digest as _;

use crate::sandbox::Overlay;
use crate::snapshot::{EntryKind, Snapshot};

/// Also in src/pytest/plugin/rewrite.py, which looks the files up.
const DOMAIN: &[u8] = b"fixgate rewrite v3\0";

/// Rewrites the modules listed on standard input (`key<TAB>file` a line) into the folder
/// `argv[1]`: `<key[:2]>/<key[2:]>.bin` (the SHA-256 of the marshalled code, then the code), or
/// an empty `.none` when rewriting warns or fails (pytest then does it in the run, where its
/// warnings are seen as in a plain run).
const REWRITE: &str = r#"
import hashlib, marshal, os, sys, warnings
from pathlib import Path
from _pytest.assertion import rewrite
out = sys.argv[1]
for line in sys.stdin.read().splitlines():
    key, source = line.split("\t", 1)
    folder = os.path.join(out, key[:2])
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, key[2:])
    data, suffix = b"", ".none"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            body = marshal.dumps(rewrite._rewrite_test(Path(source), None)[1])
            if not caught:
                data, suffix = hashlib.sha256(body).digest() + body, ".bin"
        except Exception:
            pass
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path + suffix)
"#;

/// Below this many modules for each, another interpreter beside the first costs more than it
/// saves: its start (importing pytest's rewriter) is about 0.12 s, a test module of 50 tests
/// about 25 ms to rewrite.
const MODULES_PER_PROCESS: usize = 8;

/// The rewrites of one interpreter, and what this process already made sure of.
pub(crate) struct Rewrites {
    dir: PathBuf,
    python: PathBuf,
    temp_dir: PathBuf,
    /// How many interpreters may rewrite side by side: the job slots, and no more than this
    /// machine's cores (`--jobs` may count remote workers).
    jobs: usize,
    /// Snapshots (with their overlay) whose modules are known to be done.
    prepared: Mutex<HashSet<[u8; 32]>>,
}

/// Whether pytest rewrites a module of this name by default.
fn rewritten(name: &[u8]) -> bool {
    name == b"conftest.py"
        || (name.ends_with(b".py") && (name.starts_with(b"test_") || name.ends_with(b"_test.py")))
}

/// The name of a module's rewrite in the folder: the SHA-256 of its source, domain-separated.
fn key(source: &[u8]) -> String {
    let mut h = sha2::Sha256::new();
    h.update(DOMAIN);
    h.update(source);
    h.finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
}

impl Rewrites {
    /// The rewrites of `python` under `dir` (one folder per interpreter fingerprint), made by
    /// up to `jobs` interpreters side by side, one per core at most.
    pub(crate) fn new(dir: PathBuf, python: PathBuf, temp_dir: PathBuf, jobs: usize) -> Rewrites {
        Rewrites {
            dir,
            python,
            temp_dir,
            jobs: jobs
                .min(std::thread::available_parallelism().map_or(1, |n| n.get()))
                .max(1),
            prepared: Mutex::new(HashSet::new()),
        }
    }

    /// The folder runs read the rewrites from.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes the rewrite of every test module of `snapshot` (with `overlay` over it) that the
    /// folder lacks. Only speed depends on it: whatever fails here is rewritten by pytest in
    /// the run.
    pub(crate) fn prepare(&self, snapshot: &Snapshot, overlay: &Overlay) {
        let mut ident = blake3::Hasher::new_derive_key("fixgate rewrite snapshot v1");
        let mut modules: Vec<(&crate::snapshot::Entry, Option<&[u8]>)> = Vec::new();
        for e in &snapshot.entries {
            if e.kind == EntryKind::Symlink || !rewritten(e.path.file_name()) {
                continue;
            }
            let over = overlay.iter().find(|(p, _)| *p == e.path);
            if let Some((_, None)) = over {
                continue;
            }
            let text = format!("{}\0{:?}\0{:?}", e.path, e.blob, e.stat);
            ident.update(text.as_bytes());
            if let Some((_, Some(bytes))) = over {
                ident.update(blake3::hash(bytes).as_bytes());
            }
            modules.push((e, over.and_then(|(_, b)| b.as_deref())));
        }
        for (p, bytes) in overlay {
            if let (Some(bytes), None) = (bytes, snapshot.find(p)) {
                if rewritten(p.file_name()) {
                    ident.update(blake3::hash(bytes).as_bytes());
                }
            }
        }
        let ident = *ident.finalize().as_bytes();
        if self.lock().contains(&ident) {
            return;
        }
        let git = snapshot.open_git().ok().flatten();
        let mut sources: Vec<Vec<u8>> = modules
            .iter()
            .filter_map(|(e, over)| match over {
                Some(b) => Some(b.to_vec()),
                None => snapshot.read(e, git.as_ref()).ok(),
            })
            .collect();
        sources.extend(overlay.iter().filter_map(|(p, bytes)| match bytes {
            Some(b) if snapshot.find(p).is_none() && rewritten(p.file_name()) => Some(b.clone()),
            _ => None,
        }));
        // One step at a time: parallel runs of one snapshot wait for the first to be done,
        // then find the files there.
        static STEP: Mutex<()> = Mutex::new(());
        let _step = STEP.lock().unwrap_or_else(|e| e.into_inner());
        let missing: Vec<(String, &[u8])> = sources
            .iter()
            .map(|s| (key(s), s.as_slice()))
            .filter(|(k, _)| {
                let base = self.dir.join(&k[..2]).join(&k[2..]);
                !base.with_extension("bin").exists() && !base.with_extension("none").exists()
            })
            .collect();
        if missing.is_empty() || self.rewrite(&missing).is_ok() {
            self.lock().insert(ident);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<[u8; 32]>> {
        self.prepared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Rewrites `modules` (key, source) into the folder, in up to `jobs` interpreters side by
    /// side (a cold audit waits for this before its first collection).
    fn rewrite(&self, modules: &[(String, &[u8])]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let sources = tempfile::Builder::new()
            .prefix("fixgate-rewrite-")
            .tempdir_in(&self.temp_dir)?;
        // Each key once: two interpreters never write the same file.
        let mut seen = HashSet::new();
        let mut lines = Vec::new();
        for (i, (k, source)) in modules.iter().enumerate() {
            if !seen.insert(k) {
                continue;
            }
            let file = sources.path().join(format!("m{i}.py"));
            std::fs::write(&file, source)?;
            lines.push((source.len(), format!("{k}\t{}\n", file.display())));
        }
        let mut children = Vec::new();
        let mut failed = None;
        for list in shares(lines, self.jobs) {
            let spawned = Command::new(&self.python)
                .args(["-I", "-c", REWRITE])
                .arg(&self.dir)
                .env_clear()
                .current_dir(sources.path())
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let mut child = match spawned {
                Ok(child) => child,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            // Each reads its whole list before it rewrites anything; closing its input ends it.
            if let Some(mut stdin) = child.stdin.take() {
                if let Err(e) = stdin.write_all(list.as_bytes()) {
                    failed.get_or_insert(e);
                }
            }
            children.push(child);
        }
        // Every interpreter started is waited for, whichever failed: none outlives this step.
        for mut child in children {
            match child.wait() {
                Ok(status) if !status.success() => {
                    failed.get_or_insert(std::io::Error::other(format!(
                        "rewriting ended with {status}"
                    )));
                }
                Ok(_) => {}
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

/// The lines of `lines` (each with its source's size) dealt to the interpreters that rewrite
/// them: as many as `jobs` allows with at least [`MODULES_PER_PROCESS`] modules each, the
/// largest sources first, each to the one with the fewest bytes so far.
fn shares(mut lines: Vec<(usize, String)>, jobs: usize) -> Vec<String> {
    let n = (lines.len() / MODULES_PER_PROCESS).clamp(1, jobs.max(1));
    lines.sort_by_key(|l| std::cmp::Reverse(l.0));
    let mut out = vec![(0usize, String::new()); n];
    for (size, line) in lines {
        let least = (out.iter_mut())
            .min_by_key(|(bytes, _)| *bytes)
            .expect("at least one share");
        least.0 += size;
        least.1.push_str(&line);
    }
    out.into_iter().map(|(_, list)| list).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytests_default_test_modules_and_conftests_are_rewritten() {
        for yes in [&b"test_a.py"[..], b"a_test.py", b"conftest.py", b"test_.py"] {
            assert!(rewritten(yes), "{:?}", String::from_utf8_lossy(yes));
        }
        for no in [
            &b"a.py"[..],
            b"test_a.txt",
            b"testa.py",
            b"conftest.pyc",
            b"test_a.py.bak",
        ] {
            assert!(!rewritten(no), "{:?}", String::from_utf8_lossy(no));
        }
    }

    #[test]
    fn modules_are_dealt_to_as_many_interpreters_as_the_jobs_and_their_number_allow() {
        let lines = |sizes: &[usize]| -> Vec<(usize, String)> {
            (sizes.iter().enumerate())
                .map(|(i, &s)| (s, format!("k{i}\tm{i}.py\n")))
                .collect()
        };
        // Too few for a second interpreter, or one job: one list, every line once.
        assert_eq!(shares(lines(&[10; 15]), 4).len(), 1);
        assert_eq!(shares(lines(&[10; 40]), 1).len(), 1);
        assert_eq!(shares(Vec::new(), 2), vec![String::new()]);
        // Enough for each job.
        let dealt = shares(lines(&[10; 40]), 2);
        assert_eq!(dealt.len(), 2);
        assert_eq!(dealt.iter().map(|l| l.lines().count()).sum::<usize>(), 40);
        assert_eq!(dealt[0].lines().count(), 20);
        // No more interpreters than a share of eight modules each.
        assert_eq!(shares(lines(&[10; 20]), 8).len(), 2);
        // Sizes are balanced: one large module goes alone against many small ones.
        let mut sizes = vec![1; 15];
        sizes.push(100);
        let dealt = shares(lines(&sizes), 2);
        let large = dealt.iter().find(|l| l.contains("k15\t")).unwrap();
        assert!(large.lines().count() < 8, "{dealt:?}");
        let mut all: Vec<&str> = dealt.iter().flat_map(|l| l.lines()).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 16);
    }

    #[test]
    fn the_key_is_the_plugins() {
        // The plugin hashes the same bytes: sha256(_DOMAIN + source) in rewrite.py.
        let plugin = include_str!("plugin/rewrite.py");
        assert!(plugin.contains(r#"_DOMAIN = b"fixgate rewrite v3\0""#));
        assert!(plugin.contains("hashlib.sha256(_DOMAIN + source).hexdigest()"));
        assert_eq!(
            key(b"x = 1\n"),
            "645a8d966b2b1dfecfa7731f7fe68b417d490cc0b6aa957a949566d958f28607"
        );
    }
}
