"""Traces: one OpenTelemetry trace per turn, exported over OTLP/HTTP to a real receiver on
127.0.0.1 (tests/otlp_receiver.py decodes the protobuf a collector would get)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from botweave import App

from tests.emulators.openai import OpenAIEmulator
from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until
from tests.otlp_receiver import OtlpReceiver

ANN = TelegramEmulator.user(1, "Ann", "ann")
EVE = TelegramEmulator.user(6, "Eve", "eve")


@pytest_asyncio.fixture
async def receiver() -> AsyncIterator[OtlpReceiver]:
    found = await OtlpReceiver().start()
    try:
        yield found
    finally:
        await found.stop()


def traced(receiver: OtlpReceiver, telegram: dict[str, Any], llm: OpenAIEmulator, **agent: Any) -> dict[str, Any]:
    return {
        "agents": {"assistant": {"model": "openai/test-model", "api_base": llm.base_url, "api_key": "sk-secret-key",
                                 **agent}},
        "platforms": {"telegram": telegram},
        "ops": {"tracing": {"endpoint": receiver.endpoint, "service_name": "bot-under-test"}},
    }


async def stopped(app: App) -> None:
    """Stopping exports what is queued."""
    await asyncio.wait_for(app.stop(), 15)


async def test_a_turn_with_a_tool_and_a_streamed_answer_is_one_trace(start_app, telegram_emulator, llm, receiver):
    emu = telegram_emulator
    telegram = {"unknown_user_policy": "allow", "streaming": True, **adapter_config(emu)}
    app = await start_app(traced(receiver, telegram, llm, tools=[{"python": "tests.tooldemo:weather"}]))
    llm.queue_tool_calls(("weather", {"city": "Lisbon"}))
    llm.queue_text("It is 21 degrees in Lisbon, sunny and calm.")
    emu.push_message(emu.private_chat(ANN), ANN, "Weather in Lisbon? my card is 4111 1111 1111 1111")
    await wait_until(lambda: emu.sent(1), 20, "the answer")
    await app.drain()
    (answer,) = emu.sent(1)
    assert "21 degrees" in emu.current(1, answer["message_id"])["text"]
    await stopped(app)

    (intake,) = receiver.named("botweave.intake")
    (turn,) = receiver.named("botweave.turn")
    models = receiver.named("chat ")
    (tool,) = receiver.named("execute_tool ")
    delivers = receiver.named("botweave.deliver")
    trace = {s.trace_id for s in [intake, turn, *models, tool, *delivers]}
    assert len(trace) == 1, "intake, turn, model calls, tool and delivery are one trace"
    assert turn.parent_id == intake.span_id and intake.parent_id == ""
    assert all(s.service == "bot-under-test" for s in receiver.spans)
    assert turn.attributes["botweave.platform"] == "telegram" and turn.attributes["botweave.outcome"] == "replied"

    assert len(models) == 2 and all(m.name == "chat openai/test-model" for m in models)
    for model in models:
        assert model.attributes["gen_ai.system"] == "openai"
        assert model.attributes["gen_ai.request.model"] == "openai/test-model"
        # the model as the provider's answer names it (litellm's `openai/` prefix is the request's)
        assert model.attributes["gen_ai.response.model"] == "test-model"
        assert model.attributes["gen_ai.usage.input_tokens"] > 0 and model.attributes["gen_ai.usage.output_tokens"] > 0
        assert model.attributes["botweave.streamed"] is True
        assert _ancestors(receiver, model)[-1] == intake.span_id
    assert tool.name == "execute_tool weather" and tool.attributes["botweave.tool.status"] == "ok"
    assert not tool.failed and tool.end > tool.start
    assert any(d.attributes.get("botweave.streamed") and d.attributes["botweave.chunks"] == 1 for d in delivers)
    assert all(d.attributes["botweave.platform"] == "telegram" for d in delivers)

    everything = json.dumps([s.__dict__ for s in receiver.spans])
    assert "Lisbon" not in everything, "no arguments, results or words of the person in a trace"
    assert "4111" not in everything and "sk-secret-key" not in everything


@pytest.mark.parametrize(("client", "processes", "streaming"), [
    ("direct", 0, False), ("litellm", 0, True), ("direct", 1, True),
])
async def test_a_failover_is_an_event_on_the_model_call_that_took_over(
    start_app, telegram_emulator, llm, receiver, client, processes, streaming,
):
    emu = telegram_emulator
    telegram = {"unknown_user_policy": "allow", "streaming": streaming, **adapter_config(emu)}
    config = traced(receiver, telegram, llm, model="openai/primary", tools=[{"python": "tests.tooldemo:weather"}],
                    fallbacks=[{"model": "openai/backup", "api_base": llm.base_url, "api_key": "sk-backup-key"}])
    config["models"] = {"client": client, **({"processes": processes} if processes else {})}
    llm.fail("primary", "429", retry_after=30)
    llm.queue_tool_calls(("weather", {"city": "Lisbon"}))
    llm.queue_text("It is 21 degrees in Lisbon.")
    app = await start_app(config)
    emu.push_message(emu.private_chat(ANN), ANN, "Weather in Lisbon?")
    await wait_until(lambda: emu.sent(1), 30, "the answer")
    await app.drain()
    await stopped(app)

    (failed,) = receiver.named("chat openai/primary")
    assert failed.failed and failed.attributes["error.type"] == "RateLimitError" and not failed.events
    took_over, next_round = sorted(receiver.named("chat openai/backup"), key=lambda span: span.start)
    assert took_over.events == [("botweave.failover", {
        "botweave.failover.from_model": "openai/primary", "botweave.failover.to_model": "openai/backup",
        "botweave.failover.reason": "rate_limited",
    })]
    assert not next_round.events, "the next round's call follows an answer: no failover (the primary rests)"
    (turn,) = receiver.named("botweave.turn")
    assert {failed.trace_id, took_over.trace_id, next_round.trace_id} == {turn.trace_id}
    assert failed.parent_id == took_over.parent_id == turn.span_id
    assert took_over.attributes["gen_ai.response.model"] == "backup", "the model the provider says answered"
    assert all(span.role == ("model" if processes else "all") for span in (failed, took_over, next_round))
    assert "sk-backup-key" not in json.dumps([s.__dict__ for s in receiver.spans])


async def test_a_refused_turn_names_the_step_and_the_reason(start_app, telegram_emulator, llm, receiver):
    emu = telegram_emulator
    telegram = {"unknown_user_policy": "deny", "allowed_users": ["1"], **adapter_config(emu)}
    app = await start_app(traced(receiver, telegram, llm))
    emu.push_message(emu.private_chat(EVE), EVE, "let me in")
    emu.push_message(emu.private_chat(ANN), ANN, "hello")
    await wait_until(lambda: emu.sent_texts(1), 20, "Ann answered")
    await app.drain()
    await stopped(app)
    turns = receiver.named("botweave.turn")
    assert sorted(t.attributes["botweave.outcome"] for t in turns) == ["denied", "replied"]
    denied = next(t for t in turns if t.attributes["botweave.outcome"] == "denied")
    (step,) = [s for s in receiver.named("botweave.step") if s.trace_id == denied.trace_id]
    assert step.parent_id == denied.span_id
    assert step.attributes["botweave.step"] == "AccessControl.step"
    assert step.attributes["botweave.outcome"] == "denied"
    assert not [s for s in receiver.spans if s.trace_id == denied.trace_id and s.name.startswith("chat ")]
    assert len(llm.requests) == 1


async def test_ingress_and_worker_on_redis_form_one_trace(start_app, telegram_emulator, llm, receiver, redis_url):
    emu = telegram_emulator
    telegram = {"unknown_user_policy": "allow", **adapter_config(emu)}
    config = {**traced(receiver, telegram, llm), "store": {"url": redis_url}}
    ingress = App.from_config(config, role="ingress")
    worker = App.from_config(config, role="worker")
    await worker.start()
    await ingress.start()
    try:
        emu.push_message(emu.private_chat(ANN), ANN, "across processes")
        await wait_until(lambda: emu.sent_texts(1), 30, "the worker's answer")
        await worker.drain()
    finally:
        await stopped(ingress)
        await stopped(worker)
    (intake,) = receiver.named("botweave.intake")
    (turn,) = receiver.named("botweave.turn")
    assert intake.trace_id == turn.trace_id and turn.parent_id == intake.span_id
    models = receiver.named("chat ")
    assert models and all(m.trace_id == intake.trace_id for m in models)


async def test_model_processes_carry_the_trace_and_export_the_calls_spans(start_app, telegram_emulator, llm, receiver):
    emu = telegram_emulator
    telegram = {"unknown_user_policy": "allow", "streaming": True, **adapter_config(emu)}
    config = {**traced(receiver, telegram, llm, tools=[{"python": "tests.tooldemo:weather"}]), "models": {"processes": 1}}
    config["ops"]["tracing"]["headers"] = {"x-collector-key": "collector-secret"}
    app = await start_app(config)
    llm.queue_tool_calls(("weather", {"city": "Porto"}))
    llm.queue_text("It is 19 degrees in Porto.")
    emu.push_message(emu.private_chat(ANN), ANN, "Weather in Porto?")
    await wait_until(lambda: emu.sent(1), 30, "the answer")
    await app.drain()
    await stopped(app)  # the model process leaves, exporting what it holds

    (turn,) = receiver.named("botweave.turn")
    (tool,) = receiver.named("execute_tool ")
    models = receiver.named("chat ")
    assert len(models) == 2, "each call made in the model process is a span"
    assert all(m.role == "model" and turn.role == "all" for m in models)
    for model in models:
        assert model.trace_id == turn.trace_id and model.parent_id == turn.span_id
        assert model.attributes["gen_ai.request.model"] == "openai/test-model"
        assert model.attributes["gen_ai.usage.output_tokens"] > 0
    assert tool.trace_id == turn.trace_id and models[0].end <= tool.start <= models[1].start


async def test_a_collector_that_is_down_or_slow_never_holds_a_turn(start_app, telegram_emulator, llm, receiver):
    emu = telegram_emulator
    await receiver.stop()  # nothing listens there now
    telegram = {"unknown_user_policy": "allow", **adapter_config(emu)}
    app = await start_app(traced(receiver, telegram, llm))
    for n in range(5):
        emu.push_message(emu.private_chat(ANN), ANN, f"message {n}")
    dropped = _dropped()
    await wait_until(lambda: len(emu.sent_texts(1)) == 5, 20, "every answer, collector or not")
    started = asyncio.get_running_loop().time()
    await stopped(app)
    assert asyncio.get_running_loop().time() - started < 12
    assert _dropped() - dropped >= 5 * 4, "each turn's intake, turn, model call and delivery: counted as lost"


async def test_a_slow_collector_costs_the_turns_nothing_and_its_lost_spans_are_counted(
    start_app, telegram_emulator, llm, receiver,
):
    emu = telegram_emulator
    receiver.delay = 30.0  # longer than an export may take
    app = await start_app(traced(receiver, {"unknown_user_policy": "allow", **adapter_config(emu)}, llm))
    dropped = _dropped()
    for n in range(3):
        emu.push_message(emu.private_chat(ANN), ANN, f"message {n}")
        await wait_until(lambda n=n: len(emu.sent_texts(1)) == n + 1, 10, "the answer, at once")
    started = asyncio.get_running_loop().time()
    await stopped(app)
    assert asyncio.get_running_loop().time() - started < 12
    assert receiver.requests >= 1 and _dropped() - dropped >= 3 * 4


def test_a_full_queue_drops_and_counts_instead_of_growing():
    from botweave.runtime.config import TracingConfig
    from botweave.runtime.otlp_export import Encoder, OtlpHttpExporter
    from botweave.runtime.tracing import OtelTracer

    tracer = OtelTracer(TracingConfig(endpoint="http://127.0.0.1:9"))
    tracer.exporter = OtlpHttpExporter("http://127.0.0.1:9/v1/traces", {}, 1.0, Encoder({}, "botweave"), capacity=2,
                                       every=3600)
    dropped = _dropped()
    for n in range(5):
        with tracer.span(f"span {n}", {}):
            pass
    assert [span.name for span in tracer.exporter.queue] == ["span 0", "span 1"] and _dropped() - dropped == 3
    tracer.close()  # the two queued are posted to nobody: lost, and counted
    assert _dropped() - dropped == 5


@pytest.mark.parametrize(("ratio", "low_bits", "kept"), [
    (1.0, 2**64 - 1, True), (0.0, 0, False), (0.25, 2**62 - 1, True), (0.25, 2**62, False), (0.5, 2**63 + 5, False),
])
def test_sampling_keeps_a_share_of_traces_by_their_id(ratio, low_bits, kept):
    """As OpenTelemetry's TraceIdRatioBased: the trace id's low 64 bits against the ratio, so
    every process decides alike; a span with a parent follows its parent."""
    from botweave.runtime.config import TracingConfig
    from botweave.runtime.tracing import OtelTracer, parse_traceparent

    tracer = OtelTracer(TracingConfig(sample_ratio=ratio))
    assert tracer.sample((0xABCD << 64) | low_bits) is kept
    for flags, followed in (("01", True), ("00", False)):
        with tracer.joined({"traceparent": f"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-{flags}"}):
            with tracer.span("botweave.deliver", {}) as span:
                assert span.sampled is followed
                assert tracer.carrier()["traceparent"].endswith(f"-{span.span_id:016x}-{flags}")
    assert [span.name for span in tracer.exporter.queue] == ["botweave.deliver"], "only the sampled parent's child"
    tracer.close()
    for garbled in ("", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", "ff-" + "1" * 32 + "-" + "1" * 16 + "-01",
                    "00-" + "0" * 32 + "-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c80319c-" + "0" * 16 + "-01"):
        assert parse_traceparent(garbled) is None


async def test_an_unsampled_turn_exports_nothing_yet_carries_its_context(start_app, telegram_emulator, llm, receiver):
    emu = telegram_emulator
    config = traced(receiver, {"unknown_user_policy": "allow", **adapter_config(emu)}, llm)
    config["ops"]["tracing"]["sample_ratio"] = 0
    app = await start_app(config)
    emu.push_message(emu.private_chat(ANN), ANN, "hello")
    await wait_until(lambda: emu.sent_texts(1), 20, "the answer")
    await app.drain()
    await stopped(app)
    assert receiver.spans == [] and receiver.requests == 0


def _dropped() -> float:
    from botweave.metrics import REGISTRY

    return REGISTRY.get_sample_value("botweave_trace_spans_dropped_total") or 0.0


def test_spans_are_encoded_as_a_collector_reads_them():
    """Events, a failure, a parent in another process and every attribute type survive the
    encoding (what a collector decodes with opentelemetry-proto is what was recorded)."""
    from botweave import tracing
    from botweave.runtime.config import TracingConfig
    from botweave.runtime.tracing import OtelTracer
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    tracer = OtelTracer(TracingConfig(endpoint="http://127.0.0.1:9", service_name="svc"), role="worker")
    with tracer.joined({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}):
        with tracing.span("botweave.deliver", {"s": "telegram", "b": True, "i": 3, "f": 0.5, "n": -2}) as span:
            tracing.event("botweave.retry", {"botweave.chunk": 1})
            span.fail("TimedOut")
    root = tracer.span("botweave.intake", {})
    with root:
        pass
    recorded = list(tracer.exporter.queue)
    assert [s.name for s in recorded] == ["botweave.deliver", "botweave.intake"]

    body = tracer.exporter.encoder.encode(recorded)
    tracer.close()
    (batch,) = ExportTraceServiceRequest.FromString(body).resource_spans
    resource = {a.key: a.value.string_value for a in batch.resource.attributes}
    assert resource["botweave.role"] == "worker" and resource["service.name"] == "svc"
    assert resource["telemetry.sdk.language"] == "python" and resource["service.instance.id"]
    (scoped,) = batch.scope_spans
    assert scoped.scope.name == "botweave"
    deliver, intake = scoped.spans
    assert deliver.trace_id.hex() == "0af7651916cd43dd8448eb211c80319c"
    assert deliver.parent_span_id.hex() == "b7ad6b7169203331" and deliver.flags == 0x300
    assert deliver.span_id.hex() == f"{recorded[0].span_id:016x}"
    assert [(a.key, a.value.WhichOneof("value")) for a in deliver.attributes] == [
        ("s", "string_value"), ("b", "bool_value"), ("i", "int_value"), ("f", "double_value"), ("n", "int_value"),
        ("error.type", "string_value")]
    assert deliver.attributes[2].value.int_value == 3 and deliver.attributes[3].value.double_value == 0.5
    assert deliver.attributes[4].value.int_value == -2 and deliver.attributes[5].value.string_value == "TimedOut"
    (event,) = deliver.events
    assert event.name == "botweave.retry" and event.attributes[0].value.int_value == 1
    assert deliver.start_time_unix_nano <= event.time_unix_nano <= deliver.end_time_unix_nano
    assert deliver.status.code == 2 and deliver.kind == 1 and deliver.end_time_unix_nano >= deliver.start_time_unix_nano
    assert intake.parent_span_id == b"" and intake.flags == 0x100 and intake.status.code == 0
    assert intake.trace_id != deliver.trace_id and len(intake.trace_id) == 16


@pytest.mark.parametrize("traced", [False, True], ids=["off", "on"])
def test_tracing_off_imports_nothing_of_opentelemetry(tmp_path, traced):
    """Off (the default), a bot that answers loads no OpenTelemetry module and not the tracer;
    on, the tracer is botweave's own: still no OpenTelemetry package."""
    ops = ", 'ops': {'tracing': {'endpoint': 'http://127.0.0.1:9'}}" if traced else ""
    code = (
        "import asyncio, sys\n"
        "from botweave import App\n"
        f"app = App.from_config({{'agents': {{'a': {{'model': 'offline/echo'}}}}, 'platforms': {{}}{ops}}})\n"
        "async def main():\n"
        "    await app.start()\n"
        "    await app.stop()\n"
        "asyncio.run(main())\n"
        "print(json.dumps([sorted(m for m in sys.modules if m.startswith('opentelemetry')), 'mcp' in sys.modules,\n"
        "                  'botweave.runtime.tracing' in sys.modules]))\n"
    )
    result = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert result.returncode == 0, result.stderr
    otel, mcp_loaded, tracer_loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert tracer_loaded is traced
    assert not [m for m in otel if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))]
    if not mcp_loaded:  # the mcp SDK imports OpenTelemetry's API itself, when MCP is used
        assert otel == []


def test_a_tracing_section_with_a_bad_endpoint_names_the_field():
    from botweave.config import ConfigError
    from botweave.runtime.config import load_config

    with pytest.raises(ConfigError) as error:
        load_config({"agents": {"a": {"model": "offline/echo"}}, "ops": {"tracing": {"endpoint": "collector:4318"}}})
    assert "ops.tracing.endpoint" in str(error.value) and "http(s) URL" in str(error.value)


def _ancestors(receiver: OtlpReceiver, span: Any) -> list[str]:
    by_id = {s.span_id: s for s in receiver.spans}
    chain, parent = [], span.parent_id
    while parent:
        chain.append(parent)
        parent = by_id[parent].parent_id if parent in by_id else ""
    return chain


async def test_doctor_checks_the_collector(tmp_path, receiver):
    import io

    from botweave.runtime.doctor import doctor

    config = tmp_path / "bot.yaml"
    config.write_text(f"agents: {{a: {{model: offline/echo}}}}\nops: {{tracing: {{endpoint: '{receiver.endpoint}'}}}}\n")
    out = io.StringIO()
    assert await doctor(str(config), model=False, out=out) == 0
    assert f"the collector at {receiver.endpoint}/v1/traces accepts OTLP/HTTP exports" in out.getvalue()
    await receiver.stop()
    out = io.StringIO()
    assert await doctor(str(config), model=False, out=out) == 1
    line = next(line for line in out.getvalue().splitlines() if "tracing" in line)
    assert "FAIL" in line and "ops.tracing.endpoint" in line


async def test_a_schedules_run_is_a_trace_of_its_own(start_app, telegram_emulator, llm, receiver):
    emu = telegram_emulator
    config = traced(receiver, {"unknown_user_policy": "allow", **adapter_config(emu)}, llm)
    config["schedules"] = {"digest": {"cron": "0 7 * * *", "agent": "assistant", "prompt": "Summarise the night",
                                      "target": "telegram:1"}}
    app = await start_app(config)
    await app.schedules.run_now("digest")
    await stopped(app)
    (run,) = receiver.named("botweave.schedule")
    assert run.parent_id == "" and run.attributes["botweave.schedule"] == "digest"
    (model,) = receiver.named("chat ")
    delivers = receiver.named("botweave.deliver")
    assert model.parent_id == run.span_id and all(d.trace_id == run.trace_id for d in delivers) and delivers
