//! `mvk lessons [--all] [--json]`, `mvk lessons forget ID` and `mvk lessons pin ID`: the
//! repository's ledger in; out, the lessons makers and reviewers wrote to `$MVK_LESSONS_FILE`
//! (the live ones, newest first), a lesson forgotten (no agent is shown it again), or a lesson
//! appended to the pinned-lessons file its loop names (`lessons "FILE"`), for a person to commit.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde::Serialize;

use super::printer::Printer;
use super::reading;
use super::repo::repo_root;
use super::{Cli, CliError, Exit};
use crate::ledger::read::ReadError;
use crate::ledger::{Ledger, LessonRow};

/// The schema name of `mvk lessons --json`.
pub(crate) const SCHEMA: &str = "mvk.lessons.v1";

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct LessonsArgs {
    #[command(subcommand)]
    pub(crate) action: Option<LessonsAction>,
    /// Also list the forgotten lessons and those pinned to a file, marked as such.
    #[arg(long)]
    pub(crate) all: bool,
    /// Print one JSON document (schema `mvk.lessons.v1`).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum LessonsAction {
    /// Forget a lesson: the ledger keeps it, and no agent is shown it again.
    Forget(LessonId),
    /// Append a lesson to the pinned-lessons file its loop names (`lessons "FILE"`), which every
    /// prompt of the loop shows; commit the file to keep it.
    Pin(LessonId),
}

#[derive(Debug, Args)]
pub(crate) struct LessonId {
    /// The lesson's number, as `mvk lessons` shows it (`12` or `#12`).
    #[arg(value_name = "ID", value_parser = lesson_id)]
    pub(crate) id: i64,
}

#[derive(Debug, Serialize)]
struct Lessons {
    schema: &'static str,
    lessons: Vec<LessonRow>,
}

pub(crate) fn lessons(cli: &Cli, printer: &Printer, args: &LessonsArgs) -> Result<Exit, CliError> {
    match &args.action {
        None => list(cli, printer, args),
        Some(LessonsAction::Forget(l)) => forget(cli, printer, l.id),
        Some(LessonsAction::Pin(l)) => pin(cli, printer, l.id),
    }
}

/// `12` or `#12`: a lesson's number.
fn lesson_id(s: &str) -> Result<i64, String> {
    let digits = s.strip_prefix('#').unwrap_or(s);
    match digits.parse::<i64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "`{s}` is not a lesson's number (`mvk lessons` shows them, e.g. `#12`)"
        )),
    }
}

fn list(cli: &Cli, printer: &Printer, args: &LessonsArgs) -> Result<Exit, CliError> {
    let ledger = reading::open(cli)?;
    let mut rows = ledger
        .reader
        .lessons(args.all)
        .map_err(|e| reading::internal(&e))?;
    // A pinned lesson is shown to agents from its file, not from the ledger: it is not live.
    if !args.all {
        rows.retain(|l| l.pinned_to.is_none());
    }
    if args.json {
        reading::print_json(
            printer,
            &Lessons {
                schema: SCHEMA,
                lessons: rows,
            },
        )?;
        return Ok(Exit::Ok);
    }
    if rows.is_empty() {
        printer.out("no lessons");
        return Ok(Exit::Ok);
    }
    let entries: Vec<String> = rows.iter().map(entry).collect();
    printer.out(&entries.join("\n"));
    Ok(Exit::Ok)
}

/// One lesson as `mvk lessons` prints it: a heading line (number, time, loop file, task,
/// attempt, author, and whether it is forgotten or pinned), then its text indented.
fn entry(l: &LessonRow) -> String {
    let t = crate::ledger::read::rfc3339(l.created_at);
    // `2026-12-06T10:01:02Z` → `2026-12-06 10:01`.
    let when = match (t.get(..10), t.get(11..16)) {
        (Some(day), Some(time)) => format!("{day} {time}"),
        _ => t.clone(),
    };
    let mut head = format!(
        "#{} {when} {} · {} · attempt {} ({})",
        l.id, l.file, l.task, l.attempt, l.author
    );
    if l.forgotten_at.is_some() {
        head.push_str(" · forgotten");
    }
    if let Some(file) = &l.pinned_to {
        head.push_str(&format!(" · pinned to {file}"));
    }
    let mut text = head;
    text.push('\n');
    for line in l.text.trim().lines() {
        if !line.trim().is_empty() {
            text.push_str("    ");
            text.push_str(line.trim_end());
        }
        text.push('\n');
    }
    text
}

fn forget(cli: &Cli, printer: &Printer, id: i64) -> Result<Exit, CliError> {
    let (_, mut ledger) = open_for_writing(cli)?;
    let row = find(&ledger, id)?;
    if row.forgotten_at.is_some() {
        return Err(already_forgotten(id));
    }
    // Agents read a pinned lesson from its file: forgetting the ledger's copy would change
    // nothing they see.
    if let Some(file) = &row.pinned_to {
        return Err(CliError::Usage {
            message: format!(
                "lesson `{id}` is pinned to `{file}`, which shows it to agents, not the ledger"
            ),
            hint: Some(format!(
                "remove its bullet from `{file}` and commit that to stop showing it"
            )),
        });
    }
    if !ledger
        .forget_lesson(id)
        .map_err(|e| reading::internal(&e))?
    {
        // Forgotten (or pinned) by another command between the read and the write.
        return Err(already_forgotten(id));
    }
    printer.out(&format!("forgot lesson {id}"));
    Ok(Exit::Ok)
}

fn pin(cli: &Cli, printer: &Printer, id: i64) -> Result<Exit, CliError> {
    let (root, mut ledger) = open_for_writing(cli)?;
    let row = find(&ledger, id)?;
    if row.forgotten_at.is_some() {
        return Err(CliError::Usage {
            message: format!("lesson `{id}` is forgotten, so there is nothing to pin"),
            hint: Some("`mvk lessons` lists the live lessons".into()),
        });
    }
    if let Some(file) = &row.pinned_to {
        return Err(already_pinned(id, file));
    }
    let path = lessons_file(cli, printer, &root, &row)?;
    let target = root.join(&path);
    // The file first, the ledger second: a crash between them leaves the lesson in the file and
    // still live (shown twice, harmless); the other order could lose it.
    append(&target, &bullet(&row.text)).map_err(|e| CliError::Internal {
        message: format!("cannot write lesson {id} into `{}`: {e}", target.display()),
    })?;
    if !ledger
        .pin_lesson(id, &path)
        .map_err(|e| reading::internal(&e))?
    {
        // Forgotten or pinned by another command meanwhile; the file has the lesson anyway.
        return Err(CliError::Usage {
            message: format!(
                "lesson `{id}` was forgotten or pinned while it was written into `{path}`"
            ),
            hint: Some(format!(
                "`mvk lessons --all` shows it; remove its bullet from `{path}` if it should not be there"
            )),
        });
    }
    printer.out(&format!(
        "pinned lesson {id} to {path}: commit it to keep it"
    ));
    Ok(Exit::Ok)
}

/// The repository's root and its ledger, open for writing; without a ledger, the error the
/// reading commands give.
fn open_for_writing(cli: &Cli) -> Result<(PathBuf, Ledger), CliError> {
    let root = repo_root(cli)?;
    let path = root.join(".mvk").join("ledger.db");
    if !path.is_file() {
        return Err(reading::read_error(ReadError::NoLedger { path }));
    }
    let ledger = Ledger::open(&path).map_err(|e| reading::internal(&e))?;
    Ok((root, ledger))
}

/// Lesson `id`, forgotten or not; an unknown id is a usage error.
fn find(ledger: &Ledger, id: i64) -> Result<LessonRow, CliError> {
    ledger
        .lesson(id)
        .map_err(|e| reading::internal(&e))?
        .ok_or_else(|| CliError::Usage {
            message: format!("there is no lesson `{id}`"),
            hint: Some("`mvk lessons --all` lists every lesson with its number".into()),
        })
}

fn already_forgotten(id: i64) -> CliError {
    CliError::Usage {
        message: format!("lesson `{id}` is already forgotten"),
        hint: Some("`mvk lessons` lists the live lessons".into()),
    }
}

fn already_pinned(id: i64, file: &str) -> CliError {
    CliError::Usage {
        message: format!("lesson `{id}` is already pinned to `{file}`"),
        hint: Some(format!(
            "`{file}` has it; commit the file if that is not done yet"
        )),
    }
}

/// The pinned-lessons file (repository-relative) the loop of `row`'s run names for its task:
/// the run's loop file, compiled as it is now.
fn lessons_file(
    cli: &Cli,
    printer: &Printer,
    root: &Path,
    row: &LessonRow,
) -> Result<String, CliError> {
    let file = root.join(&row.file);
    if !file.is_file() {
        return Err(CliError::Usage {
            message: format!(
                "the loop file `{}` of lesson `{}` is gone, so its lessons file is unknown",
                row.file, row.id
            ),
            hint: Some(format!(
                "restore `{}`, or copy the lesson by hand into the file its loop pins lessons to",
                row.file
            )),
        });
    }
    let compiled = super::compile_quiet(cli, &file);
    let Some(program) = compiled.program else {
        printer.diagnostics(&compiled.diags, &compiled.sources);
        return Err(super::failure(&file, &compiled.diags));
    };
    let Some(task) = program.task(&row.task) else {
        return Err(CliError::Usage {
            message: format!(
                "`{}` has no task `{}` any more, so its lessons file is unknown",
                row.file, row.task
            ),
            hint: Some("copy the lesson by hand into the file its loop pins lessons to".into()),
        });
    };
    task.lessons.clone().ok_or_else(|| CliError::Usage {
        message: format!(
            "loop `{}` in `{}` names no lessons file to pin lesson `{}` to",
            row.task, row.file, row.id
        ),
        hint: Some(format!(
            "add lessons \"loops/LESSONS.md\" to loop `{}` in {}, then pin again",
            row.task, row.file
        )),
    })
}

/// A lesson as a markdown bullet: `- ` before its first line, two spaces before the others
/// (blank lines stay blank), ending in a newline.
fn bullet(text: &str) -> String {
    let mut out = String::new();
    for (i, line) in text.trim().lines().enumerate() {
        let line = line.trim_end();
        if i == 0 {
            out.push_str("- ");
        } else if !line.is_empty() {
            out.push_str("  ");
        }
        out.push_str(line);
        out.push('\n');
    }
    if out.is_empty() {
        out.push_str("-\n");
    }
    out
}

/// Appends `bullet` to the file at `path`, made (with its directory) when missing; what is there
/// is never rewritten, but a last line without its newline gets one first. Synced before it
/// returns, so the ledger is marked only once the lesson is on disk.
fn append(path: &Path, bullet: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)?;
    let len = file.metadata()?.len();
    let mut text = String::new();
    if len > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::Start(len - 1))?;
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            text.push('\n');
        }
    }
    text.push_str(bullet);
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(text: &str) -> LessonRow {
        LessonRow {
            id: 12,
            run: "20261206T100102-abcd".into(),
            file: "loops/t.kdl".into(),
            task: "t".into(),
            attempt: 2,
            author: "maker".into(),
            scope: vec!["src/**".into()],
            text: text.into(),
            // 2026-12-06T10:01:02Z
            created_at: 1_796_551_262_000,
            forgotten_at: None,
            pinned_to: None,
        }
    }

    #[test]
    fn a_bullet_indents_continuation_lines_and_keeps_blank_ones_blank() {
        assert_eq!(bullet("Run make first."), "- Run make first.\n");
        assert_eq!(
            bullet("  The tests need bash:\n sh is dash here.  \n\nSee README.\n\n"),
            "- The tests need bash:\n   sh is dash here.\n\n  See README.\n"
        );
        assert_eq!(bullet("  \n"), "-\n");
    }

    #[test]
    fn append_makes_the_file_and_its_directory_and_never_rewrites_what_is_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("loops/LESSONS.md");
        append(&path, "- one\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "- one\n");
        append(&path, "- two\n  more\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "- one\n- two\n  more\n"
        );
        // A last line without its newline ends before the bullet starts.
        std::fs::write(&path, "# Lessons\nkeep this").unwrap();
        append(&path, "- three\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "# Lessons\nkeep this\n- three\n"
        );
    }

    #[test]
    fn an_entry_heads_the_indented_text_and_marks_a_forgotten_or_pinned_lesson() {
        let mut l = row("Lesson one: the tests need bash.\nsh is dash.");
        assert_eq!(
            entry(&l),
            "#12 2026-12-06 10:01 loops/t.kdl · t · attempt 2 (maker)\n    \
             Lesson one: the tests need bash.\n    sh is dash.\n"
        );
        l.forgotten_at = Some(1);
        assert!(
            entry(&l).starts_with(
                "#12 2026-12-06 10:01 loops/t.kdl · t · attempt 2 (maker) · forgotten\n"
            )
        );
        l.forgotten_at = None;
        l.pinned_to = Some("loops/LESSONS.md".into());
        assert!(entry(&l).contains("(maker) · pinned to loops/LESSONS.md\n"));
    }

    #[test]
    fn a_lesson_id_is_a_positive_number_with_or_without_its_hash() {
        assert_eq!(lesson_id("12"), Ok(12));
        assert_eq!(lesson_id("#12"), Ok(12));
        for bad in ["0", "-3", "x", "#", ""] {
            assert!(
                lesson_id(bad).is_err_and(|e| e.contains("is not a lesson's number")),
                "{bad}"
            );
        }
    }
}
