-- The same dataset as JSON lines, CSV and Parquet gives the same scores.
SELECT 'jsonl' AS format, count(*) AS n, round(avg(f1_score(response, ground_truth)), 6) AS f1, round(corpus_chrf(response, ground_truth), 6) AS corpus_chrf FROM 'data/qa.jsonl'
UNION ALL
SELECT 'csv', count(*), round(avg(f1_score(response, ground_truth)), 6), round(corpus_chrf(response, ground_truth), 6) FROM 'data/qa.csv'
UNION ALL
SELECT 'parquet', count(*), round(avg(f1_score(response, ground_truth)), 6), round(corpus_chrf(response, ground_truth), 6) FROM 'data/qa.parquet'
ORDER BY format;
