//! A `sandbox` (IR) and a process about to start in; out comes the process rewritten to start
//! through mvk's hidden trampoline, `mvk __sandbox POLICY -- PROGRAM ARG…`, which confines itself
//! and then runs PROGRAM in a PID namespace of its own under a tiny init ([`pidns`]), ending as
//! PROGRAM did (the trampoline keeps its pid and process group, so timeouts and the group kill
//! work as for any child, and nothing PROGRAM starts outlives it).
//!
//! The trampoline, single-threaded and before anything else: without network, it enters a fresh
//! network namespace (no interface up; through a user namespace when mvk is not root); then a
//! PID namespace for what it starts; then Landlock (ABI 6) refuses every write outside the worktree, a temporary directory of the
//! process's own, a few devices (`/dev/null`, …) and the paths the loop grants, and every signal
//! to a process outside the sandbox (mvk among them). An agent may also commit in its worktree,
//! but never touch what the repository already holds: its HEAD is detached (the worktree's own
//! git directory is granted, no ref is), and the objects it writes go to a directory of the
//! attempt's own (`GIT_OBJECT_DIRECTORY`, the shared store as a read-only alternate), which mvk,
//! outside the sandbox, copies into the shared store object by object, each checked against its
//! name, after the agent exits ([`absorb_objects`]); mvk then sets the attempt's branch from the
//! worktree's HEAD. Without network the loopback interface is brought up, so that tests can bind
//! 127.0.0.1. Applying it in a child of mvk, which then starts the namespace's init as a program of its own, needs no `unsafe` (`pre_exec` or a bare `fork` would).
//!
//! The environment starts empty: [`BASE_ENV`] from mvk's, the variables the sandbox names, then
//! `TMPDIR` and what mvk sets (`MVK_*`, the definition's `env`). Where the kernel cannot confine,
//! [`preflight`] warns, or refuses a `required=#true` sandbox before anything runs; the
//! trampoline refuses too, so a sandbox that is required never runs unconfined.

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::{Deserialize, Serialize};

use crate::ir::{Program, Sandbox};
use crate::run::exec::process::{ProcessError, ProcessSpec};

mod pidns;

/// The hidden first argument that makes `mvk` the trampoline.
pub const TRAMPOLINE: &str = "__sandbox";
/// `mvk __sandbox probe`: confine a throwaway process and print what the kernel allowed.
const PROBE: &str = "probe";
/// `mvk __sandbox probe --pretend-unsupported`: answer as a kernel without support would.
const PRETEND_FLAG: &str = "--pretend-unsupported";
/// The trampoline's exit code when it refuses to run a required sandbox unconfined.
pub const REFUSED_EXIT: u8 = 125;

/// Variables of mvk's environment that reach a sandboxed process without being named.
pub const BASE_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TERM",
    "TZ",
];

/// Devices every process writes to; granted for writing in every sandbox. Not `/dev/tty`: the
/// terminal mvk runs in is the user's, and a program that can open it for ioctls can type into
/// it (TIOCSTI) what the user's shell runs, unconfined, once mvk exits. Without the grant
/// Landlock (ABI 5 and later) refuses it every device ioctl on the terminal however it opened
/// it; in a PID namespace the program has no controlling terminal either ([`pidns`]).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// The Landlock ABI mvk asks for: writes, truncation, renames across directories, device
/// ioctls, and the signal and abstract-socket scopes.
const ABI: landlock::ABI = landlock::ABI::V6;

/// What the trampoline is told: exactly what it may write, and what to do where it cannot confine.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Policy {
    /// mvk's own places for the process (its worktree, temporary directory, devices).
    write: Vec<PathBuf>,
    /// The sandbox's grants, which the trampoline opens once and checks against `protected`
    /// before it hands the kernel the very directories it checked (see [`open_grants`]).
    #[serde(default)]
    grants: Vec<PathBuf>,
    #[serde(default)]
    protected: Vec<Protected>,
    network: bool,
    required: bool,
    /// The tests' stand-in for an old kernel, from mvk's own environment (see
    /// [`pretend_unsupported`]); never from the confined process's.
    #[serde(default)]
    pretend: bool,
}

/// What a sandboxed process may write besides the sandbox's grants.
pub struct Grants<'a> {
    /// Its working directory (the worktree).
    pub cwd: &'a Path,
    /// Its own temporary directory, emptied first; `TMPDIR` names it.
    pub tmp: PathBuf,
    /// Where the objects of its commits go, emptied first, when it may commit in `cwd`'s
    /// repository (agents may; gates only check): see [`absorb_objects`].
    pub objects: Option<PathBuf>,
    /// Where mvk keeps what no confined process may write: no grant may lead there.
    pub protected: &'a [Protected],
}

/// A place where mvk keeps what no confined process may write, as the kernel finds it (links
/// resolved when the run began), and what it holds, for the refusal.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Protected {
    pub what: String,
    pub place: PathBuf,
}

impl Protected {
    pub fn new(what: &str, place: &Path) -> Self {
        Protected {
            what: what.to_string(),
            place: resolved(place),
        }
    }
}

/// The protected place that a grant leading to `path` (links resolved) would expose: one that
/// holds it, or one that lies inside it.
fn exposed<'p>(path: &Path, protected: &'p [Protected]) -> Option<&'p Protected> {
    protected
        .iter()
        .find(|p| p.place.starts_with(path) || path.starts_with(&p.place))
}

/// Whether mvk's own environment holds the tests' stand-in for a kernel without Landlock or
/// network namespaces ([`crate::env::MVK_SANDBOX_UNSUPPORTED`]). Read once, by mvk, and passed
/// to the trampoline inside its policy: what a loop's `env` gives an agent or a gate never
/// reaches this decision, and the trampoline ignores the variable.
pub fn pretend_unsupported() -> bool {
    static PRETEND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PRETEND.get_or_init(|| std::env::var_os(crate::env::MVK_SANDBOX_UNSUPPORTED).is_some())
}

/// Why the sandbox cannot be set up or is refused.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "{owner} requires a sandbox this machine cannot provide: {problems}; run it on a kernel with Landlock (5.13 or later, ABI 6 for the signal scope) and network namespaces, or write `required=#false` to run it unconfined with a warning"
    )]
    Unsupported { owner: String, problems: String },
    #[error("cannot ask the kernel what it can confine (`mvk {TRAMPOLINE} {PROBE}`)")]
    Probe {
        #[source]
        source: io::Error,
    },
    #[error("the sandbox probe answered `{answer}`")]
    ProbeAnswer { answer: String },
    #[error(
        "{owner}: the sandbox grants `{granted}`, which would let a confined process write {what} (`{}`); grant a narrower path that holds neither (`~/.cache/pip`, not `~/.cache`)",
        place.display()
    )]
    Exposes {
        owner: String,
        granted: String,
        what: String,
        place: PathBuf,
    },
}

/// What this machine can confine, as a throwaway process found out.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Support {
    /// `full`, `partial` or `none`: how much of Landlock ABI 6 the kernel enforces.
    pub landlock: String,
    /// Why the network cannot be taken away, if it cannot.
    pub network: Option<String>,
    /// Why the process cannot have a PID namespace of its own (so that what it starts dies
    /// with it), if it cannot.
    #[serde(default)]
    pub pid: Option<String>,
}

/// Asks a child trampoline what the kernel allows.
pub fn probe() -> Result<Support, SandboxError> {
    let exe = crate::exe::path().map_err(|source| SandboxError::Probe { source })?;
    let mut args = vec![TRAMPOLINE, PROBE];
    if pretend_unsupported() {
        args.push(PRETEND_FLAG);
    }
    let out = std::process::Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| SandboxError::Probe { source })?;
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    serde_json::from_str(&answer).map_err(|_| SandboxError::ProbeAnswer { answer })
}

/// Every sandbox of `program` (each task's, its agents' own), checked against what the kernel
/// allows before anything runs: out come warnings for those that will run unconfined, or the
/// refusal of one that is required.
pub fn preflight(program: &Program) -> Result<Vec<String>, SandboxError> {
    let owned = sandboxes(program);
    if owned.is_empty() {
        return Ok(Vec::new());
    }
    let support = probe()?;
    let mut warnings = Vec::new();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    for (owner, sandbox) in &owned {
        for granted in &sandbox.write {
            let missing = expand(granted, home.as_deref()).is_none_or(|p| !p.exists());
            if missing {
                warnings.push(format!(
                    "{owner}: the sandbox grants `{granted}`, which does not exist: nothing is granted there"
                ));
            }
        }
    }
    for (owner, sandbox) in owned {
        let problems = problems(&support, sandbox);
        if problems.is_empty() {
            continue;
        }
        let problems = problems.join("; ");
        if sandbox.required {
            return Err(SandboxError::Unsupported { owner, problems });
        }
        warnings.push(format!(
            "{owner} runs less confined than its sandbox says: {problems}"
        ));
    }
    Ok(warnings)
}

/// Every sandbox of `program` with whose it is: each task's, and its agents' own.
fn sandboxes(program: &Program) -> Vec<(String, &Sandbox)> {
    let mut owned: Vec<(String, &Sandbox)> = Vec::new();
    for task in &program.tasks {
        if let Some(s) = &task.sandbox {
            owned.push((format!("task `{}`", task.name), s));
        }
        for (agent, _) in task.agents() {
            if let Some(s) = &agent.sandbox {
                owned.push((format!("agent `{}` of task `{}`", agent.name, task.name), s));
            }
        }
    }
    owned
}

/// Refuses a `write` grant that holds, or lies inside, a place where mvk keeps what a confined
/// process must not write: `protected` names each (the main checkout with its ledger, the
/// repository's git directory, the attempt worktrees with mvk's trusted index copies, the
/// import cache). A grant of `~/.cache` (where the worktrees live by default) would let an
/// agent edit another attempt's worktree, or the index copy mvk trusts for its next capture.
/// Checked again at each start ([`confine`], then the trampoline on what it opened): a link a
/// confined process planted under one grant must not lead the next one into those places.
pub fn refuse_exposing_grants(
    program: &Program,
    protected: &[Protected],
) -> Result<(), SandboxError> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    for (owner, sandbox) in sandboxes(program) {
        for granted in &sandbox.write {
            let Some(path) = expand(granted, home.as_deref()) else {
                continue;
            };
            if let Some(p) = exposed(&resolved(&path), protected) {
                return Err(SandboxError::Exposes {
                    owner,
                    granted: granted.clone(),
                    what: p.what.clone(),
                    place: p.place.clone(),
                });
            }
        }
    }
    Ok(())
}

/// `p` with the symbolic links of its longest existing ancestor resolved, the rest appended:
/// what the kernel will find there (a place that does not exist yet is compared as it will be).
fn resolved(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = p;
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            return rest.iter().rev().fold(real, |acc, part| acc.join(part));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return p.to_path_buf(),
        }
    }
}

fn problems(support: &Support, sandbox: &Sandbox) -> Vec<String> {
    let mut out = Vec::new();
    match support.landlock.as_str() {
        "full" => {}
        "partial" => out.push(
            "this kernel enforces only part of Landlock ABI 6 (writes may be confined, signals to mvk are not)".to_string(),
        ),
        _ => out.push("this kernel does not enforce Landlock: writes are not confined".to_string()),
    }
    if !sandbox.network
        && let Some(why) = &support.network
    {
        out.push(format!("the network cannot be turned off ({why})"));
    }
    if let Some(why) = &support.pid {
        out.push(format!(
            "processes it starts can outlive it, as without a sandbox ({why})"
        ));
    }
    out
}

/// Rewrites `ps` to start through the trampoline under `sandbox`, with the sandbox's environment.
pub fn confine(
    ps: &mut ProcessSpec,
    sandbox: &Sandbox,
    grants: &Grants<'_>,
) -> Result<(), ProcessError> {
    let fail = |source: io::Error| ProcessError::Sandbox {
        program: ps.program.clone(),
        source,
    };
    match std::fs::remove_dir_all(&grants.tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(fail(e)),
        _ => {}
    }
    std::fs::create_dir_all(&grants.tmp).map_err(fail)?;

    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut write: Vec<PathBuf> = vec![grants.cwd.to_path_buf(), grants.tmp.clone()];
    write.extend(DEVICES.iter().map(PathBuf::from));
    // A grant was checked when the run began; a confined process that may write under one may
    // since have put a link where another was (review r8e).
    let mut granted = Vec::new();
    for g in &sandbox.write {
        let Some(path) = expand(g, home.as_deref()) else {
            continue;
        };
        if let Some(p) = exposed(&resolved(&path), grants.protected) {
            return Err(ProcessError::GrantExposes {
                program: ps.program.clone(),
                granted: g.clone(),
                what: p.what.clone(),
                place: p.place.clone(),
            });
        }
        granted.push(path);
    }
    let mut git_env = Vec::new();
    if let Some(objects) = &grants.objects
        && let Some(commit) = prepare_commit(grants.cwd, objects).map_err(fail)?
    {
        write.extend([commit.admin, objects.clone()]);
        git_env = vec![
            ("GIT_OBJECT_DIRECTORY".to_string(), path_text(objects)),
            (
                "GIT_ALTERNATE_OBJECT_DIRECTORIES".to_string(),
                alternate_entry(&commit.shared),
            ),
        ];
    }

    // What the caller strips (a gate's credentials not named in its own `env`) stays stripped,
    // even when the sandbox grants it to the agent.
    let stripped = std::mem::take(&mut ps.env_remove);
    let mut env: Vec<(String, String)> = BASE_ENV
        .iter()
        .copied()
        .chain(sandbox.env.iter().map(String::as_str))
        .filter(|name| !stripped.iter().any(|r| r == name))
        .filter_map(|name| std::env::var(name).ok().map(|v| (name.to_string(), v)))
        .collect();
    env.push(("TMPDIR".into(), grants.tmp.display().to_string()));
    env.append(&mut ps.env);
    // Last, so that nothing the definition sets can point the agent's git at the shared store.
    env.append(&mut git_env);
    ps.env = env;
    ps.env_clear = true;

    let path = ps
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone());
    if find_program(&ps.program, &ps.cwd, path.as_deref()).is_none() {
        return Err(ProcessError::ProgramNotFound {
            program: ps.program.clone(),
        });
    }
    let policy = Policy {
        write,
        grants: granted,
        protected: grants.protected.to_vec(),
        network: sandbox.network,
        required: sandbox.required,
        pretend: pretend_unsupported(),
    };
    let policy = serde_json::to_string(&policy).map_err(|e| fail(io::Error::other(e)))?;
    let exe = crate::exe::path().map_err(fail)?;
    let mut args = vec![
        TRAMPOLINE.to_string(),
        policy,
        "--".into(),
        ps.program.clone(),
    ];
    args.append(&mut ps.args);
    ps.args = args;
    ps.program = exe.display().to_string();
    Ok(())
}

/// A granted path as the kernel sees it: `~/…` under `home`; `None` when there is no home to
/// expand against (nothing is granted rather than something unmeant).
fn expand(granted: &str, home: Option<&Path>) -> Option<PathBuf> {
    match granted.strip_prefix('~') {
        Some(rest) => home.map(|h| h.join(rest.trim_start_matches('/'))),
        None => Some(PathBuf::from(granted)),
    }
}

/// What an agent that commits in a linked worktree may write, besides its own objects.
struct CommitGrant {
    /// The worktree's own git directory (`<common>/worktrees/<name>`: HEAD, index, logs).
    admin: PathBuf,
    /// The shared object store, which the agent reads as an alternate and never writes.
    shared: PathBuf,
}

/// Readies the worktree at `cwd` for an agent's commits: an empty `objects` directory, and HEAD
/// detached at its commit, so that a commit moves no ref (refs live in the shared git
/// directory, which stays read-only; mvk sets the attempt's branch from HEAD afterwards).
/// `None` when `cwd` is not a linked worktree (a repository of its own is granted whole).
fn prepare_commit(cwd: &Path, objects: &Path) -> io::Result<Option<CommitGrant>> {
    let Ok(repo) = git2::Repository::open(cwd) else {
        return Ok(None);
    };
    let admin = repo.path().to_path_buf();
    if admin.starts_with(cwd) {
        return Ok(None);
    }
    if let Ok(head) = repo.head()
        && head.is_branch()
        && let Some(at) = head.target()
    {
        repo.set_head_detached(at).map_err(io::Error::other)?;
    }
    match std::fs::remove_dir_all(objects) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::create_dir_all(objects.join("info"))?;
    std::fs::create_dir_all(objects.join("pack"))?;
    Ok(Some(CommitGrant {
        admin,
        shared: repo.commondir().join("objects"),
    }))
}

/// The most mvk reads from an agent's object directory: one object (GitHub refuses files over
/// 100 MB too), all of them together, how many there are (each costs a read and a write), and
/// what reading them inflates. An object compresses a thousandfold or more (a zip bomb), so
/// sizes are read from the headers before anything is inflated.
pub const OBJECT_LIMITS: Limits = Limits {
    object: 100 << 20,
    total: 1 << 30,
    count: 100_000,
    // Reading a delta inflates its chain of bases again (libgit2 caches only bases under
    // 1 MiB, and not reliably): 200 versions of a 300 KB file in git's chains of 50 inflate
    // about 1.5 GB; 32 GiB is minutes of work at most.
    work: 32 << 30,
};

/// Bytes of inflated objects: per object, and all an attempt's together (each object once);
/// objects listed; bytes inflated to read them all (a delta's bases once per read).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub object: usize,
    pub total: usize,
    pub count: usize,
    pub work: u64,
}

/// Why an agent's objects were not added to the repository.
#[derive(Debug, thiserror::Error)]
pub enum AbsorbError {
    /// The agent's fault: its attempt fails, the run goes on.
    #[error(
        "object {id} holds {size} bytes, more than the {limit} bytes mvk accepts from an agent"
    )]
    ObjectTooLarge {
        id: git2::Oid,
        size: usize,
        limit: usize,
    },
    #[error("the agent's objects hold more than the {limit} bytes mvk accepts from one attempt")]
    TooMuch { limit: usize },
    #[error("the agent wrote more than the {limit} objects mvk accepts from one attempt")]
    TooMany { limit: usize },
    #[error(
        "reading the agent's objects would inflate more than the {limit} bytes mvk inflates \
         for one attempt (a delta's bases count again at each read)"
    )]
    TooMuchWork { limit: u64 },
    /// A pack whose reading mvk cannot bound: its deltas' bases are counted too.
    #[error("the agent's pack {pack} {why}")]
    Pack { pack: String, why: String },
    /// The repository's (or mvk's) fault.
    #[error(transparent)]
    Git(#[from] git2::Error),
    /// mvk's fault: its copy of the agent's objects could not be written.
    #[error("cannot {action} `{path}`: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

/// Copies what a sandboxed agent committed into the shared object store of the repository at
/// `repo`, from the attempt's own `objects` directory (loose objects and packs), then removes
/// that directory. Each object is read, hashed and written by mvk: one whose content does not
/// match its name is left out, and nothing already in the store is rewritten. Out comes how
/// many objects were added; nothing when there is no such directory. Sizes are checked against
/// [`OBJECT_LIMITS`] before any object is read whole; over them, nothing is added.
pub fn absorb_objects(repo: &Path, objects: &Path) -> Result<usize, AbsorbError> {
    absorb_objects_within(repo, objects, OBJECT_LIMITS)
}

/// [`absorb_objects`] with the given limits.
pub fn absorb_objects_within(
    repo: &Path,
    objects: &Path,
    limits: Limits,
) -> Result<usize, AbsorbError> {
    // The directory is mvk's (its parent is out of the agent's reach), but never follow one
    // that is not a directory itself.
    if !std::fs::symlink_metadata(objects).is_ok_and(|m| m.is_dir()) {
        return Ok(0);
    }
    // What mvk reads is a copy out of the agent's reach (its parent is mvk's): no file the
    // agent could not be stopped from keeping (an `alternates`, a multi-pack index) is seen,
    // no FIFO opened, and nothing the agent left running rewrites a pack after its check.
    let mut name = objects.file_name().unwrap_or_default().to_os_string();
    name.push(".checked");
    let checked = objects.with_file_name(name);
    let added = fresh_dir(&checked)
        .and_then(|()| crate::run::git::agent_pack::copy_checked(objects, &checked, limits))
        .and_then(|()| absorb_checked(repo, &checked, limits));
    // Best effort: the directories are the attempt's own, and a leftover is only space (a
    // file the agent made immutable stays).
    let _ = std::fs::remove_dir_all(objects);
    let _ = std::fs::remove_dir_all(&checked);
    added
}

/// An empty directory at `dir`, only mvk's user's: a leftover of a crash is removed first.
fn fresh_dir(dir: &Path) -> Result<(), AbsorbError> {
    use std::os::unix::fs::DirBuilderExt;
    let failed = |action| {
        move |source| AbsorbError::Io {
            action,
            path: dir.to_path_buf(),
            source,
        }
    };
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(failed("remove")(e)),
        _ => {}
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(failed("create"))
}

fn absorb_checked(repo: &Path, objects: &Path, limits: Limits) -> Result<usize, AbsorbError> {
    let main = git2::Repository::open(repo)?;
    let shared = main.odb()?;
    let theirs = git2::Odb::new()?;
    theirs.add_disk_alternate(&path_text(objects))?;
    // A pack the agent made may hold deltas against objects of the shared store: read through
    // both (alternates are never written to).
    let again = git2::Repository::open(repo)?;
    let both = again.odb()?;
    both.add_disk_alternate(&path_text(objects))?;
    // A delta's header gives only what it makes, not the bases its read inflates.
    crate::run::git::agent_pack::check(&objects.join("pack"), &shared, limits)?;
    let mut ids = Vec::new();
    // Stop listing past the limit: the list itself is mvk's memory.
    let listed = theirs.foreach(|id| {
        ids.push(*id);
        ids.len() <= limits.count
    });
    if ids.len() > limits.count {
        return Err(AbsorbError::TooMany {
            limit: limits.count,
        });
    }
    listed?;
    // Every size first, from the headers: nothing is inflated when the whole is too big.
    let mut new = Vec::new();
    let mut total = 0usize;
    for id in ids {
        if shared.exists(id) {
            continue;
        }
        let Ok((size, _)) = both.read_header(id) else {
            continue;
        };
        if size > limits.object {
            return Err(AbsorbError::ObjectTooLarge {
                id,
                size,
                limit: limits.object,
            });
        }
        total = total.saturating_add(size);
        if total > limits.total {
            return Err(AbsorbError::TooMuch {
                limit: limits.total,
            });
        }
        new.push(id);
    }
    let mut added = 0;
    for id in new {
        let Ok(object) = both.read(id) else {
            continue;
        };
        // The header may lie (a loose object's size field): what was inflated counts.
        if object.len() > limits.object {
            return Err(AbsorbError::ObjectTooLarge {
                id,
                size: object.len(),
                limit: limits.object,
            });
        }
        if git2::Oid::hash_object(object.kind(), object.data())? != id {
            continue;
        }
        shared.write(object.kind(), object.data())?;
        added += 1;
    }
    Ok(added)
}

fn path_text(p: &Path) -> String {
    p.display().to_string()
}

/// `path` as one entry of `GIT_ALTERNATE_OBJECT_DIRECTORIES`, a `:`-separated list: quoted the
/// C way (which git reads when an entry starts with `"`) when it holds a `:` or a `"`.
fn alternate_entry(path: &Path) -> String {
    let text = path_text(path);
    if !text.contains([':', '"']) {
        return text;
    }
    let escaped = text.replace('\\', r"\\").replace('"', r#"\""#);
    format!("\"{escaped}\"")
}

/// `program` as `execvp` would find it: a path (relative to `cwd`), or a name on `path`.
fn find_program(program: &str, cwd: &Path, path: Option<&str>) -> Option<PathBuf> {
    if program.contains('/') {
        let p = cwd.join(program);
        return p.is_file().then_some(p);
    }
    path?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| cwd.join(d).join(program))
        .find(|p| p.is_file())
}

/// The trampoline: `ARGS` are what follows `mvk __sandbox`. Never returns when it runs the
/// program; returns an exit code when it cannot or must not.
pub fn trampoline(args: &[OsString]) -> ExitCode {
    // Whatever the environment says: the stand-in for an old kernel comes from mvk, in the
    // arguments (see `pretend_unsupported`).
    let pretending = format!("{} is set for mvk", crate::env::MVK_SANDBOX_UNSUPPORTED);
    if args.first().is_some_and(|a| a == PROBE) {
        let support = if args.get(1).is_some_and(|a| a == PRETEND_FLAG) {
            Support {
                landlock: "none".into(),
                network: Some(pretending.clone()),
                pid: Some(pretending),
            }
        } else {
            let network = isolate_network().err();
            Support {
                network,
                pid: pidns::isolate().err().map(|e| e.to_string()),
                landlock: restrict(&[], Vec::new()).unwrap_or_else(|_| "none".into()),
            }
        };
        println!("{}", serde_json::to_string(&support).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    if args.first().is_some_and(|a| a == pidns::INIT) {
        return pidns::init(&args[1..]);
    }
    if args.first().is_some_and(|a| a == pidns::ALONE) {
        return pidns::alone(&args[1..]);
    }
    let policy = args
        .first()
        .and_then(|a| a.to_str())
        .and_then(|a| serde_json::from_str::<Policy>(a).ok());
    let (Some(policy), Some(sep), Some(program)) = (policy, args.get(1), args.get(2)) else {
        eprintln!("mvk sandbox: usage: mvk {TRAMPOLINE} POLICY -- PROGRAM [ARG…]");
        return ExitCode::from(REFUSED_EXIT);
    };
    if sep != "--" {
        eprintln!("mvk sandbox: usage: mvk {TRAMPOLINE} POLICY -- PROGRAM [ARG…]");
        return ExitCode::from(REFUSED_EXIT);
    }
    // Best effort on a broken stderr: the refusal's exit code still says it.
    let say = |text: String| {
        let _ = writeln!(io::stderr(), "mvk sandbox: {text}");
    };
    let pretend = policy.pretend;
    // First: each grant is opened once, checked where it leads, and that very directory is
    // what Landlock grants, so no link planted between mvk's check and now can move it.
    let opened = match open_grants(&policy.grants, &policy.protected) {
        Ok(opened) => opened,
        Err(why) => {
            say(format!("refusing to run: {why}"));
            return ExitCode::from(REFUSED_EXIT);
        }
    };
    if !policy.network {
        let done = if pretend {
            Err(pretending.clone())
        } else {
            isolate_network()
        };
        if let Err(why) = done {
            if policy.required {
                say(format!(
                    "refusing to run: the network cannot be turned off ({why})"
                ));
                return ExitCode::from(REFUSED_EXIT);
            }
            say(format!("the network stays on: {why}"));
        }
    }
    // Before Landlock and the capability drop: entering the namespace needs the privilege.
    let pids = if pretend {
        Err(pidns::Unisolated::Refused(pretending))
    } else {
        pidns::isolate()
    };
    let level = if pretend {
        Ok("none".to_string())
    } else {
        restrict(&policy.write, opened)
    };
    match level {
        Ok(level) if level == "full" => {}
        Ok(level) | Err(level) => {
            if policy.required {
                say(format!(
                    "refusing to run: Landlock is not fully enforced ({level})"
                ));
                return ExitCode::from(REFUSED_EXIT);
            }
            say(format!("writes are not fully confined: Landlock {level}"));
        }
    }
    if !pretend && let Err(why) = drop_capabilities() {
        if policy.required {
            say(format!(
                "refusing to run: its capabilities cannot be dropped ({why})"
            ));
            return ExitCode::from(REFUSED_EXIT);
        }
        say(format!("the program keeps its capabilities: {why}"));
    }
    let own_pids = match pids {
        Ok(()) => true,
        Err(pidns::Unisolated::HalfEntered(why)) => {
            // Required or not: the program cannot run well in what is left (see `Unisolated`).
            say(format!(
                "refusing to run: {}",
                pidns::Unisolated::HalfEntered(why)
            ));
            return ExitCode::from(REFUSED_EXIT);
        }
        Err(pidns::Unisolated::Refused(why)) => {
            if policy.required {
                say(format!(
                    "refusing to run: it cannot have a PID namespace of its own, so what it starts could outlive it ({why})"
                ));
                return ExitCode::from(REFUSED_EXIT);
            }
            say(format!(
                "processes it starts can outlive it (no PID namespace of its own: {why})"
            ));
            false
        }
    };
    if own_pids {
        // Once the namespace is entered, the program cannot run without its init: its first
        // child would become the namespace's PID 1, and every fork after that child's end fails.
        return match pidns::run(program, &args[3..]) {
            Ok(code) => code,
            Err(why) => {
                say(format!("refusing to run: {why}"));
                ExitCode::from(REFUSED_EXIT)
            }
        };
    }
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new(program).args(&args[3..]).exec();
    say(format!("cannot run `{}`: {err}", program.to_string_lossy()));
    ExitCode::from(if err.kind() == io::ErrorKind::NotFound {
        127
    } else {
        126
    })
}

/// Drops every capability this process holds, for good: Landlock confines paths, not
/// privileges, and as root (whose network namespace is entered without a user namespace) the
/// program would keep them all: `mknod` a device node of the disk where it may write and write
/// the disk through it, or `chattr +i` a file mvk must delete. The bounding set goes first, so
/// that `exec` gives root none back; then the ambient, inheritable, permitted and effective
/// sets. A process that holds none has nothing to drop.
fn drop_capabilities() -> Result<(), String> {
    use rustix::thread::{CapabilitySet, CapabilitySets, capabilities, set_capabilities};
    let held = capabilities(None).map_err(|e| format!("cannot read them: {e}"))?;
    if held.permitted.is_empty() && held.effective.is_empty() && held.inheritable.is_empty() {
        return Ok(());
    }
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(63)
        .min(63);
    for cap in 0..=last {
        match rustix::thread::remove_capability_from_bounding_set(CapabilitySet::from_bits_retain(
            1 << cap,
        )) {
            // A number this kernel does not know.
            Ok(()) | Err(rustix::io::Errno::INVAL) => {}
            Err(e) => {
                return Err(format!(
                    "cannot drop capability {cap} from the bounding set: {e}"
                ));
            }
        }
    }
    rustix::thread::clear_ambient_capability_set()
        .map_err(|e| format!("cannot clear the ambient set: {e}"))?;
    let none = CapabilitySets {
        effective: CapabilitySet::empty(),
        permitted: CapabilitySet::empty(),
        inheritable: CapabilitySet::empty(),
    };
    set_capabilities(None, none).map_err(|e| format!("cannot clear them: {e}"))
}

/// Moves this process into a fresh network namespace (as non-root, inside a user namespace
/// that maps the user to itself) and brings its loopback interface up: 127.0.0.1 works, nothing
/// else is reachable.
fn isolate_network() -> Result<(), String> {
    use nix::sched::{CloneFlags, unshare};
    if unshare(CloneFlags::CLONE_NEWNET).is_err() {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("no network namespace: {e}"))?;
        map_user(uid, gid)?;
    }
    loopback_up().map_err(|e| format!("cannot bring the loopback interface up: {e}"))
}

/// Maps UID and GID to themselves in the user namespace this process just entered.
fn map_user(uid: u32, gid: u32) -> Result<(), String> {
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|e| format!("cannot write `{file}`: {e}"))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1"))
}

/// `ip link set lo up`, as one rtnetlink request (`RTM_NEWLINK` with `IFF_UP` on `lo`) and the
/// kernel's acknowledgement: a few bytes, so no netlink crate and no `ip` binary.
fn loopback_up() -> io::Result<()> {
    use rustix::net::{
        AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, netdevice,
        netlink::SocketAddrNetlink, recv, sendto, socket_with,
    };
    const RTM_NEWLINK: u16 = 16;
    const NLM_F_REQUEST: u16 = 1;
    const NLM_F_ACK: u16 = 4;
    const NLMSG_ERROR: u16 = 2;
    const IFF_UP: u32 = 1;
    let fd = socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        None,
    )?;
    let index = netdevice::name_to_index(&fd, "lo")?;
    let index = i32::try_from(index).map_err(io::Error::other)?;
    // struct nlmsghdr (16 bytes) then struct ifinfomsg (16 bytes), native byte order.
    let mut msg = Vec::with_capacity(32);
    msg.extend(32u32.to_ne_bytes());
    msg.extend(RTM_NEWLINK.to_ne_bytes());
    msg.extend((NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    msg.extend(1u32.to_ne_bytes()); // sequence number
    msg.extend(0u32.to_ne_bytes()); // port id: the kernel's
    msg.extend([0u8, 0u8]); // family AF_UNSPEC, padding
    msg.extend(0u16.to_ne_bytes()); // device type
    msg.extend(index.to_ne_bytes());
    msg.extend(IFF_UP.to_ne_bytes()); // flags
    msg.extend(IFF_UP.to_ne_bytes()); // change mask
    sendto(&fd, &msg, SendFlags::empty(), &SocketAddrNetlink::new(0, 0))?;
    let mut answer = [0u8; 256];
    let (got, _) = recv(&fd, &mut answer, RecvFlags::empty())?;
    // The acknowledgement: a header of type NLMSG_ERROR, then the error code (0: done).
    let field = |at: usize, len: usize| answer.get(at..at + len).filter(|_| at + len <= got);
    let kind = field(4, 2)
        .and_then(|b| b.try_into().ok())
        .map(u16::from_ne_bytes);
    let code = field(16, 4)
        .and_then(|b| b.try_into().ok())
        .map(i32::from_ne_bytes);
    match (kind, code) {
        (Some(NLMSG_ERROR), Some(0)) => Ok(()),
        (Some(NLMSG_ERROR), Some(code)) => Err(io::Error::from_raw_os_error(-code)),
        _ => Err(io::Error::other(
            "the kernel's answer is not an acknowledgement",
        )),
    }
}

/// A grant held open: the directory or file it led to when it was checked.
struct Opened {
    fd: landlock::PathFd,
    file: bool,
}

/// Opens each of `grants` (one that does not exist grants nothing, as Landlock would) and
/// finds where the open descriptor leads; one that leads to or holds a `protected` place is
/// refused, with why.
fn open_grants(grants: &[PathBuf], protected: &[Protected]) -> Result<Vec<Opened>, String> {
    use std::os::fd::{AsFd, AsRawFd};
    let mut opened = Vec::new();
    for granted in grants {
        let Ok(fd) = landlock::PathFd::new(granted) else {
            continue;
        };
        let raw = fd.as_fd().as_raw_fd();
        let leads = std::fs::read_link(format!("/proc/self/fd/{raw}")).map_err(|e| {
            format!(
                "cannot tell where the grant `{}` leads (/proc/self/fd: {e})",
                granted.display()
            )
        })?;
        if let Some(p) = exposed(&leads, protected) {
            return Err(format!(
                "the sandbox grants `{}`, which now leads to {} (`{}`)",
                granted.display(),
                p.what,
                p.place.display()
            ));
        }
        let file = rustix::fs::fstat(&fd)
            .map(|st| {
                rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory
            })
            .unwrap_or(false);
        opened.push(Opened { fd, file });
    }
    Ok(opened)
}

/// Applies Landlock to this process: writes only beneath `write` and the `opened` grants, no
/// signals out of the domain. Out comes how much the kernel enforces: `full`, `partial` or
/// `none`.
fn restrict(write: &[PathBuf], opened: Vec<Opened>) -> Result<String, String> {
    use landlock::{
        Access, AccessFs, PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
        Scope, path_beneath_rules,
    };
    // Every write is handled, so what no rule grants is denied everywhere: device nodes are
    // never made, not even where the program may write (a node of the disk would let it
    // write anything). No device can be under a granted path then, so ioctls on devices stay
    // granted for the few granted device files (`/dev/null` and the like, never a terminal:
    // see `DEVICES`), and are refused on every other device, however it was opened.
    let granted = AccessFs::from_write(ABI) & !(AccessFs::MakeBlock | AccessFs::MakeChar);
    let status = Ruleset::default()
        .handle_access(AccessFs::from_write(ABI))
        .and_then(|r| r.scope(Scope::from_all(ABI)))
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(write, granted)))
        .and_then(|r| {
            r.add_rules(opened.into_iter().map(|o| {
                let access = if o.file {
                    granted & AccessFs::from_file(ABI)
                } else {
                    granted
                };
                Ok::<_, landlock::RulesetError>(PathBeneath::new(o.fd, access))
            }))
        })
        .and_then(|r| r.restrict_self())
        .map_err(|e| e.to_string())?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => "full",
        RulesetStatus::PartiallyEnforced => "partial",
        RulesetStatus::NotEnforced => "none",
    }
    .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_as_execvp_would() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::write(bin.join("tool"), "").unwrap();
        let path = bin.display().to_string();
        assert_eq!(
            find_program("tool", dir.path(), Some(&path)),
            Some(bin.join("tool"))
        );
        assert_eq!(find_program("missing", dir.path(), Some(&path)), None);
        assert_eq!(
            find_program("bin/tool", dir.path(), None),
            Some(dir.path().join("bin/tool"))
        );
        assert_eq!(find_program("tool", dir.path(), None), None);
    }

    /// A repository with one commit, and blobs of LENS bytes written by git into an object
    /// directory of their own, as a sandboxed agent's would be. Out: (tempdir, repo, objects).
    fn agent_objects(lens: &[usize]) -> (tempfile::TempDir, PathBuf, PathBuf) {
        use crate::run::testing::git;
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        std::fs::write(repo.join("a"), "a").unwrap();
        git(&repo, &["add", "a"]);
        git(
            &repo,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-qm",
                "a",
            ],
        );
        let objects = tmp.path().join("agent.objects");
        std::fs::create_dir_all(objects.join("info")).unwrap();
        for (n, len) in lens.iter().enumerate() {
            let file = tmp.path().join(format!("blob{n}"));
            std::fs::write(&file, vec![b'0' + n as u8; *len]).unwrap();
            let out = std::process::Command::new("git")
                .args(["hash-object", "-w"])
                .arg(&file)
                .current_dir(&repo)
                .env("GIT_OBJECT_DIRECTORY", &objects)
                .env(
                    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                    repo.join(".git/objects"),
                )
                .output()
                .unwrap();
            assert!(out.status.success());
        }
        (tmp, repo, objects)
    }

    #[test]
    fn objects_over_the_limits_are_refused_before_they_are_inflated() {
        let limits = Limits {
            object: 1000,
            total: 1500,
            count: 10,
            work: 1 << 40,
        };
        let (_tmp, repo, objects) = agent_objects(&[1001]);
        let err = absorb_objects_within(&repo, &objects, limits).unwrap_err();
        assert!(
            matches!(err, AbsorbError::ObjectTooLarge { size: 1001, .. }),
            "{err:?}"
        );
        assert!(!objects.exists(), "the directory is removed all the same");
        let (_tmp, repo, objects) = agent_objects(&[800, 800]);
        let err = absorb_objects_within(&repo, &objects, limits).unwrap_err();
        assert!(matches!(err, AbsorbError::TooMuch { .. }), "{err:?}");
        let count = crate::run::testing::git(&repo, &["count-objects", "-v"]);
        assert!(count.contains("count: 3\n"), "nothing added: {count}");
        let (_tmp, repo, objects) = agent_objects(&[700, 700]);
        assert_eq!(absorb_objects_within(&repo, &objects, limits).unwrap(), 2);
    }

    /// Packs the agent's loose objects in `objects` (deltas where git finds them), and drops
    /// the loose copies.
    fn pack_agent_objects(repo: &Path, objects: &Path) {
        let git = |args: &[&str], input: Option<&str>| {
            use std::io::Write;
            let mut child = std::process::Command::new("git")
                .args(args)
                .current_dir(repo)
                .env("GIT_OBJECT_DIRECTORY", objects)
                .env(
                    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                    repo.join(".git/objects"),
                )
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(input.unwrap_or("").as_bytes()).unwrap();
            drop(stdin);
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success());
            String::from_utf8(out.stdout).unwrap()
        };
        let mut ids = String::new();
        for dir in std::fs::read_dir(objects).unwrap().flatten() {
            let name = dir.file_name().to_string_lossy().into_owned();
            if name.len() != 2 {
                continue;
            }
            for file in std::fs::read_dir(dir.path()).unwrap().flatten() {
                ids += &format!("{name}{}\n", file.file_name().to_string_lossy());
            }
        }
        let pack = objects.join("pack/pack");
        git(&["pack-objects", "-q", &path_text(&pack)], Some(&ids));
        git(&["prune-packed"], None);
    }

    #[test]
    fn a_packed_delta_counts_the_bases_its_read_inflates() {
        // Three blobs of 1000 bytes that differ in their last byte: packed, two are deltas,
        // each of whose reads inflates a base of 1000 bytes as well.
        let limits = Limits {
            object: 2000,
            total: 3000,
            count: 10,
            work: 3000,
        };
        let (tmp, repo, objects) = agent_objects(&[]);
        for n in 0..3u8 {
            let mut blob = vec![b'x'; 1000];
            blob[999] = b'0' + n;
            let file = tmp.path().join(format!("similar{n}"));
            std::fs::write(&file, blob).unwrap();
            let out = std::process::Command::new("git")
                .args(["hash-object", "-w"])
                .arg(&file)
                .current_dir(&repo)
                .env("GIT_OBJECT_DIRECTORY", &objects)
                .output()
                .unwrap();
            assert!(out.status.success());
        }
        std::fs::create_dir_all(objects.join("pack")).unwrap();
        pack_agent_objects(&repo, &objects);
        let err = absorb_objects_within(&repo, &objects, limits).unwrap_err();
        assert!(matches!(err, AbsorbError::TooMuchWork { .. }), "{err:?}");
    }

    #[test]
    fn more_objects_than_the_count_limit_are_refused() {
        let limits = Limits {
            object: 1000,
            total: 100_000,
            count: 3,
            work: 1 << 40,
        };
        let (_tmp, repo, objects) = agent_objects(&[1, 2, 3, 4]);
        let err = absorb_objects_within(&repo, &objects, limits).unwrap_err();
        assert!(matches!(err, AbsorbError::TooMany { limit: 3 }), "{err:?}");
        let count = crate::run::testing::git(&repo, &["count-objects", "-v"]);
        assert!(count.contains("count: 3\n"), "nothing added: {count}");
        // Packed, the index's list is refused before any entry is walked.
        let (_tmp, repo, objects) = agent_objects(&[1, 2, 3, 4]);
        std::fs::create_dir_all(objects.join("pack")).unwrap();
        pack_agent_objects(&repo, &objects);
        let err = absorb_objects_within(&repo, &objects, limits).unwrap_err();
        assert!(matches!(err, AbsorbError::TooMany { limit: 3 }), "{err:?}");
        let (_tmp, repo, objects) = agent_objects(&[1, 2, 3]);
        assert_eq!(absorb_objects_within(&repo, &objects, limits).unwrap(), 3);
    }

    #[test]
    fn nothing_is_deleted_through_a_symlinked_info_directory() {
        let (tmp, repo, objects) = agent_objects(&[10]);
        let victim = tmp.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::write(victim.join("alternates"), "keep").unwrap();
        std::fs::remove_dir(objects.join("info")).unwrap();
        std::os::unix::fs::symlink(&victim, objects.join("info")).unwrap();
        assert_eq!(absorb_objects(&repo, &objects).unwrap(), 1);
        assert_eq!(
            std::fs::read_to_string(victim.join("alternates")).unwrap(),
            "keep"
        );
        assert!(!objects.exists());
    }

    /// Whether `chattr +i` works here (root, and a filesystem that has the flag); says so
    /// when it does not, for a test that then cannot make its attack.
    fn pin(path: &Path) -> bool {
        let done = std::process::Command::new("chattr")
            .arg("+i")
            .arg(path)
            .status()
            .is_ok_and(|s| s.success());
        if !done {
            eprintln!("skipped: `chattr +i` is not available here (needs root)");
        }
        done
    }

    fn unpin(path: &Path) {
        let _ = std::process::Command::new("chattr")
            .args(["-R", "-f", "-i"])
            .arg(path)
            .status();
    }

    #[test]
    fn objects_elsewhere_stay_unread_when_an_alternates_file_cannot_be_deleted() {
        // Regression: `info` was deleted best effort; an alternates file mvk could not delete
        // (immutable, or in a directory mvk may not write) made libgit2 read another directory.
        let (tmp, repo, objects) = agent_objects(&[10]);
        let evil = tmp.path().join("evil");
        std::fs::create_dir_all(&evil).unwrap();
        let out = std::process::Command::new("git")
            .args(["hash-object", "-w", "--stdin"])
            .current_dir(&repo)
            .env("GIT_OBJECT_DIRECTORY", &evil)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(b"smuggled")?;
                c.wait_with_output()
            })
            .unwrap();
        let smuggled = git2::Oid::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
        let alternates = objects.join("info/alternates");
        std::fs::write(&alternates, format!("{}\n", evil.display())).unwrap();
        if !pin(&alternates) {
            return;
        }
        let added = absorb_objects(&repo, &objects);
        unpin(tmp.path());
        assert_eq!(added.unwrap(), 1);
        let main = git2::Repository::open(&repo).unwrap();
        assert!(!main.odb().unwrap().exists(smuggled));
    }

    #[test]
    fn an_honest_history_packed_by_git_gc_is_not_refused() {
        // Regression: each delta was charged its whole chain, so 200 versions of a 300 KB file
        // in chains of 50 (what `git gc` makes) cost 1.5 GB of the 1 GiB limit, for 60 MB of
        // content.
        let (tmp, repo, objects) = agent_objects(&[]);
        let mut lines: Vec<String> = (0..6000)
            .map(|i| format!("line {i} of a generated file, {:040}", i * 7919))
            .collect();
        let mut paths = String::new();
        for v in 0..200 {
            lines[(v * 29) % 6000] = format!("version {v} changed this line");
            let file = tmp.path().join(format!("v{v}"));
            std::fs::write(&file, lines.join("\n")).unwrap();
            paths += &format!("{}\n", file.display());
        }
        let mut child = std::process::Command::new("git")
            .args(["hash-object", "-w", "--stdin-paths"])
            .current_dir(&repo)
            .env("GIT_OBJECT_DIRECTORY", &objects)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(paths.as_bytes())
                .unwrap();
        }
        assert!(child.wait().unwrap().success());
        std::fs::create_dir_all(objects.join("pack")).unwrap();
        pack_agent_objects(&repo, &objects);
        assert_eq!(absorb_objects(&repo, &objects).unwrap(), 200);
    }

    #[test]
    fn alternates_with_a_colon_are_quoted() {
        assert_eq!(
            alternate_entry(Path::new("/r/.git/objects")),
            "/r/.git/objects"
        );
        assert_eq!(
            alternate_entry(Path::new(r#"/a:b/"q"/objects"#)),
            r#""/a:b/\"q\"/objects""#
        );
    }

    #[test]
    fn what_the_kernel_lacks_is_named() {
        let s = |network| Sandbox {
            network,
            required: true,
            write: Vec::new(),
            env: Vec::new(),
        };
        let full = Support {
            landlock: "full".into(),
            network: None,
            pid: None,
        };
        assert!(problems(&full, &s(false)).is_empty());
        let none = Support {
            landlock: "none".into(),
            network: Some("no namespaces".into()),
            pid: Some("no PID namespace".into()),
        };
        assert_eq!(problems(&none, &s(true)).len(), 2);
        let p = problems(&none, &s(false));
        assert_eq!(p.len(), 3);
        assert!(p[1].contains("no namespaces"), "{p:?}");
        assert!(p[2].contains("can outlive it"), "{p:?}");
    }
}
