//! Git imports and `mvk.lock`, through the real binary: a gate library published in a local bare
//! repository (tagged v1, then v2), loops that import it by rev, the lock that pins it, drift
//! when a library changes without `mvk lock --update`, and reading from the cache offline.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tempfile::TempDir;

const GATES_V1: &str = r#"import "common.kdl"
gate team-test {
    param target default="--lib"
    run "cargo" "test" "{{target}}"
}
"#;

const GATES_V2: &str = r#"import "common.kdl"
gate team-test {
    param target default="--all-targets"
    run "cargo" "test" "{{target}}"
}
"#;

const COMMON: &str = r#"agent bot timeout="5m" {
    run "sh" "bot.sh" "{{prompt_file}}"
}
"#;

/// Git with no user or system configuration, its output trimmed.
fn git(dir: &Path, args: &[&str]) -> String {
    super::hardening::git(dir, args).trim().to_string()
}

/// What a run of `mvk` left: its exit code and both streams.
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

/// A temporary world: `lib.git` (bare, the team's library), `lib/` (its working copy), `loops/`
/// (the loop files and their lock) and `cache/` (`MVK_CACHE_DIR`).
struct Lab {
    dir: TempDir,
}

impl Lab {
    /// The library at v1 (gates.kdl importing common.kdl), published and tagged.
    fn new() -> Lab {
        let lab = Lab {
            dir: tempfile::tempdir().unwrap(),
        };
        let root = lab.root();
        fs::create_dir_all(root.join("loops")).unwrap();
        git(root, &["init", "-q", "--bare", "lib.git"]);
        git(root, &["init", "-q", "-b", "main", "lib"]);
        git(&lab.path("lib"), &["config", "user.name", "T"]);
        git(&lab.path("lib"), &["config", "user.email", "t@example.com"]);
        lab.write("lib/common.kdl", COMMON);
        lab.publish(GATES_V1, "v1");
        lab
    }

    fn write(&self, rel: &str, text: impl AsRef<str>) {
        fs::write(self.path(rel), text.as_ref()).unwrap();
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    fn url(&self) -> String {
        format!("file://{}", self.path("lib.git").display())
    }

    /// Commits `gates` to the library, (re)tags it `tag` and pushes both, forced.
    fn publish(&self, gates: &str, tag: &str) {
        let lib = self.path("lib");
        fs::write(lib.join("gates.kdl"), gates).unwrap();
        git(&lib, &["add", "-A"]);
        git(&lib, &["commit", "-qm", tag, "--allow-empty"]);
        git(&lib, &["tag", "-f", tag]);
        git(&lib, &["push", "-qf", "../lib.git", "main", tag]);
    }

    /// The commit a tag of the bare repository names now.
    fn commit_of(&self, tag: &str) -> String {
        git(
            &self.path("lib.git"),
            &["rev-parse", &format!("{tag}^{{commit}}")],
        )
    }

    /// Writes `loops/NAME` with a loop importing `import` (a whole `import …` line).
    fn loop_file(&self, name: &str, import: &str) {
        let text = format!(
            "{import}\nagent bot {{ run \"sh\" \"bot.sh\"; }}\n\nloop t {{\n    goal \"Fix it.\"\n    agent bot\n    gate tests use=team.team-test\n}}\n"
        );
        fs::write(self.path("loops").join(name), text).unwrap();
    }

    fn git_import(&self, rev: &str) -> String {
        format!(
            "import \"gates.kdl\" git=\"{}\" rev=\"{rev}\" as=team",
            self.url()
        )
    }

    fn mvk(&self, args: &[&str]) -> Out {
        let out = assert_cmd::Command::cargo_bin("mvk")
            .unwrap()
            .args(args)
            .current_dir(self.root())
            .env("MVK_CACHE_DIR", self.path("cache"))
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("NO_COLOR", "1")
            .env("COLUMNS", "80")
            .output()
            .unwrap();
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs mvk and insists on an exit code, showing its output when it differs.
    fn expect(&self, code: i32, args: &[&str]) -> Out {
        let out = self.mvk(args);
        assert_eq!(
            out.code, code,
            "mvk {args:?}\nstdout:\n{}\nstderr:\n{}",
            out.stdout, out.stderr
        );
        out
    }

    /// The digest of task `t` as `mvk plan --json` prints it.
    fn task_digest(&self, file: &str) -> String {
        let out = self.expect(0, &["plan", file, "--json"]);
        let plan: Value = serde_json::from_str(&out.stdout).unwrap();
        plan["tasks"][0]["digest"].as_str().unwrap().to_string()
    }

    fn lock(&self) -> Value {
        serde_json::from_str(&fs::read_to_string(self.path("loops/mvk.lock")).unwrap()).unwrap()
    }

    /// Output with the temporary root and commit ids replaced, for snapshots.
    fn redact(&self, text: &str) -> String {
        let mut out = text.replace(&self.root().display().to_string(), "[ROOT]");
        for tag in ["v1", "v2"] {
            let commit = self.commit_of(tag);
            out = out.replace(&commit[..12], "[COMMIT]");
        }
        out
    }
}

#[test]
fn a_git_import_checks_plans_and_digests_like_a_local_copy() {
    let lab = Lab::new();
    lab.loop_file("remote.kdl", &lab.git_import("v1"));
    fs::create_dir_all(lab.path("loops/copy")).unwrap();
    lab.write("loops/copy/gates.kdl", GATES_V1);
    lab.write("loops/copy/common.kdl", COMMON);
    lab.loop_file("local.kdl", "import \"copy/gates.kdl\" as=team");

    let out = lab.expect(0, &["check", "loops/remote.kdl"]);
    assert!(
        out.stderr.contains("ok: loops/remote.kdl"),
        "{}",
        out.stderr
    );
    // The URL and the commit are where the text came from, not what it means.
    assert_eq!(
        lab.task_digest("loops/remote.kdl"),
        lab.task_digest("loops/local.kdl")
    );
    // The library was fetched into the cache, not into the working directory.
    assert!(lab.path("cache/git").read_dir().unwrap().count() == 1);
    assert!(!lab.path("loops/mvk.lock").exists(), "check wrote a lock");
}

#[test]
fn mvk_lock_pins_git_local_and_std_imports_with_the_reference_as_written() {
    let lab = Lab::new();
    lab.loop_file(
        "t.kdl",
        &format!(
            "{}\nimport \"std/agents.kdl\"\nimport \"team.kdl\" as=own",
            lab.git_import("v1")
        ),
    );
    lab.write("loops/team.kdl", COMMON.replace("bot ", "helper "));
    let out = lab.expect(0, &["lock", "loops/t.kdl"]);
    assert!(out.stderr.contains("4 imports (4 added"), "{}", out.stderr);

    let lock = lab.lock();
    assert_eq!(lock["version"], 1);
    let url = lab.url();
    let gates = &lock["imports"][format!("git+{url}?rev=v1#gates.kdl")];
    assert_eq!(gates["original"]["git"], url.as_str());
    assert_eq!(gates["original"]["rev"], "v1");
    assert_eq!(gates["original"]["path"], "gates.kdl");
    assert_eq!(gates["locked"]["commit"], lab.commit_of("v1").as_str());
    assert_eq!(
        gates["locked"]["blake3"],
        blake3::hash(GATES_V1.as_bytes()).to_hex().as_str()
    );
    // A file the library imports relatively is read at the same commit.
    let common = &lock["imports"][format!("git+{url}?rev=v1#common.kdl")];
    assert_eq!(common["locked"]["commit"], lab.commit_of("v1").as_str());
    let std = &lock["imports"]["std/agents.kdl"];
    assert_eq!(std["locked"]["mvk"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        std["locked"]["blake3"],
        blake3::hash(mvk::stdlib::get("std/agents.kdl").unwrap().as_bytes())
            .to_hex()
            .as_str()
    );
    assert!(lock["imports"]["team.kdl"]["locked"]["blake3"].is_string());

    // Locking again changes nothing, byte for byte.
    let before = fs::read_to_string(lab.path("loops/mvk.lock")).unwrap();
    let again = lab.expect(0, &["lock", "loops"]);
    assert!(again.stderr.contains("up to date"), "{}", again.stderr);
    assert_eq!(
        fs::read_to_string(lab.path("loops/mvk.lock")).unwrap(),
        before
    );
    lab.expect(0, &["check", "loops/t.kdl"]);
}

#[test]
fn a_moved_tag_is_held_by_the_lock_until_lock_update() {
    let lab = Lab::new();
    lab.loop_file("t.kdl", &lab.git_import("v1"));
    lab.expect(0, &["lock", "loops/t.kdl"]);
    let locked = lab.task_digest("loops/t.kdl");

    lab.publish(GATES_V2, "v1");
    // check and plan read the locked commit, never the moving tag.
    lab.expect(0, &["check", "loops/t.kdl"]);
    assert_eq!(lab.task_digest("loops/t.kdl"), locked);

    // `mvk lock` fetches, sees the tag moved, and refuses without --update.
    let lock_before = fs::read_to_string(lab.path("loops/mvk.lock")).unwrap();
    let out = lab.expect(5, &["lock", "loops/t.kdl"]);
    assert!(out.stderr.contains("mvk::lock-drift"), "{}", out.stderr);
    assert!(
        out.stderr.contains("import `gates.kdl` from"),
        "{}",
        out.stderr
    );
    assert_eq!(
        fs::read_to_string(lab.path("loops/mvk.lock")).unwrap(),
        lock_before
    );

    lab.expect(0, &["lock", "--update", "loops/t.kdl"]);
    assert_eq!(
        lab.lock()["imports"][format!("git+{}?rev=v1#gates.kdl", lab.url())]["locked"]["commit"],
        lab.commit_of("v1").as_str()
    );
    let updated = lab.task_digest("loops/t.kdl");
    assert_ne!(
        updated, locked,
        "the new library's meaning reaches the digest"
    );
}

#[test]
fn a_rev_changed_in_the_loop_file_without_locking_is_drift() {
    let lab = Lab::new();
    lab.publish(GATES_V2, "v2");
    lab.loop_file("t.kdl", &lab.git_import("v1"));
    lab.expect(0, &["lock", "loops/t.kdl"]);

    lab.loop_file("t.kdl", &lab.git_import("v2"));
    let out = lab.expect(5, &["check", "loops/t.kdl"]);
    assert!(out.stderr.contains("mvk::lock-drift"), "{}", out.stderr);
    assert!(out.stderr.contains("has rev `v1`"), "{}", out.stderr);
    assert!(out.stderr.contains("mvk lock --update"), "{}", out.stderr);
    lab.expect(5, &["plan", "loops/t.kdl"]);

    // Locking the new reference accepts it, and the stale entry goes.
    lab.expect(0, &["lock", "loops"]);
    let lock = lab.lock();
    let keys: Vec<&String> = lock["imports"].as_object().unwrap().keys().collect();
    assert!(keys.iter().all(|k| k.contains("rev=v2")), "{keys:?}");
    lab.expect(0, &["check", "loops/t.kdl"]);
}

#[test]
fn a_local_import_edited_after_locking_is_drift_and_a_new_one_is_not_locked() {
    let lab = Lab::new();
    lab.write(
        "loops/team.kdl",
        GATES_V1.replace("import \"common.kdl\"\n", ""),
    );
    lab.write(
        "loops/t.kdl",
        "import \"team.kdl\" as=team\nagent bot { run \"sh\" \"bot.sh\"; }\n\
         loop t {\n    goal \"Fix it.\"\n    agent bot\n    gate tests use=team.team-test\n}\n",
    );
    lab.expect(0, &["lock", "loops/t.kdl"]);
    lab.expect(0, &["check", "loops/t.kdl"]);

    lab.write(
        "loops/team.kdl",
        GATES_V2.replace("import \"common.kdl\"\n", ""),
    );
    let out = lab.expect(5, &["check", "loops/t.kdl"]);
    assert!(out.stderr.contains("mvk::lock-drift"), "{}", out.stderr);
    assert!(
        out.stderr.contains("import `team.kdl` has changed"),
        "{}",
        out.stderr
    );

    // A file that is broken and drifted is invalid first: 65 outranks 5.
    lab.write("loops/extra.kdl", "gate x { }\n");
    let text = fs::read_to_string(lab.path("loops/t.kdl")).unwrap();
    lab.write("loops/t.kdl", format!("import \"extra.kdl\"\n{text}"));
    let out = lab.expect(65, &["check", "loops/t.kdl"]);
    assert!(out.stderr.contains("mvk::not-locked"), "{}", out.stderr);
    assert!(out.stderr.contains("mvk::lock-drift"), "{}", out.stderr);
}

#[test]
fn after_locking_check_works_offline_from_the_cache() {
    let lab = Lab::new();
    lab.loop_file("t.kdl", &lab.git_import("v1"));
    lab.expect(0, &["lock", "loops/t.kdl"]);
    let digest = lab.task_digest("loops/t.kdl");

    fs::remove_dir_all(lab.path("lib.git")).unwrap();
    lab.expect(0, &["check", "loops/t.kdl"]);
    assert_eq!(lab.task_digest("loops/t.kdl"), digest);

    // Without the lock, the rev must be fetched, and the repository is gone.
    fs::remove_file(lab.path("loops/mvk.lock")).unwrap();
    let out = lab.expect(65, &["check", "loops/t.kdl"]);
    assert!(out.stderr.contains("mvk::git-fetch"), "{}", out.stderr);
}

#[test]
fn an_unknown_rev_and_a_missing_path_are_diagnostics_at_the_import() {
    let lab = Lab::new();
    lab.publish(GATES_V2, "v2");
    lab.loop_file("rev.kdl", &lab.git_import("v3"));
    let rev = lab.expect(65, &["check", "loops/rev.kdl"]);
    snapshot("unknown-rev", &lab.redact(&rev.stderr));

    lab.loop_file(
        "path.kdl",
        &format!(
            "import \"gate.kdl\" git=\"{}\" rev=\"v2\" as=team",
            lab.url()
        ),
    );
    let path = lab.expect(65, &["check", "loops/path.kdl"]);
    snapshot("missing-path", &lab.redact(&path.stderr));
}

fn snapshot(name: &str, text: &str) {
    insta::with_settings!({
        snapshot_path => "snapshots/imports",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(name, text);
    });
}

// Regression: a tag deleted upstream went on resolving from the cache, so `--update` kept it.
#[test]
fn a_tag_deleted_upstream_no_longer_resolves_from_the_cache() {
    let lab = Lab::new();
    lab.publish(GATES_V2, "v0");
    lab.loop_file("t.kdl", &lab.git_import("v0"));
    lab.expect(0, &["lock", "loops/t.kdl"]);
    git(&lab.path("lib.git"), &["tag", "-d", "v0"]);
    let out = lab.expect(65, &["lock", "--update", "loops/t.kdl"]);
    assert!(out.stderr.contains("mvk::unknown-rev"), "{}", out.stderr);
}
