//! The README's first command: the example project laid out in a temporary repository and run.
