//! The standard library embedded in the binary: `std/…` paths in, file texts out.
//!
//! Files live under `stdlib/` in the repository; a test checks that every one of them is listed.

/// Every stdlib file, by the path a loop imports it as.
pub const FILES: &[(&str, &str)] = &[
    ("std/agents.kdl", include_str!("../stdlib/agents.kdl")),
    ("std/prices.kdl", include_str!("../stdlib/prices.kdl")),
    (
        "std/gates/generic.kdl",
        include_str!("../stdlib/gates/generic.kdl"),
    ),
    ("std/gates/go.kdl", include_str!("../stdlib/gates/go.kdl")),
    (
        "std/gates/javascript.kdl",
        include_str!("../stdlib/gates/javascript.kdl"),
    ),
    (
        "std/gates/python.kdl",
        include_str!("../stdlib/gates/python.kdl"),
    ),
    (
        "std/gates/rust.kdl",
        include_str!("../stdlib/gates/rust.kdl"),
    ),
    (
        "std/prompts/maker.hbs",
        include_str!("../stdlib/prompts/maker.hbs"),
    ),
    (
        "std/prompts/reviewer.hbs",
        include_str!("../stdlib/prompts/reviewer.hbs"),
    ),
];

/// The price table every loop sees (`price` nodes), whether or not it imports it.
pub(crate) const PRICES: &str = "std/prices.kdl";

pub const MAKER_PROMPT: &str = "std/prompts/maker.hbs";
pub const REVIEWER_PROMPT: &str = "std/prompts/reviewer.hbs";

/// The version of the stdlib, for lock files and digests: it changes with mvk's version.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");

pub fn get(path: &str) -> Option<&'static str> {
    FILES
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, text)| *text)
}

/// The stdlib file that defines `kind` (`gate` or `agent`) `name` at its top level, for the help
/// of a name used without its import.
pub(crate) fn defining(kind: &str, name: &str) -> Option<&'static str> {
    FILES.iter().find_map(|(path, text)| {
        text.lines()
            .any(|line| {
                line.strip_prefix(kind)
                    .and_then(|rest| rest.strip_prefix(' '))
                    .and_then(|rest| rest.strip_prefix(name))
                    .is_some_and(|rest| rest.starts_with([' ', '{']))
            })
            .then_some(*path)
    })
}

/// The stdlib paths, for "did you mean" help.
pub fn paths() -> impl Iterator<Item = &'static str> {
    FILES.iter().map(|(p, _)| *p)
}

#[cfg(test)]
mod tests {
    // Guards the compile's trust in the built-in templates, which it does not check: each one
    // renders every sample `prompt::check` renders.
    #[test]
    fn every_template_of_the_stdlib_passes_the_check_the_compile_skips() {
        let templates: Vec<_> = super::FILES
            .iter()
            .filter(|(path, _)| path.ends_with(".hbs"))
            .collect();
        assert!(templates.len() >= 2, "{templates:?}");
        for (path, text) in templates {
            assert_eq!(crate::prompt::check(text), Ok(()), "{path}");
        }
    }
}
