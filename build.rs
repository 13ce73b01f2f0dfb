//! Build script: records the commit fixgate was built from, for `fixgate --version`.
//!
//! Outside a git checkout (a wheel's sdist, a Nix build from a store path) there is no commit to
//! read; `FIXGATE_COMMIT` may supply one (the flake passes its revision), else it is "unknown".
//!
//! The commit goes into a file under `OUT_DIR`, which the binary includes, and not into a
//! `cargo:rustc-env` variable: cargo sets those for `cargo run` too, so the program would find
//! a `FIXGATE_*` variable it does not read in its environment and warn about it.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

fn main() {
    println!("cargo:rerun-if-env-changed=FIXGATE_COMMIT");
    let from_env = std::env::var("FIXGATE_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty());
    let commit = from_env.or_else(|| {
        // Rebuild when HEAD moves: the file HEAD and the ref it points to.
        if let Some(p) = git(&["rev-parse", "--git-path", "HEAD"]) {
            println!("cargo:rerun-if-changed={p}");
        }
        if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
            // A packed ref has no file of its own, and a missing file would rerun this script
            // on every build; HEAD's own file is watched either way.
            if let Some(p) = git(&["rev-parse", "--git-path", &head_ref])
                .filter(|p| std::path::Path::new(p).exists())
            {
                println!("cargo:rerun-if-changed={p}");
            }
        }
        // No "-dirty" suffix: finding it means `git status`, which refreshes the index, and
        // watching the index would rebuild the binary on every build.
        git(&["rev-parse", "--short=12", "HEAD"])
    });
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let commit = commit.unwrap_or_else(|| "unknown".to_owned());
    // Written only when it changes, so that the binary is not rebuilt for nothing.
    let file = out.join("commit");
    if std::fs::read_to_string(&file).ok().as_deref() != Some(commit.as_str()) {
        std::fs::write(&file, commit).expect("OUT_DIR is writable");
    }
}
