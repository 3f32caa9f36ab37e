//! The [`App`]'s state in; the frame `mvk watch` shows out. From the top: the run and its state,
//! its totals and where its feed is, the flow's DAG by levels, the tasks (a table: state, step,
//! attempt, rung, agent, time, spending), the selected task in detail (its budget, what it
//! waits for, its last failure, its checkpoint), the latest events and, at the bottom, a message
//! or the keys. A pane, a question or the reason being typed is drawn over it.
//!
//! Made for 80×24 and up: the events go first when rows run short, then the detail shrinks.
//! Meaning is never colour alone (each state has its mark: ✓ ✗ ● ◌ ? ·), and with `NO_COLOR`
//! no colour is used at all: bold and reverse video only.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Row, Table, TableState, Wrap};

use super::{App, Overlay, good};
use crate::cli::reading::usd;
use crate::ledger::read::Liveness;
use crate::report::board::{Board, FailureSeen, TaskBoard, TaskState};
use crate::report::human_duration;

/// The smallest terminal the view is drawn in.
const MIN: (u16, u16) = (60, 16);

/// Styles, or none of their colours under `NO_COLOR`.
struct Paint {
    colour: bool,
}

impl Paint {
    fn fg(&self, c: Color) -> Style {
        if self.colour {
            Style::default().fg(c)
        } else {
            Style::default()
        }
    }

    fn bold(&self) -> Style {
        Style::default().add_modifier(Modifier::BOLD)
    }

    fn dim(&self) -> Style {
        if self.colour {
            Style::default().fg(Color::DarkGray)
        } else {
            Style::default()
        }
    }

    /// A task's state.
    fn state(&self, s: &TaskState) -> Style {
        match s {
            TaskState::Done(o) if o == "accepted" => self.fg(Color::Green),
            TaskState::Done(o) if o == "human" => self.fg(Color::Yellow),
            TaskState::Done(o) if o == "skipped" => self.dim(),
            TaskState::Done(_) => self.fg(Color::Red),
            TaskState::Running => self.fg(Color::Cyan),
            TaskState::Waiting => self.fg(Color::Yellow),
            TaskState::Pending => self.dim(),
        }
    }

    fn error(&self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }
}

/// The mark of a task's state (meaning without colour).
fn mark(t: &TaskBoard) -> &'static str {
    if t.checkpoint.is_some() {
        return "?";
    }
    match &t.state {
        TaskState::Done(o) if o == "accepted" => "✓",
        TaskState::Done(o) if o == "human" => "?",
        TaskState::Done(o) if o == "skipped" => "-",
        TaskState::Done(_) => "✗",
        TaskState::Running => "●",
        TaskState::Waiting => "◌",
        TaskState::Pending => "·",
    }
}

/// A task's state in words: `person` while a checkpoint waits for one.
fn state_name(t: &TaskBoard) -> &str {
    if t.checkpoint.is_some() {
        "person"
    } else {
        t.state.name()
    }
}

/// Draws the whole view.
pub(super) fn draw(f: &mut Frame<'_>, app: &mut App) {
    let area = f.area();
    let paint = Paint { colour: app.colour };
    if area.width < MIN.0 || area.height < MIN.1 {
        let text = format!(
            "mvk watch needs a terminal of at least {}×{}; this one is {}×{}. q leaves.",
            MIN.0, MIN.1, area.width, area.height
        );
        f.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), area);
        return;
    }
    let now = super::now_ms();
    let tasks_rows = u16::try_from(app.board.tasks.len())
        .unwrap_or(u16::MAX)
        .max(1);
    // Rows: 3 for the header, the tasks' table (its border, header and rows), 7 for the detail,
    // the events with what is left (at least 3), 1 for the footer.
    // A message wider than the terminal takes two rows.
    let foot_h = match &app.message {
        Some(m) if m.text.chars().count() > usize::from(area.width) => 2,
        _ => 1,
    };
    let fixed = 3 + 7 + foot_h;
    let room = area.height.saturating_sub(fixed + 3);
    let table_h = (tasks_rows + 3).min(room.max(4));
    let [head, table, detail, events, foot] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Length(table_h),
        Constraint::Length(7),
        Constraint::Min(0),
        Constraint::Length(foot_h),
    ])
    .areas(area);
    header(f, head, app, &paint, now);
    task_table(f, table, app, &paint, now);
    task_detail(f, detail, app, &paint, now);
    if events.height >= 3 {
        event_list(f, events, &app.board, &paint);
    }
    footer(f, foot, app, &paint);
    overlay(f, area, app, &paint);
}

/// The run's state in words: `running`, `accepted (exit 0)`, `waits for a person (exit 4)`, …
pub(super) fn state_line(b: &Board) -> String {
    if let Some(Liveness::Interrupted { reason, hint, .. }) = &b.liveness {
        return format!("interrupted: {reason}; {hint}");
    }
    if let Some(end) = &b.end {
        if end.outcome == "human" {
            return format!("waits for a person (exit {})", end.exit_code);
        }
        return format!("{} (exit {})", end.outcome, end.exit_code);
    }
    if let Some(stopped) = &b.stopped {
        return format!("stopped: {stopped}");
    }
    match &b.liveness {
        Some(Liveness::Unknown { reason, .. }) => format!("unknown: {reason}"),
        _ => "running".into(),
    }
}

fn header(f: &mut Frame<'_>, area: Rect, app: &App, paint: &Paint, now: i64) {
    let b = &app.board;
    let [first, second, third] = Layout::vertical([Constraint::Length(1); 3]).areas(area);
    if b.run.is_empty() {
        let waiting = match app.read_only() {
            Some(_) => "mvk watch · no event in the file yet".to_string(),
            None => "mvk watch · no run in this repository yet: waiting for one to start (`mvk apply FILE`)".to_string(),
        };
        f.render_widget(Paragraph::new(waiting).style(paint.bold()), first);
        f.render_widget(
            Paragraph::new(app.source_note(now)).style(paint.dim()),
            second,
        );
        return;
    }
    let state = state_line(b);
    let over = b.end.as_ref();
    let state_style = match over {
        Some(e) if e.exit_code == 0 => paint.fg(Color::Green),
        Some(e) if e.outcome == "human" => paint.fg(Color::Yellow),
        Some(_) => paint.fg(Color::Red),
        None if matches!(b.liveness, Some(Liveness::Interrupted { .. })) => paint.fg(Color::Red),
        None => paint.fg(Color::Cyan),
    }
    .add_modifier(Modifier::BOLD);
    let title = format!("{} · run {} · ", b.program, b.run);
    f.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(title, paint.bold()),
            Span::styled(state, state_style),
        ])),
        first,
    );
    let elapsed = b.started_ms.map(|s| {
        let end = b.end.as_ref().and_then(|e| e.at_ms).unwrap_or(now);
        human_duration(end - s)
    });
    // A replay says so first; the ledger is said last.
    let mut totals = Vec::new();
    if app.read_only().is_some() {
        totals.push(app.source_note(now));
    }
    totals.push(b.file.clone());
    if let Some(e) = elapsed {
        totals.push(e);
    }
    totals.push(format!(
        "{} attempt{}",
        b.spent.attempts,
        if b.spent.attempts == 1 { "" } else { "s" }
    ));
    totals.push(format!("{} tokens", short(b.spent.tokens)));
    totals.push(usd(b.spent.usd_micros));
    if let Some(e) = &b.executor {
        totals.push(format!("executor {e}"));
    }
    if app.read_only().is_none() {
        totals.push(app.source_note(now));
    }
    f.render_widget(Paragraph::new(totals.join(" · ")), second);
    f.render_widget(Paragraph::new(dag_line(b, paint, third.width)), third);
}

/// `flow 1/3 done [██░░░░] · 1 running · 1 waiting │ 1 ✓ › 2 ●◌ › 3 ·`.
fn dag_line(b: &Board, paint: &Paint, width: u16) -> Line<'static> {
    let total = b.tasks.len();
    let done = b.tasks.iter().filter(|t| good(&t.state)).count();
    let running = b
        .tasks
        .iter()
        .filter(|t| t.state == TaskState::Running && t.checkpoint.is_none())
        .count();
    let waiting = b
        .tasks
        .iter()
        .filter(|t| t.state == TaskState::Waiting)
        .count();
    let person = b
        .tasks
        .iter()
        .filter(|t| t.checkpoint.is_some() || t.state == TaskState::Done("human".into()))
        .count();
    let failed = b
        .tasks
        .iter()
        .filter(|t| matches!(&t.state, TaskState::Done(o) if o != "accepted" && o != "human"))
        .count();
    let cells = 10usize;
    let filled = (done * cells).checked_div(total).unwrap_or(0);
    let bar = format!("[{}{}]", "█".repeat(filled), "░".repeat(cells - filled));
    let mut spans = vec![
        Span::styled(format!("DAG {done}/{total} accepted "), paint.bold()),
        Span::styled(bar, paint.fg(Color::Green)),
    ];
    let mut counts = Vec::new();
    for (n, what) in [
        (running, "running"),
        (waiting, "waiting"),
        (person, "for a person"),
        (failed, "not accepted"),
    ] {
        if n > 0 {
            counts.push(format!("{n} {what}"));
        }
    }
    if !counts.is_empty() {
        spans.push(Span::raw(format!(" {}", counts.join(" · "))));
    }
    let levels = b.levels();
    if levels.len() > 1 {
        spans.push(Span::styled(" │ ", paint.dim()));
        for (i, level) in levels.iter().enumerate() {
            if i > 0 {
                spans.push(Span::styled(" › ", paint.dim()));
            }
            spans.push(Span::raw(format!("{} ", i + 1)));
            for &t in level {
                let task = &b.tasks[t];
                spans.push(Span::styled(mark(task), paint.state(&task.state)));
            }
        }
    }
    let _ = width;
    Line::from(spans)
}

fn task_table(f: &mut Frame<'_>, area: Rect, app: &App, paint: &Paint, now: i64) {
    let b = &app.board;
    let until = clock_end(b, now);
    let header = Row::new([
        "", "TASK", "STATE", "STEP", "ATT", "RUNG", "AGENT", "TIME", "SPENT",
    ])
    .style(paint.bold());
    let rows = b.tasks.iter().map(|t| {
        let attempts = match (t.attempt, t.limits.iterations) {
            (Some(a), Some(l)) => format!("{a}/{l}"),
            (Some(a), None) => a.to_string(),
            (None, _) => "-".into(),
        };
        let step = match (&t.checkpoint, &t.step) {
            (Some(c), _) => format!("answer {}", c.kind),
            (None, Some((s, _))) if t.state == TaskState::Running => s.clone(),
            _ => String::new(),
        };
        let time = task_time(t, until).map(human_duration).unwrap_or_default();
        let spent = match t.limits.usd_micros {
            Some(l) => format!("{}/{}", usd(t.spent.usd_micros), usd(l)),
            None if t.spent.tokens > 0 || t.spent.usd_micros > 0 => {
                format!("{} {}tok", usd(t.spent.usd_micros), short(t.spent.tokens))
            }
            None => String::new(),
        };
        Row::new(vec![
            Span::styled(mark(t), paint.state(&t.state)),
            Span::raw(t.name.clone()),
            Span::styled(state_name(t).to_string(), paint.state(&t.state)),
            Span::raw(step),
            Span::raw(attempts),
            Span::raw(t.rung.map(|r| r.to_string()).unwrap_or_default()),
            Span::raw(t.agent.clone().unwrap_or_default()),
            Span::raw(time),
            Span::raw(spent),
        ])
    });
    let widths = [
        Constraint::Length(1),
        Constraint::Min(8),
        Constraint::Length(9),
        Constraint::Length(12),
        Constraint::Length(5),
        Constraint::Length(4),
        Constraint::Length(10),
        Constraint::Length(9),
        Constraint::Length(13),
    ];
    let selected = Style::default().add_modifier(Modifier::REVERSED);
    let table = Table::new(rows, widths)
        .header(header)
        .block(Block::bordered().title(format!(" tasks ({}) ", b.tasks.len())))
        .row_highlight_style(selected)
        .column_spacing(1);
    let mut state =
        TableState::default().with_selected((!b.tasks.is_empty()).then_some(app.selected));
    f.render_stateful_widget(table, area, &mut state);
}

/// Where the clocks stop: the run's end (or pause), else now.
fn clock_end(b: &Board, now: i64) -> i64 {
    b.end.as_ref().and_then(|e| e.at_ms).unwrap_or(now)
}

/// How long a task has run (or ran) by NOW: its wall time, a resume's earlier part included.
fn task_time(t: &TaskBoard, now: i64) -> Option<i64> {
    let start = t.started_ms?;
    let end = t.ended_ms.unwrap_or(now);
    Some(end - start + i64::try_from(t.before_ms).unwrap_or(0))
}

fn task_detail(f: &mut Frame<'_>, area: Rect, app: &App, paint: &Paint, now: i64) {
    let Some(t) = app.task() else {
        f.render_widget(Block::bordered().title(" task "), area);
        return;
    };
    let b = &app.board;
    let mut lines: Vec<Line<'static>> = Vec::new();
    // What it is doing, and for how long.
    let mut doing = vec![format!("{} {}", mark(t), state_name(t))];
    if let Some(a) = t.attempt {
        doing.push(format!(
            "attempt {a}, rung {} ({})",
            t.rung.unwrap_or(1),
            t.agent.as_deref().unwrap_or("?")
        ));
    }
    if let Some(w) = &t.worker {
        doing.push(format!("on worker {w}"));
    }
    if let (Some((step, since)), TaskState::Running) = (&t.step, &t.state) {
        doing.push(format!(
            "{step} for {}",
            human_duration(clock_end(b, now) - since)
        ));
    }
    if let Some(m) = &t.merged {
        doing.push(format!("merged {}", m.get(..10).unwrap_or(m)));
    }
    lines.push(Line::from(Span::styled(
        doing.join(" · "),
        paint.state(&t.state),
    )));
    // Its budget.
    let of = |v: String, l: Option<String>| match l {
        Some(l) => format!("{v}/{l}"),
        None => v,
    };
    let wall = task_time(t, clock_end(b, now))
        .map(human_duration)
        .unwrap_or_else(|| "0 ms".into());
    lines.push(Line::from(format!(
        "budget: {} attempts · {} tokens · {} · wall {}",
        of(
            t.spent.attempts.to_string(),
            t.limits.iterations.map(|i| i.to_string())
        ),
        of(short(t.spent.tokens), t.limits.tokens.map(short)),
        of(usd(t.spent.usd_micros), t.limits.usd_micros.map(usd)),
        of(
            wall,
            t.limits
                .wall_ms
                .map(|w| human_duration(i64::try_from(w).unwrap_or(i64::MAX)))
        ),
    )));
    // Where it stands in the DAG and who waits for what.
    if !t.after.is_empty() {
        let after: Vec<String> = t
            .after
            .iter()
            .map(|d| {
                let m = b.tasks.iter().find(|x| &x.name == d).map_or("·", mark);
                format!("{m} {d}")
            })
            .collect();
        lines.push(Line::from(format!("after: {}", after.join(", "))));
    }
    if let Some(w) = &t.waiting {
        lines.push(Line::from(Span::styled(
            format!("waits for {w}"),
            paint.fg(Color::Yellow),
        )));
    } else if let Some(w) = &b.waiting
        && t.state == TaskState::Running
    {
        lines.push(Line::from(Span::styled(
            format!("waits for {w}"),
            paint.fg(Color::Yellow),
        )));
    }
    if let Some(c) = &t.checkpoint {
        let keys = match (app.read_only(), c.answerable) {
            (Some(_), _) => "read-only here".to_string(),
            (None, true) => "a approve · r reject".to_string(),
            (None, false) => "answerable once the run pauses".to_string(),
        };
        lines.push(Line::from(Span::styled(
            format!(
                "waits for a person: {} checkpoint, attempt {} · {keys}",
                c.kind, c.attempt
            ),
            paint.fg(Color::Yellow).add_modifier(Modifier::BOLD),
        )));
        lines.push(Line::from(c.question.clone()));
    } else if let Some(h) = &t.handoff
        && t.state == TaskState::Done("human".into())
    {
        lines.push(Line::from(format!("waits for a person: read {h}")));
    }
    if let Some(fail) = &t.failure {
        lines.push(Line::from(vec![
            Span::styled("last failure: ", paint.fg(Color::Red)),
            Span::raw(format!(
                "attempt {} ({}): {} · f shows it",
                fail.attempt, fail.by, fail.criterion
            )),
        ]));
    }
    if let Some(r) = &t.reason
        && matches!(t.state, TaskState::Done(_))
    {
        lines.push(Line::from(format!("why: {r}")));
    }
    let block = Block::bordered().title(format!(" {} ", t.name));
    f.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        area,
    );
}

fn event_list(f: &mut Frame<'_>, area: Rect, b: &Board, paint: &Paint) {
    let room = usize::from(area.height.saturating_sub(2));
    let from = b.events.len().saturating_sub(room);
    let lines: Vec<Line<'static>> = b
        .events
        .iter()
        .skip(from)
        .map(|e| {
            let text = printable(&crate::cli::log::line(e));
            let style = if e.event.ends_with(".failed") || e.event.contains("breached") {
                paint.fg(Color::Red)
            } else if e.event == "task.finished" || e.event == "merge.done" {
                paint.fg(Color::Green)
            } else {
                Style::default()
            };
            Line::from(Span::styled(text, style))
        })
        .collect();
    let block = Block::bordered().title(" events (e: all) ");
    f.render_widget(Paragraph::new(lines).block(block), area);
}

fn footer(f: &mut Frame<'_>, area: Rect, app: &App, paint: &Paint) {
    let line = if let Some(m) = &app.message {
        let style = if m.error { paint.error() } else { paint.bold() };
        Line::from(Span::styled(printable(&m.text), style))
    } else if let Some(t) = &app.trouble {
        Line::from(Span::styled(
            format!("cannot read the run (trying again): {t}"),
            paint.error(),
        ))
    } else {
        let mut keys = String::new();
        if app.board.over() && !app.board.run.is_empty() {
            keys.push_str("the run is over · ");
        }
        keys.push_str("q quit · ↑↓ task · l log · f failure · e events");
        if app.board.tasks.iter().any(|t| t.checkpoint.is_some()) && app.read_only().is_none() {
            keys.push_str(" · a approve · r reject");
        }
        keys.push_str(" · ? keys");
        Line::from(Span::styled(keys, paint.dim()))
    };
    f.render_widget(Paragraph::new(line).wrap(Wrap { trim: false }), area);
}

/// The pane, question or reason drawn over the board.
fn overlay(f: &mut Frame<'_>, area: Rect, app: &mut App, paint: &Paint) {
    match &mut app.overlay {
        Overlay::None => {}
        Overlay::Pane(pane) => {
            let inner_h = usize::from(area.height.saturating_sub(3));
            let last_top = pane.lines.len().saturating_sub(inner_h);
            if pane.follow || pane.top > last_top {
                pane.top = last_top;
            }
            if pane.top == last_top && !pane.lines.is_empty() {
                pane.follow = true;
            }
            let [body, keys] =
                Layout::vertical([Constraint::Min(3), Constraint::Length(1)]).areas(area);
            let shown: Vec<Line<'static>> = pane
                .lines
                .iter()
                .skip(pane.top)
                .take(inner_h)
                .map(|l| Line::from(l.clone()))
                .collect();
            let title = format!(
                " {} ({}-{} of {}) ",
                pane.title,
                (pane.top + 1).min(pane.lines.len()),
                (pane.top + inner_h).min(pane.lines.len()),
                pane.lines.len()
            );
            f.render_widget(Clear, area);
            f.render_widget(
                Paragraph::new(shown).block(Block::bordered().title(title)),
                body,
            );
            let mut help = String::from("q close · ↑↓ PgUp PgDn g G scroll");
            if pane.is_log() {
                help.push_str(" · Tab stdout/stderr");
            }
            f.render_widget(Paragraph::new(Span::styled(help, paint.dim())), keys);
        }
        Overlay::Confirm {
            task,
            checkpoint,
            reason,
        } => {
            let (what, then) = match reason {
                None => (
                    "Approve",
                    if checkpoint.kind == "review"
                        || checkpoint.kind == "step"
                        || checkpoint.kind == "batch"
                    {
                        "It lands the attempt (its gates run again on what lands)."
                    } else {
                        "The attempt's branch is judged as it is now."
                    },
                ),
                Some(_) => ("Reject", "The reason goes into the next attempt's prompt."),
            };
            let mut lines = vec![
                Line::from(Span::styled(
                    format!(
                        "{what} attempt {} of task `{task}` ({} checkpoint)?",
                        checkpoint.attempt, checkpoint.kind
                    ),
                    paint.bold(),
                )),
                Line::from(then),
            ];
            if let Some(r) = reason {
                lines.push(Line::from(format!("reason: {}", printable(r))));
            }
            lines.push(Line::from(
                "The run then goes on (`mvk resume`), followed here.",
            ));
            lines.push(Line::from(""));
            lines.push(Line::from(Span::styled(
                "y: yes · any other key: no",
                paint.bold(),
            )));
            dialog(f, area, " answer the checkpoint ", lines);
        }
        Overlay::Reason {
            task,
            checkpoint,
            text,
        } => {
            let lines = vec![
                Line::from(Span::styled(
                    format!(
                        "Reject attempt {} of task `{task}` ({} checkpoint): why?",
                        checkpoint.attempt, checkpoint.kind
                    ),
                    paint.bold(),
                )),
                Line::from("It goes into the next attempt's prompt."),
                Line::from(""),
                Line::from(format!("> {}█", printable(text))),
                Line::from(""),
                Line::from(Span::styled("Enter: on · Esc: leave it", paint.dim())),
            ];
            dialog(f, area, " reject ", lines);
        }
    }
}

/// A box in the middle of AREA with LINES.
fn dialog(f: &mut Frame<'_>, area: Rect, title: &str, lines: Vec<Line<'static>>) {
    let width = area.width.saturating_sub(8).min(72);
    let height = u16::try_from(lines.len())
        .unwrap_or(u16::MAX)
        .saturating_add(4)
        .min(area.height);
    let x = area.x + (area.width - width) / 2;
    let y = area.y + (area.height - height) / 2;
    let rect = Rect::new(x, y, width, height);
    f.render_widget(Clear, rect);
    f.render_widget(
        Paragraph::new(lines)
            .block(Block::bordered().title(title.to_string()))
            .wrap(Wrap { trim: false }),
        rect,
    );
}

/// The keys, for the `?` pane.
pub(super) fn help() -> Vec<String> {
    [
        "mvk watch reads a run and never slows it; it writes only an answer.",
        "",
        "  ↑ ↓  k j   select a task (g G: the first, the last)",
        "  l  Enter   the task's agent log (latest attempt), followed as it grows;",
        "             Tab: its stdout or its stderr",
        "  f          the task's last failure, whole: criterion, counts, output",
        "  e          the latest events",
        "  a          approve the checkpoint where the task waits (asks first)",
        "  r          reject it: type the reason for the next attempt, Enter, y",
        "  q  Esc     close a pane; on the board, leave (the run goes on)",
        "  Ctrl-C     leave",
        "",
        "Marks: ✓ accepted  ● running  ◌ waiting to start  ? waits for a person",
        "       ✗ rejected, stuck, unknown or out of budget  - skipped  · pending",
        "",
        "An answer is recorded as `mvk approve` or `mvk reject` records it; the",
        "run goes on in a detached `mvk resume` (its output in the run's",
        "directory, .mvk/runs/RUN/resume-*.log), followed here.",
    ]
    .iter()
    .map(|l| (*l).to_string())
    .collect()
}

/// A failure, whole, for its pane.
pub(super) fn failure_lines(fail: &FailureSeen) -> Vec<String> {
    let mut out = vec![format!("attempt {} failed: {}", fail.attempt, fail.by)];
    out.push(format!("criterion: {}", fail.criterion));
    let Some(w) = &fail.whole else {
        out.push(String::new());
        out.push("(the ledger holds this much; `mvk report RUN --html` has the rest)".into());
        return out;
    };
    if let Some(code) = w.exit_code {
        out.push(format!("exit code: {code}"));
    }
    if let Some(c) = w.counts {
        out.push(format!(
            "tests: {} executed, {} passed, {} failed, {} skipped",
            c.executed, c.passed, c.failed, c.skipped
        ));
    }
    for b in &w.breaches {
        out.push(format!("seal breached: {b}"));
    }
    for b in &w.blockers {
        out.push(format!("blocker: {}", b.line()));
    }
    out.push(format!(
        "signature: {} (the same signature again and again is the brake)",
        w.signature
    ));
    if !w.tail.trim().is_empty() {
        out.push(String::new());
        out.push("output (its end):".into());
        out.extend(printable_lines(&w.tail));
    }
    out
}

/// TEXT's lines, made safe to draw: escape sequences stripped, tabs expanded, other control
/// characters shown as `�` (an agent's output must not move the cursor or retitle the
/// terminal).
pub(super) fn printable_lines(text: &str) -> Vec<String> {
    crate::run::judge::ansi::strip(text)
        .lines()
        .map(printable)
        .collect()
}

/// One line made safe to draw (see [`printable_lines`]).
fn printable(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for c in line.chars() {
        match c {
            '\t' => out.push_str("    "),
            c if c.is_control() => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// `950`, `12.3k`, `4.5M`.
fn short(n: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "a count shown to one decimal")]
    let f = n as f64;
    if n < 1000 {
        n.to_string()
    } else if n < 1_000_000 {
        format!("{:.1}k", f / 1000.0)
    } else {
        format!("{:.1}M", f / 1_000_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agents_output_cannot_reach_the_terminal_as_control_codes() {
        let lines = printable_lines("ok\x1b[31mred\x1b[0m\ttab\x07bell\x1b]0;title\x07\r");
        assert_eq!(lines, ["okred    tab\u{FFFD}bell\u{FFFD}"]);
    }

    #[test]
    fn counts_read_short() {
        assert_eq!(short(950), "950");
        assert_eq!(short(12_345), "12.3k");
        assert_eq!(short(4_500_000), "4.5M");
    }
}
