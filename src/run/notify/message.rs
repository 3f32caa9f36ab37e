//! One event a person hears of in ([`Message`]: what happened, where, and what they can do);
//! out, what each channel sends: the `mvk.notify.v1` JSON body (a webhook's, and a command's
//! standard input), a Slack message, and the fields a command's arguments and environment take.
//! The body's shape is a contract (`book/src/notifications.md`): fields are added, never renamed.

use serde::Serialize;
use serde_json::{Value, json};

use crate::ir::NotifyEvent;

/// The schema name of the JSON body.
pub(crate) const SCHEMA: &str = "mvk.notify.v1";

/// Longest `message` and `question`: a chat line, not a log (the run's files hold the rest).
const MESSAGE_CHARS: usize = 1_000;

/// Where the run is: the same for every message of one process.
#[derive(Debug, Clone, Default)]
pub(crate) struct Context {
    pub(crate) run: String,
    pub(crate) program: String,
    pub(crate) file: String,
    pub(crate) repository: String,
    pub(crate) host: String,
}

/// A budget that reached a fraction of its limit, in the units a person reads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct BudgetLevel {
    /// `usd`, `tokens`, `wall`, or the flow's: `flow usd`, `flow tokens`, `flow wall`.
    pub(crate) name: String,
    /// `usd` (dollars), `tokens`, or `seconds`.
    pub(crate) unit: &'static str,
    pub(crate) spent: f64,
    pub(crate) limit: f64,
    /// The fraction the notification asked to hear of (`at`).
    pub(crate) at: f64,
}

impl BudgetLevel {
    /// From a `budget.threshold` event's figures: micro-dollars, tokens, milliseconds.
    pub(crate) fn of(name: &str, spent: u64, limit: u64, at_thousandths: u32) -> BudgetLevel {
        let (unit, scale) = if name.ends_with("usd") {
            ("usd", 1e6)
        } else if name.ends_with("wall") {
            ("seconds", 1e3)
        } else {
            ("tokens", 1.0)
        };
        #[expect(
            clippy::cast_precision_loss,
            reason = "figures a person reads; exact past 2^53 is not needed"
        )]
        BudgetLevel {
            name: name.to_string(),
            unit,
            spent: spent as f64 / scale,
            limit: limit as f64 / scale,
            at: f64::from(at_thousandths) / 1000.0,
        }
    }

    fn amount(&self, v: f64) -> String {
        match self.unit {
            "usd" => format!("${v:.2}"),
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "whole seconds of a wall budget"
            )]
            "seconds" => {
                humantime::format_duration(std::time::Duration::from_secs(v as u64)).to_string()
            }
            _ => format!("{v:.0} tokens"),
        }
    }
}

/// A checkpoint that waits for a person.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Checkpoint {
    pub(crate) id: i64,
    /// `review`, `human`, `step`, `batch` or `landing`.
    pub(crate) kind: String,
    pub(crate) question: String,
}

/// One event a notification tells of.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Message {
    pub(crate) event: NotifyEvent,
    pub(crate) time: String,
    pub(crate) task: Option<String>,
    pub(crate) attempt: Option<u32>,
    pub(crate) outcome: Option<String>,
    pub(crate) exit_code: Option<i32>,
    pub(crate) checkpoint: Option<Checkpoint>,
    pub(crate) budget: Option<BudgetLevel>,
    /// What else the event said: mvk's own error, who stopped the run, a task's reason.
    pub(crate) detail: Option<String>,
}

impl Message {
    pub(crate) fn new(event: NotifyEvent) -> Message {
        Message {
            event,
            time: crate::clock::now().0,
            task: None,
            attempt: None,
            outcome: None,
            exit_code: None,
            checkpoint: None,
            budget: None,
            detail: None,
        }
    }

    /// One or two sentences a person reads in a chat or a desktop notification.
    pub(crate) fn text(&self, cx: &Context) -> String {
        let who = match &self.task {
            Some(t) if *t != cx.program => format!("task `{t}` of `{}`", cx.program),
            Some(t) => format!("`{t}`"),
            None => format!("`{}`", cx.program),
        };
        let text = match self.event {
            NotifyEvent::Waiting => {
                let what = self.checkpoint.as_ref().map_or_else(
                    || "the ladder reached `human`".to_string(),
                    |c| c.question.clone(),
                );
                format!("{who} waits for a person: {what}")
            }
            NotifyEvent::Finished => {
                let outcome = self.outcome.as_deref().unwrap_or("finished");
                let code = self
                    .exit_code
                    .map(|c| format!(" (exit {c})"))
                    .unwrap_or_default();
                let why = self
                    .detail
                    .as_deref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default();
                format!("{who} finished {outcome}{code}{why}")
            }
            NotifyEvent::Budget => match &self.budget {
                Some(b) => format!(
                    "{who} has spent {:.0}% of its {} budget ({} of {})",
                    b.spent / b.limit.max(f64::MIN_POSITIVE) * 100.0,
                    b.name,
                    b.amount(b.spent),
                    b.amount(b.limit)
                ),
                None => format!("{who} is near a budget's limit"),
            },
            NotifyEvent::Interrupted => format!(
                "{who} was stopped{}; it waits for `mvk resume {}`",
                self.detail
                    .as_deref()
                    .map(|by| format!(" by {by}"))
                    .unwrap_or_default(),
                cx.run
            ),
        };
        cut(&text, MESSAGE_CHARS)
    }

    /// The commands a person runs next: `status` always; `approve`/`reject` for a checkpoint;
    /// `resume` for a run that can go on.
    pub(crate) fn commands(&self, cx: &Context) -> Vec<(&'static str, String)> {
        let run = &cx.run;
        let mut out = vec![("status", format!("mvk status {run}"))];
        let task = self.task.as_deref().unwrap_or("");
        if self.event == NotifyEvent::Waiting {
            let task = if task.is_empty() {
                String::new()
            } else {
                format!(" {}", shell_word(task))
            };
            out.push(("approve", format!("mvk approve {run}{task}")));
            out.push((
                "reject",
                format!("mvk reject {run}{task} --reason \"what to do instead\""),
            ));
        }
        let resumable =
            self.event == NotifyEvent::Interrupted || self.outcome.as_deref() == Some("error");
        if resumable {
            out.push(("resume", format!("mvk resume {run}")));
        }
        out
    }

    /// The `mvk.notify.v1` body.
    pub(crate) fn body(&self, cx: &Context, notification: &str, id: &str) -> Value {
        let commands: serde_json::Map<String, Value> = self
            .commands(cx)
            .into_iter()
            .map(|(k, v)| (k.to_string(), Value::String(v)))
            .collect();
        json!({
            "schema": SCHEMA,
            "id": id,
            "event": self.event.name(),
            "notification": notification,
            "time": self.time,
            "run": cx.run,
            "program": cx.program,
            "file": cx.file,
            "repository": cx.repository,
            "host": cx.host,
            "task": self.task,
            "attempt": self.attempt,
            "outcome": self.outcome,
            "exit_code": self.exit_code,
            "checkpoint": self.checkpoint.as_ref().map(|c| json!({
                "id": c.id,
                "kind": c.kind,
                "question": cut(&c.question, MESSAGE_CHARS),
            })),
            "budget": self.budget,
            "message": self.text(cx),
            "commands": commands,
        })
    }

    /// A Slack-compatible incoming webhook's body: `{"text": …}` in Slack's markup.
    pub(crate) fn slack(&self, cx: &Context) -> Value {
        let mark = match (self.event, self.outcome.as_deref()) {
            (NotifyEvent::Waiting, _) => ":raising_hand:",
            (NotifyEvent::Finished, Some("accepted")) => ":white_check_mark:",
            (NotifyEvent::Finished, _) => ":x:",
            (NotifyEvent::Budget, _) => ":hourglass_flowing_sand:",
            (NotifyEvent::Interrupted, _) => ":double_vertical_bar:",
        };
        let mut text = format!("{mark} *mvk* {}", escape_slack(&self.text(cx)));
        text.push_str(&format!(
            "\nrun `{}` of `{}` on {}",
            escape_slack(&cx.run),
            escape_slack(&cx.file),
            escape_slack(&cx.host)
        ));
        for (_, command) in self.commands(cx) {
            text.push_str(&format!("\n`{}`", escape_slack(&command)));
        }
        json!({ "text": text })
    }

    /// The value of the placeholder `name` in a command's arguments (see
    /// `resolve::notify::PLACEHOLDERS`); empty where the event has none.
    pub(crate) fn field(&self, cx: &Context, notification: &str, name: &str) -> Option<String> {
        let opt = |v: Option<String>| Some(v.unwrap_or_default());
        let command = |which: &str| {
            self.commands(cx)
                .into_iter()
                .find(|(k, _)| *k == which)
                .map(|(_, v)| v)
        };
        match name {
            "event" => Some(self.event.name().to_string()),
            "notification" => Some(notification.to_string()),
            "run" => Some(cx.run.clone()),
            "program" => Some(cx.program.clone()),
            "file" => Some(cx.file.clone()),
            "repository" => Some(cx.repository.clone()),
            "host" => Some(cx.host.clone()),
            "time" => Some(self.time.clone()),
            "task" => opt(self.task.clone()),
            "attempt" => opt(self.attempt.map(|a| a.to_string())),
            "outcome" => opt(self.outcome.clone()),
            "exit_code" => opt(self.exit_code.map(|c| c.to_string())),
            "checkpoint" => opt(self.checkpoint.as_ref().map(|c| c.kind.clone())),
            "question" => opt(self
                .checkpoint
                .as_ref()
                .map(|c| cut(&c.question, MESSAGE_CHARS))),
            "budget" => opt(self.budget.as_ref().map(|b| b.name.clone())),
            "spent" => opt(self.budget.as_ref().map(|b| b.amount(b.spent))),
            "limit" => opt(self.budget.as_ref().map(|b| b.amount(b.limit))),
            "at" => opt(self
                .budget
                .as_ref()
                .map(|b| format!("{}%", (b.at * 100.0).round()))),
            "message" => Some(self.text(cx)),
            "status_command" => opt(command("status")),
            "approve_command" => opt(command("approve")),
            "reject_command" => opt(command("reject")),
            "resume_command" => opt(command("resume")),
            _ => None,
        }
    }
}

/// `text` cut to at most `max` characters, with `…` where it was cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// Slack's three control characters, escaped as its markup wants.
fn escape_slack(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A task name as one shell word (a fan-out's `fix[src/a.rs]` has brackets a shell globs).
fn shell_word(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./:=@".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx() -> Context {
        Context {
            run: "r1".into(),
            program: "textkit".into(),
            file: "loops/textkit.kdl".into(),
            repository: "/repo".into(),
            host: "ci-7".into(),
        }
    }

    #[test]
    fn every_placeholder_a_command_may_name_is_a_field_of_every_event() {
        for event in NotifyEvent::ALL {
            let m = Message::new(event);
            for name in crate::resolve::notify::PLACEHOLDERS {
                assert!(m.field(&cx(), "n", name).is_some(), "{name} of {event:?}");
            }
        }
    }

    #[test]
    fn a_waiting_checkpoint_says_what_to_run_with_the_task_quoted_for_a_shell() {
        let mut m = Message::new(NotifyEvent::Waiting);
        m.task = Some("fix[src/a b.rs]".into());
        m.attempt = Some(2);
        m.checkpoint = Some(Checkpoint {
            id: 4,
            kind: "review".into(),
            question: "review rounds ran out".into(),
        });
        let body = m.body(&cx(), "chat", "id1");
        assert_eq!(body["schema"], SCHEMA);
        assert_eq!(body["event"], "waiting");
        assert_eq!(body["checkpoint"]["kind"], "review");
        assert_eq!(
            body["commands"]["approve"],
            "mvk approve r1 'fix[src/a b.rs]'"
        );
        assert_eq!(
            body["message"],
            "task `fix[src/a b.rs]` of `textkit` waits for a person: review rounds ran out"
        );
        assert!(body["commands"].get("resume").is_none());
    }

    #[test]
    fn a_budget_reads_in_dollars_seconds_or_tokens() {
        let mut m = Message::new(NotifyEvent::Budget);
        m.task = Some("textkit".into());
        m.budget = Some(BudgetLevel::of("usd", 1_600_000, 2_000_000, 800));
        assert_eq!(
            m.text(&cx()),
            "`textkit` has spent 80% of its usd budget ($1.60 of $2.00)"
        );
        m.budget = Some(BudgetLevel::of("flow wall", 90_000, 100_000, 900));
        assert_eq!(m.field(&cx(), "n", "limit").as_deref(), Some("1m 40s"));
        assert_eq!(m.field(&cx(), "n", "at").as_deref(), Some("90%"));
        let slack = m.slack(&cx());
        assert!(slack["text"].as_str().is_some_and(|t| t.contains("90%")));
    }

    #[test]
    fn slack_markup_is_escaped_and_a_long_question_cut() {
        let mut m = Message::new(NotifyEvent::Waiting);
        m.checkpoint = Some(Checkpoint {
            id: 1,
            kind: "step".into(),
            question: format!("<b>{}", "x".repeat(5_000)),
        });
        let text = m.slack(&cx())["text"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(text.contains("&lt;b&gt;") && !text.contains("<b>"));
        assert!(text.chars().count() < 1_400, "{}", text.len());
    }
}
