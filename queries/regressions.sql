-- Which slices really regressed: the candidate agent (planner-v2) against the baseline
-- (react-v1) on the same tasks, paired by id, per scenario and metric: the mean
-- difference, a paired bootstrap p-value, and Benjamini-Hochberg q-values over all the
-- slices at once (test nine slices and one may look "significant" by chance; a q-value
-- below 0.05 keeps the expected share of false alarms under 5%).

WITH scored AS (
  SELECT id, agent, scenario,
         trajectory_precision(predicted_trajectory, reference_trajectory) AS precision,
         trajectory_recall(predicted_trajectory, reference_trajectory)    AS recall,
         rouge_l(response, reference)                                     AS rouge_l
  FROM 'data/agents.jsonl'
),
paired AS (
  SELECT new.scenario,
         new.precision AS new_precision, old.precision AS old_precision,
         new.recall AS new_recall, old.recall AS old_recall,
         new.rouge_l AS new_rouge_l, old.rouge_l AS old_rouge_l
  FROM scored new JOIN scored old
    ON new.id = old.id AND new.agent = 'planner-v2' AND old.agent = 'react-v1'
),
slices AS (
  SELECT scenario, 'precision' AS metric, count(*) AS n,
         avg(new_precision - old_precision) AS diff,
         paired_bootstrap_pvalue(new_precision, old_precision) AS p
  FROM paired GROUP BY scenario
  UNION ALL
  SELECT scenario, 'recall', count(*), avg(new_recall - old_recall),
         paired_bootstrap_pvalue(new_recall, old_recall)
  FROM paired GROUP BY scenario
  UNION ALL
  SELECT scenario, 'rouge_l', count(*), avg(new_rouge_l - old_rouge_l),
         paired_bootstrap_pvalue(new_rouge_l, old_rouge_l)
  FROM paired GROUP BY scenario
)
SELECT scenario, metric, n, round(diff, 3) AS diff, round(p, 4) AS p_value,
       round(fdr_bh(p) OVER (), 4) AS q_value
FROM slices
ORDER BY q_value, scenario, metric;
