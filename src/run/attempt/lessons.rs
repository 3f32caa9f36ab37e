//! Lessons, in: the file an agent wrote them to (`$MVK_LESSONS_FILE`, outside its worktree, so a
//! lesson is never part of a change), the ledger's lessons and the loop's pinned lessons file;
//! out: the lessons recorded with their run, task, attempt and author, and those a later prompt
//! shows (see [`crate::ledger::scopes_overlap`] for which are related).

use std::path::{Path, PathBuf};

use super::AttemptSpec;
use crate::ir::Task;
use crate::ledger::{LessonRow, LessonSource};
use crate::prompt::Lesson;
use crate::run::error::RunError;
use crate::run::event::Event;
use crate::run::host::Host;

/// The variable naming the file an agent may write lessons to.
pub(crate) const LESSONS_VAR: &str = "MVK_LESSONS_FILE";
/// Read of a lessons file, at most: lessons are short notes, not logs.
const MAX_FILE_BYTES: u64 = 64 * 1024;
/// Lessons kept from one agent call, at most.
const MAX_PER_CALL: usize = 10;
/// A lesson longer than this is kept cut.
const MAX_LESSON_CHARS: usize = 1200;
/// Lessons a prompt considers (the budget's lesson share cuts them further).
const CANDIDATES: usize = 50;
/// Read of a pinned lessons file, at most.
const MAX_PINNED_BYTES: usize = 32 * 1024;

/// The lessons file [`prepare`] makes in `dir`.
pub(crate) fn file_in(dir: &Path) -> PathBuf {
    dir.join("lessons").join("LESSONS.md")
}

/// Makes an empty lessons file `dir/lessons/LESSONS.md` (its directory is what a sandbox lets
/// the agent write) unless one is there (a rate-limited try's stays); its path.
pub(crate) fn prepare(dir: &Path) -> Result<PathBuf, RunError> {
    let file = file_in(dir);
    let at = dir.join("lessons");
    let io = |source| RunError::Io {
        action: "make the lessons file",
        path: file.clone(),
        source,
    };
    std::fs::create_dir_all(&at).map_err(io)?;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&file)
        .map_err(io)?;
    Ok(file)
}

/// The lessons in `text`: one per paragraph (blank lines between), trimmed, at most
/// [`MAX_PER_CALL`], each cut to [`MAX_LESSON_CHARS`].
pub(crate) fn parse(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    let flush = |current: &mut Vec<&str>, out: &mut Vec<String>| {
        let joined = current.join("\n");
        let t = joined.trim();
        if !t.is_empty() && out.len() < MAX_PER_CALL {
            let cut = if t.chars().count() > MAX_LESSON_CHARS {
                format!("{}…", t.chars().take(MAX_LESSON_CHARS).collect::<String>())
            } else {
                t.to_string()
            };
            out.push(cut);
        }
        current.clear();
    };
    for line in text.lines() {
        if line.trim().is_empty() {
            flush(&mut current, &mut out);
        } else {
            current.push(line.trim_end());
        }
    }
    flush(&mut current, &mut out);
    out
}

/// Records what the agent wrote to `file` (as `author`) in the ledger, and says so in an event.
/// A file the agent replaced by something other than a regular file is not read.
pub(crate) fn collect(
    host: &impl Host,
    spec: &AttemptSpec<'_>,
    author: &str,
    file: &Path,
) -> Result<(), RunError> {
    let Some(text) = read_regular(file, MAX_FILE_BYTES) else {
        return Ok(());
    };
    let texts = parse(&text);
    if texts.is_empty() {
        return Ok(());
    }
    let task = spec.task;
    let ids = host.ledger().record_lessons(
        &LessonSource {
            run: host.run_id(),
            task: &task.name,
            attempt: spec.number,
            author,
            scope: &task.scope,
        },
        &texts,
    )?;
    if !ids.is_empty() {
        host.emit(
            Some(&task.name),
            Some(spec.number),
            Event::LessonsLearned {
                author: author.to_string(),
                ids,
            },
        )?;
    }
    Ok(())
}

/// The lessons the prompt of an attempt at `task` may show, newest first.
pub(crate) fn for_prompt(host: &impl Host, task: &Task) -> Result<Vec<Lesson>, RunError> {
    let rows = host
        .ledger()
        .related_lessons(host.run_id(), &task.name, &task.scope, CANDIDATES)?;
    Ok(rows.iter().map(lesson).collect())
}

fn lesson(r: &LessonRow) -> Lesson {
    Lesson {
        id: r.id,
        // Indented under its bullet: a line of an agent's note cannot open a section of the
        // prompt (`## Rules …`) that reads as mvk's.
        text: r.text.replace('\n', "\n  "),
        source: format!(
            "{}, task `{}`, attempt {}, {}",
            r.file, r.task, r.attempt, r.author
        ),
    }
}

/// The text of the loop's pinned lessons file as commit `base` has it (the attempt's base),
/// when the loop names one and it is a regular file there.
pub(crate) fn pinned(task: &Task, repo: &git2::Repository, base: git2::Oid) -> Option<String> {
    let path = task.lessons.as_deref()?;
    let tree = repo.find_commit(base).and_then(|c| c.tree()).ok()?;
    let entry = tree.get_path(Path::new(path)).ok()?;
    if !matches!(entry.filemode(), 0o100644 | 0o100755) {
        return None;
    }
    let blob = repo.find_blob(entry.id()).ok()?;
    let bytes = &blob.content()[..blob.content().len().min(MAX_PINNED_BYTES)];
    let text = String::from_utf8_lossy(bytes);
    let t = text.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// `path`'s text, when it is a regular file, read up to `max` bytes through a descriptor that
/// never follows a link (an agent may have put one there, even after a check); invalid UTF-8 is
/// replaced.
fn read_regular(path: &Path, max: u64) -> Option<String> {
    let bytes = crate::run::exec::untrusted::read(path, max).ok()??;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lesson_is_a_paragraph_and_an_agent_writes_at_most_ten_of_bounded_length() {
        let text = "\n  The tests need bash.\nNot sh.  \n\n\n- run make first\n\n   \n";
        assert_eq!(
            parse(text),
            vec!["The tests need bash.\nNot sh.", "- run make first"]
        );
        let many: String = (0..30).map(|i| format!("lesson {i}\n\n")).collect();
        assert_eq!(parse(&many).len(), MAX_PER_CALL);
        let long = "x".repeat(5000);
        let cut = &parse(&long)[0];
        assert_eq!(cut.chars().count(), MAX_LESSON_CHARS + 1);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn a_lessons_file_replaced_by_a_link_is_not_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = prepare(dir.path()).expect("prepare");
        std::fs::write(&file, "kept\n").expect("write");
        assert_eq!(read_regular(&file, 100).as_deref(), Some("kept\n"));
        std::fs::remove_file(&file).expect("rm");
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc/hostname", &file).expect("link");
            assert_eq!(read_regular(&file, 100), None);
        }
        // Preparing again keeps what a try wrote.
        let other = tempfile::tempdir().expect("tempdir");
        let f = prepare(other.path()).expect("prepare");
        std::fs::write(&f, "a\n").expect("write");
        assert_eq!(prepare(other.path()).expect("again"), f);
        assert_eq!(std::fs::read_to_string(&f).expect("read"), "a\n");
    }
}
