//! The LLM judge: AI-assisted quality metrics as SQL functions, and the engine behind them.
//!
//! The pure core, without I/O:
//! * [`request`]: where a call goes ([`request::Endpoint`], OpenAI or Azure), its JSON body
//!   ([`request::ChatRequest`], asking for a `json_schema` score), reading the reply
//!   ([`request::parse_chat_response`]) and the call's cache address ([`request::cache_key`]).
//! * [`parse`]: turning the model's text into a score, tolerant of endpoints that ignore the
//!   schema, but never guessing ([`parse::parse_judgement`]).
//! * [`retry`]: which failures are worth another attempt and how long to wait
//!   ([`retry::classify`], [`retry::RetryContext`]), and a secret-free [`retry::RetryError`].
//! * [`limiter`]: the process-wide adaptive concurrency limit and RPM/TPM pacing, one per
//!   endpoint + model ([`limiter::limiter_for`]).
//! * [`rubric`]: the rubric files under `udfs/rubrics/`.
//! * [`config`]: settings from the environment and `SET evalsql.judge.*`.
//!
//! On top of it: [`client`] (HTTP with retries), [`cache`] (SQLite, shared between
//! processes), [`engine`] (one outcome per distinct request), [`progress`] (counters, the
//! progress bar and summary line), and the SQL functions in [`functions`], [`messages`] and
//! [`safety`] (`defect_rate`).

pub mod cache;
pub mod client;
pub mod config;
pub mod custom;
pub mod engine;
pub mod functions;
pub mod limiter;
pub mod messages;
pub mod pairwise;
pub mod parse;
pub mod progress;
pub mod request;
pub mod retry;
pub mod rubric;
pub mod safety;
pub mod target;
