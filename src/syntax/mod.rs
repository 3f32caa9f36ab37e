//! KDL text in, a typed and spanned syntax tree ([`ast::FileAst`]) out; names are not resolved here.
//!
//! One module per kind of node: [`items`] (imports and definitions), [`body`] (a loop's settings),
//! [`flow`] (flows and tasks), [`sandbox`] (confinement), [`notify`] (notifications). This stage never touches git or the file system.
//! The KDL parser is handed a large file in node-sized pieces ([`pieces`]) on threads whose
//! stacks are sized to the largest piece: its recursion grows with the syntax errors in what it
//! is given, never with the file. [`stream`] parses the pieces on every core and lowers each as
//! it arrives, so a large file is never held as one parsed document.

pub(crate) mod ast;
pub(crate) mod body;
mod fast;
pub(crate) mod flow;
pub(crate) mod items;
pub(crate) mod nesting;
pub(crate) mod notify;
pub(crate) mod pieces;
pub(crate) mod sandbox;
mod stream;
pub(crate) mod values;

use std::ops::Range;

use kdl::{KdlDocument, KdlEntry, KdlNode};
use miette::SourceSpan;

use crate::diag::{Diagnostic, Diagnostics, suggest};
use crate::source::{FileId, Span};
use ast::{Binding, FileAst, Spanned};
use pieces::{PIECE_MAX, Piece};
use stream::Outcome;

/// The file being lowered and the diagnostics found so far.
pub(crate) struct Cx<'a> {
    pub(crate) file: FileId,
    pub(crate) diags: &'a mut Diagnostics,
}

impl Cx<'_> {
    pub(crate) fn span(&self, span: SourceSpan) -> Span {
        Span::new(self.file, span)
    }

    pub(crate) fn push(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }
}

/// Parses one file's text; KDL syntax errors and schema errors both land in `diags`.
pub(crate) fn parse(file: FileId, text: &str, diags: &mut Diagnostics) -> FileAst {
    if text.len() > MAX_BYTES {
        let offset = (0..=MAX_BYTES)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        diags.push(
            Diagnostic::error(
                "mvk::too-large",
                format!(
                    "this file is {}{} bytes; a loop file may hold at most {MAX_BYTES} (64 MiB)",
                    if text.len() >= crate::resolve::READ_LIMIT.saturating_sub(3) {
                        "at least "
                    } else {
                        ""
                    },
                    text.len()
                ),
            )
            .at(
                Span {
                    file,
                    offset,
                    len: 0,
                },
                "the limit falls here",
            )
            .help("a loop file is configuration: put long prompts in template files (`prompt \"prompts/task.hbs\"`), and make many tasks from one with `each=`"),
        );
        return FileAst::default();
    }
    if let Some(offset) = nesting::too_deep(text) {
        diags.push(too_deep(file, offset));
        return FileAst::default();
    }
    let pieces = if text.len() <= PIECE_MAX {
        vec![Piece::Whole(0..text.len())]
    } else {
        match pieces::split(text) {
            Ok(pieces) => pieces,
            Err(node) => {
                diags.push(node_too_large(file, text, node));
                return FileAst::default();
            }
        }
    };
    match stream::run(file, text, &pieces, parser_stack(text)) {
        Ok(Outcome::Ast(ast, lowered)) => {
            diags.append(lowered);
            ast
        }
        // The nesting scan stops what it can see; what it cannot (text it took for a string or
        // comment that KDL reads otherwise) is caught on the parsed document. A block's span
        // starts inside it: point at its `{`.
        Ok(Outcome::TooDeep(inside)) => {
            let offset = text
                .get(..inside)
                .and_then(|t| t.rfind('{'))
                .unwrap_or(inside);
            diags.push(too_deep(file, offset));
            FileAst::default()
        }
        Ok(Outcome::Err(errors)) => {
            let unclosed_block = errors
                .iter()
                .any(|d| d.message.as_deref() == Some(NO_CLOSING_BRACE));
            for d in errors {
                let message = d.message.unwrap_or_else(|| "malformed KDL".to_string());
                // The parser reports a missing `}` twice, at the `{` and over the whole block.
                if unclosed_block && message == CLOSING_BRACE_NOT_FOUND {
                    continue;
                }
                let offset = d.span.offset();
                let written = text.get(offset..offset + d.span.len()).unwrap_or_default();
                if let Some(v2) = v1_keyword(written) {
                    diags.push(
                        Diagnostic::error(
                            "mvk::kdl-syntax",
                            format!("malformed KDL: `{written}` is KDL 1.0; KDL 2.0 writes `{v2}`"),
                        )
                        .at(Span::new(file, d.span), "a bare keyword")
                        .help(format!(
                            "write `{v2}` (booleans and null start with `#` in KDL 2.0), or \"{written}\" for a string"
                        )),
                    );
                    continue;
                }
                let (label, help) = match message.as_str() {
                    NO_CLOSING_BRACE => (
                        Some("this `{` is never closed".to_string()),
                        Some("add the missing `}` at the end of the block".to_string()),
                    ),
                    UNCLOSED_STRING => (Some("no closing `\"` on this line".to_string()), d.help),
                    _ => (d.label, d.help),
                };
                let mut diag =
                    Diagnostic::error("mvk::kdl-syntax", format!("malformed KDL: {message}")).at(
                        Span::new(file, d.span),
                        label.unwrap_or_else(|| "here".into()),
                    );
                diag = diag.help(help.unwrap_or_else(|| {
                    "see https://kdl.dev for KDL 2.0 syntax: strings are quoted, booleans are #true and #false".into()
                }));
                diags.push(diag);
            }
            FileAst::default()
        }
        Err(why) => {
            diags.push(
                Diagnostic::error(
                    "mvk::parser-thread",
                    format!("cannot start a thread to parse this file: {why}"),
                )
                .at(
                    Span {
                        file,
                        offset: 0,
                        len: 0,
                    },
                    "not parsed",
                )
                .help("the system is short of threads or memory; run mvk again when it has room"),
            );
            FileAst::default()
        }
    }
}

/// The largest loop file mvk reads (64 MiB, a generated flow of some 400,000 tasks). The parser
/// is handed it in pieces of at most [`PIECE_MAX`], so what bounds its stack is the piece, not
/// the file; this bounds the memory a compile takes (a parsed piece is some hundred times its
/// text, but only a few pieces are held at once: the syntax tree and what is resolved from it
/// are what grow with the file).
pub(crate) const MAX_BYTES: usize = 64 << 20;

/// The KDL parser recurses once per syntax error in its error recovery (a run of stray `)`,
/// `}` or `a=` is one error per byte or two) and once per character of a comment, so its stack
/// is sized to the largest piece it is handed (at most [`PIECE_MAX`]): the worst measured
/// needed under 2 KiB of stack per byte of input with dependencies built as in a debug build;
/// in a release build, measured on 256 KiB pieces, 563 bytes per byte for `}`, 483 for a
/// comment of `*`, 283 for `)` and `a=`. 4 KiB per byte leaves twice the first. A usual loop file
/// gets the floor, 16 MiB; any larger file at most 1 GiB of address space per parser thread, of which only what
/// the parse touches is used.
const STACK_PER_BYTE: usize = 4 << 10;
const STACK_FLOOR: usize = 16 << 20;

/// One error of the KDL parser, its span in the whole file.
struct SyntaxError {
    span: SourceSpan,
    message: Option<String>,
    label: Option<String>,
    help: Option<String>,
}

/// The stack of a parser thread: sized to the largest piece it may be handed, never less than
/// the floor (a test's thread has 2 MiB, a tokio worker's too; `)` × 30,000 overflowed 8 MiB).
fn parser_stack(text: &str) -> usize {
    text.len()
        .min(PIECE_MAX)
        .saturating_mul(STACK_PER_BYTE)
        .max(STACK_FLOOR)
}

impl SyntaxError {
    /// A piece that does not start or end on a character: the scan cuts only at ASCII bytes,
    /// so this is mvk's mistake, said as one rather than a panic.
    fn cut(offset: usize) -> SyntaxError {
        SyntaxError {
            span: SourceSpan::new(offset.into(), 0),
            message: Some("mvk split this file inside a character (a bug in mvk)".into()),
            label: None,
            help: Some("report it, with the file".into()),
        }
    }
}

/// Every span of `node` and of what it holds, through `at`.
fn shift(node: &mut KdlNode, at: &impl Fn(SourceSpan) -> SourceSpan) {
    node.set_span(at(node.span()));
    let name = node.name_mut();
    name.set_span(at(name.span()));
    if let Some(ty) = node.ty_mut() {
        ty.set_span(at(ty.span()));
    }
    for entry in node.entries_mut() {
        entry.set_span(at(entry.span()));
        if let Some(name) = entry.name_mut() {
            name.set_span(at(name.span()));
        }
        if let Some(ty) = entry.ty_mut() {
            ty.set_span(at(ty.span()));
        }
    }
    if let Some(children) = node.children_mut() {
        children.set_span(at(children.span()));
        for child in children.nodes_mut() {
            shift(child, at);
        }
    }
}

/// `mvk::too-large` at a node (or stray text) larger than one parse, with no block to split it.
fn node_too_large(file: FileId, text: &str, node: Range<usize>) -> Diagnostic {
    let rest = text.get(node.clone()).unwrap_or_default();
    let start = node.start + (rest.len() - rest.trim_start().len());
    Diagnostic::error(
        "mvk::too-large",
        format!(
            "this node spans {} bytes; one node may hold at most {PIECE_MAX} besides the nodes of its `{{ … }}` block",
            node.end - start
        ),
    )
    .at(
        Span {
            file,
            offset: start,
            len: 0,
        },
        "the node starts here",
    )
    .help("put long prompts in template files (`prompt \"prompts/task.hbs\"`); if this is not meant to be one node, look for a string or comment left open, or stray characters")
}

/// Where the first block nested more than `max` deep starts (just inside its `{`).
fn deeper_than(nodes: &[KdlNode], max: usize) -> Option<usize> {
    nodes.iter().find_map(|node| {
        let children = node.children()?;
        match max.checked_sub(1) {
            None => Some(children.span().offset()),
            Some(left) => deeper_than(children.nodes(), left),
        }
    })
}

/// `mvk::too-deep` at the `{` (or `/*`) at `offset`.
fn too_deep(file: FileId, offset: usize) -> Diagnostic {
    Diagnostic::error(
        "mvk::too-deep",
        format!("blocks nested more than {} deep", nesting::MAX_DEPTH),
    )
    .at(
        Span {
            file,
            offset,
            len: 1,
        },
        "this opens one level too many",
    )
    .help("a loop file nests a few levels (`flow { task { sandbox { … } } }`); close the blocks or comments left open with `}` or `*/`")
}

const NO_CLOSING_BRACE: &str = "No closing '}' for child block";
const CLOSING_BRACE_NOT_FOUND: &str = "Closing '}' was not found after nodes";
const UNCLOSED_STRING: &str = "Unexpected newline in single-line quoted string";

/// The KDL 2.0 spelling of a KDL 1.0 keyword written bare (`true` → `#true`).
fn v1_keyword(written: &str) -> Option<&'static str> {
    match written {
        "true" => Some("#true"),
        "false" => Some("#false"),
        "null" => Some("#null"),
        _ => None,
    }
}

/// One node's arguments and properties, with the properties a reader has consumed tracked so
/// that anything left over is reported instead of ignored.
pub(crate) struct NodeView<'n> {
    pub(crate) node: &'n KdlNode,
    pub(crate) name: Spanned<String>,
    /// From the node's name to the end of its last entry: what a label should underline.
    pub(crate) head: Span,
    pub(crate) args: Vec<&'n KdlEntry>,
    props: Vec<(&'n KdlEntry, bool)>,
}

impl<'n> NodeView<'n> {
    pub(crate) fn new(cx: &mut Cx<'_>, node: &'n KdlNode) -> NodeView<'n> {
        let name_span = node.name().span();
        let mut end = name_span.offset() + name_span.len();
        let mut args = Vec::new();
        let mut props: Vec<(&'n KdlEntry, bool)> = Vec::new();
        for entry in node.entries() {
            end = end.max(entry.span().offset() + entry.span().len());
            if entry.ty().is_some() {
                cx.push(
                    Diagnostic::error(
                        "mvk::type-annotation",
                        "type annotations have no meaning in mvk",
                    )
                    .at(cx.span(entry.span()), "annotated here")
                    .help("remove the `(…)` before the value"),
                );
            }
            match entry.name() {
                None => args.push(entry),
                Some(key) => {
                    if let Some((first, _)) = props
                        .iter()
                        .find(|(e, _)| e.name().is_some_and(|k| k.value() == key.value()))
                    {
                        cx.push(
                            Diagnostic::error(
                                "mvk::duplicate-property",
                                format!("property `{}` is given twice", key.value()),
                            )
                            .at(cx.span(entry.span()), "given again here")
                            .also(cx.span(first.span()), "first given here")
                            .help("keep one of them: KDL would silently use the last one"),
                        );
                        continue;
                    }
                    props.push((entry, false));
                }
            }
        }
        if node.ty().is_some() {
            cx.push(
                Diagnostic::error(
                    "mvk::type-annotation",
                    "type annotations have no meaning in mvk",
                )
                .at(cx.span(name_span), "annotated node")
                .help("remove the `(…)` before the node name"),
            );
        }
        NodeView {
            node,
            name: Spanned::new(node.name().value().to_string(), cx.span(name_span)),
            head: cx.span(SourceSpan::new(
                name_span.offset().into(),
                end - name_span.offset(),
            )),
            args,
            props,
        }
    }

    /// Takes a property; later calls with the same key return `None`.
    pub(crate) fn take(&mut self, key: &str) -> Option<&'n KdlEntry> {
        self.props.iter_mut().find_map(|(e, taken)| {
            (!*taken && e.name().is_some_and(|k| k.value() == key)).then(|| {
                *taken = true;
                *e
            })
        })
    }

    /// The properties nobody took, as parameter bindings (for `use=` gates and agent uses).
    pub(crate) fn rest_as_bindings(&mut self, cx: &mut Cx<'_>) -> Vec<Binding> {
        let mut out = Vec::new();
        for (entry, taken) in &mut self.props {
            if *taken {
                continue;
            }
            *taken = true;
            let Some(key) = entry.name() else { continue };
            let key_span = cx.span(key.span());
            if let Some(value) = values::scalar(cx, entry, &format!("parameter `{}`", key.value()))
            {
                out.push(Binding {
                    key: Spanned::new(key.value().to_string(), key_span),
                    value,
                });
            }
        }
        out
    }

    /// Reports every property nobody took: each setting has an effect or is an error.
    pub(crate) fn finish(&mut self, cx: &mut Cx<'_>, allowed: &[&str]) {
        for (entry, taken) in &self.props {
            if *taken {
                continue;
            }
            let Some(key) = entry.name() else { continue };
            cx.push(
                Diagnostic::error(
                    "mvk::unknown-property",
                    format!("unknown property `{}` on `{}`", key.value(), self.name.node),
                )
                .at(cx.span(entry.span()), "not a property of this node")
                .help(suggest(
                    &format!("`{}` takes", self.name.node),
                    key.value(),
                    allowed,
                )),
            );
        }
    }

    /// Exactly `n` arguments, or an error that shows the expected form.
    pub(crate) fn expect_args(&self, cx: &mut Cx<'_>, n: usize, usage: &str) -> bool {
        self.expect_args_between(cx, n, n, usage)
    }

    pub(crate) fn expect_args_between(
        &self,
        cx: &mut Cx<'_>,
        min: usize,
        max: usize,
        usage: &str,
    ) -> bool {
        let got = self.args.len();
        if (min..=max).contains(&got) {
            return true;
        }
        let span = if got > max {
            cx.span(self.args[max].span())
        } else {
            self.head
        };
        let expected = match (min, max) {
            (a, b) if a == b => format!("{a} argument{}", if a == 1 { "" } else { "s" }),
            (a, usize::MAX) => format!("at least {a} argument{}", if a == 1 { "" } else { "s" }),
            (a, b) => format!("{a} to {b} arguments"),
        };
        cx.push(
            Diagnostic::error(
                "mvk::wrong-arguments",
                format!("`{}` takes {expected}, found {got}", self.name.node),
            )
            .at(
                span,
                if got > max {
                    "unexpected argument"
                } else {
                    "arguments missing"
                },
            )
            .help(format!("write it as: {usage}")),
        );
        false
    }

    /// Refuses a `{ … }` block on a node that takes none.
    pub(crate) fn no_children(&self, cx: &mut Cx<'_>) {
        if let Some(children) = self.node.children() {
            cx.push(
                Diagnostic::error(
                    "mvk::unexpected-children",
                    format!("`{}` takes no `{{ … }}` block", self.name.node),
                )
                .at(cx.span(children.span()), "unexpected block")
                .help("remove the braces and what is inside them"),
            );
        }
    }

    pub(crate) fn children(&self) -> &'n [KdlNode] {
        self.node.children().map_or(&[], KdlDocument::nodes)
    }
}

/// An unknown child node, with the nodes that block accepts.
pub(crate) fn unknown_node(cx: &mut Cx<'_>, view: &NodeView<'_>, inside: &str, allowed: &[&str]) {
    cx.push(
        Diagnostic::error(
            "mvk::unknown-node",
            format!("unknown node `{}` in {inside}", view.name.node),
        )
        .at(view.name.span, "not known here")
        .help(suggest(
            &format!("{inside} may contain"),
            &view.name.node,
            allowed,
        )),
    );
}

/// A node that may appear once per block, given again.
pub(crate) fn duplicate_node(cx: &mut Cx<'_>, view: &NodeView<'_>, first: Span, hint: &str) {
    cx.push(
        Diagnostic::error(
            "mvk::duplicate-node",
            format!("`{}` is given twice", view.name.node),
        )
        .at(view.name.span, "given again here")
        .also(first, "first given here")
        .help(hint.to_string()),
    );
}

/// The string arguments of a node such as `scope "a" "b"`.
pub(crate) fn string_args(
    cx: &mut Cx<'_>,
    view: &NodeView<'_>,
    what: &str,
) -> Vec<Spanned<String>> {
    view.args
        .iter()
        .filter_map(|e| values::nonempty(cx, e, what))
        .collect()
}

/// The index of the word a shell reads as code in `argv` (`sh -c SCRIPT …`, `bash -ec …`), if
/// its program is a shell: a `{{placeholder}}` there would run the value (a task's reason, a
/// reviewer's text) as shell code, where a word of its own is only ever an argument.
pub(crate) fn shell_code_word<S: AsRef<str>>(argv: &[S]) -> Option<usize> {
    let program = argv.first()?.as_ref();
    let name = program.rsplit('/').next().unwrap_or(program);
    if !matches!(
        name,
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "ash" | "fish"
    ) {
        return None;
    }
    let flag = argv.iter().skip(1).position(|w| {
        let w = w.as_ref();
        w.starts_with('-') && !w.starts_with("--") && w.contains('c')
    })?;
    // The script is the word after the flag (`position` counted from the second word).
    Some(flag + 2).filter(|&i| i < argv.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(text: &str) -> Vec<&'static str> {
        let mut diags = Diagnostics::default();
        parse(FileId(0), text, &mut diags);
        diags.iter().map(|d| d.code).collect()
    }

    /// Found by the `compile` fuzz target: the KDL parser recursed once per `{` and overflowed
    /// the stack (a SIGSEGV, no diagnostic) on a few thousand nested blocks.
    #[test]
    fn the_shell_code_word_is_the_one_after_dash_c() {
        assert_eq!(shell_code_word(&["sh", "-c", "echo $0", "x"]), Some(2));
        assert_eq!(shell_code_word(&["/bin/bash", "-ec", "x"]), Some(2));
        assert_eq!(shell_code_word(&["bash", "--norc", "-c", "x"]), Some(3));
        assert_eq!(shell_code_word(&["sh", "script.sh", "-c"]), None);
        assert_eq!(shell_code_word(&["gh", "-c", "x"]), None);
        assert_eq!(shell_code_word(&["sh", "-c"]), None);
    }

    #[test]
    fn deep_nesting_is_a_diagnostic_not_a_stack_overflow() {
        let text = format!("{}{}", "a{".repeat(5_000), "}".repeat(5_000));
        assert_eq!(codes(&text), ["mvk::too-deep"]);
        assert_eq!(codes(&"{".repeat(5_000)), ["mvk::too-deep"]);
    }

    /// Found by the `compile` fuzz target: KDL's error recovery recurses once per syntax error,
    /// and its comment parser once per character, and files of stray characters or long
    /// comments overflowed the stack. The largest piece the parser is handed, made of each of
    /// the worst patterns measured, must come back as syntax errors or a document; `}` alone
    /// overflowed the 256 MiB thread of before in a debug build.
    #[test]
    fn the_largest_pieces_of_the_worst_patterns_parse_without_overflowing() {
        let stray = format!("a {{\n{}\n}}", "}".repeat(PIECE_MAX - 6));
        let comment = format!("a /*{}*/", "*".repeat(PIECE_MAX - 6));
        let equals = format!("a {{\n{}\n}}", "a=".repeat((PIECE_MAX - 6) / 2));
        for text in [stray, equals] {
            assert_eq!(text.len(), PIECE_MAX);
            let codes = codes(&text);
            assert!(
                codes.len() > 1_000 && codes.iter().all(|c| *c == "mvk::kdl-syntax"),
                "{} codes, first {:?}",
                codes.len(),
                codes.first()
            );
        }
        assert_eq!(comment.len(), PIECE_MAX);
        let mut diags = Diagnostics::default();
        parse(FileId(0), &comment, &mut diags);
        assert!(diags.iter().all(|d| d.code != "mvk::kdl-syntax"));
    }

    /// A file of 2 MB, half of it stray characters: on one line it is one node too large to
    /// parse, refused as such; spread over lines (at the top or in a flow's block) each piece
    /// is parsed on the bounded stack and the strays are syntax errors. Never an overflow.
    #[test]
    fn a_megabyte_of_stray_characters_is_a_diagnostic_not_an_overflow() {
        let honest = flow(8_500);
        assert!(honest.len() > 1 << 20, "{}", honest.len());
        for stray in [")", "}", "a="] {
            let junk = stray.repeat((1 << 20) / stray.len());
            let one_line = format!("{honest}{junk}\n");
            assert_eq!(codes(&one_line), ["mvk::too-large"], "{stray}");
            let lines = junk
                .as_bytes()
                .chunks(1_000)
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect::<Vec<_>>()
                .join("\n");
            let in_flow = format!("flow g {{\n{lines}\n}}\n{honest}");
            for text in [format!("{honest}{lines}\n"), in_flow] {
                let codes = codes(&text);
                assert!(
                    codes.len() > 1_000 && codes.iter().all(|c| *c == "mvk::kdl-syntax"),
                    "{stray}: {} codes, first {:?}",
                    codes.len(),
                    codes.first()
                );
            }
        }
    }

    /// A generated flow of `n` tasks, as `benches/compile.sh` makes them.
    fn flow(n: usize) -> String {
        let mut s = String::from(
            "agent bot timeout=\"5m\" { run \"sh\" \"agent.sh\" \"{{prompt_file}}\"; }\n\
             gate unit { param target default=\"\"; run \"cargo\" \"test\" \"{{target}}\"; }\n\
             flow big {\n  parallel 16\n",
        );
        for i in 0..n {
            let after = if i == 0 {
                String::new()
            } else {
                format!("after t{}; ", i / 2)
            };
            s.push_str(&format!(
                "  task t{i} {{\n    {after}goal \"task {i}\"; agent bot\n    gate g use=unit target=\"--test=t{i}\"; budget iterations=2\n  }}\n"
            ));
        }
        s.push_str("}\n");
        s
    }

    /// A file larger than a piece, parsed piece by piece, gives the syntax tree a single parse
    /// gives, spans included.
    #[test]
    fn a_file_parsed_in_pieces_reads_as_one_parse_of_it() {
        let text = format!(
            "// a generated flow\n{}\n/- flow old {{\n{}}}\n",
            flow(5_000),
            "  task x { goal \"x\"; }\n".repeat(20_000)
        );
        assert!(text.len() > 2 * PIECE_MAX, "{}", text.len());
        let pieces = pieces::split(&text).expect("splits");
        assert!(pieces.len() > 2, "{pieces:?}");
        let mut diags = Diagnostics::default();
        let split = parse(FileId(0), &text, &mut diags);
        assert!(diags.is_empty(), "{:?}", diags.iter().next());
        let (whole, _) = one_parse(text);
        assert_eq!(format!("{split:?}"), whole);
    }

    /// The syntax tree and diagnostics (code, place, message, help) of `text` lowered from one
    /// parse of it, on a thread with room for the parse.
    fn one_parse(text: String) -> (String, Vec<String>) {
        std::thread::Builder::new()
            .stack_size(STACK_FLOOR)
            .spawn(move || {
                let doc: KdlDocument = text.parse().expect("valid KDL");
                let mut diags = Diagnostics::default();
                let mut cx = Cx {
                    file: FileId(0),
                    diags: &mut diags,
                };
                let ast = format!("{:?}", items::lower_file(&mut cx, &doc));
                (ast, described(&diags))
            })
            .expect("spawn")
            .join()
            .expect("join")
    }

    fn described(diags: &Diagnostics) -> Vec<String> {
        diags
            .iter()
            .map(|d| {
                format!(
                    "{} {:?} {} {:?} {:?}",
                    d.code, d.span, d.message, d.help, d.related
                )
            })
            .collect()
    }

    /// A file lowered piece by piece as its parses arrive (a flow child by child, any other
    /// split node put back together first, a block `/-` cut out skipped) says what one parse
    /// lowered at once says, in the same order: state kept across pieces (a `parallel` given
    /// twice, pieces apart) included.
    #[test]
    fn a_file_lowered_piece_by_piece_says_what_one_parse_says() {
        let tasks = |n: usize| "  task x { goal \"x\"; }\n".repeat(n);
        let gates = |n: usize| "    gate g use=unit\n".repeat(n);
        let text = format!(
            "agent bot {{ run \"a\"; }}\n\
             flow big {{\n  parallel 1\n  tsk y\n{}  task huge {{\n{}  }}\n  parallel 2\n{}}}\n\
             loop l {{\n{}}}\n\
             /- flow old {{\n{}}}\n\
             flow empty {{\n{}}}\n",
            tasks(3_000),
            gates(14_000),
            tasks(3_000),
            "  gate g use=unit\n".repeat(15_000),
            tasks(12_000),
            "  budget iterations=2\n".repeat(13_000),
        );
        let pieces = pieces::split(&text).expect("splits");
        let split = pieces
            .iter()
            .filter(|p| matches!(p, Piece::Split { .. }))
            .count();
        assert_eq!(split, 4, "{pieces:?}");
        let mut diags = Diagnostics::default();
        let ast = format!("{:?}", parse(FileId(0), &text, &mut diags));
        let (whole_ast, whole_diags) = one_parse(text);
        let codes: Vec<_> = diags.iter().map(|d| d.code).collect();
        for code in [
            "mvk::unknown-node",
            "mvk::duplicate-node",
            "mvk::empty-flow",
        ] {
            assert!(codes.contains(&code), "{code} not in {codes:?}");
        }
        assert_eq!(described(&diags), whole_diags);
        assert!(ast == whole_ast, "the syntax trees differ");
    }

    /// A syntax error in a piece is reported where it stands in the file, as a single parse
    /// reports it first.
    #[test]
    fn an_error_in_a_piece_is_placed_in_the_file() {
        let text = format!(
            "{}flow x {{\n{}  task t {{ goal ) \"g\"; }}\n}}\n",
            flow(3_000),
            "  task y { goal \"y\"; }\n".repeat(12_000)
        );
        assert!(text.len() > 2 * PIECE_MAX);
        let mut diags = Diagnostics::default();
        parse(FileId(0), &text, &mut diags);
        let first = diags.iter().next().expect("an error");
        assert_eq!(first.code, "mvk::kdl-syntax");
        let whole = std::thread::Builder::new()
            .stack_size(STACK_FLOOR)
            .spawn(move || match text.parse::<KdlDocument>() {
                Ok(_) => None,
                Err(e) => e.diagnostics.first().map(|d| d.span.offset()),
            })
            .expect("spawn")
            .join()
            .expect("join");
        assert_eq!(first.span.map(|s| s.offset), whole, "{first:?}");
    }

    /// What the nesting scan lets through is measured on the parsed document, on the parser's
    /// thread, before anything recurses over it on a small stack.
    #[test]
    fn a_document_nested_too_deep_is_caught_after_the_parse() {
        let at = |depth: usize| format!("{}{}", "a{".repeat(depth), "}".repeat(depth));
        let doc: KdlDocument = at(nesting::MAX_DEPTH).parse().expect("valid KDL");
        assert_eq!(deeper_than(doc.nodes(), nesting::MAX_DEPTH), None);
        let doc: KdlDocument = at(nesting::MAX_DEPTH + 1).parse().expect("valid KDL");
        assert_eq!(
            deeper_than(doc.nodes(), nesting::MAX_DEPTH),
            Some(2 * nesting::MAX_DEPTH + 2)
        );
    }

    #[test]
    fn a_file_over_the_limit_is_refused_before_the_parser() {
        // The limit falls inside the `é`: the span starts where the character does.
        let over = format!("{}é", "x".repeat(MAX_BYTES - 1));
        let mut diags = Diagnostics::default();
        parse(FileId(0), &over, &mut diags);
        let found: Vec<_> = diags
            .iter()
            .map(|d| (d.code, d.span.map(|s| s.offset)))
            .collect();
        assert_eq!(found, [("mvk::too-large", Some(MAX_BYTES - 1))]);
    }
}
