//! One notification and its message in; out, whether it went: the webhook POSTed (ureq) or the
//! command run, each try bounded by the notification's timeout, tried again after a pause on
//! what may pass (a connection error, a timeout, a 5xx, 408 or 429, a command that failed),
//! never on a refusal (another 4xx, a redirect). Secrets are read from the environment here, at
//! the last moment, and every word said of a failure has them replaced by their variable's name.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::ir::{Channel, Notify, Secret, WebhookFormat};

use super::message::{Context, Message};

/// The pause before the first retry; each next one is twice as long, up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_secs(1);
const MAX_PAUSE: Duration = Duration::from_secs(8);
/// The longest `Retry-After` obeyed: a service that asks for more is given up on sooner.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// How much of a refusing service's answer is kept for the failure's words.
const ANSWER_CHARS: usize = 200;

/// How a notification's sending ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Tries made.
    pub(crate) tries: u32,
    /// `None`: it went; else why the last try failed (no secret in it).
    pub(crate) error: Option<String>,
}

/// The longest one notification may take, all its tries and pauses included: what the end of a
/// run waits for it at most.
pub(crate) fn bound(n: &Notify) -> Duration {
    let tries = n.retries.saturating_add(1);
    let mut total = n.timeout.saturating_mul(tries);
    for k in 0..n.retries {
        total = total.saturating_add(pause(k, None));
    }
    total
}

/// The pause before retry `k` (0-based): doubling from [`FIRST_PAUSE`], or what the service
/// asked for, within bounds.
fn pause(k: u32, retry_after: Option<Duration>) -> Duration {
    let doubling = FIRST_PAUSE
        .saturating_mul(1u32.checked_shl(k).unwrap_or(u32::MAX))
        .min(MAX_PAUSE);
    retry_after.map_or(doubling, |r| r.min(MAX_RETRY_AFTER))
}

/// Why one try failed, and whether another may do better.
struct Failed {
    why: String,
    again: bool,
    retry_after: Option<Duration>,
}

/// Sends `message` through `n`, trying again as its `retries` allow; `log` is where a command's
/// output goes.
pub(crate) fn send(n: &Notify, message: &Message, cx: &Context, id: &str, log: &Path) -> Sent {
    let secrets = Secrets::of(n);
    let mut tries = 0;
    loop {
        tries += 1;
        let result = match &n.channel {
            Channel::Webhook {
                url,
                format,
                headers,
            } => webhook(n, (url, *format, headers), message, cx, id),
            Channel::Command { .. } | Channel::Shell { .. } => command(n, message, cx, id, log),
        };
        match result {
            Ok(()) => return Sent { tries, error: None },
            Err(f) if f.again && tries <= n.retries => {
                tracing::info!(notification = %n.name, why = %secrets.redact(&f.why), "notification failed; trying again");
                std::thread::sleep(pause(tries - 1, f.retry_after));
            }
            Err(f) => {
                return Sent {
                    tries,
                    error: Some(secrets.redact(&f.why)),
                };
            }
        }
    }
}

/// The values read from the environment for one notification, with the names shown instead.
struct Secrets(Vec<(String, String)>);

impl Secrets {
    fn of(n: &Notify) -> Secrets {
        let mut out = Vec::new();
        if let Channel::Webhook { url, headers, .. } = &n.channel {
            for s in std::iter::once(url).chain(headers.iter().map(|(_, v)| v)) {
                if let Secret::Env { var, .. } = s
                    && let Some(value) = std::env::var(var).ok().filter(|v| !v.is_empty())
                {
                    // The URL's path alone is the secret of many services: hide it on its own too.
                    if let Some(path) = value.find("://").and_then(|i| {
                        let rest = &value[i + 3..];
                        rest.find('/').map(|j| &rest[j..])
                    }) && path.len() > 1
                    {
                        out.push((path.to_string(), format!("${var}")));
                    }
                    out.push((value, format!("${var}")));
                }
            }
        }
        // The longest first, so a value that holds another is replaced whole.
        out.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
        Secrets(out)
    }

    fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (value, name) in &self.0 {
            out = out.replace(value.as_str(), name);
        }
        out
    }
}

/// A value as it is sent: the literal, or the variable's value after its prefix.
fn reveal(s: &Secret) -> Result<String, String> {
    match s {
        Secret::Literal(v) => Ok(v.clone()),
        Secret::Env { var, prefix } => match std::env::var(var) {
            Ok(v) if !v.is_empty() => Ok(format!("{prefix}{v}")),
            Ok(_) => Err(format!("`${var}` is empty")),
            Err(std::env::VarError::NotPresent) => Err(format!("`${var}` is not set")),
            Err(std::env::VarError::NotUnicode(_)) => Err(format!("`${var}` is not UTF-8")),
        },
    }
}

/// How a URL is named in words: the literal, or its variable.
fn shown(s: &Secret) -> String {
    match s {
        Secret::Literal(v) => v.clone(),
        Secret::Env { var, .. } => format!("${var}"),
    }
}

fn webhook(
    n: &Notify,
    (url, format, headers): (&Secret, WebhookFormat, &[(String, Secret)]),
    message: &Message,
    cx: &Context,
    id: &str,
) -> Result<(), Failed> {
    let refuse = |why: String| Failed {
        why,
        again: false,
        retry_after: None,
    };
    let target = reveal(url).map_err(refuse)?;
    if let Some(crate::syntax::notify::UrlProblem::Malformed(why)) =
        crate::syntax::notify::url_problem(&target)
    {
        return Err(refuse(format!(
            "{} is not a webhook URL: {why}",
            shown(url)
        )));
    }
    let body = match format {
        WebhookFormat::Json => message.body(cx, &n.name, id),
        WebhookFormat::Slack => message.slack(cx),
    };
    let config = ureq::Agent::config_builder()
        .timeout_global(Some(n.timeout))
        .http_status_as_error(false)
        // A POST redirected becomes a GET without its body: a webhook must answer itself.
        .max_redirects(0)
        .user_agent(format!("mvk/{}", env!("CARGO_PKG_VERSION")))
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::PlatformVerifier)
                .build(),
        )
        .build();
    let agent = ureq::Agent::new_with_config(config);
    let mut request = agent
        .post(&target)
        .header("Content-Type", "application/json")
        .header("X-Mvk-Event", message.event.name())
        .header("X-Mvk-Delivery", id);
    for (name, value) in headers {
        request = request.header(name, &reveal(value).map_err(refuse)?);
    }
    let response = match request.send(body.to_string().as_bytes()) {
        Ok(r) => r,
        Err(ureq::Error::Timeout(_)) => {
            return Err(Failed {
                why: format!(
                    "{} gave no answer within {}",
                    shown(url),
                    humantime::format_duration(n.timeout)
                ),
                again: true,
                retry_after: None,
            });
        }
        Err(e) => {
            return Err(Failed {
                why: format!("cannot reach {}: {e}", shown(url)),
                again: !matches!(e, ureq::Error::BadUri(_) | ureq::Error::Tls(_)),
                retry_after: None,
            });
        }
    };
    let status = response.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(());
    }
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let mut answer = String::new();
    let _ = response
        .into_body()
        .into_reader()
        .take(4 * 1024)
        .read_to_string(&mut answer);
    let answer: String = answer.trim().chars().take(ANSWER_CHARS).collect();
    let said = if answer.is_empty() {
        String::new()
    } else {
        format!(": {answer}")
    };
    Err(Failed {
        why: format!("{} answered HTTP {status}{said}", shown(url)),
        again: status >= 500 || status == 408 || status == 429,
        retry_after,
    })
}

/// The environment variable a field of the event is set in for a command: `MVK_` and its name
/// in capitals (`MVK_TASK`, `MVK_EXIT_CODE`).
pub(crate) fn field_var(name: &str) -> String {
    format!("MVK_{}", name.to_ascii_uppercase())
}

fn command(
    n: &Notify,
    message: &Message,
    cx: &Context,
    id: &str,
    log: &Path,
) -> Result<(), Failed> {
    let refuse = |why: String| Failed {
        why,
        again: false,
        retry_after: None,
    };
    let field = |name: &str| message.field(cx, &n.name, name);
    let argv: Vec<String> = match &n.channel {
        Channel::Command { argv } => argv
            .iter()
            .map(|a| {
                crate::resolve::interp::interpolate(a, &field, &[])
                    .map(std::borrow::Cow::into_owned)
                    .map_err(|e| refuse(format!("cannot fill `{a}`: {e:?}")))
            })
            .collect::<Result<_, _>>()?,
        Channel::Shell { script } => vec!["sh".into(), "-c".into(), script.clone()],
        Channel::Webhook { .. } => return Err(refuse("not a command".into())),
    };
    let Some((program, args)) = argv.split_first() else {
        return Err(refuse("the command is empty".into()));
    };
    let output =
        open_log(log).map_err(|e| refuse(format!("cannot open `{}`: {e}", log.display())))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(output.try_clone().map_or(Stdio::null(), Stdio::from))
        .stderr(Stdio::from(output));
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    for name in crate::resolve::notify::PLACEHOLDERS {
        cmd.env(field_var(name), field(name).unwrap_or_default());
    }
    cmd.env("MVK_NOTIFY_ID", id);
    let spawning = crate::run::exec::reaper::spawning();
    let mut child = cmd.spawn().map_err(|e| Failed {
        why: format!("cannot start `{program}`: {e}"),
        again: e.kind() != std::io::ErrorKind::NotFound,
        retry_after: None,
    })?;
    // mvk is a subreaper that ends and reaps the children it did not register between an
    // attempt's steps (see `reaper`): this one is its own until it is reaped here.
    let _own = crate::run::exec::reaper::own(i32::try_from(child.id()).unwrap_or(i32::MAX));
    drop(spawning);
    if let Some(mut stdin) = child.stdin.take() {
        // A command that reads no input closes the pipe: that is its right.
        let _ = stdin.write_all(message.body(cx, &n.name, id).to_string().as_bytes());
    }
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() >= n.timeout => {
                let pid = rustix::process::Pid::from_child(&child);
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
                let _ = child.kill();
                let _ = child.wait();
                return Err(Failed {
                    why: format!(
                        "`{program}` did not finish within {} (its output: {})",
                        humantime::format_duration(n.timeout),
                        log.display()
                    ),
                    again: true,
                    retry_after: None,
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(refuse(format!("cannot wait for `{program}`: {e}"))),
        }
    };
    if status.success() {
        return Ok(());
    }
    let how = status.code().map_or_else(
        || "was killed by a signal".to_string(),
        |c| format!("exited with {c}"),
    );
    Err(Failed {
        why: format!("`{program}` {how} (its output: {})", log.display()),
        again: true,
        retry_after: None,
    })
}

fn open_log(log: &Path) -> std::io::Result<std::fs::File> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
}

/// Where notification `name`'s commands write their output in the run's directory.
pub(crate) fn log_path(run_dir: &Path, name: &str) -> PathBuf {
    run_dir
        .join("notify")
        .join(format!("{}.log", crate::slug::slug(name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_to_a_ceiling_and_obey_a_service_within_bounds() {
        assert_eq!(pause(0, None), Duration::from_secs(1));
        assert_eq!(pause(2, None), Duration::from_secs(4));
        assert_eq!(pause(9, None), MAX_PAUSE);
        assert_eq!(pause(40, None), MAX_PAUSE);
        assert_eq!(
            pause(0, Some(Duration::from_secs(5))),
            Duration::from_secs(5)
        );
        assert_eq!(pause(0, Some(Duration::from_secs(600))), MAX_RETRY_AFTER);
    }

    #[test]
    fn a_secret_and_its_path_are_named_by_their_variable() {
        let s = Secrets(vec![
            ("https://hooks.example/T0/B0/s3cr3t".into(), "$HOOK".into()),
            ("/T0/B0/s3cr3t".into(), "$HOOK".into()),
        ]);
        assert_eq!(
            s.redact(
                "cannot reach https://hooks.example/T0/B0/s3cr3t: refused (path /T0/B0/s3cr3t)"
            ),
            "cannot reach $HOOK: refused (path $HOOK)"
        );
    }
}
