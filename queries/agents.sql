-- Agent evaluation, as Vertex AI's agent evaluation reports it: instance level and
-- aggregate per agent, final-response metrics beside the trajectory metrics.

-- Instance level: each run's response, latency, failure and trajectory scores.
SELECT id, agent, scenario,
       latency_in_seconds                                                          AS latency_s,
       failure,
       trajectory_exact_match(predicted_trajectory, reference_trajectory)          AS exact,
       trajectory_in_order_match(predicted_trajectory, reference_trajectory)       AS in_order,
       trajectory_any_order_match(predicted_trajectory, reference_trajectory)      AS any_order,
       round(trajectory_precision(predicted_trajectory, reference_trajectory), 3)  AS precision,
       round(trajectory_recall(predicted_trajectory, reference_trajectory), 3)     AS recall,
       round(rouge_l(response, reference), 3)                                      AS response_rouge_l
FROM 'data/agents.jsonl'
WHERE scenario = 'customer-support'
ORDER BY id, agent;

-- Aggregate per agent: mean and standard deviation of every metric, failure rate and
-- latency percentiles.
WITH scored AS (
  SELECT agent, latency_in_seconds, failure,
         trajectory_exact_match(predicted_trajectory, reference_trajectory)     AS exact_match,
         trajectory_in_order_match(predicted_trajectory, reference_trajectory)  AS in_order_match,
         trajectory_any_order_match(predicted_trajectory, reference_trajectory) AS any_order_match,
         trajectory_precision(predicted_trajectory, reference_trajectory)       AS precision,
         trajectory_recall(predicted_trajectory, reference_trajectory)          AS recall,
         f1_score(response, reference)                                          AS response_f1,
         rouge_l(response, reference)                                           AS response_rouge_l
  FROM 'data/agents.jsonl'
)
SELECT agent,
       count(*)                                        AS runs,
       round(avg(failure), 3)                          AS failure_rate,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_in_seconds), 2)  AS latency_p50,
       round(percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_in_seconds), 2) AS latency_p95,
       round(avg(exact_match), 3)                      AS exact_match_mean,
       round(stddev(exact_match), 3)                   AS exact_match_std,
       round(avg(in_order_match), 3)                   AS in_order_mean,
       round(avg(any_order_match), 3)                  AS any_order_mean,
       round(avg(precision), 3)                        AS precision_mean,
       round(stddev(precision), 3)                     AS precision_std,
       round(avg(recall), 3)                           AS recall_mean,
       round(stddev(recall), 3)                        AS recall_std,
       round(avg(response_f1), 3)                      AS response_f1_mean,
       round(avg(response_rouge_l), 3)                 AS response_rouge_l_mean
FROM scored
GROUP BY agent
ORDER BY agent;
