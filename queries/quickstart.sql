-- Quickstart: score two models' answers against the ground truth, per model.
-- Run: cargo run -- -f queries/quickstart.sql
SELECT model,
       count(*)                                              AS n,
       round(avg(exact_match(response, ground_truth)), 4)    AS exact_match,
       round(avg(f1_score(response, ground_truth)), 4)       AS f1,
       round(avg(bleu(response, ground_truth)), 4)           AS bleu,
       round(avg(gleu(response, ground_truth)), 4)           AS gleu,
       round(avg(meteor(response, ground_truth)), 4)         AS meteor,
       round(avg(rouge_l(response, ground_truth)), 4)        AS rouge_l,
       round(avg(chrf(response, ground_truth)), 2)           AS chrf,
       round(corpus_bleu(response, ground_truth), 2)         AS corpus_bleu
FROM 'data/qa.jsonl'
GROUP BY model
ORDER BY model;
