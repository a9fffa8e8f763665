//! Retrieval metrics: how well a retriever ranked the documents a RAG app then reads.
//!
//! [`functions`] holds the ranked-list measures as trec_eval defines them (nDCG, precision,
//! recall, hit rate at k, reciprocal rank, average precision), over a ranked list of ids and
//! graded judgements ([`input`] reads every encoding, [`ranking`] computes).
//! [`document_retrieval`] is Azure AI Evaluation's `DocumentRetrievalEvaluator` as one
//! struct-valued function.

pub mod document_retrieval;
pub mod functions;
pub mod input;
pub mod ranking;

use std::sync::Arc;

use datafusion::logical_expr::ScalarUDF;

use functions::RetrievalFunc;

/// Every retrieval metric.
pub fn scalar_functions() -> Vec<Arc<ScalarUDF>> {
    [
        RetrievalFunc::ndcg(),
        RetrievalFunc::precision(),
        RetrievalFunc::recall(),
        RetrievalFunc::hit_rate(),
        RetrievalFunc::reciprocal_rank(),
        RetrievalFunc::average_precision(),
    ]
    .into_iter()
    .map(|f| Arc::new(ScalarUDF::from(f)))
    .chain(std::iter::once(Arc::new(ScalarUDF::from(
        document_retrieval::DocumentRetrievalFunc::default(),
    ))))
    .collect()
}

/// The retrieval family's functions.
pub fn functions() -> crate::common::Functions {
    crate::common::Functions {
        scalar: scalar_functions(),
        ..Default::default()
    }
}
