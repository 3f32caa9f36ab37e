#!/bin/sh
# A scripted stand-in for a coding agent, so the example runs without one installed or paid for.
# Each task of the flow gets the edit its goal asks for, in the one file its scope allows.
set -eu

echo "task ${MVK_TASK:?mvk sets MVK_TASK}, attempt ${MVK_ATTEMPT:-?}"
case $MVK_TASK in
slug)
    cat >src/textkit/slug.py <<'PY'
"""A title in, a URL slug out."""

import re


def slugify(title: str) -> str:
    """Lowercase letters and digits joined by single dashes: "Hello, World!" gives "hello-world"."""
    return "-".join(re.findall(r"[a-z0-9]+", title.lower()))
PY
    ;;
initials)
    cat >src/textkit/initials.py <<'PY'
"""A name in, its initials out."""


def initials(name: str) -> str:
    """Each part's first letter, capitalised, with a dot: "ada lovelace" gives "A.L."."""
    return "".join(part[0].upper() + "." for part in name.split())
PY
    ;;
byline)
    cat >src/textkit/byline.py <<'PY'
"""An author and a title in, a byline out."""

from textkit.initials import initials
from textkit.slug import slugify


def byline(author: str, title: str) -> str:
    """The author's initials and the title's slug: "A.L.: notes-on-the-engine"."""
    return f"{initials(author)}: {slugify(title)}"
PY
    ;;
*)
    echo "no edit for task $MVK_TASK" >&2
    exit 1
    ;;
esac
echo "edited the file of task $MVK_TASK"
