//! `mvk apply` end to end on real temporary git repositories with scripted agents.
