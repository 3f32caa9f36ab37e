//! One attempt's ledger rows, its recorded failure, its gates' logs and the repository in; out
//! what the page shows under the attempt's row: the failing tests its gates' output names, the
//! tail of each gate's output (and of whatever else failed it), and its change against its base.
//!
//! All of it is text an agent or a gate wrote, so all of it is bounded here and escaped when
//! drawn: at most [`OUTPUT_BYTES`] of each output, [`DIFF_BYTES`] of the diff, and the names
//! [`FailedTests`] keeps.

use std::fmt::Write as _;
use std::path::Path;

use git2::{DiffFormat, DiffOptions, Oid, Repository};

use super::esc;
use crate::ledger::read::{AttemptRow, GateResultRow};
use crate::report::human_duration;
use crate::run::failure::{Failure, FailureKind};
use crate::run::judge::evidence::FailedTests;
use crate::run::judge::gate;

/// The end of each output the page shows.
const OUTPUT_BYTES: u64 = 4 * 1024;
/// The most of an attempt's diff the page shows.
const DIFF_BYTES: usize = 32 * 1024;

/// What the page shows of one attempt below its row.
pub(super) struct Detail {
    /// Per gate that did not pass, the failing tests its output names.
    failing: Vec<Failing>,
    outputs: Vec<Output>,
    diff: Diff,
}

struct Failing {
    gate: String,
    names: Vec<String>,
    /// Other distinct names, and whether there were more than counted.
    more: (usize, bool),
}

struct Output {
    /// The gate whose output it is, if a gate's.
    gate: Option<String>,
    /// What else to say of it (`fail, exit 1, 1.2 s`, `the agent's output`); plain text.
    title: String,
    /// `pass`, `fail`, `unknown` for a gate; `fail` for anything else that failed the attempt.
    verdict: String,
    text: String,
    /// Only the end is shown; where the whole is, if anywhere.
    cut: Option<String>,
}

enum Diff {
    Change {
        files: usize,
        insertions: usize,
        deletions: usize,
        /// Each line with git's origin mark: `F` file header, `H` hunk header, `+`, `-`, ` `.
        lines: Vec<(char, String)>,
        cut: bool,
        base: String,
        head: String,
    },
    /// The agent's work was never captured (it failed before), so there is no change to show.
    NoCommit,
    /// Why the change cannot be read.
    Unreadable(String),
}

/// Reads what the page shows of attempt `a`: `gates` are its gate runs, `failure` its recorded
/// failure, `repo` the repository its commits are in (or why it could not be opened).
pub(super) fn gather(
    repo: Result<&Repository, &str>,
    a: &AttemptRow,
    gates: &[&GateResultRow],
    failure: Option<&Failure>,
) -> Detail {
    let mut failing = Vec::new();
    let mut outputs = Vec::new();
    // The failure's tail is the failing gate's output too: the stand-in when its log is gone.
    let failure_of = |g: &GateResultRow| {
        failure.filter(|f| f.gate.as_deref() == Some(g.name.as_str()) && !f.tail.is_empty())
    };
    for g in gates {
        let (text, cut) = match gate::log_tail(Path::new(&g.log), OUTPUT_BYTES) {
            Ok(Some((text, cut))) => (text, cut.then(|| format!("the whole output: {}", g.log))),
            Ok(None) | Err(_) => match failure_of(g) {
                Some(f) => (
                    f.tail.clone(),
                    Some(format!(
                        "its log `{}` is gone; this is the end mvk kept",
                        g.log
                    )),
                ),
                None => (String::new(), Some(format!("its log `{}` is gone", g.log))),
            },
        };
        if g.verdict != "pass" {
            let found = match gate::failed_tests_in_log(Path::new(&g.log)) {
                Ok(Some(found)) => Some(found),
                Ok(None) | Err(_) => failure_of(g).map(|f| {
                    let mut found = FailedTests::default();
                    f.tail.lines().for_each(|l| found.feed_line(l));
                    found
                }),
            };
            if let Some(found) = found.filter(|f| !f.names().is_empty()) {
                failing.push(Failing {
                    gate: g.name.clone(),
                    names: found.names().to_vec(),
                    more: found.more(),
                });
            }
        }
        let mut title = g.verdict.clone();
        if let Some(code) = g.exit_code {
            let _ = write!(title, ", exit {code}");
        }
        let _ = write!(title, ", {}", human_duration(g.duration_ms));
        if g.phase == "after-merge" {
            title.push_str(", after merge");
        }
        outputs.push(Output {
            gate: Some(g.name.clone()),
            title,
            verdict: g.verdict.clone(),
            text: clean(&text),
            cut,
        });
    }
    // A failure no gate row shows (the agent, the seal, the reviewer, a landing, a person).
    if let Some(f) = failure
        && !f.tail.trim().is_empty()
        && !gates.iter().any(|g| failure_of(g).is_some())
    {
        let title = match f.kind {
            FailureKind::Agent => "the agent's output",
            FailureKind::Seal => "the seal's breaches",
            FailureKind::Review => "the reviewer",
            FailureKind::Merge => "the landing",
            FailureKind::Human => "the person's reason",
            FailureKind::Gate | FailureKind::Unknown => "the failure",
        };
        let (text, cut) = last_bytes(&f.tail, OUTPUT_BYTES);
        outputs.push(Output {
            gate: None,
            title: title.to_string(),
            verdict: "fail".into(),
            text: clean(text),
            cut: cut.then(|| "only its end was kept".to_string()),
        });
    }
    let diff = match repo {
        Ok(repo) => diff(repo, a),
        Err(why) => Diff::Unreadable(why.to_string()),
    };
    Detail {
        failing,
        outputs,
        diff,
    }
}

/// The last `max` bytes of `text`, from a line's start when cut, and whether it was cut.
fn last_bytes(text: &str, max: u64) -> (&str, bool) {
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    if text.len() <= max {
        return (text, false);
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let rest = &text[start..];
    (rest.find('\n').map_or(rest, |nl| &rest[nl + 1..]), true)
}

/// Terminal output as the text a terminal would leave: only what follows a line's last
/// carriage return, no ANSI escapes, other control characters shown as `�`.
fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(body) => (body.strip_suffix('\r').unwrap_or(body), true),
            None => (line, false),
        };
        let body = body.rsplit('\r').next().unwrap_or(body);
        for c in crate::run::judge::ansi::strip(body).chars() {
            out.push(if c.is_control() && c != '\t' {
                '\u{fffd}'
            } else {
                c
            });
        }
        if newline {
            out.push('\n');
        }
    }
    out
}

/// The attempt's change, `base..head`, at most [`DIFF_BYTES`] of it.
fn diff(repo: &Repository, a: &AttemptRow) -> Diff {
    let head = match &a.head {
        Some(head) => Oid::from_str(head).ok(),
        None => repo
            .find_branch(&a.branch, git2::BranchType::Local)
            .ok()
            .and_then(|b| b.get().target()),
    };
    let Some(head) = head else {
        return Diff::NoCommit;
    };
    let commit = |id: &str| {
        Oid::from_str(id)
            .and_then(|oid| repo.find_commit(oid))
            .and_then(|c| c.tree())
            .map_err(|_| format!("commit `{}` is no longer in the repository", short(id)))
    };
    let (old, new) = match (commit(&a.base), commit(&head.to_string())) {
        (Ok(old), Ok(new)) => (old, new),
        (Err(why), _) | (_, Err(why)) => return Diff::Unreadable(why),
    };
    let mut opts = DiffOptions::new();
    opts.context_lines(3);
    let diff = match repo.diff_tree_to_tree(Some(&old), Some(&new), Some(&mut opts)) {
        Ok(diff) => diff,
        Err(e) => return Diff::Unreadable(format!("git cannot diff it: {}", e.message())),
    };
    let (files, insertions, deletions) = diff
        .stats()
        .map(|s| (s.files_changed(), s.insertions(), s.deletions()))
        .unwrap_or_default();
    let mut lines = Vec::new();
    let mut size = 0usize;
    let mut cut = false;
    let printed = diff.print(DiffFormat::Patch, |_, _, line| {
        let text = String::from_utf8_lossy(line.content());
        let text = text.strip_suffix('\n').unwrap_or(&text);
        size = size.saturating_add(text.len() + 2);
        if size > DIFF_BYTES {
            cut = true;
            return false;
        }
        lines.push((line.origin(), text.to_string()));
        true
    });
    // Stopping the printer on purpose makes it return an error; any other error is one.
    if let Err(e) = printed
        && !cut
    {
        return Diff::Unreadable(format!("git cannot print it: {}", e.message()));
    }
    Diff::Change {
        files,
        insertions,
        deletions,
        lines,
        cut,
        base: a.base.clone(),
        head: head.to_string(),
    }
}

/// The first 12 characters of a commit id.
fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// Draws the detail of attempt `a`.
pub(super) fn render(out: &mut String, a: &AttemptRow, d: &Detail, took: i64) {
    let _ = writeln!(
        out,
        "<section class=\"attempt-detail\" id=\"detail-{task}-{n}\" data-attempt=\"{n}\">\n\
         <h3>Attempt {n} <span class=\"{class}\">{verdict}</span> · {took}</h3>",
        task = esc(&a.task),
        n = a.number,
        class = super::class(a),
        verdict = esc(&super::verdict(a)),
        took = human_duration(took),
    );
    for f in &d.failing {
        let _ = write!(
            out,
            "<p>Failing tests named by gate <code>{}</code>:</p>\n<ul class=\"failing-tests\">",
            esc(&f.gate)
        );
        for name in &f.names {
            let _ = write!(out, "<li><code>{}</code></li>", esc(name));
        }
        match f.more {
            (0, false) => {}
            (n, false) => {
                let _ = write!(out, "<li class=\"note\">and {n} more</li>");
            }
            (n, true) => {
                let _ = write!(out, "<li class=\"note\">and more than {n} more</li>");
            }
        }
        out.push_str("</ul>\n");
    }
    for o in &d.outputs {
        let _ = writeln!(
            out,
            "<details class=\"output\" data-verdict=\"{verdict}\"{open}><summary \
             class=\"{verdict}\">Output of {title}{cut}</summary><pre class=\"tail\">{text}</pre>\
             </details>",
            verdict = esc(&o.verdict),
            open = if o.verdict == "pass" { "" } else { " open" },
            title = match &o.gate {
                Some(gate) => format!("gate <code>{}</code> ({})", esc(gate), esc(&o.title)),
                None => esc(&o.title),
            },
            cut = o.cut.as_deref().map_or(String::new(), |c| format!(
                " <small class=\"note\">(its last {} KiB; {})</small>",
                OUTPUT_BYTES / 1024,
                esc(c)
            )),
            text = if o.text.is_empty() {
                "(nothing)".to_string()
            } else {
                esc(&o.text)
            },
        );
    }
    match &d.diff {
        Diff::Change { files: 0, .. } => {
            out.push_str("<p class=\"diff note\">No change against the base.</p>\n");
        }
        Diff::Change {
            files,
            insertions,
            deletions,
            lines,
            cut,
            base,
            head,
        } => {
            let _ = write!(
                out,
                "<details class=\"diff\"><summary>Diff against the base <code>{base}</code>: \
                 {files} file{s} changed, <span class=\"add\">+{insertions}</span> \
                 <span class=\"del\">−{deletions}</span></summary><pre class=\"diff\">",
                base = esc(short(base)),
                s = if *files == 1 { "" } else { "s" },
            );
            for (origin, text) in lines {
                let (class, mark) = match origin {
                    'F' => ("file", ""),
                    'H' => ("hunk", ""),
                    '+' => ("add", "+"),
                    '-' => ("del", "-"),
                    ' ' => ("same", " "),
                    _ => ("same", ""),
                };
                let _ = writeln!(out, "<span class=\"{class}\">{mark}{}</span>", esc(text));
            }
            out.push_str("</pre>");
            if *cut {
                let _ = write!(
                    out,
                    "<p class=\"note\">The diff is cut at {} KiB: <code>git diff {} {}</code> \
                     shows all of it.</p>",
                    DIFF_BYTES / 1024,
                    esc(short(base)),
                    esc(short(head))
                );
            }
            out.push_str("</details>\n");
        }
        Diff::NoCommit => out.push_str("<p class=\"diff note\">No change was captured.</p>\n"),
        Diff::Unreadable(why) => {
            let _ = writeln!(
                out,
                "<p class=\"diff note\">The diff cannot be shown: {}.</p>",
                esc(why)
            );
        }
    }
    out.push_str("</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_shown_as_a_terminal_leaves_it_and_cut_at_a_line() {
        assert_eq!(
            clean("\x1b[31mred\x1b[0m\r\n10%\r100%\nbell\x07\ttab"),
            "red\n100%\nbell\u{fffd}\ttab"
        );
        assert_eq!(
            last_bytes("one\ntwo\nthree\n", 100),
            ("one\ntwo\nthree\n", false)
        );
        assert_eq!(last_bytes("one\ntwo\nthree\n", 9), ("three\n", true));
        // Never inside a character.
        assert_eq!(last_bytes("ééé\nab", 5), ("ab", true));
    }
}
