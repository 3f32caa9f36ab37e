//! Budgets held inside an attempt. In: an agent's standard output as it prints it (through a
//! process [`Tap`](crate::run::exec::process::Tap)), the task's remaining `usd` and `tokens`,
//! and the run's [`Purse`] (what every attempt of the flow is spending now). Out: what the
//! attempt has spent so far (priced where the agent prints no dollars), and, the moment a line
//! of its output makes the task's or the flow's remaining budget spent, its process stopped
//! ([`Stop`]) with the budget that stopped it ([`Trip`]). A flow's budget, once spent, stops
//! every metered agent of the run, whether or not it is printing.
//!
//! The decision counts only up to the line that crossed the limit; what the agent spent is read
//! from its whole log afterwards, as for any attempt, so it is recorded as reported.
//!
//! Codex and the Gemini CLI print their usage once, at their end; their session logs record it
//! after each model response. Once the tool names its session, that log is followed too
//! ([`session_log`]), and what it records is decided on as a printed line is.

mod session_log;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::ir::{Agent, Price};
use crate::run::exec::process::{OutputTap, ProcessSpec, Stop};
use crate::run::judge::adapter::{LiveUsage, Usage};
use crate::run::policy::{Budget, Limits};

/// Tokens and micro-dollars.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Spend {
    pub(crate) tokens: u64,
    pub(crate) usd_micros: u64,
}

impl Spend {
    pub(crate) fn of(u: &Usage) -> Spend {
        Spend {
            tokens: u.tokens(),
            usd_micros: u.usd_micros.unwrap_or(0),
        }
    }

    pub(crate) fn plus(self, other: Spend) -> Spend {
        Spend {
            tokens: self.tokens.saturating_add(other.tokens),
            usd_micros: self.usd_micros.saturating_add(other.usd_micros),
        }
    }

    fn max(self, other: Spend) -> Spend {
        Spend {
            tokens: self.tokens.max(other.tokens),
            usd_micros: self.usd_micros.max(other.usd_micros),
        }
    }
}

/// The budget that stopped an agent: `spent` of `limit`, in its own unit, as the task's (or
/// the flow's) figures count them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Trip {
    pub(crate) budget: Budget,
    pub(crate) spent: u64,
    pub(crate) limit: u64,
}

/// One metered process's stop, and why it was pulled.
#[derive(Debug, Clone, Default)]
pub(crate) struct Brake {
    pub(crate) stop: Stop,
    trip: Arc<Mutex<Option<Trip>>>,
}

impl Brake {
    /// Stops the process for `trip` (the first reason given is kept).
    fn pull(&self, trip: Trip) {
        if let Ok(mut t) = self.trip.lock() {
            t.get_or_insert(trip);
        }
        self.stop.pull();
    }

    /// Why the process was stopped; `None` when it was not.
    pub(crate) fn tripped(&self) -> Option<Trip> {
        self.trip.lock().ok().and_then(|t| *t)
    }
}

/// An attempt of the run: its task and number.
type Key = (String, u32);

/// What a run's attempts are spending, live, against its flow's `usd` and `tokens`.
#[derive(Debug, Default)]
pub(crate) struct Purse {
    flow: Limits,
    state: Mutex<PurseState>,
}

#[derive(Debug, Default)]
struct PurseState {
    /// Spent before this process took the run up (a resume).
    before: Spend,
    /// Each attempt this process made: what it has spent so far, or in all once counted.
    attempts: BTreeMap<Key, Spend>,
    /// The brakes of the agents running now.
    running: BTreeMap<Key, Brake>,
    /// The flow's budget ran out here.
    tripped: Option<Trip>,
}

impl Purse {
    /// A purse for a flow with limits `flow` (none outside a flow), `before` spent already.
    pub(crate) fn new(flow: Limits, before: Spend) -> Purse {
        Purse {
            flow,
            state: Mutex::new(PurseState {
                before,
                ..PurseState::default()
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, PurseState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What the run has spent, the running agents' spending so far included.
    pub(crate) fn total(&self) -> Spend {
        let s = self.state();
        s.attempts.values().fold(s.before, |a, b| a.plus(*b))
    }

    /// Counts what attempt `key` spent in all (never less than what it was seen spending).
    pub(crate) fn settle(&self, task: &str, number: u32, spent: Spend) {
        let mut s = self.state();
        // What the agent reported at its end is what it spent: a live figure can lean either
        // way of it (prices of cache writes, a message cut short).
        s.attempts.insert((task.to_string(), number), spent);
        // An agent that reports only at its end can spend the flow's budget there: the others
        // still running stop then.
        self.trip_if_spent(&mut s);
    }

    /// Records attempt `key`'s spending so far; when that spends the flow's budget, every
    /// running agent's brake is pulled, and the trip comes back.
    fn spend(&self, key: &Key, spent: Spend) -> Option<Trip> {
        let mut s = self.state();
        let e = s.attempts.entry(key.clone()).or_default();
        *e = e.max(spent);
        self.trip_if_spent(&mut s)
    }

    /// Pulls every running agent's brake when what was spent in all spends the flow's budget.
    fn trip_if_spent(&self, s: &mut PurseState) -> Option<Trip> {
        let total = s.attempts.values().fold(s.before, |a, b| a.plus(*b));
        let trip = first_spent([
            (Budget::FlowTokens, total.tokens, self.flow.tokens),
            (Budget::FlowUsd, total.usd_micros, self.flow.usd_micros),
        ])?;
        s.tripped.get_or_insert(trip);
        for brake in s.running.values() {
            brake.pull(trip);
        }
        Some(trip)
    }

    /// The flow's budget that attempt `(task, number)` spends, having spent `spent` in all, if
    /// any: asked before more is spent on it (its reviewer).
    pub(crate) fn spent_by(&self, task: &str, number: u32, spent: Spend) -> Option<Trip> {
        let s = self.state();
        let key = (task.to_string(), number);
        let total = s
            .attempts
            .iter()
            .filter(|(k, _)| **k != key)
            .fold(s.before, |a, (_, b)| a.plus(*b))
            .plus(s.attempts.get(&key).copied().unwrap_or_default().max(spent));
        s.tripped.or_else(|| {
            first_spent([
                (Budget::FlowTokens, total.tokens, self.flow.tokens),
                (Budget::FlowUsd, total.usd_micros, self.flow.usd_micros),
            ])
        })
    }

    /// Enters a running agent's brake; pulled at once when the flow's budget already ran out.
    fn enter(&self, key: &Key, brake: &Brake) {
        let mut s = self.state();
        if let Some(trip) = s.tripped {
            brake.pull(trip);
        }
        s.running.insert(key.clone(), brake.clone());
    }

    fn leave(&self, key: &Key) {
        self.state().running.remove(key);
    }
}

/// The task's own remaining budget for one attempt: what the task spent before it, and its
/// limits.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TaskCaps {
    pub(crate) spent: Spend,
    pub(crate) tokens: Option<u64>,
    pub(crate) usd_micros: Option<u64>,
}

impl TaskCaps {
    /// The task's budget an attempt that spent `attempt` has spent, if any.
    pub(crate) fn trip(&self, attempt: Spend) -> Option<Trip> {
        let spent = self.spent.plus(attempt);
        first_spent([
            (Budget::Tokens, spent.tokens, self.tokens),
            (Budget::Usd, spent.usd_micros, self.usd_micros),
        ])
    }
}

/// The first of `checks` (a budget, what was spent of it, its limit) whose limit is reached.
fn first_spent(checks: [(Budget, u64, Option<u64>); 2]) -> Option<Trip> {
    checks.into_iter().find_map(|(budget, spent, limit)| {
        limit.filter(|l| spent >= *l).map(|limit| Trip {
            budget,
            spent,
            limit,
        })
    })
}

/// One agent process's meter (see the module docs). Dropping it leaves the purse (and stops
/// following a session log).
pub(crate) struct Meter {
    live: LiveUsage,
    gauge: Arc<Mutex<Gauge>>,
    /// The session log the agent keeps, where its output reports only at its end.
    log: Option<session_log::Kind>,
    follower: Option<session_log::Follower>,
}

/// What decides: the spending seen so far of one attempt, against its caps and the purse.
struct Gauge {
    price: Option<Price>,
    key: Key,
    /// What earlier tries of the same attempt spent (a rate-limited one).
    earlier: Spend,
    caps: TaskCaps,
    purse: Arc<Purse>,
    brake: Brake,
    /// What the attempt has spent so far, for whoever shows it.
    seen: tokio::sync::watch::Sender<Spend>,
    /// The most either source (the output, a session log) has reported, each cumulative.
    last: Spend,
    stopped: bool,
}

impl Gauge {
    /// Reads one cumulative report `u`; whether the process is (now) stopped.
    fn observe(&mut self, u: Usage) -> bool {
        if self.stopped {
            return true;
        }
        let spent = self
            .earlier
            .plus(Spend::of(&priced(self.price.as_ref(), u)))
            .max(self.last);
        if spent == self.last {
            return false;
        }
        self.last = spent;
        self.seen.send_replace(spent);
        if let Some(trip) = self.caps.trip(spent) {
            self.brake.pull(trip);
            self.stopped = true;
        }
        // The flow's trip pulls every running brake, this one too.
        if self.purse.spend(&self.key, spent).is_some() {
            self.stopped = true;
        }
        self.stopped
    }
}

fn lock(gauge: &Mutex<Gauge>) -> MutexGuard<'_, Gauge> {
    gauge
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Meter {
    /// A meter for attempt `number` of `task`, by `agent`, which already spent `earlier`.
    pub(crate) fn new(
        agent: &Agent,
        (task, number): (&str, u32),
        earlier: Spend,
        caps: TaskCaps,
        purse: Arc<Purse>,
    ) -> Result<(Meter, tokio::sync::watch::Receiver<Spend>), regex::Error> {
        let key = (task.to_string(), number);
        let brake = Brake::default();
        purse.enter(&key, &brake);
        let (seen, rx) = tokio::sync::watch::channel(earlier);
        let gauge = Gauge {
            price: agent.price.clone(),
            key,
            earlier,
            caps,
            purse,
            brake,
            seen,
            last: earlier,
            stopped: false,
        };
        Ok((
            Meter {
                live: LiveUsage::new(agent.adapter)?,
                gauge: Arc::new(Mutex::new(gauge)),
                log: None,
                follower: None,
            },
            rx,
        ))
    }

    /// Follows the session log `agent` keeps, once its output names the session, where its
    /// process `ps` (with the environment it is given) writes it.
    pub(crate) fn follow_session_log(&mut self, agent: &Agent, ps: &ProcessSpec) {
        self.log = session_log::Kind::of(agent, ps);
    }

    pub(crate) fn brake(&self) -> Brake {
        lock(&self.gauge).brake.clone()
    }

    /// Stops following a session log, once the process ended, and returns the usage it
    /// recorded in all: the whole of a Codex attempt stopped before it could print its own.
    pub(crate) fn finish(&mut self) -> Option<Usage> {
        let f = self.follower.take()?;
        f.stop()
    }
}

impl OutputTap for Meter {
    fn chunk(&mut self, bytes: &[u8]) {
        let Meter {
            live,
            gauge,
            log,
            follower,
        } = self;
        if lock(gauge).stopped {
            return;
        }
        live.feed(bytes, |l| {
            if follower.is_none()
                && let (Some(kind), Some(thread)) = (log.as_ref(), l.session())
            {
                *follower = Some(session_log::Follower::start(
                    kind.clone(),
                    thread.to_string(),
                    Arc::clone(gauge),
                ));
            }
            match l.so_far() {
                Some(u) => lock(gauge).observe(u),
                None => false,
            }
        });
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        if let Some(f) = self.follower.take() {
            let _ = f.stop();
        }
        let g = lock(&self.gauge);
        g.purse.leave(&g.key);
    }
}

/// `u` with dollars from `price` where the agent reported tokens but no dollars.
pub(crate) fn priced(price: Option<&Price>, mut u: Usage) -> Usage {
    if u.usd_micros.is_none()
        && let Some(p) = price
    {
        u.usd_micros = Some(p.cost(u.input_tokens, u.cached_tokens, u.output_tokens));
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(adapter: crate::ir::Adapter, price: Option<Price>) -> Agent {
        Agent {
            name: "a".into(),
            argv: vec!["sh".into()],
            env: std::collections::BTreeMap::new(),
            adapter,
            timeout: std::time::Duration::from_secs(60),
            rate_limits: Vec::new(),
            params: std::collections::BTreeMap::new(),
            sandbox: None,
            price,
        }
    }

    fn command_agent() -> Agent {
        agent(crate::ir::Adapter::Command, None)
    }

    fn line(usd: f64) -> Vec<u8> {
        format!("MVK_USAGE={{\"input_tokens\":10,\"output_tokens\":5,\"usd\":{usd}}}\n")
            .into_bytes()
    }

    #[test]
    fn the_line_that_spends_the_task_budget_pulls_the_brake_and_later_lines_are_not_read() {
        let purse = Arc::new(Purse::default());
        let caps = TaskCaps {
            spent: Spend {
                tokens: 0,
                usd_micros: 100_000,
            },
            tokens: None,
            usd_micros: Some(500_000),
        };
        let (mut m, rx) = Meter::new(
            &command_agent(),
            ("t", 1),
            Spend::default(),
            caps,
            purse.clone(),
        )
        .expect("meter");
        m.chunk(&line(0.2));
        assert!(!m.brake().stop.is_pulled());
        // One chunk holding the crossing line and one more: the decision stops at the first.
        let mut two = line(0.4);
        two.extend(line(0.9));
        m.chunk(&two);
        assert!(m.brake().stop.is_pulled());
        assert_eq!(
            m.brake().tripped(),
            Some(Trip {
                budget: Budget::Usd,
                spent: 500_000,
                limit: 500_000
            })
        );
        assert_eq!(rx.borrow().usd_micros, 400_000);
        assert_eq!(purse.total().usd_micros, 400_000);
    }

    #[test]
    fn an_agent_under_its_cap_is_never_stopped() {
        let purse = Arc::new(Purse::default());
        let caps = TaskCaps {
            usd_micros: Some(1_000_000),
            ..TaskCaps::default()
        };
        let (mut m, _rx) =
            Meter::new(&command_agent(), ("t", 1), Spend::default(), caps, purse).expect("meter");
        for usd in [0.1, 0.5, 0.999_999] {
            m.chunk(&line(usd));
        }
        assert!(!m.brake().stop.is_pulled());
        assert_eq!(m.brake().tripped(), None);
    }

    #[test]
    fn the_flows_budget_spent_by_two_agents_stops_both_and_any_that_starts_later() {
        let limits = Limits {
            usd_micros: Some(1_000_000),
            ..Limits::default()
        };
        let purse = Arc::new(Purse::new(
            limits,
            Spend {
                tokens: 0,
                usd_micros: 200_000,
            },
        ));
        let agent = command_agent();
        let (mut a, _) = Meter::new(
            &agent,
            ("a", 1),
            Spend::default(),
            TaskCaps::default(),
            purse.clone(),
        )
        .expect("meter");
        let (mut b, _) = Meter::new(
            &agent,
            ("b", 1),
            Spend::default(),
            TaskCaps::default(),
            purse.clone(),
        )
        .expect("meter");
        a.chunk(&line(0.4));
        assert!(!a.brake().stop.is_pulled());
        b.chunk(&line(0.4));
        for m in [&a, &b] {
            assert_eq!(
                m.brake().tripped(),
                Some(Trip {
                    budget: Budget::FlowUsd,
                    spent: 1_000_000,
                    limit: 1_000_000
                })
            );
        }
        let (c, _) = Meter::new(
            &agent,
            ("c", 1),
            Spend::default(),
            TaskCaps::default(),
            purse,
        )
        .expect("meter");
        assert!(c.brake().stop.is_pulled());
    }

    #[test]
    fn tokens_an_agent_reports_without_dollars_are_priced_as_they_come() {
        let agent = agent(
            crate::ir::Adapter::Codex,
            Some(Price {
                model: "m".into(),
                input: 1_000_000,
                output: 10_000_000,
                cached: 0,
                from: String::new(),
            }),
        );
        let caps = TaskCaps {
            usd_micros: Some(50_000),
            ..TaskCaps::default()
        };
        let (mut m, rx) =
            Meter::new(&agent, ("t", 1), Spend::default(), caps, Arc::default()).expect("meter");
        let turn = b"{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":10000,\"output_tokens\":1000}}\n";
        m.chunk(turn);
        assert_eq!(rx.borrow().usd_micros, 20_000);
        m.chunk(turn);
        assert!(!m.brake().stop.is_pulled());
        // Cut mid-line: nothing is read until its newline.
        m.chunk(&turn[..20]);
        assert!(!m.brake().stop.is_pulled());
        m.chunk(&turn[20..]);
        assert_eq!(m.brake().tripped().map(|t| t.spent), Some(60_000));
    }

    #[test]
    fn an_attempts_final_figure_that_spends_the_flows_budget_stops_the_others() {
        let purse = Arc::new(Purse::new(
            Limits {
                usd_micros: Some(1_000_000),
                ..Limits::default()
            },
            Spend::default(),
        ));
        let (running, _) = Meter::new(
            &command_agent(),
            ("a", 1),
            Spend::default(),
            TaskCaps::default(),
            purse.clone(),
        )
        .expect("meter");
        // An agent that reported nothing as it ran, $1.20 at its end.
        purse.settle(
            "b",
            1,
            Spend {
                tokens: 0,
                usd_micros: 1_200_000,
            },
        );
        assert_eq!(
            running.brake().tripped().map(|t| (t.budget, t.spent)),
            Some((Budget::FlowUsd, 1_200_000))
        );
    }
}
