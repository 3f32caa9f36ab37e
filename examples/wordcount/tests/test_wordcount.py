from wordcount import count_words


def test_counts_repeated_words() -> None:
    assert count_words("the cat the") == {"the": 2, "cat": 1}


def test_words_differing_in_case_are_one_word() -> None:
    assert count_words("The cat saw the dog") == {"the": 2, "cat": 1, "saw": 1, "dog": 1}


def test_runs_of_whitespace_separate_words() -> None:
    assert count_words("one  two\nthree\tone ") == {"one": 2, "two": 1, "three": 1}


def test_an_empty_text_has_no_words() -> None:
    assert count_words("") == {}
