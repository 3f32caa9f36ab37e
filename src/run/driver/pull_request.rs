//! An accepted change in (`merge strategy="pr"`); out a pull request: the change's commit,
//! made on its attempt's base, pushed to the remote as a branch of its own, and a pull request
//! opened for it through the forge's command line (the GitHub CLI unless the loop names
//! another), its body the handoff a reviewer needs. The target branch does not move.
//!
//! Each step is recorded in the ledger before the next is taken (`pull_requests`: intent,
//! pushed, opened), and a pull request is looked for before one is opened, so a resume after a
//! crash at any instant pushes and opens each at most once. A push the remote refuses, or a
//! forge command that fails, stops the task at a checkpoint with the change kept on its branch;
//! `mvk approve` tries again from the step that failed.
//!
//! Tasks that wait for such a task start from its pushed commit (`dependents="stack"`, their
//! own pull request based on its branch) or from the remote's target once its pull request has
//! merged (`dependents="merged"`).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use git2::Oid;

use super::landing::Landing;
use super::{RunError, Runner, blocking, locked};
use crate::ir::{Dependents, PullRequest, Task};
use crate::ledger::{PullRequestRow, PullRequestStart};
use crate::prompt::render_plain as render;
use crate::run::attempt::AttemptSpec;
use crate::run::event::Event;
use crate::run::exec::process::{self, ProcessSpec, Termination};
use crate::run::git::land::{self, Prepared};
use crate::run::host::Host;
use crate::run::outcome::Outcome;

/// How long a push or fetch may take.
const GIT_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// How long one forge command (open, find, state) may take.
const FORGE_TIMEOUT: Duration = Duration::from_secs(2 * 60);

/// Where a task that waits for tasks landed as pull requests starts.
pub(super) enum PrStart {
    /// As any task: from the target branch's tip.
    Target,
    /// From `base` (a dependency's pushed commit, or the remote's target after the merges).
    At(Oid),
    /// It cannot start: it ends with this outcome and reason (a pull request it waits for was
    /// closed unmerged, the changes it builds on conflict, the forge cannot be asked).
    End(crate::run::outcome::Outcome, String),
}

/// How many times in a row the forge may fail to say a pull request's state before the task
/// that waits for it stops for a person.
const STATE_FAILURES: u32 = 5;

/// What a command printed and how it ended.
struct Ran {
    ok: bool,
    stdout: String,
    /// Its output's end, for a person: stderr, else stdout.
    said: String,
}

impl<'a> Runner<'a> {
    /// Lands `head` (made from `spec.base`) as a pull request against `target` (or, stacked, the
    /// branch of the task it builds on), or carries on one a dead run began.
    pub(super) async fn land_pr(
        &self,
        task: &'a Task,
        target: &str,
        spec: &AttemptSpec<'_>,
        (attempt_id, head): (i64, Oid),
    ) -> Result<Landing, RunError> {
        let pr = task.merge.pr.clone().unwrap_or_default();
        let rows = self.ledger().pull_requests(&self.run_id)?;
        let known = rows.iter().find(|r| r.attempt_id == attempt_id).cloned();
        let row = match known {
            Some(row) => row,
            None => {
                let message = super::landing::landing_message(task, &self.run_id, spec.number);
                let (root, into, base) =
                    (self.opts.repo_root.clone(), target.to_string(), spec.base);
                let prepared = blocking("make the pull request's commit", move || {
                    land::prepare(
                        &root,
                        &into,
                        base,
                        crate::ir::Strategy::Squash,
                        base,
                        head,
                        &message,
                    )
                })
                .await??;
                let commit = match prepared {
                    Prepared::Nothing { .. } => {
                        self.emit(
                            Some(&task.name),
                            Some(spec.number),
                            Event::MergeEmpty {
                                into: target.to_string(),
                            },
                        )?;
                        return Ok(Landing::Landed(None));
                    }
                    Prepared::Commit { commit, .. } => commit,
                };
                let branch = pr_branch(&self.run_id, task);
                let base_branch = self.pr_base_branch(task, target, &pr)?;
                let (root, name) = (self.opts.repo_root.clone(), branch.clone());
                blocking("keep the pull request's branch", move || {
                    land::set_branch(&root, &name, commit, "mvk: the change of a pull request")
                })
                .await??;
                self.ledger().begin_pull_request(&PullRequestStart {
                    run: &self.run_id,
                    task: &task.name,
                    attempt_id,
                    remote: &pr.remote,
                    branch: &branch,
                    base_branch: &base_branch,
                    commit: &commit.to_string(),
                })?
            }
        };
        crate::run::failpoint("pr-intent");
        // Title and body before anything goes out: a template that cannot render stops here.
        let vars = match self.pr_vars(task, spec.number, &row, &pr) {
            Ok(vars) => vars,
            Err(e) => return self.refused(task, &row, "render", &e),
        };
        if row.state == "intent" {
            let mut args = vec!["push".to_string(), "--porcelain".to_string()];
            // An earlier attempt of this task may have pushed the branch (its pull request was
            // refused, then a person asked for another attempt): ours replaces it, but only
            // while the remote still holds what mvk pushed there.
            let earlier: Vec<&str> = rows
                .iter()
                .filter(|r| r.task == task.name && r.branch == row.branch && r.id != row.id)
                .map(|r| r.commit.as_str())
                .collect();
            if !earlier.is_empty() {
                let at = format!("refs/heads/{}", row.branch);
                let ls = self
                    .git(task, "ls-remote", &["ls-remote", &row.remote, &at])
                    .await?;
                let there = ls.stdout.split_whitespace().next().unwrap_or("");
                if ls.ok && earlier.contains(&there) {
                    args.push(format!("--force-with-lease={at}:{there}"));
                }
            }
            args.push(row.remote.clone());
            args.push(format!("{}:refs/heads/{}", row.commit, row.branch));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let push = self.git(task, "push", &args).await?;
            if !push.ok {
                return self.refused(task, &row, "push", &push.said);
            }
            crate::run::failpoint("pr-pushing");
            self.ledger()
                .update_pull_request(row.id, Some("pushed"), None, None)?;
            self.emit(
                Some(&task.name),
                Some(spec.number),
                Event::PrPushed {
                    remote: row.remote.clone(),
                    branch: row.branch.clone(),
                    commit: row.commit.clone(),
                },
            )?;
            crate::run::failpoint("pr-pushed");
        }
        let (url, found) = match row.url.clone().filter(|_| row.state == "opened") {
            Some(url) => (url, true),
            None => match self.find_pr(task, &row, &pr, &vars).await? {
                Err(refusal) => return Ok(refusal),
                Ok(Some(url)) => (url, true),
                Ok(None) => {
                    let open = self.forge(task, "open", &pr.open, &vars).await?;
                    if !open.ok {
                        return self.refused(task, &row, "open", &open.said);
                    }
                    crate::run::failpoint("pr-opened");
                    match first_url(&open.stdout) {
                        Some(url) => (url, false),
                        // A forge that prints no URL: the one it opened is looked for.
                        None => match self.find_pr(task, &row, &pr, &vars).await? {
                            Err(refusal) => return Ok(refusal),
                            Ok(Some(url)) => (url, false),
                            Ok(None) => {
                                let why = format!(
                                    "`open` printed no URL, and `find` finds no pull request of the branch: {}",
                                    open.said
                                );
                                return self.refused(task, &row, "open", &why);
                            }
                        },
                    }
                }
            },
        };
        if row.state != "opened" {
            self.ledger()
                .update_pull_request(row.id, Some("opened"), Some(&url), None)?;
            self.emit(
                Some(&task.name),
                Some(spec.number),
                Event::PrOpened {
                    url: url.clone(),
                    branch: row.branch.clone(),
                    base: row.base_branch.clone(),
                    found,
                },
            )?;
        }
        let commit = Oid::from_str(&row.commit).map_err(|source| RunError::Git {
            action: format!("read the pull request's commit `{}`", row.commit),
            source,
        })?;
        Ok(Landing::Landed(Some(commit)))
    }

    /// The URL of the open pull request of `row`'s branch, `None` when there is none, or the
    /// refusal when the forge cannot say (opening one then could open a second).
    async fn find_pr(
        &self,
        task: &Task,
        row: &PullRequestRow,
        pr: &PullRequest,
        vars: &serde_json::Value,
    ) -> Result<Result<Option<String>, Landing>, RunError> {
        let find = self.forge(task, "find", &pr.find, vars).await?;
        if !find.ok {
            return self.refused(task, row, "find", &find.said).map(Err);
        }
        Ok(Ok(first_url(&find.stdout)))
    }

    /// Where `task` starts when what it waits for landed as pull requests: stacked on their
    /// commits, or, with `dependents="merged"`, from the remote's target once they merged
    /// (asking every `poll`). A task a resumed run had begun keeps the base it began from.
    pub(super) async fn pr_start(
        &self,
        task: &Task,
        target: &str,
        begun: bool,
    ) -> Result<PrStart, RunError> {
        let deps = self.dependency_prs(task)?;
        if deps.is_empty() {
            return Ok(PrStart::Target);
        }
        if begun {
            let recorded = self
                .ledger()
                .task_rows(&self.run_id)?
                .into_iter()
                .find(|r| r.name == task.name)
                .and_then(|r| r.base)
                .and_then(|b| Oid::from_str(&b).ok());
            if let Some(base) = recorded {
                return Ok(PrStart::At(base));
            }
        }
        let pr = task.merge.pr.clone().unwrap_or_default();
        match pr.dependents {
            Dependents::Stack => {
                let commits: Vec<Oid> = deps
                    .iter()
                    .map(|d| {
                        Oid::from_str(&d.commit).map_err(|source| RunError::Git {
                            action: format!("read the commit `{}` of task `{}`", d.commit, d.task),
                            source,
                        })
                    })
                    .collect::<Result<_, _>>()?;
                let root = self.opts.repo_root.clone();
                let joined = blocking("join the changes a task builds on", move || {
                    land::join(&root, &commits)
                })
                .await?;
                match joined {
                    Ok(base) => Ok(PrStart::At(base)),
                    Err(land::LandError::Conflict { paths, .. }) => {
                        let urls: Vec<String> = deps.iter().filter_map(|d| d.url.clone()).collect();
                        Ok(PrStart::End(
                            Outcome::Human,
                            format!(
                                "the pull requests it builds on ({}) conflict at {}: merge them first, or give it dependents=\"merged\"",
                                urls.join(", "),
                                paths.join(", ")
                            ),
                        ))
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Dependents::Merged => {
                // Waiting holds the task's scope but no slot of `parallel`.
                locked(&self.slots).landing.insert(task.name.clone());
                self.slots_changed.notify_waiters();
                let waited = self.wait_for_merges(task, target, &pr, &deps).await;
                self.rejoin(&task.name).await;
                waited
            }
        }
    }

    /// Asks the forge every `poll` until the pull requests `deps` have merged, then fetches the
    /// target from the remote and says to start from it.
    async fn wait_for_merges(
        &self,
        task: &Task,
        target: &str,
        pr: &PullRequest,
        deps: &[PullRequestRow],
    ) -> Result<PrStart, RunError> {
        let urls: Vec<String> = deps.iter().filter_map(|d| d.url.clone()).collect();
        self.emit(
            Some(&task.name),
            None,
            Event::PrWaiting { urls: urls.clone() },
        )?;
        self.task_state(&task.name, |s| {
            s.state = "waiting".into();
            s.note = Some(format!("for {} to merge", urls.join(", ")));
        });
        self.write_state()?;
        let deadline = self
            .program
            .flow
            .as_ref()
            .and_then(|f| f.budget.wall)
            .map(|w| self.run_started() + w);
        let mut failures = 0;
        loop {
            let mut open = false;
            for url in &urls {
                let mut vars = serde_json::Map::new();
                vars.insert("url".into(), url.clone().into());
                vars.insert("remote".into(), pr.remote.clone().into());
                let state = self.forge(task, "state", &pr.state, &vars.into()).await?;
                if !state.ok {
                    failures += 1;
                    if failures >= STATE_FAILURES {
                        return Ok(PrStart::End(
                            Outcome::Human,
                            format!(
                                "the forge could not say whether {url} merged, {failures} times in a row: {}",
                                state.said
                            ),
                        ));
                    }
                    open = true;
                    continue;
                }
                failures = 0;
                let said = state.stdout.trim().to_ascii_lowercase();
                if said.contains("merged") {
                    continue;
                }
                if said.contains("closed") {
                    return Ok(PrStart::End(
                        Outcome::Skipped,
                        format!("the pull request {url} it builds on was closed without merging"),
                    ));
                }
                open = true;
            }
            if !open {
                break;
            }
            if deadline.is_some_and(|d| std::time::Instant::now() + pr.poll > d) {
                return Ok(PrStart::End(
                    Outcome::Budget,
                    format!(
                        "the flow's wall time ran out while it waited for {} to merge",
                        urls.join(", ")
                    ),
                ));
            }
            tokio::time::sleep(pr.poll).await;
        }
        // One ref per task: tasks woken by the same merge fetch side by side.
        let local = format!(
            "refs/mvk/{}/{}/upstream",
            self.run_id,
            crate::slug::slug(&task.name)
        );
        let refspec = format!("+refs/heads/{target}:{local}");
        let fetch = self
            .git(task, "fetch", &["fetch", "--no-tags", &pr.remote, &refspec])
            .await?;
        if !fetch.ok {
            return Ok(PrStart::End(
                Outcome::Human,
                format!(
                    "cannot fetch `{target}` from `{}` after the merge: {}",
                    pr.remote, fetch.said
                ),
            ));
        }
        let root = self.opts.repo_root.clone();
        let base = blocking("read the fetched target", move || {
            land::resolve_ref(&root, &local)
        })
        .await??;
        Ok(PrStart::At(base))
    }

    /// The pull requests opened for the tasks `task` comes after (the last of each).
    fn dependency_prs(&self, task: &Task) -> Result<Vec<PullRequestRow>, RunError> {
        if task.after.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.ledger().pull_requests(&self.run_id)?;
        Ok(task
            .after
            .iter()
            .filter_map(|dep| {
                rows.iter()
                    .rfind(|r| &r.task == dep && r.state == "opened")
                    .cloned()
            })
            .collect())
    }

    /// The branch `task`'s pull request asks to merge into: the one task it builds on's, when
    /// stacked on exactly one; `target` otherwise.
    fn pr_base_branch(
        &self,
        task: &Task,
        target: &str,
        pr: &PullRequest,
    ) -> Result<String, RunError> {
        let deps = self.dependency_prs(task)?;
        Ok(match (pr.dependents, deps.as_slice()) {
            (Dependents::Stack, [one]) => one.branch.clone(),
            _ => target.to_string(),
        })
    }

    /// Runs git in the main checkout, logged under the task's trail (never prompting for a
    /// password: an unattended run has no one to type it).
    async fn git(&self, task: &Task, step: &str, args: &[&str]) -> Result<Ran, RunError> {
        let mut spec = self.pr_process(task, step, "git");
        spec.args = args.iter().map(|a| (*a).to_string()).collect();
        spec.env.push(("GIT_TERMINAL_PROMPT".into(), "0".into()));
        spec.timeout = Some(GIT_TIMEOUT);
        self.pr_run(spec).await
    }

    /// Runs one of the forge's commands, its words rendered with `vars`.
    async fn forge(
        &self,
        task: &Task,
        step: &str,
        argv: &[String],
        vars: &serde_json::Value,
    ) -> Result<Ran, RunError> {
        let words = argv
            .iter()
            .map(|w| render(w, vars))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| RunError::Config {
                message: format!(
                    "the `{step}` command of task `{}`'s pull request: {e}",
                    task.name
                ),
            })?;
        let Some((program, args)) = words.split_first() else {
            return Err(RunError::Config {
                message: format!(
                    "the `{step}` command of task `{}`'s pull request is empty",
                    task.name
                ),
            });
        };
        let mut spec = self.pr_process(task, step, program);
        spec.args = args.to_vec();
        spec.env.push(("GIT_TERMINAL_PROMPT".into(), "0".into()));
        // The GitHub CLI asks questions on a terminal; an unattended run answers none.
        spec.env.push(("GH_PROMPT_DISABLED".into(), "1".into()));
        spec.timeout = Some(FORGE_TIMEOUT);
        self.pr_run(spec).await
    }

    fn pr_process(&self, task: &Task, step: &str, program: &str) -> ProcessSpec {
        let dir = self.pr_dir(task);
        ProcessSpec::new(
            program,
            self.opts.repo_root.clone(),
            dir.join(format!("{step}.out")),
            dir.join(format!("{step}.err")),
        )
    }

    fn pr_dir(&self, task: &Task) -> PathBuf {
        self.trail
            .run_dir()
            .join(crate::slug::slug(&task.name))
            .join("pr")
    }

    async fn pr_run(&self, spec: ProcessSpec) -> Result<Ran, RunError> {
        match process::run(&spec).await {
            Ok(out) => {
                let said = if out.stderr_tail.trim().is_empty() {
                    out.stdout_tail.trim().to_string()
                } else {
                    out.stderr_tail.trim().to_string()
                };
                let said = match out.termination {
                    Termination::Exited(0) => said,
                    Termination::Exited(code) => format!("exit code {code}: {said}"),
                    Termination::Signaled(sig) => format!("killed by signal {sig}: {said}"),
                    Termination::Stopped => format!("stopped by mvk: {said}"),
                    Termination::TimedOut => format!(
                        "no answer within {}: {said}",
                        crate::plan::format_duration(spec.timeout.unwrap_or_default())
                    ),
                };
                Ok(Ran {
                    ok: out.termination == Termination::Exited(0),
                    stdout: out.stdout_tail,
                    said,
                })
            }
            // A forge command that is not installed is the person's to fix, like a refusal.
            Err(e) => Ok(Ran {
                ok: false,
                stdout: String::new(),
                said: e.to_string(),
            }),
        }
    }

    /// Stops the task at a checkpoint after `step` was refused, the change kept on its branch.
    fn refused(
        &self,
        task: &Task,
        row: &PullRequestRow,
        step: &str,
        said: &str,
    ) -> Result<Landing, RunError> {
        let said: String = said.chars().take(2000).collect();
        self.ledger()
            .update_pull_request(row.id, None, None, Some(&format!("{step}: {said}")))?;
        self.emit(
            Some(&task.name),
            None,
            Event::PrRefused {
                step: step.to_string(),
                branch: row.branch.clone(),
                detail: said.clone(),
            },
        )?;
        let what = match step {
            "push" => format!(
                "the push of branch `{}` to `{}` was refused",
                row.branch, row.remote
            ),
            _ => format!(
                "the pull request of branch `{}` could not be opened",
                row.branch
            ),
        };
        Ok(Landing::Wait(format!(
            "{what} ({said}); the change is kept on branch `{}` ({}); fix the cause and approve to try again",
            row.branch,
            &row.commit[..row.commit.len().min(12)]
        )))
    }

    /// The variables of a pull request's commands: its title and body rendered (the body
    /// written to a file), or why one of them does not render.
    fn pr_vars(
        &self,
        task: &Task,
        attempt: u32,
        row: &PullRequestRow,
        pr: &PullRequest,
    ) -> Result<serde_json::Value, String> {
        let mut vars = base_vars(task, &self.run_id, attempt, row);
        let title =
            render(&pr.title, &vars.clone().into()).map_err(|e| format!("the title: {e}"))?;
        let handoff = self.pr_handoff(task, row).map_err(|e| e.to_string())?;
        vars.insert("handoff".into(), handoff.into());
        vars.insert("title".into(), title.into());
        let body = render(&pr.body, &vars.clone().into()).map_err(|e| format!("the body: {e}"))?;
        let dir = self.pr_dir(task);
        let body_file = dir.join("body.md");
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&body_file, &body))
            .map_err(|e| format!("cannot write `{}`: {e}", body_file.display()))?;
        vars.insert("body".into(), body.into());
        vars.insert("body_file".into(), body_file.display().to_string().into());
        Ok(vars.into())
    }

    /// What a reviewer of the pull request needs: the goal, each attempt and its verdict, the
    /// evidence of the accepted one's gates, the seal, the reviewer's verdict, the cost.
    fn pr_handoff(&self, task: &Task, row: &PullRequestRow) -> Result<String, RunError> {
        let ledger = self.ledger();
        let attempts = ledger.attempt_rows(&self.run_id, &task.name)?;
        let gates = ledger.task_gate_results(&self.run_id, &task.name)?;
        let review = ledger.recorded_review(row.attempt_id)?;
        let spent = ledger.spent(&self.run_id, Some(&task.name))?;
        drop(ledger);
        let mut text = String::new();
        let _ = writeln!(
            text,
            "## Goal\n\n> {}\n",
            task.goal.trim().replace('\n', "\n> ")
        );
        let _ = writeln!(text, "## Attempts\n");
        for a in &attempts {
            let verdict = if a.id == row.attempt_id {
                "accepted".to_string()
            } else {
                a.failure_json
                    .as_deref()
                    .and_then(|j| serde_json::from_str::<crate::run::attempt::Failure>(j).ok())
                    .map_or_else(
                        || a.outcome.clone().unwrap_or_else(|| a.state.clone()),
                        |f| format!("{}: {}", f.kind.name(), f.criterion),
                    )
            };
            let _ = writeln!(text, "- attempt {} ({}): {verdict}", a.number, a.agent);
        }
        let _ = writeln!(text, "\n## Evidence of the accepted attempt\n");
        let mut any = false;
        for g in gates.iter().filter(|g| g.attempt_id == row.attempt_id) {
            any = true;
            let counts = match (g.executed, g.passed, g.failed, g.skipped) {
                (Some(e), Some(p), Some(f), Some(s)) => {
                    format!("{e} executed, {p} passed, {f} failed, {s} skipped")
                }
                _ => "no counts".to_string(),
            };
            let _ = writeln!(
                text,
                "- gate `{}`: {} ({counts}; evidence: {})",
                g.name, g.verdict, g.evidence
            );
        }
        if !any {
            let _ = writeln!(text, "- no gates");
        }
        let seal = super::checkpoint::seal_list(task);
        let _ = writeln!(
            text,
            "\nSealed (the agent could not change them): {seal}.\n"
        );
        match review {
            Some((verdict, _, reason)) => {
                let _ = writeln!(text, "## Review\n\n{verdict}: {}\n", reason.trim());
            }
            None => {
                let _ = writeln!(text, "## Review\n\nno reviewer in this loop\n");
            }
        }
        let _ = writeln!(
            text,
            "## Cost\n\n{} tokens, ${:.2}\n",
            spent.input_tokens.saturating_add(spent.output_tokens),
            spent.usd_micros as f64 / 1e6
        );
        let _ = writeln!(
            text,
            "---\nOpened by mvk: run `{}`, task `{}`, digest `{}`. `mvk status {}` shows the run.",
            self.run_id, task.name, task.meta.digest, self.run_id
        );
        Ok(text)
    }
}

/// The branch a task's pull request is pushed as.
pub(super) fn pr_branch(run: &str, task: &Task) -> String {
    format!("mvk/{run}/{}/pr", crate::slug::slug(&task.name))
}

fn base_vars(
    task: &Task,
    run: &str,
    attempt: u32,
    row: &PullRequestRow,
) -> serde_json::Map<String, serde_json::Value> {
    let subject = task.goal.lines().next().unwrap_or("").trim().to_string();
    let mut vars = serde_json::Map::new();
    vars.insert("task".into(), task.name.clone().into());
    vars.insert("goal".into(), task.goal.trim().to_string().into());
    vars.insert("subject".into(), subject.into());
    vars.insert("run".into(), run.to_string().into());
    vars.insert("attempt".into(), attempt.into());
    vars.insert("branch".into(), row.branch.clone().into());
    vars.insert("base".into(), row.base_branch.clone().into());
    vars.insert("remote".into(), row.remote.clone().into());
    vars.insert("commit".into(), row.commit.clone().into());
    vars
}

/// The first `http://` or `https://` URL in `text`.
fn first_url(text: &str) -> Option<String> {
    text.split_whitespace()
        .find(|w| w.starts_with("https://") || w.starts_with("http://"))
        .map(|w| w.trim_end_matches(['.', ',', ')', ']']).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_is_found_in_what_a_forge_prints() {
        assert_eq!(
            first_url("Creating pull request\nhttps://github.com/o/r/pull/7\n").as_deref(),
            Some("https://github.com/o/r/pull/7")
        );
        assert_eq!(first_url("nothing here"), None);
    }
}
