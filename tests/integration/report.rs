//! `mvk report --html` end to end: real `mvk apply` runs on temporary repositories with
//! scripted agents (the fixture of `apply.rs`), the page's structure checked against what the
//! runs did, and the page opened in headless Chromium to see that the timeline, the failing
//! tests, the output and the diff are in the document it builds, and that a gate's `<script>`
//! stays text.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::support::{Fixture, Run, TESTS_GATE, agent_def, loop_kdl, simple_loop};

/// A gate that prints as `pytest -v` does around the fixture's test (and the line the honest
/// agent needs in its prompt), a `<script>` and an inline handler first: a gate's output is
/// untrusted. It fails while `add` is wrong, a second or more after it began.
const PYTEST_GATE: &str = r#"#!/bin/sh
. ./src/calc.sh
echo '<script>document.title="pwned"</script><img src=x onerror="document.title=1">'
echo 'tests/test_calc.py::test_zero PASSED                     [ 50%]'
if [ "$(add 2 3)" = 5 ]; then
    echo 'tests/test_calc.py::test_add PASSED                      [100%]'
    echo '============ 2 passed in 0.01s ============'
    exit 0
fi
sleep 1.2
echo 'tests/test_calc.py::test_add FAILED                      [100%]'
echo 'FAIL: add 2 3: expected 5, got -1'
echo '=========== short test summary info ==========='
echo 'FAILED tests/test_calc.py::test_add - assert -1 == 5'
echo '============ 1 failed, 1 passed in 1.21s ============'
exit 1
"#;

/// `mvk report ARGS…` in the fixture, which must succeed; its standard output.
fn report(fixture: &Fixture, args: &[&str]) -> String {
    let out = fixture.mvk().arg("report").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "mvk report {args:?}: exit {:?}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The elements of PAGE whose opening tag starts with `<TAG class="CLASS`, as the tags.
fn tags<'a>(page: &'a str, start: &str) -> Vec<&'a str> {
    page.match_indices(start)
        .map(|(i, _)| {
            let rest = &page[i..];
            &rest[..rest.find('>').unwrap() + 1]
        })
        .collect()
}

/// An accepted run of the honest agent: attempt 1 fails the tests gate, attempt 2 passes and
/// lands on `main`.
fn honest_run() -> (Fixture, Run) {
    let fixture = Fixture::new(&simple_loop("honest.sh", ""));
    let run = fixture.apply();
    run.expect_code(0);
    (fixture, run)
}

#[test]
fn the_page_shows_every_attempt_verdict_and_merge_of_the_run() {
    let (fixture, run) = honest_run();
    let page = report(&fixture, &["--html"]);
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    assert!(page.contains(&format!("<h1>Run <code>{}</code>: t</h1>", run.id)));
    assert!(
        page.contains("id=\"outcome\">accepted (exit 0)</dd>"),
        "{page}"
    );
    // One bar per attempt on the timeline, in order, with its verdict.
    let bars = tags(&page, "<div class=\"row attempt ");
    assert_eq!(bars.len(), 2, "{bars:?}");
    assert!(bars[0].contains("data-attempt=\"1\"") && bars[0].contains("data-outcome=\"failed\""));
    assert!(bars[1].contains("data-attempt=\"2\"") && bars[1].contains("data-outcome=\"passed\""));
    // One row per attempt in the task's table: rung, agent, the seal, the gate with counts.
    let rows: Vec<&str> = page
        .lines()
        .filter(|l| l.starts_with("<tr class=\"attempt-row"))
        .collect();
    assert_eq!(rows.len(), 2, "{page}");
    assert!(
        rows[0].contains("<td>1</td><td>1</td><td>bot</td>"),
        "{}",
        rows[0]
    );
    assert!(
        rows[0].contains(">tests fail 1/2 passed, 1 failed</span>"),
        "{}",
        rows[0]
    );
    assert!(rows[0].contains("<td>passed</td>"), "the seal: {}", rows[0]);
    assert!(rows[0].contains(">failed (gate)<"), "{}", rows[0]);
    assert!(
        rows[1].contains(">tests pass 2/2 passed</span>"),
        "{}",
        rows[1]
    );
    assert!(rows[1].contains(">passed<"), "{}", rows[1]);
    // The tallies.
    assert!(page.contains("<tr data-count=\"attempts\"><td>attempts</td><td><span class=\"failed\">1 failed</span>, <span class=\"passed\">1 passed</span></td></tr>"), "{page}");
    assert!(page.contains("<tr data-count=\"seal checks\"><td>seal checks</td><td><span class=\"passed\">2 passed</span></td></tr>"), "{page}");
    assert!(page.contains("<tr data-count=\"gate runs\"><td>gate runs</td><td><span class=\"fail\">1 fail</span>, <span class=\"pass\">1 pass</span></td></tr>"), "{page}");
    assert!(page.contains("<tr data-count=\"merges\"><td>merges</td><td><span class=\"done\">1 done</span></td></tr>"), "{page}");
    // The merge: a mark on attempt 2's row, and the commit `main` now points at.
    let main = fixture.tip("main");
    assert_eq!(tags(&page, "<span class=\"merge done\"").len(), 1, "{page}");
    assert!(
        page.contains(&format!("landed as <code>{}</code>", &main[..12])),
        "{page}"
    );
    // Self-contained: no script, no link, nothing fetched.
    for outside in [
        "<script", "<link", "src=", "href=", "http://", "https://", "@import",
    ] {
        assert!(!page.contains(outside), "the page has `{outside}`");
    }
}

#[test]
fn the_page_names_a_breached_seal_and_the_cost() {
    let defs = agent_def("bot", "tamper.sh", &["edit"]);
    let fixture = Fixture::new(&loop_kdl(&defs, true, TESTS_GATE, "budget iterations=1"));
    fixture.apply().expect_code(1);
    let page = report(&fixture, &["--html"]);
    let bars = tags(&page, "<div class=\"row attempt ");
    assert_eq!(bars.len(), 1, "{bars:?}");
    assert!(bars[0].contains("data-outcome=\"breached\""), "{}", bars[0]);
    assert!(
        page.contains("<td>breached: tests/test_calc.sh</td>"),
        "{page}"
    );
    assert!(page.contains("<tr data-count=\"gate runs\"><td>gate runs</td><td>none</td></tr>"));
    assert!(
        page.contains("id=\"outcome\">rejected (exit 1)</dd>"),
        "{page}"
    );

    // Another run with an agent that reports what it spent ($0.25, 1000 tokens).
    let paying = tempfile::tempdir().unwrap();
    let fixture2 = Fixture::new(&loop_kdl(
        &agent_def("payer", "usage_fix.sh", &[]),
        false,
        TESTS_GATE,
        "agent payer",
    ));
    let run = fixture2.apply();
    run.expect_code(0);
    let out = paying.path().join("report.html");
    let printed = report(
        &fixture2,
        &[&run.id[..8], "--html", "--out", out.to_str().unwrap()],
    );
    assert_eq!(
        printed, "",
        "the page went to the file, not standard output"
    );
    let page = fs::read_to_string(&out).unwrap();
    assert!(
        page.contains("id=\"spent\">1 attempt, $0.25, 1000 tokens</dd>"),
        "{page}"
    );
    assert!(page.contains("<td>$0.25, 1000 tokens</td></tr>"), "{page}");
}

#[test]
fn report_needs_a_run() {
    let fixture = Fixture::new(&simple_loop("honest.sh", ""));
    let out = fixture.mvk().args(["report", "--html"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error: no runs in this repository yet"),
        "{stderr}"
    );
}

/// The Chromium binary of Debian's `chromium` package (`.ci/run` installs it).
const CHROMIUM: &str = "/usr/bin/chromium";

/// The DOM of the page at PATH after headless Chromium loaded and laid it out.
fn chromium_dom(path: &Path) -> String {
    assert!(
        Path::new(CHROMIUM).exists(),
        "`{CHROMIUM}` is missing: install it with `apt-get install -y chromium` (.ci/run does)"
    );
    let profile = tempfile::tempdir().unwrap();
    // Under `timeout`: a Chromium that hangs must fail the test, not hold CI.
    let out = Command::new("timeout")
        .args(["120", CHROMIUM])
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            &format!("--user-data-dir={}", profile.path().display()),
            "--dump-dom",
        ])
        .arg(format!("file://{}", path.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium failed: {:?}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The part of DOM from the element whose opening tag holds START to its closing tag TAG.
fn element<'a>(dom: &'a str, start: &str, tag: &str) -> &'a str {
    let from = dom
        .find(start)
        .unwrap_or_else(|| panic!("no `{start}` in:\n{dom}"));
    let close = format!("</{tag}>");
    let len = dom[from..]
        .find(&close)
        .unwrap_or_else(|| panic!("`{start}` is never closed:\n{dom}"));
    &dom[from..from + len]
}

#[test]
fn chromium_renders_the_timeline() {
    let (fixture, run) = honest_run();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.html");
    report(&fixture, &["--html", "--out", file.to_str().unwrap()]);
    let dom = chromium_dom(&file);
    assert!(
        dom.contains(&format!("<title>mvk run {}: t</title>", run.id)),
        "{dom}"
    );
    // The parsed document holds the timeline with a row per attempt inside it (a malformed
    // page would have its elements moved or dropped by the parser), each with its phases.
    let timeline = element(&dom, "<div class=\"timeline\" id=\"timeline\"", "p");
    let phases = |n: u32| {
        let row = element(timeline, &format!("id=\"attempt-t-{n}\""), "div");
        tags(row, "<span class=\"phase ")
            .iter()
            .map(|tag| {
                tag.split('"')
                    .nth(1)
                    .unwrap()
                    .trim_start_matches("phase ")
                    .to_string()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(phases(1), ["agent", "seal", "gates"], "{timeline}");
    assert_eq!(
        phases(2),
        ["agent", "seal", "gates", "landing"],
        "{timeline}"
    );
    assert_eq!(dom.matches("<tr class=\"attempt-row").count(), 2, "{dom}");
}

/// Whether TEXT holds a duration in mvk's loop-file form (`18s77ms`, `1m5s`), which the report
/// no longer prints.
fn has_terse_duration(text: &str) -> bool {
    let b = text.as_bytes();
    (1..b.len()).any(|i| {
        b[i - 1].is_ascii_digit()
            && matches!(b[i], b's' | b'm' | b'h')
            && b.get(i + 1).is_some_and(u8::is_ascii_digit)
    })
}

#[test]
fn chromium_shows_the_failing_test_the_output_and_the_diff_of_each_attempt() {
    let fixture = Fixture::new(&loop_kdl(
        &agent_def("bot", "honest.sh", &["@STATE"]),
        true,
        r#"gate tests { run "sh" "checks/pytest.sh"; }"#,
        "",
    ));
    fs::write(fixture.root().join("checks/pytest.sh"), PYTEST_GATE).unwrap();
    fixture.git(&["add", "checks/pytest.sh"]);
    fixture.git(&["commit", "-q", "-m", "a pytest-like gate"]);
    let run = fixture.apply();
    run.expect_code(0);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.html");
    report(&fixture, &["--html", "--out", file.to_str().unwrap()]);
    let page = fs::read_to_string(&file).unwrap();
    let dom = chromium_dom(&file);

    // Attempt 1 failed: the test its gate named, the end of the gate's output, its diff.
    let first = element(&dom, "id=\"detail-t-1\"", "section");
    assert!(
        first.contains(
            "<ul class=\"failing-tests\"><li><code>tests/test_calc.py::test_add</code></li></ul>"
        ),
        "{first}"
    );
    let tail = element(first, "<pre class=\"tail\">", "pre");
    assert!(tail.contains("FAIL: add 2 3: expected 5, got -1"), "{tail}");
    assert!(
        tail.contains("============ 1 failed, 1 passed in 1.21s ============"),
        "{tail}"
    );
    // Open: a failed gate's output is what a person came for.
    assert!(
        first.contains("<details class=\"output\" data-verdict=\"fail\" open=\"\">"),
        "{first}"
    );
    let diff = element(first, "<details class=\"diff\">", "details");
    assert!(
        diff.contains("<summary>Diff against the base <code>") && diff.contains("1 file changed"),
        "{diff}"
    );
    assert!(
        diff.contains("<span class=\"add\">+# calc: tiny arithmetic helpers (reviewed)</span>"),
        "{diff}"
    );
    // Attempt 2 passed: no failing tests, its output folded away, the fix in its diff.
    let second = element(&dom, "id=\"detail-t-2\"", "section");
    assert!(!second.contains("failing-tests"), "{second}");
    assert!(
        second.contains("<details class=\"output\" data-verdict=\"pass\">"),
        "{second}"
    );
    assert!(
        second.contains("<span class=\"del\">-add() { echo $(($1 - $2)); }</span>")
            && second.contains("<span class=\"add\">+add() { echo $(($1 + $2)); }</span>"),
        "{second}"
    );
    assert!(
        second.contains(&format!("<code>{}</code>", &fixture.tip("main~1")[..12])),
        "the diff is against the attempt's base: {second}"
    );

    // Durations as a person reads them: the failing gate slept over a second.
    let gate = element(first, "<summary class=\"fail\">", "summary");
    let secs = gate
        .split([',', '(', ')'])
        .find_map(|part| part.trim().strip_suffix(" s")?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no `N.N s` in {gate}"));
    assert!((1.2..60.0).contains(&secs), "{gate}");
    assert!(
        !has_terse_duration(&page),
        "a duration in the form `1s200ms`:\n{page}"
    );

    // The gate's `<script>` and handler are text on the page, never markup: nothing ran.
    assert!(
        dom.contains(&format!("<title>mvk run {}: t</title>", run.id)),
        "the title was changed: {dom}"
    );
    assert!(
        tail.contains("&lt;script&gt;document.title=\"pwned\"&lt;/script&gt;&lt;img src=x"),
        "{tail}"
    );
    for markup in ["<script", "<img"] {
        assert!(!page.contains(markup), "the page has `{markup}`");
        assert!(!dom.contains(markup), "the document has `{markup}`");
    }
}

#[test]
fn a_long_output_and_a_large_diff_are_cut_with_a_note() {
    // The agent adds nearly 300 KiB; the gate prints 40,000 lines before the test's own.
    let fixture = Fixture::new(&loop_kdl(
        &agent_def("bot", "big_fix.sh", &[]),
        true,
        r#"gate tests { run "sh" "-c" "seq 1 40000; sh tests/test_calc.sh"; }"#,
        "",
    ));
    fixture.apply().expect_code(0);
    let page = report(&fixture, &["--html"]);
    let detail = element(&page, "id=\"detail-t-1\"", "section");
    let tail = element(detail, "<pre class=\"tail\">", "pre");
    // 4 KiB of text; its quotes are escaped on the page.
    assert!(
        tail.len() <= 4 * 1024 + 200,
        "{} bytes of output",
        tail.len()
    );
    assert!(tail.contains("\n39999\n40000\nMVK_EVIDENCE="), "{tail}");
    assert!(
        detail.contains("(its last 4 KiB; the whole output: "),
        "{detail}"
    );
    // 32 KiB of diff text: about a thousand of the added lines (31 bytes each), not 10,000.
    let diff = element(detail, "<pre class=\"diff\">", "pre");
    let added = diff.matches("<span class=\"add\">+big line ").count();
    assert!(
        (800..1100).contains(&added),
        "{added} lines of the diff shown"
    );
    assert!(
        diff.contains("+big line 1 padding padding</span>"),
        "{}",
        &diff[..2000]
    );
    assert!(
        detail.contains("<p class=\"note\">The diff is cut at 32 KiB: <code>git diff "),
        "{detail}"
    );
    assert!(
        detail.contains("2 files changed"),
        "the summary counts all of it: {detail}"
    );
}

#[test]
fn an_attempt_that_changed_nothing_says_so() {
    let fixture = Fixture::new(&simple_loop("noop.sh", "budget iterations=1"));
    fixture.apply().expect_code(3);
    let page = report(&fixture, &["--html"]);
    let detail = element(&page, "id=\"detail-t-1\"", "section");
    assert!(
        detail.contains("<p class=\"diff note\">No change against the base.</p>"),
        "{detail}"
    );
    // The fixture's test prints `FAIL: add 2 3: …`, which no runner's shape matches.
    assert!(!detail.contains("failing-tests"), "{detail}");
    let tail = element(detail, "<pre class=\"tail\">", "pre");
    assert!(tail.contains("FAIL: add 2 3: expected 5, got -1"), "{tail}");
}
