"""Small text helpers: slugs, initials and bylines."""
