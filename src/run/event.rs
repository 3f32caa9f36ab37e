//! What happens in a run, typed, in: one [`Event`] variant per event name, with the detail it
//! carries; out: the `event` name and `detail` object of a line of `events.jsonl` and of a
//! ledger row, and back. The names and shapes are the trail's contract (`book/src/reading.md`):
//! a field is added, never renamed or retyped. Reading is as lenient as the untyped readers
//! were: a key a line lacks (an older mvk's) reads as its type's default.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::prompt::Blocker;
use crate::run::failure::Failure;
use crate::run::git::seal::Breach;
use crate::run::judge::evidence::Counts;
use crate::run::schedule::Wait;

/// Declares [`Event`] and its names together, so that a name is written once.
macro_rules! events {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident = $name:literal { $( $(#[$fattr:meta])* $field:ident : $ty:ty ),* $(,)? }
    ),* $(,)?) => {
        /// An event of a run, as written to the ledger and `events.jsonl`.
        #[derive(Debug, Clone, Serialize, Deserialize)]
        #[serde(tag = "event", content = "detail")]
        pub(crate) enum Event {
            $(
                $(#[doc = $doc])*
                #[serde(rename = $name)]
                $variant { $( #[serde(default)] $(#[$fattr])* $field: $ty ),* },
            )*
        }

        impl Event {
            /// Every event's name, in the order declared.
            #[cfg(test)]
            pub(crate) const NAMES: &'static [&'static str] = &[$($name),*];

            /// The event's name (`task.started`, …).
            pub(crate) fn name(&self) -> &'static str {
                match self {
                    $( Event::$variant { .. } => $name, )*
                }
            }
        }
    };
}

events! {
    /// A run began: what it runs, from where, onto what.
    RunStarted = "run.started" {
        file: String,
        program: String,
        digest: String,
        base: String,
        target: String,
        tasks: Vec<String>,
        /// Whether it runs the whole program (not one `--task`).
        whole: bool,
        /// The branch checked out when it began (where tasks without `merge into=` land).
        current: Option<String>,
        /// `mvk attempt`: one attempt, nothing landed.
        #[serde(skip_serializing_if = "Option::is_none")]
        attempt_only: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        executor: Option<String>,
        /// Where the Temporal executor's workflow lives (`address`, `task_queue`, `repo_url`,
        /// `namespace`), for a resume to find it.
        #[serde(skip_serializing_if = "Option::is_none")]
        temporal: Option<Value>,
    },
    /// An interrupted or paused run goes on.
    RunResumed = "run.resumed" {
        /// `interrupted` or `paused`.
        found: String,
        orphans_killed: usize,
        ref_locks_removed: Vec<String>,
        digest: String,
        /// The tasks re-planned by accepted drift, if any was accepted.
        drift_accepted: Option<Vec<String>>,
    },
    /// A run ended (`outcome` `error` with mvk's own error).
    RunFinished = "run.finished" {
        outcome: String,
        exit_code: i32,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// mvk's own error stopped the run; `unended` tasks can be resumed.
    RunStopped = "run.stopped" {
        error: String,
        unended: Vec<String>,
    },
    /// The run waits for a person's answer on these tasks.
    RunPaused = "run.paused" {
        waiting: Vec<String>,
    },
    /// `mvk resume` closed a run whose single attempt's process had died.
    RunClosed = "run.closed" {
        outcome: String,
        exit_code: i32,
        reason: String,
        orphans_killed: usize,
    },
    TaskStarted = "task.started" {
        digest: String,
        base: String,
        target: String,
    },
    TaskResumed = "task.resumed" {
        digest: String,
        base: String,
        target: String,
        attempts: u32,
        epoch: u32,
        /// What a resume found half done: `judge` or `land`.
        pending: Option<String>,
        /// Wall time the task used before the interruption, which its wall budget counts.
        #[serde(skip_serializing_if = "Option::is_none")]
        elapsed_ms: Option<u64>,
    },
    /// Accepted drift started the task over in a new epoch.
    TaskReplanned = "task.replanned" {
        digest: String,
        epoch: u32,
        base: String,
    },
    /// The task cannot start yet, and why.
    TaskWaiting = "task.waiting" {
        #[serde(flatten)]
        wait: Wait,
        reason: String,
    },
    /// Tasks it starts after did not succeed.
    TaskSkipped = "task.skipped" {
        reason: String,
        after: Vec<String>,
    },
    /// The same failure `times` in a row: the brake.
    TaskStuck = "task.stuck" {
        signature: String,
        times: u32,
    },
    TaskFinished = "task.finished" {
        outcome: String,
        reason: String,
        merged: Option<String>,
    },
    /// The task climbed from rung `from` to rung `to` (1-based), whose agent is `rung`.
    RungClimbed = "rung.climbed" {
        from: usize,
        to: usize,
        rung: String,
    },
    AttemptStarted = "attempt.started" {
        rung: u32,
        agent: String,
        branch: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        worktree: Option<String>,
        /// How long taking the worktree from the pool took.
        #[serde(skip_serializing_if = "Option::is_none")]
        worktree_ms: Option<u64>,
        base: String,
        /// The Temporal worker that makes it.
        #[serde(skip_serializing_if = "Option::is_none")]
        worker: Option<String>,
        /// A person's attempt: the branch of the attempt they finished.
        #[serde(skip_serializing_if = "Option::is_none")]
        from: Option<String>,
    },
    /// An attempt's prompt was built: its size, the budget it had to fit, and what each part
    /// took (`fixed`, `failure-output`, `lessons`, `previous-diff`, `excerpts`) and whether
    /// some of it was cut.
    PromptBuilt = "prompt.built" {
        tokens: usize,
        budget: u32,
        parts: Vec<crate::prompt::fit::Share>,
        /// The fixed part alone was over the budget.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        over: bool,
    },
    /// A stop signal from outside the run (a person's Ctrl-C, a `kill`, a closed terminal)
    /// ended mvk's process; the run waits for `mvk resume`.
    RunInterrupted = "run.interrupted" {
        /// `SIGINT`, `SIGTERM`, `SIGHUP` or `SIGQUIT`.
        signal: String,
        /// Who sends it, as far as the signal tells: `SIGINT (Ctrl-C)`, …
        by: String,
    },
    /// A maker or reviewer wrote lessons (`$MVK_LESSONS_FILE`); the ledger ids of those kept
    /// (a lesson its loop's task already has is not kept twice).
    LessonsLearned = "lessons.learned" {
        author: String,
        ids: Vec<i64>,
    },
    AttemptPassed = "attempt.passed" {
        head: String,
    },
    AttemptFailed = "attempt.failed" {
        kind: String,
        signature: String,
        criterion: String,
        gate: Option<String>,
        exit_code: Option<i32>,
        counts: Option<Counts>,
        /// Whole, so a resume can replay a failure that has no attempt row of its own (a
        /// landing that conflicted); always written, `None` only for a line that lacks it.
        failure: Option<Failure>,
    },
    /// An attempt caught in flight by an interruption, made again.
    AttemptAbandoned = "attempt.abandoned" {
        reason: String,
    },
    AgentRateLimited = "agent.rate-limited" {
        wait_ms: u64,
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        gave_up: Option<bool>,
    },
    AgentFinished = "agent.finished" {
        exit_code: Option<i32>,
        timed_out: bool,
        duration_ms: u64,
        tokens: u64,
        usd: Option<f64>,
        rate_limited: u32,
        stragglers_killed: bool,
        escaped_killed: usize,
    },
    /// What the running agent has spent so far (its tokens; its dollars, priced where it
    /// prints none), read from its output as it prints it; written at most once a second.
    AgentSpending = "agent.spending" {
        tokens: u64,
        usd_micros: u64,
    },
    /// mvk stopped the agent: `budget` (the task's `usd` or `tokens`, or the flow's `flow usd`
    /// or `flow tokens`) was spent, `spent` of `limit` as `budget.exhausted` gives them, counted
    /// up to the line of its output that spent it.
    AgentStopped = "agent.stopped" {
        budget: String,
        spent: u64,
        limit: u64,
    },
    /// Stop signals the agent's processes sent mvk.
    AgentSignalledMvk = "agent.signalled-mvk" {
        signals: u64,
    },
    SealPassed = "seal.passed" {},
    SealBreached = "seal.breached" {
        breaches: Vec<Breach>,
    },
    GateFinished = "gate.finished" {
        gate: String,
        /// `gate`, or `landing` for a gate run again on what lands.
        phase: String,
        verdict: String,
        exit_code: Option<i32>,
        counts: Option<Counts>,
        reason: String,
        log: String,
    },
    GateSignalledMvk = "gate.signalled-mvk" {
        gate: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        landing: Option<bool>,
        signals: u64,
    },
    BudgetExhausted = "budget.exhausted" {
        budget: String,
        spent: u64,
        limit: u64,
    },
    /// What was spent reached the fraction `at` (thousandths) of a budget's limit: `budget` is
    /// the task's `tokens`, `usd` or `wall` (with a task), or the flow's `flow tokens`, `flow
    /// usd` or `flow wall` (without); figures as `budget.exhausted` gives them. Written once per
    /// task (or run), budget and fraction, when the budget warns there (`warning`: its
    /// `warn-at`, or 0.8 for a notification that names no fraction) or a notification asks to
    /// hear of that fraction.
    BudgetThreshold = "budget.threshold" {
        budget: String,
        spent: u64,
        limit: u64,
        at: u32,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        warning: bool,
    },
    /// A notification went out (`tries`: how many it took); `id` is the one its body carries.
    NotifySent = "notify.sent" {
        notification: String,
        /// `waiting`, `finished`, `budget` or `interrupted`.
        event: String,
        id: String,
        tries: u32,
    },
    /// A notification could not be sent; the run went on. `error` names a secret by its
    /// variable, never by its value.
    NotifyFailed = "notify.failed" {
        notification: String,
        event: String,
        id: String,
        tries: u32,
        error: String,
    },
    CheckpointWaiting = "checkpoint.waiting" {
        checkpoint: i64,
        kind: String,
        lands: bool,
        question: String,
    },
    CheckpointAnswered = "checkpoint.answered" {
        checkpoint: i64,
        kind: String,
        decision: String,
        reason: Option<String>,
    },
    /// The task stopped for a person: the handoff file, and why.
    HumanHandoff = "human.handoff" {
        file: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        blockers: Vec<Blocker>,
    },
    ReviewStarted = "review.started" {
        agent: String,
        previous_blockers: usize,
    },
    /// A verdict the ledger already held for this attempt (a resume), not asked again.
    ReviewRecalled = "review.recalled" {
        verdict: String,
    },
    ReviewRateLimited = "review.rate-limited" {
        wait_ms: u64,
        message: String,
        gave_up: bool,
    },
    ReviewSignalledMvk = "review.signalled-mvk" {
        signals: u64,
    },
    ReviewFinished = "review.finished" {
        verdict: String,
        blockers: Vec<Blocker>,
        notes: Vec<String>,
        reason: String,
        exit_code: Option<i32>,
        tokens: u64,
        usd: Option<f64>,
    },
    MergeStarted = "merge.started" {
        into: String,
        strategy: String,
    },
    MergeEmpty = "merge.empty" {
        into: String,
    },
    /// An accepted change's commit was pushed to `remote` as `branch` (`merge strategy="pr"`).
    PrPushed = "pr.pushed" {
        remote: String,
        branch: String,
        commit: String,
    },
    /// Its pull request is open at `url` (`found`: one opened before, by a run that died
    /// before recording it, was found rather than a second opened).
    PrOpened = "pr.opened" {
        url: String,
        branch: String,
        base: String,
        found: bool,
    },
    /// A step of a pull request's landing was refused (`step`: `push` or `open`); the change
    /// stays on `branch` and the task waits for a person.
    PrRefused = "pr.refused" {
        step: String,
        branch: String,
        detail: String,
    },
    /// A task waits for the pull requests of the tasks it comes after to merge
    /// (`dependents="merged"`).
    PrWaiting = "pr.waiting" {
        urls: Vec<String>,
    },
    /// A gate failed on what would land.
    MergeFailed = "merge.failed" {
        gate: String,
        reason: String,
        log: String,
    },
    MergeBatchSplit = "merge.batch-split" {
        into: String,
        kept: Vec<String>,
        later: Vec<String>,
        reason: String,
    },
    MergeDone = "merge.done" {
        commit: String,
        into: String,
        strategy: String,
    },
    /// The landing would overwrite these paths in the main checkout.
    MergeBlocked = "merge.blocked" {
        paths: Vec<String>,
    },
    MergeLocked = "merge.locked" {
        reason: String,
    },
    MergeLockWait = "merge.lock-wait" {
        lock: String,
        wait_ms: u64,
    },
    MergeConflict = "merge.conflict" {
        paths: Vec<String>,
        into: String,
        reason: String,
        target_tip: String,
    },
    /// A resume finished a merge an interruption cut short.
    MergeFinishedByResume = "merge.finished-by-resume" {
        merge: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        merges: Option<Vec<i64>>,
        commit: String,
        into: String,
    },
    /// A resume undid a merge an interruption cut short (`foreign`: paths others changed).
    MergeUndoneByResume = "merge.undone-by-resume" {
        merge: i64,
        merges: Vec<i64>,
        into: String,
        foreign: Vec<String>,
    },
    /// A resume found a merge intent settled by git: `landed`, or not (the target at `tip`).
    MergeSettled = "merge.settled" {
        merge: i64,
        into: String,
        landed: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        commit: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tip: Option<String>,
    },
    /// A moment's trouble of the worktree pool, tried again after `wait_ms`.
    WorktreeRetry = "worktree.retry" {
        branch: String,
        error: String,
        wait_ms: u64,
    },
    TemporalStarted = "temporal.started" {
        workflow: String,
        task_queue: String,
        address: String,
        repo_url: String,
    },
    TemporalFinished = "temporal.finished" {
        workflow: String,
        summary: String,
    },
}

impl Event {
    /// The event's name and its detail object, as the ledger and the trail write them.
    pub(crate) fn into_parts(self) -> Result<(&'static str, Value), serde_json::Error> {
        let name = self.name();
        let mut whole = serde_json::to_value(self)?;
        let detail = whole
            .get_mut("detail")
            .map(Value::take)
            .unwrap_or_else(|| Value::Object(serde_json::Map::new()));
        Ok((name, detail))
    }

    /// The event a ledger row or a trail line holds, if this mvk can read it as one.
    pub(crate) fn read(name: &str, detail: &Value) -> Option<Event> {
        Event::from_parts(name, detail.clone()).ok()
    }

    /// The event a name and a detail object make, as read back from the ledger or a trail.
    pub(crate) fn from_parts(name: &str, detail: Value) -> Result<Event, serde_json::Error> {
        serde_json::from_value(serde_json::json!({"event": name, "detail": detail}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines of `events.jsonl` written by this mvk before events were typed (captured from the
    /// integration suite's runs: each event name with each shape of detail it had, twice).
    const CORPUS: &str = include_str!("../../tests/fixtures/events/mvk-0.1.0.jsonl");

    /// Events no run of the suite wrote when the corpus was captured.
    // Events newer than the corpus's mvk.
    const NOT_IN_CORPUS: &[&str] = &[
        "run.closed",
        "prompt.built",
        "lessons.learned",
        "run.interrupted",
        "budget.threshold",
        "notify.sent",
        "notify.failed",
        "pr.pushed",
        "pr.opened",
        "pr.refused",
        "pr.waiting",
        "agent.spending",
        "agent.stopped",
    ];

    #[test]
    fn every_line_written_before_reads_as_a_typed_event_and_writes_back_the_same() {
        let mut seen = std::collections::BTreeSet::new();
        for line in CORPUS.lines() {
            let value: Value = serde_json::from_str(line).expect("a JSON line");
            let name = value["event"].as_str().expect("an event name");
            let detail = value["detail"].clone();
            let event = Event::from_parts(name, detail.clone())
                .unwrap_or_else(|e| panic!("`{name}` does not read back ({e}): {line}"));
            let (again, written) = event.into_parts().expect("an event encodes");
            assert_eq!(again, name);
            // Value's objects are ordered maps: equal values serialize to equal text.
            assert_eq!(written, detail, "`{name}` writes back differently");
            assert_eq!(written.to_string(), detail.to_string());
            seen.insert(again);
        }
        for name in Event::NAMES {
            assert!(
                seen.contains(name) != NOT_IN_CORPUS.contains(name),
                "`{name}`: in the corpus and the exceptions both, or in neither"
            );
        }
    }

    #[test]
    fn a_line_without_a_key_an_older_mvk_did_not_write_still_reads() {
        let old = serde_json::json!({"file": "loops/a.kdl", "program": "a", "digest": "d"});
        match Event::from_parts("run.started", old).expect("reads leniently") {
            Event::RunStarted {
                file,
                tasks,
                whole,
                current,
                ..
            } => {
                assert_eq!(file, "loops/a.kdl");
                assert!(tasks.is_empty() && !whole && current.is_none());
            }
            other => panic!("{other:?}"),
        }
        let text = crate::report::event_text::describe(
            "run.started",
            &serde_json::json!({"file": "loops/a.kdl", "program": "a"}),
        );
        assert_eq!(text.as_deref(), Some("a (loops/a.kdl)"));
        // A key of the wrong type is not this mvk's event.
        assert!(Event::from_parts("task.stuck", serde_json::json!({"times": "x"})).is_err());
    }

    #[test]
    fn what_a_task_waits_on_is_the_name_its_event_writes() {
        for wait in [
            Wait::After { tasks: vec![] },
            Wait::Person { tasks: vec![] },
            Wait::Scope {
                task: "a".into(),
                ours: "x".into(),
                theirs: "y".into(),
            },
            Wait::Parallel { limit: 2 },
        ] {
            let on = wait.on();
            let event = Event::TaskWaiting {
                wait,
                reason: String::new(),
            };
            let (_, detail) = event.into_parts().expect("encodes");
            assert_eq!(detail["on"], on);
        }
    }

    #[test]
    fn names_are_unique_and_each_variant_reports_its_own() {
        let names: std::collections::BTreeSet<_> = Event::NAMES.iter().collect();
        assert_eq!(names.len(), Event::NAMES.len());
        let closed = Event::RunClosed {
            outcome: "interrupted".into(),
            exit_code: 4,
            reason: "gone".into(),
            orphans_killed: 0,
        };
        let (name, detail) = closed.into_parts().expect("encodes");
        assert_eq!(name, "run.closed");
        assert_eq!(
            detail,
            serde_json::json!({"outcome": "interrupted", "exit_code": 4, "reason": "gone", "orphans_killed": 0})
        );
        let passed = Event::from_parts("seal.passed", serde_json::json!({})).expect("reads");
        assert_eq!(passed.name(), "seal.passed");
        assert!(Event::from_parts("seal.passd", serde_json::json!({})).is_err());
    }
}
