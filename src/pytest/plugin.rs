//! The embedded pytest plugin: written to disk under its own hash and compiled there by fixgate
//! before any run, loaded with `-p`.
//!
//! `fixgate_plugin`, the module `-p` names, is a short loader of the plugin's modules, split by
//! concern (`fixgate_plugin_events`, `_outcome`, `_trace`, `_classify`, `_lease`, `_rewrite`,
//! `_deps`, `_state`, `_record`, `_forkserver`, `_options`, `_hooks`).
//! pytest rewrites the asserts of every module named with `-p`, from source, and runs write no
//! bytecode, so naming the plugin itself would have every pytest process parse, rewrite and
//! compile its 2,000 lines again (about 0.1 s). The loader runs each module from the bytecode
//! [`install`] compiled beside it, outside any run (runs see the folder read-only and never
//! write it: a run's code is the patch's, and what it wrote would be the next run's plugin).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{Error, Result};

pub(crate) const MODULE: &str = "fixgate_plugin";
const SHIM: &str = include_str!("plugin_shim.py");

/// The plugin's modules: the name each is written under, and its source. The shim loads them in
/// this order (keep its list in step).
const MODULES: [(&str, &str); 17] = [
    ("fixgate_plugin_events", include_str!("plugin/events.py")),
    ("fixgate_plugin_outcome", include_str!("plugin/outcome.py")),
    ("fixgate_plugin_trace", include_str!("plugin/trace.py")),
    (
        "fixgate_plugin_classify",
        include_str!("plugin/classify.py"),
    ),
    ("fixgate_plugin_lease", include_str!("plugin/lease.py")),
    ("fixgate_plugin_rewrite", include_str!("plugin/rewrite.py")),
    ("fixgate_plugin_deps", include_str!("plugin/deps.py")),
    (
        "fixgate_plugin_settings",
        include_str!("plugin/settings.py"),
    ),
    ("fixgate_plugin_state", include_str!("plugin/state.py")),
    ("fixgate_plugin_record", include_str!("plugin/record.py")),
    (
        "fixgate_plugin_forkserver",
        include_str!("plugin/forkserver.py"),
    ),
    ("fixgate_plugin_options", include_str!("plugin/options.py")),
    ("fixgate_plugin_flags", include_str!("plugin/flags.py")),
    ("fixgate_plugin_run", include_str!("plugin/run.py")),
    ("fixgate_plugin_phase", include_str!("plugin/phase.py")),
    (
        "fixgate_plugin_collection",
        include_str!("plugin/collection.py"),
    ),
    ("fixgate_plugin_hooks", include_str!("plugin/hooks.py")),
];

/// The files the plugin directory holds, by name: the shim, then every module.
pub(crate) fn files() -> Vec<(String, &'static str)> {
    let mut out = vec![(format!("{MODULE}.py"), SHIM)];
    out.extend(
        MODULES
            .iter()
            .map(|(name, text)| (format!("{name}.py"), *text)),
    );
    out
}

/// The plugin's content hash: part of every run's key, since a new plugin may observe more.
pub(crate) fn digest() -> String {
    digest_of(&files())
}

fn digest_of(files: &[(String, &str)]) -> String {
    let mut hasher = blake3::Hasher::new();
    for (name, text) in files {
        for part in [name.as_bytes(), text.as_bytes()] {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
    }
    hasher.finalize().to_hex().to_string()
}

/// The plugin on disk: the folder to put on `PYTHONPATH`, and the private folder that holds it
/// when the cache directory is not writable (removed when the last run is done).
#[derive(Debug)]
pub(crate) struct Installed {
    pub(crate) dir: PathBuf,
    _private: Option<tempfile::TempDir>,
}

/// Compiles the named modules of the folder `argv[1]` into its `__pycache__`, as the shim
/// expects them: magic number, the SHA-256 of the marshalled code, the code; prints each file
/// written, relative to the folder, one a line. Run with `-I -S`: nothing but the interpreter
/// itself is imported.
const COMPILE: &str = r#"
import hashlib, importlib.util, marshal, os, sys
folder = sys.argv[1]
out = os.path.join(folder, "__pycache__")
os.makedirs(out, exist_ok=True)
for name in sys.argv[2:]:
    source = os.path.join(folder, name + ".py")
    with open(source, "rb") as f:
        body = marshal.dumps(compile(f.read(), source, "exec", dont_inherit=True))
    path = os.path.join(out, "%s.%s.fixgate" % (name, sys.implementation.cache_tag))
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(importlib.util.MAGIC_NUMBER + hashlib.sha256(body).digest() + body)
    os.replace(tmp, path)
    print(os.path.relpath(path, folder))
"#;

/// Writes the plugin into `<cache_dir>/plugin/<hash>/` and compiles it there for `python`
/// (once per interpreter: `fingerprint` names it). When the cache directory is not writable, a
/// private temporary folder of this process takes its place, never a folder other users
/// share: whoever can write the plugin decides every run's outcome.
pub(crate) fn install(
    cache_dir: &Path,
    temp_dir: &Path,
    python: &Path,
    fingerprint: &str,
) -> Result<Installed> {
    let hash = &digest()[..16];
    let shared = cache_dir.join("plugin").join(hash);
    if write_files(&shared).is_ok() {
        compile(&shared, python, fingerprint)?;
        return Ok(Installed {
            dir: shared,
            _private: None,
        });
    }
    let private = tempfile::Builder::new()
        .prefix("fixgate-plugin-")
        .tempdir_in(temp_dir)
        .map_err(|e| {
            Error::Infra(format!(
                "failed to write the pytest plugin to {} or a private folder in {}: {e}; pass \
                 --cache-dir with a writable directory",
                shared.display(),
                temp_dir.display()
            ))
        })?;
    let dir = private.path().join(hash);
    write_files(&dir).map_err(|e| Error::io("write the pytest plugin to", &dir, e))?;
    compile(&dir, python, fingerprint)?;
    Ok(Installed {
        dir,
        _private: Some(private),
    })
}

/// Compiles the plugin's modules in `dir` with `python`, unless the stamp of this interpreter
/// says it was done and every file it lists still has the digest it records: a copy damaged or
/// removed since is compiled again. A failure leaves no stamp: the loader then compiles in
/// memory.
fn compile(dir: &Path, python: &Path, fingerprint: &str) -> Result<()> {
    let stamp = dir.join(format!(
        "compiled-{}",
        &fingerprint[..16.min(fingerprint.len())]
    ));
    if std::fs::read_to_string(&stamp).is_ok_and(|text| stamp_holds(dir, &text)) {
        return Ok(());
    }
    let out = Command::new(python)
        .args(["-I", "-S", "-c", COMPILE])
        .arg(dir)
        .args(MODULES.iter().map(|(name, _)| name))
        .env_clear()
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            Error::Infra(format!(
                "failed to start {} to compile the pytest plugin: {e}",
                python.display()
            ))
        })?;
    if !out.status.success() {
        return Err(Error::Infra(format!(
            "{} failed to compile the pytest plugin in {} ({}): {}",
            python.display(),
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let mut text = String::new();
    for name in String::from_utf8_lossy(&out.stdout).lines() {
        let file = dir.join(name);
        let bytes = std::fs::read(&file).map_err(|e| Error::io("read", &file, e))?;
        text.push_str(&format!("{} {name}\n", blake3::hash(&bytes).to_hex()));
    }
    // A stamp cut short lists a file it does not check: the next install compiles again.
    std::fs::write(&stamp, text).map_err(|e| Error::io("write", &stamp, e))
}

/// Whether every `<blake3> <file>` line of a stamp names a file of `dir` with that digest.
fn stamp_holds(dir: &Path, text: &str) -> bool {
    !text.is_empty()
        && text.lines().all(|line| {
            line.split_once(' ').is_some_and(|(digest, name)| {
                std::fs::read(dir.join(name))
                    .is_ok_and(|bytes| blake3::hash(&bytes).to_hex().as_str() == digest)
            })
        })
}

/// Writes each file that is missing or differs, atomically; a file already right is left alone.
fn write_files(dir: &Path) -> std::io::Result<()> {
    for (name, text) in files() {
        let file = dir.join(name);
        if std::fs::read(&file).is_ok_and(|b| b == text.as_bytes()) {
            continue;
        }
        std::fs::create_dir_all(dir)?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        std::io::Write::write_all(&mut tmp, text.as_bytes())?;
        tmp.persist(&file).map_err(|e| e.error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shim_loads_every_module_in_the_listed_order() {
        let start = SHIM
            .find("_MODULES = (")
            .expect("the shim lists its modules");
        let listed: Vec<&str> = SHIM[start..]
            .lines()
            .skip(1)
            .take_while(|l| l.trim() != ")")
            .map(|l| l.trim().trim_end_matches(',').trim_matches('"'))
            .collect();
        let ours: Vec<&str> = MODULES.iter().map(|(n, _)| *n).collect();
        assert_eq!(listed, ours);
    }

    /// An interpreter for the tests below: `python3` on PATH.
    fn python() -> PathBuf {
        let out = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("the plugin's tests need python3 on PATH");
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    }

    #[test]
    fn the_plugin_is_compiled_by_fixgate_once_per_interpreter() {
        let cache = tempfile::tempdir().unwrap();
        let temp = tempfile::tempdir().unwrap();
        let installed = install(cache.path(), temp.path(), &python(), "0123456789abcdef0").unwrap();
        assert!(installed.dir.starts_with(cache.path().join("plugin")));
        let compiled: Vec<String> = std::fs::read_dir(installed.dir.join("__pycache__"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        for (name, _) in MODULES {
            assert!(
                compiled
                    .iter()
                    .any(|c| c.starts_with(&format!("{name}.")) && c.ends_with(".fixgate")),
                "{name} not compiled: {compiled:?}"
            );
        }
        // A second install for the same interpreter compiles nothing while the copies are what
        // the stamp records; a damaged or removed copy is compiled again.
        let stamp = installed.dir.join("compiled-0123456789abcdef");
        let recorded = std::fs::read_to_string(&stamp).unwrap();
        assert_eq!(recorded.lines().count(), MODULES.len(), "{recorded}");
        let copy = installed
            .dir
            .join(recorded.lines().next().unwrap().split_once(' ').unwrap().1);
        let good = std::fs::read(&copy).unwrap();
        let modified = || std::fs::metadata(&copy).unwrap().modified().unwrap();
        let before = modified();
        install(cache.path(), temp.path(), &python(), "0123456789abcdef0").unwrap();
        assert_eq!(modified(), before, "compiled again though nothing changed");
        std::fs::write(&copy, b"damaged").unwrap();
        install(cache.path(), temp.path(), &python(), "0123456789abcdef0").unwrap();
        assert_eq!(std::fs::read(&copy).unwrap(), good);
        std::fs::remove_dir_all(installed.dir.join("__pycache__")).unwrap();
        install(cache.path(), temp.path(), &python(), "0123456789abcdef0").unwrap();
        assert_eq!(std::fs::read(&copy).unwrap(), good);
    }

    #[test]
    fn without_a_writable_cache_the_plugin_goes_to_a_private_folder_removed_after_use() {
        let blocker = tempfile::tempdir().unwrap();
        std::fs::write(blocker.path().join("file"), "").unwrap();
        let temp = tempfile::tempdir().unwrap();
        let installed = install(
            &blocker.path().join("file/cache"),
            temp.path(),
            &python(),
            "fp",
        )
        .unwrap();
        assert!(installed.dir.starts_with(temp.path()));
        assert!(installed.dir.join(format!("{MODULE}.py")).exists());
        let private = installed.dir.parent().unwrap().to_path_buf();
        drop(installed);
        assert!(!private.exists());
    }

    #[test]
    fn the_binary_ships_every_module_of_the_plugins_folder_and_none_of_its_tests() {
        let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/pytest/plugin");
        let mut sources: Vec<String> = std::fs::read_dir(&folder)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".py"))
            .map(|n| format!("fixgate_plugin_{}", n.trim_end_matches(".py")))
            .collect();
        sources.sort();
        let mut shipped: Vec<String> = MODULES.iter().map(|(n, _)| n.to_string()).collect();
        shipped.sort();
        assert_eq!(shipped, sources);
        // Its tests live in a folder beside the modules, which nothing lists.
        assert!(folder.join("tests").join("conftest.py").is_file());
    }

    #[test]
    fn the_digest_covers_every_byte_of_every_module() {
        let files = files();
        let base = digest_of(&files);
        assert_eq!(base, digest());
        for i in 0..files.len() {
            let mut changed: Vec<(String, String)> = files
                .iter()
                .map(|(n, t)| (n.clone(), t.to_string()))
                .collect();
            changed[i].1.push(' ');
            let borrowed: Vec<(String, &str)> = changed
                .iter()
                .map(|(n, t)| (n.clone(), t.as_str()))
                .collect();
            assert_ne!(digest_of(&borrowed), base, "{}", files[i].0);
        }
    }
}
