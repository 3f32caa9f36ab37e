"""A text in, each word's count out."""


def count_words(text: str) -> dict[str, int]:
    """Counts each word of `text`: "the cat the" gives {"the": 2, "cat": 1}."""
    counts: dict[str, int] = {}
    for word in text.split(" "):
        counts[word] = counts.get(word, 0) + 1
    return counts
