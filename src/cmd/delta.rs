//! `fixgate delta BASE [HEAD]`: the fixture files that changed between two snapshots.

use std::fmt::Write;

use serde::Serialize;

use crate::audit::outcome::Revision;
use crate::cli::DeltaArgs;
use crate::context::Ctx;
use crate::delta::{self, Delta};
use crate::engine::sides::revision;
use crate::error::Result;
use crate::exit;

#[derive(Serialize)]
struct Report<'a> {
    schema: u32,
    base: Revision,
    head: Revision,
    #[serde(flatten)]
    delta: &'a Delta,
}

pub(crate) fn run(ctx: &Ctx, args: &DeltaArgs) -> Result<i32> {
    let base = ctx.repo.snapshot(Some(&args.base))?;
    let head = ctx.repo.snapshot(args.head.as_deref())?;
    let config = ctx.pair_config(&base, &head)?;
    let d = delta::between(
        &ctx.manifest(&base, &config)?,
        &ctx.manifest(&head, &config)?,
    );
    let report = Report {
        schema: 1,
        base: revision(&base),
        head: revision(&head),
        delta: &d,
    };
    ctx.emit_report(&report, || render(&d))?;
    Ok(exit::PASS)
}

fn render(d: &Delta) -> String {
    if d.is_empty() {
        return "no fixture changes\n".into();
    }
    let mut out = format!(
        "{} fixture file{} changed: {} added, {} removed, {} modified\n",
        d.changed.len(),
        if d.changed.len() == 1 { "" } else { "s" },
        d.count(delta::Change::Added),
        d.count(delta::Change::Removed),
        d.count(delta::Change::Modified),
    );
    for c in &d.changed {
        let _ = writeln!(
            out,
            "  {:<8}  {}  [{}]{}",
            c.change.as_str(),
            c.path,
            c.group,
            c.renamed_from
                .as_ref()
                .map(|p| format!("  (renamed from {p})"))
                .unwrap_or_default()
        );
    }
    out.push_str("groups changed: ");
    out.push_str(
        &d.groups_changed
            .iter()
            .map(|g| g.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
    );
    out.push('\n');
    out
}
