import asyncio

import pytest

from bir.hooks import api
from bir.hooks.session.proxy_reports import ProxyReports

pytestmark = pytest.mark.anyio


def report(tool_use_id: str | None, call_id: str | None = None, proxy_id: str = "px") -> api.StepReport:
    return api.StepReport(
        server_name="fleet",
        tool_name="list",
        arguments={},
        result={"content": []},
        proxy_id=proxy_id,
        tool_use_id=tool_use_id,
        call_id=call_id,
    )


async def test_a_report_binds_its_proxy_to_the_session_whose_hook_saw_the_call() -> None:
    bound: list[tuple[str, str]] = []
    reports = ProxyReports(lambda proxy, session: bound.append((proxy, session)))
    reports.note_call("toolu_1", "sess-a")
    reports.add(report("toolu_1"))
    assert bound == [("px", "sess-a")]
    assert await reports.wait("toolu_1", 0) == report("toolu_1")


async def test_a_report_carrying_only_an_injected_call_id_joins_its_hook() -> None:
    reports = ProxyReports(lambda proxy, session: None)
    reports.note_call_id("bir_1", "toolu_9")
    reports.add(report(None, call_id="bir_1"))
    found = await reports.wait("toolu_9", 0)
    assert found is not None
    assert found.call_id == "bir_1"


async def test_a_waiting_hook_gets_the_report_when_it_lands_and_none_after_its_grace() -> None:
    reports = ProxyReports(lambda proxy, session: None)
    waiting = asyncio.ensure_future(reports.wait("toolu_2", 5.0))
    await asyncio.sleep(0)
    reports.add(report("toolu_2"))
    assert await waiting == report("toolu_2")
    assert await reports.wait("toolu_never", 0.01) is None


async def test_the_tables_are_bounded_oldest_first() -> None:
    reports = ProxyReports(lambda proxy, session: None, max_kept=3)
    for n in range(5):
        reports.add(report(f"toolu_{n}"))
    assert await reports.wait("toolu_0", 0) is None
    assert await reports.wait("toolu_4", 0) is not None
