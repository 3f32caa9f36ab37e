//! Output lines of one gate run in, an [`Evidence`] judgement (did tests really run, how many
//! passed) and a [`GateVerdict`] out.
//!
//! A gate proves that it executed tests either with an `MVK_EVIDENCE=<json>` line carrying this
//! run's nonce, or through the closing summary of a test runner that mvk knows how to read.
//! Anything else — no line, a stale nonce, malformed JSON, zero tests — is *unknown*, never a pass.
//!
//! Decisions worth knowing:
//! - The evidence line counts only at the start of a line (leading whitespace allowed). Text
//!   before it (a `set -x` trace such as `+ echo MVK_EVIDENCE=...`, a log prefix, a quoted
//!   example) makes it an ordinary line, so echoing a command never counts as running it.
//! - `go test` counts top-level tests only (`--- PASS: TestX`, not the indented
//!   `    --- PASS: TestX/sub`; in `-json`, events whose `Test` has no `/`). A parent fails when
//!   any of its subtests fails, so no failure is lost, and nothing is counted twice.
//! - In `auto` mode every recognised runner's summaries are summed (a gate may run
//!   `cargo test && pytest`); the reported source is the first runner recognised.
//! - ANSI escapes are stripped and a carriage return keeps only the text after it (progress
//!   bars redraw a line that way) before any matching.
//! - Lines longer than [`MAX_LINE_BYTES`] are not matched: no summary is that long, and it keeps
//!   the work per line bounded.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// The key a gate prints before its JSON evidence.
pub(crate) const EVIDENCE_KEY: &str = "MVK_EVIDENCE";
/// The only schema this reader accepts in an evidence line.
pub(crate) const EVIDENCE_SCHEMA: &str = "mvk.evidence.v1";
/// Longer lines are skipped by every matcher (an over-long evidence line is malformed).
pub(crate) const MAX_LINE_BYTES: usize = 64 * 1024;
/// Details quoted from the output into a reason are cut to this many characters.
const MAX_DETAIL_CHARS: usize = 160;

/// A test runner whose own closing summary mvk reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runner {
    CargoTest,
    Nextest,
    Pytest,
    GoTest,
    NodeTest,
    Vitest,
    Jest,
}

impl Runner {
    pub(crate) const ALL: [Runner; 7] = [
        Runner::CargoTest,
        Runner::Nextest,
        Runner::Pytest,
        Runner::GoTest,
        Runner::NodeTest,
        Runner::Vitest,
        Runner::Jest,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Runner::CargoTest => "cargo-test",
            Runner::Nextest => "nextest",
            Runner::Pytest => "pytest",
            Runner::GoTest => "go-test",
            Runner::NodeTest => "node-test",
            Runner::Vitest => "vitest",
            Runner::Jest => "jest",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Runner> {
        Runner::ALL.into_iter().find(|runner| runner.name() == name)
    }

    fn index(self) -> usize {
        match self {
            Runner::CargoTest => 0,
            Runner::Nextest => 1,
            Runner::Pytest => 2,
            Runner::GoTest => 3,
            Runner::NodeTest => 4,
            Runner::Vitest => 5,
            Runner::Jest => 6,
        }
    }
}

impl fmt::Display for Runner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a gate's `evidence=` property asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EvidenceMode {
    /// The nonce line if there is a valid one, else any recognised runner summary.
    Auto,
    /// Judged by exit code alone (a linter, a build).
    None,
    /// Only an `MVK_EVIDENCE` line with this run's nonce counts.
    Nonce,
    /// Only this runner's summary counts.
    Runner(Runner),
}

impl fmt::Display for EvidenceMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvidenceMode::Auto => f.write_str("auto"),
            EvidenceMode::None => f.write_str("none"),
            EvidenceMode::Nonce => f.write_str("nonce"),
            EvidenceMode::Runner(runner) => f.write_str(runner.name()),
        }
    }
}

/// An `evidence=` value that names no mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown evidence mode `{given}`; expected one of {}",
    valid_mode_names()
)]
pub struct UnknownEvidenceMode {
    pub given: String,
}

fn valid_mode_names() -> String {
    let mut names: Vec<String> = ["auto", "none", "nonce"]
        .into_iter()
        .map(|name| format!("`{name}`"))
        .collect();
    names.extend(
        Runner::ALL
            .iter()
            .map(|runner| format!("`{}`", runner.name())),
    );
    names.join(", ")
}

impl FromStr for EvidenceMode {
    type Err = UnknownEvidenceMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(EvidenceMode::Auto),
            "none" => Ok(EvidenceMode::None),
            "nonce" => Ok(EvidenceMode::Nonce),
            other => Runner::from_name(other)
                .map(EvidenceMode::Runner)
                .ok_or_else(|| UnknownEvidenceMode {
                    given: other.to_owned(),
                }),
        }
    }
}

/// Test counts. `executed` is the number of tests that ran (`passed + failed` for runner
/// summaries); `skipped` tests did not run and are not part of `executed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub executed: u64,
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
}

impl Counts {
    // Saturating: a counter fed by untrusted output must never overflow-panic.
    fn add(&mut self, other: Counts) {
        self.executed = self.executed.saturating_add(other.executed);
        self.passed = self.passed.saturating_add(other.passed);
        self.failed = self.failed.saturating_add(other.failed);
        self.skipped = self.skipped.saturating_add(other.skipped);
    }

    /// Counts for tests that ran and passed, failed, or were skipped.
    fn of(passed: u64, failed: u64, skipped: u64) -> Counts {
        Counts {
            executed: passed.saturating_add(failed),
            passed,
            failed,
            skipped,
        }
    }
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} executed, {} passed, {} failed, {} skipped",
            self.executed, self.passed, self.failed, self.skipped
        )
    }
}

/// Where proven counts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    Nonce,
    Runner(Runner),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Nonce => write!(f, "`{EVIDENCE_KEY}` line"),
            Source::Runner(runner) => write!(f, "{} summary", runner.name()),
        }
    }
}

/// What the output of one gate run proves about its tests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Evidence {
    /// The gate is `evidence=none`: its exit code alone decides.
    NotRequired,
    /// Tests ran; `counts.executed` is above zero when produced by [`Scanner::finish`].
    Proven { source: Source, counts: Counts },
    /// Nothing proves that tests ran; `reason` says why in one line.
    Unknown { reason: String },
}

/// Reading 16 random bytes for a nonce failed.
#[derive(Debug, thiserror::Error)]
pub enum NonceError {
    #[error("cannot open `{path}` to make a gate nonce")]
    Open {
        path: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("cannot read 16 random bytes from `{path}` to make a gate nonce")]
    Read {
        path: &'static str,
        #[source]
        source: io::Error,
    },
}

/// A fresh `MVK_NONCE`: 128 random bits from `/dev/urandom` as 32 lowercase hex characters.
pub(crate) fn new_nonce() -> Result<String, NonceError> {
    const PATH: &str = "/dev/urandom";
    let mut file = File::open(PATH).map_err(|source| NonceError::Open { path: PATH, source })?;
    let mut bytes = [0u8; 16];
    file.read_exact(&mut bytes)
        .map_err(|source| NonceError::Read { path: PATH, source })?;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(32);
    for byte in bytes {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    Ok(out)
}

/// Reads a gate's output line by line and keeps only counters and a few short notes, so its
/// memory stays bounded however long the output is.
#[derive(Debug)]
pub(crate) struct Scanner {
    mode: EvidenceMode,
    nonce: String,
    evidence_lines: EvidenceLines,
    runners: RunnerTallies,
}

#[derive(Debug, Default)]
struct EvidenceLines {
    /// The last line with this run's nonce and well-formed counts.
    valid: Option<Counts>,
    stale: u64,
    malformed: u64,
    last_malformed: Option<String>,
    /// `MVK_EVIDENCE` appeared after other text on a line.
    embedded: bool,
}

#[derive(Debug, Default)]
struct RunnerTallies {
    counts: [Counts; 7],
    seen: [bool; 7],
    first_seen: Option<Runner>,
    go: GoState,
    node: Option<NodeBlock>,
}

#[derive(Debug, Default)]
struct GoState {
    /// Top-level per-test result lines or `-json` test events.
    test_results: u64,
    /// `ok`/`FAIL` package lines that imply tests ran (not `[no tests to run]`).
    packages_with_tests: u64,
    /// Any package line or package-level `-json` event.
    package_lines: u64,
    /// `-json` output was seen: its package events alone make counts exact.
    json: bool,
}

/// node's closing block (`# tests 4`, `# pass 3`, ... or `ℹ tests 4`, ...), built up over lines.
#[derive(Debug, Default, Clone, Copy)]
struct NodeBlock {
    pass: Option<u64>,
    fail: u64,
    cancelled: u64,
    skipped: u64,
    todo: u64,
}

impl Scanner {
    pub(crate) fn new(mode: EvidenceMode, nonce: &str) -> Self {
        Scanner {
            mode,
            nonce: nonce.to_owned(),
            evidence_lines: EvidenceLines::default(),
            runners: RunnerTallies::default(),
        }
    }

    /// Feeds one line of output, with or without its line ending.
    pub(crate) fn feed_line(&mut self, line: &str) {
        let wants_nonce = match self.mode {
            EvidenceMode::None => return,
            EvidenceMode::Auto | EvidenceMode::Nonce => true,
            EvidenceMode::Runner(_) => false,
        };
        if line.len() > MAX_LINE_BYTES {
            if wants_nonce && line.trim_start().starts_with(EVIDENCE_KEY) {
                self.evidence_lines
                    .note_malformed(format!("the line is longer than {MAX_LINE_BYTES} bytes"));
            }
            return;
        }
        let line = visible(line);

        if wants_nonce {
            match parse_evidence_line(&line, &self.nonce) {
                EvidenceLine::NotEvidence => {
                    if line.contains(EVIDENCE_KEY) {
                        self.evidence_lines.embedded = true;
                    }
                }
                EvidenceLine::Valid(counts) => {
                    self.evidence_lines.valid = Some(counts);
                    return;
                }
                EvidenceLine::Stale => {
                    self.evidence_lines.stale = self.evidence_lines.stale.saturating_add(1);
                    return;
                }
                EvidenceLine::Malformed(why) => {
                    self.evidence_lines.note_malformed(why);
                    return;
                }
            }
        }
        match self.mode {
            EvidenceMode::Auto => self.runners.feed(&line, Option::None),
            EvidenceMode::Runner(runner) => self.runners.feed(&line, Some(runner)),
            EvidenceMode::None | EvidenceMode::Nonce => {}
        }
    }

    pub(crate) fn finish(mut self) -> Evidence {
        self.runners.flush_node();
        match self.mode {
            EvidenceMode::None => Evidence::NotRequired,
            EvidenceMode::Nonce => match self.evidence_lines.valid {
                Some(counts) => proven(Source::Nonce, counts),
                Option::None => Evidence::Unknown {
                    reason: with_notes(
                        format!("no `{EVIDENCE_KEY}` line with this run's nonce"),
                        self.evidence_lines.notes(),
                    ),
                },
            },
            EvidenceMode::Runner(runner) => {
                let mut notes = Vec::new();
                match self.runners.result(runner, &mut notes) {
                    Some(counts) => proven(Source::Runner(runner), counts),
                    Option::None => Evidence::Unknown {
                        reason: with_notes(
                            format!("no {} summary found in the output", runner.name()),
                            notes,
                        ),
                    },
                }
            }
            EvidenceMode::Auto => {
                if let Some(counts) = self.evidence_lines.valid {
                    return proven(Source::Nonce, counts);
                }
                let mut notes = self.evidence_lines.notes();
                let mut total: Option<Counts> = Option::None;
                let mut uncountable = false;
                for runner in Runner::ALL {
                    if !self.runners.recognised(runner) {
                        continue;
                    }
                    match self.runners.result(runner, &mut notes) {
                        Some(counts) => total.get_or_insert_with(Counts::default).add(counts),
                        Option::None => uncountable = true,
                    }
                }
                match (total, self.runners.first_seen) {
                    // A runner whose tests cannot be counted leaves the evidence partial.
                    (Some(counts), Some(first)) if !uncountable => {
                        proven(Source::Runner(first), counts)
                    }
                    _ => Evidence::Unknown {
                        reason: with_notes(
                            format!(
                                "no evidence: no `{EVIDENCE_KEY}` line with this run's nonce and no \
                                 countable summary from a known runner ({})",
                                Runner::ALL.map(Runner::name).join(", ")
                            ),
                            notes,
                        ),
                    },
                }
            }
        }
    }
}

/// Scans a whole output at once; the same as feeding each line to a [`Scanner`].
pub fn scan_str(mode: EvidenceMode, nonce: &str, output: &str) -> Evidence {
    let mut scanner = Scanner::new(mode, nonce);
    for line in output.lines() {
        scanner.feed_line(line);
    }
    scanner.finish()
}

fn proven(source: Source, counts: Counts) -> Evidence {
    if counts.executed == 0 {
        Evidence::Unknown {
            reason: format!("zero tests executed ({source}: {counts})"),
        }
    } else {
        Evidence::Proven { source, counts }
    }
}

fn with_notes(head: String, notes: Vec<String>) -> String {
    if notes.is_empty() {
        head
    } else {
        format!("{head}; {}", notes.join("; "))
    }
}

impl EvidenceLines {
    fn note_malformed(&mut self, why: String) {
        self.malformed = self.malformed.saturating_add(1);
        self.last_malformed = Some(truncate(&why));
    }

    fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.stale > 0 {
            notes.push(format!(
                "stale nonce: {} `{EVIDENCE_KEY}` {} carried another run's nonce",
                self.stale,
                lines_word(self.stale)
            ));
        }
        if self.malformed > 0 {
            notes.push(format!(
                "{} malformed `{EVIDENCE_KEY}` {} (last: {})",
                self.malformed,
                lines_word(self.malformed),
                self.last_malformed.as_deref().unwrap_or("unreadable")
            ));
        }
        if self.embedded {
            notes.push(format!(
                "`{EVIDENCE_KEY}` appeared after other text on a line, but it counts only at the \
                 start of a line"
            ));
        }
        notes
    }
}

fn lines_word(n: u64) -> &'static str {
    if n == 1 { "line" } else { "lines" }
}

impl RunnerTallies {
    fn feed(&mut self, line: &str, only: Option<Runner>) {
        for runner in Runner::ALL {
            if only.is_some_and(|wanted| wanted != runner) {
                continue;
            }
            // Summary shapes do not overlap, so the first runner that takes a line owns it.
            if self.feed_runner(runner, line) {
                break;
            }
        }
    }

    fn feed_runner(&mut self, runner: Runner, line: &str) -> bool {
        let counts = match runner {
            Runner::CargoTest => parse_cargo_test(line),
            Runner::Nextest => parse_nextest(line),
            Runner::Pytest => parse_pytest(line),
            Runner::Vitest => parse_vitest(line),
            Runner::Jest => parse_jest(line),
            Runner::GoTest => return self.feed_go(line),
            Runner::NodeTest => return self.feed_node(line),
        };
        match counts {
            Some(counts) => {
                self.add(runner, counts);
                true
            }
            Option::None => false,
        }
    }

    fn add(&mut self, runner: Runner, counts: Counts) {
        self.mark_seen(runner);
        if let Some(slot) = self.counts.get_mut(runner.index()) {
            slot.add(counts);
        }
    }

    fn mark_seen(&mut self, runner: Runner) {
        if let Some(seen) = self.seen.get_mut(runner.index()) {
            *seen = true;
        }
        self.first_seen.get_or_insert(runner);
    }

    fn recognised(&self, runner: Runner) -> bool {
        self.seen.get(runner.index()).copied().unwrap_or(false)
    }

    /// The runner's summed counts, or `None` (with a note saying why) when it was not
    /// recognised or its tests cannot be counted.
    fn result(&self, runner: Runner, notes: &mut Vec<String>) -> Option<Counts> {
        if !self.recognised(runner) {
            return Option::None;
        }
        if runner == Runner::GoTest
            && !self.go.json
            && self.go.test_results == 0
            && self.go.packages_with_tests > 0
        {
            notes.push(
                "go test printed package results but no per-test lines, so its tests cannot be \
                 counted; run `go test -v` or `go test -json`"
                    .to_owned(),
            );
            return Option::None;
        }
        self.counts.get(runner.index()).copied()
    }

    fn feed_go(&mut self, line: &str) -> bool {
        if line.starts_with('{') {
            return self.feed_go_json(line);
        }
        let line = line.trim_end();
        // Per-test lines: top-level ones start at column 0; subtests are indented.
        if let Some(rest) = line.strip_prefix("--- ") {
            let Some((status, rest)) = rest.split_once(": ") else {
                return false;
            };
            let Some((name, time)) = rest.rsplit_once(" (") else {
                return false;
            };
            if name.is_empty() || name.contains('/') || !is_duration(time.trim_end_matches(')')) {
                return false;
            }
            let counts = match status {
                "PASS" => Counts::of(1, 0, 0),
                "FAIL" => Counts::of(0, 1, 0),
                "SKIP" => Counts::of(0, 0, 1),
                _ => return false,
            };
            self.go.test_results = self.go.test_results.saturating_add(1);
            self.add(Runner::GoTest, counts);
            return true;
        }
        // Package lines: `ok  \tpkg\t0.01s`, `FAIL\tpkg [build failed]`, `?   \tpkg\t[no test files]`.
        let mut words = line.split_whitespace();
        let (Some(head), Some(_package), Some(third)) = (words.next(), words.next(), words.next())
        else {
            return false;
        };
        let has_tests = match head {
            "ok" if is_duration(third) || third == "(cached)" => {
                !line.contains("[no tests to run]")
            }
            "FAIL" if is_duration(third) || third.starts_with('[') => true,
            "?" if third == "[no" && line.ends_with("[no test files]") => false,
            _ => return false,
        };
        self.go.package_lines = self.go.package_lines.saturating_add(1);
        if has_tests {
            self.go.packages_with_tests = self.go.packages_with_tests.saturating_add(1);
        }
        self.mark_seen(Runner::GoTest);
        true
    }

    fn feed_go_json(&mut self, line: &str) -> bool {
        #[derive(Deserialize)]
        struct GoEvent {
            #[serde(rename = "Action")]
            action: String,
            #[serde(rename = "Package")]
            package: Option<String>,
            #[serde(rename = "Test")]
            test: Option<String>,
        }
        let Ok(event) = serde_json::from_str::<GoEvent>(line) else {
            return false;
        };
        if event.package.is_none() && event.test.is_none() {
            return false;
        }
        self.go.json = true;
        let counts = match event.action.as_str() {
            "pass" => Counts::of(1, 0, 0),
            "fail" => Counts::of(0, 1, 0),
            "skip" => Counts::of(0, 0, 1),
            _ => {
                self.mark_seen(Runner::GoTest);
                return true;
            }
        };
        match event.test {
            Some(test) if !test.contains('/') => {
                self.go.test_results = self.go.test_results.saturating_add(1);
                self.add(Runner::GoTest, counts);
            }
            Some(_subtest) => self.mark_seen(Runner::GoTest),
            Option::None => {
                self.go.package_lines = self.go.package_lines.saturating_add(1);
                self.mark_seen(Runner::GoTest);
            }
        }
        true
    }

    fn feed_node(&mut self, line: &str) -> bool {
        // The closing block starts at column 0; nested TAP output is indented.
        let Some(rest) = line.strip_prefix("# ").or_else(|| line.strip_prefix("ℹ ")) else {
            return false;
        };
        let Some((key, value)) = rest.trim_end().split_once(' ') else {
            return false;
        };
        if key == "duration_ms" {
            return self.node.is_some() && value.parse::<f64>().is_ok();
        }
        let Some(n) = parse_count(value) else {
            return false;
        };
        if key == "tests" {
            self.flush_node();
            self.node = Some(NodeBlock::default());
            return true;
        }
        let Some(block) = self.node.as_mut() else {
            return false;
        };
        match key {
            "pass" => block.pass = Some(n),
            "fail" => block.fail = n,
            "cancelled" => block.cancelled = n,
            "skipped" => block.skipped = n,
            "todo" => block.todo = n,
            "suites" => {}
            _ => return false,
        }
        true
    }

    fn flush_node(&mut self) {
        let Some(block) = self.node.take() else {
            return;
        };
        // A block without `pass` is not node's summary (or was cut off): it proves nothing.
        if let Some(pass) = block.pass {
            let failed = block.fail.saturating_add(block.cancelled);
            let skipped = block.skipped.saturating_add(block.todo);
            self.add(Runner::NodeTest, Counts::of(pass, failed, skipped));
        }
    }
}

/// The most failing-test names [`FailedTests`] keeps, and how many distinct ones it counts.
pub(crate) const MAX_FAILED_NAMES: usize = 20;
const MAX_FAILED_COUNTED: usize = 10_000;

/// The names of the tests a gate's output says failed, as each known runner prints them:
/// pytest `FAILED tests/x.py::test_y - …` (and `-v`'s `tests/x.py::test_y FAILED`), libtest
/// `test foo ... FAILED`, nextest `FAIL [ 0.1s] crate foo`, go `--- FAIL: TestX (0.00s)` (and
/// `-json`), jest `● Suite › test` and `✕ test`, vitest `FAIL  file > test` and `× test`, node
/// `not ok 1 - test` and `✖ test (1ms)`. Not evidence: it tells a person where to look.
/// Bounded: the first [`MAX_FAILED_NAMES`] distinct names, each cut to a short line, and a count
/// of the other distinct ones (up to [`MAX_FAILED_COUNTED`], then only "more").
#[derive(Debug, Default)]
pub(crate) struct FailedTests {
    names: Vec<String>,
    /// Hashes of every distinct name seen, so a name printed twice (a runner's progress line
    /// and its summary) counts once.
    seen: std::collections::HashSet<u64>,
    /// A name arrived after `seen` was full: the count is a lower bound.
    overflow: bool,
}

impl FailedTests {
    /// Feeds one line of output, with or without its line ending.
    pub(crate) fn feed_line(&mut self, line: &str) {
        if line.len() > MAX_LINE_BYTES {
            return;
        }
        let line = visible(line);
        let trimmed = line.trim();
        // go test -json: `{"Action":"fail","Package":"p","Test":"TestX"}`.
        if trimmed.starts_with('{') {
            if trimmed.contains("\"fail\"")
                && let Some(name) = go_json_failure(trimmed)
            {
                self.add(&name);
            }
        } else if let Some(name) = failed_test_name(&line) {
            self.add(name);
        }
    }

    fn add(&mut self, name: &str) {
        use std::hash::{Hash, Hasher};
        let name = name.trim();
        if name.is_empty() {
            return;
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        name.hash(&mut hasher);
        let hash = hasher.finish();
        if self.seen.contains(&hash) {
            return;
        }
        if self.seen.len() >= MAX_FAILED_COUNTED {
            self.overflow = true;
            return;
        }
        self.seen.insert(hash);
        if self.names.len() < MAX_FAILED_NAMES {
            self.names.push(truncate(name));
        }
    }

    /// The names kept, in the order first printed.
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// How many other distinct names were seen, and whether there were more than that.
    pub(crate) fn more(&self) -> (usize, bool) {
        (self.seen.len() - self.names.len(), self.overflow)
    }
}

/// The text a terminal would show of a line: no line ending, only what follows a bare carriage
/// return (progress bars redraw a line that way), no ANSI escapes.
fn visible(line: &str) -> std::borrow::Cow<'_, str> {
    let line = line.trim_end_matches(['\n', '\r']);
    let line = line.rsplit('\r').next().unwrap_or(line);
    crate::run::judge::ansi::strip(line)
}

/// The failing test a line names, if it is one of the shapes [`FailedTests`] knows.
fn failed_test_name(line: &str) -> Option<&str> {
    let trimmed = line.trim();
    // pytest's short summary: `FAILED tests/x.py::test_y - why`, `ERROR tests/x.py - why`.
    for word in ["FAILED ", "ERROR "] {
        if let Some(rest) = line.strip_prefix(word) {
            let cut = rest.split_once(" - ").map_or(rest, |(id, _)| id);
            // A parametrised id (`test_sub[2 - 1]`) may hold the separator itself.
            let id = match rest.find('[') {
                Some(open) if open < cut.len() => rest[open..]
                    .find(']')
                    .map_or(cut, |close| &rest[..open + close + 1]),
                _ => cut,
            }
            .trim();
            return (id.contains("::") || id.ends_with(".py")).then_some(id);
        }
    }
    // pytest -v: `tests/x.py::test_y FAILED   [ 50%]`.
    let mut words = trimmed.split_whitespace();
    if let (Some(id), Some("FAILED" | "ERROR")) = (words.next(), words.next())
        && id.contains("::")
    {
        return Some(id);
    }
    // libtest: `test tests::adds ... FAILED`.
    if let Some(rest) = trimmed.strip_prefix("test ")
        && let Some(name) = rest.strip_suffix(" ... FAILED")
    {
        return Some(name);
    }
    // nextest: `FAIL [   0.004s] my-crate tests::adds` (also `TIMEOUT`, and `SIGSEGV`-like).
    for status in ["FAIL", "TIMEOUT", "SIGSEGV", "SIGABRT", "SIGKILL", "ABORT"] {
        if let Some(rest) = trimmed.strip_prefix(status)
            && let Some(rest) = rest.trim_start().strip_prefix('[')
            && let Some((elapsed, name)) = rest.split_once(']')
            && is_duration(elapsed.trim())
        {
            return Some(name.trim());
        }
    }
    // go test: `--- FAIL: TestX (0.00s)`, indented for a subtest.
    if let Some(rest) = trimmed.strip_prefix("--- FAIL: ") {
        return Some(rest.rsplit_once(" (").map_or(rest, |(name, _)| name));
    }
    // jest's and vitest's file badge: `FAIL  src/x.test.js` or `FAIL  x.test.ts > suite > test`.
    if let Some(rest) = trimmed.strip_prefix("FAIL  ") {
        return Some(rest);
    }
    // jest's failure heading `● Suite › test` (but not its console blocks or a suite that did
    // not load, whose file the badge names).
    if let Some(rest) = trimmed.strip_prefix("● ") {
        return (!matches!(rest, "Console" | "Test suite failed to run")).then_some(rest);
    }
    // jest's `✕ test (5 ms)`, vitest's `× test 5ms`, node's `✖ test (1.2ms)`.
    for mark in ["✕ ", "× ", "✖ "] {
        if let Some(rest) = trimmed.strip_prefix(mark) {
            if rest.ends_with(':') {
                // node's `✖ failing tests:` heading.
                return None;
            }
            return Some(without_elapsed(rest));
        }
    }
    // TAP (node --test): `not ok 3 - test`, indented for a subtest.
    if let Some(rest) = trimmed.strip_prefix("not ok ") {
        let name = rest.split_once(" - ").map(|(_, name)| name)?;
        // A TAP directive (`# TODO`, `# SKIP`) is not part of the name.
        return Some(name.split_once(" # ").map_or(name, |(name, _)| name));
    }
    None
}

/// `test (5 ms)`, `test (1.2ms)` or `test 5ms` without the time it took.
fn without_elapsed(text: &str) -> &str {
    if let Some((name, time)) = text.rsplit_once(" (")
        && time.ends_with(')')
        && time
            .trim_end_matches(')')
            .trim_end_matches("ms")
            .trim()
            .parse::<f64>()
            .is_ok()
    {
        return name;
    }
    if let Some((name, time)) = text.rsplit_once(' ')
        && let Some(n) = time.strip_suffix("ms")
        && n.parse::<f64>().is_ok()
    {
        return name;
    }
    text
}

/// The test a `go test -json` event says failed (a package's failure names no test).
fn go_json_failure(line: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct GoEvent {
        #[serde(rename = "Action")]
        action: String,
        #[serde(rename = "Test")]
        test: Option<String>,
    }
    let event: GoEvent = serde_json::from_str(line).ok()?;
    if event.action == "fail" {
        event.test
    } else {
        None
    }
}

/// libtest: `test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s`.
fn parse_cargo_test(line: &str) -> Option<Counts> {
    let rest = line.trim().strip_prefix("test result: ")?;
    let rest = rest
        .strip_prefix("ok.")
        .or_else(|| rest.strip_prefix("FAILED."))?;
    let (mut passed, mut failed, mut ignored, mut measured) = (None, None, 0, 0);
    for part in rest.split(';').map(str::trim) {
        if part.is_empty() || part.starts_with("finished in") {
            continue;
        }
        let (n, word) = count_word(part)?;
        match word {
            "passed" => passed = Some(n),
            "failed" => failed = Some(n),
            "ignored" => ignored = n,
            // Benchmarks that ran (only under `cargo bench`) count as passing tests.
            "measured" => measured = n,
            _ => {}
        }
    }
    Some(Counts::of(
        passed?.saturating_add(measured),
        failed?,
        ignored,
    ))
}

/// nextest: `Summary [   0.010s] 5 tests run: 3 passed (1 flaky), 2 failed, 1 skipped`.
fn parse_nextest(line: &str) -> Option<Counts> {
    let rest = line.trim().strip_prefix("Summary")?.trim_start();
    let (_elapsed, rest) = rest.strip_prefix('[')?.split_once(']')?;
    let (head, tail) = rest.trim_start().split_once(" run: ")?;
    // `5 tests`, `1 test`, or `3/5 tests` when the run was cancelled.
    let (ran, noun) = head.split_once(' ')?;
    let ran_ok = match ran.split_once('/') {
        Some((done, of)) => parse_count(done).is_some() && parse_count(of).is_some(),
        Option::None => parse_count(ran).is_some(),
    };
    if !ran_ok || !matches!(noun, "test" | "tests") {
        return Option::None;
    }
    // Parenthesised parts (`(1 slow, 1 flaky)`, `(1 due to being leaky)`) qualify a count.
    let mut plain = String::with_capacity(tail.len());
    let mut depth = 0usize;
    for c in tail.chars() {
        match c {
            '(' => depth = depth.saturating_add(1),
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    let (mut passed, mut failed, mut skipped) = (None, 0u64, 0);
    for part in plain.split(',').map(str::trim) {
        let (n, word) = count_word(part)?;
        match word {
            "passed" => passed = Some(n),
            "failed" | "exec failed" | "timed out" => failed = failed.saturating_add(n),
            "skipped" => skipped = n,
            _ => {}
        }
    }
    Some(Counts::of(passed?, failed, skipped))
}

/// pytest's closing line: `==== 1 failed, 2 passed, 1 skipped in 0.12s ====` (`-q`: no `=`).
fn parse_pytest(line: &str) -> Option<Counts> {
    let body = line.trim().trim_matches('=').trim();
    let (body, time) = body.rsplit_once(" in ")?;
    // `0.12s`, `65.43s (0:01:05)`, or older pytest's `0.12 seconds`.
    let time = time.split_once(" (").map_or(time, |(secs, _)| secs);
    let secs = time
        .strip_suffix(" seconds")
        .or_else(|| time.strip_suffix('s'))?;
    if !is_decimal(secs) {
        return Option::None;
    }
    if body == "no tests ran" {
        return Some(Counts::default());
    }
    let (mut passed, mut failed, mut skipped, mut known) = (0u64, 0u64, 0u64, false);
    for part in body.split(", ") {
        let (n, word) = count_word(part)?;
        let slot = match word {
            "passed" | "xpassed" => &mut passed,
            "failed" | "error" | "errors" => &mut failed,
            "skipped" | "xfailed" => &mut skipped,
            // Not run (deselected) or not a test (warnings); still pytest's words.
            "deselected" | "warning" | "warnings" => {
                known = true;
                continue;
            }
            _ => continue,
        };
        *slot = slot.saturating_add(n);
        known = true;
    }
    known.then(|| Counts::of(passed, failed, skipped))
}

/// vitest: `      Tests  1 failed | 2 passed | 1 skipped | 1 todo (5)`.
fn parse_vitest(line: &str) -> Option<Counts> {
    let rest = line.trim().strip_prefix("Tests")?;
    if !rest.starts_with(char::is_whitespace) {
        return Option::None;
    }
    let (body, total) = rest.trim().rsplit_once('(')?;
    parse_count(total.strip_suffix(')')?)?;
    let (mut passed, mut failed, mut skipped, mut known) = (0u64, 0u64, 0u64, false);
    for part in body.split('|').map(str::trim) {
        let (n, word) = count_word(part)?;
        let slot = match word {
            "passed" => &mut passed,
            "failed" => &mut failed,
            "skipped" | "todo" => &mut skipped,
            _ => continue,
        };
        *slot = slot.saturating_add(n);
        known = true;
    }
    known.then(|| Counts::of(passed, failed, skipped))
}

/// jest: `Tests:       1 failed, 1 skipped, 1 todo, 2 passed, 5 total`.
fn parse_jest(line: &str) -> Option<Counts> {
    let body = line.trim().strip_prefix("Tests:")?.trim();
    let (mut passed, mut failed, mut skipped, mut total) = (0u64, 0u64, 0u64, None);
    for part in body.split(',').map(str::trim) {
        let (n, word) = count_word(part)?;
        match word {
            "passed" => passed = n,
            "failed" => failed = n,
            "skipped" | "todo" => skipped = skipped.saturating_add(n),
            "total" => total = Some(n),
            _ => {}
        }
    }
    total.map(|_| Counts::of(passed, failed, skipped))
}

/// `3 passed` → `(3, "passed")`; the number must be plain digits.
fn count_word(part: &str) -> Option<(u64, &str)> {
    let (n, word) = part.split_once(' ')?;
    let word = word.trim();
    if word.is_empty() {
        return Option::None;
    }
    Some((parse_count(n)?, word))
}

fn parse_count(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Option::None;
    }
    s.parse().ok()
}

fn is_decimal(s: &str) -> bool {
    let mut parts = s.splitn(2, '.');
    let whole = parts.next().unwrap_or("");
    let frac = parts.next();
    !whole.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
}

/// Go's `0.012s`.
fn is_duration(s: &str) -> bool {
    s.strip_suffix('s').is_some_and(is_decimal)
}

enum EvidenceLine {
    NotEvidence,
    Valid(Counts),
    Stale,
    Malformed(String),
}

#[derive(Deserialize)]
struct RawEvidence {
    // `present` keeps an explicit `null` apart from a missing key; the derive rejects duplicates.
    #[serde(default, deserialize_with = "present")]
    schema: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    nonce: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    executed: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    passed: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    failed: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    skipped: Option<Value>,
}

fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// Classifies one (ANSI-stripped) line: `MVK_EVIDENCE = {json}` at the start, leading
/// whitespace allowed, checked in the order JSON → schema → nonce → counts.
fn parse_evidence_line(line: &str, nonce: &str) -> EvidenceLine {
    let Some(rest) = line.trim_start().strip_prefix(EVIDENCE_KEY) else {
        return EvidenceLine::NotEvidence;
    };
    let Some(json) = rest.trim_start().strip_prefix('=') else {
        return EvidenceLine::NotEvidence;
    };
    let json = json.trim();
    if !json.starts_with('{') {
        return EvidenceLine::Malformed(format!(
            "the value `{}` is not a JSON object",
            truncate(json)
        ));
    }
    let raw: RawEvidence = match serde_json::from_str(json) {
        Ok(raw) => raw,
        Err(err) => return EvidenceLine::Malformed(format!("invalid JSON: {err}")),
    };
    match &raw.schema {
        Some(Value::String(schema)) if schema == EVIDENCE_SCHEMA => {}
        Some(other) => {
            return EvidenceLine::Malformed(format!(
                "`schema` is `{}`, expected `{EVIDENCE_SCHEMA}`",
                truncate(&other.to_string())
            ));
        }
        Option::None => return EvidenceLine::Malformed("`schema` is missing".to_owned()),
    }
    match &raw.nonce {
        // An empty expected nonce is a caller bug; it must not make `"nonce":""` valid.
        Some(Value::String(found)) if !nonce.is_empty() && found == nonce => {}
        Some(Value::String(_)) => return EvidenceLine::Stale,
        Some(other) => {
            return EvidenceLine::Malformed(format!(
                "`nonce` must be a string, got `{}`",
                truncate(&other.to_string())
            ));
        }
        Option::None => return EvidenceLine::Malformed("`nonce` is missing".to_owned()),
    }
    let counts = raw_counts(&raw);
    match counts {
        Ok(counts) if counts.passed.saturating_add(counts.failed) > counts.executed => {
            EvidenceLine::Malformed(format!(
                "`passed` + `failed` ({} + {}) exceeds `executed` ({})",
                counts.passed, counts.failed, counts.executed
            ))
        }
        Ok(counts) => EvidenceLine::Valid(counts),
        Err(why) => EvidenceLine::Malformed(why),
    }
}

fn raw_counts(raw: &RawEvidence) -> Result<Counts, String> {
    Ok(Counts {
        executed: count_field("executed", raw.executed.as_ref(), true)?,
        passed: count_field("passed", raw.passed.as_ref(), false)?,
        failed: count_field("failed", raw.failed.as_ref(), false)?,
        skipped: count_field("skipped", raw.skipped.as_ref(), false)?,
    })
}

fn count_field(name: &str, value: Option<&Value>, required: bool) -> Result<u64, String> {
    match value {
        Option::None if required => Err(format!("`{name}` is missing")),
        Option::None => Ok(0),
        Some(value) => value.as_u64().ok_or_else(|| {
            format!(
                "`{name}` must be a non-negative integer, got `{}`",
                truncate(&value.to_string())
            )
        }),
    }
}

/// Cuts quoted output to a short, single-line detail.
fn truncate(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(MAX_DETAIL_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if s.chars().nth(MAX_DETAIL_CHARS).is_some() {
        out.push('…');
    }
    out
}

/// The outcome of one gate run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GateVerdict {
    Pass,
    Fail,
    Unknown,
}

/// Judges a gate run from its exit code (`None`: killed or timed out) and its evidence, with a
/// one-line reason.
pub fn verdict(exit_code: Option<i32>, evidence: &Evidence) -> (GateVerdict, String) {
    let exit = match exit_code {
        Some(code) => format!("exit code {code}"),
        Option::None => "killed or timed out".to_owned(),
    };
    let (verdict, reason) = match (evidence, exit_code) {
        (Evidence::NotRequired, Some(0)) => {
            (GateVerdict::Pass, format!("{exit}; evidence not required"))
        }
        (Evidence::NotRequired, _) => (GateVerdict::Fail, format!("{exit}; evidence not required")),
        (Evidence::Proven { source, counts }, Some(0)) => {
            if counts.executed == 0 {
                (
                    GateVerdict::Unknown,
                    format!("{exit} but zero tests executed ({source}: {counts})"),
                )
            } else if counts.failed > 0 {
                (
                    GateVerdict::Fail,
                    format!(
                        "{exit} but {} of {} tests failed ({source}: {counts})",
                        counts.failed, counts.executed
                    ),
                )
            } else {
                (
                    GateVerdict::Pass,
                    format!(
                        "{exit}; {} tests passed ({source}: {counts})",
                        counts.passed
                    ),
                )
            }
        }
        (Evidence::Proven { source, counts }, _) => {
            (GateVerdict::Fail, format!("{exit} ({source}: {counts})"))
        }
        (Evidence::Unknown { reason }, Some(0)) => (
            GateVerdict::Unknown,
            format!("{exit} but evidence is unknown: {reason}"),
        ),
        (Evidence::Unknown { reason }, _) => (
            GateVerdict::Fail,
            format!("{exit}; evidence unknown: {reason}"),
        ),
    };
    // The reason goes on one line of a report, whatever a hand-made Evidence carried.
    (verdict, reason.replace(['\n', '\r'], " "))
}

/// The compiler's evidence setting, as the scanner's mode.
impl From<crate::ir::EvidenceMode> for EvidenceMode {
    fn from(m: crate::ir::EvidenceMode) -> EvidenceMode {
        use crate::ir::EvidenceMode as Ir;
        match m {
            Ir::Auto => EvidenceMode::Auto,
            Ir::None => EvidenceMode::None,
            Ir::Nonce => EvidenceMode::Nonce,
            Ir::CargoTest => EvidenceMode::Runner(Runner::CargoTest),
            Ir::Nextest => EvidenceMode::Runner(Runner::Nextest),
            Ir::Pytest => EvidenceMode::Runner(Runner::Pytest),
            Ir::GoTest => EvidenceMode::Runner(Runner::GoTest),
            Ir::NodeTest => EvidenceMode::Runner(Runner::NodeTest),
            Ir::Vitest => EvidenceMode::Runner(Runner::Vitest),
            Ir::Jest => EvidenceMode::Runner(Runner::Jest),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONCE: &str = "0123456789abcdef0123456789abcdef";

    /// The failing tests OUTPUT names, and how many more.
    fn failed(output: &str) -> (Vec<String>, usize) {
        let mut f = FailedTests::default();
        for line in output.lines() {
            f.feed_line(line);
        }
        (f.names().to_vec(), f.more().0)
    }

    #[test]
    fn failing_tests_are_named_as_each_runner_prints_them() {
        let pytest = "tests/test_calc.py::test_zero PASSED                     [ 50%]\n\
                      tests/test_calc.py::test_add FAILED                      [100%]\n\
                      =========== short test summary info ===========\n\
                      FAILED tests/test_calc.py::test_add - assert -1 == 5\n\
                      FAILED tests/test_calc.py::test_sub[2 - 1] - assert 3 == 1\n\
                      ERROR tests/test_io.py - ModuleNotFoundError: No module named 'x'\n\
                      ======= 2 failed, 1 passed, 1 error in 0.12s =======\n";
        assert_eq!(
            failed(pytest).0,
            [
                "tests/test_calc.py::test_add",
                "tests/test_calc.py::test_sub[2 - 1]",
                "tests/test_io.py"
            ]
        );
        let cargo = "running 2 tests\ntest tests::adds ... FAILED\ntest tests::subs ... ok\n\n\
                     failures:\n\n---- tests::adds stdout ----\n\nfailures:\n    tests::adds\n\n\
                     test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n";
        assert_eq!(failed(cargo).0, ["tests::adds"]);
        let nextest = "        PASS [   0.003s] calc tests::subs\n        FAIL [   0.004s] calc tests::adds\n\
                       ------------\n     Summary [   0.010s] 2 tests run: 1 passed, 1 failed, 0 skipped\n\
                       TIMEOUT [  60.001s] calc tests::hangs\n        FAIL [   0.004s] calc tests::adds\n";
        assert_eq!(failed(nextest).0, ["calc tests::adds", "calc tests::hangs"]);
        let go = "=== RUN   TestAdd\n--- FAIL: TestAdd (0.00s)\n    --- FAIL: TestAdd/two (0.00s)\n\
                  --- PASS: TestSub (0.00s)\nFAIL\nFAIL\texample.com/calc\t0.002s\n";
        assert_eq!(failed(go).0, ["TestAdd", "TestAdd/two"]);
        let go_json = "{\"Action\":\"run\",\"Package\":\"p\",\"Test\":\"TestAdd\"}\n\
                       {\"Action\":\"fail\",\"Package\":\"p\",\"Test\":\"Test\\\"Quoted\"}\n\
                       {\"Action\":\"fail\",\"Package\":\"p\"}\n";
        assert_eq!(failed(go_json).0, ["Test\"Quoted"]);
        let jest = " FAIL  src/sum.test.js\n  sum\n    ✓ adds (2 ms)\n    ✕ subtracts (5 ms)\n\n\
                    ● sum › subtracts\n\n    expect(received).toBe(expected)\n\n  ● Console\n\n\
                    Tests:       1 failed, 1 passed, 2 total\n";
        assert_eq!(
            failed(jest).0,
            ["src/sum.test.js", "subtracts", "sum › subtracts"]
        );
        let vitest = " ❯ test/calc.test.ts (2 tests | 1 failed) 4ms\n   × calc > adds 2ms\n\
                      ⎯⎯⎯ Failed Tests 1 ⎯⎯⎯\n\n FAIL  test/calc.test.ts > calc > adds\n\
                      AssertionError: expected -1 to be 5\n      Tests  1 failed | 1 passed (2)\n";
        assert_eq!(
            failed(vitest).0,
            ["calc > adds", "test/calc.test.ts > calc > adds"]
        );
        let node = "TAP version 13\n# Subtest: adds\nnot ok 1 - adds\n  ---\n\
                    not ok 2 - later # TODO\n✖ subtracts (1.2ms)\n✖ failing tests:\n# tests 3\n";
        assert_eq!(failed(node).0, ["adds", "later", "subtracts"]);
        // Lines that look close but name no failing test.
        let neither = "FAIL: add 2 3: expected 5, got -1\ntest result: FAILED. 0 passed; 1 failed\n\
                       FAILED (errors=1)\nERROR: could not build\nnot ok\n";
        assert_eq!(failed(neither), (Vec::<String>::new(), 0));
    }

    #[test]
    fn failing_test_names_are_read_through_colours_and_kept_bounded() {
        let coloured =
            "\x1b[31mFAILED\x1b[0m tests/a.py::test_a - x\nprogress 10%\rtest b ... FAILED\n";
        assert_eq!(failed(coloured).0, ["tests/a.py::test_a", "b"]);
        let many: String = (0..50)
            .map(|i| format!("--- FAIL: Test{i} (0.00s)\n--- FAIL: Test{i} (0.00s)\n"))
            .collect();
        let (names, more) = failed(&many);
        assert_eq!(names.len(), MAX_FAILED_NAMES);
        assert_eq!(names[0], "Test0");
        assert_eq!(more, 30, "each name counts once");
        let long = format!("test {} ... FAILED\n", "x".repeat(1000));
        let (names, _) = failed(&long);
        assert_eq!(
            names[0].chars().count(),
            MAX_DETAIL_CHARS + 1,
            "cut, with `…`"
        );
    }

    fn auto(output: &str) -> Evidence {
        scan_str(EvidenceMode::Auto, NONCE, output)
    }

    fn counts(executed: u64, passed: u64, failed: u64, skipped: u64) -> Counts {
        Counts {
            executed,
            passed,
            failed,
            skipped,
        }
    }

    fn proven_runner(runner: Runner, c: Counts) -> Evidence {
        Evidence::Proven {
            source: Source::Runner(runner),
            counts: c,
        }
    }

    fn proven_nonce(c: Counts) -> Evidence {
        Evidence::Proven {
            source: Source::Nonce,
            counts: c,
        }
    }

    #[track_caller]
    fn unknown_reason(evidence: Evidence) -> String {
        match evidence {
            Evidence::Unknown { reason } => reason,
            other => panic!("expected unknown evidence, got {other:?}"),
        }
    }

    fn line(nonce: &str, executed: i64, passed: i64, failed: i64, skipped: i64) -> String {
        format!(
            r#"MVK_EVIDENCE={{"schema":"mvk.evidence.v1","nonce":"{nonce}","executed":{executed},"passed":{passed},"failed":{failed},"skipped":{skipped}}}"#
        )
    }

    // ---- names and modes ----

    #[test]
    fn runner_names_round_trip() {
        let names: Vec<&str> = Runner::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(
            names,
            [
                "cargo-test",
                "nextest",
                "pytest",
                "go-test",
                "node-test",
                "vitest",
                "jest"
            ]
        );
        for runner in Runner::ALL {
            assert_eq!(Runner::from_name(runner.name()), Some(runner));
            assert_eq!(
                runner.index(),
                Runner::ALL.iter().position(|r| *r == runner).unwrap_or(99)
            );
        }
        assert_eq!(Runner::from_name("cargo"), None);
        assert_eq!(Runner::from_name("PYTEST"), None);
    }

    #[test]
    fn evidence_mode_parses_every_name_and_lists_them_on_error() {
        assert_eq!("auto".parse::<EvidenceMode>(), Ok(EvidenceMode::Auto));
        assert_eq!("none".parse::<EvidenceMode>(), Ok(EvidenceMode::None));
        assert_eq!("nonce".parse::<EvidenceMode>(), Ok(EvidenceMode::Nonce));
        for runner in Runner::ALL {
            let mode: EvidenceMode = runner.name().parse().expect("runner name parses");
            assert_eq!(mode, EvidenceMode::Runner(runner));
            assert_eq!(mode.to_string(), runner.name());
        }
        let err = "pytests".parse::<EvidenceMode>().expect_err("unknown mode");
        let msg = err.to_string();
        assert!(msg.starts_with("unknown evidence mode `pytests`"), "{msg}");
        for name in [
            "`auto`",
            "`none`",
            "`nonce`",
            "`cargo-test`",
            "`jest`",
            "`go-test`",
        ] {
            assert!(msg.contains(name), "{msg} lacks {name}");
        }
    }

    #[test]
    fn serde_shapes_are_stable() {
        let c = counts(3, 2, 1, 0);
        let json = serde_json::to_string(&c).expect("serialize");
        assert_eq!(json, r#"{"executed":3,"passed":2,"failed":1,"skipped":0}"#);
        assert_eq!(
            serde_json::from_str::<Counts>(&json).expect("deserialize"),
            c
        );
        let ev = proven_runner(Runner::CargoTest, c);
        let json = serde_json::to_string(&ev).expect("serialize");
        assert_eq!(
            serde_json::from_str::<Evidence>(&json).expect("deserialize"),
            ev
        );
        assert!(json.contains(r#""status":"proven""#), "{json}");
        assert!(json.contains("cargo-test"), "{json}");
    }

    // ---- nonce ----

    #[test]
    fn new_nonce_is_32_lowercase_hex_and_fresh() {
        let a = new_nonce().expect("nonce");
        let b = new_nonce().expect("nonce");
        for n in [&a, &b] {
            assert_eq!(n.len(), 32, "{n}");
            assert!(
                n.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')),
                "{n}"
            );
        }
        assert_ne!(a, b);
    }

    // ---- the evidence line ----

    #[test]
    fn spec_example_line_is_proven() {
        let out = format!("building...\n{}\ndone\n", line(NONCE, 12, 12, 0, 1));
        assert_eq!(auto(&out), proven_nonce(counts(12, 12, 0, 1)));
        assert_eq!(
            scan_str(EvidenceMode::Nonce, NONCE, &out),
            proven_nonce(counts(12, 12, 0, 1))
        );
    }

    #[test]
    fn key_order_spacing_and_line_endings_vary() {
        let variants = [
            format!(
                r#"MVK_EVIDENCE={{"skipped":1,"failed":0,"passed":12,"executed":12,"nonce":"{NONCE}","schema":"mvk.evidence.v1"}}"#
            ),
            format!(
                r#"MVK_EVIDENCE = {{ "schema" : "mvk.evidence.v1" , "nonce" : "{NONCE}" , "executed" : 12 , "passed" : 12 , "failed" : 0 , "skipped" : 1 }}"#
            ),
            format!(
                "   \tMVK_EVIDENCE=\t{{\"schema\":\"mvk.evidence.v1\",\"nonce\":\"{NONCE}\",\"executed\":12,\"passed\":12,\"failed\":0,\"skipped\":1}}  \r"
            ),
            format!(
                "\x1b[32mMVK_EVIDENCE={{\"schema\":\"mvk.evidence.v1\",\"nonce\":\"{NONCE}\",\"executed\":12,\"passed\":12,\"failed\":0,\"skipped\":1}}\x1b[0m"
            ),
        ];
        for v in &variants {
            assert_eq!(auto(v), proven_nonce(counts(12, 12, 0, 1)), "{v:?}");
        }
        // Fed with its CRLF ending directly, not through `lines()`.
        let mut scanner = Scanner::new(EvidenceMode::Nonce, NONCE);
        scanner.feed_line(&format!("{}\r\n", line(NONCE, 2, 2, 0, 0)));
        assert_eq!(scanner.finish(), proven_nonce(counts(2, 2, 0, 0)));
    }

    #[test]
    fn extra_keys_are_ignored_and_missing_optional_counts_are_zero() {
        let l = format!(
            r#"MVK_EVIDENCE={{"schema":"mvk.evidence.v1","nonce":"{NONCE}","executed":4,"suite":"sealed","extra":{{"a":[1,2]}}}}"#
        );
        assert_eq!(auto(&l), proven_nonce(counts(4, 0, 0, 0)));
    }

    #[test]
    fn missing_executed_is_malformed() {
        let l = format!(
            r#"MVK_EVIDENCE={{"schema":"mvk.evidence.v1","nonce":"{NONCE}","passed":3,"failed":0,"skipped":0}}"#
        );
        let reason = unknown_reason(auto(&l));
        assert!(reason.contains("malformed"), "{reason}");
        assert!(reason.contains("`executed` is missing"), "{reason}");
    }

    #[test]
    fn negative_float_string_and_null_counts_are_malformed() {
        let bad = [
            (
                line(NONCE, -1, 0, 0, 0),
                "`executed` must be a non-negative integer, got `-1`",
            ),
            (
                line(NONCE, 3, 3, -2, 0),
                "`failed` must be a non-negative integer",
            ),
            (line(NONCE, 3, 3, 0, -1), "`skipped`"),
            (
                line(NONCE, 3, 3, 0, 0).replace(":3,", ":3.0,"),
                "`executed` must be a non-negative integer, got `3.0`",
            ),
            (
                line(NONCE, 3, 3, 0, 0).replace("\"executed\":3", "\"executed\":\"3\""),
                "got `\"3\"`",
            ),
            (
                line(NONCE, 3, 3, 0, 0).replace("\"passed\":3", "\"passed\":null"),
                "`passed`",
            ),
            (
                line(NONCE, 3, 3, 0, 0)
                    .replace("\"executed\":3", "\"executed\":99999999999999999999999"),
                "`executed`",
            ),
        ];
        for (l, expected) in &bad {
            let reason = unknown_reason(auto(l));
            assert!(reason.contains(expected), "{l}: {reason}");
            assert!(reason.contains("1 malformed"), "{l}: {reason}");
        }
    }

    #[test]
    fn broken_json_is_malformed_not_a_pass() {
        let good = line(NONCE, 3, 3, 0, 0);
        let bad = [
            good.trim_end_matches('}').to_owned(),
            format!("{good} trailing"),
            format!("{good}}}"),
            format!(r#"MVK_EVIDENCE=["mvk.evidence.v1","{NONCE}",3,3,0,0]"#),
            "MVK_EVIDENCE=".to_owned(),
            "MVK_EVIDENCE=executed:3".to_owned(),
            format!("MVK_EVIDENCE={{'schema':'mvk.evidence.v1','nonce':'{NONCE}','executed':3}}"),
        ];
        for l in &bad {
            let reason = unknown_reason(auto(l));
            assert!(reason.contains("malformed"), "{l}: {reason}");
        }
        for l in &bad {
            let reason = unknown_reason(scan_str(EvidenceMode::Nonce, NONCE, l));
            assert!(reason.contains("malformed"), "{l}: {reason}");
        }
    }

    #[test]
    fn wrong_or_missing_schema_and_nonce_types_are_malformed() {
        let cases = [
            (
                line(NONCE, 3, 3, 0, 0).replace("v1", "v2"),
                "`schema` is `\"mvk.evidence.v2\"`",
            ),
            (
                line(NONCE, 3, 3, 0, 0).replace("\"schema\":\"mvk.evidence.v1\",", ""),
                "`schema` is missing",
            ),
            (
                line(NONCE, 3, 3, 0, 0).replace(&format!("\"{NONCE}\""), "42"),
                "`nonce` must be a string",
            ),
            (
                line(NONCE, 3, 3, 0, 0).replace(&format!("\"nonce\":\"{NONCE}\","), ""),
                "`nonce` is missing",
            ),
        ];
        for (l, expected) in &cases {
            let reason = unknown_reason(auto(l));
            assert!(reason.contains(expected), "{l}: {reason}");
        }
    }

    #[test]
    fn duplicate_keys_are_malformed() {
        let l = format!(
            r#"MVK_EVIDENCE={{"schema":"mvk.evidence.v1","nonce":"stale","nonce":"{NONCE}","executed":3}}"#
        );
        let reason = unknown_reason(auto(&l));
        assert!(reason.contains("duplicate field `nonce`"), "{reason}");
    }

    #[test]
    fn counts_that_do_not_add_up_are_malformed() {
        let reason = unknown_reason(auto(&line(NONCE, 2, 2, 1, 0)));
        assert!(reason.contains("exceeds `executed`"), "{reason}");
    }

    #[test]
    fn stale_nonce_alone_is_unknown_and_says_so() {
        let other = "ffffffffffffffffffffffffffffffff";
        let reason = unknown_reason(auto(&line(other, 5, 5, 0, 0)));
        assert!(reason.contains("stale nonce"), "{reason}");
        assert!(reason.contains("1 `MVK_EVIDENCE` line"), "{reason}");
        let reason = unknown_reason(scan_str(
            EvidenceMode::Nonce,
            NONCE,
            &line(other, 5, 5, 0, 0),
        ));
        assert!(reason.contains("stale nonce"), "{reason}");
    }

    #[test]
    fn a_valid_line_wins_over_stale_ones_in_any_order() {
        let stale = line("deadbeefdeadbeefdeadbeefdeadbeef", 9, 0, 9, 0);
        let good = line(NONCE, 3, 3, 0, 0);
        assert_eq!(
            auto(&format!("{stale}\n{good}\n")),
            proven_nonce(counts(3, 3, 0, 0))
        );
        assert_eq!(
            auto(&format!("{good}\n{stale}\n")),
            proven_nonce(counts(3, 3, 0, 0))
        );
    }

    #[test]
    fn the_last_of_two_valid_lines_wins() {
        let out = format!("{}\n{}\n", line(NONCE, 3, 3, 0, 0), line(NONCE, 4, 3, 1, 0));
        assert_eq!(auto(&out), proven_nonce(counts(4, 3, 1, 0)));
        let out = format!("{}\n{}\n", line(NONCE, 4, 3, 1, 0), line(NONCE, 3, 3, 0, 0));
        assert_eq!(auto(&out), proven_nonce(counts(3, 3, 0, 0)));
    }

    #[test]
    fn correct_nonce_with_zero_executed_is_unknown_even_beside_a_runner_summary() {
        let out = format!(
            "{}\ntest result: ok. 5 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s\n",
            line(NONCE, 0, 0, 0, 0)
        );
        let ev = auto(&out);
        let reason = unknown_reason(ev.clone());
        assert!(reason.contains("zero tests executed"), "{reason}");
        let (v, why) = verdict(Some(0), &ev);
        assert_eq!(v, GateVerdict::Unknown);
        assert!(why.contains("zero tests executed"), "{why}");
    }

    #[test]
    fn evidence_after_other_text_on_the_line_does_not_count() {
        let good = line(NONCE, 3, 3, 0, 0);
        for prefixed in [
            format!("+ echo '{good}'"),
            format!("[gate] {good}"),
            format!("note: {good}"),
        ] {
            let reason = unknown_reason(auto(&prefixed));
            assert!(
                reason.contains("counts only at the start of a line"),
                "{reason}"
            );
        }
    }

    #[test]
    fn similar_keys_are_not_evidence_lines() {
        let l = line(NONCE, 3, 3, 0, 0).replace("MVK_EVIDENCE=", "MVK_EVIDENCE_X=");
        let reason = unknown_reason(auto(&l));
        assert!(!reason.contains("malformed"), "{reason}");
        assert!(reason.starts_with("no evidence"), "{reason}");
    }

    #[test]
    fn an_empty_expected_nonce_never_matches() {
        let l = line("", 3, 3, 0, 0);
        let reason = unknown_reason(scan_str(EvidenceMode::Nonce, "", &l));
        assert!(reason.contains("stale nonce"), "{reason}");
    }

    // ---- modes ----

    #[test]
    fn nonce_mode_ignores_runner_summaries() {
        let out = "test result: ok. 5 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s\n";
        let reason = unknown_reason(scan_str(EvidenceMode::Nonce, NONCE, out));
        assert!(
            reason.contains("no `MVK_EVIDENCE` line with this run's nonce"),
            "{reason}"
        );
    }

    #[test]
    fn auto_prefers_a_valid_nonce_line_over_runner_summaries() {
        let out = format!(
            "test result: ok. 5 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s\n{}\n",
            line(NONCE, 7, 6, 1, 0)
        );
        assert_eq!(auto(&out), proven_nonce(counts(7, 6, 1, 0)));
    }

    #[test]
    fn auto_falls_back_to_a_runner_when_the_nonce_line_is_bad() {
        let out = format!(
            "{}\n{}\n==== 4 passed in 0.05s ====\n",
            line(NONCE, -1, 0, 0, 0),
            line("feedfeedfeedfeedfeedfeedfeedfeed", 1, 1, 0, 0)
        );
        assert_eq!(
            auto(&out),
            proven_runner(Runner::Pytest, counts(4, 4, 0, 0))
        );
    }

    #[test]
    fn runner_mode_reads_only_that_runner() {
        let out = format!(
            "{}\ntest result: ok. 5 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s\n",
            line(NONCE, 7, 7, 0, 0)
        );
        assert_eq!(
            scan_str(EvidenceMode::Runner(Runner::CargoTest), NONCE, &out),
            proven_runner(Runner::CargoTest, counts(5, 5, 0, 0))
        );
        let reason = unknown_reason(scan_str(EvidenceMode::Runner(Runner::Pytest), NONCE, &out));
        assert!(reason.contains("no pytest summary"), "{reason}");
    }

    #[test]
    fn none_mode_is_not_required_and_judged_by_exit_code() {
        let ev = scan_str(EvidenceMode::None, NONCE, "warning: unused variable\n");
        assert_eq!(ev, Evidence::NotRequired);
        assert_eq!(verdict(Some(0), &ev).0, GateVerdict::Pass);
        assert_eq!(verdict(Some(1), &ev).0, GateVerdict::Fail);
        assert_eq!(verdict(None, &ev).0, GateVerdict::Fail);
    }

    #[test]
    fn auto_without_any_evidence_is_unknown() {
        let reason = unknown_reason(auto("Compiling foo v0.1.0\nall good!\n"));
        assert!(reason.starts_with("no evidence:"), "{reason}");
        assert!(reason.contains("pytest"), "{reason}");
        let reason = unknown_reason(auto(""));
        assert!(reason.starts_with("no evidence:"), "{reason}");
    }

    #[test]
    fn auto_sums_different_runners_and_names_the_first() {
        let out = "\
running 2 tests
test a ... ok
test b ... ok

test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

============================= test session starts ==============================
collected 3 items

tests/test_x.py ..F                                                      [100%]
========================= 1 failed, 2 passed in 0.31s ==========================
";
        assert_eq!(
            auto(out),
            proven_runner(Runner::CargoTest, counts(5, 4, 1, 0))
        );
    }

    // ---- cargo test ----

    #[test]
    fn cargo_test_sums_every_binary_and_ignores_filtered_out() {
        let out = "\
   Compiling demo v0.1.0 (/tmp/demo)
    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.52s
     Running unittests src/lib.rs (target/debug/deps/demo-1a2b3c)

running 4 tests
test tests::adds ... ok
test tests::slow ... ignored
test tests::subtracts ... ok
test tests::multiplies ... ok

test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 2 filtered out; finished in 0.00s

     Running tests/cli.rs (target/debug/deps/cli-4d5e6f)

running 2 tests
test runs ... ok
test prints_help ... ok

test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.03s

   Doc-tests demo

running 1 test
test src/lib.rs - add (line 3) ... ok

test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.12s

";
        let ev = auto(out);
        assert_eq!(ev, proven_runner(Runner::CargoTest, counts(6, 6, 0, 1)));
        assert_eq!(verdict(Some(0), &ev).0, GateVerdict::Pass);
    }

    #[test]
    fn cargo_test_failure_is_counted() {
        let out = "\
running 3 tests
test tests::a ... ok
test tests::b ... FAILED
test tests::c ... ok

failures:

---- tests::b stdout ----

thread 'tests::b' panicked at src/lib.rs:12:9:
assertion `left == right` failed
  left: 1
 right: 2

failures:
    tests::b

test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

error: test failed, to rerun pass `--lib`
";
        let ev = auto(out);
        assert_eq!(ev, proven_runner(Runner::CargoTest, counts(3, 2, 1, 0)));
        let (v, why) = verdict(Some(101), &ev);
        assert_eq!(v, GateVerdict::Fail);
        assert!(
            why.contains("exit code 101") && why.contains("1 failed"),
            "{why}"
        );
    }

    #[test]
    fn cargo_bench_measured_counts_as_passed() {
        let out = "\
running 2 tests
test bench_parse ... bench:       1,234.50 ns/iter (+/- 56.70)
test bench_print ... bench:         789.00 ns/iter (+/- 12.30)

test result: ok. 0 passed; 0 failed; 0 ignored; 2 measured; 0 filtered out; finished in 1.20s
";
        assert_eq!(
            auto(out),
            proven_runner(Runner::CargoTest, counts(2, 2, 0, 0))
        );
    }

    #[test]
    fn cargo_test_with_zero_tests_is_unknown() {
        let out = "\
     Running unittests src/main.rs (target/debug/deps/demo-1a2b3c)

running 0 tests

test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

";
        let reason = unknown_reason(auto(out));
        assert!(reason.contains("zero tests executed"), "{reason}");
        assert!(reason.contains("cargo-test"), "{reason}");
    }

    // ---- nextest ----

    #[test]
    fn nextest_passing_summary() {
        let out = "\
    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.04s
    Starting 5 tests across 2 binaries (1 test skipped)
        PASS [   0.004s] demo tests::adds
        PASS [   0.004s] demo tests::subtracts
        PASS [   0.005s] demo tests::multiplies
        PASS [   0.006s] demo::cli runs
        PASS [   0.007s] demo::cli prints_help
------------
     Summary [   0.010s] 5 tests run: 5 passed, 1 skipped
";
        assert_eq!(
            auto(out),
            proven_runner(Runner::Nextest, counts(5, 5, 0, 1))
        );
    }

    #[test]
    fn nextest_failing_variants() {
        let cases = [
            (
                "     Summary [   0.010s] 5 tests run: 3 passed, 2 failed, 1 skipped",
                counts(5, 3, 2, 1),
            ),
            (
                "     Summary [   1.204s] 6 tests run: 4 passed (1 slow, 1 flaky), 1 failed (1 due to being leaky), 1 timed out, 0 skipped",
                counts(6, 4, 2, 0),
            ),
            (
                "     Summary [   0.100s] 3/10 tests run: 2 passed, 1 exec failed, 0 skipped",
                counts(3, 2, 1, 0),
            ),
            (
                "\x1b[1;31m     Summary\x1b[0m [   0.010s] \x1b[1m2\x1b[0m tests run: \x1b[1m1\x1b[0m \x1b[32mpassed\x1b[0m, \x1b[1m1\x1b[0m \x1b[31mfailed\x1b[0m, \x1b[1m0\x1b[0m \x1b[33mskipped\x1b[0m",
                counts(2, 1, 1, 0),
            ),
        ];
        for (l, c) in cases {
            assert_eq!(
                scan_str(EvidenceMode::Runner(Runner::Nextest), NONCE, l),
                proven_runner(Runner::Nextest, c),
                "{l:?}"
            );
        }
        let ev = auto(cases[0].0);
        let (v, why) = verdict(Some(0), &ev);
        assert_eq!(v, GateVerdict::Fail);
        assert!(why.contains("2 of 5 tests failed"), "{why}");
    }

    #[test]
    fn nextest_singular_and_zero() {
        assert_eq!(
            auto("     Summary [   0.002s] 1 test run: 1 passed, 0 skipped"),
            proven_runner(Runner::Nextest, counts(1, 1, 0, 0))
        );
        let reason = unknown_reason(auto(
            "     Summary [   0.000s] 0 tests run: 0 passed, 3 skipped",
        ));
        assert!(reason.contains("zero tests executed"), "{reason}");
    }

    // ---- pytest ----

    #[test]
    fn pytest_default_summary_with_colour() {
        let out = "\
============================= test session starts ==============================
platform linux -- Python 3.12.3, pytest-8.3.2, pluggy-1.5.0
rootdir: /tmp/proj
collected 4 items

tests/test_math.py ..s.                                                  [100%]

\x1b[32m========================= \x1b[32m\x1b[1m3 passed\x1b[0m, \x1b[33m1 skipped\x1b[0m\x1b[32m in 0.12s\x1b[0m\x1b[32m =========================\x1b[0m
";
        assert_eq!(auto(out), proven_runner(Runner::Pytest, counts(3, 3, 0, 1)));
    }

    #[test]
    fn pytest_failures_and_errors_count_as_failed() {
        let out = "\
tests/test_math.py .F.E                                                  [100%]

==================================== ERRORS ====================================
___________________________ ERROR at setup of test_db __________________________
=================================== FAILURES ===================================
__________________________________ test_div ___________________________________
E       ZeroDivisionError: division by zero
=========================== short test summary info ============================
FAILED tests/test_math.py::test_div - ZeroDivisionError: division by zero
ERROR tests/test_math.py::test_db - ConnectionRefusedError
==================== 1 failed, 2 passed, 1 error in 0.30s =====================
";
        let ev = auto(out);
        assert_eq!(ev, proven_runner(Runner::Pytest, counts(4, 2, 2, 0)));
        assert_eq!(
            parse_pytest("=== 2 errors in 0.05s ==="),
            Some(counts(2, 0, 2, 0))
        );
    }

    #[test]
    fn pytest_quiet_summary_without_equals() {
        let out = "...\n3 passed in 0.01s\n";
        assert_eq!(auto(out), proven_runner(Runner::Pytest, counts(3, 3, 0, 0)));
        assert_eq!(
            parse_pytest("1 failed, 2 passed in 0.3s"),
            Some(counts(3, 2, 1, 0))
        );
        assert_eq!(
            parse_pytest("2 passed in 0.01 seconds"),
            Some(counts(2, 2, 0, 0))
        );
    }

    #[test]
    fn pytest_no_tests_or_all_deselected_is_zero() {
        for out in [
            "============================ no tests ran in 0.01s =============================",
            "no tests ran in 0.01s",
            "======================= 5 deselected in 0.02s ========================",
        ] {
            let reason = unknown_reason(auto(out));
            assert!(reason.contains("zero tests executed"), "{out}: {reason}");
        }
    }

    #[test]
    fn pytest_xfail_xpass_deselected_warnings_and_long_durations() {
        assert_eq!(
            parse_pytest(
                "=== 1 failed, 5 passed, 2 skipped, 3 deselected, 1 xfailed, 1 xpassed, 4 warnings in 65.43s (0:01:05) ==="
            ),
            Some(counts(7, 6, 1, 3))
        );
        assert_eq!(
            parse_pytest("===== 2 passed, 1 warning in 0.02s ====="),
            Some(counts(2, 2, 0, 0))
        );
        // Plugin categories are ignored, pytest's own still count.
        assert_eq!(
            parse_pytest("== 1 passed, 2 subtests passed in 0.02s =="),
            Some(counts(1, 1, 0, 0))
        );
    }

    #[test]
    fn pytest_shapes_do_not_match_other_lines() {
        for l in [
            "    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.50s",
            "Ran 3 tests in 0.001s",
            "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s",
            "3 passed in a hurry",
            "3 passed",
            "==== 3 deployed in 0.1s ====",
        ] {
            assert_eq!(parse_pytest(l), None, "{l}");
        }
    }

    // ---- go test ----

    #[test]
    fn go_test_verbose_counts_top_level_tests_across_packages() {
        let out = "\
=== RUN   TestAdd
--- PASS: TestAdd (0.00s)
=== RUN   TestTable
=== RUN   TestTable/zero
=== RUN   TestTable/negative
--- PASS: TestTable (0.00s)
    --- PASS: TestTable/zero (0.00s)
    --- SKIP: TestTable/negative (0.00s)
        math_test.go:30: not yet
=== RUN   TestSlow
    math_test.go:40: skipping in short mode
--- SKIP: TestSlow (0.00s)
PASS
ok  \texample.com/demo/math\t0.012s
=== RUN   TestParse
--- PASS: TestParse (0.00s)
PASS
ok  \texample.com/demo/parse\t(cached)
?   \texample.com/demo/cmd\t[no test files]
";
        assert_eq!(auto(out), proven_runner(Runner::GoTest, counts(3, 3, 0, 1)));
    }

    #[test]
    fn go_test_verbose_failure() {
        let out = "\
=== RUN   TestDiv
    div_test.go:12: got 3, want 2
--- FAIL: TestDiv (0.00s)
=== RUN   TestTable
=== RUN   TestTable/one
    table_test.go:9: wrong
    --- FAIL: TestTable/one (0.00s)
--- FAIL: TestTable (0.00s)
=== RUN   TestOk
--- PASS: TestOk (0.01s)
FAIL
FAIL\texample.com/demo/math\t0.015s
FAIL
";
        let ev = scan_str(EvidenceMode::Runner(Runner::GoTest), NONCE, out);
        assert_eq!(ev, proven_runner(Runner::GoTest, counts(3, 1, 2, 0)));
        // A subtest name is never a top-level result, whatever its indentation.
        let flat = out.replace("    --- FAIL: TestTable/one", "--- FAIL: TestTable/one");
        assert_eq!(
            scan_str(EvidenceMode::Runner(Runner::GoTest), NONCE, &flat),
            proven_runner(Runner::GoTest, counts(3, 1, 2, 0))
        );
        assert_eq!(verdict(Some(1), &ev).0, GateVerdict::Fail);
    }

    #[test]
    fn go_test_without_verbose_cannot_be_counted() {
        let out = "ok  \texample.com/demo/math\t0.012s\nok  \texample.com/demo/parse\t0.004s\tcoverage: 81.2% of statements\n";
        for mode in [EvidenceMode::Auto, EvidenceMode::Runner(Runner::GoTest)] {
            let reason = unknown_reason(scan_str(mode, NONCE, out));
            assert!(reason.contains("`go test -v`"), "{reason}");
            assert!(reason.contains("`go test -json`"), "{reason}");
        }
        // Partial evidence is not enough even when another runner was countable.
        let mixed = format!(
            "{out}test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n"
        );
        let reason = unknown_reason(auto(&mixed));
        assert!(reason.contains("`go test -v`"), "{reason}");
    }

    #[test]
    fn go_test_with_no_tests_is_zero() {
        for out in [
            "ok  \texample.com/demo/math\t0.003s [no tests to run]\n",
            "?   \texample.com/demo/cmd\t[no test files]\n",
            "testing: warning: no tests to run\nPASS\nok  \texample.com/demo\t0.002s [no tests to run]\n",
        ] {
            let reason = unknown_reason(auto(out));
            assert!(reason.contains("zero tests executed"), "{out}: {reason}");
        }
    }

    #[test]
    fn go_test_json_events() {
        let out = r#"{"Time":"2024-05-01T10:00:00.000001Z","Action":"start","Package":"example.com/demo"}
{"Time":"2024-05-01T10:00:00.1Z","Action":"run","Package":"example.com/demo","Test":"TestAdd"}
{"Time":"2024-05-01T10:00:00.1Z","Action":"output","Package":"example.com/demo","Test":"TestAdd","Output":"=== RUN   TestAdd\n"}
{"Time":"2024-05-01T10:00:00.1Z","Action":"output","Package":"example.com/demo","Test":"TestAdd","Output":"--- PASS: TestAdd (0.00s)\n"}
{"Time":"2024-05-01T10:00:00.1Z","Action":"pass","Package":"example.com/demo","Test":"TestAdd","Elapsed":0}
{"Time":"2024-05-01T10:00:00.1Z","Action":"run","Package":"example.com/demo","Test":"TestTable"}
{"Time":"2024-05-01T10:00:00.1Z","Action":"run","Package":"example.com/demo","Test":"TestTable/a"}
{"Time":"2024-05-01T10:00:00.1Z","Action":"fail","Package":"example.com/demo","Test":"TestTable/a","Elapsed":0}
{"Time":"2024-05-01T10:00:00.1Z","Action":"fail","Package":"example.com/demo","Test":"TestTable","Elapsed":0}
{"Time":"2024-05-01T10:00:00.1Z","Action":"skip","Package":"example.com/demo","Test":"TestSlow","Elapsed":0}
{"Time":"2024-05-01T10:00:00.1Z","Action":"output","Package":"example.com/demo","Output":"FAIL\n"}
{"Time":"2024-05-01T10:00:00.1Z","Action":"fail","Package":"example.com/demo","Elapsed":0.01}
"#;
        assert_eq!(auto(out), proven_runner(Runner::GoTest, counts(2, 1, 1, 1)));
        // A package with no tests in -json form is exact: zero.
        let empty = r#"{"Time":"2024-05-01T10:00:00Z","Action":"output","Package":"example.com/cmd","Output":"?   \texample.com/cmd\t[no test files]\n"}
{"Time":"2024-05-01T10:00:00Z","Action":"skip","Package":"example.com/cmd","Elapsed":0}
"#;
        let reason = unknown_reason(auto(empty));
        assert!(reason.contains("zero tests executed"), "{reason}");
    }

    #[test]
    fn json_lines_of_other_tools_are_not_go_events() {
        let out = "{\"level\":\"info\",\"msg\":\"started\"}\n{\"Action\":\"pass\"}\n";
        let reason = unknown_reason(auto(out));
        assert!(reason.starts_with("no evidence"), "{reason}");
    }

    // ---- node --test ----

    #[test]
    fn node_test_tap_summary() {
        let out = "\
TAP version 13
# Subtest: adds
ok 1 - adds
  ---
  duration_ms: 0.61
  ...
# Subtest: divides
not ok 2 - divides
  ---
  duration_ms: 0.9
  failureType: 'testCodeFailure'
  error: 'Expected values to be strictly equal'
  ...
# Subtest: later
ok 3 - later # SKIP
# Subtest: someday
ok 4 - someday # TODO
1..4
# tests 4
# suites 0
# pass 1
# fail 1
# cancelled 0
# skipped 1
# todo 1
# duration_ms 48.21
";
        let ev = auto(out);
        assert_eq!(ev, proven_runner(Runner::NodeTest, counts(2, 1, 1, 2)));
    }

    #[test]
    fn node_test_spec_summary_with_colour_and_cancelled() {
        let out = "\
\x1b[32m✔ adds \x1b[90m(0.5ms)\x1b[39m\x1b[39m
\x1b[31m✖ times out \x1b[90m(5001ms)\x1b[39m\x1b[39m
\x1b[34mℹ tests 5\x1b[39m
\x1b[34mℹ suites 1\x1b[39m
\x1b[34mℹ pass 3\x1b[39m
\x1b[34mℹ fail 1\x1b[39m
\x1b[34mℹ cancelled 1\x1b[39m
\x1b[34mℹ skipped 0\x1b[39m
\x1b[34mℹ todo 0\x1b[39m
\x1b[34mℹ duration_ms 5060.1\x1b[39m
";
        assert_eq!(
            scan_str(EvidenceMode::Runner(Runner::NodeTest), NONCE, out),
            proven_runner(Runner::NodeTest, counts(5, 3, 2, 0))
        );
    }

    #[test]
    fn node_test_zero_and_incomplete_blocks() {
        let zero = "# tests 0\n# suites 0\n# pass 0\n# fail 0\n# cancelled 0\n# skipped 0\n# todo 0\n# duration_ms 3.1\n";
        let reason = unknown_reason(auto(zero));
        assert!(reason.contains("zero tests executed"), "{reason}");
        // A block without `# pass` proves nothing; indented (nested) blocks are not the summary.
        let reason = unknown_reason(auto("# tests 4\n# fail 0\n    # pass 4\n"));
        assert!(reason.starts_with("no evidence"), "{reason}");
    }

    // ---- vitest ----

    #[test]
    fn vitest_summaries() {
        let passing = "\
 ✓ src/math.test.ts (3 tests) 2ms

 Test Files  1 passed (1)
      Tests  3 passed (3)
   Start at  10:15:02
   Duration  312ms (transform 40ms, setup 0ms, collect 30ms, tests 2ms)
";
        assert_eq!(
            auto(passing),
            proven_runner(Runner::Vitest, counts(3, 3, 0, 0))
        );
        let failing = "\
\x1b[31m ❯ src/math.test.ts \x1b[2m(3 tests | \x1b[22m\x1b[31m1 failed\x1b[39m\x1b[2m)\x1b[22m
\x1b[2m Test Files \x1b[22m \x1b[1m\x1b[31m1 failed\x1b[39m\x1b[22m\x1b[90m (1)\x1b[39m
\x1b[2m      Tests \x1b[22m \x1b[1m\x1b[31m1 failed\x1b[39m\x1b[22m\x1b[2m | \x1b[22m\x1b[1m\x1b[32m2 passed\x1b[39m\x1b[22m\x1b[90m (3)\x1b[39m
";
        assert_eq!(
            auto(failing),
            proven_runner(Runner::Vitest, counts(3, 2, 1, 0))
        );
        assert_eq!(
            parse_vitest("      Tests  1 failed | 2 passed | 1 skipped | 1 todo (5)"),
            Some(counts(3, 2, 1, 2))
        );
        let reason = unknown_reason(auto("      Tests  2 skipped (2)\n"));
        assert!(reason.contains("zero tests executed"), "{reason}");
        assert_eq!(parse_vitest(" Test Files  1 passed (1)"), None);
    }

    // ---- jest ----

    #[test]
    fn jest_summaries() {
        let failing = "\
FAIL src/math.test.js
  ● divides › by zero

    expect(received).toBe(expected)

PASS src/parse.test.js

Test Suites: 1 failed, 1 passed, 2 total
Tests:       1 failed, 2 passed, 3 total
Snapshots:   0 total
Time:        1.234 s
Ran all test suites.
";
        assert_eq!(
            auto(failing),
            proven_runner(Runner::Jest, counts(3, 2, 1, 0))
        );
        assert_eq!(
            auto("Tests:       2 skipped, 3 passed, 5 total\n"),
            proven_runner(Runner::Jest, counts(3, 3, 0, 2))
        );
        let coloured = "\x1b[1mTests:       \x1b[22m\x1b[1m\x1b[33m1 skipped\x1b[39m\x1b[22m, \x1b[1m\x1b[35m1 todo\x1b[39m\x1b[22m, \x1b[1m\x1b[32m4 passed\x1b[39m\x1b[22m, 6 total";
        assert_eq!(
            auto(coloured),
            proven_runner(Runner::Jest, counts(4, 4, 0, 2))
        );
        let reason = unknown_reason(auto("Test Suites: 0 total\nTests:       0 total\n"));
        assert!(reason.contains("zero tests executed"), "{reason}");
        assert_eq!(parse_jest("Test Suites: 1 passed, 1 total"), None);
    }

    // ---- line handling ----

    #[test]
    fn carriage_return_keeps_the_redrawn_text() {
        let out = "   Running [ 00:00:01] 3/5: 3 passed\r     Summary [   0.010s] 5 tests run: 5 passed, 0 skipped\n";
        assert_eq!(
            auto(out),
            proven_runner(Runner::Nextest, counts(5, 5, 0, 0))
        );
    }

    #[test]
    fn huge_output_fed_line_by_line_keeps_state_small() {
        let mut scanner = Scanner::new(EvidenceMode::Auto, NONCE);
        let stale = line("00000000000000000000000000000000", 1, 1, 0, 0);
        // Not a JSON object, and long: the kept detail must still be cut short.
        let malformed = format!("MVK_EVIDENCE={}", "9".repeat(500));
        for i in 0..200_000u32 {
            match i % 10_000 {
                0 => scanner.feed_line("test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s"),
                1 => scanner.feed_line(&stale),
                2 => scanner.feed_line(&malformed),
                _ => scanner.feed_line(&format!("test tests::case_{i} ... ok")),
            }
        }
        let long = "x".repeat(MAX_LINE_BYTES + 1);
        scanner.feed_line(&long);
        assert_eq!(scanner.evidence_lines.stale, 20);
        assert_eq!(scanner.evidence_lines.malformed, 20);
        let kept = scanner
            .evidence_lines
            .last_malformed
            .as_ref()
            .map_or(0, |s| s.chars().count());
        assert!(kept <= MAX_DETAIL_CHARS + 1, "kept {kept} chars");
        assert_eq!(
            scanner.finish(),
            proven_runner(Runner::CargoTest, counts(60, 60, 0, 20))
        );
    }

    #[test]
    fn over_long_lines_are_skipped_and_over_long_evidence_is_malformed() {
        let padded = format!(
            "MVK_EVIDENCE={{\"schema\":\"mvk.evidence.v1\",\"nonce\":\"{NONCE}\",\"executed\":3,\"pad\":\"{}\"}}",
            "p".repeat(MAX_LINE_BYTES)
        );
        let reason = unknown_reason(auto(&padded));
        assert!(reason.contains("longer than 65536 bytes"), "{reason}");
        let long_summary = format!("{}\n", "=".repeat(MAX_LINE_BYTES) + " 3 passed in 0.1s");
        assert!(unknown_reason(auto(&long_summary)).starts_with("no evidence"));
    }

    #[test]
    fn absurd_counts_saturate_instead_of_panicking() {
        let big = u64::MAX;
        let out = format!(
            "test result: ok. {big} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\
             test result: ok. {big} passed; {big} failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n"
        );
        assert_eq!(
            auto(&out),
            proven_runner(Runner::CargoTest, counts(big, big, big, 0))
        );
        let too_big = "test result: ok. 99999999999999999999999 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s";
        assert!(unknown_reason(auto(too_big)).starts_with("no evidence"));
    }

    // ---- verdict ----

    #[test]
    fn verdict_follows_the_decision_rules() {
        let ok = proven_runner(Runner::Pytest, counts(3, 3, 0, 1));
        let failing = proven_runner(Runner::Pytest, counts(3, 2, 1, 0));
        let zero = proven_nonce(counts(0, 0, 0, 4));
        let unknown = Evidence::Unknown {
            reason: "no evidence: nothing\nat all".to_owned(),
        };
        let table = [
            (Some(0), &ok, GateVerdict::Pass, "3 tests passed"),
            (
                Some(1),
                &ok,
                GateVerdict::Fail,
                "exit code 1 (pytest summary: 3 executed",
            ),
            (
                None,
                &ok,
                GateVerdict::Fail,
                "killed or timed out (pytest summary: 3 executed",
            ),
            (Some(0), &failing, GateVerdict::Fail, "1 of 3 tests failed"),
            (Some(2), &failing, GateVerdict::Fail, "exit code 2"),
            (Some(0), &zero, GateVerdict::Unknown, "zero tests executed"),
            (Some(1), &zero, GateVerdict::Fail, "exit code 1"),
            (
                Some(0),
                &unknown,
                GateVerdict::Unknown,
                "evidence is unknown: no evidence",
            ),
            (Some(1), &unknown, GateVerdict::Fail, "evidence unknown"),
            (None, &unknown, GateVerdict::Fail, "killed or timed out"),
            (
                Some(0),
                &Evidence::NotRequired,
                GateVerdict::Pass,
                "exit code 0",
            ),
            (
                Some(-1),
                &Evidence::NotRequired,
                GateVerdict::Fail,
                "exit code -1",
            ),
        ];
        for (exit, ev, expected, fragment) in table {
            let (v, why) = verdict(exit, ev);
            assert_eq!(v, expected, "{exit:?} {ev:?}: {why}");
            assert!(why.contains(fragment), "{exit:?} {ev:?}: {why}");
            assert!(!why.contains('\n') && !why.contains('\r'), "{why:?}");
        }
    }

    #[test]
    fn compiler_modes_map_to_scanner_modes_by_name() {
        for name in crate::ir::EvidenceMode::NAMES {
            let ir = crate::ir::EvidenceMode::parse(name).expect("known");
            assert_eq!(EvidenceMode::from(ir).to_string(), name);
        }
    }
}
