//! Agents observed through OpenTelemetry: [`otlp`] reads OTLP/JSON trace files as a table of
//! spans (`read_otlp`), and [`trajectory_agg`] turns a trace's tool-call spans into the
//! trajectory the agent metrics score.

pub mod otlp;
pub mod trajectory_agg;
