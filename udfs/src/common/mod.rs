//! What every evalsql function shares: reading string arguments in any Arrow encoding,
//! building results, signatures, documentation sections and error messages.

pub mod args;
pub mod docs;
pub mod excerpt;
pub(crate) mod pyjson;
pub mod signature;

pub use args::{
    BoolArg, F64Arg, RefsArg, StrArg, argument_arrays, float64_rows, invoke_text_pair,
    invoke_text_refs, json_values, prepare_args, texts, truncate_for_error,
};
