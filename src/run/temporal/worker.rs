//! The worker's side, `mvk worker`: an attempt activity in (fetch the base from the
//! coordinator's repository, `mvk attempt` in the worker's clone, push a passed change to a ref
//! of the coordinator's repository), its small result out.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use temporalio_sdk::runtime::worker_tuner::{FixedSizeSlotSupplier, TunerHolder};
use temporalio_sdk::{ApplicationFailure, Runtime, Worker, WorkerOptions};

use super::wire::{AttemptIn, AttemptOut, Beat, SpentIn};
use super::{CANCEL_GRACE, Endpoint, HEARTBEAT_EVERY, REF_PREFIX, TRANSFER_LIMIT};
use crate::run::attempt::Failure;
use crate::run::attempt_result::AttemptResult;
use crate::run::driver::RunError;

pub(crate) struct WorkerActs {
    /// The worker's clone of the repository.
    repo: PathBuf,
    identity: String,
    /// The one repository this worker makes attempts for: its clone's `origin`. Anyone who
    /// reaches the server can start a workflow; a worker that took any repository would run a
    /// stranger's agent and gates with its own credentials (review r9e, 2).
    origin: String,
    /// Told when this worker's checkout cannot be used: the worker stops taking attempts.
    unusable: Arc<tokio::sync::Notify>,
}

/// A failure of the worker itself (git, its clone, `mvk attempt` not answering): retried,
/// perhaps elsewhere.
pub(super) fn retryable(message: String) -> ActivityError {
    ActivityError::application(ApplicationFailure::new(message))
}

/// The ref a passed change is pushed to: keyed by workflow, task and attempt number. A task's
/// name may hold characters a ref may not (`w[item]`), so it is spelled safely, with a hash.
pub fn change_ref(workflow: &str, task: &str, number: u32) -> String {
    let safe: String = task
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let hash = blake3::hash(task.as_bytes()).to_hex();
    format!("{REF_PREFIX}/{workflow}/{safe}-{}/{number}", &hash[..8])
}

pub(super) async fn git(repo: &Path, args: &[&str]) -> Result<String, String> {
    let out = tokio::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        // A worker has nobody to answer a password prompt: git fails instead of waiting.
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Awaits `work` (a fetch, a push), heartbeating meanwhile: a slow network must not pass for a
/// dead worker (review r9d, F3). A cancellation drops `work`, which kills its git; so does
/// [`TRANSFER_LIMIT`] (a stalled transfer, an ssh prompt nobody answers), and the attempt is
/// made again, perhaps elsewhere.
pub(super) async fn beating<T>(
    ctx: &ActivityContext,
    beat: Beat,
    work: impl std::future::Future<Output = Result<T, ActivityError>>,
) -> Result<T, ActivityError> {
    let mut work = std::pin::pin!(work);
    let limit = tokio::time::sleep(TRANSFER_LIMIT);
    let mut limit = std::pin::pin!(limit);
    loop {
        tokio::select! {
            done = &mut work => return done,
            () = tokio::time::sleep(HEARTBEAT_EVERY) => {
                let _ = ctx.record_heartbeat(beat).await;
            }
            () = &mut limit => {
                return Err(retryable(format!(
                    "git did not finish fetching or pushing within {} s",
                    TRANSFER_LIMIT.as_secs()
                )));
            }
            () = ctx.cancelled() => return Err(ActivityError::cancelled()),
        }
    }
}

/// What `mvk attempt` wrote of its spending so far (`--spending-out`); nothing before it has.
fn spending_so_far(file: &Path) -> SpentIn {
    std::fs::read(file)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<SpentIn>(&bytes).ok())
        .unwrap_or_default()
}

/// `usage` with what lost tries spent (`lost`) added: its tokens counted as input.
fn with_lost(
    usage: crate::run::attempt_result::UsageResult,
    lost: SpentIn,
) -> crate::run::attempt_result::UsageResult {
    crate::run::attempt_result::UsageResult {
        input_tokens: usage.input_tokens.saturating_add(lost.tokens),
        usd_micros: match (usage.usd_micros, lost.usd_micros) {
            (u, 0) => u,
            (u, l) => Some(u.unwrap_or(0).saturating_add(l)),
        },
        ..usage
    }
}

/// What an attempt's result says it spent.
fn spent_of(usage: &crate::run::attempt_result::UsageResult) -> SpentIn {
    let usage = crate::run::judge::adapter::Usage::from(*usage);
    SpentIn {
        tokens: usage.tokens(),
        usd_micros: usage.usd_micros.unwrap_or(0),
    }
}

#[activities]
impl WorkerActs {
    /// One attempt of a task in this worker's clone, from the workflow's base.
    #[activity]
    pub(crate) async fn attempt(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: AttemptIn,
    ) -> Result<AttemptOut, ActivityError> {
        let started = Instant::now();
        let repo = &self.repo;
        // What earlier tries of this activity spent before they were lost (their worker died):
        // it counts against the budget this try is held to.
        let lost = match ctx.heartbeat_details().deserialize::<Beat>() {
            Ok(beat) => beat.map(|b| b.spent).unwrap_or_default(),
            Err(e) => {
                tracing::warn!(error = %e, "the last heartbeat of a lost try cannot be read: what it spent is not counted");
                SpentIn::default()
            }
        };
        let beat = Beat {
            number: input.number,
            spent: lost,
        };
        let (spent, flow_spent) = (input.spent.plus(lost), input.flow_spent.plus(lost));
        // A checkout this worker must not or cannot use: the attempt goes to another worker,
        // and this one stops taking attempts.
        let unusable = |message: String| {
            tracing::error!("{message}; this worker stops");
            self.unusable.notify_one();
            retryable(message)
        };
        if same_repository(repo, &input.repo) {
            return Err(unusable(format!(
                "this worker runs in `{}`, the repository `mvk apply` runs in: it checks each attempt's base out, which would move the coordinator's own checkout; run workers in clones of their own",
                repo.display()
            )));
        }
        if !same_url(&self.origin, &input.repo) {
            return Err(ActivityError::application(
                ApplicationFailure::non_retryable(format!(
                    "refused: this worker makes attempts for `{}` (its clone's origin) only, not `{}`",
                    self.origin, input.repo
                )),
            ));
        }
        // The base, from the coordinator's repository, checked out: `mvk attempt` compiles the
        // flow file of the checkout and starts from the base (`--base`).
        let fetched = format!("refs/mvk/coordinator/{}", input.target);
        let refspec = format!("+refs/heads/{}:{fetched}", input.target);
        let args = ["fetch", "--quiet", "--no-tags", "--", &input.repo, &refspec];
        let fetch = git(repo, &args);
        beating(&ctx, beat, async { fetch.await.map_err(retryable) }).await?;
        git(
            repo,
            &["cat-file", "-e", &format!("{}^{{commit}}", input.base)],
        )
        .await
        .map_err(|e| retryable(format!("the base {} did not arrive: {e}", input.base)))?;
        // Detached, and only over a clean checkout: no branch of the clone moves, and nothing
        // of a person's lost (review r9d, F0b: `checkout -f -B TARGET` did both).
        let dirty = git(repo, &["status", "--porcelain"])
            .await
            .map_err(retryable)?;
        if !dirty.trim().is_empty() {
            return Err(unusable(format!(
                "the worker's checkout `{}` has changes of its own, which a checkout of the base would overwrite: {}",
                repo.display(),
                dirty.lines().take(5).collect::<Vec<_>>().join("; ")
            )));
        }
        // An ignored file where the base has a tracked one is a person's: not overwritten.
        let args = [
            "checkout",
            "--quiet",
            "--no-overwrite-ignore",
            "--detach",
            &input.base,
        ];
        git(repo, &args).await.map_err(retryable)?;
        // The flow this worker would run must be the one the coordinator runs.
        let file = repo.join(&input.file);
        let root = repo.clone();
        let digest = tokio::task::spawn_blocking(move || {
            crate::resolve::compile(
                &file,
                &crate::resolve::Options {
                    repo_root: Some(root),
                    lock: crate::resolve::lock::Mode::Verify,
                    cache_dir: None,
                    confine: None,
                },
            )
            .program
            .map(|p| p.digest.to_string())
        })
        .await
        .map_err(|e| retryable(format!("the compile stopped: {e}")))?;
        if digest.as_deref() != Some(input.digest.as_str()) {
            return Err(ActivityError::application(
                ApplicationFailure::non_retryable(format!(
                    "`{}` at {} in the worker's clone `{}` does not compile to the flow the coordinator runs (digest {} here, {} there)",
                    input.file,
                    input.base,
                    repo.display(),
                    digest.as_deref().unwrap_or("none: it does not compile"),
                    input.digest
                )),
            ));
        }

        // The failure before goes in, and this attempt's comes out, whole, through files in the
        // clone's git directory (the JSON document only summarises a failure).
        let exchange = PathBuf::from(
            git(repo, &["rev-parse", "--absolute-git-dir"])
                .await
                .map_err(retryable)?
                .trim_end(),
        )
        .join("mvk-worker");
        let previous_file = exchange.join("previous.json");
        let failure_file = exchange.join("failure.json");
        // Its own file: a worker's heartbeats must carry its attempt's spending, not another's.
        let spending_file = exchange.join(format!("spending-{}.json", std::process::id()));
        let write = |path: &Path, text: &str| {
            std::fs::write(path, text)
                .map_err(|e| retryable(format!("cannot write `{}`: {e}", path.display())))
        };
        std::fs::create_dir_all(&exchange)
            .map_err(|e| retryable(format!("cannot create `{}`: {e}", exchange.display())))?;
        // A file left by an attempt before must not pass for this one's.
        for file in [&failure_file, &spending_file] {
            match std::fs::remove_file(file) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(retryable(format!(
                        "cannot remove `{}`: {e}",
                        file.display()
                    )));
                }
            }
        }
        let exe = crate::exe::path()
            .map_err(|e| retryable(format!("cannot find mvk's own executable: {e}")))?;
        let mut cmd = tokio::process::Command::new(exe);
        cmd.current_dir(repo)
            .args(["attempt", &input.file, "--task", &input.task, "--json"])
            // A worker killed outright (SIGKILL, OOM) takes its attempt with it: the activity
            // is made again elsewhere, and an orphan would go on spending the agent's budget.
            // The signal is armed by the thread that spawns: a runtime worker thread, which
            // lives as long as the worker.
            .arg(format!("--with-parent={}", std::process::id()))
            .arg("--number")
            .arg(input.number.to_string())
            .arg("--rung")
            .arg(input.rung.to_string())
            .args(["--base", &input.base, "--target", &input.target])
            .arg(format!("--spent={},{}", spent.tokens, spent.usd_micros))
            .arg(format!(
                "--flow-spent={},{}",
                flow_spent.tokens, flow_spent.usd_micros
            ))
            .arg("--spending-out")
            .arg(&spending_file)
            .arg("--failure-out")
            .arg(&failure_file);
        if let Some(previous) = &input.previous {
            let text = serde_json::to_string(previous)
                .map_err(|e| retryable(format!("cannot encode the previous failure: {e}")))?;
            write(&previous_file, &text)?;
            cmd.arg("--previous-failure").arg(&previous_file);
        }
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .map_err(|e| retryable(format!("cannot run `mvk attempt`: {e}")))?;
        let pgid = child.id();
        let mut output = std::pin::pin!(child.wait_with_output());
        let mut said = beat.spent;
        let out = loop {
            tokio::select! {
                out = &mut output => break out,
                () = tokio::time::sleep(HEARTBEAT_EVERY) => {
                    // Heartbeats say this worker lives; their answer carries a cancellation.
                    // They carry what the attempt has spent so far, for a retry should it be lost.
                    // Never less than said before (a file being replaced reads as nothing).
                    let now = beat.spent.plus(spending_so_far(&spending_file));
                    said = said.max_each(now);
                    let _ = ctx.record_heartbeat(Beat { spent: said, ..beat }).await;
                }
                () = ctx.cancelled() => {
                    // `mvk attempt` stops its agent and gates on SIGTERM.
                    if let Some(pid) = pgid.and_then(|p| rustix::process::Pid::from_raw(i32::try_from(p).unwrap_or(0))) {
                        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::TERM);
                    }
                    // Dropping the child now would SIGKILL `mvk attempt` before it stopped its
                    // agent and gates and closed its attempt (review r9d, F1): it is given time.
                    let _ = tokio::time::timeout(CANCEL_GRACE, &mut output).await;
                    return Err(ActivityError::cancelled());
                }
            }
        }
        .map_err(|e| retryable(format!("`mvk attempt` did not finish: {e}")))?;
        // What the attempt spent in all, said at once: the push below, or this worker, may
        // still fail, and a retry is held to what this try left.
        said = said.max_each(beat.spent.plus(spending_so_far(&spending_file)));
        let _ = ctx
            .record_heartbeat(Beat {
                spent: said,
                ..beat
            })
            .await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let result: AttemptResult = serde_json::from_str(&stdout).map_err(|e| {
            retryable(format!(
                "`mvk attempt` gave no result ({e}; exit {:?}): {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        })?;
        let failure: Option<Failure> = std::fs::read_to_string(&failure_file)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str(&text).map_err(|e| e.to_string()))
            .map_err(|e| {
                retryable(format!(
                    "`mvk attempt` left no failure in `{}`: {e}",
                    failure_file.display()
                ))
            })?;
        let passed = result.verdict == "passed";
        let pushed = match (&result.head, passed) {
            (Some(head), true) => {
                let name = change_ref(&input.workflow, &input.task, input.number);
                let refspec = format!("{head}:{name}");
                let args = ["push", "--quiet", "--force", "--", &input.repo, &refspec];
                let push = git(repo, &args);
                let done = Beat {
                    spent: said.max_each(beat.spent.plus(spent_of(&result.usage))),
                    ..beat
                };
                beating(&ctx, done, async { push.await.map_err(retryable) }).await?;
                Some(name)
            }
            _ => None,
        };
        Ok(AttemptOut {
            worker: self.identity.clone(),
            head: if passed { result.head.clone() } else { None },
            pushed,
            failure: if passed { None } else { failure },
            gates: result.gates,
            duration_ms: crate::run::attempt::ms(started.elapsed()),
            worker_run: result.run,
            // Lost tries spent too: the workflow counts it against the budget with this one.
            usage: with_lost(result.usage, lost),
        })
    }
}

/// Whether two repository URLs name the same repository: equal, or local paths (`file://`
/// or plain) that resolve to the same directory.
pub(super) fn same_url(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    // A `host:path` (scp-like) URL is no local path either.
    let local = |u: &str| {
        let scp_like = u.strip_prefix("file://").unwrap_or(u).contains(':');
        local_path(u).filter(|_| !scp_like)
    };
    matches!((local(a), local(b)), (Some(x), Some(y)) if x == y)
}

/// The directory a URL names when it is a local path (`file://…` or plain), resolved; `None`
/// for a URL with a scheme, or a path that does not exist.
pub(super) fn local_path(url: &str) -> Option<PathBuf> {
    let path = url.strip_prefix("file://").unwrap_or(url);
    if path.contains("://") {
        return None;
    }
    std::fs::canonicalize(path).ok()
}

/// Whether `url` names, as a local path, the repository at `repo` (its checkout or its git
/// directory): a worker there would check bases out in the coordinator's own checkout.
pub(super) fn same_repository(repo: &Path, url: &str) -> bool {
    let (Some(there), Ok(here)) = (local_path(url), std::fs::canonicalize(repo)) else {
        return false;
    };
    there == here || there == here.join(".git")
}

/// Refuses to start a worker whose checkout has changes: each attempt checks its base out there.
pub(super) async fn check_worker_checkout(repo: &Path) -> Result<(), String> {
    let dirty = git(repo, &["status", "--porcelain"]).await?;
    if dirty.trim().is_empty() {
        return Ok(());
    }
    Err(format!(
        "`{}` has uncommitted changes ({}); a worker checks each attempt's base out there, which would overwrite them: run `mvk worker` in a clone of its own",
        repo.display(),
        dirty
            .lines()
            .take(3)
            .map(str::trim)
            .collect::<Vec<_>>()
            .join("; ")
    ))
}

/// `mvk worker`: polls `endpoint.task_queue` and makes one attempt at a time in the clone at
/// `repo`, until SIGTERM or Ctrl-C (which let the running attempt finish).
pub(crate) async fn worker(endpoint: &Endpoint, repo: &Path) -> Result<(), RunError> {
    check_worker_checkout(repo)
        .await
        .map_err(|message| RunError::Config { message })?;
    let origin = git(repo, &["config", "--get", "remote.origin.url"])
        .await
        .map(|o| o.trim().to_string())
        .ok()
        .filter(|o| !o.is_empty())
        .ok_or_else(|| RunError::Config {
            message: format!(
                "`{}` has no `origin`: a worker makes attempts only for the repository its clone came from (`git clone URL`, then `mvk worker` in it)",
                repo.display()
            ),
        })?;
    let unusable = Arc::new(tokio::sync::Notify::new());
    let executor = |message: String| RunError::Executor { message };
    let identity = format!(
        "mvk-worker-{}@{}",
        std::process::id(),
        crate::run::driver::host_name()
    );
    let runtime = Runtime::from_current_tokio(Default::default())
        .map_err(|e| executor(format!("cannot start the Temporal runtime: {e}")))?;
    let client = endpoint.client(identity.clone()).await.map_err(executor)?;
    let tuner = TunerHolder::builder()
        .workflow_task_slot_supplier(FixedSizeSlotSupplier::new(1))
        // One attempt at a time: it checks the base out in the clone's own checkout.
        .activity_task_slot_supplier(FixedSizeSlotSupplier::new(1))
        .local_activity_task_slot_supplier(FixedSizeSlotSupplier::new(1))
        .nexus_task_slot_supplier(FixedSizeSlotSupplier::new(1))
        .build();
    let options = WorkerOptions::new(endpoint.task_queue.clone())
        .register_activities(WorkerActs {
            repo: repo.to_path_buf(),
            identity: identity.clone(),
            origin,
            unusable: unusable.clone(),
        })
        .tuner(tuner)
        // Heartbeats reach the server every 2 s rather than every 8 s: they carry what the
        // attempt has spent, which a retry after this worker's death is held to.
        .max_heartbeat_throttle_interval(HEARTBEAT_EVERY)
        .build();
    let mut worker = Worker::new(&runtime, client, options)
        .map_err(|e| executor(format!("cannot start the worker: {e}")))?;
    let stop = worker.shutdown_handle();
    let broke = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let broken = broke.clone();
    tokio::spawn(async move {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
            () = unusable.notified() => broken.store(true, std::sync::atomic::Ordering::SeqCst),
        }
        stop();
    });
    worker
        .run()
        .await
        .map_err(|e| executor(format!("the worker failed: {e}")))?;
    if broke.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(RunError::Config {
            message: format!(
                "the worker stopped: its checkout `{}` cannot be used (see above); give it a clean clone of its own",
                repo.display()
            ),
        });
    }
    Ok(())
}
