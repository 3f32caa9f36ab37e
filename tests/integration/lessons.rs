//! `mvk lessons` end to end: a run whose agent writes two lessons to `$MVK_LESSONS_FILE`, then
//! the lessons listed (text and JSON), one forgotten, and one pinned into the loop's lessons
//! file, or refused when the loop names none; and the errors for an unknown or spent id and for
//! a repository with no ledger.

#![allow(clippy::unwrap_used)]

use std::fs;

use serde_json::Value;

use crate::support::{Fixture, git, simple_loop};

const ONE: &str = "Lesson one: the tests need bash.";
const TWO: &str = "Lesson two: run make first.";

/// Runs `mvk ARGS…` in the fixture; returns the exit code, stdout and stderr.
fn mvk(fixture: &Fixture, args: &[&str]) -> (i32, String, String) {
    let out = fixture.mvk().args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `mvk lessons ARGS… --json` (which must succeed): its lessons.
fn lessons_json(fixture: &Fixture, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["lessons"];
    all.extend_from_slice(args);
    all.push("--json");
    let (code, stdout, stderr) = mvk(fixture, &all);
    assert_eq!(code, 0, "mvk {all:?}\n{stdout}\n{stderr}");
    let doc: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"));
    assert_eq!(doc["schema"], "mvk.lessons.v1", "{doc}");
    doc["lessons"].as_array().unwrap().clone()
}

/// The texts of LESSONS, in their order.
fn texts(lessons: &[Value]) -> Vec<&str> {
    lessons
        .iter()
        .map(|l| l["text"].as_str().unwrap())
        .collect()
}

/// The id of the lesson whose text is TEXT.
fn id_of(lessons: &[Value], text: &str) -> String {
    let l = lessons
        .iter()
        .find(|l| l["text"] == text)
        .unwrap_or_else(|| panic!("no lesson {text:?} in {lessons:?}"));
    l["id"].as_i64().unwrap().to_string()
}

/// A fixture whose loop `t` (with EXTRA) was run once by the agent that writes two lessons and
/// fixes the bug; its run id.
fn learnt(extra: &str) -> (Fixture, String) {
    let fixture = Fixture::new(&simple_loop("lessons.sh", extra));
    let run = fixture.apply();
    run.expect_code(0);
    (fixture, run.id)
}

#[test]
fn the_lessons_an_agent_writes_are_listed_and_a_forgotten_one_is_only_in_all() {
    let (f, run) = learnt("");
    let live = lessons_json(&f, &[]);
    // Newest first: the second paragraph was recorded after the first.
    assert_eq!(texts(&live), [TWO, ONE], "{live:?}");
    for l in &live {
        assert_eq!(l["run"], run.as_str(), "{l}");
        assert_eq!(l["file"], "loops/t.kdl", "{l}");
        assert_eq!(l["task"], "t", "{l}");
        assert_eq!(l["attempt"], 1, "{l}");
        assert_eq!(l["author"], "maker", "{l}");
        assert_eq!(l["forgotten_at"], Value::Null, "{l}");
        assert_eq!(l["pinned_to"], Value::Null, "{l}");
    }
    let one = id_of(&live, ONE);
    let two = id_of(&live, TWO);

    // Text: one heading line per lesson, its text indented under it.
    let (code, stdout, stderr) = mvk(&f, &["lessons"]);
    assert_eq!(code, 0, "{stderr}");
    for (id, text) in [(&one, ONE), (&two, TWO)] {
        let head = stdout
            .lines()
            .position(|l| l.starts_with(&format!("#{id} ")))
            .unwrap_or_else(|| panic!("no heading for #{id}:\n{stdout}"));
        let lines: Vec<&str> = stdout.lines().collect();
        assert!(
            lines[head].ends_with(" loops/t.kdl · t · attempt 1 (maker)"),
            "{stdout}"
        );
        assert_eq!(lines[head + 1], format!("    {text}"), "{stdout}");
    }

    // `--repo` names the repository from anywhere.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = f
        .mvk()
        .current_dir(elsewhere.path())
        .args(["--repo", f.root().to_str().unwrap(), "lessons", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["lessons"].as_array().unwrap().len(), 2, "{doc}");

    // Forgotten: no longer live, still in `--all`, marked.
    let (code, stdout, stderr) = mvk(&f, &["lessons", "forget", &one]);
    assert_eq!(
        (code, stdout.as_str()),
        (0, format!("forgot lesson {one}\n").as_str()),
        "{stderr}"
    );
    assert_eq!(texts(&lessons_json(&f, &[])), [TWO]);
    let all = lessons_json(&f, &["--all"]);
    assert_eq!(texts(&all), [TWO, ONE]);
    assert!(all[1]["forgotten_at"].is_i64(), "{all:?}");
    assert_eq!(all[0]["forgotten_at"], Value::Null, "{all:?}");
    let (_, stdout, _) = mvk(&f, &["lessons", "--all"]);
    assert!(
        stdout.contains(&format!(
            " loops/t.kdl · t · attempt 1 (maker) · forgotten\n    {ONE}\n"
        )),
        "{stdout}"
    );

    // Forgetting it again, or a lesson that does not exist, is a usage error.
    let (code, _, stderr) = mvk(&f, &["lessons", "forget", &one]);
    assert_eq!(code, 64, "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "error: lesson `{one}` is already forgotten\n  hint: `mvk lessons` lists the live lessons\n"
        )
    );
    let (code, _, stderr) = mvk(&f, &["lessons", "forget", "999"]);
    assert_eq!(code, 64, "{stderr}");
    assert_eq!(
        stderr,
        "error: there is no lesson `999`\n  hint: `mvk lessons --all` lists every lesson with its number\n"
    );

    // Forgetting the other one leaves none live.
    let (code, _, stderr) = mvk(&f, &["lessons", "forget", &format!("#{two}")]);
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, _) = mvk(&f, &["lessons"]);
    assert_eq!((code, stdout.as_str()), (0, "no lessons\n"));
}

#[test]
fn pin_needs_the_loop_to_name_a_lessons_file() {
    let (f, _) = learnt("");
    let one = id_of(&lessons_json(&f, &[]), ONE);
    let (code, stdout, stderr) = mvk(&f, &["lessons", "pin", &one]);
    assert_eq!(code, 64, "{stdout}\n{stderr}");
    assert_eq!(
        stderr,
        format!(
            "error: loop `t` in `loops/t.kdl` names no lessons file to pin lesson `{one}` to\n  \
             hint: add lessons \"loops/LESSONS.md\" to loop `t` in loops/t.kdl, then pin again\n"
        )
    );
    // Nothing was written or marked.
    assert!(!f.root().join("loops/LESSONS.md").exists());
    assert_eq!(texts(&lessons_json(&f, &[])), [TWO, ONE]);
}

#[test]
fn pin_appends_the_lesson_to_the_loops_lessons_file_and_it_leaves_the_live_list() {
    // The file exists, with a heading that pinning must keep.
    let fixture = Fixture::new(&simple_loop("lessons.sh", "lessons \"loops/LESSONS.md\""));
    fs::write(fixture.root().join("loops/LESSONS.md"), "# Lessons of t\n").unwrap();
    git(fixture.root(), &["add", "loops/LESSONS.md"]);
    git(fixture.root(), &["commit", "-q", "-m", "lessons file"]);
    let run = fixture.apply();
    run.expect_code(0);
    let f = fixture;
    let live = lessons_json(&f, &[]);
    let one = id_of(&live, ONE);
    let two = id_of(&live, TWO);

    let (code, stdout, stderr) = mvk(&f, &["lessons", "pin", &one]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert_eq!(
        stdout,
        format!("pinned lesson {one} to loops/LESSONS.md: commit it to keep it\n")
    );
    let path = f.root().join("loops/LESSONS.md");
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        format!("# Lessons of t\n- {ONE}\n")
    );
    // Pinned: shown from the file, so not live; `--all` says where it went.
    assert_eq!(texts(&lessons_json(&f, &[])), [TWO]);
    let all = lessons_json(&f, &["--all"]);
    assert_eq!(all[1]["pinned_to"], "loops/LESSONS.md", "{all:?}");
    let (_, stdout, _) = mvk(&f, &["lessons", "--all"]);
    assert!(
        stdout.contains(" (maker) · pinned to loops/LESSONS.md\n"),
        "{stdout}"
    );

    // The second one goes after the first; the file is never rewritten.
    let (code, _, stderr) = mvk(&f, &["lessons", "pin", &two]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        format!("# Lessons of t\n- {ONE}\n- {TWO}\n")
    );

    // Pinning twice, or an unknown lesson, fails and writes nothing.
    let (code, _, stderr) = mvk(&f, &["lessons", "pin", &one]);
    assert_eq!(code, 64, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "error: lesson `{one}` is already pinned to `loops/LESSONS.md`\n"
        )),
        "{stderr}"
    );
    let (code, _, stderr) = mvk(&f, &["lessons", "pin", "999"]);
    assert_eq!(code, 64, "{stderr}");
    assert!(
        stderr.starts_with("error: there is no lesson `999`\n"),
        "{stderr}"
    );
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        format!("# Lessons of t\n- {ONE}\n- {TWO}\n")
    );
    // A pinned lesson is not forgotten from the ledger: its file shows it.
    let (code, _, stderr) = mvk(&f, &["lessons", "forget", &one]);
    assert_eq!(code, 64, "{stderr}");
    assert!(
        stderr.contains("is pinned to `loops/LESSONS.md`"),
        "{stderr}"
    );
}

#[test]
fn without_a_ledger_lessons_says_there_are_no_runs_and_creates_nothing() {
    let f = Fixture::new(&simple_loop("fix.sh", ""));
    for args in [
        &["lessons"][..],
        &["lessons", "--all", "--json"],
        &["lessons", "forget", "1"],
        &["lessons", "pin", "1"],
    ] {
        let (code, stdout, stderr) = mvk(&f, args);
        assert_eq!(code, 64, "mvk {args:?}\n{stdout}\n{stderr}");
        assert_eq!(
            stderr,
            "error: no runs in this repository yet\n  hint: run a loop first: `mvk apply FILE`\n",
            "mvk {args:?}"
        );
    }
    assert!(!f.root().join(".mvk").exists());
}
