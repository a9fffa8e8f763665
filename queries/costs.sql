-- What the judge cost. Every call's tokens (prompt, of which served from the provider's
-- prompt cache, and completion) and dollars are kept with its judgement in the judge cache,
-- so spend per metric and model is a query over judge_cache(). Dollars are NULL for a model
-- without a known price (see README: "Judge cost").

-- A small judged run first (a rerun reads the cache and costs nothing).
SELECT count(f) AS judged
FROM (SELECT fluency(response) AS f FROM 'data/qa.jsonl' WHERE id IN ('q01', 'q02', 'q03'));

-- The last seven days, per metric and model.
SELECT metric, model, count(*) AS calls,
       sum(prompt_tokens) AS prompt_tokens, sum(cached_tokens) AS cached_tokens,
       sum(completion_tokens) AS completion_tokens, round(sum(cost_usd), 4) AS cost_usd
FROM judge_cache()
WHERE CAST(created_at AS TIMESTAMP) >= now() - INTERVAL '7 days'
GROUP BY metric, model
ORDER BY cost_usd DESC NULLS LAST, metric, model;
