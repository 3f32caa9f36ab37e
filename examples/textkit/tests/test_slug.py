from textkit.slug import slugify


def test_words_are_joined_by_one_dash() -> None:
    assert slugify("Hello, World!") == "hello-world"


def test_digits_stay() -> None:
    assert slugify("Top 10 tips") == "top-10-tips"
