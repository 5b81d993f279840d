"""``GET /api/v1/testbeds/{testbed}/hosts``: a testbed's hosts, their health and the band (docs/service.md, "Host
health"). Testbeds are the service's, shared by every project: any token reads them."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field

from attnprof.server.auth.dependencies import PrincipalDep
from attnprof.server.db import SessionDep, utcnow
from attnprof.server.dependencies import SettingsDep
from attnprof.server.errors import NotFound
from attnprof.server.hosts import repository, service
from attnprof.server.openapi import errors
from attnprof.server.testbeds import repository as testbed_rows

router = APIRouter(prefix="/api/v1", tags=["testbeds"])


class CanaryOut(BaseModel):
    at: datetime
    worker: str
    state: str = Field(description="learning, healthy or quarantined")
    reasons: list[str] = Field(description="why it failed: each figure outside the band, each throttle")
    figures: dict[str, float]
    clocks: dict[str, Any]
    seconds: float = Field(description="its wall time: what it cost the device")


class HostOut(BaseModel):
    name: str = Field(description="host and GPU, as its workers name them without their process")
    state: str = Field(description="learning, healthy or quarantined")
    reason: str | None = Field(description="why it is quarantined")
    first_seen_at: datetime
    last_canary_at: datetime | None
    last_good_at: datetime | None = Field(description="its last canary inside the band")
    quarantined_at: datetime | None
    last_canary: CanaryOut | None


class BoundOut(BaseModel):
    reference: float = Field(description="the best host's median over its passing canaries in the window")
    reference_host: str
    bound: float = Field(description="the worst a canary may read and pass")
    higher_better: bool
    hosts: int
    canaries: int
    rule: str = Field(description="the rule in words, with its numbers")


class HostsOut(BaseModel):
    testbed: str
    hosts: list[HostOut]
    band: dict[str, dict[str, BoundOut]] = Field(
        description="the band now, per mode (cuda, cpu) and figure; empty for a mode with no passing canary"
    )
    canary_seconds_30d: float = Field(description="device seconds the testbed's canaries took in the last 30 days")


TestbedPath = Annotated[str, Path(max_length=100, description="the testbed's name")]


@router.get("/testbeds/{testbed}/hosts", response_model=HostsOut, responses=errors(404))
def hosts(testbed: TestbedPath, _: PrincipalDep, session: SessionDep, settings: SettingsDep) -> HostsOut:
    """The testbed's hosts: each one's state, why, its last canary, and the band they are judged against."""
    tb = testbed_rows.get_by_name(session, testbed)
    if tb is None:
        raise NotFound(f"no testbed {testbed!r}")
    now = utcnow()
    rows = repository.hosts(session, [tb.id])
    latest = repository.latest_canaries(session, [(tb.id, h.name) for h in rows])
    modes = sorted({c.mode for c in latest.values()})
    bands = {
        mode: {
            name: BoundOut(**{k: v for k, v in b.to_json().items() if k in BoundOut.model_fields})
            for name, b in service.current_band(
                session, testbed_id=tb.id, mode=mode, cfg=settings.health, now=now
            ).items()
        }
        for mode in modes
    }
    out = []
    for h in rows:
        c = latest.get((tb.id, h.name))
        last = None
        if c is not None:
            last = CanaryOut(
                at=c.created_at,
                worker=c.worker,
                state=c.state,
                reasons=list(c.reasons),
                figures=dict(c.figures),
                clocks=dict(c.clocks),
                seconds=c.seconds,
            )
        out.append(
            HostOut(
                name=h.name,
                state=h.state,
                reason=h.reason,
                first_seen_at=h.first_seen_at,
                last_canary_at=h.last_canary_at,
                last_good_at=h.last_good_at,
                quarantined_at=h.quarantined_at,
                last_canary=last,
            )
        )
    spent = repository.canary_seconds(session, since=now - timedelta(days=30)).get(tb.id, 0.0)
    return HostsOut(testbed=tb.name, hosts=out, band=bands, canary_seconds_30d=round(spent, 3))
