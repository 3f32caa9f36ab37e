//! A program's sandboxes in; out, what this machine's kernel can confine of them, asked of a
//! throwaway trampoline before anything runs: a warning for each sandbox that will run less
//! confined than it says, or the refusal of one that is required.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::ir::{Program, Sandbox};

use super::policy::{expand, sandboxes};
use super::{PRETEND_FLAG, PROBE, SandboxError, TRAMPOLINE};

/// Whether mvk's own environment holds the tests' stand-in for a kernel without Landlock or
/// network namespaces ([`crate::env::MVK_SANDBOX_UNSUPPORTED`]). Read once, by mvk, and passed
/// to the trampoline inside its policy: what a loop's `env` gives an agent or a gate never
/// reaches this decision, and the trampoline ignores the variable.
pub(crate) fn pretend_unsupported() -> bool {
    static PRETEND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PRETEND.get_or_init(|| std::env::var_os(crate::env::MVK_SANDBOX_UNSUPPORTED).is_some())
}

/// What this machine can confine, as a throwaway process found out.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Support {
    /// `full`, `partial` or `none`: how much of Landlock ABI 6 the kernel enforces.
    pub(crate) landlock: String,
    /// Why the network cannot be taken away, if it cannot.
    pub(crate) network: Option<String>,
    /// Why the process cannot have a PID namespace of its own (so that what it starts dies
    /// with it), if it cannot.
    #[serde(default)]
    pub(crate) pid: Option<String>,
}

/// Asks a child trampoline what the kernel allows.
pub(crate) fn probe() -> Result<Support, SandboxError> {
    let exe = crate::exe::path().map_err(|source| SandboxError::Probe { source })?;
    let mut args = vec![TRAMPOLINE, PROBE];
    if pretend_unsupported() {
        args.push(PRETEND_FLAG);
    }
    let out = std::process::Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| SandboxError::Probe { source })?;
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    serde_json::from_str(&answer).map_err(|_| SandboxError::ProbeAnswer { answer })
}

/// Every sandbox of `program` (each task's, its agents' own), checked against what the kernel
/// allows before anything runs: out come warnings for those that will run unconfined, or the
/// refusal of one that is required.
pub(crate) fn preflight(program: &Program) -> Result<Vec<String>, SandboxError> {
    let owned = sandboxes(program);
    if owned.is_empty() {
        return Ok(Vec::new());
    }
    let support = probe()?;
    let mut warnings = Vec::new();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    for (owner, sandbox) in &owned {
        for granted in &sandbox.write {
            let missing = expand(granted, home.as_deref()).is_none_or(|p| !p.exists());
            if missing {
                warnings.push(format!(
                    "{owner}: the sandbox grants `{granted}`, which does not exist: nothing is granted there"
                ));
            }
        }
    }
    for (owner, sandbox) in owned {
        let problems = problems(&support, sandbox);
        if problems.is_empty() {
            continue;
        }
        let problems = problems.join("; ");
        if sandbox.required {
            return Err(SandboxError::Unsupported { owner, problems });
        }
        warnings.push(format!(
            "{owner} runs less confined than its sandbox says: {problems}"
        ));
    }
    Ok(warnings)
}

fn problems(support: &Support, sandbox: &Sandbox) -> Vec<String> {
    let mut out = Vec::new();
    match support.landlock.as_str() {
        "full" => {}
        "partial" => out.push(
            "this kernel enforces only part of Landlock ABI 6 (writes may be confined, signals to mvk are not)".to_string(),
        ),
        _ => out.push("this kernel does not enforce Landlock: writes are not confined".to_string()),
    }
    if !sandbox.network
        && let Some(why) = &support.network
    {
        out.push(format!("the network cannot be turned off ({why})"));
    }
    if let Some(why) = &support.pid {
        out.push(format!(
            "processes it starts can outlive it, as without a sandbox ({why})"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_kernel_lacks_is_named() {
        let s = |network| Sandbox {
            network,
            required: true,
            write: Vec::new(),
            env: Vec::new(),
        };
        let full = Support {
            landlock: "full".into(),
            network: None,
            pid: None,
        };
        assert!(problems(&full, &s(false)).is_empty());
        let none = Support {
            landlock: "none".into(),
            network: Some("no namespaces".into()),
            pid: Some("no PID namespace".into()),
        };
        assert_eq!(problems(&none, &s(true)).len(), 2);
        let p = problems(&none, &s(false));
        assert_eq!(p.len(), 3);
        assert!(p[1].contains("no namespaces"), "{p:?}");
        assert!(p[2].contains("can outlive it"), "{p:?}");
    }
}
