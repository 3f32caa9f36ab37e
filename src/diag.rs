//! Compile diagnostics in, rendered miette reports out: one span, one code, one label, one help each.

use std::fmt;
use std::sync::Arc;

use miette::{
    Diagnostic as MietteDiagnostic, GraphicalReportHandler, GraphicalTheme, LabeledSpan,
    NamedSource, Severity,
};

use crate::source::{Sources, Span};

/// One problem found while compiling a loop definition.
#[derive(Debug, Clone)]
pub struct Diagnostic {
    pub severity: Severity,
    /// A stable code such as `mvk::unknown-property`; tests and docs refer to it.
    pub code: &'static str,
    pub message: String,
    pub span: Option<Span>,
    pub label: String,
    pub help: Option<String>,
    /// Further spans that explain the problem (the first definition of a duplicate, a cycle's edges).
    pub related: Vec<(Span, String)>,
}

impl Diagnostic {
    pub fn error(code: &'static str, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            code,
            message: message.into(),
            span: None,
            label: String::from("here"),
            help: None,
            related: Vec::new(),
        }
    }

    pub fn warning(code: &'static str, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, message)
        }
    }

    #[must_use]
    pub fn at(mut self, span: Span, label: impl Into<String>) -> Diagnostic {
        self.span = Some(span);
        self.label = label.into();
        self
    }

    #[must_use]
    pub fn help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    #[must_use]
    pub fn also(mut self, span: Span, label: impl Into<String>) -> Diagnostic {
        self.related.push((span, label.into()));
        self
    }

    pub fn is_error(&self) -> bool {
        matches!(self.severity, Severity::Error)
    }
}

/// Diagnostics collected over a whole compilation, so that all of them are reported together.
#[derive(Debug, Clone, Default)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    pub fn push(&mut self, d: Diagnostic) {
        self.items.push(d);
    }

    pub fn extend(&mut self, ds: impl IntoIterator<Item = Diagnostic>) {
        self.items.extend(ds);
    }

    pub fn has_errors(&self) -> bool {
        self.items.iter().any(Diagnostic::is_error)
    }

    pub fn error_count(&self) -> usize {
        self.items.iter().filter(|d| d.is_error()).count()
    }

    pub fn warning_count(&self) -> usize {
        self.items.len() - self.error_count()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.items.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn into_vec(self) -> Vec<Diagnostic> {
        self.items
    }
}

/// A diagnostic bound to its file's text, ready for miette to render.
pub struct Located<'a> {
    diag: &'a Diagnostic,
    source: Option<NamedSource<Arc<String>>>,
}

impl<'a> Located<'a> {
    pub fn new(diag: &'a Diagnostic, sources: &Sources) -> Located<'a> {
        let source = diag.span.map(|s| sources.get(s.file).named_source());
        Located { diag, source }
    }
}

impl fmt::Debug for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.diag, f)
    }
}

impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.diag.message)
    }
}

impl std::error::Error for Located<'_> {}

impl MietteDiagnostic for Located<'_> {
    fn code<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        Some(Box::new(self.diag.code))
    }

    fn severity(&self) -> Option<Severity> {
        Some(self.diag.severity)
    }

    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        self.diag
            .help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.source.as_ref().map(|s| s as &dyn miette::SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let span = self.diag.span?;
        let primary =
            LabeledSpan::new_primary_with_span(Some(self.diag.label.clone()), span.source_span());
        // Related spans in the same file are drawn beside the primary one; others are named in
        // the message text by the code that built the diagnostic.
        let others = self
            .diag
            .related
            .iter()
            .filter(move |(s, _)| s.file == span.file)
            .map(|(s, l)| LabeledSpan::new_with_span(Some(l.clone()), s.source_span()));
        Some(Box::new(std::iter::once(primary).chain(others)))
    }
}

/// Renders diagnostics as text: colour only when asked, at a fixed width when asked.
pub struct Renderer {
    handler: GraphicalReportHandler,
}

impl Renderer {
    /// The plain, fixed-width rendering used by snapshot tests and non-terminal output.
    pub fn plain(width: usize) -> Renderer {
        Renderer {
            handler: GraphicalReportHandler::new_themed(GraphicalTheme::unicode_nocolor())
                .with_width(width)
                .with_links(false),
        }
    }

    pub fn fancy(width: usize) -> Renderer {
        Renderer {
            handler: GraphicalReportHandler::new_themed(GraphicalTheme::unicode())
                .with_width(width)
                .with_links(false),
        }
    }

    pub fn render(&self, diag: &Diagnostic, sources: &Sources) -> String {
        let located = Located::new(diag, sources);
        let mut out = String::new();
        if self.handler.render_report(&mut out, &located).is_err() {
            // Rendering into a String cannot fail for I/O reasons; fall back to the bare message.
            out = format!("{}: {}\n", diag.code, diag.message);
        }
        // Related spans in other files (an imported definition, the first of a duplicate) get one
        // line each, with their file and position, so nothing is left unsaid.
        for (span, label) in &diag.related {
            if diag.span.is_some_and(|s| s.file == span.file) {
                continue;
            }
            let (line, col) = sources.line_col(*span);
            out.push_str(&format!(
                "  note: {label} at {}:{line}:{col}\n",
                sources.get(span.file).name
            ));
        }
        out
    }

    pub fn render_all(&self, diags: &Diagnostics, sources: &Sources) -> String {
        let mut out = String::new();
        for d in diags.iter() {
            out.push_str(&self.render(d, sources));
            out.push('\n');
        }
        out
    }
}

/// The closest of `candidates` to `name`, if it is close enough to be a likely typo.
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(name, c), c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// A help line listing what may be written instead, with a "did you mean" first when one is close.
pub fn suggest(what: &str, name: &str, candidates: &[&str]) -> String {
    let list = candidates
        .iter()
        .map(|c| format!("`{c}`"))
        .collect::<Vec<_>>()
        .join(", ");
    match did_you_mean(name, candidates.iter().copied()) {
        Some(best) => format!("did you mean `{best}`? {what}: {list}"),
        None if candidates.is_empty() => format!("no {what} are defined here"),
        None => format!("{what}: {list}"),
    }
}
