-- Quickstart: score two models' answers against the ground truth, per model.
-- Run: cargo run -- -f queries/quickstart.sql
SELECT model,
       count(*)                                              AS n,
       round(avg(exact_match(response, ground_truth)), 4)    AS exact_match,
       round(avg(f1_score(response, ground_truth)), 4)       AS f1,
       round(avg(rouge_l(response, ground_truth)), 4)        AS rouge_l,
       round(avg(sacrebleu(response, ground_truth)), 2)      AS sentence_bleu,
       round(corpus_bleu(response, ground_truth), 2)         AS corpus_bleu,
       round(avg(chrf(response, ground_truth)), 2)           AS chrf
FROM 'data/qa.jsonl'
GROUP BY model
ORDER BY model;
