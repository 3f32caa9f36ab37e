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
pub fn become_subreaper() -> io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).map_err(io::Error::from)
}

/// The pids of the children mvk started itself and has not reaped yet.
static OWN: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Marks `pid` as a child mvk started (an agent, a gate), until the returned guard is dropped
/// (after the child is reaped): [`kill_adopted`] leaves it alone.
pub fn own(pid: i32) -> Own {
    OWN.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(pid);
    Own(pid)
}

/// See [`own`].
#[derive(Debug)]
pub struct Own(i32);

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
pub fn live(run: &str, task: &str) -> Live {
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
pub struct Live((String, String));

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
    Some((
        value(crate::run::attempt::RUN_VAR)?,
        value(crate::run::attempt::TASK_VAR)?,
    ))
}

/// Kills and reaps every child of this process that escaped TASK's agents and gates, and the
/// children they leave behind; returns how many were killed. Spared: the agents and gates mvk
/// runs now (see [`own`]) and what is still in their process groups (a gate's `server &`
/// whose shell exited), and escapees of another task of RUN that is still going (their
/// `MVK_RUN` and `MVK_TASK` name it, and it is registered by [`live`]), which that task's own
/// sweep ends and counts. Anything else dies in whichever sweep finds it: an escapee that names
/// no task (it scrubbed its environment), or one that names a task not in the run or already
/// over — whose sweep would never come, so that the name would keep it alive for good. An
/// escapee's process group dies with it (never mvk's own), and the sweep goes on until
/// [`QUIET_SCANS`] scans in a row find nothing, or for [`SWEEP_LIMIT`] at most.
pub fn kill_adopted(run: &str, task: &str) -> usize {
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
    let mut killed = 0;
    // Killing a child re-parents its own children to us, and a chain whose every member starts
    // the next and exits at once shows a new one at each scan (and none at all to a scan that
    // reads between two of its generations, except the zombie the last one left): so the
    // sweep ends only after several scans in a row find neither, or at a deadline. Each
    // round stops what it found before killing it: a stopped process forks no more.
    let deadline = std::time::Instant::now() + SWEEP_LIMIT;
    let my_group = rustix::process::getpgrp().as_raw_nonzero().get();
    let mut quiet = 0;
    while quiet < QUIET_SCANS {
        if std::time::Instant::now() > deadline {
            tracing::warn!(
                "escaped processes of task `{task}` were still appearing after the sweep's time limit"
            );
            break;
        }
        // The common case, no escapee at all, read from the kernel's list of mvk's own
        // children instead of every process's `stat` (each sweep makes several scans, a task
        // several sweeps: a full scan each time was a fifth of a wide flow's CPU).
        if let Some(children) = own_children() {
            let own = OWN.lock().unwrap_or_else(PoisonError::into_inner);
            let adopted = children.iter().any(|(pid, s)| {
                s.state != "X"
                    && !own.contains(pid)
                    && !own.contains(&s.pgrp)
                    && (s.state == "Z" || !theirs(*pid))
            });
            drop(own);
            if !adopted {
                quiet += 1;
                continue;
            }
        }
        let mut groups = BTreeSet::new();
        let all = processes();
        let (children, zombies): (Vec<i32>, Vec<i32>) = {
            let own = OWN.lock().unwrap_or_else(PoisonError::into_inner);
            all.iter()
                .map(|(pid, s)| (*pid, s))
                .filter(|(_, s)| s.ppid == me && s.state != "X")
                .filter(|(pid, s)| !own.contains(pid) && !own.contains(&s.pgrp))
                .filter(|&(pid, s)| s.state == "Z" || !theirs(pid))
                .fold(
                    (Vec::new(), Vec::new()),
                    |(mut live, mut dead), (pid, s)| {
                        if s.pgrp != my_group {
                            groups.insert(s.pgrp);
                        }
                        if s.state == "Z" {
                            dead.push(pid)
                        } else {
                            live.push(pid)
                        }
                        (live, dead)
                    },
                )
        };
        // A group is killed at once: a member that forks as it dies cannot leave a child
        // outside it (the kernel fails a fork with a fatal signal pending). A chain that keeps
        // its process group (forks, no `setsid`) ends here whatever its pace.
        // Only a group all of whose members descend from mvk: an escapee can join any group of
        // mvk's session (its parent shell's, a CI runner's), which must not die for it.
        let parents: std::collections::HashMap<i32, i32> =
            all.iter().map(|(pid, s)| (*pid, s.ppid)).collect();
        // And only through an escapee this sweep may kill: a group whose member descends from
        // an agent or gate mvk runs now (`timeout`, a job-control shell and `setsid`-happy test
        // runners give their children groups of their own) belongs to that live process, and
        // an escapee can join it just to have it killed.
        let running: BTreeSet<i32> = OWN.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let descends = |mut pid: i32| {
            for _ in 0..4096 {
                if running.contains(&pid) {
                    return false;
                }
                match parents.get(&pid) {
                    Some(&parent) if parent == me => return !running.contains(&pid),
                    Some(&parent) if parent > 1 => pid = parent,
                    _ => return false,
                }
            }
            false
        };
        groups.retain(|&g| {
            all.iter()
                .filter(|(_, s)| s.pgrp == g)
                .all(|(pid, _)| descends(*pid))
        });
        for &group in &groups {
            if let Some(g) = Pid::from_raw(group) {
                let _ = rustix::process::kill_process_group(g, Signal::KILL);
            }
        }
        if children.is_empty() && zombies.is_empty() {
            quiet += 1;
            continue;
        }
        quiet = 0;
        for &pid in &zombies {
            if let Some(p) = Pid::from_raw(pid) {
                let _ = rustix::process::waitpid(Some(p), WaitOptions::NOHANG);
            }
        }
        for &pid in &children {
            if let Some(p) = Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(p, Signal::STOP);
            }
        }
        for pid in children {
            if let Some(p) = Pid::from_raw(pid) {
                if rustix::process::kill_process(p, Signal::KILL).is_ok() {
                    killed += 1;
                }
                // Reap it, so it does not linger as a zombie.
                let _ = rustix::process::waitpid(Some(p), WaitOptions::empty());
            }
        }
    }
    killed
}

/// How many scans in a row must find no escapee before the sweep ends.
const QUIET_SCANS: usize = 3;
/// How long a sweep goes on while escapees keep appearing.
const SWEEP_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Kills what a dead mvk left running: every process group the run recorded (the `*.pgid` files
/// its agents and gates wrote under `run_dir`) that still has a member carrying the run's
/// `MVK_RUN` in its environment — wherever it has wandered (`cd /tmp` and write back) — so that
/// nothing of it can edit a worktree a resumed run uses. The environment check keeps a recycled
/// group id from reaching another run's agent. The whole group is killed at once, so a fork
/// during the scan cannot escape. Returns how many processes were in the groups killed.
pub fn kill_orphans(run_dir: &std::path::Path, run: &str) -> usize {
    let groups: Vec<i32> = walkdir::WalkDir::new(run_dir)
        .into_iter()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "pgid"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|t| t.trim().parse().ok())
        .collect();
    if groups.is_empty() {
        return 0;
    }
    let marker = format!("{}={run}", crate::run::attempt::RUN_VAR);
    let live: Vec<(i32, Stat)> = processes()
        .into_iter()
        .filter(|(_, s)| groups.contains(&s.pgrp) && s.state != "Z" && s.state != "X")
        .collect();
    let mut killed = 0;
    for &pgid in &groups {
        let members: Vec<i32> = live
            .iter()
            .filter(|(_, s)| s.pgrp == pgid)
            .map(|(pid, _)| *pid)
            .collect();
        let ours = members.iter().any(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == marker.as_bytes()))
        });
        if ours
            && let Some(p) = Pid::from_raw(pgid)
            && rustix::process::kill_process_group(p, Signal::KILL).is_ok()
        {
            killed += members.len();
        }
    }
    killed
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
