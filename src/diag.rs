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
    pub(crate) fn error(code: &'static str, message: impl Into<String>) -> Diagnostic {
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

    pub(crate) fn warning(code: &'static str, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, message)
        }
    }

    #[must_use]
    pub(crate) fn at(mut self, span: Span, label: impl Into<String>) -> Diagnostic {
        self.span = Some(span);
        self.label = label.into();
        self
    }

    #[must_use]
    pub(crate) fn help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    #[must_use]
    pub(crate) fn also(mut self, span: Span, label: impl Into<String>) -> Diagnostic {
        self.related.push((span, label.into()));
        self
    }

    pub(crate) fn is_error(&self) -> bool {
        matches!(self.severity, Severity::Error)
    }
}

/// Diagnostics collected over a whole compilation, so that all of them are reported together.
#[derive(Debug, Clone, Default)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
    /// How many of `items` are errors, kept as they are pushed: the compile asks once per task,
    /// and counting each time made a flow of many warned tasks quadratic.
    errors: usize,
}

impl Diagnostics {
    pub(crate) fn push(&mut self, d: Diagnostic) {
        self.errors += usize::from(d.is_error());
        self.items.push(d);
    }

    pub fn has_errors(&self) -> bool {
        self.errors > 0
    }

    /// Moves `other`'s diagnostics after these.
    pub(crate) fn append(&mut self, other: Diagnostics) {
        for d in other.items {
            self.push(d);
        }
    }

    /// How many diagnostics there are.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Puts each diagnostic of `late` where it would have been pushed when there were `at`
    /// of these (after the first `at`, and after those of `late` with the same `at` before
    /// it); `late` is in the order its diagnostics were asked for, so its `at`s never fall.
    pub(crate) fn insert_at(&mut self, late: Vec<(usize, Diagnostic)>) {
        if late.is_empty() {
            return;
        }
        let early = std::mem::take(&mut self.items);
        let mut items = Vec::with_capacity(early.len() + late.len());
        let mut late = late.into_iter().peekable();
        for (i, d) in early.into_iter().enumerate() {
            while let Some((_, l)) = late.next_if(|(at, _)| *at <= i) {
                self.errors += usize::from(l.is_error());
                items.push(l);
            }
            items.push(d);
        }
        for (_, l) in late {
            self.errors += usize::from(l.is_error());
            items.push(l);
        }
        self.items = items;
    }

    pub(crate) fn error_count(&self) -> usize {
        self.errors
    }

    pub(crate) fn warning_count(&self) -> usize {
        self.items.len() - self.error_count()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.items.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// A diagnostic bound to its file's text, ready for miette to render.
pub(crate) struct Located<'a> {
    diag: &'a Diagnostic,
    source: Option<NamedSource<Arc<String>>>,
    /// The related spans drawn beside the primary one: in its file, on lines short enough.
    drawn: Vec<&'a (Span, String)>,
}

impl<'a> Located<'a> {
    /// The diagnostic with its file's text, unless a line it would quote is too long to show.
    pub(crate) fn new(diag: &'a Diagnostic, sources: &Sources) -> Located<'a> {
        let quoted = diag.span.filter(|s| quotable(sources, *s));
        let source = quoted.map(|s| sources.get(s.file).named_source());
        let drawn = diag
            .related
            .iter()
            .filter(|(s, _)| quoted.is_some_and(|q| q.file == s.file) && quotable(sources, *s))
            .collect();
        Located {
            diag,
            source,
            drawn,
        }
    }
}

/// Lines longer than this are not quoted: miette pads to a column with a format width, which
/// panics past 65,535, and a quoted line of thousands of characters helps nobody.
const LONGEST_QUOTED_LINE: usize = 4096;

/// Whether every line miette would show around `span` (its own, and one of context on each
/// side) is short enough to quote.
fn quotable(sources: &Sources, span: Span) -> bool {
    let text = sources.get(span.file).text.as_str();
    let start = span.offset.min(text.len());
    let end = span.offset.saturating_add(span.len).min(text.len());
    let before = text.get(..start).unwrap_or("");
    let after = text.get(end..).unwrap_or("");
    // Back to the start of the line before, on to the end of the line after.
    let from = before.rmatch_indices('\n').nth(1).map_or(0, |(i, _)| i + 1);
    let to = after
        .match_indices('\n')
        .nth(1)
        .map_or(text.len(), |(i, _)| end + i);
    text.get(from..to)
        .is_some_and(|region| region.split('\n').all(|l| l.len() <= LONGEST_QUOTED_LINE))
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
        let span = self.diag.span.filter(|_| self.source.is_some())?;
        let primary =
            LabeledSpan::new_primary_with_span(Some(self.diag.label.clone()), span.source_span());
        // Related spans in the same file are drawn beside the primary one; others are named in
        // the message text by the code that built the diagnostic.
        let others = self
            .drawn
            .iter()
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

    pub(crate) fn fancy(width: usize) -> Renderer {
        Renderer {
            handler: GraphicalReportHandler::new_themed(GraphicalTheme::unicode())
                .with_width(width)
                .with_links(false),
        }
    }

    pub(crate) fn render(&self, diag: &Diagnostic, sources: &Sources) -> String {
        let located = Located::new(diag, sources);
        let mut out = String::new();
        if self.handler.render_report(&mut out, &located).is_err() {
            // Rendering into a String cannot fail for I/O reasons; fall back to the bare message.
            out = format!("{}: {}\n", diag.code, diag.message);
        }
        // A span whose lines are too long to quote is named by its position.
        if let Some(span) = diag.span.filter(|_| located.source.is_none()) {
            let (line, col) = sources.line_col(span);
            out.push_str(&format!(
                "  at {}:{line}:{col} ({}; the line is too long to show)\n",
                sources.get(span.file).name,
                diag.label
            ));
        }
        // Related spans not drawn (in other files: an imported definition, the first of a
        // duplicate; or on lines too long) get one line each, with their file and position, so
        // nothing is left unsaid.
        for related in &diag.related {
            if located.drawn.iter().any(|d| std::ptr::eq(*d, related)) {
                continue;
            }
            let (span, label) = related;
            let (line, col) = sources.line_col(*span);
            out.push_str(&format!(
                "  note: {label} at {}:{line}:{col}\n",
                sources.get(span.file).name
            ));
        }
        out
    }

    pub fn render_all(&self, diags: &Diagnostics, sources: &Sources) -> String {
        self.render_where(diags, sources, |_| true)
    }

    /// The first [`SHOWN`] diagnostics `keep` selects, then one line counting the rest: each
    /// rendering reads its file from the start to find the lines it quotes, so thousands of
    /// them (a file of stray characters is one syntax error per byte) took minutes.
    pub(crate) fn render_where(
        &self,
        diags: &Diagnostics,
        sources: &Sources,
        keep: impl Fn(&Diagnostic) -> bool,
    ) -> String {
        let mut out = String::new();
        let (mut errors, mut warnings) = (0usize, 0usize);
        for (i, d) in diags.iter().filter(|d| keep(d)).enumerate() {
            if i < SHOWN {
                out.push_str(&self.render(d, sources));
                out.push('\n');
            } else if d.is_error() {
                errors += 1;
            } else {
                warnings += 1;
            }
        }
        if errors + warnings > 0 {
            out.push_str(&format!(
                "… and {} more not shown ({errors} error{}, {warnings} warning{}): mend these and check again\n",
                errors + warnings,
                if errors == 1 { "" } else { "s" },
                if warnings == 1 { "" } else { "s" },
            ));
        }
        out
    }
}

/// How many diagnostics are rendered at most; the rest are counted.
pub const SHOWN: usize = 50;

/// The closest of `candidates` to `name`, if it is close enough to be a likely typo.
pub(crate) fn did_you_mean<'a>(
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
pub(crate) fn suggest(what: &str, name: &str, candidates: &[&str]) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{Origin, SourceFile};

    /// Late diagnostics go where they were asked for: before those pushed after that moment,
    /// after late ones asked for at the same moment before them; errors among them counted.
    #[test]
    fn late_diagnostics_go_where_they_were_asked_for() {
        let mut diags = Diagnostics::default();
        for i in 0..3 {
            diags.push(Diagnostic::warning("mvk::w", format!("early {i}")));
        }
        diags.insert_at(vec![
            (0, Diagnostic::warning("mvk::w", "late at 0")),
            (2, Diagnostic::error("mvk::e", "late at 2, first")),
            (2, Diagnostic::warning("mvk::w", "late at 2, second")),
            (3, Diagnostic::warning("mvk::w", "late at the end")),
        ]);
        let order: Vec<&str> = diags.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(
            order,
            [
                "late at 0",
                "early 0",
                "early 1",
                "late at 2, first",
                "late at 2, second",
                "early 2",
                "late at the end"
            ]
        );
        assert_eq!((diags.error_count(), diags.warning_count()), (1, 6));
    }

    /// The count of errors is kept as diagnostics are pushed or appended, not recounted.
    #[test]
    fn errors_are_counted_among_many_warnings() {
        let mut diags = Diagnostics::default();
        let mut more = Diagnostics::default();
        for i in 0..10_000 {
            diags.push(Diagnostic::warning("mvk::w", format!("w{i}")));
        }
        assert!(!diags.has_errors());
        more.push(Diagnostic::error("mvk::e", "e"));
        more.push(Diagnostic::warning("mvk::w", "w"));
        diags.append(more);
        diags.push(Diagnostic::error("mvk::e", "e"));
        assert!(diags.has_errors());
        assert_eq!((diags.error_count(), diags.warning_count()), (2, 10_001));
    }

    #[test]
    fn past_the_first_fifty_diagnostics_are_counted_not_rendered() {
        let mut sources = Sources::default();
        let file = sources.add(SourceFile {
            origin: Origin::Disk("x.kdl".into()),
            name: "x.kdl".into(),
            text: Arc::new("x\n".into()),
        });
        let mut diags = Diagnostics::default();
        for i in 0..SHOWN + 3 {
            diags.push(Diagnostic::error("mvk::test", format!("problem {i}")).at(
                Span {
                    file,
                    offset: 0,
                    len: 1,
                },
                "here",
            ));
        }
        diags.push(Diagnostic::warning("mvk::test", "a warning"));
        let out = Renderer::plain(80).render_all(&diags, &sources);
        assert_eq!(out.matches("mvk::test").count(), SHOWN, "{out}");
        assert!(out.contains(&format!("problem {}", SHOWN - 1)), "{out}");
        assert!(!out.contains(&format!("problem {SHOWN}")), "{out}");
        assert!(
            out.ends_with(
                "… and 4 more not shown (3 errors, 1 warning): mend these and check again\n"
            ),
            "{out}"
        );
        let errors_only = Renderer::plain(80).render_where(&diags, &sources, |d| d.is_error());
        assert!(
            errors_only.contains("(3 errors, 0 warnings)"),
            "{errors_only}"
        );
    }

    /// Found with review r8d's inputs: miette pads to a column with a format width, which
    /// panics past 65,535, so a diagnostic on a long line stopped mvk with a panic.
    #[test]
    fn a_diagnostic_on_a_very_long_line_is_named_by_its_position() {
        let mut sources = Sources::default();
        let text = format!("a\n{}x\nb\n", " ".repeat(100_000));
        let file = sources.add(SourceFile {
            origin: Origin::Disk("x.kdl".into()),
            name: "x.kdl".into(),
            text: Arc::new(text),
        });
        let at = |offset| Span {
            file,
            offset,
            len: 1,
        };
        let mut diags = Diagnostics::default();
        diags.push(
            Diagnostic::error("mvk::test", "far out")
                .at(at(100_002), "the x")
                .also(at(0), "the a"),
        );
        // The line after a long one is context for miette too.
        diags.push(Diagnostic::error("mvk::test", "next door").at(at(100_004), "the b"));
        let out = Renderer::plain(80).render_all(&diags, &sources);
        assert!(out.contains("far out"), "{out}");
        assert!(
            out.contains("at x.kdl:2:100001 (the x; the line is too long to show)"),
            "{out}"
        );
        assert!(out.contains("note: the a at x.kdl:1:1"), "{out}");
        assert!(out.contains("at x.kdl:3:1 (the b;"), "{out}");
    }
}
