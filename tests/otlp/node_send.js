// Spans from the real OpenTelemetry JavaScript SDK, sent to `evalsql serve --otlp` with
// @opentelemetry/exporter-trace-otlp-http (OTLP/JSON) or -proto (protobuf).
// Usage: node node_send.js URL TOKEN SERVICE json|proto
// Prints the spans sent as one JSON array: ids, name and attributes.
const [url, token, service, encoding] = process.argv.slice(2);
const api = require('@opentelemetry/api');
const { BasicTracerProvider, BatchSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { resourceFromAttributes } = require('@opentelemetry/resources');
const { OTLPTraceExporter } = require(
  encoding === 'json' ? '@opentelemetry/exporter-trace-otlp-http' : '@opentelemetry/exporter-trace-otlp-proto');

async function main() {
  const exporter = new OTLPTraceExporter({ url, headers: { Authorization: `Bearer ${token}` } });
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': service }),
    spanProcessors: [new BatchSpanProcessor(exporter, { maxExportBatchSize: 512 })],
  });
  const tracer = provider.getTracer('evalsql.node-test', '1.0');
  const sent = [];
  for (let i = 0; i < 15; i++) {
    const root = tracer.startSpan('invoke_agent planner', {
      attributes: { 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.agent.name': 'planner', 'gen_ai.conversation.id': `n-${i}` },
    });
    const ctx = api.trace.setSpan(api.context.active(), root);
    const attrs = {
      'gen_ai.operation.name': 'chat',
      'gen_ai.request.model': 'claude-sonnet',
      'gen_ai.usage.input_tokens': 40 + i,
      'gen_ai.usage.output_tokens': 9,
      'gen_ai.input.messages': JSON.stringify([{ role: 'user', parts: [{ type: 'text', content: `question ${i}` }] }]),
      'gen_ai.output.messages': JSON.stringify([{ role: 'assistant', parts: [{ type: 'text', content: `answer ${i}` }] }]),
      'app.ratio': 0.5,
      'app.tags': ['a', 'b'],
    };
    const chat = tracer.startSpan('chat claude-sonnet', { kind: api.SpanKind.CLIENT, attributes: attrs }, ctx);
    chat.end();
    root.end();
    for (const [span, a] of [[root, root.attributes], [chat, attrs]]) {
      sent.push({ trace_id: span.spanContext().traceId, span_id: span.spanContext().spanId, name: span.name, attributes: a });
    }
  }
  await provider.forceFlush();
  await provider.shutdown();
  process.stdout.write(JSON.stringify(sent));
}

main().catch((e) => { console.error(e); process.exit(1); });
