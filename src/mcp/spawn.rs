//! A command line for this very executable in; the command started out: [`wait`] runs it to its
//! end (in a session of its own, so it outlives a client that leaves mid-call) and hands back
//! what it printed, [`detached`] starts it in a session of its own (so a long
//! run outlives the request, the server and its client, whose signals and hang-ups do not reach
//! it), its output in files under `.mvk/mcp/` (named by the run once it is known), and answers
//! with the run id the command prints first.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rmcp::ErrorData;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::session::{SESSION, START_TIMEOUT};

/// How often the command's output file is looked at while waiting for the run id.
const POLL: Duration = Duration::from_millis(50);

/// A command started in the background.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Started {
    /// The run it started or continues: `status` follows it.
    pub(crate) run: String,
    /// The command line, as a person would type it.
    pub(crate) command: String,
    /// Its process id; it leads a session and a process group of its own.
    pub(crate) pid: u32,
    /// Its standard output (the run id, then the summary) and error (progress, errors).
    pub(crate) stdout: PathBuf,
    pub(crate) stderr: PathBuf,
}

/// What a command that ran to its end printed.
pub(crate) struct Finished {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

fn exe() -> Result<&'static Path, ErrorData> {
    crate::exe::path().map_err(|e| {
        ErrorData::internal_error(format!("cannot find mvk's own executable: {e}"), None)
    })
}

/// Runs `mvk GLOBAL ARGS` in DIR to its end, in a session of its own (as [`detached`] does): a
/// client that goes away mid-call, and kills the server's process group or session as it goes,
/// leaves the command to finish and record its run. Once the server is gone its pipes are closed;
/// the command drops what it can no longer print (it never panics on a closed pipe) and goes on.
pub(crate) async fn wait(
    dir: &Path,
    global: &[String],
    args: &[String],
) -> Result<Finished, ErrorData> {
    let out = tokio::process::Command::new(exe()?)
        .arg(SESSION)
        .args(global)
        .args(args)
        .current_dir(dir)
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

/// Starts `mvk GLOBAL ARGS` detached in DIR, its output in `.mvk/mcp/` of `repo_root`, and
/// returns when it has printed its run id (its first line); when it ends first, what it printed
/// on standard error is the error.
pub(crate) async fn detached(
    dir: &Path,
    repo_root: &Path,
    global: &[String],
    args: &[String],
) -> Result<Started, ErrorData> {
    let mut cmd = std::process::Command::new(exe()?);
    cmd.arg(SESSION).args(global).args(args).current_dir(dir);
    let command = format!("mvk {}", args.join(" "));
    let name = args.first().map_or("mvk", String::as_str);
    launch(cmd, repo_root, name, command, START_TIMEOUT).await
}

/// Starts CMD with its output in `.mvk/mcp/<stamp>-<name>.out` and `.err` and waits up to
/// TIMEOUT for it to print a run id; see [`detached`].
async fn launch(
    mut cmd: std::process::Command,
    repo_root: &Path,
    name: &str,
    command: String,
    timeout: Duration,
) -> Result<Started, ErrorData> {
    let io = |what: &str, path: &Path, e: std::io::Error| {
        ErrorData::internal_error(format!("cannot {what} `{}`: {e}", path.display()), None)
    };
    let dir = repo_root.join(".mvk").join("mcp");
    std::fs::create_dir_all(&dir).map_err(|e| io("create", &dir, e))?;
    let stamp = crate::run::driver::new_run_id()
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    let base = dir.join(format!("{stamp}-{name}"));
    let stdout = base.with_extension("out");
    let stderr = base.with_extension("err");
    let out_file = std::fs::File::create(&stdout).map_err(|e| io("create", &stdout, e))?;
    let err_file = std::fs::File::create(&stderr).map_err(|e| io("create", &stderr, e))?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out_file)
        .stderr(err_file)
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
    // What it printed on standard error, then its files go: the error carries their content.
    let printed = || {
        let text = std::fs::read_to_string(&stderr).unwrap_or_default();
        let _ = std::fs::remove_file(&stdout);
        let _ = std::fs::remove_file(&stderr);
        text
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
                return Err(super::failed(name, status.code().unwrap_or(-1), &printed()));
            }
            Ok(None) => {}
            Err(e) => {
                // Not left running unseen, nor unreaped.
                let _ = child.kill();
                let _ = child.wait();
                return Err(ErrorData::internal_error(
                    format!("cannot wait for `{command}` (stopped it): {e}"),
                    Some(json!({"pid": pid})),
                ));
            }
        }
        if started.elapsed() > timeout {
            // Stopped and reaped (no zombie of this server), so no run goes on unseen.
            let _ = child.kill();
            let ended = child.wait();
            return Err(ErrorData::internal_error(
                format!(
                    "`{command}` named no run within {}s and was stopped (pid {pid}, {}); it printed:\n{}",
                    timeout.as_secs_f64(),
                    match ended {
                        Ok(status) => status.to_string(),
                        Err(e) => format!("not reaped: {e}"),
                    },
                    printed().trim_end()
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn sh(script: &str) -> std::process::Command {
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", script]);
        cmd
    }

    fn files(root: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(root.join(".mvk/mcp"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Regression: a command that named no run in time was left running, and once it ended it
    /// stayed a zombie of the server (never waited for).
    #[tokio::test]
    async fn a_command_that_names_no_run_in_time_is_stopped_and_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let e = launch(
            sh("echo still compiling >&2; exec sleep 60"),
            dir.path(),
            "apply",
            "mvk apply x".into(),
            Duration::from_millis(300),
        )
        .await
        .unwrap_err();
        assert!(e.message.contains("named no run"), "{}", e.message);
        assert!(e.message.contains("still compiling"), "{}", e.message);
        let pid = e.data.unwrap()["pid"].as_u64().unwrap();
        // Reaped: no process, not even a zombie, has its pid any more.
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "pid {pid} lingers"
        );
        assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
    }

    #[tokio::test]
    async fn a_command_that_fails_before_naming_a_run_is_an_error_with_what_it_printed() {
        let dir = tempfile::tempdir().unwrap();
        let e = launch(
            sh("echo 'error: no such file' >&2; exit 64"),
            dir.path(),
            "apply",
            "mvk apply x".into(),
            START_TIMEOUT,
        )
        .await
        .unwrap_err();
        assert!(e.message.contains("no such file"), "{}", e.message);
        assert_eq!(e.data.unwrap()["exit_code"], 64);
        // Its output is in the error; no file is left for anyone to clean up.
        assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
    }

    #[tokio::test]
    async fn the_output_of_a_named_run_is_kept_under_its_id() {
        let dir = tempfile::tempdir().unwrap();
        let started = launch(
            sh("echo 20261203T100000-abcd; echo done"),
            dir.path(),
            "resume",
            "mvk resume".into(),
            START_TIMEOUT,
        )
        .await
        .unwrap();
        assert_eq!(started.run, "20261203T100000-abcd");
        let name = started.stdout.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with("20261203T100000-abcd.") && name.ends_with("-resume.out"),
            "{name}"
        );
    }
}
