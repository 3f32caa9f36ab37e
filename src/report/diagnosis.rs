//! A run's rows in; the pattern of a run that ended badly (or died) out: silent death, stuck,
//! runaway or random walk, with the task and the reason.
//!
//! The rules are in order; the first that fits names the pattern:
//! 0. **stopped**: a stop signal from outside (a person's Ctrl-C, a `kill`) ended its process;
//! 1. **silent death**: the ledger says running but the process is gone ([`Liveness::Interrupted`]);
//! 2. **stuck**: a task ended `stuck`, or its last [`STUCK_REPEATS`] failures share a signature;
//! 3. **runaway**: a task made at least [`RUNAWAY_ATTEMPTS`] attempts and no gate of any of them
//!    passed;
//! 4. **random walk**: a task failed at least [`RANDOM_WALK_ATTEMPTS`] times, every failure with a
//!    different signature.
//!
//! A run that was accepted, or is still alive, has no pattern.

use serde::Serialize;

use crate::ledger::read::{AttemptRow, Liveness, RunRow, TaskRow};

/// Attempts without a single passing gate that make a task a runaway.
pub(crate) const RUNAWAY_ATTEMPTS: usize = 5;
/// Failures, all different, that make a task a random walk.
pub(crate) const RANDOM_WALK_ATTEMPTS: usize = 3;
/// The same failure this many times in a row makes a task stuck.
pub(crate) const STUCK_REPEATS: usize = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Pattern {
    /// A stop signal from outside ended its process: a person's (or a supervisor's) stop.
    Stopped,
    /// mvk stopped on its own error (exit 70), its tasks left for `mvk resume`.
    Error,
    SilentDeath,
    Stuck,
    Runaway,
    RandomWalk,
}

impl Pattern {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Pattern::Stopped => "stopped",
            Pattern::Error => "mvk's own error",
            Pattern::SilentDeath => "silent death",
            Pattern::Stuck => "stuck",
            Pattern::Runaway => "runaway",
            Pattern::RandomWalk => "random walk",
        }
    }
}

/// What went wrong with a run, in one line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Diagnosis {
    pub(crate) pattern: Pattern,
    /// The task that shows it (none for a silent death).
    pub(crate) task: Option<String>,
    pub(crate) reason: String,
}

/// The pattern of `run`, from its own tasks, attempts and gate results.
pub(crate) fn diagnose(
    run: &RunRow,
    liveness: &Liveness,
    tasks: &[TaskRow],
    attempts: &[AttemptRow],
) -> Option<Diagnosis> {
    if let Liveness::Interrupted {
        stopped_by: Some(_),
        reason,
        ..
    } = liveness
    {
        return Some(Diagnosis {
            pattern: Pattern::Stopped,
            task: None,
            reason: reason.clone(),
        });
    }
    if let Liveness::Interrupted { reason, .. } | Liveness::Unknown { reason, .. } = liveness {
        return Some(Diagnosis {
            pattern: Pattern::SilentDeath,
            task: None,
            reason: reason.clone(),
        });
    }
    if run.state != "finished" || run.outcome.as_deref() == Some("accepted") {
        return None;
    }
    let bad = tasks
        .iter()
        .filter(|t| !matches!(t.outcome.as_deref(), Some("accepted" | "skipped")));
    bad.filter_map(|t| {
        let own: Vec<&AttemptRow> = attempts
            .iter()
            .filter(|a| a.run == t.run && a.task == t.name && a.epoch == t.epoch)
            .collect();
        task_pattern(t, &own).map(|(pattern, reason)| Diagnosis {
            pattern,
            task: Some(t.name.clone()),
            reason,
        })
    })
    .min_by_key(|d| d.pattern as u8)
}

fn task_pattern(task: &TaskRow, attempts: &[&AttemptRow]) -> Option<(Pattern, String)> {
    let signatures: Vec<&str> = attempts
        .iter()
        .filter(|a| a.outcome.as_deref() == Some("failed"))
        .filter_map(|a| a.signature.as_deref())
        .collect();
    let tail = signatures
        .len()
        .checked_sub(STUCK_REPEATS)
        .map(|i| &signatures[i..]);
    let repeated = tail.is_some_and(|t| t.iter().all(|s| *s == t[0]));
    if task.outcome.as_deref() == Some("stuck") || repeated {
        return Some((
            Pattern::Stuck,
            format!(
                "the same failure again and again ({} failures, the last {STUCK_REPEATS} alike)",
                signatures.len()
            ),
        ));
    }
    // Green is a whole attempt passing (seal and every gate), not one gate among failing ones.
    let green = attempts
        .iter()
        .any(|a| a.outcome.as_deref() == Some("passed"));
    if attempts.len() >= RUNAWAY_ATTEMPTS && !green {
        return Some((
            Pattern::Runaway,
            format!("{} agent calls and never a passing attempt", attempts.len()),
        ));
    }
    let mut distinct = signatures.clone();
    distinct.sort_unstable();
    distinct.dedup();
    if signatures.len() >= RANDOM_WALK_ATTEMPTS && distinct.len() == signatures.len() {
        return Some((
            Pattern::RandomWalk,
            format!(
                "a different failure every attempt ({} failures), no convergence",
                signatures.len()
            ),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(outcome: &str) -> RunRow {
        RunRow {
            id: "r".into(),
            file: "loops/t.kdl".into(),
            program: "t".into(),
            kind: "loop".into(),
            program_digest: "d".into(),
            repo_root: "/r".into(),
            base_commit: "b".into(),
            target_branch: "main".into(),
            mode: "auto".into(),
            pid: 1,
            host: "h".into(),
            state: "finished".into(),
            outcome: Some(outcome.into()),
            exit_code: Some(1),
            started_at: 0,
            heartbeat_at: 0,
            finished_at: Some(0),
            command: "apply".into(),
            stopped_by: None,
        }
    }

    fn task(outcome: &str) -> TaskRow {
        TaskRow {
            run: "r".into(),
            name: "t".into(),
            digest: "d".into(),
            state: "finished".into(),
            outcome: Some(outcome.into()),
            merged: None,
            started_at: Some(0),
            finished_at: Some(0),
            epoch: 0,
        }
    }

    fn failed(number: u32, signature: &str) -> AttemptRow {
        AttemptRow {
            id: i64::from(number),
            run: "r".into(),
            task: "t".into(),
            number,
            rung: 1,
            agent: "bot".into(),
            branch: "b".into(),
            base: "0".repeat(40),
            state: "finished".into(),
            started_at: 0,
            exit_code: Some(0),
            timed_out: Some(false),
            agent_ms: Some(1),
            head: None,
            rate_limited: 0,
            outcome: Some("failed".into()),
            failure_kind: Some("gate".into()),
            signature: Some(signature.into()),
            criterion: Some("c".into()),
            failed_gate: Some("tests".into()),
            finished_at: Some(0),
            epoch: 0,
        }
    }

    fn pattern(outcome: &str, signatures: &[&str]) -> Option<Pattern> {
        let attempts: Vec<AttemptRow> = (1..).zip(signatures).map(|(n, s)| failed(n, s)).collect();
        diagnose(
            &run(outcome),
            &Liveness::Finished,
            &[task(outcome)],
            &attempts,
        )
        .map(|d| d.pattern)
    }

    #[test]
    fn the_patterns_follow_the_rules_in_order() {
        assert_eq!(pattern("stuck", &["a"]), Some(Pattern::Stuck));
        assert_eq!(pattern("budget", &["a", "b", "b"]), Some(Pattern::Stuck));
        assert_eq!(
            pattern("budget", &["a", "b", "a", "b", "c"]),
            Some(Pattern::Runaway)
        );
        assert_eq!(
            pattern("rejected", &["a", "b", "c"]),
            Some(Pattern::RandomWalk)
        );
        assert_eq!(pattern("rejected", &["a", "b", "a"]), None);
        assert_eq!(pattern("budget", &["a"]), None);
        assert_eq!(pattern("accepted", &["a", "a"]), None);
    }

    // Regression: a gate that passes in every attempt (a linter) hid a runaway; green is an
    // attempt that passed as a whole.
    #[test]
    fn attempts_that_never_pass_as_a_whole_are_a_runaway_whatever_one_gate_did() {
        let r = run("budget");
        let attempts: Vec<AttemptRow> = ["a", "b", "a", "b", "a", "b", "a", "b"]
            .into_iter()
            .zip(1..)
            .map(|(s, n)| failed(n, s))
            .collect();
        let d = diagnose(&r, &Liveness::Finished, &[task("budget")], &attempts);
        assert_eq!(d.map(|d| d.pattern), Some(Pattern::Runaway));
    }

    #[test]
    fn a_run_whose_heartbeat_stopped_on_another_host_is_a_silent_death() {
        let mut r = run("accepted");
        r.state = "running".into();
        let unknown = Liveness::Unknown {
            host: "elsewhere".into(),
            heartbeat_ms: 0,
            reason: "its heartbeat stopped".into(),
        };
        let d = diagnose(&r, &unknown, &[], &[]).unwrap();
        assert_eq!(d.pattern, Pattern::SilentDeath);
    }

    #[test]
    fn a_dead_process_is_a_silent_death() {
        let mut r = run("accepted");
        r.state = "running".into();
        let dead = Liveness::Interrupted {
            pid: 7,
            heartbeat_ms: 0,
            reason: "process 7 is gone".into(),
            hint: String::new(),
            stopped_by: None,
        };
        let d = diagnose(&r, &dead, &[], &[]).unwrap();
        assert_eq!(d.pattern, Pattern::SilentDeath);
        assert_eq!(d.reason, "process 7 is gone");
        // A stop from outside is a person's stop, named as such.
        let stopped = Liveness::Interrupted {
            pid: 7,
            heartbeat_ms: 0,
            reason: "stopped by SIGINT (Ctrl-C) at 2026-12-06T10:00:00Z".into(),
            hint: String::new(),
            stopped_by: Some("SIGINT (Ctrl-C)".into()),
        };
        let d = diagnose(&r, &stopped, &[], &[]).unwrap();
        assert_eq!(d.pattern, Pattern::Stopped);
        assert!(d.reason.starts_with("stopped by SIGINT (Ctrl-C)"));
        assert_eq!(
            diagnose(&r, &Liveness::Running { heartbeat_ms: 0 }, &[], &[]),
            None
        );
    }
}
