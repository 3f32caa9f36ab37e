//! Landings cut short (issue 23): mvk killed at each step of landing a change into the main
//! checkout — the lock taken, files half written, the index written, the branch moved, the
//! lock given back — is finished or undone by `mvk resume` from the ledger's intent, and the
//! run ends exactly as an uninterrupted one: every task's files on `main`, one commit per task,
//! a clean main checkout, no `index.lock` and no file of mvk's left in `.git`. A stale
//! `index.lock` whose owner mvk did not record stops the landing for a person before any file
//! is written; once it is gone, approving lands the change.

use std::fs;

use super::resume::resume;
use super::support::{Fixture, Run};

/// Three tasks run one after the other (`parallel 1`), each writing three files of 200 lines
/// under `out/TASK/`, and each landing alone on `main`.
fn three_tasks() -> Fixture {
    tasks(&TASKS, 1)
}

/// NAMES as tasks writing three files of 200 lines each under `out/NAME/`, up to PARALLEL at
/// once.
fn tasks(names: &[&str], parallel: u32) -> Fixture {
    let mut text = format!(
        "agent files timeout=\"60s\" {{ run \"sh\" \"@AGENTS/flow_files.sh\"; }}\nflow t {{\n    parallel {parallel}\n"
    );
    for name in names {
        text.push_str(&format!(
            "    task {name} {{\n        goal \"Write out/{name}/.\"\n        agent files\n        scope \"out/{name}/**\"\n        gate made evidence=none {{ run \"sh\" \"-c\" \"test -f out/$MVK_TASK/c.txt\"; }}\n        budget iterations=1\n    }}\n"
        ));
    }
    text.push_str("}\n");
    Fixture::new(&text)
}

const TASKS: [&str; 3] = ["x", "y", "z"];

/// What the agent of TASK writes in FILE.
fn content(task: &str, file: &str) -> String {
    (1..=200).map(|i| format!("{task} {file} {i}\n")).collect()
}

/// mvk's lock and its own files, in the main checkout's git directory.
fn leftovers(f: &Fixture) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(f.root().join(".git"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n == "index.lock" || n.starts_with("mvk-index-"))
        .collect();
    names.sort();
    names
}

/// The run ended as an uninterrupted one: every task's files on `main` and in the checkout,
/// one commit per task, the checkout clean, nothing of the lock left.
fn as_if_uninterrupted(f: &Fixture, r: &Run) {
    all_landed(f, r, &TASKS);
}

fn all_landed(f: &Fixture, r: &Run, names: &[&str]) {
    for &task in names {
        for file in ["a", "b", "c"] {
            let path = format!("out/{task}/{file}.txt");
            assert_eq!(
                f.show("main", &path).as_deref(),
                Some(content(task, file).as_str()),
                "{path} on main\n{}",
                r.why()
            );
            assert_eq!(
                fs::read_to_string(f.root().join(&path)).ok().as_deref(),
                Some(content(task, file).as_str()),
                "{path} in the main checkout\n{}",
                r.why()
            );
        }
    }
    let landed = f.git(&["log", "--format=%s", &format!("{}..main", f.base)]);
    let mut subjects: Vec<&str> = landed.lines().collect();
    subjects.sort_unstable();
    let one_each: Vec<String> = names
        .iter()
        .map(|t| format!("mvk: {t}: Write out/{t}/."))
        .collect();
    assert_eq!(subjects, one_each, "one commit per task\n{}", r.why());
    assert_eq!(
        f.git(&["status", "--porcelain", "--untracked-files=all"]),
        "",
        "a clean main checkout\n{}",
        r.why()
    );
    assert_eq!(leftovers(f), Vec::<String>::new(), "{}", r.why());
}

/// Runs the three tasks with mvk killed at FAILPOINT (the first landing's), checks that the
/// kill happened, runs AFTER on the fixture, then resumes.
fn killed_at(failpoint: &str, after: impl FnOnce(&Fixture)) -> (Fixture, Run) {
    let f = three_tasks();
    let crashed = f.run_mvk(&["apply", "loops/t.kdl"], &[("MVK_FAILPOINT", failpoint)]);
    assert_eq!(
        crashed.code,
        -1,
        "killed at `{failpoint}`\n{}",
        crashed.why()
    );
    after(&f);
    let r = resume(&f, &[]);
    (f, r)
}

fn resumed_as_if_uninterrupted(failpoint: &str) -> Run {
    let (f, r) = killed_at(failpoint, |_| {});
    r.expect_code(0);
    as_if_uninterrupted(&f, &r);
    r.none("merge.blocked");
    r
}

#[test]
fn a_landing_killed_after_its_intent_lands_on_resume() {
    resumed_as_if_uninterrupted("merge-intent");
}

#[test]
fn a_landing_killed_with_the_lock_taken_is_recovered_without_a_person() {
    let (f, r) = killed_at("merge-locked", |f| {
        // The lock is mvk's: its own file, named in the intent, is the same file.
        let names = leftovers(f);
        assert_eq!(names.len(), 2, "{names:?}");
        assert_eq!(names[0], "index.lock");
        assert!(names[1].starts_with("mvk-index-"), "{names:?}");
    });
    r.expect_code(0);
    as_if_uninterrupted(&f, &r);
    r.none("merge.blocked");
    r.none("merge.locked");
}

#[test]
fn a_landing_killed_with_its_files_half_written_is_finished_by_resume() {
    let (f, r) = killed_at("merge-files-half", |f| {
        // Some of the landing's files written, not all: the first task's.
        let written: Vec<bool> = ["a", "b", "c"]
            .iter()
            .map(|n| f.root().join(format!("out/x/{n}.txt")).exists())
            .collect();
        assert!(
            written.contains(&true) && written.contains(&false),
            "{written:?}"
        );
        // One more cut short as it was written (its first lines): as a kill inside a write
        // leaves it.
        let missing = ["a", "b", "c"]
            .iter()
            .find(|n| !f.root().join(format!("out/x/{n}.txt")).exists())
            .unwrap();
        let part: String = content("x", missing).chars().take(100).collect();
        fs::write(f.root().join(format!("out/x/{missing}.txt")), part).unwrap();
    });
    r.expect_code(0);
    as_if_uninterrupted(&f, &r);
    r.none("merge.blocked");
    r.one("merge.finished-by-resume");
}

#[test]
fn a_landing_killed_mid_files_whose_lock_a_person_removed_is_still_finished_by_resume() {
    let (f, r) = killed_at("merge-files-half", |f| {
        // `git commit` fails on the lock and says to remove it; the person does.
        fs::remove_file(f.root().join(".git/index.lock")).unwrap();
    });
    r.expect_code(0);
    as_if_uninterrupted(&f, &r);
    r.none("merge.blocked");
    r.one("merge.finished-by-resume");
}

#[test]
fn a_landing_killed_with_its_index_written_is_finished_by_resume() {
    let r = resumed_as_if_uninterrupted("merge-checkout");
    r.one("merge.finished-by-resume");
}

#[test]
fn a_landing_killed_after_its_branch_moved_is_not_done_again() {
    let r = resumed_as_if_uninterrupted("merge-ref-moved");
    r.none("merge.finished-by-resume");
    let settled = r.one("merge.settled");
    assert_eq!(settled["detail"]["landed"], true, "{}", r.why());
}

#[test]
fn a_landing_killed_as_it_gave_the_lock_back_is_not_done_again() {
    let r = resumed_as_if_uninterrupted("merge-unlocked");
    let settled = r.one("merge.settled");
    assert_eq!(settled["detail"]["landed"], true, "{}", r.why());
}

#[test]
fn a_landing_killed_after_it_was_published_is_not_done_again() {
    resumed_as_if_uninterrupted("merge-published");
}

#[test]
fn a_landing_whose_paths_hold_a_persons_change_after_the_kill_is_undone_and_keeps_it() {
    let (f, r) = killed_at("merge-files-half", |f| {
        let untouched = ["a", "b", "c"]
            .iter()
            .find(|n| !f.root().join(format!("out/x/{n}.txt")).exists())
            .unwrap()
            .to_string();
        fs::write(
            f.root().join(format!("out/x/{untouched}.txt")),
            "a person's\n",
        )
        .unwrap();
        fs::write(f.state("untouched"), untouched).unwrap();
    });
    let untouched = fs::read_to_string(f.state("untouched")).unwrap();
    let undone = r.one("merge.undone-by-resume");
    assert_eq!(
        undone["detail"]["foreign"],
        serde_json::json!([format!("out/x/{untouched}.txt")]),
        "{}",
        r.why()
    );
    // The landing again finds the person's file: the task goes to a person, whose file stays;
    // mvk's own files of that landing were taken back, and are not called a person's.
    let blocked = r.one("merge.blocked");
    assert_eq!(
        blocked["detail"]["paths"],
        serde_json::json!([format!("out/x/{untouched}.txt")]),
        "{}",
        r.why()
    );
    assert_eq!(
        fs::read_to_string(f.root().join(format!("out/x/{untouched}.txt"))).unwrap(),
        "a person's\n"
    );
    assert_eq!(
        f.git(&["status", "--porcelain", "--untracked-files=all"]),
        format!("?? out/x/{untouched}.txt\n"),
        "only the person's file is left\n{}",
        r.why()
    );
    assert_eq!(leftovers(&f), Vec::<String>::new(), "{}", r.why());
}

/// Runs the three tasks with a stale `index.lock` no one recorded: each landing stops for a
/// person before writing anything; then the lock is removed.
fn stopped_on_a_stale_lock() -> (Fixture, Run) {
    let f = three_tasks();
    fs::write(f.root().join(".git/index.lock"), "").unwrap();
    let r = f.apply();
    r.expect_code(4);
    assert!(r.stdout.contains(".git/index.lock"), "{}", r.why());
    assert!(r.stdout.contains("rm "), "says what to do\n{}", r.why());
    assert_eq!(f.tip("main"), f.base, "main did not move");
    assert!(
        !f.root().join("out").exists(),
        "nothing written\n{}",
        r.why()
    );
    assert_eq!(leftovers(&f), ["index.lock"], "not mvk's to remove");
    assert!(!r.named("merge.locked").is_empty(), "{}", r.why());
    r.none("merge.blocked");

    fs::remove_file(f.root().join(".git/index.lock")).unwrap();
    assert_eq!(f.git(&["status", "--porcelain"]), "", "nothing written");
    (f, r)
}

#[test]
fn a_stale_index_lock_of_unknown_owner_stops_for_a_person_before_any_file_is_written() {
    let (f, r) = stopped_on_a_stale_lock();
    let approved = f.run_mvk(&["approve", &r.id], &[]);
    approved.expect_code(0);
    as_if_uninterrupted(&f, &approved);
}

#[test]
fn once_the_stale_lock_is_gone_a_resume_lands_what_it_stopped() {
    let (f, _) = stopped_on_a_stale_lock();
    let r = resume(&f, &[]);
    r.expect_code(0);
    as_if_uninterrupted(&f, &r);
}

#[test]
fn a_split_index_stops_the_landing_untouched_and_a_resume_lands_once_it_is_turned_off() {
    let f = three_tasks();
    f.git(&["update-index", "--split-index"]);
    let r = f.apply();
    r.expect_code(4);
    assert!(
        r.stdout.contains("git update-index --no-split-index"),
        "says what to do\n{}",
        r.why()
    );
    assert_eq!(f.tip("main"), f.base, "main did not move");
    assert!(
        !f.root().join("out").exists(),
        "nothing written\n{}",
        r.why()
    );
    assert_eq!(leftovers(&f), Vec::<String>::new(), "{}", r.why());
    f.git(&["update-index", "--no-split-index"]);
    let r = resume(&f, &[]);
    r.expect_code(0);
    as_if_uninterrupted(&f, &r);
}

#[test]
fn a_landing_waits_while_another_landing_of_mvks_holds_the_lock() {
    let f = three_tasks();
    // Another run's landing, as mvk takes the lock: its own file, linked to `index.lock`.
    let git_dir = f.root().join(".git");
    let own = git_dir.join("mvk-index-other-run-0123456789abcdef");
    fs::write(&own, "").unwrap();
    fs::hard_link(&own, git_dir.join("index.lock")).unwrap();
    let mut child = super::resume::spawn_apply(&f, &[]);
    // Let go only once the landing found the lock and waits for it.
    wait_for_event(&f, "merge.lock-wait", &mut child);
    fs::remove_file(git_dir.join("index.lock")).unwrap();
    fs::remove_file(&own).unwrap();
    let out = child.wait_with_output().unwrap();
    let r = f.run_of(&out, false);
    r.expect_code(0);
    r.none("merge.locked");
    as_if_uninterrupted(&f, &r);
}

/// The measurement: eight tasks side by side, landing in batches, mvk killed as the
/// first landing's files are written; the resume lands every task once and leaves the main
/// checkout clean (before: 3 of 8 landed, the checkout dirty, exit 4).
#[test]
fn eight_tasks_killed_mid_landing_all_land_once_after_resume() {
    const EIGHT: [&str; 8] = ["t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"];
    let f = tasks(&EIGHT, 4);
    let crashed = f.run_mvk(
        &["apply", "loops/t.kdl"],
        &[("MVK_FAILPOINT", "merge-files-half")],
    );
    assert_eq!(crashed.code, -1, "{}", crashed.why());
    let r = resume(&f, &[]);
    r.expect_code(0);
    all_landed(&f, &r, &EIGHT);
    r.none("merge.blocked");
    r.none("merge.locked");
}

#[test]
fn a_lock_the_dead_mvk_left_beside_a_branch_of_its_run_does_not_stop_the_resume() {
    let (f, r) = killed_at("merge-intent", |f| {
        // As a kill while the next task's branch was being written leaves it.
        let run = super::resume::the_run(f);
        let dir = f.root().join(format!(".git/refs/heads/mvk/{run}/z"));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("1.lock"), "").unwrap();
    });
    r.expect_code(0);
    as_if_uninterrupted(&f, &r);
}

// Guards against a lock git holds for a moment (an editor's periodic `git status`) stopping
// the run for a person: a lock of unknown owner is waited for briefly, and the landing goes on
// once it is gone.
#[test]
fn a_lock_of_unknown_owner_that_goes_away_at_once_is_waited_for() {
    let f = tasks(&["x"], 1);
    let lock = f.root().join(".git/index.lock");
    fs::write(&lock, "").unwrap();
    let mut child = super::resume::spawn_apply(&f, &[]);
    wait_for_event(&f, "merge.lock-wait", &mut child);
    fs::remove_file(&lock).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for file in ["a", "b", "c"] {
        let path = format!("out/x/{file}.txt");
        assert_eq!(
            f.show("main", &path).as_deref(),
            Some(content("x", file).as_str()),
            "{path} on main"
        );
    }
    assert!(leftovers(&f).is_empty(), "{:?}", leftovers(&f));
}

/// Waits (up to a minute) until the only run of F has written an event named NAME.
fn wait_for_event(f: &Fixture, name: &str, child: &mut std::process::Child) {
    let start = std::time::Instant::now();
    let quoted = format!("\"{name}\"");
    loop {
        let events = fs::read_dir(f.root().join(".mvk/runs"))
            .ok()
            .and_then(|mut d| d.next())
            .and_then(Result::ok)
            .and_then(|e| fs::read_to_string(e.path().join("events.jsonl")).ok())
            .unwrap_or_default();
        if events.contains(&quoted) {
            return;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "mvk ended before `{name}`"
        );
        assert!(start.elapsed().as_secs() < 60, "no `{name}`");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
