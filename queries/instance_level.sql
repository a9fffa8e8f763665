-- Instance-level results: every answer of one model with its scores, worst first, so the
-- failures are the first thing a reviewer reads.
SELECT id,
       response,
       round(f1_score(response, ground_truth), 3)                          AS f1,
       round(rouge(response, ground_truth, 'rougeL')['precision'], 3)      AS rouge_l_p,
       round(rouge(response, ground_truth, 'rougeL')['recall'], 3)         AS rouge_l_r,
       round(chrf(response, ground_truth), 1)                              AS chrf
FROM 'data/qa.jsonl'
WHERE model = 'llama-3.1-8b'
ORDER BY f1, id
LIMIT 10;
