//! METEOR as computed by NLTK 3.10.4 `nltk.translate.meteor_score.meteor_score([reference],
//! hypothesis, alpha, beta, gamma)` with its default `str.lower` preprocessing, Porter
//! stemmer and WordNet 3.0 (what Azure AI Evaluation's `MeteorScoreEvaluator` calls).
//!
//! Alignment is NLTK's greedy one, not the original METEOR's: three stages (exact words,
//! Porter stems, WordNet synonyms of the stems), each walking the still-unmatched
//! hypothesis words from the last to the first and pairing each with the last still
//! unmatched reference word that qualifies.

use std::borrow::Cow;

use ahash::AHashMap;

use std::sync::LazyLock;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature,
};

use super::nltk::{azure_tokens, token_column};
use super::{porter, pystr, wordnet};
use crate::common::docs::TEXT_METRICS;
use crate::common::signature::{Param, coerce_params, user_defined};
use crate::common::{float64_rows, prepare_args};

/// Below this many hypothesis x reference pairs a linear scan beats building a hash map.
const SCAN_LIMIT: usize = 1024;

/// NLTK's `meteor_score([reference], hypothesis, alpha=alpha, beta=beta, gamma=gamma)` on
/// pre-tokenised input. Returns 0.0 wherever NLTK hits a division by zero (empty
/// hypothesis or reference, no match).
pub fn meteor_tokens(
    reference: &[&str],
    hypothesis: &[&str],
    alpha: f64,
    beta: f64,
    gamma: f64,
) -> f64 {
    let hyp: Vec<Cow<str>> = hypothesis.iter().map(|w| lower(w)).collect();
    let refs: Vec<Cow<str>> = reference.iter().map(|w| lower(w)).collect();
    let matches = align(&hyp, &refs);
    score(&matches, hyp.len(), refs.len(), alpha, beta, gamma)
}

/// Python's `str.lower`, borrowing when nothing changes.
fn lower(word: &str) -> Cow<'_, str> {
    if word.is_ascii() && !word.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Borrowed(word)
    } else {
        Cow::Owned(pystr::lower(word))
    }
}

/// `_enum_align_words`: (hypothesis index, reference index) pairs sorted by hypothesis
/// index. Inputs are already lowercased.
fn align<S: AsRef<str>>(hyp: &[S], refs: &[S]) -> Vec<(u32, u32)> {
    let mut matches = Vec::new();
    let mut h: Vec<(u32, &str)> = (0..).zip(hyp.iter().map(|w| w.as_ref())).collect();
    let mut r: Vec<(u32, &str)> = (0..).zip(refs.iter().map(|w| w.as_ref())).collect();
    match_equal(&mut h, &mut r, &mut matches);

    // Later stages can only match if both sides have leftovers.
    if !h.is_empty() && !r.is_empty() {
        let mut scratch = Vec::new();
        let mut stem = |(i, w): &(u32, &str)| {
            let mut out = String::new();
            porter::stem_into(w, &mut scratch, &mut out);
            (*i, out)
        };
        let mut hs: Vec<(u32, String)> = h.iter().map(&mut stem).collect();
        let mut rs: Vec<(u32, String)> = r.iter().map(&mut stem).collect();
        match_equal(&mut hs, &mut rs, &mut matches);
        if !hs.is_empty() && !rs.is_empty() {
            match_synonyms(&hs, &rs, &mut matches);
        }
    }
    // Hypothesis indices are unique, so the order is the one of Python's stable sort.
    matches.sort_unstable_by_key(|m| m.0);
    matches
}

/// `_match_enums`: each hypothesis word, from the last, takes the last unmatched equal
/// reference word. Matched entries are removed from both lists, order kept.
fn match_equal<S: AsRef<str>>(
    hyp: &mut Vec<(u32, S)>,
    refs: &mut Vec<(u32, S)>,
    matches: &mut Vec<(u32, u32)>,
) {
    let mut hyp_used = vec![false; hyp.len()];
    let mut ref_used = vec![false; refs.len()];
    if hyp.len() * refs.len() <= SCAN_LIMIT {
        for i in (0..hyp.len()).rev() {
            let word = hyp[i].1.as_ref();
            let found = (0..refs.len())
                .rev()
                .find(|&j| !ref_used[j] && refs[j].1.as_ref() == word);
            if let Some(j) = found {
                hyp_used[i] = true;
                ref_used[j] = true;
                matches.push((hyp[i].0, refs[j].0));
            }
        }
    } else {
        let mut positions: AHashMap<&str, Vec<u32>> = AHashMap::with_capacity(refs.len());
        for (j, (_, w)) in refs.iter().enumerate() {
            positions.entry(w.as_ref()).or_default().push(j as u32);
        }
        for i in (0..hyp.len()).rev() {
            if let Some(j) = positions.get_mut(hyp[i].1.as_ref()).and_then(Vec::pop) {
                let j = j as usize;
                hyp_used[i] = true;
                ref_used[j] = true;
                matches.push((hyp[i].0, refs[j].0));
            }
        }
    }
    let mut k = 0;
    hyp.retain(|_| {
        k += 1;
        !hyp_used[k - 1]
    });
    let mut k = 0;
    refs.retain(|_| {
        k += 1;
        !ref_used[k - 1]
    });
}

/// `_enum_wordnetsyn_match` on the stemmed leftovers: a hypothesis stem matches the
/// reference stem at the highest unmatched position among its WordNet synonyms (and
/// itself). Distinct words sit at distinct positions, so the maximum is unique and the
/// order in which candidates are tried does not matter.
fn match_synonyms(hyp: &[(u32, String)], refs: &[(u32, String)], matches: &mut Vec<(u32, u32)>) {
    let mut positions: AHashMap<&str, Vec<u32>> = AHashMap::with_capacity(refs.len());
    for (j, (_, w)) in refs.iter().enumerate() {
        positions.entry(w.as_str()).or_default().push(j as u32);
    }
    let mut left = refs.len();
    for (i, word) in hyp.iter().rev() {
        if left == 0 {
            break;
        }
        let syns = wordnet::synonyms(word);
        let mut best: Option<(u32, &str)> = None;
        if let Some((key, p)) = positions.get_key_value(word.as_str()) {
            consider(&mut best, key, p);
        }
        // Walk whichever side is smaller.
        if positions.len() < syns.len() {
            for (key, p) in &positions {
                if syns.binary_search(key).is_ok() {
                    consider(&mut best, key, p);
                }
            }
        } else {
            for s in syns.iter() {
                if let Some((key, p)) = positions.get_key_value(s) {
                    consider(&mut best, key, p);
                }
            }
        }
        if let Some((j, key)) = best {
            if let Some(p) = positions.get_mut(key) {
                p.pop();
            }
            left -= 1;
            matches.push((*i, refs[j as usize].0));
        }
    }
}

/// Keeps the candidate whose last unmatched position is highest.
fn consider<'a>(best: &mut Option<(u32, &'a str)>, key: &'a str, positions: &[u32]) {
    if let Some(&j) = positions.last()
        && best.is_none_or(|(b, _)| j > b)
    {
        *best = Some((j, key));
    }
}

/// `_count_chunks`: runs of matches adjacent in both sentences.
fn count_chunks(matches: &[(u32, u32)]) -> usize {
    1 + matches
        .windows(2)
        .filter(|w| !(w[1].0 == w[0].0 + 1 && w[1].1 == w[0].1 + 1))
        .count()
}

/// `single_meteor_score` after alignment, with Python's operation order; a division by
/// zero (Python's `ZeroDivisionError`) gives 0.0.
fn score(
    matches: &[(u32, u32)],
    translation_length: usize,
    reference_length: usize,
    alpha: f64,
    beta: f64,
    gamma: f64,
) -> f64 {
    let matches_count = matches.len() as f64;
    let translation_length = translation_length as f64;
    let reference_length = reference_length as f64;
    if translation_length == 0.0 || reference_length == 0.0 {
        return 0.0;
    }
    let precision = matches_count / translation_length;
    let recall = matches_count / reference_length;
    let denominator = alpha * precision + (1.0 - alpha) * recall;
    if denominator == 0.0 {
        return 0.0;
    }
    let fmean = (precision * recall) / denominator;
    let chunk_count = count_chunks(matches) as f64;
    if matches_count == 0.0 {
        return 0.0;
    }
    let frag_frac = chunk_count / matches_count;
    let penalty = gamma * frag_frac.powf(beta);
    (1.0 - penalty) * fmean
}

// ---- The SQL function ---------------------------------------------------------------------

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        TEXT_METRICS,
        "METEOR (0-1) of the response against the ground truth, equal to Azure AI Evaluation's \
         MeteorScoreEvaluator: both texts are tokenized as Azure does (NLTK word_tokenize for \
         ASCII text, NLTK's NIST international tokenizer otherwise), then NLTK meteor_score \
         aligns lowercased words in three stages - exact, Porter stem, WordNet 3.0 synonym - \
         and combines precision and recall (weight alpha) with a fragmentation penalty \
         (gamma · (chunks/matches)^beta). A single-word exact match scores 0.5. NULL in any \
         argument gives NULL.",
        "meteor(response, ground_truth [, alpha, beta, gamma])",
    )
    .with_sql_example("SELECT meteor('The cat sat on the mat.', 'A cat was sitting on the mat.');")
    .with_argument("response", "The model's answer (string).")
    .with_argument("ground_truth", "The expected answer (string).")
    .with_argument(
        "alpha",
        "Weight of precision against recall (number, default 0.9).",
    )
    .with_argument(
        "beta",
        "Exponent of the fragmentation penalty (number, default 3.0).",
    )
    .with_argument(
        "gamma",
        "Weight of the fragmentation penalty (number, default 0.5).",
    )
    .build()
});

const USAGE: &str = "meteor(response: String, ground_truth: String [, alpha: Float64 [, beta: Float64 [, gamma: Float64]]])";

/// Azure's (and NLTK's) defaults.
const DEFAULTS: [f64; 3] = [0.9, 3.0, 0.5];

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct MeteorFunc {
    signature: Signature,
}

impl Default for MeteorFunc {
    fn default() -> Self {
        Self {
            signature: user_defined(),
        }
    }
}

impl ScalarUDFImpl for MeteorFunc {
    fn name(&self) -> &str {
        "meteor"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        use Param::*;
        coerce_params(
            self.name(),
            USAGE,
            arg_types,
            &[
                &[Text, Text],
                &[Text, Text, Float],
                &[Text, Text, Float, Float],
                &[Text, Text, Float, Float, Float],
            ],
        )
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = self.name();
        let prepared = prepare_args(&args.args)?;
        let response = prepared.str(name, 0)?;
        let truth = prepared.str(name, 1)?;
        let params = (2..prepared.len())
            .map(|i| prepared.f64(name, i))
            .collect::<Result<Vec<_>>>()?;
        // Tokens shared with the query's BLEU and GLEU over the same columns.
        let hypothesis = token_column(&args.args[0], &response, args.number_rows);
        let reference = token_column(&args.args[1], &truth, args.number_rows);
        let (mut hyp, mut refr): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
        float64_rows(prepared.all_scalar(), args.number_rows, |row| {
            let mut p = DEFAULTS;
            for (slot, arg) in p.iter_mut().zip(&params) {
                match arg.get(row) {
                    Some(v) => *slot = v,
                    None => return Ok(None),
                }
            }
            if response.get(row).is_none() || truth.get(row).is_none() {
                return Ok(None);
            }
            hyp.clear();
            hyp.extend(hypothesis.row(row));
            refr.clear();
            refr.extend(reference.row(row));
            Ok(Some(meteor_tokens(&refr, &hyp, p[0], p[1], p[2])))
        })
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DOC)
    }
}

/// Azure's METEOR of two texts.
pub fn meteor(response: &str, ground_truth: &str, alpha: f64, beta: f64, gamma: f64) -> f64 {
    let hyp = azure_tokens(response);
    let reference = azure_tokens(ground_truth);
    let hyp: Vec<&str> = hyp.iter().map(String::as_str).collect();
    let reference: Vec<&str> = reference.iter().map(String::as_str).collect();
    meteor_tokens(&reference, &hyp, alpha, beta, gamma)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<&str> {
        s.split(' ').filter(|w| !w.is_empty()).collect()
    }

    fn meteor(reference: &str, hypothesis: &str) -> f64 {
        meteor_tokens(&toks(reference), &toks(hypothesis), 0.9, 3.0, 0.5)
    }

    // Expected values: nltk 3.10.4 with WordNet 3.0, printed with repr().
    #[test]
    fn nltk_doctest() {
        let hyp = "It is a guide to action which ensures that the military always obeys the \
                   commands of the party";
        let r1 = "It is a guide to action that ensures that the military will forever heed \
                  Party commands";
        let r2 = "It is the guiding principle which guarantees the military forces always being \
                  under the command of the Party";
        assert_eq!(meteor(r1, hyp), 0.6944444444444445);
        assert_eq!(meteor(r2, hyp), 0.625);
    }

    #[test]
    fn zero_cases() {
        assert_eq!(meteor("this is a cat", "non matching hypothesis"), 0.0);
        assert_eq!(meteor("", "a b"), 0.0);
        assert_eq!(meteor("a b", ""), 0.0);
        assert_eq!(meteor("", ""), 0.0);
        assert_eq!(meteor("cat", "cat"), 0.5);
    }

    #[test]
    fn stages() {
        // Only dogs/dog (stems) matches: "ran" is not among the synonyms of the stem
        // "run", and the stem "rapidli" is no WordNet lemma.
        assert_eq!(meteor("the dogs ran quickly", "a dog runs rapidly"), 0.125);
        assert_eq!(
            align(&toks("a dog runs rapidly"), &toks("the dogs ran quickly")),
            [(1, 1)]
        );
        // "auto" -> "car" is a synonym match; "larg" (stem of "large") has no synsets.
        assert_eq!(meteor("a big car", "large auto a"), 0.3333333333333333);
        assert_eq!(
            align(&toks("large auto a"), &toks("a big car")),
            [(1, 2), (2, 0)]
        );
        assert_eq!(
            align(&toks("a b a"), &toks("a a b")),
            [(0, 0), (1, 2), (2, 1)]
        );
        assert_eq!(count_chunks(&[(0, 0), (1, 1), (3, 2), (4, 3)]), 2);
        assert_eq!(count_chunks(&[]), 1);
    }

    #[test]
    fn long_inputs_use_hash_path() {
        let hyp: Vec<String> = (0..60).map(|i| format!("w{}", i % 7)).collect();
        let refs: Vec<String> = (0..50).map(|i| format!("w{}", i % 5)).collect();
        let h: Vec<&str> = hyp.iter().map(String::as_str).collect();
        let r: Vec<&str> = refs.iter().map(String::as_str).collect();
        assert_eq!(meteor_tokens(&r, &h, 0.9, 3.0, 0.5), 0.8378656214551938);
    }
}
