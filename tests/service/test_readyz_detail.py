"""/readyz is anonymous: a database failure is a generic reason there, with the driver's text (host, port, user,
database) only in the log and for the admin key."""

from __future__ import annotations

import logging

from fastapi.testclient import TestClient

from service.core.config import Settings
from service.main import create_app

from .conftest import ADMIN_KEY, free_port


def test_readyz_does_not_tell_anonymous_callers_where_the_database_is(caplog) -> None:  # noqa: ANN001
    port = free_port()  # nothing listens there: the driver's error names it
    settings = Settings(database_url=f"postgresql+psycopg://secretuser@127.0.0.1:{port}/secretdb",
                        admin_key=ADMIN_KEY)
    with caplog.at_level(logging.WARNING, logger="service.api.routes.health"), \
            TestClient(create_app(settings)) as client:
        public = client.get("/readyz")
        admin = client.get("/readyz", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        wrong = client.get("/readyz", headers={"Authorization": "Bearer not-the-admin-key"})
    assert public.status_code == admin.status_code == wrong.status_code == 503
    for anonymous in (public, wrong):
        assert anonymous.json() == {"status": "unavailable", "detail": {"reason": "the database did not answer"}}
        assert str(port) not in anonymous.text and "127.0.0.1" not in anonymous.text
    assert str(port) in admin.json()["detail"]["error"]
    assert any(str(port) in record.getMessage() for record in caplog.records)
