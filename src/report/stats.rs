//! Every run of a ledger in; the figures that judge a loop out ([`Stats`], schema
//! `mvk.stats.v1`): the acceptance rate, what an accepted change costs (USD, tokens, attempts,
//! wall time), attempts by loop, agent and rung with what stopped them, and the diagnosis of
//! each run that ended badly.
//!
//! A task counts once it finished, except a skipped one (it never ran). What was spent counts
//! whatever became of the task: the cost of an accepted change is everything spent divided by
//! the changes accepted, failures included.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::diagnosis::{Diagnosis, diagnose};
use super::{Spent, spent_by_attempt};
use crate::ledger::LedgerError;
use crate::ledger::read::{AttemptRow, GateResultRow, Reader, TaskRow, liveness};

/// The schema name of [`Stats`].
pub(crate) const SCHEMA: &str = "mvk.stats.v1";

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Stats {
    pub(crate) schema: &'static str,
    #[serde(flatten)]
    pub(crate) overall: Summary,
    /// What the accepted tasks themselves spent, in all and on average.
    pub(crate) accepted_tasks: Option<AcceptedTasks>,
    pub(crate) by_loop: Vec<LoopStats>,
    pub(crate) by_agent: Vec<AttemptStats>,
    pub(crate) by_rung: Vec<AttemptStats>,
    /// The runs that ended badly (or died) and the pattern each shows.
    pub(crate) diagnoses: Vec<RunDiagnosis>,
}

/// Runs, their tasks' acceptance, and what they spent.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Summary {
    pub(crate) runs: u64,
    /// Finished tasks (skipped ones apart), and how many were accepted.
    pub(crate) tasks: u64,
    pub(crate) accepted: u64,
    /// `accepted / tasks`; `None` before any task finished.
    pub(crate) acceptance_rate: Option<f64>,
    /// Everything spent: every attempt's cost, and the wall time of the finished tasks.
    pub(crate) spent: Totals,
    /// `spent` divided by the accepted changes: what one accepted change costs.
    pub(crate) per_accepted_change: Option<Means>,
}

impl Summary {
    /// Counts task `t`, which spent `own`.
    fn add_task(&mut self, t: &TaskRow, own: Totals) {
        self.spent.add(own);
        if counted(t) {
            self.tasks += 1;
            self.accepted += u64::from(t.outcome.as_deref() == Some("accepted"));
        }
    }

    /// Fills in the ratios once every task is counted.
    fn finish(mut self) -> Summary {
        self.acceptance_rate = ratio(self.accepted, self.tasks);
        self.per_accepted_change = self.spent.per(self.accepted);
        self
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Totals {
    pub(crate) attempts: u64,
    pub(crate) tokens: u64,
    pub(crate) usd_micros: u64,
    pub(crate) wall_ms: u64,
}

/// [`Totals`] divided by a count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Means {
    pub(crate) attempts: f64,
    pub(crate) tokens: f64,
    pub(crate) usd_micros: f64,
    pub(crate) wall_ms: f64,
}

impl Totals {
    fn add(&mut self, o: Totals) {
        self.attempts += o.attempts;
        self.tokens += o.tokens;
        self.usd_micros += o.usd_micros;
        self.wall_ms += o.wall_ms;
    }

    /// Each figure divided by `n`; `None` when `n` is 0.
    fn per(&self, n: u64) -> Option<Means> {
        #[expect(clippy::cast_precision_loss, reason = "counts far below 2^52")]
        let div = |v: u64| v as f64 / n as f64;
        (n > 0).then(|| Means {
            attempts: div(self.attempts),
            tokens: div(self.tokens),
            usd_micros: div(self.usd_micros),
            wall_ms: div(self.wall_ms),
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct AcceptedTasks {
    pub(crate) total: Totals,
    pub(crate) mean: Means,
}

/// One loop's (or flow's) runs.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LoopStats {
    pub(crate) program: String,
    #[serde(flatten)]
    pub(crate) summary: Summary,
}

/// Attempts of one agent or one rung, and what stopped those that failed.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct AttemptStats {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) agent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rung: Option<u32>,
    pub(crate) attempts: u64,
    pub(crate) passed: u64,
    pub(crate) tokens: u64,
    pub(crate) usd_micros: u64,
    /// By cause: `seal`, `gate NAME`, `review`, `agent`, `unknown`, `merge`.
    pub(crate) stopped_by: BTreeMap<String, Share>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Share {
    pub(crate) count: u64,
    /// `count` over the group's attempts.
    pub(crate) share: f64,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct RunDiagnosis {
    pub(crate) run: String,
    pub(crate) program: String,
    /// The ledger's outcome, or the liveness of a run that did not finish.
    pub(crate) outcome: String,
    #[serde(flatten)]
    pub(crate) diagnosis: Diagnosis,
}

#[expect(clippy::cast_precision_loss, reason = "counts far below 2^52")]
fn ratio(n: u64, of: u64) -> Option<f64> {
    (of > 0).then(|| n as f64 / of as f64)
}

/// Whether a task counts for the acceptance rate: finished, and not skipped.
fn counted(t: &TaskRow) -> bool {
    t.state == "finished" && t.outcome.as_deref() != Some("skipped")
}

fn wall_ms(t: &TaskRow) -> u64 {
    match (t.started_at, t.finished_at) {
        (Some(s), Some(f)) => u64::try_from(f.saturating_sub(s)).unwrap_or(0),
        _ => 0,
    }
}

/// The figures over every run in the ledger of `mvk_dir`.
pub(crate) fn stats(reader: &Reader, mvk_dir: &Path) -> Result<Stats, LedgerError> {
    let runs = reader.runs()?;
    let tasks = reader.tasks(None)?;
    let attempts = reader.attempts(None)?;
    let gates = reader.gate_results(None)?;
    let costs = spent_by_attempt(&reader.costs(None)?);
    let program_of: BTreeMap<&str, &str> = runs
        .iter()
        .map(|r| (r.id.as_str(), r.program.as_str()))
        .collect();
    let task_spent = |t: &TaskRow| {
        let mut s = Spent::default();
        for a in attempts
            .iter()
            .filter(|a| a.run == t.run && a.task == t.name)
        {
            s.add_attempt(a, &costs);
        }
        s
    };

    let mut overall = Summary {
        runs: runs.len() as u64,
        ..Summary::default()
    };
    let mut accepted_total = Totals::default();
    let mut loops: BTreeMap<&str, Summary> = BTreeMap::new();
    for r in &runs {
        loops.entry(&r.program).or_default().runs += 1;
    }
    for t in &tasks {
        let s = task_spent(t);
        let own = Totals {
            attempts: s.attempts,
            tokens: s.tokens,
            usd_micros: s.usd_micros,
            wall_ms: wall_ms(t),
        };
        let program = program_of.get(t.run.as_str()).copied().unwrap_or("");
        if let Some(l) = loops.get_mut(program) {
            l.add_task(t, own);
        }
        overall.add_task(t, own);
        if counted(t) && t.outcome.as_deref() == Some("accepted") {
            accepted_total.add(own);
        }
    }
    let accepted = overall.accepted;
    let by_loop = loops
        .into_iter()
        .map(|(program, l)| LoopStats {
            program: program.to_string(),
            summary: l.finish(),
        })
        .collect();

    let mut diagnoses = Vec::new();
    for r in &runs {
        let live = liveness(mvk_dir, r);
        let own_tasks: Vec<TaskRow> = tasks.iter().filter(|t| t.run == r.id).cloned().collect();
        let own: Vec<AttemptRow> = attempts.iter().filter(|a| a.run == r.id).cloned().collect();
        if let Some(d) = diagnose(r, &live, &own_tasks, &own) {
            diagnoses.push(RunDiagnosis {
                run: r.id.clone(),
                program: r.program.clone(),
                outcome: r.outcome.clone().unwrap_or_else(|| live.name().to_string()),
                diagnosis: d,
            });
        }
    }

    Ok(Stats {
        schema: SCHEMA,
        overall: overall.finish(),
        accepted_tasks: accepted_total.per(accepted).map(|mean| AcceptedTasks {
            total: accepted_total,
            mean,
        }),
        by_loop,
        by_agent: by_attempt(&attempts, &gates, &costs, |a| (Some(a.agent.clone()), None)),
        by_rung: by_attempt(&attempts, &gates, &costs, |a| (None, Some(a.rung))),
        diagnoses,
    })
}

/// Attempts grouped by `key` (agent or rung), with what stopped each failed one.
fn by_attempt(
    attempts: &[AttemptRow],
    gates: &[GateResultRow],
    costs: &BTreeMap<i64, Spent>,
    key: impl Fn(&AttemptRow) -> (Option<String>, Option<u32>),
) -> Vec<AttemptStats> {
    let mut groups: BTreeMap<(Option<String>, Option<u32>), AttemptStats> = BTreeMap::new();
    for a in attempts {
        let (agent, rung) = key(a);
        let g = groups
            .entry((agent.clone(), rung))
            .or_insert_with(|| AttemptStats {
                agent,
                rung,
                attempts: 0,
                passed: 0,
                tokens: 0,
                usd_micros: 0,
                stopped_by: BTreeMap::new(),
            });
        g.attempts += 1;
        if let Some(c) = costs.get(&a.id) {
            g.tokens += c.tokens;
            g.usd_micros += c.usd_micros;
        }
        match a.outcome.as_deref() {
            Some("passed") => g.passed += 1,
            Some("failed") => {
                let cause = stop_cause(a, gates);
                g.stopped_by
                    .entry(cause)
                    .or_insert(Share {
                        count: 0,
                        share: 0.0,
                    })
                    .count += 1;
            }
            _ => {}
        }
    }
    groups
        .into_values()
        .map(|mut g| {
            for s in g.stopped_by.values_mut() {
                s.share = ratio(s.count, g.attempts).unwrap_or(0.0);
            }
            g
        })
        .collect()
}

/// What stopped failed attempt `a`: `gate NAME` for a failing gate, else its failure kind.
fn stop_cause(a: &AttemptRow, gates: &[GateResultRow]) -> String {
    let kind = a.failure_kind.as_deref().unwrap_or("unknown");
    if kind != "gate" {
        return kind.to_string();
    }
    let gate = a.failed_gate.clone().or_else(|| {
        gates
            .iter()
            .find(|g| g.attempt_id == a.id && g.phase == "gate" && g.verdict == "fail")
            .map(|g| g.name.clone())
    });
    match gate {
        Some(name) => format!("gate {name}"),
        None => "gate".to_string(),
    }
}
