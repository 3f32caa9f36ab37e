//! A process about to start and its sandbox in; out, the process rewritten to start through
//! the trampoline (`mvk __sandbox POLICY -- PROGRAM ARG…`) with the sandbox's environment, its
//! temporary directory emptied and, for an agent that commits, its worktree readied: HEAD
//! detached and an object directory of its own.

use std::io;
use std::path::{Path, PathBuf};

use crate::ir::Sandbox;
use crate::run::exec::process::{ProcessError, ProcessSpec};

use super::TRAMPOLINE;
use super::policy::{BASE_ENV, DEVICES, Grants, Policy, expand, exposed, resolved};
use super::support::pretend_unsupported;

/// Rewrites `ps` to start through the trampoline under `sandbox`, with the sandbox's environment.
pub(crate) fn confine(
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
    write.extend(grants.lessons.map(Path::to_path_buf));
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

pub(super) fn path_text(p: &Path) -> String {
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
}
