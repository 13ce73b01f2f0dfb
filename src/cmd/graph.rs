//! `fixgate graph` and `fixgate explain`: the last audit's build graph, and why each node that
//! executed did.

use std::fmt::Write;

use crate::cli::GraphArgs;
use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::exit;
use crate::report::Format;
use crate::report::GraphSummary;

fn load(ctx: &Ctx) -> Result<(GraphSummary, String, serde_json::Value)> {
    let dir = ctx.last_audit_dir();
    let json = std::fs::read_to_string(dir.join("graph.json")).map_err(|_| {
        Error::Usage(format!(
            "no audit of {} is recorded in {}; run `fixgate audit --base REV` first",
            ctx.repo.root.display(),
            ctx.cache_dir.display()
        ))
    })?;
    let value: serde_json::Value = serde_json::from_str(&json).map_err(|e| {
        Error::Usage(format!(
            "the recorded graph is unreadable ({e}); run the audit again"
        ))
    })?;
    let summary: GraphSummary = serde_json::from_value(value.clone()).map_err(|e| {
        Error::Usage(format!(
            "the recorded graph is unreadable ({e}); run the audit again"
        ))
    })?;
    let dot = std::fs::read_to_string(dir.join("graph.dot")).unwrap_or_default();
    Ok((summary, dot, value))
}

pub(crate) fn graph(ctx: &Ctx, args: &GraphArgs) -> Result<i32> {
    let (g, dot, value) = load(ctx)?;
    if args.dot {
        ctx.emit(&dot)?;
        return Ok(exit::PASS);
    }
    if ctx.format == Format::Json {
        ctx.emit(&crate::context::to_json(&value))?;
        return Ok(exit::PASS);
    }
    let mut out = format!(
        "{} nodes: {} executed, {} cached\n",
        g.nodes, g.executed, g.cached
    );
    for n in &g.all_nodes {
        let _ = writeln!(out, "  {:<40} {:<12} {}", n.label, n.kind, n.status);
    }
    ctx.emit(&out)?;
    Ok(exit::PASS)
}

pub(crate) fn explain(ctx: &Ctx) -> Result<i32> {
    let (g, _, value) = load(ctx)?;
    if ctx.format == Format::Json {
        ctx.emit(&crate::context::to_json(&value["executed_nodes"]))?;
        return Ok(exit::PASS);
    }
    let mut out = String::new();
    if g.executed_nodes.is_empty() {
        out.push_str("every node of the last audit came from the cache\n");
    }
    let remote: Vec<&str> = g
        .all_nodes
        .iter()
        .filter(|n| n.status == "cached (remote)")
        .map(|n| n.label.as_str())
        .collect();
    if !remote.is_empty() {
        let _ = writeln!(
            out,
            "{} node(s) came from the remote cache: {}",
            remote.len(),
            remote.join(", ")
        );
    }
    for n in &g.executed_nodes {
        let _ = writeln!(
            out,
            "{} ({}): {}\n  key {}",
            n.label, n.kind, n.reason, n.key
        );
    }
    ctx.emit(&out)?;
    Ok(exit::PASS)
}
