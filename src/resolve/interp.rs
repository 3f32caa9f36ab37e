//! Strings with `{{name}}` placeholders in, strings with parameters and fan-out items filled in out.
//!
//! Deliberately not handlebars: a command line or a goal needs substitution only, and every
//! unknown name must be reported with its place at compile time. Placeholders that only an
//! attempt can fill (`{{prompt_file}}`) are kept as written for the run stage.

use std::borrow::Cow;

/// One `{{ name }}` found in a string, with its byte range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placeholder<'a> {
    pub(crate) name: &'a str,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InterpError {
    Unclosed { at: usize },
    BadName { name: String, at: usize },
    Unknown { name: String, at: usize },
}

/// Finds the placeholders of a string.
pub(crate) fn placeholders(s: &str) -> Result<Vec<Placeholder<'_>>, InterpError> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(rel) = s[i..].find("{{") {
        let start = i + rel;
        let Some(close) = s[start + 2..].find("}}") else {
            return Err(InterpError::Unclosed { at: start });
        };
        let end = start + 2 + close + 2;
        let name = s[start + 2..end - 2].trim();
        let valid = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(InterpError::BadName {
                name: name.to_string(),
                at: start,
            });
        }
        out.push(Placeholder { name, start, end });
        i = end;
    }
    Ok(out)
}

/// Replaces each placeholder `lookup` knows; keeps those in `keep`; any other is an error.
pub(crate) fn interpolate<'a>(
    s: &'a str,
    lookup: &dyn Fn(&str) -> Option<String>,
    keep: &[&str],
) -> Result<Cow<'a, str>, InterpError> {
    let found = placeholders(s)?;
    if found.is_empty() {
        return Ok(Cow::Borrowed(s));
    }
    let mut out = String::with_capacity(s.len());
    let mut last = 0;
    for p in found {
        out.push_str(&s[last..p.start]);
        if let Some(v) = lookup(p.name) {
            out.push_str(&v);
        } else if keep.contains(&p.name) {
            out.push_str(&s[p.start..p.end]);
        } else {
            return Err(InterpError::Unknown {
                name: p.name.to_string(),
                at: p.start,
            });
        }
        last = p.end;
    }
    out.push_str(&s[last..]);
    Ok(Cow::Owned(out))
}

/// The name of the only placeholder when a string is exactly one placeholder (`"{{target}}"`).
/// Such an argument is dropped from an argv when it renders empty, so optional flags work.
pub(crate) fn sole_placeholder(s: &str) -> Option<&str> {
    let found = placeholders(s).ok()?;
    match found.as_slice() {
        [p] if p.start == 0 && p.end == s.len() => Some(p.name),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(name: &str) -> Option<String> {
        match name {
            "model" => Some("opus".into()),
            "empty" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn substitutes_known_and_keeps_runtime_placeholders() {
        let got = interpolate(
            "--model={{model}} {{ prompt_file }}",
            &vars,
            &["prompt_file"],
        );
        assert_eq!(got.as_deref(), Ok("--model=opus {{ prompt_file }}"));
    }

    #[test]
    fn reports_unknown_unclosed_and_malformed_with_offsets() {
        assert_eq!(
            interpolate("a {{modle}}", &vars, &[]),
            Err(InterpError::Unknown {
                name: "modle".into(),
                at: 2
            })
        );
        assert_eq!(
            interpolate("x {{model", &vars, &[]),
            Err(InterpError::Unclosed { at: 2 })
        );
        assert_eq!(
            interpolate("{{a b}}", &vars, &[]),
            Err(InterpError::BadName {
                name: "a b".into(),
                at: 0
            })
        );
    }

    #[test]
    fn sole_placeholder_only_when_the_whole_string() {
        assert_eq!(sole_placeholder("{{target}}"), Some("target"));
        assert_eq!(sole_placeholder("--{{target}}"), None);
        assert_eq!(sole_placeholder("{{a}}{{b}}"), None);
    }
}
