-- An evaluation run in SQL: generate with the model under test and score in one query,
-- compare two systems with confidence intervals, a p-value and a pairwise win rate, check
-- the judge against human labels, and define a custom metric.
-- Needs a judge and a model under test (EVALSQL_TARGET_MODEL, falling back to the judge's
-- settings); see README "Evaluation runs".

-- 1. Generate answers for the questions and score them (generate in a CTE, score outside).
WITH questions AS (
    SELECT DISTINCT id, query, context, ground_truth FROM 'data/qa.jsonl' WHERE id <= 'q10'
), run AS (
    SELECT id, query, context, ground_truth,
           generate('Context: ' || context || chr(10) || 'Question: ' || query,
                    'Answer from the context in one sentence.') AS g
    FROM questions
)
SELECT count(*) AS questions,
       sum(CASE WHEN g['failure'] THEN 1 ELSE 0 END) AS failures,
       round(avg(f1_score(g['response'], ground_truth)), 3) AS f1,
       round(avg(relevance(query, g['response'])), 2) AS relevance
FROM run;

-- 2. Two models on the same questions: mean with a Student-t interval and a bootstrap
--    interval per model, and the paired bootstrap p-value of the difference.
SELECT model,
       round(m['mean'], 3) AS f1, round(m['lower'], 3) AS t_lower, round(m['upper'], 3) AS t_upper,
       round(b['lower'], 3) AS boot_lower, round(b['upper'], 3) AS boot_upper
FROM (SELECT model, mean_ci(f1_score(response, ground_truth)) AS m,
             bootstrap_ci(f1_score(response, ground_truth)) AS b
      FROM 'data/qa.jsonl' GROUP BY model)
ORDER BY model;

SELECT round(paired_bootstrap_pvalue(a.f1, b.f1), 4) AS p_value, count(*) AS pairs
FROM (SELECT id, f1_score(response, ground_truth) AS f1 FROM 'data/qa.jsonl' WHERE model = 'gpt-4o') a
JOIN (SELECT id, f1_score(response, ground_truth) AS f1 FROM 'data/qa.jsonl' WHERE model = 'llama-3.1-8b') b
  ON a.id = b.id;

-- 3. Pairwise: which model's answer does the judge prefer (both orders, bias cancelled)?
WITH pairs AS (
    SELECT a.id, a.query, a.response AS response_a, b.response AS response_b
    FROM (SELECT * FROM 'data/qa.jsonl' WHERE model = 'gpt-4o') a
    JOIN (SELECT * FROM 'data/qa.jsonl' WHERE model = 'llama-3.1-8b') b ON a.id = b.id
), judged AS (
    SELECT id, pairwise_preference(query, response_a, response_b) AS choice FROM pairs
)
SELECT round(win_rate(choice, 'A'), 3) AS gpt4o_wins, round(win_rate(choice, 'B'), 3) AS llama_wins,
       round(win_rate(choice, 'TIE'), 3) AS ties, count(choice) AS judged
FROM judged;

-- 4. Does the judge agree with people? Cohen's kappa against human similarity labels.
SELECT count(*) AS labelled, round(cohen_kappa(j.score, h.human_similarity), 3) AS kappa,
       round(pass_rate(j.score >= 3), 3) AS judge_pass_rate,
       round(pass_rate(h.human_similarity >= 3), 3) AS human_pass_rate
FROM (SELECT id, model, similarity(query, response, ground_truth) AS score FROM 'data/qa.jsonl') j
JOIN 'data/human_labels.jsonl' h ON j.id = h.id AND j.model = h.model;

-- How far can the judged mean be trusted? Prediction-powered inference: the judge's
-- scores of all 60 answers, corrected by the 20 a person also scored, beside the interval
-- the 20 human scores give alone (narrower when the judge tracks the people).
SELECT round(p['mean'], 3) AS ppi_mean, round(p['lower'], 3) AS ppi_lower,
       round(p['upper'], 3) AS ppi_upper, p['n_labeled'] AS labeled,
       p['n_unlabeled'] AS unlabeled, round(h['lower'], 3) AS human_only_lower,
       round(h['upper'], 3) AS human_only_upper
FROM (SELECT ppi_mean_ci(j.score, l.human_similarity) AS p, mean_ci(l.human_similarity) AS h
      FROM (SELECT id, model, similarity(query, response, ground_truth) AS score
            FROM 'data/qa.jsonl') j
      LEFT JOIN 'data/human_labels.jsonl' l ON j.id = l.id AND j.model = l.model);

-- 5. A custom metric in SQL (a rubric file in a --rubrics directory works the same way).
CREATE FUNCTION conciseness(response TEXT) RETURNS DOUBLE LANGUAGE judge AS
'Rate how concise the RESPONSE is. 5: every word is needed. 4: one or two unneeded words.
3: some padding or repetition. 2: much padding. 1: mostly filler.
Reply with only a JSON object: {"score": <1-5>, "reason": "<one sentence>"}.';

SELECT model, round(avg(conciseness(response)), 2) AS conciseness
FROM 'data/qa.jsonl' GROUP BY model ORDER BY model;
