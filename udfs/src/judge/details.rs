//! The `_details` struct of a judge function: its fields for each result shape, and the
//! array built from a batch's row results.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, BooleanBuilder, Float64Array, Float64Builder, Int32Array, Int32Builder,
    ListBuilder, StringBuilder, StructArray, StructBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Fields};

use crate::judge::combine::RowResult;
use crate::judge::rubric::{Rubric, Shape};
use crate::judge::safety::severity_label;
use crate::llm::usage::{Usage, UsageColumns};

/// The fields every `_details` struct shares after its score fields.
pub(super) fn outcome_fields() -> Vec<Field> {
    let mut fields = vec![
        Field::new("reason", DataType::Utf8, true),
        Field::new("status", DataType::Utf8, true),
        Field::new("error", DataType::Utf8, true),
        Field::new("model", DataType::Utf8, true),
        Field::new("cached", DataType::Boolean, true),
    ];
    fields.extend(Usage::fields());
    fields.extend([
        Field::new(
            "samples",
            DataType::List(Arc::new(Field::new("item", DataType::Float64, true))),
            true,
        ),
        Field::new("spread", DataType::Float64, true),
        Field::new(
            "panel",
            DataType::List(Arc::new(Field::new(
                "item",
                DataType::Struct(panel_fields()),
                true,
            ))),
            true,
        ),
    ]);
    fields
}

pub(super) fn panel_fields() -> Fields {
    Fields::from(vec![
        Field::new("model", DataType::Utf8, true),
        Field::new("score", DataType::Float64, true),
        Field::new("status", DataType::Utf8, true),
    ])
}

/// The fields of `<metric>_details` for a metric of `scale`.
pub fn details_fields(shape: Shape) -> Fields {
    let list = |t: DataType| DataType::List(Arc::new(Field::new("item", t, true)));
    let (mut fields, per_turn) = match shape {
        Shape::Quality => (
            vec![
                Field::new("score", DataType::Float64, true),
                Field::new("passed", DataType::Boolean, true),
                Field::new("threshold", DataType::Float64, true),
            ],
            DataType::Float64,
        ),
        Shape::Severity => (
            vec![
                Field::new("severity_score", DataType::Int32, true),
                Field::new("severity_label", DataType::Utf8, true),
                Field::new("passed", DataType::Boolean, true),
                Field::new("threshold", DataType::Float64, true),
            ],
            DataType::Int32,
        ),
        Shape::Label => (
            vec![Field::new("label", DataType::Boolean, true)],
            DataType::Boolean,
        ),
        Shape::Kind => (
            vec![
                Field::new("label", DataType::Boolean, true),
                Field::new("kind", DataType::Utf8, true),
            ],
            DataType::Boolean,
        ),
    };
    fields.extend(outcome_fields());
    fields.push(Field::new("per_turn", list(per_turn), true));
    // The metrics that shared the row's call (`evalsql.judge.fuse`); NULL when unfused.
    fields.push(Field::new("fused", list(DataType::Utf8), true));
    // What a cascade did (`evalsql.judge.cascade`); NULL without one.
    fields.push(Field::new(
        "cascade",
        DataType::Struct(cascade_fields()),
        true,
    ));
    Fields::from(fields)
}

fn cascade_fields() -> Fields {
    Fields::from(vec![
        Field::new("model", DataType::Utf8, true),
        Field::new("confidence", DataType::Float64, true),
        Field::new("escalated", DataType::Boolean, true),
        Field::new("threshold", DataType::Float64, true),
    ])
}

pub(super) fn details_array(
    shape: Shape,
    rubric: &Rubric,
    rows: &[RowResult],
    threshold: f64,
    fused: Option<&[String]>,
) -> StructArray {
    let scores = || rows.iter().map(|r| r.outcome.score);
    let mut columns: Vec<ArrayRef> = match shape {
        Shape::Quality => vec![
            Arc::new(scores().collect::<Float64Array>()),
            Arc::new(
                scores()
                    .map(|s| s.map(|s| s >= threshold))
                    .collect::<BooleanArray>(),
            ),
            Arc::new(Float64Array::from(vec![threshold; rows.len()])),
        ],
        Shape::Severity => vec![
            Arc::new(
                scores()
                    .map(|s| s.map(|s| s as i32))
                    .collect::<Int32Array>(),
            ),
            Arc::new(
                scores()
                    .map(|s| s.map(|s| severity_label(s as i32)))
                    .collect::<datafusion::arrow::array::StringArray>(),
            ),
            Arc::new(
                scores()
                    .map(|s| s.map(|s| s <= threshold))
                    .collect::<BooleanArray>(),
            ),
            Arc::new(Float64Array::from(vec![threshold; rows.len()])),
        ],
        Shape::Label => vec![Arc::new(
            scores()
                .map(|s| s.map(|s| s > 0.0))
                .collect::<BooleanArray>(),
        )],
        Shape::Kind => vec![
            Arc::new(
                scores()
                    .map(|s| s.map(|s| s > 0.0))
                    .collect::<BooleanArray>(),
            ),
            Arc::new(
                scores()
                    .map(|s| s.and_then(|s| rubric.kind_of(s as i64)))
                    .collect::<datafusion::arrow::array::StringArray>(),
            ),
        ],
    };
    let mut reason = StringBuilder::new();
    let mut status = StringBuilder::new();
    let mut error = StringBuilder::new();
    let mut model = StringBuilder::new();
    let mut cached = BooleanBuilder::new();
    let mut usage = UsageColumns::default();
    for r in rows {
        let o = &r.outcome;
        reason.append_option(o.reason.as_deref());
        status.append_value(o.status.as_str());
        error.append_option(o.error.as_deref());
        model.append_option(o.model.as_deref());
        cached.append_value(o.cached);
        usage.append(Some(&o.usage));
    }
    columns.push(Arc::new(reason.finish()));
    columns.push(Arc::new(status.finish()));
    columns.push(Arc::new(error.finish()));
    columns.push(Arc::new(model.finish()));
    columns.push(Arc::new(cached.finish()));
    columns.extend(usage.finish());
    let mut sample_list = ListBuilder::new(Float64Builder::new());
    let mut spread = Float64Builder::new();
    for r in rows {
        match &r.samples {
            Some(scores) => {
                for v in scores {
                    sample_list.values().append_option(*v);
                }
                sample_list.append(true);
                // The population standard deviation of the scores (0 for one sample).
                let present: Vec<f64> = scores.iter().flatten().copied().collect();
                spread.append_option((present.len() == scores.len() && !present.is_empty()).then(
                    || {
                        let mean = present.iter().sum::<f64>() / present.len() as f64;
                        (present.iter().map(|x| (x - mean).powi(2)).sum::<f64>()
                            / present.len() as f64)
                            .sqrt()
                    },
                ));
            }
            None => {
                sample_list.append(false);
                spread.append_null();
            }
        }
    }
    columns.push(Arc::new(sample_list.finish()));
    columns.push(Arc::new(spread.finish()));
    let mut panel = ListBuilder::new(StructBuilder::from_fields(panel_fields(), 0));
    for r in rows {
        match &r.panel {
            Some(members) => {
                let items = panel.values();
                for (model, score, status) in members {
                    items
                        .field_builder::<StringBuilder>(0)
                        .expect("model")
                        .append_value(model);
                    items
                        .field_builder::<Float64Builder>(1)
                        .expect("score")
                        .append_option(*score);
                    items
                        .field_builder::<StringBuilder>(2)
                        .expect("status")
                        .append_value(status);
                    items.append(true);
                }
                panel.append(true);
            }
            None => panel.append(false),
        }
    }
    columns.push(Arc::new(panel.finish()));
    columns.push(match shape {
        Shape::Quality => per_turn_list(rows, Float64Builder::new(), |b, v| b.append_option(v)),
        Shape::Severity => per_turn_list(rows, Int32Builder::new(), |b, v| {
            b.append_option(v.map(|v| v as i32))
        }),
        Shape::Label | Shape::Kind => per_turn_list(rows, BooleanBuilder::new(), |b, v| {
            b.append_option(v.map(|v| v > 0.0))
        }),
    });
    let mut fused_list = ListBuilder::new(StringBuilder::new());
    for r in rows {
        match fused {
            Some(metrics) if r.outcome.status != crate::judge::engine::Status::Skipped => {
                for m in metrics {
                    fused_list.values().append_value(m);
                }
                fused_list.append(true);
            }
            _ => fused_list.append(false),
        }
    }
    columns.push(Arc::new(fused_list.finish()));
    let mut cascade = StructBuilder::from_fields(cascade_fields(), rows.len());
    for r in rows {
        let c = r.cascade.as_ref();
        cascade
            .field_builder::<StringBuilder>(0)
            .expect("model")
            .append_option(c.map(|c| c.model.as_str()));
        cascade
            .field_builder::<Float64Builder>(1)
            .expect("confidence")
            .append_option(c.and_then(|c| c.confidence));
        cascade
            .field_builder::<BooleanBuilder>(2)
            .expect("escalated")
            .append_option(c.map(|c| c.escalated));
        cascade
            .field_builder::<Float64Builder>(3)
            .expect("threshold")
            .append_option(c.and_then(|c| c.threshold));
        cascade.append(c.is_some());
    }
    columns.push(Arc::new(cascade.finish()));
    StructArray::new(details_fields(shape), columns, None)
}

/// `per_turn` as a list column (NULL for rows that are not conversations).
pub(super) fn per_turn_list<B: datafusion::arrow::array::ArrayBuilder>(
    rows: &[RowResult],
    values: B,
    mut push: impl FnMut(&mut B, Option<f64>),
) -> ArrayRef {
    let mut list = ListBuilder::new(values);
    for r in rows {
        match &r.per_turn {
            Some(turns) => {
                for t in turns {
                    push(list.values(), *t);
                }
                list.append(true);
            }
            None => list.append(false),
        }
    }
    Arc::new(list.finish())
}
