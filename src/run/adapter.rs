//! An agent's output in, what it cost (tokens, USD) and whether it hit a rate or usage limit out.
