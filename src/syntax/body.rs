//! A `loop` node (or a task's block) in, a [`LoopBody`] out: goal, prompt, scope, seal, gates,
//! review, budget, ladder, merge, agent, sandbox.

use super::ast::{
    BudgetDecl, LadderDecl, LoopBody, LoopDecl, MergeDecl, ReviewDecl, RungDecl, Spanned,
};
use super::items::{agent_from_prop, agent_use, gate, name_arg};
use super::{Cx, NodeView, duplicate_node, string_args, unknown_node, values};
use crate::diag::{Diagnostic, suggest};

pub(crate) const LOOP_CHILDREN: &[&str] = &[
    "goal",
    "prompt",
    "scope",
    "seal",
    "gate",
    "review",
    "budget",
    "ladder",
    "merge",
    "agent",
    "uncertified",
    "sandbox",
    "lessons",
    "notify",
];

pub(crate) fn loop_decl(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> Option<LoopDecl> {
    let usage = "loop NAME { goal \"…\"; gate … }";
    view.finish(cx, &[]);
    let name = if view.expect_args(cx, 1, usage) {
        name_arg(cx, view, usage)
    } else {
        None
    };
    let mut body = LoopBody::default();
    for child in view.children() {
        let mut cv = NodeView::new(cx, child);
        if !body_child(cx, &mut body, &mut cv) {
            unknown_node(cx, &cv, "a loop", LOOP_CHILDREN);
            note_misspelt(&mut body, &cv.name.node);
        }
    }
    Some(LoopDecl {
        name: name?,
        body,
        span: view.head,
    })
}

/// Records the setting an unknown node most likely meant (`gaol` → `goal`) as written, so that
/// the typo is the one error reported instead of also "no goal".
pub(crate) fn note_misspelt(body: &mut LoopBody, name: &str) {
    if let Some(meant) = crate::diag::did_you_mean(name, LOOP_CHILDREN.iter().copied()) {
        body.written.push(meant);
    }
}

/// Lowers one child of a loop body into `body`; returns false if the node is not a loop setting.
pub(crate) fn body_child(cx: &mut Cx<'_>, body: &mut LoopBody, view: &mut NodeView<'_>) -> bool {
    if let Some(setting) = LOOP_CHILDREN.iter().find(|c| **c == view.name.node) {
        body.written.push(setting);
    }
    match view.name.node.as_str() {
        "goal" => {
            if let Some(first) = &body.goal {
                duplicate_node(
                    cx,
                    view,
                    first.span,
                    "a loop has one goal; write it in one string (use \"\"\" for several lines)",
                );
            } else {
                body.goal = single_string(
                    cx,
                    view,
                    "goal \"what the change must achieve\"",
                    "the goal",
                );
            }
        }
        "prompt" => {
            if let Some(first) = &body.prompt {
                duplicate_node(cx, view, first.span, "a loop has one prompt template");
            } else {
                body.prompt =
                    single_string(cx, view, "prompt \"prompts/task.hbs\"", "a template path");
            }
        }
        "scope" | "seal" => {
            let is_scope = view.name.node == "scope";
            let slot = if is_scope {
                &mut body.scope
            } else {
                &mut body.seal
            };
            if let Some(first) = slot.as_ref() {
                duplicate_node(
                    cx,
                    view,
                    first.span,
                    "list every path in one node: scope \"a/**\" \"b.rs\"",
                );
                return true;
            }
            view.no_children(cx);
            let new = view
                .take("new")
                .and_then(|e| values::boolean(cx, e, "`new`"))
                .is_some_and(|b| b.node);
            view.finish(cx, &["new"]);
            let usage = if is_scope {
                "scope \"src/**\" …"
            } else {
                "seal \"tests/**\" …"
            };
            if view.expect_args_between(cx, 1, usize::MAX, usage) {
                let paths = string_args(cx, view, "a path or glob");
                *slot = Some(Spanned::new(paths, view.head));
                if is_scope {
                    body.scope_new = new;
                } else {
                    body.seal_new = new;
                }
            }
        }
        "gate" => {
            if let Some(g) = gate(cx, view) {
                body.gates.push(g);
            }
        }
        "review" => {
            if let Some(first) = &body.review {
                duplicate_node(cx, view, first.span, "a loop has one reviewer");
            } else {
                body.review = review(cx, view);
            }
        }
        "budget" => {
            if let Some(first) = body.budget.as_ref().and_then(|b| b.span) {
                duplicate_node(cx, view, first, "write every limit in one `budget` node");
            } else {
                body.budget = Some(budget(cx, view, false));
            }
        }
        "ladder" => {
            if let Some(first) = &body.ladder {
                duplicate_node(
                    cx,
                    view,
                    first.span,
                    "a loop has one ladder; list every rung in it",
                );
            } else {
                body.ladder = ladder(cx, view);
            }
        }
        "merge" => {
            if let Some(first) = &body.merge {
                duplicate_node(cx, view, first.span, "a loop merges once; keep one `merge`");
            } else {
                body.merge = merge(cx, view);
            }
        }
        "agent" => {
            if let Some(first) = &body.agent {
                duplicate_node(
                    cx,
                    view,
                    first.span,
                    "a loop has one agent; use a `ladder` to try several",
                );
            } else {
                body.agent = agent_use(cx, view);
            }
        }
        "uncertified" => {
            if let Some(first) = &body.uncertified {
                duplicate_node(cx, view, first.span, "say it once");
            } else {
                view.no_children(cx);
                view.finish(cx, &[]);
                if view.expect_args(cx, 1, "uncertified #true") {
                    body.uncertified = values::boolean(cx, view.args[0], "`uncertified`");
                }
            }
        }
        "lessons" => {
            if let Some(first) = &body.lessons {
                duplicate_node(cx, view, first.span, "a loop keeps its lessons in one file");
            } else {
                body.lessons =
                    single_string(cx, view, "lessons \"loops/LESSONS.md\"", "a file path");
            }
        }
        "sandbox" => {
            let decl = super::sandbox::sandbox(cx, view, body.sandbox.as_ref());
            body.sandbox = body.sandbox.take().or(decl);
        }
        "notify" => {
            if let Some(n) = super::notify::notify(cx, view, &body.notify) {
                body.notify.push(n);
            }
        }
        _ => return false,
    }
    true
}

fn single_string(
    cx: &mut Cx<'_>,
    view: &mut NodeView<'_>,
    usage: &str,
    what: &str,
) -> Option<Spanned<String>> {
    view.no_children(cx);
    view.finish(cx, &[]);
    if !view.expect_args(cx, 1, usage) {
        return None;
    }
    values::nonempty(cx, view.args[0], what)
}

fn review(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> Option<ReviewDecl> {
    let usage = "review agent=NAME rounds=2";
    view.no_children(cx);
    let rounds = view
        .take("rounds")
        .and_then(|e| values::small_count(cx, e, "`rounds`", 0));
    let prompt = view
        .take("prompt")
        .and_then(|e| values::nonempty(cx, e, "`prompt`"));
    if !view.args.is_empty() {
        view.expect_args(cx, 0, usage);
    }
    let agent = agent_from_prop(cx, view, usage)?;
    Some(ReviewDecl {
        agent,
        rounds,
        prompt,
        span: view.head,
    })
}

const BUDGET_KEYS: &[&str] = &[
    "iterations",
    "tokens",
    "usd",
    "wall",
    "same-failure",
    "context-tokens",
    "warn-at",
];
const FLOW_BUDGET_KEYS: &[&str] = &["tokens", "usd", "wall", "warn-at"];

/// `budget …`; a flow's budget (shared by its tasks) takes only `tokens`, `usd`, `wall` and
/// `warn-at`.
pub(crate) fn budget(cx: &mut Cx<'_>, view: &mut NodeView<'_>, for_flow: bool) -> BudgetDecl {
    view.no_children(cx);
    if !view.args.is_empty() {
        view.expect_args(cx, 0, "budget iterations=5 usd=2.0 wall=\"30m\"");
    }
    let mut b = BudgetDecl {
        span: Some(view.head),
        ..BudgetDecl::default()
    };
    b.tokens = view
        .take("tokens")
        .and_then(|e| values::count(cx, e, "`tokens`", 1, u64::MAX >> 1));
    b.usd_micros = view.take("usd").and_then(|e| values::usd(cx, e, "`usd`"));
    b.wall = view
        .take("wall")
        .and_then(|e| values::duration(cx, e, "`wall`"));
    b.warn_at = view.take("warn-at").and_then(|e| {
        values::fraction(
            cx,
            e,
            "`warn-at`",
            "warn-at=0.8 to be told when 80% of a limit is spent",
        )
    });
    if for_flow {
        for key in ["iterations", "same-failure", "context-tokens"] {
            if let Some(e) = view.take(key) {
                cx.push(
                    Diagnostic::error(
                        "mvk::flow-budget-key",
                        format!("a flow's budget cannot set `{key}`"),
                    )
                    .at(cx.span(e.span()), "per-task limit")
                    .help(format!(
                        "a flow's budget is shared by its tasks and takes {}; set `{key}` in each task's `budget`",
                        FLOW_BUDGET_KEYS.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
                    )),
                );
            }
        }
        view.finish(cx, FLOW_BUDGET_KEYS);
        return b;
    }
    b.iterations = view
        .take("iterations")
        .and_then(|e| values::small_count(cx, e, "`iterations`", 1));
    b.same_failure = view
        .take("same-failure")
        .and_then(|e| values::small_count(cx, e, "`same-failure`", 1));
    b.context_tokens = view
        .take("context-tokens")
        .and_then(|e| values::small_count(cx, e, "`context-tokens`", 256));
    view.finish(cx, BUDGET_KEYS);
    b
}

fn ladder(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> Option<LadderDecl> {
    view.finish(cx, &[]);
    view.expect_args(cx, 0, "ladder { rung agent=NAME attempts=3; rung human }");
    let mut rungs = Vec::new();
    for child in view.children() {
        let mut cv = NodeView::new(cx, child);
        if cv.name.node != "rung" {
            unknown_node(cx, &cv, "a ladder", &["rung"]);
            continue;
        }
        if let Some(r) = rung(cx, &mut cv) {
            rungs.push(Spanned::new(r, cv.head));
        }
    }
    if view.children().is_empty() {
        cx.push(
            Diagnostic::error("mvk::empty-ladder", "a ladder needs at least one rung")
                .at(view.head, "no rungs")
                .help("write: ladder { rung agent=NAME attempts=3; rung human }"),
        );
        return None;
    }
    Some(LadderDecl {
        rungs,
        span: view.head,
    })
}

fn rung(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> Option<RungDecl> {
    let usage = "rung agent=NAME attempts=3 | rung human";
    view.no_children(cx);
    if let Some(first) = view.args.first() {
        let is_human = matches!(first.value(), kdl::KdlValue::String(s) if s == "human");
        if !is_human || view.args.len() > 1 {
            let found = first.value().as_string().unwrap_or("a value").to_string();
            cx.push(
                Diagnostic::error(
                    "mvk::wrong-arguments",
                    format!("a rung's argument can only be `human`, found `{found}`"),
                )
                .at(cx.span(first.span()), "unexpected argument")
                .help(format!("write it as: {usage}")),
            );
            return None;
        }
        view.finish(cx, &[]);
        return Some(RungDecl::Human);
    }
    let attempts = view
        .take("attempts")
        .and_then(|e| values::small_count(cx, e, "`attempts`", 1));
    let agent = agent_from_prop(cx, view, usage)?;
    Some(RungDecl::Agent { agent, attempts })
}

const MERGE_PROPS: &[&str] = &["into", "strategy", "remote", "title", "dependents", "poll"];
const MERGE_CHILDREN: &[&str] = &["gate", "body", "open", "find", "state"];

fn merge(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> Option<MergeDecl> {
    let usage = "merge into=main strategy=squash { gate … }";
    let into = view
        .take("into")
        .and_then(|e| values::nonempty(cx, e, "`into`"));
    let strategy = view
        .take("strategy")
        .and_then(|e| values::nonempty(cx, e, "`strategy`"));
    let mut pr = crate::syntax::ast::PrDecl {
        remote: view
            .take("remote")
            .and_then(|e| values::nonempty(cx, e, "`remote`")),
        title: view
            .take("title")
            .and_then(|e| values::nonempty(cx, e, "`title`")),
        dependents: view
            .take("dependents")
            .and_then(|e| values::nonempty(cx, e, "`dependents`")),
        poll: view
            .take("poll")
            .and_then(|e| values::duration(cx, e, "`poll`")),
        ..Default::default()
    };
    view.finish(cx, MERGE_PROPS);
    if !view.args.is_empty() {
        view.expect_args(cx, 0, usage);
    }
    if let Some(s) = &strategy
        && crate::ir::Strategy::parse(&s.node).is_none()
    {
        cx.push(
            Diagnostic::error(
                "mvk::unknown-strategy",
                format!("unknown merge strategy `{}`", s.node),
            )
            .at(s.span, "not a strategy")
            .help(suggest("strategies", &s.node, &crate::ir::Strategy::NAMES)),
        );
    }
    if let Some(d) = &pr.dependents
        && crate::ir::Dependents::parse(&d.node).is_none()
    {
        cx.push(
            Diagnostic::error(
                "mvk::unknown-dependents",
                format!("`dependents` is `stack` or `merged`, not `{}`", d.node),
            )
            .at(d.span, "not a way to start dependents")
            .help(suggest("values", &d.node, &crate::ir::Dependents::NAMES)),
        );
    }
    let mut gates = Vec::new();
    for child in view.children() {
        let mut cv = NodeView::new(cx, child);
        let name = cv.name.node.clone();
        match name.as_str() {
            "gate" => gates.extend(gate(cx, &mut cv)),
            "body" => {
                let usage = "body \"…{{handoff}}…\"";
                if cv.expect_args(cx, 1, usage)
                    && let Some(text) = cv
                        .args
                        .first()
                        .and_then(|e| values::nonempty(cx, e, "the body"))
                {
                    pr.body = Some(text);
                }
                cv.finish(cx, &[]);
            }
            name @ ("open" | "find" | "state") => {
                let argv = crate::syntax::string_args(cx, &cv, "a command's word");
                cv.finish(cx, &[]);
                if argv.is_empty() {
                    cx.push(
                        Diagnostic::error(
                            "mvk::wrong-arguments",
                            format!("`{name}` needs a command: its program and arguments"),
                        )
                        .at(cv.name.span, "no command")
                        .help(format!("e.g. `{name} \"glab\" \"mr\" …`; leave `{name}` out for the GitHub CLI's")),
                    );
                    continue;
                }
                if let Some(i) = crate::syntax::shell_code_word(
                    argv.iter()
                        .map(|w| w.node.as_str())
                        .collect::<Vec<_>>()
                        .as_slice(),
                ) && argv[i].node.contains("{{")
                {
                    cx.push(
                        Diagnostic::error(
                            "mvk::placeholder-in-shell",
                            format!("the `{name}` command's shell script cannot take `{{{{…}}}}` placeholders"),
                        )
                        .at(argv[i].span, "a placeholder in shell code")
                        .help("pass the value as an argument of its own and read it as \"$0\" or \"$1\": `sh -c 'glab mr view \"$0\"' \"{{url}}\"`"),
                    );
                    continue;
                }
                let argv = Some(Spanned::new(argv, cv.head));
                match name {
                    "open" => pr.open = argv,
                    "find" => pr.find = argv,
                    _ => pr.state = argv,
                }
            }
            _ => unknown_node(cx, &cv, "a merge", MERGE_CHILDREN),
        }
    }
    let is_pr = strategy
        .as_ref()
        .is_some_and(|s| crate::ir::Strategy::parse(&s.node) == Some(crate::ir::Strategy::Pr));
    if !is_pr && let Some((name, span)) = pr.first_given() {
        cx.push(
            Diagnostic::error(
                "mvk::pr-setting",
                format!("`{name}` is a setting of pull requests, and this merge opens none"),
            )
            .at(span, "read only with strategy=\"pr\"")
            .help("add strategy=\"pr\" to open a pull request for each accepted change, or remove the setting"),
        );
    }
    if is_pr && let Some(g) = gates.first() {
        cx.push(
            Diagnostic::error(
                "mvk::pr-merge-gate",
                "a merge that opens a pull request has no merged result to gate",
            )
            .at(g.name.span, "gate on the merged result")
            .help("move the gate into the task (it runs on every attempt), or leave the merged result to the forge's CI"),
        );
    }
    Some(MergeDecl {
        into,
        strategy,
        gates,
        pr,
        span: view.head,
    })
}
