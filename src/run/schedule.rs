//! A flow's tasks, what has finished and what is running in; for each task not yet started,
//! whether it starts now, is skipped, or waits (and on what) out.
//!
//! Pure: the driver owns the clock, the processes and the ledger, and asks this module only
//! which ready task may start. Two tasks whose scopes may share a file never run at once, so
//! parallel attempts cannot edit the same file and their changes land without conflict.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ir::Task;
use crate::run::outcome::Outcome;

/// What scheduling reads of a task.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry<'a> {
    pub(crate) name: &'a str,
    pub(crate) after: &'a [String],
    pub(crate) scope: &'a [String],
}

impl<'a> From<&'a Task> for Entry<'a> {
    fn from(t: &'a Task) -> Entry<'a> {
        Entry {
            name: &t.name,
            after: &t.after,
            scope: &t.scope,
        }
    }
}

/// What becomes of a task that has not started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Start,
    /// A task it starts after did not succeed (and the flow does not `continue-on-failure`).
    Skip {
        failed: Vec<String>,
    },
    Wait(Wait),
}

/// Why a task that has not started waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "on", rename_all = "kebab-case")]
pub(crate) enum Wait {
    /// Tasks it starts after have not finished.
    After { tasks: Vec<String> },
    /// Tasks it starts after wait for a person's answer.
    Person { tasks: Vec<String> },
    /// A running task's scope may share files with this one's.
    Scope {
        task: String,
        ours: String,
        theirs: String,
    },
    /// `parallel` tasks already run.
    Parallel { limit: usize },
}

impl Wait {
    /// What it waits on, as `task.waiting` names it (`after`, `person`, `scope`, `parallel`).
    pub(crate) fn on(&self) -> &'static str {
        match self {
            Wait::After { .. } => "after",
            Wait::Person { .. } => "person",
            Wait::Scope { .. } => "scope",
            Wait::Parallel { .. } => "parallel",
        }
    }

    /// What the task waits for, for a person: the end of "waits for …".
    pub(crate) fn text(&self) -> String {
        let list = |t: &[String]| {
            t.iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Wait::After { tasks } => format!("{} to finish", list(tasks)),
            Wait::Person { tasks } => format!("a person's answer on {}", list(tasks)),
            Wait::Scope { task, ours, theirs } => format!(
                "`{task}` to finish: its scope `{theirs}` may share files with this task's `{ours}`"
            ),
            Wait::Parallel { limit } => {
                format!("a free slot: {limit} tasks run already (`parallel {limit}`)")
            }
        }
    }
}

/// What the scheduler knows of the run.
pub(crate) struct Board<'a> {
    /// How each finished task ended (a task waiting for a person counts as not finished).
    pub(crate) done: &'a BTreeMap<String, Outcome>,
    /// The names of the tasks this run runs: dependencies outside it (`--task`) do not hold a
    /// task back.
    pub(crate) selected: &'a [&'a str],
    pub(crate) running: &'a [Entry<'a>],
    /// Tasks stopped at a checkpoint: they hold their scope (the work a person may let land,
    /// or finish by hand, was made on files no other task may touch meanwhile) but no slot.
    pub(crate) holding: &'a [Entry<'a>],
    pub(crate) parallel: usize,
    pub(crate) continue_on_failure: bool,
}

/// Whether `task` starts now.
pub(crate) fn decide(task: Entry<'_>, board: &Board<'_>) -> Decision {
    let deps: Vec<&String> = task
        .after
        .iter()
        .filter(|d| board.selected.contains(&d.as_str()))
        .collect();
    let waiting_person: Vec<String> = deps
        .iter()
        .filter(|d| board.done.get(d.as_str()) == Some(&Outcome::Waiting))
        .map(|d| (*d).clone())
        .collect();
    let unfinished: Vec<String> = deps
        .iter()
        .filter(|d| !board.done.contains_key(d.as_str()))
        .map(|d| (*d).clone())
        .collect();
    let failed: Vec<String> = deps
        .iter()
        .filter(|d| {
            board
                .done
                .get(d.as_str())
                .is_some_and(|o| !matches!(o, Outcome::Accepted | Outcome::Waiting))
        })
        .map(|d| (*d).clone())
        .collect();
    if !failed.is_empty() && !board.continue_on_failure {
        return Decision::Skip { failed };
    }
    if !unfinished.is_empty() {
        return Decision::Wait(Wait::After { tasks: unfinished });
    }
    if !waiting_person.is_empty() {
        return Decision::Wait(Wait::Person {
            tasks: waiting_person,
        });
    }
    for other in board.running.iter().chain(board.holding) {
        if let Some((ours, theirs)) = scopes_overlap(task.scope, other.scope) {
            return Decision::Wait(Wait::Scope {
                task: other.name.to_string(),
                ours,
                theirs,
            });
        }
    }
    if board.running.len() >= board.parallel.max(1) {
        return Decision::Wait(Wait::Parallel {
            limit: board.parallel.max(1),
        });
    }
    Decision::Start
}

/// The first pair of globs, one of `a` and one of `b`, that may match a common path; an empty
/// scope is the whole repository.
pub(crate) fn scopes_overlap(a: &[String], b: &[String]) -> Option<(String, String)> {
    let whole = || "**".to_string();
    match (a.is_empty(), b.is_empty()) {
        (true, true) => return Some((whole(), whole())),
        (true, false) => return Some((whole(), b[0].clone())),
        (false, true) => return Some((a[0].clone(), whole())),
        (false, false) => {}
    }
    a.iter().find_map(|x| {
        b.iter()
            .find(|y| globs_overlap(x, y))
            .map(|y| (x.clone(), y.clone()))
    })
}

/// Whether some path may match both globs (`*`, `?` and classes stay within one path
/// component; `**` spans any number). Errs towards "yes": a false "yes" only costs parallelism,
/// a false "no" would let two agents edit one file at once.
pub(crate) fn globs_overlap(a: &str, b: &str) -> bool {
    let split = |g: &str| -> Vec<String> {
        g.trim_start_matches("./")
            .split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    // Alternatives first: one may hold a `/` (`{src/a.rs,docs/x}`), so the components of each
    // are only known once it is spelled out.
    let (Some(xs), Some(ys)) = (expand_braces(a), expand_braces(b)) else {
        return true;
    };
    xs.iter()
        .any(|x| ys.iter().any(|y| segments_overlap(&split(x), &split(y))))
}

/// Most spelled-out alternatives of one glob compared; past it, "may overlap".
const MAX_ALTERNATIVES: usize = 256;

/// GLOB with its `{a,b}` alternatives spelled out (nested ones too; `\{` is a literal brace),
/// or `None` when there would be more than [`MAX_ALTERNATIVES`] or a brace is left open.
fn expand_braces(glob: &str) -> Option<Vec<String>> {
    let bytes = glob.as_bytes();
    let mut open = None;
    let mut depth = 0usize;
    let mut commas = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 1,
            b'{' => {
                if depth == 0 {
                    open = Some(i);
                    commas.clear();
                }
                depth += 1;
            }
            b',' if depth == 1 => commas.push(i),
            b'}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    let start = open?;
                    let (head, tail) = (&glob[..start], &glob[i + 1..]);
                    let mut cuts = vec![start];
                    cuts.extend(&commas);
                    cuts.push(i);
                    let mut out = Vec::new();
                    for pair in cuts.windows(2) {
                        let alt = &glob[pair[0] + 1..pair[1]];
                        for rest in expand_braces(&format!("{head}{alt}{tail}"))? {
                            out.push(rest);
                            if out.len() > MAX_ALTERNATIVES {
                                return None;
                            }
                        }
                    }
                    return Some(out);
                }
            }
            _ => {}
        }
        i += 1;
    }
    (depth == 0).then(|| vec![glob.to_string()])
}

fn segments_overlap(a: &[String], b: &[String]) -> bool {
    match (a.first(), b.first()) {
        (None, None) => true,
        (Some(x), _) if x == "**" => {
            segments_overlap(&a[1..], b) || (!b.is_empty() && segments_overlap(a, &b[1..]))
        }
        (_, Some(y)) if y == "**" => {
            segments_overlap(a, &b[1..]) || (!a.is_empty() && segments_overlap(&a[1..], b))
        }
        // One names a directory the other reaches into: a path may be under both.
        (None, Some(_)) | (Some(_), None) => true,
        (Some(x), Some(y)) => segment_overlap(x, y) && segments_overlap(&a[1..], &b[1..]),
    }
}

const META: &[char] = &['*', '?', '[', '{', '\\'];

fn segment_overlap(x: &str, y: &str) -> bool {
    let literal = |s: &str| !s.contains(META);
    match (literal(x), literal(y)) {
        (true, true) => x == y,
        (true, false) => segment_matches(y, x),
        (false, true) => segment_matches(x, y),
        // A class's inside is not a suffix (`a[bc]` against `*c`): may overlap.
        (false, false) if x.contains('[') || y.contains('[') => true,
        (false, false) => {
            let prefix = |s: &str| s[..s.find(META).unwrap_or(s.len())].to_string();
            let suffix = |s: &str| s[s.rfind(META).map_or(0, |i| i + 1)..].to_string();
            let (px, py) = (prefix(x), prefix(y));
            let (sx, sy) = (suffix(x), suffix(y));
            (px.starts_with(&py) || py.starts_with(&px)) && (sx.ends_with(&sy) || sy.ends_with(&sx))
        }
    }
}

/// Whether the one-component glob `glob` matches the literal `name`; an unreadable glob may.
fn segment_matches(glob: &str, name: &str) -> bool {
    crate::glob::matcher(glob).is_none_or(|m| m.is_match(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Owned {
        name: String,
        after: Vec<String>,
        scope: Vec<String>,
    }

    impl Owned {
        fn entry(&self) -> Entry<'_> {
            Entry {
                name: &self.name,
                after: &self.after,
                scope: &self.scope,
            }
        }
    }

    fn task(name: &str, after: &[&str], scope: &[&str]) -> Owned {
        Owned {
            name: name.to_string(),
            after: after.iter().map(|s| s.to_string()).collect(),
            scope: scope.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn glob_overlap_is_decided_component_by_component() {
        for (a, b, want) in [
            ("src/a.rs", "src/b.rs", false),
            ("src/a.rs", "src/a.rs", true),
            ("src/**", "src/handlers/a.rs", true),
            ("docs/**", "src/**", false),
            ("**", "anything/at/all", true),
            // As in the seal, a pattern also covers what lies under a directory it matches:
            // `x.rs/y.md` is under both.
            ("**/*.rs", "**/*.md", true),
            ("src/**/*.rs", "docs/**/*.md", false),
            ("**/*.rs", "src/lib.rs", true),
            ("src/*.rs", "src/lib.rs", true),
            ("src/*.rs", "src/nested/lib.rs", false),
            ("src/*.rs", "src/lib.rs/inner", true), // `src/lib.rs` may be a directory
            ("src/*.rs", "tests/*.rs", false),
            ("src/handlers/*.rs", "src/db/*", false),
            ("migrations/**", "src/db/**", false),
            ("a_*", "b_*", false),
            ("a_*.rs", "a_b*", true),
            ("docs", "docs/api.md", true),
            ("src/{a,b}.rs", "src/c.rs", false),
            ("src/[ab].rs", "src/a.rs", true),
            // Found in review: alternatives and classes between two globs.
            ("*.{md,txt}", "*.md", true),
            ("*.{md,txt}", "*.rs", false),
            ("a[bc]", "*c", true),
            ("{src/a.rs,docs/x}", "src/a.rs", true),
            ("{src/a.rs,docs/x}", "src/b.rs", false),
            ("src/{a,{b,c}}.rs", "src/c.rs", true),
            ("src/{a,b", "src/c.rs", true), // an open brace: may overlap
        ] {
            assert_eq!(globs_overlap(a, b), want, "{a} vs {b}");
            assert_eq!(globs_overlap(b, a), want, "{b} vs {a}");
        }
    }

    #[test]
    fn an_empty_scope_is_the_whole_repository() {
        assert!(scopes_overlap(&[], &["docs/**".into()]).is_some());
        assert_eq!(
            scopes_overlap(
                &["src/a.rs".into(), "docs/**".into()],
                &["docs/x.md".into()]
            ),
            Some(("docs/**".into(), "docs/x.md".into()))
        );
        assert_eq!(
            scopes_overlap(&["src/a.rs".into()], &["src/b.rs".into()]),
            None
        );
    }

    #[test]
    fn a_task_at_a_checkpoint_holds_its_scope_but_not_a_slot() {
        let held = task("held", &[], &["src/**"]);
        let near = task("near", &[], &["src/a.rs"]);
        let far = task("far", &[], &["docs/**"]);
        let done = BTreeMap::from([("held".to_string(), Outcome::Waiting)]);
        let holding = [held.entry()];
        let b = Board {
            done: &done,
            selected: &["held", "near", "far"],
            running: &[],
            holding: &holding,
            parallel: 1,
            continue_on_failure: false,
        };
        assert!(
            matches!(decide(near.entry(), &b), Decision::Wait(Wait::Scope { ref task, .. }) if task == "held")
        );
        assert_eq!(decide(far.entry(), &b), Decision::Start);
    }

    #[test]
    fn a_task_waits_for_dependencies_scope_and_slots_and_is_skipped_after_a_failure() {
        let a = task("a", &[], &["src/a.rs"]);
        let b = task("b", &[], &["src/b.rs"]);
        let c = task("c", &["a", "b"], &["docs/**"]);
        let d = task("d", &[], &["src/**"]);
        let selected = ["a", "b", "c", "d"];
        let mut done = BTreeMap::new();
        let e = task("e", &[], &["e/**"]);
        let board = |done: &BTreeMap<String, Outcome>, running: &[&Owned], cof: bool| {
            let running: Vec<Entry<'_>> = running.iter().map(|t| t.entry()).collect();
            let b = Board {
                done,
                selected: &selected,
                running: &running,
                holding: &[],
                parallel: 2,
                continue_on_failure: cof,
            };
            (
                decide(c.entry(), &b),
                decide(d.entry(), &b),
                decide(e.entry(), &b),
            )
        };
        // Nothing done, `a` runs: `c` waits for both, `d` for `a`'s scope.
        let (c1, d1, _) = board(&done, &[&a], false);
        assert_eq!(
            c1,
            Decision::Wait(Wait::After {
                tasks: vec!["a".into(), "b".into()]
            })
        );
        assert!(matches!(d1, Decision::Wait(Wait::Scope { ref task, .. }) if task == "a"));
        // `a` and `b` run: the two slots are taken.
        let (_, _, e) = board(&done, &[&a, &b], false);
        assert_eq!(e, Decision::Wait(Wait::Parallel { limit: 2 }));
        // `a` waits for a person: `c` waits on that, not on a failure.
        done.insert("a".to_string(), Outcome::Waiting);
        done.insert("b".to_string(), Outcome::Accepted);
        let (c2, _, _) = board(&done, &[], false);
        assert_eq!(
            c2,
            Decision::Wait(Wait::Person {
                tasks: vec!["a".into()]
            })
        );
        // `a` failed: `c` is skipped, or runs with continue-on-failure.
        done.insert("a".to_string(), Outcome::Rejected);
        let (c3, d3, _) = board(&done, &[], false);
        assert_eq!(
            c3,
            Decision::Skip {
                failed: vec!["a".into()]
            }
        );
        assert_eq!(d3, Decision::Start);
        let (c4, _, _) = board(&done, &[], true);
        assert_eq!(c4, Decision::Start);
    }
}
