//! `notify` nodes in (top-level definitions, and those of a loop, a flow or a task); out, the
//! [`ir::Notify`]s a run sends, each with its defaults written in and its `use=` followed.
//!
//! Where a `notify` stands decides what it hears: the entry file's top-level nodes and the
//! loop's or the flow's hear the whole run; a flow task's (its `loop=` file's top level, its
//! loop, its block) hear that task only. A notification of the same name further in replaces
//! the one further out, so a task can quiet or redirect the flow's. A top-level `notify` in an
//! imported file is a definition only, heard by no one until a `notify NAME use=ns.def` names it.

use std::sync::Arc;

use super::interp::{self, InterpError};
use super::{DefRef, World};
use crate::diag::{Diagnostic, suggest};
use crate::ir::{self, Channel, Notify, NotifyEvent, Secret};
use crate::syntax::ast::{ChannelDecl, Command, Item, NotifyDecl, SecretDecl};

/// The fields of an event a command's arguments may name (`{{task}}`); each is filled when the
/// notification is sent (empty when the event has none), and also set in the command's
/// environment as `MVK_` and its name in capitals.
pub(crate) const PLACEHOLDERS: &[&str] = &[
    "event",
    "notification",
    "run",
    "program",
    "file",
    "repository",
    "host",
    "time",
    "task",
    "attempt",
    "outcome",
    "exit_code",
    "checkpoint",
    "question",
    "budget",
    "spent",
    "limit",
    "at",
    "message",
    "status_command",
    "approve_command",
    "reject_command",
    "resume_command",
];

impl World {
    /// Resolves the top-level `notify` at `def` (following `use=`), memoized; `None` after an error.
    pub(crate) fn notify_def(&mut self, def: DefRef) -> Option<Arc<Notify>> {
        if let Some(done) = self.notify_defs.get(&def) {
            return done.clone();
        }
        let Item::Notify(decl) = &self.modules[def.module].ast.items[def.item] else {
            return None;
        };
        let decl = decl.clone();
        if self.resolving.contains(&def) {
            self.diags.push(
                Diagnostic::error(
                    "mvk::definition-cycle",
                    format!("notification `{}` is defined in terms of itself", decl.name.node),
                )
                .at(decl.uses.as_ref().map_or(decl.name.span, |u| u.span), "this `use=` leads back here")
                .help("a definition may use another one, but the chain must end in one with a `run`, `sh` or `webhook`"),
            );
            return None;
        }
        self.resolving.push(def);
        let resolved = self.lower_notify(def.module, &decl);
        self.resolving.pop();
        self.notify_defs.insert(def, resolved.clone());
        resolved
    }

    /// The `notify` nodes of one block (a loop, a flow, a task) written in `module`.
    pub(crate) fn notify_block(&mut self, module: usize, decls: &[NotifyDecl]) -> Vec<Arc<Notify>> {
        decls
            .iter()
            .filter_map(|d| self.lower_notify(module, d))
            .collect()
    }

    /// The top-level `notify` nodes of `module` (the entry file, or a task's `loop=` file),
    /// which are heard, not only defined, there.
    pub(crate) fn notify_top(&mut self, module: usize) -> Vec<Arc<Notify>> {
        let defs: Vec<DefRef> = self.modules[module]
            .ast
            .items
            .iter()
            .enumerate()
            .filter(|(_, i)| matches!(i, Item::Notify(_)))
            .map(|(item, _)| DefRef { module, item })
            .collect();
        defs.into_iter()
            .filter_map(|d| self.notify_def(d))
            .collect()
    }

    /// One `notify` node: its own channel, or the definition it uses with its settings over it.
    fn lower_notify(&mut self, module: usize, decl: &NotifyDecl) -> Option<Arc<Notify>> {
        let mut n = match &decl.uses {
            Some(uses) => {
                let def = self.notify_lookup(module, uses)?;
                let base = self.notify_def(def)?;
                Notify {
                    name: decl.name.node.clone(),
                    from: Some(uses.node.clone()),
                    ..(*base).clone()
                }
            }
            None => {
                let channel = decl.channel.as_ref()?;
                Notify {
                    name: decl.name.node.clone(),
                    on: NotifyEvent::ALL.to_vec(),
                    at: None,
                    outcomes: Vec::new(),
                    timeout: ir::DEFAULT_NOTIFY_TIMEOUT,
                    retries: ir::DEFAULT_NOTIFY_RETRIES,
                    channel: self.lower_channel(&channel.node)?,
                    from: None,
                }
            }
        };
        if let Some(on) = &decl.on {
            n.on.clone_from(&on.node);
        }
        if let Some(at) = &decl.at {
            n.at = Some(at.node);
        }
        if let Some(o) = &decl.outcomes {
            n.outcomes.clone_from(&o.node);
        }
        if let Some(t) = &decl.timeout {
            n.timeout = t.node;
        }
        if let Some(r) = &decl.retries {
            n.retries = r.node;
        }
        // Every setting has an effect or is an error.
        let unheard = [
            (decl.at.as_ref().map(|a| a.span), NotifyEvent::Budget, "at"),
            (
                decl.outcomes.as_ref().map(|o| o.span),
                NotifyEvent::Finished,
                "outcome",
            ),
        ];
        let mut ok = true;
        for (span, event, key) in unheard {
            if let Some(span) = span
                && !n.hears(event)
            {
                ok = false;
                self.diags.push(
                    Diagnostic::error(
                        "mvk::notify-setting-unused",
                        format!(
                            "`{key}` has no effect: notification `{}` does not fire on `{}`",
                            n.name,
                            event.name()
                        ),
                    )
                    .at(span, "never used")
                    .help(format!(
                        "add `{}` to `on` (on=\"{} {}\"), or remove `{key}`",
                        event.name(),
                        n.on.iter().map(|e| e.name()).collect::<Vec<_>>().join(" "),
                        event.name()
                    )),
                );
            }
        }
        ok.then(|| Arc::new(n))
    }

    fn lower_channel(&mut self, decl: &ChannelDecl) -> Option<Channel> {
        let secret = |s: &SecretDecl| match s {
            SecretDecl::Literal(v) => Secret::Literal(v.clone()),
            SecretDecl::Env { var, prefix } => Secret::Env {
                var: var.clone(),
                prefix: prefix.clone(),
            },
        };
        Some(match decl {
            ChannelDecl::Command(Command::Sh(script)) => Channel::Shell {
                script: script.node.clone(),
            },
            ChannelDecl::Command(Command::Run(argv)) => {
                let mut ok = true;
                for arg in argv {
                    let known = |name: &str| PLACEHOLDERS.contains(&name).then(String::new);
                    if let Err(e) = interp::interpolate(&arg.node, &known, &[]) {
                        ok = false;
                        self.placeholder_error(&e, arg.span);
                    }
                }
                if !ok {
                    return None;
                }
                Channel::Command {
                    argv: argv.iter().map(|a| a.node.clone()).collect(),
                }
            }
            ChannelDecl::Webhook {
                url,
                format,
                headers,
            } => Channel::Webhook {
                url: secret(&url.node),
                format: format.as_ref().map_or(ir::WebhookFormat::Json, |f| f.node),
                headers: headers
                    .iter()
                    .map(|(k, v)| (k.node.clone(), secret(&v.node)))
                    .collect(),
            },
        })
    }

    fn placeholder_error(&mut self, e: &InterpError, at: crate::source::Span) {
        let d = match e {
            InterpError::Unknown { name, .. } => Diagnostic::error(
                "mvk::unknown-placeholder",
                format!("unknown placeholder `{{{{{name}}}}}` in a notification's command"),
            )
            .at(at, "not a field of the event")
            .help(suggest(
                "a notification's command may name",
                name,
                PLACEHOLDERS,
            )),
            InterpError::Unclosed { .. } => Diagnostic::error(
                "mvk::bad-placeholder",
                "unclosed `{{` in a notification's command",
            )
            .at(at, "opened but not closed")
            .help("close the placeholder with `}}`, e.g. {{task}}"),
            InterpError::BadName { name, .. } => Diagnostic::error(
                "mvk::bad-placeholder",
                format!("`{{{{{name}}}}}` is not a valid placeholder in a notification's command"),
            )
            .at(at, "malformed placeholder")
            .help("a placeholder is one name in double braces, e.g. {{task}}"),
        };
        self.diags.push(d);
    }

    fn notify_lookup(
        &mut self,
        module: usize,
        name: &crate::syntax::ast::Spanned<String>,
    ) -> Option<DefRef> {
        let scope = &self.modules[module].scope;
        if let Some((def, _)) = scope.notifies.get(&name.node) {
            return Some(*def);
        }
        if scope.incomplete {
            return None; // a failed import was reported; it may have defined this name
        }
        let names: Vec<&str> = scope.notifies.keys().map(String::as_str).collect();
        let help = if names.is_empty() {
            "no notifications are defined or imported in this file; import a file that defines one (import \"notify.kdl\" as=team), then write use=team.NAME".to_string()
        } else {
            suggest("notifications defined here", &name.node, &names)
        };
        self.diags.push(
            Diagnostic::error(
                "mvk::unknown-notify",
                format!("unknown notification `{}`", name.node),
            )
            .at(name.span, "no notification of this name")
            .help(help),
        );
        None
    }
}

/// `inner` over `outer`: a notification of the same name replaces the outer one.
pub(crate) fn overlay(outer: &[Arc<Notify>], inner: Vec<Arc<Notify>>) -> Vec<Arc<Notify>> {
    let mut out: Vec<Arc<Notify>> = outer
        .iter()
        .filter(|o| !inner.iter().any(|i| i.name == o.name))
        .cloned()
        .collect();
    out.extend(inner);
    out
}
