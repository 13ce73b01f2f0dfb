//! Default fixture groups, derived from the file list when no file declares any.

use std::collections::BTreeSet;

use crate::config::groups::{check_name, NAME_RULE};
use crate::config::model::Group;
use crate::repo_path::RepoPath;

/// The roots scanned for default groups, with the name of the group of files directly inside.
/// `tests/data` comes second so that it is the one renamed when a directory name collides.
const DEFAULT_ROOTS: [(&str, &str); 2] = [("tests/fixtures", "fixtures"), ("tests/data", "data")];

/// Groups derived from the file list when no file declares any: one per first-level directory
/// under `tests/fixtures/` and `tests/data/` (glob `<root>/<dir>/**`), plus `fixtures` / `data`
/// for files directly inside each root (glob `<root>/*`). A directory of `tests/data` whose name
/// is already taken becomes `data-<name>`; a directory whose name is not a valid group name gets
/// no group and a warning.
pub(super) fn default_groups(paths: &[RepoPath], warnings: &mut Vec<String>) -> Vec<Group> {
    let mut groups = Vec::new();
    let mut taken = BTreeSet::new();
    for (root, root_group) in DEFAULT_ROOTS {
        let mut dirs: BTreeSet<&[u8]> = BTreeSet::new();
        let mut root_files = false;
        for path in paths {
            let Some(rest) = path
                .as_bytes()
                .strip_prefix(root.as_bytes())
                .and_then(|r| r.strip_prefix(b"/"))
            else {
                continue;
            };
            match rest.iter().position(|&b| b == b'/') {
                Some(slash) => {
                    dirs.insert(&rest[..slash]);
                }
                None if !rest.is_empty() => root_files = true,
                None => {}
            }
        }

        for dir in dirs {
            let name = match std::str::from_utf8(dir) {
                Ok(name) if check_name(name).is_ok() && name != "." && name != ".." => name,
                _ => {
                    let mut shown = root.as_bytes().to_vec();
                    shown.push(b'/');
                    shown.extend_from_slice(dir);
                    warnings.push(format!(
                        "no default fixture group for directory \"{}\": its name is not a valid \
                         group name ({NAME_RULE}); declare its group in fixtures.manifest",
                        RepoPath::from_bytes(shown)
                    ));
                    continue;
                }
            };
            let fallback = format!("{root_group}-{name}");
            groups.push(Group {
                name: claim(&mut taken, name, &fallback),
                // The name has no glob metacharacter (checked above), so it is literal here.
                globs: vec![format!("{root}/{name}/**")],
            });
        }
        if root_files {
            groups.push(Group {
                name: claim(&mut taken, root_group, &format!("{root_group}-root")),
                globs: vec![format!("{root}/*")],
            });
        }
    }
    groups
}

/// Takes `preferred` if it is free, else `fallback`, else `fallback-2`, `-3`, ...: default names
/// must be unique and must not depend on anything but the file list.
fn claim(taken: &mut BTreeSet<String>, preferred: &str, fallback: &str) -> String {
    let name = if !taken.contains(preferred) {
        preferred.to_owned()
    } else if !taken.contains(fallback) {
        fallback.to_owned()
    } else {
        (2..)
            .map(|n| format!("{fallback}-{n}"))
            .find(|n| !taken.contains(n))
            .unwrap_or_else(|| fallback.to_owned())
    };
    taken.insert(name.clone());
    name
}
