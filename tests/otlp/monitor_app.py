"""A small two-model app instrumented with the real OpenTelemetry Python SDK: each request is
a trace of an agent span with one chat span under it (GenAI semantic conventions), exported
over OTLP/HTTP (protobuf) to `evalsql serve --otlp`, where a monitor scores them.

Usage: monitor_app.py HTTP_URL TOKEN TRACES
Prints one JSON line: the trace ids sent (hex), with each one's model.
"""

import json
import sys

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind

http_url, token, traces = sys.argv[1], sys.argv[2], int(sys.argv[3])
exporter = OTLPSpanExporter(endpoint=http_url, headers={"authorization": f"Bearer {token}"})
provider = TracerProvider(resource=Resource.create({"service.name": "two-models"}))
provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=512))
tracer = provider.get_tracer("evalsql.tests.monitor", "1.0")

ANSWERS = ["Paris.", "Paris is the capital of France.", "Lyon.", "I do not know."]
sent = {}
for i in range(traces):
    model = "model-a" if i % 2 == 0 else "model-b"
    question = f"Which city is the capital of France? (asked {i})"
    answer = ANSWERS[i % len(ANSWERS)]
    with tracer.start_as_current_span(
        "invoke_agent assistant",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "assistant"},
    ) as root:
        with tracer.start_as_current_span(
            f"chat {model}",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": model,
                "gen_ai.usage.input_tokens": 20 + i % 7,
                "gen_ai.usage.output_tokens": len(answer.split()),
                "gen_ai.input.messages": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": question}]}]
                ),
                "gen_ai.output.messages": json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
                ),
            },
        ):
            pass
        sent[format(root.get_span_context().trace_id, "032x")] = model
assert provider.force_flush(60_000), "the exporter did not flush"
provider.shutdown()
print(json.dumps(sent))
