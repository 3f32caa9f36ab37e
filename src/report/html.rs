//! A run's ledger rows, its gates' logs and its repository in; one self-contained HTML page out
//! (`mvk report --html`): the run's summary, a timeline of each attempt's phases (agent, seal,
//! gates, review, landing) drawn as plain HTML bars ([`timeline`]), and per task its attempts
//! with rung, agent, duration, seal, gate verdicts with test counts and cost, each followed by
//! the failing tests its gates named, the end of their output and its diff ([`detail`]).
//! Inline CSS only: no script, no external asset, no network; everything an agent or a gate
//! wrote is escaped, and a Content-Security-Policy forbids scripts should anything slip through.

mod detail;
mod timeline;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{Spent, human_duration, spent_by_attempt};
use crate::ledger::LedgerError;
use crate::ledger::read::{AttemptRow, GateResultRow, MergeRow, Reader, RunRow, rfc3339};
use crate::plan::format_usd;
use crate::run::event::Event;
use crate::run::failure::Failure;

/// The rows of one run, read once.
struct Rows {
    run: RunRow,
    tasks: Vec<crate::ledger::read::TaskRow>,
    attempts: Vec<AttemptRow>,
    gates: Vec<GateResultRow>,
    costs: BTreeMap<i64, Spent>,
    merges: Vec<MergeRow>,
    /// `(task, attempt)` → `passed` or `breached: PATH, …`, from the `seal.*` events.
    seals: BTreeMap<(String, u32), String>,
    /// Where a run that has not finished ends on the page: now while it is alive, else its
    /// last sign of life (the last event or the heartbeat file, whichever is later).
    last_event_ms: i64,
    /// `running`, `interrupted`, `unknown` for a run the ledger says is running.
    liveness: String,
    /// Attempt id → its phases on the timeline.
    phases: BTreeMap<i64, Vec<timeline::Phase>>,
    /// Attempt id → what is shown below its row.
    details: BTreeMap<i64, detail::Detail>,
}

/// The page for `run`.
pub(crate) fn html(
    reader: &Reader,
    mvk_dir: &std::path::Path,
    run: &RunRow,
) -> Result<String, LedgerError> {
    let events = reader.events(&run.id, 0)?;
    let mut seals = BTreeMap::new();
    // The last failure recorded per attempt (a resume may have made one again).
    let mut failures: BTreeMap<(String, u32), Failure> = BTreeMap::new();
    for e in &events {
        let (Some(task), Some(attempt)) = (&e.task, e.attempt) else {
            continue;
        };
        let verdict = match Event::read(&e.event, &e.detail) {
            Some(Event::SealPassed {}) => "passed".to_string(),
            Some(Event::SealBreached { breaches }) => {
                let paths: Vec<&str> = breaches.iter().map(|b| b.path.as_str()).collect();
                format!("breached: {}", paths.join(", "))
            }
            Some(Event::AttemptFailed {
                failure: Some(f), ..
            }) => {
                failures.insert((task.clone(), attempt), f);
                continue;
            }
            _ => continue,
        };
        seals.insert((task.clone(), attempt), verdict);
    }
    let live = crate::ledger::read::liveness(mvk_dir, run);
    let mut rows = Rows {
        run: run.clone(),
        tasks: reader.tasks(Some(&run.id))?,
        attempts: reader
            .attempts(Some(&run.id))?
            .into_iter()
            .filter(|a| a.state != "abandoned")
            .collect(),
        gates: reader.gate_results(Some(&run.id))?,
        costs: spent_by_attempt(&reader.costs(Some(&run.id))?),
        merges: reader.merges(&run.id)?,
        seals,
        last_event_ms: {
            let last = events.last().map_or(run.heartbeat_at, |e| e.time_ms);
            if matches!(live, crate::ledger::read::Liveness::Running { .. }) {
                crate::ledger::read::ms_since_epoch(std::time::SystemTime::now()).max(last)
            } else {
                let beat = std::fs::metadata(mvk_dir.join("runs").join(&run.id).join("heartbeat"))
                    .and_then(|m| m.modified())
                    .map(crate::ledger::read::ms_since_epoch)
                    .unwrap_or(last);
                last.max(beat)
            }
        },
        liveness: live.name().to_string(),
        phases: BTreeMap::new(),
        details: BTreeMap::new(),
    };
    // `.mvk/` sits in the main checkout of the repository the attempts' commits are in.
    let root = mvk_dir.parent().unwrap_or(mvk_dir);
    let repo = git2::Repository::open(root).map_err(|e| {
        format!(
            "the repository at `{}` cannot be opened: {}",
            root.display(),
            e.message()
        )
    });
    for a in &rows.attempts {
        let open_end = attempt_end(&rows, a);
        rows.phases
            .insert(a.id, timeline::phases(&events, a, open_end));
        let gates: Vec<&GateResultRow> =
            rows.gates.iter().filter(|g| g.attempt_id == a.id).collect();
        let failure = failures.get(&(a.task.clone(), a.number));
        let detail = detail::gather(repo.as_ref().map_err(String::as_str), a, &gates, failure);
        rows.details.insert(a.id, detail);
    }
    Ok(render(&rows))
}

/// `&`, `<`, `>`, `"` and `'` escaped, for text and attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// When an attempt ended: its finish, else (still running or cut off) the run's last sign.
fn attempt_end(rows: &Rows, a: &AttemptRow) -> i64 {
    a.finished_at
        .unwrap_or(rows.last_event_ms.max(rows.run.heartbeat_at))
        .max(a.started_at)
}

/// `passed`, `failed (gate)`, `running`.
fn verdict(a: &AttemptRow) -> String {
    match (&a.outcome, &a.failure_kind) {
        (Some(o), Some(kind)) => format!("{o} ({kind})"),
        (Some(o), None) => o.clone(),
        (None, _) => a.state.clone(),
    }
}

/// The CSS class of an attempt's bar.
fn class(a: &AttemptRow) -> &'static str {
    match (a.outcome.as_deref(), a.failure_kind.as_deref()) {
        (Some("passed"), _) => "passed",
        (Some(_), Some("seal")) => "breached",
        (Some(_), Some("unknown")) => "unknown",
        (Some(_), _) => "failed",
        (None, _) => "running",
    }
}

/// `tests pass 12/12`, `lint fail (exit 1)`.
fn gate_text(g: &GateResultRow) -> String {
    let mut text = format!("{} {}", g.name, g.verdict);
    if let (Some(executed), Some(passed), Some(failed)) = (g.executed, g.passed, g.failed) {
        let _ = write!(text, " {passed}/{executed} passed");
        if failed > 0 {
            let _ = write!(text, ", {failed} failed");
        }
    } else if let Some(code) = g.exit_code {
        let _ = write!(text, " (exit {code})");
    }
    if g.phase == "after-merge" {
        text.push_str(" after merge");
    }
    text
}

fn render(rows: &Rows) -> String {
    let run = &rows.run;
    let end = run.finished_at.unwrap_or(rows.last_event_ms).max(
        rows.attempts
            .iter()
            .map(|a| attempt_end(rows, a))
            .max()
            .unwrap_or(0),
    );
    let mut spent = Spent::default();
    for a in &rows.attempts {
        spent.add_attempt(a, &rows.costs);
    }
    // A run the ledger calls running may have died: say what its liveness says.
    let outcome = run.outcome.clone().unwrap_or_else(|| {
        if run.state == "running" {
            rows.liveness.clone()
        } else {
            run.state.clone()
        }
    });
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'\">\n\
         <title>mvk run {id}: {program}</title>\n<style>{CSS}</style>\n</head>\n<body>\n\
         <h1>Run <code>{id}</code>: {program}</h1>\n",
        id = esc(&run.id),
        program = esc(&run.program),
    );
    let _ = writeln!(
        out,
        "<dl class=\"summary\">\
         <dt>loop file</dt><dd><code>{file}</code></dd>\
         <dt>outcome</dt><dd class=\"outcome {outcome_class}\" id=\"outcome\">{outcome}{code}</dd>\
         <dt>started</dt><dd>{started}</dd>\
         <dt>duration</dt><dd>{duration}</dd>\
         <dt>base</dt><dd><code>{base}</code> on <code>{target}</code></dd>\
         <dt>spent</dt><dd id=\"spent\">{attempts} attempt{s}, {usd}, {tokens} tokens</dd>\
         </dl>",
        file = esc(&run.file),
        outcome_class = esc(&outcome),
        outcome = esc(&outcome),
        code = run
            .exit_code
            .map_or(String::new(), |c| format!(" (exit {c})")),
        started = esc(&rfc3339(run.started_at)),
        duration = human_duration(end - run.started_at),
        base = esc(run.base_commit.get(..12).unwrap_or(&run.base_commit)),
        target = esc(&run.target_branch),
        attempts = spent.attempts,
        s = if spent.attempts == 1 { "" } else { "s" },
        usd = format_usd(spent.usd_micros),
        tokens = spent.tokens,
    );
    counts(&mut out, rows);
    timeline::timeline(&mut out, rows, end);
    for task in task_names(rows) {
        task_section(&mut out, rows, &task);
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// The tasks in the order they started (attempts' order), then those that never ran.
fn task_names(rows: &Rows) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for name in rows
        .attempts
        .iter()
        .map(|a| &a.task)
        .chain(rows.tasks.iter().map(|t| &t.name))
    {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
}

/// The verdict tallies: attempts, seal checks, gate runs, merges.
fn counts(out: &mut String, rows: &Rows) {
    let tally = |items: &mut dyn Iterator<Item = String>| {
        let mut by: BTreeMap<String, u64> = BTreeMap::new();
        for i in items {
            *by.entry(i).or_default() += 1;
        }
        by
    };
    let attempts = tally(&mut rows.attempts.iter().map(|a| class(a).to_string()));
    let seals = tally(
        &mut rows
            .seals
            .values()
            .map(|v| v.split(':').next().unwrap_or(v).to_string()),
    );
    let gates = tally(&mut rows.gates.iter().map(|g| g.verdict.clone()));
    let merges = tally(&mut rows.merges.iter().map(|m| m.state.clone()));
    out.push_str(
        "<table class=\"counts\" id=\"counts\">\n<tr><th>what</th><th>verdicts</th></tr>\n",
    );
    for (what, by) in [
        ("attempts", attempts),
        ("seal checks", seals),
        ("gate runs", gates),
        ("merges", merges),
    ] {
        let cells: Vec<String> = by
            .iter()
            .map(|(v, n)| format!("<span class=\"{c}\">{n} {c}</span>", c = esc(v)))
            .collect();
        let _ = writeln!(
            out,
            "<tr data-count=\"{what}\"><td>{what}</td><td>{}</td></tr>",
            if cells.is_empty() {
                "none".to_string()
            } else {
                cells.join(", ")
            }
        );
    }
    out.push_str("</table>\n");
}

/// A task's outcome, its attempts' table and its merges, then what each attempt showed.
fn task_section(out: &mut String, rows: &Rows, name: &str) {
    let task = rows.tasks.iter().find(|t| t.name == name);
    let outcome = task
        .and_then(|t| t.outcome.clone().or_else(|| Some(t.state.clone())))
        .unwrap_or_else(|| "not started".into());
    let merged = task
        .and_then(|t| t.merged.as_deref())
        .map_or(String::new(), |c| {
            format!(", landed as <code>{}</code>", esc(c.get(..12).unwrap_or(c)))
        });
    let _ = writeln!(
        out,
        "<section class=\"task\" data-task=\"{n}\">\n<h2>Task <code>{n}</code>: \
         <span class=\"{o}\">{o}</span>{merged}</h2>",
        n = esc(name),
        o = esc(&outcome),
    );
    let attempts: Vec<&AttemptRow> = rows.attempts.iter().filter(|a| a.task == name).collect();
    if attempts.is_empty() {
        out.push_str("<p>No attempts.</p>\n</section>\n");
        return;
    }
    out.push_str(
        "<table class=\"attempts\">\n<tr><th>#</th><th>rung</th><th>agent</th><th>duration</th>\
         <th>agent exit</th><th>seal</th><th>gates</th><th>verdict</th><th>cost</th></tr>\n",
    );
    for a in attempts {
        let gates: Vec<String> = rows
            .gates
            .iter()
            .filter(|g| g.attempt_id == a.id)
            .map(|g| {
                format!(
                    "<span class=\"gate {v}\" title=\"{reason}\">{text}</span>",
                    v = esc(&g.verdict),
                    reason = esc(&g.reason),
                    text = esc(&gate_text(g))
                )
            })
            .collect();
        let cost = rows.costs.get(&a.id).copied().unwrap_or_default();
        let exit = match (a.exit_code, a.timed_out) {
            (_, Some(true)) => "timed out".to_string(),
            (Some(c), _) => c.to_string(),
            (None, _) => "-".to_string(),
        };
        let _ = writeln!(
            out,
            "<tr class=\"attempt-row\" data-outcome=\"{class}\" data-attempt=\"{n}\"><td>{n}</td><td>{rung}</td>\
             <td>{agent}</td><td>{duration}</td><td>{exit}</td><td>{seal}</td><td>{gates}</td>\
             <td class=\"{class}\">{verdict}{criterion}</td><td>{usd}, {tokens} tokens</td></tr>",
            class = class(a),
            n = a.number,
            rung = a.rung,
            agent = esc(&a.agent),
            duration = human_duration(attempt_end(rows, a) - a.started_at),
            seal = esc(rows
                .seals
                .get(&(a.task.clone(), a.number))
                .map_or("-", String::as_str)),
            gates = if gates.is_empty() {
                "-".to_string()
            } else {
                gates.join("<br>")
            },
            verdict = esc(&verdict(a)),
            criterion = a
                .criterion
                .as_deref()
                .map_or(String::new(), |c| format!("<br><small>{}</small>", esc(c))),
            usd = format_usd(cost.usd_micros),
            tokens = cost.tokens,
        );
    }
    out.push_str("</table>\n");
    let merges: Vec<&MergeRow> = rows.merges.iter().filter(|m| m.task == name).collect();
    if !merges.is_empty() {
        out.push_str("<ul class=\"merges\">\n");
        for m in merges {
            let _ = writeln!(
                out,
                "<li class=\"merge-row {state}\">merge into <code>{into}</code> ({strategy}): \
                 {state}{commit}{detail}</li>",
                state = esc(&m.state),
                into = esc(&m.into_branch),
                strategy = esc(&m.strategy),
                commit = m.commit_id.as_deref().map_or(String::new(), |c| format!(
                    " as <code>{}</code>",
                    esc(c.get(..12).unwrap_or(c))
                )),
                detail = if m.detail.is_empty() {
                    String::new()
                } else {
                    format!(": {}", esc(&m.detail))
                },
            );
        }
        out.push_str("</ul>\n");
    }
    for a in rows.attempts.iter().filter(|a| a.task == name) {
        if let Some(d) = rows.details.get(&a.id) {
            detail::render(out, a, d, attempt_end(rows, a) - a.started_at);
        }
    }
    out.push_str("</section>\n");
}

/// The page's only style sheet, inline.
const CSS: &str = "
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; \
background: #fff; padding: 0 1em; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; } h3 { font-size: 1em; }
code, pre { font-family: ui-monospace, monospace; font-size: 0.95em; }
dl.summary { display: grid; grid-template-columns: max-content 1fr; gap: 0.2em 1em; }
dt { color: #666; } dd { margin: 0; }
table { border-collapse: collapse; margin: 0.6em 0; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f5f5f5; }
.passed, .pass, .accepted, .done { color: #1a7f37; }
.failed, .fail, .rejected, .conflict { color: #c62828; }
.breached { color: #7b1fa2; }
.unknown, .stuck, .budget, .human { color: #8d6e00; }
.running { color: #1565c0; }
.note { color: #666; }
.timeline { margin: 0.6em 0; }
.timeline .row, .timeline .axis { display: flex; align-items: center; height: 22px; }
.timeline .label { flex: 0 0 200px; overflow: hidden; white-space: nowrap; \
text-overflow: ellipsis; font-size: 12px; }
.timeline .track { position: relative; flex: 1 1 auto; height: 16px; }
.timeline .took { flex: 0 0 80px; font-size: 12px; text-align: right; color: #444; }
.timeline .axis .track { border-top: 1px solid #999; height: 14px; }
.timeline .tick { position: absolute; top: 1px; font-size: 11px; color: #555; \
transform: translateX(-50%); white-space: nowrap; }
.timeline .task-row { font-weight: 600; font-size: 12px; margin-top: 0.5em; }
.timeline .extent { position: absolute; top: 0; bottom: 0; border: 2px solid #3f7fd0; \
border-radius: 3px; box-sizing: border-box; min-width: 4px; }
.timeline .row.passed .extent { border-color: #2e9e4f; } \
.timeline .row.failed .extent { border-color: #d9534f; }
.timeline .row.breached .extent { border-color: #8e44ad; } \
.timeline .row.unknown .extent { border-color: #c9a227; }
.phase { position: absolute; top: 3px; bottom: 3px; min-width: 2px; }
.phase.agent { background: #5b8def; } .phase.seal { background: #9b59b6; }
.phase.gates { background: #e8a33d; } .phase.review { background: #16a2a2; }
.phase.landing { background: #555; }
.timeline .merge { position: absolute; top: -3px; font-size: 14px; transform: translateX(-50%); }
.timeline .merge.conflict, .timeline .merge.failed { color: #c62828; }
.legend .key { margin-right: 1em; white-space: nowrap; }
.legend .swatch { position: static; display: inline-block; width: 12px; height: 10px; \
margin-right: 0.3em; }
.legend > span { margin-right: 0.6em; }
.attempt-detail { border-left: 3px solid #ddd; padding: 0.1em 0 0.1em 0.8em; margin: 1em 0; }
.attempt-detail h3 { margin: 0.3em 0; }
ul.failing-tests { margin: 0.2em 0 0.6em; }
details { margin: 0.4em 0; } summary { cursor: pointer; }
pre.tail, pre.diff { background: #f7f7f7; border: 1px solid #e3e3e3; padding: 0.5em; \
overflow-x: auto; max-height: 32em; white-space: pre; margin: 0.3em 0; }
pre.diff .add, summary .add { color: #1a7f37; }
pre.diff .del, summary .del { color: #c62828; } pre.diff .hunk { color: #1565c0; }
pre.diff .file { font-weight: 600; }
";
