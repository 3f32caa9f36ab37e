//! A `notify` node in (at the top level, in a loop, a flow or a task); out comes a
//! [`NotifyDecl`]: the events it fires on, the channel (a command, a shell script or a webhook),
//! its timeout and retries, or the definition it uses.
//!
//! Secrets stay out of the file: a webhook's URL or a header's value may be named by the
//! environment variable that holds it (`env="SLACK_WEBHOOK_URL"`), and a literal that looks like
//! a credential (a Slack or Discord webhook URL, a token in a query, an `Authorization` header) is
//! refused, since the file is committed and the ledger keeps the sources of every run.

use super::ast::{ChannelDecl, Command, NotifyDecl, SecretDecl, Spanned};
use super::items::{command, env_name_ok, name_arg};
use super::{Cx, NodeView, duplicate_node, unknown_node, values};
use crate::diag::{Diagnostic, suggest};
use crate::ir::{NOTIFY_OUTCOMES, NotifyEvent, WebhookFormat};
use crate::source::Span;

const PROPS: &[&str] = &["use", "on", "at", "outcome", "timeout", "retries"];
const CHILDREN: &[&str] = &["run", "sh", "webhook"];
const USAGE: &str =
    "notify NAME on=\"waiting finished\" { webhook env=\"SLACK_WEBHOOK_URL\" format=\"slack\" }";

/// Lowers `notify …`; `siblings` are the `notify` nodes of the same block so far.
pub(crate) fn notify(
    cx: &mut Cx<'_>,
    view: &mut NodeView<'_>,
    siblings: &[NotifyDecl],
) -> Option<NotifyDecl> {
    let uses = view
        .take("use")
        .and_then(|e| values::nonempty(cx, e, "`use`"));
    let on = view.take("on").and_then(|e| events(cx, e));
    let at = view.take("at").and_then(|e| {
        values::fraction(
            cx,
            e,
            "`at`",
            "at=0.8 to hear when 80% of a budget is spent",
        )
    });
    let outcomes = view.take("outcome").and_then(|e| outcomes(cx, e));
    let timeout = view
        .take("timeout")
        .and_then(|e| values::duration(cx, e, "`timeout`"));
    let retries = view.take("retries").and_then(|e| {
        values::count(cx, e, "`retries`", 0, crate::ir::MAX_NOTIFY_RETRIES)
            .and_then(|n| u32::try_from(n.node).ok().map(|v| Spanned::new(v, n.span)))
    });
    view.finish(cx, PROPS);
    let name = if view.expect_args(cx, 1, USAGE) {
        name_arg(cx, view, USAGE)
    } else {
        None
    };
    let mut channel: Option<Spanned<ChannelDecl>> = None;
    for child in view.children() {
        let mut cv = NodeView::new(cx, child);
        if !CHILDREN.contains(&cv.name.node.as_str()) {
            unknown_node(cx, &cv, "a notification", CHILDREN);
            continue;
        }
        if let Some(first) = &channel {
            duplicate_node(
                cx,
                &cv,
                first.span,
                "a notification is sent one way: keep one `run`, `sh` or `webhook`, and write another `notify` for another",
            );
            continue;
        }
        let decl = match cv.name.node.as_str() {
            "webhook" => webhook(cx, &mut cv),
            _ => command(cx, &mut cv).and_then(|c| {
                let span = c.span;
                shell_without_placeholders(cx, &c.node)
                    .then(|| Spanned::new(ChannelDecl::Command(c.node), span))
            }),
        };
        channel = decl.or(channel);
    }
    let name = name?;
    if let Some(first) = siblings.iter().find(|n| n.name.node == name.node) {
        cx.push(
            Diagnostic::error(
                "mvk::duplicate-name",
                format!("notification `{}` is declared twice here", name.node),
            )
            .at(name.span, "declared again here")
            .also(first.name.span, "first declared here")
            .help("give each notification of a block its own name; one of the same name in an inner block (a task) replaces this one there"),
        );
        return None;
    }
    match (&uses, &channel) {
        (Some(u), Some(c)) => {
            cx.push(
                Diagnostic::error(
                    "mvk::notify-use-and-channel",
                    format!("notification `{}` uses `{}` and says how to send as well", name.node, u.node),
                )
                .at(c.span, "a channel of its own")
                .also(u.span, "the definition it uses")
                .help("a notification that uses a definition is sent as the definition says; it may set `on`, `at`, `outcome`, `timeout` and `retries`"),
            );
            return None;
        }
        (None, None) if view.children().is_empty() => {
            cx.push(
                Diagnostic::error(
                    "mvk::notify-channel-missing",
                    format!("notification `{}` says nowhere to send it", name.node),
                )
                .at(view.head, "no `run`, `sh` or `webhook`")
                .help(format!("write it as: {USAGE}, or notify NAME {{ run \"notify-send\" \"mvk: {{{{message}}}}\" }}, or use a definition: notify NAME use=team.chat")),
            );
            return None;
        }
        // A channel that did not lower was reported.
        (None, None) => return None,
        _ => {}
    }
    Some(NotifyDecl {
        name,
        uses,
        on,
        at,
        outcomes,
        timeout,
        retries,
        channel,
        span: view.head,
    })
}

/// `on="waiting finished budget interrupted"`: one or more event names, space-separated.
fn events(cx: &mut Cx<'_>, entry: &kdl::KdlEntry) -> Option<Spanned<Vec<NotifyEvent>>> {
    let list = values::nonempty(cx, entry, "`on`")?;
    let mut out = Vec::new();
    let mut ok = true;
    for word in list.node.split_whitespace() {
        match NotifyEvent::parse(word) {
            Some(e) => out.push(e),
            None => {
                ok = false;
                cx.push(
                    Diagnostic::error(
                        "mvk::unknown-notify-event",
                        format!("`{word}` is not an event a notification fires on"),
                    )
                    .at(list.span, "not an event")
                    .help(suggest(
                        "a notification fires on",
                        word,
                        &NotifyEvent::NAMES,
                    )),
                );
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    ok.then(|| Spanned::new(out, list.span))
}

/// `outcome="rejected stuck budget"`: the outcomes `finished` is limited to.
fn outcomes(cx: &mut Cx<'_>, entry: &kdl::KdlEntry) -> Option<Spanned<Vec<String>>> {
    let list = values::nonempty(cx, entry, "`outcome`")?;
    let mut out: Vec<String> = Vec::new();
    let mut ok = true;
    for word in list.node.split_whitespace() {
        if NOTIFY_OUTCOMES.contains(&word) {
            out.push(word.to_string());
        } else {
            ok = false;
            cx.push(
                Diagnostic::error(
                    "mvk::unknown-outcome",
                    format!("`{word}` is not an outcome of a run or a task"),
                )
                .at(list.span, "not an outcome")
                .help(suggest("outcomes", word, &NOTIFY_OUTCOMES)),
            );
        }
    }
    out.sort_unstable();
    out.dedup();
    ok.then(|| Spanned::new(out, list.span))
}

/// A `sh` script gets the event's fields in its environment (`$MVK_TASK`): pasted into the
/// script's code, a task name or a reviewer's words could run as commands.
fn shell_without_placeholders(cx: &mut Cx<'_>, c: &Command) -> bool {
    let script = match c {
        Command::Sh(script) => script,
        // `run "sh" "-c" "… {{message}} …"` is shell code too.
        Command::Run(argv) => match crate::syntax::shell_code_word(
            argv.iter()
                .map(|w| w.node.as_str())
                .collect::<Vec<_>>()
                .as_slice(),
        ) {
            Some(i) => &argv[i],
            None => return true,
        },
    };
    if !script.node.contains("{{") {
        return true;
    }
    cx.push(
        Diagnostic::error(
            "mvk::placeholder-in-shell",
            "a notification's shell script cannot take `{{…}}` placeholders",
        )
        .at(script.span, "a placeholder in shell code")
        .help("read the event's fields from the environment (\"$MVK_TASK\", \"$MVK_MESSAGE\", …; quote them), or use `run \"program\" \"{{task}}\"`, whose arguments are never read by a shell"),
    );
    false
}

const WEBHOOK_PROPS: &[&str] = &["env", "format"];
const WEBHOOK_USAGE: &str =
    "webhook \"https://example.com/hook\" | webhook env=\"SLACK_WEBHOOK_URL\" format=\"slack\"";

/// `webhook "URL" [format=…] { header "Name" "value"; header "Name" env="VAR" [prefix="Bearer "] }`
/// or `webhook env="VAR" …`.
fn webhook(cx: &mut Cx<'_>, view: &mut NodeView<'_>) -> Option<Spanned<ChannelDecl>> {
    let env = view
        .take("env")
        .and_then(|e| values::nonempty(cx, e, "`env`"));
    let format = view.take("format").and_then(|e| {
        let f = values::nonempty(cx, e, "`format`")?;
        match WebhookFormat::parse(&f.node) {
            Some(format) => Some(Spanned::new(format, f.span)),
            None => {
                cx.push(
                    Diagnostic::error(
                        "mvk::unknown-format",
                        format!("unknown webhook format `{}`", f.node),
                    )
                    .at(f.span, "not a format")
                    .help(suggest(
                        "webhook formats",
                        &f.node,
                        &WebhookFormat::NAMES,
                    )),
                );
                None
            }
        }
    });
    view.finish(cx, WEBHOOK_PROPS);
    let url = match (env, view.args.first()) {
        (Some(var), None) => env_name_ok(cx, &var.node, var.span).then(|| {
            Spanned::new(
                SecretDecl::Env {
                    var: var.node,
                    prefix: String::new(),
                },
                var.span,
            )
        }),
        (None, Some(_)) if view.expect_args(cx, 1, WEBHOOK_USAGE) => {
            let url = values::nonempty(cx, view.args[0], "a URL")?;
            url_ok(cx, &url.node, url.span)
                .then(|| Spanned::new(SecretDecl::Literal(url.node), url.span))
        }
        (None, Some(_)) => None,
        (Some(var), Some(arg)) => {
            cx.push(
                Diagnostic::error(
                    "mvk::webhook-url-twice",
                    "a webhook's URL is given twice: as an argument and by `env`",
                )
                .at(cx.span(arg.span()), "a URL")
                .also(var.span, "and a variable")
                .help("keep `env=\"VAR\"` when the URL is a secret (a Slack webhook's is), else the URL"),
            );
            None
        }
        (None, None) => {
            cx.push(
                Diagnostic::error("mvk::webhook-url-missing", "a webhook needs a URL")
                    .at(view.head, "no URL")
                    .help(format!("write it as: {WEBHOOK_USAGE}")),
            );
            None
        }
    };
    let mut headers: Vec<(Spanned<String>, Spanned<SecretDecl>)> = Vec::new();
    for child in view.children() {
        let mut hv = NodeView::new(cx, child);
        if hv.name.node != "header" {
            unknown_node(cx, &hv, "a webhook", &["header"]);
            continue;
        }
        headers.extend(header(cx, &mut hv));
    }
    Some(Spanned::new(
        ChannelDecl::Webhook {
            url: url?,
            format,
            headers,
        },
        view.head,
    ))
}

const HEADER_USAGE: &str =
    "header \"X-Title\" \"mvk\" | header \"Authorization\" env=\"TOKEN\" prefix=\"Bearer \"";

fn header(
    cx: &mut Cx<'_>,
    view: &mut NodeView<'_>,
) -> Option<(Spanned<String>, Spanned<SecretDecl>)> {
    view.no_children(cx);
    let env = view
        .take("env")
        .and_then(|e| values::nonempty(cx, e, "`env`"));
    let prefix = view
        .take("prefix")
        .and_then(|e| values::string(cx, e, "`prefix`"));
    view.finish(cx, &["env", "prefix"]);
    let want = if env.is_some() { 1 } else { 2 };
    if !view.expect_args(cx, want, HEADER_USAGE) {
        return None;
    }
    let name = values::nonempty(cx, view.args[0], "a header name")?;
    let token = name
        .node
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    let reserved = ["content-type", "content-length", "host", "user-agent"]
        .contains(&name.node.to_ascii_lowercase().as_str());
    if !token || reserved {
        cx.push(
            Diagnostic::error(
                "mvk::bad-header",
                format!("`{}` is not a header a notification can set", name.node),
            )
            .at(name.span, if token { "set by mvk" } else { "not a header name" })
            .help("a header name is letters, digits and `-` (e.g. \"X-Title\"); mvk sets Content-Type, Content-Length, Host and User-Agent itself"),
        );
        return None;
    }
    if let Some(p) = &prefix
        && env.is_none()
    {
        cx.push(
            Diagnostic::error("mvk::prefix-without-env", "`prefix` is given without `env`")
                .at(p.span, "a prefix of what?")
                .help("`prefix` goes before a value read from the environment: header \"Authorization\" env=\"TOKEN\" prefix=\"Bearer \""),
        );
        return None;
    }
    let value = match env {
        Some(var) => {
            if !env_name_ok(cx, &var.node, var.span) {
                return None;
            }
            Spanned::new(
                SecretDecl::Env {
                    var: var.node,
                    prefix: prefix.map(|p| p.node).unwrap_or_default(),
                },
                var.span,
            )
        }
        None => {
            let value = values::string(cx, view.args[1], "a header value")?;
            if credential_header(&name.node) {
                secret_in_file(
                    cx,
                    value.span,
                    &format!("header `{}` carries a credential", name.node),
                    &format!(
                        "name the variable that holds it: header \"{}\" env=\"TOKEN\" (with prefix=\"Bearer \" if the value needs one)",
                        name.node
                    ),
                );
                return None;
            }
            Spanned::new(SecretDecl::Literal(value.node), value.span)
        }
    };
    Some((name, value))
}

/// Headers whose value is a credential by name.
fn credential_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [
        "authorization",
        "cookie",
        "token",
        "secret",
        "key",
        "signature",
        "password",
        "auth",
    ]
    .iter()
    .any(|w| lower.contains(w))
}

/// A literal webhook URL: `http` or `https`, a host, no spaces, and no credential in it.
pub(crate) fn url_ok(cx: &mut Cx<'_>, url: &str, span: Span) -> bool {
    match url_problem(url) {
        None => true,
        Some(UrlProblem::Malformed(why)) => {
            cx.push(
                Diagnostic::error("mvk::bad-url", format!("`{url}` is not a webhook URL: {why}"))
                    .at(span, "not an http(s) URL")
                    .help("write a URL such as \"https://hooks.example.com/mvk\"; when it is a secret, name the variable that holds it: webhook env=\"WEBHOOK_URL\""),
            );
            false
        }
        Some(UrlProblem::Secret(why)) => {
            secret_in_file(
                cx,
                span,
                &format!("this webhook URL carries a credential ({why})"),
                "put the URL in an environment variable and name it: webhook env=\"SLACK_WEBHOOK_URL\"; CI systems keep such variables as secrets",
            );
            false
        }
    }
}

fn secret_in_file(cx: &mut Cx<'_>, span: Span, what: &str, help: &str) {
    cx.push(
        Diagnostic::error(
            "mvk::secret-in-file",
            format!(
                "{what}; a loop file is committed, and the ledger keeps the sources of every run"
            ),
        )
        .at(span, "a secret written in the file")
        .help(help.to_string()),
    );
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum UrlProblem {
    Malformed(&'static str),
    Secret(&'static str),
}

/// What is wrong with `url` as a webhook's URL written in a file, if anything; mvk checks a URL
/// read from the environment for form only (`Malformed`), when it sends.
pub(crate) fn url_problem(url: &str) -> Option<UrlProblem> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    let Some(rest) = rest else {
        return Some(UrlProblem::Malformed(
            "it does not start with `https://` or `http://`",
        ));
    };
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some(UrlProblem::Malformed(
            "it holds a space or a control character",
        ));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let host_name = host
        .rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host, |(h, _)| h);
    if host_name.is_empty() || host_name == "[]" {
        return Some(UrlProblem::Malformed("it names no host"));
    }
    if userinfo.is_some() {
        return Some(UrlProblem::Secret("a user and password before the host"));
    }
    let lower = rest.to_ascii_lowercase();
    let secret_paths = [
        "hooks.slack.com/",
        "discord.com/api/webhooks/",
        "discordapp.com/api/webhooks/",
        "webhook.office.com/",
        "outlook.office.com/webhook",
        "api.telegram.org/bot",
    ];
    if secret_paths.iter().any(|p| lower.contains(p)) {
        return Some(UrlProblem::Secret(
            "this service's webhook URL is its secret",
        ));
    }
    if let Some((_, query)) = lower.split_once('?') {
        let secret_keys = [
            "token",
            "key",
            "secret",
            "sig",
            "signature",
            "password",
            "apikey",
            "api_key",
            "access_token",
            "auth",
        ];
        let secret = query.split('&').any(|pair| {
            let key = pair.split('=').next().unwrap_or_default();
            secret_keys.contains(&key)
        });
        if secret {
            return Some(UrlProblem::Secret("a token in its query"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{UrlProblem, url_problem};

    #[test]
    fn a_plain_url_passes_and_one_with_a_credential_does_not() {
        assert_eq!(url_problem("https://hooks.example.com/mvk"), None);
        assert_eq!(url_problem("http://127.0.0.1:8080/x?run=1"), None);
        assert!(matches!(
            url_problem("https://hooks.slack.com/services/T0/B0/XYZ"),
            Some(UrlProblem::Secret(_))
        ));
        assert!(matches!(
            url_problem("https://user:pw@example.com/"),
            Some(UrlProblem::Secret(_))
        ));
        assert!(matches!(
            url_problem("https://example.com/hook?token=abc"),
            Some(UrlProblem::Secret(_))
        ));
        assert!(matches!(
            url_problem("ftp://example.com/"),
            Some(UrlProblem::Malformed(_))
        ));
        assert!(matches!(
            url_problem("https:///path"),
            Some(UrlProblem::Malformed(_))
        ));
        assert!(matches!(
            url_problem("https://exa mple.com/"),
            Some(UrlProblem::Malformed(_))
        ));
    }
}
