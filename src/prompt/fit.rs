//! A template, the facts every prompt states and the parts that may be cut in; out, the prompt
//! text inside the context budget and what each part took of it.
//!
//! The parts go in this order, each cut to what is left: the failing output's end (after the
//! lessons' share is set aside), the lessons (pinned ones first; at most a share of the budget),
//! the previous attempt's diff (its stat, then the hunks that fit from the smallest: the largest
//! are left out first), the excerpts of the files the failure names (each that fits). The fixed
//! part (goal, rules, checks, state, lineage, the failure's criterion) is never cut but for the
//! oldest lineage lines.

use serde::{Deserialize, Serialize};

use super::{Excerpt, LastDiff, Lesson, PromptContext, TemplateProblem, render};
use crate::tokens::estimate;

/// The parts of a prompt that are cut to fit.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cuttable {
    /// The failing output, whole (the context's `failure.output_tail` is ignored).
    pub(crate) tail: String,
    /// The pinned lessons file's text.
    pub(crate) pinned: Option<String>,
    /// Newest first.
    pub(crate) lessons: Vec<Lesson>,
    pub(crate) diff: Option<DiffParts>,
    /// In the order the failure names them.
    pub(crate) excerpts: Vec<Excerpt>,
}

/// A diff in the pieces it is cut at.
#[derive(Debug, Clone, Default)]
pub(crate) struct DiffParts {
    pub(crate) attempt: u32,
    pub(crate) stat: String,
    /// Each with its file's header, the smallest first.
    pub(crate) hunks: Vec<String>,
}

/// What one part took of the budget.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub(crate) struct Share {
    pub(crate) part: String,
    pub(crate) tokens: usize,
    /// Whether some of it was left out.
    pub(crate) cut: bool,
}

/// A prompt that fits, or is as small as its fixed part allows.
#[derive(Debug, Clone)]
pub(crate) struct Fitted {
    pub(crate) text: String,
    pub(crate) tokens: usize,
    pub(crate) shares: Vec<Share>,
    /// The fixed part alone is over the budget: nothing cuttable went in.
    pub(crate) over: bool,
}

/// Renders `template` with `cx` and as much of `parts` as fits in `budget` tokens; lessons take
/// at most `lesson_share` of them.
pub(crate) fn fit(
    template: &str,
    mut cx: PromptContext,
    parts: Cuttable,
    budget: usize,
    lesson_share: usize,
) -> Result<Fitted, TemplateProblem> {
    let size = |cx: &PromptContext| -> Result<(String, usize), TemplateProblem> {
        let text = render(template, cx)?;
        let n = estimate(&text);
        Ok((text, n))
    };
    if let Some(f) = cx.failure.as_mut() {
        f.output_tail.clear();
    }
    cx.pinned_lessons = None;
    cx.lessons.clear();
    cx.last_diff = None;
    cx.excerpts.clear();
    let mut shares = Vec::new();
    let (mut text, mut used) = size(&cx)?;
    // The oldest lines of a long lineage go before anything else does.
    let mut lineage_cut = false;
    while used > budget && !cx.lineage.is_empty() {
        let drop = (cx.lineage.len() / 2).max(1);
        cx.lineage.drain(..drop);
        lineage_cut = true;
        (text, used) = size(&cx)?;
    }
    shares.push(Share {
        part: "fixed".into(),
        tokens: used,
        cut: lineage_cut,
    });
    if used > budget {
        return Ok(Fitted {
            text,
            tokens: used,
            shares,
            over: true,
        });
    }
    // What the lessons will take, at most, is kept aside before the failing output is cut, so
    // that a long output never crowds out what earlier attempts and runs learnt.
    // (Each lesson's bullet and source, and the section's heading, cost a few tokens more.)
    let lesson_text: usize = parts.pinned.as_deref().map_or(0, |p| estimate(p) + 16)
        + parts
            .lessons
            .iter()
            .map(|l| estimate(&l.text) + estimate(&l.source) + 8)
            .sum::<usize>()
        + if parts.lessons.is_empty() { 0 } else { 16 };
    let reserve = lesson_text.min(lesson_share);

    // The failing output: its end, where test runners put their verdicts.
    if cx.failure.is_some() && !parts.tail.is_empty() {
        let tail = &parts.tail;
        let limit = budget.saturating_sub(reserve);
        let with = |cx: &mut PromptContext, keep: usize| {
            let start = floor_boundary(tail, tail.len() - keep);
            let shown = if start == 0 {
                tail.clone()
            } else {
                format!(
                    "[… {start} bytes cut to fit the context budget]\n{}",
                    &tail[start..]
                )
            };
            if let Some(f) = cx.failure.as_mut() {
                f.output_tail = shown;
            }
        };
        let before = used;
        with(&mut cx, tail.len());
        let (t, n) = size(&cx)?;
        let mut cut = false;
        if n <= limit {
            (text, used) = (t, n);
        } else {
            cut = true;
            // The most bytes of the end that fit: a binary search over how many are kept.
            let (mut lo, mut hi) = (0usize, tail.len());
            let mut best = None;
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                with(&mut cx, mid);
                let (t, n) = size(&cx)?;
                if n <= limit {
                    best = Some((t, n));
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            match best {
                Some((t, n)) => {
                    with(&mut cx, lo);
                    (text, used) = (t, n);
                }
                None => {
                    if let Some(f) = cx.failure.as_mut() {
                        f.output_tail.clear();
                    }
                }
            }
        }
        shares.push(Share {
            part: "failure-output".into(),
            tokens: used - before,
            cut,
        });
    }

    // Lessons, pinned ones first (cut at a line if need be), then the newest, each whole or
    // not at all, within their share.
    if parts.pinned.is_some() || !parts.lessons.is_empty() {
        let before = used;
        let cap = (before + lesson_share).min(budget);
        let mut cut = false;
        if let Some(p) = parts.pinned {
            cx.pinned_lessons = Some(p.clone());
            let (t, n) = size(&cx)?;
            if n <= cap {
                (text, used) = (t, n);
            } else {
                cut = true;
                let lines: Vec<&str> = p.lines().collect();
                let (mut lo, mut hi) = (0usize, lines.len());
                let shown = |k: usize| {
                    format!(
                        "{}\n[… {} more line(s) in the pinned lessons file, cut to fit the context budget]",
                        lines[..k].join("\n"),
                        lines.len() - k
                    )
                };
                let mut best = None;
                while lo < hi {
                    let mid = lo + (hi - lo).div_ceil(2);
                    cx.pinned_lessons = Some(shown(mid));
                    let (t, n) = size(&cx)?;
                    if n <= cap {
                        best = Some((t, n));
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                match best {
                    Some((t, n)) if lo > 0 => {
                        cx.pinned_lessons = Some(shown(lo));
                        (text, used) = (t, n);
                    }
                    _ => cx.pinned_lessons = None,
                }
            }
        }
        let total = parts.lessons.len();
        for lesson in parts.lessons {
            cx.lessons.push(lesson);
            let (t, n) = size(&cx)?;
            if n <= cap {
                (text, used) = (t, n);
            } else {
                cx.lessons.pop();
            }
        }
        cut |= cx.lessons.len() < total;
        shares.push(Share {
            part: "lessons".into(),
            tokens: used - before,
            cut,
        });
    }

    // The previous attempt's diff: its stat, then the hunks that fit, from the smallest.
    if let Some(d) = parts.diff {
        let before = used;
        let total = d.hunks.len();
        let omitted = |kept: usize| {
            let n = total - kept;
            (n > 0).then(|| {
                format!(
                    "{n} of {total} hunk{} (the largest) left out to fit the context budget; `git diff` of the attempt's branch against its base shows them",
                    if total == 1 { "" } else { "s" }
                )
            })
        };
        cx.last_diff = Some(LastDiff {
            attempt: d.attempt,
            stat: d.stat,
            hunks: String::new(),
            omitted: omitted(0),
        });
        let (t, n) = size(&cx)?;
        let mut cut = true;
        if n > budget {
            cx.last_diff = None;
        } else {
            (text, used) = (t, n);
            // Grow by estimate, then confirm with a render; back off one hunk at a time. The
            // hunks are smallest first: once one does not fit, no later one does.
            let mut kept = 0;
            let mut room = budget - used;
            for h in &d.hunks {
                let cost = estimate(h) + 1;
                if cost > room {
                    break;
                }
                room -= cost;
                kept += 1;
            }
            loop {
                if let Some(ld) = cx.last_diff.as_mut() {
                    ld.hunks = d.hunks[..kept].concat();
                    ld.omitted = omitted(kept);
                }
                let (t, n) = size(&cx)?;
                if n <= budget {
                    (text, used) = (t, n);
                    break;
                }
                if kept == 0 {
                    break;
                }
                kept -= 1;
            }
            // The estimate counted the note on what was left out, which shrinks or goes as
            // hunks go in: the next hunk may fit after all.
            while kept < total {
                if let Some(ld) = cx.last_diff.as_mut() {
                    ld.hunks = d.hunks[..=kept].concat();
                    ld.omitted = omitted(kept + 1);
                }
                let (t, n) = size(&cx)?;
                if n > budget {
                    break;
                }
                (text, used) = (t, n);
                kept += 1;
            }
            if let Some(ld) = cx.last_diff.as_mut() {
                ld.hunks = d.hunks[..kept].concat();
                ld.omitted = omitted(kept);
            }
            cut = kept < total;
        }
        shares.push(Share {
            part: "previous-diff".into(),
            tokens: used - before,
            cut,
        });
    }

    // Excerpts, in the order the failure names them: each that fits.
    if !parts.excerpts.is_empty() {
        let before = used;
        let total = parts.excerpts.len();
        for e in parts.excerpts {
            cx.excerpts.push(e);
            let (t, n) = size(&cx)?;
            if n <= budget {
                (text, used) = (t, n);
            } else {
                cx.excerpts.pop();
            }
        }
        shares.push(Share {
            part: "excerpts".into(),
            tokens: used - before,
            cut: cx.excerpts.len() < total,
        });
    }
    Ok(Fitted {
        text,
        tokens: used,
        shares,
        over: false,
    })
}

/// The largest char boundary of `s` at or below `i`.
fn floor_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::prompt::{Failure, Lineage};

    const TEMPLATE: &str = include_str!("../../stdlib/prompts/maker.hbs");

    fn context(goal_words: usize, lineage: usize) -> PromptContext {
        let mut cx = crate::prompt::sample();
        cx.goal = "word ".repeat(goal_words);
        cx.lineage = (1..=lineage as u32)
            .map(|n| Lineage {
                attempt: n,
                rung: 1,
                agent: "bot".into(),
                verdict: "failed".into(),
                criterion: format!("gate `tests` passes: exit code 1 ({n})"),
            })
            .collect();
        cx.failure = Some(Failure {
            attempt: 1,
            kind: "gate".into(),
            criterion: "gate `tests` passes".into(),
            ..Failure::default()
        });
        cx
    }

    fn lines(tag: &str, n: usize) -> String {
        (0..n)
            .map(|i| format!("{tag} line {i} of text\n"))
            .collect()
    }

    fn parts(tail: usize, hunks: &[usize], excerpts: &[usize], lessons: &[usize]) -> Cuttable {
        let mut hunks: Vec<String> = hunks
            .iter()
            .map(|&n| format!("--- a/f\n+++ b/f\n@@ -1 +1 @@\n{}", lines("+hunk", n)))
            .collect();
        hunks.sort_by_key(String::len);
        Cuttable {
            tail: lines("output", tail),
            pinned: None,
            lessons: lessons
                .iter()
                .enumerate()
                .map(|(i, &n)| Lesson {
                    id: i as i64,
                    text: "lesson ".repeat(n),
                    source: "run r".into(),
                })
                .collect(),
            diff: Some(DiffParts {
                attempt: 1,
                stat: " f | 1 +\n".into(),
                hunks,
            }),
            excerpts: excerpts
                .iter()
                .map(|&n| Excerpt {
                    path: "src/f.rs".into(),
                    line: 1,
                    from: 1,
                    to: n as u32,
                    text: lines("excerpt", n),
                })
                .collect(),
        }
    }

    fn share<'a>(f: &'a Fitted, part: &str) -> Option<&'a Share> {
        f.shares.iter().find(|s| s.part == part)
    }

    #[test]
    fn everything_fits_a_large_budget_and_nothing_is_cut() {
        let f = fit(
            TEMPLATE,
            context(10, 2),
            parts(20, &[3, 5], &[4], &[5]),
            100_000,
            10_000,
        )
        .expect("renders");
        assert!(!f.over && f.shares.iter().all(|s| !s.cut), "{:?}", f.shares);
        for needle in [
            "output line 19",
            "+hunk line 4",
            "excerpt line 3",
            "lesson lesson",
        ] {
            assert!(f.text.contains(needle), "{needle}:\n{}", f.text);
        }
    }

    #[test]
    fn the_output_keeps_its_end_and_says_how_much_was_cut() {
        let f = fit(
            TEMPLATE,
            context(10, 0),
            parts(2000, &[], &[], &[]),
            1500,
            0,
        )
        .expect("renders");
        assert!(f.tokens <= 1500);
        assert!(f.text.contains("output line 1999 of text"), "{}", f.text);
        assert!(!f.text.contains("output line 0 of"), "{}", f.text);
        assert!(f.text.contains("bytes cut to fit the context budget]"));
        assert!(share(&f, "failure-output").is_some_and(|s| s.cut));
        // The output took what was left: no room for the diff.
        assert!(!f.text.contains("What attempt 1 changed"), "{}", f.text);
    }

    #[test]
    fn the_largest_hunks_are_left_out_first_and_the_prompt_says_so() {
        let f = fit(
            TEMPLATE,
            context(10, 0),
            parts(5, &[2, 3, 400], &[2], &[]),
            1200,
            0,
        )
        .expect("renders");
        assert!(f.tokens <= 1200);
        assert!(f.text.contains("+hunk line 2 of text"), "{}", f.text);
        assert!(!f.text.contains("+hunk line 399"), "{}", f.text);
        assert!(
            f.text.contains("1 of 3 hunks (the largest) left out"),
            "{}",
            f.text
        );
        assert!(share(&f, "previous-diff").is_some_and(|s| s.cut));
        // A hunk too large to fit leaves the rest of the budget to the excerpts.
        assert!(f.text.contains("excerpt line 1 of text"), "{}", f.text);
    }

    #[test]
    fn the_last_hunk_goes_in_when_dropping_the_note_on_left_out_hunks_makes_room() {
        // Found by the property below: the estimate counted the note that goes with the hunk.
        let f = fit(
            TEMPLATE,
            context(284, 17),
            parts(32, &[10, 109, 57, 48], &[], &[48, 30, 12, 31]),
            3470,
            433,
        )
        .expect("renders");
        assert!(!f.over && f.tokens <= 3470, "{}", f.tokens);
        assert!(f.text.contains("+hunk line 108 of text"), "{}", f.text);
        assert!(!f.text.contains("left out to fit"), "{}", f.text);
    }

    #[test]
    fn a_long_output_leaves_the_lessons_their_share() {
        let f = fit(
            TEMPLATE,
            context(10, 0),
            parts(3000, &[], &[], &[5, 5]),
            2000,
            250,
        )
        .expect("renders");
        assert!(f.tokens <= 2000);
        assert!(share(&f, "failure-output").is_some_and(|s| s.cut));
        let lessons = share(&f, "lessons").expect("lessons went in");
        assert!(lessons.tokens > 0 && !lessons.cut, "{:?}", f.shares);
    }

    #[test]
    fn a_pinned_file_over_its_share_is_cut_at_a_line() {
        let mut p = parts(0, &[], &[], &[]);
        p.pinned = Some(lines("- pinned", 400));
        let f = fit(TEMPLATE, context(10, 0), p, 4000, 500).expect("renders");
        assert!(f.text.contains("- pinned line 0 of text"), "{}", f.text);
        assert!(!f.text.contains("- pinned line 399"), "{}", f.text);
        assert!(f.text.contains("more line(s) in the pinned lessons file"));
        assert!(share(&f, "lessons").is_some_and(|s| s.cut && s.tokens <= 500));
    }

    #[test]
    fn a_fixed_part_over_the_budget_sheds_the_oldest_lineage_then_says_it_is_over() {
        let f = fit(TEMPLATE, context(10, 40), parts(5, &[], &[], &[]), 600, 0).expect("renders");
        assert!(!f.over && f.tokens <= 600, "{}", f.tokens);
        assert!(
            f.text.contains("(40)") && !f.text.contains("(1)\n"),
            "{}",
            f.text
        );
        assert!(share(&f, "fixed").is_some_and(|s| s.cut));
        let f = fit(TEMPLATE, context(2000, 0), parts(5, &[], &[], &[]), 300, 0).expect("renders");
        assert!(f.over && f.tokens > 300);
        assert!(!f.text.contains("output line"), "{}", f.text);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whatever the sizes, the prompt is within the budget (when its fixed part is), the
        /// parts are in their order, lessons keep to their share, and nothing left out of the
        /// diff or the excerpts would have fit in what is left.
        #[test]
        fn the_budget_holds_and_parts_are_cut_in_order(
            goal in 0usize..300,
            lineage in 0usize..30,
            tail in 0usize..400,
            hunks in prop::collection::vec(0usize..120, 0..8),
            excerpts in prop::collection::vec(1usize..40, 0..6),
            lessons in prop::collection::vec(1usize..60, 0..6),
            budget in 256usize..6000,
        ) {
            let share_cap = budget / 8;
            let given = parts(tail, &hunks, &excerpts, &lessons);
            let f = fit(
                TEMPLATE,
                context(goal, lineage),
                given.clone(),
                budget,
                share_cap,
            )
            .expect("renders");
            prop_assert_eq!(estimate(&f.text), f.tokens);
            if f.over {
                prop_assert_eq!(f.shares.len(), 1);
            } else {
                prop_assert!(f.tokens <= budget, "{} > {budget}", f.tokens);
                let order = ["fixed", "failure-output", "lessons", "previous-diff", "excerpts"];
                let names: Vec<&str> = f.shares.iter().map(|s| s.part.as_str()).collect();
                let mut last = 0;
                for n in &names {
                    let at = order.iter().position(|o| o == n).expect("a known part");
                    prop_assert!(at >= last, "{names:?}");
                    last = at;
                }
                if let Some(l) = share(&f, "lessons") {
                    prop_assert!(l.tokens <= share_cap, "{:?}", f.shares);
                }
                let left = budget - f.tokens;
                if f.text.contains("What attempt 1 changed") {
                    for h in given.diff.iter().flat_map(|d| &d.hunks) {
                        prop_assert!(
                            f.text.contains(h.as_str()) || estimate(h) + 1 > left,
                            "a hunk of {} tokens left out with {left} left",
                            estimate(h)
                        );
                    }
                }
                for e in &given.excerpts {
                    prop_assert!(
                        // What it costs rendered: its text, its `path, lines a-b:` line and
                        // fence, and the section's heading when it would be the first.
                        f.text.contains(e.text.as_str())
                            || estimate(&format!(
                                "## The lines the failure names, as attempt 1 left them\n`{}`, lines {}-{}:\n```\n{}```\n",
                                e.path, e.from, e.to, e.text
                            )) + 4
                                > left,
                        "an excerpt of {} tokens left out with {left} left",
                        estimate(&e.text)
                    );
                }
            }
        }
    }
}
