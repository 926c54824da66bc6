"""scoring.files' readers and row checks, without an engine: a bad row of any kind (bytes that
are not UTF-8, JSON nested too deep, a lone surrogate, a row over the row limit, a CSV line with
the wrong number of fields) is skipped and named by its line while the rows around it are read;
reading stays linear in the malformed lines; a list field takes a plain text as a list of one."""

from __future__ import annotations

import io
import json
import time

from core.tasks import TASKS
from scoring.files import LIST_EXAMPLE, RowChecker, read_csv, read_jsonl, read_lines
from service.settings import Settings


def checker(task: str = "entailment") -> RowChecker:
    fields = {f.name: f.name for f in TASKS[task].fields}
    return RowChecker(TASKS[task], fields, Settings(), 5 if TASKS[task].list_field else None)


def read_all(chunks) -> tuple[list[int], list[tuple[int, str]], int]:
    """(lines of the rows read as inputs, (line, why) of every row skipped, lines consumed)."""
    good, bad, consumed = [], [], 0
    for chunk in chunks:
        consumed += chunk.consumed
        bad += chunk.extra_errors
        for k, line in enumerate(chunk.lines):
            if chunk.inputs[k] is None:
                bad.append((line, chunk.errors[k]))
            else:
                good.append(line)
    return good, sorted(bad), consumed


def test_jsonl_rows_that_cannot_be_read_are_skipped_by_line(tmp_path):
    ok = json.dumps({"premise": "a man .", "hypothesis": "a dog ."}).encode() + b"\n"
    lines = [ok,
             b"[" * 10_000 + b"\n",  # RecursionError in json.loads
             b'{"premise": "caf\xe9 .", "hypothesis": "a dog ."}\n',  # Latin-1, not UTF-8
             b'{"premise": "\\ud800 .", "hypothesis": "a dog ."}\n',  # a lone surrogate
             b'{"id": "\\udfff", "premise": "a man .", "hypothesis": "a dog ."}\n',  # one outside the fields
             b'{"premise": "' + b"x" * 30_000 + b'", "hypothesis": "a dog ."}\n',  # over the row limit below
             ok]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(lines))
    good, bad, consumed = read_all(read_jsonl(path, 0, 3, checker(), max_row_bytes=20_000))
    assert good == [1, 7] and consumed == 7
    assert [line for line, _ in bad] == [2, 3, 4, 5, 6]
    reasons = dict(bad)
    assert "nested too deep" in reasons[2]
    assert "not UTF-8" in reasons[3] and "0xe9" in reasons[3]
    assert "surrogate" in reasons[4] and "surrogate" in reasons[5]
    assert "20000 bytes" in reasons[6]
    # a resumed run skips by lines and reads on with the same line numbers
    good, bad, consumed = read_all(read_jsonl(path, 4, 3, checker(), max_row_bytes=20_000))
    assert good == [7] and [line for line, _ in bad] == [5, 6] and consumed == 3


def test_a_line_over_the_limit_is_never_read_whole():
    """The reader asks the file for at most the limit (plus the newline) at once, so a 1 GiB line
    costs a bounded buffer, not 1 GiB."""
    asked: list[int] = []

    class Recording(io.BytesIO):
        def readline(self, size: int = -1) -> bytes:
            asked.append(size)
            return super().readline(size)

    data = b"short\n" + b"y" * 300_000 + b"\n" + b"after\n"
    got = list(read_lines(Recording(data), 1000))
    assert got[0] == b"short\n" and got[2] == b"after\n" and len(got) == 3
    assert not isinstance(got[1], bytes) and got[1].quotes == 0  # the long line, by its marker
    assert asked and all(0 < size <= 1 << 20 for size in asked)


def test_csv_rows_that_cannot_be_read_are_skipped_by_line(tmp_path):
    """Bytes that are not UTF-8 and a field over two of pyarrow's 4 MB blocks once failed the
    whole run (UnicodeDecodeError, ArrowInvalid "straddles two block boundaries"); each is one
    skipped row now."""
    rows = [b"premise,hypothesis\n",
            b"a man .,a dog .\n",  # line 2
            b"caf\xe9 .,a dog .\n",  # line 3: Latin-1
            b'"' + b"long " * 2_000_000 + b'",a dog .\n',  # line 4: a 10 MB field, under the row limit
            b"a,b,c\n",  # line 5: three fields
            b'"two\nlines",a dog .\n',  # lines 6-7: a quoted newline
            b"a man .,a dog .\n"]  # line 8
    path = tmp_path / "in.csv"
    path.write_bytes(b"".join(rows))
    good, bad, consumed = read_all(read_csv(path, 0, 2, checker()))
    assert good == [2, 6, 8] and consumed == 7
    reasons = dict(bad)
    assert list(reasons) == [3, 4, 5]
    assert "not UTF-8" in reasons[3]
    assert "characters" in reasons[4]  # read, then refused by the service's text limit
    assert "3 fields, the header has 2" in reasons[5]
    # a resumed run skips the lines the first chunks consumed, a quoted newline included
    first_five = list(read_csv(path, 0, 1, checker()))[:5]  # a row each: lines 2, 3, 4, 5 and 6-7
    skip = sum(chunk.consumed for chunk in first_five)
    assert skip == 6
    rest = read_all(read_csv(path, skip, 1, checker()))
    assert rest == ([8], [], 1)
    with_limit = read_all(read_csv(path, 0, 2, checker(), max_row_bytes=1 << 20))[1]
    assert dict(with_limit)[4].startswith("a line over 1048576 bytes")


def test_csv_reading_is_linear_in_the_malformed_lines(tmp_path):
    """Each row's line number once walked every dropped line before it: 5k good rows 9.7 s, 40k
    82.4 s. Reading 4x the lines must cost about 4x (the bound leaves room for a loaded machine;
    the quadratic walk gave about 16x)."""
    def cpu_seconds(n: int) -> float:
        path = tmp_path / f"in{n}.csv"
        path.write_text("premise,hypothesis\n" + "a man .,a dog .\na,b,c\n" * n, encoding="utf-8")
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            good, bad, _ = read_all(read_csv(path, 0, 4096, checker()))
            best = min(best, time.process_time() - t0)
            assert len(good) == len(bad) == n
        return best

    small, large = cpu_seconds(3000), cpu_seconds(12000)
    assert large < 8 * small, (small, large)


def test_a_list_field_takes_a_plain_text_as_a_list_of_one():
    check = checker("verification")
    row = {"claim": "paris is in france .", "evidence": "paris is the capital of france ."}
    assert check(row.get).evidence == ["paris is the capital of france ."]
    assert check({**row, "evidence": '["a .", "b ."]'}.get).evidence == ["a .", "b ."]  # a JSON list in a cell
    assert check({**row, "evidence": "[citation needed] paris ."}.get).evidence == ["[citation needed] paris ."]
    for cell in ("[1, 2]", "[]", [1]):
        why = check({**row, "evidence": cell}.get)
        assert isinstance(why, str) and LIST_EXAMPLE in why, (cell, why)
    assert json.loads(LIST_EXAMPLE) == ["first sentence", "second sentence"]
