from textkit.byline import byline


def test_a_byline_names_the_author_and_the_slug() -> None:
    assert byline("ada lovelace", "Notes on the Engine!") == "A.L.: notes-on-the-engine"
