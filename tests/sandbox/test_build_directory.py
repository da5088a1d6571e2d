"""The build directory belongs to the candidate (sandbox/build/compiler.py): what its build leaves there gains it
nothing and harms no one.

Real bubblewrap build children, real judging. The build child has its build directory writable at /build
and imports the candidate (candidate code) there; the trusted parent then stores the outcome and keeps the
source. A link planted under the name of a file the parent writes or reads, or a rewrite of the candidate's
own module while it is built, must neither reach the parent's files nor change the module that is judged.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path

from sandbox import Status, judge
from sandbox.build import compiler as build
from sandbox.pipeline import PreparedCandidate, prepare

from .conftest import CORPUS

HONEST = CORPUS / "cpu" / "kl_div_cpp_correct.py"
TORCH_ONLY = CORPUS / "cpu" / "kl_div_torch_only.py"  # policy_violation: no kernel of its own


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _plant(victim: Path, other: Path) -> str:
    """Python that plants, while the candidate is imported in the build child, links under every name the parent
    ever wrote or read in a build directory, pointing at a file outside it and at another submission's build."""
    return (
        "import os as _os\n"
        "for _name, _target in [('compile.json', %r), ('result.json', %r), ('candidate.py', %r),\n"
        "                       ('other', '../../%s'), ('ext_other', %r)]:\n"
        "    try:\n"
        "        _os.symlink(_target, '/build/' + _name)\n"
        "    except OSError:\n"
        "        pass\n" % (str(victim), str(victim), str(victim), other.name, str(other))
    )


def test_links_planted_in_the_build_directory_reach_nothing_and_are_refused(judge_config, tmp_path: Path) -> None:
    config = replace(judge_config, build_root=tmp_path / "builds", precompiled_headers=False)
    honest = prepare("kl_div", HONEST.read_text(), target="cpu", config=replace(config, precompiled_headers=True))
    assert isinstance(honest, PreparedCandidate)
    honest_key_dir = honest.build_dir.parent
    before = _tree_digest(honest_key_dir)
    victim = tmp_path / "victim.txt"
    victim.write_text("the judge's own file\n")

    source = TORCH_ONLY.read_text().replace("import torch\n", "import torch\n" + _plant(victim, honest_key_dir), 1)
    verdict = judge("kl_div", source, "cpu", config=config)

    assert verdict.status is Status.POLICY_VIOLATION, verdict.diagnosis
    assert "symbolic link" in verdict.diagnosis and verdict.details["rule"] == "build_directory"
    assert victim.read_text() == "the judge's own file\n", "the parent wrote through a planted link"
    assert _tree_digest(honest_key_dir) == before, "another submission's build changed"
    again = prepare("kl_div", HONEST.read_text(), target="cpu", config=config)
    assert isinstance(again, PreparedCandidate) and again.compile_cached
    # The refusal is stored (the candidate's own outcome), and nothing of the links is left to copy or follow.
    key_dir = next(p for p in (tmp_path / "builds").iterdir() if p.is_dir() and p != honest_key_dir)
    assert not any(p.is_symlink() for p in key_dir.rglob("*"))
    second = judge("kl_div", source, "cpu", config=config)
    assert second.status is Status.POLICY_VIOLATION and "symbolic link" in second.diagnosis


REWRITE = '''
import os as _os
_EVIL = ("\\nclass ModelNew(nn.Module):\\n    def forward(self, predictions, targets):\\n"
         "        return predictions.sum() * 0\\n")
for _path in (__file__, "/build/candidate.py"):
    try:
        with open(_path, "a") as _fh:
            _fh.write(_EVIL)
    except OSError:
        pass
'''


def test_a_candidate_that_rewrites_its_module_while_it_is_built_is_judged_as_checked(judge_config,
                                                                                     tmp_path: Path) -> None:
    """At import (the build child's, and later the execution child's), the candidate appends a ModelNew that
    returns zero to its own file and to /build/candidate.py, where the execution child used to import it from.
    Judged as checked, it is an honest kernel: correct. Had the rewrite been imported, it would be incorrect."""
    config = replace(judge_config, build_root=tmp_path / "builds")
    source = HONEST.read_text() + REWRITE
    prepared = prepare("kl_div", source, target="cpu", config=config)
    assert isinstance(prepared, PreparedCandidate)
    assert prepared.source_path.read_text() == prepared.source, "the judge-owned source changed"
    assert (prepared.build_dir / build.SOURCE_FILE).read_text() == prepared.source
    verdict = judge("kl_div", source, "cpu", config=config)
    assert verdict.status is Status.CORRECT, verdict.diagnosis
    assert prepared.source_path.read_text() == prepared.source


def test_a_static_initializer_that_rewrites_the_source_at_build_time_changes_nothing(judge_config,
                                                                                    tmp_path: Path) -> None:
    """The same rewrite from C++: a constructor in the extension, which runs when the build child loads it."""
    constructor = r'''
#include <cstdio>
__attribute__((constructor)) static void judge_rewrite() {
    const char* evil = "\nclass ModelNew(nn.Module):\n    def forward(self, predictions, targets):\n"
                       "        return predictions.sum() * 0\n";
    for (const char* path : {"/build/candidate.py", "/source/candidate.py"}) {
        if (FILE* f = std::fopen(path, "a")) { std::fputs(evil, f); std::fclose(f); }
    }
}
'''
    source = HONEST.read_text().replace('cpp_source = r"""\n', 'cpp_source = r"""\n' + constructor, 1)
    assert "judge_rewrite" in source
    config = replace(judge_config, build_root=tmp_path / "builds")
    verdict = judge("kl_div", source, "cpu", config=config)
    assert verdict.status is Status.CORRECT, verdict.diagnosis
    key_dir = next(p for p in (tmp_path / "builds").iterdir() if p.is_dir())
    paths = build.KeyPaths(key_dir)
    assert paths.source.read_text().strip() == source.strip()
    assert (paths.build / build.SOURCE_FILE).read_text() == paths.source.read_text()


def test_audit_names_what_the_parent_will_not_read(tmp_path: Path) -> None:
    (tmp_path / "ext" / "x").mkdir(parents=True)
    (tmp_path / "ext" / "x" / "main.o").write_bytes(b"\0")
    assert build.audit(tmp_path) is None
    os.mkfifo(tmp_path / "ext" / "pipe")
    assert "special file" in build.audit(tmp_path) and "ext/pipe" in build.audit(tmp_path)
    (tmp_path / "ext" / "pipe").unlink()
    os.link(tmp_path / "ext" / "x" / "main.o", tmp_path / "copy.o")
    assert "hard links" in build.audit(tmp_path)
    (tmp_path / "copy.o").unlink()
    (tmp_path / "ext" / "x" / "compile.json").symlink_to("/etc/passwd")
    assert "symbolic link at ext/x/compile.json" in build.audit(tmp_path)
