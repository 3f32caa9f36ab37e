//! `merge strategy="pr"` through the binary, against a real git remote (a bare repository the
//! test makes) and a stand-in for the GitHub CLI (`tests/fixtures/forge/gh`, first on PATH)
//! that checks its arguments and records its calls: the change goes out as a branch and one
//! pull request, main never moves, a crash between any two steps opens exactly one pull request
//! on resume, a refused push keeps the change and waits for a person, and a task after another
//! is stacked on its branch.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};

use super::support::{FIXED, Fixture, Run, git, simple_loop};

/// The remote, the stand-in's directory and the PATH that finds it.
struct Forge {
    remote: tempfile::TempDir,
    gh: tempfile::TempDir,
    path: String,
}

impl Forge {
    /// A bare remote holding the fixture's main, set as its `origin`.
    fn new(f: &Fixture) -> Forge {
        let remote = tempfile::tempdir().unwrap();
        git(remote.path(), &["init", "-q", "--bare", "-b", "main"]);
        f.git(&["remote", "add", "origin", remote.path().to_str().unwrap()]);
        f.git(&["push", "-q", "origin", "main"]);
        let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/forge");
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
        Forge {
            remote,
            gh: tempfile::tempdir().unwrap(),
            path,
        }
    }

    /// What `mvk status RUN` prints.
    fn status(&self, f: &Fixture, run: &str) -> String {
        let mut cmd = f.mvk_std();
        cmd.args(["status", run]);
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("PATH", self.path.clone()),
            ("FAKE_GH_DIR", self.gh.path().display().to_string()),
        ]
    }

    fn run(&self, f: &Fixture, args: &[&str], extra: &[(&str, &str)]) -> Run {
        let env = self.env();
        let mut all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        all.extend_from_slice(extra);
        f.run_mvk(args, &all)
    }

    /// Every call the stand-in got, its words split.
    fn calls(&self) -> Vec<Vec<String>> {
        fs::read_to_string(self.gh.path().join("calls"))
            .unwrap_or_default()
            .lines()
            .map(|l| l.split('|').map(str::to_string).collect())
            .collect()
    }

    fn creates(&self) -> Vec<Vec<String>> {
        self.calls()
            .into_iter()
            .filter(|c| c.len() > 1 && c[0] == "pr" && c[1] == "create")
            .collect()
    }

    fn file(&self, branch: &str, ext: &str) -> PathBuf {
        self.gh
            .path()
            .join(format!("{}.{ext}", branch.replace('/', "_")))
    }

    /// The commit the remote's BRANCH points at, if it has one.
    fn remote_tip(&self, branch: &str) -> Option<String> {
        let out = super::support::git_output(self.remote.path(), &["rev-parse", branch]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

/// The events file of the one run in the fixture.
fn events_path(f: &Fixture) -> PathBuf {
    let run = fs::read_dir(f.root().join(".mvk/runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    run.path().join("events.jsonl")
}

fn pr_loop() -> String {
    simple_loop("fix.sh", "merge strategy=\"pr\" title=\"fix: {{subject}}\"")
}

fn branch_of(run: &Run, task: &str) -> String {
    format!("mvk/{}/{task}/pr", run.id)
}

/// The value after FLAG in a call.
fn flag<'c>(call: &'c [String], flag: &str) -> &'c str {
    let at = call.iter().position(|w| w == flag).unwrap();
    &call[at + 1]
}

/// A flow of two tasks landed as pull requests, `two` after `one`, each writing `out/NAME.txt`,
/// their merges given MERGE (settings after `strategy="pr"`).
fn two_task_flow(merge: &str) -> String {
    let defs = "agent edit timeout=\"30s\" { run \"sh\" \"-c\" \"mkdir -p out && echo $MVK_TASK > out/$MVK_TASK.txt\"; }\n";
    let task = |name: &str, extra: &str| {
        format!(
            "    task {name} {{\n        goal \"Write out/{name}.txt.\"\n        agent edit\n        scope \"out/**\"\n        gate made evidence=none {{ run \"sh\" \"-c\" \"test -f out/{name}.txt\"; }}\n        merge strategy=\"pr\" {merge}\n        {extra}\n    }}\n"
        )
    };
    format!(
        "{defs}flow t {{\n{}{}}}\n",
        task("one", ""),
        task("two", "after \"one\"")
    )
}

#[test]
fn an_accepted_change_goes_out_as_one_pull_request_and_main_stays() {
    let f = Fixture::new(&pr_loop());
    let forge = Forge::new(&f);
    let run = forge.run(&f, &["apply", "loops/t.kdl"], &[]);
    run.expect_code(0);
    let branch = branch_of(&run, "t");
    let opened = run.one("pr.opened");
    assert_eq!(
        opened["detail"]["url"],
        "https://forge.test/team/repo/pull/1",
        "{}",
        run.why()
    );
    assert_eq!(opened["detail"]["branch"], branch.as_str());
    assert_eq!(opened["detail"]["base"], "main");
    // Pushed: the remote's branch holds the fix on main's commit; main moved nowhere.
    let pushed = forge.remote_tip(&branch).expect("the branch was pushed");
    assert_eq!(f.git(&["rev-parse", &format!("{pushed}^")]).trim(), f.base);
    assert_eq!(f.show(&pushed, "src/calc.sh").as_deref(), Some(FIXED));
    assert_eq!(f.tip("main"), f.base, "main did not move");
    assert_eq!(forge.remote_tip("main").as_deref(), Some(f.base.as_str()));
    assert_eq!(f.tip(&branch), pushed, "the local branch keeps the change");
    // One pull request, asked for with what a reviewer needs.
    let creates = forge.creates();
    assert_eq!(creates.len(), 1, "{:?}", forge.calls());
    let c = &creates[0];
    assert_eq!(flag(c, "--base"), "main");
    assert_eq!(flag(c, "--head"), branch);
    assert_eq!(
        flag(c, "--title"),
        "fix: Make add() in src/calc.sh return the sum of its arguments."
    );
    let body = fs::read_to_string(forge.file(&branch, "body")).unwrap();
    for part in [
        "## Goal",
        "attempt 1 (bot): accepted",
        "gate `tests`: pass",
        "Sealed (the agent could not change them): `tests/**`",
        "## Cost",
        &run.id,
    ] {
        assert!(body.contains(part), "the body lacks {part:?}:\n{body}");
    }
    // Asked whether one was open before opening it.
    let finds = forge
        .calls()
        .iter()
        .filter(|c| c[..2] == ["pr", "list"])
        .count();
    assert_eq!(finds, 1, "{:?}", forge.calls());
    let status = forge.status(&f, &run.id);
    assert!(
        status.contains("pull request: https://forge.test/team/repo/pull/1"),
        "{status}"
    );
    assert!(
        run.stdout
            .contains("pull request https://forge.test/team/repo/pull/1"),
        "{}",
        run.why()
    );
}

/// A run killed at FAILPOINT, then resumed: exactly one pull request, on the pushed commit.
fn crash_then_resume(failpoint: &str) {
    let f = Fixture::new(&pr_loop());
    let forge = Forge::new(&f);
    let crashed = forge.run(
        &f,
        &["apply", "loops/t.kdl"],
        &[("MVK_FAILPOINT", failpoint)],
    );
    assert_ne!(crashed.code, 0, "{}", crashed.why());
    let resumed = forge.run(&f, &["resume", &crashed.id], &[]);
    resumed.expect_code(0);
    assert_eq!(forge.creates().len(), 1, "{:?}", forge.calls());
    let branch = branch_of(&crashed, "t");
    let pushed = forge.remote_tip(&branch).expect("the branch was pushed");
    assert_eq!(f.show(&pushed, "src/calc.sh").as_deref(), Some(FIXED));
    assert_eq!(f.tip("main"), f.base, "main did not move");
    let opened = resumed.named("pr.opened");
    let last = opened.last().expect("pr.opened");
    assert_eq!(
        last["detail"]["url"],
        "https://forge.test/team/repo/pull/1",
        "{}",
        resumed.why()
    );
}

#[test]
fn a_crash_between_the_intent_and_the_push_opens_one_pull_request_on_resume() {
    crash_then_resume("pr-intent");
}

#[test]
fn a_crash_between_the_push_and_the_pull_request_opens_one_on_resume() {
    crash_then_resume("pr-pushed");
}

#[test]
fn a_crash_between_the_push_and_its_record_pushes_again_harmlessly_and_opens_one() {
    crash_then_resume("pr-pushing");
}

#[test]
fn a_crash_after_the_pull_request_opened_finds_it_rather_than_opening_another() {
    crash_then_resume("pr-opened");
}

#[test]
fn a_refused_push_keeps_the_change_on_its_branch_and_waits_for_a_person() {
    let f = Fixture::new(&pr_loop());
    let forge = Forge::new(&f);
    let hook = forge.remote.path().join("hooks/pre-receive");
    fs::write(
        &hook,
        "#!/bin/sh\necho 'protected: pushes need a review' >&2\nexit 1\n",
    )
    .unwrap();
    let mut perms = fs::metadata(&hook).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    fs::set_permissions(&hook, perms).unwrap();
    let run = forge.run(&f, &["apply", "loops/t.kdl"], &[]);
    run.expect_code(4);
    let refused = run.one("pr.refused");
    assert_eq!(refused["detail"]["step"], "push");
    assert!(
        refused["detail"]["detail"]
            .as_str()
            .unwrap()
            .contains("protected: pushes need a review"),
        "{}",
        run.why()
    );
    let branch = branch_of(&run, "t");
    assert_eq!(forge.remote_tip(&branch), None, "nothing was pushed");
    assert_eq!(
        f.show(&branch, "src/calc.sh").as_deref(),
        Some(FIXED),
        "kept"
    );
    assert_eq!(f.tip("main"), f.base);
    assert!(forge.creates().is_empty());
    let status = forge.status(&f, &run.id);
    assert!(status.contains("not opened, push:"), "{status}");
    // The person lets the push through and approves: it is pushed and opened once.
    fs::remove_file(&hook).unwrap();
    let approved = forge.run(&f, &["approve", &run.id], &[]);
    approved.expect_code(0);
    assert_eq!(forge.creates().len(), 1, "{:?}", forge.calls());
    assert!(forge.remote_tip(&branch).is_some());
}

#[test]
fn a_failing_forge_command_keeps_the_pushed_branch_and_is_tried_again_on_approval() {
    let f = Fixture::new(&pr_loop());
    let forge = Forge::new(&f);
    let run = forge.run(&f, &["apply", "loops/t.kdl"], &[("FAKE_GH_FAIL", "create")]);
    run.expect_code(4);
    let refused = run.one("pr.refused");
    assert_eq!(refused["detail"]["step"], "open");
    assert!(
        refused["detail"]["detail"]
            .as_str()
            .unwrap()
            .contains("Bad credentials")
    );
    let branch = branch_of(&run, "t");
    assert!(
        forge.remote_tip(&branch).is_some(),
        "pushed before the refusal"
    );
    let approved = forge.run(&f, &["approve", &run.id], &[]);
    approved.expect_code(0);
    assert_eq!(forge.creates().len(), 2, "one refused, one opened");
    assert!(forge.file(&branch, "url").exists());
    // Pushed once: the second landing found the ledger saying so.
    assert_eq!(approved.named("pr.pushed").len(), 1, "{}", approved.why());
}

#[test]
fn another_attempt_after_a_refused_pull_request_replaces_the_pushed_branch() {
    let f = Fixture::new(&pr_loop());
    let forge = Forge::new(&f);
    let run = forge.run(&f, &["apply", "loops/t.kdl"], &[("FAKE_GH_FAIL", "create")]);
    run.expect_code(4);
    let branch = branch_of(&run, "t");
    let first = forge
        .remote_tip(&branch)
        .expect("pushed before the refusal");
    // The person wants another attempt; it is accepted, and its commit replaces the first.
    let again = forge.run(
        &f,
        &["reject", &run.id, "--reason", "say why in the commit"],
        &[],
    );
    again.expect_code(0);
    let second = forge.remote_tip(&branch).expect("pushed again");
    assert_ne!(first, second, "{}", again.why());
    assert_eq!(f.tip(&branch), second);
    assert_eq!(
        forge.creates().len(),
        2,
        "one refused, one opened: {:?}",
        forge.calls()
    );
    assert!(forge.file(&branch, "url").exists());
}

#[test]
fn a_failed_look_for_an_open_pull_request_opens_none() {
    let f = Fixture::new(&pr_loop());
    let forge = Forge::new(&f);
    let run = forge.run(&f, &["apply", "loops/t.kdl"], &[("FAKE_GH_FAIL", "list")]);
    run.expect_code(4);
    let refused = run.one("pr.refused");
    assert_eq!(refused["detail"]["step"], "find");
    assert!(forge.creates().is_empty(), "{:?}", forge.calls());
    let approved = forge.run(&f, &["approve", &run.id], &[]);
    approved.expect_code(0);
    assert_eq!(forge.creates().len(), 1, "{:?}", forge.calls());
}

#[test]
fn a_task_after_another_is_stacked_on_its_pull_request() {
    let text = two_task_flow("");
    let f = Fixture::new(&text);
    let forge = Forge::new(&f);
    let run = forge.run(&f, &["apply", "loops/t.kdl"], &[]);
    run.expect_code(0);
    let (one, two) = (branch_of(&run, "one"), branch_of(&run, "two"));
    let (one_tip, two_tip) = (
        forge.remote_tip(&one).expect("one pushed"),
        forge.remote_tip(&two).expect("two pushed"),
    );
    // Two's change is made on one's, and its pull request asks to merge into one's branch.
    assert_eq!(
        f.git(&["rev-parse", &format!("{two_tip}^")]).trim(),
        one_tip
    );
    assert!(f.show(&two_tip, "out/one.txt").is_some());
    assert!(f.show(&two_tip, "out/two.txt").is_some());
    let creates = forge.creates();
    assert_eq!(creates.len(), 2, "{:?}", forge.calls());
    let for_two = creates.iter().find(|c| flag(c, "--head") == two).unwrap();
    assert_eq!(flag(for_two, "--base"), one);
    let for_one = creates.iter().find(|c| flag(c, "--head") == one).unwrap();
    assert_eq!(flag(for_one, "--base"), "main");
    assert_eq!(f.tip("main"), f.base);
}

#[test]
fn a_task_after_another_waits_for_its_pull_request_to_merge_and_starts_from_the_remote() {
    let text = two_task_flow("dependents=\"merged\" poll=\"1s\"");
    let f = Fixture::new(&text);
    let forge = Forge::new(&f);
    let mut cmd = f.mvk_std();
    cmd.args(["apply", "loops/t.kdl"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in forge.env() {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap();
    // Two waits for one's pull request: the events say so, and two has not started.
    let runs = f.root().join(".mvk/runs");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let events = loop {
        let found = fs::read_dir(&runs)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(Result::ok)
            .map(|e| e.path().join("events.jsonl"))
            .and_then(|p| fs::read_to_string(p).ok())
            .filter(|t| t.contains("\"pr.waiting\""));
        if let Some(t) = found {
            break t;
        }
        assert!(std::time::Instant::now() < deadline, "two never waited");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    // Longer than a poll: were it not waiting, two would have started by now.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let log = events_path(&f);
    let events = fs::read_to_string(&log).unwrap_or(events);
    assert!(
        !events.contains("\"task\":\"two\",\"attempt\":1"),
        "{events}"
    );
    // A person merges the pull request: the remote's main takes one's commit.
    let one_branch = f
        .git(&[
            "for-each-ref",
            "--format=%(refname:short)",
            "refs/heads/mvk/",
        ])
        .lines()
        .find(|b| b.ends_with("/one/pr"))
        .unwrap()
        .to_string();
    f.git(&["push", "-q", "origin", &format!("{one_branch}:main")]);
    fs::write(forge.gh.path().join("1.state"), "MERGED\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let run = f.run_of(&out, false);
    run.expect_code(0);
    let two_tip = forge
        .remote_tip(&branch_of(&run, "two"))
        .expect("two pushed");
    let one_tip = f.tip(&one_branch);
    assert_eq!(
        f.git(&["rev-parse", &format!("{two_tip}^")]).trim(),
        one_tip
    );
    let for_two = forge
        .creates()
        .into_iter()
        .find(|c| flag(c, "--head") == branch_of(&run, "two"))
        .unwrap();
    assert_eq!(flag(&for_two, "--base"), "main");
    assert_eq!(f.tip("main"), f.base, "the local main is not mvk's to move");
}
