//! A unified diff of one file, in the form `git apply` and `patch` read.

use std::time::Duration;

use similar::TextDiff;

/// How long the diff may search for the smallest edit before it settles for a larger one (still
/// a correct diff): the files `init` edits are small, but a generated one may not be.
const SEARCH_LIMIT: Duration = Duration::from_secs(2);

/// A unified diff of one file (`old` `None`: a new file), three lines of context.
pub(super) fn unified_diff(path: &str, old: Option<&str>, new: &str) -> String {
    let from = match old {
        Some(_) => format!("a/{path}"),
        None => "/dev/null".to_owned(),
    };
    TextDiff::configure()
        .timeout(SEARCH_LIMIT)
        .diff_lines(old.unwrap_or_default(), new)
        .unified_diff()
        .context_radius(3)
        .header(&from, &format!("b/{path}"))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_insertion_has_three_lines_of_context() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let new = "a\nb\nc\nd\nX\ne\nf\ng\nh\n";
        assert_eq!(
            unified_diff("t.py", Some(old), new),
            "--- a/t.py\n+++ b/t.py\n@@ -2,6 +2,7 @@\n b\n c\n d\n+X\n e\n f\n g\n"
        );
    }

    #[test]
    fn a_new_file_comes_from_dev_null_and_a_one_line_range_has_no_length() {
        assert_eq!(
            unified_diff("n.txt", None, "x\n"),
            "--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1 @@\n+x\n"
        );
        assert_eq!(
            unified_diff("n.txt", None, "x\ny\n"),
            "--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1,2 @@\n+x\n+y\n"
        );
    }

    #[test]
    fn changes_far_apart_are_two_hunks_and_close_ones_one() {
        let with = |changed: &[(usize, &str)]| -> String {
            (1..=20)
                .map(|n| match changed.iter().find(|(at, _)| *at == n) {
                    Some((_, line)) => format!("{line}\n"),
                    None => format!("{n}\n"),
                })
                .collect()
        };
        let old = with(&[]);
        let far = with(&[(2, "two"), (19, "nineteen")]);
        assert_eq!(
            unified_diff("f", Some(&old), &far),
            "--- a/f\n+++ b/f\n@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n\
             @@ -16,5 +16,5 @@\n 16\n 17\n 18\n-19\n+nineteen\n 20\n"
        );
        let close = with(&[(2, "two"), (8, "eight")]);
        assert_eq!(
            unified_diff("f", Some(&old), &close)
                .matches("@@ -")
                .count(),
            1,
            "six lines apart: the contexts touch"
        );
    }

    #[test]
    fn a_file_without_a_final_newline_says_so() {
        assert_eq!(
            unified_diff("p.ini", Some("[pytest]"), "[pytest]\nmarkers =\n"),
            "--- a/p.ini\n+++ b/p.ini\n@@ -1 +1,2 @@\n-[pytest]\n\\ No newline at end of file\n\
             +[pytest]\n+markers =\n"
        );
    }

    #[test]
    fn a_large_file_with_a_change_in_the_middle_is_one_small_hunk() {
        let old: String = (0..50_000).map(|n| format!("line {n}\n")).collect();
        let new = old.replace("line 25000\n", "line 25000\ninserted\n");
        let d = unified_diff("big.txt", Some(&old), &new);
        assert_eq!(d.lines().filter(|l| l.starts_with('+')).count(), 2, "{d}");
        assert!(d.contains("@@ -24999,6 +24999,7 @@\n"), "{d}");
    }
}
