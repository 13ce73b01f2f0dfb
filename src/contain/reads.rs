//! What a run must read, as both tiers see it: the interpreter's prefixes, its library folders
//! (never one that would show a hidden folder), the plugin and the rewritten test modules, and
//! the folders the base's configuration names (`read-paths`). The namespaces tier binds them
//! back under its covers; the Landlock tier grants them and nothing else beyond the system's.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::environment::Environment;
use crate::limits::Limits;

/// The paths of one run that containment must know.
pub(crate) struct RunPaths<'a> {
    /// The sandbox folder (tree, home, tmp and the files exchanged with the plugin): writable.
    pub(crate) sandbox: &'a Path,
    /// The directory the run starts in (inside the sandbox).
    pub(crate) cwd: &'a Path,
    /// Hidden: fixgate's cache directory (its store, other heads' results, the index), but for
    /// the two folders below.
    pub(crate) cache_dir: &'a Path,
    /// Readable: the plugin's files, compiled.
    pub(crate) plugin_dir: &'a Path,
    /// Readable: pytest's rewritten test modules, made by fixgate.
    pub(crate) rewrite_cache: &'a Path,
    /// Hidden: the user's repository.
    pub(crate) origin_root: &'a Path,
    /// Readable: what the interpreter needs (its executable as named and as resolved).
    pub(crate) interpreter: &'a [&'a Path],
    /// Readable: the interpreter's `sys.path` folders (its site-packages, what `.pth` files
    /// add, under a private `/tmp` too), but none that is or holds a hidden folder, and none
    /// inside the repository, the cache or the sandboxes.
    pub(crate) libraries: &'a [PathBuf],
    /// Readable: what `[tool.fixgate] read-paths` and `--read-path` add (data folders outside
    /// the repository), under the same rule as `libraries`.
    pub(crate) read_paths: &'a [PathBuf],
    /// Leave the network alone.
    pub(crate) allow_network: bool,
    /// The run's bounds.
    pub(crate) limits: &'a Limits,
}

/// `p` as a C string for the system calls of the child.
pub(super) fn cstr(p: &Path) -> CString {
    // A path with a NUL byte cannot exist; an empty string makes the call fail loudly.
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

/// `path` absolute and canonical where it exists; `None` for paths that do not.
pub(super) fn real(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

/// The folders of `sys_path` a run may read: canonical, existing, holding no folder of `hidden`
/// (binding `/home` back would show the home) and inside none of `private` (the repository,
/// whose editable-install folder the run reads from its own tree; the cache; the sandboxes).
pub(super) fn libraries(
    sys_path: &[PathBuf],
    hidden: &[PathBuf],
    private: &[PathBuf],
) -> Vec<PathBuf> {
    sys_path
        .iter()
        .filter_map(|p| real(p))
        .filter(|p| p.parent().is_some())
        .filter(|p| !hidden.iter().any(|h| h.starts_with(p)))
        .filter(|p| !private.iter().any(|h| p.starts_with(h)))
        .collect()
}

/// Keeps only the outermost of nested paths.
pub(super) fn outermost(mut paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths.sort();
    paths.dedup();
    let mut out: Vec<PathBuf> = Vec::new();
    for p in paths {
        if !out.iter().any(|o| p.starts_with(o)) {
            out.push(p);
        }
    }
    out
}

/// The interpreter's prefixes (a virtualenv, a pyenv version): `bin/python`'s grandparent
/// holds its libraries and configuration; for a virtualenv's link, the base interpreter's too
/// (where the link leads). `/` is never one: keeping it would keep everything.
pub(super) fn interpreter_prefixes(env: &Environment, interpreter: &[&Path]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for exe in interpreter.iter().filter_map(|e| env.which(e)) {
        for exe in [Some(exe.clone()), real(&exe)].into_iter().flatten() {
            let prefix = exe.parent().and_then(Path::parent).and_then(real);
            out.extend(prefix.filter(|p| p.parent().is_some()));
        }
    }
    out
}

/// The folders no run may see into, whatever it reads: the user's repository, fixgate's cache
/// and the sandboxes' folder (every other run's).
pub(super) fn private(paths: &RunPaths) -> Vec<PathBuf> {
    [Some(paths.origin_root), Some(paths.cache_dir)]
        .into_iter()
        .flatten()
        .filter_map(real)
        .chain(paths.sandbox.parent().and_then(real))
        .collect()
}

/// The folders the base's configuration (or the command line) adds to what runs read, as
/// [`libraries`] keeps them: none that holds `hidden` or lies in `private`.
pub(super) fn extra(paths: &RunPaths, hidden: &[PathBuf], private: &[PathBuf]) -> Vec<PathBuf> {
    libraries(paths.read_paths, hidden, private)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_folders_never_show_a_hidden_or_private_folder() {
        let root = tempfile::tempdir().unwrap();
        let at = |s: &str| {
            let p = root.path().join(s);
            std::fs::create_dir_all(&p).unwrap();
            real(&p).unwrap()
        };
        let (home, repo, cache, tmp) = (at("home/me"), at("home/me/repo"), at("cache"), at("tmp"));
        let (user_site, editable) = (at("home/me/.local/site"), at("home/me/repo/src"));
        let (in_cache, shared) = (at("cache/lib"), at("tmp/venv/site-packages"));
        let hidden = vec![home.clone(), repo.clone(), cache.clone(), tmp.clone()];
        let private = vec![repo.clone(), cache.clone()];
        let sys_path = [
            root.path().join("home"),
            home,
            user_site.clone(),
            editable,
            in_cache,
            shared.join("../site-packages"),
            root.path().join("missing"),
        ];
        assert_eq!(
            libraries(&sys_path, &hidden, &private),
            vec![user_site, shared]
        );
    }

    #[test]
    fn only_the_outermost_of_nested_paths_is_kept() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            outermost(vec![p("/a/b/c"), p("/a/b"), p("/x"), p("/a/bc"), p("/x")]),
            vec![p("/a/b"), p("/a/bc"), p("/x")]
        );
    }
}
