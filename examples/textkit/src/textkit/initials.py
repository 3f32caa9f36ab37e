"""A name in, its initials out."""


def initials(name: str) -> str:
    """Each part's first letter, capitalised, with a dot: "ada lovelace" gives "A.L."."""
    return "".join(part[0] + "." for part in name.split(" "))
