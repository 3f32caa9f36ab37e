//! MCP requests on standard input in, tool results on standard output out: `mvk mcp`, the loop
//! contract as tools for agents that call them (the Model Context Protocol, served with the
//! official `rmcp` SDK). Every tool is the command line's own implementation: `plan`,
//! `verify` and `status` call the library in this process; `run_attempt` runs `mvk attempt`
//! and waits for it; `apply`, `resume`, `approve` and `reject` start the command as a detached
//! process ([`spawn`]) and answer with the run's id at once.
//!
//! No input can weaken the contract: the inputs name files, runs, tasks and revisions only
//! (unknown arguments are refused by each schema), and the work is done by the same code as
//! from the command line, so the seal, the evidence rule and the review bound hold exactly.

pub(crate) mod spawn;

use std::borrow::Cow;
use std::path::PathBuf;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::cli::mcp::McpArgs;
use crate::cli::printer::Printer;
use crate::cli::{Cli, CliError, Command, Exit};
use crate::run::attempt_result::AttemptResult;
use crate::run::git::verify::Verification;
pub(crate) use spawn::Started;

/// What every tool's description ends with.
const HOLDS: &str = "The contract cannot be weakened from here: no input turns off or loosens the seal, the evidence rule or the review bound; they hold exactly as from the command line.";

/// The server: the repository `--repo` named, if any (else the working directory's).
#[derive(Clone)]
pub(crate) struct Server {
    /// `--repo`, made absolute (the commands this server starts run in `dir`).
    repo: Option<PathBuf>,
    /// What the files named in tool calls are relative to: the top of the repository's
    /// checkout that `--repo` (or the directory the server was started in) is in.
    dir: PathBuf,
    tool_router: ToolRouter<Server>,
}

/// Serves MCP on standard input and output until the client closes them.
pub(crate) async fn serve(repo: Option<PathBuf>) -> Result<(), std::io::Error> {
    let cwd = std::env::current_dir()?;
    let repo = repo.map(|r| cwd.join(r));
    let dir = crate::session::fence(repo.as_deref()).map_err(std::io::Error::other)?;
    let server = Server {
        repo,
        dir,
        tool_router: Server::tool_router(),
    };
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}

/// `mvk mcp`: serves MCP on standard input and output until the client closes them. Exit 0
/// when the client went away, 70 when serving failed.
pub(crate) fn command(cli: &Cli, _printer: &Printer, _args: &McpArgs) -> Result<Exit, CliError> {
    crate::cli::running::runtime()?
        .block_on(serve(cli.repo.clone()))
        .map_err(|e| CliError::Internal {
            message: format!("the MCP server stopped: {e}"),
        })?;
    Ok(Exit::Ok)
}

/// A loop or flow file.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PlanInput {
    /// The loop or flow file, inside the repository (relative to its top directory, or absolute).
    pub(crate) file: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct VerifyInput {
    /// The loop or flow file whose seal is the oracle (relative to the repository's top
    /// directory, or absolute; inside the repository).
    pub(crate) file: String,
    /// The revision the change starts from (a commit, branch or tag).
    pub(crate) base: String,
    /// The revision it ends at; when absent, the checkout with its uncommitted work.
    pub(crate) head: Option<String>,
    /// Check only this task's seal (default: every task's).
    pub(crate) task: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AttemptInput {
    /// The loop or flow file, inside the repository (relative to its top directory, or absolute).
    pub(crate) file: String,
    /// The task to attempt (needed when the file has several).
    pub(crate) task: Option<String>,
}

/// When a run stops for a person.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    /// Never: attempts go on and passed work lands.
    Auto,
    /// Before each landing.
    Batch,
    /// After each attempt.
    Step,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApplyInput {
    /// The loop or flow file, inside the repository (relative to its top directory, or absolute).
    pub(crate) file: String,
    /// Run only this task of a flow.
    pub(crate) task: Option<String>,
    /// When to stop for a person (default `auto`).
    pub(crate) mode: Option<Mode>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResumeInput {
    /// The run (an id or a unique prefix; default: the latest run of `apply`).
    pub(crate) run: Option<String>,
    /// Go on although the definition changed: the changed tasks and those after them are
    /// planned again (fresh budgets and ladder); recorded in the ledger.
    #[serde(default)]
    pub(crate) accept_drift: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatusInput {
    /// The run (an id or a unique prefix; default: the latest run).
    pub(crate) run: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApproveInput {
    /// The paused run (an id or a unique prefix).
    pub(crate) run: String,
    /// The task whose checkpoint is answered (needed only when several wait).
    pub(crate) task: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RejectInput {
    /// The paused run (an id or a unique prefix).
    pub(crate) run: String,
    /// The task whose checkpoint is answered (needed only when several wait).
    pub(crate) task: Option<String>,
    /// What is wrong: it goes into the next attempt's prompt.
    pub(crate) reason: String,
}

/// A JSON document of a schema the book documents (`mvk plan --json`, `mvk status --json`).
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub(crate) struct Document(Value);

impl JsonSchema for Document {
    fn schema_name() -> Cow<'static, str> {
        "Document".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "description": "the command's `--json` document; its `schema` field names its version (`mvk.plan.v1`, `mvk.status.v1`)",
            "properties": {"schema": {"type": "string"}},
            "required": ["schema"]
        })
    }
}

#[tool_router]
impl Server {
    /// The command line's view of this server's settings, for the functions it shares.
    fn cli(&self) -> Cli {
        Cli {
            repo: self.repo.clone(),
            quiet: true,
            verbose: false,
            command: Command::Mcp(McpArgs {}),
        }
    }

    #[tool(
        description = "Compile a loop or flow file without running anything: its tasks in dependency order with each task's digest, gates, seal, budgets and ladder, the batches, and the worst case (attempts, USD, tokens, wall time) the budgets allow. The result is `mvk plan --json`'s document (schema mvk.plan.v1). A file that does not compile is an error carrying every diagnostic. The contract cannot be weakened from here: no input turns off or loosens the seal, the evidence rule or the review bound; they hold exactly as from the command line.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn plan(
        &self,
        Parameters(input): Parameters<PlanInput>,
    ) -> Result<Json<Document>, ErrorData> {
        let cli = self.cli();
        let program = compile(&cli, &self.file(&input.file)?)?;
        let plan = crate::plan::plan(&program);
        Ok(Json(Document(crate::cli::plan::to_json(&program, &plan))))
    }

    #[tool(
        description = "The oracle check alone: did the change from `base` to `head` (or to the checkout with its uncommitted work, when `head` is absent) touch a path the loop seals? Per task and overall: `untouched`, `changed` (each breach: path, how, which commit), or `unknown` when the seal cannot certify the change (the task seals nothing, or the head does not descend from the base); unknown is never a pass. As `mvk verify --json` (schema mvk.verify.v1). The contract cannot be weakened from here: no input turns off or loosens the seal, the evidence rule or the review bound; they hold exactly as from the command line.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn verify(
        &self,
        Parameters(input): Parameters<VerifyInput>,
    ) -> Result<Json<Verification>, ErrorData> {
        let cli = self.cli();
        let file = self.file(&input.file)?;
        let program = compile(&cli, &file)?;
        crate::cli::verify::check(
            &cli,
            &program,
            &file,
            (&input.base, input.head.as_deref()),
            input.task.as_deref(),
        )
        .map(Json)
        .map_err(|e| cli_error(&e))
    }

    #[tool(
        description = "One evidenced attempt of one task, as `mvk apply` would judge it, and nothing landed: a clean worktree from the target's tip, the first rung's agent, then the seal, the gates with nonce-bound evidence, and the reviewer. Waits for the attempt and returns its verdict (passed, failed, or unknown when a gate gave no evidence), the test counts, the failure with its signature (what the same-failure brake compares), the branch holding the change and the ids of the run's events in the ledger. Recorded as a run of its own (`status` reads it). As `mvk attempt --json` (schema mvk.attempt.v1). The contract cannot be weakened from here: no input turns off or loosens the seal, the evidence rule or the review bound; they hold exactly as from the command line.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = true
        )
    )]
    async fn run_attempt(
        &self,
        Parameters(input): Parameters<AttemptInput>,
    ) -> Result<Json<AttemptResult>, ErrorData> {
        let mut args = vec![
            "attempt".to_string(),
            self.file_arg(&input.file)?,
            "--json".into(),
        ];
        if let Some(t) = input.task {
            args.extend(["--task".into(), t]);
        }
        let out = spawn::wait(&self.dir, &self.global_args(), &args).await?;
        if !(0..=3).contains(&out.code) {
            return Err(failed(&args[0], out.code, &out.stderr));
        }
        serde_json::from_str(&out.stdout).map(Json).map_err(|e| {
            ErrorData::internal_error(
                format!(
                    "`mvk attempt` printed no result this server can read ({e}); its errors:\n{}",
                    out.stderr
                ),
                None,
            )
        })
    }

    #[tool(
        description = "Start a run of a loop or flow file, as `mvk apply` does, in a detached process, and return its run id at once; follow it with `status`. The run keeps every rule of the contract: each attempt in its own worktree, the seal before any gate, gates with nonce-bound evidence, the independent reviewer and its bounded rounds, budgets, the ladder, the merge. `mode` says when it stops for a person (`auto`, `batch`, `step`). The contract cannot be weakened from here: no input turns off or loosens the seal, the evidence rule or the review bound; they hold exactly as from the command line.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = true
        )
    )]
    async fn apply(
        &self,
        Parameters(input): Parameters<ApplyInput>,
    ) -> Result<Json<Started>, ErrorData> {
        let cli = self.cli();
        let repo_root = crate::cli::repo::repository(&cli, &self.file(&input.file)?)
            .map_err(|e| cli_error(&e))?;
        let mut args = vec!["apply".to_string(), self.file_arg(&input.file)?];
        if let Some(t) = input.task {
            args.extend(["--task".into(), t]);
        }
        if let Some(m) = input.mode {
            let m = match m {
                Mode::Auto => "auto",
                Mode::Batch => "batch",
                Mode::Step => "step",
            };
            args.extend(["--mode".into(), m.into()]);
        }
        spawn::detached(&self.dir, &repo_root, &self.global_args(), &args)
            .await
            .map(Json)
    }

    #[tool(
        description = "Continue an interrupted run, or a paused one whose checkpoint a person answered, as `mvk resume` does, in a detached process; returns the run id at once. A changed definition or sealed file stops it (drift, reported as an error) unless `accept_drift`. The contract cannot be weakened from here: no input turns off or loosens the seal, the evidence rule or the review bound; they hold exactly as from the command line.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = true
        )
    )]
    async fn resume(
        &self,
        Parameters(input): Parameters<ResumeInput>,
    ) -> Result<Json<Started>, ErrorData> {
        let mut args = vec!["resume".to_string()];
        if input.accept_drift {
            args.push("--accept-drift".into());
        }
        // `--` first: a run id that looks like a flag stays a run id.
        args.push("--".into());
        args.extend(input.run);
        self.continue_run(args).await
    }

    #[tool(
        description = "Where a run stands (the latest by default): liveness, phase, outcome and exit code, per task the attempt, rung, agent, budget spent against its limits, the last failure and what it waits for, and the run's diagnosis. The result is `mvk status --json`'s document (schema mvk.status.v1). The contract cannot be weakened from here: no input turns off or loosens the seal, the evidence rule or the review bound; they hold exactly as from the command line.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn status(
        &self,
        Parameters(input): Parameters<StatusInput>,
    ) -> Result<Json<Document>, ErrorData> {
        let cli = self.cli();
        let ledger = crate::cli::reading::open(&cli).map_err(|e| cli_error(&e))?;
        let run = crate::cli::reading::find_run(&ledger, input.run.as_deref())
            .map_err(|e| cli_error(&e))?;
        let s = crate::report::status::status(&ledger.reader, &ledger.mvk_dir, &run)
            .map_err(|e| cli_error(&crate::cli::reading::internal(&e)))?;
        let doc = serde_json::to_value(&s).map_err(|e| {
            ErrorData::internal_error(format!("cannot encode the status: {e}"), None)
        })?;
        Ok(Json(Document(doc)))
    }

    #[tool(
        description = "Answer the checkpoint where a paused run waits with approval, as `mvk approve` does: the decision is recorded in the ledger and the run continues in a detached process; returns the run id at once. Approval lands only what already passed the seal and the gates with evidence (or what a person may decide after the reviewer's rounds ran out, which is this checkpoint). The contract cannot be weakened from here: no input turns off or loosens the seal, the evidence rule or the review bound; they hold exactly as from the command line.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = true
        )
    )]
    async fn approve(
        &self,
        Parameters(input): Parameters<ApproveInput>,
    ) -> Result<Json<Started>, ErrorData> {
        let mut args = vec!["approve".to_string(), "--".to_string(), input.run];
        args.extend(input.task);
        self.continue_run(args).await
    }

    #[tool(
        description = "Answer the checkpoint where a paused run waits with a rejection, as `mvk reject` does: the reason is recorded and goes into the next attempt's prompt, and the run continues in a detached process; returns the run id at once. The contract cannot be weakened from here: no input turns off or loosens the seal, the evidence rule or the review bound; they hold exactly as from the command line.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = true
        )
    )]
    async fn reject(
        &self,
        Parameters(input): Parameters<RejectInput>,
    ) -> Result<Json<Started>, ErrorData> {
        // `--reason=` and `--`: a reason or name starting with `-` is not read as a flag.
        let mut args = vec![
            "reject".to_string(),
            format!("--reason={}", input.reason),
            "--".to_string(),
            input.run,
        ];
        args.extend(input.task);
        self.continue_run(args).await
    }
}

impl Server {
    /// `--repo DIR` for the commands this server starts, when it was given one.
    fn global_args(&self) -> Vec<String> {
        match &self.repo {
            Some(r) => vec!["--repo".into(), r.display().to_string()],
            None => Vec::new(),
        }
    }

    /// A file a tool call names: relative to the repository's top directory (what an agent
    /// working in the repository means), never to wherever the server happened to start; and
    /// inside it once `..` and symbolic links are resolved, and outside its git directory, else
    /// refused: a tool reads the file it is given and shows it in diagnostics, so `/etc/passwd`,
    /// `../secret` or `.git/config` would hand a caller what this process can read. (What the
    /// file imports is fenced the same way, by [`crate::session::fence`].) Returns the resolved
    /// path.
    fn file(&self, file: &str) -> Result<PathBuf, ErrorData> {
        let refused = |why: String| {
            ErrorData::invalid_params(
                format!("refused: {why}; a tool reads files of its repository only"),
                Some(json!({"exit_code": Exit::Usage.code()})),
            )
        };
        let fence = crate::resolve::confine::Confine::for_checkout(&self.dir)
            .map_err(|e| refused(format!("`{file}` cannot be checked: {e}")))?;
        match fence.check(&self.dir.join(file)) {
            Ok(resolved) if resolved != fence.root() => Ok(resolved),
            Ok(_) => Err(refused(format!("`{file}` names no file"))),
            Err(why) => Err(refused(why)),
        }
    }

    /// FILE as an argument of a command started in the server's `dir`: relative to it, once
    /// [`Self::file`] has confined it to the repository.
    fn file_arg(&self, file: &str) -> Result<String, ErrorData> {
        let resolved = self.file(file)?;
        let root = self.dir.canonicalize().unwrap_or_else(|_| self.dir.clone());
        let rel = resolved
            .strip_prefix(&root)
            .map(|r| r.to_string_lossy().into_owned())
            .unwrap_or_else(|_| resolved.to_string_lossy().into_owned());
        Ok(file_arg(rel))
    }

    /// Starts a command that continues a run of this repository.
    async fn continue_run(&self, args: Vec<String>) -> Result<Json<Started>, ErrorData> {
        let repo_root = crate::cli::repo::repo_root(&self.cli()).map_err(|e| cli_error(&e))?;
        spawn::detached(&self.dir, &repo_root, &self.global_args(), &args)
            .await
            .map(Json)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("mvk", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "mvk runs coding agents in loops declared in KDL: every attempt in a clean worktree, checked against a seal (the agent must not touch the oracle), then gates with nonce-bound evidence that tests ran, then an independent reviewer, then merged; budgets and a ladder bound it. `plan` compiles a loop file, `verify` is the oracle check between two revisions, `run_attempt` makes one judged attempt without landing it, `apply` and `resume` start or continue a run and return its id at once, `status` says where a run stands, `approve` and `reject` answer a paused run's checkpoint. {HOLDS}"
            ))
    }
}

/// A file as an argument of a command started in the server's `dir`: one that starts with `-`
/// is still a file, not a flag.
fn file_arg(file: String) -> String {
    if file.starts_with('-') {
        format!("./{file}")
    } else {
        file
    }
}

/// Compiles `file`; its diagnostics, rendered as the command line shows them, are the error.
fn compile(cli: &Cli, path: &std::path::Path) -> Result<crate::ir::Program, ErrorData> {
    let compiled = crate::cli::compile_quiet(cli, path);
    match compiled.program {
        Some(p) => Ok(p),
        None => {
            let e = crate::cli::failure(path, &compiled.diags);
            let rendered =
                crate::diag::Renderer::plain(100).render_all(&compiled.diags, &compiled.sources);
            Err(ErrorData::invalid_params(
                format!("{e}\n\n{rendered}"),
                Some(json!({"exit_code": e.exit().code()})),
            ))
        }
    }
}

/// A command-line error as an MCP error: its message and hint, and the exit code the command
/// would end with.
fn cli_error(e: &CliError) -> ErrorData {
    let mut text = e.to_string();
    if let Some(h) = e.hint() {
        text.push_str(&format!("\nhint: {h}"));
    }
    let data = Some(json!({"exit_code": e.exit().code()}));
    match e {
        CliError::Internal { .. } => ErrorData::internal_error(text, data),
        _ => ErrorData::invalid_params(text, data),
    }
}

/// A started command that ended with a usage, definition or internal error: what it printed.
fn failed(command: &str, code: i32, stderr: &str) -> ErrorData {
    let text = format!(
        "`mvk {command}` failed (exit {code}):\n{}",
        stderr.trim_end()
    );
    let data = Some(json!({"exit_code": code}));
    if code == 70 || code < 0 {
        ErrorData::internal_error(text, data)
    } else {
        ErrorData::invalid_params(text, data)
    }
}
