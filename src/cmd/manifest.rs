//! `fixgate manifest`: print the fixture manifest of the working tree or a revision.

use std::fmt::Write;

use crate::cli::ManifestArgs;
use crate::context::Ctx;
use crate::error::Result;
use crate::exit;
use crate::manifest::Manifest;

pub(crate) fn run(ctx: &Ctx, args: &ManifestArgs) -> Result<i32> {
    let snapshot = ctx.repo.snapshot(args.rev.as_deref())?;
    let config = ctx.config(&snapshot)?;
    let manifest = ctx.manifest(&snapshot, &config)?;
    match ctx.format {
        crate::report::Format::Json => ctx.emit(&manifest.to_json())?,
        _ => ctx.emit_report(&manifest, || render(&manifest))?,
    }
    // The process exits next, and a large tree's snapshot and manifest are tens of thousands of
    // small allocations: freeing them one by one was a tenth of a warm manifest.
    std::mem::forget((snapshot, manifest));
    Ok(exit::PASS)
}

pub(crate) fn render(m: &Manifest) -> String {
    let mut out = String::new();
    if m.groups.is_empty() {
        out.push_str(
            "no fixture groups: declare them in fixtures.manifest (`name: glob` per line) or \
             [tool.fixgate.groups] in pyproject.toml, or keep fixtures under tests/fixtures/ \
             or tests/data/\n",
        );
        return out;
    }
    let name_w = m
        .groups
        .iter()
        .map(|g| g.name.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let _ = writeln!(
        out,
        "{:<name_w$}  {:>6}  {:>12}  {:<12}  globs",
        "group", "files", "bytes", "digest"
    );
    for g in &m.groups {
        let _ = writeln!(
            out,
            "{:<name_w$}  {:>6}  {:>12}  {:<12}  {}",
            g.name,
            g.files,
            g.bytes,
            &g.digest[..12],
            g.globs.join(" ")
        );
    }
    out.push('\n');
    for f in &m.files {
        let _ = writeln!(
            out,
            "{}  {:<name_w$}  {:>12}  {}{}",
            &f.blake3[..12],
            f.group,
            f.size,
            f.path,
            if f.kind == crate::manifest::FileKind::Link {
                " (symlink)"
            } else {
                ""
            }
        );
    }
    out
}
