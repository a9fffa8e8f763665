#!/usr/bin/env python3
"""Writes sample OpenTelemetry traces of the agent runs in data/agents.jsonl to
data/traces/, in the form the OpenTelemetry Collector's file exporter writes OTLP/JSON:
one ExportTraceServiceRequest JSON object per line. With --fixtures it writes the test
fixtures of tests/fixtures/otlp/ instead (an OpenInference-instrumented agent, a line
whose 64-bit integers are JSON numbers, and a file with a malformed line).

Why: the `read_otlp` table function reads such files, so that agent trajectories can be
evaluated straight from traces and joined back to the reference trajectories of
data/agents.jsonl (the root span's gen_ai.conversation.id is the row's id).

How: the spans are made by the real OpenTelemetry Python SDK (a TracerProvider with an
IdGenerator seeded from the row and explicit start and end times from a fixed base
epoch, so the output is byte-identical on every run) and encoded by the real OTLP
encoder (opentelemetry.exporter.otlp.proto.common.trace_encoder.encode_spans); the
protobuf messages are turned into OTLP/JSON with google.protobuf.json_format, and the
trace and span ids, which json_format writes in base64, are rewritten as lowercase hex
as the OTLP/JSON specification requires. Span model: see data/TRACES.md.

Needs opentelemetry-sdk and opentelemetry-exporter-otlp-proto-common (written with
1.45.2; the resource records the SDK version, so another version changes the bytes).
Run from the repository root:
    python3 data/generate_traces.py             # data/traces/*.jsonl
    python3 data/generate_traces.py --fixtures  # tests/fixtures/otlp/*.jsonl
"""
import base64
import hashlib
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from google.protobuf.json_format import MessageToDict
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.sdk.version import __version__ as SDK_VERSION
from opentelemetry.trace import SpanKind, Status, StatusCode

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TRACES = HERE / "traces"
FIXTURES = ROOT / "tests" / "fixtures" / "otlp"

MS = 1_000_000  # nanoseconds in a millisecond
BASE_NS = int(datetime(2026, 11, 2, 9, 0, 0, tzinfo=timezone.utc).timestamp()) * 1_000_000_000
FIXTURE_BASE_NS = int(datetime(2026, 11, 3, 10, 0, 0, tzinfo=timezone.utc).timestamp()) * 1_000_000_000
ROW_SPACING_NS = 60 * 1_000_000_000  # run i of data/agents.jsonl starts at BASE + i minutes
BATCH_SIZE = 32  # spans per ExportTraceServiceRequest line (a BatchSpanProcessor's max_export_batch_size)

SCOPE_NAME = "evalsql.sample_agents"
SCOPE_VERSION = "1.0.0"
SCHEMA_URL = "https://opentelemetry.io/schemas/1.37.0"

# The model each agent version runs on: (gen_ai.provider.name, request model, response model).
AGENT_MODELS = {
    "planner-v2": ("openai", "gpt-4o", "gpt-4o-2024-08-06"),
    "react-v1": ("gcp.vertex_ai", "gemini-2.0-flash", "gemini-2.0-flash-001"),
}

# The same models as OpenInference names them: (llm.provider, llm.system).
OPENINFERENCE_PROVIDERS = {
    "planner-v2": ("openai", "openai"),
    "react-v1": ("google", "vertexai"),
}

# How the last tool call of a failed run fails, per scenario: (error.type, message).
FAILURES = {
    "on-device": ("DeviceUnreachableError", "device did not answer within 5 s"),
    "customer-support": ("UpstreamTimeoutError", "order service timed out after 10 s"),
    "content-creation": ("RateLimitError", "campaign API rate limit exceeded"),
}


# ---------------------------------------------------------------------------------------
# SDK plumbing: deterministic ids, a provider whose settings ignore the environment.
# ---------------------------------------------------------------------------------------

class SeededIdGenerator(IdGenerator):
    """Ids from SHA-256 of a per-trace seed and a counter: the same run always gets the
    same trace id and span ids. Call begin(seed) before starting a trace's root span."""

    def __init__(self):
        self.seed = ""
        self.counter = 0

    def begin(self, seed):
        self.seed = seed
        self.counter = 0

    def _digest(self, what):
        return hashlib.sha256(f"{what}/{self.seed}".encode("utf-8")).digest()

    def generate_trace_id(self):
        return int.from_bytes(self._digest("trace")[:16], "big") or 1

    def generate_span_id(self):
        self.counter += 1
        return int.from_bytes(self._digest(f"span/{self.counter}")[:8], "big") or 1


def make_provider(resource_attributes):
    """A TracerProvider with a deterministic IdGenerator and explicit sampler and limits
    (so OTEL_* environment variables cannot change the output), and an in-memory
    exporter that collects the finished spans in the order they end."""
    ids = SeededIdGenerator()
    limits = SpanLimits(
        max_attributes=128, max_events=128, max_links=128, max_span_attributes=128,
        max_event_attributes=128, max_link_attributes=128,
        max_attribute_length=SpanLimits.UNSET, max_span_attribute_length=SpanLimits.UNSET,
    )
    resource = Resource({
        **resource_attributes,
        "telemetry.sdk.language": "python",
        "telemetry.sdk.name": "opentelemetry",
        "telemetry.sdk.version": SDK_VERSION,
    })
    provider = TracerProvider(sampler=ALWAYS_ON, resource=resource, id_generator=ids,
                              span_limits=limits, shutdown_on_exit=False)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, ids, exporter


def hex_id(b64):
    return base64.b64decode(b64).hex()


def to_otlp_json(spans):
    """encode_spans -> ExportTraceServiceRequest -> OTLP/JSON dict with hex ids."""
    request = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for rs in request.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = hex_id(span[key])
                for link in span.get("links", []):
                    for key in ("traceId", "spanId"):
                        if key in link:
                            link[key] = hex_id(link[key])
    return request


def dumps(obj):
    # Compact, like the collector's file exporter; keys stay in protobuf field order.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def write_lines(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")


# ---------------------------------------------------------------------------------------
# Timing and token counts: integer arithmetic only, derived from the row.
# ---------------------------------------------------------------------------------------

def tokens(text):
    """A rough token count: one token per four UTF-8 bytes, at least one."""
    return max(1, (len(text.encode("utf-8")) + 3) // 4)


def latency_ns(row):
    return round(row["latency_in_seconds"] * 1000) * MS


def layout(total_ns, weights):
    """Splits the root span's duration into consecutive child slots in proportion to the
    weights, leaving 2 ms free at each end of the root and 1 ms between children.
    Returns (start offset, end offset) pairs in ns, on whole milliseconds."""
    total_ms = total_ns // MS
    usable = total_ms - 4
    cum, edges = 0, [2]
    whole = sum(weights)
    for w in weights:
        cum += w
        edges.append(2 + usable * cum // whole)
    return [(edges[i] * MS, (edges[i + 1] - 1) * MS) for i in range(len(weights))]


def tool_result(step):
    result = {"status": "ok"}
    for key in sorted(step["tool_input"])[:1]:
        result[key] = step["tool_input"][key]
    return json.dumps(result)


def plan_run(row):
    """The steps of one run as a list of (kind, details) in time order: a chat call before
    every tool call, the tool call itself, and a final chat call that writes the answer."""
    steps = json.loads(row["predicted_trajectory"])
    context = 120 + tokens(row["query"])  # system prompt and tool schemas + the question
    plan = []
    for n, step in enumerate(steps, start=1):
        args = json.dumps(step["tool_input"])
        out = 12 + tokens(step["tool_name"] + args)
        plan.append(("chat", {"input": context, "output": out, "finish": "tool_calls", "n": n, "step": step,
                              "args": args}))
        context += out
        failed = bool(row["failure"]) and n == len(steps)
        result = None if failed else tool_result(step)
        plan.append(("tool", {"n": n, "step": step, "args": args, "result": result, "failed": failed}))
        context += tokens(result or "error")
    plan.append(("chat", {"input": context, "output": tokens(row["response"]), "finish": "stop"}))
    return plan


def weight(kind, details):
    if kind == "chat":
        return 6 + details["output"] % 5
    return 3 + len(details["step"]["tool_name"]) % 3


# ---------------------------------------------------------------------------------------
# GenAI semantic-convention traces of data/agents.jsonl
# ---------------------------------------------------------------------------------------

def record_genai_run(tracer, ids, row, start_ns):
    """Records one agent run as an invoke_agent root span with chat and execute_tool
    children, following the OpenTelemetry GenAI semantic conventions."""
    agent = row["agent"]
    provider, model, response_model = AGENT_MODELS[agent]
    error_type, error_message = FAILURES[row["scenario"]]
    end_ns = start_ns + latency_ns(row)
    plan = plan_run(row)
    slots = layout(end_ns - start_ns, [weight(k, d) for k, d in plan])

    ids.begin(f"genai/{agent}/{row['id']}")
    root = tracer.start_span(
        f"invoke_agent {agent}", kind=SpanKind.INTERNAL, start_time=start_ns,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider,
            "gen_ai.agent.name": agent,
            "gen_ai.conversation.id": row["id"],
            "gen_ai.request.model": model,
        })
    parent = trace.set_span_in_context(root)
    failed_tool = None
    for (kind, d), (a, b) in zip(plan, slots):
        if kind == "chat":
            span = tracer.start_span(
                f"chat {model}", context=parent, kind=SpanKind.CLIENT, start_time=start_ns + a,
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": provider,
                    "gen_ai.request.model": model,
                    "gen_ai.request.temperature": 0.2,
                    "gen_ai.response.model": response_model,
                    "gen_ai.response.finish_reasons": [d["finish"]],
                    "gen_ai.usage.input_tokens": d["input"],
                    "gen_ai.usage.output_tokens": d["output"],
                })
        else:
            name = d["step"]["tool_name"]
            attributes = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.type": "function",
                "gen_ai.tool.call.id": f"call_{row['id']}_{d['n']}",
                "gen_ai.tool.call.arguments": d["args"],
            }
            if d["result"] is not None:
                attributes["gen_ai.tool.call.result"] = d["result"]
            span = tracer.start_span(f"execute_tool {name}", context=parent, kind=SpanKind.INTERNAL,
                                     start_time=start_ns + a, attributes=attributes)
            if d["failed"]:
                failed_tool = name
                span.set_attribute("error.type", error_type)
                span.add_event("exception", timestamp=start_ns + b, attributes={
                    "exception.type": error_type,
                    "exception.message": error_message,
                })
                span.set_status(Status(StatusCode.ERROR, f"{error_type}: {error_message}"))
        span.end(end_time=start_ns + b)
    if row["failure"]:
        root.set_attribute("error.type", error_type)
        what = f"tool {failed_tool} failed" if failed_tool else "agent run failed"
        root.set_status(Status(StatusCode.ERROR, f"{what}: {error_message}"))
    else:
        root.set_status(Status(StatusCode.OK))
    root.end(end_time=end_ns)


def genai_spans_by_agent():
    """{agent: (list of spans in the order they ended, {row id: that run's spans})}."""
    rows = [json.loads(line) for line in open(HERE / "agents.jsonl", encoding="utf-8")]
    out = {}
    for agent in sorted({r["agent"] for r in rows}):
        provider, ids, exporter = make_provider({
            "service.name": agent,
            "service.version": agent.rsplit("-v", 1)[1] + ".0.0",
            "deployment.environment.name": "evaluation",
        })
        tracer = provider.get_tracer(SCOPE_NAME, SCOPE_VERSION, schema_url=SCHEMA_URL)
        runs = {}
        for index, row in enumerate(rows):
            if row["agent"] != agent:
                continue
            before = len(exporter.get_finished_spans())
            record_genai_run(tracer, ids, row, BASE_NS + index * ROW_SPACING_NS)
            runs[row["id"]] = list(exporter.get_finished_spans()[before:])
        out[agent] = (list(exporter.get_finished_spans()), runs)
    return out


def write_traces():
    for agent, (spans, _) in genai_spans_by_agent().items():
        lines = [dumps(to_otlp_json(spans[i:i + BATCH_SIZE])) for i in range(0, len(spans), BATCH_SIZE)]
        write_lines(TRACES / f"{agent}.jsonl", lines)


# ---------------------------------------------------------------------------------------
# Test fixtures
# ---------------------------------------------------------------------------------------

def param_schema(tool_input):
    """An OpenInference tool.parameters value: the parameter definition (not the values)."""
    kinds = {bool: "boolean", int: "integer", float: "number", str: "string"}
    return json.dumps({k: {"type": kinds.get(type(v), "object")} for k, v in sorted(tool_input.items())})


def record_openinference_run(tracer, ids, row, start_ns):
    """One run as a smolagents-style OpenInference trace: an AGENT span with LLM and TOOL
    children, attributes from the OpenInference conventions only (no gen_ai.*)."""
    _, model, _ = AGENT_MODELS[row["agent"]]
    oi_provider, oi_system = OPENINFERENCE_PROVIDERS[row["agent"]]
    error_type, error_message = FAILURES[row["scenario"]]
    end_ns = start_ns + latency_ns(row)
    plan = plan_run(row)
    slots = layout(end_ns - start_ns, [weight(k, d) for k, d in plan])
    total_in = sum(d["input"] for k, d in plan if k == "chat")
    total_out = sum(d["output"] for k, d in plan if k == "chat")

    ids.begin(f"openinference/{row['agent']}/{row['id']}")
    root = tracer.start_span("ToolCallingAgent.run", kind=SpanKind.INTERNAL, start_time=start_ns, attributes={
        "openinference.span.kind": "AGENT",
        "agent.name": row["agent"],
        "session.id": row["id"],
        "input.value": json.dumps({"task": row["query"]}),
        "input.mime_type": "application/json",
        "smolagents.max_steps": 6,
    })
    parent = trace.set_span_in_context(root)
    for (kind, d), (a, b) in zip(plan, slots):
        if kind == "chat":
            attributes = {
                "openinference.span.kind": "LLM",
                "llm.model_name": model,
                "llm.provider": oi_provider,
                "llm.system": oi_system,
                "llm.invocation_parameters": json.dumps({"temperature": 0.2}),
                "input.value": json.dumps({"messages": [{"role": "user", "content": row["query"]}]}),
                "input.mime_type": "application/json",
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": row["query"],
                "llm.output_messages.0.message.role": "assistant",
                "llm.token_count.prompt": d["input"],
                "llm.token_count.completion": d["output"],
                "llm.token_count.total": d["input"] + d["output"],
            }
            if d["finish"] == "tool_calls":
                call = "llm.output_messages.0.message.tool_calls.0.tool_call"
                attributes[f"{call}.id"] = f"call_{row['id']}_{d['n']}"
                attributes[f"{call}.function.name"] = d["step"]["tool_name"]
                attributes[f"{call}.function.arguments"] = d["args"]
            else:
                attributes["output.value"] = row["response"]
                attributes["output.mime_type"] = "text/plain"
                attributes["llm.output_messages.0.message.content"] = row["response"]
            span = tracer.start_span("LiteLLMModel.generate", context=parent, kind=SpanKind.INTERNAL,
                                     start_time=start_ns + a, attributes=attributes)
        else:
            step = d["step"]
            attributes = {
                "openinference.span.kind": "TOOL",
                "tool.name": step["tool_name"],
                "tool.description": f"Calls the {step['tool_name']} API.",
                "tool.parameters": param_schema(step["tool_input"]),
                "tool.id": f"call_{row['id']}_{d['n']}",
                "input.value": d["args"],
                "input.mime_type": "application/json",
            }
            if d["result"] is not None:
                attributes["output.value"] = d["result"]
                attributes["output.mime_type"] = "application/json"
            span = tracer.start_span(step["tool_name"], context=parent, kind=SpanKind.INTERNAL,
                                     start_time=start_ns + a, attributes=attributes)
            if d["failed"]:
                span.add_event("exception", timestamp=start_ns + b, attributes={
                    "exception.type": error_type,
                    "exception.message": error_message,
                    "exception.escaped": True,
                })
                span.set_status(Status(StatusCode.ERROR, f"{error_type}: {error_message}"))
            else:
                span.set_status(Status(StatusCode.OK))
        span.end(end_time=start_ns + b)
    root.set_attribute("output.value", row["response"])
    root.set_attribute("llm.token_count.prompt", total_in)
    root.set_attribute("llm.token_count.completion", total_out)
    root.set_attribute("llm.token_count.total", total_in + total_out)
    if row["failure"]:
        root.set_status(Status(StatusCode.ERROR, f"{error_type}: {error_message}"))
    else:
        root.set_status(Status(StatusCode.OK))
    root.end(end_time=end_ns)


def numbers_form(obj, key=None):
    """The same OTLP/JSON with the 64-bit integers written as JSON numbers."""
    if isinstance(obj, dict):
        return {k: numbers_form(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [numbers_form(v) for v in obj]
    if key in ("startTimeUnixNano", "endTimeUnixNano", "timeUnixNano", "intValue") and isinstance(obj, str):
        return int(obj)
    return obj


def write_fixtures():
    rows = {(r["id"], r["agent"]): r for r in map(json.loads, open(HERE / "agents.jsonl", encoding="utf-8"))}

    # openinference.jsonl: two runs, one trace per line (a successful one, a failed one).
    provider, ids, exporter = make_provider({
        "service.name": "support-agent",
        "openinference.project.name": "evalsql-fixtures",
    })
    tracer = provider.get_tracer("openinference.instrumentation.smolagents")
    lines = []
    for n, key in enumerate([("a11", "planner-v2"), ("a05", "react-v1")]):
        before = len(exporter.get_finished_spans())
        record_openinference_run(tracer, ids, rows[key], FIXTURE_BASE_NS + n * ROW_SPACING_NS)
        lines.append(dumps(to_otlp_json(exporter.get_finished_spans()[before:])))
    write_lines(FIXTURES / "openinference.jsonl", lines)

    # The GenAI traces of data/traces/, one trace per request.
    genai = genai_spans_by_agent()

    def trace_line(row_id, agent):
        return to_otlp_json(genai[agent][1][row_id])

    # numbers.jsonl: the failed run a05 of react-v1 (it has an event), 64-bit integers as numbers.
    write_lines(FIXTURES / "numbers.jsonl", [dumps(numbers_form(trace_line("a05", "react-v1")))])

    # malformed.jsonl: valid, truncated (not JSON), valid.
    broken = dumps(trace_line("a01", "react-v1"))
    write_lines(FIXTURES / "malformed.jsonl", [
        dumps(trace_line("a01", "planner-v2")),
        broken[:len(broken) // 2],
        dumps(trace_line("a02", "planner-v2")),
    ])


if __name__ == "__main__":
    if sys.argv[1:] == ["--fixtures"]:
        write_fixtures()
    elif sys.argv[1:]:
        sys.exit(__doc__)
    else:
        write_traces()
