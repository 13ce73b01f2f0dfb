//! The embedded pytest plugin: written to disk under its own hash, loaded with `-p`.
//!
//! `fixgate_plugin`, the module `-p` names, is a short loader of the plugin's modules, split by
//! concern (`fixgate_plugin_events`, `_trace`, `_classify`, `_lease`, `_rewrite`, `_deps`,
//! `_state`, `_record`, `_forkserver`, `_options`, `_hooks`).
//! pytest rewrites the asserts of every module named with `-p`, from source, and runs write no
//! bytecode, so naming the plugin itself would have every pytest process parse, rewrite and
//! compile its 2,000 lines again (about 0.1 s). The loader keeps each module compiled beside it,
//! checksummed (a damaged file is compiled again, never run).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub const MODULE: &str = "fixgate_plugin";
const SHIM: &str = include_str!("plugin_shim.py");

/// The plugin's modules: the name each is written under, and its source. The shim loads them in
/// this order (keep its list in step).
const MODULES: [(&str, &str); 11] = [
    ("fixgate_plugin_events", include_str!("plugin/events.py")),
    ("fixgate_plugin_trace", include_str!("plugin/trace.py")),
    (
        "fixgate_plugin_classify",
        include_str!("plugin/classify.py"),
    ),
    ("fixgate_plugin_lease", include_str!("plugin/lease.py")),
    ("fixgate_plugin_rewrite", include_str!("plugin/rewrite.py")),
    ("fixgate_plugin_deps", include_str!("plugin/deps.py")),
    ("fixgate_plugin_state", include_str!("plugin/state.py")),
    ("fixgate_plugin_record", include_str!("plugin/record.py")),
    (
        "fixgate_plugin_forkserver",
        include_str!("plugin/forkserver.py"),
    ),
    ("fixgate_plugin_options", include_str!("plugin/options.py")),
    ("fixgate_plugin_hooks", include_str!("plugin/hooks.py")),
];

/// The files the plugin directory holds, by name: the shim, then every module.
fn files() -> Vec<(String, &'static str)> {
    let mut out = vec![(format!("{MODULE}.py"), SHIM)];
    out.extend(
        MODULES
            .iter()
            .map(|(name, text)| (format!("{name}.py"), *text)),
    );
    out
}

/// The plugin's content hash: part of every run's key, since a new plugin may observe more.
pub fn digest() -> String {
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

/// Writes the plugin into `<cache_dir>/plugin/<hash>/` (or the temporary directory when the
/// cache directory is not writable) and returns the directory to put on `PYTHONPATH`.
pub fn install(cache_dir: &Path, temp_dir: &Path) -> Result<PathBuf> {
    let hash = &digest()[..16];
    let mut last_err = None;
    for base in [cache_dir.join("plugin"), temp_dir.join("fixgate-plugin")] {
        let dir = base.join(hash);
        match write_files(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) => last_err = Some((dir, e)),
        }
    }
    let (dir, e) = last_err.expect("at least one attempt");
    Err(Error::Infra(format!(
        "failed to write the pytest plugin to {}: {e}; pass --cache-dir with a writable directory",
        dir.display()
    )))
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
