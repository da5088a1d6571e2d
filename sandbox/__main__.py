"""Command line: `python -m sandbox judge --task kl_div --device cuda:0 candidate.py` prints the Verdict as JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reference import all_tasks
from sandbox.config import JudgeConfig
from sandbox.pipeline import judge
from sandbox.verdict import Status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox", description="Judge one candidate kernel.")
    commands = parser.add_subparsers(dest="command", required=True)
    judge_cmd = commands.add_parser("judge", help="judge a candidate file (a module or a raw LLM completion)")
    judge_cmd.add_argument("candidate", type=Path, help="path to the candidate, or - for standard input")
    judge_cmd.add_argument("--task", required=True, choices=[t.id.value for t in all_tasks()])
    judge_cmd.add_argument("--device", default="cpu", help="cpu (the task's CPU size) or cuda:N")
    judge_cmd.add_argument("--isolation", default=None, help="bwrap, unshare, none or auto")
    judge_cmd.add_argument("--no-extra-shapes", action="store_true", help="skip the extra-shape report")
    args = parser.parse_args(argv)

    text = sys.stdin.read() if str(args.candidate) == "-" else args.candidate.read_text(encoding="utf-8")
    overrides = {"check_extra_shapes": not args.no_extra_shapes}
    if args.isolation:
        overrides["isolation"] = args.isolation
    verdict = judge(args.task, text, args.device, config=JudgeConfig(**overrides))
    print(verdict.model_dump_json(indent=2))
    return 0 if verdict.status is Status.CORRECT else 1


if __name__ == "__main__":
    sys.exit(main())
