//! The agent's side of an attempt, in: its definition, the prompt and the worktree; out: the
//! process to start (argv, environment, sandbox), and what it printed read back (its usage and
//! rate limits, its objects absorbed, its failure when it crashed or timed out).

use std::path::{Path, PathBuf};

use super::AttemptSpec;
use super::failures::last_lines;
use crate::ir::Agent;
use crate::run::error::{RunError, blocking};
use crate::run::exec::process::{self, ProcessSpec, Termination};
use crate::run::failure::{Failure, FailureKind};
use crate::run::host::Host;
use crate::run::judge::adapter::{self, RateLimitMatcher, Usage};
use crate::run::judge::gate::{self};

/// The process of `spec.agent` in `worktree` with the agent environment, its command filled in,
/// its output in `dir/NAME.out` and `dir/NAME.err` and its group in `dir/NAME.pgid`; no timeout.
pub(crate) fn agent_process(
    host: &impl Host,
    spec: &AttemptSpec<'_>,
    (worktree, prompt_file, prompt_text): (&Path, &Path, &str),
    dir: &Path,
    name: &str,
    lessons: &Path,
) -> Result<ProcessSpec, RunError> {
    // A reviewer is given the verdict's JSON schema, for an agent that can be held to one.
    let schema = if name == crate::run::attempt::review::LOG_NAME {
        Some(crate::run::attempt::review::write_schema(dir)?)
    } else {
        None
    };
    let argv = fill_argv(
        &spec.agent.argv,
        host.run_id(),
        spec,
        (worktree, prompt_file, prompt_text),
        schema.as_deref(),
    )?;
    let (program, args) = argv.split_first().ok_or_else(|| RunError::Config {
        message: format!("agent `{}` has an empty command", spec.agent.name),
    })?;
    let mut ps = ProcessSpec::new(
        program,
        worktree,
        dir.join(format!("{name}.out")),
        dir.join(format!("{name}.err")),
    );
    ps.args = args.to_vec();
    ps.env = agent_env(host.run_id(), spec, worktree, prompt_file);
    ps.env.push((
        super::lessons::LESSONS_VAR.to_string(),
        lessons.display().to_string(),
    ));
    // mvk's own git environment (a hook, `git rebase -x`) must not steer the agent's git.
    ps.env_remove = crate::env::GIT_LOCATION_VARS
        .iter()
        .map(|v| v.to_string())
        .collect();
    ps.group_file = Some(dir.join(format!("{name}.pgid")));
    // The agent definition's own sandbox, else the loop's.
    if let Some(sandbox) = spec.agent.sandbox.as_ref().or(spec.task.sandbox.as_ref()) {
        let grants = crate::run::sandbox::Grants {
            cwd: worktree,
            tmp: dir.join(format!("{name}.tmp")),
            objects: Some(objects_dir(dir, name)),
            protected: host.protected(),
            lessons: lessons.parent(),
        };
        crate::run::sandbox::confine(&mut ps, sandbox, &grants).map_err(|source| {
            RunError::Agent {
                agent: spec.agent.name.clone(),
                source,
            }
        })?;
    }
    Ok(ps)
}

/// Where a sandboxed agent's commits put their objects until mvk adds them to the repository's
/// store: `dir/NAME.objects`.
pub(crate) fn objects_dir(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.objects"))
}

/// Adds the objects a sandboxed agent committed (`dir/agent.objects`) to the repository's
/// store, so that its commits can be read and kept; nothing when it ran unconfined.
/// Out comes why they were refused, when the agent committed more than mvk reads (its fault:
/// the attempt fails, not the run).
pub(super) async fn absorb_agent_objects(
    host: &impl Host,
    dir: &Path,
) -> Result<Option<String>, RunError> {
    use crate::run::sandbox::AbsorbError;
    let root = host.repo_root().to_path_buf();
    let objects = objects_dir(dir, "agent");
    let absorbed = blocking("add the agent's objects to the repository", move || {
        crate::run::sandbox::absorb_objects(&root, &objects)
    })
    .await?;
    match absorbed {
        Ok(_) => Ok(None),
        Err(AbsorbError::Git(source)) => Err(RunError::Git {
            action: "add the objects the agent committed to the repository".into(),
            source,
        }),
        Err(AbsorbError::Io {
            action,
            path,
            source,
        }) => Err(RunError::Io {
            action,
            path,
            source,
        }),
        Err(too_large) => Ok(Some(too_large.to_string())),
    }
}

/// What one call of `agent` spent, as its adapter reads it from its standard output `log`.
/// Tokens reported without dollars are priced from the agent's price table entry.
pub(crate) fn usage_of(agent: &Agent, log: &Path) -> Result<Option<Usage>, RunError> {
    let usage = adapter::read_usage(agent.adapter, log).map_err(|source| RunError::Io {
        action: "read the agent's output",
        path: log.to_path_buf(),
        source,
    })?;
    Ok(usage.map(|u| crate::run::meter::priced(agent.price.as_ref(), u)))
}

/// A rate-limited try's logs are kept beside the next try's, as `agent.limited-N.out` (and
/// `.err`), so what the agent printed when it hit the limit is never overwritten.
pub(crate) fn keep_limited_logs(ps: &ProcessSpec, try_number: u32) -> Result<(), RunError> {
    for log in [&ps.stdout_log, &ps.stderr_log] {
        let (Some(stem), Some(ext)) = (log.file_stem(), log.extension()) else {
            continue;
        };
        let kept = log.with_file_name(format!(
            "{}.limited-{try_number}.{}",
            stem.to_string_lossy(),
            ext.to_string_lossy()
        ));
        match std::fs::rename(log, &kept) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(RunError::Io {
                    action: "keep a rate-limited try's output",
                    path: log.clone(),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// The rate-limit matcher of `agent`'s adapter and its `rate-limit` patterns.
pub(crate) fn rate_limit_matcher(agent: &Agent) -> Result<RateLimitMatcher, RunError> {
    RateLimitMatcher::new(agent.adapter, &agent.rate_limits).map_err(|e| RunError::Config {
        message: format!(
            "a rate-limit pattern of agent `{}` is not a valid regular expression: {e}",
            agent.name
        ),
    })
}

/// The rate limit a failed agent (or reviewer) hit, if its output says so. The limit message
/// is the agent's last word: only the end of its output is looked at, not whatever project
/// output it relayed earlier.
pub(crate) fn rate_limited(
    matcher: &RateLimitMatcher,
    outcome: &process::ProcessOutcome,
) -> Option<adapter::RateLimit> {
    match outcome.termination {
        Termination::Exited(code) if code != 0 => matcher.check(&format!(
            "{}\n{}",
            last_lines(&outcome.stdout_tail, 20),
            last_lines(&outcome.stderr_tail, 20)
        )),
        // aider exits 0 when it gives up on a limit: only a limit after its last reply counts.
        Termination::Exited(0) if matcher.limits_exit_zero() => {
            matcher.aider_gave_up(&outcome.stdout_tail)
        }
        _ => None,
    }
}

pub(super) fn agent_env(
    run: &str,
    spec: &AttemptSpec<'_>,
    worktree: &Path,
    prompt_file: &Path,
) -> Vec<(String, String)> {
    let mut env = vec![
        (crate::env::RUN_VAR.to_string(), run.to_string()),
        (crate::env::TASK_VAR.to_string(), spec.task.name.clone()),
        ("MVK_ATTEMPT".to_string(), spec.number.to_string()),
        ("MVK_RUNG".to_string(), spec.rung.to_string()),
        ("MVK_WORKTREE".to_string(), worktree.display().to_string()),
        (
            "MVK_PROMPT_FILE".to_string(),
            prompt_file.display().to_string(),
        ),
        ("MVK_BASE".to_string(), spec.base.to_string()),
    ];
    env.extend(spec.agent.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

pub(super) fn fill_argv(
    argv: &[String],
    run: &str,
    spec: &AttemptSpec<'_>,
    (worktree, prompt_file, prompt_text): (&Path, &Path, &str),
    verdict_schema: Option<&Path>,
) -> Result<Vec<String>, RunError> {
    let lookup = |name: &str| -> Option<String> {
        Some(match name {
            "prompt" => prompt_text.to_string(),
            "prompt_file" => prompt_file.display().to_string(),
            "worktree" => worktree.display().to_string(),
            "attempt" => spec.number.to_string(),
            "rung" => spec.rung.to_string(),
            "task" => spec.task.name.clone(),
            "run" => run.to_string(),
            "verdict_schema" => verdict_schema
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            "verdict_schema_json" => verdict_schema
                .map(|_| crate::run::attempt::review::verdict_schema().to_string())
                .unwrap_or_default(),
            name => return left_value(&spec.left, name),
        })
    };
    // What only a reviewer gets, and what is left of budgets that have no limit, is left out.
    let mut absent: Vec<&str> = crate::ir::BUDGET_PLACEHOLDERS
        .iter()
        .copied()
        .filter(|name| left_value(&spec.left, name).is_none())
        .collect();
    if verdict_schema.is_none() {
        absent.extend(REVIEW_ONLY);
    }
    let dropped = left_out(argv, &absent);
    let mut out: Vec<String> = Vec::with_capacity(argv.len());
    for (arg, _) in argv.iter().zip(&dropped).filter(|(_, d)| !**d) {
        let filled = crate::resolve::interp::interpolate(arg, &lookup, &[])
            .map(std::borrow::Cow::into_owned)
            .map_err(|e| RunError::Config {
                message: format!("agent `{}`: cannot fill in `{arg}`: {e:?}", spec.agent.name),
            })?;
        out.push(filled);
    }
    Ok(out)
}

/// The placeholders only a reviewer's command line is given.
const REVIEW_ONLY: [&str; 2] = ["verdict_schema", "verdict_schema_json"];

/// What is left of a budget, as placeholder `name` of a command gives it: dollars (`1.25`),
/// tokens, whole seconds or attempts; `None` for a budget without a limit (or not a budget's
/// name).
fn left_value(left: &crate::run::policy::Left, name: &str) -> Option<String> {
    match name {
        "usd_left" => left.usd_micros.map(|m| {
            let text = format!("{}.{:06}", m / 1_000_000, m % 1_000_000);
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        }),
        "tokens_left" => left.tokens.map(|t| t.to_string()),
        "wall_left" => left.wall_ms.map(|w| (w / 1000).to_string()),
        "attempts_left" => left.attempts.map(|a| a.to_string()),
        _ => None,
    }
}

/// Which arguments of an agent's command line only a reviewer gets: one that holds
/// `{{verdict_schema}}` or `{{verdict_schema_json}}`, and the option it is the value of (`--flag`
/// before `{{…}}`, `-c` before `key={{…}}`); a maker's command line leaves them out.
pub(crate) fn review_only(argv: &[String]) -> Vec<bool> {
    left_out(argv, &REVIEW_ONLY)
}

/// Which arguments hold one of the placeholders `absent`, with the option each is the value
/// of (`--flag` before `{{…}}`, `-c` before `key={{…}}`): left out of the command line.
fn left_out(argv: &[String], absent: &[&str]) -> Vec<bool> {
    let mut dropped = vec![false; argv.len()];
    for (i, arg) in argv.iter().enumerate() {
        // Only a placeholder that is the whole value: `{{x}}`, `--flag={{x}}`, `key={{x}}`. One
        // inside a longer word (a shell script) is refused by `mvk check`, never cut out with
        // the word before it (`-c`).
        if !absent.iter().any(|name| {
            let p = format!("{{{{{name}}}}}");
            arg == &p || arg.ends_with(&format!("={p}"))
        }) {
            continue;
        }
        dropped[i] = true;
        // `--flag={{…}}` carries its option; a separate value takes the option before it along.
        if !arg.starts_with('-')
            && i > 0
            && argv[i - 1].starts_with('-')
            && !argv[i - 1].contains('=')
        {
            dropped[i - 1] = true;
        }
    }
    dropped
}

/// A failure of the agent itself (criterion, signature part), with its exit code and the end of
/// its output.
pub(super) fn agent_failure(
    attempt: u32,
    criterion: String,
    part: &str,
    exit_code: Option<i32>,
    dir: &Path,
) -> Failure {
    let mut f = Failure::new(attempt, FailureKind::Agent, criterion, &[part]);
    f.exit_code = exit_code;
    f.tail = agent_tail(dir);
    f
}

pub(super) fn agent_tail(dir: &Path) -> String {
    let mut out = String::new();
    for (name, label) in [("agent.err", "stderr"), ("agent.out", "stdout")] {
        if let Ok(t) = gate::tail_of(&dir.join(name), AGENT_TAIL_BYTES / 2)
            && !t.trim().is_empty()
        {
            out.push_str(&format!("[{label}]\n{t}\n"));
        }
    }
    out
}

/// Bytes of the agent's own output quoted in a failure (it crashed or timed out).
pub(super) const AGENT_TAIL_BYTES: u64 = 4 * 1024;

#[cfg(test)]
mod tests {
    use super::left_out;

    fn words(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_string()).collect()
    }

    #[test]
    fn an_unlimited_budget_leaves_out_its_value_and_option_and_nothing_else() {
        let absent = ["usd_left"];
        let argv = words(&[
            "claude",
            "--max-budget-usd",
            "{{usd_left}}",
            "-p",
            "{{prompt}}",
        ]);
        assert_eq!(left_out(&argv, &absent), [false, true, true, false, false]);
        // `-c key={{…}}` (Codex's configuration option) goes with its option.
        let argv = words(&["tool", "--cap={{usd_left}}", "-c", "key={{usd_left}}"]);
        assert_eq!(left_out(&argv, &absent), [false, true, true, true]);
        // Inside a script it is no value of its own (`mvk check` refuses it): the script and
        // its `-c` stay.
        let argv = words(&["sh", "-c", "tool --cap {{usd_left}}"]);
        assert_eq!(left_out(&argv, &absent), [false, false, false]);
    }
}
