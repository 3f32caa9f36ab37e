//! Each task's first prompt in, `mvk::prompt-over-budget` warnings out: the maker's prompt of a
//! task's first attempt (its template with the task's goal, rules and checks, before any
//! failure, diff or lesson) held to the task's `context-tokens`.
//!
//! Rendering that prompt was a third of the time a flow of thousands of tasks took to compile
//! (a 10,000-task fan-out: 0.33 s with the check, 0.23 s without), and no later part of the
//! compile needs its result. So past the first few tasks the renders move to a thread of their
//! own, which works while the compile goes on building tasks, and each warning is put back
//! where it would have been pushed: the diagnostics come out in the same order either way.

use std::sync::Arc;
use std::sync::mpsc;
use std::thread;

use crate::diag::{Diagnostic, Diagnostics};
use crate::ir::Task;
use crate::prompt::{FirstPrompts, GateInfo, PromptContext};
use crate::source::Span;

/// Tasks checked on the compiling thread before the rest go to a thread of their own: a loop
/// or a small flow is done before a thread could start.
const INLINE: usize = 64;

/// Checks sent to the worker at a time: one wake-up of the worker per batch, not per task.
const BATCH: usize = 128;

/// Batches waiting on the worker before the compile waits for it: enough to keep it busy
/// through a burst, few enough that the facts they hold stay a few megabytes.
const QUEUE: usize = 8;

/// What one check needs: the facts the prompt shows, the budget and where to point.
struct Job {
    /// How many diagnostics there were when the check was asked for: where its warning goes.
    at: usize,
    template: Arc<str>,
    own: PromptContext,
    name: String,
    budget: usize,
    span: Option<Span>,
}

/// The checks of one compile: made on the compiling thread for its first [`INLINE`] tasks, then
/// on a worker thread; [`FirstPromptChecks::settle`] puts the worker's warnings in place.
pub(crate) struct FirstPromptChecks {
    /// Each template compiled once; moved into the worker when it starts.
    prompts: Option<FirstPrompts>,
    asked: usize,
    worker: Option<Worker>,
    /// No thread could be made: every check stays here, and it is not tried again.
    alone: bool,
}

struct Worker {
    /// Checks not yet sent.
    batch: Vec<Job>,
    jobs: mpsc::SyncSender<Vec<Job>>,
    /// Batches the worker is done with, dropped on this thread: the facts were allocated here,
    /// and freeing them on the worker made the allocator's two threads contend (10,000 tasks:
    /// 25 ms of the 50 the worker saved).
    spent: mpsc::Receiver<Vec<Job>>,
    done: thread::JoinHandle<Vec<(usize, Diagnostic)>>,
}

impl Default for FirstPromptChecks {
    fn default() -> FirstPromptChecks {
        FirstPromptChecks {
            prompts: Some(FirstPrompts::default()),
            asked: 0,
            worker: None,
            alone: false,
        }
    }
}

impl FirstPromptChecks {
    /// Checks `task`'s first prompt; a warning is pushed to `diags` now or put there by
    /// [`FirstPromptChecks::settle`].
    pub(crate) fn check(&mut self, diags: &mut Diagnostics, task: &Task) {
        let job = Job {
            at: diags.len(),
            template: Arc::clone(&task.prompt.text),
            own: own_facts(task),
            name: task.name.clone(),
            budget: task.budget.context_tokens as usize,
            span: task
                .meta
                .field_spans
                .get("budget")
                .or(task.meta.span.as_ref())
                .copied(),
        };
        self.asked += 1;
        if self.asked > INLINE && self.worker.is_none() && !self.alone {
            self.start();
        }
        let Some(worker) = &mut self.worker else {
            let prompts = self.prompts.get_or_insert_with(FirstPrompts::default);
            if let Some(d) = over_budget(prompts, &job) {
                diags.push(d);
            }
            return;
        };
        worker.batch.push(job);
        if worker.batch.len() < BATCH {
            return;
        }
        worker.spent.try_iter().for_each(drop);
        let batch = std::mem::replace(&mut worker.batch, Vec::with_capacity(BATCH));
        // A send fails only when the worker is gone (it panicked): `settle` says so.
        let _ = worker.jobs.send(batch);
    }

    /// Starts the worker with the compiled templates; when no thread can be made, every check
    /// stays on the compiling thread.
    fn start(&mut self) {
        let Some(mut prompts) = self.prompts.take() else {
            return;
        };
        let (jobs, queue) = mpsc::sync_channel::<Vec<Job>>(QUEUE);
        let (back, spent) = mpsc::channel::<Vec<Job>>();
        let spawned = thread::Builder::new()
            .name("mvk-first-prompts".into())
            .spawn(move || {
                let mut warnings = Vec::new();
                for batch in queue {
                    for job in &batch {
                        if let Some(d) = over_budget(&mut prompts, job) {
                            warnings.push((job.at, d));
                        }
                    }
                    // Were the compiling thread gone, the batch is freed here.
                    let _ = back.send(batch);
                }
                warnings
            });
        match spawned {
            Ok(done) => {
                self.worker = Some(Worker {
                    batch: Vec::with_capacity(BATCH),
                    jobs,
                    spent,
                    done,
                });
            }
            Err(e) => {
                tracing::debug!("no thread for the first prompts' checks ({e}): checking inline");
                // The closure, and the templates in it, were dropped with the error; they are
                // compiled again once, not at each task.
                self.prompts = Some(FirstPrompts::default());
                self.alone = true;
            }
        }
    }

    /// Waits for the worker's checks and puts each warning where it was asked for.
    pub(crate) fn settle(&mut self, diags: &mut Diagnostics) {
        let Some(Worker {
            batch,
            jobs,
            spent,
            done,
        }) = self.worker.take()
        else {
            return;
        };
        // A send fails only when the worker is gone, which the join says.
        let _ = jobs.send(batch);
        drop(jobs);
        match done.join() {
            Ok(warnings) => diags.insert_at(warnings),
            // A render that panics would have panicked on this thread: so it does.
            Err(panic) => std::panic::resume_unwind(panic),
        }
        spent.try_iter().for_each(drop);
    }
}

/// The first attempt's facts of `task` that its prompt shows.
fn own_facts(task: &Task) -> PromptContext {
    let mut own = PromptContext::of_task(task);
    own.gates = task
        .gates
        .iter()
        .map(|g| GateInfo {
            name: g.name.clone(),
            evidence: g.evidence.name().to_string(),
            command: crate::plan::shell_words(&g.argv),
            ..GateInfo::default()
        })
        .collect();
    own
}

/// The warning for `job` when its first prompt is over its budget; none when it fits, or when
/// it does not render (the template's own check reports that).
fn over_budget(prompts: &mut FirstPrompts, job: &Job) -> Option<Diagnostic> {
    let text = prompts.render(&job.template, &job.own).ok()?;
    let tokens = crate::tokens::estimate(&text);
    if tokens <= job.budget {
        return None;
    }
    let mut d = Diagnostic::warning(
        "mvk::prompt-over-budget",
        format!(
            "the prompt of `{}` is about {tokens} tokens before any failure is quoted, over its context-tokens={}",
            job.name, job.budget
        ),
    )
    .help("raise budget context-tokens, or shorten the goal or the template: a prompt over its budget can quote nothing of a failure");
    if let Some(span) = job.span {
        d = d.at(span, "the budget the prompt must fit");
    }
    Some(d)
}
