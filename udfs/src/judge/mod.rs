//! The LLM-judge engine's pure core: everything about a judge call that involves no I/O.
//!
//! * [`request`]: where a call goes ([`request::Endpoint`], OpenAI or Azure), its JSON body
//!   ([`request::ChatRequest`], asking for a `json_schema` score), reading the reply
//!   ([`request::parse_chat_response`]) and the call's cache address ([`request::cache_key`]).
//! * [`parse`]: turning the model's text into a score, tolerant of endpoints that ignore the
//!   schema, but never guessing ([`parse::parse_judgement`]).
//! * [`retry`]: which failures are worth another attempt and how long to wait
//!   ([`retry::classify`], [`retry::RetryContext`]), and a secret-free [`retry::RetryError`].
//! * [`limiter`]: the process-wide adaptive concurrency limit and RPM/TPM pacing, one per
//!   endpoint + model ([`limiter::limiter_for`]).
//!
//! The transport (HTTP client, timeouts), the cache and the SQL functions build on these.

pub mod limiter;
pub mod parse;
pub mod request;
pub mod retry;
