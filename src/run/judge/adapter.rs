//! An agent's output in, what it cost (tokens, USD) and whether it hit a rate or usage limit out.
//!
//! [`read_usage`] streams an agent's stdout log once, line by line, and returns the [`Usage`] it
//! reported: any agent's own `MVK_USAGE={…}` line, or the tool's own report as its adapter knows
//! it (Claude Code's `result` object, Codex's `turn.completed` events, aider's `Tokens:`/`Cost:`
//! lines, the Gemini CLI's `stats`, goose's `total_tokens`). [`RateLimitMatcher`] looks through
//! the tail of an agent's output for a rate-limit or usage-limit message and the wait it names;
//! a plain `command` agent is matched only by its own patterns, since any program may print
//! "429" for reasons of its own.
//!
//! Nothing here panics on any input: the log is untrusted text from a process mvk does not own.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use regex::Regex;
use serde_json::Value;

use crate::ir::Adapter;

/// Lines (and multi-line JSON documents) longer than this are skipped, so reading a log takes
/// bounded memory however large it is.
const MAX_LINE: usize = 1 << 20;

/// The longest wait a rate-limit message can ask for; a usage limit that resets in days is
/// retried hourly rather than parking the run for days without a word.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// A [`RateLimit::message`] is at most this many characters.
const MESSAGE_CHARS: usize = 200;

/// A session id longer than this is not an id; it is left out rather than cut.
const MAX_SESSION: usize = 256;

/// What an agent's run cost, as it reported it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    /// Every input token, cache writes and cache reads included.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The input tokens read from the provider's cache (a part of `input_tokens`), which a price
    /// table prices apart; 0 where the agent does not say.
    #[serde(default)]
    pub cached_tokens: u64,
    /// US dollars in millionths; `None` when the agent reported no cost.
    pub usd_micros: Option<u64>,
    /// The tool's session (or thread) id, for resuming it or finding its own logs.
    pub session: Option<String>,
}

impl Usage {
    /// Input and output tokens together.
    pub(crate) fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// Adds what another call spent (a retry, or the reviewer's call on the same attempt).
    pub(crate) fn absorb(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        if let Some(u) = other.usd_micros {
            self.usd_micros = Some(self.usd_micros.unwrap_or(0).saturating_add(u));
        }
        if other.session.is_some() {
            self.session.clone_from(&other.session);
        }
    }
}

/// Streams the agent's stdout log (memory bounded however large the file: skip lines over 1 MiB)
/// and returns what it cost, None if nothing was reported.
///
/// A `MVK_USAGE={"input_tokens":N,"output_tokens":N,"usd":X,"session":S}` line of its own (any
/// adapter; keys optional; the last such line wins) overrides, field by field, what the tool
/// itself reported: a wrapper script that prints it knows the whole cost. A log that does not
/// exist reported nothing.
pub fn read_usage(adapter: Adapter, stdout_log: &Path) -> io::Result<Option<Usage>> {
    Ok(scan(adapter, stdout_log)?.and_then(|s| s.total(true)))
}

/// The agent's final message as its tool reports it, where the adapter knows the tool's
/// structured output: Claude Code's `result`, Codex's last `agent_message`, the Gemini CLI's
/// `response` (or, streaming, the assistant's text after its last tool call). `None` for aider,
/// goose and plain commands (the end of their output is read instead), or when the tool printed
/// none.
pub(crate) fn final_message(adapter: Adapter, stdout_log: &Path) -> io::Result<Option<String>> {
    Ok(scan(adapter, stdout_log)?.and_then(|s| s.message.or(s.streamed)))
}

/// Reads the whole log once through a [`LiveUsage`]; `None` when the log does not exist.
fn scan(adapter: Adapter, stdout_log: &Path) -> io::Result<Option<Scanner>> {
    let mut file = match File::open(stdout_log) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut live = LiveUsage::new(adapter).map_err(io::Error::other)?;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        live.feed(buf.get(..n).unwrap_or_default(), |_| false);
    }
    live.end();
    Ok(Some(live.scanner))
}

/// An agent's usage read as it prints it: its standard output fed in chunks as they come (cut
/// anywhere), each complete line read by the scanner [`read_usage`] uses, so a live figure and
/// the figure read from the log afterwards never disagree. Memory stays bounded: a line over
/// 1 MiB is skipped.
pub(crate) struct LiveUsage {
    scanner: Scanner,
    /// The line being received, up to its newline.
    partial: Vec<u8>,
    /// The line being received is over [`MAX_LINE`]: its bytes are dropped until its newline.
    overlong: bool,
}

impl LiveUsage {
    pub(crate) fn new(adapter: Adapter) -> Result<LiveUsage, regex::Error> {
        Ok(LiveUsage {
            scanner: Scanner::new(adapter)?,
            partial: Vec::new(),
            overlong: false,
        })
    }

    /// Reads `bytes`; after each line they complete, `after_line` is asked whether to stop
    /// reading (the rest of `bytes` is then left unread, so what was decided counts only up to
    /// that line).
    pub(crate) fn feed(
        &mut self,
        mut bytes: &[u8],
        mut after_line: impl FnMut(&LiveUsage) -> bool,
    ) {
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|&b| b == b'\n');
            let chunk = bytes
                .get(..newline.unwrap_or(bytes.len()))
                .unwrap_or_default();
            if !self.overlong {
                if self.partial.len() + chunk.len() > MAX_LINE {
                    self.overlong = true;
                    self.partial.clear();
                } else {
                    self.partial.extend_from_slice(chunk);
                }
            }
            let Some(i) = newline else {
                return;
            };
            bytes = bytes.get(i + 1..).unwrap_or_default();
            self.line_done();
            if after_line(self) {
                return;
            }
        }
    }

    /// The output ended: a last line without its newline is read too.
    pub(crate) fn end(&mut self) {
        if !self.partial.is_empty() || self.overlong {
            self.line_done();
        }
    }

    fn line_done(&mut self) {
        if std::mem::take(&mut self.overlong) {
            // An overlong line also ends any multi-line document it was part of.
            self.scanner.doc = None;
            return;
        }
        let bytes = std::mem::take(&mut self.partial);
        let text = String::from_utf8_lossy(&bytes);
        self.scanner.line(text.strip_suffix('\r').unwrap_or(&text));
        // The buffer's capacity is kept for the next line.
        self.partial = bytes;
        self.partial.clear();
    }

    /// What the lines read so far reported, as [`read_usage`] would total them (no session:
    /// a live figure is for budgets); `None` while nothing was.
    pub(crate) fn so_far(&self) -> Option<Usage> {
        self.scanner.total(false)
    }

    /// The session (or thread) the tool named so far.
    pub(crate) fn session(&self) -> Option<&str> {
        self.scanner.session.as_deref()
    }
}

/// Token and cost totals from one kind of report; `seen` once any report of that kind was read.
#[derive(Debug, Default, Clone)]
struct Tally {
    seen: bool,
    input: u64,
    output: u64,
    /// Cache reads, a part of `input`.
    cached: u64,
    usd_micros: Option<u64>,
}

impl Tally {
    fn add(&mut self, input: u64, output: u64, usd_micros: Option<u64>) {
        self.seen = true;
        self.input = self.input.saturating_add(input);
        self.output = self.output.saturating_add(output);
        if let Some(u) = usd_micros {
            self.usd_micros = Some(self.usd_micros.unwrap_or(0).saturating_add(u));
        }
    }

    fn add_cached(&mut self, cached: u64) {
        self.cached = self.cached.saturating_add(cached);
    }
}

/// The last `MVK_USAGE=` line: each field `None` when the line did not name it.
#[derive(Debug, Default, Clone)]
struct Reported {
    input: Option<u64>,
    output: Option<u64>,
    cached: Option<u64>,
    usd_micros: Option<u64>,
    session: Option<String>,
}

/// What the adapters keep while reading; see [`Scanner::total`] for which report wins.
#[derive(Debug, Default)]
struct Native {
    /// Claude: `result` objects; Codex: `turn.completed`; Gemini: `stats`; goose: totals;
    /// aider: `Tokens:` lines.
    primary: Tally,
    /// Claude: assistant messages (a stream-json log cut off before its result); Codex: the last
    /// cumulative `token_count`.
    fallback: Tally,
    /// Codex: `token_count` events of older versions, one per response.
    legacy: Tally,
    /// Claude stream-json repeats a message's usage on each of its content blocks, growing:
    /// the message in progress (id, input, output) is counted once its id changes, so memory
    /// stays constant however many messages there are.
    pending: Option<(String, u64, u64, u64)>,
    /// aider: the sum of the message costs on its `Cost:` lines (each printed to a cent, or to
    /// two significant digits below one), and the session figure of the last one (the true
    /// total rounded to a cent).
    message_usd: Option<u64>,
    session_usd: Option<u64>,
}

struct Scanner {
    adapter: Adapter,
    reported: Option<Reported>,
    native: Native,
    session: Option<String>,
    /// A pretty-printed JSON document being collected (Gemini and goose `--output-format json`).
    doc: Option<String>,
    aider: Option<AiderPatterns>,
    /// The last final message the tool reported as a whole.
    message: Option<String>,
    /// The Gemini CLI's stream: the assistant's text since its last tool call.
    streamed: Option<String>,
}

struct AiderPatterns {
    tokens: Regex,
    cost: Regex,
}

impl Scanner {
    fn new(adapter: Adapter) -> Result<Scanner, regex::Error> {
        let aider = match adapter {
            Adapter::Aider => Some(AiderPatterns {
                // "Tokens: 2.1k sent, 1.5k cache write, 8.0k cache hit, 310 received."
                tokens: Regex::new(
                    r"Tokens: ([0-9.]+[kKmM]?) sent(?:, ([0-9.]+[kKmM]?) cache write)?(?:, ([0-9.]+[kKmM]?) cache hit)?, ([0-9.]+[kKmM]?) received",
                )?,
                // "Cost: $0.01 message, $0.05 session."
                cost: Regex::new(r"Cost: \$([0-9.]+) message, \$([0-9.]+) session")?,
            }),
            _ => None,
        };
        Ok(Scanner {
            adapter,
            reported: None,
            native: Native::default(),
            session: None,
            doc: None,
            aider,
            message: None,
            streamed: None,
        })
    }

    fn line(&mut self, line: &str) {
        if let Some(r) = mvk_usage(line) {
            self.reported = Some(r);
            return;
        }
        if self.adapter == Adapter::Command {
            return;
        }
        if let Some(doc) = &mut self.doc {
            doc.push_str(line);
            doc.push('\n');
            if doc.len() > MAX_LINE {
                self.doc = None;
            } else if line == "}" {
                let text = self.doc.take().unwrap_or_default();
                self.json(&text);
            }
            return;
        }
        // JSON.stringify(…, null, 2) and serde's pretty printer open and close the top-level
        // object alone on a line at column 0.
        if matches!(self.adapter, Adapter::Gemini | Adapter::Goose) && line == "{" {
            self.doc = Some(String::from("{\n"));
            return;
        }
        if self.adapter == Adapter::Aider {
            self.aider_line(line);
            return;
        }
        let t = line.trim();
        if t.starts_with('{') || t.starts_with('[') {
            self.json(t);
        }
    }

    fn json(&mut self, text: &str) {
        let Ok(value) = serde_json::from_str::<Value>(text) else {
            return;
        };
        match value {
            // Early Claude Code printed `--output-format json` as one array of every message.
            Value::Array(items) => items.iter().for_each(|v| self.event(v)),
            v => self.event(&v),
        }
    }

    fn event(&mut self, v: &Value) {
        if !v.is_object() {
            return;
        }
        match self.adapter {
            Adapter::Claude => self.claude(v),
            Adapter::Codex => self.codex(v),
            Adapter::Gemini => self.gemini(v),
            Adapter::Goose => self.goose(v),
            Adapter::Command | Adapter::Aider => {}
        }
    }

    fn claude(&mut self, v: &Value) {
        self.set_session(v.get("session_id"));
        match v.get("type").and_then(Value::as_str) {
            Some("result") => {
                let (input, output, cached) = v.get("usage").map_or((0, 0, 0), claude_tokens);
                // Older versions called it cost_usd.
                let usd = v
                    .get("total_cost_usd")
                    .or_else(|| v.get("cost_usd"))
                    .and_then(usd_micros);
                self.native.primary.add(input, output, usd);
                self.native.primary.add_cached(cached);
                // With --json-schema the answer is `structured_output`, held to the schema;
                // `result` is its text, or the model's prose if it never gave one.
                match v.get("structured_output").filter(|o| o.is_object()) {
                    Some(o) => self.message = Some(o.to_string()),
                    None => self.keep_message(v.get("result")),
                }
            }
            Some("assistant") => {
                let Some(message) = v.get("message") else {
                    return;
                };
                let Some(usage) = message.get("usage") else {
                    return;
                };
                let id = message
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let (input, output, cached) = claude_tokens(usage);
                match &mut self.native.pending {
                    Some((pending, i, o, c)) if *pending == id && !id.is_empty() => {
                        *i = input;
                        *o = output;
                        *c = cached;
                    }
                    _ => {
                        self.flush_pending();
                        self.native.pending = Some((id, input, output, cached));
                    }
                }
            }
            _ => {}
        }
    }

    fn flush_pending(&mut self) {
        if let Some((_, i, o, c)) = self.native.pending.take() {
            self.native.fallback.add(i, o, None);
            self.native.fallback.add_cached(c);
        }
    }

    fn codex(&mut self, v: &Value) {
        let kind = v.get("type").and_then(Value::as_str);
        match kind {
            Some("thread.started") => self.set_session(v.get("thread_id")),
            Some("item.completed") => {
                let item = v.get("item");
                if item.and_then(|i| i.get("type")).and_then(Value::as_str) == Some("agent_message")
                {
                    self.keep_message(item.and_then(|i| i.get("text")));
                }
            }
            Some("session.created") => self.set_session(v.get("session_id")),
            Some("turn.completed") => {
                // OpenAI's input_tokens already hold the cached ones.
                let usage = v.get("usage");
                let input = field(usage, "input_tokens");
                let output = field(usage, "output_tokens");
                self.native.primary.add(input, output, None);
                self.native
                    .primary
                    .add_cached(field(usage, "cached_input_tokens"));
            }
            _ => {}
        }
        // A session log records each model response's usage as it comes, with the thread's
        // total so far (its `token_count` waits for the tools the response called).
        if kind == Some("token_usage_record") {
            if let Some(total) = v.get("payload").and_then(|p| p.get("thread_token_usage")) {
                self.native.fallback = Tally::default();
                self.native.fallback.add(
                    field(Some(total), "input_tokens"),
                    field(Some(total), "output_tokens"),
                    None,
                );
                self.native
                    .fallback
                    .add_cached(field(Some(total), "cached_input_tokens"));
            }
            return;
        }
        // Older `codex exec --json` wrapped events as {"msg":{…}}; session logs as
        // {"type":"event_msg","payload":{…}}.
        let inner = match kind {
            Some("token_count") => Some(v),
            Some("event_msg") => v.get("payload"),
            _ => v.get("msg"),
        };
        let Some(msg) = inner else {
            return;
        };
        match msg.get("type").and_then(Value::as_str) {
            Some("session_configured") => self.set_session(msg.get("session_id")),
            Some("token_count") => {
                let info = msg.get("info");
                if let Some(total) = info.and_then(|i| i.get("total_token_usage")) {
                    // Cumulative: the last one is the whole run.
                    let input = field(Some(total), "input_tokens");
                    let output = field(Some(total), "output_tokens");
                    self.native.fallback = Tally::default();
                    self.native.fallback.add(input, output, None);
                    self.native
                        .fallback
                        .add_cached(field(Some(total), "cached_input_tokens"));
                } else if msg.get("input_tokens").is_some() || msg.get("output_tokens").is_some() {
                    let input = field(Some(msg), "input_tokens");
                    let output = field(Some(msg), "output_tokens");
                    self.native.legacy.add(input, output, None);
                    self.native
                        .legacy
                        .add_cached(field(Some(msg), "cached_input_tokens"));
                }
            }
            _ => {}
        }
    }

    fn gemini(&mut self, v: &Value) {
        self.set_session(v.get("session_id"));
        let kind = v.get("type").and_then(Value::as_str);
        match kind {
            None => self.keep_message(v.get("response")),
            Some("message") if v.get("role").and_then(Value::as_str) == Some("assistant") => {
                if let Some(text) = v.get("content").and_then(Value::as_str) {
                    let streamed = self.streamed.get_or_insert_with(String::new);
                    if streamed.len() + text.len() <= MAX_LINE {
                        streamed.push_str(text);
                    }
                }
            }
            Some("tool_use" | "tool_result") => self.streamed = None,
            _ => {}
        }
        // stream-json's final `result` event, or the `--output-format json` document (no type).
        if !matches!(kind, None | Some("result")) {
            return;
        }
        let Some(stats) = v.get("stats").filter(|s| s.is_object()) else {
            return;
        };
        if let Some(models) = stats.get("models").and_then(Value::as_object) {
            let (mut input, mut output, mut cached) = (0u64, 0u64, 0u64);
            for model in models.values() {
                // stream-json's `result` gives each model flat counts, as its totals.
                if model.get("tokens").is_none() {
                    let i = field(Some(model), "input_tokens");
                    let o = field(Some(model), "output_tokens");
                    let total = field(Some(model), "total_tokens");
                    input = input.saturating_add(i);
                    output = output.saturating_add(o.max(total.saturating_sub(i)));
                    cached = cached.saturating_add(field(Some(model), "cached"));
                    continue;
                }
                let t = model.get("tokens");
                // total = prompt + candidates + thoughts + tool; thoughts are billed as output,
                // tool-use prompts as input; `cached` is part of `prompt`.
                input = input
                    .saturating_add(field(t, "prompt"))
                    .saturating_add(field(t, "tool"));
                output = output
                    .saturating_add(field(t, "candidates"))
                    .saturating_add(field(t, "thoughts"));
                cached = cached.saturating_add(field(t, "cached"));
            }
            self.native.primary.add(input, output, None);
            self.native.primary.add_cached(cached);
        } else if stats.get("input_tokens").is_some() || stats.get("total_tokens").is_some() {
            let input = field(Some(stats), "input_tokens");
            let output = field(Some(stats), "output_tokens");
            // output_tokens leaves out thinking; the total does not.
            let total = field(Some(stats), "total_tokens");
            let output = output.max(total.saturating_sub(input));
            self.native.primary.add(input, output, None);
        }
    }

    fn goose(&mut self, v: &Value) {
        // goose reports one total; it is counted as input so budgets see it.
        let total = match v.get("type").and_then(Value::as_str) {
            Some("complete") => v.get("total_tokens"),
            None => v.get("metadata").and_then(|m| m.get("total_tokens")),
            _ => None,
        };
        if let Some(n) = total.and_then(count) {
            self.native.primary.add(n, 0, None);
        }
    }

    fn aider_line(&mut self, line: &str) {
        let Some(p) = &self.aider else {
            return;
        };
        let clean = crate::run::judge::ansi::strip(line);
        if let Some(c) = p.tokens.captures(&clean) {
            let n = |i: usize| c.get(i).and_then(|m| aider_count(m.as_str())).unwrap_or(0);
            // aider's "sent" holds cache writes but, for Anthropic models, not cache reads.
            let input = n(1).saturating_add(n(3));
            self.native.primary.add(input, n(4), None);
        }
        if let Some(c) = p.cost.captures(&clean) {
            let micros = |i: usize| {
                c.get(i)
                    .and_then(|m| m.as_str().parse::<f64>().ok())
                    .and_then(f64_micros)
            };
            if let Some(m) = micros(1) {
                let sum = self.native.message_usd.unwrap_or(0).saturating_add(m);
                self.native.message_usd = Some(sum);
            }
            self.native.session_usd = micros(2).or(self.native.session_usd);
        }
    }

    fn keep_message(&mut self, v: Option<&Value>) {
        if let Some(text) = v.and_then(Value::as_str) {
            self.message = Some(text.to_string());
        }
    }

    fn set_session(&mut self, v: Option<&Value>) {
        if let Some(s) = v.and_then(session_id) {
            self.session = Some(s);
        }
    }

    /// The tool's own report (the first kind seen of primary, fallback, legacy), overridden
    /// field by field by the last `MVK_USAGE` line; with the session id when `session`.
    fn total(&self, session: bool) -> Option<Usage> {
        let n = &self.native;
        let native = match self.adapter {
            Adapter::Claude | Adapter::Codex => {
                // A Claude message still streaming counts as it stands.
                let mut fallback = n.fallback.clone();
                if let Some((_, i, o, c)) = &n.pending {
                    fallback.add(*i, *o, None);
                    fallback.add_cached(*c);
                }
                [&n.primary, &fallback, &n.legacy]
                    .into_iter()
                    .find(|t| t.seen)
                    .cloned()
                    .unwrap_or_default()
            }
            Adapter::Aider => {
                let mut t = n.primary.clone();
                // The sum is exact while messages cost under a cent; once their rounding adds up
                // to more than the session figure's own half cent, the session figure is nearer.
                let usd = match (n.message_usd, n.session_usd) {
                    (Some(sum), Some(session)) if sum.abs_diff(session) > 5_000 => Some(session),
                    (sum, session) => sum.or(session),
                };
                if usd.is_some() {
                    t.seen = true;
                    t.usd_micros = usd;
                }
                t
            }
            Adapter::Gemini | Adapter::Goose => n.primary.clone(),
            Adapter::Command => Tally::default(),
        };
        if !native.seen && self.reported.is_none() {
            return None;
        }
        let none = Reported::default();
        let r = self.reported.as_ref().unwrap_or(&none);
        let session = if session {
            r.session.clone().or_else(|| self.session.clone())
        } else {
            None
        };
        Some(Usage {
            input_tokens: r.input.unwrap_or(native.input),
            output_tokens: r.output.unwrap_or(native.output),
            cached_tokens: r.cached.unwrap_or(native.cached),
            usd_micros: r.usd_micros.or(native.usd_micros),
            session,
        })
    }
}

/// `MVK_USAGE={…}` on a line of its own (spaces allowed around `=` and inside the JSON).
fn mvk_usage(line: &str) -> Option<Reported> {
    let rest = line.trim().strip_prefix("MVK_USAGE")?;
    let json = rest.trim_start().strip_prefix('=')?;
    let value: Value = serde_json::from_str(json.trim()).ok()?;
    let obj = value.as_object()?;
    Some(Reported {
        input: obj.get("input_tokens").and_then(count),
        cached: obj.get("cached_tokens").and_then(count),
        output: obj.get("output_tokens").and_then(count),
        usd_micros: obj.get("usd").and_then(usd_micros),
        session: obj.get("session").and_then(session_id),
    })
}

fn session_id(v: &Value) -> Option<String> {
    v.as_str()
        .filter(|s| !s.is_empty() && s.len() <= MAX_SESSION)
        .map(str::to_string)
}

/// Claude's usage: input_tokens leave out cache writes and reads, which are billed input too.
/// Claude's input (cache writes and reads included), output, and the cache reads apart: a
/// price table prices those at the cache rate, a tenth of input's.
fn claude_tokens(usage: &Value) -> (u64, u64, u64) {
    let u = Some(usage);
    let cached = field(u, "cache_read_input_tokens");
    let input = field(u, "input_tokens")
        .saturating_add(field(u, "cache_creation_input_tokens"))
        .saturating_add(cached);
    (input, field(u, "output_tokens"), cached)
}

fn field(v: Option<&Value>, key: &str) -> u64 {
    v.and_then(|v| v.get(key)).and_then(count).unwrap_or(0)
}

/// A token count: a non-negative integer, or a finite non-negative number rounded.
fn count(v: &Value) -> Option<u64> {
    if let Some(n) = v.as_u64() {
        return Some(n);
    }
    let f = v.as_f64()?;
    // `as` saturates at u64::MAX for floats too large.
    (f.is_finite() && f >= 0.0).then(|| f.round() as u64)
}

fn usd_micros(v: &Value) -> Option<u64> {
    f64_micros(v.as_f64()?)
}

/// Dollars to micro-dollars, rounded to nearest (saturating); non-finite and negative amounts are
/// no amount.
fn f64_micros(usd: f64) -> Option<u64> {
    let micros = (usd * 1e6).round();
    (micros.is_finite() && micros >= 0.0).then_some(micros as u64)
}

/// aider's `format_tokens`: `950`, `2.1k`, `12k`; `M` in case a later version prints it.
fn aider_count(s: &str) -> Option<u64> {
    let (digits, scale) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1e3),
        'm' | 'M' => (&s[..s.len() - 1], 1e6),
        _ => (s, 1.0),
    };
    let n = digits.parse::<f64>().ok()? * scale;
    (n.is_finite() && n >= 0.0).then(|| n.round() as u64)
}

/// A rate-limit or usage-limit message found in an agent's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimit {
    /// The matching line, trimmed, at most 200 chars (a longer line is cut to the 200 around
    /// the match).
    pub message: String,
    /// How long the message says to wait, at most [`MAX_RETRY_AFTER`]; `None` when it does not
    /// say (the caller backs off on its own).
    pub retry_after: Option<Duration>,
}

/// An adapter's known rate-limit messages and an agent's own patterns, compiled.
#[derive(Debug, Clone)]
pub struct RateLimitMatcher {
    adapter: Adapter,
    patterns: Vec<Regex>,
    /// "try again in 20s", "retry after 30 seconds", "retry-after: 17", "retryDelay": "26s",
    /// "resets_in_seconds": 600: what follows is read by [`parse_wait`].
    hint: Regex,
    /// Claude Code's "Claude AI usage limit reached|<epoch seconds of the reset>".
    claude_reset: Regex,
}

/// Messages of the model providers behind every tool (Anthropic, OpenAI, Google, Bedrock, and
/// whatever litellm or goose relay): HTTP 429 and the providers' rate-limit and quota errors.
const PROVIDER_LIMITS: &[&str] = &[
    r"(?i)\btoo many requests\b",
    // "Error: 429 {", "status: 429", "HTTP/1.1 429", "code": 429 (quotes maybe escaped)
    r#"(?i)\b(?:status(?:\s+code)?|code|error|http(?:/[0-9.]+)?)(?:\\?["'])?\s*[:=]?\s*429\b"#,
    // rate_limit_error, rate_limit_exceeded, "Rate limit reached for …", RateLimitError,
    // RateLimitExceeded
    r"(?i)rate[ _-]?limit(?:s|ed)?[ _-]?(?:exceeded|reached|error)",
    // litellm via aider: "The API provider has rate limited you."
    r"(?i)\brate[ _-]?limited\b",
    r"(?i)\bresource[ _]exhausted\b|\bresource has been exhausted\b",
    r"(?i)\bquota exceeded\b|\bexceeded your current quota\b",
    r"(?i)overloaded_error|\b529\b.{0,40}\boverloaded\b",
    r"ThrottlingException",
];

/// Claude Code's subscription limits: "Claude AI usage limit reached|1760000400", "Claude usage
/// limit reached. Your limit will reset at 5pm", "You've hit your session limit · resets 3pm",
/// "5-hour limit reached ∙ resets 1am".
const CLAUDE_LIMITS: &[&str] = &[
    r"(?i)\busage limit reached\b",
    r"(?i)\bhit your (?:\w+ )?limit\b",
    r"(?i)\b(?:5-hour|weekly|session|opus|sonnet) limit reached\b",
    // Print mode's result once its own retries gave up: {"type":"result","is_error":true,
    // "api_error_status":429,…,"result":"API Error: Request rejected (429) · …"}.
    r#""api_error_status"\s*:\s*(?:429|529)\b"#,
    r"(?i)\bAPI Error: [^\n]{0,80}\((?:429|529)\)",
];

/// Codex's ChatGPT-plan limit: "You've hit your usage limit. … try again in 2 days 17 hours".
const CODEX_LIMITS: &[&str] = &[
    r"(?i)\bhit your (?:\w+ )?limit\b",
    r"(?i)\busage_limit_reached\b",
];

const HINT: &str = r#"(?i)(?:\b(?:try\s+again|retry)\s+(?:in|after)\b|\bretry[-_]?after\b["']?\s*[:=]|\bretry_?delay\b["']?\s*[:=]|\bresets?_in_seconds\b["']?\s*[:=])\s*["']?"#;

const CLAUDE_RESET: &str = r"(?i)usage limit reached\|([0-9]{1,20})";

/// PATTERN compiled once per process (a `Regex` is shared by cloning): each attempt makes a
/// matcher, and compiling the built-in patterns was a twentieth of a small attempt's CPU. The
/// patterns are the built-in ones and those the loop files name: few.
fn compiled(pattern: &str) -> Result<Regex, regex::Error> {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex};
    static CACHE: LazyLock<Mutex<HashMap<String, Regex>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    if let Some(re) = CACHE.lock().ok().and_then(|c| c.get(pattern).cloned()) {
        return Ok(re);
    }
    let re = Regex::new(pattern)?;
    if let Ok(mut cache) = CACHE.lock() {
        cache.insert(pattern.to_string(), re.clone());
    }
    Ok(re)
}

impl RateLimitMatcher {
    /// The adapter's built-in patterns plus the agent's own `rate-limit "REGEX"` patterns.
    /// `command` agents have no built-in patterns; every pattern is matched line by line.
    pub fn new(adapter: Adapter, extra: &[String]) -> Result<RateLimitMatcher, regex::Error> {
        let own: &[&str] = match adapter {
            Adapter::Claude => CLAUDE_LIMITS,
            Adapter::Codex => CODEX_LIMITS,
            _ => &[],
        };
        let provider: &[&str] = match adapter {
            Adapter::Command => &[],
            _ => PROVIDER_LIMITS,
        };
        let mut patterns = Vec::with_capacity(own.len() + provider.len() + extra.len());
        for p in own.iter().chain(provider) {
            patterns.push(compiled(p)?);
        }
        for p in extra {
            patterns.push(compiled(p)?);
        }
        Ok(RateLimitMatcher {
            adapter,
            patterns,
            hint: compiled(HINT)?,
            claude_reset: compiled(CLAUDE_RESET)?,
        })
    }

    /// Whether an agent that exited 0 may still have given up on a rate limit: aider does (it
    /// prints the limit as its last word and exits 0, having changed nothing).
    pub(crate) fn limits_exit_zero(&self) -> bool {
        self.adapter == Adapter::Aider
    }

    /// An aider run that exited 0 but gave up on a limit: after its last model reply (its last
    /// `Tokens:` line) there is no edit applied and its own give-up message is there. Only
    /// aider's own words count: a file it edited may be called `rate_limited.py`.
    pub(crate) fn aider_gave_up(&self, stdout: &str) -> Option<RateLimit> {
        let after = match stdout.rfind("Tokens: ") {
            Some(i) => stdout[i..].split_once('\n').map_or("", |(_, rest)| rest),
            None => stdout,
        };
        if after.lines().any(|l| l.starts_with("Applied edit to ")) {
            return None;
        }
        let gave_up = after
            .lines()
            .rev()
            .map(crate::run::judge::ansi::strip)
            .find(|l| {
                l.contains("The API provider has rate limited you")
                    || l.contains("litellm.RateLimitError")
            })?;
        Some(RateLimit {
            message: excerpt(&gave_up, 0),
            retry_after: self.last_wait(after, SystemTime::now()),
        })
    }

    /// Looks for a rate-limit or usage-limit message in the agent's output (the caller passes
    /// the tail of stdout and stderr). The last matching line is the message; the wait comes
    /// from that line, else from the last hint anywhere in the output.
    pub fn check(&self, output: &str) -> Option<RateLimit> {
        self.check_at(output, SystemTime::now())
    }

    fn check_at(&self, output: &str, now: SystemTime) -> Option<RateLimit> {
        for line in output.lines().rev() {
            let clean = crate::run::judge::ansi::strip(line);
            // The earliest match, so a long line's excerpt starts where the message does.
            let Some(start) = self
                .patterns
                .iter()
                .filter_map(|re| re.find(&clean).map(|m| m.start()))
                .min()
            else {
                continue;
            };
            let retry_after = self
                .wait_in(&clean, now)
                .or_else(|| self.last_wait(output, now));
            // A JSON report (Claude Code's result, Codex's turn.failed) says it in words.
            let message =
                json_message(&clean).map_or_else(|| excerpt(&clean, start), |m| excerpt(&m, 0));
            return Some(RateLimit {
                message,
                retry_after,
            });
        }
        None
    }

    /// The first wait a line names: Claude's reset epoch, then a "try again in …" hint.
    fn wait_in(&self, line: &str, now: SystemTime) -> Option<Duration> {
        self.reset_wait(line, now)
            .or_else(|| self.hints(line).next())
    }

    /// The last wait named anywhere in the output.
    fn last_wait(&self, output: &str, now: SystemTime) -> Option<Duration> {
        output.lines().rev().find_map(|line| {
            let clean = crate::run::judge::ansi::strip(line);
            self.reset_wait(&clean, now)
                .or_else(|| self.hints(&clean).last())
        })
    }

    fn hints<'a>(&'a self, line: &'a str) -> impl Iterator<Item = Duration> + 'a {
        self.hint
            .find_iter(line)
            .filter_map(|m| line.get(m.end()..).and_then(parse_wait))
            .map(clamp_wait)
    }

    /// Claude's epoch gives the reset time; one already past names no wait.
    fn reset_wait(&self, line: &str, now: SystemTime) -> Option<Duration> {
        let caps = self.claude_reset.captures(line)?;
        let epoch: u64 = caps.get(1)?.as_str().parse().ok()?;
        let now = now.duration_since(UNIX_EPOCH).ok()?.as_secs();
        let wait = epoch.checked_sub(now).filter(|w| *w > 0)?;
        Some(Duration::from_secs(wait).min(MAX_RETRY_AFTER))
    }
}

/// The human words of a JSON report line: its `result`, `message` or `error.message`.
fn json_message(line: &str) -> Option<String> {
    let v: Value = serde_json::from_str(line.trim()).ok()?;
    let text = v
        .get("result")
        .or_else(|| v.get("message"))
        .or_else(|| v.get("error").and_then(|e| e.get("message")))
        .and_then(Value::as_str)?;
    (!text.trim().is_empty()).then(|| text.trim().to_string())
}

fn clamp_wait(secs: f64) -> Duration {
    if !secs.is_finite() || secs >= MAX_RETRY_AFTER.as_secs_f64() {
        return MAX_RETRY_AFTER;
    }
    Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or(MAX_RETRY_AFTER)
}

/// Seconds in a span of time at the start of `s`: `30` (bare: seconds), `6.034s`, `20ms`,
/// `1m30s`, `2 days 17 hours 14 minutes`, `1 hour and 5 minutes`. `None` when `s` does not start
/// with one (`later`, `5 attempts`).
fn parse_wait(s: &str) -> Option<f64> {
    let mut rest = s;
    let mut total = 0.0;
    let mut parts = 0;
    loop {
        let mut t = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
        if parts > 0
            && let Some(after) = t.strip_prefix("and ")
        {
            t = after.trim_start();
        }
        let num_len = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        if num_len == 0 {
            break;
        }
        let Ok(n) = t[..num_len].parse::<f64>() else {
            break;
        };
        let after = t[num_len..].trim_start();
        let unit_len = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let unit = after[..unit_len].to_ascii_lowercase();
        let scale = match unit.as_str() {
            "" if parts == 0 => {
                total += n;
                parts += 1;
                break;
            }
            "ms" | "msec" | "msecs" | "millisecond" | "milliseconds" => 0.001,
            "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
            "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600.0,
            "d" | "day" | "days" => 86400.0,
            _ => break,
        };
        total += n * scale;
        parts += 1;
        rest = &after[unit_len..];
    }
    (parts > 0).then_some(total)
}

/// The line trimmed; a line over [`MESSAGE_CHARS`] is cut to that many characters starting a
/// little before the match, so the message shows what matched.
fn excerpt(line: &str, match_at: usize) -> String {
    let lead = line.len() - line.trim_start().len();
    let trimmed = line.trim();
    let total = trimmed.chars().count();
    if total <= MESSAGE_CHARS {
        return trimmed.to_string();
    }
    let at_char = trimmed
        .get(..match_at.saturating_sub(lead).min(trimmed.len()))
        .map_or(0, |s| s.chars().count());
    let start = at_char.saturating_sub(40).min(total - MESSAGE_CHARS);
    trimmed.chars().skip(start).take(MESSAGE_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use proptest::prelude::*;

    use super::*;

    const ALL: [Adapter; 6] = [
        Adapter::Command,
        Adapter::Claude,
        Adapter::Codex,
        Adapter::Aider,
        Adapter::Goose,
        Adapter::Gemini,
    ];

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/adapters")
            .join(name)
    }

    fn fixture_text(name: &str) -> String {
        std::fs::read_to_string(fixture(name)).expect("read fixture")
    }

    fn usage_of(adapter: Adapter, text: &str) -> Option<Usage> {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        f.write_all(text.as_bytes()).expect("write");
        read_usage(adapter, f.path()).expect("read usage")
    }

    fn usage(input: u64, output: u64, usd_micros: Option<u64>, session: Option<&str>) -> Usage {
        Usage {
            cached_tokens: 0,
            input_tokens: input,
            output_tokens: output,
            usd_micros,
            session: session.map(str::to_string),
        }
    }

    fn cached(u: Usage, n: u64) -> Usage {
        Usage {
            cached_tokens: n,
            ..u
        }
    }

    fn matcher(adapter: Adapter) -> RateLimitMatcher {
        RateLimitMatcher::new(adapter, &[]).expect("built-in patterns compile")
    }

    fn at(epoch: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(epoch)
    }

    /// The outputs the current CLIs print, captured from them (tests/fixtures/adapters/SOURCES.md
    /// says how): what mvk reads from each.
    mod captured {
        use super::*;

        fn message(adapter: Adapter, name: &str) -> Option<String> {
            final_message(adapter, &fixture(name)).expect("read")
        }

        fn limited(adapter: Adapter, name: &str) -> Option<RateLimit> {
            matcher(adapter).check(&fixture_text(name))
        }

        #[test]
        fn claude_code_2_1_332() {
            let u = read_usage(Adapter::Claude, &fixture("claude-2.1.332-fix.out"))
                .expect("read")
                .expect("usage");
            // 4,800 input + 1,200 cache reads, 320 output; $0.01292 as it printed.
            assert_eq!(
                (u.input_tokens, u.output_tokens, u.usd_micros),
                (6000, 320, Some(12_920))
            );
            let stream = read_usage(Adapter::Claude, &fixture("claude-2.1.332-stream-fix.out"))
                .expect("read")
                .expect("usage");
            assert_eq!((stream.tokens(), stream.usd_micros), (6320, Some(12_920)));
            assert_eq!(
                message(Adapter::Claude, "claude-2.1.332-fix.out").as_deref(),
                Some("Fixed the off-by-one in total(): the range now includes n.")
            );
            // With --json-schema: the structured answer, as JSON text.
            let structured =
                message(Adapter::Claude, "claude-2.1.332-review-schema.out").expect("a message");
            let v: Value = serde_json::from_str(&structured).expect("JSON");
            assert_eq!(v["verdict"], "approve");
            let hit = limited(Adapter::Claude, "claude-2.1.332-rate-limit.out").expect("a limit");
            assert!(hit.message.contains("429"), "{hit:?}");
        }

        #[test]
        fn a_limit_inside_hyperlinks_and_progress_codes_is_read() {
            // OSC sequences (a hyperlink around words, a progress report) split the message.
            let line = "\x1b]9;4;3;0\x07Error: Rate \x1b]8;;https://status.example\x1b\\limit\x1b]8;;\x1b\\ reached, try again in 20s";
            let hit = matcher(Adapter::Codex).check(line).expect("a limit");
            assert_eq!(hit.retry_after, Some(Duration::from_secs(20)));
            assert!(
                hit.message.contains("Rate limit reached"),
                "{}",
                hit.message
            );
        }

        #[test]
        fn claudes_structured_output_wins_over_its_prose() {
            let line = r#"{"type":"result","is_error":false,"result":"I approve, looks good.","structured_output":{"verdict":"reject","blockers":[],"notes":[]},"usage":{"input_tokens":1,"output_tokens":1},"total_cost_usd":0.001}"#;
            let dir = tempfile::tempdir().expect("tempdir");
            let log = dir.path().join("review.out");
            std::fs::write(&log, line).expect("write");
            let m = final_message(Adapter::Claude, &log)
                .expect("read")
                .expect("a message");
            let v: Value = serde_json::from_str(&m).expect("the structured answer, as JSON");
            assert_eq!(v["verdict"], "reject");
        }

        #[test]
        fn codex_0_171_0() {
            let u = read_usage(Adapter::Codex, &fixture("codex-0.171.0-fix.jsonl"))
                .expect("read")
                .expect("usage");
            assert_eq!(
                (u.input_tokens, u.cached_tokens, u.output_tokens),
                (3600, 2400, 120)
            );
            assert_eq!(u.usd_micros, None, "Codex prints no dollars");
            assert_eq!(
                message(Adapter::Codex, "codex-0.171.0-fix.jsonl").as_deref(),
                Some("Fixed the off-by-one in calc.total; the test passes.")
            );
            let hit = limited(Adapter::Codex, "codex-0.171.0-rate-limit.jsonl").expect("a limit");
            assert!(hit.message.contains("429"), "{hit:?}");
        }

        #[test]
        fn gemini_cli_0_61_0() {
            let u = read_usage(Adapter::Gemini, &fixture("gemini-0.61.0-fix.out"))
                .expect("read")
                .expect("usage");
            assert_eq!(
                (u.input_tokens, u.cached_tokens, u.output_tokens),
                (3600, 900, 240)
            );
            let stream = read_usage(Adapter::Gemini, &fixture("gemini-0.61.0-stream-fix.jsonl"))
                .expect("read")
                .expect("usage");
            assert_eq!(
                (
                    stream.input_tokens,
                    stream.cached_tokens,
                    stream.output_tokens
                ),
                (3600, 900, 240)
            );
            let done =
                "Fixed the off-by-one in sum_to: the loop now includes n, and the test passes.";
            assert_eq!(
                message(Adapter::Gemini, "gemini-0.61.0-fix.out").as_deref(),
                Some(done)
            );
            assert_eq!(
                message(Adapter::Gemini, "gemini-0.61.0-stream-fix.jsonl").as_deref(),
                Some(done)
            );
            // Its give-up is on stderr (exit 173), stdout empty.
            let hit = limited(Adapter::Gemini, "gemini-0.61.0-rate-limit.err").expect("a limit");
            assert_eq!(hit.retry_after, Some(Duration::from_secs(1)), "{hit:?}");
        }

        #[test]
        fn aider_costs_take_the_session_figure_once_rounding_adds_up() {
            // 30 messages of $0.0149 print $0.01 each: the sum says $0.30, the session $0.45.
            let text: String = (1..=30)
                .map(|i| {
                    format!(
                        "Tokens: 1k sent, 10 received. Cost: $0.01 message, ${:.2} session.\n",
                        0.0149 * f64::from(i)
                    )
                })
                .collect();
            let u = usage_of(Adapter::Aider, &text).expect("usage");
            assert_eq!(u.usd_micros, Some(450_000));
        }

        #[test]
        fn aider_0_86_2() {
            let u = read_usage(Adapter::Aider, &fixture("aider-0.86.2-fix.out"))
                .expect("read")
                .expect("usage");
            // The two messages' costs, $0.0073 + $0.0097, not the session's rounded $0.02.
            assert_eq!(
                (u.input_tokens, u.output_tokens, u.usd_micros),
                (695 + 768, 13 + 67, Some(17_000))
            );
            assert_eq!(
                message(Adapter::Aider, "aider-0.86.2-fix.out"),
                None,
                "its stdout is the message"
            );
            // aider gives up on a limit with exit 0: the limit after its last reply counts, one
            // it retried and then answered does not.
            let m = matcher(Adapter::Aider);
            assert!(m.limits_exit_zero());
            let gave_up = fixture_text("aider-0.86.2-rate-limit.out");
            let hit = m.aider_gave_up(&gave_up).expect("a limit");
            assert_eq!(hit.retry_after, Some(Duration::from_secs(1)), "{hit:?}");
            let recovered = fixture_text("aider-0.86.2-rate-limit-recovered.out");
            assert_eq!(m.aider_gave_up(&recovered), None);
            // A fix of a file whose name says "rate limited" is not a limit.
            let fixed = "Tokens: 768 sent, 67 received. Cost: $0.0097 message, $0.02 session.\n\
                         Applied edit to app/rate_limited.py\n";
            assert_eq!(m.aider_gave_up(fixed), None);
        }
    }

    #[test]
    fn tokens_add_input_and_output_saturating() {
        assert_eq!(usage(3, 4, None, None).tokens(), 7);
        assert_eq!(usage(u64::MAX, 4, None, None).tokens(), u64::MAX);
    }

    #[test]
    fn mvk_usage_last_line_wins() {
        let u = read_usage(Adapter::Command, &fixture("wrapper.out")).expect("read");
        assert_eq!(u, Some(usage(1500, 300, Some(12346), None)));
    }

    #[test]
    fn mvk_usage_is_read_for_every_adapter() {
        for adapter in ALL {
            let u = usage_of(
                adapter,
                "hello\nMVK_USAGE={\"output_tokens\":7,\"session\":\"w-1\"}\n",
            );
            assert_eq!(u, Some(usage(0, 7, None, Some("w-1"))), "{adapter:?}");
        }
    }

    #[test]
    fn mvk_usage_must_be_a_line_of_its_own_with_json() {
        let text = "echo MVK_USAGE={\"input_tokens\":5}\nMVK_USAGE=not json\nMVK_USAGE=[1]\n\
                    MVK_USAGE_X={\"input_tokens\":5}\n";
        assert_eq!(usage_of(Adapter::Command, text), None);
    }

    #[test]
    fn mvk_usage_overrides_only_the_fields_it_names() {
        let mut text = fixture_text("claude-json.out");
        text.push_str("MVK_USAGE={\"usd\":2.5}\n");
        let u = usage_of(Adapter::Claude, &text).expect("usage");
        assert_eq!(u.input_tokens, 1204 + 18250 + 210_443);
        assert_eq!(u.output_tokens, 3911);
        assert_eq!(u.usd_micros, Some(2_500_000));
    }

    #[test]
    fn usd_rounds_to_the_nearest_micro_dollar_and_ignores_negative_amounts() {
        let u = |usd: &str| {
            usage_of(Adapter::Command, &format!("MVK_USAGE={{\"usd\":{usd}}}\n"))
                .and_then(|u| u.usd_micros)
        };
        assert_eq!(u("0.0000004"), Some(0));
        assert_eq!(u("0.0000006"), Some(1));
        assert_eq!(u("1"), Some(1_000_000));
        assert_eq!(u("-0.5"), None);
        assert_eq!(u("\"0.5\""), None);
        assert_eq!(f64_micros(f64::NAN), None);
        assert_eq!(f64_micros(f64::INFINITY), None);
        // A finite but absurd amount saturates, so any budget stops rather than ignoring it.
        assert_eq!(f64_micros(1e300), Some(u64::MAX));
    }

    #[test]
    fn negative_or_fractional_token_counts() {
        let u = usage_of(
            Adapter::Command,
            "MVK_USAGE={\"input_tokens\":-3,\"output_tokens\":2.6}\n",
        );
        assert_eq!(u, Some(usage(0, 3, None, None)));
    }

    #[test]
    fn command_adapter_reads_no_tool_output() {
        let u = read_usage(Adapter::Command, &fixture("claude-json.out")).expect("read");
        assert_eq!(u, None);
    }

    #[test]
    fn nothing_reported_is_none_and_a_missing_log_reported_nothing() {
        for adapter in ALL {
            assert_eq!(usage_of(adapter, ""), None);
            assert_eq!(usage_of(adapter, "just some text\n{\"a\":1}\n"), None);
            let missing = Path::new("/nonexistent/mvk/agent.out");
            assert_eq!(read_usage(adapter, missing).expect("no error"), None);
        }
    }

    #[test]
    fn claude_json_result_counts_cache_tokens_as_input() {
        let u = read_usage(Adapter::Claude, &fixture("claude-json.out")).expect("read");
        // The cache reads apart too, for a price table's cache rate.
        assert_eq!(
            u,
            Some(cached(
                usage(
                    1204 + 18250 + 210_443,
                    3911,
                    Some(418_724),
                    Some("9c7a3f0e-5b1d-4c2e-8f6a-2d4b1e0c9a77")
                ),
                210_443
            ))
        );
    }

    #[test]
    fn claude_stream_json_reads_the_result_line() {
        let u = read_usage(Adapter::Claude, &fixture("claude-stream.jsonl")).expect("read");
        assert_eq!(
            u,
            Some(cached(
                usage(
                    8 + 9400 + 9000,
                    110,
                    Some(52_100),
                    Some("1f0e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b")
                ),
                9000
            ))
        );
    }

    #[test]
    fn claude_stream_cut_off_before_its_result_counts_each_message_once() {
        let u = read_usage(Adapter::Claude, &fixture("claude-stream-timeout.jsonl"))
            .expect("read")
            .expect("usage");
        // msg_01A's last repeat (9005 in, 80 out) and msg_01B (9403 in, 30 out).
        assert_eq!((u.input_tokens, u.output_tokens), (9005 + 9403, 110));
        assert_eq!(u.usd_micros, None);
        assert_eq!(
            u.session.as_deref(),
            Some("1f0e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b")
        );
    }

    #[test]
    fn claude_results_of_several_runs_add_up() {
        let line = fixture_text("claude-json.out");
        let u = usage_of(Adapter::Claude, &format!("{line}{line}")).expect("usage");
        assert_eq!(u.output_tokens, 2 * 3911);
        assert_eq!(u.usd_micros, Some(2 * 418_724));
    }

    #[test]
    fn claude_early_array_format() {
        let text = r#"[{"type":"system","subtype":"init","session_id":"s-1"},{"type":"result","is_error":false,"cost_usd":0.25,"usage":{"input_tokens":10,"output_tokens":5}}]"#;
        assert_eq!(
            usage_of(Adapter::Claude, text),
            Some(usage(10, 5, Some(250_000), Some("s-1")))
        );
    }

    #[test]
    fn claude_usage_limit_result_reports_zero() {
        let u = read_usage(Adapter::Claude, &fixture("claude-usage-limit.out"))
            .expect("read")
            .expect("usage");
        assert_eq!((u.tokens(), u.usd_micros), (0, Some(0)));
    }

    #[test]
    fn codex_sums_turns_and_keeps_the_thread() {
        let u = read_usage(Adapter::Codex, &fixture("codex-exec.jsonl")).expect("read");
        // cached_input_tokens are part of input_tokens, not added again.
        assert_eq!(
            u,
            Some(cached(
                usage(
                    26549 + 1200,
                    1590 + 345,
                    None,
                    Some("0199a213-81c0-7800-8aa1-bbab2a035a53")
                ),
                22272 + 200
            ))
        );
    }

    #[test]
    fn codex_cumulative_token_count_takes_the_last() {
        let u = read_usage(Adapter::Codex, &fixture("codex-token-count.jsonl")).expect("read");
        assert_eq!(
            u,
            Some(cached(
                usage(
                    26549,
                    1590,
                    None,
                    Some("5973b6c0-94b8-487b-a530-2aeb6098ae0e")
                ),
                22272
            ))
        );
    }

    #[test]
    fn codex_per_response_token_counts_add_up() {
        let text = "{\"id\":\"1\",\"msg\":{\"type\":\"token_count\",\"input_tokens\":100,\"cached_input_tokens\":10,\"output_tokens\":7,\"total_tokens\":107}}\n\
                    {\"id\":\"1\",\"msg\":{\"type\":\"token_count\",\"input_tokens\":50,\"output_tokens\":3}}\n";
        assert_eq!(
            usage_of(Adapter::Codex, text),
            Some(cached(usage(150, 10, None, None), 10))
        );
    }

    #[test]
    fn codex_turns_win_over_token_counts() {
        let text = "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}\n\
                    {\"type\":\"event_msg\",\"payload\":{\"type\":\"token_count\",\"info\":{\"total_token_usage\":{\"input_tokens\":500,\"output_tokens\":50}}}}\n";
        assert_eq!(
            usage_of(Adapter::Codex, text),
            Some(usage(9, 1, None, None))
        );
    }

    #[test]
    fn aider_reads_token_lines_and_sums_the_message_costs() {
        let u = read_usage(Adapter::Aider, &fixture("aider.out")).expect("read");
        // 12k sent; then 2.1k sent + 8.0k cache hit (cache writes are inside "sent").
        // Cost: $0.05 + $0.0089, not the session's rounded $0.06.
        assert_eq!(
            u,
            Some(usage(12_000 + 2100 + 8000, 150 + 310, Some(58_900), None))
        );
    }

    #[test]
    fn aider_lines_with_colour_codes_and_no_cost() {
        let text = "\x1b[32mTokens: 950 sent, 1.2M received.\x1b[0m\n";
        assert_eq!(
            usage_of(Adapter::Aider, text),
            Some(usage(950, 1_200_000, None, None))
        );
    }

    #[test]
    fn gemini_json_document_sums_its_models() {
        let u = read_usage(Adapter::Gemini, &fixture("gemini-json.out")).expect("read");
        assert_eq!(
            u,
            Some(cached(
                usage(
                    24939 + 8965 + 28,
                    20 + 154 + 10 + 30,
                    None,
                    Some("b4f1c2d3-0e9f-4a8b-9c7d-6e5f4a3b2c1d")
                ),
                21263
            ))
        );
    }

    #[test]
    fn gemini_stream_result_counts_thinking_as_output() {
        let u = read_usage(Adapter::Gemini, &fixture("gemini-stream.jsonl")).expect("read");
        assert_eq!(u, Some(usage(5000, 400, None, Some("gs-42"))));
    }

    #[test]
    fn goose_total_counts_as_input() {
        let u = read_usage(Adapter::Goose, &fixture("goose-stream.jsonl")).expect("read");
        assert_eq!(u, Some(usage(18342, 0, None, None)));
        let doc = "{\n  \"messages\": [],\n  \"metadata\": {\n    \"total_tokens\": 42,\n    \"status\": \"completed\"\n  }\n}\n";
        assert_eq!(
            usage_of(Adapter::Goose, doc),
            Some(usage(42, 0, None, None))
        );
    }

    #[test]
    fn usage_read_live_in_any_chunks_is_what_the_log_gives() {
        // Claude Code's stream: one message's usage repeated as it grows, then another's.
        let log = concat!(
            "{\"type\":\"assistant\",\"message\":{\"id\":\"m1\",\"usage\":{\"input_tokens\":100,\"output_tokens\":1}}}\n",
            "{\"type\":\"assistant\",\"message\":{\"id\":\"m1\",\"usage\":{\"input_tokens\":100,\"output_tokens\":40}}}\n",
            "{\"type\":\"assistant\",\"message\":{\"id\":\"m2\",\"usage\":{\"input_tokens\":200,\"output_tokens\":7}}}\n",
        );
        for cut in [1, 7, 64, log.len()] {
            let mut live = LiveUsage::new(Adapter::Claude).expect("scanner");
            let mut seen = Vec::new();
            for chunk in log.as_bytes().chunks(cut) {
                live.feed(chunk, |l| {
                    seen.push(l.so_far().map(|u| u.tokens()));
                    false
                });
            }
            // Each line is read once, whole: the message in progress counts as it stands.
            assert_eq!(seen, [Some(101), Some(140), Some(347)], "cut {cut}");
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("out");
        std::fs::write(&path, log).expect("write");
        let read = read_usage(Adapter::Claude, &path)
            .expect("read")
            .expect("usage");
        assert_eq!(read.tokens(), 347);
    }

    #[test]
    fn a_live_reader_asked_to_stop_reads_no_further_line() {
        let mut live = LiveUsage::new(Adapter::Command).expect("scanner");
        let mut lines = 0;
        live.feed(
            b"MVK_USAGE={\"usd\":0.1}\nMVK_USAGE={\"usd\":0.2}\nMVK_USAGE={\"usd\":0.3}\n",
            |_| {
                lines += 1;
                lines == 2
            },
        );
        assert_eq!(live.so_far().and_then(|u| u.usd_micros), Some(200_000));
    }

    #[test]
    fn lines_over_a_mebibyte_are_skipped_and_the_next_line_is_read() {
        let mut text = String::from("MVK_USAGE={\"input_tokens\":1}\n");
        text.push_str("MVK_USAGE={\"input_tokens\":2,\"pad\":\"");
        text.push_str(&"x".repeat(MAX_LINE + 10));
        text.push_str("\"}\n");
        assert_eq!(
            usage_of(Adapter::Command, &text),
            Some(usage(1, 0, None, None))
        );
        text.push_str("MVK_USAGE={\"input_tokens\":3}\r\n");
        assert_eq!(
            usage_of(Adapter::Command, &text),
            Some(usage(3, 0, None, None))
        );
    }

    #[test]
    fn a_last_line_without_newline_is_read() {
        assert_eq!(
            usage_of(Adapter::Command, "x\nMVK_USAGE={\"input_tokens\":4}"),
            Some(usage(4, 0, None, None))
        );
    }

    #[test]
    fn built_in_patterns_compile_for_every_adapter() {
        for adapter in ALL {
            assert!(RateLimitMatcher::new(adapter, &[]).is_ok(), "{adapter:?}");
        }
    }

    #[test]
    fn an_invalid_extra_pattern_is_an_error() {
        let err = RateLimitMatcher::new(Adapter::Command, &["(unclosed".to_string()]);
        assert!(matches!(err, Err(regex::Error::Syntax(_))));
    }

    #[test]
    fn claude_usage_limit_waits_until_the_reset() {
        let m = matcher(Adapter::Claude);
        let out = fixture_text("claude-usage-limit.out");
        let hit = m.check_at(&out, at(1_760_000_400 - 600)).expect("limited");
        assert_eq!(hit.retry_after, Some(Duration::from_secs(600)));
        assert!(
            hit.message
                .contains("Claude AI usage limit reached|1760000400"),
            "{}",
            hit.message
        );
        assert!(hit.message.chars().count() <= MESSAGE_CHARS);
        let far = m
            .check_at(&out, at(1_760_000_400 - 86_400))
            .expect("limited");
        assert_eq!(far.retry_after, Some(MAX_RETRY_AFTER));
        let past = m.check_at(&out, at(1_760_000_400 + 5)).expect("limited");
        assert_eq!(past.retry_after, None);
    }

    #[test]
    fn claude_api_errors_and_plan_limits() {
        let m = matcher(Adapter::Claude);
        for line in [
            r#"API Error: 429 {"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your account's rate limit. Please try again later."}}"#,
            r#"API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            "You've hit your limit · resets 7pm (America/Los_Angeles)",
            "You've hit your session limit · resets 3:50pm (Asia/Tokyo)",
            "5-hour limit reached ∙ resets 1am",
            "Claude usage limit reached. Your limit will reset at 5pm (Europe/Warsaw).",
        ] {
            let hit = m.check(&format!("working…\n{line}\n")).expect(line);
            assert_eq!(hit.message, line.trim());
            assert_eq!(hit.retry_after, None, "{line}");
        }
    }

    #[test]
    fn codex_usage_limit_waits_at_most_an_hour() {
        let m = matcher(Adapter::Codex);
        let hit = m
            .check(&fixture_text("codex-usage-limit.jsonl"))
            .expect("limited");
        assert_eq!(hit.retry_after, Some(MAX_RETRY_AFTER));
        // The JSON report's words, not the JSON.
        assert!(
            hit.message.starts_with("You've hit your usage limit."),
            "{}",
            hit.message
        );
        let stream = m
            .check("ERROR: stream error: exceeded retry limit, last status: 429 Too Many Requests")
            .expect("limited");
        assert_eq!(stream.retry_after, None);
    }

    #[test]
    fn openai_rate_limit_names_seconds() {
        let m = matcher(Adapter::Codex);
        let hit = m
            .check("Rate limit reached for gpt-5 in organization org-x on tokens per min (TPM): Limit 30000, Used 28578, Requested 4439. Please try again in 6.034s. Visit https://platform.openai.com/account/rate-limits to learn more.")
            .expect("limited");
        assert_eq!(hit.retry_after, Some(Duration::from_millis(6034)));
    }

    #[test]
    fn aider_litellm_rate_limit() {
        let hit = matcher(Adapter::Aider)
            .check(&fixture_text("aider-rate-limit.err"))
            .expect("limited");
        assert_eq!(
            hit.message,
            "The API provider has rate limited you. Try again later or check your quotas."
        );
        // "Retrying in 0.2 seconds" is aider's own backoff, not the provider's reset.
        assert_eq!(hit.retry_after, None);
    }

    #[test]
    fn gemini_quota_error_reads_its_retry_delay() {
        let hit = matcher(Adapter::Gemini)
            .check(&fixture_text("gemini-quota.err"))
            .expect("limited");
        assert_eq!(hit.retry_after, Some(Duration::from_secs_f64(47.434392449)));
        assert!(hit.message.contains("\\\"code\\\": 429"), "{}", hit.message);
        assert_eq!(hit.message.chars().count(), MESSAGE_CHARS);
        let delay = matcher(Adapter::Gemini)
            .check("got status: 429 Too Many Requests.\n        \"retryDelay\": \"26s\"\n")
            .expect("limited");
        assert_eq!(delay.retry_after, Some(Duration::from_secs(26)));
    }

    #[test]
    fn goose_rate_limit_retry_after_seconds() {
        let hit = matcher(Adapter::Goose)
            .check(&fixture_text("goose-rate-limit.err"))
            .expect("limited");
        assert_eq!(hit.retry_after, Some(Duration::from_secs(30)));
        assert!(
            hit.message
                .starts_with("Ran into this error: Rate limit exceeded"),
            "{}",
            hit.message
        );
    }

    #[test]
    fn a_retry_after_header_on_another_line() {
        let hit = matcher(Adapter::Claude)
            .check(
                "HTTP/1.1 429 Too Many Requests\nretry-after: 17\ncontent-type: application/json\n",
            )
            .expect("limited");
        assert_eq!(hit.message, "HTTP/1.1 429 Too Many Requests");
        assert_eq!(hit.retry_after, Some(Duration::from_secs(17)));
    }

    #[test]
    fn command_agents_match_only_their_own_patterns() {
        let out = "error: 429 Too Many Requests\nslow down, please\n";
        assert_eq!(matcher(Adapter::Command).check(out), None);
        let own = RateLimitMatcher::new(Adapter::Command, &["(?i)SLOW DOWN".to_string()])
            .expect("compiles");
        let hit = own.check(out).expect("limited");
        assert_eq!(hit.message, "slow down, please");
    }

    #[test]
    fn ordinary_failures_are_not_rate_limits() {
        let out = "running 12 tests\ntest rate_limiter::allows_burst ... FAILED\n\
                   test result: FAILED. 11 passed; 1 failed\nerror: test failed, to rerun pass `--lib`\n\
                   Please try again later.\n";
        for adapter in ALL {
            assert_eq!(matcher(adapter).check(out), None, "{adapter:?}");
        }
        // A successful Claude result is no limit either.
        let ok = fixture_text("claude-json.out");
        assert_eq!(matcher(Adapter::Claude).check(&ok), None);
    }

    #[test]
    fn messages_are_trimmed_and_at_most_200_chars() {
        let m = matcher(Adapter::Goose);
        let hit = m
            .check("   \x1b[31mRate limit exceeded\x1b[0m   \n")
            .expect("limited");
        assert_eq!(hit.message, "Rate limit exceeded");
        let long = format!(
            "{} rate limit exceeded {}",
            "é".repeat(500),
            "ü".repeat(500)
        );
        let hit = m.check(&long).expect("limited");
        assert_eq!(hit.message.chars().count(), MESSAGE_CHARS);
        assert!(hit.message.contains("rate limit exceeded"));
    }

    #[test]
    fn waits_in_words() {
        assert_eq!(parse_wait("30"), Some(30.0));
        assert_eq!(parse_wait("30 seconds."), Some(30.0));
        assert_eq!(parse_wait("20ms"), Some(0.02));
        assert_eq!(parse_wait("1m30s"), Some(90.0));
        assert_eq!(parse_wait("1 hour and 5 minutes"), Some(3900.0));
        assert_eq!(
            parse_wait("2 days 17 hours 14 minutes."),
            Some(2.0 * 86400.0 + 17.0 * 3600.0 + 14.0 * 60.0)
        );
        assert_eq!(parse_wait("later"), None);
        assert_eq!(parse_wait("5 attempts"), None);
        assert_eq!(parse_wait("1.2.3s"), None);
        assert_eq!(clamp_wait(f64::INFINITY), MAX_RETRY_AFTER);
        assert_eq!(clamp_wait(1e30), MAX_RETRY_AFTER);
    }

    /// Pieces of the formats above, so random logs reach the parsers' deeper branches.
    fn fragment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("MVK_USAGE=".to_string()),
            Just("{\"type\":\"result\",\"usage\":{\"input_tokens\":".to_string()),
            Just("{\"type\":\"assistant\",\"message\":{\"id\":\"m\",\"usage\":{".to_string()),
            Just("{\"type\":\"turn.completed\",\"usage\":".to_string()),
            Just("{\"msg\":{\"type\":\"token_count\",\"info\":{\"total_token_usage\":".to_string()),
            Just("\"stats\":{\"models\":{\"m\":{\"tokens\":{\"prompt\":".to_string()),
            Just("{\"type\":\"complete\",\"total_tokens\":".to_string()),
            Just("Tokens: 9.9k sent, ".to_string()),
            Just("Cost: $1e309 message, $99999999999999999999 session.".to_string()),
            Just("try again in ".to_string()),
            Just("retry-after: ".to_string()),
            Just("usage limit reached|".to_string()),
            Just("429 Too Many Requests".to_string()),
            Just("{\n".to_string()),
            Just("}\n".to_string()),
            Just("\x1b[".to_string()),
            Just("é".to_string()),
            "[0-9.eE+-]{1,30}",
            "[ -~]{0,20}",
            Just("\n".to_string()),
            Just("}}}".to_string()),
        ]
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
            let mut f = tempfile::NamedTempFile::new().expect("temp file");
            f.write_all(&bytes).expect("write");
            let text = String::from_utf8_lossy(&bytes);
            for adapter in ALL {
                let read = read_usage(adapter, f.path());
                prop_assert!(read.is_ok(), "{adapter:?}: {read:?}");
                let _ = matcher(adapter).check(&text);
            }
        }

        #[test]
        fn random_logs_of_known_pieces_never_panic(parts in proptest::collection::vec(fragment(), 0..40)) {
            let text = parts.concat();
            let mut f = tempfile::NamedTempFile::new().expect("temp file");
            f.write_all(text.as_bytes()).expect("write");
            for adapter in ALL {
                let read = read_usage(adapter, f.path());
                prop_assert!(read.is_ok(), "{adapter:?}: {read:?}");
                if let Some(hit) = matcher(adapter).check_at(&text, at(1_000)) {
                    prop_assert!(hit.message.chars().count() <= MESSAGE_CHARS);
                    prop_assert!(hit.retry_after.is_none_or(|d| d <= MAX_RETRY_AFTER));
                }
            }
        }
    }
}
