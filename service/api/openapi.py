"""JSON schemas for the parts of the OpenAPI document that FastAPI does not derive itself.

Routes that read their own body (for the size limit) or stream their answer describe it by hand, from the
pydantic models. pydantic puts nested models under the schema's own `$defs` and refers to them as
`#/$defs/...`; placed inside the OpenAPI document, such a reference points at the document's root, where nothing
is, so generators and `/redoc` failed on it. `inline_schema` resolves them in place.
"""

from __future__ import annotations

from pydantic import BaseModel


def inline_schema(model: type[BaseModel]) -> dict:
    """`model`'s JSON schema with every `#/$defs/...` reference replaced by the definition it names."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def walk(node: object) -> object:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return walk(defs[ref.removeprefix("#/$defs/")])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)  # type: ignore[return-value]
