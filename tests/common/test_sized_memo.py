"""SizedMemo: made once per key, bounded by its entries' sizes summed, the oldest forgotten."""

from __future__ import annotations

from pipesim.common.sized_memo import SizedMemo


def test_a_value_is_made_once_and_the_oldest_go_first_past_the_bound() -> None:
    made: list[str] = []

    def maker(key: str) -> str:
        return lambda: made.append(key) or key * 2  # type: ignore[return-value]

    memo: SizedMemo[str, str] = SizedMemo(5)
    assert memo.get("a", maker("a"), len) == "aa"
    assert memo.get("a", maker("a"), len) == "aa"
    assert made == ["a"]
    memo.get("b", maker("b"), len)
    assert (memo.held, memo.oldest_first()) == (4, ["a", "b"])
    memo.get("c", maker("c"), len)  # 6 > 5: "a" is forgotten
    assert (memo.held, memo.oldest_first()) == (4, ["b", "c"])
    memo.get("dddd", maker("dddd"), len)  # 8 alone: everything older goes, it stays
    assert (memo.held, memo.oldest_first(), len(memo)) == (8, ["dddd"], 1)
    memo.get("a", maker("a"), len)
    assert made == ["a", "b", "c", "dddd", "a"]
