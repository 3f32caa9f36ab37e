//! [`Tmux`]: a terminal of a fixed size, for what a person sees: a tmux server of the test's own
//! (its own socket) running `mvk` in a fixture's repository, typed into with `send-keys` and read
//! with `capture-pane`. tmux must be installed (`tests/tools/install.sh` installs it): a test
//! without it fails, never skips.

// The helpers unwrap too: a panic there is the failure report.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use super::*;

/// How long [`Tmux::wait_for`] waits before it fails: a bound on a failure, never a pause.
const DEADLINE: Duration = Duration::from_secs(90);

/// A tmux server running one `mvk` command in a pane; killed when dropped.
pub(crate) struct Tmux {
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    /// Runs `mvk ARGS…` in FIXTURE's repository in a pane of `(width, height)`, with mvk's
    /// hermetic environment changed by ENV (a value sets, `None` removes). The pane stays after
    /// mvk exits, with `[mvk exited CODE]` under what it left.
    pub(crate) fn mvk(
        fixture: &Fixture,
        args: &[&str],
        (width, height): (u16, u16),
        env: &[(&str, Option<&str>)],
    ) -> Tmux {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("tmux.sock");
        let mvk = fixture.mvk_std();
        let mut line = format!("'{}'", mvk.get_program().to_string_lossy());
        for a in args {
            line.push_str(&format!(" '{a}'"));
        }
        line.push_str("; echo \"[mvk exited $?]\"; sleep 600");
        let mut tmux = Command::new("tmux");
        // The server takes the environment of the command that starts it: mvk's hermetic one.
        for (name, value) in mvk.get_envs() {
            match value {
                Some(v) => tmux.env(name, v),
                None => tmux.env_remove(name),
            };
        }
        for (name, value) in env {
            match value {
                Some(v) => tmux.env(name, v),
                None => tmux.env_remove(name),
            };
        }
        tmux.env_remove("TMUX")
            .arg("-S")
            .arg(&socket)
            .args(["-f", "/dev/null", "new-session", "-d", "-x"])
            .arg(width.to_string())
            .arg("-y")
            .arg(height.to_string())
            .arg("-c")
            .arg(fixture.root())
            .arg(&line);
        let out = tmux
            .output()
            .expect("run tmux (tests/tools/install.sh installs it: apt-get install tmux)");
        assert!(
            out.status.success(),
            "tmux did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmux { socket, _dir: dir }
    }

    /// Runs tmux ARGS against this server; its standard output.
    pub(crate) fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .env_remove("TMUX")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types KEYS (tmux key names: `a`, `Enter`, `C-c`, or text).
    pub(crate) fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// The pane as it shows now.
    pub(crate) fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p"])
    }

    /// The pane as it shows now, with its cells' attributes and colours as escape sequences.
    pub(crate) fn screen_with_attributes(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-e"])
    }

    /// The pane with its history: everything written to it.
    pub(crate) fn everything(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-S", "-"])
    }

    /// The screen once `done` holds for it, polled until [`DEADLINE`].
    pub(crate) fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "no {what} within {}s; the pane shows:\n{}",
                DEADLINE.as_secs(),
                self.everything()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}
