//! The worktree pools of repositories that are gone: `mvk doctor` notes them, `mvk gc --all`
//! removes them (never the pool of a repository that exists, nor one a live process holds),
//! with real repositories run in and pools under one `MVK_WORKTREE_ROOT`.

use std::fs;
use std::path::{Path, PathBuf};

use super::support::{Fixture, simple_loop};

/// The pool of the repository at ROOT under HOME (`<home>/<16 hex digits of its path's hash>`).
fn pool_of(home: &Path, root: &Path) -> PathBuf {
    let canonical = fs::canonicalize(root).unwrap();
    let hash = blake3::hash(canonical.as_os_str().as_encoded_bytes());
    home.join(&hash.to_hex()[..16])
}

/// A fixture whose loop has run once with its pool under HOME.
fn ran(home: &Path) -> Fixture {
    let f = Fixture::new(&simple_loop("fix.sh", "budget iterations=1"));
    f.apply_with(&[], &[("MVK_WORKTREE_ROOT", home.to_str().unwrap())])
        .expect_code(0);
    f
}

/// `mvk ARGS` in DIR (a repository or not) with its pools under HOME: (exit code, stdout and
/// stderr together).
fn mvk_in(f: &Fixture, dir: &Path, home: &Path, args: &[&str]) -> (i32, String) {
    let out = f
        .mvk_std()
        .current_dir(dir)
        .env("MVK_WORKTREE_ROOT", home)
        .env("HOME", home)
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn gc_all_removes_the_pools_of_repositories_that_are_gone_and_doctor_notes_them() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let kept = ran(home);
    let deleted = ran(home);
    let replaced = ran(home);
    let kept_pool = pool_of(home, kept.root());
    let deleted_pool = pool_of(home, deleted.root());
    let replaced_pool = pool_of(home, replaced.root());
    for pool in [&kept_pool, &deleted_pool, &replaced_pool] {
        assert!(pool.join("slot-0").is_dir(), "{}", pool.display());
        // Each pool names the repository it belongs to.
        assert_eq!(
            fs::read_to_string(pool.join("repository")).unwrap(),
            fs::canonicalize(pool_owner(pool, &[&kept, &deleted, &replaced]))
                .unwrap()
                .to_str()
                .unwrap()
        );
    }
    // A pool an earlier mvk made names nothing: its repository is read from its slots' links.
    fs::remove_file(deleted_pool.join("repository")).unwrap();
    // A pool nothing tells the repository of (emptied by an earlier mvk's gc) is kept.
    let unknown = home.join("0123456789abcdef");
    fs::create_dir(&unknown).unwrap();
    fs::write(unknown.join("registry.lock"), "").unwrap();

    // One repository is deleted, another is no repository any more.
    let replaced_path = replaced.root().to_path_buf();
    fs::remove_dir_all(deleted.root()).unwrap();
    fs::remove_dir_all(&replaced_path).unwrap();
    fs::create_dir(&replaced_path).unwrap();
    fs::write(replaced_path.join("notes.txt"), "not a repository").unwrap();

    // doctor notes the two orphans, with their size and the fix; a note fails nothing.
    let outside = tempfile::tempdir().unwrap();
    let out = kept
        .mvk_std()
        .current_dir(outside.path())
        .env("MVK_WORKTREE_ROOT", home)
        .env("HOME", home)
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let json: serde_json::Value = serde_json::from_str(&said).unwrap_or_default();
    let note = json
        .as_array()
        .and_then(|a| a.iter().find(|f| f["subject"] == "worktree pools"))
        .unwrap_or_else(|| panic!("no note on the pools: {said}"));
    assert_eq!(note["level"], "note", "{said}");
    assert_eq!(note["fix"], "mvk gc --all", "{said}");
    let detail = note["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(&format!(
            "2 pool(s) under {} belong to repositories that are gone (",
            home.display()
        )) && (detail.ends_with("KiB)") || detail.ends_with("MiB)")),
        "{detail}"
    );
    let (_, said) = mvk_in(&kept, outside.path(), home, &["doctor"]);
    assert!(
        said.contains("· worktree pools: 2 pool(s)") && said.contains("fix: mvk gc --all"),
        "{said}"
    );

    // A dry run names the orphans, removes nothing.
    let (code, said) = mvk_in(&kept, kept.root(), home, &["gc", "--all", "--dry-run"]);
    assert_eq!(code, 0, "{said}");
    for pool in [&deleted_pool, &replaced_pool] {
        assert!(
            said.contains(&format!("would remove pool {}", pool.display())),
            "{said}"
        );
        assert!(pool.exists());
    }
    assert!(
        !said.contains(&format!("pool {}", kept_pool.display())),
        "{said}"
    );
    assert!(said.contains("would remove 2 worktree pool(s)"), "{said}");

    // A slot a live process holds keeps its pool.
    let lock = fs::File::open(deleted_pool.join("slot-0.lock")).unwrap();
    lock.lock().unwrap();
    let (code, said) = mvk_in(&kept, outside.path(), home, &["gc", "--all"]);
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains(&format!(
            "kept pool {} of {}",
            deleted_pool.display(),
            deleted.root().display()
        )) && said.contains("a live process holds it"),
        "{said}"
    );
    assert!(deleted_pool.join("slot-0").is_dir());
    assert!(!replaced_pool.exists(), "{said}");
    drop(lock);

    // Let go, it goes; the pool of the repository that exists and the one of no known
    // repository stay.
    let (code, said) = mvk_in(&kept, kept.root(), home, &["gc", "--all"]);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("removed 1 worktree pool(s)"), "{said}");
    assert!(!deleted_pool.exists(), "{said}");
    // (Its idle slot went with the repository's own gc; the pool and its record stay.)
    assert!(kept_pool.join("repository").is_file(), "{said}");
    assert!(unknown.exists(), "{said}");
    let (_, said) = mvk_in(&kept, outside.path(), home, &["doctor"]);
    assert!(!said.contains("worktree pools"), "{said}");
}

/// Which of FIXTURES the pool belongs to.
fn pool_owner<'a>(pool: &Path, fixtures: &[&'a Fixture]) -> &'a Path {
    let home = pool.parent().unwrap();
    fixtures
        .iter()
        .map(|f| f.root())
        .find(|root| pool_of(home, root) == pool)
        .unwrap()
}
