//! `mvk watch [RUN] [--events FILE] [--exit-when-done]`: a run in (from the repository's ledger,
//! read-only, or from a copy of its `events.jsonl`); a live, keyed view of it on the terminal
//! out, until `q`: the run's state and outcome, each task's state, step, attempt, rung, agent,
//! time and budget, the flow's DAG by levels, costs, who waits for what, the latest events; a
//! task's agent log or last failure in a pane; and a waiting checkpoint approved or rejected.
//!
//! It only reads (see [`feed`]), so it may be opened in any terminal while `mvk apply` runs, as
//! often as wanted, and never slows the run: a few short read statements four times a second.
//! Answering a checkpoint is the one write: the decision goes through
//! [`super::decide::record`], as `mvk approve` and `mvk reject` record theirs, and the run then
//! goes on in a detached `mvk resume` (where `mvk approve` would continue it in its own
//! process), whose output is kept in the run's directory; the view follows it.
//!
//! The terminal is given back as it was when the view ends: on `q`, on an error, on a panic
//! (ratatui's hook) and on SIGINT, SIGTERM, SIGHUP or SIGQUIT.

mod feed;
mod view;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use ratatui::crossterm::event::{
    self, Event as TermEvent, KeyCode, KeyEvent, KeyEventKind, KeyModifiers,
};

use super::printer::Printer;
use super::{Cli, CliError, Exit};
use crate::ledger::read::{Liveness, ms_since_epoch};
use crate::report::board::{Board, Checkpoint, TaskState};
use feed::{Feed, FileFeed, LedgerFeed};

/// How often the feed is read: four times a second.
const POLL: Duration = Duration::from_millis(250);
/// At most this many queued terminal events are read before the view draws again.
const MAX_KEYS_AT_ONCE: usize = 64;
/// The bytes of an agent's log read into its pane (its end).
const LOG_BYTES: u64 = 256 * 1024;
/// How long a message stays in the footer.
const MESSAGE_FOR: Duration = Duration::from_secs(8);

#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// The run: its id or a unique prefix of it (default: the latest run, and the next one
    /// once it is over).
    #[arg(value_name = "RUN", conflicts_with = "events")]
    pub(crate) run: Option<String>,
    /// Watch a copy of a run's `events.jsonl` instead of the repository's ledger (a CI
    /// artifact, a shared checkout): followed as it grows, read-only.
    #[arg(long, value_name = "FILE")]
    pub(crate) events: Option<PathBuf>,
    /// Leave when the run is over (finished, paused for a person, or its process gone), with
    /// the run's exit code (2 for a run whose process is gone), instead of waiting for `q`.
    #[arg(long)]
    pub(crate) exit_when_done: bool,
}

pub(crate) fn watch(cli: &Cli, printer: &Printer, args: &WatchArgs) -> Result<Exit, CliError> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(CliError::Usage {
            message: "`mvk watch` draws a live view and needs a terminal; standard input or output is not one".into(),
            hint: Some(
                "for a script or a log, `mvk status [RUN]` says where a run stands and `mvk log --follow [RUN]` prints its events as they come".into(),
            ),
        });
    }
    let feed = match &args.events {
        Some(file) => Feed::File(FileFeed::open(file)?),
        None => Feed::Ledger(Box::new(LedgerFeed::open(cli, args.run.as_deref())?)),
    };
    let colour = std::env::var_os(crate::env::NO_COLOR).is_none_or(|v| v.is_empty());
    let mut app = App::new(feed, colour, args.exit_when_done);
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGQUIT,
    ] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).map_err(|e| CliError::Internal {
            message: format!("cannot watch for stop signals: {e}"),
        })?;
    }
    let ended = {
        let mut screen = Screen::enter()?;
        app.run(cli, &mut screen, &stop)
    };
    // The terminal is back: what the view showed last, in one line the shell keeps.
    if !app.board.run.is_empty() {
        printer.status(&format!(
            "run {}: {}",
            app.board.run,
            view::state_line(&app.board)
        ));
    }
    if let Some(r) = &app.resumed {
        printer.status(&format!(
            "the run goes on in `mvk resume {}` (process {}), its output in {}",
            r.run,
            r.pid,
            r.log.display()
        ));
    }
    ended
}

/// What the terminal the view reads its keys from has.
enum Input {
    Ready,
    None,
    /// It hung up.
    Gone,
}

/// Waits up to `wait` for input on the terminal.
fn wait_for_input(wait: Duration) -> Input {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let stdin = std::io::stdin();
    let mut fds = [PollFd::new(&stdin, PollFlags::IN)];
    let timeout = Timespec {
        tv_sec: i64::try_from(wait.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(wait.subsec_nanos()),
    };
    match poll(&mut fds, Some(&timeout)) {
        Ok(0) => Input::None,
        Ok(_)
            if fds[0]
                .revents()
                .intersects(PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL) =>
        {
            Input::Gone
        }
        Ok(_) => Input::Ready,
        // A signal: the loop looks at the stop flag.
        Err(_) => Input::None,
    }
}

/// The terminal in the view's modes (raw, the alternate screen, no cursor), given back when
/// dropped.
struct Screen {
    terminal: ratatui::DefaultTerminal,
}

impl Screen {
    fn enter() -> Result<Screen, CliError> {
        // `try_init` also sets a panic hook that gives the terminal back before the message.
        let terminal = ratatui::try_init().map_err(|e| CliError::Internal {
            message: format!("cannot set the terminal up for the view: {e}"),
        })?;
        Ok(Screen { terminal })
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = self.terminal.show_cursor();
        // Nothing more can be done when the terminal is gone (a hang-up).
        let _ = ratatui::try_restore();
    }
}

/// The view's state: the board, what is open over it, the feed.
pub(super) struct App {
    pub(super) board: Board,
    feed: Feed,
    pub(super) selected: usize,
    pub(super) overlay: Overlay,
    pub(super) message: Option<Message>,
    pub(super) colour: bool,
    exit_when_done: bool,
    /// The `mvk resume` an answer started.
    resumed: Option<Resumed>,
    /// An answer was recorded when the latest event was this one, and no event came since: the
    /// run is about to go on, so it is not over, whatever it says.
    answered: Option<i64>,
    /// The feed failed on its last read (the view goes on and reads again).
    pub(super) trouble: Option<String>,
    /// The run another one took the place of, for the footer.
    pub(super) switched_from: Option<String>,
}

/// A line in the footer for a while.
pub(super) struct Message {
    pub(super) text: String,
    pub(super) error: bool,
    at: Instant,
}

/// What is open over the board.
pub(super) enum Overlay {
    None,
    /// A scrollable text: a log, a failure, the events, the keys.
    Pane(Pane),
    /// Approve or reject task's checkpoint? (A rejection carries its reason.)
    Confirm {
        task: String,
        checkpoint: Checkpoint,
        reason: Option<String>,
    },
    /// The reason for rejecting, being typed.
    Reason {
        task: String,
        checkpoint: Checkpoint,
        text: String,
    },
}

/// A scrollable text.
pub(super) struct Pane {
    pub(super) title: String,
    pub(super) lines: Vec<String>,
    /// The first line shown.
    pub(super) top: usize,
    /// Kept at the end as lines come (a log that grows).
    pub(super) follow: bool,
    /// A log's file, read again as it grows; and the other stream of the same agent.
    source: Option<LogSource>,
}

struct LogSource {
    path: PathBuf,
    other: PathBuf,
    len: Option<u64>,
}

/// The `mvk resume` an answer started.
struct Resumed {
    run: String,
    child: std::process::Child,
    pid: u32,
    log: PathBuf,
}

impl App {
    fn new(feed: Feed, colour: bool, exit_when_done: bool) -> App {
        App {
            board: Board::default(),
            feed,
            selected: 0,
            overlay: Overlay::None,
            message: None,
            colour,
            exit_when_done,
            resumed: None,
            answered: None,
            trouble: None,
            switched_from: None,
        }
    }

    /// Polls, draws and reads keys until `q` (or, with `--exit-when-done`, the run's end) or a
    /// stop signal.
    fn run(&mut self, cli: &Cli, screen: &mut Screen, stop: &AtomicBool) -> Result<Exit, CliError> {
        let term = |e: std::io::Error| CliError::Internal {
            message: format!("cannot draw on the terminal: {e}"),
        };
        let mut polled_at: Option<Instant> = None;
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(Exit::Interrupted);
            }
            if polled_at.is_none_or(|t| t.elapsed() >= POLL) {
                self.poll();
                polled_at = Some(Instant::now());
                if self.exit_when_done
                    && let Some(code) = self.done_code()
                {
                    screen
                        .terminal
                        .draw(|f| view::draw(f, &mut *self))
                        .map_err(term)?;
                    return Ok(code);
                }
            }
            screen
                .terminal
                .draw(|f| view::draw(f, &mut *self))
                .map_err(term)?;
            let wait = polled_at.map_or(Duration::ZERO, |t| POLL.saturating_sub(t.elapsed()));
            // The wait is the view's own: a terminal that hung up (its window closed, its tmux
            // server killed) reads as end-of-file for ever, and crossterm's poll spins on that
            // without returning. Here the hang-up is seen, and the view leaves.
            match wait_for_input(wait) {
                Input::Gone => return Ok(Exit::Interrupted),
                Input::None => continue,
                Input::Ready => {}
            }
            if event::poll(Duration::ZERO).map_err(term)? {
                // Every key already typed, then one redraw; a bounded number, and the stop
                // signals looked at between them: a terminal that hung up reads as an endless
                // stream of input, and the view must not spin on it.
                for _ in 0..MAX_KEYS_AT_ONCE {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(Exit::Interrupted);
                    }
                    let confirming = matches!(self.overlay, Overlay::Confirm { .. });
                    match event::read().map_err(term)? {
                        TermEvent::Key(key)
                            if key.kind != KeyEventKind::Release && self.key(cli, key) =>
                        {
                            return Ok(Exit::Ok);
                        }
                        _ => {}
                    }
                    if !confirming && matches!(self.overlay, Overlay::Confirm { .. }) {
                        // Keys typed before the question was on the screen do not answer it.
                        while event::poll(Duration::ZERO).map_err(term)? {
                            let _ = event::read().map_err(term)?;
                        }
                        break;
                    }
                    if !event::poll(Duration::ZERO).map_err(term)? {
                        break;
                    }
                }
            }
        }
    }

    /// Reads the feed, the log a pane follows, and the `mvk resume` an answer started.
    fn poll(&mut self) {
        match self.feed.poll(&mut self.board) {
            Ok(polled) => {
                self.trouble = None;
                if let Some(run) = polled.switched {
                    self.selected = 0;
                    self.overlay = Overlay::None;
                    self.switched_from = None;
                    if let Some(r) = &self.resumed
                        && r.run != run
                    {
                        self.switched_from = Some(r.run.clone());
                    }
                }
            }
            Err(e) => self.trouble = Some(e.to_string()),
        }
        // The answer is taken up once the run moves on: an event after it other than the
        // resume's own bookkeeping (the run stays `paused` in the ledger until the resume has
        // restored every task, and the view must not read that as still waiting).
        if let Some(at) = self.answered
            && self.board.events.iter().any(|e| {
                e.id > at
                    && !matches!(
                        e.event.as_str(),
                        "run.resumed" | "task.resumed" | "checkpoint.answered" | "merge.settled"
                    )
            })
        {
            self.answered = None;
        }
        let ended = self
            .resumed
            .as_mut()
            .and_then(|r| r.child.try_wait().ok().flatten());
        if let (Some(status), Some(r)) = (ended, self.resumed.take()) {
            let code = status.code().unwrap_or(-1);
            // 0–5 are the run's own outcomes; anything else is the resume failing, and so is
            // any exit before the run moved on (a resume refused on drift exits 5 and writes
            // no event).
            if !(0..=5).contains(&code) || self.answered.is_some() {
                let said = crate::run::judge::gate::tail_of(&r.log, 2048).unwrap_or_default();
                let last = said
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                let text = format!(
                    "`mvk resume {}` exited {code}: {last} (all of it: {})",
                    r.run,
                    r.log.display()
                );
                self.say(text, true);
                self.answered = None;
            }
        }
        if self.selected >= self.board.tasks.len() {
            self.selected = self.board.tasks.len().saturating_sub(1);
        }
        if let Overlay::Pane(pane) = &mut self.overlay {
            pane.reload();
        }
        if self
            .message
            .as_ref()
            .is_some_and(|m| m.at.elapsed() > MESSAGE_FOR)
        {
            self.message = None;
        }
    }

    /// The exit code once the run is over (and not about to go on after an answer).
    fn done_code(&self) -> Option<Exit> {
        if self.answered.is_some() || self.board.run.is_empty() {
            return None;
        }
        if let Some(end) = &self.board.end {
            return Some(u8::try_from(end.exit_code).map_or(Exit::Internal, Exit::from_code));
        }
        match (&self.board.liveness, &self.feed) {
            (Some(Liveness::Interrupted { .. }), _) => Some(Exit::Stuck),
            _ => None,
        }
    }

    /// The id of the latest event read.
    fn latest_event(&self) -> Option<i64> {
        self.board.events.back().map(|e| e.id)
    }

    pub(super) fn say(&mut self, text: String, error: bool) {
        self.message = Some(Message {
            text,
            error,
            at: Instant::now(),
        });
    }

    /// Why the view cannot answer checkpoints, if it cannot.
    pub(super) fn read_only(&self) -> Option<String> {
        match &self.feed {
            Feed::File(_) => Some(format!(
                "read-only replay: answer where the run's ledger is, with `mvk approve {} {}`",
                self.board.run,
                self.task().map_or("TASK", |t| t.name.as_str())
            )),
            Feed::Ledger(_) => None,
        }
    }

    /// What the feed is, for the header: the ledger, or the events file and its heartbeat.
    pub(super) fn source_note(&self, now_ms: i64) -> String {
        match &self.feed {
            Feed::Ledger(_) => "read from the ledger".to_string(),
            Feed::File(f) => {
                let mut note = format!("read-only replay of {}", shown(&f.path));
                if f.unread > 0 {
                    note.push_str(&format!(", {} line(s) not events", f.unread));
                }
                match f.heartbeat_stale(now_ms) {
                    Some(true) if self.board.end.is_none() => note.push_str(", heartbeat stopped"),
                    Some(false) => note.push_str(", heartbeat live"),
                    _ => {}
                }
                note
            }
        }
    }

    /// The task the keys act on.
    pub(super) fn task(&self) -> Option<&crate::report::board::TaskBoard> {
        self.board.tasks.get(self.selected)
    }

    /// Handles one key; true when the view ends.
    fn key(&mut self, cli: &Cli, key: KeyEvent) -> bool {
        let ctrl_c = key.modifiers.contains(KeyModifiers::CONTROL)
            && matches!(key.code, KeyCode::Char('c' | 'd'));
        if ctrl_c {
            return true;
        }
        match std::mem::replace(&mut self.overlay, Overlay::None) {
            Overlay::None => return self.board_key(key),
            Overlay::Pane(mut pane) => {
                if !pane.key(key) {
                    self.overlay = Overlay::Pane(pane);
                }
            }
            Overlay::Reason {
                task,
                checkpoint,
                mut text,
            } => match key.code {
                KeyCode::Esc => self.say("not rejected".into(), false),
                KeyCode::Enter if text.trim().is_empty() => {
                    self.say(
                        "a rejection needs a reason: it goes into the next attempt's prompt".into(),
                        true,
                    );
                    self.overlay = Overlay::Reason {
                        task,
                        checkpoint,
                        text,
                    };
                }
                KeyCode::Enter => {
                    self.overlay = Overlay::Confirm {
                        task,
                        checkpoint,
                        reason: Some(text.trim().to_string()),
                    };
                }
                code => {
                    match code {
                        KeyCode::Backspace => {
                            text.pop();
                        }
                        KeyCode::Char(c) if !c.is_control() && text.chars().count() < 2000 => {
                            text.push(c);
                        }
                        _ => {}
                    }
                    self.overlay = Overlay::Reason {
                        task,
                        checkpoint,
                        text,
                    };
                }
            },
            Overlay::Confirm {
                task,
                checkpoint,
                reason,
            } => match key.code {
                // `y` alone: Enter, or a key typed ahead into the wrong pane, must not land
                // a change; any other key says no.
                KeyCode::Char('y' | 'Y') => {
                    self.answer(cli, &task, checkpoint.id, reason.as_deref());
                }
                _ => self.say("nothing was answered".into(), false),
            },
        }
        false
    }

    /// A key on the board itself; true when the view ends.
    fn board_key(&mut self, key: KeyEvent) -> bool {
        let count = self.board.tasks.len();
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => return true,
            KeyCode::Up | KeyCode::Char('k') => self.selected = self.selected.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => {
                self.selected = (self.selected + 1).min(count.saturating_sub(1));
            }
            KeyCode::Home | KeyCode::Char('g') => self.selected = 0,
            KeyCode::End | KeyCode::Char('G') => self.selected = count.saturating_sub(1),
            KeyCode::Enter | KeyCode::Char('l') => self.open_log(),
            KeyCode::Char('f') => self.open_failure(),
            KeyCode::Char('e') => self.open_events(),
            KeyCode::Char('?' | 'h') => {
                self.overlay = Overlay::Pane(Pane::text("keys", view::help()))
            }
            KeyCode::Char('a') => self.ask(None),
            KeyCode::Char('r') => self.ask(Some(String::new())),
            _ => {}
        }
        false
    }

    /// Opens the agent's log of the selected task's latest attempt.
    fn open_log(&mut self) {
        let Some(t) = self.task() else { return };
        let Some(attempt) = t.attempt else {
            let text = format!("task `{}` has made no attempt yet", t.name);
            self.say(text, true);
            return;
        };
        let name = t.name.clone();
        let worker = t.worker.clone();
        let Some(run_dir) = self.feed.run_dir(&self.board.run) else {
            return;
        };
        let dir = crate::run::attempt::attempt_dir(&run_dir, &name, attempt);
        let out = dir.join("agent.out");
        if !out.exists() {
            let text = match worker {
                Some(w) => format!(
                    "attempt {attempt} of `{name}` was made by worker `{w}`: its log is on that machine"
                ),
                None => format!("no agent log at {} (not on this machine)", out.display()),
            };
            self.say(text, true);
            return;
        }
        let mut pane = Pane::text(&format!("{name} #{attempt}: agent.out"), Vec::new());
        pane.follow = true;
        pane.source = Some(LogSource {
            path: out,
            other: dir.join("agent.err"),
            len: None,
        });
        pane.reload();
        self.overlay = Overlay::Pane(pane);
    }

    /// Opens the selected task's last failure, whole.
    fn open_failure(&mut self) {
        let Some(t) = self.task() else { return };
        match &t.failure {
            Some(f) => {
                let title = format!("{}: attempt {} failed", t.name, f.attempt);
                self.overlay = Overlay::Pane(Pane::text(&title, view::failure_lines(f)));
            }
            None => {
                let text = format!("task `{}` has no failed attempt", t.name);
                self.say(text, true);
            }
        }
    }

    fn open_events(&mut self) {
        let lines = self.board.events.iter().map(super::log::line).collect();
        let mut pane = Pane::text("events (the latest)", lines);
        pane.follow = true;
        pane.top = usize::MAX;
        self.overlay = Overlay::Pane(pane);
    }

    /// Starts answering a checkpoint: approving (REASON `None`) asks to confirm, rejecting asks
    /// for the reason first.
    fn ask(&mut self, reason: Option<String>) {
        if let Some(why) = self.read_only() {
            self.say(why, true);
            return;
        }
        // The selected task's checkpoint, or the only one there is.
        let waiting: Vec<(String, Checkpoint)> = self
            .board
            .tasks
            .iter()
            .filter_map(|t| Some((t.name.clone(), t.checkpoint.clone()?)))
            .collect();
        let chosen = self
            .task()
            .and_then(|t| Some((t.name.clone(), t.checkpoint.clone()?)))
            .or_else(|| (waiting.len() == 1).then(|| waiting[0].clone()));
        let Some((task, checkpoint)) = chosen else {
            let text = if waiting.is_empty() {
                "no checkpoint waits for a person".to_string()
            } else {
                format!(
                    "select the task to answer: {} wait",
                    waiting
                        .iter()
                        .map(|(t, _)| format!("`{t}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            self.say(text, true);
            return;
        };
        if !checkpoint.answerable {
            self.say(
                format!(
                    "`{task}` waits at its {} checkpoint; it can be answered once the run pauses (when its other tasks end)",
                    checkpoint.kind
                ),
                true,
            );
            return;
        }
        self.overlay = match reason {
            None => Overlay::Confirm {
                task,
                checkpoint,
                reason: None,
            },
            Some(text) => Overlay::Reason {
                task,
                checkpoint,
                text,
            },
        };
    }

    /// Records the answer as `mvk approve` or `mvk reject` does, then continues the run in a
    /// detached `mvk resume`.
    fn answer(&mut self, cli: &Cli, task: &str, checkpoint: i64, reason: Option<&str>) {
        let run = self.board.run.clone();
        let answered =
            match super::decide::record(cli, (&run, Some(task)), reason, Some(checkpoint)) {
                Ok((_, answered)) => answered,
                Err(e) => {
                    let hint = e.hint().map_or(String::new(), |h| format!(" ({h})"));
                    self.say(format!("{e}{hint}"), true);
                    return;
                }
            };
        let said = answered
            .iter()
            .map(super::decide::Answered::said)
            .collect::<Vec<_>>()
            .join("; ");
        match self.resume(cli, &run) {
            Ok(resumed) => {
                self.say(format!("{said}; the run goes on"), false);
                self.resumed = Some(resumed);
                self.answered = Some(self.latest_event().unwrap_or(0));
            }
            Err(e) => self.say(
                format!(
                    "{said}, but the run did not go on: {e}; continue it with `mvk resume {run}`"
                ),
                true,
            ),
        }
    }

    /// Starts `mvk resume RUN` in a session of its own, so that it outlives the view and its
    /// terminal; its output goes to `.mvk/runs/<run>/resume-<time>.log`.
    fn resume(&self, cli: &Cli, run: &str) -> Result<Resumed, String> {
        let dir = self
            .feed
            .run_dir(run)
            .ok_or_else(|| "the run has no directory".to_string())?;
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
        let stamp = crate::clock::now().0.replace([':', '.'], "");
        let log = dir.join(format!("resume-{stamp}.log"));
        let file = std::fs::File::create(&log)
            .map_err(|e| format!("cannot create `{}`: {e}", log.display()))?;
        let err = file
            .try_clone()
            .map_err(|e| format!("cannot share `{}`: {e}", log.display()))?;
        let exe =
            crate::exe::path().map_err(|e| format!("cannot find mvk's own executable: {e}"))?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg(crate::session::DETACHED);
        if let Some(repo) = &cli.repo {
            cmd.arg("--repo").arg(repo);
        }
        let child = cmd
            .args(["resume", "--", run])
            .stdin(std::process::Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start `mvk resume {run}`: {e}"))?;
        Ok(Resumed {
            run: run.to_string(),
            pid: child.id(),
            child,
            log,
        })
    }
}

impl Pane {
    fn text(title: &str, lines: Vec<String>) -> Pane {
        Pane {
            title: title.to_string(),
            lines,
            top: 0,
            follow: false,
            source: None,
        }
    }

    /// Reads the log again when it grew.
    fn reload(&mut self) {
        let Some(source) = &mut self.source else {
            return;
        };
        let len = std::fs::metadata(&source.path).ok().map(|m| m.len());
        if len == source.len && len.is_some() {
            return;
        }
        source.len = len;
        let text = crate::run::judge::gate::tail_of(&source.path, LOG_BYTES)
            .unwrap_or_else(|e| format!("cannot read {}: {e}", source.path.display()));
        self.lines = view::printable_lines(&text);
        if self.lines.is_empty() {
            self.lines
                .push(format!("({} is empty)", shown(&source.path)));
        }
    }

    /// Handles a key; true when the pane closes.
    fn key(&mut self, key: KeyEvent) -> bool {
        const PAGE: usize = 10;
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => return true,
            KeyCode::Up | KeyCode::Char('k') => {
                self.follow = false;
                self.top = self.top.min(self.lines.len()).saturating_sub(1);
            }
            KeyCode::Down | KeyCode::Char('j') => self.top = self.top.saturating_add(1),
            KeyCode::PageUp | KeyCode::Char('b') => {
                self.follow = false;
                self.top = self.top.min(self.lines.len()).saturating_sub(PAGE);
            }
            KeyCode::PageDown | KeyCode::Char(' ') => self.top = self.top.saturating_add(PAGE),
            KeyCode::Home | KeyCode::Char('g') => {
                self.follow = false;
                self.top = 0;
            }
            KeyCode::End | KeyCode::Char('G') => {
                self.follow = true;
                self.top = usize::MAX;
            }
            KeyCode::Tab => {
                if let Some(source) = &mut self.source {
                    std::mem::swap(&mut source.path, &mut source.other);
                    source.len = None;
                    let name = source
                        .path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    if let Some((head, _)) = self.title.rsplit_once(": ") {
                        self.title = format!("{head}: {name}");
                    }
                    self.top = usize::MAX;
                    self.follow = true;
                    self.reload();
                }
            }
            _ => {}
        }
        false
    }

    /// Whether the pane shows a log (Tab switches its stream).
    pub(super) fn is_log(&self) -> bool {
        self.source.is_some()
    }
}

/// A path as a line shows it: its last two parts (`…/1/agent.out`).
fn shown(path: &Path) -> String {
    let parts: Vec<_> = path.iter().collect();
    let from = parts.len().saturating_sub(2);
    let tail = parts[from..]
        .iter()
        .map(|p| p.to_string_lossy())
        .collect::<Vec<_>>()
        .join("/");
    if from > 0 {
        format!("…/{tail}")
    } else {
        tail
    }
}

/// Milliseconds since the epoch, now.
pub(super) fn now_ms() -> i64 {
    ms_since_epoch(std::time::SystemTime::now())
}

/// Whether a task ended well.
pub(super) fn good(state: &TaskState) -> bool {
    matches!(state, TaskState::Done(o) if o == "accepted")
}
