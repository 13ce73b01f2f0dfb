//! A unified diff of one file, from a line edit script by longest common subsequence.

use std::fmt::Write as _;

/// A unified diff of one file (`old` `None`: a new file), three lines of context.
pub(super) fn unified_diff(path: &str, old: Option<&str>, new: &str) -> String {
    let a: Vec<&str> = old.map(|o| o.lines().collect()).unwrap_or_default();
    let b: Vec<&str> = new.lines().collect();
    let ops = line_ops(&a, &b);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "--- {}",
        if old.is_some() {
            format!("a/{path}")
        } else {
            "/dev/null".to_owned()
        }
    );
    let _ = writeln!(out, "+++ b/{path}");
    const CONTEXT: usize = 3;
    let changed: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| !matches!(op, Op::Same(..)))
        .map(|(i, _)| i)
        .collect();
    let mut i = 0;
    while i < changed.len() {
        let start = changed[i].saturating_sub(CONTEXT);
        let mut j = i;
        while j + 1 < changed.len() && changed[j + 1] <= changed[j] + 2 * CONTEXT + 1 {
            j += 1;
        }
        let end = (changed[j] + CONTEXT + 1).min(ops.len());
        let (mut a_start, mut b_start) = (0, 0);
        for op in &ops[..start] {
            match op {
                Op::Same(..) => {
                    a_start += 1;
                    b_start += 1;
                }
                Op::Del(_) => a_start += 1,
                Op::Add(_) => b_start += 1,
            }
        }
        let (mut a_len, mut b_len) = (0, 0);
        let mut body = String::new();
        for op in &ops[start..end] {
            match op {
                Op::Same(l) => {
                    a_len += 1;
                    b_len += 1;
                    let _ = writeln!(body, " {l}");
                }
                Op::Del(l) => {
                    a_len += 1;
                    let _ = writeln!(body, "-{l}");
                }
                Op::Add(l) => {
                    b_len += 1;
                    let _ = writeln!(body, "+{l}");
                }
            }
        }
        let from = |start: usize, len: usize| if len == 0 { start } else { start + 1 };
        let _ = writeln!(
            out,
            "@@ -{},{a_len} +{},{b_len} @@",
            from(a_start, a_len),
            from(b_start, b_len)
        );
        out.push_str(&body);
        i = j + 1;
    }
    out
}

enum Op<'a> {
    Same(&'a str),
    Del(&'a str),
    Add(&'a str),
}

/// A line edit script by longest common subsequence, after trimming the common ends; files
/// too large for the table show their middle as replaced, still a correct diff.
fn line_ops<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<Op<'a>> {
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..]
        .iter()
        .rev()
        .zip(b[pre..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (am, bm) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    let mut ops: Vec<Op> = a[..pre].iter().map(|l| Op::Same(l)).collect();
    if am.len().saturating_mul(bm.len()) > 16_000_000 {
        ops.extend(am.iter().map(|l| Op::Del(l)));
        ops.extend(bm.iter().map(|l| Op::Add(l)));
    } else {
        let (n, m) = (am.len(), bm.len());
        let mut t = vec![0u32; (n + 1) * (m + 1)];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                t[i * (m + 1) + j] = if am[i] == bm[j] {
                    t[(i + 1) * (m + 1) + j + 1] + 1
                } else {
                    t[(i + 1) * (m + 1) + j].max(t[i * (m + 1) + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && am[i] == bm[j] {
                ops.push(Op::Same(am[i]));
                i += 1;
                j += 1;
            } else if j < m && (i == n || t[i * (m + 1) + j + 1] >= t[(i + 1) * (m + 1) + j]) {
                ops.push(Op::Add(bm[j]));
                j += 1;
            } else {
                ops.push(Op::Del(am[i]));
                i += 1;
            }
        }
    }
    ops.extend(a[a.len() - suf..].iter().map(|l| Op::Same(l)));
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unified_diff_of_an_insertion() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let new = "a\nb\nc\nd\nX\ne\nf\ng\nh\n";
        let d = unified_diff("t.py", Some(old), new);
        assert_eq!(
            d,
            "--- a/t.py\n+++ b/t.py\n@@ -2,6 +2,7 @@\n b\n c\n d\n+X\n e\n f\n g\n"
        );
        let created = unified_diff("n.txt", None, "x\n");
        assert_eq!(created, "--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1,1 @@\n+x\n");
    }
}
