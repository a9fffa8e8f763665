"""Spans from the real OpenTelemetry Python SDK, sent to `evalsql serve --otlp` over OTLP/HTTP
(protobuf) and OTLP/gRPC, then read back over the PostgreSQL wire (psycopg) and from the
store with the Python `deltalake` package; every column is compared with what was sent.

Usage: sdk_send.py HTTP_URL GRPC_ADDR TOKEN PG_PORT STORE_DIR (the table is STORE_DIR/spans)
Prints one JSON line: the number of spans checked per exporter.
"""

import json
import os
import sys

import psycopg
from deltalake import DeltaTable
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

http_url, grpc_addr, token, pg_port, store = sys.argv[1:6]
headers = {"authorization": f"Bearer {token}"}

INPUT = [
    {"role": "system", "parts": [{"type": "text", "content": "Answer briefly."}]},
    {"role": "user", "parts": [{"type": "text", "content": "Which city is the capital of France?"}]},
]
OUTPUT = [{"role": "assistant", "parts": [{"type": "text", "content": "Paris."}], "finish_reason": "stop"}]


def run(name, exporter):
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": f"sdk-{name}", "service.version": "2.0"}))
    provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=512))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("evalsql.tests", "1.0")
    for i in range(20):
        with tracer.start_as_current_span(
            "invoke_agent helper",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "helper",
                "gen_ai.conversation.id": f"conv-{i}",
            },
        ):
            with tracer.start_as_current_span(
                "chat gpt-4o",
                kind=SpanKind.CLIENT,
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.usage.input_tokens": 120 + i,
                    "gen_ai.usage.output_tokens": 7,
                    "gen_ai.input.messages": json.dumps(INPUT),
                    "gen_ai.output.messages": json.dumps(OUTPUT),
                    "gen_ai.request.temperature": 0.25,
                    "gen_ai.request.stop_sequences": ["\n\n", "END"],
                    "app.flags": [True, False],
                },
            ) as chat:
                chat.add_event("gen_ai.content.note", {"n": i})
            with tracer.start_as_current_span(
                "execute_tool search",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "search",
                    "gen_ai.tool.call.id": f"call-{i}",
                    "gen_ai.tool.call.arguments": json.dumps({"q": f"capital {i}"}),
                    "gen_ai.tool.call.result": "Paris",
                },
            ) as tool:
                if i % 5 == 0:
                    tool.set_status(Status(StatusCode.ERROR, "search timed out"))
    assert provider.force_flush(30_000), f"{name}: the exporter did not flush"
    provider.shutdown()
    return memory.get_finished_spans()


def expected(span):
    a = dict(span.attributes)
    ctx = span.get_span_context()
    row = {
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "name": span.name,
        "kind": {SpanKind.INTERNAL: "INTERNAL", SpanKind.CLIENT: "CLIENT"}[span.kind],
        "start_time_unix_nano": span.start_time,
        "end_time_unix_nano": span.end_time,
        "duration_ms": (span.end_time - span.start_time) / 1e6,
        "status_code": {StatusCode.UNSET: "UNSET", StatusCode.OK: "OK", StatusCode.ERROR: "ERROR"}[span.status.status_code],
        "status_message": span.status.description or None,
        "service_name": span.resource.attributes["service.name"],
        "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in a.items()},
        "operation_name": a.get("gen_ai.operation.name"),
        "model": a.get("gen_ai.request.model"),
        "agent_name": a.get("gen_ai.agent.name"),
        "conversation_id": a.get("gen_ai.conversation.id"),
        "tool_name": a.get("gen_ai.tool.name"),
        "tool_call_id": a.get("gen_ai.tool.call.id"),
        "tool_arguments": a.get("gen_ai.tool.call.arguments"),
        "tool_result": a.get("gen_ai.tool.call.result"),
        "input_tokens": a.get("gen_ai.usage.input_tokens"),
        "output_tokens": a.get("gen_ai.usage.output_tokens"),
        "input_messages": None,
        "output_messages": None,
        "input_text": None,
        "output_text": None,
        "scope_name": span.instrumentation_scope.name,
        "resource_attributes": dict(span.resource.attributes),
        "events": [e.name for e in span.events],
    }
    if "gen_ai.input.messages" in a:
        row["input_messages"] = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Which city is the capital of France?"}]
        row["output_messages"] = [{"role": "assistant", "content": "Paris."}]
        row["input_text"] = "Which city is the capital of France?"
        row["output_text"] = "Paris."
    return row


COLUMNS = [
    "trace_id", "span_id", "parent_span_id", "name", "kind", "start_time_unix_nano", "end_time_unix_nano",
    "duration_ms", "status_code", "status_message", "service_name", "attributes", "operation_name", "model",
    "agent_name", "conversation_id", "tool_name", "tool_call_id", "tool_arguments", "tool_result",
    "input_tokens", "output_tokens", "input_messages", "output_messages", "input_text", "output_text",
    "scope_name", "resource_attributes", "events",
]
JSON_COLUMNS = {"attributes", "input_messages", "output_messages", "resource_attributes"}


def got_row(values):
    row = dict(zip(COLUMNS, values))
    for c in JSON_COLUMNS:
        if row[c] is not None:
            row[c] = json.loads(row[c])
    row["events"] = [e["name"] for e in json.loads(row["events"])]
    return row


def check(rows_by_id, sent, where):
    for span in sent:
        want = expected(span)
        got = rows_by_id.get(want["span_id"])
        assert got is not None, f"{where}: span {want['span_id']} ({want['name']}) is missing"
        for c in COLUMNS:
            w, g = want[c], got[c]
            if c == "duration_ms":
                assert abs(w - g) < 1e-6, f"{where}: {c} {g} != {w}"
            elif c == "resource_attributes":
                assert all(g.get(k) == v for k, v in w.items()), f"{where}: {c} {g} lacks {w}"
            else:
                assert g == w, f"{where}: span {want['name']}: {c} {g!r} != {w!r}"


counts = {}
for name, exporter in [
    ("http", HttpExporter(endpoint=http_url, headers=headers, timeout=30)),
    ("grpc", GrpcExporter(endpoint=grpc_addr, insecure=True, headers=headers, timeout=30)),
]:
    sent = run(name, exporter)
    with psycopg.connect(host="127.0.0.1", port=int(pg_port), user="otlp", password="otlp-pass", dbname="evalsql") as conn:
        cur = conn.execute(
            f"SELECT {', '.join(COLUMNS)}, start_time, end_time FROM spans WHERE service_name = %s",
            (f"sdk-{name}",),
        )
        rows = cur.fetchall()
    assert len(rows) == len(sent), f"{name}: {len(rows)} rows over the wire for {len(sent)} spans sent"
    by_id = {}
    for r in rows:
        row = got_row(r[: len(COLUMNS)])
        # The wire's timestamps are microseconds; the nanoseconds are in *_unix_nano.
        start, end = r[len(COLUMNS)], r[len(COLUMNS) + 1]
        assert int(start.timestamp() * 1_000_000) == row["start_time_unix_nano"] // 1000, (start, row)
        assert int(end.timestamp() * 1_000_000) == row["end_time_unix_nano"] // 1000, (end, row)
        by_id[row["span_id"]] = row
    check(by_id, sent, f"{name} over psycopg")
    counts[name] = len(sent)

# Another Delta reader: the Python deltalake package reads the same rows.
table = DeltaTable(os.path.join(store, "spans")).to_pyarrow_table()
rows = table.to_pylist()
by_id = {}
for r in rows:
    if r["service_name"] in ("sdk-http", "sdk-grpc"):
        by_id[r["span_id"]] = got_row([r[c] for c in COLUMNS])
assert len(by_id) == sum(counts.values()), f"deltalake read {len(by_id)} spans"
counts["deltalake_rows"] = len(by_id)
partitions = {str(r["start_date"]) for r in rows}
counts["partitions"] = sorted(partitions)
print(json.dumps(counts), flush=True)
# grpcio's and deltalake's native threads do not always agree on an orderly interpreter exit
# ("terminate called without an active exception"): everything is checked, so leave now.
os._exit(0)
