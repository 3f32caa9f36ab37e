//! Ledger rows in; what a person or a program reads about runs out: a run's status
//! ([`status`]), figures over all runs ([`stats`]), the pattern of a run that went wrong
//! ([`diagnosis`]), one line per event ([`event_text`]), and a run's HTML report ([`html`]).

pub(crate) mod diagnosis;
pub(crate) mod event_text;
pub(crate) mod html;
pub(crate) mod stats;
pub(crate) mod status;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::ledger::read::{AttemptRow, CostRow};

/// What some attempts spent: how many, tokens (input and output) and micro-dollars.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Spent {
    pub(crate) attempts: u64,
    pub(crate) tokens: u64,
    pub(crate) usd_micros: u64,
}

impl Spent {
    /// Counts attempt `a` and what it spent (from `costs`, by attempt id).
    pub(crate) fn add_attempt(&mut self, a: &AttemptRow, costs: &BTreeMap<i64, Spent>) {
        self.attempts += 1;
        if let Some(c) = costs.get(&a.id) {
            self.tokens += c.tokens;
            self.usd_micros += c.usd_micros;
        }
    }
}

/// The cost rows summed per attempt id (`attempts` stays 0).
pub(crate) fn spent_by_attempt(costs: &[CostRow]) -> BTreeMap<i64, Spent> {
    let mut out: BTreeMap<i64, Spent> = BTreeMap::new();
    for c in costs {
        let s = out.entry(c.attempt_id).or_default();
        let tokens = c.input_tokens.saturating_add(c.output_tokens);
        s.tokens += u64::try_from(tokens).unwrap_or(0);
        s.usd_micros += u64::try_from(c.usd_micros).unwrap_or(0);
    }
    out
}
