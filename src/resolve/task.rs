//! Loop bodies and flows in, [`ir::Task`]s out: a task file's loop overlaid with the task's own
//! settings, fan-outs expanded, defaults written in, the loop-level rules checked, digests sealed.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;

use petgraph::graph::{DiGraph, NodeIndex};

use super::{LoadAs, World};

use crate::diag::{Diagnostic, suggest};
use crate::digest;
use crate::ir::{self, Budget, Merge, Program, ProgramKind, Rung, Strategy, Task, Template};
use crate::source::Span;
use crate::syntax::ast::{BudgetDecl, Each, FlowDecl, Item, LoopBody, LoopDecl, RungDecl, Spanned};

/// A loop body resolved field by field; `None` where the body said nothing.
#[derive(Default)]
struct Partial {
    goal: Option<(String, Span)>,
    prompt: Option<(Template, Span)>,
    scope: Option<(Vec<String>, Span)>,
    seal: Option<(Vec<String>, Span)>,
    gates: Vec<(ir::Gate, Span)>,
    /// Gate nodes written, resolved or not: a failed gate must not also read as "no gates".
    gates_written: usize,
    /// Settings written, valid or not (see [`LoopBody::written`]): no "missing" error for them.
    written: Vec<&'static str>,
    review: Option<(ir::Review, Span)>,
    budget: BudgetDecl,
    ladder: Option<(Vec<(Rung, Span)>, Span)>,
    agent: Option<(ir::Agent, Span)>,
    merge: Option<(Merge, Span)>,
    uncertified: Option<(bool, Span)>,
    sandbox: Option<(ir::Sandbox, Span)>,
    lessons: Option<(String, Span)>,
    /// `new=#true` on the scope or the seal that is in force (see [`paths_match_files`]).
    scope_new: bool,
    seal_new: bool,
    /// Something in the body failed to resolve; later rules stay quiet to avoid noise.
    broken: bool,
}

impl Partial {
    fn wrote(&self, setting: &str) -> bool {
        self.written.contains(&setting)
    }

    /// Settings of `over` replace those of `self`; gates replace by name or are added.
    fn overlay(mut self, over: Partial) -> Partial {
        if over.scope.is_some() {
            self.scope_new = over.scope_new;
        }
        if over.seal.is_some() {
            self.seal_new = over.seal_new;
        }
        macro_rules! take {
            ($($f:ident),*) => { $( if over.$f.is_some() { self.$f = over.$f; } )* };
        }
        take!(
            goal,
            prompt,
            scope,
            seal,
            review,
            ladder,
            agent,
            merge,
            uncertified,
            sandbox,
            lessons
        );
        for (g, span) in over.gates {
            match self.gates.iter_mut().find(|(h, _)| h.name == g.name) {
                Some(slot) => *slot = (g, span),
                None => self.gates.push((g, span)),
            }
        }
        self.gates_written += over.gates_written;
        self.written.extend(over.written);
        let b = over.budget;
        macro_rules! budget {
            ($($f:ident),*) => { $( if b.$f.is_some() { self.budget.$f = b.$f; } )* };
        }
        budget!(
            iterations,
            tokens,
            usd_micros,
            wall,
            same_failure,
            context_tokens,
            warn_at
        );
        if b.span.is_some() {
            self.budget.span = b.span;
        }
        self.broken |= over.broken;
        self
    }
}

pub(crate) fn build_program(world: &mut World, root: usize) -> Option<Program> {
    let items = world.modules[root].ast.items.clone();
    let loops: Vec<&LoopDecl> = items
        .iter()
        .filter_map(|i| if let Item::Loop(l) = i { Some(l) } else { None })
        .collect();
    let flows: Vec<&FlowDecl> = items
        .iter()
        .filter_map(|i| if let Item::Flow(f) = i { Some(f) } else { None })
        .collect();
    let runnable: Vec<(Span, &str)> = loops
        .iter()
        .map(|l| (l.name.span, "loop"))
        .chain(flows.iter().map(|f| (f.name.span, "flow")))
        .collect();
    if runnable.len() > 1 {
        let mut d = Diagnostic::error("mvk::several-runnables", "a file runs one loop or one flow")
            .at(runnable[1].0, format!("a second {}", runnable[1].1))
            .also(runnable[0].0, format!("the first {}", runnable[0].1))
            .help("move the others into files of their own; a flow can run them as tasks with `task NAME loop=\"file.kdl\"`");
        for (span, kind) in &runnable[2..] {
            d = d.also(*span, format!("another {kind}"));
        }
        world.diags.push(d);
        return None;
    }
    let file_span = Span {
        file: world.modules[root].file,
        offset: 0,
        len: 0,
    };
    // A lone loop is the run: its notifications and the file's hear all of it.
    let top = world.notify_top(root);
    if let Some(l) = loops.first() {
        let own = world.notify_block(root, &l.body.notify);
        let notify = super::notify::overlay(&top, own);
        let partial = lower_body(world, root, &l.body, None);
        let mut task = finish(world, &l.name.node, None, Vec::new(), partial, l.name.span)?;
        digest::seal_task(&mut task, &BTreeMap::new());
        let tasks = vec![task];
        let d = digest::program_digest(ProgramKind::Loop, &l.name.node, None, &tasks);
        return Some(Program {
            kind: ProgramKind::Loop,
            name: l.name.node.clone(),
            tasks,
            flow: None,
            digest: d,
            sources: world.sources.clone(),
            span: l.span,
            notify,
        });
    }
    if let Some(f) = flows.first() {
        let own = world.notify_block(root, &f.notify);
        let notify = super::notify::overlay(&top, own);
        return build_flow(world, root, f, notify);
    }
    let d = digest::program_digest(ProgramKind::Library, "", None, &[]);
    Some(Program {
        kind: ProgramKind::Library,
        name: world.file_of(root).name.clone(),
        tasks: Vec::new(),
        flow: None,
        digest: d,
        sources: world.sources.clone(),
        span: file_span,
        notify: Vec::new(),
    })
}

fn repo_path(
    world: &mut World,
    s: &Spanned<String>,
    item: Option<&str>,
    what: &str,
) -> Option<String> {
    let lookup = |n: &str| (n == "item").then(|| item.map(str::to_string)).flatten();
    let text = match super::interp::interpolate(&s.node, &lookup, &[]) {
        Ok(t) => t.into_owned(),
        Err(e) => {
            let known = if item.is_some() {
                vec!["item".to_string()]
            } else {
                Vec::new()
            };
            super::defs::interp_error(world, &e, s.span, what, &known);
            return None;
        }
    };
    let bad = text.starts_with('/') || text.split('/').any(|c| c == "..");
    if bad {
        world.diags.push(
            Diagnostic::error("mvk::path-outside-repo", format!("`{text}` reaches outside the repository"))
                .at(s.span, "absolute or with `..`")
                .help("paths in `scope`, `seal` and `each` are relative to the repository root, e.g. \"tests/**\""),
        );
        return None;
    }
    if let Err(why) = crate::glob::check_syntax(&text) {
        world.diags.push(
            Diagnostic::error("mvk::bad-glob", format!("`{text}` is not a valid glob: {why}"))
                .at(s.span, "invalid glob")
                .help("globs use `*` within a directory, `**` across directories, `?`, `[abc]` and `{a,b}`"),
        );
        return None;
    }
    // The rules the seal, and the generic gates' matcher (`mvk __glob-match`), compile it by at
    // run time: what they refuse would fail every attempt.
    if let Err(crate::glob::PatternError { reason, .. }) = crate::glob::check(&text) {
        world.diags.push(
            Diagnostic::error("mvk::bad-glob", format!("`{text}` is not a path mvk can match: {reason}"))
                .at(s.span, "not a path from the repository root")
                .help("write each path from the repository root, with no `.` component and no `//`, e.g. \"src/**\"; `\"**\"` is the whole repository"),
        );
        return None;
    }
    Some(text.trim_end_matches('/').to_string())
}

/// A `warn-at` in a budget that limits none of what it warns of.
fn warn_at_without_limit(span: Span) -> Diagnostic {
    Diagnostic::warning(
        "mvk::warn-at-without-limit",
        "`warn-at` warns of `tokens`, `usd` and `wall`, and this budget limits none of them",
    )
    .at(span, "never reached")
    .help("add the limit to warn before, e.g. budget usd=5.0 warn-at=0.8")
}

/// Warns for each `scope` or `seal` pattern that covers no file git tracks (`test/**` where the
/// folder is `tests/`): such a seal guards nothing and such a scope lets nothing there be
/// changed, and neither says so at run time. `new=#true` on the node says the paths are to
/// appear (the task creates them). `mvk apply` stops on a seal that guards nothing and on a
/// scope that looks like a misspelt path (`mvk::matches-nothing`); a scope of new files in a new
/// place, which tasks that add a module write all the time, is advice only
/// (`mvk::scope-matches-nothing`).
fn paths_match_files(world: &mut World, task: &Task, scope_new: bool, seal_new: bool) {
    let Ok(files) = world.repo_files() else {
        return;
    };
    // Outside a repository, or in an empty one, there is nothing to judge a path by.
    if files.is_empty() {
        return;
    }
    for (field, patterns, new) in [
        ("scope", &task.scope, scope_new),
        ("seal", &task.seal, seal_new),
    ] {
        if new {
            continue;
        }
        for pattern in patterns {
            // Every file; and the pinned lessons file, which a person creates with `mvk lessons pin`.
            if pattern == "**" || task.lessons.as_deref() == Some(pattern.as_str()) {
                continue;
            }
            let hit = match world.pattern_hits.get(pattern) {
                Some(&hit) => hit,
                None => {
                    let hit = covers_any(pattern, &files);
                    world.pattern_hits.insert(pattern.clone(), hit);
                    hit
                }
            };
            if hit {
                continue;
            }
            let mut help = String::new();
            let roots = match &world.file_roots {
                Some(roots) => Rc::clone(roots),
                None => {
                    let mut roots: Vec<String> = files
                        .iter()
                        .map(|f| f.split_once('/').map_or(f.as_str(), |(r, _)| r).to_string())
                        .collect();
                    roots.dedup();
                    let roots = Rc::new(roots);
                    world.file_roots = Some(Rc::clone(&roots));
                    roots
                }
            };
            let better = nearest_root(pattern, &roots);
            if let Some(better) = &better {
                help.push_str(&format!("did you mean `{better}`? "));
            }
            // A scope is stopped on only when it is a slip of the pen for a place that exists
            // (`scr/**`, `test/**`): `src-tauri/**` or `srcgen/` are new places, not typos.
            let misspelt = better.as_deref().is_some_and(|b| {
                let first = |p: &str| p.split('/').next().unwrap_or_default().to_string();
                edit_distance(&first(pattern), &first(b)) <= 2
            });
            let code = if field == "seal" || misspelt {
                "mvk::matches-nothing"
            } else {
                "mvk::scope-matches-nothing"
            };
            help.push_str(&format!(
                "paths are from the repository's root and must cover a file git tracks; if the task creates them, say so: {field} \"{pattern}\" new=#true"
            ));
            let mut d = Diagnostic::warning(
                code,
                format!(
                    "`{pattern}` in the {field} of `{}` matches no file git tracks",
                    task.name
                ),
            )
            .help(help);
            if let Some(span) = task.meta.field_spans.get(field).or(task.meta.span.as_ref()) {
                d = d.at(
                    *span,
                    if field == "seal" {
                        "guards nothing"
                    } else {
                        "allows no change to any file there is"
                    },
                );
            }
            world.diags.push(d);
        }
    }
}

/// Whether `pattern` covers one of `files` (sorted): a plain path by search, a glob by a scan.
fn covers_any(pattern: &str, files: &[String]) -> bool {
    // The fast path reads a plain path as written; `./tests` or an escape go through the rules.
    if !pattern.contains(['*', '?', '[', '{', '\\']) && !pattern.starts_with("./") {
        let dir = format!("{pattern}/");
        let at = files.partition_point(|f| f.as_str() < pattern);
        return files[at..]
            .iter()
            .take_while(|f| f.starts_with(pattern))
            .any(|f| f == pattern || f.starts_with(&dir));
    }
    // Patterns are anchored at the root: a file the glob covers begins with its literal
    // directories (`pkg/t5` of `pkg/t5/**`). None does: no glob is compiled (a flow of
    // thousands of tasks scoped to places still to be made compiled one each).
    let literal = pattern
        .find(['*', '?', '[', '{', '\\'])
        .map_or(pattern, |at| &pattern[..at]);
    let literal = literal.rfind('/').map_or("", |at| &literal[..at]);
    let plain = !literal.is_empty()
        && literal
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..");
    let candidates = if !plain {
        files
    } else {
        let at = files.partition_point(|f| f.as_str() < literal);
        let end = at + files[at..].partition_point(|f| f.starts_with(literal));
        &files[at..end]
    };
    if candidates.is_empty() {
        return false;
    }
    let Ok(set) = crate::glob::PathSet::new(&[pattern.to_string()]) else {
        return true; // reported as a bad glob already
    };
    candidates.iter().any(|f| set.covers(f))
}

/// The Levenshtein distance of two short names (transposing two letters counts 2).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// `pattern` with its first component replaced by the nearest one the repository has
/// (`test/**` → `tests/**`), when there is one. ROOTS: the tracked files' first components.
fn nearest_root(pattern: &str, roots: &[String]) -> Option<String> {
    let (first, rest) = pattern.split_once('/').unwrap_or((pattern, ""));
    if roots.iter().any(|r| r == first) {
        return None;
    }
    let best = crate::diag::did_you_mean(first, roots.iter().map(String::as_str))?;
    Some(if rest.is_empty() {
        best.to_string()
    } else {
        format!("{best}/{rest}")
    })
}

/// The `lessons` file: one path from the repository root, no glob.
fn lessons_file(
    world: &mut World,
    s: &Spanned<String>,
    item: Option<&str>,
) -> Option<(String, Span)> {
    let path = repo_path(world, s, item, "`lessons`")?;
    if path == "**" || path.contains(['*', '?', '[', '{']) {
        world.diags.push(
            Diagnostic::error(
                "mvk::lessons-glob",
                format!("`{path}` names no single file"),
            )
            .at(s.span, "a glob")
            .help("name one file from the repository root, e.g. lessons \"loops/LESSONS.md\""),
        );
        return None;
    }
    Some((path, s.span))
}

/// The seal with the lessons file in it: the lessons a person pinned are part of the loop's
/// definition, which no attempt may change.
fn sealed_with(mut seal: Vec<String>, lessons: Option<&(String, Span)>) -> Vec<String> {
    if let Some((path, _)) = lessons
        && !crate::glob::PathSet::new(&seal).is_ok_and(|s| s.covers(path))
    {
        seal.push(path.clone());
        seal.sort();
    }
    seal
}

fn paths(
    world: &mut World,
    list: &Spanned<Vec<Spanned<String>>>,
    item: Option<&str>,
    what: &str,
) -> Option<(Vec<String>, Span)> {
    let mut out = Vec::new();
    let mut ok = true;
    for s in &list.node {
        match repo_path(world, s, item, what) {
            Some(p) => out.push(p),
            None => ok = false,
        }
    }
    // Order and repetition carry no meaning; sorting keeps the digest free of them.
    out.sort();
    out.dedup();
    ok.then_some((out, list.span))
}

fn template(
    world: &mut World,
    module: usize,
    path: Option<&Spanned<String>>,
    default: &str,
) -> Option<Template> {
    let (name, text, span) = match path {
        None => (
            default.to_string(),
            Cow::Borrowed(crate::stdlib::get(default).unwrap_or_default()),
            None,
        ),
        Some(p) => {
            let origin = world.origin_for(module, &p.node);
            let (name, text) = match &origin {
                crate::source::Origin::Std(s) => match crate::stdlib::get(s) {
                    Some(t) => (s.clone(), Ok(Cow::Borrowed(t))),
                    None => (
                        s.clone(),
                        Err("the standard library has no such template".to_string()),
                    ),
                },
                crate::source::Origin::Git(g) => (
                    g.name(),
                    world
                        .git
                        .read(&g.url, g.commit, &g.path)
                        .map(Cow::Owned)
                        .map_err(|e| e.to_string()),
                ),
                crate::source::Origin::Disk(d) => {
                    let resolved = match world.confined(d, Some(p.span)) {
                        Ok(r) => r,
                        Err(refused) => {
                            world.diags.push(*refused);
                            return None;
                        }
                    };
                    (
                        crate::source::display_path(d),
                        super::read_bounded(&resolved)
                            .map_err(|e| match e.kind() {
                                std::io::ErrorKind::NotFound => "no such file".to_string(),
                                _ => e.to_string(),
                            })
                            .and_then(|t| {
                                // Read no further than the limit: `/dev/zero` named as a
                                // template must not fill memory.
                                // (A character cut by the limit is dropped: up to 3 bytes short.)
                                if t.len() >= super::READ_LIMIT.saturating_sub(3) {
                                    Err(format!("it holds more than {} bytes", super::READ_LIMIT))
                                } else {
                                    Ok(Cow::Owned(t))
                                }
                            }),
                    )
                }
            };
            match text {
                Ok(t) => (name, t, Some(p.span)),
                Err(why) => {
                    world.diags.push(
                        Diagnostic::error(
                            "mvk::missing-template",
                            format!("cannot read template `{name}`: {why}"),
                        )
                        .at(p.span, "named here")
                        .help("the path is relative to the file that names it"),
                    );
                    return None;
                }
            }
        }
    };
    // A template of the standard library reads the same wherever it is named (and its name
    // is short to look up, where its text is not).
    let std_template = matches!(text, Cow::Borrowed(_));
    if std_template && let Some(shared) = world.std_templates.get(&name) {
        return Some(Template {
            name,
            text: Arc::clone(shared),
        });
    }
    // Checking renders the template; a flow of many tasks shares a few templates, and shares
    // each one's text rather than holding a copy per task. The standard library's templates
    // (`.hbs`; not its other files, which a prompt may name by mistake) are built in and
    // checked by its tests (`stdlib::tests`): checking them again took 2 ms of every command
    // that compiles a loop.
    let checked = match world.checked_templates.get(text.as_ref()) {
        Some(shared) => Ok(Arc::clone(shared)),
        None if std_template && name.ends_with(".hbs") => Ok(Arc::from(text.as_ref())),
        None => crate::prompt::check(&text).map(|()| {
            let shared: Arc<str> = Arc::from(text.as_ref());
            world.checked_templates.insert(Arc::clone(&shared));
            shared
        }),
    };
    let text = match checked {
        Ok(text) => text,
        Err(problem) => {
            let place = match (problem.line, problem.column) {
                (Some(l), Some(c)) => format!(" at {name}:{l}:{c}"),
                (Some(l), None) => format!(" at {name}:{l}"),
                _ => String::new(),
            };
            let mut d = Diagnostic::error("mvk::bad-template", format!("template `{name}` does not render{place}: {}", problem.message))
            .help("templates are handlebars; they may use goal, task, item, scope, seal, attempt, rung, gates, failure, diff, previous_blockers, budget, lineage, last_diff, excerpts, lessons, pinned_lessons, lessons_file (book: Templates)");
            if let Some(span) = span {
                d = d.at(span, "this template");
            }
            world.diags.push(d);
            return None;
        }
    };
    if std_template {
        world.std_templates.insert(name.clone(), Arc::clone(&text));
    }
    Some(Template { name, text })
}

fn lower_body(world: &mut World, module: usize, body: &LoopBody, item: Option<&str>) -> Partial {
    let errors_before = world.diags.error_count();
    let mut p = Partial {
        written: body.written.clone(),
        ..Partial::default()
    };
    if let Some(g) = &body.goal {
        let lookup = |n: &str| (n == "item").then(|| item.map(str::to_string)).flatten();
        match super::interp::interpolate(&g.node, &lookup, &[]) {
            Ok(text) => p.goal = Some((text.trim().to_string(), g.span)),
            Err(e) => {
                let known = if item.is_some() {
                    vec!["item".to_string()]
                } else {
                    Vec::new()
                };
                super::defs::interp_error(world, &e, g.span, "the goal", &known);
            }
        }
    }
    if let Some(path) = &body.prompt {
        p.prompt = template(world, module, Some(path), crate::stdlib::MAKER_PROMPT)
            .map(|t| (t, path.span));
    }
    if let Some(s) = &body.scope {
        p.scope = paths(world, s, item, "`scope`");
        p.scope_new = body.scope_new;
    }
    if let Some(s) = &body.seal {
        p.seal = paths(world, s, item, "`seal`");
        p.seal_new = body.seal_new;
    }
    if let Some(l) = &body.lessons {
        p.lessons = lessons_file(world, l, item);
    }
    for g in &body.gates {
        p.gates_written += 1;
        if let Some(prev) = body
            .gates
            .iter()
            .take_while(|h| !std::ptr::eq(*h, g))
            .find(|h| h.name.node == g.name.node)
        {
            world.diags.push(
                Diagnostic::error("mvk::duplicate-name", format!("gate `{}` is declared twice in this loop", g.name.node))
                    .at(g.name.span, "declared again here")
                    .also(prev.name.span, "first declared here")
                    .help("gate names identify results in reports and prompts; give each gate its own name"),
            );
            continue;
        }
        if let Some(gate) = world.instantiate_gate(module, g, item) {
            p.gates.push((gate, g.name.span));
        }
    }
    if let Some(r) = &body.review {
        let agent = world.instantiate_agent(module, &r.agent, item);
        let prompt = template(
            world,
            module,
            r.prompt.as_ref(),
            crate::stdlib::REVIEWER_PROMPT,
        );
        if let (Some(agent), Some(prompt)) = (agent, prompt) {
            let rounds = r
                .rounds
                .as_ref()
                .map_or(ir::DEFAULT_REVIEW_ROUNDS, |n| n.node);
            p.review = Some((
                ir::Review {
                    agent,
                    rounds,
                    prompt,
                },
                r.span,
            ));
        }
    }
    if let Some(b) = &body.budget {
        p.budget = b.clone();
    }
    if let Some(l) = &body.ladder {
        let mut rungs = Vec::new();
        let mut human_at: Option<Span> = None;
        for r in &l.rungs {
            if let Some(h) = human_at {
                world.diags.push(
                    Diagnostic::error(
                        "mvk::rung-after-human",
                        "a rung after `rung human` can never run",
                    )
                    .at(r.span, "unreachable rung")
                    .also(h, "the ladder ends here")
                    .help("a person is the last rung: move `rung human` to the end"),
                );
                continue;
            }
            match &r.node {
                RungDecl::Human => {
                    human_at = Some(r.span);
                    rungs.push((Rung::Human, r.span));
                }
                RungDecl::Agent { agent, attempts } => {
                    if let Some(a) = world.instantiate_agent(module, agent, item) {
                        rungs.push((
                            Rung::Agent {
                                agent: a,
                                attempts: attempts.as_ref().map(|n| n.node),
                            },
                            r.span,
                        ));
                    }
                }
            }
        }
        p.ladder = Some((rungs, l.span));
    }
    if let Some(a) = &body.agent {
        p.agent = world
            .instantiate_agent(module, a, item)
            .map(|a2| (a2, a.span));
    }
    if let Some(m) = &body.merge {
        let mut gates = Vec::new();
        for g in &m.gates {
            if let Some(prev) = m
                .gates
                .iter()
                .take_while(|h| !std::ptr::eq(*h, g))
                .find(|h| h.name.node == g.name.node)
            {
                world.diags.push(
                    Diagnostic::error(
                        "mvk::duplicate-name",
                        format!("gate `{}` is declared twice in this merge", g.name.node),
                    )
                    .at(g.name.span, "declared again here")
                    .also(prev.name.span, "first declared here")
                    .help("give each gate its own name"),
                );
                continue;
            }
            gates.extend(world.instantiate_gate(module, g, item));
        }
        let merge = Merge {
            into: m
                .into
                .as_ref()
                .map_or_else(|| ir::CURRENT_BRANCH.to_string(), |i| i.node.clone()),
            strategy: m
                .strategy
                .as_ref()
                .and_then(|s| Strategy::parse(&s.node))
                .unwrap_or(Strategy::Squash),
            gates,
            pr: None,
        };
        let mut merge = merge;
        if merge.strategy == Strategy::Pr {
            let pr = pull_request(&m.pr);
            check_pr_templates(world, &pr, m.span);
            merge.pr = Some(pr);
        }
        if let Some(into) = &m.into
            && git2::Branch::name_is_valid(&into.node).ok() != Some(true)
        {
            world.diags.push(
                    Diagnostic::error("mvk::bad-branch", format!("`{}` is not a valid branch name", into.node))
                        .at(into.span, "invalid branch name")
                        .help("name a branch such as `main`; leave `into` out to merge into the branch checked out when the run starts"),
                );
        }
        p.merge = Some((merge, m.span));
    }
    if let Some(u) = &body.uncertified {
        p.uncertified = Some((u.node, u.span));
    }
    if let Some(sb) = &body.sandbox {
        p.sandbox = Some((super::defs::lower_sandbox(sb), sb.span));
    }
    p.broken = world.diags.error_count() > errors_before;
    p
}

/// Applies defaults and the rules that need the whole loop; `head` is where to point when a
/// required setting is missing.
fn finish(
    world: &mut World,
    name: &str,
    item: Option<String>,
    after: Vec<String>,
    p: Partial,
    head: Span,
) -> Option<Task> {
    let mut field_spans = BTreeMap::new();
    let Some((goal, goal_span)) = p.goal.clone() else {
        if p.wrote("goal") {
            return None; // the goal was written and its error reported
        }
        world.diags.push(
            Diagnostic::error("mvk::missing-goal", format!("`{name}` has no goal"))
                .at(head, "no `goal`")
                .help("say what the change must achieve: goal \"Make tests/test_parse.py pass\""),
        );
        return None;
    };
    field_spans.insert("goal".to_string(), goal_span);
    let uncertified = p.uncertified.is_some_and(|(u, _)| u);
    if p.gates.is_empty() && p.gates_written == 0 && !uncertified && !p.wrote("uncertified") {
        world.diags.push(
            Diagnostic::error("mvk::uncertified", format!("`{name}` has no gate, so no attempt could ever be certified"))
                .at(head, "no deterministic check")
                .help("add a gate that runs your tests, e.g. gate tests { run \"cargo\" \"test\" }; or say `uncertified #true` to accept unchecked work"),
        );
    }
    if let (true, Some((_, span)), Some((_, gate_span))) =
        (uncertified, p.uncertified, p.gates.first())
    {
        world.diags.push(
            Diagnostic::error(
                "mvk::uncertified-with-gates",
                format!("`{name}` says `uncertified #true` but has gates"),
            )
            .at(span, "has no effect")
            .also(*gate_span, "a gate certifies attempts")
            .help("remove `uncertified #true`: the loop's gates certify it"),
        );
    }
    let ladder: Vec<Rung> = match (&p.ladder, &p.agent) {
        (Some((_, lspan)), Some((_, aspan))) => {
            world.diags.push(
                Diagnostic::error(
                    "mvk::agent-and-ladder",
                    format!("`{name}` has both an `agent` and a `ladder`"),
                )
                .at(*aspan, "never used")
                .also(*lspan, "every rung names its agent")
                .help("remove the `agent` line, or remove the ladder to run one agent"),
            );
            return None;
        }
        (Some((rungs, _)), None) => rungs.iter().map(|(r, _)| r.clone()).collect(),
        (None, Some((agent, span))) => {
            field_spans.insert("ladder".to_string(), *span);
            vec![Rung::Agent {
                agent: agent.clone(),
                attempts: None,
            }]
        }
        (None, None) => {
            if !p.broken && !p.wrote("agent") && !p.wrote("ladder") {
                world.diags.push(
                    Diagnostic::error("mvk::missing-agent", format!("`{name}` names no agent"))
                        .at(head, "who does the work?")
                        .help("add `agent NAME` (e.g. `agent claude` after import \"std/agents.kdl\"), or a `ladder` of rungs"),
                );
            }
            return None;
        }
    };
    if let Some((_, span)) = &p.ladder {
        field_spans.insert("ladder".to_string(), *span);
        if ladder.is_empty() {
            return None;
        }
    }
    if let Some((review, rspan)) = &p.review {
        for rung in &ladder {
            if let Rung::Agent { agent, .. } = rung
                && agent.name == review.agent.name
                && agent.params == review.agent.params
            {
                world.diags.push(
                        Diagnostic::warning("mvk::reviewer-not-independent", format!("the reviewer is the same agent as a maker: `{}`", agent.label()))
                            .at(*rspan, "same agent and model as a maker rung")
                            .help("a maker grades itself too leniently; review with another agent or model, e.g. review agent=codex"),
                    );
                break;
            }
        }
        field_spans.insert("review".to_string(), *rspan);
    }
    if let Some(usd) = &p.budget.usd_micros {
        let mut agents: Vec<(&ir::Agent, Span)> = Vec::new();
        match (&p.ladder, &p.agent) {
            (Some((rungs, _)), _) => agents.extend(rungs.iter().filter_map(|(r, s)| match r {
                Rung::Agent { agent, .. } => Some((agent, *s)),
                Rung::Human => None,
            })),
            (None, Some((agent, span))) => agents.push((agent, *span)),
            (None, None) => {}
        }
        if let Some((review, span)) = &p.review {
            agents.push((&review.agent, *span));
        }
        for (agent, span) in agents {
            for d in usd_budget_checks(agent, usd.span, span) {
                world.diags.push(d);
            }
        }
    }
    let b = &p.budget;
    if let Some(w) = &b.warn_at
        && b.tokens.is_none()
        && b.usd_micros.is_none()
        && b.wall.is_none()
    {
        world.diags.push(warn_at_without_limit(w.span));
    }
    let budget = Budget {
        iterations: b
            .iterations
            .as_ref()
            .map_or(ir::DEFAULT_ITERATIONS, |n| n.node),
        tokens: b.tokens.as_ref().map(|n| n.node),
        usd_micros: b.usd_micros.as_ref().map(|n| n.node),
        wall: b.wall.as_ref().map(|n| n.node),
        same_failure: b
            .same_failure
            .as_ref()
            .map_or(ir::DEFAULT_SAME_FAILURE, |n| n.node),
        context_tokens: b
            .context_tokens
            .as_ref()
            .map_or(ir::DEFAULT_CONTEXT_TOKENS, |n| n.node),
        warn_at: b.warn_at.as_ref().map(|n| n.node),
    };
    if let Some(span) = b.span {
        field_spans.insert("budget".to_string(), span);
    }
    for (key, span) in [
        ("prompt", p.prompt.as_ref().map(|x| x.1)),
        ("scope", p.scope.as_ref().map(|x| x.1)),
        ("seal", p.seal.as_ref().map(|x| x.1)),
        ("merge", p.merge.as_ref().map(|x| x.1)),
        ("uncertified", p.uncertified.as_ref().map(|x| x.1)),
        ("sandbox", p.sandbox.as_ref().map(|x| x.1)),
        ("lessons", p.lessons.as_ref().map(|x| x.1)),
    ] {
        if let Some(span) = span {
            field_spans.insert(key.to_string(), span);
        }
    }
    for (g, span) in &p.gates {
        field_spans.insert(format!("gate.{}", g.name), *span);
    }
    let prompt = match p.prompt {
        Some((t, _)) => t,
        None => template(world, 0, None, crate::stdlib::MAKER_PROMPT)?,
    };
    if p.broken {
        return None;
    }
    let (scope_new, seal_new) = (p.scope_new, p.seal_new);
    let task = Task {
        name: name.to_string(),
        item,
        after,
        goal,
        prompt,
        scope: p.scope.map_or_else(|| vec!["**".to_string()], |(s, _)| s),
        seal: sealed_with(
            p.seal.map(|(s, _)| s).unwrap_or_default(),
            p.lessons.as_ref(),
        ),
        gates: p.gates.into_iter().map(|(g, _)| g).collect(),
        review: p.review.map(|(r, _)| r),
        budget,
        ladder,
        merge: p.merge.map(|(m, _)| m).unwrap_or_default(),
        uncertified,
        sandbox: p.sandbox.map(|(s, _)| s),
        lessons: p.lessons.map(|(l, _)| l),
        notify: Vec::new(),
        meta: ir::TaskMeta {
            span: Some(head),
            field_spans,
            ..ir::TaskMeta::default()
        },
    };
    world.first_prompts.check(&mut world.diags, &task);
    paths_match_files(world, &task, scope_new, seal_new);
    Some(task)
}

/// Tasks in a level of the flow sealed on one thread; more are shared among threads.
const SEAL_ALONE: usize = 1024;

/// Computes each task's digest ([`digest::Sealer`]), the tasks of `level` 0 first, then those of
/// level 1 (which start after some of level 0 and after nothing later), and so on. The tasks of
/// a large level are sealed on several threads: digests are a sixth of a 10,000-task plan's
/// time, and a level's tasks need only the digests of levels before it.
fn seal_by_level(tasks: &mut [Task], level: &[usize]) {
    let levels = level.iter().max().map_or(0, |m| m + 1);
    let mut by_level: Vec<Vec<&mut Task>> = (0..levels).map(|_| Vec::new()).collect();
    for (t, &l) in tasks.iter_mut().zip(level) {
        by_level[l].push(t);
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let mut digests: HashMap<String, digest::Digest> = HashMap::new();
    for mut level in by_level {
        let seal = |part: &mut [&mut Task], digests: &HashMap<String, digest::Digest>| {
            let mut sealer = digest::Sealer::default();
            for t in part {
                let deps: BTreeMap<String, digest::Digest> = t
                    .after
                    .iter()
                    .filter_map(|a| digests.get(a).map(|d| (a.clone(), *d)))
                    .collect();
                sealer.seal(t, &deps);
            }
        };
        if level.len() < SEAL_ALONE || threads < 2 {
            seal(&mut level, &digests);
        } else {
            // Parts are taken from a queue by each thread, this one too: a part is sealed even
            // where no thread could be made for it.
            let per = level.len().div_ceil(threads * 4);
            let parts = std::sync::Mutex::new(level.chunks_mut(per));
            let work = || {
                while let Some(part) = parts.lock().ok().and_then(|mut p| p.next()) {
                    seal(part, &digests);
                }
            };
            std::thread::scope(|scope| {
                for _ in 1..threads {
                    if let Err(e) = std::thread::Builder::new()
                        .name("mvk-seal".into())
                        .spawn_scoped(scope, work)
                    {
                        tracing::debug!("no thread to seal tasks on ({e})");
                    }
                }
                work();
            });
        }
        for t in level {
            digests.insert(t.name.clone(), t.meta.digest);
        }
    }
}

/// One task declaration, before expansion.
struct Decl {
    name: Spanned<String>,
    items: Vec<Option<String>>,
    after: Vec<Spanned<String>>,
}

fn build_flow(
    world: &mut World,
    root: usize,
    flow: &FlowDecl,
    notify: Vec<std::sync::Arc<ir::Notify>>,
) -> Option<Program> {
    let mut decls: Vec<Decl> = Vec::new();
    // Name → index into `decls`; flows may hold 100,000 tasks, so no linear searches.
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut tasks: Vec<Task> = Vec::new();
    let mut ok = true;
    for t in &flow.tasks {
        if let Some(prev) = seen.get(&t.name.node).map(|&i| &decls[i]) {
            world.diags.push(
                Diagnostic::error(
                    "mvk::duplicate-name",
                    format!("task `{}` is declared twice", t.name.node),
                )
                .at(t.name.span, "declared again here")
                .also(prev.name.span, "first declared here")
                .help("give each task its own name"),
            );
            ok = false;
            continue;
        }
        let base = match &t.loop_file {
            Some(path) => {
                let origin = world.origin_for(root, &path.node);
                match world.load(origin, Some(path.span), LoadAs::LoopFile) {
                    Some(m) => {
                        let loops: Vec<LoopDecl> = world.modules[m]
                            .ast
                            .items
                            .iter()
                            .filter_map(|i| {
                                if let Item::Loop(l) = i {
                                    Some(l.clone())
                                } else {
                                    None
                                }
                            })
                            .collect();
                        match loops.as_slice() {
                            [one] => Some((m, one.clone())),
                            [] => {
                                world.diags.push(
                                    Diagnostic::error(
                                        "mvk::no-loop-in-file",
                                        format!("`{}` defines no loop", path.node),
                                    )
                                    .at(path.span, "named here")
                                    .help("a task's `loop=` file holds one `loop NAME { … }`"),
                                );
                                ok = false;
                                None
                            }
                            [_, second, ..] => {
                                world.diags.push(
                                    Diagnostic::error(
                                        "mvk::several-runnables",
                                        format!("`{}` defines more than one loop", path.node),
                                    )
                                    .at(path.span, "named here")
                                    .also(second.name.span, "a second loop")
                                    .help("a task's `loop=` file holds exactly one loop"),
                                );
                                ok = false;
                                None
                            }
                        }
                    }
                    None => {
                        ok = false;
                        None
                    }
                }
            }
            None => None,
        };
        let items: Vec<Option<String>> = match &t.each {
            None => vec![None],
            Some(each) => match &each.node {
                Each::List(list) => {
                    let mut v: Vec<String> = Vec::new();
                    for i in list {
                        if v.contains(&i.node) {
                            world.diags.push(
                                Diagnostic::error(
                                    "mvk::duplicate-name",
                                    format!("item `{}` is listed twice", i.node),
                                )
                                .at(i.span, "listed again")
                                .help("each item makes one task; list it once"),
                            );
                            ok = false;
                        } else {
                            v.push(i.node.clone());
                        }
                    }
                    v.into_iter().map(Some).collect()
                }
                Each::Glob(g) => match expand_glob(world, g) {
                    Some(v) => v.into_iter().map(Some).collect(),
                    None => {
                        ok = false;
                        Vec::new()
                    }
                },
            },
        };
        if t.loop_file.is_none() && t.body.is_empty() {
            world.diags.push(
                Diagnostic::error("mvk::empty-task", format!("task `{}` has nothing to do", t.name.node))
                    .at(t.name.span, "no `loop=` and no body")
                    .help("name a loop file with loop=\"file.kdl\", or give the task a block with goal, agent and gates"),
            );
            ok = false;
            continue;
        }
        // A `loop=` file that failed to load has been reported; its task is not built, so that
        // its missing goal and agent are not reported too, but later tasks may still name it.
        let base_failed = t.loop_file.is_some() && base.is_none();
        if !base_failed {
            tasks.reserve(items.len());
        }
        // The task's own notifications, once for all its items: its `loop=` file's (top level,
        // then its loop), then its block's.
        let task_notify = if base_failed {
            Vec::new()
        } else {
            let from_file = match &base {
                Some((m, l)) => {
                    let top = world.notify_top(*m);
                    let own = world.notify_block(*m, &l.body.notify);
                    super::notify::overlay(&top, own)
                }
                None => Vec::new(),
            };
            let own = world.notify_block(root, &t.body.notify);
            super::notify::overlay(&from_file, own)
        };
        for item in items.iter().filter(|_| !base_failed) {
            let base_partial = base
                .as_ref()
                .map(|(m, l)| lower_body(world, *m, &l.body, item.as_deref()));
            let own = lower_body(world, root, &t.body, item.as_deref());
            let partial = match base_partial {
                Some(b) => b.overlay(own),
                None => own,
            };
            let name = match item {
                Some(i) => format!("{}[{i}]", t.name.node),
                None => t.name.node.clone(),
            };
            match finish(world, &name, item.clone(), Vec::new(), partial, t.name.span) {
                Some(mut task) => {
                    task.notify.clone_from(&task_notify);
                    tasks.push(task);
                }
                None => ok = false,
            }
        }
        seen.insert(t.name.node.clone(), decls.len());
        decls.push(Decl {
            name: t.name.clone(),
            items,
            after: t.after.clone(),
        });
    }
    // Dependencies by declaration, then by expanded name.
    let mut graph: DiGraph<usize, Span> = DiGraph::new();
    let nodes: Vec<NodeIndex> = (0..decls.len()).map(|i| graph.add_node(i)).collect();
    for (i, d) in decls.iter().enumerate() {
        for a in &d.after {
            match seen.get(&a.node).copied() {
                Some(j) => {
                    graph.add_edge(nodes[j], nodes[i], a.span);
                }
                None => {
                    let mut names: Vec<&str> =
                        flow.tasks.iter().map(|t| t.name.node.as_str()).collect();
                    names.sort_unstable();
                    names.dedup();
                    world.diags.push(
                        Diagnostic::error(
                            "mvk::unknown-task",
                            format!(
                                "task `{}` starts after `{}`, which is not a task of this flow",
                                d.name.node, a.node
                            ),
                        )
                        .at(a.span, "no such task")
                        .help(suggest(
                            "tasks of this flow",
                            &a.node,
                            &names,
                        )),
                    );
                    ok = false;
                }
            }
        }
    }
    for scc in petgraph::algo::tarjan_scc(&graph) {
        let is_cycle = scc.len() > 1 || graph.contains_edge(scc[0], scc[0]);
        if !is_cycle {
            continue;
        }
        ok = false;
        // Walk the cycle in dependency order to print it as a path.
        let mut order = vec![scc[0]];
        while let Some(next) = graph
            .neighbors(*order.last().unwrap_or(&scc[0]))
            .find(|n| scc.contains(n) && (!order.contains(n) || *n == scc[0]))
        {
            if next == scc[0] {
                break;
            }
            order.push(next);
        }
        let names: Vec<String> = order
            .iter()
            .map(|n| format!("`{}`", decls[graph[*n]].name.node))
            .collect();
        let mut d = Diagnostic::error(
            "mvk::dependency-cycle",
            format!("dependency cycle: {} → {}", names.join(" → "), names[0]),
        );
        let mut first = true;
        for w in 0..order.len() {
            let from = order[w];
            let to = order[(w + 1) % order.len()];
            if let Some(e) = graph.find_edge(from, to) {
                let label = format!(
                    "`{}` waits for `{}`",
                    decls[graph[to]].name.node, decls[graph[from]].name.node
                );
                d = if first {
                    d.at(graph[e], label)
                } else {
                    d.also(graph[e], label)
                };
                first = false;
            }
        }
        world
            .diags
            .push(d.help("remove one of these `after` entries so that the tasks can be ordered"));
    }
    if !ok || world.diags.has_errors() {
        return None;
    }
    // Expanded names of each declaration, for `after`.
    let expanded = |d: &Decl| -> Vec<String> {
        d.items
            .iter()
            .map(|i| match i {
                Some(i) => format!("{}[{i}]", d.name.node),
                None => d.name.node.clone(),
            })
            .collect()
    };
    let task_index: HashMap<String, usize> = tasks
        .iter()
        .enumerate()
        .map(|(k, t)| (t.name.clone(), k))
        .collect();
    for d in &decls {
        let mut deps = Vec::new();
        for a in &d.after {
            if let Some(dep) = seen.get(&a.node).map(|&j| &decls[j]) {
                deps.extend(expanded(dep));
            }
        }
        deps.sort();
        deps.dedup();
        for name in expanded(d) {
            if let Some(t) = task_index.get(&name).map(|&k| &mut tasks[k]) {
                t.after.clone_from(&deps);
            }
        }
    }
    // A task after one landed as a pull request starts from that pull request's commit (or
    // the remote after its merge): only one landed the same way can, and only when all it
    // waits for did.
    for d in &decls {
        let is_pr = |name: &String| {
            task_index
                .get(name)
                .is_some_and(|&k| tasks[k].merge.strategy == Strategy::Pr)
        };
        let Some(ours) = expanded(d).first().map(is_pr) else {
            continue;
        };
        let deps: Vec<(&Spanned<String>, bool)> = d
            .after
            .iter()
            .filter_map(|a| {
                let dep = seen.get(&a.node).map(|&j| &decls[j])?;
                Some((a, expanded(dep).first().is_some_and(is_pr)))
            })
            .collect();
        let Some((first_pr, _)) = deps.iter().find(|(_, pr)| *pr) else {
            continue;
        };
        let other = deps.iter().find(|(_, pr)| !*pr);
        if ours && other.is_none() {
            continue;
        }
        let (span, message) = match other {
            Some((a, _)) if ours => (
                a.span,
                format!(
                    "task `{}` opens a pull request after `{}`, which opens one, and `{}`, which lands on its branch: no base holds both",
                    d.name.node, first_pr.node, a.node
                ),
            ),
            _ => (
                first_pr.span,
                format!(
                    "task `{}` lands on its branch after `{}`, which opens a pull request: its base would not hold that change",
                    d.name.node, first_pr.node
                ),
            ),
        };
        world.diags.push(
            Diagnostic::error("mvk::after-pull-request", message)
                .at(span, "landed another way")
                .help("give the task and all it comes after the same `merge strategy=\"pr\"`, or drop the `after`"),
        );
    }
    // A task starts from a base holding what it waits for; that is only so when both land on
    // the same branch.
    for d in &decls {
        for a in &d.after {
            let Some(dep) = seen.get(&a.node).map(|&j| &decls[j]) else {
                continue;
            };
            let into = |name: &String| task_index.get(name).map(|&k| tasks[k].merge.into.clone());
            let (Some(ours), Some(theirs)) = (
                expanded(d).first().and_then(into),
                expanded(dep).first().and_then(into),
            ) else {
                continue;
            };
            // The branch checked out when the run starts is only known then; the run checks
            // those pairs before it starts anything.
            if ours != theirs && ours != ir::CURRENT_BRANCH && theirs != ir::CURRENT_BRANCH {
                let shown = |b: &str| {
                    if b == ir::CURRENT_BRANCH {
                        "the branch checked out when the run starts".to_string()
                    } else {
                        format!("`{b}`")
                    }
                };
                world.diags.push(
                    Diagnostic::error(
                        "mvk::after-other-branch",
                        format!(
                            "task `{}` starts after `{}`, but lands on {} while `{}` lands on {}",
                            d.name.node,
                            a.node,
                            shown(&ours),
                            a.node,
                            shown(&theirs)
                        ),
                    )
                    .at(a.span, "its work would not be in this task's base")
                    .help("give both tasks the same `merge into=`, or drop the `after`"),
                );
            }
        }
    }
    if world.diags.has_errors() {
        return None;
    }
    // Each task's digest holds those of the tasks it starts after (Merkle): tasks are sealed
    // level by level, a level being those whose longest chain of `after` has the same length.
    let order = petgraph::algo::toposort(&graph, None).ok()?;
    let mut decl_level = vec![0usize; decls.len()];
    let mut task_level = vec![0usize; tasks.len()];
    for n in order {
        let level = graph
            .neighbors_directed(n, petgraph::Direction::Incoming)
            .map(|dep| decl_level[graph[dep]] + 1)
            .max()
            .unwrap_or(0);
        decl_level[graph[n]] = level;
        for name in expanded(&decls[graph[n]]) {
            if let Some(&k) = task_index.get(&name) {
                task_level[k] = level;
            }
        }
    }
    seal_by_level(&mut tasks, &task_level);
    if let Some(usd) = flow.budget.as_ref().and_then(|b| b.usd_micros.as_ref()) {
        // One diagnostic per agent, however many tasks use it.
        let mut told = std::collections::BTreeSet::new();
        for t in &tasks {
            for (agent, reviews) in t.agents() {
                let field = if reviews { "review" } else { "ladder" };
                let used = t.meta.field_spans.get(field).or(t.meta.span.as_ref());
                if let Some(used) = used
                    && told.insert(agent.label())
                {
                    for d in usd_budget_checks(agent, usd.span, *used) {
                        world.diags.push(d);
                    }
                }
            }
        }
    }
    if let Some(b) = &flow.budget
        && let Some(w) = &b.warn_at
        && b.tokens.is_none()
        && b.usd_micros.is_none()
        && b.wall.is_none()
    {
        world.diags.push(warn_at_without_limit(w.span));
    }
    let settings = ir::FlowSettings {
        parallel: flow
            .parallel
            .as_ref()
            .map_or(ir::DEFAULT_PARALLEL, |p| p.node),
        continue_on_failure: flow.continue_on_failure.as_ref().is_some_and(|c| c.node),
        budget: flow
            .budget
            .as_ref()
            .map(|b| ir::FlowBudget {
                tokens: b.tokens.as_ref().map(|n| n.node),
                usd_micros: b.usd_micros.as_ref().map(|n| n.node),
                wall: b.wall.as_ref().map(|n| n.node),
                warn_at: b.warn_at.as_ref().map(|n| n.node),
            })
            .unwrap_or_default(),
    };
    let d = digest::program_digest(ProgramKind::Flow, &flow.name.node, Some(&settings), &tasks);
    Some(Program {
        kind: ProgramKind::Flow,
        name: flow.name.node.clone(),
        tasks,
        flow: Some(settings),
        digest: d,
        sources: world.sources.clone(),
        span: flow.span,
        notify,
    })
}

/// The repository files a fan-out glob matches, sorted; a warning when it matches none.
fn expand_glob(world: &mut World, g: &Spanned<String>) -> Option<Vec<String>> {
    let pattern = repo_path(world, g, None, "`each`")?;
    let matcher = crate::glob::matcher(&pattern)?;
    let files = match world.repo_files() {
        Ok(f) => f,
        Err(why) => {
            world.diags.push(
                Diagnostic::error(
                    "mvk::repo-unreadable",
                    format!("cannot list the repository's files: {why}"),
                )
                .at(g.span, "needs the repository's files")
                .help("run mvk inside the repository, or name it with --repo DIR"),
            );
            return None;
        }
    };
    let items: Vec<String> = files
        .iter()
        .filter(|f| matcher.is_match(f.as_str()))
        .cloned()
        .collect();
    if items.is_empty() {
        let root = world.options.repo_root.as_ref().map_or_else(
            || "no repository".to_string(),
            |r| format!("`{}`", crate::source::display_path(r)),
        );
        world.diags.push(
            Diagnostic::warning("mvk::empty-fan-out", format!("`{pattern}` matches no file in {root}, so this task expands to nothing"))
                .at(g.span, "matches nothing")
                .help("check the glob; it is matched against the repository's tracked files, from its root"),
        );
    }
    Some(items)
}

/// What a dollar budget (written at `budget`) says of an agent used at `used`: an error when it
/// could never be counted ([`unpriced`]), a warning when it can be held only between attempts
/// ([`unmetered`]).
fn usd_budget_checks(agent: &ir::Agent, budget: Span, used: Span) -> Vec<Diagnostic> {
    match unpriced(agent, budget, used) {
        Some(d) => vec![d],
        None => unmetered(agent, budget, used).into_iter().collect(),
    }
}

/// A dollar budget that holds an agent only between its attempts: it reports what it spent
/// only when it exits, so mvk cannot stop it when the budget runs out while it works.
fn unmetered(agent: &ir::Agent, budget: Span, used: Span) -> Option<Diagnostic> {
    if agent.streams_usage() {
        return None;
    }
    let fix = match agent.adapter {
        ir::Adapter::Claude => {
            "run Claude Code with `--output-format stream-json --verbose` (the stdlib's `claude` does), and give it `--max-budget-usd {{usd_left}}`".to_string()
        }
        ir::Adapter::Codex => {
            "run `codex exec --json` without `--ephemeral` (the stdlib's `codex` does): mvk follows the session log it writes after each response".to_string()
        }
        ir::Adapter::Gemini => {
            "run the Gemini CLI with `--output-format stream-json` (the stdlib's `gemini` does): its first line names the session, and mvk follows the chat log it writes after each response".to_string()
        }
        _ => format!(
            "wrap `{}` in a script that prints `MVK_USAGE={{\"input_tokens\":N,\"output_tokens\":N,\"usd\":X}}` lines (cumulative) as it goes; or set the agent's `timeout` to what the budget can afford",
            agent.label()
        ),
    };
    Some(
        Diagnostic::warning(
            "mvk::unmetered-agent",
            format!(
                "`{}` reports what it spent only when it exits: this dollar budget is checked between its attempts, and one attempt can spend past it",
                agent.label()
            ),
        )
        .at(budget, "a dollar budget")
        .also(used, "reports usage only at its end")
        .help(fix),
    )
}

/// A dollar budget that an agent could never be held to: it reports tokens but no dollars, and
/// its model has no price.
pub(crate) fn unpriced(agent: &ir::Agent, budget: Span, used: Span) -> Option<Diagnostic> {
    if agent.reports_dollars() || agent.price.is_some() || agent.adapter == ir::Adapter::Command {
        return None;
    }
    let model = agent.price_key();
    Some(
        Diagnostic::error(
            "mvk::unpriced-agent",
            format!(
                "`{}` reports tokens, not dollars, and model `{model}` has no price: this dollar budget could never be counted",
                agent.label()
            ),
        )
        .at(budget, "a dollar budget")
        .also(used, "no price for its model")
        .help(format!(
            "give the model's price in US dollars per million tokens, as the provider publishes it: price \"{model}\" input=1.25 output=10.0 cached=0.125 (a top-level node of this file or a file it imports); or budget tokens= instead of usd="
        )),
    )
}

/// Refuses a pull request's template that would fail when the change is ready to go out: one
/// that does not compile, or names a variable it is not given there.
fn check_pr_templates(world: &mut World, pr: &ir::PullRequest, span: Span) {
    use crate::prompt::{
        PR_BODY_VARIABLES, PR_COMMAND_VARIABLES, PR_STATE_VARIABLES, PR_TITLE_VARIABLES,
    };
    let one = |t: &str| std::iter::once(t.to_string());
    let words: Vec<(&str, String, &[&str])> = one(&pr.title)
        .map(|t| ("title", t, PR_TITLE_VARIABLES))
        .chain(one(&pr.body).map(|t| ("body", t, PR_BODY_VARIABLES)))
        .chain(
            pr.open
                .iter()
                .map(|w| ("open", w.clone(), PR_COMMAND_VARIABLES)),
        )
        .chain(
            pr.find
                .iter()
                .map(|w| ("find", w.clone(), PR_COMMAND_VARIABLES)),
        )
        .chain(
            pr.state
                .iter()
                .map(|w| ("state", w.clone(), PR_STATE_VARIABLES)),
        )
        .collect();
    for (what, template, given) in words {
        let sample: serde_json::Map<String, serde_json::Value> = given
            .iter()
            .map(|v| {
                (
                    (*v).to_string(),
                    serde_json::Value::String(format!("<{v}>")),
                )
            })
            .collect();
        if let Err(e) = crate::prompt::render_plain(&template, &serde_json::Value::Object(sample)) {
            world.diags.push(
                Diagnostic::error(
                    "mvk::bad-template",
                    format!("the pull request's {what} `{template}` does not render: {e}"),
                )
                .at(span, "in this merge")
                .help(format!("its variables are: {}", given.join(", "))),
            );
        }
    }
}

/// A pull request's settings: what the loop gives, the GitHub CLI's defaults for the rest.
fn pull_request(d: &crate::syntax::ast::PrDecl) -> ir::PullRequest {
    let mut pr = ir::PullRequest::default();
    let argv = |a: &Spanned<Vec<Spanned<String>>>| a.node.iter().map(|w| w.node.clone()).collect();
    if let Some(r) = &d.remote {
        pr.remote.clone_from(&r.node);
    }
    if let Some(t) = &d.title {
        pr.title.clone_from(&t.node);
    }
    if let Some(b) = &d.body {
        pr.body.clone_from(&b.node);
    }
    if let Some(dep) = d
        .dependents
        .as_ref()
        .and_then(|x| ir::Dependents::parse(&x.node))
    {
        pr.dependents = dep;
    }
    if let Some(p) = &d.poll {
        pr.poll = p.node;
    }
    if let Some(a) = &d.open {
        pr.open = argv(a);
    }
    if let Some(a) = &d.find {
        pr.find = argv(a);
    }
    if let Some(a) = &d.state {
        pr.state = argv(a);
    }
    pr
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{SEAL_ALONE, covers_any, seal_by_level};
    use crate::digest;

    // Guards the sealing of large levels on several threads: every digest is the one a task
    // sealed alone after its dependencies gets, the Merkle links between levels included.
    #[test]
    fn tasks_sealed_level_by_level_on_threads_get_the_digests_sealed_one_by_one() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let options = crate::resolve::Options {
            repo_root: None,
            ..Default::default()
        };
        let compiled = crate::resolve::compile(&root.join("loops/pagination.kdl"), &options);
        let base = compiled.program.expect("compiles").tasks.remove(0);
        let task = |name: String, after: Vec<String>| {
            let mut t = base.clone();
            t.name = name;
            t.after = after;
            t
        };
        let wide = SEAL_ALONE + 500;
        let mut tasks = vec![task("a".into(), Vec::new()), task("z".into(), Vec::new())];
        let middle: Vec<String> = (0..wide).map(|i| format!("b[{i}]")).collect();
        for name in &middle {
            tasks.push(task(name.clone(), vec!["a".into()]));
        }
        let mut last = middle.clone();
        last.push("z".into());
        tasks.push(task("c".into(), last));
        let mut levels = vec![0, 0];
        levels.extend(std::iter::repeat_n(1, wide));
        levels.push(2);
        // Sealed by level, in another order than the list's: the last task first.
        tasks.rotate_right(1);
        levels.rotate_right(1);
        seal_by_level(&mut tasks, &levels);

        let mut done: BTreeMap<String, digest::Digest> = BTreeMap::new();
        let mut alone: Vec<crate::ir::Task> = tasks.clone();
        alone.sort_by_key(|t| (t.after.len() > 1, !t.after.is_empty()));
        for t in &mut alone {
            let deps = t.after.iter().map(|a| (a.clone(), done[a])).collect();
            digest::seal_task(t, &deps);
            done.insert(t.name.clone(), t.meta.digest);
        }
        for t in &tasks {
            assert_eq!(t.meta.digest, done[&t.name], "{}", t.name);
        }
        assert_ne!(done["b[0]"], done["b[1]"]);
        assert_eq!(done.len(), wide + 3);
    }

    #[test]
    fn a_glob_skipped_by_its_literal_directories_is_judged_as_the_glob_judges() {
        let files: Vec<String> = [
            "README.md",
            "pkg/t5/a.rs",
            "pkg/t50/b.rs",
            "pkg/t6",
            "src/deep/x.rs",
            "src/lib.rs",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let judged_by_the_glob = |pattern: &str| {
            let set = crate::glob::PathSet::new(&[pattern.to_string()]).expect("glob");
            files.iter().any(|f| set.covers(f))
        };
        for pattern in [
            "pkg/t5/**",
            "pkg/t6/**",
            "pkg/t7/**",
            "pkg/t5*/**",
            "pkg/*/b.rs",
            "./pkg/t5/*",
            "/pkg/t5/*",
            "src/*.rs",
            "src/**/x.rs",
            "**/x.rs",
            "*.md",
            "docs/*.md",
            "pkg/t[5]/a.rs",
            "pkg/{t5,t9}/a.rs",
        ] {
            assert_eq!(
                covers_any(pattern, &files),
                judged_by_the_glob(pattern),
                "{pattern}"
            );
        }
    }
}
