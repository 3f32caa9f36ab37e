//! What an attempt hands its agent and its gates, in: the task's contract, the last failure and
//! the run's names; out: the prompt text, and the environment each gate runs in.

use std::path::Path;

use git2::Oid;

use super::AttemptSpec;
use crate::ir::Task;
use crate::prompt::{self, GateInfo, PromptContext};
use crate::run::error::RunError;
use crate::run::failure::Failure;

/// Renders the task's template, shrinking the quoted output until the prompt fits the context
/// budget (about four bytes a token).
pub(super) fn render_prompt(
    task: &Task,
    spec: &AttemptSpec<'_>,
    context_tokens: u32,
) -> Result<String, RunError> {
    let mut cx = PromptContext {
        goal: task.goal.clone(),
        task: task.name.clone(),
        item: task.item.clone(),
        scope: rule_scope(&task.scope),
        seal: task.seal.clone(),
        attempt: spec.number,
        rung: spec.agent.label(),
        gates: task
            .gates
            .iter()
            .map(|g| GateInfo {
                name: g.name.clone(),
                evidence: g.evidence.name().to_string(),
                result: None,
                summary: None,
            })
            .collect(),
        failure: spec.previous.map(Failure::to_prompt),
        diff: None,
        previous_blockers: Vec::new(),
    };
    let max = usize::try_from(context_tokens)
        .unwrap_or(usize::MAX)
        .saturating_mul(4);
    loop {
        let text = prompt::render(&task.prompt.text, &cx).map_err(|p| RunError::Template {
            template: task.prompt.name.clone(),
            message: p.to_string(),
            line: p.line,
        })?;
        let Some(failure) = cx.failure.as_mut() else {
            return Ok(text);
        };
        if text.len() <= max || failure.output_tail.is_empty() {
            return Ok(text);
        }
        // Keep the end of the output: that is where test runners put their verdicts.
        let excess = text.len() - max;
        let tail = &failure.output_tail;
        let mut cut = excess.saturating_add(64).min(tail.len());
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        failure.output_tail = if cut >= tail.len() {
            String::new()
        } else {
            format!(
                "[… {cut} bytes cut to fit the context budget]\n{}",
                &tail[cut..]
            )
        };
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

#[cfg(test)]
mod tests {
    use super::rule_scope;

    #[test]
    fn a_scope_of_every_file_is_no_rule_and_any_other_is_kept() {
        assert!(rule_scope(&["**".to_string()]).is_empty());
        assert!(rule_scope(&[]).is_empty());
        let some = vec!["src/**".to_string(), "**".to_string()];
        assert_eq!(rule_scope(&some), some);
    }
}
