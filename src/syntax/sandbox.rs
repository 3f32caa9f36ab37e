//! A `sandbox` node in (on a loop, a task or an agent definition); out comes a [`SandboxDecl`]:
//! whether the network stays on, whether confinement is required, the paths granted for
//! writing and the variables passed through.

use super::ast::{SandboxDecl, Spanned};
use super::{Cx, NodeView, duplicate_node, string_args, unknown_node, values};
use crate::diag::Diagnostic;

const PROPS: &[&str] = &["network", "required"];
const CHILDREN: &[&str] = &["write", "env"];
const USAGE: &str = "sandbox network=#false required=#true { write \"/path\"; env \"NAME\" }";

/// Lowers `sandbox …`; `first` is where an earlier `sandbox` of the same node was written.
pub(crate) fn sandbox(
    cx: &mut Cx<'_>,
    view: &mut NodeView<'_>,
    first: Option<&SandboxDecl>,
) -> Option<SandboxDecl> {
    if let Some(first) = first {
        duplicate_node(
            cx,
            view,
            first.span,
            "write every grant in one `sandbox` node",
        );
        return None;
    }
    let network = view
        .take("network")
        .and_then(|e| values::boolean(cx, e, "`network`"));
    let required = view
        .take("required")
        .and_then(|e| values::boolean(cx, e, "`required`"));
    view.finish(cx, PROPS);
    if !view.args.is_empty() {
        view.expect_args(cx, 0, USAGE);
    }
    let mut write = Vec::new();
    let mut env = Vec::new();
    for child in view.children() {
        let mut cv = NodeView::new(cx, child);
        match cv.name.node.as_str() {
            "write" => {
                cv.no_children(cx);
                cv.finish(cx, &[]);
                if cv.expect_args_between(
                    cx,
                    1,
                    usize::MAX,
                    "write \"/var/cache/tool\" \"~/.cache/pip\"",
                ) {
                    write.extend(
                        string_args(cx, &cv, "a path")
                            .into_iter()
                            .filter(|p| write_path_ok(cx, p)),
                    );
                }
            }
            "env" => {
                cv.no_children(cx);
                if let Some(entry) = cv.node.entries().iter().find(|e| e.name().is_some()) {
                    cx.push(
                        Diagnostic::error(
                            "mvk::sandbox-env-value",
                            "inside `sandbox`, `env` names variables to pass through; it sets no value",
                        )
                        .at(cx.span(entry.span()), "a value")
                        .help("write `env \"NAME\"` to let mvk's own `NAME` through; set a value with `env NAME=\"value\"` in the agent or gate"),
                    );
                    continue;
                }
                cv.finish(cx, &[]);
                if cv.expect_args_between(cx, 1, usize::MAX, "env \"ANTHROPIC_API_KEY\" …") {
                    env.extend(
                        string_args(cx, &cv, "a variable name")
                            .into_iter()
                            .filter(|n| super::items::env_name_ok(cx, &n.node, n.span)),
                    );
                }
            }
            _ => unknown_node(cx, &cv, "a sandbox", CHILDREN),
        }
    }
    Some(SandboxDecl {
        network,
        required,
        write,
        env,
        span: view.head,
    })
}

/// A granted path is absolute or under the home directory: a path relative to the repository
/// would grant the main checkout, which is what the sandbox protects.
fn write_path_ok(cx: &mut Cx<'_>, p: &Spanned<String>) -> bool {
    let text = p.node.as_str();
    let ok = (text.starts_with('/') || text.starts_with("~/") || text == "~")
        && !text.split('/').any(|part| part == "..");
    if !ok {
        cx.push(
            Diagnostic::error(
                "mvk::sandbox-path",
                format!("`{text}` is not a path the sandbox can grant"),
            )
            .at(p.span, "not absolute")
            .help("write an absolute path (\"/var/cache/tool\") or one under the home directory (\"~/.cargo/registry\"), without `..`; the worktree and a temporary directory are always writable"),
        );
    }
    ok
}
