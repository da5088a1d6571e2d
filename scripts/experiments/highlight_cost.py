"""What Pygments costs on a stored source, honest and hostile: the figures service/web/highlight.py's budget rests on.

Issue 41: one anonymous view of a 256 KB hostile public source took 28.7 s of CPU (unclosed code fences) and
37.6 s ("```\\n[a](" repeated) in the Markdown lexer. This script times, in CPU seconds of this thread, the
lexers the page uses (Markdown for a text with a fence, Python otherwise) on inputs of growing size, each in a
child process killed past `--cap` seconds (a hostile 256 KB input would otherwise take minutes), and prints one
JSON line per (input, size, lexer): the CPU seconds, tokens, and whether the cap stopped it. Then the same
inputs through `service.web.highlight.source_html` (the budgeted path the page uses). With `--page`, instead:
each input stored as a public submission in a fresh SQLite app and its page viewed three times through a
TestClient, `time.process_time()` (every thread of this process, the app's included) around each GET.

    python -m scripts.experiments.highlight_cost --sizes 4096,16384,65536,262144 --cap 20
    python -m scripts.experiments.highlight_cost --page --sizes 262144
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from collections.abc import Callable
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "tests" / "corpus" / "cpu" / "kl_div_cpp_correct.py"


def _repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


INPUTS: dict[str, Callable[[int], str]] = {
    "link-in-fences": lambda n: _repeat("```\n[a](", n),
    "unclosed-fences": lambda n: _repeat("```python\nx = 1\n", n),
    "honest-python": lambda n: _repeat(CORPUS.read_text(), n),
    "honest-completion": lambda n: "Some reasoning.\n" * 8 + "```python\n" + _repeat(CORPUS.read_text(), n - 200)
    + "\n```\nDone.\n",
}


def _lex(name: str, size: int, lexer_name: str, out: multiprocessing.Queue) -> None:
    from pygments.lexers import MarkdownLexer, PythonLexer

    lexer = MarkdownLexer() if lexer_name == "markdown" else PythonLexer()
    text = INPUTS[name](size)
    start, tokens = time.thread_time(), 0
    for _ in lexer.get_tokens(text):
        tokens += 1
        if tokens % 256 == 0:
            out.put((time.thread_time() - start, tokens))
    out.put((time.thread_time() - start, tokens, "done"))


def lexer_cost(name: str, size: int, lexer_name: str, cap_s: float) -> dict:
    """CPU seconds of one lexer over one input, in a child stopped past `cap_s` of wall time."""
    out: multiprocessing.Queue = multiprocessing.Queue()
    child = multiprocessing.Process(target=_lex, args=(name, size, lexer_name, out), daemon=True)
    child.start()
    child.join(cap_s)
    capped = child.is_alive()
    if capped:
        child.kill()
        child.join()
    last = (0.0, 0)
    while not out.empty():
        last = out.get()
    return {"input": name, "bytes": size, "lexer": lexer_name, "cpu_s": round(last[0], 4), "tokens": last[1],
            "capped": capped or len(last) < 3}


def budgeted_cost(name: str, size: int) -> dict:
    """CPU seconds of the page's own path (service.web.highlight.source_html) over one input."""
    from service.web.highlight import source_html

    text = INPUTS[name](size)
    start = time.process_time()
    html = source_html(text)
    return {"input": name, "bytes": size, "path": "source_html", "cpu_s": round(time.process_time() - start, 4),
            "highlighted": 'class="k"' in html or 'class="gh"' in html or 'class="nf"' in html}


def page_cost(names: list[str], size: int, views: int = 3) -> None:
    """CPU seconds of whole page views of each input, stored public, in a fresh SQLite app."""
    import tempfile

    from fastapi.testclient import TestClient

    from service import crud
    from service.core.config import Settings
    from service.db.migrate import upgrade
    from service.db.session import Database
    from service.main import create_app

    url = f"sqlite:///{tempfile.mkdtemp()}/pages.db"
    upgrade(url)
    settings = Settings(database_url=url, rate_limit_per_minute=6000, rate_limit_burst=1000)
    with Database(settings.db_url).transaction() as session:
        key = crud.create_key(session, "page-cost")[1]
    with TestClient(create_app(settings)) as client:
        for name in names:
            sent = client.post("/v1/submissions", json={"task": "kl_div", "source": INPUTS[name](size),
                                                        "public": True}, headers={"Authorization": f"Bearer {key}"})
            for view in range(views):
                start = time.process_time()
                page = client.get(f"/submissions/{sent.json()['id']}")
                print(json.dumps({"input": name, "bytes": size, "view": view, "status": page.status_code,
                                  "cpu_s": round(time.process_time() - start, 3)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="4096,16384,65536,262144")
    parser.add_argument("--cap", type=float, default=20.0, help="wall seconds before a lexer run is stopped")
    parser.add_argument("--inputs", default=",".join(INPUTS))
    parser.add_argument("--skip-lexers", action="store_true", help="only the budgeted path")
    parser.add_argument("--page", action="store_true", help="whole page views instead (the first size)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.page:
        page_cost(args.inputs.split(","), sizes[0])
        return
    for name in args.inputs.split(","):
        for size in sizes:
            if not args.skip_lexers:
                lexers = ["markdown"] if "```" in INPUTS[name](size) else ["python"]
                for lexer_name in lexers:
                    print(json.dumps(lexer_cost(name, size, lexer_name, args.cap)), flush=True)
            print(json.dumps(budgeted_cost(name, size)), flush=True)


if __name__ == "__main__":
    main()
