//! Processes that escaped an agent's or a gate's process group (`setsid`, a double fork) in;
//! none of them left alive out.
//!
//! mvk makes itself a child subreaper, so an orphaned descendant is re-parented to mvk rather
//! than to init. Between steps of an attempt mvk has no child of its own running, so every
//! child it has then is such an escapee: it is killed and reaped before the change is captured
//! or a gate's evidence is read, so it can neither edit the worktree after the seal check nor
//! forge a gate's log. Tasks of a flow run side by side, so the agents and gates mvk started
//! itself (registered by [`own`] while they run) are spared: only adopted processes die, and of
//! those, an escapee of a sibling task is left to that task's sweep only while the task is
//! going (registered by [`live`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::{Mutex, PoisonError};

use rustix::process::{Pid, Signal, WaitOptions};

/// Makes this process the reaper of its orphaned descendants.
pub(crate) fn become_subreaper() -> io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).map_err(io::Error::from)
}

/// The pids of the children mvk started itself and has not reaped yet.
static OWN: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Held shared by whoever starts a child mvk owns, from before its fork until [`own`] has it;
/// held exclusively by a sweep while it decides what to kill: otherwise a child started on
/// another thread (a notification's command as an agent runs) is an unregistered child of mvk
/// for a moment, and a sweep takes it for an escapee.
static SPAWNING: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// See [`SPAWNING`]: hold it across `spawn()` and [`own`].
pub(crate) fn spawning() -> std::sync::RwLockReadGuard<'static, ()> {
    SPAWNING.read().unwrap_or_else(PoisonError::into_inner)
}

/// Marks `pid` as a child mvk started (an agent, a gate), until the returned guard is dropped
/// (after the child is reaped): [`kill_adopted`] leaves it alone.
pub(crate) fn own(pid: i32) -> Own {
    OWN.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(pid);
    Own(pid)
}

/// See [`own`].
#[derive(Debug)]
pub(crate) struct Own(i32);

impl Drop for Own {
    fn drop(&mut self) {
        OWN.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.0);
    }
}

/// The tasks going now, as `(run, task)`, each with how many registrations it has: an escapee
/// naming one of them is that task's to end (see [`kill_adopted`]).
static LIVE: Mutex<BTreeMap<(String, String), usize>> = Mutex::new(BTreeMap::new());

/// Marks TASK of RUN as going (from its start to its end, landing included) until the returned
/// guard is dropped: other tasks' sweeps leave its escapees to its own.
pub(crate) fn live(run: &str, task: &str) -> Live {
    let key = (run.to_string(), task.to_string());
    *LIVE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(key.clone())
        .or_default() += 1;
    Live(key)
}

/// See [`live`].
#[derive(Debug)]
pub(crate) struct Live((String, String));

impl Drop for Live {
    fn drop(&mut self) {
        let mut live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = live.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                live.remove(&self.0);
            }
        }
    }
}

/// The `(MVK_RUN, MVK_TASK)` a process's environment names (the first of each, as `getenv`
/// reads them); `None` when it lacks either or cannot be read.
fn named_task(pid: i32) -> Option<(String, String)> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let value = |var: &str| {
        let prefix = format!("{var}=");
        env.split(|b| *b == 0)
            .find_map(|v| v.strip_prefix(prefix.as_bytes()))
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    Some((value(crate::env::RUN_VAR)?, value(crate::env::TASK_VAR)?))
}

/// What a sweep did: how many escapees it killed, and whether any may have survived it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use = "an escapee that survived the sweep must fail the step it followed"]
pub(crate) struct Sweep {
    /// Escaped children of mvk killed (not counting what they started).
    pub(crate) killed: usize,
    /// Escapees were still appearing when the sweep's time limit passed: the step the sweep
    /// followed must fail (its worktree or its evidence may still be changed by them).
    pub(crate) survived: bool,
}

/// Kills and reaps every child of this process that escaped TASK's agents and gates, and the
/// children they leave behind. Spared: the agents and gates mvk runs now (see [`own`]), and
/// escapees of another task of RUN that is still going (their `MVK_RUN` and `MVK_TASK` name it,
/// and it is registered by [`live`]), which that task's own sweep ends and counts — a sibling's
/// gate's `server &` whose shell exited is one. An escapee in the process group of an agent or
/// gate mvk runs is not spared for it (see [`escaped`]). Anything
/// else dies in whichever sweep finds it: an escapee that names no task (it scrubbed its
/// environment), or one that names a task not in the run or already over — whose sweep would
/// never come, so that the name would keep it alive for good. Each round stops every process
/// that descends from the escapees found (a stopped process forks no more), kills the process
/// groups only they make up (never mvk's own, never one with a member under an agent or gate
/// mvk runs or under a spared escapee) and then each of them. The sweep goes on until
/// [`QUIET_SCANS`] scans in a row find nothing; if escapees still appear after its time limit
/// ([`SWEEP_LIMIT`]), it says so in [`Sweep::survived`].
pub(crate) fn kill_adopted(run: &str, task: &str) -> Sweep {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let theirs = |pid: i32| {
        named_task(pid).is_some_and(|named| {
            (named.0 != run || named.1 != task)
                && LIVE
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .contains_key(&named)
        })
    };
    let mut sweep = Sweep::default();
    // Killing a child re-parents its own children to us, and a chain whose every member starts
    // the next and exits at once shows a new one at each scan (and none at all to a scan that
    // reads between two of its generations, except the zombie the last one left): so the
    // sweep ends only after several scans in a row find neither, or at a deadline.
    let deadline = std::time::Instant::now() + sweep_limit();
    let my_group = rustix::process::getpgrp().as_raw_nonzero().get();
    let mut quiet = 0;
    while quiet < QUIET_SCANS {
        let deciding = SPAWNING.write().unwrap_or_else(PoisonError::into_inner);
        // The common case, no escapee at all, read from the kernel's list of mvk's own
        // children instead of every process's `stat` (each sweep makes several scans, a task
        // several sweeps: a full scan each time was a fifth of a wide flow's CPU).
        if let Some(children) = own_children() {
            let own = OWN.lock().unwrap_or_else(PoisonError::into_inner);
            let adopted = children
                .iter()
                .any(|(pid, s)| escaped(*pid, s, &own) && (s.state == "Z" || !theirs(*pid)));
            drop(own);
            if !adopted {
                quiet += 1;
                continue;
            }
        }
        let all = processes();
        let own = OWN.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let found = doomed(&all, me, my_group, &own, &theirs);
        if found.children.is_empty() && found.zombies.is_empty() {
            quiet += 1;
            continue;
        }
        quiet = 0;
        for &pid in &found.zombies {
            if let Some(p) = Pid::from_raw(pid) {
                let _ = rustix::process::waitpid(Some(p), WaitOptions::NOHANG);
            }
        }
        // Stopped first, all of them: a stopped process forks no more, so nothing new appears
        // under them while they die.
        for &pid in &found.descendants {
            if let Some(p) = Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(p, Signal::STOP);
            }
        }
        // A group is killed at once: a member that forks as it dies cannot leave a child
        // outside it (the kernel fails a fork with a fatal signal pending).
        for &group in &found.groups {
            if let Some(g) = Pid::from_raw(group) {
                let _ = rustix::process::kill_process_group(g, Signal::KILL);
            }
        }
        for &pid in &found.descendants {
            if let Some(p) = Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(p, Signal::KILL);
            }
        }
        let mut killed = Vec::new();
        for &pid in &found.children {
            if let Some(p) = Pid::from_raw(pid)
                && rustix::process::kill_process(p, Signal::KILL).is_ok()
            {
                sweep.killed += 1;
                killed.push(p);
            }
        }
        // Reaped, so they do not linger as zombies. Only once killed, and never waiting for
        // good: one mvk may not signal (it became another user), or one in uninterruptible
        // sleep (a hung NFS or FUSE read, review r8d, R1), would stop the sweep and every task
        // with it. One wait for them all per scan (r8e, L1); what is not dead yet is found
        // again by the next scans, and the time limit fails the step.
        drop(deciding);
        reap_within(killed, REAP_WAIT);
        if std::time::Instant::now() > deadline {
            tracing::warn!(
                "escaped processes of task `{task}` were still appearing after the sweep's time limit"
            );
            sweep.survived = true;
            break;
        }
    }
    sweep
}

/// Whether mvk's child PID (its `stat` S) escaped: it is not one mvk started itself (OWN), be it
/// in the process group of one: an escapee in the same session may join the group of any
/// agent or gate mvk runs (`setpgid`), and must not be spared for it. That group itself is never
/// killed whole (the agent or gate is in it, see [`doomed`]): only the joiner and what is under
/// it die.
fn escaped(pid: i32, s: &Stat, own: &BTreeSet<i32>) -> bool {
    s.state != "X" && !own.contains(&pid)
}

/// What one scan finds to end.
#[derive(Debug, Default, PartialEq, Eq)]
struct Doomed {
    /// Live escapees: children of mvk that are not its own (even in an own process's group),
    /// nor spared as a live sibling's.
    children: Vec<i32>,
    /// Dead children of mvk, not its own, to reap.
    zombies: Vec<i32>,
    /// The escapees and every live process under them.
    descendants: Vec<i32>,
    /// Process groups to kill whole: every member is under an escapee found here.
    groups: BTreeSet<i32>,
}

/// Reads the process table ALL (pid and stat) as seen from mvk (ME, its group MY_GROUP): which
/// children escaped (not in OWN, be it in the group of one in OWN, not SPARED), what is under
/// them, and which groups only they and what is under them make up. A group with any member
/// elsewhere — under an agent or gate mvk runs now (`timeout`, job-control shells and test
/// runners give children groups of their own), under a spared escapee, or outside mvk (its
/// parent shell, a CI runner) — is never one an escapee's joining can get killed.
fn doomed(
    all: &[(i32, Stat)],
    me: i32,
    my_group: i32,
    own: &BTreeSet<i32>,
    spared: &dyn Fn(i32) -> bool,
) -> Doomed {
    let mut out = Doomed::default();
    for (pid, s) in all {
        if s.ppid != me || !escaped(*pid, s, own) {
            continue;
        }
        if s.state == "Z" {
            out.zombies.push(*pid);
        } else if !spared(*pid) {
            out.children.push(*pid);
        }
    }
    let escapees: BTreeSet<i32> = out.children.iter().copied().collect();
    let parents: std::collections::HashMap<i32, i32> =
        all.iter().map(|(pid, s)| (*pid, s.ppid)).collect();
    // Whether PID is an escapee or under one: its line of parents reaches mvk through one.
    let under_escapee = |mut pid: i32| {
        for _ in 0..4096 {
            match parents.get(&pid) {
                Some(&parent) if parent == me => return escapees.contains(&pid),
                Some(&parent) if parent > 1 => pid = parent,
                _ => return false,
            }
        }
        false
    };
    let mut groups = BTreeSet::new();
    for (pid, s) in all {
        if s.state == "Z" || s.state == "X" || !under_escapee(*pid) {
            continue;
        }
        out.descendants.push(*pid);
        if s.pgrp != my_group {
            groups.insert(s.pgrp);
        }
    }
    groups.retain(|&g| {
        all.iter()
            .filter(|(_, s)| s.pgrp == g)
            .all(|(pid, _)| under_escapee(*pid))
    });
    out.groups = groups;
    out
}

/// How long a sweep waits, per scan, for the escapees it killed to die.
const REAP_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Reaps those of the children `pids` that die within `limit`, all together.
fn reap_within(mut pids: Vec<Pid>, limit: std::time::Duration) {
    let until = std::time::Instant::now() + limit;
    loop {
        pids.retain(|&p| {
            matches!(
                rustix::process::waitpid(Some(p), WaitOptions::NOHANG),
                Ok(None)
            )
        });
        if pids.is_empty() || std::time::Instant::now() >= until {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// How many scans in a row must find no escapee before the sweep ends.
const QUIET_SCANS: usize = 3;
/// How long a sweep goes on while escapees keep appearing.
const SWEEP_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// [`SWEEP_LIMIT`], or the tests' shorter one from [`crate::env::MVK_TEST_SWEEP_LIMIT_MS`]
/// (read once, from mvk's own environment).
fn sweep_limit() -> std::time::Duration {
    static LIMIT: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::env::var(crate::env::MVK_TEST_SWEEP_LIMIT_MS)
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map_or(SWEEP_LIMIT, std::time::Duration::from_millis)
    })
}

/// Kills what a dead mvk left running: every process group the run recorded (the `*.pgid` files
/// its agents and gates wrote under `run_dir`) that still has a member carrying the run's
/// `MVK_RUN` in its environment — wherever it has wandered (`cd /tmp` and write back) — so that
/// nothing of it can edit a worktree a resumed run uses. The environment check keeps a recycled
/// group id from reaching another run's agent. The whole group is killed at once, so a fork
/// during the scan cannot escape. Returns how many processes were in the groups killed.
pub(crate) fn kill_orphans(run_dir: &std::path::Path, run: &str) -> usize {
    // Only where mvk writes them, `RUN/TASK/N/NAME.pgid`, as plain files: a sandboxed agent
    // may write below (its `TMPDIR`, its objects), and a record planted there named any group,
    // whose leader's start time anyone can read (review r8e, H1). Never group 1 (`kill(-1)`
    // is every process mvk may signal) nor mvk's own.
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let my_group = rustix::process::getpgrp().as_raw_nonzero().get();
    let recorded: Vec<Record> = walkdir::WalkDir::new(run_dir)
        .min_depth(3)
        .max_depth(4)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file() && recorded_here(e.path(), e.depth()))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|t| parse_group_record(&t))
        .filter(|r| killable(r.pgid, me, my_group))
        // Made before a reboot: nothing of it is alive, and its ids name other processes now.
        .filter(|r| r.boot.is_none() || r.boot.as_deref() == boot_id())
        .collect();
    let groups: Vec<i32> = recorded.iter().map(|r| r.pgid).collect();
    let marker = format!("{}={run}", crate::env::RUN_VAR);
    let all: Vec<(i32, Stat)> = processes()
        .into_iter()
        .filter(|(_, s)| s.state != "Z" && s.state != "X")
        .collect();
    let carries_marker = |pid: i32| {
        std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == marker.as_bytes()))
    };
    let mut killed = unrecorded(&all, &groups, me, my_group, &carries_marker);
    for &pgid in &groups {
        let members: Vec<i32> = all
            .iter()
            .filter(|(_, s)| s.pgrp == pgid)
            .map(|(pid, _)| *pid)
            .collect();
        // The leader the run started, still alive (the same start time: not a recycled id),
        // is proof enough: a sandbox's trampoline is not dumpable, so its environment cannot
        // be read (review r8d, R3), and its namespace would live on unseen.
        let leader_alive = recorded
            .iter()
            .any(|r| r.pgid == pgid && r.start.is_some() && r.start == start_time(pgid));
        let ours = leader_alive || members.iter().any(|pid| carries_marker(*pid));
        if ours
            && let Some(p) = Pid::from_raw(pgid)
            && rustix::process::kill_process_group(p, Signal::KILL).is_ok()
        {
            killed += members.len();
        }
    }
    killed
}

/// Kills the groups of the run's processes no record names: an agent or gate a dead mvk
/// started but had not yet recorded (the record is written once the child runs, so a kill in
/// between leaves it unnamed) still carries the run's `MVK_RUN` in its environment. Never a
/// recorded group (the caller judges those), nor mvk's own group or mvk itself; a marked
/// process in a group that also holds unmarked ones (it was started from elsewhere with the
/// variable set) is killed alone. Returns how many processes were killed.
fn unrecorded(
    all: &[(i32, Stat)],
    recorded: &[i32],
    me: i32,
    my_group: i32,
    carries_marker: &dyn Fn(i32) -> bool,
) -> usize {
    let marked: Vec<(i32, i32)> = all
        .iter()
        .filter(|(pid, s)| {
            *pid != me && s.pgrp != my_group && !recorded.contains(&s.pgrp) && carries_marker(*pid)
        })
        .map(|(pid, s)| (*pid, s.pgrp))
        .collect();
    let mut groups: Vec<i32> = marked.iter().map(|(_, g)| *g).collect();
    groups.sort_unstable();
    groups.dedup();
    let mut killed = 0;
    for g in groups {
        let members: Vec<i32> = all
            .iter()
            .filter(|(_, s)| s.pgrp == g)
            .map(|(pid, _)| *pid)
            .collect();
        let whole = members
            .iter()
            .all(|pid| marked.iter().any(|(m, _)| m == pid));
        if whole
            && killable(g, me, my_group)
            && let Some(p) = Pid::from_raw(g)
            && rustix::process::kill_process_group(p, Signal::KILL).is_ok()
        {
            killed += members.len();
            continue;
        }
        for (pid, _) in marked.iter().filter(|(_, mg)| *mg == g) {
            if let Some(p) = Pid::from_raw(*pid)
                && rustix::process::kill_process(p, Signal::KILL).is_ok()
            {
                killed += 1;
            }
        }
    }
    killed
}

/// Whether a file at `depth` below the run directory is where mvk records a group: an agent's
/// or gate's in its attempt's directory (`TASK/N/NAME.pgid`), the reviewer's one below it
/// (`TASK/N/review/review.pgid`); never below an agent's `TMPDIR` or objects.
fn recorded_here(path: &std::path::Path, depth: usize) -> bool {
    let parent_is_review = path
        .parent()
        .and_then(|p| p.file_name())
        .is_some_and(|n| n == "review");
    path.extension().is_some_and(|x| x == "pgid")
        && (depth == 3 || (depth == 4 && parent_is_review))
}

/// Whether group `g` may be killed as an orphan: never group 1 (`kill(-1)` is every process mvk
/// may signal), nor mvk's own.
fn killable(g: i32, me: i32, my_group: i32) -> bool {
    g > 1 && g != me && g != my_group
}

/// What a `*.pgid` file records: `PGID [START [BOOT]]`, START the leader's start time in clock
/// ticks since boot (`/proc/PID/stat` field 22), which tells it from a later process given its
/// id, and BOOT the kernel's boot id, which tells this boot's ticks from an earlier one's.
pub(crate) fn group_record(pgid: i32) -> String {
    match (start_time(pgid), boot_id()) {
        (Some(start), Some(boot)) => format!("{pgid} {start} {boot}\n"),
        (Some(start), None) => format!("{pgid} {start}\n"),
        (None, _) => format!("{pgid}\n"),
    }
}

/// A `*.pgid` file's record (see [`group_record`]).
#[derive(Debug, PartialEq, Eq)]
struct Record {
    pgid: i32,
    start: Option<u64>,
    boot: Option<String>,
}

fn parse_group_record(text: &str) -> Option<Record> {
    let mut parts = text.split_whitespace();
    let pgid = parts.next()?.parse().ok()?;
    let start = parts.next().and_then(|s| s.parse().ok());
    let boot = parts.next().map(str::to_string);
    Some(Record { pgid, start, boot })
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`), read once.
fn boot_id() -> Option<&'static str> {
    static BOOT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty() && !t.contains(char::is_whitespace))
    })
    .as_deref()
}

/// When process `pid` started, in clock ticks since boot; `None` once it is gone.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22; the fields after `comm` start at field 3.
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(22 - 3)?
        .parse()
        .ok()
}

/// What `/proc/PID/stat` says of a process.
struct Stat {
    state: String,
    ppid: i32,
    pgrp: i32,
}

/// The children of this process, each with its state, parent and group, from the list the
/// kernel keeps per thread (`/proc/self/task/*/children`: an orphan is re-parented to some
/// thread of its subreaper); `None` when the kernel has no such list, or it cannot be read.
fn own_children() -> Option<Vec<(i32, Stat)>> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let list = match std::fs::read_to_string(task.path().join("children")) {
            Ok(list) => list,
            // A thread that ended since the listing has no children left to report.
            Err(e) if e.kind() == io::ErrorKind::NotFound && task.path().exists() => return None,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(_) => return None,
        };
        for pid in list
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            if let Some(stat) = stat_of(pid) {
                out.push((pid, stat));
            }
        }
    }
    Some(out)
}

/// State, parent and group of `pid` from `/proc/<pid>/stat`; `None` once it is gone.
fn stat_of(pid: i32) -> Option<Stat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses, so split at the
    // last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.to_string();
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(Stat { state, ppid, pgrp })
}

/// Every process `/proc` lists, with its state, parent and group.
fn processes() -> Vec<(i32, Stat)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, stat_of(pid)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review r8d, R3: a group whose members' environments cannot be read (a sandbox's
    /// trampoline is not dumpable; here, one that names no run) is still known by its leader's
    /// id and start time, and killed; a record whose start time is another's is not. Review
    /// r8e, H1: records are read only where mvk writes them (`TASK/N/NAME.pgid`): one an agent
    /// planted in its `TMPDIR` below kills nothing.
    #[test]
    fn an_orphan_group_is_known_by_its_leaders_start_time() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let attempt = dir.path().join("t/1");
        std::fs::create_dir_all(attempt.join("agent.tmp/deep")).expect("mkdir");
        let spawn = || {
            std::process::Command::new("sleep")
                .arg("60")
                .env_clear()
                .process_group(0)
                .spawn()
                .expect("spawn sleep")
        };
        let (mut ours, mut other, mut planted) = (spawn(), spawn(), spawn());
        let pid = |c: &std::process::Child| i32::try_from(c.id()).expect("pid");
        std::fs::write(attempt.join("agent.pgid"), group_record(pid(&ours))).expect("write");
        let stale = start_time(pid(&other)).expect("start") + 1;
        // The leader's id and start time, but from an earlier boot: those ticks were another's.
        let mut rebooted = spawn();
        let earlier = format!(
            "{} {} 00000000-0000-0000-0000-000000000000\n",
            pid(&rebooted),
            start_time(pid(&rebooted)).expect("start")
        );
        std::fs::write(attempt.join("reviewer.pgid"), earlier).expect("write");
        assert!(group_record(pid(&ours)).contains(boot_id().expect("a boot id")));
        std::fs::write(
            attempt.join("gate.pgid"),
            format!("{} {stale}\n", pid(&other)),
        )
        .expect("write");
        std::fs::write(
            attempt.join("agent.tmp/deep/x.pgid"),
            group_record(pid(&planted)),
        )
        .expect("write");
        assert_eq!(kill_orphans(dir.path(), "run-x"), 1);
        let status = ours.wait().expect("wait");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        for spared in [&mut other, &mut planted, &mut rebooted] {
            assert!(spared.try_wait().expect("try_wait").is_none(), "spared");
            let _ = spared.kill();
            let _ = spared.wait();
        }
    }

    // Guards against the gap between spawning a child and writing its record: a dead mvk's
    // agent that no record names still carries the run in its environment and is killed; one
    // of another run, and a group mixing marked and unmarked processes, are not killed whole.
    #[test]
    fn an_orphan_no_record_names_is_known_by_its_run_in_its_environment() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let run = format!("run-unrecorded-{}", std::process::id());
        let spawn = |run: &str| {
            std::process::Command::new("sleep")
                .arg("60")
                .env_clear()
                .env(crate::env::RUN_VAR, run)
                .process_group(0)
                .spawn()
                .expect("spawn sleep")
        };
        let (mut ours, mut other) = (spawn(&run), spawn("another-run"));
        // An unmarked leader whose group a marked process joined: only the marked one dies.
        let mut unmarked = std::process::Command::new("sleep")
            .arg("60")
            .env_clear()
            .process_group(0)
            .spawn()
            .expect("spawn sleep");
        let mut joined = std::process::Command::new("sleep")
            .arg("60")
            .env_clear()
            .env(crate::env::RUN_VAR, &run)
            .process_group(i32::try_from(unmarked.id()).expect("pid"))
            .spawn()
            .expect("spawn sleep");
        assert_eq!(kill_orphans(dir.path(), &run), 2);
        for killed in [&mut ours, &mut joined] {
            let status = killed.wait().expect("wait");
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&status),
                Some(9)
            );
        }
        for spared in [&mut other, &mut unmarked] {
            assert!(spared.try_wait().expect("try_wait").is_none(), "spared");
            let _ = spared.kill();
            let _ = spared.wait();
        }
    }

    /// Where records are read, and which groups are never killed (checked apart from
    /// `kill_orphans`, so that a regression cannot make the test itself signal every process).
    #[test]
    fn records_are_read_where_mvk_writes_them_and_never_name_group_one() {
        let p = std::path::Path::new;
        assert!(recorded_here(p("/r/t/1/agent.pgid"), 3));
        assert!(recorded_here(p("/r/t/1/review/review.pgid"), 4));
        assert!(!recorded_here(p("/r/t/1/agent.tmp/x.pgid"), 4));
        assert!(!recorded_here(p("/r/t/1/agent.tmp/review/x.pgid"), 5));
        assert!(!recorded_here(p("/r/t/1/agent.out"), 3));
        assert!(!killable(1, 100, 100));
        assert!(!killable(0, 100, 100));
        assert!(!killable(100, 100, 90));
        assert!(!killable(90, 100, 90));
        assert!(killable(4242, 100, 90));
    }

    fn p(pid: i32, ppid: i32, pgrp: i32) -> (i32, Stat) {
        let state = "S".to_string();
        (pid, Stat { state, ppid, pgrp })
    }

    #[test]
    fn only_groups_made_of_escapees_and_what_they_started_are_killed() {
        // mvk is 100. Its agent or gate 200 runs `timeout` (201), whose test run (202) leads a
        // group of its own; escapee 300 joins that group. Escapee 400 is spared (a live
        // sibling's); its child 401 leads a group that escapee 500 joins. Escapee 600 and its
        // child 601 make up group 600. Escapee 800 joins the group of 700, which is not under
        // mvk at all. 900 is a dead child.
        let mut all = vec![
            p(100, 1, 100),
            p(200, 100, 200),
            p(201, 200, 200),
            p(202, 201, 202),
            p(300, 100, 202),
            p(400, 100, 400),
            p(401, 400, 401),
            p(500, 100, 401),
            p(600, 100, 600),
            p(601, 600, 600),
            p(700, 1, 700),
            p(800, 100, 700),
        ];
        let mut zombie = p(900, 100, 900);
        zombie.1.state = "Z".to_string();
        all.push(zombie);
        let own = BTreeSet::from([200]);
        let found = doomed(&all, 100, 100, &own, &|pid| pid == 400);
        assert_eq!(found.children, [300, 500, 600, 800]);
        assert_eq!(found.zombies, [900]);
        assert_eq!(found.descendants, [300, 500, 600, 601, 800]);
        // Not 202 (the honest test run's, under the gate), nor 401 (under the spared escapee),
        // nor 700 (outside mvk), nor mvk's own.
        assert_eq!(found.groups, BTreeSet::from([600]));
    }

    #[test]
    fn an_escapee_that_joins_the_group_of_an_agent_or_gate_still_dies_alone() {
        // Regression: an adopted child in the process group of an agent or gate mvk runs now
        // was spared as that process's own, so an escapee of one task that joined a sibling's
        // gate's group (same session: `setpgid` is allowed) outlived every sweep of its task.
        // mvk is 100; the gate 200 leads group 200, its child 201 (a server) too; escapee 300
        // joined group 200 and started 301 there.
        let all = vec![
            p(100, 1, 100),
            p(200, 100, 200),
            p(201, 200, 200),
            p(300, 100, 200),
            p(301, 300, 200),
        ];
        let own = BTreeSet::from([200]);
        let found = doomed(&all, 100, 100, &own, &|_| false);
        assert_eq!(found.children, [300]);
        assert_eq!(found.descendants, [300, 301]);
        // The gate's group itself is never killed whole: the gate and its server live on.
        assert!(found.groups.is_empty(), "{:?}", found.groups);
    }
}
