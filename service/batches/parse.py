"""An upload into validated samples and per-line errors: a bad line is reported, never fatal to the others.

Accepted forms: JSONL (`application/x-ndjson`, `application/jsonl`, `text/plain`): one JSON object per line,
blank lines skipped, numbered as `wc -l` numbers the file's lines (`service.batches.lines`); JSON
(`application/json`): a list of samples, or {"name", "samples", "tags"}, numbered by item (index + 1). Either may
start with a UTF-8 byte-order mark. An object naming one key twice is refused (which value was meant is a guess
that json.loads makes silently, keeping the last).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pydantic_core
from pydantic import ValidationError

from reference import UnknownTask, all_tasks, get_task
from service.batches.dedup import CodeKey, code_key
from service.batches.lines import numbered_lines, without_bom
from service.batches.schemas import BatchCreate, LineError, Sample

JSONL_TYPES = ("application/x-ndjson", "application/jsonl", "application/x-jsonlines", "application/jsonlines",
               "text/plain")
JSON_TYPES = ("application/json",)
MAX_METADATA_BYTES = 16 * 1024
"""Per-sample `metadata` + `sampling` as JSON: room for any run bookkeeping, not for smuggling a dataset."""


class UploadError(ValueError):
    """The upload as a whole is unusable (not one bad line); `status` is the HTTP status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Parsed:
    samples: list[tuple[int, Sample]] = field(default_factory=list)
    rejected: list[LineError] = field(default_factory=list)
    name: str | None = None
    tags: list[str] = field(default_factory=list)
    codes: dict[int, CodeKey] = field(default_factory=dict)
    """Each accepted line's dedup key. Extraction costs CPU in proportion to the text, so it is done here, while
    parsing, and never inside the write transaction that stores the batch (it would hold SQLite's write lock,
    or the key's row lock on PostgreSQL, for every other writer)."""

    def accept(self, line: int, sample: Sample) -> None:
        self.samples.append((line, sample))
        self.codes[line] = code_key(sample.task, sample.text)


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False, include_context=False, include_input=False):
        where = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts)


def check_sample(raw: Any, max_source_bytes: int, defaults: dict[str, Any] | None = None) -> Sample:
    """Validate one item; raises ValueError with a message saying what to fix."""
    if isinstance(raw, str) and defaults is not None:
        raw = {"completion": raw}
    if not isinstance(raw, dict):
        raise ValueError(f"expected a JSON object (a sample), got {type(raw).__name__}")  # noqa: TRY004 (a bad line, reported)
    if defaults:
        raw = {**{k: v for k, v in defaults.items() if v is not None}, **raw}
    try:
        sample = Sample.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(_describe(exc)) from None
    try:
        get_task(sample.task)
    except UnknownTask:
        valid = ", ".join(t.id.value for t in all_tasks())
        raise ValueError(f"unknown task {sample.task!r}; valid tasks: {valid}") from None
    text = sample.text
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(f"the text is not valid UTF-8 (unpaired surrogate at character {exc.start})") from None
    if size > max_source_bytes:
        raise ValueError(f"the {'source' if sample.source is not None else 'completion'} is {size} bytes; the limit is "
                         f"{max_source_bytes} bytes (JUDGE_MAX_SOURCE_BYTES)")
    if not text.strip():
        raise ValueError("the source is empty: send a module (or a completion) that defines class ModelNew")
    extra = len(json.dumps(sample.metadata)) + len(json.dumps(sample.sampling))
    if extra > MAX_METADATA_BYTES:
        raise ValueError(f"metadata and sampling take {extra} bytes as JSON; the limit is {MAX_METADATA_BYTES}")
    return sample


def _collect(items: list[tuple[int, Any]], max_source_bytes: int, parsed: Parsed) -> Parsed:
    for line, raw in items:
        try:
            parsed.accept(line, check_sample(raw, max_source_bytes))
        except ValueError as exc:
            parsed.rejected.append(LineError(line=line, error=str(exc)))
    return parsed


TOO_DEEP = "nests arrays and objects deeper than the JSON reader allows (about 1,000 levels)"


class DuplicateKey(ValueError):
    """One JSON object names a key twice."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object_pairs_hook: the object as a dict, refused if a key repeats."""
    found = dict(pairs)
    if len(found) == len(pairs):
        return found
    found = {}
    for key, value in pairs:
        if key in found:
            raise DuplicateKey(f"has the key {json.dumps(key)} twice in one object; send each key once (which value "
                               "was meant is ambiguous)")
        found[key] = value
    return found


def _loads(text: str) -> Any:
    """json.loads refusing repeated keys, with what it raises besides JSONDecodeError made a ValueError that says
    what to fix."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except (json.JSONDecodeError, DuplicateKey):
        raise
    except RecursionError:
        raise ValueError(TOO_DEEP) from None
    except ValueError:  # Python reads integers of at most 4,300 digits (sys.get_int_max_str_digits)
        raise ValueError("holds an integer of more than 4,300 digits; send such a number as a string") from None


def _jsonl(text: str) -> list[tuple[int, Any] | LineError]:
    out: list[tuple[int, Any] | LineError] = []
    for number, line in numbered_lines(text):
        if not line.strip():
            continue
        try:
            out.append((number, _loads(line)))
        except json.JSONDecodeError as exc:
            out.append(LineError(line=number, error=f"not valid JSON at column {exc.colno}: {exc.msg}"))
        except ValueError as exc:
            out.append(LineError(line=number, error=f"the line {exc}"))
    return out


def _where_too_deep(text: str) -> str:
    """Where a document passes pydantic's JSON depth limit (well below json's), to name it in the error."""
    try:
        pydantic_core.from_json(text)
    except ValueError as exc:
        return f" ({exc})"
    return ""


def parse_upload(body: bytes, content_type: str, max_source_bytes: int, max_samples: int) -> Parsed:
    """Split and validate an upload. Raises UploadError (415, 422, 413) when the whole body is unusable."""
    try:
        text = without_bom(body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UploadError(422, f"the body is not valid UTF-8: byte {body[exc.start]:#04x} at offset {exc.start}"
                          ) from None
    parsed = Parsed()
    if content_type in JSON_TYPES:
        try:
            document = _loads(text)
        except json.JSONDecodeError as exc:
            raise UploadError(422, f"the body is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                                   "for one sample per line send application/x-ndjson") from None
        except DuplicateKey as exc:
            raise UploadError(422, f"the body {exc}") from None
        except ValueError as exc:
            where = _where_too_deep(text) if str(exc) == TOO_DEEP else ""
            raise UploadError(422, f"the body {exc}{where}; a sample is an object of strings, numbers and small "
                                   "JSON objects") from None
        if isinstance(document, dict):
            try:
                envelope = BatchCreate.model_validate(document)
            except ValidationError as exc:
                raise UploadError(422, f"invalid batch object: {_describe(exc)}") from None
            parsed.name, parsed.tags, items = envelope.name, envelope.tags, envelope.samples
        elif isinstance(document, list):
            items = document
        else:
            raise UploadError(422, "send a JSON list of samples or {\"samples\": [...]}")
        entries: list[tuple[int, Any] | LineError] = list(enumerate(items, start=1))
    elif content_type in JSONL_TYPES:
        entries = _jsonl(text)
    else:
        raise UploadError(415, "send application/x-ndjson (one JSON sample per line) or application/json "
                               "(a list of samples, or {\"samples\": [...]})")
    if len(entries) > max_samples:
        raise UploadError(413, f"the batch has {len(entries)} samples; the limit is {max_samples} "
                               "(JUDGE_MAX_BATCH_SAMPLES): split it")
    parsed.rejected.extend(e for e in entries if isinstance(e, LineError))
    _collect([e for e in entries if not isinstance(e, LineError)], max_source_bytes, parsed)
    parsed.rejected.sort(key=lambda e: e.line)
    return parsed
