//! Vertex-AI-style agent metrics: trajectory metrics (sequences of tool calls an agent made)
//! and tool-call metrics (the tool calls of a single model response).
//!
//! The kernels here are plain Rust on parsed values; the SQL wrappers live next to them.
//! Where Vertex's documentation is silent, `tests/golden/make_golden.py` ("VERTEX-STYLE AGENT
//! METRICS", AMBIGUOUS 1–5) is the specification. JSON is read the way Python's `json.loads`
//! reads it and values are compared by their Python canonical form
//! (`json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)`), see
//! [`trajectory`].

pub mod task_navigation;
pub mod tool_call;
pub mod tool_call_functions;
pub mod trajectory;
pub mod trajectory_functions;

use std::sync::Arc;

use datafusion::logical_expr::ScalarUDF;

use tool_call_functions::ToolCallFunc;
use trajectory_functions::TrajectoryFunc;

/// Every agent metric.
pub fn scalar_functions() -> Vec<Arc<ScalarUDF>> {
    [
        TrajectoryFunc::exact_match(),
        TrajectoryFunc::in_order_match(),
        TrajectoryFunc::any_order_match(),
        TrajectoryFunc::precision(),
        TrajectoryFunc::recall(),
        TrajectoryFunc::single_tool_use(),
    ]
    .into_iter()
    .map(|f| Arc::new(ScalarUDF::from(f)))
    .chain(
        [
            ToolCallFunc::valid(),
            ToolCallFunc::name_match(),
            ToolCallFunc::parameter_key_match(),
            ToolCallFunc::parameter_kv_match(),
        ]
        .into_iter()
        .map(|f| Arc::new(ScalarUDF::from(f))),
    )
    .chain(std::iter::once(Arc::new(ScalarUDF::from(
        task_navigation::TaskNavigationFunc::default(),
    ))))
    .collect()
}

/// The agent family's functions.
pub fn functions() -> crate::common::Functions {
    crate::common::Functions {
        scalar: scalar_functions(),
        ..Default::default()
    }
}
