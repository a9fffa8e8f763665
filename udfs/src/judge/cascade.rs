//! Judge cascades (`SET evalsql.judge.cascade = 'small-model'`): a smaller model judges
//! every row first, with a confidence; rows below a calibrated threshold are escalated to
//! the main model (`evalsql.judge.model`), the others keep the small model's score.
//!
//! * The confidence is the probability the small model gave its score token among the
//!   scale's values (`logprobs`, `top_logprobs`), or, where the endpoint returns no
//!   log-probabilities, the share of `cascade_samples` samples that agree with their most
//!   common score.
//! * The threshold comes from `judge_calibrate(metric, query, n)`: both models judge a
//!   seeded random sample of the query's rows, and `kernels::calibration::calibrate` keeps
//!   the loosest threshold at which the small model's agreement with the main model over
//!   the rows it would keep is certified at `cascade_agreement` (one-sided Clopper–Pearson,
//!   level 1 − `cascade_delta`). The result is stored in the judge cache under the metric,
//!   its rubric, both models, the endpoint and the guarantee; a cascade statement without
//!   one is a planning error that names the step.

use std::collections::HashMap;

use datafusion::common::{DataFusionError, Result, plan_err};

use crate::judge::engine::{CallInputs, JudgeBatch, Outcome, Status};
use crate::judge::rubric::Rubric;
use crate::llm::blocking;
use crate::llm::cache::StoredCalibration;
use crate::llm::progress::{CascadeTally, record_cascade};
use crate::llm::settings::{Cascade, JudgeSettings};
use crate::llm::usage::Usage;

/// What the cascade did with one call: `_details.cascade`.
#[derive(Debug, Clone, PartialEq)]
pub struct CascadeInfo {
    /// The small model.
    pub model: String,
    pub confidence: Option<f64>,
    pub escalated: bool,
    /// The calibrated threshold (`None`: none qualified, every row escalates).
    pub threshold: Option<f64>,
}

/// The key a calibration is stored under: the metric's rubric, both models and the endpoint,
/// the guarantee it was made for, and what shapes the confidence it was certified on (the
/// samples, the temperature and the seed): a statement that changes any of them needs a
/// calibration of its own.
pub fn calibration_key(rubric: &Rubric, settings: &JudgeSettings, cascade: &Cascade) -> String {
    use sha2::{Digest, Sha256};
    let text = format!(
        "cascade/1|{}|{}|{}|{}|{}|{}|{}|{}|samples={}|temperature={:?}|seed={:?}",
        rubric.version_tag(),
        rubric.fingerprint(),
        settings.endpoint.url(&settings.model),
        settings.model,
        cascade.model,
        cascade.agreement,
        cascade.delta,
        cascade.tolerance,
        cascade.samples,
        settings.limits.temperature,
        settings.limits.seed,
    );
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The stored calibration a cascade of `metric` uses, or a planning error naming the step.
pub async fn stored_calibration(
    base: &JudgeBatch,
    metric: &str,
    cascade: &Cascade,
) -> Result<StoredCalibration> {
    let Some(cache) = base.cache().cloned() else {
        return plan_err!(
            "{metric}: a cascade reads its calibration from the judge cache, which is off: SET \
             evalsql.judge.cache (or EVALSQL_JUDGE_CACHE) to a file"
        );
    };
    let key = calibration_key(&base.rubric, &base.settings, cascade);
    match blocking(move || cache.calibration(&key)).await? {
        Some(c) => Ok(c),
        None => plan_err!(
            "{metric}: evalsql.judge.cascade = '{}' needs a calibration of {metric} for models \
             {} and {} at cascade_agreement {}, cascade_delta {}, cascade_tolerance {} and \
             cascade_samples {} (and this temperature and seed): run SELECT * FROM \
             judge_calibrate('{metric}', '<a query giving its inputs{}>', 200) first",
            cascade.model,
            base.settings.model,
            cascade.model,
            cascade.agreement,
            cascade.delta,
            cascade.tolerance,
            cascade.samples,
            if metric.contains(',') {
                format!(
                    ", in columns named {}",
                    base.rubric
                        .inputs
                        .iter()
                        .map(|i| i.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else {
                String::new()
            }
        ),
    }
}

/// One call's small-model judgement: its outcome (the most common score of its samples)
/// and its confidence.
struct Small {
    outcome: Outcome,
    confidence: Option<f64>,
}

/// What the small model's requests of one cascade run used: every reply, and the first
/// judgement's alone (one request a call, what the main model alone would have sent).
struct SmallSpent {
    all: (u64, Usage),
    first: (u64, Usage),
}

/// The small model's judgement of each of `calls` (by `base`'s key), with a confidence:
/// from log-probabilities, else from the agreement of `cascade.samples` samples.
async fn judge_small(
    base: &JudgeBatch,
    cascade: &Cascade,
    calls: &[&CallInputs],
) -> Result<(HashMap<String, Small>, SmallSpent)> {
    let mut first = base.small_model(&cascade.model);
    let keyed: Vec<(String, String, &CallInputs)> = calls
        .iter()
        .map(|i| (base.key(i), first.key(i), *i))
        .collect();
    let refs: Vec<(&String, &CallInputs)> = keyed.iter().map(|(_, k, i)| (k, *i)).collect();
    first.ready(&refs, true).await?;
    let mut out = HashMap::new();
    let mut unsure: Vec<(String, &CallInputs, Outcome)> = Vec::new();
    for (main_key, key, inputs) in &keyed {
        let outcome = first.judge(key, inputs).await.as_ref().clone();
        match (outcome.status, outcome.confidence) {
            (Status::Ok, None) => unsure.push((main_key.clone(), inputs, outcome)),
            (_, confidence) => {
                out.insert(
                    main_key.clone(),
                    Small {
                        outcome,
                        confidence,
                    },
                );
            }
        }
    }
    let first_spent = first.spent();
    if unsure.is_empty() {
        let spent = SmallSpent {
            all: first_spent,
            first: first_spent,
        };
        return Ok((out, spent));
    }
    // No log-probabilities: more samples, each its own seed, and their agreement.
    let mut samples: Vec<Vec<Outcome>> = unsure.iter().map(|(_, _, o)| vec![o.clone()]).collect();
    for i in 1..cascade.samples {
        let mut batch = first.sample(i);
        let keyed: Vec<(String, &CallInputs)> = unsure
            .iter()
            .map(|(_, inputs, _)| (batch.key(inputs), *inputs))
            .collect();
        let refs: Vec<(&String, &CallInputs)> = keyed.iter().map(|(k, i)| (k, *i)).collect();
        batch.ready(&refs, true).await?;
        for ((key, inputs), drawn) in keyed.iter().zip(samples.iter_mut()) {
            drawn.push(batch.judge(key, inputs).await.as_ref().clone());
        }
    }
    for ((main_key, _, _), drawn) in unsure.into_iter().zip(samples) {
        out.insert(main_key, agreement_of(drawn));
    }
    // The samples' batches count their replies with the first's.
    let spent = SmallSpent {
        all: first.spent(),
        first: first_spent,
    };
    Ok((out, spent))
}

/// A judgement's scores: its own, or each member's of a fused call.
fn scores_of(o: &Outcome) -> Vec<Option<f64>> {
    if o.parts.is_empty() {
        vec![o.score]
    } else {
        o.parts.iter().map(|p| p.score).collect()
    }
}

/// Samples as one judgement: each score the most common among the samples (ties: the
/// first sample's, else the lowest) and its confidence the share of samples that gave it; a
/// fused call's confidence is its least sure member's, and each member carries every
/// sample's share of the usage. An error if any sample failed.
fn agreement_of(samples: Vec<Outcome>) -> Small {
    let usage = Usage::total(samples.iter().map(|o| &o.usage));
    if let Some(failed) = samples.iter().find(|o| o.status != Status::Ok) {
        // A fused call's members still carry every sample's share of the usage.
        let members = samples.iter().map(|o| o.parts.len()).max().unwrap_or(0);
        let parts = (0..members)
            .map(|m| Outcome {
                // A sample that failed whole counts once, on the first member.
                usage: Usage::total(samples.iter().filter_map(|o| match o.parts.is_empty() {
                    true => (m == 0).then_some(&o.usage),
                    false => o.parts.get(m).map(|p| &p.usage),
                })),
                ..failed.part(m)
            })
            .collect();
        return Small {
            outcome: Outcome {
                usage,
                parts,
                ..failed.clone()
            },
            confidence: None,
        };
    }
    let Some(first) = samples.first() else {
        return Small {
            outcome: Outcome::skipped(),
            confidence: None,
        };
    };
    let scores: Vec<Vec<Option<f64>>> = samples.iter().map(scores_of).collect();
    let mut chosen = first.clone();
    let mut confidence: f64 = 1.0;
    for m in 0..scores[0].len() {
        let column: Vec<Option<f64>> = scores.iter().map(|s| s.get(m).copied().flatten()).collect();
        let count = |v: Option<f64>| column.iter().filter(|x| **x == v).count();
        let best = column.iter().map(|v| count(*v)).max().unwrap_or(0);
        let mode = if count(column[0]) == best {
            column[0]
        } else {
            column
                .iter()
                .filter(|v| count(**v) == best)
                .min_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal))
                .copied()
                .unwrap_or(column[0])
        };
        let from = column.iter().position(|v| *v == mode).unwrap_or(0);
        let share = best as f64 / column.len() as f64;
        confidence = confidence.min(share);
        if first.parts.is_empty() {
            chosen = samples[from].clone();
        } else {
            chosen.parts[m] = Outcome {
                usage: Usage::total(
                    samples
                        .iter()
                        .filter_map(|o| o.parts.get(m))
                        .map(|p| &p.usage),
                ),
                confidence: Some(share),
                ..samples[from].part(m)
            };
        }
    }
    Small {
        confidence: Some(confidence),
        outcome: Outcome {
            usage,
            confidence: Some(confidence),
            ..chosen
        },
    }
}

/// Every call of `calls` through the cascade: the small model first, escalations to the
/// main model (`base`); each call's outcome and what the cascade did, by `base`'s key.
pub(super) async fn judge_cascade(
    base: &JudgeBatch,
    cascade: &Cascade,
    calibration: &StoredCalibration,
    calls: &[&CallInputs],
) -> Result<HashMap<String, (Outcome, CascadeInfo)>> {
    let threshold = calibration.threshold;
    let (small, small_spent) = judge_small(base, cascade, calls).await?;
    if base.settings.dry_run {
        // Nothing is judged, so nothing is known to escalate: the estimate counts every
        // row's main-model call as "<metric> escalated" (the worst case) and expects the
        // calibration's escalated share of it.
        let mut main = base.sample(0);
        main.escalations = true;
        for metric in main.metrics() {
            crate::llm::estimate::note_expected_share(
                &main.estimate_label(&metric),
                if threshold.is_some() {
                    calibration.escalated_share
                } else {
                    1.0
                },
            );
        }
        for inputs in calls {
            main.judge(&main.key(inputs), inputs).await;
        }
    }
    let escalate = |s: &Small| match (threshold, s.confidence, s.outcome.status) {
        (Some(t), Some(c), Status::Ok) => c < t,
        // A not-sent row (budget, dry run) is not escalated: it was not judged.
        (_, _, Status::Skipped) => false,
        _ => true,
    };
    let mut main = base.sample(0);
    let escalated: Vec<(String, &CallInputs)> = calls
        .iter()
        .map(|i| (main.key(i), *i))
        .filter(|(k, _)| small.get(k).is_some_and(escalate))
        .collect();
    let refs: Vec<(&String, &CallInputs)> = escalated.iter().map(|(k, i)| (k, *i)).collect();
    main.ready(&refs, true).await?;
    let inputs_of: HashMap<&String, &CallInputs> = escalated.iter().map(|(k, i)| (k, *i)).collect();
    let mut out = HashMap::new();
    for (key, s) in small {
        let info = CascadeInfo {
            model: cascade.model.clone(),
            confidence: s.confidence,
            escalated: escalate(&s),
            threshold,
        };
        let outcome = if info.escalated {
            let inputs = *inputs_of
                .get(&key)
                .ok_or_else(|| DataFusionError::Internal("an escalation without inputs".into()))?;
            let judged = main.judge(&key, inputs).await;
            let mut outcome = Outcome {
                usage: Usage::total([&s.outcome.usage, &judged.usage]),
                cached: judged.cached && s.outcome.cached,
                ..judged.as_ref().clone()
            };
            // A fused call's members each carry their share of both models' calls.
            for (i, part) in outcome.parts.iter_mut().enumerate() {
                part.usage = Usage::total([&s.outcome.part(i).usage, &part.usage]);
            }
            outcome
        } else {
            s.outcome
        };
        out.insert(key, (outcome, info));
    }
    if !base.settings.dry_run {
        record_cascade(
            &calibration_key(&base.rubric, &base.settings, cascade),
            tally(base, calibration, &small_spent, main.spent()),
            out.iter().map(|(k, (_, i))| (k.as_str(), i.escalated)),
        );
    }
    Ok(out)
}

/// One cascade run's requests and dollars, for the summary line and `judge_cascades()`.
fn tally(
    base: &JudgeBatch,
    calibration: &StoredCalibration,
    small: &SmallSpent,
    (main_calls, main): (u64, Usage),
) -> CascadeTally {
    let (small_calls, all) = small.all;
    let (first_calls, first) = small.first;
    // The main model alone would have been asked what the small model was asked first:
    // the same prompts, answers of about the same length, at the main model's rates.
    let main_alone_usd = match (first.prompt_tokens, first.completion_tokens) {
        (Some(prompt), Some(completion)) => {
            base.settings.price_of(Some(&base.settings.model)).map(|p| {
                p.cost(
                    prompt,
                    first.cached_tokens.unwrap_or(0),
                    completion,
                    base.discount(),
                )
            })
        }
        _ => None,
    };
    CascadeTally {
        metric: calibration.metric.clone(),
        model: calibration.model.clone(),
        small_model: calibration.small_model.clone(),
        threshold: calibration.threshold,
        agreement: calibration.agreement,
        lower_bound: calibration.lower_bound,
        sample_size: calibration.sample_size,
        // Counted from the calls by `record_cascade`.
        rows: 0,
        escalated: 0,
        small_calls,
        main_calls,
        cost_usd: Usage::total([&all, &main]).cost_usd,
        main_alone_calls: first_calls,
        main_alone_usd,
    }
}

/// A calibration sample judged by both models: for each call both succeeded on, the small
/// model's confidence and whether the two agree (every judged member of a fused call within
/// `cascade.tolerance`).
pub(super) async fn judge_cascade_sample(
    base: &JudgeBatch,
    cascade: &Cascade,
    calls: &[&CallInputs],
) -> Result<Vec<(f64, bool)>> {
    let (small, _) = judge_small(base, cascade, calls).await?;
    let mut main = base.sample(0);
    let keyed: Vec<(String, &CallInputs)> = calls.iter().map(|i| (main.key(i), *i)).collect();
    let refs: Vec<(&String, &CallInputs)> = keyed.iter().map(|(k, i)| (k, *i)).collect();
    main.ready(&refs, true).await?;
    let mut out = Vec::with_capacity(keyed.len());
    for (key, inputs) in &keyed {
        let judged = main.judge(key, inputs).await;
        let Some(s) = small.get(key) else { continue };
        if let (Status::Ok, Status::Ok, Some(confidence)) =
            (judged.status, s.outcome.status, s.confidence)
        {
            let tolerance = cascade.tolerance as f64;
            let agrees = scores_of(&s.outcome)
                .iter()
                .zip(scores_of(&judged))
                .all(|(a, b)| match (a, b) {
                    (Some(a), Some(b)) => (a - b).abs() <= tolerance,
                    (None, None) => true,
                    _ => false,
                });
            out.push((confidence, agrees));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(score: f64) -> Outcome {
        Outcome {
            status: Status::Ok,
            score: Some(score),
            ..Outcome::skipped()
        }
    }

    #[test]
    fn samples_agree_on_their_most_common_score() {
        let s = agreement_of(vec![ok(4.0), ok(3.0), ok(3.0)]);
        assert_eq!(s.outcome.score, Some(3.0));
        assert!((s.confidence.unwrap() - 2.0 / 3.0).abs() < 1e-12);
        let s = agreement_of(vec![ok(4.0), ok(3.0)]);
        assert_eq!(s.outcome.score, Some(4.0), "a tie keeps the first sample's");
        assert_eq!(s.confidence, Some(0.5));
        let failed = Outcome {
            status: Status::Error,
            ..Outcome::skipped()
        };
        let s = agreement_of(vec![ok(4.0), failed]);
        assert_eq!(s.outcome.status, Status::Error);
        assert_eq!(s.confidence, None);
    }

    /// A fused call's samples: each member its own most common score, the call's confidence
    /// its least sure member's, and each member carrying every sample's share of the usage.
    #[test]
    fn a_fused_calls_samples_agree_member_by_member() {
        let fused = |a: f64, b: f64| {
            let part = |score: f64| Outcome {
                usage: Usage {
                    prompt_tokens: Some(10),
                    ..Usage::default()
                },
                ..ok(score)
            };
            Outcome {
                parts: vec![part(a), part(b)],
                usage: Usage {
                    prompt_tokens: Some(20),
                    ..Usage::default()
                },
                ..ok(0.0)
            }
        };
        // No two samples agree on both members; each member has a majority.
        let s = agreement_of(vec![fused(4.0, 2.0), fused(4.0, 3.0), fused(5.0, 3.0)]);
        assert_eq!(scores_of(&s.outcome), [Some(4.0), Some(3.0)]);
        assert!((s.confidence.unwrap() - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(s.outcome.usage.prompt_tokens, Some(60));
        for part in &s.outcome.parts {
            assert_eq!(part.usage.prompt_tokens, Some(30));
        }
        // A failed sample fails the call; its members still add up to every sample's usage.
        let failed = Outcome {
            status: Status::Error,
            usage: Usage {
                prompt_tokens: Some(20),
                ..Usage::default()
            },
            ..Outcome::skipped()
        };
        let s = agreement_of(vec![fused(4.0, 2.0), failed]);
        assert_eq!(s.outcome.status, Status::Error);
        let members: i64 = s
            .outcome
            .parts
            .iter()
            .map(|p| p.usage.prompt_tokens.unwrap())
            .sum();
        assert_eq!(members, 40);
        assert_eq!(s.outcome.usage.prompt_tokens, Some(40));
    }
}
