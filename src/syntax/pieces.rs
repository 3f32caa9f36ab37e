//! KDL text in, the pieces the KDL parser is handed one at a time out: runs of whole nodes of at
//! most [`PIECE_MAX`] bytes, and a node larger than that split into its head (its `{ … }` block
//! blanked) and the pieces of its block; or the first node too large to split.
//!
//! Why: the kdl crate's error recovery recurses once per syntax error (a stray `)`, `}` or `=`
//! restarts the document one character further on) and its comment parser once per `*` or `/`,
//! so the stack a parse needs grows with the text it is given. Parsing pieces of bounded size
//! bounds that stack whatever the file's size, and an honest file of many nodes (a generated
//! flow of 10,000 tasks) is read in pieces of whole nodes, so nothing changes for it.
//!
//! The scan reads strings and comments as [`nesting`](super::nesting) does. A node ends at a
//! newline or `;` outside any block, string or comment, unless a `\` (a line continuation) or a
//! `/-` (a node commented out, which may name it on a later line) waits for the rest of it.
//! Where the scan is unsure what KDL makes of the text (a string or comment never closed, a
//! string cut by a newline), the rest of the region is one node: the parser reads it as a whole,
//! or it is refused as too large, never split on a guess.

use std::ops::Range;

use super::nesting::{self, Comment, Raw};

/// The most text one parse is handed: the kdl crate's recursion, and so the parser thread's
/// stack (see `syntax::STACK_PER_BYTE`), is bounded by it. A node larger than this without a
/// block to split (a string or comment of more than 256 KiB) is refused.
pub(crate) const PIECE_MAX: usize = 256 << 10;

/// One parse's worth of the text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Whole nodes (and the space and comments between them), parsed as they stand.
    Whole(Range<usize>),
    /// One node too large for a parse: `node` is its text, parsed with `block` (between its `{`
    /// and `}`) blanked; the nodes of its block are `children`.
    Split {
        node: Range<usize>,
        block: Range<usize>,
        children: Vec<Piece>,
    },
}

/// The pieces of `text`, in order, or the range of the first node larger than [`PIECE_MAX`]
/// that has no single block to split it by.
pub(crate) fn split(text: &str) -> Result<Vec<Piece>, Range<usize>> {
    split_region(text, 0..text.len())
}

/// A node as the scan found it.
struct Node {
    range: Range<usize>,
    /// The insides of its blocks at its own level (`{` and `}` excluded).
    blocks: Vec<Range<usize>>,
    /// The scan read all of it for sure.
    sure: bool,
}

/// The pieces of `region` (a whole text, or the inside of a block).
fn split_region(text: &str, region: Range<usize>) -> Result<Vec<Piece>, Range<usize>> {
    let mut pieces = Vec::new();
    let mut run: Option<Range<usize>> = None;
    for node in nodes(text, region) {
        if node.range.len() <= PIECE_MAX {
            match &mut run {
                Some(r) if node.range.end - r.start <= PIECE_MAX => r.end = node.range.end,
                _ => {
                    pieces.extend(run.replace(node.range).map(Piece::Whole));
                }
            }
            continue;
        }
        pieces.extend(run.take().map(Piece::Whole));
        match node.blocks.as_slice() {
            [block] if node.sure && node.range.len() - block.len() <= PIECE_MAX => {
                let children = split_region(text, block.clone())?;
                pieces.push(Piece::Split {
                    node: node.range,
                    block: block.clone(),
                    children,
                });
            }
            _ => return Err(node.range),
        }
    }
    pieces.extend(run.map(Piece::Whole));
    Ok(pieces)
}

/// The nodes of `region`, each with what follows it up to its terminator, covering the region.
fn nodes(text: &str, region: Range<usize>) -> Vec<Node> {
    let bytes = text.as_bytes();
    let end = region.end;
    let mut out = Vec::new();
    let mut start = region.start;
    let mut depth = 0usize;
    let mut open = None;
    let mut blocks = Vec::new();
    // A `\` or `/-` waits for the rest of its node: the next newline does not end it.
    let mut waiting = false;
    let mut i = region.start;
    macro_rules! end_node {
        ($at:expr) => {{
            out.push(Node {
                range: start..$at,
                blocks: std::mem::take(&mut blocks),
                sure: true,
            });
            start = $at;
        }};
    }
    while i < end {
        let b = bytes[i];
        let next = bytes.get(i + 1).copied();
        // Where the scan is no longer sure, the rest of the region is one node.
        let unsure = match b {
            b'{' => {
                if depth == 0 {
                    open = Some(i + 1);
                }
                depth += 1;
                waiting = false;
                i += 1;
                false
            }
            b'}' => {
                if depth == 1
                    && let Some(o) = open.take()
                {
                    blocks.push(o..i);
                }
                depth = depth.saturating_sub(1);
                waiting = false;
                i += 1;
                false
            }
            b';' => {
                i += 1;
                waiting = false;
                if depth == 0 {
                    end_node!(i);
                }
                false
            }
            b'/' if next == Some(b'/') => {
                i = nesting::line_end(text, i).min(end);
                false
            }
            b'/' if next == Some(b'*') => match nesting::block_comment(text, i) {
                Comment::End(j) => {
                    i = j;
                    false
                }
                Comment::TooDeep(_) | Comment::Unclosed => true,
            },
            b'/' if next == Some(b'-') => {
                waiting = true;
                i += 2;
                false
            }
            b'\\' => {
                waiting = true;
                i += 1;
                false
            }
            b'"' => match nesting::quoted_end(text, i) {
                Some(j) => {
                    waiting = false;
                    i = j;
                    false
                }
                None => true,
            },
            b'#' => match nesting::raw(text, i) {
                Raw::None(run) => {
                    waiting = false;
                    i += run;
                    false
                }
                Raw::End(j) => {
                    waiting = false;
                    i = j;
                    false
                }
                Raw::Unclosed => true,
            },
            b' ' | b'\t' => {
                i += 1;
                false
            }
            _ => {
                if let Some(n) = nesting::newline_at(text, i) {
                    i += n;
                    if depth == 0 && !waiting {
                        end_node!(i);
                    }
                } else {
                    let c = nesting::char_len(text, i);
                    if !text
                        .get(i..i + c)
                        .is_some_and(|s| s.chars().all(char::is_whitespace))
                    {
                        waiting = false;
                    }
                    i += c;
                }
                false
            }
        };
        if unsure || i > end {
            out.push(Node {
                range: start..end,
                blocks: Vec::new(),
                sure: false,
            });
            return out;
        }
    }
    if start < end {
        out.push(Node {
            range: start..end,
            blocks,
            // A block left open at the end of the region.
            sure: depth == 0,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(text: &str) -> Vec<(Range<usize>, usize, bool)> {
        nodes(text, 0..text.len())
            .into_iter()
            .map(|n| (n.range, n.blocks.len(), n.sure))
            .collect()
    }

    #[test]
    fn nodes_end_at_newlines_and_semicolons_outside_blocks() {
        let text = "a 1; b {\n c\n}\nd \"x\ny\"\n";
        assert_eq!(
            ranges(text),
            [(0..4, 0, true), (4..14, 1, true), (14..22, 0, false)]
        );
    }

    #[test]
    fn a_continuation_or_slashdash_carries_the_node_over_its_newline() {
        let text = "a \\\n  b\n/-\nc {\n}\nd\n";
        assert_eq!(
            ranges(text),
            [(0..8, 0, true), (8..17, 1, true), (17..19, 0, true)]
        );
    }

    #[test]
    fn newlines_in_strings_and_comments_end_nothing() {
        let text = "a \"\"\"\n x\n \"\"\" /* \n */ b // c\ne #\"\"\"\n y\n \"\"\"#\n";
        let found = ranges(text);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found.iter().all(|n| n.2), "{found:?}");
    }

    #[test]
    fn small_text_is_one_piece_and_a_large_node_is_split_at_its_block() {
        assert_eq!(split("a\nb\n"), Ok(vec![Piece::Whole(0..4)]));
        let task = "  task t { goal \"g\"; }\n";
        let n = PIECE_MAX / task.len() * 3;
        let text = format!("agent a\nflow f {{\n{}}}\n", task.repeat(n));
        let pieces = split(&text).expect("splits");
        let [
            Piece::Whole(head),
            Piece::Split {
                node,
                block,
                children,
            },
        ] = pieces.as_slice()
        else {
            panic!("{pieces:?}");
        };
        assert_eq!(head, &(0..8));
        assert_eq!(node, &(8..text.len()));
        assert_eq!(&text[block.start - 1..block.start], "{");
        assert_eq!(&text[block.end..=block.end], "}");
        assert!(children.len() >= 3, "{children:?}");
        assert!(
            children
                .iter()
                .all(|p| matches!(p, Piece::Whole(r) if r.len() <= PIECE_MAX))
        );
    }

    #[test]
    fn a_large_node_without_a_block_is_refused() {
        let stray = format!("a\n{}\n", ")".repeat(PIECE_MAX + 1));
        assert_eq!(split(&stray), Err(2..stray.len()));
        // Unsure from the unclosed string on: the rest is one node, never split.
        let broken = format!("a \"x\nflow f {{\n{}}}\n", "t\n".repeat(PIECE_MAX));
        assert_eq!(split(&broken), Err(0..broken.len()));
    }
}
