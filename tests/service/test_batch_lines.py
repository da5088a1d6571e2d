"""An NDJSON batch file keeps every sample and its line number, as `wc -l` counts the file, through the API and the
CLI: raw U+2028, U+2029 and U+0085 inside JSON strings (valid JSON, what `ensure_ascii=False` writes) stay inside
their line, a UTF-8 byte-order mark is not part of line 1, CRLF endings read as LF, and an object naming a key
twice is refused with its line named.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from service import crud
from service.batches.lines import BREAKS_OTHER_READERS, LineCutter, numbered_lines, one_line, split_lines
from tests.service.conftest import ROOT
from tests.service.test_batch_validation import refused_line
from tests.service.test_batches import CORRECT, post_batch

SEPARATORS = "\u2028 \u2029 \u0085 \x1c \x1d \x1e"
"""Characters str.splitlines() breaks at that JSON allows raw inside a string (\\v, \\f and \\r must be escaped)."""


def _sample(index: int) -> str:
    note = f"sample {index}:{SEPARATORS}:end"
    return json.dumps({"task": "kl_div", "source": f"# {note}\n{CORRECT}", "sample_index": index,
                       "metadata": {"note": note}}, ensure_ascii=False)


DUPLICATE = '{"task": "kl_div", "source": "a", "source": "b"}'
NESTED_DUPLICATE = json.dumps({"task": "kl_div", "source": CORRECT})[:-1] + ', "metadata": {"k": 1, "k": 2}}'


def hostile_file() -> tuple[bytes, dict[int, int], dict[int, str]]:
    """The file's bytes (BOM, CRLF, a blank line, bad lines), the line of each sample_index, the bad lines' words."""
    lines = [_sample(0), _sample(1), "", _sample(2), "not json", DUPLICATE, _sample(3), NESTED_DUPLICATE, _sample(4)]
    body = ("\ufeff" + "\r\n".join(lines) + "\r\n").encode("utf-8")
    good = {0: 1, 1: 2, 2: 4, 3: 7, 4: 9}
    bad = {5: "not valid json", 6: 'the key "source" twice', 8: 'the key "k" twice'}
    return body, good, bad


def wc_lines(path) -> int:  # noqa: ANN001
    return int(subprocess.run(["wc", "-l", str(path)], check=True, capture_output=True, text=True).stdout.split()[0])


def check_results(rows: list[dict], good: dict[int, int]) -> None:
    """Every sample kept its line and its text (the metadata, separators and all, comes back as sent)."""
    by_index = {r["sample_index"]: r for r in rows}
    assert {i: r["line"] for i, r in by_index.items()} == good
    for i, row in by_index.items():
        assert row["metadata"] == {"note": f"sample {i}:{SEPARATORS}:end"}


def test_the_splitter_numbers_lines_as_wc_does(tmp_path):
    body, good, _ = hostile_file()
    path = tmp_path / "batch.jsonl"
    path.write_bytes(body)
    numbered = list(numbered_lines(body.decode("utf-8")))
    assert len(numbered) == wc_lines(path) == 9
    assert numbered[0][1].startswith('{"task"') and not any(line.endswith("\r") for _, line in numbered)
    assert split_lines("a\nb") == ["a", "b"] and split_lines("a\n\n") == ["a", ""] and split_lines("") == []
    assert split_lines("a\rb\n") == ["a\rb"]  # a lone CR is not a line end for wc, nor here


def test_a_streamed_text_is_cut_as_a_file_is():
    body, _, _ = hostile_file()
    text = body.decode("utf-8").removeprefix("\ufeff")
    for size in (1, 7, 4096):
        cutter = LineCutter()
        cut = [line for i in range(0, len(text), size) for line in cutter.feed(text[i:i + size])]
        assert [*cut, *cutter.finish()] == split_lines(text)
    assert json.loads(one_line(json.dumps(SEPARATORS, ensure_ascii=False))) == SEPARATORS
    assert len(one_line(json.dumps(SEPARATORS, ensure_ascii=False)).splitlines()) == 1


@pytest.mark.parametrize("ctype", ["application/x-ndjson", "text/plain"])
def test_the_api_keeps_every_sample_and_its_line(client, auth, ctype):
    body, good, bad = hostile_file()
    response = post_batch(client, auth, body, headers={"Content-Type": ctype})
    assert response.status_code == 202, response.text
    accepted = response.json()
    assert accepted["accepted"] == len(good)
    rejected = {r["line"]: r["error"] for r in accepted["rejected"]}
    assert sorted(rejected) == sorted(bad)
    for line, words in bad.items():
        assert words in rejected[line].lower(), rejected[line]
    results = client.get(f"/v1/batches/{accepted['id']}/results", headers=auth)
    check_results([json.loads(x) for x in results.text.split("\n") if x], good)
    assert not set(BREAKS_OTHER_READERS) & set(results.text)  # a reader using splitlines() reads rows too


def test_a_lone_duplicate_key_line_is_a_422_naming_it(client, auth):
    refused_line(post_batch(client, auth, f"\n\n{NESTED_DUPLICATE}\n"), 3, 'the key "k" twice', "send each key once")


def test_a_json_body_with_a_repeated_key_or_a_bom_is_read_as_json(client, auth):
    refused = client.post("/v1/batches", content=f"[{DUPLICATE}]", headers={**auth, "Content-Type": "application/json"})
    assert refused.status_code == 422 and 'the key "source" twice' in refused.json()["detail"], refused.text
    good = "\ufeff" + json.dumps([json.loads(_sample(0))], ensure_ascii=False)
    response = client.post("/v1/batches", content=good.encode(), headers={**auth, "Content-Type": "application/json"})
    assert response.status_code == 202 and response.json()["accepted"] == 1, response.text


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_the_cli_keeps_every_sample_and_its_line(db, live_api, tmp_path):
    with db.transaction() as session:
        key = crud.create_key(session, "lines")[1]
    _, base = live_api()
    body, good, bad = hostile_file()
    upload = tmp_path / "batch.jsonl"
    upload.write_bytes(body)
    cli = [sys.executable, "-m", "service.cli.main"]
    sent = subprocess.run([*cli, "batch", str(upload), "--url", base, "--key", key], check=False,
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert sent.returncode == 0, sent.stderr
    assert f"accepted {len(good)} samples" in sent.stderr and f"rejected {len(bad)} lines" in sent.stderr
    for line in bad:
        assert f"line {line}:" in sent.stderr
    got = subprocess.run([*cli, "results", sent.stdout.split()[0], "--url", base, "--key", key], check=False,
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert got.returncode == 0, got.stderr
    rows = [json.loads(x) for x in got.stdout.split("\n") if x.strip()]
    check_results(rows, good)
    assert max(r["line"] for r in rows) == wc_lines(upload)
