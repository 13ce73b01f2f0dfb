//! Writing the user's files: the commands that change the working tree (`init --apply`, `lock`)
//! replace each file whole, so that a reader never sees half of one.

use std::path::Path;

use crate::error::{Error, Result};

/// Writes `bytes` to `path` through a temporary file in the same directory, keeping the mode of
/// the file it replaces.
pub(crate) fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp =
        tempfile::NamedTempFile::new_in(dir).map_err(|e| Error::io("create a file in", dir, e))?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(|e| Error::io("write", tmp.path(), e))?;
    // Keep the file's mode: an edited test module or a re-pinned lock stays as it was.
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(tmp.path(), meta.permissions());
    }
    tmp.persist(path)
        .map_err(|e| Error::io("write", path, e.error))?;
    Ok(())
}
