"""Which log lines are new when the server's logs grew, or lost their start to the size cap."""

from tfplatform_cli.follow import lines_new


def test_grown_logs_give_only_the_added_lines() -> None:
    assert lines_new([], ["a", "b"]) == ["a", "b"]
    assert lines_new(["a", "b"], ["a", "b", "c", "d"]) == ["c", "d"]
    assert lines_new(["a", "b"], ["a", "b"]) == []


def test_logs_trimmed_at_the_front_continue_after_the_last_lines_printed() -> None:
    seen = [f"line {n}" for n in range(100)]
    # The server keeps the newest characters only: the first kept line is cut in the middle.
    current = ["ne 60", *seen[61:], "line 100", "line 101"]
    assert lines_new(seen, current) == ["line 100", "line 101"]


def test_logs_with_nothing_in_common_are_printed_rather_than_lost() -> None:
    assert lines_new(["old"], ["new 1", "new 2"]) == ["new 1", "new 2"]
