#!/usr/bin/env python3
"""make_retrieval_golden.py -- golden reference values for the retrieval / agent-navigation metrics.

WHAT IT DOES
    Sibling of make_golden.py.  Builds seeded-random and hand-named input cases,
    runs every case through the *reference packages themselves* (never a
    re-implementation) and writes three JSON-lines files:

      <out>/retrieval_metrics.jsonl           trec_eval measures via pytrec_eval
      <out>/document_retrieval.jsonl          azure-ai-evaluation DocumentRetrievalEvaluator
      <out>/task_navigation_efficiency.jsonl  azure-ai-evaluation _TaskNavigationEfficiencyEvaluator

    Every input is serialised to JSON and parsed back *before* it is evaluated,
    so the values in a file belong to exactly the inputs written next to them.
    After writing, the script re-computes every value with the small pure-Python
    re-implementations in the "CHECKS" section (they state the semantics written
    below) and prints the maximum absolute difference; they are a check only,
    no value in the files comes from them.

REFERENCE PACKAGES (pinned; the script refuses other versions)
    Python 3.11, pytrec_eval-terrier==0.5.11 (C extension compiling trec_eval's
    own measure code: m_ndcg_cut.c, m_P.c, m_recall.c, m_success.c,
    m_recip_rank.c, m_map.c, form_res_rels.c -- read at usnistgov/trec_eval
    de6a29f, the pytrec_eval submodule commit), azure-ai-evaluation==1.18.10.
    Only the standard library besides those.

HOW TO RUN
    ~/.cache/evalsql-retrieval-venv/bin/python tests/golden/make_retrieval_golden.py
        [--out DIR]        (default: the directory holding this script)
    (venv: python3.11 -m venv V && V/bin/pip install pytrec_eval-terrier==0.5.11
     azure-ai-evaluation==1.18.10)
    The run is deterministic: fixed seeds (random.Random), no set iteration in
    the output path, JSON floats written with repr() (shortest round trip), so
    the files are byte-identical on re-run.

FILE CONVENTIONS
    * One JSON object per line, UTF-8, ensure_ascii=False.
    * Non-finite floats cannot be written as JSON numbers; as in make_golden.py
      they are written as the repr() strings "nan", "inf", "-inf" (inputs and
      outputs alike).  Only document_retrieval.jsonl contains such values; in its
      inputs such a string only appears in a "relevance_score" slot and means
      the float (the string-score error case uses "0.9", not one of these).
    * JSON int vs float is significant and preserved (Python json): 0 vs 0.0,
      1 vs 1.0.  Azure returns ints for some fields (labels, holes, counts).
    * An evaluator exception is recorded as {"error": message, "error_type":
      class name, "error_stage": "constructor" | "call"}; message is
      EvaluationException.message for the SDK's own errors, str(exc) otherwise.

=============================================================================
1. retrieval_metrics.jsonl  (pytrec_eval 0.5.11 = trec_eval C code)
=============================================================================
    Row: id, note (optional), retrieved (doc ids, rank order, no repeats), qrels
    ({doc: int grade}, never empty), k (sorted, distinct cutoffs >= 1), then per
    k in order ndcg_cut_<k>, P_<k>, recall_<k>, success_<k>, then recip_rank,
    map.  Call: RelevanceEvaluator({"q": qrels}, {"ndcg_cut.<k,..>",
    "P.<k,..>", "recall.<k,..>", "success.<k,..>", "recip_rank", "map"})
    .evaluate({"q": {doc: float(n - i)}}) -- strictly decreasing scores, so
    trec_eval's tie handling (sort by score desc, ties by docno *descending*
    strcmp in form_res_rels.c) never applies.  relevance_level = 1 (default).

    Notation: n = len(retrieved), rel_i = qrels grade of the doc at rank i
    (1-based) or "unjudged"; a doc is RELEVANT iff it is judged with grade >= 1.
    Unjudged docs and docs with a negative grade count as non-relevant, gain 0.
    R = number of qrels entries with grade >= 1 (retrieved or not).
    Cutoffs larger than n: the missing ranks are non-relevant.

    ndcg_cut_k  DCG_k  = sum_{i=1..min(k,n), rel_i > 0} rel_i / log2(i + 1)
                         (gain = the grade itself, LINEAR, not 2^g - 1;
                          summed in rank order, one IEEE add per term, the term
                          computed as (double)grade / log2((double)(i+1)))
                IDCG_k = same sum over the ideal list: all qrels grades >= 1
                         (including never-retrieved docs) sorted descending,
                         truncated to its first k entries; grades 0 and
                         negative grades are not in the ideal list.
                value  = DCG_k / IDCG_k if IDCG_k > 0 else DCG_k (= 0.0)
    P_k         = (#relevant in ranks 1..min(k,n)) / k   (denominator is k
                  even when n < k)
    recall_k    = (#relevant in ranks 1..min(k,n)) / R ; 0.0 when R == 0
    success_k   = 1.0 if some relevant doc in ranks 1..min(k,n) else 0.0
    recip_rank  = 1 / (rank of the first relevant doc), 0.0 if none retrieved
    map         = (sum over relevant retrieved docs at rank i of
                   (#relevant in ranks 1..i) / i) / R ; 0.0 if no relevant doc
                  is retrieved.  Whole list, no cutoff.  Denominator R counts
                  relevant docs that were never retrieved.
    No relevant doc at all (every grade <= 0): pytrec_eval still returns the
    query; every measure is 0.0 (row trec-edge-all-grades-zero).
    Empty run for the query ({"q": {}}): evaluated, every measure 0.0
    (row trec-edge-no-retrieved).  Query absent from the run dict ({}):
    pytrec_eval skips it and returns {} -- row trec-edge-query-absent-from-run
    has "omitted": true and no measure keys.
    Qrels with NO grade >= 0 (all negative): trec_eval's form_res_rels.c then
    leaves num_rel_levels stale from the previous query (a static) and the
    ideal-DCG loop reads rel_levels out of bounds; the DCG numerator is 0 so
    every value is still 0.0 (rows trec-edge-all-grades-negative*); random
    cases always contain at least one grade >= 0.

=============================================================================
2. document_retrieval.jsonl  (azure-ai-evaluation 1.18.10,
   _evaluators/_document_retrieval/_document_retrieval.py)
=============================================================================
    Row: id, note, retrieval_ground_truth ([{document_id, query_relevance_label}]),
    retrieved_documents ([{document_id, relevance_score}]), optional
    ground_truth_label_min / ground_truth_label_max (constructor args, defaults
    0 / 4; absent = default), then "result" = the complete dict the evaluator
    returns, or the error fields.  A missing input key means "not passed".

    Constructor: min / max must be int (bool passes, it is an int) else
      "The ground truth label minimum|maximum must be an integer value.";
      min >= max -> "...maximum must be strictly greater than the ... minimum."
    Call validation, in this order:
      * either list None / not passed -> "DocumentRetrievalEvaluator: Either
        'conversation' or individual inputs must be provided." (base class)
      * retrieval_ground_truth falsy ([]) -> "'retrieval_ground_truth' parameter
        must contain at least one item. ..."
      * each ground-truth item in order: document_id or label missing/None ->
        "Invalid input data was found in the retrieval ground truth. ...";
        label not int (1.0 fails) -> "Query relevance labels must be integer
        values."; label < min -> "A query relevance label less than ...";
        label > max -> "... greater than ...".
      * only if retrieved_documents is a list, each item: id or score
        missing/None -> "Invalid input data was found in the retrieved
        documents. ..."; score not int/float (a string) -> "Retrieved document
        relevance score must be a numerical value."  A non-list value (e.g. {})
        is silently treated as no results.
      * more than 10000 items in either list -> "... should contain no more than
        10000 items." (not in the file: a 10001-item line would be huge).
    Branches / formulas (N = len(retrieved list incl. repeats), G = len(ground
    truth list incl. repeats), k = 3):
      * N == 0: ndcg@3, xdcg@3, fidelity, top1_relevance, top3_max_relevance =
        0.0 (floats), holes = 0, holes_ratio = 0 (ints).
      * qrels = dict(id -> label) built in list order (repeated id: LAST label);
        scores = dict(id -> score) (repeated id: LAST score, kept at its FIRST
        position).  ranked = sorted(scores.items(), key=score, reverse=True):
        CPython's stable sort -- equal scores keep first-occurrence order.
        labels = [qrels.get(id, 0) for id in ranked]  (unlabeled -> 0)
        ideal  = sorted(qrels.values(), reverse=True)
        holes = #distinct retrieved ids not in qrels; holes_ratio = holes / N.
      * not any(labels) (every retrieved label 0, incl. all-unlabeled): the five
        metrics are int 0, holes / holes_ratio (float) as computed.
      * otherwise (sums are Python sum(): start at int 0, add left to right):
        ndcg@3 = D(labels[:3]) / float(D(ideal[:3])),
                 D(ls) = sum_r (math.pow(2, l_r) - 1) / math.log2(r + 1), r = 1..
                 (exponential gain; negative labels give negative gain; a zero
                 ideal sum raises ZeroDivisionError, only possible with min < 0)
        xdcg@3 = sum_r 25 * l_r * math.pow(0.6, r - 1)  (over labels[:3]) /
                 float(1.0 + 0.6 + 0.36)  (= 1.96, always 3 terms)
        fidelity = W(labels) / float(W(ideal))  over ALL retrieved / ALL qrels;
                 s = min + 1; buckets {str(i): 0 for i in s..max}; each label
                 l >= s adds 1 to bucket str(l) (KeyError if absent: only an
                 unlabeled 0 with max < 0); counts are listed in STRING-sorted
                 key order and zipped with weights math.pow(2, i+1) - 1 listed
                 in NUMERIC order i = s..max; W = sum(count * weight).  For
                 0 <= s and max <= 9 this is sum_l count(l) * (2^(l+1) - 1); with
                 max >= 10 or s <= -2 the pairing is scrambled (rows *string-order).
                 W(ideal) == 0 -> NaN (written "nan").
        top1_relevance = labels[0] (int), top3_max_relevance = max(labels[:3]).
      * For every metric m: m_result = "pass"/"fail", m_passed (bool),
        m_threshold, m_higher_is_better; pass iff value >= threshold (ndcg 0.5,
        xdcg 50.0, fidelity 0.5, top1 50.0, top3 50.0, total_retrieved 50,
        total_ground_truth 50; NaN never passes) and, for holes / holes_ratio,
        iff value <= 0.  Top level: document_retrieval = _score = float(ndcg@3),
        _passed = ndcg >= 0.5, _result, _reason None, _status "completed",
        _threshold 0.5, _properties = the metric dict above.
      * NaN scores: comparisons with NaN are false, so the order is whatever
        CPython's list.sort produces (reverse=True = reverse the list, stable
        ascending sort with '<', reverse back; for n < 64 that is count_run +
        binary insertion).  Rows dr-edge-nan-score-*.

=============================================================================
3. task_navigation_efficiency.jsonl  (azure-ai-evaluation 1.18.10,
   _evaluators/_task_navigation_efficiency/, _common/_base_eval.py,
   _common/_validators/_task_navigation_efficiency_validator.py)
=============================================================================
    Row: id, note, response (exactly as passed), ground_truth, ground_truth_type
    ("list" = passed as is -- a list, a JSON string, a dict ...; "tuple" = the
    JSON list was turned into a Python tuple, the SDK's (names, {name: {param:
    value}}) form -- JSON has no tuple, and a 2-element *list* [names, {...}] is
    rejected), matching_mode, then "result" or the error fields.
    Steps: for each message, in order, with role == "assistant" and a list
    content: each content item that is a dict with type == "tool_call" is a
    call (name = str(item["name"]).strip(); params = item["arguments"] if a
    dict, json.loads of it if a str (must parse, else "Failed to parse tool
    call arguments as JSON."; a non-object result -> {}), {} if absent or any
    other type).  Other roles, other item types, OpenAI "tool_calls" fields
    are ignored.  role == "tool" messages with a truthy tool_call_id whose
    content[0] is {"type": "tool_result", ...} are attached to the call with
    that id (KeyError 'tool_result' if that item lacks the key); they never
    change the steps.  Ground-truth names are .strip()'d too.
    List form: steps = names.  Tuple form: step = (name, tuple(sorted((key,
    norm(value)) for each param))), ground-truth params = params.get(name, {})
    (all occurrences of a name share one entry; names without an entry expect
    no arguments), norm(v) = v if str, json.dumps(v, sort_keys=True) (default
    separators ", " / ": ", ensure_ascii) if dict or list, else str(v)
    (str(1) = "1" != "1.0" = str(1.0); "1" == str(1); "True" == str(True);
    "None" == str(None)).
    precision/recall/f1 (multisets): agent steps empty -> all 0.0; else
    tp = sum_s min(countA(s), countG(s)); precision = tp / len(A);
    recall = tp / len(G); f1 = (2 * p * r) / (p + r), 0.0 if p + r == 0.
    exact_match: A == G (lists).  in_order_match: greedy scan, j = 0; for s in
    A: if j < len(G) and s == G[j]: j += 1; match iff j == len(G).
    any_order_match: countA(s) >= countG(s) for every s in G.
    Result keys: task_navigation_efficiency = _score = float(match), _result
    "pass"/"fail", _passed (bool), _reason None, _status "completed",
    _threshold 1.0, _properties {precision_score, recall_score, f1_score}.
"""

import argparse
import copy
import hashlib
import json
import logging
import math
import os
import random
import sys
from collections import Counter

PINNED = {
    "pytrec_eval-terrier": "0.5.11",
    "azure-ai-evaluation": "1.18.10",
}

# ----------------------------------------------------------------------------
# environment
# ----------------------------------------------------------------------------


def check_versions():
    from importlib.metadata import version
    bad = []
    for pkg, want in PINNED.items():
        have = version(pkg)
        if have != want:
            bad.append("%s %s (want %s)" % (pkg, have, want))
    if sys.version_info[:2] != (3, 11):
        bad.append("python %d.%d (want 3.11)" % sys.version_info[:2])
    if bad:
        raise SystemExit("reference versions differ: " + ", ".join(bad))


def enc(obj):
    """JSON-safe copy: non-finite floats -> repr() strings ("nan", "inf", "-inf")."""
    if isinstance(obj, float):
        if math.isnan(obj) or math.isinf(obj):
            return repr(obj)
        return obj
    if isinstance(obj, dict):
        return {k: enc(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [enc(v) for v in obj]
    return obj


def roundtrip(obj):
    """What a reader of the file gets back (json.dumps -> json.loads)."""
    return json.loads(json.dumps(obj, ensure_ascii=False))


def error_fields(exc, stage):
    msg = getattr(exc, "message", None)
    if not isinstance(msg, str):
        msg = str(exc)
    return {"error": msg, "error_type": type(exc).__name__, "error_stage": stage}


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


# ============================================================================
# 1. pytrec_eval
# ============================================================================

TREC_QID = "q"  # never "no_query" (trec_eval's form_res_rels cache sentinel)


def trec_eval_case(retrieved, qrels, ks, run_has_query=True):
    import pytrec_eval
    assert len(set(retrieved)) == len(retrieved), "repeated ids in retrieved"
    assert qrels, "empty qrels"
    assert ks == sorted(set(ks)) and ks[0] >= 1
    kk = ",".join(str(k) for k in ks)
    measures = {"ndcg_cut." + kk, "P." + kk, "recall." + kk, "success." + kk,
                "recip_rank", "map"}
    ev = pytrec_eval.RelevanceEvaluator({TREC_QID: dict(qrels)}, measures)
    n = len(retrieved)
    run = {TREC_QID: {d: float(n - i) for i, d in enumerate(retrieved)}} if run_has_query else {}
    res = ev.evaluate(run)
    if TREC_QID not in res:
        return None
    m = res[TREC_QID]
    out = {}
    for k in ks:
        for name in ("ndcg_cut_%d", "P_%d", "recall_%d", "success_%d"):
            out[name % k] = m[name % k]
    out["recip_rank"] = m["recip_rank"]
    out["map"] = m["map"]
    expected_keys = len(ks) * 4 + 2
    assert len(m) == expected_keys, (sorted(m), ks)
    return out


def trec_edge_cases():
    E = []

    def add(cid, note, retrieved, qrels, ks, **extra):
        d = {"id": "trec-edge-" + cid, "note": note, "retrieved": retrieved,
             "qrels": qrels, "k": ks}
        d.update(extra)
        E.append(d)

    add("single-relevant", "one retrieved doc, relevant (grade 1)", ["d1"], {"d1": 1}, [1, 3, 10])
    add("single-nonrelevant", "one retrieved doc, judged grade 0; qrels has no relevant doc",
        ["d1"], {"d1": 0}, [1, 3, 10])
    add("single-unjudged", "one retrieved doc that is not in the qrels; the only relevant doc is never retrieved",
        ["d1"], {"d2": 1}, [1, 3, 10])
    add("single-relevant-grade3", "one retrieved doc, grade 3: ndcg 1.0 whatever the grade",
        ["d1"], {"d1": 3}, [1, 5])
    add("no-retrieved", "empty run for the query ({'q': {}}): pytrec_eval evaluates the query, every measure 0.0",
        [], {"d1": 1, "d2": 2}, [1, 5, 10])
    add("query-absent-from-run", "run dict without the query ({}): pytrec_eval skips queries absent from the run "
        "and returns {} -- nothing is computed, hence omitted", [], {"d1": 1, "d2": 2}, [1, 5, 10],
        run_has_query=False)
    add("all-grades-zero", "every qrels grade is 0 (no relevant doc, R = 0): the query is returned, all 0.0 "
        "(recall 0 not NaN, ndcg 0 not NaN)", ["a", "b", "c"], {"a": 0, "b": 0, "c": 0, "x": 0}, [1, 2, 3, 10])
    add("all-grades-zero-none-retrieved", "every grade 0 and none of the judged docs retrieved",
        ["u", "v"], {"a": 0, "b": 0}, [1, 5])
    add("all-grades-negative", "qrels with only negative grades (no grade >= 0): trec_eval reads stale "
        "num_rel_levels, but DCG is 0 so all values are 0.0", ["a", "b", "c"], {"a": -1, "b": -1}, [1, 3, 5])
    add("all-grades-negative-2", "only negative grades, none retrieved", ["x", "y"], {"a": -1}, [1, 2])
    add("grade-1-at-rank-2", "ndcg gain is the grade (linear): grade 1 at rank 2 -> (1/log2 3)/1",
        ["a", "b"], {"b": 1}, [1, 2, 5])
    add("grade-2-at-rank-2", "same layout, grade 2: ndcg identical to the grade-1 case (one relevant doc)",
        ["a", "b"], {"b": 2}, [1, 2, 5])
    add("grade-3-at-rank-2", "same layout, grade 3", ["a", "b"], {"b": 3}, [1, 2, 5])
    add("grades-1-3-order-ideal", "grades 3 then 1 retrieved in ideal order -> ndcg 1", ["a", "b"], {"a": 3, "b": 1}, [1, 2, 5])
    add("grades-1-3-order-reversed", "grade 1 before grade 3: (1 + 3/log2 3)/(3 + 1/log2 3)",
        ["b", "a"], {"a": 3, "b": 1}, [1, 2, 5])
    add("grades-2-3-order-reversed", "grade 2 before grade 3", ["b", "a"], {"a": 3, "b": 2}, [1, 2, 5])
    add("grades-1-2-3-mixed", "grades 1,2,3 at ranks 1,3,5 with nonrelevant docs between",
        ["g1", "n1", "g2", "n2", "g3"], {"g1": 1, "g2": 2, "g3": 3, "n1": 0, "n2": 0}, [1, 2, 3, 4, 5, 10])
    add("ideal-includes-unretrieved", "ideal DCG uses every qrels grade >= 1, also docs never retrieved",
        ["a"], {"a": 1, "z": 3}, [1, 2, 5])
    add("negative-grade-retrieved", "a retrieved doc with grade -1 is non-relevant and adds no gain",
        ["a", "b"], {"a": -1, "b": 1}, [1, 2])
    add("negative-grades-not-in-ideal", "negative grades never enter the ideal list or R",
        ["c", "a"], {"a": 2, "b": -1, "c": -1}, [1, 2, 3])
    add("zero-grade-not-relevant", "grade 0 judged docs are non-relevant (relevance_level 1)",
        ["z1", "z2", "r"], {"z1": 0, "z2": 0, "r": 1}, [1, 2, 3])
    last = ["d%02d" % i for i in range(30)]
    add("relevant-at-last-position", "30 docs, only the last one relevant",
        last, {"d29": 1, "d00": 0}, [1, 5, 10, 29, 30, 31, 50])
    add("relevant-at-last-position-grade2", "30 docs, only the last one relevant (grade 2), one more relevant unretrieved",
        last, {"d29": 2, "x": 1}, [29, 30, 50])
    add("k1-top-relevant", "k = 1 only, top doc relevant", ["a", "b", "c"], {"a": 1, "c": 2}, [1])
    add("k1-second-relevant", "k = 1 only, first relevant doc at rank 2", ["a", "b", "c"], {"b": 2, "c": 1}, [1])
    add("k-larger-than-list", "3 docs, cutoffs 5,10,50: P_k divides by k, recall/ndcg/success as at n",
        ["a", "b", "c"], {"a": 1, "c": 1, "x": 1}, [2, 3, 5, 10, 50])
    add("map-unretrieved-relevant", "map divides by R including relevant docs never retrieved",
        ["a", "n", "b"], {"a": 1, "b": 1, "c": 1, "d": 1}, [1, 3, 10])
    add("high-grade", "grade 10 (gain 10) next to grade 1", ["b", "a"], {"a": 10, "b": 1}, [1, 2, 3])
    add("all-relevant", "every retrieved doc relevant grade 1", ["a", "b", "c", "d"],
        {"a": 1, "b": 1, "c": 1, "d": 1}, [1, 2, 4, 8])
    add("unicode-ids", "non-ASCII and numeric-string doc ids (docno order never matters without ties)",
        ["日本", "é1", "10", "9", "Z"], {"é1": 2, "9": 1, "Z": 0, "日本": -1}, [1, 2, 3, 5])
    return E


def trec_random_cases(n_cases=300, seed=20240601):
    rng = random.Random(seed)
    cases = []
    vocab_styles = [
        lambda i: "d%d" % i,
        lambda i: "doc-%03d" % i,
        lambda i: str(i),
        lambda i: "D%d" % i,
        lambda i: "p%d_é" % i,
        lambda i: "w%x" % (i * 7919),
    ]
    grade_profiles = [
        ([0, 1], [3, 1]),
        ([0, 1, 2, 3], [4, 3, 2, 1]),
        ([-1, 0, 1, 2, 3], [1, 3, 3, 2, 1]),
        ([1, 2, 3], [1, 1, 1]),
        ([0, 3], [1, 1]),
        ([-1, 0, 1], [1, 2, 2]),
    ]
    for ci in range(n_cases):
        style = rng.choice(vocab_styles)
        r = rng.random()
        if r < 0.04:
            n = 0
        elif r < 0.25:
            n = rng.randint(1, 3)
        else:
            n = rng.randint(1, 30)
        vsize = n + rng.randint(0 if n else 1, 15)
        vocab = [style(i) for i in range(vsize)]
        rng.shuffle(vocab)
        retrieved = vocab[:n]
        grades, weights = rng.choice(grade_profiles)
        # qrels: a random subset of the vocabulary (retrieved and not retrieved docs)
        p_judged = rng.choice([0.2, 0.5, 0.8, 1.0])
        qrels = {}
        for d in vocab:
            if rng.random() < p_judged:
                qrels[d] = rng.choices(grades, weights)[0]
        if not qrels:
            qrels[rng.choice(vocab)] = rng.choices(grades, weights)[0]
        if all(g < 0 for g in qrels.values()):
            qrels[next(iter(qrels))] = 0
        # sorted qrels keys so the dict text does not depend on shuffle internals
        qrels = {d: qrels[d] for d in sorted(qrels)}
        nk = rng.randint(1, 6)
        ks = set(rng.sample(range(1, 51), nk))
        if rng.random() < 0.5:
            ks.add(rng.choice([1, 3, 5, 10]))
        if n and rng.random() < 0.3:
            ks.add(n)
        if rng.random() < 0.3:
            ks.add(min(50, n + rng.randint(1, 20)))
        ks = sorted(ks)
        cases.append({"id": "trec-rand-%03d" % ci, "retrieved": retrieved, "qrels": qrels, "k": ks})
    return cases


def build_trec_rows():
    rows = []
    for c in trec_edge_cases() + trec_random_cases():
        c = roundtrip(c)
        run_has_query = c.pop("run_has_query", True)
        vals = trec_eval_case(c["retrieved"], c["qrels"], c["k"], run_has_query)
        row = {"id": c["id"]}
        if "note" in c:
            row["note"] = c["note"]
        row.update({"retrieved": c["retrieved"], "qrels": c["qrels"], "k": c["k"]})
        if vals is None:
            row["omitted"] = True
        else:
            row.update(vals)
        rows.append(row)
    return rows


# ============================================================================
# 2. DocumentRetrievalEvaluator
# ============================================================================

def dr_run(case):
    from azure.ai.evaluation import DocumentRetrievalEvaluator
    kwargs = {}
    for key in ("ground_truth_label_min", "ground_truth_label_max"):
        if key in case:
            kwargs[key] = case[key]
    try:
        ev = DocumentRetrievalEvaluator(**kwargs)
    except Exception as e:  # noqa: BLE001 - record whatever the reference raises
        return error_fields(e, "constructor")
    call = {}
    for key in ("retrieval_ground_truth", "retrieved_documents"):
        if key in case:
            call[key] = copy.deepcopy(case[key])
    try:
        return {"result": ev(**call)}
    except Exception as e:  # noqa: BLE001
        return error_fields(e, "call")


def dr_decode(case):
    """Turn the "nan"/"inf"/"-inf" strings of relevance_score slots back into floats."""
    c = copy.deepcopy(case)
    docs = c.get("retrieved_documents")
    if isinstance(docs, list):
        for d in docs:
            if isinstance(d, dict) and d.get("relevance_score") in ("nan", "inf", "-inf"):
                d["relevance_score"] = float(d["relevance_score"])
    return c


def qr(pairs):
    return [{"document_id": d, "query_relevance_label": l} for d, l in pairs]


def rd(pairs):
    return [{"document_id": d, "relevance_score": s} for d, s in pairs]


def dr_edge_cases():
    E = []

    def add(cid, note, gt, docs, lo=None, hi=None, omit=()):
        d = {"id": "dr-edge-" + cid, "note": note}
        if "gt" not in omit:
            d["retrieval_ground_truth"] = gt
        if "docs" not in omit:
            d["retrieved_documents"] = docs
        if lo is not None:
            d["ground_truth_label_min"] = lo
        if hi is not None:
            d["ground_truth_label_max"] = hi
        E.append(d)

    base_gt = qr([("a", 4), ("b", 3), ("c", 2), ("d", 1), ("e", 0)])
    add("no-retrieved", "retrieved_documents = []: early branch, float 0.0 metrics, holes 0, holes_ratio int 0",
        base_gt, [])
    add("retrieved-not-a-list", "retrieved_documents = {} (not a list, not None): treated as no results",
        base_gt, {})
    add("retrieved-missing", "retrieved_documents not passed (None): base class rejects the call", base_gt, None,
        omit=("docs",))
    add("ground-truth-missing", "retrieval_ground_truth not passed", None, rd([("a", 1.0)]), omit=("gt",))
    add("no-labeled-documents", "retrieval_ground_truth = [] -> error (checked before anything else)",
        [], rd([("a", 1.0)]))
    add("no-labeled-no-retrieved", "both lists empty -> the empty-ground-truth error wins", [], [])
    add("all-unlabeled-holes", "every retrieved doc unlabeled: 'holes only' branch, int 0 metrics",
        base_gt, rd([("x", 0.9), ("y", 0.8), ("z", 0.7)]))
    add("all-labeled-zero", "retrieved docs all labeled 0: same branch as holes (not any(labels)), holes 0",
        qr([("a", 0), ("b", 0), ("c", 3)]), rd([("a", 0.9), ("b", 0.5)]))
    add("mixed-holes", "labeled and unlabeled docs interleaved", base_gt,
        rd([("x", 0.95), ("b", 0.9), ("y", 0.5), ("a", 0.4), ("e", 0.3)]))
    add("perfect-ranking", "ideal order, 5 docs", base_gt,
        rd([("a", 5.0), ("b", 4.0), ("c", 3.0), ("d", 2.0), ("e", 1.0)]))
    add("reversed-ranking", "worst order: scores ascend with label", base_gt,
        rd([("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0), ("e", 5.0)]))
    add("input-order-ignored", "list order differs from score order: ranking is by relevance_score",
        base_gt, rd([("e", 0.1), ("d", 0.2), ("a", 0.9), ("c", 0.3), ("b", 0.8)]))
    add("one-doc", "fewer than 3 docs (1): xdcg denominator still 1+0.6+0.36", base_gt, rd([("b", 1.0)]))
    add("two-docs", "fewer than 3 docs (2)", base_gt, rd([("c", 1.0), ("a", 0.5)]))
    add("ten-docs", "more than 3 docs: ndcg/xdcg/top3 use the first 3, fidelity all",
        qr([("d%d" % i, i % 5) for i in range(10)]),
        rd([("d%d" % i, 1.0 - i / 20.0) for i in range(10)]))
    add("single-qrel", "only one ground-truth doc", qr([("a", 2)]), rd([("a", 0.3), ("b", 0.2)]))
    add("ties-first-occurrence", "equal relevance_score: stable sort keeps input order (b before a)",
        qr([("a", 4), ("b", 0)]), rd([("b", 0.5), ("a", 0.5)]))
    add("ties-first-occurrence-swapped", "same scores, input order swapped (a before b)",
        qr([("a", 4), ("b", 0)]), rd([("a", 0.5), ("b", 0.5)]))
    add("ties-three-way", "three-way tie after a higher score",
        base_gt, rd([("e", 0.5), ("a", 0.9), ("d", 0.5), ("c", 0.5)]))
    add("int-scores", "integer relevance_score values (ints accepted)",
        base_gt, rd([("c", 3), ("a", 2), ("x", 1)]))
    add("negative-scores", "negative scores sort below positive", base_gt,
        rd([("a", -1.5), ("b", 0.0), ("c", -0.25)]))
    add("inf-scores", "+inf and -inf scores", base_gt,
        rd([("d", float("inf")), ("a", 1.0), ("b", float("-inf"))]))
    add("nan-score-first", "NaN score in first position: every comparison with NaN is false, so CPython's "
        "sort leaves it where the stable algorithm puts it", base_gt,
        rd([("e", float("nan")), ("a", 0.9), ("b", 0.8)]))
    add("nan-score-middle", "NaN score between two ordered scores", base_gt,
        rd([("d", 0.2), ("e", float("nan")), ("a", 0.9)]))
    add("duplicate-retrieved-same-score", "same doc twice: counted twice in total_retrieved_documents and "
        "holes_ratio's denominator, once in the ranking", base_gt, rd([("a", 0.9), ("a", 0.9), ("b", 0.5)]))
    add("duplicate-retrieved-last-score-wins", "doc repeated with a different score: last score, first position",
        base_gt, rd([("e", 0.9), ("a", 0.5), ("e", 0.1)]))
    add("duplicate-retrieved-unlabeled", "unlabeled doc repeated: holes counts distinct ids",
        base_gt, rd([("x", 0.9), ("x", 0.8), ("a", 0.5)]))
    add("duplicate-qrels-last-label-wins", "ground-truth id repeated: last label used, both counted in "
        "total_ground_truth_documents", qr([("a", 1), ("b", 2), ("a", 4)]), rd([("a", 0.9), ("b", 0.5)]))
    add("labels-at-max", "all labels at max (4)", qr([("a", 4), ("b", 4), ("c", 4)]),
        rd([("a", 0.9), ("b", 0.5), ("x", 0.4)]))
    add("labels-at-min-and-max", "labels 0 and 4 only", qr([("a", 0), ("b", 4)]),
        rd([("a", 0.9), ("b", 0.5)]))
    add("label-below-min", "label -1 with default range 0..4 -> error", qr([("a", -1)]), rd([("a", 1.0)]))
    add("label-above-max", "label 5 with default range 0..4 -> error", qr([("a", 5)]), rd([("a", 1.0)]))
    add("label-float", "label 1.0 (float) -> 'must be integer' error", qr([("a", 1.0)]), rd([("a", 1.0)]))
    add("label-missing", "ground-truth item without query_relevance_label",
        [{"document_id": "a"}], rd([("a", 1.0)]))
    add("qrel-id-missing", "ground-truth item without document_id",
        [{"query_relevance_label": 1}], rd([("a", 1.0)]))
    add("score-string", "relevance_score '0.9' (string) -> error", qr([("a", 1)]),
        [{"document_id": "a", "relevance_score": "0.9"}])
    add("score-missing", "retrieved item without relevance_score", qr([("a", 1)]), [{"document_id": "a"}])
    add("score-null", "relevance_score null counts as missing", qr([("a", 1)]),
        [{"document_id": "a", "relevance_score": None}])
    add("range-0-2", "custom label range 0..2", qr([("a", 2), ("b", 1), ("c", 0)]),
        rd([("b", 0.9), ("a", 0.8), ("c", 0.7)]), 0, 2)
    add("range-0-2-out-of-range", "label 3 with range 0..2 -> error", qr([("a", 3)]), rd([("a", 1.0)]), 0, 2)
    add("range-0-1", "binary labels 0..1", qr([("a", 1), ("b", 0), ("c", 1)]),
        rd([("b", 0.9), ("a", 0.8), ("x", 0.7), ("c", 0.6)]), 0, 1)
    add("range-1-5", "custom range 1..5: label 1 is 'irrelevant' for fidelity but has ndcg gain 1; "
        "unlabeled docs get 0 (below min)", qr([("a", 5), ("b", 3), ("c", 1)]),
        rd([("c", 0.9), ("x", 0.8), ("a", 0.7)]), 1, 5)
    add("range-1-5-fidelity-nan", "range 1..5, all qrels label 1: fidelity weight sum of the ground truth is 0 -> NaN",
        qr([("a", 1), ("b", 1)]), rd([("a", 0.9), ("b", 0.8)]), 1, 5)
    add("range-1-5-unlabeled-only", "range 1..5, only unlabeled docs retrieved", qr([("a", 5)]),
        rd([("x", 0.9)]), 1, 5)
    add("range-2-4", "range 2..4", qr([("a", 4), ("b", 2), ("c", 3)]), rd([("b", 0.9), ("c", 0.8)]), 2, 4)
    add("range-neg1-2-negative-ndcg", "range -1..2: negative label gain 2^-1-1 = -0.5, idcg < 0 gives ndcg > 1",
        qr([("a", 0), ("b", -1)]), rd([("b", 1.0)]), -1, 2)
    add("range-neg1-2-zero-idcg", "range -1..2, top-3 ideal labels all 0 and a retrieved -1: idcg == 0 -> "
        "ZeroDivisionError", qr([("a", 0), ("c", 0), ("d", 0), ("b", -1)]), rd([("b", 1.0)]), -1, 2)
    add("range-neg1-2-mixed", "range -1..2 mixed labels", qr([("a", 2), ("b", -1), ("c", 1), ("d", 0)]),
        rd([("b", 0.9), ("a", 0.8), ("x", 0.7), ("c", 0.1)]), -1, 2)
    add("range-neg3-neg1-keyerror", "range -3..-1: an unlabeled retrieved doc gets label 0 >= min+1 but 0 is "
        "not a fidelity bucket -> KeyError '0'", qr([("a", -1), ("b", -3)]), rd([("a", 0.9), ("x", 0.5)]), -3, -1)
    add("range-neg3-neg1-string-order", "range -3..-1, all retrieved labeled: fidelity pairs counts and weights "
        "after sorting keys as strings ('-1' < '-2')", qr([("a", -1), ("b", -2), ("c", -3), ("d", -2)]),
        rd([("a", 0.9), ("b", 0.5)]), -3, -1)
    add("range-0-10-string-order", "range 0..10: fidelity bucket keys sort as strings ('1','10','2',...), "
        "so label 10's count is multiplied by label 2's weight", qr([("a", 10), ("b", 2), ("c", 1), ("d", 9)]),
        rd([("a", 0.9), ("c", 0.5)]), 0, 10)
    add("range-0-12-string-order", "range 0..12 with labels 2, 11, 12", qr([("a", 12), ("b", 11), ("c", 2)]),
        rd([("c", 0.9), ("a", 0.8), ("x", 0.7)]), 0, 12)
    add("range-0-30-large-gain", "range 0..30: gain 2^30-1", qr([("a", 30), ("b", 1)]),
        rd([("b", 0.9), ("a", 0.8)]), 0, 30)
    add("ctor-min-equals-max", "ground_truth_label_min == max -> constructor error", qr([("a", 1)]),
        rd([("a", 1.0)]), 3, 3)
    add("ctor-min-greater-max", "min > max -> constructor error", qr([("a", 1)]), rd([("a", 1.0)]), 5, 1)
    add("ctor-min-float", "min 0.5 (not int) -> constructor error", qr([("a", 1)]), rd([("a", 1.0)]), 0.5, 4)
    add("ctor-max-float", "max 4.0 (not int) -> constructor error", qr([("a", 1)]), rd([("a", 1.0)]), 0, 4.0)
    add("empty-string-id", "empty-string document ids are ordinary ids", qr([("", 3), ("a", 1)]),
        rd([("", 0.9), ("a", 0.1)]))
    return E


def dr_random_cases(n_cases=200, seed=20240602):
    rng = random.Random(seed)
    ranges = [(0, 4)] * 10 + [(0, 2), (0, 2), (1, 5), (1, 5), (0, 1), (2, 4), (-1, 2), (0, 10), (0, 3)]
    cases = []
    for ci in range(n_cases):
        lo, hi = rng.choice(ranges)
        nq = rng.randint(1, 12)
        ids = ["doc%d" % i for i in range(nq + rng.randint(0, 8))]
        rng.shuffle(ids)
        qpairs = [(ids[i], rng.randint(lo, hi)) for i in range(nq)]
        if rng.random() < 0.05:  # repeated ground-truth id
            qpairs.append((qpairs[0][0], rng.randint(lo, hi)))
        nr = rng.choice([0] + list(range(1, 13))) if rng.random() < 0.97 else 0
        pool = ids + ["extra%d" % i for i in range(4)]
        rids = rng.sample(pool, min(nr, len(pool)))
        mode = rng.choice(["distinct", "ties", "ints", "distinct"])
        rpairs = []
        for j, d in enumerate(rids):
            if mode == "distinct":
                s = round(rng.uniform(-1.0, 2.0), 6)
            elif mode == "ties":
                s = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0])
            else:
                s = rng.randint(0, 5)
            rpairs.append((d, s))
        if rpairs and rng.random() < 0.05:  # repeated retrieved id
            d, _ = rng.choice(rpairs)
            rpairs.insert(rng.randint(0, len(rpairs)), (d, round(rng.uniform(0, 1), 3)))
        c = {"id": "dr-rand-%03d" % ci, "note": "seeded random (range %d..%d, scores %s)" % (lo, hi, mode),
             "retrieval_ground_truth": qr(qpairs), "retrieved_documents": rd(rpairs)}
        if (lo, hi) != (0, 4):
            c["ground_truth_label_min"] = lo
            c["ground_truth_label_max"] = hi
        cases.append(c)
    return cases


def build_dr_rows():
    rows = []
    for c in dr_edge_cases() + dr_random_cases():
        stored = roundtrip(enc(c))
        out = dr_run(dr_decode(stored))
        row = dict(stored)
        row.update(enc(out))
        rows.append(row)
    return rows


# ============================================================================
# 3. _TaskNavigationEfficiencyEvaluator
# ============================================================================

MODES = ["exact_match", "in_order_match", "any_order_match"]


def tne_run(case):
    from azure.ai.evaluation._evaluators._task_navigation_efficiency import _TaskNavigationEfficiencyEvaluator
    try:
        ev = _TaskNavigationEfficiencyEvaluator(matching_mode=case["matching_mode"])
    except Exception as e:  # noqa: BLE001
        return error_fields(e, "constructor")
    call = {}
    if "response" in case:
        call["response"] = copy.deepcopy(case["response"])
    if "ground_truth" in case:
        gt = copy.deepcopy(case["ground_truth"])
        if case.get("ground_truth_type") == "tuple":
            gt = tuple(gt)
        call["ground_truth"] = gt
    try:
        return {"result": ev(**call)}
    except Exception as e:  # noqa: BLE001
        return error_fields(e, "call")


def tc(cid, name, args=None, **extra):
    item = {"type": "tool_call", "tool_call_id": cid, "name": name}
    if args is not None:
        item["arguments"] = args
    item.update(extra)
    return item


def asst(*items):
    return {"role": "assistant", "content": list(items)}


def tool_msg(cid, result):
    return {"role": "tool", "tool_call_id": cid, "content": [{"type": "tool_result", "tool_result": result}]}


def user(text):
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def text_item(t):
    return {"type": "text", "text": t}


def tne_edge_cases():
    E = []

    def add(cid, note, response, gt, mode="exact_match", gtype="list", omit=()):
        d = {"id": "tne-edge-" + cid, "note": note}
        if "response" not in omit:
            d["response"] = response
        if "ground_truth" not in omit:
            d["ground_truth"] = gt
            d["ground_truth_type"] = gtype
        d["matching_mode"] = mode
        E.append(d)

    def add3(cid, note, response, gt, gtype="list"):
        for m in MODES:
            add(cid + "-" + m.split("_")[0], note, response, gt, m, gtype)

    seq = [asst(tc("c1", "search", {"q": "x"})), asst(tc("c2", "fetch", {"url": "u"})),
           asst(tc("c3", "summarize", {}))]
    add3("identical", "agent calls equal the ground truth", seq, ["search", "fetch", "summarize"])
    add3("no-tool-calls", "assistant only writes text: no steps -> precision/recall/f1 0.0, every mode fails",
         [user("hi"), asst(text_item("hello"))], ["search"])
    add3("empty-response", "response = [] (no messages)", [], ["search"])
    add3("extra-step", "one extra call in the middle", [asst(tc("c1", "search")), asst(tc("c2", "calc")),
                                                          asst(tc("c3", "fetch"))], ["search", "fetch"])
    add3("swapped-order", "same calls, two swapped", [asst(tc("c1", "fetch")), asst(tc("c2", "search"))],
         ["search", "fetch"])
    add3("missing-step", "one ground-truth step never called", [asst(tc("c1", "search"))], ["search", "fetch"])
    add3("repeated-names-enough", "ground truth repeats a name; agent repeats it as often",
         [asst(tc("c1", "search"), tc("c2", "search"), tc("c3", "fetch"))], ["search", "search", "fetch"])
    add3("repeated-names-too-few", "ground truth needs search twice, agent calls it once",
         [asst(tc("c1", "search"), tc("c2", "fetch"))], ["search", "search", "fetch"])
    add3("repeated-names-too-many", "agent calls search three times, ground truth once",
         [asst(tc("c1", "search"), tc("c2", "search"), tc("c3", "search"), tc("c4", "fetch"))],
         ["search", "fetch"])
    add3("in-order-greedy", "greedy subsequence: gt [a,b,a] in agent [a,a,b,b,a]",
         [asst(tc("1", "a"), tc("2", "a"), tc("3", "b"), tc("4", "b"), tc("5", "a"))], ["a", "b", "a"])
    add3("in-order-fail-late", "gt [a,b,a] vs agent [b,a,a,b]: subsequence a,b found, second a missing",
         [asst(tc("1", "b"), tc("2", "a"), tc("3", "a"), tc("4", "b"))], ["a", "b", "a"])
    add3("spread-over-messages", "tool calls split over several assistant messages with text items, user "
         "messages and tool results in between",
         [user("plan a trip"), asst(text_item("let me look"), tc("c1", "search", {"q": "flights"})),
          tool_msg("c1", {"n": 3}), asst(tc("c2", "book", {"id": 7}), tc("c3", "email", {"to": "me"})),
          tool_msg("c2", "ok"), tool_msg("c3", "sent"), asst(text_item("done"))],
         ["search", "book", "email"])
    add3("non-assistant-tool-calls-ignored", "tool_call items inside user/system/tool messages are not steps",
         [{"role": "user", "content": [tc("u1", "search")]}, {"role": "system", "content": [tc("s1", "fetch")]},
          {"role": "tool", "content": [tc("t1", "calc")]}, asst(tc("c1", "search"))], ["search"])
    add3("openai-style-ignored", "OpenAI-style 'tool_calls' field and 'function_call' items are not recognised",
         [{"role": "assistant", "content": [], "tool_calls": [{"id": "x", "type": "function",
                                                                "function": {"name": "search", "arguments": "{}"}}]},
          asst({"type": "function_call", "name": "search", "arguments": "{}"})], ["search"])
    add3("name-whitespace-stripped", "names are str(...).strip()'d on both sides",
         [asst(tc("c1", "  search "), tc("c2", "fetch\n"))], [" search", "fetch "])
    add3("name-case-sensitive", "names compare case-sensitively", [asst(tc("c1", "Search"))], ["search"])
    add3("name-non-string", "a numeric tool name becomes str(7) = '7'", [asst(tc("c1", 7))], ["7"])
    add("tool-result-present", "tool result messages attached to calls do not change the steps",
        [asst(tc("c1", "search", {"q": "a"})), tool_msg("c1", {"hits": [1, 2]}),
         asst(tc("c2", "fetch", {"u": 1})), tool_msg("c2", "page")], ["search", "fetch"], "exact_match")
    add("tool-result-without-payload", "a tool message whose first content item is type tool_result but "
        "lacks the 'tool_result' key, matching a call id -> KeyError",
        [asst(tc("c1", "search")), {"role": "tool", "tool_call_id": "c1", "content": [{"type": "tool_result"}]}],
        ["search"], "exact_match")
    add("tool-result-unmatched-id", "tool result for an unknown call id is ignored",
        [asst(tc("c1", "search")), tool_msg("zz", "x")], ["search"], "exact_match")
    add("tool-message-text-content", "tool message with a string content is ignored",
        [asst(tc("c1", "search")), {"role": "tool", "tool_call_id": "c1", "content": "raw"}], ["search"],
        "exact_match")
    # ---- parameter matching (tuple ground truth)
    P = "tuple"
    add3("params-match", "tuple ground truth, identical parameters",
         [asst(tc("c1", "search", {"query": "weather", "location": "NYC"})),
          asst(tc("c2", "format_result", {"format": "json"}))],
         [["search", "format_result"], {"search": {"query": "weather", "location": "NYC"},
                                        "format_result": {"format": "json"}}], P)
    add3("params-mismatch-value", "one parameter value differs",
         [asst(tc("c1", "search", {"query": "weather", "location": "LA"})),
          asst(tc("c2", "format_result", {"format": "json"}))],
         [["search", "format_result"], {"search": {"query": "weather", "location": "NYC"},
                                        "format_result": {"format": "json"}}], P)
    add3("params-key-order", "top-level key order does not matter (pairs are sorted)",
         [asst(tc("c1", "search", {"b": 2, "a": 1}))], [["search"], {"search": {"a": 1, "b": 2}}], P)
    add3("params-nested-key-order", "nested dict key order does not matter (json.dumps sort_keys=True)",
         [asst(tc("c1", "f", {"opt": {"y": [1, {"q": 1, "p": 2}], "x": True}}))],
         [["f"], {"f": {"opt": {"x": True, "y": [1, {"p": 2, "q": 1}]}}}], P)
    add3("params-nested-mismatch", "nested list order matters",
         [asst(tc("c1", "f", {"ids": [2, 1]}))], [["f"], {"f": {"ids": [1, 2]}}], P)
    add3("params-int-vs-float", "1 vs 1.0: str(1) = '1' != str(1.0) = '1.0' -> mismatch",
         [asst(tc("c1", "f", {"n": 1}))], [["f"], {"f": {"n": 1.0}}], P)
    add3("params-int-vs-float-nested", "nested 1 vs 1.0: json.dumps gives '1' vs '1.0' -> mismatch",
         [asst(tc("c1", "f", {"n": [1]}))], [["f"], {"f": {"n": [1.0]}}], P)
    add3("params-int-vs-string", "1 vs '1': both normalise to the string '1' -> match",
         [asst(tc("c1", "f", {"n": 1}))], [["f"], {"f": {"n": "1"}}], P)
    add3("params-bool-vs-string", "True vs 'True' match (str(True)); true vs 'true' do not",
         [asst(tc("c1", "f", {"a": True, "b": True}))], [["f"], {"f": {"a": "True", "b": "true"}}], P)
    add3("params-bool-vs-int", "True vs 1: 'True' != '1' -> mismatch", [asst(tc("c1", "f", {"a": True}))],
         [["f"], {"f": {"a": 1}}], P)
    add3("params-null-vs-string", "None vs 'None' match (str(None))", [asst(tc("c1", "f", {"a": None}))],
         [["f"], {"f": {"a": "None"}}], P)
    add3("params-list-vs-json-string", "list [1, 2] vs the string '[1, 2]' match (json.dumps default separators)",
         [asst(tc("c1", "f", {"a": [1, 2]}))], [["f"], {"f": {"a": "[1, 2]"}}], P)
    add3("params-list-vs-compact-string", "list [1, 2] vs '[1,2]' do not match",
         [asst(tc("c1", "f", {"a": [1, 2]}))], [["f"], {"f": {"a": "[1,2]"}}], P)
    add3("params-dict-vs-json-string", "dict vs its sort_keys json.dumps string match",
         [asst(tc("c1", "f", {"a": {"y": 1, "x": "é"}}))], [["f"], {"f": {"a": "{\"x\": \"\\u00e9\", \"y\": 1}"}}], P)
    add3("params-extra-arg", "agent passes an extra argument -> mismatch",
         [asst(tc("c1", "f", {"a": 1, "b": 2}))], [["f"], {"f": {"a": 1}}], P)
    add3("params-missing-arg", "agent omits an argument -> mismatch",
         [asst(tc("c1", "f", {"a": 1}))], [["f"], {"f": {"a": 1, "b": 2}}], P)
    add3("params-tool-without-entry", "a ground-truth name without a params entry expects empty arguments",
         [asst(tc("c1", "f", {"a": 1}), tc("c2", "g", {}))], [["f", "g"], {"f": {"a": 1}}], P)
    add3("params-tool-without-entry-args", "... so an agent call of g with arguments does not match",
         [asst(tc("c1", "f", {"a": 1}), tc("c2", "g", {"z": 0}))], [["f", "g"], {"f": {"a": 1}}], P)
    add3("params-no-arguments-key", "tool call without 'arguments' = empty parameters",
         [asst(tc("c1", "f"))], [["f"], {"f": {}}], P)
    add3("params-arguments-json-string", "arguments given as a JSON object string are parsed",
         [asst(tc("c1", "f", "{\"b\": [1, 2], \"a\": \"x\"}"))], [["f"], {"f": {"a": "x", "b": [1, 2]}}], P)
    add3("params-arguments-json-list-string", "arguments string parsing to a non-object -> empty parameters",
         [asst(tc("c1", "f", "[1, 2]"))], [["f"], {"f": {}}], P)
    add3("params-arguments-non-dict", "arguments of another type (list) -> empty parameters",
         [asst(tc("c1", "f", [1, 2]))], [["f"], {"f": {}}], P)
    add("params-arguments-bad-json", "arguments string that is not JSON -> error",
        [asst(tc("c1", "f", "{not json"))], [["f"], {"f": {}}], "exact_match", P)
    add3("params-same-name-different-args", "repeated name: all occurrences share the one params entry",
         [asst(tc("c1", "f", {"a": 1}), tc("c2", "f", {"a": 2}))], [["f", "f"], {"f": {"a": 1}}], P)
    add3("params-unused-entry", "params entry for a name not in the list is ignored",
         [asst(tc("c1", "f", {}))], [["f"], {"zzz": {"a": 1}}], P)
    add3("params-float-repr", "floats normalise with repr: 0.1+0.2 style values",
         [asst(tc("c1", "f", {"x": 0.30000000000000004, "y": 1e16}))],
         [["f"], {"f": {"x": "0.30000000000000004", "y": "1e+16"}}], P)
    add3("params-unicode", "top-level strings compare raw; nested strings go through json.dumps ensure_ascii",
         [asst(tc("c1", "f", {"city": "Zürich", "tags": ["ü"]}))], [["f"], {"f": {"city": "Zürich", "tags": ["ü"]}}], P)
    add3("params-names-only-in-list-form", "list ground truth ignores arguments entirely",
         [asst(tc("c1", "f", {"a": 1}))], ["f"])
    # ---- input forms and validation
    add("response-json-string", "response given as a JSON string is parsed",
        json.dumps([asst(tc("c1", "search"))]), ["search"], "exact_match")
    add("ground-truth-json-string", "ground_truth given as a JSON string of a list is parsed",
        [asst(tc("c1", "search"))], json.dumps(["search"]), "exact_match")
    add("ground-truth-list-of-list-and-dict", "the tuple form written as a 2-element LIST is rejected",
        [asst(tc("c1", "f", {"a": 1}))], [["f"], {"f": {"a": 1}}], "exact_match", "list")
    add("ground-truth-empty", "ground_truth = [] -> error", [asst(tc("c1", "f"))], [], "exact_match")
    add("ground-truth-missing", "ground_truth not passed -> error", [asst(tc("c1", "f"))], None, "exact_match",
        omit=("ground_truth",))
    add("ground-truth-non-string", "ground_truth list with a non-string element -> error",
        [asst(tc("c1", "f"))], ["f", 3], "exact_match")
    add("ground-truth-dict", "ground_truth as a dict -> error", [asst(tc("c1", "f"))], {"f": {}}, "exact_match")
    add("ground-truth-tuple-empty-names", "tuple with an empty name list -> error",
        [asst(tc("c1", "f"))], [[], {}], "exact_match", P)
    add("ground-truth-tuple-3", "tuple of 3 elements -> error", [asst(tc("c1", "f"))], [["f"], {}, {}],
        "exact_match", P)
    add("ground-truth-tuple-names-not-list", "tuple whose first element is a string -> error",
        [asst(tc("c1", "f"))], ["f", {}], "exact_match", P)
    add("ground-truth-tuple-name-not-string", "tuple name list with a number -> error",
        [asst(tc("c1", "f"))], [["f", 1], {}], "exact_match", P)
    add("ground-truth-tuple-params-not-dict", "tuple second element a list -> error",
        [asst(tc("c1", "f"))], [["f"], []], "exact_match", P)
    add("ground-truth-tuple-params-value-not-dict", "params for a tool given as a list -> error",
        [asst(tc("c1", "f"))], [["f"], {"f": [1]}], "exact_match", P)
    add("response-missing", "response not passed -> error", None, ["f"], "exact_match", omit=("response",))
    add("response-not-list", "response is a dict -> error", {"role": "assistant", "content": []}, ["f"],
        "exact_match")
    add("response-bad-json-string", "response string that is not JSON stays a string -> error",
        "not json", ["f"], "exact_match")
    add("message-not-dict", "a message that is a string -> error", ["hello"], ["f"], "exact_match")
    add("message-without-role", "a message without role -> error", [{"content": []}], ["f"], "exact_match")
    add("message-role-not-string", "role must be a string", [{"role": 1, "content": []}], ["f"], "exact_match")
    add("assistant-without-content", "assistant message without content -> error", [{"role": "assistant"}],
        ["f"], "exact_match")
    add("assistant-string-content", "assistant message with string content -> error (content must be a list)",
        [{"role": "assistant", "content": "I will call f"}], ["f"], "exact_match")
    add("assistant-content-item-not-dict", "content item that is a string -> error",
        [{"role": "assistant", "content": ["f"]}], ["f"], "exact_match")
    add("tool-call-without-name", "tool_call item without name -> error",
        [asst({"type": "tool_call", "tool_call_id": "c1", "arguments": {}})], ["f"], "exact_match")
    add("user-string-content-ok", "non-assistant messages are not content-validated",
        [{"role": "user", "content": "plain text"}, {"role": "tool", "content": None}, asst(tc("c1", "f"))],
        ["f"], "exact_match")
    add("bad-matching-mode", "unknown matching_mode -> constructor error", [asst(tc("c1", "f"))], ["f"], "bogus")
    return E


NAMES = ["search", "fetch_url", "summarize", "calc", "send_email", "lookup_user", "format_result", "book"]
VALUES = ["weather", "NYC", "", "x y", 0, 1, 2, 1.0, 2.5, -3, True, False, None, "1", "True",
          [1, 2], ["a"], {"k": 1}, {"b": [1, {"c": None}], "a": "z"}, "Zürich"]
KEYS = ["q", "query", "location", "n", "limit", "opts", "to", "id"]


def rand_params(rng):
    keys = rng.sample(KEYS, rng.randint(0, 3))
    return {k: copy.deepcopy(rng.choice(VALUES)) for k in keys}


def perturb_params(rng, params):
    p = copy.deepcopy(params)
    r = rng.random()
    if r < 0.45 or not p:
        pass
    elif r < 0.55:  # reorder keys
        p = {k: p[k] for k in reversed(list(p))}
    elif r < 0.65:
        k = rng.choice(list(p))
        v = p[k]
        if isinstance(v, bool) or v is None:
            p[k] = str(v)
        elif isinstance(v, int):
            p[k] = float(v)
        elif isinstance(v, float):
            p[k] = int(v) if v == int(v) else str(v)
        else:
            p[k] = rng.choice(VALUES)
    elif r < 0.75:
        p[rng.choice(KEYS)] = rng.choice(VALUES)
    elif r < 0.85:
        del p[rng.choice(list(p))]
    else:
        p[rng.choice(list(p))] = copy.deepcopy(rng.choice(VALUES))
    return p


def tne_random_cases(n_cases=150, seed=20240603):
    rng = random.Random(seed)
    cases = []
    for ci in range(n_cases):
        mode = MODES[ci % 3]
        gtype = "tuple" if rng.random() < 0.5 else "list"
        vocab = rng.sample(NAMES, rng.randint(2, 5))
        gt = [rng.choice(vocab) for _ in range(rng.randint(1, 5))]
        params = {}
        if gtype == "tuple":
            for name in dict.fromkeys(gt):
                if rng.random() < 0.8:
                    params[name] = rand_params(rng)
            if rng.random() < 0.15:
                params[rng.choice(NAMES)] = rand_params(rng)
        # agent step names
        steps = list(gt)
        r = rng.random()
        if r < 0.3:
            pass
        elif r < 0.4 and len(steps) > 1:
            del steps[rng.randrange(len(steps))]
        elif r < 0.55:
            steps.insert(rng.randint(0, len(steps)), rng.choice(vocab))
        elif r < 0.65 and len(steps) > 1:
            i = rng.randrange(len(steps) - 1)
            steps[i], steps[i + 1] = steps[i + 1], steps[i]
        elif r < 0.75:
            i = rng.randrange(len(steps))
            steps.insert(i, steps[i])
        elif r < 0.8:
            steps = []
        else:
            steps = [rng.choice(vocab) for _ in range(rng.randint(1, 6))]
        # tool call items
        calls = []
        for j, name in enumerate(steps):
            if gtype == "tuple":
                args = perturb_params(rng, params.get(name, {}))
            else:
                args = rand_params(rng)
            ra = rng.random()
            cid = "call_%d_%d" % (ci, j)
            if ra < 0.8:
                calls.append(tc(cid, name, args))
            elif ra < 0.95:
                calls.append(tc(cid, name, json.dumps(args)))
            else:
                calls.append(tc(cid, name, None) if not args else tc(cid, name, args))
        # messages
        msgs = []
        if rng.random() < 0.6:
            msgs.append(user("task %d" % ci))
        i = 0
        while i < len(calls):
            take = rng.randint(1, 3)
            group = calls[i:i + take]
            items = list(group)
            if rng.random() < 0.3:
                items.insert(0, text_item("thinking"))
            msgs.append({"role": "assistant", "content": items})
            if rng.random() < 0.5:
                for g in group:
                    msgs.append(tool_msg(g["tool_call_id"], {"ok": True}))
            i += take
        if rng.random() < 0.5:
            msgs.append(asst(text_item("final answer")))
        gtv = [gt, params] if gtype == "tuple" else gt
        cases.append({"id": "tne-rand-%03d" % ci, "note": "seeded random (%s ground truth)" % gtype,
                      "response": msgs, "ground_truth": gtv, "ground_truth_type": gtype,
                      "matching_mode": mode})
    return cases


def build_tne_rows():
    rows = []
    for c in tne_edge_cases() + tne_random_cases():
        stored = roundtrip(c)
        out = tne_run(stored)
        row = dict(stored)
        row.update(enc(out))
        rows.append(row)
    return rows


# ============================================================================
# CHECKS: pure-Python restatements of the semantics above (check only)
# ============================================================================

def ref_trec(retrieved, qrels, ks):
    n = len(retrieved)
    g = [qrels.get(d, -1) for d in retrieved]          # unjudged -> non-relevant
    R = sum(1 for v in qrels.values() if v >= 1)
    ideal = sorted((v for v in qrels.values() if v >= 1), reverse=True)
    out = {}
    for k in ks:
        m = min(k, n)
        dcg = 0.0
        for i in range(m):
            if g[i] > 0:
                dcg += float(g[i]) / math.log2(float(i + 2))
        idcg = 0.0
        for i in range(min(k, len(ideal))):
            idcg += float(ideal[i]) / math.log2(float(i + 2))
        relk = sum(1 for i in range(m) if g[i] >= 1)
        out["ndcg_cut_%d" % k] = dcg / idcg if idcg > 0.0 else dcg
        out["P_%d" % k] = relk / k
        out["recall_%d" % k] = relk / R if R else 0.0
        out["success_%d" % k] = 1.0 if relk else 0.0
    rr = 0.0
    for i in range(n):
        if g[i] >= 1:
            rr = 1.0 / (i + 1)
            break
    out["recip_rank"] = rr
    s, so_far = 0.0, 0
    for i in range(n):
        if g[i] >= 1:
            so_far += 1
            s += so_far / (i + 1)
    out["map"] = s / R if so_far else 0.0
    return out


def check_trec(rows):
    maxdiff, nvals, nexact = 0.0, 0, 0
    for r in rows:
        if r.get("omitted"):
            continue
        ref = ref_trec(r["retrieved"], r["qrels"], r["k"])
        for key, v in ref.items():
            d = abs(v - r[key])
            nvals += 1
            nexact += (v == r[key])
            maxdiff = max(maxdiff, d)
    return maxdiff, nvals, nexact


class RefError(Exception):
    pass


def ref_dr(case):
    lo = case.get("ground_truth_label_min", 0)
    hi = case.get("ground_truth_label_max", 4)
    if not isinstance(lo, int) or not isinstance(hi, int) or lo >= hi:
        raise RefError("constructor")
    if "retrieval_ground_truth" not in case or "retrieved_documents" not in case:
        raise RefError("call")
    gt = case["retrieval_ground_truth"]
    docs = case["retrieved_documents"]
    if not gt:
        raise RefError("call")
    for q in gt:
        lab = q.get("query_relevance_label")
        if q.get("document_id") is None or lab is None or not isinstance(lab, int) or not lo <= lab <= hi:
            raise RefError("call")
    res = []
    if isinstance(docs, list):
        for d in docs:
            s = d.get("relevance_score")
            if d.get("document_id") is None or s is None or not isinstance(s, (int, float)):
                raise RefError("call")
            res.append(d)
    if not res:
        return {"ndcg@3": 0.0, "xdcg@3": 0.0, "fidelity": 0.0, "top1_relevance": 0.0,
                "top3_max_relevance": 0.0, "holes": 0, "holes_ratio": 0,
                "total_retrieved_documents": 0, "total_ground_truth_documents": len(gt)}
    ql = {}
    for q in gt:
        ql[q["document_id"]] = q["query_relevance_label"]
    rl = {}
    for d in res:
        rl[d["document_id"]] = d["relevance_score"]
    ranked = sorted(rl.items(), key=lambda x: x[1], reverse=True)
    labels = [ql.get(d, 0) for d, _ in ranked]
    ideal = sorted(ql.values(), reverse=True)
    holes = sum(1 for d in rl if d not in ql)
    hr = holes / float(len(res))
    base = {"holes": holes, "holes_ratio": hr, "total_retrieved_documents": len(res),
            "total_ground_truth_documents": len(gt)}
    if not any(labels):
        return dict({"ndcg@3": 0, "xdcg@3": 0, "fidelity": 0, "top1_relevance": 0,
                     "top3_max_relevance": 0}, **base)

    def dcg(ls):
        s = 0
        for r, l in enumerate(ls[:3], start=1):
            s = s + (math.pow(2, l) - 1) / math.log2(r + 1)
        return s
    idcg = dcg(ideal)
    if float(idcg) == 0.0:
        raise RefError("call")
    ndcg = dcg(labels) / float(idcg)
    xn = 0
    for r, l in enumerate(labels[:3], start=1):
        xn = xn + 25 * l * math.pow(0.6, r - 1)
    xd = 0
    for r in (1, 2, 3):
        xd = xd + math.pow(0.6, r - 1)
    xdcg = xn / float(xd)

    def W(ls):
        s0 = lo + 1
        counts = {str(i): 0 for i in range(s0, hi + 1)}
        for l in ls:
            if l >= s0:
                if str(l) not in counts:
                    raise RefError("call")
                counts[str(l)] += 1
        cs = [counts[k] for k in sorted(counts)]
        ws = [math.pow(2, i + 1) - 1 for i in range(s0, hi + 1)]
        t = 0
        for c, w in zip(cs, ws):
            t = t + c * w
        return t
    wr, wi = W(labels), W(ideal)
    fid = math.nan if wi == 0 else wr / float(wi)
    return dict({"ndcg@3": ndcg, "xdcg@3": xdcg, "fidelity": fid, "top1_relevance": labels[0],
                 "top3_max_relevance": max(labels[:3])}, **base)


def same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def check_dr(rows):
    bad = []
    for r in rows:
        case = dr_decode({k: v for k, v in r.items() if k not in ("result", "error", "error_type", "error_stage")})
        try:
            ref = ref_dr(case)
        except RefError as e:
            if r.get("error_stage") != str(e):
                bad.append(r["id"])
            continue
        if "result" not in r:
            bad.append(r["id"])
            continue
        props = r["result"]["document_retrieval_properties"]
        for k, v in ref.items():
            got = props[k]
            if isinstance(got, str):
                got = float(got)
            if not same(v, got):
                bad.append((r["id"], k, v, got))
    return bad


def ref_tne(case):
    mode = case["matching_mode"]
    if mode not in MODES:
        raise RefError("constructor")
    resp = case.get("response")
    gt = case.get("ground_truth")
    if isinstance(resp, str):
        try:
            resp = json.loads(resp)
        except ValueError:
            pass
    if isinstance(gt, str):
        gt = json.loads(gt)
    if not isinstance(resp, list):
        raise RefError("call")
    for m in resp:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RefError("call")
        if m["role"] == "assistant":
            if not isinstance(m.get("content"), list):
                raise RefError("call")
            for it in m["content"]:
                if not isinstance(it, dict) or (it.get("type") == "tool_call" and "name" not in it):
                    raise RefError("call")
    if not gt:
        raise RefError("call")
    if case.get("ground_truth_type") == "tuple":
        if len(gt) != 2 or not isinstance(gt[0], list) or not gt[0] or \
                not all(isinstance(x, str) for x in gt[0]) or not isinstance(gt[1], dict) or \
                not all(isinstance(v, dict) for v in gt[1].values()):
            raise RefError("call")
        names, params, use_p = [x.strip() for x in gt[0]], gt[1], True
    else:
        if not isinstance(gt, list) or not all(isinstance(x, str) for x in gt):
            raise RefError("call")
        names, params, use_p = [x.strip() for x in gt], {}, False
    calls, results = [], {}
    for m in resp:
        if m.get("role") == "assistant":
            calls += [it for it in m["content"] if it.get("type") == "tool_call"]
        elif m.get("role") == "tool" and m.get("tool_call_id"):
            c = m.get("content")
            if isinstance(c, list) and c and isinstance(c[0], dict) and c[0].get("type") == "tool_result":
                results[m["tool_call_id"]] = c[0]
    for c in calls:
        if c.get("tool_call_id") in results and "tool_result" not in results[c.get("tool_call_id")]:
            raise RefError("call")

    def norm(v):
        if isinstance(v, str):
            return v
        if isinstance(v, (dict, list)):
            return json.dumps(v, sort_keys=True)
        return str(v)
    agent = []
    for c in calls:
        a = c.get("arguments", {})
        if isinstance(a, str):
            try:
                a = json.loads(a)
            except ValueError:
                raise RefError("call")
        if not isinstance(a, dict):
            a = {}
        nm = str(c["name"]).strip()
        agent.append((nm, tuple(sorted((str(k), norm(v)) for k, v in a.items()))) if use_p else nm)
    gts = [(nm, tuple(sorted((k, norm(v)) for k, v in params.get(nm, {}).items()))) if use_p else nm
           for nm in names]
    if not agent:
        p = r_ = f = 0.0
    else:
        ca, cg = Counter(agent), Counter(gts)
        tp = sum(min(ca[s], cg[s]) for s in ca if s in cg)
        p = tp / len(agent)
        r_ = tp / len(gts)
        f = (2 * p * r_) / (p + r_) if p + r_ > 0 else 0.0
    if mode == "exact_match":
        ok = agent == gts
    elif mode == "in_order_match":
        j = 0
        for s in agent:
            if j < len(gts) and s == gts[j]:
                j += 1
        ok = j == len(gts)
    else:
        ca, cg = Counter(agent), Counter(gts)
        ok = all(ca[s] >= cg[s] for s in cg)
    return float(ok), p, r_, f


def check_tne(rows):
    bad = []
    for r in rows:
        try:
            score, p, rc, f = ref_tne(r)
        except RefError as e:
            if r.get("error_stage") != str(e):
                bad.append(r["id"])
            continue
        if "result" not in r:
            bad.append(r["id"])
            continue
        res = r["result"]
        pr = res["task_navigation_efficiency_properties"]
        got = (res["task_navigation_efficiency"], pr["precision_score"], pr["recall_score"], pr["f1_score"])
        if got != (score, p, rc, f):
            bad.append((r["id"], got, (score, p, rc, f)))
    return bad


# ----------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()
    check_versions()
    logging.disable(logging.CRITICAL)  # the SDK logs every raised error; values unaffected

    trec = build_trec_rows()
    dr = build_dr_rows()
    tne = build_tne_rows()

    files = {"retrieval_metrics.jsonl": trec, "document_retrieval.jsonl": dr,
             "task_navigation_efficiency.jsonl": tne}
    os.makedirs(args.out, exist_ok=True)
    for name, rows in files.items():
        write_jsonl(os.path.join(args.out, name), rows)

    maxdiff, nvals, nexact = check_trec(trec)
    bad_dr = check_dr(dr)
    bad_tne = check_tne(tne)
    for name, rows in files.items():
        with open(os.path.join(args.out, name), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        n_err = sum(1 for r in rows if "error" in r)
        n_omit = sum(1 for r in rows if r.get("omitted"))
        print("%-34s %4d rows (%d errors, %d omitted) sha256 %s" % (name, len(rows), n_err, n_omit, digest))
    print("check retrieval_metrics: %d values, max |pytrec_eval - restatement| = %r, %d bit-identical"
          % (nvals, maxdiff, nexact))
    print("check document_retrieval: %d mismatches %s" % (len(bad_dr), bad_dr[:5]))
    print("check task_navigation_efficiency: %d mismatches %s" % (len(bad_tne), bad_tne[:5]))
    if maxdiff > 1e-15 or bad_dr or bad_tne:
        raise SystemExit("restatement check FAILED")


if __name__ == "__main__":
    main()
