-- Agents scored straight from their OpenTelemetry traces (data/traces/, OTLP/JSON as the
-- Collector's file exporter writes it). Each run is one trace: the invoke_agent span says
-- which agent ran which example (gen_ai.conversation.id), its duration is the latency and its
-- status the outcome; the execute_tool spans, in start order, are the trajectory, scored
-- against the reference trajectories of data/agents.jsonl. Where the two overlap, the
-- result equals the aggregate of queries/agents.sql.

-- The spans of one run: react-v1 on example a05, whose tool call failed.
SELECT name, kind, operation_name, tool_name, tool_arguments, round(duration_ms, 1) AS ms,
       status_code, status_message, input_tokens, output_tokens
FROM read_otlp('data/traces')
WHERE trace_id IN (
  SELECT trace_id FROM read_otlp('data/traces')
  WHERE conversation_id = 'a05' AND agent_name = 'react-v1')
ORDER BY start_time;

-- Per agent: trajectory metrics, latency percentiles from span durations, token totals and
-- the failure rate from span status.
WITH spans AS (
  SELECT * FROM read_otlp('data/traces')
),
runs AS (
  SELECT trace_id, agent_name AS agent, conversation_id AS id,
         duration_ms / 1000.0 AS latency_s,
         CASE WHEN status_code = 'ERROR' THEN 1 ELSE 0 END AS failure
  FROM spans
  WHERE operation_name = 'invoke_agent'
),
per_trace AS (
  SELECT trace_id,
         trajectory_agg(tool_name, tool_arguments ORDER BY start_time) AS predicted_trajectory,
         sum(input_tokens)  AS input_tokens,
         sum(output_tokens) AS output_tokens,
         sum(CASE WHEN tool_name IS NOT NULL AND status_code = 'ERROR' THEN 1 ELSE 0 END)
                            AS failed_tool_calls
  FROM spans
  GROUP BY trace_id
),
scored AS (
  SELECT r.agent, r.latency_s, r.failure, t.input_tokens, t.output_tokens, t.failed_tool_calls,
         trajectory_exact_match(t.predicted_trajectory, a.reference_trajectory)     AS exact_match,
         trajectory_in_order_match(t.predicted_trajectory, a.reference_trajectory)  AS in_order_match,
         trajectory_any_order_match(t.predicted_trajectory, a.reference_trajectory) AS any_order_match,
         trajectory_precision(t.predicted_trajectory, a.reference_trajectory)       AS precision,
         trajectory_recall(t.predicted_trajectory, a.reference_trajectory)          AS recall
  FROM runs r
  JOIN per_trace t ON t.trace_id = r.trace_id
  JOIN 'data/agents.jsonl' a ON a.id = r.id AND a.agent = r.agent
)
SELECT agent,
       count(*)                                        AS runs,
       round(avg(failure), 3)                          AS failure_rate,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_s), 2)  AS latency_p50,
       round(percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_s), 2) AS latency_p95,
       round(avg(exact_match), 3)                      AS exact_match_mean,
       round(stddev(exact_match), 3)                   AS exact_match_std,
       round(avg(in_order_match), 3)                   AS in_order_mean,
       round(avg(any_order_match), 3)                  AS any_order_mean,
       round(avg(precision), 3)                        AS precision_mean,
       round(stddev(precision), 3)                     AS precision_std,
       round(avg(recall), 3)                           AS recall_mean,
       round(stddev(recall), 3)                        AS recall_std,
       sum(input_tokens)                               AS input_tokens,
       sum(output_tokens)                              AS output_tokens,
       sum(failed_tool_calls)                          AS failed_tool_calls
FROM scored
GROUP BY agent
ORDER BY agent;
