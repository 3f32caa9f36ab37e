//! KDL text in, the first `{` nested deeper than mvk reads out: checked before the KDL parser,
//! whose recursive descent overflows the stack on deep nesting (found by the `compile` fuzz target).
//!
//! Two counts, each one pass. The *lexical* count skips strings (quoted, multi-line, raw) and comments
//! the way KDL 2.0 reads them, so braces in a command or a goal do not count, and refuses nesting
//! deeper than [`MAX_DEPTH`]. Where the scan is unsure what KDL makes of the text (a string cut
//! by a newline, a comment or a string never closed) it counts every brace from there on, so it
//! may refuse a broken file. The *blind* count takes every `{` and `}`, inside strings and
//! comments too, and refuses past [`MAX_BLIND_DEPTH`]; no real file comes near it. Neither is a proof against what the parser's
//! error recovery makes of every broken file: what guarantees the parser cannot overflow is the
//! stack it runs on, sized to the file (see `syntax::parse`); these counts give deep nesting
//! its diagnostic.

/// Deeper than any loop file needs (`flow { task { sandbox { … } } }` is three levels), far
/// shallower than what overflows the parser's stack in a debug build on a 2 MiB thread.
pub(crate) const MAX_DEPTH: usize = 32;

/// Unmatched `{` anywhere, strings and comments included: a few kilobytes of the parser's
/// stack each (measured up to 16 KiB in an unoptimised build), so 256 stay far inside the
/// 16 MiB the parser thread gets at least.
pub(crate) const MAX_BLIND_DEPTH: usize = 256;

/// The byte offset of the first `{` that opens one level too many, if any.
pub(crate) fn too_deep(text: &str) -> Option<usize> {
    let lexical = lexical(text);
    let blind = blind(text);
    match (lexical, blind) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Every `{` and `}`, wherever it stands.
fn blind(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &b) in text.as_bytes().iter().enumerate() {
        match b {
            b'{' => {
                depth += 1;
                if depth > MAX_BLIND_DEPTH {
                    return Some(i);
                }
            }
            b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Braces outside strings and comments, as KDL reads them.
fn lexical(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Some(i);
                }
                i += 1;
            }
            b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => i = line_end(text, i),
            b'/' if bytes.get(i + 1) == Some(&b'*') => match block_comment(text, i) {
                Comment::End(end) => i = end,
                Comment::TooDeep(at) => return Some(at),
                Comment::Unclosed => return counting(bytes, i + 2, depth, MAX_DEPTH),
            },
            b'"' => match quoted_end(text, i) {
                Some(end) => i = end,
                None => return counting(bytes, i + 1, depth, MAX_DEPTH),
            },
            b'#' => match raw(text, i) {
                Raw::None(run) => i += run,
                Raw::End(end) => i = end,
                Raw::Unclosed => return counting(bytes, i + 1, depth, MAX_DEPTH),
            },
            _ => i += 1,
        }
    }
    None
}

/// Where the scan lost track of what KDL reads: counts every `{` from `from` on, starting at
/// `depth`, and every `}` but those between double quotes on one line (`\"` escaped): the
/// first `{` past `max`, if any. A quoted `}` may be the parser's string (`{"}"` repeated must
/// not balance, review r8e, M2); a `{` is counted wherever it stands, since the parser's error
/// recovery may nest on it (review r8e re-review, F1). Only a broken file gets here.
fn counting(bytes: &[u8], from: usize, mut depth: usize, max: usize) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate().skip(from) {
        let was_escaped = std::mem::take(&mut escaped);
        match b {
            b'\n' | b'\r' => quoted = false,
            b'\\' if quoted => escaped = !was_escaped,
            b'"' if !was_escaped => quoted = !quoted,
            b'{' => {
                depth += 1;
                if depth > max {
                    return Some(i);
                }
            }
            b'}' if !quoted => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Whether only whitespace stands between the start of its line and `j`.
fn only_space_before(text: &str, j: usize) -> bool {
    text.get(..j).is_none_or(|before| {
        before
            .chars()
            .rev()
            .take_while(|&c| {
                !matches!(
                    c,
                    '\r' | '\n' | '\u{85}' | '\u{0B}' | '\u{0C}' | '\u{2028}' | '\u{2029}'
                )
            })
            .all(char::is_whitespace)
    })
}

/// The length of the KDL 2.0 newline at `i`, if one starts there: CRLF, CR, LF, NEL, VT, FF,
/// LINE SEPARATOR, PARAGRAPH SEPARATOR.
pub(super) fn newline_at(text: &str, i: usize) -> Option<usize> {
    let rest = text.get(i..)?;
    if rest.starts_with("\r\n") {
        return Some(2);
    }
    let c = rest.chars().next()?;
    matches!(
        c,
        '\r' | '\n' | '\u{85}' | '\u{0B}' | '\u{0C}' | '\u{2028}' | '\u{2029}'
    )
    .then(|| c.len_utf8())
}

/// The length of the character at `i` (1 past the end or inside a character).
pub(super) fn char_len(text: &str, i: usize) -> usize {
    text.get(i..)
        .and_then(|r| r.chars().next())
        .map_or(1, char::len_utf8)
}

/// The offset of the newline ending the line `i` is on (or the end of the text).
pub(super) fn line_end(text: &str, mut i: usize) -> usize {
    while i < text.len() {
        if newline_at(text, i).is_some() {
            return i;
        }
        i += char_len(text, i);
    }
    text.len()
}

pub(super) enum Comment {
    End(usize),
    /// Block comments nest in KDL, and the parser recurses once per level.
    TooDeep(usize),
    Unclosed,
}

/// Past a `/* … */` comment starting at `i` (they nest), in one pass.
pub(super) fn block_comment(text: &str, i: usize) -> Comment {
    let bytes = text.as_bytes();
    let mut level = 0usize;
    let mut j = i;
    while j + 1 < bytes.len() {
        match (bytes[j], bytes[j + 1]) {
            (b'/', b'*') => {
                level += 1;
                if level > MAX_DEPTH {
                    return Comment::TooDeep(j);
                }
                j += 2;
            }
            (b'*', b'/') => {
                level -= 1;
                j += 2;
                if level == 0 {
                    return Comment::End(j);
                }
            }
            _ => j += 1,
        }
    }
    Comment::Unclosed
}

/// Past the whitespace escape (`\` then spaces and newlines, all skipped) or other escape at
/// the `\` at `j`.
fn escape_end(text: &str, j: usize) -> usize {
    let mut k = j + 1;
    let mut blank = false;
    while let Some(c) = text.get(k..).and_then(|r| r.chars().next()) {
        if !c.is_whitespace() {
            break;
        }
        blank = true;
        k += c.len_utf8();
    }
    if blank { k } else { k + char_len(text, k) }
}

/// Past a quoted string starting at the `"` at `i`: `"""` (then a newline) to `"""`, else to the
/// next `"` on the same line; `\` escapes, spaces and newlines after it included. `None` where KDL
/// would not read it so: a newline in a single-line string, `"""` without a newline after it, the
/// end of the text.
pub(super) fn quoted_end(text: &str, i: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let multi = bytes[i..].starts_with(b"\"\"\"");
    let mut j = if multi {
        newline_at(text, i + 3)?;
        i + 3
    } else {
        i + 1
    };
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => j = escape_end(text, j),
            b'"' if !multi => return Some(j + 1),
            // KDL closes a multi-line string only on a line of its own; a `"""` in mid-line is
            // an error, after which the parser reads on as nodes (review r8e, M2).
            b'"' if bytes[j..].starts_with(b"\"\"\"") => {
                return only_space_before(text, j).then_some(j + 3);
            }
            _ if !multi && newline_at(text, j).is_some() => return None,
            _ => j += 1,
        }
    }
    None
}

pub(super) enum Raw {
    /// A run of this many `#` that starts no raw string (`#true`, `#null`): skipped whole, as
    /// no `#` of it starts one either (a scan that moved on by one byte was quadratic in the
    /// run's length).
    None(usize),
    End(usize),
    Unclosed,
}

/// A raw string `#"…"#` (any number of `#`, `"""` and a newline for several lines) at `i`.
pub(super) fn raw(text: &str, i: usize) -> Raw {
    let bytes = text.as_bytes();
    let hashes = bytes[i..].iter().take_while(|&&b| b == b'#').count();
    let open = i + hashes;
    if bytes.get(open) != Some(&b'"') {
        return Raw::None(hashes.max(1));
    }
    let multi = bytes[open..].starts_with(b"\"\"\"");
    if multi && newline_at(text, open + 3).is_none() {
        return Raw::Unclosed;
    }
    let quotes: &[u8] = if multi { b"\"\"\"" } else { b"\"" };
    let mut j = open + quotes.len();
    while j < bytes.len() {
        if !multi && newline_at(text, j).is_some() {
            return Raw::Unclosed;
        }
        if bytes[j..].starts_with(quotes)
            && bytes[j + quotes.len()..]
                .iter()
                .take_while(|&&b| b == b'#')
                .count()
                >= hashes
        {
            if multi && !only_space_before(text, j) {
                return Raw::Unclosed;
            }
            return Raw::End(j + quotes.len() + hashes);
        }
        j += 1;
    }
    Raw::Unclosed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_nesting_passes() {
        let text = "flow \"f\" {\n  task \"t\" {\n    sandbox { network #false }\n  }\n}\n";
        assert_eq!(too_deep(text), None);
    }

    #[test]
    fn the_first_brace_too_deep_is_found() {
        let text = "a{".repeat(MAX_DEPTH + 5);
        assert_eq!(too_deep(&text), Some(2 * MAX_DEPTH + 1));
    }

    #[test]
    fn braces_in_strings_and_comments_do_not_count() {
        let deep = "{".repeat(MAX_DEPTH + 1);
        for text in [
            format!("sh \"{deep}\""),
            format!("sh #\"{deep}\"\"#"),
            format!("sh ##\"\"\"\n{deep}\"\"\"#\n\"\"\"##"),
            format!("// {deep}\n"),
            format!("/* /* {deep} */ {deep} */"),
            format!("sh \"\\\"{deep}\""),
            // A whitespace escape carries a single-line string over its newline.
            format!("sh \"a\\  \n {deep}\""),
            format!("sh \"a\\\r\n{deep}\""),
        ] {
            assert_eq!(too_deep(&text), None, "{text:?}");
        }
    }

    #[test]
    fn braces_after_what_kdl_would_not_close_count() {
        let deep = "{".repeat(MAX_DEPTH + 1);
        // A single-line string ends at its line in KDL, which reports it and goes on parsing.
        assert!(too_deep(&format!("a \"x\n{deep}")).is_some());
        assert!(too_deep(&format!("a #\"x\n{deep}")).is_some());
        // Never closed: counted.
        assert!(too_deep(&format!("/* {deep}")).is_some());
        assert!(too_deep(&format!("a \"\"\"\n{deep}")).is_some());
        // `"""` must be followed by a newline to open a multi-line string.
        assert!(too_deep(&format!("a \"\"\"x {deep} \"\"\"")).is_some());
        // And closes one only on a line of its own: in mid-line, KDL reads on as nodes.
        assert!(too_deep(&format!("sh \"\"\"\n{deep}\n\"x\" \"\"\"")).is_some());
        assert!(too_deep(&format!("sh #\"\"\"\nx \"\"\"#\n{deep}")).is_some());
        // Re-review F1: after a broken string, a `{` counts even where quotes seem to hold it.
        let hidden = "/*\"*/a{".repeat(MAX_DEPTH + 1);
        assert!(too_deep(&format!("a \"x\n{hidden}")).is_some());
        // Review r8e, M2: a `}` in a string the parser reads does not cancel the `{` before it.
        let body = "a{\"}\" ".repeat(MAX_BLIND_DEPTH + 1);
        assert!(too_deep(&format!("x \"\"\"\n{body}\"\"\"")).is_some());
    }

    /// Review r8d, N1: KDL ends a line comment at any of its eight newlines; a scan that knew
    /// only `\n` and `\r` took the nesting after a form feed for a comment.
    #[test]
    fn every_kdl_newline_ends_a_line_comment() {
        let deep = format!(
            "{}{}",
            "a{".repeat(MAX_DEPTH + 1),
            "}".repeat(MAX_DEPTH + 1)
        );
        for newline in [
            "\n", "\r", "\r\n", "\u{85}", "\u{0B}", "\u{0C}", "\u{2028}", "\u{2029}",
        ] {
            let text = format!("// x{newline}{deep}");
            assert!(too_deep(&text).is_some(), "{text:?}");
            let text = format!("a \"x{newline}{deep}");
            assert!(too_deep(&text).is_some(), "{text:?}");
        }
    }

    /// Review r8d, N2: `"a\` + spaces + newline is one string; a scan that skipped one byte
    /// after `\` lost its place and read the rest of the file as a string.
    #[test]
    fn a_whitespace_escape_does_not_hide_what_follows_the_string() {
        let deep = format!(
            "{}{}",
            "a{".repeat(MAX_DEPTH + 1),
            "}".repeat(MAX_DEPTH + 1)
        );
        for escape in ["\\ \n", "\\\r\n", "\\\t \u{2028} "] {
            let text = format!("x \"a{escape}/*\" {deep} // */");
            assert!(too_deep(&text).is_some(), "{text:?}");
        }
    }

    /// Review r8d, N3: block comments nest, and the parser recurses once per level.
    #[test]
    fn nested_block_comments_are_bounded() {
        let text = format!(
            "{}{}",
            "/*".repeat(MAX_DEPTH + 1),
            "*/".repeat(MAX_DEPTH + 1)
        );
        assert_eq!(too_deep(&text), Some(2 * MAX_DEPTH));
        let text = format!("{}{}", "/*".repeat(MAX_DEPTH), "*/".repeat(MAX_DEPTH));
        assert_eq!(too_deep(&text), None);
    }

    /// The blind count takes every brace, in strings and comments too: more than
    /// [`MAX_BLIND_DEPTH`] unmatched are refused, whatever the lexical scan made of them.
    #[test]
    fn braces_inside_strings_are_bounded_too() {
        let deep = "{".repeat(MAX_BLIND_DEPTH + 1);
        let text = format!("a \"\"\"\n{deep}\n\"\"\"");
        assert_eq!(too_deep(&text), Some(6 + MAX_BLIND_DEPTH));
        let text = format!("a /* {deep} */");
        assert_eq!(too_deep(&text), Some(5 + MAX_BLIND_DEPTH));
        let text = format!("a \"{deep}\"");
        assert_eq!(too_deep(&text), Some(3 + MAX_BLIND_DEPTH));
    }

    /// Review r8d, N4: an unclosed comment was scanned to the end once per `/*`.
    #[test]
    fn the_scan_is_one_pass() {
        let text = "/*".repeat(100_000);
        // Refused at the first level too deep, not after 100,000 scans to the end.
        assert_eq!(too_deep(&text), Some(2 * MAX_DEPTH));
        let text = format!("/*{}", "*".repeat(1_000_000));
        assert_eq!(too_deep(&text), None);
    }
}
