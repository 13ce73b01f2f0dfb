//! The prepared command of a pytest process: everything that makes it, explicit and owned, so
//! that a fresh process and a warm interpreter start alike, and a remote executor can map it onto
//! a REAPI `Command` (`program` and `args` its arguments, `env` its environment variables,
//! sorted and complete, `cwd` its working directory inside the input root `sandbox`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One pytest process, as the runner prepares it.
#[derive(Clone, Debug)]
pub(crate) struct PreparedCommand {
    /// The interpreter's own executable (`Interpreter::program`).
    pub(crate) program: PathBuf,
    /// Everything after the program: `-m pytest` and pytest's arguments.
    pub(crate) args: Vec<String>,
    /// The whole environment of the process: nothing of fixgate's own is inherited.
    pub(crate) env: BTreeMap<String, OsString>,
    /// Where the process starts: the snapshot's tree, inside `sandbox`.
    pub(crate) cwd: PathBuf,
    /// The run's folder (tree, home, tmp and the files exchanged with the plugin): writable.
    pub(crate) sandbox: PathBuf,
    /// fixgate's cache directory: hidden, but for the two folders below.
    pub(crate) cache_dir: PathBuf,
    /// The plugin's files, compiled by fixgate: readable.
    pub(crate) plugin_dir: PathBuf,
    /// pytest's rewritten test modules, made by fixgate: readable.
    pub(crate) rewrite_cache: PathBuf,
    /// The user's repository: hidden.
    pub(crate) origin_root: PathBuf,
    /// What the interpreter needs (its executable's prefix, and where a link leads): readable.
    pub(crate) interpreter: Vec<PathBuf>,
    /// The interpreter's `sys.path` folders: readable where no hidden folder is concerned.
    pub(crate) libraries: Vec<PathBuf>,
    /// Paths outside the repository the run may read (`read-paths`), as `libraries` are.
    pub(crate) read_paths: Vec<PathBuf>,
    /// Leave the network alone (`--allow-network`).
    pub(crate) allow_network: bool,
    /// The run's bounds.
    pub(crate) limits: crate::limits::Limits,
}

impl PreparedCommand {
    /// The process to spawn, contained, with stdin closed. The caller sets stdout and stderr;
    /// `pre_exec` steps it adds run after containment's. An error when the containment could
    /// not be prepared: the run must not start without it.
    pub(crate) fn command(&self, host: &crate::contain::Host) -> crate::error::Result<Command> {
        let mut cmd = Command::new(resolved_dir(&self.program));
        cmd.args(&self.args)
            .current_dir(&self.cwd)
            .env_clear()
            .envs(&self.env);
        cmd.stdin(Stdio::null());
        // Its own process group, so a timeout kills the test's children too and a Ctrl-C at
        // the terminal reaches fixgate, which then cleans up.
        cmd.process_group(0);
        let interpreter: Vec<&Path> = self.interpreter.iter().map(PathBuf::as_path).collect();
        crate::contain::apply(host, &mut cmd, &self.run_paths(&interpreter))?;
        Ok(cmd)
    }

    /// What containment knows of this process (`interpreter`: [`PreparedCommand::interpreter`]
    /// borrowed).
    fn run_paths<'a>(&'a self, interpreter: &'a [&'a Path]) -> crate::contain::RunPaths<'a> {
        crate::contain::RunPaths {
            sandbox: &self.sandbox,
            cwd: &self.cwd,
            cache_dir: &self.cache_dir,
            plugin_dir: &self.plugin_dir,
            rewrite_cache: &self.rewrite_cache,
            origin_root: &self.origin_root,
            interpreter,
            libraries: &self.libraries,
            read_paths: &self.read_paths,
            allow_network: self.allow_network,
            limits: &self.limits,
        }
    }

    /// Where one of a run's failures says the containment refused a read the suite needs
    /// (only Landlock does that where namespaces would not): an error that names the path and
    /// how to allow it, never a red test that would read as the patch's.
    pub(crate) fn refused_read<'m>(
        &self,
        host: &crate::contain::Host,
        messages: impl IntoIterator<Item = (&'m str, &'m str)>,
    ) -> crate::error::Result<()> {
        let interpreter: Vec<&Path> = self.interpreter.iter().map(PathBuf::as_path).collect();
        let paths = self.run_paths(&interpreter);
        for (test, message) in messages {
            if let Some(path) = crate::contain::refused_read(host, &paths, message) {
                let allow = match path.is_dir() {
                    true => path.as_path(),
                    false => path.parent().unwrap_or(&path),
                };
                return Err(crate::error::Error::Infra(format!(
                    "{test} was refused reading {}: runs contained by Landlock read only their \
                     sandbox, the interpreter and the system's folders; if the suite needs it, \
                     allow it with --read-path {} or read-paths = [\"{}\"] under \
                     [tool.fixgate] in the base's pyproject.toml",
                    path.display(),
                    allow.display(),
                    allow.display()
                )));
            }
        }
        Ok(())
    }
}

/// `program` with its folder made canonical and its file name kept: a run sees only the kept
/// folders of a private `/tmp`, so a path through one it does not see (`target/tmp/../venv/bin/
/// python`) would not resolve there, while a virtualenv's `bin/python` link must stay the
/// virtualenv's (Python finds its `pyvenv.cfg` from it).
fn resolved_dir(program: &Path) -> PathBuf {
    match (program.parent(), program.file_name()) {
        (Some(dir), Some(name)) if !dir.as_os_str().is_empty() => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or_else(|_| program.to_path_buf()),
        _ => program.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regression_an_interpreter_path_through_a_hidden_folder_is_resolved_before_the_run() {
        let root = tempfile::tempdir().unwrap();
        let venv_bin = root.path().join("venv").join("bin");
        std::fs::create_dir_all(&venv_bin).unwrap();
        std::fs::create_dir_all(root.path().join("tmp")).unwrap();
        std::os::unix::fs::symlink("/usr/bin/python3", venv_bin.join("python")).unwrap();
        let through = root.path().join("tmp").join("..").join("venv/bin/python");
        let real_root = std::fs::canonicalize(root.path()).unwrap();
        // The folder is canonical, the link itself is not followed.
        assert_eq!(resolved_dir(&through), real_root.join("venv/bin/python"));
        assert_eq!(resolved_dir(Path::new("python3")), Path::new("python3"));
    }
}
