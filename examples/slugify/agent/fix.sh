#!/bin/sh
# A scripted stand-in for a coding agent, so the example runs without one installed or paid for.
# Like a real agent it knows only what its prompt tells it: on a first reading it makes the
# obvious edit (trim the dashes at the ends), which leaves the real bug in place; it fixes the
# cause only when the prompt shows the previous attempt's failing test.
set -eu

prompt=${MVK_PROMPT_FILE:?mvk sets MVK_PROMPT_FILE}
echo "attempt ${MVK_ATTEMPT:-?}: reading $prompt"

if grep -q 'punctuation_and_spaces_collapse_to_one_dash' "$prompt"; then
    echo "the prompt shows the failing test punctuation_and_spaces_collapse_to_one_dash:"
    grep -E '^ *(left|right):' "$prompt" || true
    echo "cause: every separator becomes its own dash; collapsing runs of them into one"
    cat >src/lib.rs <<'RUST'
//! A title in, a URL slug out: lowercase ASCII letters and digits joined by single dashes.

/// Turns `title` into a slug: `"Hello,  World!"` becomes `"hello-world"`.
pub fn slugify(title: &str) -> String {
    let mut slug = String::with_capacity(title.len());
    // A run of separators becomes one dash, written only when a word follows it.
    let mut gap = false;
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            if gap && !slug.is_empty() {
                slug.push('-');
            }
            gap = false;
            slug.push(c.to_ascii_lowercase());
        } else {
            gap = true;
        }
    }
    slug
}
RUST
else
    echo "no failure in the prompt yet; slugs should not start or end with a dash: trimming them"
    cat >src/lib.rs <<'RUST'
//! A title in, a URL slug out: lowercase ASCII letters and digits joined by single dashes.

/// Turns `title` into a slug: `"Hello,  World!"` becomes `"hello-world"`.
pub fn slugify(title: &str) -> String {
    let slug: String = title
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    slug.trim_matches('-').to_string()
}
RUST
fi
echo "edited src/lib.rs"
