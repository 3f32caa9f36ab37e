//! KDL text in, the first `{` nested deeper than mvk reads out: checked before the KDL parser,
//! whose recursive descent overflows the stack on deep nesting (found by the `compile` fuzz target).
//!
//! A lexical scan only: strings (quoted, multi-line, raw) and comments are skipped so that braces
//! in a command or a goal do not count. Where the scan is unsure (a string cut by a newline, a
//! comment never closed) it counts the braces, so it may refuse a broken file, never pass a deep one.

/// Deeper than any loop file needs (`flow { task { sandbox { … } } }` is three levels), far
/// shallower than what overflows the parser's stack in a debug build on a 2 MiB thread.
pub const MAX_DEPTH: usize = 32;

/// The byte offset of the first `{` that opens level `MAX_DEPTH + 1`, if any.
pub fn too_deep(text: &str) -> Option<usize> {
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
            b'/' if bytes.get(i + 1) == Some(&b'/') => i = line_end(bytes, i),
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = block_comment_end(bytes, i).unwrap_or(i + 2);
            }
            b'"' => i = quoted_end(bytes, i).unwrap_or(i + 1),
            b'#' => i = raw_end(bytes, i).unwrap_or(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The offset of the newline ending the line `i` is on (or the end of the text).
fn line_end(bytes: &[u8], i: usize) -> usize {
    bytes[i..]
        .iter()
        .position(|&b| b == b'\n' || b == b'\r')
        .map_or(bytes.len(), |p| i + p)
}

/// Past a `/* … */` comment starting at `i` (they nest), or `None` when it is never closed.
fn block_comment_end(bytes: &[u8], i: usize) -> Option<usize> {
    let mut level = 0usize;
    let mut j = i;
    while j + 1 < bytes.len() {
        match (bytes[j], bytes[j + 1]) {
            (b'/', b'*') => {
                level += 1;
                j += 2;
            }
            (b'*', b'/') => {
                level -= 1;
                j += 2;
                if level == 0 {
                    return Some(j);
                }
            }
            _ => j += 1,
        }
    }
    None
}

/// Past a quoted string starting at the `"` at `i`: `"""` to `"""`, else to the next `"` on the
/// same line; backslash escapes a byte. `None` when it is not closed where KDL would close it.
fn quoted_end(bytes: &[u8], i: usize) -> Option<usize> {
    let multi = bytes[i..].starts_with(b"\"\"\"");
    let mut j = if multi { i + 3 } else { i + 1 };
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => j += 2,
            b'"' if !multi => return Some(j + 1),
            b'"' if bytes[j..].starts_with(b"\"\"\"") => return Some(j + 3),
            b'\n' | b'\r' if !multi => return None,
            _ => j += 1,
        }
    }
    None
}

/// Past a raw string `#"…"#` (any number of `#`, `"""` for several lines) starting at `i`, or
/// `None` when `i` starts no raw string or it is not closed.
fn raw_end(bytes: &[u8], i: usize) -> Option<usize> {
    let hashes = bytes[i..].iter().take_while(|&&b| b == b'#').count();
    let open = i + hashes;
    if bytes.get(open) != Some(&b'"') {
        return None;
    }
    let multi = bytes[open..].starts_with(b"\"\"\"");
    let quotes: &[u8] = if multi { b"\"\"\"" } else { b"\"" };
    let mut j = open + quotes.len();
    while j < bytes.len() {
        if !multi && (bytes[j] == b'\n' || bytes[j] == b'\r') {
            return None;
        }
        if bytes[j..].starts_with(quotes)
            && bytes[j + quotes.len()..]
                .iter()
                .take_while(|&&b| b == b'#')
                .count()
                >= hashes
        {
            return Some(j + quotes.len() + hashes);
        }
        j += 1;
    }
    None
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
            format!("sh \"\"\"\n{deep}\n\"x\" \"\"\""),
            format!("sh #\"{deep}\"\"#"),
            format!("sh ##\"\"\"\n{deep}\"\"\"#\n\"\"\"##"),
            format!("// {deep}\n"),
            format!("/* /* {deep} */ {deep} */"),
            format!("sh \"\\\"{deep}\""),
        ] {
            assert_eq!(too_deep(&text), None, "{text}");
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
    }
}
