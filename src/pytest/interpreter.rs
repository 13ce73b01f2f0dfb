//! The Python interpreter runs happen in: which one, and its fingerprint (a key input of every
//! run, since an installed package can change any outcome).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::environment::Environment;
use crate::error::{Error, Result};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Fingerprint {
    /// Sorted `(name, version)` of every installed distribution.
    pub(crate) distributions: Vec<(String, String)>,
    pub(crate) executable: String,
    pub(crate) pytest: String,
    pub(crate) version: String,
}

impl Fingerprint {
    /// One hash for keys: changes when any field changes.
    pub(crate) fn digest(&self) -> String {
        let mut h = blake3::Hasher::new_derive_key("fixgate interpreter v1");
        for part in [&self.executable, &self.version, &self.pytest] {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        for (n, v) in &self.distributions {
            h.update(&(n.len() as u64).to_le_bytes());
            h.update(n.as_bytes());
            h.update(&(v.len() as u64).to_le_bytes());
            h.update(v.as_bytes());
        }
        h.finalize().to_hex().to_string()
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Interpreter {
    /// What the user named or fixgate found (`--python`, the virtualenv, `python3` on PATH).
    pub(crate) path: PathBuf,
    pub(crate) fingerprint: Fingerprint,
    /// `site.getuserbase()` under the caller's HOME, kept for runs whose HOME moves.
    pub(crate) user_base: Option<String>,
    /// The folders of its `sys.path`, canonical (site-packages, what `.pth` files add): a run
    /// must be able to read them wherever they are, a private `/tmp` included.
    pub(crate) sys_path: Vec<PathBuf>,
}

impl Interpreter {
    /// What every run executes: the interpreter's own executable, as the probe found it
    /// (`sys.executable`), not `path` again. A launcher in front of it (a pyenv or asdf shim,
    /// a wrapper script) picks an interpreter by the folder it starts in, and runs start in a
    /// snapshot's tree: the head's `.python-version` would choose the interpreter of the head's
    /// runs, another than the base's and than the fingerprint every key holds. `path` when the
    /// interpreter did not name an absolute executable of its own.
    pub(crate) fn program(&self) -> PathBuf {
        let exe = Path::new(&self.fingerprint.executable);
        match exe.is_absolute() {
            true => exe.to_path_buf(),
            false => self.path.clone(),
        }
    }
}

/// `--python`, else `$VIRTUAL_ENV/bin/python`, else the repository's `.venv/bin/python`, else
/// `python3` on PATH.
pub(crate) fn choose(flag: Option<&Path>, repo_root: &Path, env: &Environment) -> PathBuf {
    if let Some(p) = flag {
        // Runs start in a sandbox, so a relative path must be made absolute here, against the
        // directory the user typed it in. Not canonicalized: resolving a venv's symlinked
        // python would leave the venv. A bare name (`python3.12`) is looked up on PATH.
        if p.components().count() > 1 && p.is_relative() {
            if let Some(cwd) = &env.cwd {
                return cwd.join(p);
            }
        }
        return p.to_path_buf();
    }
    if let Some(venv) = &env.virtual_env {
        let p = venv.join("bin").join("python");
        if p.exists() {
            return p;
        }
    }
    let local = repo_root.join(".venv").join("bin").join("python");
    if local.exists() && !committed_venv(repo_root) {
        return local;
    }
    PathBuf::from("python3")
}

/// Whether the repository's index holds `.venv/bin/python` or a folder above it (as a file or
/// a link): then it came with a commit, maybe the head's, and starting it would run the
/// head's code outside any sandbox. A virtualenv the user made is never committed.
fn committed_venv(repo_root: &Path) -> bool {
    let Ok(repo) = git2::Repository::open(repo_root) else {
        return false;
    };
    let Ok(index) = repo.index() else {
        return false;
    };
    [".venv", ".venv/bin", ".venv/bin/python"]
        .iter()
        .any(|p| index.get_path(Path::new(p), 0).is_some())
}

// Started where the user typed the command (a version manager's launcher picks the interpreter
// from there), so its first step drops the working directory `python -c` puts first on
// sys.path: that folder may be a checkout of the head, and `import json` would run its json.py.
const PROBE: &str = r#"
import sys
if sys.path and sys.path[0] == "":
    del sys.path[0]
import json
import site
out = {"user_base": None, "executable": sys.executable, "version": sys.version, "pytest": None, "error": None, "distributions": []}
try:
    # Importing pytest takes most of this probe's time (a fresh machine pays it on every audit):
    # its version comes from its metadata when it has some, the import only when not.
    from importlib import metadata, util
    if util.find_spec("pytest") is None:
        raise ModuleNotFoundError("No module named 'pytest'")
    try:
        out["pytest"] = metadata.version("pytest")
    except metadata.PackageNotFoundError:
        import pytest
        out["pytest"] = pytest.__version__
except Exception as e:
    out["error"] = "%s: %s" % (type(e).__name__, e)
try:
    from importlib import metadata
    seen = set()
    for d in metadata.distributions():
        name = d.metadata["Name"] or ""
        key = (name.lower().replace("_", "-"), d.version or "")
        if name and key not in seen:
            seen.add(key)
    out["distributions"] = sorted(seen)
except Exception:
    pass
try:
    out["user_base"] = site.getuserbase()
except Exception:
    pass
import os
out["paths"] = sorted(set(os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)))
print(json.dumps(out))
"#;

#[derive(Deserialize)]
struct Probe {
    executable: String,
    version: String,
    pytest: Option<String>,
    error: Option<String>,
    distributions: Vec<(String, String)>,
    user_base: Option<String>,
    #[serde(default)]
    paths: Vec<String>,
}

/// A fingerprint remembered with the stat data of the executable and of every directory on the
/// interpreter's `sys.path`: installing or removing a distribution changes a site directory, so
/// an unchanged stamp means an unchanged fingerprint, without starting Python.
#[derive(Serialize, Deserialize)]
struct Remembered {
    version: u32,
    fingerprint: Fingerprint,
    user_base: Option<String>,
    sys_path: Vec<PathBuf>,
    stamps: Vec<(String, i128, i128)>,
}

const REMEMBERED_VERSION: u32 = 2;

fn stamp(path: &Path) -> Option<(i128, i128)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((
        m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
        m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128,
    ))
}

/// Where the fingerprint of `path` probed in `cwd` is remembered: a launcher (`python3` as a
/// pyenv shim) may name another interpreter in another folder.
fn remembered_file(cache_dir: &Path, path: &Path, cwd: Option<&Path>) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let mut h = blake3::Hasher::new();
    h.update(path.as_os_str().as_bytes());
    if let Some(cwd) = cwd {
        h.update(b"\0");
        h.update(cwd.as_os_str().as_bytes());
    }
    let key = h.finalize().to_hex();
    cache_dir
        .join("interpreters")
        .join(format!("{}.json", &key[..32]))
}

/// A [`probe_cached`] started early by [`prefetch`]: the interpreter, the cache directory and
/// the thread computing it.
type Prefetched = (
    PathBuf,
    PathBuf,
    std::thread::JoinHandle<Result<Interpreter>>,
);

static PREFETCHED: std::sync::Mutex<Option<Prefetched>> = std::sync::Mutex::new(None);

/// Starts [`probe_cached`] on another thread: on a machine that has not remembered the
/// interpreter, Python's start-up then overlaps the snapshots instead of preceding them. The
/// next [`probe_cached`] for the same arguments takes the result.
pub(crate) fn prefetch(path: PathBuf, cache_dir: PathBuf, env: std::sync::Arc<Environment>) {
    let (p, c) = (path.clone(), cache_dir.clone());
    let handle = std::thread::spawn(move || probe_cached_now(&p, &c, &env));
    *PREFETCHED.lock().unwrap_or_else(|e| e.into_inner()) = Some((path, cache_dir, handle));
}

/// [`probe`], reusing the fingerprint remembered under `cache_dir` while the interpreter's
/// executable and `sys.path` directories are unchanged.
pub(crate) fn probe_cached(
    path: &Path,
    cache_dir: &Path,
    env: &Environment,
) -> Result<Interpreter> {
    let prefetched = PREFETCHED.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some((p, c, handle)) = prefetched {
        // A prefetch thread that panicked is a bug there; probing again here still answers.
        if p == path && c == cache_dir {
            if let Ok(result) = handle.join() {
                return result;
            }
        }
    }
    probe_cached_now(path, cache_dir, env)
}

fn probe_cached_now(path: &Path, cache_dir: &Path, env: &Environment) -> Result<Interpreter> {
    let file = remembered_file(cache_dir, path, env.cwd.as_deref());
    let remembered: Option<Remembered> = std::fs::read(&file)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .filter(|r: &Remembered| r.version == REMEMBERED_VERSION);
    if let Some(r) = remembered {
        let exe_ok = env.which(path).and_then(|p| stamp(&p)).is_some();
        if exe_ok
            && r.stamps
                .iter()
                .all(|(p, m, c)| stamp(Path::new(p)) == Some((*m, *c)))
        {
            return Ok(Interpreter {
                path: path.to_path_buf(),
                fingerprint: r.fingerprint,
                user_base: r.user_base,
                sys_path: r.sys_path,
            });
        }
    }
    let interpreter = probe(path, env.cwd.as_deref())?;
    let mut stamps = Vec::new();
    let exe = PathBuf::from(&interpreter.fingerprint.executable);
    for p in std::iter::once(exe).chain(interpreter.sys_path.iter().cloned()) {
        if let Some((m, c)) = stamp(&p) {
            stamps.push((p.display().to_string(), m, c));
        }
    }
    let record = Remembered {
        version: REMEMBERED_VERSION,
        fingerprint: interpreter.fingerprint.clone(),
        user_base: interpreter.user_base.clone(),
        sys_path: interpreter.sys_path.clone(),
        stamps,
    };
    // Remembering only saves time: a failure to write is not worth a warning.
    if let Some(dir) = file.parent() {
        if std::fs::create_dir_all(dir).is_ok() {
            if let Ok(mut tmp) = tempfile::NamedTempFile::new_in(dir) {
                let bytes = serde_json::to_vec(&record).unwrap_or_default();
                if std::io::Write::write_all(&mut tmp, &bytes).is_ok() {
                    let _ = tmp.persist(&file);
                }
            }
        }
    }
    Ok(interpreter)
}

/// Runs the interpreter once to fingerprint it, in `cwd` (where the user typed the command;
/// else an empty folder); exit-2 errors name it and say how to fix it.
pub(crate) fn probe(path: &Path, cwd: Option<&Path>) -> Result<Interpreter> {
    let empty = tempfile::tempdir().map_err(|e| Error::io("create", "a temporary folder", e))?;
    let out = Command::new(path)
        .args(["-c", PROBE])
        .current_dir(cwd.filter(|d| d.is_dir()).unwrap_or(empty.path()))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .map_err(|e| {
            Error::Usage(format!(
                "failed to start the Python interpreter {}: {e}; pass --python PATH, activate \
                 a virtualenv, or create .venv in the repository",
                path.display()
            ))
        })?;
    let probe: Probe = serde_json::from_slice(&out.stdout).map_err(|_| {
        Error::Usage(format!(
            "{} did not answer like a Python 3 interpreter (exit {:?}): {}",
            path.display(),
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    })?;
    let Some(pytest) = probe.pytest else {
        return Err(Error::Usage(format!(
            "pytest cannot be imported by {} ({}); install it with `{} -m pip install pytest`, \
             or pass --python with an interpreter that has it",
            path.display(),
            probe.error.unwrap_or_default(),
            path.display()
        )));
    };
    Ok(Interpreter {
        path: path.to_path_buf(),
        fingerprint: Fingerprint {
            executable: probe.executable,
            version: probe.version,
            pytest,
            distributions: probe.distributions,
        },
        user_base: probe.user_base,
        sys_path: probe.paths.into_iter().map(PathBuf::from).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe starts where the user typed the command, which may be a checkout of the head:
    /// a `json.py` (or `site.py`, `importlib` …) there is not what the probe imports.
    #[test]
    fn the_probe_in_a_folder_with_a_hostile_json_module_imports_the_standard_one() {
        let cwd = tempfile::tempdir().unwrap();
        let marker = cwd.path().join("ran");
        std::fs::write(
            cwd.path().join("json.py"),
            format!("open({:?}, 'w').close()\nraise SystemExit(3)\n", marker),
        )
        .unwrap();
        let interpreter = probe(Path::new("python3"), Some(cwd.path())).unwrap();
        assert!(!marker.exists(), "the probe ran the folder's json.py");
        assert!(Path::new(&interpreter.fingerprint.executable).is_absolute());
        assert_eq!(
            interpreter.program(),
            PathBuf::from(&interpreter.fingerprint.executable)
        );
    }

    /// The same launcher may name another interpreter in another folder: each folder's
    /// fingerprint is remembered apart.
    #[test]
    fn a_fingerprint_is_remembered_per_launcher_and_folder() {
        let cache = Path::new("/cache");
        let (a, b) = (Path::new("/repo/a"), Path::new("/repo/b"));
        let python = Path::new("python3");
        assert_ne!(
            remembered_file(cache, python, Some(a)),
            remembered_file(cache, python, Some(b))
        );
        assert_eq!(
            remembered_file(cache, python, Some(a)),
            remembered_file(cache, python, Some(a))
        );
    }
}
