//! A run's events in; what a person watching it sees out. The run id goes to standard output
//! the moment it exists; the rest to standard error. On a terminal, a live view of each
//! running task (its attempt, rung and agent, the step it is in and for how long, its budget
//! spent against its limits, and the log of the step with that log's last line) redrawn in
//! place above one plain line per finished step. Off a terminal, the same lines, and while a
//! step goes on for long a heartbeat line every [`HEARTBEAT_EVERY`] (`MVK_PROGRESS_EVERY`). A
//! gate that does not pass shows the last lines of its log. `--quiet` shows none of it;
//! `--verbose` shows every event with its details.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar};

use super::printer::{Printer, err_line};
use crate::ir::{Budget, Program};
use crate::run::driver::Observer;
use crate::run::event::Event;
use crate::run::trail::Line;

/// How often, off a terminal, a step that goes on says so, unless `MVK_PROGRESS_EVERY` says
/// otherwise.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(30);
/// How often the live view is redrawn (its spinner, elapsed times, the logs' last lines).
const LIVE_TICK: Duration = Duration::from_millis(125);
/// The bytes of a log read for its last line: enough for any line a person reads, cheap to
/// read eight times a second.
const LAST_LINE_BYTES: u64 = 4 * 1024;
/// The lines of a failing gate's log shown on the console; the log holds the rest.
const GATE_TAIL_LINES: usize = 10;
/// A failing gate's log is read this far back for those lines.
const GATE_TAIL_BYTES: u64 = 16 * 1024;
/// A line of a gate's log longer than this is cut: the log holds it whole.
const TAIL_LINE_CHARS: usize = 400;

/// Shows a run's events (see the module's doc); the commands that run a loop make one and
/// hand it to the driver as its [`Observer`].
pub(crate) struct Progress {
    shared: Arc<Shared>,
    ticker: Mutex<Option<Ticker>>,
    /// The terminal's settings before the live view turned off the echo of control characters.
    echo: Mutex<Option<rustix::termios::Termios>>,
}

/// Turns off the terminal's echo of control characters (`^C`) while the live view is drawn:
/// the echo moves the cursor under indicatif's feet, and Ctrl-C left a stale line with its
/// spinner above the run's last words. The settings before, to put back.
fn quiet_control_echo() -> Option<rustix::termios::Termios> {
    use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
    let stderr = std::io::stderr();
    let before = tcgetattr(&stderr).ok()?;
    if !before.local_modes.contains(LocalModes::ECHOCTL) {
        return None;
    }
    let mut quiet = before.clone();
    quiet.local_modes.remove(LocalModes::ECHOCTL);
    tcsetattr(&stderr, OptionalActions::Now, &quiet).ok()?;
    Some(before)
}

/// The thread that redraws the live view, or writes heartbeats off a terminal.
struct Ticker {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

struct Shared {
    quiet: bool,
    verbose: bool,
    json: bool,
    /// The live view, on a terminal only.
    live: Option<MultiProgress>,
    /// Off a terminal: how long a task goes without a line before a heartbeat says where it is.
    every: Duration,
    /// The program's tasks by name: their limits and gates.
    plans: BTreeMap<String, Plan>,
    /// The repository whose `.mvk/runs/` holds the attempts' logs, when this process writes
    /// them (a Temporal run's attempts write theirs on the workers).
    files: Option<PathBuf>,
    /// Paths are shown relative to here when they are under it.
    cwd: Option<PathBuf>,
    state: Mutex<State>,
}

/// What the program says about a task that the view shows.
struct Plan {
    budget: Budget,
    gates: Vec<String>,
    rungs: usize,
}

#[derive(Default)]
struct State {
    printed_id: bool,
    run: String,
    /// The tasks that have started and not ended, by name.
    tasks: BTreeMap<String, Running>,
    /// What each task spent before this process took the run over (a resume).
    spent_before: BTreeMap<String, (u64, f64)>,
}

/// A task that is running: where it stands and what it spent.
struct Running {
    attempt: Option<u32>,
    rung: Option<u32>,
    agent: Option<String>,
    step: Step,
    /// When the step began.
    since: Instant,
    /// When the task started (in this process): its wall budget's clock.
    started: Instant,
    /// When a line about the task was last written: a heartbeat comes `every` after.
    said: Instant,
    tokens: u64,
    usd: f64,
    /// The agent is waiting out a rate limit until then.
    rate_limited: Option<Instant>,
    /// Its line in the live view.
    bar: Option<ProgressBar>,
    /// The last line of the step's log, and the log's length when it was read.
    last: Option<(PathBuf, u64, String)>,
}

/// The step a task is in.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Starting,
    Prompt,
    Agent,
    Seal,
    /// The gate, by its index in the task's gates.
    Gate(usize),
    Review(String),
    Landing(String),
    Person,
    /// Between one step and the next: deciding, waiting for the landing turn.
    Between,
}

impl Progress {
    /// Shows the events of a run of `program`, whose attempts write their logs under
    /// `files/.mvk/runs/` (`None`: elsewhere, on Temporal workers).
    pub(crate) fn new(
        printer: &Printer,
        json: bool,
        program: &Program,
        files: Option<&Path>,
    ) -> Progress {
        let quiet = printer.quiet();
        let live = (!quiet && std::io::stderr().is_terminal())
            .then(MultiProgress::new)
            // indicatif hides a terminal it cannot draw on, and then prints nothing at all.
            .filter(|m| !m.is_hidden());
        let plans = program
            .tasks
            .iter()
            .map(|t| {
                let plan = Plan {
                    budget: t.budget.clone(),
                    gates: t.gates.iter().map(|g| g.name.clone()).collect(),
                    rungs: t.ladder.len(),
                };
                (t.name.clone(), plan)
            })
            .collect();
        let shared = Arc::new(Shared {
            quiet,
            verbose: printer.verbose(),
            json,
            live,
            every: heartbeat_every(),
            plans,
            files: files.map(Path::to_path_buf),
            cwd: std::env::current_dir().ok(),
            state: Mutex::new(State::default()),
        });
        let ticker = (!quiet).then(|| Ticker::start(&shared)).flatten();
        let echo = shared.live.as_ref().and_then(|_| quiet_control_echo());
        Progress {
            shared,
            ticker: Mutex::new(ticker),
            echo: Mutex::new(echo),
        }
    }

    /// What each task spent before this process took the run over, by task name: tokens and
    /// dollars (a resume's budgets count them).
    pub(crate) fn spent_before(&self, spent: BTreeMap<String, (u64, f64)>) {
        self.shared.state().spent_before = spent;
    }

    /// Stops the live view and clears it from the terminal, so that what is printed next (the
    /// summary, an error) starts on a clean line.
    pub(crate) fn finish(&self) {
        let ticker = self
            .ticker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(t) = ticker {
            let _ = t.stop.send(());
            let _ = t.thread.join();
        }
        let mut state = self.shared.state();
        for (_, task) in std::mem::take(&mut state.tasks) {
            self.shared.drop_bar(task.bar);
        }
        if let Some(live) = &self.shared.live {
            let _ = live.clear();
        }
        let before = self
            .echo
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(before) = before {
            let _ = rustix::termios::tcsetattr(
                std::io::stderr(),
                rustix::termios::OptionalActions::Now,
                &before,
            );
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Ticker {
    /// Starts the thread: on a terminal it redraws the live view; off one it writes heartbeats.
    fn start(shared: &Arc<Shared>) -> Option<Ticker> {
        let (stop, stopped) = mpsc::channel::<()>();
        let tick = if shared.live.is_some() {
            LIVE_TICK
        } else {
            (shared.every / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
        };
        let shared = Arc::clone(shared);
        let thread = std::thread::Builder::new()
            .name("mvk-progress".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(tick) {
                    if shared.live.is_some() {
                        shared.redraw();
                    } else {
                        shared.heartbeats();
                    }
                }
            })
            // Without the thread the run goes on; only the live updates are missing.
            .ok()?;
        Some(Ticker { stop, thread })
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A line on standard error, above the live view when there is one. Made plain text
    /// first: what it quotes (a file name an agent chose, a reviewer's words) must not move the
    /// cursor or retitle the terminal.
    fn line(&self, text: &str) {
        let text = plain(text);
        match &self.live {
            Some(live) => {
                let _ = live.println(&text);
            }
            None => err_line(&text),
        }
    }

    fn drop_bar(&self, bar: Option<ProgressBar>) {
        if let (Some(live), Some(bar)) = (&self.live, bar) {
            bar.finish_and_clear();
            live.remove(&bar);
        }
    }

    /// The log of the step `task` is in, if it has one this process can read.
    fn log_of(&self, run: &str, name: &str, task: &Running) -> Option<PathBuf> {
        let files = self.files.as_ref()?;
        let attempt = task.attempt?;
        let dir = crate::run::attempt::attempt_dir(
            &files.join(".mvk").join("runs").join(run),
            name,
            attempt,
        );
        match &task.step {
            Step::Agent => Some(dir.join("agent.out")),
            Step::Gate(i) => {
                let gate = self.plans.get(name)?.gates.get(*i)?;
                Some(dir.join(format!("gate-{}.log", crate::slug::slug(gate))))
            }
            Step::Review(_) => Some(
                dir.join("review")
                    .join(format!("{}.out", crate::run::attempt::review::LOG_NAME)),
            ),
            _ => None,
        }
    }

    /// `path` as a person at the terminal would type it: relative when it is under the
    /// working directory.
    fn shown(&self, path: &Path) -> String {
        self.cwd
            .as_ref()
            .and_then(|cwd| path.strip_prefix(cwd).ok())
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// What `task` is doing and for how long: `agent bot running 12s`.
    fn doing(&self, name: &str, task: &Running, now: Instant) -> String {
        let elapsed = whole_seconds(now.saturating_duration_since(task.since));
        let agent = task.agent.as_deref().unwrap_or("?");
        match &task.step {
            Step::Starting => format!("starting {elapsed}"),
            Step::Prompt => format!("building the prompt {elapsed}"),
            Step::Agent => match task.rate_limited {
                Some(until) if until > now => format!(
                    "agent {agent} rate-limited, trying again in {} ({elapsed})",
                    whole_seconds(until - now)
                ),
                _ => format!("agent {agent} running {elapsed}"),
            },
            Step::Seal => format!("checking the seal {elapsed}"),
            Step::Gate(i) => {
                let gate = self
                    .plans
                    .get(name)
                    .and_then(|p| p.gates.get(*i))
                    .map_or("?", String::as_str);
                format!("gate {gate} running {elapsed}")
            }
            Step::Review(reviewer) => format!("reviewer {reviewer} running {elapsed}"),
            Step::Landing(into) => format!("landing on {into} {elapsed}"),
            Step::Person => format!("waiting for a person {elapsed}"),
            Step::Between => format!("between steps {elapsed}"),
        }
    }

    /// The rung and the budget spent against its limits: `rung 1/2, attempt 1/5, 1.2k/100k
    /// tokens, $0.10/$1.00, 14s/30m wall`.
    fn budget(&self, name: &str, task: &Running, now: Instant) -> String {
        let mut parts = Vec::new();
        let plan = self.plans.get(name);
        if let Some(rung) = task.rung {
            parts.push(match plan.map(|p| p.rungs) {
                Some(n) if n > 0 => format!("rung {rung}/{n}"),
                _ => format!("rung {rung}"),
            });
        }
        let Some(plan) = plan else {
            return parts.join(", ");
        };
        let limits = &plan.budget;
        if let Some(a) = task.attempt {
            parts.push(format!("attempt {a}/{}", limits.iterations));
        }
        match limits.tokens {
            Some(limit) => parts.push(format!(
                "{}/{} tokens",
                short_count(task.tokens),
                short_count(limit)
            )),
            None if task.tokens > 0 => parts.push(format!("{} tokens", short_count(task.tokens))),
            None => {}
        }
        let usd = crate::plan::format_usd((task.usd * 1e6).round() as u64);
        match limits.usd_micros {
            Some(limit) => parts.push(format!("{usd}/{}", crate::plan::format_usd(limit))),
            None if task.usd > 0.0 => parts.push(usd),
            None => {}
        }
        if let Some(wall) = limits.wall {
            parts.push(format!(
                "{}/{} wall",
                whole_seconds(now.saturating_duration_since(task.started)),
                crate::plan::format_duration(wall)
            ));
        }
        parts.join(", ")
    }

    /// Redraws each running task's entry in the live view.
    fn redraw(&self) {
        let width = terminal_width();
        // The logs are read without the lock, which the run's events wait for.
        let wanted: Vec<(String, PathBuf, Option<u64>)> = {
            let state = self.state();
            state
                .tasks
                .iter()
                .filter_map(|(name, t)| {
                    let log = self.log_of(&state.run, name, t)?;
                    let known = t
                        .last
                        .as_ref()
                        .filter(|(p, _, _)| *p == log)
                        .map(|(_, len, _)| *len);
                    Some((name.clone(), log, known))
                })
                .collect()
        };
        let read: Vec<(String, PathBuf, u64, Option<String>)> = wanted
            .into_iter()
            .filter_map(|(name, log, known)| {
                let len = std::fs::metadata(&log).map_or(0, |m| m.len());
                (known != Some(len)).then(|| {
                    let line = last_line(&log);
                    (name, log, len, line)
                })
            })
            .collect();
        let mut state = self.state();
        for (name, log, len, line) in read {
            if let Some(t) = state.tasks.get_mut(&name) {
                let keep = t.last.take().filter(|(p, _, _)| *p == log).map(|l| l.2);
                let line = line.or(keep).unwrap_or_default();
                t.last = Some((log, len, line));
            }
        }
        let now = Instant::now();
        let state = &*state;
        for (name, t) in &state.tasks {
            let Some(bar) = &t.bar else { continue };
            let who = who(name, t.attempt);
            // Room for the spinner and the space after it.
            let mut text = fit(
                &format!(
                    "{who}: {} · {}",
                    self.doing(name, t, now),
                    self.budget(name, t, now)
                ),
                width.saturating_sub(3),
            );
            if let Some(log) = self.log_of(&state.run, name, t) {
                let last = t
                    .last
                    .as_ref()
                    .filter(|(p, _, _)| *p == log)
                    .map(|(_, _, l)| l.as_str())
                    .filter(|l| !l.is_empty());
                let second = match last {
                    Some(l) => format!("  {}: {l}", self.shown(&log)),
                    None => format!("  {} (nothing yet)", self.shown(&log)),
                };
                text.push('\n');
                text.push_str(&fit(&second, width.saturating_sub(1)));
            }
            bar.set_message(text);
            bar.tick();
        }
    }

    /// Off a terminal: a line for each task that has said nothing for `every`.
    fn heartbeats(&self) {
        let now = Instant::now();
        let mut lines = Vec::new();
        let mut state = self.state();
        let state = &mut *state;
        for (name, t) in &mut state.tasks {
            if now.saturating_duration_since(t.said) < self.every {
                continue;
            }
            t.said = now;
            let mut line = format!("{}: {}", who(name, t.attempt), self.doing(name, t, now));
            let budget = self.budget(name, t, now);
            if !budget.is_empty() {
                line.push_str(&format!(" ({budget})"));
            }
            if let Some(log) = self.log_of(&state.run, name, t) {
                line.push_str(&format!(", log {}", self.shown(&log)));
            }
            lines.push(line);
        }
        for l in lines {
            err_line(&l);
        }
    }

    /// Moves the task an event is about to its next step.
    fn follow(&self, state: &mut State, e: &Line, event: &Event) {
        let now = Instant::now();
        let Some(name) = e.task.as_deref() else {
            if matches!(
                event,
                Event::RunFinished { .. } | Event::RunPaused { .. } | Event::RunStopped { .. }
            ) {
                for (_, t) in std::mem::take(&mut state.tasks) {
                    self.drop_bar(t.bar);
                }
            }
            return;
        };
        match event {
            Event::TaskFinished { .. } | Event::TaskSkipped { .. } => {
                if let Some(t) = state.tasks.remove(name) {
                    self.drop_bar(t.bar);
                }
                return;
            }
            // A task that waits has not started: it has no entry yet.
            Event::TaskWaiting { .. } => return,
            _ => {}
        }
        let spent = state.spent_before.get(name).copied().unwrap_or((0, 0.0));
        let task = state.tasks.entry(name.to_string()).or_insert_with(|| {
            let bar = self
                .live
                .as_ref()
                .map(|live| live.add(ProgressBar::new_spinner()));
            Running {
                attempt: None,
                rung: None,
                agent: None,
                step: Step::Starting,
                since: now,
                started: now,
                said: now,
                tokens: spent.0,
                usd: spent.1,
                rate_limited: None,
                bar,
                last: None,
            }
        });
        if e.attempt.is_some() {
            task.attempt = e.attempt;
        }
        let step = match event {
            Event::TaskStarted { .. } => {
                task.started = now;
                Some(Step::Starting)
            }
            Event::TaskResumed { elapsed_ms, .. } => {
                // The wall budget counts the time before the interruption too.
                let before = Duration::from_millis(elapsed_ms.unwrap_or(0));
                task.started = now.checked_sub(before).unwrap_or(now);
                Some(Step::Starting)
            }
            Event::AttemptStarted { rung, agent, .. } => {
                task.rung = Some(*rung);
                task.agent = Some(agent.clone());
                task.rate_limited = None;
                Some(Step::Prompt)
            }
            Event::PromptBuilt { .. } => Some(Step::Agent),
            Event::AgentRateLimited { wait_ms, .. } => {
                task.rate_limited = Some(now + Duration::from_millis(*wait_ms));
                None
            }
            Event::AgentFinished { tokens, usd, .. } => {
                task.tokens = task.tokens.saturating_add(*tokens);
                task.usd += usd.unwrap_or(0.0);
                Some(Step::Seal)
            }
            Event::SealPassed {} => Some(self.gate_after(name, None)),
            Event::GateFinished {
                gate,
                phase,
                verdict,
                ..
            } if phase == "gate" => Some(if verdict == "pass" {
                self.gate_after(name, Some(gate))
            } else {
                Step::Between
            }),
            Event::ReviewStarted { agent, .. } => Some(Step::Review(agent.clone())),
            Event::ReviewFinished { tokens, usd, .. } => {
                task.tokens = task.tokens.saturating_add(*tokens);
                task.usd += usd.unwrap_or(0.0);
                Some(Step::Between)
            }
            Event::MergeStarted { into, .. } => Some(Step::Landing(into.clone())),
            Event::CheckpointWaiting { .. } | Event::HumanHandoff { .. } => Some(Step::Person),
            Event::SealBreached { .. }
            | Event::AttemptPassed { .. }
            | Event::AttemptFailed { .. }
            | Event::AttemptAbandoned { .. }
            | Event::MergeDone { .. }
            | Event::MergeEmpty { .. }
            | Event::MergeFailed { .. }
            | Event::MergeConflict { .. }
            | Event::MergeBlocked { .. }
            | Event::RungClimbed { .. }
            | Event::CheckpointAnswered { .. } => Some(Step::Between),
            _ => None,
        };
        if let Some(step) = step
            && step != task.step
        {
            task.step = step;
            task.since = now;
        }
    }

    /// The step after the seal (`None`) or after gate `gate` passed: the next gate, if any.
    fn gate_after(&self, task: &str, gate: Option<&String>) -> Step {
        let Some(gates) = self.plans.get(task).map(|p| &p.gates) else {
            return Step::Between;
        };
        let next = match gate {
            None => 0,
            Some(g) => match gates.iter().position(|n| n == g) {
                Some(i) => i + 1,
                None => return Step::Between,
            },
        };
        if next < gates.len() {
            Step::Gate(next)
        } else {
            Step::Between
        }
    }

    /// The last lines of the log of a gate that did not pass, ending with the log's path.
    fn gate_tail(&self, log: &str) -> Vec<String> {
        let path = Path::new(log);
        let Some(text) = tail_untrusted(path, GATE_TAIL_BYTES) else {
            return Vec::new();
        };
        let mut lines: Vec<String> = last_lines(&text, GATE_TAIL_LINES)
            .into_iter()
            .map(|l| format!("  │ {}", cut(&l, TAIL_LINE_CHARS)))
            .collect();
        lines.push(format!("  └ {}", self.shown(path)));
        lines
    }
}

impl Observer for Progress {
    fn event(&self, e: &Line) {
        let shared = &*self.shared;
        let event = Event::read(&e.event, &e.detail);
        let mut state = shared.state();
        state.run.clone_from(&e.run);
        if (e.event == "run.started" || e.event == "run.resumed")
            && !shared.json
            && !state.printed_id
        {
            let print = || {
                // Not `println!`: it panics when standard output is a closed pipe.
                let _ = writeln!(std::io::stdout().lock(), "{}", e.run);
            };
            // The live view steps aside, so that the id starts a clean line of its own.
            match &shared.live {
                Some(live) => live.suspend(print),
                None => print(),
            }
            state.printed_id = true;
        }
        if let Some(event) = &event {
            shared.follow(&mut state, e, event);
        }
        if shared.quiet {
            return;
        }
        let who = match (&e.task, e.attempt) {
            (Some(t), a) => who(t, a),
            _ => "run".to_string(),
        };
        // `task.finished`, `task.stuck` and `run.finished` repeat what the summary says.
        let shown = !matches!(
            e.event.as_str(),
            "task.finished" | "task.stuck" | "run.finished"
        );
        let described = crate::report::event_text::describe(&e.event, &e.detail);
        let text = if shared.verbose {
            Some(verbose_line(e, described.as_deref(), &who))
        } else {
            described.filter(|_| shown).map(|t| match e.event.as_str() {
                "run.started" | "run.resumed" => format!("run {}: {t}", e.run),
                _ => format!("{who}: {t}"),
            })
        };
        let mut lines: Vec<String> = text.into_iter().collect();
        // Why a gate failed, on the console: the end of its log.
        if let Some(Event::GateFinished { verdict, log, .. }) = &event
            && verdict != "pass"
            && !log.is_empty()
        {
            lines.extend(shared.gate_tail(log));
        }
        if lines.is_empty() {
            return;
        }
        if let Some(t) = e.task.as_deref().and_then(|t| state.tasks.get_mut(t)) {
            t.said = Instant::now();
        }
        for l in &lines {
            shared.line(l);
        }
    }
}

/// Who an event is about: `task #attempt`, or the task alone.
fn who(task: &str, attempt: Option<u32>) -> String {
    match attempt {
        Some(a) => format!("{task} #{a}"),
        None => task.to_string(),
    }
}

/// An event as `--verbose` shows it: who, the event's name, its description, and its details.
fn verbose_line(e: &Line, described: Option<&str>, who: &str) -> String {
    let who = if who == "run" {
        format!("run {}", e.run)
    } else {
        who.to_string()
    };
    let mut line = format!("{who}: [{}]", e.event);
    if let Some(text) = described {
        line.push(' ');
        line.push_str(text);
    }
    let empty = e.detail.as_object().is_some_and(serde_json::Map::is_empty);
    if !e.detail.is_null() && !empty {
        line.push_str(&format!(" {}", e.detail));
    }
    line
}

/// The heartbeat's period off a terminal: `MVK_PROGRESS_EVERY` (`30s`, `1s`, `500ms`, or
/// seconds), else [`HEARTBEAT_EVERY`].
fn heartbeat_every() -> Duration {
    std::env::var(crate::env::MVK_PROGRESS_EVERY)
        .ok()
        .and_then(|v| parse_every(&v))
        .unwrap_or(HEARTBEAT_EVERY)
}

fn parse_every(text: &str) -> Option<Duration> {
    let text = text.trim();
    let every = match text.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => humantime::parse_duration(text).ok()?,
    };
    // Zero would be a line at every tick.
    (!every.is_zero()).then_some(every)
}

/// The terminal's width in columns (standard error's), else `COLUMNS`, else 80.
fn terminal_width() -> usize {
    console::Term::stderr()
        .size_checked()
        .map(|(_, cols)| usize::from(cols))
        .or_else(|| {
            std::env::var(crate::env::COLUMNS)
                .ok()
                .and_then(|c| c.parse().ok())
        })
        .filter(|w| *w > 0)
        .unwrap_or(80)
}

/// `text` cut to `width` columns, with `…` where it was cut.
fn fit(text: &str, width: usize) -> String {
    console::truncate_str(text, width, "…").into_owned()
}

/// At most `max` characters of `text`, with `…` where it was cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// Whole seconds, as `12s` or `1m30s`.
fn whole_seconds(d: Duration) -> String {
    crate::plan::format_duration(Duration::from_secs(d.as_secs()))
}

/// A count as a person reads it at a glance: `950`, `1.2k`, `12k`, `3.4M`.
fn short_count(n: u64) -> String {
    if n < 1_000 {
        return n.to_string();
    }
    // 999,999 reads as `1M`, not `1000k`.
    let (unit, suffix) = if n < 999_500 {
        (1_000, "k")
    } else {
        (1_000_000, "M")
    };
    let tenths = n.saturating_mul(10).saturating_add(unit / 2) / unit;
    if tenths >= 100 {
        format!("{}{suffix}", n.saturating_add(unit / 2) / unit)
    } else if tenths.is_multiple_of(10) {
        format!("{}{suffix}", tenths / 10)
    } else {
        format!("{}.{}{suffix}", tenths / 10, tenths % 10)
    }
}

/// The last line of a log with something in it, as plain text (see [`clean`]).
fn last_line(path: &Path) -> Option<String> {
    let text = tail_untrusted(path, LAST_LINE_BYTES)?;
    last_lines(&text, 1).pop()
}

/// The last `max` bytes of the log at `path` (lossy UTF-8), when it is a regular file: opened
/// without following a link or waiting on a FIFO an agent or a gate may have put there.
fn tail_untrusted(path: &Path, max: u64) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let crate::run::exec::untrusted::Found::Regular(mut file, size) =
        crate::run::exec::untrusted::open(path).ok()?
    else {
        return None;
    };
    file.seek(SeekFrom::Start(size.saturating_sub(max))).ok()?;
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// `text`, each of its lines made plain (see [`clean`]).
pub(crate) fn plain(text: &str) -> String {
    text.split('\n').map(clean).collect::<Vec<_>>().join("\n")
}

/// The last `n` lines of `text` with something in them, as plain text.
fn last_lines(text: &str, n: usize) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .rev()
        .map(clean)
        .filter(|l| !l.trim().is_empty())
        .take(n)
        .collect();
    lines.reverse();
    lines
}

/// A line of an agent's or a gate's output as words only: what a carriage return overwrote
/// dropped, escape sequences and control characters removed (they would move the cursor, or
/// worse, in the live view), tabs made spaces.
fn clean(line: &str) -> String {
    // A progress bar redraws its line after `\r`: the terminal would show the last one.
    let shown = line
        .trim_end_matches('\r')
        .rsplit('\r')
        .next()
        .unwrap_or_default();
    crate::run::judge::ansi::strip(shown)
        .chars()
        .filter_map(|c| match c {
            '\t' => Some(' '),
            // Bidirectional overrides and isolates reorder what follows them on the line.
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => None,
            c if c.is_control() => None,
            c => Some(c),
        })
        .collect::<String>()
        .trim_end()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lines_escape_codes_control_characters_and_overwritten_text_are_dropped() {
        assert_eq!(clean("\u{1b}[31mFAIL\u{1b}[0m: add"), "FAIL: add");
        assert_eq!(clean("10%\r50%\r100% done\r"), "100% done");
        assert_eq!(clean("a\tb\u{7}\u{8}c\u{202e}d  "), "a bcd");
        assert_eq!(clean("\u{1b}]0;title\u{7}text"), "text");
    }

    #[test]
    fn the_last_lines_skip_blank_ones_and_keep_their_order() {
        let text = "one\ntwo\n\n\u{1b}[1m\u{1b}[0m\nthree\n\n";
        assert_eq!(last_lines(text, 2), ["two", "three"]);
        assert_eq!(last_lines(text, 1), ["three"]);
        assert!(last_lines("\n\n", 3).is_empty());
    }

    #[test]
    fn the_last_line_of_a_log_is_read_from_its_end() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = dir.path().join("agent.out");
        let mut text = "x".repeat(10_000);
        text.push_str("\nearlier\n\u{1b}[32mreading src/calc.sh\u{1b}[0m\n\n");
        std::fs::write(&log, text).expect("write the log");
        assert_eq!(last_line(&log).as_deref(), Some("reading src/calc.sh"));
        assert_eq!(last_line(&dir.path().join("missing")), None);
    }

    #[test]
    fn counts_durations_and_widths_read_at_a_glance() {
        assert_eq!(short_count(950), "950");
        assert_eq!(short_count(1_234), "1.2k");
        assert_eq!(short_count(100_000), "100k");
        assert_eq!(short_count(12_345), "12k");
        assert_eq!(short_count(999_999), "1M");
        assert_eq!(short_count(3_400_000), "3.4M");
        assert_eq!(whole_seconds(Duration::from_millis(90_700)), "1m30s");
        assert_eq!(whole_seconds(Duration::from_millis(300)), "0s");
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("abc", 4), "abc");
        assert_eq!(cut("abcdef", 3), "abc…");
    }

    #[test]
    fn the_heartbeat_period_takes_seconds_or_a_duration_and_never_zero() {
        assert_eq!(parse_every("1"), Some(Duration::from_secs(1)));
        assert_eq!(parse_every("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_every("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_every("0"), None);
        assert_eq!(parse_every("often"), None);
    }
}
