//! The embedded pytest plugin: written to disk under its own hash, loaded with `-p`.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub const SOURCE: &str = include_str!("plugin.py");
pub const MODULE: &str = "fixgate_plugin";

/// The plugin's content hash: part of every run's key, since a new plugin may observe more.
pub fn digest() -> String {
    blake3::hash(SOURCE.as_bytes()).to_hex().to_string()
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
        let file = dir.join(format!("{MODULE}.py"));
        if std::fs::read(&file).is_ok_and(|b| b == SOURCE.as_bytes()) {
            return Ok(dir);
        }
        let written = std::fs::create_dir_all(&dir).and_then(|_| {
            let mut tmp = tempfile::NamedTempFile::new_in(&dir)?;
            std::io::Write::write_all(&mut tmp, SOURCE.as_bytes())?;
            tmp.persist(&file).map(|_| ()).map_err(|e| e.error)
        });
        match written {
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
