//! A `flow` node in, a [`FlowDecl`] out: `parallel`, `continue-on-failure`, a shared `budget`, and
//! its `task`s (a `loop=` file or an inline body; `after`; `each=` fan-out).

use kdl::KdlNode;

use super::ast::{Each, FlowDecl, LoopBody, Spanned, TaskDecl};
use super::body::{LOOP_CHILDREN, body_child, budget, note_misspelt};
use super::items::name_arg;
use super::{Cx, NodeView, duplicate_node, string_args, unknown_node, values};
use crate::diag::Diagnostic;

const FLOW_CHILDREN: &[&str] = &[
    "parallel",
    "continue-on-failure",
    "budget",
    "notify",
    "task",
];

pub(crate) fn flow_decl(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> Option<FlowDecl> {
    let mut flow = FlowLowering::start(cx, view);
    for child in view.children() {
        flow.child(cx, child);
    }
    flow.end(cx)
}

/// A flow lowered child by child: a flow too large for one parse is handed its children a
/// piece at a time (see `syntax::stream`), each piece dropped once lowered.
pub(crate) struct FlowLowering {
    flow: FlowDecl,
    named: bool,
    /// A child named `task` was seen, even one that did not lower.
    saw_task: bool,
}

impl FlowLowering {
    /// The flow's own node, its block aside.
    pub(crate) fn start(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> FlowLowering {
        let usage = "flow NAME { parallel 4; task a { … }; task b loop=\"b.kdl\" { after a } }";
        view.finish(cx, &[]);
        let name = if view.expect_args(cx, 1, usage) {
            name_arg(cx, view, usage)
        } else {
            None
        };
        FlowLowering {
            named: name.is_some(),
            flow: FlowDecl {
                name: name.unwrap_or_else(|| Spanned::new(String::new(), view.head)),
                parallel: None,
                continue_on_failure: None,
                budget: None,
                notify: Vec::new(),
                tasks: Vec::new(),
                span: view.head,
            },
            saw_task: false,
        }
    }

    /// One node of the flow's block, in order.
    pub(crate) fn child(&mut self, cx: &mut Cx<'_>, child: &KdlNode) {
        let flow = &mut self.flow;
        let mut cv = NodeView::new(cx, child);
        match cv.name.node.as_str() {
            "parallel" => {
                if let Some(first) = &flow.parallel {
                    duplicate_node(
                        cx,
                        &cv,
                        first.span,
                        "say once how many tasks may run at a time",
                    );
                    return;
                }
                cv.no_children(cx);
                cv.finish(cx, &[]);
                if cv.expect_args(cx, 1, "parallel 4") {
                    flow.parallel = values::small_count(cx, cv.args[0], "`parallel`", 1);
                }
            }
            "continue-on-failure" => {
                if let Some(first) = &flow.continue_on_failure {
                    duplicate_node(cx, &cv, first.span, "say it once");
                    return;
                }
                cv.no_children(cx);
                cv.finish(cx, &[]);
                if cv.expect_args(cx, 1, "continue-on-failure #true") {
                    flow.continue_on_failure =
                        values::boolean(cx, cv.args[0], "`continue-on-failure`");
                }
            }
            "budget" => {
                if let Some(first) = flow.budget.as_ref().and_then(|b| b.span) {
                    duplicate_node(cx, &cv, first, "write every limit in one `budget` node");
                    return;
                }
                flow.budget = Some(budget(cx, &mut cv, true));
            }
            "notify" => {
                if let Some(n) = super::notify::notify(cx, &mut cv, &flow.notify) {
                    flow.notify.push(n);
                }
            }
            "task" => {
                self.saw_task = true;
                if let Some(t) = task(cx, &mut cv) {
                    flow.tasks.push(t);
                }
            }
            _ => unknown_node(cx, &cv, "a flow", FLOW_CHILDREN),
        }
    }

    /// The flow, once its block has been read to the end.
    pub(crate) fn end(self, cx: &mut Cx<'_>) -> Option<FlowDecl> {
        let flow = self.flow;
        if flow.tasks.is_empty() && !self.saw_task {
            cx.push(
                Diagnostic::error("mvk::empty-flow", "a flow needs at least one task")
                    .at(flow.span, "no tasks")
                    .help(
                        "add a task: task NAME loop=\"file.kdl\", or task NAME { goal …; gate … }",
                    ),
            );
        }
        self.named.then_some(flow)
    }
}

fn task(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> Option<TaskDecl> {
    let usage = "task NAME loop=\"file.kdl\" | task NAME each=\"src/*.rs\" { … }";
    let loop_file = view
        .take("loop")
        .and_then(|e| values::nonempty(cx, e, "`loop`"));
    let mut each = view
        .take("each")
        .and_then(|e| values::nonempty(cx, e, "`each`"))
        .map(|g| {
            let span = g.span;
            Spanned::new(Each::Glob(g), span)
        });
    view.finish(cx, &["loop", "each"]);
    let name = if view.expect_args(cx, 1, usage) {
        name_arg(cx, view, usage)
    } else {
        None
    };
    let mut body = LoopBody::default();
    let mut after = Vec::new();
    for child in view.children() {
        let mut cv = NodeView::new(cx, child);
        match cv.name.node.as_str() {
            "after" => {
                cv.no_children(cx);
                cv.finish(cx, &[]);
                if cv.expect_args_between(cx, 1, usize::MAX, "after TASK …") {
                    after.extend(string_args(cx, &cv, "a task name"));
                }
            }
            "each" => {
                if let Some(first) = &each {
                    duplicate_node(
                        cx,
                        &cv,
                        first.span,
                        "a task fans out over one list: use `each=\"glob\"` or one `each \"a\" \"b\"` node",
                    );
                    continue;
                }
                cv.no_children(cx);
                cv.finish(cx, &[]);
                if cv.expect_args_between(cx, 1, usize::MAX, "each \"item-a\" \"item-b\" …") {
                    each = Some(Spanned::new(
                        Each::List(string_args(cx, &cv, "an item")),
                        cv.head,
                    ));
                }
            }
            _ => {
                if !body_child(cx, &mut body, &mut cv) {
                    let mut allowed = vec!["after", "each"];
                    allowed.extend_from_slice(LOOP_CHILDREN);
                    unknown_node(cx, &cv, "a task", &allowed);
                    note_misspelt(&mut body, &cv.name.node);
                }
            }
        }
    }
    Some(TaskDecl {
        name: name?,
        loop_file,
        each,
        after,
        body,
        span: view.head,
    })
}
