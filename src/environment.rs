//! Everything fixgate takes from its process environment, read once when a command starts and
//! handed down as typed values: the rest of the program never asks `std::env`.
//!
//! The environment is an input like the command line: a run's key includes the variables it
//! passes to pytest, and a knob set wrongly should fail at start with a message that names it,
//! not half way through an audit.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The `FIXGATE_*` variables fixgate reads (`FIXGATE_REMOTE_CACHE` and `FIXGATE_CONTAINMENT`
/// are read by the command-line parser as the defaults of `--remote-cache` and
/// `--containment`); any other `FIXGATE_*` name is a warning.
pub(crate) const KNOBS: &[&str] = &[
    CACHE_DIR,
    CONTAINMENT,
    FORK,
    NO_NAMESPACES,
    REMOTE_CACHE,
    REMOTE_HEADER,
    CACHE_KEY,
];
const CACHE_DIR: &str = "FIXGATE_CACHE_DIR";
const CONTAINMENT: &str = "FIXGATE_CONTAINMENT";
const FORK: &str = "FIXGATE_FORK";
const NO_NAMESPACES: &str = "FIXGATE_NO_NAMESPACES";
const REMOTE_CACHE: &str = "FIXGATE_REMOTE_CACHE";
const REMOTE_HEADER: &str = "FIXGATE_REMOTE_HEADER";
const CACHE_KEY: &str = "FIXGATE_CACHE_KEY";

/// The process environment, read once.
#[derive(Clone, Debug)]
pub(crate) struct Environment {
    /// The directory fixgate started in (`None` when it no longer exists).
    pub(crate) cwd: Option<PathBuf>,
    /// `HOME`, when set and not empty.
    pub(crate) home: Option<PathBuf>,
    /// `XDG_CACHE_HOME`, when set and not empty.
    pub(crate) xdg_cache_home: Option<PathBuf>,
    /// The directories of `PATH`, in order.
    pub(crate) search_path: Vec<PathBuf>,
    /// The system temporary directory (`TMPDIR`, else `/tmp`).
    pub(crate) temp_dir: PathBuf,
    /// `VIRTUAL_ENV`, when set and not empty.
    pub(crate) virtual_env: Option<PathBuf>,
    /// `NO_COLOR` is set (to anything, as no-color.org says).
    pub(crate) no_color: bool,
    /// This executable, when the platform says.
    pub(crate) current_exe: Option<PathBuf>,
    /// `FIXGATE_CACHE_DIR`, when set and not empty.
    pub(crate) cache_dir: Option<PathBuf>,
    /// `FIXGATE_FORK`: `false` turns the fork server off.
    pub(crate) fork: bool,
    /// `FIXGATE_NO_NAMESPACES`: act as if the platform refused namespaces (runs then get the
    /// Landlock tier where the kernel has it).
    pub(crate) no_namespaces: bool,
    /// `FIXGATE_REMOTE_HEADER`: headers for the remote cache, `Name: value` a line (parsed
    /// where the remote is configured, so its errors stay beside the format they check).
    pub(crate) remote_header: Option<String>,
    /// `FIXGATE_CACHE_KEY`, when set and not empty: the key that signs action results.
    pub(crate) cache_key: Option<String>,
    /// Unknown `FIXGATE_*` names, to warn about.
    pub(crate) warnings: Vec<String>,
    /// Every variable, for the allowlist and `--pass-env` names a run may see and the run key
    /// that includes them.
    vars: BTreeMap<OsString, OsString>,
}

impl Environment {
    /// Reads this process's environment. The only caller of `std::env` in fixgate.
    pub(crate) fn read() -> Result<Environment> {
        Environment::from_vars(
            std::env::vars_os(),
            std::env::current_dir().ok(),
            std::env::current_exe().ok(),
        )
    }

    /// The environment made of these variables, working directory and executable.
    pub(crate) fn from_vars(
        vars: impl IntoIterator<Item = (OsString, OsString)>,
        cwd: Option<PathBuf>,
        current_exe: Option<PathBuf>,
    ) -> Result<Environment> {
        let vars: BTreeMap<OsString, OsString> = vars.into_iter().collect();
        let get = |name: &str| vars.get(OsStr::new(name)).filter(|v| !v.is_empty());
        let path = |name: &str| get(name).map(PathBuf::from);
        let text = |name: &str| -> Result<Option<String>> {
            get(name)
                .map(|v| {
                    v.to_str().map(str::to_owned).ok_or_else(|| {
                        Error::Usage(format!(
                            "{name} is not valid UTF-8; set it to a text value or unset it"
                        ))
                    })
                })
                .transpose()
        };
        let flag = |name: &str, default: bool| -> Result<bool> {
            let Some(value) = get(name) else {
                return Ok(default);
            };
            match value.to_str().map(str::to_ascii_lowercase).as_deref() {
                Some("1" | "true" | "yes" | "on") => Ok(true),
                Some("0" | "false" | "no" | "off") => Ok(false),
                _ => Err(Error::Usage(format!(
                    "{name}={} is not a switch; set it to 1 or 0 (or true/false, yes/no, \
                     on/off), or unset it",
                    value.to_string_lossy()
                ))),
            }
        };
        let search_path = get("PATH")
            .map(|p| std::env::split_paths(p).collect())
            .unwrap_or_default();
        let temp_dir = path("TMPDIR").unwrap_or_else(|| PathBuf::from("/tmp"));
        let warnings = vars
            .keys()
            .filter_map(|k| k.to_str())
            .filter(|k| k.starts_with("FIXGATE_") && !KNOBS.contains(k))
            .map(|k| {
                format!(
                    "{k} is not a variable fixgate reads (it reads {}); check its spelling",
                    KNOBS.join(", ")
                )
            })
            .collect();
        Ok(Environment {
            home: path("HOME"),
            xdg_cache_home: path("XDG_CACHE_HOME"),
            search_path,
            temp_dir,
            virtual_env: path("VIRTUAL_ENV"),
            no_color: vars.contains_key(OsStr::new("NO_COLOR")),
            cache_dir: path(CACHE_DIR),
            fork: flag(FORK, true)?,
            no_namespaces: flag(NO_NAMESPACES, false)?,
            remote_header: text(REMOTE_HEADER)?,
            cache_key: text(CACHE_KEY)?,
            warnings,
            cwd,
            current_exe,
            vars,
        })
    }

    /// The value of a variable as fixgate found it at start.
    pub(crate) fn var(&self, name: &str) -> Option<&OsStr> {
        self.vars.get(OsStr::new(name)).map(OsString::as_os_str)
    }

    /// The file a command name or path refers to (a bare name is looked up on `PATH`).
    pub(crate) fn which(&self, program: &Path) -> Option<PathBuf> {
        if program.components().count() > 1 {
            return Some(program.to_path_buf());
        }
        self.search_path
            .iter()
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Result<Environment> {
        Environment::from_vars(
            vars.iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
            None,
            None,
        )
    }

    #[test]
    fn switches_parse_and_bad_values_name_the_variable() {
        let e = env(&[("FIXGATE_FORK", "0"), ("FIXGATE_NO_NAMESPACES", "yes")]).unwrap();
        assert!(!e.fork);
        assert!(e.no_namespaces);
        let e = env(&[("FIXGATE_FORK", ""), ("FIXGATE_NO_NAMESPACES", "")]).unwrap();
        assert!(e.fork);
        assert!(!e.no_namespaces);
        let err = env(&[("FIXGATE_FORK", "sometimes")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("FIXGATE_FORK=sometimes"), "{err}");
        assert!(err.contains("set it to 1 or 0"), "{err}");
    }

    #[test]
    fn paths_and_defaults() {
        let e = env(&[
            ("PATH", "/a/bin:/b/bin"),
            ("HOME", ""),
            ("TMPDIR", "/scratch"),
            ("NO_COLOR", ""),
            ("FIXGATE_CACHE_DIR", "/c"),
        ])
        .unwrap();
        assert_eq!(
            e.search_path,
            vec![PathBuf::from("/a/bin"), PathBuf::from("/b/bin")]
        );
        assert_eq!(e.home, None);
        assert_eq!(e.temp_dir, PathBuf::from("/scratch"));
        assert!(e.no_color);
        assert_eq!(e.cache_dir, Some(PathBuf::from("/c")));
        assert_eq!(env(&[]).unwrap().temp_dir, PathBuf::from("/tmp"));
    }

    #[test]
    fn unknown_fixgate_variables_are_warned_about() {
        let e = env(&[("FIXGATE_FROK", "0"), ("FIXGATE_CACHE_DIR", "/x")]).unwrap();
        assert_eq!(e.warnings.len(), 1);
        assert!(e.warnings[0].starts_with("FIXGATE_FROK is not a variable"));
    }
}
