//! Terminal text in, plain text out: ANSI escape sequences removed (CSI such as colours and
//! cursor moves, OSC such as hyperlinks and progress reports, two-byte escapes), so what a
//! program printed to look good is read as the words it holds (evidence, usage, rate limits).

use std::borrow::Cow;

/// Removes ANSI escape sequences (CSI such as colours, OSC such as hyperlinks and progress).
pub(crate) fn strip(s: &str) -> Cow<'_, str> {
    if !s.contains('\x1b') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                // Parameter and intermediate bytes, then one final byte.
                while let Some(&n) = chars.peek() {
                    if ('\x20'..='\x3f').contains(&n) {
                        chars.next();
                    } else {
                        if ('\x40'..='\x7e').contains(&n) {
                            chars.next();
                        }
                        break;
                    }
                }
            }
            Some(']') => {
                // Ends at BEL or at ESC `\`.
                while let Some(n) = chars.next() {
                    if n == '\x07' {
                        break;
                    }
                    if n == '\x1b' {
                        if chars.peek() == Some(&'\\') {
                            chars.next();
                        }
                        break;
                    }
                }
            }
            // Two-byte escapes (`ESC =`, `ESC (`...): the byte after ESC goes too.
            Some(_) | Option::None => {}
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::strip as strip_ansi;

    #[test]
    fn strip_ansi_removes_csi_and_osc_sequences() {
        assert_eq!(strip_ansi("plain"), "plain");
        assert_eq!(strip_ansi("\x1b[1;32mok\x1b[0m done"), "ok done");
        assert_eq!(
            strip_ansi("\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\"),
            "link"
        );
        assert_eq!(strip_ansi("\x1b]9;4;1;50\x07x"), "x");
        assert_eq!(strip_ansi("a\x1b=b\x1b"), "ab");
    }
}
