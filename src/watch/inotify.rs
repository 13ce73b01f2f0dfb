//! The file events of the watched directories: one non-recursive inotify watch per directory
//! (through the `notify` crate), so that exactly the directories [`WatchScope`] admits are watched,
//! and the kernel's limits turned into messages that say which sysctl to raise.

use std::collections::BTreeSet;
use std::path::Path;

use notify::{RecursiveMode, Watcher};

use crate::error::{Error, Result};
use crate::repo_path::RepoPath;
use crate::watch::scope::WatchScope;

/// What the event thread delivers.
pub(crate) type FsEvent = notify::Result<notify::Event>;

/// The inotify instance and the directories it watches.
pub(crate) struct FsWatch {
    watcher: notify::INotifyWatcher,
    /// Repo-relative directories with a watch.
    watched: BTreeSet<Vec<u8>>,
}

impl FsWatch {
    /// An inotify instance whose events go to `events` (called on notify's thread).
    pub(crate) fn new(events: impl FnMut(FsEvent) + Send + 'static) -> Result<FsWatch> {
        let watcher = notify::INotifyWatcher::new(events, notify::Config::default())
            .map_err(|e| limit_error(&e, None).unwrap_or_else(|| start_error(&e)))?;
        Ok(FsWatch {
            watcher,
            watched: BTreeSet::new(),
        })
    }

    /// Watches `dirs` (repo-relative) of `scope`. A directory gone in between is skipped; the
    /// watch limit is an error that says how to raise it.
    pub(crate) fn add(&mut self, scope: &WatchScope, dirs: Vec<Vec<u8>>) -> Result<()> {
        for dir in dirs {
            if self.watched.contains(&dir) {
                continue;
            }
            let full = scope
                .root()
                .join(RepoPath::from_bytes(dir.clone()).to_os_path());
            match self.watcher.watch(&full, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    self.watched.insert(dir);
                }
                Err(e) if matches!(e.kind, notify::ErrorKind::PathNotFound) => {}
                Err(e) => {
                    return Err(
                        limit_error(&e, Some((&full, self.watched.len()))).unwrap_or_else(|| {
                            Error::Infra(format!("failed to watch {}: {e}", full.display()))
                        }),
                    )
                }
            }
        }
        Ok(())
    }

    /// Drops the watches at and under `dir`, a directory that was removed, moved away or left
    /// the scope (the kernel drops a removed directory's watch by itself; the rest are ours).
    pub(crate) fn remove_under(&mut self, scope: &WatchScope, dir: &[u8]) {
        let mut prefix = dir.to_vec();
        prefix.push(b'/');
        let gone: Vec<Vec<u8>> = self
            .watched
            .iter()
            .filter(|d| d.as_slice() == dir || d.starts_with(&prefix))
            .cloned()
            .collect();
        for d in gone {
            let full = scope
                .root()
                .join(RepoPath::from_bytes(d.clone()).to_os_path());
            let _ = self.watcher.unwatch(&full);
            self.watched.remove(&d);
        }
    }

    /// The watched directories (repo-relative).
    pub(crate) fn watched_dirs(&self) -> Vec<Vec<u8>> {
        self.watched.iter().cloned().collect()
    }

    /// How many directories are watched.
    pub(crate) fn count(&self) -> usize {
        self.watched.len()
    }
}

/// The kernel's inotify limits as the user can fix them; `None` for other errors. `at` is the
/// directory that could not be watched and how many were watched before it.
fn limit_error(e: &notify::Error, at: Option<(&Path, usize)>) -> Option<Error> {
    let too_many_instances = match &e.kind {
        notify::ErrorKind::Io(io) => io.raw_os_error() == Some(libc::EMFILE),
        _ => false,
    };
    if matches!(e.kind, notify::ErrorKind::MaxFilesWatch) {
        let (dir, count) = at.map_or((String::new(), 0), |(d, c)| (d.display().to_string(), c));
        let limits = Limits {
            system: read_limit("/proc/sys/fs/inotify/max_user_watches"),
            namespace: read_limit("/proc/sys/user/max_inotify_watches"),
        };
        return Some(Error::Usage(limit_message(&dir, count, limits)));
    }
    if too_many_instances {
        return Some(Error::Usage(format!(
            "failed to start watching: the inotify instance limit is reached \
             (fs.inotify.max_user_instances = {}); stop other watchers or raise it with \
             `sudo sysctl fs.inotify.max_user_instances=1024`",
            read_limit("/proc/sys/fs/inotify/max_user_instances")
                .map_or("?".to_owned(), |n| n.to_string())
        )));
    }
    None
}

/// The watch limits that apply: the system's per user, and the user namespace's (a container
/// may set a lower one; the lower wins).
#[derive(Clone, Copy, Debug)]
struct Limits {
    system: Option<u64>,
    namespace: Option<u64>,
}

fn read_limit(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn limit_message(dir: &str, count: usize, limits: Limits) -> String {
    let system = limits.system.map_or("?".to_owned(), |n| n.to_string());
    // A value that raises the limit: the usual recommendation, or twice what it is.
    let raise = limits.system.map_or(524_288, |n| (2 * n).max(524_288));
    let namespace = match (limits.namespace, limits.system) {
        (Some(ns), Some(sys)) if ns < sys => format!(
            "; this user namespace allows {ns} (user.max_inotify_watches, set by whoever \
             started the container)"
        ),
        _ => String::new(),
    };
    let dirs = if count == 1 {
        "directory"
    } else {
        "directories"
    };
    format!(
        "failed to watch {dir}: the inotify watch limit is reached \
         (fs.inotify.max_user_watches = {system}, shared by every watcher of this user{namespace}; \
         fixgate watched {count} {dirs}); raise it with \
         `sudo sysctl fs.inotify.max_user_watches={raise}` (add the setting to /etc/sysctl.conf \
         to keep it), or add folders no test reads to .gitignore"
    )
}

fn start_error(e: &notify::Error) -> Error {
    Error::Infra(format!("failed to start watching files (inotify): {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watch_limit_names_the_sysctl_to_raise() {
        let e = notify::Error::new(notify::ErrorKind::MaxFilesWatch);
        let message = limit_error(&e, Some((Path::new("/repo/src"), 8191)))
            .expect("a limit error")
            .to_string();
        assert!(message.contains("/repo/src"), "{message}");
        assert!(message.contains("8191 directories"), "{message}");
        assert!(
            message.contains("sudo sysctl fs.inotify.max_user_watches="),
            "{message}"
        );
        let e = notify::Error::io(std::io::Error::from_raw_os_error(libc::EMFILE));
        let message = limit_error(&e, None).expect("a limit error").to_string();
        assert!(
            message.contains("fs.inotify.max_user_instances"),
            "{message}"
        );
        let e = notify::Error::generic("something else");
        assert!(limit_error(&e, None).is_none());
        let container = limit_message(
            "/repo",
            1,
            Limits {
                system: Some(8192),
                namespace: Some(100),
            },
        );
        assert!(container.contains("1 directory)"), "{container}");
        assert!(
            container.contains("user.max_inotify_watches") && container.contains("524288"),
            "{container}"
        );
    }
}
