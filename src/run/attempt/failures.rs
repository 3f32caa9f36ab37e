//! A gate's result, a reviewer's blockers or a stop signal in; out, the [`Failure`] the next
//! attempt is told: its criterion, the output's tail (worktree paths made relative) and its
//! signature for the brake.

use std::path::Path;

use super::AttemptSpec;
use crate::prompt::{self};
use crate::run::error::RunError;
use crate::run::event::Event;
use crate::run::failure::{Failure, FailureKind};
use crate::run::host::Host;
use crate::run::judge::evidence::GateVerdict;
use crate::run::judge::gate::GateRun;

/// The failure of an attempt whose gate `run` sent mvk `signals` stop signals, if it sent any.
pub(super) fn signalled_by_gate(
    host: &impl Host,
    spec: &AttemptSpec<'_>,
    run: &GateRun,
    signals: u64,
) -> Result<Option<Failure>, RunError> {
    if signals == 0 {
        return Ok(None);
    }
    host.emit(
        Some(&spec.task.name),
        Some(spec.number),
        Event::GateSignalledMvk {
            gate: run.gate.clone(),
            landing: None,
            signals,
        },
    )?;
    let mut f = Failure::new(
        spec.number,
        FailureKind::Gate,
        format!(
            "gate `{}` leaves mvk alone, but it sent mvk {signals} stop signal(s); the attempt was rejected whatever its verdict",
            run.gate
        ),
        &[&run.gate, "signalled-mvk"],
    );
    f.gate = Some(run.gate.clone());
    f.exit_code = run.exit_code;
    f.tail = run.tail.clone();
    Ok(Some(f))
}

/// A rejection's blockers a later prompt quotes, at most.
const MAX_BLOCKERS: usize = 10;

/// The signature part of an attempt failed because processes its agent or a gate left outlasted
/// mvk's sweep of them.
pub(crate) const ESCAPEES_SURVIVED: &str = "escapees-survived";

/// A gate whose escaped processes outlasted mvk's sweep: whatever it said, its evidence and its
/// checkout may still be changed by them.
pub(crate) fn escaped_gate(attempt: u32, run: &GateRun) -> Failure {
    let mut f = Failure::new(
        attempt,
        FailureKind::Gate,
        format!(
            "gate `{}` leaves no process running once it ends (processes it left were still appearing when mvk's sweep gave up); the attempt was rejected whatever its verdict",
            run.gate
        ),
        &[&run.gate, ESCAPEES_SURVIVED],
    );
    f.gate = Some(run.gate.clone());
    f.exit_code = run.exit_code;
    f.tail = run.tail.clone();
    f
}

/// A reviewer's rejection as the failure the next attempt is told about; the same blockers
/// again are the same failure.
pub(super) fn review_failure(attempt: u32, blockers: Vec<prompt::Blocker>) -> Failure {
    // A reviewer's words are quoted in every later prompt's fixed part: bounded, so a verbose
    // one cannot crowd the budget out.
    let cut = |s: &str, n: usize| {
        if s.chars().count() > n {
            format!("{}…", s.chars().take(n).collect::<String>())
        } else {
            s.to_string()
        }
    };
    let blockers: Vec<prompt::Blocker> = blockers
        .into_iter()
        .take(MAX_BLOCKERS)
        .map(|b| prompt::Blocker {
            category: cut(&b.category, 40),
            evidence: cut(&b.evidence, 400),
            location: cut(&b.location, 160),
        })
        .collect();
    let parts: Vec<String> = blockers
        .iter()
        .map(|b| format!("{}|{}|{}", b.category, b.location, b.evidence))
        .collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let shown: Vec<String> = blockers.iter().map(prompt::Blocker::line).collect();
    let mut f = Failure::new(
        attempt,
        FailureKind::Review,
        format!(
            "the reviewer approves the change, but it rejected it: {}",
            shown.join("; ")
        ),
        &parts,
    );
    f.tail = shown.iter().map(|s| format!("blocker {s}\n")).collect();
    f.blockers = blockers;
    f
}

/// The failure a gate run reports; its signature ignores what changes between identical runs
/// (numbers such as timings, long hex such as nonces and commit ids, the worktree's path).
pub(crate) fn gate_failure(attempt: u32, run: &GateRun, worktree: &Path) -> Failure {
    let kind = if run.verdict == GateVerdict::Unknown {
        FailureKind::Unknown
    } else {
        FailureKind::Gate
    };
    let criterion = match kind {
        FailureKind::Unknown => format!(
            "gate `{}` proves that its tests ran and passed: {}",
            run.gate, run.reason
        ),
        _ => format!("gate `{}` passes: {}", run.gate, run.reason),
    };
    // The last lines, not the last bytes: a byte window shifts when a timing's width changes.
    let normal = normalize(last_lines(&run.tail, 30), worktree);
    let exit = format!("{:?}", run.exit_code);
    let counts = format!("{:?}", run.counts());
    let mut f = Failure::new(
        attempt,
        kind,
        criterion,
        &[&run.gate, &exit, &counts, &normal],
    );
    f.gate = Some(run.gate.clone());
    f.exit_code = run.exit_code;
    f.counts = run.counts();
    f.tail = run.tail.clone();
    f
}

/// The last `n` lines of `text`.
pub(crate) fn last_lines(text: &str, n: usize) -> &str {
    let body = text.trim_end_matches('\n');
    let mut idx = body.len();
    for _ in 0..n {
        match body[..idx].rfind('\n') {
            Some(i) => idx = i,
            None => return text,
        }
    }
    &text[idx + 1..]
}

pub(super) fn normalize(text: &str, worktree: &Path) -> String {
    let text = text.replace(&worktree.display().to_string(), "<worktree>");
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.len() >= 12 {
            out.push('H');
        } else if run.chars().all(|c| c.is_ascii_digit()) {
            if !run.is_empty() {
                out.push('#');
            }
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in text.chars() {
        if c.is_ascii_hexdigit() {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}
