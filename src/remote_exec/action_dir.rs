//! An action's folder on the worker: its input root written beneath an open directory (every
//! name one normal component, no link followed, the names and bytes bounded), and its declared
//! outputs, stdout and stderr read back into an `ActionResult` and its blobs, bounded too: a run
//! (or a client) cannot make the worker hold a million names, recurse without end or upload a
//! disk.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bazel_remote_apis::build::bazel::remote::execution::v2 as reapi;
use fixgate_cache::{DigestFunction, RemoteDigest};
use prost::Message;

use crate::beneath::dir::{component, Dir, Kind};

/// The most bytes one action's outputs may hold: a run cannot make the worker upload a disk.
const MAX_OUTPUT_BYTES: u64 = 1 << 30;
/// The most files, folders and links one action's inputs or outputs may name, and how deep
/// they may nest: a run (or a client) cannot make the worker hold a million names in memory or
/// recurse without end.
const MAX_ENTRIES: u32 = 1_000_000;
const MAX_DEPTH: u32 = 128;
/// Why an action failed before or around its command: the status reported for the lease.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: tonic::Code,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: tonic::Code, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

pub(crate) fn internal(e: impl std::fmt::Display) -> Failure {
    Failure::new(tonic::Code::Internal, e.to_string())
}

/// Blobs by digest, in order (a missing one is FAILED_PRECONDITION, as REAPI asks).
pub(crate) type Blobs<'a> =
    dyn Fn(&[RemoteDigest]) -> std::result::Result<Vec<Arc<[u8]>>, Failure> + 'a;

/// Writes the input root below `root`, every directory's names checked.
pub(crate) fn materialize(
    root: &Dir,
    digest: RemoteDigest,
    blobs: &Blobs,
) -> std::result::Result<(), Failure> {
    let bad = |e: String| Failure::new(tonic::Code::InvalidArgument, e);
    // Breadth first, one batch of blobs per level.
    let mut level: Vec<(Dir, RemoteDigest)> = vec![(root.try_clone().map_err(internal)?, digest)];
    let mut total = 0u64;
    let mut entries = 0u64;
    let mut depth = 0u32;
    while !level.is_empty() {
        depth += 1;
        if depth > MAX_DEPTH {
            return Err(bad(format!(
                "the input root nests deeper than {MAX_DEPTH} folders"
            )));
        }
        let digests: Vec<RemoteDigest> = level.iter().map(|(_, d)| *d).collect();
        let directories = blobs(&digests)?;
        let mut next = Vec::new();
        let mut files: Vec<(usize, String, RemoteDigest, bool)> = Vec::new();
        let dirs: Vec<Dir> = level.into_iter().map(|(d, _)| d).collect();
        for (i, bytes) in directories.iter().enumerate() {
            let directory = reapi::Directory::decode(&bytes[..])
                .map_err(|e| bad(format!("a Directory does not decode: {e}")))?;
            // Counted before anything is made: one Directory named twice is two folders.
            entries += (directory.files.len()
                + directory.symlinks.len()
                + directory.directories.len()) as u64;
            if entries > u64::from(MAX_ENTRIES) {
                return Err(bad(format!(
                    "the input root names more than {MAX_ENTRIES} entries"
                )));
            }
            for f in &directory.files {
                name(&f.name)?;
                let d = f
                    .digest
                    .as_ref()
                    .ok_or_else(|| bad(format!("{} has no digest", f.name)))
                    .and_then(|d| RemoteDigest::from_proto(d).map_err(|e| bad(e.to_string())))?;
                total += d.size;
                files.push((i, f.name.clone(), d, f.is_executable));
            }
            for l in &directory.symlinks {
                name(&l.name)?;
                dirs[i]
                    .symlink(OsStr::new(&l.name), l.target.as_bytes())
                    .map_err(|e| bad(format!("the link {}: {e}", l.name)))?;
            }
            for d in &directory.directories {
                name(&d.name)?;
                let digest = d
                    .digest
                    .as_ref()
                    .ok_or_else(|| bad(format!("{} has no digest", d.name)))
                    .and_then(|d| RemoteDigest::from_proto(d).map_err(|e| bad(e.to_string())))?;
                let child = dirs[i]
                    .create_dir(OsStr::new(&d.name))
                    .map_err(|e| bad(format!("the directory {}: {e}", d.name)))?;
                next.push((child, digest));
            }
        }
        if total > 16 * MAX_OUTPUT_BYTES {
            return Err(bad(format!("the input root holds {total} bytes, too many")));
        }
        let contents = blobs(&files.iter().map(|f| f.2).collect::<Vec<_>>())?;
        for ((i, file, _, executable), bytes) in files.iter().zip(contents) {
            dirs[*i]
                .write_file(OsStr::new(file), &bytes, *executable)
                .map_err(|e| bad(format!("the file {file}: {e}")))?;
        }
        level = next;
    }
    Ok(())
}

/// The declared outputs (below the command's working directory in `root`), and stdout and
/// stderr (in `dir`): the result without its exit code, and the blobs it names.
pub(crate) fn outputs(
    root: &Dir,
    command: &reapi::Command,
    dir: &Path,
    f: DigestFunction,
) -> std::result::Result<(reapi::ActionResult, HashMap<RemoteDigest, Vec<u8>>), Failure> {
    let mut blobs: HashMap<RemoteDigest, Vec<u8>> = HashMap::new();
    let mut result = reapi::ActionResult::default();
    let mut budget = Allowance::new();
    let mut wd = root.try_clone().map_err(internal)?;
    for part in command
        .working_directory
        .split('/')
        .filter(|p| !p.is_empty())
    {
        name(part)?;
        wd = wd.open_dir(OsStr::new(part)).map_err(internal)?;
    }
    #[expect(deprecated, reason = "clients before REAPI 2.1 name outputs this way")]
    let declared: Vec<&String> = if command.output_paths.is_empty() {
        command
            .output_files
            .iter()
            .chain(&command.output_directories)
            .collect()
    } else {
        command.output_paths.iter().collect()
    };
    for path in declared {
        let parts: Vec<&str> = path.split('/').collect();
        let (leaf, parents) = parts.split_last().expect("split gives a part");
        let mut at = wd.try_clone().map_err(internal)?;
        let mut reachable = true;
        for p in parents {
            name(p)?;
            match at.open_dir(OsStr::new(p)) {
                Ok(d) => at = d,
                Err(_) => {
                    reachable = false;
                    break;
                }
            }
        }
        name(leaf)?;
        if !reachable {
            continue;
        }
        match at.kind(OsStr::new(leaf)).map_err(internal)? {
            Some(Kind::File { executable }) => {
                budget.entry(0)?;
                let bytes = read_bounded(&at, leaf, &mut budget)?;
                let d = f.digest(&bytes);
                blobs.insert(d, bytes);
                result.output_files.push(reapi::OutputFile {
                    path: path.clone(),
                    digest: Some(d.to_proto()),
                    is_executable: executable,
                    ..Default::default()
                });
            }
            Some(Kind::Dir) => {
                let sub = at.open_dir(OsStr::new(leaf)).map_err(internal)?;
                let mut children = Vec::new();
                budget.entry(0)?;
                let top = tree_of(f, &sub, &mut blobs, &mut children, &mut budget, 1)?;
                let tree = reapi::Tree {
                    root: Some(top),
                    children,
                }
                .encode_to_vec();
                let d = f.digest(&tree);
                blobs.insert(d, tree);
                result.output_directories.push(reapi::OutputDirectory {
                    path: path.clone(),
                    tree_digest: Some(d.to_proto()),
                    ..Default::default()
                });
            }
            // A link or nothing: REAPI leaves out what is not a file or a directory.
            _ => {}
        }
    }
    for (which, slot) in [
        ("stdout", &mut result.stdout_digest),
        ("stderr", &mut result.stderr_digest),
    ] {
        let mut bytes = Vec::new();
        std::fs::File::open(dir.join(which))
            .and_then(|f| f.take(1 << 20).read_to_end(&mut bytes))
            .map_err(internal)?;
        let d = f.digest(&bytes);
        blobs.insert(d, bytes);
        *slot = Some(d.to_proto());
    }
    Ok((result, blobs))
}

/// A name the action gives, which must be one normal component.
pub(crate) fn name(n: &str) -> std::result::Result<(), Failure> {
    component(n.as_bytes())
        .map(|_| ())
        .map_err(|e| Failure::new(tonic::Code::InvalidArgument, format!("the input names {e}")))
}

/// `rel` (from the command) below `base`, each component checked.
pub(crate) fn relative(base: &Path, rel: &str) -> std::result::Result<PathBuf, Failure> {
    let mut out = base.to_path_buf();
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        name(part)?;
        out.push(part);
    }
    Ok(out)
}

/// What an action's outputs may still take.
struct Allowance {
    bytes: u64,
    entries: u32,
}

impl Allowance {
    fn new() -> Allowance {
        Allowance {
            bytes: MAX_OUTPUT_BYTES,
            entries: MAX_ENTRIES,
        }
    }

    /// One more entry, `depth` folders below an output folder.
    fn entry(&mut self, depth: u32) -> std::result::Result<(), Failure> {
        if self.entries == 0 || depth > MAX_DEPTH {
            return Err(Failure::new(
                tonic::Code::ResourceExhausted,
                format!(
                    "the action's outputs name more than {MAX_ENTRIES} entries or nest deeper \
                     than {MAX_DEPTH} folders"
                ),
            ));
        }
        self.entries -= 1;
        Ok(())
    }
}

fn read_bounded(
    dir: &Dir,
    leaf: &str,
    budget: &mut Allowance,
) -> std::result::Result<Vec<u8>, Failure> {
    let file = dir.open_file(OsStr::new(leaf)).map_err(internal)?;
    let mut bytes = Vec::new();
    file.take(budget.bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(internal)?;
    if bytes.len() as u64 > budget.bytes {
        return Err(Failure::new(
            tonic::Code::ResourceExhausted,
            format!("the action's outputs exceed {MAX_OUTPUT_BYTES} bytes"),
        ));
    }
    budget.bytes -= bytes.len() as u64;
    Ok(bytes)
}

/// The `Directory` of `dir` (its subdirectories' go to `children`), blobs into `blobs`.
fn tree_of(
    f: DigestFunction,
    dir: &Dir,
    blobs: &mut HashMap<RemoteDigest, Vec<u8>>,
    children: &mut Vec<reapi::Directory>,
    budget: &mut Allowance,
    depth: u32,
) -> std::result::Result<reapi::Directory, Failure> {
    let mut out = reapi::Directory::default();
    for n in dir.names().map_err(internal)? {
        let Some(text) = n.to_str() else { continue };
        budget.entry(depth)?;
        match dir.kind(&n).map_err(internal)? {
            Some(Kind::File { executable }) => {
                let bytes = read_bounded(dir, text, budget)?;
                let d = f.digest(&bytes);
                blobs.insert(d, bytes);
                out.files.push(reapi::FileNode {
                    name: text.to_owned(),
                    digest: Some(d.to_proto()),
                    is_executable: executable,
                    ..Default::default()
                });
            }
            Some(Kind::Dir) => {
                let sub = dir.open_dir(&n).map_err(internal)?;
                let child = tree_of(f, &sub, blobs, children, budget, depth + 1)?;
                let d = f.digest(&child.encode_to_vec());
                children.push(child);
                out.directories.push(reapi::DirectoryNode {
                    name: text.to_owned(),
                    digest: Some(d.to_proto()),
                });
            }
            Some(Kind::Link) => {
                let target = dir.read_link(&n).map_err(internal)?;
                out.symlinks.push(reapi::SymlinkNode {
                    name: text.to_owned(),
                    target: String::from_utf8_lossy(&target).into_owned(),
                    ..Default::default()
                });
            }
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const F: DigestFunction = DigestFunction::Sha256;

    /// A CAS in memory.
    #[derive(Default)]
    struct Cas(HashMap<RemoteDigest, Arc<[u8]>>);

    impl Cas {
        fn put(&mut self, bytes: &[u8]) -> RemoteDigest {
            let d = F.digest(bytes);
            self.0.insert(d, bytes.into());
            d
        }

        fn file(&mut self, name: &str, bytes: &[u8], executable: bool) -> reapi::FileNode {
            reapi::FileNode {
                name: name.into(),
                digest: Some(self.put(bytes).to_proto()),
                is_executable: executable,
                ..Default::default()
            }
        }

        fn dir(&mut self, d: reapi::Directory) -> RemoteDigest {
            self.put(&d.encode_to_vec())
        }

        fn get(&self, digests: &[RemoteDigest]) -> std::result::Result<Vec<Arc<[u8]>>, Failure> {
            digests
                .iter()
                .map(|d| {
                    self.0.get(d).cloned().ok_or_else(|| {
                        Failure::new(tonic::Code::FailedPrecondition, "the CAS lacks it")
                    })
                })
                .collect()
        }
    }

    fn node(name: &str, digest: RemoteDigest) -> reapi::DirectoryNode {
        reapi::DirectoryNode {
            name: name.into(),
            digest: Some(digest.to_proto()),
        }
    }

    /// Materializes `root` into a new folder; the folder, or the failure's code and message.
    fn materialized(
        cas: &Cas,
        root: RemoteDigest,
    ) -> (
        tempfile::TempDir,
        std::result::Result<(), (tonic::Code, String)>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let at = Dir::open(dir.path()).unwrap();
        let done = materialize(&at, root, &|d| cas.get(d)).map_err(|f| (f.code, f.message));
        (dir, done)
    }

    #[test]
    fn an_input_root_is_written_with_its_files_modes_links_and_folders() {
        let mut cas = Cas::default();
        let b = cas.file("b.txt", b"bee", false);
        let sub = cas.dir(reapi::Directory {
            files: vec![b],
            ..Default::default()
        });
        let files = vec![
            cas.file("a.txt", b"ay", false),
            cas.file("run.sh", b"#!/bin/sh\n", true),
        ];
        let root = cas.dir(reapi::Directory {
            files,
            directories: vec![node("sub", sub)],
            symlinks: vec![reapi::SymlinkNode {
                name: "link".into(),
                target: "a.txt".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let (dir, done) = materialized(&cas, root);
        done.unwrap();
        let p = dir.path();
        assert_eq!(std::fs::read(p.join("a.txt")).unwrap(), b"ay");
        assert_eq!(std::fs::read(p.join("sub/b.txt")).unwrap(), b"bee");
        let mode = |f: &str| std::fs::metadata(p.join(f)).unwrap().permissions().mode();
        assert_ne!(mode("run.sh") & 0o111, 0, "executable");
        assert_eq!(mode("a.txt") & 0o111, 0);
        assert_eq!(
            std::fs::read_link(p.join("link")).unwrap(),
            Path::new("a.txt")
        );
    }

    #[test]
    fn an_input_root_naming_a_path_beyond_its_folder_is_refused() {
        for bad in ["..", ".", "a/b", "", "x\0y"] {
            let mut cas = Cas::default();
            let file = cas.file(bad, b"x", false);
            let root = cas.dir(reapi::Directory {
                files: vec![file],
                ..Default::default()
            });
            let (dir, done) = materialized(&cas, root);
            let (code, message) = done.unwrap_err();
            assert_eq!(code, tonic::Code::InvalidArgument, "{bad:?}: {message}");
            assert!(message.starts_with("the input names"), "{message}");
            assert!(!dir.path().join("..").join("x").exists());
        }
        // Nor through a folder's name.
        let mut cas = Cas::default();
        let empty = cas.dir(reapi::Directory::default());
        let root = cas.dir(reapi::Directory {
            directories: vec![node("../escaped", empty)],
            ..Default::default()
        });
        let (_, done) = materialized(&cas, root);
        assert_eq!(done.unwrap_err().0, tonic::Code::InvalidArgument);
    }

    #[test]
    fn an_input_root_too_deep_or_with_a_missing_blob_is_refused() {
        let mut cas = Cas::default();
        let mut digest = cas.dir(reapi::Directory::default());
        for _ in 0..MAX_DEPTH + 1 {
            digest = cas.dir(reapi::Directory {
                directories: vec![node("d", digest)],
                ..Default::default()
            });
        }
        let (_, done) = materialized(&cas, digest);
        let (code, message) = done.unwrap_err();
        assert_eq!(code, tonic::Code::InvalidArgument);
        assert!(message.contains("nests deeper than 128"), "{message}");
        // A file whose bytes the CAS lacks: FAILED_PRECONDITION, so the client uploads again.
        let mut cas = Cas::default();
        let lost = reapi::FileNode {
            name: "lost".into(),
            digest: Some(F.digest(b"never uploaded").to_proto()),
            ..Default::default()
        };
        let root = cas.dir(reapi::Directory {
            files: vec![lost],
            ..Default::default()
        });
        let (_, done) = materialized(&cas, root);
        assert_eq!(done.unwrap_err().0, tonic::Code::FailedPrecondition);
    }

    #[test]
    fn the_declared_outputs_come_back_as_files_and_trees_with_their_blobs() {
        let action = tempfile::tempdir().unwrap();
        let root = action.path().join("root");
        std::fs::create_dir_all(root.join("work/out/nested")).unwrap();
        std::fs::write(root.join("work/out/run.json"), "{}").unwrap();
        std::fs::write(root.join("work/out/nested/events.jsonl"), "e").unwrap();
        std::os::unix::fs::symlink("run.json", root.join("work/out/link")).unwrap();
        std::fs::write(root.join("work/summary.txt"), "s").unwrap();
        std::fs::write(action.path().join("stdout"), "said").unwrap();
        std::fs::write(action.path().join("stderr"), "").unwrap();
        let command = reapi::Command {
            working_directory: "work".into(),
            output_paths: vec!["out".into(), "summary.txt".into(), "gone/missing".into()],
            ..Default::default()
        };
        let at = Dir::open(&root).unwrap();
        let (result, blobs) = outputs(&at, &command, action.path(), F).unwrap();
        assert_eq!(result.output_files.len(), 1);
        assert_eq!(result.output_files[0].path, "summary.txt");
        assert_eq!(
            result.output_directories.len(),
            1,
            "the missing one is left out"
        );
        let blob = |d: &Option<reapi::Digest>| {
            blobs[&RemoteDigest::from_proto(d.as_ref().unwrap()).unwrap()].clone()
        };
        assert_eq!(blob(&result.stdout_digest), b"said");
        let tree =
            reapi::Tree::decode(&blob(&result.output_directories[0].tree_digest)[..]).unwrap();
        let top = tree.root.unwrap();
        let names: Vec<&str> = top.files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["run.json"]);
        assert_eq!(top.symlinks[0].target, "run.json");
        assert_eq!(top.directories[0].name, "nested");
        assert_eq!(tree.children[0].files[0].name, "events.jsonl");
        assert_eq!(blob(&tree.children[0].files[0].digest), b"e");
        // An output path that climbs out of the working directory is refused.
        let climbing = reapi::Command {
            output_paths: vec!["../stdout".into()],
            ..command
        };
        let err = outputs(&at, &climbing, action.path(), F).unwrap_err();
        assert_eq!(err.code, tonic::Code::InvalidArgument);
    }

    #[test]
    fn outputs_past_their_bound_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), vec![0u8; 64]).unwrap();
        let at = Dir::open(dir.path()).unwrap();
        let mut budget = Allowance {
            bytes: 63,
            entries: 10,
        };
        let err = read_bounded(&at, "f", &mut budget).unwrap_err();
        assert_eq!(err.code, tonic::Code::ResourceExhausted);
        let mut budget = Allowance {
            bytes: 64,
            entries: 1,
        };
        assert_eq!(read_bounded(&at, "f", &mut budget).unwrap().len(), 64);
        assert_eq!(budget.bytes, 0);
        budget.entry(0).unwrap();
        assert_eq!(
            budget.entry(0).unwrap_err().code,
            tonic::Code::ResourceExhausted
        );
        let mut deep = Allowance::new();
        assert!(deep.entry(MAX_DEPTH).is_ok());
        assert!(deep.entry(MAX_DEPTH + 1).is_err());
    }

    #[test]
    fn a_working_directory_is_each_of_its_names_below_the_root() {
        let base = Path::new("/w/root");
        assert_eq!(relative(base, "a/b/").unwrap(), base.join("a/b"));
        assert_eq!(relative(base, "").unwrap(), base);
        assert!(relative(base, "a/../../x").is_err());
    }
}
