//! The oracle the loop seals: what a slug must look like.

use slugify::slugify;

#[test]
fn a_plain_word_is_lowercased() {
    assert_eq!(slugify("Rust"), "rust");
}

#[test]
fn punctuation_and_spaces_collapse_to_one_dash() {
    assert_eq!(slugify("Hello,  World!"), "hello-world");
}

#[test]
fn no_dash_at_either_end() {
    assert_eq!(slugify("  -- Edition 2024 --  "), "edition-2024");
}

#[test]
fn an_existing_slug_is_unchanged() {
    assert_eq!(slugify("already-a-slug"), "already-a-slug");
}

#[test]
fn nothing_to_keep_gives_an_empty_slug() {
    assert_eq!(slugify("?!"), "");
}
