-- The ROUGE family side by side: n-gram orders, LCS, stemming, per model.
SELECT model,
       round(avg(rouge_1(response, ground_truth)), 4)                                   AS rouge_1,
       round(avg(rouge_2(response, ground_truth)), 4)                                   AS rouge_2,
       round(avg(rouge(response, ground_truth, 'rouge3')['f1_score']), 4)               AS rouge_3,
       round(avg(rouge_l(response, ground_truth)), 4)                                   AS rouge_l,
       round(avg(rouge_l_sum(response, ground_truth)), 4)                               AS rouge_l_sum,
       round(avg(rouge(response, ground_truth, 'rougeL', true)['f1_score']), 4)         AS rouge_l_stemmed
FROM 'data/qa.parquet'
GROUP BY model
ORDER BY model;
