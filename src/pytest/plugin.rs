//! The embedded pytest plugin: written to disk under its own hash, loaded with `-p`.
//!
//! Two modules: `fixgate_plugin`, the one `-p` names, is a short loader of the plugin,
//! `fixgate_plugin_impl`. pytest rewrites the asserts of every module named with `-p`, from
//! source, and runs write no bytecode, so naming the plugin itself would have every pytest
//! process parse, rewrite and compile its 2,000 lines again (about 0.1 s). The loader keeps the
//! compiled plugin beside it, checksummed (a damaged file is compiled again, never run).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub const SOURCE: &str = include_str!("plugin.py");
pub const MODULE: &str = "fixgate_plugin";
const IMPL_MODULE: &str = "fixgate_plugin_impl";
const SHIM: &str = include_str!("plugin_shim.py");

/// The files the plugin directory holds, by name.
fn files() -> [(String, &'static str); 2] {
    [
        (format!("{MODULE}.py"), SHIM),
        (format!("{IMPL_MODULE}.py"), SOURCE),
    ]
}

/// The plugin's content hash: part of every run's key, since a new plugin may observe more.
pub fn digest() -> String {
    let mut hasher = blake3::Hasher::new();
    for (name, text) in files() {
        for part in [name.as_bytes(), text.as_bytes()] {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
    }
    hasher.finalize().to_hex().to_string()
}

/// Writes the plugin into `<cache_dir>/plugin/<hash>/` (or the temporary directory when the
/// cache directory is not writable) and returns the directory to put on `PYTHONPATH`.
pub fn install(cache_dir: &Path) -> Result<PathBuf> {
    let hash = &digest()[..16];
    let mut last_err = None;
    for base in [
        cache_dir.join("plugin"),
        std::env::temp_dir().join("fixgate-plugin"),
    ] {
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
