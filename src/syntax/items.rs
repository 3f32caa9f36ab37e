//! Top-level KDL nodes in, syntax items out: `import`, `gate` and `agent` definitions, and the
//! pieces they share (`run`/`sh` commands, `env`, `param`, `doc`).

#[cfg(test)]
use super::ast::FileAst;
#[cfg(test)]
use kdl::KdlDocument;
use kdl::KdlNode;

use super::ast::{
    AgentDecl, AgentUse, Command, EnvVar, GateDecl, GitSource, Item, ParamDecl, PriceDecl, Spanned,
};
use super::{Cx, NodeView, body, duplicate_node, flow, string_args, unknown_node, values};
use crate::diag::Diagnostic;

const TOP_LEVEL: &[&str] = &["import", "gate", "agent", "loop", "flow", "price", "notify"];

/// A whole parsed document at once: what the lowering piece by piece (`syntax::stream`) must
/// give the same as.
#[cfg(test)]
pub(crate) fn lower_file(cx: &mut Cx<'_>, doc: &KdlDocument) -> FileAst {
    let mut items = Vec::new();
    for node in doc.nodes() {
        items.extend(lower_node(cx, node));
    }
    FileAst { items }
}

/// One top-level node.
pub(crate) fn lower_node(cx: &mut Cx<'_>, node: &KdlNode) -> Option<Item> {
    let mut view = NodeView::new(cx, node);
    match view.name.node.as_str() {
        "import" => import(cx, &mut view).map(Item::Import),
        "gate" => gate(cx, &mut view).map(Item::Gate),
        "agent" => agent_decl(cx, &mut view).map(Item::Agent),
        "loop" => body::loop_decl(cx, &mut view).map(Item::Loop),
        "flow" => flow::flow_decl(cx, &mut view).map(Item::Flow),
        "price" => price_decl(cx, &mut view).map(Item::Price),
        "notify" => super::notify::notify(cx, &mut view, &[]).map(Item::Notify),
        _ => {
            unknown_node(cx, &view, "a loop file", TOP_LEVEL);
            None
        }
    }
}

/// The one name argument of a definition node (`gate NAME`, `loop NAME`, …), checked for form.
pub(crate) fn name_arg(
    cx: &mut Cx<'_>,
    view: &NodeView<'_>,
    usage: &str,
) -> Option<Spanned<String>> {
    let Some(first) = view.args.first() else {
        cx.push(
            Diagnostic::error(
                "mvk::missing-name",
                format!("`{}` needs a name", view.name.node),
            )
            .at(view.head, "no name")
            .help(format!("write it as: {usage}")),
        );
        return None;
    };
    let name = values::nonempty(cx, first, "a name")?;
    let ok = name
        .node
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && name.node.starts_with(|c: char| c.is_ascii_alphabetic());
    if !ok {
        cx.push(
            Diagnostic::error(
                "mvk::bad-name",
                format!("`{}` is not a valid name", name.node),
            )
            .at(name.span, "invalid name")
            .help("names start with a letter and use letters, digits, `-` and `_`"),
        );
        return None;
    }
    Some(name)
}

fn import(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> Option<super::ast::Import> {
    let usage = "import \"path/to/file.kdl\" [git=\"URL\" rev=\"TAG\"] as=name";
    view.no_children(cx);
    let alias = view
        .take("as")
        .and_then(|e| values::nonempty(cx, e, "`as`"));
    let url = view
        .take("git")
        .map(|e| values::nonempty(cx, e, "`git`").ok_or(()));
    let rev = view
        .take("rev")
        .map(|e| values::nonempty(cx, e, "`rev`").ok_or(()));
    let errors = cx.diags.error_count();
    view.finish(cx, &["as", "git", "rev"]);
    // A misspelt property may be a misspelt `rev`: better not to fetch what was not meant.
    if cx.diags.error_count() > errors && url.is_some() {
        return None;
    }
    if !view.expect_args(cx, 1, usage) {
        return None;
    }
    let path = values::nonempty(cx, view.args[0], "an import path")?;
    if let Some(alias) = &alias {
        let ok = alias.node.starts_with(|c: char| c.is_ascii_alphabetic())
            && alias
                .node
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !ok {
            cx.push(
                Diagnostic::error("mvk::bad-name", format!("`{}` is not a valid namespace", alias.node))
                    .at(alias.span, "invalid namespace")
                    .help("a namespace starts with a letter and uses letters, digits, `-` and `_`; it is written before a `.` as in `use=ns.gate`"),
            );
            return None;
        }
    }
    let git = match (url, rev) {
        (None, None) => None,
        (Some(Ok(url)), rev) => {
            let rev = match rev {
                Some(Ok(rev)) => Some(rev),
                Some(Err(())) => return None,
                None => None,
            };
            Some(git_source(cx, &path, url, rev)?)
        }
        (Some(Err(())), _) | (None, Some(Err(()))) => return None,
        (None, Some(Ok(rev))) => {
            cx.push(
                Diagnostic::error("mvk::rev-without-git", "`rev` is given without `git`")
                    .at(rev.span, "a rev of which repository?")
                    .help("name the repository too: import \"gates.kdl\" git=\"file:///srv/git/gates.git\" rev=\"v1\""),
            );
            return None;
        }
    };
    Some(super::ast::Import {
        path,
        alias,
        git,
        span: view.head,
    })
}

/// Checks the form of a git import: a URL or absolute path, and a path inside the repository.
fn git_source(
    cx: &mut Cx<'_>,
    path: &Spanned<String>,
    url: Spanned<String>,
    rev: Option<Spanned<String>>,
) -> Option<GitSource> {
    if !(url.node.contains("://") || url.node.starts_with('/')) {
        cx.push(
            Diagnostic::error(
                "mvk::bad-git-url",
                format!("`{}` is not a repository URL", url.node),
            )
            .at(url.span, "not a URL or an absolute path")
            .help("write a URL such as \"file:///srv/git/gates.git\" or an absolute path; a relative path would depend on where mvk is started"),
        );
        return None;
    }
    let p = &path.node;
    let escapes = p
        .split('/')
        .try_fold(0usize, |depth, part| match part {
            ".." => depth.checked_sub(1),
            "" | "." => Some(depth),
            _ => Some(depth + 1),
        })
        .is_none();
    if p.starts_with('/') || p.starts_with("std/") || escapes {
        cx.push(
            Diagnostic::error(
                "mvk::bad-import-path",
                format!("`{p}` is not a path inside the repository"),
            )
            .at(path.span, "the file to read from the repository")
            .help("with `git=`, the path names a file relative to the repository's root, such as \"gates/rust.kdl\"; import `std/…` without `git=`"),
        );
        return None;
    }
    Some(GitSource { url, rev })
}

/// What a `gate` or `agent` block may hold besides its command.
struct Shared {
    command: Option<Spanned<Command>>,
    env: Vec<EnvVar>,
    params: Vec<ParamDecl>,
    doc: Option<String>,
    rate_limits: Vec<Spanned<String>>,
    sandbox: Option<super::ast::SandboxDecl>,
}

fn shared_children(cx: &mut Cx<'_>, view: &NodeView<'_>, inside: &str, allowed: &[&str]) -> Shared {
    let mut out = Shared {
        command: None,
        env: Vec::new(),
        params: Vec::new(),
        doc: None,
        rate_limits: Vec::new(),
        sandbox: None,
    };
    let mut doc_span = None;
    for child in view.children() {
        let mut cv = NodeView::new(cx, child);
        let name = cv.name.node.clone();
        if !allowed.contains(&name.as_str()) {
            unknown_node(cx, &cv, inside, allowed);
            continue;
        }
        match name.as_str() {
            "run" | "sh" => {
                if let Some(first) = &out.command {
                    duplicate_node(
                        cx,
                        &cv,
                        first.span,
                        "a definition runs one command: keep one `run` or `sh`",
                    );
                    continue;
                }
                out.command = command(cx, &mut cv);
            }
            "env" => out.env.extend(env(cx, &mut cv)),
            "param" => {
                if let Some(p) = param(cx, &mut cv) {
                    if let Some(first) = out.params.iter().find(|q| q.name.node == p.name.node) {
                        cx.push(
                            Diagnostic::error(
                                "mvk::duplicate-name",
                                format!("parameter `{}` is declared twice", p.name.node),
                            )
                            .at(p.name.span, "declared again here")
                            .also(first.name.span, "first declared here")
                            .help("keep one declaration"),
                        );
                    } else {
                        out.params.push(p);
                    }
                }
            }
            "doc" => {
                if let Some(first) = doc_span {
                    duplicate_node(
                        cx,
                        &cv,
                        first,
                        "write the whole description in one `doc` string",
                    );
                    continue;
                }
                doc_span = Some(cv.name.span);
                out.doc = doc(cx, &mut cv);
            }
            "rate-limit" => {
                cv.no_children(cx);
                cv.finish(cx, &[]);
                if cv.expect_args_between(cx, 1, usize::MAX, "rate-limit \"regex\" …") {
                    out.rate_limits
                        .extend(string_args(cx, &cv, "a rate-limit pattern"));
                }
            }
            "sandbox" => {
                let decl = super::sandbox::sandbox(cx, &mut cv, out.sandbox.as_ref());
                out.sandbox = out.sandbox.take().or(decl);
            }
            _ => unknown_node(cx, &cv, inside, allowed),
        }
    }
    out
}

fn doc(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> Option<String> {
    view.no_children(cx);
    view.finish(cx, &[]);
    if !view.expect_args(cx, 1, "doc \"what this does\"") {
        return None;
    }
    values::string(cx, view.args[0], "`doc`").map(|s| s.node)
}

/// `run "prog" "arg"…` or `sh "script"`.
pub(crate) fn command(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> Option<Spanned<Command>> {
    view.no_children(cx);
    view.finish(cx, &[]);
    let span = view.head;
    if view.name.node == "sh" {
        if !view.expect_args(cx, 1, "sh \"a shell script\"") {
            return None;
        }
        let script = values::nonempty(cx, view.args[0], "a shell script")?;
        return Some(Spanned::new(Command::Sh(script), span));
    }
    if !view.expect_args_between(cx, 1, usize::MAX, "run \"program\" \"argument\" …") {
        return None;
    }
    let mut argv = Vec::new();
    for (i, e) in view.args.iter().enumerate() {
        let arg = if i == 0 {
            values::nonempty(cx, e, "the program")
        } else {
            values::string(cx, e, "an argument")
        };
        argv.push(arg?);
    }
    Some(Spanned::new(Command::Run(argv), span))
}

/// `env KEY="value" …`
fn env(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> Vec<EnvVar> {
    view.no_children(cx);
    if !view.args.is_empty() {
        cx.push(
            Diagnostic::error(
                "mvk::wrong-arguments",
                "`env` takes properties, not arguments",
            )
            .at(cx.span(view.args[0].span()), "an argument")
            .help("write it as: env NAME=\"value\""),
        );
    }
    let mut out = Vec::new();
    for entry in view.node.entries().iter().filter(|e| e.name().is_some()) {
        let Some(key) = entry.name() else { continue };
        if !env_name_ok(cx, key.value(), cx.span(key.span())) {
            continue;
        }
        if let Some(value) = values::string(
            cx,
            entry,
            &format!("environment variable `{}`", key.value()),
        ) {
            out.push(EnvVar {
                key: Spanned::new(key.value().to_string(), cx.span(key.span())),
                value,
            });
        }
        view.take(key.value());
    }
    if view.node.entries().iter().all(|e| e.name().is_none()) && view.args.is_empty() {
        cx.push(
            Diagnostic::error("mvk::wrong-arguments", "`env` sets no variable")
                .at(view.head, "empty")
                .help("write it as: env NAME=\"value\""),
        );
    }
    out
}

/// Whether `name` can be an environment variable's name; reports it at `span` if not.
pub(crate) fn env_name_ok(cx: &mut Cx<'_>, name: &str, span: crate::source::Span) -> bool {
    let ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        cx.push(
            Diagnostic::error(
                "mvk::bad-name",
                format!("`{name}` is not a valid environment variable name"),
            )
            .at(span, "invalid name")
            .help("environment variable names use letters, digits and `_`, and do not start with a digit"),
        );
    }
    ok
}

/// `param NAME default=VALUE doc="…"`
fn param(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> Option<ParamDecl> {
    let usage = "param NAME default=\"value\" doc=\"what it means\"";
    view.no_children(cx);
    let default = view
        .take("default")
        .and_then(|e| values::scalar(cx, e, "`default`"));
    let doc = view
        .take("doc")
        .and_then(|e| values::string(cx, e, "`doc`"))
        .map(|s| s.node);
    view.finish(cx, &["default", "doc"]);
    if !view.expect_args(cx, 1, usage) {
        return None;
    }
    let name = name_arg(cx, view, usage)?;
    if crate::ir::RESERVED_PARAMS.contains(&name.node.as_str()) {
        cx.push(
            Diagnostic::error(
                "mvk::reserved-name",
                format!("`{}` is a name mvk provides", name.node),
            )
            .at(name.span, "reserved")
            .help(format!(
                "choose another parameter name; these are provided by mvk: {}",
                crate::ir::RESERVED_PARAMS.join(", ")
            )),
        );
        return None;
    }
    Some(ParamDecl {
        name,
        default,
        doc,
        span: view.head,
    })
}

pub(crate) const GATE_PROPS: &[&str] = &["use", "evidence", "timeout"];
const GATE_CHILDREN: &[&str] = &["run", "sh", "env", "doc", "param"];

/// `gate NAME [use=DEF] [evidence=…] [timeout=…] [PARAM=VALUE…] { run …; env …; doc …; param … }`
pub(crate) fn gate(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> Option<GateDecl> {
    let usage = "gate NAME use=DEFINITION | gate NAME { run \"program\" \"arg\" }";
    let uses = view
        .take("use")
        .and_then(|e| values::nonempty(cx, e, "`use`"));
    let evidence = view
        .take("evidence")
        .and_then(|e| values::nonempty(cx, e, "`evidence`"));
    let timeout = view
        .take("timeout")
        .and_then(|e| values::duration(cx, e, "`timeout`"));
    let bindings = if uses.is_some() {
        view.rest_as_bindings(cx)
    } else {
        view.finish(cx, GATE_PROPS);
        Vec::new()
    };
    if let Some(ev) = &evidence
        && crate::ir::EvidenceMode::parse(&ev.node).is_none()
    {
        cx.push(
            Diagnostic::error(
                "mvk::unknown-evidence",
                format!("unknown evidence mode `{}`", ev.node),
            )
            .at(ev.span, "not an evidence mode")
            .help(crate::diag::suggest(
                "evidence modes",
                &ev.node,
                &crate::ir::EvidenceMode::NAMES,
            )),
        );
    }
    let name_ok = view.expect_args(cx, 1, usage);
    let name = if name_ok {
        name_arg(cx, view, usage)
    } else {
        None
    };
    let shared = shared_children(cx, view, "a gate", GATE_CHILDREN);
    let name = name?;
    Some(GateDecl {
        name,
        uses,
        evidence,
        timeout,
        bindings,
        command: shared.command,
        env: shared.env,
        params: shared.params,
        doc: shared.doc,
        span: view.head,
    })
}

pub(crate) const AGENT_PROPS: &[&str] = &["adapter", "timeout"];
const AGENT_CHILDREN: &[&str] = &["run", "sh", "env", "doc", "param", "rate-limit", "sandbox"];

/// A top-level `agent NAME [adapter=…] [timeout=…] { run …; param …; rate-limit … }`.
fn agent_decl(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> Option<AgentDecl> {
    let usage = "agent NAME timeout=\"30m\" { run \"program\" \"{{prompt_file}}\" }";
    let adapter = view
        .take("adapter")
        .and_then(|e| values::nonempty(cx, e, "`adapter`"));
    let timeout = view
        .take("timeout")
        .and_then(|e| values::duration(cx, e, "`timeout`"));
    view.finish(cx, AGENT_PROPS);
    if let Some(a) = &adapter
        && crate::ir::Adapter::parse(&a.node).is_none()
    {
        cx.push(
            Diagnostic::error(
                "mvk::unknown-adapter",
                format!("unknown agent adapter `{}`", a.node),
            )
            .at(a.span, "not an adapter")
            .help(crate::diag::suggest(
                "adapters",
                &a.node,
                &crate::ir::Adapter::NAMES,
            )),
        );
    }
    let name_ok = view.expect_args(cx, 1, usage);
    let name = if name_ok {
        name_arg(cx, view, usage)
    } else {
        None
    };
    let shared = shared_children(cx, view, "an agent", AGENT_CHILDREN);
    let name = name?;
    if shared.command.is_none() {
        cx.push(
            Diagnostic::error(
                "mvk::missing-command",
                format!("agent `{}` has no command", name.node),
            )
            .at(view.head, "no `run` or `sh` inside")
            .help("add a block: agent NAME { run \"program\" \"{{prompt_file}}\" }"),
        );
        return None;
    }
    Some(AgentDecl {
        name,
        adapter,
        timeout,
        command: shared.command,
        env: shared.env,
        params: shared.params,
        rate_limits: shared.rate_limits,
        sandbox: shared.sandbox,
        doc: shared.doc,
        span: view.head,
    })
}

const PRICE_PROPS: &[&str] = &["input", "output", "cached"];

/// A top-level `price "MODEL" input=USD output=USD [cached=USD]` (per million tokens).
fn price_decl(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> Option<PriceDecl> {
    let usage = "price \"gpt-5\" input=1.25 output=10.0 cached=0.125";
    view.no_children(cx);
    let (input, output) = (view.take("input"), view.take("output"));
    let cached = view
        .take("cached")
        .and_then(|e| values::usd(cx, e, "`cached`"));
    view.finish(cx, PRICE_PROPS);
    let name_ok = view.expect_args(cx, 1, usage);
    let model = if name_ok {
        values::nonempty(cx, view.args[0], "a model name")
    } else {
        None
    };
    let mut amount = |entry: Option<&kdl::KdlEntry>, key: &str| match entry {
        Some(e) => values::usd(cx, e, &format!("`{key}`")),
        None => {
            cx.push(
                Diagnostic::error("mvk::missing-property", format!("a price needs `{key}=`"))
                    .at(view.head, format!("no `{key}`"))
                    .help(format!(
                        "give US dollars per million tokens, as the provider publishes them: {usage}"
                    )),
            );
            None
        }
    };
    let (input, output) = (amount(input, "input"), amount(output, "output"));
    Some(PriceDecl {
        model: model?,
        input: input?,
        output: output?,
        cached,
        span: view.head,
    })
}

/// A use of an agent: `agent NAME PARAM=VALUE…` inside a loop (no block).
pub(crate) fn agent_use(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> Option<AgentUse> {
    let usage = "agent NAME model=…";
    view.no_children(cx);
    let bindings = view.rest_as_bindings(cx);
    if !view.expect_args(cx, 1, usage) {
        return None;
    }
    let name = values::nonempty(cx, view.args[0], "an agent name")?;
    Some(AgentUse {
        name,
        bindings,
        span: view.head,
    })
}

/// An agent named by a property (`rung agent=…`, `review agent=…`), its other properties its parameters.
pub(crate) fn agent_from_prop(
    cx: &mut Cx<'_>,
    view: &mut NodeView<'_>,
    usage: &str,
) -> Option<AgentUse> {
    let entry = view.take("agent");
    let bindings = view.rest_as_bindings(cx);
    let Some(entry) = entry else {
        cx.push(
            Diagnostic::error(
                "mvk::missing-property",
                format!("`{}` needs an `agent=`", view.name.node),
            )
            .at(view.head, "no agent named")
            .help(format!("write it as: {usage}")),
        );
        return None;
    };
    let name = values::nonempty(cx, entry, "`agent`")?;
    Some(AgentUse {
        name,
        bindings,
        span: view.head,
    })
}
