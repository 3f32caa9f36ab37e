//! A project directory in; the starter files of `mvk init` out: a loop whose gate runs the
//! project's tests (found from its manifest), an agent definition to edit, and the maker's
//! prompt template. Nothing here writes to the disk.

use std::path::Path;

/// The kind of project a directory holds, from the first manifest found in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProjectKind {
    /// `Cargo.toml`: `cargo test`, from `std/gates/rust.kdl`.
    Rust,
    /// `pyproject.toml`: `python3 -m pytest`, from `std/gates/python.kdl`.
    Python,
    /// `package.json`: `npm run test`, from `std/gates/javascript.kdl`.
    Node,
    /// `go.mod`: `go test -v ./...`, from `std/gates/go.kdl`.
    Go,
    /// None of them: a command gate to fill in.
    Generic,
}

impl ProjectKind {
    /// The manifest each kind is recognised by, in the order they are looked for.
    const MANIFESTS: [(&'static str, ProjectKind); 4] = [
        ("Cargo.toml", ProjectKind::Rust),
        ("pyproject.toml", ProjectKind::Python),
        ("package.json", ProjectKind::Node),
        ("go.mod", ProjectKind::Go),
    ];

    /// The kind of the project in `dir`.
    pub(crate) fn detect(dir: &Path) -> ProjectKind {
        Self::MANIFESTS
            .iter()
            .find(|(file, _)| dir.join(file).is_file())
            .map_or(ProjectKind::Generic, |(_, kind)| *kind)
    }

    /// A name for messages: `rust (Cargo.toml)`.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            ProjectKind::Rust => "rust (`Cargo.toml`)",
            ProjectKind::Python => "python (`pyproject.toml`)",
            ProjectKind::Node => "node (`package.json`)",
            ProjectKind::Go => "go (`go.mod`)",
            ProjectKind::Generic => "no known manifest",
        }
    }

    /// The imports and the gate of the starter loop.
    fn gate(self) -> (&'static str, &'static str) {
        match self {
            ProjectKind::Rust => (
                "import \"std/gates/rust.kdl\"\n",
                "    // `cargo test`; its `test result:` lines are the evidence that tests ran.\n    \
                 gate tests use=cargo-test\n",
            ),
            ProjectKind::Python => (
                "import \"std/gates/python.kdl\"\n",
                "    // `python3 -m pytest`; its closing `N passed` line is the evidence that tests ran.\n    \
                 gate tests use=pytest\n",
            ),
            ProjectKind::Node => (
                "import \"std/gates/javascript.kdl\"\n",
                "    // `npm run test`; the summary of the runner it calls (node --test, vitest or jest)\n    \
                 // is the evidence that tests ran.\n    \
                 gate tests use=npm-test\n",
            ),
            ProjectKind::Go => (
                "import \"std/gates/go.kdl\"\n",
                "    // `go test -v ./...`; its line per test is the evidence that tests ran.\n    \
                 gate tests use=go-test\n",
            ),
            ProjectKind::Generic => (
                "",
                "    // Replace with the command that checks your project. `evidence=none` judges it\n    \
                 // by its exit code alone; if it runs tests, name the runner (`evidence=pytest`,\n    \
                 // …) or print the `MVK_EVIDENCE=` line, so that a pass proves tests ran.\n    \
                 gate check evidence=none timeout=\"20m\" {\n        sh \"make test\"\n    }\n",
            ),
        }
    }

    /// Where a project of this kind keeps its tests, as seal patterns.
    fn test_patterns(self) -> &'static [&'static str] {
        match self {
            ProjectKind::Go => &["**/*_test.go"],
            ProjectKind::Node => &[
                "test/**",
                "tests/**",
                "**/__tests__/**",
                "**/*.test.*",
                "**/*.spec.*",
            ],
            ProjectKind::Python => &["tests/**", "**/test_*.py", "**/*_test.py", "**/conftest.py"],
            _ => &["tests/**"],
        }
    }

    /// The starter loop's seal: the test patterns that cover a file of the project (`covers`
    /// says), and the loop files themselves. A seal pattern that matches nothing guards nothing
    /// (and `mvk apply` stops on it): when none matches, `tests/**` is kept, marked as to appear.
    fn seal(self, covers: &dyn Fn(&str) -> bool) -> String {
        let mut kept: Vec<&str> = self
            .test_patterns()
            .iter()
            .copied()
            .filter(|p| covers(p))
            .collect();
        let none = kept.is_empty();
        if none {
            kept.push(self.test_patterns()[0]);
        }
        kept.push("loops/**");
        let list: Vec<String> = kept.iter().map(|p| format!("\"{p}\"")).collect();
        format!("{}{}", list.join(" "), if none { " new=#true" } else { "" })
    }
}

/// The starter loop's file, under `loops/`.
pub(crate) const LOOP_FILE: &str = "loops/fix-tests.kdl";
/// The agent definitions, under `loops/`.
pub(crate) const AGENTS_FILE: &str = "loops/agents.kdl";
/// The maker's prompt template, under `loops/`.
pub(crate) const PROMPT_FILE: &str = "loops/prompts/maker.hbs";

/// The agent definition the user edits: Claude Code, as `std/agents.kdl` has it, written out.
const AGENTS: &str = r#"// The agents your loops use. Edit the command, the model and the timeout to suit: mvk runs
// the command in the attempt's own worktree; `{{prompt}}` is the prompt's text and
// `{{prompt_file}}` its file. `adapter=` says how to read cost, tokens and rate limits from its
// output (claude, codex, aider, goose, gemini). Ready-made ones: `import "std/agents.kdl"`.

agent coder adapter=claude timeout="30m" {
    doc "Claude Code in print mode; cost and tokens are read from its JSON stream as it goes"
    // As root (a CI container), Claude Code takes --dangerously-skip-permissions only with this.
    env IS_SANDBOX="1"
    // stream-json (with --verbose) reports usage as it goes: mvk stops it when the budget runs
    // out mid-attempt; --max-budget-usd holds it to what is left of the dollars itself.
    run "claude" "-p" "{{prompt}}" "--model" "sonnet" "--output-format" "stream-json" "--verbose" "--max-budget-usd" "{{usd_left}}" "--dangerously-skip-permissions"
}
"#;

/// The files `mvk init` writes for a project of `kind` whose tests every seal pattern finds:
/// (path relative to the directory, text).
pub fn files(kind: ProjectKind) -> Vec<(&'static str, String)> {
    files_for(kind, &|_| true)
}

/// The files `mvk init` writes for a project of `kind` in which `covers` says whether a seal
/// pattern covers a file.
pub fn files_for(kind: ProjectKind, covers: &dyn Fn(&str) -> bool) -> Vec<(&'static str, String)> {
    let (imports, gate) = kind.gate();
    let seal = kind.seal(covers);
    let loop_text = format!(
        "// A starter loop written by `mvk init`: an agent makes the tests pass without touching\n\
         // them. Commit the loop files (attempts run from committed state), then check it with\n\
         // `mvk check {LOOP_FILE}` and run it with `mvk apply {LOOP_FILE}`.\n\
         {imports}import \"agents.kdl\"\n\
         \n\
         loop fix-tests {{\n    \
         goal \"Make the tests pass. Do not change the tests.\"\n    \
         agent coder\n    \
         prompt \"prompts/maker.hbs\"\n\
         \n    \
         // The oracle: an attempt that touches these is rejected before any gate runs.\n    \
         seal {seal}\n\
         \n\
         {gate}\
         \n    \
         budget iterations=5 usd=5.0 wall=\"1h\" same-failure=2\n\
         }}\n"
    );
    vec![
        (LOOP_FILE, loop_text),
        (AGENTS_FILE, AGENTS.to_string()),
        (
            PROMPT_FILE,
            crate::stdlib::get(crate::stdlib::MAKER_PROMPT)
                .unwrap_or_default()
                .to_string(),
        ),
    ]
}
