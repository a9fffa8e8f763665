-- Several references per answer: sacrebleu, chrf and the corpus aggregates take a list.
-- Here the strong model's answer serves as a second reference for the other model.
CREATE EXTERNAL TABLE qa STORED AS PARQUET LOCATION 'data/qa.parquet';

WITH pairs AS (
  SELECT b.id, b.response, make_array(b.ground_truth, a.response) AS refs, b.ground_truth
  FROM qa b JOIN qa a ON a.id = b.id AND a.model = 'gpt-4o'
  WHERE b.model = 'llama-3.1-8b'
)
SELECT round(avg(sacrebleu(response, ground_truth)), 2) AS bleu_1ref,
       round(avg(sacrebleu(response, refs)), 2)         AS bleu_2refs,
       round(corpus_bleu(response, ground_truth), 2)    AS corpus_bleu_1ref,
       round(corpus_bleu(response, refs), 2)            AS corpus_bleu_2refs,
       round(corpus_chrf(response, refs), 2)            AS corpus_chrf_2refs
FROM pairs;
