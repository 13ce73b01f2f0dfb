//! A small Python tokenizer: the logical lines of a source, each with its indentation and its
//! tokens (names, literals, operators). Whitespace, comments, line breaks inside brackets and
//! backslash continuations are dropped, so that two sources that differ only in those read the
//! same.

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Name,
    /// A number or a string (with its prefix and quotes; triple-quoted strings whole).
    Literal,
    Op,
    /// The end of a logical line, in [`flat`]'s stream only.
    End,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    pub(crate) kind: Kind,
    pub(crate) text: String,
}

/// One logical line: a statement's header or a simple statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Line {
    /// The column of its first token, tabs to the next multiple of 8 as Python counts them.
    pub(crate) indent: usize,
    pub(crate) tokens: Vec<Token>,
    /// The physical lines it spans, 0-based, `last` included.
    pub(crate) first: usize,
    pub(crate) last: usize,
}

impl Line {
    pub(crate) fn starts_with(&self, text: &str) -> bool {
        self.tokens.first().is_some_and(|t| t.text == text)
    }
}

/// The logical lines of `source`; lines holding only whitespace or comments are none.
pub(crate) fn lines(source: &str) -> Vec<Line> {
    let chars: Vec<char> = source.chars().collect();
    let mut out: Vec<Line> = Vec::new();
    let mut current: Option<Line> = None;
    let mut depth: usize = 0;
    let mut row = 0;
    let mut column = 0;
    let mut i = 0;
    let push = |current: &mut Option<Line>, kind, text: String, row: usize, column: usize| {
        let line = current.get_or_insert_with(|| Line {
            indent: column,
            tokens: Vec::new(),
            first: row,
            last: row,
        });
        line.last = row;
        line.tokens.push(Token { kind, text });
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\n' => {
                if depth == 0 {
                    out.extend(current.take());
                }
                row += 1;
                column = 0;
                i += 1;
            }
            '\\' if chars.get(i + 1) == Some(&'\n') => {
                row += 1;
                column = 0;
                i += 2;
            }
            '\t' => {
                column = (column / 8 + 1) * 8;
                i += 1;
            }
            c if c.is_whitespace() => {
                column += 1;
                i += 1;
            }
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '"' | '\'' => {
                let end = string_end(&chars, i);
                let text: String = chars[i..end].iter().collect();
                push(&mut current, Kind::Literal, text.clone(), row, column);
                advance(&text, &mut row, &mut column);
                i = end;
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let prefix = word.len() <= 3
                    && word
                        .chars()
                        .all(|p| matches!(p.to_ascii_lowercase(), 'r' | 'b' | 'u' | 'f'));
                if prefix && matches!(chars.get(i), Some('"' | '\'')) {
                    let end = string_end(&chars, i);
                    let text: String = chars[start..end].iter().collect();
                    push(&mut current, Kind::Literal, text.clone(), row, column);
                    advance(&text, &mut row, &mut column);
                    i = end;
                } else {
                    push(&mut current, Kind::Name, word, row, column);
                    column += i - start;
                }
            }
            c if c.is_ascii_digit()
                || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) =>
            {
                let start = i;
                while i < chars.len() {
                    let d = chars[i];
                    let exponent_sign = matches!(d, '+' | '-')
                        && matches!(chars[i - 1], 'e' | 'E')
                        && !chars[start..i].iter().any(|x| matches!(x, 'x' | 'X'));
                    if d.is_alphanumeric() || d == '.' || d == '_' || exponent_sign {
                        i += 1;
                    } else {
                        break;
                    }
                }
                let text: String = chars[start..i].iter().collect();
                push(&mut current, Kind::Literal, text, row, column);
                column += i - start;
            }
            _ => {
                match c {
                    '(' | '[' | '{' => depth += 1,
                    ')' | ']' | '}' => depth = depth.saturating_sub(1),
                    _ => {}
                }
                // Comparisons, `->`, `**` and the augmented assignments are one token, so that
                // `==` reads apart from `=` and `x += 1` is an assignment of x.
                let three: String = chars[i..chars.len().min(i + 3)].iter().collect();
                let two: String = chars[i..chars.len().min(i + 2)].iter().collect();
                let text = if matches!(three.as_str(), "**=" | "//=" | ">>=" | "<<=") {
                    three
                } else if matches!(
                    two.as_str(),
                    "==" | "!="
                        | "<="
                        | ">="
                        | "->"
                        | "**"
                        | "//"
                        | "+="
                        | "-="
                        | "*="
                        | "/="
                        | "%="
                        | "&="
                        | "|="
                        | "^="
                        | "@="
                        | ":="
                ) {
                    two
                } else {
                    c.to_string()
                };
                let n = text.chars().count();
                push(&mut current, Kind::Op, text, row, column);
                column += n;
                i += n;
            }
        }
    }
    out.extend(current);
    out
}

/// The tokens of `source` as one stream, with an [`Kind::End`] token between logical lines.
pub(crate) fn flat(source: &str) -> Vec<Token> {
    let mut out = Vec::new();
    for (n, line) in lines(source).into_iter().enumerate() {
        if n > 0 {
            out.push(Token {
                kind: Kind::End,
                text: String::new(),
            });
        }
        out.extend(line.tokens);
    }
    out
}

/// Moves the position past `text` (a literal that may span lines).
fn advance(text: &str, row: &mut usize, column: &mut usize) {
    match text.rfind('\n') {
        Some(p) => {
            *row += text.matches('\n').count();
            *column = text[p + 1..].chars().count();
        }
        None => *column += text.chars().count(),
    }
}

/// The index after the string literal whose quote is at `start` (single or triple quoted, with
/// backslash escapes); the end of the text when it is not closed.
fn string_end(chars: &[char], start: usize) -> usize {
    let q = chars[start];
    let triple = chars.get(start + 1) == Some(&q) && chars.get(start + 2) == Some(&q);
    let mut i = start + if triple { 3 } else { 1 };
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            c if c == q && !triple => return i + 1,
            c if c == q && chars.get(i + 1) == Some(&q) && chars.get(i + 2) == Some(&q) => {
                return i + 3;
            }
            '\n' if !triple => return i,
            _ => i += 1,
        }
    }
    chars.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(line: &Line) -> Vec<&str> {
        line.tokens.iter().map(|t| t.text.as_str()).collect()
    }

    #[test]
    fn tokens_skip_comments_and_keep_strings_whole() {
        let t = flat("x = f'a # b' + r\"c\"  # d\ny = '''e\n\nf''' \\\n  + 1e-3\n");
        let texts: Vec<&str> = t.iter().map(|t| t.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "x",
                "=",
                "f'a # b'",
                "+",
                "r\"c\"",
                "",
                "y",
                "=",
                "'''e\n\nf'''",
                "+",
                "1e-3"
            ]
        );
    }

    #[test]
    fn logical_lines_join_brackets_and_keep_their_indent_and_rows() {
        let src = "def f(a,\n      b):  # two rows\n    # a comment line\n\n    return (a +\n\tb)\nx += 1\n";
        let ls = lines(src);
        assert_eq!(ls.len(), 3, "{ls:?}");
        assert_eq!(texts(&ls[0]), ["def", "f", "(", "a", ",", "b", ")", ":"]);
        assert_eq!((ls[0].indent, ls[0].first, ls[0].last), (0, 0, 1));
        assert_eq!((ls[1].indent, ls[1].first, ls[1].last), (4, 4, 5));
        assert_eq!(texts(&ls[2]), ["x", "+=", "1"]);
        assert!(ls[2].starts_with("x"));
        // A tab indents to the next multiple of 8.
        assert_eq!(lines("if x:\n\ty = 1\n")[1].indent, 8);
    }
}
