//! Signatures shared by the metric functions, and the planning errors they raise.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::types::{NativeType, logical_boolean, logical_float64, logical_string};
use datafusion::common::{Result, plan_err};
use datafusion::logical_expr::{
    Coercion, Signature, TypeSignature, TypeSignatureClass, Volatility,
};

/// What one parameter accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// A string (Utf8, LargeUtf8, Utf8View, dictionary).
    Text,
    /// One reference string or a list of them.
    Refs,
    Bool,
    /// A number, read as Float64.
    Float,
}

fn coercion(p: Param) -> Coercion {
    match p {
        Param::Text | Param::Refs => {
            Coercion::new_exact(TypeSignatureClass::Native(logical_string()))
        }
        Param::Bool => Coercion::new_exact(TypeSignatureClass::Native(logical_boolean())),
        Param::Float => Coercion::new_implicit(
            TypeSignatureClass::Native(logical_float64()),
            vec![TypeSignatureClass::Numeric],
            NativeType::Float64,
        ),
    }
}

/// A fixed-arity signature with named parameters: strings stay in their own encoding
/// (Utf8, LargeUtf8, Utf8View), nothing else is cast implicitly, and a mismatch is a
/// planning error that lists `name(param: Type, ...)`.
pub fn named(params: &[(&str, Param)]) -> Signature {
    let sig = Signature::coercible(
        params.iter().map(|(_, p)| coercion(*p)).collect(),
        Volatility::Immutable,
    );
    sig.with_parameter_names(params.iter().map(|(n, _)| *n).collect())
        .expect("parameter names match the arity")
}

/// A string type (or NULL, which becomes one).
pub fn is_text(t: &DataType) -> bool {
    match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => true,
        DataType::Dictionary(_, v) => is_text(v),
        _ => false,
    }
}

fn is_text_list(t: &DataType) -> bool {
    match t {
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::FixedSizeList(f, _)
        | DataType::ListView(f)
        | DataType::LargeListView(f) => is_text(f.data_type()),
        _ => false,
    }
}

/// A signature whose coercion is [`coerce_params`]: for optional trailing parameters and
/// list-or-string references, which DataFusion's declarative signatures cannot express
/// with a readable error.
pub fn user_defined() -> Signature {
    Signature::new(TypeSignature::UserDefined, Volatility::Immutable)
}

/// Checks `arg_types` against the accepted `forms` (parameter lists, shortest first) and
/// returns them unchanged (the argument driver reads every string and list encoding), with
/// NULL literals typed. A mismatch is a planning error naming the function and `usage`.
pub fn coerce_params(
    function: &str,
    usage: &str,
    arg_types: &[DataType],
    forms: &[&[Param]],
) -> Result<Vec<DataType>> {
    let fits = |form: &[Param]| {
        form.len() == arg_types.len()
            && form.iter().zip(arg_types).all(|(p, t)| match p {
                Param::Text => is_text(t),
                Param::Refs => is_text(t) || is_text_list(t),
                Param::Bool => matches!(t, DataType::Boolean | DataType::Null),
                Param::Float => t.is_numeric() || t.is_null(),
            })
    };
    let Some(form) = forms.iter().find(|f| fits(f)) else {
        let got = arg_types
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        return plan_err!("{function}({got}) does not match {usage}");
    };
    Ok(form
        .iter()
        .zip(arg_types)
        .map(|(p, t)| match (p, t) {
            (Param::Float, _) => DataType::Float64,
            (Param::Bool, DataType::Null) => DataType::Boolean,
            (_, DataType::Null) => DataType::Utf8,
            (_, t) => t.clone(),
        })
        .collect())
}
