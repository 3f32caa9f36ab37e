//! KDL text in the plain subset that generated loop files use, in; the nodes the kdl crate's
//! parser makes of it (names, entries, values, children and every span mvk reads), out — or
//! `None` at the first construct outside the subset, which the kdl crate's parser then reads
//! (and reports on, when it is wrong). Generated flows of thousands of tasks spend most of a
//! compile in that parser; this one reads the same text some ten times faster.
//!
//! The subset: ASCII only; spaces, tabs and `\n` between tokens; nodes ended by `;`, a newline,
//! `}` or the end; names and values that are bare identifiers (starting with a letter or `_`) or
//! quoted strings with the simple escapes (`\n \r \t \\ \" \b \f \s`); decimal integers and
//! floats without exponents or `_`; `#true`, `#false`, `#null`; `key=value` properties; `{ … }`
//! blocks. Anything else — comments, `/-`, type annotations, raw or multi-line strings, other
//! escapes, other numbers, `\r`, a property written with spaces around `=` — gives `None`.
//!
//! Spans are those of kdl 6.7's v2 parser: a node's from its name to the end of the spaces after
//! its last entry or block; an entry's from its key (or value) to the end of its value; a
//! block's from its first node to the end of its last (empty where it has none).

use kdl::{KdlDocument, KdlEntry, KdlIdentifier, KdlNode, KdlValue};
use miette::SourceSpan;

/// The nodes of `text`, each span moved by `base`; `None` when `text` is not in the subset.
pub(super) fn parse(text: &str, base: usize) -> Option<Vec<KdlNode>> {
    if !text.is_ascii() {
        return None;
    }
    let mut p = Parser {
        b: text.as_bytes(),
        i: 0,
        base,
        depth: 0,
    };
    let (nodes, _) = p.nodes(false)?;
    (p.i == p.b.len()).then_some(nodes)
}

/// Blocks nest at most this deep here; deeper text goes to the kdl crate's parser (and to the
/// nesting check after it).
const MAX_DEPTH: usize = 64;

struct Parser<'t> {
    b: &'t [u8],
    i: usize,
    base: usize,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn span(&self, start: usize, end: usize) -> SourceSpan {
        SourceSpan::new((self.base + start).into(), end - start)
    }

    /// Spaces and tabs; whether there were any.
    fn spaces(&mut self) -> bool {
        let start = self.i;
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
        self.i > start
    }

    /// Nodes up to the end of the text (`inside`: up to the `}` of a block, left unread), and
    /// the span they cover (from the first node's start to the last node's end).
    fn nodes(&mut self, inside: bool) -> Option<(Vec<KdlNode>, SourceSpan)> {
        let mut nodes = Vec::new();
        let mut first: Option<usize> = None;
        let mut last_end = 0;
        loop {
            // Line space: spaces, tabs, newlines, and `;` only right after a node.
            while matches!(self.peek(), Some(b' ' | b'\t' | b'\n')) {
                self.i += 1;
            }
            match self.peek() {
                None if !inside => break,
                Some(b'}') if inside => break,
                None | Some(b'}') => return None,
                _ => {}
            }
            let start = self.i;
            let node = self.node()?;
            first.get_or_insert(start);
            last_end = self.i;
            nodes.push(node);
            // A terminator, or the end of the text or block.
            match self.peek() {
                Some(b';' | b'\n') => self.i += 1,
                None | Some(b'}') => {}
                _ => return None,
            }
        }
        let span = match first {
            Some(start) => self.span(start, last_end),
            None => self.span(self.i, self.i),
        };
        Some((nodes, span))
    }

    fn node(&mut self) -> Option<KdlNode> {
        let start = self.i;
        let name = self.identifier()?;
        let mut node = KdlNode::new(name);
        loop {
            let spaced = self.spaces();
            match self.peek() {
                Some(b'{') => {
                    self.children(&mut node)?;
                    self.spaces();
                    break;
                }
                None | Some(b';' | b'\n' | b'}') => break,
                Some(_) if spaced => {
                    let entry = self.entry()?;
                    node.entries_mut().push(entry);
                }
                Some(_) => return None,
            }
        }
        node.set_span(self.span(start, self.i));
        Some(node)
    }

    fn children(&mut self, node: &mut KdlNode) -> Option<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        self.i += 1; // `{`
        let (nodes, span) = self.nodes(true)?;
        if self.peek() != Some(b'}') {
            return None;
        }
        self.i += 1;
        self.depth -= 1;
        let mut doc = KdlDocument::new();
        *doc.nodes_mut() = nodes;
        doc.set_span(span);
        node.set_children(doc);
        Some(())
    }

    /// An argument or a `key=value` property.
    fn entry(&mut self) -> Option<KdlEntry> {
        let start = self.i;
        let mut entry = match self.peek()? {
            b'"' | b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                let (text, end) = self.string()?;
                if self.peek() == Some(b'=') {
                    self.i += 1;
                    let mut key = KdlIdentifier::from(text);
                    key.set_span(self.span(start, end));
                    KdlEntry::new_prop(key, self.value()?)
                } else {
                    // `key =value` and `key = value` are properties too: not in the subset.
                    let after = self.i;
                    self.spaces();
                    let eq = self.peek() == Some(b'=');
                    self.i = after;
                    if eq {
                        return None;
                    }
                    KdlEntry::new(KdlValue::String(text))
                }
            }
            _ => KdlEntry::new(self.value()?),
        };
        entry.set_span(self.span(start, self.i));
        self.terminated().then_some(entry)
    }

    /// Whether what follows a value may follow one: a space, a terminator, a block, the end.
    fn terminated(&self) -> bool {
        matches!(
            self.peek(),
            None | Some(b' ' | b'\t' | b'\n' | b';' | b'{' | b'}')
        )
    }

    fn value(&mut self) -> Option<KdlValue> {
        match self.peek()? {
            b'"' | b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                let (text, _) = self.string()?;
                Some(KdlValue::String(text))
            }
            b'#' => {
                let rest = self.b.get(self.i + 1..)?;
                let (value, len) = [
                    (&b"true"[..], KdlValue::Bool(true)),
                    (&b"false"[..], KdlValue::Bool(false)),
                    (&b"null"[..], KdlValue::Null),
                ]
                .into_iter()
                .find(|(word, _)| rest.starts_with(word))
                .map(|(word, v)| (v, word.len()))?;
                self.i += 1 + len;
                self.terminated().then_some(value)
            }
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// `-?[0-9]+` or `-?[0-9]+\.[0-9]+`, each run of digits within an `i128` as the crate
    /// reads it (a longer run is its error to report).
    fn number(&mut self) -> Option<KdlValue> {
        let start = self.i;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.i += 1;
        }
        let run = |p: &mut Self| -> Option<i128> {
            let s = p.i;
            while p.peek().is_some_and(|c| c.is_ascii_digit()) {
                p.i += 1;
            }
            std::str::from_utf8(p.b.get(s..p.i)?)
                .ok()?
                .parse::<i128>()
                .ok()
        };
        let whole = run(self)?;
        let float = self.peek() == Some(b'.');
        if float {
            self.i += 1;
            run(self)?;
        }
        if !self.terminated() {
            return None;
        }
        if float {
            let text = std::str::from_utf8(self.b.get(start..self.i)?).ok()?;
            text.parse::<f64>().ok().map(KdlValue::Float)
        } else {
            // The crate negates the digits' value: `-` and i128::MAX + 1 is its error too.
            Some(KdlValue::Integer(if negative { -whole } else { whole }))
        }
    }

    /// A node's name.
    fn identifier(&mut self) -> Option<KdlIdentifier> {
        let start = self.i;
        let (text, end) = self.string()?;
        let mut id = KdlIdentifier::from(text);
        id.set_span(self.span(start, end));
        Some(id)
    }

    /// A bare identifier or a quoted string: its value, and where it ends.
    fn string(&mut self) -> Option<(String, usize)> {
        if self.peek()? == b'"' {
            return self.quoted();
        }
        let start = self.i;
        while self.peek().is_some_and(bare) {
            self.i += 1;
        }
        let word = std::str::from_utf8(self.b.get(start..self.i)?).ok()?;
        let first = word.bytes().next()?;
        // A bare identifier starts with a letter or `_` here, and is no keyword.
        if !(first.is_ascii_alphabetic() || first == b'_')
            || matches!(word, "true" | "false" | "null" | "inf" | "nan")
        {
            return None;
        }
        Some((word.to_string(), self.i))
    }

    /// `"…"` with the simple escapes; not `"""`.
    fn quoted(&mut self) -> Option<(String, usize)> {
        if self.b.get(self.i..self.i + 3) == Some(b"\"\"\"") {
            return None;
        }
        self.i += 1;
        let mut out = String::new();
        loop {
            let c = self.peek()?;
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let e = self.peek()?;
                    self.i += 1;
                    out.push(match e {
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'\\' => '\\',
                        b'"' => '"',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b's' => ' ',
                        _ => return None,
                    });
                }
                b'\t' | b' '..=b'~' => out.push(char::from(c)),
                _ => return None,
            }
        }
        Some((out, self.i))
    }
}

/// A character of a bare identifier here: printable ASCII but for KDL's reserved ones.
fn bare(c: u8) -> bool {
    c.is_ascii_graphic()
        && !matches!(
            c,
            b'\\' | b'/' | b'(' | b')' | b'{' | b'}' | b'[' | b']' | b';' | b'"' | b'#' | b'='
        )
}

#[cfg(test)]
mod tests;
