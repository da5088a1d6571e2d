"""The OpenAPI document tells the truth, and /docs and /redoc work without internet.

What a client generator or a person reading /docs relies on: how to authenticate (a bearer scheme, so /docs
has an Authorize button), every error a route can answer with its body, both request bodies of POST
/v1/submissions and the query parameters of the text form. The documentation pages load their assets from
this server (no CDN), and each asset answers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from service.api.schemas import MAX_SAMPLE_INDEX
from service.core.config import Settings
from service.main import create_app


@pytest.fixture(scope="module")
def docs_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The document and the pages read no database: one app for the module, on an unused SQLite path."""
    url = f"sqlite:///{tmp_path_factory.mktemp('openapi') / 'unused.db'}"
    with TestClient(create_app(Settings(database_url=url))) as client:
        yield client


@pytest.fixture(scope="module")
def spec(docs_client: TestClient) -> dict:
    return docs_client.get("/openapi.json").json()


def operation(spec: dict, method: str, path: str) -> dict:
    return spec["paths"][path][method]


def test_a_bearer_scheme_is_declared_and_required_where_a_key_is(spec):
    schemes = spec["components"]["securitySchemes"]
    assert schemes["bearer"] == {**schemes["bearer"], "type": "http", "scheme": "bearer"}
    assert schemes["apiKeyHeader"]["in"] == "header" and schemes["apiKeyHeader"]["name"] == "X-API-Key"
    for method, path in [("post", "/v1/submissions"), ("get", "/v1/submissions"),
                         ("get", "/v1/submissions/{submission_id}/source"), ("post", "/v1/keys")]:
        assert {"bearer": []} in operation(spec, method, path)["security"], path
    for method, path in [("get", "/v1/tasks"), ("get", "/healthz")]:
        assert "security" not in operation(spec, method, path), path
    # Readable without a key, and more with one (a private submission's diagnostics: service/visibility.py).
    for method, path in [("get", "/v1/submissions/{submission_id}"), ("get", "/v1/submissions/{submission_id}/profile"),
                         ("get", "/v1/submissions/{submission_id}/events"), ("get", "/v1/batches/{batch_id}/results")]:
        security = operation(spec, method, path)["security"]
        assert {"bearer": []} in security and {} in security, path


@pytest.mark.parametrize("method,path,codes", [
    ("post", "/v1/submissions", {"202", "401", "404", "409", "413", "415", "422", "429", "503"}),
    ("get", "/v1/submissions", {"200", "401", "422", "503"}),
    ("get", "/v1/submissions/{submission_id}", {"200", "404", "422"}),
    ("get", "/v1/submissions/{submission_id}/source", {"200", "401", "404", "422"}),
    ("get", "/v1/tasks/{task_id}", {"200", "404", "422"}),
    ("post", "/v1/keys", {"201", "401", "403", "422"}),
    ("delete", "/v1/keys/{key_id}", {"200", "401", "403", "404", "422"}),
    ("get", "/readyz", {"200", "503"}),
])
def test_errors_are_declared_where_they_can_happen(spec, method, path, codes):
    assert codes <= set(operation(spec, method, path)["responses"])


def test_every_error_response_documents_the_one_error_body(spec):
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    assert set(spec["components"]["schemas"]["ErrorBody"]["required"]) == {"detail"}
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            for code, response in op["responses"].items():
                if code.startswith("4") or (code == "503" and path != "/readyz"):
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path, code)


def test_both_submission_bodies_and_the_text_query_are_documented(spec):
    post = operation(spec, "post", "/v1/submissions")
    content = post["requestBody"]["content"]
    assert content["text/plain"]["schema"]["type"] == "string"
    json_schema = content["application/json"]["schema"]
    assert set(json_schema["required"]) == {"task"}
    assert json_schema["oneOf"] == [{"required": ["source"]}, {"required": ["completion"]}]
    index = next(s for s in json_schema["properties"]["sample_index"]["anyOf"] if s.get("type") == "integer")
    assert index["maximum"] == MAX_SAMPLE_INDEX and index["minimum"] == 0
    params = {p["name"]: p for p in post["parameters"]}
    assert {"task", "model", "sample_index", "tag", "idempotency_key"} <= set(params)
    assert all(params[name]["in"] == "query" for name in ("task", "model", "sample_index", "tag"))
    assert "text body" in params["task"]["description"]
    assert params["idempotency-key"]["in"] == "header"


def local_assets(html: str) -> list[str]:
    return re.findall(r"""(?:src|href)=["']([^"']+)["']""", html) + re.findall(r"""url: ?["']([^"']+)["']""", html)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_documentation_pages_load_only_local_assets(docs_client, page):
    client = docs_client
    response = client.get(page)
    assert response.status_code == 200
    html = response.text
    assert "cdn" not in html.lower() and "https://" not in html and "http://" not in html
    assets = set(local_assets(html)) | set(re.findall(r"""spec-url=["']([^"']+)["']""", html))
    assert any(a.endswith(".js") for a in assets) and "/openapi.json" in assets
    for url in assets:
        assert url.startswith("/"), url
        fetched = client.get(url)
        assert fetched.status_code == 200 and fetched.content, url


def test_the_document_is_valid_openapi_with_every_reference_resolvable(spec):
    """An OpenAPI validator's word (generators and /redoc stop at the first broken `$ref`: a route's hand-written
    schema once carried pydantic's `#/$defs/...`, which points at the document's root)."""
    from openapi_spec_validator import validate

    validate(spec)
    refs = set(re.findall(r'"\$ref": "([^"]+)"', json.dumps(spec)))
    assert refs and all(ref.startswith("#/components/schemas/") for ref in refs), refs
