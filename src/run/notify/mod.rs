//! A run's events in (the lines the driver writes, and the stop signal the CLI catches); out,
//! the notifications a person asked for (`notify`), sent off the run's path on threads of their
//! own, and a `notify.sent` or `notify.failed` event in the ledger and the trail for each.
//!
//! [`message`] makes what is sent (the `mvk.notify.v1` JSON body, a Slack message, a command's
//! fields); [`send`] sends it (a webhook through ureq, or a command), with its timeout and
//! retries. A notification never fails a run: what goes wrong is said in `notify.failed` and on
//! standard error, and the run goes on. When the run ends, [`Notifier::finish`] waits for what is
//! still being sent, no longer than the slowest of them may take, so that the last word (the
//! run finished, or stopped) goes out before the process exits.
//!
//! Events and who hears them:
//! - `waiting`: `checkpoint.waiting`, or a task that ended at the `human` rung without one;
//! - `finished`: `run.finished` (and `run.stopped`, as outcome `error`) for the run's
//!   notifications; `task.finished` for a flow task's own;
//! - `budget`: `budget.threshold`, which the driver writes once per task (or flow) and budget
//!   when what was spent reaches a notification's `at`;
//! - `interrupted`: the CLI's [`Notifier::interrupted`] when a stop signal ends the process.

pub(crate) mod message;
pub(crate) mod send;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::ir::{Notify, NotifyEvent, Program};
use crate::run::driver::Observer;
use crate::run::event::Event;
use crate::run::trail::Line;
use message::{BudgetLevel, Checkpoint, Context, Message};

/// The longest the end of a run waits for notifications still being sent, whatever their
/// timeouts and retries say.
const MAX_WAIT_AT_END: Duration = Duration::from_secs(120);

/// Sends a run's notifications (see the module's doc). Cheap when the program has none.
pub(crate) struct Notifier {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    cx: Context,
    mvk_dir: PathBuf,
    /// The run's notifications: they hear every task, and the run's end.
    run: Vec<Arc<Notify>>,
    /// A flow task's own notifications, by task.
    tasks: BTreeMap<String, Vec<Arc<Notify>>>,
    /// Sendings not yet over, and the latest moment one of them may end.
    pending: Mutex<(usize, Option<Instant>)>,
    done: Condvar,
    /// Says a failure on standard error.
    warn: Box<dyn Fn(&str) + Send + Sync>,
}

impl Notifier {
    /// No notifications at all.
    pub(crate) fn none() -> Notifier {
        Notifier { inner: None }
    }

    /// The notifier of run `run_id` of `program` in `repo_root` (its file shown as `file`);
    /// `warn` says a failure to the person at the terminal.
    pub(crate) fn new(
        program: &Program,
        (repo_root, file, run_id): (&Path, &str, &str),
        warn: Box<dyn Fn(&str) + Send + Sync>,
    ) -> Notifier {
        let tasks: BTreeMap<String, Vec<Arc<Notify>>> = program
            .tasks
            .iter()
            .filter(|t| !t.notify.is_empty())
            .map(|t| (t.name.clone(), t.notify.clone()))
            .collect();
        if program.notify.is_empty() && tasks.is_empty() {
            return Notifier::none();
        }
        Notifier {
            inner: Some(Arc::new(Inner {
                cx: Context {
                    run: run_id.to_string(),
                    program: program.name.clone(),
                    file: file.to_string(),
                    repository: repo_root.display().to_string(),
                    host: crate::run::driver::host_name(),
                },
                mvk_dir: repo_root.join(".mvk"),
                run: program.notify.clone(),
                tasks,
                pending: Mutex::new((0, None)),
                done: Condvar::new(),
                warn,
            })),
        }
    }

    /// An observer that shows each event through `shown` and tells this notifier of it.
    pub(crate) fn watching<'a>(&'a self, shown: &'a dyn Observer) -> Watching<'a> {
        Watching {
            shown,
            notifier: self,
        }
    }

    /// Sends what the event on `line` calls for, if anything.
    pub(crate) fn event(&self, line: &Line) {
        let Some(inner) = &self.inner else { return };
        let Some(event) = Event::read(&line.event, &line.detail) else {
            return;
        };
        let task = line.task.clone();
        let m = |kind: NotifyEvent| {
            let mut m = Message::new(kind);
            m.task.clone_from(&task);
            m.attempt = line.attempt;
            m
        };
        match event {
            Event::CheckpointWaiting {
                checkpoint,
                kind,
                question,
                ..
            } => {
                let mut msg = m(NotifyEvent::Waiting);
                msg.checkpoint = Some(Checkpoint {
                    id: checkpoint,
                    kind,
                    question,
                });
                inner.to_task(msg);
            }
            Event::TaskFinished {
                outcome, reason, ..
            } => {
                if outcome == "human" {
                    let mut msg = m(NotifyEvent::Waiting);
                    msg.detail = Some(reason.clone());
                    inner.to_task(msg);
                }
                let mut msg = m(NotifyEvent::Finished);
                msg.exit_code = crate::run::outcome::Outcome::from_name(&outcome)
                    .map(|o| i32::from(o.exit_code()));
                msg.outcome = Some(outcome);
                msg.detail = Some(reason);
                inner.to_task_only(msg);
            }
            Event::RunFinished {
                outcome,
                exit_code,
                error,
            } => {
                let mut msg = m(NotifyEvent::Finished);
                msg.outcome = Some(outcome);
                msg.exit_code = Some(exit_code);
                msg.detail = error;
                inner.to_run(msg);
            }
            Event::RunStopped { error, .. } => {
                let mut msg = m(NotifyEvent::Finished);
                msg.outcome = Some("error".into());
                msg.exit_code = Some(70);
                msg.detail = Some(format!("{error}; continue with `mvk resume`"));
                inner.to_run(msg);
            }
            Event::BudgetThreshold {
                budget,
                spent,
                limit,
                at,
                warning,
            } => {
                let mut msg = m(NotifyEvent::Budget);
                msg.budget = Some(BudgetLevel::of(&budget, spent, limit, at));
                // One that names no fraction hears the budget's own warning.
                let hears = |n: &Notify| n.at.map_or(warning, |a| a == at);
                match &task {
                    Some(_) => inner.send_to(inner.audience(task.as_deref()), &msg, hears),
                    None => inner.send_to(inner.run.clone(), &msg, hears),
                }
            }
            _ => {}
        }
    }

    /// A stop signal (`by`, as `SIGINT (Ctrl-C)`) ended the run's process.
    pub(crate) fn interrupted(&self, by: &str) {
        let Some(inner) = &self.inner else { return };
        let mut msg = Message::new(NotifyEvent::Interrupted);
        msg.outcome = Some("interrupted".into());
        msg.detail = Some(by.to_string());
        let mut all = inner.run.clone();
        for own in inner.tasks.values() {
            for n in own {
                if !all.iter().any(|a| a.name == n.name && **a == **n) {
                    all.push(Arc::clone(n));
                }
            }
        }
        inner.send_to(all, &msg, |_| true);
    }

    /// Waits for what is still being sent: until every sending is over, or the slowest may have
    /// ended (its timeouts and pauses), at most [`MAX_WAIT_AT_END`]. `waiting` is told once
    /// when something is still being sent.
    pub(crate) fn finish(&self, waiting: impl FnOnce(usize)) {
        let Some(inner) = &self.inner else { return };
        let mut told = Some(waiting);
        let started = Instant::now();
        let mut pending = locked(&inner.pending);
        loop {
            let (count, until) = *pending;
            if count == 0 {
                return;
            }
            let until = until
                .unwrap_or(started)
                .min(started + MAX_WAIT_AT_END)
                // A moment for the thread to write down how it ended.
                + Duration::from_millis(500);
            let now = Instant::now();
            if now >= until {
                return;
            }
            if let Some(tell) = told.take() {
                tell(count);
            }
            pending = match inner.done.wait_timeout(pending, until - now) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }
}

impl Inner {
    /// Who hears of task `task`: the run's notifications, with the task's own over them.
    fn audience(&self, task: Option<&str>) -> Vec<Arc<Notify>> {
        match task.and_then(|t| self.tasks.get(t)) {
            Some(own) => crate::resolve::notify::overlay(&self.run, own.clone()),
            None => self.run.clone(),
        }
    }

    fn to_task(self: &Arc<Self>, msg: Message) {
        let audience = self.audience(msg.task.as_deref());
        self.send_to(audience, &msg, |_| true);
    }

    /// A task's end is heard by the task's own notifications only; the run's hear the run's.
    fn to_task_only(self: &Arc<Self>, msg: Message) {
        let own = msg
            .task
            .as_deref()
            .and_then(|t| self.tasks.get(t))
            .cloned()
            .unwrap_or_default();
        self.send_to(own, &msg, |_| true);
    }

    fn to_run(self: &Arc<Self>, msg: Message) {
        self.send_to(self.run.clone(), &msg, |_| true);
    }

    /// Sends `msg` to each of `audience` that hears its event (and passes `also`), each on a
    /// thread of its own.
    fn send_to(
        self: &Arc<Self>,
        audience: Vec<Arc<Notify>>,
        msg: &Message,
        also: impl Fn(&Notify) -> bool,
    ) {
        for n in audience {
            if !n.hears(msg.event) || !also(&n) {
                continue;
            }
            if msg.event == NotifyEvent::Finished
                && !n.outcomes.is_empty()
                && !msg.outcome.as_ref().is_some_and(|o| n.outcomes.contains(o))
            {
                continue;
            }
            self.spawn(n, msg.clone());
        }
    }

    fn spawn(self: &Arc<Self>, n: Arc<Notify>, msg: Message) {
        let bound = send::bound(&n);
        {
            let mut pending = locked(&self.pending);
            pending.0 += 1;
            let until = Instant::now() + bound;
            pending.1 = Some(pending.1.map_or(until, |u| u.max(until)));
        }
        let inner = Arc::clone(self);
        let name = n.name.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("notify-{name}"))
            .spawn(move || {
                inner.deliver(&n, &msg);
                let mut pending = locked(&inner.pending);
                pending.0 = pending.0.saturating_sub(1);
                inner.done.notify_all();
            });
        if let Err(e) = spawned {
            locked(&self.pending).0 -= 1;
            (self.warn)(&format!(
                "notification `{name}` was not sent: cannot start a thread for it: {e}"
            ));
        }
    }

    /// Sends one message and writes down how it went.
    fn deliver(&self, n: &Notify, msg: &Message) {
        let id = delivery_id(&self.cx.run, &n.name, msg);
        let run_dir = self.mvk_dir.join("runs").join(&self.cx.run);
        let log = send::log_path(&run_dir, &n.name);
        let sent = send::send(n, msg, &self.cx, &id, &log);
        let event = match &sent.error {
            None => Event::NotifySent {
                notification: n.name.clone(),
                event: msg.event.name().to_string(),
                id: id.clone(),
                tries: sent.tries,
            },
            Some(error) => {
                tracing::warn!(notification = %n.name, event = msg.event.name(), %error, "a notification failed");
                (self.warn)(&format!(
                    "notification `{}` of the {} event failed after {} tr{}: {error} (the run goes on)",
                    n.name,
                    msg.event.name(),
                    sent.tries,
                    if sent.tries == 1 { "y" } else { "ies" }
                ));
                Event::NotifyFailed {
                    notification: n.name.clone(),
                    event: msg.event.name().to_string(),
                    id: id.clone(),
                    tries: sent.tries,
                    error: error.clone(),
                }
            }
        };
        self.record(msg.task.as_deref(), event);
    }

    /// Writes `event` to the ledger, then the trail, as the driver does; best effort, since a
    /// notification's record must not fail the run either.
    fn record(&self, task: Option<&str>, event: Event) {
        let Ok((name, detail)) = event.into_parts() else {
            return;
        };
        let (_, time_ms) = crate::clock::now();
        if let Ok(mut ledger) = crate::ledger::Ledger::open(&self.mvk_dir.join("ledger.db")) {
            let _ = ledger.event(&self.cx.run, task, None, time_ms, name, &detail.to_string());
        }
        if let Ok(trail) = crate::run::trail::Trail::create(&self.mvk_dir, &self.cx.run) {
            let _ = trail.event(task, None, name, detail);
        }
    }
}

/// Locks `m`; a poisoned lock only means a panic on a sending thread, and the count is whole.
fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A delivery's id, the same for each of its tries, so that a receiver can drop a repeat.
fn delivery_id(run: &str, name: &str, msg: &Message) -> String {
    let mut h = blake3::Hasher::new();
    // Which budget and fraction too: one attempt can cross 80% of `usd` and of `tokens` in the
    // same millisecond, and a receiver that drops repeats must keep both.
    let budget = msg
        .budget
        .as_ref()
        .map_or(String::new(), |b| format!("{} {}", b.name, b.at));
    let checkpoint = msg
        .checkpoint
        .as_ref()
        .map_or(String::new(), |c| c.id.to_string());
    for part in [
        run,
        name,
        msg.event.name(),
        msg.task.as_deref().unwrap_or(""),
        &msg.time,
        &budget,
        &checkpoint,
    ] {
        h.update(part.as_bytes());
        h.update(&[0]);
    }
    h.finalize().to_hex()[..20].to_string()
}

/// An observer that shows each event and tells the notifier of it.
pub(crate) struct Watching<'a> {
    shown: &'a dyn Observer,
    notifier: &'a Notifier,
}

impl Observer for Watching<'_> {
    fn event(&self, line: &Line) {
        self.shown.event(line);
        self.notifier.event(line);
    }
}
