//! The pool end to end: repositories built with git in; out, leases, captures, resets and
//! collections of their slots checked against what git itself reads back, agents' tampering
//! (rewritten links, planted HEADs, forged index entries, swapped directories) included.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use git2::{Oid, Repository};

use crate::run::exec::untrusted;
use crate::run::testing::git;

use super::sweep::{RESET_IN_PLACE_MAX, reset_in_place, sweep};
use super::{Lease, Pool, WorktreeError, capture, clean_in_place, head_of};

struct Fixture {
    _tmp: tempfile::TempDir,
    repo: PathBuf,
    root: PathBuf,
    c1: Oid,
    c2: Oid,
}

/// A repository with two commits: c1 has `a.txt`, `src/lib.rs` and a `.gitignore` that
/// ignores `target/`; c2 changes `a.txt`, deletes `src/lib.rs` and adds `b.txt`.
fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = tmp.path().join("repo");
    let root = tmp.path().join("pool");
    fs::create_dir_all(repo.join("src")).expect("mkdir");
    git(&repo, &["init", "-q", "-b", "main"]);
    fs::write(repo.join("a.txt"), "one\n").expect("write");
    fs::write(repo.join("src/lib.rs"), "// lib\n").expect("write");
    fs::write(repo.join(".gitignore"), "target/\n").expect("write");
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "c1"]);
    let c1 = rev(&repo, "HEAD");
    fs::write(repo.join("a.txt"), "two\n").expect("write");
    fs::remove_file(repo.join("src/lib.rs")).expect("rm");
    fs::write(repo.join("b.txt"), "bee\n").expect("write");
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "c2"]);
    let c2 = rev(&repo, "HEAD");
    Fixture {
        _tmp: tmp,
        repo,
        root,
        c1,
        c2,
    }
}

fn rev(dir: &Path, what: &str) -> Oid {
    Oid::from_str(git(dir, &["rev-parse", what]).trim()).expect("oid")
}

/// Every file under `dir` except `.git`, relative, with contents.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for entry in fs::read_dir(dir).expect("read_dir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            if entry.file_name() == ".git" {
                continue;
            }
            if path.is_dir() {
                walk(base, &path, out);
            } else {
                let rel = path
                    .strip_prefix(base)
                    .expect("rel")
                    .to_string_lossy()
                    .into();
                out.push((rel, fs::read(&path).expect("read")));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Files of commit `id` as `files` would list them after a checkout.
fn tree_files(repo: &Path, id: Oid) -> Vec<(String, Vec<u8>)> {
    let repo = Repository::open(repo).expect("open");
    let tree = repo.find_commit(id).expect("commit").tree().expect("tree");
    let mut out = Vec::new();
    tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
        if entry.kind() == Some(git2::ObjectType::Blob) {
            let blob = repo.find_blob(entry.id()).expect("blob");
            let name = entry.name().expect("utf-8 name");
            out.push((format!("{dir}{name}"), blob.content().to_vec()));
        }
        git2::TreeWalkResult::Ok
    })
    .expect("walk");
    out.sort();
    out
}

fn branch_tip(repo: &Path, branch: &str) -> Oid {
    rev(repo, &format!("refs/heads/{branch}"))
}

#[test]
fn acquire_gives_clean_checkout_outside_repo_listed_by_git() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/att-1").expect("acquire");
    let repo_canon = fs::canonicalize(&f.repo).expect("canon");
    assert!(!lease.path.starts_with(&repo_canon));
    assert!(lease.path.starts_with(pool.root()));
    assert_eq!(files(&lease.path), tree_files(&f.repo, f.c1));
    assert_eq!(git(&lease.path, &["status", "--porcelain"]), "");
    assert_eq!(
        git(&lease.path, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/mvk/att-1"
    );
    assert_eq!(head_of(&lease).expect("head"), f.c1);
    assert_eq!(branch_tip(&f.repo, "mvk/att-1"), f.c1);
    let list = git(&f.repo, &["worktree", "list", "--porcelain"]);
    assert!(
        list.contains(&format!("worktree {}\n", lease.path.display())),
        "{list}"
    );
    assert!(list.contains("branch refs/heads/mvk/att-1"), "{list}");
    // mvk writes the registration itself: git must take it for one of its own, neither
    // pruning it nor finding anything to repair.
    git(&f.repo, &["worktree", "prune"]);
    assert_eq!(git(&f.repo, &["worktree", "repair"]), "");
    let after = git(&f.repo, &["worktree", "list", "--porcelain"]);
    assert_eq!(after, list);
    assert_eq!(git(&lease.path, &["fsck", "--no-progress"]), "");
    // The user's checkout is untouched.
    assert_eq!(
        git(&f.repo, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/main"
    );
    assert_eq!(git(&f.repo, &["status", "--porcelain"]), "");
}

#[test]
fn existing_branch_is_reset_to_base() {
    let f = fixture();
    git(&f.repo, &["branch", "mvk/att-x", &f.c2.to_string()]);
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/att-x").expect("acquire");
    assert_eq!(branch_tip(&f.repo, "mvk/att-x"), f.c1);
    assert_eq!(files(&lease.path), tree_files(&f.repo, f.c1));
}

#[test]
fn reuse_removes_untracked_and_ignored_and_matches_new_base() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let first = pool.acquire(f.c1, "mvk/r1").expect("acquire");
    let path = first.path.clone();
    // Files written in the same second as the index are "racy" to git and may be rewritten
    // on reset; let a second pass and refresh the index so the mtime check below is fair.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    git(&path, &["status", "--porcelain"]);
    // The agent makes a mess: edits, deletions, untracked nested dirs, ignored build
    // output, a commit of its own and a half-staged change.
    fs::write(path.join("a.txt"), "agent\n").expect("write");
    fs::create_dir_all(path.join("new/deep/er")).expect("mkdir");
    fs::write(path.join("new/deep/er/x.txt"), "x").expect("write");
    fs::create_dir_all(path.join("target/debug")).expect("mkdir");
    fs::write(path.join("target/debug/bin"), "elf").expect("write");
    fs::write(path.join("committed.txt"), "c").expect("write");
    git(&path, &["add", "committed.txt"]);
    git(&path, &["commit", "-q", "-m", "agent commit"]);
    fs::write(path.join("staged.txt"), "s").expect("write");
    git(&path, &["add", "staged.txt"]);
    fs::remove_file(path.join("src/lib.rs")).expect("rm");
    let untouched_mtime = || {
        fs::metadata(path.join(".gitignore"))
            .and_then(|m| m.modified())
            .expect("mtime")
    };
    let before = untouched_mtime();
    let first_slot = first.slot();
    drop(first);
    wait_free(&pool, first_slot);

    let second = pool.acquire(f.c2, "mvk/r2").expect("reacquire");
    assert_eq!(second.path, path, "the idle slot is reused");
    assert_eq!(
        untouched_mtime(),
        before,
        "unchanged files are not rewritten"
    );
    assert_eq!(files(&second.path), tree_files(&f.repo, f.c2));
    assert!(!path.join("target").exists(), "ignored dir removed");
    assert!(!path.join("new").exists(), "untracked dir removed");
    assert_eq!(git(&path, &["status", "--porcelain", "--ignored"]), "");
    assert_eq!(
        git(&path, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/mvk/r2"
    );
    // The first branch keeps the agent's commit for inspection.
    let r1 = branch_tip(&f.repo, "mvk/r1");
    assert_ne!(r1, f.c1);
    assert_eq!(rev(&f.repo, "mvk/r1^"), f.c1);
    drop(second);

    // Going back to an older base restores deleted files too.
    let third = pool.acquire(f.c1, "mvk/r1").expect("reacquire older base");
    assert_eq!(third.path, path);
    assert_eq!(files(&third.path), tree_files(&f.repo, f.c1));
    assert_eq!(branch_tip(&f.repo, "mvk/r1"), f.c1);
    assert_eq!(git(&path, &["status", "--porcelain", "--ignored"]), "");
}

#[test]
fn concurrent_leases_get_different_slots() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let a = pool.acquire(f.c1, "mvk/a").expect("a");
    let b = pool.acquire(f.c2, "mvk/b").expect("b");
    assert_ne!(a.path, b.path);
    assert_ne!(a.slot(), b.slot());
    assert_eq!(files(&a.path), tree_files(&f.repo, f.c1));
    assert_eq!(files(&b.path), tree_files(&f.repo, f.c2));
    // A second pool object on the same root respects the same locks.
    let other = Pool::open(&f.repo, &f.root).expect("open pool again");
    let c = other.acquire(f.c1, "mvk/c").expect("c");
    assert!(c.path != a.path && c.path != b.path);
}

#[test]
fn branch_held_by_a_leased_slot_or_the_main_checkout_is_refused() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let held = pool.acquire(f.c1, "mvk/held").expect("held");
    match pool.acquire(f.c2, "mvk/held") {
        Err(WorktreeError::BranchCheckedOut { path, .. }) => assert_eq!(path, held.path),
        other => panic!("expected BranchCheckedOut, got {other:?}"),
    }
    assert_eq!(branch_tip(&f.repo, "mvk/held"), f.c1, "branch not moved");
    match pool.acquire(f.c1, "main") {
        Err(WorktreeError::BranchCheckedOut { .. }) => {}
        other => panic!("expected BranchCheckedOut, got {other:?}"),
    }
    assert_eq!(branch_tip(&f.repo, "main"), f.c2, "user's branch not moved");
    assert!(matches!(
        pool.acquire(f.c1, "bad..name"),
        Err(WorktreeError::InvalidBranch { .. })
    ));
    // The refusals neither rebuilt nor broke the idle slot they tried.
    let idle = pool.acquire(f.c2, "mvk/idle").expect("idle");
    let idle_path = idle.path.clone();
    let idle_slot = idle.slot();
    // A process another test forks while a lease is held keeps a copy of the lock's file
    // until it execs; wait for the slot to be free before asserting it is reused.
    let wait_free = || wait_free(&pool, idle_slot);
    // As above: step past git's racy-timestamp window so no refusal rewrites a file.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    git(&idle_path, &["status", "--porcelain"]);
    drop(idle);
    let mtime = || {
        fs::metadata(idle_path.join("a.txt"))
            .and_then(|m| m.modified())
            .expect("mtime")
    };
    let before = mtime();
    wait_free();
    assert!(matches!(
        pool.acquire(f.c2, "mvk/held"),
        Err(WorktreeError::BranchCheckedOut { .. })
    ));
    assert_eq!(mtime(), before, "idle slot was not rebuilt");
    wait_free();
    let next = pool
        .acquire(f.c2, "mvk/next")
        .expect("acquire after refusals");
    assert_eq!(next.path, idle_path);
    assert_eq!(files(&next.path), tree_files(&f.repo, f.c2));
}

#[test]
fn idle_slot_holding_the_branch_is_detached() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let a = pool.acquire(f.c1, "mvk/shared").expect("a");
    let b = pool.acquire(f.c1, "mvk/other").expect("b");
    let a_path = a.path.clone();
    let a_slot = a.slot();
    drop(a);
    wait_free(&pool, a_slot);
    let main = pool.main().expect("main");
    pool.free_branch(&main, "refs/heads/mvk/shared", "mvk/shared", Some(&b.path))
        .expect("free");
    let head = git(&a_path, &["rev-parse", "--abbrev-ref", "HEAD"]);
    assert_eq!(head.trim(), "HEAD", "idle slot detached");
    assert_eq!(git(&a_path, &["status", "--porcelain"]), "");
}

// Guards against a kill inside libgit2's write of a slot's index: the `index.lock` it left
// in the slot's git directory outlived the resumed run (crash campaign, seed 5, trial 55).
#[test]
fn stale_git_locks_of_idle_slots_are_removed_and_a_leased_slot_is_left_alone() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let leased = pool.acquire(f.c1, "mvk/leased").expect("leased");
    let idle = pool.acquire(f.c1, "mvk/idle").expect("idle");
    let idle_admin = idle.admin.clone();
    let slot = idle.slot();
    drop(idle);
    wait_free(&pool, slot);
    fs::write(idle_admin.join("index.lock"), "").expect("stale lock");
    fs::write(leased.admin.join("index.lock"), "").expect("live lock");
    let removed = pool.clear_idle_locks().expect("clear");
    assert!(!idle_admin.join("index.lock").exists(), "{removed:?}");
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert!(
        leased.admin.join("index.lock").exists(),
        "a leased slot's lock stays"
    );
    fs::remove_file(leased.admin.join("index.lock")).expect("tidy");
    drop(leased);
}

#[test]
fn a_lease_claims_its_slot_only_under_the_registry_lock_so_a_crashed_slot_never_looks_leased() {
    // A crash left a slot on `mvk/c`: its HEAD names the branch, so does its lock file, and
    // no one holds its lock. `free_branch` judges under the registry lock whether a live
    // lease holds the branch; were a neighbour's claim of the slot (the lock, then the file)
    // not under that lock too, the judgement could fall between the two and find the slot
    // leased for `mvk/c`, and the branch could never be made again.
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let crashed = pool.acquire(f.c1, "mvk/c").expect("c");
    let (slot, admin) = (crashed.slot(), crashed.admin.clone());
    drop(crashed);
    wait_free(&pool, slot);
    fs::write(admin.join("HEAD"), "ref: refs/heads/mvk/c\n").expect("leave HEAD on c");
    let registry = pool.lock_registry().expect("lock registry");
    let neighbour = {
        let pool = pool.clone();
        let base = f.c2;
        std::thread::spawn(move || pool.acquire(base, "mvk/d"))
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        pool.try_lock_slot(slot).expect("probe slot").is_some(),
        "a neighbour took the slot's lock outside the registry lock"
    );
    let main = pool.main().expect("main");
    pool.free_branch(&main, "refs/heads/mvk/c", "mvk/c", None)
        .expect("a crashed lease's slot is no live lease");
    assert_eq!(
        fs::read_to_string(admin.join("HEAD")).expect("HEAD").trim(),
        f.c1.to_string(),
        "detached where the branch points"
    );
    drop(registry);
    let d = neighbour.join().expect("join").expect("d");
    assert_eq!(d.slot(), slot, "the neighbour leased the crashed slot");
    assert_eq!(
        fs::read_to_string(pool.lock_path(slot)).expect("lock file"),
        "mvk/d"
    );
    let c = pool.acquire(f.c2, "mvk/c").expect("c made again");
    assert_eq!(branch_tip(&f.repo, "mvk/c"), f.c2);
    drop((c, d));
}

#[test]
fn a_head_planted_by_a_leased_neighbour_does_not_keep_a_branch_from_its_attempt() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let a = pool.acquire(f.c1, "mvk/a").expect("a");
    // A's agent names the next attempt's branch in its HEAD (names are predictable).
    let planted = "ref: refs/heads/mvk/c\n";
    fs::write(a.admin.join("HEAD"), planted).expect("plant");
    let c = pool.acquire(f.c2, "mvk/c").expect("c is not refused");
    assert_eq!(branch_tip(&f.repo, "mvk/c"), f.c2);
    fs::write(a.admin.join("HEAD"), planted).expect("plant again");
    fs::write(c.path.join("x"), "x").expect("write");
    let id = capture(&c, "m").expect("capture despite the planted HEAD");
    assert_eq!(branch_tip(&f.repo, "mvk/c"), id);
    // A slot leased for the branch itself is still refused.
    assert!(matches!(
        pool.acquire(f.c1, "mvk/c"),
        Err(WorktreeError::BranchCheckedOut { .. })
    ));
}

#[test]
fn a_slot_whose_registration_names_the_main_checkout_is_rebuilt_and_the_registration_dropped() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/x").expect("acquire");
    let (slot, gitdir) = (lease.slot(), lease.admin.join("gitdir"));
    drop(lease);
    wait_free(&pool, slot);
    // Rewritten after the lease ended (a process that outlived its agent, or mvk killed).
    fs::write(&gitdir, format!("{}\n", f.repo.join(".git").display())).expect("relink");
    fs::write(f.repo.join("mine.txt"), "main's own").expect("write");
    let again = pool.acquire(f.c2, "mvk/y").expect("acquire again");
    assert_eq!(again.slot(), slot);
    assert_eq!(files(&again.path), tree_files(&f.repo, f.c2));
    let list = git(&f.repo, &["worktree", "list", "--porcelain"]);
    let main = fs::canonicalize(&f.repo).expect("canonical");
    let listed: Vec<&str> = list
        .lines()
        .filter_map(|l| l.strip_prefix("worktree "))
        .collect();
    assert_eq!(
        listed.iter().filter(|w| Path::new(w) == main).count(),
        1,
        "{list}"
    );
    assert_eq!(
        fs::read_to_string(f.repo.join("mine.txt")).expect("main untouched"),
        "main's own"
    );
}

#[test]
fn a_rewritten_gitdir_is_refused_and_put_back_before_anything_is_staged() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/r").expect("acquire");
    let gitdir = lease.admin.join("gitdir");
    let made = fs::read(&gitdir).expect("read gitdir");
    fs::write(f.repo.join("untracked.txt"), "main's own").expect("write");
    fs::write(&gitdir, format!("{}\n", f.repo.join(".git").display())).expect("relink");
    let err = capture(&lease, "m").expect_err("relinked");
    assert!(matches!(err, WorktreeError::Relinked { .. }), "{err:?}");
    assert_eq!(
        fs::read(&gitdir).expect("read"),
        made,
        "registration put back"
    );
    assert_eq!(branch_tip(&f.repo, "mvk/r"), f.c1, "nothing committed");
    // A link replaced by a symlink is removed, not written through.
    let victim = f.root.parent().expect("tmp").join("victim");
    fs::write(&victim, "keep").expect("victim");
    let commondir = lease.admin.join("commondir");
    let made = fs::read(&commondir).expect("read commondir");
    fs::remove_file(&commondir).expect("rm");
    std::os::unix::fs::symlink(&victim, &commondir).expect("symlink");
    assert!(head_of(&lease).is_err());
    assert_eq!(fs::read_to_string(&victim).expect("victim"), "keep");
    assert_eq!(fs::read(&commondir).expect("read"), made);
    // Intact again: the lease works.
    assert_eq!(head_of(&lease).expect("head"), f.c1);
    let list = git(&f.repo, &["worktree", "list", "--porcelain"]);
    assert!(list.contains(&lease.path.display().to_string()), "{list}");
}

#[test]
fn a_registration_naming_a_future_slot_is_not_pruned_when_that_slot_is_made() {
    // Slot 0's agent makes its registration name slot 1's path: building slot 1 must not
    // prune slot 0's git directory from under its attempt.
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let first = pool.acquire(f.c1, "mvk/f0").expect("acquire");
    let gitdir = first.admin.join("gitdir");
    let made = fs::read(&gitdir).expect("read gitdir");
    let next = f
        .root
        .join(format!("slot-{}", first.slot() + 1))
        .join(".git");
    fs::write(&gitdir, format!("{}\n", next.display())).expect("relink");
    let second = pool.acquire(f.c1, "mvk/f1").expect("acquire a second slot");
    assert_ne!(second.slot(), first.slot());
    assert!(
        first.admin.is_dir(),
        "slot 0's git directory is still there"
    );
    let err = head_of(&first).expect_err("relinked");
    assert!(matches!(err, WorktreeError::Relinked { .. }), "{err:?}");
    assert_eq!(fs::read(&gitdir).expect("read"), made, "put back");
}

#[test]
fn a_head_planted_without_pause_keeps_no_new_slot_from_its_branch() {
    // A leased neighbour's agent rewrites its HEAD to name the branch over and over: the
    // slot built for that branch must still be added (mvk registers it detached, with no
    // branch for a HEAD to name).
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let neighbour = pool.acquire(f.c1, "mvk/n").expect("acquire");
    let (stop, planter) = keep_planting(&neighbour.admin, "mvk/p");
    let failed = build_each(&pool, f.c1, (0..20).map(|_| "mvk/p".to_string()));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    planter.join().expect("planter");
    assert!(failed.is_empty(), "{failed:?}");
    let branches = git(&f.repo, &["branch", "--list", "mvk-scratch/*"]);
    assert_eq!(branches, "", "no scratch branch left");
}

/// Leases a slot built from nothing for each of BRANCHES (the slot is removed after each);
/// out come the errors of those that failed.
fn build_each(pool: &Pool, base: Oid, branches: impl Iterator<Item = String>) -> Vec<String> {
    let mut failed = Vec::new();
    for branch in branches {
        match pool.acquire(base, &branch) {
            Ok(lease) => {
                let (path, slot) = (lease.path.clone(), lease.slot());
                drop(lease);
                wait_free(pool, slot);
                fs::remove_dir_all(&path).expect("rm slot");
            }
            Err(e) => failed.push(e.to_string()),
        }
    }
    failed
}

/// Starts a thread that writes `ref: refs/heads/BRANCH` into HEAD (in ADMIN, a leased
/// neighbour's git directory) without pause, whole files only (write, then rename, as a
/// careful agent would), until the flag is set.
fn keep_planting(
    admin: &Path,
    branch: &str,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<()>,
) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (head, planted) = (admin.join("HEAD"), admin.join("HEAD.planted"));
    let text = format!("ref: refs/heads/{branch}\n");
    let thread = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = fs::write(&planted, &text);
                let _ = fs::rename(&planted, &head);
            }
        })
    };
    (stop, thread)
}

#[test]
fn a_head_planted_during_capture_and_reset_refuses_nothing_and_moves_no_branch() {
    // `capture` detaches HEAD, force-moves the lease's branch, then points HEAD at it; a
    // reset (`free_branch`) rewrites HEADs naming the branch. A leased neighbour's agent
    // writes its HEAD to name that branch between any two of those steps: nothing is
    // refused (libgit2 checks other worktrees' HEADs only when HEAD leaves a branch for
    // another, never from a detached HEAD, nor when a reference is written), and the
    // branch holds exactly what mvk put there.
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let neighbour = pool.acquire(f.c1, "mvk/n").expect("neighbour");
    // The plant has teeth: from a HEAD on a branch, libgit2 refuses the planted one.
    fs::write(neighbour.admin.join("HEAD"), "ref: refs/heads/mvk/c\n").expect("plant");
    let probe = pool.acquire(f.c1, "mvk/probe").expect("probe");
    git(&f.repo, &["branch", "-f", "mvk/c", &f.c1.to_string()]);
    let refused = Repository::open(&probe.path)
        .expect("open")
        .set_head("refs/heads/mvk/c")
        .expect_err("refused from a HEAD on a branch");
    assert!(refused.message().contains("linked"), "{refused}");
    drop(probe);
    let (stop, planter) = keep_planting(&neighbour.admin, "mvk/c");
    let main = Repository::open(&f.repo).expect("open");
    let mut failed = Vec::new();
    for i in 0..40 {
        // A new lease of the existing branch: `reset_slot` and `free_branch` run.
        let lease = match pool.acquire(f.c1, "mvk/c") {
            Ok(lease) => lease,
            Err(e) => {
                failed.push(format!("acquire {i}: {e}"));
                continue;
            }
        };
        fs::write(lease.path.join("x"), format!("{i}\n")).expect("write");
        // Its own agent left HEAD on a branch of its own, as `git switch -c` does. (No git
        // child processes in this loop: each fork holds a copy of the slot locks until it
        // execs, which other tests' waits for a free slot would see.)
        let head = lease.admin.join("HEAD");
        fs::write(&head, "ref: refs/heads/mvk/side\n").expect("switch");
        match capture(&lease, "m") {
            Ok(id) => {
                let at = main.refname_to_id("refs/heads/mvk/c").expect("tip");
                if at != id {
                    failed.push(format!("capture {i}: branch at {at}, captured {id}"));
                }
                let head = fs::read_to_string(&head).expect("read HEAD");
                if head.trim() != "ref: refs/heads/mvk/c" {
                    failed.push(format!("capture {i}: HEAD is {head}"));
                }
            }
            Err(e) => failed.push(format!("capture {i}: {e}")),
        }
        let slot = lease.slot();
        drop(lease);
        wait_free(&pool, slot);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    planter.join().expect("planter");
    assert!(failed.is_empty(), "{failed:#?}");
    // The neighbour's own capture (its HEAD names `mvk/c`, so its commit builds on that
    // branch's tip) moves its own branch, never `mvk/c`.
    fs::write(neighbour.admin.join("HEAD"), "ref: refs/heads/mvk/c\n").expect("plant");
    let before = branch_tip(&f.repo, "mvk/c");
    fs::write(neighbour.path.join("y"), "y\n").expect("write");
    let theirs = capture(&neighbour, "n").expect("neighbour's capture");
    assert_eq!(branch_tip(&f.repo, "mvk/c"), before);
    assert_eq!(branch_tip(&f.repo, "mvk/n"), theirs);
}

#[test]
fn a_neighbour_that_plants_every_new_branch_keeps_no_new_slot_from_being_built() {
    // Building a slot off a branch, however unguessable its name, was open to this: every
    // ref is readable, and a leased neighbour's agent that lists them without pause and
    // writes each new one into its HEAD, before libgit2 checked, made it refuse to add the
    // worktree ("already checked out": about one build in 300 here, the run ending on
    // mvk's own error). No branch is made for a build now: there is nothing to plant.
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let neighbour = pool.acquire(f.c1, "mvk/n").expect("neighbour");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let planter = {
        let stop = stop.clone();
        let heads = f.repo.join(".git/refs/heads");
        let head = neighbour.admin.join("HEAD");
        std::thread::spawn(move || {
            let mut planted = std::collections::BTreeSet::new();
            let known: BTreeSet<String> = ["main", "mvk"].map(String::from).into();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for e in walkdir::WalkDir::new(&heads).into_iter().flatten() {
                    let Ok(name) = e.path().strip_prefix(&heads) else {
                        continue;
                    };
                    let name = name.to_string_lossy().into_owned();
                    let top = name.split('/').next().unwrap_or_default().to_string();
                    // The attempts' own branches are planted by the tests above.
                    if e.file_type().is_file() && !known.contains(&top) {
                        let _ = fs::write(&head, format!("ref: refs/heads/{name}\n"));
                        planted.insert(name);
                    }
                }
            }
            planted
        })
    };
    let failed = build_each(&pool, f.c1, (0..100).map(|i| format!("mvk/s{i}")));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let planted = planter.join().expect("planter");
    assert!(
        failed.is_empty(),
        "{} of 100 failed: {failed:#?}",
        failed.len()
    );
    assert!(planted.is_empty(), "a build made a branch: {planted:?}");
    let branches = git(&f.repo, &["branch", "--list", "mvk-scratch/*"]);
    assert_eq!(branches, "", "no scratch branch left");
}

#[test]
fn slot_deleted_behind_our_back_is_recreated() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/d1").expect("acquire");
    let path = lease.path.clone();
    let slot = lease.slot();
    drop(lease);
    wait_free(&pool, slot);
    fs::remove_dir_all(&path).expect("rm slot");
    let lease = acquire_slot(&pool, f.c2, "mvk/d2", &path);
    assert_eq!(files(&lease.path), tree_files(&f.repo, f.c2));
    let list = git(&f.repo, &["worktree", "list", "--porcelain"]);
    assert_eq!(
        list.matches("worktree ").count(),
        2,
        "no stale entry: {list}"
    );
    assert!(!list.contains("prunable"), "{list}");
}

#[test]
fn slot_with_broken_git_link_is_rebuilt() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/g1").expect("acquire");
    let path = lease.path.clone();
    fs::remove_file(path.join(".git")).expect("rm .git link");
    fs::write(path.join("junk"), "j").expect("write");
    let slot = lease.slot();
    drop(lease);
    wait_free(&pool, slot);
    let lease = acquire_slot(&pool, f.c2, "mvk/g2", &path);
    assert_eq!(files(&lease.path), tree_files(&f.repo, f.c2));
    assert_eq!(git(&path, &["status", "--porcelain"]), "");
}

/// Puts a file mvk cannot delete under `slot`: immutable (`chattr +i`, as root), or, where
/// that is refused, in a directory without permissions (as a user that is not root).
/// Returns whether the file was made immutable (which only `chattr -i` undoes).
fn pin_a_file(slot: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let dir = slot.join("junk/locked");
    fs::create_dir_all(&dir).expect("mkdir");
    let pinned = dir.join("f");
    fs::write(&pinned, "pinned").expect("write");
    let immutable = std::process::Command::new("chattr")
        .arg("+i")
        .arg(&pinned)
        .status()
        .is_ok_and(|s| s.success());
    if !immutable {
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o000)).expect("chmod");
    }
    immutable
}

#[test]
fn a_slot_holding_a_file_mvk_cannot_delete_is_set_aside_and_rebuilt() {
    // Regression: the rebuild's removal failed and ended the run, and every later run
    // (the lowest idle slot is always taken first).
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/p1").expect("acquire");
    let path = lease.path.clone();
    pin_a_file(&path);
    // Broken, so that the next lease rebuilds it.
    fs::remove_file(path.join(".git")).expect("rm .git link");
    let slot = lease.slot();
    drop(lease);
    wait_free(&pool, slot);
    let again = pool.acquire(f.c2, "mvk/p2");
    let _ = std::process::Command::new("chattr")
        .args(["-R", "-f", "-i"])
        .arg(&f.root)
        .status();
    let again = again.expect("a rebuilt slot");
    assert_eq!(files(&again.path), tree_files(&f.repo, f.c2));
    assert_eq!(git(&again.path, &["status", "--porcelain"]), "");
}

#[test]
fn gc_sets_aside_a_slot_holding_a_file_it_cannot_delete_and_removes_it_once_it_can() {
    // Regression: gc's plain removal failed, and so did every later gc.
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/gc1").expect("acquire");
    let path = lease.path.clone();
    let immutable = pin_a_file(&path);
    let slot = lease.slot();
    drop(lease);
    wait_free(&pool, slot);
    let first = pool.gc();
    let _ = std::process::Command::new("chattr")
        .args(["-R", "-f", "-i"])
        .arg(&f.root)
        .status();
    assert_eq!(first.expect("gc"), vec![path.clone()]);
    assert!(!path.exists());
    let aside: Vec<PathBuf> = fs::read_dir(&f.root)
        .expect("list")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains(".broken-"))
        .collect();
    assert_eq!(aside.len(), usize::from(immutable), "{aside:?}");
    // Unpinned now: the next gc takes what was set aside.
    let second = pool.gc().expect("gc again");
    assert_eq!(second, aside);
    assert!(aside.iter().all(|p| !p.exists()));
}

#[test]
fn empty_repository_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = tmp.path().join("repo");
    fs::create_dir(&repo).expect("mkdir");
    git(&repo, &["init", "-q"]);
    let err = Pool::open(&repo, &tmp.path().join("pool")).expect_err("empty repo");
    assert!(matches!(err, WorktreeError::NoCommits { .. }), "{err:?}");
    assert!(err.to_string().contains("no commits"), "{err}");
}

#[test]
fn root_inside_repo_and_unknown_base_are_refused() {
    let f = fixture();
    let err = Pool::open(&f.repo, &f.repo.join("pool")).expect_err("inside");
    assert!(
        matches!(err, WorktreeError::RootInsideRepo { .. }),
        "{err:?}"
    );
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let missing = Oid::from_str("1234567890123456789012345678901234567890").expect("oid");
    assert!(matches!(
        pool.acquire(missing, "mvk/m"),
        Err(WorktreeError::BaseNotFound { .. })
    ));
}

/// Review r8d, W2: a directory at the restore's temporary name made it fail, and capture
/// then had libgit2 open the agent's index: a FIFO there blocked mvk for good.
#[test]
fn an_index_the_agent_replaced_by_a_fifo_neither_hangs_capture_nor_is_read() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/fifo").expect("acquire");
    fs::write(lease.path.join("a.txt"), "changed\n").expect("write");
    fs::remove_file(lease.admin.join("index")).expect("rm index");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        lease.admin.join("index"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .expect("mkfifo");
    fs::create_dir(lease.admin.join("index.mvk-tmp")).expect("mkdir");
    fs::write(lease.admin.join("index.mvk-tmp/x"), "").expect("write");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(capture(&lease, "w2").map(|head| (head, lease.path.clone())));
    });
    let (head, path) = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("capture returns")
        .expect("capture succeeds");
    assert_eq!(committed(&path, head, "a.txt"), b"changed\n");
}

/// Review r8e, M1: an index replaced by a directory nested deeper than mvk removed (then)
/// made the restore, and the whole run, fail; now it goes, and capture goes on.
#[test]
fn an_index_replaced_by_a_directory_too_deep_to_remove_is_moved_aside() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/deep-index").expect("acquire");
    fs::write(lease.path.join("a.txt"), "changed\n").expect("write");
    fs::remove_file(lease.admin.join("index")).expect("rm index");
    let mut deep = lease.admin.join("index");
    for _ in 0..300 {
        deep.push("d");
    }
    fs::create_dir_all(&deep).expect("mkdir deep");
    let head = capture(&lease, "m1").expect("capture succeeds");
    assert_eq!(committed(&lease.path, head, "a.txt"), b"changed\n");
}

/// A lease of the slot at `want` (the one just released). Another test's child process may
/// hold the slot's lock for the moment between its fork and its exec (the lock is on the
/// open file, which the child shares until exec closes it): then the pool rightly hands out
/// another slot, and this tries again.
fn acquire_slot(pool: &Pool, base: Oid, branch: &str, want: &Path) -> Lease {
    for _ in 0..200 {
        let lease = pool.acquire(base, branch).expect("acquire");
        if lease.path == want {
            return lease;
        }
        drop(lease);
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("slot {} never came back", want.display());
}

/// What commit `head` holds at `file`, read through the repository at `path`.
fn committed(path: &Path, head: Oid, file: &str) -> Vec<u8> {
    let repo = Repository::open(path).expect("open");
    let tree = repo
        .find_commit(head)
        .expect("commit")
        .tree()
        .expect("tree");
    let blob = tree.get_path(Path::new(file)).expect("file").id();
    repo.find_blob(blob).expect("blob").content().to_vec()
}

#[test]
fn capture_without_changes_returns_head() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/none").expect("acquire");
    assert_eq!(capture(&lease, "nothing").expect("capture"), f.c1);
    // Only ignored output: still nothing to record.
    fs::create_dir_all(lease.path.join("target")).expect("mkdir");
    fs::write(lease.path.join("target/out"), "o").expect("write");
    assert_eq!(capture(&lease, "nothing").expect("capture"), f.c1);
    assert_eq!(branch_tip(&f.repo, "mvk/none"), f.c1);
}

#[test]
fn capture_records_commits_edits_deletions_and_untracked_files() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/cap").expect("acquire");
    let p = &lease.path;
    fs::write(p.join("first.txt"), "1").expect("write");
    git(p, &["add", "first.txt"]);
    git(p, &["commit", "-q", "-m", "agent"]);
    let agent = rev(p, "HEAD");
    fs::write(p.join("a.txt"), "changed\n").expect("write");
    fs::remove_file(p.join("src/lib.rs")).expect("rm");
    fs::create_dir_all(p.join("n1/n2")).expect("mkdir");
    fs::write(p.join("n1/n2/deep.txt"), "deep").expect("write");
    fs::write(p.join(".hidden"), "h").expect("write");
    fs::create_dir_all(p.join("target")).expect("mkdir");
    fs::write(p.join("target/out"), "o").expect("write");

    let id = capture(&lease, "attempt 1").expect("capture");
    assert_ne!(id, agent);
    assert_eq!(rev(&f.repo, &format!("{id}^")), agent, "agent commit kept");
    assert_eq!(branch_tip(&f.repo, "mvk/cap"), id);
    assert_eq!(head_of(&lease).expect("head"), id);
    let listed = git(&f.repo, &["ls-tree", "-r", "--name-only", &id.to_string()]);
    let names: Vec<&str> = listed.lines().collect();
    assert_eq!(
        names,
        [
            ".gitignore",
            ".hidden",
            "a.txt",
            "first.txt",
            "n1/n2/deep.txt"
        ]
    );
    let msg = git(&f.repo, &["log", "-1", "--format=%s", &id.to_string()]);
    assert_eq!(msg.trim(), "attempt 1");
    assert_eq!(
        git(p, &["status", "--porcelain"]),
        "",
        "index matches capture"
    );
}

/// Every path under DIR but `.git`, files and directories alike, sorted.
fn tree_on_disk(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = walkdir::WalkDir::new(dir)
        .min_depth(1)
        .into_iter()
        .filter_entry(|e| e.file_name() != ".git" || e.depth() != 1)
        .map(|e| {
            let e = e.expect("walk");
            let rel = e.path().strip_prefix(dir).expect("inside");
            rel.to_string_lossy().into_owned()
        })
        .collect();
    out.sort();
    out
}

/// An agent's leftovers: an edit, a deletion leaving `src/` empty, a new nested file, an
/// empty directory, ignored output. Returns the lease and the captured commit.
fn captured_attempt(f: &Fixture, pool: &Pool, branch: &str) -> (Lease, Oid) {
    let lease = pool.acquire(f.c1, branch).expect("acquire");
    let p = &lease.path;
    fs::write(p.join("a.txt"), "changed\n").expect("write");
    fs::remove_file(p.join("src/lib.rs")).expect("rm");
    fs::create_dir_all(p.join("n1/n2")).expect("mkdir");
    fs::write(p.join("n1/n2/deep.txt"), "deep").expect("write");
    fs::create_dir_all(p.join("empty/inner")).expect("mkdir");
    fs::create_dir_all(p.join("target/debug")).expect("mkdir");
    fs::write(p.join("target/debug/forged"), "o").expect("write");
    let id = capture(&lease, "attempt").expect("capture");
    (lease, id)
}

#[test]
fn a_reset_in_place_writes_only_what_differs_and_leaves_a_clean_checkout() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/r1").expect("acquire");
    let p = lease.path.clone();
    // The same in c1 and c2, rewritten to the same size: only its stat data tells.
    fs::write(p.join(".gitignore"), "TARGET/\n").expect("write");
    fs::write(p.join("untracked.txt"), "u").expect("write");
    fs::create_dir_all(p.join("target/x")).expect("mkdir");
    fs::write(p.join("target/x/o"), "o").expect("write");
    fs::create_dir_all(p.join("empty/inner")).expect("mkdir");
    drop(lease);
    let repo = Repository::open(&p).expect("open");
    let tree = repo.find_commit(f.c2).and_then(|c| c.tree()).expect("tree");
    let mut index = repo.index().expect("index");
    assert!(
        reset_in_place(&repo, &pool.git_dir, &p, &tree, &mut index).expect("reset"),
        "reset in place"
    );
    // An index written in the same clock tick as the files makes them racily clean (and
    // rewritten by the next reset, as git would): a tick later, they are simply clean.
    std::thread::sleep(std::time::Duration::from_millis(20));
    index.write().expect("write index");
    assert_eq!(tree_on_disk(&p), [".gitignore", "a.txt", "b.txt"]);
    assert_eq!(
        fs::read_to_string(p.join(".gitignore")).expect("read"),
        "target/\n"
    );
    assert_eq!(fs::read_to_string(p.join("a.txt")).expect("read"), "two\n");
    let c2 = f.c2.to_string();
    git(&p, &["diff", "--quiet", &c2]);
    git(&p, &["diff", "--cached", "--quiet", &c2]);
    assert_eq!(git(&p, &["ls-files", "--others"]), "");
    // Every entry carries the stat data of its file: the next reset trusts it.
    let dirty = sweep(&repo, &pool.git_dir, &p, &index)
        .expect("sweep")
        .expect("judged");
    assert!(dirty.is_empty(), "{dirty:?}");
}

/// Writes an index entry for REL in the worktree at DIR holding ID but the stat data of the
/// file now on disk: what an agent can do to its own index, by hand.
fn forge_entry(dir: &Path, rel: &str, id: Oid, mode: u32) {
    use std::os::unix::fs::MetadataExt;
    let repo = Repository::open(dir).expect("open");
    let mut index = repo.index().expect("index");
    let meta = fs::symlink_metadata(dir.join(rel)).expect("stat");
    let time = |s: i64, ns: i64| git2::IndexTime::new(i32::try_from(s).expect("time"), ns as u32);
    index
        .add(&git2::IndexEntry {
            ctime: time(meta.ctime(), meta.ctime_nsec()),
            mtime: time(meta.mtime(), meta.mtime_nsec()),
            dev: meta.dev() as u32,
            ino: meta.ino() as u32,
            mode,
            uid: meta.uid(),
            gid: meta.gid(),
            file_size: meta.size() as u32,
            id,
            flags: 0,
            flags_extended: 0,
            path: rel.as_bytes().to_vec(),
        })
        .expect("add forged entry");
    // A tick after the file, so the entry is not racily clean.
    std::thread::sleep(std::time::Duration::from_millis(20));
    index.write().expect("write forged index");
}

#[test]
fn an_index_the_agent_forged_fools_neither_capture_nor_the_gates_nor_the_next_reset() {
    forged_index_fools_nothing(false);
}

// The same on a slot reset in place, whose capture stages against the index in memory.
#[test]
fn an_index_the_agent_forged_fools_nothing_on_a_slot_reset_in_place() {
    forged_index_fools_nothing(true);
}

fn forged_index_fools_nothing(in_place: bool) {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = if in_place {
        let first = pool.acquire(f.c1, "mvk/first").expect("acquire");
        let p = first.path.clone();
        drop(first);
        let lease = acquire_slot(&pool, f.c1, "mvk/forged", &p);
        assert!(lease.held.lock().is_ok_and(|held| held.is_some()));
        lease
    } else {
        pool.acquire(f.c1, "mvk/forged").expect("acquire")
    };
    let p = lease.path.clone();
    let one = Repository::open(&p)
        .and_then(|r| r.revparse_single("HEAD:a.txt").map(|o| o.id()))
        .expect("blob of a.txt");
    // The file weakened on disk, its entry still naming the base's blob.
    fs::write(p.join("a.txt"), "two\n").expect("write");
    std::thread::sleep(std::time::Duration::from_millis(20));
    forge_entry(&p, "a.txt", one, 0o100644);
    let head = capture(&lease, "attempt").expect("capture");
    // The commit holds what the gates will run: the file on disk.
    let tree = tree_files(&f.repo, head);
    assert!(
        tree.contains(&("a.txt".to_string(), b"two\n".to_vec())),
        "{tree:?}"
    );
    // Forged again after capture: the gates' clean-in-place check is not fooled either.
    fs::write(p.join("a.txt"), "six\n").expect("write");
    std::thread::sleep(std::time::Duration::from_millis(20));
    let captured = Repository::open(&p)
        .and_then(|r| r.revparse_single("HEAD:a.txt").map(|o| o.id()))
        .expect("blob");
    forge_entry(&p, "a.txt", captured, 0o100644);
    // `clean_in_place` reads what capture wrote (mvk's), so it refuses or rewrites.
    lease.forget_sweep();
    let clean = clean_in_place(&lease, head).expect("clean in place");
    assert!(
        !clean || fs::read_to_string(p.join("a.txt")).expect("read") == "two\n",
        "the gates would run a file the commit does not hold"
    );
    drop(lease);
    // The next lease of the slot, on the base: the file is the base's again.
    let _lease = acquire_slot(&pool, f.c1, "mvk/next", &p);
    assert_eq!(fs::read_to_string(p.join("a.txt")).expect("read"), "one\n");
    git(&p, &["diff", "--quiet", &f.c1.to_string()]);
}

#[test]
fn a_link_and_a_forged_entry_below_it_make_no_reset_touch_anything_outside() {
    let f = fixture();
    let outside = f._tmp.path().join("victim");
    fs::create_dir_all(&outside).expect("mkdir");
    fs::write(outside.join("secret"), "keep").expect("write");
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/link").expect("acquire");
    let p = lease.path.clone();
    std::os::unix::fs::symlink(&outside, p.join("L")).expect("symlink");
    let repo = Repository::open(&p).expect("open");
    let target = repo
        .blob(outside.as_os_str().as_encoded_bytes())
        .expect("blob");
    let any = repo.blob(b"x").expect("blob");
    drop(repo);
    forge_entry(&p, "L", target, 0o120000);
    // An entry below the link, missing on disk: a reset would "restore" it by removing
    // and writing through the link.
    {
        let repo = Repository::open(&p).expect("open");
        let mut index = repo.index().expect("index");
        let mut entry = index.get_path(Path::new("a.txt"), 0).expect("entry");
        entry.path = b"L/secret".to_vec();
        entry.id = any;
        index.add(&entry).expect("add");
        index.write().expect("write");
    }
    drop(lease);
    let _lease = acquire_slot(&pool, f.c2, "mvk/after", &p);
    assert_eq!(
        fs::read_to_string(outside.join("secret")).expect("the file outside is still there"),
        "keep"
    );
    assert!(
        fs::symlink_metadata(p.join("L")).is_err(),
        "the link is gone"
    );
    git(&p, &["diff", "--quiet", &f.c2.to_string()]);
}

/// Review r8d, W1: a reset that cannot go in place (a base 65 files away) checked out over
/// what the agent left, and libgit2 could write the base's `a.txt` through the agent's
/// symlink into a file outside, and `src/lib.rs` through its hard link.
#[test]
fn a_full_checkout_writes_through_no_link_the_agent_left() {
    let f = fixture();
    let outside = f._tmp.path().join("bashrc");
    fs::write(&outside, "VICTIM").expect("write");
    // c3: c1 and more new files than a reset in place writes.
    let c3 = {
        let repo = Repository::open(&f.repo).expect("open");
        let c1 = repo.find_commit(f.c1).expect("c1");
        let mut tb = repo
            .treebuilder(Some(&c1.tree().expect("tree")))
            .expect("tb");
        for i in 0..=RESET_IN_PLACE_MAX {
            let blob = repo.blob(format!("{i}\n").as_bytes()).expect("blob");
            tb.insert(format!("new-{i}.txt"), blob, 0o100_644)
                .expect("insert");
        }
        let tree = repo.find_tree(tb.write().expect("write")).expect("tree");
        let sig = git2::Signature::now("t", "t@example.com").expect("sig");
        repo.commit(None, &sig, &sig, "c3", &tree, &[&c1])
            .expect("commit")
    };
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/w1").expect("acquire");
    let p = lease.path.clone();
    fs::remove_file(p.join("a.txt")).expect("rm");
    std::os::unix::fs::symlink(&outside, p.join("a.txt")).expect("symlink");
    fs::remove_file(p.join("src/lib.rs")).expect("rm");
    fs::write(f._tmp.path().join("hard"), "HARD").expect("write");
    fs::hard_link(f._tmp.path().join("hard"), p.join("src/lib.rs")).expect("hard link");
    drop(lease);
    let _lease = acquire_slot(&pool, c3, "mvk/w1b", &p);
    assert_eq!(fs::read_to_string(&outside).expect("read"), "VICTIM");
    assert_eq!(
        fs::read_to_string(f._tmp.path().join("hard")).expect("read"),
        "HARD"
    );
    assert!(
        !fs::symlink_metadata(p.join("a.txt"))
            .expect("stat")
            .is_symlink()
    );
    assert_eq!(
        fs::read_to_string(p.join("new-3.txt")).expect("read"),
        "3\n"
    );
    git(&p, &["diff", "--quiet", &c3.to_string()]);
    git(&p, &["diff", "--cached", "--quiet", &c3.to_string()]);
}

#[test]
fn a_hard_link_between_tracked_files_does_not_survive_a_reset() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/hard").expect("acquire");
    let p = lease.path.clone();
    drop(lease);
    fs::remove_file(p.join("a.txt")).expect("rm");
    fs::hard_link(p.join("src/lib.rs"), p.join("a.txt")).expect("link");
    let _lease = acquire_slot(&pool, f.c1, "mvk/hard2", &p);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(fs::metadata(p.join("src/lib.rs")).expect("stat").nlink(), 1);
    assert_eq!(fs::read_to_string(p.join("a.txt")).expect("read"), "one\n");
}

#[test]
fn a_sweep_deletes_nothing_through_a_directory_swapped_for_a_symlink() {
    // Regression: the sweep saw that a tracked directory was one, then listed it and
    // removed what it held by path: swapped for a symlink in between (by a process an
    // agent left running), it made mvk delete the files of the directory the symlink named.
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/swap").expect("acquire");
    let p = lease.path.clone();
    // `src` is tracked (`src/lib.rs`); what else it holds is the sweep's to remove.
    fs::write(p.join("src/untracked.txt"), "u").expect("write");
    drop(lease);
    let outside = f._tmp.path().join("outside");
    fs::create_dir_all(outside.join("dir")).expect("mkdir");
    fs::write(outside.join("victim.txt"), "keep").expect("write");
    fs::write(outside.join("dir/victim.txt"), "keep").expect("write");
    let repo = Repository::open(&p).expect("open");
    let tree = repo.find_commit(f.c1).and_then(|c| c.tree()).expect("tree");
    let mut index = repo.index().expect("index");
    let (src, to) = (p.join("src"), outside.clone());
    untrusted::race::set(move |name| {
        if name == Path::new("src") && fs::symlink_metadata(&src).is_ok_and(|m| m.is_dir()) {
            fs::rename(&src, src.with_file_name("src.aside")).expect("rename");
            std::os::unix::fs::symlink(&to, &src).expect("symlink");
        }
    });
    let reset = reset_in_place(&repo, &pool.git_dir, &p, &tree, &mut index);
    untrusted::race::clear();
    assert!(!reset.expect("reset"), "left to a full checkout");
    for victim in ["victim.txt", "dir/victim.txt"] {
        assert_eq!(
            fs::read_to_string(outside.join(victim)).ok().as_deref(),
            Some("keep"),
            "{victim}"
        );
    }
}

#[test]
fn a_retired_slot_is_left_as_it_is_and_never_leased_until_gc() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/retired").expect("acquire");
    let (slot, path) = (lease.slot(), lease.path.clone());
    fs::write(path.join("left.txt"), "by a process mvk could not end").expect("write");
    lease.retire().expect("retire");
    let next = pool.acquire(f.c1, "mvk/next").expect("acquire");
    assert_ne!(next.slot(), slot, "a retired slot is leased again");
    assert!(path.join("left.txt").exists(), "a retired slot is touched");
    drop(next);
    let removed = pool.gc().expect("gc");
    assert!(removed.contains(&path), "{removed:?}");
    let again = pool.acquire(f.c1, "mvk/again").expect("acquire");
    assert_eq!(again.slot(), slot, "gc frees the number");
    assert!(!path.join("left.txt").exists());
}

#[test]
fn clean_in_place_leaves_exactly_the_captured_commit() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let (lease, id) = captured_attempt(&f, &pool, "mvk/clean");
    assert!(
        clean_in_place(&lease, id).expect("clean"),
        "cleaned in place"
    );
    // What a fresh checkout of the commit holds: no ignored output, no empty directory.
    assert_eq!(
        tree_on_disk(&lease.path),
        [".gitignore", "a.txt", "n1", "n1/n2", "n1/n2/deep.txt"]
    );
    assert_eq!(
        git(&lease.path, &["status", "--porcelain", "--ignored"]),
        ""
    );
    assert_eq!(head_of(&lease).expect("head"), id);
}

#[test]
fn clean_in_place_refuses_a_worktree_that_is_not_what_capture_recorded() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    // A tracked file rewritten after the capture, to the same size.
    let (lease, id) = captured_attempt(&f, &pool, "mvk/edited");
    fs::write(lease.path.join("a.txt"), "CHANGED\n").expect("write");
    lease.forget_sweep();
    assert!(!clean_in_place(&lease, id).expect("clean"), "edited file");
    drop(lease);
    // Only its mode changed.
    let (lease, id) = captured_attempt(&f, &pool, "mvk/chmod");
    let a = lease.path.join("a.txt");
    let mut perms = fs::metadata(&a).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    fs::set_permissions(&a, perms).expect("chmod");
    lease.forget_sweep();
    assert!(!clean_in_place(&lease, id).expect("clean"), "mode changed");
    drop(lease);
    // A tracked file gone.
    let (lease, id) = captured_attempt(&f, &pool, "mvk/gone");
    fs::remove_file(lease.path.join("n1/n2/deep.txt")).expect("rm");
    lease.forget_sweep();
    assert!(!clean_in_place(&lease, id).expect("clean"), "file gone");
    drop(lease);
    // HEAD is not the commit asked for.
    let (lease, _) = captured_attempt(&f, &pool, "mvk/other");
    assert!(
        !clean_in_place(&lease, f.c1).expect("clean"),
        "other commit"
    );
    drop(lease);
    // A checkout would convert line endings.
    git(&f.repo, &["config", "core.autocrlf", "input"]);
    let (lease, id) = captured_attempt(&f, &pool, "mvk/crlf");
    assert!(!clean_in_place(&lease, id).expect("clean"), "autocrlf");
}

#[test]
fn capture_uses_repo_user_when_configured() {
    let f = fixture();
    git(&f.repo, &["config", "user.name", "Repo User"]);
    git(&f.repo, &["config", "user.email", "repo@example.com"]);
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/user").expect("acquire");
    fs::write(lease.path.join("x"), "x").expect("write");
    let id = capture(&lease, "m").expect("capture");
    let who = git(
        &f.repo,
        &["log", "-1", "--format=%an <%ae>|%cn", &id.to_string()],
    );
    assert_eq!(who.trim(), "Repo User <repo@example.com>|Repo User");
}

#[test]
fn capture_without_any_git_user_configured() {
    // libgit2 reads the user's global and XDG config at startup, so run the real capture in
    // a child test process whose HOME and XDG dirs are empty.
    let tmp = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new(exe)
        .args([
            "--exact",
            "run::worktree::tests::child_capture_with_empty_home",
            "--ignored",
            "--nocapture",
        ])
        .env("HOME", tmp.path())
        .env("XDG_CONFIG_HOME", tmp.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env(CHILD_ENV, tmp.path())
        .output()
        .expect("run child test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("1 passed"),
        "child test did not run: {stdout}"
    );
}

const CHILD_ENV: &str = "MVK_WORKTREE_TEST_CHILD";

#[test]
#[ignore = "run by capture_without_any_git_user_configured in a clean environment"]
fn child_capture_with_empty_home() {
    let home = std::env::var_os(CHILD_ENV).expect("only run as a child");
    assert_eq!(std::env::var_os("HOME"), Some(home));
    let f = fixture();
    let repo = Repository::open(&f.repo).expect("open");
    let config = repo.config().expect("config");
    assert!(
        config.get_string("user.name").is_err(),
        "a user is configured"
    );
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/nouser").expect("acquire");
    fs::write(lease.path.join("x"), "x").expect("write");
    let id = capture(&lease, "m").expect("capture");
    let commit = repo.find_commit(id).expect("commit");
    assert_eq!(commit.author().name().ok(), Some("mvk"));
    assert_eq!(commit.author().email().ok(), Some("mvk@localhost"));
    assert_eq!(commit.committer().name().ok(), Some("mvk"));
}

#[test]
fn capture_from_other_branch_or_detached_head() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");

    let lease = pool.acquire(f.c1, "mvk/wander").expect("acquire");
    let p = lease.path.clone();
    git(&p, &["checkout", "-q", "-b", "agent-side"]);
    fs::write(p.join("side.txt"), "s").expect("write");
    git(&p, &["add", "side.txt"]);
    git(&p, &["commit", "-q", "-m", "side"]);
    let side = rev(&p, "HEAD");
    fs::write(p.join("loose.txt"), "l").expect("write");
    let id = capture(&lease, "wander").expect("capture");
    assert_eq!(rev(&f.repo, &format!("{id}^")), side);
    assert_eq!(branch_tip(&f.repo, "mvk/wander"), id);
    assert_eq!(
        branch_tip(&f.repo, "agent-side"),
        side,
        "agent branch untouched"
    );
    assert_eq!(
        git(&p, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/mvk/wander"
    );
    drop(lease);

    let lease = pool.acquire(f.c1, "mvk/detached").expect("acquire");
    let p = lease.path.clone();
    git(&p, &["checkout", "-q", "--detach"]);
    fs::write(p.join("d.txt"), "d").expect("write");
    git(&p, &["add", "d.txt"]);
    git(&p, &["commit", "-q", "-m", "detached work"]);
    let detached = rev(&p, "HEAD");
    let id = capture(&lease, "detached").expect("capture");
    assert_eq!(id, detached, "nothing uncommitted: HEAD itself");
    assert_eq!(branch_tip(&f.repo, "mvk/detached"), detached);
    assert_eq!(
        git(&p, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/mvk/detached"
    );
}

/// Waits until no process holds slot `n`'s lock: a process another test forks while a
/// lease is held keeps a copy of the lock's file until it execs.
fn wait_free(pool: &Pool, n: usize) {
    for _ in 0..500 {
        if pool.try_lock_slot(n).expect("probe slot").is_some() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("slot {n} stayed locked");
}

#[test]
fn gc_removes_idle_slots_and_keeps_leased_ones() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let kept = pool.acquire(f.c1, "mvk/k").expect("kept");
    let idle = pool.acquire(f.c1, "mvk/i").expect("idle");
    let idle_path = idle.path.clone();
    let idle_slot = idle.slot();
    drop(idle);
    wait_free(&pool, idle_slot);
    let removed = pool.gc().expect("gc");
    assert_eq!(removed, vec![idle_path.clone()]);
    assert!(!idle_path.exists());
    assert!(kept.path.exists());
    let list = git(&f.repo, &["worktree", "list", "--porcelain"]);
    assert!(!list.contains(&idle_path.display().to_string()), "{list}");
    assert!(list.contains(&kept.path.display().to_string()), "{list}");
    assert_eq!(branch_tip(&f.repo, "mvk/i"), f.c1, "branches stay");
    let kept_slot = kept.slot();
    drop(kept);
    wait_free(&pool, kept_slot);
    assert_eq!(pool.gc().expect("gc").len(), 1);
    assert!(pool.gc().expect("gc again").is_empty());
    // The pool still works after a full gc.
    let again = pool.acquire(f.c2, "mvk/after").expect("acquire after gc");
    assert_eq!(files(&again.path), tree_files(&f.repo, f.c2));
}

/// Plants `refs/heads/NAME` at `at`, as a build that died would leave it.
fn plant_branch(repo: &Path, name: &str, at: Oid) {
    git(
        repo,
        &["update-ref", &format!("refs/heads/{name}"), &at.to_string()],
    );
}

#[test]
fn gc_scratch_removes_this_pools_leftover_scratch_branches_only() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/k").expect("acquire");
    let mine = format!("mvk-scratch/{}-0-00000000deadbeef", pool.root_tag);
    let other = "mvk-scratch/0123abcd-0-00000000deadbeef";
    plant_branch(&f.repo, &mine, f.c1);
    plant_branch(&f.repo, other, f.c1);
    // A slot mvk died building still names its scratch branch in its HEAD.
    fs::write(
        lease.admin.join("HEAD"),
        format!("ref: refs/heads/{mine}\n"),
    )
    .expect("plant");
    assert_eq!(pool.gc_scratch(true).expect("dry run"), [mine.as_str()]);
    assert_eq!(
        branch_tip(&f.repo, &mine),
        f.c1,
        "a dry run deletes nothing"
    );
    assert_eq!(pool.gc_scratch(false).expect("gc"), [mine.as_str()]);
    let left = git(&f.repo, &["branch", "--list", "mvk-scratch/*"]);
    assert!(!left.contains(&mine), "{left}");
    assert!(
        left.contains(other),
        "another pool's is not this gc's: {left}"
    );
    assert_eq!(branch_tip(&f.repo, "mvk/k"), f.c1, "other branches stay");
    assert!(pool.gc_scratch(false).expect("again").is_empty());
}

#[test]
fn gc_scratch_waits_for_a_slot_build_in_progress() {
    // A build holds the registry lock from its scratch branch's creation to its deletion:
    // gc takes the lock first, so it never deletes a branch a build is using.
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let building = format!("mvk-scratch/{}-3-00000000feedface", pool.root_tag);
    let registry = pool.lock_registry().expect("lock registry");
    plant_branch(&f.repo, &building, f.c1);
    let gc = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.gc_scratch(false))
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(branch_tip(&f.repo, &building), f.c1, "deleted mid-build");
    assert!(!gc.is_finished(), "gc did not wait for the build");
    // The build ends: it drops its branch, then the lock.
    git(
        &f.repo,
        &["update-ref", "-d", &format!("refs/heads/{building}")],
    );
    drop(registry);
    assert!(gc.join().expect("gc thread").expect("gc").is_empty());
}

#[test]
fn index_flags_one_lease_set_hide_nothing_from_the_next_leases_capture() {
    // An agent marks a.txt assume-unchanged and skip-worktree... on another file; the next
    // lease of the slot edits both, and its capture must record the edits.
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let first = pool.acquire(f.c1, "mvk/flags-1").expect("acquire");
    git(
        &first.path,
        &["update-index", "--assume-unchanged", "a.txt"],
    );
    git(
        &first.path,
        &["update-index", "--skip-worktree", "src/lib.rs"],
    );
    let slot = first.slot();
    drop(first);
    wait_free(&pool, slot);
    let second = pool.acquire(f.c1, "mvk/flags-2").expect("acquire");
    assert_eq!(second.slot(), slot, "the same slot again");
    fs::write(second.path.join("a.txt"), "edited\n").expect("write");
    fs::write(second.path.join("src/lib.rs"), "edited too\n").expect("write");
    let id = capture(&second, "attempt").expect("capture");
    let shown = |file: &str| git(&f.repo, &["show", &format!("{id}:{file}")]);
    assert_eq!(shown("a.txt"), "edited\n");
    assert_eq!(shown("src/lib.rs"), "edited too\n");
}

#[test]
fn a_locked_registration_or_a_half_written_one_does_not_keep_a_slot_from_being_rebuilt() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let worktrees = f.repo.join(".git/worktrees");
    let names = || -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(&worktrees)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let lease = pool.acquire(f.c1, "mvk/lock-1").expect("acquire");
    let (path, slot, admin) = (lease.path.clone(), lease.slot(), lease.admin.clone());
    let made = names();
    // The agent locks its registration (git refuses to prune a locked worktree) and breaks
    // the slot beyond a reset: the rebuild must still drop the old registration.
    fs::write(admin.join("locked"), "mine").expect("lock");
    fs::remove_file(path.join(".git")).expect("break");
    drop(lease);
    wait_free(&pool, slot);
    let again = pool.acquire(f.c1, "mvk/lock-2").expect("rebuilt");
    assert_eq!(files(&again.path), tree_files(&f.repo, f.c1));
    assert_eq!(names(), made, "the same name, no second registration");
    // A crash in the middle of writing a registration (no `gitdir` yet) leaves a directory
    // git does not list; the next build of the slot takes the name back.
    let admin = again.admin.clone();
    drop(again);
    wait_free(&pool, slot);
    fs::remove_file(admin.join("gitdir")).expect("half-written");
    fs::remove_file(path.join(".git")).expect("break");
    let third = pool.acquire(f.c1, "mvk/lock-3").expect("rebuilt again");
    assert_eq!(files(&third.path), tree_files(&f.repo, f.c1));
    assert_eq!(names(), made, "the leftover went, its name reused");
}

#[test]
fn gc_removes_a_slot_whose_agent_locked_its_registration() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(f.c1, "mvk/locked").expect("acquire");
    let (path, slot) = (lease.path.clone(), lease.slot());
    fs::write(lease.admin.join("locked"), "mine").expect("lock");
    drop(lease);
    wait_free(&pool, slot);
    assert_eq!(pool.gc().expect("gc"), vec![path]);
    let list = git(&f.repo, &["worktree", "list", "--porcelain"]);
    assert_eq!(list.matches("worktree ").count(), 1, "{list}");
}

/// What `git add -A` stages in the worktree at DIR, from HEAD, in an index of its own (the
/// slot's is left alone): the tree id git writes.
fn git_add_all_tree(dir: &Path) -> Oid {
    let scratch = tempfile::tempdir().expect("tempdir");
    let index = scratch.path().join("index");
    let run = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_INDEX_FILE", &index)
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).expect("utf-8")
    };
    run(&["read-tree", "HEAD"]);
    run(&["add", "-A"]);
    Oid::from_str(run(&["write-tree"]).trim()).expect("oid")
}

#[test]
fn one_walk_stages_what_git_add_all_stages_and_sweeps_what_a_checkout_lacks() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    // A first capture writes mvk's own index with every entry's stat data; the second attempt
    // on the slot is the one judged by stat data.
    drop(captured_attempt(&f, &pool, "mvk/first"));
    let lease = pool.acquire(f.c2, "mvk/walk").expect("acquire");
    let p = lease.path.clone();
    // An index written a tick after every file (the reset wrote some in the index's tick), and
    // edits a tick later: no entry is racily clean, only stat data can tell.
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(capture(&lease, "nothing yet").expect("capture"), f.c2);
    lease.forget_sweep();
    std::thread::sleep(std::time::Duration::from_millis(20));
    // Edited, its modification time put back: only the change time tells.
    let before = fs::metadata(p.join("a.txt"))
        .expect("stat")
        .modified()
        .expect("mtime");
    fs::write(p.join("a.txt"), "TWO\n").expect("write");
    fs::File::options()
        .write(true)
        .open(p.join("a.txt"))
        .and_then(|f| f.set_modified(before))
        .expect("restore mtime");
    // Only the executable bit.
    fs::set_permissions(p.join(".gitignore"), fs::Permissions::from_mode(0o755)).expect("chmod");
    // A tracked file replaced by a symlink, a new symlink, a new file deep down.
    fs::remove_file(p.join("b.txt")).expect("rm");
    std::os::unix::fs::symlink("a.txt", p.join("b.txt")).expect("symlink");
    std::os::unix::fs::symlink("../a.txt", p.join("link")).expect("symlink");
    fs::create_dir_all(p.join("new/deeper")).expect("mkdir");
    fs::write(p.join("new/deeper/n.txt"), "n").expect("write");
    // Ignored (by a pattern of .git/info/exclude), a FIFO, an empty directory, a directory
    // holding only ignored files: none is staged, and a checkout of the commit has none.
    fs::write(f.repo.join(".git/info/exclude"), "*.o\nbuild/\n").expect("exclude");
    fs::write(p.join("x.o"), "obj").expect("write");
    fs::create_dir_all(p.join("build/out")).expect("mkdir");
    fs::write(p.join("build/out/bin"), "bin").expect("write");
    fs::create_dir_all(p.join("objs")).expect("mkdir");
    fs::write(p.join("objs/y.o"), "obj").expect("write");
    fs::create_dir_all(p.join("hollow/inner")).expect("mkdir");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        p.join("pipe"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .expect("mkfifo");
    let expected = git_add_all_tree(&p);
    let head = capture(&lease, "attempt").expect("capture");
    let repo = Repository::open(&f.repo).expect("open");
    let tree = repo.find_commit(head).expect("commit").tree_id();
    assert_eq!(tree, expected, "the capture stages what `git add -A` does");
    assert!(
        lease.swept.lock().expect("lock").is_some(),
        "the capture judged the worktree by stat data in one walk"
    );
    assert_eq!(
        tree_on_disk(&p),
        [
            ".gitignore",
            "a.txt",
            "b.txt",
            "link",
            "new",
            "new/deeper",
            "new/deeper/n.txt"
        ]
    );
    assert!(
        clean_in_place(&lease, head).expect("clean"),
        "cleaned in place"
    );
    assert_eq!(git(&p, &["status", "--porcelain", "--ignored"]), "");
}

#[test]
fn a_cache_that_ignores_itself_a_git_in_another_case_and_a_deep_directory_are_staged_as_git_would()
{
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    drop(captured_attempt(&f, &pool, "mvk/first"));
    let lease = pool.acquire(f.c2, "mvk/odd").expect("acquire");
    let p = lease.path.clone();
    // What pytest, mypy and ruff write: a `.gitignore` of `*` that ignores itself and every
    // sibling; judged before anything is removed, none of them is staged.
    fs::create_dir_all(p.join("cache/v/sub")).expect("mkdir");
    for (name, text) in [
        ("cache/.gitignore", "*\n"),
        (
            "cache/CACHEDIR.TAG",
            "Signature: 8a477f597d28d172789f06886806bc55\n",
        ),
        ("cache/README.md", "a cache\n"),
        ("cache/v/sub/data", "data"),
    ] {
        fs::write(p.join(name), text).expect("write");
    }
    fs::create_dir_all(p.join("src2")).expect("mkdir");
    fs::write(p.join("src2/kept.txt"), "kept").expect("write");
    let expected = git_add_all_tree(&p);
    // `.git` in another case: libgit2 never stages it (git refuses it outright).
    fs::create_dir_all(p.join("src2/.GIT")).expect("mkdir");
    fs::write(p.join("src2/.GIT/config"), "[core]\n").expect("write");
    let head = capture(&lease, "attempt").expect("capture");
    let repo = Repository::open(&f.repo).expect("open");
    assert_eq!(repo.find_commit(head).expect("commit").tree_id(), expected);
    assert!(!p.join("cache").exists(), "the ignored cache is swept");
    assert!(!p.join("src2/.GIT").exists(), "the `.GIT` is swept");
    assert!(
        clean_in_place(&lease, head).expect("clean"),
        "cleaned in place"
    );
    assert_eq!(git(&p, &["status", "--porcelain", "--ignored"]), "");
    drop(lease);
    // An untracked directory 120 deep (git's own walk goes any depth) is staged as git does.
    let lease = pool.acquire(f.c2, "mvk/deep").expect("acquire");
    let p = lease.path.clone();
    let mut deep = p.join("deep");
    for i in 0..120 {
        deep.push(format!("d{i}"));
    }
    fs::create_dir_all(&deep).expect("mkdir");
    fs::write(deep.join("leaf.txt"), "leaf").expect("write");
    let expected = git_add_all_tree(&p);
    let head = capture(&lease, "attempt").expect("capture");
    assert_eq!(repo.find_commit(head).expect("commit").tree_id(), expected);
    drop(lease);
    // Deeper than the one walk goes: left to libgit2 (which refuses past 100 levels, as it
    // always has), never a stack overflow.
    let lease = pool.acquire(f.c2, "mvk/deeper").expect("acquire");
    let mut deeper = lease.path.join("deeper");
    for _ in 0..1500 {
        deeper.push("d");
    }
    fs::create_dir_all(&deeper).expect("mkdir");
    fs::write(deeper.join("leaf.txt"), "leaf").expect("write");
    let _ = capture(&lease, "attempt");
    assert!(
        lease.swept.lock().expect("lock").is_none(),
        "not swept by the one walk"
    );
}

// An attributes file the agent rewrote in place, its size and modification time kept, rules
// what the capture stages: nothing read before the agent ran (the index the reset hands over,
// `Lease::held`, and whatever else) stands in for it.
#[test]
fn an_attributes_file_rewritten_in_place_is_read_anew_by_the_capture() {
    let f = fixture();
    // Staged `*.txt` files are normalised to LF.
    fs::write(f.repo.join(".gitattributes"), "*.txt  text\n").expect("write");
    git(&f.repo, &["add", "-A"]);
    git(&f.repo, &["commit", "-q", "-m", "c3"]);
    let c3 = rev(&f.repo, "HEAD");
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let lease = pool.acquire(c3, "mvk/attributes").expect("acquire");
    let p = lease.path.clone();
    let attributes = p.join(".gitattributes");
    let modified = fs::metadata(&attributes)
        .and_then(|m| m.modified())
        .expect("mtime");
    // The same 12 bytes' length, the same modification time: only the content says it changed.
    fs::write(&attributes, "*.txt -text\n").expect("write");
    fs::OpenOptions::new()
        .write(true)
        .open(&attributes)
        .and_then(|f| f.set_modified(modified))
        .expect("set mtime");
    fs::write(p.join("a.txt"), "crlf\r\n").expect("write");
    let head = capture(&lease, "attempt").expect("capture");
    let tree = tree_files(&f.repo, head);
    assert!(
        tree.contains(&("a.txt".to_string(), b"crlf\r\n".to_vec())),
        "a.txt staged under the attributes the agent replaced: {tree:?}"
    );
}

// Guards the repository a reset in place hands to the capture (`Lease::held`): an attributes
// file the agent adds rules what the capture stages, though that repository looked for
// attributes before the agent ran (and found none).
#[test]
fn an_attributes_file_the_agent_adds_rules_the_capture_of_a_slot_reset_in_place() {
    let f = fixture();
    let pool = Pool::open(&f.repo, &f.root).expect("open pool");
    let first = pool.acquire(f.c1, "mvk/first").expect("acquire");
    let p = first.path.clone();
    drop(first);
    // The slot again: reset in place, its repository held for the capture.
    let lease = acquire_slot(&pool, f.c1, "mvk/second", &p);
    assert!(
        lease.held.lock().is_ok_and(|held| held.is_some()),
        "a reset in place hands its repository on"
    );
    fs::write(p.join(".gitattributes"), "*.txt text\n").expect("write");
    fs::write(p.join("a.txt"), "crlf\r\n").expect("write");
    let head = capture(&lease, "attempt").expect("capture");
    let tree = tree_files(&f.repo, head);
    assert!(
        tree.contains(&("a.txt".to_string(), b"crlf\n".to_vec())),
        "a.txt staged without the attributes the agent added: {tree:?}"
    );
}
