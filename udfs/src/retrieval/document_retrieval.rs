//! `document_retrieval(retrieval_ground_truth, retrieved_documents [, label_min, label_max])`:
//! Azure AI Evaluation's `DocumentRetrievalEvaluator` (azure-ai-evaluation 1.18.10) as one
//! struct-valued function, every field computed as the evaluator computes it:
//!
//! - the judgements `[{"document_id", "query_relevance_label"}]` (labels are integers within
//!   `[label_min, label_max]`, default 0..4) and the retrieved documents
//!   `[{"document_id", "relevance_score"}]` are each read into a map (a repeated id keeps its
//!   first position and its last value, as a Python dict does) and ranked by label and by
//!   score, highest first, equal values keeping their input order (Python's stable sort);
//! - `ndcg_at_3` uses the exponential gain 2^label − 1 and the discount log2(rank + 1) over
//!   the top three retrieved against the top three labels; `xdcg_at_3` is
//!   Σ 25 · label · 0.6^(rank−1) over the top three divided by 1 + 0.6 + 0.36;
//! - `fidelity` is Σ count(label) · (2^(label+1) − 1) over labels above `label_min`, retrieved
//!   over all judged, NaN when no judged document is above the minimum. The evaluator pairs
//!   the counts, keyed by the label's decimal text and sorted as text, with weights in numeric
//!   order; that pairing is reproduced (it matters only for labels of two digits or below 0);
//! - `top1_relevance` and `top3_max_relevance` are the labels of the first and the best of
//!   the top three retrieved; `holes` counts retrieved ids without a judgement and
//!   `holes_ratio` divides it by the number of retrieved entries (repeats included, as are
//!   both totals);
//! - no retrieved document, or none with a non-zero label, gives zeros (and the holes).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Builder, Int64Builder, StructArray,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::{DataType, Field, Fields, Int64Type};
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature,
};
use serde_json::Value;

use super::input::is_judgements_type;
use crate::common::docs::RETRIEVAL_METRICS;
use crate::common::signature::user_defined;
use crate::common::{columnar_result, json_rows, rows_of, truncate_for_error};

const NAME: &str = "document_retrieval";
/// The evaluator's cutoff and xDCG discount.
const K: usize = 3;
const XDCG_DISCOUNT: f64 = 0.6;
/// The evaluator refuses more items than this in either list.
const MAX_ITEMS: usize = 10_000;

/// The evaluator's metrics for one query.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentRetrieval {
    pub ndcg_at_3: f64,
    pub xdcg_at_3: f64,
    pub fidelity: f64,
    pub top1_relevance: f64,
    pub top3_max_relevance: f64,
    pub holes: i64,
    pub holes_ratio: f64,
    pub total_retrieved_documents: i64,
    pub total_ground_truth_documents: i64,
}

/// The label range of the judgements (the evaluator's `ground_truth_label_min/max`).
#[derive(Debug, Clone, Copy)]
pub struct LabelRange {
    pub min: i64,
    pub max: i64,
}

/// The evaluator computes 2^(label + 1) with `math.pow`, which overflows from 1023 on.
const MAX_LABEL: i64 = 1022;
/// Labels the evaluator counts one by one; a wider range is refused rather than looped over.
const MAX_LEVELS: i64 = 10_000;

impl LabelRange {
    fn check(&self) -> std::result::Result<(), String> {
        if self.min >= self.max {
            return Err(format!(
                "label_max ({}) must be greater than label_min ({})",
                self.max, self.min
            ));
        }
        if self.max > MAX_LABEL {
            return Err(format!(
                "label_max {} is too large: the weights 2^(label + 1) overflow above {MAX_LABEL} \
                 (the evaluator fails there too)",
                self.max
            ));
        }
        if self.max - self.min > MAX_LEVELS {
            return Err(format!(
                "the label range [{}, {}] has more than {MAX_LEVELS} levels",
                self.min, self.max
            ));
        }
        Ok(())
    }
}

impl Default for LabelRange {
    fn default() -> Self {
        LabelRange { min: 0, max: 4 }
    }
}

/// An insertion-ordered map, as a Python dict: a repeated key keeps its first position and
/// takes the last value.
fn ordered<K: std::hash::Hash + Eq + Clone, V>(items: Vec<(K, V)>) -> Vec<(K, V)> {
    let mut position: HashMap<K, usize> = HashMap::with_capacity(items.len());
    let mut out: Vec<(K, V)> = Vec::with_capacity(items.len());
    for (k, v) in items {
        match position.get(&k) {
            Some(&i) => out[i].1 = v,
            None => {
                position.insert(k.clone(), out.len());
                out.push((k, v));
            }
        }
    }
    out
}

/// The metrics of one query. `judged` are (id, label) and `retrieved` (id, score), in input
/// order, ids in their canonical JSON text.
pub fn document_retrieval(
    judged: Vec<(String, i64)>,
    retrieved: Vec<(String, f64)>,
    range: LabelRange,
) -> std::result::Result<DocumentRetrieval, String> {
    range.check()?;
    if judged.is_empty() {
        return Err("retrieval_ground_truth must contain at least one judgement".into());
    }
    for (id, label) in &judged {
        if *label < range.min || *label > range.max {
            return Err(format!(
                "the label {label} of document {id} is outside [{}, {}]; set label_min and \
                 label_max to the range of your labels",
                range.min, range.max
            ));
        }
    }
    if judged.len() > MAX_ITEMS || retrieved.len() > MAX_ITEMS {
        return Err(format!(
            "retrieval_ground_truth and retrieved_documents may hold at most {MAX_ITEMS} items"
        ));
    }
    let total_retrieved = retrieved.len();
    let total_judged = judged.len() as i64;
    if retrieved.is_empty() {
        return Ok(zeros(0, 0.0, 0, total_judged));
    }
    let labels: Vec<(String, i64)> = ordered(judged);
    let mut scores: Vec<(String, f64)> = ordered(retrieved);
    let lookup: HashMap<&str, i64> = labels.iter().map(|(d, l)| (d.as_str(), *l)).collect();
    // Highest first; `sort_by` is stable, as Python's `sorted(..., reverse=True)` is.
    let mut ideal: Vec<i64> = labels.iter().map(|(_, l)| *l).collect();
    ideal.sort_by(|a, b| b.cmp(a));
    scores.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));
    let result: Vec<i64> = scores
        .iter()
        .map(|(d, _)| lookup.get(d.as_str()).copied().unwrap_or(0))
        .collect();
    let holes = scores
        .iter()
        .filter(|(d, _)| !lookup.contains_key(d.as_str()))
        .count() as i64;
    let holes_ratio = holes as f64 / total_retrieved as f64;
    if result.iter().all(|&l| l == 0) {
        return Ok(zeros(
            holes,
            holes_ratio,
            total_retrieved as i64,
            total_judged,
        ));
    }
    let top = &result[..result.len().min(K)];
    let dcg = discounted_gain(top);
    let idcg = discounted_gain(&ideal[..ideal.len().min(K)]);
    if idcg == 0.0 {
        return Err("nDCG@3 is undefined: the ideal ranking's gain is 0 (division by zero)".into());
    }
    Ok(DocumentRetrieval {
        ndcg_at_3: dcg / idcg,
        xdcg_at_3: xdcg(top),
        fidelity: fidelity(&result, &ideal, range)?,
        top1_relevance: result[0] as f64,
        top3_max_relevance: *top.iter().max().expect("top is not empty") as f64,
        holes,
        holes_ratio,
        total_retrieved_documents: total_retrieved as i64,
        total_ground_truth_documents: total_judged,
    })
}

fn zeros(holes: i64, holes_ratio: f64, retrieved: i64, judged: i64) -> DocumentRetrieval {
    DocumentRetrieval {
        ndcg_at_3: 0.0,
        xdcg_at_3: 0.0,
        fidelity: 0.0,
        top1_relevance: 0.0,
        top3_max_relevance: 0.0,
        holes,
        holes_ratio,
        total_retrieved_documents: retrieved,
        total_ground_truth_documents: judged,
    }
}

/// Σ (2^label − 1) / log2(rank + 1), left to right as Python's `sum` adds.
fn discounted_gain(labels: &[i64]) -> f64 {
    let mut sum = 0.0;
    for (i, &l) in labels.iter().enumerate() {
        let rank = (i + 1) as f64;
        sum += (2f64.powf(l as f64) - 1.0) / (rank + 1.0).log2();
    }
    sum
}

fn xdcg(labels: &[i64]) -> f64 {
    let mut numerator = 0.0;
    for (i, &l) in labels.iter().enumerate() {
        // 25 · label is exact in f64 for every label the range check lets through.
        numerator += (25.0 * l as f64) * XDCG_DISCOUNT.powf(i as f64);
    }
    let mut denominator = 0.0;
    for i in 0..K {
        denominator += XDCG_DISCOUNT.powf(i as f64);
    }
    numerator / denominator
}

fn fidelity(result: &[i64], ideal: &[i64], range: LabelRange) -> std::result::Result<f64, String> {
    let retrieved = weighted_sum_by_label(result, range)?;
    let judged = weighted_sum_by_label(ideal, range)?;
    if judged == 0.0 {
        return Ok(f64::NAN);
    }
    Ok(retrieved / judged)
}

fn weighted_sum_by_label(labels: &[i64], range: LabelRange) -> std::result::Result<f64, String> {
    let first = range.min + 1;
    // An unjudged document counts as label 0, which the evaluator cannot count when 0 lies
    // above label_max (it fails there).
    if let Some(l) = labels.iter().find(|&&l| l >= first && l > range.max) {
        return Err(format!(
            "fidelity is undefined: an unjudged document counts as label {l}, above label_max {}",
            range.max
        ));
    }
    let levels: Vec<i64> = (first..=range.max).collect();
    // The counts are ordered by the label's decimal text, the weights by the label: the
    // evaluator zips the two (see the module documentation).
    let mut by_text = levels.clone();
    by_text.sort_by_key(|l| l.to_string());
    let mut counts: HashMap<i64, usize> = HashMap::new();
    for &l in labels {
        if l >= first {
            *counts.entry(l).or_insert(0) += 1;
        }
    }
    let mut sum = 0.0;
    for (text_level, weight_level) in by_text.iter().zip(&levels) {
        let count = counts.get(text_level).copied().unwrap_or(0);
        let weight = 2f64.powf((weight_level + 1) as f64) - 1.0;
        sum += count as f64 * weight;
    }
    Ok(sum)
}

/// The canonical text of a document id, so that "1" and 1 stay different ids.
fn id_key(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

fn parse_items(value: &Value, what: &str) -> std::result::Result<Vec<(String, Value)>, String> {
    let (id_field, value_field) = match what {
        "retrieval_ground_truth" => ("document_id", "query_relevance_label"),
        _ => ("document_id", "relevance_score"),
    };
    let Value::Array(items) = value else {
        return Err(format!("{what} must be a JSON array"));
    };
    items
        .iter()
        .map(|item| {
            let fields = item.as_object();
            let id = fields.and_then(|f| f.get(id_field)).and_then(id_key);
            let v = fields
                .and_then(|f| f.get(value_field))
                .filter(|v| !v.is_null());
            match (id, v) {
                (Some(id), Some(v)) => Ok((id, v.clone())),
                _ => Err(format!(
                    "every item of {what} needs {id_field} and {value_field}; {item} has not"
                )),
            }
        })
        .collect()
}

fn parse_judgements(value: &Value) -> std::result::Result<Vec<(String, i64)>, String> {
    parse_items(value, "retrieval_ground_truth")?
        .into_iter()
        .map(|(id, v)| match v.as_i64() {
            Some(l) => Ok((id, l)),
            None => Err(format!(
                "the query_relevance_label of document {} is {v}, not an integer",
                id
            )),
        })
        .collect()
}

fn parse_retrieved(value: &Value) -> std::result::Result<Vec<(String, f64)>, String> {
    parse_items(value, "retrieved_documents")?
        .into_iter()
        .map(|(id, v)| match v.as_f64() {
            Some(s) if v.is_number() => Ok((id, s)),
            _ => Err(format!(
                "the relevance_score of document {} is {v}, not a number",
                id
            )),
        })
        .collect()
}

fn result_fields() -> Fields {
    let f = |name: &str, t: DataType| Field::new(name, t, false);
    Fields::from(vec![
        f("ndcg_at_3", DataType::Float64),
        f("xdcg_at_3", DataType::Float64),
        f("fidelity", DataType::Float64),
        f("top1_relevance", DataType::Float64),
        f("top3_max_relevance", DataType::Float64),
        f("holes", DataType::Int64),
        f("holes_ratio", DataType::Float64),
        f("total_retrieved_documents", DataType::Int64),
        f("total_ground_truth_documents", DataType::Int64),
    ])
}

fn not_json(why: String) -> datafusion::common::DataFusionError {
    datafusion::common::DataFusionError::Execution(format!("{NAME}: {why}"))
}

static DOC: LazyLock<Documentation> =
    LazyLock::new(|| {
        Documentation::builder(
        RETRIEVAL_METRICS,
        "Azure AI Evaluation's document retrieval metrics of one query, equal to its \
         DocumentRetrievalEvaluator: ndcg_at_3 (gain 2^label - 1), xdcg_at_3, fidelity (NaN \
         when no judged document is above label_min), top1_relevance, top3_max_relevance, \
         holes (retrieved but unjudged), holes_ratio and the two totals. Retrieved documents \
         are ranked by relevance_score, highest first. No retrieved document, or none with a \
         non-zero label, gives zeros. Labels outside [label_min, label_max] are an error; \
         NULL in an argument gives NULL.",
        "document_retrieval(retrieval_ground_truth, retrieved_documents [, label_min, label_max])",
    )
    .with_argument(
        "retrieval_ground_truth",
        "The judged documents: JSON text [{\"document_id\": ..., \"query_relevance_label\": \
         int}] or a list of such structs.",
    )
    .with_argument(
        "retrieved_documents",
        "The retrieved documents: JSON text [{\"document_id\": ..., \"relevance_score\": \
         number}] or a list of such structs.",
    )
    .with_argument("label_min", "The lowest label, meaning irrelevant (default 0).")
    .with_argument("label_max", "The highest label (default 4).")
    .build()
    });

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct DocumentRetrievalFunc {
    signature: Signature,
}

impl Default for DocumentRetrievalFunc {
    fn default() -> Self {
        Self {
            signature: user_defined(),
        }
    }
}

impl ScalarUDFImpl for DocumentRetrievalFunc {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Struct(result_fields()))
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let usage = &DOC.syntax_example;
        if !matches!(arg_types.len(), 2 | 4) {
            return plan_err!("{NAME} takes 2 or 4 arguments: {usage}");
        }
        let mut out = arg_types.to_vec();
        for i in 0..2 {
            if !is_judgements_type(&arg_types[i]) {
                return plan_err!(
                    "{NAME}: argument {} must be JSON text or a list of structs, got {}; usage: \
                     {usage}",
                    i + 1,
                    arg_types[i]
                );
            }
            if arg_types[i].is_null() {
                out[i] = DataType::Utf8;
            }
        }
        for i in 2..arg_types.len() {
            if !(arg_types[i].is_integer() || arg_types[i].is_null()) {
                return plan_err!(
                    "{NAME}: label_min and label_max must be integers, got {}; usage: {usage}",
                    arg_types[i]
                );
            }
            out[i] = DataType::Int64;
        }
        Ok(out)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let call = rows_of(&args)?;
        let (rows, arrays) = (call.rows, &call.arrays);
        let truth = json_rows(&arrays[0], "retrieval_ground_truth")?;
        let retrieved = json_rows(&arrays[1], "retrieved_documents")?;
        let bounds = (arrays.len() == 4).then(|| {
            (
                arrays[2].as_primitive::<Int64Type>().clone(),
                arrays[3].as_primitive::<Int64Type>().clone(),
            )
        });
        let mut columns = Columns::with_capacity(rows);
        let mut valid = Vec::with_capacity(rows);
        for row in 0..rows {
            let range = match &bounds {
                None => Some(LabelRange::default()),
                Some((lo, hi)) => {
                    let (i, j) = (call.at(2, row), call.at(3, row));
                    (lo.is_valid(i) && hi.is_valid(j)).then(|| LabelRange {
                        min: lo.value(i),
                        max: hi.value(j),
                    })
                }
            };
            if let Some(r) = range {
                r.check().map_err(|why| {
                    datafusion::common::DataFusionError::Execution(format!("{NAME}: {why}"))
                })?;
            }
            let t = truth[call.at(0, row)].as_ref().map(|r| r.as_ref());
            let d = retrieved[call.at(1, row)].as_ref().map(|r| r.as_ref());
            let t = t.transpose().map_err(|e| not_json(e.clone()))?;
            let d = d.transpose().map_err(|e| not_json(e.clone()))?;
            let (Some(range), Some(t), Some(d)) = (range, t, d) else {
                columns.push(&zeros(0, 0.0, 0, 0));
                valid.push(false);
                continue;
            };
            let scored = parse_judgements(t).and_then(|judged| {
                let docs = parse_retrieved(d)?;
                document_retrieval(judged, docs, range)
            });
            match scored {
                Ok(m) => {
                    columns.push(&m);
                    valid.push(true);
                }
                Err(why) => {
                    return exec_err!(
                        "{NAME}: retrieval_ground_truth {} with retrieved_documents {}: {why}",
                        truncate_for_error(&t.to_string()),
                        truncate_for_error(&d.to_string())
                    );
                }
            }
        }
        columnar_result(
            call.all_scalar,
            Arc::new(columns.finish(NullBuffer::from(valid))?),
        )
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DOC)
    }
}

struct Columns {
    floats: [Float64Builder; 6],
    ints: [Int64Builder; 3],
}

impl Columns {
    fn with_capacity(n: usize) -> Self {
        Columns {
            floats: std::array::from_fn(|_| Float64Builder::with_capacity(n)),
            ints: std::array::from_fn(|_| Int64Builder::with_capacity(n)),
        }
    }

    fn push(&mut self, m: &DocumentRetrieval) {
        let [ndcg, xdcg, fidelity, top1, top3, ratio] = &mut self.floats;
        let [holes, retrieved, judged] = &mut self.ints;
        ndcg.append_value(m.ndcg_at_3);
        xdcg.append_value(m.xdcg_at_3);
        fidelity.append_value(m.fidelity);
        top1.append_value(m.top1_relevance);
        top3.append_value(m.top3_max_relevance);
        holes.append_value(m.holes);
        ratio.append_value(m.holes_ratio);
        retrieved.append_value(m.total_retrieved_documents);
        judged.append_value(m.total_ground_truth_documents);
    }

    fn finish(self, nulls: NullBuffer) -> Result<StructArray> {
        let [
            mut ndcg,
            mut xdcg,
            mut fidelity,
            mut top1,
            mut top3,
            mut ratio,
        ] = self.floats;
        let [mut holes, mut retrieved, mut judged] = self.ints;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(ndcg.finish()),
            Arc::new(xdcg.finish()),
            Arc::new(fidelity.finish()),
            Arc::new(top1.finish()),
            Arc::new(top3.finish()),
            Arc::new(holes.finish()),
            Arc::new(ratio.finish()),
            Arc::new(retrieved.finish()),
            Arc::new(judged.finish()),
        ];
        Ok(StructArray::try_new(result_fields(), columns, Some(nulls))?)
    }
}
