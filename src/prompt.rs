//! A prompt template and an attempt's facts in, the prompt text out (handlebars, strict, unescaped).
//!
//! The compiler calls [`check`] on every template so that a syntax error or a misspelt variable
//! is a compile error with the template's line, not a surprise at the third attempt.

use std::collections::HashMap;
use std::sync::Arc;

use handlebars::Handlebars;
use serde::Serialize;

pub(crate) mod fit;

/// What a maker's or reviewer's template can refer to.
#[derive(Debug, Clone, Serialize, Default)]
pub struct PromptContext {
    pub goal: String,
    pub task: String,
    pub item: Option<String>,
    pub scope: Vec<String>,
    pub seal: Vec<String>,
    pub attempt: u32,
    pub rung: String,
    pub gates: Vec<GateInfo>,
    /// The previous attempt's failure; `None` on the first attempt.
    pub failure: Option<Failure>,
    /// For a reviewer: the change under review, against the attempt's base.
    pub diff: Option<String>,
    /// For a reviewer on a later round: the blockers it raised before, to check first.
    pub previous_blockers: Vec<Blocker>,
    /// What is left of the task's budgets as this attempt starts.
    pub budget: BudgetLeft,
    /// One line per earlier attempt of the task, oldest first.
    pub lineage: Vec<Lineage>,
    /// For a maker after a failed attempt: that attempt's change against its base, cut to fit.
    pub last_diff: Option<LastDiff>,
    /// Windows of the files the failing gate's output names (`path:line`, `File "path", line N`).
    pub excerpts: Vec<Excerpt>,
    /// Durable notes earlier attempts and runs wrote, newest first.
    pub lessons: Vec<Lesson>,
    /// The lessons a person pinned into the repository (the loop's `lessons` file), as it reads.
    pub pinned_lessons: Option<String>,
    /// Where this agent may write lessons (also `$MVK_LESSONS_FILE`).
    pub lessons_file: Option<String>,
}

/// What is left of a task's budgets; a budget the task does not set is absent.
#[derive(Debug, Clone, Serialize, Default)]
pub struct BudgetLeft {
    /// Attempts left on the task's `iterations`, this one included.
    pub attempts: Option<u32>,
    pub tokens: Option<u64>,
    /// Dollars, as `1.25`.
    pub usd: Option<String>,
    /// Wall time, as `1h2m`.
    pub wall: Option<String>,
    /// The bound on this prompt, in tokens.
    pub context_tokens: u32,
}

/// One earlier attempt of the task, in one line's worth of fields.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Lineage {
    pub attempt: u32,
    pub rung: u32,
    pub agent: String,
    /// `passed`, `failed`, or `unfinished` (an attempt an interruption cut short).
    pub verdict: String,
    /// The criterion it missed, in one line; empty when it passed.
    pub criterion: String,
}

/// The previous attempt's change.
#[derive(Debug, Clone, Serialize, Default)]
pub struct LastDiff {
    pub attempt: u32,
    /// `git diff --stat`'s lines.
    pub stat: String,
    /// The hunks that fit, each with its file's header, the largest last.
    pub hunks: String,
    /// What was left out to fit the budget, in words; absent when nothing was.
    pub omitted: Option<String>,
}

/// A window of a file the failure names.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Excerpt {
    pub path: String,
    /// The line the failure names.
    pub line: u32,
    pub from: u32,
    pub to: u32,
    /// The window's lines, each prefixed with its number.
    pub text: String,
}

/// A durable note an agent wrote.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Lesson {
    pub id: i64,
    pub text: String,
    /// Where it was learnt: `run R, task T, attempt N (maker)`.
    pub source: String,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct GateInfo {
    pub name: String,
    pub evidence: String,
    /// The command as one would type it in the worktree.
    pub command: String,
    /// The variables it needs set, as `NAME=value`.
    pub env: Vec<String>,
    /// The files of its command that are sealed (part of the oracle).
    pub sealed: Vec<String>,
    /// `pass`, `fail` or `unknown`, once the gate has run.
    pub result: Option<String>,
    pub summary: Option<String>,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Failure {
    pub attempt: u32,
    /// `seal`, `gate`, `review`, `agent` or `human`.
    pub kind: String,
    pub gate: Option<String>,
    pub exit_code: Option<i32>,
    pub counts: Option<Counts>,
    pub output_tail: String,
    /// The criterion that was missed, in one line.
    pub criterion: String,
    pub blockers: Vec<Blocker>,
}

#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct Counts {
    pub executed: u64,
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
}

#[derive(Debug, Clone, Serialize, Default, serde::Deserialize, PartialEq, Eq)]
pub struct Blocker {
    pub category: String,
    pub evidence: String,
    #[serde(default)]
    pub location: String,
}

impl Blocker {
    /// `(correctness) src/lib.rs:3: the cursor is ignored`.
    pub(crate) fn line(&self) -> String {
        format!("({}) {}: {}", self.category, self.location, self.evidence)
    }
}

/// A template problem: the message and, when known, the 1-based line and column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TemplateProblem {
    pub message: String,
    pub line: Option<usize>,
    pub column: Option<usize>,
}

impl PromptContext {
    /// What every prompt of `task` states of it (goal, name, item, scope as a rule, seal), the
    /// rest empty: the ground a maker's, a reviewer's and `check`'s context are built on.
    pub(crate) fn of_task(task: &crate::ir::Task) -> PromptContext {
        PromptContext {
            goal: task.goal.clone(),
            task: task.name.clone(),
            item: task.item.clone(),
            scope: rule_scope(&task.scope),
            seal: task.seal.clone(),
            ..PromptContext::default()
        }
    }
}

/// A task's scope as a prompt states it: none when the task may change every file (no `scope`,
/// or `**`), where a rule naming `**` would read as an instruction and say nothing.
pub(crate) fn rule_scope(scope: &[String]) -> Vec<String> {
    if scope.iter().all(|s| s == "**") {
        Vec::new()
    } else {
        scope.to_vec()
    }
}

fn registry() -> Handlebars<'static> {
    let mut hb = Handlebars::new();
    // Prompts are not HTML: `&&` must reach the agent as `&&`.
    hb.register_escape_fn(handlebars::no_escape);
    // A misspelt variable must fail loudly rather than render as nothing.
    hb.set_strict_mode(true);
    hb
}

/// Renders a template with an attempt's facts.
pub fn render(template: &str, ctx: &PromptContext) -> Result<String, TemplateProblem> {
    match compiled(template) {
        Some(hb) => hb.render(COMPILED, ctx).map_err(|e| render_problem(&e)),
        // Not compiled: rendered as it comes, which reports the problem as it always has.
        None => registry()
            .render_template(template, ctx)
            .map_err(|e| render_problem(&e)),
    }
}

/// The name a template compiled by [`compiled`] is registered under.
const COMPILED: &str = "prompt";

/// TEMPLATE compiled once per process: `mvk check` renders it three times and every attempt
/// once more, and compiling is nearly all of a render's cost (handlebars' parser scans from the
/// template's start for each token's line). `None` when it does not compile. At most 64 texts
/// are kept: a long-lived process (`mvk mcp`, a worker) sees few, and forgets them all past
/// that.
fn compiled(template: &str) -> Option<std::sync::Arc<Handlebars<'static>>> {
    use std::collections::HashMap;
    use std::sync::{Arc, LazyLock, Mutex};
    static CACHE: LazyLock<Mutex<HashMap<String, Arc<Handlebars<'static>>>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    let mut cache = CACHE.lock().ok()?;
    if let Some(hb) = cache.get(template) {
        return Some(Arc::clone(hb));
    }
    let compiled = handlebars::Template::compile(template).ok()?;
    let mut hb = registry();
    hb.register_template(COMPILED, compiled);
    if cache.len() >= 64 {
        cache.clear();
    }
    let hb = Arc::new(hb);
    cache.insert(template.to_string(), Arc::clone(&hb));
    Some(hb)
}

fn render_problem(e: &handlebars::RenderError) -> TemplateProblem {
    TemplateProblem {
        message: match e.reason() {
            handlebars::RenderErrorReason::MissingVariable(Some(name)) => {
                format!("unknown variable `{name}`")
            }
            other => other.to_string(),
        },
        line: e.line_no,
        column: e.column_no,
    }
}

fn compile_problem(e: &handlebars::TemplateError) -> TemplateProblem {
    let (line, column) = e.pos().map_or((None, None), |(l, c)| (Some(l), Some(c)));
    TemplateProblem {
        message: e.reason().to_string(),
        line,
        column,
    }
}

/// The first attempt's prompt of task after task, as [`render`] makes it of a template and
/// [`sample_first_attempt`] with the task's own facts in it (goal, name, item, scope, seal,
/// gates): what `mvk check` holds to each task's `context-tokens`. Each template is compiled
/// once and the sample made into data once. Compiling is nearly all of a render's cost (the
/// parser finds each token's line by scanning from the template's start), and the thousands of
/// tasks of a fan-out share a few templates.
pub(crate) struct FirstPrompts {
    /// Each template registered under a short name of its own ([`FirstPrompts::names`]).
    hb: Handlebars<'static>,
    /// The name each template's text is registered under, or why it does not compile, by the
    /// text's address: the tasks of a fan-out share one text (one `Arc`), and hashing its
    /// kilobytes to find it, as a registry keyed by the text did, cost as much as compiling.
    /// The text is held, so that its address cannot be another text's while it is here.
    names: HashMap<usize, (Arc<str>, Result<String, TemplateProblem>)>,
    /// [`sample_first_attempt`] as data; each render puts the task's own facts in it.
    data: handlebars::Context,
}

impl Default for FirstPrompts {
    fn default() -> FirstPrompts {
        // The sample's types serialize infallibly; were it not so, every render would fail on
        // an unknown variable, and a render that fails warns of nothing.
        let data = serde_json::to_value(sample_first_attempt()).unwrap_or_default();
        FirstPrompts {
            hb: registry(),
            names: HashMap::new(),
            data: handlebars::Context::from(data),
        }
    }
}

impl FirstPrompts {
    /// The first attempt's prompt of `template` for a task whose own facts are those of `own`
    /// (its goal, task, item, scope, seal and gates; the rest of `own` is not read).
    pub(crate) fn render(
        &mut self,
        template: &Arc<str>,
        own: &PromptContext,
    ) -> Result<String, TemplateProblem> {
        let at = Arc::as_ptr(template).cast::<u8>() as usize;
        let count = self.names.len();
        let (_, name) = self.names.entry(at).or_insert_with(|| {
            let name = handlebars::Template::compile(template)
                .map(|compiled| {
                    let name = count.to_string();
                    self.hb.register_template(&name, compiled);
                    name
                })
                .map_err(|e| compile_problem(&e));
            (Arc::clone(template), name)
        });
        let name = name.as_ref().map_err(Clone::clone)?;
        if let serde_json::Value::Object(data) = self.data.data_mut() {
            use serde_json::Value;
            let strings =
                |v: &[String]| Value::Array(v.iter().cloned().map(Value::String).collect());
            data.insert("goal".into(), Value::String(own.goal.clone()));
            data.insert("task".into(), Value::String(own.task.clone()));
            data.insert(
                "item".into(),
                own.item.clone().map_or(Value::Null, Value::String),
            );
            data.insert("scope".into(), strings(&own.scope));
            data.insert("seal".into(), strings(&own.seal));
            data.insert(
                "gates".into(),
                serde_json::to_value(&own.gates).unwrap_or_default(),
            );
        }
        self.hb
            .render_with_context(name, &self.data)
            .map_err(|e| render_problem(&e))
    }
}

/// Compiles a template and renders it once with every field filled in, so that syntax errors
/// and unknown variables are found before a run starts.
pub(crate) fn check(template: &str) -> Result<(), TemplateProblem> {
    if let Err(e) = handlebars::Template::compile(template) {
        return Err(compile_problem(&e));
    }
    render(template, &sample())?;
    // The first attempt has no failure to show: a template that uses one unguarded would
    // pass the sample above and fail at the first render.
    render(template, &sample_first_attempt())?;
    // A seal, agent or merge failure has no gate, exit code or counts.
    render(template, &sample_bare_failure()).map(|_| ())
}

/// [`sample`] with a failure whose optional parts are all absent.
pub(crate) fn sample_bare_failure() -> PromptContext {
    let mut cx = sample();
    if let Some(f) = cx.failure.as_mut() {
        f.gate = None;
        f.exit_code = None;
        f.counts = None;
        f.blockers.clear();
    }
    cx
}

/// [`sample`] as the first attempt sees it: no previous failure, no earlier blockers, and every
/// other optional part absent too (no budgets set, no lessons, no place to write them).
pub(crate) fn sample_first_attempt() -> PromptContext {
    let mut gates = sample().gates;
    for g in &mut gates {
        g.result = None;
        g.summary = None;
        g.env.clear();
        g.sealed.clear();
    }
    PromptContext {
        attempt: 1,
        failure: None,
        previous_blockers: Vec::new(),
        budget: BudgetLeft {
            context_tokens: 16_000,
            ..BudgetLeft::default()
        },
        lineage: Vec::new(),
        last_diff: None,
        excerpts: Vec::new(),
        lessons: Vec::new(),
        pinned_lessons: None,
        lessons_file: None,
        gates,
        ..sample()
    }
}

/// A context with every optional part present, for [`check`].
pub fn sample() -> PromptContext {
    let blocker = Blocker {
        category: "correctness".into(),
        evidence: "the cursor is ignored".into(),
        location: "src/lib.rs:1".into(),
    };
    PromptContext {
        goal: "goal".into(),
        task: "task".into(),
        item: Some("item".into()),
        scope: vec!["src/**".into()],
        seal: vec!["tests/**".into()],
        attempt: 2,
        rung: "agent".into(),
        gates: vec![GateInfo {
            name: "tests".into(),
            evidence: "auto".into(),
            command: "sh tests/run.sh".into(),
            env: vec!["MVK_BASE=0123abcd".into()],
            sealed: vec!["tests/run.sh".into()],
            result: Some("fail".into()),
            summary: Some("1 failed".into()),
        }],
        failure: Some(Failure {
            attempt: 1,
            kind: "gate".into(),
            gate: Some("tests".into()),
            exit_code: Some(1),
            counts: Some(Counts {
                executed: 2,
                passed: 1,
                failed: 1,
                skipped: 0,
            }),
            output_tail: "tail".into(),
            criterion: "gate `tests` passes".into(),
            blockers: vec![blocker.clone()],
        }),
        diff: Some("diff".into()),
        previous_blockers: vec![blocker],
        budget: BudgetLeft {
            attempts: Some(3),
            tokens: Some(100_000),
            usd: Some("4.50".into()),
            wall: Some("55m".into()),
            context_tokens: 16_000,
        },
        lineage: vec![Lineage {
            attempt: 1,
            rung: 1,
            agent: "agent".into(),
            verdict: "failed".into(),
            criterion: "gate `tests` passes".into(),
        }],
        last_diff: Some(LastDiff {
            attempt: 1,
            stat: " src/lib.rs | 2 +-".into(),
            hunks: "--- a/src/lib.rs".into(),
            omitted: Some("1 hunk".into()),
        }),
        excerpts: vec![Excerpt {
            path: "src/lib.rs".into(),
            line: 3,
            from: 1,
            to: 5,
            text: "3 | x".into(),
        }],
        lessons: vec![Lesson {
            id: 1,
            text: "lesson".into(),
            source: "run r, task t, attempt 1 (maker)".into(),
        }],
        pinned_lessons: Some("- pinned".into()),
        lessons_file: Some("/tmp/lessons.md".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_of_every_file_is_no_rule_and_any_other_is_kept() {
        assert!(rule_scope(&["**".to_string()]).is_empty());
        assert!(rule_scope(&[]).is_empty());
        let some = vec!["src/**".to_string(), "**".to_string()];
        assert_eq!(rule_scope(&some), some);
    }

    // Guards the compiled-once path: task after task, with a template met again, it renders
    // what a fresh render of the sample with the task's facts does, and fails as that fails.
    #[test]
    fn first_prompts_render_as_a_fresh_render_does() {
        let mut first = FirstPrompts::default();
        let maker = crate::stdlib::get(crate::stdlib::MAKER_PROMPT).unwrap();
        let short = "{{task}}: {{goal}} {{#each scope}}[{{this}}]{{/each}} {{#each gates}}{{this.command}}{{/each}} {{attempt}}";
        let (maker, short): (Arc<str>, Arc<str>) = (Arc::from(maker), Arc::from(short));
        // The same texts again, in other places: rendered as the first are.
        let (maker2, short2): (Arc<str>, Arc<str>) = (Arc::from(&*maker), Arc::from(&*short));
        for (i, template) in [&maker, &short, &maker, &short, &maker2, &short2]
            .into_iter()
            .enumerate()
        {
            let own = PromptContext {
                goal: format!("goal {i}"),
                task: format!("t[{i}]"),
                item: (i % 2 == 0).then(|| format!("items/{i}.txt")),
                scope: vec![format!("src/{i}/**")],
                seal: if i > 1 {
                    vec!["tests/**".into()]
                } else {
                    Vec::new()
                },
                gates: vec![GateInfo {
                    name: "g".into(),
                    evidence: "auto".into(),
                    command: format!("check {i}"),
                    ..GateInfo::default()
                }],
                ..PromptContext::default()
            };
            let mut cx = sample_first_attempt();
            (cx.goal, cx.task, cx.item, cx.scope, cx.seal, cx.gates) = (
                own.goal.clone(),
                own.task.clone(),
                own.item.clone(),
                own.scope.clone(),
                own.seal.clone(),
                own.gates.clone(),
            );
            assert_eq!(first.render(template, &own), render(template, &cx), "{i}");
        }
        let misspelt: Arc<str> = Arc::from("{{gaol}}");
        assert_eq!(
            first.render(&misspelt, &PromptContext::default()),
            render(&misspelt, &sample_first_attempt())
        );
        let unclosed: Arc<str> = Arc::from("{{#if goal}}");
        for _ in 0..2 {
            assert!(first.render(&unclosed, &PromptContext::default()).is_err());
        }
    }

    #[test]
    fn renders_without_html_escaping() {
        let ctx = PromptContext {
            goal: "a && b <c>".into(),
            ..PromptContext::default()
        };
        assert_eq!(render("{{goal}}", &ctx).as_deref(), Ok("a && b <c>"));
    }

    #[test]
    fn misspelt_variable_is_an_error_with_a_line() {
        let err = check("line one\n{{gaol}}").err();
        let err = err.as_ref().map(|e| (e.line, e.message.contains("gaol")));
        assert_eq!(err, Some((Some(2), true)));
    }

    #[test]
    fn unclosed_block_is_an_error() {
        assert!(check("{{#if failure}}x").is_err_and(|e| e.line.is_some()));
    }

    #[test]
    fn first_attempt_renders_without_failure() {
        let t = "{{goal}}{{#if failure}} failed at {{failure.gate}}{{/if}}";
        let ctx = PromptContext {
            goal: "g".into(),
            ..PromptContext::default()
        };
        assert_eq!(render(t, &ctx).as_deref(), Ok("g"));
        assert!(check(t).is_ok());
    }

    #[test]
    fn counts_of_a_failure_without_counts_are_a_check_error() {
        assert!(check("{{#if failure}}{{failure.counts.failed}}{{/if}}").is_err());
        assert!(check("{{#if failure.counts}}{{failure.counts.failed}}{{/if}}").is_ok());
    }

    #[test]
    fn a_new_field_used_unguarded_or_misspelt_is_a_check_error() {
        assert!(check("{{last_diff.stat}}").is_err());
        assert!(check("{{#if last_diff}}{{last_diff.stat}}{{/if}}").is_ok());
        assert!(check("{{#if budget.usd}}{{budget.usd}}{{/if}} {{budget.context_tokens}}").is_ok());
        assert!(check("{{#each excerpts}}{{this.path}}:{{this.line}}{{/each}}").is_ok());
        assert!(check("{{#each excerpts}}{{this.pth}}{{/each}}").is_err());
        assert!(check("{{#each lineage}}{{this.verdict}}{{/each}}").is_ok());
        // An absent value renders as nothing; a misspelt name is still an error.
        assert!(check("{{lessons_file}}").is_ok());
        assert!(check("{{lesson_file}}").is_err());
        assert!(check(include_str!("../stdlib/prompts/maker.hbs")).is_ok());
    }

    #[test]
    fn unguarded_failure_is_a_check_error() {
        let err = check("{{goal}} {{failure.gate}}").err();
        assert!(err.is_some_and(|e| e.message.contains("failure")));
    }
}

/// Renders a template whose words go to a command or a forge (a pull request's title, body and
/// commands): strict (an unknown variable is an error, not a blank), nothing escaped.
pub(crate) fn render_plain(template: &str, vars: &serde_json::Value) -> Result<String, String> {
    let mut hb = handlebars::Handlebars::new();
    hb.set_strict_mode(true);
    hb.register_escape_fn(handlebars::no_escape);
    hb.render_template(template, vars)
        .map_err(|e| e.to_string())
}

/// The variables a pull request's title is given (see `book/src/pull-requests.md`).
pub(crate) const PR_TITLE_VARIABLES: &[&str] = &[
    "task", "goal", "subject", "run", "attempt", "branch", "base", "remote", "commit",
];
/// Its body: the title's, the handoff and the title.
pub(crate) const PR_BODY_VARIABLES: &[&str] = &[
    "task", "goal", "subject", "run", "attempt", "branch", "base", "remote", "commit", "handoff",
    "title",
];
/// Its `open` and `find` commands: the body's, the body and the body's file.
pub(crate) const PR_COMMAND_VARIABLES: &[&str] = &[
    "task",
    "goal",
    "subject",
    "run",
    "attempt",
    "branch",
    "base",
    "remote",
    "commit",
    "handoff",
    "title",
    "body",
    "body_file",
];
/// Its `state` command.
pub(crate) const PR_STATE_VARIABLES: &[&str] = &["url", "remote"];

#[cfg(test)]
mod plain_tests {
    use super::render_plain;

    #[test]
    fn plain_templates_are_strict_and_unescaped() {
        let vars = serde_json::json!({"task": "a<b>", "n": 1});
        assert_eq!(
            render_plain("{{task}} #{{n}}", &vars).as_deref(),
            Ok("a<b> #1")
        );
        assert!(render_plain("{{nope}}", &vars).is_err());
    }
}
