//! A name (a task's, a gate's, a program's) in; a slug out: safe as a git branch component and
//! a file name, and distinct for distinct names. Run branches, attempt directories, gate logs,
//! handoff files and run lock files are named by it.

/// `name` with every character but ASCII letters, digits, `-` and `_` made `-` (runs of `-`
/// collapsed, none at either end); when that changed the name, a short hash of the name
/// appended, so that two names never share a slug.
pub(crate) fn slug(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    while out.contains("--") {
        out = out.replace("--", "-");
    }
    let trimmed = out.trim_matches('-').to_string();
    if trimmed == name && !trimmed.is_empty() {
        return trimmed;
    }
    let hash = blake3::hash(name.as_bytes()).to_hex();
    if trimmed.is_empty() {
        hash[..8].to_string()
    } else {
        format!("{trimmed}-{}", &hash[..6])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_branch_safe_and_distinct() {
        assert_eq!(slug("fix-parser"), "fix-parser");
        let a = slug("port[src/a.rs]");
        let b = slug("port[src-a.rs]");
        assert!(a.starts_with("port-src-a-rs-"), "{a}");
        assert_ne!(a, b);
        assert!(git2::Reference::is_valid_name(&format!(
            "refs/heads/mvk/r/{a}/1"
        )));
    }
}
