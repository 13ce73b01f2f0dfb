//! Writing the user's files: the commands that change the working tree (`init --apply`, `lock`)
//! replace each file whole, so that a reader never sees half of one, and never through a link in
//! the repository (a name there may come from a patch: see src/beneath.rs).

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::beneath::Root;
use crate::error::{Error, Result};

/// Writes `bytes` to `path` in one step, keeping the mode of the file it replaces: below `root`
/// (the repository) without following a link there; elsewhere (a path the user named on the
/// command line) through a temporary file beside it.
pub(crate) fn write(root: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    if let Ok(rel) = path.strip_prefix(root) {
        if !rel.as_os_str().is_empty() {
            let root = Root::open(root).map_err(|e| Error::io("open", root, e))?;
            return write_below(&root, rel.as_os_str().as_bytes(), bytes);
        }
    }
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

/// Writes `bytes` to the repository-relative `rel` below `root`, making its folders, keeping the
/// mode of the file it replaces; a name that is not a normal path component is refused.
pub(crate) fn write_below(root: &Root, rel: &[u8], bytes: &[u8]) -> Result<()> {
    root.replace_file(rel, bytes)
        .map_err(|e| Error::io("write", root.display(rel), e))
}
