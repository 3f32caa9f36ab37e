#!/bin/sh
# A scripted stand-in for a coding agent, so the example runs without one installed or paid for.
# Like a real agent it knows only what its prompt tells it: on a first reading it fixes what the
# goal names (case), which leaves the whitespace bug in place; it fixes that only when the prompt
# shows the previous attempt's failing test.
set -eu

prompt=${MVK_PROMPT_FILE:?mvk sets MVK_PROMPT_FILE}
echo "attempt ${MVK_ATTEMPT:-?}: reading $prompt"

if grep -q 'test_runs_of_whitespace_separate_words' "$prompt"; then
    echo "the prompt shows test_runs_of_whitespace_separate_words failing: splitting on any whitespace"
    split='text.lower().split()'
else
    echo "no failure in the prompt yet; the goal says case must not matter: lowercasing"
    split='text.lower().split(" ")'
fi
cat >src/wordcount/__init__.py <<PY
"""A text in, each word's count out."""


def count_words(text: str) -> dict[str, int]:
    """Counts each word of \`text\`, ignoring case: "The cat the" gives {"the": 2, "cat": 1}."""
    counts: dict[str, int] = {}
    for word in $split:
        counts[word] = counts.get(word, 0) + 1
    return counts
PY
echo "edited src/wordcount/__init__.py"
