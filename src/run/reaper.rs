//! Processes that escaped an agent's or a gate's process group (`setsid`, a double fork) in;
//! none of them left alive out.
//!
//! mvk makes itself a child subreaper, so an orphaned descendant is re-parented to mvk rather
//! than to init. Between steps of an attempt mvk has no child of its own running, so every
//! child it has then is such an escapee: it is killed and reaped before the change is captured
//! or a gate's evidence is read, so it can neither edit the worktree after the seal check nor
//! forge a gate's log. (Flows running tasks in parallel will need to spare their siblings.)

use std::io;

use rustix::process::{Pid, Signal, WaitOptions};

/// Makes this process the reaper of its orphaned descendants.
pub fn become_subreaper() -> io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).map_err(io::Error::from)
}

/// Kills and reaps every child of this process, and the children they leave behind; returns
/// how many were killed.
pub fn kill_adopted() -> usize {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let mut killed = 0;
    // Killing a child re-parents its own children to us: repeat until none is left.
    for _ in 0..16 {
        let children = children_of(me);
        if children.is_empty() {
            break;
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

/// Live (not zombie) processes whose parent is `parent`, read from `/proc`.
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses, so split at the last `)`.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("");
        let ppid = fields.next().and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(parent) && state != "Z" && state != "X" {
            out.push(pid);
        }
    }
    out
}
