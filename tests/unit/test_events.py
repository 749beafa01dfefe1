"""The event recorder on a fake clock: an identical event for the same object is written
once within the de-duplication window and again after it; events carry the clock's time."""

from __future__ import annotations

import asyncio
import datetime

from devkit.fakeclock import FakeClock
from dispatcher.observability.events import EventRecorder
from tests.unit.fakes import FakeClient

JOB = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
       "metadata": {"name": "j", "namespace": "ns", "uid": "u1"}}


async def test_identical_events_are_written_once_per_window_with_the_clock_s_time() -> None:
    clock = FakeClock()
    client = FakeClient("manager")
    recorder = EventRecorder(client.as_client(), instance="i", clock=clock, dedupe_seconds=60)
    task = asyncio.create_task(recorder.run())
    try:
        recorder.record(JOB, reason="Placed", message="on w1")
        await clock.advance(59)
        recorder.record(JOB, reason="Placed", message="on w1")
        recorder.record(JOB, reason="Placed", message="on w2")
        await clock.advance(1)
        recorder.record(JOB, reason="Placed", message="on w1")
        await clock.advance(0)
    finally:
        task.cancel()
        await asyncio.wait([task])
    written = [(r.body["note"], r.body["eventTime"]) for r in client.made("event")]
    at = [datetime.datetime.fromtimestamp(clock.time() - ago, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ") for ago in (60, 1, 0)]
    assert written == [("on w1", at[0]), ("on w2", at[1]), ("on w1", at[2])]
