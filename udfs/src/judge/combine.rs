//! How one row's calls become its outcome: the samples of one call (repeated judging),
//! the members of a panel, and the turns of a conversation.

use std::sync::Arc;

use futures::future::join_all;

use crate::judge::engine::{CallInputs, JudgeBatch, Outcome, Status};
use crate::judge::messages::Turn;
use crate::judge::rubric::{Rubric, Shape};
use crate::llm::settings::PanelAggregate;
use crate::llm::usage::Usage;

/// What a row came to: its outcome and, where it had them, the scores of its turns,
/// samples and panel members.
pub(super) struct RowResult {
    pub(super) outcome: Outcome,
    pub(super) per_turn: Option<Vec<Option<f64>>>,
    /// Each sample's score (one row, not a conversation, no panel).
    pub(super) samples: Option<Vec<Option<f64>>>,
    /// Each panel member's (model, score, status).
    pub(super) panel: Option<Vec<(String, Option<f64>, &'static str)>>,
    /// What a cascade did (`evalsql.judge.cascade`).
    pub(super) cascade: Option<crate::judge::cascade::CascadeInfo>,
}

impl RowResult {
    /// A row with `outcome` and nothing else.
    pub(super) fn of(outcome: Outcome) -> RowResult {
        RowResult {
            outcome,
            per_turn: None,
            samples: None,
            panel: None,
            cascade: None,
        }
    }

    /// A row not judged (an input was NULL).
    pub(super) fn skipped() -> RowResult {
        RowResult::of(Outcome::skipped())
    }
}

/// How a panel's members combine.
pub(super) struct PanelRule {
    pub(super) models: Vec<String>,
    pub(super) aggregate: PanelAggregate,
    pub(super) min_ok: Option<usize>,
}

impl PanelRule {
    /// The session's panel, if it has one.
    pub(super) fn of(settings: &crate::llm::settings::JudgeSettings) -> Option<PanelRule> {
        (!settings.panel.is_empty()).then(|| PanelRule {
            models: settings.panel.clone(),
            aggregate: settings.panel_aggregate,
            min_ok: settings.panel_min_ok,
        })
    }
}

pub(super) type PanelScores = Vec<(String, Option<f64>, &'static str)>;

/// One call judged by every member and sample: the row's outcome, the samples' scores
/// (without a panel) and each member's score. With `part`, the batches are fused and the
/// row's outcome is that member's part of each call.
pub(super) async fn judge_row(
    batches: &[Vec<JudgeBatch>],
    panel: Option<&PanelRule>,
    inputs: &CallInputs,
    shape: Shape,
    part: Option<usize>,
) -> (Outcome, Vec<Option<f64>>, Option<PanelScores>) {
    let members = join_all(
        batches
            .iter()
            .map(|samples| judge_samples(samples, inputs, shape, part)),
    )
    .await;
    let Some(rule) = panel else {
        let (outcome, samples) = members.into_iter().next().expect("one member");
        return (outcome, samples, None);
    };
    let scores: PanelScores = rule
        .models
        .iter()
        .zip(&members)
        .map(|(m, (o, _))| (m.clone(), o.score, o.status.as_str()))
        .collect();
    (
        combine_panel(&members, rule, shape),
        Vec::new(),
        Some(scores),
    )
}

/// A panel's outcome: the members' scores combined by the rule when at least `min_ok`
/// (default: all) succeeded, else an error naming the first failed member.
pub(super) fn combine_panel(
    members: &[(Outcome, Vec<Option<f64>>)],
    rule: &PanelRule,
    shape: Shape,
) -> Outcome {
    let ok: Vec<f64> = members
        .iter()
        .filter(|(o, _)| o.status == Status::Ok)
        .filter_map(|(o, _)| o.score)
        .collect();
    let mut outcome = Outcome {
        status: Status::Ok,
        score: None,
        reason: None,
        error: None,
        model: Some(rule.models.join(",")),
        cached: members.iter().all(|(o, _)| o.cached),
        usage: Usage::total(members.iter().map(|(o, _)| &o.usage)),
        parts: Vec::new(),
        confidence: None,
    };
    let needed = rule.min_ok.unwrap_or(members.len());
    if ok.len() < needed.max(1) {
        let (i, failed) = members
            .iter()
            .enumerate()
            .find(|(_, (o, _))| o.status != Status::Ok)
            .map(|(i, (o, _))| (i, o))
            .unwrap_or((0, &members[0].0));
        outcome.status = if failed.status == Status::Skipped {
            Status::Skipped
        } else {
            Status::Error
        };
        outcome.error = Some(format!(
            "panel member {}: {}",
            rule.models[i],
            failed.error.as_deref().unwrap_or("no score")
        ));
        return outcome;
    }
    let mut values = ok;
    values.sort_by(f64::total_cmp);
    outcome.score = Some(match rule.aggregate {
        PanelAggregate::Mean => values.iter().sum::<f64>() / values.len() as f64,
        PanelAggregate::Median => {
            let mid = values.len() / 2;
            if values.len() % 2 == 1 {
                values[mid]
            } else if shape == Shape::Quality {
                (values[mid - 1] + values[mid]) / 2.0
            } else {
                values[mid - 1]
            }
        }
        PanelAggregate::Majority => {
            // Sorted, so the first of the most common scores is the lowest.
            let mut best = (values[0], 0usize);
            let mut i = 0;
            while i < values.len() {
                let j = values[i..].iter().take_while(|v| **v == values[i]).count();
                if j > best.1 {
                    best = (values[i], j);
                }
                i += j;
            }
            best.0
        }
    });
    outcome.reason = Some(
        rule.models
            .iter()
            .zip(members)
            .filter_map(|(m, (o, _))| Some(format!("{m}: {}", o.reason.as_deref()?)))
            .collect::<Vec<_>>()
            .join(" | "),
    );
    outcome
}

/// Every sample's judgement of one call, combined.
pub(super) async fn judge_samples(
    batches: &[JudgeBatch],
    inputs: &CallInputs,
    shape: Shape,
    part: Option<usize>,
) -> (Outcome, Vec<Option<f64>>) {
    let outcomes = join_all(batches.iter().map(|b| async move {
        let outcome = b.judge(&b.key(inputs), inputs).await;
        match part {
            Some(i) => Arc::new(outcome.part(i)),
            None => outcome,
        }
    }))
    .await;
    combine_samples(&outcomes, shape)
}

/// The samples of one call as one outcome: the mean score for quality scores, the lower
/// median for severities and flags; an error if any sample failed, not sent if any was
/// not; tokens, dollars and time added up. Also each sample's score.
pub(super) fn combine_samples(
    outcomes: &[Arc<Outcome>],
    shape: Shape,
) -> (Outcome, Vec<Option<f64>>) {
    let scores: Vec<Option<f64>> = outcomes.iter().map(|o| o.score).collect();
    if let [only] = outcomes {
        return (only.as_ref().clone(), scores);
    }
    let mut outcome = Outcome {
        status: Status::Ok,
        score: None,
        reason: outcomes[0].reason.clone(),
        error: None,
        model: outcomes.iter().find_map(|o| o.model.clone()),
        cached: outcomes.iter().all(|o| o.cached),
        usage: Usage::total(outcomes.iter().map(|o| &o.usage)),
        parts: Vec::new(),
        confidence: None,
    };
    if let Some((i, failed)) = outcomes
        .iter()
        .enumerate()
        .find(|(_, o)| o.status != Status::Ok)
    {
        outcome.status = failed.status;
        outcome.reason = None;
        outcome.error = Some(format!(
            "sample {}: {}",
            i + 1,
            failed.error.as_deref().unwrap_or("not judged")
        ));
        return (outcome, scores);
    }
    let mut values: Vec<f64> = scores.iter().flatten().copied().collect();
    outcome.score = match shape {
        Shape::Quality => Some(values.iter().sum::<f64>() / values.len() as f64),
        _ => {
            values.sort_by(f64::total_cmp);
            values.get((values.len() - 1) / 2).copied()
        }
    };
    (outcome, scores)
}

/// The inputs of one conversation turn for `rubric`, or `None` when a required one is
/// missing (e.g. groundedness of a turn without context).
pub(super) fn turn_inputs(rubric: &Rubric, turn: &Turn) -> Option<CallInputs> {
    let mut call = Vec::with_capacity(rubric.inputs.len());
    for input in &rubric.inputs {
        let value = match input.name.as_str() {
            "query" => &turn.query,
            "context" => &turn.context,
            "response" => &turn.response,
            _ => &None,
        };
        match value {
            Some(v) => call.push((input.name.clone(), v.clone())),
            None if input.optional => {}
            None => return None,
        }
    }
    Some(call)
}

/// A conversation's outcome: the mean over judged turns for quality scores, the worst turn
/// for severities and defect flags; an error if any turn failed (the score is then NULL: a
/// value over the turns that happened to succeed would be a guess).
pub(super) fn combine_turns(turns: &[Option<Arc<Outcome>>], shape: Shape) -> RowResult {
    let per_turn: Vec<Option<f64>> = turns
        .iter()
        .map(|t| t.as_ref().and_then(|o| o.score))
        .collect();
    let judged: Vec<(usize, &Outcome)> = turns
        .iter()
        .enumerate()
        .filter_map(|(i, t)| t.as_deref().map(|o| (i, o)))
        .collect();
    if judged.is_empty() {
        return RowResult {
            per_turn: Some(per_turn),
            ..RowResult::skipped()
        };
    }
    let mut outcome = Outcome {
        status: Status::Ok,
        score: None,
        reason: None,
        error: None,
        model: judged.iter().find_map(|(_, o)| o.model.clone()),
        cached: judged.iter().all(|(_, o)| o.cached),
        usage: Usage::total(judged.iter().map(|(_, o)| &o.usage)),
        parts: Vec::new(),
        confidence: None,
    };
    // A turn not sent (over budget, a dry run) leaves the conversation unjudged: a score
    // over the other turns would be a guess.
    if let Some((i, unsent)) = judged
        .iter()
        .find(|(_, o)| o.status == Status::Skipped && o.error.is_some())
    {
        outcome.status = Status::Skipped;
        outcome.error = Some(format!(
            "turn {}: {}",
            i + 1,
            unsent.error.as_deref().unwrap_or("not sent")
        ));
    } else if let Some((i, failed)) = judged.iter().find(|(_, o)| o.status == Status::Error) {
        outcome.status = Status::Error;
        outcome.error = Some(format!(
            "turn {}: {}",
            i + 1,
            failed.error.as_deref().unwrap_or("failed")
        ));
    } else {
        let scores: Vec<f64> = judged.iter().filter_map(|(_, o)| o.score).collect();
        outcome.score = Some(match shape {
            Shape::Quality => scores.iter().sum::<f64>() / scores.len() as f64,
            _ => scores.iter().copied().fold(f64::MIN, f64::max),
        });
        outcome.reason = Some(
            judged
                .iter()
                .map(|(i, o)| format!("turn {}: {}", i + 1, o.reason.as_deref().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(" | "),
        );
    }
    RowResult {
        per_turn: Some(per_turn),
        ..RowResult::of(outcome)
    }
}
