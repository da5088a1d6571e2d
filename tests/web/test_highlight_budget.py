"""A stored source's highlighting has a budget (service/web/highlight.py): a 256 KB hostile public source's page
answers within PAGE_CPU_S of CPU and still shows the text, escaped; an honest source of the same size is still
highlighted. CPU time is read in-process (time.process_time: every thread of this process, the app's included),
on SQLite and PostgreSQL.
"""

from __future__ import annotations

import time

import pytest

from service.web.highlight import HIGHLIGHT_CPU_S, source_html
from tests.service.conftest import CORRECT_KL_DIV, new_key

SIZE = 256 * 1024
PAGE_CPU_S = 2.0
"""Issue 41's bound for one view; measured 0.6-0.8 s for these pages (docs/reliability.md), 28.7-37.6 s before."""
ATTACK = "<script>alert(1)</script>\n"
HOSTILE = {"link-in-fences": "```\n[a](", "unclosed-fences": "```python\nx = 1\n"}
"""The two texts of issue 41 on which Pygments' Markdown lexer is quadratic."""


def _repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


@pytest.mark.parametrize("unit", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_256_kb_hostile_public_source_page_answers_within_its_cpu_budget(client, db, unit):
    key = new_key(db, "mallory")
    source = ATTACK + _repeat(unit, SIZE - len(ATTACK))
    sent = client.post("/v1/submissions", json={"task": "kl_div", "source": source, "public": True},
                       headers={"Authorization": f"Bearer {key}"})
    assert sent.status_code == 202, sent.text
    start = time.process_time()
    page = client.get(f"/submissions/{sent.json()['id']}")
    cpu_s = time.process_time() - start
    assert page.status_code == 200
    assert cpu_s < PAGE_CPU_S, f"the page took {cpu_s:.2f} s of CPU"
    html = page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html
    assert html.count("[a](" if "[a]" in unit else "x = 1") == source.count(unit.strip().split("\n")[-1])
    assert f'<span class="normal">{source.count(chr(10))}</span>' in html  # numbered to the last line


def test_an_honest_source_of_the_same_size_is_still_highlighted_and_the_fallback_is_plain_text():
    # Highlighted, given CPU: its lexing is linear, a quarter of HIGHLIGHT_CPU_S on an idle host (0.12-0.14 s,
    # docs/reliability.md; scripts/experiments/highlight_cost.py measures it). Not timed against the budget here: on
    # a loaded 2-core CI host the same lexing read over 0.5 s of thread CPU (SMT siblings and caches shared with the
    # other process), and a host that slow showing plain text is the budget doing its job.
    honest = _repeat(CORRECT_KL_DIV.read_text(), SIZE)
    html = str(source_html(honest, cpu_s=20 * HIGHLIGHT_CPU_S))
    assert '<span class="kn">import</span>' in html and '<span class="k">class</span>' in html
    plain = str(source_html(honest, cpu_s=0.0))  # no CPU left: plain, still escaped and numbered
    assert '<span class="k">' not in plain and "import torch" in plain
    assert f'<span class="normal">{honest.count(chr(10)) + 1}</span>' in plain  # the last line, unterminated
    assert str(source_html("a < b\n", max_bytes=3)).count("a &lt; b") == 1
