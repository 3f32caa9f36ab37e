//! KDL text in, a typed and spanned syntax tree ([`ast::FileAst`]) out; names are not resolved here.
//!
//! One module per kind of node: [`items`] (imports and definitions), [`body`] (a loop's settings),
//! [`flow`] (flows and tasks), [`sandbox`] (confinement). This stage never touches git or the file system.

pub mod ast;
pub mod body;
pub mod flow;
pub mod items;
pub mod nesting;
pub mod sandbox;
pub mod values;

use kdl::{KdlDocument, KdlEntry, KdlNode};
use miette::SourceSpan;

use crate::diag::{Diagnostic, Diagnostics, suggest};
use crate::source::{FileId, Span};
use ast::{Binding, FileAst, Spanned};

/// The file being lowered and the diagnostics found so far.
pub struct Cx<'a> {
    pub file: FileId,
    pub diags: &'a mut Diagnostics,
}

impl Cx<'_> {
    pub fn span(&self, span: SourceSpan) -> Span {
        Span::new(self.file, span)
    }

    pub fn push(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }
}

/// Parses one file's text; KDL syntax errors and schema errors both land in `diags`.
pub fn parse(file: FileId, text: &str, diags: &mut Diagnostics) -> FileAst {
    if let Some(offset) = nesting::too_deep(text) {
        diags.push(
            Diagnostic::error(
                "mvk::too-deep",
                format!(
                    "blocks nested more than {} deep",
                    nesting::MAX_DEPTH
                ),
            )
            .at(
                Span {
                    file,
                    offset,
                    len: 1,
                },
                "this `{` opens one level too many",
            )
            .help("a loop file nests a few levels (`flow { task { sandbox { … } } }`); close the blocks left open with `}`"),
        );
        return FileAst::default();
    }
    let doc: KdlDocument = match parse_kdl(text) {
        Ok(Ok(doc)) => doc,
        Ok(Err(err)) => {
            let err: kdl::KdlError = err;
            let unclosed_block = err
                .diagnostics
                .iter()
                .any(|d| d.message.as_deref() == Some(NO_CLOSING_BRACE));
            for d in err.diagnostics {
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
            return FileAst::default();
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
            return FileAst::default();
        }
    };
    let mut cx = Cx { file, diags };
    items::lower_file(&mut cx, &doc)
}

/// Stack of the thread the KDL parser runs on: its error recovery recurses once for each stray
/// character left at the end of a document (`)))…` overflowed 8 MiB at 30,000 of them in the
/// `compile` fuzz target), and reserving the stack costs address space only.
const PARSER_STACK: usize = 256 << 20;

/// The KDL parse on a thread of its own, with a stack the input cannot exhaust as easily as the
/// caller's (a test's thread has 2 MiB, a tokio worker's too).
fn parse_kdl(text: &str) -> std::io::Result<Result<KdlDocument, kdl::KdlError>> {
    std::thread::scope(|scope| {
        let parser = std::thread::Builder::new()
            .name("kdl-parse".into())
            .stack_size(PARSER_STACK)
            .spawn_scoped(scope, || text.parse::<KdlDocument>())?;
        // The parser does not panic on input (the fuzz target holds it to that); if it ever
        // did, the panic is carried on to the caller as it would be without the thread.
        Ok(parser
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })
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
pub struct NodeView<'n> {
    pub node: &'n KdlNode,
    pub name: Spanned<String>,
    /// From the node's name to the end of its last entry: what a label should underline.
    pub head: Span,
    pub args: Vec<&'n KdlEntry>,
    props: Vec<(&'n KdlEntry, bool)>,
}

impl<'n> NodeView<'n> {
    pub fn new(cx: &mut Cx<'_>, node: &'n KdlNode) -> NodeView<'n> {
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
    pub fn take(&mut self, key: &str) -> Option<&'n KdlEntry> {
        self.props.iter_mut().find_map(|(e, taken)| {
            (!*taken && e.name().is_some_and(|k| k.value() == key)).then(|| {
                *taken = true;
                *e
            })
        })
    }

    /// The properties nobody took, as parameter bindings (for `use=` gates and agent uses).
    pub fn rest_as_bindings(&mut self, cx: &mut Cx<'_>) -> Vec<Binding> {
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
    pub fn finish(&mut self, cx: &mut Cx<'_>, allowed: &[&str]) {
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
    pub fn expect_args(&self, cx: &mut Cx<'_>, n: usize, usage: &str) -> bool {
        self.expect_args_between(cx, n, n, usage)
    }

    pub fn expect_args_between(
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
    pub fn no_children(&self, cx: &mut Cx<'_>) {
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

    pub fn children(&self) -> &'n [KdlNode] {
        self.node.children().map_or(&[], KdlDocument::nodes)
    }
}

/// An unknown child node, with the nodes that block accepts.
pub fn unknown_node(cx: &mut Cx<'_>, view: &NodeView<'_>, inside: &str, allowed: &[&str]) {
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
pub fn duplicate_node(cx: &mut Cx<'_>, view: &NodeView<'_>, first: Span, hint: &str) {
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
pub fn string_args(cx: &mut Cx<'_>, view: &NodeView<'_>, what: &str) -> Vec<Spanned<String>> {
    view.args
        .iter()
        .filter_map(|e| values::nonempty(cx, e, what))
        .collect()
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
    fn deep_nesting_is_a_diagnostic_not_a_stack_overflow() {
        let text = format!("{}{}", "a{".repeat(5_000), "}".repeat(5_000));
        assert_eq!(codes(&text), ["mvk::too-deep"]);
        assert_eq!(codes(&"{".repeat(5_000)), ["mvk::too-deep"]);
    }

    /// Found by the `compile` fuzz target: KDL's error recovery recursed once per stray
    /// character after the last node and overflowed the caller's stack.
    #[test]
    fn stray_characters_after_the_nodes_are_syntax_errors_not_a_stack_overflow() {
        let codes = codes(&")".repeat(1_000));
        assert!(
            !codes.is_empty() && codes.iter().all(|c| *c == "mvk::kdl-syntax"),
            "{codes:?}"
        );
    }
}
