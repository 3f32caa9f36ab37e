//! `gate` and `agent` definitions in, checked templates out ([`GateDef`], [`AgentDef`]), and their
//! uses in loops bound to parameters: [`ir::Gate`](crate::ir::Gate), [`ir::Agent`](crate::ir::Agent).

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use super::interp::{self, InterpError};
use super::{DefRef, World};
use crate::diag::{Diagnostic, suggest};
use crate::ir::{self, Adapter, EvidenceMode};
use crate::source::{Origin, Span};
use crate::syntax::ast::{AgentUse, Binding, Command, EnvVar, GateDecl, Item, ParamDecl, Spanned};

#[derive(Debug, Clone)]
pub(crate) struct ParamSpec {
    pub(crate) name: String,
    pub(crate) default: Option<String>,
    pub(crate) span: Span,
}

/// A command whose strings may still hold `{{param}}` placeholders.
#[derive(Debug, Clone)]
pub(crate) enum CommandTemplate {
    Run(Vec<Spanned<String>>),
    Sh(Spanned<String>),
}

impl CommandTemplate {
    fn strings(&self) -> Vec<&Spanned<String>> {
        match self {
            CommandTemplate::Run(argv) => argv.iter().collect(),
            CommandTemplate::Sh(s) => vec![s],
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct GateDef {
    pub(crate) name: String,
    pub(crate) params: Vec<ParamSpec>,
    pub(crate) command: CommandTemplate,
    pub(crate) env: Vec<EnvVar>,
    pub(crate) evidence: EvidenceMode,
    pub(crate) timeout: Duration,
    pub(crate) doc: Option<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct AgentDef {
    pub(crate) name: String,
    pub(crate) params: Vec<ParamSpec>,
    pub(crate) command: CommandTemplate,
    pub(crate) env: Vec<EnvVar>,
    pub(crate) adapter: Adapter,
    pub(crate) timeout: Duration,
    pub(crate) rate_limits: Vec<String>,
    pub(crate) sandbox: Option<ir::Sandbox>,
}

/// A `sandbox` node as the IR keeps it: defaults written in (network on, not required), the
/// grants sorted and each once, so their order never changes a digest.
pub(crate) fn lower_sandbox(decl: &crate::syntax::ast::SandboxDecl) -> ir::Sandbox {
    let sorted = |list: &[Spanned<String>]| {
        let set: std::collections::BTreeSet<String> = list.iter().map(|s| s.node.clone()).collect();
        set.into_iter().collect()
    };
    ir::Sandbox {
        network: decl.network.as_ref().is_none_or(|n| n.node),
        required: decl.required.as_ref().is_some_and(|r| r.node),
        write: sorted(&decl.write),
        env: sorted(&decl.env),
    }
}

fn param_specs(params: &[ParamDecl]) -> Vec<ParamSpec> {
    params
        .iter()
        .map(|p| ParamSpec {
            name: p.name.node.clone(),
            default: p.default.as_ref().map(|d| d.node.render()),
            span: p.name.span,
        })
        .collect()
}

/// Reports a failed placeholder substitution at the string it happened in.
pub(crate) fn interp_error(
    world: &mut World,
    err: &InterpError,
    at: Span,
    owner: &str,
    known: &[String],
) {
    let known_list: Vec<&str> = known.iter().map(String::as_str).collect();
    let d = match err {
        InterpError::Unclosed { .. } => Diagnostic::error("mvk::bad-placeholder", format!("unclosed `{{{{` in {owner}"))
            .at(at, "opened but not closed")
            .help("close the placeholder with `}}`, e.g. {{name}}"),
        InterpError::BadName { name, .. } => Diagnostic::error("mvk::bad-placeholder", format!("`{{{{{name}}}}}` is not a valid placeholder in {owner}"))
            .at(at, "malformed placeholder")
            .help("a placeholder is one name in double braces, e.g. {{target}}"),
        InterpError::Unknown { name, .. } if name == "item" => Diagnostic::error("mvk::unknown-placeholder", format!("`{{{{item}}}}` in {owner} outside a fan-out"))
            .at(at, "no item here")
            .help("`{{item}}` is only defined in a task with `each=`; in a definition, declare a `param` and pass `{{item}}` to it"),
        InterpError::Unknown { name, .. } => Diagnostic::error("mvk::unknown-placeholder", format!("unknown placeholder `{{{{{name}}}}}` in {owner}"))
            .at(at, "not a parameter")
            .help(if known.is_empty() {
                "declare it first: param NAME default=\"…\"".to_string()
            } else {
                suggest("placeholders known here", name, &known_list)
            }),
    };
    world.diags.push(d);
}

impl World {
    fn lookup(
        &mut self,
        module: usize,
        name: &Spanned<String>,
        kind: &str,
        agents: bool,
    ) -> Option<DefRef> {
        let scope = &self.modules[module].scope;
        let table = if agents { &scope.agents } else { &scope.gates };
        if let Some((def, _)) = table.get(&name.node) {
            return Some(*def);
        }
        if scope.incomplete {
            return None; // a failed import was reported; it may have defined this name
        }
        let names: Vec<&str> = table.keys().map(String::as_str).collect();
        let mut help = if names.is_empty() {
            format!("no {kind}s are defined or imported in this file")
        } else {
            suggest(&format!("{kind}s defined here"), &name.node, &names)
        };
        let kind_word = if agents { "agent" } else { "gate" };
        if agents && name.node == "human" {
            help = "a person is a rung of its own: write `rung human` in the ladder".to_string();
        } else if let Some(file) = crate::stdlib::defining(kind_word, &name.node) {
            help = format!(
                "`{}` is defined in the standard library's {file}: add import \"{file}\" to this file",
                name.node
            );
        } else if names.is_empty()
            || !name.node.contains('.') && names.iter().all(|n| n.contains('.'))
        {
            help.push_str(&format!(
                "; define it with `{kind} {} {{ … }}` or import a file that does (e.g. {})",
                name.node,
                if agents {
                    "import \"std/agents.kdl\""
                } else {
                    "import \"std/gates/rust.kdl\""
                }
            ));
        }
        let d = Diagnostic::error(
            if agents {
                "mvk::unknown-agent"
            } else {
                "mvk::unknown-gate"
            },
            format!("unknown {kind} `{}`", name.node),
        )
        .at(name.span, format!("no {kind} of this name"))
        .help(help);
        self.diags.push(d);
        None
    }

    /// Resolves a gate definition (following `use=` chains), memoized; `None` after an error.
    pub(crate) fn gate_def(&mut self, def: DefRef) -> Option<Rc<GateDef>> {
        if let Some(done) = self.gate_defs.get(&def) {
            return done.clone();
        }
        let Item::Gate(decl) = &self.modules[def.module].ast.items[def.item] else {
            return None;
        };
        let decl = decl.clone();
        if self.resolving.contains(&def) {
            self.diags.push(
                Diagnostic::error("mvk::definition-cycle", format!("gate `{}` is defined in terms of itself", decl.name.node))
                    .at(decl.uses.as_ref().map_or(decl.name.span, |u| u.span), "this `use=` leads back here")
                    .help("a definition may use another one, but the chain must end in a gate with a `run` or `sh`"),
            );
            return None;
        }
        self.resolving.push(def);
        let resolved = self.gate_def_uncached(def.module, &decl).map(Rc::new);
        self.resolving.pop();
        self.gate_defs.insert(def, resolved.clone());
        resolved
    }

    fn gate_def_uncached(&mut self, module: usize, decl: &GateDecl) -> Option<GateDef> {
        let evidence = decl
            .evidence
            .as_ref()
            .and_then(|e| EvidenceMode::parse(&e.node));
        if decl.evidence.is_some() && evidence.is_none() {
            return None; // reported by the syntax stage
        }
        if let Some(uses) = &decl.uses {
            self.refuse_command_with_use(decl, uses);
            let base_ref = self.lookup(module, uses, "gate", false)?;
            let base = self.gate_def(base_ref)?;
            let mut params = base.params.clone();
            for b in &decl.bindings {
                let value = self.binding_value(b, None, &format!("gate `{}`", decl.name.node))?;
                let Some(p) = params.iter_mut().find(|p| p.name == b.key.node) else {
                    self.unknown_param(b, &base.name, &base.params, "gate");
                    continue;
                };
                p.default = Some(value);
            }
            let mut env = base.env.clone();
            merge_env(&mut env, &decl.env);
            self.check_env_placeholders(
                &decl.env,
                &params,
                &[],
                &format!("gate `{}`", decl.name.node),
            );
            return Some(GateDef {
                name: decl.name.node.clone(),
                params,
                command: base.command.clone(),
                env,
                evidence: evidence.unwrap_or(base.evidence),
                timeout: decl.timeout.as_ref().map_or(base.timeout, |t| t.node),
                doc: decl.doc.clone().or_else(|| base.doc.clone()),
            });
        }
        let Some(command) = &decl.command else {
            self.diags.push(
                Diagnostic::error("mvk::missing-command", format!("gate `{}` has no command", decl.name.node))
                    .at(decl.name.span, "nothing to run")
                    .help("give it a block with `run \"program\" \"arg\"` or `sh \"script\"`, or build it on a definition with `use=NAME`"),
            );
            return None;
        };
        let params = param_specs(&decl.params);
        let command = template_of(command);
        let owner = format!("gate `{}`", decl.name.node);
        let ok = self.check_placeholders(&command, &decl.env, &params, &[], &owner);
        ok.then(|| GateDef {
            name: decl.name.node.clone(),
            params,
            command,
            env: decl.env.clone(),
            evidence: evidence.unwrap_or(EvidenceMode::Auto),
            timeout: decl
                .timeout
                .as_ref()
                .map_or(ir::DEFAULT_GATE_TIMEOUT, |t| t.node),
            doc: decl.doc.clone(),
        })
    }

    fn refuse_command_with_use(&mut self, decl: &GateDecl, uses: &Spanned<String>) {
        if let Some(cmd) = &decl.command {
            self.diags.push(
                Diagnostic::error(
                    "mvk::use-and-command",
                    format!(
                        "gate `{}` both uses a definition and runs a command",
                        decl.name.node
                    ),
                )
                .at(cmd.span, "a command of its own")
                .also(uses.span, "uses a definition")
                .help(
                    "drop the `run`/`sh` to use the definition, or drop `use=` to run this command",
                ),
            );
        }
        if let Some(p) = decl.params.first() {
            self.diags.push(
                Diagnostic::error("mvk::use-and-param", format!("gate `{}` uses a definition, so it cannot declare parameters", decl.name.node))
                    .at(p.span, "declared here")
                    .help("set the definition's parameters as properties instead: gate NAME use=DEF PARAM=\"value\""),
            );
        }
    }

    /// Resolves an agent definition, memoized; `None` after an error.
    pub(crate) fn agent_def(&mut self, def: DefRef) -> Option<Rc<AgentDef>> {
        if let Some(done) = self.agent_defs.get(&def) {
            return done.clone();
        }
        let Item::Agent(decl) = &self.modules[def.module].ast.items[def.item] else {
            return None;
        };
        let decl = decl.clone();
        let params = param_specs(&decl.params);
        let resolved = decl.command.as_ref().and_then(|command| {
            let command = template_of(command);
            let owner = format!("agent `{}`", decl.name.node);
            let ok = self.check_placeholders(
                &command,
                &decl.env,
                &params,
                ir::RUNTIME_PLACEHOLDERS,
                &owner,
            );
            let adapter = decl
                .adapter
                .as_ref()
                .map_or(Some(Adapter::Command), |a| Adapter::parse(&a.node));
            let mut rate_limits = Vec::new();
            for pattern in &decl.rate_limits {
                // Checked here so a run never starts with a pattern it cannot use.
                if let Err(e) = regex::Regex::new(&pattern.node) {
                    self.diags.push(
                        Diagnostic::error(
                            "mvk::bad-regex",
                            format!(
                                "`{}` is not a valid regular expression: {}",
                                pattern.node,
                                regex_problem(&e)
                            ),
                        )
                        .at(pattern.span, "invalid rate-limit pattern")
                        .help(r##"patterns use Rust regex syntax; to match `(`, `[`, `.`, `*`, `+`, `?` or `|` literally, put `\` before it: in KDL, "\\(429\\)" or the raw string #"\(429\)"#"##),
                    );
                }
                rate_limits.push(pattern.node.clone());
            }
            (ok && adapter.is_some()).then(|| {
                Rc::new(AgentDef {
                    name: decl.name.node.clone(),
                    params: params.clone(),
                    command,
                    env: decl.env.clone(),
                    adapter: adapter.unwrap_or(Adapter::Command),
                    timeout: decl
                        .timeout
                        .as_ref()
                        .map_or(ir::DEFAULT_AGENT_TIMEOUT, |t| t.node),
                    rate_limits,
                    sandbox: decl.sandbox.as_ref().map(lower_sandbox),
                })
            })
        });
        self.agent_defs.insert(def, resolved.clone());
        resolved
    }

    fn check_placeholders(
        &mut self,
        command: &CommandTemplate,
        env: &[EnvVar],
        params: &[ParamSpec],
        runtime: &[&str],
        owner: &str,
    ) -> bool {
        let before = self.diags.error_count();
        for s in command.strings() {
            self.check_string(&s.node, s.span, params, runtime, owner);
        }
        self.check_env_placeholders(env, params, runtime, owner);
        self.diags.error_count() == before
    }

    fn check_env_placeholders(
        &mut self,
        env: &[EnvVar],
        params: &[ParamSpec],
        runtime: &[&str],
        owner: &str,
    ) {
        for e in env {
            self.check_string(&e.value.node, e.value.span, params, runtime, owner);
        }
    }

    fn check_string(
        &mut self,
        s: &str,
        span: Span,
        params: &[ParamSpec],
        runtime: &[&str],
        owner: &str,
    ) {
        let lookup = |n: &str| params.iter().any(|p| p.name == n).then(String::new);
        if let Err(e) = interp::interpolate(s, &lookup, runtime) {
            let mut known: Vec<String> = params.iter().map(|p| p.name.clone()).collect();
            known.extend(runtime.iter().map(|r| (*r).to_string()));
            interp_error(self, &e, span, owner, &known);
        }
    }

    fn unknown_param(&mut self, b: &Binding, def_name: &str, params: &[ParamSpec], kind: &str) {
        let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
        // A misspelt property (`timout=`) reads as a parameter binding: offer the node's own
        // properties too, so the suggestion is the one meant.
        let props: &[&str] = match kind {
            "gate" => crate::syntax::items::GATE_PROPS,
            "agent" => crate::syntax::items::AGENT_PROPS,
            _ => &[],
        };
        let all: Vec<&str> = names.iter().chain(props).copied().collect();
        let also = if props.is_empty() {
            String::new()
        } else {
            format!(
                "; every {kind} also takes {}",
                props
                    .iter()
                    .map(|p| format!("`{p}=`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let help = match crate::diag::did_you_mean(&b.key.node, all.iter().copied()) {
            Some(best) if names.is_empty() => {
                format!("did you mean `{best}`? {kind} `{def_name}` takes no parameters{also}")
            }
            Some(best) => format!(
                "did you mean `{best}`? {kind} `{def_name}` takes {}{also}",
                names
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None if names.is_empty() => format!("{kind} `{def_name}` takes no parameters{also}"),
            None => format!(
                "{}{also}",
                suggest(&format!("{kind} `{def_name}` takes"), &b.key.node, &names)
            ),
        };
        self.diags.push(
            Diagnostic::error(
                "mvk::unknown-parameter",
                format!("{kind} `{def_name}` has no parameter `{}`", b.key.node),
            )
            .at(b.key.span, "unknown parameter")
            .help(help),
        );
    }

    /// A binding's value as text, with `{{item}}` filled in when there is one.
    fn binding_value(&mut self, b: &Binding, item: Option<&str>, owner: &str) -> Option<String> {
        let raw = b.value.node.render();
        let lookup = |n: &str| (n == "item").then(|| item.map(str::to_string)).flatten();
        match interp::interpolate(&raw, &lookup, &[]) {
            Ok(v) => Some(v.into_owned()),
            Err(e) => {
                let known = if item.is_some() {
                    vec!["item".to_string()]
                } else {
                    Vec::new()
                };
                interp_error(self, &e, b.value.span, owner, &known);
                None
            }
        }
    }

    /// Binds parameters: defaults, overridden by bindings; each required one must be given.
    fn bind(
        &mut self,
        def_name: &str,
        kind: &str,
        params: &[ParamSpec],
        bindings: &[Binding],
        item: Option<&str>,
        at: Span,
    ) -> Option<BTreeMap<String, String>> {
        let mut values = BTreeMap::new();
        let mut ok = true;
        for b in bindings {
            if !params.iter().any(|p| p.name == b.key.node) {
                self.unknown_param(b, def_name, params, kind);
                ok = false;
                continue;
            }
            match self.binding_value(b, item, &format!("{kind} `{def_name}`")) {
                Some(v) => {
                    values.insert(b.key.node.clone(), v);
                }
                None => ok = false,
            }
        }
        for p in params {
            if values.contains_key(&p.name) {
                continue;
            }
            match &p.default {
                Some(d) => {
                    values.insert(p.name.clone(), d.clone());
                }
                None => {
                    self.diags.push(
                        Diagnostic::error(
                            "mvk::missing-parameter",
                            format!("{kind} `{def_name}` needs parameter `{}`", p.name),
                        )
                        .at(at, "not given")
                        .also(p.span, "declared here without a default")
                        .help(format!("add `{}=\"…\"` to this node", p.name)),
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(values)
    }

    /// A loop's `gate` node as a runnable check.
    pub(crate) fn instantiate_gate(
        &mut self,
        module: usize,
        decl: &GateDecl,
        item: Option<&str>,
    ) -> Option<ir::Gate> {
        let owner = format!("gate `{}`", decl.name.node);
        let (def, bindings, extra_env, from): (Rc<GateDef>, &[Binding], &[EnvVar], Option<String>) =
            match &decl.uses {
                Some(uses) => {
                    self.refuse_command_with_use(decl, uses);
                    let r = self.lookup(module, uses, "gate", false)?;
                    (
                        self.gate_def(r)?,
                        &decl.bindings,
                        &decl.env,
                        Some(uses.node.clone()),
                    )
                }
                None => {
                    let Some(command) = &decl.command else {
                        self.diags.push(
                        Diagnostic::error("mvk::missing-command", format!("gate `{}` has no command", decl.name.node))
                            .at(decl.name.span, "nothing to run")
                            .help("write `gate NAME use=DEFINITION`, or give it a block: gate NAME { run \"program\" \"arg\" }"),
                    );
                        return None;
                    };
                    let params = param_specs(&decl.params);
                    let runtime: &[&str] = if item.is_some() { &["item"] } else { &[] };
                    let command = template_of(command);
                    if !self.check_placeholders(&command, &decl.env, &params, runtime, &owner) {
                        return None;
                    }
                    let def = GateDef {
                        name: decl.name.node.clone(),
                        params,
                        command,
                        env: Vec::new(),
                        evidence: EvidenceMode::Auto,
                        timeout: ir::DEFAULT_GATE_TIMEOUT,
                        doc: None,
                    };
                    (Rc::new(def), &[], &decl.env, None)
                }
            };
        let mut values = self.bind(
            &def.name,
            "gate",
            &def.params,
            bindings,
            item,
            decl.name.span,
        )?;
        if let Some(item) = item {
            values
                .entry("item".to_string())
                .or_insert_with(|| item.to_string());
        }
        let argv = render_command(&def.command, &values, &[]);
        let mut env = BTreeMap::new();
        for e in def.env.iter().chain(extra_env) {
            let lookup = |n: &str| values.get(n).cloned();
            match interp::interpolate(&e.value.node, &lookup, &[]) {
                Ok(v) => {
                    env.insert(e.key.node.clone(), v.into_owned());
                }
                Err(err) => {
                    let known: Vec<String> = values.keys().cloned().collect();
                    interp_error(self, &err, e.value.span, &owner, &known);
                    return None;
                }
            }
        }
        let evidence = match &decl.evidence {
            Some(e) => EvidenceMode::parse(&e.node)?,
            None => def.evidence,
        };
        Some(ir::Gate {
            name: decl.name.node.clone(),
            argv,
            env,
            evidence,
            timeout: decl.timeout.as_ref().map_or(def.timeout, |t| t.node),
            from,
            doc: decl.doc.clone().or_else(|| def.doc.clone()),
        })
    }

    /// An agent use (`agent claude model=opus`) as a runnable agent.
    pub(crate) fn instantiate_agent(
        &mut self,
        module: usize,
        use_: &AgentUse,
        item: Option<&str>,
    ) -> Option<ir::Agent> {
        let r = self.lookup(module, &use_.name, "agent", true)?;
        let def = self.agent_def(r)?;
        let values = self.bind(
            &def.name,
            "agent",
            &def.params,
            &use_.bindings,
            item,
            use_.name.span,
        )?;
        let argv = render_command(&def.command, &values, ir::RUNTIME_PLACEHOLDERS);
        // A budget's placeholder is left out with its option when the budget has no limit:
        // only possible when it is a value of its own.
        for word in &argv {
            for name in ir::BUDGET_PLACEHOLDERS {
                let p = format!("{{{{{name}}}}}");
                if word.contains(&p) && word != &p && !word.ends_with(&format!("={p}")) {
                    self.diags.push(
                        Diagnostic::error(
                            "mvk::budget-placeholder-inside",
                            format!("`{p}` inside `{word}` in agent `{}`", use_.name.node),
                        )
                        .at(use_.name.span, "the agent")
                        .help(format!("give it an argument of its own (`\"--max-budget-usd\" \"{p}\"` or `\"--max-budget-usd={p}\"`): with no limit set, mvk leaves it out with its option")),
                    );
                }
            }
        }
        let mut env = BTreeMap::new();
        for e in &def.env {
            let lookup = |n: &str| values.get(n).cloned();
            if let Ok(v) = interp::interpolate(&e.value.node, &lookup, ir::RUNTIME_PLACEHOLDERS) {
                env.insert(e.key.node.clone(), v.into_owned());
            }
        }
        let mut agent = ir::Agent {
            name: use_.name.node.clone(),
            argv,
            env,
            adapter: def.adapter,
            timeout: def.timeout,
            rate_limits: def.rate_limits.clone(),
            params: values,
            sandbox: def.sandbox.clone(),
            price: None,
        };
        // Also for an agent that prints its own dollars: aider prints none for a model its
        // table lacks, and its model names carry the provider (`openai/gpt-4.1`).
        let key = agent.price_key();
        agent.price = self.price_of(key).or_else(|| {
            key.rsplit_once('/')
                .and_then(|(_, model)| self.price_of(model))
        });
        Some(agent)
    }

    /// The price of `model`: written in the entry file, else in another file loaded (in load
    /// order), else in the stdlib's table.
    pub(crate) fn price_of(&self, model: &str) -> Option<ir::Price> {
        let std = Origin::Std(crate::stdlib::PRICES.to_string());
        let mut order: Vec<usize> = (0..self.modules.len())
            .filter(|&m| self.file_of(m).origin != std)
            .collect();
        order.extend((0..self.modules.len()).filter(|&m| self.file_of(m).origin == std));
        order.into_iter().find_map(|m| {
            self.modules[m]
                .ast
                .items
                .iter()
                .find_map(|item| match item {
                    Item::Price(p) if p.model.node == model => Some(ir::Price {
                        model: model.to_string(),
                        input: p.input.node,
                        output: p.output.node,
                        cached: p.cached.as_ref().map_or(p.input.node, |c| c.node),
                        from: self.file_of(m).name.clone(),
                    }),
                    _ => None,
                })
        })
    }

    /// Two prices for one model must agree, except that the entry file's (and the user's over
    /// the stdlib's) wins: a price written twice in one file, or differently in two imported
    /// files, is an error.
    pub(crate) fn check_prices(&mut self) {
        let std = Origin::Std(crate::stdlib::PRICES.to_string());
        let mut seen: BTreeMap<String, (usize, Span, [u64; 3])> = BTreeMap::new();
        let mut found = Vec::new();
        for (m, module) in self.modules.iter().enumerate() {
            if self.file_of(m).origin == std {
                continue;
            }
            for item in &module.ast.items {
                if let Item::Price(p) = item {
                    let cached = p.cached.as_ref().map_or(p.input.node, |c| c.node);
                    found.push((m, p.model.clone(), [p.input.node, p.output.node, cached]));
                }
            }
        }
        for (m, model, amounts) in found {
            match seen.get(&model.node) {
                None => {
                    seen.insert(model.node.clone(), (m, model.span, amounts));
                }
                Some((first, span, _)) if *first == m => {
                    let d = Diagnostic::error(
                        "mvk::duplicate-name",
                        format!("the price of `{}` is written twice", model.node),
                    )
                    .at(model.span, "written again here")
                    .also(*span, "first written here")
                    .help("keep one `price` per model in a file");
                    self.diags.push(d);
                }
                Some((first, span, was)) if *first != 0 && *was != amounts => {
                    let d = Diagnostic::error(
                        "mvk::conflicting-price",
                        format!("two imported files give `{}` different prices", model.node),
                    )
                    .at(model.span, "this price")
                    .also(*span, "differs from this one")
                    .help(format!(
                        "write the price you mean in the loop file itself: price \"{}\" input=… output=… cached=…",
                        model.node
                    ));
                    self.diags.push(d);
                }
                Some(_) => {}
            }
        }
    }
}

fn template_of(command: &Spanned<Command>) -> CommandTemplate {
    match &command.node {
        Command::Run(argv) => CommandTemplate::Run(argv.clone()),
        Command::Sh(script) => CommandTemplate::Sh(script.clone()),
    }
}

/// Later env entries replace earlier ones of the same name.
fn merge_env(base: &mut Vec<EnvVar>, over: &[EnvVar]) {
    for e in over {
        base.retain(|b| b.key.node != e.key.node);
        base.push(e.clone());
    }
}

/// Fills placeholders (already checked) into an argv; an argument that is exactly one
/// placeholder and renders empty is left out, so an unset optional flag adds no argument.
fn render_command(
    command: &CommandTemplate,
    values: &BTreeMap<String, String>,
    keep: &[&str],
) -> Vec<String> {
    let lookup = |n: &str| values.get(n).cloned();
    let render = |s: &str| {
        interp::interpolate(s, &lookup, keep)
            .map(|c| c.into_owned())
            .unwrap_or_else(|_| s.to_string())
    };
    match command {
        CommandTemplate::Run(argv) => argv
            .iter()
            .filter_map(|a| {
                let out = render(&a.node);
                let drop = out.is_empty() && interp::sole_placeholder(&a.node).is_some();
                (!drop).then_some(out)
            })
            .collect(),
        CommandTemplate::Sh(script) => {
            vec!["sh".to_string(), "-c".to_string(), render(&script.node)]
        }
    }
}

/// The one-line reason a pattern does not compile (the regex crate's message also draws the
/// pattern with a caret, which the diagnostic's span already shows).
fn regex_problem(e: &regex::Error) -> String {
    match e {
        regex::Error::Syntax(text) => text
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("error: "))
            .unwrap_or(text)
            .to_string(),
        other => other.to_string(),
    }
}
