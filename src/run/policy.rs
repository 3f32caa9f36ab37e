//! The attempt policy: where a task stands (its rung, what it spent, its last failure) and the
//! rules it runs under (ladder, budgets, brake, review rounds, mode) in; the next step out:
//! another attempt, a climb, a stop for a person, an end by a budget or by the brake. Both
//! executors, the local driver and the Temporal workflow, are loops of decide → act → record
//! around [`decide`]; it touches no git, process or ledger, so every branch is tested here.

use crate::run::failure::{Failure, FailureKind};
use crate::run::outcome::Outcome;
use serde::{Deserialize, Serialize};

/// When a run stops for a person: never (`auto`), before each landing (`batch`), after each
/// attempt (`step`). The ledger keeps its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunMode {
    Auto,
    Batch,
    Step,
}

impl RunMode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            RunMode::Auto => "auto",
            RunMode::Batch => "batch",
            RunMode::Step => "step",
        }
    }

    /// The mode a ledger row names; `None` for a name this mvk does not know.
    pub(crate) fn parse(name: &str) -> Option<RunMode> {
        [RunMode::Auto, RunMode::Batch, RunMode::Step]
            .into_iter()
            .find(|m| m.name() == name)
    }
}

/// A rung as the policy sees it: an agent allowing `attempts` before the task climbs (`None`:
/// as many as the budget allows), or a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RungKind {
    Agent { attempts: Option<u32> },
    Human,
}

impl From<&crate::ir::Rung> for RungKind {
    fn from(rung: &crate::ir::Rung) -> RungKind {
        match rung {
            crate::ir::Rung::Agent { attempts, .. } => RungKind::Agent {
                attempts: *attempts,
            },
            crate::ir::Rung::Human => RungKind::Human,
        }
    }
}

/// Token, dollar and wall-time limits (a task's, or a flow's shared by its tasks); `None`: none.
/// The Temporal workflow carries them as they are (its wire format).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
// Public as `run::temporal::Limits`, part of the Temporal wire format; without that feature
// nothing outside the crate reaches it.
#[cfg_attr(not(feature = "temporal"), allow(unreachable_pub))]
pub struct Limits {
    pub tokens: Option<u64>,
    pub usd_micros: Option<u64>,
    pub wall_ms: Option<u64>,
}

impl Limits {
    /// A budget's token, dollar and wall limits.
    pub(crate) fn of(
        tokens: Option<u64>,
        usd_micros: Option<u64>,
        wall: Option<std::time::Duration>,
    ) -> Limits {
        Limits {
            tokens,
            usd_micros,
            wall_ms: wall.map(crate::run::attempt::ms),
        }
    }
}

/// What has been spent against [`Limits`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) tokens: u64,
    pub(crate) usd_micros: u64,
    pub(crate) wall_ms: u64,
}

/// What is left of a task's budgets (the task's and its flow's, whichever is less) before an
/// attempt; `None` where neither sets a limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Left {
    /// Attempts the iterations budget still allows, the next one included (`None` where the
    /// caller does not know: a Temporal worker's attempt).
    pub(crate) attempts: Option<u32>,
    pub(crate) tokens: Option<u64>,
    pub(crate) usd_micros: Option<u64>,
    pub(crate) wall_ms: Option<u64>,
}

/// What is left for a task standing at `s` under `rules`.
pub(crate) fn left(rules: &Rules<'_>, s: &Standing<'_>) -> Left {
    let less = |task: Option<u64>, task_spent: u64, flow: Option<u64>, flow_spent: u64| {
        let t = task.map(|l| l.saturating_sub(task_spent));
        let f = flow.map(|l| l.saturating_sub(flow_spent));
        match (t, f) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    };
    let (t, f) = (&rules.task, &rules.flow);
    let (ts, fs) = (s.task_spent, s.flow_spent);
    Left {
        attempts: Some(rules.iterations.saturating_sub(s.attempts)),
        tokens: less(t.tokens, ts.tokens, f.tokens, fs.tokens),
        usd_micros: less(t.usd_micros, ts.usd_micros, f.usd_micros, fs.usd_micros),
        wall_ms: less(t.wall_ms, ts.wall_ms, f.wall_ms, fs.wall_ms),
    }
}

/// The rules a task runs under, from its definition and the run's mode.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules<'a> {
    pub(crate) ladder: &'a [RungKind],
    /// Attempts the task may make in an epoch.
    pub(crate) iterations: u32,
    /// Equal failures in a row that stop the task (the brake).
    pub(crate) same_failure: u32,
    /// The review's rounds of rework; `None` without a reviewer, and for a Temporal workflow an
    /// older mvk started, which braked on every failure and must replay as it decided then.
    pub(crate) review_rounds: Option<u32>,
    pub(crate) task: Limits,
    pub(crate) flow: Limits,
    pub(crate) mode: RunMode,
}

/// Where a task stands before its next step.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Standing<'a> {
    /// Attempts made in the task's current epoch: what the iterations budget counts.
    pub(crate) attempts: u32,
    /// The 0-based rung, and the attempts made on it.
    pub(crate) rung: usize,
    pub(crate) on_rung: u32,
    /// The last attempt's failure (or its landing's), and how many times in a row its
    /// signature has been seen.
    pub(crate) last: Option<&'a Failure>,
    pub(crate) same: u32,
    /// The reviewer's rejections in this epoch.
    pub(crate) rejections: u32,
    /// `last` was made by an attempt this process just judged and no person has seen it: a
    /// step-mode run stops here.
    pub(crate) fresh: bool,
    pub(crate) task_spent: Tally,
    pub(crate) flow_spent: Tally,
}

/// The policy's answer: the rungs climbed on the way, where the task then stands, what next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    /// The 0-based rungs climbed to, in order (each a `rung.climbed`), before `next`.
    pub(crate) climbed: Vec<usize>,
    pub(crate) rung: usize,
    pub(crate) on_rung: u32,
    pub(crate) next: Next,
}

/// The next step of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Another attempt, by the agent of rung [`Decision::rung`].
    Attempt,
    /// The same failure [`Standing::same`] times in a row: the task ends, with `outcome`.
    Stuck { outcome: Outcome },
    /// The reviewer rejected past the review's rounds of rework: a person settles it.
    ReviewRounds,
    /// A step-mode run shows a person the failed attempt before the next one.
    Step,
    /// Every rung's attempts were used and the reviewer rejected the last: only a person can
    /// say whether the maker or the reviewer was wrong.
    RungsOutOnReview,
    /// Every rung's attempts were used: the task ends with `outcome`.
    RungsOut { outcome: Outcome },
    /// The ladder reached `human`.
    Human,
    /// `budget` ran out (`spent` of `limit`) before the next attempt: the task ends with
    /// `outcome`.
    Budget {
        budget: Budget,
        spent: u64,
        limit: u64,
        outcome: Outcome,
    },
}

/// A budget that can end a task, the task's own or its flow's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Budget {
    Iterations,
    Tokens,
    Usd,
    Wall,
    FlowTokens,
    FlowUsd,
    FlowWall,
}

impl Budget {
    /// The name events, reasons and the Temporal wire use.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Budget::Iterations => "iterations",
            Budget::Tokens => "tokens",
            Budget::Usd => "usd",
            Budget::Wall => "wall",
            Budget::FlowTokens => "flow tokens",
            Budget::FlowUsd => "flow usd",
            Budget::FlowWall => "flow wall",
        }
    }
}

/// The next step of a task standing at `s` under `rules`. In order: a rejection past the
/// review's rounds goes to a person; the brake; a step-mode stop after a fresh failure; then
/// the climb past rungs whose attempts are used, and on the rung reached: none left, a person,
/// or an agent, whose attempt every budget must allow first.
pub(crate) fn decide(rules: &Rules<'_>, s: &Standing<'_>) -> Decision {
    let stop = |next| Decision {
        climbed: Vec::new(),
        rung: s.rung,
        on_rung: s.on_rung,
        next,
    };
    if let Some(f) = s.last {
        if f.kind == FailureKind::Review && rules.review_rounds.is_some_and(|r| s.rejections > r) {
            return stop(Next::ReviewRounds);
        }
        if brakes(rules, f, s.same) {
            return stop(Next::Stuck {
                outcome: stuck_outcome(f.kind),
            });
        }
        // When this attempt used up its rung and `human` comes next, the person is asked
        // there, once: a step stop as well would ask twice about one attempt.
        if s.fresh && rules.mode == RunMode::Step && !human_next(rules.ladder, s.rung, s.on_rung) {
            return stop(Next::Step);
        }
    }
    let (mut rung, mut on_rung, mut climbed) = (s.rung, s.on_rung, Vec::new());
    while let Some(RungKind::Agent { attempts: Some(n) }) = rules.ladder.get(rung) {
        if on_rung < *n {
            break;
        }
        rung += 1;
        on_rung = 0;
        if rung < rules.ladder.len() {
            climbed.push(rung);
        }
    }
    let next = match rules.ladder.get(rung) {
        None if rules.review_rounds.is_some()
            && s.last.is_some_and(|f| f.kind == FailureKind::Review) =>
        {
            Next::RungsOutOnReview
        }
        None => Next::RungsOut {
            outcome: match s.last.map(|f| f.kind) {
                Some(FailureKind::Unknown) => Outcome::Unknown,
                _ => Outcome::Rejected,
            },
        },
        Some(RungKind::Human) => Next::Human,
        Some(RungKind::Agent { .. }) => match exhausted(rules, s) {
            Some((budget, spent, limit)) => Next::Budget {
                budget,
                spent,
                limit,
                outcome: budget_outcome(s.last),
            },
            None => Next::Attempt,
        },
    };
    Decision {
        climbed,
        rung,
        on_rung,
        next,
    }
}

/// What a passed attempt does next: land, or first ask a person (batch and step modes; not
/// when a person already `approved` it).
pub(crate) fn on_pass(mode: RunMode, approved: bool) -> Option<CheckpointKind> {
    match mode {
        _ if approved => None,
        RunMode::Auto => None,
        RunMode::Batch => Some(CheckpointKind::Batch),
        RunMode::Step => Some(CheckpointKind::Step),
    }
}

/// Why a run stops for a person at a checkpoint. The ledger keeps its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckpointKind {
    /// The maker and the reviewer could not agree.
    Review,
    /// The ladder reached `human`.
    Human,
    /// A step-mode run, after each attempt.
    Step,
    /// A batch-mode run, before each landing.
    Batch,
    /// The landing needs a person (a `merge` that asks).
    Landing,
}

impl CheckpointKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            CheckpointKind::Review => "review",
            CheckpointKind::Human => "human",
            CheckpointKind::Step => "step",
            CheckpointKind::Batch => "batch",
            CheckpointKind::Landing => "landing",
        }
    }
}

/// Whether `same` equal failures in a row, the last `failure`, stop the task. A reviewer's
/// rejection never does: the review's rounds bound a disagreement, and past them a person
/// decides. The brake is for work that makes no progress against a deterministic oracle (gates,
/// the seal, the agent itself); a reviewer that keeps rejecting may be the one that is wrong.
fn brakes(rules: &Rules<'_>, failure: &Failure, same: u32) -> bool {
    let reviewed = failure.kind == FailureKind::Review && rules.review_rounds.is_some();
    !reviewed && same >= rules.same_failure.max(1)
}

/// Whether the attempt just made used up its rung and `human` comes next.
fn human_next(ladder: &[RungKind], rung: usize, on_rung: u32) -> bool {
    matches!(ladder.get(rung), Some(RungKind::Agent { attempts: Some(n) }) if on_rung >= *n)
        && matches!(ladder.get(rung + 1), Some(RungKind::Human))
}

/// The first budget that leaves no room for another attempt, in the order reports name them:
/// the task's iterations, tokens, dollars and wall time, then the flow's.
fn exhausted(rules: &Rules<'_>, s: &Standing<'_>) -> Option<(Budget, u64, u64)> {
    if s.attempts >= rules.iterations {
        return Some((
            Budget::Iterations,
            u64::from(s.attempts),
            u64::from(rules.iterations),
        ));
    }
    let (task, flow) = (&s.task_spent, &s.flow_spent);
    [
        (Budget::Tokens, task.tokens, rules.task.tokens),
        (Budget::Usd, task.usd_micros, rules.task.usd_micros),
        (Budget::Wall, task.wall_ms, rules.task.wall_ms),
        (Budget::FlowTokens, flow.tokens, rules.flow.tokens),
        (Budget::FlowUsd, flow.usd_micros, rules.flow.usd_micros),
        (Budget::FlowWall, flow.wall_ms, rules.flow.wall_ms),
    ]
    .into_iter()
    .find_map(|(budget, spent, limit)| {
        limit
            .filter(|l| spent >= *l)
            .map(|limit| (budget, spent, limit))
    })
}

/// How a task stuck on a failure of `kind` ends: tampering on the last attempt is a rejection
/// (the contract's 1), however often; unprovable evidence is unknown.
pub(crate) fn stuck_outcome(kind: FailureKind) -> Outcome {
    match kind {
        FailureKind::Seal => Outcome::Rejected,
        FailureKind::Unknown => Outcome::Unknown,
        _ => Outcome::Stuck,
    }
}

/// How a task whose budget ran out right after the failure `last` ends: after tampering or
/// unprovable evidence, say that.
pub(crate) fn budget_outcome(last: Option<&Failure>) -> Outcome {
    match last.map(|f| f.kind) {
        Some(FailureKind::Seal) => Outcome::Rejected,
        Some(FailureKind::Unknown) => Outcome::Unknown,
        _ => Outcome::Budget,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGENT: RungKind = RungKind::Agent { attempts: None };
    const fn agent(n: u32) -> RungKind {
        RungKind::Agent { attempts: Some(n) }
    }

    fn rules(ladder: &[RungKind]) -> Rules<'_> {
        Rules {
            ladder,
            iterations: 10,
            same_failure: 3,
            review_rounds: None,
            task: Limits::default(),
            flow: Limits::default(),
            mode: RunMode::Auto,
        }
    }

    fn failure(kind: FailureKind) -> Failure {
        Failure::new(1, kind, "it failed".into(), &["x"])
    }

    fn next(rules: &Rules<'_>, s: &Standing<'_>) -> Next {
        decide(rules, s).next
    }

    #[test]
    fn a_fresh_task_makes_its_first_attempt_on_the_first_rung() {
        let d = decide(&rules(&[agent(2), AGENT]), &Standing::default());
        assert_eq!(
            d,
            Decision {
                climbed: vec![],
                rung: 0,
                on_rung: 0,
                next: Next::Attempt
            }
        );
    }

    #[test]
    fn a_rung_is_kept_until_its_attempts_are_used_then_climbed() {
        let ladder = [agent(2), agent(1), AGENT];
        let r = rules(&ladder);
        let f = failure(FailureKind::Gate);
        let mut s = Standing {
            attempts: 1,
            on_rung: 1,
            last: Some(&f),
            same: 1,
            ..Standing::default()
        };
        assert_eq!(decide(&r, &s).rung, 0);
        s.on_rung = 2;
        let d = decide(&r, &s);
        assert_eq!(
            (d.climbed, d.rung, d.on_rung, d.next),
            (vec![1], 1, 0, Next::Attempt)
        );
        // Several rungs at once (a resume past two used-up rungs), each climb reported.
        let s = Standing {
            rung: 0,
            on_rung: 2,
            ..Standing::default()
        };
        let ladder = [agent(2), agent(0), AGENT];
        let d = decide(&rules(&ladder), &s);
        assert_eq!((d.climbed, d.rung), (vec![1, 2], 2));
    }

    #[test]
    fn a_rung_without_a_count_is_never_climbed() {
        let s = Standing {
            attempts: 9,
            on_rung: 9,
            ..Standing::default()
        };
        let d = decide(&rules(&[AGENT, AGENT]), &s);
        assert_eq!((d.climbed.len(), d.rung, d.next), (0, 0, Next::Attempt));
    }

    #[test]
    fn past_the_last_rung_the_task_ends_rejected_or_unknown() {
        let ladder = [agent(1)];
        let s = |last| Standing {
            attempts: 1,
            on_rung: 1,
            last,
            same: 1,
            ..Standing::default()
        };
        let gate = failure(FailureKind::Gate);
        let d = decide(&rules(&ladder), &s(Some(&gate)));
        // Climbing off the ladder is no rung to report.
        assert_eq!(d.climbed, Vec::<usize>::new());
        assert_eq!(
            d.next,
            Next::RungsOut {
                outcome: Outcome::Rejected
            }
        );
        let unknown = failure(FailureKind::Unknown);
        assert_eq!(
            next(&rules(&ladder), &s(Some(&unknown))),
            Next::RungsOut {
                outcome: Outcome::Unknown
            }
        );
    }

    #[test]
    fn past_the_last_rung_a_reviewers_rejection_goes_to_a_person() {
        let ladder = [agent(1)];
        let review = failure(FailureKind::Review);
        let s = Standing {
            attempts: 1,
            on_rung: 1,
            last: Some(&review),
            same: 1,
            rejections: 1,
            ..Standing::default()
        };
        let r = Rules {
            review_rounds: Some(3),
            ..rules(&ladder)
        };
        assert_eq!(next(&r, &s), Next::RungsOutOnReview);
        // A Temporal workflow an older mvk started ended such a task as out of rungs.
        assert_eq!(
            next(&rules(&ladder), &s),
            Next::RungsOut {
                outcome: Outcome::Rejected
            }
        );
    }

    #[test]
    fn the_human_rung_stops_for_a_person_before_any_budget() {
        let ladder = [agent(1), RungKind::Human];
        let f = failure(FailureKind::Gate);
        let s = Standing {
            attempts: 1,
            on_rung: 1,
            last: Some(&f),
            same: 1,
            ..Standing::default()
        };
        let r = Rules {
            iterations: 1,
            ..rules(&ladder)
        };
        let d = decide(&r, &s);
        assert_eq!((d.climbed, d.next), (vec![1], Next::Human));
    }

    #[test]
    fn each_budget_ends_the_task_before_an_attempt_in_the_reports_order() {
        let ladder = [AGENT];
        let limits = Limits {
            tokens: Some(100),
            usd_micros: Some(2_000_000),
            wall_ms: Some(60_000),
        };
        let r = Rules {
            iterations: 3,
            task: limits,
            flow: limits,
            ..rules(&ladder)
        };
        let under = Tally {
            tokens: 99,
            usd_micros: 1_999_999,
            wall_ms: 59_999,
        };
        let base = Standing {
            attempts: 2,
            task_spent: under,
            flow_spent: under,
            ..Standing::default()
        };
        assert_eq!(next(&r, &base), Next::Attempt);
        let spent = |s: Standing<'static>| match next(&r, &s) {
            Next::Budget {
                budget,
                spent,
                limit,
                outcome,
            } => (budget, spent, limit, outcome),
            other => panic!("{other:?}"),
        };
        let b = Outcome::Budget;
        assert_eq!(
            spent(Standing {
                attempts: 3,
                ..base
            }),
            (Budget::Iterations, 3, 3, b)
        );
        let over = |t: Tally, f: Tally| {
            spent(Standing {
                task_spent: t,
                flow_spent: f,
                ..base
            })
        };
        let t = |tokens, usd_micros, wall_ms| Tally {
            tokens,
            usd_micros,
            wall_ms,
        };
        assert_eq!(over(t(100, 0, 0), under), (Budget::Tokens, 100, 100, b));
        assert_eq!(
            over(t(0, 2_000_000, 0), under),
            (Budget::Usd, 2_000_000, 2_000_000, b)
        );
        assert_eq!(
            over(t(0, 0, 70_000), under),
            (Budget::Wall, 70_000, 60_000, b)
        );
        assert_eq!(over(under, t(150, 0, 0)), (Budget::FlowTokens, 150, 100, b));
        assert_eq!(
            over(under, t(0, 2_000_001, 0)),
            (Budget::FlowUsd, 2_000_001, 2_000_000, b)
        );
        assert_eq!(
            over(under, t(0, 0, 60_000)),
            (Budget::FlowWall, 60_000, 60_000, b)
        );
        // The task's own budget is named before the flow's, the iterations first of all.
        assert_eq!(over(t(100, 0, 0), t(100, 0, 0)).0, Budget::Tokens);
        assert_eq!(
            spent(Standing {
                attempts: 3,
                task_spent: t(100, 0, 0),
                ..base
            })
            .0,
            Budget::Iterations
        );
        let names: Vec<_> = [
            Budget::Iterations,
            Budget::Tokens,
            Budget::Usd,
            Budget::Wall,
            Budget::FlowTokens,
            Budget::FlowUsd,
            Budget::FlowWall,
        ]
        .map(Budget::name)
        .into();
        assert_eq!(
            names,
            [
                "iterations",
                "tokens",
                "usd",
                "wall",
                "flow tokens",
                "flow usd",
                "flow wall"
            ]
        );
    }

    #[test]
    fn a_budget_spent_right_after_tampering_or_unprovable_evidence_says_so() {
        let ladder = [AGENT];
        let r = Rules {
            iterations: 1,
            ..rules(&ladder)
        };
        for (kind, outcome) in [
            (FailureKind::Seal, Outcome::Rejected),
            (FailureKind::Unknown, Outcome::Unknown),
            (FailureKind::Gate, Outcome::Budget),
            (FailureKind::Review, Outcome::Budget),
        ] {
            let f = failure(kind);
            let s = Standing {
                attempts: 1,
                last: Some(&f),
                same: 1,
                ..Standing::default()
            };
            assert!(
                matches!(next(&r, &s), Next::Budget { outcome: o, .. } if o == outcome),
                "{kind:?}"
            );
        }
        assert_eq!(budget_outcome(None), Outcome::Budget);
    }

    #[test]
    fn the_same_failure_in_a_row_brakes_with_its_kinds_outcome() {
        let ladder = [AGENT];
        let r = rules(&ladder);
        for (kind, outcome) in [
            (FailureKind::Gate, Outcome::Stuck),
            (FailureKind::Agent, Outcome::Stuck),
            (FailureKind::Merge, Outcome::Stuck),
            (FailureKind::Seal, Outcome::Rejected),
            (FailureKind::Unknown, Outcome::Unknown),
        ] {
            let f = failure(kind);
            let s = |same| Standing {
                attempts: 3,
                last: Some(&f),
                same,
                ..Standing::default()
            };
            assert_eq!(next(&r, &s(2)), Next::Attempt, "{kind:?}");
            assert_eq!(next(&r, &s(3)), Next::Stuck { outcome }, "{kind:?}");
        }
        // A limit of 0 is read as 1: the brake is never off.
        let f = failure(FailureKind::Gate);
        let s = Standing {
            last: Some(&f),
            same: 1,
            ..Standing::default()
        };
        let r0 = Rules {
            same_failure: 0,
            ..rules(&ladder)
        };
        assert!(matches!(next(&r0, &s), Next::Stuck { .. }));
    }

    #[test]
    fn a_reviewers_rejection_never_brakes_and_past_its_rounds_goes_to_a_person() {
        let ladder = [AGENT];
        let f = failure(FailureKind::Review);
        let r = Rules {
            review_rounds: Some(2),
            ..rules(&ladder)
        };
        let s = |same, rejections| Standing {
            attempts: same,
            last: Some(&f),
            same,
            rejections,
            ..Standing::default()
        };
        assert_eq!(next(&r, &s(5, 2)), Next::Attempt);
        assert_eq!(next(&r, &s(5, 3)), Next::ReviewRounds);
        // A workflow an older mvk started braked on every failure, rejections included.
        assert!(matches!(
            next(&rules(&ladder), &s(3, 3)),
            Next::Stuck { .. }
        ));
    }

    #[test]
    fn a_step_run_stops_after_a_fresh_failure_unless_the_human_rung_asks_next() {
        let ladder = [agent(2), RungKind::Human];
        let r = Rules {
            mode: RunMode::Step,
            ..rules(&ladder)
        };
        let f = failure(FailureKind::Gate);
        let s = Standing {
            attempts: 1,
            on_rung: 1,
            last: Some(&f),
            same: 1,
            fresh: true,
            ..Standing::default()
        };
        assert_eq!(next(&r, &s), Next::Step);
        // Once a person saw it (a resume after their approval), the run goes on.
        assert_eq!(next(&r, &Standing { fresh: false, ..s }), Next::Attempt);
        // The rung is used up and `human` is next: asked there, once.
        let used = Standing {
            attempts: 2,
            on_rung: 2,
            ..s
        };
        assert_eq!(next(&r, &used), Next::Human);
        // Other modes never stop between attempts.
        for mode in [RunMode::Auto, RunMode::Batch] {
            assert_eq!(next(&Rules { mode, ..r }, &s), Next::Attempt);
        }
        // The brake comes before a step stop.
        let stuck = Standing { same: 3, ..s };
        assert!(matches!(next(&r, &stuck), Next::Stuck { .. }));
    }

    #[test]
    fn a_passed_attempt_lands_or_is_put_to_a_person_as_the_mode_says() {
        assert_eq!(on_pass(RunMode::Auto, false), None);
        assert_eq!(on_pass(RunMode::Batch, false), Some(CheckpointKind::Batch));
        assert_eq!(on_pass(RunMode::Step, false), Some(CheckpointKind::Step));
        for mode in [RunMode::Auto, RunMode::Batch, RunMode::Step] {
            assert_eq!(on_pass(mode, true), None);
        }
    }
}
