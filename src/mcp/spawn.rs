//! A command line for this very executable in; the command started out: [`wait`] runs it to its
//! end and hands back what it printed, [`detached`] starts it in a process group and session
//! of its own (so a long run outlives the request, and the client's signals do not reach it),
//! its output in files under `.mvk/mcp/` (named by the run once it is known), and answers with the run id the command prints first.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rmcp::ErrorData;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// How long a started command may take to name its run (compiling, taking the run lock).
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How often the command's output file is looked at while waiting for the run id.
const POLL: Duration = Duration::from_millis(50);

/// A command started in the background.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Started {
    /// The run it started or continues: `status` follows it.
    pub run: String,
    /// The command line, as a person would type it.
    pub command: String,
    /// Its process id.
    pub pid: u32,
    /// Its standard output (the run id, then the summary) and error (progress, errors).
    pub stdout: PathBuf,
    pub stderr: PathBuf,
}

/// What a command that ran to its end printed.
pub struct Finished {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

fn exe() -> Result<PathBuf, ErrorData> {
    std::env::current_exe().map_err(|e| {
        ErrorData::internal_error(format!("cannot find mvk's own executable: {e}"), None)
    })
}

/// Runs `mvk GLOBAL ARGS` to its end.
pub async fn wait(global: &[String], args: &[String]) -> Result<Finished, ErrorData> {
    let out = tokio::process::Command::new(exe()?)
        .args(global)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| {
            ErrorData::internal_error(format!("cannot run `mvk {}`: {e}", args.join(" ")), None)
        })?;
    Ok(Finished {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// Starts `mvk GLOBAL ARGS` detached, its output in `.mvk/mcp/` of `repo_root`, and returns
/// when it has printed its run id (its first line); when it ends first, what it printed on
/// standard error is the error.
pub async fn detached(
    repo_root: &Path,
    global: &[String],
    args: &[String],
) -> Result<Started, ErrorData> {
    use std::os::unix::process::CommandExt as _;
    let command = format!("mvk {}", args.join(" "));
    let io = |what: &str, path: &Path, e: std::io::Error| {
        ErrorData::internal_error(format!("cannot {what} `{}`: {e}", path.display()), None)
    };
    let dir = repo_root.join(".mvk").join("mcp");
    std::fs::create_dir_all(&dir).map_err(|e| io("create", &dir, e))?;
    let stamp = crate::run::driver::new_run_id()
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    let base = dir.join(format!("{stamp}-{}", args[0]));
    let stdout = base.with_extension("out");
    let stderr = base.with_extension("err");
    let out_file = std::fs::File::create(&stdout).map_err(|e| io("create", &stdout, e))?;
    let err_file = std::fs::File::create(&stderr).map_err(|e| io("create", &stderr, e))?;
    let mut child = std::process::Command::new(exe()?)
        .args(global)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out_file)
        .stderr(err_file)
        // Its own process group: the client's Ctrl-C or the server's end does not stop the run.
        .process_group(0)
        .spawn()
        .map_err(|e| ErrorData::internal_error(format!("cannot start `{command}`: {e}"), None))?;
    let pid = child.id();
    let started = std::time::Instant::now();
    let first_line = || {
        std::fs::read_to_string(&stdout)
            .ok()
            .and_then(|t| t.split_once('\n').map(|(l, _)| l.trim().to_string()))
            .filter(|l| !l.is_empty())
    };
    let run = loop {
        if let Some(line) = first_line() {
            break line;
        }
        match child.try_wait() {
            Ok(Some(status)) => {
                // It may have printed its id just before it ended.
                if let Some(line) = first_line() {
                    break line;
                }
                let printed = std::fs::read_to_string(&stderr).unwrap_or_default();
                return Err(super::failed(
                    &args[0],
                    status.code().unwrap_or(-1),
                    &printed,
                ));
            }
            Ok(None) => {}
            Err(e) => {
                return Err(ErrorData::internal_error(
                    format!("cannot wait for `{command}`: {e}"),
                    None,
                ));
            }
        }
        if started.elapsed() > START_TIMEOUT {
            return Err(ErrorData::internal_error(
                format!(
                    "`{command}` named no run within {}s; it goes on (pid {pid}), its output is in `{}`",
                    START_TIMEOUT.as_secs(),
                    stdout.display()
                ),
                Some(json!({"pid": pid})),
            ));
        }
        tokio::time::sleep(POLL).await;
    };
    // Reaped when it ends, so it never lingers as a zombie of this server.
    std::thread::spawn(move || child.wait());
    // Named by the run from now on (the command writes on through its open files), so that
    // `mvk gc` removes them with the run's branches.
    let (stdout, stderr) = if run.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        // `<run>.<stamp>-<command>.out`: the stamp keeps a second resume of a run apart.
        let named = |path: &Path| {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            dir.join(format!("{run}.{}", name.unwrap_or_default()))
        };
        let (out, err) = (named(&stdout), named(&stderr));
        match (
            std::fs::rename(&stdout, &out),
            std::fs::rename(&stderr, &err),
        ) {
            (Ok(()), Ok(())) => (out, err),
            (Ok(()), Err(_)) => (out, stderr),
            (Err(_), Ok(())) => (stdout, err),
            (Err(_), Err(_)) => (stdout, stderr),
        }
    } else {
        (stdout, stderr)
    };
    Ok(Started {
        run,
        command,
        pid,
        stdout,
        stderr,
    })
}
