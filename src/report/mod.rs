//! Ledger rows in; what a person or a program reads about runs out: a run's status
//! ([`status`]), figures over all runs ([`stats`]), the pattern of a run that went wrong
//! ([`diagnosis`]), one line per event ([`event_text`]), a run's HTML report ([`html`]), and
//! the live board `mvk watch` draws from a run's events ([`board`]).
//! [`human_duration`] is how the report writes a span of time.

pub(crate) mod board;
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

/// A size as a person reads it, to one decimal in binary units: `512 bytes`, `1.2 MiB`.
pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    #[expect(clippy::cast_precision_loss, reason = "a size shown to one decimal")]
    let mut size = bytes as f64;
    let mut unit = 0;
    while size >= 1024.0 && unit + 1 < UNITS.len() {
        size /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{size:.1} {}", UNITS[unit])
    }
}

/// A span of `ms` milliseconds as a person reads it, to about three figures: `350 ms`, `18.1 s`,
/// `2 min 5 s`, `1 h 3 min`, `2 d 4 h`; a zero part is left out (`2 min`), a negative span is
/// `0 ms`. (`plan::format_duration` writes the exact `18s77ms` a loop file accepts instead.)
pub(crate) fn human_duration(ms: i64) -> String {
    const SECOND: i64 = 1000;
    const MINUTE: i64 = 60 * SECOND;
    const HOUR: i64 = 60 * MINUTE;
    const DAY: i64 = 24 * HOUR;
    let ms = ms.max(0);
    // Each unit is rounded to the nearest of its smallest part; a span that rounds up to the
    // next unit (59.96 s) is written in that unit (1 min).
    let round = |unit: i64| ms.saturating_add(unit / 2) / unit;
    let two = |big: i64, big_name: &str, small: i64, small_name: &str| {
        let n = round(small);
        let per = big / small;
        match n % per {
            0 => format!("{} {big_name}", n / per),
            rest => format!("{} {big_name} {rest} {small_name}", n / per),
        }
    };
    if ms < SECOND {
        format!("{ms} ms")
    } else if round(SECOND / 10) < 600 {
        let tenths = round(SECOND / 10);
        format!("{}.{} s", tenths / 10, tenths % 10)
    } else if round(SECOND) < 3600 {
        two(MINUTE, "min", SECOND, "s")
    } else if round(MINUTE) < 24 * 60 {
        two(HOUR, "h", MINUTE, "min")
    } else {
        two(DAY, "d", HOUR, "h")
    }
}

#[cfg(test)]
mod tests {
    use super::human_duration;

    #[test]
    fn durations_read_as_a_person_says_them() {
        for (ms, text) in [
            (-5, "0 ms"),
            (0, "0 ms"),
            (350, "350 ms"),
            (999, "999 ms"),
            (1_000, "1.0 s"),
            (18_077, "18.1 s"),
            (59_949, "59.9 s"),
            (59_960, "1 min"),
            (125_000, "2 min 5 s"),
            (125_600, "2 min 6 s"),
            (3_599_499, "59 min 59 s"),
            (3_599_600, "1 h"),
            (3_780_000, "1 h 3 min"),
            (86_399_000, "1 d"),
            (2 * 86_400_000 + 4 * 3_600_000 + 60_000, "2 d 4 h"),
        ] {
            assert_eq!(human_duration(ms), text, "{ms} ms");
        }
    }
}
