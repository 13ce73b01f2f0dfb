//! The documentation's links resolve: every relative link of README.md and docs/ names a file
//! that exists, every `#anchor` a heading of its page, and the guide's index lists every page.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file under docs/.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut out);
    out
}

/// The text outside fenced code blocks and inline code, where links are links.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// Every `[text](target)` link's target.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut out = Vec::new();
    let mut rest = prose.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].trim().to_string());
            rest = &rest[end..];
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation dropped but `-` and `_`, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") || link.is_empty() {
                continue;
            }
            let (path, anchor) = match link.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (link.as_str(), None),
            };
            let target = match path.is_empty() {
                true => page.clone(),
                false => page.parent().unwrap().join(path),
            };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", page.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                let body = std::fs::read_to_string(&target).unwrap_or_default();
                if !anchors(&body).contains(anchor) {
                    broken.push(format!("{}: {link} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_guide_index_lists_every_page() {
    let docs = root().join("docs");
    let index = std::fs::read_to_string(docs.join("README.md")).unwrap();
    let listed: BTreeSet<PathBuf> = links(&index)
        .iter()
        .map(|l| docs.join(l.split('#').next().unwrap()))
        .collect();
    let missing: Vec<String> = pages()
        .into_iter()
        .filter(|p| p.starts_with(&docs) && p.file_name().is_some_and(|n| n != "README.md"))
        .filter(|p| p.parent() == Some(docs.as_path()) && !listed.contains(p))
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "pages docs/README.md does not list:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_readme_is_a_page() {
    let lines = std::fs::read_to_string(root().join("README.md"))
        .unwrap()
        .lines()
        .count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines; move reference material to docs/"
    );
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug(" Exit codes"), "exit-codes");
    assert_eq!(
        slug(" `fixgate run [--seed N | --order FILE] [--rev REV]`"),
        "fixgate-run---seed-n----order-file---rev-rev"
    );
    assert_eq!(
        slug(" The JSON report, schema 1"),
        "the-json-report-schema-1"
    );
}

/// The README's findings table names every finding kind the report can hold (the schema's list).
#[test]
fn the_readme_lists_every_finding_kind() {
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("docs/json-report.schema.json")).unwrap(),
    )
    .unwrap();
    let kinds = schema["$defs"]["findingKind"]["enum"]
        .as_array()
        .expect("the schema lists the finding kinds");
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let table: String = (readme.lines())
        .skip_while(|l| !l.starts_with("| finding | what it means |"))
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.split('|').nth(1).unwrap_or_default().to_string())
        .collect();
    let missing: Vec<&str> = (kinds.iter().filter_map(|k| k.as_str()))
        .filter(|k| !table.contains(&format!("`{k}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "README's findings table misses {missing:?}"
    );
}
