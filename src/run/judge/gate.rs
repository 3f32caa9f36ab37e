//! One gate in (its argv, environment, evidence rule and a worktree); out comes its verdict with
//! the evidence read from its own output (never the agent's), its counts and the tail of its log.
//!
//! Each run gets a fresh `MVK_NONCE`. The gate's environment drops credential-looking variables
//! the loop did not grant it: a test suite has no business with the agent's API key.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::ir::Gate;
use crate::run::exec::process::{self, ProcessError, ProcessSpec, Termination};
use crate::run::judge::evidence::{self, Evidence, FailedTests, GateVerdict, Scanner};

/// Bytes of a gate's log kept for the next prompt and the reports.
pub(crate) const TAIL_BYTES: u64 = 8 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("gate `{gate}` has an empty command")]
    EmptyCommand { gate: String },
    #[error(transparent)]
    Nonce(#[from] evidence::NonceError),
    #[error("cannot run gate `{gate}`")]
    Process {
        gate: String,
        #[source]
        source: ProcessError,
    },
    #[error("cannot read the log of gate `{gate}` at `{}`", path.display())]
    Log {
        gate: String,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// What one gate run showed.
#[derive(Debug, Clone, Serialize)]
pub struct GateRun {
    pub gate: String,
    pub verdict: GateVerdict,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub evidence: Evidence,
    pub reason: String,
    pub log: PathBuf,
    /// The end of the combined output (lossy UTF-8, starting at a line boundary when cut).
    #[serde(skip)]
    pub tail: String,
    pub duration_ms: u64,
}

impl GateRun {
    pub fn counts(&self) -> Option<evidence::Counts> {
        match &self.evidence {
            Evidence::Proven { counts, .. } => Some(*counts),
            _ => None,
        }
    }

    /// How the evidence was obtained, for the ledger: `nonce`, `cargo-test summary`, `none`, `unknown`.
    pub(crate) fn evidence_label(&self) -> String {
        match &self.evidence {
            Evidence::NotRequired => "none".into(),
            Evidence::Proven { source, .. } => match source {
                evidence::Source::Nonce => "nonce".into(),
                evidence::Source::Runner(r) => format!("{} summary", r.name()),
            },
            Evidence::Unknown { .. } => "unknown".into(),
        }
    }
}

/// Where and with what the gate runs.
pub struct GateContext<'a> {
    pub cwd: &'a Path,
    /// `MVK_*` variables besides the nonce (run, task, attempt, base, worktree).
    pub env: &'a [(String, String)],
    pub log: PathBuf,
    /// The most the gate may take: its own timeout, or less when the wall budget is nearly spent.
    pub timeout: Duration,
    /// The loop's sandbox: the gate writes only in `cwd`, its own temporary directory and the
    /// paths granted, and sees only the base environment and the variables named.
    pub sandbox: Option<&'a crate::ir::Sandbox>,
    /// Where no grant of the sandbox may lead.
    pub protected: &'a [crate::run::sandbox::Protected],
}

/// Whether a variable name looks like it holds a credential.
pub(crate) fn is_credential(name: &str) -> bool {
    const PARTS: &[&str] = &[
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "API_KEY",
        "APIKEY",
        "PRIVATE_KEY",
        "ACCESS_KEY",
        "SESSION_KEY",
        "AUTH",
        "COOKIE",
        "_PAT",
        "_DSN",
    ];
    const PREFIXES: &[&str] = &["AWS_", "GH_", "GITHUB_", "AZURE_", "GOOGLE_APPLICATION"];
    let upper = name.to_ascii_uppercase();
    PARTS.iter().any(|p| upper.contains(p))
        || PREFIXES.iter().any(|p| upper.starts_with(p))
        || upper.ends_with("_KEY")
}

/// The failed run of a gate whose program could not start in the worktree, its reason also
/// written to the gate's log (where a person and the next prompt look).
fn cannot_start(
    gate: &Gate,
    cx: &GateContext<'_>,
    source: &crate::run::exec::process::ProcessError,
) -> Result<GateRun, GateError> {
    let reason = format!(
        "it could not start in the attempt's worktree: {source} (the worktree holds the repository's tracked files only; name a program on PATH, one the repository tracks, or an absolute path)"
    );
    let text = format!("mvk: gate `{}` {reason}\n", gate.name);
    std::fs::write(&cx.log, &text).map_err(|source| GateError::Log {
        gate: gate.name.clone(),
        path: cx.log.clone(),
        source,
    })?;
    Ok(GateRun {
        gate: gate.name.clone(),
        verdict: GateVerdict::Fail,
        exit_code: None,
        timed_out: false,
        evidence: Evidence::Unknown {
            reason: "the gate did not start".into(),
        },
        reason,
        log: cx.log.clone(),
        tail: text,
        duration_ms: 0,
    })
}

/// Runs `gate` and judges it.
pub async fn run_gate(gate: &Gate, cx: &GateContext<'_>) -> Result<GateRun, GateError> {
    run_gate_counted(gate, cx, None).await
}

/// [`run_gate`], with the stop signals the gate's processes send mvk counted in `window`.
pub(crate) async fn run_gate_counted(
    gate: &Gate,
    cx: &GateContext<'_>,
    window: Option<&crate::run::exec::signals::Window>,
) -> Result<GateRun, GateError> {
    let Some((program, args)) = gate.argv.split_first() else {
        return Err(GateError::EmptyCommand {
            gate: gate.name.clone(),
        });
    };
    let nonce = evidence::new_nonce()?;
    let mut spec = ProcessSpec::new(program, cx.cwd, &cx.log, &cx.log);
    spec.group_file = Some(cx.log.with_extension("pgid"));
    spec.args = args.to_vec();
    spec.timeout = Some(cx.timeout);
    spec.env_remove = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| is_credential(k) && !gate.env.contains_key(k))
        .chain(crate::env::GIT_LOCATION_VARS.iter().map(|v| v.to_string()))
        .collect();
    spec.env = cx.env.to_vec();
    spec.env.push(("MVK_NONCE".into(), nonce.clone()));
    spec.env
        .extend(gate.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    spec.tail_bytes = 4096;
    spec.signals = window.cloned();
    if let Some(sandbox) = cx.sandbox {
        let grants = crate::run::sandbox::Grants {
            cwd: cx.cwd,
            tmp: cx.log.with_extension("tmp"),
            objects: None,
            protected: cx.protected,
            lessons: None,
        };
        match crate::run::sandbox::confine(&mut spec, sandbox, &grants) {
            Ok(()) => {}
            Err(source @ crate::run::exec::process::ProcessError::ProgramNotFound { .. }) => {
                return cannot_start(gate, cx, &source);
            }
            Err(source) => {
                return Err(GateError::Process {
                    gate: gate.name.clone(),
                    source,
                });
            }
        }
    }
    let outcome = match process::run(&spec).await {
        Ok(o) => o,
        // A program the attempt's worktree lacks (an untracked `.venv/bin/python`), or one it
        // may not execute: the gate fails, saying so, and the attempt with it; never mvk.
        // Whatever keeps the program from starting (missing, not executable, no `#!` line) is
        // the gate's failure; a spawn that failed for want of memory or processes is mvk's.
        Err(
            source @ (crate::run::exec::process::ProcessError::ProgramNotFound { .. }
            | crate::run::exec::process::ProcessError::Spawn { .. }),
        ) if !matches!(&source, crate::run::exec::process::ProcessError::Spawn { source: e, .. }
            if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::OutOfMemory)) =>
        {
            return cannot_start(gate, cx, &source);
        }
        Err(source) => {
            return Err(GateError::Process {
                gate: gate.name.clone(),
                source,
            });
        }
    };
    let log_err = |source| GateError::Log {
        gate: gate.name.clone(),
        path: cx.log.clone(),
        source,
    };
    let evidence = scan_file(gate.evidence.into(), &nonce, &cx.log).map_err(log_err)?;
    let tail = tail_of(&cx.log, TAIL_BYTES).map_err(log_err)?;
    let (exit_code, timed_out) = match outcome.termination {
        Termination::Exited(code) => (Some(code), false),
        Termination::Signaled(_) | Termination::Stopped => (None, false),
        Termination::TimedOut => (None, true),
    };
    let (verdict, mut reason) = evidence::verdict(exit_code, &evidence);
    // A linter or a build under the default `evidence=auto` never prints test evidence: say how
    // to judge it by its exit code on its first unknown, not after the attempts it burns.
    if verdict == GateVerdict::Unknown
        && gate.evidence == crate::ir::EvidenceMode::Auto
        && matches!(evidence, Evidence::Unknown { .. })
    {
        reason.push_str(
            "; if this gate runs no tests (a linter, a build), mark it evidence=none to judge it by its exit code",
        );
    }
    if timed_out {
        reason = format!(
            "timed out after {}; {reason}",
            crate::plan::format_duration(cx.timeout)
        );
    }
    Ok(GateRun {
        gate: gate.name.clone(),
        verdict,
        exit_code,
        timed_out,
        evidence,
        reason,
        log: cx.log.clone(),
        tail,
        duration_ms: u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX),
    })
}

/// Feeds a log file to a [`Scanner`] line by line; an over-long line is passed on cut, which the
/// scanner skips, so memory stays bounded whatever the gate printed.
pub(crate) fn scan_file(
    mode: evidence::EvidenceMode,
    nonce: &str,
    path: &Path,
) -> io::Result<Evidence> {
    let mut scanner = Scanner::new(mode, nonce);
    each_line(BufReader::new(File::open(path)?), |line| {
        scanner.feed_line(line);
    })?;
    Ok(scanner.finish())
}

/// How much of the end of a gate's log [`failed_tests_in_log`] reads: runners print their list
/// of failures last, and a report must not read gigabytes a gate printed.
const FAILED_SCAN_BYTES: u64 = 16 * 1024 * 1024;

/// The failing tests a gate's log names, for the report. The log is opened the way files an
/// attempt could have touched are ([`untrusted::open`]: no symlink followed, no FIFO waited
/// on), and only its last [`FAILED_SCAN_BYTES`] are read. `None` when it is gone or not a file.
///
/// [`untrusted::open`]: crate::run::exec::untrusted::open
pub(crate) fn failed_tests_in_log(path: &Path) -> io::Result<Option<FailedTests>> {
    let Some(mut file) = open_log(path)? else {
        return Ok(None);
    };
    let len = file.metadata()?.len();
    let start = len.saturating_sub(FAILED_SCAN_BYTES);
    file.seek(SeekFrom::Start(start))?;
    let mut failed = FailedTests::default();
    let mut first = start > 0;
    each_line(BufReader::new(file.take(FAILED_SCAN_BYTES)), |line| {
        // Reading from the middle of the file, the first line is a piece of one.
        if !std::mem::take(&mut first) {
            failed.feed_line(line);
        }
    })?;
    Ok(Some(failed))
}

/// [`tail_of`] for the report, opened as [`failed_tests_in_log`] opens, and whether the log was
/// longer than that; `None` when the log is gone or not a regular file.
pub(crate) fn log_tail(path: &Path, max: u64) -> io::Result<Option<(String, bool)>> {
    let Some(file) = open_log(path)? else {
        return Ok(None);
    };
    let cut = file.metadata()?.len() > max;
    Ok(Some((tail_of_file(file, max)?, cut)))
}

fn open_log(path: &Path) -> io::Result<Option<File>> {
    use crate::run::exec::untrusted::{Found, open};
    match open(path) {
        Ok(Found::Regular(file, _)) => Ok(Some(file)),
        Ok(Found::Symlink(_) | Found::Other(_)) => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Calls `f` with each line of `reader` (lossy UTF-8), keeping at most
/// [`evidence::MAX_LINE_BYTES`] + 1 bytes of a line: more than any matcher accepts, so an
/// over-long line is passed on cut and skipped, and memory stays bounded.
fn each_line(mut reader: impl BufRead, mut f: impl FnMut(&str)) -> io::Result<()> {
    let limit = evidence::MAX_LINE_BYTES + 1;
    let mut line = Vec::with_capacity(1024);
    loop {
        line.clear();
        let mut overlong = false;
        // Read one line, keeping at most `limit` bytes of it.
        loop {
            let buf = reader.fill_buf()?;
            if buf.is_empty() {
                break;
            }
            let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..=i], true),
                None => (buf, false),
            };
            let room = limit.saturating_sub(line.len());
            if chunk.len() > room {
                overlong = true;
            }
            line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            let used = chunk.len();
            reader.consume(used);
            if done {
                break;
            }
        }
        if line.is_empty() && !overlong {
            return Ok(());
        }
        f(&String::from_utf8_lossy(&line));
    }
}

/// The last `max` bytes of a file as text, cut at a line boundary when there is one.
pub(crate) fn tail_of(path: &Path, max: u64) -> io::Result<String> {
    tail_of_file(File::open(path)?, max)
}

fn tail_of_file(mut f: File, max: u64) -> io::Result<String> {
    let len = f.metadata()?.len();
    let start = len.saturating_sub(max);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    if start > 0
        && let Some(nl) = text.find('\n')
        && nl + 1 < text.len()
    {
        return Ok(text[nl + 1..].to_string());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn gate(script: &str, mode: crate::ir::EvidenceMode) -> Gate {
        Gate {
            name: "g".into(),
            argv: vec!["sh".into(), "-c".into(), script.into()],
            env: BTreeMap::new(),
            evidence: mode,
            timeout: Duration::from_secs(30),
            from: None,
            doc: None,
        }
    }

    async fn run(script: &str, mode: crate::ir::EvidenceMode) -> GateRun {
        let dir = tempfile::tempdir().unwrap();
        let cx = GateContext {
            cwd: dir.path(),
            env: &[],
            log: dir.path().join("g.log"),
            timeout: Duration::from_secs(30),
            sandbox: None,
            protected: &[],
        };
        run_gate(&gate(script, mode), &cx).await.unwrap()
    }

    #[tokio::test]
    async fn the_nonce_line_proves_and_a_stale_one_does_not() {
        use crate::ir::EvidenceMode::Nonce;
        let good = r#"echo "MVK_EVIDENCE={\"schema\":\"mvk.evidence.v1\",\"nonce\":\"$MVK_NONCE\",\"executed\":2,\"passed\":2,\"failed\":0,\"skipped\":0}""#;
        let r = run(good, Nonce).await;
        assert_eq!(r.verdict, GateVerdict::Pass, "{}", r.reason);
        let stale = r#"echo 'MVK_EVIDENCE={"schema":"mvk.evidence.v1","nonce":"00000000000000000000000000000000","executed":2,"passed":2,"failed":0,"skipped":0}'"#;
        let r = run(stale, Nonce).await;
        assert_eq!(r.verdict, GateVerdict::Unknown, "{}", r.reason);
    }

    /// Runs `script` as a nonce-evidence gate `times` times in one directory; out come the
    /// runs whose evidence was not proven, with their reasons.
    async fn unproven(script: &str, times: usize) -> Vec<(usize, String)> {
        let dir = tempfile::tempdir().unwrap();
        let cx = GateContext {
            cwd: dir.path(),
            env: &[],
            log: dir.path().join("g.log"),
            timeout: Duration::from_secs(30),
            sandbox: None,
            protected: &[],
        };
        let gate = gate(script, crate::ir::EvidenceMode::Nonce);
        let mut lost = Vec::new();
        for i in 0..times {
            let r = run_gate(&gate, &cx).await.unwrap();
            if r.verdict != GateVerdict::Pass {
                lost.push((i, r.reason));
            }
        }
        lost
    }

    const EVIDENCE: &str = r#"{\"schema\":\"mvk.evidence.v1\",\"nonce\":\"$MVK_NONCE\",\"executed\":3,\"passed\":3,\"failed\":0,\"skipped\":0}"#;

    // Guards against the race of two pipes into one log: a runner's report on stderr, written
    // a piece at a time as Python's unittest writes it, then the evidence line on stdout lost
    // the evidence in about one run in five.
    #[tokio::test]
    async fn evidence_after_a_report_on_stderr_is_found_every_time() {
        let script = format!(
            "for t in 1 2 3; do printf . >&2; done; \
             printf '\\n----------------------------------------------------------------------\\n' >&2; \
             printf 'Ran 3 tests in 0.001s\\n\\nOK\\n' >&2; echo \"MVK_EVIDENCE={EVIDENCE}\""
        );
        let lost = unproven(&script, 500).await;
        assert!(
            lost.is_empty(),
            "{} of 500 lost: {:?}",
            lost.len(),
            lost.first()
        );
    }

    // The same with partial lines, no newline between writes, alternating between the streams:
    // what the gate wrote in order reaches the scanner in order.
    #[tokio::test]
    async fn evidence_among_interleaved_partial_lines_is_found_every_time() {
        let script = format!(
            "for t in 1 2 3; do printf . >&2; printf 'test %s ' $t; printf 'ok' >&2; printf '\\n'; done; \
             printf '\\nRan 3' >&2; printf ' tests\\n' >&2; printf 'MVK_EVID'; printf \"ENCE={EVIDENCE}\"; \
             printf '\\n'; printf 'OK' >&2; printf '\\n' >&2"
        );
        let lost = unproven(&script, 500).await;
        assert!(
            lost.is_empty(),
            "{} of 500 lost: {:?}",
            lost.len(),
            lost.first()
        );
    }

    #[tokio::test]
    async fn long_lines_are_survived_and_the_tail_is_bounded() {
        let r = run(
            "head -c 300000 /dev/zero | tr '\\0' x; echo; echo done",
            crate::ir::EvidenceMode::None,
        )
        .await;
        assert_eq!(r.verdict, GateVerdict::Pass, "{}", r.reason);
        assert!(r.tail.ends_with("done\n"), "{:?}", r.tail);
        assert!(r.tail.len() <= TAIL_BYTES as usize);
    }

    #[tokio::test]
    async fn a_gate_that_prints_no_evidence_under_auto_says_how_to_judge_it_by_its_exit_code() {
        let r = run("echo 'All checks passed!'", crate::ir::EvidenceMode::Auto).await;
        assert_eq!(r.verdict, GateVerdict::Unknown, "{}", r.reason);
        assert!(r.reason.contains("mark it evidence=none"), "{}", r.reason);
        // A gate that asked for a runner's summary is told nothing of the sort.
        let r = run("echo 'All checks passed!'", crate::ir::EvidenceMode::Pytest).await;
        assert_eq!(r.verdict, GateVerdict::Unknown, "{}", r.reason);
        assert!(!r.reason.contains("evidence=none"), "{}", r.reason);
    }

    #[test]
    fn credential_names() {
        for name in [
            "ANTHROPIC_API_KEY",
            "GITHUB_TOKEN",
            "AWS_REGION",
            "db_password",
        ] {
            assert!(is_credential(name), "{name}");
        }
        for name in ["PATH", "HOME", "CARGO_HOME", "LANG"] {
            assert!(!is_credential(name), "{name}");
        }
    }
}
