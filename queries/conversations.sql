-- Conversations: one row per assistant turn, with how much of the answer is found in the
-- documents the turn cites (ROUGE-1 precision against the citations, a lexical
-- groundedness proxy; the LLM-judged groundedness metric comes with the judge engine).
WITH turns AS (
  SELECT id, model, unnest(messages) AS m FROM 'data/conversations.jsonl'
), answers AS (
  SELECT id, model,
         m['content'] AS answer,
         array_to_string(array_agg(c['content']), ' ') AS cited
  FROM (SELECT id, model, m, unnest(m['context']['citations']) AS c FROM turns WHERE m['role'] = 'assistant')
  GROUP BY id, model, m['content']
)
SELECT model,
       count(*)                                                          AS turns,
       round(avg(rouge(answer, cited, 'rouge1')['precision']), 4)       AS answer_in_citations
FROM answers
GROUP BY model
ORDER BY model;
