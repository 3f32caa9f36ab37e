//! What an attempt hands its agent and its gates, in: the task's contract, the last failure, the
//! task's earlier attempts in the ledger and the new worktree; out: the prompt text within the
//! context budget (with what each part took), and the environment each gate runs in.

use std::path::{Path, PathBuf};

use git2::{Oid, Repository};

use super::{AttemptSpec, lookback};
use crate::ledger::AttemptRow;
use crate::prompt::fit::{self, Cuttable, DiffParts, Fitted};
use crate::prompt::{BudgetLeft, GateInfo, Lineage, PromptContext};
use crate::run::error::RunError;
use crate::run::failure::Failure;
use crate::run::host::{Budgets, Host};

/// The share of the context budget lessons may take, at most (one part in this many).
const LESSON_SHARE: usize = 8;

/// The prompt of attempt `spec` in `worktree`: the task's template rendered with the task's
/// contract, what the budgets have left, the lineage of its earlier attempts, and — cut to fit
/// `context-tokens` in the order [`crate::prompt::fit`] documents — the failing output's end,
/// the lessons, the previous attempt's diff and excerpts of the files the failure names.
pub(super) fn build_prompt(
    host: &impl Host,
    spec: &AttemptSpec<'_>,
    budgets: &Budgets,
    worktree: &Path,
    lessons_file: Option<&Path>,
) -> Result<Fitted, RunError> {
    let task = spec.task;
    let rows = host.ledger().attempt_rows(host.run_id(), &task.name)?;
    let earlier: Vec<&AttemptRow> = rows
        .iter()
        .filter(|r| r.state != "abandoned" && r.number < spec.number)
        .collect();
    let lineage = earlier.iter().map(|r| lineage_line(r)).collect();
    let failure = spec.previous.map(Failure::to_prompt);
    let mut parts = Cuttable::default();
    // Opened once, and only when something is read from git: a first attempt of a loop without
    // a pinned lessons file needs nothing of it.
    let repo = if spec.previous.is_some() || task.lessons.is_some() {
        Some(
            Repository::open(host.repo_root()).map_err(|source| RunError::Git {
                action: "open the repository".into(),
                source,
            })?,
        )
    } else {
        None
    };
    if let (Some(previous), Some(repo)) = (spec.previous, repo.as_ref()) {
        // A rejection's output is its blockers, which the failure lists already.
        if previous.kind != crate::run::failure::FailureKind::Review {
            parts.tail = previous.tail.trim_end().to_string();
        }
        // The attempt that failed, when it left a change (a landing's failure is its own
        // attempt's too).
        let made = earlier
            .iter()
            .rev()
            .find(|r| r.number == previous.attempt)
            .filter(|r| r.head.is_some());
        if let Some(row) = made {
            parts.diff = previous_diff(repo, row);
        }
        // The failing attempt's own commit, whose line numbers the output names (the base when
        // it left none).
        let at = made
            .and_then(|r| r.head.as_deref())
            .and_then(|h| Oid::from_str(h).ok())
            .unwrap_or(spec.base);
        let old = made.map(|r| PathBuf::from(&r.worktree));
        parts.excerpts = lookback::excerpts(&previous.tail, repo, at, worktree, old.as_deref());
    }
    parts.lessons = super::lessons::for_prompt(host, task)?;
    if let Some(repo) = repo.as_ref() {
        parts.pinned = super::lessons::pinned(task, repo, spec.base);
    }
    let cx = PromptContext {
        attempt: spec.number,
        rung: spec.agent.label(),
        gates: checks(host.run_id(), spec, worktree)?,
        failure,
        diff: None,
        previous_blockers: Vec::new(),
        budget: left(spec, budgets, host.started(&task.name)),
        lineage,
        last_diff: None,
        excerpts: Vec::new(),
        lessons: Vec::new(),
        pinned_lessons: None,
        lessons_file: lessons_file.map(|p| p.display().to_string()),
        ..PromptContext::of_task(task)
    };
    let budget = usize::try_from(budgets.context_tokens).unwrap_or(usize::MAX);
    fit::fit(&task.prompt.text, cx, parts, budget, budget / LESSON_SHARE).map_err(|p| {
        RunError::Template {
            template: task.prompt.name.clone(),
            message: p.to_string(),
            line: p.line,
        }
    })
}

/// One earlier attempt as the lineage shows it.
fn lineage_line(r: &AttemptRow) -> Lineage {
    let criterion = r
        .failure_json
        .as_deref()
        .and_then(|j| serde_json::from_str::<Failure>(j).ok())
        .map(|f| {
            let line = f.criterion.lines().next().unwrap_or_default();
            // One line each: a long criterion (a reviewer's blockers) is quoted whole elsewhere.
            if line.chars().count() > 200 {
                format!("{}…", line.chars().take(200).collect::<String>())
            } else {
                line.to_string()
            }
        })
        .unwrap_or_default();
    Lineage {
        attempt: r.number,
        rung: r.rung,
        agent: r.agent.clone(),
        verdict: r
            .outcome
            .clone()
            .unwrap_or_else(|| "unfinished".to_string()),
        criterion,
    }
}

/// The change attempt `row` made, in the pieces a prompt is cut at; none when its commits are
/// gone (a branch deleted by hand).
fn previous_diff(repo: &Repository, row: &AttemptRow) -> Option<DiffParts> {
    let base = Oid::from_str(&row.base).ok()?;
    let head = Oid::from_str(row.head.as_deref()?).ok()?;
    lookback::diff_parts(repo, row.number, base, head).ok()
}

/// What the budgets have left as the attempt starts, as a prompt states it.
fn left(spec: &AttemptSpec<'_>, budgets: &Budgets, started: std::time::Instant) -> BudgetLeft {
    let l = spec.left;
    // The wall clock has moved since the decision: what is left now.
    let limited = budgets.wall.is_some() || budgets.deadline.is_some();
    let wall = if limited {
        Some(budgets.time_left(started).unwrap_or_default())
    } else {
        None
    };
    BudgetLeft {
        attempts: l.attempts,
        tokens: l.tokens,
        usd: l.usd_micros.map(crate::plan::format_usd),
        wall: wall.map(crate::plan::format_duration),
        context_tokens: budgets.context_tokens,
    }
}

/// The task's gates as checks the agent can run itself: the command as typed in the worktree,
/// the variables it reads (those mvk sets, with this attempt's values, and the gate's own), and
/// which of the files it runs are sealed.
fn checks(run: &str, spec: &AttemptSpec<'_>, worktree: &Path) -> Result<Vec<GateInfo>, RunError> {
    let task = spec.task;
    let sealed = crate::glob::PathSet::new(&task.seal).map_err(|e| RunError::Config {
        message: format!("task `{}` has a seal mvk cannot read: {e}", task.name),
    })?;
    let mut mvk_vars = gate_env(
        run,
        &task.name,
        spec.number,
        spec.base,
        worktree,
        &task.scope,
    );
    // Any value proves nothing to the agent, and the gate's real run gets its own.
    mvk_vars.push(("MVK_NONCE".into(), "local-check".into()));
    Ok(task
        .gates
        .iter()
        .map(|g| {
            let mut text = g.argv.join(" ");
            // A script the command runs may read variables its command line does not name
            // (`sh checks/scope.sh` reading `$MVK_BASE`): they are needed all the same.
            for word in &g.argv {
                let path = worktree.join(word.trim_start_matches("./"));
                if !word.starts_with('-')
                    && !word.contains("{{")
                    && let Ok(Some(bytes)) = crate::run::exec::untrusted::read(&path, 64 * 1024)
                {
                    text.push(' ');
                    text.push_str(&String::from_utf8_lossy(&bytes));
                }
            }
            let mut env: Vec<String> = mvk_vars
                .iter()
                .filter(|(k, _)| mentions(&text, k))
                .map(|(k, v)| format!("{k}={}", crate::plan::shell_words(std::slice::from_ref(v))))
                .collect();
            env.extend(g.env.iter().map(|(k, v)| {
                if crate::run::judge::gate::is_credential(k) {
                    format!("{k}=\"${k}\"")
                } else {
                    format!("{k}={}", crate::plan::shell_words(std::slice::from_ref(v)))
                }
            }));
            let mut scripts: Vec<String> = g
                .argv
                .join(" ")
                .split(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ';' | '(' | ')'))
                .map(|w| w.trim_start_matches("./"))
                .filter(|w| !w.is_empty() && !w.starts_with('-') && !w.starts_with('$'))
                .filter(|w| sealed.covers(w) && worktree.join(w).is_file())
                .map(str::to_string)
                .collect();
            scripts.sort();
            scripts.dedup();
            GateInfo {
                name: g.name.clone(),
                evidence: g.evidence.name().to_string(),
                command: crate::plan::shell_words(&g.argv),
                env,
                sealed: scripts,
                result: None,
                summary: None,
            }
        })
        .collect())
}

/// Whether `text` reads the variable `name` (`$NAME`, `${NAME…}`).
fn mentions(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(i, _)| {
        let before = &text[..i];
        let after = text[i + name.len()..].chars().next();
        let whole = !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        whole && (before.ends_with('$') || before.ends_with("${"))
    })
}

/// The `MVK_*` variables a gate sees. `MVK_SCOPE` holds the task's scope globs, one a line, so
/// that a gate (the stdlib's `no-changes-outside-scope`) can hold a change to it; `MVK_EXE` is
/// this executable, whose `__glob-match` helper the stdlib's generic gates call (when the
/// system cannot say where it is, it is left out and those gates fail saying so).
pub(super) fn gate_env(
    run: &str,
    task: &str,
    attempt: u32,
    base: Oid,
    worktree: &Path,
    scope: &[String],
) -> Vec<(String, String)> {
    let mut env = vec![
        (crate::env::RUN_VAR.to_string(), run.to_string()),
        (crate::env::TASK_VAR.to_string(), task.to_string()),
        ("MVK_ATTEMPT".to_string(), attempt.to_string()),
        ("MVK_BASE".to_string(), base.to_string()),
        ("MVK_WORKTREE".to_string(), worktree.display().to_string()),
        (crate::env::SCOPE_VAR.to_string(), scope.join("\n")),
    ];
    if let Ok(exe) = crate::exe::path() {
        env.push((crate::env::MVK_EXE.to_string(), exe.display().to_string()));
    }
    env
}

/// The gate environment for gates run on a landing candidate.
pub fn landing_env(
    run: &str,
    task: &str,
    attempt: u32,
    base: Oid,
    worktree: &Path,
    scope: &[String],
) -> Vec<(String, String)> {
    gate_env(run, task, attempt, base, worktree, scope)
}
