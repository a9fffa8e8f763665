-- AI-assisted quality metrics: an LLM judges each row with the rubrics in udfs/rubrics/.
-- Needs a judge: OPENAI_API_KEY and EVALSQL_JUDGE_MODEL (plus OPENAI_BASE_URL for any
-- other OpenAI-compatible server, e.g. a local vLLM or llama.cpp), or Azure OpenAI with
-- AZURE_OPENAI_ENDPOINT, AZURE_OPENAI_API_KEY and AZURE_OPENAI_DEPLOYMENT.
-- Judgements are cached (EVALSQL_JUDGE_CACHE, default ~/.cache/evalsql/): a rerun is free.

SET evalsql.judge.max_concurrency = 16;

-- Per-model means and pass rates (pass = score >= 3).
SELECT model,
       round(avg(groundedness(query, context, response)), 2) AS groundedness,
       round(avg(relevance(query, response, context)), 2)    AS relevance,
       round(avg(coherence(query, response)), 2)             AS coherence,
       round(avg(fluency(response)), 2)                      AS fluency,
       round(avg(similarity(query, response, ground_truth)), 2) AS similarity,
       round(avg(CASE WHEN groundedness(query, context, response) >= 3 THEN 1.0 ELSE 0.0 END), 2)
           AS groundedness_pass_rate
FROM 'data/qa.jsonl'
GROUP BY model
ORDER BY model;

-- Instance level: the score, whether it passed, and how the call went.
SELECT id, model, g['score'] AS score, g['passed'] AS passed, g['status'] AS status
FROM (SELECT id, model, groundedness_details(query, context, response) AS g
      FROM 'data/qa.jsonl' WHERE id IN ('q01', 'q02', 'q03'))
ORDER BY id, model;

-- Conversations: every assistant turn is judged against its user turn and cited documents.
SELECT id, model, round(g['score'], 2) AS groundedness, g['per_turn'] AS per_turn
FROM (SELECT id, model, groundedness_details(messages) AS g FROM 'data/conversations.jsonl')
ORDER BY id, model;

-- What the run cost and what failed.
SELECT d['status'] AS status, count(*) AS rows,
       sum(d['prompt_tokens']) AS prompt_tokens, sum(d['completion_tokens']) AS completion_tokens
FROM (SELECT relevance_details(query, response) AS d FROM 'data/qa.jsonl')
GROUP BY 1
ORDER BY 1;
