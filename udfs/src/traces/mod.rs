//! Agents observed through OpenTelemetry: [`otlp`] reads OTLP/JSON trace files as a table of
//! spans (`read_otlp`), and [`trajectory_agg`] turns a trace's tool-call spans into the
//! trajectory the agent metrics score.

pub mod otlp;
pub mod spans;
pub mod trajectory_agg;

/// The traces family's functions: `read_otlp` and `trajectory_agg`.
pub fn functions() -> crate::common::Functions {
    use std::sync::Arc;

    use datafusion::logical_expr::AggregateUDF;
    crate::common::Functions {
        aggregate: vec![Arc::new(AggregateUDF::new_from_impl(
            trajectory_agg::TrajectoryAggFunc::default(),
        ))],
        table: vec![("read_otlp", Arc::new(otlp::ReadOtlpFunc))],
        ..Default::default()
    }
}
