from textkit.initials import initials


def test_initials_are_capitals_with_dots() -> None:
    assert initials("ada lovelace") == "A.L."


def test_extra_spaces_do_not_make_initials() -> None:
    assert initials("  grace   hopper ") == "G.H."
