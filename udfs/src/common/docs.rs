//! Documentation sections of the function catalogue (`SHOW FUNCTIONS`, `evalsql functions`).

use datafusion::logical_expr::DocSection;

pub const TEXT_METRICS: DocSection = DocSection {
    include: true,
    label: "Text metrics",
    description: Some("Deterministic metrics comparing a response with its ground truth."),
};

pub const CORPUS_METRICS: DocSection = DocSection {
    include: true,
    label: "Corpus metrics",
    description: Some("Aggregates scoring a whole group of responses at once."),
};

pub const AGENT_METRICS: DocSection = DocSection {
    include: true,
    label: "Agent metrics",
    description: Some("Trajectory and tool-call metrics of agent runs."),
};

pub const RETRIEVAL_METRICS: DocSection = DocSection {
    include: true,
    label: "Retrieval metrics",
    description: Some("Ranked-retrieval measures of the documents a RAG app retrieved."),
};

pub const JUDGE_METRICS: DocSection = DocSection {
    include: true,
    label: "AI-assisted quality metrics",
    description: Some(
        "LLM-judged scores (1-5) through the judge engine: limits, retries, cache, errors as data.",
    ),
};

pub const SAFETY_METRICS: DocSection = DocSection {
    include: true,
    label: "Risk and safety metrics",
    description: Some(
        "LLM-judged harm severities (0-7), defect flags, and defect rates over them.",
    ),
};

pub const TARGETS: DocSection = DocSection {
    include: true,
    label: "Targets",
    description: Some("Producing responses to evaluate: the model under test, or an app."),
};

pub const STATISTICS: DocSection = DocSection {
    include: true,
    label: "Statistics",
    description: Some("Aggregates for comparing systems: rates, confidence intervals, tests."),
};
