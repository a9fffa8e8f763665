"""One span over TLS to `evalsql serve --otlp/--otlp-grpc` with --tls-cert/--tls-key, through
the Python SDK's exporters verifying the server's certificate.

Usage: tls_send.py HTTP_PORT GRPC_PORT TOKEN CERT_PEM
Prints {"http": "SUCCESS", "grpc": "SUCCESS"} (the exporters' results).
"""

import json
import os
import sys

import grpc
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

http_port, grpc_port, token, cert = sys.argv[1:5]
headers = {"authorization": f"Bearer {token}"}
tracer = TracerProvider(resource=Resource.create({"service.name": "tls-app"})).get_tracer("tls")
results = {}
for name, exporter in [
    ("http", HttpExporter(endpoint=f"https://127.0.0.1:{http_port}/v1/traces", headers=headers, certificate_file=cert, timeout=20)),
    ("grpc", GrpcExporter(
        endpoint=f"127.0.0.1:{grpc_port}",
        headers=headers,
        credentials=grpc.ssl_channel_credentials(open(cert, "rb").read()),
        timeout=20,
    )),
]:
    span = tracer.start_span(f"over {name}")
    span.end()
    results[name] = exporter.export([span]).name
    exporter.shutdown()
print(json.dumps(results), flush=True)
os._exit(0)
