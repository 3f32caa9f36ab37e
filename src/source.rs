//! Source files in, stable file ids and located spans out: every diagnostic names its file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use miette::{NamedSource, SourceSpan};

/// Index of a file in a [`Sources`] table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub u32);

/// Where a file came from: the user's disk, the stdlib embedded in the binary, or a commit of a
/// git repository (read from mvk's cache).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Origin {
    Disk(PathBuf),
    Std(String),
    Git(GitFile),
}

/// A file in a git repository at one commit, and the reference that led there.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GitFile {
    pub url: String,
    /// The rev as the import wrote it (`None`: the repository's HEAD); relative imports inside
    /// the repository inherit it.
    pub rev: Option<String>,
    pub commit: git2::Oid,
    /// The file's path from the repository's root, `/`-separated, without `.` or `..`.
    pub path: String,
}

impl GitFile {
    /// How the file is named in diagnostics: `URL@COMMIT:PATH`, the commit shortened.
    pub fn name(&self) -> String {
        let commit = self.commit.to_string();
        format!(
            "{}@{}:{}",
            self.url,
            &commit[..12.min(commit.len())],
            self.path
        )
    }

    /// A file named by `reference` from this one: relative to its directory, same commit.
    pub fn sibling(&self, reference: &str) -> GitFile {
        let dir = self.path.rsplit_once('/').map_or("", |(d, _)| d);
        GitFile {
            path: join_in_repo(dir, reference),
            ..self.clone()
        }
    }
}

/// `reference` read from directory `dir` of a repository: `/`-joined, `.` and `..` removed; a
/// `..` above the root stays, so that reading the file fails and says where it looked.
pub(crate) fn join_in_repo(dir: &str, reference: &str) -> String {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for part in reference.split('/') {
        match part {
            "" | "." => {}
            ".." if parts.last().is_some_and(|p| *p != "..") => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    parts.join("/")
}

/// One loaded file: its name as shown to the user and its text.
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub origin: Origin,
    /// The name printed in diagnostics: a path relative to where mvk was started, `std/...`, or
    /// `URL@COMMIT:PATH` for a file of a git import.
    pub name: String,
    pub text: Arc<String>,
}

impl SourceFile {
    /// The directory that relative references in this file are resolved against.
    pub fn dir(&self) -> Option<&Path> {
        match &self.origin {
            Origin::Disk(path) => path.parent(),
            Origin::Std(_) | Origin::Git(_) => None,
        }
    }

    pub fn named_source(&self) -> NamedSource<Arc<String>> {
        NamedSource::new(&self.name, Arc::clone(&self.text)).with_language("kdl")
    }
}

/// A byte span in one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Span {
    pub file: FileId,
    pub offset: usize,
    pub len: usize,
}

impl Span {
    pub fn new(file: FileId, span: SourceSpan) -> Span {
        Span {
            file,
            offset: span.offset(),
            len: span.len(),
        }
    }

    pub fn source_span(self) -> SourceSpan {
        SourceSpan::new(self.offset.into(), self.len)
    }
}

/// All files one compilation read, in the order they were read.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    files: Vec<SourceFile>,
}

impl Sources {
    pub fn add(&mut self, file: SourceFile) -> FileId {
        let id = FileId(u32::try_from(self.files.len()).unwrap_or(u32::MAX));
        self.files.push(file);
        id
    }

    pub fn get(&self, id: FileId) -> &SourceFile {
        // Ids are only minted by `add`, so an out-of-range id is a programming error.
        &self.files[id.0 as usize]
    }

    pub fn find(&self, origin: &Origin) -> Option<FileId> {
        self.files
            .iter()
            .position(|f| &f.origin == origin)
            .and_then(|i| u32::try_from(i).ok())
            .map(FileId)
    }

    pub fn iter(&self) -> impl Iterator<Item = (FileId, &SourceFile)> {
        self.files
            .iter()
            .enumerate()
            .map(|(i, f)| (FileId(u32::try_from(i).unwrap_or(u32::MAX)), f))
    }

    /// 1-based line and column of a span's start, for one-line reports.
    pub fn line_col(&self, span: Span) -> (usize, usize) {
        let text = &self.get(span.file).text;
        let upto = &text[..span.offset.min(text.len())];
        let line = upto.matches('\n').count() + 1;
        let col = upto
            .rfind('\n')
            .map_or(upto.len(), |nl| upto.len() - nl - 1)
            + 1;
        (line, col)
    }

    /// The text a span covers.
    pub fn snippet(&self, span: Span) -> &str {
        let text = &self.get(span.file).text;
        let end = (span.offset + span.len).min(text.len());
        text.get(span.offset.min(end)..end).unwrap_or("")
    }
}

/// How a path is shown to a user: relative to the working directory when it is below it.
pub(crate) fn display_path(path: &Path) -> String {
    let rel = std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(&cwd).ok().map(Path::to_path_buf));
    let shown = rel
        .unwrap_or_else(|| path.to_path_buf())
        .display()
        .to_string();
    if shown.is_empty() {
        ".".to_string()
    } else {
        shown
    }
}
